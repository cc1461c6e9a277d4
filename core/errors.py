"""Typed errors raised by the core and the services, named after DynamoDB's own.

Code raises these; exactly one place per protocol translates them: `router.protocol` turns them into
`{"__type": "com.amazonaws.dynamodb.v20120810#<type_name>", "message": ...}` HTTP replies, and
`rpc.codec` carries them across gRPC between nodes and routers. Messages use DynamoDB's
words wherever the Developer Guide or API Reference gives them, because SDKs and people match on
them.
"""

from __future__ import annotations

from typing import Any, ClassVar

# The prefix DynamoDB puts before the ValidationException messages about a parameter's value.
INVALID_PARAMETERS = "One or more parameter values were invalid: "
# DynamoDB's answer to a key that lacks, adds or mistypes an attribute of the table's key schema.
KEY_MISMATCH = "The provided key element does not match the schema"


class DynamoError(Exception):
    """An error that a DynamoDB client should see, with its wire type name and HTTP status."""

    type_name: ClassVar[str] = "InternalServerError"
    http_status: ClassVar[int] = 400
    # The namespace DynamoDB puts before the type name in `__type`.
    namespace: ClassVar[str] = "com.amazonaws.dynamodb.v20120810"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def extra_fields(self) -> dict[str, Any]:
        """Fields beyond `__type` and `message` that belong in the error body."""
        return {}


class ValidationError(DynamoError):
    type_name = "ValidationException"


class SerializationError(DynamoError):
    """The request body is not valid JSON or a value has the wrong JSON type."""

    type_name = "SerializationException"
    namespace = "com.amazon.coral.service"


class UnknownOperation(DynamoError):
    type_name = "UnknownOperationException"
    namespace = "com.amazon.coral.service"


class MissingAuthenticationToken(DynamoError):
    type_name = "MissingAuthenticationTokenException"
    namespace = "com.amazon.coral.service"


class ConditionalCheckFailed(DynamoError):
    """A condition evaluated false; may carry the item for ReturnValuesOnConditionCheckFailure."""

    type_name = "ConditionalCheckFailedException"

    def __init__(
        self, message: str = "The conditional request failed", item: dict[str, Any] | None = None
    ) -> None:
        super().__init__(message)
        self.item = item

    def extra_fields(self) -> dict[str, Any]:
        return {"Item": self.item} if self.item is not None else {}


class ResourceNotFound(DynamoError):
    type_name = "ResourceNotFoundException"


class ResourceInUse(DynamoError):
    type_name = "ResourceInUseException"


class LimitExceeded(DynamoError):
    type_name = "LimitExceededException"


class ThroughputExceeded(DynamoError):
    type_name = "ProvisionedThroughputExceededException"

    def __init__(
        self,
        message: str = (
            "The level of configured provisioned throughput for the table was exceeded. "
            "Consider increasing your provisioning level with the UpdateTable API."
        ),
    ) -> None:
        super().__init__(message)


class ItemCollectionSizeLimitExceeded(DynamoError):
    type_name = "ItemCollectionSizeLimitExceededException"


class TransactionConflict(DynamoError):
    type_name = "TransactionConflictException"


class ServiceUnavailable(DynamoError):
    """A partition's node cannot be reached; SDKs retry this with backoff."""

    type_name = "ServiceUnavailable"
    http_status = 503
    namespace = "com.amazon.coral.availability"


class InternalServerError(DynamoError):
    """A bug. Logged with the request id; the client sees a 500."""

    type_name = "InternalServerError"
    http_status = 500


class StaleEpoch(DynamoError):
    """Internal between node and router: the request named an older partition epoch than the node's.

    Never reaches a client: the router refreshes its partition map and retries.
    """

    type_name = "StaleEpoch"
    http_status = 503


class ChangeLogTrimmed(DynamoError):
    """A change-feed reader asked for records the partition's log no longer holds.

    The log keeps a record until every registered consumer has checkpointed past it, but never more
    than its hard bound of records; a consumer that fell further behind must re-snapshot the
    partition and follow from `first_retained_seq - 1`. Named after DynamoDB Streams' answer to
    a read before the oldest record of a shard.
    """

    type_name = "TrimmedDataAccessException"

    def __init__(self, message: str, first_retained_seq: int | None = None) -> None:
        super().__init__(message)
        self.first_retained_seq = first_retained_seq

    def extra_fields(self) -> dict[str, Any]:
        if self.first_retained_seq is None:
            return {}
        return {"first_retained_seq": self.first_retained_seq}


ERROR_TYPES: dict[str, type[DynamoError]] = {
    cls.type_name: cls
    for cls in (
        ValidationError,
        SerializationError,
        UnknownOperation,
        MissingAuthenticationToken,
        ConditionalCheckFailed,
        ResourceNotFound,
        ResourceInUse,
        LimitExceeded,
        ThroughputExceeded,
        ItemCollectionSizeLimitExceeded,
        TransactionConflict,
        ServiceUnavailable,
        InternalServerError,
        StaleEpoch,
        ChangeLogTrimmed,
    )
}
