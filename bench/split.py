"""Benchmark a partition split under a mixed load: how long it takes, and what clients see.

    python bench/split.py [--partition-mb 1024] [--load-mb 16] [--phase-seconds 10]
                          [--concurrency 16]
    python bench/split.py --heat [--heat-seconds 40]

It starts its own cluster (3 nodes, 1 router, throttling off, the size trigger out of the way,
in a temporary directory), fills one partition of an on-demand table with `--partition-mb` of
items (keys chosen so that they all hash into the table's first partition), then runs a mixed
load on that partition's keys (60% GetItem, 30% PutItem overwriting an item, 10% Query of one
item collection) and prints, for the `--phase-seconds` before the split, while the split runs
(`POST /admin/tables/{name}/partitions/{id}/split`, where the partition halves its bytes) and
the `--phase-seconds` after it: the operations per second and the p50 / p99 latency.

Then it moves the split's larger child to another node (`move_phase`: `POST .../move`; the
routers' own placement moves are off, DYNALAB_MOVE_SPLIT_CHILDREN=off, so this is the one move)
and prints the same figures while the move runs and the `--phase-seconds` after it. The node's
split reply says how long the install took, the one step that makes the node's writes wait; its
move reply how long clients were refused (the fence). The client shares the machine with the
cluster, so the numbers describe this machine as loaded at the time.
Use `--partition-mb 20` for a quick run.

So that a 1 GB partition is built in a minute or two rather than an hour of 4 KB puts, the mixed
load's items (`--item-bytes` each, collections of 64) fill only `--load-mb` of it, and the rest is
ballast: items of `--ballast-item-bytes` (380 KB by default, under DynamoDB's 400 KB item bound),
each its own item collection on keys of the same partition that the load never touches, written
by BatchWriteItem a few at a time (`BALLAST_BATCH_ITEMS`, under the 16 MB request bound). The
split halves the bytes, so the ballast is cut in two like any data; the load's p99 is that of
4 KB items. The fill prints its rate.

With `--heat` it measures split for heat instead, on a cluster that enforces throughput (1 s of
burst): `--concurrency` clients put 20 KB items (20 write units each) on many keys of one
partition for `--heat-seconds`, printing the write units per second the table served each
5 seconds and when its node split the partition; then the same clients put 100 KB items on one
key of another partition, which stays throttled at 1,000 units and does not split.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import tempfile
import time
from typing import Any

import aiohttp
import orjson

from core.keycodec import encode_storage_key
from dynalab.bench import DynamoDBClient, SigV4Signer, host_header, percentile
from dynalab.cluster import LocalCluster

TABLE = "splitbench"
TABLE_ACTIVE_TIMEOUT_S = 60.0
COLLECTION_ITEMS = 64  # Items per partition key value: Query reads one collection.
BATCH_ITEMS = 25
BALLAST_BATCH_ITEMS = 8  # 8 x 380 KB: about 3 MB a BatchWriteItem, well under its 16 MB.


def first_partition_keys(count: int) -> list[str]:
    """Partition key values whose hash falls in the first quarter of the hash space: the first of
    an on-demand table's four partitions."""
    found: list[str] = []
    number = 0
    while len(found) < count:
        value = f"k{number}"
        if encode_storage_key({"S": value}, None)[0] < 0x40:
            found.append(value)
        number += 1
    return found


def item(pk: str, sk: int, pad: str) -> dict[str, Any]:
    return {"pk": {"S": pk}, "sk": {"N": str(sk)}, "pad": {"S": pad}}


async def create_table(client: DynamoDBClient) -> None:
    await client.request(
        "CreateTable",
        {
            "TableName": TABLE,
            "KeySchema": [
                {"AttributeName": "pk", "KeyType": "HASH"},
                {"AttributeName": "sk", "KeyType": "RANGE"},
            ],
            "AttributeDefinitions": [
                {"AttributeName": "pk", "AttributeType": "S"},
                {"AttributeName": "sk", "AttributeType": "N"},
            ],
            "BillingMode": "PAY_PER_REQUEST",
        },
    )
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    while (await client.request("DescribeTable", {"TableName": TABLE}))["Table"][
        "TableStatus"
    ] != "ACTIVE":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{TABLE} not ACTIVE in {TABLE_ACTIVE_TIMEOUT_S} s")
        await asyncio.sleep(0.1)


