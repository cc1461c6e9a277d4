"""core.keys: KeyShape's key rules (extract, check_key), its storage keys and their byte order.

`extract` is PutItem's check of an item's key attributes, `check_key` the check of a `Key` request
parameter; both must word their errors as DynamoDB does and raise `KeyAttributeError` only where
BatchWriteItem reports a key/schema mismatch and a transaction an action's own refusal. The
storage key must sort byte-wise in DynamoDB's key order (S by UTF-8 bytes, B by unsigned bytes, N
numerically) whatever the lengths and contents of the values, and a partition key alone must give
the prefix of its whole item collection.
"""

from __future__ import annotations

import base64
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import limits
from core.errors import ValidationError
from core.keycodec import HASH_BYTES, encode_key_value, encode_storage_key, hash64
from core.keys import KeyAttribute, KeyAttributeError, KeyShape
from core.values import AttributeValue, Item, normalize_number

INVALID = "One or more parameter values were invalid: "
NOT_VALID = "One or more parameter values are not valid. "
KEY_MISMATCH = "The provided key element does not match the schema"
HASHKEY_TOO_LARGE = INVALID + "Size of hashkey has exceeded the maximum size limit of2048 bytes"
RANGEKEY_TOO_LARGE = (
    INVALID + "Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
)

TABLE = KeyShape.table(("pk", "S"), ("sk", "N"))
HASH_ONLY = KeyShape.table(("id", "S"))
BINARY = KeyShape.table(("pk", "B"), ("sk", "B"))
STRING = KeyShape.table(("pk", "S"), ("sk", "S"))
# A global secondary index entry: index partition key, index sort key, then the table's key.
GSI = KeyShape(
    (
        KeyAttribute("gpk", "S", "partition"),
        KeyAttribute("gsk", "N", "sort"),
        KeyAttribute("pk", "S", "partition"),
        KeyAttribute("sk", "B", "sort"),
    )
)


def s(text: str) -> AttributeValue:
    return {"S": text}


def n(number: int | str) -> AttributeValue:
    return {"N": normalize_number(str(number))}


def b(data: bytes) -> AttributeValue:
    return {"B": base64.b64encode(data).decode("ascii")}


def raw(value: AttributeValue) -> Any:
    """A key value as DynamoDB orders it: UTF-8 bytes, unsigned bytes or a number."""
    if "S" in value:
        return value["S"].encode("utf-8")
    if "B" in value:
        return base64.b64decode(value["B"])
    return Decimal(value["N"])


def extract_error(shape: KeyShape, item: Item) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        shape.extract(item)
    return raised.value


def check_key_error(shape: KeyShape, key: Item) -> ValidationError:
    with pytest.raises(ValidationError) as raised:
        shape.check_key(key)
    return raised.value


# Construction and the catalog form ---------------------------------------------------------------


def test_table_shape_attributes() -> None:
    assert TABLE.attributes == (
        KeyAttribute("pk", "S", "partition"),
        KeyAttribute("sk", "N", "sort"),
    )
    assert TABLE.names == ("pk", "sk")
    assert TABLE.partition_key == KeyAttribute("pk", "S", "partition")
    assert TABLE.sort_key == KeyAttribute("sk", "N", "sort")
    assert HASH_ONLY.names == ("id",)
    assert HASH_ONLY.sort_key is None


@pytest.mark.parametrize(
    "key_schema",
    [
        {"hash": ["pk", "S"], "range": ["sk", "N"]},
        {"hash": ["id", "B"], "range": None},
        {"hash": ["h", "N"], "range": ["r", "B"]},
    ],
)
def test_key_schema_round_trip(key_schema: dict[str, Any]) -> None:
    shape = KeyShape.from_key_schema(key_schema)
    assert shape.to_key_schema() == key_schema
    assert KeyShape.from_key_schema(shape.to_key_schema()) == shape


def test_from_key_schema_without_range_entry() -> None:
    assert KeyShape.from_key_schema({"hash": ["id", "S"]}) == HASH_ONLY


def test_from_key_schema_matches_table() -> None:
    assert KeyShape.from_key_schema({"hash": ["pk", "S"], "range": ["sk", "N"]}) == TABLE


