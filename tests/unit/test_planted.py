"""The planted bugs (`core.planted`) are off unless a simulated lab run switches one on, nothing
but that run can switch one on, and each exercise's hidden answer is where its bug really is."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import pytest

from core import planted
from dynalab.lab import exercises
from dynalab.lab.simulated import planted_bug

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("core", "rpc", "router", "storagenode", "gsi_replicator", "dynalab")


@functools.cache
def sources() -> tuple[tuple[Path, ast.Module], ...]:
    """Every module of the packages that mention `planted` (the generated protobuf modules and
    the rest cannot refer to it without the word), parsed."""
    paths = sorted(p for package in PACKAGES for p in (ROOT / package).rglob("*.py"))
    texts = ((path, path.read_text()) for path in paths)
    return tuple((path, ast.parse(text)) for path, text in texts if "planted" in text)


def test_every_bug_is_off_at_import_and_outside_a_run() -> None:
    assert frozenset() == planted.ACTIVE
    with planted_bug("double-count"):
        assert planted.on("double-count") and not planted.on("lost-in-a-move")
    assert frozenset() == planted.ACTIVE
    with planted_bug(None):
        assert not any(planted.on(name) for name in planted.BUGS)
    with pytest.raises(ValueError), planted_bug("no-such-bug"):
        pass
    with pytest.raises(AssertionError):
        planted.on("no-such-bug")


def test_only_the_simulated_run_assigns_the_switch() -> None:
    """No production path sets a bug: the one assignment of `planted.ACTIVE` in the tree is
    `dynalab.lab.simulated.planted_bug`'s, and no module reads an environment variable, file
    or flag into it (there is nothing else to assign it with)."""
    assigners = []
    for path, tree in sources():
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else []
            if isinstance(node, ast.AugAssign | ast.AnnAssign):
                targets = [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and target.attr == "ACTIVE":
                    assigners.append(path.relative_to(ROOT).as_posix())
    assert set(assigners) == {"dynalab/lab/simulated.py"}


def planted_sites() -> dict[str, list[str]]:
    """Every `planted.on("NAME")` in the tree, as the FILE:FUNCTION an answer names."""
    sites: dict[str, list[str]] = {}
    for path, tree in sources():
        for function in ast.walk(tree):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if (
                    isinstance(node, ast.Call)
                    and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "on"
                    and isinstance(node.func.value, ast.Name)
                    and node.func.value.id == "planted"
                ):
                    (argument,) = node.args
                    assert isinstance(argument, ast.Constant)
                    where = f"{path.relative_to(ROOT).as_posix()}:{function.name}"
                    sites.setdefault(argument.value, []).append(where)
    return sites


def test_each_exercise_has_one_bug_and_its_hidden_answer_is_where_the_bug_is() -> None:
    sites = planted_sites()
    assert set(sites) == planted.BUGS == set(exercises.EXERCISES)
    for name, places in sites.items():
        assert len(places) == 1, f"{name} is planted in more than one place: {places}"
        (answer,) = places
        assert exercises.check(name, answer) == "right", name
        file, _ = answer.split(":")
        assert exercises.check(name, f"{file}:not_it") == "file", name
        assert exercises.check(name, "router/items.py:put_item") == "wrong", name
        assert exercises.check(name, str(ROOT / answer)) == "right", name


def test_an_answer_is_file_and_function() -> None:
    assert exercises.normalise("./a/b.py:C.method") == ("a/b.py", "method")
    for bad in ("a/b.py", ":f", "a/b.py:", "/elsewhere/x.py:f"):
        with pytest.raises(ValueError):
            exercises.normalise(bad)
