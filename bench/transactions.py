"""Transactions, measured: TransactWriteItems of 2 and of 10 items across nodes, and what they do
to single-item writes running beside them.

    python bench/transactions.py [--seconds 10] [--concurrency 8] [--accounts 1000]

Starts its own local cluster (3 storage nodes, 1 router, throughput enforcement off) with one
on-demand table (four partitions spread over the nodes), then runs, each for `--seconds`:

1. single-item PutItems alone (`--concurrency` writers): the baseline;
2. 2-item transactions alone: each moves an amount between two random accounts (an Update with
   a condition and an Update), so most touch two partitions, usually on two nodes;
3. 10-item transactions alone: ten random accounts, each `ADD n :one`;
4. 2-item transactions and single-item PutItems together, half the writers each;
5. 5-item TransactGetItems beside single-item PutItems to other items of the same partitions,
   half the clients each: how often a busy partition cancels a TransactGetItems (a
   TransactionConflict) although none of its items was written.

(`--only N` runs run N alone.)

and prints, per run and per kind of request, the requests/s that succeeded, the cancellations
(TransactionCanceledException, mostly conflicts between transactions on the same accounts) and
p50/p99 latency of the successful ones. Figures depend heavily on the machine and on what else
runs on it; they are not a pass/fail test.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dynalab import bench  # noqa: E402
from dynalab.cluster import LocalCluster  # noqa: E402

TABLE = "bench-transactions"
SINGLE_KEYS = 100_000


@dataclass
class Tally:
    """Successful requests' latencies and the failures, by error type, of one kind of request."""

    latencies_ms: list[float] = field(default_factory=list)
    errors: dict[str, int] = field(default_factory=dict)

    def line(self, label: str, seconds: float) -> str:
        done = len(self.latencies_ms)
        if done == 0:
            return f"  {label:<22} no request succeeded; errors {self.errors}"
        latencies = sorted(self.latencies_ms)
        p50 = bench.percentile(latencies, 0.50)
        p99 = bench.percentile(latencies, 0.99)
        cancelled = self.errors.get("TransactionCanceledException", 0)
        others = {k: v for k, v in self.errors.items() if k != "TransactionCanceledException"}
        return (
            f"  {label:<22} {done / seconds:8.1f} /s   p50 {p50:6.1f} ms   p99 {p99:6.1f} ms"
            f"   cancelled {cancelled}" + (f"   errors {others}" if others else "")
        )


def client_for(session: aiohttp.ClientSession, endpoint: str) -> bench.DynamoDBClient:
    signer = bench.SigV4Signer(
        bench.DUMMY_ACCESS_KEY, bench.DUMMY_SECRET_KEY, "us-east-1", bench.host_header(endpoint)
    )
    return bench.DynamoDBClient(session, endpoint, signer)


def account(number: int) -> dict[str, Any]:
    return {bench.PK: {"S": f"acct{number}"}}


def transfer(rng: random.Random, accounts: int) -> tuple[str, dict[str, Any]]:
    source, target = rng.sample(range(accounts), 2)
    value = {":a": {"N": "1"}}
    items = [
        {
            "Update": {
                "TableName": TABLE,
                "Key": account(source),
                "UpdateExpression": "SET balance = balance - :a",
                "ConditionExpression": "balance >= :a",
                "ExpressionAttributeValues": value,
            }
        },
        {
            "Update": {
                "TableName": TABLE,
                "Key": account(target),
                "UpdateExpression": "SET balance = balance + :a",
                "ExpressionAttributeValues": value,
            }
        },
    ]
    return "TransactWriteItems", {"TransactItems": items}


def ten_adds(rng: random.Random, accounts: int) -> tuple[str, dict[str, Any]]:
    items = [
        {
            "Update": {
                "TableName": TABLE,
                "Key": account(number),
                "UpdateExpression": "ADD n :one",
                "ExpressionAttributeValues": {":one": {"N": "1"}},
            }
        }
        for number in rng.sample(range(accounts), 10)
    ]
    return "TransactWriteItems", {"TransactItems": items}


