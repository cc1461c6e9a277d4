"""The data plane's validation errors, as DynamoDB words them, against a real cluster.

Every case sends a request DynamoDB refuses, through boto3 with its own parameter validation off
(or as raw JSON where boto3 cannot even serialise the mistake), and checks the HTTP status, the
error code and the message. Nothing a refused request carried may have been written.
"""

from __future__ import annotations

import http.client
import json
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, error_of

INVALID = "One or more parameter values were invalid: "
KEY_MISMATCH = "The provided key element does not match the schema"
DUPLICATES = "Provided list of item keys contains duplicates"
ONE_REQUEST = (
    "Supplied AttributeValue has more than one datatypes set, must contain exactly one of the "
    "supported datatypes"
)
# Signatures are not verified yet, so raw requests only need the shape of one.
SIGNATURE = (
    "AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-target, Signature=0"
)


def invalid(call: Callable[[], Any]) -> str:
    """The message of a call that must fail with HTTP 400 ValidationException."""
    status, code, message = error_of(call)
    assert (status, code) == (400, "ValidationException"), message
    return message


def raw(cluster: LocalCluster, operation: str, body: Any) -> tuple[int, str, str]:
    """(HTTP status, error type without namespace, message) of a raw JSON request."""
    parsed = urllib.parse.urlsplit(cluster.router_url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    try:
        connection.request(
            "POST",
            "/",
            body=json.dumps(body).encode(),
            headers={
                "Content-Type": "application/x-amz-json-1.0",
                "X-Amz-Target": f"DynamoDB_20120810.{operation}",
                "Authorization": SIGNATURE,
                "X-Amz-Date": "20240101T000000Z",
            },
        )
        response = connection.getresponse()
        reply = json.loads(response.read())
    finally:
        connection.close()
    return response.status, reply["__type"].rsplit("#", 1)[1], reply.get("message", "")


@pytest.fixture(scope="module")
def table(dynamodb: Any) -> str:
    """A table keyed pk (S) and sk (N), holding one item (pk "a", sk 1)."""
    name = create_active_table(dynamodb, "validation-table", range_key=("sk", "N"))
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "a"}, "sk": {"N": "1"}})
    return name


def key(pk: str = "a", sk: int = 1) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}}


def absent(dynamodb: Any, table: str, item_key: dict[str, Any]) -> bool:
    return "Item" not in dynamodb.get_item(TableName=table, Key=item_key, ConsistentRead=True)


# Request shape and member constraints -----------------------------------------------------------


def test_missing_members_are_all_reported(dynamodb: Any) -> None:
    assert invalid(lambda: dynamodb.put_item()) == (
        "2 validation errors detected: "
        "Value null at 'tableName' failed to satisfy constraint: Member must not be null; "
        "Value null at 'item' failed to satisfy constraint: Member must not be null"
    )
    assert invalid(lambda: dynamodb.scan()) == (
        "1 validation error detected: Value null at 'tableName' failed to satisfy constraint: "
        "Member must not be null"
    )


def test_table_name_constraints(dynamodb: Any) -> None:
    assert invalid(lambda: dynamodb.get_item(TableName="a!", Key=key())) == (
        "2 validation errors detected: "
        "Value 'a!' at 'tableName' failed to satisfy constraint: "
        "Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+; "
        "Value 'a!' at 'tableName' failed to satisfy constraint: "
        "Member must have length greater than or equal to 3"
    )


def test_missing_table(dynamodb: Any) -> None:
    for call in (
        lambda: dynamodb.put_item(TableName="no-such-table", Item=key()),
        lambda: dynamodb.get_item(TableName="no-such-table", Key=key()),
        lambda: dynamodb.scan(TableName="no-such-table"),
        lambda: dynamodb.query(
            TableName="no-such-table",
            KeyConditionExpression="pk = :p",
            ExpressionAttributeValues={":p": {"S": "a"}},
        ),
        lambda: dynamodb.batch_get_item(RequestItems={"no-such-table": {"Keys": [key()]}}),
    ):
        assert error_of(call) == (400, "ResourceNotFoundException", "Requested resource not found")