def load_batches(keys: list[str], pad: str) -> list[list[dict[str, Any]]]:
    """The mixed load's items: COLLECTION_ITEMS per key, BATCH_ITEMS a request."""
    return [
        [item(pk, sk, pad) for sk in range(start, min(start + BATCH_ITEMS, COLLECTION_ITEMS))]
        for pk in keys
        for start in range(0, COLLECTION_ITEMS, BATCH_ITEMS)
    ]


def ballast_batches(keys: list[str], pad: str) -> list[list[dict[str, Any]]]:
    """One large item per key, BALLAST_BATCH_ITEMS a request."""
    return [
        [item(pk, 0, pad) for pk in keys[start : start + BALLAST_BATCH_ITEMS]]
        for start in range(0, len(keys), BALLAST_BATCH_ITEMS)
    ]


async def fill(
    client: DynamoDBClient, batches: list[list[dict[str, Any]]], concurrency: int
) -> None:
    queue = list(reversed(batches))

    async def worker() -> None:
        while queue:
            pending = [{"PutRequest": {"Item": entry}} for entry in queue.pop()]
            while pending:
                reply = await client.request("BatchWriteItem", {"RequestItems": {TABLE: pending}})
                pending = reply.get("UnprocessedItems", {}).get(TABLE, [])

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def admin(session: aiohttp.ClientSession, url: str, body: Any = None) -> Any:
    if body is None:
        async with session.get(url) as reply:
            return orjson.loads(await reply.read())
    async with session.post(url, data=orjson.dumps(body)) as reply:
        if reply.status != 200:
            raise RuntimeError(f"{url} refused: {reply.status} {await reply.text()}")
        return orjson.loads(await reply.read())


