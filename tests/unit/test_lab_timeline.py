"""The message timeline's pieces: the in-process network's trace of every message (`rpc.local.Hop`:
who sent it to whom, when it left and arrived, what became of it, under each fault), and
`dynalab.lab.timeline` (messages tagged with the client operation they serve, lanes in order, the
file's round trip, the window and key selections)."""

from __future__ import annotations

import asyncio
import contextlib
import random
from typing import Any

import pytest

from core.errors import ConditionalCheckFailed, DynamoError, OutcomeUnknown, ServiceUnavailable
from dynalab.lab import timeline
from dynalab.lab.timeline import Mark, Message, Timeline
from rpc.local import NO_FAULTS, Faults, Hop, LocalNetwork
from rpc.ops import Target

ADDRESS = "local-node1"
TARGET = Target("t", "p", 1)


class Endpoint:
    """A node that applies writes by returning them, and refuses the write named "refuse"."""

    def check_target(self, op: str, target: Target | None) -> None:
        return None

    def read(self, op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]:
        return {"read": body}

    def apply_writes(self, writes: Any) -> list[dict[str, Any] | DynamoError]:
        return [
            ConditionalCheckFailed("no") if body.get("refuse") else {"applied": body}
            for _, _, body in writes
        ]


def network(faults: Faults = NO_FAULTS) -> tuple[LocalNetwork, list[Hop]]:
    hops: list[Hop] = []
    net = LocalNetwork(random.Random(1), faults, clock=asyncio.get_running_loop().time)
    net.register(ADDRESS, Endpoint(), {"put"})
    net.trace = hops.append
    return net, hops


async def test_a_call_is_a_request_and_a_reply_of_its_process() -> None:
    net, hops = network()
    transport = net.connector("router1")(ADDRESS)
    assert await transport.call("put", TARGET, {"v": 1}, 1.0) == {"applied": {"v": 1}}
    request, reply = hops
    assert (request.kind, request.source, request.destination, request.op) == (
        "request",
        "router1",
        ADDRESS,
        "put",
    )
    assert request.fate == "delivered" and request.arrived_at is not None
    assert (reply.kind, reply.source, reply.destination, reply.fate) == (
        "reply",
        ADDRESS,
        "router1",
        "ok",
    )
    assert reply.call_id == request.call_id
    assert reply.sent_at >= request.arrived_at


async def test_a_refusal_is_a_reply_carrying_its_error_type() -> None:
    net, hops = network()
    with pytest.raises(ConditionalCheckFailed):
        await net.connect(ADDRESS, "router1").call("put", TARGET, {"refuse": True}, 1.0)
    assert hops[-1].fate == "ConditionalCheckFailedException"


@pytest.mark.parametrize(
    ("faults", "kind", "fate"),
    [
        (Faults(drop_request=1.0), "request", "dropped"),
        (Faults(drop_reply=1.0), "reply", "dropped"),
        (Faults(delay=1.0, delay_seconds_max=10.0, timeout_seconds=0.01), "request", "late"),
    ],
)
async def test_a_lost_message_never_arrives(faults: Faults, kind: str, fate: str) -> None:
    net, hops = network(faults)
    with pytest.raises(OutcomeUnknown):
        await net.connect(ADDRESS, "router1").call("put", TARGET, {}, 0.05)
    lost = hops[-1]
    assert (lost.kind, lost.fate, lost.arrived_at) == (kind, fate, None)
    # A lost reply's request did arrive: the write was applied.
    assert [h.arrived_at is not None for h in hops] == [kind == "reply", False][: len(hops)]


async def test_a_duplicated_write_and_an_unreachable_node() -> None:
    net, hops = network(Faults(duplicate=1.0))
    await net.connect(ADDRESS, "r").call("put", TARGET, {}, 1.0)
    assert hops[0].fate == "duplicated"
    net.cut(ADDRESS)
    with pytest.raises(ServiceUnavailable):
        await net.connect(ADDRESS, "r").call("put", TARGET, {}, 1.0)
    assert (hops[-1].fate, hops[-1].arrived_at) == ("unreachable", None)


async def test_tracing_draws_nothing_from_the_seeded_source() -> None:
    traced, _ = network(Faults(drop_request=0.5))
    untraced = LocalNetwork(random.Random(1), Faults(drop_request=0.5))
    untraced.register(ADDRESS, Endpoint(), {"put"})
    for net in (traced, untraced):
        for _ in range(20):
            with contextlib.suppress(OutcomeUnknown):
                await net.connect(ADDRESS).call("put", TARGET, {}, 0.05)
    assert traced.log == untraced.log


async def test_messages_carry_the_client_operation_they_serve() -> None:
    net, _ = network()
    trace = Timeline(origin=100.0, names={ADDRESS: "node1"})
    net.trace = trace.hop

    async def put() -> None:
        await net.connect(ADDRESS, "router1").call("put", TARGET, {}, 1.0)

    with timeline.serving(3, "write", ["r1"]):
        # A task started while serving (a router's handler) carries the operation too.
        await asyncio.ensure_future(put())
    await put()
    tagged, reply, untagged, _ = trace.messages
    assert (tagged.process, tagged.keys, tagged.destination) == (3, ("r1",), "node1")
    assert (reply.source, reply.destination) == ("node1", "router1")
    assert (untagged.process, untagged.keys) == (None, ())
    assert tagged.sent_s == pytest.approx(asyncio.get_running_loop().time() - 100.0, abs=1.0)


def message(sent: float, arrived: float | None, keys: tuple[str, ...] = ()) -> Message:
    return Message(
        "c1", "request", "client-1", "router1", "PutItem", sent, arrived, "ok", keys=keys
    )


def test_lanes_are_clients_routers_nodes_replicators_in_number_order() -> None:
    trace = Timeline(0.0)
    for source, destination in [
        ("replicator1", "node10"),
        ("router1", "node2"),
        ("client-10", "router1"),
        ("client-2", "router2"),
    ]:
        trace.add(Message("x", "request", source, destination, "op", 0.0, 0.0, "ok"))
    trace.mark(Mark(1.0, "node1", "leader, term 2", "leader"))
    assert trace.lanes() == [
        "client-2",
        "client-10",
        "router1",
        "router2",
        "node1",
        "node2",
        "node10",
        "replicator1",
    ]


def test_a_timeline_round_trips_through_its_file(tmp_path) -> None:
    trace = Timeline(0.0)
    trace.add(message(1.0, 1.5, ("r1", "r2")))
    trace.add(message(2.0, None))
    trace.mark(Mark(1.0, "node1", "leader, term 2", "leader"))
    trace.write(tmp_path)
    again = timeline.read(tmp_path)
    assert again is not None
    assert again.messages == trace.messages and again.marks == trace.marks
    assert timeline.read(tmp_path / "nothing") is None


def test_window_and_key_selections() -> None:
    early, lost, late = message(1.0, 1.2, ("r1",)), message(2.0, None, ("r2",)), message(5.0, 6.0)
    messages = [early, lost, late]
    assert timeline.in_window(messages, 1.1, 2.5) == [early, lost]
    assert timeline.in_window(messages, 5.5, 9.0) == [late]
    assert timeline.of_key(messages, "r2") == [lost]