def test_several_violations_in_one_message(dynamodb: Any, table: str) -> None:
    message = invalid(lambda: dynamodb.scan(TableName=table, Limit=0, TotalSegments=0, Select="X"))
    assert message == (
        "3 validation errors detected: "
        "Value '0' at 'limit' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1; "
        "Value '0' at 'totalSegments' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1; "
        "Value 'X' at 'select' failed to satisfy constraint: Member must satisfy enum value set: "
        "[SPECIFIC_ATTRIBUTES, COUNT, ALL_ATTRIBUTES, ALL_PROJECTED_ATTRIBUTES]"
    )


def test_wrong_json_types_are_serialization_errors(
    cluster: LocalCluster, dynamodb: Any, table: str
) -> None:
    assert error_of(lambda: dynamodb.scan(TableName=table, Limit="5")) == (
        400,
        "SerializationException",
        "STRING_VALUE cannot be converted to Integer",
    )
    assert error_of(
        lambda: dynamodb.get_item(TableName=table, Key=key(), ConsistentRead="yes")
    ) == (
        400,
        "SerializationException",
        "Unexpected token received from parser",
    )
    assert error_of(lambda: dynamodb.put_item(TableName=table, Item=key(), ReturnValues=1)) == (
        400,
        "SerializationException",
        "NUMBER_VALUE cannot be converted to String",
    )
    for operation, body in (
        ("PutItem", {"TableName": table, "Item": "pk"}),
        ("GetItem", {"TableName": table, "Key": [key()]}),
        ("GetItem", {"TableName": table, "Key": {"pk": "a", "sk": 1}}),
        ("BatchWriteItem", {"RequestItems": [table]}),
        ("BatchWriteItem", {"RequestItems": {table: {"PutRequest": {"Item": key()}}}}),
        ("BatchGetItem", {"RequestItems": {table: [key()]}}),
        ("Query", {"TableName": table, "KeyConditionExpression": ["pk = :p"]}),
    ):
        status, error_type, _ = raw(cluster, operation, body)
        assert (status, error_type) == (400, "SerializationException"), (operation, body)


def test_invalid_attribute_values(dynamodb: Any, table: str) -> None:
    assert invalid(
        lambda: dynamodb.put_item(TableName=table, Item={**key("n"), "v": {"N": "abc"}})
    ) == ("The parameter cannot be converted to a numeric value: abc")
    assert invalid(
        lambda: dynamodb.put_item(TableName=table, Item={**key("n"), "v": {"SS": ["x", "x"]}})
    ) == (INVALID + "Input collection [x, x] contains duplicates.")
    assert invalid(lambda: dynamodb.put_item(TableName=table, Item={**key("n"), "v": {}})) == (
        "Supplied AttributeValue is empty, must contain exactly one of the supported datatypes"
    )
    assert absent(dynamodb, table, key("n"))


# Keys ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "bad_key",
    [
        {"pk": {"S": "a"}},
        {"sk": {"N": "1"}},
        {"pk": {"S": "a"}, "sk": {"S": "1"}},
        {"pk": {"N": "1"}, "sk": {"N": "1"}},
        {"pk": {"S": "a"}, "sk": {"N": "1"}, "other": {"S": "x"}},
    ],
)
def test_keys_must_match_the_schema(dynamodb: Any, table: str, bad_key: dict[str, Any]) -> None:
    for call in (
        lambda: dynamodb.get_item(TableName=table, Key=bad_key),
        lambda: dynamodb.delete_item(TableName=table, Key=bad_key),
        lambda: dynamodb.update_item(TableName=table, Key=bad_key),
        lambda: dynamodb.batch_get_item(RequestItems={table: {"Keys": [bad_key]}}),
        lambda: dynamodb.batch_write_item(
            RequestItems={table: [{"DeleteRequest": {"Key": bad_key}}]}
        ),
    ):
        assert invalid(call) == KEY_MISMATCH


def test_items_must_carry_their_key(dynamodb: Any, table: str) -> None:
    assert invalid(lambda: dynamodb.put_item(TableName=table, Item={"pk": {"S": "b"}})) == (
        INVALID + "Missing the key sk in the item"
    )
    assert invalid(
        lambda: dynamodb.put_item(TableName=table, Item={"pk": {"S": "b"}, "sk": {"S": "1"}})
    ) == (INVALID + "Type mismatch for key sk expected: N actual: S")
    assert invalid(
        lambda: dynamodb.get_item(TableName=table, Key={"pk": {"S": ""}, "sk": {"N": "1"}})
    ) == (
        "One or more parameter values are not valid. The AttributeValue for a key attribute "
        "cannot contain an empty string value. Key: pk"
    )


