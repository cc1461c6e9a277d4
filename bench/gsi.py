"""Benchmark global secondary indexes on a local cluster: propagation lag and the cost to base puts.

    python bench/gsi.py [--rate 1000] [--seconds 5] [--concurrency 32] [--backfill-items 200000]
                        [--replicators 1] [--cost-rate 300] [--idle-probes 300]
                        [--runs lag,throughput,cost,backfill]

It starts its own cluster (3 nodes, 1 router, `--replicators` GSI replicators sharing the
partitions through leases, throttling off, in a temporary directory) and prints what `--runs`
names (all by default):

1. Propagation lag (`lag`), idle and at a fixed write rate: once the replicator follows the new
   table (a warm-up probe is visible), `--idle-probes` probes are written one at a time on the
   otherwise idle cluster, the next once the last was seen; then puts are issued on a schedule of
   `--rate` per second for `--seconds`, one put in `--probe-every` a probe. A probe is an item
   whose index partition key is unique, and a reader polls the index for it every `--poll-ms`
   from the moment the put was acknowledged. The lag is the time from the acknowledgement to the
   first Query that returns the entry: p50, p99 and max (resolution: the poll interval, plus a
   Query's own time). Beside it, the replicator's own histograms (`dynalab_gsi_feed_seconds`,
   `dynalab_gsi_propagation_seconds`, from the change's commit on its node) split the time
   into the part before the replicator has the change and the part after, as p50 and p99
   bucket bounds and means.
2. Base put throughput (`throughput`) with 0, 1 and 3 GSIs, same run: `--concurrency` workers
   put as fast as they can for `--seconds` into a table with that many indexes.
3. The cluster's CPU per put (`cost`) with 0, 1 and 3 GSIs at a fixed rate (`--cost-rate`
   puts/s, below what the machine saturates at, for `--seconds`): the CPU seconds each service
   process spent (Linux `/proc/<pid>/stat`, user and system) over the puts acknowledged, in
   microseconds. On a shared machine the throughputs above move with the neighbours' load; the
   work per put moves far less, so this is the figure to compare builds by.
4. Backfill rate (`backfill`): `--backfill-items` items (default 200,000; 0 skips it) are loaded
   with BatchWriteItem into a table with no index, a GSI is added by UpdateTable, and the time
   from that call to DescribeTable showing the index ACTIVE gives items per second; a Scan of the
   index then counts its entries, which must equal the items loaded.

The client is `dynalab.bench`'s (aiohttp, its own SigV4 signer) and shares the machine with the
cluster, so the numbers describe this machine as loaded at the time; it prints its own CPU time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from typing import Any

import aiohttp

from dynalab.bench import DynamoDBClient, SigV4Signer, host_header, percentile
from dynalab.cluster import LocalCluster

TABLE_ACTIVE_TIMEOUT_S = 60.0
BACKFILL_TIMEOUT_S = 1800.0  # 200,000 items at the goal's 20,000/s take 10 s; a slow run, minutes.
BATCH_ITEMS_MAX = 25  # BatchWriteItem's limit.
LAG_WAIT_S_MAX = 10.0  # A probe not visible after this long counts as lost (reported).
COST_SETTLE_S = 1.0  # After the last put of a cost run, for the replicator to finish its work.


def index(name: str, attribute: str) -> dict[str, Any]:
    return {
        "IndexName": name,
        "KeySchema": [{"AttributeName": attribute, "KeyType": "HASH"}],
        "Projection": {"ProjectionType": "KEYS_ONLY"},
    }


async def create_table(client: DynamoDBClient, name: str, indexes: int) -> None:
    attributes = ["pk", "g1", "g2", "g3"][: indexes + 1]
    request: dict[str, Any] = {
        "TableName": name,
        "KeySchema": [{"AttributeName": "pk", "KeyType": "HASH"}],
        "AttributeDefinitions": [{"AttributeName": a, "AttributeType": "S"} for a in attributes],
        "BillingMode": "PAY_PER_REQUEST",
    }
    if indexes:
        request["GlobalSecondaryIndexes"] = [
            index(f"by_{attribute}", attribute) for attribute in attributes[1:]
        ]
    await client.request("CreateTable", request)
    deadline = time.monotonic() + TABLE_ACTIVE_TIMEOUT_S
    while True:
        table = await client.request("DescribeTable", {"TableName": name})
        if table["Table"]["TableStatus"] == "ACTIVE":
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} not ACTIVE in {TABLE_ACTIVE_TIMEOUT_S} s")
        await asyncio.sleep(0.1)


def item(number: int, probe: bool) -> dict[str, Any]:
    # Ordinary items share a few index keys; a probe's index key is its own.
    g1 = f"probe-{number}" if probe else f"g-{number % 64}"
    return {
        "pk": {"S": f"item-{number}"},
        "g1": {"S": g1},
        "g2": {"S": f"h-{number % 16}"},
        "g3": {"S": f"k-{number % 256}"},
        "data": {"S": "x" * 100},
    }


async def wait_visible(client: DynamoDBClient, table: str, number: int, poll_s: float) -> float:
    """Seconds from now until the probe's entry is in the index (inf if never, within bounds)."""
    start = time.monotonic()
    request = {
        "TableName": table,
        "IndexName": "by_g1",
        "KeyConditionExpression": "g1 = :g",
        "ExpressionAttributeValues": {":g": {"S": f"probe-{number}"}},
    }
    while time.monotonic() - start < LAG_WAIT_S_MAX:
        reply = await client.request("Query", request)
        if reply["Count"]:
            return time.monotonic() - start
        await asyncio.sleep(poll_s)
    return float("inf")


