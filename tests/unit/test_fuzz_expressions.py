"""Fuzzing the expression package: whatever a client sends, only DynamoDB-shaped errors come out.

Random text (token soup and arbitrary strings), random JSON where placeholders' maps and values go,
and well-formed expressions evaluated against random valid items: nothing may escape but
``ValidationError`` (or ``SerializationError`` for a value of the wrong JSON shape), and evaluation
of a condition that compiled never raises at all. Example counts are bounded so the whole file runs
in a few seconds.
"""

from __future__ import annotations

import base64
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import expressions
from core.errors import SerializationError, ValidationError
from core.expressions import legacy
from core.values import validate_value

ALLOWED = (ValidationError, SerializationError)
RUNTIME_ERRORS = {
    "The document path provided in the update expression is invalid for update",
    "An operand in the update expression has an incorrect data type",
    "The provided expression refers to an attribute that does not exist in the item",
}
# Thousands of examples in all: the full suite runs them, `make test-fast` leaves them out.
pytestmark = pytest.mark.slow
FUZZ = settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# Random JSON, as a request body can hold anything where a map or a value is expected.
json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3)
    ),
    max_leaves=8,
)

# Valid attribute values, normalised as they are stored.
numbers = st.decimals(
    min_value=-(10**9), max_value=10**9, allow_nan=False, allow_infinity=False, places=3
).map(lambda number: format(number.normalize(), "f"))
binaries = st.binary(max_size=6).map(lambda data: base64.b64encode(data).decode())
scalars = st.one_of(
    st.builds(lambda s: {"S": s}, st.text(max_size=6)),
    st.builds(lambda n: {"N": n}, numbers),
    st.builds(lambda b: {"B": b}, binaries),
    st.builds(lambda b: {"BOOL": b}, st.booleans()),
    st.just({"NULL": True}),
    st.builds(
        lambda s: {"SS": s}, st.lists(st.text(max_size=3), min_size=1, max_size=3, unique=True)
    ),
    st.builds(
        lambda s: {"NS": s},
        st.lists(st.integers(-5, 5).map(str), min_size=1, max_size=3, unique=True),
    ),
    st.builds(lambda s: {"BS": s}, st.lists(binaries, min_size=1, max_size=3, unique=True)),
)
attribute_values = st.recursive(
    scalars,
    lambda inner: (
        st.builds(lambda items: {"L": items}, st.lists(inner, max_size=3))
        | st.builds(
            lambda members: {"M": members},
            st.dictionaries(st.sampled_from("abcxy"), inner, max_size=3),
        )
    ),
    max_leaves=6,
).map(validate_value)
items = st.dictionaries(
    st.sampled_from(["a", "b", "c", "n", "x", "y", "pk"]), attribute_values, max_size=5
)

# Token soup: mostly the language's own tokens, in random order, so the parsers get deep.
TOKENS = [
    "a", "b", "c", "x", "pk", "status", "#n", "#m", "#undefined", ":v", ":w", ":s", ":l", ":u",
    "(", ")", "[", "]", "0", "1", "12", ",", ".", "=", "<>", "<", "<=", ">", ">=", "+", "-",
    "AND", "or", "NOT", "BETWEEN", "in", "SET", "remove", "ADD", "DELETE", "size",
    "attribute_exists", "attribute_not_exists", "attribute_type", "begins_with", "contains",
    "if_not_exists", "list_append", "!", "é", "#", ":", "\n",
]  # fmt: skip
soup = st.lists(st.sampled_from(TOKENS), max_size=14).flatmap(
    lambda tokens: st.sampled_from([" ", ""]).map(lambda sep: sep.join(tokens))
)
# Deep nesting, up to the expression size limit, must be refused cleanly, never overflow the stack.
nested = st.builds(
    lambda prefix, count, core, suffix: prefix * count + core + suffix * count,
    st.sampled_from(["(", "NOT ", "size(", "NOT (", "list_append(a, ", "SET a = ("]),
    st.integers(0, 1000),
    st.sampled_from(["a = :v", "a", ":v", "a, b"]),
    st.sampled_from([")", "", " AND b = :v)"]),
)
texts = soup | st.text(max_size=30) | nested

