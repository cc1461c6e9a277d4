"""Moving one replica of a replicated partition to another node: the driver of
`core.machines.replica_move`, whose rules and table this carries out.

A move is asked of any node holding a replica (the `move_partition` driver operation, which a
router's admin endpoint sends to the partition's leader): `ReplicaMover.move` records it in the
catalog (the partition's `replica_move`, by compare-and-set), then takes one step after another
until the catalog no longer records it. Each turn reads both things the machine's state is made
of, the table's catalog row and the group's membership at its leader (`raft_membership`
"read"), and takes the step `next_step` gives:

- ADD_LEARNER: the target's replica is made (`create_partition`, as the catalog now places it;
  a replica there already stays, which a copy left from an earlier membership may be: its log
  is a prefix of the group's, or conflicts only where uncommitted, as any member behind) and
  the group adds it as a learner (`raft_membership` "add-learner"); its leader then brings it up
  to date, from its log or, past a compaction, by a copy of the partition from a member
  (`storagenode/snapshots.py`). Nothing is dropped there: a driver acting on an older view of
  the membership (another's, run at once) must not touch a replica that may vote by now;
- NAME_TARGET and SWITCH: compare-and-sets of the catalog row; after SWITCH the source drops its
  replica (best effort: the source's placement keeper drops it anyway, once the catalog does
  not name it: `rpc.placement.reconcile`);
- PROMOTE, TRANSFER, REMOVE_SOURCE: `raft_membership` at the leader, each one entry of the
  group's log (a transfer, a leader election), answered once applied.

A step that must wait (the learner still copying, a change not yet committed, an election, a
node or the catalog unreachable) is refused with ServiceUnavailable; the driver looks again after
a pause (`REPLICA_MOVE_PAUSE_SECONDS_MIN`, doubling to `_MAX`). The membership calls go to the
partition's leader wherever the driver runs (`rpc.replicas`), so a driver on a node that loses
its leadership, or leaves the group, goes on. A driver killed anywhere leaves the move recorded:
the placement keeper of the node leading the partition finds it in the catalog and resumes it
(`resume`), and two drivers at once are harmless (every step is idempotent, and the group and
the catalog each take one change at a time).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from core import catalog, limits
from core.catalog import IllegalTransition, PartitionDef, TableDef
from core.errors import (
    DynamoError,
    NotPartitionLeader,
    OutcomeUnknown,
    ResourceNotFound,
    ServiceUnavailable,
    StaleEpoch,
)
from core.machines import replica_move as machine
from core.machines.replica_move import Membership, ReplicaMoveRefused, Step
from rpc import ops, placement
from rpc.replicas import ReplicaCalls
from rpc.transport import NodeTransport, NotSent
from storagenode.split import Splitter

logger = logging.getLogger(__name__)

# Refusals a step is tried again after (the move stays recorded and goes on).
_WAIT = (ServiceUnavailable, OutcomeUnknown, NotSent, NotPartitionLeader, StaleEpoch)
_CALL_SECONDS = limits.CONTROL_CALL_SECONDS_MAX


class ReplicaMover:
    """Drives the replica moves of the partitions its node holds (see the module)."""

    def __init__(
        self,
        splitter: Splitter,
        node_id: str,
        address_of: Callable[[str], str | None],
        *,
        clock: Callable[[], float] | None = None,
    ) -> None:
        """`splitter` gives the node's catalog client and its transports to other nodes;
        `address_of` a node's address by name (None: unknown here)."""
        self.splitter = splitter
        self.node_id = node_id
        self.address_of = address_of
        self.clock = clock or splitter.clock
        self.replicas = ReplicaCalls()
        # The move running for each partition, by (stored id, partition id).
        self._running: dict[tuple[str, str], asyncio.Task[dict[str, Any]]] = {}
        # Heals asked of this node (`heal`), each until its move has ended, by the same key.
        self._healing: dict[tuple[str, str], asyncio.Task[None]] = {}
        self.moves_done = 0

    async def close(self) -> None:
        tasks = [*self._healing.values(), *self._running.values()]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._healing.clear()
        self._running.clear()

    def running(self) -> list[tuple[str, str]]:
        return sorted(self._running)

    # Asking and resuming ---------------------------------------------------------------------

    async def move(
        self,
        stored_id: str,
        partition_id: str,
        target: str,
        source: str | None = None,
    ) -> dict[str, Any]:
        """Move the replica on `source` (default: the partition's first replica) to `target`;
        return the partition as the catalog then records it, and the steps taken."""
        started = self.clock()
        partition = self.splitter.node.partitions.get((stored_id, partition_id))
        if partition is None:
            raise StaleEpoch(f"Partition {partition_id} of table {stored_id} is not on this node")
        if stored_id in catalog.SYSTEM_TABLE_IDS:
            raise ReplicaMoveRefused(f"Partition {partition_id} of a system table never moves")
        name = catalog.base_table_name(partition.table_name)
        if self.address_of(target) is None:
            raise ReplicaMoveRefused(f"Node {target} is not a peer of {self.node_id}")
        table = await self.splitter.read_table(name)
        current = _serving(table, stored_id, partition_id)
        if not current.replicas:
            raise ReplicaMoveRefused(f"Partition {partition_id} has one copy: it moves whole")
        if source is None:
            source = current.replicas[0]
        moving_from = source

        def start(table: TableDef | None) -> TableDef:
            return _changed(
                table, stored_id, partition_id, lambda p: machine.started(p, moving_from, target)
            )

        await self.splitter.change_table(name, start)
        logger.info("replica move of %s: %s to %s recorded", partition_id, source, target)
        steps = await self._ensure(name, stored_id, partition_id)
        table = await self.splitter.read_table(name)
        return {
            "partition": _serving(table, stored_id, partition_id).to_json(),
            "from": source,
            "seconds": self.clock() - started,
            "steps": steps["steps"],
        }

    def heal(self, heal: placement.Heal) -> None:
        """Start, in the background, the move of a replica off a lost node (the placement
        keeper's call, at the partition's leader: `rpc.placement.heals`), unless a move of the
        partition runs here. Its refusal (another move recorded meanwhile, the partition split)
        is logged: the next round looks again."""
        ref = (heal.stored_id, heal.partition_id)
        if ref in self._running or ref in self._healing:
            return

        async def healing() -> None:
            try:
                await self.move(heal.stored_id, heal.partition_id, heal.target, heal.source)
            except DynamoError as error:
                logger.warning("healing %s stopped: %s", heal.partition_id, error.message)
            finally:
                self._healing.pop(ref, None)

        self._healing[ref] = asyncio.get_running_loop().create_task(
            healing(), name=f"heal {heal.partition_id}"
        )

    def resume(self, name: str, stored_id: str, partition_id: str) -> None:
        """Drive on a move the catalog records (the placement keeper's call, at the node that
        leads the partition), unless one runs here for it already."""
        if (stored_id, partition_id) not in self._running:
            self._start(name, stored_id, partition_id)

    async def _ensure(self, name: str, stored_id: str, partition_id: str) -> dict[str, Any]:
        task = self._running.get((stored_id, partition_id))
        if task is None:
            task = self._start(name, stored_id, partition_id)
        # Shielded: a caller that stops waiting (its deadline) does not stop the move.
        return await asyncio.shield(task)

    def _start(self, name: str, stored_id: str, partition_id: str) -> asyncio.Task[dict[str, Any]]:
        ref = (stored_id, partition_id)
        task = asyncio.get_running_loop().create_task(
            self._drive(name, stored_id, partition_id), name=f"replica-move {partition_id}"
        )
        self._running[ref] = task

        def finished(done: asyncio.Task[dict[str, Any]]) -> None:
            if self._running.get(ref) is done:
                del self._running[ref]
            if not done.cancelled() and done.exception() is not None:
                logger.warning("replica move of %s stopped: %s", partition_id, done.exception())

        task.add_done_callback(finished)
        return task

    # The steps -------------------------------------------------------------------------------

    async def _drive(self, name: str, stored_id: str, partition_id: str) -> dict[str, Any]:
        """Take the machine's steps until the catalog records no move of the partition."""
        pause = limits.REPLICA_MOVE_PAUSE_SECONDS_MIN
        steps: list[str] = []
        while True:
            try:
                table = await self.splitter.read_table(name)
                partition = _serving(table, stored_id, partition_id)
                if partition.replica_move is None:
                    self.moves_done += 1
                    return {"steps": steps}
                membership = await self._membership(stored_id, partition)
                step = machine.next_step(partition, membership)
                await self._take(step, name, stored_id, partition, membership)
            except _WAIT as waiting:
                logger.debug("replica move of %s waits: %s", partition_id, waiting)
                await asyncio.sleep(pause)
                pause = min(2 * pause, limits.REPLICA_MOVE_PAUSE_SECONDS_MAX)
                continue
            if not steps or steps[-1] != step:
                steps.append(step.value)
                logger.info("replica move of %s: %s", partition_id, step.value)
            pause = limits.REPLICA_MOVE_PAUSE_SECONDS_MIN

    async def _take(
        self,
        step: Step,
        name: str,
        stored_id: str,
        partition: PartitionDef,
        membership: Membership,
    ) -> None:
        assert partition.replica_move is not None
        source, target = partition.replica_move
        if step is Step.ADD_LEARNER:
            await self._create_target(name, stored_id, partition, target)
            await self._change(stored_id, partition, "add-learner", target)
        elif step is Step.NAME_TARGET:
            await self.splitter.change_table(
                name, lambda table: _changed(table, stored_id, partition.id, machine.named)
            )
        elif step is Step.PROMOTE:
            await self._change(stored_id, partition, "promote", target)
        elif step is Step.TRANSFER:
            await self._change(stored_id, partition, "transfer", target)
            # The election takes a round trip or two; the next turn asks the new leader.
            await asyncio.sleep(limits.REPLICA_MOVE_PAUSE_SECONDS_MIN)
        elif step is Step.REMOVE_SOURCE:
            await self._change(stored_id, partition, "remove", source)
        elif step is Step.SWITCH:
            voters = membership.voters
            await self.splitter.change_table(
                name,
                lambda table: _changed(
                    table, stored_id, partition.id, lambda p: machine.switched(p, voters)
                ),
            )
            await self._drop(source, stored_id, partition.id)

    async def _membership(self, stored_id: str, partition: PartitionDef) -> Membership:
        reply = await self._call(stored_id, partition, ops.RaftMembershipPayload("read"))
        return Membership(
            frozenset(reply["voters"]), frozenset(reply["learners"]), reply.get("leader")
        )

    async def _change(
        self, stored_id: str, partition: PartitionDef, change: str, node: str
    ) -> None:
        await self._call(stored_id, partition, ops.RaftMembershipPayload(change, node))

    async def _call(
        self, stored_id: str, partition: PartitionDef, payload: ops.RaftMembershipPayload
    ) -> dict[str, Any]:
        """`raft_membership` at the group's leader, found among the partition's nodes."""
        target = ops.Target(stored_id, partition.id, partition.epoch)
        members = PartitionDef.from_json({**partition.to_json(), "replicas": partition.nodes})

        async def attempt(node: str, remaining: float) -> dict[str, Any]:
            return await self._client(node).call(
                ops.RAFT_MEMBERSHIP, target, payload.to_json(), remaining
            )

        return await self.replicas.call(
            members, stored_id, ops.RAFT_MEMBERSHIP, attempt, _CALL_SECONDS
        )

    async def _create_target(
        self, name: str, stored_id: str, partition: PartitionDef, target: str
    ) -> None:
        """The target's replica, as the catalog places it there (unless one is there)."""
        table = await self.splitter.read_table(name)
        if table is None:
            raise ResourceNotFound(f"Table {name} is no longer in the catalog")
        creation = next(
            (
                found
                for found in placement.replica_creations(table)
                if (found.node, found.stored_id, found.partition.id)
                == (target, stored_id, partition.id)
            ),
            None,
        )
        if creation is None:
            raise ServiceUnavailable(f"The catalog places no replica of {partition.id} on {target}")
        await self._client(target).control(ops.CREATE_PARTITION, creation.payload, _CALL_SECONDS)

    async def _drop(self, source: str, stored_id: str, partition_id: str) -> None:
        """The source's replica goes (best effort: its placement keeper drops it otherwise)."""
        try:
            payload = ops.DropReplicaPayload(stored_id, partition_id)
            await self._client(source).control(ops.DROP_REPLICA, payload.to_json(), _CALL_SECONDS)
        except DynamoError as error:
            logger.info(
                "replica move of %s: %s keeps its replica for now (%s); its keeper drops it",
                partition_id,
                source,
                error.message,
            )

    def _client(self, node: str) -> NodeTransport:
        address = self.address_of(node)
        if address is None:
            raise NotSent(f"Node {node} is not known to {self.node_id}")
        return self.splitter.client(address)


