"""DynamoDB on the wire, byte for byte: raw HTTP requests against a real cluster.

No SDK here: an SDK hides the envelope (it parses `__type`, either message key, and retries). Each
case sends bytes with http.client and checks the HTTP status, the whole `__type` with its
namespace, which message key the text is under, and the text: the HTTP layer (404s, content
types, authentication), the error types, and the order DynamoDB checks a request in
(deserialise, then validate, then look the table up).
"""

from __future__ import annotations

import http.client
import json
import re
import urllib.parse
import zlib
from typing import Any

import pytest

from dynalab.cluster import LocalCluster
from tests.integration.conftest import create_active_table, dynamodb_client

SIGNATURE = (
    "AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-date;x-amz-target, Signature=0"
)
AMZ_JSON = "application/x-amz-json-1.0"
VALIDATE = "com.amazon.coral.validate#ValidationException"
SERIALIZATION = "com.amazon.coral.service#SerializationException"
DYNAMODB = "com.amazonaws.dynamodb.v20120810#"
KEY_CONDITION_ARGUMENTS = (
    "One or more parameter values were invalid: Invalid number of argument(s) for the EQ "
    "ComparisonOperator"
)


class Reply:
    def __init__(self, status: int, body: bytes, headers: http.client.HTTPMessage) -> None:
        self.status = status
        self.body = body
        self.headers = headers

    def json(self) -> Any:
        return json.loads(self.body)


def send(
    cluster: LocalCluster,
    body: bytes | None,
    headers: dict[str, str],
    method: str = "POST",
    path: str = "/",
) -> Reply:
    parsed = urllib.parse.urlsplit(cluster.router_url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    try:
        connection.request(method, path, body=body, headers=headers)
        response = connection.getresponse()
        reply = Reply(response.status, response.read(), response.headers)
    finally:
        connection.close()
    # Every reply, whatever it says, carries DynamoDB's request id and the CRC32 of its body.
    assert re.fullmatch("[0-9A-Z]{52}", reply.headers["x-amzn-RequestId"])
    assert reply.headers["x-amz-crc32"] == str(zlib.crc32(reply.body))
    return reply


def signed(operation: str | None, **more: str) -> dict[str, str]:
    headers = {
        "Content-Type": AMZ_JSON,
        "Authorization": SIGNATURE,
        "X-Amz-Date": "20240101T000000Z",
    }
    if operation is not None:
        headers["X-Amz-Target"] = f"DynamoDB_20120810.{operation}"
    headers.update(more)
    return headers


def call(cluster: LocalCluster, operation: str, body: Any, **headers: str) -> Reply:
    return send(cluster, json.dumps(body).encode(), signed(operation, **headers))


@pytest.fixture(scope="module")
def table(cluster: LocalCluster) -> str:
    return create_active_table(dynamodb_client(cluster.router_url), "wire-table")


# The HTTP layer ---------------------------------------------------------------------------------


def check_not_found(reply: Reply) -> None:
    assert reply.status == 404
    assert reply.body == b"<UnknownOperationException/>\n"


@pytest.mark.parametrize(
    ("method", "path"), [("GET", "/tables"), ("PUT", "/"), ("DELETE", "/"), ("OPTIONS", "/")]
)
def test_other_methods_get_a_404(cluster: LocalCluster, method: str, path: str) -> None:
    check_not_found(send(cluster, None, {}, method=method, path=path))


@pytest.mark.parametrize("content_type", [None, "text/plain", "application/x-amz-json-1.1"])
def test_a_body_without_dynamodb_content_type_gets_a_404(
    cluster: LocalCluster, content_type: str | None
) -> None:
    headers = signed("ListTables")
    del headers["Content-Type"]
    if content_type is not None:
        headers["Content-Type"] = content_type
    check_not_found(send(cluster, b"{}", headers))


def test_application_json_is_served_and_answered_in_kind(cluster: LocalCluster) -> None:
    reply = call(cluster, "ListTables", {}, **{"Content-Type": "application/json"})
    assert reply.status == 200
    assert reply.headers["Content-Type"] == "application/json"
    assert "TableNames" in reply.json()


def test_not_json_is_a_serialization_error_without_text(cluster: LocalCluster) -> None:
    reply = send(cluster, b"hi", signed("ListTables", **{"Content-Type": "application/json"}))
    assert (reply.status, reply.json()) == (400, {"__type": SERIALIZATION})
    assert reply.headers["Content-Type"] == "application/json"


def test_an_empty_body_is_a_serialization_error(cluster: LocalCluster) -> None:
    reply = send(cluster, b"", signed("ListTables"))
    assert (reply.status, reply.json()) == (400, {"__type": SERIALIZATION})


@pytest.mark.parametrize(
    "target",
    # A non-ASCII target (sent as Latin-1, as http.client does) once got a plain-text 500.
    [None, "DynamoDB_20120810.ListTable", "whatever", "DynamoDB_20120810.GetIt\u00e9m"],
)
def test_unknown_operation(cluster: LocalCluster, target: str | None) -> None:
    headers = signed(None)
    if target is not None:
        headers["X-Amz-Target"] = target
    reply = send(cluster, b"{}", headers)
    assert (reply.status, reply.json()) == (
        400,
        {"__type": "com.amazon.coral.service#UnknownOperationException"},
    )


@pytest.mark.parametrize("authorization", [None, "AWS4"])
def test_missing_authentication_token(cluster: LocalCluster, authorization: str | None) -> None:
    headers = signed("ListTables")
    del headers["Authorization"]
    if authorization is not None:
        headers["Authorization"] = authorization
    reply = send(cluster, b"{}", headers)
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": "com.amazon.coral.service#MissingAuthenticationTokenException",
            "message": "Request is missing Authentication Token",
        },
    )