NAMES = {"#n": "n", "#m": "a"}
VALUES = {
    ":v": {"N": "5"},
    ":w": {"N": "10"},
    ":s": {"S": "N"},
    ":l": {"L": [{"S": "x"}]},
    ":u": {"SS": ["u"]},
}
# Well-formed expressions over a few paths and the placeholders above, to reach evaluation.
paths = st.sampled_from(["a", "b", "c", "x", "#n", "#m", "a.b", "a[0]", "c.x[1].y", "b[2]"])
values_used = st.sampled_from(list(VALUES))
operands = paths | values_used | paths.map(lambda path: f"size({path})")
atoms = st.one_of(
    st.builds(
        lambda left, op, right: f"{left} {op} {right}",
        operands,
        st.sampled_from(["=", "<>", "<", "<=", ">", ">="]),
        operands,
    ),
    st.builds(lambda x, lo, hi: f"{x} BETWEEN {lo} AND {hi}", operands, operands, operands),
    st.builds(
        lambda x, xs: f"{x} IN ({', '.join(xs)})",
        operands,
        st.lists(operands, min_size=1, max_size=3),
    ),
    st.builds(
        lambda function, path, operand: f"{function}({path}, {operand})",
        st.sampled_from(["begins_with", "contains", "attribute_type"]),
        paths,
        operands,
    ),
    st.builds(
        lambda function, path: f"{function}({path})",
        st.sampled_from(["attribute_exists", "attribute_not_exists"]),
        paths,
    ),
)
well_formed_conditions = st.recursive(
    atoms,
    lambda inner: (
        st.builds(lambda a, b: f"({a}) AND ({b})", inner, inner)
        | st.builds(lambda a, b: f"({a}) OR ({b})", inner, inner)
        | st.builds(lambda a: f"NOT ({a})", inner)
    ),
    max_leaves=5,
)
set_values = st.one_of(
    operands.filter(lambda operand: not operand.startswith("size")),
    st.builds(
        lambda a, op, b: f"{a} {op} {b}",
        paths | values_used,
        st.sampled_from("+-"),
        paths | values_used,
    ),
    st.builds(lambda p, v: f"if_not_exists({p}, {v})", paths, paths | values_used),
    st.builds(lambda a, b: f"list_append({a}, {b})", paths | values_used, paths | values_used),
)


def _update_text(targets: list[tuple[str, str, str]]) -> str:
    clauses: dict[str, list[str]] = {}
    for keyword, path, operand in targets:
        action = path if keyword == "REMOVE" else f"{path} {operand}"
        clauses.setdefault(keyword, []).append(
            action.replace(" ", " = ", 1) if keyword == "SET" else action
        )
    return " ".join(f"{keyword} {', '.join(actions)}" for keyword, actions in clauses.items())


# Targets on distinct top-level attributes, so that most updates pass the overlap check.
update_targets = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d", "x", "y", "#n"]),
        st.sampled_from(["", "", "", ".k", ".k", "[0]", "[3]", "[1].z"]),
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda target: target[0],
).flatmap(
    lambda targets: st.tuples(
        *(
            st.tuples(
                st.sampled_from(["SET", "REMOVE", "ADD", "DELETE"]), st.just(head + tail)
            ).flatmap(
                lambda action: st.tuples(
                    st.just(action[0]),
                    st.just(action[1]),
                    set_values if action[0] == "SET" else st.sampled_from([":v", ":w", ":u"]),
                )
            )
            for head, tail in targets
        )
    )
)
well_formed_updates = update_targets.map(lambda targets: _update_text(list(targets)))
random_values = st.sampled_from([VALUES, VALUES, None]).flatmap(
    lambda fixed: (
        st.just(fixed)
        if fixed
        else st.fixed_dictionaries({key: attribute_values for key in VALUES})
    )
)
# Items shaped like the paths above (maps with a "k", lists of maps with a "z"), so that updates
# mostly find the containers they write into.
shaped_values = st.one_of(
    attribute_values,
    attribute_values.map(lambda value: {"M": {"k": value}}),
    st.lists(attribute_values.map(lambda value: {"M": {"z": value}}), min_size=1, max_size=4).map(
        lambda elements: {"L": elements}
    ),
)
shaped_items = st.fixed_dictionaries(
    {name: shaped_values for name in ("a", "b", "c", "d", "n", "x")}
)

names_maps = st.just(NAMES) | st.none() | json
values_maps = (
    st.just(VALUES)
    | st.none()
    | st.dictionaries(st.sampled_from([":v", ":w", ":s", ":l", ":u"]), attribute_values, min_size=1)
    | st.dictionaries(st.sampled_from([":v", ":w", ":s"]), json, max_size=3)
    | json
)


@FUZZ
@given(texts, names_maps, values_maps, items)
def test_conditions_raise_only_dynamodb_errors(
    text: str, names: Any, values: Any, item: dict[str, Any]
) -> None:
    try:
        condition = expressions.condition(text, names, values)
    except ALLOWED:
        return
    assert isinstance(condition.evaluate(item), bool)
    assert condition.evaluate(None) in (True, False)


@FUZZ
@given(well_formed_conditions, random_values, items)
def test_well_formed_conditions_evaluate_to_booleans(
    text: str, values: dict[str, Any], item: dict[str, Any]
) -> None:
    used = {key: value for key, value in values.items() if key in text}
    try:
        condition = expressions.condition(text, NAMES, used or None)
    except ValidationError as error:
        assert error.message.startswith("Invalid ConditionExpression: "), error.message
        return
    assert isinstance(condition.evaluate(item), bool)


