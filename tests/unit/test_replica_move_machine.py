"""The replica move machine (`core.machines.replica_move`), pure: its steps in order keep every
voter named in the catalog, and the moves it refuses."""

from __future__ import annotations

import pytest

from core.catalog import PartitionDef
from core.machines import replica_move as machine
from core.machines.replica_move import Membership, ReplicaMoveRefused, Step, next_step


def test_every_step_keeps_the_voters_named() -> None:
    """Taking the machine's steps from a recorded move, in order, the group's voters are always
    among the catalog's nodes for the partition, and the move ends with the target in the
    source's place."""
    for leader in ("node-1", "node-2"):
        partition = PartitionDef(
            "p", "", None, 1, "node-1", replicas=("node-1", "node-2", "node-3")
        )
        partition = machine.started(partition, "node-1", "node-4")
        voters = {"node-1", "node-2", "node-3"}
        learners: set[str] = set()
        now = leader
        taken = []
        while True:
            step = next_step(partition, Membership(frozenset(voters), frozenset(learners), now))
            taken.append(step)
            if step is Step.DONE:
                break
            if step is Step.ADD_LEARNER:
                learners.add("node-4")
            elif step is Step.NAME_TARGET:
                partition = machine.named(partition)
            elif step is Step.PROMOTE:
                learners.discard("node-4")
                voters.add("node-4")
            elif step is Step.TRANSFER:
                now = "node-4"
            elif step is Step.REMOVE_SOURCE:
                voters.discard("node-1")
            elif step is Step.SWITCH:
                partition = machine.switched(partition, voters)
            assert voters <= set(partition.nodes), (step, voters, partition)
            assert len(taken) < 10
        assert partition.replicas == ("node-4", "node-2", "node-3") and partition.node == "node-4"
        assert (Step.TRANSFER in taken) == (leader == "node-1")


def test_a_move_is_refused_where_it_cannot_be() -> None:
    one_copy = PartitionDef("p", "", None, 1, "node-1")
    replicated = PartitionDef("p", "", None, 1, "node-1", replicas=("node-1", "node-2", "node-3"))
    for partition, source, target in (
        (one_copy, "node-1", "node-2"),
        (replicated, "node-4", "node-5"),
        (replicated, "node-1", "node-2"),
        (machine.started(replicated, "node-1", "node-4"), "node-2", "node-5"),
    ):
        with pytest.raises(ReplicaMoveRefused):
            machine.started(partition, source, target)
    moving = machine.started(replicated, "node-1", "node-4")
    assert machine.started(moving, "node-1", "node-4") is moving
    assert moving.nodes == ("node-1", "node-2", "node-3", "node-4")
    assert PartitionDef.from_json(moving.to_json()) == moving
