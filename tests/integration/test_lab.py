"""`dynalab lab run` for real: short kill -9 scenarios against a cluster the lab starts itself,
whose verdict must be valid and whose files must all be written: a storage node killed and
restarted while the clients run, the same on a cluster of replicated partitions, and the GSI
replicator killed mid-backfill of an index added online (the lab's indexed workload, with a
replicator in its cluster).

The other kill scenarios (kill-router, kill-replicator, split-under-faults) play the same kills
through the same process controls, so they run in `tests/sim/test_lab_sim.py`, on three seeds
each, with the checks their real runs had here; `tests/integration/test_lab_network.py` runs the
network and slowness scenarios for real."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynalab.cluster import PROJECT_ROOT
from dynalab.lab import scenarios

RUN_TIMEOUT_S = 240.0  # Cluster start, 12 s of workload, restarts, final reads, the report.


@dataclass(frozen=True)
class Run:
    """What one `dynalab lab run` wrote, read back."""

    out: Path
    verdict: dict[str, Any]
    executed: list[dict[str, Any]]
    history: list[dict[str, Any]]

    def ok(self, op: str) -> list[dict[str, Any]]:
        """The history's operations of kind `op` that succeeded."""
        return [o for o in self.history if o["op"] == op and o["outcome"] == "ok"]


def run_lab(tmp_path: Path, scenario: str, seed: int, duration: float) -> Run:
    """Run `scenario` to the end; it must exit 0 with a valid verdict."""
    out = tmp_path / "run"
    command = [sys.executable, "-m", "dynalab", "lab", "run", scenario]
    command += ["--seed", str(seed), "--out", str(out), "--duration", f"{duration:g}"]
    done = subprocess.run(
        command, cwd=PROJECT_ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )
    assert done.returncode == 0, done.stdout + done.stderr
    verdict = json.loads((out / "verdict.json").read_text())
    assert verdict["valid"] is True, json.dumps(verdict, indent=1)
    return Run(
        out,
        verdict,
        json.loads((out / "run.json").read_text())["executed"],
        [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()],
    )


def test_a_node_killed_and_restarted_runs_end_to_end_with_a_valid_verdict(tmp_path):
    scenario = "kill-node"
    run = run_lab(tmp_path, scenario, seed=7, duration=12)
    for name in ("history.jsonl", "faults.json", "verdict.json", "report.html", "run.json"):
        assert (run.out / name).stat().st_size > 0, name
    assert run.verdict["operations"]["ok"] > 0
    assert run.verdict["checkers"]["linearizable-registers"]["undecided_keys"] == []

    schedule = scenarios.schedule(scenarios.load(scenario), 7, 12.0)
    assert json.loads((run.out / "faults.json").read_text()) == [e.to_json() for e in schedule]
    # Events run in order, each at its time or when the one before it is done: on a slow machine
    # a restart can push the last ones past the end of the workload, so a prefix is played.
    played = [(e["fault"], e["target"]) for e in run.executed]
    assert len(played) >= 2 and played == [(e.fault, e.target) for e in schedule][: len(played)]
    assert all("error" not in e for e in run.executed)

    finals = {o["key"] for o in run.history if o.get("final") and o["outcome"] == "ok"}
    assert finals == {f"r{i}" for i in range(6)} | {"c0", "c1", "c2", "l0", "l1", "l2"}
    assert f"{scenario} " in (run.out / "report.html").read_text()


def test_a_replicated_clusters_node_killed_keeps_every_key_serving(tmp_path):
    """kill-node-replicated: the same kills as kill-node on partitions of three replicas. Every
    key, the dead node's partitions' too, takes operations during the kill (after an election,
    within the requests' deadlines), where kill-node's dead node's keys answer 503 for the whole
    window; the registers stay linearizable (strong reads at a leader under its lease)."""
    run = run_lab(tmp_path, "kill-node-replicated", seed=7, duration=12)
    assert run.verdict["checkers"]["linearizable-registers"]["undecided_keys"] == []
    kill, restart = run.executed[0], run.executed[1]
    assert (kill["fault"], restart["fault"]) == ("kill-node", "restart-node")
    served = {
        o["key"]
        for o in run.history
        if o["outcome"] == "ok"
        and kill["done_s"] <= o["invoke_s"]
        and o["complete_s"] <= restart["at_s"]
        and not o.get("final")
    }
    keys = {f"r{i}" for i in range(6)} | {"c0", "c1", "c2", "l0", "l1", "l2"}
    assert served == keys, f"keys with no operation served during the kill: {keys - served}"


def test_killing_the_replicator_mid_backfill_leaves_a_complete_index(tmp_path):
    run = run_lab(tmp_path, "kill-replicator-backfill", seed=1, duration=16)
    preload = scenarios.load("kill-replicator-backfill").index_plan.preload
    assert run.verdict["checkers"]["index-converged"]["entries"] >= preload
    [created] = run.ok("index-create")
    kills = [e["at_s"] for e in run.executed if e["fault"] == "kill-replicator"]
    # The first kill lands after the index was added (at 2.5 s, half a second into the backfill).
    assert kills and created["complete_s"] < kills[0]
    assert all(o["invoke_s"] > created["invoke_s"] for o in run.ok("index-read"))