class Recorder:
    """(completion time, latency, ok) of every operation of the mixed load."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, float, bool]] = []

    def report(self, label: str, start: float, end: float) -> None:
        window = [s for s in self.samples if start <= s[0] < end]
        latencies = sorted(latency for _, latency, ok in window if ok)
        failed = sum(1 for _, _, ok in window if not ok)
        seconds = max(end - start, 1e-9)
        if not latencies:
            print(f"  {label:7} {seconds:6.2f} s: no operations completed ({failed} failed)")
            return
        print(
            f"  {label:7} {seconds:6.2f} s: {len(latencies) / seconds:7.0f} ops/s, "
            f"p50 {1e3 * percentile(latencies, 0.5):6.2f} ms, "
            f"p99 {1e3 * percentile(latencies, 0.99):6.2f} ms, {failed} failed"
        )


async def mixed_load(
    client: DynamoDBClient, keys: list[str], pad: str, stop: asyncio.Event, recorder: Recorder
) -> None:
    rng = random.Random(len(recorder.samples))
    while not stop.is_set():
        pk = rng.choice(keys)
        sk = rng.randrange(COLLECTION_ITEMS)
        roll = rng.random()
        started = time.monotonic()
        ok = True
        try:
            if roll < 0.6:
                await client.request(
                    "GetItem",
                    {"TableName": TABLE, "Key": {"pk": {"S": pk}, "sk": {"N": str(sk)}}},
                )
            elif roll < 0.9:
                await client.request("PutItem", {"TableName": TABLE, "Item": item(pk, sk, pad)})
            else:
                await client.request(
                    "Query",
                    {
                        "TableName": TABLE,
                        "KeyConditionExpression": "pk = :p",
                        "ExpressionAttributeValues": {":p": {"S": pk}},
                        "Limit": 10,
                    },
                )
        except Exception:  # A failed operation is counted, not retried.
            ok = False
        finished = time.monotonic()
        recorder.samples.append((finished, finished - started, ok))


async def run(args: argparse.Namespace, endpoint: str) -> None:
    connector = aiohttp.TCPConnector(limit=max(args.concurrency, 64))
    async with aiohttp.ClientSession(connector=connector) as session:
        signer = SigV4Signer("dynalab", "dynalab", "us-east-1", host_header(endpoint))
        client = DynamoDBClient(session, endpoint, signer)
        await create_table(client)
        pad = "x" * args.item_bytes
        load_mb = min(args.load_mb, args.partition_mb)
        collections = max(2, int(load_mb * 2**20 / args.item_bytes / COLLECTION_ITEMS))
        ballast_items = int((args.partition_mb - load_mb) * 2**20 / args.ballast_item_bytes)
        every_key = first_partition_keys(collections + ballast_items)
        keys, ballast_keys = every_key[:collections], every_key[collections:]
        started = time.monotonic()
        await fill(client, load_batches(keys, pad), args.concurrency)
        # Fewer at once: each request is a few MB.
        ballast = ballast_batches(ballast_keys, "x" * args.ballast_item_bytes)
        await fill(client, ballast, min(args.concurrency, 4))
        filled = time.monotonic() - started
        listing_url = f"{endpoint}/admin/tables/{TABLE}/partitions"
        listing = await admin(session, listing_url)
        partition = max(listing["partitions"], key=lambda p: p["size_bytes"] or 0)
        size_mib = partition["size_bytes"] / 2**20
        print(
            f"filled partition {partition['id']} with {size_mib:.1f} MiB "
            f"({collections * COLLECTION_ITEMS} items of {args.item_bytes} B for the load, "
            f"{ballast_items} of {args.ballast_item_bytes} B of ballast) in {filled:.1f} s "
            f"({size_mib / filled:.1f} MiB/s)"
        )
        recorder = Recorder()
        stop = asyncio.Event()
        workers = [
            asyncio.create_task(mixed_load(client, keys, pad, stop, recorder))
            for _ in range(args.concurrency)
        ]
        before = time.monotonic()
        await asyncio.sleep(args.phase_seconds)
        split_started = time.monotonic()
        reply = await admin(session, f"{listing_url}/{partition['id']}/split", {})
        split_ended = time.monotonic()
        await asyncio.sleep(args.phase_seconds)
        moved = await move_phase(session, listing_url, reply["children"], args.phase_seconds)
        stop.set()
        await asyncio.gather(*workers)
        after = time.monotonic()
        sizes = {
            p["id"]: p["size_bytes"] for p in (await admin(session, listing_url))["partitions"]
        }
        children = [
            f"{child['id'].split('-')[1]} {sizes.get(child['id'], 0) / 2**20:.1f} MiB"
            for child in reply["children"]
        ]
        print(
            f"split in {split_ended - split_started:.3f} s as the admin call saw it "
            f"({reply['seconds']:.3f} s on the node, of which the install, pausing the node's "
            f"writes, {reply['install_seconds'] * 1000:.1f} ms): {', '.join(children)}"
        )
        print(f"mixed load, {args.concurrency} clients (60% get, 30% put, 10% query):")
        recorder.report("before", before, split_started)
        recorder.report("during", split_started, split_ended)
        recorder.report("after", split_ended, moved.started)
        moved.report(recorder, after)


class Moved:
    """When a move of a split child began and ended, and the node's reply."""

    def __init__(self, started: float, ended: float, reply: dict[str, Any]) -> None:
        self.started = started
        self.ended = ended
        self.reply = reply

    def report(self, recorder: Recorder, after: float) -> None:
        partition = self.reply["partition"]
        print(
            f"moved child {partition['id'].split('-')[1]} from {self.reply['from']} to "
            f"{partition['node']} in {self.ended - self.started:.3f} s as the admin call saw it "
            f"({self.reply['seconds']:.3f} s on the node, {self.reply['items']} items copied, "
            f"{self.reply['records']} writes caught up; clients refused for "
            f"{self.reply['fenced_seconds'] * 1000:.1f} ms)"
        )
        recorder.report("moving", self.started, self.ended)
        recorder.report("moved", self.ended, after)


async def move_phase(
    session: aiohttp.ClientSession, listing_url: str, children: list[dict[str, Any]], wait: float
) -> Moved:
    """Move the split's larger child to another node (`POST .../move`) under the same load, then
    keep the load on for `wait` seconds."""
    sizes = {p["id"]: p for p in (await admin(session, listing_url))["partitions"]}
    child = max((sizes[c["id"]] for c in children), key=lambda p: p["size_bytes"] or 0)
    nodes = sorted({p["node"] for p in sizes.values()} | {"node-1", "node-2", "node-3"})
    target = next(node for node in nodes if node != child["node"])
    started = time.monotonic()
    reply = await admin(session, f"{listing_url}/{child['id']}/move", {"Node": target})
    ended = time.monotonic()
    await asyncio.sleep(wait)
    return Moved(started, ended, reply)


