"""Property tests: numbers against Python's decimal, and the key encoding against DynamoDB's order.

Numbers are drawn across DynamoDB's whole range (38 significant digits, 1E-130 to 9.99...E+125) and
written in many textual forms; the key encoding is checked to sort exactly as DynamoDB sorts keys
(String by UTF-8 bytes, Number numerically, Binary by unsigned bytes), alone and as (pk, sk) tuples.
Example counts are bounded so the whole file runs in a few seconds.
"""

from __future__ import annotations

import base64
from collections.abc import Callable
from decimal import Context, Decimal, Inexact
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import limits
from core.errors import ValidationError
from core.keycodec import decode_key_value, decode_storage_key, encode_key_value, encode_storage_key
from core.values import add_numbers, normalize_number, subtract_numbers

EXAMPLES = 300

# E of 0.d1d2... x 10^E for the smallest and largest valid magnitudes.
EXPONENT_MIN = -129
EXPONENT_MAX = 126

# Decimal arithmetic "at 38 digits", with exponent bounds wide enough never to clamp.
DYNAMO_CONTEXT = Context(prec=limits.NUMBER_PRECISION_DIGITS_MAX, Emax=10_000, Emin=-10_000)


def _decimal(sign: int, digits: list[int], scientific_exponent: int) -> Decimal:
    return Decimal((sign, tuple(digits), scientific_exponent - len(digits)))


@st.composite
def decimals(
    draw: st.DrawFn,
    max_digits: int = limits.NUMBER_PRECISION_DIGITS_MAX,
    exponents: tuple[int, int] = (EXPONENT_MIN, EXPONENT_MAX),
) -> Decimal:
    """A valid DynamoDB number (zero included) as an exact Decimal."""
    if draw(st.integers(0, 30)) == 0:
        return Decimal(0)
    count = draw(st.integers(1, max_digits))
    rest = draw(st.lists(st.integers(0, 9), min_size=count - 1, max_size=count - 1))
    digits = [draw(st.integers(1, 9)), *rest]
    return _decimal(draw(st.integers(0, 1)), digits, draw(st.integers(*exponents)))


# Narrow numbers often share exponents, so their sums are often exact; wide ones cover the range.
numbers = st.one_of(decimals(), decimals(max_digits=12, exponents=(-6, 6)))


@st.composite
def number_texts(draw: st.DrawFn) -> tuple[str, Decimal]:
    """A valid number and one of the many ways a client may write it."""
    number = draw(numbers)
    sign, digits, exponent = number.as_tuple()
    assert isinstance(exponent, int)
    coefficient = "".join(map(str, digits))
    form = draw(st.sampled_from(["plain", "scientific", "padded", "coefficient"]))
    if form == "plain":
        text = format(number, "f")
    elif form == "scientific":
        text = format(number, "E")
    elif form == "padded":
        zeros = draw(st.integers(1, 5))
        text = "0" * zeros + format(number.copy_abs(), "f") + (".000" if exponent >= 0 else "00")
        text = ("-" if sign else draw(st.sampled_from(["", "+"]))) + text
    else:
        text = f"{'-' if sign else ''}{coefficient}{draw(st.sampled_from('eE'))}{exponent}"
    return text, number


def _is_canonical(text: str) -> bool:
    body = text.removeprefix("-")
    if text == "0":
        return True
    if "e" in body.lower() or body.startswith("+") or body == "0":
        return False
    integer, _, fraction = body.partition(".")
    return (integer == "0" or not integer.startswith("0")) and not fraction.endswith("0")


@settings(max_examples=EXAMPLES)
@given(number_texts())
def test_normalisation_keeps_the_value_and_is_canonical(case: tuple[str, Decimal]) -> None:
    text, number = case
    canonical = normalize_number(text)
    assert Decimal(canonical) == number
    assert _is_canonical(canonical), canonical
    assert normalize_number(canonical) == canonical


@settings(max_examples=EXAMPLES)
@given(
    st.integers(limits.NUMBER_PRECISION_DIGITS_MAX + 1, 80),
    st.integers(EXPONENT_MIN, EXPONENT_MAX),
    st.integers(0, 1),
    st.data(),
)
def test_more_than_38_significant_digits_is_rejected(
    count: int, exponent: int, sign: int, data: st.DataObject
) -> None:
    middle = data.draw(st.lists(st.integers(0, 9), min_size=count - 2, max_size=count - 2))
    digits = [data.draw(st.integers(1, 9)), *middle, data.draw(st.integers(1, 9))]
    with pytest.raises(ValidationError, match="more than 38 significant digits"):
        normalize_number(format(_decimal(sign, digits, exponent), "E"))


@settings(max_examples=EXAMPLES)
@given(
    st.one_of(st.integers(EXPONENT_MAX + 1, 10_000), st.integers(-10_000, EXPONENT_MIN - 1)),
    st.lists(st.integers(1, 9), min_size=1, max_size=38),
    st.integers(0, 1),
)
def test_out_of_range_is_rejected(exponent: int, digits: list[int], sign: int) -> None:
    expected = "overflow" if exponent > EXPONENT_MAX else "underflow"
    with pytest.raises(ValidationError, match=f"Number {expected}"):
        normalize_number(format(_decimal(sign, digits, exponent), "E"))