# ReturnValues ----------------------------------------------------------------------------------


def test_return_values_enum_and_per_operation_values(dynamodb: Any, table: str) -> None:
    assert invalid(
        lambda: dynamodb.update_item(TableName=table, Key=key(), ReturnValues="ALL")
    ) == (
        "1 validation error detected: Value 'ALL' at 'returnValues' failed to satisfy "
        "constraint: Member must satisfy enum value set: "
        "[ALL_NEW, UPDATED_OLD, ALL_OLD, NONE, UPDATED_NEW]"
    )
    for call in (
        lambda: dynamodb.put_item(TableName=table, Item=key("rv"), ReturnValues="ALL_NEW"),
        lambda: dynamodb.put_item(TableName=table, Item=key("rv"), ReturnValues="UPDATED_OLD"),
        lambda: dynamodb.delete_item(TableName=table, Key=key(), ReturnValues="UPDATED_NEW"),
    ):
        assert invalid(call) == "Return values set to invalid value"
    assert absent(dynamodb, table, key("rv"))
    assert not absent(dynamodb, table, key())
    assert invalid(
        lambda: dynamodb.put_item(
            TableName=table, Item=key("rv"), ReturnValuesOnConditionCheckFailure="ALL_NEW"
        )
    ) == (
        "1 validation error detected: Value 'ALL_NEW' at 'returnValuesOnConditionCheckFailure' "
        "failed to satisfy constraint: Member must satisfy enum value set: [ALL_OLD, NONE]"
    )


# Expressions and their placeholders ---------------------------------------------------------------


def test_unused_and_undefined_placeholders(dynamodb: Any, table: str) -> None:
    assert (
        invalid(
            lambda: dynamodb.put_item(
                TableName=table,
                Item=key("x"),
                ConditionExpression="attribute_not_exists(#p)",
                ExpressionAttributeNames={"#p": "pk", "#unused": "x"},
            )
        )
        == "Value provided in ExpressionAttributeNames unused in expressions: keys: {#unused}"
    )
    assert (
        invalid(
            lambda: dynamodb.update_item(
                TableName=table,
                Key=key(),
                UpdateExpression="SET v = :v",
                ConditionExpression="attribute_exists(pk)",
                ExpressionAttributeValues={":v": {"N": "1"}, ":w": {"N": "2"}},
            )
        )
        == "Value provided in ExpressionAttributeValues unused in expressions: keys: {:w}"
    )
    assert invalid(
        lambda: dynamodb.delete_item(TableName=table, Key=key(), ConditionExpression="v = :missing")
    ) == (
        "Invalid ConditionExpression: An expression attribute value used in expression is not "
        "defined; attribute value: :missing"
    )
    # A placeholder used by any of the request's expressions counts as used.
    dynamodb.query(
        TableName=table,
        KeyConditionExpression="#p = :p",
        FilterExpression="#v > :p",
        ProjectionExpression="#v",
        ExpressionAttributeNames={"#p": "pk", "#v": "v"},
        ExpressionAttributeValues={":p": {"S": "a"}},
    )


def test_placeholder_maps_need_expressions_and_content(dynamodb: Any, table: str) -> None:
    assert (
        invalid(
            lambda: dynamodb.get_item(
                TableName=table, Key=key(), ExpressionAttributeNames={"#a": "a"}
            )
        )
        == "ExpressionAttributeNames can only be specified when using expressions"
    )
    assert (
        invalid(
            lambda: dynamodb.scan(
                TableName=table,
                ProjectionExpression="pk",
                ExpressionAttributeValues={":v": {"S": "x"}},
            )
        )
        == "ExpressionAttributeValues can only be specified when using expressions: "
        "FilterExpression is null"
    )
    assert (
        invalid(
            lambda: dynamodb.put_item(
                TableName=table,
                Item=key("e"),
                ConditionExpression="attribute_not_exists(pk)",
                ExpressionAttributeValues={},
            )
        )
        == "ExpressionAttributeValues must not be empty"
    )
    assert absent(dynamodb, table, key("e"))


