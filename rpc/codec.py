"""The one boundary where `core.errors` cross gRPC between storage nodes and their callers.

A node answers every request with a `Response`: on success its body is the JSON reply; on failure
`error_type` is the error's `type_name`, `error_message` its message, and the body carries the
error's extra fields (`ConditionalCheckFailed` puts the old item there as `{"Item": ...}` for
ReturnValuesOnConditionCheckFailure). The caller turns such a response back into the same
`core.errors` instance. Bodies are JSON encoded with orjson; an empty body means `{}`.
"""

from __future__ import annotations

from typing import Any

import orjson

from core.errors import (
    ERROR_TYPES,
    ConditionalCheckFailed,
    DynamoError,
    InternalServerError,
    NotPartitionLeader,
    OnDemandThrottled,
    ThrottlingReason,
    ThroughputExceeded,
    WriteOutcomeUnknown,
)
from rpc import node_pb2, ops

# Each op's value of the proto's `Op` enum, and back: the enum's names are the ops' names.
OP_TO_WIRE: dict[str, node_pb2.Op.ValueType] = {
    op: node_pb2.Op.Value(f"OP_{op.upper()}")
    for op in ops.DATA_OPS | ops.CONTROL_OPS | ops.FEED_OPS
}
OP_FROM_WIRE: dict[node_pb2.Op.ValueType, str] = {number: op for op, number in OP_TO_WIRE.items()}
assert len(OP_FROM_WIRE) == len(node_pb2.Op.keys()) - 1, "every Op but OP_UNSPECIFIED is an op"


def encode_body(body: dict[str, Any]) -> bytes:
    """JSON bytes of a request or reply body."""
    return orjson.dumps(body)


def request(
    request_id: int, op: str, target: ops.Target | None, payload: dict[str, Any]
) -> node_pb2.Request:
    """The Request of `op` addressed to `target` (None: a control-plane call), payload as JSON.

    An op this side does not know travels as OP_UNSPECIFIED, which a node refuses as
    UnknownOperation (a version skew between services, like an unknown error type).
    """
    body = orjson.dumps(payload)
    wire_op = OP_TO_WIRE.get(op, node_pb2.OP_UNSPECIFIED)
    if target is None:
        return node_pb2.Request(id=request_id, op=wire_op, body=body)
    return node_pb2.Request(
        id=request_id,
        op=wire_op,
        table_id=target.table_id,
        partition_id=target.partition_id,
        epoch=target.epoch,
        consistent=target.consistent,
        body=body,
        deadline=target.deadline,
    )


def decode_body(data: bytes) -> dict[str, Any]:
    """The JSON object in a request or reply body; an empty body is `{}`."""
    if not data:
        return {}
    body = orjson.loads(data)
    if not isinstance(body, dict):
        raise InternalServerError("An RPC body must be a JSON object")
    return body


def ok_response(request_id: int, reply: dict[str, Any]) -> node_pb2.Response:
    return node_pb2.Response(id=request_id, body=orjson.dumps(reply))


def error_response(request_id: int, error: DynamoError) -> node_pb2.Response:
    extra = error.extra_fields()
    # A write of unknown outcome is a ServiceUnavailable to the node's callers and a 500 to
    # clients: it crosses under a name of its own.
    unknown = isinstance(error, WriteOutcomeUnknown)
    return node_pb2.Response(
        id=request_id,
        body=orjson.dumps(extra) if extra else b"",
        error_type=WriteOutcomeUnknown.node_wire_name if unknown else error.type_name,
        error_message=error.message or "",
    )


# The throttles, which carry their ThrottlingReasons in the body.
_THROTTLES: dict[str, type[ThroughputExceeded]] = {
    cls.type_name: cls for cls in (ThroughputExceeded, OnDemandThrottled)
}


def error_from_response(response: node_pb2.Response) -> DynamoError:
    """The `core.errors` instance a failed response carries.

    An error type this side does not know is a version skew between services, which is a bug: it
    becomes an InternalServerError naming the unknown type rather than a guess.
    """
    type_name = response.error_type
    message = response.error_message
    if type_name == ConditionalCheckFailed.type_name:
        return ConditionalCheckFailed(message, item=decode_body(response.body).get("Item"))
    if type_name == WriteOutcomeUnknown.node_wire_name:
        return WriteOutcomeUnknown(message)
    if type_name == NotPartitionLeader.type_name:
        return NotPartitionLeader(message, decode_body(response.body).get("leader"))
    throttle = _THROTTLES.get(type_name)
    if throttle is not None:
        reasons = decode_body(response.body).get(throttle.reasons_key, ())
        return throttle(
            message,
            tuple(ThrottlingReason(reason["reason"], reason["resource"]) for reason in reasons),
        )
    error_type = ERROR_TYPES.get(type_name)
    if error_type is None:
        return InternalServerError(f"Unknown error type {type_name!r} from a node: {message}")
    return error_type(message)


def reply_from_response(response: node_pb2.Response) -> dict[str, Any]:
    """The reply body of a successful response; raise its error otherwise."""
    if response.error_type:
        raise error_from_response(response)
    return decode_body(response.body)
