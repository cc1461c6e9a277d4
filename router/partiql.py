"""ExecuteStatement, BatchExecuteStatement and ExecuteTransaction: PartiQL on the existing handlers.

Each statement is parsed (cached per text) and planned by `core.partiql` into requests of the
low-level API, which run on the handlers every client uses, so a statement gets their checks,
paging over partitions (splits included), capacity and errors unchanged:

- **ExecuteStatement** runs a SELECT's GetItem, Queries or Scan, or one write. A SELECT that reads
  several partition keys (IN) runs one Query per key in turn; `Limit` bounds the items read
  across them, as it bounds one Query's, and `NextToken` (opaque to the client: which request,
  and where in it, tied to the statement and its Parameters) resumes where the page stopped. An
  INSERT whose key exists is DuplicateItemException; RETURNING answers the item in `Items`.
- **BatchExecuteStatement** runs up to 25 statements concurrently, all reads (each by its full
  key, as DynamoDB requires) or all writes, each with its own response or error.
- **ExecuteTransaction** runs up to 100 write statements as one TransactWriteItems (its
  ClientRequestToken, idempotency and cancellation reasons included; an INSERT's reason is
  DuplicateItem) or up to 100 key reads as one TransactGetItems.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from core import limits, partiql, table_arns, values
from core.errors import (
    ConditionalCheckFailed,
    DuplicateItem,
    DynamoError,
    ResourceNotFound,
    TransactionCanceled,
    ValidationError,
)
from core.keys import KeyShape
from core.partiql import KeyNames, ReadPlan, WritePlan, ast
from core.partiql.planner import BATCH_KEY_READ, TRANSACTION_KEY_READ
from core.size import item_size_bytes
from core.transactions import Code
from router import items, queries, transactions
from router.context import TABLE_NOT_FOUND, RouterContext
from router.requests import RETURN_VALUES_ON_FAILURE, RequestReader, check_index, read_common

Item = dict[str, Any]
Handler = Callable[[RouterContext, dict[str, Any]], Awaitable[dict[str, Any]]]

_WRITE_HANDLERS: dict[str, Handler] = {
    "PutItem": items.put_item,
    "UpdateItem": items.update_item,
    "DeleteItem": items.delete_item,
}
_READ_HANDLERS: dict[str, Handler] = {
    "GetItem": items.get_item,
    "Query": queries.query,
    "Scan": queries.scan,
}
_TRANSACT_ACTIONS = {
    "PutItem": "Put",
    "UpdateItem": "Update",
    "DeleteItem": "Delete",
    "ConditionCheck": "ConditionCheck",
}
DUPLICATE_MESSAGE = "Duplicate primary key exists in table"
# dynalab's own texts: DynamoDB does not publish its words for these refusals.
NEXT_TOKEN_INVALID = "The provided NextToken is not valid for this statement and its parameters"
NEXT_TOKEN_WRITE = "NextToken is only valid for a SELECT statement"
EXISTS_OUTSIDE_TRANSACTION = "EXISTS is only supported within ExecuteTransaction"
BATCH_MIXED = "Read and write requests together in the same batch is not supported."
TRANSACTION_MIXED = (
    "ExecuteTransaction API does not support both read and write operations in the same request."
)
TRANSACTION_RETURNING = (
    "Validation failed in TransactStatements[{number}]: RETURNING clause is not supported in "
    "ExecuteTransaction."
)
TRANSACTION_INDEX = (
    "Validation failed in TransactStatements[{number}]: Reads on indices are not supported "
    "within transactions."
)
DUPLICATE_KEYS = "Provided list of item keys contains duplicates"


# Planning --------------------------------------------------------------------------------------


def _statement_key(statement: ast.Statement) -> ast.Target:
    return statement.select.target if isinstance(statement, ast.Exists) else statement.target


async def _planned(
    ctx: RouterContext, text: str, parameters: list[Any] | None
) -> tuple[ast.Statement, partiql.Plan]:
    """Parse `text`, check its Parameters and plan it against its table's (or index's) key."""
    statement = partiql.parse(text)
    partiql.check_parameters(statement, parameters)
    for number, parameter in enumerate(parameters or ()):
        values.validate_value(parameter, where=f"Parameters[{number}]")
    target = _statement_key(statement)
    # A statement's table is a name ("table (Required) The table name to query", PartiQL
    # reference of the Developer Guide, whose statements never mention an ARN, unlike the
    # TableName members since 2024). So a quoted ARN is answered as a table that does not exist
    # (a guess: DynamoDB's answer to one was not found) and never resolved to the table it
    # names, which would leave its Region and account unchecked.
    if table_arns.is_arn(target.table):
        raise ResourceNotFound(TABLE_NOT_FOUND)
    table = await ctx.table(target.table)
    keys = _key_names(table.key_shape)
    if isinstance(statement, ast.Select) and target.index is not None:
        index = check_index(target.index, table)
        assert index is not None
        keys = _key_names(index.key_shape)
    return statement, partiql.plan(statement, parameters, keys)


def _key_names(shape: KeyShape) -> KeyNames:
    sort = shape.sort_key
    return KeyNames(
        shape.partition_key.name,
        None if sort is None else sort.name,
        multi_attribute=len(shape.attributes) > 1 + (sort is not None),
    )


def _with(request: dict[str, Any], **members: Any) -> dict[str, Any]:
    """`request` with the members that are not None."""
    return dict(request, **{name: value for name, value in members.items() if value is not None})


def _add_capacity(
    total: dict[str, Any] | None, part: dict[str, Any] | None
) -> dict[str, Any] | None:
    """Two ConsumedCapacity entries of one table as one: their units summed, member by member."""
    if part is None:
        return total
    if total is None:
        copy: dict[str, Any] = orjson.loads(orjson.dumps(part))  # a copy the sums may change
        return copy
    for name, value in part.items():
        if isinstance(value, int | float) and not isinstance(value, bool):
            total[name] = total.get(name, 0) + value
        elif isinstance(value, dict):
            total[name] = _add_capacity(total.get(name), value)
    return total


# NextToken -------------------------------------------------------------------------------------


def _digest(text: str, parameters: list[Any] | None) -> str:
    """What a NextToken is tied to: the statement and its Parameters."""
    material = orjson.dumps([text, parameters or []], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(material).hexdigest()[:32]


def _encode_token(digest: str, request: int, start: Item | None) -> str:
    raw = orjson.dumps({"d": digest, "r": request, "k": start})
    return base64.urlsafe_b64encode(raw).decode()


def _decode_token(token: str, digest: str, requests: int) -> tuple[int, Item | None]:
    """(request number, ExclusiveStartKey) of a NextToken this statement handed out."""
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(token.encode()))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        raise ValidationError(NEXT_TOKEN_INVALID) from None
    if (
        not isinstance(decoded, dict)
        or decoded.get("d") != digest
        or not isinstance(decoded.get("r"), int)
        or not 0 <= decoded["r"] < requests
        or not isinstance(decoded.get("k"), dict | None)
    ):
        raise ValidationError(NEXT_TOKEN_INVALID)
    return decoded["r"], decoded["k"]


# ExecuteStatement ------------------------------------------------------------------------------


async def _read(
    ctx: RouterContext,
    plan: ReadPlan,
    *,
    limit: int | None,
    consistent: bool | None,
    capacity: str | None,
    next_token: str | None,
    digest: Callable[[], str],
) -> dict[str, Any]:
    """One page of a SELECT: what its requests return from where the NextToken left them.

    `digest` gives what a NextToken is tied to; a GetItem, which pages nothing, never asks.
    """
    handler = _READ_HANDLERS[plan.operation]
    if plan.operation == "GetItem":
        if next_token is not None:
            raise ValidationError(NEXT_TOKEN_INVALID)
        body = _with(plan.requests[0], ConsistentRead=consistent, ReturnConsumedCapacity=capacity)
        reply = await handler(ctx, body)
        result: dict[str, Any] = {"Items": [reply["Item"]] if "Item" in reply else []}
        if "ConsumedCapacity" in reply:
            result["ConsumedCapacity"] = reply["ConsumedCapacity"]
        return result
    number, start = (0, None)
    if next_token is not None:
        number, start = _decode_token(next_token, digest(), len(plan.requests))
    found: list[Item] = []
    found_bytes = 0
    consumed: dict[str, Any] | None = None
    remaining = limit
    result = {}
    while True:
        body = _with(
            plan.requests[number],
            Limit=remaining,
            ExclusiveStartKey=start,
            ConsistentRead=consistent,
            ReturnConsumedCapacity=capacity,
        )
        reply = await handler(ctx, body)
        found.extend(reply["Items"])
        found_bytes += sum(item_size_bytes(item) for item in reply["Items"])
        consumed = _add_capacity(consumed, reply.get("ConsumedCapacity"))
        last = reply.get("LastEvaluatedKey")
        if remaining is not None:
            remaining -= reply["ScannedCount"]
        if last is not None:
            result["NextToken"] = _encode_token(digest(), number, last)
            result["LastEvaluatedKey"] = last
            break
        number, start = number + 1, None
        if number == len(plan.requests):
            break
        # A page of several Queries stops where one of them would: at Limit items read, or at
        # 1 MB of items; the NextToken then starts the next Query.
        if (remaining is not None and remaining <= 0) or found_bytes >= limits.QUERY_PAGE_BYTES_MAX:
            result["NextToken"] = _encode_token(digest(), number, None)
            break
    result["Items"] = found
    if consumed is not None:
        result["ConsumedCapacity"] = consumed
    return result


async def _write(
    ctx: RouterContext, plan: WritePlan, capacity: str | None, on_failure: str | None
) -> dict[str, Any]:
    """One write statement on its item handler; RETURNING's image comes back in Items."""
    if plan.operation == "ConditionCheck":
        raise ValidationError(EXISTS_OUTSIDE_TRANSACTION)
    body = _with(
        plan.request,
        ReturnConsumedCapacity=capacity,
        ReturnValuesOnConditionCheckFailure=None if plan.insert else on_failure,
    )
    try:
        reply = await _WRITE_HANDLERS[plan.operation](ctx, body)
    except ConditionalCheckFailed:
        if plan.insert:
            raise DuplicateItem(DUPLICATE_MESSAGE) from None
        raise
    result: dict[str, Any] = {"Items": [reply["Attributes"]] if "Attributes" in reply else []}
    if "ConsumedCapacity" in reply:
        result["ConsumedCapacity"] = reply["ConsumedCapacity"]
    return result


