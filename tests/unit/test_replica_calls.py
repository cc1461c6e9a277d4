"""rpc.replicas.ReplicaCalls: where a call to a partition goes, on fake attempts."""

from __future__ import annotations

import asyncio

import pytest

from core.catalog import PartitionDef
from core.errors import NotPartitionLeader, ServiceUnavailable, StaleEpoch
from rpc.replicas import ReplicaCalls
from rpc.transport import NotSent

REPLICATED = PartitionDef("p0", "", None, 1, "node-1", replicas=("node-1", "node-2", "node-3"))
ONE_COPY = PartitionDef("p1", "", None, 1, "node-2")


class Nodes:
    """Each node's next answers (an exception to raise, or a value), and the nodes asked."""

    def __init__(self, **answers: list[object]) -> None:
        self.answers = {name.replace("_", "-"): list(a) for name, a in answers.items()}
        self.asked: list[str] = []

    async def attempt(self, node: str, remaining: float) -> str:
        assert remaining > 0
        self.asked.append(node)
        queue = self.answers.get(node, [])
        answer = queue.pop(0) if queue else "ok"
        if isinstance(answer, BaseException):
            raise answer
        return f"{answer} from {node}"


def call(calls: ReplicaCalls, nodes: Nodes, partition: PartitionDef, **kw: bool) -> str:
    return asyncio.run(calls.call(partition, "t", "put", nodes.attempt, 5.0, **kw))


def test_a_partition_of_one_copy_is_called_once_on_its_node() -> None:
    nodes = Nodes(node_2=[ServiceUnavailable("down")])
    with pytest.raises(ServiceUnavailable):
        call(ReplicaCalls(), nodes, ONE_COPY, retry_safe=True)
    assert nodes.asked == ["node-2"]


def test_a_refusal_naming_the_leader_goes_there_and_is_remembered() -> None:
    calls = ReplicaCalls()
    nodes = Nodes(node_1=[NotPartitionLeader("no", "node-3")])
    assert call(calls, nodes, REPLICATED) == "ok from node-3"
    assert calls.knows_leader("t", "p0")
    assert call(calls, nodes, REPLICATED) == "ok from node-3"
    assert nodes.asked == ["node-1", "node-3", "node-3"]


def test_a_write_not_sent_goes_on_but_one_perhaps_taken_is_the_callers() -> None:
    nodes = Nodes(node_1=[NotSent("unreachable")])
    assert call(ReplicaCalls(), nodes, REPLICATED) == "ok from node-2"
    nodes = Nodes(node_1=[ServiceUnavailable("no answer")])
    with pytest.raises(ServiceUnavailable):
        call(ReplicaCalls(), nodes, REPLICATED)
    assert nodes.asked == ["node-1"]
    nodes = Nodes(node_1=[ServiceUnavailable("no answer")])
    assert call(ReplicaCalls(), nodes, REPLICATED, retry_safe=True) == "ok from node-2"


def test_while_no_leader_is_known_every_replica_is_asked_again_after_a_pause() -> None:
    nobody = [NotPartitionLeader("electing", None)] * 2
    nodes = Nodes(node_1=list(nobody), node_2=list(nobody), node_3=list(nobody))
    assert call(ReplicaCalls(), nodes, REPLICATED).startswith("ok from")
    assert sorted(nodes.asked[:3]) == ["node-1", "node-2", "node-3"]
    assert len(nodes.asked) == 7


def test_a_call_that_finds_no_leader_in_time_is_service_unavailable() -> None:
    always = [NotPartitionLeader("electing", None)] * 1000
    nodes = Nodes(node_1=list(always), node_2=list(always), node_3=list(always))

    async def short() -> str:
        return await ReplicaCalls().call(REPLICATED, "t", "put", nodes.attempt, 0.3)

    with pytest.raises(ServiceUnavailable, match="could take the put in time"):
        asyncio.run(short())


def test_eventual_reads_take_the_replicas_in_turn() -> None:
    calls = ReplicaCalls()
    nodes = Nodes()
    for _ in range(3):
        call(calls, nodes, REPLICATED, anywhere=True, retry_safe=True)
    assert sorted(nodes.asked) == ["node-1", "node-2", "node-3"]
    assert not calls.knows_leader("t", "p0")


def test_a_leader_that_moved_away_is_not_asked_again() -> None:
    """A replica move (`core.machines.replica_move`) takes the leader seen last out of the
    group: its StaleEpoch is the caller's (it reads the catalog again), and neither a call at
    the old catalog nor one at the new asks it again."""
    calls = ReplicaCalls()
    nodes = Nodes(node_1=[NotPartitionLeader("no", "node-3")])
    assert call(calls, nodes, REPLICATED) == "ok from node-3"
    nodes = Nodes(node_3=[StaleEpoch("Partition p0 of table t is not on this node")])
    with pytest.raises(StaleEpoch):
        call(calls, nodes, REPLICATED)
    assert call(calls, nodes, REPLICATED) == "ok from node-1"
    calls = ReplicaCalls()
    assert call(calls, Nodes(node_1=[NotPartitionLeader("no", "node-3")]), REPLICATED)
    moved = PartitionDef("p0", "", None, 1, "node-1", replicas=("node-1", "node-2", "node-4"))
    nodes = Nodes()
    assert call(calls, nodes, moved) == "ok from node-1"
    assert nodes.asked == ["node-1"]