async def follow_new_table(client: DynamoDBClient, poll_s: float) -> None:
    await create_table(client, "lag", 1)
    # The replicator finds a new table on its next catalog poll: wait until it follows this one,
    # so the run measures propagation, not discovery.
    warm_up = -1
    await client.request("PutItem", {"TableName": "lag", "Item": item(warm_up, True)})
    await wait_visible(client, "lag", warm_up, poll_s)


async def measure_idle_lag(client: DynamoDBClient, probes: int, poll_s: float) -> list[float]:
    """Probes one at a time on an otherwise idle cluster, each once the last was seen."""
    lags: list[float] = []
    for number in range(probes):
        probe = 1_000_000 + number  # Apart from the loaded run's numbers.
        await client.request("PutItem", {"TableName": "lag", "Item": item(probe, True)})
        lags.append(await wait_visible(client, "lag", probe, poll_s))
    return lags


async def measure_lag(
    client: DynamoDBClient, rate: float, seconds: float, probe_every: int, poll_s: float
) -> list[float]:
    lags: list[float] = []
    tasks: list[asyncio.Task[None]] = []

    async def write(number: int) -> None:
        probe = number % probe_every == 0
        await client.request("PutItem", {"TableName": "lag", "Item": item(number, probe)})
        if probe:
            lags.append(await wait_visible(client, "lag", number, poll_s))

    start = time.monotonic()
    total = int(rate * seconds)
    for number in range(total):
        delay = start + number / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(write(number)))
    await asyncio.gather(*tasks)
    achieved = total / (time.monotonic() - start)
    print(f"  issued {total} puts at {rate:.0f}/s (achieved {achieved:.0f}/s incl. the tail)")
    return lags


def report_lags(lags: list[float], poll_ms: float) -> None:
    lags = sorted(lags)
    seen = [lag for lag in lags if lag != float("inf")]
    if seen:
        print(
            f"  {len(seen)} probes, ack to visible: p50 {1e3 * percentile(seen, 0.5):.1f} ms, "
            f"p99 {1e3 * percentile(seen, 0.99):.1f} ms, max {1e3 * seen[-1]:.1f} ms "
            f"(poll every {poll_ms:.0f} ms); {len(lags) - len(seen)} not seen in "
            f"{LAG_WAIT_S_MAX:.0f} s"
        )


Buckets = list[tuple[float, float]]  # (upper bound, cumulative count), ascending


async def lag_histograms(
    session: aiohttp.ClientSession, cluster: LocalCluster
) -> dict[str, tuple[Buckets, float]]:
    """Every replicator's lag histograms (`gsi_replicator.replicator._LagHistograms`) summed:
    name -> (cumulative buckets, sum of seconds)."""
    summed: dict[str, tuple[dict[float, float], list[float]]] = {}
    for replicator in cluster.replicators:
        async with session.get(f"{replicator.url}/metrics") as reply:
            text = await reply.text()
        for line in text.splitlines():
            for name in HISTOGRAMS:
                buckets, total = summed.setdefault(name, ({}, [0.0]))
                if line.startswith(f'{name}_bucket{{le="'):
                    bound = line.split('"')[1]
                    upper = float("inf") if bound == "+Inf" else float(bound)
                    buckets[upper] = buckets.get(upper, 0.0) + float(line.rsplit(" ", 1)[1])
                elif line.startswith(f"{name}_sum "):
                    total[0] += float(line.rsplit(" ", 1)[1])
    return {name: (sorted(buckets.items()), total[0]) for name, (buckets, total) in summed.items()}


HISTOGRAMS = ("dynalab_gsi_feed_seconds", "dynalab_gsi_propagation_seconds")


