"""Key condition expressions: turning a checked condition into a partition key and a sort key range.

DynamoDB parses a KeyConditionExpression with the condition grammar and then converts it into at
most one condition per key attribute, rejecting everything a Query cannot serve from the key
order. The checks run in DynamoDB's order, each with its words:

1. conversion: only AND, ``=``, ``<``, ``<=``, ``>``, ``>=``, BETWEEN and begins_with; one plain
   top-level attribute per condition, compared with values ("Invalid operator used in
   KeyConditionExpression: OR", "KeyConditionExpressions must only contain one condition per key");
2. the value types each operator accepts ("ComparisonOperator LT is not valid for BOOL
   AttributeValue type") and the number of conditions ("Conditions can be of length 1 or 2 only");
3. the key schema: no more conditions than key attributes ("Query key condition not supported"),
   every key attribute present ("Query condition missed key schema element: pk"; a single
   condition needs only the partition key), values of the key's type, and equality on the
   partition key.

A global index's key may have up to four partition key and four sort key attributes
(multi-attribute keys, November 2025). Its key condition (`index_key_tests`) names every partition
key attribute with ``=``, and sort key attributes from the first on, left to right, each with
``=`` but the last named, which may take any sort key operator. DynamoDB's messages for the
refusals only such a key can meet are as moto records them from the service ("RANGE key attributes
... must have equality conditions specified in the query because a condition is present on key
attribute ..."); the others are the single-attribute key's.

``RangeCondition`` is the sort key part, also the form in which a router sends it to a node.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import INVALID_PARAMETERS, ValidationError
from core.expressions import ast
from core.expressions.binding import Binder
from core.values import AttributeValue, compare, type_of, validate_value

RANGE_OPERATORS = ("=", "<", "<=", ">", ">=", "BETWEEN", "begins_with")
_OPERAND_COUNTS = {op: 2 if op == "BETWEEN" else 1 for op in RANGE_OPERATORS}
# The legacy ComparisonOperator DynamoDB names in its messages about key conditions.
_LEGACY_NAMES = {
    "=": "EQ",
    "<": "LT",
    "<=": "LE",
    ">": "GT",
    ">=": "GE",
    "BETWEEN": "BETWEEN",
    "begins_with": "BEGINS_WITH",
}
# The value types each operator accepts in a key condition (API Reference, "Condition").
_ALLOWED_TYPES = {
    "=": frozenset({"S", "N", "B", "SS", "NS", "BS"}),
    "<": frozenset({"S", "N", "B"}),
    "<=": frozenset({"S", "N", "B"}),
    ">": frozenset({"S", "N", "B"}),
    ">=": frozenset({"S", "N", "B"}),
    "BETWEEN": frozenset({"S", "N", "B"}),
    "begins_with": frozenset({"S", "B"}),
}
_FLIPPED = {"=": "=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}
_NOT_INDEXABLE = ("attribute_exists", "attribute_not_exists", "attribute_type", "contains")
_INVALID_CONDITION = "Invalid condition in KeyConditionExpression: "
_NESTED_OPERATIONS = "KeyConditionExpressions cannot contain nested operations"


@dataclass(frozen=True, slots=True)
class RangeCondition:
    """A condition on the sort key: ``op`` and its one value (two for BETWEEN)."""

    op: str
    values: list[AttributeValue]

    def __post_init__(self) -> None:
        if self.op not in _OPERAND_COUNTS:
            raise ValidationError(f"Invalid operator used in KeyConditionExpression: {self.op}")
        if len(self.values) != _OPERAND_COUNTS[self.op]:
            raise ValidationError(
                "One or more parameter values were invalid: Invalid number of argument(s) for the "
                f"{_LEGACY_NAMES[self.op]} ComparisonOperator"
            )

    @classmethod
    def from_json(cls, body: Mapping[str, Any]) -> RangeCondition:
        """Rebuild a range condition from ``{"op": ..., "values": [...]}`` (rpc.ops)."""
        values = body.get("values")
        if not isinstance(values, list):
            raise ValidationError("A range condition needs a list of values")
        return cls(str(body.get("op")), [validate_value(value) for value in values])

    def to_json(self) -> dict[str, Any]:
        return {"op": self.op, "values": list(self.values)}

    def matches(self, value: AttributeValue | None) -> bool:
        """Whether a sort key value satisfies this condition."""
        if value is None:
            return False
        op = self.op
        if op == "begins_with":
            prefix = self.values[0]
            if "S" in value and "S" in prefix:
                return bool(value["S"].startswith(prefix["S"]))
            if "B" in value and "B" in prefix:
                return base64.b64decode(value["B"]).startswith(base64.b64decode(prefix["B"]))
            return False
        if op == "BETWEEN":
            low, high = compare(value, self.values[0]), compare(value, self.values[1])
            return low is not None and high is not None and low >= 0 and high <= 0
        order = compare(value, self.values[0])
        if order is None:
            return False
        if op == "=":
            return order == 0
        if op == "<":
            return order < 0
        if op == "<=":
            return order <= 0
        if op == ">":
            return order > 0
        return order >= 0


@dataclass(frozen=True, slots=True)
class _KeyTest:
    attribute: str
    op: str
    values: list[AttributeValue]


def _convert(
    node: ast.Compare | ast.Between | ast.In | ast.Or | ast.Not | ast.Call,
    binder: Binder,
    tests: dict[str, _KeyTest],
) -> None:
    """One condition of the ANDed ones, as a test of a key attribute."""
    if isinstance(node, ast.Or | ast.Not | ast.In):
        name = type(node).__name__.upper()
        raise ValidationError(f"Invalid operator used in KeyConditionExpression: {name}")
    operands: Sequence[ast.Operand]
    if isinstance(node, ast.Compare):
        if node.op == "<>":
            raise ValidationError("Invalid operator used in KeyConditionExpression: <>")
        op, operands = node.op, (node.left, node.right)
    elif isinstance(node, ast.Between):
        if not isinstance(node.operand, ast.PathOperand):
            raise ValidationError(
                _INVALID_CONDITION
                + "BETWEEN operator must have the key attribute as its first operand"
            )
        op, operands = "BETWEEN", (node.operand, node.low, node.high)
    elif node.name in _NOT_INDEXABLE:
        raise ValidationError(f"Invalid operator used in KeyConditionExpression: {node.name}")
    elif node.name != "begins_with":
        raise ValidationError(_NESTED_OPERATIONS)
    else:
        if not isinstance(node.args[0], ast.PathOperand):
            raise ValidationError(
                _INVALID_CONDITION
                + "begins_with operator must have the key attribute as its first operand"
            )
        op, operands = "begins_with", node.args
    attribute: str | None = None
    position = 0
    values: list[AttributeValue] = []
    for index, operand in enumerate(operands):
        if isinstance(operand, ast.PathOperand):
            if attribute is not None:
                raise ValidationError(
                    _INVALID_CONDITION + "Multiple attribute names used in one condition"
                )
            path = binder.paths[operand.path]
            if len(path) > 1:
                raise ValidationError(
                    "KeyConditionExpressions cannot have conditions on nested attributes"
                )
            first = path[0]
            assert isinstance(first, str)
            attribute, position = first, index
        elif isinstance(operand, ast.ValueOperand):
            values.append(binder.values[operand.name])
        else:
            raise ValidationError(_NESTED_OPERATIONS)
    if attribute is None:
        raise ValidationError(_INVALID_CONDITION + "No key attribute specified")
    if attribute in tests:
        raise ValidationError("KeyConditionExpressions must only contain one condition per key")
    if position == 1:
        # ":v < sk" is "sk > :v".
        op = _FLIPPED[op]
    tests[attribute] = _KeyTest(attribute, op, values)


# A key condition's tests by attribute name, once its form is checked.
KeyTests = dict[str, _KeyTest]


def check_key_form(tree: ast.Condition, binder: Binder) -> KeyTests:
    """Refuse what no key schema could make valid: OR, NOT, IN, <>, other functions, nesting;
    return the condition's tests for `key_tests` to hold against the key schema.

    DynamoDB checks these while it validates the request, before it looks the table up, so a
    query of a missing table with such a condition is a ValidationException, not a
    ResourceNotFoundException.
    """
    tests: KeyTests = {}
    # The ANDed conditions in text order, walked on a stack however they are parenthesised.
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.And):
            pending.append(node.right)
            pending.append(node.left)
        else:
            _convert(node, binder, tests)
    return tests


def key_tests(
    tests: KeyTests,
    hash_key: str,
    range_key: str | None,
    hash_type: str | None,
    range_type: str | None,
) -> tuple[AttributeValue, RangeCondition | None]:
    """The partition key value and sort key condition of a key condition's tests."""
    for test in tests.values():
        for value in test.values:
            if type_of(value) not in _ALLOWED_TYPES[test.op]:
                raise ValidationError(
                    "One or more parameter values were invalid: ComparisonOperator "
                    f"{_LEGACY_NAMES[test.op]} is not valid for {type_of(value)} "
                    "AttributeValue type"
                )
    if len(tests) not in (1, 2):
        raise ValidationError("Conditions can be of length 1 or 2 only")
    schema = [(hash_key, hash_type)] + ([(range_key, range_type)] if range_key is not None else [])
    if len(tests) > len(schema):
        raise ValidationError("Query key condition not supported")
    for key, _ in schema[: len(tests)]:
        if key not in tests:
            raise ValidationError(f"Query condition missed key schema element: {key}")
    for key, key_type in schema:
        tested = tests.get(key)
        if (
            tested is not None
            and key_type is not None
            and any(type_of(value) != key_type for value in tested.values)
        ):
            raise ValidationError(
                f"{INVALID_PARAMETERS}Condition parameter type does not match schema type"
            )
    hash_test = tests[hash_key]
    if hash_test.op != "=":
        raise ValidationError("Query key condition not supported")
    range_test = tests.get(range_key) if range_key is not None else None
    range_condition = (
        RangeCondition(range_test.op, range_test.values) if range_test is not None else None
    )
    return hash_test.values[0], range_condition


