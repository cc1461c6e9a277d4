"""A router's own resources hold against one greedy client (router/limits.py), on real processes.

Bodies in flight are bounded (40 concurrent 15 MB bodies once took a router from 61 MB to 977 MB),
silent and slow connections are closed (0 of 250 were, in 45 s), and a flood of idle connections
at a 1,024-descriptor limit leaves new and established clients served (half of new connections
failed). The router under test runs with short idle and body-read bounds; the flood runs against a
second router started under `prlimit --nofile=1024:1024`.
"""

from __future__ import annotations

import http.client
import json
import select
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from core import limits, settings
from dynalab.cluster import LocalCluster, Router, free_ports
from router.settings import RouterSettings
from tests.integration.conftest import dynamodb_client

IDLE_SECONDS_ENV = settings.variable(RouterSettings, "idle_seconds")
BODY_READ_SECONDS_ENV = settings.variable(RouterSettings, "body_read_seconds")

IDLE_SECONDS = 2.0
BODY_READ_SECONDS = 2.0
CLOSE_WAIT_SECONDS = 15.0  # How long a test waits for the router to close a connection.
SOCKET_TIMEOUT_SECONDS = 30.0
DESCRIPTORS = 1024
AUTHORIZATION = (
    "AWS4-HMAC-SHA256 Credential=dynalab/20260101/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=host;x-amz-date, Signature=0123456789abcdef"
)


def headers(operation: str, length: int) -> dict[str, str]:
    return {
        "Content-Type": "application/x-amz-json-1.0",
        "X-Amz-Target": f"DynamoDB_20120810.{operation}",
        "X-Amz-Date": "20260101T000000Z",
        "Authorization": AUTHORIZATION,
        "Content-Length": str(length),
    }


