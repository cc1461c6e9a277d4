"""A storage node's settings, read once at start (`core.settings`).

Every field has DynamoDB's value or the node's named limit as its default; the environment
variables exist for experiments and tests that need to reach a bound quickly (a split at kilobytes,
a full disk at megabytes, a stream that expires in seconds) and for containers configured without a
command line. `python -m storagenode --help` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import limits
from core.settings import SettingError, at_least, seconds_within, setting, switch
from storagenode import metrics


def _listen(text: str) -> str:
    metrics.parse_listen(text)  # Refused here, at start, rather than when the server binds.
    return text


@dataclass(frozen=True, slots=True)
class NodeSettings:
    throttling: bool = setting(
        True, "DYNALAB_THROTTLING", switch, "enforce tables' throughput (off: nothing is metered)"
    )
    burst_seconds: float = setting(
        float(limits.BURST_SECONDS_MAX),
        "DYNALAB_BURST_SECONDS",
        seconds_within(0, limits.BURST_SECONDS_MAX, open_below=True),
        "seconds of unused capacity a partition keeps as burst credit",
    )
    item_collection_bytes_max: int = setting(
        limits.ITEM_COLLECTION_BYTES_MAX,
        "DYNALAB_ITEM_COLLECTION_BYTES_MAX",
        at_least(1, "byte"),
        "the cap on an item collection of a table with local indexes",
    )
    gsi_lag_records_max: int = setting(
        limits.GSI_LAG_RECORDS_MAX,
        "DYNALAB_GSI_LAG_RECORDS_MAX",
        at_least(1, "record"),
        "change records a global index may lag before base writes are throttled",
    )
    disk_reserve_bytes: int = setting(
        limits.DISK_RESERVE_BYTES,
        "DYNALAB_DISK_RESERVE_BYTES",
        at_least(1, "byte"),
        "free disk space the node keeps; client writes are refused below it",
    )
    split_bytes: int = setting(
        limits.PARTITION_SPLIT_BYTES_DEFAULT,
        "DYNALAB_SPLIT_BYTES",
        at_least(1, "byte"),
        "a partition splits past this many bytes of items",
    )
    split_for_heat: bool = setting(
        True,
        "DYNALAB_SPLIT_FOR_HEAT",
        switch,
        "split a partition whose traffic is throttled at its ceiling",
    )
    stream_retention_seconds: float = setting(
        float(limits.STREAM_RETENTION_SECONDS),
        "DYNALAB_STREAM_RETENTION_SECONDS",
        seconds_within(0, float(limits.STREAM_RETENTION_SECONDS), open_below=True),
        "how long stream records are kept",
    )
    ttl_sweep_seconds: float = setting(
        limits.TTL_SWEEP_SECONDS_DEFAULT,
        "DYNALAB_TTL_SWEEP_SECONDS",
        seconds_within(limits.TTL_SWEEP_SECONDS_MIN, limits.TTL_SWEEP_SECONDS_MAX),
        "how often the TTL sweeper looks for expired items",
    )
    metrics_listen: str = setting(
        "",
        "DYNALAB_METRICS_LISTEN",
        _listen,
        "HOST:PORT or PORT for Prometheus metrics; unset: off",
    )
    raft_log_compact_entries: int = setting(
        limits.RAFT_LOG_COMPACT_ENTRIES,
        "DYNALAB_RAFT_LOG_COMPACT_ENTRIES",
        at_least(2, "entry"),
        "a partition's Raft log is compacted once it holds this many applied entries",
    )
    raft_log_kept_entries: int = setting(
        limits.RAFT_LOG_KEPT_ENTRIES,
        "DYNALAB_RAFT_LOG_KEPT_ENTRIES",
        at_least(1, "entry"),
        "entries a compacted log keeps for members a little behind (fewer than it compacts at)",
    )
    heal_seconds: float = setting(
        limits.HEAL_SECONDS_DEFAULT,
        "DYNALAB_HEAL_SECONDS",
        seconds_within(0, limits.HEAL_SECONDS_MAX),
        "a peer not heard from this long is lost: the partitions this node leads move their "
        "replicas off it (0: never)",
    )

    def __post_init__(self) -> None:
        if self.raft_log_kept_entries >= self.raft_log_compact_entries:
            raise SettingError(
                "DYNALAB_RAFT_LOG_KEPT_ENTRIES must be less than DYNALAB_RAFT_LOG_COMPACT_ENTRIES"
            )
