"""The storage node's operations registry (`storagenode.operations`): every operation of the wire
is declared once, every declaration is complete, and the node's loops read it."""

from __future__ import annotations

import inspect

import pytest

from rpc import codec, node_pb2, ops
from storagenode import expiry, move, split
from storagenode.operations import OPERATIONS, DiskFull, Kind


def test_every_op_of_the_wire_is_declared_once_under_its_enum_value() -> None:
    wire = {
        number: name for name, number in node_pb2.Op.items() if number != node_pb2.OP_UNSPECIFIED
    }
    declared = [op.wire for op in OPERATIONS.values() if op.wire is not None]
    assert sorted(declared) == sorted(wire)
    for op in OPERATIONS.values():
        if op.wire is not None:
            assert wire[op.wire] == f"OP_{op.name.upper()}"
            assert codec.OP_FROM_WIRE[op.wire] == op.name
    assert set(codec.OP_TO_WIRE) == {op.name for op in OPERATIONS.values() if op.wire is not None}
    assert set(codec.OP_TO_WIRE) == ops.CONTROL_OPS | ops.DATA_OPS | ops.FEED_OPS


def test_each_declaration_is_keyed_by_its_name_and_is_complete() -> None:
    for name, op in OPERATIONS.items():
        assert op.name == name
        assert callable(op.handler), name
        assert inspect.ismethod(op.payload.from_json), f"{name}: its payload decodes from JSON"
        assert inspect.iscoroutinefunction(op.handler) == (op.kind is Kind.DRIVER), name
        assert len(inspect.signature(op.handler).parameters) == (
            2 if op.kind is Kind.DRIVER else 3
        ), name
        # Only a partition's reads and writes spend its units.
        assert not op.metered or (op.name in ops.DATA_OPS and op.kind is not Kind.DRIVER), name
        # Only writes can be refused for space; reads never are.
        assert op.disk_full is DiskFull.REFUSED or op.writes, name


def test_internal_writes_are_the_nodes_own_and_never_on_the_wire() -> None:
    internal = {name for name, op in OPERATIONS.items() if op.kind is Kind.INTERNAL_WRITE}
    assert internal == {
        expiry.TTL_EXPIRE,
        expiry.TTL_BACKFILL,
        split.SPLIT_PIN,
        split.SPLIT_INSTALL,
        split.SPLIT_RECORD,
        move.MOVE_SOURCE,
    }
    assert not internal & set(codec.OP_TO_WIRE)
    assert all(OPERATIONS[name].wire is None for name in internal)


@pytest.mark.parametrize(
    ("kind", "names"),
    [
        (Kind.READ, {ops.GET, ops.QUERY, ops.SCAN, ops.TABLE_STATS, ops.PARTITION_THROUGHPUT}),
        (Kind.DRIVER, {ops.SPLIT_PARTITION, ops.MOVE_PARTITION}),
    ],
)
def test_kinds(kind: Kind, names: set[str]) -> None:
    assert names <= {name for name, op in OPERATIONS.items() if op.kind is kind}


def test_what_a_full_disk_still_takes() -> None:
    def taken(level: DiskFull) -> set[str]:
        return {name for name, op in OPERATIONS.items() if op.disk_full >= level}

    assert taken(DiskFull.ALWAYS) == {ops.DROP_TABLE}
    assert taken(DiskFull.FREES_SPACE) == {
        ops.DROP_TABLE,
        ops.DELETE,
        ops.CHECKPOINT,
        ops.UNREGISTER_CONSUMER,
        expiry.TTL_EXPIRE,
        move.MOVE_SOURCE,
        ops.DROP_REPLICA,
    }


def test_what_is_metered() -> None:
    assert {name for name, op in OPERATIONS.items() if op.metered} == {
        ops.GET,
        ops.QUERY,
        ops.SCAN,
        ops.PUT,
        ops.UPDATE,
        ops.DELETE,
        ops.INDEX_APPLY,
    }
