"""One focused scenario per Raft rule, on a group driven by hand (`cluster.Cluster`); the checker
asserts every invariant along the way, as in the seeded simulation."""

from __future__ import annotations

import pytest

from core.raft import (
    ConfChange,
    ConfChangeKind,
    Config,
    ConfState,
    MemoryStorage,
    Message,
    MessageKind,
    NotLeader,
    RaftNode,
    Role,
)
from tests.sim.raft.cluster import Cluster, InvariantViolated

TIMEOUT = 10  # the election timeout the clusters below use, in ticks (the default)


def settled_leader(voters: int = 3, **config: object) -> Cluster:
    cluster = Cluster(voters, config=config or None)
    cluster.elect(1)
    cluster.settle(3)
    return cluster


def test_an_entry_of_an_older_term_is_not_committed_by_counting_replicas() -> None:
    """Figure 8: node 1 leads term 1 and appends an entry nobody else gets; all links are cut
    until it leads a later term. The entry then reaches a majority (nodes 1 and 2) before the new
    term's entry does, but the leader's commit index must jump over it, never stop at it."""
    cluster = settled_leader(append_entries_max=1)
    for node in (1, 2, 3):
        cluster.isolate(node)
    old = cluster.write(1, "k", "old")
    cluster.settle(3 * TIMEOUT)  # node 1 steps down (CheckQuorum); PreVote keeps terms put
    # (By now it may also be asking for pre-votes in vain: it timed out again, alone.)
    assert cluster.raft(1).role in (Role.FOLLOWER, Role.PRE_CANDIDATE)
    assert cluster.raft(1).term == 1
    cluster.cut.discard(frozenset((1, 2)))
    cluster.raft(1).randomized_timeout = 1
    cluster.raft(2).randomized_timeout = cluster.raft(3).randomized_timeout = 1000
    commits_in_new_term: list[int] = []
    for _ in range(100):
        cluster.tick()
        cluster.deliver_round()
        leader = cluster.raft(1)
        if leader.role is Role.LEADER:
            commits_in_new_term.append(leader.log.committed)
            if leader.log.committed > old.index:
                break
    assert cluster.raft(1).term > old.term
    assert old.index not in commits_in_new_term, commits_in_new_term
    assert cluster.nodes[2].storage.term(old.index) == old.term  # it was on a majority meanwhile
    assert commits_in_new_term[-1] == old.index + 1


def test_prevote_keeps_a_cut_off_node_from_deposing_the_leader_when_it_returns() -> None:
    cluster = settled_leader()
    term = cluster.raft(1).term
    cluster.isolate(3)
    cluster.settle(5 * TIMEOUT)
    assert cluster.raft(3).term == term, "pre-campaigns do not raise the term"
    assert cluster.raft(3).role in (Role.PRE_CANDIDATE, Role.FOLLOWER)
    cluster.heal()
    cluster.settle(3)
    assert cluster.leader() == 1
    assert cluster.raft(1).term == term
    assert cluster.raft(3).leader == 1


def test_a_leader_that_no_quorum_answers_steps_down_within_an_election_timeout() -> None:
    cluster = settled_leader()
    cluster.isolate(1)
    cluster.settle(TIMEOUT - 1)
    stepped_down_after = None
    for tick in range(TIMEOUT, 2 * TIMEOUT + 1):
        cluster.settle(1)
        if cluster.raft(1).role is not Role.LEADER:
            stepped_down_after = tick
            break
    assert stepped_down_after is not None
    with pytest.raises(NotLeader):
        cluster.raft(1).propose(b"1 k v")


