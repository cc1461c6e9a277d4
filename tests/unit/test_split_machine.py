"""The split machine (`core.machines.split`): its table, the effects each state has, and what a
record does after a failure or a restart in every state."""

from __future__ import annotations

import pytest

from core import limits
from core.catalog import IllegalTransition
from core.machines import FAILED, RESTARTED, STARTED, EffectKind, Event
from core.machines import split as m
from core.machines.split import MACHINE, SPLIT_TRANSITIONS, SplitRecord, SplitState

LOW = {"seq": 7, "items": 3, "bytes": 300, "indexes": {}}
PARENT = {"id": "p1", "start": "", "end": None, "epoch": 3, "node": "n1"}
CHILDREN = [{"id": "p1.4a", "epoch": 4}, {"id": "p1.4b", "epoch": 4}]
SUCCESS = {
    SplitState.PLANNED: Event(m.PINNED),
    SplitState.PINNED: Event(m.CHOSEN, {"key": "10", "low": LOW}),
    SplitState.CHOSEN: Event(m.RECORDED, {"parent": PARENT, "children": CHILDREN}),
    SplitState.DECIDING: Event(m.RECORDED, {"parent": PARENT, "children": CHILDREN}),
    SplitState.RECORDED: Event(m.COUNTED, {"low": {**LOW, "seq": 9}}),
    SplitState.COUNTED: Event(m.INSTALLED, {"seconds": 0.01}),
}


def record(index: bool = False, state: SplitState = SplitState.PLANNED) -> SplitRecord:
    return SplitRecord(
        table_id="ab" * 16,
        partition_id="p1",
        table_name="T",
        epoch=3,
        index=index,
        started=0.0,
        state=state,
    )


def run(start: SplitRecord, events: list[Event]) -> tuple[SplitRecord, list[str]]:
    """Step `start` through `events`; the last record and the steps of the effects met."""
    current, effects = MACHINE.step(start, Event(STARTED), 0.0)
    steps = [effect.step for effect in effects]
    for event in events:
        current, effects = MACHINE.step(current, event, 1.0)
        steps += [effect.step for effect in effects]
    return current, steps


@pytest.mark.parametrize("index", [False, True])
def test_a_split_that_succeeds_takes_each_effect_once_in_order(index: bool) -> None:
    forward = (
        SplitState.PLANNED,
        SplitState.PINNED,
        SplitState.CHOSEN,
        SplitState.RECORDED,
        SplitState.COUNTED,
    )
    done, steps = run(record(index), [SUCCESS[state] for state in forward])
    assert steps == ["pin", "plan", "record", "count", "install"]
    assert done.state is SplitState.INSTALLED and MACHINE.finished(done)
    assert done.key == "10" and done.low == {**LOW, "seq": 9}
    assert done.parent == PARENT and done.children == tuple(CHILDREN)
    assert done.install_seconds == 0.01 and done.error is None


@pytest.mark.parametrize("state", [SplitState.PLANNED, SplitState.PINNED])
@pytest.mark.parametrize("event", [Event(FAILED, error="boom"), Event(RESTARTED)])
def test_a_failure_or_a_restart_before_the_record_forgets_the_split(
    state: SplitState, event: Event
) -> None:
    after, effects = MACHINE.step(record(state=state), event, 0.0)
    assert after.state is SplitState.ABANDONED and MACHINE.finished(after)
    assert effects == ()


def test_a_refused_record_abandons_the_split_at_once() -> None:
    after, effects = MACHINE.step(
        record(state=SplitState.CHOSEN), Event(m.REFUSED, error="moved"), 0.0
    )
    assert after.state is SplitState.ABANDONED and after.error == "moved" and effects == ()


def test_a_failed_record_is_read_back_after_the_calls_deadline_and_at_once_after_a_restart() -> (
    None
):
    after, [effect] = MACHINE.step(record(state=SplitState.CHOSEN), Event(FAILED, error="x"), 0.0)
    assert after.state is SplitState.DECIDING and after.error == "x"
    assert effect.kind is EffectKind.CATALOG_READ and effect.step == "decide"
    assert effect.wait_seconds == limits.NODE_CALL_SECONDS_MAX + limits.RPC_DEADLINE_GRACE_SECONDS
    restarted, [effect] = MACHINE.step(record(state=SplitState.CHOSEN), Event(RESTARTED), 0.0)
    assert restarted.state is SplitState.DECIDING and effect.wait_seconds == 0
    recorded, [count] = MACHINE.step(after, SUCCESS[SplitState.DECIDING], 0.0)
    assert recorded.state is SplitState.RECORDED and count.step == "count"
    forgotten, effects = MACHINE.step(after, Event(m.NOT_RECORDED), 0.0)
    assert forgotten.state is SplitState.ABANDONED and effects == ()


def test_a_read_back_or_an_install_that_fails_stops_the_run_with_the_record_kept() -> None:
    for state in (SplitState.DECIDING, SplitState.COUNTED):
        kept, effects = MACHINE.step(record(state=state), Event(FAILED, error="down"), 0.0)
        assert kept.state is state and not MACHINE.finished(kept) and effects == (), state
        # The periodic check steps it again, and its effect is tried again.
        again, [effect] = MACHINE.step(kept, Event(RESTARTED), 0.0)
        assert again.state is state and effect.step in ("decide", "install"), state
        assert effect.wait_seconds == 0


def test_counts_that_cannot_be_carried_on_leave_the_install_to_walk() -> None:
    counted = SplitRecord.from_json({**record().to_json(), "state": "RECORDED", "low": LOW})
    after, [effect] = MACHINE.step(counted, Event(FAILED, error="gap"), 0.0)
    assert after.state is SplitState.COUNTED and after.low is None
    assert effect.step == "install" and effect.retry is not None


def test_the_table_has_every_state_end_and_nothing_goes_back_after_the_record() -> None:
    sources = {state for state, _ in SPLIT_TRANSITIONS}
    for state in SplitState:
        assert (state in m.FINAL) == (state not in sources), state
        if state not in m.FINAL:
            assert (state, RESTARTED) in SPLIT_TRANSITIONS, state
            assert (state, FAILED) in SPLIT_TRANSITIONS, state
    reachable = {SplitState.RECORDED}
    while True:
        more = {to for (at, _), to in SPLIT_TRANSITIONS.items() if at in reachable}
        if more <= reachable:
            break
        reachable |= more
    assert reachable == {SplitState.RECORDED, SplitState.COUNTED, SplitState.INSTALLED}
    with pytest.raises(IllegalTransition):
        MACHINE.step(record(), Event(m.INSTALLED, {"seconds": 0}), 0.0)


def test_every_state_with_an_effect_has_exactly_one() -> None:
    for state in SplitState:
        if state in m.FINAL:
            continue
        _, effects = MACHINE.step(record(state=state), Event(RESTARTED), 0.0)
        expected = 0 if state in (SplitState.PLANNED, SplitState.PINNED) else 1
        assert len(effects) == expected, state


def test_a_record_survives_its_json() -> None:
    current, _ = run(
        record(True),
        [
            SUCCESS[SplitState.PLANNED],
            SUCCESS[SplitState.PINNED],
            Event(FAILED, error="lost"),
            SUCCESS[SplitState.DECIDING],
        ],
    )
    assert current.state is SplitState.RECORDED
    assert SplitRecord.from_json(current.to_json()) == current
