"""Failover and read-your-writes on a cluster whose partitions are replicated (issue 27).

    python bench/failover.py [--kills 20] [--writers 4] [--reads 2000] [--nodes 3]

Starts a local cluster (`--nodes` storage nodes, one router, replication factor 3, no GSI
replicator) in a temporary directory and creates one on-demand table (4 partitions, each led by
a different node in turn). Then:

- failover: writers put distinct keys without client retries; each round kills one node with
  SIGKILL (the nodes in turn, so every node's partitions lose their leader), waits, restarts it.
  A round's stall is the longest any put took that was in flight at the kill or started in the
  2 s after it: how long the writes to the dead node's partitions waited for a new leader (the
  router retries within the request's deadline). It prints each stall, their p50 and p99, the
  puts acknowledged, failed (with their error codes) and, read back strongly consistent, lost.
- read-your-writes: one client puts a key and at once reads it back eventually consistent through
  the same router, `--reads` times; prints how often the read saw the put.

Prints numbers; asserts nothing (the tests do: tests/integration/test_replication.py).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import boto3  # noqa: E402
from botocore.config import Config  # noqa: E402
from botocore.exceptions import ClientError  # noqa: E402

from dynalab.cluster import LocalCluster  # noqa: E402

STALL_WINDOW_SECONDS = 2.0


def client(url: str) -> Any:
    return boto3.session.Session(region_name="us-east-1").client(
        "dynamodb",
        endpoint_url=url,
        aws_access_key_id="bench",
        aws_secret_access_key="bench",
        config=Config(retries={"total_max_attempts": 1}, read_timeout=30),
    )


def create_table(ddb: Any, name: str) -> None:
    ddb.create_table(
        TableName=name,
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
        BillingMode="PAY_PER_REQUEST",
    )
    ddb.get_waiter("table_exists").wait(TableName=name, WaiterConfig={"Delay": 1})


def failover(cluster: LocalCluster, kills: int, writers: int) -> None:
    ddb = client(cluster.router_url)
    create_table(ddb, "Failover")
    puts: list[tuple[float, float, str, str | None]] = []  # start, end, key, error code
    stop = threading.Event()

    def write(number: int) -> None:
        own = client(cluster.router_url)
        i = 0
        while not stop.is_set():
            key = f"w{number}-{i}"
            i += 1
            started = time.monotonic()
            code = None
            try:
                own.put_item(TableName="Failover", Item={"pk": {"S": key}})
            except ClientError as error:
                code = error.response["Error"]["Code"]
            puts.append((started, time.monotonic(), key, code))

    threads = [threading.Thread(target=write, args=(n,), daemon=True) for n in range(writers)]
    for thread in threads:
        thread.start()
    time.sleep(2)
    stalls = []
    for round_number in range(kills):
        node = cluster.nodes[round_number % len(cluster.nodes)]
        killed = time.monotonic()
        node.kill()
        time.sleep(STALL_WINDOW_SECONDS + 2)
        around = [
            end - start
            for start, end, _, _ in list(puts)
            if start <= killed <= end or killed <= start <= killed + STALL_WINDOW_SECONDS
        ]
        stall = max(around, default=0.0)
        stalls.append(stall)
        print(f"kill {round_number + 1:2} {node.name}: stall {stall * 1000:7.1f} ms", flush=True)
        node.start()
        time.sleep(1)
    stop.set()
    for thread in threads:
        thread.join(timeout=30)
    acknowledged = [key for _, _, key, code in puts if code is None]
    failed: dict[str, int] = {}
    for _, _, _, code in puts:
        if code is not None:
            failed[code] = failed.get(code, 0) + 1
    lost = 0
    for start in range(0, len(acknowledged), 100):
        chunk = acknowledged[start : start + 100]
        request = {"Failover": {"Keys": [{"pk": {"S": k}} for k in chunk], "ConsistentRead": True}}
        found = set()
        while request:
            reply = ddb.batch_get_item(RequestItems=request)
            found.update(item["pk"]["S"] for item in reply["Responses"].get("Failover", []))
            request = reply.get("UnprocessedKeys") or {}
        lost += len(set(chunk) - found)
    ordered = sorted(stalls)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    print(
        f"failover over {kills} kills: stall p50 {statistics.median(stalls) * 1000:.0f} ms, "
        f"p99 {p99 * 1000:.0f} ms, max {max(stalls) * 1000:.0f} ms"
    )
    print(f"puts acknowledged {len(acknowledged)}, failed {failed or 0}, acknowledged lost {lost}")


def read_your_writes(cluster: LocalCluster, reads: int) -> None:
    ddb = client(cluster.router_url)
    create_table(ddb, "ReadYourWrites")
    seen = 0
    started = time.monotonic()
    for i in range(reads):
        key = {"pk": {"S": f"k{i % 50}"}}
        ddb.put_item(TableName="ReadYourWrites", Item={**key, "v": {"N": str(i)}})
        item = ddb.get_item(TableName="ReadYourWrites", Key=key).get("Item")
        seen += item is not None and item["v"]["N"] == str(i)
    seconds = time.monotonic() - started
    print(
        f"read-your-writes: {seen}/{reads} eventually consistent reads right after the put saw "
        f"it ({seen / reads:.2%}), {reads / seconds:.0f} pairs/s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--reads", type=int, default=2000)
    parser.add_argument("--nodes", type=int, default=3)
    args = parser.parse_args()
    with (
        tempfile.TemporaryDirectory() as directory,
        LocalCluster(
            Path(directory) / "cluster",
            nodes=args.nodes,
            routers=1,
            replicators=0,
            replication_factor=3,
        ) as cluster,
    ):
        read_your_writes(cluster, args.reads)
        failover(cluster, args.kills, args.writers)


if __name__ == "__main__":
    main()
