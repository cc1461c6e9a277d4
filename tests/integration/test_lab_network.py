"""The lab's kernel network faults (`dynalab.lab.network`) and the scenarios that use them.

Each check runs in a process of its own, which moves itself into a private network namespace: the
faults must act there and leave this machine's own network untouched."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from dynalab.cluster import PROJECT_ROOT
from dynalab.lab import network, scenarios

pytestmark = pytest.mark.skipif(
    network.unavailable() is not None, reason=network.unavailable() or ""
)

PROBE_TIMEOUT_S = 60.0
RUN_TIMEOUT_S = 240.0

# In its own namespace: a TCP echo server; a connection attempt and an established connection's
# round trip before, during and after each fault. Prints one JSON line of what it saw.
PROBE = textwrap.dedent(
    """
    import json, socket, threading, time
    from dynalab.lab import network

    network.enter_private_namespace()
    server = socket.create_server(("127.0.0.1", 0))
    port = server.getsockname()[1]

    def serve():
        while True:
            conn, _ = server.accept()
            threading.Thread(target=echo, args=(conn,), daemon=True).start()

    def echo(conn):
        while data := conn.recv(65536):
            conn.sendall(data)

    threading.Thread(target=serve, daemon=True).start()

    def connects():
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1.0).close()
            return True
        except OSError:
            return False

    def round_trip(conn, size):
        conn.settimeout(5.0)
        started = time.monotonic()
        try:
            conn.sendall(b"x" * size)
            got = 0
            while got < size:
                got += len(conn.recv(65536))
        except OSError:
            return None
        return time.monotonic() - started

    conn = socket.create_connection(("127.0.0.1", port), timeout=1.0)
    seen = {"before": [connects(), round_trip(conn, 100)]}
    network.partition(port)
    seen["partitioned"] = [connects(), round_trip(conn, 100)]
    network.heal_partition(port)
    conn = socket.create_connection(("127.0.0.1", port), timeout=1.0)
    seen["healed"] = [connects(), round_trip(conn, 100)]
    network.slow_link(port, kbit=256)
    seen["slow_link"] = [connects(), round_trip(conn, 20_000)]
    network.restore_link()
    seen["restored"] = [connects(), round_trip(conn, 20_000)]
    network.drop_packets(port, probability=1.0)
    seen["all_dropped"] = [connects(), None]
    network.stop_dropping(port, probability=1.0)
    seen["stopped_dropping"] = [connects(), round_trip(conn, 100)]
    print(json.dumps(seen))
    """
)


def test_faults_act_on_the_node_port_inside_the_namespace_only():
    done = subprocess.run(
        [sys.executable, "-c", PROBE],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=PROBE_TIMEOUT_S,
    )
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["before"][0] is True and seen["before"][1] is not None
    # A partition is silent: no new connection, and an established one gets no answer.
    assert seen["partitioned"] == [False, None]
    assert seen["healed"][0] is True and seen["healed"][1] is not None
    # 20 KB each way at 256 kbit/s takes over a second; unlimited, a blink. Compared as a
    # ratio so that a slow machine cannot fail it.
    assert seen["slow_link"][1] is not None and seen["restored"][1] is not None
    assert seen["slow_link"][1] > 10 * seen["restored"][1]
    assert seen["all_dropped"][0] is False
    assert seen["stopped_dropping"][0] is True and seen["stopped_dropping"][1] is not None
    # This process's namespace never saw a rule.
    rules = subprocess.run(["iptables", "-S"], capture_output=True, text=True, timeout=10).stdout
    assert "dynalab-lab" not in rules


@pytest.mark.parametrize(
    ("scenario", "seed", "faults"),
    [
        ("partition-node", 3, {"partition-node"}),
        ("partition-node-replicated", 3, {"partition-node"}),
        ("lossy-network", 0, {"drop-packets"}),
        ("slow-node", 1, {"slow-node"}),
    ],
)
def test_network_and_slowness_scenarios_keep_a_valid_verdict(tmp_path, scenario, seed, faults):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "dynalab", "lab", "run", scenario]
    command += ["--seed", str(seed), "--out", str(out), "--duration", "12"]
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["valid"] is True, json.dumps(verdict, indent=1)
    executed = json.loads((out / "run.json").read_text())["executed"]
    assert {e["fault"] for e in executed} >= faults
    assert all("error" not in e for e in executed), executed
    schedule = scenarios.schedule(scenarios.load(scenario), seed, 12.0)
    # Events run in order, each at its time or when the one before it is done: on a slow machine
    # a restart can push the last ones past the end of the workload, so a prefix is played.
    played = [(e["fault"], e["target"]) for e in executed]
    assert len(played) >= 2 and played == [(e.fault, e.target) for e in schedule][: len(played)]
