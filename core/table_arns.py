"""A table's ARN where a TableName is: checking it and finding the table it names.

Since 2024 DynamoDB takes a table's ARN (`arn:aws:dynamodb:REGION:ACCOUNT:table/NAME`) in the
TableName of every operation that names a table, in BatchGetItem's and BatchWriteItem's
RequestItems keys and in each TransactGetItems and TransactWriteItems action ("You can also
provide the Amazon Resource Name (ARN) of the table in this parameter", API Reference; the service
model's TableArn shape, 1 to 1024 characters with no pattern). The table is the one of that name
in the ARN's account and Region; a reply names the table as the request did (ConsumedCapacity's
TableName: "If you had specified the ARN of a table in the input, you'll see the table ARN in the
response"; BatchGetItem's Responses is "a map of table name or table ARN"), except a table
description, whose TableName stays the bare name.

`arn_violation` checks an ARN in DynamoDB's order and words, as far as they are known: of
another Region a ValidationException "Invalid AWS region in '<arn>'", of another account an
AccessDeniedException "Access is denied" (both captured against the service by a public catalogue
of its answers, ack-api-quirks DDB-TABLE-011 and DDB-TABLE-442, whose capture of the first is cut
off inside the ARN: that nothing follows the ARN is a guess, as is the partition's
"Invalid AWS partition in '<arn>'" and the resource type's "Invalid resource type in '<arn>'",
which that catalogue names without their arguments). Any other malformed ARN, an index's or a
stream's included, is refused with the constraint "Valid ARN format is ..." (the words a public
emulator captured from DynamoDB, ExtendDB's table_arn.rs), a table name shorter than 3 characters
with "Table name of ARN must have length greater than or equal to 3".

A tag operation's ResourceArn is checked by `tagged_table_name`, in the order and words DynamoDB
answers TagResource, UntagResource and ListTagsOfResource, as a public catalogue captured them
against the service (ack-api-quirks, its list of ValidationException texts): not an ARN, "ARNs must
start with 'arn:'"; a DynamoDB resource that is not a table's, "Provided Arn is not a DynamoDB
resource arn"; an index's, "Invalid resource arn provided, only table or stream is accepted";
another Region's, "Invalid TableArn: Invalid ResourceArn provided as input". Another service's or
another account's ARN is an AccessDeniedException, the account checked before the Region (as an
emulator verified against the service, ExtendDB's tag_resource.rs); that a malformed ARN and
another partition's are denied too, and that a stream's is "Invalid TableArn" (dynalab tags
tables only), are guesses.

`table_name_of` is the router's hot path: a name that does not start with `arn:` is returned as
it is, with no parsing, so requests naming tables by name pay one `startswith`.
"""

from __future__ import annotations

import dataclasses
import re

from core import limits
from core.errors import AccessDenied, ValidationError

ARN_PREFIX = "arn:"
# dynalab's ARNs are in the standard partition (router.protocol.ACCOUNT_ID names the account).
PARTITION = "aws"
SERVICE = "dynamodb"
TABLE_RESOURCE_TYPE = "table"
_NAME = re.compile(r"[a-zA-Z0-9_.-]+")
# arn:PARTITION:SERVICE:REGION:ACCOUNT:RESOURCE, every field but the resource free of colons.
_ARN_FIELDS = 6

VALID_ARN_FORMAT = (
    "Valid ARN format is 'arn:<awsPartition>:<vendor>:<region>:<subscriber>:"
    "resourceType/resourceName', where Resource name must have length less than or equal to "
    f"{limits.TABLE_NAME_CHARS_MAX}, Resource name must have length greater than or equal to "
    f"{limits.TABLE_NAME_CHARS_MIN}, Resource name must satisfy regular expression pattern: "
    f"{_NAME.pattern}"
)
SHORT_NAME = (
    f"Table name of ARN must have length greater than or equal to {limits.TABLE_NAME_CHARS_MIN}"
)
ACCESS_DENIED = "Access is denied"


@dataclasses.dataclass(frozen=True)
class ArnViolation:
    """Why an ARN names no table here.

    `constraint` goes in a "Value '<arn>' at '<member>' failed to satisfy constraint: ..."
    violation; `text` is a violation of its own words; `denied` is an AccessDeniedException, which
    comes after the request's validation errors.
    """

    constraint: str | None = None
    text: str | None = None
    denied: bool = False


