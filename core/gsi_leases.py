"""Leases that share a table's source partitions between several GSI replicators. Pure.

A replicator follows a source partition for one change-feed consumer (`core.gsi.consumer_of`)
only while it holds that (table, partition, consumer)'s lease: a row in the leases system table
(`LEASES_TABLE_ID`, beside the catalog on the catalog's node) naming its owner, an epoch and the
time it expires by its owner's clock. Rows are changed only by compare-and-set on their
`version`, so two replicators never both take a lease. Each replicator also keeps a member row
alive; it claims leases up to its fair share of the followed partitions (`plan`), renews the ones
it holds before half their time is gone, releases the ones past its share (they expire at once,
keeping their epoch), and takes over a lease whose owner let it expire (a crashed replicator)
with the epoch plus one.

Expiry does not assume the replicators' clocks agree. A holder judges its own lease by the expiry
its clock wrote; another replicator judges it, and a member's liveness, by whether the row
changed within a lease time as its own monotonic clock measures (`RowAges`). A row's `expires`
from another clock only says whether it was released (0).

The epoch fences a replicator that lost its lease without noticing (paused, or its renewal late):
every `index_apply` carries it, and an index partition refuses a source's changes under an epoch
lower than the highest it has seen from that source (`storagenode`, `rpc.ops.IndexApplyPayload`).
A new holder first sends its epoch to every partition of the indexes it keeps, so the old holder's
late writes (a backfill page read before the takeover, above all) are refused everywhere.

A lease row also records that its partition's log was drained to its END (a split's retired
parent), so that a replicator taking over the children need not drain it again.

Rows that can never be used again are deleted (`collectable`): the lease of a (table, partition,
consumer) the catalog no longer has (a dropped table, a deleted index, a partition gone from the
table's lineage), and the member row of a replicator that stopped renewing it. Both are proven
dead, not guessed. Table, index and partition ids are never reused, so an obsolete key is never
wanted again and deleting its row cannot hand an epoch out twice. A row is collected only once
the collecting replicator has seen it unchanged (same version) for a grace far longer than a
catalog poll, by its own monotonic clock (`RowAges`), not by the expiry another replicator's clock
wrote: a live holder or member changes its row every poll, and a catalog read made after a row had
already sat unchanged for the grace cannot predate that row's table. Each delete is conditioned on
the version seen, so a row written meanwhile is left alone. A live replicator whose member row was
collected (it paused past the grace) writes it again on its next poll.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core import catalog

# The leases system table (`core.catalog.LEASES_TABLE_ID`): one partition on the catalog's
# node, keyed by one string attribute, like the catalog.
LEASES_TABLE_ID = catalog.LEASES_TABLE_ID
LEASES_TABLE_NAME = catalog.LEASES_TABLE_NAME
LEASES_PARTITION_ID = f"{LEASES_TABLE_ID}-0"

LeaseKey = tuple[str, str, str]  # (table id, source partition id, change-feed consumer)

_LEASE_PREFIX = "lease/"
_MEMBER_PREFIX = "member/"


def lease_name(key: LeaseKey) -> str:
    """The row name of a lease (table ids and partition ids hold no `/`; a consumer may)."""
    table_id, partition_id, consumer = key
    return f"{_LEASE_PREFIX}{table_id}/{partition_id}/{consumer}"


def member_name(owner: str) -> str:
    return f"{_MEMBER_PREFIX}{owner}"


@dataclass(frozen=True, slots=True)
class Lease:
    """One lease row: who holds it, under which epoch, until when (0: released), its row
    version (the compare-and-set token) and whether the partition's log was drained."""

    key: LeaseKey
    owner: str
    epoch: int
    expires: float
    version: int
    drained: bool = False

    def held_by(self, owner: str, now: float) -> bool:
        """Whether `owner` holds it at `now`, by `owner`'s own clock (it wrote `expires`)."""
        return self.owner == owner and self.expires > now

    def free(
        self, owner: str, now: float, unchanged_seconds: Mapping[str, float], seconds: float
    ) -> bool:
        """Whether `owner` may take it: released, or (another's) seen unchanged for a whole
        lease time by `owner`'s own clock (`RowAges`), whatever the holder's clock wrote."""
        if self.expires <= 0 or self.owner == owner:
            return self.expires <= now
        return unchanged_seconds.get(lease_name(self.key), 0.0) >= seconds

    def to_item(self) -> dict[str, Any]:
        return {
            "name": {"S": lease_name(self.key)},
            "owner": {"S": self.owner},
            "epoch": {"N": str(self.epoch)},
            "expires": {"N": repr(self.expires)},
            "version": {"N": str(self.version)},
            "drained": {"BOOL": self.drained},
        }


