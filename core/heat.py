"""Split for heat: when a partition throttled at its ceiling should split, and where. Pure.

DynamoDB splits a partition that is throttled at its per-partition ceiling while the table still
has capacity to give, at the point that balances the partition's observed load, and never when a
single key carries nearly all of it (two children would leave that key just as throttled). The
node's splitter feeds this module what it sees each second (`HeatWindow.observe`, one window for
writes and one for reads) and the keys of the partition's recent load, and asks it (`sustained`,
`balancing_key`).

The keys of write load are those of the partition's newest change-log records, which every write
leaves anyway. Reads leave nothing, so the node notes the key of each read it throttles
(`ThrottledKeys`): nothing is added to the path of an admitted read, and while a partition is
throttled its refused reads sample its demand (throttling does not look at keys).

"Capacity to give" in dynalab's throughput model (`core.token_bucket.partition_rates`): a
partition's rate is its share of the table's units capped at 3,000 RCU / 1,000 WCU, and a child
gets half the parent's share. Splitting raises the partition's total only if its share is above
the cap: always for an on-demand table (whose partitions all get the caps) unless its
OnDemandThroughput maximum divided by its partitions is at most the cap, and for a provisioned
one when the table's units divided by its partitions exceed the cap.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping
from typing import Any, Generic, TypeVar

from core import limits


class HeatWindow:
    """Whether one partition was throttled in each check of the last window, from its counter of
    throttled requests (which only grows, and starts again at 0 when the node restarts)."""

    def __init__(self, seconds: float = limits.SPLIT_HEAT_WINDOW_SECONDS) -> None:
        self.seconds = seconds
        self.marks: deque[tuple[float, bool]] = deque()
        self.last_count: int | None = None

    def observe(self, now: float, throttled_requests: int) -> None:
        """Record one check at `now` with the partition's throttled-request counter."""
        throttled = self.last_count is not None and throttled_requests > self.last_count
        self.last_count = throttled_requests
        self.marks.append((now, throttled))
        while self.marks and self.marks[0][0] < now - self.seconds:
            self.marks.popleft()

    def sustained(self, now: float) -> bool:
        """Throttled in at least HEAT_THROTTLED_SHARE_MIN of the checks of a whole window."""
        if len(self.marks) < 2 or self.marks[0][0] > now - self.seconds * 0.9:
            return False
        throttled = sum(1 for _, mark in self.marks if mark)
        return throttled >= limits.HEAT_THROTTLED_SHARE_MIN * len(self.marks)


Ref = TypeVar("Ref", bound=Hashable)


class ThrottledKeys(Generic[Ref]):
    """The storage keys of the newest throttled reads of each partition (`Ref`), at most
    `size` each: the sample a read-heat split balances."""

    def __init__(self, size: int = limits.HEAT_SAMPLE_RECORDS_MAX) -> None:
        self.size = size
        self._keys: dict[Ref, deque[bytes]] = {}

    def note(self, ref: Ref, key: bytes) -> None:
        samples = self._keys.get(ref)
        if samples is None:
            samples = self._keys[ref] = deque(maxlen=self.size)
        samples.append(key)

    def keys(self, ref: Ref) -> list[bytes]:
        return list(self._keys.get(ref, ()))

    def retain(self, refs: Collection[Ref]) -> None:
        """Drop the samples of partitions not in `refs` (split or dropped)."""
        self._keys = {ref: keys for ref, keys in self._keys.items() if ref in refs}


def capacity_to_give(document: Mapping[str, Any] | None, kind: str) -> bool:
    """Whether splitting a partition with these throughput settings (`rpc.ops` THROUGHPUT) raises
    what its range may serve of `kind` ("read" or "write")."""
    if document is None:
        return True
    if document.get("billing_mode") == "PAY_PER_REQUEST":
        # On demand, only an OnDemandThroughput maximum limits the table.
        units = document.get(f"max_{kind}")
        if units is None:
            return True
    else:
        units = document[kind]
    cap = limits.PARTITION_RCU_MAX if kind == "read" else limits.PARTITION_WCU_MAX
    share = float(units) / max(1, int(document.get("partition_count", 1)))
    return share > cap


def balancing_key(
    samples: Iterable[bytes],
    start: bytes,
    collection_of: Callable[[bytes], bytes],
    *,
    inside_collection: bool,
) -> bytes | None:
    """The storage key that splits the sampled load (one sample per request) in two halves as
    nearly as it can; None when one key carries HOT_KEY_LOAD_SHARE_MAX of it or more (a hot key:
    no split helps), or no key has load on both sides. Without `inside_collection` (a table with
    a local index) the key is the start of an item collection."""
    counts: dict[bytes, int] = {}
    for key in samples:
        at = key if inside_collection else collection_of(key)
        counts[at] = counts.get(at, 0) + 1
    total = sum(counts.values())
    if total == 0:
        return None
    ordered = sorted(counts.items())
    # The hottest single item (or collection, when collections cannot split) decides.
    if max(counts.values()) >= limits.HOT_KEY_LOAD_SHARE_MAX * total:
        return None
    below = 0
    best: tuple[float, bytes] | None = None
    for key, count in ordered:
        if below > 0 and key > start:
            distance = abs(below - total / 2)
            if best is None or distance < best[0]:
                best = (distance, key)
        below += count
    return None if best is None else best[1]
