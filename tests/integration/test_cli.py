"""The command line and the LocalCluster behind it, run for real: `dynalab up` as a subprocess that
must stop every process it started and find its data again, `dynalab bench` against a live cluster,
and the kill/stop/start controls that fault-injection tests rely on."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from dynalab.cluster import PROJECT_ROOT, LocalCluster, answers_http, free_ports

UP_TIMEOUT_S = 60.0  # `dynalab up` start-up: its own 30 s budget plus interpreter start-ups.
EXIT_TIMEOUT_S = 30.0  # `dynalab up` after SIGTERM: the 10 s grace of each tier, with margin.
BENCH_TIMEOUT_S = 120.0


def child_pids(parent: int) -> set[int]:
    """The ids of the processes whose parent is `parent`, read from /proc."""
    children = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue  # The process ended while we looked.
        # Fields after the command name, which is in parentheses and may itself hold spaces.
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[1]) == parent:
            children.add(int(stat.parent.name))
    return children


def is_alive(pid: int) -> bool:
    return Path(f"/proc/{pid}").exists()


def wait_for_endpoint(port: int, process: subprocess.Popen[bytes], output: Path) -> None:
    """Wait until `dynalab up` says it is up (every process started, the GSI replicators after
    the routers) and the router on `port` answers GET /, failing early if `dynalab up` exits."""
    deadline = time.monotonic() + UP_TIMEOUT_S
    while not (answers_http(port) and "dynalab is up" in output.read_text()):
        if process.poll() is not None:
            pytest.fail(f"dynalab up exited with {process.returncode}:\n{output.read_text()}")
        if time.monotonic() >= deadline:
            pytest.fail(f"dynalab up did not serve within {UP_TIMEOUT_S} s:\n{output.read_text()}")
        time.sleep(0.1)


def number_after(label: str, text: str) -> float:
    """The number in the row `label` of the bench's summary table, whatever box characters the
    console chose."""
    found = re.search(rf"^\W*{re.escape(label)}\W+([\d,.]+)", text, re.MULTILINE)
    assert found, f"no {label!r} row in:\n{text}"
    return float(found.group(1).replace(",", ""))


def dynalab(*args: str) -> list[str]:
    return [sys.executable, "-m", "dynalab", *args]


class UpProcess:
    """`dynalab up` running as a subprocess, its output captured in a file."""

    def __init__(self, data_dir: Path, port: int, output: Path, *options: str) -> None:
        self.url = f"http://127.0.0.1:{port}"
        self.output = output
        # Each run's output on its own: a restart's start-up is not read from the first run's.
        with output.open("wb") as sink:
            self.process = subprocess.Popen(
                dynalab(
                    "up", "--nodes", "3", "--port", str(port), "--data-dir", str(data_dir), *options
                ),
                cwd=PROJECT_ROOT,
                stdin=subprocess.DEVNULL,
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
        wait_for_endpoint(port, self.process, output)

    def terminate(self) -> int:
        """SIGTERM `dynalab up` and return its exit code."""
        self.process.send_signal(signal.SIGTERM)
        return self.process.wait(EXIT_TIMEOUT_S)

    def ensure_stopped(self) -> None:
        # Only reached when a test failed half-way; the children follow through PR_SET_PDEATHSIG.
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(EXIT_TIMEOUT_S)


@pytest.fixture
def up_processes() -> Iterator[list[UpProcess]]:
    """Collects the `dynalab up` processes a test starts and makes sure none outlives it."""
    started: list[UpProcess] = []
    yield started
    for up in started:
        up.ensure_stopped()


def test_up_stops_everything_and_finds_its_data_again(
    tmp_path: Path,
    up_processes: list[UpProcess],
    dynamodb_for: Callable[[str], Any],
    create_table: Callable[..., str],
) -> None:
    data_dir = tmp_path / "data"
    output = tmp_path / "up.out"
    (port,) = free_ports(1)

    first = UpProcess(data_dir, port, output)
    up_processes.append(first)
    children = child_pids(first.process.pid)
    assert len(children) == 5, f"expected 3 nodes, 1 router and 1 replicator, found {children}"
    recorded = json.loads((data_dir / "cluster.json").read_text())
    assert [node["id"] for node in recorded["nodes"]] == ["node-1", "node-2", "node-3"]
    assert sorted(p.name for p in (data_dir / "logs").iterdir()) == [
        "node-1.log",
        "node-2.log",
        "node-3.log",
        "replicator-1.log",
        "router-1.log",
    ]

    client = dynamodb_for(first.url)
    create_table(client, "Music", hash_key=("Artist", "S"), range_key=("Song", "S"))
    songs = [f"Song {i}" for i in range(20)]
    for song in songs:
        client.put_item(TableName="Music", Item={"Artist": {"S": "Arvo Pärt"}, "Song": {"S": song}})

    # A second `dynalab up` on the same data directory must refuse instead of sharing it.
    (other_port,) = free_ports(1)
    second = subprocess.run(
        dynalab("up", "--port", str(other_port), "--data-dir", str(data_dir)),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=UP_TIMEOUT_S,
    )
    assert second.returncode == 1
    assert "another dynalab cluster is running" in second.stdout

    assert first.terminate() == 0
    assert [pid for pid in children if is_alive(pid)] == [], "orphaned cluster processes"
    assert "stopped" in output.read_text()

    again = UpProcess(data_dir, port, output)
    up_processes.append(again)
    assert json.loads((data_dir / "cluster.json").read_text()) == recorded
    client = dynamodb_for(again.url)
    assert client.list_tables()["TableNames"] == ["Music"]
    reply = client.query(
        TableName="Music",
        KeyConditionExpression="Artist = :a",
        ExpressionAttributeValues={":a": {"S": "Arvo Pärt"}},
        ConsistentRead=True,
    )
    assert sorted(item["Song"]["S"] for item in reply["Items"]) == sorted(songs)
    children = child_pids(again.process.pid)
    assert again.terminate() == 0
    assert [pid for pid in children if is_alive(pid)] == [], "orphaned cluster processes"


def test_bench_reports_throughput(cluster: LocalCluster, dynamodb: Any) -> None:
    run = subprocess.run(
        dynalab(
            "bench",
            "--endpoint",
            cluster.router_url,
            "--workload",
            "mixed",
            "--duration",
            "2",
            "--concurrency",
            "16",
            "--keys",
            "200",
        ),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
        env={**os.environ, "COLUMNS": "120"},
    )
    print(run.stdout)  # The numbers, for whoever runs pytest -s.
    assert run.returncode == 0, run.stdout + run.stderr
    assert number_after("ops/s", run.stdout) > 0
    assert number_after("errors", run.stdout) == 0, run.stdout
    # Piped, the bench has no live display but still prints its progress now and then.
    assert re.search(r"^\s*\d+\.\d/2 s .* ops/s .* errors$", run.stdout, re.MULTILINE), run.stdout
    # The table it created is gone again.
    assert "deleted table dynalab-bench (keep it with --keep)" in run.stdout
    assert "dynalab-bench" not in dynamodb.list_tables()["TableNames"]


def test_bench_help_names_the_defaults() -> None:
    run = subprocess.run(
        dynalab("bench", "--help"),
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=BENCH_TIMEOUT_S,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert run.returncode == 0
    for default in ("(default: 32)", "(default: 10.0)", "(default: put)", "(default: 1000)"):
        assert default in run.stdout, run.stdout


def test_a_killed_node_comes_back_with_its_data(
    cluster: LocalCluster,
    dynamodb: Any,
    dynamodb_for: Callable[[str], Any],
    table_name: Callable[[], str],
    create_table: Callable[..., str],
) -> None:
    name = table_name()
    create_table(dynamodb, name, hash_key=("id", "S"))
    keys = [f"item-{i}" for i in range(30)]
    for key in keys:
        dynamodb.put_item(TableName=name, Item={"id": {"S": key}, "n": {"N": "1"}})

    node = cluster.node("node-2")
    address, old_pid = node.address, node.pid
    node.kill()
    assert not node.is_running()
    node.start()
    assert node.is_running() and node.pid != old_pid and node.address == address

    # Every router, including the second, reads every acknowledged write back.
    for url in cluster.router_urls:
        client = dynamodb_for(url)
        for key in keys:
            item = client.get_item(TableName=name, Key={"id": {"S": key}}, ConsistentRead=True)
            assert item["Item"]["id"]["S"] == key

    assert node.stop() == 0, "a storage node should exit cleanly on SIGTERM"
    node.start()
