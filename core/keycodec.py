"""Order-preserving, self-delimiting byte encoding of key values, and the storage key built from it.

Storage nodes keep items in an ordered key-value engine, so the byte order of the stored keys must
be DynamoDB's key order: String by UTF-8 bytes, Binary by unsigned bytes, Number numerically. Each
encoded value is also self-delimiting (no encoding is a prefix of another), so a concatenation of
encoded values sorts component by component, which is what makes `(hash, partition key, sort key)`
one memcmp-ordered key and a Query one cursor range scan.

- S and B: the raw bytes with every 0x00 escaped as 0x00 0xFF, then the terminator 0x00 0x01. A
  value that ends sorts before any longer value with the same prefix, since 0x01 is below both 0xFF
  (an escaped zero byte) and every non-zero byte.
- N: one sign byte (negative < zero < positive). A non-zero number is 0.d1d2...dn x 10^E with
  d1 != 0; DynamoDB's range (1E-130 to 9.99...E+125) makes E fit one byte exactly, and the digits
  follow two to a byte (pair value + 1, so 0x00 is free for the terminator). Negative numbers store
  the same bytes inverted, so a larger magnitude sorts first.

A storage key is the 8-byte big-endian xxHash64 of the encoded partition key, then the encoded
partition key, then the encoded sort key if the table has one. The hash spreads keys evenly over the
partitions (DynamoDB hashes the partition key too), and `encode_storage_key(pk, None)` is the prefix
shared by every item of the partition key's item collection.
"""

from __future__ import annotations

import base64
from decimal import Decimal

import xxhash

from core import limits
from core.errors import InternalServerError
from core.values import AttributeValue, decode_binary, format_number, parse_number, type_of

HASH_BYTES = 8
HASH_SPACE = 1 << (8 * HASH_BYTES)

_ESCAPE = b"\x00\xff"
_TERMINATOR = b"\x00\x01"

_NEGATIVE = 0x01
_ZERO = 0x02
_POSITIVE = 0x03
_DIGITS_END = 0x00

# E of the smallest and largest magnitudes, written as 0.d1d2... x 10^E.
_EXPONENT_MIN = limits.NUMBER_MAGNITUDE_MIN.adjusted() + 1
_EXPONENT_MAX = limits.NUMBER_MAGNITUDE_MAX.adjusted() + 1
assert _EXPONENT_MAX - _EXPONENT_MIN <= 0xFF, "a number's exponent must fit one byte"


def hash64(data: bytes) -> int:
    """Stable 64-bit hash (xxHash64, seed 0): the same in every process and run, unlike hash()."""
    return xxhash.xxh64_intdigest(data)


# Encoding ---------------------------------------------------------------------------------------


def _escape(raw: bytes) -> bytes:
    return raw.replace(b"\x00", _ESCAPE) + _TERMINATOR


def _encode_number(text: str) -> bytes:
    sign, digits, exponent = Decimal(text).as_tuple()
    assert isinstance(exponent, int), "validated numbers are finite"
    if digits == (0,):
        return bytes((_ZERO,))
    trailing = len(digits)
    while digits[trailing - 1] == 0:
        trailing -= 1
    significant = digits[:trailing]
    scientific_exponent = exponent + len(digits)
    if (
        len(significant) > limits.NUMBER_PRECISION_DIGITS_MAX
        or not _EXPONENT_MIN <= scientific_exponent <= _EXPONENT_MAX
    ):
        # Only a value that skipped validation gets here; parse_number raises DynamoDB's error.
        parse_number(text)
    body = bytearray((scientific_exponent - _EXPONENT_MIN,))
    for i in range(0, len(significant), 2):
        low = significant[i + 1] if i + 1 < len(significant) else 0
        body.append(significant[i] * 10 + low + 1)
    body.append(_DIGITS_END)
    if sign:
        return bytes((_NEGATIVE,)) + bytes(0xFF - b for b in body)
    return bytes((_POSITIVE,)) + bytes(body)


def encode_key_value(value: AttributeValue) -> bytes:
    """Order-preserving, self-delimiting bytes of a validated S, N or B key value."""
    tag = type_of(value)
    if tag == "S":
        return _escape(value["S"].encode("utf-8"))
    if tag == "N":
        return _encode_number(value["N"])
    if tag == "B":
        return _escape(decode_binary(value["B"]))
    raise InternalServerError(f"A key value must be of type S, N or B, not {tag}")


