"""Multi-attribute global index keys (DynamoDB, November 2025), the pure parts: reading a GSI
KeySchema of 1-4 HASH and 0-4 RANGE attributes (`core.gsi.global_index_key`), the storage key
that hashes every partition key attribute together and orders sort key attributes one after the
other (`core.keys.KeyShape`), the key condition a Query on such an index may have
(`core.expressions.index_key_condition`), and the size bounds on the key as a whole.
"""

from __future__ import annotations

import functools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import expressions, gsi, indexes
from core.catalog import IndexDef, IndexStatus
from core.errors import ValidationError
from core.keycodec import HASH_BYTES, encode_key_value, encode_storage_key, hash64
from core.keys import KeyAttribute, KeyShape
from core.size import value_size_bytes
from core.values import AttributeValue, compare, normalize_number

INVALID = "One or more parameter values were invalid: "
TYPES = {
    "t": "S",
    "r": "S",
    "round": "S",
    "bracket": "S",
    "seq": "N",
    "raw": "B",
    "a": "S",
    "b": "S",
    "c": "S",
    "d": "S",
    "e": "S",
}


def schema(hashes: tuple[str, ...], ranges: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    return [(name, "HASH") for name in hashes] + [(name, "RANGE") for name in ranges]


def s(text: str) -> AttributeValue:
    return {"S": text}


def n(number: int | str) -> AttributeValue:
    return {"N": normalize_number(str(number))}


TOURNAMENT = gsi.global_index_key(
    "ByTournament", schema(("t", "r"), ("round", "bracket", "seq")), TYPES
)


# Reading the KeySchema -------------------------------------------------------------------------


def test_hash_attributes_come_first_and_are_hashed_together() -> None:
    assert TOURNAMENT.hashed == 2
    assert [(a.name, a.type, a.role) for a in TOURNAMENT.attributes] == [
        ("t", "S", "partition"),
        ("r", "S", "partition"),
        ("round", "S", "sort"),
        ("bracket", "S", "sort"),
        ("seq", "N", "sort"),
    ]
    assert TOURNAMENT.sort_key == KeyAttribute("round", "S", "sort")
    widest = gsi.global_index_key(
        "W", schema(("a", "b", "c", "d"), ("e", "round", "seq", "raw")), TYPES
    )
    assert (widest.hashed, len(widest.attributes)) == (4, 8)


def key_error(key_schema: list[tuple[str, str]]) -> str:
    with pytest.raises(ValidationError) as raised:
        gsi.global_index_key("Idx", key_schema, TYPES)
    return raised.value.message or ""


@pytest.mark.parametrize(
    ("key_schema", "message"),
    [
        # DynamoDB's messages of single-attribute keys, kept.
        (
            schema((), ("a",)) + schema(("b",)),
            "Invalid KeySchema: The first KeySchemaElement is not a HASH key type",
        ),
        (
            schema(("a",), ("a",)),
            "Both the Hash Key and the Range Key element in the KeySchema have the same name",
        ),
        # dynalab's wording for what only a multi-attribute key can get wrong (the guide gives
        # the rule, not the text).
        (
            schema(("a",), ("b",)) + schema(("c",)),
            INVALID + "Invalid KeySchema for index: Idx: every HASH key element must come "
            "before the RANGE key elements",
        ),
        (
            schema(("a", "b", "c", "d", "e")),
            INVALID + "Number of HASH key elements in KeySchema for index: Idx exceeds the limit "
            "of 4, number of HASH key elements: 5",
        ),
        (
            schema(("a",), ("b", "c", "d", "e", "round")),
            INVALID + "Number of RANGE key elements in KeySchema for index: Idx exceeds the "
            "limit of 4, number of RANGE key elements: 5",
        ),
        (
            schema(("a", "b"), ("a",)),
            INVALID + "Duplicate attribute in KeySchema for index: Idx, attribute: a",
        ),
        (
            schema(("a", "a")),
            "Both the Hash Key and the Range Key element in the KeySchema have the same name",
        ),
    ],
)
def test_key_schema_refusals(key_schema: list[tuple[str, str]], message: str) -> None:
    assert key_error(key_schema) == message


def test_the_catalog_keeps_how_many_attributes_are_hashed() -> None:
    index = IndexDef("ByTournament", TOURNAMENT, "KEYS_ONLY", IndexStatus.ACTIVE)
    assert IndexDef.from_json(index.to_json()).key_shape == TOURNAMENT
    table = KeyShape.table(("id", "S"))
    entry = indexes.entry_shape(index, table)
    assert entry.hashed == 2 and entry.names == (*TOURNAMENT.names, "id")
    assert KeyShape.from_document(entry.to_document()) == entry
    # A shape hashing one attribute keeps the list form partition metadata always had.
    assert table.to_document() == [["id", "S", "partition"]]


# Storage keys -----------------------------------------------------------------------------------


def test_every_partition_key_attribute_is_hashed_and_one_attribute_keys_are_unchanged() -> None:
    key = TOURNAMENT.storage_key_of([s("W"), s("NA"), s("SEMI")])
    encoded = encode_key_value(s("W")) + encode_key_value(s("NA"))
    assert key == hash64(encoded).to_bytes(HASH_BYTES, "big") + encoded + encode_key_value(
        s("SEMI")
    )
    assert TOURNAMENT.placement_hash([s("W"), s("NA")]) == hash64(encoded)
    with pytest.raises(AssertionError):
        TOURNAMENT.storage_key_of([s("W")])  # Half a partition key places nothing.
    table = KeyShape.table(("pk", "S"), ("sk", "N"))
    assert table.storage_key({"pk": s("x"), "sk": n(3)}) == encode_storage_key(s("x"), n(3))


# The values of each scalar key type, drawn directly (filtering one mixed strategy by type threw
# away most draws, which Hypothesis's health check refused on a loaded machine).
_SCALARS_OF = {
    "S": st.text(
        st.sampled_from(["\x00", "a", "b", "\u00e9", "\U0010ffff"]), min_size=1, max_size=4
    ).map(s),
    "N": st.one_of(
        st.integers(-1000, 1000).map(n),
        st.decimals(min_value=-10, max_value=10, places=3, allow_nan=False).map(
            lambda d: n(str(d))
        ),
    ),
}
_TYPED = {"S": "round", "N": "seq"}


@st.composite
def sort_tuples(
    draw: st.DrawFn,
) -> tuple[tuple[str, ...], list[AttributeValue], list[AttributeValue]]:
    """Two values of 1 to 4 sort key attributes of the same types (S or N each), often equal in
    their leading attributes, so that every position decides the order somewhere."""
    types = draw(st.lists(st.sampled_from(["S", "N"]), min_size=1, max_size=4))
    first: list[AttributeValue] = []
    second: list[AttributeValue] = []
    for kind in types:
        strategy = _SCALARS_OF[kind]
        value = draw(strategy)
        first.append(value)
        second.append(value if draw(st.booleans()) else draw(strategy))
    return tuple(types), first, second


def _order(first: list[AttributeValue], second: list[AttributeValue]) -> int:
    for one, other in zip(first, second, strict=True):
        order = compare(one, other)
        assert order is not None
        if order:
            return order
    return 0


@functools.cache
def _shape(types: tuple[str, ...]) -> KeyShape:
    attributes = [KeyAttribute("t", "S", "partition"), KeyAttribute("r", "N", "partition")]
    attributes += [KeyAttribute(f"s{i}", kind, "sort") for i, kind in enumerate(types)]
    return KeyShape(tuple(attributes), 2)


@settings(max_examples=300, deadline=None)
@given(sort_tuples(), st.text(min_size=1, max_size=3).map(s), st.integers(0, 9).map(n))
def test_byte_order_is_attribute_by_attribute_order(
    tuples: tuple[tuple[str, ...], list[AttributeValue], list[AttributeValue]],
    tournament: AttributeValue,
    region: AttributeValue,
) -> None:
    types, first, second = tuples
    shape = _shape(types)
    one = shape.storage_key_of([tournament, region, *first])
    other = shape.storage_key_of([tournament, region, *second])
    expected = _order(first, second)
    assert (one > other) - (one < other) == (expected > 0) - (expected < 0)
    # Each run of equal leading sort key values is a key prefix: a Query fixing them reads it.
    for fixed in range(len(first) + 1):
        assert one.startswith(shape.storage_key_of([tournament, region, *first[:fixed]]))


# Key conditions ---------------------------------------------------------------------------------

VALUES: dict[str, Any] = {
    ":t": s("W"),
    ":r": s("NA"),
    ":a": s("SEMI"),
    ":b": s("UPPER"),
    ":c": n(3),
    ":d": n(9),
    ":x": s("x"),
}


def condition(text: str, key_shape: KeyShape = TOURNAMENT) -> expressions.KeyCondition:
    used = {name: value for name, value in VALUES.items() if name in text}
    return expressions.index_key_condition(text, None, used, key_shape)


def condition_error(text: str, key_shape: KeyShape = TOURNAMENT) -> str:
    with pytest.raises(ValidationError) as raised:
        condition(text, key_shape)
    return raised.value.message or ""


PARTITION = "t = :t AND r = :r"


@pytest.mark.parametrize(
    ("text", "fixed", "range_key", "op", "values"),
    [
        (PARTITION, [s("NA")], None, None, None),
        (f"{PARTITION} AND round = :a", [s("NA")], "round", "=", [s("SEMI")]),
        (f"{PARTITION} AND round >= :a", [s("NA")], "round", ">=", [s("SEMI")]),
        (f"{PARTITION} AND begins_with(round, :a)", [s("NA")], "round", "begins_with", [s("SEMI")]),
        (
            f"{PARTITION} AND round = :a AND bracket < :b",
            [s("NA"), s("SEMI")],
            "bracket",
            "<",
            [s("UPPER")],
        ),
        (
            f"{PARTITION} AND round = :a AND bracket = :b AND seq BETWEEN :c AND :d",
            [s("NA"), s("SEMI"), s("UPPER")],
            "seq",
            "BETWEEN",
            [n(3), n(9)],
        ),
        (
            f"seq > :c AND bracket = :b AND round = :a AND {PARTITION}",
            [s("NA"), s("SEMI"), s("UPPER")],
            "seq",
            ">",
            [n(3)],
        ),
        (
            f"{PARTITION} AND :c <= seq AND round = :a AND bracket = :b",
            [s("NA"), s("SEMI"), s("UPPER")],
            "seq",
            ">=",
            [n(3)],
        ),
    ],
)
def test_allowed_conditions_fix_a_prefix_and_condition_the_next_attribute(
    text: str, fixed: list[Any], range_key: str | None, op: str | None, values: Any
) -> None:
    checked = condition(text)
    assert checked.hash_value == s("W")
    assert list(checked.fixed) == fixed
    assert checked.range_key == range_key
    if op is None:
        assert checked.range is None
    else:
        assert checked.range is not None
        assert (checked.range.op, checked.range.values) == (op, values)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("t = :t", "Query condition missed key schema element: r"),
        ("r = :r AND round = :a", "Query condition missed key schema element: t"),
        ("t = :t AND r > :r", "Query key condition not supported"),
        (
            f"{PARTITION} AND bracket = :b",
            "RANGE key attributes round must have equality conditions specified in the query "
            "because a condition is present on key attribute bracket",
        ),
        (
            f"{PARTITION} AND round = :a AND seq = :c",
            "RANGE key attributes bracket must have equality conditions specified in the query "
            "because a condition is present on key attribute seq",
        ),
        (
            f"{PARTITION} AND round < :a AND bracket = :b AND seq = :c",
            "RANGE key attributes round must have equality conditions specified in the query "
            "because a condition is present on key attribute bracket",
        ),
        (
            f"{PARTITION} AND begins_with(round, :a) AND seq = :c",
            "RANGE key attributes round must have equality conditions specified in the query "
            "because a condition is present on key attribute seq",
        ),
        (f"{PARTITION} AND notakey = :x", "Query condition missed key schema element: round"),
        (
            f"{PARTITION} AND round = :a AND bracket = :b AND seq = :c AND notakey = :x",
            "Query key condition not supported",
        ),
        (
            f"{PARTITION} AND seq = :a",
            INVALID + "Condition parameter type does not match schema type",
        ),
        ("t = :t AND r = :c", INVALID + "Condition parameter type does not match schema type"),
        (
            "t = :t AND r = :r AND round = :a AND round = :b",
            "KeyConditionExpressions must only contain one condition per key",
        ),
    ],
)
def test_every_other_condition_is_refused(text: str, message: str) -> None:
    assert condition_error(text) == message


