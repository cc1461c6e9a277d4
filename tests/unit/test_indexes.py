"""core.indexes: projections, index entries, their keys and the synchronous index-key checks.

Seed 000 (L-) and 001 (G-) rules: KEYS_ONLY / INCLUDE / ALL projections (L-14), sparse entries
(L-27, G-08), entry keys that keep equal index keys distinct (L-22, G-07), the type-mismatch
ValidationException on the base write for local and global indexes (L-26, G-18), entry size with
its 100 bytes of overhead (L-36) and the 100-attribute INCLUDE limit across all indexes.
"""

from __future__ import annotations

import dataclasses

import pytest

from core import limits
from core.catalog import IndexDef, IndexStatus
from core.errors import ItemCollectionSizeLimitExceeded, ValidationError
from core.indexes import (
    IndexDefinition,
    Projection,
    ProjectionRequest,
    check_collection_growth,
    check_index_keys,
    check_projected_attribute_count,
    check_projection,
    collection_delta,
    entry_changes,
    entry_shape,
    entry_size_bytes,
    index_entry,
    local_index_key,
    local_indexes,
    projected,
    size_estimate_range_gb,
)
from core.keys import KeyAttribute, KeyShape
from core.schema import check_definitions_used
from core.size import item_size_bytes

INVALID = "One or more parameter values were invalid: "

# Seed 000's Thread table and its LastPostIndex (L-01, L-02).
THREAD = KeyShape.table(("ForumName", "S"), ("Subject", "S"))


def lsi(projection: str = "KEYS_ONLY", non_key: tuple[str, ...] = ()) -> IndexDef:
    return IndexDef(
        name="LastPostIndex",
        key_shape=local_index_key(THREAD, ("LastPostDateTime", "S")),
        projection=projection,  # type: ignore[arg-type]
        status=IndexStatus.ACTIVE,
        non_key_attributes=non_key,
        local=True,
    )


# Seed 001's GameScores table and GameTitleIndex (G-01..G-03).
GAME_SCORES = KeyShape.table(("UserId", "S"), ("GameTitle", "S"))
GAME_TITLE_INDEX = IndexDef(
    name="GameTitleIndex",
    key_shape=KeyShape(
        (KeyAttribute("GameTitle", "S", "partition"), KeyAttribute("TopScore", "N", "sort"))
    ),
    projection="INCLUDE",
    status=IndexStatus.ACTIVE,
    non_key_attributes=("Wins",),
)

ITEM = {
    "ForumName": {"S": "EC2"},
    "Subject": {"S": "a thread"},
    "LastPostDateTime": {"S": "2015-09-01T00:00:00.000Z"},
    "Replies": {"N": "3"},
    "Tags": {"SS": ["x", "y"]},
}


class TestProjection:
    def test_the_three_types(self) -> None:
        assert check_projection("ALL", None) == Projection("ALL")
        assert check_projection("KEYS_ONLY", None) == Projection("KEYS_ONLY")
        assert check_projection("INCLUDE", ["Replies"]) == Projection("INCLUDE", ("Replies",))

    def test_missing_or_unknown_type(self) -> None:
        with pytest.raises(ValidationError, match=r"Unknown ProjectionType: null$"):
            check_projection(None, None)
        with pytest.raises(ValidationError, match=r"Unknown ProjectionType: SOME$"):
            check_projection("SOME", None)

    @pytest.mark.parametrize("kind", ["ALL", "KEYS_ONLY"])
    def test_non_key_attributes_only_with_include(self, kind: str) -> None:
        with pytest.raises(ValidationError) as raised:
            check_projection(kind, ["Replies"])
        assert raised.value.message == (
            INVALID + f"ProjectionType is {kind}, but NonKeyAttributes is specified"
        )

    def test_include_needs_non_key_attributes(self) -> None:
        for empty in (None, []):
            with pytest.raises(ValidationError) as raised:
                check_projection("INCLUDE", empty)
            assert raised.value.message == (
                INVALID + "ProjectionType is INCLUDE, but NonKeyAttributes is not specified"
            )

    def test_at_most_100_non_key_attributes_across_indexes(self) -> None:
        fifty = Projection("INCLUDE", tuple(f"a{i}" for i in range(50)))
        check_projected_attribute_count([fifty, fifty, Projection("ALL")])
        # The same attribute in two indexes counts twice.
        with pytest.raises(ValidationError) as raised:
            check_projected_attribute_count([fifty, fifty, Projection("INCLUDE", ("a0",))])
        assert raised.value.message == (
            INVALID + "Number of projected attributes in all indexes exceeds limit of "
            f"{limits.INDEX_PROJECTED_NON_KEY_ATTRIBUTES_MAX}, number of projected attributes: 101"
        )


