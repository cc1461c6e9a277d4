"""The dashboard's arithmetic (core.cluster_view): rates from cumulative counters, restarts,
missing samples, the bounded history and key ranges as fractions of the hash space."""

from __future__ import annotations

import pytest

from core import cluster_view
from core.cluster_view import (
    Sample,
    ThroughputHistory,
    counter_series,
    key_range,
    sample_of,
    series,
    totals,
)
from core.keycodec import HASH_SPACE

P = ("orders", "p0")


def entry(read_consumed: float, read_throttled: int, write_consumed: float = 0.0, rate=5.0):
    def bucket(consumed: float, throttled: int) -> dict:
        return {
            "rate_per_second": rate,
            "balance": 0.0,
            "consumed_units": consumed,
            "throttled_units": 0.0,
            "admitted_requests": 0,
            "throttled_requests": throttled,
        }

    return {
        "table_name": P[0],
        "partition_id": P[1],
        "read": bucket(read_consumed, read_throttled),
        "write": bucket(write_consumed, 0),
    }


def test_rates_are_increases_over_the_time_between_samples():
    samples = [
        sample_of(100.0, [entry(0, 0, 10)]),
        sample_of(102.0, [entry(10, 4, 30)]),
        sample_of(106.0, [entry(30, 4, 30)]),
    ]
    columns = series(samples, P)
    assert columns["at"] == [102.0, 106.0]
    assert columns["read_consumed"] == [5.0, 5.0]
    assert columns["read_throttled"] == [2.0, 0.0]
    assert columns["write_consumed"] == [10.0, 0.0]
    assert columns["read_allowed"] == [5.0, 5.0]
    assert totals(samples, P) == {
        "read_consumed_units": 30.0,
        "read_throttled_requests": 4,
        "write_consumed_units": 20.0,
        "write_throttled_requests": 0,
    }


def test_a_counter_that_went_down_is_a_restart_counting_from_zero():
    samples = [sample_of(0.0, [entry(100, 50)]), sample_of(2.0, [entry(6, 2)])]
    columns = series(samples, P)
    assert columns["read_consumed"] == [3.0]
    assert columns["read_throttled"] == [1.0]


def test_a_partition_missing_from_a_sample_has_no_rate_across_it():
    samples = [
        sample_of(0.0, [entry(0, 0)]),
        sample_of(2.0, []),  # its node did not answer
        sample_of(4.0, [entry(8, 0)]),
        sample_of(6.0, [entry(12, 0)]),
    ]
    assert series(samples, P)["at"] == [6.0]
    unknown = series(samples, ("orders", "other"))
    assert set(unknown) == {"at"} | {
        f"{kind}_{column}"
        for kind in cluster_view.KINDS
        for column in ("consumed", "allowed", "throttled")
    }
    assert not any(unknown.values())


def test_the_allowed_rate_is_the_bucket_rate_at_the_end_of_the_interval():
    samples = [sample_of(0.0, [entry(0, 0, rate=5)]), sample_of(1.0, [entry(1, 0, rate=10)])]
    assert series(samples, P)["read_allowed"] == [10.0]


def test_history_keeps_the_newest_samples_in_time_order():
    history = ThroughputHistory(3)
    for at in (1.0, 2.0, 3.0, 4.0):
        history.record(Sample(at, {}))
    history.record(Sample(3.5, {}))  # a clock stepped back: dropped
    assert [s.at for s in history.samples] == [2.0, 3.0, 4.0]
    assert [s.at for s in history.since(3.0)] == [2.0, 3.0, 4.0]
    assert [s.at for s in history.since(3.5)] == [3.0, 4.0]
    assert [s.at for s in history.since(10.0)] == [4.0]
    with pytest.raises(ValueError):
        ThroughputHistory(1)


