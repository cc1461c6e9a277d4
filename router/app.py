"""The router's aiohttp application: the operation registry, the routes and the context's lifecycle.

Every DynamoDB operation the router serves is a handler `async def handler(ctx, body) -> reply`
exported by one module in that module's `OPERATIONS` mapping; `load_operations` assembles them into
the one registry that `router.protocol` dispatches on. The DynamoDB Streams API's operations are
`router.streams.OPERATIONS`, served under their own target prefix.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiohttp import web

from core import limits
from router import (
    admin,
    dashboard,
    items,
    partiql,
    queries,
    streams,
    tables,
    tags,
    transactions,
    ttl,
)
from router.limits import ConnectionGuard, RouterLimits
from router.protocol import Handler, JsonProtocol, add_cors_headers
from rpc.background import BackgroundTask

if TYPE_CHECKING:
    from router.context import RouterContext


def load_operations() -> dict[str, Handler]:
    """The registry of every operation the router serves, by DynamoDB operation name."""
    operations: dict[str, Handler] = {}
    for module in (tables, items, queries, ttl, tags, transactions, partiql):
        clashes = operations.keys() & module.OPERATIONS.keys()
        if clashes:
            raise RuntimeError(f"{module.__name__} redefines operations {sorted(clashes)}")
        operations.update(module.OPERATIONS)
    return operations


# The application's connection guard (router/limits.py), which the listening site needs too.
GUARD = web.AppKey("guard", ConnectionGuard)


def create_app(
    ctx: RouterContext,
    operations: Mapping[str, Handler],
    router_limits: RouterLimits | None = None,
) -> web.Application:
    """The aiohttp application serving `operations` with `ctx`, which it starts and closes.

    Serve it with `auto_decompress=False` (router/__main__.py does): the protocol reads bodies as
    sent and inflates compressed ones itself, bounded (`core.content_coding`)."""
    protocol = JsonProtocol(ctx, operations, streams.OPERATIONS)
    guard = ConnectionGuard(router_limits or RouterLimits(), protocol)
    # DynamoDB takes request bodies up to 16 MB; aiohttp's default would refuse those over 1 MB.
    app = web.Application(client_max_size=limits.HTTP_REQUEST_BYTES_MAX)
    app[GUARD] = guard
    app.router.add_get("/", protocol.health)
    admin.add_routes(app, ctx)
    dashboard.add_routes(app, ctx)
    # DynamoDB serves every path and answers every other method itself (with a 404), so the
    # protocol takes whatever the routes above do not.
    app.router.add_route("*", "/{path:.*}", protocol.handle)
    app.on_response_prepare.append(add_cors_headers)

    # Transactions left behind by a router that died are finished by every other router.
    resolver = BackgroundTask("txn-resolver", lambda: transactions.resolve_forever(ctx))

    async def start_context(_: web.Application) -> None:
        await ctx.start()
        resolver.start()

    async def close_context(_: web.Application) -> None:
        await resolver.close()
        await ctx.close()

    app.on_startup.append(start_context)
    app.on_cleanup.append(close_context)
    return app
