"""The router's typed routing view: each cached table as the data path addresses it.

The router caches the catalog as typed records (`core.catalog.TableDef`, in `router.context`).
Whenever a table's record changes, the context builds that table's `Route` once: its name, storage
id, status and key shape, its serving partitions (`core.catalog.PartitionDef`) in a
`core.placement.PartitionMap` for lookups by key, and its indexes by name. A global index, which
lives in partitions of its own under an id of its own, is a `Route` too (`global_index`), whose
key is the index entry's (`core.indexes.entry_shape`). The item, query, PartiQL and transaction
handlers read these attributes, never string keys of a catalog document, and a route is replaced,
never modified, when its record changes, so one request sees one state of its table; the identity
of a route tells a caller whether the catalog changed under it (`RouterContext._after_stale`).

A route builds its partition map and its global indexes' routes on first use, not when the
catalog is installed: most tables of a refresh are never routed to before the next one, and a
record whose partitions do not tile the key space fails the requests to it, not the refresh.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property

from core import catalog
from core.catalog import IndexDef, PartitionDef, TableDef, TableStatus
from core.indexes import entry_shape
from core.keys import KeyShape
from core.placement import PartitionMap


@dataclass(frozen=True, eq=False)
class Route:
    """One table, or one global index of it, as requests are routed to it.

    `name` and `status` are the table's; `id`, `key_shape` and `partition_defs` are what the
    requests address: the table's own, or a global index's (`index` names it; None: the table).
    Routes compare by identity: equal routes built from two records are two catalog states.
    """

    name: str
    id: str
    status: TableStatus
    key_shape: KeyShape
    partition_defs: tuple[PartitionDef, ...]
    record: TableDef  # The table's catalog record (its indexes, stream, TTL, ...).
    index: str | None = None

    @classmethod
    def of_table(cls, record: TableDef) -> Route:
        """The route of a table's own items, from its catalog record."""
        return cls(
            record.name, record.id, record.status, record.key_shape, record.partitions, record
        )

    @cached_property
    def serving(self) -> bool:
        """Whether the table serves reads and writes (an UPDATING table still does): asked on
        every request, so answered once (hashing an enum member runs Python code)."""
        return self.status in catalog.SERVING_STATUSES

    @cached_property
    def partitions(self) -> PartitionMap[PartitionDef]:
        """The serving partitions, for lookups by storage key and by hash range."""
        return PartitionMap(self.partition_defs)

    @cached_property
    def indexes(self) -> Mapping[str, IndexDef]:
        """The table's secondary indexes, local and global, by name."""
        return {index.name: index for index in self.record.indexes}

    @cached_property
    def _global_routes(self) -> dict[str, Route]:
        routes: dict[str, Route] = {}
        if self.index is not None:
            return routes  # An index has no indexes of its own.
        for index in self.record.indexes:
            if index.is_global and index.table_id is not None:
                shape = entry_shape(index, self.key_shape)
                routes[index.name] = Route(
                    self.name,
                    index.table_id,
                    self.status,
                    shape,
                    index.partitions,
                    self.record,
                    index.name,
                )
        return routes

    def global_index(self, index_name: str) -> Route | None:
        """The route of the table's global index `index_name`: its id, partitions and entry key
        under the table's name and status; None when the table has no such index in storage."""
        return self._global_routes.get(index_name)
