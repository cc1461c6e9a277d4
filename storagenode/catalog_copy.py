"""This node's copy of the catalog, refreshed from the catalog's node (`core.catalog_copy`).

Every round (`limits.CATALOG_COPY_SECONDS`) the copier reads where the catalog is from this node's
own bootstrap record and, unless this node holds a one-copy catalog itself, asks the catalog's
node (a replicated catalog's leader) for the seq its catalog partition's change log has reached
(`table_stats`, one call). When that seq is the one the copy was taken at, the round ends there.
Otherwise it scans the catalog there, asks that node for the seq again, and, if it did not move
meanwhile (so the scan saw the catalog exactly as of that seq: a replicated catalog's scan is
strongly consistent, so that node led throughout, and every replica's change log is the same seq
for seq), writes the rows that differ into this node's copy partition, deletes those the catalog
no longer has, and writes the marker row with the seq last, through the group commit. A
replicated catalog's replicas keep a copy too: it is what a router reads when a majority of them
is down. A node killed half-way
leaves the old marker over rows of which some are newer, each a real version of its table, and
the next round finishes the copy. A round that fails (the catalog's node down, the disk full) is
logged at most once per `LOG_REPEAT_SECONDS_MIN` and tried again next round; the copy stays as it
was, which is what a router reads while the catalog's node is down.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from core import catalog, limits
from core.catalog import CatalogLocation, TableDef
from core.catalog_copy import (
    CATALOG_COPY_PARTITION_ID,
    CATALOG_COPY_TABLE_NAME,
    CatalogCopy,
    catalog_row,
    copy_writes,
    marker_item,
    record_of_row,
)
from core.errors import DynamoError, ServiceUnavailable, StaleEpoch
from rpc import ops
from rpc.background import BackgroundTask
from rpc.ratelog import RateLimitedLog
from rpc.replicas import ReplicaCalls
from rpc.transport import NodeTransport, Transports
from storagenode.node import StorageNode

logger = logging.getLogger(__name__)

# Hands a write (op, target or None for a control write, body) to the group committer.
Submit = Callable[[str, ops.Target | None, dict[str, Any]], Awaitable[dict[str, Any]]]

_SYSTEM_EPOCH = 1  # System partitions never split or move.
_COPY_TARGET = ops.Target(catalog.CATALOG_COPY_TABLE_ID, CATALOG_COPY_PARTITION_ID, _SYSTEM_EPOCH)
# A scan of the catalog reads at most this many pages: every page holds at least one table.
_SCAN_PAGES_MAX = limits.TABLES_PER_REGION_MAX + 1


class CatalogCopier:
    """Keeps this node's copy of the catalog current, one round every `interval` seconds."""

    def __init__(
        self,
        node_id: str,
        node: StorageNode,
        submit: Submit,
        connect: Callable[[str], NodeTransport],
        interval: float = limits.CATALOG_COPY_SECONDS,
    ) -> None:
        """`submit` queues a write on the node's group commit; `connect` makes a transport to a
        node from its address (the catalog's)."""
        self.node_id = node_id
        self.node = node
        self.submit = submit
        self.interval = interval
        self._peers = Transports(connect)
        self._replicas = ReplicaCalls()
        self._task = BackgroundTask("catalog-copy", self._run)
        self._failures = RateLimitedLog(logger)

    def start(self) -> None:
        self._task.start()

    async def close(self) -> None:
        await self._task.close()
        await self._peers.close()

    async def _run(self) -> None:
        while True:
            try:
                await self.copy()
            except DynamoError as error:
                self._failures.warning("round", f"cannot copy the catalog: {error.message}")
            except Exception:
                # A bug: logged with its traceback, and the next round goes on.
                logger.exception("copying the catalog failed on a bug")
            await asyncio.sleep(self.interval)

    async def copy(self) -> bool:
        """One round; whether the copy changed."""
        location = self._location()
        if location is None or (
            not location.replicas
            and (catalog.CATALOG_TABLE_ID, location.partition) in self.node.partitions
        ):
            return False  # No catalog yet, or this node holds it: it answers from the catalog.
        held = self.held()

        async def attempt(node: str, remaining: float) -> tuple[int, dict[str, TableDef]] | None:
            client = self._peers.to(location.address_of(node))
            seq = await _catalog_seq(client, location)
            if seq is None or (
                held is not None and (held.partition, held.seq) == (location.partition, seq)
            ):
                return None
            records = await _scan_catalog(client, location)
            if await _catalog_seq(client, location) != seq:
                return None  # The catalog changed during the scan: copy it next round.
            return seq, records

        scanned = await self._replicas.call(
            location.partition_of(location.partition),
            catalog.CATALOG_TABLE_ID,
            "catalog copy",
            attempt,
            limits.CONTROL_CALL_SECONDS_MAX,
            retry_safe=True,
        )
        if scanned is None:
            return False
        seq, records = scanned
        await self._write(location.partition, seq, records, held)
        logger.info("copied the catalog at seq %d: %d tables", seq, len(records))
        return True

    def held(self) -> CatalogCopy | None:
        """The copy this node holds (None: none finished yet)."""
        if (catalog.CATALOG_COPY_TABLE_ID, CATALOG_COPY_PARTITION_ID) not in self.node.partitions:
            return None
        items: list[dict[str, Any]] = []
        payload = ops.ScanPayload(page_bytes=limits.QUERY_PAGE_BYTES_MAX)
        for _ in range(_SCAN_PAGES_MAX):
            reply = self.node.read(ops.SCAN, _COPY_TARGET, payload.to_json())
            items.extend(reply["items"])
            if reply["last_key"] is None:
                break
            payload.exclusive_start = reply["last_key"]
        return CatalogCopy.of_items(items)

    async def _write(
        self,
        partition: str,
        seq: int,
        records: dict[str, catalog.TableDef],
        held: CatalogCopy | None,
    ) -> None:
        await self.submit(
            ops.CREATE_PARTITION,
            None,
            ops.CreatePartitionPayload(
                {
                    "id": catalog.CATALOG_COPY_TABLE_ID,
                    "name": CATALOG_COPY_TABLE_NAME,
                    "key_schema": catalog.SYSTEM_KEY_SCHEMA,
                },
                {
                    "id": CATALOG_COPY_PARTITION_ID,
                    "start": "",
                    "end": None,
                    "epoch": _SYSTEM_EPOCH,
                    "node": self.node_id,
                },
            ).to_json(),
        )
        puts, deletes = copy_writes({} if held is None else held.records, records)
        writes = [
            self.submit(ops.PUT, _COPY_TARGET, ops.PutPayload(catalog_row(record)).to_json())
            for record in puts
        ]
        writes += [
            self.submit(
                ops.DELETE, _COPY_TARGET, ops.DeletePayload({"name": {"S": name}}).to_json()
            )
            for name in deletes
        ]
        await asyncio.gather(*writes)
        # Last, so a marker never names a seq whose rows are not all written.
        await self.submit(
            ops.PUT, _COPY_TARGET, ops.PutPayload(marker_item(partition, seq)).to_json()
        )

    def _location(self) -> CatalogLocation | None:
        """Where the catalog is, from this node's own bootstrap record (None: no record yet)."""
        target = ops.Target(
            catalog.BOOTSTRAP_TABLE_ID, catalog.BOOTSTRAP_PARTITION_ID, _SYSTEM_EPOCH, True
        )
        payload = ops.GetPayload({"name": {"S": catalog.BOOTSTRAP_RECORD_NAME}})
        try:
            item = self.node.read(ops.GET, target, payload.to_json())["item"]
        except StaleEpoch:
            return None  # No bootstrap partition: no router has located the catalog yet.
        return None if item is None else CatalogLocation.from_item(item)


