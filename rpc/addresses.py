"""How services are told where the storage nodes are: `HOST:PORT` and `NODE_ID=HOST:PORT,...`.

The router and the GSI replicator take the same `--listen` and `--nodes` flags (and the same
DYNALAB_LISTEN / DYNALAB_NODES variables); these parsers are their `argparse` types.
"""

from __future__ import annotations

import argparse


def parse_address(text: str) -> tuple[str, int]:
    """HOST:PORT as (host, port)."""
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, not {text!r}")
    return host, int(port)


def parse_nodes(text: str) -> dict[str, str]:
    """`node-1=HOST:PORT,node-2=HOST:PORT,...` as {node id: address}."""
    nodes: dict[str, str] = {}
    for entry in text.split(","):
        node_id, sep, address = entry.strip().partition("=")
        if not sep or not node_id:
            raise argparse.ArgumentTypeError(f"expected NODE_ID=HOST:PORT, not {entry!r}")
        parse_address(address)
        if node_id in nodes:
            raise argparse.ArgumentTypeError(f"node {node_id} is listed twice")
        nodes[node_id] = address
    return nodes
