"""Nesting as deep as DynamoDB allows: only the 300 operators and the 4 KB bound an expression.

DynamoDB publishes no nesting limit. Every nesting that fits both bounds (299 ``NOT (`` levels
around a comparison, 150 comparisons each ANDed into the parentheses of the last, runs of NOT,
nested ORs) must parse, check, compile and evaluate, and each with Python's recursion limit out
of reach: the tests run the work with only a few hundred frames of the limit left
(``frames_left``), which a parser or evaluator recursing per level would overrun.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import TypeVar

import pytest

from core import expressions, limits
from core.errors import ValidationError

T = TypeVar("T")
VALUES = {":v": {"N": "1"}, ":w": {"N": "2"}}
LOWER = {"pk": {"S": "k"}, "a": {"N": "1"}, "b": {"N": "2"}}  # a < b
HIGHER = {"pk": {"S": "k"}, "a": {"N": "3"}, "b": {"N": "2"}}  # not a < b


def frames_left(frames: int, work: Callable[[], T]) -> T:
    """Run ``work`` with at most ``frames`` Python frames left below the recursion limit."""
    depth, frame = 0, sys._getframe()
    while frame is not None:
        depth, frame = depth + 1, frame.f_back

    def descend(remaining: int) -> T:
        return work() if remaining <= 0 else descend(remaining - 1)

    return descend(sys.getrecursionlimit() - depth - frames)


def condition_error(text: str, values: dict | None = None) -> str:
    expressions.clear_caches()
    with pytest.raises(ValidationError) as raised:
        frames_left(60, lambda: expressions.condition(text, None, values or VALUES))
    return raised.value.message


def evaluate(text: str, item: dict, frames: int = 300) -> bool:
    """Parse, check, compile and evaluate ``text`` cold, all with ``frames`` frames to spare."""
    expressions.clear_caches()
    return frames_left(frames, lambda: expressions.condition(text, None, VALUES).evaluate(item))


def nots_in_parentheses(levels: int) -> str:
    return "NOT (" * levels + "a < b" + ")" * levels


def and_into_parentheses(comparisons: int) -> str:
    """``a < b AND (a < b AND (... a < b))``: ``2 * comparisons - 1`` operators."""
    return "a < b AND (" * (comparisons - 1) + "a < b" + ")" * (comparisons - 1)


def alternating(pairs: int) -> str:
    """``NOT (a < b AND NOT (a < b AND ... NOT (a < b)))``: NOT and AND alternate, the nesting
    that costs the fewest operators per level once runs of one connective are flattened."""
    return "NOT (a < b AND " * pairs + "NOT (a < b)" + ")" * pairs


def test_299_nots_in_parentheses_are_300_operators_and_evaluate() -> None:
    text = nots_in_parentheses(limits.EXPRESSION_OPERATORS_MAX - 1)
    # An odd number of NOTs negates the comparison.
    assert evaluate(text, LOWER) is False
    assert evaluate(text, HIGHER) is True
    assert evaluate(nots_in_parentheses(298), LOWER) is True
    assert condition_error(nots_in_parentheses(limits.EXPRESSION_OPERATORS_MAX)) == (
        "Invalid ConditionExpression: The expression contains too many operators; "
        "operator count: 301"
    )


def test_runs_of_not_without_parentheses() -> None:
    assert evaluate("NOT " * 299 + "a < b", LOWER) is False
    assert evaluate("NOT " * 298 + "a < b", LOWER) is True
    assert condition_error("NOT " * 300 + "a < b").endswith("operator count: 301")
    # 1,000 NOTs fit in 4 KB: they parse, and are refused for their operators alone.
    assert condition_error("NOT " * 1000 + "a < b").endswith("operator count: 1001")


def test_conditions_anded_into_parentheses_to_the_operator_limit() -> None:
    text = f"NOT ({and_into_parentheses(150)})"  # 150 comparisons, 149 ANDs and a NOT: 300
    assert evaluate(text, LOWER) is False
    assert evaluate(text, HIGHER) is True
    assert evaluate(and_into_parentheses(150), LOWER) is True
    assert evaluate(and_into_parentheses(150), HIGHER) is False
    # NOT binds tighter than AND: this one negates the first comparison only.
    assert evaluate("NOT " + and_into_parentheses(150), HIGHER) is False
    assert condition_error(f"NOT NOT ({and_into_parentheses(150)})").endswith("operator count: 301")


def test_nested_ors_and_mixed_connectives() -> None:
    # a = :w (false for LOWER) OR (a = :w OR (... OR a = :v)): only the innermost is true.
    ors = "a = :w OR (" * 149 + "a = :v" + ")" * 149
    assert evaluate(ors, LOWER) is True
    assert evaluate(ors, HIGHER) is False
    mixed = (
        "".join(f"a < b {'AND' if level % 2 else 'OR'} (" for level in range(149))
        + "a < b"
        + ")" * 149
    )
    assert evaluate(mixed, LOWER) is True
    assert evaluate(mixed, HIGHER) is False


def test_not_and_alternating_to_the_operator_limit_evaluates_within_200_frames() -> None:
    # 99 pairs: 99 NOTs, 99 comparisons and 99 ANDs, then NOT and one comparison: 299.
    text = alternating(99)
    # Innermost NOT (a < b) is False for LOWER; each level NOT (True AND x) flips it.
    assert evaluate(text, LOWER, frames=230) is True
    assert evaluate(text, HIGHER, frames=230) is True
    assert evaluate("NOT " + text, LOWER, frames=230) is False
    assert condition_error("NOT NOT " + text).endswith("operator count: 301")


def test_redundant_parentheses_are_refused_at_any_depth() -> None:
    assert condition_error("((a < b))") == (
        "Invalid ConditionExpression: The expression has redundant parentheses;"
    )
    deep = "(" * 2000 + "a < b" + ")" * 2000
    assert len(deep) <= limits.EXPRESSION_BYTES_MAX
    assert condition_error(deep) == (
        "Invalid ConditionExpression: The expression has redundant parentheses;"
    )
    # Parentheses around each NOT's operand are not redundant: each holds a new operator.
    assert evaluate("NOT (NOT (a < b))", LOWER) is True
    assert condition_error("NOT ((a < b))").endswith("redundant parentheses;")
    assert condition_error("a < " + "(" * 1500 + "b" + ")" * 1500).endswith(
        "redundant parentheses;"
    )


def test_4_kb_bounds_the_deepest_text() -> None:
    text = nots_in_parentheses(limits.EXPRESSION_OPERATORS_MAX - 1)
    padded = text + " " * (limits.EXPRESSION_BYTES_MAX - len(text))
    assert evaluate(padded, LOWER) is False
    assert condition_error(padded + " ") == (
        "Invalid ConditionExpression: Expression size has exceeded the maximum allowed size; "
        f"expression size: {limits.EXPRESSION_BYTES_MAX + 1}"
    )


def test_nested_function_calls_parse_to_4_kb() -> None:
    # size(size(...)) is refused for its operand type, after parsing 680 nested calls.
    text = "size(" * 680 + "a" + ")" * 680 + " > :v"
    assert len(text) <= limits.EXPRESSION_BYTES_MAX
    assert condition_error(text).endswith("operator count: 681")
    assert condition_error("size(size(a)) > :v") == (
        "Invalid ConditionExpression: Incorrect operand type for operator or function; "
        "operator or function: size, operand type: N"
    )


def test_update_set_operands_nest_to_4_kb() -> None:
    # Functions nest in SET as deep as 4 KB allows.
    levels = 255  # the most that fit in 4 KB: 16 bytes a level
    text = "SET l = " + "list_append(" * levels + ":l" + ",:l)" * levels
    assert len(text) <= limits.EXPRESSION_BYTES_MAX
    values = {":l": {"L": [{"N": "1"}]}}

    def apply() -> dict:
        expressions.clear_caches()
        return expressions.update(text, None, values).apply({"pk": {"S": "k"}})

    assert len(frames_left(300, apply)["l"]["L"]) == levels + 1
    # Parentheses around a SET value are kept on no stack either. (DynamoDB documents no refusal
    # of doubled ones there, unlike in conditions; dynalab accepts them, as it always has.)
    grouped = "SET n = " + "(" * 1500 + "n + :v" + ")" * 1500

    def increment() -> dict:
        expressions.clear_caches()
        return expressions.update(grouped, None, {":v": {"N": "1"}}).apply({"n": {"N": "41"}})

    assert frames_left(60, increment)["n"] == {"N": "42"}
