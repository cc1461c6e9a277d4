"""`Change`: one record of a partition's change log, as every reader of the feed sees it. Pure.

A node stores each change record as a JSON object in its `change_log` (`rpc.ops`, "Change feed":
the CHANGE schema), written by the same batch as the item it describes. Everything that reads the
log through the transport seam (`rpc.transport.FeedTransport`: the GSI replicator, the Streams
API) receives these typed records instead: the gRPC feed carries them as `ChangeRecord` messages
and the in-process twin as JSON, and both hand the reader a `Change`. `from_record` and
`to_record` are the one translation between the stored object and this type, so a field added to
the record is added here once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

INSERT = "INSERT"
MODIFY = "MODIFY"
REMOVE = "REMOVE"
END = "END"  # The last record of a retired (split or moved) partition's log.
KINDS = frozenset({INSERT, MODIFY, REMOVE, END})


@dataclass(frozen=True, slots=True)
class Change:
    """One change record (`rpc.ops` CHANGE): its seq, kind, key, item images and provenance."""

    seq: int
    kind: str  # INSERT, MODIFY, REMOVE or END
    keys: dict[str, Any] | None
    old: dict[str, Any] | None
    new: dict[str, Any] | None
    by_service: bool = False  # The service made it (a TTL deletion), not a client.
    children: tuple[str, ...] = ()  # END only: the partitions that continue this one's keys.
    at: float = 0.0  # When the change was committed (epoch seconds); 0 for END.

    @property
    def ends_log(self) -> bool:
        return self.kind == END

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Change:
        """The change a stored record (`rpc.ops` CHANGE) describes."""
        kind = record["kind"]
        assert kind in KINDS, f"unknown change kind {kind!r}"
        return cls(
            seq=record["seq"],
            kind=kind,
            keys=record.get("keys"),
            old=record.get("old"),
            new=record.get("new"),
            by_service=bool(record.get("by_service", False)),
            children=tuple(record.get("children") or ()),
            at=record.get("at") or 0.0,
        )

    def to_record(self) -> dict[str, Any]:
        """The stored form of this change (`rpc.ops` CHANGE), as `from_record` reads it."""
        record: dict[str, Any] = {
            "seq": self.seq,
            "kind": self.kind,
            "keys": self.keys,
            "old": self.old,
            "new": self.new,
            "by_service": self.by_service,
        }
        if self.children:
            record["children"] = list(self.children)
        if self.at:
            record["at"] = self.at
        return record
