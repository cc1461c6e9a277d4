"""Legacy conditional parameters: validated with DynamoDB's words, translated to expressions."""

from __future__ import annotations

from typing import Any

import pytest

from core import expressions
from core.errors import ValidationError
from core.expressions import legacy
from core.expressions.legacy import Translation

INVALID = "One or more parameter values were invalid: "
ITEM: dict[str, Any] = {
    "pk": {"S": "k"},
    "n": {"N": "5"},
    "s": {"S": "hello"},
    "ss": {"SS": ["a", "b"]},
    "l": {"L": [{"S": "x"}]},
}


def evaluate(translation: Translation | None, item: dict[str, Any] | None = ITEM) -> bool:
    assert translation is not None
    condition = expressions.condition(
        translation.expression, translation.names or None, translation.values or None
    )
    expressions.check_unused(translation.names, translation.values, condition)
    return condition.evaluate(item)


def error(function: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(ValidationError) as raised:
        function(*args, **kwargs)
    return raised.value.message


# Expected ---------------------------------------------------------------------------------------


def test_expected_value_and_exists() -> None:
    translation = legacy.expected_condition(
        {
            "n": {"Value": {"N": "5"}},
            "s": {"Exists": True, "Value": {"S": "hello"}},
            "x": {"Exists": False},
        }
    )
    assert translation == Translation(
        "#e0 = :e0 AND #e1 = :e1 AND attribute_not_exists(#e2)",
        {"#e0": "n", "#e1": "s", "#e2": "x"},
        {":e0": {"N": "5"}, ":e1": {"S": "hello"}},
    )
    assert evaluate(translation)
    assert not evaluate(translation, {"n": {"N": "5"}, "s": {"S": "hello"}, "x": {"N": "1"}})


def test_expected_with_comparison_operators_and_or() -> None:
    translation = legacy.expected_condition(
        {
            "n": {"ComparisonOperator": "GT", "AttributeValueList": [{"N": "9"}]},
            "s": {"ComparisonOperator": "BEGINS_WITH", "Value": {"S": "he"}},
        },
        "OR",
    )
    assert translation is not None
    assert translation.expression == "#e0 > :e0 OR begins_with(#e1, :e1)"
    assert evaluate(translation)
    assert not evaluate(translation, {"n": {"N": "1"}})


@pytest.mark.parametrize(
    ("condition", "message"),
    [
        ({}, INVALID + "Value must be provided when Exists is null for Attribute: a"),
        ({"Exists": True}, INVALID + "Value must be provided when Exists is true for Attribute: a"),
        (
            {"Exists": False, "Value": {"S": "x"}},
            INVALID + "Value cannot be used when Exists is false for Attribute: a",
        ),
        (
            {"ComparisonOperator": "EQ", "Exists": True, "Value": {"S": "x"}},
            INVALID + "Exists and ComparisonOperator cannot be used together for Attribute: a",
        ),
        (
            {"ComparisonOperator": "EQ", "Value": {"S": "x"}, "AttributeValueList": []},
            INVALID + "Value and AttributeValueList cannot be used together for Attribute: a",
        ),
        (
            {"AttributeValueList": [{"S": "x"}]},
            INVALID
            + "AttributeValueList can only be used with a ComparisonOperator for Attribute: a",
        ),
        (
            {"ComparisonOperator": "EQ"},
            INVALID + "Value or AttributeValueList must be used with ComparisonOperator: EQ "
            "for Attribute: a",
        ),
        (
            {"ComparisonOperator": "NULL", "Value": {"S": "x"}},
            INVALID + "Invalid number of argument(s) for the NULL ComparisonOperator",
        ),
        (
            {"ComparisonOperator": "BETWEEN", "AttributeValueList": [{"N": "2"}, {"N": "1"}]},
            "The BETWEEN condition was provided a range where the lower bound is greater than the "
            "upper bound",
        ),
        (
            {"ComparisonOperator": "IN", "AttributeValueList": [{"N": "2"}, {"S": "1"}]},
            INVALID + "AttributeValues inside AttributeValueList must be of same type",
        ),
        (
            {"ComparisonOperator": "LIKE", "Value": {"S": "x"}},
            "1 validation error detected: Value 'LIKE' at 'expected.a.member.comparisonOperator' "
            "failed to satisfy constraint: Member must satisfy enum value set: [IN, NULL, BETWEEN, "
            "LT, NOT_CONTAINS, EQ, GT, NOT_NULL, NE, LE, BEGINS_WITH, GE, CONTAINS]",
        ),
    ],
)
def test_expected_errors(condition: dict[str, Any], message: str) -> None:
    assert error(legacy.expected_condition, {"a": condition}) == message


def test_expected_conditional_operator_and_empty_map() -> None:
    assert error(legacy.expected_condition, {"a": {"Exists": False}}, "XOR") == (
        "1 validation error detected: Value 'XOR' at 'conditionalOperator' failed to satisfy "
        "constraint: Member must satisfy enum value set: [OR, AND]"
    )
    assert legacy.expected_condition({}) is None


# QueryFilter and ScanFilter ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operator", "values", "expected"),
    [
        ("EQ", [{"N": "5"}], True),
        ("NE", [{"N": "5"}], False),
        ("LE", [{"N": "5"}], True),
        ("LT", [{"N": "5"}], False),
        ("GE", [{"N": "6"}], False),
        ("GT", [{"N": "4"}], True),
        ("NOT_NULL", [], True),
        ("NULL", [], False),
        ("IN", [{"N": "1"}, {"N": "5"}], True),
        ("BETWEEN", [{"N": "5"}, {"N": "9"}], True),
    ],
)
def test_filter_operators_on_a_number(
    operator: str, values: list[dict[str, Any]], expected: bool
) -> None:
    translation = legacy.filter_condition(
        {"n": {"ComparisonOperator": operator, "AttributeValueList": values}}
    )
    assert evaluate(translation) is expected


