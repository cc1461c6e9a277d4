"""The backfill machine (`core.machines.backfill`): its table, the effects each state has, what a
record does after a failure or a restart in every state, how it is loaded from the catalog row,
and the row's progress (`core.catalog`: the cursor, the items copied, the percentage)."""

from __future__ import annotations

import dataclasses

import pytest

from core import catalog
from core.catalog import IllegalTransition, IndexDef, IndexStatus, TableDef
from core.machines import FAILED, RESTARTED, STARTED, EffectKind, Event
from core.machines import backfill as m
from core.machines.backfill import (
    BACKFILL_TRANSITIONS,
    MACHINE,
    BackfillRecord,
    BackfillState,
)
from tests.unit.test_catalog_gsi import active_table, online

INDEX_ID = "ef" * 16  # The online index's storage id in `online`.

PAGE = ({"pk": {"S": "a"}}, {"pk": {"S": "b"}})
KEY = {"pk": {"S": "b"}}


def record(state: BackfillState = BackfillState.REGISTERING, **fields: object) -> BackfillRecord:
    start = BackfillRecord("ab" * 16, "T", INDEX_ID, "p1", "gsi-Online", 2, state)
    return dataclasses.replace(start, **fields)  # type: ignore[arg-type]


def step(current: BackfillRecord, event: Event) -> tuple[BackfillRecord, list[str]]:
    after, effects = MACHINE.step(current, event, 0.0)
    return after, [effect.step for effect in effects]


def test_a_copy_of_two_pages_takes_each_effect_in_order_and_moves_its_cursor() -> None:
    current, steps = step(record(), Event(STARTED))
    assert steps == ["register"]
    current, more = step(current, Event(m.REGISTERED))
    steps += more
    current, more = step(current, Event(m.MARKED, {"cursor": None, "items": 0}))
    steps += more
    assert (current.state, current.cursor, current.items) == (BackfillState.COPYING, None, 0)
    current, more = step(current, Event(m.READ, {"items": list(PAGE), "last_key": KEY}))
    steps += more
    assert (current.page, current.last_key, current.pages) == (PAGE, KEY, 1)
    assert m.copied(current) == 2
    current, more = step(current, Event(m.APPLIED))
    steps += more
    current, more = step(current, Event(m.CHECKPOINTED, {"items": 2}))
    steps += more
    assert (current.state, current.cursor, current.items, current.page) == (
        BackfillState.COPYING,
        KEY,
        2,
        (),
    )
    current, more = step(current, Event(m.READ, {"items": [{"pk": {"S": "c"}}], "last_key": None}))
    steps += more
    current, more = step(current, Event(m.APPLIED))
    steps += more
    current, more = step(current, Event(m.RECORDED, {"items": 3}))
    steps += more
    page = ["read", "apply", "checkpoint"]
    assert steps == ["register", "mark", *page, *page]
    assert (current.state, current.cursor, current.items) == (BackfillState.RECORDED, None, 3)
    assert MACHINE.finished(current) and MACHINE.label(current) == "recorded"


def test_the_effects_kinds_and_what_they_address() -> None:
    kinds = {}
    for state in (BackfillState.REGISTERING, BackfillState.COPYING):
        _, effects = MACHINE.step(record(state), Event(RESTARTED), 0.0)
        kinds[effects[0].step] = (effects[0].kind, effects[0].to)
    _, effects = MACHINE.step(record(BackfillState.REGISTERING), Event(m.REGISTERED), 0.0)
    kinds[effects[0].step] = (effects[0].kind, effects[0].to)
    assert kinds == {
        "register": (EffectKind.NODE_CALL, ""),
        "read": (EffectKind.NODE_CALL, ""),
        "mark": (EffectKind.CATALOG_CHANGE, "T"),
    }


@pytest.mark.parametrize(
    ("state", "event", "to"),
    [
        (BackfillState.MARKING, Event(m.RECORDED), BackfillState.RECORDED),
        (BackfillState.MARKING, Event(m.GONE), BackfillState.ABANDONED),
        (BackfillState.APPLIED, Event(m.GONE), BackfillState.ABANDONED),
    ],
)
def test_a_copy_found_done_or_gone_ends_without_an_effect(
    state: BackfillState, event: Event, to: BackfillState
) -> None:
    after, steps = step(record(state, page=PAGE), event)
    assert (after.state, steps, after.page) == (to, [], ())
    assert MACHINE.finished(after)


# Where a failure (kept, for the follower's next attempt) and a restart take each state.
AFTER_FAILURE = {
    BackfillState.REGISTERING: BackfillState.REGISTERING,
    BackfillState.MARKING: BackfillState.MARKING,
    BackfillState.COPYING: BackfillState.COPYING,
    BackfillState.READ: BackfillState.COPYING,
    BackfillState.APPLIED: BackfillState.COPYING,
}
AFTER_RESTART = {
    BackfillState.REGISTERING: (BackfillState.REGISTERING, "register"),
    BackfillState.MARKING: (BackfillState.REGISTERING, "register"),
    BackfillState.COPYING: (BackfillState.COPYING, "read"),
    BackfillState.READ: (BackfillState.COPYING, "read"),
    BackfillState.APPLIED: (BackfillState.COPYING, "read"),
}


