"""The node's RocksDB database, read directly and written in synced batches with an overlay.

RocksDB (through `rocksdict`) is the node's one embedded engine: ordered keys of any length (the
first stage's LMDB bounded keys at 511 bytes, below DynamoDB's 2048 + 1024), consistent iterators,
column families, `delete_range`, and the checkpoints and SST ingestion that moving a partition will
use. The byte layout is in `layout.py`.

Writes go through a `WriteBatchView` (`Store.batch()`): the group committer plans every write of a
group against the batch, which answers reads from its own pending writes first (the overlay), so
each write sees every earlier one of its group, and then `Store.commit` writes the whole batch
atomically with the WAL synced. A committed batch has been fsynced: an acknowledged write survives
kill -9 and power loss. Only the group committer's thread writes; readers on other threads read
the database directly and never see a batch before it commits.

A data directory records its format version; a directory of another version, including the first
stage's LMDB one, is refused with a message naming both versions rather than misread.

Corruption is detected, never read as missing data. RocksDB checksums every block of its files and
every record of its write-ahead log. A damaged block fails the read that meets it, and an iterator
that meets one stops, so every walk checks the iterator's status when it ends; both raise
`DataCorruption` (a 500 naming the data directory, to which the node adds the partition). At open,
the log is replayed in `tolerate_corrupted_tail_records` mode: an incomplete last record (a batch
being written when the process was killed, never acknowledged) is dropped, but a checksum mismatch
anywhere refuses to open (`StoreCorruption`) instead of RocksDB's default, which silently drops the
log from the damage on, acknowledged writes included. `storagenode.scrub` reads a whole directory.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import orjson
from rocksdict import (
    AccessType,
    DBRecoveryMode,
    Options,
    Rdict,
    RdictIter,
    WriteBatch,
    WriteOptions,
)

from core import limits
from core.errors import InternalServerError
from storagenode import metrics
from storagenode.layout import FORMAT_KEY, FORMAT_VERSION, Family

_LMDB_DATA_FILE = "data.mdb"  # The file that marks a data directory of format 1.
_ROCKSDB_CURRENT_FILE = "CURRENT"
_LOG_FILES_KEPT = 3

logger = logging.getLogger(__name__)


class StoreFormatError(Exception):
    """The data directory holds data of another format version than this node reads."""


class StoreCorruption(Exception):
    """The data directory is damaged: the database cannot be opened without losing data."""


class DataCorruption(InternalServerError):
    """A read met damaged data. Its message names the data directory and RocksDB's finding (the
    file and offset); `within` adds where the node was reading."""

    def within(self, where: str) -> DataCorruption:
        return DataCorruption(f"{self.message} (reading {where})")


def _corruption(path: Path, error: Exception) -> Exception:
    """The error to raise for an exception from RocksDB: corruption typed, anything else as is."""
    if "Corruption" in str(error):
        return DataCorruption(f"The data in {path} is corrupt: {error}")
    return error


def options(memory_table_bytes: int | None = None) -> Options:
    """The database's options (also those of every column family).

    `memory_table_bytes` bounds the memory tables of all column families together and the live
    write-ahead log: what a restart replays and flushes, and so the disk space it needs.
    """
    settings = Options(raw_mode=True)
    settings.create_if_missing(True)
    settings.create_missing_column_families(True)
    settings.set_keep_log_file_num(_LOG_FILES_KEPT)
    settings.set_wal_recovery_mode(DBRecoveryMode.tolerate_corrupted_tail_records())
    if memory_table_bytes is not None:
        settings.set_db_write_buffer_size(memory_table_bytes)
        settings.set_max_total_wal_size(memory_table_bytes)
    return settings


class _Reader(Protocol):
    def get(self, family: Family, key: bytes) -> bytes | None: ...


# One recorded write of a batch: (PUT, family, key, value), (DELETE, family, key, None) or
# (DELETE_RANGE, family, lo, hi). The store the batch commits to replays them in order.
PUT, DELETE, DELETE_RANGE = "put", "delete", "delete_range"
BatchOp = tuple[str, Family, bytes, bytes | None]


class WriteBatchView:
    """A batch of writes not yet committed, readable through its overlay.

    `get` answers from the batch's own puts, deletes and range deletes first, then from the
    store, which is what makes the writes of one group commit see each other. The writes are
    recorded in order in `ops`; the store's `commit` applies them (`Store` as one RocksDB
    WriteBatch, `MemoryStore` to its dictionaries), so every store shares this overlay.
    """

    def __init__(self, store: _Reader) -> None:
        self._store = store
        self.ops: list[BatchOp] = []
        self._overlay: dict[tuple[Family, bytes], bytes | None] = {}
        self._deleted_ranges: list[tuple[Family, bytes, bytes]] = []

    def get(self, family: Family, key: bytes) -> bytes | None:
        pending = self._overlay.get((family, key), self)
        if pending is not self:
            return pending  # type: ignore[return-value]
        for deleted_family, lo, hi in self._deleted_ranges:
            if deleted_family is family and lo <= key < hi:
                return None
        return self._store.get(family, key)

    def put(self, family: Family, key: bytes, value: bytes) -> None:
        self._overlay[family, key] = value
        self.ops.append((PUT, family, key, value))

    def delete(self, family: Family, key: bytes) -> None:
        self._overlay[family, key] = None
        self.ops.append((DELETE, family, key, None))

    def delete_range(self, family: Family, lo: bytes, hi: bytes) -> None:
        """Delete every key in [lo, hi) of one family, pending puts included."""
        for pending in [k for k in self._overlay if k[0] is family and lo <= k[1] < hi]:
            self._overlay[pending] = None
        self._deleted_ranges.append((family, lo, hi))
        self.ops.append((DELETE_RANGE, family, lo, hi))

    def written(self, family: Family, lo: bytes, hi: bytes) -> list[bytes]:
        """The keys in [lo, hi) of one family this batch puts (a walk of the store misses them)."""
        return [
            key
            for (pending_family, key), value in self._overlay.items()
            if pending_family is family and lo <= key < hi and value is not None
        ]

    def __len__(self) -> int:
        return len(self.ops)


class NodeStore(Protocol):
    """What a storage node needs of its store: `Store` (RocksDB) or `MemoryStore` (simulation)."""

    def get(self, family: Family, key: bytes) -> bytes | None: ...

    def walk(
        self, family: Family, lo: bytes, hi: bytes | None, *, forward: bool
    ) -> Iterator[tuple[bytes, bytes]]: ...

    def batch(self) -> WriteBatchView: ...

    def commit(self, batch: WriteBatchView) -> None: ...

    def load_partition_metas(self) -> list[dict[str, object]]: ...

    def free_bytes(self) -> int: ...

    @property
    def disk_reserve_bytes(self) -> int: ...

    @property
    def read_only(self) -> bool: ...

    def close(self) -> None: ...


class Store:
    """A node's RocksDB database with its column families."""

    def __init__(self, path: Path, *, disk_reserve_bytes: int = limits.DISK_RESERVE_BYTES) -> None:
        path.mkdir(parents=True, exist_ok=True)
        _check_format(path)
        created = not (path / _ROCKSDB_CURRENT_FILE).exists()
        self.path = path
        # Free space kept on the disk (see core.limits.DISK_RESERVE_BYTES); a quarter of it bounds
        # the memory tables, so a restart's recovery flush fits in what is kept.
        self.disk_reserve_bytes = disk_reserve_bytes
        memory_table_bytes = max(1 * limits.MIB, self.disk_reserve_bytes // 4)
        families = {family.value: options(memory_table_bytes) for family in Family}
        # A node that starts on a full disk serves reads: RocksDB cannot open for writing there
        # (it writes a new manifest and flushes its log), so it opens read-only, replaying the
        # log in memory, and the node refuses every write until it is restarted with space.
        self.read_only = False
        try:
            self._db = Rdict(str(path), options(memory_table_bytes), column_families=families)
        except Exception as error:
            # RocksDB holds a lock on its directory; a second node there would act on stale
            # partition metadata, so a held lock is refused with a clear message.
            # RocksDB names the directory's LOCK file ("block" would match a bare "lock").
            if f"{path}/LOCK" in str(error):
                raise OSError(f"{path} is in use by another storage node") from None
            if "Corruption" in str(error):
                raise StoreCorruption(
                    f"{path} is corrupt ({error}); the node does not start on damaged data. "
                    f"`dynalab scrub {path}` reads all of it and lists what is damaged."
                ) from None
            if "No space left on device" not in str(error) or created:
                raise
            logger.warning("%s opens read-only: its disk is full (%s)", path, error)
            self._db = Rdict(
                str(path),
                options(memory_table_bytes),
                column_families=families,
                access_type=AccessType.read_only(),
            )
            self.read_only = True
        self._families = {family: self._db.get_column_family(family.value) for family in Family}
        self._handles = {
            family: self._db.get_column_family_handle(family.value) for family in Family
        }
        self._sync = WriteOptions()
        self._sync.sync = True
        metrics.watch_store(path)
        if created:
            self._db.put(FORMAT_KEY, str(FORMAT_VERSION).encode(), self._sync)
        else:
            found = self._db.get(FORMAT_KEY)
            if found != str(FORMAT_VERSION).encode():
                self.close()
                raise StoreFormatError(
                    f"{path} holds dynalab data of format version "
                    f"{'unknown' if found is None else found.decode()}; this node reads version "
                    f"{FORMAT_VERSION}. Start it with another --data-dir."
                )

    def close(self) -> None:
        """Close the database; callers must have finished every read and commit.

        RocksDB releases its directory lock only once nothing refers to the database any more,
        so the family views and handles are closed and dropped first.
        """
        for family in self._families.values():
            family.close()
        self._families.clear()
        self._handles.clear()
        self._db.close()

    def handle(self, family: Family) -> object:
        return self._handles[family]

    def get(self, family: Family, key: bytes) -> bytes | None:
        try:
            value: bytes | None = self._families[family].get(key)
        except Exception as error:
            raise _corruption(self.path, error) from None
        return value

    def walk(
        self, family: Family, lo: bytes, hi: bytes | None, *, forward: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        """Keys lo <= key < hi (hi None: to the end) in key order or reverse key order.

        The walk reads one consistent view of the database: the iterator is made by this call,
        not by the first step, and pins the state of that moment, whatever commits meanwhile
        (so a walk made on the writer thread between two commits sees exactly the committed
        state there, read later on another thread: `split.pin`).
        """
        return self._rows(self._families[family].iter(), lo, hi, forward=forward)

    def _rows(
        self, iterator: RdictIter, lo: bytes, hi: bytes | None, *, forward: bool
    ) -> Iterator[tuple[bytes, bytes]]:
        if forward:
            iterator.seek(lo)
            while iterator.valid():
                key = iterator.key()
                if hi is not None and key >= hi:
                    return
                yield key, iterator.value()
                iterator.next()
        else:
            if hi is None:
                iterator.seek_to_last()
            else:
                # The last key below hi: seek_for_prev lands on hi itself when it exists.
                iterator.seek_for_prev(hi)
                if iterator.valid() and iterator.key() >= hi:
                    iterator.prev()
            while iterator.valid():
                key = iterator.key()
                if key < lo:
                    return
                yield key, iterator.value()
                iterator.prev()
        self._check(iterator)

    def values(self, family: Family) -> Iterator[bytes]:
        """Every value of a family, in key order."""
        iterator = self._families[family].iter()
        iterator.seek_to_first()
        while iterator.valid():
            yield iterator.value()
            iterator.next()
        self._check(iterator)

    def _check(self, iterator: RdictIter) -> None:
        """An iterator also stops at damaged data: only its status tells that from the end."""
        try:
            iterator.status()
        except Exception as error:
            raise _corruption(self.path, error) from None

    def batch(self) -> WriteBatchView:
        return WriteBatchView(self)

    def commit(self, batch: WriteBatchView) -> None:
        """Write the batch atomically and fsync the WAL before returning."""
        if not batch.ops:
            return
        write_batch = WriteBatch(raw_mode=True)
        handles = self._handles
        for kind, family, key, value in batch.ops:
            if kind == PUT:
                write_batch.put(key, value, handles[family])
            elif kind == DELETE:
                write_batch.delete(key, handles[family])
            else:
                assert value is not None  # A range delete's upper bound.
                write_batch.delete_range(key, value, handles[family])
        started = time.perf_counter()
        self._db.write(write_batch, self._sync)
        metrics.wal_sync_seconds.observe(time.perf_counter() - started)

    def load_partition_metas(self) -> list[dict[str, object]]:
        return [orjson.loads(value) for value in self.values(Family.PARTITIONS)]

    def live_files(self) -> list[tuple[str, bytes, int]]:
        """The database's SST files: (name in the directory, first key, bytes)."""
        return [
            (str(meta["name"]), bytes(meta["start_key"]), int(meta["size"]))
            for meta in self._db.live_files()
        ]

    def free_bytes(self) -> int:
        """Free space on the disk holding the database, for writes to keep the reserve."""
        return shutil.disk_usage(self.path).free


def _check_format(path: Path) -> None:
    """Refuse a directory written by dynalab's first, LMDB-based format."""
    if (path / _LMDB_DATA_FILE).exists():
        raise StoreFormatError(
            f"{path} holds dynalab data of format version 1 (LMDB, keys of at most 511 bytes); "
            f"this node reads version {FORMAT_VERSION} (RocksDB). Start it with another "
            "--data-dir; the data of version 1 is not converted."
        )