def bucket_percentile(buckets: Buckets, fraction: float) -> float:
    """The upper bound of the bucket that holds the `fraction` quantile."""
    count = buckets[-1][1]
    for upper, cumulative in buckets:
        if cumulative >= fraction * count:
            return upper
    return float("inf")


def report_histograms(
    before: dict[str, tuple[Buckets, float]], after: dict[str, tuple[Buckets, float]]
) -> None:
    """What the replicator's histograms counted between two scrapes."""
    parts = []
    for name in HISTOGRAMS:
        old = dict(before.get(name, ([], 0.0))[0])
        buckets = [(upper, count - old.get(upper, 0.0)) for upper, count in after[name][0]]
        count = buckets[-1][1] if buckets else 0.0
        if not count:
            continue
        mean = (after[name][1] - before.get(name, ([], 0.0))[1]) / count
        label = "commit to replicator" if name.endswith("feed_seconds") else "commit to index"
        parts.append(
            f"{label}: p50 <= {1e3 * bucket_percentile(buckets, 0.5):g} ms, "
            f"p99 <= {1e3 * bucket_percentile(buckets, 0.99):g} ms, mean {1e3 * mean:.1f} ms"
        )
    if parts:
        print("  replicator's histograms, " + "; ".join(parts))


async def put_throughput(
    client: DynamoDBClient, table: str, concurrency: int, seconds: float
) -> float:
    deadline = time.monotonic() + seconds
    counts = [0] * concurrency

    async def worker(slot: int) -> None:
        number = slot
        while time.monotonic() < deadline:
            await client.request("PutItem", {"TableName": table, "Item": item(number, False)})
            counts[slot] += 1
            number += concurrency

    started = time.monotonic()
    await asyncio.gather(*(worker(slot) for slot in range(concurrency)))
    return sum(counts) / (time.monotonic() - started)


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process `pid` has used (Linux)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def put_cost(
    client: DynamoDBClient, cluster: LocalCluster, table: str, rate: float, seconds: float
) -> tuple[int, dict[str, float]]:
    """Put at `rate` per second for `seconds`, then wait for the indexes to settle
    (`COST_SETTLE_S`); the puts acknowledged and each service's CPU microseconds per put."""
    services = [*cluster.routers, *cluster.replicators, *cluster.nodes]
    pids = {service.name: service.pid for service in services if service.pid is not None}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    acknowledged = 0

    async def one(number: int) -> None:
        nonlocal acknowledged
        await client.request("PutItem", {"TableName": table, "Item": item(number, False)})
        acknowledged += 1

    start = time.monotonic()
    tasks = []
    for number in range(int(rate * seconds)):
        delay = start + number / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(number)))
    await asyncio.gather(*tasks)
    await asyncio.sleep(COST_SETTLE_S)  # The replicator's last runs and checkpoints.
    return acknowledged, {
        name: 1e6 * (cpu_seconds(pid) - before[name]) / max(1, acknowledged)
        for name, pid in pids.items()
    }


async def load(client: DynamoDBClient, table: str, items: int, concurrency: int) -> None:
    """Write items 0..items-1 with BatchWriteItem, resending what a batch leaves unprocessed."""
    batches = iter(range(0, items, BATCH_ITEMS_MAX))

    async def worker() -> None:
        for first in batches:
            numbers = range(first, min(first + BATCH_ITEMS_MAX, items))
            pending = [{"PutRequest": {"Item": item(number, False)}} for number in numbers]
            while pending:
                reply = await client.request("BatchWriteItem", {"RequestItems": {table: pending}})
                pending = reply.get("UnprocessedItems", {}).get(table, [])

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def index_entries(client: DynamoDBClient, table: str, index_name: str) -> int:
    """How many entries the index holds, by a Scan with Select COUNT."""
    request: dict[str, Any] = {"TableName": table, "IndexName": index_name, "Select": "COUNT"}
    total = 0
    while True:
        reply = await client.request("Scan", request)
        total += reply["Count"]
        if "LastEvaluatedKey" not in reply:
            return total
        request["ExclusiveStartKey"] = reply["LastEvaluatedKey"]