def _read_statement_members(reader: RequestReader) -> tuple[str | None, list[Any] | None]:
    """Statement and Parameters, which every statement of the three operations has."""
    text = reader.string(
        "Statement", required=True, min_length=1, max_length=limits.PARTIQL_STATEMENT_CHARS_MAX
    )
    parameters = reader.array("Parameters", min_length=1)
    return text, parameters


async def execute_statement(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """ExecuteStatement: one PartiQL statement; a SELECT answers a page of its items."""
    reader = RequestReader(body)
    text, parameters = _read_statement_members(reader)
    consistent = reader.boolean("ConsistentRead")
    next_token = reader.string(
        "NextToken", min_length=1, max_length=limits.PARTIQL_NEXT_TOKEN_CHARS_MAX
    )
    read_common(reader)
    limit = reader.integer("Limit", minimum=1)
    on_failure = reader.string("ReturnValuesOnConditionCheckFailure", enum=RETURN_VALUES_ON_FAILURE)
    reader.check()
    assert text is not None

    _, plan = await _planned(ctx, text, parameters)
    capacity = body.get("ReturnConsumedCapacity")
    if isinstance(plan, ReadPlan):
        return await _read(
            ctx,
            plan,
            limit=limit,
            consistent=consistent,
            capacity=capacity,
            next_token=next_token,
            digest=lambda: _digest(text, parameters),
        )
    if next_token is not None:
        raise ValidationError(NEXT_TOKEN_WRITE)
    return await _write(ctx, plan, capacity, on_failure)


# BatchExecuteStatement -------------------------------------------------------------------------

# A BatchStatementError's Code for each error type DynamoDB names (the API Reference's enum).
_BATCH_CODES = {
    "ConditionalCheckFailedException": "ConditionalCheckFailed",
    "ItemCollectionSizeLimitExceededException": "ItemCollectionSizeLimitExceeded",
    "RequestLimitExceeded": "RequestLimitExceeded",
    "ValidationException": "ValidationError",
    "ProvisionedThroughputExceededException": "ProvisionedThroughputExceeded",
    "TransactionConflictException": "TransactionConflict",
    "ThrottlingException": "ThrottlingError",
    "ResourceNotFoundException": "ResourceNotFound",
    "AccessDeniedException": "AccessDenied",
    "DuplicateItemException": "DuplicateItem",
}


def _batch_error(error: DynamoError) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "Code": _BATCH_CODES.get(error.type_name, "InternalServerError"),
        "Message": error.message or "",
    }
    if isinstance(error, ConditionalCheckFailed) and error.item is not None:
        entry["Item"] = error.item
    return entry