class TestEntries:
    def test_keys_only_is_table_key_and_index_key(self) -> None:
        assert index_entry(ITEM, lsi(), THREAD) == {
            "ForumName": {"S": "EC2"},
            "Subject": {"S": "a thread"},
            "LastPostDateTime": {"S": "2015-09-01T00:00:00.000Z"},
        }

    def test_include_adds_the_present_non_key_attributes(self) -> None:
        entry = index_entry(ITEM, lsi("INCLUDE", ("Replies", "Views")), THREAD)
        assert entry is not None
        assert set(entry) == {"ForumName", "Subject", "LastPostDateTime", "Replies"}

    def test_all_is_the_whole_item(self) -> None:
        assert index_entry(ITEM, lsi("ALL"), THREAD) == ITEM

    def test_sparse_without_the_index_key_or_the_item(self) -> None:
        without = {k: v for k, v in ITEM.items() if k != "LastPostDateTime"}
        assert index_entry(without, lsi("ALL"), THREAD) is None
        assert index_entry(None, lsi(), THREAD) is None
        # G-08: an item without TopScore is not in GameTitleIndex.
        assert (
            index_entry(
                {"UserId": {"S": "400"}, "GameTitle": {"S": "Comet Quest"}},
                GAME_TITLE_INDEX,
                GAME_SCORES,
            )
            is None
        )

    def test_global_entry_projects_table_key_index_key_and_include(self) -> None:
        item = {
            "UserId": {"S": "101"},
            "GameTitle": {"S": "Comet Quest"},
            "TopScore": {"N": "5"},
            "Wins": {"N": "2"},
            "Losses": {"N": "9"},
        }
        entry = index_entry(item, GAME_TITLE_INDEX, GAME_SCORES)
        assert entry == {k: v for k, v in item.items() if k != "Losses"}

    def test_projected_names(self) -> None:
        index = lsi("INCLUDE", ("Replies",))
        assert projected(index, THREAD, ["Subject", "LastPostDateTime", "Replies"])
        assert not projected(index, THREAD, ["Replies", "Tags"])  # L-19: Tags needs a fetch.
        assert projected(lsi("ALL"), THREAD, ["Tags"])

    def test_entry_size_has_100_bytes_of_overhead(self) -> None:
        entry = index_entry(ITEM, lsi(), THREAD)
        assert entry is not None
        assert entry_size_bytes(entry) == item_size_bytes(entry) + 100


class TestEntryKeys:
    def test_local_entry_key_is_partition_index_sort_then_table_sort(self) -> None:
        assert entry_shape(lsi(), THREAD).names == ("ForumName", "LastPostDateTime", "Subject")

    def test_global_entry_key_appends_the_table_key_not_already_in_it(self) -> None:
        shape = entry_shape(GAME_TITLE_INDEX, GAME_SCORES)
        assert shape.names == ("GameTitle", "TopScore", "UserId")
        alone = IndexDef(
            "ByUser",
            KeyShape((KeyAttribute("UserId", "S", "partition"),)),
            "KEYS_ONLY",
            IndexStatus.ACTIVE,
        )
        assert entry_shape(alone, GAME_SCORES).names == ("UserId", "GameTitle")

    def test_equal_index_keys_stay_distinct_and_in_index_order(self) -> None:
        shape = entry_shape(lsi(), THREAD)

        def key(subject: str, posted: str) -> bytes:
            return shape.storage_key(
                {
                    "ForumName": {"S": "EC2"},
                    "Subject": {"S": subject},
                    "LastPostDateTime": {"S": posted},
                }
            )

        same_a, same_b = key("a", "2015"), key("b", "2015")
        assert same_a != same_b
        assert sorted([key("a", "2016"), same_b, same_a]) == [same_a, same_b, key("a", "2016")]
        # Every entry of one index sort key value shares the prefix of (partition, index sort).
        prefix = shape.storage_key_of([{"S": "EC2"}, {"S": "2015"}])
        assert same_a.startswith(prefix) and same_b.startswith(prefix)


