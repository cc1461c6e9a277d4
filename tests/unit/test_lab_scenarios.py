"""The lab's scenarios, their seeded fault schedules, and the report drawn from a history."""

import json
import re

import pytest

from dynalab import cli
from dynalab.lab import checkers, report, scenarios
from dynalab.lab.history import ADD, INDEX_READ, INDEX_WRITE, READ, WRITE, Operation, Outcome


@pytest.mark.parametrize("name", sorted(scenarios.available()))
def test_every_scenario_file_loads_and_draws_a_schedule(name):
    scenario = scenarios.load(name)
    assert scenario.description
    events = scenarios.schedule(scenario, seed=1, duration_s=scenario.duration_s)
    assert events, "a scenario that injects no fault teaches nothing"
    # One fault at a time: each fault is followed by its own heal, on the same target.
    for fault, heal in zip(events[::2], events[1::2], strict=True):
        assert scenarios.HEALS[fault.fault] == heal.fault
        assert fault.target == heal.target
        assert fault.at_s < heal.at_s
    times = [e.at_s for e in events]
    assert times == sorted(times)
    assert times[-1] <= scenario.duration_s - scenarios.SETTLE_S


@pytest.mark.parametrize("name", sorted(scenarios.available()))
def test_the_same_seed_gives_the_same_faults(name):
    scenario = scenarios.load(name)
    first = [e.to_json() for e in scenarios.schedule(scenario, 42, 60)]
    again = [e.to_json() for e in scenarios.schedule(scenarios.load(name), 42, 60)]
    assert json.dumps(first) == json.dumps(again)
    others = {
        json.dumps([e.to_json() for e in scenarios.schedule(scenario, seed, 60)])
        for seed in range(10)
    }
    assert len(others) > 1, "the seed must change the schedule"


def test_mixed_chaos_draws_every_kind_of_fault():
    scenario = scenarios.load("mixed-chaos")
    drawn = {e.fault for e in scenarios.schedule(scenario, 3, 600)}
    assert set(scenario.faults) <= drawn


def test_a_scenario_with_an_unknown_fault_is_refused():
    text = """description = "x"
duration_s = 10
[workload]
clients = 1
registers = 1
[nemesis]
faults = ["unplug-the-moon"]
first_s = 1
fault_s = [1, 2]
quiet_s = [1, 2]
"""
    with pytest.raises(ValueError, match="unplug-the-moon"):
        scenarios.Scenario.from_toml("bad", text)


def test_fault_windows_pair_each_fault_with_its_heal():
    events = [
        {"at_s": 1.0, "fault": "kill-node", "target": "node-2"},
        {"at_s": 3.0, "fault": "restart-node", "target": "node-2", "done_s": 4.5},
        {"at_s": 5.0, "fault": "pause-node", "target": "node-1"},
    ]
    assert scenarios.fault_windows(events, 9.0) == [
        (1.0, 4.5, "kill-node node-2"),
        (5.0, 9.0, "pause-node node-1"),
    ]


def history():
    ops = []
    for i in range(100):
        t = i * 0.1
        outcome = Outcome.FAILED if 3 <= t < 5 else Outcome.OK
        error = "ServiceUnavailable" if outcome is Outcome.FAILED else None
        ops.append(Operation(1, WRITE, "r", f"v{i}", t, t + 0.01, outcome, error))
        ops.append(Operation(2, ADD, "c", 1, t, t + 0.02, Outcome.OK))
    ops.append(Operation(0, READ, "c", 100, 11, 11.1, Outcome.OK, final=True))
    return ops


def test_series_count_outcomes_latency_and_errors_per_second():
    data = report.series(history())
    assert data["t"][:2] == [0.5, 1.5]
    assert data["by_outcome"]["ok"][0] == 20  # Two clients, ten operations a second each.
    assert data["by_outcome"]["failed"][3] == 10
    assert data["errors"]["ServiceUnavailable"][4] == 10
    assert data["errors"]["ServiceUnavailable"][6] == 0
    assert data["p99_ms"][0] == pytest.approx(20)