async def batch_execute_statement(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """BatchExecuteStatement: up to 25 key reads or up to 25 writes, each answered apart."""
    reader = RequestReader(body)
    statements = reader.array(
        "Statements",
        required=True,
        min_length=1,
        max_length=limits.PARTIQL_BATCH_STATEMENTS_MAX,
    )
    read_common(reader)
    for number, entry in enumerate(statements or (), start=1):
        nested = reader.nested(entry, f"{reader.where('Statements')}.{number}.member")
        _read_statement_members(nested)
        nested.boolean("ConsistentRead")
        nested.string("ReturnValuesOnConditionCheckFailure", enum=RETURN_VALUES_ON_FAILURE)
    reader.check()
    assert statements is not None
    capacity = body.get("ReturnConsumedCapacity")

    async def planned(entry: dict[str, Any]) -> tuple[ast.Statement, partiql.Plan] | DynamoError:
        try:
            return await _planned(ctx, entry["Statement"], entry.get("Parameters"))
        except DynamoError as error:
            return error

    plans = [await planned(entry) for entry in statements]
    kinds = {isinstance(p[1], ReadPlan) for p in plans if not isinstance(p, DynamoError)}
    if len(kinds) > 1:
        raise ValidationError(BATCH_MIXED)
    keys = [
        (p[1].table, orjson.dumps(_key_of(p[1]), option=orjson.OPT_SORT_KEYS))
        for p in plans
        if not isinstance(p, DynamoError) and _key_of(p[1]) is not None
    ]
    if len(set(keys)) != len(keys):
        raise ValidationError(DUPLICATE_KEYS)

    async def run(entry: dict[str, Any], planned: Any) -> dict[str, Any]:
        if isinstance(planned, DynamoError):
            return {"Error": _batch_error(planned)}
        _, plan = planned
        response: dict[str, Any] = {"TableName": plan.table}
        try:
            if isinstance(plan, ReadPlan):
                if not plan.key_read:
                    raise ValidationError(BATCH_KEY_READ)
                reply = await _read(
                    ctx,
                    plan,
                    limit=None,
                    consistent=entry.get("ConsistentRead"),
                    capacity=capacity,
                    next_token=None,
                    digest=lambda: "",
                )
                if reply["Items"]:
                    response["Item"] = reply["Items"][0]
            else:
                reply = await _write(
                    ctx, plan, capacity, entry.get("ReturnValuesOnConditionCheckFailure")
                )
        except DynamoError as error:
            response["Error"] = _batch_error(error)
            return response
        if "ConsumedCapacity" in reply:
            response["ConsumedCapacity"] = reply["ConsumedCapacity"]
        return response

    responses = await asyncio.gather(
        *(run(entry, planned) for entry, planned in zip(statements, plans, strict=True))
    )
    consumed: dict[str, dict[str, Any]] = {}
    for response in responses:
        part = response.pop("ConsumedCapacity", None)
        if part is not None:
            table = part["TableName"]
            merged = _add_capacity(consumed.get(table), part)
            assert merged is not None
            merged["TableName"] = table
            consumed[table] = merged
    result: dict[str, Any] = {"Responses": responses}
    if capacity in ("TOTAL", "INDEXES"):
        result["ConsumedCapacity"] = list(consumed.values())
    return result


def _key_of(plan: partiql.Plan) -> dict[str, Any] | None:
    """The item a key read or a write names, for the duplicate check (None: not one item)."""
    if isinstance(plan, WritePlan):
        return plan.key
    return plan.requests[0]["Key"] if plan.key_read else None


# ExecuteTransaction ----------------------------------------------------------------------------


async def execute_transaction(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """ExecuteTransaction: up to 100 writes applied all or none, or up to 100 key reads as of
    one instant."""
    reader = RequestReader(body)
    statements = reader.array(
        "TransactStatements",
        required=True,
        min_length=1,
        max_length=limits.TRANSACT_ITEMS_MAX,
    )
    reader.string(
        "ClientRequestToken", min_length=1, max_length=limits.CLIENT_REQUEST_TOKEN_CHARS_MAX
    )
    read_common(reader)
    for number, entry in enumerate(statements or (), start=1):
        nested = reader.nested(entry, f"{reader.where('TransactStatements')}.{number}.member")
        _read_statement_members(nested)
        nested.string("ReturnValuesOnConditionCheckFailure", enum=RETURN_VALUES_ON_FAILURE)
    reader.check()
    assert statements is not None

    plans: list[partiql.Plan] = []
    for number, entry in enumerate(statements):
        statement, plan = await _planned(ctx, entry["Statement"], entry.get("Parameters"))
        if isinstance(statement, ast.Update | ast.Delete) and statement.returning is not None:
            raise ValidationError(TRANSACTION_RETURNING.format(number=number))
        if isinstance(statement, ast.Select):
            if statement.target.index is not None:
                raise ValidationError(TRANSACTION_INDEX.format(number=number))
            assert isinstance(plan, ReadPlan)
            if not plan.key_read:
                raise ValidationError(TRANSACTION_KEY_READ)
        plans.append(plan)
    reads = [plan for plan in plans if isinstance(plan, ReadPlan)]
    if reads and len(reads) != len(plans):
        raise ValidationError(TRANSACTION_MIXED)
    if reads:
        return await _transact_reads(ctx, body, reads)
    writes = [plan for plan in plans if isinstance(plan, WritePlan)]
    return await _transact_writes(ctx, body, statements, writes)


async def _transact_reads(
    ctx: RouterContext, body: dict[str, Any], reads: Sequence[ReadPlan]
) -> dict[str, Any]:
    request: dict[str, Any] = {"TransactItems": [{"Get": plan.requests[0]} for plan in reads]}
    if body.get("ReturnConsumedCapacity") is not None:
        request["ReturnConsumedCapacity"] = body["ReturnConsumedCapacity"]
    return await transactions.transact_get_items(ctx, request)


async def _transact_writes(
    ctx: RouterContext,
    body: dict[str, Any],
    statements: Sequence[dict[str, Any]],
    writes: Sequence[WritePlan],
) -> dict[str, Any]:
    """The writes as one TransactWriteItems, whose record keeps the ClientRequestToken's
    promise; an INSERT whose condition failed is reported as DuplicateItem, as DynamoDB does."""
    actions = []
    for entry, plan in zip(statements, writes, strict=True):
        on_failure = entry.get("ReturnValuesOnConditionCheckFailure")
        action = _with(
            plan.request,
            ReturnValuesOnConditionCheckFailure=None if plan.insert else on_failure,
        )
        actions.append({_TRANSACT_ACTIONS[plan.operation]: action})
    request: dict[str, Any] = {"TransactItems": actions}
    for member in ("ClientRequestToken", "ReturnConsumedCapacity"):
        if body.get(member) is not None:
            request[member] = body[member]
    try:
        return await transactions.transact_write_items(ctx, request)
    except TransactionCanceled as error:
        if not any(plan.insert for plan in writes):
            raise
        reasons = [dict(reason) for reason in error.reasons]
        for reason, plan in zip(reasons, writes, strict=True):
            if plan.insert and reason.get("Code") == Code.CONDITIONAL_CHECK_FAILED.value:
                reason["Code"] = "DuplicateItem"
                reason["Message"] = DUPLICATE_MESSAGE
                reason.pop("Item", None)
        codes = ", ".join(reason["Code"] for reason in reasons)
        raise TransactionCanceled(
            "Transaction cancelled, please refer cancellation reasons for specific reasons "
            f"[{codes}]",
            reasons,
        ) from None


OPERATIONS = {
    "ExecuteStatement": execute_statement,
    "BatchExecuteStatement": batch_execute_statement,
    "ExecuteTransaction": execute_transaction,
}
