"""The router's sources of time, chance and identity, injected rather than reached for.

Router logic never calls `time.time`, the module-level `random` functions or `uuid.uuid4` itself:
it asks the `Sources` its `RouterContext` was built with. The process edge (`python -m router`)
builds them once with `Sources.system()`, from the wall clock and the operating system's entropy.
A test builds them with `Sources.seeded(seed, start_time)`: a clock that moves only when the test
moves it, and every random draw (table ids, request-id prefixes, compare-and-set backoff) replayed
from one seed, so a failure found under a seed reproduces under that seed.
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

TABLE_ID_HEX_DIGITS = 32  # A table id is a UUID's 128 bits in hex, as DynamoDB's TableId is.


class ManualClock:
    """A wall clock (epoch seconds) that stands still until `advance` moves it."""

    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        assert seconds >= 0, f"a wall clock for tests moves forward, not by {seconds}"
        self.now += seconds


@dataclass(frozen=True)
class Sources:
    """Where one router process gets the time, random numbers and new ids from."""

    clock: Callable[[], float]  # Wall-clock time, in seconds since the epoch.
    rng: random.Random  # Random draws that need no secrecy: backoff jitter.
    new_id: Callable[[], str]  # A new, unique, 32-hex-digit id (a table id, a request-id prefix).

    @classmethod
    def system(cls) -> Sources:
        """The production sources: the system clock and fresh entropy."""
        return cls(clock=time.time, rng=random.Random(), new_id=lambda: uuid.uuid4().hex)

    @classmethod
    def seeded(cls, seed: int, start_time: float) -> Sources:
        """Deterministic sources: a `ManualClock` at `start_time` and draws replayed from `seed`.

        Ids come from a generator of their own (seeded from the first one), so how many backoff
        draws a run makes does not change the ids it hands out.
        """
        rng = random.Random(seed)
        ids = random.Random(rng.getrandbits(64))

        def new_id() -> str:
            return f"{ids.getrandbits(TABLE_ID_HEX_DIGITS * 4):0{TABLE_ID_HEX_DIGITS}x}"

        return cls(clock=ManualClock(start_time), rng=rng, new_id=new_id)
