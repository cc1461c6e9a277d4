"""`dynalab lab exercise`: find a bug planted in the cluster from what the lab shows of it.

An exercise switches on one deliberate bug of `core.planted` (a real line of the cluster's code
that then does the wrong thing) and runs its scenario in simulation, where the checkers catch it:
the learner reads the failing seeds' reports (the counterexample, the per-key view, the message
timeline), works out which function of which file is wrong, and `check` says whether the answer is
right by comparing its hash, so that nothing here names the answer (`docs/guide/course.md`).

Each exercise's `seeds` are seeds its scenario fails on with the bug on (`start` runs them); the
same seeds are valid without it (`tests/sim/test_lab_exercises.py`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from core import planted

# The checkout (or installed tree) the answers' paths are relative to.
ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Exercise:
    name: str  # Also the planted bug's name (`core.planted.BUGS`).
    level: int  # 1 (first) to 3 (last), as the course orders them.
    title: str
    scenario: str
    duration_s: float  # Virtual seconds a seed runs for.
    seeds: tuple[int, ...]  # Seeds the checkers fail with the bug on.
    symptom: str  # What a user would report: the effect, never the cause.
    read_first: tuple[str, ...]  # Where to start reading, wider than the answer.
    answer_sha256: str  # Of `_salted(name, "FILE:FUNCTION")`.
    file_sha256: str  # Of `_salted(name, "FILE")`: a right file with a wrong function.


EXERCISES = {
    exercise.name: exercise
    for exercise in (
        Exercise(
            name="double-count",
            level=1,
            title="Counters that count what failed",
            scenario="lossy-network",
            duration_s=20.0,
            seeds=(1, 2, 3),
            symptom=(
                "On a network that loses packets, counters end above every increment the clients "
                "were told succeeded or might have, and writes the clients were told failed turn "
                "up in later reads."
            ),
            read_first=(
                "docs/architecture/failures.md (what each error tells a client)",
                "rpc/local.py (how the simulated network loses a request or its reply)",
                "router/items.py (how the router answers a write when a node's reply never came)",
            ),
            answer_sha256="c8db27b388b4be3524505402a1a98563d8ff35f2fef98323c2a0d1272fc2c7bd",
            file_sha256="a5000a066c5185334a06b875b4a50e566c8b0e8bcf353844944b8cb821753b27",
        ),
        Exercise(
            name="unbalanced-books",
            level=2,
            title="The books do not balance",
            scenario="bank-slow-network",
            duration_s=20.0,
            seeds=(1, 2, 3),
            symptom=(
                "On a slow network, reads of every account (TransactGetItems) stop adding up to "
                "the money the bank opened with, though every transfer is one transaction."
            ),
            read_first=(
                "docs/architecture/transactions.md (prepare, decide, commit)",
                "router/transactions.py (the coordinator)",
                "storagenode/transactions.py (a participant's prepare and apply)",
            ),
            answer_sha256="d3ee7aba8126b61d84760ff1c61544f967a380b9752946ad825dbcc26379b818",
            file_sha256="ca95429fa3924e2b464d7059568c566771e51ce86455b03835a322823fa08bc2",
        ),
        Exercise(
            name="lost-in-a-move",
            level=3,
            title="A write lost in a move",
            scenario="move-under-faults",
            duration_s=30.0,
            seeds=(2, 3, 4),
            symptom=(
                "While split partitions move between nodes, now and then a register reads an "
                "older value than one a client was told was written: an acknowledged write is "
                "gone. Most seeds pass; the failing ones fail near a move."
            ),
            read_first=(
                "docs/architecture/splits-and-moves.md (a move's steps, its fence and drain)",
                "storagenode/move.py (the source's steps and the mover)",
                "storagenode/writes.py (how a write reaches its partition)",
            ),
            answer_sha256="c77c40a940165c22bf5c069f6396a62b6863825e48790f0d7c02f5b44e70f1cf",
            file_sha256="b4806011fb619ed45590313e97d906706aa42596cb577d608d9cce86a49382a6",
        ),
    )
}
assert set(EXERCISES) == planted.BUGS, "every planted bug is an exercise, and only those"


def get(name: str) -> Exercise:
    if name not in EXERCISES:
        raise ValueError(f"no exercise {name!r}; there are: {', '.join(EXERCISES)}")
    return EXERCISES[name]


def ordered() -> list[Exercise]:
    """The exercises from the first to the last."""
    return sorted(EXERCISES.values(), key=lambda exercise: exercise.level)


def _salted(name: str, text: str) -> str:
    return hashlib.sha256(f"dynalab-exercise/{name}/{text}".encode()).hexdigest()


def normalise(answer: str) -> tuple[str, str]:
    """`FILE:FUNCTION` as the answers are hashed: the file relative to the checkout (an
    absolute path or `./` accepted), forward slashes; the function's own name (a method given
    as `Class.method` is `method`)."""
    path, colon, function = answer.strip().rpartition(":")
    if not colon or not path or not function:
        raise ValueError(
            f"an answer is FILE:FUNCTION, e.g. router/items.py:put_item, not {answer!r}"
        )
    file = Path(path)
    if file.is_absolute():
        try:
            file = file.resolve().relative_to(ROOT)
        except ValueError:
            raise ValueError(f"{path} is not in this checkout ({ROOT})") from None
    relative = file.as_posix().removeprefix("./")
    return relative, function.strip().rsplit(".", 1)[-1]


def check(name: str, answer: str) -> str:
    """ "right", "file" (the right file, another function) or "wrong"."""
    exercise = get(name)
    file, function = normalise(answer)
    if _salted(name, f"{file}:{function}") == exercise.answer_sha256:
        return "right"
    if _salted(name, file) == exercise.file_sha256:
        return "file"
    return "wrong"
