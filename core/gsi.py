"""Global secondary indexes: projecting base-table changes into index writes, routing them to the
index's partitions, and the order in which a table's change logs may be followed. Pure.

The GSI replicator (`gsi_replicator/`) follows every base partition's change log and keeps each
global index eventually consistent (seed 001 G-16). Everything it decides is here, with no IO:

- `project_change` turns one change (old image, new image) into at most one delete and one put
  per index (DESIGN.md, "GSIs"): an item without the index key attributes has no entry (a sparse
  index, G-08); a changed index key removes the old entry and stores the new one (G-31 case 2); a
  change to a projected attribute rewrites the entry (case 5); a change to anything else, or to an
  item in the index neither before nor after, writes nothing (case 4). Entries are projected by
  `core.indexes.index_entry`, shared with local indexes.
- `route` groups the writes of a run of changes by the index partition holding each entry key,
  as `index_apply` payload changes (`rpc.ops.IndexApplyPayload`), keeping seq order per target.
- `check_global_indexes` checks CreateTable's GlobalSecondaryIndexes against DynamoDB's rules;
  `GlobalIndexSpec.placed` builds each index's catalog record, stored in partitions of its own.
- `compare` is the convergence check: an index's entries against the projection of its table.
- `followable` says which of a table's partitions may be followed now: a split's children only once
  their parent's log has been drained to its END, so that the changes to one key, which moved
  from the parent to a child, reach the index in the order they were made.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core import catalog, limits
from core.catalog import IndexDef, PartitionDef, TableDef, Throughput
from core.errors import INVALID_PARAMETERS, ValidationError
from core.indexes import (
    Projection,
    ProjectionRequest,
    check_index_key_value,
    check_index_keys,
    entry_shape,
    index_entry,
)
from core.keys import KeyAttribute, KeyRole, KeyShape
from core.placement import PartitionMap
from core.token_bucket import BillingMode
from core.values import Item

# The change-feed consumer under which the GSI replicator follows a partition for the indexes
# created with its table; CreateTable registers it with every partition of such a table. An index
# added online is followed under a consumer of its own (`consumer_of`), registered when its
# backfill begins, so that its copy and its catch-up never wait for, or hold back, the others.
REPLICATOR_CONSUMER = "gsi_replicator"


def consumer_of(index: IndexDef) -> str:
    """The change-feed consumer under which the replicator follows the table for `index`."""
    if not index.online:
        return REPLICATOR_CONSUMER
    return f"{REPLICATOR_CONSUMER}/{index.table_id}"


def followed_groups(table: TableDef) -> dict[str, tuple[IndexDef, ...]]:
    """The indexes each change-feed consumer of the table keeps, by consumer: the indexes created
    with the table under `REPLICATOR_CONSUMER`, each online index under its own. An index being
    deleted is kept by none."""
    groups: dict[str, list[IndexDef]] = {}
    for index in table.indexes:
        if index.is_global and index.status != catalog.IndexStatus.DELETING:
            groups.setdefault(consumer_of(index), []).append(index)
    return {consumer: tuple(indexes) for consumer, indexes in groups.items()}


def key_violation(item: Item, index: IndexDef) -> str | None:
    """Why `item` cannot be in `index` (its key attribute has another type than the index
    declares, is empty or too large: seed 004 O-22), or None. An item written before an online
    index existed, or while it backfilled, may violate it; it is left out of the index (O-23)."""
    try:
        check_index_keys(item, (index,))
    except ValidationError as error:
        return error.message
    return None


@dataclass(frozen=True, slots=True)
class Violation:
    """One index key attribute of one item that keeps the item out of a global index (seed 004
    O-22), as the violation detector reports it: the item's table key, the attribute, its role
    in the index key, the kind ("Type Violation" or "Size Violation": too large, or an empty
    string or binary) and DynamoDB's message for a write that would set it so."""

    key: Item
    attribute: str
    role: KeyRole
    value: Any
    kind: str
    description: str


TYPE_VIOLATION = "Type Violation"
SIZE_VIOLATION = "Size Violation"


def violations(item: Item, index: IndexDef, table_shape: KeyShape) -> list[Violation]:
    """Every index key attribute of `item` that violates `index`'s key schema (an absent one is
    no violation: the item is just not in the index)."""
    found: list[Violation] = []
    key = table_shape.key_of(item)
    for attribute in index.key_shape.attributes:
        value = item.get(attribute.name)
        if value is None:
            continue
        try:
            check_index_key_value(value, attribute, index.name)
        except ValidationError as error:
            mismatch = next(iter(value)) != attribute.type
            kind = TYPE_VIOLATION if mismatch else SIZE_VIOLATION
            found.append(
                Violation(key, attribute.name, attribute.role, value, kind, error.message or "")
            )
    return found


