"""Per-partition throughput, measured: what a hot key gets, what a spread load gets, and what
enforcement costs.

    python bench/throttling.py [--seconds 10] [--warmup 3] [--burst-seconds 1] [--concurrency 32]
                               [--mixed-seconds 10] [--mixed-runs 3] [--skip-mixed]

Starts its own local cluster (3 storage nodes, 1 router) with throughput enforcement on and a short
burst bank (`--burst-seconds`, set as the nodes' DYNALAB_BURST_SECONDS: a new partition starts with
a full bank, which DynamoDB's 300 s would make a 30,000-unit head start for a 100 WCU table, so
the sustained ceiling could only be seen minutes later), and measures with `dynalab bench`'s own
client, which never retries (the SDKs' backoff is exactly what must be off to see the server's
limit):

1. a PAY_PER_REQUEST table, every write to one partition key, 1 KB items (1 WCU each): once the
   first `--warmup` seconds have spent whatever the new partition held, the sustained write rate
   should be the partition cap, 1,000 WCU, within 5%;
2. the same against a PROVISIONED table of 100 WCU (one partition): 100 WCU, within 5%;
3. the same offered load spread over many keys, so over every partition of the on-demand table:
   not throttled at all.

Write units are summed from the ConsumedCapacity of the successful replies, so they are the
server's own count. Then it starts a second cluster with enforcement off (DYNALAB_THROTTLING=off)
and runs the 50/50 get/put mix of `dynalab bench --workload mixed --concurrency 32` against each
cluster in turn, `--mixed-runs` times, and prints the median ops/s of each and the difference
(enforcement should cost at most 10%).
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
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import uvloop
from rich.console import Console

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dynalab import bench  # noqa: E402
from dynalab.cluster import LocalCluster  # noqa: E402

PAYLOAD_BYTES = 1000  # With the key and attribute names, an item of 1,009 bytes: one write unit.
SPREAD_KEYS = 100_000
CEILING_TOLERANCE = 0.05  # How far a sustained rate may be from its ceiling.
OVERHEAD_TOLERANCE = 0.10  # How much slower the mixed load may be with enforcement on.


@dataclass(frozen=True)
class Rate:
    """What a write load got from the server over the measured window."""

    label: str
    seconds: float
    ok: int
    throttled: int
    other_errors: int
    write_units: float

    @property
    def wcu_per_s(self) -> float:
        return self.write_units / self.seconds

    @property
    def offered_per_s(self) -> float:
        return (self.ok + self.throttled + self.other_errors) / self.seconds

    def line(self) -> str:
        return (
            f"{self.label:44} {self.wcu_per_s:8,.0f} WCU/s consumed  "
            f"{self.ok / self.seconds:8,.0f} ok/s  {self.throttled / self.seconds:8,.0f} "
            f"throttled/s  ({self.offered_per_s:,.0f} requests/s offered, "
            f"{self.other_errors} other errors)"
        )


def client_for(session: aiohttp.ClientSession, endpoint: str) -> bench.DynamoDBClient:
    signer = bench.SigV4Signer(
        bench.DUMMY_ACCESS_KEY, bench.DUMMY_SECRET_KEY, "us-east-1", bench.host_header(endpoint)
    )
    return bench.DynamoDBClient(session, endpoint, signer)


async def create_table(client: bench.DynamoDBClient, name: str, billing: dict[str, Any]) -> None:
    await client.request(
        "CreateTable",
        {
            "TableName": name,
            "KeySchema": [{"AttributeName": bench.PK, "KeyType": "HASH"}],
            "AttributeDefinitions": [{"AttributeName": bench.PK, "AttributeType": "S"}],
            **billing,
        },
    )
    deadline = time.monotonic() + bench.TABLE_ACTIVE_TIMEOUT_S
    while (await client.request("DescribeTable", {"TableName": name}))["Table"][
        "TableStatus"
    ] != "ACTIVE":
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name} did not become ACTIVE")
        await asyncio.sleep(bench.TABLE_POLL_INTERVAL_S)


async def write_load(
    client: bench.DynamoDBClient,
    label: str,
    table: str,
    *,
    hot_key: bool,
    concurrency: int,
    warmup_s: float,
    seconds: float,
) -> Rate:
    """`concurrency` writers putting back to back; count only the window after the warm-up."""
    payload = {"S": "x" * PAYLOAD_BYTES}
    rng = random.Random(1)
    started = time.monotonic()
    window_start = started + warmup_s
    window_end = window_start + seconds
    counts = {"ok": 0, "throttled": 0, "other": 0}
    units = 0.0

    async def writer() -> None:
        nonlocal units
        while True:
            sent = time.monotonic()
            if sent >= window_end:
                return
            key = "hot" if hot_key else f"k{rng.randrange(SPREAD_KEYS)}"
            request = {
                "TableName": table,
                "Item": {bench.PK: {"S": key}, bench.PAYLOAD: payload},
                "ReturnConsumedCapacity": "TOTAL",
            }
            try:
                status, body = await client.call("PutItem", request)
            except (aiohttp.ClientError, TimeoutError):
                status, body = 0, b""
            if sent < window_start:
                continue
            if status == 200:
                counts["ok"] += 1
                units += orjson.loads(body)["ConsumedCapacity"]["CapacityUnits"]
            elif bench.error_type(status, body) in bench.THROTTLING_TYPES:
                counts["throttled"] += 1
            else:
                counts["other"] += 1

    await asyncio.gather(*(writer() for _ in range(concurrency)))
    return Rate(label, seconds, counts["ok"], counts["throttled"], counts["other"], units)


async def throttling_scenarios(endpoint: str, args: argparse.Namespace) -> list[Rate]:
    connector = aiohttp.TCPConnector(limit=args.concurrency)
    timeout = aiohttp.ClientTimeout(total=bench.REQUEST_TIMEOUT_S)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        client = client_for(session, endpoint)
        on_demand = {"BillingMode": "PAY_PER_REQUEST"}
        provisioned = {"ProvisionedThroughput": {"ReadCapacityUnits": 1, "WriteCapacityUnits": 100}}
        rates = []
        for label, table, billing, hot in (
            ("1. on-demand, one partition key", "throttle-hot", on_demand, True),
            ("2. provisioned 100 WCU, one partition key", "throttle-100", provisioned, True),
            ("3. on-demand, keys over every partition", "throttle-spread", on_demand, False),
        ):
            await create_table(client, table, billing)
            rate = await write_load(
                client,
                label,
                table,
                hot_key=hot,
                concurrency=args.concurrency,
                warmup_s=args.warmup,
                seconds=args.seconds,
            )
            print(rate.line(), flush=True)
            rates.append(rate)
        return rates


def mixed_run(endpoint: str, seconds: float, table: str) -> bench.BenchResult:
    config = bench.BenchConfig(
        endpoint=endpoint,
        workload="mixed",
        concurrency=32,
        duration_s=seconds,
        table=table,
    )
    return bench.run(config, Console(quiet=True))


def verdict(ok: bool) -> str:
    return "ok" if ok else "MISSED"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="measured window per load")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument(
        "--burst-seconds", type=float, default=1.0, help="the enforcing nodes' burst bank"
    )
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--mixed-seconds", type=float, default=10.0)
    parser.add_argument("--mixed-runs", type=int, default=3)
    parser.add_argument("--skip-mixed", action="store_true")
    args = parser.parse_args()

    if args.warmup <= args.burst_seconds:
        parser.error("--warmup must be longer than --burst-seconds, to spend the initial bank")
    os.environ["DYNALAB_BURST_SECONDS"] = str(args.burst_seconds)
    with tempfile.TemporaryDirectory(prefix="dynalab-throttling-") as scratch:
        os.environ["DYNALAB_THROTTLING"] = "on"
        with LocalCluster(Path(scratch) / "on", nodes=3, routers=1) as enforcing:
            print(f"cluster enforcing throughput at {enforcing.router_url}", flush=True)
            rates = uvloop.run(throttling_scenarios(enforcing.router_url, args))
            hot, provisioned, spread = rates
            print()
            print(
                f"1. hot key, on-demand: {hot.wcu_per_s:,.0f} WCU/s vs 1,000 "
                f"({hot.wcu_per_s / 1000 - 1:+.1%}): "
                f"{verdict(abs(hot.wcu_per_s / 1000 - 1) <= CEILING_TOLERANCE)}"
            )
            print(
                f"2. hot key, provisioned 100 WCU: {provisioned.wcu_per_s:,.0f} WCU/s vs 100 "
                f"({provisioned.wcu_per_s / 100 - 1:+.1%}): "
                f"{verdict(abs(provisioned.wcu_per_s / 100 - 1) <= CEILING_TOLERANCE)}"
            )
            print(
                f"3. spread keys, on-demand: {spread.wcu_per_s:,.0f} WCU/s, "
                f"{spread.throttled} throttled: {verdict(spread.throttled == 0)}"
            )
            if args.skip_mixed:
                return
            os.environ["DYNALAB_THROTTLING"] = "off"
            with LocalCluster(Path(scratch) / "off", nodes=3, routers=1) as free:
                print(f"\ncluster with enforcement off at {free.router_url}", flush=True)
                results: dict[str, list[float]] = {"on": [], "off": []}
                for run in range(args.mixed_runs):
                    for mode, cluster in (("on", enforcing), ("off", free)):
                        result = mixed_run(cluster.router_url, args.mixed_seconds, "mixed")
                        results[mode].append(result.ops_per_s)
                        print(
                            f"mixed run {run + 1}, buckets {mode:3}: {result.ops_per_s:8,.0f} "
                            f"ops/s, errors {result.errors or 0}",
                            flush=True,
                        )
        on, off = statistics.median(results["on"]), statistics.median(results["off"])
        print(
            f"\nmixed 50/50 get/put, concurrency 32: buckets on {on:,.0f} ops/s, off "
            f"{off:,.0f} ops/s (median of {args.mixed_runs}): {on / off - 1:+.1%}: "
            f"{verdict(on >= off * (1 - OVERHEAD_TOLERANCE))}"
        )


if __name__ == "__main__":
    main()
