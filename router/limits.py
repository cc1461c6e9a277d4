"""The router's own resources: bytes of request bodies in flight, slow clients and connections.

One client must not be able to exhaust a router, so every resource a connection can hold is
bounded (the values and their reasons are in `core.limits`, `ROUTER_*`):

- **Bytes in flight.** A request body is admitted before it is read: its Content-Length (16 MB
  when it is chunked) is taken from a `BodyBudget` and held until the request is answered, since
  the parsed body lives as long as its handler. A body over DynamoDB's 16 MB gets DynamoDB's bare
  413 without being read. A body that does not fit waits, unread in the socket (aiohttp stops
  reading a connection whose buffer is full, so the kernel's window pushes back on the client),
  and after `body_admission_seconds` is answered 503 ServiceUnavailable, which SDKs retry with
  backoff. Small requests fit while a large one waits, so a client sending huge bodies is slowed
  and well-behaved ones are not.
- **Slow and silent clients.** A connection with no request in progress (silent since it opened,
  idle after a response, or with headers still incomplete) is closed after `idle_seconds`
  (aiohttp's keep-alive timer, which runs from the connection's start and from each response);
  a body must arrive within `body_read_seconds` of its headers, else the client gets a bare 408
  and the connection is closed.
- **Connections.** At start the descriptor limit's soft value is raised to the hard one; at most
  `connections` client connections are open, fewer than the descriptors, so the router never
  fails to accept for want of one. At the cap a new connection displaces an idle one (one that
  never sent a request first, then the longest idle keep-alive), so a flood of idle connections
  cannot lock out new clients nor cut established ones; when every connection is busy, the new one
  is answered 503 and closed.

The body is read as sent: a compressed one is inflated, bounded, by `router.protocol`
(`core.content_coding`), which the budget allows for. A body whose chunks are broken gets
DynamoDB's SerializationException, as a body that is no JSON does.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import resource
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeAlias, cast

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from core import limits
from core.errors import DynamoError, SerializationError, ServiceUnavailable
from router.settings import RouterSettings

log = logging.getLogger("router.limits")

# What aiohttp's server calls for each request (the application's `_handle`).
RequestHandler: TypeAlias = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


BODY_ADMISSION_REFUSED = (
    "The router is holding as many request bytes as it admits at once; retry with backoff"
)
CONNECTIONS_REFUSED = (
    b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
)


@dataclass(frozen=True)
class RouterLimits:
    """The bounds one router process enforces (see the module's paragraph for each)."""

    body_bytes_in_flight: int = limits.ROUTER_BODY_BYTES_IN_FLIGHT_MAX
    body_admission_seconds: float = limits.ROUTER_BODY_ADMISSION_SECONDS_MAX
    body_read_seconds: float = limits.ROUTER_BODY_READ_SECONDS_MAX
    idle_seconds: float = limits.ROUTER_IDLE_SECONDS_MAX
    connections: int = limits.ROUTER_CONNECTIONS_MAX

    @classmethod
    def for_process(cls, settings: RouterSettings, descriptors: int) -> RouterLimits:
        """The router's settings, with the connection cap below `descriptors`."""
        connections = min(
            limits.ROUTER_CONNECTIONS_MAX,
            max(1, descriptors - limits.ROUTER_RESERVED_DESCRIPTORS_MIN),
        )
        return cls(
            body_bytes_in_flight=settings.body_bytes_in_flight,
            body_read_seconds=settings.body_read_seconds,
            idle_seconds=settings.idle_seconds,
            connections=connections,
        )


def raise_descriptor_limit() -> int:
    """Raise this process's soft limit of open descriptors to its hard limit; return the limit."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY:
        # Linux refuses an infinite soft limit for descriptors; the kernel's own cap applies.
        hard = int(Path("/proc/sys/fs/nr_open").read_text())
    if soft != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return soft


class BodyBudget:
    """Bytes of request bodies admitted and not yet answered, at most `capacity`.

    A request is granted as soon as its bytes fit, in arrival order among those that fit, so a
    small request never waits behind a large one.
    """

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self.in_flight = 0
        self._waiters: collections.deque[tuple[int, asyncio.Future[None]]] = collections.deque()

    def take(self, size: int) -> int | None:
        """Hold `size` bytes (at most the capacity) if they fit now; return the bytes held, to be
        given back with `release`, or None."""
        size = min(size, self.capacity)
        if self.in_flight + size > self.capacity:
            return None
        self.in_flight += size
        return size

    async def acquire(self, size: int, timeout: float) -> int:
        """Hold `size` bytes (at most the capacity), waiting up to `timeout` seconds for room;
        return the bytes held, to be given back with `release`. Raises ServiceUnavailable."""
        taken = self.take(size)
        if taken is not None:
            return taken
        size = min(size, self.capacity)
        waiter = (size, asyncio.get_running_loop().create_future())
        self._waiters.append(waiter)
        try:
            await asyncio.wait((waiter[1],), timeout=timeout)
        finally:
            if not waiter[1].done():
                self._waiters.remove(waiter)
                waiter[1].cancel()
        if waiter[1].cancelled():
            raise ServiceUnavailable(BODY_ADMISSION_REFUSED)
        return size

    def release(self, size: int) -> None:
        self.in_flight -= size
        for waiter in list(self._waiters):
            wanted, future = waiter
            if self.in_flight + wanted <= self.capacity:
                self._waiters.remove(waiter)
                self.in_flight += wanted
                future.set_result(None)


class Replies(Protocol):
    """How the wire protocol answers what the limits refuse (`router.protocol.JsonProtocol`)."""

    def error_response(self, request: web.BaseRequest, error: DynamoError) -> web.Response: ...

    def bare_response(self, status: int) -> web.Response: ...


class _Connection(asyncio.Protocol):
    """One client connection: aiohttp's protocol inside, counted and evictable by the guard."""

    def __init__(self, guard: ConnectionGuard, inner: asyncio.Protocol) -> None:
        self.guard = guard
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.requests_in_progress = 0
        self.served = 0
        self.admitted = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        self.admitted = self.guard.admit(self)
        if not self.admitted:
            self.transport.write(CONNECTIONS_REFUSED)
            self.transport.close()
            return
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.admitted:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received() if self.admitted else None

    def pause_writing(self) -> None:
        if self.admitted:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.admitted:
            self.inner.resume_writing()

    def connection_lost(self, exc: Exception | None) -> None:
        if self.admitted:
            self.guard.forget(self)
            self.inner.connection_lost(exc)


class ConnectionGuard:
    """Counts the router's client connections, caps them, and admits request bodies."""

    def __init__(self, router_limits: RouterLimits, replies: Replies) -> None:
        self.limits = router_limits
        self.replies = replies
        self.budget = BodyBudget(router_limits.body_bytes_in_flight)
        self._by_transport: dict[asyncio.BaseTransport, _Connection] = {}
        # Connections with no request in progress, oldest first: those that never sent one, and
        # those idle after a response. Ordered dictionaries make eviction O(1).
        self._fresh: collections.OrderedDict[_Connection, None] = collections.OrderedDict()
        self._idle: collections.OrderedDict[_Connection, None] = collections.OrderedDict()
        self.evicted = 0
        self.refused = 0

    @property
    def open_connections(self) -> int:
        return len(self._by_transport)

    def protocol_factory(self, inner: Callable[[], asyncio.Protocol]) -> Callable[[], _Connection]:
        """Wrap aiohttp's protocol factory so every connection passes through the guard."""
        return lambda: _Connection(self, inner())

    def admit(self, connection: _Connection) -> bool:
        if len(self._by_transport) >= self.limits.connections:
            victims = self._fresh or self._idle
            if not victims:
                self.refused += 1
                return False
            victim, _ = victims.popitem(last=False)
            self.evicted += 1
            assert victim.transport is not None
            victim.transport.close()
            self.forget(victim)
        assert connection.transport is not None
        self._by_transport[connection.transport] = connection
        self._fresh[connection] = None
        return True

    def forget(self, connection: _Connection) -> None:
        if connection.transport is not None:
            self._by_transport.pop(connection.transport, None)
        self._fresh.pop(connection, None)
        self._idle.pop(connection, None)

    def guarded(self, handler: RequestHandler) -> RequestHandler:
        """The server's `handler`, serving each request with its connection marked busy and its
        body admitted and read within the limits.

        It wraps the whole application (see `GuardedSite`) rather than being an aiohttp
        middleware: a middleware puts two more coroutines and a handler lookup on every request.
        """

        async def serve(request: web.BaseRequest) -> web.StreamResponse:
            connection = self._by_transport.get(request.transport)  # type: ignore[arg-type]
            if connection is not None:
                self._fresh.pop(connection, None)
                self._idle.pop(connection, None)
                connection.requests_in_progress += 1
            try:
                if not request.body_exists:
                    return await handler(request)
                return await self._admit_body(request, handler)
            finally:
                if connection is not None and connection.transport in self._by_transport:
                    connection.requests_in_progress -= 1
                    connection.served += 1
                    if connection.requests_in_progress == 0:
                        self._idle[connection] = None

        return serve

    async def _admit_body(
        self, request: web.BaseRequest, handler: RequestHandler
    ) -> web.StreamResponse:
        declared = request.content_length
        if declared is not None and declared > limits.HTTP_REQUEST_BYTES_MAX:
            # DynamoDB answers an oversized request with a bare 413; the body is never read.
            return _closing(self.replies.bare_response(413))
        # A chunked body has no length to take: it takes the most it may be read up to. A
        # compressed one is held as sent and inflated to at most 16 MB beside it
        # (`core.content_coding`): it takes that too.
        coding = request.headers.get("Content-Encoding", "identity").strip().lower()
        wanted = limits.HTTP_REQUEST_BYTES_MAX if declared is None else declared
        if coding not in ("", "identity"):
            wanted += limits.HTTP_REQUEST_BYTES_MAX
        held = self.budget.take(wanted)
        if held is None:
            try:
                held = await self.budget.acquire(wanted, self.limits.body_admission_seconds)
            except DynamoError as error:
                return _closing(self.replies.error_response(request, error))
        try:
            try:
                if request.content.is_eof():
                    # The whole body came with the headers, as most do: no timer to arm.
                    await request.read()
                else:
                    async with asyncio.timeout(self.limits.body_read_seconds):
                        await request.read()
            except TimeoutError:
                return _closing(self.replies.bare_response(408))
            except web.HTTPRequestEntityTooLarge:
                return _closing(self.replies.bare_response(413))
            except RequestPayloadError:
                # A body that cannot be read (broken chunks) is as unreadable as one that is no
                # JSON: DynamoDB's SerializationException, without text.
                return _closing(self.replies.error_response(request, SerializationError(None)))
            return await handler(request)
        finally:
            self.budget.release(held)


def _closing(response: web.Response) -> web.Response:
    """`response`, closing its connection after it: the body it refused is still in the socket."""
    response.force_close()
    return response


class GuardedSite(web.TCPSite):
    """aiohttp's TCP site with every connection and request passing through a `ConnectionGuard`."""

    def __init__(self, runner: web.AppRunner, host: str, port: int, guard: ConnectionGuard) -> None:
        super().__init__(runner, host, port)
        self.guard = guard

    async def start(self) -> None:
        await web.BaseSite.start(self)
        server = self._runner.server
        assert server is not None
        server.request_handler = self.guard.guarded(server.request_handler)
        self._server = await asyncio.get_running_loop().create_server(
            self.guard.protocol_factory(server), self._host, self._port, backlog=self._backlog
        )
        self._bound_port = self._server.sockets[0].getsockname()[1]


def limits_for_process(settings: RouterSettings) -> RouterLimits:
    """Raise the descriptor limit and derive this router process's limits from it."""
    descriptors = raise_descriptor_limit()
    router_limits = RouterLimits.for_process(settings, descriptors)
    log.info(
        "limits: %d connections (%d descriptors), %d body bytes in flight, idle %.0f s",
        router_limits.connections,
        descriptors,
        router_limits.body_bytes_in_flight,
        router_limits.idle_seconds,
    )
    return router_limits
