"""A simulated lab run's message timeline (`simulate(..., trace=...)`, `dynalab.lab.timeline`):
every client operation is a request to the router and, unless the router died with it, a reply
saying what the client was told; the router's calls to the nodes on its behalf carry its key; a
killed node receives nothing while it is down; the replicator's feed batches are there; and
tracing changes nothing in the run."""

from __future__ import annotations

from collections import defaultdict

from dynalab.lab import scenarios, timeline
from dynalab.lab.scenarios import fault_windows
from dynalab.lab.simulated import simulate

DURATION_S = 12.0


def test_every_operation_is_a_request_and_its_reply_and_the_nodes_calls_carry_its_key() -> None:
    scenario = scenarios.load("kill-node")
    trace = timeline.Timeline(0.0)
    verdict, history, executed = simulate(scenario, 1, DURATION_S, trace=trace)
    assert verdict["valid"]
    messages = trace.messages
    lanes = trace.lanes()
    assert {"router1", "node1", "node2", "node3", "client-1"} <= set(lanes)
    by_call: dict[str, list[timeline.Message]] = defaultdict(list)
    for message in messages:
        by_call[message.call].append(message)
    client_requests = [m for m in messages if m.source.startswith("client-")]
    # One request per operation (a BatchWriteItem is one request for its several keys' writes).
    per_key = {(o.process, o.invoke_s) for o in history if o.op != "index-scan"}
    assert len(client_requests) == len(per_key)
    for request in client_requests:
        assert request.process is not None and request.keys
        replies = [m for m in by_call[request.call] if m.kind == "reply"]
        if request.fate == "delivered":
            assert len(replies) == 1, request
            assert replies[0].destination == request.source
    ok_fates = {
        m.fate for m in messages if m.kind == "reply" and m.destination.startswith("client")
    }
    assert "ok" in ok_fates
    to_nodes = [m for m in messages if m.destination.startswith("node") and m.process is not None]
    assert to_nodes, "the router's calls to the nodes carry the operation they serve"
    keys_of_clients = {key for m in client_requests for key in m.keys}
    assert {key for m in to_nodes for key in m.keys} <= keys_of_clients
    # A killed node receives nothing from its kill to its restart.
    for start, end, label in fault_windows(executed, DURATION_S):
        node = label.split()[-1].replace("-", "")
        inside = [
            m
            for m in messages
            if m.destination == node and m.kind == "request" and start < m.sent_s < end - 0.01
        ]
        assert inside, f"nothing was sent to {node} while it was down"
        assert all(m.arrived_s is None for m in inside), inside[:3]
    assert all(m.arrived_s is None or m.arrived_s >= m.sent_s for m in messages)


def test_tracing_changes_nothing_and_the_feed_batches_reach_the_replicator() -> None:
    scenario = scenarios.load("kill-replicator")
    trace = timeline.Timeline(0.0)
    traced = simulate(scenario, 2, DURATION_S, trace=trace)
    untraced = simulate(scenario, 2, DURATION_S)
    assert [o.to_json() for o in traced[1]] == [o.to_json() for o in untraced[1]]
    batches = [m for m in trace.messages if m.kind == "batch"]
    assert batches and all(m.destination.startswith("replicator") for m in batches)
    assert any(m.op == "index_apply" and m.source.startswith("replicator") for m in trace.messages)
