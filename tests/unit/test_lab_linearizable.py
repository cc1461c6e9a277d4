"""`dynalab.lab.linearizable`: the minimal set of a register key's operations that cannot be
ordered, and the anomaly in words.

The set must be honest: every set the minimisation tries is closed first, and a closed subset of
a linearizable history must be linearizable, which the property test checks on random histories
made linearizable by construction (writes, reads, conditional writes taking effect or refused,
outcomes left unknown). The set must be minimal: removing any one operation (and closing again)
makes it orderable. And each common anomaly gets its sentence."""

from __future__ import annotations

import random

import pytest

from dynalab.lab import checkers
from dynalab.lab.history import CAS, CONDITION_FAILED, READ, WRITE, Operation, Outcome
from dynalab.lab.linearizable import (
    _Closure,
    describe,
    linearize_register,
    minimal_violation,
    search_calls,
)

OK, FAILED, UNKNOWN = Outcome.OK, Outcome.FAILED, Outcome.UNKNOWN


def op(process, kind, value, invoke, complete, outcome=OK, error=None) -> Operation:
    return Operation(process, kind, "r1", value, invoke, complete, outcome, error)


def noise(start: float, count: int = 30) -> list[Operation]:
    """A correct stretch of history: one client writing and reading back, sequentially."""
    operations = []
    for n in range(count):
        at = start + 2 * n
        operations.append(op(9, WRITE, f"n{start}-{n}", at, at + 0.5))
        operations.append(op(9, READ, f"n{start}-{n}", at + 1, at + 1.5))
    return operations


def explained(history: list[Operation]) -> tuple[list[Operation], str]:
    violation = minimal_violation(history)
    assert violation is not None
    return violation, describe("r1", violation, history)


def assert_one_minimal(violation: list[Operation]) -> None:
    closure = _Closure(violation)
    for index in range(len(violation)):
        rest = closure(i for i in range(len(violation)) if i != index)
        if len(rest) < len(violation):
            ordered, _ = linearize_register([violation[i] for i in sorted(rest)])
            assert ordered is True, f"{violation[index]} could be removed"


def test_a_stale_read_among_many_operations_is_three_operations() -> None:
    a, b, stale = (
        op(1, WRITE, "a", 100, 101),
        op(2, WRITE, "b", 102, 103),
        op(3, READ, "a", 104, 105),
    )
    history = [*noise(0), a, b, stale, *noise(200)]
    violation, words = explained(history)
    assert violation == [a, b, stale]
    assert_one_minimal(violation)
    assert words.startswith("The read of r1 by client 3 (104.000-105.000 s) returned a after")
    assert "the write of b by client 2 (102.000-103.000 s) was acknowledged" in words


def test_an_absent_item_after_an_acknowledged_write() -> None:
    write, absent = op(1, WRITE, "a", 100, 101), op(2, READ, None, 102, 103)
    violation, words = explained([*noise(0), write, absent])
    assert violation == [write, absent]
    assert "found no item after the write of a" in words


def test_reads_going_back_in_time_past_a_long_write() -> None:
    a = op(1, WRITE, "a", 0, 1)
    b = op(2, WRITE, "b", 2, 10)  # Still running while both reads happen.
    newer, older = op(3, READ, "b", 3, 4), op(4, READ, "a", 5, 6)
    violation, words = explained([a, b, newer, older])
    assert violation == [a, b, newer, older]
    assert_one_minimal(violation)
    assert "after an earlier read had returned b" in words


def test_a_value_nobody_wrote_or_only_a_refused_write_wrote() -> None:
    invented = op(1, READ, "z", 5, 6)
    _, words = explained([*noise(0, 3), invented])
    assert "which no write of this key wrote" in words
    refused = op(2, WRITE, "z", 1, 2, FAILED, "ValidationException")
    violation, words = explained([*noise(0, 3), refused, invented])
    assert violation == [invented]
    assert "only a write the server refused wrote" in words


def test_a_read_of_a_write_not_yet_invoked() -> None:
    early, write = op(1, READ, "b", 0, 1), op(2, WRITE, "b", 2, 3)
    _, words = explained([early, write])
    assert "before the write of b by client 2" in words and "was even invoked" in words


def test_conditional_writes_on_a_replaced_value_and_refused_on_the_latest() -> None:
    a, b = op(1, WRITE, "a", 0, 1), op(2, WRITE, "b", 2, 3)
    lucky = op(3, CAS, ["a", "c"], 4, 5)
    violation, words = explained([a, b, lucky])
    assert violation == [a, b, lucky]
    assert "conditional write of r1 by client 3" in words and "succeeded on a" in words
    refused = op(3, CAS, ["a", "c"], 2, 3, FAILED, CONDITION_FAILED)
    violation, words = explained([a, refused])
    assert violation == [a, refused]
    assert "was refused, although the write of a" in words


def random_linearizable_history(seed: int, operations: int = 40) -> list[Operation]:
    """Clients on one register, each operation taking effect at a random instant of its
    interval, or, for some left unknown, maybe never: linearizable by construction."""
    rng = random.Random(seed)
    effects = []
    for n in range(operations):
        start = rng.uniform(0, operations / 4)
        effects.append((rng.uniform(start, start + 1.0), start, n))
    effects.sort()
    value = None
    seen: dict[int, str | None] = {}
    history = []
    for at, start, n in effects:
        process = n % 5
        end = at + rng.uniform(0, 0.5)
        kind = rng.choice([WRITE, READ, CAS])
        unknown = kind != READ and rng.random() < 0.2
        applied = not unknown or rng.random() < 0.5
        if kind == WRITE:
            if applied:
                value = f"v{n}"
            history.append(op(process, WRITE, f"v{n}", start, end, UNKNOWN if unknown else OK))
        elif kind == READ:
            history.append(op(process, READ, value, start, end))
            seen[process] = value
        else:
            expected = seen.get(process, value) if rng.random() < 0.5 else value
            if unknown:
                if applied and value == expected:
                    value = f"v{n}"
                history.append(op(process, CAS, [expected, f"v{n}"], start, end, UNKNOWN))
            elif value == expected:
                value = f"v{n}"
                history.append(op(process, CAS, [expected, f"v{n}"], start, end))
            else:
                history.append(
                    op(process, CAS, [expected, f"v{n}"], start, end, FAILED, CONDITION_FAILED)
                )
    return sorted(history, key=lambda o: o.invoke_s)


@pytest.mark.parametrize("seed", range(100))
def test_every_closed_subset_of_a_linearizable_history_is_linearizable(seed: int) -> None:
    history = random_linearizable_history(seed)
    considered = [call.operation for call in search_calls(history)]
    assert linearize_register(considered)[0] is True
    assert minimal_violation(history) is None
    closure = _Closure(considered)
    rng = random.Random(seed)
    for _ in range(40):
        share = rng.uniform(0.1, 0.6)
        chosen = closure(i for i in range(len(considered)) if rng.random() < share)
        ordered, _ = linearize_register([considered[i] for i in sorted(chosen)])
        assert ordered is True, [considered[i].to_json() for i in sorted(chosen)]


def test_the_checker_gives_each_violating_key_its_set_and_its_words() -> None:
    a, b, stale = (
        op(1, WRITE, "a", 100, 101),
        op(2, WRITE, "b", 102, 103),
        op(3, READ, "a", 104, 105),
    )
    result = checkers.check_linearizable_registers([*noise(0), a, b, stale])
    [example] = result.counterexamples
    assert example["violation"] == [o.to_json() for o in (a, b, stale)]
    assert example["anomaly"].startswith("The read of r1 by client 3")
