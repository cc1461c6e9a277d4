"""Throughput of one storage node through NodeClient: put, get and a 50/50 mix, 32 calls in flight.

    python bench/node_rpc.py [--seconds 5] [--concurrency 32] [--item-bytes 100]
                             [--phases put,get,mixed]

Starts `python -m storagenode` on a free loopback port with a fresh data directory, drives it from
this process over one NodeClient (one Exchange stream, as a router does), prints ops/s, latency
percentiles and the CPU microseconds per call spent by this process (the caller's side of the hop)
and by the node, per phase, and stops the node. Writes are synced group commits, as in production.
CPU per call shows what each message costs: at low concurrency batches are small and the fixed
cost of every message dominates. On a machine whose cores are shared, ops/s follows the other load;
CPU per call varies less, though it too rises by 10-30% when the cores are contended.
"""

from __future__ import annotations

import argparse
import asyncio
import os
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

from rpc import ops  # noqa: E402
from rpc.client import NodeClient  # noqa: E402

START_SECONDS = 30.0
STOP_SECONDS = 10.0
CALL_SECONDS = 10.0
TABLE = {"id": "be" * 16, "name": "Bench", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "bench"}
KEYS = 10_000
CLOCK_TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")


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


def target(*, consistent: bool = False) -> ops.Target:
    """The envelope of every data-plane call: the one partition, at its epoch."""
    return ops.Target(TABLE["id"], PARTITION["id"], PARTITION["epoch"], consistent)


def process_cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process (all its threads), from /proc/<pid>/stat."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS_PER_SECOND


async def run_phase(
    client: NodeClient, node_pid: int, name: str, seconds: float, concurrency: int, payload: str
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
                await client.call(ops.PUT, target(), {"item": item}, CALL_SECONDS)
            else:
                await client.call(ops.GET, target(consistent=True), {"key": key}, CALL_SECONDS)
            latencies.append(time.perf_counter() - started)

    started = time.monotonic()
    cpu_started = time.process_time()
    node_cpu_started = process_cpu_seconds(node_pid)
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.monotonic() - started
    calls = len(latencies)
    client_us = 1e6 * (time.process_time() - cpu_started) / calls
    node_us = 1e6 * (process_cpu_seconds(node_pid) - node_cpu_started) / calls
    quantiles = statistics.quantiles(latencies, n=100)
    print(
        f"{name:6} {calls / elapsed:9.0f} ops/s   "
        f"p50 {quantiles[49] * 1000:6.2f} ms   p99 {quantiles[98] * 1000:6.2f} ms   "
        f"CPU per call: client {client_us:4.0f} us, node {node_us:4.0f} us   "
        f"({calls} ops in {elapsed:.1f} s, {concurrency} in flight)"
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
            for phase in args.phases.split(","):
                await run_phase(client, process.pid, phase, args.seconds, args.concurrency, payload)
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
    parser.add_argument("--phases", default="put,get,mixed", help="any of put, get, mixed")
    uvloop.run(main(parser.parse_args()))
