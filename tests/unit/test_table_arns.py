"""Unit tests of core.table_arns and RequestReader.table_name: table ARNs where TableNames are."""

from __future__ import annotations

from typing import Any

import pytest

from core import table_arns
from core.errors import AccessDenied, ValidationError
from core.table_arns import SHORT_NAME, VALID_ARN_FORMAT, ArnViolation, arn_violation
from router.protocol import request_authorization
from router.requests import RequestReader, read_table_name, table_name_checked

REGION = "us-east-1"
ACCOUNT = "000000000000"
ARN = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Books"


def test_a_table_arn_of_this_region_and_account_names_its_table() -> None:
    assert arn_violation(ARN, REGION, ACCOUNT) is None
    assert table_arns.table_name_of(ARN) == "Books"
    assert table_arns.table_name_of("a.b-c_1") == "a.b-c_1"
    assert table_arns.table_name_of("Books") == "Books"


@pytest.mark.parametrize(
    "arn",
    [
        "arn:",
        "arn:aws:dynamodb",
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:",
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table",
        f"arn:aws:s3:{REGION}:{ACCOUNT}:table/Books",
        f"arn:aws:dynamodb::{ACCOUNT}:table/Books",
        f"arn:aws:dynamodb:{REGION}:12345:table/Books",
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Books/index/byAuthor",
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Books/stream/2024-01-01T00:00:00.000",
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/Bo oks",
        f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/" + "b" * 256,
    ],
)
def test_a_malformed_arn_is_refused_with_the_valid_format(arn: str) -> None:
    assert arn_violation(arn, REGION, ACCOUNT) == ArnViolation(constraint=VALID_ARN_FORMAT)


@pytest.mark.parametrize("name", ["", "ab"])
def test_a_name_too_short_inside_an_arn(name: str) -> None:
    arn = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/{name}"
    assert arn_violation(arn, REGION, ACCOUNT) == ArnViolation(constraint=SHORT_NAME)


def test_another_resource_type_partition_region_and_account() -> None:
    backup = f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:backup/Books"
    assert arn_violation(backup, REGION, ACCOUNT) == ArnViolation(
        text=f"Invalid resource type in '{backup}'"
    )
    china = f"arn:aws-cn:dynamodb:{REGION}:{ACCOUNT}:table/Books"
    assert arn_violation(china, REGION, ACCOUNT) == ArnViolation(
        text=f"Invalid AWS partition in '{china}'"
    )
    assert arn_violation(ARN, "eu-west-1", ACCOUNT) == ArnViolation(
        text=f"Invalid AWS region in '{ARN}'"
    )
    assert arn_violation(ARN, REGION, "111122223333") == ArnViolation(denied=True)


def test_the_checks_come_in_order() -> None:
    # The format before the partition, the partition before the Region, the Region before the
    # account.
    arn = "arn:aws-cn:dynamodb:eu-west-1:111122223333:table/ab"
    assert arn_violation(arn, REGION, ACCOUNT) == ArnViolation(constraint=SHORT_NAME)
    arn = "arn:aws-cn:dynamodb:eu-west-1:111122223333:table/Books"
    assert arn_violation(arn, REGION, ACCOUNT) == ArnViolation(
        text=f"Invalid AWS partition in '{arn}'"
    )
    arn = "arn:aws:dynamodb:eu-west-1:111122223333:table/Books"
    assert arn_violation(arn, REGION, ACCOUNT) == ArnViolation(
        text=f"Invalid AWS region in '{arn}'"
    )


def _check(body: dict[str, Any]) -> str | None:
    reader = RequestReader(body)
    name = reader.table_name(required=True)
    reader.string("ReturnValues", enum=("NONE",))
    reader.check()
    return name


def test_the_reader_gives_the_arn_back_as_written() -> None:
    assert _check({"TableName": ARN}) == ARN
    assert _check({"TableName": "Books"}) == "Books"


def test_the_reader_reports_arn_violations_with_the_others() -> None:
    with pytest.raises(ValidationError) as raised:
        _check({"TableName": f"{ARN}/index/i", "ReturnValues": "ALL"})
    assert raised.value.message == (
        f"2 validation errors detected: Value '{ARN}/index/i' at 'tableName' failed to satisfy "
        f"constraint: {VALID_ARN_FORMAT}; Value 'ALL' at 'returnValues' failed to satisfy "
        "constraint: Member must satisfy enum value set: [NONE]"
    )
    other = ARN.replace(REGION, "eu-west-1")
    with pytest.raises(ValidationError) as raised:
        _check({"TableName": other})
    assert raised.value.message == f"1 validation error detected: Invalid AWS region in '{other}'"