def request_head(operation: str, length: int) -> bytes:
    lines = ["POST / HTTP/1.1", "Host: router"]
    lines += [f"{name}: {value}" for name, value in headers(operation, length).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


def list_tables(port: int, connection: http.client.HTTPConnection | None = None) -> int:
    """Send ListTables (on `connection`, else a new one) and return the HTTP status."""
    own = connection is None
    connection = connection or http.client.HTTPConnection(
        "127.0.0.1", port, timeout=SOCKET_TIMEOUT_SECONDS
    )
    try:
        connection.request("POST", "/", body=b"{}", headers=headers("ListTables", 2))
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        if own:
            connection.close()


def closed_by_peer(sock: socket.socket, deadline: float) -> bool:
    """Read from `sock` until the router closes it (True) or `deadline` passes (False)."""
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            if sock.recv(65536) == b"":
                return True
        except TimeoutError:
            return False
        except ConnectionResetError:
            return True
    return False


def count_closed(sockets: list[socket.socket], expected_open: int) -> int:
    """How many of `sockets` the router has closed, waiting up to CLOSE_WAIT_SECONDS for at most
    `expected_open` to remain open."""
    poll = select.poll()  # not select(): the test holds descriptors past FD_SETSIZE
    by_fd = {sock.fileno(): sock for sock in sockets}
    for fd in by_fd:
        poll.register(fd, select.POLLIN)
    closed = 0
    deadline = time.monotonic() + CLOSE_WAIT_SECONDS
    while len(sockets) - closed > expected_open and time.monotonic() < deadline:
        for fd, _ in poll.poll(100):
            poll.unregister(fd)
            try:
                data = by_fd[fd].recv(65536)
            except ConnectionResetError:
                data = b""
            closed += data == b""
    return closed


def rss_bytes(pid: int, field: str) -> int:
    """A memory figure of process `pid` from /proc (VmRSS now, VmHWM its peak), in bytes."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise AssertionError(f"no {field} for process {pid}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with pytest.MonkeyPatch.context() as environment:
        environment.setenv("DYNALAB_THROTTLING", "off")
        environment.setenv(IDLE_SECONDS_ENV, str(IDLE_SECONDS))
        environment.setenv(BODY_READ_SECONDS_ENV, str(BODY_READ_SECONDS))
        with LocalCluster(
            tmp_path_factory.mktemp("limits"), nodes=1, routers=1, replicators=0
        ) as running:
            yield running


class LimitedRouter(Router):
    """A router started with a descriptor limit of `DESCRIPTORS`, soft and hard."""

    def argv(self) -> list[str]:
        return ["prlimit", f"--nofile={DESCRIPTORS}:{DESCRIPTORS}", "--", *super().argv()]


@pytest.fixture(scope="module")
def limited_router(cluster: LocalCluster) -> Iterator[LimitedRouter]:
    router = LimitedRouter(
        "router-limited", free_ports(1)[0], cluster.nodes, cluster.log_dir / "router-limited.log"
    )
    try:
        # The default idle bound, so that the flood is met by the cap rather than by idle closes.
        with pytest.MonkeyPatch.context() as environment:
            environment.delenv(IDLE_SECONDS_ENV)
            router.start()
        yield router
    finally:
        router.stop()


def test_a_body_over_16_mb_is_refused_before_it_is_read(cluster: LocalCluster) -> None:
    port = cluster.routers[0].port
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_SECONDS) as sock:
        sock.sendall(request_head("PutItem", limits.HTTP_REQUEST_BYTES_MAX + 1) + b'{"TableName"')
        reply = sock.recv(65536)
        assert reply.startswith(b"HTTP/1.1 413 "), reply
        assert closed_by_peer(sock, time.monotonic() + CLOSE_WAIT_SECONDS)
    assert list_tables(port) == 200


def test_many_large_bodies_at_once_keep_the_router_within_its_memory_bound(
    cluster: LocalCluster,
) -> None:
    router = cluster.routers[0]
    assert router.pid is not None
    client = dynamodb_client(router.url)
    client.create_table(
        TableName="big_bodies",
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        BillingMode="PAY_PER_REQUEST",
    )
    # 15 MB items: each is refused as too large, after the router read and parsed all of it.
    body = json.dumps(
        {"TableName": "big_bodies", "Item": {"pk": {"S": "k"}, "v": {"S": "x" * (15 * 10**6)}}}
    ).encode()
    baseline = rss_bytes(router.pid, "VmRSS")
    statuses: list[int] = []

    def send() -> None:
        connection = http.client.HTTPConnection(
            "127.0.0.1", router.port, timeout=SOCKET_TIMEOUT_SECONDS
        )
        try:
            connection.request("POST", "/", body=body, headers=headers("PutItem", len(body)))
            response = connection.getresponse()
            response.read()
            statuses.append(response.status)
        finally:
            connection.close()

    threads = [threading.Thread(target=send) for _ in range(40)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SOCKET_TIMEOUT_SECONDS * 2)
    assert not any(thread.is_alive() for thread in threads)
    peak = rss_bytes(router.pid, "VmHWM")
    # Refused as too large (400) or, past the in-flight bound, as unavailable (503): never a 500.
    # On a loaded machine an admitted body may take longer than this module's 2 s read bound to
    # arrive, which is a 408 (seen at load 23): a refusal too.
    assert len(statuses) == 40 and set(statuses) <= {400, 408, 503}, statuses
    assert 400 in statuses
    # An admitted body is held a few times over while it is parsed and checked (the bytes, the
    # JSON document, the item's validation): 150 MB over the baseline when measured, where the
    # unbounded router reached 977 MB.
    assert peak - baseline < 4 * limits.ROUTER_BODY_BYTES_IN_FLIGHT_MAX, (baseline, peak)
    assert client.list_tables()["TableNames"] == ["big_bodies"]


def test_silent_and_slow_connections_are_closed(cluster: LocalCluster) -> None:
    port = cluster.routers[0].port
    silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(250)]
    slow_headers = socket.create_connection(("127.0.0.1", port))
    slow_body = socket.create_connection(("127.0.0.1", port))
    try:
        slow_headers.sendall(b"POST / HTTP/1.1\r\nHost: router\r\n")
        slow_body.sendall(request_head("ListTables", 1000) + b"{")
        deadline = time.monotonic() + CLOSE_WAIT_SECONDS
        # A slowloris drip: one header byte at a time, never the end of the headers.
        for _ in range(int(IDLE_SECONDS * 4)):
            time.sleep(0.5)
            try:
                slow_headers.sendall(b"X")
            except (BrokenPipeError, ConnectionResetError):
                break
        assert closed_by_peer(slow_headers, deadline)
        assert all(closed_by_peer(sock, deadline) for sock in silent)
        slow_body.settimeout(CLOSE_WAIT_SECONDS)
        assert slow_body.recv(65536).startswith(b"HTTP/1.1 408 ")
        assert closed_by_peer(slow_body, deadline)
    finally:
        for sock in [*silent, slow_headers, slow_body]:
            sock.close()
    assert list_tables(port) == 200


def test_an_idle_keep_alive_connection_is_closed(cluster: LocalCluster) -> None:
    port = cluster.routers[0].port
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=SOCKET_TIMEOUT_SECONDS)
    try:
        assert list_tables(port, connection) == 200
        assert connection.sock is not None
        started = time.monotonic()
        assert closed_by_peer(connection.sock, started + CLOSE_WAIT_SECONDS)
        assert time.monotonic() - started >= IDLE_SECONDS * 0.5
    finally:
        connection.close()


def test_a_flood_of_idle_connections_past_the_descriptor_limit_locks_out_no_one(
    limited_router: LimitedRouter,
) -> None:
    port = limited_router.port
    established = http.client.HTTPConnection("127.0.0.1", port, timeout=SOCKET_TIMEOUT_SECONDS)
    flood: list[socket.socket] = []
    try:
        assert list_tables(port, established) == 200
        for _ in range(1100):
            flood.append(socket.create_connection(("127.0.0.1", port)))
        # New clients are served, one connection each, while the flood holds its sockets.
        assert [list_tables(port) for _ in range(50)] == [200] * 50
        # The cap was met by displacing flood connections, which had never sent a request.
        displaced = count_closed(flood, DESCRIPTORS - limits.ROUTER_RESERVED_DESCRIPTORS_MIN)
        assert len(flood) - displaced <= DESCRIPTORS - limits.ROUTER_RESERVED_DESCRIPTORS_MIN
        # The established connection was not displaced: it had served a request.
        established_sock = established.sock
        assert list_tables(port, established) == 200
        assert established.sock is established_sock
        client = dynamodb_client(limited_router.url)
        assert "TableNames" in client.list_tables()
    finally:
        established.close()
        for sock in flood:
            sock.close()
    log = limited_router.log_path.read_text()
    assert "Too many open files" not in log
    assert f"idle {limits.ROUTER_IDLE_SECONDS_MAX:.0f} s" in log
    assert f"limits: {DESCRIPTORS - limits.ROUTER_RESERVED_DESCRIPTORS_MIN} connections" in log
