"""The node's LMDB environment and the byte layout of everything kept in it.

One environment per node holds four named databases, so that an item, its change-log record and its
partition's metadata commit in one atomic, synced transaction:

- `items`: 16-byte table id + `core.keycodec.encode_storage_key(pk, sk)` -> orjson item. Because the
  storage key starts with the partition key's hash and is order-preserving, a partition is a
  contiguous key range and a Query is a cursor range scan.
- `changelog`: 16-byte table id + 1-byte length + partition id + 8-byte big-endian seq -> orjson
  `{seq, kind, keys, old, new}`. The table id and the length prefix keep one partition's records
  contiguous and apart from any other's, whatever its id.
- `partitions`: 16-byte table id + partition id -> orjson partition metadata (see `partition.py`).
- `catalog`: one document, the cluster catalog, updated only by compare-and-set.

LMDB's default durability is kept (sync and metasync on, no writemap): a committed transaction has
been fsynced, so an acknowledged write survives kill -9 and power loss.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lmdb
import orjson

from core.errors import ValidationError

TABLE_ID_BYTES = 16
SEQ_BYTES = 8
PARTITION_ID_BYTES_MAX = 255  # The change-log key gives a partition id's length one byte.
CATALOG_KEY = b"catalog"
LOCK_FILE = "node.lock"
_DATABASES = (b"items", b"changelog", b"partitions", b"catalog")


def table_prefix(table_id: str) -> bytes:
    """The 16 bytes that start every items key of a table (its id is 32 hex characters)."""
    try:
        prefix = bytes.fromhex(table_id)
    except (TypeError, ValueError):
        prefix = b""
    if len(prefix) != TABLE_ID_BYTES:
        raise ValidationError(f"A table id is {2 * TABLE_ID_BYTES} hex characters: {table_id!r}")
    return prefix


def change_log_prefix(table_id: str, partition_id: str) -> bytes:
    """The bytes before the seq in every change-log key of one partition."""
    encoded = partition_id.encode()
    if not encoded or len(encoded) > PARTITION_ID_BYTES_MAX:
        raise ValidationError(f"A partition id is 1 to {PARTITION_ID_BYTES_MAX} bytes")
    return table_prefix(table_id) + bytes([len(encoded)]) + encoded


def partition_meta_key(table_id: str, partition_id: str) -> bytes:
    return table_prefix(table_id) + partition_id.encode()


class Store:
    """The LMDB environment with its named databases, and the cursor walks the node needs."""

    def __init__(self, path: Path, map_size: int) -> None:
        path.mkdir(parents=True, exist_ok=True)
        # LMDB itself tolerates several processes, but each node keeps partition metadata in memory,
        # so a second node on the same directory would act on stale metadata: refuse it.
        self._lock_fd = os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self._lock_fd)
            raise OSError(f"{path} is in use by another storage node") from None
        self.env = lmdb.open(str(path), map_size=map_size, max_dbs=len(_DATABASES))
        self.items, self.changelog, self.partitions, self.catalog = (
            self.env.open_db(name) for name in _DATABASES
        )

    def close(self) -> None:
        """Close the environment; callers must have finished every transaction."""
        self.env.close()
        os.close(self._lock_fd)

    def begin_read(self) -> lmdb.Transaction:
        return self.env.begin(buffers=False)

    def begin_write(self) -> lmdb.Transaction:
        return self.env.begin(write=True, buffers=False)

    def load_partition_metas(self) -> list[dict[str, Any]]:
        with self.begin_read() as txn:
            return [orjson.loads(value) for _, value in txn.cursor(db=self.partitions)]

    def walk(
        self, txn: lmdb.Transaction, lo: bytes, hi: bytes | None, *, forward: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Items with lo <= key < hi (hi None: to the end), in key order or reverse key order."""
        cursor = txn.cursor(db=self.items)
        if forward:
            if not cursor.set_range(lo):
                return
            for key, value in cursor.iternext():
                if hi is not None and key >= hi:
                    return
                yield key, value
            return
        # Start at the last key below hi: the one before hi's position, or the very last one.
        positioned = cursor.last() if hi is None or not cursor.set_range(hi) else cursor.prev()
        if not positioned:
            return
        for key, value in cursor.iterprev():
            if key < lo:
                return
            yield key, value

    def delete_range(self, txn: lmdb.Transaction, db: Any, lo: bytes, hi: bytes | None) -> int:
        """Delete every key in [lo, hi) of one database; return how many were deleted."""
        cursor = txn.cursor(db=db)
        deleted = 0
        positioned = cursor.set_range(lo)
        while positioned and (hi is None or cursor.key() < hi):
            # Cursor.delete removes the current record and moves to the next one; past the last
            # record the cursor is left unpositioned, with an empty key (no real key is empty).
            cursor.delete()
            deleted += 1
            positioned = bool(cursor.key())
        return deleted
