"""rpc.catalog_client.CatalogNodes: calls to the system partitions where the catalog is, on one
node or at a replicated catalog's leader, over fake transports."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from core import catalog
from core.catalog import CatalogLocation
from core.errors import ConditionalCheckFailed, NotPartitionLeader, ServiceUnavailable
from rpc import ops
from rpc.catalog_client import CatalogNodes
from rpc.transport import NotSent

REPLICATED = CatalogLocation(
    "node-1", "h:1", replicas=(("node-1", "h:1"), ("node-2", "h:2"), ("node-3", "h:3"))
)
ONE_COPY = CatalogLocation("node-2", "h:2")
TABLE = {"id": catalog.CATALOG_TABLE_ID, "name": "c", "key_schema": catalog.SYSTEM_KEY_SCHEMA}


class Node:
    """A fake node: answers data-plane calls as its `role` says, records what it was asked."""

    def __init__(self, name: str, role: str = "follower", leader: str | None = None) -> None:
        self.name, self.role, self.leader = name, role, leader
        self.calls: list[str] = []
        self.created: list[dict[str, Any]] = []

    async def call(
        self, op: str, target: ops.Target, body: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        self.calls.append(op)
        if self.role == "down":
            raise NotSent(f"{self.name} unreachable")
        if self.role == "follower":
            raise NotPartitionLeader("not the leader", self.leader)
        assert target.consistent == (op in (ops.GET, ops.SCAN))
        if op == ops.PUT and body.get("condition"):
            raise ConditionalCheckFailed("The conditional request failed")
        return {"item": None, "at": self.name}

    async def control(self, op: str, body: dict[str, Any], timeout: float) -> dict[str, Any]:
        if self.role == "down":
            raise ServiceUnavailable(f"{self.name} unreachable")
        assert op == ops.CREATE_PARTITION
        self.created.append(body["partition"])
        return {}


def nodes_of(*nodes: Node) -> tuple[CatalogNodes, dict[str, Node]]:
    by_name = {node.name: node for node in nodes}
    return CatalogNodes(lambda location, name: by_name[name]), by_name  # type: ignore[arg-type,return-value]


def call(nodes: CatalogNodes, location: CatalogLocation, op: str, **body: Any) -> dict[str, Any]:
    return asyncio.run(nodes.call(location, catalog.CATALOG_TABLE_ID, location.partition, op, body))


def test_a_replicated_catalog_is_read_and_written_at_its_leader() -> None:
    nodes, by_name = nodes_of(
        Node("node-1", leader="node-3"), Node("node-2", leader="node-3"), Node("node-3", "leader")
    )
    assert call(nodes, REPLICATED, ops.GET, key={})["at"] == "node-3"
    assert call(nodes, REPLICATED, ops.PUT, item={})["at"] == "node-3"
    assert by_name["node-1"].calls == [ops.GET]  # The leader, once learnt, is asked first.
    with pytest.raises(ConditionalCheckFailed):
        call(nodes, REPLICATED, ops.PUT, item={}, condition="attribute_not_exists(#n)")


def test_a_dead_first_replica_is_passed_by() -> None:
    nodes, _ = nodes_of(Node("node-1", "down"), Node("node-2", "leader"), Node("node-3"))
    assert call(nodes, REPLICATED, ops.PUT, item={})["at"] == "node-2"


def test_a_catalog_of_one_copy_not_answering_is_unavailable_naming_its_node() -> None:
    nodes, by_name = nodes_of(Node("node-2", "down"), Node("node-3", "leader"))
    with pytest.raises(ServiceUnavailable, match="its storage node node-2 does not answer"):
        call(nodes, ONE_COPY, ops.GET, key={})
    assert by_name["node-3"].calls == []


def test_no_quorum_answering_is_unavailable_naming_the_replicas(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("core.limits.NODE_CALL_SECONDS_MAX", 0.3)
    nodes, _ = nodes_of(Node("node-1", "down"), Node("node-2", leader=None), Node("node-3", "down"))
    with pytest.raises(ServiceUnavailable, match="no quorum of its replicas on node-1, node-2"):
        call(nodes, REPLICATED, ops.GET, key={})


def test_a_system_partition_is_created_on_every_replica_and_needs_a_quorum() -> None:
    nodes, by_name = nodes_of(Node("node-1"), Node("node-2", "down"), Node("node-3"))
    asyncio.run(nodes.create(REPLICATED, TABLE, catalog.CATALOG_PARTITION_ID))
    created = by_name["node-1"].created + by_name["node-3"].created
    assert [partition["replicas"] for partition in created] == [list(REPLICATED.nodes)] * 2
    nodes, _ = nodes_of(Node("node-1", "down"), Node("node-2", "down"), Node("node-3"))
    with pytest.raises(ServiceUnavailable, match="no quorum"):
        asyncio.run(nodes.create(REPLICATED, TABLE, catalog.CATALOG_PARTITION_ID))
    nodes, by_name = nodes_of(Node("node-2"))
    asyncio.run(nodes.create(ONE_COPY, TABLE, catalog.CATALOG_PARTITION_ID))
    assert "replicas" not in by_name["node-2"].created[0]
