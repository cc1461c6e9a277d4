"""Time To Live, measured: how soon items expiring together are deleted, and what the sweep costs
the foreground.

    python bench/ttl.py [--items 100000] [--sweep-seconds 1] [--concurrency 8]

Starts its own local cluster (3 storage nodes, 1 router, throughput enforcement off so the load
is not throttled), creates an on-demand table with TTL enabled, and:

1. loads `--items` items that all expire at the same second X, chosen so the load finishes before
   it (the load rate is measured first on a thousand items);
2. follows every partition's change feed from the end of the load, in a process of its own so it
   does not slow the measured clients, timing each TTL delete (a REMOVE record marked
   by_service) as it arrives;
3. runs a foreground load of `--concurrency` clients (half GetItem, half PutItem of items that
   never expire) from the end of the load until the last item is deleted, and splits its
   latencies into before X (no sweep) and after X (while the sweepers delete).

It prints the time from expiry to deletion at p50/p99/max (each item's delete as the feed
delivered it, minus X: the item is expired from X on, DynamoDB's "less than the current time"),
the sweep's rate, and the foreground p50/p99 before and during the sweep.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import math
import multiprocessing
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dynalab import bench  # noqa: E402
from dynalab.cluster import LocalCluster  # noqa: E402
from router.context import RouterContext  # noqa: E402
from rpc import ops  # noqa: E402
from rpc.changefeed import ChangeFeedClient  # noqa: E402
from rpc.client import NodeClient  # noqa: E402

TABLE = "ttl-bench"
BATCH = 25
WARMUP_ITEMS = 1000
LOAD_MARGIN = 1.5  # X leaves the measured load time times this, plus a few seconds.
LOAD_SLACK_SECONDS = 5.0
SWEEP_DEADLINE_SECONDS = 600.0
CALL_SECONDS = 10.0


def client_for(session: aiohttp.ClientSession, endpoint: str) -> bench.DynamoDBClient:
    signer = bench.SigV4Signer(
        bench.DUMMY_ACCESS_KEY, bench.DUMMY_SECRET_KEY, "us-east-1", bench.host_header(endpoint)
    )
    return bench.DynamoDBClient(session, endpoint, signer)


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1)]


async def load(
    client: bench.DynamoDBClient, keys: list[str], expires: int, concurrency: int
) -> float:
    """Put every key with `exp` = expires in batches of 25; the seconds it took."""
    started = time.monotonic()
    batches = [keys[i : i + BATCH] for i in range(0, len(keys), BATCH)]
    queue: asyncio.Queue[list[str]] = asyncio.Queue()
    for batch in batches:
        queue.put_nowait(batch)

    async def writer() -> None:
        while not queue.empty():
            batch = queue.get_nowait()
            pending: dict[str, Any] = {
                TABLE: [
                    {"PutRequest": {"Item": {"pk": {"S": k}, "exp": {"N": str(expires)}}}}
                    for k in batch
                ]
            }
            while pending:
                reply = await client.request("BatchWriteItem", {"RequestItems": pending})
                pending = reply.get("UnprocessedItems") or {}

    await asyncio.gather(*(writer() for _ in range(concurrency)))
    return time.monotonic() - started


async def table_partitions(cluster: LocalCluster) -> list[tuple[str, str, str]]:
    """(node address, table id, partition id) of every partition of the table."""
    ctx = RouterContext({node.node_id: node.address for node in cluster.nodes}, "bench")
    try:
        await ctx.refresh()
        table = ctx.records[TABLE]
        addresses = {node.node_id: node.address for node in cluster.nodes}
        return [(addresses[p.node], table.id, p.id) for p in table.partitions]
    finally:
        await ctx.close()


async def last_seqs(partitions: list[tuple[str, str, str]]) -> dict[str, int]:
    seqs: dict[str, int] = {}
    for address in {address for address, _, _ in partitions}:
        client = NodeClient(address)
        try:
            table_id = partitions[0][1]
            reply = await client.control(
                ops.TABLE_STATS, ops.TableStatsPayload(table_id).to_json(), CALL_SECONDS
            )
            for partition_id, stats in reply["partitions"].items():
                seqs[partition_id] = stats["last_seq"]
        finally:
            await client.close()
    return seqs


def watch_deletes(
    partitions: list[tuple[str, str, str]],
    seqs: dict[str, int],
    items: int,
    deadline: float,
    results: Any,
) -> None:
    """In a process of its own: the arrival times of the first `items` TTL deletes on the
    partitions' feeds after `seqs`, sent to `results` (before the wall-clock `deadline`)."""

    async def watch() -> list[float]:
        deleted_at: list[float] = []
        followers = [
            asyncio.create_task(follow_deletes(address, table_id, partition_id, seq, deleted_at))
            for (address, table_id, partition_id), seq in zip(
                partitions, [seqs[p] for _, _, p in partitions], strict=True
            )
        ]
        while len(deleted_at) < items and time.time() < deadline:
            await asyncio.sleep(0.05)
        for follower in followers:
            follower.cancel()
        await asyncio.gather(*followers, return_exceptions=True)
        return deleted_at

    results.put(asyncio.run(watch()))


