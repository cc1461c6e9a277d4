"""Container tests: the image, deploy/docker-compose.yml, and a storage node killed under load.

Four tests, slowest last:

- the image built from deploy/Dockerfile is small, runs as a non-root user, carries no pip or
  compiler, and refuses to start without a role;
- `up` of deploy/docker-compose.yml, with each Compose found on this machine (v1
  `docker-compose`, v2 `docker compose`), returns a cluster that answers at once, and two routers
  serve the same table;
- a cluster started with testcontainers from the compose file's own settings (environment,
  hostnames, healthchecks) takes a boto3 workload; one storage node is killed with SIGKILL; the keys
  of its partitions fail fast with a DynamoDB-shaped error while every other key still works; the
  node is started again and every acknowledged write is there;
- the same cluster with `DYNALAB_REPLICATION_FACTOR=3` (every partition and the catalog a Raft
  group across the three nodes): with any one node killed every key still reads and writes, a
  table is created and deleted, and after the node's return every acknowledged write is there.

Every wait has a deadline, the boto3 client never retries and times out after a few seconds, and
every container, network and volume a test made is removed at the end (the image is kept, so that
the next run builds from cache). Needs a Docker engine (`shared/tools/docker-sandbox` starts one);
without one the tests are skipped, unless DYNALAB_REQUIRE_DOCKER=1 makes that a failure.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

docker = pytest.importorskip("docker")
boto3 = pytest.importorskip("boto3")
pytest.importorskip("testcontainers")

from botocore.config import Config  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402
from testcontainers.core.container import DockerContainer  # noqa: E402
from testcontainers.core.image import DockerImage  # noqa: E402
from testcontainers.core.network import Network  # noqa: E402

from core.catalog import PartitionDef  # noqa: E402
from core.keycodec import encode_storage_key  # noqa: E402
from core.placement import HashRing, PartitionMap  # noqa: E402
from router.context import RouterContext  # noqa: E402
from rpc import ops  # noqa: E402

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]
COMPOSE_FILE = REPO / "deploy" / "docker-compose.yml"
IMAGE_TAG = os.environ.get("DYNALAB_TEST_IMAGE", "dynalab:test")
IMAGE_SIZE_BYTES_MAX = 400 * 1024 * 1024  # Base image (~130-190 MB) plus a ~65 MB virtualenv.
IMAGE_BUILD_SECONDS_MAX = 600  # Target is < 180 s cold on 2 cores; this only bounds a stuck build.

NODE_SERVICES = ["storagenode-1", "storagenode-2", "storagenode-3"]
NODE_PORT = 7001
ROUTER_PORT = 8000

CLUSTER_HEALTHY_SECONDS_MAX = 120.0  # From `docker start` to every healthcheck passing.
COMPOSE_COMMAND_SECONDS_MAX = 600.0  # One `compose up` (it may build) or `compose down`.
TABLE_ACTIVE_SECONDS_MAX = 60.0
CONTAINER_EXIT_SECONDS_MAX = 30.0
RECOVERY_SECONDS_MAX = 90.0  # From the restarted node's healthy state to every key readable.
REQUEST_SECONDS_MAX = 10.0  # One failing request must end well within this: an error, not a hang.

WORKLOAD_TABLE = "deploy_workload"
WORKLOAD_ITEMS = 300
# A provisioned table gets one partition per 1,000 WCU (core.placement.initial_partition_count), so
# 9,000 WCU spreads it over 9 partitions: every node of three holds some with near certainty.
WORKLOAD_WCU = 9000
PROBE_KEYS_PER_SIDE = 6  # Keys read on each side (dead node / live nodes) while the node is down.
OUTAGE_WRITES = 24


# Docker -------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def docker_client() -> Iterator[Any]:
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as error:  # Any failure here means "no usable engine".
        if os.environ.get("DYNALAB_REQUIRE_DOCKER") == "1":
            pytest.fail(f"DYNALAB_REQUIRE_DOCKER=1 but no Docker engine answers: {error}")
        pytest.skip(f"no Docker engine answers ({error}); run shared/tools/docker-sandbox")
    yield client
    client.close()


@pytest.fixture(scope="module")
def image(docker_client: Any) -> str:
    """The dynalab image, built from the working tree by deploy/Dockerfile (layers cached)."""
    started = time.monotonic()
    DockerImage(
        path=str(REPO),
        dockerfile_path="deploy/Dockerfile",
        tag=IMAGE_TAG,
        clean_up=False,
        rm=True,
        forcerm=True,
        timeout=IMAGE_BUILD_SECONDS_MAX,
    ).build()
    elapsed = time.monotonic() - started
    size_mb = docker_client.images.get(IMAGE_TAG).attrs["Size"] / 1e6
    print(f"image {IMAGE_TAG}: built in {elapsed:.1f} s, {size_mb:.0f} MB")
    return IMAGE_TAG


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def wait_until(
    what: str, deadline_s: float, check: Callable[[], bool], pause_s: float = 0.5
) -> float:
    """Poll `check` until it is true; return the seconds it took, or fail after `deadline_s`."""
    started = time.monotonic()
    while not check():
        if time.monotonic() - started > deadline_s:
            pytest.fail(f"timed out after {deadline_s:.0f} s waiting for {what}")
        time.sleep(pause_s)
    return time.monotonic() - started


def dynamodb(endpoint: str) -> Any:
    """A boto3 client that never retries and gives up quickly, so a stuck server shows as a hang."""
    return boto3.client(
        "dynamodb",
        endpoint_url=endpoint,
        region_name="us-east-1",
        aws_access_key_id="deploy-test",
        aws_secret_access_key="deploy-test",
        config=Config(
            retries={"mode": "standard", "total_max_attempts": 1},
            connect_timeout=3,
            read_timeout=8,
        ),
    )


def router_answers(endpoint: str) -> bool:
    try:
        with urllib.request.urlopen(f"{endpoint}/", timeout=2) as reply:
            return bool(reply.status == 200)
    except OSError:
        return False


def create_table(client: Any, name: str, wcu: int = 5) -> None:
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        ProvisionedThroughput={"ReadCapacityUnits": 1000, "WriteCapacityUnits": wcu},
    )

    def active() -> bool:
        return bool(client.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE")

    wait_until(f"table {name} to be ACTIVE", TABLE_ACTIVE_SECONDS_MAX, active)


# The image ----------------------------------------------------------------------------------------


def test_image_is_small_non_root_and_has_no_build_tools(docker_client: Any, image: str) -> None:
    attrs = docker_client.images.get(image).attrs
    assert attrs["Size"] < IMAGE_SIZE_BYTES_MAX
    config = attrs["Config"]
    assert config["User"] == "10001:10001"
    assert "/data" in config["Volumes"]
    assert config["Healthcheck"]["Test"][0] == "CMD"
    # The services import, and neither pip, setuptools nor a compiler came along from the builder.
    probe = (
        "import importlib.util, shutil, sys, core, router, storagenode, gsi_replicator; "
        "sys.exit(any(importlib.util.find_spec(m) for m in ('pip', 'setuptools')) "
        "or any(shutil.which(t) for t in ('gcc', 'cc', 'make')))"
    )
    assert run_in_image(docker_client, image, ["python", "-c", probe]) == (0, "")
    # Without a role the entrypoint refuses to guess (exit 64, EX_USAGE).
    code, output = run_in_image(docker_client, image, None)
    assert code == 64, output


def run_in_image(docker_client: Any, image: str, command: list[str] | None) -> tuple[int, str]:
    """Exit code and output of `command` in a new container, removed with its volume after."""
    container = docker_client.containers.run(image, command, detach=True)
    try:
        code = container.wait(timeout=CONTAINER_EXIT_SECONDS_MAX)["StatusCode"]
        return code, container.logs().decode(errors="replace")
    finally:
        container.remove(force=True, v=True)


# The compose file ---------------------------------------------------------------------------------


def compose_commands() -> dict[str, list[str]]:
    """The Compose implementations installed here: v1 `docker-compose`, v2 `docker compose`."""
    found: dict[str, list[str]] = {}
    for version, argv in (("v1", ["docker-compose"]), ("v2", ["docker", "compose"])):
        if shutil.which(argv[0]) is None:
            continue
        try:
            reply = subprocess.run(
                [*argv, "version", "--short"], capture_output=True, text=True, timeout=30
            )
        except (OSError, subprocess.TimeoutExpired):
            continue
        if reply.returncode == 0 and reply.stdout.strip().lstrip("v").startswith(version[1]):
            found[version] = argv
    return found


COMPOSE_COMMANDS = compose_commands()


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_compose_up_returns_a_usable_cluster_with_two_stateless_routers(
    version: str, image: str, docker_client: Any
) -> None:
    if version not in COMPOSE_COMMANDS:
        pytest.skip(f"Compose {version} is not installed")
    project = f"dynalabtest{uuid.uuid4().hex[:8]}"
    ports = {"DYNALAB_ROUTER_PORT": free_port(), "DYNALAB_ROUTER_2_PORT": free_port()}
    env = {**os.environ, "DYNALAB_IMAGE": image, **{k: str(v) for k, v in ports.items()}}
    compose = [*COMPOSE_COMMANDS[version], "-p", project, "-f", str(COMPOSE_FILE)]
    compose += ["--profile", "second-router"]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*compose, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=COMPOSE_COMMAND_SECONDS_MAX,
        )

    routers = [
        f"http://127.0.0.1:{ports['DYNALAB_ROUTER_PORT']}",
        f"http://127.0.0.1:{ports['DYNALAB_ROUTER_2_PORT']}",
    ]
    try:
        started = time.monotonic()
        # --build checks the file's build section; every layer comes from the fixture's cache.
        up = run("up", "-d", "--build")
        up_seconds = time.monotonic() - started
        assert up.returncode == 0, up.stdout + up.stderr
        # `up` itself waited for the healthchecks (through the `ready` service), so the routers
        # answer now, without polling.
        assert all(router_answers(router) for router in routers), run("logs").stdout[-5000:]
        print(f"compose {version}: `up -d --build` returned a usable cluster in {up_seconds:.1f} s")

        first, second = dynamodb(routers[0]), dynamodb(routers[1])
        create_table(first, "compose_smoke")
        first.put_item(TableName="compose_smoke", Item={"pk": {"S": "a"}, "v": {"N": "1"}})
        # A table made through one router, and an item written through it, are visible through the
        # other at once: routers hold no state of their own.
        assert "compose_smoke" in second.list_tables()["TableNames"]
        reply = second.get_item(
            TableName="compose_smoke", Key={"pk": {"S": "a"}}, ConsistentRead=True
        )
        assert reply["Item"] == {"pk": {"S": "a"}, "v": {"N": "1"}}
        # Each router keeps its copy of the catalog in its own state volume.
        for service in ("router", "router-2"):
            wait_until(
                f"{service}'s catalog copy to name compose_smoke",
                TABLE_ACTIVE_SECONDS_MAX,
                lambda service=service: (
                    "compose_smoke"
                    in run("exec", "-T", service, "cat", "/state/catalog.json").stdout
                ),
            )

        # The replicator container keeps a global secondary index (eventually consistent).
        first.create_table(
            TableName="compose_gsi",
            KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
            AttributeDefinitions=[
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "g", "AttributeType": "S"},
            ],
            BillingMode="PAY_PER_REQUEST",
            GlobalSecondaryIndexes=[
                {
                    "IndexName": "by_g",
                    "KeySchema": [{"AttributeName": "g", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        )
        wait_until(
            "table compose_gsi to be ACTIVE",
            TABLE_ACTIVE_SECONDS_MAX,
            lambda: (
                first.describe_table(TableName="compose_gsi")["Table"]["TableStatus"] == "ACTIVE"
            ),
        )
        first.put_item(TableName="compose_gsi", Item={"pk": {"S": "a"}, "g": {"S": "x"}})

        def indexed() -> bool:
            items = second.query(
                TableName="compose_gsi",
                IndexName="by_g",
                KeyConditionExpression="g = :g",
                ExpressionAttributeValues={":g": {"S": "x"}},
            )["Items"]
            assert items in ([], [{"pk": {"S": "a"}, "g": {"S": "x"}}]), items
            return bool(items)

        wait_until("the index entry to appear", TABLE_ACTIVE_SECONDS_MAX, indexed)

        # Every node has its own named volume, and nothing restarts by itself.
        for service in NODE_SERVICES:
            (container,) = docker_client.containers.list(
                filters={
                    "label": [
                        f"com.docker.compose.project={project}",
                        f"com.docker.compose.service={service}",
                    ]
                }
            )
            mounts = {m["Destination"]: m for m in container.attrs["Mounts"]}
            assert mounts["/data"]["Type"] == "volume"
            assert mounts["/data"]["Name"].endswith(f"{service}-data")
            assert container.attrs["HostConfig"]["RestartPolicy"]["Name"] in ("", "no")
    finally:
        down = run("down", "-v", "--remove-orphans", "--timeout", "5")
        leftovers = docker_client.containers.list(
            all=True, filters={"label": f"com.docker.compose.project={project}"}
        )
        assert down.returncode == 0 and not leftovers, down.stdout + down.stderr


# A node killed under a workload -------------------------------------------------------------------


def parse_duration_ns(text: str) -> int:
    """Nanoseconds in a Compose duration such as "3s", "1m30s" or "500ms"."""
    units_ns = {"h": 3600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3}
    parts = re.findall(r"(\d+)(ms|us|h|m|s)", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"not a duration: {text}"
    return sum(int(n) * units_ns[u] for n, u in parts)


def interpolate_defaults(value: str) -> str:
    """`${NAME:-default}` -> default: the test runs the file's defaults, not this shell's env."""
    return re.sub(r"\$\{\w+:-([^}]*)\}", r"\1", value)


def compose_service(name: str) -> dict[str, Any]:
    services: dict[str, dict[str, Any]] = yaml.safe_load(COMPOSE_FILE.read_text())["services"]
    return services[name]


class Cluster:
    """The compose file's nodes and router as testcontainers on one private network.

    Each container gets the service's environment, hostname (also its network alias) and
    healthcheck from deploy/docker-compose.yml, so this cluster is configured exactly as
    `compose up` configures it. Ports are published on 127.0.0.1 only, on free ports.
    """

    def __init__(
        self, image: str, docker_client: Any, settings: dict[str, str] | None = None
    ) -> None:
        """`settings` replace the values of those variables the compose file sets (as the
        environment of `compose up` fills its `${NAME:-default}` fields)."""
        self.image = image
        self.docker = docker_client
        self.settings = settings or {}
        self.run_id = uuid.uuid4().hex[:8]
        self.network = Network()
        self.containers: dict[str, DockerContainer] = {}

    def _container(self, service: str, port: int) -> DockerContainer:
        spec = compose_service(service)
        env = {k: interpolate_defaults(str(v)) for k, v in spec["environment"].items()}
        env.update({k: v for k, v in self.settings.items() if k in env})
        health = spec["healthcheck"]
        container = DockerContainer(self.image, name=f"dynalab-test-{self.run_id}-{service}")
        container.with_envs(**env).with_network(self.network)
        container.with_network_aliases(spec["hostname"])
        # testcontainers types host ports as int, but docker-py also takes (host_ip, port).
        container.ports[f"{port}/tcp"] = ("127.0.0.1", None)  # type: ignore[assignment]
        container.with_kwargs(
            hostname=spec["hostname"],
            init=spec.get("init", False),
            healthcheck={
                "test": health["test"],
                "interval": parse_duration_ns(health["interval"]),
                "timeout": parse_duration_ns(health["timeout"]),
                "retries": health["retries"],
                "start_period": parse_duration_ns(health["start_period"]),
            },
        )
        return container

    def start(self) -> None:
        self.network.create()
        for service in NODE_SERVICES:
            self.containers[service] = self._container(service, NODE_PORT)
            self.containers[service].start()
        self.wait_healthy(NODE_SERVICES)
        self.containers["router"] = self._container("router", ROUTER_PORT)
        self.containers["router"].start()
        self.wait_healthy(["router"])

    def stop(self) -> None:
        for service, container in self.containers.items():
            wrapped = container.get_wrapped_container()
            logs = wrapped.logs(tail=40).decode(errors="replace")
            print(f"---- last log lines of {service}\n{logs}")
            container.stop(force=True, delete_volume=True)
        self.network.remove()

    def inspect(self, service: str) -> dict[str, Any]:
        wrapped = self.containers[service].get_wrapped_container()
        wrapped.reload()
        return dict(wrapped.attrs)

    def health(self, service: str) -> str:
        state = self.inspect(service)["State"]
        if not state["Running"]:
            logs = self.containers[service].get_wrapped_container().logs(tail=60).decode()
            pytest.fail(f"{service} exited with {state['ExitCode']}:\n{logs}")
        return str(state["Health"]["Status"])

    def wait_healthy(self, services: list[str]) -> float:
        return wait_until(
            f"{services} to be healthy",
            CLUSTER_HEALTHY_SECONDS_MAX,
            lambda: all(self.health(s) == "healthy" for s in services),
        )

    def published(self, service: str, port: int) -> str:
        ports = self.inspect(service)["NetworkSettings"]["Ports"][f"{port}/tcp"]
        return f"127.0.0.1:{ports[0]['HostPort']}"

    def kill(self, service: str) -> None:
        self.containers[service].get_wrapped_container().kill()  # SIGKILL, like kill -9.
        wait_until(
            f"{service} to stop",
            CONTAINER_EXIT_SECONDS_MAX,
            lambda: not self.inspect(service)["State"]["Running"],
        )

    def restart(self, service: str) -> float:
        self.containers[service].get_wrapped_container().start()
        return self.wait_healthy([service])


@pytest.fixture
def cluster(image: str, docker_client: Any) -> Iterator[Cluster]:
    cluster = Cluster(image, docker_client)
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def node_id_of(service: str) -> str:
    return str(compose_service(service)["environment"]["DYNALAB_NODE_ID"])


def catalog_table(cluster: Cluster, table: str) -> dict[str, Any]:
    """The table's catalog entry, read straight from the catalog's system table on the nodes."""
    nodes = {node_id_of(s): cluster.published(s, NODE_PORT) for s in NODE_SERVICES}

    async def read() -> dict[str, Any]:
        ctx = RouterContext(nodes, "test")
        try:
            await ctx.refresh()
            return ctx.records[table].to_json()
        finally:
            await ctx.close()

    return asyncio.run(read())


def readable(client: Any, key: str) -> bool:
    """Whether `key` reads back strongly with the value `put` wrote."""
    try:
        reply = client.get_item(
            TableName=WORKLOAD_TABLE, Key={"pk": {"S": key}}, ConsistentRead=True
        )
    except ClientError:
        return False
    return bool(reply.get("Item", {}).get("v") == {"S": f"value of {key}"})


def put(client: Any, key: str) -> None:
    client.put_item(
        TableName=WORKLOAD_TABLE, Item={"pk": {"S": key}, "v": {"S": f"value of {key}"}}
    )


def test_killed_node_fails_only_its_partitions_and_loses_no_acknowledged_write(
    cluster: Cluster,
) -> None:
    client = dynamodb(f"http://{cluster.published('router', ROUTER_PORT)}")
    create_table(client, WORKLOAD_TABLE, wcu=WORKLOAD_WCU)
    acknowledged: list[str] = []
    for i in range(WORKLOAD_ITEMS):
        key = f"key-{i:05d}"
        put(client, key)
        acknowledged.append(key)

    # Which node holds each key: the table's partition map, as the router sees it.
    table = catalog_table(cluster, WORKLOAD_TABLE)
    partition_map = PartitionMap(map(PartitionDef.from_json, table["partitions"]))

    def node_of(key: str) -> str:
        return partition_map.lookup(encode_storage_key({"S": key}, None)).node

    # Kill a node that holds some of the table but not the catalog: routers must keep serving the
    # other partitions from their cached map.
    catalog_owner = HashRing(node_id_of(s) for s in NODE_SERVICES).owner(ops.CATALOG_PARTITION_ID)
    keys_by_node = {
        node_id_of(s): [k for k in acknowledged if node_of(k) == node_id_of(s)]
        for s in NODE_SERVICES
    }
    victim = max(
        (s for s in NODE_SERVICES if node_id_of(s) != catalog_owner),
        key=lambda s: len(keys_by_node[node_id_of(s)]),
    )
    dead_keys = keys_by_node[node_id_of(victim)]
    live_keys = [k for k in acknowledged if k not in set(dead_keys)]
    assert dead_keys and live_keys, f"placement left a side empty: {table['partitions']}"

    cluster.kill(victim)

    # Reads of the dead node's keys fail with a DynamoDB error, promptly; the others still work.
    slowest_failure_s = 0.0
    for key in dead_keys[:PROBE_KEYS_PER_SIDE]:
        started = time.monotonic()
        with pytest.raises(ClientError) as failure:
            client.get_item(TableName=WORKLOAD_TABLE, Key={"pk": {"S": key}}, ConsistentRead=True)
        elapsed = time.monotonic() - started
        error = failure.value.response
        assert error["ResponseMetadata"]["HTTPStatusCode"] >= 400
        assert error["Error"]["Code"], "the body must carry a __type"
        assert elapsed < REQUEST_SECONDS_MAX
        slowest_failure_s = max(slowest_failure_s, elapsed)
    print(
        f"{victim} down: its keys fail within {slowest_failure_s:.2f} s with "
        f"{error['ResponseMetadata']['HTTPStatusCode']} {error['Error']['Code']}: "
        f"{error['Error'].get('Message')}"
    )
    for key in live_keys[:PROBE_KEYS_PER_SIDE]:
        reply = client.get_item(
            TableName=WORKLOAD_TABLE, Key={"pk": {"S": key}}, ConsistentRead=True
        )
        assert reply["Item"]["v"] == {"S": f"value of {key}"}

    # Writes go on while the node is down: those to live partitions are acknowledged, the rest
    # fail with a DynamoDB error; only acknowledged ones are owed afterwards.
    for i in range(OUTAGE_WRITES):
        key = f"outage-{i:05d}"
        if node_of(key) == node_id_of(victim):
            with pytest.raises(ClientError):
                put(client, key)
        else:
            put(client, key)
            acknowledged.append(key)

    healthy_after_s = cluster.restart(victim)

    # The router reconnects to the restarted node: first wait until one of its keys reads again...
    reconnected_s = wait_until(
        f"the router to read from {victim} again",
        RECOVERY_SECONDS_MAX,
        lambda: readable(client, dead_keys[0]),
        pause_s=1.0,
    )
    # ...then every acknowledged write must be there, including those on the killed node.
    missing = [key for key in acknowledged if not readable(client, key)]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:10]}"
    print(
        f"{victim} healthy {healthy_after_s:.1f} s after start, served by the router "
        f"{reconnected_s:.1f} s later; all {len(acknowledged)} acknowledged writes present"
    )


@pytest.fixture
def replicated_cluster(image: str, docker_client: Any) -> Iterator[Cluster]:
    cluster = Cluster(image, docker_client, {"DYNALAB_REPLICATION_FACTOR": "3"})
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def eventually(what: str, attempt: Callable[[], Any]) -> Any:
    """`attempt()`'s answer once it gives one (a leader is being elected meanwhile)."""
    deadline = time.monotonic() + RECOVERY_SECONDS_MAX
    while True:
        try:
            return attempt()
        except ClientError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


