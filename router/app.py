"""The router's aiohttp application: the operation registry, the routes and the context's lifecycle.

Every DynamoDB operation the router serves is a handler `async def handler(ctx, body) -> reply`
exported by one module in that module's `OPERATIONS` mapping; `load_operations` assembles them into
the one registry that `router.protocol` dispatches on.
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from aiohttp import web

from core import limits
from router import tables
from router.protocol import Handler, JsonProtocol, health

if TYPE_CHECKING:
    from router.context import RouterContext

log = logging.getLogger("router.app")

# The modules that serve the data plane. They are written alongside the table operations; one that
# is not there yet leaves its operations answering UnknownOperationException, as DynamoDB answers
# an operation it does not have.
DATA_PLANE_MODULES = ("router.items", "router.queries")


def load_operations() -> dict[str, Handler]:
    """The registry of every operation the router serves, by DynamoDB operation name."""
    operations: dict[str, Handler] = dict(tables.OPERATIONS)
    for module_name in DATA_PLANE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name != module_name:
                raise
            log.warning("%s is not available: its operations are not served", module_name)
            continue
        clashes = operations.keys() & module.OPERATIONS.keys()
        if clashes:
            raise RuntimeError(f"{module_name} redefines operations {sorted(clashes)}")
        operations.update(module.OPERATIONS)
    return operations


def create_app(ctx: RouterContext, operations: Mapping[str, Handler]) -> web.Application:
    """The aiohttp application serving `operations` with `ctx`, which it starts and closes."""
    # DynamoDB takes request bodies up to 16 MB; aiohttp's default would refuse those over 1 MB.
    app = web.Application(client_max_size=limits.HTTP_REQUEST_BYTES_MAX)
    protocol = JsonProtocol(ctx, operations)
    app.router.add_post("/", protocol.handle)
    app.router.add_get("/", health)

    async def start_context(_: web.Application) -> None:
        await ctx.start()

    async def close_context(_: web.Application) -> None:
        await ctx.close()

    app.on_startup.append(start_context)
    app.on_cleanup.append(close_context)
    return app
