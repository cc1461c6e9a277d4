"""Damaging a node's data directory on purpose, for the corruption tests (unit and integration).

A byte is flipped a third into each SST file that holds many blocks of a table's items or change
records, where data blocks lie: the index and footer at a file's end, which RocksDB reads when it
opens, stay whole. Files of the Raft logs are left alone: a node reads its logs when it opens (a
damaged log refuses to start it, as a damaged write-ahead log does), and these tests are about
damaged data met by reads.
"""

from __future__ import annotations

from pathlib import Path

from storagenode.layout import table_prefix
from storagenode.store import Store

SST_BYTES_MIN = 64 * 1024  # An SST file this large holds several data blocks.


def flip_byte(path: Path, fraction: float) -> None:
    size = path.stat().st_size
    with path.open("r+b") as file:
        file.seek(int(size * fraction))
        byte = file.read(1)
        file.seek(int(size * fraction))
        file.write(bytes([byte[0] ^ 0xFF]))


def damage_table_blocks(data_dir: Path) -> list[Path]:
    """Damage the large SST files of the tables a stopped node's directory holds; returns them."""
    store = Store(data_dir)
    try:
        prefixes = {table_prefix(str(meta["table_id"])) for meta in store.load_partition_metas()}
        files = store.live_files()
    finally:
        store.close()
    ssts = sorted(
        data_dir / name.lstrip("/")
        for name, start_key, size in files
        if size > SST_BYTES_MIN and any(start_key.startswith(prefix) for prefix in prefixes)
    )
    for sst in ssts:
        flip_byte(sst, 1 / 3)
    return ssts
