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
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from core import catalog, limits, table_arns
from core.catalog import TableDef
from core.errors import ResourceNotFound, ValidationError
from router.protocol import ACCOUNT_ID, request_region
from router.requests import RequestReader

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


def read_tags(reader: RequestReader, *, required: bool) -> list[tuple[str, str]]:
    """The Tags member (a list of {Key, Value}) as (key, value) pairs, its constraint violations
    recorded in `reader`."""
    elements = reader.array("Tags", required=required)
    tags: list[tuple[str, str]] = []
    for index, element in enumerate(elements or (), start=1):
        nested = reader.nested(element, f"{reader.where('Tags')}.{index}.member")
        key = nested.string("Key", required=True, min_length=1, max_length=limits.TAG_KEY_CHARS_MAX)
        value = nested.string(
            "Value", required=True, min_length=0, max_length=limits.TAG_VALUE_CHARS_MAX
        )
        if key is not None and value is not None:
            tags.append((key, value))
    return tags


def check_reserved(tags: list[tuple[str, str]]) -> None:
    """Refuse a tag key with the prefix AWS keeps for its own tags."""
    for key, _ in tags:
        if key.startswith(RESERVED_TAG_PREFIX):
            raise ValidationError(
                "One or more parameter values were invalid: Tag keys starting with "
                f"'{RESERVED_TAG_PREFIX}' are reserved for AWS use; tag key: {key}"
            )


def _read_arn(reader: RequestReader) -> str:
    arn = reader.string(
        "ResourceArn", required=True, min_length=1, max_length=RESOURCE_ARN_CHARS_MAX
    )
    return arn or ""


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
    arn = _read_arn(reader)
    tags = read_tags(reader, required=True)
    reader.check()
    check_reserved(tags)
    name = _table_name(arn)

    def add(current: TableDef | None) -> TableDef:
        if current is None:
            raise _not_found(arn)
        return catalog.tagged(current, tags)

    await ctx.change_table(name, add)
    return {}


async def untag_resource(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    arn = _read_arn(reader)
    # The keys' length constraint is stated once for the list, as for every list of strings.
    keys = reader.string_list("TagKeys", required=True, member_length=(1, limits.TAG_KEY_CHARS_MAX))
    reader.check()
    name = _table_name(arn)

    def remove(current: TableDef | None) -> TableDef:
        if current is None:
            raise _not_found(arn)
        return catalog.untagged(current, keys or ())

    await ctx.change_table(name, remove)
    return {}


async def list_tags_of_resource(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    reader = RequestReader(body)
    arn = _read_arn(reader)
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
