"""Tagging: TagResource, UntagResource, ListTagsOfResource, and the Tags of CreateTable.

A table's tags are part of its catalog record (`core.catalog.TableDef.tags`), changed like any
other setting: TagResource and UntagResource apply `core.catalog.tagged` / `untagged` to the
record by compare-and-set, which keeps DynamoDB's rules (a key is unique per table and a tag
added again takes its new value; at most 50 tags; a table being created or deleted is in use).
ListTagsOfResource reads the record. Every router sees a change as soon as it reads the catalog
again, so unlike DynamoDB's eventually consistent tag listing, a listing through the router that
made the change shows it at once.

A resource is named by its ARN, exactly as DescribeTable gives it in TableArn:
`arn:aws:dynamodb:<the request's Region>:000000000000:table/<name>`. An ARN of another Region or
account, an index's ARN or a text that is not an ARN is refused in DynamoDB's words
(`core.table_arns.tagged_table_name`); a table this cluster does not have is not found.

A tag request is checked in DynamoDB's order, as dynalite's tests (run against the service) pin
it: a missing ResourceArn is "Invalid TableArn" and an empty one an AccessDeniedException, before
any other member; then the members' constraints (a missing Tags or TagKeys); then the ARN itself;
then the tags, in DynamoDB's own words rather than the constraint messages (`check_tags`,
`check_tag_keys`, as captured against the service by a public catalogue of its answers,
ack-api-quirks DDB-TABLE-107, 110, 372, 457); and only then the table is looked up.
"""

from __future__ import annotations

import unicodedata
from typing import TYPE_CHECKING, Any

from core import catalog, limits, table_arns
from core.catalog import TableDef
from core.errors import AccessDenied, ResourceNotFound, ValidationError
from router.protocol import ACCOUNT_ID, request_region
from router.requests import RequestReader, shown

if TYPE_CHECKING:
    from router.context import RouterContext

RESOURCE_ARN_CHARS_MAX = 1283  # ResourceArnString in the service model.
# "Amazon Web Services-assigned tag names and values are automatically assigned the aws: prefix,
# which the user cannot assign" (API Reference, "Tag").
RESERVED_TAG_PREFIX = "aws:"


def table_arn(name: str) -> str:
    """The ARN of table `name` as DynamoDB gives it (TableArn), in the request's Region."""
    return f"arn:aws:dynamodb:{request_region()}:{ACCOUNT_ID}:table/{name}"


def stream_arn(name: str, label: str) -> str:
    """The ARN of table `name`'s stream `label` (LatestStreamArn, StreamArn)."""
    return f"{table_arn(name)}/stream/{label}"


# The characters a tag's key and value may hold: letters, digits and spaces of any script, and
# these (the AWS tag pattern, ^([\p{L}\p{Z}\p{N}_.:/=+\-@]*)$; DynamoDB refuses anything else,
# as captured: ack-api-quirks DDB-TABLE-372).
TAG_PUNCTUATION = frozenset("_.:/=+-@")
TAG_LETTER_CATEGORIES = frozenset("LZN")  # Unicode general categories, by their first letter.


def read_tags(reader: RequestReader, *, required: bool) -> list[Any]:
    """The Tags member as given (a list of {Key, Value} objects), a missing one recorded in
    `reader` when it is required; `check_tags` checks its elements."""
    return reader.array("Tags", required=required) or []


def _tag_text_valid(text: str, chars_max: int) -> bool:
    return len(text) <= chars_max and all(
        char in TAG_PUNCTUATION or unicodedata.category(char)[0] in TAG_LETTER_CATEGORIES
        for char in text
    )


def _checked_key(key: str | None) -> str:
    """A tag key, or DynamoDB's refusal: none, empty, too long or of a character a tag cannot
    hold."""
    if key is None or not key or not _tag_text_valid(key, limits.TAG_KEY_CHARS_MAX):
        raise ValidationError(f"The Tag Key provided is invalid, Key: {shown(key)}")
    return key