def test_incomplete_signature(cluster: LocalCluster) -> None:
    headers = signed("ListTables", Authorization="AWS4-")
    del headers["X-Amz-Date"]
    reply = send(cluster, b"{}", headers)
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": "com.amazon.coral.service#IncompleteSignatureException",
            "message": "Authorization header requires 'Credential' parameter. "
            "Authorization header requires 'Signature' parameter. "
            "Authorization header requires 'SignedHeaders' parameter. "
            "Authorization header requires existence of either a 'X-Amz-Date' or a 'Date' "
            "header. Authorization=AWS4-",
        },
    )


# Error envelopes --------------------------------------------------------------------------------


def test_validation_exception_namespace_and_key(cluster: LocalCluster) -> None:
    reply = call(cluster, "ListTables", {"Limit": 0})
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": "1 validation error detected: Value '0' at 'limit' failed to satisfy "
            "constraint: Member must have value greater than or equal to 1",
        },
    )


@pytest.mark.parametrize(("operation", "member"), [("PutItem", "Item"), ("GetItem", "Key")])
@pytest.mark.parametrize("levels", [100, 500])
def test_a_value_nested_past_the_recursion_limit_is_refused(
    cluster: LocalCluster, table: str, operation: str, member: str, levels: int
) -> None:
    # 500 lists in lists are 1,000 levels of JSON, which the JSON parser takes: reading the body
    # against its shapes recursed once per level and answered 500. Such a value is refused as
    # nested past 32 levels, however deep it goes.
    nested = '{"L": [' * levels + '{"S": "x"}' + "]}" * levels
    body = f'{{"TableName": "{table}", "{member}": {{"pk": {{"S": "a"}}, "x": {nested}}}}}'
    if member == "Key":
        body = f'{{"TableName": "{table}", "Key": {{"pk": {nested}}}}}'
    reply = send(cluster, body.encode(), signed(operation))
    assert (reply.status, reply.json()) == (
        400,
        {"__type": VALIDATE, "message": "Nesting Levels have exceeded supported limits"},
    )


def test_serialization_exception_has_a_capital_message(cluster: LocalCluster) -> None:
    reply = call(cluster, "DescribeTable", {"TableName": True})
    assert (reply.status, reply.json()) == (
        400,
        {"__type": SERIALIZATION, "Message": "TRUE_VALUE cannot be converted to String"},
    )


def test_resource_not_found(cluster: LocalCluster) -> None:
    reply = call(cluster, "DescribeTable", {"TableName": "no-such-table"})
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": DYNAMODB + "ResourceNotFoundException",
            "message": "Requested resource not found: Table: no-such-table not found",
        },
    )


