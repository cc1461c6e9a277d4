"""A router's settings, read once at start (`core.settings`).

Every default is DynamoDB's value or the router's named limit; the variables exist for tests and
experiments that must reach a bound in seconds (a stream record expiring, a TTL change allowed
again, a slow client cut off) and for containers configured without a command line.
`python -m router --help` lists them.
"""

from __future__ import annotations

from dataclasses import dataclass

from core import limits
from core.settings import at_least, seconds_within, setting, switch

_DAY = 24 * 3600.0


@dataclass(frozen=True, slots=True)
class RouterSettings:
    stream_retention_seconds: float = setting(
        float(limits.STREAM_RETENTION_SECONDS),
        "DYNALAB_STREAM_RETENTION_SECONDS",
        seconds_within(0, float(limits.STREAM_RETENTION_SECONDS), open_below=True),
        "how long stream records are kept (GetRecords reads no older ones)",
    )
    ttl_change_interval_seconds: float = setting(
        limits.TTL_CHANGE_INTERVAL_SECONDS,
        "DYNALAB_TTL_CHANGE_INTERVAL_SECONDS",
        seconds_within(0, _DAY),
        "the least time between two TTL changes of a table",
    )
    replication_factor: int = setting(
        limits.REPLICATION_FACTOR_DEFAULT,
        "DYNALAB_REPLICATION_FACTOR",
        at_least(1, "replica"),
        "replicas of each new table's partitions (and its global indexes'), one per node "
        "(fewer on fewer nodes)",
    )
    move_split_children: bool = setting(
        True,
        "DYNALAB_MOVE_SPLIT_CHILDREN",
        switch,
        "move split children to the nodes the ring places them on",
    )
    body_bytes_in_flight: int = setting(
        limits.ROUTER_BODY_BYTES_IN_FLIGHT_MAX,
        "DYNALAB_ROUTER_BODY_BYTES_IN_FLIGHT",
        at_least(1, "byte"),
        "request body bytes the router holds at once before it refuses more",
    )
    body_read_seconds: float = setting(
        limits.ROUTER_BODY_READ_SECONDS_MAX,
        "DYNALAB_ROUTER_BODY_READ_SECONDS",
        seconds_within(0, _DAY, open_below=True),
        "how long a client may take to send a request's body",
    )
    idle_seconds: float = setting(
        limits.ROUTER_IDLE_SECONDS_MAX,
        "DYNALAB_ROUTER_IDLE_SECONDS",
        seconds_within(0, _DAY, open_below=True),
        "how long a connection with no request in progress is kept open",
    )
