"""Item and key sizes, counted the way DynamoDB counts them, and the checks built on them.

Every size limit and every capacity unit in DynamoDB is measured with the formula of the Developer
Guide's "Item sizes and formats" page: an item is the sum of its attribute names' UTF-8 lengths and
its values' sizes. A String counts its UTF-8 bytes, a Binary its raw bytes (not the base64 text),
a Number about one byte per two significant digits plus one, Null and Boolean one byte, a List or
Map three bytes plus one byte per element plus the elements (a Map's entries also count their
names), and a set the sizes of its members. The functions here take values already validated and
normalised by `core.values`, so numbers are canonical text and binaries canonical base64.
"""

from __future__ import annotations

from typing import Literal

from core import limits
from core.errors import INVALID_PARAMETERS, ValidationError
from core.values import SCALAR_TYPES, AttributeValue, Item, type_of

KeyRole = Literal["partition", "sort"]

_NOT_VALID = "One or more parameter values are not valid. "


def _utf8_len(text: str) -> int:
    # ASCII text, by far the most common, has as many bytes as characters; only other text needs the
    # encoder to count multi-byte sequences.
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _binary_len(canonical_base64: str) -> int:
    # Canonical base64 holds 3 bytes in every 4 characters, less one byte per "=" of padding, so the
    # raw length is known without decoding the value.
    return len(canonical_base64) // 4 * 3 - canonical_base64.count("=", -2)


def _number_len(text: str) -> int:
    # "Leading and trailing zeroes are trimmed": what is left of the mantissa's digits are the
    # significant digits, stored two to a byte, plus one byte. Zero has no significant digit.
    mantissa = text.lower().split("e", 1)[0]
    significant = len(mantissa.lstrip("+-").replace(".", "").strip("0"))
    return (significant + 1) // 2 + 1


def value_size_bytes(value: AttributeValue) -> int:
    """Size of one validated attribute value, without its attribute name."""
    # A validated value has exactly one member, its type tag.
    [(tag, raw)] = value.items()
    if tag == "S":
        return len(raw) if raw.isascii() else len(raw.encode("utf-8"))
    if tag == "N":
        return _number_len(raw)
    if tag == "M":
        return (
            limits.SIZE_OVERHEAD_BYTES_PER_CONTAINER
            + len(raw) * limits.SIZE_OVERHEAD_BYTES_PER_ELEMENT
            + item_size_bytes(raw)
        )
    if tag == "B":
        return _binary_len(raw)
    if tag in ("BOOL", "NULL"):
        return limits.SIZE_BYTES_NULL_OR_BOOL
    if tag == "L":
        return (
            limits.SIZE_OVERHEAD_BYTES_PER_CONTAINER
            + len(raw) * limits.SIZE_OVERHEAD_BYTES_PER_ELEMENT
            + sum(value_size_bytes(element) for element in raw)
        )
    if tag == "SS":
        return sum(_utf8_len(member) for member in raw)
    if tag == "NS":
        return sum(_number_len(member) for member in raw)
    if tag == "BS":
        return sum(_binary_len(member) for member in raw)
    raise ValidationError(
        "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"
    )


def item_size_bytes(item: Item) -> int:
    """Size of a validated item: each attribute name's UTF-8 length plus its value's size."""
    size = 0
    for name, value in item.items():
        size += (len(name) if name.isascii() else len(name.encode("utf-8"))) + value_size_bytes(
            value
        )
    return size


def check_item_size(item: Item) -> int:
    """Return the item's size, or raise DynamoDB's error when it is past the 400 KB item limit."""
    size = item_size_bytes(item)
    if size > limits.ITEM_SIZE_BYTES_MAX:
        raise ValidationError("Item size has exceeded the maximum allowed size")
    return size


def check_key_value(
    name: str, value: AttributeValue, role: KeyRole, *, expected_type: str | None = None
) -> None:
    """Check one key attribute's value as DynamoDB checks a primary or index key.

    `role` is "partition" or "sort"; `expected_type` is the type the key schema declares, when the
    caller knows it. Key attributes are scalars (S, N or B); since May 2020 non-key strings and
    binaries may be empty but key ones still may not; a partition key value is at most 2048 bytes
    and a sort key value at most 1024.
    """
    tag = type_of(value)
    if (expected_type is not None and tag != expected_type) or tag not in SCALAR_TYPES:
        wanted = expected_type if expected_type is not None else "S, N or B"
        raise ValidationError(
            INVALID_PARAMETERS + f"Type mismatch for key {name} expected: {wanted} actual: {tag}"
        )
    if tag == "S" and value["S"] == "":
        raise ValidationError(
            _NOT_VALID + "The AttributeValue for a key attribute cannot contain an empty string "
            f"value. Key: {name}"
        )
    if tag == "B" and value["B"] == "":
        raise ValidationError(
            _NOT_VALID + "The AttributeValue for a key attribute cannot contain an empty binary "
            f"value. Key: {name}"
        )
    size = value_size_bytes(value)
    if role == "partition":
        if size > limits.PARTITION_KEY_BYTES_MAX:
            # DynamoDB's own message has no space between "of" and the number.
            raise ValidationError(
                INVALID_PARAMETERS + "Size of hashkey has exceeded the maximum size limit of"
                f"{limits.PARTITION_KEY_BYTES_MAX} bytes"
            )
    elif role == "sort":
        if size > limits.SORT_KEY_BYTES_MAX:
            raise ValidationError(
                INVALID_PARAMETERS
                + "Aggregated size of all range keys has exceeded the size limit of "
                f"{limits.SORT_KEY_BYTES_MAX} bytes"
            )
    else:
        raise AssertionError(f"key role must be 'partition' or 'sort', not {role!r}")