ACCESS_DENIED = "com.amazon.coral.service#AccessDeniedException"
VALID_ARN_FORMAT = (
    "Valid ARN format is 'arn:<awsPartition>:<vendor>:<region>:<subscriber>:"
    "resourceType/resourceName', where Resource name must have length less than or equal to 255, "
    "Resource name must have length greater than or equal to 3, Resource name must satisfy "
    "regular expression pattern: [a-zA-Z0-9_.-]+"
)


def _table_arn_refusals(table: str) -> list[tuple[str, str, str]]:
    """(TableName, error type, message) for TableNames that name no table here."""
    arn = f"arn:aws:dynamodb:us-east-1:000000000000:table/{table}"
    index = f"{arn}/index/byAuthor"
    other_region = arn.replace("us-east-1", "eu-west-1")
    too_long = arn + "x" * (1025 - len(arn))
    return [
        (
            index,
            VALIDATE,
            f"1 validation error detected: Value '{index}' at 'tableName' failed to satisfy "
            f"constraint: {VALID_ARN_FORMAT}",
        ),
        (
            "arn:aws:dynamodb:us-east-1:000000000000:table/ab",
            VALIDATE,
            "1 validation error detected: Value 'arn:aws:dynamodb:us-east-1:000000000000:"
            "table/ab' at 'tableName' failed to satisfy constraint: Table name of ARN must have "
            "length greater than or equal to 3",
        ),
        (
            other_region,
            VALIDATE,
            f"1 validation error detected: Invalid AWS region in '{other_region}'",
        ),
        (arn.replace("000000000000", "111122223333"), ACCESS_DENIED, "Access is denied"),
        (
            too_long,
            VALIDATE,
            f"1 validation error detected: Value '{too_long}' at 'tableName' failed to satisfy "
            "constraint: Member must have length less than or equal to 1024",
        ),
        (
            "n" * 256,
            VALIDATE,
            f"1 validation error detected: Value '{'n' * 256}' at 'tableName' failed to satisfy "
            "constraint: Member must have length less than or equal to 255",
        ),
    ]


def test_a_table_arn_that_names_no_table_here_is_refused_and_changes_nothing(
    cluster: LocalCluster, table: str
) -> None:
    """A malformed ARN, one of another Region, of another account, or too long, in a write, a
    read, a batch and a table operation: DynamoDB's refusal, and nothing written."""
    arn = f"arn:aws:dynamodb:us-east-1:000000000000:table/{table}"
    for name, kind, message in _table_arn_refusals(table):
        key = {"pk": {"S": f"arn-refused-{len(name)}"}}
        requests = [
            ("PutItem", {"TableName": name, "Item": key}),
            ("GetItem", {"TableName": name, "Key": key}),
            ("BatchWriteItem", {"RequestItems": {name: [{"PutRequest": {"Item": key}}]}}),
            ("TransactWriteItems", {"TransactItems": [{"Put": {"TableName": name, "Item": key}}]}),
            ("DescribeTable", {"TableName": name}),
        ]
        for operation, body in requests:
            reply = call(cluster, operation, body)
            where = "requestItems" if operation == "BatchWriteItem" else "tableName"
            if operation == "TransactWriteItems":
                where = "transactItems.1.member.put.tableName"
            if name == "n" * 256 and operation == "DescribeTable":
                # DescribeTable reports a name's length on its own, in its own words.
                expected = (
                    "TableName must be at least 3 characters long and at most 255 characters long"
                )
            else:
                expected = message.replace("at 'tableName'", f"at '{where}'")
            if operation == "BatchWriteItem" and name == "n" * 256:
                expected = (
                    f"1 validation error detected: Value '{{{'n' * 256}=[{{PutRequest={{Item="
                    f"{{pk={{S=arn-refused-256}}}}}}}}]}}' at 'requestItems' failed to satisfy "
                    "constraint: Map keys must satisfy constraint: [Member must have length less "
                    "than or equal to 255, Member must have length greater than or equal to 3, "
                    "Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+]"
                )
            answer = reply.json()
            assert (reply.status, answer["__type"]) == (400, kind), (operation, name)
            assert answer.get("message", answer.get("Message")) == expected, (operation, name)
        found = call(cluster, "GetItem", {"TableName": arn, "Key": key, "ConsistentRead": True})
        assert found.json() == {}, name