@pytest.mark.parametrize(
    ("attribute", "operator", "value", "expected"),
    [
        ("s", "CONTAINS", {"S": "ell"}, True),
        ("s", "NOT_CONTAINS", {"S": "ell"}, False),
        ("ss", "CONTAINS", {"S": "a"}, True),
        ("ss", "NOT_CONTAINS", {"S": "z"}, True),
        ("l", "CONTAINS", {"S": "x"}, True),
        ("s", "BEGINS_WITH", {"S": "he"}, True),
        ("s", "BEGINS_WITH", {"S": "lo"}, False),
    ],
)
def test_filter_operators_on_strings_sets_and_lists(
    attribute: str, operator: str, value: dict[str, Any], expected: bool
) -> None:
    translation = legacy.filter_condition(
        {attribute: {"ComparisonOperator": operator, "AttributeValueList": [value]}},
        parameter="QueryFilter",
    )
    assert evaluate(translation) is expected


@pytest.mark.parametrize(
    ("operator", "values"),
    [
        ("EQ", []),
        ("EQ", [{"S": "a"}, {"S": "b"}]),
        ("NE", []),
        ("LE", []),
        ("LT", []),
        ("GE", []),
        ("GT", []),
        ("CONTAINS", []),
        ("NOT_CONTAINS", []),
        ("BEGINS_WITH", []),
        ("IN", []),
        ("BETWEEN", [{"S": "a"}]),
        ("BETWEEN", [{"S": "a"}, {"S": "b"}, {"S": "c"}]),
        ("NULL", [{"S": "a"}]),
        ("NOT_NULL", [{"S": "a"}]),
    ],
)
def test_filter_arity(operator: str, values: list[dict[str, Any]]) -> None:
    conditions = {"a": {"ComparisonOperator": operator, "AttributeValueList": values}}
    assert error(legacy.filter_condition, conditions) == (
        INVALID + f"Invalid number of argument(s) for the {operator} ComparisonOperator"
    )


@pytest.mark.parametrize(
    ("operator", "value"),
    [
        ("LT", {"BOOL": True}),
        ("GE", {"SS": ["a"]}),
        ("IN", {"NULL": True}),
        ("BETWEEN", {"M": {}}),
        ("CONTAINS", {"L": []}),
        ("NOT_CONTAINS", {"NS": ["1"]}),
        ("BEGINS_WITH", {"N": "1"}),
        ("NOT_CONTAINS", {"BOOL": False}),
    ],
)
def test_filter_value_types(operator: str, value: dict[str, Any]) -> None:
    count = 2 if operator == "BETWEEN" else 1
    conditions = {"a": {"ComparisonOperator": operator, "AttributeValueList": [value] * count}}
    type_name = next(iter(value))
    assert error(legacy.filter_condition, conditions, parameter="QueryFilter") == (
        INVALID + f"ComparisonOperator {operator} is not valid for {type_name} AttributeValue type"
    )