def test_expression_syntax_errors(dynamodb: Any, table: str) -> None:
    assert (
        invalid(
            lambda: dynamodb.put_item(TableName=table, Item=key("s"), ConditionExpression="a = = b")
        )
        == 'Invalid ConditionExpression: Syntax error; token: "=", near: "= = b"'
    )
    assert invalid(
        lambda: dynamodb.get_item(TableName=table, Key=key(), ProjectionExpression="a, a")
    ).startswith("Invalid ProjectionExpression: Two document paths overlap")
    assert (
        invalid(lambda: dynamodb.update_item(TableName=table, Key=key(), UpdateExpression=""))
        == "Invalid UpdateExpression: The expression can not be empty;"
    )


def test_legacy_and_expression_parameters_do_not_mix(dynamodb: Any, table: str) -> None:
    assert invalid(
        lambda: dynamodb.put_item(
            TableName=table,
            Item=key("m"),
            ConditionExpression="attribute_not_exists(pk)",
            Expected={"pk": {"Exists": False}},
        )
    ) == (
        "Can not use both expression and non-expression parameters in the same request: "
        "Non-expression parameters: {Expected} Expression parameters: {ConditionExpression}"
    )
    assert invalid(
        lambda: dynamodb.update_item(
            TableName=table,
            Key=key("m"),
            UpdateExpression="SET v = :v",
            AttributeUpdates={"w": {"Action": "DELETE"}},
            ExpressionAttributeValues={":v": {"N": "1"}},
        )
    ) == (
        "Can not use both expression and non-expression parameters in the same request: "
        "Non-expression parameters: {AttributeUpdates} Expression parameters: {UpdateExpression}"
    )
    assert invalid(
        lambda: dynamodb.get_item(
            TableName=table, Key=key(), ProjectionExpression="pk", AttributesToGet=["pk"]
        )
    ) == (
        "Can not use both expression and non-expression parameters in the same request: "
        "Non-expression parameters: {AttributesToGet} Expression parameters: "
        "{ProjectionExpression}"
    )
    assert absent(dynamodb, table, key("m"))


def test_conditional_operator_needs_conditions_to_join(dynamodb: Any, table: str) -> None:
    assert (
        invalid(
            lambda: dynamodb.put_item(TableName=table, Item=key("o"), ConditionalOperator="AND")
        )
        == "ConditionalOperator cannot be used without Filter or Expected"
    )
    assert (
        invalid(
            lambda: dynamodb.scan(
                TableName=table,
                ScanFilter={"v": {"ComparisonOperator": "NULL"}},
                ConditionalOperator="OR",
            )
        )
        == "ConditionalOperator can only be used when Filter or Expected has two or more elements"
    )
    assert invalid(
        lambda: dynamodb.put_item(TableName=table, Item=key("o"), ConditionalOperator="XOR")
    ).endswith("Member must satisfy enum value set: [OR, AND]")


def test_legacy_condition_errors(dynamodb: Any, table: str) -> None:
    assert (
        invalid(
            lambda: dynamodb.put_item(
                TableName=table, Item=key("l"), Expected={"v": {"Exists": True}}
            )
        )
        == INVALID + "Value must be provided when Exists is true for Attribute: v"
    )
    assert (
        invalid(
            lambda: dynamodb.scan(TableName=table, ScanFilter={"v": {"ComparisonOperator": "EQ"}})
        )
        == INVALID + "Invalid number of argument(s) for the EQ ComparisonOperator"
    )


# Query -----------------------------------------------------------------------------------------


def query(dynamodb: Any, table: str, **extra: Any) -> Any:
    return dynamodb.query(
        TableName=table,
        KeyConditionExpression="pk = :p",
        ExpressionAttributeValues={":p": {"S": "a"}, **extra.pop("values", {})},
        **extra,
    )


def test_query_needs_a_key_condition(dynamodb: Any, table: str) -> None:
    assert invalid(lambda: dynamodb.query(TableName=table)) == (
        "Either the KeyConditions or KeyConditionExpression parameter must be specified in the "
        "request."
    )
    assert (
        invalid(
            lambda: dynamodb.query(
                TableName=table,
                KeyConditionExpression="sk = :s",
                ExpressionAttributeValues={":s": {"N": "1"}},
            )
        )
        == "Query condition missed key schema element: pk"
    )
    assert (
        invalid(
            lambda: dynamodb.query(
                TableName=table,
                KeyConditionExpression="pk = :p",
                ExpressionAttributeValues={":p": {"N": "1"}},
            )
        )
        == INVALID + "Condition parameter type does not match schema type"
    )
    assert (
        invalid(
            lambda: dynamodb.query(
                TableName=table,
                KeyConditionExpression="pk = :p OR sk = :s",
                ExpressionAttributeValues={":p": {"S": "a"}, ":s": {"N": "1"}},
            )
        )
        == "Invalid operator used in KeyConditionExpression: OR"
    )
    assert (
        invalid(
            lambda: dynamodb.query(
                TableName=table,
                KeyConditions={
                    "pk": {"ComparisonOperator": "NE", "AttributeValueList": [{"S": "a"}]}
                },
            )
        )
        == "Attempted conditional constraint is not an indexable operation"
    )


