"""Damaged data is reported, never read as missing: RocksDB's block and log checksums surface as
typed errors naming the directory and the partition, and `dynalab scrub` finds them all.

Each test writes through a real `Store`, closes it (which flushes to an SST file), flips bytes in
the middle of a file on disk, and opens it again.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from core.errors import InternalServerError
from dynalab.cli import main as dynalab_main
from rpc import ops
from storagenode.layout import Family
from storagenode.node import StorageNode
from storagenode.scrub import scrub
from storagenode.store import DataCorruption, Store, StoreCorruption
from tests import envelope
from tests.damage import damage_table_blocks, flip_byte

TABLE = {"id": "c0" * 16, "name": "T", "key_schema": {"hash": ["pk", "S"], "range": None}}
PARTITION = {"id": "p0", "start": "", "end": None, "epoch": 1, "node": "n1"}
ITEMS = 3000


def write_items(path: Path) -> None:
    store = Store(path)
    node = StorageNode(store)
    envelope.apply(node, [(ops.CREATE_PARTITION, {"table": TABLE, "partition": PARTITION})])
    target = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1}
    for start in range(0, ITEMS, 100):
        puts = [
            (ops.PUT, {**target, "item": {"pk": {"S": f"k{i:05d}"}, "v": {"S": "x" * 100}}})
            for i in range(start, start + 100)
        ]
        envelope.apply(node, puts)
    store.close()


def test_a_damaged_block_fails_reads_and_walks_instead_of_hiding_items(tmp_path: Path) -> None:
    data = tmp_path / "node-7"
    write_items(data)
    damage_table_blocks(data)
    store = Store(data)
    node = StorageNode(store)
    try:
        with pytest.raises(DataCorruption, match=r"node-7.*is corrupt"):
            sum(1 for _ in store.walk(Family.ITEMS, b"", None, forward=True))
        with pytest.raises(DataCorruption):
            sum(1 for _ in store.walk(Family.ITEMS, b"", None, forward=False))
        scan = {"table_id": TABLE["id"], "partition_id": "p0", "epoch": 1, "limit": ITEMS}
        with pytest.raises(DataCorruption, match="reading partition p0 of table c0") as failure:
            while True:  # Page through the partition until a page meets the damage.
                reply = envelope.read(node, ops.SCAN, scan)
                if reply.get("last_key") is None:
                    break
                scan["exclusive_start"] = reply["last_key"]
        assert isinstance(failure.value, InternalServerError)
    finally:
        store.close()


def test_scrub_reports_the_damaged_file_and_passes_a_sound_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sound, damaged = tmp_path / "sound", tmp_path / "damaged"
    write_items(sound)
    write_items(damaged)
    ssts = damage_table_blocks(damaged)
    assert scrub(sound).ok and scrub(sound).keys["items"] == ITEMS
    report = scrub(damaged)
    assert not report.ok
    assert any("checksum mismatch" in problem for problem in report.problems), report.problems
    assert any(sst.name in problem for sst in ssts for problem in report.problems)
    assert dynalab_main(["scrub", str(sound)]) == 0
    assert dynalab_main(["scrub", str(sound), str(damaged)]) == 1
    assert "damaged" in capsys.readouterr().out


def test_a_damaged_log_refuses_to_open_rather_than_drop_acknowledged_writes(
    tmp_path: Path,
) -> None:
    """RocksDB's default recovery drops the log from a damaged record on, synced writes
    included; the store refuses to open instead. Killed before closing, the writes are in the
    write-ahead log only."""
    data = tmp_path / "node"
    child = os.fork()
    if child == 0:  # pragma: no cover - the child is killed before it could report anything
        store = Store(data)
        batch = store.batch()
        for i in range(500):
            batch.put(Family.ITEMS, f"k{i:05d}".encode(), b"v" * 100)
            if i % 10 == 9:
                store.commit(batch)
                batch = store.batch()
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(child, 0)
    (log,) = [wal for wal in data.glob("*.log") if wal.stat().st_size > 0]
    flip_byte(log, 0.5)
    with pytest.raises(StoreCorruption, match="does not start on damaged data"):
        Store(data)
    assert not scrub(data).ok


def test_a_torn_last_log_record_from_a_kill_is_dropped_and_the_rest_kept(tmp_path: Path) -> None:
    data = tmp_path / "node"
    child = os.fork()
    if child == 0:  # pragma: no cover
        store = Store(data)
        for i in range(100):
            batch = store.batch()
            batch.put(Family.ITEMS, f"k{i:05d}".encode(), b"v" * 100)
            store.commit(batch)
        os.kill(os.getpid(), signal.SIGKILL)
    os.waitpid(child, 0)
    (log,) = [wal for wal in data.glob("*.log") if wal.stat().st_size > 0]
    os.truncate(log, log.stat().st_size - 20)  # The last record, as a kill mid-write leaves it.
    store = Store(data)
    try:
        assert sum(1 for _ in store.walk(Family.ITEMS, b"", None, forward=True)) == 99
    finally:
        store.close()