def test_resource_in_use(cluster: LocalCluster, table: str) -> None:
    reply = call(
        cluster,
        "CreateTable",
        {
            "TableName": table,
            "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
            "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
            "BillingMode": "PAY_PER_REQUEST",
        },
    )
    body = reply.json()
    assert (reply.status, body["__type"], set(body)) == (
        400,
        DYNAMODB + "ResourceInUseException",
        {"__type", "message"},
    )


def test_conditional_check_failed(cluster: LocalCluster, table: str) -> None:
    reply = call(
        cluster,
        "PutItem",
        {
            "TableName": table,
            "Item": {"pk": {"S": "wire"}},
            "ConditionExpression": "attribute_exists(pk)",
        },
    )
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": DYNAMODB + "ConditionalCheckFailedException",
            "message": "The conditional request failed",
        },
    )


# The order of checks ----------------------------------------------------------------------------


def test_a_wrongly_typed_member_comes_before_a_missing_table_name(cluster: LocalCluster) -> None:
    reply = call(cluster, "PutItem", {"Item": {"pk": {"S": 1}}})
    assert (reply.status, reply.json()) == (
        400,
        {"__type": SERIALIZATION, "Message": "NUMBER_VALUE cannot be converted to String"},
    )


@pytest.mark.parametrize(
    ("operation", "body", "message"),
    [
        (
            "Query",
            {"TableName": "t", "KeyConditionExpression": ["pk = :p"]},
            "Unrecognized collection type class java.lang.String",
        ),
        ("GetItem", {"Key": "pk"}, "Unexpected field type"),
        ("Scan", {"TableName": "t", "ExclusiveStartKey": {"pk": "a"}}, None),
        ("BatchWriteItem", {"RequestItems": {"t": {"PutRequest": {}}}}, None),
        ("CreateTable", {"ProvisionedThroughput": {"ReadCapacityUnits": "5"}}, None),
        # A binary that is not base64 is refused as it is read, before the missing TableName.
        (
            "PutItem",
            {"Item": {"pk": {"S": "a"}, "b": {"B": "abc"}}},
            "Base64 encoded length is expected a multiple of 4 bytes but found: 3",
        ),
    ],
)
def test_deserialisation_comes_before_constraints(
    cluster: LocalCluster, operation: str, body: Any, message: str | None
) -> None:
    reply = call(cluster, operation, body)
    parsed = reply.json()
    assert (reply.status, parsed["__type"], set(parsed)) == (
        400,
        SERIALIZATION,
        {"__type", "Message"},
    )
    if message is not None:
        assert parsed["Message"] == message


def test_an_or_key_condition_is_invalid_before_the_table_is_looked_up(
    cluster: LocalCluster,
) -> None:
    reply = call(
        cluster,
        "Query",
        {
            "TableName": "no-such-table",
            "KeyConditionExpression": "pk = :a OR pk = :b",
            "ExpressionAttributeValues": {":a": {"S": "x"}, ":b": {"S": "y"}},
        },
    )
    assert (reply.status, reply.json()) == (
        400,
        {"__type": VALIDATE, "message": "Invalid operator used in KeyConditionExpression: OR"},
    )


def test_a_non_indexable_key_condition_is_refused_after_the_table_is_found(
    cluster: LocalCluster, table: str
) -> None:
    conditions = {"pk": {"ComparisonOperator": "NE", "AttributeValueList": [{"S": "a"}]}}
    missing = call(cluster, "Query", {"TableName": "no-such-table", "KeyConditions": conditions})
    assert (missing.status, missing.json()["__type"]) == (
        400,
        DYNAMODB + "ResourceNotFoundException",
    )
    found = call(cluster, "Query", {"TableName": table, "KeyConditions": conditions})
    assert (found.status, found.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": "Attempted conditional constraint is not an indexable operation",
        },
    )


def test_key_conditions_missing_the_key_come_before_a_non_indexable_operator(
    cluster: LocalCluster, table: str
) -> None:
    not_equal = {"ComparisonOperator": "NE", "AttributeValueList": [{"S": "a"}]}
    reply = call(cluster, "Query", {"TableName": table, "KeyConditions": {"other": not_equal}})
    assert (reply.status, reply.json()) == (
        400,
        {"__type": VALIDATE, "message": "Query condition missed key schema element: pk"},
    )
    reply = call(
        cluster,
        "Query",
        {
            "TableName": table,
            "KeyConditions": {"pk": not_equal},
            "ExclusiveStartKey": {"other": {"S": "a"}},
        },
    )
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": "The provided starting key is invalid: "
            "The provided key element does not match the schema",
        },
    )