def single_put(rng: random.Random, accounts: int) -> tuple[str, dict[str, Any]]:
    key = {bench.PK: {"S": f"single{rng.randrange(SINGLE_KEYS)}"}}
    return "PutItem", {"TableName": TABLE, "Item": {**key, "v": {"S": "x" * 100}}}


def five_gets(rng: random.Random, accounts: int) -> tuple[str, dict[str, Any]]:
    items = [
        {"Get": {"TableName": TABLE, "Key": account(number)}}
        for number in rng.sample(range(accounts), 5)
    ]
    return "TransactGetItems", {"TransactItems": items}


Request = Callable[[random.Random, int], tuple[str, dict[str, Any]]]


async def load(
    client: bench.DynamoDBClient,
    writers: list[tuple[str, Request]],
    seconds: float,
    accounts: int,
) -> dict[str, Tally]:
    """Run every writer back to back for `seconds`; a tally per label."""
    tallies: dict[str, Tally] = {label: Tally() for label, _ in writers}
    deadline = time.monotonic() + seconds

    async def writer(number: int, label: str, make: Request) -> None:
        rng = random.Random(number)
        tally = tallies[label]
        while time.monotonic() < deadline:
            operation, request = make(rng, accounts)
            started = time.perf_counter()
            status, body = await client.call(operation, request)
            if status == 200:
                tally.latencies_ms.append((time.perf_counter() - started) * 1000)
            else:
                error = bench.error_type(status, body)
                tally.errors[error] = tally.errors.get(error, 0) + 1

    await asyncio.gather(
        *(writer(number, label, make) for number, (label, make) in enumerate(writers))
    )
    return tallies


async def setup(client: bench.DynamoDBClient, accounts: int) -> None:
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
            raise TimeoutError(f"{TABLE} did not become ACTIVE")
        await asyncio.sleep(bench.TABLE_POLL_INTERVAL_S)

    async def open_range(numbers: range) -> None:
        for number in numbers:
            item = {**account(number), "balance": {"N": "1000000"}}
            await client.request("PutItem", {"TableName": TABLE, "Item": item})

    step = max(1, accounts // 16)
    await asyncio.gather(
        *(open_range(range(s, min(s + step, accounts))) for s in range(0, accounts, step))
    )


async def measure(endpoint: str, args: argparse.Namespace) -> None:
    connector = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        client = client_for(session, endpoint)
        await setup(client, args.accounts)
        concurrency = args.concurrency
        half = max(1, concurrency // 2)
        runs: list[tuple[str, list[tuple[str, Request]]]] = [
            ("single-item PutItem alone", [("PutItem", single_put)] * concurrency),
            ("2-item transactions alone", [("TransactWriteItems x2", transfer)] * concurrency),
            ("10-item transactions alone", [("TransactWriteItems x10", ten_adds)] * concurrency),
            (
                "2-item transactions beside PutItem",
                [("TransactWriteItems x2", transfer)] * half + [("PutItem", single_put)] * half,
            ),
            (
                "5-item TransactGetItems beside PutItem",
                [("TransactGetItems x5", five_gets)] * half + [("PutItem", single_put)] * half,
            ),
        ]
        if args.only is not None:
            runs = [runs[args.only - 1]]
        for title, writers in runs:
            tallies = await load(client, writers, args.seconds, args.accounts)
            print(f"{title} ({len(writers)} writers, {args.seconds:.0f} s):")
            for label, tally in tallies.items():
                print(tally.line(label, args.seconds))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--accounts", type=int, default=1000)
    parser.add_argument("--only", type=int, choices=range(1, 6), help="run only this run")
    args = parser.parse_args()
    # Throughput is not what is measured here: nothing is metered.
    os.environ["DYNALAB_THROTTLING"] = "off"
    with (
        tempfile.TemporaryDirectory(prefix="dynalab-bench-txn-") as directory,
        LocalCluster(Path(directory), nodes=3, routers=1) as cluster,
    ):
        uvloop.run(measure(cluster.router_url, args))


if __name__ == "__main__":
    main()