async def heat_phase(
    client: DynamoDBClient,
    session: aiohttp.ClientSession,
    endpoint: str,
    keys: list[str],
    pad: str,
    seconds: float,
    concurrency: int,
) -> None:
    """Put `pad` items on `keys` for `seconds`; print units served per 5 s and the splits."""
    units = (len(pad) + 1023) // 1024
    served: list[float] = []  # Completion times of acknowledged puts.
    throttled = 0
    stop = asyncio.Event()

    async def writer(number: int) -> None:
        nonlocal throttled
        count = number
        while not stop.is_set():
            request = {"TableName": TABLE, "Item": item(keys[count % len(keys)], 0, pad)}
            count += concurrency
            try:
                await client.request("PutItem", request)
            except Exception:  # Throttled (ProvisionedThroughputExceeded): counted.
                throttled += 1
                continue
            served.append(time.monotonic())

    started = time.monotonic()
    tasks = [asyncio.create_task(writer(n)) for n in range(concurrency)]
    listing_url = f"{endpoint}/admin/tables/{TABLE}/partitions"
    step = 5.0
    for window in range(int(seconds / step)):
        await asyncio.sleep(step)
        low, high = started + window * step, started + (window + 1) * step
        count = sum(1 for at in served if low <= at < high)
        serving = [
            p for p in (await admin(session, listing_url))["partitions"] if p["state"] == "SERVING"
        ]
        print(
            f"  {high - started:5.1f} s: {count * units / step:7.0f} write units/s served, "
            f"{len(serving)} serving partitions"
        )
    stop.set()
    await asyncio.gather(*tasks)
    print(f"  {throttled} puts throttled in {seconds:.0f} s")


async def run_heat(args: argparse.Namespace, endpoint: str) -> None:
    async with aiohttp.ClientSession() as session:
        signer = SigV4Signer("dynalab", "dynalab", "us-east-1", host_header(endpoint))
        client = DynamoDBClient(session, endpoint, signer)
        await create_table(client)
        keys = first_partition_keys(400)
        print(
            f"20 KB puts spread over {len(keys)} keys of one partition, {args.concurrency} clients:"
        )
        await heat_phase(
            client, session, endpoint, keys, "x" * 20_000, args.heat_seconds, args.concurrency
        )
        hot = next(
            k
            for k in (f"hot{n}" for n in range(1000))
            if k not in keys and encode_storage_key({"S": k}, None)[0] >= 0x80
        )
        print(f"100 KB puts on one key ({hot}), {args.concurrency} clients:")
        await heat_phase(
            client, session, endpoint, [hot], "x" * 100_000, args.heat_seconds, args.concurrency
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--partition-mb", type=float, default=1024.0, help="size to fill, MiB")
    parser.add_argument("--item-bytes", type=int, default=4000, help="padding per item")
    parser.add_argument("--load-mb", type=float, default=16.0, help="MiB of the load's items")
    parser.add_argument(
        "--ballast-item-bytes", type=int, default=380_000, help="padding per ballast item"
    )
    parser.add_argument("--phase-seconds", type=float, default=10.0, help="before and after")
    parser.add_argument("--concurrency", type=int, default=16, help="clients")
    parser.add_argument("--heat", action="store_true", help="measure split for heat instead")
    parser.add_argument("--heat-seconds", type=float, default=40.0, help="each heat phase")
    args = parser.parse_args()
    cpu = time.process_time()
    os.environ["DYNALAB_THROTTLING"] = "on" if args.heat else "off"
    os.environ["DYNALAB_MOVE_SPLIT_CHILDREN"] = "off"  # The one move is `move_phase`'s.
    if args.heat:
        os.environ["DYNALAB_BURST_SECONDS"] = "1"
    with tempfile.TemporaryDirectory() as data, LocalCluster(data, nodes=3, routers=1) as cluster:
        asyncio.run((run_heat if args.heat else run)(args, cluster.router_url))
    print(f"bench client CPU: {time.process_time() - cpu:.1f} s")


if __name__ == "__main__":
    main()
