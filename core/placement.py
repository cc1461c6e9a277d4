"""Where data lives: partition counts, hash ranges, the partition map and the node ring.

Placement has two levels (DESIGN.md, "Data placement"). A key belongs to the partition whose range
of storage keys (see `core.keycodec`) contains it; a table starts with ranges that split the 64-bit
hash space evenly, as many as its throughput needs, and splits refine them later. A partition
belongs to the nodes that a consistent-hash ring with virtual nodes picks for its id, so adding or
removing a node moves only the partitions whose owners change. A partition map holds any record
with an `id` and hex `start` and `end` bounds (`Bounded`): the catalog's `PartitionDef`.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Iterable, Sequence
from typing import Generic, Protocol, TypeVar

from core import limits
from core.errors import InternalServerError, ServiceUnavailable, ValidationError
from core.keycodec import HASH_BYTES, HASH_SPACE, hash64


class Bounded(Protocol):
    """What a partition map needs of a partition: its id, and its storage keys [start, end) as
    hex (start "" is below every key, end None is unbounded)."""

    @property
    def id(self) -> str: ...

    @property
    def start(self) -> str: ...

    @property
    def end(self) -> str | None: ...


P = TypeVar("P", bound=Bounded)

BILLING_PROVISIONED = "PROVISIONED"
BILLING_PAY_PER_REQUEST = "PAY_PER_REQUEST"


def initial_partition_count(billing_mode: str, rcu: int, wcu: int) -> int:
    """How many partitions a new table starts with.

    A provisioned table gets as many partitions as its throughput needs when each partition serves
    at most 3,000 RCU and 1,000 WCU (a linear combination of both); a new on-demand table can take
    "up to 4,000 write request units or 12,000 read request units" at once, which is 4 partitions.
    """
    if billing_mode == BILLING_PAY_PER_REQUEST:
        return limits.ON_DEMAND_INITIAL_PARTITIONS
    if billing_mode == BILLING_PROVISIONED:
        # ceil(rcu / 3000 + wcu / 1000) in exact integer arithmetic.
        load = rcu * limits.PARTITION_WCU_MAX + wcu * limits.PARTITION_RCU_MAX
        capacity = limits.PARTITION_RCU_MAX * limits.PARTITION_WCU_MAX
        return max(1, -(-load // capacity))
    raise ValidationError(
        f"1 validation error detected: Value '{billing_mode}' at 'billingMode' failed to satisfy "
        "constraint: Member must satisfy enum value set: [PROVISIONED, PAY_PER_REQUEST]"
    )


def hash_bound(hash_value: int) -> str:
    """The hex text of a partition bound placed at `hash_value` (8 big-endian bytes)."""
    return hash_value.to_bytes(HASH_BYTES, "big").hex()


def initial_ranges(count: int) -> list[tuple[str, str | None]]:
    """`count` [start, end) ranges that split the hash space evenly, as PARTITION bounds.

    The first start is "" (below every key) and the last end is None (no upper bound). A bound is
    the 8-byte hash prefix alone, so every key whose hash equals the bound sorts after it and falls
    in the range that starts there.
    """
    if count < 1:
        raise InternalServerError(f"A table needs at least one partition, not {count}")
    bounds = [hash_bound(i * HASH_SPACE // count) for i in range(1, count)]
    starts = ["", *bounds]
    ends: list[str | None] = [*bounds, None]
    return list(zip(starts, ends, strict=True))


def segment_hash_range(segment: int, total_segments: int) -> tuple[int, int | None]:
    """The [start, end) slice of the hash space that parallel Scan segment `segment` reads.

    Segments split the hash space evenly, so every item belongs to exactly one segment whatever the
    partition layout. The last segment's end is None (the top of the space, 2**64, does not fit the
    unsigned 64-bit integers the node RPC carries).
    """
    if not 1 <= total_segments <= limits.SCAN_TOTAL_SEGMENTS_MAX:
        bound = (
            "greater than or equal to 1"
            if total_segments < 1
            else (f"less than or equal to {limits.SCAN_TOTAL_SEGMENTS_MAX}")
        )
        raise ValidationError(
            f"1 validation error detected: Value '{total_segments}' at 'totalSegments' failed to "
            f"satisfy constraint: Member must have value {bound}"
        )
    if segment < 0:
        raise ValidationError(
            f"1 validation error detected: Value '{segment}' at 'segment' failed to satisfy "
            "constraint: Member must have value greater than or equal to 0"
        )
    if segment >= total_segments:
        raise ValidationError(
            "The Segment parameter is zero-based and must be less than parameter TotalSegments: "
            f"Segment: {segment} is not less than TotalSegments: {total_segments}"
        )
    start = segment * HASH_SPACE // total_segments
    end = None if segment == total_segments - 1 else (segment + 1) * HASH_SPACE // total_segments
    return start, end


# Key to partition -------------------------------------------------------------------------------


class PartitionMap(Generic[P]):
    """A table's partitions with their bounds precomputed as bytes, for binary search by key.

    The router looks up a partition on every request, so the bounds are decoded once here and each
    lookup is one bisect. The map must tile the whole key space: the first partition starts at "",
    each one ends where the next starts, and the last has no end; anything else is a catalog bug.
    """

    def __init__(self, partitions: Iterable[P]) -> None:
        ordered = sorted(partitions, key=lambda p: bytes.fromhex(p.start))
        if not ordered:
            raise InternalServerError("A table's partition map is empty")
        self.partitions: list[P] = ordered
        self._starts = [bytes.fromhex(p.start) for p in ordered]
        ends = [p.end for p in ordered]
        if self._starts[0] != b"" or ends[-1] is not None:
            raise InternalServerError("A partition map must cover the key space from '' to None")
        for partition, end, next_start in zip(ordered, ends, self._starts[1:], strict=False):
            if end is None or bytes.fromhex(end) != next_start:
                raise InternalServerError(
                    f"Partition {partition.id} ends at {end} but the next starts at "
                    f"{next_start.hex()}"
                )

    def __len__(self) -> int:
        return len(self.partitions)

    def lookup(self, storage_key: bytes) -> P:
        """The partition whose [start, end) range holds `storage_key`."""
        return self.partitions[bisect_right(self._starts, storage_key) - 1]

    def overlapping(self, hash_start: int | None, hash_end: int | None) -> list[P]:
        """The partitions, in key order, holding keys whose hash64 lies in [hash_start, hash_end).

        None means unbounded on that side. A key starts with its 8-byte hash, so the keys of that
        hash range are exactly the keys in [bound(hash_start), bound(hash_end)).
        """
        start = 0 if hash_start is None else hash_start
        if hash_end is not None and hash_end <= start:
            return []
        first = bisect_right(self._starts, start.to_bytes(HASH_BYTES, "big")) - 1
        if hash_end is None or hash_end >= HASH_SPACE:
            return self.partitions[first:]
        high = hash_end.to_bytes(HASH_BYTES, "big")
        return self.partitions[first : bisect_left(self._starts, high)]


def find_partition(partitions: Sequence[P], storage_key: bytes) -> P:
    """The partition holding `storage_key`; keep a PartitionMap instead to look up many keys."""
    return PartitionMap(partitions).lookup(storage_key)


# Partition to nodes -----------------------------------------------------------------------------


class HashRing:
    """A consistent-hash ring of storage nodes, each present as `vnodes_per_node` virtual nodes.

    A key is owned by the node of the first virtual node at or clockwise after hash64(key); its
    replicas are the first distinct nodes met going on clockwise. Adding a node only takes over the
    arcs in front of its own virtual nodes, so only keys whose owner becomes the new node move.
    The ring is immutable: membership changes build a new ring.
    """

    def __init__(
        self, node_ids: Iterable[str], vnodes_per_node: int = limits.RING_VNODES_PER_NODE
    ) -> None:
        if vnodes_per_node < 1:
            raise InternalServerError(
                f"A ring needs at least one virtual node per node, not {vnodes_per_node}"
            )
        self.nodes: tuple[str, ...] = tuple(sorted(set(node_ids)))
        # Ties between equal points (astronomically rare) break by node id, so every process builds
        # the same ring from the same members.
        points = sorted(
            (hash64(f"{node}#{i}".encode()), node)
            for node in self.nodes
            for i in range(vnodes_per_node)
        )
        self._points = [point for point, _ in points]
        self._owners = [node for _, node in points]

    def _first_index(self, key: str) -> int:
        if not self._points:
            raise ServiceUnavailable("No storage node is available")
        return bisect_left(self._points, hash64(key.encode("utf-8"))) % len(self._points)

    def owner(self, key: str) -> str:
        """The node that owns `key` (a partition id)."""
        return self._owners[self._first_index(key)]

    def replicas(self, key: str, count: int) -> list[str]:
        """Up to `count` distinct nodes for `key`, owner first, walking the ring clockwise."""
        if count < 1:
            raise InternalServerError(f"A replica set needs at least one node, not {count}")
        start = self._first_index(key)
        wanted = min(count, len(self.nodes))
        chosen: list[str] = []
        for step in range(len(self._owners)):
            node = self._owners[(start + step) % len(self._owners)]
            if node not in chosen:
                chosen.append(node)
                if len(chosen) == wanted:
                    break
        return chosen

    def spread(self, key: str, count: int, position: int) -> tuple[str, ...]:
        """The nodes of the `position`-th partition of a table (or a global index) under id
        `key`: `count` distinct nodes (fewer on fewer nodes), the first its one copy or its first
        leader. The table's partitions take the nodes in turn from the ring's owner of `key`,
        each partition's replicas the nodes after its first: so a table's partitions (and first
        leaders) are spread over the nodes evenly, within one of each other, and tables start at
        different nodes, where hashing each partition id alone piled a table's partitions on one
        node as often as not (issue 28: two tables of six in a row on a fresh 3-node cluster)."""
        if count < 1:
            raise InternalServerError(f"A replica set needs at least one node, not {count}")
        start = self.nodes.index(self.owner(key)) + position
        return tuple(
            self.nodes[(start + step) % len(self.nodes)]
            for step in range(min(count, len(self.nodes)))
        )
