"""Token buckets admit and throttle as DynamoDB's partitions do; time is a number the test steps."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core import limits
from core.errors import ThroughputExceeded
from core.token_bucket import (
    BillingMode,
    PartitionThroughput,
    ThroughputSettings,
    TokenBucket,
    partition_rates,
)

T0 = 1_000.0  # Any monotonic clock reading; nothing depends on it being zero.


def acquire_all(bucket: TokenBucket, units: float, now: float, attempts: int) -> int:
    """How many of `attempts` requests of `units` each, all at `now`, are admitted."""
    return sum(bucket.try_acquire(units, now) for _ in range(attempts))


# One bucket ---------------------------------------------------------------------------------------


def test_a_new_bucket_holds_one_second_and_no_bank() -> None:
    bucket = TokenBucket(10, now=T0)
    assert bucket.balance(T0) == 10
    assert acquire_all(bucket, 1, T0, 20) == 10


def test_tokens_accrue_continuously_at_the_rate() -> None:
    bucket = TokenBucket(10, now=T0)
    assert acquire_all(bucket, 1, T0, 10) == 10
    assert bucket.balance(T0 + 0.5) == pytest.approx(5)
    assert acquire_all(bucket, 1, T0 + 0.5, 10) == 5


def test_unused_capacity_is_banked_for_at_most_300_seconds() -> None:
    bucket = TokenBucket(10, now=T0)
    assert bucket.capacity == 10 * limits.BURST_SECONDS_MAX
    assert bucket.balance(T0 + 100) == pytest.approx(10 + 100 * 10)
    assert bucket.balance(T0 + 10_000) == 3000
    assert acquire_all(bucket, 1, T0 + 10_000, 4000) == 3000


def test_a_bank_lasts_as_long_as_the_knowledge_center_example() -> None:
    # "a DynamoDB table has its capacity provisioned at 150 RCUs and has no usage in the last 5
    # minutes ... the table has 45,000 read units of burst capacity (150 * 300). Therefore, if a
    # sudden spiky load pushes consumption to 200 read units, then DynamoDB can leverage burst
    # capacity to accommodate 200 RCUs for 15 minutes."
    bucket = TokenBucket(150, now=T0)
    start = T0 + 300
    assert bucket.balance(start) == 45_000
    served = 0
    while bucket.try_acquire(200, start + served):
        served += 1
    assert served == 15 * 60


def test_a_shorter_burst_window_banks_less() -> None:
    bucket = TokenBucket(10, now=T0, burst_seconds=5)
    assert bucket.balance(T0 + 60) == 50


def test_a_request_is_admitted_while_the_balance_is_positive_and_charged_in_full() -> None:
    # DynamoDB lets a table with 1 write unit write a 400 KB item: the bucket goes into debt.
    bucket = TokenBucket(1, now=T0)
    assert bucket.try_acquire(400, T0)
    assert bucket.balance(T0) == -399
    assert not bucket.try_acquire(1, T0 + 398)
    assert not bucket.try_acquire(1, T0 + 399)  # A balance of exactly zero admits nothing.
    assert bucket.try_acquire(1, T0 + 399.5)


def test_a_read_charged_after_the_fact_can_leave_a_debt_that_throttles_until_repaid() -> None:
    bucket = TokenBucket(100, now=T0)
    assert bucket.try_acquire(1, T0)  # Admitted on its estimate...
    bucket.charge(299, T0)  # ...then charged what it really read.
    assert bucket.balance(T0) == -200
    assert not bucket.try_acquire(1, T0 + 1.99)
    assert bucket.try_acquire(1, T0 + 2.01)
    assert bucket.stats.consumed_units == 301


def test_a_negative_charge_refunds_an_over_estimate_up_to_the_cap() -> None:
    bucket = TokenBucket(10, now=T0, burst_seconds=2)
    assert bucket.try_acquire(4, T0)
    bucket.charge(-3.5, T0)
    assert bucket.balance(T0) == 9.5
    bucket.charge(-100, T0)
    assert bucket.balance(T0) == bucket.capacity == 20


def test_lowering_the_rate_shrinks_the_bank_to_the_new_cap() -> None:
    bucket = TokenBucket(100, now=T0)
    assert bucket.balance(T0 + 300) == 30_000
    bucket.set_rate(10, T0 + 300)
    assert bucket.balance(T0 + 300) == 3000
    assert bucket.balance(T0 + 301) == 3000


def test_time_before_a_rate_change_accrues_at_the_old_rate() -> None:
    bucket = TokenBucket(10, now=T0)
    assert acquire_all(bucket, 1, T0, 10) == 10
    bucket.set_rate(100, T0 + 1)
    assert bucket.balance(T0 + 1) == pytest.approx(10)
    assert bucket.balance(T0 + 2) == pytest.approx(110)


def test_a_debt_is_repaid_at_the_new_rate() -> None:
    bucket = TokenBucket(10, now=T0)
    assert bucket.try_acquire(110, T0)
    bucket.set_rate(50, T0)
    assert not bucket.try_acquire(1, T0 + 1.9)
    assert bucket.try_acquire(1, T0 + 2.1)


def test_a_clock_read_out_of_order_adds_nothing() -> None:
    bucket = TokenBucket(10, now=T0)
    assert acquire_all(bucket, 1, T0 + 1, 20) == 20
    assert bucket.balance(T0) == 0
    assert bucket.balance(T0 + 1) == 0
    assert bucket.balance(T0 + 1.5) == pytest.approx(5)


def test_stats_count_admitted_and_throttled_requests_and_units() -> None:
    bucket = TokenBucket(2, now=T0)
    assert bucket.try_acquire(1.5, T0)
    assert bucket.try_acquire(1, T0)
    assert not bucket.try_acquire(0.5, T0)
    assert not bucket.try_acquire(4, T0)
    bucket.charge(0.5, T0)
    assert bucket.stats.admitted_requests == 2
    assert bucket.stats.throttled_requests == 2
    assert bucket.stats.consumed_units == 3
    assert bucket.stats.throttled_units == 4.5


def test_a_peak_bounds_how_fast_a_bank_is_spent() -> None:
    bucket = TokenBucket(100, now=T0, peak_per_second=1000)
    start = T0 + 300
    assert bucket.balance(start) == 30_000
    # However full the bank, one second serves at most the peak.
    assert acquire_all(bucket, 1, start, 5000) == 1000
    admitted = 0
    for step in range(1, 1001):  # Ten more seconds, asking for everything every 10 ms.
        admitted += acquire_all(bucket, 1, start + step / 100, 50)
    assert admitted == pytest.approx(10 * 1000, abs=1)
    assert bucket.balance(start + 10) > 0  # Throttled by the peak, not by the bank.


@pytest.mark.parametrize(
    ("rate", "kwargs"),
    [
        (0, {}),
        (-1, {}),
        (float("inf"), {}),
        (float("nan"), {}),
        (10, {"burst_seconds": 0}),
        (10, {"burst_seconds": limits.BURST_SECONDS_MAX + 1}),
        (10, {"peak_per_second": 5}),
    ],
)
def test_impossible_buckets_are_refused(rate: float, kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        TokenBucket(rate, now=T0, **kwargs)


def test_impossible_requests_are_refused() -> None:
    bucket = TokenBucket(10, now=T0, peak_per_second=20)
    for units in (-1, float("nan"), float("inf")):
        with pytest.raises(ValueError):
            bucket.try_acquire(units, T0)
    with pytest.raises(ValueError):
        bucket.charge(float("nan"), T0)
    with pytest.raises(ValueError):
        bucket.set_rate(30, T0)


# Sustained load over a simulated minute -----------------------------------------------------------


def test_a_writer_at_exactly_the_rate_is_never_throttled() -> None:
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PROVISIONED, 1000, 100), partition_count=1, now=T0
    )
    for i in range(60 * 100):  # 100 one-unit writes per second, evenly spaced, for a minute.
        throughput.admit_write(1, T0 + i / 100)
    for i in range(60):  # And the whole second's budget in one request, once a second.
        throughput.admit_write(100, T0 + 60 + i)
    assert throughput.write.stats.throttled_requests == 0


def test_a_writer_10_percent_over_the_rate_is_throttled_about_10_percent() -> None:
    rate = 100
    bucket = TokenBucket(rate, now=T0)
    offered = 60 * 110  # 110 one-unit writes per second for a minute.
    admitted = sum(bucket.try_acquire(1, T0 + i / 110) for i in range(offered))
    # The minute's refill plus the first second, and at most one request of overdraft.
    assert 60 * rate <= admitted <= 61 * rate + 1
    throttled = offered - admitted
    assert throttled == bucket.stats.throttled_requests
    assert (
        0.07 <= throttled / offered <= 0.10
    )  # 1/11 at length, less the first second's head start.


# Partitions ---------------------------------------------------------------------------------------


def test_provisioned_units_are_divided_across_partitions() -> None:
    table = ThroughputSettings(BillingMode.PROVISIONED, 10, 5)
    assert partition_rates(table, 1) == (10, 5)
    assert partition_rates(table, 4) == (2.5, 1.25)


def test_a_partition_never_gets_more_than_3000_reads_and_1000_writes() -> None:
    table = ThroughputSettings(BillingMode.PROVISIONED, 40_000, 40_000)
    assert partition_rates(table, 4) == (3000, 1000)
    assert partition_rates(table, 40) == (1000, 1000)


def test_an_on_demand_partition_is_limited_only_by_the_partition_caps() -> None:
    table = ThroughputSettings(BillingMode.PAY_PER_REQUEST)
    for partitions in (1, 4, 100):
        assert partition_rates(table, partitions) == (
            limits.PARTITION_RCU_MAX,
            limits.PARTITION_WCU_MAX,
        )


def test_an_on_demand_partition_bursts_three_seconds_of_its_ceiling_then_holds_it() -> None:
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PAY_PER_REQUEST), partition_count=4, now=T0
    )
    window = limits.ON_DEMAND_PARTITION_BURST_SECONDS
    assert throughput.write.balance(T0) == window * limits.PARTITION_WCU_MAX
    assert throughput.read.balance(T0) == window * limits.PARTITION_RCU_MAX
    assert throughput.write.peak_per_second is None
    # 30 puts of a 100 KB item (101 units each) at one instant: all served, from the burst.
    assert acquire_all(throughput.write, 101, T0, 30) == 30
    assert not throughput.write.try_acquire(101, T0)
    # Then a hot key gets the ceiling, sustained: about 1,000 units a second for a minute.
    admitted = 0
    for tick in range(1, 60 * 100 + 1):
        now = T0 + tick / 100
        while throughput.write.try_acquire(101, now):
            admitted += 101
    # Within one request of the ceiling's 60,000 units (the burst's overdraft, the last one's).
    assert abs(admitted - 60 * limits.PARTITION_WCU_MAX) <= 101
    # The node's shorter provisioned bank (DYNALAB_BURST_SECONDS) leaves the window alone.
    short = PartitionThroughput(
        ThroughputSettings(BillingMode.PAY_PER_REQUEST), 4, now=T0, burst_seconds=1
    )
    assert short.write.balance(T0) == window * limits.PARTITION_WCU_MAX


def test_a_change_of_billing_mode_reshapes_the_buckets_keeping_what_they_hold() -> None:
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PROVISIONED, 10, 10),
        partition_count=1,
        now=T0,
        burst_seconds=10,
    )
    write = throughput.write
    assert write.try_acquire(150, T0)  # Its bank of 100 and 50 more: a debt of 50.
    throughput.reconfigure(ThroughputSettings(BillingMode.PAY_PER_REQUEST), 1, T0)
    assert (write.rate_per_second, write.burst_seconds, write.peak_per_second) == (
        limits.PARTITION_WCU_MAX,
        limits.ON_DEMAND_PARTITION_BURST_SECONDS,
        None,
    )
    # The debt it held, less the window's worth of the added rate, within the on-demand bank.
    window = limits.ON_DEMAND_PARTITION_BURST_SECONDS
    assert write.balance(T0) == pytest.approx(window * (1000 - 10) - 50)
    assert acquire_all(write, 1, T0, 5000) == window * (1000 - 10) - 50  # No peak holds it.
    throughput.reconfigure(ThroughputSettings(BillingMode.PROVISIONED, 10, 20), 1, T0 + 1)
    assert (write.rate_per_second, write.burst_seconds, write.peak_per_second) == (
        20,
        10,
        limits.PARTITION_WCU_MAX,
    )
    # A second at the ceiling refilled 1,000, which the provisioned bank of 200 cuts down.
    assert write.balance(T0 + 1) == pytest.approx(200)
    assert acquire_all(write, 1, T0 + 1, 5000) == 200
    assert write.stats.admitted_requests == 1 + window * (1000 - 10) - 50 + 200


def test_reshape_refuses_what_no_bucket_can_be() -> None:
    bucket = TokenBucket(10, now=T0)
    with pytest.raises(ValueError):
        bucket.reshape(10, T0, burst_seconds=0, peak_per_second=None)
    with pytest.raises(ValueError):
        bucket.reshape(10, T0, burst_seconds=10, peak_per_second=5)
    with pytest.raises(ValueError):
        bucket.reshape(0, T0, burst_seconds=10, peak_per_second=None)
    assert (bucket.rate_per_second, bucket.capacity) == (10, 10 * limits.BURST_SECONDS_MAX)


def test_an_on_demand_maximum_is_divided_across_partitions_up_to_the_ceiling() -> None:
    table = ThroughputSettings(
        BillingMode.PAY_PER_REQUEST, max_read_request_units=100, max_write_request_units=40_000
    )
    assert partition_rates(table, 4) == (25, limits.PARTITION_WCU_MAX)
    throughput = PartitionThroughput(table, 4, now=T0)
    # The short on-demand bank, of the partition's share: a moment past the maximum, no more.
    assert throughput.read.balance(T0) == 25 * limits.ON_DEMAND_PARTITION_BURST_SECONDS
    assert throughput.read.peak_per_second is None
    for maximums in ((0, None), (None, -1)):
        with pytest.raises(ValueError):
            ThroughputSettings(BillingMode.PAY_PER_REQUEST, 0, 0, *maximums)
    with pytest.raises(ValueError):
        ThroughputSettings(BillingMode.PROVISIONED, 5, 5, max_read_request_units=10)


def test_a_partition_past_its_share_raises_throughput_exceeded() -> None:
    # A one-second burst window: the new partition's full bank is one second of its share.
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PROVISIONED, 4, 2),
        partition_count=2,
        now=T0,
        burst_seconds=1,
    )
    throughput.admit_read(2, T0)
    with pytest.raises(ThroughputExceeded) as raised:
        throughput.admit_read(0.5, T0)
    assert raised.value.type_name == "ProvisionedThroughputExceededException"
    throughput.admit_write(1, T0)
    with pytest.raises(ThroughputExceeded):
        throughput.admit_write(1, T0)
    assert throughput.read.stats.throttled_requests == 1
    assert throughput.write.stats.throttled_requests == 1


def test_a_partition_bank_never_bursts_past_the_partition_cap() -> None:
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PROVISIONED, 1200, 800), partition_count=1, now=T0
    )
    start = T0 + 300
    assert throughput.write.balance(start) == 800 * 300
    assert acquire_all(throughput.write, 1, start, 5000) == limits.PARTITION_WCU_MAX
    assert acquire_all(throughput.read, 1, start, 5000) == limits.PARTITION_RCU_MAX


def test_a_new_partition_starts_with_a_full_bank() -> None:
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PROVISIONED, 5, 5), partition_count=1, now=T0
    )
    assert throughput.write.balance(T0) == 5 * limits.BURST_SECONDS_MAX
    assert throughput.read.balance(T0) == 5 * limits.BURST_SECONDS_MAX
    # The bank is spent no faster than the partition cap allows, then the rate is all there is.
    assert acquire_all(throughput.write, 1, T0, 2000) == limits.PARTITION_WCU_MAX
    assert acquire_all(throughput.write, 1, T0 + 1, 2000) == 1500 - 1000 + 5
    assert acquire_all(throughput.write, 1, T0 + 2, 100) == 5


def test_a_full_bank_is_spent_no_faster_than_the_partition_cap() -> None:
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PROVISIONED, 3000, 1000), partition_count=1, now=T0
    )
    assert acquire_all(throughput.write, 1, T0, 5000) == limits.PARTITION_WCU_MAX


def test_a_raised_rate_is_credited_its_burst_window_and_a_lowered_one_clipped() -> None:
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PROVISIONED, 10, 10),
        partition_count=1,
        now=T0,
        burst_seconds=10,
    )
    assert acquire_all(throughput.write, 1, T0, 100) == 100  # The full bank, spent.
    throughput.reconfigure(ThroughputSettings(BillingMode.PROVISIONED, 10, 30), 1, T0)
    assert throughput.write.balance(T0) == pytest.approx(20 * 10)
    throughput.reconfigure(ThroughputSettings(BillingMode.PROVISIONED, 10, 5), 1, T0)
    assert throughput.write.balance(T0) == pytest.approx(5 * 10)
    # A split halves the share and adds nothing.
    throughput.reconfigure(ThroughputSettings(BillingMode.PROVISIONED, 10, 5), 2, T0)
    assert throughput.write.balance(T0) == pytest.approx(2.5 * 10)


def test_a_grant_never_lifts_the_bank_past_its_cap() -> None:
    bucket = TokenBucket(10, now=T0, burst_seconds=2)
    bucket.grant(1000, T0)
    assert bucket.balance(T0) == 20
    with pytest.raises(ValueError):
        bucket.grant(-1, T0)


def test_reconfigure_applies_update_table_and_splits() -> None:
    throughput = PartitionThroughput(
        ThroughputSettings(BillingMode.PROVISIONED, 100, 100), partition_count=1, now=T0
    )
    throughput.reconfigure(ThroughputSettings(BillingMode.PROVISIONED, 100, 100), 2, T0)
    assert (throughput.read.rate_per_second, throughput.write.rate_per_second) == (50, 50)
    throughput.reconfigure(ThroughputSettings(BillingMode.PAY_PER_REQUEST), 2, T0)
    assert throughput.read.rate_per_second == limits.PARTITION_RCU_MAX
    assert throughput.write.rate_per_second == limits.PARTITION_WCU_MAX


def test_impossible_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        ThroughputSettings(BillingMode.PROVISIONED, 0, 5)
    with pytest.raises(ValueError):
        partition_rates(ThroughputSettings(BillingMode.PAY_PER_REQUEST), 0)


# Properties ---------------------------------------------------------------------------------------

operations = st.lists(
    st.tuples(
        st.floats(min_value=0, max_value=20),  # seconds since the previous operation
        st.sampled_from(["acquire", "charge"]),
        st.floats(min_value=0, max_value=50),  # units
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(
    rate=st.floats(min_value=0.1, max_value=1000),
    burst_seconds=st.floats(min_value=0.1, max_value=limits.BURST_SECONDS_MAX),
    peak_factor=st.one_of(st.none(), st.floats(min_value=1, max_value=10)),
    ops=operations,
)
def test_admitted_units_never_outrun_rate_bank_and_peak(
    rate: float,
    burst_seconds: float,
    peak_factor: float | None,
    ops: list[tuple[float, str, float]],
) -> None:
    peak = None if peak_factor is None else rate * peak_factor
    bucket = TokenBucket(rate, now=T0, burst_seconds=burst_seconds, peak_per_second=peak)
    now = T0
    times: list[float] = []
    balances: list[float] = []  # the bank just before each operation
    admitted: list[float] = []  # units admitted by each operation (0 for charges and refusals)
    for dt, kind, units in ops:
        now += dt
        balance = bucket.balance(now)
        assert balance <= bucket.capacity * (1 + 1e-12)
        times.append(now)
        balances.append(balance)
        if kind == "acquire":
            admitted.append(units if bucket.try_acquire(units, now) else 0.0)
        else:
            bucket.charge(units, now)
            admitted.append(0.0)
        assert bucket.balance(now) <= bucket.capacity * (1 + 1e-12)

    # Over any window of operations, what was admitted is at most what the window earned at the
    # rate, plus the bank it started with, plus the overdraft of the one request admitted last
    # (admission only needs a positive balance). With a peak, the window also earns no more than
    # the peak rate plus one second of it.
    for i in range(len(ops)):
        total = 0.0
        largest = 0.0
        for j in range(i, len(ops)):
            total += admitted[j]
            largest = max(largest, admitted[j])
            window = times[j] - times[i]
            slack = 1e-6 * (1 + total)
            assert total <= max(balances[i], 0.0) + rate * window + largest + slack
            if peak is not None:
                assert total <= peak * (window + 1) + largest + slack

    acquires = sum(1 for _, kind, _ in ops if kind == "acquire")
    assert bucket.stats.admitted_requests + bucket.stats.throttled_requests == acquires


# Splits -------------------------------------------------------------------------------------------


def test_a_child_bucket_holds_its_share_of_what_the_parent_holds() -> None:
    parent = TokenBucket(100, now=T0, burst_seconds=100, full=True)  # A bank of 10,000.
    assert acquire_all(parent, 1000, T0, 6) == 6
    child = TokenBucket(50, now=T0, burst_seconds=100, full=True)  # Fresh: 5,000.
    child.inherit(parent, 0.5, T0 + 1)  # The parent holds 4,000 + 100 by then.
    assert child.balance(T0 + 1) == pytest.approx(2050)
    child.inherit(TokenBucket(100, now=T0, burst_seconds=100, full=True), 0.5, T0)
    assert child.balance(T0) == 5000  # A full parent's half fills the child's bank exactly.
    rich = TokenBucket(1000, now=T0, burst_seconds=100, full=True)
    child.inherit(rich, 0.5, T0)
    assert child.balance(T0) == 5000, "never past the child's own bank"


def test_a_child_shares_its_parents_debt_and_throttles_until_it_is_repaid() -> None:
    parent = TokenBucket(10, now=T0, burst_seconds=10)
    assert parent.try_acquire(50, T0)  # One second held, 50 spent: a debt of 40.
    child = TokenBucket(5, now=T0, burst_seconds=10, full=True)
    child.inherit(parent, 0.5, T0)
    assert child.balance(T0) == pytest.approx(-20)
    assert not child.try_acquire(1, T0)
    assert not child.try_acquire(1, T0 + 3.9)  # The debt is paid back at the child's rate.
    assert child.try_acquire(1, T0 + 4.1)


def test_a_child_share_outside_zero_to_one_is_refused() -> None:
    parent = TokenBucket(10, now=T0)
    for share in (0.0, -0.5, 1.5):
        with pytest.raises(ValueError):
            TokenBucket(5, now=T0).inherit(parent, share, T0)


def test_a_child_partition_shares_both_buckets_and_keeps_the_partition_peak() -> None:
    # A provisioned table whose share reaches the ceilings, so its partitions have the peak.
    settings = ThroughputSettings(BillingMode.PROVISIONED, 30_000, 10_000)
    parent = PartitionThroughput(settings, 1, now=T0, burst_seconds=10)
    assert acquire_all(parent.write, 1, T0, 1000) == 1000  # The parent's peak, spent.
    child = PartitionThroughput(settings, 2, now=T0, burst_seconds=10)
    child.inherit(parent, 0.5, T0)
    assert child.write.balance(T0) == pytest.approx((10_000 - 1000) / 2)
    assert child.read.balance(T0) == pytest.approx(30_000 / 2)
    # The parent spent its peak for this second: a child cannot burst past the partition cap.
    assert acquire_all(child.write, 1, T0, 10) == 0
    assert acquire_all(child.write, 1, T0 + 1, 5000) == limits.PARTITION_WCU_MAX


def test_hold_keeps_a_moved_partitions_balance_or_debt_never_past_the_bank() -> None:
    bucket = TokenBucket(10, now=T0)  # A bank of 300 s of 10 units.
    bucket.hold(-25.0, T0)
    assert bucket.balance(T0) == -25.0
    assert bucket.balance(T0 + 1) == -15.0  # Refilled at its rate from there.
    bucket.hold(1e9, T0 + 1)
    assert bucket.balance(T0 + 1) == bucket.capacity