@dataclass(frozen=True, slots=True)
class Member:
    """A replicator's member row: it is alive until `expires`."""

    owner: str
    expires: float
    version: int

    def to_item(self) -> dict[str, Any]:
        return {
            "name": {"S": member_name(self.owner)},
            "expires": {"N": repr(self.expires)},
            "version": {"N": str(self.version)},
        }


def parse_rows(
    items: Iterable[Mapping[str, Any]],
) -> tuple[dict[LeaseKey, Lease], dict[str, Member]]:
    """The leases and the members in the rows of the leases table."""
    leases: dict[LeaseKey, Lease] = {}
    members: dict[str, Member] = {}
    for item in items:
        name = item["name"]["S"]
        version = int(item["version"]["N"])
        expires = float(item["expires"]["N"])
        if name.startswith(_MEMBER_PREFIX):
            owner = name.removeprefix(_MEMBER_PREFIX)
            members[owner] = Member(owner, expires, version)
        elif name.startswith(_LEASE_PREFIX):
            table_id, partition_id, consumer = name.removeprefix(_LEASE_PREFIX).split("/", 2)
            key = (table_id, partition_id, consumer)
            leases[key] = Lease(
                key,
                item["owner"]["S"],
                int(item["epoch"]["N"]),
                expires,
                version,
                bool(item.get("drained", {}).get("BOOL", False)),
            )
    return leases, members


def fair_share(wanted: int, members: int) -> int:
    """How many of `wanted` leases one of `members` live replicators may hold."""
    return math.ceil(wanted / max(1, members))


@dataclass(frozen=True, slots=True)
class Plan:
    """What a replicator does to the leases this round: renew the ones it keeps (when due),
    acquire free ones, release the ones past its share."""

    keep: tuple[Lease, ...]
    renew: tuple[Lease, ...]
    acquire: tuple[LeaseKey, ...]
    release: tuple[Lease, ...]


def plan(
    wanted: Collection[LeaseKey],
    leases: Mapping[LeaseKey, Lease],
    members: Mapping[str, Member],
    owner: str,
    now: float,
    lease_seconds: float,
    unchanged_seconds: Mapping[str, float],
) -> Plan:
    """The lease changes for `owner`, given the keys some replicator should follow (`wanted`,
    in the order to prefer them), the rows read at `now` and how long `owner` has seen each
    unchanged (`RowAges`). A member is alive while its row changed within a lease time (`owner`
    counts as one whatever its row says); another's lease is free once released or unchanged for
    a lease time (`Lease.free`). A lease is renewed once less than half its time is left; a held
    lease not wanted any more is released."""
    alive = {
        name for name in members if unchanged_seconds.get(member_name(name), 0.0) < lease_seconds
    } | {owner}
    share = fair_share(len(wanted), len(alive))
    mine = [key for key in wanted if key in leases and leases[key].held_by(owner, now)]
    kept = mine[:share]
    release = [leases[key] for key in mine[share:]]
    release.extend(
        lease
        for key, lease in leases.items()
        if key not in wanted and lease.held_by(owner, now) and not lease.drained
    )
    free = [
        key
        for key in wanted
        if key not in leases or leases[key].free(owner, now, unchanged_seconds, lease_seconds)
    ]
    acquire = free[: max(0, share - len(kept))]
    keep = tuple(leases[key] for key in kept)
    renew = tuple(lease for lease in keep if lease.expires - now < lease_seconds / 2)
    return Plan(keep, renew, tuple(acquire), tuple(release))


