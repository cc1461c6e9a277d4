"""Throughput of one storage node through NodeClient: put, get and a 50/50 mix, 32 calls in flight.

    python bench/node_rpc.py [--seconds 5] [--concurrency 32] [--item-bytes 100]

Starts `python -m storagenode` on a free loopback port with a fresh data directory, drives it from
this process over one NodeClient (one Exchange stream, as a router does), prints ops/s and latency
percentiles per phase, and stops the node. Writes are synced group commits, as in production.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from dynalab.rpc import ops  # noqa: E402
from dynalab.rpc.client import NodeClient  # noqa: E402

START_SECONDS = 30.0
STOP_SECONDS = 10.0
CALL_SECONDS = 10.0
TABLE = {"id": "be" * 16, "name": "Bench", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "bench"}
KEYS = 10_000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


async def start_node(data_dir: Path) -> tuple[asyncio.subprocess.Process, str]:
    address = f"127.0.0.1:{free_port()}"
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "storagenode",
        "--node-id",
        "bench",
        "--listen",
        address,
        "--data-dir",
        str(data_dir),
        cwd=ROOT,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    assert process.stdout is not None
    line = await asyncio.wait_for(process.stdout.readline(), START_SECONDS)
    if b"listening on" not in line:
        process.kill()
        raise SystemExit("the storage node did not start")
    return process, address


def body(**fields: object) -> dict[str, object]:
    return {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, **fields}


async def run_phase(
    client: NodeClient, name: str, seconds: float, concurrency: int, payload: str
) -> None:
    latencies: list[float] = []
    deadline = time.monotonic() + seconds
    rng = random.Random(name)

    async def worker() -> None:
        while time.monotonic() < deadline:
            key = {"pk": {"S": f"key{rng.randrange(KEYS)}"}}
            write = name == "put" or (name == "mixed" and rng.random() < 0.5)
            started = time.perf_counter()
            if write:
                item = {**key, "payload": {"S": payload}, "n": {"N": str(rng.randrange(10**9))}}
                await client.call(ops.PUT, body(item=item), CALL_SECONDS)
            else:
                await client.call(ops.GET, body(key=key, consistent=True), CALL_SECONDS)
            latencies.append(time.perf_counter() - started)

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    quantiles = statistics.quantiles(latencies, n=100)
    print(
        f"{name:6} {len(latencies) / elapsed:9.0f} ops/s   "
        f"p50 {quantiles[49] * 1000:6.2f} ms   p99 {quantiles[98] * 1000:6.2f} ms   "
        f"({len(latencies)} ops in {elapsed:.1f} s, {concurrency} in flight)"
    )


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="dynalab-bench-") as data_dir:
        process, address = await start_node(Path(data_dir))
        client = NodeClient(address)
        try:
            await client.control(
                ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION}, CALL_SECONDS
            )
            payload = "x" * args.item_bytes
            for phase in ("put", "get", "mixed"):
                await run_phase(client, phase, args.seconds, args.concurrency, payload)
        finally:
            await client.close()
            process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), STOP_SECONDS)
            except TimeoutError:
                process.kill()
                await process.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--item-bytes", type=int, default=100)
    uvloop.run(main(parser.parse_args()))
