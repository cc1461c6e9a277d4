"""`python -m gsi_replicator`: run one GSI replicator process until SIGTERM or SIGINT.

    python -m gsi_replicator --listen 127.0.0.1:8100 \\
                             --nodes node-1=127.0.0.1:7001,node-2=127.0.0.1:7002

Each flag falls back to an environment variable (DYNALAB_LISTEN, DYNALAB_NODES, and the settings
--help lists, `gsi_replicator.settings`), read once here, which suits containers.
`--listen` serves `GET /` (200 once running: the readiness probe) and `GET /metrics`
(Prometheus: per source partition, its checkpoint, changes read, index writes, restarts and the
lag of its last batch; its leases, and the dead lease rows it deleted).
Logs go to stderr; once it serves, it prints `listening on HOST:PORT`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys

import uvloop
from aiohttp import web

from core import settings
from gsi_replicator.replicator import Replicator
from gsi_replicator.settings import ReplicatorSettings
from rpc import lifeline
from rpc.addresses import parse_address, parse_nodes

log = logging.getLogger("gsi_replicator")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gsi_replicator",
        description=__doc__.split("\n")[0],
        epilog="Environment variables (read once at start):\n"
        + settings.describe(ReplicatorSettings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--listen",
        type=parse_address,
        default=os.environ.get("DYNALAB_LISTEN"),
        help="HOST:PORT to serve health and /metrics on (env DYNALAB_LISTEN)",
    )
    parser.add_argument(
        "--nodes",
        type=parse_nodes,
        default=os.environ.get("DYNALAB_NODES"),
        help="storage nodes as NODE_ID=HOST:PORT,... (env DYNALAB_NODES)",
    )
    parser.add_argument(
        "--backfill-page-bytes",
        help="bytes of a base partition one page of an online index's copy reads (default 1 MB; "
        "small pages make a copy long, for experiments)",
    )
    parser.add_argument(
        "--lease-gc-grace-seconds",
        help="how long a lease row of a dropped table or index, or a replicator's member row, "
        "must be seen unchanged before it is deleted (default 60; short for tests)",
    )
    args = parser.parse_args(argv)
    if args.listen is None:
        parser.error("--listen (or DYNALAB_LISTEN) is required")
    if args.nodes is None:
        parser.error("--nodes (or DYNALAB_NODES) is required")
    flags = {
        "backfill_page_bytes": args.backfill_page_bytes,
        "lease_gc_grace_seconds": args.lease_gc_grace_seconds,
    }
    try:
        args.settings = settings.from_environ(ReplicatorSettings, os.environ, flags)
    except settings.SettingError as error:
        parser.error(str(error))
    return args


async def serve(args: argparse.Namespace) -> None:
    replicator = Replicator(
        args.nodes,
        backfill_page_bytes=args.settings.backfill_page_bytes,
        lease_gc_grace_seconds=args.settings.lease_gc_grace_seconds,
    )
    stop = asyncio.Event()

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def metrics(request: web.Request) -> web.Response:
        return web.Response(text=replicator.metrics(), content_type="text/plain")

    app = web.Application()
    app.router.add_get("/", health)
    app.router.add_get("/metrics", metrics)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        host, port = args.listen
        await web.TCPSite(runner, host, port).start()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        listening = "{}:{}".format(*runner.addresses[0][:2])
        log.info("listening on %s (nodes: %s)", listening, ", ".join(sorted(args.nodes)))
        print(f"listening on {listening}", flush=True)
        await replicator.run(stop)
        log.info("stopping")
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
