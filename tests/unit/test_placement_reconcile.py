"""rpc.placement: the replicas a table's row places, whether a creation that missed some nodes
stands, and what a node does to match the catalog (`reconcile`)."""

from __future__ import annotations

import dataclasses

from core import catalog
from core.catalog import TableDef, TableStatus, Throughput
from core.keys import KeyShape
from core.placement import HashRing
from core.token_bucket import BillingMode
from rpc import ops
from rpc.placement import heals, quorum_reached, reconcile, replica_creations

NODES = ("node-1", "node-2", "node-3")
RING = HashRing(NODES)


def table(name: str, table_id: str, factor: int = 3, ring: HashRing = RING) -> TableDef:
    created = catalog.created(
        name=name,
        table_id=table_id,
        key_shape=KeyShape.table(("pk", "S"), None),
        attribute_definitions=[("pk", "S")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        now=1.0,
        owner=lambda _: "node-1",
        replicas_of=(lambda key, i: ring.spread(key, factor, i)) if factor > 1 else None,
    )
    return catalog.activated(created)


def held_by(node: str, *tables: TableDef) -> set[tuple[str, str]]:
    return {
        (creation.stored_id, creation.partition.id)
        for t in tables
        for creation in replica_creations(t)
        if creation.node == node
    }


def test_every_replica_of_every_partition_is_created_alike() -> None:
    t = table("T", "a" * 32)
    creations = replica_creations(t)
    assert len(creations) == 3 * len(t.partitions)
    for partition in t.partitions:
        mine = [c for c in creations if c.partition.id == partition.id]
        assert sorted(c.node for c in mine) == sorted(partition.replicas)
        assert len({str(c.payload) for c in mine}) == 1  # Every replica's payload the same.
        body = ops.CreatePartitionPayload.from_json(mine[0].payload)
        assert body.partition["replicas"] == list(partition.replicas)


def test_a_creation_stands_when_each_replicated_partition_has_a_quorum() -> None:
    creations = replica_creations(table("T", "a" * 32))
    on_node_3 = [c for c in creations if c.node == "node-3"]
    assert quorum_reached(creations, [])
    assert quorum_reached(creations, on_node_3)
    one_partition = creations[0].partition.id
    two_of_one = [c for c in creations if c.partition.id == one_partition][:2]
    assert not quorum_reached(creations, two_of_one)
    one_copy = replica_creations(table("U", "b" * 32, factor=1))
    assert not quorum_reached(one_copy, one_copy[:1])


def test_a_node_back_creates_its_missing_replicas_and_drops_what_the_catalog_lost() -> None:
    kept, gone = table("Kept", "a" * 32), table("Gone", "b" * 32)
    held = held_by("node-3", gone) | {(catalog.CATALOG_TABLE_ID, catalog.CATALOG_PARTITION_ID)}
    plan = reconcile("node-3", held, {"Kept": kept})
    assert plan.drop == (gone.id,)  # The system partition is never dropped.
    assert {(c.stored_id, c.partition.id) for c in plan.create} == held_by("node-3", kept)
    assert all(c.node == "node-3" for c in plan.create)
    # Once it holds them, nothing more to do.
    after = reconcile("node-3", held_by("node-3", kept), {"Kept": kept})
    assert after.drop == () and after.create == ()


def test_only_settled_tables_replicated_partitions_are_created() -> None:
    creating = dataclasses.replace(table("New", "a" * 32), status=TableStatus.CREATING, _json=None)
    deleting = dataclasses.replace(table("Old", "b" * 32), status=TableStatus.DELETING, _json=None)
    one_copy = table("One", "c" * 32, factor=1)
    plan = reconcile("node-1", set(), {"New": creating, "Old": deleting, "One": one_copy})
    assert plan.create == () and plan.drop == ()


def test_a_split_parent_held_here_blocks_its_children_and_is_named_to_retire() -> None:
    """After a split the catalog serves the children; a node still holding the parent (it
    never applied the split) gets no empty child beside it, and the parent is named to
    retire; once the parent is gone, the children are created."""
    t = table("T", "a" * 32)
    parent = t.partitions[0]
    split, _, _ = catalog.split(t, parent.id, bytes.fromhex("20"), "low", "high", now=2.0)
    held = held_by("node-2", t)
    ranges = {(t.id, p.id): (p.start, p.end) for p in t.partitions}
    plan = reconcile("node-2", held, {"T": split}, ranges)
    assert plan.create == ()
    assert plan.retire == ((t.id, parent.id),)
    # The parent retired here: the children are made (empty, then copied from a member).
    held.discard((t.id, parent.id))
    del ranges[(t.id, parent.id)]
    plan = reconcile("node-2", held, {"T": split}, ranges)
    assert sorted(c.partition.id for c in plan.create) == ["high", "low"]
    assert plan.retire == ()


def test_a_lost_nodes_replicas_heal_where_led_to_the_emptiest_node_up() -> None:
    t = table("T", "c" * 32, ring=HashRing((*NODES, "node-4", "node-5")))
    tables = {"T": t}
    led = [(t.id, p.id) for p in t.partitions if "node-1" in p.replicas]
    expected = [p for p in t.partitions if {"node-1", "node-2"} <= set(p.replicas)]
    assert expected, "node-1 leads no partition with a replica on node-2"
    up = ("node-3", "node-4", "node-5")
    planned = heals("node-1", tables, led, {"node-2"}, up, most=100)
    assert [h.partition_id for h in planned] == [p.id for p in expected]
    held = {node: sum(node in p.nodes for p in t.partitions) for node in up}
    for heal, partition in zip(planned, expected, strict=True):
        assert (heal.name, heal.stored_id, heal.source) == ("T", t.id, "node-2")
        candidates = [n for n in up if n not in partition.nodes]
        # The emptiest candidate, counting the moves planned before it.
        assert held[heal.target] == min(held[n] for n in candidates), (heal, held)
        held[heal.target] += 1
    # At most `most`; none with nothing lost, none not led here, none already moving, none
    # with no node up to take the replica.
    assert len(heals("node-1", tables, led, {"node-2"}, up, most=1)) == 1
    assert heals("node-1", tables, led, set(), up, most=100) == []
    assert heals("node-1", tables, [], {"node-2"}, up, most=100) == []
    moving = dataclasses.replace(expected[0], replica_move=("node-2", "node-5"))
    partitions = tuple(moving if p.id == moving.id else p for p in t.partitions)
    busy = {"T": dataclasses.replace(t, partitions=partitions)}
    found = heals("node-1", busy, led, {"node-2"}, up, most=100)
    assert [h.partition_id for h in found] == [p.id for p in expected[1:]]
    assert heals("node-1", tables, led, {"node-2"}, (), most=100) == []
