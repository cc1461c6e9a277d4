"""Parse and evaluation rates of the expression package, for typical expressions, cold and cached.

    python bench/expressions.py [--seconds 0.5]

For each expression kind it prints operations per CPU second (one core) for:

- parse (cold): tokenize and parse the text, as the first request carrying it does;
- compile (cold): the whole facade call with the parse cache cleared every time;
- compile (cached): the facade call for a text parsed before (placeholders bound, checked and
  compiled), which is what every later request costs;
- evaluate / apply / match: running the compiled expression against an item, which a Scan filter
  does once per item read.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from core import expressions  # noqa: E402
from core.expressions import parser  # noqa: E402

CONDITION = "attribute_exists(#a) AND b > :x AND begins_with(c, :p)"
CONDITION_NAMES = {"#a": "a"}
CONDITION_VALUES = {":x": {"N": "5"}, ":p": {"S": "ab"}}
UPDATE = "SET #c = if_not_exists(#c, :zero) + :one, tags = list_append(tags, :t) REMOVE stale"
UPDATE_NAMES = {"#c": "count"}
UPDATE_VALUES = {":zero": {"N": "0"}, ":one": {"N": "1"}, ":t": {"L": [{"S": "new"}]}}
KEY = "pk = :pk AND sk BETWEEN :lo AND :hi"
KEY_VALUES = {":pk": {"S": "user#42"}, ":lo": {"S": "2024-01"}, ":hi": {"S": "2024-12"}}
PROJECTION = "a, b.c, l[1], #n"
ITEM = {
    "pk": {"S": "user#42"},
    "sk": {"S": "2024-06"},
    "a": {"S": "present"},
    "b": {"N": "6"},
    "c": {"S": "abc"},
    "count": {"N": "41"},
    "tags": {"L": [{"S": "x"}]},
    "stale": {"BOOL": True},
    "l": {"L": [{"N": "1"}, {"N": "2"}]},
    "body": {"S": "x" * 200},
}


def rate(operation: Callable[[], object], seconds: float) -> float:
    """Calls per CPU second of ``operation``, timed in batches for at least ``seconds``.

    CPU time of this process, not wall time, so that other processes sharing the machine's cores
    slow the measurement down as little as possible.
    """
    batch, calls, elapsed = 100, 0, 0.0
    while elapsed < seconds:
        start = time.process_time()
        for _ in range(batch):
            operation()
        elapsed += time.process_time() - start
        calls += batch
        batch = min(batch * 2, 20_000)
    return calls / elapsed


def cold(operation: Callable[[], object]) -> Callable[[], object]:
    def uncached() -> object:
        expressions.clear_caches()
        return operation()

    return uncached


def main() -> None:
    arguments = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    arguments.add_argument("--seconds", type=float, default=0.5, help="time per measurement")
    seconds = arguments.parse_args().seconds

    def condition() -> expressions.Condition:
        return expressions.condition(CONDITION, CONDITION_NAMES, CONDITION_VALUES)

    def update() -> expressions.Update:
        return expressions.update(UPDATE, UPDATE_NAMES, UPDATE_VALUES)

    def key() -> expressions.KeyCondition:
        return expressions.key_condition(KEY, None, KEY_VALUES, "pk", "sk")

    def projection() -> expressions.Projection:
        return expressions.projection(PROJECTION, {"#n": "n"})

    compiled_condition, compiled_update = condition(), update()
    compiled_key, compiled_projection = key(), projection()
    assert compiled_condition.evaluate(ITEM)
    range_condition = compiled_key.range
    assert range_condition is not None and range_condition.matches(ITEM["sk"])

    rows = [
        ("condition", "parse (cold)", lambda: parser.parse_condition(CONDITION)),
        ("condition", "compile (cold)", cold(condition)),
        ("condition", "compile (cached)", condition),
        ("condition", "evaluate", lambda: compiled_condition.evaluate(ITEM)),
        ("condition", "compile+evaluate", lambda: condition().evaluate(ITEM)),
        ("update", "parse (cold)", lambda: parser.parse_update(UPDATE)),
        ("update", "compile (cold)", cold(update)),
        ("update", "compile (cached)", update),
        ("update", "apply", lambda: compiled_update.apply(ITEM)),
        ("key condition", "parse (cold)", lambda: parser.parse_condition(KEY)),
        ("key condition", "compile (cold)", cold(key)),
        ("key condition", "compile (cached)", key),
        ("key condition", "match sort key", lambda: range_condition.matches(ITEM["sk"])),
        ("projection", "compile (cached)", projection),
        ("projection", "apply", lambda: compiled_projection.apply(ITEM)),
    ]
    print(f"{'expression':<15}{'operation':<20}{'ops/s':>12}  {'µs/op':>8}")
    for kind, operation, function in rows:
        per_second = rate(function, seconds)
        print(f"{kind:<15}{operation:<20}{per_second:>12,.0f}  {1e6 / per_second:>8.2f}")
    print()
    print(f"condition: {CONDITION}")
    print(f"update:    {UPDATE}")
    print(f"key:       {KEY}")
    print(f"projection: {PROJECTION}")


if __name__ == "__main__":
    main()
