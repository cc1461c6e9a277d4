"""Placement: initial partition counts and ranges, the partition map, Scan segments and the ring."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import pytest

from core import limits
from core.catalog import PartitionDef
from core.errors import InternalServerError, ServiceUnavailable, ValidationError
from core.keycodec import HASH_SPACE, encode_key_value, encode_storage_key, key_hash
from core.placement import (
    HashRing,
    PartitionMap,
    find_partition,
    hash_bound,
    initial_partition_count,
    initial_ranges,
    segment_hash_range,
)


def _partitions(ranges: list[tuple[str, str | None]]) -> list[PartitionDef]:
    return [
        PartitionDef(id=f"p{i}", start=start, end=end, epoch=1, node="n1")
        for i, (start, end) in enumerate(ranges)
    ]


def _key_with_hash(hash_value: int, tail: bytes = b"a\x00\x01") -> bytes:
    return hash_value.to_bytes(8, "big") + tail


# Initial partitions ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("rcu", "wcu", "count"),
    [
        (1, 1, 1),
        (0, 0, 1),
        (3000, 0, 1),
        (3001, 0, 2),
        (0, 1000, 1),
        (0, 1001, 2),
        (1500, 500, 1),
        (1500, 501, 2),
        (6000, 2000, 4),
        (40_000, 40_000, 54),
    ],
)
def test_provisioned_partitions_follow_throughput(rcu: int, wcu: int, count: int) -> None:
    assert initial_partition_count("PROVISIONED", rcu, wcu) == count


def test_on_demand_tables_start_with_four_partitions() -> None:
    assert initial_partition_count("PAY_PER_REQUEST", 0, 0) == limits.ON_DEMAND_INITIAL_PARTITIONS
    assert limits.ON_DEMAND_INITIAL_PARTITIONS == 4


def test_unknown_billing_mode() -> None:
    with pytest.raises(ValidationError) as error:
        initial_partition_count("FREE", 1, 1)
    assert error.value.message == (
        "1 validation error detected: Value 'FREE' at 'billingMode' failed to satisfy constraint: "
        "Member must satisfy enum value set: [PROVISIONED, PAY_PER_REQUEST]"
    )


def test_initial_ranges_split_the_hash_space_evenly() -> None:
    assert initial_ranges(1) == [("", None)]
    assert initial_ranges(2) == [("", "8000000000000000"), ("8000000000000000", None)]
    assert initial_ranges(4) == [
        ("", "4000000000000000"),
        ("4000000000000000", "8000000000000000"),
        ("8000000000000000", "c000000000000000"),
        ("c000000000000000", None),
    ]
    ranges = initial_ranges(7)
    assert len(ranges) == 7
    for (_, end), (start, _) in pairwise(ranges):
        assert end == start and end is not None and len(end) == 16
    with pytest.raises(InternalServerError):
        initial_ranges(0)


def test_hash_bound() -> None:
    assert hash_bound(0) == "0000000000000000"
    assert hash_bound(HASH_SPACE - 1) == "ffffffffffffffff"


# Partition map ---------------------------------------------------------------------------------


def test_lookup_follows_the_hash_prefix() -> None:
    partition_map = PartitionMap(_partitions(initial_ranges(4)))
    quarter = HASH_SPACE // 4
    assert partition_map.lookup(_key_with_hash(0)).id == "p0"
    assert partition_map.lookup(_key_with_hash(quarter - 1)).id == "p0"
    # A key whose hash equals a bound sorts after the bound: it belongs to the range starting there.
    assert partition_map.lookup(_key_with_hash(quarter)).id == "p1"
    assert partition_map.lookup(_key_with_hash(2 * quarter + 5)).id == "p2"
    assert partition_map.lookup(_key_with_hash(HASH_SPACE - 1)).id == "p3"
    assert partition_map.lookup(b"").id == "p0"
    assert len(partition_map) == 4


def test_lookup_of_real_keys_matches_their_hash() -> None:
    partition_map = PartitionMap(_partitions(initial_ranges(8)))
    for i in range(200):
        pk = {"S": f"user#{i}"}
        expected = key_hash(pk) * 8 // HASH_SPACE
        assert partition_map.lookup(encode_storage_key(pk, {"N": str(i)})).id == f"p{expected}"


def test_a_split_inside_an_item_collection() -> None:
    # A partition holding one hot partition key splits at a sort key: the bound is a whole storage
    # key, and sort keys on either side of it land on either side.
    pk = {"S": "hot"}
    split = encode_storage_key(pk, {"N": "500"})
    partition_map = PartitionMap(_partitions([("", split.hex()), (split.hex(), None)]))
    assert partition_map.lookup(encode_storage_key(pk, {"N": "499.9"})).id == "p0"
    assert partition_map.lookup(encode_storage_key(pk, {"N": "500"})).id == "p1"
    assert partition_map.lookup(encode_storage_key(pk, {"N": "1E100"})).id == "p1"
    negative = encode_storage_key(pk, None) + encode_key_value({"N": "-1"})
    assert partition_map.lookup(negative).id == "p0"
    # The item collection's prefix itself sorts before all of its items.
    assert partition_map.lookup(encode_storage_key(pk, None)).id == "p0"


def test_partitions_are_sorted_by_start() -> None:
    partitions = _partitions(initial_ranges(4))
    partition_map = PartitionMap(reversed(partitions))
    assert [p.id for p in partition_map.partitions] == ["p0", "p1", "p2", "p3"]
    assert find_partition(partitions[::-1], _key_with_hash(HASH_SPACE - 1)).id == "p3"


@pytest.mark.parametrize(
    "ranges",
    [
        [],
        [("00", None)],  # does not start at the bottom
        [("", "80")],  # does not reach the top
        [("", "40"), ("80", None)],  # gap
        [("", "80"), ("40", None)],  # overlap
        [("", None), ("80", None)],  # an unbounded range that is not last
    ],
)
def test_a_map_that_does_not_tile_the_key_space_is_a_bug(
    ranges: list[tuple[str, str | None]],
) -> None:
    with pytest.raises(InternalServerError):
        PartitionMap(_partitions(ranges))


def test_overlapping_hash_ranges() -> None:
    partition_map = PartitionMap(_partitions(initial_ranges(4)))
    quarter = HASH_SPACE // 4

    def ids(start: int | None, end: int | None) -> list[str]:
        return [p.id for p in partition_map.overlapping(start, end)]

    assert ids(None, None) == ["p0", "p1", "p2", "p3"]
    assert ids(0, quarter) == ["p0"]
    assert ids(0, quarter + 1) == ["p0", "p1"]
    assert ids(quarter, 2 * quarter) == ["p1"]
    assert ids(quarter - 1, 2 * quarter) == ["p0", "p1"]
    assert ids(3 * quarter, None) == ["p3"]
    assert ids(3 * quarter, HASH_SPACE) == ["p3"]
    assert ids(None, 1) == ["p0"]
    assert ids(None, 0) == []
    assert ids(5, 5) == []


def test_overlapping_includes_partitions_split_inside_a_hash() -> None:
    # Splits inside one item collection put bounds past the 8-byte hash prefix.
    split = _key_with_hash(100)
    partition_map = PartitionMap(_partitions([("", split.hex()), (split.hex(), None)]))
    assert [p.id for p in partition_map.overlapping(100, 101)] == ["p0", "p1"]
    assert [p.id for p in partition_map.overlapping(0, 100)] == ["p0"]
    assert [p.id for p in partition_map.overlapping(101, None)] == ["p1"]


# Scan segments ---------------------------------------------------------------------------------


def test_segments_split_the_hash_space_evenly() -> None:
    assert segment_hash_range(0, 1) == (0, None)
    assert segment_hash_range(0, 2) == (0, 1 << 63)
    assert segment_hash_range(1, 2) == (1 << 63, None)
    total = 7
    ranges = [segment_hash_range(s, total) for s in range(total)]
    assert ranges[0][0] == 0
    assert ranges[-1][1] is None
    for (_, end), (start, _) in pairwise(ranges):
        assert end == start
    widths = [(end or HASH_SPACE) - start for start, end in ranges]
    assert max(widths) - min(widths) <= 1


def test_segment_bounds_fit_unsigned_64_bits() -> None:
    total = limits.SCAN_TOTAL_SEGMENTS_MAX
    start, end = segment_hash_range(total - 1, total)
    assert start < HASH_SPACE and end is None


@pytest.mark.parametrize(
    ("segment", "total", "message"),
    [
        (
            1,
            1,
            "The Segment parameter is zero-based and must be less than parameter TotalSegments: "
            "Segment: 1 is not less than TotalSegments: 1",
        ),
        (
            -1,
            4,
            "1 validation error detected: Value '-1' at 'segment' failed to satisfy constraint: "
            "Member must have value greater than or equal to 0",
        ),
        (
            0,
            0,
            "1 validation error detected: Value '0' at 'totalSegments' failed to satisfy "
            "constraint: Member must have value greater than or equal to 1",
        ),
        (
            0,
            1_000_001,
            "1 validation error detected: Value '1000001' at 'totalSegments' failed to satisfy "
            "constraint: Member must have value less than or equal to 1000000",
        ),
    ],
)
def test_invalid_segments(segment: int, total: int, message: str) -> None:
    with pytest.raises(ValidationError) as error:
        segment_hash_range(segment, total)
    assert error.value.message == message


# Ring ------------------------------------------------------------------------------------------


NODES = ["node-a", "node-b", "node-c", "node-d"]
PARTITION_IDS = [f"table-{t}/p{p}" for t in range(50) for p in range(40)]


def test_ring_is_deterministic_and_order_independent() -> None:
    ring = HashRing(NODES)
    again = HashRing(reversed(NODES))
    assert ring.nodes == tuple(sorted(NODES))
    for pid in PARTITION_IDS[:200]:
        assert ring.owner(pid) == again.owner(pid) in NODES
        assert ring.replicas(pid, 3) == again.replicas(pid, 3)


def test_replicas_are_distinct_and_start_with_the_owner() -> None:
    ring = HashRing(NODES)
    for pid in PARTITION_IDS[:200]:
        replicas = ring.replicas(pid, 3)
        assert len(replicas) == len(set(replicas)) == 3
        assert replicas[0] == ring.owner(pid)
        assert ring.replicas(pid, 10) == ring.replicas(pid, 4)
        assert ring.replicas(pid, 2) == replicas[:2]
    with pytest.raises(InternalServerError):
        ring.replicas("x", 0)


def test_ring_spreads_partitions_evenly() -> None:
    owners = Counter(HashRing(NODES).owner(pid) for pid in PARTITION_IDS)
    mean = len(PARTITION_IDS) / len(NODES)
    assert set(owners) == set(NODES)
    assert all(0.8 * mean <= count <= 1.2 * mean for count in owners.values()), owners


def test_adding_a_node_moves_only_partitions_it_now_owns() -> None:
    before = HashRing(NODES)
    after = HashRing([*NODES, "node-e"])
    moved = [pid for pid in PARTITION_IDS if before.owner(pid) != after.owner(pid)]
    assert moved, "the new node takes over some partitions"
    assert all(after.owner(pid) == "node-e" for pid in moved)
    # About a fifth of the partitions move, not the reshuffle a modulo placement would cause.
    assert len(moved) < 0.3 * len(PARTITION_IDS)


def test_removing_a_node_moves_only_its_partitions() -> None:
    before = HashRing(NODES)
    after = HashRing(NODES[1:])
    for pid in PARTITION_IDS:
        if before.owner(pid) != NODES[0]:
            assert after.owner(pid) == before.owner(pid)
        else:
            assert after.owner(pid) != NODES[0]
            # The next replica clockwise takes over, so its data is already there.
            assert after.owner(pid) == before.replicas(pid, 2)[1]


def test_single_node_ring() -> None:
    ring = HashRing(["solo"], vnodes_per_node=1)
    assert ring.owner("anything") == "solo"
    assert ring.replicas("anything", 3) == ["solo"]


def test_empty_ring_has_no_owner() -> None:
    ring = HashRing([])
    with pytest.raises(ServiceUnavailable):
        ring.owner("p")
    with pytest.raises(ServiceUnavailable):
        ring.replicas("p", 3)
    with pytest.raises(InternalServerError):
        HashRing(NODES, vnodes_per_node=0)


@pytest.mark.parametrize("nodes", [3, 4, 5])
@pytest.mark.parametrize("partitions", [1, 4, 7])
def test_a_tables_partitions_and_leaders_are_spread_within_one(nodes: int, partitions: int) -> None:
    ring = HashRing(f"node-{i}" for i in range(1, nodes + 1))
    for table in range(20):
        key = f"table-{table}"
        for count in (1, 3):
            placed = [ring.spread(key, count, position) for position in range(partitions)]
            assert all(len(set(p)) == len(p) == min(count, nodes) for p in placed)
            firsts = Counter(p[0] for p in placed)
            share = [firsts.get(node, 0) for node in ring.nodes]
            assert max(share) - min(share) <= 1, (key, count, placed)
            assert placed == [ring.spread(key, count, position) for position in range(partitions)]
    # Tables start at different nodes, where the ring places their ids.
    assert len({ring.spread(f"table-{t}", 1, 0) for t in range(20)}) == nodes


def test_hashing_each_partition_alone_piles_a_table_up_and_spreading_does_not() -> None:
    """The pile-up issue 28 saw on a fresh 3-node cluster (4 partitions of one table on one node)
    happens under ring.owner of each partition id; spread never does it."""
    ring = HashRing(["node-1", "node-2", "node-3"])
    piled = [t for t in range(50) if len({ring.owner(f"{t:032x}-{i}") for i in range(4)}) == 1]
    assert piled, "the ids of 50 tables never piled up: the comparison shows nothing"
    assert all(len({ring.spread(f"{t:032x}", 1, i)[0] for i in range(4)}) == 3 for t in range(50))
