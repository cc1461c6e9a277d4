"""`dynalab lab run --endpoint URL --compose FILE`: the lab against deploy/docker-compose.yml, its
faults played through Docker (`dynalab/lab/compose.py`): a node killed and restarted, and a node
cut off its network and connected again, each with a valid verdict."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from dynalab.lab import scenarios
from tests.deploy.test_compose_cluster import (
    COMPOSE_COMMAND_SECONDS_MAX,
    COMPOSE_COMMANDS,
    COMPOSE_FILE,
    REPO,
    docker_client,
    free_port,
    image,
)

__all__ = ["docker_client", "image"]  # Fixtures, used by name.

LAB_RUN_SECONDS_MAX = 420.0  # Docker's kills and restarts are slower than a local cluster's.


@pytest.fixture
def compose_cluster(image: str) -> Iterator[tuple[str, str, dict[str, str]]]:
    if not COMPOSE_COMMANDS:
        pytest.skip("Docker Compose is not installed")
    compose = next(iter(COMPOSE_COMMANDS.values()))
    project = f"dynalablab{uuid.uuid4().hex[:8]}"
    port = free_port()
    env = {**os.environ, "DYNALAB_IMAGE": image, "DYNALAB_ROUTER_PORT": str(port)}
    command = [*compose, "-p", project, "-f", str(COMPOSE_FILE)]

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*command, *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=COMPOSE_COMMAND_SECONDS_MAX,
        )

    try:
        up = run("up", "-d")
        assert up.returncode == 0, up.stdout + up.stderr
        yield f"http://127.0.0.1:{port}", project, env
    finally:
        down = run("down", "-v", "--remove-orphans", "--timeout", "5")
        assert down.returncode == 0, down.stdout + down.stderr


def lab_run(
    scenario: str, seed: int, out: Any, cluster: tuple[str, str, dict[str, str]]
) -> subprocess.CompletedProcess[str]:
    endpoint, project, env = cluster
    command = [sys.executable, "-m", "dynalab", "lab", "run", scenario, "--seed", str(seed)]
    command += ["--out", str(out), "--duration", "16", "--endpoint", endpoint]
    command += ["--compose", str(COMPOSE_FILE), "--project", project]
    return subprocess.run(
        command, cwd=REPO, env=env, capture_output=True, text=True, timeout=LAB_RUN_SECONDS_MAX
    )


def test_the_lab_breaks_a_compose_cluster_through_docker(compose_cluster, tmp_path):
    # Two runs on one cluster: the second finds the first's tables and starts them afresh.
    for scenario, seed, fault in (
        ("kill-node", 7, "kill-node"),
        ("partition-node", 3, "partition-node"),
    ):
        out = tmp_path / scenario
        done = lab_run(scenario, seed, out, compose_cluster)
        assert done.returncode == 0, done.stdout + done.stderr
        verdict = json.loads((out / "verdict.json").read_text())
        assert verdict["valid"] is True, json.dumps(verdict, indent=1)[:4000]
        assert verdict["operations"]["ok"] > 100
        executed = json.loads((out / "run.json").read_text())["executed"]
        assert fault in {e["fault"] for e in executed}
        assert all("error" not in e for e in executed), executed
        planned = scenarios.schedule(scenarios.load(scenario), seed, 16.0)
        assert [e["fault"] for e in executed] == [e.fault for e in planned[: len(executed)]]


def test_a_fault_a_compose_cluster_cannot_play_is_refused_before_anything_runs(tmp_path):
    if not COMPOSE_COMMANDS:
        pytest.skip("Docker Compose is not installed")
    out = tmp_path / "slow"
    command = [sys.executable, "-m", "dynalab", "lab", "run", "slow-node", "--seed", "1"]
    command += ["--out", str(out), "--endpoint", "http://127.0.0.1:9", "--compose"]
    command += [str(COMPOSE_FILE)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "needs what a compose cluster lacks: slow-node" in " ".join(done.stdout.split())
    assert not out.exists()