def test_key_ranges_are_fractions_of_the_hash_space():
    assert key_range("", None) == (0.0, 1.0)
    quarter = (HASH_SPACE // 4).to_bytes(8, "big").hex()
    half = (HASH_SPACE // 2).to_bytes(8, "big").hex()
    assert key_range(quarter, half) == (0.25, 0.5)
    # A split point inside one partition key's item collection carries the key after the hash.
    assert key_range(half + "00ff", None) == (0.5, 1.0)
    assert key_range("80", None) == (0.5, 1.0)


def test_node_states_remember_when_an_unreachable_node_last_answered():
    from router.dashboard import UNREACHABLE, UP, node_states

    answered = {
        "nodes": {"n1": {"enforced": True}, "n2": {"enforced": True}},
        "unreachable": {},
    }
    first = node_states(["n1", "n2"], answered, 10.0, {})
    assert [(s.state, s.last_seen, s.enforced) for s in first.values()] == [
        (UP, 10.0, True),
        (UP, 10.0, True),
    ]
    lost = {"nodes": {"n1": {"enforced": True}}, "unreachable": {"n2": "connection refused"}}
    second = node_states(["n1", "n2"], lost, 12.0, first)
    assert (second["n2"].state, second["n2"].error, second["n2"].last_seen) == (
        UNREACHABLE,
        "connection refused",
        10.0,
    )
    assert second["n1"].last_seen == 12.0


def test_an_online_index_shows_its_backfill_progress():
    from router.dashboard import Sampler, View, _index

    view = View(ctx=None, sampler=Sampler(None), now=0.0, catalog_error=None, samples=[], stats={})
    table = {"name": "t", "partitions": [{"id": f"t-{i}"} for i in range(4)]}
    index = {
        "name": "by-x",
        "local": False,
        "table_id": "i",
        "status": "BACKFILLING",
        "projection": "ALL",
        "online": True,
        # A partition that split away since its copy no longer counts.
        "backfilled": ["t-0", "t-2", "gone"],
        "partitions": [
            {"id": "i-0", "node": "n1", "epoch": 1, "start": "", "end": None, "state": "SERVING"}
        ],
    }
    shown = _index(view, table, index)
    assert shown["backfill"] == {
        "partitions_done": 2,
        "partitions": 4,
        "percentage": 0,
        "items_copied": 0,
        "items_estimate": 0,
        "items_per_second": None,  # Not begun: no rate, no time left.
        "seconds_left": None,
    }
    progress = [{"partition": "t-1", "cursor": None, "items": 30, "epoch": 1}]
    copying = {**index, "progress": progress, "items_estimate": 40}
    assert _index(view, table, copying)["backfill"]["percentage"] == 75
    # Begun 10 s before the snapshot: 30 items in 10 s, the 10 left of the estimate in 3.3 s.
    later = View(
        ctx=None, sampler=Sampler(None), now=1010.0, catalog_error=None, samples=[], stats={}
    )
    begun = _index(later, table, {**copying, "began_at": 1000.0})["backfill"]
    assert begun["items_per_second"] == 3.0
    assert begun["seconds_left"] == pytest.approx(10 / 3)
    assert shown["partitions"][0]["size_bytes"] is None  # no node answered
    assert "backfill" not in _index(view, table, {**index, "status": "ACTIVE"})
    assert "backfill" not in _index(view, table, {**index, "online": False})


def test_router_counters_become_rates_between_samples() -> None:
    samples = [
        sample_of(0.0, [], {"committed": 0, "cancelled": 0}),
        sample_of(2.0, [], {"committed": 10, "cancelled": 1}),
        sample_of(2.0, [], {"committed": 99}),  # Time did not move: skipped.
        sample_of(6.0, [], {"committed": 30, "cancelled": 1}),
        sample_of(7.0, [], {"committed": 4}),  # The router restarted and counted from zero.
    ]
    columns = counter_series(samples, ["committed", "cancelled"])
    assert columns == {
        "at": [2.0, 6.0, 7.0],
        "committed": [5.0, 5.0, 4.0],
        "cancelled": [0.5, 0.0, 0.0],
    }
