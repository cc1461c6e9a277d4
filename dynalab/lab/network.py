"""Network faults with the kernel's own tools, inside a network namespace the lab creates.

A scenario with a network fault runs its whole experiment (cluster, clients, nemesis) in a private
network namespace: the lab process calls `unshare(CLONE_NEWNET)` before it starts anything, brings
up that namespace's loopback, and every process it starts inherits it. So the faults below are real
kernel faults on real sockets, and they touch nothing outside the experiment: the namespace has
only its own `lo`, and it disappears with the lab process.

The faults match a storage node's port, in both directions, on `lo`:

- **partition** (`iptables ... -j DROP`): every packet to or from the node is dropped. Established
  connections stay open and silent, as across a real partition: neither side is told anything, the
  router's requests time out (a write's outcome is then unknown) and the HTTP/2 keepalive declares
  the stream dead after its timeout.
- **packet loss** (`iptables -m statistic --mode random`): a share of the packets is dropped. TCP
  retransmits them after at least 200 ms, so loss shows as latency spikes and, when a retransmit
  is lost again, as timeouts.
- **slow link** (`tc` HTB class): the node's traffic is limited to a low bandwidth, so large
  replies and batches queue behind each other.

Packet *delay* needs `tc netem`, which this machine's kernel lacks (no `sch_netem`); loss with
TCP's retransmission timeouts is the closest real fault it has. A fault-injecting proxy could
delay bytes anywhere, but it is a process in the path that can itself fail or reorder things the
kernel never would; the kernel's faults need root (CAP_NET_ADMIN), which `unavailable` checks.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

CLONE_NEWNET = 0x40000000
DROP_PROBABILITY = 0.3  # Packet loss: the share of the node's packets dropped.
SLOW_LINK_KBIT = 256  # Slow link: the node's bandwidth, each way.
COMMAND_TIMEOUT_S = 10.0
TOOLS = ("ip", "iptables", "tc")


def unavailable() -> str | None:
    """Why this process cannot inject network faults (None: it can)."""
    if os.geteuid() != 0:
        return "network faults need root (a private network namespace, iptables and tc)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return (
            f"network faults need {', '.join(missing)} (Debian: apt-get install iproute2 iptables)"
        )
    return None


def enter_private_namespace() -> None:
    """Move this process into a new network namespace holding only a loopback that is up.

    Call it from the main thread before any other thread or child process starts: the namespace
    belongs to the calling thread, and what it starts afterwards inherits it.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"unshare(CLONE_NEWNET) failed: {os.strerror(error)}")
    _run("ip", "link", "set", "lo", "up")


def _run(*argv: str) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
    if done.returncode != 0:
        raise OSError(f"{' '.join(argv)} failed: {done.stderr.strip() or done.returncode}")


def _drop_rules(port: int, probability: float | None) -> list[list[str]]:
    """The INPUT rules dropping (a share of) the node's packets, each direction; every packet on
    `lo` passes INPUT once, on its way in."""
    chance = [] if probability is None else ["-m", "statistic", "--mode", "random"]
    chance += [] if probability is None else ["--probability", str(probability)]
    tag = ["-m", "comment", "--comment", f"dynalab-lab-{port}"]
    return [
        ["INPUT", "-i", "lo", "-p", "tcp", direction, str(port), *chance, *tag, "-j", "DROP"]
        for direction in ("--dport", "--sport")
    ]


def partition(port: int) -> None:
    for rule in _drop_rules(port, None):
        _run("iptables", "-I", *rule)


def heal_partition(port: int) -> None:
    for rule in _drop_rules(port, None):
        _run("iptables", "-D", *rule)


def drop_packets(port: int, probability: float = DROP_PROBABILITY) -> None:
    for rule in _drop_rules(port, probability):
        _run("iptables", "-I", *rule)


def stop_dropping(port: int, probability: float = DROP_PROBABILITY) -> None:
    for rule in _drop_rules(port, probability):
        _run("iptables", "-D", *rule)


def slow_link(port: int, kbit: int = SLOW_LINK_KBIT) -> None:
    """Everything on `lo` in a fast default class, the node's packets in a slow one."""
    _run("tc", "qdisc", "add", "dev", "lo", "root", "handle", "1:", "htb", "default", "1")
    _run(
        "tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:1", "htb", "rate", "10gbit"
    )
    rate = f"{kbit}kbit"
    _run("tc", "class", "add", "dev", "lo", "parent", "1:", "classid", "1:2", "htb", "rate", rate)
    for direction in ("dport", "sport"):
        _run(
            "tc", "filter", "add", "dev", "lo", "parent", "1:", "protocol", "ip", "prio", "1",
            "u32", "match", "ip", direction, str(port), "0xffff", "flowid", "1:2",
        )  # fmt: skip


def restore_link() -> None:
    _run("tc", "qdisc", "del", "dev", "lo", "root")