@pytest.mark.parametrize("start", ["a", "b"])
def test_a_query_of_a_table_without_a_sort_key_cannot_be_restarted(
    cluster: LocalCluster, table: str, start: str
) -> None:
    reply = call(
        cluster,
        "Query",
        {
            "TableName": table,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": {"S": "a"}},
            "ExclusiveStartKey": {"pk": {"S": start}},
        },
    )
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": "The query can return at most one row and cannot be restarted",
        },
    )


def test_a_query_of_a_table_without_a_sort_key_gives_no_starting_key_back(
    cluster: LocalCluster, table: str
) -> None:
    # A paginator would send one back, and it cannot be restarted: DynamoDB gives none.
    item = {"pk": {"S": "one-item-query"}}
    assert call(cluster, "PutItem", {"TableName": table, "Item": item}).status == 200
    reply = call(
        cluster,
        "Query",
        {
            "TableName": table,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": item["pk"]},
            "Limit": 1,
        },
    )
    assert (reply.status, reply.json()) == (
        200,
        {"Count": 1, "ScannedCount": 1, "Items": [item]},
    )


def test_describe_time_to_live_checks_the_name_before_the_lookup(cluster: LocalCluster) -> None:
    reply = call(cluster, "DescribeTimeToLive", {"TableName": "a"})
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": "TableName must be at least 3 characters long and at most 255 characters "
            "long",
        },
    )


def test_the_starting_key_is_read_after_the_key_conditions(
    cluster: LocalCluster, table: str
) -> None:
    reply = call(
        cluster,
        "Query",
        {
            "TableName": table,
            "ExclusiveStartKey": {"pk": {"N": "not a number"}},
            "KeyConditions": {"pk": {"ComparisonOperator": "EQ", "AttributeValueList": []}},
        },
    )
    assert (reply.status, reply.json()) == (
        400,
        {"__type": VALIDATE, "message": KEY_CONDITION_ARGUMENTS},
    )
    reply = call(
        cluster,
        "Query",
        {
            "TableName": table,
            "ExclusiveStartKey": {"pk": {"N": "not a number"}},
            "KeyConditions": {
                "pk": {"ComparisonOperator": "EQ", "AttributeValueList": [{"S": "a"}]}
            },
        },
    )
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": "The provided starting key is invalid: "
            "The parameter cannot be converted to a numeric value: not a number",
        },
    )


INVALID = "One or more parameter values were invalid: "


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"BS": []}, INVALID + "Binary sets should not be empty"),
        ({"SS": []}, INVALID + "An string set  may not be empty"),
        (
            {"BS": ["Yg==", "Yg=="]},
            INVALID + "Input collection [Yg==, Yg==]of type BS contains duplicates.",
        ),
        ({"S": "a", "N": "x1"}, "The parameter cannot be converted to a numeric value: x1"),
        # An empty number is refused with nothing after the words (dynalite's tests, run against
        # DynamoDB), in a set as alone and before the value's two types are refused.
        ({"N": ""}, "The parameter cannot be converted to a numeric value"),
        ({"NS": ["1", ""]}, "The parameter cannot be converted to a numeric value"),
        ({"S": "a", "N": ""}, "The parameter cannot be converted to a numeric value"),
        # Exponents of 1,000 digits (once a 500 from Decimal) are numbers out of range.
        (
            {"N": "1E" + "9" * 1000},
            "Number overflow. Attempting to store a number with magnitude larger than supported "
            "range",
        ),
        (
            {"N": "1E-" + "9" * 1000},
            "Number underflow. Attempting to store a number with magnitude smaller than "
            "supported range",
        ),
        (
            {"S": "a", "N": "1"},
            "Supplied AttributeValue has more than one datatypes set, must contain exactly one "
            "of the supported datatypes",
        ),
    ],
)
def test_attribute_value_texts(
    cluster: LocalCluster, table: str, value: dict[str, Any], message: str
) -> None:
    reply = call(cluster, "PutItem", {"TableName": table, "Item": {"pk": {"S": "v"}, "a": value}})
    assert (reply.status, reply.json()) == (400, {"__type": VALIDATE, "message": message})


