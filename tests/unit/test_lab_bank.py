"""The bank checker (`dynalab.lab.checkers.check_bank`): every balance read must add up to the
opening total, hold no negative balance, and a final read must exist."""

from __future__ import annotations

from typing import Any

from dynalab.lab import checkers
from dynalab.lab.history import BALANCES, TRANSFER, Operation, Outcome


def read(balances: dict[str, int | None], at: float, final: bool = False) -> Operation:
    return Operation(1, BALANCES, "bank", balances, at, at + 0.1, Outcome.OK, final=final)


def transfer(value: list[Any], at: float, outcome: Outcome = Outcome.OK) -> Operation:
    error = None if outcome is Outcome.OK else "TransactionCanceledException"
    return Operation(2, TRANSFER, "bank", value, at, at + 0.1, outcome, error)


def test_a_whole_bank_passes() -> None:
    history = [
        read({"a0": 100, "a1": 100}, 0.0),
        transfer(["a0", "a1", 30], 1.0),
        transfer(["a1", "a0", 500], 2.0, Outcome.FAILED),
        read({"a0": 70, "a1": 130}, 3.0, final=True),
    ]
    result = checkers.check_bank(history)
    assert result.valid
    assert result.details["transfers"] == {"ok": 1, "failed": 1, "unknown": 0}
    assert checkers.check(history)["checkers"]["bank"]["valid"]


def test_half_a_transfer_is_caught() -> None:
    history = [read({"a0": 70, "a1": 100}, 0.0), read({"a0": 70, "a1": 130}, 1.0, final=True)]
    result = checkers.check_bank(history)
    assert not result.valid
    assert result.counterexamples[0]["problem"] == "the balances do not add up"


def test_negative_and_missing_balances_and_no_final_read() -> None:
    history = [read({"a0": -10, "a1": 210}, 0.0), read({"a0": None, "a1": 100}, 1.0)]
    problems = {c["problem"] for c in checkers.check_bank(history).counterexamples}
    assert problems == {
        "a negative balance",
        "an account is missing",
        "no successful final read of the balances",
    }


def test_a_history_without_a_bank_is_not_judged() -> None:
    assert checkers.check_bank([]).valid
