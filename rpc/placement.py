"""Which partition replicas a table's catalog row puts on which node, and the `create_partition`
call that makes each: one description shared by the router that creates a table (or an index)
and the node that makes its placement whole later (`storagenode/placement.py`).

`replica_creations(table)` lists every (node, payload) of a table's partitions and its global
indexes' partitions; `index_creations(table, index)` those of one global index.

`reconcile(node, held, tables)` is what a node must do to match the catalog: drop the stored
tables (a table's or a global index's partitions) no table in the catalog names any more, and
create the replicas the catalog places on it that it lacks. It is pure, and safe only given how
the catalog and the nodes change, which the caller must keep:

- A table's row (and a global index in it) is written before any of its partitions is created,
  and table and index ids are fresh, never used again. So a stored id absent from a catalog read
  that began after the node listed what it holds belongs to a table or index deleted (or whose
  creation was abandoned) for good: dropping it loses nothing anyone can ask for.
- Only replicated partitions of tables that are ACTIVE or UPDATING (and of global indexes ACTIVE
  or BACKFILLING, whose partitions exist) are created: a CREATING table's partitions are its
  creating router's, a DELETING one's are being dropped, a one-copy partition lives on its node
  alone (created there by the router, moved or split by its nodes). A replica created late starts
  empty, as every replica of its group started; its group's leader brings it up to date from its
  log, or, where the log is compacted, it copies the partition from a member
  (`storagenode/snapshots.py`). Its creation payload is made from the table's row as it is now;
  every difference from the one its peers were created with (throughput, consumers) is a
  metadata or checkpoint row that a later entry of the log wrote whole, and that entry is applied
  to it as well.
- A split of a replicated partition is an entry of its group: every member that applies it
  makes both children there, from the parent's rows. So a replica is not created while a
  partition held here overlaps it (its parent, whose split this node may yet apply: making the
  child empty beside it would cost a copy). A member behind when the parent's group went keeps
  the parent, which the catalog no longer serves: `retire` names such partitions, and the
  caller retires those still named after a grace long past any split's install (the parent's
  metadata goes, its items stay for the copy of each child to replace), after which the
  children are created here and copied from a member.
- A replica move (`core.machines.replica_move`) names its target before the target holds a
  vote in the group, and its source until the source's removal from the group has committed:
  every voter of a group is among its partition's `nodes`. So a replicated partition held
  here that the catalog serves on other nodes alone holds no vote here (its move switched it
  away, or a move to here ended before it was added): `remove` names it, and the caller drops
  it (`drop_replica`). A move's target is created like any replica the catalog places here.
  `moving` names the partitions held here whose replica move the catalog records, for the
  caller to drive on where it leads them (a driver that died leaves the move recorded).

`heals(node, tables, led, lost, up)` is what the leader of replicated partitions does for a
node lost (not heard from for the heal time): the replica there moves to a node that is up and
holds none of the partition, as a replica move (`core.machines.replica_move`) whose source is
the lost node. The group keeps a quorum throughout (one voter added, then the lost one
removed), so only the partition's leader, which hears its members, starts one.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core import catalog, gsi, indexes
from core.catalog import IndexDef, IndexStatus, PartitionDef, TableDef, TableStatus
from rpc import ops

# The states of a table, and of a global index, whose replicas a node creates on its own.
_SETTLED_TABLES = frozenset({TableStatus.ACTIVE, TableStatus.UPDATING})
_SETTLED_INDEXES = frozenset({IndexStatus.ACTIVE, IndexStatus.BACKFILLING})


@dataclass(frozen=True, slots=True)
class Replica:
    """The replica on `node` of partition `partition` of stored table `stored_id` (a table's
    id, or a global index's)."""

    node: str
    stored_id: str
    partition: PartitionDef


@dataclass(frozen=True, slots=True)
class Creation(Replica):
    """One replica to create, by `payload` (a `CreatePartitionPayload`'s body)."""

    payload: dict[str, Any]


def _table_schema(table: TableDef) -> dict[str, Any]:
    return {
        "id": table.id,
        "name": table.name,
        "key_schema": table.key_shape.to_key_schema(),
        # Each index's key and projection: the nodes check every write's index key types, and
        # maintain local indexes; a global index's partitions are the replicator's business.
        "indexes": [
            {k: v for k, v in index.to_json().items() if k not in ("partitions", "throughput")}
            for index in table.indexes
        ],
    }


def _consumers(table: TableDef) -> list[str] | None:
    """The consumers a new partition of `table` registers at seq 0: a table with global indexes
    holds its change logs for the GSI replicator from the start, and one with a stream for it."""
    consumers = [gsi.REPLICATOR_CONSUMER] if catalog.global_indexes(table) else []
    if table.stream is not None:
        consumers.append(table.stream.consumer)
    return consumers or None


def _index_schema(table: TableDef, index: IndexDef) -> dict[str, Any]:
    """What a node needs to hold a global index's partitions: its id, a name for metrics, and
    its entry key (the index key, then the table key attributes not already in it)."""
    assert index.table_id is not None
    shape = indexes.entry_shape(index, table.key_shape)
    return {
        "id": index.table_id,
        "name": catalog.index_storage_name(table.name, index.name),
        "key_schema": shape.to_document(),
    }


def table_creations(table: TableDef) -> list[Creation]:
    """Every replica of the table's own partitions (not its global indexes')."""
    schema, throughput = _table_schema(table), catalog.throughput_document(table)
    consumers = _consumers(table)
    return [
        Creation(
            node,
            table.id,
            partition,
            ops.CreatePartitionPayload(
                schema, partition.to_json(), throughput, consumers
            ).to_json(),
        )
        for partition in table.partitions
        for node in partition.nodes
    ]


def index_creations(table: TableDef, index: IndexDef) -> list[Creation]:
    """Every replica of global index `index`'s partitions."""
    assert index.table_id is not None
    schema = _index_schema(table, index)
    throughput = catalog.index_throughput_document(table, index)
    return [
        Creation(
            node,
            index.table_id,
            partition,
            ops.CreatePartitionPayload(schema, partition.to_json(), throughput).to_json(),
        )
        for partition in index.partitions
        for node in partition.nodes
    ]


def replica_creations(table: TableDef) -> list[Creation]:
    """Every replica of the table's partitions and of its global indexes' partitions."""
    creations = table_creations(table)
    for index in catalog.global_indexes(table):
        creations.extend(index_creations(table, index))
    return creations


def stands(partition: PartitionDef, unreached: int) -> bool:
    """Whether a creation or drop made on every node of `partition` but `unreached` of them
    stands: on its one node for a partition of one copy, on a majority of a replicated one's
    replicas (their nodes do the rest when they are back: `reconcile`)."""
    replicas = len(partition.replicas)
    if not replicas:
        return unreached == 0
    return replicas - unreached >= replicas // 2 + 1


def quorum_reached(replicas: Iterable[Replica], unreached: Iterable[Replica]) -> bool:
    """Whether every partition among `replicas` `stands`, `unreached` being those whose node
    could not be reached (a replica move's target, not yet among the replicas, counts for
    none)."""
    lacking = Counter(
        (replica.stored_id, replica.partition.id)
        for replica in unreached
        if not replica.partition.replicas or replica.node in replica.partition.replicas
    )
    return all(
        stands(replica.partition, lacking[(replica.stored_id, replica.partition.id)])
        for replica in replicas
    )


@dataclass(frozen=True, slots=True)
class Reconciliation:
    """What a node does to match the catalog: the stored ids to drop, the replicas to create."""

    drop: tuple[str, ...]
    create: tuple[Creation, ...]
    # Partitions held here that the catalog names no longer serve (a split's parent): the
    # caller retires the replicated ones still named after a grace.
    retire: tuple[tuple[str, str], ...] = ()
    # Replicated partitions held here that the catalog serves on other nodes alone: the
    # caller drops those whose group here has other members.
    remove: tuple[tuple[str, str], ...] = ()
    # (table name, stored id, partition id) of the partitions held here whose replica move the
    # catalog records.
    moving: tuple[tuple[str, str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class Heal:
    """A replica on a lost node to move to `target`."""

    name: str  # The table's name.
    stored_id: str
    partition_id: str
    source: str  # The lost node.
    target: str


def heals(
    node: str,
    tables: Mapping[str, TableDef],
    led: Iterable[tuple[str, str]],
    lost: Iterable[str],
    up: Iterable[str],
    most: int,
) -> list[Heal]:
    """Up to `most` moves of replicas on `lost` nodes of the replicated partitions this node
    `node` leads (`led`: (stored id, partition id) pairs) and the catalog `tables` serves with
    no move recorded, each to a node of `up` (those heard from lately, `node` among them) that
    holds none of the partition: the one holding the fewest replicas, counting the moves
    planned before it (ties by name). A partition with no such node stays as it is."""
    led, lost, up = set(led), set(lost), set(up) | {node}
    held = Counter(
        replica
        for table in tables.values()
        for _, partitions in _serving(table)
        for partition in partitions
        for replica in partition.nodes
    )
    planned: list[Heal] = []
    for table in sorted(tables.values(), key=lambda t: t.name):
        if table.status not in _SETTLED_TABLES:
            continue
        for stored, partitions in _serving(table):
            for partition in partitions:
                if len(planned) >= most:
                    return planned
                gone = [replica for replica in partition.replicas if replica in lost]
                if (stored, partition.id) not in led or partition.replica_move or not gone:
                    continue
                candidates = sorted(up - lost - set(partition.nodes))
                if not candidates:
                    continue
                target = min(candidates, key=lambda candidate: (held[candidate], candidate))
                held[target] += 1
                planned.append(Heal(table.name, stored, partition.id, gone[0], target))
    return planned


def stored_ids(table: TableDef) -> set[str]:
    """The ids a table's partitions are stored under: its own and its global indexes'."""
    ids = {table.id}
    ids.update(
        index.table_id for index in catalog.global_indexes(table) if index.table_id is not None
    )
    return ids


def reconcile(
    node: str,
    held: Iterable[tuple[str, str]],
    tables: Mapping[str, TableDef],
    ranges: Mapping[tuple[str, str], tuple[str, str | None]] | None = None,
) -> Reconciliation:
    """What node `node`, holding partitions `held` ((stored id, partition id) pairs, listed
    before `tables` was read; `ranges` their [start, end) as hex, None for the end of the hash
    space), does to match the catalog `tables` (every table's record, by name, read strongly).
    System tables are never touched."""
    held = set(held)
    ranges = ranges or {}
    named: set[str] = set()
    for table in tables.values():
        named |= stored_ids(table)
    drop = sorted(
        {
            stored
            for stored, _ in held
            if stored not in named and stored not in catalog.SYSTEM_TABLE_IDS
        }
    )
    create: list[Creation] = []
    for table in tables.values():
        if table.status not in _SETTLED_TABLES:
            continue
        wanted = table_creations(table)
        for index in catalog.global_indexes(table):
            if index.status in _SETTLED_INDEXES:
                wanted.extend(index_creations(table, index))
        create.extend(
            creation
            for creation in wanted
            if creation.node == node
            and creation.partition.replicas
            and creation.partition.state == catalog.PartitionState.SERVING
            and (creation.stored_id, creation.partition.id) not in held
            and not _overlapped(creation, ranges)
        )
    serving = {
        (stored, partition.id)
        for table in tables.values()
        if table.status in _SETTLED_TABLES
        for stored, partitions in _serving(table)
        for partition in partitions
    }
    settled = {
        stored
        for table in tables.values()
        if table.status in _SETTLED_TABLES
        for stored, _ in _serving(table)
    }
    retire = sorted(ref for ref in held if ref[0] in settled and ref not in serving)
    remove: list[tuple[str, str]] = []
    moving: list[tuple[str, str, str]] = []
    for table in tables.values():
        if table.status not in _SETTLED_TABLES:
            continue
        for stored, partitions in _serving(table):
            for partition in partitions:
                if (stored, partition.id) not in held or not partition.replicas:
                    continue
                if node not in partition.nodes:
                    remove.append((stored, partition.id))
                elif partition.replica_move is not None:
                    moving.append((table.name, stored, partition.id))
    return Reconciliation(
        tuple(drop), tuple(create), tuple(retire), tuple(sorted(remove)), tuple(sorted(moving))
    )


def _serving(table: TableDef) -> list[tuple[str, tuple[PartitionDef, ...]]]:
    """(stored id, serving partitions) of a table and of its global indexes that have them."""
    found = [(table.id, table.partitions)]
    for index in catalog.global_indexes(table):
        if index.table_id is not None and index.status in _SETTLED_INDEXES:
            found.append((index.table_id, index.partitions))
    return found


def _overlapped(
    creation: Creation, ranges: Mapping[tuple[str, str], tuple[str, str | None]]
) -> bool:
    """Whether a partition held here, of the creation's stored table, overlaps its range."""
    start, end = creation.partition.start, creation.partition.end
    for (stored, _), (held_start, held_end) in ranges.items():
        if stored != creation.stored_id:
            continue
        if (end is None or held_start < end) and (held_end is None or start < held_end):
            return True
    return False
