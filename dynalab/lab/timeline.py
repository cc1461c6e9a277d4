"""The message timeline of a simulated run: every message between its processes, on the run's clock.

In simulation every call between processes crosses one in-process network (`rpc.local`): a
router's calls to the nodes, the GSI replicator's, a node's own splitter and mover, and the change
feed's batches. With a trace set the network hands each one to a `Timeline` as an `rpc.local.Hop`;
the simulated lab adds its clients' requests to the router and the router's replies. Each becomes a
`Message`: who sent it to whom (one *lane* per process), when it left and arrived in seconds since
the workload started (the history's clock), and what became of it (delivered, dropped, late, the
error it carried).

A message sent while a client's operation is being served carries that operation (`Request`: the
client, the history's op and its keys), read from a context variable the workload sets around
each request (`serving`): asyncio copies it into every task the request starts, so a router's
calls to the nodes on behalf of one PutItem carry its key. That is what lets the report draw the
messages of one key.

`Mark`s are points on a lane with a label, drawn as flags on the diagram: the place for what a
process *is* at an instant rather than what it sends (a Raft leader taking office and its term,
once the replicated cluster's Raft messages cross `rpc.raft_local` with a trace of their own).

The whole timeline is written as one JSON file (`timeline.json` in a run's directory), messages as
arrays in `FIELDS` order to keep it small; `report` draws it.
"""

from __future__ import annotations

import contextlib
import contextvars
import json
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

FILE_NAME = "timeline.json"
CLIENT_LANE_PREFIX = "client-"
# Lane order in the diagram: clients, then routers, nodes and replicators, each by name.
LANE_ORDER = ("client", "router", "node", "replicator")


@dataclass(frozen=True)
class Request:
    """The lab operation a message serves: the client (`process`), the history's op, its keys."""

    process: int
    op: str
    keys: tuple[str, ...]


SERVING: contextvars.ContextVar[Request | None] = contextvars.ContextVar("serving", default=None)


@contextlib.contextmanager
def serving(process: int, op: str, keys: Iterable[str]) -> Iterator[None]:
    """Mark the messages sent from here on (and from the tasks started here) as serving one
    operation of client `process`."""
    token = SERVING.set(Request(process, op, tuple(keys)))
    try:
        yield
    finally:
        SERVING.reset(token)


class HopLike(Protocol):
    """What the network traces (`rpc.local.Hop`)."""

    @property
    def call_id(self) -> int: ...
    @property
    def kind(self) -> str: ...
    @property
    def source(self) -> str: ...
    @property
    def destination(self) -> str: ...
    @property
    def op(self) -> str: ...
    @property
    def sent_at(self) -> float: ...
    @property
    def arrived_at(self) -> float | None: ...
    @property
    def fate(self) -> str: ...
    @property
    def detail(self) -> str: ...


FIELDS = (
    "call",
    "kind",
    "source",
    "destination",
    "op",
    "sent_s",
    "arrived_s",
    "fate",
    "detail",
    "process",
    "keys",
)


@dataclass(frozen=True)
class Message:
    """One message: `arrived_s` None when it never arrived; `process` and `keys` the client
    operation it serves (None and () when it serves none: a catalog refresh, a feed batch)."""

    call: str
    kind: str
    source: str
    destination: str
    op: str
    sent_s: float
    arrived_s: float | None
    fate: str
    detail: str = ""
    process: int | None = None
    keys: tuple[str, ...] = ()

    @property
    def lost(self) -> bool:
        return self.arrived_s is None

    def to_row(self) -> list[Any]:
        return [
            self.call,
            self.kind,
            self.source,
            self.destination,
            self.op,
            round(self.sent_s, 6),
            None if self.arrived_s is None else round(self.arrived_s, 6),
            self.fate,
            self.detail,
            self.process,
            list(self.keys),
        ]

    @classmethod
    def from_row(cls, row: list[Any]) -> Message:
        record = dict(zip(FIELDS, row, strict=True))
        return cls(
            call=str(record["call"]),
            kind=str(record["kind"]),
            source=str(record["source"]),
            destination=str(record["destination"]),
            op=str(record["op"]),
            sent_s=float(record["sent_s"]),
            arrived_s=None if record["arrived_s"] is None else float(record["arrived_s"]),
            fate=str(record["fate"]),
            detail=str(record["detail"]),
            process=None if record["process"] is None else int(record["process"]),
            keys=tuple(str(key) for key in record["keys"]),
        )


