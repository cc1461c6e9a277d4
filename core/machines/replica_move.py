"""Moving one replica of a replicated partition to another node, as a machine: a membership
change of the partition's Raft group (add a learner, catch it up, promote it, remove the old
replica), recorded in the catalog. Pure; `storagenode/replica_move.py` carries out the steps.

Its state is not a record of its own but what two durable things say: the partition's catalog
row (its `replicas` and its `replica_move`, (source, target)) and the group's committed
membership (`Membership`, as its leader has it). Each combination has exactly one next step
(`next_step`), and every step is idempotent: a driver killed anywhere, a second driver running
at once (a deposed leader's and a new one's), or a step's reply lost, leaves a state from which
the same function gives the step still to take. So a move never needs resuming "from where it
was": whoever drives it reads both and goes on.

| the catalog | the group's membership | the step |
| --- | --- | --- |
| no move | (any) | DONE |
| target not named | target not a member | ADD_LEARNER |
| target not named | target a learner | NAME_TARGET |
| target named | target a learner | PROMOTE |
| target not named | target a voter | NAME_TARGET (no step leads here; it mends it) |
| target named | target, source voters; source leads | TRANSFER |
| target named | target, source voters | REMOVE_SOURCE |
| target named | source not a member | SWITCH |

("Named": among the catalog's `replicas`.) The steps:
- ADD_LEARNER: create the target's replica, empty; the group adds it as a learner.
- NAME_TARGET: the catalog names the target among the replicas, after them.
- PROMOTE: the learner, caught up with the leader's log, becomes a voter.
- TRANSFER: the source leads: it hands its leadership to the target.
- REMOVE_SOURCE: the source leaves the group.
- SWITCH: the catalog puts the target in the source's place and clears the move; then the
  source drops its replica.

The order keeps one invariant, on which dropping a replica rests: **every voter of the group's
committed membership is named in the catalog** (among `replicas`, or as the move's target). A
target is named (as the target) before it is created and among the replicas before it votes;
the source is named until after its removal has committed. So a node the catalog does not name
for a partition holds no vote in its group, and may drop its replica without losing a write
(`rpc.placement.reconcile`'s `remove`): every committed entry is on a quorum of the voters.

A learner does not count in any quorum, so while it copies the partition (a snapshot and the
log: `storagenode/snapshots.py`) the group commits and serves as before; promoted only once
caught up (the leader's judgement: its log matches the leader's to within
`REPLICA_MOVE_PROMOTE_LAG_ENTRIES`), it does not leave the group unable to commit while it
catches up. Between the
promotion and the removal the group has four voters (a quorum of three); one change at a time,
each committed before the next is proposed (`core.raft`'s membership rule).

A partition whose replica moves does not split (`core.catalog` refuses to record the split),
and a move is refused while the partition is not serving: each would change what the other
decides from.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Collection

from core.catalog import PartitionDef
from core.errors import ValidationError


class ReplicaMoveRefused(ValidationError):
    """A replica move that cannot begin: of a partition of one copy, from a node that holds no
    replica of it, to one that holds one, or while another move of its replicas goes on."""


class Step(enum.StrEnum):
    ADD_LEARNER = "ADD_LEARNER"
    NAME_TARGET = "NAME_TARGET"
    PROMOTE = "PROMOTE"
    TRANSFER = "TRANSFER"
    REMOVE_SOURCE = "REMOVE_SOURCE"
    SWITCH = "SWITCH"
    DONE = "DONE"


@dataclasses.dataclass(frozen=True, slots=True)
class Membership:
    """A group's committed membership, by node name, and the node that leads it."""

    voters: frozenset[str]
    learners: frozenset[str]
    leader: str | None

    @property
    def members(self) -> frozenset[str]:
        return self.voters | self.learners


def started(partition: PartitionDef, source: str, target: str) -> PartitionDef:
    """The catalog's partition once the move of its replica on `source` to `target` is
    recorded; unchanged if that very move is recorded already (a retry). ReplicaMoveRefused
    otherwise."""
    if not partition.replicas:
        raise ReplicaMoveRefused(f"Partition {partition.id} has one copy: it moves whole")
    if partition.replica_move == (source, target):
        return partition
    if partition.replica_move is not None:
        moving_from, moving_to = partition.replica_move
        raise ReplicaMoveRefused(
            f"Partition {partition.id}'s replica on {moving_from} is moving to {moving_to}: "
            "one move of its replicas at a time"
        )
    if source not in partition.replicas:
        raise ReplicaMoveRefused(f"Node {source} holds no replica of partition {partition.id}")
    if target in partition.replicas:
        raise ReplicaMoveRefused(f"Node {target} holds a replica of partition {partition.id}")
    return dataclasses.replace(partition, replica_move=(source, target))


def next_step(partition: PartitionDef, membership: Membership) -> Step:
    """The one step that takes the move on from what the catalog and the group say (the
    module's table)."""
    if partition.replica_move is None:
        return Step.DONE
    source, target = partition.replica_move
    named = target in partition.replicas
    if target not in membership.members:
        return Step.ADD_LEARNER
    if target in membership.learners:
        return Step.PROMOTE if named else Step.NAME_TARGET
    if not named:
        return Step.NAME_TARGET
    if source in membership.members:
        return Step.TRANSFER if membership.leader == source else Step.REMOVE_SOURCE
    return Step.SWITCH


def named(partition: PartitionDef) -> PartitionDef:
    """NAME_TARGET's catalog change: the target among the replicas, after them."""
    assert partition.replica_move is not None
    target = partition.replica_move[1]
    if target in partition.replicas:
        return partition
    return dataclasses.replace(partition, replicas=(*partition.replicas, target))


def switched(partition: PartitionDef, voters: Collection[str]) -> PartitionDef:
    """SWITCH's catalog change, given the group's voters (the source no longer among them):
    the target in the source's place, the move cleared. Its first replica is where routers
    look for its leader first (`node`)."""
    if partition.replica_move is None:
        return partition
    source, target = partition.replica_move
    assert source not in voters and target in voters, "switched once the source has left"
    replicas = tuple(
        dict.fromkeys(target if node == source else node for node in partition.replicas)
    )
    return dataclasses.replace(partition, replicas=replicas, node=replicas[0], replica_move=None)
