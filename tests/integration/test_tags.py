"""Tagging through boto3 on a real cluster: TagResource, UntagResource, ListTagsOfResource and the
Tags of CreateTable, addressed by the ARN DescribeTable gives, with DynamoDB's limits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core import limits
from tests.integration.conftest import error_of, wait_active


def arn_of(dynamodb: Any, name: str) -> str:
    return str(dynamodb.describe_table(TableName=name)["Table"]["TableArn"])


def tags_of(dynamodb: Any, arn: str) -> list[dict[str, str]]:
    return list(dynamodb.list_tags_of_resource(ResourceArn=arn)["Tags"])


def test_tags_are_added_replaced_listed_and_removed(
    dynamodb: Any,
    dynamodb_for: Callable[[str], Any],
    cluster: Any,
    create_table: Any,
    table_name: Any,
) -> None:
    name = create_table(dynamodb, table_name())
    arn = arn_of(dynamodb, name)
    assert arn == f"arn:aws:dynamodb:us-east-1:000000000000:table/{name}"
    assert tags_of(dynamodb, arn) == []
    dynamodb.tag_resource(
        ResourceArn=arn, Tags=[{"Key": "team", "Value": "a"}, {"Key": "cost", "Value": ""}]
    )
    dynamodb.tag_resource(
        ResourceArn=arn, Tags=[{"Key": "team", "Value": "b"}, {"Key": "Team", "Value": "c"}]
    )
    expected = [
        {"Key": "team", "Value": "b"},
        {"Key": "cost", "Value": ""},
        {"Key": "Team", "Value": "c"},  # Keys are case-sensitive.
    ]
    assert tags_of(dynamodb, arn) == expected
    # The tags are in the catalog: another router lists them too.
    assert tags_of(dynamodb_for(cluster.router_urls[1]), arn) == expected
    dynamodb.untag_resource(ResourceArn=arn, TagKeys=["cost", "absent"])
    assert tags_of(dynamodb, arn) == [expected[0], expected[2]]
    # Item operations do not notice.
    dynamodb.put_item(TableName=name, Item={"pk": {"S": "x"}})
    assert tags_of(dynamodb, arn) == [expected[0], expected[2]]


def test_create_table_keeps_its_tags(dynamodb: Any, table_name: Any) -> None:
    name = table_name()
    dynamodb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
        Tags=[{"Key": "owner", "Value": "lab"}, {"Key": "stage", "Value": "test"}],
    )
    wait_active(dynamodb, name)
    assert tags_of(dynamodb, arn_of(dynamodb, name)) == [
        {"Key": "owner", "Value": "lab"},
        {"Key": "stage", "Value": "test"},
    ]


def test_a_table_holds_at_most_50_tags(dynamodb: Any, create_table: Any, table_name: Any) -> None:
    name = create_table(dynamodb, table_name())
    arn = arn_of(dynamodb, name)
    full = [{"Key": f"k{n}", "Value": "v"} for n in range(limits.TAGS_PER_TABLE_MAX)]
    dynamodb.tag_resource(ResourceArn=arn, Tags=full)
    status, code, _ = error_of(
        lambda: dynamodb.tag_resource(ResourceArn=arn, Tags=[{"Key": "more", "Value": "v"}])
    )
    assert (status, code) == (400, "LimitExceededException")
    assert tags_of(dynamodb, arn) == full


def test_tag_requests_are_validated(dynamodb: Any, create_table: Any, table_name: Any) -> None:
    name = create_table(dynamodb, table_name())
    arn = arn_of(dynamodb, name)
    long_key = "k" * (limits.TAG_KEY_CHARS_MAX + 1)
    assert error_of(
        lambda: dynamodb.tag_resource(ResourceArn=arn, Tags=[{"Key": long_key, "Value": "v"}])
    ) == (
        400,
        "ValidationException",
        f"1 validation error detected: Value '{long_key}' at 'tags.1.member.key' failed to "
        "satisfy constraint: Member must have length less than or equal to 128",
    )
    long_value = "v" * (limits.TAG_VALUE_CHARS_MAX + 1)
    status, code, message = error_of(
        lambda: dynamodb.tag_resource(ResourceArn=arn, Tags=[{"Key": "k", "Value": long_value}])
    )
    assert (status, code) == (400, "ValidationException")
    assert "at 'tags.1.member.value'" in message
    status, code, message = error_of(
        lambda: dynamodb.tag_resource(ResourceArn=arn, Tags=[{"Key": "aws:cost", "Value": "v"}])
    )
    assert (status, code) == (400, "ValidationException")
    assert "aws:" in message
    # A ResourceArn that names no table of this Region and account, refused in DynamoDB's words
    # (core.table_arns.tagged_table_name says where each comes from) by all three operations.
    invalid = "One or more parameter values were invalid: "
    elsewhere = arn.replace(":us-east-1:", ":eu-west-1:")
    refusals = [
        ("not-an-arn", "ValidationException", f"{invalid}ARNs must start with 'arn:': not-an-arn"),
        ("arn:aws:s3:::bucket", "AccessDeniedException", "Access is denied"),
        (
            arn.replace(":000000000000:", ":111122223333:"),
            "AccessDeniedException",
            "Access is denied",
        ),
        (
            elsewhere,
            "ValidationException",
            f"Invalid TableArn: Invalid ResourceArn provided as input {elsewhere}",
        ),
        (
            f"{arn}/index/ByOwner",
            "ValidationException",
            f"{invalid}Invalid resource arn provided, only table or stream is accepted. "
            f"Provided resource arn: {arn}/index/ByOwner",
        ),
        (
            f"{arn}/backup/01234567890123-abcdef12",
            "ValidationException",
            f"{invalid}Provided Arn is not a DynamoDB resource arn: "
            f"{arn}/backup/01234567890123-abcdef12",
        ),
    ]
    # A table this cluster does not have: DynamoDB's words, its "ResourcArn" included.
    missing = arn.rsplit("/", 1)[0] + "/no-such-table"
    refusals.append(
        (
            missing,
            "ResourceNotFoundException",
            f"Requested resource not found: ResourcArn: {missing} not found",
        )
    )
    for resource, code, message in refusals:
        for call in (
            lambda resource=resource: dynamodb.list_tags_of_resource(ResourceArn=resource),
            lambda resource=resource: dynamodb.tag_resource(
                ResourceArn=resource, Tags=[{"Key": "k", "Value": "v"}]
            ),
            lambda resource=resource: dynamodb.untag_resource(ResourceArn=resource, TagKeys=["k"]),
        ):
            assert error_of(call) == (400, code, message), resource
    assert tags_of(dynamodb, arn) == []


def test_a_deleted_table_has_no_tags_to_list(
    dynamodb: Any, create_table: Any, table_name: Any
) -> None:
    name = create_table(dynamodb, table_name())
    arn = arn_of(dynamodb, name)
    dynamodb.tag_resource(ResourceArn=arn, Tags=[{"Key": "k", "Value": "v"}])
    dynamodb.delete_table(TableName=name)
    status, code, _ = error_of(lambda: dynamodb.list_tags_of_resource(ResourceArn=arn))
    assert (status, code) == (400, "ResourceNotFoundException")
    # A new table of the same name starts without the old one's tags.
    create_table(dynamodb, name)
    assert tags_of(dynamodb, arn) == []
