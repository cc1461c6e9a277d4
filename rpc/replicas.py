"""Calls to a replicated partition's replicas: at its leader, or, for an eventually consistent
read, at any replica. One loop for every service that calls partitions (the router's data path
and change-feed calls, the GSI replicator's follows, index writes and backfill reads).

A partition of one copy (`PartitionDef.replicas` empty) is called on its node, once. A replicated
one is called at the leader this process last saw answer for it, else its first replica,
following `NotPartitionLeader` to the leader a replica names (StaleEpoch, as from a replica
that moved away, is the caller's: it reads the catalog again), and on to the next replica (pausing
`REPLICA_RETRY_PAUSE_SECONDS_MIN`, doubling to `_MAX`, once all were asked) while an election is
under way or a node cannot be reached. A write goes to another replica only when it was
certainly not applied (refused as not the leader, or never sent: `rpc.transport.NotSent`); an
unknown outcome (ServiceUnavailable from a node that may have taken it) is the caller's, as at
one copy. A read, or a write that may apply twice (a change-feed registration or checkpoint, an
index write the index partition skips if it has it), is `retry_safe`: it goes on to another
replica after any ServiceUnavailable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

from core import limits
from core.catalog import PartitionDef
from core.errors import NotPartitionLeader, ServiceUnavailable, StaleEpoch
from rpc.transport import NotSent

T = TypeVar("T")

# An attempt at one node: its id and the seconds left; what it answers, or its refusal.
Attempt = Callable[[str, float], Awaitable[T]]


class ReplicaCalls:
    """The leaders one process has seen answer, and the loop that finds them (see the module)."""

    def __init__(self) -> None:
        # The node that last answered as the leader of each replicated partition, by (table id,
        # partition id), and a count that spreads eventually consistent reads over replicas.
        self._leaders: dict[tuple[str, str], str] = {}
        self._read_turn = 0

    def knows_leader(self, table_id: str, partition_id: str) -> bool:
        return (table_id, partition_id) in self._leaders

    async def call(
        self,
        partition: PartitionDef,
        table_id: str,
        what: str,
        attempt: Attempt[T],
        timeout: float,
        *,
        anywhere: bool = False,
        retry_safe: bool = False,
    ) -> T:
        """`attempt(node, seconds left)` where the partition takes it (see the module): with
        `anywhere`, at its replicas in turn; `retry_safe`: a retry elsewhere is always safe.
        All within `timeout`; ServiceUnavailable naming `what` once it has passed."""
        if not partition.replicas:
            return await attempt(partition.node, timeout)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        key = (table_id, partition.id)
        replicas = partition.replicas
        if anywhere:
            self._read_turn += 1
            node = replicas[self._read_turn % len(replicas)]
        else:
            node = self._leaders.get(key, partition.node)
            if node not in replicas:
                # The leader seen last left the group (a replica move): the catalog's first.
                node = partition.node
        asked: set[str] = set()
        pause = limits.REPLICA_RETRY_PAUSE_SECONDS_MIN
        while True:
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise ServiceUnavailable(
                    f"No replica of partition {partition.id} could take the {what} in time "
                    "(its leader is changing); retry"
                )
            asked.add(node)
            try:
                reply = await attempt(node, remaining)
            except NotPartitionLeader as refused:
                self._leaders.pop(key, None)
                if refused.leader in replicas and refused.leader not in (node, None):
                    node = refused.leader
                    continue
                if refused.leader is not None and refused.leader not in replicas:
                    # A replica moved (`core.machines.replica_move`): this process's copy of
                    # the catalog is older than the group's membership.
                    raise StaleEpoch(
                        f"Partition {partition.id} is led by {refused.leader}, which holds no "
                        "replica of it in this process's catalog: it is read again"
                    ) from None
            except StaleEpoch:
                # Not held there (any more), or at another epoch: the caller reads the catalog
                # again, and the next call starts from it, not from the leader seen last.
                self._leaders.pop(key, None)
                raise
            except NotSent:
                self._leaders.pop(key, None)
            except ServiceUnavailable:
                self._leaders.pop(key, None)
                if not anywhere and not retry_safe:
                    raise  # A write the node may have taken: its outcome is the caller's.
            else:
                if not anywhere:
                    self._leaders[key] = node
                return reply
            untried = [replica for replica in replicas if replica not in asked]
            if not untried:
                await asyncio.sleep(min(pause, max(0.0, deadline - loop.time())))
                pause = min(2 * pause, limits.REPLICA_RETRY_PAUSE_SECONDS_MAX)
                asked.clear()
                untried = [replica for replica in replicas if replica != node] or [node]
            node = untried[0]