def check_tags(elements: list[Any]) -> list[tuple[str, str]]:
    """The (key, value) pairs of a Tags list, or DynamoDB's refusal, in its words.

    Each tag in order, its key before its value; then AWS's reserved prefix, a key given twice
    and more tags than a table holds (that order among the last three, which no capture shows
    together, is a guess). CreateTable's Tags pass here too; TagResource refuses an empty list
    before (`tag_resource`).
    """
    tags: list[tuple[str, str]] = []
    for element in elements:
        key = _checked_key(element.get("Key"))
        value = element.get("Value")
        if value is None or not _tag_text_valid(value, limits.TAG_VALUE_CHARS_MAX):
            raise ValidationError(f"The Tag Value provided is invalid, Value: {shown(value)}")
        tags.append((key, value))
    for key, _ in tags:
        if key.startswith(RESERVED_TAG_PREFIX):
            raise ValidationError(
                f"Tag Key cannot be prefixed with {RESERVED_TAG_PREFIX}, Key: {key}"
            )
    seen: set[str] = set()
    for key, _ in tags:
        if key in seen:
            raise ValidationError(
                f"Duplicate Tag Keys provided as input: Duplicate Tag Key found {key}"
            )
        seen.add(key)
    if len(tags) > limits.TAGS_PER_TABLE_MAX:
        raise ValidationError(catalog.TOO_MANY_TAGS)
    return tags


def check_tag_keys(keys: list[str]) -> list[str]:
    """UntagResource's TagKeys, or DynamoDB's refusal: none, a key a tag could not have, more keys
    than a table has tags (refused though it would remove them, as DynamoDB refuses it)."""
    if not keys:
        raise ValidationError("Atleast one Tag Key needs to be provided as Input.")
    for key in keys:
        _checked_key(key)
    if len(keys) > limits.TAGS_PER_TABLE_MAX:
        raise ValidationError(catalog.TOO_MANY_TAGS)
    return keys


def _read_arn(reader: RequestReader, operation: str) -> str:
    """The ResourceArn, refusing a missing or empty one before the request's other members are
    read, as DynamoDB does; the rest of the ARN is checked after them (`_table_name`)."""
    arn = reader.body.get("ResourceArn")
    if arn is None:
        # DynamoDB's words, alone, whatever else is missing (dynalite's tests against the service).
        raise ValidationError("Invalid TableArn")
    if not arn:
        # The authorisation of an empty resource fails as IAM words it, naming the resource "*"
        # (dynalite's tests against the service). dynalab has no users: that the caller is the
        # account's root is a guess at the principal, which the capture matches with ".+".
        raise AccessDenied(
            f"User: arn:aws:iam::{ACCOUNT_ID}:root is not authorized to perform: "
            f"dynamodb:{operation} on resource: *"
        )
    reader.string("ResourceArn", max_length=RESOURCE_ARN_CHARS_MAX)
    return str(arn)


def _not_found(arn: str) -> ResourceNotFound:
    # DynamoDB's words, its misspelt "ResourcArn" included, as clients quote them from the
    # service: "Requested resource not found: ResourcArn: arn:aws:dynamodb:eu-west-1:...:
    # table/ddb-rule-test not found" (cloud-custodian issue 3514, 2019; steampipe-plugin-aws
    # issue 1516, 2022, the same words).
    return ResourceNotFound(f"Requested resource not found: ResourcArn: {arn} not found")


def _table_name(arn: str) -> str:
    """The name of the table an ARN names in this cluster (its Region and account)."""
    return table_arns.tagged_table_name(arn, request_region(), ACCOUNT_ID)


def _found(ctx: RouterContext, arn: str, name: str) -> TableDef:
    table = ctx.records.get(name)
    if table is None:
        raise _not_found(arn)
    return table


async def tag_resource(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    arn = _read_arn(reader, "TagResource")
    elements = read_tags(reader, required=True)
    reader.check()
    name = _table_name(arn)
    if not elements:
        raise ValidationError("Atleast one Tag needs to be provided as Input.")
    tags = check_tags(elements)

    def add(current: TableDef | None) -> TableDef:
        if current is None:
            raise _not_found(arn)
        return catalog.tagged(current, tags)

    await ctx.change_table(name, add)
    return {}


async def untag_resource(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    arn = _read_arn(reader, "UntagResource")
    keys = reader.string_list("TagKeys", required=True)
    reader.check()
    name = _table_name(arn)
    assert keys is not None, "reader.check() refuses a missing TagKeys"
    removed = check_tag_keys(keys)

    def remove(current: TableDef | None) -> TableDef:
        if current is None:
            raise _not_found(arn)
        return catalog.untagged(current, removed)

    await ctx.change_table(name, remove)
    return {}


async def list_tags_of_resource(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    arn = _read_arn(reader, "ListTagsOfResource")
    # A table has at most 50 tags, which one reply holds: no page ever needs a NextToken.
    reader.string("NextToken")
    reader.check()
    name = _table_name(arn)
    await ctx.refresh()
    table = _found(ctx, arn, name)
    return {"Tags": [{"Key": key, "Value": value} for key, value in table.tags]}


OPERATIONS = {
    "TagResource": tag_resource,
    "UntagResource": untag_resource,
    "ListTagsOfResource": list_tags_of_resource,
}
