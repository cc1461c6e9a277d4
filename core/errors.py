"""Typed errors raised by the core and the services, and the one table of how DynamoDB sends each.

Code raises these; exactly one place per protocol translates them: `router.protocol` renders an
error as DynamoDB's HTTP reply from its row in `WIRE_ERRORS`, and `rpc.codec` carries errors
across gRPC between nodes and routers. Messages use DynamoDB's words wherever the Developer Guide
or API Reference gives them, because SDKs and people match on them.

`WIRE_ERRORS` is the table of every error DynamoDB answers with: the namespace in front of its
`__type` (DynamoDB's front end, the Coral framework, answers protocol and authentication errors in
`com.amazon.coral.service`, constraint violations in `com.amazon.coral.validate`, throttling and
availability in `com.amazon.coral.availability`; the service's own errors are in
`com.amazonaws.dynamodb.v20120810`), its HTTP status, the key its text goes under (`message`
for most, `Message` where the service model and DynamoDB spell it so, none at all for a body that
DynamoDB sends with the type alone), and whether the AWS SDKs retry it (botocore's standard retry
mode: its throttling codes and every 5xx). SDKs take the error code from `__type` after the `#`.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, ClassVar

# The prefix DynamoDB puts before the ValidationException messages about a parameter's value.
INVALID_PARAMETERS = "One or more parameter values were invalid: "
# DynamoDB's answer to a key that lacks, adds or mistypes an attribute of the table's key schema.
KEY_MISMATCH = "The provided key element does not match the schema"


class Namespace(enum.StrEnum):
    """What DynamoDB writes before the `#` of an error's `__type`."""

    DYNAMODB = "com.amazonaws.dynamodb.v20120810"
    SERVICE = "com.amazon.coral.service"
    VALIDATE = "com.amazon.coral.validate"
    AVAILABILITY = "com.amazon.coral.availability"
    # Errors between dynalab's own processes, never sent to a client.
    INTERNAL = "dynalab.internal"


class MessageKey(enum.StrEnum):
    """The JSON key an error body carries its text under."""

    LOWER = "message"
    UPPER = "Message"


@dataclass(frozen=True)
class WireError:
    """How DynamoDB sends one error type."""

    namespace: Namespace
    http_status: int
    message_key: MessageKey
    sdk_retries: bool


def _dynamodb(message_key: MessageKey = MessageKey.LOWER, *, retries: bool = False) -> WireError:
    return WireError(Namespace.DYNAMODB, 400, message_key, retries)


def _service(message_key: MessageKey = MessageKey.LOWER, *, retries: bool = False) -> WireError:
    return WireError(Namespace.SERVICE, 400, message_key, retries)


_UPPER = MessageKey.UPPER

