"""Item sizes as the Developer Guide's "Item sizes and formats" counts them, and the size checks."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from core import limits
from core.errors import ValidationError
from core.size import check_item_size, check_key_value, item_size_bytes, value_size_bytes
from core.values import decode_binary, validate_value

INVALID = "One or more parameter values were invalid: "


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@pytest.mark.parametrize(
    ("text", "size"),
    [
        ("", 0),
        ("a", 1),
        ("hello", 5),
        ("\u00e9", 2),  # é: two UTF-8 bytes
        ("\u20ac", 3),  # €: three
        ("\U0001f600", 4),  # an emoji: four
        ("a\u00e9\u20ac\U0001f600", 10),
    ],
)
def test_string_counts_utf8_bytes(text: str, size: int) -> None:
    assert value_size_bytes({"S": text}) == size


@pytest.mark.parametrize(
    ("number", "size"),
    [
        # No significant digit once zeroes are trimmed: just the 1 byte.
        ("0", 1),
        # 1 byte per two significant digits, rounded up, plus 1 byte.
        ("1", 2),
        ("12", 2),
        ("123", 3),
        ("1234", 3),
        ("-1234", 3),
        # Leading and trailing zeroes are trimmed.
        ("100", 2),
        ("1000000", 2),
        ("0.001", 2),
        ("0.0015", 2),
        ("1.5", 2),
        ("1005", 3),
        ("12345678901234567890123456789012345678", 20),
        ("9" * 38 + "0" * 88, 20),
        ("0." + "0" * 129 + "1", 2),
        # Text that is not in canonical form counts the same.
        ("1.50E3", 2),
        ("+0012.500e-1", 3),
    ],
)
def test_number_size(number: str, size: int) -> None:
    assert value_size_bytes({"N": number}) == size


@pytest.mark.parametrize("length", range(0, 12))
def test_binary_counts_raw_bytes_not_base64(length: int) -> None:
    raw = bytes(range(200, 200 + length))
    value = validate_value({"B": b64(raw)})
    assert value_size_bytes(value) == length == len(decode_binary(value["B"]))


def test_bool_and_null_are_one_byte() -> None:
    assert value_size_bytes({"BOOL": True}) == 1
    assert value_size_bytes({"BOOL": False}) == 1
    assert value_size_bytes({"NULL": True}) == 1


def test_list_and_map_overhead() -> None:
    # "An attribute of type List or Map requires 3 bytes of overhead, regardless of its contents."
    assert value_size_bytes({"L": []}) == 3
    assert value_size_bytes({"M": {}}) == 3
    # "Each List or Map element also requires 1 byte of overhead."
    assert value_size_bytes({"L": [{"S": "ab"}, {"N": "1"}]}) == 3 + (1 + 2) + (1 + 2)
    # A map element also counts its name, as an attribute does.
    assert value_size_bytes({"M": {"k": {"S": "ab"}, "\u00e9t\u00e9": {"BOOL": True}}}) == (
        3 + (1 + 1 + 2) + (1 + 5 + 1)
    )


def test_nested_documents() -> None:
    inner = {"M": {"a": {"L": [{"NULL": True}]}}}  # 3 + (1 + 1 + (3 + 1 + 1)) = 10
    assert value_size_bytes(inner) == 10
    assert value_size_bytes({"L": [inner, inner]}) == 3 + 2 * (1 + 10)


def test_sets_are_the_sum_of_their_members() -> None:
    assert value_size_bytes({"SS": ["a", "bc", "\u20ac"]}) == 1 + 2 + 3
    assert value_size_bytes({"NS": ["1", "100", "12345"]}) == 2 + 2 + 4
    assert value_size_bytes({"BS": [b64(b"\x00"), b64(b"\x01\x02\x03\x04")]}) == 1 + 4


def test_item_size_adds_attribute_names() -> None:
    item: dict[str, Any] = {
        "pk": {"S": "user#1"},  # 2 + 6
        "n": {"N": "42"},  # 1 + 2
        "\u00e9": {"BOOL": True},  # 2 + 1
        "doc": {"M": {"a": {"S": "x"}}},  # 3 + (3 + 1 + 1 + 1)
    }
    assert item_size_bytes(item) == 8 + 3 + 3 + 9
    assert item_size_bytes({}) == 0


def test_unknown_type_is_rejected() -> None:
    with pytest.raises(ValidationError):
        value_size_bytes({"X": "1"})


# Item size limit -------------------------------------------------------------------------------


def _item_of_size(size: int) -> dict[str, Any]:
    return {"a": {"S": "x" * (size - 1)}}


def test_item_at_the_limit_is_accepted() -> None:
    item = _item_of_size(limits.ITEM_SIZE_BYTES_MAX)
    assert item_size_bytes(item) == 400 * 1024
    assert check_item_size(item) == 400 * 1024


def test_item_one_byte_past_the_limit_is_rejected() -> None:
    with pytest.raises(ValidationError) as error:
        check_item_size(_item_of_size(limits.ITEM_SIZE_BYTES_MAX + 1))
    assert error.value.message == "Item size has exceeded the maximum allowed size"


def test_the_limit_counts_utf8_bytes_not_characters() -> None:
    # 102,400 four-byte characters are exactly 400 KB of value; the name pushes the item over.
    emoji = "\U0001f600"
    with pytest.raises(ValidationError, match="Item size has exceeded"):
        check_item_size({"a": {"S": emoji * (limits.ITEM_SIZE_BYTES_MAX // 4)}})
    assert check_item_size({"a": {"S": emoji * (limits.ITEM_SIZE_BYTES_MAX // 4 - 1)}}) > 0


# Key values ------------------------------------------------------------------------------------


def test_valid_keys_pass() -> None:
    check_key_value("pk", {"S": "a"}, "partition")
    check_key_value("pk", {"N": "-1.5"}, "partition", expected_type="N")
    check_key_value("sk", {"B": b64(b"\x00")}, "sort", expected_type="B")


def test_key_type_must_match_the_schema() -> None:
    with pytest.raises(ValidationError) as error:
        check_key_value("pk", {"N": "1"}, "partition", expected_type="S")
    assert error.value.message == INVALID + "Type mismatch for key pk expected: S actual: N"


@pytest.mark.parametrize(
    "value", [{"BOOL": True}, {"NULL": True}, {"L": []}, {"M": {}}, {"SS": ["a"]}]
)
def test_key_must_be_a_scalar(value: dict[str, Any]) -> None:
    with pytest.raises(ValidationError, match="Type mismatch for key pk"):
        check_key_value("pk", value, "partition")


def test_empty_string_key() -> None:
    with pytest.raises(ValidationError) as error:
        check_key_value("pk", {"S": ""}, "partition")
    assert error.value.message == (
        "One or more parameter values are not valid. The AttributeValue for a key attribute "
        "cannot contain an empty string value. Key: pk"
    )


def test_empty_binary_key() -> None:
    with pytest.raises(ValidationError) as error:
        check_key_value("sk", {"B": ""}, "sort")
    assert error.value.message == (
        "One or more parameter values are not valid. The AttributeValue for a key attribute "
        "cannot contain an empty binary value. Key: sk"
    )


def test_partition_key_size_limit() -> None:
    check_key_value("pk", {"S": "x" * limits.PARTITION_KEY_BYTES_MAX}, "partition")
    check_key_value("pk", {"S": "\U0001f600" * 512}, "partition")
    check_key_value("pk", {"B": b64(b"\x01" * 2048)}, "partition")
    for too_big in (
        {"S": "x" * 2049},
        {"S": "\U0001f600" * 512 + "x"},
        {"B": b64(b"\x01" * 2049)},
    ):
        with pytest.raises(ValidationError) as error:
            check_key_value("pk", too_big, "partition")
        # No space between "of" and "2048": DynamoDB's own message.
        assert error.value.message == (
            INVALID + "Size of hashkey has exceeded the maximum size limit of2048 bytes"
        )


def test_sort_key_size_limit() -> None:
    check_key_value("sk", {"S": "x" * limits.SORT_KEY_BYTES_MAX}, "sort")
    check_key_value("sk", {"S": "x" * 2048}, "partition")
    for too_big in ({"S": "x" * 1025}, {"S": "\u20ac" * 342}, {"B": b64(b"\x00" * 1025)}):
        with pytest.raises(ValidationError) as error:
            check_key_value("sk", too_big, "sort")
        assert error.value.message == (
            INVALID + "Aggregated size of all range keys has exceeded the size limit of 1024 bytes"
        )


def test_number_keys_never_reach_the_size_limits() -> None:
    check_key_value("sk", {"N": "-" + "9" * 38 + "0" * 88}, "sort")


def test_unknown_key_role_is_a_bug() -> None:
    with pytest.raises(AssertionError):
        check_key_value("k", {"S": "a"}, "range")  # type: ignore[arg-type]
