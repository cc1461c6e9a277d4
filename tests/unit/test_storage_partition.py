"""The pure partition rules: metadata round trip, key bounds and paging, without LMDB."""

from __future__ import annotations

import base64
from typing import Any

import orjson
import pytest

from core.errors import StaleEpoch
from core.keycodec import encode_storage_key, successor
from core.size import item_size_bytes
from rpc.ops import ScanPayload
from storagenode.layout import encode_item
from storagenode.partition import PageRequest, Partition, query_bounds, read_page, scan_bounds

TABLE = {"id": "c0" * 16, "name": "T", "key_schema": {"hash": ["pk", "S"], "range": ["sk", "B"]}}


def partition(start: str = "", end: str | None = None) -> Partition:
    descriptor = {"id": "p0", "start": start, "end": end, "epoch": 4, "node": "n"}
    return Partition.create(TABLE, descriptor)


def b(raw: bytes) -> dict[str, str]:
    return {"B": base64.b64encode(raw).decode()}


def test_metadata_round_trips() -> None:
    original = partition("00ff", "8000")
    original.item_count, original.size_bytes, original.last_seq = 3, 99, 7
    restored = Partition.from_meta(orjson.loads(original.to_meta()))
    assert restored == original and restored.same_definition(original)
    assert restored.log_prefix == original.log_prefix


def test_a_staged_copy_is_equal_and_apart() -> None:
    original = partition("00ff", "8000")
    original.item_count, original.last_seq = 3, 7
    staged = original.staged()
    assert staged == original and staged is not original
    assert (staged.item_prefix, staged.log_prefix) == (original.item_prefix, original.log_prefix)
    assert staged.local_indexes == original.local_indexes
    assert staged.index_layout == original.index_layout
    staged.item_count, staged.last_seq = 4, 8
    assert (original.item_count, original.last_seq) == (3, 7)


def test_begins_with_on_binary_covers_exactly_the_extensions() -> None:
    p = partition()
    lo, hi = query_bounds(
        p, {"S": "k"}, {"op": "begins_with", "values": [b(b"\x00\xff")]}, None, forward=True
    )
    assert hi is not None
    inside = [b"\x00\xff", b"\x00\xff\x00", b"\x00\xff\xff\xff"]
    outside = [b"\x00", b"\x00\xfe\xff", b"\x01", b""]
    for raw in inside:
        assert lo <= encode_storage_key({"S": "k"}, b(raw)) < hi
    for raw in outside:
        assert not lo <= encode_storage_key({"S": "k"}, b(raw)) < hi


def test_query_bounds_are_clamped_to_the_partition() -> None:
    key = encode_storage_key({"S": "k"}, None)
    p = partition(start=key[:8].hex(), end=(key[:7] + bytes([key[7] + 1])).hex())
    lo, hi = query_bounds(p, {"S": "k"}, None, None, forward=True)
    assert p.start <= lo and hi is not None and hi <= p.end  # type: ignore[operator]
    start = {"pk": {"S": "k"}, "sk": b(b"m")}
    forward_lo, _ = query_bounds(p, {"S": "k"}, None, start, forward=True)
    _, backward_hi = query_bounds(p, {"S": "k"}, None, start, forward=False)
    assert forward_lo > encode_storage_key({"S": "k"}, b(b"m")) == backward_hi


def test_scan_bounds_cut_the_partition_to_the_hash_segment() -> None:
    p = partition(start="4000000000000000", end="c000000000000000")
    assert scan_bounds(p, None, None, None) == (p.start, p.end)
    assert scan_bounds(p, None, 0, 1 << 64) == (p.start, p.end)
    lo, hi = scan_bounds(p, None, 0x5000000000000000, 0x6000000000000000)
    assert (lo.hex(), hi.hex() if hi else None) == ("5000000000000000", "6000000000000000")


def test_a_key_outside_the_range_is_stale() -> None:
    key = encode_storage_key({"S": "k"}, b(b"x"))
    with pytest.raises(StaleEpoch):
        partition(start=successor(key[:8]).hex()).storage_key(  # type: ignore[union-attr]
            {"pk": {"S": "k"}, "sk": b(b"x")}
        )
    with pytest.raises(StaleEpoch):
        partition().check_epoch(3)


def rows(count: int) -> list[tuple[bytes, bytes]]:
    return [
        (bytes([i]), stored({"pk": {"S": "k"}, "sk": b(bytes([i])), "n": {"N": str(i)}}))
        for i in range(count)
    ]


def stored(item: dict[str, Any]) -> bytes:
    """An item as the `items` column family holds it: its size, then its JSON."""
    return encode_item(orjson.dumps(item), item_size_bytes(item))


def page(**body: Any) -> PageRequest:
    return PageRequest.of(ScanPayload.from_json(body), page_bytes_max=1 << 20)


def test_read_page_stops_at_the_limit_and_points_past_the_last_item_read() -> None:
    reply = read_page(rows(5), page(limit=2), partition())
    assert reply["scanned"] == reply["count"] == 2
    assert reply["last_key"] == {"pk": {"S": "k"}, "sk": b(b"\x01")}
    assert read_page(rows(2), page(limit=3), partition())["last_key"] is None


def test_read_page_ends_the_matching_run_at_the_first_mismatch() -> None:
    def small(item: dict[str, Any]) -> bool:
        return int(item["n"]["N"]) in (1, 2)

    reply = read_page(rows(6), page(limit=3), partition(), small)
    assert [item["n"]["N"] for item in reply["items"]] == ["1", "2"]
    assert reply["last_key"] is None  # Row 3 fails the key condition: the run ended, no bound.


def test_read_page_takes_sizes_from_the_stored_prefix_and_counts_without_decoding() -> None:
    """Sizes come from the value's prefix, not from measuring the item again; a COUNT page with
    no filter or key condition never decodes an item, except the one its last key names."""
    undecodable = [(bytes([i]), encode_item(b"not json", 1000)) for i in range(3)]
    reply = read_page(undecodable, page(select="COUNT"), partition())
    assert (reply["count"], reply["scanned"], reply["read_bytes"]) == (3, 3, 3000)
    reply = read_page(rows(4), page(select="COUNT", limit=2), partition())
    assert (reply["count"], reply["last_key"]) == (2, {"pk": {"S": "k"}, "sk": b(b"\x01")})
