"""DynamoDB attribute values: validation, normalisation, comparison and number arithmetic.

dynalab keeps values in DynamoDB's own JSON shape everywhere (`{"S": "abc"}`, `{"N": "12.5"}`,
`{"B": "<base64>"}`, `{"M": {...}}`, ...): a request's items pass from the HTTP body to the disk and
back without being converted into another object model, which is both the fastest path and the
easiest to read. `validate_value` is the single gate: it checks one wire value against DynamoDB's
rules and returns it normalised (numbers in canonical form, binary in canonical base64), so
everything behind the gate may assume well-formed values and compare them by their text.

Numbers follow DynamoDB: up to 38 significant digits, magnitudes between 1E-130 and
9.99...E+125, compared numerically, so "1.0", "01" and "1" are the same number and all normalise
to "1".
"""

from __future__ import annotations

import base64
import binascii
import re
from decimal import Context, Decimal, InvalidOperation, localcontext
from typing import Any

from core import limits
from core.errors import INVALID_PARAMETERS, SerializationError, ValidationError

AttributeValue = dict[str, Any]
Item = dict[str, AttributeValue]

SCALAR_TYPES = frozenset({"S", "N", "B"})
SET_TYPES = {"SS": "S", "NS": "N", "BS": "B"}
ALL_TYPES = frozenset({"S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"})

# ASCII digits only: Python's \d (and Decimal) would also accept other scripts' digits, such as
# "١٢", which DynamoDB rejects as not numeric.
_NUMBER_TEXT = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")
_SET_NAMES = {"SS": "string", "NS": "number", "BS": "binary"}
_KNOWN_TAGS = frozenset({"S", "N", "B", "BOOL", "NULL", "M", "L", "SS", "NS", "BS"})


def type_of(value: AttributeValue) -> str:
    """The type tag of a validated value ("S", "N", "M", ...)."""
    return next(iter(value))


# Numbers ---------------------------------------------------------------------------------------


NOT_NUMERIC = "The parameter cannot be converted to a numeric value"
_OVERFLOW = (
    "Number overflow. Attempting to store a number with magnitude larger than supported range"
)
_UNDERFLOW = (
    "Number underflow. Attempting to store a number with magnitude smaller than supported range"
)


def parse_number(text: str) -> Decimal:
    """Parse and range-check a DynamoDB number, raising DynamoDB's errors."""
    match = _NUMBER_TEXT.fullmatch(text) if isinstance(text, str) else None
    if match is None:
        if not text:
            # An empty number has nothing to quote, and DynamoDB's message stops at "value"
            # (dynalite's tests, run against the service: {"N": ""} and {"NS": ["1", ""]}).
            raise ValidationError(NOT_NUMERIC)
        raise ValidationError(f"{NOT_NUMERIC}: {text}")
    try:
        number = Decimal(text)
    except InvalidOperation:
        # An exponent past what Decimal holds (about 10**18): the number is zero, or its
        # magnitude is far outside DynamoDB's range on the exponent's side.
        if not match.group(1).strip("0."):
            return Decimal(0)
        if (match.group(2) or "").lstrip("eE").startswith("-"):
            raise ValidationError(_UNDERFLOW) from None
        raise ValidationError(_OVERFLOW) from None
    return check_number(number)


def check_number(number: Decimal) -> Decimal:
    """Range- and precision-check an exact Decimal the way DynamoDB checks a stored number."""
    if number.is_zero():
        return Decimal(0)
    # Trailing zeros are stripped from the coefficient by hand, and the magnitude taken with
    # copy_abs, because normalize() and abs() round to their context's precision: a 39-digit
    # magnitude rounded to 28 digits made the largest numbers overflow, a 500-digit input rounded
    # to 400 could pass as a short number, and a huge exponent trapped as decimal.Overflow.
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int), "only finite numbers reach check_number"
    significant = len(digits)
    while digits[significant - 1] == 0:
        significant -= 1
    number = Decimal((sign, digits[:significant], exponent + len(digits) - significant))
    magnitude = number.copy_abs()
    if magnitude > limits.NUMBER_MAGNITUDE_MAX:
        raise ValidationError(_OVERFLOW)
    if magnitude < limits.NUMBER_MAGNITUDE_MIN:
        raise ValidationError(_UNDERFLOW)
    if significant > limits.NUMBER_PRECISION_DIGITS_MAX:
        raise ValidationError("Attempting to store more than 38 significant digits in a Number")
    return number


