"""Update expressions: SET, REMOVE, ADD and DELETE as DynamoDB applies them, and their errors."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from core import expressions, limits
from core.errors import ValidationError

Item = dict[str, Any]


def apply(
    text: str, item: Item, values: dict[str, Any] | None = None, names: dict[str, str] | None = None
) -> Item:
    before = copy.deepcopy(item)
    result = expressions.update(text, names, values).apply(item)
    assert item == before, "the input item must not change"
    return result


def runtime_error(text: str, item: Item, values: dict[str, Any] | None = None) -> str:
    compiled = expressions.update(text, None, values)
    with pytest.raises(ValidationError) as raised:
        compiled.apply(item)
    return raised.value.message


def compile_error(
    text: str, values: dict[str, Any] | None = None, names: dict[str, str] | None = None
) -> str:
    with pytest.raises(ValidationError) as raised:
        expressions.update(text, names, values)
    return raised.value.message


N = {"N": "1"}


# SET --------------------------------------------------------------------------------------------


def test_set_adds_and_replaces_attributes() -> None:
    item = {"pk": {"S": "k"}, "a": {"S": "old"}}
    assert apply("SET a = :v, b = :w", item, {":v": {"S": "new"}, ":w": N}) == {
        "pk": {"S": "k"},
        "a": {"S": "new"},
        "b": N,
    }


def test_set_nested_map_member_and_list_element() -> None:
    item = {"m": {"M": {"x": N}}, "l": {"L": [{"S": "a"}, {"S": "b"}]}}
    assert apply("SET m.y = :v, l[1] = :v", item, {":v": {"S": "z"}}) == {
        "m": {"M": {"x": N, "y": {"S": "z"}}},
        "l": {"L": [{"S": "a"}, {"S": "z"}]},
    }


def test_set_past_the_end_of_a_list_appends_in_index_order() -> None:
    item = {"l": {"L": [{"S": "a"}]}}
    result = apply("SET l[9] = :c, l[5] = :b", item, {":b": {"S": "b"}, ":c": {"S": "c"}})
    assert result == {"l": {"L": [{"S": "a"}, {"S": "b"}, {"S": "c"}]}}


def test_set_copies_other_attributes_and_does_arithmetic() -> None:
    item = {"a": {"N": "5"}, "b": {"N": "2.5"}, "m": {"M": {"k": {"L": [N]}}}}
    result = apply("SET c = a + b, d = a - :v, e = m.k, f = :v - m.k[0]", item, {":v": {"N": "10"}})
    assert result["c"] == {"N": "7.5"}
    assert result["d"] == {"N": "-5"}
    assert result["e"] == {"L": [N]}
    assert result["f"] == {"N": "9"}


def test_every_action_reads_the_item_as_it_was_before_the_update() -> None:
    item = {"a": {"S": "A"}, "b": {"S": "B"}}
    assert apply("SET a = b, b = a", item) == {"a": {"S": "B"}, "b": {"S": "A"}}


def test_if_not_exists() -> None:
    values = {":zero": {"N": "0"}, ":one": N}
    counter = "SET n = if_not_exists(n, :zero) + :one"
    assert apply(counter, {}, values) == {"n": N}
    assert apply(counter, {"n": {"N": "41"}}, values) == {"n": {"N": "42"}}
    assert apply("SET x = if_not_exists(y, z)", {"z": {"S": "z"}}) == {
        "z": {"S": "z"},
        "x": {"S": "z"},
    }


def test_list_append_at_either_end() -> None:
    item = {"l": {"L": [{"S": "b"}]}}
    values = {":front": {"L": [{"S": "a"}]}, ":back": {"L": [{"S": "c"}]}}
    assert apply("SET l = list_append(:front, l)", item, values)["l"]["L"] == [
        {"S": "a"},
        {"S": "b"},
    ]
    assert apply("SET l = list_append(l, :back)", item, values)["l"]["L"] == [
        {"S": "b"},
        {"S": "c"},
    ]
    assert apply("SET n = list_append(if_not_exists(n, :front), :back)", item, values)["n"][
        "L"
    ] == [{"S": "a"}, {"S": "c"}]


def test_functions_nest_as_operands() -> None:
    """The API Reference's SET grammar: `if_not_exists (path, operand)`, `list_append (operand,
    operand)`, and an operand is a path or a function, so functions nest inside each other."""
    values = {":a": {"L": [{"S": "a"}]}, ":b": {"L": [{"S": "b"}]}, ":n": N}
    item = {"l": {"L": [{"S": "l"}]}}
    assert apply("SET x = if_not_exists(x, list_append(:a, :b))", item, values)["x"]["L"] == [
        {"S": "a"},
        {"S": "b"},
    ]
    assert apply("SET l = if_not_exists(l, list_append(:a, :b))", item, values) == item
    assert apply("SET l = list_append(list_append(:a, l), :b)", item, values)["l"]["L"] == [
        {"S": "a"},
        {"S": "l"},
        {"S": "b"},
    ]
    nested = "SET x = if_not_exists(x, if_not_exists(l, :a)), y = if_not_exists(y, :n) + :n"
    assert apply(nested, item, values) == {**item, "x": item["l"], "y": {"N": "2"}}


def test_arithmetic_is_no_function_operand() -> None:
    """`+` and `-` join operands of SET's value; a function's arguments are operands, so an
    addition inside one is a syntax error at the operator."""
    values = {":a": {"L": []}, ":n": N}
    assert compile_error("SET x = list_append(:a + :a, :a)", values) == PREFIX + (
        'Syntax error; token: "+", near: ":a + :a"'
    )
    assert compile_error("SET x = if_not_exists(x, :n - :n)", values) == PREFIX + (
        'Syntax error; token: "-", near: ":n - :n"'
    )
    # Only one operator: the sum of a sum is refused where the second operator stands.
    assert compile_error("SET x = :n + :n + :n", values) == PREFIX + (
        'Syntax error; token: "+", near: ":n + :n"'
    )


def test_result_does_not_share_values_with_the_expression() -> None:
    compiled = expressions.update("SET a = :v", None, {":v": {"L": [N]}})
    first = compiled.apply({})
    first["a"]["L"].append(N)
    assert compiled.apply({}) == {"a": {"L": [N]}}


# REMOVE -----------------------------------------------------------------------------------------


def test_remove_attributes_and_map_members() -> None:
    item = {"a": N, "b": N, "m": {"M": {"x": N, "y": N}}}
    assert apply("REMOVE a, m.x, absent", item) == {"b": N, "m": {"M": {"y": N}}}


def test_remove_list_elements_shifts_the_rest() -> None:
    item = {"l": {"L": [{"S": "a"}, {"S": "b"}, {"S": "c"}, {"S": "d"}]}}
    assert apply("REMOVE l[0]", item)["l"]["L"] == [{"S": "b"}, {"S": "c"}, {"S": "d"}]
    # Indexes refer to the list before the update (Developer Guide: REMOVE RelatedItems[1], [2]).
    assert apply("REMOVE l[1], l[2]", item)["l"]["L"] == [{"S": "a"}, {"S": "d"}]
    assert apply("REMOVE l[9]", item) == item


def test_remove_and_set_in_one_list_use_original_indexes() -> None:
    item = {"l": {"L": [{"S": "a"}, {"S": "b"}, {"S": "c"}]}}
    result = apply(
        "REMOVE l[0] SET l[2] = :x, l[7] = :y", item, {":x": {"S": "X"}, ":y": {"S": "Y"}}
    )
    assert result["l"]["L"] == [{"S": "b"}, {"S": "X"}, {"S": "Y"}]


# ADD and DELETE ---------------------------------------------------------------------------------


def test_add_numbers_and_create_absent_attributes() -> None:
    assert apply("ADD n :v", {"n": {"N": "1.5"}}, {":v": {"N": "-0.5"}}) == {"n": N}
    assert apply("ADD n :v", {}, {":v": {"N": "3"}}) == {"n": {"N": "3"}}
    assert apply("ADD s :v", {}, {":v": {"SS": ["a"]}}) == {"s": {"SS": ["a"]}}


def test_add_to_sets_keeps_members_unique() -> None:
    item = {"ss": {"SS": ["a", "b"]}, "ns": {"NS": ["1"]}}
    values = {":s": {"SS": ["b", "c"]}, ":n": {"NS": ["1.0", "2"]}}
    result = apply("ADD ss :s, ns :n", item, values)
    assert result == {"ss": {"SS": ["a", "b", "c"]}, "ns": {"NS": ["1", "2"]}}


def test_add_and_delete_nested_paths() -> None:
    item = {"m": {"M": {"hits": N, "tags": {"SS": ["x", "y"]}}}}
    result = apply("ADD m.hits :n DELETE m.tags :t", item, {":n": N, ":t": {"SS": ["x"]}})
    assert result == {"m": {"M": {"hits": {"N": "2"}, "tags": {"SS": ["y"]}}}}


def test_delete_elements_from_sets() -> None:
    item = {"ss": {"SS": ["a", "b", "c"]}, "bs": {"BS": ["AQ==", "Ag=="]}}
    values = {":s": {"SS": ["a", "z"]}, ":b": {"BS": ["AQ=="]}}
    assert apply("DELETE ss :s, bs :b", item, values) == {
        "ss": {"SS": ["b", "c"]},
        "bs": {"BS": ["Ag=="]},
    }


def test_deleting_every_element_removes_the_attribute() -> None:
    item = {"ns": {"NS": ["1", "2"]}, "l": {"L": [{"NS": ["1"]}, N]}}
    values = {":all": {"NS": ["2", "1"]}, ":one": {"NS": ["1"]}}
    assert apply("DELETE ns :all, l[0] :one", item, values) == {"l": {"L": [N]}}
    assert apply("DELETE absent :one", {}, values) == {}


@pytest.mark.parametrize(
    ("text", "item", "value"),
    [
        ("ADD n :v", {"n": {"S": "x"}}, {"N": "1"}),
        ("ADD s :v", {"s": {"SS": ["a"]}}, {"NS": ["1"]}),
        ("ADD s :v", {"s": {"NS": ["1"]}}, {"N": "1"}),
        ("DELETE s :v", {"s": {"SS": ["a"]}}, {"NS": ["1"]}),
        ("DELETE s :v", {"s": {"N": "1"}}, {"NS": ["1"]}),
        ("SET a = b + :v", {"b": {"S": "x"}}, {"N": "1"}),
        ("SET a = :v - b", {"b": {"NS": ["1"]}}, {"N": "1"}),
        ("SET a = list_append(b, :v)", {"b": {"SS": ["x"]}}, {"L": []}),
        ("SET a = list_append(:v, b)", {"b": {"S": "x"}}, {"L": []}),
    ],
)
def test_operands_of_the_wrong_type_at_runtime(
    text: str, item: Item, value: dict[str, Any]
) -> None:
    assert runtime_error(text, item, {":v": value}) == (
        "An operand in the update expression has an incorrect data type"
    )


@pytest.mark.parametrize(
    ("text", "item", "value"),
    [
        ("ADD s :v", {"s": {"SS": ["a"]}}, {"NS": ["1"]}),
        ("ADD n :v", {"n": {"S": "x"}}, {"N": "1"}),
        ("DELETE s :v", {"s": {"SS": ["a"]}}, {"NS": ["1"]}),
    ],
)
def test_a_legacy_update_calls_a_type_mismatch_so(
    text: str, item: Item, value: dict[str, Any]
) -> None:
    # AttributeUpdates' ADD and DELETE, translated into these expressions, keep DynamoDB's words.
    compiled = expressions.update(text, None, {":v": value}, legacy=True)
    with pytest.raises(ValidationError) as raised:
        compiled.apply(item)
    assert raised.value.message == "Type mismatch for attribute to update"


@pytest.mark.parametrize(
    "text",
    ["SET a = b", "SET a = b.c + :v", "SET a = list_append(b, :l)", "SET a = if_not_exists(c, b)"],
)
def test_reading_an_absent_attribute(text: str) -> None:
    assert runtime_error(text, {"x": N}, {":v": N, ":l": {"L": []}}) == (
        "The provided expression refers to an attribute that does not exist in the item"
    )


@pytest.mark.parametrize(
    "text",
    [
        "SET y.a = :v",  # parent missing
        "SET y[1] = :v",
        "SET m[0] = :v",  # an index into a map
        "SET l.x = :v",  # a member of a list
        "SET s.a = :v",  # a member of a string
        "SET l[5].x = :v",  # an element past the end
        "REMOVE y.a",
        "REMOVE m[0]",
        "ADD y.a :v",
        "ADD l.x :v",
        "DELETE m[1] :s",
    ],
)
def test_paths_through_absent_or_wrong_containers(text: str) -> None:
    item = {"m": {"M": {"k": N}}, "l": {"L": [N]}, "s": {"S": "x"}}
    assert runtime_error(text, item, {":v": N, ":s": {"SS": ["a"]}}) == (
        "The document path provided in the update expression is invalid for update"
    )


def test_nesting_depth_limit() -> None:
    def nested(levels: int) -> dict[str, Any]:
        value: dict[str, Any] = {"S": "leaf"}
        for _ in range(levels - 1):
            value = {"M": {"k": value}}
        return value

    item = {"m": nested(2)}
    deepest = limits.NESTING_DEPTH_MAX - 1  # "m" itself is the first level
    apply("SET m.k = :v", item, {":v": nested(deepest)})
    assert runtime_error("SET m.k = :v", item, {":v": nested(deepest + 1)}) == (
        "Nesting Levels have exceeded supported limits"
    )


def test_number_overflow_is_reported() -> None:
    big = {"N": "9.9999999999999999999999999999999999999E+125"}
    message = runtime_error("ADD n :v", {"n": big}, {":v": big})
    assert message.startswith("Number overflow")


def test_nested_update_as_dynamodb_applies_it() -> None:
    # An UpdateItem whose result and UPDATED_NEW were recorded from DynamoDB by dynalite's tests.
    key = {"S": "k"}
    item = {
        "a": key,
        "b": {"M": {"a": {"N": "1"}, "b": {"N": "2"}, "c": {"N": "3"}}},
        "c": {"L": [{"N": "1"}, {"N": "3"}]},
    }
    compiled = expressions.update(
        "set b.c=((c[1])+(b.a)),b.a = a,c[1] = a, c[4] = b.a - b.b, c[2] = b.c "
        "add c[8] :b, c[6] :a",
        None,
        {":a": {"N": "2"}, ":b": {"SS": ["a"]}},
    )
    new = compiled.apply(item)
    assert new == {
        "a": key,
        "b": {"M": {"a": key, "b": {"N": "2"}, "c": {"N": "4"}}},
        "c": {"L": [{"N": "1"}, key, {"N": "3"}, {"N": "-1"}, {"N": "2"}, {"SS": ["a"]}]},
    }
    assert compiled.returned_attributes(item, new, "UPDATED_NEW") == {
        "b": {"M": {"a": key, "c": {"N": "4"}}},
        "c": {"L": [key, {"N": "3"}, {"N": "2"}]},
    }


# Compile-time errors ----------------------------------------------------------------------------

PREFIX = "Invalid UpdateExpression: "


@pytest.mark.parametrize(
    ("clause", "value", "type_name"),
    [
        ("ADD", {"S": "x"}, "STRING"),
        ("ADD", {"B": "AQ=="}, "BINARY"),
        ("ADD", {"BOOL": True}, "BOOLEAN"),
        ("ADD", {"NULL": True}, "NULL"),
        ("ADD", {"L": []}, "LIST"),
        ("ADD", {"M": {}}, "MAP"),
        ("DELETE", {"N": "1"}, "NUMBER"),
        ("DELETE", {"S": "x"}, "STRING"),
    ],
)
def test_add_and_delete_operand_types(clause: str, value: dict[str, Any], type_name: str) -> None:
    assert compile_error(f"{clause} a :v", {":v": value}) == PREFIX + (
        f"Incorrect operand type for operator or function; operator: {clause}, "
        f"operand type: {type_name}"
    )


@pytest.mark.parametrize(
    ("text", "value", "message"),
    [
        ("SET a = b + :v", {"S": "x"}, "operator or function: +, operand type: S"),
        ("SET a = :v - b", {"SS": ["x"]}, "operator or function: -, operand type: SS"),
        (
            "SET a = list_append(b, :v)",
            {"N": "1"},
            "operator or function: list_append, operand type: N",
        ),
    ],
)
def test_function_and_arithmetic_operand_types(
    text: str, value: dict[str, Any], message: str
) -> None:
    assert compile_error(text, {":v": value}) == PREFIX + (
        f"Incorrect operand type for operator or function; {message}"
    )


def test_function_errors() -> None:
    assert compile_error("SET a = size(b)") == PREFIX + (
        "The function is not allowed in an update expression; function: size"
    )
    assert compile_error("SET a = attribute_exists(b)") == PREFIX + (
        "The function is not allowed in an update expression; function: attribute_exists"
    )
    # A name that is not one of DynamoDB's functions cannot be called at all, whatever its case.
    assert compile_error("SET a = foo(b)") == PREFIX + 'Syntax error; token: "(", near: "foo(b"'
    assert compile_error("SET a = LIST_APPEND(b, c)") == PREFIX + (
        'Syntax error; token: "(", near: "LIST_APPEND(b"'
    )
    assert compile_error("SET a = list_append(b)") == PREFIX + (
        "Incorrect number of operands for operator or function; "
        "operator or function: list_append, number of operands: 1"
    )
    assert compile_error("SET a = if_not_exists(:v, b)", {":v": N}) == PREFIX + (
        "Operator or function requires a document path; operator or function: if_not_exists"
    )


@pytest.mark.parametrize(
    ("text", "one", "two"),
    [
        ("SET a = :v REMOVE a", "[a]", "[a]"),
        ("SET a = :v REMOVE a.b", "[a]", "[a, b]"),
        ("REMOVE a.b[1].c ADD a.b[1] :v", "[a, b, [1], c]", "[a, b, [1]]"),
        ("SET #a = :v, a = :v", "[a]", "[a]"),
    ],
)
def test_overlapping_paths(text: str, one: str, two: str) -> None:
    assert compile_error(text, {":v": N}, {"#a": "a"}) == PREFIX + (
        "Two document paths overlap with each other; must remove or rewrite one of these paths; "
        f"path one: {one}, path two: {two}"
    )


def test_conflicting_paths() -> None:
    assert compile_error("SET a.b = :v, a[0] = :v", {":v": N}) == PREFIX + (
        "Two document paths conflict with each other; must remove or rewrite one of these paths; "
        "path one: [a, b], path two: [a, [0]]"
    )


def test_disjoint_paths_are_fine() -> None:
    compiled = expressions.update("SET a.b = :v, a.c = :v, l[0] = :v REMOVE l[1]", None, {":v": N})
    assert compiled.paths == (("a", "b"), ("a", "c"), ("l", 0), ("l", 1))


@pytest.mark.parametrize(
    ("text", "values", "expected"),
    [
        ("SET a = size(b) SET name = :x", {":x": N}, "reserved keyword: name"),
        ("SET a = size(b) SET c = :x", {":x": N}, "not allowed in an update expression"),
        ("SET a = :x SET #c = :x", {":x": N}, 'The "SET" section can only be used once'),
        ("SET a = :u, #c = :x", {":x": N}, "attribute name: #c"),
        ("SET a = :u, b = :x REMOVE b", {":x": N}, "attribute value: :u"),
        ("SET a = :x REMOVE a ADD b :s", {":x": N, ":s": {"S": "x"}}, "overlap"),
        ("ADD b :s SET c = d + :s", {":s": {"S": "x"}}, "operator: ADD"),
    ],
)
def test_errors_are_reported_in_dynamodb_order(
    text: str, values: dict[str, Any], expected: str
) -> None:
    assert expected in compile_error(text, values)


# What an update touches and what UpdateItem returns ---------------------------------------------


def test_top_level_attributes_are_the_written_ones() -> None:
    compiled = expressions.update(
        "SET a.b = c, #d = :v REMOVE e[0] ADD f :v DELETE g :s",
        {"#d": "dee"},
        {":v": N, ":s": {"SS": ["x"]}},
    )
    assert compiled.top_level_attributes == {"a", "dee", "e", "f", "g"}
    assert compiled.names_used == {"#d"}
    assert compiled.values_used == {":v", ":s"}


def test_returned_attributes() -> None:
    compiled = expressions.update("SET a = :v, m.x = :v REMOVE r", None, {":v": {"S": "new"}})
    old = {"pk": {"S": "k"}, "a": {"S": "old"}, "m": {"M": {"x": N, "y": N}}, "r": N}
    new = compiled.apply(old)
    assert compiled.returned_attributes(old, new, "NONE") is None
    assert compiled.returned_attributes(old, new, "ALL_OLD") == old
    assert compiled.returned_attributes(old, new, "ALL_NEW") == new
    assert compiled.returned_attributes(old, new, "UPDATED_OLD") == {
        "a": {"S": "old"},
        "m": {"M": {"x": N}},
        "r": N,
    }
    assert compiled.returned_attributes(old, new, "UPDATED_NEW") == {
        "a": {"S": "new"},
        "m": {"M": {"x": {"S": "new"}}},
    }


def test_returned_attributes_of_a_new_item() -> None:
    compiled = expressions.update("SET a = :v", None, {":v": N})
    new = compiled.apply({"pk": {"S": "k"}})
    assert compiled.returned_attributes(None, new, "ALL_OLD") is None
    assert compiled.returned_attributes(None, new, "UPDATED_OLD") is None
    assert compiled.returned_attributes({"pk": {"S": "k"}}, new, "UPDATED_OLD") is None
    assert compiled.returned_attributes(None, new, "UPDATED_NEW") == {"a": N}


def test_returned_attributes_rejects_unknown_modes() -> None:
    compiled = expressions.update("REMOVE a")
    with pytest.raises(ValidationError, match="Member must satisfy enum value set"):
        compiled.returned_attributes({}, {}, "SOME")
