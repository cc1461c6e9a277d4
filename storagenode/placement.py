"""Keeps this node's partitions where the catalog places them (`rpc.placement.reconcile`).

A CreateTable or DeleteTable of a replicated table goes on while a minority of each partition's
replicas' nodes cannot be reached (`router.table_lifecycle`): the router creates or drops what it
reaches, and a node that was away does the rest itself. Every `PLACEMENT_RECONCILE_SECONDS`, and
as it starts, the keeper lists the partitions the node holds, then reads the whole catalog
(strongly: through the node's one catalog client), and through the group commit drops every
stored table no table in the catalog names any more and creates every replica the catalog places
here that the node lacks. Why that is safe is `rpc.placement`'s docstring: a row is written before
its partitions, ids are never used again, and the listing comes before the read. A round that
cannot read the catalog (no quorum of its replicas, say) does nothing and is logged at most once
per `LOG_REPEAT_SECONDS_MIN`; on a node no router has told where the catalog is yet (it holds no
bootstrap partition) a round does nothing, quietly.

Healing (`rpc.placement.heals`): with `heal_seconds` given, a round also finds the peers this
node has not heard from for that long (the Raft host's keepalives, which every pair of nodes
exchanges every tick, count: `RaftHost.heard_ticks_ago`), and for the replicated partitions it
leads with a replica on one starts moving that replica to a node heard from lately
(`heal_move`, in the background: `ReplicaMover.heal`), a few per round. A node that was only
cut off, and comes back, finds the catalog no longer places those replicas on it, and drops
them (`remove`).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from core import catalog, limits
from core.errors import DynamoError
from rpc import ops, placement
from rpc.background import BackgroundTask
from rpc.catalog_client import CatalogClient
from rpc.ratelog import RateLimitedLog
from storagenode.node import StorageNode
from storagenode.partition import Partition
from storagenode.raft_host import node_name
from storagenode.writes import PartitionRef

logger = logging.getLogger(__name__)

# Hands a control-plane write (op, body) to the node's group commit.
Submit = Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]


class PlacementKeeper:
    """One round every `interval` seconds (see the module)."""

    def __init__(
        self,
        node_id: str,
        node: StorageNode,
        submit: Submit,
        catalog: CatalogClient,
        interval: float = limits.PLACEMENT_RECONCILE_SECONDS,
        clock: Callable[[], float] = time.monotonic,
        resume_move: Callable[[str, str, str], None] | None = None,
        heal_seconds: float = 0.0,
        heal_move: Callable[[placement.Heal], None] | None = None,
    ) -> None:
        """`resume_move(table name, stored id, partition id)` drives on a replica move the
        catalog records (`storagenode.replica_move.ReplicaMover.resume`); `heal_move` starts
        one off a lost node (`ReplicaMover.heal`), for a peer silent `heal_seconds` (0: never)."""
        self.node_id = node_id
        self.node = node
        self.submit = submit
        self.catalog = catalog
        self.interval = interval
        self.clock = clock
        self.resume_move = resume_move
        self.heal_seconds = heal_seconds
        self.heal_move = heal_move
        self._task = BackgroundTask("placement", self._run)
        self._failures = RateLimitedLog(logger)
        # When each partition held here was first found not served by the catalog.
        self._stale_since: dict[PartitionRef, float] = {}

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.reconcile()
            except DynamoError as error:
                self._failures.warning("round", f"cannot match the catalog: {error.message}")
            except Exception:
                # A bug: logged with its traceback, and the next round goes on.
                logger.exception("matching the catalog failed on a bug")
            await asyncio.sleep(self.interval)

    async def reconcile(self) -> placement.Reconciliation:
        """One round: what it found to do, done."""
        partitions = dict(self.node.partitions)  # Before the catalog is read: see the module.
        if (catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID) not in partitions:
            return placement.Reconciliation((), ())  # No catalog located here yet.
        tables = await self.catalog.scan()
        ranges = {
            ref: (p.start.hex(), None if p.end is None else p.end.hex())
            for ref, p in partitions.items()
        }
        plan = placement.reconcile(self.node_id, partitions, tables, ranges)
        await self._retire(plan.retire, partitions)
        for ref in plan.remove:
            if not self.node.replicated(ref):
                continue
            logger.warning(
                "dropping replica %s of %s: the catalog places it on other nodes", ref[1], ref[0]
            )
            await self.submit(ops.DROP_REPLICA, ops.DropReplicaPayload(*ref).to_json())
        if self.resume_move is not None:
            for name, stored_id, partition_id in plan.moving:
                if self.node.leads((stored_id, partition_id)):
                    self.resume_move(name, stored_id, partition_id)
        if self.heal_move is not None and self.heal_seconds > 0:
            self._heal(partitions, tables)
        for stored_id in plan.drop:
            logger.warning("dropping stored table %s: no table in the catalog names it", stored_id)
            await self.submit(ops.DROP_TABLE, ops.DropTablePayload(stored_id).to_json())
        for creation in plan.create:
            logger.warning(
                "creating replica %s of %s, placed here while this node was away",
                creation.partition.id,
                creation.stored_id,
            )
            await self.submit(ops.CREATE_PARTITION, creation.payload)
        return plan

    def _heal(
        self, partitions: Mapping[PartitionRef, Partition], tables: Mapping[str, catalog.TableDef]
    ) -> None:
        """Start moving the replicas on lost peers of the partitions led here (see the module)."""
        assert self.heal_move is not None
        host = self.node.replication.host
        lost_ticks = self.heal_seconds / limits.RAFT_TICK_SECONDS
        heard = {node_name(peer): host.heard_ticks_ago(peer) for peer in host.peers()}
        lost = {peer for peer, ticks in heard.items() if ticks >= lost_ticks}
        if not lost:
            return
        up = {peer for peer, ticks in heard.items() if ticks <= limits.RAFT_PEER_SILENT_TICKS_MIN}
        led = [ref for ref in partitions if self.node.leads(ref)]
        for heal in placement.heals(
            self.node_id, tables, led, lost, up, limits.HEAL_MOVES_PER_ROUND_MAX
        ):
            logger.warning(
                "healing partition %s: its replica on %s (not heard from for %.0f s) moves to %s",
                heal.partition_id,
                heal.source,
                heard[heal.source] * limits.RAFT_TICK_SECONDS,
                heal.target,
            )
            self.heal_move(heal)

    async def _retire(
        self, stale: Iterable[PartitionRef], partitions: Mapping[PartitionRef, Partition]
    ) -> None:
        """Retire the replicated partitions the catalog has not served for
        `PLACEMENT_RETIRE_GRACE_SECONDS` (a split's parent this node was behind for: its group
        went before it applied the split); a partition served again, or gone, is forgotten."""
        now = self.clock()
        found = {ref for ref in stale if self.node.replicated(ref)}
        for ref in list(self._stale_since):
            if ref not in found:
                del self._stale_since[ref]
        for ref in sorted(found):
            since = self._stale_since.setdefault(ref, now)
            if now - since < limits.PLACEMENT_RETIRE_GRACE_SECONDS:
                continue
            logger.warning(
                "retiring replica %s of %s: the catalog no longer serves it", ref[1], ref[0]
            )
            payload = ops.RetirePartitionPayload(ref[0], ref[1], partitions[ref].epoch)
            await self.submit(ops.RETIRE_PARTITION, payload.to_json())
            del self._stale_since[ref]
