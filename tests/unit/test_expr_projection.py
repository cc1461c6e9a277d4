"""Projection expressions: what they return, and their errors."""

from __future__ import annotations

from typing import Any

import pytest

from core import expressions
from core.errors import ValidationError

ITEM: dict[str, Any] = {
    "pk": {"S": "k"},
    "a": {"S": "x"},
    "m": {"M": {"b": {"N": "1"}, "c": {"M": {"d": {"S": "deep"}, "e": {"S": "other"}}}}},
    "l": {"L": [{"S": "l0"}, {"M": {"x": {"N": "1"}, "y": {"N": "2"}}}, {"S": "l2"}, {"S": "l3"}]},
}


def project(text: str, names: dict[str, str] | None = None) -> dict[str, Any]:
    return expressions.projection(text, names).apply(ITEM)


def test_top_level_attributes() -> None:
    assert project("a, pk, absent") == {"a": {"S": "x"}, "pk": {"S": "k"}}


def test_nested_paths_keep_their_structure() -> None:
    assert project("m.c.d, m.b") == {
        "m": {"M": {"c": {"M": {"d": {"S": "deep"}}}, "b": {"N": "1"}}}
    }


def test_list_elements_come_back_in_index_order_without_gaps() -> None:
    assert project("l[3], l[0]") == {"l": {"L": [{"S": "l0"}, {"S": "l3"}]}}
    assert project("l[1].y, l[2]") == {"l": {"L": [{"M": {"y": {"N": "2"}}}, {"S": "l2"}]}}


def test_paths_that_resolve_to_nothing_add_nothing() -> None:
    assert project("m.c.absent, l[9], a.b, pk[0]") == {}


def test_placeholders() -> None:
    projection = expressions.projection("#m.#c.d, #a", {"#m": "m", "#c": "c", "#a": "a"})
    assert projection.apply(ITEM) == {
        "m": {"M": {"c": {"M": {"d": {"S": "deep"}}}}},
        "a": {"S": "x"},
    }
    assert projection.names_used == {"#m", "#c", "#a"}
    assert projection.values_used == frozenset()
    assert projection.top_level_attributes == {"m", "a"}


def test_projection_is_a_copy() -> None:
    result = project("l")
    result["l"]["L"].clear()
    assert ITEM["l"]["L"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (
            "a, a",
            "Two document paths overlap with each other; must remove or rewrite one of these "
            "paths; path one: [a], path two: [a]",
        ),
        (
            "m.c, m.c.d",
            "Two document paths overlap with each other; must remove or rewrite one of these "
            "paths; path one: [m, c], path two: [m, c, d]",
        ),
        (
            "l[0], l.x",
            "Two document paths conflict with each other; must remove or rewrite one of these "
            "paths; path one: [l, [0]], path two: [l, x]",
        ),
        (
            "#x",
            "An expression attribute name used in the document path is not defined; "
            "attribute name: #x",
        ),
        ("a, name", "Attribute name is a reserved keyword; reserved keyword: name"),
        ("", "The expression can not be empty;"),
    ],
)
def test_errors(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        expressions.projection(text)
    assert raised.value.message == f"Invalid ProjectionExpression: {message}"


def test_a_document_path_has_at_most_32_levels() -> None:
    # "DynamoDB supports nested attributes up to 32 levels deep" (Developer Guide, "Constraints"),
    # the top-level attribute being the first level; DynamoDB's words for a deeper path are
    # "Invalid ProjectionExpression: The document path has too many nesting levels; nesting
    # levels: 33" (recorded by Alternator's tests against DynamoDB). List indexes are levels too.
    assert project("m" + ".b" * 31) == {}
    assert project("l" + "[0]" * 31) == {}
    for deeper in ("m" + ".b" * 32, "l" + "[0]" * 32, "l[1]" + ".x" * 30 + "[0]"):
        with pytest.raises(ValidationError) as raised:
            project(deeper)
        assert raised.value.message == (
            "Invalid ProjectionExpression: The document path has too many nesting levels; "
            "nesting levels: 33"
        )


@pytest.mark.parametrize("index", ["2147483648", "99999999999999999999999"])
def test_a_list_index_past_a_32_bit_integer_is_out_of_range(index: str) -> None:
    # DynamoDB Local's INVALID_LIST_INDEX words, for an index above Java's int maximum.
    assert project("l[2147483647]") == {}
    with pytest.raises(ValidationError) as raised:
        project(f"l[{index}]")
    assert raised.value.message == (
        f"Invalid ProjectionExpression: List index is not within the allowable range; "
        f"index: [{index}]"
    )


def test_other_expressions_refuse_deep_paths_and_huge_indexes_under_their_own_name() -> None:
    deep = "a" + ".b" * 32
    with pytest.raises(ValidationError, match=r"^Invalid ConditionExpression: The document path"):
        expressions.condition(f"attribute_exists({deep})", None, None)
    with pytest.raises(ValidationError, match=r"^Invalid UpdateExpression: List index is not"):
        expressions.update("SET l[3000000000] = :v", None, {":v": {"S": "x"}})
