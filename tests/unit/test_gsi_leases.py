"""The pure rules of the GSI replicators' leases (`core.gsi_leases`): fair shares, renewal,
release past a share, take-over of an expired lease with the next epoch, rows round-tripped, and
which dead rows are collected."""

from __future__ import annotations

from core import gsi_leases
from core.gsi_leases import Lease, LeaseKey, Member

SECONDS = 3.0
NOW = 1_000.0


def keys(count: int) -> list[LeaseKey]:
    return [("t" * 32, f"{'t' * 32}-{i}", "gsi_replicator") for i in range(count)]


def test_the_first_replicator_takes_every_free_lease_alone() -> None:
    wanted = keys(4)
    plan = gsi_leases.plan(wanted, {}, {}, "a", NOW, SECONDS, {})
    assert plan.acquire == tuple(wanted)
    assert (plan.keep, plan.renew, plan.release) == ((), (), ())


def test_a_second_member_gets_half_and_the_first_releases_what_is_past_its_share() -> None:
    wanted = keys(4)
    rows = {k: Lease(k, "a", 1, NOW + SECONDS, 1) for k in wanted}
    members = {"a": Member("a", NOW + SECONDS, 1), "b": Member("b", NOW + SECONDS, 1)}
    first = gsi_leases.plan(wanted, rows, members, "a", NOW, SECONDS, {})
    assert [lease.key for lease in first.keep] == wanted[:2]
    assert [lease.key for lease in first.release] == wanted[2:]
    assert first.renew == ()  # More than half of their time is left.
    # b sees nothing free until a released; then it takes the released ones.
    assert gsi_leases.plan(wanted, rows, members, "b", NOW, SECONDS, {}).acquire == ()
    after = {**rows, **{lease.key: gsi_leases.released(lease) for lease in first.release}}
    second = gsi_leases.plan(wanted, after, members, "b", NOW, SECONDS, {})
    assert second.acquire == tuple(wanted[2:])


def test_a_lease_is_renewed_once_half_its_time_is_gone_with_the_same_epoch() -> None:
    (key,) = keys(1)
    lease = Lease(key, "a", 4, NOW + SECONDS / 2 - 0.1, 7)
    plan = gsi_leases.plan([key], {key: lease}, {}, "a", NOW, SECONDS, {})
    assert plan.renew == (lease,)
    renewal = gsi_leases.renewed(lease, NOW, SECONDS)
    assert (renewal.epoch, renewal.version, renewal.expires) == (4, 8, NOW + SECONDS)


def test_an_expired_lease_of_a_dead_member_is_taken_over_with_the_next_epoch() -> None:
    wanted = keys(2)
    rows = {
        wanted[0]: Lease(wanted[0], "dead", 3, NOW - 0.1, 9),
        wanted[1]: Lease(wanted[1], "b", 1, NOW + SECONDS, 2),
    }
    members = {"dead": Member("dead", NOW - 1, 5), "b": Member("b", NOW + SECONDS, 1)}
    # a has seen the dead one's rows unchanged for a lease time; b's changed just now.
    ages = {
        gsi_leases.lease_name(wanted[0]): SECONDS,
        gsi_leases.member_name("dead"): SECONDS,
        gsi_leases.lease_name(wanted[1]): 0.2,
        gsi_leases.member_name("b"): 0.2,
    }
    plan = gsi_leases.plan(wanted, rows, members, "a", NOW, SECONDS, ages)
    assert plan.acquire == (wanted[0],)  # b's live lease is not touched.
    taken = gsi_leases.taken(rows[wanted[0]], wanted[0], "a", NOW, SECONDS)
    assert (taken.owner, taken.epoch, taken.version) == ("a", 4, 10)
    assert gsi_leases.taken(None, wanted[1], "a", NOW, SECONDS).epoch == 1


def test_expiry_is_judged_by_the_takers_own_clock_not_the_holders() -> None:
    behind, ahead, released = keys(3)
    rows = {
        # Its holder's clock runs 10 s behind a's: by a's clock the row expired long ago, but a
        # saw it change a second ago, so the holder is alive and the lease is not free.
        behind: Lease(behind, "slow", 2, NOW - 10, 5),
        # Its holder's clock ran 10 s ahead and then it died: the row says a future expiry, but
        # a has seen it unchanged for a whole lease time, so it is free.
        ahead: Lease(ahead, "fast", 7, NOW + 10, 3),
        # Released by its holder (expiry 0): free at once, however recently written.
        released: Lease(released, "gone", 1, 0.0, 2),
    }
    members = {"slow": Member("slow", NOW - 10, 9), "fast": Member("fast", NOW + 10, 4)}
    ages = {
        gsi_leases.lease_name(behind): 1.0,
        gsi_leases.member_name("slow"): 1.0,
        gsi_leases.lease_name(ahead): SECONDS,
        gsi_leases.member_name("fast"): SECONDS,
        gsi_leases.lease_name(released): 0.0,
    }
    plan = gsi_leases.plan([behind, ahead, released], rows, members, "a", NOW, SECONDS, ages)
    assert plan.acquire == (ahead, released)  # a and slow are alive: a's share is 2 of 3.
    # Before a has watched a row for a lease time (a replicator just started), nothing of
    # another's that was not released is free.
    fresh = gsi_leases.plan([behind, ahead], rows, members, "a", NOW, SECONDS, {})
    assert fresh.acquire == ()


