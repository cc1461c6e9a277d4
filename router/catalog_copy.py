"""The router's own copy of the last catalog it read, kept in its state directory.

The catalog lives in one partition on one storage node (`router.context`). A router that is
already running keeps serving item operations from its cached catalog while that node is down;
a router *starting* while it is down used to have no catalog at all, so every request failed,
even for partitions on healthy nodes. With a state directory (`--state-dir`), a router writes
every catalog it has read to `catalog.json` there, and a router starting on that directory loads
it before serving: its item operations reach the partitions on healthy nodes at once. The copy is
only ever a cache. It is not trusted for anything a stale map could break: a node refuses a
request whose partition epoch is not its own (`StaleEpoch`), the router then re-reads the catalog
and, while the catalog's node is down, answers 503; every table operation reads or writes the
catalog itself.

The file is replaced atomically (written to a temporary file, synced, renamed over the old one,
and the directory synced), so a crash leaves the previous copy or the new one, never a torn file.
A copy that cannot be read (damaged, or written by an incompatible version) is ignored with a
warning: the router then starts as one without a copy would.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path

import orjson

from core.catalog import TableDef

log = logging.getLogger("router.catalog_copy")

COPY_FILE_NAME = "catalog.json"
# The layout of the file; a copy of another format is ignored rather than misread.
COPY_FORMAT = 1


def save(state_dir: Path, records: Mapping[str, TableDef]) -> None:
    """Replace the copy in `state_dir` with `records`, atomically and durably."""
    state_dir.mkdir(parents=True, exist_ok=True)
    document = {
        "format": COPY_FORMAT,
        "tables": [records[name].to_json() for name in sorted(records)],
    }
    path = state_dir / COPY_FILE_NAME
    temporary = state_dir / f".{COPY_FILE_NAME}.tmp"
    with open(temporary, "wb") as file:
        file.write(orjson.dumps(document))
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
    directory = os.open(state_dir, os.O_RDONLY)
    try:
        os.fsync(directory)
    finally:
        os.close(directory)


def load(state_dir: Path) -> dict[str, TableDef]:
    """The copy in `state_dir` by table name; empty when there is none or it cannot be read."""
    path = state_dir / COPY_FILE_NAME
    try:
        document = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        return {}
    except (OSError, orjson.JSONDecodeError) as error:
        log.warning("ignoring the catalog copy %s: %s", path, error)
        return {}
    if not isinstance(document, dict) or document.get("format") != COPY_FORMAT:
        log.warning("ignoring the catalog copy %s: not of format %d", path, COPY_FORMAT)
        return {}
    try:
        records = [TableDef.from_json(table) for table in document["tables"]]
    except (KeyError, TypeError, ValueError) as error:
        log.warning("ignoring the catalog copy %s: %r", path, error)
        return {}
    return {record.name: record for record in records}