@dataclass(frozen=True, slots=True)
class IndexKeyTests:
    """A multi-attribute key condition held against its key: the values of the leading key
    attributes it fixes by equality, in key order (every partition key attribute, then the sort
    key attributes before the last one named), and the condition on the next sort key attribute,
    if it names one (`range_key`)."""

    fixed: tuple[AttributeValue, ...]
    range_key: str | None
    range: RangeCondition | None


def index_key_tests(
    tests: KeyTests,
    partition: Sequence[tuple[str, str]],
    sort: Sequence[tuple[str, str]],
) -> IndexKeyTests:
    """The tests of a key condition on a global index whose key has several partition key or
    several sort key attributes (`partition` and `sort`: (name, type) in key order)."""
    for test in tests.values():
        for value in test.values:
            if type_of(value) not in _ALLOWED_TYPES[test.op]:
                raise ValidationError(
                    "One or more parameter values were invalid: ComparisonOperator "
                    f"{_LEGACY_NAMES[test.op]} is not valid for {type_of(value)} "
                    "AttributeValue type"
                )
    schema = [*partition, *sort]
    if len(tests) > len(schema):
        raise ValidationError("Query key condition not supported")
    for key, _ in partition:
        if key not in tests:
            raise ValidationError(f"Query condition missed key schema element: {key}")
    names = {key for key, _ in schema}
    if any(attribute not in names for attribute in tests):
        # A condition on another attribute takes the place of a key attribute's: DynamoDB names
        # the first sort key attribute left out, as for a single sort key.
        missing = [key for key, _ in sort if key not in tests]
        if missing:
            raise ValidationError(f"Query condition missed key schema element: {missing[0]}")
        raise ValidationError("Query key condition not supported")
    for key, key_type in schema:
        tested = tests.get(key)
        if tested is not None and any(type_of(value) != key_type for value in tested.values):
            raise ValidationError(
                f"{INVALID_PARAMETERS}Condition parameter type does not match schema type"
            )
    if any(tests[key].op != "=" for key, _ in partition):
        raise ValidationError("Query key condition not supported")
    named = [position for position, (key, _) in enumerate(sort) if key in tests]
    fixed = [tests[key].values[0] for key, _ in partition]
    if not named:
        return IndexKeyTests(tuple(fixed), None, None)
    last = named[-1]
    for position in range(last):
        key = sort[position][0]
        tested = tests.get(key)
        if tested is None or tested.op != "=":
            after = next(sort[later][0] for later in named if later > position)
            raise ValidationError(
                f"RANGE key attributes {key} must have equality conditions specified in the "
                f"query because a condition is present on key attribute {after}"
            )
        fixed.append(tested.values[0])
    range_key = sort[last][0]
    range_test = tests[range_key]
    return IndexKeyTests(tuple(fixed), range_key, RangeCondition(range_test.op, range_test.values))
