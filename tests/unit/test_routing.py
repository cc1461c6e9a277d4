"""The router's typed routing view: a table's route, its global indexes' routes, and the cache
that builds a route once per change of a table's record."""

from __future__ import annotations

from dataclasses import replace

import pytest

from core import catalog
from core.catalog import IndexDef, IndexStatus, TableDef, TableStatus, Throughput
from core.indexes import entry_shape
from core.keycodec import encode_storage_key
from core.keys import KeyAttribute, KeyShape
from core.token_bucket import BillingMode
from router.context import RouterContext
from router.routing import Route

TABLE_SHAPE = KeyShape.table(("pk", "S"), ("sk", "N"))
INDEX_SHAPE = KeyShape((KeyAttribute("g", "S", "partition"),))


def _owner(partition_id: str) -> str:
    return "n1" if partition_id.endswith(("0", "2")) else "n2"


def _table(name: str = "t", table_id: str = "a" * 32) -> TableDef:
    """An ACTIVE on-demand table (4 partitions) with a global index (4 of its own) and a local
    index."""
    global_index = catalog.global_index(
        name="by_g",
        key_shape=INDEX_SHAPE,
        projection="ALL",
        non_key_attributes=(),
        index_id="b" * 32,
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        owner=_owner,
    )
    local_index = IndexDef(
        name="by_l",
        key_shape=KeyShape.table(("pk", "S"), ("l", "N")),
        projection="KEYS_ONLY",
        status=IndexStatus.CREATING,
        local=True,
    )
    created = catalog.created(
        name=name,
        table_id=table_id,
        key_shape=TABLE_SHAPE,
        attribute_definitions=[("pk", "S"), ("sk", "N"), ("g", "S"), ("l", "N")],
        billing_mode=BillingMode.PAY_PER_REQUEST,
        throughput=Throughput(),
        now=1.0,
        owner=_owner,
        indexes=(global_index, local_index),
    )
    return catalog.activated(created)


def test_a_tables_route_reads_its_record() -> None:
    record = _table()
    route = Route.of_table(record)
    assert (route.name, route.id, route.status, route.index) == ("t", record.id, "ACTIVE", None)
    assert route.serving and route.key_shape == TABLE_SHAPE and route.record is record
    assert set(route.indexes) == {"by_g", "by_l"}
    key = encode_storage_key({"S": "x"}, {"N": "1"})
    partition = route.partitions.lookup(key)
    assert partition in record.partitions and partition.holds(key)
    assert len(route.partitions) == len(record.partitions) == 4


def test_a_global_index_is_routed_to_its_own_partitions_under_its_entry_key() -> None:
    record = _table()
    route = Route.of_table(record)
    index = route.global_index("by_g")
    assert index is not None
    (defined,) = [i for i in record.indexes if i.name == "by_g"]
    assert (index.name, index.id, index.index, index.status) == ("t", "b" * 32, "by_g", "ACTIVE")
    assert index.key_shape == entry_shape(defined, TABLE_SHAPE)
    assert index.partition_defs == defined.partitions
    # Built once per route: a caller can tell by identity whether the catalog changed.
    assert route.global_index("by_g") is index
    assert route.global_index("by_l") is None, "a local index lives in the table's partitions"
    assert route.global_index("nope") is None
    assert index.global_index("by_g") is None, "an index has no indexes"


def test_a_route_that_does_not_tile_the_key_space_fails_its_lookups_only() -> None:
    record = _table()
    broken = replace(record, partitions=record.partitions[1:])
    route = Route.of_table(broken)  # Building the route does not look at the partitions...
    with pytest.raises(Exception, match="cover the key space"):
        route.partitions.lookup(b"")  # ...the first lookup does.


async def test_the_cache_keeps_a_route_while_its_record_is_the_same_object() -> None:
    # No node is ever called: the table is served from the cache.
    ctx = RouterContext({"n1": "127.0.0.1:1"}, "test", connect=lambda address: object())
    first, other = _table("t"), _table("u", "c" * 32)
    ctx._install({"t": first, "u": other})
    route, other_route = ctx.tables["t"], ctx.tables["u"]
    assert await ctx.table("t") is route
    changed = replace(first, version=first.version + 1, _json=None)
    ctx._install({"t": changed, "u": other})
    assert ctx.tables["u"] is other_route, "an unchanged record keeps its route"
    assert ctx.tables["t"] is not route and ctx.tables["t"].record is changed
    ctx._install({"t": replace(changed, status=TableStatus.DELETING, _json=None), "u": other})
    assert not ctx.tables["t"].serving
    ctx._install({"u": other})
    assert "t" not in ctx.tables