@pytest.mark.parametrize("operation", ["Scan", "Query"])
def test_a_starting_key_with_more_than_a_hash_only_tables_key_is_refused(
    cluster: LocalCluster, table: str, operation: str
) -> None:
    body: dict[str, Any] = {
        "TableName": table,
        "ExclusiveStartKey": {"pk": {"S": "a"}, "sk": {"S": "b"}},
    }
    if operation == "Query":
        body["KeyConditionExpression"] = "pk = :p"
        body["ExpressionAttributeValues"] = {":p": {"S": "a"}}
    reply = call(cluster, operation, body)
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": "The provided starting key is invalid: "
            "The provided key element does not match the schema",
        },
    )


def test_a_boolean_given_as_a_string_in_expression_values(
    cluster: LocalCluster, table: str
) -> None:
    reply = call(
        cluster,
        "PutItem",
        {
            "TableName": table,
            "Item": {"pk": {"S": "v"}},
            "ConditionExpression": "a = :b",
            "ExpressionAttributeValues": {":b": {"BOOL": "true"}},
        },
    )
    assert (reply.status, reply.json()) == (
        400,
        {"__type": SERIALIZATION, "Message": "Unexpected token received from parser"},
    )


V = {"S": "v"}
NESTED_KEY = (
    "Key attributes must be scalars; list random access '[]' and map lookup '.' are not "
    "allowed: Key: pk"
)


@pytest.mark.parametrize(
    ("operation", "body"),
    [
        (
            "GetItem",
            {
                "Key": {"pk": {"S": "a"}},
                "ProjectionExpression": "#a.b",
                "ExpressionAttributeNames": {"#a": "pk"},
            },
        ),
        ("Scan", {"FilterExpression": "pk[0] = :v", "ExpressionAttributeValues": {":v": V}}),
        ("Scan", {"ProjectionExpression": "colour, pk.x"}),
        (
            "Query",
            {
                "KeyConditionExpression": "pk = :v",
                "FilterExpression": "pk.x = :v",
                "ExpressionAttributeValues": {":v": V},
            },
        ),
    ],
)
def test_a_key_attribute_reached_through_a_document_path(
    cluster: LocalCluster, table: str, operation: str, body: dict[str, Any]
) -> None:
    reply = call(cluster, operation, {"TableName": table, **body})
    assert (reply.status, reply.json()) == (400, {"__type": VALIDATE, "message": NESTED_KEY})
    missing = call(cluster, operation, {"TableName": "no-such-table", **body})
    assert missing.json()["__type"] == DYNAMODB + "ResourceNotFoundException"


def test_a_document_path_into_another_attribute_is_fine(cluster: LocalCluster, table: str) -> None:
    reply = call(cluster, "Scan", {"TableName": table, "ProjectionExpression": "colour.x, pk"})
    assert reply.status == 200


# Compressed bodies --------------------------------------------------------------------------------

INTERNAL_ERROR = {"__type": DYNAMODB + "InternalServerError", "message": "Internal server error"}


def compressed(data: bytes, coding: str) -> bytes:
    wbits = {"gzip": 31, "deflate": 15, "raw-deflate": -15}[coding]
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return compressor.compress(data) + compressor.flush()


def put_body(table: str, key: str, **more: Any) -> bytes:
    return json.dumps({"TableName": table, "Item": {"pk": {"S": key}, **more}}).encode()


def stored(cluster: LocalCluster, table: str, key: str) -> Any:
    reply = call(cluster, "GetItem", {"TableName": table, "Key": {"pk": {"S": key}}})
    assert reply.status == 200
    return reply.json().get("Item")


def test_a_compressed_body_is_inflated(cluster: LocalCluster, table: str) -> None:
    bodies = {
        "gzip": compressed(put_body(table, "gz"), "gzip"),
        # Two gzip members one after another are one body, as DynamoDB reads them.
        "GZIP": compressed(put_body(table, "gz2")[:15], "gzip")
        + compressed(put_body(table, "gz2")[15:], "gzip"),
        "deflate": compressed(put_body(table, "zl"), "deflate"),
    }
    for coding, body in bodies.items():
        reply = send(cluster, body, signed("PutItem", **{"Content-Encoding": coding}))
        assert (reply.status, reply.json()) == (200, {}), coding
    raw = compressed(put_body(table, "raw", v={"S": "x"}), "raw-deflate")
    assert send(cluster, raw, signed("PutItem", **{"Content-Encoding": "deflate"})).status == 200
    for key in ("gz", "gz2", "zl"):
        assert stored(cluster, table, key) == {"pk": {"S": key}}
    assert stored(cluster, table, "raw") == {"pk": {"S": "raw"}, "v": {"S": "x"}}


