"""The lab's checkers on known good and known bad histories, including histories recorded from a
deliberately broken register that acknowledges writes before they are durable."""

import json
import random

import pytest

from dynalab.lab import checkers
from dynalab.lab.history import (
    ADD,
    APPEND,
    CAS,
    CONDITION_FAILED,
    INDEX_READ,
    INDEX_SCAN,
    INDEX_WRITE,
    READ,
    WRITE,
    Operation,
    Outcome,
    classify,
    parse_lines,
)

OK, FAILED, UNKNOWN = Outcome.OK, Outcome.FAILED, Outcome.UNKNOWN


def op(process, kind, key, value, invoke, complete, outcome=OK, error=None, final=False):
    return Operation(process, kind, key, value, invoke, complete, outcome, error, final)


def test_outcomes_follow_the_status():
    assert classify(200) is OK
    assert classify(400) is FAILED
    assert classify(503) is FAILED
    assert classify(500) is UNKNOWN


def test_operations_round_trip_through_json_lines():
    original = [
        op(1, CAS, "r1", ["a", "b"], 0.5, 0.75, FAILED, CONDITION_FAILED),
        op(2, READ, "c1", 7, 1.0, 1.5, final=True),
    ]
    lines = [json.dumps(o.to_json()) for o in original]
    assert list(parse_lines(lines)) == original


# --- linearizability ---------------------------------------------------------------------------


def test_sequential_register_history_is_linearizable():
    history = [
        op(1, WRITE, "r", "a", 0, 1),
        op(1, READ, "r", "a", 2, 3),
        op(2, CAS, "r", ["a", "b"], 4, 5),
        op(2, CAS, "r", ["a", "c"], 6, 7, FAILED, CONDITION_FAILED),
        op(1, READ, "r", "b", 8, 9),
    ]
    result = checkers.check_linearizable_registers(history)
    assert result.valid and result.counterexamples == []


def test_concurrent_operations_may_take_effect_in_either_order():
    history = [
        op(1, WRITE, "r", "a", 0, 10),
        op(2, WRITE, "r", "b", 1, 9),
        op(3, READ, "r", "a", 11, 12),
        op(4, READ, "r", "a", 2, 3),  # Overlaps both writes: "a" landed first here...
    ]
    assert checkers.check_linearizable_registers(history).valid


def test_stale_read_after_acknowledged_write_is_caught():
    history = [
        op(1, WRITE, "r", "a", 0, 1),
        op(1, WRITE, "r", "b", 2, 3),
        op(2, READ, "r", "a", 4, 5),  # "b" was acknowledged before this read began.
    ]
    result = checkers.check_linearizable_registers(history)
    assert not result.valid
    example = result.counterexamples[0]
    assert example["key"] == "r"
    assert example["could_not_linearize"]["value"] == "a"
    assert example["value_then"] == "b"


def test_reads_cannot_go_back_in_time():
    history = [
        op(1, WRITE, "r", "a", 0, 1),
        op(2, WRITE, "r", "b", 2, 10),
        op(3, READ, "r", "b", 3, 4),
        op(4, READ, "r", "a", 5, 6),  # "b" was already seen by a read that completed.
    ]
    assert not checkers.check_linearizable_registers(history).valid


def test_unknown_write_may_or_may_not_take_effect():
    applied = [
        op(1, WRITE, "r", "a", 0, 1),
        op(2, WRITE, "r", "b", 2, 3, UNKNOWN, "InternalServerError"),
        op(3, READ, "r", "b", 10, 11),
    ]
    not_applied = [*applied[:2], op(3, READ, "r", "a", 10, 11)]
    assert checkers.check_linearizable_registers(applied).valid
    assert checkers.check_linearizable_registers(not_applied).valid


def test_unknown_write_cannot_take_effect_before_it_was_sent():
    history = [
        op(1, WRITE, "r", "a", 0, 1),
        op(3, READ, "r", "b", 2, 3),
        op(2, WRITE, "r", "b", 5, 6, UNKNOWN, "InternalServerError"),
    ]
    assert not checkers.check_linearizable_registers(history).valid


def test_refused_write_takes_no_effect():
    history = [
        op(1, WRITE, "r", "a", 0, 1),
        op(2, WRITE, "r", "b", 2, 3, FAILED, "ServiceUnavailable"),
        op(3, READ, "r", "b", 4, 5),
    ]
    assert not checkers.check_linearizable_registers(history).valid
    visible = checkers.check_failed_writes_invisible(history)
    assert not visible.valid
    assert visible.counterexamples[0]["refused_write"]["value"] == "b"


def test_conditional_write_refused_by_its_condition_is_a_read():
    history = [
        op(1, WRITE, "r", "a", 0, 1),
        op(2, CAS, "r", ["a", "b"], 2, 3, FAILED, CONDITION_FAILED),  # But the value was "a".
    ]
    assert not checkers.check_linearizable_registers(history).valid