def format_number(number: Decimal) -> str:
    """The canonical text of a checked number: no exponent, no trailing zeros, no "-0"."""
    if number.is_zero():
        return "0"
    return format(number, "f")


def normalize_number(text: str) -> str:
    """Canonical text of a number given as DynamoDB JSON text ("1.50" -> "1.5", "1E2" -> "100")."""
    return format_number(parse_number(text))


# Arithmetic is done exactly (the operands have at most 38 digits each, so their sum fits in far
# fewer than the context's digits) and then checked like any stored number: a result that needs
# more than 38 significant digits or leaves the range is an error, as in DynamoDB, never silently
# rounded.
_EXACT = Context(prec=400, Emax=999_999, Emin=-999_999)


def add_numbers(a: str, b: str) -> str:
    with localcontext(_EXACT):
        return format_number(check_number(Decimal(a) + Decimal(b)))


def subtract_numbers(a: str, b: str) -> str:
    with localcontext(_EXACT):
        return format_number(check_number(Decimal(a) - Decimal(b)))


# Binary ----------------------------------------------------------------------------------------


def decode_binary(text: str) -> bytes:
    """Bytes of a validated B value (stored as canonical base64 text)."""
    return base64.b64decode(text)


def _canonical_base64(raw: Any, where: str) -> str:
    if not isinstance(raw, str):
        raise SerializationError(f"Binary value of {where} must be base64-encoded text")
    try:
        data = base64.b64decode(raw, validate=True)
    except (binascii.Error, ValueError):
        raise SerializationError(f"Base64 encoded length is invalid for {where}") from None
    return base64.b64encode(data).decode("ascii")


# Validation ------------------------------------------------------------------------------------


# The Developer Guide's rule ("Supported data types and naming rules"); DynamoDB's own message for
# it is not published, so the refusal states the rule in the Guide's words.
ATTRIBUTE_NAME_LENGTH = (
    INVALID_PARAMETERS
    + "Attribute names must be at least one character long and less than 64 KB in size"
)


def check_attribute_name(name: str) -> None:
    """Refuse an attribute name that is empty or not less than 64 KB in UTF-8."""
    # A name of at most a quarter of the bound in characters is within it in bytes: no encoding.
    if not name or (
        len(name) > limits.ATTRIBUTE_NAME_BYTES_MAX // 4
        and len(name.encode()) > limits.ATTRIBUTE_NAME_BYTES_MAX
    ):
        raise ValidationError(ATTRIBUTE_NAME_LENGTH)


def validate_item(item: Any, *, where: str = "item") -> Item:
    """Validate a whole item (a JSON object of attribute name to value) and return it normalised."""
    if not isinstance(item, dict):
        raise SerializationError(f"Expected a map of attribute values for {where}")
    out: Item = {}
    for name, value in item.items():
        if not isinstance(name, str):
            raise SerializationError("Attribute names must be strings")
        check_attribute_name(name)
        out[name] = validate_value(value, depth=1, where=name)
    return out


