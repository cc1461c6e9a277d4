"""The table machine (`core.machines.table`): each flow's effects in order, what a failure undoes,
where a restart goes from each state, the record recovered from a catalog row, and the driver
running a flow whose effect fails."""

from __future__ import annotations

import asyncio
from dataclasses import replace

import pytest

from core import catalog
from core.catalog import IllegalTransition, IndexDef, IndexStatus, TableDef, TableStatus, Throughput
from core.errors import ServiceUnavailable
from core.keys import KeyShape
from core.machines import FAILED, RESTARTED, STARTED, Effect, EffectKind, Event
from core.machines import table as t
from core.machines.table import MACHINE, TABLE_TRANSITIONS, Flow, TableRecord, TableState
from core.token_bucket import BillingMode
from rpc.machines import Driver, NoCrashPoints

S = TableState
TABLE_ID = "ab" * 16
INDEX_ID = "cd" * 16

# Each flow's states before its effects, and the state it ends in, when every effect succeeds.
FORWARD: dict[Flow, tuple[list[TableState], TableState]] = {
    Flow.CREATE: ([S.RECORDING, S.CREATING, S.CREATED], S.ACTIVE),
    Flow.DELETE: ([S.MARKING, S.DELETING, S.DROPPED], S.GONE),
    Flow.CREATE_INDEX: ([S.INDEX_ADDING, S.INDEX_CREATING], S.INDEX_PLACED),
    Flow.DELETE_INDEX: ([S.INDEX_MARKING, S.INDEX_DELETING, S.INDEX_DROPPED], S.INDEX_GONE),
    Flow.ENABLE_STREAM: ([S.REGISTERING, S.REGISTERED], S.STREAM_ENABLED),
    Flow.DISABLE_STREAM: ([S.DISABLING], S.STREAM_DISABLED),
}