# Every error type DynamoDB answers with, by the type name after the `#`. The service's own errors
# are the exception shapes of its service model (botocore's dynamodb/2012-08-10/service-2.json),
# with the message member the model names; the framework's come from the Developer Guide's
# "Error handling with DynamoDB" and what DynamoDB is publicly reported to send.
WIRE_ERRORS: dict[str, WireError] = {
    # The request's form: Coral's deserialiser and constraint validator.
    "SerializationException": _service(_UPPER),
    "UnknownOperationException": _service(),
    "ValidationException": WireError(Namespace.VALIDATE, 400, MessageKey.LOWER, False),
    # Authentication and authorisation (SigV4), answered by Coral before the service runs.
    "MissingAuthenticationTokenException": _service(),
    "IncompleteSignatureException": _service(),
    "InvalidSignatureException": _service(),
    "UnrecognizedClientException": _service(),
    "AccessDeniedException": _service(_UPPER),
    # Throttling and availability.
    "ThrottlingException": _dynamodb(retries=True),
    "ServiceUnavailable": WireError(Namespace.AVAILABILITY, 503, MessageKey.LOWER, True),
    "ProvisionedThroughputExceededException": _dynamodb(retries=True),
    "RequestLimitExceeded": _dynamodb(retries=True),
    "LimitExceededException": _dynamodb(retries=True),
    "TransactionInProgressException": _dynamodb(_UPPER, retries=True),
    "InternalServerError": WireError(Namespace.DYNAMODB, 500, MessageKey.LOWER, True),
    # The service's own errors.
    "BackupInUseException": _dynamodb(),
    "BackupNotFoundException": _dynamodb(),
    "ConditionalCheckFailedException": _dynamodb(),
    "ContinuousBackupsUnavailableException": _dynamodb(),
    "DuplicateItemException": _dynamodb(),
    "ExportConflictException": _dynamodb(),
    "ExportNotFoundException": _dynamodb(),
    "GlobalTableAlreadyExistsException": _dynamodb(),
    "GlobalTableNotFoundException": _dynamodb(),
    "IdempotentParameterMismatchException": _dynamodb(_UPPER),
    "ImportConflictException": _dynamodb(),
    "ImportNotFoundException": _dynamodb(),
    "IndexNotFoundException": _dynamodb(),
    "InvalidExportTimeException": _dynamodb(),
    "InvalidRestoreTimeException": _dynamodb(),
    "ItemCollectionSizeLimitExceededException": _dynamodb(),
    "PointInTimeRecoveryUnavailableException": _dynamodb(),
    "PolicyNotFoundException": _dynamodb(),
    "ReplicaAlreadyExistsException": _dynamodb(),
    "ReplicaNotFoundException": _dynamodb(),
    "ReplicatedWriteConflictException": _dynamodb(),
    "ResourceInUseException": _dynamodb(),
    "ResourceNotFoundException": _dynamodb(),
    "TableAlreadyExistsException": _dynamodb(),
    "TableInUseException": _dynamodb(),
    "TableNotFoundException": _dynamodb(),
    "TransactionCanceledException": _dynamodb(_UPPER),
    "TransactionConflictException": _dynamodb(),
    # DynamoDB Streams' own (botocore's dynamodbstreams/2012-08-10 model), in the same namespace.
    "ExpiredIteratorException": _dynamodb(),
    "TrimmedDataAccessException": _dynamodb(),
    # Between dynalab's processes only (see StaleEpoch).
    "StaleEpoch": WireError(Namespace.INTERNAL, 503, MessageKey.LOWER, True),
    "NotPartitionLeader": WireError(Namespace.INTERNAL, 503, MessageKey.LOWER, True),
    "LeaseFenced": WireError(Namespace.INTERNAL, 503, MessageKey.LOWER, True),
}


class DynamoError(Exception):
    """An error that a DynamoDB client should see, named by its wire type (a `WIRE_ERRORS` key).

    A `message` of None is an error DynamoDB sends with its `__type` alone.
    """

    type_name: ClassVar[str] = "InternalServerError"

    def __init__(self, message: str | None) -> None:
        super().__init__(message)
        self.message = message

    @property
    def wire(self) -> WireError:
        return WIRE_ERRORS[self.type_name]

    @property
    def http_status(self) -> int:
        return self.wire.http_status

    def extra_fields(self) -> dict[str, Any]:
        """Fields beyond `__type` and the message that belong in the error body."""
        return {}


class ValidationError(DynamoError):
    type_name = "ValidationException"


class SerializationError(DynamoError):
    """The request body is not valid JSON or a member has the wrong JSON type."""

    type_name = "SerializationException"


class UnknownOperation(DynamoError):
    """No such operation; DynamoDB sends this with its type alone."""

    type_name = "UnknownOperationException"

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message)


class MissingAuthenticationToken(DynamoError):
    type_name = "MissingAuthenticationTokenException"


class IncompleteSignature(DynamoError):
    """An Authorization header that names SigV4 but lacks its parameters or a date."""

    type_name = "IncompleteSignatureException"


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


class DuplicateItem(DynamoError):
    """A PartiQL INSERT of an item whose key exists already."""

    type_name = "DuplicateItemException"

    def __init__(self, message: str = "Duplicate primary key exists in table") -> None:
        super().__init__(message)


class AccessDenied(DynamoError):
    """The caller may not act on the resource (a table ARN naming another account)."""

    type_name = "AccessDeniedException"


class ResourceNotFound(DynamoError):
    type_name = "ResourceNotFoundException"


class ResourceInUse(DynamoError):
    type_name = "ResourceInUseException"


class LimitExceeded(DynamoError):
    type_name = "LimitExceededException"


# ProvisionedThroughputExceededException's message when a global index cannot keep up (as the
# service writes it, without a final period).
GSI_THROTTLED = (
    "The level of configured provisioned throughput for one or more global secondary indexes of "
    "the table was exceeded. Consider increasing your provisioning level for the under-provisioned "
    "global secondary indexes with the UpdateTable API"
)