@dataclass(frozen=True, slots=True)
class IndexWrite:
    """What one base change does to one global index: the entry key to delete and the entry to
    put (at most one of each; never neither)."""

    index: str
    seq: int
    delete: Item | None
    put: Item | None

    @property
    def writes(self) -> int:
        """How many index writes this is: a changed key costs a delete and a put (G-31)."""
        return (self.delete is not None) + (self.put is not None)


def project_change(
    seq: int,
    old: Item | None,
    new: Item | None,
    indexes: Iterable[IndexDef],
    table_shape: KeyShape,
) -> list[IndexWrite]:
    """The index writes of one change of a base item (`old`/`new`: None where there is none),
    one per global index it affects. An image whose index key violates the index's key schema
    has no entry in it (`key_violation`)."""
    writes: list[IndexWrite] = []
    for index in indexes:
        if not index.is_global:
            continue
        before = _entry(old, index, table_shape)
        after = _entry(new, index, table_shape)
        if before is None:
            if after is not None:
                writes.append(IndexWrite(index.name, seq, None, after))
            continue
        shape = entry_shape(index, table_shape)
        if after is None:
            writes.append(IndexWrite(index.name, seq, shape.key_of(before), None))
        elif shape.key_of(before) != shape.key_of(after):
            writes.append(IndexWrite(index.name, seq, shape.key_of(before), after))
        elif before != after:
            writes.append(IndexWrite(index.name, seq, None, after))
    return writes


def _entry(item: Item | None, index: IndexDef, table_shape: KeyShape) -> Item | None:
    entry = index_entry(item, index, table_shape)
    if entry is None or key_violation(entry, index) is not None:
        return None
    return entry


def backfill_writes(
    items: Iterable[Item], index: IndexDef, table_shape: KeyShape
) -> list[IndexWrite]:
    """The index puts that copy `items` (a page of a base partition's scan) into `index`."""
    writes: list[IndexWrite] = []
    for item in items:
        writes.extend(project_change(0, None, item, (index,), table_shape))
    return writes


# An index partition as the replicator addresses it: (index id, partition id, epoch, node).
IndexTarget = tuple[str, str, int, str]


def _target(
    index_id: str, partitions: PartitionMap[PartitionDef], shape: KeyShape, key: Item
) -> IndexTarget:
    partition = partitions.lookup(shape.storage_key(key))
    return (index_id, partition.id, partition.epoch, partition.node)


def route(writes: Sequence[IndexWrite], table: TableDef) -> dict[IndexTarget, list[dict[str, Any]]]:
    """The `index_apply` changes for each index partition, from writes in seq order.

    A delete and a put of one change whose keys fall in different partitions travel as two
    changes of the same seq, one to each: each partition skips the seqs it has applied.
    """
    indexes = {index.name: index for index in table.indexes if index.is_global}
    shapes = {name: entry_shape(index, table.key_shape) for name, index in indexes.items()}
    maps = {name: PartitionMap(index.partitions) for name, index in indexes.items()}
    routed: dict[IndexTarget, list[dict[str, Any]]] = {}
    for write in writes:
        index = indexes.get(write.index)
        if index is None:
            continue  # The index is gone since the change was projected.
        assert index.table_id is not None
        shape, partitions = shapes[write.index], maps[write.index]
        parts: dict[IndexTarget, dict[str, Any]] = {}
        if write.delete is not None:
            target = _target(index.table_id, partitions, shape, write.delete)
            parts.setdefault(target, {"seq": write.seq})["delete"] = write.delete
        if write.put is not None:
            target = _target(index.table_id, partitions, shape, shape.key_of(write.put))
            parts.setdefault(target, {"seq": write.seq})["put"] = write.put
        for target, change in parts.items():
            routed.setdefault(target, []).append(change)
    return routed


def followable(table: TableDef, drained: Collection[str]) -> list[PartitionDef]:
    """The table's partitions whose change logs may be followed now, given the partitions whose
    logs have been drained to their END.

    Retired partitions still in the catalog are followed to their END; a partition (serving or
    retired) waits while its parent is retired, still in the catalog and not drained.
    """
    retired = {partition.id for partition in table.retired}
    ready: list[PartitionDef] = []
    for partition in (*table.retired, *table.partitions):
        if partition.id in drained:
            continue
        parent = partition.parent
        if parent is not None and parent in retired and parent not in drained:
            continue
        ready.append(partition)
    return ready


