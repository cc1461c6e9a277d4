"""The node's cache of the global indexes a write payload names (`storagenode.partition`
GlobalIndexCache): parsed once per table while routers name the same ones, and never used for a
list it was not parsed from, so an index added online has its key schema enforced at once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.errors import DynamoError, ValidationError
from rpc import ops
from storagenode.node import StorageNode
from storagenode.partition import GlobalIndexCache
from storagenode.store import Store
from tests import envelope

TABLE = {"id": "c3" * 16, "name": "Orders", "key_schema": {"hash": ["pk", "S"], "range": None}}


def index(name: str, attribute: str, status: str = "ACTIVE") -> dict[str, Any]:
    return {
        "name": name,
        "key": [[attribute, "S", "partition"]],
        "projection": "KEYS_ONLY",
        "status": status,
    }


def test_the_same_named_indexes_are_parsed_once_per_table() -> None:
    cache = GlobalIndexCache()
    first = cache.parsed("t1", [index("ByA", "a")])
    assert cache.parsed("t1", [index("ByA", "a")]) is first
    assert [i.name for i in first] == ["ByA"]
    other_table = cache.parsed("t2", [index("ByA", "a")])
    assert other_table == first and cache.parsed("t1", [index("ByA", "a")]) is first


def test_other_named_indexes_replace_the_entry() -> None:
    cache = GlobalIndexCache()
    creating = cache.parsed("t1", [index("ByA", "a", "CREATING")])
    active = cache.parsed("t1", [index("ByA", "a", "ACTIVE")])
    assert [i.status.value for i in creating] == ["CREATING"]
    assert [i.status.value for i in active] == ["ACTIVE"]
    added = cache.parsed("t1", [index("ByA", "a"), index("ByB", "b")])
    assert [i.name for i in added] == ["ByA", "ByB"]
    assert cache.parsed("t1", []) == ()


def write(node: StorageNode, op: str, body: dict[str, Any]) -> dict[str, Any]:
    (result,) = envelope.apply(node, [(op, body)])
    if isinstance(result, DynamoError):
        raise result
    return result


def test_a_node_enforces_an_index_added_after_writes_cached_the_old_list(tmp_path: Path) -> None:
    store = Store(tmp_path)
    try:
        node = StorageNode(store)
        partition = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
        write(node, ops.CREATE_PARTITION, {"table": TABLE, "partition": partition})
        target = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1}
        before = [index("ByA", "a")]
        for number in range(3):  # Cached from the first write on.
            item = {"pk": {"S": f"k{number}"}, "a": {"S": "x"}, "b": {"N": "1"}}
            write(node, ops.PUT, {**target, "item": item, "global_indexes": before})
        after = [index("ByA", "a"), index("ByB", "b", "CREATING")]
        item = {"pk": {"S": "k9"}, "a": {"S": "x"}, "b": {"N": "1"}}
        with pytest.raises(ValidationError) as refused:
            write(node, ops.PUT, {**target, "item": item, "global_indexes": after})
        assert "ByB" in (refused.value.message or "")
        with pytest.raises(ValidationError):
            write(
                node,
                ops.UPDATE,
                {
                    **target,
                    "key": {"pk": {"S": "k0"}},
                    "update": "SET b = :n",
                    "values": {":n": {"N": "2"}},
                    "global_indexes": after,
                },
            )
        write(node, ops.PUT, {**target, "item": item, "global_indexes": before})
    finally:
        store.close()
