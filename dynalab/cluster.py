"""Run a whole dynalab cluster on this machine: storage nodes, routers and GSI replicators, one
OS process each.

`LocalCluster` is what `dynalab up` and the integration tests use. It starts every storage node
(`python -m storagenode`), every router (`python -m router`) and every GSI replicator
(`python -m gsi_replicator`) on loopback, sends each one's output to its own log file under
`<data_dir>/logs/`, and returns only once every node answers the standard gRPC health check with
SERVING and every router and replicator answers `GET /`. Each process can be killed, stopped and
started again on its own, which is what fault-injection experiments need, and `stop()` ends them
all: SIGTERM first, SIGKILL for whatever is still running after a grace period.

A data directory holds one cluster: node `node-N` keeps its data in `<data_dir>/node-N`, and the
ports chosen for the nodes are recorded in `<data_dir>/cluster.json`, so starting again on the same
directory brings back the same nodes, with the same ids, data and addresses. Only one LocalCluster
may use a data directory at a time (an advisory lock on `<data_dir>/cluster.lock` enforces it),
because two storage nodes writing one database directory would corrupt it.
"""

from __future__ import annotations

import abc
import contextlib
import errno
import fcntl
import http.client
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from types import TracebackType
from typing import IO

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc

from core import limits
from rpc import lifeline

LOOPBACK = "127.0.0.1"
LISTEN_PORTS_LOW = 10_000  # Listeners' ports are drawn from here up to the ephemeral range.
FREE_PORT_DRAWS_MAX = 1_000
STARTUP_TIMEOUT_S = 30.0  # How long a cluster (or one restarted process) may take to become ready.
STOP_GRACE_S = 10.0  # How long a process gets to exit after SIGTERM before it is SIGKILLed.
KILL_WAIT_S = 5.0  # How long to wait for the kernel to reap a SIGKILLed process.
PROBE_TIMEOUT_S = 1.0  # Deadline of one readiness probe (health check or GET /).
PROBE_INTERVAL_S = 0.05  # Pause between readiness probes of a process that is not ready yet.
LOG_TAIL_LINES = 30  # Lines of a process's log quoted in the error when it fails to start.
CLUSTER_FILE = "cluster.json"
LOCK_FILE = "cluster.lock"
CLUSTER_FILE_VERSION = 1

# The directory that holds the `dynalab`, `storagenode` and `router` packages. Children get it on
# PYTHONPATH so that `python -m storagenode` works from any working directory, also when dynalab is
# run from a source checkout rather than installed.
PROJECT_ROOT = Path(__file__).resolve().parent.parent


class ClusterError(RuntimeError):
    """A cluster could not be started as asked: a process died, was not ready in time, or a port
    or the data directory is taken."""


def free_ports(count: int) -> list[int]:
    """Return `count` distinct loopback TCP ports that are free right now, for listeners.

    They are drawn at random below the kernel's ephemeral range: an outgoing connection takes its
    local port from that range, and on a busy test machine one did take a port chosen there
    before the child meant to listen on it could bind it ("address already in use"). All probe
    sockets stay bound until every port is chosen, so no port is handed out twice; another test
    process drawing the same port at the same moment is the rare clash left.
    """
    high = _ephemeral_ports_low()
    with contextlib.ExitStack() as stack:
        ports: list[int] = []
        for _ in range(FREE_PORT_DRAWS_MAX):
            if len(ports) == count:
                return ports
            port = random.randrange(LISTEN_PORTS_LOW, high)
            sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                continue
            if port not in ports:
                ports.append(port)
        if len(ports) == count:
            return ports
    raise ClusterError(f"no {count} free ports in {FREE_PORT_DRAWS_MAX} draws")


def _ephemeral_ports_low() -> int:
    """The lowest port the kernel gives outgoing connections (Linux's default when unknown)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def port_is_free(port: int) -> bool:
    """Whether a listener could bind `port` on loopback now.

    SO_REUSEADDR makes the probe ignore connections left in TIME_WAIT by an earlier run on the same
    port, as the services' own listeners do, while still failing when anyone is listening.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                return False
            raise
        return True


def answers_http(port: int) -> bool:
    """Whether an HTTP server on loopback `port` answers `GET /` with 200 (a router's health)."""
    connection = http.client.HTTPConnection(LOOPBACK, port, timeout=PROBE_TIMEOUT_S)
    try:
        connection.request("GET", "/")
        return connection.getresponse().status == 200
    except (OSError, http.client.HTTPException):
        # Nothing listening yet, or something that does not speak HTTP/1.1 (a gRPC server that
        # took the port): either way not the server we wait for.
        return False
    finally:
        connection.close()


