"""Secondary indexes, local and global alike: projections, index entries and their keys. Pure.

An index holds, for every item that carries all of its key attributes, an *entry*: the item as
projected into the index (Developer Guide, "Projections"): KEYS_ONLY is the table's key and the
index's key, INCLUDE adds the NonKeyAttributes the item has, ALL is the whole item. An item that
lacks an index key attribute has no entry there (a sparse index). Index keys are not unique, so an
entry is stored under a key that appends the table's key (`entry_shape`): for a local index
(partition key, index sort key, table sort key), for a global one (index partition key, index sort
key if any, then the table key attributes not already among them). Entries with the same index key
stay distinct, and a Query returns all of them.

The rules here are shared by the node, which maintains local indexes in the write's own batch, and
the GSI replicator, which projects changes into global indexes; and by the router and the node,
which refuse a write whose index key attribute has the wrong type or is empty
(`check_index_keys`), synchronously for both kinds (a GSI key type mismatch is also refused on
the base write, seed 001 G-18). CreateTable's projection rules and the limit of 100 projected
non-key attributes across a table's indexes are here too. Messages are DynamoDB's. Nothing here
does IO.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from core import limits
from core.capacity import index_write_units
from core.catalog import IndexDef, IndexStatus, ProjectionType
from core.errors import INVALID_PARAMETERS, ItemCollectionSizeLimitExceeded, ValidationError
from core.keys import KeyAttribute, KeyShape
from core.size import check_key_value, item_size_bytes, value_size_bytes
from core.values import AttributeValue, Item, type_of

PROJECTION_TYPES: tuple[ProjectionType, ...] = ("ALL", "KEYS_ONLY", "INCLUDE")
_PROJECTION_TYPE_NAMED: dict[str | None, ProjectionType] = {kind: kind for kind in PROJECTION_TYPES}

_NOT_VALID = "One or more parameter values are not valid. "


@dataclass(frozen=True, slots=True)
class Projection:
    """A checked `Projection`: its type and, for INCLUDE only, its NonKeyAttributes."""

    type: ProjectionType
    non_key_attributes: tuple[str, ...] = ()


def check_projection(
    projection_type: str | None, non_key_attributes: Sequence[str] | None
) -> Projection:
    """CreateTable's (or a GSI creation's) `Projection`, or DynamoDB's error for a bad one.

    `projection_type` and `non_key_attributes` have passed their JSON types. NonKeyAttributes go
    with INCLUDE only, and INCLUDE needs them.
    """
    kind = _PROJECTION_TYPE_NAMED.get(projection_type)
    if kind is None:
        raise ValidationError(
            INVALID_PARAMETERS
            + f"Unknown ProjectionType: {'null' if projection_type is None else projection_type}"
        )
    if kind == "INCLUDE":
        if not non_key_attributes:
            raise ValidationError(
                INVALID_PARAMETERS
                + "ProjectionType is INCLUDE, but NonKeyAttributes is not specified"
            )
        return Projection("INCLUDE", tuple(non_key_attributes))
    if non_key_attributes is not None:
        raise ValidationError(
            INVALID_PARAMETERS + f"ProjectionType is {kind}, but NonKeyAttributes is specified"
        )
    return Projection(kind)


@dataclass(frozen=True, slots=True)
class ProjectionRequest:
    """A `Projection` as a request gave it, its members past their constraints: checked
    (`checked`) once its index's key schema has passed, as DynamoDB reports an index's key schema
    before its projection."""

    type: str | None
    non_key_attributes: tuple[str, ...] | None = None

    def checked(self) -> Projection:
        return check_projection(self.type, self.non_key_attributes)


def check_projected_attribute_count(projections: Iterable[Projection]) -> None:
    """Refuse more than 100 projected non-key attributes summed over all of a table's indexes,
    local and global ("If you project the same attribute into two different indexes, this counts
    as two distinct attributes")."""
    count = sum(len(projection.non_key_attributes) for projection in projections)
    if count > limits.INDEX_PROJECTED_NON_KEY_ATTRIBUTES_MAX:
        raise ValidationError(
            INVALID_PARAMETERS + "Number of projected attributes in all indexes exceeds limit of "
            f"{limits.INDEX_PROJECTED_NON_KEY_ATTRIBUTES_MAX}, "
            f"number of projected attributes: {count}"
        )


# Entries --------------------------------------------------------------------------------------


def entry_shape(index: IndexDef, table_shape: KeyShape) -> KeyShape:
    """The key an entry of `index` is stored under: the index key, then the table key attributes
    not already in it, so that entries with equal index keys stay distinct.

    `index.key_shape` is the index's own key (partition key, sort key if any). For a local index
    this is (partition key, index sort key, table sort key).
    """
    return _entry_shape(index.key_shape, table_shape)


@functools.lru_cache(maxsize=1024)
def _entry_shape(own_shape: KeyShape, table_shape: KeyShape) -> KeyShape:
    # Cached: the replicator projects every change and every backfilled item, and a shape is
    # built and checked on each (15% of its CPU in a backfill before this cache).
    own = own_shape.attributes
    names = {attribute.name for attribute in own}
    rest = tuple(attribute for attribute in table_shape.attributes if attribute.name not in names)
    return KeyShape(own + rest, own_shape.hashed)


def local_index_key(table_shape: KeyShape, sort: tuple[str, str]) -> KeyShape:
    """The own key of a local index: the table's partition key and the index sort key."""
    partition = table_shape.partition_key
    return KeyShape((partition, KeyAttribute(sort[0], sort[1], "sort")))


def index_entry(item: Item | None, index: IndexDef, table_shape: KeyShape) -> Item | None:
    """The item as projected into `index`; None without an item or when the item lacks one of
    the index's key attributes (it has no entry: a sparse index).

    The item's index key values are assumed checked (`check_index_keys`).
    """
    if item is None:
        return None
    for attribute in index.key_shape.attributes:
        if attribute.name not in item:
            return None
    if index.projection == "ALL":
        return item
    entry: Item = {}
    for name in (*table_shape.names, *index.key_shape.names, *index.non_key_attributes):
        value = item.get(name)
        if value is not None:
            entry[name] = value
    return entry


def entry_size_bytes(entry: Item) -> int:
    """The storage an index entry takes, as DynamoDB counts it for IndexSizeBytes and for item
    collections: its attributes' size plus 100 bytes of overhead (seed 000 L-36)."""
    return item_size_bytes(entry) + limits.INDEX_ENTRY_OVERHEAD_BYTES


def projected(index: IndexDef, table_shape: KeyShape, names: Iterable[str]) -> bool:
    """Whether every top-level attribute in `names` is in the index's entries (no fetch from
    the table is needed to return them)."""
    if index.projection == "ALL":
        return True
    held = {*table_shape.names, *index.key_shape.names, *index.non_key_attributes}
    return all(name in held for name in names)


def check_index_keys(item: Item, indexes: Iterable[IndexDef]) -> None:
    """Refuse an item (a PutItem's, or an UpdateItem's new image) whose value for some index key
    attribute has another type than the index declares, is an empty string or binary, or is
    larger than a key of its role may be.

    An absent index key attribute is no error: the item is just not in that index. DynamoDB
    refuses the write with a ValidationException and changes nothing, for local and global
    indexes alike.
    """
    for index in indexes:
        present = 0
        for attribute in index.key_shape.attributes:
            value = item.get(attribute.name)
            if value is not None:
                check_index_key_value(value, attribute, index.name)
                present += 1
        shape = index.key_shape
        # One attribute per role was bounded alone just now; only a multi-attribute key of an
        # item that is in the index (it has every key attribute) is bounded as a whole too.
        multi_attribute = len(shape.attributes) > 1 + (shape.sort_key is not None)
        if multi_attribute and present == len(shape.attributes):
            check_combined_key_sizes(item, shape)


def check_combined_key_sizes(item: Item, shape: KeyShape) -> None:
    """Refuse an item whose multi-attribute index key is too large as a whole: DynamoDB bounds
    the partition key attributes of a global index together by a partition key's 2048 bytes and
    its sort key attributes together by a sort key's 1024 (the Developer Guide's multi-attribute
    keys keep the key size limits; its sort key message already speaks of the "aggregated size of
    all range keys"). `item` carries every attribute of `shape`, each already checked alone."""
    partition_bytes = sum(value_size_bytes(item[a.name]) for a in shape.partition_attributes)
    if partition_bytes > limits.PARTITION_KEY_BYTES_MAX:
        raise ValidationError(
            INVALID_PARAMETERS + "Size of hashkey has exceeded the maximum size limit of"
            f"{limits.PARTITION_KEY_BYTES_MAX} bytes"
        )
    sort_bytes = sum(value_size_bytes(item[a.name]) for a in shape.attributes[shape.hashed :])
    if sort_bytes > limits.SORT_KEY_BYTES_MAX:
        raise ValidationError(
            INVALID_PARAMETERS + "Aggregated size of all range keys has exceeded the size limit of "
            f"{limits.SORT_KEY_BYTES_MAX} bytes"
        )


def check_index_key_value(value: AttributeValue, attribute: KeyAttribute, index_name: str) -> None:
    """Refuse one value of an index key attribute, as `check_index_keys` does."""
    actual = type_of(value)
    if actual != attribute.type:
        raise ValidationError(
            INVALID_PARAMETERS
            + f"Type mismatch for Index Key {attribute.name} Expected: {attribute.type} "
            f"Actual: {actual} IndexName: {index_name}"
        )
    if actual in ("S", "B") and value[actual] == "":
        kind = "string" if actual == "S" else "binary"
        raise ValidationError(
            _NOT_VALID + "A value specified for a secondary index key is not supported. The "
            f"AttributeValue for a key attribute cannot contain an empty {kind} value. "
            f"IndexName: {index_name}, IndexKey: {attribute.name}"
        )
    # An index key is bounded like a table key: 2048 bytes for a partition key, 1024 for a sort
    # key (its entry is stored under it).
    check_key_value(attribute.name, value, attribute.role)


# Item collections -----------------------------------------------------------------------------


def size_estimate_range_gb(collection_bytes: int) -> list[float]:
    """ItemCollectionMetrics' SizeEstimateRangeGB: the whole gigabytes below and above the size
    (DynamoDB answers `[0.0, 1.0]` for a collection under 1 GB)."""
    low = collection_bytes // limits.GIB
    return [float(low), float(low + 1)]


# Local secondary indexes at CreateTable ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class IndexDefinition:
    """One element of CreateTable's LocalSecondaryIndexes (or GlobalSecondaryIndexes), past its
    constraints: its name, its KeySchema as (AttributeName, KeyType) pairs and its Projection
    (checked after the key schema)."""

    name: str
    key_schema: tuple[tuple[str, str], ...]
    projection: ProjectionRequest


def local_indexes(
    table_shape: KeyShape,
    definitions: Sequence[IndexDefinition],
    attribute_types: Mapping[str, str],
) -> tuple[IndexDef, ...]:
    """The local secondary indexes of a CreateTable request, or DynamoDB's error for a bad one.

    At most 5; the table must have a sort key; each index has a unique name, the table's
    partition key and one sort key declared in AttributeDefinitions (whose enum makes it S, N or
    B). Whether every AttributeDefinition is used, and the limit on projected attributes across
    local and global indexes, are the caller's checks (`core.schema.check_definitions_used`,
    `check_projected_attribute_count`).
    """
    if len(definitions) > limits.LSI_PER_TABLE_MAX:
        raise ValidationError(
            INVALID_PARAMETERS + "Number of LocalSecondaryIndexes exceeds per-table limit of "
            f"{limits.LSI_PER_TABLE_MAX}"
        )
    if table_shape.sort_key is None:
        raise ValidationError(
            INVALID_PARAMETERS + "Table KeySchema does not have a range key, which is required "
            "when specifying a LocalSecondaryIndex"
        )
    built: list[IndexDef] = []
    for definition in definitions:
        name = definition.name
        if any(index.name == name for index in built):
            raise ValidationError(INVALID_PARAMETERS + f"Duplicate index name: {name}")
        names = [attribute for attribute, _ in definition.key_schema]
        undefined = [attribute for attribute in names if attribute not in attribute_types]
        if undefined:
            raise ValidationError(
                INVALID_PARAMETERS
                + "Some index key attributes are not defined in AttributeDefinitions. "
                f"Keys: [{', '.join(names)}], "
                f"AttributeDefinitions: [{', '.join(attribute_types)}]"
            )
        key_types = [key_type for _, key_type in definition.key_schema]
        if key_types[0] != "HASH":
            raise ValidationError(
                "Invalid KeySchema: The first KeySchemaElement is not a HASH key type"
            )
        partition = table_shape.partition_key.name
        if names[0] != partition:
            raise ValidationError(
                INVALID_PARAMETERS + "Index KeySchema does not have the same leading hash key as "
                f"table KeySchema for index: {name}. index hash key: {names[0]}, table hash "
                f"key: {partition}"
            )
        if len(names) != 2 or key_types[1] != "RANGE":
            raise ValidationError(
                INVALID_PARAMETERS + f"Index KeySchema does not have a range key for index: {name}"
            )
        if names[1] == partition:
            raise ValidationError(
                "Both the Hash Key and the Range Key element in the KeySchema have the same name"
            )
        projection = definition.projection.checked()
        built.append(
            IndexDef(
                name=name,
                key_shape=local_index_key(table_shape, (names[1], attribute_types[names[1]])),
                projection=projection.type,
                # ACTIVE with its table (`core.catalog.activated`): it has nothing to backfill.
                status=IndexStatus.CREATING,
                non_key_attributes=projection.non_key_attributes,
                local=True,
            )
        )
    return tuple(built)


# Maintaining entries on a write ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class EntryChange:
    """What one write does to one index: its entry before and after (None: none), and the write
    units that costs (`core.capacity.index_write_units`)."""

    index: IndexDef
    old: Item | None
    new: Item | None
    units: float

    @property
    def bytes_delta(self) -> int:
        """How much the index grows (or shrinks), entry overhead included."""
        before = 0 if self.old is None else entry_size_bytes(self.old)
        after = 0 if self.new is None else entry_size_bytes(self.new)
        return after - before


def entry_changes(
    old_item: Item | None,
    new_item: Item | None,
    indexes: Iterable[IndexDef],
    table_shape: KeyShape,
) -> tuple[EntryChange, ...]:
    """Each index's entry before and after a write from `old_item` to `new_item`, with its units.

    An index the write does not touch (no entry before or after, or the same entry) costs nothing
    and is still listed, so callers see every index once.
    """
    changes = []
    for index in indexes:
        old = index_entry(old_item, index, table_shape)
        new = index_entry(new_item, index, table_shape)
        units = index_write_units(old, new, index.key_shape.names)
        changes.append(EntryChange(index, old, new, units))
    return tuple(changes)


def collection_delta(old_bytes: int, new_bytes: int, changes: Iterable[EntryChange]) -> int:
    """How much a write grows its item collection: the item's change in size plus every local
    index entry's, overhead included (seed 000 L-12, L-36)."""
    return new_bytes - old_bytes + sum(change.bytes_delta for change in changes)


def check_collection_growth(
    current_bytes: int, delta_bytes: int, collection_bytes_max: int
) -> None:
    """Refuse a write that would grow an item collection past its cap.

    A write that shrinks the collection, or leaves it as it is, always goes ahead, so a client can
    bring an oversized collection back under the cap (L-42, L-43).
    """
    if delta_bytes > 0 and current_bytes + delta_bytes > collection_bytes_max:
        raise ItemCollectionSizeLimitExceeded("Collection size exceeded.")