def encode_key_prefix(value: AttributeValue) -> bytes:
    """Bytes that every encoded S or B value beginning with `value` starts with (begins_with).

    The escaping works byte by byte, so the encoding of a prefix without its terminator is a prefix
    of the encoding of every longer value.
    """
    tag = type_of(value)
    if tag == "S":
        text: str = value["S"]
        return text.encode("utf-8").replace(b"\x00", _ESCAPE)
    if tag == "B":
        return decode_binary(value["B"]).replace(b"\x00", _ESCAPE)
    raise InternalServerError(f"begins_with applies to S and B key values, not {tag}")


def key_hash(partition_key: AttributeValue) -> int:
    """The 64-bit hash that places a partition key in the table's hash space."""
    return hash64(encode_key_value(partition_key))


def encode_storage_key(partition_key: AttributeValue, sort_key: AttributeValue | None) -> bytes:
    """hash64(encoded pk) as 8 big-endian bytes + encoded pk (+ encoded sk if the table has one)."""
    encoded_pk = encode_key_value(partition_key)
    key = hash64(encoded_pk).to_bytes(HASH_BYTES, "big") + encoded_pk
    if sort_key is not None:
        key += encode_key_value(sort_key)
    return key


def successor(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string that starts with `prefix`.

    None when there is none (the prefix is all 0xff bytes), meaning "no upper bound".
    """
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


# Decoding ---------------------------------------------------------------------------------------


def _corrupt(data: bytes, offset: int, what: str) -> InternalServerError:
    return InternalServerError(f"Corrupt encoded key at byte {offset} of {data.hex()}: {what}")


def _unescape(data: bytes, offset: int) -> tuple[bytes, int]:
    parts = []
    position = offset
    while True:
        zero = data.find(b"\x00", position)
        if zero < 0 or zero + 1 >= len(data):
            raise _corrupt(data, offset, "unterminated string or binary")
        parts.append(data[position:zero])
        marker = data[zero + 1]
        if marker == _TERMINATOR[1]:
            return b"\x00".join(parts), zero + 2
        if marker != _ESCAPE[1]:
            raise _corrupt(data, zero, "bad escape")
        position = zero + 2


def _decode_number(data: bytes, offset: int) -> tuple[str, int]:
    if offset >= len(data):
        raise _corrupt(data, offset, "missing number")
    sign_byte = data[offset]
    if sign_byte == _ZERO:
        return "0", offset + 1
    if sign_byte not in (_NEGATIVE, _POSITIVE):
        raise _corrupt(data, offset, "bad number sign")
    negative = sign_byte == _NEGATIVE
    end = data.find(0xFF if negative else _DIGITS_END, offset + 2)
    if end < 0:
        raise _corrupt(data, offset, "unterminated number")
    body = data[offset + 1 : end]
    if negative:
        body = bytes(0xFF - b for b in body)
    digits: list[int] = []
    for pair in body[1:]:
        if not 1 <= pair <= 100:
            raise _corrupt(data, offset, "bad digit pair")
        digits.extend(divmod(pair - 1, 10))
    while digits and digits[-1] == 0:
        digits.pop()
    if not digits:
        raise _corrupt(data, offset, "number without digits")
    exponent = body[0] + _EXPONENT_MIN - len(digits)
    number = Decimal((1 if negative else 0, tuple(digits), exponent))
    return format_number(number), end + 1


def decode_key_value(data: bytes, offset: int, type_tag: str) -> tuple[AttributeValue, int]:
    """Decode the `type_tag` value at `offset`; return it, normalised, and the next offset."""
    if type_tag == "S":
        raw, offset = _unescape(data, offset)
        try:
            return {"S": raw.decode("utf-8")}, offset
        except UnicodeDecodeError:
            raise _corrupt(data, offset, "string is not UTF-8") from None
    if type_tag == "N":
        text, offset = _decode_number(data, offset)
        return {"N": text}, offset
    if type_tag == "B":
        raw, offset = _unescape(data, offset)
        return {"B": base64.b64encode(raw).decode("ascii")}, offset
    raise InternalServerError(f"A key value must be of type S, N or B, not {type_tag}")


def decode_storage_key(
    data: bytes, hash_type: str, range_type: str | None
) -> tuple[AttributeValue, AttributeValue | None]:
    """The (partition key, sort key or None) of a storage key made by `encode_storage_key`."""
    partition_key, offset = decode_key_value(data, HASH_BYTES, hash_type)
    sort_key = None
    if range_type is not None:
        sort_key, offset = decode_key_value(data, offset, range_type)
    if offset != len(data):
        raise _corrupt(data, offset, "trailing bytes after the key")
    return partition_key, sort_key