def is_arn(table_name: str) -> bool:
    return table_name.startswith(ARN_PREFIX)


def arn_violation(arn: str, region: str, account: str) -> ArnViolation | None:
    """What is wrong with `arn` as the TableName of a request in `region` of `account` (None:
    nothing, it names table `table_name_of(arn)` there). `arn` starts with `arn:`."""
    assert is_arn(arn)
    fields = arn.split(":", _ARN_FIELDS - 1)
    if len(fields) != _ARN_FIELDS or fields[2] != SERVICE or not fields[3]:
        return ArnViolation(constraint=VALID_ARN_FORMAT)
    _, partition, _, arn_region, arn_account, resource = fields
    resource_type, slash, name = resource.partition("/")
    if not slash or not re.fullmatch(r"[0-9]{12}", arn_account):
        return ArnViolation(constraint=VALID_ARN_FORMAT)
    if resource_type != TABLE_RESOURCE_TYPE:
        return ArnViolation(text=f"Invalid resource type in '{arn}'")
    # An index's ARN (table/T/index/I) or a stream's fails here: a name has no slash.
    if len(name) < limits.TABLE_NAME_CHARS_MIN and _NAME.fullmatch(name or "_"):
        return ArnViolation(constraint=SHORT_NAME)
    if len(name) > limits.TABLE_NAME_CHARS_MAX or not _NAME.fullmatch(name):
        return ArnViolation(constraint=VALID_ARN_FORMAT)
    if partition != PARTITION:
        return ArnViolation(text=f"Invalid AWS partition in '{arn}'")
    if arn_region != region:
        return ArnViolation(text=f"Invalid AWS region in '{arn}'")
    if arn_account != account:
        return ArnViolation(denied=True)
    return None


def table_name_of(table_name: str) -> str:
    """The name of the table a TableName names: itself, or the name at the end of a checked ARN."""
    if not table_name.startswith(ARN_PREFIX):
        return table_name
    return table_name.rpartition(":")[2].partition("/")[2]


# What a tag operation's ResourceArn may name after table/NAME: nothing; an index is refused in
# words of its own, any other sub-resource (a backup's, an export's) as not DynamoDB's.
_INDEX_SEGMENT = "index"
_STREAM_SEGMENT = "stream"
_INVALID_PARAMETERS = "One or more parameter values were invalid: "


def tagged_table_name(arn: str, region: str, account: str) -> str:
    """The name of the table a tag operation's ResourceArn names in `region` of `account`;
    ValidationError or AccessDenied in DynamoDB's words when it names none there."""
    if not arn.startswith(ARN_PREFIX):
        raise ValidationError(f"{_INVALID_PARAMETERS}ARNs must start with 'arn:': {arn}")
    fields = arn.split(":", _ARN_FIELDS - 1)
    if len(fields) != _ARN_FIELDS or fields[1] != PARTITION or fields[2] != SERVICE:
        raise AccessDenied(ACCESS_DENIED)
    _, _, _, arn_region, arn_account, resource = fields
    resource_type, _, path = resource.partition("/")
    name, _, sub_resource = path.partition("/")
    if resource_type != TABLE_RESOURCE_TYPE:
        raise ValidationError(
            f"{_INVALID_PARAMETERS}Provided Arn is not a DynamoDB resource arn: {arn}"
        )
    if arn_account != account:
        raise AccessDenied(ACCESS_DENIED)
    if arn_region != region:
        raise ValidationError(f"Invalid TableArn: Invalid ResourceArn provided as input {arn}")
    segment = sub_resource.partition("/")[0]
    if segment == _INDEX_SEGMENT:
        raise ValidationError(
            f"{_INVALID_PARAMETERS}Invalid resource arn provided, only table or stream is "
            f"accepted. Provided resource arn: {arn}"
        )
    if sub_resource and segment != _STREAM_SEGMENT:
        raise ValidationError(
            f"{_INVALID_PARAMETERS}Provided Arn is not a DynamoDB resource arn: {arn}"
        )
    # A name too short for a table is refused so too (dynalite's tests against the service).
    if (
        sub_resource
        or not _NAME.fullmatch(name)
        or not limits.TABLE_NAME_CHARS_MIN <= len(name) <= limits.TABLE_NAME_CHARS_MAX
    ):
        raise ValidationError(f"Invalid TableArn: Invalid ResourceArn provided as input {arn}")
    return name
