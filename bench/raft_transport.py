"""Throughput of the Raft transport between two processes: small appends, and heartbeats.

    python bench/raft_transport.py [--seconds 3] [--phases append,heartbeat]

Starts a second process (this script with `--echo`) as node 2 on a free loopback port; this
process is node 1. Each phase, node 1 sends for `--seconds`: every turn of its event loop it
queues a burst for node 2 (256 appends of one 100-byte entry each, in 16 groups; or one
heartbeat for each of 1,000 groups, which travel coalesced), as a multi-raft loop would, and
queues the next burst only once the previous one left the queue, so nothing is dropped. Then it
sends a marker; node 2 answers it over its own transport with the count it received. Printed per
phase: messages/s and stream messages (batches)/s delivered, bytes per message on the wire, and
drops (0 unless something broke). On a machine whose two cores are shared, the rates follow the
other load.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import sys
import time
from pathlib import Path

import grpc
import uvloop

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core.raft.messages import Entry, Message, MessageKind  # noqa: E402
from rpc.raft_codec import encode_batch  # noqa: E402
from rpc.raft_transport import RaftTransport  # noqa: E402

START_SECONDS = 30.0
MARKER = "marker"
APPEND_BURST = 256
APPEND_GROUPS = 16
APPEND_BYTES = 100
HEARTBEAT_GROUPS = 1000


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def burst(phase: str, turn: int) -> list[tuple[str, Message]]:
    if phase == "append":
        return [
            (
                f"group-{n % APPEND_GROUPS}",
                Message(
                    MessageKind.APPEND,
                    sender=1,
                    to=2,
                    term=3,
                    index=turn * APPEND_BURST + n,
                    log_term=3,
                    entries=(Entry(turn * APPEND_BURST + n + 1, 3, data=b"x" * APPEND_BYTES),),
                    commit=turn * APPEND_BURST + n,
                ),
            )
            for n in range(APPEND_BURST)
        ]
    return [
        (
            f"group-{n}",
            Message(MessageKind.HEARTBEAT, sender=1, to=2, term=3, commit=turn, lease_tick=turn),
        )
        for n in range(HEARTBEAT_GROUPS)
    ]


async def serve(transport: RaftTransport, port: int) -> grpc.aio.Server:
    server = grpc.aio.server()
    transport.add_to_server(server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    await server.start()
    return server


async def echo(port: int, peer_port: int) -> None:
    """Node 2: count what arrives; answer each marker with the count so far."""
    received = 0
    transport: RaftTransport

    def deliver(from_node: int, batch: list[tuple[str, Message]]) -> None:
        nonlocal received
        for group, _ in batch:
            if group == MARKER:
                answer = Message(MessageKind.HEARTBEAT_RESPONSE, 2, 1, term=1, commit=received)
                transport.send(1, [(MARKER, answer)])
                received = 0
            else:
                received += 1

    transport = RaftTransport(2, {1: f"127.0.0.1:{peer_port}"}, deliver)
    server = await serve(transport, port)
    print("ready", flush=True)
    # Ends when node 1 closes stdin (or dies).
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await transport.close()
    await server.stop(grace=None)


async def run(phases: list[str], seconds: float) -> None:
    port, peer_port = free_port(), free_port()
    answers: asyncio.Queue[int] = asyncio.Queue()

    def deliver(from_node: int, batch: list[tuple[str, Message]]) -> None:
        for group, message in batch:
            if group == MARKER:
                answers.put_nowait(message.commit)

    transport = RaftTransport(1, {2: f"127.0.0.1:{peer_port}"}, deliver)
    server = await serve(transport, port)
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--echo",
        str(peer_port),
        str(port),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    try:
        assert child.stdout is not None
        line = await asyncio.wait_for(child.stdout.readline(), START_SECONDS)
        assert line.strip() == b"ready", line
        header = ("phase", "messages/s", "batches/s", "bytes/msg", "dropped")
        print("{:<10} {:>12} {:>10} {:>10} {:>8}".format(*header))
        for phase in phases:
            sample = burst(phase, 1)
            wire_bytes = encode_batch(1, 2, sample).ByteSize() / len(sample)
            counters = transport.counters[2]
            batches_before = counters.batches_sent
            dropped_before = sum(counters.dropped.values())
            started = time.perf_counter()
            turn = 0
            while time.perf_counter() - started < seconds:
                if transport.queued_messages(2) == 0:
                    transport.send(2, burst(phase, turn))
                    turn += 1
                await asyncio.sleep(0)
            transport.send(2, [(MARKER, Message(MessageKind.HEARTBEAT, 1, 2, term=1))])
            delivered = await asyncio.wait_for(answers.get(), START_SECONDS)
            elapsed = time.perf_counter() - started
            batches = counters.batches_sent - batches_before
            dropped = sum(counters.dropped.values()) - dropped_before
            print(
                f"{phase:<10} {delivered / elapsed:>12,.0f} {batches / elapsed:>10,.0f} "
                f"{wire_bytes:>10.1f} {dropped:>8}"
            )
    finally:
        if child.stdin is not None:
            child.stdin.close()
        try:
            await asyncio.wait_for(child.wait(), START_SECONDS)
        except TimeoutError:
            child.kill()
            await child.wait()
        await transport.close()
        await server.stop(grace=None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--phases", default="append,heartbeat")
    parser.add_argument("--echo", nargs=2, type=int, metavar=("PORT", "PEER_PORT"))
    args = parser.parse_args()
    if args.echo:
        uvloop.run(echo(*args.echo))
        return
    phases = args.phases.split(",")
    unknown = set(phases) - {"append", "heartbeat"}
    if unknown:
        parser.error(f"unknown phases {sorted(unknown)}")
    uvloop.run(run(phases, args.seconds))


if __name__ == "__main__":
    main()
