"""Per-partition throughput: token buckets that admit or throttle requests the way DynamoDB does.

A partition serves at most its share of the table's throughput, and never more than 3,000 read units
and 1,000 write units per second ("each individual partition is limited to 1000 write units per
second and 3000 read units per second", Developer Guide, "Understanding DynamoDB warm throughput in
different scenarios"). What a client leaves unused is not lost at once: "DynamoDB currently retains
up to 5 minutes (300 seconds) of unused read and write capacity", which a burst may then spend
faster than the per-second rate ("Burst capacity").

`TokenBucket` models exactly that. Tokens accrue continuously at the rate, up to `rate *
burst_seconds`; a new bucket holds one second's worth, so a client at exactly the rate is served
from the first request and the burst bank fills only with what goes unused. A request is admitted
while the balance is positive and then charged in full, so the balance may fall below zero: DynamoDB
admits a read before it knows the size of what it will read and charges the actual units afterwards,
and a large item can cost more than the balance held. A bucket in debt throttles until the rate has
paid the debt back. Time is always an argument (seconds on any monotonic clock), so the bucket is
tested by stepping a number instead of sleeping.

A bank never takes a partition past its hard limit, though: "Burst capacity can't alleviate
partition-level throttling ... If a resulting hot partition exceeds the per partition limits of
3,000 RCU or 1,000 WCU per second ... your table throttles" (AWS Knowledge Center, "How does
DynamoDB handle spiky workloads"). So a bucket may also have a peak: a second balance that refills
at the peak rate and holds one second of it, which every request must find positive too.

`PartitionThroughput` is one partition's read and write bucket, sized from the table's billing mode
(`bucket_shapes`).

**On-demand partitions.** An on-demand table has no provisioned units to divide: "a new on-demand
table will be able to sustain up to 4,000 writes per second and 12,000 reads per second"
(Developer Guide, "Initial throughput for on-demand capacity mode"), which is its four initial
partitions at their ceilings (`core.placement`), and it grows past that by splitting partitions
that are throttled at a ceiling while their traffic is spread (`core.heat`), so a partition's own
ceiling is all a request on such a table meets. DynamoDB serves a moment's burst past that
ceiling, though: a new on-demand table takes 30 quick 100 KB puts to one key (3,000 units in well
under a second) and 50 spread over its keys. So an on-demand partition's bucket refills at the
ceiling and banks ON_DEMAND_PARTITION_BURST_SECONDS of it (dynalab's window; AWS publishes none),
with no separate peak: a hot key gets that burst once, then the ceiling, sustained. The 300 s
bank of unused capacity is a provisioned table's; `DYNALAB_BURST_SECONDS` shortens only that one.

**Burst credit for new and resized partitions (dynalab's assumption).** AWS documents only that
DynamoDB "retains up to 5 minutes (300 seconds) of unused read and write capacity", not what a
partition holds when it is born. What a user sees is that a new table serves its first bursts: the
Developer Guide's tutorial table of 5 RCU / 5 WCU takes a quick load of 100 items without a
throttle. dynalab grants that by treating a new partition as if it had sat unused for the whole
burst window: its bank starts full (`rate * burst_seconds`). A partition whose rate rises
(UpdateTable) is credited the same way for the added rate: `(new - old) * burst_seconds`, up to its
new cap; a falling rate shrinks the bank to the new cap. The sustained ceiling is unchanged: tokens
still accrue only at the rate, a debt is still repaid at the rate, and the peak still bounds every
burst at the partition limit. A request is admitted on a positive balance and charged in full, so
one item larger than the bank (400 KB on a 1 WCU table) leaves a debt of what it cost beyond the
bank, which is the time DynamoDB's sustained rate needs for it too; a large item on a new small
table is simply paid from its full bank. `burst_seconds` shorter than DynamoDB's 300 s (the
`DYNALAB_BURST_SECONDS` setting of a node) shortens both the bank and this initial credit, so a
benchmark reaches the sustained ceiling within seconds.

**A split's children share what the parent held.** DynamoDB's children share their parent's
capacity rather than each getting a fresh burst: a child's buckets start with its share of the
parent's balances at the moment of the split (`inherit`: half each, for two halves; a debt is
shared the same way, so a split never forgives it), capped at the child's own bank, and the
peaks stay at the partition limits. So a partition throttled at its ceiling that splits for heat
gains its children's added rate, not a burst of 2 x 300 s of credit out of nothing.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass

from core import limits
from core.errors import ThroughputExceeded


@dataclass
class BucketStats:
    """What one bucket has admitted and refused, for the admin endpoint and metrics."""

    admitted_requests: int = 0
    throttled_requests: int = 0
    # Units charged: those of admitted requests plus later corrections to them.
    consumed_units: float = 0.0
    # Units that throttled requests asked for.
    throttled_units: float = 0.0


class TokenBucket:
    """Units per second with a burst bank of unused capacity; admits while the balance is positive.

    With `peak_per_second`, no burst serves more than that many units in any second.
    """

    def __init__(
        self,
        rate_per_second: float,
        *,
        now: float,
        burst_seconds: float = limits.BURST_SECONDS_MAX,
        peak_per_second: float | None = None,
        full: bool = False,
    ) -> None:
        _check_rate(rate_per_second)
        if not 0 < burst_seconds <= limits.BURST_SECONDS_MAX:
            raise ValueError(
                f"burst_seconds must be in (0, {limits.BURST_SECONDS_MAX}], not {burst_seconds}"
            )
        if peak_per_second is not None:
            _check_rate(peak_per_second)
        self._rate = float(rate_per_second)
        self._burst_seconds = float(burst_seconds)
        self._peak = None if peak_per_second is None else float(peak_per_second)
        _check_within_peak(self._rate, self._peak)
        # A full bank when asked for (a new partition's burst credit); otherwise one second's
        # capacity, so that a client sending exactly the rate is never throttled, and nothing more.
        self._balance = self.capacity if full else min(self._rate, self.capacity)
        # The peak's balance holds at most one second at the peak rate: it bounds a burst's speed,
        # never the amount banked.
        self._peak_balance = self._peak if self._peak is not None else math.inf
        self._updated_at = now
        self.stats = BucketStats()

    @property
    def rate_per_second(self) -> float:
        return self._rate

    @property
    def burst_seconds(self) -> float:
        return self._burst_seconds

    @property
    def peak_per_second(self) -> float | None:
        return self._peak

    @property
    def capacity(self) -> float:
        """The most tokens the bucket holds: `burst_seconds` of unused capacity."""
        return self._rate * self._burst_seconds

    def balance(self, now: float) -> float:
        """Tokens in the bank at `now`; negative while the bucket is paying back a debt."""
        self._refill(now)
        return self._balance

    def try_acquire(self, units: float, now: float) -> bool:
        """Admit a request costing `units` (an estimate, for a read) if the balance is positive.

        An admitted request is charged in full even past the balance, leaving a debt; a refused one
        costs nothing and is counted as throttled.
        """
        if units < 0 or not math.isfinite(units):
            raise ValueError(f"a request costs a finite, non-negative number of units, not {units}")
        self._refill(now)
        if self._balance <= 0 or self._peak_balance <= 0:
            self.stats.throttled_requests += 1
            self.stats.throttled_units += units
            return False
        self._take(units)
        self.stats.admitted_requests += 1
        return True

    def charge(self, units: float, now: float) -> None:
        """Correct an admitted request's estimate by `units`, negative when it cost less.

        A read is admitted on an estimate and its real cost is known only once the items have been
        read; DynamoDB then charges the real cost, whatever the balance, so this never refuses.
        """
        if not math.isfinite(units):
            raise ValueError(f"a charge must be finite, not {units}")
        self._refill(now)
        self._take(units)

    def set_rate(self, rate_per_second: float, now: float) -> None:
        """Change the rate (UpdateTable, or a split that changes the partition's share) from `now`.

        Time until `now` accrues at the old rate. A bank larger than the new cap shrinks to it; a
        debt stays to be paid at the new rate.
        """
        self.reshape(
            rate_per_second, now, burst_seconds=self._burst_seconds, peak_per_second=self._peak
        )

    def reshape(
        self,
        rate_per_second: float,
        now: float,
        *,
        burst_seconds: float,
        peak_per_second: float | None,
    ) -> None:
        """Change the rate, the bank's window and the peak at once from `now` (a table that
        changes billing mode: its partitions keep what they hold, within the new bank).

        Time until `now` accrues as before. A bank larger than the new cap shrinks to it, a debt
        stays to be paid at the new rate; a new peak starts with one second of it.
        """
        _check_rate(rate_per_second)
        if not 0 < burst_seconds <= limits.BURST_SECONDS_MAX:
            raise ValueError(
                f"burst_seconds must be in (0, {limits.BURST_SECONDS_MAX}], not {burst_seconds}"
            )
        if peak_per_second is not None:
            _check_rate(peak_per_second)
        _check_within_peak(rate_per_second, peak_per_second)
        self._refill(now)
        self._rate = float(rate_per_second)
        self._burst_seconds = float(burst_seconds)
        self._balance = min(self._balance, self.capacity)
        if peak_per_second is None:
            self._peak = None
            self._peak_balance = math.inf
        else:
            self._peak_balance = min(self._peak_balance, float(peak_per_second))
            self._peak = float(peak_per_second)

    def grant(self, units: float, now: float) -> None:
        """Credit `units` of burst capacity (a resized partition's), never past the cap."""
        if units < 0 or not math.isfinite(units):
            raise ValueError(f"a grant is a finite, non-negative number of units, not {units}")
        self._refill(now)
        self._balance = min(self._balance + units, self.capacity)

    def inherit(self, parent: TokenBucket, share: float, now: float) -> None:
        """Hold `share` of what `parent` holds at `now`, a debt too, never past this bucket's
        bank (a split's child; `share` is the child's part of the parent, in (0, 1])."""
        if not 0 < share <= 1:
            raise ValueError(f"a child's share of its parent is in (0, 1], not {share}")
        held = parent.balance(now) * share
        self._refill(now)
        self._balance = min(held, self.capacity)
        if self._peak is not None:
            self._peak_balance = min(parent._peak_balance, self._peak)

    def hold(self, balance: float, now: float) -> None:
        """Hold `balance` at `now`, a debt too, never past this bucket's bank (a partition moved
        to another node carries what its bucket held on the node it left)."""
        self._refill(now)
        self._balance = min(balance, self.capacity)

    def _take(self, units: float) -> None:
        # A negative charge is a refund, which never lifts a balance past what it may hold.
        self._balance = min(self._balance - units, self.capacity)
        if self._peak is not None:
            self._peak_balance = min(self._peak_balance - units, self._peak)
        self.stats.consumed_units += units

    def _refill(self, now: float) -> None:
        # Callers on several threads may read the clock in one order and reach the bucket in
        # another; time that seems to run backwards adds nothing rather than removing tokens.
        if now > self._updated_at:
            elapsed = now - self._updated_at
            self._balance = min(self._balance + elapsed * self._rate, self.capacity)
            if self._peak is not None:
                self._peak_balance = min(self._peak_balance + elapsed * self._peak, self._peak)
            self._updated_at = now


def _check_within_peak(rate_per_second: float, peak_per_second: float | None) -> None:
    if peak_per_second is not None and rate_per_second > peak_per_second:
        raise ValueError(f"a rate of {rate_per_second} is past the peak of {peak_per_second}")


def _check_rate(rate_per_second: float) -> None:
    if not (rate_per_second > 0 and math.isfinite(rate_per_second)):
        raise ValueError(f"a rate must be a positive number of units per second: {rate_per_second}")


class BillingMode(enum.StrEnum):
    """A table's BillingMode, as CreateTable and UpdateTable spell it."""

    PROVISIONED = "PROVISIONED"
    PAY_PER_REQUEST = "PAY_PER_REQUEST"


@dataclass(frozen=True)
class ThroughputSettings:
    """The table's (or a GSI's) throughput as the catalog holds it.

    The units are the table's whole provisioned ReadCapacityUnits and WriteCapacityUnits, which
    only PROVISIONED uses; the maximums are an on-demand table's OnDemandThroughput (None: no
    maximum), which only PAY_PER_REQUEST uses.
    """

    billing_mode: BillingMode
    read_capacity_units: int = 0
    write_capacity_units: int = 0
    max_read_request_units: int | None = None
    max_write_request_units: int | None = None

    def __post_init__(self) -> None:
        if self.billing_mode == BillingMode.PROVISIONED and (
            min(self.read_capacity_units, self.write_capacity_units) < limits.PROVISIONED_UNITS_MIN
        ):
            raise ValueError(
                "a provisioned table has at least "
                f"{limits.PROVISIONED_UNITS_MIN} read and write capacity unit: {self}"
            )
        maximums = (self.max_read_request_units, self.max_write_request_units)
        if self.billing_mode == BillingMode.PROVISIONED and maximums != (None, None):
            raise ValueError(f"only an on-demand table has maximum request units: {self}")
        if any(maximum is not None and maximum < 1 for maximum in maximums):
            raise ValueError(f"a maximum is at least one request unit: {self}")


def partition_rates(settings: ThroughputSettings, partition_count: int) -> tuple[float, float]:
    """Read and write units per second one of `partition_count` partitions may serve.

    PROVISIONED divides the table's units evenly across its partitions, as DynamoDB does; every mode
    caps a partition at 3,000 read and 1,000 write units per second, which is all an on-demand
    partition is limited by unless its table has an OnDemandThroughput, whose maximums are divided
    as provisioned units are.
    """
    if partition_count < 1:
        raise ValueError(f"a table has at least one partition, not {partition_count}")
    if settings.billing_mode == BillingMode.PAY_PER_REQUEST:
        return (
            _share(settings.max_read_request_units, partition_count, limits.PARTITION_RCU_MAX),
            _share(settings.max_write_request_units, partition_count, limits.PARTITION_WCU_MAX),
        )
    return (
        min(settings.read_capacity_units / partition_count, float(limits.PARTITION_RCU_MAX)),
        min(settings.write_capacity_units / partition_count, float(limits.PARTITION_WCU_MAX)),
    )


def _share(maximum: int | None, partition_count: int, ceiling: int) -> float:
    return float(ceiling) if maximum is None else min(maximum / partition_count, float(ceiling))


@dataclass(frozen=True, slots=True)
class BucketShape:
    """How one of a partition's buckets is sized: its rate, the seconds of it the bank holds and
    the peak no burst passes (None: the bank alone bounds a burst)."""

    rate_per_second: float
    burst_seconds: float
    peak_per_second: float | None


def bucket_shapes(
    settings: ThroughputSettings, partition_count: int, burst_seconds: float
) -> tuple[BucketShape, BucketShape]:
    """The read and the write bucket of one of `partition_count` partitions.

    A provisioned partition banks `burst_seconds` of its share of the table's units, and its
    peak (the partition's ceiling) bounds how fast it spends them. An on-demand partition's rate
    is the ceiling itself, and its bank is ON_DEMAND_PARTITION_BURST_SECONDS of it: a moment's
    burst past the ceiling, then the ceiling (see the module's docstring). Under an
    OnDemandThroughput its rate is its share of the maximum, with the same short bank: DynamoDB
    enforces a maximum "on a best-effort basis", burst capacity letting a workload pass it for a
    moment (Developer Guide, "DynamoDB maximum throughput for on-demand tables"), not for minutes.
    """
    read_rate, write_rate = partition_rates(settings, partition_count)
    if settings.billing_mode == BillingMode.PAY_PER_REQUEST:
        window = float(limits.ON_DEMAND_PARTITION_BURST_SECONDS)
        return BucketShape(read_rate, window, None), BucketShape(write_rate, window, None)
    return (
        BucketShape(read_rate, burst_seconds, float(limits.PARTITION_RCU_MAX)),
        BucketShape(write_rate, burst_seconds, float(limits.PARTITION_WCU_MAX)),
    )


class PartitionThroughput:
    """The read and the write bucket of one partition leader."""

    def __init__(
        self,
        settings: ThroughputSettings,
        partition_count: int,
        *,
        now: float,
        burst_seconds: float = limits.BURST_SECONDS_MAX,
    ) -> None:
        self._burst_seconds = burst_seconds
        read, write = bucket_shapes(settings, partition_count, burst_seconds)
        # A new partition starts with a full bank: its burst credit (see the module's docstring).
        self.read = _bucket(read, now)
        self.write = _bucket(write, now)

    def reconfigure(self, settings: ThroughputSettings, partition_count: int, now: float) -> None:
        """Apply new settings or a new partition count (UpdateTable, a split), keeping the banks.

        A bucket whose rate rises is credited the burst window's worth of the added rate; a
        change of billing mode reshapes the buckets, which keep what they hold within the new
        bank.
        """
        shapes = bucket_shapes(settings, partition_count, self._burst_seconds)
        for bucket, shape in zip((self.read, self.write), shapes, strict=True):
            added = shape.rate_per_second - bucket.rate_per_second
            bucket.reshape(
                shape.rate_per_second,
                now,
                burst_seconds=shape.burst_seconds,
                peak_per_second=shape.peak_per_second,
            )
            if added > 0:
                bucket.grant(added * bucket.burst_seconds, now)

    def inherit(self, parent: PartitionThroughput, share: float, now: float) -> None:
        """Start both buckets from `share` of the parent's (a split's child; see `inherit`)."""
        self.read.inherit(parent.read, share, now)
        self.write.inherit(parent.write, share, now)

    def hold(self, read: float, write: float, now: float) -> None:
        """Hold these balances in the read and the write bucket (a moved partition; see `hold`)."""
        self.read.hold(read, now)
        self.write.hold(write, now)

    def admit_read(self, units: float, now: float) -> None:
        """Admit a read estimated at `units`, or raise ProvisionedThroughputExceededException."""
        if not self.read.try_acquire(units, now):
            raise ThroughputExceeded()

    def admit_write(self, units: float, now: float) -> None:
        """Admit a write of `units`, or raise ProvisionedThroughputExceededException."""
        if not self.write.try_acquire(units, now):
            raise ThroughputExceeded()


def _bucket(shape: BucketShape, now: float) -> TokenBucket:
    return TokenBucket(
        shape.rate_per_second,
        now=now,
        burst_seconds=shape.burst_seconds,
        peak_per_second=shape.peak_per_second,
        full=True,
    )
