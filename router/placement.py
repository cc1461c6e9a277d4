"""Moves split children to the node the ring places them on (the trigger of `storagenode.move`).

A split leaves both children on their parent's node (`storagenode.split`): the split is fast and
local, and the ring is the router's, not the node's. Every `MOVE_CHECK_SECONDS` each router looks
at its cached catalog for a split child that the ring places on another node and that has not
moved since its split (`core.moves.misplaced`; a global index's split children too,
`misplaced_index_partitions`), and asks the child's node to move it there (`move_partition`),
one move at a time. Routers asking for the same move meet at the source,
which moves it once (the others are refused: the partition is no longer what they asked about).
`DYNALAB_MOVE_SPLIT_CHILDREN=off` on the routers turns it off (moves then happen only when asked
through the admin endpoint).
"""

from __future__ import annotations

import asyncio
import logging

from core import limits, moves
from core.errors import DynamoError
from router.context import RouterContext
from rpc import ops

log = logging.getLogger("router.placement")


class PlacementMover:
    """Asks for the moves that put split children where the ring places them."""

    def __init__(self, ctx: RouterContext) -> None:
        self.ctx = ctx
        self._refused: dict[str, float] = {}  # Partition id -> when its move was refused.

    async def move_one(self) -> bool:
        """Ask for one move of a misplaced split child and wait for it; whether one was made
        (a refused or failed one is asked again after MOVE_RETRY_SECONDS, not at once)."""
        now = self.ctx.sources.clock()
        self._refused = {
            pid: when
            for pid, when in self._refused.items()
            if now - when < limits.MOVE_RETRY_SECONDS
        }
        for table in list(self.ctx.records.values()):
            if not table.serving:
                continue
            misplaced = [
                (table.id, partition, node)
                for partition, node in moves.misplaced(table, self.ctx.ring.owner)
            ]
            misplaced += moves.misplaced_index_partitions(table, self.ctx.ring.owner)
            for storage_id, partition, node in misplaced:
                address = self.ctx.addresses.get(node)
                if address is None or partition.id in self._refused:
                    continue
                payload = ops.MovePartitionPayload(storage_id, partition.id, node, address)
                log.info("moving split child %s of %s to %s", partition.id, table.name, node)
                try:
                    reply = await self.ctx.control(
                        partition.node,
                        ops.MOVE_PARTITION,
                        payload.to_json(),
                        limits.MOVE_CALL_SECONDS_MAX,
                    )
                except DynamoError as error:
                    log.info("the move of %s was not made: %s", partition.id, error.message)
                    self._refused[partition.id] = now
                    return False
                log.info("moved %s in %.3f s", partition.id, reply["seconds"])
                await self.ctx.refresh()
                return True
        return False

    async def run(self) -> None:
        """Look every `MOVE_CHECK_SECONDS` until cancelled, moving children while moves succeed."""
        while True:
            await asyncio.sleep(limits.MOVE_CHECK_SECONDS)
            try:
                while await self.move_one():
                    pass
            except DynamoError as error:
                log.warning("placement check failed: %s", error.message)
