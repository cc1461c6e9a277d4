"""The replicator's lease epoch reaches the index partitions, in the seeded cluster.

The replicator's own code (`fence`, then `apply_routed` as a follower sends its batches) runs
against the cluster's nodes over its network: the epoch an index partition stores as its fence is
the lease's, and a holder of an older lease is refused. Until this test, the epoch sent was each
index partition's own (a name shadowed in `_apply`), so no write was ever fenced.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable

import pytest

from core import gsi
from core.catalog import PartitionDef
from core.errors import LeaseFenced
from dynalab.sim.cluster import SimCluster, run
from gsi_replicator.replicator import Replicator
from storagenode.layout import Family, index_source_key, index_source_of
from tests.sim.test_index_splits import entry

SEEDS = [3, 29]
SOURCE = "base-partition-0"
LEASE_EPOCH = 7  # Above any index partition's epoch here, so the two cannot be confused.


def stored_fences(
    cluster: SimCluster, index_id: str, partitions: Iterable[PartitionDef]
) -> set[int]:
    """The lease epoch each index partition fences `SOURCE` at."""
    fences = set()
    for part in partitions:
        key = index_source_key(index_id, part.id, SOURCE)
        value = cluster.stores[part.node].get(Family.INDEX_SOURCES, key)
        assert value is not None, f"index partition {part.id} holds no row for {SOURCE}"
        fences.add(index_source_of(value)[1])
    return fences


@pytest.mark.parametrize("seed", SEEDS)
def test_the_lease_epoch_fences_every_index_partition(seed: int) -> None:
    async def scenario(cluster: SimCluster) -> None:
        table = await cluster.create_indexed("Fenced")
        replicator = Replicator(cluster.addresses, connect=cluster.network.connect)
        try:
            replicator.tables = {table.id: table}
            (consumer,) = gsi.followed_groups(table)
            index = table.indexes[0]
            assert index.table_id is not None
            assert all(p.epoch != LEASE_EPOCH for p in index.partitions)
            await replicator.fence(table.id, SOURCE, consumer, LEASE_EPOCH)
            assert stored_fences(cluster, index.table_id, index.partitions) == {LEASE_EPOCH}
            writes = gsi.project_change(1, None, entry(1), table.indexes, table.key_shape)
            route = functools.partial(gsi.route, writes)
            with pytest.raises(LeaseFenced):
                await replicator.apply_routed(table.id, route, SOURCE, LEASE_EPOCH - 1)
            await replicator.apply_routed(table.id, route, SOURCE, LEASE_EPOCH)
        finally:
            await replicator.close()

    run(seed, scenario)
