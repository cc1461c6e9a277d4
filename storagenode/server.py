"""The storage node's gRPC server: turns `rpc` messages into `StorageNode` calls and back.

Data-plane requests arrive on the bidirectional `Exchange` stream in RequestBatches. Reads are
answered at once from the store, on the event loop itself; writes
go to the group committer and are answered when their commit lands. Answers are coalesced:
whenever the previous ResponseBatch has been sent, everything answered since goes out as the next
one, so under load one message carries many responses. The unary `Call` serves the rare
control-plane operations (and any other, for tools). The standard gRPC health service reports
SERVING once the store is open.

The `ChangeFeed` service (`proto/rpc/changefeed.proto`) streams each partition's change log to
its followers: the servicer only translates messages, and the node's `feed_service.FeedService`
decides what a follow sends and when (the same one the in-process network serves). Register,
Checkpoint and Unregister go through the group committer like any write. On shutdown every follow
ends at once, cleanly.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from functools import partial
from pathlib import Path
from typing import Any

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio

from core import limits
from core.errors import (
    DynamoError,
    InternalServerError,
    LeaseUnavailable,
    ServiceUnavailable,
    UnknownOperation,
)
from rpc import changefeed_pb2, changefeed_pb2_grpc, codec, node_pb2, node_pb2_grpc, ops
from rpc.changefeed import error_to_proto, record_to_proto
from rpc.client import NodeClient
from rpc.raft_transport import RaftTransport
from rpc.transport import ConsumerPosition, FeedPage
from storagenode import commit, metrics
from storagenode.catalog_copy import CatalogCopier
from storagenode.commit import GroupCommitter
from storagenode.feed_service import FeedService
from storagenode.move import Mover
from storagenode.node import StorageNode
from storagenode.operations import OPERATIONS, Kind
from storagenode.placement import PlacementKeeper
from storagenode.raft_host import member_id, node_name
from storagenode.replica_move import ReplicaMover
from storagenode.settings import NodeSettings
from storagenode.split import Splitter
from storagenode.store import Store
from storagenode.stream_retention import StreamRetention
from storagenode.sweeper import TtlSweeper
from storagenode.throughput import NodeThroughput

logger = logging.getLogger(__name__)

SERVICE_NAME = "dynalab.rpc.StorageNode"
FEED_SERVICE_NAME = "dynalab.rpc.ChangeFeed"
Deliver = Callable[[node_pb2.Response], None]

SERVER_OPTIONS = [
    ("grpc.max_receive_message_length", limits.RPC_MESSAGE_BYTES_MAX),
    ("grpc.max_send_message_length", limits.RPC_MESSAGE_BYTES_MAX),
    # Routers ping idle streams to find dead nodes quickly; accept their pings, and ping them back
    # so a vanished router's stream is torn down too.
    ("grpc.keepalive_time_ms", int(limits.RPC_KEEPALIVE_SECONDS * 1000)),
    ("grpc.keepalive_timeout_ms", int(limits.RPC_KEEPALIVE_TIMEOUT_SECONDS * 1000)),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", int(limits.RPC_KEEPALIVE_SECONDS * 500)),
    # Without this a second node could bind the same port silently and steal half the traffic.
    ("grpc.so_reuseport", 0),
]


class NodeServicer(node_pb2_grpc.StorageNodeServicer):
    """The StorageNode gRPC service over one StorageNode and its group committer."""

    def __init__(
        self,
        node: StorageNode,
        committer: GroupCommitter,
        splitter: Splitter,
        mover: Mover,
        replica_mover: ReplicaMover,
    ) -> None:
        self.node = node
        self.committer = committer
        self.splitter = splitter
        self.mover = mover
        self.replica_mover = replica_mover
        self.draining = False
        self._streams: set[_ResponseStream] = set()

    def drain(self) -> None:
        """Begin shutdown: refuse new requests, and end each stream once it has answered the rest.

        A router's stream never ends on its own, so without this a graceful stop would always wait
        out its whole grace period. Refusing is safe: the router sees ServiceUnavailable for a
        request that was not applied, and reconnects to the node once it is back.
        """
        self.draining = True
        for stream in self._streams:
            stream.receiving = False
            stream.ready.set()

    def dispatch(self, request: node_pb2.Request, deliver: Deliver) -> None:
        """Answer a request through `deliver`: now for a read, after its commit for a write."""
        op = codec.OP_FROM_WIRE.get(request.op)
        try:
            if op is None:
                raise UnknownOperation(f"Unknown storage node operation {request.op!r}")
            target = _target(request)
            # From the envelope alone: a stale request is refused before its body is decoded.
            self.node.check_target(op, target)
            body = codec.decode_body(request.body)
            operation = OPERATIONS[op]  # Every op of the wire is declared (test_operations).
            if operation.kind is Kind.READ:
                try:
                    deliver(codec.ok_response(request.id, self.node.read(op, target, body)))
                except LeaseUnavailable:
                    # A leader without a lease confirms it leads first (read-index).
                    task = asyncio.ensure_future(
                        commit.read(self.node, self.committer, op, target, body)
                    )
                    task.add_done_callback(partial(_deliver_write, request.id, deliver))
            elif operation.kind is Kind.DRIVER:
                # A split or a move: many steps on the event loop, answered when they are done.
                handler: Any = operation.handler
                task = asyncio.ensure_future(handler(self, operation.payload.from_json(body)))
                task.add_done_callback(partial(_deliver_write, request.id, deliver))
            else:
                future = self.committer.submit(op, target, body)
                if op == ops.MOVE_RECEIVE:
                    # A move's target may be held at its step, once committed, before it answers.
                    future = asyncio.ensure_future(self.mover.received(body.get("step"), future))
                future.add_done_callback(partial(_deliver_write, request.id, deliver))
        except DynamoError as error:
            deliver(codec.error_response(request.id, error))
        except Exception as error:
            logger.exception("%s request %d failed", op, request.id)
            deliver(codec.error_response(request.id, InternalServerError(repr(error))))

    # gRPC's asyncio server lets a streaming handler write through its context and return None;
    # mypy-protobuf's stub types only the other form, a handler that returns an iterator.
    async def Exchange(  # type: ignore[override]
        self,
        request_iterator: AsyncIterator[node_pb2.RequestBatch],
        context: grpc.aio.ServicerContext[node_pb2.RequestBatch, node_pb2.ResponseBatch],
    ) -> None:
        stream = _ResponseStream()
        stream.receiving = not self.draining
        self._streams.add(stream)
        receiver = asyncio.create_task(self._receive(request_iterator, stream))
        try:
            while True:
                # Waits for the router's next request or an answer; the stream's life is bounded
                # by the router, and keepalive pings end it if the router vanishes.
                await stream.ready.wait()
                stream.ready.clear()
                for batch in stream.take_batches():
                    # A timeout scope, not wait_for, which (before Python 3.12) runs each write
                    # in a task of its own (`rpc.client` does the same).
                    async with asyncio.timeout(limits.RPC_SEND_SECONDS_MAX):
                        await context.write(batch)
                if stream.finished():
                    break
        finally:
            self._streams.discard(stream)
            receiver.cancel()

    async def _receive(
        self, request_iterator: AsyncIterator[node_pb2.RequestBatch], stream: _ResponseStream
    ) -> None:
        try:
            async for batch in request_iterator:
                for request in batch.requests:
                    stream.outstanding += 1
                    if self.draining:
                        refused = ServiceUnavailable("The storage node is shutting down")
                        stream.deliver(codec.error_response(request.id, refused))
                    else:
                        self.dispatch(request, stream.deliver)
                stream.ready.set()
        except grpc.aio.AioRpcError as error:
            # The router went away mid-stream; what it sent has been dispatched and will commit.
            logger.info("a request stream ended: %s", error.code().name)
        finally:
            stream.receiving = False
            stream.ready.set()

    async def Call(
        self,
        request: node_pb2.Request,
        context: grpc.aio.ServicerContext[node_pb2.Request, node_pb2.Response],
    ) -> node_pb2.Response:
        answer: asyncio.Future[node_pb2.Response] = asyncio.get_running_loop().create_future()

        def deliver(response: node_pb2.Response) -> None:
            if not answer.done():
                answer.set_result(response)

        self.dispatch(request, deliver)
        # Writes resolve within the committer's bound; the caller's deadline may be shorter.
        timeout = context.time_remaining() or limits.WRITE_COMMIT_SECONDS_MAX
        try:
            return await asyncio.wait_for(answer, timeout)
        except TimeoutError:
            op = codec.OP_FROM_WIRE.get(request.op, "request")
            late = ServiceUnavailable(f"{op} did not finish within {timeout:.1f} s")
            return codec.error_response(request.id, late)


def _target(request: node_pb2.Request) -> ops.Target | None:
    """The partition a request is addressed to; None for a control-plane request."""
    if not request.table_id:
        return None
    return ops.Target(
        request.table_id, request.partition_id, request.epoch, request.consistent, request.deadline
    )


def _deliver_write(request_id: int, deliver: Deliver, future: asyncio.Future[Any]) -> None:
    if future.cancelled():
        deliver(codec.error_response(request_id, ServiceUnavailable("The write was cancelled")))
        return
    error = future.exception()
    if error is None:
        deliver(codec.ok_response(request_id, future.result()))
    elif isinstance(error, DynamoError):
        deliver(codec.error_response(request_id, error))
    else:
        deliver(codec.error_response(request_id, InternalServerError(repr(error))))


class _ResponseStream:
    """The answers of one Exchange stream waiting to be sent, and whether more can come."""

    def __init__(self) -> None:
        self.outbox: list[node_pb2.Response] = []
        self.ready = asyncio.Event()
        self.receiving = True
        self.outstanding = 0  # Requests received and not yet answered.

    def deliver(self, response: node_pb2.Response) -> None:
        self.outstanding -= 1
        self.outbox.append(response)
        self.ready.set()

    def take_batches(self) -> list[node_pb2.ResponseBatch]:
        """Everything answered so far, cut into messages of about RPC_BATCH_BYTES_TARGET."""
        batches: list[node_pb2.ResponseBatch] = []
        current: list[node_pb2.Response] = []
        current_bytes = 0
        for response in self.outbox:
            current.append(response)
            current_bytes += len(response.body) + len(response.error_message)
            if current_bytes >= limits.RPC_BATCH_BYTES_TARGET:
                batches.append(node_pb2.ResponseBatch(responses=current))
                current, current_bytes = [], 0
        if current:
            batches.append(node_pb2.ResponseBatch(responses=current))
        self.outbox = []
        return batches

    def finished(self) -> bool:
        return not self.receiving and self.outstanding == 0 and not self.outbox


class ChangeFeedServicer(changefeed_pb2_grpc.ChangeFeedServicer):
    """The ChangeFeed gRPC service: translates between its messages and the node's transport-
    neutral `FeedService` (which the in-process network serves too)."""

    def __init__(self, service: FeedService) -> None:
        self.service = service

    # Written through the context, as Exchange is (see there).
    async def Follow(  # type: ignore[override]
        self,
        request: changefeed_pb2.FollowRequest,
        context: grpc.aio.ServicerContext[changefeed_pb2.FollowRequest, changefeed_pb2.ChangeBatch],
    ) -> None:
        batches = self.service.follow(
            request.table_id,
            request.partition_id,
            consumer=request.consumer,
            after_seq=int(request.after_seq) if request.HasField("after_seq") else None,
            records_max=request.max_records_per_batch,
            encode=_batch_to_proto,
        )
        try:
            async for batch in batches:
                async with asyncio.timeout(limits.RPC_SEND_SECONDS_MAX):
                    await context.write(batch)
        except DynamoError as error:
            refusal = changefeed_pb2.ChangeBatch(error=error_to_proto(error))
            await asyncio.wait_for(context.write(refusal), limits.RPC_SEND_SECONDS_MAX)
        finally:
            await batches.aclose()

    async def Register(
        self,
        request: changefeed_pb2.RegisterRequest,
        context: grpc.aio.ServicerContext[
            changefeed_pb2.RegisterRequest, changefeed_pb2.ConsumerReply
        ],
    ) -> changefeed_pb2.ConsumerReply:
        seq = request.seq if request.HasField("seq") else None
        write = self.service.register(request.table_id, request.partition_id, request.consumer, seq)
        return await self._answer(ops.REGISTER_CONSUMER, write, context.time_remaining())

    async def Checkpoint(
        self,
        request: changefeed_pb2.CheckpointRequest,
        context: grpc.aio.ServicerContext[
            changefeed_pb2.CheckpointRequest, changefeed_pb2.ConsumerReply
        ],
    ) -> changefeed_pb2.ConsumerReply:
        write = self.service.checkpoint(
            request.table_id, request.partition_id, request.consumer, request.seq
        )
        return await self._answer(ops.CHECKPOINT, write, context.time_remaining())

    async def Unregister(
        self,
        request: changefeed_pb2.UnregisterRequest,
        context: grpc.aio.ServicerContext[
            changefeed_pb2.UnregisterRequest, changefeed_pb2.ConsumerReply
        ],
    ) -> changefeed_pb2.ConsumerReply:
        write = self.service.unregister(request.table_id, request.partition_id, request.consumer)
        return await self._answer(ops.UNREGISTER_CONSUMER, write, context.time_remaining())

    async def _answer(
        self,
        op: str,
        write: Coroutine[Any, Any, ConsumerPosition],
        time_remaining: float | None,
    ) -> changefeed_pb2.ConsumerReply:
        """Run a consumer write through the group commit; answer after it committed.

        `time_remaining` is the caller's deadline (None: it set none).
        """
        timeout = time_remaining or limits.WRITE_COMMIT_SECONDS_MAX
        try:
            position = await asyncio.wait_for(write, timeout)
        except TimeoutError:
            late = ServiceUnavailable(f"{op} did not finish within {timeout:.1f} s")
            return changefeed_pb2.ConsumerReply(error=error_to_proto(late))
        except DynamoError as error:
            return changefeed_pb2.ConsumerReply(error=error_to_proto(error))
        except Exception as error:
            logger.exception("%s failed", op)
            bug = InternalServerError(repr(error))
            return changefeed_pb2.ConsumerReply(error=error_to_proto(bug))
        return changefeed_pb2.ConsumerReply(
            seq=position.seq,
            first_seq=position.first_seq,
            last_seq=position.last_seq,
            unregistered=position.unregistered,
        )


def _batch_to_proto(page: FeedPage) -> changefeed_pb2.ChangeBatch:
    return changefeed_pb2.ChangeBatch(
        records=[record_to_proto(change) for change in page.records],
        end_of_log=page.end_of_log,
        first_seq=page.first_seq,
        last_seq=page.last_seq,
    )


class NodeServer:
    """A storage node process's server: the store, the committer, gRPC and health, in order."""

    def __init__(
        self,
        node_id: str,
        listen: str,
        data_dir: Path,
        settings: NodeSettings | None = None,
        peers: Mapping[str, str] | None = None,
    ) -> None:
        self.node_id = node_id
        # The other storage nodes, by name, that share partitions' Raft groups with this one
        # (node names are node-N: N is each one's member id); none: every group is this node's.
        self.peers = dict(peers or {})
        self._raft: RaftTransport | None = None
        self.settings = NodeSettings() if settings is None else settings
        self.listen = listen
        self.data_dir = data_dir
        self.address = ""
        self._server: grpc.aio.Server | None = None
        self._servicer: NodeServicer | None = None
        self._feed: FeedService | None = None
        self._health: health_aio.HealthServicer | None = None
        self._committer: GroupCommitter | None = None
        self._store: Store | None = None
        self._sweeper: TtlSweeper | None = None
        self._splitter: Splitter | None = None
        self._mover: Mover | None = None
        self._replica_mover: ReplicaMover | None = None
        self._stream_retention: StreamRetention | None = None
        self._catalog_copier: CatalogCopier | None = None
        self._placement: PlacementKeeper | None = None
        # Clients of the peers this node copies partition replicas from (`snapshots.py`).
        self._peer_clients: dict[int, NodeClient] = {}

    async def start(self) -> str:
        """Open the store and serve; return the address actually bound (listen may say port 0)."""
        server = grpc.aio.server(options=SERVER_OPTIONS)
        # Bind before opening the store, so a taken port fails before anything needs closing.
        try:
            port = server.add_insecure_port(self.listen)
        except RuntimeError as error:
            raise OSError(f"Cannot listen on {self.listen}: {error}") from None
        if port == 0:
            raise OSError(f"Cannot listen on {self.listen}")
        settings = self.settings
        self._store = Store(self.data_dir, disk_reserve_bytes=settings.disk_reserve_bytes)
        member = member_id(self.node_id) if self.peers else 1
        try:
            node = StorageNode(
                self._store,
                member=member,
                peers=[member_id(peer) for peer in self.peers],
                throughput=NodeThroughput(
                    enforced=settings.throttling, burst_seconds=settings.burst_seconds
                ),
                item_collection_bytes_max=settings.item_collection_bytes_max,
                gsi_lag_records_max=settings.gsi_lag_records_max,
                raft_log_compact_entries=settings.raft_log_compact_entries,
                raft_log_kept_entries=settings.raft_log_kept_entries,
            )
        except BaseException:
            self._store.close()
            self._store = None
            raise
        if self.peers:
            self._raft = RaftTransport(
                member,
                {member_id(peer): address for peer, address in self.peers.items()},
                lambda sender, batch: committer.deliver(sender, batch),
            )
            self._raft.add_to_server(server)
        raft = self._raft
        self._committer = GroupCommitter(
            node,
            send=None if raft is None else raft.send,
            read_page=self._read_page if self.peers else None,
        )
        self._committer.start()
        committer = self._committer

        async def submit(op: str, body: dict[str, Any]) -> dict[str, Any]:
            return await committer.submit(op, None, body)

        self._sweeper = TtlSweeper(node, committer.submit, settings.ttl_sweep_seconds)
        self._sweeper.start()
        metrics.watch_ttl(self._sweeper)
        self._splitter = Splitter(
            node,
            committer.submit,
            NodeClient,
            split_bytes=settings.split_bytes,
            split_for_heat=settings.split_for_heat,
        )
        self._splitter.start()
        self._mover = Mover(self._splitter, self.node_id)
        self._mover.start()
        self._replica_mover = ReplicaMover(self._splitter, self.node_id, self._address_of)
        self._stream_retention = StreamRetention(
            node, committer.submit, settings.stream_retention_seconds
        )
        self._stream_retention.start()
        self._catalog_copier = CatalogCopier(self.node_id, node, committer.submit, NodeClient)
        self._catalog_copier.start()
        self._placement = PlacementKeeper(
            self.node_id,
            node,
            submit,
            self._splitter.catalog,
            resume_move=self._replica_mover.resume,
            heal_seconds=settings.heal_seconds,
            heal_move=self._replica_mover.heal,
        )
        self._placement.start()
        self._servicer = NodeServicer(
            node, self._committer, self._splitter, self._mover, self._replica_mover
        )
        node_pb2_grpc.add_StorageNodeServicer_to_server(self._servicer, server)
        self._feed = FeedService(node, committer.submit)
        changefeed_pb2_grpc.add_ChangeFeedServicer_to_server(ChangeFeedServicer(self._feed), server)
        self._health = health_aio.HealthServicer()
        health_pb2_grpc.add_HealthServicer_to_server(self._health, server)
        self._server = server
        await server.start()
        for service in ("", SERVICE_NAME, FEED_SERVICE_NAME):
            await self._health.set(service, health_pb2.HealthCheckResponse.SERVING)
        self.address = f"{self.listen.rsplit(':', 1)[0]}:{port}"
        logger.info(
            "node %s serving %d partitions from %s",
            self.node_id,
            len(node.partitions),
            self.data_dir,
        )
        return self.address

    def _address_of(self, node: str) -> str | None:
        """A node's address by name: this node's own, or a peer's (None: not a peer)."""
        return self.address if node == self.node_id else self.peers.get(node)

    async def _read_page(self, source: int, request: dict[str, Any]) -> dict[str, Any]:
        """A page of a partition replica from peer node `source` (`snapshots.py`)."""
        client = self._peer_clients.get(source)
        if client is None:
            address = self.peers.get(node_name(source))
            if address is None:
                raise ServiceUnavailable(f"node-{source} is not a peer of this node")
            client = self._peer_clients[source] = NodeClient(address)
        return await client.control(
            ops.RAFT_SNAPSHOT_READ, request, limits.RAFT_SNAPSHOT_PAGE_SECONDS_MAX
        )

    async def stop(self, grace: float = limits.NODE_SHUTDOWN_GRACE_SECONDS) -> None:
        """Stop gracefully: refuse new calls, let in-flight ones finish for `grace` seconds,
        commit what is queued, and close the store."""
        if self._health is not None:
            await self._health.enter_graceful_shutdown()
        if self._servicer is not None:
            self._servicer.drain()
        if self._feed is not None:
            self._feed.drain()
        if self._sweeper is not None:
            await self._sweeper.close()
        if self._mover is not None:
            await self._mover.close()
        if self._replica_mover is not None:
            await self._replica_mover.close()
        if self._splitter is not None:
            await self._splitter.close()
        if self._stream_retention is not None:
            await self._stream_retention.close()
        if self._catalog_copier is not None:
            await self._catalog_copier.close()
        if self._placement is not None:
            await self._placement.close()
        if self._server is not None:
            await self._server.stop(grace)
        if self._committer is not None:
            await self._committer.close(grace)
        if self._raft is not None:
            await self._raft.close()
        for client in self._peer_clients.values():
            await client.close()
        self._peer_clients = {}
        if self._feed is not None:
            # A follow cancelled by the stop may leave its read running on the executor.
            await self._feed.wait_reads(grace)
        if self._store is not None:
            self._store.close()
            self._store = None
        logger.info("node %s stopped", self.node_id)
