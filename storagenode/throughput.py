"""Per-partition throughput on a storage node: admitting, charging and counting reads and writes.

A storage node is the leader of every partition it hosts (there is one copy of each), so it runs
each partition's token buckets (`core.token_bucket.PartitionThroughput`), sized from the table's
throughput settings that create_partition and update_throughput deliver and the partition's
metadata keeps across restarts. `NodeThroughput` holds them, keyed by (table id, partition id),
and is the only thing `StorageNode` asks. A partition without settings (created by a caller that
sends none, as the node's own unit tests do) is not metered.

- a read is admitted on its minimum cost (half a unit eventually consistent, one strongly) before
  it runs, because its size is known only once read, and then charged the rest of its real cost;
  the charge may leave the bucket in debt, which DynamoDB also allows;
- a write is admitted on an estimate before it is applied (a put on the size of its new item, an
  update or delete on one unit: the old item's size is known only inside the write transaction),
  and charged the difference once the transaction has measured the old and new item. A write
  refused here is never applied.

Time comes from an injectable clock, so tests step a number instead of sleeping. The buckets are
touched from the event loop (reads, reports) and from the group-commit thread (writes, settings),
so each partition's state has a lock; it is uncontended almost always, and cheaper than the
arithmetic it guards.

`DYNALAB_THROTTLING=off` turns enforcement off for benchmark comparisons: nothing is metered at
all. `DYNALAB_BURST_SECONDS` shortens the burst bank (DynamoDB's 300 s) so that tests can spend a
burst in seconds; it is never meant for production.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from core import limits
from core.capacity import read_consistency, read_units, write_units
from core.errors import OnDemandThrottled, ThrottleLimit, ThrottlingReason, ThroughputExceeded
from core.token_bucket import (
    BillingMode,
    PartitionThroughput,
    ThroughputSettings,
    TokenBucket,
    partition_rates,
)

PartitionKey = tuple[str, str]  # (table id, partition id)
Clock = Callable[[], float]

_ON_DEMAND = ThroughputSettings(BillingMode.PAY_PER_REQUEST)


def settings_of(throughput: Mapping[str, Any]) -> tuple[ThroughputSettings, int]:
    """The ThroughputSettings and partition count of a THROUGHPUT document."""
    mode = BillingMode(throughput["billing_mode"])
    count = max(1, int(throughput.get("partition_count") or 1))
    if mode == BillingMode.PAY_PER_REQUEST:
        max_read, max_write = throughput.get("max_read"), throughput.get("max_write")
        if max_read is None and max_write is None:
            return _ON_DEMAND, count
        settings = ThroughputSettings(
            mode,
            max_read_request_units=None if max_read is None else int(max_read),
            max_write_request_units=None if max_write is None else int(max_write),
        )
        return settings, count
    return ThroughputSettings(mode, int(throughput["read"]), int(throughput["write"])), count


def version_of(throughput: Mapping[str, Any] | None) -> int:
    return 0 if throughput is None else int(throughput.get("version") or 0)


class _PartitionMeter:
    """One partition's buckets, the settings they were sized from, and the lock guarding both."""

    __slots__ = ("buckets", "document", "lock", "partition_count", "settings", "table_name")

    def __init__(
        self,
        table_name: str,
        document: Mapping[str, Any],
        now: float,
        burst_seconds: float,
    ) -> None:
        self.lock = threading.Lock()
        self.table_name = table_name
        self.document = document
        self.settings, self.partition_count = settings_of(document)
        self.buckets = PartitionThroughput(
            self.settings, self.partition_count, now=now, burst_seconds=burst_seconds
        )

    def throttled(self, *, read: bool) -> ThroughputExceeded:
        """The refusal of a request its read or write bucket cannot admit, with its reason: the
        table's provisioned units (or, on demand, its OnDemandThroughput), unless the partition's
        rate is its ceiling (`partition_rates` caps every partition, and is all an on-demand
        partition without a maximum is limited by). An on-demand partition's refusal is
        DynamoDB's ThrottlingException."""
        rates = partition_rates(self.settings, self.partition_count)
        ceiling = limits.PARTITION_RCU_MAX if read else limits.PARTITION_WCU_MAX
        below_ceiling = rates[0 if read else 1] < ceiling
        if self.settings.billing_mode is BillingMode.PAY_PER_REQUEST:
            limit = ThrottleLimit.MAX_ON_DEMAND if below_ceiling else ThrottleLimit.KEY_RANGE
            reason = ThrottlingReason.of(self.table_name, read=read, limit=limit)
            return OnDemandThrottled(reasons=(reason,))
        reason = ThrottlingReason.of(self.table_name, read=read, provisioned=below_ceiling)
        return ThroughputExceeded(reasons=(reason,))

    def follow(self, document: Mapping[str, Any], now: float) -> None:
        """Re-size the buckets for new settings, keeping what they have banked."""
        settings, count = settings_of(document)
        with self.lock:
            self.document = document
            if (settings, count) != (self.settings, self.partition_count):
                self.buckets.reconfigure(settings, count, now)
                self.settings, self.partition_count = settings, count


