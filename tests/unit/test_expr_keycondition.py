"""Key condition expressions and range conditions, with DynamoDB's messages for what is rejected."""

from __future__ import annotations

from typing import Any

import pytest

from core import expressions
from core.errors import ValidationError
from core.expressions import RangeCondition

VALUES: dict[str, Any] = {
    ":h": {"S": "hash"},
    ":a": {"S": "a"},
    ":b": {"S": "b"},
    ":n": {"N": "1"},
    ":t": {"BOOL": True},
    ":ss": {"SS": ["x"]},
}


def key(
    text: str, range_key: str | None = "sk", names: dict[str, str] | None = None, **types: str
) -> expressions.KeyCondition:
    parsed = expressions.parse_cached("condition", text)
    used = {k: VALUES[k] for k in parsed.values_used} if not isinstance(parsed, str) else None
    return expressions.key_condition(
        text,
        names,
        used or None,
        "pk",
        range_key,
        hash_type=types.get("hash_type"),
        range_type=types.get("range_type"),
    )


def key_error(text: str, range_key: str | None = "sk", **types: str) -> str:
    with pytest.raises(ValidationError) as raised:
        key(text, range_key, **types)
    return raised.value.message


def test_partition_key_only() -> None:
    condition = key("pk = :h")
    assert condition.hash_value == {"S": "hash"}
    assert condition.range is None
    assert condition.values_used == {":h"}


@pytest.mark.parametrize(
    ("text", "op", "values"),
    [
        ("pk = :h AND sk = :a", "=", [{"S": "a"}]),
        ("pk = :h AND sk < :a", "<", [{"S": "a"}]),
        ("pk = :h AND sk <= :a", "<=", [{"S": "a"}]),
        ("pk = :h AND sk > :a", ">", [{"S": "a"}]),
        ("pk = :h AND sk >= :a", ">=", [{"S": "a"}]),
        ("pk = :h AND sk BETWEEN :a AND :b", "BETWEEN", [{"S": "a"}, {"S": "b"}]),
        ("pk = :h AND begins_with(sk, :a)", "begins_with", [{"S": "a"}]),
        # Either order, and a value on the left flips the comparison.
        ("sk > :a AND pk = :h", ">", [{"S": "a"}]),
        ("pk = :h AND :a < sk", ">", [{"S": "a"}]),
        ("(:h = #p) AND (:a >= sk)", "<=", [{"S": "a"}]),
    ],
)
def test_sort_key_conditions(text: str, op: str, values: list[dict[str, Any]]) -> None:
    condition = key(text, names={"#p": "pk"} if "#p" in text else None)
    assert condition.hash_value == {"S": "hash"}
    assert condition.range == RangeCondition(op, values)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("pk = :h OR sk = :a", "Invalid operator used in KeyConditionExpression: OR"),
        ("NOT pk = :h", "Invalid operator used in KeyConditionExpression: NOT"),
        ("pk IN (:h)", "Invalid operator used in KeyConditionExpression: IN"),
        ("pk <> :h", "Invalid operator used in KeyConditionExpression: <>"),
        (
            "attribute_exists(pk)",
            "Invalid operator used in KeyConditionExpression: attribute_exists",
        ),
        (
            "pk = :h AND attribute_not_exists(sk)",
            "Invalid operator used in KeyConditionExpression: attribute_not_exists",
        ),
        (
            "pk = :h AND contains(sk, :a)",
            "Invalid operator used in KeyConditionExpression: contains",
        ),
        ("pk = :h AND size(sk) > :n", "KeyConditionExpressions cannot contain nested operations"),
        (
            ":a BETWEEN sk AND :b AND pk = :h",
            "Invalid condition in KeyConditionExpression: BETWEEN operator must have the key "
            "attribute as its first operand",
        ),
        (
            "begins_with(:a, sk) AND pk = :h",
            "Invalid condition in KeyConditionExpression: begins_with operator must have the key "
            "attribute as its first operand",
        ),
        (
            "pk = sk",
            "Invalid condition in KeyConditionExpression: "
            "Multiple attribute names used in one condition",
        ),
        ("pk.x = :h", "KeyConditionExpressions cannot have conditions on nested attributes"),
        ("pk[0] = :h", "KeyConditionExpressions cannot have conditions on nested attributes"),
        (":h = :a", "Invalid condition in KeyConditionExpression: No key attribute specified"),
        ("pk = :h AND pk = :a", "KeyConditionExpressions must only contain one condition per key"),
        (
            "pk = :h AND sk > :a AND sk < :b",
            "KeyConditionExpressions must only contain one condition per key",
        ),
        (
            "pk = :h AND sk < :t",
            "One or more parameter values were invalid: "
            "ComparisonOperator LT is not valid for BOOL AttributeValue type",
        ),
        (
            "pk = :t",
            "One or more parameter values were invalid: "
            "ComparisonOperator EQ is not valid for BOOL AttributeValue type",
        ),
        (
            "pk = :h AND sk > :ss",
            "One or more parameter values were invalid: "
            "ComparisonOperator GT is not valid for SS AttributeValue type",
        ),
        ("pk = :h AND sk = :a AND x = :b", "Conditions can be of length 1 or 2 only"),
        ("pk = :h AND x = :a", "Query condition missed key schema element: sk"),
        ("sk = :a", "Query condition missed key schema element: pk"),
        ("x = :a", "Query condition missed key schema element: pk"),
        ("pk > :h", "Query key condition not supported"),
        ("begins_with(pk, :h)", "Query key condition not supported"),
        ("pk BETWEEN :a AND :b AND sk = :a", "Query key condition not supported"),
    ],
)
def test_rejected_key_conditions(text: str, message: str) -> None:
    assert key_error(text) == message