@pytest.mark.parametrize("parameter", ["QueryFilter", "ScanFilter"])
@pytest.mark.parametrize(
    "value",
    [{"BOOL": True}, {"NULL": True}, {"L": [{"N": "1"}, {"S": "x"}]}, {"M": {"k": {"N": "2"}}}],
)
def test_a_filter_compares_any_type_for_equality(parameter: str, value: dict[str, Any]) -> None:
    # EQ and NE on BOOL, NULL, lists and maps, as DynamoDB filters (the API Reference's type list
    # for EQ is narrower than what DynamoDB serves); another type is simply not equal.
    for operator, matches in (("EQ", True), ("NE", False)):
        conditions = {"a": {"ComparisonOperator": operator, "AttributeValueList": [value]}}
        translation = legacy.filter_condition(conditions, parameter=parameter)
        assert evaluate(translation, {"a": value}) is matches
        assert evaluate(translation, {"a": {"S": "other"}}) is not matches
    missing = {"a": {"ComparisonOperator": "NE", "AttributeValueList": [value]}}
    assert evaluate(legacy.filter_condition(missing, parameter=parameter), {})


def test_key_conditions_still_refuse_equality_on_a_type_keys_cannot_have() -> None:
    conditions = {"a": {"ComparisonOperator": "EQ", "AttributeValueList": [{"BOOL": True}]}}
    assert error(legacy.key_condition_expression, conditions) == (
        INVALID + "ComparisonOperator EQ is not valid for BOOL AttributeValue type"
    )


def test_filter_combines_conditions() -> None:
    conditions = {
        "n": {"ComparisonOperator": "EQ", "AttributeValueList": [{"N": "5"}]},
        "s": {"ComparisonOperator": "NOT_CONTAINS", "AttributeValueList": [{"S": "ell"}]},
    }
    both = legacy.filter_condition(conditions)
    assert both is not None
    assert both.expression == "#f0 = :f0 AND NOT contains(#f1, :f1)"
    assert not evaluate(both)
    assert evaluate(legacy.filter_condition(conditions, "OR"))
    assert legacy.filter_condition({}) is None
    assert error(legacy.filter_condition, {"a": {"AttributeValueList": []}}) == (
        "1 validation error detected: Value null at 'scanFilter.a.member.comparisonOperator' "
        "failed to satisfy constraint: Member must not be null"
    )


# KeyConditions ----------------------------------------------------------------------------------


def test_key_conditions_become_a_key_condition_expression() -> None:
    translation = legacy.key_condition_expression(
        {
            "pk": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "h"}]},
            "sk": {"ComparisonOperator": "BETWEEN", "AttributeValueList": [{"N": "1"}, {"N": "2"}]},
        }
    )
    assert translation.expression == "#k0 = :k0 AND #k1 BETWEEN :k1 AND :k2"
    key = expressions.key_condition(
        translation.expression, translation.names, translation.values, "pk", "sk"
    )
    assert key.hash_value == {"S": "h"}
    assert key.range == expressions.RangeCondition("BETWEEN", [{"N": "1"}, {"N": "2"}])
    begins = legacy.key_condition_expression(
        {"pk": {"ComparisonOperator": "BEGINS_WITH", "AttributeValueList": [{"S": "h"}]}}
    )
    assert begins.expression == "begins_with(#k0, :k0)"


@pytest.mark.parametrize("operator", ["NULL", "NOT_NULL", "NE", "CONTAINS", "NOT_CONTAINS", "IN"])
def test_key_conditions_that_are_not_indexable(operator: str) -> None:
    values = [] if operator.endswith("NULL") else [{"S": "a"}]
    conditions = {"pk": {"ComparisonOperator": operator, "AttributeValueList": values}}
    # Translated while the request is validated; refused only once the table is found.
    legacy.key_condition_expression(conditions)
    assert error(legacy.check_key_operators, conditions) == (
        "Attempted conditional constraint is not an indexable operation"
    )


