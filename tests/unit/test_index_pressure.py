"""The index partitions without write capacity as a base node knows them (`core.index_pressure`):
a base write is refused exactly when an entry it deletes or puts falls in a pressed range of that
index, until the note is released or expires."""

from __future__ import annotations

from core.catalog import IndexDef, IndexStatus
from core.errors import ThrottlingReason
from core.index_pressure import IndexPressure, PressedRange
from core.indexes import entry_changes, entry_shape
from core.keycodec import HASH_SPACE
from core.keys import KeyAttribute, KeyShape
from core.placement import hash_bound
from core.values import Item

TABLE = "t" * 32
SHAPE = KeyShape((KeyAttribute("pk", "S", "partition"),))
BY_GAME = IndexDef(
    "ByGame", KeyShape((KeyAttribute("game", "S", "partition"),)), "KEYS_ONLY", IndexStatus.ACTIVE
)
BY_LEVEL = IndexDef(
    "ByLevel", KeyShape((KeyAttribute("level", "N", "partition"),)), "ALL", IndexStatus.ACTIVE
)
GAME_REASON = ThrottlingReason("IndexWriteProvisionedThroughputExceeded", "T/index/ByGame")
LEVEL_REASON = ThrottlingReason("IndexWriteKeyRangeThroughputExceeded", "T/index/ByLevel")
MIDDLE = bytes.fromhex(hash_bound(HASH_SPACE // 2))  # The two halves of a two-partition index.


def item(pk: str, game: str | None = None, level: int | None = None, **rest: str) -> Item:
    made: Item = {"pk": {"S": pk}}
    if game is not None:
        made["game"] = {"S": game}
    if level is not None:
        made["level"] = {"N": str(level)}
    made.update({name: {"S": value} for name, value in rest.items()})
    return made


def games_in(low: bool, count: int) -> list[str]:
    """`count` game names whose ByGame entries fall in the lower (or upper) half of the index."""
    shape = entry_shape(BY_GAME, SHAPE)
    found = []
    number = 0
    while len(found) < count:
        game = f"game-{number}"
        key = shape.storage_key(item("any", game))
        if (key < MIDDLE) == low:
            found.append(game)
        number += 1
    return found


def refusals(
    pressure: IndexPressure, old: Item | None, new: Item | None, now: float = 0.0
) -> tuple[ThrottlingReason, ...]:
    changes = entry_changes(old, new, (BY_GAME, BY_LEVEL), SHAPE)
    return pressure.refusals(TABLE, changes, SHAPE, now)


def pressed_low_half(until: float = 10.0) -> IndexPressure:
    pressure = IndexPressure()
    pressure.press(TABLE, "ByGame", "g-0", PressedRange(b"", MIDDLE, GAME_REASON, until), 0.0)
    return pressure


def test_a_write_putting_an_entry_in_a_pressed_partition_is_refused_and_others_pass() -> None:
    pressure = pressed_low_half()
    [low] = games_in(True, 1)
    [high] = games_in(False, 1)
    assert refusals(pressure, None, item("a", low)) == (GAME_REASON,)
    assert refusals(pressure, None, item("a", high)) == ()  # The index's other partition.
    assert refusals(pressure, None, item("a")) == ()  # No entry: a sparse index.
    assert refusals(pressure, None, item("a", level=3)) == ()  # Another index only.


def test_deleting_or_moving_an_entry_out_of_a_pressed_partition_is_a_write_to_it() -> None:
    pressure = pressed_low_half()
    [low] = games_in(True, 1)
    [high] = games_in(False, 1)
    assert refusals(pressure, item("a", low), None) == (GAME_REASON,)  # Its entry is deleted.
    assert refusals(pressure, item("a", low), item("a", high)) == (GAME_REASON,)
    assert refusals(pressure, item("a", high), item("a", low)) == (GAME_REASON,)
    # An attribute the KEYS_ONLY index does not project leaves its entry as it is.
    assert refusals(pressure, item("a", low), item("a", low, note="x")) == ()


def test_every_pressed_index_a_write_changes_is_named_once_in_order() -> None:
    pressure = pressed_low_half()
    pressure.press(TABLE, "ByLevel", "l-0", PressedRange(b"", None, LEVEL_REASON, 10.0), 0.0)
    pressure.press(TABLE, "ByGame", "g-1", PressedRange(MIDDLE, None, GAME_REASON, 10.0), 0.0)
    low, high = games_in(True, 1) + games_in(False, 1)
    assert refusals(pressure, item("a", low, 1), item("a", high, 2)) == (GAME_REASON, LEVEL_REASON)
    # Another table's writes are not held back.
    changes = entry_changes(None, item("a", low, 1), (BY_GAME, BY_LEVEL), SHAPE)
    assert pressure.refusals("u" * 32, changes, SHAPE, 0.0) == ()


def test_a_note_holds_until_it_expires_or_is_released() -> None:
    [low] = games_in(True, 1)
    pressure = pressed_low_half(until=5.0)
    assert refusals(pressure, None, item("a", low), now=4.9) == (GAME_REASON,)
    assert refusals(pressure, None, item("a", low), now=5.0) == ()
    # Renewed: holds again; released: gone at once.
    pressure.press(TABLE, "ByGame", "g-0", PressedRange(b"", MIDDLE, GAME_REASON, 9.0), 5.0)
    assert refusals(pressure, None, item("a", low), now=6.0) == (GAME_REASON,)
    pressure.release(TABLE, "ByGame", "g-0", 6.0)
    assert refusals(pressure, None, item("a", low), now=6.0) == ()
    pressure.release(TABLE, "ByGame", "g-0", 6.0)  # Releasing what is not pressed: nothing.


def test_expired_notes_are_forgotten_at_the_next_change() -> None:
    pressure = pressed_low_half(until=5.0)
    other = PressedRange(b"", None, GAME_REASON, 20.0)
    pressure.press("u" * 32, "ByGame", "g-0", other, 1.0)
    assert len(pressure) == 2
    pressure.press("u" * 32, "ByGame", "g-1", other, 6.0)
    assert len(pressure) == 2  # The first table's note expired at 5.
    pressure.release("u" * 32, "ByGame", "g-0", 21.0)
    assert len(pressure) == 0