class NodeThroughput:
    """The token buckets of every partition on one node, and the switch that turns them off."""

    def __init__(
        self,
        *,
        enforced: bool = True,
        clock: Clock = time.monotonic,
        burst_seconds: float = limits.BURST_SECONDS_MAX,
    ) -> None:
        if not 0 < burst_seconds <= limits.BURST_SECONDS_MAX:
            raise ValueError(
                f"burst_seconds must be in (0, {limits.BURST_SECONDS_MAX}], not {burst_seconds}"
            )
        self.enforced = enforced
        self.clock = clock
        self.burst_seconds = float(burst_seconds)
        self._meters: dict[PartitionKey, _PartitionMeter] = {}

    # Partitions ---------------------------------------------------------------------------------

    def track(self, key: PartitionKey, table_name: str, document: Mapping[str, Any] | None) -> None:
        """Meter partition `key` with `document`'s settings: new buckets, or re-sized ones.

        Cheap when nothing changed (the partition metadata of every write batch comes through
        here), since an unchanged partition shares its settings document with the last one.
        """
        if not self.enforced:
            return
        if document is None:
            self._meters.pop(key, None)
            return
        meter = self._meters.get(key)
        if meter is None:
            # A new partition's buckets start with a full bank, its burst credit
            # (`core.token_bucket`).
            self._meters[key] = _PartitionMeter(
                table_name, document, self.clock(), self.burst_seconds
            )
        elif meter.document is not document and meter.document != document:
            meter.follow(document, self.clock())

    def forget(self, key: PartitionKey) -> None:
        self._meters.pop(key, None)

    def split(
        self,
        parent: PartitionKey,
        children: Sequence[tuple[PartitionKey, str, Mapping[str, Any] | None]],
    ) -> None:
        """Meter a split's children (key, table name, settings) from the parent's buckets: each
        starts with its share of what the parent holds now (`TokenBucket.inherit`), the share
        being the parent's partition count over the child's (a half). Called after the split's
        commit, before the children are tracked, which then keeps these buckets."""
        meter = self._meters.get(parent) if self.enforced else None
        if meter is None:
            return
        now = self.clock()
        for key, table_name, document in children:
            if document is None:
                continue
            child = _PartitionMeter(table_name, document, now, self.burst_seconds)
            with meter.lock:
                share = min(1.0, meter.partition_count / child.partition_count)
                child.buckets.inherit(meter.buckets, share, now)
            self._meters[key] = child

    def balances(self, key: PartitionKey) -> dict[str, float] | None:
        """What partition `key`'s read and write buckets hold now (None: not metered), for a
        move to carry to the partition's next node."""
        meter = self._meters.get(key) if self.enforced else None
        if meter is None:
            return None
        now = self.clock()
        with meter.lock:
            return {
                "read": meter.buckets.read.balance(now),
                "write": meter.buckets.write.balance(now),
            }

    def carry(self, key: PartitionKey, balances: Mapping[str, float]) -> None:
        """Start partition `key`'s buckets from what they held on the node it moved from
        (`balances`), as a split's children start from their parent's: no fresh burst."""
        meter = self._meters.get(key) if self.enforced else None
        if meter is None:
            return
        with meter.lock:
            meter.buckets.hold(float(balances["read"]), float(balances["write"]), self.clock())

    # Reads --------------------------------------------------------------------------------------

    def admit_read(self, key: PartitionKey, consistent: bool) -> float:
        """Admit a read of partition `key` on its minimum cost; return the units charged.

        Raises ProvisionedThroughputExceededException (an on-demand table's: ThrottlingException)
        when the read bucket is empty. Returns 0 when nothing is metered (enforcement off, or a
        partition this node does not hold, which the read itself will refuse).
        """
        meter = self._meters.get(key) if self.enforced else None
        if meter is None:
            return 0.0
        estimate = _min_read_units(consistent)
        with meter.lock:
            if not meter.buckets.read.try_acquire(estimate, self.clock()):
                raise meter.throttled(read=True)
        return estimate

    def settle_read(
        self, key: PartitionKey, consistent: bool, read_bytes: int | None, charged: float
    ) -> None:
        """Charge an admitted read its real cost for `read_bytes` (None: it failed, refund)."""
        cost = 0.0 if read_bytes is None else read_units(read_bytes, read_consistency(consistent))
        self._settle(key, cost - charged, read=True)

    # Writes -------------------------------------------------------------------------------------

    def admit_write(self, key: PartitionKey, estimate_bytes: int | None) -> float:
        """Admit a write to partition `key` on an estimate; return the units charged.

        `estimate_bytes` is the new item's size for a put, None when unknown (one unit). Raises
        ProvisionedThroughputExceededException (ThrottlingException on demand) when the write
        bucket is empty; returns 0 when nothing is metered.
        """
        meter = self._meters.get(key) if self.enforced else None
        if meter is None:
            return 0.0
        estimate = write_units(estimate_bytes or 0)
        with meter.lock:
            if not meter.buckets.write.try_acquire(estimate, self.clock()):
                raise meter.throttled(read=False)
        return estimate

    def settle_write(self, key: PartitionKey, units: float, charged: float) -> None:
        """Charge an admitted write its real cost `units` (0 when it was not applied: a refund)."""
        self._settle(key, units - charged, read=False)

    def try_charge(self, key: PartitionKey, units: float, *, read: bool) -> bool:
        """Charge partition `key` a transaction's measured `units` if its bucket has a positive
        balance (True, possibly leaving a debt, as any admitted request may); False when it is
        throttled (nothing charged). True when nothing is metered."""
        meter = self._meters.get(key) if self.enforced else None
        if meter is None:
            return True
        with meter.lock:
            bucket = meter.buckets.read if read else meter.buckets.write
            return bucket.try_acquire(units, self.clock())

    def on_demand(self, key: PartitionKey) -> bool:
        """Whether partition `key`'s table is billed per request (throttled transactions then
        get ThrottlingError rather than ProvisionedThroughputExceeded)."""
        meter = self._meters.get(key)
        return meter is not None and meter.settings.billing_mode is BillingMode.PAY_PER_REQUEST

    def _settle(self, key: PartitionKey, correction: float, *, read: bool) -> None:
        if correction == 0.0:
            return
        meter = self._meters.get(key)
        if meter is None:  # Dropped meanwhile: nothing left to charge.
            return
        with meter.lock:
            bucket = meter.buckets.read if read else meter.buckets.write
            bucket.charge(correction, self.clock())

    # Reporting ----------------------------------------------------------------------------------

    def report(self, table_id: str | None = None) -> dict[str, Any]:
        """The partition_throughput reply (`rpc.ops`): every metered partition's state."""
        now = self.clock()
        partitions = []
        for (meter_table, partition_id), meter in list(self._meters.items()):
            if table_id is not None and meter_table != table_id:
                continue
            with meter.lock:
                partitions.append(
                    {
                        "table_id": meter_table,
                        "table_name": meter.table_name,
                        "partition_id": partition_id,
                        "billing_mode": meter.settings.billing_mode.value,
                        "partition_count": meter.partition_count,
                        "version": version_of(meter.document),
                        "read": _bucket_report(meter.buckets.read, now),
                        "write": _bucket_report(meter.buckets.write, now),
                    }
                )
        return {
            "enforced": self.enforced,
            "burst_seconds": self.burst_seconds,
            "partitions": partitions,
        }


def _min_read_units(consistent: bool) -> float:
    # The least any read costs: one started 4 KB, halved when eventually consistent.
    return read_consistency(consistent).value


def _bucket_report(bucket: TokenBucket, now: float) -> dict[str, Any]:
    stats = bucket.stats
    return {
        "rate_per_second": bucket.rate_per_second,
        "balance": bucket.balance(now),
        "consumed_units": stats.consumed_units,
        "throttled_units": stats.throttled_units,
        "admitted_requests": stats.admitted_requests,
        "throttled_requests": stats.throttled_requests,
    }
