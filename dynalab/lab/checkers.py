"""Checkers: pure functions from a history to a verdict, each with its counterexamples.

Each checker answers one question about what the clients saw, and `check` runs them all:

- `linearizable-registers`: could every register key's strongly consistent reads, writes and
  conditional writes have taken effect one at a time, each at some instant between its invocation
  and its completion? A search in the style of Wing & Gong and Lowe, as Porcupine does it: the
  history is split by key (linearizability is compositional, so each key is checked alone),
  operations become call and return entries in time order in a linked list, and the search
  linearizes a pending call when the register model allows it, backtracks when it meets the
  return of an operation it could not place, and prunes every (set of linearized operations,
  register value) pair it has already explored. An operation whose outcome is unknown has no
  return: it may take effect at any time after its call, or never. The search is bounded by
  `STATES_MAX` explored pairs per key; a key past it is reported undecided, not valid. The
  search is `linearizable`'s, which also gives each violating key's counterexample a minimal
  set of operations that cannot be ordered (`violation`) and the anomaly in words (`anomaly`).
- `failed-writes-invisible`: no read shows a value that only a write the server refused wrote.
- `acknowledged-writes-kept`: every acknowledged list append is in the list once faults healed.
- `no-duplicate-writes`: no appended element is in the list twice.
- `list-order`: two acknowledged appends that did not overlap in time are in the list in that order.
- `counters`: after the faults, each counter is at least the sum of its acknowledged ADDs (none
  lost) and at most that plus the unknown ones (none applied twice, none refused and applied).
- `bank`: every TransactGetItems of all the bank's accounts, during the faults and after, adds up
  to the opening total with no negative balance (no transfer applied on one side only, no read of
  half a transfer).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from dynalab.lab.history import (
    ADD,
    APPEND,
    BALANCES,
    CAS,
    INDEX_READ,
    INDEX_SCAN,
    INDEX_WRITE,
    OPENING_BALANCE,
    READ,
    TRANSFER,
    WRITE,
    Operation,
    Outcome,
    final_reads,
)
from dynalab.lab.linearizable import (
    STATES_MAX,
    describe,
    hashable,
    linearize_register,
    minimal_violation,
)

COUNTEREXAMPLES_MAX = 20  # Counterexamples kept per checker; the count says how many there were.
# Keys whose violation is minimised and put in words (`linearizable`), each a few searches more.
EXPLAINED_KEYS_MAX = 5


@dataclass
class CheckResult:
    valid: bool
    counterexamples: list[dict[str, Any]] = field(default_factory=list)
    violations: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def add(self, counterexample: dict[str, Any]) -> None:
        self.valid = False
        self.violations += 1
        if len(self.counterexamples) < COUNTEREXAMPLES_MAX:
            self.counterexamples.append(counterexample)

    def to_json(self) -> dict[str, Any]:
        return {
            "valid": self.valid,
            "violations": self.violations,
            "counterexamples": self.counterexamples,
            **self.details,
        }


def _keys_with(history: Iterable[Operation], ops: set[str]) -> dict[str, list[Operation]]:
    """Every operation on the keys that have at least one operation of `ops`."""
    history = list(history)
    keys = {o.key for o in history if o.op in ops}
    grouped: dict[str, list[Operation]] = {key: [] for key in sorted(keys)}
    for operation in history:
        if operation.key in grouped:
            grouped[operation.key].append(operation)
    return grouped


# --- linearizability of registers ---------------------------------------------------------------


def check_linearizable_registers(
    history: Iterable[Operation], states_max: int = STATES_MAX
) -> CheckResult:
    result = CheckResult(valid=True)
    undecided = []
    keys = _keys_with(history, {WRITE, CAS})
    for key, operations in keys.items():
        linearizable, counterexample = linearize_register(operations, states_max)
        if linearizable is None:
            undecided.append(key)
        elif not linearizable:
            assert counterexample is not None
            if result.violations < EXPLAINED_KEYS_MAX:
                violation = minimal_violation(operations)
                if violation is not None:
                    counterexample["violation"] = [o.to_json() for o in violation]
                    counterexample["anomaly"] = describe(key, violation, operations)
            result.add({"key": key, **counterexample})
    result.details = {"keys": len(keys), "undecided_keys": undecided}
    return result


# --- what reads and final states show -----------------------------------------------------------


def _written_values(operations: Iterable[Operation]) -> dict[Any, list[Operation]]:
    writers: dict[Any, list[Operation]] = {}
    for operation in operations:
        if operation.op == WRITE:
            writers.setdefault(hashable(operation.value), []).append(operation)
        elif operation.op == CAS:
            writers.setdefault(hashable(operation.value[1]), []).append(operation)
        elif operation.op == APPEND:
            writers.setdefault(operation.value, []).append(operation)
    return writers


def _refused(operation: Operation) -> bool:
    return operation.outcome is Outcome.FAILED


def check_failed_writes_invisible(history: Iterable[Operation]) -> CheckResult:
    """No read of a register, and no final list, shows what only refused writes wrote, nor a
    value nobody wrote."""
    history = list(history)
    result = CheckResult(valid=True)
    writers = _written_values(history)
    for read in history:
        if read.op != READ or not read.ok or read.value is None:
            continue
        if isinstance(read.value, list):
            seen = read.value
        elif isinstance(read.value, str):
            seen = [read.value]
        else:
            continue  # A counter's number: the counters checker judges it.
        for value in seen:
            candidates = [w for w in writers.get(value, []) if w.key == read.key]
            if not candidates:
                result.add({"key": read.key, "read": read.to_json(), "never_written": value})
            elif all(_refused(w) for w in candidates):
                result.add(
                    {
                        "key": read.key,
                        "read": read.to_json(),
                        "refused_write": candidates[0].to_json(),
                    }
                )
    return result


def check_lists(history: Iterable[Operation]) -> dict[str, CheckResult]:
    """The list checkers: acknowledged appends kept, none twice, acknowledged ones in order."""
    kept, once, order = CheckResult(True), CheckResult(True), CheckResult(True)
    history = list(history)
    finals = final_reads(history)
    for key, operations in _keys_with(history, {APPEND}).items():
        appends = [o for o in operations if o.op == APPEND]
        final = finals.get(key)
        if final is None:
            kept.add({"key": key, "problem": "no successful final read of the list"})
            continue
        elements: list[Any] = list(final.value or [])
        position = {element: i for i, element in enumerate(elements)}
        for element in sorted({e for e in elements if elements.count(e) > 1}):
            once.add({"key": key, "element": element, "times": elements.count(element)})
        for append in appends:
            if append.ok and append.value not in position:
                kept.add({"key": key, "lost": append.to_json(), "final": elements})
        acknowledged = [a for a in appends if a.ok and a.value in position]
        by_completion = sorted(acknowledged, key=lambda a: a.complete_s)
        latest: Operation | None = None  # The furthest-placed append completed before this one.
        cursor = 0
        for append in sorted(acknowledged, key=lambda a: a.invoke_s):
            while (
                cursor < len(by_completion) and by_completion[cursor].complete_s < append.invoke_s
            ):
                done = by_completion[cursor]
                if latest is None or position[done.value] > position[latest.value]:
                    latest = done
                cursor += 1
            if latest is not None and position[latest.value] > position[append.value]:
                order.add({"key": key, "earlier": latest.to_json(), "later": append.to_json()})
    return {"acknowledged-writes-kept": kept, "no-duplicate-writes": once, "list-order": order}


def check_counters(history: Iterable[Operation]) -> CheckResult:
    """acknowledged ADDs <= final value <= acknowledged + unknown ADDs, for every counter."""
    history = list(history)
    result = CheckResult(valid=True)
    finals = final_reads(history)
    totals = {}
    for key, operations in _keys_with(history, {ADD}).items():
        adds = [o for o in operations if o.op == ADD]
        acknowledged = sum(o.value for o in adds if o.ok)
        unknown = sum(o.value for o in adds if o.outcome is Outcome.UNKNOWN)
        final = finals.get(key)
        if final is None:
            result.add({"key": key, "problem": "no successful final read of the counter"})
            continue
        value = final.value or 0
        totals[key] = {"acknowledged": acknowledged, "unknown": unknown, "final": value}
        if value < acknowledged:
            result.add(
                {
                    "key": key,
                    "problem": "acknowledged ADDs lost",
                    "final": value,
                    "acknowledged": acknowledged,
                    "missing": acknowledged - value,
                }
            )
        elif value > acknowledged + unknown:
            result.add(
                {
                    "key": key,
                    "problem": "more than every acknowledged and unknown ADD: one applied twice, "
                    "or a refused one applied",
                    "final": value,
                    "acknowledged": acknowledged,
                    "unknown": unknown,
                    "excess": value - acknowledged - unknown,
                }
            )
    result.details = {"totals": totals}
    return result


# --- the indexed workload (`indexed`) -----------------------------------------------------------


def check_index_reads_real(history: list[Operation]) -> CheckResult:
    """Every entry an index read returned was put by a write with that key, group and value,
    invoked before the read returned and not refused: stale reads are allowed, phantoms not."""
    result = CheckResult(valid=True)
    writes: dict[tuple[str, str], list[Operation]] = {}
    for operation in history:
        if operation.op == INDEX_WRITE:
            writes.setdefault((operation.key, operation.value[1]), []).append(operation)
    for read in history:
        if read.op != INDEX_READ or not read.ok:
            continue
        for key, value in read.value:
            candidates = [
                w
                for w in writes.get((key, value), [])
                if w.value[0] == read.key and w.invoke_s < read.complete_s
            ]
            if not candidates:
                result.add({"read": read.to_json(), "never_written": [key, read.key, value]})
            elif all(w.outcome is Outcome.FAILED for w in candidates):
                result.add({"read": read.to_json(), "refused_write": candidates[0].to_json()})
    return result


def check_index_converged(history: list[Operation]) -> CheckResult:
    """The final scans: the index holds exactly the projection of the table."""
    result = CheckResult(valid=True)
    finals = [o for o in history if o.op == INDEX_SCAN and o.final]
    if not any(o.op == INDEX_WRITE for o in history):
        return result
    if not finals or not finals[-1].ok:
        result.add({"problem": "no successful final scan of the table and its index"})
        return result
    scanned = finals[-1].value
    expected = [row for row in scanned["items"] if row[1] is not None]
    missing = [row for row in expected if row not in scanned["entries"]]
    extra = [row for row in scanned["entries"] if row not in expected]
    for row in missing:
        result.add({"problem": "an item's entry is missing from the index", "entry": row})
    for row in extra:
        result.add({"problem": "the index holds an entry no item projects", "entry": row})
    result.details = {"items": len(scanned["items"]), "entries": len(scanned["entries"])}
    return result


def check_bank(history: Iterable[Operation]) -> CheckResult:
    """Transactions kept the bank whole: every balance read (TransactGetItems of every account,
    during the faults and after) adds up to the opening total and holds no negative balance, and
    a final read exists. A transfer applied on one account and not the other, or a read that saw
    one half of a transfer, breaks the total."""
    history = list(history)
    reads = [o for o in history if o.op == BALANCES]
    result = CheckResult(valid=True)
    if not reads and not any(o.op == TRANSFER for o in history):
        return result
    total: int | None = None
    checked = 0
    for read in reads:
        if not read.ok:
            continue
        balances = read.value
        if any(balance is None for balance in balances.values()):
            result.add({"problem": "an account is missing", "read": read.to_json()})
            continue
        expected = OPENING_BALANCE * len(balances)
        total = sum(balances.values())
        checked += 1
        if total != expected:
            result.add(
                {
                    "problem": "the balances do not add up",
                    "expected": expected,
                    "read": read.to_json(),
                }
            )
        if any(balance < 0 for balance in balances.values()):
            result.add({"problem": "a negative balance", "read": read.to_json()})
    if not any(read.final and read.ok for read in reads):
        result.add({"problem": "no successful final read of the balances"})
    transfers = [o for o in history if o.op == TRANSFER]
    result.details = {
        "reads_checked": checked,
        "final_total": total,
        "transfers": {
            outcome.value: sum(o.outcome is outcome for o in transfers) for outcome in Outcome
        },
    }
    return result


CHECKERS: dict[str, Callable[[list[Operation]], CheckResult]] = {
    "linearizable-registers": check_linearizable_registers,
    "failed-writes-invisible": check_failed_writes_invisible,
    "counters": check_counters,
    "index-reads-real": check_index_reads_real,
    "index-converged": check_index_converged,
    "bank": check_bank,
}


def check(history: Iterable[Operation]) -> dict[str, Any]:
    """Run every checker: `{"valid": bool, "checkers": {name: {"valid": bool, ...}}}`."""
    operations = list(history)
    results = {name: checker(operations) for name, checker in CHECKERS.items()}
    results.update(check_lists(operations))
    ops = [o for o in operations if not o.final]
    summary = {outcome.value: sum(o.outcome is outcome for o in ops) for outcome in Outcome}
    return {
        "valid": all(r.valid for r in results.values()),
        "operations": {"total": len(ops), **summary},
        "checkers": {name: r.to_json() for name, r in sorted(results.items())},
    }
