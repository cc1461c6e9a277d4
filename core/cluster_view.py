"""What the dashboard and `dynalab status` show, computed from what the nodes report: pure.

The router samples every node's token-bucket counters on a timer (`partition_throughput`, see
`rpc.ops`) and keeps the samples in a `ThroughputHistory`, a ring bounded by
`limits.DASHBOARD_SAMPLES_MAX`. The counters are cumulative since each node started, so what a
person wants to see, units consumed per second against units allowed per second and throttled
requests per second, is the difference between two samples divided by the time between them. A
counter that went down means its node restarted and counted again from zero; as Prometheus'
`rate()` does, the new value is then the whole increase. Time is passed in, never read here.

The router's own cumulative counters (its transactions by outcome, ...) ride in the same samples, so
`counter_series` turns them into rates the same way.

`key_range` turns a partition's storage-key bounds into fractions of the 64-bit hash space, which
is how the dashboard draws a table's partitions side by side.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from core.keycodec import HASH_BYTES, HASH_SPACE

KINDS = ("read", "write")

# (table name, partition id): a partition's identity in a sample. Its node is recorded beside it.
PartitionName = tuple[str, str]


@dataclass(frozen=True, slots=True)
class Counters:
    """One token bucket's counters at one sample: cumulative consumed units and throttled
    requests, and the rate the bucket refills at (units per second: what the partition allows)."""

    consumed_units: float
    throttled_requests: int
    rate_per_second: float

    @classmethod
    def from_bucket(cls, bucket: Mapping[str, Any]) -> Counters:
        """From a BUCKET of the partition_throughput reply."""
        return cls(
            float(bucket["consumed_units"]),
            int(bucket["throttled_requests"]),
            float(bucket["rate_per_second"]),
        )


@dataclass(frozen=True, slots=True)
class Sample:
    """Every metered partition's counters, by kind (read, write), and the router's own counters
    by name, taken at `at` (seconds)."""

    at: float
    partitions: Mapping[PartitionName, Mapping[str, Counters]]
    router: Mapping[str, float] = field(default_factory=dict)


def sample_of(
    at: float, partitions: Iterable[Mapping[str, Any]], router: Mapping[str, float] | None = None
) -> Sample:
    """A Sample of partition_throughput entries (`rpc.ops`) and of the router's cumulative
    counters, taken at `at`."""
    return Sample(
        at,
        {
            (str(entry["table_name"]), str(entry["partition_id"])): {
                kind: Counters.from_bucket(entry[kind]) for kind in KINDS
            }
            for entry in partitions
        },
        dict(router or {}),
    )


def _increase(before: float, after: float) -> float:
    """The increase of a cumulative counter; a decrease is a restart that counted from zero."""
    return after - before if after >= before else after


@dataclass(frozen=True, slots=True)
class Point:
    """One interval of one partition's bucket: what it consumed and allowed, per second, and how
    many requests it throttled, per second, in the `seconds` between two samples ending at `at`."""

    at: float
    seconds: float
    consumed_per_second: float
    allowed_per_second: float
    throttled_per_second: float


def points(samples: Iterable[Sample], partition: PartitionName, kind: str) -> list[Point]:
    """The points of one partition's `kind` bucket over consecutive samples.

    An interval is left out unless the partition is in both of its samples (a partition that was
    not metered, or whose node did not answer, has no rate there) and time moved forward.
    """
    result: list[Point] = []
    previous: Sample | None = None
    for sample in samples:
        if previous is not None and sample.at > previous.at:
            before = previous.partitions.get(partition)
            after = sample.partitions.get(partition)
            if before is not None and after is not None:
                elapsed = sample.at - previous.at
                old, new = before[kind], after[kind]
                result.append(
                    Point(
                        at=sample.at,
                        seconds=elapsed,
                        consumed_per_second=_increase(old.consumed_units, new.consumed_units)
                        / elapsed,
                        allowed_per_second=new.rate_per_second,
                        throttled_per_second=_increase(
                            old.throttled_requests, new.throttled_requests
                        )
                        / elapsed,
                    )
                )
        previous = sample
    return result


def series(samples: Iterable[Sample], partition: PartitionName) -> dict[str, list[float]]:
    """One partition's history as columns, as the dashboard's charts take them:
    {"at": [...], "read_consumed": [...], "read_allowed": [...], "read_throttled": [...],
    "write_consumed": ..., ...}; both kinds share the times, since both come from each sample."""
    samples = list(samples)
    columns: dict[str, list[float]] = {"at": []}
    for kind in KINDS:
        kind_points = points(samples, partition, kind)
        if not columns["at"]:
            columns["at"] = [point.at for point in kind_points]
        columns[f"{kind}_consumed"] = [point.consumed_per_second for point in kind_points]
        columns[f"{kind}_allowed"] = [point.allowed_per_second for point in kind_points]
        columns[f"{kind}_throttled"] = [point.throttled_per_second for point in kind_points]
    return columns


def totals(samples: Iterable[Sample], partition: PartitionName) -> dict[str, float]:
    """Units consumed and requests throttled by one partition over all of `samples`, by kind:
    {"read_consumed_units", "read_throttled_requests", "write_...": ...}; restarts included."""
    samples = list(samples)
    result: dict[str, float] = {}
    for kind in KINDS:
        taken = points(samples, partition, kind)
        result[f"{kind}_consumed_units"] = sum(p.consumed_per_second * p.seconds for p in taken)
        result[f"{kind}_throttled_requests"] = round(
            sum(p.throttled_per_second * p.seconds for p in taken)
        )
    return result


def counter_series(samples: Iterable[Sample], names: Iterable[str]) -> dict[str, list[float]]:
    """The router's counters `names` as rates per second between consecutive samples, as columns:
    {"at": [...], name: [...], ...}. A counter a sample lacks counts as zero there (the router
    had counted none yet); a sample no later than the one before it is skipped."""
    names = list(names)
    columns: dict[str, list[float]] = {"at": [], **{name: [] for name in names}}
    previous: Sample | None = None
    for sample in samples:
        if previous is not None:
            if sample.at <= previous.at:
                continue
            elapsed = sample.at - previous.at
            columns["at"].append(sample.at)
            for name in names:
                before, after = previous.router.get(name, 0.0), sample.router.get(name, 0.0)
                columns[name].append(_increase(before, after) / elapsed)
        previous = sample
    return columns


class ThroughputHistory:
    """The last `capacity` samples, oldest first; older ones fall off as new ones come in."""

    def __init__(self, capacity: int) -> None:
        if capacity < 2:
            raise ValueError("a rate needs at least two samples")
        self._samples: deque[Sample] = deque(maxlen=capacity)

    def record(self, sample: Sample) -> None:
        """Keep `sample`; one taken before the newest kept (a clock stepped back) replaces none
        and is dropped, so the samples stay in time order."""
        if self._samples and sample.at <= self._samples[-1].at:
            return
        self._samples.append(sample)

    @property
    def samples(self) -> list[Sample]:
        return list(self._samples)

    def since(self, at: float) -> list[Sample]:
        """The samples taken at or after `at`, plus the one just before it (the start of the
        first interval that ends in the window)."""
        kept = self.samples
        first = next((i for i, sample in enumerate(kept) if sample.at >= at), len(kept))
        return kept[max(0, first - 1) :]


def key_range(start: str, end: str | None) -> tuple[float, float]:
    """A partition's storage-key range [start, end) (hex; end None: unbounded) as fractions of the
    hash space: the first HASH_BYTES of a storage key are the hash of its partition key."""
    return _fraction(start, 0.0), _fraction(end, 1.0)


def _fraction(bound: str | None, unbounded: float) -> float:
    if bound is None:
        return unbounded
    prefix = bytes.fromhex(bound)[:HASH_BYTES].ljust(HASH_BYTES, b"\0")
    return int.from_bytes(prefix, "big") / HASH_SPACE
