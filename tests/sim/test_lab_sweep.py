"""`dynalab lab sweep` (`dynalab.lab.sweep`): seeds run in a process pool give the verdicts the
simulation gives them one by one, the command line prints the table and the failing seeds with
the command that replays each, and that command writes the seed's run and report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dynalab.cli import main
from dynalab.lab import scenarios, sweep
from dynalab.lab.simulated import simulate

DURATION_S = 10.0  # Long enough for kill-node's first fault (3 s) and its heal.


def test_seeds_are_named_as_on_a_command_line() -> None:
    assert sweep.seeds_of("17") == [17]
    assert sweep.seeds_of("3-5,9") == [3, 4, 5, 9]
    for bad in ("", "5-3", "a", "1-"):
        with pytest.raises(ValueError):
            sweep.seeds_of(bad)


def test_a_pool_gives_each_seed_the_verdict_of_its_own_run() -> None:
    results = sweep.sweep("kill-node", [2, 1], DURATION_S, jobs=2)
    assert [r.seed for r in results] == [1, 2]
    for result in results:
        verdict, _, executed = simulate(scenarios.load("kill-node"), result.seed, DURATION_S)
        assert result.error is None, result
        assert result.valid == verdict["valid"]
        assert result.operations == verdict["operations"]
        assert result.checkers == tuple(verdict["checkers"])
        assert result.faults == sum(1 for e in executed if e["fault"] == "kill-node") >= 1


def test_a_run_that_raises_is_a_failing_seed_with_its_reason(tmp_path: Path) -> None:
    # Fifty nodes, which the simulated cluster (three) does not have: the kill of node-4 or later
    # (most draws) raises in the nemesis, and the sweep goes on with the next seed.
    text = scenarios.available()["kill-node"].read_text().replace("nodes = 3", "nodes = 50")
    (tmp_path / "wide.toml").write_text(text)
    results = sweep.sweep(str(tmp_path / "wide.toml"), [1, 2], DURATION_S, jobs=2)
    raised = [r for r in results if r.error is not None]
    assert raised, results
    assert all(not r.valid for r in raised)


def test_the_command_prints_verdicts_and_replays_a_seed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["lab", "sweep", "kill-node", "--seeds", "2", "--duration", "10", "--jobs", "2"])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "acknowledged-writes-kept" in printed and "linearizable-registers" in printed
    assert "2 of 2 seeds valid" in printed  # --seeds 2: seeds 1 and 2.
    out = tmp_path / "runs"
    command = sweep.replay_command("kill-node", 2, DURATION_S, str(out))
    assert command == f"dynalab lab sweep kill-node --seed 2 --duration 10 --out {out}"
    assert main(command.split()[1:]) == 0
    run = json.loads((out / "2" / "run.json").read_text())
    assert (run["scenario"], run["seed"], run["simulated"]) == ("kill-node", 2, True)
    assert json.loads((out / "2" / "verdict.json").read_text())["valid"]
    assert (out / "2" / "timeline.json").is_file()
    assert (out / "2" / "report.html").is_file()
