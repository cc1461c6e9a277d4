"""`python -m gsi_replicator`: run one GSI replicator process until SIGTERM or SIGINT.

    python -m gsi_replicator --listen 127.0.0.1:8100 \\
                             --nodes node-1=127.0.0.1:7001,node-2=127.0.0.1:7002

Each flag falls back to an environment variable (DYNALAB_LISTEN, DYNALAB_NODES,
DYNALAB_GSI_BACKFILL_PAGE_BYTES, DYNALAB_GSI_LEASE_GC_GRACE_SECONDS), which suits containers.
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

from core import limits
from gsi_replicator.replicator import Replicator
from rpc import lifeline
from rpc.addresses import parse_address, parse_nodes

log = logging.getLogger("gsi_replicator")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m gsi_replicator", description=__doc__.split("\n")[0]
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
        type=int,
        default=int(
            os.environ.get("DYNALAB_GSI_BACKFILL_PAGE_BYTES", limits.GSI_BACKFILL_PAGE_BYTES)
        ),
        help="bytes of a base partition one page of an online index's copy reads (default 1 MB; "
        "small pages make a copy long, for experiments) (env DYNALAB_GSI_BACKFILL_PAGE_BYTES)",
    )
    parser.add_argument(
        "--lease-gc-grace-seconds",
        type=float,
        default=float(
            os.environ.get("DYNALAB_GSI_LEASE_GC_GRACE_SECONDS", limits.GSI_LEASE_GC_GRACE_SECONDS)
        ),
        help="how long a lease row of a dropped table or index, or a replicator's member row, "
        "must be seen unchanged before it is deleted (default 60; short for tests) "
        "(env DYNALAB_GSI_LEASE_GC_GRACE_SECONDS)",
    )
    args = parser.parse_args(argv)
    if args.backfill_page_bytes < 1:
        parser.error("--backfill-page-bytes must be at least 1")
    if args.lease_gc_grace_seconds <= limits.GSI_LEASE_SECONDS:
        parser.error(
            f"--lease-gc-grace-seconds must be longer than a lease ({limits.GSI_LEASE_SECONDS} s)"
        )
    if args.listen is None:
        parser.error("--listen (or DYNALAB_LISTEN) is required")
    if args.nodes is None:
        parser.error("--nodes (or DYNALAB_NODES) is required")
    return args


async def serve(args: argparse.Namespace) -> None:
    replicator = Replicator(
        args.nodes,
        backfill_page_bytes=args.backfill_page_bytes,
        lease_gc_grace_seconds=args.lease_gc_grace_seconds,
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
