"""DynamoDB Streams through boto3 on real processes: StreamSpecification on CreateTable and
UpdateTable, and what DescribeTable says of a table's stream."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.conftest import error_of, wait_active

INVALID = "One or more parameter values were invalid: "


def create_streamed(client: Any, name: str, view_type: str | None) -> dict[str, Any]:
    specification: dict[str, Any] = {"StreamEnabled": view_type is not None}
    if view_type is not None:
        specification["StreamViewType"] = view_type
    client.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        StreamSpecification=specification,
    )
    return wait_active(client, name)


@pytest.mark.parametrize("view_type", ["KEYS_ONLY", "NEW_IMAGE", "OLD_IMAGE", "NEW_AND_OLD_IMAGES"])
def test_create_table_with_a_stream(
    dynamodb: Any, table_name: Callable[[], str], view_type: str
) -> None:
    name = table_name()
    table = create_streamed(dynamodb, name, view_type)
    assert table["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": view_type}
    label = table["LatestStreamLabel"]
    assert table["LatestStreamArn"] == f"{table['TableArn']}/stream/{label}"


def test_table_without_a_stream_says_nothing_of_one(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    table = create_streamed(dynamodb, table_name(), None)
    assert "StreamSpecification" not in table
    assert "LatestStreamArn" not in table and "LatestStreamLabel" not in table


def test_disable_then_enable_gives_a_new_stream(
    dynamodb: Any, table_name: Callable[[], str]
) -> None:
    name = table_name()
    first = create_streamed(dynamodb, name, "NEW_IMAGE")["LatestStreamLabel"]
    disabled = dynamodb.update_table(TableName=name, StreamSpecification={"StreamEnabled": False})[
        "TableDescription"
    ]
    assert "StreamSpecification" not in disabled
    assert disabled["LatestStreamLabel"] == first  # DynamoDB keeps naming the last stream.
    enabled = dynamodb.update_table(
        TableName=name,
        StreamSpecification={"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"},
    )["TableDescription"]
    assert enabled["StreamSpecification"] == {"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}
    assert enabled["LatestStreamLabel"] > first
    described = dynamodb.describe_table(TableName=name)["Table"]
    assert described["LatestStreamArn"] == enabled["LatestStreamArn"]


def test_stream_specification_errors(dynamodb: Any, table_name: Callable[[], str]) -> None:
    name = table_name()
    create_streamed(dynamodb, name, "NEW_IMAGE")
    assert error_of(
        lambda: dynamodb.update_table(
            TableName=name,
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "OLD_IMAGE"},
        )
    ) == (400, "ValidationException", f"Table already has an enabled stream: TableName: {name}")
    assert error_of(
        lambda: dynamodb.update_table(TableName=name, StreamSpecification={"StreamEnabled": True})
    ) == (
        400,
        "ValidationException",
        INVALID + "StreamViewType is required when StreamEnabled is true",
    )
    assert error_of(
        lambda: dynamodb.update_table(
            TableName=name,
            StreamSpecification={"StreamEnabled": True, "StreamViewType": "EVERYTHING"},
        )
    ) == (
        400,
        "ValidationException",
        "1 validation error detected: Value 'EVERYTHING' at 'streamSpecification.streamViewType' "
        "failed to satisfy constraint: Member must satisfy enum value set: "
        "[NEW_IMAGE, OLD_IMAGE, NEW_AND_OLD_IMAGES, KEYS_ONLY]",
    )
    plain = table_name()
    create_streamed(dynamodb, plain, None)
    assert error_of(
        lambda: dynamodb.update_table(TableName=plain, StreamSpecification={"StreamEnabled": False})
    ) == (400, "ValidationException", f"Table does not have an enabled stream: TableName: {plain}")
    assert error_of(
        lambda: dynamodb.update_table(
            TableName="missing-table", StreamSpecification={"StreamEnabled": False}
        )
    ) == (
        400,
        "ResourceNotFoundException",
        "Requested resource not found: Table: missing-table not found",
    )