def run_cut_off_leader(leader_ticks_per_follower_tick: tuple[int, int]) -> list[int]:
    """Cut the leader off under its lease and let its clock run at `numerator/denominator` of
    its followers' rate; returns the follower ticks at which the old leader still held a valid
    lease while another node led."""
    numerator, denominator = leader_ticks_per_follower_tick
    cluster = settled_leader()
    cluster.settle(TIMEOUT + 2)  # a round sent a timeout after the election grants the lease
    assert cluster.raft(1).lease_valid()
    cluster.isolate(1)
    cluster.raft(2).randomized_timeout = TIMEOUT  # as early as any follower may campaign
    cluster.raft(3).randomized_timeout = 1000
    overlaps = []
    for step in range(1, 6 * TIMEOUT):
        cluster.tick(2, 3)
        if step * numerator // denominator > (step - 1) * numerator // denominator:
            cluster.tick(1)
        cluster.deliver()
        if cluster.raft(1).lease_valid() and cluster.raft(2).role is Role.LEADER:
            overlaps.append(step)
    assert cluster.raft(2).role is Role.LEADER
    return overlaps


def test_a_lease_ends_before_another_leader_can_exist_with_clock_skew_within_the_bound() -> None:
    # The bound at its edge: while a follower counts TIMEOUT - 1 ticks, the leader counts
    # TIMEOUT - drift (8 of every 9 with the default drift of 2).
    assert run_cut_off_leader((8, 9)) == []


def test_beyond_the_drift_bound_a_lease_can_outlive_the_leadership() -> None:
    """Why the bound is stated: a leader clock at half speed keeps its lease after a new leader
    is elected (a strong read there could be stale)."""
    assert run_cut_off_leader((1, 2)) != []


def test_a_new_leader_serves_no_lease_read_before_an_election_timeout_has_passed() -> None:
    cluster = Cluster(3)
    cluster.elect(1)
    elected = cluster.raft(1).now
    for _ in range(TIMEOUT + 3):
        read = cluster.read(1, "k")
        cluster.settle(1)
        assert read.served_at is not None
        if cluster.raft(1).now - elected <= TIMEOUT:
            assert read.via == "read-index"
    assert read.via == "lease"


def paused_leader_resumes(cluster: Cluster) -> None:
    """Node 1 leads under a lease, then its process stops: no ticks, no messages. The others
    elect node 2 and acknowledge a write. Node 1 resumes; its loop first delivers the ticks that
    passed while it was stopped (the caller's side of the drift bound), then reads."""
    cluster.settle(TIMEOUT + 2)
    assert cluster.raft(1).lease_valid()
    cluster.isolate(1)
    cluster.raft(2).randomized_timeout = TIMEOUT
    paused = 0
    while cluster.raft(2).role is not Role.LEADER:
        cluster.tick(2, 3)
        cluster.deliver()
        paused += 1
    write = cluster.write(2, "k", "new")
    cluster.deliver()
    assert write.acked_at is not None
    cluster.heal()
    cluster.tick(1, times=paused)


def test_a_paused_leader_that_resumes_serves_no_stale_strong_read() -> None:
    cluster = settled_leader()
    paused_leader_resumes(cluster)
    assert not cluster.raft(1).lease_valid()
    try:
        read = cluster.read(1, "k")
    except NotLeader:
        return  # it noticed it lost its quorum meanwhile
    cluster.settle(3)
    assert read.served_at is None, "the read-index round found the newer term"
    assert cluster.raft(1).role is Role.FOLLOWER


def test_the_planted_bug_serves_a_stale_read_and_the_checker_says_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = settled_leader()
    paused_leader_resumes(cluster)
    cluster.cut = {frozenset((1, 2)), frozenset((1, 3))}  # its answer comes before the news
    if cluster.raft(1).role is not Role.LEADER:
        pytest.fail("the scenario needs node 1 to still believe it leads")
    monkeypatch.setattr(RaftNode, "PLANTED_BUG_UNCHECKED_READS", True)
    with pytest.raises(InvariantViolated, match="stale read"):
        cluster.read(1, "k")