@pytest.mark.parametrize("state", list(AFTER_FAILURE))
def test_a_failure_keeps_the_record_without_an_effect_and_drops_the_page(
    state: BackfillState,
) -> None:
    before = record(state, cursor=KEY, items=5, page=PAGE, last_key={"pk": {"S": "z"}})
    after, steps = step(before, Event(FAILED, error="ServiceUnavailable: down"))
    assert (after.state, steps) == (AFTER_FAILURE[state], [])
    assert (after.cursor, after.items, after.page, after.error) == (
        KEY,
        5,
        (),
        "ServiceUnavailable: down",
    )
    assert not MACHINE.finished(after)


@pytest.mark.parametrize("state", list(AFTER_RESTART))
def test_a_restart_reads_again_from_the_recorded_cursor_never_from_the_start(
    state: BackfillState,
) -> None:
    before = record(state, cursor=KEY, items=5, page=PAGE)
    after, steps = step(before, Event(RESTARTED))
    assert (after.state, steps) == (AFTER_RESTART[state][0], [AFTER_RESTART[state][1]])
    assert (after.cursor, after.items, after.page) == (KEY, 5, ())


def test_every_transition_is_in_the_table_and_nothing_else_is_taken() -> None:
    for (state, kind), to in BACKFILL_TRANSITIONS.items():
        data: dict[str, object] = {"cursor": None, "items": 0, "last_key": None}
        after, _ = (
            MACHINE.step(record(state), Event(kind, {**data, "items": []}), 0.0)
            if (kind == m.READ)
            else MACHINE.step(record(state), Event(kind, data), 0.0)
        )
        assert after.state is to
    refused = [
        (BackfillState.REGISTERING, m.READ),
        (BackfillState.COPYING, m.CHECKPOINTED),
        (BackfillState.READ, m.RECORDED),
        (BackfillState.RECORDED, RESTARTED),
        (BackfillState.ABANDONED, STARTED),
    ]
    for state, kind in refused:
        with pytest.raises(IllegalTransition):
            MACHINE.step(record(state), Event(kind), 0.0)


# The record as the catalog row keeps it --------------------------------------------------------


def backfilling() -> TableDef:
    table = online(active_table())
    return catalog.index_backfill_started(table, INDEX_ID, 1000)


def online_index(table: TableDef) -> IndexDef:
    return next(i for i in table.indexes if i.online)


def test_a_record_is_loaded_from_the_row_at_its_cursor() -> None:
    table = backfilling()
    partition = table.partitions[0].id
    loaded = m.recovered(table, online_index(table), partition, "gsi-Online", 4)
    assert loaded is not None and loaded.state is BackfillState.REGISTERING
    begun = catalog.partition_backfill_begun(table, INDEX_ID, partition, 4, 0)
    moved = catalog.backfill_progressed(begun, INDEX_ID, partition, KEY, 7, 4)
    loaded = m.recovered(moved, online_index(moved), partition, "gsi-Online", 5)
    assert loaded is not None
    assert (loaded.state, loaded.cursor, loaded.items, loaded.epoch) == (
        BackfillState.COPYING,
        KEY,
        7,
        5,
    )
    copied = catalog.partition_backfilled(moved, INDEX_ID, partition, 9, 4)
    assert m.recovered(copied, online_index(copied), partition, "gsi-Online", 5) is None
    assert m.recovered(table, online_index(table), "retired", "gsi-Online", 5) is None
    created_with_table = table.indexes[0]
    assert m.recovered(table, created_with_table, partition, "gsi-Online", 5) is None


def test_the_row_records_a_cursor_only_forward_and_only_under_the_newest_lease() -> None:
    table = backfilling()
    partition = table.partitions[0].id
    assert catalog.backfill_progressed(table, INDEX_ID, partition, KEY, 3, 2) is table  # Not begun.
    begun = catalog.partition_backfill_begun(table, INDEX_ID, partition, 2, 0)
    assert catalog.partition_backfill_begun(begun, INDEX_ID, partition, 3, 0) is begun
    assert online_index(begun).backfill_of(partition) == catalog.BackfillProgress(
        partition, None, 0, 2
    )
    moved = catalog.backfill_progressed(begun, INDEX_ID, partition, KEY, 3, 2)
    assert catalog.backfill_progressed(moved, INDEX_ID, partition, KEY, 3, 2) is moved  # Again.
    taken = catalog.backfill_progressed(moved, INDEX_ID, partition, {"pk": {"S": "c"}}, 1, 3)
    entry = online_index(taken).backfill_of(partition)
    # A later lease resumed from an older cursor: the items copied do not go down.
    assert entry == catalog.BackfillProgress(partition, {"pk": {"S": "c"}}, 3, 3)
    late = catalog.backfill_progressed(taken, INDEX_ID, partition, {"pk": {"S": "z"}}, 9, 2)
    assert late is taken  # The previous holder's late write.
    assert catalog.partition_backfilled(taken, INDEX_ID, partition, 20, 2) is taken
    assert IndexDef.from_json(online_index(taken).to_json()) == online_index(taken)


