"""The PartiQL front end: tokens and their places, every statement form, every refusal, the plans
each statement becomes, and render/parse round trips."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import limits, partiql
from core.errors import ValidationError
from core.partiql import KeyNames, ReadPlan, WritePlan, ast
from core.partiql.parser import WELL_FORMED, parse
from core.partiql.planner import (
    BATCH_KEY_READ,
    EMPTY_SET,
    INSERT_NOT_A_MAP,
    KEY_EQUALITY,
    MIXED_SET,
    ORDER_BY_KEY,
    ORDER_BY_SCAN,
    ORDER_BY_SORT_KEY_ACROSS,
    ORDER_BY_WHERE,
    PARAMETER_COUNT,
    SET_FUNCTION_PATH,
    WRITE_ON_INDEX,
)
from core.partiql.tokens import NUMBER, QUOTED, STRING, WORD, tokenize

MUSIC = KeyNames("Artist", "SongTitle")
HASH_ONLY = KeyNames("id", None)


def refused(text: str, parameters: list[Any] | None = None, keys: KeyNames = MUSIC) -> str:
    with pytest.raises(ValidationError) as raised:
        partiql.plan(parse(text), parameters, keys)
    message = raised.value.message
    assert message is not None
    return message


def planned(text: str, parameters: list[Any] | None = None, keys: KeyNames = MUSIC) -> Any:
    return partiql.plan(parse(text), parameters, keys)


# Tokens ----------------------------------------------------------------------------------------


def test_tokens_keep_their_text_and_places() -> None:
    tokens = tokenize("SELECT \"a\"\"b\", 'it''s'\n  FROM t WHERE x >= -1.5e3 -- note\n")
    assert [(t.kind, t.text) for t in tokens[:5]] == [
        (WORD, "SELECT"),
        (QUOTED, 'a"b'),
        (",", ","),
        (STRING, "it's"),
        (WORD, "FROM"),
    ]
    assert tokens[1].place == "1:8:6"
    assert tokens[4].place == "2:3:4"
    assert [t.kind for t in tokens[8:11]] == [">=", "-", NUMBER]
    assert tokens[-1].kind == "eof"


def test_an_open_quote_is_one_bad_token_and_a_syntax_error() -> None:
    message = refused("SELECT * FROM t WHERE a = 'oops")
    assert message == f"{WELL_FORMED}unexpected character, found ''oops' at 1:27:5"


# Statement forms -------------------------------------------------------------------------------


def test_select_forms_parse() -> None:
    select = parse('select a, "b".c[2], d[\'k\'] from "Music"."ByYear" where x = 1 order by y desc')
    assert isinstance(select, ast.Select)
    assert [p.elements for p in select.projection or ()] == [("a",), ("b", "c", 2), ("d", "k")]
    assert (select.target.table, select.target.index) == ("Music", "ByYear")
    assert [(p.name, descending) for p, descending in select.order_by] == [("y", True)]
    star = parse("SELECT * FROM Music;")
    assert isinstance(star, ast.Select) and star.projection is None and star.where is None


def test_literals_of_every_type() -> None:
    insert = parse(
        "INSERT INTO t VALUE {'s': 'x', 'n': -12.5, 'e': 1E-3, 'b': TRUE, 'f': false, "
        "'z': NULL, 'm': MISSING, 'l': [1, 'a', [ ]], 'map': {'in': {}}, 'ss': <<'a', 'b'>>, "
        "'ns': <<1, 2>>, 'p': ?}"
    )
    assert isinstance(insert, ast.Insert) and insert.parameters == 1
    plan = partiql.plan(insert, [{"B": "AAE="}], HASH_ONLY)
    assert isinstance(plan, WritePlan)
    assert plan.request["Item"] == {
        "s": {"S": "x"},
        "n": {"N": "-12.5"},
        "e": {"N": "1E-3"},
        "b": {"BOOL": True},
        "f": {"BOOL": False},
        "z": {"NULL": True},
        "l": {"L": [{"N": "1"}, {"S": "a"}, {"L": []}]},
        "map": {"M": {"in": {"M": {}}}},
        "ss": {"SS": ["a", "b"]},
        "ns": {"NS": ["1", "2"]},
        "p": {"B": "AAE="},
    }


def test_conditions_parse_with_precedence() -> None:
    select = parse(
        "SELECT * FROM t WHERE a = 1 OR NOT b < 2 AND c BETWEEN 1 AND 3 AND d IN (1, 2) "
        "AND e NOT IN [3] AND f IS NOT MISSING AND g IS NULL AND begins_with(h, 'x') "
        "AND contains(i, ?) AND attribute_type(j, 'S') AND size(k) > 3 AND l != m"
    )
    assert isinstance(select, ast.Select)
    where = select.where
    assert isinstance(where, ast.Or) and len(where.items) == 2
    right = where.items[1]
    assert isinstance(right, ast.And) and len(right.items) == 11
    assert isinstance(right.items[0], ast.Not)
    last = right.items[-1]
    assert isinstance(last, ast.Comparison) and last.op == "<>"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("SELECT * FROM", "expected a table name, found end of statement at 1:14:0"),
        ("SELECT FROM t", "expected an attribute name or '*' to select, found 'FROM' at 1:8:4"),
        ("SELECT * FROM t WHERE", "expected a value, found end of statement at 1:22:0"),
        ("SELECT * FROM t WHERE a =", "expected a value, found end of statement at 1:26:0"),
        ("SELECT * FROM t WHERE a", "expected a comparison, found end of statement at 1:24:0"),
        (
            "SELECT * FROM t.i.j",
            "expected a table name and at most one index name, found '.' at 1:18:1",
        ),
        ("SELECT * FROM t extra", "expected the end of the statement, found 'extra' at 1:17:5"),
        ("UPDATE t WHERE a = 1", "expected SET or REMOVE, found 'WHERE' at 1:10:5"),
        ("UPDATE t SET a = 1", "expected WHERE, found end of statement at 1:19:0"),
        ("DELETE t WHERE a = 1", "expected FROM, found 't' at 1:8:1"),
        ("SELECT * FROM t WHERE a IN 1", "expected '(' or '[' after IN, found '1' at 1:28:1"),
        ("SELECT * FROM t WHERE a IS 1", "expected MISSING or NULL, found '1' at 1:28:1"),
        ("SELECT * FROM t WHERE foo(a)", "expected a condition, found 'foo' at 1:23:3"),
        ("INSERT INTO t VALUE {a: 1}", "expected a map key in single quotes, found 'a' at 1:22:1"),
        ("SELECT * FROM t WHERE a = 1 # 2", "unexpected character, found '#' at 1:29:1"),
        (
            "UPDATE t SET a = 1 WHERE k = 1 RETURNING SOME OLD *",
            "expected ALL or MODIFIED, found 'SOME' at 1:42:4",
        ),
    ],
)
def test_syntax_errors_name_the_place(text: str, expected: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse(text)
    assert raised.value.message == WELL_FORMED + expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("EXPLAIN SELECT 1", WELL_FORMED + "Expected data manipulation"),
        ("SELECT count(*) FROM t", "Unexpected path component at 1:8:5"),
        ("SELECT * FROM a, b", "Unsupported operation: a FROM clause may name one table only"),
        ("SELECT * FROM a JOIN b", "Unsupported operation: JOIN"),
        ("SELECT * FROM t LIMIT 3", "Unsupported operation: LIMIT"),
        ("SELECT * FROM t GROUP BY a", "Unsupported operation: GROUP"),
        ("SELECT * FROM t WHERE a = (SELECT 1)", "Unsupported operation: subqueries"),
        ("SELECT * FROM t WHERE a = b + 1", "Unsupported operation: arithmetic in a WHERE"),
        ("SELECT * FROM t WHERE EXISTS(a)", "Unsupported operation: EXISTS is a statement"),
        ("INSERT INTO t VALUE {'a': 1}, {'a': 2}", "Unsupported operation: Inserting multiple"),
        ("INSERT INTO t << {'a': 1} >>", "Unsupported operation: Inserting multiple"),
        (
            'INSERT INTO "Music"."Index" VALUE {}',
            "FROM clause may only contain a single table name in data manipulation statements "
            "at 1:13:7",
        ),
        (
            "DELETE FROM t WHERE k = 1 RETURNING ALL NEW *",
            "Invalid returning clause: RETURNING ALL NEW *. Only RETURNING ALL OLD * is allowed "
            "in DELETE statements.",
        ),
    ],
)
def test_unsupported_constructs_are_refused(text: str, expected: str) -> None:
    with pytest.raises(ValidationError) as raised:
        parse(text)
    assert raised.value.message is not None and raised.value.message.startswith(expected)


# Planning SELECT -------------------------------------------------------------------------------


def test_a_full_key_select_is_a_get_item() -> None:
    plan = planned(
        "SELECT a, b.c FROM Music WHERE SongTitle = ? AND 'Acme' = Artist", [{"S": "Song"}]
    )
    assert plan == ReadPlan(
        "GetItem",
        "Music",
        (
            {
                "TableName": "Music",
                "ProjectionExpression": "#n0, #n1.#n2",
                "ExpressionAttributeNames": {"#n0": "a", "#n1": "b", "#n2": "c"},
                "Key": {"Artist": {"S": "Acme"}, "SongTitle": {"S": "Song"}},
            },
        ),
        False,
    )
    assert plan.key_read
    assert planned("SELECT * FROM t WHERE id = 1", keys=HASH_ONLY).operation == "GetItem"


def test_a_partition_key_select_is_a_query_with_its_sort_key_condition_and_filter() -> None:
    plan = planned(
        "SELECT * FROM Music WHERE Artist = 'Acme' AND 'm' < SongTitle AND plays > 3 "
        "ORDER BY SongTitle DESC"
    )
    assert plan.operation == "Query" and plan.filtered
    (request,) = plan.requests
    assert request == {
        "TableName": "Music",
        "KeyConditionExpression": "#n2 = :key AND #n0 > :v0",
        "FilterExpression": "#n1 > :v1",
        "ScanIndexForward": False,
        "ExpressionAttributeNames": {"#n0": "SongTitle", "#n1": "plays", "#n2": "Artist"},
        "ExpressionAttributeValues": {":v0": {"S": "m"}, ":v1": {"N": "3"}, ":key": {"S": "Acme"}},
    }
    between = planned("SELECT * FROM Music WHERE Artist = 'a' AND SongTitle BETWEEN 'a' AND 'b'")
    assert "BETWEEN" in between.requests[0]["KeyConditionExpression"]
    prefix = planned("SELECT * FROM Music WHERE Artist = 'a' AND begins_with(SongTitle, 'x')")
    assert "begins_with" in prefix.requests[0]["KeyConditionExpression"]


def test_in_and_ors_of_the_partition_key_are_one_query_per_value() -> None:
    plan = planned("SELECT * FROM Music WHERE Artist IN ['b', 'a', 'b'] ORDER BY Artist")
    assert plan.operation == "Query"
    keys = [r["ExpressionAttributeValues"][":key"] for r in plan.requests]
    assert keys == [{"S": "a"}, {"S": "b"}]
    ored = planned("SELECT * FROM Music WHERE Artist = 1 OR Artist = 10 ORDER BY Artist DESC")
    assert [r["ExpressionAttributeValues"][":key"] for r in ored.requests] == [
        {"N": "10"},
        {"N": "1"},
    ]


@pytest.mark.parametrize(
    "where",
    [
        "",
        " WHERE plays > 3",
        " WHERE Artist > 'a'",
        " WHERE Artist = 'a' OR plays = 1",
        " WHERE Artist = 'a' AND Artist = 'b'",
        " WHERE Artist = 'a' AND SongTitle > 'a' AND SongTitle < 'z'",
        " WHERE Artist = 'a' AND size(SongTitle) > 3",
    ],
)
def test_everything_else_is_a_scan_with_the_whole_where_as_filter(where: str) -> None:
    plan = planned(f"SELECT * FROM Music{where}")
    assert plan.operation == "Scan"
    assert ("FilterExpression" in plan.requests[0]) == bool(where)


def test_an_index_is_read_by_its_own_key() -> None:
    plan = planned(
        'SELECT * FROM "Music"."ByYear" WHERE "Year" = 2020', keys=KeyNames("Year", None)
    )
    assert plan.operation == "Query"
    assert plan.requests[0]["IndexName"] == "ByYear"


def test_a_multi_attribute_index_is_read_by_a_scan_filtered_on_its_keys() -> None:
    # The planner builds a Query's key condition from one partition and one sort key attribute;
    # an index keyed by more (multi-attribute keys) is read by a Scan with the whole WHERE.
    plan = planned(
        'SELECT * FROM "Matches"."ByTournament" WHERE t = 1 AND r = 2 AND "round" = 3',
        keys=KeyNames("t", "round", multi_attribute=True),
    )
    assert plan.operation == "Scan"
    assert plan.requests[0]["IndexName"] == "ByTournament"
    assert "FilterExpression" in plan.requests[0]


def test_select_refusals() -> None:
    assert refused("SELECT * FROM Music ORDER BY Artist") == ORDER_BY_WHERE
    assert refused("SELECT * FROM Music WHERE a = 1 ORDER BY a").startswith(ORDER_BY_KEY)
    assert refused("SELECT * FROM Music WHERE a = 1 ORDER BY Artist") == ORDER_BY_SCAN
    assert (
        refused("SELECT * FROM Music WHERE Artist IN ['a', 'b'] ORDER BY SongTitle")
        == ORDER_BY_SORT_KEY_ACROSS
    )
    assert refused("SELECT * FROM Music WHERE Artist = ?") == PARAMETER_COUNT
    assert refused("SELECT * FROM Music", [{"S": "x"}]) == PARAMETER_COUNT
    assert refused("SELECT * FROM Music WHERE a = <<>>") == EMPTY_SET
    assert refused("SELECT * FROM Music WHERE a = <<1, 'x'>>").startswith(MIXED_SET)
    assert BATCH_KEY_READ.startswith("Select statements within BatchExecuteStatement")


def test_missing_and_null_become_existence_checks() -> None:
    plan = planned(
        "SELECT * FROM t WHERE a = MISSING AND b <> MISSING AND c IS NULL AND d IS NOT NULL",
        keys=HASH_ONLY,
    )
    assert plan.requests[0]["FilterExpression"] == (
        "(attribute_not_exists(#n0)) AND (attribute_exists(#n1)) AND "
        "((attribute_not_exists(#n2) OR attribute_type(#n2, :v0))) AND "
        "((attribute_exists(#n3) AND NOT attribute_type(#n3, :v1)))"
    )


# Planning writes -------------------------------------------------------------------------------


def test_insert_is_a_put_that_must_not_find_the_key() -> None:
    plan = planned(
        "INSERT INTO Music VALUE ?", [{"M": {"Artist": {"S": "a"}, "SongTitle": {"S": "s"}}}]
    )
    assert plan == WritePlan(
        "PutItem",
        "Music",
        {
            "TableName": "Music",
            "Item": {"Artist": {"S": "a"}, "SongTitle": {"S": "s"}},
            "ConditionExpression": "attribute_not_exists(#n0)",
            "ExpressionAttributeNames": {"#n0": "Artist"},
        },
        {"Artist": {"S": "a"}, "SongTitle": {"S": "s"}},
        True,
    )
    assert refused("INSERT INTO Music VALUE ?", [{"S": "x"}]) == INSERT_NOT_A_MAP


def test_update_is_an_update_item_of_an_existing_item() -> None:
    plan = planned(
        "UPDATE Music SET a = 1, b = b - ?, c = list_append([0], c), d = set_delete(d, <<'x'>>) "
        "SET e = set_add(e, <<2>>) SET f = g SET h = MISSING REMOVE i[0] "
        "WHERE Artist = 'x' AND SongTitle = 'y' AND a < 5 RETURNING ALL OLD *",
        [{"N": "1"}],
    )
    assert plan.operation == "UpdateItem" and plan.key == {
        "Artist": {"S": "x"},
        "SongTitle": {"S": "y"},
    }
    request = plan.request
    assert request["UpdateExpression"] == (
        "SET #n0 = :v0, #n1 = #n1 - :v1, #n2 = list_append(:v2, #n2), #n5 = #n6 "
        "REMOVE #n7, #n8[0] ADD #n4 :v4 DELETE #n3 :v3"
    )
    assert request["ConditionExpression"] == "attribute_exists(#n9) AND (#n0 < :v5)"
    assert request["ReturnValues"] == "ALL_OLD"
    assert refused(
        "UPDATE Music SET a = set_add(b, <<1>>) WHERE Artist = 'x' AND SongTitle = 'y'"
    ).startswith(SET_FUNCTION_PATH)


@pytest.mark.parametrize(
    "where",
    [
        "Artist = 'x'",
        "SongTitle = 'y'",
        "Artist = 'x' OR SongTitle = 'y'",
        "Artist > 'x' AND SongTitle = 'y'",
        "Artist = SongTitle AND SongTitle = 'y'",
        "NOT (Artist = 'x' AND SongTitle = 'y')",
    ],
)
def test_writes_need_an_equality_on_every_key_attribute(where: str) -> None:
    assert refused(f"DELETE FROM Music WHERE {where}") == KEY_EQUALITY
    assert refused(f"UPDATE Music SET a = 1 WHERE {where}") == KEY_EQUALITY


def test_delete_and_exists() -> None:
    plan = planned("DELETE FROM t WHERE id = 1 AND v = 2", keys=HASH_ONLY)
    assert plan.request == {
        "TableName": "t",
        "Key": {"id": {"N": "1"}},
        "ConditionExpression": "#n0 = :v0",
        "ExpressionAttributeNames": {"#n0": "v"},
        "ExpressionAttributeValues": {":v0": {"N": "2"}},
    }
    check = planned("EXISTS(SELECT * FROM t WHERE id = 1)", keys=HASH_ONLY)
    assert check.operation == "ConditionCheck"
    assert check.request["ConditionExpression"] == "attribute_exists(#n0)"
    assert refused("EXISTS(SELECT * FROM t)", keys=HASH_ONLY) == KEY_EQUALITY
    assert refused('DELETE FROM "t"."i" WHERE id = 1', keys=HASH_ONLY) == WRITE_ON_INDEX


def test_parses_are_cached_per_text() -> None:
    text = "SELECT * FROM cached WHERE a = 1"
    assert partiql.parse(text) is partiql.parse(text)
    with pytest.raises(ValidationError):
        partiql.parse("SELECT")
    with pytest.raises(ValidationError):
        partiql.parse("SELECT")


# Round trips -----------------------------------------------------------------------------------

_FIRST = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ_"
names = st.text(alphabet=_FIRST + "0123456789 -\"'", min_size=1, max_size=8)
paths = st.builds(
    lambda head, tail: ast.Path((head, *tail), None),  # type: ignore[arg-type]
    names,
    st.lists(names | st.integers(0, 30), max_size=3),
)
scalars = (
    st.text(max_size=6).map(lambda text: ast.Literal(("S", text)))
    | st.from_regex(r"-?[0-9]{1,5}(\.[0-9]{1,3})?", fullmatch=True).map(
        lambda text: ast.Literal(("N", text))
    )
    | st.booleans().map(lambda flag: ast.Literal(("BOOL", flag)))
    | st.just(ast.Literal(("NULL", True)))
    | st.just(ast.Missing())
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3).map(lambda items: ast.ListValue(tuple(items)))
        | st.lists(st.tuples(st.text(max_size=4), inner), max_size=3).map(
            lambda entries: ast.MapValue(tuple(entries))
        )
    ),
    max_leaves=6,
)
operands = paths | values | paths.map(ast.Size)
atoms = (
    st.builds(
        ast.Comparison, st.sampled_from(["=", "<>", "<", "<=", ">", ">="]), operands, operands
    )
    | st.builds(ast.Between, operands, operands, operands)
    | st.builds(ast.In, operands, st.lists(operands, min_size=1, max_size=3).map(tuple))
    | st.builds(ast.Is, paths, st.sampled_from(["MISSING", "NULL"]), st.booleans())
    | st.builds(
        ast.Function,
        st.sampled_from(["begins_with", "contains", "attribute_type"]),
        paths,
        operands,
    )
)
conditions = st.recursive(
    atoms,
    lambda inner: (
        st.lists(inner, min_size=2, max_size=3).map(lambda items: ast.And(tuple(items)))
        | st.lists(inner, min_size=2, max_size=3).map(lambda items: ast.Or(tuple(items)))
        | inner.map(ast.Not)
    ),
    max_leaves=6,
)
target = st.builds(ast.Target, names, st.none() | names, st.none())


@settings(max_examples=200, deadline=None)
@given(
    st.none() | st.lists(paths, min_size=1, max_size=3).map(tuple),
    target,
    st.none() | conditions,
    st.lists(st.tuples(paths, st.booleans()), max_size=2).map(tuple),
)
def test_select_render_parse_round_trip(
    projection: Any, where_target: Any, where: Any, order_by: Any
) -> None:
    text = ast.render(ast.Select(projection, where_target, where, order_by, 0))
    parsed = parse(text)
    assert parsed == ast.Select(projection, where_target, where, order_by, 0)
    assert ast.render(parsed) == text


@settings(max_examples=200, deadline=None)
@given(
    st.builds(ast.Target, names, st.none(), st.none()),
    st.lists(
        st.builds(ast.SetAction, paths, paths | values)
        | st.builds(ast.RemoveAction, paths)
        | st.builds(
            ast.SetAction,
            paths,
            st.builds(ast.Arithmetic, st.sampled_from(["+", "-"]), paths | values, paths | values),
        ),
        min_size=1,
        max_size=4,
    ).map(tuple),
    conditions,
    st.none() | st.sampled_from(["ALL_OLD", "UPDATED_OLD", "ALL_NEW", "UPDATED_NEW"]),
)
def test_update_and_delete_render_parse_round_trip(
    update_target: Any, actions: Any, where: Any, returning: Any
) -> None:
    update_text = ast.render(ast.Update(update_target, actions, where, returning, 0))
    assert parse(update_text) == ast.Update(update_target, actions, where, returning, 0)
    delete_text = ast.render(ast.Delete(update_target, where, "ALL_OLD", 0))
    assert parse(delete_text) == ast.Delete(update_target, where, "ALL_OLD", 0)


def test_parameters_are_numbered_in_order() -> None:
    statement = parse("UPDATE t SET a = ?, b = [?, {'k': ?}] WHERE id = ? AND c IN [?, 1]")
    assert statement.parameters == 5
    assert isinstance(statement, ast.Update)
    action = statement.actions[1]
    assert isinstance(action, ast.SetAction)
    assert action.source == ast.ListValue(
        (ast.Parameter(1), ast.MapValue((("k", ast.Parameter(2)),)))
    )


def test_nesting_is_bounded_before_recursion_could_fail() -> None:
    depth = limits.PARTIQL_NESTING_DEPTH_MAX
    deepest = "SELECT * FROM t WHERE " + "NOT " * (depth - 1) + "(a = 1)"
    assert isinstance(planned(deepest, keys=HASH_ONLY), ReadPlan)
    for text, place in [
        ("SELECT * FROM t WHERE " + "(" * (depth + 1) + "a = 1" + ")" * (depth + 1), "1:123:1"),
        ("SELECT * FROM t WHERE " + "NOT " * (depth + 1) + "a = 1", "1:423:3"),
        ("INSERT INTO t VALUE " + "[" * depth + "{}" + "]" * depth, "1:121:1"),
    ]:
        with pytest.raises(ValidationError) as raised:
            parse(text)
        assert raised.value.message == (
            f"{WELL_FORMED}nested deeper than {depth} levels, at {place}"
        )
    list_text = "INSERT INTO t VALUE {'id': 1, 'l': " + "[" * (depth - 1) + "]" * (depth - 1) + "}"
    assert isinstance(planned(list_text, keys=HASH_ONLY), WritePlan)