def test_a_body_that_does_not_inflate_is_a_500_and_changes_nothing(
    cluster: LocalCluster, table: str
) -> None:
    cases = {
        "plain under gzip": ("gzip", put_body(table, "bad1")),
        "truncated gzip": ("gzip", compressed(put_body(table, "bad2"), "gzip")[:-4]),
        "empty gzip": ("gzip", b""),
        "a coding DynamoDB does not read": ("br", put_body(table, "bad3")),
    }
    for case, (coding, body) in cases.items():
        reply = send(cluster, body, signed("PutItem", **{"Content-Encoding": coding}))
        assert (reply.status, reply.json()) == (500, INTERNAL_ERROR), case
    for key in ("bad1", "bad2", "bad3"):
        assert stored(cluster, table, key) is None


def test_a_body_inflating_past_16_mb_is_refused_as_an_oversized_one(
    cluster: LocalCluster, table: str
) -> None:
    body = put_body(table, "bomb")
    # 20 MB of spaces before the closing brace: valid JSON, about 20 KB compressed.
    bomb = compressed(body[:-1] + b" " * (20 * 1024 * 1024) + body[-1:], "gzip")
    assert len(bomb) < 100 * 1024
    reply = send(cluster, bomb, signed("PutItem", **{"Content-Encoding": "gzip"}))
    assert (reply.status, reply.body) == (413, b"")
    assert stored(cluster, table, "bomb") is None


def test_a_large_reply_is_compressed_when_the_client_accepts_it(
    cluster: LocalCluster, table: str
) -> None:
    value = "x" * 4096
    assert send(cluster, put_body(table, "big", v={"S": value}), signed("PutItem")).status == 200
    get = json.dumps({"TableName": table, "Key": {"pk": {"S": "big"}}}).encode()
    small = json.dumps(
        {"TableName": table, "Key": {"pk": {"S": "big"}}, "ProjectionExpression": "pk"}
    ).encode()
    expected = {"Item": {"pk": {"S": "big"}, "v": {"S": value}}}
    for accept, coding, inflate in (
        ("gzip", "gzip", lambda data: zlib.decompress(data, 31)),
        ("br, deflate;q=0.9, gzip;q=0.5", "deflate", zlib.decompress),
        ("*", "gzip", lambda data: zlib.decompress(data, 31)),
    ):
        # `send` checks that x-amz-crc32 is the CRC32 of the bytes sent: the compressed ones.
        reply = send(cluster, get, signed("GetItem", **{"Accept-Encoding": accept}))
        assert reply.headers["Content-Encoding"] == coding, accept
        assert len(reply.body) < 200
        assert json.loads(inflate(reply.body)) == expected
        # A reply under 4 KB is sent as it is, whatever the client accepts.
        reply = send(cluster, small, signed("GetItem", **{"Accept-Encoding": accept}))
        assert "Content-Encoding" not in reply.headers
        assert reply.json() == {"Item": {"pk": {"S": "big"}}}
    for accept in ("identity", "br", "gzip;q=0", None):
        headers = (
            signed("GetItem")
            if accept is None
            else signed("GetItem", **{"Accept-Encoding": accept})
        )
        reply = send(cluster, get, headers)
        assert "Content-Encoding" not in reply.headers and reply.json() == expected, accept