async def follow_deletes(
    address: str, table_id: str, partition_id: str, after: int, deleted_at: list[float]
) -> None:
    """Append the arrival time of every TTL delete of the partition after seq `after`."""
    feed = ChangeFeedClient(address)
    try:
        changes = feed.follow(table_id, partition_id, after_seq=after)
        async with contextlib.aclosing(changes):
            async for change in changes:
                if change.kind == "REMOVE" and change.by_service:
                    deleted_at.append(time.time())
    finally:
        await feed.close()


async def foreground(
    client: bench.DynamoDBClient,
    warm_keys: list[str],
    stop: asyncio.Event,
    samples: list[tuple[float, float]],
) -> None:
    """GetItem of a warm key or PutItem of a key that never expires, back to back, recording
    (wall time at the start, seconds taken) of each."""
    rng = random.Random(os.getpid())
    while not stop.is_set():
        started_wall, started = time.time(), time.monotonic()
        if rng.random() < 0.5:
            key = {"pk": {"S": rng.choice(warm_keys)}}
            await client.request("GetItem", {"TableName": TABLE, "Key": key})
        else:
            item = {"pk": {"S": f"fg-{rng.randrange(10**9)}"}, "v": {"S": "x" * 100}}
            await client.request("PutItem", {"TableName": TABLE, "Item": item})
        samples.append((started_wall, time.monotonic() - started))


async def run(cluster: LocalCluster, args: argparse.Namespace) -> None:
    connector = aiohttp.TCPConnector(limit=4 * args.concurrency)
    timeout = aiohttp.ClientTimeout(total=bench.REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        client = client_for(session, cluster.router_url)
        await client.request(
            "CreateTable",
            {
                "TableName": TABLE,
                "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
                "AttributeDefinitions": [{"AttributeName": "pk", "AttributeType": "S"}],
                "BillingMode": "PAY_PER_REQUEST",
            },
        )
        await client.request(
            "UpdateTimeToLive",
            {
                "TableName": TABLE,
                "TimeToLiveSpecification": {"Enabled": True, "AttributeName": "exp"},
            },
        )
        warm_keys = [f"warm-{i}" for i in range(WARMUP_ITEMS)]
        warm_seconds = await load(client, warm_keys, 2**40, args.concurrency)
        rate = WARMUP_ITEMS / warm_seconds
        expires = math.ceil(time.time() + args.items / rate * LOAD_MARGIN + LOAD_SLACK_SECONDS)
        print(f"load rate {rate:,.0f} items/s; {args.items:,} items expire at {expires}")
        keys = [f"item-{i:07}" for i in range(args.items)]
        load_seconds = await load(client, keys, expires, args.concurrency)
        loaded_at = time.time()
        print(f"loaded in {load_seconds:.1f} s, {expires - loaded_at:.1f} s before they expire")
        if loaded_at >= expires:
            print("WARNING: the load ran past the expiry time; the latencies below are late")

        partitions = await table_partitions(cluster)
        seqs = await last_seqs(partitions)
        deadline = expires + SWEEP_DEADLINE_SECONDS
        spawn = multiprocessing.get_context("spawn")
        results = spawn.Queue()
        watcher = spawn.Process(
            target=watch_deletes, args=(partitions, seqs, args.items, deadline, results)
        )
        watcher.start()
        stop = asyncio.Event()
        samples: list[tuple[float, float]] = []
        clients = [
            asyncio.create_task(foreground(client, warm_keys, stop, samples))
            for _ in range(args.concurrency)
        ]
        loop = asyncio.get_running_loop()
        deleted_at: list[float] = await loop.run_in_executor(
            None, results.get, True, deadline - time.time() + CALL_SECONDS
        )
        stop.set()
        await asyncio.gather(*clients)
        watcher.join(CALL_SECONDS)

    if len(deleted_at) < args.items:
        print(f"only {len(deleted_at):,} of {args.items:,} items were deleted in time")
    if not deleted_at:
        return
    last_deleted = max(deleted_at)
    delays = [at - expires for at in deleted_at]
    print(
        f"expiry to deletion ({len(delays):,} items): p50 {percentile(delays, 0.5):.2f} s, "
        f"p99 {percentile(delays, 0.99):.2f} s, max {max(delays):.2f} s; "
        f"sweep rate {len(delays) / max(1e-9, last_deleted - min(deleted_at)):,.0f} items/s"
    )
    before = [seconds for at, seconds in samples if at < expires]
    during = [seconds for at, seconds in samples if expires <= at <= last_deleted]
    for label, values in (("before expiry (no sweep)", before), ("during the sweep", during)):
        if values:
            print(
                f"foreground {label}: {len(values):,} requests, p50 "
                f"{1000 * statistics.median(values):.1f} ms, p99 "
                f"{1000 * percentile(values, 0.99):.1f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000, help="items expiring together")
    parser.add_argument("--sweep-seconds", type=float, default=1.0, help="nodes' sweep interval")
    parser.add_argument("--concurrency", type=int, default=8, help="loaders / foreground clients")
    args = parser.parse_args()
    os.environ["DYNALAB_THROTTLING"] = "off"
    with (
        tempfile.TemporaryDirectory() as scratch,
        LocalCluster(
            Path(scratch) / "cluster", nodes=3, routers=1, ttl_sweep_seconds=args.sweep_seconds
        ) as cluster,
    ):
        asyncio.run(run(cluster, args))


if __name__ == "__main__":
    main()