def test_key_condition_syntax_is_checked_before_the_table(dynamodb: Any) -> None:
    assert (
        invalid(
            lambda: dynamodb.query(
                TableName="no-such-table",
                KeyConditionExpression="pk = = :p",
                ExpressionAttributeValues={":p": {"S": "a"}},
            )
        )
        == 'Invalid KeyConditionExpression: Syntax error; token: "=", near: "= = :p"'
    )


def test_query_filter_may_not_name_key_attributes(dynamodb: Any, table: str) -> None:
    assert (
        invalid(
            lambda: query(dynamodb, table, FilterExpression="sk > :s", values={":s": {"N": "0"}})
        )
        == "Filter Expression can only contain non-primary key attributes: "
        "Primary key attribute: sk"
    )
    assert (
        invalid(
            lambda: dynamodb.query(
                TableName=table,
                KeyConditions={
                    "pk": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "a"}]}
                },
                QueryFilter={"pk": {"ComparisonOperator": "NOT_NULL"}},
            )
        )
        == "QueryFilter can only contain non-primary key attributes: Primary key attribute: pk"
    )


def test_select_combinations(dynamodb: Any, table: str) -> None:
    assert invalid(lambda: query(dynamodb, table, Select="ALL_PROJECTED_ATTRIBUTES")) == (
        "ALL_PROJECTED_ATTRIBUTES can be used only when Querying using an IndexName"
    )
    assert invalid(lambda: query(dynamodb, table, Select="COUNT", ProjectionExpression="v")) == (
        "Cannot specify the ProjectionExpression when choosing to get only the Count"
    )
    assert invalid(lambda: dynamodb.scan(TableName=table, Select="SPECIFIC_ATTRIBUTES")) == (
        "Must specify the AttributesToGet or ProjectionExpression when choosing to get "
        "SPECIFIC_ATTRIBUTES"
    )
    assert (
        invalid(
            lambda: dynamodb.scan(TableName=table, Select="ALL_ATTRIBUTES", AttributesToGet=["pk"])
        )
        == "Cannot specify the AttributesToGet when choosing to get ALL_ATTRIBUTES"
    )
    reply = dynamodb.scan(TableName=table, Select="SPECIFIC_ATTRIBUTES", AttributesToGet=["sk"])
    assert reply["Items"] == [{"sk": {"N": "1"}}]


def test_index_name(dynamodb: Any, table: str) -> None:
    assert invalid(lambda: query(dynamodb, table, IndexName="byValue")) == (
        "The table does not have the specified index: byValue"
    )
    assert invalid(lambda: dynamodb.scan(TableName=table, IndexName="byValue")) == (
        "The table does not have the specified index: byValue"
    )
    assert error_of(lambda: dynamodb.scan(TableName="no-such-table", IndexName="byValue")) == (
        400,
        "ResourceNotFoundException",
        "Requested resource not found",
    )
    assert invalid(lambda: dynamodb.scan(TableName=table, IndexName="x")).endswith(
        "Member must have length greater than or equal to 3"
    )


def test_query_exclusive_start_key(dynamodb: Any, table: str) -> None:
    assert invalid(lambda: query(dynamodb, table, ExclusiveStartKey={"pk": {"S": "a"}})) == (
        "The provided starting key is invalid: " + KEY_MISMATCH
    )
    assert invalid(lambda: query(dynamodb, table, ExclusiveStartKey=key("b"))) == (
        "The provided starting key is outside query boundaries based on provided conditions"
    )
    assert (
        invalid(
            lambda: dynamodb.query(
                TableName=table,
                KeyConditionExpression="pk = :p AND sk > :s",
                ExpressionAttributeValues={":p": {"S": "a"}, ":s": {"N": "5"}},
                ExclusiveStartKey=key("a", 2),
            )
        )
        == "The provided starting key does not match the range key predicate"
    )
    assert (
        invalid(
            lambda: query(dynamodb, table, ExclusiveStartKey={"pk": {"S": "a"}, "sk": {"N": "x"}})
        )
        == "The provided starting key is invalid: "
        "The parameter cannot be converted to a numeric value: x"
    )


