"""`rpc.raft_codec`: every Raft message crosses the wire unchanged, heartbeats coalesced."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.raft.messages import (
    ConfState,
    Entry,
    EntryKind,
    Message,
    MessageKind,
    Snapshot,
)
from rpc import raft_pb2
from rpc.raft_codec import (
    RaftDecodeError,
    decode_batch,
    encode_batch,
    message_bytes,
    message_from_proto,
    message_to_proto,
)

U64 = st.integers(min_value=0, max_value=2**64 - 1)
# Small numbers too, so generated messages look like the core's (ids 1-5, low terms) as often
# as like the extremes.
NUMBERS = st.one_of(st.integers(min_value=0, max_value=5), U64)


@st.composite
def conf_states(draw: st.DrawFn) -> ConfState:
    members = draw(st.sets(NUMBERS, max_size=6))
    learners = draw(st.sets(st.sampled_from(sorted(members)), max_size=3)) if members else set()
    return ConfState(frozenset(members - learners), frozenset(learners))


@st.composite
def entries(draw: st.DrawFn) -> Entry:
    kind = draw(st.sampled_from(EntryKind))
    conf = draw(conf_states()) if kind is EntryKind.CONF else None
    return Entry(
        index=draw(NUMBERS),
        term=draw(NUMBERS),
        kind=kind,
        data=draw(st.binary(max_size=64)),
        conf=conf,
    )


snapshots = st.builds(
    Snapshot, index=NUMBERS, term=NUMBERS, conf=conf_states(), data=st.binary(max_size=256)
)

messages = st.builds(
    Message,
    kind=st.sampled_from(MessageKind),
    sender=NUMBERS,
    to=NUMBERS,
    term=NUMBERS,
    index=NUMBERS,
    log_term=NUMBERS,
    entries=st.lists(entries(), max_size=4).map(tuple),
    commit=NUMBERS,
    reject=st.booleans(),
    reject_hint=NUMBERS,
    snapshot=st.none() | snapshots,
    lease_tick=NUMBERS,
    context=NUMBERS,
    force=st.booleans(),
)


def heartbeats(from_node: int, to_node: int) -> st.SearchStrategy[Message]:
    """Heartbeats and responses as the core sends them between two nodes: coalescible."""
    return st.builds(
        Message,
        kind=st.sampled_from([MessageKind.HEARTBEAT, MessageKind.HEARTBEAT_RESPONSE]),
        sender=st.just(from_node),
        to=st.just(to_node),
        term=NUMBERS,
        commit=NUMBERS,
        lease_tick=NUMBERS,
        context=NUMBERS,
    )


groups = st.text(max_size=40)


@settings(max_examples=300)
@given(messages)
def test_every_message_round_trips_exactly(message: Message) -> None:
    proto = message_to_proto(message)
    assert message_from_proto(proto) == message
    # Through the bytes too, as the stream carries it.
    assert message_from_proto(raft_pb2.RaftMessage.FromString(proto.SerializeToString())) == message


@st.composite
def batches(draw: st.DrawFn) -> tuple[int, int, list[tuple[str, Message]]]:
    from_node, to_node = draw(NUMBERS), draw(NUMBERS)
    one = st.tuples(groups, st.one_of(messages, heartbeats(from_node, to_node)))
    return from_node, to_node, draw(st.lists(one, max_size=8))


@settings(max_examples=100)
@given(batches())
def test_every_batch_round_trips_in_order(
    case: tuple[int, int, list[tuple[str, Message]]],
) -> None:
    from_node, to_node, batch = case
    proto = encode_batch(from_node, to_node, batch)
    wire = raft_pb2.RaftBatch.FromString(proto.SerializeToString())
    assert (wire.from_node, wire.to_node) == (from_node, to_node)
    assert decode_batch(wire) == batch


@given(st.lists(st.tuples(groups, heartbeats(1, 2)), min_size=1, max_size=12))
def test_heartbeats_between_the_batch_nodes_travel_compact(
    batch: list[tuple[str, Message]],
) -> None:
    proto = encode_batch(1, 2, batch)
    assert all(record.WhichOneof("body") != "message" for record in proto.messages)
    full = raft_pb2.RaftBatch(
        from_node=1,
        to_node=2,
        messages=[
            raft_pb2.GroupMessage(
                message=raft_pb2.FullMessage(group=group, message=message_to_proto(message))
            )
            for group, message in batch
        ],
    )
    assert proto.ByteSize() < full.ByteSize()
    assert decode_batch(proto) == batch


def test_a_heartbeat_with_more_than_the_compact_fields_travels_in_full() -> None:
    base = Message(MessageKind.HEARTBEAT, sender=1, to=2, term=3, commit=4, lease_tick=5)
    unusual = [
        Message(MessageKind.HEARTBEAT, sender=1, to=2, term=3, reject=True),
        Message(MessageKind.HEARTBEAT_RESPONSE, sender=1, to=2, term=3, index=7),
        Message(MessageKind.HEARTBEAT, sender=9, to=2, term=3),  # another sender than the batch's
        Message(MessageKind.HEARTBEAT, sender=1, to=9, term=3),  # another receiver
    ]
    proto = encode_batch(1, 2, [("g", base), *(("g", message) for message in unusual)])
    kinds = [record.WhichOneof("body") for record in proto.messages]
    assert kinds == ["heartbeat", "message", "message", "message", "message"]
    assert decode_batch(proto) == [("g", base), *(("g", message) for message in unusual)]


def test_a_snapshot_with_its_membership_crosses() -> None:
    conf = ConfState(frozenset({1, 2, 3}), frozenset({4}))
    snapshot = Snapshot(index=10, term=2, conf=conf, data=b"state")
    message = Message(MessageKind.SNAPSHOT, sender=1, to=4, term=2, snapshot=snapshot)
    proto = message_to_proto(message)
    assert list(proto.snapshot.conf.voters) == [1, 2, 3]  # sorted: one encoding per membership
    assert message_from_proto(proto) == message


def test_an_empty_membership_still_marks_a_conf_entry() -> None:
    entry = Entry(index=1, term=1, kind=EntryKind.CONF, conf=ConfState(frozenset()))
    message = Message(MessageKind.APPEND, sender=1, to=2, term=1, entries=(entry,))
    wire = message_to_proto(message).SerializeToString()
    assert message_from_proto(raft_pb2.RaftMessage.FromString(wire)) == message


def test_a_value_beyond_uint64_is_refused() -> None:
    with pytest.raises(ValueError):
        message_to_proto(Message(MessageKind.APPEND, sender=1, to=2, term=2**64))
    with pytest.raises(ValueError):
        message_to_proto(Message(MessageKind.APPEND, sender=1, to=2, term=1, context=-1))


def test_what_the_core_cannot_read_is_refused() -> None:
    unknown_kind = raft_pb2.RaftMessage(kind=99)  # type: ignore[arg-type]
    with pytest.raises(RaftDecodeError, match="message kind"):
        message_from_proto(unknown_kind)
    conf_without_members = raft_pb2.RaftMessage(entries=[raft_pb2.Entry(kind=raft_pb2.Entry.CONF)])
    with pytest.raises(RaftDecodeError, match="conf entry"):
        message_from_proto(conf_without_members)
    normal_with_members = raft_pb2.RaftMessage(
        entries=[raft_pb2.Entry(kind=raft_pb2.Entry.NORMAL, conf=raft_pb2.ConfState(voters=[1]))]
    )
    with pytest.raises(RaftDecodeError, match="normal entry"):
        message_from_proto(normal_with_members)
    both = raft_pb2.RaftMessage(
        snapshot=raft_pb2.Snapshot(conf=raft_pb2.ConfState(voters=[1, 2], learners=[2]))
    )
    with pytest.raises(RaftDecodeError, match="both voter and learner"):
        message_from_proto(both)
    empty_record = raft_pb2.RaftBatch(messages=[raft_pb2.GroupMessage()])
    with pytest.raises(RaftDecodeError, match="no message"):
        decode_batch(empty_record)


def test_message_bytes_counts_data_and_snapshots() -> None:
    small = Message(MessageKind.HEARTBEAT, sender=1, to=2, term=1)
    entry = Entry(index=1, term=1, data=b"x" * 1000)
    snapshot = Snapshot(index=1, term=1, conf=ConfState(frozenset({1})), data=b"y" * 5000)
    append = Message(MessageKind.APPEND, sender=1, to=2, term=1, entries=(entry, entry))
    install = Message(MessageKind.SNAPSHOT, sender=1, to=2, term=1, snapshot=snapshot)
    assert message_bytes("g", small) < 100
    assert message_bytes("g", append) >= 2000
    assert message_bytes("g", install) >= 5000
    # An estimate that errs on the side of the bound: never below the encoded size.
    for message in (small, append, install):
        encoded = encode_batch(1, 2, [("g", message)]).ByteSize()
        assert message_bytes("g", message) >= encoded