def test_index_shape_has_no_catalog_key_schema() -> None:
    with pytest.raises(AssertionError):
        GSI.to_key_schema()


def test_shape_needs_an_attribute() -> None:
    with pytest.raises(AssertionError, match="at least a partition key"):
        KeyShape(())


def test_shape_refuses_repeated_names() -> None:
    with pytest.raises(AssertionError, match="repeat a name"):
        KeyShape((KeyAttribute("pk", "S", "partition"), KeyAttribute("pk", "N", "sort")))


def test_table_refuses_sort_key_named_like_partition_key() -> None:
    with pytest.raises(AssertionError, match="repeat a name"):
        KeyShape.table(("pk", "S"), ("pk", "S"))


def test_shape_starts_with_a_partition_key() -> None:
    with pytest.raises(AssertionError, match="hashed attribute is a partition key"):
        KeyShape((KeyAttribute("sk", "N", "sort"),))


@pytest.mark.parametrize("type_tag", ["BOOL", "SS", "M", "s"])
def test_key_attribute_is_scalar(type_tag: str) -> None:
    with pytest.raises(AssertionError):
        KeyAttribute("pk", type_tag, "partition")


# extract: an item's key, as PutItem checks it ----------------------------------------------------


def test_extract_returns_key_in_shape_order() -> None:
    item = {"color": s("red"), "sk": n(5), "pk": s("a")}
    key = TABLE.extract(item)
    assert key == {"pk": s("a"), "sk": n(5)}
    assert list(key) == ["pk", "sk"]


def test_extract_hash_only() -> None:
    assert HASH_ONLY.extract({"id": s("x"), "sk": n(1)}) == {"id": s("x")}


def test_extract_missing_sort_key() -> None:
    error = extract_error(TABLE, {"pk": s("a")})
    assert isinstance(error, KeyAttributeError)
    assert error.message == INVALID + "Missing the key sk in the item"


def test_extract_missing_partition_key_is_reported_first() -> None:
    error = extract_error(TABLE, {"color": s("red")})
    assert isinstance(error, KeyAttributeError)
    assert error.message == INVALID + "Missing the key pk in the item"


def test_extract_type_mismatch() -> None:
    error = extract_error(TABLE, {"pk": s("a"), "sk": s("1")})
    assert isinstance(error, KeyAttributeError)
    assert error.message == INVALID + "Type mismatch for key sk expected: N actual: S"


def test_extract_type_mismatch_with_non_scalar() -> None:
    error = extract_error(TABLE, {"pk": {"SS": ["a"]}, "sk": n(1)})
    assert isinstance(error, KeyAttributeError)
    assert error.message == INVALID + "Type mismatch for key pk expected: S actual: SS"


def test_extract_empty_string_key() -> None:
    error = extract_error(TABLE, {"pk": s(""), "sk": n(1)})
    assert type(error) is ValidationError
    assert error.message == (
        NOT_VALID + "The AttributeValue for a key attribute cannot contain an empty string value. "
        "Key: pk"
    )


def test_extract_empty_binary_key() -> None:
    error = extract_error(BINARY, {"pk": b(b"\x01"), "sk": b(b"")})
    assert type(error) is ValidationError
    assert error.message == (
        NOT_VALID + "The AttributeValue for a key attribute cannot contain an empty binary value. "
        "Key: sk"
    )


