"""Tokenizing and parsing expressions: trees, precedence, syntax and parse-time errors."""

from __future__ import annotations

import pytest

from core import expressions, limits
from core.errors import ValidationError
from core.expressions import ast
from core.expressions.parser import Parsed, parse_condition, parse_projection, parse_update
from core.expressions.reserved import RESERVED_WORDS, is_reserved
from core.expressions.tokens import tokenize


def tree(text: str) -> ast.Condition | ast.UpdateExpression | ast.ProjectionExpression:
    return parse_condition(text).tree


def condition_error(
    text: str, names: dict[str, str] | None = None, values: dict | None = None
) -> str:
    with pytest.raises(ValidationError) as raised:
        expressions.condition(text, names, values)
    return raised.value.message


def path(*elements: str | int) -> ast.PathOperand:
    return ast.PathOperand(tuple(elements))


def value(name: str) -> ast.ValueOperand:
    return ast.ValueOperand(name)


# Tokens -----------------------------------------------------------------------------------------


def test_tokenizer_kinds_and_offsets() -> None:
    tokens = tokenize(" a.#b[12] <= :v1 ")
    assert [(t.kind, t.text) for t in tokens] == [
        ("name", "a"),
        (".", "."),
        ("#", "#b"),
        ("[", "["),
        ("int", "12"),
        ("]", "]"),
        ("<=", "<="),
        (":", ":v1"),
        ("eof", ""),
    ]
    assert (tokens[0].start, tokens[0].end) == (1, 2)
    assert tokens[-1].start == 17


def test_tokenizer_keeps_lone_sigils_and_unknown_characters_as_bad_tokens() -> None:
    assert [t.kind for t in tokenize("# : !")] == ["bad", "bad", "bad", "eof"]


# Syntax errors ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # As DynamoDB words them: the token, and the text from the token before to the one after.
        ("foo", 'Syntax error; token: "<EOF>", near: "foo"'),
        ("attribute_not_exists(", 'Syntax error; token: "<EOF>", near: "("'),
        ("a = :v )", 'Syntax error; token: ")", near: ":v )"'),
        ("a == :v", 'Syntax error; token: "=", near: "== :v"'),
        ("a = :v AND", 'Syntax error; token: "<EOF>", near: "AND"'),
        ("a = b = c", 'Syntax error; token: "=", near: "b = c"'),
        ("a != b", 'Syntax error; token: "!", near: "a !="'),
        ("a[x] = b", 'Syntax error; token: "x", near: "[x]"'),
        ("a BETWEEN b c", 'Syntax error; token: "c", near: "b c"'),
        ("a IN :v", 'Syntax error; token: ":v", near: "IN :v"'),
        ("a IN ()", 'Syntax error; token: ")", near: "()"'),
        ("NOT a", 'Syntax error; token: "<EOF>", near: "a"'),
        ("a AND b = c", 'Syntax error; token: "AND", near: "a AND b"'),
        ("(a) AND b = c", 'Syntax error; token: "AND", near: ") AND b"'),
        ("a = b AND c", 'Syntax error; token: "<EOF>", near: "c"'),
        ("size()", 'Syntax error; token: ")", near: "()"'),
        ("a.and = :v", 'Syntax error; token: "and", near: ".and ="'),
        ("   ", 'Syntax error; token: "<EOF>", near: ""'),
    ],
)
def test_condition_syntax_errors(text: str, message: str) -> None:
    assert condition_error(text, {"#n": "n"}, {":v": {"S": "x"}}) == (
        f"Invalid ConditionExpression: {message}"
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ADD hits : incr", 'Syntax error; token: ":", near: "hits : incr"'),
        ("INVALID SYNTAX HERE", 'Syntax error; token: "INVALID", near: "INVALID SYNTAX"'),
        ("SET a = :v,", 'Syntax error; token: "<EOF>", near: ","'),
        ("SET a = :v b = :v", 'Syntax error; token: "b", near: ":v b ="'),
        ("SET a = :v + :v + :v", 'Syntax error; token: "+", near: ":v + :v"'),
        ("SET a = (:v + :v) + :v", 'Syntax error; token: "+", near: ") + :v"'),
        ("SET a = :v + (:v + :v)", 'Syntax error; token: "+", near: ":v + :v"'),
        ("ADD a b", 'Syntax error; token: "b", near: "a b"'),
        ("REMOVE set", 'Syntax error; token: "set", near: "REMOVE set"'),
        ("SET", 'Syntax error; token: "<EOF>", near: "SET"'),
    ],
)
def test_update_syntax_errors(text: str, message: str) -> None:
    with pytest.raises(ValidationError) as raised:
        expressions.update(text, None, {":v": {"N": "1"}})
    assert raised.value.message == f"Invalid UpdateExpression: {message}"


