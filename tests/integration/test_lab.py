"""`dynalab lab run` for real: short kill -9 scenarios (a storage node; the router, which the
nemesis restarts while the clients run) against a cluster the lab starts itself, whose verdict
must be valid and whose files must all be written."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from dynalab.cluster import PROJECT_ROOT
from dynalab.lab import scenarios

RUN_TIMEOUT_S = 240.0  # Cluster start, 12 s of workload, restarts, final reads, the report.


@pytest.mark.parametrize("scenario", ["kill-node", "kill-router"])
def test_scenario_runs_end_to_end_with_a_valid_verdict(tmp_path, scenario):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "dynalab", "lab", "run", scenario]
    command += ["--seed", "7", "--out", str(out), "--duration", "12"]
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    for name in ("history.jsonl", "faults.json", "verdict.json", "report.html", "run.json"):
        assert (out / name).stat().st_size > 0, name

    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["valid"] is True, json.dumps(verdict, indent=1)
    assert verdict["operations"]["ok"] > 0
    assert verdict["checkers"]["linearizable-registers"]["undecided_keys"] == []

    schedule = scenarios.schedule(scenarios.load(scenario), 7, 12.0)
    assert json.loads((out / "faults.json").read_text()) == [e.to_json() for e in schedule]
    executed = json.loads((out / "run.json").read_text())["executed"]
    # Events run in order, each at its time or when the one before it is done: on a slow machine
    # a restart can push the last ones past the end of the workload, so a prefix is played.
    played = [(e["fault"], e["target"]) for e in executed]
    assert len(played) >= 2 and played == [(e.fault, e.target) for e in schedule][: len(played)]
    assert all("error" not in e for e in executed)

    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    finals = {o["key"] for o in history if o.get("final") and o["outcome"] == "ok"}
    assert finals == {f"r{i}" for i in range(6)} | {"c0", "c1", "c2", "l0", "l1", "l2"}
    assert f"{scenario} " in (out / "report.html").read_text()


def test_killing_the_gsi_replicator_leaves_an_index_that_converges(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "dynalab", "lab", "run", "kill-replicator"]
    command += ["--seed", "2", "--out", str(out), "--duration", "14"]
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["valid"] is True, json.dumps(verdict, indent=1)
    assert verdict["checkers"]["index-converged"]["entries"] > 0
    executed = json.loads((out / "run.json").read_text())["executed"]
    assert ("kill-replicator", "replicator-1") in {(e["fault"], e["target"]) for e in executed}
    assert all("error" not in e for e in executed)
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    reads = [o for o in history if o["op"] == "index-read" and o["outcome"] == "ok"]
    assert any(o["value"] for o in reads), "index queries must have returned entries"


def test_killing_the_replicator_mid_backfill_leaves_a_complete_index(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "dynalab", "lab", "run", "kill-replicator-backfill"]
    command += ["--seed", "1", "--out", str(out), "--duration", "16"]
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["valid"] is True, json.dumps(verdict, indent=1)
    preload = scenarios.load("kill-replicator-backfill").index_plan.preload
    assert verdict["checkers"]["index-converged"]["entries"] >= preload
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    [created] = [o for o in history if o["op"] == "index-create" and o["outcome"] == "ok"]
    kills = [
        e["at_s"]
        for e in json.loads((out / "run.json").read_text())["executed"]
        if e["fault"] == "kill-replicator"
    ]
    # The first kill lands after the index was added (at 2.5 s, half a second into the backfill).
    assert kills and created["complete_s"] < kills[0]
    reads = [o for o in history if o["op"] == "index-read" and o["outcome"] == "ok"]
    assert all(o["invoke_s"] > created["invoke_s"] for o in reads)


def test_partitions_splitting_under_faults_keep_a_valid_verdict(tmp_path):
    out = tmp_path / "run"
    command = [sys.executable, "-m", "dynalab", "lab", "run", "split-under-faults"]
    command += ["--seed", "2", "--out", str(out), "--duration", "14"]
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["valid"] is True, json.dumps(verdict, indent=1)
    assert verdict["checkers"]["linearizable-registers"]["undecided_keys"] == []
    logs = "".join(p.read_text() for p in (out / "cluster" / "logs").glob("node-*.log"))
    assert logs.count(": installed in ") >= 5, "the partitions were meant to split again and again"
    executed = json.loads((out / "run.json").read_text())["executed"]
    assert any(e["fault"] == "kill-node" for e in executed) or any(
        e["fault"] == "kill-router" for e in executed
    )
