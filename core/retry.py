"""Retry policies as data: how often a failed step is tried again, and how long to wait between.

Every loop that tries a call again (a catalog compare-and-set that lost a race, a request refused
for a stale epoch, an install refused while a write group is open) is bounded three ways: a number
of attempts, a pause that grows exponentially from a base to a cap, and a deadline after which no
attempt starts. A `RetryPolicy` holds those numbers, and `pause` answers the one question a loop
asks after a failed attempt: wait how long, or give up? It is pure: the loop passes in how long it
has run (its own clock) and a random draw in [0, 1) (its own seeded source), so a policy is tested
by stepping numbers, and a simulated run replays its pauses from its seed.

Jitter spreads the processes that failed together (two routers racing on one catalog row) so they
do not retry in lockstep: the pause is drawn from the upper `jitter` share of its ceiling. A jitter
of 1 is "full jitter" (anywhere from 0 to the ceiling, as AWS's Architecture Blog, "Exponential
Backoff And Jitter", recommends for contention); a jitter of 0 is a fixed pause, for loops that
wait for a known short-lived state (a commit group closing) rather than for a rival. gRPC's retry
policy declares the same things as data (`maxAttempts`, `initialBackoff`, `maxBackoff`,
`backoffMultiplier`), with the multiplier fixed at 2 here.

The named policies of the services sit at the end, built from `core.limits`.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import limits

# Past this many doublings the ceiling is the cap anyway (2**64 times any positive base is beyond
# every cap); bounding the exponent keeps the float arithmetic finite for any attempt number.
_DOUBLINGS_MAX = 64


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """At most `attempts_max` attempts; after failed attempt n (from 0) a pause of at most
    `min(cap_seconds, base_seconds * 2**n)`, of which the `jitter` share is drawn at random; no
    attempt starts once `deadline_seconds` have passed since the first began."""

    attempts_max: int
    base_seconds: float
    cap_seconds: float
    deadline_seconds: float
    jitter: float = 1.0

    def __post_init__(self) -> None:
        if not 1 <= self.attempts_max <= limits.RETRY_ATTEMPTS_MAX:
            raise ValueError(
                f"attempts_max {self.attempts_max} is not in 1..{limits.RETRY_ATTEMPTS_MAX}"
            )
        if not 0 <= self.base_seconds <= self.cap_seconds <= limits.RETRY_PAUSE_SECONDS_MAX:
            raise ValueError(
                f"pauses from {self.base_seconds} s to {self.cap_seconds} s are not ordered "
                f"within 0..{limits.RETRY_PAUSE_SECONDS_MAX} s"
            )
        if not self.deadline_seconds > 0:
            raise ValueError(f"deadline {self.deadline_seconds} s is not positive")
        if not 0 <= self.jitter <= 1:
            raise ValueError(f"jitter {self.jitter} is not a share in 0..1")

    def ceiling(self, attempt: int) -> float:
        """The longest pause after failed attempt `attempt` (counted from 0)."""
        assert attempt >= 0, f"attempt {attempt} is counted from 0"
        return min(self.cap_seconds, self.base_seconds * 2.0 ** min(attempt, _DOUBLINGS_MAX))

    def pause(self, attempt: int, elapsed: float, draw: float) -> float | None:
        """How long to wait after failed attempt `attempt` (from 0) before the next, `elapsed`
        seconds after the first began, given a random `draw` in [0, 1); None to give up: that
        was the last attempt, or the next would start past the deadline."""
        assert 0 <= draw < 1, f"draw {draw} is not in [0, 1)"
        assert elapsed >= 0, f"elapsed {elapsed} s is negative"
        if attempt + 1 >= self.attempts_max:
            return None
        ceiling = self.ceiling(attempt)
        pause = ceiling * (1 - self.jitter) + ceiling * self.jitter * draw
        if elapsed + pause > self.deadline_seconds:
            return None
        return pause


# A catalog row's compare-and-set, lost to another writer of the same row (a router, a splitting
# node, the replicator): tried again on the newer row after a pause drawn up to the backoff, so
# racing writers do not collide in lockstep.
CATALOG_CHANGE = RetryPolicy(
    attempts_max=limits.CATALOG_CAS_ATTEMPTS_MAX,
    base_seconds=limits.CATALOG_CAS_BACKOFF_SECONDS_MAX,
    cap_seconds=limits.CATALOG_CAS_BACKOFF_SECONDS_MAX,
    deadline_seconds=limits.CATALOG_CHANGE_SECONDS_MAX,
)

# Locating the catalog (`router.context`): a round that finds the nodes' bootstrap records
# disagreeing (two routers bootstrapping at once) reads them again after a pause drawn up to the
# backoff.
CATALOG_LOCATE = RetryPolicy(
    attempts_max=limits.CATALOG_LOCATE_ATTEMPTS_MAX,
    base_seconds=limits.CATALOG_LOCATE_BACKOFF_SECONDS_MAX,
    cap_seconds=limits.CATALOG_LOCATE_BACKOFF_SECONDS_MAX,
    deadline_seconds=limits.CATALOG_LOCATE_SECONDS_MAX,
)

# A transaction's record step (decide, finish, resolve) or the commit or release of its locks on
# one node, while the node does not answer: 10, 20 ms apart. The deadline never cuts the attempts
# short (each is one node call); they bound it.
TRANSACTION_RECORD = RetryPolicy(
    attempts_max=limits.TRANSACTION_RECORD_ATTEMPTS_MAX,
    base_seconds=limits.STALE_EPOCH_BACKOFF_SECONDS_MIN,
    cap_seconds=limits.STALE_EPOCH_BACKOFF_SECONDS_MIN
    * 2 ** (limits.TRANSACTION_RECORD_ATTEMPTS_MAX - 2),
    deadline_seconds=limits.TRANSACTION_RECORD_ATTEMPTS_MAX * limits.NODE_CALL_SECONDS_MAX,
    jitter=0.0,
)

# TransactGetItems' read rounds while an item was written or locked between two: 10, 20, 40... ms
# apart; each round reads every partition once, within a node call's deadline.
TRANSACT_GET = RetryPolicy(
    attempts_max=limits.TRANSACT_GET_ATTEMPTS_MAX,
    base_seconds=limits.STALE_EPOCH_BACKOFF_SECONDS_MIN,
    cap_seconds=limits.STALE_EPOCH_BACKOFF_SECONDS_MIN
    * 2 ** (limits.TRANSACT_GET_ATTEMPTS_MAX - 2),
    deadline_seconds=limits.TRANSACT_GET_ATTEMPTS_MAX * limits.NODE_CALL_SECONDS_MAX,
    jitter=0.0,
)

# A move's fence while transactions are in flight on its node (`core.machines.move`): refused,
# tried again MOVE_FENCE_BACKOFF_SECONDS apart. The deadline never cuts the attempts short (each
# is one internal write); they bound it.
MOVE_FENCE = RetryPolicy(
    attempts_max=limits.MOVE_FENCE_ATTEMPTS_MAX,
    base_seconds=limits.MOVE_FENCE_BACKOFF_SECONDS,
    cap_seconds=limits.MOVE_FENCE_BACKOFF_SECONDS,
    deadline_seconds=limits.MOVE_FENCE_ATTEMPTS_MAX
    * (limits.MOVE_FENCE_BACKOFF_SECONDS + limits.NODE_CALL_SECONDS_MAX),
    jitter=0.0,
)

# A split's install refused because its parent was written earlier in the same write group
# (`core.machines.split`): tried again in the next group, SPLIT_INSTALL_BACKOFF_SECONDS apart;
# as for the fence, the attempts bound it.
SPLIT_INSTALL = RetryPolicy(
    attempts_max=limits.SPLIT_INSTALL_ATTEMPTS_MAX,
    base_seconds=limits.SPLIT_INSTALL_BACKOFF_SECONDS,
    cap_seconds=limits.SPLIT_INSTALL_BACKOFF_SECONDS,
    deadline_seconds=limits.SPLIT_INSTALL_ATTEMPTS_MAX
    * (limits.SPLIT_INSTALL_BACKOFF_SECONDS + limits.NODE_CALL_SECONDS_MAX),
    jitter=0.0,
)

# The replicator's index_apply on a node that does not answer: from the GSI minimum
# doubling to its maximum, each attempt one node call.
GSI_APPLY = RetryPolicy(
    attempts_max=limits.GSI_APPLY_ATTEMPTS_MAX,
    base_seconds=limits.GSI_RETRY_BACKOFF_SECONDS_MIN,
    cap_seconds=limits.GSI_RETRY_BACKOFF_SECONDS_MAX,
    deadline_seconds=limits.GSI_APPLY_ATTEMPTS_MAX
    * (limits.NODE_CALL_SECONDS_MAX + limits.GSI_RETRY_BACKOFF_SECONDS_MAX),
    jitter=0.0,
)

# The replicator's index_apply refused for throughput by the index partition (its write capacity
# spent): a short pause doubling to a small cap, since the bucket refills continuously and the
# base node holds writes back meanwhile (`core.index_pressure`), within a deadline.
GSI_THROTTLED_APPLY = RetryPolicy(
    attempts_max=limits.GSI_THROTTLED_APPLY_ATTEMPTS_MAX,
    base_seconds=limits.GSI_RETRY_BACKOFF_SECONDS_MIN,
    cap_seconds=limits.GSI_THROTTLED_APPLY_PAUSE_SECONDS_MAX,
    deadline_seconds=limits.GSI_THROTTLED_APPLY_SECONDS_MAX,
    jitter=0.0,
)

# The replicator routing a batch again after an index partition refused it as stale (split, or
# not installed yet): the same doubling; each attempt is a catalog read and one GSI_APPLY run.
GSI_REROUTE = RetryPolicy(
    attempts_max=limits.GSI_REROUTE_ATTEMPTS_MAX,
    base_seconds=limits.GSI_RETRY_BACKOFF_SECONDS_MIN,
    cap_seconds=limits.GSI_RETRY_BACKOFF_SECONDS_MAX,
    deadline_seconds=limits.GSI_REROUTE_ATTEMPTS_MAX
    * (
        limits.NODE_CALL_SECONDS_MAX
        + max(GSI_APPLY.deadline_seconds, GSI_THROTTLED_APPLY.deadline_seconds)
        + limits.NODE_CALL_SECONDS_MAX
        + limits.GSI_RETRY_BACKOFF_SECONDS_MAX
    ),
    jitter=0.0,
)
