"""`LocalNetwork` and `LocalTransport`: storage nodes called in-process, with seeded faults.

The in-process twin of `rpc.client.NodeClient` (both satisfy `rpc.transport.NodeTransport`), for
simulating a whole cluster in one process (`tests/sim`). A node is registered on the network under
its address as an *endpoint*: anything with `check_target(op, target)`, `read(op, target, body)`
and `apply_writes(writes)`, which a
`storagenode.node.StorageNode` is (rpc does not import storagenode; the caller says which ops are
writes). A write is applied as a group of one, as the group committer would apply it.

What crosses the network behaves as over gRPC: the envelope (`rpc.ops.Target`, immutable) is
checked before the body is decoded; request and reply bodies are JSON-encoded with orjson and
decoded on the other side, so no mutable object is shared between "processes"; a node's error
comes back through `rpc.codec` as a fresh instance of the same `core.errors` type (an unexpected
exception in the node as InternalServerError, as the gRPC server reports it); and a call that is
lost, late or sent to an unreachable node raises `ServiceUnavailable` with NodeClient's messages.

Faults (`Faults`) are drawn per call from the network's seeded `random.Random`, the same number of
draws for every call, so a run whose calls happen in the same order replays exactly (under
`tests/sim`'s virtual-time loop they do). Per call, with its probability:

- drop the request: not applied; the caller waits its timeout (bounded by `timeout_seconds`, a
  short simulated timeout) and gets what NodeClient raises for a call sent and not answered
  (`rpc.transport.unanswered`: OutcomeUnknown for a write, ServiceUnavailable otherwise);
- drop the reply: applied; the caller waits and fails as above;
- delay: the request waits a seeded duration in [0, `delay_seconds_max`) before it is delivered
  (if that is past the caller's timeout, the node would refuse it at its deadline: it is dropped
  as above);
- duplicate (writes only): the write is applied twice, the copy right after the original; the
  caller gets the original's reply.

`cut(address)` makes a node unreachable (every call fails at once with ServiceUnavailable, nothing
is applied) until `heal(address)`. A data-plane request carries its deadline (`Target.deadline`,
from the network's `clock`, virtual under `tests/sim`) for the node to check. Every decision is
appended to `LocalNetwork.log`, which two runs of one seed must produce identically.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import random
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, Protocol

import orjson

from core.errors import DynamoError, InternalServerError, ServiceUnavailable
from rpc import codec
from rpc.ops import Target
from rpc.transport import unanswered


class Endpoint(Protocol):
    """An in-process node as the network calls it (`storagenode.node.StorageNode` is one)."""

    def check_target(self, op: str, target: Target | None) -> None: ...

    def read(self, op: str, target: Target | None, body: dict[str, Any]) -> dict[str, Any]: ...

    def apply_writes(
        self, writes: Sequence[tuple[str, Target | None, dict[str, Any]]]
    ) -> Sequence[dict[str, Any] | DynamoError]: ...


@dataclasses.dataclass(frozen=True)
class Faults:
    """Per-call fault probabilities (0 to 1) and the bounds of simulated waits, in seconds."""

    drop_request: float = 0.0
    drop_reply: float = 0.0
    delay: float = 0.0
    duplicate: float = 0.0
    delay_seconds_max: float = 0.005
    timeout_seconds: float = 0.01  # How long a lost call waits at most before it fails.


NO_FAULTS = Faults()


@dataclasses.dataclass
class _Node:
    endpoint: Endpoint
    write_ops: Collection[str]


class LocalNetwork:
    """The in-process nodes by address, the faults in force and the seeded source of them."""

    def __init__(
        self,
        rng: random.Random,
        faults: Faults = NO_FAULTS,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.rng = rng
        self.faults = faults
        self.clock = clock  # Unix time, for the deadlines requests carry.
        self.log: list[str] = []
        self._nodes: dict[str, _Node] = {}
        self._cut: set[str] = set()
        self._ids = itertools.count(1)

    def register(self, address: str, endpoint: Endpoint, write_ops: Collection[str]) -> None:
        """Serve `endpoint` at `address`; ops in `write_ops` go to its apply_writes."""
        self._nodes[address] = _Node(endpoint, write_ops)

    def connect(self, address: str) -> LocalTransport:
        """A transport to the node at `address` (the `connect` a RouterContext takes)."""
        return LocalTransport(self, address)

    def cut(self, address: str) -> None:
        """Make the node unreachable until `heal`."""
        self._cut.add(address)
        self.log.append(f"cut {address}")

    def heal(self, address: str | None = None) -> None:
        """Make the node (None: every node) reachable again."""
        if address is None:
            self._cut.clear()
        else:
            self._cut.discard(address)
        self.log.append(f"heal {address}")

    async def deliver(
        self,
        address: str,
        op: str,
        target: Target | None,
        payload: dict[str, Any],
        timeout: float,
    ) -> dict[str, Any]:
        """Carry one call to its node and its reply back, with the faults the seed decides."""
        call_id = next(self._ids)
        faults = self.faults
        draws = [self.rng.random() for _ in range(5)]  # The same number for every call.
        node = self._nodes.get(address)
        if node is None or address in self._cut:
            self.log.append(f"{call_id} {address} {op} unreachable")
            await asyncio.sleep(0)
            raise ServiceUnavailable(f"Node {address} is unavailable: it cannot be reached")
        is_write = op in node.write_ops
        if target is not None:
            target = dataclasses.replace(target, deadline=self.clock() + timeout)
        wait = min(timeout, faults.timeout_seconds)
        if draws[0] < faults.drop_request:
            self.log.append(f"{call_id} {address} {op} request dropped")
            await asyncio.sleep(wait)
            raise _timed_out(address, op, timeout, target)
        if draws[1] < faults.delay:
            delay = draws[2] * faults.delay_seconds_max
            self.log.append(f"{call_id} {address} {op} delayed {delay:.6f}")
            if delay >= timeout:
                await asyncio.sleep(timeout)
                raise _timed_out(address, op, timeout, target)
            await asyncio.sleep(delay)
            if address in self._cut:  # Cut off while the request was on its way.
                raise ServiceUnavailable(f"Node {address} is unavailable: it cannot be reached")
            # It reaches whatever serves the address when it arrives: a node restarted while it
            # was on its way (a new process over the same store), never the one that died.
            node = self._nodes.get(address, node)
        request = orjson.dumps(payload)
        copies = 2 if is_write and draws[3] < faults.duplicate else 1
        if copies == 2:
            self.log.append(f"{call_id} {address} {op} duplicated")
        responses = [_serve(node, op, target, request, is_write) for _ in range(copies)]
        if draws[4] < faults.drop_reply:
            self.log.append(f"{call_id} {address} {op} reply dropped")
            await asyncio.sleep(wait)
            raise _timed_out(address, op, timeout, target)
        self.log.append(f"{call_id} {address} {op} ok")
        return codec.reply_from_response(responses[0])


def _serve(node: _Node, op: str, target: Target | None, request: bytes, is_write: bool) -> Any:
    """Run one request on the node; its response as the gRPC server would encode it."""
    try:
        node.endpoint.check_target(op, target)
        body = codec.decode_body(request)
        if is_write:
            [result] = node.endpoint.apply_writes([(op, target, body)])
            if isinstance(result, DynamoError):
                raise result
        else:
            result = node.endpoint.read(op, target, body)
        return codec.ok_response(0, result)
    except DynamoError as error:
        return codec.error_response(0, error)
    except Exception as error:
        return codec.error_response(0, InternalServerError(repr(error)))


def _timed_out(address: str, op: str, timeout: float, target: Target | None) -> DynamoError:
    reason = f"Node {address} did not answer {op} within {timeout:.3g} s"
    # A control-plane call is idempotent and retried as unavailable, as NodeClient.control does.
    return ServiceUnavailable(reason) if target is None else unanswered(op, reason)


class LocalTransport:
    """The transport to one in-process node (`rpc.transport.NodeTransport`)."""

    def __init__(self, network: LocalNetwork, address: str) -> None:
        self.network = network
        self.address = address
        self._closed = False

    async def call(
        self, op: str, target: Target, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        return await self._send(op, target, payload, timeout)

    async def control(self, op: str, payload: dict[str, Any], timeout: float) -> dict[str, Any]:
        return await self._send(op, None, payload, timeout)

    async def close(self) -> None:
        self._closed = True

    async def _send(
        self, op: str, target: Target | None, payload: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        if self._closed:
            raise ServiceUnavailable(f"The client of node {self.address} is closed")
        return await self.network.deliver(self.address, op, target, payload, timeout)
