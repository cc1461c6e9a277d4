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
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from core import catalog, limits
from core.errors import DynamoError
from rpc import ops, placement
from rpc.background import BackgroundTask
from rpc.catalog_client import CatalogClient
from rpc.ratelog import RateLimitedLog
from storagenode.node import StorageNode

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
    ) -> None:
        self.node_id = node_id
        self.node = node
        self.submit = submit
        self.catalog = catalog
        self.interval = interval
        self._task = BackgroundTask("placement", self._run)
        self._failures = RateLimitedLog(logger)

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
        held = list(self.node.partitions)  # Before the catalog is read: see the module.
        if (catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID) not in self.node.partitions:
            return placement.Reconciliation((), ())  # No catalog located here yet.
        tables = await self.catalog.scan()
        plan = placement.reconcile(self.node_id, held, tables)
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
