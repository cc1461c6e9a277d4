"""The lab's scenarios on the in-process cluster (`dynalab.lab.simulated`): a fixed set of seeds per
scenario must give a valid verdict, a seed must replay exactly, and a deliberately broken node
must be caught. A failing seed is named in the assertion; replay it with
`dynalab lab sweep SCENARIO --seed N --out DIR`."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from dynalab.lab import scenarios
from dynalab.lab.simulated import simulate
from dynalab.sim.cluster import SimCluster

SEEDS = [1, 2, 3]
# Every scenario, replicated ones too (`SimCluster(replication_factor=...)`).
SIMULATED = sorted(scenarios.available())
# A scenario that preloads thousands of items spends most of a seed writing them: one seed here,
# more with `dynalab lab sweep NAME --seeds 1-50`.
PRELOADING_SEEDS = [1]
# The banks simulate the longest (transactions across nodes, through kills), and the
# preloading ones spend long writing: the full suite runs them, `make test-fast` leaves them out.
SLOW = {"bank-transfers", "bank-slow-network", "bank-replicated"} | {
    n for n in SIMULATED if scenarios.load(n).index_plan.preload
}
CASES = [
    pytest.param(name, seed, marks=pytest.mark.slow) if name in SLOW else (name, seed)
    for name in SIMULATED
    for seed in (PRELOADING_SEEDS if scenarios.load(name).index_plan.preload else SEEDS)
]


@pytest.mark.parametrize(("name", "seed"), CASES)
def test_every_scenario_keeps_a_valid_verdict_in_simulation(name: str, seed: int) -> None:
    scenario = scenarios.load(name)
    changes: dict[str, int] = {}

    async def observe(cluster: SimCluster) -> None:
        changes.update(await splits_and_moves(cluster))

    verdict, history, executed = simulate(scenario, seed, observe=observe)
    assert verdict["valid"], f"{name} seed {seed}: {json.dumps(verdict, indent=1)[:4000]}"
    planned = scenarios.schedule(scenario, seed, scenario.duration_s)
    assert [(e["fault"], e["target"]) for e in executed] == [(e.fault, e.target) for e in planned]
    assert executed, f"{name} seed {seed}: no fault was played"
    assert verdict["operations"]["ok"] > 100
    if scenario.split_bytes is not None:
        # The nodes split past the scenario's size again and again, and the router's placement
        # mover moved children through the nodes' drivers, while the faults struck.
        assert changes["splits"] >= 5, f"{name} seed {seed}: {changes}"
        assert changes["moves"] >= 1, f"{name} seed {seed}: {changes}"
    checked_as_a_real_run = AS_REAL_RUNS.get(name)
    if checked_as_a_real_run is not None:
        checked_as_a_real_run(verdict, [o.to_json() for o in history], executed, changes)


# What tests/integration/test_lab.py checked of a real `dynalab lab run` of these scenarios, whose
# real runs it no longer makes: they played the same kills through the same process controls as
# its kill-node run, on mechanisms that other real-process tests kill (test_transactions_faults
# the router, test_gsi_faults the replicator mid-stream, test_splits nodes under splits), and
# here each is checked on every seed, beside the checks above: a valid verdict (index-converged
# among its checkers) and the whole schedule played, where a real run played a prefix of it. A
# real run also checked that no fault failed to play (the simulated nemesis has no such failure)
# and the files it wrote, which the kill-node run still checks.
def _decided_with_every_final_read(
    verdict: dict[str, Any], history: list[dict[str, Any]], finals: set[str]
) -> None:
    assert verdict["checkers"]["linearizable-registers"]["undecided_keys"] == []
    read = {o["key"] for o in history if o.get("final") and o["outcome"] == "ok"}
    assert read == finals, read ^ finals


def _as_kill_router(
    verdict: dict[str, Any],
    history: list[dict[str, Any]],
    executed: list[dict[str, Any]],
    changes: dict[str, int],
) -> None:
    every_key = {f"r{i}" for i in range(6)} | {"c0", "c1", "c2", "l0", "l1", "l2"}
    _decided_with_every_final_read(verdict, history, every_key)


def _as_kill_replicator(
    verdict: dict[str, Any],
    history: list[dict[str, Any]],
    executed: list[dict[str, Any]],
    changes: dict[str, int],
) -> None:
    assert verdict["checkers"]["index-converged"]["entries"] > 0
    assert ("kill-replicator", "replicator-1") in {(e["fault"], e["target"]) for e in executed}
    reads = [o for o in history if o["op"] == "index-read" and o["outcome"] == "ok"]
    assert any(o["value"] for o in reads), "index queries must have returned entries"


def _as_split_under_faults(
    verdict: dict[str, Any],
    history: list[dict[str, Any]],
    executed: list[dict[str, Any]],
    changes: dict[str, int],
) -> None:
    assert verdict["checkers"]["linearizable-registers"]["undecided_keys"] == []
    assert changes["moves"] >= 3, "children were meant to move"
    assert {"kill-node", "kill-router"} & {e["fault"] for e in executed}


AS_REAL_RUNS: dict[
    str,
    Callable[[dict[str, Any], list[dict[str, Any]], list[dict[str, Any]], dict[str, int]], None],
] = {
    "kill-router": _as_kill_router,
    "kill-replicator": _as_kill_replicator,
    "split-under-faults": _as_split_under_faults,
}


async def splits_and_moves(cluster: SimCluster) -> dict[str, int]:
    """How many partitions the catalog records as split (retired parents), and how many split
    children as moved since (a split leaves both children on their parent's node)."""
    router = cluster.add_router()
    await router.refresh()
    splits = moves = 0
    for table in router.records.values():
        parents = {partition.id: partition for partition in table.retired}
        splits += len(parents)
        moves += sum(
            1
            for partition in (*table.partitions, *table.retired)
            if partition.parent in parents and partition.node != parents[partition.parent].node
        )
    return {"splits": splits, "moves": moves}


def test_a_seed_replays_exactly() -> None:
    scenario = scenarios.load("mixed-chaos")
    first = simulate(scenario, 11, 20.0)
    again = simulate(scenario, 11, 20.0)
    assert [o.to_json() for o in first[1]] == [o.to_json() for o in again[1]]
    assert first[2] == again[2]
    other = simulate(scenario, 12, 20.0)
    assert [o.to_json() for o in other[1]] != [o.to_json() for o in first[1]]


def test_a_node_that_forgets_acknowledged_writes_is_caught() -> None:
    scenario = scenarios.load("kill-node")
    caught = []
    for seed in SEEDS:
        verdict, _, _ = simulate(scenario, seed, forget_recent_writes=True)
        if not verdict["valid"]:
            caught.append(seed)
            failed = [name for name, r in verdict["checkers"].items() if not r["valid"]]
            assert failed, verdict
            first = verdict["checkers"][failed[0]]
            assert first["counterexamples"], f"seed {seed}: {failed[0]} gave no counterexample"
    assert caught == SEEDS, f"the lost writes went unnoticed with seeds {set(SEEDS) - set(caught)}"
