"""CPU per operation of the router's own request path, in-process, with a node that answers at once.

    python bench/routing.py [--rounds 1000]
    PYTHONPATH=<another checkout> python bench/routing.py   # the same for another build

Drives GetItem, PutItem and Query (10 items per page) through the router's handlers
(`router.items`, `router.queries`): request reading and validation, the routing view
(`router.routing`), the partition lookup and the call's envelope, against a transport that answers
every call at once, so no HTTP, gRPC or storage node is timed. Prints, per operation, the CPU
microseconds of the best of seven rounds and the Python function calls per operation (cProfile):
the calls are the same on every run, so they compare two builds on a noisy machine where the
times do not. `bench/cluster.py` measures the whole cluster; this isolates the router's share.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.append(str(ROOT))  # After PYTHONPATH, so another checkout's build can be measured.

from core import catalog  # noqa: E402
from core.catalog import Throughput  # noqa: E402
from core.keys import KeyShape  # noqa: E402
from core.token_bucket import BillingMode  # noqa: E402
from router import items, queries  # noqa: E402
from router.context import RouterContext  # noqa: E402

TABLE = "bench"
ITEM = {"pk": {"S": "k"}, "sk": {"N": "1"}, "v": {"S": "x" * 180}}
ROUNDS_BEST_OF = 7
WARMUP_ROUNDS = 200


class InstantNode:
    """A node transport that answers each call at once, as a node would for ITEM."""

    async def call(
        self, op: str, target: object, body: dict[str, Any], timeout: float
    ) -> dict[str, Any]:
        if op == "get":
            return {"item": ITEM, "read_bytes": 200}
        if op == "put":
            return {"attributes": None, "old_bytes": 200, "new_bytes": 200}
        return {
            "items": [ITEM] * 10,
            "count": 10,
            "scanned": 10,
            "read_bytes": 2000,
            "last_key": None,
        }

    async def close(self) -> None:
        return None


async def _context() -> RouterContext:
    """A router whose catalog holds one ACTIVE on-demand table (4 partitions on 2 nodes)."""
    ctx = RouterContext({"n1": "-", "n2": "-"}, "bench", connect=lambda address: InstantNode())
    record = catalog.activated(
        catalog.created(
            name=TABLE,
            table_id="a" * 32,
            key_shape=KeyShape.table(("pk", "S"), ("sk", "N")),
            attribute_definitions=[("pk", "S"), ("sk", "N")],
            billing_mode=BillingMode.PAY_PER_REQUEST,
            throughput=Throughput(),
            now=0.0,
            owner=lambda partition_id: "n1" if partition_id.endswith(("0", "2")) else "n2",
        )
    )
    ctx._install({TABLE: record})
    return ctx


Handler = Callable[[RouterContext, dict[str, Any]], Awaitable[dict[str, Any]]]
WORKLOADS: list[tuple[str, Handler, dict[str, Any]]] = [
    ("GetItem", items.get_item, {"TableName": TABLE, "Key": {"pk": ITEM["pk"], "sk": ITEM["sk"]}}),
    ("PutItem", items.put_item, {"TableName": TABLE, "Item": ITEM}),
    (
        "Query",
        queries.query,
        {
            "TableName": TABLE,
            "KeyConditionExpression": "pk = :p",
            "ExpressionAttributeValues": {":p": ITEM["pk"]},
            "Limit": 10,
        },
    ),
]


async def measure(rounds: int) -> None:
    ctx = await _context()
    for name, handler, body in WORKLOADS:
        for _ in range(WARMUP_ROUNDS):
            await handler(ctx, body)
        best = float("inf")
        for _ in range(ROUNDS_BEST_OF):
            started = time.process_time()
            for _ in range(rounds):
                await handler(ctx, body)
            best = min(best, time.process_time() - started)
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(rounds):
            await handler(ctx, body)
        profile.disable()
        calls = pstats.Stats(profile).total_calls / rounds
        print(f"{name:8} {best / rounds * 1e6:7.1f} us/op  {calls:6.1f} calls/op")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=1000, help="operations per timed round")
    asyncio.run(measure(parser.parse_args().rounds))


if __name__ == "__main__":
    main()
