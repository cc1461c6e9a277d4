"""The one translation between `core.raft.messages` and the RaftTransport service's messages.

`proto/rpc/raft.proto` mirrors `Message`, `Entry`, `Snapshot` and `ConfState` field for field, so
`message_from_proto(message_to_proto(m)) == m` for every message the core can make (a property
test checks it over generated messages). Ids, terms, indexes, ticks and read contexts travel as
uint64: a value outside [0, 2**64) cannot be encoded (`ValueError`), and the core makes none.

A batch is what one node sends another in one stream message: `(group, message)` pairs in the
order queued. `encode_batch` writes each heartbeat and heartbeat response between the batch's two
nodes as a compact record (group, term, commit, lease_tick, context) when that record says all
the message says, which `_coalescible` decides by rebuilding the message from the record and
comparing; any other message travels in full. So `decode_batch(encode_batch(...))` gives back the
same pairs in the same order, coalesced or not.

Decoding checks what the receiver's core would otherwise assert on: an enum value this version
does not know, a CONF entry without its membership (or a NORMAL one with one), a member both voter
and learner. Such a batch comes from a peer of another version or a bug; it raises
`RaftDecodeError`, and the servicer refuses the stream rather than step a message it misread.
"""

from __future__ import annotations

from collections.abc import Iterable

from core.raft.messages import ConfState, Entry, EntryKind, Message, MessageKind, Snapshot
from rpc import raft_pb2

_MESSAGE_KINDS: dict[MessageKind, raft_pb2.RaftMessage.Kind.ValueType] = {
    MessageKind.APPEND: raft_pb2.RaftMessage.APPEND,
    MessageKind.APPEND_RESPONSE: raft_pb2.RaftMessage.APPEND_RESPONSE,
    MessageKind.HEARTBEAT: raft_pb2.RaftMessage.HEARTBEAT,
    MessageKind.HEARTBEAT_RESPONSE: raft_pb2.RaftMessage.HEARTBEAT_RESPONSE,
    MessageKind.VOTE: raft_pb2.RaftMessage.VOTE,
    MessageKind.VOTE_RESPONSE: raft_pb2.RaftMessage.VOTE_RESPONSE,
    MessageKind.PRE_VOTE: raft_pb2.RaftMessage.PRE_VOTE,
    MessageKind.PRE_VOTE_RESPONSE: raft_pb2.RaftMessage.PRE_VOTE_RESPONSE,
    MessageKind.SNAPSHOT: raft_pb2.RaftMessage.SNAPSHOT,
    MessageKind.TIMEOUT_NOW: raft_pb2.RaftMessage.TIMEOUT_NOW,
}
_MESSAGE_KIND_OF = {number: kind for kind, number in _MESSAGE_KINDS.items()}
assert len(_MESSAGE_KINDS) == len(MessageKind), "every message kind has a wire value"

_ENTRY_KINDS: dict[EntryKind, raft_pb2.Entry.Kind.ValueType] = {
    EntryKind.NORMAL: raft_pb2.Entry.NORMAL,
    EntryKind.CONF: raft_pb2.Entry.CONF,
}
_ENTRY_KIND_OF = {number: kind for kind, number in _ENTRY_KINDS.items()}
assert len(_ENTRY_KINDS) == len(EntryKind), "every entry kind has a wire value"


# A full message's fixed fields (ten varints of up to 10 bytes with their tags, framing) and an
# entry's (index, term, kind, framing, a membership of a few members): upper bounds for the
# common case, so a queue's byte count errs on the side of its bound.
_MESSAGE_OVERHEAD_BYTES = 64
_ENTRY_OVERHEAD_BYTES = 32


class RaftDecodeError(ValueError):
    """A batch this version cannot read as the core's messages (another version, or a bug)."""


# One message ----------------------------------------------------------------------------------


def message_to_proto(message: Message) -> raft_pb2.RaftMessage:
    proto = raft_pb2.RaftMessage(
        kind=_MESSAGE_KINDS[message.kind],
        sender=message.sender,
        to=message.to,
        term=message.term,
        index=message.index,
        log_term=message.log_term,
        entries=[_entry_to_proto(entry) for entry in message.entries],
        commit=message.commit,
        reject=message.reject,
        reject_hint=message.reject_hint,
        lease_tick=message.lease_tick,
        context=message.context,
        force=message.force,
    )
    if message.snapshot is not None:
        proto.snapshot.CopyFrom(_snapshot_to_proto(message.snapshot))
    return proto


def message_from_proto(proto: raft_pb2.RaftMessage) -> Message:
    kind = _MESSAGE_KIND_OF.get(proto.kind)
    if kind is None:
        raise RaftDecodeError(f"unknown Raft message kind {proto.kind}")
    return Message(
        kind=kind,
        sender=proto.sender,
        to=proto.to,
        term=proto.term,
        index=proto.index,
        log_term=proto.log_term,
        entries=tuple(_entry_from_proto(entry) for entry in proto.entries),
        commit=proto.commit,
        reject=proto.reject,
        reject_hint=proto.reject_hint,
        snapshot=_snapshot_from_proto(proto.snapshot) if proto.HasField("snapshot") else None,
        lease_tick=proto.lease_tick,
        context=proto.context,
        force=proto.force,
    )


def _conf_to_proto(conf: ConfState) -> raft_pb2.ConfState:
    return raft_pb2.ConfState(voters=sorted(conf.voters), learners=sorted(conf.learners))