# CreateTable ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GlobalIndexDefinition:
    """One element of CreateTable's GlobalSecondaryIndexes past its constraints: its name, its
    KeySchema as (AttributeName, KeyType) pairs, its Projection (checked after the key schema)
    and its ProvisionedThroughput as {ReadCapacityUnits, WriteCapacityUnits} (None if absent),
    OnDemandThroughput and WarmThroughput as the members given (None if absent or empty)."""

    name: str
    key_schema: tuple[tuple[str, str], ...]
    projection: ProjectionRequest
    throughput: Mapping[str, int] | None
    on_demand: Mapping[str, int] | None = None
    warm: Mapping[str, int] | None = None


@dataclass(frozen=True, slots=True)
class GlobalIndexSpec:
    """A global index of a CreateTable request that passed every rule, before placement."""

    name: str
    key_shape: KeyShape
    projection: Projection
    throughput: Throughput
    on_demand: catalog.OnDemandThroughput = field(default_factory=catalog.OnDemandThroughput)
    warm: catalog.WarmThroughput | None = None

    def placed(
        self,
        index_id: str,
        billing_mode: BillingMode,
        owner: Callable[[str], str],
        replicas_of: Callable[[str, int], tuple[str, ...]] | None = None,
    ) -> IndexDef:
        """The index's catalog record, CREATING, stored under `index_id` in partitions of its
        own, each on the node `owner` picks for its id or replicated on `replicas_of`'s
        (`core.catalog.global_index`)."""
        return catalog.global_index(
            name=self.name,
            key_shape=self.key_shape,
            projection=self.projection.type,
            non_key_attributes=self.projection.non_key_attributes,
            index_id=index_id,
            billing_mode=billing_mode,
            throughput=self.throughput,
            owner=owner,
            on_demand=self.on_demand,
            warm=self.warm,
            replicas_of=replicas_of,
        )


def check_global_indexes(
    definitions: Sequence[GlobalIndexDefinition],
    attribute_types: Mapping[str, str],
    billing_mode: BillingMode,
    taken_names: Collection[str],
    region: str = "",
) -> tuple[GlobalIndexSpec, ...]:
    """The global secondary indexes of a CreateTable request, or DynamoDB's error for a bad one.

    At most 20 (seed 004 O-01); each with a name unique among the table's indexes (`taken_names`
    holds the local ones), a partition key and an optional sort key declared in
    AttributeDefinitions (whose enum makes them S, N or B: O-03), neither needing to be a table
    key attribute (G-04, O-02); ProvisionedThroughput required in PROVISIONED mode and refused on
    demand (O-04, O-05), then its OnDemandThroughput (`catalog.index_on_demand_created`) and
    WarmThroughput (`catalog.index_warm_created`; `region` names the Region in its quota's
    refusal). Whether every AttributeDefinition is used and the limit on projected
    attributes across all indexes are the caller's checks, once the indexes passed these.
    """
    if not definitions:
        raise ValidationError(INVALID_PARAMETERS + "List of GlobalSecondaryIndexes is empty")
    if len(definitions) > limits.GSI_PER_TABLE_MAX:
        raise ValidationError(
            INVALID_PARAMETERS + "GlobalSecondaryIndex count exceeds the per-table limit of "
            f"{limits.GSI_PER_TABLE_MAX}"
        )
    names = set(taken_names)
    checked: list[GlobalIndexSpec] = []
    for definition in definitions:
        name = definition.name
        if name in names:
            raise ValidationError(INVALID_PARAMETERS + f"Duplicate index name: {name}")
        names.add(name)
        keys = [attribute for attribute, _ in definition.key_schema]
        if any(attribute not in attribute_types for attribute in keys):
            raise ValidationError(
                INVALID_PARAMETERS
                + "Some index key attributes are not defined in AttributeDefinitions. "
                f"Keys: [{', '.join(keys)}], AttributeDefinitions: [{', '.join(attribute_types)}]"
            )
        key_shape = global_index_key(name, definition.key_schema, attribute_types)
        projection = definition.projection.checked()
        units = definition.throughput
        if billing_mode == BillingMode.PAY_PER_REQUEST:
            if units is not None:
                raise ValidationError(
                    INVALID_PARAMETERS + "ProvisionedThroughput should not be specified for "
                    f"index: {name} when BillingMode is PAY_PER_REQUEST"
                )
            throughput = Throughput()
        else:
            if units is None:
                raise ValidationError(
                    INVALID_PARAMETERS + f"ProvisionedThroughput is not specified for index: {name}"
                )
            for member in ("ReadCapacityUnits", "WriteCapacityUnits"):
                if units[member] > limits.PROVISIONED_UNITS_VALUE_MAX:
                    raise ValidationError(
                        f"Given value {units[member]} for {member} is out of bounds"
                    )
            throughput = Throughput(units["ReadCapacityUnits"], units["WriteCapacityUnits"])
        on_demand = catalog.index_on_demand_created(billing_mode, name, definition.on_demand)
        warm = catalog.index_warm_created(name, definition.warm, region)
        checked.append(GlobalIndexSpec(name, key_shape, projection, throughput, on_demand, warm))
    return tuple(checked)


