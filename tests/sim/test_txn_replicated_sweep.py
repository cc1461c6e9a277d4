"""The transaction machine's crash-point sweep (`tests/sim/test_txn_sweep.py`) on a replicated
cluster: three nodes, every partition a Raft group of three (the Bank table's and the
catalog's), the links between the groups losing, duplicating and delaying messages.

Every case of that sweep plays here: the coordinating router dies between two effects (and the
resolver taking its transactions on dies too), or the node that leads the partition of the
ledger, or of another participant, dies there and restarts while the others elect a new leader.
A replicated partition keeps its records, its part of each attempt and its locks in its own
group (`storagenode/transactions.py`), so the new leader carries on from them: the same checks
hold (every acknowledged transaction wholly applied, every cancelled one wholly absent, every
unknown one all or nothing, every acknowledged increment there) and no lock or unfinished
ledger is left on any replica. A failing seed replays with
`python -m tests.sim.sweep txn_replicated SEED`.
"""

from __future__ import annotations

import asyncio

import pytest

from core import limits
from core.keycodec import successor
from dynalab.sim.cluster import SimCluster
from router import transactions as coordinator
from rpc.local import Faults
from storagenode import transactions as node_transactions
from storagenode.layout import Family
from tests.sim.sweep import Sweep
from tests.sim.test_txn_sweep import CASES, scenario

RAFT_FAULTS = Faults(drop_request=0.02, duplicate=0.02, delay_seconds_max=0.01)


def rows_left(cluster: SimCluster, prefix: bytes) -> list[bytes]:
    return [
        key
        for store in cluster.stores.values()
        for key, _ in store.walk(Family.TRANSACTIONS, prefix, successor(prefix), forward=True)
    ]


async def forgotten(
    cluster: SimCluster, case: tuple[str, str, bool, str | None], label: str
) -> None:
    """The case, then: once the parts' time has passed, a resolver round forgets them on every
    replica (a sweep addressed to each partition, an entry of its group), and no node kept a
    part or record of its own for a replicated partition."""
    await scenario(cluster, case, label)
    for _ in range(3):
        await asyncio.sleep(limits.TRANSACTION_RESOLVE_SECONDS + 1)
        await coordinator.resolve_once(cluster.routers[2])
        await asyncio.sleep(0.5)
        if not rows_left(cluster, node_transactions.GROUP_PART_PREFIX):
            break
    assert rows_left(cluster, node_transactions.GROUP_PART_PREFIX) == [], f"{label}: parts kept"
    assert rows_left(cluster, node_transactions.PART_PREFIX) == [], f"{label}: node parts"
    assert rows_left(cluster, node_transactions.RECORD_PREFIX) == [], f"{label}: node records"


SWEEP = Sweep(
    "txn_replicated",
    CASES,
    forgotten,
    seeds_per_case=1,
    options={"routers": 3, "replication_factor": 3, "raft_faults": RAFT_FAULTS},
)


@pytest.mark.parametrize("seed", SWEEP.seeds())
def test_a_replicated_transaction_killed_between_any_two_effects(seed: int) -> None:
    SWEEP.run(seed)
