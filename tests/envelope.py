"""Tests written with flat request bodies: the envelope (`rpc.ops.Target`) split out of them.

A data-plane or change-feed body may name its partition inline (`table_id`, `partition_id`,
`epoch`, `consistent`, `deadline`), as the tests' shorthand; these helpers lift those fields into
the target the node and the transports take, and leave control-plane bodies (which name their
table in their payload) as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from rpc import ops
from rpc.ops import Target
from rpc.transport import NodeTransport
from storagenode.commit import GroupCommitter
from storagenode.node import StorageNode, Write

ADDRESSED_OPS = ops.DATA_OPS | ops.FEED_OPS


def split(op: str, body: dict[str, Any]) -> tuple[Target | None, dict[str, Any]]:
    """The target and payload of a flat body (no target for a control-plane op)."""
    if op not in ADDRESSED_OPS:
        return None, body
    payload = dict(body)
    target = Target(
        payload.pop("table_id"),
        payload.pop("partition_id"),
        payload.pop("epoch", 0),
        payload.pop("consistent", False) is True,
        payload.pop("deadline", 0.0),
    )
    return target, payload


def write(op: str, body: dict[str, Any]) -> Write:
    return (op, *split(op, body))


def apply(node: StorageNode, writes: Iterable[tuple[str, dict[str, Any]]]) -> list[Any]:
    """`node.apply_writes` of flat (op, body) writes."""
    return node.apply_writes([write(op, body) for op, body in writes])


def read(node: StorageNode, op: str, body: dict[str, Any]) -> dict[str, Any]:
    """`node.read` of a flat body."""
    return node.read(op, *split(op, body))


def submit(committer: GroupCommitter, op: str, body: dict[str, Any]) -> Any:
    """`committer.submit` of a flat body."""
    return committer.submit(*write(op, body))


async def call(
    client: NodeTransport, op: str, body: dict[str, Any], timeout: float
) -> dict[str, Any]:
    """`client.call` of a flat data-plane body."""
    target, payload = split(op, body)
    assert target is not None, f"{op} is not a data-plane op"
    return await client.call(op, target, payload, timeout)