def test_limit_must_be_positive(dynamodb: Any, table: str) -> None:
    assert invalid(lambda: query(dynamodb, table, Limit=0)) == (
        "1 validation error detected: Value '0' at 'limit' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1"
    )


# Scan ------------------------------------------------------------------------------------------


def test_parallel_scan_parameters(dynamodb: Any, table: str) -> None:
    assert invalid(lambda: dynamodb.scan(TableName=table, Segment=0)) == (
        "The TotalSegments parameter is required but was not present in the request when "
        "Segment parameter is present"
    )
    assert invalid(lambda: dynamodb.scan(TableName=table, TotalSegments=2)) == (
        "The Segment parameter is required but was not present in the request when parameter "
        "TotalSegments is present"
    )
    assert invalid(lambda: dynamodb.scan(TableName=table, Segment=3, TotalSegments=3)) == (
        "The Segment parameter is zero-based and must be less than parameter TotalSegments: "
        "Segment: 3 is not less than TotalSegments: 3"
    )
    assert invalid(lambda: dynamodb.scan(TableName=table, Segment=0, TotalSegments=1_000_001)) == (
        "1 validation error detected: Value '1000001' at 'totalSegments' failed to satisfy "
        "constraint: Member must have value less than or equal to 1000000"
    )


def test_scan_start_key_must_belong_to_the_segment(dynamodb: Any, table: str) -> None:
    total = 4
    owner = next(
        segment
        for segment in range(total)
        if dynamodb.scan(TableName=table, Segment=segment, TotalSegments=total)["Count"]
    )
    other = (owner + 1) % total
    assert invalid(
        lambda: dynamodb.scan(
            TableName=table, Segment=other, TotalSegments=total, ExclusiveStartKey=key()
        )
    ) == (
        "The provided starting key is invalid: Invalid ExclusiveStartKey. Please use "
        f"ExclusiveStartKey with correct Segment. TotalSegments: {total} Segment: {other}"
    )
    reply = dynamodb.scan(
        TableName=table, Segment=owner, TotalSegments=total, ExclusiveStartKey=key()
    )
    assert reply["Count"] == 0


# Batches ---------------------------------------------------------------------------------------


def test_batch_write_limits(dynamodb: Any, table: str, table_name: Callable[[], str]) -> None:
    message = invalid(
        lambda: dynamodb.batch_write_item(
            RequestItems={table: [{"PutRequest": {"Item": key("w", i)}} for i in range(26)]}
        )
    )
    assert message.startswith("1 validation error detected: Value '{validation-table=[")
    assert message.endswith(
        "at 'requestItems' failed to satisfy constraint: Map value must satisfy constraint: "
        "[Member must have length less than or equal to 25, Member must have length greater than "
        "or equal to 1]"
    )
    other = table_name()
    assert (
        invalid(
            lambda: dynamodb.batch_write_item(
                RequestItems={
                    table: [{"PutRequest": {"Item": key("w", i)}} for i in range(13)],
                    other: [{"PutRequest": {"Item": key("w", i)}} for i in range(13)],
                }
            )
        )
        == "Too many items requested for the BatchWriteItem call"
    )
    assert invalid(lambda: dynamodb.batch_write_item(RequestItems={})) == (
        "1 validation error detected: Value '{}' at 'requestItems' failed to satisfy constraint: "
        "Member must have length greater than or equal to 1"
    )
    assert absent(dynamodb, table, key("w", 0))


def test_batch_write_requests_are_well_formed(dynamodb: Any, table: str) -> None:
    for entry in ({}, {"PutRequest": {"Item": key("f")}, "DeleteRequest": {"Key": key("f")}}):
        assert (
            invalid(
                lambda entry=entry: dynamodb.batch_write_item(
                    RequestItems={table: [{"PutRequest": {"Item": key("g")}}, entry]}
                )
            )
            == ONE_REQUEST
        )
    assert invalid(
        lambda: dynamodb.batch_write_item(RequestItems={table: [{"PutRequest": {}}]})
    ) == (
        "1 validation error detected: Value null at "
        "'requestItems.validation-table.member.1.member.putRequest.item' failed to satisfy "
        "constraint: Member must not be null"
    )
    assert absent(dynamodb, table, key("g"))


