"""Condition and filter expressions: every comparator, function and type rule, and their errors."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from core import expressions
from core.errors import SerializationError, ValidationError


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


ITEM: dict[str, Any] = {
    "pk": {"S": "p1"},
    "n": {"N": "10"},
    "neg": {"N": "-2.5"},
    "s": {"S": "hello world"},
    "e": {"S": "é"},
    "b": {"B": b64(b"\x00\xffabc")},
    "t": {"BOOL": True},
    "z": {"NULL": True},
    "ss": {"SS": ["a", "b"]},
    "ns": {"NS": ["1", "2"]},
    "bs": {"BS": [b64(b"x"), b64(b"y")]},
    "l": {"L": [{"S": "a"}, {"N": "1"}, {"M": {"k": {"S": "v"}}}]},
    "m": {"M": {"k": {"S": "v"}, "nest": {"M": {"deep": {"N": "3"}}}, "lst": {"L": [{"S": "x"}]}}},
}

VALUES: dict[str, Any] = {
    ":n5": {"N": "5"},
    ":n10": {"N": "10.0"},
    ":n9": {"N": "9"},
    ":s": {"S": "hello world"},
    ":hello": {"S": "hello"},
    ":world": {"S": "world"},
    ":abc": {"S": "abc"},
    ":a": {"S": "a"},
    ":one": {"N": "1"},
    ":b": {"B": b64(b"\x00\xffabc")},
    ":bprefix": {"B": b64(b"\x00\xff")},
    ":bpart": {"B": b64(b"ab")},
    ":bx": {"B": b64(b"x")},
    ":t": {"BOOL": True},
    ":null": {"NULL": True},
    ":ss": {"SS": ["b", "a"]},
    ":l": {"L": [{"S": "a"}, {"N": "1.0"}, {"M": {"k": {"S": "v"}}}]},
    ":m": {"M": {"k": {"S": "v"}}},
    ":sub": {"S": "v"},
}


def holds(
    text: str, item: dict[str, Any] | None = ITEM, names: dict[str, str] | None = None
) -> bool:
    used = expressions.parse_cached("condition", text)
    assert not isinstance(used, str), used
    values = {key: VALUES[key] for key in used.values_used} or None
    return expressions.condition(text, names, values).evaluate(item)


def error(
    text: str, names: dict[str, str] | None = None, values: dict[str, Any] | None = None
) -> str:
    with pytest.raises(ValidationError) as raised:
        expressions.condition(text, names, values)
    return raised.value.message


# Comparators ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n = :n10", True),  # numbers compare numerically: 10 == 10.0
        ("n <> :n10", False),
        ("n > :n9", True),  # not as text, where "10" < "9"
        ("n >= :n10", True),
        ("n < :n5", False),
        ("n <= :n10", True),
        ("neg < :one", True),
        (":n5 < n", True),  # a constant on the left
        (":n9 >= n", False),
        ("s = :s", True),
        ("s > :hello", True),
        ("s < :world", True),
        ("e > :s", True),  # code point (UTF-8 byte) order, not locale order
        ("b = :b", True),
        ("b > :bprefix", True),  # a proper prefix sorts first
        ("b < :bx", True),  # bytes compare unsigned
        ("t = :t", True),
        ("z = :null", True),
        ("ss = :ss", True),  # sets are equal regardless of order
        ("l = :l", True),  # lists compare deeply, numbers numerically
        ("m.k = :sub", True),
        ("m = :m", False),
        ("l[2] = :m", True),
    ],
)
def test_comparisons(text: str, expected: bool) -> None:
    assert holds(text) is expected


@pytest.mark.parametrize(
    "text",
    ["n = :s", "n < :s", "n >= :s", "s > :n5", "b < :s", "ss = :a", "n = :one", "t < :n5"],
)
def test_comparing_different_or_unordered_types_is_false(text: str) -> None:
    assert holds(text) is False


@pytest.mark.parametrize(
    ("text", "operator", "operand_type"),
    [
        ("n < :t", "<", "BOOL"),
        ("n <= :null", "<=", "NULL"),
        (":ss > n", ">", "SS"),
        ("n >= :l", ">=", "L"),
        ("size(n) > :m", ">", "M"),
        ("n BETWEEN :l AND :l", "BETWEEN", "L"),
        ("n BETWEEN :n5 AND :t", "BETWEEN", "BOOL"),
        (":m BETWEEN n AND s", "BETWEEN", "M"),
    ],
)
def test_ordering_a_constant_without_an_order_is_refused(
    text: str, operator: str, operand_type: str
) -> None:
    # An attribute's type is known only per item (false when unordered); a constant's is known
    # before any item is read, and DynamoDB refuses it rather than failing the condition.
    used = expressions.parse_cached("condition", text)
    assert not isinstance(used, str)
    values = {key: VALUES[key] for key in used.values_used}
    assert error(text, values=values) == PREFIX + (
        "Incorrect operand type for operator or function; "
        f"operator or function: {operator}, operand type: {operand_type}"
    )


@pytest.mark.parametrize("text", ["n <> :s", "ss <> :a", "t <> :null"])
def test_not_equal_is_true_across_types(text: str) -> None:
    assert holds(text) is True


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("absent = :n5", False),
        ("absent < :n5", False),
        ("absent >= :n5", False),
        ("absent <> :n5", True),  # <> is the negation of =
        ("m.nope = :sub", False),
        ("l[9] = :a", False),
        ("s.x = :a", False),  # a path through a non-map
        ("m[0] = :a", False),  # an index into a non-list
        ("absent BETWEEN :n5 AND :n10", False),
        ("absent IN (:n5)", False),
    ],
)
def test_absent_attributes(text: str, expected: bool) -> None:
    assert holds(text) is expected


def test_comparing_two_paths() -> None:
    item = {"x": {"N": "3"}, "y": {"N": "4"}, "u": {"S": "3"}}
    assert expressions.condition("x < y").evaluate(item)
    assert not expressions.condition("x = u").evaluate(item)
    assert expressions.condition("x <> u").evaluate(item)
    assert not expressions.condition("x < absent").evaluate(item)
    assert expressions.condition("size(x2) <> y").evaluate(item)


def test_between_is_inclusive_and_typed() -> None:
    assert holds("n BETWEEN :n5 AND :n10")
    assert holds("n BETWEEN :n10 AND :n10")
    assert not holds("n BETWEEN :n5 AND :n9")
    assert holds("s BETWEEN :hello AND :world")
    assert not holds("s BETWEEN :n5 AND :n10")
    assert expressions.condition("x BETWEEN y AND w").evaluate(
        {"x": {"N": "2"}, "y": {"N": "1"}, "w": {"N": "3"}}
    )
    assert not expressions.condition("x BETWEEN y AND w").evaluate(
        {"x": {"N": "2"}, "y": {"N": "1"}}
    )


def test_in() -> None:
    assert holds("n IN (:n5, :n10)")
    assert not holds("n IN (:n5, :n9)")
    assert holds("ss IN (:a, :ss)")
    assert holds("s IN (:a, s)")
    assert not holds("n IN (:s)")


# Logical operators ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("n = :n10 AND s = :s", True),
        ("n = :n10 AND s = :a", False),
        ("n = :n5 OR s = :s", True),
        ("n = :n5 OR s = :a", False),
        ("NOT n = :n5", True),
        ("NOT (n = :n10 AND s = :s)", False),
        ("n = :n5 OR s = :s AND t = :t", True),
        ("(n = :n5 OR s = :s) AND t = :null", False),
        ("NOT NOT attribute_exists(n)", True),
    ],
)
def test_logical_operators(text: str, expected: bool) -> None:
    assert holds(text) is expected


# Functions --------------------------------------------------------------------------------------


def test_attribute_exists_and_not_exists() -> None:
    assert holds("attribute_exists(n)")
    assert holds("attribute_exists(m.nest.deep)")
    assert holds("attribute_exists(l[2].k)")
    assert holds("attribute_exists(z)")  # a NULL value exists
    assert not holds("attribute_exists(l[3])")
    assert holds("attribute_not_exists(absent)")
    assert holds("attribute_not_exists(m.nest.nope)")
    assert not holds("attribute_not_exists(#k)", names={"#k": "pk"})


def test_no_item_is_an_empty_item() -> None:
    assert holds("attribute_not_exists(pk)", item=None)
    assert not holds("attribute_exists(pk)", item=None)
    assert not holds("pk = :a", item=None)


@pytest.mark.parametrize(
    ("attribute", "type_name"),
    [
        ("n", "N"),
        ("s", "S"),
        ("b", "B"),
        ("t", "BOOL"),
        ("z", "NULL"),
        ("ss", "SS"),
        ("ns", "NS"),
        ("bs", "BS"),
        ("l", "L"),
        ("m", "M"),
    ],
)
def test_attribute_type(attribute: str, type_name: str) -> None:
    check = expressions.condition(
        f"attribute_type({attribute}, :t)", None, {":t": {"S": type_name}}
    )
    assert check.evaluate(ITEM)
    other = "S" if type_name != "S" else "N"
    assert not expressions.condition(
        f"attribute_type({attribute}, :t)", None, {":t": {"S": other}}
    ).evaluate(ITEM)
    assert not expressions.condition(
        "attribute_type(absent, :t)", None, {":t": {"S": type_name}}
    ).evaluate(ITEM)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("begins_with(s, :hello)", True),
        ("begins_with(s, :world)", False),
        ("begins_with(s, :s)", True),
        ("begins_with(b, :bprefix)", True),
        ("begins_with(b, :bpart)", False),
        ("begins_with(n, :a)", False),
        ("begins_with(ss, :a)", False),
        ("begins_with(absent, :a)", False),
        ("begins_with(s, pk)", False),
    ],
)
def test_begins_with(text: str, expected: bool) -> None:
    assert holds(text) is expected


def test_begins_with_two_paths() -> None:
    item = {"x": {"S": "abc"}, "y": {"S": "ab"}, "bx": {"B": b64(b"abc")}, "b2": {"B": b64(b"a")}}
    assert expressions.condition("begins_with(x, y)").evaluate(item)
    assert expressions.condition("begins_with(bx, b2)").evaluate(item)
    assert not expressions.condition("begins_with(x, b2)").evaluate(item)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("contains(s, :world)", True),  # substring
        ("contains(s, :abc)", False),
        ("contains(b, :bpart)", True),  # byte subsequence
        ("contains(b, :bx)", False),
        ("contains(ss, :a)", True),  # set member
        ("contains(ss, :abc)", False),
        ("contains(ns, :one)", True),
        ("contains(ns, :a)", False),  # a string is never a member of a number set
        ("contains(bs, :bx)", True),
        ("contains(l, :a)", True),  # list element
        ("contains(l, :one)", True),
        ("contains(l, :m)", True),  # list elements compare deeply
        ("contains(l, :n5)", False),
        ("contains(m, :sub)", False),  # maps contain nothing
        ("contains(n, :one)", False),
        ("contains(absent, :a)", False),
    ],
)
def test_contains(text: str, expected: bool) -> None:
    assert holds(text) is expected


@pytest.mark.parametrize(
    ("attribute", "size"),
    [("s", 11), ("e", 1), ("b", 5), ("ss", 2), ("ns", 2), ("bs", 2), ("l", 3), ("m", 3)],
)
def test_size(attribute: str, size: int) -> None:
    check = expressions.condition(f"size({attribute}) = :n", None, {":n": {"N": str(size)}})
    assert check.evaluate(ITEM)


@pytest.mark.parametrize("attribute", ["n", "t", "z", "absent"])
def test_size_of_types_without_a_size_compares_as_absent(attribute: str) -> None:
    check = expressions.condition(f"size({attribute}) >= :n", None, {":n": {"N": "0"}})
    assert not check.evaluate(ITEM)


def test_size_as_any_operand() -> None:
    assert holds("size(s) > :n10")
    assert holds(":n5 < size(s)")
    assert holds("size(s) BETWEEN :n10 AND size(s)")
    assert holds("size(l) IN (:n5, size(l))")
    assert holds("contains(ns, size(ss))")
    assert holds("size(m.lst) = :one")


# Errors -----------------------------------------------------------------------------------------

PREFIX = "Invalid ConditionExpression: "


def test_unknown_function() -> None:
    assert (
        error("ATTRIBUTE_EXISTS(a)") == PREFIX + "Invalid function name; function: ATTRIBUTE_EXISTS"
    )
    assert (
        error("if_not_exists(a, b) = c")
        == PREFIX + "The function is not allowed in a condition expression; function: if_not_exists"
    )
    assert (
        error("list_append(a, b)")
        == PREFIX + "The function is not allowed in a condition expression; function: list_append"
    )


@pytest.mark.parametrize(
    ("text", "function"),
    [
        ("size(a)", "size"),
        ("attribute_exists(a) = :v", "attribute_exists"),
        ("a = contains(b, :v)", "contains"),
        ("size(begins_with(a, :v)) = :v", "begins_with"),
        ("a IN (attribute_type(a, :v))", "attribute_type"),
    ],
)
def test_functions_used_where_not_allowed(text: str, function: str) -> None:
    assert error(text, None, {":v": {"S": "x"}}) == PREFIX + (
        f"The function is not allowed to be used this way in an expression; function: {function}"
    )


@pytest.mark.parametrize(
    ("text", "function", "count"),
    [
        ("size(a, b) = :v", "size", 2),
        ("attribute_exists(a, b)", "attribute_exists", 2),
        ("attribute_not_exists(a, b, c)", "attribute_not_exists", 3),
        ("begins_with(a)", "begins_with", 1),
        ("contains(a, b, c)", "contains", 3),
        ("attribute_type(a)", "attribute_type", 1),
    ],
)
def test_wrong_number_of_operands(text: str, function: str, count: int) -> None:
    assert error(text, None, {":v": {"N": "1"}}) == PREFIX + (
        "Incorrect number of operands for operator or function; "
        f"operator or function: {function}, number of operands: {count}"
    )


def test_functions_requiring_a_path() -> None:
    for function in ("attribute_exists", "attribute_not_exists"):
        assert error(f"{function}(:v)", None, {":v": {"S": "a"}}) == PREFIX + (
            f"Operator or function requires a document path; operator or function: {function}"
        )


@pytest.mark.parametrize(
    ("text", "value", "message"),
    [
        (
            "begins_with(a, :v)",
            {"N": "1"},
            "Incorrect operand type for operator or function; operator or function: begins_with, "
            "operand type: N",
        ),
        (
            "begins_with(:v, a)",
            {"SS": ["x"]},
            "Incorrect operand type for operator or function; operator or function: begins_with, "
            "operand type: SS",
        ),
        (
            "begins_with(a, size(b))",
            {"S": "x"},
            "Incorrect operand type for operator or function; operator or function: begins_with, "
            "operand type: N",
        ),
        (
            "size(:v) = a",
            {"BOOL": False},
            "Incorrect operand type for operator or function; operator or function: size, "
            "operand type: BOOL",
        ),
        (
            "size(size(a)) = :v",
            {"N": "1"},
            "Incorrect operand type for operator or function; operator or function: size, "
            "operand type: N",
        ),
        (
            "attribute_type(a, :v)",
            {"N": "1"},
            "Incorrect operand type for operator or function; operator or function: "
            "attribute_type, operand type: N",
        ),
        (
            "attribute_type(a, b) OR a = :v",
            {"N": "1"},
            "Incorrect operand type for operator or function; operator or function: "
            "attribute_type, operand type: {NS,SS,L,BS,N,M,B,BOOL,NULL,S}",
        ),
        (
            "attribute_type(a, :v)",
            {"S": "STRING"},
            "Invalid attribute type name found; type: STRING, "
            "valid types: {B,NULL,SS,BOOL,L,BS,N,NS,S,M}",
        ),
    ],
)
def test_operand_types_of_functions(text: str, value: dict[str, Any], message: str) -> None:
    assert error(text, None, {":v": value}) == PREFIX + message


@pytest.mark.parametrize(
    ("text", "operator", "path"),
    [
        ("a = a", "=", "[a]"),
        ("a.b[1] >= #x.b[1]", ">=", "[a, b, [1]]"),
        ("contains(a, a)", "contains", "[a]"),
        ("begins_with(#x, a)", "begins_with", "[a]"),
    ],
)
def test_operands_must_be_distinct(text: str, operator: str, path: str) -> None:
    assert error(text, {"#x": "a"}) == PREFIX + (
        "The first operand must be distinct from the remaining operands for this operator or "
        f"function; operator: {operator}, first operand: {path}"
    )


def test_between_bounds() -> None:
    assert error(
        "a BETWEEN :lo AND :hi", None, {":lo": {"N": "1"}, ":hi": {"S": "a"}}
    ) == PREFIX + (
        "The BETWEEN operator requires same data type for lower and upper bounds; "
        "lower bound operand: AttributeValue: {N:1}, upper bound operand: AttributeValue: {S:a}"
    )
    assert error(
        "a BETWEEN :lo AND :hi", None, {":lo": {"S": "b"}, ":hi": {"S": "a"}}
    ) == PREFIX + (
        "The BETWEEN operator requires upper bound to be greater than or equal to lower bound; "
        "lower bound operand: AttributeValue: {S:b}, upper bound operand: AttributeValue: {S:a}"
    )
    expressions.condition("a BETWEEN :lo AND :lo", None, {":lo": {"N": "1"}})


def test_undefined_placeholders() -> None:
    assert error("#a = :v", {"#b": "b"}, {":v": {"S": "x"}}) == PREFIX + (
        "An expression attribute name used in the document path is not defined; attribute name: #a"
    )
    assert error("a = :v", None, None) == PREFIX + (
        "An expression attribute value used in expression is not defined; attribute value: :v"
    )
    assert error("a = :w OR #a = :v", None, {":v": {"S": "x"}}).endswith("attribute value: :w")


def test_filter_expression_prefix() -> None:
    with pytest.raises(ValidationError) as raised:
        expressions.condition("a = :v", kind="FilterExpression")
    assert raised.value.message.startswith(
        "Invalid FilterExpression: An expression attribute value"
    )


@pytest.mark.parametrize(
    ("text", "names", "values", "expected"),
    [
        # Unknown functions outrank misused ones, which outrank reserved words, ...
        ("size(a) AND foo(b)", None, None, "Invalid function name; function: foo"),
        ("size(a) AND status = :v", None, None, "not allowed to be used this way"),
        ("status = :undefined", None, None, "reserved keyword: status"),
        # ... which outrank undefined placeholders, then arity, distinct operands and types.
        ("size(a, b) = :undefined", None, None, "attribute value: :undefined"),
        ("a = a AND size(a, b) = :v", None, {":v": {"N": "1"}}, "number of operands: 2"),
        ("begins_with(a, :v) AND b = b", None, {":v": {"N": "1"}}, "first operand: [b]"),
        # Redundant parentheses outrank everything but syntax.
        ("((foo(a)))", None, None, "redundant parentheses"),
    ],
)
def test_errors_are_reported_in_dynamodb_order(
    text: str, names: dict[str, str] | None, values: dict[str, Any] | None, expected: str
) -> None:
    assert expected in error(text, names, values)


def test_invalid_expression_attribute_value() -> None:
    assert error("a = :v", None, {":v": {"N": "abc"}}) == (
        "ExpressionAttributeValues contains invalid value: The parameter cannot be converted to a "
        "numeric value: abc for key :v"
    )
    with pytest.raises(SerializationError):
        expressions.condition("a = :v", None, {":v": "plain"})
    with pytest.raises(SerializationError):
        expressions.condition("a = :v", None, [":v"])  # type: ignore[arg-type]


def test_empty_attribute_name() -> None:
    assert error("#a = :v", {"#a": ""}, {":v": {"S": "x"}}) == (
        "ExpressionAttributeNames contains invalid value: Empty attribute name for key #a"
    )


def test_compiled_condition_metadata() -> None:
    check = expressions.condition(
        "#a.b = :x AND size(c[0]) > :y OR attribute_exists(d)",
        {"#a": "alpha"},
        {":x": {"S": "x"}, ":y": {"N": "1"}},
    )
    assert check.names_used == {"#a"}
    assert check.values_used == {":x", ":y"}
    assert check.top_level_attributes == {"alpha", "c", "d"}
    assert check.kind == "ConditionExpression"


def test_values_are_normalised_before_comparing() -> None:
    check = expressions.condition("n = :v", None, {":v": {"N": "010.00"}})
    assert check.evaluate({"n": {"N": "10"}})
    # Long number texts take the unmemoised path, with the same result.
    long_text = "0" * 80 + "10.000"
    assert expressions.condition("n = :v", None, {":v": {"N": long_text}}).evaluate(
        {"n": {"N": "10"}}
    )
    assert error("n = :v", None, {":v": {"N": "1" * 39}}) == (
        "ExpressionAttributeValues contains invalid value: Attempting to store more than 38 "
        "significant digits in a Number for key :v"
    )