def _check_against_decimal(result: Decimal, actual: str | ValidationError) -> None:
    """`actual` is what dynalab returned (or raised) for an operation whose 38-digit result is
    `result`, computed with DYNAMO_CONTEXT whose flags were cleared beforehand."""
    inexact = DYNAMO_CONTEXT.flags[Inexact]
    magnitude = result.copy_abs()
    in_range = result.is_zero() or (
        limits.NUMBER_MAGNITUDE_MIN <= magnitude <= limits.NUMBER_MAGNITUDE_MAX
    )
    if inexact or not in_range:
        assert isinstance(actual, ValidationError), (result, actual)
    else:
        assert isinstance(actual, str), (result, actual)
        assert Decimal(actual) == result
        assert _is_canonical(actual)


def _run(operation: Callable[[str, str], str], a: str, b: str) -> str | ValidationError:
    try:
        return operation(a, b)
    except ValidationError as error:
        return error


@settings(max_examples=EXAMPLES)
@given(numbers, numbers)
def test_add_and_subtract_match_decimal_at_38_digits(a: Decimal, b: Decimal) -> None:
    text_a, text_b = normalize_number(format(a, "E")), normalize_number(format(b, "E"))
    DYNAMO_CONTEXT.clear_flags()
    _check_against_decimal(DYNAMO_CONTEXT.add(a, b), _run(add_numbers, text_a, text_b))
    DYNAMO_CONTEXT.clear_flags()
    _check_against_decimal(DYNAMO_CONTEXT.subtract(a, b), _run(subtract_numbers, text_a, text_b))


# Key encoding ----------------------------------------------------------------------------------


def _sign(x: int) -> int:
    return (x > 0) - (x < 0)


def _cmp(a: Any, b: Any) -> int:
    return _sign((a > b) - (a < b))


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


@settings(max_examples=EXAMPLES)
@given(st.text(), st.text())
def test_string_encoding_order_and_round_trip(a: str, b: str) -> None:
    ea, eb = encode_key_value({"S": a}), encode_key_value({"S": b})
    assert _cmp(ea, eb) == _cmp(a.encode("utf-8"), b.encode("utf-8"))
    assert decode_key_value(ea, 0, "S") == ({"S": a}, len(ea))


@settings(max_examples=EXAMPLES)
@given(numbers, numbers)
def test_number_encoding_order_and_round_trip(a: Decimal, b: Decimal) -> None:
    va, vb = {"N": normalize_number(format(a, "E"))}, {"N": normalize_number(format(b, "E"))}
    ea, eb = encode_key_value(va), encode_key_value(vb)
    assert _cmp(ea, eb) == _cmp(a, b)
    assert decode_key_value(ea, 0, "N") == (va, len(ea))


@settings(max_examples=EXAMPLES)
@given(st.binary(max_size=40), st.binary(max_size=40))
def test_binary_encoding_order_and_round_trip(a: bytes, b: bytes) -> None:
    ea, eb = encode_key_value({"B": _b64(a)}), encode_key_value({"B": _b64(b)})
    assert _cmp(ea, eb) == _cmp(a, b)
    assert decode_key_value(ea, 0, "B") == ({"B": _b64(a)}, len(ea))


@settings(max_examples=EXAMPLES)
@given(st.text(max_size=8), numbers, st.text(max_size=8), numbers)
def test_concatenated_pk_sk_sort_as_tuples(
    pk_a: str, sk_a: Decimal, pk_b: str, sk_b: Decimal
) -> None:
    key_a = encode_key_value({"S": pk_a}) + encode_key_value({"N": format(sk_a, "E")})
    key_b = encode_key_value({"S": pk_b}) + encode_key_value({"N": format(sk_b, "E")})
    assert _cmp(key_a, key_b) == _cmp((pk_a.encode("utf-8"), sk_a), (pk_b.encode("utf-8"), sk_b))


@settings(max_examples=EXAMPLES)
@given(st.binary(max_size=6), st.binary(max_size=6), st.binary(max_size=6), st.binary(max_size=6))
def test_concatenated_binary_tuples_sort_as_tuples(
    pk_a: bytes, sk_a: bytes, pk_b: bytes, sk_b: bytes
) -> None:
    # Short binaries full of zero bytes are where an escaping scheme would break tuple order.
    def key(pk: bytes, sk: bytes) -> bytes:
        return encode_key_value({"B": _b64(pk)}) + encode_key_value({"B": _b64(sk)})

    assert _cmp(key(pk_a, sk_a), key(pk_b, sk_b)) == _cmp((pk_a, sk_a), (pk_b, sk_b))


@settings(max_examples=EXAMPLES)
@given(numbers, st.binary(max_size=20), st.text(max_size=20))
def test_storage_key_round_trip(pk: Decimal, sk_bytes: bytes, text: str) -> None:
    number = {"N": normalize_number(format(pk, "E"))}
    binary = {"B": _b64(sk_bytes)}
    string = {"S": text}
    assert decode_storage_key(encode_storage_key(number, binary), "N", "B") == (number, binary)
    assert decode_storage_key(encode_storage_key(string, number), "S", "N") == (string, number)
    assert decode_storage_key(encode_storage_key(binary, None), "B", None) == (binary, None)