def global_index_key(
    name: str, key_schema: Sequence[tuple[str, str]], attribute_types: Mapping[str, str]
) -> KeyShape:
    """A global index's own key from its KeySchema, whose attributes are all declared, or
    DynamoDB's error for a bad one.

    Since November 2025 a global index's key may have up to four partition key (HASH) and up to
    four sort key (RANGE) attributes, the HASH elements first, each attribute once (Developer
    Guide, "Multi-attribute keys"). A table's key and a local index's keep one of each. The
    first element not HASH and a two-element schema naming one attribute twice keep DynamoDB's
    messages of single-attribute keys; the refusals that only multi-attribute keys can meet are
    worded here in DynamoDB's style, since the guide gives no text for them.
    """
    names = [attribute for attribute, _ in key_schema]
    key_types = [key_type for _, key_type in key_schema]
    if key_types[0] != "HASH":
        raise ValidationError(
            "Invalid KeySchema: The first KeySchemaElement is not a HASH key type"
        )
    if len(names) == 2 and names[0] == names[1]:
        raise ValidationError(
            "Both the Hash Key and the Range Key element in the KeySchema have the same name"
        )
    hashed = key_types.index("RANGE") if "RANGE" in key_types else len(key_types)
    if "HASH" in key_types[hashed:]:
        raise ValidationError(
            INVALID_PARAMETERS + f"Invalid KeySchema for index: {name}: every HASH key element "
            "must come before the RANGE key elements"
        )
    for key_type, count, most in (
        ("HASH", hashed, limits.GSI_PARTITION_KEY_ATTRIBUTES_MAX),
        ("RANGE", len(key_types) - hashed, limits.GSI_SORT_KEY_ATTRIBUTES_MAX),
    ):
        if count > most:
            raise ValidationError(
                INVALID_PARAMETERS + f"Number of {key_type} key elements in KeySchema for index: "
                f"{name} exceeds the limit of {most}, number of {key_type} key elements: {count}"
            )
    repeated = [key for position, key in enumerate(names) if key in names[:position]]
    if repeated:
        raise ValidationError(
            INVALID_PARAMETERS + f"Duplicate attribute in KeySchema for index: {name}, "
            f"attribute: {repeated[0]}"
        )
    attributes = tuple(
        KeyAttribute(attribute, attribute_types[attribute], _role(position < hashed))
        for position, attribute in enumerate(names)
    )
    return KeyShape(attributes, hashed)


def _role(partition: bool) -> KeyRole:
    return "partition" if partition else "sort"


# Convergence ------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Convergence:
    """An index's entries compared with the projection of its table.

    `missing`: expected entries the index lacks (or holds in another version); `extra`: entries
    the index holds that are not expected. An extra entry that is not even `allowed` (no version
    of any item ever projected it) is a `violation`: eventual consistency never explains it.
    """

    missing: tuple[Item, ...]
    extra: tuple[Item, ...]
    violations: tuple[Item, ...]

    @property
    def converged(self) -> bool:
        return not (self.missing or self.extra)


def _identity(entry: Item) -> str:
    """A canonical text of an entry, for set membership (attribute order does not matter)."""
    return json.dumps(entry, sort_keys=True)


def expected_entries(items: Iterable[Item], index: IndexDef, table_shape: KeyShape) -> list[Item]:
    """The entries `index` holds once it has caught up with a table holding `items` (an item
    violating the index's key schema has none)."""
    entries = (_entry(item, index, table_shape) for item in items)
    return [entry for entry in entries if entry is not None]


def compare(
    actual: Iterable[Item], expected: Iterable[Item], allowed: Iterable[Item] = ()
) -> Convergence:
    """Compare an index's entries (`actual`) with the `expected` ones; entries in `allowed` (the
    projections of earlier versions of the items, say) may linger while the index catches up."""
    actual_by_id = {_identity(entry): entry for entry in actual}
    expected_by_id = {_identity(entry): entry for entry in expected}
    permitted = expected_by_id.keys() | {_identity(entry) for entry in allowed}
    extra = [entry for key, entry in actual_by_id.items() if key not in expected_by_id]
    return Convergence(
        missing=tuple(e for key, e in expected_by_id.items() if key not in actual_by_id),
        extra=tuple(extra),
        violations=tuple(e for key, e in actual_by_id.items() if key not in permitted),
    )