def test_batch_write_duplicates(dynamodb: Any, table: str) -> None:
    for second in (
        {"PutRequest": {"Item": {**key("d"), "v": {"S": "other"}}}},
        {"DeleteRequest": {"Key": key("d")}},
    ):
        assert (
            invalid(
                lambda second=second: dynamodb.batch_write_item(
                    RequestItems={table: [{"PutRequest": {"Item": key("d")}}, second]}
                )
            )
            == DUPLICATES
        )
    # Numbers are compared by value: 1 and 1.0 are one key.
    assert (
        invalid(
            lambda: dynamodb.batch_write_item(
                RequestItems={
                    table: [
                        {"DeleteRequest": {"Key": {"pk": {"S": "d"}, "sk": {"N": "1"}}}},
                        {"DeleteRequest": {"Key": {"pk": {"S": "d"}, "sk": {"N": "1.0"}}}},
                    ]
                }
            )
        )
        == DUPLICATES
    )
    assert absent(dynamodb, table, key("d"))


def test_batch_write_item_size(dynamodb: Any, table: str) -> None:
    big = {**key("big"), "v": {"S": "x" * (400 * 1024)}}
    assert (
        invalid(
            lambda: dynamodb.batch_write_item(
                RequestItems={
                    table: [{"PutRequest": {"Item": key("small")}}, {"PutRequest": {"Item": big}}]
                }
            )
        )
        == "Item size has exceeded the maximum allowed size"
    )
    assert absent(dynamodb, table, key("small"))


def test_batch_write_to_a_missing_table_writes_nothing(dynamodb: Any, table: str) -> None:
    assert error_of(
        lambda: dynamodb.batch_write_item(
            RequestItems={
                table: [{"PutRequest": {"Item": key("mt")}}],
                "no-such-table": [{"PutRequest": {"Item": key("mt")}}],
            }
        )
    ) == (400, "ResourceNotFoundException", "Requested resource not found")
    assert absent(dynamodb, table, key("mt"))


def test_batch_get_limits(dynamodb: Any, table: str, table_name: Callable[[], str]) -> None:
    message = invalid(
        lambda: dynamodb.batch_get_item(
            RequestItems={table: {"Keys": [key("g", i) for i in range(101)]}}
        )
    )
    assert message.startswith("1 validation error detected: Value '[")
    assert message.endswith(
        "at 'requestItems.validation-table.member.keys' failed to satisfy constraint: "
        "Member must have length less than or equal to 100"
    )
    other = table_name()
    assert (
        invalid(
            lambda: dynamodb.batch_get_item(
                RequestItems={
                    table: {"Keys": [key("g", i) for i in range(60)]},
                    other: {"Keys": [key("g", i) for i in range(60)]},
                }
            )
        )
        == "Too many items requested for the BatchGetItem call"
    )
    assert invalid(lambda: dynamodb.batch_get_item(RequestItems={table: {"Keys": []}})) == (
        "1 validation error detected: Value '[]' at 'requestItems.validation-table.member.keys' "
        "failed to satisfy constraint: Member must have length greater than or equal to 1"
    )


def test_batch_get_duplicates_and_projection_errors(dynamodb: Any, table: str) -> None:
    assert (
        invalid(lambda: dynamodb.batch_get_item(RequestItems={table: {"Keys": [key(), key()]}}))
        == DUPLICATES
    )
    assert (
        invalid(
            lambda: dynamodb.batch_get_item(
                RequestItems={table: {"Keys": [key()], "AttributesToGet": ["pk", "pk"]}}
            )
        )
        == INVALID + "Duplicate value in attribute name: pk"
    )
    assert (
        invalid(
            lambda: dynamodb.batch_get_item(
                RequestItems={
                    table: {
                        "Keys": [key()],
                        "ProjectionExpression": "#p",
                        "ExpressionAttributeNames": {"#p": "pk", "#q": "q"},
                    }
                }
            )
        )
        == "Value provided in ExpressionAttributeNames unused in expressions: keys: {#q}"
    )