async def _catalog_seq(client: NodeTransport, location: CatalogLocation) -> int | None:
    """The seq the catalog partition's change log has reached (None: the node lacks it)."""
    reply = await client.control(
        ops.TABLE_STATS,
        ops.TableStatsPayload(catalog.CATALOG_TABLE_ID).to_json(),
        limits.CONTROL_CALL_SECONDS_MAX,
    )
    stats = reply["partitions"].get(location.partition)
    return None if stats is None else int(stats["last_seq"])


async def _scan_catalog(
    client: NodeTransport, location: CatalogLocation
) -> dict[str, catalog.TableDef]:
    target = ops.Target(catalog.CATALOG_TABLE_ID, location.partition, _SYSTEM_EPOCH, True)
    payload = ops.ScanPayload(page_bytes=limits.QUERY_PAGE_BYTES_MAX)
    records: dict[str, catalog.TableDef] = {}
    for _ in range(_SCAN_PAGES_MAX):
        reply = await client.call(ops.SCAN, target, payload.to_json(), limits.NODE_CALL_SECONDS_MAX)
        for item in reply["items"]:
            record = record_of_row(item)
            records[record.name] = record
        if reply["last_key"] is None:
            return records
        payload.exclusive_start = reply["last_key"]
    raise ServiceUnavailable("The table catalog did not end within its page bound")