def row(status: TableStatus = TableStatus.ACTIVE, *indexes: IndexDef) -> TableDef:
    table = catalog.created(
        name="Music",
        table_id=TABLE_ID,
        key_shape=KeyShape.table(("pk", "S")),
        attribute_definitions=[("pk", "S")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(0, 0),
        now=1_700_000_000.0,
        owner=lambda partition_id: "node-1",
    )
    return replace(table, status=status, indexes=indexes)


def index(status: IndexStatus, *, online: bool = True) -> IndexDef:
    return IndexDef(
        name="byArtist",
        key_shape=KeyShape.table(("artist", "S")),
        projection="ALL",
        status=status,
        table_id=INDEX_ID,
        online=online,
    )


def success(record: TableRecord, effect: Effect) -> Event:
    return Event(effect.done)


@pytest.mark.parametrize("flow", list(Flow))
def test_a_flow_that_succeeds_takes_each_effect_once_in_order(flow: Flow) -> None:
    states, end = FORWARD[flow]
    record = t.started(flow, "Music", table=row())
    event = Event(STARTED)
    seen = []
    while True:
        record, effects = MACHINE.step(record, event, 0.0)
        if MACHINE.finished(record):
            assert effects == ()
            break
        seen.append(record.state)
        (effect,) = effects
        assert effect.to == "Music"
        event = success(record, effect)
    assert seen == states
    assert record.state is end and record.error is None


def test_each_state_with_an_effect_is_a_crash_point_and_each_end_has_none() -> None:
    with_effects = {state for states, _ in FORWARD.values() for state in states}
    undoing = {S.ABANDONING, S.ABANDONED, S.INDEX_ABANDONING, S.INDEX_ABANDONED, S.UNREGISTERING}
    for state in TableState:
        record = TableRecord(Flow.CREATE, "Music", state, row())
        assert (MACHINE.label(record) == state.value.lower()) and MACHINE.finished(record) == (
            state in t.FINAL
        )
        assert (state in with_effects | undoing) == (state not in t.FINAL), state
    # Every transition lands in a state the machine knows, and an end takes no event at all.
    assert {state for state, _ in TABLE_TRANSITIONS}.isdisjoint(t.FINAL)


def test_a_table_whose_partitions_cannot_all_be_created_leaves_the_catalog_and_the_nodes() -> None:
    record = TableRecord(Flow.CREATE, "Music", S.CREATING, row(TableStatus.CREATING))
    record, (effect,) = MACHINE.step(record, Event(FAILED, error="node down"), 0.0)
    assert (record.state, effect.kind, effect.step) == (
        S.ABANDONING,
        EffectKind.CATALOG_CHANGE,
        "remove",
    )
    assert record.error == "node down"
    record, (effect,) = MACHINE.step(record, Event(t.ROW_REMOVED), 0.0)
    assert (record.state, effect.step, effect.best_effort) == (
        S.ABANDONED,
        "drop_partitions",
        True,
    )
    record, effects = MACHINE.step(record, Event(t.PARTITIONS_DROPPED), 0.0)
    assert record.state is S.ENDED and effects == ()


def test_a_creation_another_router_finished_is_not_undone() -> None:
    record = TableRecord(Flow.CREATE, "Music", S.ABANDONING, row(TableStatus.CREATING))
    active = row(TableStatus.ACTIVE)
    record, effects = MACHINE.step(record, Event(t.ROW_KEPT, {"table": active}), 0.0)
    assert record.state is S.ENDED and effects == () and record.table == active


@pytest.mark.parametrize(
    ("state", "back_to"),
    [
        (S.CREATING, S.CREATING),
        (S.CREATED, S.CREATING),
        (S.ABANDONING, S.CREATING),
        (S.DELETING, S.DELETING),
        (S.DROPPED, S.DELETING),
        (S.INDEX_CREATING, S.INDEX_CREATING),
        (S.INDEX_ABANDONING, S.INDEX_CREATING),
        (S.INDEX_DELETING, S.INDEX_DELETING),
        (S.INDEX_DROPPED, S.INDEX_DELETING),
    ],
)
def test_a_restart_goes_to_the_state_the_row_shows(state: TableState, back_to: TableState) -> None:
    record = TableRecord(Flow.CREATE, "Music", state, row())
    after, effects = MACHINE.step(record, Event(RESTARTED), 0.0)
    assert after.state is back_to and len(effects) == 1


@pytest.mark.parametrize(
    "state", [S.RECORDING, S.MARKING, S.INDEX_ADDING, S.REGISTERING, S.REGISTERED, S.DISABLING]
)
def test_a_state_no_row_names_cannot_be_restarted(state: TableState) -> None:
    with pytest.raises(IllegalTransition):
        MACHINE.step(TableRecord(Flow.CREATE, "Music", state), Event(RESTARTED), 0.0)


def test_a_failed_deletion_is_left_to_recovery_with_the_row_deleting() -> None:
    record = TableRecord(Flow.DELETE, "Music", S.DELETING, row(TableStatus.DELETING))
    record, effects = MACHINE.step(record, Event(FAILED, error="node down"), 0.0)
    assert record.state is S.LEFT and effects == ()


def test_a_stream_whose_recording_failed_lets_its_consumer_go() -> None:
    record = TableRecord(Flow.ENABLE_STREAM, "Music", S.REGISTERED, row())
    record, (effect,) = MACHINE.step(record, Event(FAILED, error="refused"), 0.0)
    assert (record.state, effect.step, effect.best_effort) == (
        S.UNREGISTERING,
        "unregister_stream",
        True,
    )


def test_the_record_is_recovered_from_the_row() -> None:
    creating = t.recovered(row(TableStatus.CREATING))
    deleting = t.recovered(row(TableStatus.DELETING, index(IndexStatus.DELETING)))
    assert creating is not None and (creating.flow, creating.state) == (Flow.CREATE, S.CREATING)
    assert deleting is not None and (deleting.flow, deleting.state) == (Flow.DELETE, S.DELETING)
    adding = t.recovered(row(TableStatus.ACTIVE, index(IndexStatus.CREATING)))
    assert adding is not None
    assert (adding.flow, adding.state, adding.index_name) == (
        Flow.CREATE_INDEX,
        S.INDEX_CREATING,
        "byArtist",
    )
    dropping = t.recovered(row(TableStatus.ACTIVE, index(IndexStatus.DELETING)))
    assert dropping is not None and dropping.state is S.INDEX_DELETING
    # A backfill is the replicator's, an index created with its table the table's, an ACTIVE
    # row has nothing unfinished, and UPDATING is DescribeTable's.
    assert t.recovered(row(TableStatus.ACTIVE, index(IndexStatus.BACKFILLING))) is None
    assert t.recovered(row(TableStatus.ACTIVE, index(IndexStatus.CREATING, online=False))) is None
    assert t.recovered(row(TableStatus.ACTIVE)) is None
    assert t.recovered(row(TableStatus.UPDATING)) is None


def test_the_driver_runs_a_creation_whose_partitions_fail_to_its_undoing() -> None:
    steps: list[str] = []

    async def handler(record: TableRecord, effect: Effect) -> Event:
        steps.append(effect.step)
        if effect.step == "create_partitions":
            raise ServiceUnavailable("node-1 is down")
        return Event(effect.done)

    async def persist(record: TableRecord) -> None:
        return None

    names = {effect[1] for effect in t._EFFECTS.values()}
    driver: Driver[TableRecord] = Driver(
        MACHINE, dict.fromkeys(names, handler), persist, NoCrashPoints(), lambda: 0.0
    )
    record = t.started(Flow.CREATE, "Music", table=row(TableStatus.CREATING))
    ended, failure = asyncio.run(driver.drive(record, Event(STARTED)))
    assert steps == ["record", "create_partitions", "remove", "drop_partitions"]
    assert ended.state is S.ENDED
    assert isinstance(failure, ServiceUnavailable)