def test_search_gives_up_past_its_bound_rather_than_guessing():
    history = [op(p, WRITE, "r", f"v{p}", 0, 10) for p in range(12)]
    history.append(op(99, READ, "r", "nobody", 11, 12))
    result = checkers.check_linearizable_registers(history, states_max=50)
    assert result.details["undecided_keys"] == ["r"]


def test_keys_are_checked_independently():
    history = [
        op(1, WRITE, "x", "a", 0, 1),
        op(1, WRITE, "y", "b", 2, 3),
        op(2, READ, "x", "a", 4, 5),
        op(2, READ, "y", "a", 6, 7),  # "a" was written to x, never to y.
    ]
    result = checkers.check_linearizable_registers(history)
    assert [c["key"] for c in result.counterexamples] == ["y"]
    assert checkers.check_failed_writes_invisible(history).counterexamples[0]["never_written"]


class AckBeforeCommitRegister:
    """A register with the bug the lab exists to catch: it acknowledges a write before it is
    durable, and a crash loses the writes since the last flush."""

    def __init__(self):
        self.durable = None
        self.memory = None

    def write(self, value):
        self.memory = value

    def flush(self):
        self.durable = self.memory

    def crash(self):
        self.memory = self.durable

    def read(self):
        return self.memory


def simulated_history(register, seed, operations=3000, crash_every=None):
    """Clients take turns on one key, sequentially; with `crash_every`, the register crashes."""
    rng = random.Random(seed)
    history, now = [], 0.0
    for n in range(operations):
        process = rng.randrange(5)
        if crash_every and n % crash_every == crash_every - 1:
            register.crash()
        if rng.random() < 0.5:
            value = f"{process}-{n}"
            register.write(value)
            if rng.random() < 0.1:
                register.flush()
            history.append(op(process, WRITE, "r", value, now, now + 0.5))
        else:
            history.append(op(process, READ, "r", register.read(), now, now + 0.5))
        now += 1.0
    return history


def test_a_correct_register_passes_on_thousands_of_operations():
    register = AckBeforeCommitRegister()
    history = simulated_history(register, seed=1)  # No crash: the bug never shows.
    assert checkers.check_linearizable_registers(history).valid


def test_acknowledging_before_commit_is_caught_with_a_counterexample():
    register = AckBeforeCommitRegister()
    history = simulated_history(register, seed=2, crash_every=97)
    result = checkers.check_linearizable_registers(history)
    assert not result.valid
    example = result.counterexamples[0]
    prefix_values = [o["value"] for o in example["linearized_prefix"]]
    assert example["value_then"] in prefix_values
    assert example["could_not_linearize"]["op"] == READ


def test_many_concurrent_clients_on_many_keys_stay_linearizable():
    # A correct register hit by 8 overlapping clients: each operation takes effect at a random
    # instant inside its own interval, so the history is linearizable by construction.
    rng = random.Random(3)
    effects = []
    for n in range(20000):
        key = f"r{n % 20}"
        process = n % 8
        start = n * 0.001
        end = start + rng.uniform(0.001, 0.01)
        effects.append((rng.uniform(start, end), key, process, start, end, n))
    effects.sort()
    values: dict[str, str | None] = {}
    history = []
    for _, key, process, start, end, n in effects:
        if n % 3 == 0:
            values[key] = f"v{n}"
            history.append(op(process, WRITE, key, f"v{n}", start, end))
        else:
            history.append(op(process, READ, key, values.get(key), start, end))
    result = checkers.check_linearizable_registers(history)
    assert result.valid and result.details["undecided_keys"] == []


# --- lists and counters ------------------------------------------------------------------------


def test_list_checkers_accept_a_good_history():
    history = [
        op(1, APPEND, "l", "a", 0, 1),
        op(2, APPEND, "l", "b", 2, 3, UNKNOWN, "InternalServerError"),
        op(3, APPEND, "l", "c", 4, 5, FAILED, "ServiceUnavailable"),
        op(1, APPEND, "l", "d", 6, 7),
        op(0, READ, "l", ["a", "d"], 10, 11, final=True),
    ]
    verdict = checkers.check(history)
    assert verdict["valid"], verdict


@pytest.mark.parametrize(
    ("final", "checker"),
    [
        (["d"], "acknowledged-writes-kept"),
        (["a", "d", "d"], "no-duplicate-writes"),
        (["a", "c", "d"], "failed-writes-invisible"),
        (["d", "a"], "list-order"),
    ],
)
def test_list_checkers_catch_each_fault(final, checker):
    history = [
        op(1, APPEND, "l", "a", 0, 1),
        op(3, APPEND, "l", "c", 4, 5, FAILED, "ServiceUnavailable"),
        op(1, APPEND, "l", "d", 6, 7),
        op(0, READ, "l", final, 10, 11, final=True),
    ]
    verdict = checkers.check(history)
    assert not verdict["valid"]
    failing = {name for name, r in verdict["checkers"].items() if not r["valid"]}
    assert failing == {checker}
    assert verdict["checkers"][checker]["counterexamples"]