def test_boto3_reads_large_replies_plain_or_gzip_with_their_crc32_checked(
    cluster: LocalCluster, table: str
) -> None:
    value = "y" * 8192
    client = dynamodb_client(cluster.router_url)
    client.put_item(TableName=table, Item={"pk": {"S": "boto-big"}, "v": {"S": value}})
    # botocore asks for no compression (urllib3 sends "Accept-Encoding: identity"): plain.
    plain = client.get_item(TableName=table, Key={"pk": {"S": "boto-big"}})
    assert "content-encoding" not in plain["ResponseMetadata"]["HTTPHeaders"]
    assert plain["Item"]["v"]["S"] == value

    # A client asking for gzip and inflating before it parses, as the Go SDK v2's DynamoDB
    # customizations do. botocore checks x-amz-crc32 against the bytes on the wire (its retry
    # handler's CRC32Checker, which raises ChecksumError once its retries are spent), so this
    # reads the item only if the CRC32 is of the compressed bytes, as DynamoDB's is.
    gzipped = dynamodb_client(cluster.router_url)
    inflated: list[int] = []

    def ask_for_gzip(request: Any, **_: Any) -> None:
        request.headers["Accept-Encoding"] = "gzip"

    def inflate(response_dict: dict[str, Any], **_: Any) -> None:
        if response_dict["headers"].get("Content-Encoding") == "gzip":
            response_dict["body"] = zlib.decompress(response_dict["body"], 31)
            inflated.append(len(response_dict["body"]))

    gzipped.meta.events.register("before-send.dynamodb.*", ask_for_gzip)
    gzipped.meta.events.register("before-parse.dynamodb.*", inflate)
    reply = gzipped.get_item(TableName=table, Key={"pk": {"S": "boto-big"}})
    assert reply["ResponseMetadata"]["HTTPHeaders"]["content-encoding"] == "gzip"
    assert reply["Item"]["v"]["S"] == value and len(inflated) == 1 and inflated[0] > 8192
    # A small reply is not compressed even when asked for.
    small = gzipped.get_item(
        TableName=table, Key={"pk": {"S": "boto-big"}}, ProjectionExpression="pk"
    )
    assert "content-encoding" not in small["ResponseMetadata"]["HTTPHeaders"]
    assert small["Item"] == {"pk": {"S": "boto-big"}} and len(inflated) == 1


# Tagging's order ---------------------------------------------------------------------------------

TAG_OPERATIONS = ("TagResource", "UntagResource", "ListTagsOfResource")


@pytest.mark.parametrize("operation", TAG_OPERATIONS)
def test_a_missing_or_empty_resource_arn_is_refused_before_the_other_members(
    cluster: LocalCluster, operation: str
) -> None:
    # Neither Tags nor TagKeys is given: the ARN is reported alone, in dynalite's captures of
    # DynamoDB "Invalid TableArn" for none and IAM's denial of resource "*" for an empty one.
    reply = call(cluster, operation, {})
    assert (reply.status, reply.json()) == (
        400,
        {"__type": VALIDATE, "message": "Invalid TableArn"},
    )
    reply = call(cluster, operation, {"ResourceArn": ""})
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": ACCESS_DENIED,
            "Message": "User: arn:aws:iam::000000000000:root is not authorized to perform: "
            f"dynamodb:{operation} on resource: *",
        },
    )


@pytest.mark.parametrize(
    ("operation", "member"), [("TagResource", "tags"), ("UntagResource", "tagKeys")]
)
def test_a_tag_requests_members_come_before_its_arn_and_its_arn_before_its_tags(
    cluster: LocalCluster, table: str, operation: str, member: str
) -> None:
    """dynalite's captures of DynamoDB: an ARN that names no table of this Region waits for the
    missing member's constraint, and an empty list waits for the ARN (even one naming a table
    too short to be one), before the table is looked up."""
    reply = call(cluster, operation, {"ResourceArn": "a:b:c:d:e:f/g"})
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": f"1 validation error detected: Value null at '{member}' failed to satisfy "
            "constraint: Member must not be null",
        },
    )
    empty = {"Tags": []} if operation == "TagResource" else {"TagKeys": []}
    short = "arn:aws:dynamodb:us-east-1:000000000000:table/ab"
    reply = call(cluster, operation, {"ResourceArn": short, **empty})
    assert (reply.status, reply.json()) == (
        400,
        {
            "__type": VALIDATE,
            "message": f"Invalid TableArn: Invalid ResourceArn provided as input {short}",
        },
    )
    missing = "arn:aws:dynamodb:us-east-1:000000000000:table/no-such-table"
    reply = call(cluster, operation, {"ResourceArn": missing, **empty})
    what = "Tag" if operation == "TagResource" else "Tag Key"
    assert (reply.status, reply.json()) == (
        400,
        {"__type": VALIDATE, "message": f"Atleast one {what} needs to be provided as Input."},
    )