@dataclass(frozen=True, slots=True)
class ThrottlingReason:
    """One of ProvisionedThroughputExceededException's ThrottlingReasons (API Reference,
    ThrottlingReason): `reason` is ResourceType + OperationType + LimitType, as
    "TableWriteKeyRangeThroughputExceeded"; `resource` names the table or index throttled, by the
    name the nodes hold its partitions under (`core.catalog.index_storage_name` for an index).
    The router writes it as the resource's ARN, in the request's Region."""

    reason: str
    resource: str

    @classmethod
    def of(
        cls,
        resource: str,
        *,
        read: bool,
        provisioned: bool = False,
        limit: ThrottleLimit | None = None,
    ) -> ThrottlingReason:
        """The reason a partition of `resource` gives when its read or write bucket is empty:
        ProvisionedThroughputExceeded when the table's provisioned units are what ran out, and
        KeyRangeThroughputExceeded when the partition's own ceiling was (an on-demand table's
        partitions, or a provisioned one whose share reaches the 3,000 / 1,000 units cap), unless
        `limit` names another (an on-demand table's OnDemandThroughput)."""
        if limit is None:
            limit = ThrottleLimit.PROVISIONED if provisioned else ThrottleLimit.KEY_RANGE
        kind = "Index" if INDEX_RESOURCE_SEPARATOR in resource else "Table"
        operation = "Read" if read else "Write"
        return cls(f"{kind}{operation}{limit.value}", resource)


class ThrottleLimit(enum.StrEnum):
    """The LimitType a ThrottlingReason ends with (API Reference, ThrottlingReason)."""

    PROVISIONED = "ProvisionedThroughputExceeded"
    KEY_RANGE = "KeyRangeThroughputExceeded"
    MAX_ON_DEMAND = "MaxOnDemandThroughputExceeded"
    ACCOUNT_LIMIT = "AccountLimitExceeded"


# How an index's resource name joins its table's, as in an index ARN (".../table/T/index/I").
INDEX_RESOURCE_SEPARATOR = "/index/"


class ThroughputExceeded(DynamoError):
    type_name = "ProvisionedThroughputExceededException"
    # The member its reasons travel in, as the service model spells it for this type.
    reasons_key: ClassVar[str] = "ThrottlingReasons"

    def __init__(
        self,
        message: str = (
            "The level of configured provisioned throughput for the table was exceeded. "
            "Consider increasing your provisioning level with the UpdateTable API."
        ),
        reasons: tuple[ThrottlingReason, ...] = (),
    ) -> None:
        super().__init__(message)
        self.reasons = reasons

    def extra_fields(self) -> dict[str, Any]:
        if not self.reasons:
            return {}
        return {
            self.reasons_key: [
                {"reason": reason.reason, "resource": reason.resource} for reason in self.reasons
            ]
        }


# What DynamoDB answers when an on-demand table or index is throttled (as the service writes it,
# without a final period): applications see it as a ThrottlingException on their PutItem or Query.
ON_DEMAND_THROTTLED = (
    "Throughput exceeds the current capacity of your table or index. DynamoDB is automatically "
    "scaling your table or index so please try again shortly. If exceptions persist, check if "
    "you have a hot key: "
    "https://docs.aws.amazon.com/amazondynamodb/latest/developerguide/bp-partition-key-design.html"
)


class OnDemandThrottled(ThroughputExceeded):
    """A throttle of an on-demand table or index: DynamoDB answers ThrottlingException, not
    ProvisionedThroughputExceededException (there are no provisioned units to exceed), with the
    same ThrottlingReasons. It is a ThroughputExceeded everywhere inside (batches hand its keys
    back, transactions vote ThrottlingError, metrics count it as a throttle)."""

    type_name = "ThrottlingException"
    # The service model's ThrottlingException spells its member with a small t.
    reasons_key: ClassVar[str] = "throttlingReasons"

    def __init__(
        self, message: str = ON_DEMAND_THROTTLED, reasons: tuple[ThrottlingReason, ...] = ()
    ) -> None:
        super().__init__(message, reasons)


class ItemCollectionSizeLimitExceeded(DynamoError):
    type_name = "ItemCollectionSizeLimitExceededException"


class TransactionConflict(DynamoError):
    """A single-item write to an item a transaction has prepared (or a transaction step that met
    another's lock)."""

    type_name = "TransactionConflictException"


class TransactionCanceled(DynamoError):
    """TransactWriteItems or TransactGetItems did nothing; one reason per action, in request
    order (`core.transactions.cancellation`)."""

    type_name = "TransactionCanceledException"

    def __init__(self, message: str, reasons: list[dict[str, Any]] | None = None) -> None:
        super().__init__(message)
        self.reasons = reasons or []

    def extra_fields(self) -> dict[str, Any]:
        return {"CancellationReasons": self.reasons}


