"""`python -m router`: run one router process until SIGTERM or SIGINT.

    python -m router --listen 127.0.0.1:8000 --nodes node-1=127.0.0.1:7001,node-2=127.0.0.1:7002
                     [--advertise HOST:PORT] [--state-dir DIR]

Each flag falls back to an environment variable (DYNALAB_LISTEN, DYNALAB_NODES, DYNALAB_ADVERTISE,
DYNALAB_ROUTER_STATE_DIR), which suits containers. `--state-dir` is where the router keeps a copy
of the last catalog it read, to start from while the catalog's node is down
(`router/catalog_copy.py`); without it the router keeps no state on disk.
`--advertise` is the address clients should use (DescribeEndpoints answers
it); it defaults to the address the router listens on. Logs go to stderr; once the router serves,
it prints `listening on HOST:PORT` to stdout. On SIGTERM or SIGINT it stops accepting connections,
lets requests in flight finish for a bounded grace period, and closes its node clients.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from pathlib import Path

import uvloop
from aiohttp import web

from core import limits, settings
from router.app import GUARD, create_app, load_operations
from router.context import RouterContext
from router.limits import GuardedSite, limits_for_process
from router.placement import PlacementMover
from router.settings import RouterSettings
from router.sources import Sources
from router.table_lifecycle import TableReconciler
from rpc import lifeline
from rpc.addresses import parse_address, parse_nodes
from rpc.background import BackgroundTask

log = logging.getLogger("router")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m router",
        description=__doc__.split("\n")[0],
        epilog="Environment variables (read once at start):\n" + settings.describe(RouterSettings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen",
        type=parse_address,
        default=os.environ.get("DYNALAB_LISTEN"),
        help="HOST:PORT to serve DynamoDB on (env DYNALAB_LISTEN)",
    )
    parser.add_argument(
        "--nodes",
        type=parse_nodes,
        default=os.environ.get("DYNALAB_NODES"),
        help="storage nodes as NODE_ID=HOST:PORT,... (env DYNALAB_NODES)",
    )
    parser.add_argument(
        "--advertise",
        type=parse_address,
        default=os.environ.get("DYNALAB_ADVERTISE"),
        help="HOST:PORT clients should use, if not the listen address (env DYNALAB_ADVERTISE)",
    )
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=os.environ.get("DYNALAB_ROUTER_STATE_DIR"),
        help="directory for the router's copy of the catalog (env DYNALAB_ROUTER_STATE_DIR)",
    )
    parser.add_argument(
        "--replication-factor",
        help="replicas of each new table's partitions (env DYNALAB_REPLICATION_FACTOR; default 1)",
    )
    args = parser.parse_args(argv)
    # argparse applies `type` to string defaults too, so environment values are parsed as flags are.
    if args.listen is None:
        parser.error("--listen (or DYNALAB_LISTEN) is required")
    if args.nodes is None:
        parser.error("--nodes (or DYNALAB_NODES) is required")
    try:
        flags = {"replication_factor": args.replication_factor}
        args.settings = settings.from_environ(RouterSettings, os.environ, flags)
    except settings.SettingError as error:
        parser.error(str(error))
    return args


async def serve(args: argparse.Namespace) -> None:
    host, port = args.listen
    # Production sources of time, randomness and ids: the system's (see router.sources).
    ctx = RouterContext(
        args.nodes,
        advertise=f"{host}:{port}",
        sources=Sources.system(),
        state_dir=args.state_dir,
        settings=args.settings,
    )
    router_limits = limits_for_process(args.settings)
    app = create_app(ctx, load_operations(), router_limits)
    # No access log: formatting a line per request would cost more than serving many of them.
    # aiohttp's keep-alive timer closes a connection with no request in progress (see
    # router/limits.py).
    runner = web.AppRunner(
        app,
        access_log=None,
        shutdown_timeout=limits.ROUTER_SHUTDOWN_GRACE_SECONDS,
        keepalive_timeout=router_limits.idle_seconds,
        # A request refused before its body was read closes its connection at once, rather than
        # reading up to 16 MB it will not use.
        lingering_time=0,
        # Bodies are read as sent and inflated, bounded, by the protocol (core.content_coding).
        auto_decompress=False,
    )
    await runner.setup()
    try:
        site = GuardedSite(runner, host, port, app[GUARD])
        await site.start()
        bound_host, bound_port = runner.addresses[0][:2]
        listening = f"{bound_host}:{bound_port}"
        if args.advertise is not None:
            ctx.advertise = "{}:{}".format(*args.advertise)
        else:
            ctx.advertise = listening
        reconciler = BackgroundTask("table-reconciler", TableReconciler(ctx).run)
        reconciler.start()
        placement = BackgroundTask("placement", PlacementMover(ctx).run)
        if args.settings.move_split_children:
            placement.start()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        log.info("listening on %s (nodes: %s)", listening, ", ".join(sorted(args.nodes)))
        print(f"listening on {listening}", flush=True)
        await stop.wait()
        log.info("stopping")
        await placement.close()
        await reconciler.close()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    lifeline.tie_to_parent()
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    uvloop.run(serve(args))


if __name__ == "__main__":
    main()
