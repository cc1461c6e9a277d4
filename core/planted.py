"""Deliberate bugs for the lab's exercises (`dynalab lab exercise`), off unless a simulated lab
run switches one on.

Each name in `BUGS` is one real bug in the real code path: a line of the cluster's code asks
`on(NAME)` and, when it is on, does the wrong thing a learner then finds from the checkers'
counterexamples (`docs/guide/course.md`). The course asks learners not to search for these names:
the exercise is to get from the report to the code.

Nothing in production can switch one on. `ACTIVE` is a module variable, empty at import, read
from no environment variable, file, flag or request; the one place that assigns it is
`dynalab.lab.simulated.planted_bug`, which a simulated run (`dynalab lab sweep` / `exercise`) enters
around its in-process cluster and leaves before it returns, in its own process. `dynalab up`, the
node, router and replicator processes, and `dynalab lab run` on real processes never import
that module; a test (`tests/unit/test_planted.py`) checks that nothing else assigns `ACTIVE`.
"""

from __future__ import annotations

# The bugs, by the name their exercise gives them (`dynalab.lab.exercises`).
BUGS = frozenset({"double-count", "unbalanced-books", "lost-in-a-move"})

ACTIVE: frozenset[str] = frozenset()


def on(name: str) -> bool:
    """Whether the deliberate bug `name` is switched on (never, outside a simulated lab run)."""
    assert name in BUGS, f"no planted bug {name!r}"
    return name in ACTIVE
