"""TransactWriteItems and TransactGetItems: the router as transaction coordinator and resolver.

A TransactWriteItems is read and checked whole before anything is sent (the service model's
constraints, then each action's expressions, keys and sizes, then DynamoDB's rules across actions:
one action per item, 4 MB), placed on its partitions, then coordinated by the transaction machine
(`core.machines.transaction`), which the one driver (`rpc.machines.Driver`) runs with this
module's effects (`_Coordination`):

1. **begin**: the ledger (the durable record) is written PENDING, naming every participant
   partition, on the partition of the first action's item (with a ClientRequestToken: the
   partition of the first action's table that the token's hash falls in, so a retry through any
   router finds it). The token's rules (a committed transaction answered again, another request
   refused, one running refused) are the ledger's (`core.transactions.begin`).
2. **prepare**: one `txn_prepare` per participant partition, concurrently. Each checks its
   actions' conditions and locks their items, all or none; a partition that split or moved since
   the map was read has its actions placed again.
3. **decide**: COMMITTED if every action voted yes, else ABORTED, made durable on the ledger by a
   compare-and-set; a resolver may have aborted it first, and then that decision stands.
4. **apply**: `txn_apply` to every node a prepare was sent to (commit or release), then **finish**
   the ledger.

The client's answer is read from the record the machine ends with (`_answer`). A router killed
anywhere leaves either no ledger (nothing was prepared), a PENDING one (which a resolver aborts
once `TRANSACTION_RESOLVE_SECONDS` have passed), or a decided one (which a resolver applies).
The resolver (`resolve_forever`) runs in every router: every
`TRANSACTION_RESOLVE_INTERVAL_SECONDS` it asks each node (`txn_sweep`) for locks and ledgers left
behind, and resolves each by loading its ledger and stepping the machine RESTARTED (`resolve`).
So every transaction ends committed everywhere or rolled back everywhere, and no item stays
locked longer than the resolve time plus a sweep. The driver's crash points are the router's
`crash_points`: the simulator's, or `rpc.machines.HoldPoints` in a real router
(`DYNALAB_HOLD_AT=transaction:<state>`).

TransactGetItems reads its items per partition (`txn_get`), and reads them again, asking each
node whether any of the items was written since the first round's change seq: the answer is the
second round's when no item was locked in either round and none was written between them, so the
items were all as returned at one instant between the rounds (a serializable snapshot), however
busy their partitions were with other items; otherwise it tries again, a bounded number of times,
then cancels with TransactionConflict for the items that kept changing.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import orjson
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from core import expressions, limits, schema, values
from core import transactions as txn
from core.capacity import (
    ConsumedCapacity,
    ReadConsistency,
    UnitKind,
    read_units,
)
from core.catalog import PartitionDef
from core.errors import (
    DynamoError,
    InternalServerError,
    OutcomeUnknown,
    ServiceUnavailable,
    StaleEpoch,
    ValidationError,
)
from core.indexes import size_estimate_range_gb
from core.keycodec import encode_storage_key
from core.keys import KeyAttributeError
from core.machines import RESTARTED, STARTED, Effect, Event
from core.machines import transaction as tm
from core.retry import TRANSACT_GET, TRANSACTION_RECORD
from core.size import check_item_size, item_size_bytes
from router.context import RouterContext
from router.items import (
    _check_index_keys,
    _global_key_schemas,
    _write_expressions,
    capacity_mode,
)
from router.requests import (
    RETURN_ITEM_COLLECTION_METRICS,
    RETURN_VALUES_ON_FAILURE,
    RequestReader,
    read_common,
)
from router.routing import Route
from rpc import ops
from rpc.machines import Driver, Handler
from rpc.transactions import (
    TxnApplyPayload,
    TxnGetPayload,
    TxnPreparePayload,
    TxnRecordPayload,
)

logger = logging.getLogger(__name__)

_ACTIONS = ("ConditionCheck", "Put", "Delete", "Update")
# The node's op for each action.
_ACTION_OPS = {
    "ConditionCheck": "check",
    "Put": ops.PUT,
    "Delete": ops.DELETE,
    "Update": ops.UPDATE,
}
# ClientRequestToken: 1 to 36 characters (the service model).
_TOKEN_CHARS_MAX = 36
# About how long a transaction left behind stays unresolved: its record becomes resolvable, then
# the next sweep finds it.
_SETTLED_SECONDS = limits.TRANSACTION_RESOLVE_SECONDS + limits.TRANSACTION_RESOLVE_INTERVAL_SECONDS


@dataclasses.dataclass(slots=True)
class _Action:
    """One action of a transaction, checked and ready to send."""

    table_name: str
    table: Route
    storage_key: bytes
    op: str
    body: dict[str, Any]
    size: int  # The item's size (a Put) or its key's, toward the request's 4 MB.
    partition: PartitionDef | None = None
    # The action's own ValidationError, which DynamoDB reports as its cancellation reason rather
    # than refusing the request (None: it goes to its participant to vote on).
    refused: txn.Vote | None = None


def _refused(table_name: str, table: Route, error: ValidationError, size: int = 0) -> _Action:
    """An action that refused itself, its reason `error`'s message (`_Action.refused`)."""
    vote = txn.Vote(txn.Code.VALIDATION_ERROR, error.message)
    return _Action(table_name, table, b"", "", {}, size, refused=vote)