@pytest.mark.parametrize(
    ("final", "valid", "problem"),
    [
        (5, True, None),
        (7, True, None),
        (4, False, "acknowledged ADDs lost"),
        (8, False, "more than every acknowledged"),
    ],
)
def test_counter_totals(final, valid, problem):
    history = [
        op(1, ADD, "c", 2, 0, 1),
        op(2, ADD, "c", 3, 0, 1),
        op(3, ADD, "c", 2, 2, 3, UNKNOWN, "InternalServerError"),
        op(4, ADD, "c", 10, 2, 3, FAILED, "ServiceUnavailable"),
        op(0, READ, "c", final, 5, 6, final=True),
    ]
    result = checkers.check_counters(history)
    assert result.valid is valid
    if problem:
        assert result.counterexamples[0]["problem"].startswith(problem)
    assert result.details["totals"].get("c", {}).get("acknowledged", 5) == 5


def test_a_counter_never_read_back_is_not_called_valid():
    result = checkers.check_counters([op(1, ADD, "c", 2, 0, 1)])
    assert not result.valid


# The indexed workload ----------------------------------------------------------------------------

INDEX_WRITES = [
    op(1, INDEX_WRITE, "i0", ["g0", "p1-1"], 0.0, 0.1),
    op(2, INDEX_WRITE, "i1", ["g1", "p2-1"], 0.0, 0.1),
    op(1, INDEX_WRITE, "i0", [None, "p1-2"], 0.2, 0.3),  # i0 leaves the index.
    op(2, INDEX_WRITE, "i1", ["g0", "p2-2"], 0.2, 0.3, FAILED, "ServiceUnavailable"),
    op(3, INDEX_WRITE, "i2", ["g0", "p3-1"], 0.2, 0.5, UNKNOWN, "InternalServerError"),
]


def scan(items, entries):
    value = {"items": sorted(items), "entries": sorted(entries)}
    return op(0, INDEX_SCAN, "lab-indexed", value, 1.0, 1.1, final=True)


def index_verdict(*extra):
    verdict = checkers.check([*INDEX_WRITES, *extra])["checkers"]
    return verdict["index-reads-real"], verdict["index-converged"]


FINAL_ITEMS = [["i0", None, "p1-2"], ["i1", "g1", "p2-1"], ["i2", "g0", "p3-1"]]


def test_index_reads_may_be_stale_but_converge():
    stale = op(4, INDEX_READ, "g0", [["i0", "p1-1"]], 0.35, 0.4)  # i0 has left g0 by now.
    unknown_seen = op(4, INDEX_READ, "g0", [["i2", "p3-1"]], 0.4, 0.45)
    final = scan(FINAL_ITEMS, [["i1", "g1", "p2-1"], ["i2", "g0", "p3-1"]])
    reads, converged = index_verdict(stale, unknown_seen, final)
    assert reads["valid"] and converged["valid"]
    assert converged["items"] == 3 and converged["entries"] == 2


@pytest.mark.parametrize(
    ("read", "problem"),
    [
        (op(4, INDEX_READ, "g0", [["i9", "p9-9"]], 0.4, 0.45), "never_written"),
        (op(4, INDEX_READ, "g1", [["i0", "p1-1"]], 0.4, 0.45), "never_written"),  # Wrong group.
        (op(4, INDEX_READ, "g0", [["i2", "p3-1"]], 0.0, 0.1), "never_written"),  # Before its write.
        (op(4, INDEX_READ, "g0", [["i1", "p2-2"]], 0.4, 0.45), "refused_write"),
    ],
)
def test_an_index_read_of_what_was_never_written_is_caught(read, problem):
    reads, _ = index_verdict(read, scan(FINAL_ITEMS, [["i1", "g1", "p2-1"], ["i2", "g0", "p3-1"]]))
    assert not reads["valid"]
    assert problem in reads["counterexamples"][0]


@pytest.mark.parametrize(
    ("entries", "problem"),
    [
        ([["i1", "g1", "p2-1"]], "missing"),
        ([["i0", "g0", "p1-1"], ["i1", "g1", "p2-1"], ["i2", "g0", "p3-1"]], "no item projects"),
        ([["i1", "g1", "p2-1"], ["i2", "g0", "p3-0"]], "missing"),  # An old version lingers.
    ],
)
def test_an_index_that_did_not_converge_is_caught(entries, problem):
    _, converged = index_verdict(scan(FINAL_ITEMS, entries))
    assert not converged["valid"]
    assert problem in converged["counterexamples"][0]["problem"]


def test_an_index_never_scanned_at_the_end_is_not_called_converged():
    _, converged = index_verdict()
    assert not converged["valid"]
    assert "no successful final scan" in converged["counterexamples"][0]["problem"]
