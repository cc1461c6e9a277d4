"""Run one storage node.

    python -m storagenode --node-id node-1 --listen 127.0.0.1:7001 --data-dir DIR

Each flag falls back to an environment variable (DYNALAB_NODE_ID, DYNALAB_LISTEN,
DYNALAB_DATA_DIR, and the node's settings that --help lists, `storagenode.settings`) so
containers can be configured without a command line; the environment is read here, once. The
node logs to stderr, every line tagged with its node id, and prints "listening on <addr>" once it
serves, which is what scripts and tests wait for. SIGTERM or SIGINT stops it gracefully. With
--metrics-listen HOST:PORT (or DYNALAB_METRICS_LISTEN) it also serves Prometheus metrics
(`storagenode.metrics`). Its TTL sweeper runs every --ttl-sweep-seconds (default 1 s). A
partition past --split-bytes (default 10 GB) of items splits in place, and so does one whose
writes are throttled at its ceiling (DYNALAB_SPLIT_FOR_HEAT=off turns that off).
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

from core import limits, settings
from rpc import lifeline
from storagenode import metrics
from storagenode.raft_host import member_id
from storagenode.server import NodeServer
from storagenode.settings import NodeSettings
from storagenode.store import StoreCorruption, StoreFormatError

logger = logging.getLogger("storagenode")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m storagenode",
        description=__doc__,
        epilog="Environment variables (read once at start):\n" + settings.describe(NodeSettings),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--node-id", default=os.environ.get("DYNALAB_NODE_ID"))
    parser.add_argument("--listen", default=os.environ.get("DYNALAB_LISTEN"))
    parser.add_argument("--data-dir", default=os.environ.get("DYNALAB_DATA_DIR"))
    parser.add_argument(
        "--peers",
        default=os.environ.get("DYNALAB_PEERS", ""),
        help="the storage nodes sharing partitions' replication groups with this one, as "
        "node-N=HOST:PORT,... (an entry for this node itself, as in a list every node shares, is "
        "left out); this node's id must then be node-N too (default: none)",
    )
    parser.add_argument(
        "--shutdown-grace-seconds",
        type=float,
        default=limits.NODE_SHUTDOWN_GRACE_SECONDS,
        help="how long in-flight requests may finish after SIGTERM",
    )
    parser.add_argument(
        "--metrics-listen", help="HOST:PORT or PORT for Prometheus metrics; unset or 0: off"
    )
    parser.add_argument(
        "--ttl-sweep-seconds",
        help=f"how often the TTL sweeper looks for expired items (default "
        f"{limits.TTL_SWEEP_SECONDS_DEFAULT} s)",
    )
    parser.add_argument(
        "--split-bytes", help="split a partition past this many bytes of items (default 10 GB)"
    )
    args = parser.parse_args(argv)
    for flag, value in (
        ("--node-id/DYNALAB_NODE_ID", args.node_id),
        ("--listen/DYNALAB_LISTEN", args.listen),
        ("--data-dir/DYNALAB_DATA_DIR", args.data_dir),
    ):
        if not value:
            parser.error(f"{flag} is required")
    flags = {
        "metrics_listen": args.metrics_listen,
        "ttl_sweep_seconds": args.ttl_sweep_seconds,
        "split_bytes": args.split_bytes,
    }
    try:
        args.settings = settings.from_environ(NodeSettings, os.environ, flags)
        args.peers = parse_peers(args.peers, args.node_id)
    except (settings.SettingError, ValueError) as error:
        parser.error(str(error))
    return args


def parse_peers(text: str, node_id: str) -> dict[str, str]:
    """`--peers`: node-N=HOST:PORT pairs, comma-separated; every name (this node's too) must be
    node-N, since N is its member id in every replication group. The list may name this node
    too (one list for every node, as a Kubernetes ConfigMap gives it): that entry is left out."""
    peers: dict[str, str] = {}
    for pair in filter(None, (part.strip() for part in text.split(","))):
        name, _, address = pair.partition("=")
        if not address:
            raise ValueError(f"--peers takes node-N=HOST:PORT pairs, not {pair!r}")
        member_id(name)
        if name in peers:
            raise ValueError(f"--peers names {name} twice")
        peers[name] = address
    peers.pop(node_id, None)
    if peers:
        member_id(node_id)
    return peers


async def run(args: argparse.Namespace) -> None:
    server = NodeServer(
        args.node_id, args.listen, Path(args.data_dir), args.settings, peers=args.peers
    )
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    address = await server.start()
    metrics.serve(args.settings.metrics_listen)
    logger.info("listening on %s", address)
    print(f"node {args.node_id} listening on {address}", flush=True)
    try:
        # The process serves until it is told to stop; there is nothing else to bound this by.
        await stop.wait()
        logger.info("stopping (grace %.1f s)", args.shutdown_grace_seconds)
    finally:
        await server.stop(args.shutdown_grace_seconds)


def main(argv: list[str] | None = None) -> None:
    lifeline.tie_to_parent()
    args = parse_args(argv)
    logging.basicConfig(
        stream=sys.stderr,
        level=logging.INFO,
        format=f"%(asctime)s {args.node_id} %(name)s %(levelname)s %(message)s",
    )
    try:
        uvloop.run(run(args))
    except (StoreFormatError, StoreCorruption) as error:
        # Not a bug but the state of the data directory: one clear line, no traceback.
        logging.getLogger("storagenode").error("%s", error)
        sys.exit(f"node {args.node_id} cannot start: {error}")


if __name__ == "__main__":
    main()
