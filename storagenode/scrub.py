"""Read a node's whole data directory and report what is damaged (`dynalab scrub DIR`).

The storage node finds damage when a read meets it (`storagenode.store`); scrubbing finds it before
a client does. The database is opened read-only, so a directory whose node is running can be
scrubbed too, and every key and value of every column family is read, which makes RocksDB verify
the checksum of every data block it holds. Opening replays the write-ahead log with its record
checksums. A family whose reading stops at damage is reported with the last good key and RocksDB's
finding (the file and the offset); reading does not go on past it, since what follows in that file
is not to be trusted either.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from rocksdict import AccessType, Rdict

from storagenode.layout import FORMAT_KEY, FORMAT_VERSION, Family
from storagenode.store import options


@dataclass
class ScrubReport:
    """What scrubbing one data directory found: keys read per family, and every problem."""

    path: Path
    keys: dict[str, int] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not self.problems


def scrub(path: Path) -> ScrubReport:
    """Read all of the node data directory `path`; the report says what is damaged."""
    report = ScrubReport(path)
    if not (path / "CURRENT").exists():
        report.problems.append(f"{path} holds no dynalab node data (no RocksDB CURRENT file)")
        return report
    families = {family.value: options() for family in Family}
    try:
        db = Rdict(
            str(path), options(), column_families=families, access_type=AccessType.read_only()
        )
    except Exception as error:
        report.problems.append(f"cannot open {path}: {error}")
        return report
    try:
        found = db.get(FORMAT_KEY)
        if found != str(FORMAT_VERSION).encode():
            report.problems.append(f"format version {found!r}, expected {FORMAT_VERSION}")
        for family in Family:
            report.keys[family.value] = _read_family(db.get_column_family(family.value), report)
    finally:
        db.close()
    return report


def _read_family(view: Rdict, report: ScrubReport) -> int:
    iterator = view.iter()
    iterator.seek_to_first()
    count = 0
    last: bytes | None = None
    while iterator.valid():
        last = iterator.key()
        iterator.value()
        count += 1
        iterator.next()
    try:
        iterator.status()
    except Exception as error:
        after = "its first key" if last is None else f"key {last.hex()}"
        report.problems.append(f"reading stopped after {after}: {error}")
    view.close()
    return count
