"""What moving a global index partition needs beyond a table partition's move (`storagenode.move`).

An index partition is moved by the same steps as a table's (`Mover`: INCOMING copy, pin, copy,
catch-up, fence, drain, catalog switch, activate, drop), because its state maps onto them:

- its entries are items under the index's id, copied page by page like items;
- it keeps no change log of its own, but while a move holds it (the `__move` consumer is
  registered by the "register" step, a write group before the pin, until the switch or the
  roll-back) `index_apply` logs every entry write it makes (through the group's one `apply`,
  as a table's writes are logged), so the catch-up and the drain carry what the replicator
  applied after the pin exactly as they carry a table's writes (the pin's iterators see only
  what committed before its group: a write earlier in that group is caught up only because it
  was logged);
- its per-source rows (`index_sources`: the seq last applied from each base partition and the
  lease epoch it fences at) change only with `index_apply`, which the fence refuses with
  StaleEpoch (the refusal the replicator re-routes on), so the drain takes them as final
  (`source_rows`, then `take_rows` on the target, in the drain's batch);
- the source's drop and the target's abort delete them with the copy (`drop_rows`).

The catalog switch records the new node in the index's entry of the table's row
(`core.moves.switched` through `core.splits.lineage`).
"""

from __future__ import annotations

from core.keycodec import successor
from storagenode.layout import Family
from storagenode.partition import Partition
from storagenode.store import NodeStore, WriteBatchView


def _rows_range(partition: Partition) -> tuple[bytes, bytes]:
    """The `index_sources` keys of a partition: its log prefix, then each source's id."""
    lo = partition.log_prefix
    hi = successor(lo)
    assert hi is not None, "a partition's log prefix is never all 0xff"
    return lo, hi


def source_rows(store: NodeStore, partition: Partition) -> list[list[str]]:
    """The partition's committed per-source rows, as [source key hex, value hex] pairs."""
    lo, hi = _rows_range(partition)
    return [
        [key[len(lo) :].hex(), value.hex()]
        for key, value in store.walk(Family.INDEX_SOURCES, lo, hi, forward=True)
    ]


def take_rows(batch: WriteBatchView, partition: Partition, rows: list[list[str]]) -> None:
    """Make `rows` (`source_rows` of the source) the partition's per-source rows."""
    lo, hi = _rows_range(partition)
    batch.delete_range(Family.INDEX_SOURCES, lo, hi)
    for source_hex, value_hex in rows:
        batch.put(Family.INDEX_SOURCES, lo + bytes.fromhex(source_hex), bytes.fromhex(value_hex))


def drop_rows(batch: WriteBatchView, partition: Partition) -> None:
    """Delete the partition's per-source rows (a table partition has none)."""
    batch.delete_range(Family.INDEX_SOURCES, *_rows_range(partition))
