"""Order-preserving key encoding: DynamoDB's key order as byte order, round trips, storage keys."""

from __future__ import annotations

import base64
from decimal import Decimal

import pytest
import xxhash

from core.errors import InternalServerError, ValidationError
from core.keycodec import (
    HASH_BYTES,
    decode_key_value,
    decode_storage_key,
    encode_key_prefix,
    encode_key_value,
    encode_storage_key,
    hash64,
    key_hash,
    successor,
)
from core.values import AttributeValue, normalize_number


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


NUMBERS_IN_ORDER = [
    "-9.9999999999999999999999999999999999999E+125",
    "-1E+125",
    "-1000",
    "-100",
    "-99.5",
    "-10",
    "-1.5",
    "-1.05",
    "-1",
    "-0.5",
    "-0.12345678901234567890123456789012345678",
    "-0.1",
    "-1E-130",
    "0",
    "1E-130",
    "1.0000000000000000000000000000000000001E-130",
    "1E-129",
    "0.099",
    "0.1",
    "0.10000000000000000000000000000000000001",
    "0.5",
    "1",
    "1.05",
    "1.5",
    "2",
    "9.99",
    "10",
    "10.5",
    "99",
    "100",
    "12345678901234567890123456789012345678",
    "1E+125",
    "9.9999999999999999999999999999999999999E+125",
]

STRINGS_IN_ORDER = [
    "",
    "\x00",
    "\x00\x00",
    "\x00\x01",
    "\x01",
    "A",
    "Z",
    "a",
    "a\x00",
    "a\x00\x00",
    "a\x00b",
    "a\x01",
    "aa",
    "ab",
    "b",
    "\u00e9",
    "\uffff",
    "\U00010000",
    "\U0010ffff",
]

BYTES_IN_ORDER = [
    b"",
    b"\x00",
    b"\x00\x00",
    b"\x00\x01",
    b"\x00\xff",
    b"\x01",
    b"\x7f",
    b"\x80",
    b"\xfe\xff",
    b"\xff",
    b"\xff\x00",
    b"\xff\xff",
]


def _numbers() -> list[AttributeValue]:
    return [{"N": normalize_number(n)} for n in NUMBERS_IN_ORDER]


def _strings() -> list[AttributeValue]:
    return [{"S": s} for s in STRINGS_IN_ORDER]


def _binaries() -> list[AttributeValue]:
    return [{"B": b64(b)} for b in BYTES_IN_ORDER]


@pytest.mark.parametrize("values", [_numbers(), _strings(), _binaries()], ids=["N", "S", "B"])
def test_byte_order_is_dynamodb_order(values: list[AttributeValue]) -> None:
    encoded = [encode_key_value(v) for v in values]
    assert sorted(encoded) == encoded
    assert len(set(encoded)) == len(encoded)


def test_numbers_in_order_are_in_numeric_order() -> None:
    # Guards the fixture itself: the list above must really be ascending.
    decimals = [Decimal(n) for n in NUMBERS_IN_ORDER]
    assert decimals == sorted(decimals)


@pytest.mark.parametrize("values", [_numbers(), _strings(), _binaries()], ids=["N", "S", "B"])
def test_round_trip(values: list[AttributeValue]) -> None:
    for value in values:
        tag = next(iter(value))
        data = encode_key_value(value)
        assert decode_key_value(data, 0, tag) == (value, len(data))


@pytest.mark.parametrize("values", [_numbers(), _strings(), _binaries()], ids=["N", "S", "B"])
def test_values_are_self_delimiting(values: list[AttributeValue]) -> None:
    tag = next(iter(values[0]))
    data = b"".join(encode_key_value(v) for v in values)
    offset = 0
    decoded = []
    while offset < len(data):
        value, offset = decode_key_value(data, offset, tag)
        decoded.append(value)
    assert decoded == values
    encoded = [encode_key_value(v) for v in values]
    for a in encoded:
        for b in encoded:
            assert a == b or not b.startswith(a)


def test_numbers_decode_to_canonical_text() -> None:
    for text in ["1.50", "1E2", "-0.0100", "+7", "0.000"]:
        data = encode_key_value({"N": text})
        assert data == encode_key_value({"N": normalize_number(text)})
        assert decode_key_value(data, 0, "N")[0] == {"N": normalize_number(text)}


def test_number_layout() -> None:
    assert encode_key_value({"N": "0"}) == b"\x02"
    # 0.12 x 10^1: positive, exponent byte 1 + 129, digit pair 12 stored as 13, terminator.
    assert encode_key_value({"N": "1.2"}) == bytes([0x03, 130, 13, 0x00])
    # 0.5 x 10^0: an odd last digit is padded with a zero: pair 50 stored as 51.
    assert encode_key_value({"N": "0.5"}) == bytes([0x03, 129, 51, 0x00])
    # Negative numbers invert every byte after the sign.
    assert encode_key_value({"N": "-1.2"}) == bytes([0x01, 255 - 130, 255 - 13, 0xFF])
    # The extreme exponents use the whole exponent byte.
    assert encode_key_value({"N": normalize_number("1E-130")})[1] == 0
    assert encode_key_value({"N": normalize_number("9E125")})[1] == 255