def test_the_arn_region_is_the_request_region() -> None:
    other = ARN.replace(REGION, "eu-west-1")
    token = request_authorization.set(
        "AWS4-HMAC-SHA256 Credential=k/20240101/eu-west-1/dynamodb/aws4_request, "
        "SignedHeaders=host, Signature=0"
    )
    try:
        assert _check({"TableName": other}) == other
        with pytest.raises(ValidationError, match="Invalid AWS region"):
            _check({"TableName": ARN})
    finally:
        request_authorization.reset(token)


def test_another_account_is_denied_after_the_validation_errors() -> None:
    other = ARN.replace(ACCOUNT, "111122223333")
    with pytest.raises(ValidationError):
        _check({"TableName": other, "ReturnValues": "ALL"})
    with pytest.raises(AccessDenied) as raised:
        _check({"TableName": other})
    assert raised.value.message == "Access is denied"


def test_an_arn_past_the_table_arn_length() -> None:
    long = ARN + "x" * (1025 - len(ARN))
    with pytest.raises(ValidationError) as raised:
        _check({"TableName": long})
    assert raised.value.message == (
        f"1 validation error detected: Value '{long}' at 'tableName' failed to satisfy "
        "constraint: Member must have length less than or equal to 1024"
    )


def test_a_name_keeps_its_own_checks() -> None:
    with pytest.raises(ValidationError) as raised:
        _check({"TableName": "a:b"})
    assert "Member must satisfy regular expression pattern: [a-zA-Z0-9_.-]+" in raised.value.message


def test_table_operations_read_an_arn_as_its_name() -> None:
    reader = RequestReader({"TableName": ARN})
    assert table_name_checked(read_table_name(reader)) == "Books"
    reader.check()
    with pytest.raises(ValidationError, match="TableName must be at least 3 characters long"):
        table_name_checked(read_table_name(RequestReader({"TableName": "ab"})))
    with pytest.raises(ValidationError, match="required but was not present"):
        table_name_checked(read_table_name(RequestReader({})))


# A tag operation's ResourceArn -----------------------------------------------------------------

INVALID = "One or more parameter values were invalid: "


@pytest.mark.parametrize(
    ("arn", "error", "message"),
    [
        ("not-an-arn", ValidationError, f"{INVALID}ARNs must start with 'arn:': not-an-arn"),
        ("arn:aws:s3:::bucket", AccessDenied, "Access is denied"),
        ("arn:aws:dynamodb:us-east-1", AccessDenied, "Access is denied"),
        (f"arn:aws-cn:dynamodb:{REGION}:{ACCOUNT}:table/Books", AccessDenied, "Access is denied"),
        (
            f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:global-table/Books",
            ValidationError,
            f"{INVALID}Provided Arn is not a DynamoDB resource arn: "
            f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:global-table/Books",
        ),
        # Another account is denied before its Region is looked at.
        ("arn:aws:dynamodb:eu-west-1:111122223333:table/Books", AccessDenied, "Access is denied"),
        (
            f"arn:aws:dynamodb:eu-west-1:{ACCOUNT}:table/Books",
            ValidationError,
            "Invalid TableArn: Invalid ResourceArn provided as input "
            f"arn:aws:dynamodb:eu-west-1:{ACCOUNT}:table/Books",
        ),
        (
            f"{ARN}/index/ByAuthor",
            ValidationError,
            f"{INVALID}Invalid resource arn provided, only table or stream is accepted. "
            f"Provided resource arn: {ARN}/index/ByAuthor",
        ),
        (
            f"{ARN}/backup/01234567890123-abcdef12",
            ValidationError,
            f"{INVALID}Provided Arn is not a DynamoDB resource arn: "
            f"{ARN}/backup/01234567890123-abcdef12",
        ),
        (
            f"{ARN}/stream/2024-01-01T00:00:00.000",
            ValidationError,
            "Invalid TableArn: Invalid ResourceArn provided as input "
            f"{ARN}/stream/2024-01-01T00:00:00.000",
        ),
        (
            f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/",
            ValidationError,
            "Invalid TableArn: Invalid ResourceArn provided as input "
            f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/",
        ),
        # A name shorter than a table's (dynalite's tests, run against DynamoDB).
        (
            f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/ab",
            ValidationError,
            "Invalid TableArn: Invalid ResourceArn provided as input "
            f"arn:aws:dynamodb:{REGION}:{ACCOUNT}:table/ab",
        ),
    ],
)
def test_a_tag_operations_arn_is_refused_in_dynamodbs_words(
    arn: str, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        table_arns.tagged_table_name(arn, REGION, ACCOUNT)
    assert str(raised.value) == message


def test_a_tag_operations_table_arn_names_its_table() -> None:
    assert table_arns.tagged_table_name(ARN, REGION, ACCOUNT) == "Books"