def test_a_held_lease_no_longer_wanted_is_released_unless_drained() -> None:
    gone, drained = keys(2)
    rows = {
        gone: Lease(gone, "a", 1, NOW + SECONDS, 1),
        drained: Lease(drained, "a", 1, NOW + SECONDS, 1, drained=True),
    }
    plan = gsi_leases.plan([], rows, {}, "a", NOW, SECONDS, {})
    assert [lease.key for lease in plan.release] == [gone]
    assert gsi_leases.drained_partitions(rows.values(), drained[0], drained[2]) == {drained[1]}


def test_rows_round_trip_and_a_consumer_may_hold_a_slash() -> None:
    key = ("t" * 32, "t" * 32 + "-0", "gsi_replicator/" + "i" * 32)
    lease = Lease(key, "host-1-abc", 2, NOW + 0.25, 3, drained=True)
    member = Member("host-1-abc", NOW, 4)
    leases, members = gsi_leases.parse_rows([lease.to_item(), member.to_item()])
    assert leases == {key: lease}
    assert members == {"host-1-abc": member}
    assert gsi_leases.fair_share(5, 2) == 3
    assert gsi_leases.fair_share(5, 0) == 5


# Collecting dead rows -----------------------------------------------------------------------------

GRACE = 60.0


def test_row_ages_count_from_the_first_read_of_each_version() -> None:
    (key,) = keys(1)
    ages = gsi_leases.RowAges()
    lease, member = Lease(key, "a", 1, 0.0, 4), Member("b", 0.0, 2)
    assert ages.observe([lease], [member], 10.0) == {
        gsi_leases.lease_name(key): 0.0,
        gsi_leases.member_name("b"): 0.0,
    }
    seen = ages.observe([lease], [Member("b", 5.0, 3)], 25.0)  # b wrote its row again.
    assert seen == {gsi_leases.lease_name(key): 15.0, gsi_leases.member_name("b"): 0.0}
    assert ages.observe([], [], 30.0) == {}  # Rows gone are forgotten.
    assert ages.observe([lease], [], 31.0) == {gsi_leases.lease_name(key): 0.0}


def test_only_obsolete_lease_rows_unchanged_past_the_grace_are_collected() -> None:
    live_table, dropped_table = keys(1)[0], ("d" * 32, "d" * 32 + "-0", "gsi_replicator")
    deleted_index = (live_table[0], live_table[1], "gsi_replicator/" + "e" * 32)
    gone_partition = (live_table[0], live_table[0] + "-9", live_table[2])
    rows = {
        key: Lease(key, "a", 3, 0.0, 7)  # Released long ago (its holder's clock said 0).
        for key in (live_table, dropped_table, deleted_index, gone_partition)
    }
    followed = {live_table[0]: {live_table[2]: frozenset({live_table[1]})}}
    old = {gsi_leases.lease_name(key): GRACE + 1 for key in rows}
    garbage = gsi_leases.collectable(rows, {}, followed, old, GRACE)
    assert {lease.key for lease in garbage.leases} == {dropped_table, deleted_index, gone_partition}
    # A key still followed is never collected, however long its row sat: its epoch must stay.
    assert live_table not in {lease.key for lease in garbage.leases}
    # Rows seen unchanged for less than the grace are not collected yet, whatever their expiry
    # says (a released row of a table newer than this catalog read is one of them).
    young = {gsi_leases.lease_name(key): GRACE - 1 for key in rows}
    assert gsi_leases.collectable(rows, {}, followed, young, GRACE).leases == ()
    assert gsi_leases.collectable(rows, {}, followed, {}, GRACE).leases == ()


def test_member_rows_are_collected_once_unchanged_past_the_grace() -> None:
    members = {"dead": Member("dead", 0.0, 9), "alive": Member("alive", NOW + SECONDS, 40)}
    ages = {gsi_leases.member_name("dead"): GRACE + 1, gsi_leases.member_name("alive"): 1.0}
    garbage = gsi_leases.collectable({}, members, {}, ages, GRACE)
    assert garbage.members == (members["dead"],) and garbage.leases == ()