def test_a_follower_too_far_behind_catches_up_from_a_snapshot() -> None:
    cluster = settled_leader()
    for node in cluster.nodes.values():
        node.snapshot_every = 4
    cluster.crash(3)
    for number in range(20):
        cluster.write(1, f"k{number % 3}", f"v{number}")
        cluster.settle(1)
    assert cluster.nodes[1].storage.first_index() > cluster.nodes[3].storage.last_index() + 1
    cluster.restart(3)
    cluster.settle(5)
    assert cluster.nodes[3].storage.snapshot().index > 0, "it was sent a snapshot"
    assert cluster.nodes[3].kv == cluster.nodes[1].kv
    assert cluster.nodes[3].applied == cluster.raft(1).log.committed
    write = cluster.write(1, "k0", "after")
    cluster.settle(2)
    assert write.acked_at is not None and cluster.nodes[3].kv["k0"] == "after"


def test_a_long_committed_log_is_applied_in_bounded_batches_in_order() -> None:
    """A follower that was cut off while 40 entries committed gets them back in appends of 8
    and applies them in Readies of at most `apply_bytes_max` bytes beyond the first entry, in
    order, whatever the appends delivered at once."""
    bound = 24  # bytes: an entry here is about 10, so two or three entries per Ready
    cluster = settled_leader(append_entries_max=8, apply_bytes_max=bound)
    cluster.isolate(3)
    for number in range(40):
        cluster.write(1, f"k{number}", f"v{number}")
    cluster.settle(2)
    applied_batches: list[tuple[int, int]] = []  # (entries, bytes) of each Ready node 3 applied
    handle = cluster.nodes[3].handle_ready

    def recording(now: int) -> list[Message]:
        raft = cluster.raft(3)
        if raft.has_ready():
            ready = raft.ready()
            if ready.committed_entries:
                sizes = [entry.size_bytes for entry in ready.committed_entries]
                applied_batches.append((len(sizes), sum(sizes[1:])))
        return handle(now)

    cluster.nodes[3].handle_ready = recording  # type: ignore[method-assign]
    cluster.heal()
    cluster.settle(5)
    assert cluster.nodes[3].kv == cluster.nodes[1].kv
    assert len(cluster.nodes[3].kv) == 40
    assert len(applied_batches) > 40 // 3, applied_batches
    assert all(beyond_first <= bound for _, beyond_first in applied_batches), applied_batches


def test_a_move_by_membership_changes_with_a_partition_in_the_middle() -> None:
    """Add a learner, catch it up, promote it; a removal the cut-off leader proposes is lost;
    the new leader finishes the move by removing the old replica."""
    cluster = Cluster(3, spares=1)
    cluster.elect(1)
    cluster.settle(3)
    cluster.write(1, "k", "before")
    cluster.raft(1).propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 4))
    cluster.settle(3)
    assert cluster.raft(4).conf.learners == {4}
    assert cluster.nodes[4].kv == {"k": "before"}
    with pytest.raises(NotLeader):
        cluster.raft(4).propose(b"learners do not lead")
    cluster.raft(1).propose_conf_change(ConfChange(ConfChangeKind.PROMOTE, 4))
    cluster.settle(3)
    assert all(cluster.raft(n).conf.voters == {1, 2, 3, 4} for n in cluster.nodes)

    cluster.isolate(1)
    cluster.raft(1).propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 2))
    cluster.elect(3)
    write = cluster.write(3, "k", "during")
    cluster.deliver()
    assert write.acked_at is not None, "three voters of four commit without node 1"
    cluster.heal()
    cluster.settle(3)
    assert all(cluster.raft(n).conf.voters == {1, 2, 3, 4} for n in cluster.nodes)
    assert cluster.nodes[1].kv == {"k": "during"}

    cluster.raft(3).propose_conf_change(ConfChange(ConfChangeKind.REMOVE, 1))
    cluster.settle(3)
    assert cluster.raft(3).conf.voters == {2, 3, 4}
    write = cluster.write(3, "k", "after")
    cluster.settle(2)
    assert write.acked_at is not None
    assert cluster.nodes[4].kv == {"k": "after"}


