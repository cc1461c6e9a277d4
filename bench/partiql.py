"""PartiQL, measured: a key SELECT through ExecuteStatement against the same read as a GetItem.

    python bench/partiql.py [--seconds 3] [--concurrency 8] [--items 1000] [--rounds 6]

Starts its own local cluster (3 storage nodes, 1 router, throughput enforcement off) with one
on-demand table of `--items` items of about 100 bytes, then alternates, `--rounds` times, a run of
GetItem by key and a run of `SELECT * FROM "bench-partiql" WHERE pk = ?` with the key as its
parameter, each for `--seconds` with `--concurrency` clients reading random keys. It prints each
run's requests/s, p50/p99 latency and the router's CPU microseconds per request (from /proc),
then the medians: requests/s of each kind, the median over rounds of SELECT's rate divided by
GetItem's in the same round, and the router's CPU per request of each. That is what running
PartiQL costs over the operation it plans into (`core.partiql`: the statement is parsed once per
distinct text, then each call plans and runs a GetItem). On a shared machine throughput follows
the other load, and alternating short runs spreads it over both kinds; the router's CPU per
request moves less. Figures are not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dynalab import bench  # noqa: E402
from dynalab.cluster import LocalCluster  # noqa: E402

TABLE = "bench-partiql"
STATEMENT = f'SELECT * FROM "{TABLE}" WHERE {bench.PK} = ?'
PRELOAD_CONCURRENCY = 16
CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")

Request = Callable[[random.Random, int], tuple[str, dict[str, Any]]]


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        # The command name (field 2) may hold spaces; the fields after its ")" are fixed.
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_SECOND


def key_value(number: int) -> dict[str, str]:
    return {"S": f"item{number}"}


def get_item(rng: random.Random, items: int) -> tuple[str, dict[str, Any]]:
    return "GetItem", {"TableName": TABLE, "Key": {bench.PK: key_value(rng.randrange(items))}}


def select(rng: random.Random, items: int) -> tuple[str, dict[str, Any]]:
    return "ExecuteStatement", {
        "Statement": STATEMENT,
        "Parameters": [key_value(rng.randrange(items))],
    }


async def run(
    client: bench.DynamoDBClient,
    make: Request,
    args: argparse.Namespace,
    router_pid: int,
) -> tuple[float, float, float, float]:
    """(requests/s, p50 ms, p99 ms, router CPU µs per request) of `args.concurrency` clients
    issuing `make`'s request for `args.seconds`."""
    seconds, items = args.seconds, args.items
    latencies: list[float] = []
    errors: dict[str, int] = {}
    deadline = time.monotonic() + seconds

    async def reader(number: int) -> None:
        rng = random.Random(number)
        while time.monotonic() < deadline:
            operation, request = make(rng, items)
            started = time.perf_counter()
            status, body = await client.call(operation, request)
            if status == 200:
                latencies.append((time.perf_counter() - started) * 1000)
            else:
                error = bench.error_type(status, body)
                errors[error] = errors.get(error, 0) + 1

    cpu_before = process_cpu_seconds(router_pid)
    await asyncio.gather(*(reader(number) for number in range(args.concurrency)))
    cpu_seconds = process_cpu_seconds(router_pid) - cpu_before
    if errors:
        raise RuntimeError(f"requests failed: {errors}")
    latencies.sort()
    return (
        len(latencies) / seconds,
        bench.percentile(latencies, 0.50),
        bench.percentile(latencies, 0.99),
        cpu_seconds * 1e6 / len(latencies),
    )


async def setup(client: bench.DynamoDBClient, items: int) -> None:
    await client.request(
        "CreateTable",
        {
            "TableName": TABLE,
            "KeySchema": [{"AttributeName": bench.PK, "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": bench.PK, "AttributeType": "S"}],
            "BillingMode": "PAY_PER_REQUEST",
        },
    )
    deadline = time.monotonic() + bench.TABLE_ACTIVE_TIMEOUT_S
    while (await client.request("DescribeTable", {"TableName": TABLE}))["Table"][
        "TableStatus"
    ] != "ACTIVE":
        if time.monotonic() > deadline:
            raise RuntimeError(f"{TABLE} did not become ACTIVE")
        await asyncio.sleep(0.1)
    numbers = iter(range(items))

    async def loader() -> None:
        for number in numbers:
            item = {bench.PK: key_value(number), "v": {"S": "x" * 100}}
            await client.request("PutItem", {"TableName": TABLE, "Item": item})

    await asyncio.gather(*(loader() for _ in range(PRELOAD_CONCURRENCY)))


async def measure(endpoint: str, router_pid: int, args: argparse.Namespace) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        signer = bench.SigV4Signer(
            bench.DUMMY_ACCESS_KEY, bench.DUMMY_SECRET_KEY, "us-east-1", bench.host_header(endpoint)
        )
        client = bench.DynamoDBClient(session, endpoint, signer)
        await setup(client, args.items)
        kinds: list[tuple[str, Request]] = [("GetItem", get_item), ("SELECT by key", select)]
        rates: dict[str, list[float]] = {label: [] for label, _ in kinds}
        cpu: dict[str, list[float]] = {label: [] for label, _ in kinds}
        print(f"{args.concurrency} clients, {args.seconds:.0f} s per run, {args.items} items")
        for round_number in range(1, args.rounds + 1):
            for label, make in kinds:
                rate, p50, p99, cpu_us = await run(client, make, args, router_pid)
                rates[label].append(rate)
                cpu[label].append(cpu_us)
                print(
                    f"  round {round_number}  {label:<14} {rate:8.1f} /s   p50 {p50:6.1f} ms"
                    f"   p99 {p99:6.1f} ms   router {cpu_us:6.0f} µs CPU per request"
                )
        ratios = [
            select_rate / get_rate
            for get_rate, select_rate in zip(rates["GetItem"], rates["SELECT by key"], strict=True)
        ]
        get_cpu = statistics.median(cpu["GetItem"])
        select_cpu = statistics.median(cpu["SELECT by key"])
        print(
            f"median: GetItem {statistics.median(rates['GetItem']):.1f} /s, SELECT by key "
            f"{statistics.median(rates['SELECT by key']):.1f} statements/s; SELECT/GetItem in the "
            f"same round {statistics.median(ratios):.0%}; router CPU per request: GetItem "
            f"{get_cpu:.0f} µs, SELECT {select_cpu:.0f} µs ({select_cpu / get_cpu - 1:+.0%})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--items", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=6)
    args = parser.parse_args()
    # Throughput is not what is measured here: nothing is metered.
    os.environ["DYNALAB_THROTTLING"] = "off"
    with (
        tempfile.TemporaryDirectory(prefix="dynalab-bench-partiql-") as directory,
        LocalCluster(Path(directory), nodes=3, routers=1) as cluster,
    ):
        router_pid = cluster.routers[0].pid
        assert router_pid is not None, "the cluster's router runs"
        uvloop.run(measure(cluster.router_url, router_pid, args))


if __name__ == "__main__":
    main()
