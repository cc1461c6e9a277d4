"""Rendering trees to text: parse(render(t)) == t, hence parse(render(parse(x))) == parse(x)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.expressions import ast
from core.expressions.parser import FUNCTIONS, parse_condition, parse_projection, parse_update

_KEYWORDS = {"and", "or", "not", "between", "in", "set", "remove", "add", "delete"}

_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
_REST = _FIRST + "0123456789"
names = st.builds(
    lambda first, rest: first + rest,
    st.sampled_from(_FIRST),
    st.text(alphabet=_REST, max_size=6),
).filter(lambda name: name.lower() not in _KEYWORDS)
placeholders = st.text(alphabet=_REST, min_size=1, max_size=5).map(lambda text: "#" + text)
value_placeholders = st.text(alphabet=_REST, min_size=1, max_size=5).map(lambda text: ":" + text)
paths = st.builds(
    lambda head, tail: (head, *tail),
    names | placeholders,
    st.lists(names | placeholders | st.integers(0, 30), max_size=3),
)
path_operands = st.builds(ast.PathOperand, paths)
values = st.builds(ast.ValueOperand, value_placeholders)
simple_operands = path_operands | values
operands = st.recursive(
    simple_operands,
    lambda inner: st.builds(ast.Call, names, st.lists(inner, min_size=1, max_size=3).map(tuple)),
    max_leaves=4,
)
comparators = st.sampled_from(["=", "<>", "<", "<=", ">", ">="])
atoms = (
    st.builds(ast.Compare, comparators, operands, operands)
    | st.builds(ast.Between, operands, operands, operands)
    | st.builds(ast.In, operands, st.lists(operands, min_size=1, max_size=4).map(tuple))
    | st.builds(ast.Call, names, st.lists(operands, min_size=1, max_size=3).map(tuple))
)
conditions = st.recursive(
    atoms,
    lambda inner: (
        st.builds(ast.And, inner, inner)
        | st.builds(ast.Or, inner, inner)
        | st.builds(ast.Not, inner)
    ),
    max_leaves=8,
)

# An update calls only DynamoDB's functions: any other name followed by "(" does not parse.
update_operands = st.recursive(
    simple_operands,
    lambda inner: st.builds(
        ast.Call,
        st.sampled_from(sorted(FUNCTIONS)),
        st.lists(inner, min_size=1, max_size=3).map(tuple),
    ),
    max_leaves=4,
)
set_values = update_operands | st.builds(
    ast.Arithmetic, st.sampled_from(["+", "-"]), update_operands, update_operands
)
actions = {
    "SET": st.builds(ast.SetAction, paths, set_values),
    "REMOVE": st.builds(ast.RemoveAction, paths),
    "ADD": st.builds(ast.AddAction, paths, values),
    "DELETE": st.builds(ast.DeleteAction, paths, values),
}
updates = st.permutations(list(actions)).flatmap(
    lambda order: st.lists(
        st.sampled_from(order).flatmap(
            lambda keyword: st.builds(
                ast.UpdateClause,
                st.just(keyword),
                st.lists(actions[keyword], min_size=1, max_size=3).map(tuple),
            )
        ),
        min_size=1,
        max_size=4,
        unique_by=lambda clause: clause.keyword,
    ).map(lambda clauses: ast.UpdateExpression(tuple(clauses)))
)
projections = st.lists(paths, min_size=1, max_size=5).map(
    lambda items: ast.ProjectionExpression(tuple(items))
)


def _restyle(text: str, seed: int) -> str:
    """The same expression with different spacing and keyword case, as clients write them."""
    chooser = random.Random(seed)
    out = []
    for word in text.split(" "):
        if word.upper() in ("AND", "OR", "NOT", "BETWEEN", "IN"):
            word = chooser.choice([word.lower(), word.upper(), word.capitalize()])
        out.append(word)
    return chooser.choice(["  ", " ", "\t", "\n "]).join(out)


@pytest.mark.slow  # 200 deep trees: the full suite runs it, `make test-fast` leaves it out.
@settings(max_examples=200, deadline=None)
@given(conditions)
def test_condition_render_parse_round_trip(tree: ast.Condition) -> None:
    text = ast.render_condition(tree)
    assert parse_condition(text).tree == tree
    assert not any(f.category == "parens" for f in parse_condition(text).findings), text


@settings(max_examples=100, deadline=None)
@given(conditions, st.integers())
def test_parse_render_parse_is_stable_for_restyled_text(tree: ast.Condition, seed: int) -> None:
    text = _restyle(ast.render_condition(tree), seed)
    first = parse_condition(text).tree
    assert isinstance(
        first, ast.Compare | ast.Between | ast.In | ast.And | ast.Or | ast.Not | ast.Call
    )
    assert parse_condition(ast.render_condition(first)).tree == first


@pytest.mark.slow  # As above, for updates.
@settings(max_examples=100, deadline=None)
@given(updates)
def test_update_render_parse_round_trip(tree: ast.UpdateExpression) -> None:
    assert parse_update(ast.render_update(tree)).tree == tree


@settings(max_examples=100, deadline=None)
@given(projections)
def test_projection_render_parse_round_trip(tree: ast.ProjectionExpression) -> None:
    assert parse_projection(ast.render_projection(tree)).tree == tree
