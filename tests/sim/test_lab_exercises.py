"""The exercises' planted bugs (`dynalab.lab.exercises`, `core.planted`) are caught: with the
bug on, each exercise's seeds fail a checker of its scenario, with counterexamples for the
report; with it off, the same seeds of the same scenario are valid. A failing seed is replayed
with `dynalab lab sweep SCENARIO --seed N --exercise NAME --out DIR`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynalab.cli import main
from dynalab.lab import exercises, sweep

# What each bug breaks: the checkers that must find it on the exercise's seeds.
CAUGHT_BY = {
    "double-count": {"counters", "failed-writes-invisible"},
    "unbalanced-books": {"bank"},
    "lost-in-a-move": {"linearizable-registers", "acknowledged-writes-kept"},
}
# A simulated run of a scenario that splits and moves partitions is not always the same run from
# its seed (the report of this change says what was seen): of its seeds, one caught is enough.
NOT_EVERY_TIME = {"lost-in-a-move"}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(exercises.EXERCISES))
def test_a_planted_bug_is_caught_and_the_correct_build_passes_the_same_seeds(name: str) -> None:
    exercise = exercises.get(name)
    # Two of a bug's seeds when every one catches it, which is enough to see it caught there.
    seeds = list(exercise.seeds if name in NOT_EVERY_TIME else exercise.seeds[:2])
    with_bug = sweep.sweep(exercise.scenario, seeds, exercise.duration_s, jobs=2, bug=name)
    assert all(r.error is None for r in with_bug), with_bug
    caught = [r.seed for r in with_bug if CAUGHT_BY[name] & set(r.failed_checkers)]
    if name in NOT_EVERY_TIME:
        assert caught, f"{name}: none of seeds {seeds} was caught: {with_bug}"
    else:
        assert caught == seeds, f"{name}: seeds {set(seeds) - set(caught)} were not caught"
    correct = sweep.sweep(exercise.scenario, seeds, exercise.duration_s, jobs=2)
    assert all(r.valid for r in correct), f"{exercise.scenario} without the bug: {correct}"


def test_a_caught_bug_leaves_counterexamples_for_the_report(tmp_path: Path) -> None:
    exercise = exercises.get("double-count")
    seed = exercise.seeds[0]
    sweep.run_seed(exercise.scenario, seed, exercise.duration_s, str(tmp_path), exercise.name)
    verdict = json.loads((tmp_path / str(seed) / "verdict.json").read_text())
    failed = [name for name, result in verdict["checkers"].items() if not result["valid"]]
    assert set(CAUGHT_BY["double-count"]) <= set(failed)
    for checker in failed:
        assert verdict["checkers"][checker]["counterexamples"], f"{checker} gave no example"
    report = (tmp_path / str(seed) / "report.html").read_text()
    assert "--exercise double-count" in report


def test_start_runs_the_bug_and_writes_a_failing_run_to_read(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "ex"
    code = main(["lab", "exercise", "start", "double-count", "--seeds", "1-1", "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "1 of 1 seeds invalid" in printed
    assert "--exercise double-count" in printed
    run = json.loads((out / "1" / "run.json").read_text())
    assert run["exercise"] == "double-count"
    assert not json.loads((out / "1" / "verdict.json").read_text())["valid"]
    assert (out / "1" / "report.html").is_file()
    for answer, code_expected in (("rpc/local.py:Faults", 1), ("nowhere", 2)):
        assert main(["lab", "exercise", "check", "double-count", "--answer", answer]) == (
            code_expected
        )
    assert main(["lab", "exercise", "list"]) == 0
    assert "unbalanced-books" in capsys.readouterr().out