@FUZZ
@given(well_formed_updates, random_values, shaped_items)
def test_well_formed_updates_apply_or_fail_as_dynamodb_does(
    text: str, values: dict[str, Any], item: dict[str, Any]
) -> None:
    used = {key: value for key, value in values.items() if key in text}
    try:
        update = expressions.update(text, NAMES, used or None)
    except ValidationError as error:
        assert error.message.startswith("Invalid UpdateExpression: "), error.message
        return
    try:
        new = update.apply(item)
    except ValidationError as error:
        assert error.message in RUNTIME_ERRORS or error.message.startswith("Number "), error.message
        return
    assert update.returned_attributes(item, new, "UPDATED_NEW") is None or isinstance(
        update.returned_attributes(item, new, "UPDATED_NEW"), dict
    )


@FUZZ
@given(texts, names_maps, values_maps, items)
def test_updates_raise_only_dynamodb_errors(
    text: str, names: Any, values: Any, item: dict[str, Any]
) -> None:
    try:
        update = expressions.update(text, names, values)
        new = update.apply(item)
    except ALLOWED:
        return
    assert isinstance(new, dict)
    for mode in expressions.RETURN_VALUES:
        update.returned_attributes(item, new, mode)


@FUZZ
@given(texts, names_maps, items)
def test_projections_raise_only_dynamodb_errors(
    text: str, names: Any, item: dict[str, Any]
) -> None:
    try:
        projection = expressions.projection(text, names)
    except ALLOWED:
        return
    assert isinstance(projection.apply(item), dict)


@FUZZ
@given(texts, names_maps, values_maps, st.sampled_from([None, "S", "N", "B"]))
def test_key_conditions_raise_only_dynamodb_errors(
    text: str, names: Any, values: Any, range_type: str | None
) -> None:
    try:
        key = expressions.key_condition(
            text, names, values, "pk", "a" if range_type else None, range_type=range_type
        )
    except ALLOWED:
        return
    if key.range is not None:
        key.range.matches(key.hash_value)


@FUZZ
@given(json, json, st.lists(json, max_size=3))
def test_maps_and_unused_checks_raise_only_dynamodb_errors(
    names: Any, values: Any, extra: list[Any]
) -> None:
    try:
        expressions.check_attribute_maps(names, values)
        expressions.check_unused(names, values, expressions.condition("a = b"))
        expressions.RangeCondition.from_json({"op": extra[0] if extra else "=", "values": extra})
    except ALLOWED:
        return


legacy_conditions = st.dictionaries(
    st.sampled_from(["a", "b", "n", "pk"]),
    st.fixed_dictionaries(
        {},
        optional={
            "ComparisonOperator": st.sampled_from([*legacy.COMPARISON_OPERATORS, "LIKE"]) | json,
            "AttributeValueList": st.lists(attribute_values | json, max_size=3) | json,
            "Value": attribute_values | json,
            "Exists": st.booleans() | json,
            "Action": st.sampled_from(["ADD", "PUT", "DELETE", "X"]),
        },
    )
    | json,
    max_size=3,
)


def _checked_key_translation(conditions: Any) -> Any:
    translation = legacy.key_condition_expression(conditions)
    legacy.check_key_operators(conditions)
    return translation


@FUZZ
@given(legacy_conditions, st.sampled_from([None, "AND", "OR", "XOR"]), items)
def test_legacy_translations_raise_only_dynamodb_errors(
    conditions: Any, conditional_operator: Any, item: dict[str, Any]
) -> None:
    translators: list[tuple[str, Any]] = [
        ("condition", lambda: legacy.expected_condition(conditions, conditional_operator)),
        ("condition", lambda: legacy.filter_condition(conditions, conditional_operator)),
        # A Query translates KeyConditions, then (once its table is found) refuses the operators
        # a key order cannot serve, then parses the translation: the same order here.
        ("key", lambda: _checked_key_translation(conditions)),
        ("update", lambda: legacy.update_expression(conditions)),
        ("projection", lambda: legacy.projection_expression(list(conditions))),
    ]
    for kind, translate in translators:
        try:
            translation = translate()
        except ALLOWED:
            continue
        if translation is None:
            continue
        # What a translation produces must be accepted by the expression parsers.
        names, values = translation.names or None, translation.values or None
        if kind == "update":
            try:
                expressions.update(translation.expression, names, values).apply(item)
            except ValidationError as error:
                assert not error.message.startswith("Invalid"), error.message
        elif kind == "condition":
            expressions.condition(translation.expression, names, values).evaluate(item)
        elif kind == "key":
            try:
                expressions.key_condition(translation.expression, names, values, "pk", "a")
            except ValidationError as error:
                assert not error.message.startswith("Invalid"), error.message
        else:
            expressions.projection(translation.expression, names).apply(item)
