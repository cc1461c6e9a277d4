"""Linearizability of one register key: the search, the smallest set of operations that cannot be
ordered, and the anomaly in words.

`linearize_register` is Wing & Gong's search with Lowe's memoisation, as Porcupine does it (see
`checkers`, whose `linearizable-registers` runs it on every register key): it answers whether an
order exists and, when none does, the deepest partial order it found. That is what the search saw,
not why the history is wrong; a learner needs the few operations that are wrong together.

`minimal_violation` finds them. It removes operations from a key's history as long as what is
left still cannot be ordered, so that no single operation of the result can be removed (a minimal
set, found greedily: not always the smallest possible). Removing operations is only honest when
what is left cannot be ordered *because of the history*, not because of the removal: drop the
write a read saw, and the read looks like it invented its value. So every set tried is *closed*
first (`closure`): with a read (or a conditional write that took effect) comes every write of the
value it saw; with a conditional write refused by its condition whose expected value's write is
kept comes every write that could have replaced that value before the refusal (a write whose
interval meets the span from that write's invocation to the refusal's completion; for an
expected absent item, every write invoked before the refusal completed). A closed subset of a
linearizable history is linearizable: restrict a valid order to it, and every read still follows
the write of its value with no write between, a refused conditional write still follows a write of
another value, and an unknown conditional write that would now act differently may be left out
(an unknown outcome may never have happened). So a closed set that cannot be ordered proves the
whole history cannot be.

`describe` states the anomaly of such a set in words, from the patterns a learner meets most (a
stale read, a read of an absent item after a write, reads going back in time, a read of a value
nobody wrote or of one written later, a conditional write that succeeded on a replaced value or
was refused on the latest one), and otherwise names the operations that cannot be ordered.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from dynalab.lab.history import CAS, READ, WRITE, Operation, Outcome

STATES_MAX = 2_000_000  # Explored (linearized set, value) pairs per key before giving up.
# The bound of each search while minimising: a set the search cannot decide within it is kept as
# if it could be ordered, so the result is still a set proven wrong, if a larger one.
MINIMIZE_STATES_MAX = 50_000
MINIMIZE_SEARCHES_MAX = 400  # Searches one minimisation may run; past it the set found so far.
PREFIX_SHOWN_MAX = 8  # Operations of the deepest linearization quoted in a counterexample.


@dataclass(frozen=True)
class _Call:
    """An operation as the search sees it: `ret_s` None when its outcome is unknown."""

    index: int
    operation: Operation
    call_s: float
    ret_s: float | None


Value = Any


def _step(value: Value, operation: Operation) -> tuple[bool, Value]:
    """The register model: may `operation` take effect on `value`, and what value follows."""
    if operation.op == WRITE:
        return True, operation.value
    if operation.op == READ:
        return operation.value == value, value
    expected, new = operation.value
    if operation.outcome is Outcome.OK:
        return value == expected, new
    if operation.condition_failed:
        return value != expected, value
    # Unknown: if it takes effect, the condition decides whether it writes.
    return True, new if value == expected else value


def search_calls(operations: Sequence[Operation]) -> list[_Call]:
    """The operations that constrain the search: acknowledged ones, conditional writes refused by
    their condition (a definite read of the value), and writes whose outcome is unknown. Reads that
    failed or timed out, and writes refused outright, took no effect and say nothing."""
    calls: list[_Call] = []
    for operation in operations:
        if operation.op not in (WRITE, READ, CAS):
            continue
        if operation.ok or operation.condition_failed:
            ret: float | None = operation.complete_s
        elif operation.outcome is Outcome.UNKNOWN and operation.op != READ:
            ret = None
        else:
            continue
        calls.append(_Call(len(calls), operation, operation.invoke_s, ret))
    return calls


def linearize_register(
    operations: Sequence[Operation], states_max: int = STATES_MAX
) -> tuple[bool | None, dict[str, Any] | None]:
    """Search for a linearization of one register key's operations (initially no item).

    Returns (True, None) when one exists, (False, counterexample) when none does, and (None, None)
    when the search explored `states_max` states without deciding."""
    calls = search_calls(operations)
    # Entries 1..n in time order; at equal times a call sorts before a return, which lets the two
    # operations overlap: the more permissive reading, so a reported violation is a real one.
    entries: list[tuple[float, int, int]] = []
    for call in calls:
        entries.append((call.call_s, 0, call.index))
        if call.ret_s is not None:
            entries.append((call.ret_s, 1, call.index))
    entries.sort()
    size = len(entries)
    head, tail = 0, size + 1
    next_ = list(range(1, size + 3))
    prev = list(range(-1, size + 1))
    is_call = [False] * (size + 2)
    call_of = [0] * (size + 2)
    match = [-1] * (size + 2)  # A call entry's return entry, -1 for an unknown outcome.
    call_entry = [0] * len(calls)
    for position, (_, kind, index) in enumerate(entries, start=1):
        call_of[position] = index
        if kind == 0:
            is_call[position] = True
            call_entry[index] = position
        else:
            match[call_entry[index]] = position

    def lift(entry: int) -> None:
        next_[prev[entry]] = next_[entry]
        prev[next_[entry]] = prev[entry]
        ret = match[entry]
        if ret >= 0:
            next_[prev[ret]] = next_[ret]
            prev[next_[ret]] = prev[ret]

    def unlift(entry: int) -> None:
        ret = match[entry]
        if ret >= 0:
            next_[prev[ret]] = ret
            prev[next_[ret]] = ret
        next_[prev[entry]] = entry
        prev[next_[entry]] = entry

    value: Value = None
    linearized = 0
    seen: set[tuple[int, Value]] = set()
    stack: list[tuple[int, Value]] = []
    deepest: tuple[list[int], int, Value] | None = None
    entry = next_[head]
    while entry != tail:
        if is_call[entry]:
            index = call_of[entry]
            allowed, new_value = _step(value, calls[index].operation)
            if allowed:
                state = (linearized | (1 << index), hashable(new_value))
                if state not in seen:
                    if len(seen) >= states_max:
                        return None, None
                    seen.add(state)
                    stack.append((entry, value))
                    value, linearized = new_value, state[0]
                    lift(entry)
                    entry = next_[head]
                    continue
            entry = next_[entry]
            continue
        # The return of an operation that could not be placed: undo the last choice.
        if deepest is None or len(stack) > len(deepest[0]):
            deepest = ([call_of[e] for e, _ in stack], call_of[entry], value)
        if not stack:
            break
        popped, value = stack.pop()
        linearized &= ~(1 << call_of[popped])
        unlift(popped)
        entry = next_[popped]
    else:
        return True, None
    assert deepest is not None
    order, blocked, stuck_value = deepest
    return False, {
        "linearized_prefix": [calls[i].operation.to_json() for i in order[-PREFIX_SHOWN_MAX:]],
        "value_then": stuck_value,
        "could_not_linearize": calls[blocked].operation.to_json(),
    }


def hashable(value: Value) -> Value:
    """A value as a set member: a list (a list register's value) as a tuple."""
    return tuple(value) if isinstance(value, list) else value


# --- the smallest set that cannot be ordered ----------------------------------------------------


def _writes(operation: Operation) -> Value:
    """The value an operation writes if it takes effect (None: it writes nothing)."""
    if operation.op == WRITE:
        return operation.value
    if operation.op == CAS and not operation.condition_failed:
        return operation.value[1]
    return None


def _attempts(operation: Operation) -> Value:
    """The value a write or conditional write tried to write, whatever came of it."""
    if operation.op == WRITE:
        return operation.value
    return operation.value[1] if operation.op == CAS else None


def _reads(operation: Operation) -> tuple[bool, Value]:
    """(whether it saw a value, the value): a read's, and the expected value of a conditional
    write that took effect or may have."""
    if operation.op == READ:
        return True, operation.value
    if operation.op == CAS and not operation.condition_failed:
        return True, operation.value[0]
    return False, None


def _ret(operation: Operation) -> float:
    return operation.complete_s if operation.outcome is not Outcome.UNKNOWN else float("inf")


class _Closure:
    """`closure` over one key's constraining operations (module docstring), by index."""

    def __init__(self, operations: Sequence[Operation]) -> None:
        self.operations = operations
        self.writers: dict[Value, list[int]] = {}
        self.refusals: dict[Value, list[int]] = {}  # Refused conditional writes by expected value.
        self.all_writes = [i for i, o in enumerate(operations) if _writes(o) is not None]
        for index, operation in enumerate(operations):
            written = _writes(operation)
            if written is not None:
                self.writers.setdefault(hashable(written), []).append(index)
            if operation.condition_failed:
                self.refusals.setdefault(hashable(operation.value[0]), []).append(index)

    def __call__(self, chosen: Iterable[int]) -> frozenset[int]:
        operations = self.operations
        closed = set(chosen)
        pending = list(closed)
        while pending:
            index = pending.pop()
            operation = operations[index]
            needed: list[int] = []
            saw, value = _reads(operation)
            if saw and value is not None:
                needed.extend(self.writers.get(hashable(value), []))
            if operation.condition_failed:
                needed.extend(self._replacers(operation, closed))
            written = _writes(operation)
            if written is not None:
                # A kept write of a refusal's expected value: the refusal needs its replacers.
                for refusal in self.refusals.get(hashable(written), []):
                    if refusal in closed:
                        needed.extend(self._replacers(operations[refusal], closed))
            for more in needed:
                if more not in closed:
                    closed.add(more)
                    pending.append(more)
        return frozenset(closed)

    def _replacers(self, refusal: Operation, closed: set[int]) -> list[int]:
        """The writes that may have replaced a refused conditional write's expected value
        before it was refused, if that value's write is kept (module docstring)."""
        operations = self.operations
        expected = refusal.value[0]
        if expected is None:
            since = float("-inf")
        else:
            kept = [i for i in self.writers.get(hashable(expected), []) if i in closed]
            if not kept:
                return []
            since = min(operations[i].invoke_s for i in kept)
        return [
            i
            for i in self.all_writes
            if operations[i].invoke_s < refusal.complete_s and _ret(operations[i]) > since
        ]


def minimal_violation(
    operations: Sequence[Operation],
    states_max: int = MINIMIZE_STATES_MAX,
    searches_max: int = MINIMIZE_SEARCHES_MAX,
) -> list[Operation] | None:
    """A minimal closed set of one register key's operations that cannot be ordered, in
    invocation order (module docstring); None if the key's operations can be ordered, or the
    search could not decide."""
    considered = [call.operation for call in search_calls(operations)]
    closure = _Closure(considered)
    searches = 0

    def unorderable(chosen: frozenset[int]) -> bool:
        nonlocal searches
        searches += 1
        ordered, _ = linearize_register([considered[i] for i in sorted(chosen)], states_max)
        return ordered is False

    everything = frozenset(range(len(considered)))
    if not unorderable(everything):
        return None
    current = everything
    # First the shortest prefix in time that still cannot be ordered, found by halving: the
    # violation is usually in one short stretch of a long history.
    by_invoke = sorted(current, key=lambda i: considered[i].invoke_s)
    low, high = 1, len(by_invoke)
    while low < high and searches < searches_max:
        middle = (low + high) // 2
        prefix = closure(by_invoke[:middle])
        if len(prefix) < len(current) and unorderable(prefix):
            high = middle
        else:
            low = middle + 1
    prefix = closure(by_invoke[:high])
    if len(prefix) < len(current) and unorderable(prefix):
        current = prefix
    # Then delta debugging: remove chunks, halving them, and at last one operation at a time.
    chunks = 2
    while len(current) > 1 and searches < searches_max:
        members = sorted(current, key=lambda i: considered[i].invoke_s)
        size = max(1, len(members) // chunks)
        reduced = False
        for start in range(0, len(members), size):
            if searches >= searches_max:
                break
            removed = set(members[start : start + size])
            candidate = closure(i for i in members if i not in removed)
            if len(candidate) < len(current) and unorderable(candidate):
                current = candidate
                chunks = max(chunks - 1, 2)
                reduced = True
                break
        if not reduced:
            if size == 1:
                break
            chunks = min(len(members), chunks * 2)
    return sorted((considered[i] for i in current), key=lambda o: (o.invoke_s, o.complete_s))


# --- the anomaly in words -----------------------------------------------------------------------


def _value(value: Value) -> str:
    return "no item" if value is None else repr(value) if not isinstance(value, str) else value


def _when(operation: Operation) -> str:
    if operation.outcome is Outcome.UNKNOWN:
        return f"invoked at {operation.invoke_s:.3f} s, its outcome unknown"
    return f"{operation.invoke_s:.3f}-{operation.complete_s:.3f} s"


def say(operation: Operation) -> str:
    """One operation in words: what it did, who did it, when."""
    client = f"client {operation.process}"
    if operation.op == WRITE:
        return f"the write of {_value(operation.value)} by {client} ({_when(operation)})"
    if operation.op == READ:
        return f"the read by {client} ({_when(operation)}) returning {_value(operation.value)}"
    expected, new = operation.value
    if operation.condition_failed:
        return (
            f"the conditional write of {_value(new)} expecting {_value(expected)} by {client}, "
            f"refused by its condition ({_when(operation)})"
        )
    return (
        f"the conditional write of {_value(new)} expecting {_value(expected)} by {client} "
        f"({_when(operation)})"
    )


@dataclass(frozen=True)
class _Seen:
    """A read, or a conditional write that took effect, and the value it saw."""

    operation: Operation
    value: Value


def describe(key: str, violation: Sequence[Operation], history: Sequence[Operation]) -> str:
    """The anomaly a minimal set of `key`'s operations shows, in one or two sentences; `history`
    is every operation of the key (refused writes included, which the search leaves out)."""
    writers: dict[Value, list[Operation]] = {}
    for operation in violation:
        written = _writes(operation)
        if written is not None:
            writers.setdefault(hashable(written), []).append(operation)
    seen = [
        _Seen(operation, value)
        for operation in violation
        for saw, value in [_reads(operation)]
        if saw and operation.ok
    ]
    acknowledged = [o for o in violation if _writes(o) is not None and o.ok]
    for reader in seen:
        read, value = reader.operation, reader.value
        what = "read" if read.op == READ else "conditional write"
        verb = "returned" if read.op == READ else "succeeded on"
        if value is not None and hashable(value) not in writers:
            refused = [o for o in history if o.outcome is Outcome.FAILED and _attempts(o) == value]
            because = (
                f"which only a write the server refused wrote ({say(refused[0])})"
                if refused
                else "which no write of this key wrote"
            )
            return (
                f"The {what} of {key} by client {read.process} ({_when(read)}) {verb} "
                f"{_value(value)}, {because}."
            )
        if value is not None:
            sources = writers[hashable(value)]
            if all(source.invoke_s > read.complete_s for source in sources):
                return (
                    f"The {what} of {key} by client {read.process} ({_when(read)}) {verb} "
                    f"{_value(value)} before {say(sources[0])} was even invoked."
                )
            for later in acknowledged:
                if later in sources or later.complete_s >= read.invoke_s:
                    continue
                if all(later.invoke_s > source.complete_s for source in sources):
                    return (
                        f"The {what} of {key} by client {read.process} ({_when(read)}) {verb} "
                        f"{_value(value)} after {say(later)} was acknowledged, and that write "
                        f"began after the write of {_value(value)} had been acknowledged (by "
                        f"client {sources[0].process}, at {sources[0].complete_s:.3f} s)."
                    )
            for earlier in seen:
                newer = earlier.value
                if (
                    earlier.operation is read
                    or newer is None
                    or earlier.operation.complete_s >= read.invoke_s
                    or hashable(newer) not in writers
                ):
                    continue
                if all(
                    w.invoke_s > source.complete_s
                    for w in writers[hashable(newer)]
                    for source in sources
                ):
                    return (
                        f"The {what} of {key} by client {read.process} ({_when(read)}) {verb} "
                        f"{_value(value)} after an earlier read had returned {_value(newer)} "
                        f"({say(earlier.operation)}), which was written after {_value(value)}."
                    )
        else:
            done = [w for w in acknowledged if w.complete_s < read.invoke_s]
            if done:
                return (
                    f"The {what} of {key} by client {read.process} ({_when(read)}) found no item "
                    f"after {say(done[0])} had been acknowledged."
                )
    for refusal in (o for o in violation if o.condition_failed):
        expected = refusal.value[0]
        sources = writers.get(hashable(expected), [])
        others = [o for o in violation if _writes(o) is not None and o not in sources]
        if sources and not others:
            return (
                f"The conditional write of {key} by client {refusal.process} "
                f"({_when(refusal)}) expecting {_value(expected)} was refused, although "
                f"{say(sources[0])} was the last write of the key."
            )
    listed = "; ".join(say(o) for o in violation)
    return (
        f"No order of these {len(violation)} operations of {key} is one a single register "
        f"could produce: {listed}."
    )