def test_the_percentage_is_monotonic_below_100_until_the_index_is_active() -> None:
    creating = online(active_table())
    assert online_index(creating).percentage_progress == 0
    assert creating.indexes[0].percentage_progress is None  # Created with its table.
    table = catalog.index_backfill_started(creating, INDEX_ID, 10)
    assert online_index(table).items_estimate == 10
    [partition] = [p.id for p in table.partitions]
    seen = [online_index(table).percentage_progress]
    table = catalog.partition_backfill_begun(table, INDEX_ID, partition, 1, 99)
    assert online_index(table).items_estimate == 10  # Fixed when the backfill began.
    for items, key in ((4, "b"), (8, "c"), (12, "d"), (11, "e")):
        table = catalog.backfill_progressed(
            table, INDEX_ID, partition, {"pk": {"S": key}}, items, 1
        )
        seen.append(online_index(table).percentage_progress)
    # Items written since the estimate take it to 99 at most; a count read back lower (a resumed
    # copy) does not take it down.
    assert seen == [0, 40, 80, 99, 99]
    assert online_index(table).items_copied == 12
    table = catalog.partition_backfilled(table, INDEX_ID, partition, 13, 1)
    done = online_index(table)
    assert (done.status, done.percentage_progress, done.progress) == (IndexStatus.ACTIVE, 100, ())
    deleting = catalog.index_deleting(catalog.index_backfill_started(creating, INDEX_ID), "Online")
    assert online_index(deleting).percentage_progress is None


def test_the_row_keeps_when_the_backfill_began_for_its_rate_and_time_left() -> None:
    creating = online(active_table())
    [partition] = [p.id for p in creating.partitions]
    table = catalog.partition_backfill_begun(creating, INDEX_ID, partition, 1, 1000, 500.0)
    assert online_index(table).began_at == 500.0
    # Begun once: a later partition's start (or a restarted replicator's) leaves it.
    again = catalog.partition_backfill_begun(table, INDEX_ID, partition, 2, 1000, 900.0)
    assert online_index(again).began_at == 500.0
    table = catalog.backfill_progressed(table, INDEX_ID, partition, KEY, 250, 1)
    index = online_index(table)
    assert IndexDef.from_json(index.to_json()) == index and index.began_at == 500.0
    rate = catalog.backfill_rate(index.items_copied, index.began_at, 510.0)
    assert rate == 25.0  # 250 items in 10 s.
    assert catalog.backfill_seconds_left(index.items_copied, index.items_estimate, rate) == 30.0
    assert catalog.backfill_seconds_left(1200, 1000, rate) == 0.0  # Past the estimate.
    assert catalog.backfill_rate(250, 0.0, 510.0) is None  # Not begun.
    assert catalog.backfill_rate(250, 510.0, 510.0) is None  # No time passed.
    assert catalog.backfill_seconds_left(250, 0, rate) is None  # No estimate.
    assert catalog.backfill_seconds_left(250, 1000, None) is None
    done = online_index(catalog.partition_backfilled(table, INDEX_ID, partition, 260, 1))
    assert (done.status, done.began_at) == (IndexStatus.ACTIVE, 0.0)


def test_a_catalog_change_is_read_as_the_event_the_row_shows() -> None:
    table = backfilling()
    partition = table.partitions[0].id
    current = record(BackfillState.APPLIED, partition_id=partition, table_id=table.id, page=PAGE)
    assert m.observed(None, current, m.CHECKPOINTED).kind == m.GONE
    assert m.observed(table, current, m.CHECKPOINTED).kind == m.GONE  # The copy never began.
    begun = catalog.partition_backfill_begun(table, INDEX_ID, partition, 2, 0)
    moved = catalog.backfill_progressed(begun, INDEX_ID, partition, KEY, 2, 2)
    event = m.observed(moved, current, m.CHECKPOINTED)
    assert (event.kind, event.data) == (m.CHECKPOINTED, {"cursor": KEY, "items": 2, "epoch": 2})
    copied = catalog.partition_backfilled(moved, INDEX_ID, partition, 2, 2)
    assert m.observed(copied, current, m.CHECKPOINTED).kind == m.RECORDED
    split = dataclasses.replace(moved, partitions=moved.partitions[1:])
    assert m.observed(split, current, m.CHECKPOINTED).kind == m.GONE
    deleting = catalog.index_deleting(moved, "Online")
    assert m.observed(deleting, current, m.MARKED).kind == m.GONE
