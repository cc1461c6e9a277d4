"""`dynalab node ...` against a real `dynalab up`: list, kill, start, stop, pause and resume its
processes from another process, and what `dynalab up` says when one goes down."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dynalab.cluster import PROJECT_ROOT, free_ports
from tests.integration.test_cli import UpProcess, child_pids, dynalab, is_alive, up_processes

NODE_COMMAND_TIMEOUT_S = 60.0  # A start waits for the process to be ready (30 s at most).
OUTPUT_TIMEOUT_S = 10.0  # `dynalab up` looks for exited processes twice a second.
__all__ = ["up_processes"]  # The fixture, shared with test_cli.


def node(data_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        dynalab("node", *args, "--data-dir", str(data_dir)),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=NODE_COMMAND_TIMEOUT_S,
        env={**os.environ, "COLUMNS": "200"},
    )


def listed(data_dir: Path) -> dict[str, tuple[str, str]]:
    """`dynalab node list` as {name: (state, pid)}."""
    run = node(data_dir, "list")
    assert run.returncode == 0, run.stdout + run.stderr
    rows = {}
    for line in run.stdout.splitlines():
        cells = [cell.strip() for cell in line.strip("│|").split("│")]
        if len(cells) == 5 and cells[0] and cells[0] != "name":
            rows[cells[0]] = (cells[1], cells[2])
    return rows


def wait_output(up: UpProcess, text: str) -> None:
    deadline = time.monotonic() + OUTPUT_TIMEOUT_S
    while text not in up.output.read_text():
        assert time.monotonic() < deadline, f"{text!r} not in:\n{up.output.read_text()}"
        time.sleep(0.1)


def process_state(pid: int) -> str:
    """The state letter in /proc/<pid>/stat (R, S, T for stopped, ...)."""
    text = Path(f"/proc/{pid}/stat").read_text()
    return text[text.rindex(")") + 2]


def test_node_controls_on_a_running_cluster(
    tmp_path: Path,
    up_processes: list[UpProcess],
    dynamodb_for: Callable[[str], Any],
    create_table: Callable[..., str],
) -> None:
    data_dir = tmp_path / "data"
    (port,) = free_ports(1)
    up = UpProcess(data_dir, port, tmp_path / "up.out", "--throttling", "off")
    up_processes.append(up)
    wait_output(up, "Press Ctrl-C to stop.")
    banner = up.output.read_text()
    assert re.search(rf"^endpoint +http://127.0.0.1:{port} ", banner, re.MULTILINE), banner
    assert "export AWS_ACCESS_KEY_ID=dynalab AWS_SECRET_ACCESS_KEY=dynalab" in banner
    assert "throughput: not enforced (--throttling off)" in banner

    services = listed(data_dir)
    assert sorted(services) == ["node-1", "node-2", "node-3", "replicator-1", "router-1"]
    assert {state for state, _ in services.values()} == {"running"}
    assert {int(pid) for _, pid in services.values()} == child_pids(up.process.pid)

    # --throttling off reached the nodes: a 1-WCU table takes 30 writes of 1 KB back to back.
    client = dynamodb_for(up.url)
    create_table(client, "Tiny", throughput=(1, 1))
    for i in range(30):
        client.put_item(TableName="Tiny", Item={"pk": {"S": f"k{i % 3}"}, "v": {"S": "x" * 1000}})

    # Killed on request: down, said so, and started again under `dynalab up`, with its data.
    killed = node(data_dir, "kill", "node-2")
    assert killed.returncode == 0, killed.stdout + killed.stderr
    assert "node-2 killed" in killed.stdout
    wait_output(
        up,
        f"node-2 is down on request; start it with: dynalab node start node-2 "
        f"--data-dir {data_dir}",
    )
    assert listed(data_dir)["node-2"] == ("stopped", "")
    again = node(data_dir, "stop", "node-2")
    assert (again.returncode, "node-2 is not running" in again.stdout) == (1, True)
    started = node(data_dir, "start", "node-2")
    assert started.returncode == 0, started.stdout + started.stderr
    state, pid = listed(data_dir)["node-2"]
    assert state == "running"
    assert int(pid) in child_pids(up.process.pid), "the restarted node is not a child of up"
    items = client.scan(TableName="Tiny", ConsistentRead=True)["Items"]
    assert sorted(item["pk"]["S"] for item in items) == ["k0", "k1", "k2"]

    # A process that dies by itself is reported with the command that starts it again.
    _, router_pid = listed(data_dir)["router-1"]
    os.kill(int(router_pid), signal.SIGKILL)
    wait_output(up, "router-1 exited (code -9)")
    wait_output(up, f"start it again with: dynalab node start router-1 --data-dir {data_dir}")
    assert listed(data_dir)["router-1"][0] == "exited"
    assert node(data_dir, "start", "router-1").returncode == 0
    assert client.list_tables()["TableNames"] == ["Tiny"]

    # Paused (SIGSTOP) and resumed.
    _, node_pid = listed(data_dir)["node-1"]
    assert node(data_dir, "pause", "node-1").returncode == 0
    assert listed(data_dir)["node-1"] == ("paused", node_pid)
    assert process_state(int(node_pid)) == "T"
    assert node(data_dir, "resume", "node-1").returncode == 0
    assert listed(data_dir)["node-1"] == ("running", node_pid)
    assert process_state(int(node_pid)) != "T"

    # Stopped (SIGTERM) while paused: it is continued so that it can act on the signal.
    assert node(data_dir, "pause", "node-3").returncode == 0
    stopped = node(data_dir, "stop", "node-3")
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "node-3 stopped (exit code 0)" in stopped.stdout
    assert listed(data_dir)["node-3"] == ("stopped", "")
    assert node(data_dir, "start", "node-3").returncode == 0

    refused = node(data_dir, "start", "node-3")
    assert (refused.returncode, "node-3 is already running" in refused.stdout) == (1, True)
    unknown = node(data_dir, "kill", "node-9")
    assert (unknown.returncode, "no process named 'node-9'" in unknown.stdout) == (1, True)

    children = child_pids(up.process.pid)
    assert up.terminate() == 0
    assert [pid for pid in children if is_alive(pid)] == [], "orphaned cluster processes"
    after = node(data_dir, "list")
    assert (after.returncode, "no dynalab up is running" in after.stdout) == (1, True)