class TransactionInProgress(DynamoError):
    """A TransactWriteItems whose ClientRequestToken's transaction is still running."""

    type_name = "TransactionInProgressException"


class IdempotentParameterMismatch(DynamoError):
    """A ClientRequestToken reused within 10 minutes with another request."""

    type_name = "IdempotentParameterMismatchException"


class ServiceUnavailable(DynamoError):
    """A partition's node cannot be reached; SDKs retry this with backoff."""

    type_name = "ServiceUnavailable"


class InternalServerError(DynamoError):
    """A bug. Logged with the request id; the client sees a 500."""

    type_name = "InternalServerError"


class WriteOutcomeUnknown(ServiceUnavailable):
    """A write its partition's leader took (proposed to the group's log) and cannot tell the
    outcome of: deposed or cut off before the entry committed, or past the commit's bound. The
    entry may yet commit under the next leader, so the write may or may not apply.

    To the node's callers it is ServiceUnavailable: they retry where a retry is safe, as for a
    node that does not answer. But it is never reported as not applied: a batch does not list
    it among its unprocessed requests (`router.items`), and a client sees what DynamoDB answers
    such a case with, a 500 InternalServerError saying so. It crosses the node protocol under a
    name of its own (`rpc.codec`), not a DynamoDB one.
    """

    type_name = "InternalServerError"
    node_wire_name: ClassVar[str] = "dynalab.WriteOutcomeUnknown"


class OutcomeUnknown(InternalServerError):
    """A write was sent to its node and no answer came back: it may or may not have been applied.

    DynamoDB answers such a case with InternalServerError, after which "the item may or may not
    have been updated"; SDKs retry it, and a client that must not apply a write twice uses a
    condition. Raised by the router's transport only (never crosses the node protocol).
    """


class StaleEpoch(DynamoError):
    """Internal between node and router: the request named an older partition epoch than the node's.

    Never reaches a client: the router refreshes its partition map and retries.
    """

    type_name = "StaleEpoch"


class NotPartitionLeader(DynamoError):
    """Internal between node and router: the partition's replica on this node does not lead its
    replication group, so it takes no write and no strongly consistent read. `leader` is the
    node this one believes leads (None: it knows none yet, an election is under way).

    Never reaches a client: the router retries at the leader named, or at another replica."""

    type_name = "NotPartitionLeader"

    def __init__(self, message: str | None, leader: str | None = None) -> None:
        super().__init__(message)
        self.leader = leader

    def extra_fields(self) -> dict[str, Any]:
        return {} if self.leader is None else {"leader": self.leader}


class LeaseUnavailable(ServiceUnavailable):
    """Internal to a node: a strongly consistent read reached the leader of a replicated
    partition while it holds no lease (just elected, or its group idle); the node confirms its
    leadership by a round of heartbeats (read-index) and then serves it. Should it reach a
    router, it is ServiceUnavailable, which is retried."""


class LeaseFenced(DynamoError):
    """Internal between a GSI replicator and an index partition: the replicator's lease on the
    source partition is older than one the index partition has seen (`core.gsi_leases`); another
    replicator holds it now. Never reaches a client."""

    type_name = "LeaseFenced"


class ExpiredIterator(DynamoError):
    """DynamoDB Streams: a shard iterator used more than 15 minutes after it was handed out."""

    type_name = "ExpiredIteratorException"


class ChangeLogTrimmed(DynamoError):
    """A change-feed reader asked for records the partition's log no longer holds.

    The log keeps a record until every registered consumer has checkpointed past it, but never more
    than its hard bound of records; a consumer that fell further behind must re-snapshot the
    partition and follow from `first_retained_seq - 1`. It is DynamoDB Streams' answer to a read
    before the oldest record of a shard, which the Streams API sends to clients without
    `first_retained_seq` (a node's refusal carries it only between dynalab's processes).
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
        IncompleteSignature,
        ConditionalCheckFailed,
        ResourceNotFound,
        ResourceInUse,
        LimitExceeded,
        ThroughputExceeded,
        OnDemandThrottled,
        ItemCollectionSizeLimitExceeded,
        TransactionConflict,
        TransactionCanceled,
        TransactionInProgress,
        IdempotentParameterMismatch,
        ServiceUnavailable,
        InternalServerError,
        StaleEpoch,
        NotPartitionLeader,
        LeaseFenced,
        ExpiredIterator,
        ChangeLogTrimmed,
    )
}

assert ERROR_TYPES.keys() <= WIRE_ERRORS.keys(), "every error type has a row in WIRE_ERRORS"
