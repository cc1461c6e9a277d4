"""Split for heat (`core.heat`): when a throttled partition splits, and where."""

from __future__ import annotations

from core import heat, limits
from core.keycodec import encode_storage_key


def key(pk: str, sk: int = 0) -> bytes:
    return encode_storage_key({"S": pk}, {"N": str(sk)})


def collection_of(storage_key: bytes) -> bytes:
    for pk in (f"k{n}" for n in range(100)):
        prefix = encode_storage_key({"S": pk}, None)
        if storage_key.startswith(prefix):
            return prefix
    return storage_key


def test_a_window_is_sustained_once_nearly_every_check_of_it_throttled() -> None:
    window = heat.HeatWindow(10.0)
    window.observe(0.0, 0)
    for second in range(1, 9):
        window.observe(float(second), second * 5)
        assert not window.sustained(float(second)), "the window is not whole yet"
    window.observe(9.0, 45)
    window.observe(10.0, 50)
    assert window.sustained(10.0)
    for second in range(11, 14):  # Three quiet seconds in ten: below the share.
        window.observe(float(second), 50)
    assert not window.sustained(13.0)


def test_a_restarted_counter_is_not_a_throttle() -> None:
    window = heat.HeatWindow(2.0)
    for second, count in enumerate([10, 20, 0, 0, 0]):
        window.observe(float(second), count)
    assert not window.sustained(4.0)


def test_only_a_share_above_the_cap_has_capacity_to_give() -> None:
    assert heat.capacity_to_give({"billing_mode": "PAY_PER_REQUEST"}, "write")
    assert heat.capacity_to_give(None, "read")
    provisioned = {"billing_mode": "PROVISIONED", "read": 9000, "write": 1500, "partition_count": 2}
    assert heat.capacity_to_give(provisioned, "read")  # 4,500 a partition, capped at 3,000.
    assert not heat.capacity_to_give(provisioned, "write")  # 750: a split only halves it.
    # On demand, an OnDemandThroughput maximum is divided as provisioned units are.
    capped = {"billing_mode": "PAY_PER_REQUEST", "max_write": 1500, "partition_count": 2}
    assert not heat.capacity_to_give(capped, "write")
    assert heat.capacity_to_give(capped, "read")  # No read maximum: the caps alone.
    assert heat.capacity_to_give({**capped, "max_write": 9000}, "write")


def test_the_balancing_key_halves_the_sampled_writes() -> None:
    keys = sorted(key(f"k{n}") for n in range(10))
    samples = [k for k in keys for _ in range(3)]
    at = heat.balancing_key(samples, b"", collection_of, inside_collection=True)
    assert at == keys[5]


def test_a_hot_key_never_splits() -> None:
    keys = sorted(key(f"k{n}") for n in range(10))
    hot = keys[3]
    samples = [hot] * 90 + keys[:10]
    assert heat.balancing_key(samples, b"", collection_of, inside_collection=True) is None
    assert limits.HOT_KEY_LOAD_SHARE_MAX <= 0.9


def test_with_a_local_index_the_key_is_a_collection_start() -> None:
    samples = [key("k1", sk) for sk in range(5)] + [key("k2", sk) for sk in range(5)]
    at = heat.balancing_key(samples, b"", collection_of, inside_collection=False)
    assert at == max(collection_of(key("k1")), collection_of(key("k2")))
    one = [key("k1", sk) for sk in range(10)]
    assert heat.balancing_key(one, b"", collection_of, inside_collection=False) is None
    assert heat.balancing_key(one, b"", collection_of, inside_collection=True) is not None


def test_no_samples_no_split() -> None:
    assert heat.balancing_key([], b"", collection_of, inside_collection=True) is None


def test_throttled_read_keys_keep_the_newest_few_per_partition() -> None:
    samples: heat.ThrottledKeys[str] = heat.ThrottledKeys(size=3)
    for key in (b"a", b"b", b"c", b"d"):
        samples.note("p1", key)
    samples.note("p2", b"z")
    assert samples.keys("p1") == [b"b", b"c", b"d"]
    assert samples.keys("p3") == []
    samples.retain({"p2"})
    assert samples.keys("p1") == [] and samples.keys("p2") == [b"z"]