def _log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class ServiceProcess(abc.ABC):
    """One service of the cluster, run as a child process that can be killed and started again."""

    def __init__(self, name: str, port: int, log_path: Path) -> None:
        self.name = name
        self.port = port
        self.log_path = log_path
        self.process: subprocess.Popen[bytes] | None = None

    @abc.abstractmethod
    def argv(self) -> list[str]:
        """The command line that runs this service."""

    @abc.abstractmethod
    def probe(self) -> bool:
        """Ask the running service once whether it is ready to serve."""

    @property
    def address(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def spawn(self) -> None:
        """Start the process without waiting for it to be ready."""
        if self.is_running():
            raise ClusterError(f"{self.name} is already running (pid {self.pid})")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        env = dict(os.environ)
        env["PYTHONUNBUFFERED"] = "1"  # Log lines should reach the file as they happen.
        # The child ties its life to ours (rpc.lifeline): SIGTERM when this process dies.
        env[lifeline.PARENT_PID_ENV] = str(os.getpid())
        env["PYTHONPATH"] = os.pathsep.join(
            [str(PROJECT_ROOT), *filter(None, [env.get("PYTHONPATH")])]
        )
        with self.log_path.open("ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            command = " ".join(self.argv())
            log.write(f"--- {stamp} dynalab starting {self.name}: {command}\n".encode())
            log.flush()
            self.process = subprocess.Popen(
                self.argv(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                process_group=0,
            )

    def wait_ready(self, deadline: float) -> None:
        """Block until the service is ready; raise ClusterError if it exits or `deadline` (a
        time.monotonic() value) passes first."""
        while True:
            if self.process is None or self.process.poll() is not None:
                code = None if self.process is None else self.process.returncode
                raise ClusterError(
                    f"{self.name} exited with code {code} while starting; "
                    f"last lines of {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            if self.probe():
                return
            if time.monotonic() >= deadline:
                raise ClusterError(
                    f"{self.name} was not ready in time; "
                    f"last lines of {self.log_path}:\n{_log_tail(self.log_path)}"
                )
            time.sleep(PROBE_INTERVAL_S)

    def start(self, timeout: float = STARTUP_TIMEOUT_S) -> None:
        """(Re)start the service with the same name, port and data, and wait until it is ready."""
        self.spawn()
        self.wait_ready(time.monotonic() + timeout)

    def kill(self) -> None:
        """SIGKILL the process, as a crash would, and reap it."""
        if self.process is None:
            return
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(KILL_WAIT_S)

    def stop(self, grace: float = STOP_GRACE_S) -> int | None:
        """SIGTERM the process, SIGKILL it if it outlives `grace` seconds, and return its exit code
        (None if it was never started)."""
        stop_all([self], grace)
        return None if self.process is None else self.process.returncode


class StorageNode(ServiceProcess):
    """A storage node: `python -m storagenode` with a fixed id, port and data directory."""

    def __init__(
        self,
        node_id: str,
        port: int,
        data_dir: Path,
        log_path: Path,
        ttl_sweep_seconds: float | None = None,
        split_bytes: int | None = None,
    ) -> None:
        super().__init__(node_id, port, log_path)
        self.node_id = node_id
        self.data_dir = data_dir
        self.ttl_sweep_seconds = ttl_sweep_seconds
        self.split_bytes = split_bytes
        # The other nodes, node id -> address, when partitions are replicated among them.
        self.peers: dict[str, str] = {}

    def argv(self) -> list[str]:
        sweep = (
            []
            if self.ttl_sweep_seconds is None
            else ["--ttl-sweep-seconds", str(self.ttl_sweep_seconds)]
        )
        sweep += [] if self.split_bytes is None else ["--split-bytes", str(self.split_bytes)]
        if self.peers:
            sweep += ["--peers", ",".join(f"{n}={a}" for n, a in sorted(self.peers.items()))]
        return [
            sys.executable,
            "-m",
            "storagenode",
            "--node-id",
            self.node_id,
            "--listen",
            self.address,
            "--data-dir",
            str(self.data_dir),
            *sweep,
        ]

    def probe(self) -> bool:
        # A fresh channel per probe keeps a refused connection from leaving the channel in
        # reconnect backoff, which would delay noticing that the node came up.
        with grpc.insecure_channel(self.address) as channel:
            stub = health_pb2_grpc.HealthStub(channel)
            try:
                reply = stub.Check(health_pb2.HealthCheckRequest(), timeout=PROBE_TIMEOUT_S)
            except grpc.RpcError:
                return False
        return reply.status == health_pb2.HealthCheckResponse.SERVING


class Router(ServiceProcess):
    """A router: `python -m router`, the DynamoDB endpoint, knowing every node's address."""

    def __init__(
        self,
        name: str,
        port: int,
        nodes: Sequence[StorageNode],
        log_path: Path,
        state_dir: Path | None = None,
        replication_factor: int = 1,
    ) -> None:
        super().__init__(name, port, log_path)
        self.nodes_arg = ",".join(f"{node.node_id}={node.address}" for node in nodes)
        # Where the router keeps its copy of the catalog (`router/catalog_copy.py`); None: none.
        self.state_dir = state_dir
        self.replication_factor = replication_factor

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def argv(self) -> list[str]:
        state = [] if self.state_dir is None else ["--state-dir", str(self.state_dir)]
        if self.replication_factor > 1:
            state += ["--replication-factor", str(self.replication_factor)]
        return [
            sys.executable,
            "-m",
            "router",
            "--listen",
            self.address,
            "--nodes",
            self.nodes_arg,
            *state,
        ]

    def probe(self) -> bool:
        return answers_http(self.port)


class Replicator(ServiceProcess):
    """A GSI replicator: `python -m gsi_replicator`, knowing every node's address; it serves its
    health and `/metrics` over HTTP on its port."""

    def __init__(self, name: str, port: int, nodes: Sequence[StorageNode], log_path: Path) -> None:
        super().__init__(name, port, log_path)
        self.nodes_arg = ",".join(f"{node.node_id}={node.address}" for node in nodes)

    @property
    def url(self) -> str:
        return f"http://{self.address}"

    def argv(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "gsi_replicator",
            "--listen",
            self.address,
            "--nodes",
            self.nodes_arg,
        ]

    def probe(self) -> bool:
        return answers_http(self.port)


def stop_all(services: Iterable[ServiceProcess], grace: float = STOP_GRACE_S) -> None:
    """SIGTERM every running service at once, then SIGKILL those still running after `grace`."""
    running = [s for s in services if s.process is not None and s.process.poll() is None]
    for service in running:
        assert service.process is not None
        with contextlib.suppress(ProcessLookupError):
            service.process.terminate()
            # A paused process (SIGSTOP, `dynalab node pause`) acts on SIGTERM only once continued.
            service.process.send_signal(signal.SIGCONT)
    deadline = time.monotonic() + grace
    for service in running:
        assert service.process is not None
        try:
            service.process.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            service.kill()


class LocalCluster:
    """Storage nodes and routers of one cluster, each its own process on loopback.

    Use it as a context manager, or call start() and stop(). `router_port` 0 picks free ports;
    otherwise router i (from 0) listens on router_port + i. Node ports come from `node_ports`, else
    from `<data_dir>/cluster.json` of an earlier run, else are picked free and recorded there.
    """

    def __init__(
        self,
        data_dir: str | os.PathLike[str],
        nodes: int = 3,
        routers: int = 1,
        router_port: int = 0,
        node_ports: Sequence[int] | None = None,
        startup_timeout: float = STARTUP_TIMEOUT_S,
        replicators: int = 1,
        ttl_sweep_seconds: float | None = None,
        split_bytes: int | None = None,
        replication_factor: int = 1,
    ) -> None:
        if nodes < 1 or routers < 1:
            raise ValueError("a cluster needs at least one node and one router")
        if replicators < 0:
            raise ValueError("a cluster cannot have a negative number of GSI replicators")
        if node_ports is not None and len(node_ports) != nodes:
            raise ValueError(f"{nodes} nodes need {nodes} node ports, got {len(node_ports)}")
        self.data_dir = Path(data_dir).resolve()
        self.log_dir = self.data_dir / "logs"
        self.node_count = nodes
        self.router_count = routers
        self.replicator_count = replicators
        self.router_port = router_port
        self.requested_node_ports = list(node_ports) if node_ports is not None else None
        self.startup_timeout = startup_timeout
        # The nodes' TTL sweep interval; None: theirs (DYNALAB_TTL_SWEEP_SECONDS or 1 s).
        self.ttl_sweep_seconds = ttl_sweep_seconds
        # The size past which the nodes split a partition; None: theirs (DYNALAB_SPLIT_BYTES or
        # 10 GB).
        self.split_bytes = split_bytes
        # Replicas of each new table's partitions (1: one copy; more: Raft groups among the
        # nodes, which then know each other as peers).
        if not 1 <= replication_factor <= limits.REPLICATION_FACTOR_MAX:
            raise ValueError(
                f"the replication factor is 1 to {limits.REPLICATION_FACTOR_MAX}, not "
                f"{replication_factor}"
            )
        self.replication_factor = replication_factor
        self.nodes: list[StorageNode] = []
        self.routers: list[Router] = []
        self.replicators: list[Replicator] = []
        self._lock_file: IO[bytes] | None = None

    @property
    def router_urls(self) -> list[str]:
        return [router.url for router in self.routers]

    @property
    def router_url(self) -> str:
        return self.routers[0].url

    def node(self, node_id: str) -> StorageNode:
        """The storage node with this id."""
        for node in self.nodes:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)

    def services(self) -> list[ServiceProcess]:
        """Every process of the cluster, routers and replicators first (the order in which they
        are stopped)."""
        return [*self.routers, *self.replicators, *self.nodes]

    def start(self) -> LocalCluster:
        """Start every node, then every router, and wait until all are ready.

        On failure everything already started is stopped before the error propagates.
        """
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._acquire_lock()
        try:
            self._start_processes()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_processes(self) -> None:
        node_ports = self._node_ports()
        self.nodes = [
            StorageNode(
                node_id=f"node-{i}",
                port=port,
                data_dir=self.data_dir / f"node-{i}",
                log_path=self.log_dir / f"node-{i}.log",
                ttl_sweep_seconds=self.ttl_sweep_seconds,
                split_bytes=self.split_bytes,
            )
            for i, port in enumerate(node_ports, start=1)
        ]
        if self.replication_factor > 1:
            for node in self.nodes:
                node.peers = {n.node_id: n.address for n in self.nodes if n is not node}
        self._record_node_ports()
        router_ports = (
            [self.router_port + i for i in range(self.router_count)]
            if self.router_port
            else free_ports(self.router_count)
        )
        self._check_ports_free(router_ports, "router")
        self.routers = [
            Router(
                f"router-{i}",
                port,
                self.nodes,
                self.log_dir / f"router-{i}.log",
                state_dir=self.data_dir / f"router-{i}",
                replication_factor=self.replication_factor,
            )
            for i, port in enumerate(router_ports, start=1)
        ]
        replicator_ports = free_ports(self.replicator_count) if self.replicator_count else []
        self.replicators = [
            Replicator(f"replicator-{i}", port, self.nodes, self.log_dir / f"replicator-{i}.log")
            for i, port in enumerate(replicator_ports, start=1)
        ]
        deadline = time.monotonic() + self.startup_timeout
        # Nodes start in parallel, as do routers; routers come second because they read the
        # catalog from the nodes as they start, and replicators last, as they read the catalog.
        tiers: tuple[Sequence[ServiceProcess], ...] = (self.nodes, self.routers, self.replicators)
        for tier in tiers:
            for service in tier:
                service.spawn()
            for service in tier:
                service.wait_ready(deadline)

    def _node_ports(self) -> list[int]:
        recorded = self._recorded_node_ports()
        if recorded is not None and len(recorded) != self.node_count:
            raise ClusterError(
                f"{self.data_dir} holds a {len(recorded)}-node cluster; start it with "
                f"{len(recorded)} nodes (changing the membership of a cluster is not supported)"
            )
        ports = self.requested_node_ports or recorded or free_ports(self.node_count)
        self._check_ports_free(ports, "node")
        return ports

    def _check_ports_free(self, ports: Sequence[int], role: str) -> None:
        taken = [port for port in ports if not port_is_free(port)]
        if taken:
            raise ClusterError(
                f"{role} port(s) {', '.join(map(str, taken))} on {LOOPBACK} are in use "
                f"(is another process, or an earlier cluster on {self.data_dir}, still running?)"
            )

    def _recorded_node_ports(self) -> list[int] | None:
        try:
            record = json.loads((self.data_dir / CLUSTER_FILE).read_text())
        except FileNotFoundError:
            return None
        if record.get("version") != CLUSTER_FILE_VERSION:
            raise ClusterError(f"{self.data_dir / CLUSTER_FILE} has an unknown version")
        return [int(node["port"]) for node in record["nodes"]]

    def _record_node_ports(self) -> None:
        record = {
            "version": CLUSTER_FILE_VERSION,
            "nodes": [{"id": node.node_id, "port": node.port} for node in self.nodes],
        }
        path = self.data_dir / CLUSTER_FILE
        text = json.dumps(record, indent=2) + "\n"
        if path.exists() and path.read_text() == text:
            return  # Unchanged: nothing to write, so a restart on a full disk needs no space here.
        # Write then rename, so a crash never leaves a half-written record behind.
        scratch = path.with_suffix(".tmp")
        scratch.write_text(text)
        scratch.replace(path)

    def _acquire_lock(self) -> None:
        lock_file = (self.data_dir / LOCK_FILE).open("wb")
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.close()
            raise ClusterError(f"another dynalab cluster is running on {self.data_dir}") from None
        self._lock_file = lock_file

    def stop(self, grace: float = STOP_GRACE_S) -> None:
        """Stop routers, then nodes: SIGTERM, and SIGKILL after `grace` seconds. Idempotent."""
        try:
            stop_all([*self.routers, *self.replicators], grace)
            stop_all(self.nodes, grace)
        finally:
            if self._lock_file is not None:
                self._lock_file.close()  # Closing the file releases the flock.
                self._lock_file = None

    def __enter__(self) -> LocalCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        self.stop()