def _serving(table: TableDef | None, stored_id: str, partition_id: str) -> PartitionDef:
    """The partition as the catalog serves it: ResourceNotFound if the table is gone,
    ReplicaMoveRefused if the partition no longer serves (it split, or the table is going)."""
    if table is None:
        raise ResourceNotFound(f"The table of partition {partition_id} is no longer in the catalog")
    if stored_id == table.id:
        serving = table.partitions
    else:
        index = next((i for i in table.indexes if i.table_id == stored_id), None)
        serving = () if index is None else index.partitions
    found = next((p for p in serving if p.id == partition_id), None)
    if found is None or found.state is not catalog.PartitionState.SERVING:
        raise ReplicaMoveRefused(f"Partition {partition_id} is not serving in the catalog")
    return found


def _changed(
    table: TableDef | None,
    stored_id: str,
    partition_id: str,
    change: Callable[[PartitionDef], PartitionDef],
) -> TableDef:
    """`change` made to the partition in the table's row; the row itself if it changes nothing
    (the catalog client then writes nothing)."""
    before = _serving(table, stored_id, partition_id)
    assert table is not None
    after = change(before)
    if after == before:
        return table
    try:
        return catalog.replica_partition_changed(table, stored_id, partition_id, lambda _: after)
    except IllegalTransition as error:
        raise ReplicaMoveRefused(str(error)) from None