def test_a_replicated_cluster_serves_every_key_with_a_node_killed(
    replicated_cluster: Cluster,
) -> None:
    cluster = replicated_cluster
    client = dynamodb(f"http://{cluster.published('router', ROUTER_PORT)}")
    create_table(client, WORKLOAD_TABLE, wcu=WORKLOAD_WCU)
    table = catalog_table(cluster, WORKLOAD_TABLE)
    assert all(len(p.get("replicas", ())) == 3 for p in table["partitions"]), table
    acknowledged = []
    for i in range(WORKLOAD_ITEMS // 3):
        put(client, f"key-{i:05d}")
        acknowledged.append(f"key-{i:05d}")

    cluster.kill(NODE_SERVICES[0])

    # Every key reads, strongly, and takes writes, once each partition the node led has
    # elected another leader; table operations go on too.
    for key in acknowledged[:PROBE_KEYS_PER_SIDE]:
        reply = eventually(
            "a strong read",
            lambda key=key: client.get_item(
                TableName=WORKLOAD_TABLE, Key={"pk": {"S": key}}, ConsistentRead=True
            ),
        )
        assert reply["Item"]["v"] == {"S": f"value of {key}"}
    for i in range(OUTAGE_WRITES):
        key = f"outage-{i:05d}"
        eventually("a write", lambda key=key: put(client, key))
        acknowledged.append(key)
    eventually("CreateTable", lambda: create_table(client, "deploy_during_outage"))
    eventually("DeleteTable", lambda: client.delete_table(TableName="deploy_during_outage"))

    cluster.restart(NODE_SERVICES[0])
    cluster.kill(NODE_SERVICES[1])

    # With another node down, the one that came back serves in the quorum: every acknowledged
    # write is there.
    wait_until(
        "strong reads with another node down",
        RECOVERY_SECONDS_MAX,
        lambda: readable(client, acknowledged[0]),
    )
    missing = [key for key in acknowledged if not readable(client, key)]
    assert not missing, f"{len(missing)} acknowledged writes lost, e.g. {missing[:10]}"