@pytest.mark.parametrize(
    "value",
    [
        s("x" * limits.PARTITION_KEY_BYTES_MAX),
        s("\u00e9" * (limits.PARTITION_KEY_BYTES_MAX // 2)),  # 1024 two-byte characters
        b(b"\xff" * limits.PARTITION_KEY_BYTES_MAX),
    ],
)
def test_extract_partition_key_at_limit(value: AttributeValue) -> None:
    shape = BINARY if "B" in value else STRING
    item = {"pk": value, "sk": s("a") if "S" in value else b(b"a")}
    assert shape.extract(item)["pk"] == value


@pytest.mark.parametrize(
    "value",
    [
        s("x" * (limits.PARTITION_KEY_BYTES_MAX + 1)),
        s("\u00e9" * (limits.PARTITION_KEY_BYTES_MAX // 2) + "x"),  # 1025 characters, 2049 bytes
        s("\u20ac" * 683),  # 683 characters, 2049 bytes
        b(b"\x00" * (limits.PARTITION_KEY_BYTES_MAX + 1)),
    ],
)
def test_extract_partition_key_over_limit(value: AttributeValue) -> None:
    shape = BINARY if "B" in value else STRING
    item = {"pk": value, "sk": s("a") if "S" in value else b(b"a")}
    error = extract_error(shape, item)
    assert type(error) is ValidationError
    assert error.message == HASHKEY_TOO_LARGE


@pytest.mark.parametrize(
    "value",
    [
        s("x" * limits.SORT_KEY_BYTES_MAX),
        s("\U0001f600" * (limits.SORT_KEY_BYTES_MAX // 4)),  # 256 four-byte characters
        b(b"\x00" * limits.SORT_KEY_BYTES_MAX),
    ],
)
def test_extract_sort_key_at_limit(value: AttributeValue) -> None:
    shape = BINARY if "B" in value else STRING
    item = {"pk": s("a") if "S" in value else b(b"a"), "sk": value}
    assert shape.extract(item)["sk"] == value


@pytest.mark.parametrize(
    "value",
    [
        s("x" * (limits.SORT_KEY_BYTES_MAX + 1)),
        s("\u00e9" * 513),  # 513 characters, 1026 bytes
        s("\u00e9" * (limits.SORT_KEY_BYTES_MAX // 2 + 1)),
        b(b"\xff" * (limits.SORT_KEY_BYTES_MAX + 1)),
    ],
)
def test_extract_sort_key_over_limit(value: AttributeValue) -> None:
    shape = BINARY if "B" in value else STRING
    item = {"pk": s("a") if "S" in value else b(b"a"), "sk": value}
    error = extract_error(shape, item)
    assert type(error) is ValidationError
    assert error.message == RANGEKEY_TOO_LARGE


def test_extract_sort_key_counts_bytes_not_characters() -> None:
    # 1000 characters but 2000 bytes: within a partition key's limit, past a sort key's.
    value = s("\u00e9" * 1000)
    assert STRING.extract({"pk": value, "sk": s("a")})["pk"] == value
    assert extract_error(STRING, {"pk": s("a"), "sk": value}).message == RANGEKEY_TOO_LARGE


def test_extract_index_shape_applies_each_role_limit() -> None:
    long_partition = s("p" * limits.PARTITION_KEY_BYTES_MAX)
    item = {"gpk": long_partition, "gsk": n(1), "pk": long_partition, "sk": b(b"\x00")}
    assert GSI.extract(item) == item
    too_long = {**item, "pk": s("p" * (limits.PARTITION_KEY_BYTES_MAX + 1))}
    assert extract_error(GSI, too_long).message == HASHKEY_TOO_LARGE
    too_long = {**item, "sk": b(b"\x00" * (limits.SORT_KEY_BYTES_MAX + 1))}
    assert extract_error(GSI, too_long).message == RANGEKEY_TOO_LARGE


# check_key: a Key request parameter -------------------------------------------------------------


def test_check_key_returns_key_in_shape_order() -> None:
    key = TABLE.check_key({"sk": n(2), "pk": s("a")})
    assert key == {"pk": s("a"), "sk": n(2)}
    assert list(key) == ["pk", "sk"]


def test_check_key_hash_only() -> None:
    assert HASH_ONLY.check_key({"id": s("x")}) == {"id": s("x")}


@pytest.mark.parametrize(
    ("shape", "key"),
    [
        (TABLE, {"pk": s("a"), "sk": n(1), "color": s("red")}),  # an extra attribute
        (HASH_ONLY, {"id": s("x"), "sk": n(1)}),
        (TABLE, {"pk": s("a")}),  # a missing attribute
        (TABLE, {"sk": n(1)}),
        (TABLE, {}),
        (TABLE, {"pk": s("a"), "other": n(1)}),  # the right count, a wrong name
        (TABLE, {"pk": s("a"), "sk": s("1")}),  # a wrong type
        (TABLE, {"pk": n(1), "sk": n(1)}),
        (BINARY, {"pk": s("a"), "sk": b(b"a")}),
        (TABLE, {"pk": {"SS": ["a"]}, "sk": n(1)}),
    ],
)
def test_check_key_mismatch(shape: KeyShape, key: Item) -> None:
    error = check_key_error(shape, key)
    # A ValidationError on the wire; its own class lets a transaction's action refuse itself.
    assert type(error) is KeyAttributeError
    assert error.message == KEY_MISMATCH


def test_check_key_mismatch_comes_before_empty_value() -> None:
    assert check_key_error(TABLE, {"pk": s(""), "sk": s("1")}).message == KEY_MISMATCH


def test_check_key_empty_values_partition_key_first() -> None:
    error = check_key_error(STRING, {"sk": s(""), "pk": s("")})
    assert error.message == (
        NOT_VALID + "The AttributeValue for a key attribute cannot contain an empty string value. "
        "Key: pk"
    )


def test_check_key_sizes() -> None:
    at_limit = {"pk": s("p" * limits.PARTITION_KEY_BYTES_MAX), "sk": s("s" * 1024)}
    assert STRING.check_key(at_limit) == at_limit
    over = {**at_limit, "sk": s("s" * (limits.SORT_KEY_BYTES_MAX + 1))}
    assert check_key_error(STRING, over).message == RANGEKEY_TOO_LARGE
    over = {**at_limit, "pk": s("p" * (limits.PARTITION_KEY_BYTES_MAX + 1))}
    assert check_key_error(STRING, over).message == HASHKEY_TOO_LARGE


def test_key_of_drops_other_attributes() -> None:
    assert TABLE.key_of({"color": s("red"), "sk": n(1), "pk": s("a")}) == {
        "pk": s("a"),
        "sk": n(1),
    }


# Storage keys -----------------------------------------------------------------------------------


def test_storage_key_layout() -> None:
    key = {"pk": s("a"), "sk": n(7)}
    encoded_partition = encode_key_value(s("a"))
    assert TABLE.storage_key(key) == (
        hash64(encoded_partition).to_bytes(HASH_BYTES, "big")
        + encoded_partition
        + encode_key_value(n(7))
    )
    assert TABLE.storage_key(key) == TABLE.storage_key_of([s("a"), n(7)])


@pytest.mark.parametrize(
    ("shape", "key"),
    [
        (TABLE, {"pk": s("a"), "sk": n("-1.5")}),
        (HASH_ONLY, {"id": s("x")}),
        (BINARY, {"pk": b(b"\x00\xff"), "sk": b(b"\xff\x00")}),
    ],
)
def test_storage_key_matches_keycodec(shape: KeyShape, key: Item) -> None:
    sort = shape.sort_key
    expected = encode_storage_key(
        key[shape.partition_key.name], None if sort is None else key[sort.name]
    )
    assert shape.storage_key(key) == expected


def test_storage_key_ignores_attribute_order_of_the_key() -> None:
    assert TABLE.storage_key({"sk": n(1), "pk": s("a")}) == TABLE.storage_key(
        {"pk": s("a"), "sk": n(1)}
    )


def test_partition_prefix_starts_every_key_of_the_collection() -> None:
    for partition in [s("a"), s("a\x00"), s("p" * limits.PARTITION_KEY_BYTES_MAX)]:
        prefix = TABLE.storage_key_of([partition])
        for sort in [n(0), n(-1), n("1E+125"), n("-1E-130")]:
            assert TABLE.storage_key({"pk": partition, "sk": sort}).startswith(prefix)
    # Another partition key that its value merely starts with is another collection.
    assert not TABLE.storage_key({"pk": s("ab"), "sk": n(1)}).startswith(
        TABLE.storage_key_of([s("a")])
    )


def test_index_prefixes_start_every_entry_below_them() -> None:
    entry = {"gpk": s("g"), "gsk": n(3), "pk": s("a"), "sk": b(b"\x00")}
    full = GSI.storage_key(entry)
    assert full.startswith(GSI.storage_key_of([s("g")]))
    assert full.startswith(GSI.storage_key_of([s("g"), n(3)]))
    assert full.startswith(GSI.storage_key_of([s("g"), n(3), s("a")]))
    assert GSI.storage_key_of([s("g"), n(3), s("a"), b(b"\x00")]) == full


def test_storage_key_of_refuses_too_many_values() -> None:
    with pytest.raises(AssertionError):
        HASH_ONLY.storage_key_of([s("a"), s("b")])
    with pytest.raises(AssertionError):
        TABLE.storage_key_of([])


@pytest.mark.parametrize(
    ("shape", "partition", "sort"),
    [
        (
            STRING,
            s("\U0001f600" * (limits.PARTITION_KEY_BYTES_MAX // 4)),
            s("\u00e9" * (limits.SORT_KEY_BYTES_MAX // 2)),
        ),
        (
            BINARY,
            b(b"\x00" * limits.PARTITION_KEY_BYTES_MAX),
            b(b"\x00" * limits.SORT_KEY_BYTES_MAX),
        ),
        (
            BINARY,
            b(b"\xff" * limits.PARTITION_KEY_BYTES_MAX),
            b(b"\xff" * limits.SORT_KEY_BYTES_MAX),
        ),
    ],
)
def test_storage_key_of_max_length_key(
    shape: KeyShape, partition: AttributeValue, sort: AttributeValue
) -> None:
    key = shape.extract({"pk": partition, "sk": sort})
    storage_key = shape.storage_key(key)
    assert len(storage_key) > limits.PARTITION_KEY_BYTES_MAX + limits.SORT_KEY_BYTES_MAX
    assert storage_key.startswith(shape.storage_key_of([partition]))
    # One byte less in the sort key still sorts below the longest one.
    shorter_raw = raw(sort)[:-1]
    shorter = s(shorter_raw.decode("utf-8", "ignore")) if "S" in sort else b(shorter_raw)
    assert shape.storage_key({"pk": partition, "sk": shorter}) < storage_key


def test_storage_keys_of_zero_and_ff_bytes_in_order() -> None:
    values = [
        b"\x00",
        b"\x00\x00",
        b"\x00\x01",
        b"\x00\xff",
        b"\x01",
        b"\xfe\xff",
        b"\xff",
        b"\xff\x00",
    ]
    storage_keys = [BINARY.storage_key({"pk": b(b"p"), "sk": b(value)}) for value in values]
    assert storage_keys == sorted(storage_keys)
    assert len(set(storage_keys)) == len(values)


def test_storage_keys_of_strings_in_utf8_order() -> None:
    # UTF-8 byte order is code point order, unlike UTF-16's: U+FFFF sorts before U+10000.
    texts = ["\x00", "\x00\x00", "\x01", "a", "a\x00", "a\x00b", "ab", "\u00e9", "\ue000"]
    texts += ["\uffff", "\U00010000", "\U0010ffff"]
    storage_keys = [STRING.storage_key({"pk": s("p"), "sk": s(text)}) for text in texts]
    assert storage_keys == sorted(storage_keys)
    assert len(set(storage_keys)) == len(texts)


def test_storage_keys_of_numbers_in_order() -> None:
    numbers = ["-1E+125", "-10", "-1.5", "-1", "-1E-130", "0", "1E-130", "0.5", "1", "1.05", "10"]
    storage_keys = [TABLE.storage_key({"pk": s("a"), "sk": n(number)}) for number in numbers]
    assert storage_keys == sorted(storage_keys)
    assert len(set(storage_keys)) == len(numbers)


# Byte order of storage keys is DynamoDB's order of sort keys ------------------------------------


def _limited_bytes(data: bytes, limit: int) -> bytes:
    return data[:limit] or b"\x01"


def _limited_text(text: str, limit: int) -> str:
    # Cut at a byte limit without splitting a character; a key value is never empty.
    return text.encode("utf-8")[:limit].decode("utf-8", "ignore") or "a"


_BYTES = st.one_of(st.sampled_from([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF]), st.integers(0, 0xFF))
_SHORT_BYTES = st.lists(_BYTES, max_size=12).map(bytes)
# What follows a shared prefix: nothing, or bytes an escaping scheme could get wrong.
_SUFFIX_BYTES = st.one_of(
    st.just(b""),
    st.sampled_from(
        [b"\x00", b"\x00\x00", b"\x00\x01", b"\x00\xff", b"\x01", b"\xff", b"\xff\x00"]
    ),
    _SHORT_BYTES,
)
_CHARS = st.one_of(
    st.sampled_from(["\x00", "\x01", "a", "\x7f", "\x80", "\u00e9", "\uffff", "\U0010ffff"]),
    st.characters(codec="utf-8"),
)
_SHORT_TEXT = st.text(_CHARS, max_size=12)
# "\uffff" and "\U0010ffff" order differently in UTF-8 than in UTF-16.
_SUFFIX_TEXT = st.one_of(
    st.just(""),
    st.sampled_from(["\x00", "\x00\x00", "\x00\x01", "\x01", "\u00e9", "\uffff", "\U0010ffff"]),
    _SHORT_TEXT,
)


def _run_counts(width: int, limit: int) -> st.SearchStrategy[int]:
    """Repetitions of a `width`-byte unit: a few, or nearly enough to reach `limit` bytes."""
    return st.one_of(st.integers(0, 8), st.integers(max(0, limit // width - 8), limit // width))


@st.composite
def long_bytes(draw: st.DrawFn, limit: int) -> bytes:
    """A run of one byte, often up to `limit` bytes long."""
    byte = draw(st.sampled_from([0x00, 0xFF, 0x61]))
    return bytes([byte]) * draw(_run_counts(1, limit))


@st.composite
def long_text(draw: st.DrawFn, limit: int) -> str:
    """A run of one character, often up to `limit` UTF-8 bytes long."""
    char = draw(st.sampled_from(["\x00", "a", "\u00e9", "\uffff", "\U0010ffff"]))
    return char * draw(_run_counts(len(char.encode("utf-8")), limit))


@st.composite
def binary_keys(draw: st.DrawFn) -> tuple[bytes, bytes, bytes]:
    """A partition key and two sort keys sharing a prefix, each at most its size limit."""
    partition_limit, sort_limit = limits.PARTITION_KEY_BYTES_MAX, limits.SORT_KEY_BYTES_MAX
    partition = draw(st.one_of(_SHORT_BYTES, long_bytes(partition_limit)))
    prefix = draw(st.one_of(_SHORT_BYTES, long_bytes(sort_limit)))
    first = _limited_bytes(prefix + draw(_SUFFIX_BYTES), sort_limit)
    second = _limited_bytes(prefix + draw(_SUFFIX_BYTES), sort_limit)
    return _limited_bytes(partition, partition_limit), first, second


@st.composite
def string_keys(draw: st.DrawFn) -> tuple[str, str, str]:
    """A partition key and two sort keys sharing a prefix, each at most its size limit."""
    partition_limit, sort_limit = limits.PARTITION_KEY_BYTES_MAX, limits.SORT_KEY_BYTES_MAX
    partition = draw(st.one_of(_SHORT_TEXT, long_text(partition_limit)))
    prefix = draw(st.one_of(_SHORT_TEXT, long_text(sort_limit)))
    first = _limited_text(prefix + draw(_SUFFIX_TEXT), sort_limit)
    second = _limited_text(prefix + draw(_SUFFIX_TEXT), sort_limit)
    return _limited_text(partition, partition_limit), first, second


@st.composite
def numbers(draw: st.DrawFn) -> str:
    """A valid DynamoDB number: up to 38 significant digits within 1E-130 .. 9.99...E+125."""
    if draw(st.integers(0, 15)) == 0:
        return "0"
    digits = draw(st.lists(st.integers(0, 9), min_size=1, max_size=38))
    digits[0] = draw(st.integers(1, 9))
    adjusted = draw(st.one_of(st.integers(-130, 125), st.integers(-3, 3)))
    sign = draw(st.sampled_from(["", "-"]))
    return normalize_number(f"{sign}0.{''.join(map(str, digits))}E{adjusted + 1}")


def _sign(x: Any, y: Any) -> int:
    return (x > y) - (x < y)


def _assert_same_order(shape: KeyShape, partition: AttributeValue, x: Item, y: Item) -> None:
    shape.extract({"pk": partition, "sk": x["sk"]})  # Both keys are valid keys of the shape.
    shape.extract({"pk": partition, "sk": y["sk"]})
    first = shape.storage_key({"pk": partition, "sk": x["sk"]})
    second = shape.storage_key({"pk": partition, "sk": y["sk"]})
    assert _sign(first, second) == _sign(raw(x["sk"]), raw(y["sk"]))


@settings(max_examples=200, deadline=None)
@given(binary_keys())
def test_binary_sort_keys_order_as_unsigned_bytes(keys: tuple[bytes, bytes, bytes]) -> None:
    partition, first, second = keys
    _assert_same_order(BINARY, b(partition), {"sk": b(first)}, {"sk": b(second)})


@settings(max_examples=200, deadline=None)
@given(string_keys())
def test_string_sort_keys_order_as_utf8_bytes(keys: tuple[str, str, str]) -> None:
    partition, first, second = keys
    _assert_same_order(STRING, s(partition), {"sk": s(first)}, {"sk": s(second)})


@settings(max_examples=200, deadline=None)
@given(string_keys(), numbers(), numbers())
def test_number_sort_keys_order_numerically(
    keys: tuple[str, str, str], first: str, second: str
) -> None:
    partition = keys[0]
    _assert_same_order(TABLE, s(partition), {"sk": n(first)}, {"sk": n(second)})


# A global secondary index's entries -------------------------------------------------------------


@settings(max_examples=200, deadline=None)
@given(string_keys(), binary_keys(), numbers(), st.one_of(st.none(), numbers()))
def test_index_entries_order_as_tuples(
    strings: tuple[str, str, str],
    binaries: tuple[bytes, bytes, bytes],
    first: str,
    other: str | None,
) -> None:
    # The table key follows the index sort key, so every component but the last must delimit
    # itself: "a" then 0xff must still sort before "a\x00" then 0x00.
    partition, first_pk, second_pk = strings
    _, first_sk, second_sk = binaries
    second = first if other is None else other  # Equal index sort keys let the table key decide.
    x = {"gpk": s(partition), "gsk": n(first), "pk": s(first_pk), "sk": b(first_sk)}
    y = {"gpk": s(partition), "gsk": n(second), "pk": s(second_pk), "sk": b(second_sk)}
    assert _sign(GSI.storage_key(x), GSI.storage_key(y)) == _sign(
        (raw(x["gsk"]), raw(x["pk"]), raw(x["sk"])), (raw(y["gsk"]), raw(y["pk"]), raw(y["sk"]))
    )


def test_index_entries_order_by_index_sort_key_then_table_key() -> None:
    entries = [
        {"gpk": s("g"), "gsk": n(gsk), "pk": s(pk), "sk": b(sk)}
        for gsk in ["-2", "0", "1.5", "10"]
        for pk in ["a", "a\x00", "ab", "b", "\u00e9"]
        for sk in [b"\x00", b"\x00\x00", b"\x01", b"\xff"]
    ]
    by_storage_key = sorted(entries, key=GSI.storage_key)
    by_dynamodb = sorted(
        entries, key=lambda entry: (raw(entry["gsk"]), raw(entry["pk"]), raw(entry["sk"]))
    )
    assert by_storage_key == by_dynamodb
    prefix = GSI.storage_key_of([s("g")])
    assert all(GSI.storage_key(entry).startswith(prefix) for entry in entries)


def test_index_entries_of_one_index_key_share_a_prefix() -> None:
    prefix = GSI.storage_key_of([s("g"), n(1)])
    inside = GSI.storage_key({"gpk": s("g"), "gsk": n(1), "pk": s("z"), "sk": b(b"\xff")})
    outside = GSI.storage_key({"gpk": s("g"), "gsk": n(10), "pk": s("a"), "sk": b(b"\x00")})
    assert inside.startswith(prefix)
    assert not outside.startswith(prefix)
    assert inside < outside
