"""DynamoDB's legacy conditional parameters, translated into expressions.

Before expressions, DynamoDB requests carried their conditions and updates as maps: ``Expected``
(with ``ConditionalOperator``) for conditional writes, ``AttributeUpdates`` for UpdateItem,
``AttributesToGet`` for projections, ``KeyConditions`` for Query, and ``QueryFilter`` /
``ScanFilter`` for filters. SDKs still send them, so the router validates each one with DynamoDB's
words and translates it into expression text with generated ExpressionAttributeNames and
ExpressionAttributeValues (every attribute name goes through a ``#`` placeholder, so reserved words
and unusual characters need no care). The translation then takes the same path as an expression
written by the client, and nodes only ever see expressions.

Each parameter gets its own placeholder prefix (``#e0``/``:e0`` for Expected, ``u`` for
AttributeUpdates, ``p`` for AttributesToGet, ``k`` for KeyConditions, ``f`` for filters), so the
translations of one request can be merged. ``check_parameter_mix`` rejects a request that mixes
legacy and expression parameters, as DynamoDB does.

Runtime errors of a translated update are those of the expression, except that an ADD or DELETE
of another type than the attribute's is "Type mismatch for attribute to update", as DynamoDB's
legacy path says, where an expression's is "An operand in the update expression has an incorrect
data type" (`expressions.update(..., legacy=True)`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from core import limits
from core.errors import INVALID_PARAMETERS, SerializationError, ValidationError
from core.values import (
    SET_TYPES,
    AttributeValue,
    check_attribute_name,
    compare,
    type_of,
    validate_value,
)

COMPARISON_OPERATORS = (
    "IN",
    "NULL",
    "BETWEEN",
    "LT",
    "NOT_CONTAINS",
    "EQ",
    "GT",
    "NOT_NULL",
    "NE",
    "LE",
    "BEGINS_WITH",
    "GE",
    "CONTAINS",
)
# The value types each ComparisonOperator accepts in Expected and KeyConditions (API Reference,
# "Condition"): only scalars are ordered, sets only compare for equality. QueryFilter and
# ScanFilter take EQ and NE on a value of any type (`_ANY_TYPE_FILTER_OPERATORS`).
_ALLOWED_TYPES = {
    "EQ": frozenset({"S", "N", "B", "SS", "NS", "BS"}),
    "NE": frozenset({"S", "N", "B", "SS", "NS", "BS"}),
    "LE": frozenset({"S", "N", "B"}),
    "LT": frozenset({"S", "N", "B"}),
    "GE": frozenset({"S", "N", "B"}),
    "GT": frozenset({"S", "N", "B"}),
    "CONTAINS": frozenset({"S", "N", "B"}),
    "NOT_CONTAINS": frozenset({"S", "N", "B"}),
    "BEGINS_WITH": frozenset({"S", "B"}),
    "IN": frozenset({"S", "N", "B"}),
    "BETWEEN": frozenset({"S", "N", "B"}),
}
# What DynamoDB does beyond the API Reference's words: a QueryFilter or ScanFilter compares a BOOL,
# NULL, list or map attribute for equality too (ScyllaDB's test_query_filter.py, which runs against
# DynamoDB, filters with EQ on numbers, strings, binaries, lists, maps, number sets and booleans).
# A value of another type than the attribute's is simply not equal, as everywhere.
_ANY_TYPE_FILTER_OPERATORS = frozenset({"EQ", "NE"})
_COMPARATORS = {"EQ": "=", "NE": "<>", "LE": "<=", "LT": "<", "GE": ">=", "GT": ">"}
# Operators a Query can serve from the key order ("Attempted conditional constraint is not an
# indexable operation" for the others).
_KEY_OPERATORS = frozenset({"EQ", "LE", "LT", "GE", "GT", "BEGINS_WITH", "BETWEEN"})
_UPDATE_ACTIONS = ("ADD", "PUT", "DELETE")
_ADD_TYPES = frozenset({"L", "SS", "NS", "BS", "N"})

# For each operation: its expression parameters and the legacy parameters they replace, in the
# order DynamoDB lists them in "Can not use both expression and non-expression parameters".
PARAMETERS = {
    "GetItem": (("ProjectionExpression",), ("AttributesToGet",)),
    "BatchGetItem": (("ProjectionExpression",), ("AttributesToGet",)),
    "PutItem": (("ConditionExpression",), ("Expected",)),
    "DeleteItem": (("ConditionExpression",), ("Expected",)),
    "UpdateItem": (("UpdateExpression", "ConditionExpression"), ("AttributeUpdates", "Expected")),
    "Query": (
        ("ProjectionExpression", "FilterExpression", "KeyConditionExpression"),
        ("AttributesToGet", "QueryFilter", "ConditionalOperator", "KeyConditions"),
    ),
    "Scan": (
        ("ProjectionExpression", "FilterExpression"),
        ("AttributesToGet", "ScanFilter", "ConditionalOperator"),
    ),
}


@dataclass
class Translation:
    """An expression equivalent to a legacy parameter, with its generated placeholders."""

    expression: str
    names: dict[str, str] = field(default_factory=dict)
    values: dict[str, AttributeValue] = field(default_factory=dict)


class _Placeholders:
    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.names: dict[str, str] = {}
        self.values: dict[str, AttributeValue] = {}
        self._by_attribute: dict[str, str] = {}

    def name(self, attribute: str) -> str:
        placeholder = self._by_attribute.get(attribute)
        if placeholder is None:
            # Refused here as the attribute name it is, not later as the value of a placeholder
            # the client never sent.
            check_attribute_name(attribute)
            placeholder = f"#{self.prefix}{len(self.names)}"
            self.names[placeholder] = attribute
            self._by_attribute[attribute] = placeholder
        return placeholder

    def value(self, value: AttributeValue) -> str:
        placeholder = f":{self.prefix}{len(self.values)}"
        self.values[placeholder] = value
        return placeholder

    def translation(self, expression: str) -> Translation:
        return Translation(expression, self.names, self.values)


def _enum_error(value: Any, where: str, allowed: Sequence[str]) -> ValidationError:
    return ValidationError(
        f"1 validation error detected: Value '{value}' at '{where}' failed to satisfy "
        f"constraint: Member must satisfy enum value set: [{', '.join(allowed)}]"
    )


def _map(value: Any, parameter: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise SerializationError(f"{parameter} must be a map")
    for key in value:
        if not isinstance(key, str):
            raise SerializationError(f"{parameter} keys must be attribute names")
    return value


def _value_list(condition: Mapping[str, Any], where: str) -> list[AttributeValue]:
    raw = condition.get("AttributeValueList")
    if raw is None:
        return []
    if not isinstance(raw, list):
        raise SerializationError(f"AttributeValueList of {where} must be a list")
    return [validate_value(value, where=where) for value in raw]


def _check_arity(operator: str, count: int) -> None:
    if operator in ("NULL", "NOT_NULL"):
        valid = count == 0
    elif operator == "IN":
        valid = count > 0
    elif operator == "BETWEEN":
        valid = count == 2
    else:
        valid = count == 1
    if not valid:
        raise ValidationError(
            INVALID_PARAMETERS
            + f"Invalid number of argument(s) for the {operator} ComparisonOperator"
        )


def _check_same_type(values: list[AttributeValue]) -> None:
    if values and any(type_of(value) != type_of(values[0]) for value in values):
        raise ValidationError(
            INVALID_PARAMETERS + "AttributeValues inside AttributeValueList must be of same type"
        )


def _check_types(operator: str, values: list[AttributeValue], *, filtering: bool = False) -> None:
    """Each operator takes values of some types only: LT with a list, for one, is refused before
    any item is read. A filter (`filtering`) compares values of any type for equality."""
    if filtering and operator in _ANY_TYPE_FILTER_OPERATORS:
        return
    for value in values:
        if type_of(value) not in _ALLOWED_TYPES[operator]:
            raise ValidationError(
                INVALID_PARAMETERS + f"ComparisonOperator {operator} is not valid for "
                f"{type_of(value)} AttributeValue type"
            )


def _check_bounds(operator: str, values: list[AttributeValue]) -> None:
    if operator == "BETWEEN" and compare(values[0], values[1]) == 1:
        raise ValidationError(
            "The BETWEEN condition was provided a range where the lower bound is greater than "
            "the upper bound"
        )


def _operator(condition: Mapping[str, Any], where: str) -> str:
    operator = condition.get("ComparisonOperator")
    if operator is None:
        raise ValidationError(
            f"1 validation error detected: Value null at '{where}.comparisonOperator' failed to "
            "satisfy constraint: Member must not be null"
        )
    if operator not in COMPARISON_OPERATORS:
        raise _enum_error(operator, f"{where}.comparisonOperator", COMPARISON_OPERATORS)
    result: str = operator
    return result


def _comparison(
    placeholders: _Placeholders, attribute: str, operator: str, values: list[AttributeValue]
) -> str:
    name = placeholders.name(attribute)
    if operator in _COMPARATORS:
        return f"{name} {_COMPARATORS[operator]} {placeholders.value(values[0])}"
    if operator == "NOT_NULL":
        return f"attribute_exists({name})"
    if operator == "NULL":
        return f"attribute_not_exists({name})"
    if operator == "IN":
        return f"{name} IN ({', '.join(placeholders.value(value) for value in values)})"
    if operator == "BETWEEN":
        low, high = placeholders.value(values[0]), placeholders.value(values[1])
        return f"{name} BETWEEN {low} AND {high}"
    function = {"CONTAINS": "contains", "NOT_CONTAINS": "contains", "BEGINS_WITH": "begins_with"}
    call = f"{function[operator]}({name}, {placeholders.value(values[0])})"
    return f"NOT {call}" if operator == "NOT_CONTAINS" else call


def _conditional_operator(conditional_operator: Any) -> str:
    if conditional_operator is None:
        return "AND"
    if conditional_operator not in ("AND", "OR"):
        raise _enum_error(conditional_operator, "conditionalOperator", ("OR", "AND"))
    result: str = conditional_operator
    return result


def _filter_conditions(
    conditions: Mapping[str, Any], parameter: str, placeholders: _Placeholders
) -> list[str]:
    """Validate QueryFilter, ScanFilter or KeyConditions and translate each condition."""
    parts: list[str] = []
    where_prefix = parameter[0].lower() + parameter[1:]
    for attribute, condition in _map(conditions, parameter).items():
        where = f"{where_prefix}.{attribute}.member"
        if not isinstance(condition, Mapping):
            raise SerializationError(f"{parameter} conditions must be maps")
        operator = _operator(condition, where)
        values = _value_list(condition, attribute)
        _check_arity(operator, len(values))
        _check_same_type(values)
        _check_types(operator, values, filtering=parameter != "KeyConditions")
        _check_bounds(operator, values)
        parts.append(_comparison(placeholders, attribute, operator, values))
    return parts


def filter_condition(
    conditions: Mapping[str, Any],
    conditional_operator: Any = None,
    *,
    parameter: str = "ScanFilter",
) -> Translation | None:
    """A FilterExpression for ``QueryFilter`` or ``ScanFilter`` (``parameter`` names which)."""
    joiner = _conditional_operator(conditional_operator)
    placeholders = _Placeholders("f")
    parts = _filter_conditions(conditions, parameter, placeholders)
    if not parts:
        return None
    return placeholders.translation(f" {joiner} ".join(parts))


def expected_condition(
    expected: Mapping[str, Any], conditional_operator: Any = None
) -> Translation | None:
    """A ConditionExpression for ``Expected`` (PutItem, UpdateItem, DeleteItem)."""
    joiner = _conditional_operator(conditional_operator)
    placeholders = _Placeholders("e")
    parts: list[str] = []
    for attribute, condition in _map(expected, "Expected").items():
        if not isinstance(condition, Mapping):
            raise SerializationError("Expected conditions must be maps")
        if "AttributeValueList" in condition and "Value" in condition:
            raise ValidationError(
                INVALID_PARAMETERS
                + "Value and AttributeValueList cannot be used together for Attribute: "
                f"{attribute}"
            )
        if "ComparisonOperator" in condition:
            parts.append(_expected_comparison(placeholders, attribute, condition))
        elif "AttributeValueList" in condition:
            raise ValidationError(
                INVALID_PARAMETERS
                + "AttributeValueList can only be used with a ComparisonOperator for "
                f"Attribute: {attribute}"
            )
        else:
            parts.append(_expected_exists(placeholders, attribute, condition))
    if not parts:
        return None
    return placeholders.translation(f" {joiner} ".join(parts))


def _expected_comparison(
    placeholders: _Placeholders, attribute: str, condition: Mapping[str, Any]
) -> str:
    if "Exists" in condition:
        raise ValidationError(
            INVALID_PARAMETERS
            + "Exists and ComparisonOperator cannot be used together for Attribute: "
            f"{attribute}"
        )
    operator = _operator(condition, f"expected.{attribute}.member")
    if (
        operator not in ("NULL", "NOT_NULL")
        and "AttributeValueList" not in condition
        and "Value" not in condition
    ):
        raise ValidationError(
            INVALID_PARAMETERS
            + f"Value or AttributeValueList must be used with ComparisonOperator: "
            f"{operator} for Attribute: {attribute}"
        )
    if "Value" in condition:
        values = [validate_value(condition["Value"], where=attribute)]
    else:
        values = _value_list(condition, attribute)
    _check_arity(operator, len(values))
    _check_same_type(values)
    _check_types(operator, values)
    _check_bounds(operator, values)
    return _comparison(placeholders, attribute, operator, values)


def _expected_exists(
    placeholders: _Placeholders, attribute: str, condition: Mapping[str, Any]
) -> str:
    exists = condition.get("Exists")
    if exists is not None and not isinstance(exists, bool):
        raise SerializationError(f"Exists of {attribute} must be true or false")
    value = condition.get("Value")
    if exists is not False and value is None:
        shown = "null" if exists is None else "true"
        raise ValidationError(
            INVALID_PARAMETERS
            + f"Value must be provided when Exists is {shown} for Attribute: {attribute}"
        )
    if exists is False:
        if value is not None:
            raise ValidationError(
                INVALID_PARAMETERS
                + f"Value cannot be used when Exists is false for Attribute: {attribute}"
            )
        return _comparison(placeholders, attribute, "NULL", [])
    return _comparison(placeholders, attribute, "EQ", [validate_value(value, where=attribute)])


def key_condition_expression(key_conditions: Mapping[str, Any]) -> Translation:
    """A KeyConditionExpression for ``KeyConditions`` (checked against the schema afterwards)."""
    placeholders = _Placeholders("k")
    parts = _filter_conditions(key_conditions, "KeyConditions", placeholders)
    # No key has more attributes than a global index's (multi-attribute keys); whether the key
    # queried has as many is checked against it, where a key of one partition key and at most one
    # sort key attribute still takes one or two conditions only.
    most = limits.GSI_PARTITION_KEY_ATTRIBUTES_MAX + limits.GSI_SORT_KEY_ATTRIBUTES_MAX
    if not 1 <= len(parts) <= most:
        raise ValidationError("Conditions can be of length 1 or 2 only")
    return placeholders.translation(" AND ".join(parts))


def check_key_operators(key_conditions: Mapping[str, Any]) -> None:
    """Refuse KeyConditions whose operators a Query cannot serve from the key order.

    DynamoDB answers this once it has found the table, not while it validates the request: a
    query of a missing table with `NE` on its key is a ResourceNotFoundException.
    """
    for condition in key_conditions.values():
        if condition["ComparisonOperator"] not in _KEY_OPERATORS:
            raise ValidationError("Attempted conditional constraint is not an indexable operation")


def update_expression(attribute_updates: Mapping[str, Any]) -> Translation | None:
    """An UpdateExpression for ``AttributeUpdates``."""
    placeholders = _Placeholders("u")
    clauses: dict[str, list[str]] = {"SET": [], "REMOVE": [], "ADD": [], "DELETE": []}
    for attribute, update in _map(attribute_updates, "AttributeUpdates").items():
        if not isinstance(update, Mapping):
            raise SerializationError("AttributeUpdates entries must be maps")
        action = update.get("Action", "PUT")
        if action not in _UPDATE_ACTIONS:
            raise _enum_error(
                action, f"attributeUpdates.{attribute}.member.action", _UPDATE_ACTIONS
            )
        raw = update.get("Value")
        value = validate_value(raw, where=attribute) if raw is not None else None
        name = placeholders.name(attribute)
        if value is None:
            if action != "DELETE":
                raise ValidationError(
                    INVALID_PARAMETERS
                    + "Only DELETE action is allowed when no attribute value is specified"
                )
            clauses["REMOVE"].append(name)
        elif action == "PUT":
            clauses["SET"].append(f"{name} = {placeholders.value(value)}")
        elif action == "DELETE":
            if type_of(value) not in SET_TYPES:
                raise ValidationError(
                    INVALID_PARAMETERS + f"DELETE action with value is not supported for the type "
                    f"{type_of(value)}"
                )
            clauses["DELETE"].append(f"{name} {placeholders.value(value)}")
        elif type_of(value) not in _ADD_TYPES:
            raise ValidationError(
                INVALID_PARAMETERS + f"ADD action is not supported for the type {type_of(value)}"
            )
        elif type_of(value) == "L":
            # The legacy ADD appends to a list (creating it when absent); expressions spell that
            # with list_append, since their ADD takes only numbers and sets.
            empty = placeholders.value({"L": []})
            appended = placeholders.value(value)
            clauses["SET"].append(
                f"{name} = list_append(if_not_exists({name}, {empty}), {appended})"
            )
        else:
            clauses["ADD"].append(f"{name} {placeholders.value(value)}")
    text = " ".join(f"{keyword} {', '.join(parts)}" for keyword, parts in clauses.items() if parts)
    return placeholders.translation(text) if text else None


def projection_expression(attributes: Any) -> Translation:
    """A ProjectionExpression for ``AttributesToGet``."""
    if not isinstance(attributes, list) or not all(isinstance(a, str) for a in attributes):
        raise SerializationError("AttributesToGet must be a list of attribute names")
    if not attributes:
        raise ValidationError(
            "1 validation error detected: Value '[]' at 'attributesToGet' failed to satisfy "
            "constraint: Member must have length greater than or equal to 1"
        )
    seen: set[str] = set()
    for attribute in attributes:
        if attribute in seen:
            raise ValidationError(
                INVALID_PARAMETERS + f"Duplicate value in attribute name: {attribute}"
            )
        seen.add(attribute)
    placeholders = _Placeholders("p")
    return placeholders.translation(", ".join(placeholders.name(a) for a in attributes))


def check_parameter_mix(operation: str, request: Mapping[str, Any]) -> None:
    """Reject mixing legacy and expression parameters, and placeholders without expressions."""
    expression_parameters, legacy_parameters = PARAMETERS[operation]
    used = [name for name in expression_parameters if request.get(name) is not None]
    if used:
        legacy = list(legacy_parameters)
        # DynamoDB accepts KeyConditions together with a FilterExpression or ProjectionExpression.
        if operation == "Query" and request.get("KeyConditionExpression") is None:
            legacy.remove("KeyConditions")
        mixed = [name for name in legacy if request.get(name) is not None]
        if mixed:
            raise ValidationError(
                "Can not use both expression and non-expression parameters in the same request: "
                f"Non-expression parameters: {{{', '.join(mixed)}}} "
                f"Expression parameters: {{{', '.join(used)}}}"
            )
    elif request.get("ExpressionAttributeNames") is not None:
        raise ValidationError(
            "ExpressionAttributeNames can only be specified when using expressions"
        )
    value_parameters = [name for name in expression_parameters if name != "ProjectionExpression"]
    if (
        value_parameters
        and request.get("ExpressionAttributeValues") is not None
        and all(request.get(name) is None for name in value_parameters)
    ):
        verb = "are" if len(value_parameters) > 1 else "is"
        raise ValidationError(
            "ExpressionAttributeValues can only be specified when using expressions: "
            f"{' and '.join(value_parameters)} {verb} null"
        )
