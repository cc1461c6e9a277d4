"""Attribute values: validation and DynamoDB's error messages, numbers, comparison, equality."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from core import limits
from core.errors import SerializationError, ValidationError
from core.values import (
    add_numbers,
    compare,
    decode_binary,
    equal,
    normalize_number,
    parse_number,
    subtract_numbers,
    type_of,
    validate_item,
    validate_value,
)

INVALID = "One or more parameter values were invalid: "
MAX = "9.9999999999999999999999999999999999999E+125"
MIN = "1E-130"
DIGITS_38 = "12345678901234567890123456789012345678"


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# Numbers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "canonical"),
    [
        ("0", "0"),
        ("-0", "0"),
        ("0.000", "0"),
        ("0E+10", "0"),
        ("1", "1"),
        ("+1", "1"),
        ("01", "1"),
        ("1.0", "1"),
        ("1.", "1"),
        (".5", "0.5"),
        ("-.5", "-0.5"),
        ("1.50", "1.5"),
        ("1E2", "100"),
        ("1e+2", "100"),
        ("1.50E-3", "0.0015"),
        ("-12.5000", "-12.5"),
        ("100", "100"),
        ("1000000000000000000000000000000000000000", "1" + "0" * 39),
        (DIGITS_38, DIGITS_38),
        (DIGITS_38 + "000", DIGITS_38 + "000"),
        ("0." + DIGITS_38, "0." + DIGITS_38),
    ],
)
def test_normalize_number_gives_canonical_text(text: str, canonical: str) -> None:
    assert normalize_number(text) == canonical


@pytest.mark.parametrize(
    "text", [" 1", "1 ", " ", "abc", "1e", "e5", "1.2.3", "1,5", "0x10", "NaN", "Infinity", "--1"]
)
def test_malformed_number_text_is_rejected(text: str) -> None:
    with pytest.raises(ValidationError) as error:
        normalize_number(text)
    assert error.value.message == f"The parameter cannot be converted to a numeric value: {text}"


def test_an_empty_number_is_refused_with_nothing_after_the_words() -> None:
    # DynamoDB quotes a number that does not parse, but an empty one gets the sentence alone.
    with pytest.raises(ValidationError) as error:
        normalize_number("")
    assert error.value.message == "The parameter cannot be converted to a numeric value"


def test_non_ascii_digits_are_not_numbers() -> None:
    # Python's Decimal reads Arabic-Indic digits; DynamoDB does not.
    with pytest.raises(ValidationError, match="cannot be converted to a numeric value"):
        normalize_number("\u0661\u0662")


def test_the_range_ends_are_valid_numbers() -> None:
    assert normalize_number(MAX) == "9" * 38 + "0" * 88
    assert normalize_number("-" + MAX) == "-" + "9" * 38 + "0" * 88
    assert normalize_number(MIN) == "0." + "0" * 129 + "1"
    assert normalize_number("-" + MIN) == "-0." + "0" * 129 + "1"


@pytest.mark.parametrize(
    "text", ["1E126", "-1E126", "1E+9999999", "99999999999999999999" + "0" * 120]
)
def test_overflow(text: str) -> None:
    with pytest.raises(ValidationError) as error:
        normalize_number(text)
    assert error.value.message == (
        "Number overflow. Attempting to store a number with magnitude larger than supported range"
    )


@pytest.mark.parametrize("text", ["1E-131", "-9.9E-131", "1E-99999999"])
def test_underflow(text: str) -> None:
    with pytest.raises(ValidationError) as error:
        normalize_number(text)
    assert error.value.message == (
        "Number underflow. Attempting to store a number with magnitude smaller than supported range"
    )


@pytest.mark.parametrize(
    "text",
    [
        DIGITS_38 + "9",
        "1." + "0" * 37 + "1",
        # Longer than the exact arithmetic context: must not be rounded into an acceptable number.
        "0.1" + "0" * 450 + "1",
    ],
)
def test_more_than_38_significant_digits(text: str) -> None:
    with pytest.raises(ValidationError) as error:
        normalize_number(text)
    assert error.value.message == "Attempting to store more than 38 significant digits in a Number"


def test_parse_number_rejects_non_strings() -> None:
    with pytest.raises(ValidationError):
        parse_number(5)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("a", "b", "total"),
    [
        ("1", "2", "3"),
        ("0.1", "0.2", "0.3"),
        ("1.5", "-1.5", "0"),
        ("-5", "3", "-2"),
        (DIGITS_38, "1", "12345678901234567890123456789012345679"),
        ("1E125", "1E125", "2" + "0" * 125),
    ],
)
def test_add_numbers_is_exact(a: str, b: str, total: str) -> None:
    assert add_numbers(a, b) == total


def test_subtract_numbers_is_exact() -> None:
    assert subtract_numbers("0.3", "0.1") == "0.2"
    assert subtract_numbers("1", "1") == "0"
    assert subtract_numbers("-1", "-1.5") == "0.5"
    assert subtract_numbers("1E-130", "2E-130") == "-0." + "0" * 129 + "1"


def test_arithmetic_results_are_checked_like_stored_numbers() -> None:
    with pytest.raises(ValidationError, match="Number overflow"):
        add_numbers(normalize_number(MAX), normalize_number(MAX))
    with pytest.raises(ValidationError, match="more than 38 significant digits"):
        add_numbers(DIGITS_38, "0.1")
    with pytest.raises(ValidationError, match="more than 38 significant digits"):
        subtract_numbers("1", normalize_number(MIN))


# Validation ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    [
        {"S": "hello"},
        {"S": ""},
        {"BOOL": True},
        {"BOOL": False},
        {"NULL": True},
        {"SS": ["a", "b"]},
        {"L": []},
        {"M": {}},
    ],
)
def test_valid_values_pass_unchanged(value: dict[str, Any]) -> None:
    assert validate_value(value) == value


def test_values_are_normalised() -> None:
    assert validate_value({"N": "1.50"}) == {"N": "1.5"}
    assert validate_value({"NS": ["1.0", "2E1"]}) == {"NS": ["1", "20"]}
    assert validate_value({"B": b64(b"\x00\xff")}) == {"B": "AP8="}
    assert validate_value({"BS": ["AP8=", "AQ=="]}) == {"BS": ["AP8=", "AQ=="]}
    nested = {"M": {"a": {"L": [{"N": "01"}, {"M": {"b": {"N": "1e0"}}}]}}}
    assert validate_value(nested) == {"M": {"a": {"L": [{"N": "1"}, {"M": {"b": {"N": "1"}}}]}}}
    assert type_of(validate_value({"NULL": True})) == "NULL"


def test_empty_attribute_value() -> None:
    with pytest.raises(ValidationError) as error:
        validate_value({})
    assert error.value.message == (
        "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"
    )


def test_unknown_type_is_treated_as_empty() -> None:
    with pytest.raises(ValidationError, match="Supplied AttributeValue is empty"):
        validate_value({"X": "1"})


def test_two_types_in_one_value() -> None:
    with pytest.raises(ValidationError) as error:
        validate_value({"S": "a", "N": "1"})
    assert error.value.message == (
        "Supplied AttributeValue has more than one datatypes set, "
        "must contain exactly one of the supported datatypes"
    )


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"S": "a", "N": "abc"}, "The parameter cannot be converted to a numeric value: abc"),
        ({"N": "1", "SS": []}, INVALID + "An string set  may not be empty"),
        ({"BS": [], "S": "a"}, INVALID + "Binary sets should not be empty"),
    ],
)
def test_each_of_two_types_is_checked_before_there_being_two(
    value: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValidationError) as error:
        validate_value(value)
    assert error.value.message == message


def test_null_must_be_true() -> None:
    with pytest.raises(ValidationError) as error:
        validate_value({"NULL": False})
    assert error.value.message == INVALID + "Null attribute value types must have the value of true"


@pytest.mark.parametrize(
    "value",
    [
        "not an object",
        {"S": 5},
        {"N": 5},
        {"B": 5},
        {"B": "not base64!"},
        {"B": "AQ"},
        {"BOOL": "true"},
        {"M": []},
        {"L": {}},
        {"SS": "a"},
        {"SS": [1]},
        {"NS": [1]},
        {"BS": ["***"]},
    ],
)
def test_wrong_json_shapes_are_serialization_errors(value: Any) -> None:
    with pytest.raises(SerializationError):
        validate_value(value)


@pytest.mark.parametrize(
    ("tag", "message"),
    [
        ("SS", "An string set  may not be empty"),
        ("NS", "An number set  may not be empty"),
        ("BS", "Binary sets should not be empty"),
    ],
)
def test_empty_sets_are_rejected(tag: str, message: str) -> None:
    with pytest.raises(ValidationError) as error:
        validate_value({tag: []})
    # DynamoDB's own wordings, including "An" and the double space.
    assert error.value.message == INVALID + message


def test_duplicate_set_members_are_rejected() -> None:
    with pytest.raises(ValidationError) as error:
        validate_value({"SS": ["a", "b", "a"]})
    assert error.value.message == INVALID + "Input collection [a, b, a] contains duplicates."
    # Numbers are compared by value, so "1" and "1.0" are the same member.
    with pytest.raises(ValidationError, match="contains duplicates"):
        validate_value({"NS": ["1", "1.0"]})
    with pytest.raises(ValidationError) as error:
        validate_value({"BS": ["AQ==", "AQ=="]})
    assert error.value.message == (
        INVALID + "Input collection [AQ==, AQ==]of type BS contains duplicates."
    )


def test_number_set_members_are_range_checked() -> None:
    with pytest.raises(ValidationError, match="Number overflow"):
        validate_value({"NS": ["1", "1E200"]})


def _nested(depth: int) -> dict[str, Any]:
    value: dict[str, Any] = {"S": "leaf"}
    for level in range(depth - 1):
        value = {"M": {"x": value}} if level % 2 else {"L": [value]}
    return value


def test_nesting_up_to_32_levels() -> None:
    assert validate_value(_nested(limits.NESTING_DEPTH_MAX))
    with pytest.raises(ValidationError) as error:
        validate_value(_nested(limits.NESTING_DEPTH_MAX + 1))
    assert error.value.message == "Nesting Levels have exceeded supported limits"


def test_validate_item() -> None:
    assert validate_item({"a": {"N": "1.0"}, "b": {"S": "x"}}) == {
        "a": {"N": "1"},
        "b": {"S": "x"},
    }
    with pytest.raises(SerializationError):
        validate_item([])
    with pytest.raises(SerializationError):
        validate_item({1: {"S": "x"}})
    with pytest.raises(ValidationError, match="Number overflow"):
        validate_item({"a": {"M": {"b": {"N": "1E999"}}}})


# Comparison and equality -----------------------------------------------------------------------


def test_strings_compare_by_utf8_bytes() -> None:
    assert compare({"S": "a"}, {"S": "b"}) == -1
    assert compare({"S": "b"}, {"S": "a"}) == 1
    assert compare({"S": "a"}, {"S": "a"}) == 0
    assert compare({"S": ""}, {"S": "a"}) == -1
    assert compare({"S": "Z"}, {"S": "a"}) == -1
    # U+FFFF sorts before U+10000 in UTF-8 (and code points), unlike in UTF-16.
    assert compare({"S": "\uffff"}, {"S": "\U00010000"}) == -1


def test_numbers_compare_numerically() -> None:
    assert compare({"N": "9"}, {"N": "10"}) == -1
    assert compare({"N": "-1"}, {"N": "0.5"}) == -1
    assert compare({"N": "-10"}, {"N": "-9"}) == -1
    assert compare({"N": "1.5"}, {"N": "1.5"}) == 0
    assert compare({"N": DIGITS_38}, {"N": DIGITS_38[:-1] + "9"}) == -1


def test_binaries_compare_as_unsigned_bytes() -> None:
    assert compare({"B": b64(b"\x7f")}, {"B": b64(b"\x80")}) == -1
    assert compare({"B": b64(b"\xff")}, {"B": b64(b"\x00\x00")}) == 1
    assert compare({"B": b64(b"ab")}, {"B": b64(b"ab")}) == 0
    assert compare({"B": ""}, {"B": b64(b"\x00")}) == -1


def test_other_types_and_mixed_types_are_not_ordered() -> None:
    assert compare({"S": "1"}, {"N": "1"}) is None
    assert compare({"BOOL": True}, {"BOOL": True}) is None
    assert compare({"L": []}, {"L": []}) is None
    assert compare({"SS": ["a"]}, {"SS": ["a"]}) is None


def test_equality() -> None:
    assert equal({"S": "a"}, {"S": "a"})
    assert not equal({"S": "1"}, {"N": "1"})
    assert equal({"N": "1"}, {"N": "1"})
    assert equal({"SS": ["a", "b"]}, {"SS": ["b", "a"]})
    assert not equal({"SS": ["a", "b"]}, {"SS": ["a"]})
    assert equal({"NS": ["1", "2"]}, {"NS": ["2", "1"]})
    assert equal({"L": [{"S": "a"}, {"N": "1"}]}, {"L": [{"S": "a"}, {"N": "1"}]})
    assert not equal({"L": [{"S": "a"}, {"N": "1"}]}, {"L": [{"N": "1"}, {"S": "a"}]})
    assert not equal({"L": [{"S": "a"}]}, {"L": [{"S": "a"}, {"S": "a"}]})
    assert equal({"M": {"a": {"S": "x"}, "b": {"L": []}}}, {"M": {"b": {"L": []}, "a": {"S": "x"}}})
    assert not equal({"M": {"a": {"S": "x"}}}, {"M": {"a": {"S": "y"}}})
    assert not equal({"M": {"a": {"S": "x"}}}, {"M": {"b": {"S": "x"}}})
    assert equal({"BOOL": False}, {"BOOL": False})
    assert not equal({"BOOL": False}, {"BOOL": True})
    assert equal({"NULL": True}, {"NULL": True})


def test_decode_binary() -> None:
    assert decode_binary("AP8=") == b"\x00\xff"
    assert decode_binary("") == b""


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1e99999999999999999999", "Number overflow"),
        ("-1.5E+99999999999999999999", "Number overflow"),
        ("1e-99999999999999999999", "Number underflow"),
    ],
)
def test_an_exponent_past_what_decimal_holds_is_out_of_range(text: str, message: str) -> None:
    # Decimal itself refuses such exponents (InvalidOperation), which once became a 500.
    with pytest.raises(ValidationError) as raised:
        normalize_number(text)
    assert raised.value.message.startswith(message)


def test_zero_with_an_exponent_past_what_decimal_holds_is_zero() -> None:
    assert normalize_number("0.00e99999999999999999999") == "0"


@pytest.mark.parametrize("name", ["", "a" * 65536, "é" * 32768])
def test_an_attribute_name_is_one_character_to_less_than_64_kb(name: str) -> None:
    # "Attribute names must be at least one character long and less than 64 KB in size"
    # (Developer Guide, "Supported data types and naming rules"). DynamoDB's message for it is not
    # published: the refusal states the documented rule in the Guide's words.
    with pytest.raises(ValidationError) as raised:
        validate_item({"pk": {"S": "k"}, name: {"S": "x"}})
    assert raised.value.message == (
        "One or more parameter values were invalid: Attribute names must be at least one "
        "character long and less than 64 KB in size"
    )


def test_an_attribute_name_just_under_64_kb_is_kept() -> None:
    longest = "a" * 65535
    assert validate_item({longest: {"S": "x"}}) == {longest: {"S": "x"}}
