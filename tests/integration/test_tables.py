"""Table operations and the router's front door, against a real cluster (three nodes, two routers).

CreateTable, DescribeTable, ListTables, DeleteTable and DescribeEndpoints through boto3; every
CreateTable validation error as DynamoDB words it; two routers sharing one catalog; and the wire
protocol's own errors through raw HTTP.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import datetime
import http.client
import json
import re
import time
import urllib.parse
import uuid
import zlib
from collections.abc import Callable
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError

from core import limits
from core.errors import ResourceNotFound
from dynalab.cluster import LocalCluster
from router.context import RouterContext
from router.routing import Route
from rpc import ops
from tests.integration.conftest import create_active_table, error_of

INVALID = "One or more parameter values were invalid: "
# Routers re-read the catalog every second; a change made through one router must show in another
# well within this.
CATALOG_PROPAGATION_S = 10.0
# Signatures are not verified yet, so raw requests only need the shape of one.
SIGNATURE = (
    "AWS4-HMAC-SHA256 Credential=test/20240101/us-east-1/dynamodb/aws4_request, "
    "SignedHeaders=content-type;host;x-amz-target, Signature=0"
)


def simple_table(name: Any, **extra: Any) -> dict[str, Any]:
    request = {
        "TableName": name,
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    request.update(extra)
    return request


def eventually(check: Callable[[], bool], timeout: float = CATALOG_PROPAGATION_S) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"not true within {timeout} s: {check.__doc__ or check}")
        time.sleep(0.05)


def all_table_names(dynamodb: Any, page_size: int | None = None) -> list[str]:
    names: list[str] = []
    request: dict[str, Any] = {} if page_size is None else {"Limit": page_size}
    while True:
        page = dynamodb.list_tables(**request)
        names.extend(page["TableNames"])
        if "LastEvaluatedTableName" not in page:
            return names
        request["ExclusiveStartTableName"] = page["LastEvaluatedTableName"]


def raw_post(url: str, body: bytes, headers: dict[str, str]) -> tuple[int, dict[str, Any], Any]:
    """POST `body` to a router without boto3; return (status, parsed JSON body, headers)."""
    parsed = urllib.parse.urlsplit(url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    try:
        connection.request("POST", "/", body=body, headers=headers)
        response = connection.getresponse()
        data = response.read()
    finally:
        connection.close()
    assert response.headers["x-amz-crc32"] == str(zlib.crc32(data))
    assert re.fullmatch("[0-9A-Z]{52}", response.headers["x-amzn-RequestId"])
    return response.status, json.loads(data), response.headers


# Life cycle ------------------------------------------------------------------------------------


def test_create_describe_list_delete(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    request = {
        "TableName": name,
        "AttributeDefinitions": [
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "N"},
        ],
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "BillingMode": "PAY_PER_REQUEST",
    }
    before = datetime.datetime.now(datetime.UTC)
    created = dynamodb.create_table(**request)["TableDescription"]
    assert created["TableName"] == name
    assert created["TableStatus"] == "CREATING"
    assert created["KeySchema"] == request["KeySchema"]
    assert created["AttributeDefinitions"] == request["AttributeDefinitions"]

    described = dynamodb.describe_table(TableName=name)["Table"]
    assert described["TableStatus"] == "ACTIVE"
    assert described["TableName"] == name
    assert described["KeySchema"] == request["KeySchema"]
    assert described["AttributeDefinitions"] == request["AttributeDefinitions"]
    assert described["ItemCount"] == 0
    assert described["TableSizeBytes"] == 0
    assert described["ProvisionedThroughput"] == {
        "NumberOfDecreasesToday": 0,
        "ReadCapacityUnits": 0,
        "WriteCapacityUnits": 0,
    }
    assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    assert described["TableArn"] == f"arn:aws:dynamodb:us-east-1:000000000000:table/{name}"
    assert described["TableId"] == created["TableId"]
    uuid.UUID(described["TableId"])
    created_at = described["CreationDateTime"]
    assert before - datetime.timedelta(seconds=5) <= created_at
    assert created_at <= datetime.datetime.now(datetime.UTC)

    assert name in all_table_names(dynamodb)

    deleted = dynamodb.delete_table(TableName=name)["TableDescription"]
    assert (deleted["TableStatus"], deleted["TableName"]) == ("DELETING", name)
    # DeleteTable's description, as DynamoDB's: what is going, not how it was defined.
    assert not {"KeySchema", "AttributeDefinitions", "CreationDateTime"} & deleted.keys()
    assert (deleted["ItemCount"], deleted["TableSizeBytes"]) == (0, 0)
    assert deleted["TableArn"] == described["TableArn"]
    assert deleted["TableId"] == described["TableId"]
    assert deleted["ProvisionedThroughput"] == described["ProvisionedThroughput"]
    assert error_of(lambda: dynamodb.describe_table(TableName=name)) == (
        400,
        "ResourceNotFoundException",
        f"Requested resource not found: Table: {name} not found",
    )
    assert name not in all_table_names(dynamodb)


PROTECTED = (
    400,
    "ValidationException",
    "Resource cannot be deleted as it is currently protected against deletion. "
    "Disable deletion protection first.",
)


def test_deletion_protection(dynamodb: Any, table_name: Callable[[], str]) -> None:
    """DeleteTable is refused while DeletionProtectionEnabled is set, and the table and its
    items stay; UpdateTable lifts and sets it."""
    name = table_name()
    created = dynamodb.create_table(**simple_table(name, DeletionProtectionEnabled=True))
    assert created["TableDescription"]["DeletionProtectionEnabled"] is True
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "kept"}})
    assert error_of(lambda: dynamodb.delete_table(TableName=name)) == PROTECTED
    described = dynamodb.describe_table(TableName=name)["Table"]
    assert (described["TableStatus"], described["DeletionProtectionEnabled"]) == ("ACTIVE", True)
    assert "Item" in dynamodb.get_item(TableName=name, Key={"pk": {"S": "kept"}})

    lifted = dynamodb.update_table(TableName=name, DeletionProtectionEnabled=False)
    assert lifted["TableDescription"]["DeletionProtectionEnabled"] is False
    assert dynamodb.describe_table(TableName=name)["Table"]["DeletionProtectionEnabled"] is False
    dynamodb.update_table(TableName=name, DeletionProtectionEnabled=True)
    assert error_of(lambda: dynamodb.delete_table(TableName=name)) == PROTECTED

    # Set together with a throughput change, in the same update of the row.
    dynamodb.update_table(
        TableName=name,
        BillingMode="PROVISIONED",
        ProvisionedThroughput={"ReadCapacityUnits": 5, "WriteCapacityUnits": 5},
        DeletionProtectionEnabled=False,
    )
    eventually(lambda: dynamodb.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE")
    described = dynamodb.describe_table(TableName=name)["Table"]
    assert described["DeletionProtectionEnabled"] is False
    assert described["ProvisionedThroughput"]["WriteCapacityUnits"] == 5
    dynamodb.delete_table(TableName=name)
    assert name not in all_table_names(dynamodb)


def test_table_class(dynamodb: Any, table_name: Callable[[], str]) -> None:
    """TableClass is recorded and described as DynamoDB describes it: no TableClassSummary
    until a request names a class, LastUpdateDateTime once UpdateTable changed it."""
    plain = table_name()
    dynamodb.create_table(**simple_table(plain))
    assert "TableClassSummary" not in dynamodb.describe_table(TableName=plain)["Table"]

    name = table_name()
    created = dynamodb.create_table(**simple_table(name, TableClass="STANDARD_INFREQUENT_ACCESS"))
    summary = created["TableDescription"]["TableClassSummary"]
    assert summary == {"TableClass": "STANDARD_INFREQUENT_ACCESS"}
    before = datetime.datetime.now(datetime.UTC)
    updated = dynamodb.update_table(TableName=name, TableClass="STANDARD")["TableDescription"]
    assert updated["TableStatus"] == "UPDATING"
    assert updated["TableClassSummary"]["TableClass"] == "STANDARD"
    described = dynamodb.describe_table(TableName=name)["Table"]
    assert described["TableStatus"] == "ACTIVE"
    assert described["TableClassSummary"]["TableClass"] == "STANDARD"
    changed_at = described["TableClassSummary"]["LastUpdateDateTime"]
    assert (
        before - datetime.timedelta(seconds=5) <= changed_at <= datetime.datetime.now(datetime.UTC)
    )
    # Naming the class the table has changes nothing, so it is not an update in progress.
    again = dynamodb.update_table(TableName=name, TableClass="STANDARD")["TableDescription"]
    assert again["TableStatus"] == "ACTIVE"
    assert again["TableClassSummary"]["LastUpdateDateTime"] == changed_at
    # DynamoDB's words for a class it does not have, before the table is looked up (as captured
    # against the service: ack-api-quirks DDB-TABLE-442).
    for table in (name, "no-such-table"):
        assert error_of(
            lambda table=table: dynamodb.update_table(TableName=table, TableClass="COLD")
        ) == (
            400,
            "ValidationException",
            "Invalid table-class parameter provided. Please try again with a valid table-class "
            "value: [STANDARD, STANDARD_INFREQUENT_ACCESS].",
        )
    plain_update = dynamodb.update_table(TableName=plain, TableClass="STANDARD")
    assert plain_update["TableDescription"]["TableClassSummary"] == {"TableClass": "STANDARD"}


def test_provisioned_table_reports_its_throughput(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    request = simple_table(
        name, ProvisionedThroughput={"ReadCapacityUnits": 7, "WriteCapacityUnits": 3}
    )
    del request["BillingMode"]
    dynamodb.create_table(**request)
    described = dynamodb.describe_table(TableName=name)["Table"]
    assert described["ProvisionedThroughput"] == {
        "NumberOfDecreasesToday": 0,
        "ReadCapacityUnits": 7,
        "WriteCapacityUnits": 3,
    }
    assert described["BillingModeSummary"]["BillingMode"] == "PROVISIONED"


@pytest.mark.parametrize("key_type", ["S", "N", "B"])
def test_every_key_type(dynamodb: Any, table_name: Callable[[], str], key_type: str) -> None:
    name = table_name()
    request = simple_table(name)
    request["AttributeDefinitions"] = [
        {"AttributeName": "pk", "AttributeType": key_type},
        {"AttributeName": "sk", "AttributeType": key_type},
    ]
    request["KeySchema"].append({"AttributeName": "sk", "KeyType": "RANGE"})
    dynamodb.create_table(**request)
    described = dynamodb.describe_table(TableName=name)["Table"]
    assert described["AttributeDefinitions"] == request["AttributeDefinitions"]


def test_waiter_sees_the_table_exist(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    dynamodb.create_table(**simple_table(name))
    dynamodb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1})
    dynamodb.delete_table(TableName=name)
    dynamodb.get_waiter("table_not_exists").wait(TableName=name, WaiterConfig={"Delay": 1})


def test_create_existing_table(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    dynamodb.create_table(**simple_table(name))
    assert error_of(lambda: dynamodb.create_table(**simple_table(name))) == (
        400,
        "ResourceInUseException",
        f"Table already exists: {name}",
    )


def test_name_can_be_reused_after_delete(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    first = dynamodb.create_table(**simple_table(name))["TableDescription"]["TableId"]
    dynamodb.delete_table(TableName=name)
    second = dynamodb.create_table(**simple_table(name))["TableDescription"]["TableId"]
    assert first != second
    assert dynamodb.describe_table(TableName=name)["Table"]["TableStatus"] == "ACTIVE"


@pytest.mark.parametrize("operation", ["describe_table", "delete_table"])
def test_unknown_table(dynamodb: Any, table_name: Callable[[], str], operation: str) -> None:
    name = table_name()
    assert error_of(lambda: getattr(dynamodb, operation)(TableName=name)) == (
        400,
        "ResourceNotFoundException",
        f"Requested resource not found: Table: {name} not found",
    )


def test_concurrent_creates_of_one_name(
    cluster: LocalCluster, dynamodb_for: Callable[[str], Any], table_name: Callable[[], str]
) -> None:
    """Through both routers at once: exactly one CreateTable wins, the others see it exists."""
    name = table_name()
    clients = [dynamodb_for(url) for url in cluster.router_urls] * 3

    def create(client: Any) -> str:
        try:
            client.create_table(**simple_table(name))
        except ClientError as error:
            return str(error.response["Error"]["Code"])
        return "created"

    with concurrent.futures.ThreadPoolExecutor(len(clients)) as pool:
        outcomes = sorted(pool.map(create, clients))
    assert outcomes == ["ResourceInUseException"] * (len(clients) - 1) + ["created"]


# ListTables ------------------------------------------------------------------------------------


def test_list_tables_pages(dynamodb: Any, table_name: Callable[[], str]) -> None:
    names = [table_name() for _ in range(5)]
    for name in names:
        dynamodb.create_table(**simple_table(name))
    everything = all_table_names(dynamodb)
    assert everything == sorted(everything)
    assert set(names) <= set(everything)

    paged: list[str] = []
    request: dict[str, Any] = {"Limit": 2}
    while True:
        page = dynamodb.list_tables(**request)
        assert 1 <= len(page["TableNames"]) <= 2
        paged.extend(page["TableNames"])
        if "LastEvaluatedTableName" not in page:
            break
        assert page["LastEvaluatedTableName"] == page["TableNames"][-1]
        request["ExclusiveStartTableName"] = page["LastEvaluatedTableName"]
    assert paged == everything

    # A start name need not be a table: the page begins with the next name after it.
    start = names[2][:-1]
    page = dynamodb.list_tables(ExclusiveStartTableName=start, Limit=100)
    assert page["TableNames"] == [n for n in everything if n > start][:100]


@pytest.mark.parametrize(
    ("request_body", "message"),
    [
        (
            {"Limit": 0},
            "1 validation error detected: Value '0' at 'limit' failed to satisfy constraint: "
            "Member must have value greater than or equal to 1",
        ),
        (
            {"Limit": 101},
            "1 validation error detected: Value '101' at 'limit' failed to satisfy constraint: "
            "Member must have value less than or equal to 100",
        ),
        (
            {"ExclusiveStartTableName": "a;"},
            "2 validation errors detected: Value 'a;' at 'exclusiveStartTableName' failed to "
            "satisfy constraint: Member must satisfy regular expression pattern: "
            "[a-zA-Z0-9_.-]+; Value 'a;' at 'exclusiveStartTableName' failed to satisfy "
            "constraint: Member must have length greater than or equal to 3",
        ),
    ],
)
def test_list_tables_validation(dynamodb: Any, request_body: dict[str, Any], message: str) -> None:
    assert error_of(lambda: dynamodb.list_tables(**request_body)) == (
        400,
        "ValidationException",
        message,
    )


# CreateTable validation -------------------------------------------------------------------------

NOT_MATCHING = (
    INVALID + "Number of attributes in KeySchema does not exactly match number of attributes "
    "defined in AttributeDefinitions"
)


def _without(member: str) -> Callable[[dict[str, Any]], None]:
    def change(request: dict[str, Any]) -> None:
        del request[member]

    return change


def _set(member: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(request: dict[str, Any]) -> None:
        request[member] = value

    return change


def _global_index_keyed_on_a_name_declared_twice(request: dict[str, Any]) -> None:
    request["AttributeDefinitions"] = [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "gk", "AttributeType": "S"},
        {"AttributeName": "gk", "AttributeType": "N"},
    ]
    request["GlobalSecondaryIndexes"] = [
        {
            "IndexName": "byGk",
            "KeySchema": [{"AttributeName": "gk", "KeyType": "HASH"}],
            "Projection": {"ProjectionType": "ALL"},
        }
    ]


DUPLICATED_GK = "Attribute Name is duplicated: gk"
CREATE_TABLE_ERRORS = [
    (
        _without("TableName"),
        "ValidationException",
        "The parameter 'TableName' is required but was not present in the request",
    ),
    (
        _set("TableName", "ab"),
        "ValidationException",
        "TableName must be at least 3 characters long and at most 255 characters long",
    ),
    (
        _set("TableName", "a" * 256),
        "ValidationException",
        "TableName must be at least 3 characters long and at most 255 characters long",
    ),
    (
        _set("TableName", "bad name!"),
        "ValidationException",
        "1 validation error detected: Value 'bad name!' at 'tableName' failed to satisfy "
        "constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+",
    ),
    (
        _without("KeySchema"),
        "ValidationException",
        "1 validation error detected: Value null at 'keySchema' failed to satisfy constraint: "
        "Member must not be null",
    ),
    (
        _without("AttributeDefinitions"),
        "ValidationException",
        "1 validation error detected: Value null at 'attributeDefinitions' failed to satisfy "
        "constraint: Member must not be null",
    ),
    (
        _set("KeySchema", []),
        "ValidationException",
        "1 validation error detected: Value '[]' at 'keySchema' failed to satisfy constraint: "
        "Member must have length greater than or equal to 1",
    ),
    (
        _set(
            "AttributeDefinitions",
            [{"AttributeName": "pk", "AttributeType": "SS"}],
        ),
        "ValidationException",
        "1 validation error detected: Value 'SS' at 'attributeDefinitions.1.member.attributeType' "
        "failed to satisfy constraint: Member must satisfy enum value set: [B, N, S]",
    ),
    (
        _set("KeySchema", [{"AttributeName": "pk", "KeyType": "PRIMARY"}]),
        "ValidationException",
        "1 validation error detected: Value 'PRIMARY' at 'keySchema.1.member.keyType' failed to "
        "satisfy constraint: Member must satisfy enum value set: [HASH, RANGE]",
    ),
    (
        _set("KeySchema", [{"KeyType": "HASH"}]),
        "ValidationException",
        "1 validation error detected: Value null at 'keySchema.1.member.attributeName' failed "
        "to satisfy constraint: Member must not be null",
    ),
    (
        _set("KeySchema", [{"AttributeName": "pk", "KeyType": "RANGE"}]),
        "ValidationException",
        "Invalid KeySchema: The first KeySchemaElement is not a HASH key type",
    ),
    (
        _set("KeySchema", [{"AttributeName": "other", "KeyType": "HASH"}]),
        "ValidationException",
        INVALID + "Some index key attributes are not defined in AttributeDefinitions. "
        "Keys: [other], AttributeDefinitions: [pk]",
    ),
    (
        _set(
            "AttributeDefinitions",
            [
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "unused", "AttributeType": "S"},
            ],
        ),
        "ValidationException",
        NOT_MATCHING,
    ),
    (
        # One name declared twice is named, before the count of definitions is held against the
        # key (with a global index beside it, the second type used to be kept silently).
        _set(
            "AttributeDefinitions",
            [
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "pk", "AttributeType": "N"},
            ],
        ),
        "ValidationException",
        "Attribute Name is duplicated: pk",
    ),
    (_global_index_keyed_on_a_name_declared_twice, "ValidationException", DUPLICATED_GK),
    (
        _set("BillingMode", "FREE"),
        "ValidationException",
        "1 validation error detected: Value 'FREE' at 'billingMode' failed to satisfy "
        "constraint: Member must satisfy enum value set: [PROVISIONED, PAY_PER_REQUEST]",
    ),
    (
        _set("ProvisionedThroughput", {"ReadCapacityUnits": 1, "WriteCapacityUnits": 1}),
        "ValidationException",
        INVALID + "Neither ReadCapacityUnits nor WriteCapacityUnits can be specified when "
        "BillingMode is PAY_PER_REQUEST",
    ),
    (
        _set("BillingMode", "PROVISIONED"),
        "ValidationException",
        INVALID + "ReadCapacityUnits and WriteCapacityUnits must both be specified when "
        "BillingMode is PROVISIONED",
    ),
    (
        _without("BillingMode"),
        "ValidationException",
        INVALID + "ReadCapacityUnits and WriteCapacityUnits must both be specified when "
        "BillingMode is PROVISIONED",
    ),
    (
        lambda request: request.update(
            BillingMode="PROVISIONED",
            ProvisionedThroughput={"ReadCapacityUnits": 0, "WriteCapacityUnits": 5},
        ),
        "ValidationException",
        "1 validation error detected: Value '0' at 'provisionedThroughput.readCapacityUnits' "
        "failed to satisfy constraint: Member must have value greater than or equal to 1",
    ),
    (
        lambda request: request.update(
            BillingMode="PROVISIONED",
            ProvisionedThroughput={"ReadCapacityUnits": 0, "WriteCapacityUnits": 0},
        ),
        "ValidationException",
        "2 validation errors detected: Value '0' at 'provisionedThroughput.readCapacityUnits' "
        "failed to satisfy constraint: Member must have value greater than or equal to 1; "
        "Value '0' at 'provisionedThroughput.writeCapacityUnits' failed to satisfy constraint: "
        "Member must have value greater than or equal to 1",
    ),
    (
        _set(
            "LocalSecondaryIndexes",
            [
                {
                    "IndexName": "lsi",
                    "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                    "Projection": {"ProjectionType": "ALL"},
                }
            ],
        ),
        "ValidationException",
        INVALID + "Table KeySchema does not have a range key, which is required when specifying "
        "a LocalSecondaryIndex",
    ),
    (
        _set("StreamSpecification", {"StreamEnabled": True}),
        "ValidationException",
        INVALID + "StreamViewType is required when StreamEnabled is true",
    ),
    # DynamoDB's words for a class it does not have, not an enum's constraint violation (as
    # captured against the service: ack-api-quirks DDB-TABLE-442).
    (
        _set("TableClass", "GLACIER"),
        "ValidationException",
        "Invalid table-class parameter provided. Please try again with a valid table-class "
        "value: [STANDARD, STANDARD_INFREQUENT_ACCESS].",
    ),
]


@pytest.mark.parametrize(("change", "code", "message"), CREATE_TABLE_ERRORS)
def test_create_table_errors(
    dynamodb: Any,
    table_name: Callable[[], str],
    change: Callable[[dict[str, Any]], None],
    code: str,
    message: str,
) -> None:
    request = simple_table(table_name())
    change(request)
    assert error_of(lambda: dynamodb.create_table(**request)) == (400, code, message)
    if "TableName" in request and isinstance(request["TableName"], str):
        # Nothing was created by the refused request.
        assert request["TableName"] not in all_table_names(dynamodb)


def test_composite_key_errors(dynamodb: Any, table_name: Callable[[], str]) -> None:
    request = simple_table(table_name())
    request["AttributeDefinitions"].append({"AttributeName": "sk", "AttributeType": "S"})
    request["KeySchema"].append({"AttributeName": "sk", "KeyType": "HASH"})
    assert error_of(lambda: dynamodb.create_table(**request)) == (
        400,
        "ValidationException",
        "Invalid KeySchema: The second KeySchemaElement is not a RANGE key type",
    )
    request["KeySchema"][1] = {"AttributeName": "pk", "KeyType": "RANGE"}
    assert error_of(lambda: dynamodb.create_table(**request)) == (
        400,
        "ValidationException",
        "Both the Hash Key and the Range Key element in the KeySchema have the same name",
    )


@pytest.mark.parametrize("operation", ["describe_table", "delete_table"])
def test_table_name_validation_of_other_operations(dynamodb: Any, operation: str) -> None:
    assert error_of(lambda: getattr(dynamodb, operation)(TableName="no;pe")) == (
        400,
        "ValidationException",
        "1 validation error detected: Value 'no;pe' at 'tableName' failed to satisfy "
        "constraint: Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+",
    )
    assert error_of(lambda: getattr(dynamodb, operation)(TableName="ab")) == (
        400,
        "ValidationException",
        "TableName must be at least 3 characters long and at most 255 characters long",
    )


def test_a_table_arn_names_the_table_in_every_operation(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    """Every operation that names a table takes its ARN instead (API Reference, TableName: "You
    can also provide the Amazon Resource Name (ARN) of the table"); replies name the table as the
    request did, but a table description, whose TableName is the bare name."""
    name = table_name()
    arn = f"arn:aws:dynamodb:us-east-1:000000000000:table/{name}"
    # CreateTable by the ARN, and the wait for ACTIVE by DescribeTable of it.
    create_active_table(dynamodb, arn, range_key=("sk", "N"))
    assert name in dynamodb.list_tables()["TableNames"]
    described = dynamodb.describe_table(TableName=arn)["Table"]
    assert (described["TableName"], described["TableArn"]) == (name, arn)
    total = {"ReturnConsumedCapacity": "TOTAL"}

    put = dynamodb.put_item(TableName=arn, Item={"pk": {"S": "a"}, "sk": {"N": "1"}}, **total)
    assert put["ConsumedCapacity"]["TableName"] == arn
    dynamodb.update_item(
        TableName=arn,
        Key={"pk": {"S": "a"}, "sk": {"N": "1"}},
        UpdateExpression="SET v = :v",
        ExpressionAttributeValues={":v": {"S": "one"}},
    )
    got = dynamodb.get_item(TableName=arn, Key={"pk": {"S": "a"}, "sk": {"N": "1"}}, **total)
    assert got["Item"]["v"] == {"S": "one"}
    assert got["ConsumedCapacity"]["TableName"] == arn
    # The same item by its name: one table.
    by_name = dynamodb.get_item(TableName=name, Key={"pk": {"S": "a"}, "sk": {"N": "1"}})
    assert by_name["Item"] == got["Item"]
    queried = dynamodb.query(
        TableName=arn,
        KeyConditionExpression="pk = :a",
        ExpressionAttributeValues={":a": {"S": "a"}},
        **total,
    )
    assert (queried["Count"], queried["ConsumedCapacity"]["TableName"]) == (1, arn)
    scanned = dynamodb.scan(TableName=arn, **total)
    assert (scanned["Count"], scanned["ConsumedCapacity"]["TableName"]) == (1, arn)

    written = dynamodb.batch_write_item(
        RequestItems={
            arn: [
                {"PutRequest": {"Item": {"pk": {"S": "b"}, "sk": {"N": "2"}}}},
                {"DeleteRequest": {"Key": {"pk": {"S": "a"}, "sk": {"N": "1"}}}},
            ]
        },
        **total,
    )
    assert written["UnprocessedItems"] == {}
    assert [entry["TableName"] for entry in written["ConsumedCapacity"]] == [arn]
    read = dynamodb.batch_get_item(
        RequestItems={
            arn: {
                "Keys": [{"pk": {"S": "a"}, "sk": {"N": "1"}}, {"pk": {"S": "b"}, "sk": {"N": "2"}}]
            }
        },
        **total,
    )
    assert list(read["Responses"]) == [arn]
    assert read["Responses"][arn] == [{"pk": {"S": "b"}, "sk": {"N": "2"}}]
    assert [entry["TableName"] for entry in read["ConsumedCapacity"]] == [arn]
    # A table named twice in a batch, once by its name and once by its ARN, is one table: the
    # same key under both is a duplicate, as in one entry.
    twice = {"PutRequest": {"Item": {"pk": {"S": "c"}, "sk": {"N": "3"}}}}
    assert error_of(
        lambda: dynamodb.batch_write_item(RequestItems={arn: [twice], name: [twice]})
    ) == (400, "ValidationException", "Provided list of item keys contains duplicates")
    # So in BatchGetItem: one key under both is a duplicate, two keys are each read under the
    # request's own key.
    one = {"pk": {"S": "b"}, "sk": {"N": "2"}}
    assert error_of(
        lambda: dynamodb.batch_get_item(RequestItems={arn: {"Keys": [one]}, name: {"Keys": [one]}})
    ) == (400, "ValidationException", "Provided list of item keys contains duplicates")
    other = {"pk": {"S": "a"}, "sk": {"N": "1"}}
    both = dynamodb.batch_get_item(
        RequestItems={arn: {"Keys": [one], "ConsistentRead": True}, name: {"Keys": [other]}}
    )["Responses"]
    assert sorted(both) == sorted([arn, name])
    assert both[arn] == [{"pk": {"S": "b"}, "sk": {"N": "2"}}]
    assert [item["pk"] for item in both[name]] in ([], [{"S": "a"}])

    dynamodb.transact_write_items(
        TransactItems=[
            {"Put": {"TableName": arn, "Item": {"pk": {"S": "t"}, "sk": {"N": "1"}}}},
            {
                "Update": {
                    "TableName": arn,
                    "Key": {"pk": {"S": "b"}, "sk": {"N": "2"}},
                    "UpdateExpression": "SET v = :v",
                    "ExpressionAttributeValues": {":v": {"S": "two"}},
                }
            },
            {
                "ConditionCheck": {
                    "TableName": arn,
                    "Key": {"pk": {"S": "x"}, "sk": {"N": "9"}},
                    "ConditionExpression": "attribute_not_exists(pk)",
                }
            },
        ],
        **total,
    )
    # The same item by its name and by its ARN in one transaction is refused as the same item.
    same = {"pk": {"S": "t"}, "sk": {"N": "1"}}
    assert error_of(
        lambda: dynamodb.transact_write_items(
            TransactItems=[
                {"Delete": {"TableName": arn, "Key": same}},
                {"Delete": {"TableName": name, "Key": same}},
            ]
        )
    ) == (
        400,
        "ValidationException",
        "Transaction request cannot include multiple operations on one item",
    )
    gets = dynamodb.transact_get_items(
        TransactItems=[
            {"Get": {"TableName": arn, "Key": {"pk": {"S": "t"}, "sk": {"N": "1"}}}},
            {"Get": {"TableName": arn, "Key": {"pk": {"S": "b"}, "sk": {"N": "2"}}}},
        ]
    )
    assert [response["Item"] for response in gets["Responses"]] == [
        {"pk": {"S": "t"}, "sk": {"N": "1"}},
        {"pk": {"S": "b"}, "sk": {"N": "2"}, "v": {"S": "two"}},
    ]
    dynamodb.delete_item(TableName=arn, Key={"pk": {"S": "t"}, "sk": {"N": "1"}})
    assert "Item" not in dynamodb.get_item(TableName=name, Key={"pk": {"S": "t"}, "sk": {"N": "1"}})

    dynamodb.update_time_to_live(
        TableName=arn, TimeToLiveSpecification={"Enabled": True, "AttributeName": "expires"}
    )
    ttl = dynamodb.describe_time_to_live(TableName=arn)["TimeToLiveDescription"]
    assert ttl["AttributeName"] == "expires"
    updated = dynamodb.update_table(TableName=arn, DeletionProtectionEnabled=True)
    assert updated["TableDescription"]["TableName"] == name
    assert dynamodb.describe_table(TableName=name)["Table"]["DeletionProtectionEnabled"] is True
    dynamodb.update_table(TableName=arn, DeletionProtectionEnabled=False)
    deleted = dynamodb.delete_table(TableName=arn)["TableDescription"]
    assert (deleted["TableName"], deleted["TableArn"]) == (name, arn)
    assert error_of(lambda: dynamodb.describe_table(TableName=arn)) == (
        400,
        "ResourceNotFoundException",
        f"Requested resource not found: Table: {name} not found",
    )


# Several routers -------------------------------------------------------------------------------


def test_second_router_sees_the_first_routers_tables(
    cluster: LocalCluster, dynamodb_for: Callable[[str], Any], table_name: Callable[[], str]
) -> None:
    first, second = (dynamodb_for(url) for url in cluster.router_urls[:2])
    name = table_name()
    created = first.create_table(**simple_table(name))["TableDescription"]
    described = second.describe_table(TableName=name)["Table"]
    assert described["TableStatus"] == "ACTIVE"
    assert described["TableId"] == created["TableId"]
    assert name in all_table_names(second)

    first.delete_table(TableName=name)
    assert error_of(lambda: second.describe_table(TableName=name))[1] == (
        "ResourceNotFoundException"
    )

    def gone_from_second() -> bool:
        """The deleted table is no longer listed by the second router."""
        return name not in all_table_names(second)

    eventually(gone_from_second)


def test_items_through_a_router_that_missed_the_table_changes(
    cluster: LocalCluster, dynamodb_for: Callable[[str], Any], table_name: Callable[[], str]
) -> None:
    """Item operations through router B right after router A drops and creates a table."""
    first, second = (dynamodb_for(url) for url in cluster.router_urls[:2])
    name = table_name()
    first.create_table(**simple_table(name))
    second.put_item(TableName=name, Item={"pk": {"S": "old"}})

    first.delete_table(TableName=name)
    first.create_table(**simple_table(name))
    second.put_item(TableName=name, Item={"pk": {"S": "new"}})
    assert second.get_item(TableName=name, Key={"pk": {"S": "new"}})["Item"] == {"pk": {"S": "new"}}
    assert "Item" not in second.get_item(TableName=name, Key={"pk": {"S": "old"}})

    first.delete_table(TableName=name)
    assert error_of(lambda: second.put_item(TableName=name, Item={"pk": {"S": "gone"}})) == (
        400,
        "ResourceNotFoundException",
        "Requested resource not found",
    )


def test_table_arn_names_the_request_region(
    cluster: LocalCluster, table_name: Callable[[], str]
) -> None:
    name = table_name()
    session = boto3.session.Session(
        region_name="eu-central-1", aws_access_key_id="x", aws_secret_access_key="y"
    )
    client = session.client("dynamodb", endpoint_url=cluster.router_url)
    client.create_table(**simple_table(name))
    arn = client.describe_table(TableName=name)["Table"]["TableArn"]
    assert arn == f"arn:aws:dynamodb:eu-central-1:000000000000:table/{name}"


def test_describe_endpoints(cluster: LocalCluster, dynamodb_for: Callable[[str], Any]) -> None:
    for url in cluster.router_urls:
        endpoints = dynamodb_for(url).describe_endpoints()["Endpoints"]
        assert endpoints == [{"Address": url.removeprefix("http://"), "CachePeriodInMinutes": 1440}]


# The router's context, driven directly ---------------------------------------------------------
#
# A RouterContext of the test's own, never started, so its catalog cache changes only when it reads
# the catalog itself: the tests below change tables through a router behind its back and check
# that it routes keys right, recovers from the stale map, and fails as DynamoDB would.


def context_for(cluster: LocalCluster) -> RouterContext:
    return RouterContext({node.node_id: node.address for node in cluster.nodes}, "test")


def put_body(key: str, number: int) -> dict[str, Any]:
    return {"item": {"pk": {"S": key}, "n": {"N": str(number)}}, "return_values": "NONE"}


def get_body(key: str) -> dict[str, Any]:
    return {"key": {"pk": {"S": key}}, "consistent": True}


async def scan_all(ctx: RouterContext, table: Route) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for partition in table.partitions.partitions:
        body = {"select": "ALL_ATTRIBUTES", "page_bytes": limits.QUERY_PAGE_BYTES_MAX}
        reply = await ctx.call_partition(table, partition, ops.SCAN, body)
        assert reply["partition"] is partition
        assert reply["last_key"] is None
        items.extend(reply["items"])
    return items


async def test_context_routes_every_key_to_its_partition(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    dynamodb.create_table(**simple_table(name))
    ctx = context_for(cluster)
    try:
        table = await ctx.table(name)
        # An on-demand table starts with several partitions, spread over the nodes; a key sent to
        # any but its own partition would be refused (a key outside a partition is a stale map).
        assert len(table.partitions) > 1
        for i in range(40):
            await ctx.call_key(table, {"S": f"key-{i}"}, None, ops.PUT, put_body(f"key-{i}", i))
        for i in range(40):
            reply = await ctx.call_key(
                table, {"S": f"key-{i}"}, None, ops.GET, get_body(f"key-{i}")
            )
            assert reply["item"] == {"pk": {"S": f"key-{i}"}, "n": {"N": str(i)}}
        assert len(await scan_all(ctx, table)) == 40
        described = dynamodb.describe_table(TableName=name)["Table"]
        assert described["ItemCount"] == 40
        assert described["TableSizeBytes"] > 0
    finally:
        await ctx.close()


async def test_context_follows_a_table_created_again(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    dynamodb.create_table(**simple_table(name))
    ctx = context_for(cluster)
    try:
        old = await ctx.table(name)
        await ctx.call_key(old, {"S": "a"}, None, ops.PUT, put_body("a", 1))
        dynamodb.delete_table(TableName=name)
        dynamodb.create_table(**simple_table(name))
        assert await ctx.table(name) is old, "the context has not seen the change yet"

        # The old table's partitions are gone: the node refuses, the context re-reads the catalog
        # and, the key schema being the same, writes to the new table.
        await ctx.call_key(old, {"S": "b"}, None, ops.PUT, put_body("b", 2))
        new = await ctx.table(name)
        assert new.id != old.id
        reply = await ctx.call_key(new, {"S": "b"}, None, ops.GET, get_body("b"))
        assert reply["item"] == {"pk": {"S": "b"}, "n": {"N": "2"}}
        assert (await ctx.call_key(new, {"S": "a"}, None, ops.GET, get_body("a")))["item"] is None

        # A scan of a partition of the old table is answered by the new table's partition that
        # holds the same start bound.
        stale_partition = old.partitions.partitions[0]
        body = {"select": "ALL_ATTRIBUTES", "page_bytes": limits.QUERY_PAGE_BYTES_MAX}
        reply = await ctx.call_partition(old, stale_partition, ops.SCAN, body)
        assert reply["partition"] in new.partition_defs
        assert reply["partition"].start == stale_partition.start
    finally:
        await ctx.close()


async def test_context_refuses_a_table_gone_or_changed(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    dynamodb.create_table(**simple_table(name))
    ctx = context_for(cluster)
    try:
        old = await ctx.table(name)
        dynamodb.delete_table(TableName=name)
        # Created again with a sort key: a request checked against the old schema must not run.
        request = simple_table(name)
        request["AttributeDefinitions"].append({"AttributeName": "sk", "AttributeType": "S"})
        request["KeySchema"].append({"AttributeName": "sk", "KeyType": "RANGE"})
        dynamodb.create_table(**request)
        with pytest.raises(ResourceNotFound) as raised:
            await ctx.call_key(old, {"S": "a"}, None, ops.PUT, put_body("a", 1))
        assert raised.value.message == "Requested resource not found"

        # Dropped for good: the cached descriptor still names it, the node does not.
        composite = await ctx.table(name)
        dynamodb.delete_table(TableName=name)
        body = {"item": {"pk": {"S": "a"}, "sk": {"S": "b"}}, "return_values": "NONE"}
        with pytest.raises(ResourceNotFound):
            await ctx.call_key(composite, {"S": "a"}, {"S": "b"}, ops.PUT, body)
        with pytest.raises(ResourceNotFound):
            await ctx.table(name)
    finally:
        await ctx.close()


async def test_context_refreshes_in_the_background(
    cluster: LocalCluster, dynamodb: Any, table_name: Callable[[], str]
) -> None:
    ctx = context_for(cluster)
    await ctx.start()
    try:
        name = table_name()
        dynamodb.create_table(**simple_table(name))
        deadline = time.monotonic() + CATALOG_PROPAGATION_S
        while name not in ctx.tables:
            assert time.monotonic() < deadline, "the new table never reached the cache"
            await asyncio.sleep(0.05)
        dynamodb.delete_table(TableName=name)
        while name in ctx.tables:
            assert time.monotonic() < deadline, "the deleted table never left the cache"
            await asyncio.sleep(0.05)
    finally:
        await ctx.close()


# The wire protocol -----------------------------------------------------------------------------


def test_health_check(cluster: LocalCluster) -> None:
    parsed = urllib.parse.urlsplit(cluster.router_url)
    connection = http.client.HTTPConnection(parsed.hostname, parsed.port, timeout=10)
    try:
        connection.request("GET", "/")
        response = connection.getresponse()
        body = response.read()
    finally:
        connection.close()
    assert response.status == 200
    assert body.decode() == f"healthy: {parsed.netloc}"


def test_unknown_operation(cluster: LocalCluster) -> None:
    status, body, _ = raw_post(
        cluster.router_url,
        b"{}",
        {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.MakeCoffee",
        },
    )
    assert status == 400
    assert body["__type"] == "com.amazon.coral.service#UnknownOperationException"


def test_malformed_json(cluster: LocalCluster) -> None:
    status, body, _ = raw_post(
        cluster.router_url,
        b'{"TableName": ',
        {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
        },
    )
    assert status == 400
    assert body["__type"] == "com.amazon.coral.service#SerializationException"


def test_wrong_json_type(cluster: LocalCluster) -> None:
    # boto3 refuses to send this even without parameter validation, so it goes out by hand.
    status, body, _ = raw_post(
        cluster.router_url,
        json.dumps(simple_table(123)).encode(),
        {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.CreateTable",
            "Authorization": SIGNATURE,
            "X-Amz-Date": "20240101T000000Z",
        },
    )
    assert (status, body["__type"], body["Message"]) == (
        400,
        "com.amazon.coral.service#SerializationException",
        "NUMBER_VALUE cannot be converted to String",
    )


def test_unsigned_request(cluster: LocalCluster) -> None:
    status, body, _ = raw_post(
        cluster.router_url,
        b"{}",
        {
            "Content-Type": "application/x-amz-json-1.0",
            "X-Amz-Target": "DynamoDB_20120810.ListTables",
        },
    )
    assert (status, body) == (
        400,
        {
            "__type": "com.amazon.coral.service#MissingAuthenticationTokenException",
            "message": "Request is missing Authentication Token",
        },
    )
