"""The move machine (`core.machines.move`): its table, the effects each state has, and what a
record does after a restart in every state."""

from __future__ import annotations

import pytest

from core import limits
from core.catalog import IllegalTransition
from core.machines import FAILED, RESTARTED, STARTED, EffectKind, Event
from core.machines import move as m
from core.machines.move import MACHINE, MOVE_TRANSITIONS, MoveRecord, MoveState

BEFORE_SWITCH = (
    MoveState.PLANNED,
    MoveState.INCOMING,
    MoveState.REGISTERED,
    MoveState.PINNED,
    MoveState.COPIED,
    MoveState.FENCED,
)
SETTINGS = {"throughput": None, "ttl": None, "stream_consumer": None}
MOVED = {"id": "p1", "epoch": 4, "node": "n2"}


def record(index: bool = False, state: MoveState = MoveState.PLANNED) -> MoveRecord:
    return MoveRecord(
        table_id="ab" * 16,
        partition_id="p1",
        table_name="T",
        epoch=3,
        source={"id": "p1", "start": "", "end": None, "epoch": 3, "node": "n1"},
        target_node="n2",
        target_address="127.0.0.1:1",
        index=index,
        started=0.0,
        state=state,
    )


def success(state: MoveState, index: bool) -> Event:
    """The event the effect of `state` answers when it succeeds."""
    data: dict[str, object] = {}
    if state is MoveState.PINNED:
        data = {"applied": 10, "records": 2, "items": 7}
    elif state is MoveState.COPIED:
        data = {"seq": 12}
    elif state is MoveState.FENCED:
        data = {"applied": 12, "records": 2}
    elif state in (MoveState.DRAINED, MoveState.SWITCHING):
        data = {"settings": SETTINGS, "moved": MOVED}
    [effect] = m._effect(record(index, state), STARTED)
    return Event(effect.done, data)


def run(start: MoveRecord, events: list[Event]) -> tuple[MoveRecord, list[str]]:
    """Step `start` through `events`; the last record and the steps of the effects met."""
    current, effects = MACHINE.step(start, Event(STARTED), 0.0)
    steps = [effect.step for effect in effects]
    for event in events:
        current, effects = MACHINE.step(current, event, 1.0)
        steps += [effect.step for effect in effects]
    return current, steps


@pytest.mark.parametrize("index", [False, True])
def test_a_move_that_succeeds_takes_each_effect_once_in_order(index: bool) -> None:
    current = record(index)
    current, effects = MACHINE.step(current, Event(STARTED), 0.0)
    steps = []
    while not MACHINE.finished(current):
        [effect] = effects
        steps.append(effect.step)
        current, effects = MACHINE.step(current, success(current.state, index), 2.0)
    assert steps == [
        "create",
        *(["register"] if index else []),
        "pin",
        "copy",
        "fence",
        "drain",
        "switch",
        "activate",
        "drop",
    ]
    assert current.state is MoveState.DONE
    assert (current.applied, current.final_seq, current.records, current.items) == (12, 12, 4, 7)
    assert current.fenced_at == 2.0 and current.moved == MOVED and current.error is None


@pytest.mark.parametrize("state", BEFORE_SWITCH)
def test_a_failure_or_a_restart_before_the_switch_rolls_back(state: MoveState) -> None:
    for event in (Event(FAILED, error="StaleEpoch: gone"), Event(RESTARTED)):
        after, effects = MACHINE.step(record(state=state), event, 0.0)
        assert after.state is MoveState.ROLLING_BACK
        assert [(e.kind, e.step) for e in effects] == [(EffectKind.INTERNAL_WRITE, "unfence")]
    after, effects = MACHINE.step(after, Event(m.UNFENCED), 0.0)
    assert after.state is MoveState.UNFENCED and effects[0].best_effort
    after, effects = MACHINE.step(after, Event(m.ABORTED), 0.0)
    assert after.state is MoveState.ROLLED_BACK and not effects and MACHINE.finished(after)


def test_a_failed_switch_reads_the_catalog_back_after_the_calls_deadline() -> None:
    failed, [read] = MACHINE.step(record(state=MoveState.DRAINED), Event(FAILED, error="x"), 0.0)
    assert failed.state is MoveState.SWITCHING and failed.error == "x"
    assert read.kind is EffectKind.CATALOG_READ
    assert read.wait_seconds == limits.NODE_CALL_SECONDS_MAX + limits.RPC_DEADLINE_GRACE_SECONDS
    # After a restart the calls died with the process: read at once.
    restarted, [now] = MACHINE.step(record(state=MoveState.DRAINED), Event(RESTARTED), 0.0)
    assert restarted.state is MoveState.SWITCHING and now.wait_seconds == 0
    switched, [activate] = MACHINE.step(failed, success(MoveState.SWITCHING, False), 0.0)
    assert switched.state is MoveState.SWITCHED and activate.step == "activate"
    back, [unfence] = MACHINE.step(failed, Event(m.NOT_SWITCHED), 0.0)
    assert back.state is MoveState.ROLLING_BACK and unfence.step == "unfence"


def test_a_switch_that_cannot_be_read_back_stops_the_call_with_its_record_kept() -> None:
    current, _ = MACHINE.step(record(state=MoveState.DRAINED), Event(FAILED, error="x"), 0.0)
    for _ in range(limits.MOVE_SWITCH_READS_MAX - 1):
        current, _ = MACHINE.step(current, Event(FAILED, error="unreadable"), 0.0)
        assert current.state is MoveState.SWITCHING
    with pytest.raises(m.MoveUndecided):
        MACHINE.step(current, Event(FAILED, error="unreadable"), 0.0)


@pytest.mark.parametrize("state", [MoveState.SWITCHED, MoveState.ACTIVE])
def test_after_the_switch_a_restart_goes_forward(state: MoveState) -> None:
    after, [effect] = MACHINE.step(record(state=state), Event(RESTARTED), 0.0)
    assert after.state is state
    assert effect.step == ("activate" if state is MoveState.SWITCHED else "drop")
    with pytest.raises(IllegalTransition):
        MACHINE.step(record(state=state), Event(FAILED), 0.0)


def test_the_table_has_every_state_end_and_nothing_goes_back_after_the_switch() -> None:
    sources = {state for state, _ in MOVE_TRANSITIONS}
    for state in MoveState:
        assert (state in m.FINAL) == (state not in sources), state
        if state not in m.FINAL:
            assert (state, RESTARTED) in MOVE_TRANSITIONS, state
    for state in (MoveState.SWITCHED, MoveState.ACTIVE, MoveState.DONE):
        reachable = {state}
        while True:
            more = {to for (at, _), to in MOVE_TRANSITIONS.items() if at in reachable}
            if more <= reachable:
                break
            reachable |= more
        assert MoveState.ROLLING_BACK not in reachable, state
    with pytest.raises(IllegalTransition):
        MACHINE.step(record(), Event(m.FENCED, {"seq": 1}), 0.0)


def test_a_record_survives_its_json() -> None:
    current, _ = run(
        record(True),
        [
            success(MoveState.PLANNED, True),
            success(MoveState.INCOMING, True),
            success(MoveState.REGISTERED, True),
            success(MoveState.PINNED, True),
            success(MoveState.COPIED, True),
            success(MoveState.FENCED, True),
            Event(FAILED, error="lost"),
            success(MoveState.SWITCHING, True),
        ],
    )
    assert current.state is MoveState.SWITCHED
    assert MoveRecord.from_json(current.to_json()) == current
