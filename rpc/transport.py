"""`NodeTransport`: the one interface through which a service calls a storage node.

Two implementations satisfy it: `rpc.client.NodeClient` over gRPC, and `rpc.local.LocalTransport`,
an in-process twin that calls a node in the same process and can drop, delay, duplicate and cut
calls from a seeded random source (DESIGN.md, "Seams for faults and simulation"). Code that calls
nodes (the router's `RouterContext`) depends on this Protocol only, and is handed a `connect`
callable that makes one transport per node address.

Both keep the same contract: every call has a deadline, carried to the node in the envelope
(`Target.deadline`), and never hangs. A call that could not be sent raises
`core.errors.ServiceUnavailable` (nothing was applied); a call sent and not answered raises
ServiceUnavailable for a read and `core.errors.OutcomeUnknown` for a write (`unanswered`), since
the node may have applied it. Errors the node reports come back as the same `core.errors`
instances.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Protocol

from core.errors import DynamoError, OutcomeUnknown, ServiceUnavailable
from rpc.ops import ITEM_WRITE_OPS, Target


def unanswered(op: str, reason: str) -> DynamoError:
    """The error of a data-plane call that was sent and not answered: a write's outcome is
    unknown; a read simply failed."""
    if op in ITEM_WRITE_OPS:
        return OutcomeUnknown(f"{reason}; the {op} may or may not have been applied")
    return ServiceUnavailable(reason)


class NodeTransport(Protocol):
    """Calls one storage node: data-plane `call`, control-plane `control`, and `close`."""

    @property
    def address(self) -> str:
        """The node's address, for messages."""
        ...

    async def call(
        self, op: str, target: Target, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        """Send one data-plane request (`rpc.ops.DATA_OPS`) to `target`; return its reply body."""
        ...

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Send one control-plane request (`rpc.ops.CONTROL_OPS`); return its reply body."""
        ...

    async def close(self) -> None:
        """Fail every call in flight and release the connection."""
        ...


class Transports:
    """One transport per node address, made by `connect` when first asked for and kept until
    `close`: how a node's background work (splits, moves, catalog copies) calls its peers."""

    def __init__(self, connect: Callable[[str], NodeTransport]) -> None:
        self.connect = connect
        self._made: dict[str, NodeTransport] = {}

    def to(self, address: str) -> NodeTransport:
        transport = self._made.get(address)
        if transport is None:
            transport = self._made[address] = self.connect(address)
        return transport

    async def close(self) -> None:
        made, self._made = self._made, {}
        await asyncio.gather(*(transport.close() for transport in made.values()))