class TestIndexKeyChecks:
    def test_type_mismatch_on_a_local_index_key(self) -> None:
        item = {**ITEM, "LastPostDateTime": {"N": "20150901"}}
        with pytest.raises(ValidationError) as raised:
            check_index_keys(item, [lsi()])
        assert raised.value.message == (
            INVALID + "Type mismatch for Index Key LastPostDateTime Expected: S Actual: N "
            "IndexName: LastPostIndex"
        )

    def test_type_mismatch_on_a_global_index_key(self) -> None:
        item = {"UserId": {"S": "1"}, "GameTitle": {"S": "g"}, "TopScore": {"S": "high"}}
        with pytest.raises(
            ValidationError,
            match=r"Index Key TopScore Expected: N Actual: S IndexName: GameTitleIndex$",
        ):
            check_index_keys(item, [GAME_TITLE_INDEX])

    def test_null_is_a_mismatch(self) -> None:
        with pytest.raises(ValidationError, match="Expected: S Actual: NULL"):
            check_index_keys({**ITEM, "LastPostDateTime": {"NULL": True}}, [lsi()])

    @pytest.mark.parametrize(("value", "kind"), [({"S": ""}, "string"), ({"B": ""}, "binary")])
    def test_empty_index_key(self, value: dict[str, str], kind: str) -> None:
        index = (
            lsi()
            if kind == "string"
            else IndexDef(
                "BinIndex", local_index_key(THREAD, ("Blob", "B")), "ALL", IndexStatus.ACTIVE
            )
        )
        name = index.key_shape.attributes[1].name
        with pytest.raises(ValidationError) as raised:
            check_index_keys({**ITEM, name: value}, [index])
        assert raised.value.message == (
            "One or more parameter values are not valid. A value specified for a secondary "
            "index key is not supported. The AttributeValue for a key attribute cannot contain "
            f"an empty {kind} value. IndexName: {index.name}, IndexKey: {name}"
        )

    def test_an_index_sort_key_is_bounded_like_a_table_sort_key(self) -> None:
        check_index_keys({**ITEM, "LastPostDateTime": {"S": "x" * 1024}}, [lsi()])
        with pytest.raises(ValidationError) as raised:
            check_index_keys({**ITEM, "LastPostDateTime": {"S": "x" * 1025}}, [lsi()])
        assert raised.value.message == (
            INVALID + "Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
        )

    def test_absent_or_well_typed_keys_pass(self) -> None:
        check_index_keys(ITEM, [lsi(), GAME_TITLE_INDEX])
        check_index_keys({"ForumName": {"S": "EC2"}, "Subject": {"S": "s"}}, [lsi()])


def test_size_estimate_range_gb() -> None:
    assert size_estimate_range_gb(0) == [0.0, 1.0]
    assert size_estimate_range_gb(limits.GIB + 1) == [1.0, 2.0]


# CreateTable's local indexes ---------------------------------------------------------------------

TYPES = {"ForumName": "S", "Subject": "S", "LastPostDateTime": "S", "Views": "N"}


def definition(
    name: str = "LastPostIndex",
    key: tuple[tuple[str, str], ...] = (("ForumName", "HASH"), ("LastPostDateTime", "RANGE")),
) -> IndexDefinition:
    return IndexDefinition(name, key, ProjectionRequest("KEYS_ONLY"))