def _conf_from_proto(proto: raft_pb2.ConfState) -> ConfState:
    voters, learners = frozenset(proto.voters), frozenset(proto.learners)
    if voters & learners:
        raise RaftDecodeError(f"members {sorted(voters & learners)} are both voter and learner")
    return ConfState(voters, learners)


def _entry_to_proto(entry: Entry) -> raft_pb2.Entry:
    proto = raft_pb2.Entry(
        index=entry.index, term=entry.term, kind=_ENTRY_KINDS[entry.kind], data=entry.data
    )
    if entry.conf is not None:
        proto.conf.CopyFrom(_conf_to_proto(entry.conf))
    return proto


def _entry_from_proto(proto: raft_pb2.Entry) -> Entry:
    kind = _ENTRY_KIND_OF.get(proto.kind)
    if kind is None:
        raise RaftDecodeError(f"unknown Raft entry kind {proto.kind}")
    has_conf = proto.HasField("conf")
    if has_conf != (kind is EntryKind.CONF):
        raise RaftDecodeError(f"a {kind.value} entry at {proto.index} with conf={has_conf}")
    conf = _conf_from_proto(proto.conf) if has_conf else None
    return Entry(index=proto.index, term=proto.term, kind=kind, data=proto.data, conf=conf)


def _snapshot_to_proto(snapshot: Snapshot) -> raft_pb2.Snapshot:
    return raft_pb2.Snapshot(
        index=snapshot.index,
        term=snapshot.term,
        conf=_conf_to_proto(snapshot.conf),
        data=snapshot.data,
    )


def _snapshot_from_proto(proto: raft_pb2.Snapshot) -> Snapshot:
    return Snapshot(
        index=proto.index, term=proto.term, conf=_conf_from_proto(proto.conf), data=proto.data
    )


# A batch between two nodes ----------------------------------------------------------------------


def _coalesced(
    kind: MessageKind, from_node: int, to_node: int, record: raft_pb2.CoalescedHeartbeat
) -> Message:
    """The heartbeat (or response) a compact record stands for, between the batch's nodes."""
    return Message(
        kind=kind,
        sender=from_node,
        to=to_node,
        term=record.term,
        commit=record.commit,
        lease_tick=record.lease_tick,
        context=record.context,
    )


def _coalescible(message: Message, from_node: int, to_node: int) -> bool:
    """Whether a compact record carries all of `message`: a heartbeat or its response between the
    batch's two nodes with no field set beyond term, commit, lease_tick and context. Decided by
    rebuilding it from those fields, so the compact form can never lose anything."""
    if message.kind not in (MessageKind.HEARTBEAT, MessageKind.HEARTBEAT_RESPONSE):
        return False
    rebuilt = Message(
        kind=message.kind,
        sender=from_node,
        to=to_node,
        term=message.term,
        commit=message.commit,
        lease_tick=message.lease_tick,
        context=message.context,
    )
    return rebuilt == message


def encode_batch(
    from_node: int, to_node: int, batch: Iterable[tuple[str, Message]]
) -> raft_pb2.RaftBatch:
    """One stream message from `from_node` to `to_node`: the pairs in order, heartbeats compact."""
    records = []
    for group, message in batch:
        if _coalescible(message, from_node, to_node):
            record = raft_pb2.CoalescedHeartbeat(
                group=group,
                term=message.term,
                commit=message.commit,
                lease_tick=message.lease_tick,
                context=message.context,
            )
            if message.kind is MessageKind.HEARTBEAT:
                records.append(raft_pb2.GroupMessage(heartbeat=record))
            else:
                records.append(raft_pb2.GroupMessage(heartbeat_response=record))
        else:
            full = raft_pb2.FullMessage(group=group, message=message_to_proto(message))
            records.append(raft_pb2.GroupMessage(message=full))
    return raft_pb2.RaftBatch(from_node=from_node, to_node=to_node, messages=records)


def decode_batch(proto: raft_pb2.RaftBatch) -> list[tuple[str, Message]]:
    """The `(group, message)` pairs of a stream message, in the order they were queued."""
    batch: list[tuple[str, Message]] = []
    for record in proto.messages:
        body = record.WhichOneof("body")
        if body == "message":
            batch.append((record.message.group, message_from_proto(record.message.message)))
        elif body == "heartbeat":
            heartbeat = _coalesced(
                MessageKind.HEARTBEAT, proto.from_node, proto.to_node, record.heartbeat
            )
            batch.append((record.heartbeat.group, heartbeat))
        elif body == "heartbeat_response":
            response = _coalesced(
                MessageKind.HEARTBEAT_RESPONSE,
                proto.from_node,
                proto.to_node,
                record.heartbeat_response,
            )
            batch.append((record.heartbeat_response.group, response))
        else:
            raise RaftDecodeError("a batch record with no message in it")
    return batch


def message_bytes(group: str, message: Message) -> int:
    """About how many bytes `(group, message)` takes on the wire: its data, snapshot and group
    name, plus a fixed allowance per message and entry for the small fields. What the transport
    bounds its queues and stream messages by, without encoding a message twice."""
    total = len(group) + _MESSAGE_OVERHEAD_BYTES
    for entry in message.entries:
        total += len(entry.data) + _ENTRY_OVERHEAD_BYTES
    if message.snapshot is not None:
        total += len(message.snapshot.data) + _ENTRY_OVERHEAD_BYTES
    return total