def test_projection_syntax_error() -> None:
    with pytest.raises(ValidationError) as raised:
        expressions.projection("a, , b")
    assert raised.value.message == (
        'Invalid ProjectionExpression: Syntax error; token: ",", near: ", , b"'
    )


@pytest.mark.parametrize("kind", ["ConditionExpression", "FilterExpression"])
def test_empty_expression(kind: str) -> None:
    with pytest.raises(ValidationError) as raised:
        expressions.condition("", kind=kind)
    assert raised.value.message == f"Invalid {kind}: The expression can not be empty;"


def test_expression_size_limit_counts_utf8_bytes() -> None:
    fits = "a = :v AND b = :v OR " * 190 + "c = :v"
    assert len(fits.encode()) <= limits.EXPRESSION_BYTES_MAX
    parse_condition(fits)
    too_long = "é" * (limits.EXPRESSION_BYTES_MAX // 2 + 1)
    with pytest.raises(ValidationError) as raised:
        expressions.update(too_long)
    assert raised.value.message == (
        "Invalid UpdateExpression: Expression size has exceeded the maximum allowed size; "
        f"expression size: {len(too_long.encode())}"
    )


def test_non_string_expression_is_a_serialization_error() -> None:
    from core.errors import SerializationError

    with pytest.raises(SerializationError):
        expressions.condition(12)  # type: ignore[arg-type]


# Trees and precedence ---------------------------------------------------------------------------


def test_comparisons_and_operands() -> None:
    assert tree("a.b[1].#c >= :v") == ast.Compare(">=", path("a", "b", 1, "#c"), value(":v"))
    assert tree("size(a) <> :v") == ast.Compare("<>", ast.Call("size", (path("a"),)), value(":v"))
    assert tree(":v < a") == ast.Compare("<", value(":v"), path("a"))


def test_between_in_and_functions() -> None:
    assert tree("a BETWEEN :l AND :h") == ast.Between(path("a"), value(":l"), value(":h"))
    assert tree("a IN (:x, b, size(c))") == ast.In(
        path("a"), (value(":x"), path("b"), ast.Call("size", (path("c"),)))
    )
    assert tree("begins_with (a, :p)") == ast.Call("begins_with", (path("a"), value(":p")))


def test_precedence_not_binds_tighter_than_and_than_or() -> None:
    a, b, c = (ast.Compare("=", path(n), value(":v")) for n in "abc")
    assert tree("a = :v OR b = :v AND c = :v") == ast.Or(a, ast.And(b, c))
    assert tree("a = :v AND b = :v OR c = :v") == ast.Or(ast.And(a, b), c)
    assert tree("NOT a = :v AND b = :v") == ast.And(ast.Not(a), b)
    assert tree("NOT (a = :v AND b = :v)") == ast.Not(ast.And(a, b))
    assert tree("a = :v AND (b = :v OR c = :v)") == ast.And(a, ast.Or(b, c))
    assert tree("a = :v AND b = :v AND c = :v") == ast.And(ast.And(a, b), c)
    assert tree("NOT NOT a = :v") == ast.Not(ast.Not(a))


def test_keywords_are_case_insensitive_and_functions_case_sensitive() -> None:
    assert tree("a between :l and :h or not b in (:x)") == ast.Or(
        ast.Between(path("a"), value(":l"), value(":h")),
        ast.Not(ast.In(path("b"), (value(":x"),))),
    )
    assert tree("Size(a) = :v") == ast.Compare("=", ast.Call("Size", (path("a"),)), value(":v"))


def test_parentheses_around_operands_and_conditions() -> None:
    assert tree("(a) = (:v)") == ast.Compare("=", path("a"), value(":v"))
    assert tree("(a = :v)") == ast.Compare("=", path("a"), value(":v"))
    assert tree("((a = :v AND b = :v) AND c = :v)") == tree("a = :v AND b = :v AND c = :v")


def test_placeholders_used_are_collected() -> None:
    parsed = parse_condition("#a.b = :x OR contains(#c, :y)")
    assert parsed.names_used == {"#a", "#c"}
    assert parsed.values_used == {":x", ":y"}


def test_update_tree_keeps_clause_order() -> None:
    parsed = parse_update("remove a, b[2] SET c = if_not_exists(c, :z) + :one ADD d :s delete e :s")
    assert parsed.tree == ast.UpdateExpression(
        (
            ast.UpdateClause("REMOVE", (ast.RemoveAction(("a",)), ast.RemoveAction(("b", 2)))),
            ast.UpdateClause(
                "SET",
                (
                    ast.SetAction(
                        ("c",),
                        ast.Arithmetic(
                            "+", ast.Call("if_not_exists", (path("c"), value(":z"))), value(":one")
                        ),
                    ),
                ),
            ),
            ast.UpdateClause("ADD", (ast.AddAction(("d",), value(":s")),)),
            ast.UpdateClause("DELETE", (ast.DeleteAction(("e",), value(":s")),)),
        )
    )


def test_update_set_value_parentheses() -> None:
    expected = ast.SetAction(("a",), ast.Arithmetic("-", path("b"), value(":v")))
    for text in ("SET a = (b - :v)", "SET a = (b) - (:v)", "SET a=b-:v"):
        parsed = parse_update(text)
        assert isinstance(parsed.tree, ast.UpdateExpression)
        assert parsed.tree.clauses[0].actions == (expected,)


def test_projection_tree() -> None:
    assert parse_projection("a, b.c[0], #d").tree == ast.ProjectionExpression(
        (("a",), ("b", "c", 0), ("#d",))
    )


# Parse-time findings, ranked -------------------------------------------------------------------


def test_redundant_parentheses() -> None:
    message = "Invalid ConditionExpression: The expression has redundant parentheses;"
    assert condition_error("((a = :v))", None, {":v": {"S": "x"}}) == message
    assert condition_error("((a)) = :v", None, {":v": {"S": "x"}}) == message
    assert condition_error("a = :v AND ((b = :v OR c = :v))", None, {":v": {"S": "x"}}) == message
    assert condition_error("size(((a))) = :v", None, {":v": {"N": "1"}}) == message


def test_reserved_words_are_rejected_as_bare_names() -> None:
    assert condition_error("Status = :v", None, {":v": {"S": "x"}}) == (
        "Invalid ConditionExpression: Attribute name is a reserved keyword; "
        "reserved keyword: Status"
    )
    assert condition_error("a.size = :v", None, {":v": {"S": "x"}}).endswith(
        "reserved keyword: size"
    )
    expressions.condition("#s = :v", {"#s": "Status"}, {":v": {"S": "x"}})
    with pytest.raises(ValidationError, match="reserved keyword: name"):
        expressions.projection("a, name")
    with pytest.raises(ValidationError, match="reserved keyword: count"):
        expressions.update("SET count = :v", None, {":v": {"N": "1"}})


def test_reserved_word_list() -> None:
    assert len(RESERVED_WORDS) == 573
    assert {"ABORT", "ZONE", "STATUS", "NAME", "SIZE", "TTL", "VALUE"} <= RESERVED_WORDS
    assert is_reserved("timestamp") and is_reserved("Date")
    assert not is_reserved("pk") and not is_reserved("attribute_exists")


def test_update_section_used_twice() -> None:
    with pytest.raises(ValidationError) as raised:
        expressions.update("SET a = :v REMOVE b set c = :v", None, {":v": {"N": "1"}})
    assert raised.value.message == (
        'Invalid UpdateExpression: The "SET" section can only be used once in an update expression;'
    )


def test_in_operand_limit() -> None:
    values = {f":v{i}": {"N": str(i)} for i in range(limits.EXPRESSION_IN_OPERANDS_MAX + 1)}
    choices = list(values)
    expressions.condition(
        f"a IN ({', '.join(choices[:-1])})", None, dict(list(values.items())[:-1])
    )
    assert condition_error(f"a IN ({', '.join(choices)})", None, values) == (
        "Invalid ConditionExpression: The IN operator is provided with too many operands; "
        f"number of operands: {limits.EXPRESSION_IN_OPERANDS_MAX + 1}"
    )


def test_operator_limit() -> None:
    count = limits.EXPRESSION_OPERATORS_MAX // 2 + 1
    text = " OR ".join(["a = :v"] * count)  # count comparisons and count - 1 ORs
    assert condition_error(text, None, {":v": {"S": "x"}}) == (
        "Invalid ConditionExpression: The expression contains too many operators; "
        f"operator count: {2 * count - 1}"
    )
    within = " OR ".join(["a = :v"] * (count - 1))
    expressions.condition(within, None, {":v": {"S": "x"}})


def test_parse_results_are_cached_per_text() -> None:
    text = "attribute_exists(cache_probe) AND cache_probe > :v"
    first = expressions.parse_cached("condition", text)
    assert isinstance(first, Parsed)
    assert expressions.parse_cached("condition", text) is first
    failure = expressions.parse_cached("condition", "cache_probe ==")
    assert isinstance(failure, str) and failure.startswith("Syntax error")
    assert expressions.parse_cached("condition", "cache_probe ==") is failure