def test_a_partition_key_of_several_attributes_with_no_sort_key() -> None:
    shape = gsi.global_index_key("Pair", schema(("t", "r")), TYPES)
    checked = condition(PARTITION, shape)
    assert (checked.hash_value, checked.fixed, checked.range) == (s("W"), (s("NA"),), None)
    assert condition_error(f"{PARTITION} AND round = :a", shape) == (
        "Query key condition not supported"
    )


# Sizes ------------------------------------------------------------------------------------------


def test_the_key_attributes_of_each_role_are_bounded_together() -> None:
    index = IndexDef("ByTournament", TOURNAMENT, "ALL", IndexStatus.ACTIVE)
    seq = n(1)
    room = 1024 - 500 - value_size_bytes(seq)
    at_limits = {
        "t": s("t" * 1024),
        "r": s("r" * 1024),
        "round": s("a" * 500),
        "bracket": s("b" * room),
        "seq": seq,
    }
    indexes.check_index_keys(at_limits, (index,))
    for attribute, message in (
        ("r", INVALID + "Size of hashkey has exceeded the maximum size limit of2048 bytes"),
        (
            "bracket",
            INVALID + "Aggregated size of all range keys has exceeded the size limit of 1024 bytes",
        ),
    ):
        over = {**at_limits, attribute: s(at_limits[attribute]["S"] + "x")}
        with pytest.raises(ValidationError) as raised:
            indexes.check_index_keys(over, (index,))
        assert raised.value.message == message
    # An item lacking a key attribute is not in the index: its key is not bounded as a whole.
    partial = {k: v for k, v in at_limits.items() if k != "seq"}
    indexes.check_index_keys({**partial, "t": s("t" * 2000), "r": s("r" * 2000)}, (index,))