def test_key_conditions_count() -> None:
    # No key has more than eight attributes (a multi-attribute global index key: four partition
    # key and four sort key attributes), so more conditions are refused before the key is known;
    # three conditions are refused only against a key of one partition and one sort key attribute.
    equal = {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "a"}]}
    for conditions in ({}, {name: equal for name in "abcdefghi"}):
        assert error(legacy.key_condition_expression, conditions) == (
            "Conditions can be of length 1 or 2 only"
        )
    three = legacy.key_condition_expression({"a": equal, "b": equal, "c": equal})
    assert error(
        expressions.key_condition, three.expression, three.names, three.values, "a", "b"
    ) == ("Conditions can be of length 1 or 2 only")


# AttributeUpdates -------------------------------------------------------------------------------


def apply_updates(updates: dict[str, Any], item: dict[str, Any]) -> dict[str, Any]:
    translation = legacy.update_expression(updates)
    assert translation is not None
    update = expressions.update(
        translation.expression, translation.names, translation.values or None
    )
    expressions.check_unused(translation.names, translation.values, update)
    return update.apply(item)


def test_attribute_updates_actions() -> None:
    updates = {
        "put": {"Value": {"S": "new"}},
        "put2": {"Action": "PUT", "Value": {"N": "1"}},
        "gone": {"Action": "DELETE"},
        "ss": {"Action": "DELETE", "Value": {"SS": ["a"]}},
        "n": {"Action": "ADD", "Value": {"N": "2"}},
        "l": {"Action": "ADD", "Value": {"L": [{"S": "y"}]}},
        "new_list": {"Action": "ADD", "Value": {"L": [{"S": "z"}]}},
    }
    translation = legacy.update_expression(updates)
    assert translation is not None
    assert translation.expression == (
        "SET #u0 = :u0, #u1 = :u1, #u5 = list_append(if_not_exists(#u5, :u4), :u5), "
        "#u6 = list_append(if_not_exists(#u6, :u6), :u7) "
        "REMOVE #u2 ADD #u4 :u3 DELETE #u3 :u2"
    )
    result = apply_updates(updates, {**ITEM, "gone": {"S": "x"}})
    assert result == {
        "pk": {"S": "k"},
        "s": {"S": "hello"},
        "put": {"S": "new"},
        "put2": {"N": "1"},
        "ss": {"SS": ["b"]},
        "n": {"N": "7"},
        "l": {"L": [{"S": "x"}, {"S": "y"}]},
        "new_list": {"L": [{"S": "z"}]},
    }


@pytest.mark.parametrize(
    ("update", "message"),
    [
        (
            {"Action": "PUT"},
            INVALID + "Only DELETE action is allowed when no attribute value is specified",
        ),
        (
            {"Action": "ADD"},
            INVALID + "Only DELETE action is allowed when no attribute value is specified",
        ),
        (
            {"Action": "DELETE", "Value": {"S": "x"}},
            INVALID + "DELETE action with value is not supported for the type S",
        ),
        (
            {"Action": "ADD", "Value": {"S": "x"}},
            INVALID + "ADD action is not supported for the type S",
        ),
        (
            {"Action": "ADD", "Value": {"M": {}}},
            INVALID + "ADD action is not supported for the type M",
        ),
        (
            {"Action": "REPLACE", "Value": {"S": "x"}},
            "1 validation error detected: Value 'REPLACE' at 'attributeUpdates.a.member.action' "
            "failed to satisfy constraint: Member must satisfy enum value set: [ADD, PUT, DELETE]",
        ),
    ],
)
def test_attribute_updates_errors(update: dict[str, Any], message: str) -> None:
    assert error(legacy.update_expression, {"a": update}) == message


def test_attribute_updates_empty() -> None:
    assert legacy.update_expression({}) is None


# AttributesToGet --------------------------------------------------------------------------------


def test_attributes_to_get() -> None:
    translation = legacy.projection_expression(["s", "weird name", "status"])
    assert translation.expression == "#p0, #p1, #p2"
    projection = expressions.projection(translation.expression, translation.names)
    assert projection.apply({**ITEM, "status": {"S": "ok"}}) == {
        "s": {"S": "hello"},
        "status": {"S": "ok"},
    }
    assert error(legacy.projection_expression, ["a", "b", "a"]) == (
        INVALID + "Duplicate value in attribute name: a"
    )
    assert "Member must have length greater than or equal to 1" in error(
        legacy.projection_expression, []
    )