def test_one_membership_change_at_a_time_and_none_before_the_leader_commits_in_its_term() -> None:
    cluster = Cluster(3, spares=2)
    cluster.elect(1)
    leader = cluster.raft(1)
    leader.propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 4))
    with pytest.raises(Exception, match="pending"):
        leader.propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 5))
    cluster.settle(2)
    leader.propose_conf_change(ConfChange(ConfChangeKind.ADD_LEARNER, 5))
    with pytest.raises(Exception, match="not a learner"):
        ConfChange(ConfChangeKind.PROMOTE, 2).applied_to(leader.conf)


def test_leadership_transfer_hands_over_without_waiting_for_a_timeout() -> None:
    cluster = settled_leader()
    cluster.raft(1).transfer_leadership(2)
    cluster.process(1)
    cluster.deliver()
    assert cluster.raft(2).role is Role.LEADER
    assert cluster.raft(2).term == cluster.raft(1).term
    assert not cluster.raft(1).lease_valid()


def test_a_divergent_follower_is_repaired_in_a_few_round_trips_not_one_per_entry() -> None:
    cluster = settled_leader()
    cluster.isolate(1)
    for number in range(30):
        cluster.write(1, "k", f"lost{number}")
    cluster.elect(2)
    for number in range(5):
        cluster.write(2, "k", f"kept{number}")
    cluster.deliver()
    # A leader probes a follower from its own last index at election: hand over to node 3 so
    # that the probe starts past node 1's divergent entries of term 1.
    cluster.raft(2).transfer_leadership(3)
    cluster.process(2)
    cluster.deliver()
    assert cluster.raft(3).role is Role.LEADER
    cluster.heal()
    # The indexes the leader probed at and node 1 rejected (a heartbeat's answer may resend a
    # probe, so one position can be rejected twice).
    rejected: set[int] = set()
    for _ in range(20):
        cluster.tick()
        rejected |= {
            message.index
            for message in cluster.in_flight
            if message.kind is MessageKind.APPEND_RESPONSE and message.reject
        }
        cluster.deliver_round()
    assert cluster.nodes[1].kv == {"k": "kept4"}
    assert len(rejected) == 1, "one rejection skips all six entries of term 2 node 1 lacks"


def test_a_voter_that_hears_the_leader_votes_for_no_one_so_its_lease_holds() -> None:
    """Node 2 alone loses the leader and campaigns while node 3 still hears node 1; right then
    node 1 is cut off entirely, still holding its lease. Node 3 must not vote for node 2 before
    that lease has ended, or node 2 would commit writes that a lease read at node 1 misses (the
    checker would call it a stale read)."""
    cluster = settled_leader()
    cluster.settle(TIMEOUT + 2)
    assert cluster.raft(1).lease_valid()
    cluster.cut.add(frozenset((1, 2)))
    cluster.raft(2).randomized_timeout = TIMEOUT
    cluster.raft(3).randomized_timeout = 1000
    for _ in range(6 * TIMEOUT):
        cluster.tick(1, 3)
        cluster.deliver()
        cluster.tick(2)
        if cluster.raft(2).role is not Role.FOLLOWER:
            cluster.isolate(1)
        cluster.deliver()
        if cluster.raft(2).role is Role.LEADER:
            break
    assert cluster.raft(2).role is Role.LEADER
    write = cluster.write(2, "k", "new")
    cluster.deliver()
    assert write.acked_at is not None
    assert not cluster.raft(1).lease_valid()
    if cluster.raft(1).role is Role.LEADER:
        cluster.read(1, "k")
        cluster.deliver()


def test_election_timeouts_are_drawn_from_the_spread_after_the_timeout() -> None:
    class Recorder:
        def __init__(self) -> None:
            self.calls: list[tuple[int, int]] = []

        def randrange(self, start: int, stop: int, /) -> int:
            self.calls.append((start, stop))
            return start

    recorder = Recorder()
    config = Config(node_id=1, election_timeout_ticks=10, election_spread_ticks=5)
    RaftNode(config, MemoryStorage(ConfState(frozenset({1, 2, 3}))), recorder)
    assert recorder.calls and set(recorder.calls) == {(10, 15)}
    with pytest.raises(ValueError):
        Config(node_id=1, election_spread_ticks=0)
