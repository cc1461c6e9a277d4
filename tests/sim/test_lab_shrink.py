"""`dynalab lab shrink` (`dynalab.lab.shrink`): a fixed schedule in a scenario file replays as
the schedule the seed drew, and a planted bug's first failing run shrinks to a scenario of at most
three faults that still fails the same checker when replayed from its file."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from dynalab.lab import exercises, scenarios, shrink, sweep

# The bugs whose runs replay exactly from their seed: move-under-faults' do not always
# (docs/architecture/seams-and-simulation.md), so lost-in-a-move is shrunk by hand.
SHRUNK_IN_CI = ["double-count", "unbalanced-books"]


def test_a_fixed_schedule_is_the_drawn_one_and_survives_its_file(tmp_path: Path) -> None:
    scenario = scenarios.load("kill-node")
    drawn = scenarios.schedule(scenario, 7, scenario.duration_s)
    fixed = dataclasses.replace(scenario, events=tuple(drawn))
    assert scenarios.schedule(fixed, 99, fixed.duration_s) == drawn  # The seed draws none.
    path = tmp_path / "fixed.toml"
    path.write_text(shrink.to_toml(fixed, "a test"))
    assert scenarios.resolve(str(path)) == fixed  # Named as the original, from the file.
    # A shorter run keeps only the faults healed in time, each with its heal.
    kept = scenarios.schedule(fixed, 7, drawn[1].at_s + scenarios.SETTLE_S)
    assert kept == drawn[:2]


def test_a_fixed_schedule_must_heal_what_it_starts(tmp_path: Path) -> None:
    path = tmp_path / "unhealed.toml"
    unhealed = '[[nemesis.events]]\nat_s = 3.0\nfault = "kill-node"\ntarget = "node-1"\n'
    path.write_text(scenarios.available()["kill-node"].read_text() + "\n" + unhealed)
    with pytest.raises(ValueError, match="never healed"):
        scenarios.resolve(str(path))


@pytest.mark.slow
@pytest.mark.parametrize("name", SHRUNK_IN_CI)
def test_a_planted_bugs_first_failing_run_shrinks_to_three_faults(
    name: str, tmp_path: Path
) -> None:
    exercise = exercises.get(name)
    seed = exercise.seeds[0]
    first = sweep.run_seed(exercise.scenario, seed, exercise.duration_s, str(tmp_path), name)
    assert not first.valid, first
    run = tmp_path / str(seed)
    shrunk = shrink.shrink(run, jobs=2, runs_max=8)
    assert shrunk.faults <= 3, shrunk
    assert set(shrunk.failing) & set(first.failed_checkers)
    original = json.loads((run / "run.json").read_text())
    assert shrunk.faults < sum(1 for e in original["executed"] if e["fault"] in scenarios.HEALS)
    path = tmp_path / "shrunk.toml"
    shrink.write(shrunk, run, path)
    (again,) = sweep.sweep(str(path), [seed], bug=name, jobs=1)
    assert not again.valid and set(again.failed_checkers) & set(shrunk.failing), again