def validate_value(value: Any, *, depth: int = 1, where: str = "value") -> AttributeValue:
    """Validate one wire attribute value and return it normalised; raise DynamoDB's errors."""
    if depth > limits.NESTING_DEPTH_MAX:
        raise ValidationError("Nesting Levels have exceeded supported limits")
    if not isinstance(value, dict):
        raise SerializationError(f"Attribute value of {where} must be a JSON object")
    if len(value) != 1:
        if not value:
            raise ValidationError(
                "Supplied AttributeValue is empty, must contain exactly one of the supported "
                "datatypes"
            )
        # DynamoDB checks each of the values it was given (an invalid number, an empty set)
        # before it objects to there being more than one.
        for tag, raw in value.items():
            if tag in _KNOWN_TAGS:
                validate_value({tag: raw}, depth=depth, where=where)
        raise ValidationError(
            "Supplied AttributeValue has more than one datatypes set, "
            "must contain exactly one of the supported datatypes"
        )
    ((tag, raw),) = value.items()
    if tag == "S":
        if not isinstance(raw, str):
            raise SerializationError(f"String value of {where} must be a JSON string")
        return value
    if tag == "N":
        if not isinstance(raw, str):
            raise SerializationError(f"Number value of {where} must be a JSON string")
        return {"N": normalize_number(raw)}
    if tag == "B":
        return {"B": _canonical_base64(raw, where)}
    if tag == "BOOL":
        if not isinstance(raw, bool):
            raise SerializationError(f"BOOL value of {where} must be true or false")
        return value
    if tag == "NULL":
        if raw is not True:
            raise ValidationError(
                INVALID_PARAMETERS + "Null attribute value types must have the value of true"
            )
        return value
    if tag == "M":
        if not isinstance(raw, dict):
            raise SerializationError(f"Map value of {where} must be a JSON object")
        return {
            "M": {
                _name(k): validate_value(v, depth=depth + 1, where=f"{where}.{k}")
                for k, v in raw.items()
            }
        }
    if tag == "L":
        if not isinstance(raw, list):
            raise SerializationError(f"List value of {where} must be a JSON array")
        return {"L": [validate_value(v, depth=depth + 1, where=f"{where}[]") for v in raw]}
    if tag in SET_TYPES:
        return {tag: _validate_set(tag, raw, where)}
    raise ValidationError(
        "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"
    )


def _name(key: Any) -> str:
    if not isinstance(key, str):
        raise SerializationError("Map keys must be strings")
    return key


def _validate_set(tag: str, raw: Any, where: str) -> list[str]:
    if not isinstance(raw, list):
        raise SerializationError(f"Set value of {where} must be a JSON array")
    if not raw:
        # DynamoDB's own wordings, including "An" and the double space of the first two.
        if tag == "BS":
            raise ValidationError(INVALID_PARAMETERS + "Binary sets should not be empty")
        raise ValidationError(INVALID_PARAMETERS + f"An {_SET_NAMES[tag]} set  may not be empty")
    if tag == "SS":
        if not all(isinstance(s, str) for s in raw):
            raise SerializationError(f"String set {where} must hold strings")
        members = list(raw)
    elif tag == "NS":
        if not all(isinstance(s, str) for s in raw):
            raise SerializationError(f"Number set {where} must hold numbers as strings")
        members = [normalize_number(s) for s in raw]
    else:
        members = [_canonical_base64(s, where) for s in raw]
    if len(set(members)) != len(members):
        shown = ", ".join(raw)
        # A binary set names its type, after the list with no space between.
        of_type = "of type BS" if tag == "BS" else ""
        raise ValidationError(
            INVALID_PARAMETERS + f"Input collection [{shown}]{of_type} contains duplicates."
        )
    return members


# Comparison ------------------------------------------------------------------------------------


def compare(a: AttributeValue, b: AttributeValue) -> int | None:
    """Order two validated scalar values of one type: -1, 0 or 1; None when they are not ordered.

    DynamoDB orders only S (by UTF-8 bytes, which is code point order), N (numerically) and B
    (unsigned bytes); comparing values of different types, or any other type, is simply false.
    """
    tag = type_of(a)
    if tag != type_of(b) or tag not in SCALAR_TYPES:
        return None
    x, y = a[tag], b[tag]
    if tag == "N":
        if x == y:
            return 0
        dx, dy = Decimal(x), Decimal(y)
        return -1 if dx < dy else (1 if dx > dy else 0)
    if tag == "B":
        x, y = decode_binary(x), decode_binary(y)
    return -1 if x < y else (1 if x > y else 0)


def equal(a: AttributeValue, b: AttributeValue) -> bool:
    """DynamoDB equality of validated values: sets ignore order, maps and lists compare deeply."""
    tag = type_of(a)
    if tag != type_of(b):
        return False
    x, y = a[tag], b[tag]
    if tag in SET_TYPES:
        return len(x) == len(y) and set(x) == set(y)
    if tag == "M":
        return x.keys() == y.keys() and all(equal(x[k], y[k]) for k in x)
    if tag == "L":
        return len(x) == len(y) and all(equal(p, q) for p, q in zip(x, y, strict=True))
    # Validated numbers and binaries are canonical, so text equality is value equality.
    return bool(x == y)