async def measure_backfill(client: DynamoDBClient, items: int, concurrency: int) -> None:
    await create_table(client, "backfill", 0)
    started = time.monotonic()
    await load(client, "backfill", items, concurrency)
    loaded_s = time.monotonic() - started
    print(f"  loaded {items} items in {loaded_s:.1f} s ({items / loaded_s:.0f} items/s)")
    await client.request(
        "UpdateTable",
        {
            "TableName": "backfill",
            "AttributeDefinitions": [{"AttributeName": "g1", "AttributeType": "S"}],
            "GlobalSecondaryIndexUpdates": [{"Create": index("by_g1", "g1")}],
        },
    )
    started = time.monotonic()
    while True:
        table = (await client.request("DescribeTable", {"TableName": "backfill"}))["Table"]
        [status] = [i["IndexStatus"] for i in table.get("GlobalSecondaryIndexes", [])]
        if status == "ACTIVE":
            break
        if time.monotonic() - started > BACKFILL_TIMEOUT_S:
            raise RuntimeError(f"the index was not ACTIVE in {BACKFILL_TIMEOUT_S:.0f} s")
        await asyncio.sleep(0.05)
    seconds = time.monotonic() - started
    entries = await index_entries(client, "backfill", "by_g1")
    print(
        f"  backfilled {items} items in {seconds:.1f} s: {items / seconds:.0f} items/s "
        f"(UpdateTable to ACTIVE); the index holds {entries} entries"
        + ("" if entries == items else f", NOT the {items} loaded")
    )


async def run(args: argparse.Namespace, cluster: LocalCluster) -> None:
    endpoint = cluster.router_url
    connector = aiohttp.TCPConnector(limit=max(args.concurrency, 64))
    async with aiohttp.ClientSession(connector=connector) as session:
        signer = SigV4Signer("dynalab", "dynalab", "us-east-1", host_header(endpoint))
        client = DynamoDBClient(session, endpoint, signer)
        runs = set(args.runs.split(","))
        if "lag" in runs:
            poll_s = args.poll_ms / 1e3
            await follow_new_table(client, poll_s)
            if args.idle_probes:
                print(f"propagation lag, idle, {args.idle_probes} probes one at a time, one GSI:")
                before = await lag_histograms(session, cluster)
                report_lags(await measure_idle_lag(client, args.idle_probes, poll_s), args.poll_ms)
                report_histograms(before, await lag_histograms(session, cluster))
            print(f"propagation lag, {args.rate:.0f} puts/s for {args.seconds:.0f} s, one GSI:")
            before = await lag_histograms(session, cluster)
            lags = await measure_lag(client, args.rate, args.seconds, args.probe_every, poll_s)
            report_lags(lags, args.poll_ms)
            report_histograms(before, await lag_histograms(session, cluster))
        if "throughput" in runs:
            print(f"base put throughput, {args.concurrency} workers, {args.seconds:.0f} s each:")
        for indexes in (0, 1, 3) if "throughput" in runs else ():
            name = f"puts{indexes}"
            await create_table(client, name, indexes)
            rate = await put_throughput(client, name, args.concurrency, args.seconds)
            print(f"  {indexes} GSI(s): {rate:.0f} puts/s")
        if args.cost_rate and "cost" in runs:
            print(f"CPU per put at {args.cost_rate:.0f} puts/s for {args.seconds:.0f} s:")
            for indexes in (0, 1, 3):
                name = f"cost{indexes}"
                await create_table(client, name, indexes)
                await asyncio.sleep(2 * COST_SETTLE_S)  # The replicator finds the table.
                puts, cost = await put_cost(client, cluster, name, args.cost_rate, args.seconds)
                services = ", ".join(f"{service} {us:.0f}" for service, us in cost.items())
                print(
                    f"  {indexes} GSI(s): {sum(cost.values()):.0f} us/put over {puts} puts "
                    f"({services})"
                )
        if args.backfill_items and "backfill" in runs:
            print(f"backfill of a GSI added to a table of {args.backfill_items} items:")
            await measure_backfill(client, args.backfill_items, args.concurrency)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rate", type=float, default=1000.0, help="puts/s for the lag run")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each run")
    parser.add_argument("--concurrency", type=int, default=32, help="workers for throughput")
    parser.add_argument("--probe-every", type=int, default=50, help="one probe per N puts")
    parser.add_argument("--poll-ms", type=float, default=2.0, help="probe poll interval")
    parser.add_argument(
        "--backfill-items", type=int, default=200_000, help="items for the backfill run (0: none)"
    )
    parser.add_argument(
        "--idle-probes", type=int, default=300, help="probes one at a time, idle (0: none)"
    )
    parser.add_argument(
        "--runs", default="lag,throughput,cost,backfill", help="which runs, comma-separated"
    )
    parser.add_argument("--replicators", type=int, default=1, help="GSI replicator processes")
    parser.add_argument(
        "--cost-rate", type=float, default=300.0, help="puts/s for the CPU-per-put run (0: none)"
    )
    args = parser.parse_args()
    cpu = time.process_time()
    os.environ["DYNALAB_THROTTLING"] = "off"
    with (
        tempfile.TemporaryDirectory() as data,
        LocalCluster(data, nodes=3, routers=1, replicators=args.replicators) as cluster,
    ):
        asyncio.run(run(args, cluster))
    print(f"bench client CPU: {time.process_time() - cpu:.1f} s")


if __name__ == "__main__":
    main()