def test_tables_without_a_sort_key() -> None:
    assert key("pk = :h", range_key=None).range is None
    assert key_error("pk = :h AND sk = :a", range_key=None) == "Query key condition not supported"
    assert key_error("x = :a AND y = :b", range_key=None) == "Query key condition not supported"
    assert key_error("x = :a", range_key=None) == "Query condition missed key schema element: pk"


def test_value_types_must_match_the_key_schema() -> None:
    message = (
        "One or more parameter values were invalid: "
        "Condition parameter type does not match schema type"
    )
    assert key_error("pk = :n", hash_type="S") == message
    assert key_error("pk = :h AND sk > :n", hash_type="S", range_type="S") == message
    assert key("pk = :h AND sk > :n", hash_type="S", range_type="N").range == RangeCondition(
        ">", [{"N": "1"}]
    )


def test_expression_errors_come_first_and_carry_the_prefix() -> None:
    assert key_error("pk = :h AND begins_with(sk, :n)") == (
        "Invalid KeyConditionExpression: Incorrect operand type for operator or function; "
        "operator or function: begins_with, operand type: N"
    )
    assert key_error("pk = :h AND sk BETWEEN :b AND :a") == (
        "Invalid KeyConditionExpression: The BETWEEN operator requires upper bound to be greater "
        "than or equal to lower bound; lower bound operand: AttributeValue: {S:b}, upper bound "
        "operand: AttributeValue: {S:a}"
    )
    with pytest.raises(ValidationError, match=r"^Invalid KeyConditionExpression: Syntax error"):
        expressions.key_condition("pk =", None, None, "pk", None)


# Range conditions -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("op", "values", "matching", "not_matching"),
    [
        ("=", [{"N": "5"}], [{"N": "5"}, {"N": "5.0"}], [{"N": "6"}, {"S": "5"}]),
        ("<", [{"N": "5"}], [{"N": "-10"}, {"N": "4.99"}], [{"N": "5"}, {"S": "1"}]),
        ("<=", [{"S": "b"}], [{"S": "a"}, {"S": "b"}], [{"S": "ba"}, {"N": "1"}]),
        (">", [{"S": "b"}], [{"S": "ba"}, {"S": "c"}], [{"S": "b"}, {"S": "B"}]),
        (">=", [{"B": "AQ=="}], [{"B": "AQ=="}, {"B": "/w=="}], [{"B": "AA=="}]),
        ("BETWEEN", [{"N": "1"}, {"N": "3"}], [{"N": "1"}, {"N": "2.5"}, {"N": "3"}], [{"N": "4"}]),
        ("begins_with", [{"S": "ab"}], [{"S": "ab"}, {"S": "abc"}], [{"S": "a"}, {"S": "xab"}]),
        ("begins_with", [{"B": "AQ=="}], [{"B": "AQI="}], [{"B": "AgE="}, {"S": "AQ=="}]),
    ],
)
def test_range_condition_matches(
    op: str,
    values: list[dict[str, Any]],
    matching: list[dict[str, Any]],
    not_matching: list[dict[str, Any]],
) -> None:
    condition = RangeCondition(op, values)
    for value in matching:
        assert condition.matches(value), value
    for value in not_matching:
        assert not condition.matches(value), value
    assert not condition.matches(None)


def test_range_condition_json_round_trip() -> None:
    condition = RangeCondition("BETWEEN", [{"N": "1"}, {"N": "2"}])
    body = condition.to_json()
    assert body == {"op": "BETWEEN", "values": [{"N": "1"}, {"N": "2"}]}
    assert RangeCondition.from_json(body) == condition
    assert RangeCondition.from_json({"op": "=", "values": [{"N": "01.0"}]}).values == [{"N": "1"}]


def test_range_condition_rejects_bad_operators_and_arity() -> None:
    with pytest.raises(ValidationError, match="Invalid operator"):
        RangeCondition("<>", [{"N": "1"}])
    with pytest.raises(ValidationError, match="Invalid number of argument"):
        RangeCondition("BETWEEN", [{"N": "1"}])
    with pytest.raises(ValidationError):
        RangeCondition.from_json({"op": "=", "values": "x"})