class TestLocalIndexes:
    def test_builds_the_index_with_its_own_key(self) -> None:
        (index,) = local_indexes(THREAD, [definition()], TYPES)
        assert index == dataclasses.replace(lsi(), status=IndexStatus.CREATING)

    @pytest.mark.parametrize(
        ("definitions", "message"),
        [
            (
                [definition(f"i{n}") for n in range(6)],
                INVALID + "Number of LocalSecondaryIndexes exceeds per-table limit of 5",
            ),
            ([definition(), definition()], INVALID + "Duplicate index name: LastPostIndex"),
            (
                [definition(key=(("ForumName", "HASH"), ("Nope", "RANGE")))],
                INVALID + "Some index key attributes are not defined in AttributeDefinitions. "
                "Keys: [ForumName, Nope], AttributeDefinitions: [ForumName, Subject, "
                "LastPostDateTime, Views]",
            ),
            (
                [definition(key=(("Subject", "HASH"), ("Views", "RANGE")))],
                INVALID + "Index KeySchema does not have the same leading hash key as table "
                "KeySchema for index: LastPostIndex. index hash key: Subject, table hash key: "
                "ForumName",
            ),
            (
                [definition(key=(("ForumName", "HASH"),))],
                INVALID + "Index KeySchema does not have a range key for index: LastPostIndex",
            ),
            (
                [definition(key=(("ForumName", "RANGE"), ("Views", "HASH")))],
                "Invalid KeySchema: The first KeySchemaElement is not a HASH key type",
            ),
        ],
    )
    def test_refusals(self, definitions: list[IndexDefinition], message: str) -> None:
        with pytest.raises(ValidationError) as raised:
            local_indexes(THREAD, definitions, TYPES)
        assert raised.value.message == message

    def test_the_table_needs_a_sort_key(self) -> None:
        with pytest.raises(ValidationError, match="Table KeySchema does not have a range key"):
            local_indexes(KeyShape.table(("ForumName", "S")), [definition()], TYPES)

    def test_unused_definitions_are_refused_when_indexes_exist(self) -> None:
        declared = [{"AttributeName": n, "AttributeType": t} for n, t in TYPES.items()]
        check_definitions_used(declared[:3], ["ForumName", "Subject", "LastPostDateTime"])
        with pytest.raises(ValidationError) as raised:
            check_definitions_used(declared, ["ForumName", "Subject", "LastPostDateTime"])
        assert raised.value.message == (
            INVALID + "Some AttributeDefinitions are not used. AttributeDefinitions: [ForumName, "
            "Subject, LastPostDateTime, Views], keys used: [ForumName, Subject, LastPostDateTime]"
        )


# Entry changes and item collections ----------------------------------------------------------


class TestEntryChanges:
    def index(self) -> IndexDef:
        return lsi("INCLUDE", ("Replies",))

    def test_the_guides_cases(self) -> None:
        """L-32 (and X-04's fifth case): units per write, per index."""
        index = self.index()
        without = {k: v for k, v in ITEM.items() if k != "LastPostDateTime"}
        moved = {**ITEM, "LastPostDateTime": {"S": "2016"}}
        replies = {**ITEM, "Replies": {"N": "4"}}
        tags = {**ITEM, "Tags": {"SS": ["z"]}}
        cases = [
            (None, ITEM, 1.0),  # A new item in the index.
            (without, ITEM, 1.0),  # An update that defines the index key.
            (ITEM, moved, 2.0),  # A changed index key: delete and put.
            (ITEM, without, 1.0),  # The index key removed.
            (ITEM, None, 1.0),  # The item deleted.
            (None, without, 0.0),  # Never in the index.
            (ITEM, tags, 0.0),  # A non-projected attribute changed.
            (ITEM, replies, 1.0),  # A projected attribute changed.
        ]
        for old, new, units in cases:
            (change,) = entry_changes(old, new, [index], THREAD)
            assert change.units == units, (old, new)

    def test_collection_delta_counts_items_and_entries_with_overhead(self) -> None:
        index = self.index()
        changes = entry_changes(None, ITEM, [index], THREAD)
        entry = index_entry(ITEM, index, THREAD)
        assert entry is not None
        item_bytes = item_size_bytes(ITEM)
        assert collection_delta(0, item_bytes, changes) == item_bytes + item_size_bytes(entry) + 100
        gone = entry_changes(ITEM, None, [index], THREAD)
        assert collection_delta(item_bytes, 0, gone) == -(item_bytes + item_size_bytes(entry) + 100)

    def test_growth_past_the_cap_is_refused_and_shrinking_is_not(self) -> None:
        check_collection_growth(90, 10, 100)
        check_collection_growth(150, -10, 100)  # Over the cap, but shrinking.
        check_collection_growth(150, 0, 100)
        with pytest.raises(ItemCollectionSizeLimitExceeded) as raised:
            check_collection_growth(90, 11, 100)
        assert raised.value.message == "Collection size exceeded."