def test_string_layout() -> None:
    assert encode_key_value({"S": "a\x00b"}) == b"a\x00\xffb\x00\x01"
    assert encode_key_value({"B": b64(b"\x00")}) == b"\x00\xff\x00\x01"


def test_binary_decodes_to_canonical_base64() -> None:
    value, _ = decode_key_value(encode_key_value({"B": "AP8="}), 0, "B")
    assert value == {"B": "AP8="}


def test_unvalidated_numbers_raise_dynamodb_errors() -> None:
    with pytest.raises(ValidationError, match="Number overflow"):
        encode_key_value({"N": "1E200"})
    with pytest.raises(ValidationError, match="Number underflow"):
        encode_key_value({"N": "1E-200"})
    with pytest.raises(ValidationError, match="38 significant digits"):
        encode_key_value({"N": "1" * 39})


@pytest.mark.parametrize("value", [{"BOOL": True}, {"L": []}, {"SS": ["a"]}])
def test_non_key_types_cannot_be_encoded(value: AttributeValue) -> None:
    with pytest.raises(InternalServerError):
        encode_key_value(value)
    with pytest.raises(InternalServerError):
        encode_key_prefix(value)


def test_key_prefix_matches_begins_with() -> None:
    candidates = _strings()
    for prefix in STRINGS_IN_ORDER:
        encoded_prefix = encode_key_prefix({"S": prefix})
        for value in candidates:
            matches = encode_key_value(value).startswith(encoded_prefix)
            assert matches == value["S"].startswith(prefix), (prefix, value)
    for raw_prefix in BYTES_IN_ORDER:
        encoded_prefix = encode_key_prefix({"B": b64(raw_prefix)})
        for raw in BYTES_IN_ORDER:
            matches = encode_key_value({"B": b64(raw)}).startswith(encoded_prefix)
            assert matches == raw.startswith(raw_prefix)


@pytest.mark.parametrize(
    ("data", "tag"),
    [
        (b"abc", "S"),  # no terminator
        (b"a\x00", "S"),  # cut inside the terminator
        (b"a\x00\x05", "S"),  # a zero byte that is neither an escape nor the end
        (b"\xff\xfe\x00\x01", "S"),  # not UTF-8
        (b"", "N"),
        (b"\x07", "N"),  # bad sign byte
        (b"\x03\x80\x0d", "N"),  # unterminated
        (b"\x03\x80\xc8\x00", "N"),  # digit pair out of range
        (b"\x03\x80\x00", "N"),  # no digits
        (b"x", "BOOL"),
    ],
)
def test_corrupt_bytes_are_internal_errors(data: bytes, tag: str) -> None:
    with pytest.raises(InternalServerError):
        decode_key_value(data, 0, tag)


# Hashing and storage keys ----------------------------------------------------------------------


def test_hash64_is_xxh64_seed_zero() -> None:
    # Stored keys and partition bounds depend on these exact values: they must never change.
    assert hash64(b"") == 0xEF46DB3751D8E999
    assert hash64(b"abc") == xxhash.xxh64_intdigest(b"abc")
    assert key_hash({"S": "a"}) == hash64(b"a\x00\x01")
    assert key_hash({"N": "1.0"}) == key_hash({"N": "1"})


def test_storage_key_layout() -> None:
    pk = {"S": "user#1"}
    sk = {"N": "42"}
    data = encode_storage_key(pk, sk)
    encoded_pk = encode_key_value(pk)
    assert data[:HASH_BYTES] == key_hash(pk).to_bytes(8, "big")
    assert data[HASH_BYTES:] == encoded_pk + encode_key_value(sk)
    # The key without a sort key is the prefix of the whole item collection.
    assert data.startswith(encode_storage_key(pk, None))


@pytest.mark.parametrize(
    ("pk", "sk", "hash_type", "range_type"),
    [
        ({"S": "a\x00b"}, None, "S", None),
        ({"N": "-12.5"}, {"S": ""}, "N", "S"),
        ({"B": "AP8="}, {"N": "0"}, "B", "N"),
        ({"S": "\U0001f600"}, {"B": "AAA="}, "S", "B"),
    ],
)
def test_storage_key_round_trip(
    pk: AttributeValue, sk: AttributeValue | None, hash_type: str, range_type: str | None
) -> None:
    assert decode_storage_key(encode_storage_key(pk, sk), hash_type, range_type) == (pk, sk)


def test_storage_keys_of_one_partition_key_sort_by_sort_key() -> None:
    pk = {"S": "collection"}
    keys = [encode_storage_key(pk, v) for v in _numbers()]
    assert sorted(keys) == keys


def test_decode_storage_key_rejects_trailing_bytes() -> None:
    data = encode_storage_key({"S": "a"}, {"S": "b"})
    with pytest.raises(InternalServerError):
        decode_storage_key(data, "S", None)
    with pytest.raises(InternalServerError):
        decode_storage_key(data + b"\x00", "S", "S")


def test_successor_bounds_every_extension_of_a_prefix() -> None:
    assert successor(b"ab") == b"ac"
    assert successor(b"a\xff\xff") == b"b"
    assert successor(b"\xff\xff") is None
