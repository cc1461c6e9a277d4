"""What local secondary indexes cost on the put path: put ops/s with 0, 1 and 5 LSIs, same run.

    python bench/lsi.py [--seconds 5] [--runs 3] [--concurrency 32] [--item-size 200]
                        [--projection ALL|KEYS_ONLY]

Starts its own local cluster (3 storage nodes, 1 router, throughput enforcement off) and three
on-demand tables with the same key schema: one without local indexes, one with one, one with five
(each on its own sort key attribute, all with `--projection`). Every put carries every index's
sort key attribute, so each put writes one entry per index in its own write batch. The tables are
loaded in turn, `--runs` times, alternating, by `--concurrency` writers of new items spread over
many partition keys, with `dynalab bench`'s own client (no retries); it prints each table's median
put ops/s and its cost relative to the table without indexes. Numbers depend on the machine and
on what else runs on it: quote them with their conditions.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dynalab import bench  # noqa: E402
from dynalab.cluster import LocalCluster  # noqa: E402

INDEX_COUNTS = (0, 1, 5)
PARTITION_KEYS = 10_000


def table_request(name: str, indexes: int, projection: str) -> dict[str, Any]:
    definitions = [
        {"AttributeName": "pk", "AttributeType": "S"},
        {"AttributeName": "sk", "AttributeType": "S"},
        *({"AttributeName": f"lsk{i}", "AttributeType": "S"} for i in range(indexes)),
    ]
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": [
            {"AttributeName": "pk", "KeyType": "HASH"},
            {"AttributeName": "sk", "KeyType": "RANGE"},
        ],
        "AttributeDefinitions": definitions,
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        request["LocalSecondaryIndexes"] = [
            {
                "IndexName": f"index{i}",
                "KeySchema": [
                    {"AttributeName": "pk", "KeyType": "HASH"},
                    {"AttributeName": f"lsk{i}", "KeyType": "RANGE"},
                ],
                "Projection": {"ProjectionType": projection},
            }
            for i in range(indexes)
        ]
    return request


async def create_table(client: bench.DynamoDBClient, request: dict[str, Any]) -> None:
    await client.request("CreateTable", request)
    deadline = time.monotonic() + bench.TABLE_ACTIVE_TIMEOUT_S
    while (await client.request("DescribeTable", {"TableName": request["TableName"]}))["Table"][
        "TableStatus"
    ] != "ACTIVE":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{request['TableName']} did not become ACTIVE")
        await asyncio.sleep(bench.TABLE_POLL_INTERVAL_S)


async def put_load(
    client: bench.DynamoDBClient, table: str, args: argparse.Namespace, sequence: itertools.count
) -> tuple[float, int]:
    """Put new items from `args.concurrency` writers for `args.seconds`: (ops/s, errors)."""
    padding = "x" * max(0, args.item_size - 60)
    end = time.monotonic() + args.seconds
    done = errors = 0

    async def writer() -> None:
        nonlocal done, errors
        while time.monotonic() < end:
            number = next(sequence)
            item = {
                "pk": {"S": f"p{number % PARTITION_KEYS}"},
                "sk": {"S": f"s{number}"},
                "pad": {"S": padding},
                **{f"lsk{i}": {"S": f"{(number * (i + 7)) % 9973:06d}"} for i in range(5)},
            }
            status, _ = await client.call("PutItem", {"TableName": table, "Item": item})
            if status == 200:
                done += 1
            else:
                errors += 1

    started = time.monotonic()
    await asyncio.gather(*(writer() for _ in range(args.concurrency)))
    return done / (time.monotonic() - started), errors


async def measure(endpoint: str, args: argparse.Namespace) -> dict[int, list[float]]:
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=30)
    results: dict[int, list[float]] = {count: [] for count in INDEX_COUNTS}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        signer = bench.SigV4Signer(
            bench.DUMMY_ACCESS_KEY,
            bench.DUMMY_SECRET_KEY,
            "us-east-1",
            bench.host_header(endpoint),
        )
        client = bench.DynamoDBClient(session, endpoint, signer)
        for count in INDEX_COUNTS:
            await create_table(client, table_request(f"lsi-{count}", count, args.projection))
        sequence = itertools.count()
        for run in range(args.runs):
            for count in INDEX_COUNTS:
                ops, errors = await put_load(client, f"lsi-{count}", args, sequence)
                results[count].append(ops)
                print(
                    f"run {run + 1}, {count} LSI{'s' if count != 1 else ''}: "
                    f"{ops:8,.0f} puts/s, {errors} errors",
                    flush=True,
                )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=5.0, help="measured window per load")
    parser.add_argument("--runs", type=int, default=3, help="alternating rounds over the tables")
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--item-size", type=int, default=200, help="approximate item bytes")
    parser.add_argument("--projection", choices=("ALL", "KEYS_ONLY"), default="ALL")
    args = parser.parse_args()
    os.environ["DYNALAB_THROTTLING"] = "off"
    with (
        tempfile.TemporaryDirectory(prefix="dynalab-lsi-") as scratch,
        LocalCluster(Path(scratch), nodes=3, routers=1) as cluster,
    ):
        print(f"cluster at {cluster.router_url}", flush=True)
        results = uvloop.run(measure(cluster.router_url, args))
    base = statistics.median(results[0])
    print()
    print(
        f"put ops/s, median of {args.runs} runs of {args.seconds:g} s, "
        f"projection {args.projection}:"
    )
    for count in INDEX_COUNTS:
        median = statistics.median(results[count])
        print(f"  {count} LSIs: {median:8,.0f} puts/s  ({median / base - 1:+.0%} against 0 LSIs)")


if __name__ == "__main__":
    main()