def test_index_visibility_lag_runs_from_the_write_to_the_first_query_showing_it():
    ops = [
        Operation(1, INDEX_WRITE, "i0", ["g0", "a"], 1.0, 1.1, Outcome.OK),
        Operation(2, INDEX_READ, "g0", [], 1.2, 1.3, Outcome.OK),  # Not yet.
        Operation(2, INDEX_READ, "g1", [["i0", "a"]], 1.4, 1.5, Outcome.OK),  # Another group.
        Operation(2, INDEX_READ, "g0", [["i0", "a"]], 1.6, 1.7, Outcome.OK),  # Seen.
        Operation(2, INDEX_READ, "g0", [["i0", "a"]], 1.8, 1.9, Outcome.OK),
        Operation(1, INDEX_WRITE, "i0", [None, "b"], 2.0, 2.1, Outcome.OK),  # Leaves the index.
        Operation(1, INDEX_WRITE, "i1", ["g0", "c"], 2.0, 2.1, Outcome.FAILED, "X"),
    ]
    [(written, lag)] = report.index_visibility_lags(ops)
    assert (written, lag) == (1.1, pytest.approx(0.6))
    data = report.series(ops)
    assert data["has_index"] and data["index_lag_max_ms"][1] == pytest.approx(600)
    assert len(report.plot(ops, []).axes) == 4
    assert len(report.plot(history(), []).axes) == 3


def test_report_shows_the_plots_the_fault_windows_and_the_verdict():
    ops = history()
    executed = [
        {"at_s": 3.0, "fault": "kill-node", "target": "node-2", "done_s": 3.01},
        {"at_s": 5.0, "fault": "restart-node", "target": "node-2", "done_s": 5.5},
    ]
    verdict = checkers.check(ops)
    run = {"scenario": "kill-node", "description": "d", "seed": 4, "duration_s": 10}
    page = report.render(run, ops, executed, verdict, report.plot(ops, executed))
    assert "<svg" in page
    assert "kill-node node-2" in page  # The window's label, drawn on the plot.
    # The shaded windows: one translucent band per plot, in the fault's colour.
    bands = re.findall(r"fill: #d62728; opacity: 0\.15", page)
    assert len(bands) == 3
    assert "verdict: VALID" in page


def recorded_run(tmp_path, final_counter):
    (tmp_path / "run.json").write_text(
        json.dumps(
            {
                "scenario": "kill-node",
                "description": "d",
                "seed": 1,
                "duration_s": 10.0,
                "executed": [],
            }
        )
    )
    ops = [
        Operation(1, ADD, "c", 3, 0.0, 0.1, Outcome.OK),
        Operation(0, READ, "c", final_counter, 1.0, 1.1, Outcome.OK, final=True),
    ]
    (tmp_path / "history.jsonl").write_text("".join(json.dumps(o.to_json()) + "\n" for o in ops))


@pytest.mark.parametrize(("final_counter", "code"), [(3, 0), (2, 3)])
def test_lab_check_judges_a_recorded_history_again(tmp_path, final_counter, code):
    recorded_run(tmp_path, final_counter)
    assert cli.main(["lab", "check", str(tmp_path)]) == code
    verdict = json.loads((tmp_path / "verdict.json").read_text())
    assert verdict["valid"] is (code == 0)
    assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")


def test_lab_run_refuses_a_directory_that_holds_something(tmp_path):
    (tmp_path / "x").write_text("")
    assert cli.main(["lab", "run", "kill-node", "--seed", "1", "--out", str(tmp_path)]) == 2
    assert cli.main(["lab", "run", "no-such", "--seed", "1", "--out", str(tmp_path / "n")]) == 2


def test_a_replicated_scenario_names_its_factor_and_its_limits(tmp_path):
    scenario = scenarios.load("kill-node-replicated")
    assert scenario.replicated and scenario.replication_factor == 3
    kill_node = scenarios.available()["kill-node"].read_text()
    for factor, words in (("4", "replication_factor must be 1 to its 3 nodes"), ("0", "1 to")):
        with pytest.raises(ValueError, match=words):
            scenarios.Scenario.from_toml("x", f"replication_factor = {factor}\n" + kill_node)
    # A bank runs on replicated partitions too (transactions keep their state in the groups).
    bank = scenarios.load("bank-replicated")
    assert bank.replicated and bank.accounts == 8
