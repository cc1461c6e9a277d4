"""Unit tests of router.requests: DynamoDB's constraint pass and the shared third-pass rules."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any, cast

import pytest

from core import expressions
from core.catalog import IndexDef
from core.errors import ValidationError
from router import tags
from router.requests import (
    RETURN_VALUES,
    RETURN_VALUES_OLD_ONLY,
    SELECT_VALUES,
    RequestReader,
    check_conditional_operator,
    check_index,
    check_key_paths,
    check_return_values,
    key_identity,
    select_mode,
    shown,
)


def violations(body: dict[str, Any], read: Any) -> str:
    """The message of the ValidationError that `read(reader)` followed by check() raises."""
    reader = RequestReader(body)
    read(reader)
    with pytest.raises(ValidationError) as raised:
        reader.check()
    return raised.value.message


# Pass 1 (JSON types) is router.shapes' (tests/unit/test_router_shapes.py); what remains here
# of it is what the reader makes of a deserialised value.


def test_fractional_integer_is_truncated_as_java_does() -> None:
    assert RequestReader({"Limit": 7.9}).integer("Limit") == 7


def test_json_null_means_absent() -> None:
    reader = RequestReader({"Limit": None, "TableName": None})
    assert reader.integer("Limit") is None
    assert not reader.present("Limit")
    reader.name("TableName", required=True)
    with pytest.raises(ValidationError, match="Value null at 'tableName'"):
        reader.check()


# Pass 2: constraints, reported together --------------------------------------------------------


def test_missing_required_member() -> None:
    message = violations({}, lambda r: r.name("TableName", required=True))
    assert message == (
        "1 validation error detected: Value null at 'tableName' failed to satisfy constraint: "
        "Member must not be null"
    )


def test_all_violations_are_reported_in_one_message() -> None:
    def read(reader: RequestReader) -> None:
        reader.integer("Limit", minimum=1)
        reader.string("Select", enum=SELECT_VALUES)
        reader.name("TableName", required=True)

    message = violations({"Limit": 0, "Select": "ALL", "TableName": "a;"}, read)
    assert message == (
        "4 validation errors detected: "
        "Value '0' at 'limit' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1; "
        "Value 'ALL' at 'select' failed to satisfy constraint: Member must satisfy enum value "
        "set: [SPECIFIC_ATTRIBUTES, COUNT, ALL_ATTRIBUTES, ALL_PROJECTED_ATTRIBUTES]; "
        "Value 'a;' at 'tableName' failed to satisfy constraint: "
        "Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+; "
        "Value 'a;' at 'tableName' failed to satisfy constraint: "
        "Member must have length greater than or equal to 3"
    )


def test_long_table_name() -> None:
    name = "a" * 256
    message = violations({"TableName": name}, lambda r: r.name("TableName"))
    assert message.endswith("Member must have length less than or equal to 255")


def test_integer_upper_bound() -> None:
    message = violations(
        {"TotalSegments": 1_000_001},
        lambda r: r.integer("TotalSegments", minimum=1, maximum=1_000_000),
    )
    assert message == (
        "1 validation error detected: Value '1000001' at 'totalSegments' failed to satisfy "
        "constraint: Member must have value less than or equal to 1000000"
    )


def test_list_length_bounds() -> None:
    message = violations(
        {"AttributesToGet": []},
        lambda r: r.string_list("AttributesToGet", min_length=1, max_length=255),
    )
    assert message == (
        "1 validation error detected: Value '[]' at 'attributesToGet' failed to satisfy "
        "constraint: Member must have length greater than or equal to 1"
    )


def test_nested_readers_prefix_their_paths_and_share_violations() -> None:
    reader = RequestReader({"RequestItems": {"Music": {"Keys": []}}})
    items = reader.mapping("RequestItems")
    assert items is not None
    nested = reader.nested(items["Music"], f"{reader.where('RequestItems')}.Music.member")
    nested.array("Keys", required=True, min_length=1)
    with pytest.raises(ValidationError) as raised:
        reader.check()
    assert raised.value.message == (
        "1 validation error detected: Value '[]' at 'requestItems.Music.member.keys' failed to "
        "satisfy constraint: Member must have length greater than or equal to 1"
    )


def test_no_violation_no_error() -> None:
    reader = RequestReader({"Limit": 3})
    assert reader.integer("Limit", minimum=1) == 3
    reader.check()


def test_values_are_shown_as_dynamodb_prints_them() -> None:
    assert shown(None) == "null"
    assert shown(True) == "true"
    assert shown([1, "a"]) == "[1, a]"
    assert shown({"t": []}) == "{t=[]}"


# Pass 3: shared rules --------------------------------------------------------------------------


def test_return_values_default_and_per_operation_subset() -> None:
    assert check_return_values(None, RETURN_VALUES_OLD_ONLY) == "NONE"
    assert check_return_values("ALL_OLD", RETURN_VALUES_OLD_ONLY) == "ALL_OLD"
    assert check_return_values("UPDATED_NEW", RETURN_VALUES) == "UPDATED_NEW"
    with pytest.raises(ValidationError, match=r"^Return values set to invalid value$"):
        check_return_values("ALL_NEW", RETURN_VALUES_OLD_ONLY)


@pytest.mark.parametrize(
    ("select", "projection", "attributes", "expected"),
    [
        (None, False, False, "ALL_ATTRIBUTES"),
        (None, True, False, "SPECIFIC_ATTRIBUTES"),
        (None, False, True, "SPECIFIC_ATTRIBUTES"),
        ("COUNT", False, False, "COUNT"),
        ("SPECIFIC_ATTRIBUTES", True, False, "SPECIFIC_ATTRIBUTES"),
        ("SPECIFIC_ATTRIBUTES", False, True, "SPECIFIC_ATTRIBUTES"),
        ("ALL_ATTRIBUTES", False, False, "ALL_ATTRIBUTES"),
    ],
)
def test_select_modes(
    select: str | None, projection: bool, attributes: bool, expected: str
) -> None:
    assert (
        select_mode(select, projection=projection, attributes_to_get=attributes, index_name=None)
        == expected
    )


@pytest.mark.parametrize(
    ("select", "projection", "attributes", "message"),
    [
        (
            "COUNT",
            True,
            False,
            "Cannot specify the ProjectionExpression when choosing to get only the Count",
        ),
        (
            "COUNT",
            False,
            True,
            "Cannot specify the AttributesToGet when choosing to get only the Count",
        ),
        (
            "ALL_ATTRIBUTES",
            True,
            False,
            "Cannot specify the ProjectionExpression when choosing to get ALL_ATTRIBUTES",
        ),
        (
            "SPECIFIC_ATTRIBUTES",
            False,
            False,
            "Must specify the AttributesToGet or ProjectionExpression when choosing to get "
            "SPECIFIC_ATTRIBUTES",
        ),
        (
            "ALL_PROJECTED_ATTRIBUTES",
            False,
            False,
            "ALL_PROJECTED_ATTRIBUTES can be used only when Querying using an IndexName",
        ),
    ],
)
def test_select_combination_errors(
    select: str, projection: bool, attributes: bool, message: str
) -> None:
    with pytest.raises(ValidationError) as raised:
        select_mode(select, projection=projection, attributes_to_get=attributes, index_name=None)
    assert raised.value.message == message


def test_all_projected_attributes_with_an_index_passes_this_rule() -> None:
    assert (
        select_mode(
            "ALL_PROJECTED_ATTRIBUTES", projection=False, attributes_to_get=False, index_name="i"
        )
        == "ALL_PROJECTED_ATTRIBUTES"
    )


def test_conditional_operator_needs_two_conditions() -> None:
    check_conditional_operator(None, None)
    check_conditional_operator("OR", {"a": {}, "b": {}})
    with pytest.raises(ValidationError, match="cannot be used without Filter or Expected"):
        check_conditional_operator("AND", None)
    with pytest.raises(ValidationError, match="two or more elements"):
        check_conditional_operator("AND", {"a": {}})


def test_index_names_are_refused_while_tables_have_no_indexes() -> None:
    by_date = IndexDef.from_json(
        {
            "name": "byDate",
            "key": [["pk", "S", "partition"], ["date", "S", "sort"]],
            "projection": "ALL",
            "status": "ACTIVE",
            "local": True,
        }
    )
    # check_index reads a route's indexes by name (`router.routing.Route.indexes`).
    table: Any = SimpleNamespace(indexes={"byDate": by_date})
    assert check_index(None, table) is None
    found = check_index("byDate", table)
    assert found is not None and found.local and found.key_shape.names == ("pk", "date")
    with pytest.raises(ValidationError) as raised:
        check_index("byOwner", table)
    assert raised.value.message == "The table does not have the specified index: byOwner"
    with pytest.raises(ValidationError):
        check_index("byOwner", cast(Any, SimpleNamespace(indexes={})))


def test_key_identity_ignores_attribute_order() -> None:
    one = key_identity({"pk": {"S": "a"}, "sk": {"N": "1"}})
    other = key_identity({"sk": {"N": "1"}, "pk": {"S": "a"}})
    assert one == other
    assert one != key_identity({"pk": {"S": "a"}, "sk": {"S": "1"}})


def test_key_paths_refuse_a_document_path_into_a_key_attribute() -> None:
    nested = expressions.projection("a, pk.b")
    flat = expressions.projection("pk, sk, a.b")
    condition = expressions.condition("sk[1] = :v", None, {":v": {"S": "x"}})
    check_key_paths(("pk", "sk"), flat, None)
    with pytest.raises(ValidationError) as raised:
        check_key_paths(("pk", "sk"), flat, nested, condition)
    assert raised.value.message == (
        "Key attributes must be scalars; list random access '[]' and map lookup '.' are not "
        "allowed: Key: pk"
    )
    with pytest.raises(ValidationError, match=r"Key: sk$"):
        check_key_paths(("pk", "sk"), condition)


def test_untag_resource_refuses_a_key_in_dynamodbs_words_once_the_list_is_there() -> None:
    # TagKeys is a list of TagKeyString (1 to 128 characters in the service model), but DynamoDB
    # refuses an empty key in its own words, not its constraint's (as captured against the
    # service: ack-api-quirks DDB-TABLE-457); a missing list is a constraint's violation.
    body = {
        "ResourceArn": "arn:aws:dynamodb:us-east-1:000000000000:table/Tab",
        "TagKeys": ["", "k"],
    }
    with pytest.raises(ValidationError) as raised:
        asyncio.run(tags.untag_resource(cast(Any, None), body))
    assert raised.value.message == "The Tag Key provided is invalid, Key: "
    del body["TagKeys"]
    with pytest.raises(ValidationError) as raised:
        asyncio.run(tags.untag_resource(cast(Any, None), body))
    assert raised.value.message == (
        "1 validation error detected: Value null at 'tagKeys' failed to satisfy constraint: "
        "Member must not be null"
    )


def test_key_identity_of_a_key_holding_a_list_a_map_or_a_set() -> None:
    # Not key types, but a batch checks for duplicates before the schema refuses them.
    listed = key_identity({"pk": {"L": [{"S": "a"}]}})
    assert listed == key_identity({"pk": {"L": [{"S": "a"}]}})
    assert listed != key_identity({"pk": {"L": [{"S": "b"}]}})
    assert key_identity({"pk": {"M": {"a": {"N": "1"}, "b": {"S": "x"}}}}) == key_identity(
        {"pk": {"M": {"b": {"S": "x"}, "a": {"N": "1"}}}}
    )
    assert len({key_identity({"pk": {"SS": ["a"]}}), key_identity({"pk": {"S": "a"}})}) == 2
