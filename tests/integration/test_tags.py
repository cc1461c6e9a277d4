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


def test_create_table_checks_its_tags_in_dynamodbs_words(dynamodb: Any, table_name: Any) -> None:
    """As captured against the service (ack-api-quirks DDB-TABLE-110, 043): the tag texts of
    TagResource, no table made, and an empty list accepted."""
    definition = {
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
        "BillingMode": "PAY_PER_REQUEST",
    }
    long_key = "k" * (limits.TAG_KEY_CHARS_MAX + 1)
    for tags, message in (
        ([{"Key": "aws:foo", "Value": "v"}], "Tag Key cannot be prefixed with aws:, Key: aws:foo"),
        ([{"Key": long_key, "Value": "v"}], f"The Tag Key provided is invalid, Key: {long_key}"),
        (
            [{"Key": f"k{n}", "Value": "v"} for n in range(limits.TAGS_PER_TABLE_MAX + 1)],
            "Number of Tags exceed the current limit for the provided ResourceArn",
        ),
    ):
        name = table_name()
        assert error_of(
            lambda name=name, tags=tags: dynamodb.create_table(
                TableName=name, Tags=tags, **definition
            )
        ) == (400, "ValidationException", message)
        status, code, _ = error_of(lambda name=name: dynamodb.describe_table(TableName=name))
        assert (status, code) == (400, "ResourceNotFoundException")
    name = table_name()
    dynamodb.create_table(TableName=name, Tags=[], **definition)
    wait_active(dynamodb, name)
    assert tags_of(dynamodb, arn_of(dynamodb, name)) == []


def test_a_table_holds_at_most_50_tags(dynamodb: Any, create_table: Any, table_name: Any) -> None:
    name = create_table(dynamodb, table_name())
    arn = arn_of(dynamodb, name)
    full = [{"Key": f"k{n}", "Value": "v"} for n in range(limits.TAGS_PER_TABLE_MAX)]
    dynamodb.tag_resource(ResourceArn=arn, Tags=full)
    # DynamoDB's ValidationException, not a LimitExceededException (as captured against the
    # service: ack-api-quirks DDB-TABLE-107).
    assert error_of(
        lambda: dynamodb.tag_resource(ResourceArn=arn, Tags=[{"Key": "more", "Value": "v"}])
    ) == (
        400,
        "ValidationException",
        "Number of Tags exceed the current limit for the provided ResourceArn",
    )
    assert tags_of(dynamodb, arn) == full


def test_tag_requests_are_validated(dynamodb: Any, create_table: Any, table_name: Any) -> None:
    name = create_table(dynamodb, table_name())
    arn = arn_of(dynamodb, name)
    # Tags are checked in DynamoDB's words, not its constraints' (as captured against the service:
    # ack-api-quirks DDB-TABLE-107, 372, 457), and nothing of a refused request is applied.
    long_key = "k" * (limits.TAG_KEY_CHARS_MAX + 1)
    long_value = "v" * (limits.TAG_VALUE_CHARS_MAX + 1)
    good = {"Key": "good", "Value": "v"}
    refused_tags: list[tuple[list[dict[str, str]], str]] = [
        ([], "Atleast one Tag needs to be provided as Input."),
        (
            [good, {"Key": long_key, "Value": "v"}],
            f"The Tag Key provided is invalid, Key: {long_key}",
        ),
        ([{"Key": "", "Value": "v"}], "The Tag Key provided is invalid, Key: "),
        ([{"Value": "v"}], "The Tag Key provided is invalid, Key: null"),
        ([{"Key": "k"}], "The Tag Value provided is invalid, Value: null"),
        (
            [{"Key": "k", "Value": long_value}],
            f"The Tag Value provided is invalid, Value: {long_value}",
        ),
        ([{"Key": "k", "Value": "100%"}], "The Tag Value provided is invalid, Value: 100%"),
        ([{"Key": "a,b", "Value": "v"}], "The Tag Key provided is invalid, Key: a,b"),
        (
            [good, {"Key": "aws:cost", "Value": "v"}],
            "Tag Key cannot be prefixed with aws:, Key: aws:cost",
        ),
        (
            [{"Key": "dup", "Value": "1"}, {"Key": "dup", "Value": "2"}],
            "Duplicate Tag Keys provided as input: Duplicate Tag Key found dup",
        ),
        (
            [{"Key": f"k{n}", "Value": "v"} for n in range(limits.TAGS_PER_TABLE_MAX + 1)],
            "Number of Tags exceed the current limit for the provided ResourceArn",
        ),
    ]
    for tags, message in refused_tags:
        assert error_of(lambda tags=tags: dynamodb.tag_resource(ResourceArn=arn, Tags=tags)) == (
            400,
            "ValidationException",
            message,
        ), tags
    assert tags_of(dynamodb, arn) == []
    # Letters of any script, spaces (a no-break space too) and AWS's punctuation are a tag's.
    accepted = [{"Key": "ключ café 表", "Value": "a+b-c=d.e_f:g/h@i\u00a0"}]
    dynamodb.tag_resource(ResourceArn=arn, Tags=accepted)
    assert tags_of(dynamodb, arn) == accepted
    refused_keys: list[tuple[list[str], str]] = [
        ([], "Atleast one Tag Key needs to be provided as Input."),
        ([""], "The Tag Key provided is invalid, Key: "),
        ([long_key], f"The Tag Key provided is invalid, Key: {long_key}"),
        (
            [f"k{n}" for n in range(limits.TAGS_PER_TABLE_MAX + 1)],
            "Number of Tags exceed the current limit for the provided ResourceArn",
        ),
    ]
    for keys, message in refused_keys:
        assert error_of(
            lambda keys=keys: dynamodb.untag_resource(ResourceArn=arn, TagKeys=keys)
        ) == (400, "ValidationException", message), keys
    dynamodb.untag_resource(ResourceArn=arn, TagKeys=[accepted[0]["Key"]])
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