@dataclasses.dataclass
class Counters:
    """What this router's transactions came to, for `/metrics`."""

    outcomes: dict[str, int] = dataclasses.field(default_factory=dict)
    conflicts: int = 0
    resolved: dict[str, int] = dataclasses.field(default_factory=dict)
    in_doubt: dict[str, float] = dataclasses.field(default_factory=dict)  # attempt -> first seen
    # The coordinations (and resolutions) in flight, by run: the state each has reached.
    running: dict[object, tm.TxnState] = dataclasses.field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1


COUNTERS = Counters()


class MetricsCollector:
    """This router's transaction counters for `/metrics` (a prometheus-client collector)."""

    def __init__(self, now: float) -> None:
        self.now = now

    def collect(self) -> Iterator[Metric]:
        outcomes = CounterMetricFamily(
            "dynalab_transactions",
            "TransactWriteItems this router coordinated, by outcome (committed, cancelled, "
            "replayed for a ClientRequestToken, unknown)",
            labels=["outcome"],
        )
        for outcome, count in sorted(COUNTERS.outcomes.items()):
            outcomes.add_metric([outcome], count)
        yield outcomes
        yield CounterMetricFamily(
            "dynalab_transaction_conflicts",
            "Transactions cancelled with a TransactionConflict reason",
            value=COUNTERS.conflicts,
        )
        resolved = CounterMetricFamily(
            "dynalab_transactions_resolved",
            "Transactions left behind that this router's resolver finished, by decision",
            labels=["decision"],
        )
        for decision, count in sorted(COUNTERS.resolved.items()):
            resolved.add_metric([decision], count)
        yield resolved
        running = GaugeMetricFamily(
            "dynalab_transactions_running",
            "Transactions this router is coordinating or resolving, by the state reached",
            labels=["state"],
        )
        for state in tm.TxnState:
            if state not in tm.FINAL:
                count = sum(1 for reached in COUNTERS.running.values() if reached is state)
                running.add_metric([state.value.lower()], count)
        yield running
        yield GaugeMetricFamily(
            "dynalab_transactions_in_doubt",
            "Transactions left behind that the resolver found and has not finished",
            value=len(COUNTERS.in_doubt),
        )
        oldest = min(COUNTERS.in_doubt.values(), default=self.now)
        yield GaugeMetricFamily(
            "dynalab_transactions_in_doubt_age_seconds",
            "How long the oldest of them has been in doubt since this router first saw it",
            value=max(0.0, self.now - oldest),
        )


# Reading a TransactWriteItems --------------------------------------------------------------------