@dataclass(frozen=True)
class Mark:
    """A labelled instant on one lane (a Raft leader and its term, later)."""

    at_s: float
    lane: str
    label: str
    kind: str = "note"

    def to_json(self) -> dict[str, Any]:
        return {
            "at_s": round(self.at_s, 6),
            "lane": self.lane,
            "label": self.label,
            "kind": self.kind,
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Mark:
        return cls(
            float(record["at_s"]), str(record["lane"]), str(record["label"]), str(record["kind"])
        )


def lane_sort_key(lane: str) -> tuple[int, int, str]:
    """Clients first, then routers, nodes, replicators; by number within each, then by name."""
    for rank, prefix in enumerate(LANE_ORDER):
        if lane.startswith(prefix):
            digits = "".join(c for c in lane[len(prefix) :] if c.isdigit())
            return rank, int(digits) if digits else 0, lane
    return len(LANE_ORDER), 0, lane


def client_lane(process: int) -> str:
    return f"{CLIENT_LANE_PREFIX}{process}"


@dataclass
class Timeline:
    """The messages and marks of one run, on the history's clock: `origin` is the network's clock
    (Unix time, virtual in simulation) at the history's zero; `names` turns a node's address into
    its lane."""

    origin: float
    names: Mapping[str, str] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    marks: list[Mark] = field(default_factory=list)

    def lane(self, endpoint: str) -> str:
        return self.names.get(endpoint, endpoint) or "unnamed"

    def hop(self, hop: HopLike) -> None:
        """Record one message of the network (`rpc.local.LocalNetwork.trace`)."""
        request = SERVING.get()
        self.messages.append(
            Message(
                call=f"n{hop.call_id}",
                kind=hop.kind,
                source=self.lane(hop.source),
                destination=self.lane(hop.destination),
                op=hop.op,
                sent_s=hop.sent_at - self.origin,
                arrived_s=None if hop.arrived_at is None else hop.arrived_at - self.origin,
                fate=hop.fate,
                detail=hop.detail,
                process=None if request is None else request.process,
                keys=() if request is None else request.keys,
            )
        )

    def add(self, message: Message) -> None:
        self.messages.append(message)

    def mark(self, mark: Mark) -> None:
        self.marks.append(mark)

    def lanes(self) -> list[str]:
        named = {lane for m in self.messages for lane in (m.source, m.destination)}
        named.update(mark.lane for mark in self.marks)
        return sorted(named, key=lane_sort_key)

    def to_json(self) -> dict[str, Any]:
        return {
            "fields": list(FIELDS),
            "lanes": self.lanes(),
            "messages": [m.to_row() for m in self.messages],
            "marks": [mark.to_json() for mark in self.marks],
        }

    @classmethod
    def from_json(cls, record: dict[str, Any]) -> Timeline:
        if record.get("fields") != list(FIELDS):
            raise ValueError(f"a timeline's fields are {list(FIELDS)}, not {record.get('fields')}")
        return cls(
            origin=0.0,
            messages=[Message.from_row(row) for row in record["messages"]],
            marks=[Mark.from_json(mark) for mark in record.get("marks", [])],
        )

    def write(self, directory: Path) -> None:
        (directory / FILE_NAME).write_text(json.dumps(self.to_json(), separators=(",", ":")))


def read(directory: Path) -> Timeline | None:
    """The timeline a run left in `directory` (None: it has none, as a real-process run)."""
    path = directory / FILE_NAME
    if not path.exists():
        return None
    return Timeline.from_json(json.loads(path.read_text()))


def of_key(messages: Iterable[Message], key: str) -> list[Message]:
    """The messages serving an operation on `key`."""
    return [m for m in messages if key in m.keys]


def in_window(messages: Iterable[Message], start_s: float, end_s: float) -> list[Message]:
    """The messages in flight at some instant of [start_s, end_s] (a lost one until it left)."""
    return [
        m
        for m in messages
        if m.sent_s <= end_s and (m.arrived_s if m.arrived_s is not None else m.sent_s) >= start_s
    ]