# Mixing legacy and expression parameters --------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "request_body", "message"),
    [
        (
            "PutItem",
            {"Expected": {}, "ConditionExpression": "a = :v"},
            "Non-expression parameters: {Expected} Expression parameters: {ConditionExpression}",
        ),
        (
            "UpdateItem",
            {"AttributeUpdates": {}, "Expected": {}, "UpdateExpression": "SET a = :v"},
            "Non-expression parameters: {AttributeUpdates, Expected} "
            "Expression parameters: {UpdateExpression}",
        ),
        (
            "Query",
            {
                "KeyConditionExpression": "pk = :v",
                "FilterExpression": "a = :v",
                "QueryFilter": {},
                "ConditionalOperator": "AND",
                "KeyConditions": {},
            },
            "Non-expression parameters: {QueryFilter, ConditionalOperator, KeyConditions} "
            "Expression parameters: {FilterExpression, KeyConditionExpression}",
        ),
        (
            "Scan",
            {"ProjectionExpression": "a", "AttributesToGet": ["a"]},
            "Non-expression parameters: {AttributesToGet} Expression parameters: "
            "{ProjectionExpression}",
        ),
        (
            "GetItem",
            {"ProjectionExpression": "a", "AttributesToGet": ["a"]},
            "Non-expression parameters: {AttributesToGet} Expression parameters: "
            "{ProjectionExpression}",
        ),
    ],
)
def test_mixing_is_rejected(operation: str, request_body: dict[str, Any], message: str) -> None:
    assert error(legacy.check_parameter_mix, operation, request_body) == (
        "Can not use both expression and non-expression parameters in the same request: " + message
    )


def test_key_conditions_may_come_with_a_filter_expression() -> None:
    legacy.check_parameter_mix("Query", {"KeyConditions": {}, "FilterExpression": "a = :v"})
    legacy.check_parameter_mix("DeleteItem", {"Expected": {}})
    legacy.check_parameter_mix(
        "Scan", {"FilterExpression": "a = :v", "ExpressionAttributeValues": {}}
    )


def test_placeholders_without_expressions() -> None:
    assert (
        error(legacy.check_parameter_mix, "DeleteItem", {"ExpressionAttributeNames": {"#a": "a"}})
        == "ExpressionAttributeNames can only be specified when using expressions"
    )
    assert error(
        legacy.check_parameter_mix,
        "Query",
        {"ExpressionAttributeValues": {}, "ProjectionExpression": "a"},
    ) == (
        "ExpressionAttributeValues can only be specified when using expressions: "
        "FilterExpression and KeyConditionExpression are null"
    )
    assert error(legacy.check_parameter_mix, "PutItem", {"ExpressionAttributeValues": {}}) == (
        "ExpressionAttributeValues can only be specified when using expressions: "
        "ConditionExpression is null"
    )


@pytest.mark.parametrize("name", ["", "a" * 65536])
def test_legacy_parameters_name_attributes_of_one_character_to_less_than_64_kb(name: str) -> None:
    # The Developer Guide's naming rule, in its words (DynamoDB's own message is not published);
    # without the check an empty name was refused as an empty ExpressionAttributeNames value of a
    # placeholder the client never sent.
    for translate in (
        lambda: legacy.projection_expression(["a", name]),
        lambda: legacy.update_expression({name: {"Action": "DELETE"}}),
        lambda: legacy.expected_condition({name: {"Exists": False}}),
        lambda: legacy.filter_condition({name: {"ComparisonOperator": "NULL"}}, None),
    ):
        with pytest.raises(ValidationError) as raised:
            translate()
        assert raised.value.message == (
            "One or more parameter values were invalid: Attribute names must be at least one "
            "character long and less than 64 KB in size"
        )


@pytest.mark.parametrize("operand", ["Value", "AttributeValueList"])
@pytest.mark.parametrize(
    ("operator", "value"),
    [("LT", {"L": []}), ("GT", {"BOOL": True}), ("BEGINS_WITH", {"N": "1"}), ("EQ", {"M": {}})],
)
def test_expected_value_types(operator: str, value: dict[str, Any], operand: str) -> None:
    # Expected's ComparisonOperator takes the types a filter's does: a fuzzed Expected with
    # LT and a list Value was refused as "Invalid ConditionExpression", a parameter the request
    # never had.
    given = value if operand == "Value" else [value]
    conditions = {"a": {"ComparisonOperator": operator, operand: given}}
    assert error(legacy.expected_condition, conditions) == (
        INVALID + f"ComparisonOperator {operator} is not valid for {next(iter(value))} "
        "AttributeValue type"
    )
