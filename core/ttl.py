"""Time To Live: which items expire, and where each one sits in a partition's expiry index.

DynamoDB's rules (Developer Guide, "Time to Live (TTL)", seed 002 and the checklist's T- rules):
the TTL attribute holds an expiry time in epoch seconds (T-03); an item is expired once that time
is less than the current time (T-02: a value equal to now is not yet expired); only a top-level
Number counts, and an item without the attribute, with another type, or with a time more than five
years in the past is never deleted by TTL (T-12, T-13). Expired items stay readable until the
sweeper deletes them (T-06).

The expiry index orders a table's items by `index_seconds` (the floor of their expiry time) so that
a sweep walks only the entries up to the current second (`sweep_bound`): every entry below that
second holds an expired item (an entry at second s holds a time below s + 1), and the entries of
the current second are expired or expire within it. Whether an item has an entry is decided when
it is written, against the clock of that write; the sweeper decides again, with `expired`, when
it deletes, so an entry of the current second whose time is not yet past is left for later.

Pure: the time is always passed in.
"""

from __future__ import annotations

import math
from decimal import Decimal, InvalidOperation

from core import limits
from core.values import Item

# The largest second an index key holds (8 bytes): an expiry time past it is indexed there, which
# no clock reaches.
INDEX_SECONDS_MAX = 2**64 - 1


def expiry_time(item: Item | None, attribute: str) -> Decimal | None:
    """The item's TTL value as a number of epoch seconds; None when it has none that counts (no
    such attribute, or one that is not a Number)."""
    if item is None:
        return None
    value = item.get(attribute)
    if not isinstance(value, dict) or "N" not in value:
        return None
    try:
        return Decimal(value["N"])
    except (InvalidOperation, TypeError):
        return None


def index_seconds(item: Item | None, attribute: str, now: float) -> int | None:
    """Where the item sits in the expiry index, as of `now`: the floor of its expiry time, or None
    when TTL will never delete it (no Number there, or a time more than five years before now)."""
    expires = expiry_time(item, attribute)
    if expires is None or expires < Decimal(now) - limits.TTL_PAST_SECONDS_MAX:
        return None
    return min(max(math.floor(expires), 0), INDEX_SECONDS_MAX)


def expired(item: Item | None, attribute: str, now: float) -> bool:
    """Whether TTL deletes the item at `now`: its time is a Number below now and not more than
    five years before it."""
    if index_seconds(item, attribute, now) is None:
        return False
    expires = expiry_time(item, attribute)
    assert expires is not None
    return expires < Decimal(now)


def sweep_bound(now: float) -> int:
    """The exclusive upper bound, in index seconds, of the entries a sweep at `now` reads: those
    of every second up to the current one."""
    return max(math.floor(now), 0) + 1