def _read_write_request(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The constraint pass over TransactWriteItems: [(action kind, its structure)]."""
    reader = RequestReader(body)
    items = reader.array(
        "TransactItems", required=True, min_length=1, max_length=limits.TRANSACT_ITEMS_MAX
    )
    reader.string("ClientRequestToken", min_length=1, max_length=_TOKEN_CHARS_MAX)
    read_common(reader)
    reader.string("ReturnItemCollectionMetrics", enum=RETURN_ITEM_COLLECTION_METRICS)
    actions: list[tuple[str, dict[str, Any]]] = []
    for number, entry in enumerate(items or (), start=1):
        where = f"{reader.where('TransactItems')}.{number}.member"
        nested = reader.nested(entry, where)
        present = [kind for kind in _ACTIONS if nested.present(kind)]
        for kind in present:
            action = nested.nested(entry[kind], nested.where(kind))
            action.table_name(required=True)
            if kind == "Put":
                action.attribute_map("Item", required=True)
            else:
                action.attribute_map("Key", required=True)
            if kind == "Update":
                action.string("UpdateExpression", required=True)
            if kind == "ConditionCheck":
                action.string("ConditionExpression", required=True)
            action.string("ReturnValuesOnConditionCheckFailure", enum=RETURN_VALUES_ON_FAILURE)
        actions.append((present[0] if len(present) == 1 else "", entry))
    reader.check()
    for kind, _ in actions:
        if not kind:
            raise ValidationError(txn.ONE_ACTION)
    return [(kind, entry[kind]) for kind, entry in actions]


async def _checked_action(ctx: RouterContext, kind: str, member: dict[str, Any]) -> _Action:
    """One action checked as its single-item operation checks it, then against its table.

    Its item's values and its key against the table's key schema (a missing, mistyped or
    non-scalar key attribute, a wrongly typed index key) are the action's own: DynamoDB answers
    them as that action's ValidationError cancellation reason, each in its place. Its
    expressions, its item's size and an empty or oversized key value are the request's: refused
    whole, as DynamoDB refuses them (as captured against the service by a public emulator's
    compatibility tests)."""
    on_failure = member.get("ReturnValuesOnConditionCheckFailure") == "ALL_OLD"
    compiled = _write_expressions(
        member, update_text=member.get("UpdateExpression") if kind == "Update" else None
    )
    table_name = member["TableName"]
    if kind == "Put":
        try:
            item = values.validate_item(member["Item"])
        except ValidationError as error:
            return _refused(table_name, await ctx.table(table_name), error)
        item_bytes = size = check_item_size(item)
        table = await ctx.table(table_name)
        try:
            _, partition_key, sort_key = schema.extract_key(item, table.key_shape)
        except KeyAttributeError as error:
            return _refused(table_name, table, error, size)
        try:
            _check_index_keys(item, table)
        except ValidationError as error:
            return _refused(table_name, table, error, size)
        body = ops.PutPayload(
            item,
            item_bytes,
            compiled.condition,
            compiled.names,
            compiled.values,
            return_on_failure=on_failure,
            global_indexes=_global_key_schemas(table),
        ).to_json()
    else:
        try:
            key = values.validate_item(member["Key"], where="Key")
        except ValidationError as error:
            return _refused(table_name, await ctx.table(table_name), error)
        size = item_size_bytes(key)
        table = await ctx.table(table_name)
        try:
            partition_key, sort_key = schema.validate_key(key, table.key_shape)
        except KeyAttributeError as error:
            return _refused(table_name, table, error, size)
        if kind == "Update":
            body = ops.UpdatePayload(
                key,
                compiled.update,
                compiled.condition,
                compiled.names,
                compiled.values,
                return_on_failure=on_failure,
                global_indexes=_global_key_schemas(table),
            ).to_json()
        elif kind == "Delete":
            body = ops.DeletePayload(
                key,
                compiled.condition,
                compiled.names,
                compiled.values,
                "NONE",
                on_failure,
                _global_key_schemas(table),
            ).to_json()
        else:
            body = {
                "key": key,
                "condition": compiled.condition,
                "names": compiled.names,
                "values": compiled.values,
                "return_on_failure": on_failure,
            }
    return _Action(
        table_name,
        table,
        encode_storage_key(partition_key, sort_key),
        _ACTION_OPS[kind],
        body,
        size,
    )


# The coordinator ---------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class _Home:
    """Where a transaction's record is: a partition of a table."""

    table: Route
    partition: PartitionDef

    def ref(self) -> list[str]:
        return [self.table.id, self.partition.id]


async def _record_call(
    ctx: RouterContext, home: _Home, payload: TxnRecordPayload
) -> txn.Record | None:
    reply = await ctx.call_partition(
        home.table,
        home.partition,
        ops.TXN_RECORD,
        payload.to_json(),
        start=txn.record_key(payload.record_id),
    )
    record = reply["record"]
    return None if record is None else txn.Record.from_json(record)


async def _retried(
    ctx: RouterContext, step: Callable[[], Awaitable[txn.Record | None]]
) -> txn.Record | None:
    """A record step that is safe to repeat (decide, finish, resolve, read), retried while its
    node does not answer (`core.retry.TRANSACTION_RECORD`); the last failure is raised."""
    started = ctx.sources.clock()
    for attempt in range(TRANSACTION_RECORD.attempts_max):
        try:
            return await step()
        except (ServiceUnavailable, OutcomeUnknown):
            pause = TRANSACTION_RECORD.pause(attempt, _since(ctx, started), 0.0)
            if pause is None:
                raise
            await asyncio.sleep(pause)
    raise AssertionError("unreachable")


def _since(ctx: RouterContext, started: float) -> float:
    """Seconds since `started` on the router's wall clock, which may step back: never below 0."""
    return max(0.0, ctx.sources.clock() - started)


class _LedgerEffects:
    """The effects of the transaction machine (`core.machines.transaction`) that the ledger and
    the participants' nodes carry out, for one run of the driver: by a coordinator (with the
    prepare, `_Coordination`) or by a resolver. `persist` keeps the run's record in this
    router's table of coordinations in flight (`/metrics`); the ledger, written by the effects,
    is what outlives the router."""

    def __init__(self, ctx: RouterContext, home: _Home) -> None:
        self.ctx = ctx
        self.home = home

    def handlers(self) -> dict[str, Handler[tm.TxnRecord]]:
        return {
            "begin": self.begin,
            "decide": self.decide,
            "resolve": self.decide,
            "apply": self.apply,
            "finish": self.finish,
        }

    async def run(
        self, record: tm.TxnRecord, event: Event
    ) -> tuple[tm.TxnRecord, Exception | None]:
        """Drive `record` with `event` until it ends (`rpc.machines.Driver.drive`); however the
        run ends (a cancelled request too), it leaves the table of coordinations in flight."""
        driver = Driver(
            tm.MACHINE, self.handlers(), self.persist, self.ctx.crash_points, self.ctx.sources.clock
        )
        try:
            return await driver.drive(record, event)
        finally:
            COUNTERS.running.pop(self, None)

    async def persist(self, record: tm.TxnRecord) -> None:
        COUNTERS.running[self] = record.state

    async def begin(self, record: tm.TxnRecord, effect: Effect) -> Event:
        """Write the ledger PENDING (or learn what a ClientRequestToken's ledger holds)."""
        payload = TxnRecordPayload("begin", record.id, record=record.ledger().to_json())
        ledger = await _record_call(self.ctx, self.home, payload)
        assert ledger is not None
        kind = tm.REPLAYED if ledger.state is txn.State.COMMITTED else tm.BEGUN
        return Event(kind, {"attempt": ledger.attempt})

    async def decide(self, record: tm.TxnRecord, effect: Effect) -> Event:
        """Ask the ledger for the record's decision (`decide`), or, a resolver, for an abort of a
        ledger old enough (`resolve`); the decision the ledger holds for the attempt."""
        if effect.step == "decide":
            payload = TxnRecordPayload(
                "decide", record.id, attempt=record.attempt, outcome=record.asked.value
            )
        else:
            payload = TxnRecordPayload("resolve", record.id, attempt=record.attempt)
        ledger = await _retried(self.ctx, lambda: _record_call(self.ctx, self.home, payload))
        if ledger is None and effect.step == "decide":
            raise InternalServerError(f"The record of transaction {record.attempt_id} disappeared")
        held = ledger is not None and ledger.attempt == record.attempt
        return Event(tm.DECIDED, {"state": ledger.state.value if held and ledger else None})

    async def apply(self, record: tm.TxnRecord, effect: Effect) -> Event:
        """Commit or release the attempt on every node, and at every replicated partition's
        leader, a prepare was sent to."""
        commit = record.decision is txn.State.COMMITTED
        places = _Places(record.nodes, record.partitions)
        if not await _apply_everywhere(self.ctx, record.attempt_id, places, commit):
            raise ServiceUnavailable(
                f"Transaction {record.attempt_id}: a participant did not apply its decision"
            )
        return Event(tm.APPLIED)

    async def finish(self, record: tm.TxnRecord, effect: Effect) -> Event:
        payload = TxnRecordPayload("finish", record.id, attempt=record.attempt)
        await _retried(self.ctx, lambda: _record_call(self.ctx, self.home, payload))
        return Event(tm.FINISHED)


class _Coordination(_LedgerEffects):
    """One TransactWriteItems' run: the ledger's effects and the prepare of its `actions`,
    placed on their partitions (`groups`: the actions' indexes per participant). What the
    client is answered besides the record's votes is kept here: each action's cost, and the
    errors of participants that refused the request itself."""

    def __init__(
        self,
        ctx: RouterContext,
        home: _Home,
        actions: Sequence[_Action],
        groups: Sequence[list[int]],
    ) -> None:
        super().__init__(ctx, home)
        self.actions = actions
        self.groups = groups
        self.costs: list[txn.Cost | None] = [None] * len(actions)
        self.errors: list[DynamoError] = []

    def handlers(self) -> dict[str, Handler[tm.TxnRecord]]:
        return {**super().handlers(), "prepare": self.prepare}

    async def prepare(self, record: tm.TxnRecord, effect: Effect) -> Event:
        """Prepare every participant concurrently: the votes in request order (None where a
        participant did not answer), and every node a prepare was sent to (one whose answer was
        lost may have locked items there, so the decision is applied on each)."""
        votes: list[txn.Vote | None] = [None] * len(self.actions)
        touched = set(record.nodes)
        touched_partitions = set(record.partitions)
        ctx, actions = self.ctx, self.actions

        async def prepare_on(table: Route, partition: PartitionDef, indexes: list[int]) -> bool:
            """Prepare `indexes` on one partition; False if the partition has split or moved
            since the map was read (nothing was prepared: the items must be placed again)."""
            if partition.replicas:
                touched_partitions.add((table.id, partition.id))
            else:
                touched.add(partition.node)
            payload = TxnPreparePayload(
                record.attempt_id,
                self.home.ref(),
                [{"op": actions[i].op, "body": actions[i].body} for i in indexes],
            )
            try:
                reply = await ctx.call_partition(
                    table,
                    partition,
                    ops.TXN_PREPARE,
                    payload.to_json(),
                    timeout=limits.TRANSACTION_PREPARE_SECONDS,
                    follow=False,
                )
            except StaleEpoch:
                return False
            except DynamoError as error:
                # No vote: the transaction aborts. An unknown outcome may have locked the items;
                # the release (or a resolver's) frees them.
                logger.info(
                    "transaction %s: a prepare failed: %s", record.attempt_id, error.type_name
                )
                if not isinstance(error, ServiceUnavailable | OutcomeUnknown):
                    self.errors.append(error)
                return True
            for number, index in enumerate(indexes):
                votes[index] = txn.Vote.from_json(reply["votes"][number])
                if reply["costs"]:
                    self.costs[index] = txn.Cost.from_json(reply["costs"][number])
            return True

        async def prepare(indexes: list[int]) -> None:
            """Prepare one participant's actions; if its partition split (or moved) since the map
            was read, place them again on the catalog's current partitions and prepare those."""
            table = actions[indexes[0]].table
            partition = actions[indexes[0]].partition
            assert partition is not None
            placed = [(table, partition, indexes)]
            for _ in range(limits.STALE_EPOCH_ATTEMPTS_MAX):
                done = await asyncio.gather(*(prepare_on(*where) for where in placed))
                stale = [
                    i for where, ok in zip(placed, done, strict=True) if not ok for i in where[2]
                ]
                if not stale:
                    return
                try:
                    table = await ctx.table(actions[stale[0]].table_name)
                except DynamoError:
                    return  # The table is gone: no vote, the transaction aborts.
                if table.id != actions[stale[0]].table.id:
                    return
                regrouped: dict[str, tuple[PartitionDef, list[int]]] = {}
                for index in stale:
                    found = table.partitions.lookup(actions[index].storage_key)
                    regrouped.setdefault(found.id, (found, []))[1].append(index)
                placed = [(table, found, moved) for found, moved in regrouped.values()]
            logger.info(
                "transaction %s: its partitions kept changing while it prepared", record.attempt_id
            )

        await asyncio.gather(*(prepare(indexes) for indexes in self.groups))
        # An action that refused itself votes so, in its place: the transaction aborts, and its
        # others' votes (a failed condition, say) are each action's reason, as DynamoDB's are.
        for index, action in enumerate(actions):
            if action.refused is not None:
                votes[index] = action.refused
        return Event(
            tm.VOTED,
            {
                "votes": [None if vote is None else vote.to_json() for vote in votes],
                "nodes": sorted(touched),
                "partitions": sorted([*ref] for ref in touched_partitions),
            },
        )


async def transact_write_items(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """TransactWriteItems: up to 100 actions on items of any tables, all applied or none. The
    request is read and placed here; its coordination is the transaction machine's, run by the
    driver, and the answer is read from the record it ends with."""
    members = _read_write_request(body)
    actions = [await _checked_action(ctx, kind, member) for kind, member in members]
    placed = [index for index, action in enumerate(actions) if action.refused is None]
    txn.check_distinct((actions[i].table.id, actions[i].storage_key) for i in placed)
    txn.check_request_bytes(sum(action.size for action in actions))
    if not placed:
        # Every action refused itself: nothing to prepare, the transaction is cancelled.
        raise txn.cancellation([action.refused or txn.YES for action in actions])
    groups: dict[tuple[str, str], list[int]] = {}
    for index in placed:
        action = actions[index]
        action.partition = action.table.partitions.lookup(action.storage_key)
        groups.setdefault((action.table.id, action.partition.id), []).append(index)
    participants = []
    for indexes in groups.values():
        action = actions[indexes[0]]
        assert action.partition is not None
        participants.append(
            txn.Participant(
                action.table.id,
                action.partition.id,
                action.partition.epoch,
                action.partition.node,
                bool(action.partition.replicas),
            )
        )
    token = body.get("ClientRequestToken")
    first = actions[placed[0]]
    assert first.partition is not None
    if token is None:
        record_id = txn.transaction_id(first.storage_key, ctx.sources.new_id())
    else:
        record_id = txn.token_transaction_id(token)
    # The record is kept by the partition holding its key, so a retry through any router, and
    # after a split the child that took it, finds it.
    home = _Home(first.table, first.table.partitions.lookup(txn.record_key(record_id)))
    coordination = _Coordination(ctx, home, actions, list(groups.values()))
    started = tm.new(
        record_id,
        (home.table.id, home.partition.id),
        txn.request_digest(body),
        token is not None,
        participants,
        len(actions),
    )
    record, failure = await coordination.run(started, Event(STARTED))
    return _answer(body, actions, coordination, record, failure)


def _answer(
    body: dict[str, Any],
    actions: Sequence[_Action],
    coordination: _Coordination,
    record: tm.TxnRecord,
    failure: Exception | None,
) -> dict[str, Any]:
    """The client's answer to a transaction whose machine ended with `record`, `failure` the first
    failure on the way: the begin's refusal, an unknown outcome, a cancellation, or the reply."""
    capacity = ConsumedCapacity(transactional=True)
    if record.replayed:
        # The token's transaction committed before: answered again, nothing written.
        COUNTERS.count("replayed")
        return _write_reply(body, capacity, actions)
    if record.attempt == 0:
        assert failure is not None, "a transaction not begun ends on the begin's failure"
        raise failure
    if record.decision is None:
        if failure is not None and not isinstance(failure, ServiceUnavailable | OutcomeUnknown):
            raise failure
        COUNTERS.count("unknown")
        raise OutcomeUnknown(
            "The transaction's decision could not be recorded; it may or may not have been "
            f"applied, and is resolved within about {_SETTLED_SECONDS:.0f} s"
        )
    if record.state is tm.TxnState.LEFT:
        logger.info("transaction %s: %s left to a resolver", record.attempt_id, record.error)
    if record.decision is txn.State.ABORTED:
        COUNTERS.count("cancelled")
        if coordination.errors:
            raise coordination.errors[0]
        cancellation = tm.reasons(record)
        if any(r["Code"] == txn.Code.TRANSACTION_CONFLICT.value for r in cancellation.reasons):
            COUNTERS.conflicts += 1
        raise cancellation
    COUNTERS.count("committed")
    costs = coordination.costs
    for index, action in enumerate(actions):
        cost = costs[index] or txn.Cost(0.0)
        capacity.add_table(action.table_name, cost.units, UnitKind.WRITE)
        for index_name, units in cost.index_units.items():
            capacity.add_local_index(action.table_name, index_name, units, UnitKind.WRITE)
        for index_name, units in cost.global_index_units.items():
            capacity.add_global_index(action.table_name, index_name, units, UnitKind.WRITE)
    reply = _write_reply(body, capacity, actions)
    metrics = _collection_metrics(body, actions, costs)
    if metrics:
        reply["ItemCollectionMetrics"] = metrics
    return reply


def _write_reply(
    body: dict[str, Any], capacity: ConsumedCapacity, actions: Sequence[_Action]
) -> dict[str, Any]:
    """TransactWriteItems' answer: ConsumedCapacity per table when asked for (a token's replay
    consumed nothing, and says so)."""
    for action in actions:
        capacity.add_table(action.table_name, 0.0, UnitKind.WRITE)
    rendered = capacity.render_all(capacity_mode(body))
    return {} if rendered is None else {"ConsumedCapacity": rendered}


def _collection_metrics(
    body: dict[str, Any], actions: Sequence[_Action], costs: Sequence[txn.Cost | None]
) -> dict[str, list[dict[str, Any]]]:
    """ItemCollectionMetrics for ReturnItemCollectionMetrics SIZE: per table with local indexes,
    one entry per item collection the transaction's Put, Update and Delete actions changed, with
    its size once they all applied (as the participants measured it at prepare)."""
    if body.get("ReturnItemCollectionMetrics") != "SIZE":
        return {}
    sizes: dict[tuple[str, bytes], tuple[dict[str, Any], int]] = {}
    for action, cost in zip(actions, costs, strict=True):
        if action.op == "check" or cost is None or cost.collection_bytes is None:
            continue
        key_name = action.table.key_shape.partition_key.name
        member = action.body["item"] if action.op == ops.PUT else action.body["key"]
        collection_key = {key_name: member[key_name]}
        sizes[action.table_name, orjson.dumps(collection_key)] = (
            collection_key,
            cost.collection_bytes,
        )
    metrics: dict[str, list[dict[str, Any]]] = {}
    for (table_name, _), (collection_key, size_bytes) in sizes.items():
        metrics.setdefault(table_name, []).append(
            {
                "ItemCollectionKey": collection_key,
                "SizeEstimateRangeGB": size_estimate_range_gb(size_bytes),
            }
        )
    return metrics


@dataclasses.dataclass(frozen=True, slots=True)
class _Places:
    """Where a decision is applied: on nodes (everything of the attempt there), and at the
    leaders of replicated partitions (table id, partition id), each of which keeps its part of
    the attempt in its own group."""

    nodes: frozenset[str]
    partitions: frozenset[tuple[str, str]]


async def _apply_everywhere(
    ctx: RouterContext, attempt: str, places: _Places, commit: bool
) -> bool:
    """Commit or release `attempt` at every place; True when every one answered."""
    payload = TxnApplyPayload(attempt, commit).to_json()

    async def retried(where: str, call: Callable[[], Awaitable[Any]]) -> bool:
        started = ctx.sources.clock()
        for number in range(TRANSACTION_RECORD.attempts_max):
            try:
                await call()
                return True
            except DynamoError as error:
                logger.info("transaction %s: apply on %s failed: %s", attempt, where, error)
                pause = TRANSACTION_RECORD.pause(number, _since(ctx, started), 0.0)
                if pause is None:
                    break
                await asyncio.sleep(pause)
        return False

    def on_node(node: str) -> Awaitable[bool]:
        return retried(
            node,
            lambda: ctx.control(node, ops.TXN_APPLY, payload, limits.NODE_CALL_SECONDS_MAX),
        )

    def at_partition(table_id: str, partition_id: str) -> Awaitable[bool]:
        return retried(
            f"partition {partition_id}",
            lambda: _call_group(ctx, table_id, partition_id, ops.TXN_APPLY, payload),
        )

    results = await asyncio.gather(
        *(on_node(node) for node in sorted(places.nodes)),
        *(at_partition(*ref) for ref in sorted(places.partitions)),
    )
    return all(results)


async def _call_group(
    ctx: RouterContext, table_id: str, partition_id: str, op: str, body: dict[str, Any]
) -> None:
    """Send `op` addressed to a replicated partition (at its leader), or, if it has split, to
    each of its serving descendants, which took its rows. A partition the catalog no longer has
    (its table deleted) has nothing left to do: answered as done."""
    homes = _descendants(ctx, table_id, partition_id)
    if not homes:
        await ctx.refresh()
        homes = _descendants(ctx, table_id, partition_id)
    for home in homes:
        try:
            await ctx.call_partition(home.table, home.partition, op, body, follow=False)
        except StaleEpoch:
            if _descendants(ctx, table_id, partition_id):
                raise  # (The catalog was read again: the next try addresses what it says.)


# The resolver ------------------------------------------------------------------------------------


def _descendants(ctx: RouterContext, table_id: str, partition_id: str) -> list[_Home]:
    """The cached table's serving partitions that are partition `partition_id` or descend from
    it (the catalog keeps a split's parent while a child names it)."""
    found = []
    for table in ctx.tables.values():
        if table.id != table_id:
            continue
        parents = {
            partition.id: partition.parent
            for partition in (*table.record.retired, *table.partition_defs)
        }
        for partition in table.partition_defs:
            ancestor: str | None = partition.id
            while ancestor is not None:
                if ancestor == partition_id:
                    found.append(_Home(table, partition))
                    break
                ancestor = parents.get(ancestor)
    return found


def _record_home(
    ctx: RouterContext, table_id: str, partition_id: str, record_id: str
) -> _Home | None:
    """Where record `record_id`, kept by partition `partition_id` when its part was prepared,
    is now: that partition, or the descendant of it whose range holds the record's key
    (`core.transactions.record_key`); None if the catalog has none."""
    homes = _descendants(ctx, table_id, partition_id)
    key = txn.record_key(record_id)
    holding = [home for home in homes if home.partition.holds(key)]
    found = holding or homes
    return found[0] if found else None


async def resolve(
    ctx: RouterContext,
    record_id: str,
    attempt: int,
    home: _Home,
    holders: frozenset[str] = frozenset(),
    held: frozenset[tuple[str, str]] = frozenset(),
) -> bool:
    """Finish an attempt left behind: load its ledger, rebuild the coordinator's record from it
    (`core.machines.transaction.from_ledger`) and step it RESTARTED. A PENDING ledger old enough
    is aborted; the decision is applied on every participant's node or partition, on `holders`
    (the nodes that reported its locks: a participant that split and moved after the ledger was
    written is not in it) and at `held` (the replicated partitions that reported its locks), or,
    with no ledger of the attempt, released on every node and at `held`; then the ledger is
    finished. True when done; False for a ledger whose coordinator still has time; the failure
    that stopped it otherwise."""
    ledger = await _retried(
        ctx, lambda: _record_call(ctx, home, TxnRecordPayload("read", record_id))
    )
    known = ledger is not None and ledger.attempt == attempt
    nodes = holders if known else frozenset(ctx.clients)
    loaded = tm.from_ledger(
        ledger, record_id, attempt, (home.table.id, home.partition.id), nodes, held
    )
    record, failure = await _LedgerEffects(ctx, home).run(loaded, Event(RESTARTED))
    if record.state is not tm.TxnState.DONE:
        if isinstance(failure, DynamoError):
            raise failure
        return False  # A PENDING ledger whose coordinator still has time.
    assert record.decision is not None
    outcome = "committed" if record.decision is txn.State.COMMITTED else "aborted"
    COUNTERS.resolved[outcome] = COUNTERS.resolved.get(outcome, 0) + 1
    logger.info("transaction %s resolved: %s", record.attempt_id, outcome)
    return True


def _held_by(ctx: RouterContext, node: str) -> _Home | None:
    """A cached partition of one copy that `node` holds, or None (a replicated partition is
    addressed at its leader, which may be another node)."""
    for table in ctx.tables.values():
        for partition in table.partition_defs:
            if partition.node == node and not partition.replicas:
                return _Home(table, partition)
    return None


async def _located(
    ctx: RouterContext, table_id: str, partition_id: str, record_id: str
) -> _Home | None:
    """`_record_home`, reading the catalog again for a table this router has not read yet (its
    cache fills on use)."""
    home = _record_home(ctx, table_id, partition_id, record_id)
    if home is None:
        await ctx.refresh()
        home = _record_home(ctx, table_id, partition_id, record_id)
    return home


async def resolve_once(ctx: RouterContext) -> int:
    """One round: ask every node for what was left behind and resolve it; the number resolved.
    A node speaks for the replicated partitions it leads: their locks and records, and those
    with rows done with, which a sweep addressed to each forgets in its group."""
    now = ctx.sources.clock()
    found: dict[tuple[str, int], _Home] = {}
    holders: dict[tuple[str, int], set[str]] = {}
    held: dict[tuple[str, int], set[tuple[str, str]]] = {}
    for node in sorted(ctx.clients):
        try:
            swept = await ctx.control(node, ops.TXN_SWEEP, {}, limits.CONTROL_CALL_SECONDS_MAX)
        except DynamoError:
            continue
        for attempt_id, table_id, partition_id in swept["locks"]:
            record_id = txn.attempt_of(attempt_id)[0]
            home = await _located(ctx, table_id, partition_id, record_id)
            if home is not None:
                found[txn.attempt_of(attempt_id)] = home
                holders.setdefault(txn.attempt_of(attempt_id), set()).add(node)
        for attempt_id, table_id, partition_id, *participant in swept.get("group_locks", ()):
            record_id = txn.attempt_of(attempt_id)[0]
            home = await _located(ctx, table_id, partition_id, record_id)
            if home is not None:
                found[txn.attempt_of(attempt_id)] = home
                held.setdefault(txn.attempt_of(attempt_id), set()).add(tuple(participant))
        for record_id, attempt, table_id, partition_id in swept.get("group_records", ()):
            home = await _located(ctx, table_id, partition_id, record_id)
            if home is not None:
                found.setdefault((record_id, attempt), home)
        for table_id, partition_id in swept.get("forget", ()):
            try:
                await _call_group(ctx, table_id, partition_id, ops.TXN_SWEEP, {})
            except DynamoError as error:
                logger.info("transaction rows of %s not forgotten yet: %s", partition_id, error)
        for record_id, attempt in swept["records"]:
            # A record is on the node that reported it: any partition it holds addresses it.
            home = _held_by(ctx, node)
            if home is None:
                # The tables this router has read hold none there (its cache fills on use).
                await ctx.refresh()
                home = _held_by(ctx, node)
            if home is not None:
                found.setdefault((record_id, attempt), home)
    resolved = 0
    for (record_id, attempt), home in found.items():
        key = f"{record_id}.{attempt}"
        COUNTERS.in_doubt.setdefault(key, now)
        try:
            done = await resolve(
                ctx,
                record_id,
                attempt,
                home,
                frozenset(holders.get((record_id, attempt), ())),
                frozenset(held.get((record_id, attempt), ())),
            )
        except DynamoError as error:
            logger.info("transaction %s not resolved yet: %s", key, error)
            continue
        if done:
            COUNTERS.in_doubt.pop(key, None)
            resolved += 1
    return resolved


async def resolve_forever(ctx: RouterContext) -> None:
    """The resolver's loop, for the router's life."""
    while True:
        await asyncio.sleep(limits.TRANSACTION_RESOLVE_INTERVAL_SECONDS)
        try:
            await resolve_once(ctx)
        except Exception:
            logger.exception("a transaction resolver round failed")


# TransactGetItems --------------------------------------------------------------------------------


async def transact_get_items(ctx: RouterContext, body: dict[str, Any]) -> dict[str, Any]:
    """TransactGetItems: up to 100 items read as of one instant."""
    reader = RequestReader(body)
    items = reader.array(
        "TransactItems", required=True, min_length=1, max_length=limits.TRANSACT_ITEMS_MAX
    )
    read_common(reader)
    for number, entry in enumerate(items or (), start=1):
        nested = reader.nested(entry, f"{reader.where('TransactItems')}.{number}.member")
        get = nested.mapping("Get", required=True)
        if get is not None:
            member = nested.nested(get, nested.where("Get"))
            member.table_name(required=True)
            member.attribute_map("Key", required=True)
    reader.check()
    assert items is not None
    gets: list[tuple[str, Route, bytes, dict[str, Any]]] = []
    # A Get whose Key does not validate (against its table's key schema, or an empty value) is
    # that action's ValidationError cancellation reason, each in its place, as DynamoDB answers
    # it (as captured against the service by a public emulator's compatibility tests).
    refused: list[txn.Vote | None] = []
    for entry in items:
        get = entry["Get"]
        names = get.get("ExpressionAttributeNames")
        projection = get.get("ProjectionExpression")
        expressions.check_attribute_maps(names, None)
        compiled = [] if projection is None else [expressions.projection(projection, names)]
        expressions.check_unused(names, None, *compiled)
        table = await ctx.table(get["TableName"])
        try:
            key = values.validate_item(get["Key"], where="Key")
            partition_key, sort_key = schema.validate_key(key, table.key_shape)
        except ValidationError as error:
            refused.append(txn.Vote(txn.Code.VALIDATION_ERROR, error.message))
            continue
        refused.append(None)
        storage_key = encode_storage_key(partition_key, sort_key)
        request = {"key": key, "projection": projection, "names": names}
        gets.append((get["TableName"], table, storage_key, request))
    if any(vote is not None for vote in refused):
        raise txn.cancellation([vote or txn.YES for vote in refused])
    txn.check_distinct((table.id, storage_key) for _, table, storage_key, _ in gets)
    groups: dict[tuple[str, str], list[int]] = {}
    partitions: dict[tuple[str, str], tuple[Route, PartitionDef]] = {}
    for index, (_, table, storage_key, _) in enumerate(gets):
        partition = table.partitions.lookup(storage_key)
        ref = (table.id, partition.id)
        groups.setdefault(ref, []).append(index)
        partitions[ref] = (table, partition)

    async def read_round(
        charge: bool, since: dict[tuple[str, str], dict[str, Any]] | None = None
    ) -> dict[tuple[str, str], dict[str, Any]]:
        async def read(ref: tuple[str, str]) -> dict[str, Any]:
            table, partition = partitions[ref]
            earlier = None if since is None else since[ref]["last_seq"]
            payload = TxnGetPayload([gets[i][3] for i in groups[ref]], charge, earlier)
            return await ctx.call_partition(
                table, partition, ops.TXN_GET, payload.to_json(), consistent=True
            )

        refs = list(groups)
        replies = await asyncio.gather(*(read(ref) for ref in refs))
        return dict(zip(refs, replies, strict=True))

    # The first round is charged to each partition's read capacity; the rounds that check it
    # are not, so a transaction pays for its items once, whatever it had to re-read.
    previous = await read_round(charge=True)
    throttled = {ref: reply["throttled"] for ref, reply in previous.items() if "throttled" in reply}
    if throttled:
        votes = [txn.YES] * len(gets)
        for ref, vote in throttled.items():
            for index in groups[ref]:
                votes[index] = txn.Vote.from_json(vote)
        raise txn.cancellation(votes)
    conflicts: set[int] = set()
    started = ctx.sources.clock()
    for number in range(TRANSACT_GET.attempts_max):
        current = await read_round(charge=False, since=previous)
        conflicts = set()
        for ref, indexes in groups.items():
            before, after = previous[ref], current[ref]
            if after["changed"] or before["partition"].id != after["partition"].id:
                conflicts.update(indexes)  # Written, or split, between the rounds.
                continue
            for position, index in enumerate(indexes):
                if before["locks"][position] or after["locks"][position]:
                    conflicts.add(index)  # A transaction is committing it, or may be.
        if not conflicts:
            return _get_reply(body, gets, groups, current)
        previous = current
        pause = TRANSACT_GET.pause(number, _since(ctx, started), 0.0)
        if pause is None:
            break
        await asyncio.sleep(pause)
    COUNTERS.conflicts += 1
    raise txn.cancellation([txn.CONFLICT if i in conflicts else txn.YES for i in range(len(gets))])


def _get_reply(
    body: dict[str, Any],
    gets: Sequence[tuple[str, Route, bytes, dict[str, Any]]],
    groups: dict[tuple[str, str], list[int]],
    replies: dict[tuple[str, str], dict[str, Any]],
) -> dict[str, Any]:
    responses: list[dict[str, Any]] = [{} for _ in gets]
    capacity = ConsumedCapacity(transactional=True)
    for ref, indexes in groups.items():
        reply = replies[ref]
        for number, index in enumerate(indexes):
            item = reply["items"][number]
            if item is not None:
                responses[index] = {"Item": item}
            units = read_units(reply["read_bytes"][number], ReadConsistency.TRANSACTIONAL)
            capacity.add_table(gets[index][0], units, UnitKind.READ)
    result: dict[str, Any] = {"Responses": responses}
    rendered = capacity.render_all(capacity_mode(body))
    if rendered is not None:
        result["ConsumedCapacity"] = rendered
    return result


OPERATIONS = {
    "TransactWriteItems": transact_write_items,
    "TransactGetItems": transact_get_items,
}
