"""`core.retry.RetryPolicy`: bounded attempts, doubling ceilings, jitter from a draw, a deadline."""

from __future__ import annotations

import random

import pytest

from core import limits
from core.retry import (
    CATALOG_CHANGE,
    CATALOG_LOCATE,
    GSI_APPLY,
    GSI_REROUTE,
    TRANSACT_GET,
    TRANSACTION_RECORD,
    RetryPolicy,
)

POLICY = RetryPolicy(attempts_max=5, base_seconds=0.01, cap_seconds=0.05, deadline_seconds=1.0)


def test_the_ceiling_doubles_from_the_base_up_to_the_cap() -> None:
    assert [POLICY.ceiling(n) for n in range(5)] == pytest.approx([0.01, 0.02, 0.04, 0.05, 0.05])
    # Far past the cap the arithmetic stays finite.
    assert POLICY.ceiling(10_000) == 0.05


def test_full_jitter_draws_the_pause_from_zero_to_the_ceiling() -> None:
    assert POLICY.pause(0, 0.0, 0.0) == 0.0
    assert POLICY.pause(2, 0.0, 0.5) == pytest.approx(0.02)
    assert POLICY.pause(3, 0.0, 0.999) == pytest.approx(0.04995)


def test_no_jitter_is_a_fixed_pause_and_half_jitter_keeps_the_lower_half() -> None:
    fixed = RetryPolicy(3, 0.1, 0.1, 10.0, jitter=0.0)
    assert fixed.pause(0, 0.0, 0.0) == fixed.pause(0, 0.0, 0.9) == pytest.approx(0.1)
    half = RetryPolicy(3, 0.1, 0.1, 10.0, jitter=0.5)
    assert half.pause(0, 0.0, 0.0) == pytest.approx(0.05)
    assert half.pause(0, 0.0, 0.999) == pytest.approx(0.09995)


def test_the_last_attempt_is_not_followed_by_a_pause() -> None:
    pauses = [POLICY.pause(n, 0.0, 0.5) for n in range(POLICY.attempts_max)]
    assert all(pause is not None for pause in pauses[:-1])
    assert pauses[-1] is None


def test_no_attempt_starts_past_the_deadline() -> None:
    assert POLICY.pause(0, 0.99, 0.5) == pytest.approx(0.005)  # Ends at 0.995 s: in time.
    assert POLICY.pause(0, 0.999, 0.5) is None  # Would end at 1.004 s.
    assert POLICY.pause(0, 1.5, 0.0) is None


def test_a_seeded_source_replays_the_same_pauses() -> None:
    def pauses(seed: int) -> list[float | None]:
        rng = random.Random(seed)
        return [POLICY.pause(n, 0.0, rng.random()) for n in range(POLICY.attempts_max)]

    assert pauses(7) == pauses(7)
    assert pauses(7) != pauses(8)


@pytest.mark.parametrize(
    "arguments",
    [
        (0, 0.01, 0.05, 1.0),  # No attempt at all.
        (limits.RETRY_ATTEMPTS_MAX + 1, 0.01, 0.05, 1.0),
        (3, 0.1, 0.05, 1.0),  # Base above the cap.
        (3, -0.1, 0.05, 1.0),
        (3, 0.01, limits.RETRY_PAUSE_SECONDS_MAX * 2, 1.0),
        (3, 0.01, 0.05, 0.0),  # No time at all.
    ],
)
def test_a_policy_out_of_its_bounds_is_refused(arguments: tuple[int, float, float, float]) -> None:
    with pytest.raises(ValueError):
        RetryPolicy(*arguments)


def test_jitter_is_a_share() -> None:
    with pytest.raises(ValueError):
        RetryPolicy(3, 0.01, 0.05, 1.0, jitter=1.5)


def test_the_catalog_policy_keeps_the_catalog_bounds() -> None:
    assert CATALOG_CHANGE.attempts_max == limits.CATALOG_CAS_ATTEMPTS_MAX
    assert CATALOG_CHANGE.ceiling(0) == CATALOG_CHANGE.ceiling(19)
    assert CATALOG_CHANGE.ceiling(0) == limits.CATALOG_CAS_BACKOFF_SECONDS_MAX
    assert CATALOG_CHANGE.deadline_seconds == limits.CATALOG_CHANGE_SECONDS_MAX


def schedule(policy: RetryPolicy) -> list[float | None]:
    """A policy's pauses after each failed attempt, for a zero draw and no time spent."""
    return [policy.pause(n, 0.0, 0.0) for n in range(policy.attempts_max)]


@pytest.mark.parametrize(
    ("policy", "pauses"),
    [
        # The loops these replaced: the transaction record steps and lock applies waited
        # 10 ms * 2**n; TransactGetItems' rounds the same; the replicator's index_apply and its
        # rerouting from the GSI minimum doubling up to the maximum. None: no pause after the
        # last attempt (the lock apply and TransactGetItems used to wait once more, then give up).
        (TRANSACTION_RECORD, [0.01, 0.02, None]),
        (TRANSACT_GET, [0.01, 0.02, 0.04, 0.08, None]),
        (GSI_APPLY, [0.05, 0.1, 0.2, 0.4, None]),
        (GSI_REROUTE, [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0, None]),
    ],
)
def test_the_fixed_policies_keep_the_pauses_of_the_loops_they_replaced(
    policy: RetryPolicy, pauses: list[float | None]
) -> None:
    assert schedule(policy) == pytest.approx(pauses)
    # No jitter: the draw does not matter.
    assert [policy.pause(n, 0.0, 0.99) for n in range(policy.attempts_max)] == pytest.approx(pauses)


def test_the_locate_policy_draws_up_to_its_backoff_as_the_router_did() -> None:
    assert CATALOG_LOCATE.attempts_max == limits.CATALOG_LOCATE_ATTEMPTS_MAX
    draw = random.Random(3).random()
    expected = random.Random(3).uniform(0, limits.CATALOG_LOCATE_BACKOFF_SECONDS_MAX)
    assert CATALOG_LOCATE.pause(0, 0.0, draw) == expected