def taken(previous: Lease | None, key: LeaseKey, owner: str, now: float, seconds: float) -> Lease:
    """The row of a lease `owner` takes at `now`: the next epoch after the previous holder's."""
    epoch = 1 if previous is None else previous.epoch + 1
    version = 1 if previous is None else previous.version + 1
    drained = False if previous is None else previous.drained
    return Lease(key, owner, epoch, now + seconds, version, drained)


def renewed(lease: Lease, now: float, seconds: float, *, drained: bool = False) -> Lease:
    """The row of a lease its holder renews (or marks drained) at `now`: the same epoch."""
    return Lease(
        lease.key,
        lease.owner,
        lease.epoch,
        now + seconds,
        lease.version + 1,
        drained or lease.drained,
    )


def released(lease: Lease) -> Lease:
    """The row of a lease its holder gives up: expired at once, its epoch kept."""
    return Lease(lease.key, lease.owner, lease.epoch, 0.0, lease.version + 1, lease.drained)


def drained_partitions(leases: Iterable[Lease], table_id: str, consumer: str) -> set[str]:
    """The partitions of a table whose logs some replicator drained to END for `consumer`."""
    return {
        lease.key[1]
        for lease in leases
        if lease.drained and lease.key[0] == table_id and lease.key[2] == consumer
    }


# The lease keys a catalog still has: table id -> consumer -> the partition ids of its lineage.
Followed = Mapping[str, Mapping[str, Collection[str]]]


class RowAges:
    """How long each row of the leases table has been seen unchanged, by the observer's clock."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, float]] = {}  # Row name -> (version, first seen at).

    def observe(
        self, leases: Iterable[Lease], members: Iterable[Member], now: float
    ) -> dict[str, float]:
        """Record the rows read at `now` (a monotonic clock); each row's seconds unchanged."""
        versions = {lease_name(lease.key): lease.version for lease in leases}
        versions.update({member_name(member.owner): member.version for member in members})
        seen: dict[str, tuple[int, float]] = {}
        for name, version in versions.items():
            previous = self._seen.get(name)
            seen[name] = (
                previous
                if previous is not None and previous[0] == version
                else (
                    version,
                    now,
                )
            )
        self._seen = seen
        return {name: now - since for name, (_, since) in seen.items()}


@dataclass(frozen=True, slots=True)
class Garbage:
    """The rows a replicator deletes this round (each conditioned on the version read)."""

    leases: tuple[Lease, ...]
    members: tuple[Member, ...]


def collectable(
    leases: Mapping[LeaseKey, Lease],
    members: Mapping[str, Member],
    followed: Followed,
    unchanged_seconds: Mapping[str, float],
    grace_seconds: float,
) -> Garbage:
    """The lease rows whose key `followed` (read from the catalog after the rows were first seen)
    no longer has, and the member rows, that have been seen unchanged for over `grace_seconds`
    (`unchanged_seconds` by row name, from `RowAges`)."""

    def obsolete(key: LeaseKey) -> bool:
        table_id, partition_id, consumer = key
        partitions = followed.get(table_id, {}).get(consumer)
        return partitions is None or partition_id not in partitions

    def stale(name: str) -> bool:
        return unchanged_seconds.get(name, 0.0) > grace_seconds

    return Garbage(
        tuple(lease for key, lease in leases.items() if obsolete(key) and stale(lease_name(key))),
        tuple(member for member in members.values() if stale(member_name(member.owner))),
    )
