"""`dynalab lab shrink RUN`: a smaller schedule that still fails, as a scenario file to replay.

A failing simulated run (`dynalab lab sweep ... --out DIR` wrote it) is its scenario, its seed
and the fault schedule the seed drew. Shrinking fixes that schedule in the scenario (its
`[[nemesis.events]]`, so the seed no longer draws one) and then tries smaller ones, keeping each
that still fails one of the checkers the run failed, in rounds until none is smaller:

1. a shorter run: cut at the last fault's heal (plus the settling time), else at half, or three
   quarters, of what is left (fewer operations, and every later try is faster);
2. fewer faults: without half of them, then a quarter, ..., then one at a time (as delta
   debugging does), the first that still fails kept;
3. fewer clients: half as many, then one fewer.

A shrunk scenario keeps its original's name (`name =` in the file), from which a run draws the
clients' and the network's randomness, so it is the same experiment with less in it. Each
round's tries run in parallel processes, as a sweep does; a try is judged by the same simulation
with the same planted bug (an exercise's) as the run. At most `RUNS_MAX` simulations are tried.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from dynalab.lab import scenarios, sweep
from dynalab.lab.scenarios import HEALS, SETTLE_S, FaultEvent, Scenario

RUNS_MAX = 60  # Simulations one shrink may run, the first (the run itself, replayed) included.
DURATION_S_MIN = 4.0  # Shorter runs leave the clients too little time to set anything up.


@dataclasses.dataclass(frozen=True)
class Shrunk:
    """What a shrink found: the smallest failing scenario (its schedule fixed), and each step
    kept on the way there, in words."""

    scenario: Scenario
    seed: int
    bug: str | None
    failing: tuple[str, ...]  # The checkers the smallest run fails.
    steps: tuple[str, ...]
    runs: int

    @property
    def faults(self) -> int:
        return len(faults_of(self.scenario))


def faults_of(scenario: Scenario) -> list[FaultEvent]:
    assert scenario.events is not None
    return [event for event in scenario.events if event.fault in HEALS]


def judge(scenario: Scenario, seed: int, bug: str | None) -> tuple[str, ...]:
    """The checkers one simulated run of `scenario` fails (a process pool's job)."""
    from dynalab.lab import simulated

    with sweep.quiet():
        verdict, _, _ = simulated.simulate(scenario, seed, scenario.duration_s, bug=bug)
    return tuple(name for name, result in verdict["checkers"].items() if not result["valid"])


def recorded(run: Path) -> tuple[Scenario, int, str | None, tuple[str, ...]]:
    """A written run's scenario (its schedule fixed as the seed drew it), seed, planted bug and
    failed checkers."""
    meta = json.loads((run / "run.json").read_text())
    verdict = json.loads((run / "verdict.json").read_text())
    scenario = scenarios.resolve(meta.get("scenario_file") or meta["scenario"])
    scenario = dataclasses.replace(scenario, duration_s=float(meta["duration_s"]))
    events = scenarios.schedule(scenario, int(meta["seed"]), scenario.duration_s)
    fixed = dataclasses.replace(scenario, events=tuple(events))
    failing = tuple(name for name, result in verdict["checkers"].items() if not result["valid"])
    return fixed, int(meta["seed"]), meta.get("exercise"), failing


def shrink(
    run: Path,
    *,
    jobs: int = 1,
    runs_max: int = RUNS_MAX,
    on_step: Callable[[str], None] | None = None,
) -> Shrunk:
    """Shrink the failing run written in `run` (see the module)."""
    scenario, seed, bug, failing = recorded(run)
    if not failing:
        raise ValueError(f"{run} is a valid run: there is nothing to shrink")
    budget = _Budget(runs_max, jobs)
    still = budget.try_all([scenario], seed, bug, set(failing))
    if still[0] is None:
        raise ValueError(
            f"{run} did not fail again when replayed with its schedule fixed; "
            "the run is not reproducible as written"
        )
    best, best_failing = scenario, still[0]
    steps: list[str] = []
    progress = True
    while progress and budget.left > 0:
        progress = False
        for propose in (_shorter, _fewer_faults, _fewer_clients):
            for candidates in propose(best):
                results = budget.try_all(candidates, seed, bug, set(failing))
                # The budget may have run out before the round's last candidates were tried.
                tried = candidates[: len(results)]
                kept = next(
                    ((c, r) for c, r in zip(tried, results, strict=True) if r is not None),
                    None,
                )
                if kept is not None:
                    best, best_failing = kept
                    steps.append(_describe(best))
                    if on_step is not None:
                        on_step(steps[-1])
                    progress = True
                    break
                if budget.left <= 0:
                    break
    return Shrunk(best, seed, bug, best_failing, tuple(steps), budget.used)


class _Budget:
    """Runs tries in parallel, at most `runs_max` in all."""

    def __init__(self, runs_max: int, jobs: int) -> None:
        self.left, self.used, self.jobs = runs_max, 0, max(1, jobs)

    def try_all(
        self, candidates: Sequence[Scenario], seed: int, bug: str | None, failing: set[str]
    ) -> list[tuple[str, ...] | None]:
        """For each candidate (as many as the budget allows), the checkers it fails among
        `failing` if it fails any of them, else None."""
        candidates = list(candidates)[: max(0, self.left)]
        self.left -= len(candidates)
        self.used += len(candidates)
        if not candidates:
            return []
        # Each try in a process of its own, as a sweep runs each seed (`sweep.fresh_processes`).
        count = len(candidates)
        with sweep.fresh_processes(min(self.jobs, count)) as pool:
            results = list(pool.map(judge, candidates, [seed] * count, [bug] * count))
        return [tuple(r) if failing & set(r) else None for r in results]


def _with_events(scenario: Scenario, events: list[FaultEvent], duration_s: float) -> Scenario:
    return dataclasses.replace(scenario, events=tuple(events), duration_s=duration_s)


def _shorter(scenario: Scenario) -> list[list[Scenario]]:
    """Shorter runs, shortest first, each keeping the faults healed in time."""
    assert scenario.events is not None
    events = list(scenario.events)
    now = scenario.duration_s
    last_heal = max((e.at_s for e in events if e.fault not in HEALS), default=0.0)
    lengths = sorted(
        {
            round(max(DURATION_S_MIN, length), 3)
            for length in (last_heal + SETTLE_S + 0.5, now / 2, now * 3 / 4)
        }
    )
    tries = []
    for length in lengths:
        if length < now - 0.5:
            kept = scenarios.schedule(_with_events(scenario, events, length), 0, length)
            tries.append(_with_events(scenario, kept, length))
    return [tries] if tries else []


def _fewer_faults(scenario: Scenario) -> list[list[Scenario]]:
    """Without a chunk of the faults (each with its heal): halves, then quarters, ..., then
    single faults; each size a round of tries."""
    faults = faults_of(scenario)
    rounds: list[list[Scenario]] = []
    chunk = len(faults) // 2
    while chunk >= 1:
        tries = []
        for start in range(0, len(faults), chunk):
            dropped = set(faults[start : start + chunk])
            tries.append(_without(scenario, dropped))
        rounds.append(tries)
        chunk //= 2
    return rounds


def _without(scenario: Scenario, dropped: set[FaultEvent]) -> Scenario:
    """The scenario without the `dropped` faults and their heals."""
    assert scenario.events is not None
    events = list(scenario.events)
    gone: set[int] = set()
    for i, event in enumerate(events):
        if event in dropped:
            heal = next(
                j
                for j in range(i + 1, len(events))
                if events[j].fault == HEALS[event.fault] and events[j].target == event.target
            )
            gone |= {i, heal}
    kept = [event for i, event in enumerate(events) if i not in gone]
    return dataclasses.replace(scenario, events=tuple(kept))


def _fewer_clients(scenario: Scenario) -> list[list[Scenario]]:
    counts = sorted({scenario.clients // 2, scenario.clients - 1} - {0})
    tries = [dataclasses.replace(scenario, clients=c) for c in counts if c < scenario.clients]
    return [tries] if tries else []


def _describe(scenario: Scenario) -> str:
    return (
        f"{len(faults_of(scenario))} faults, {scenario.clients} clients, {scenario.duration_s:g} s"
    )


def to_toml(scenario: Scenario, comment: str) -> str:
    """A scenario file for `scenario` (its schedule fixed), which `scenarios.resolve` loads back
    as the same scenario."""
    assert scenario.events is not None
    plan = scenario.index_plan
    lines = [f"# {line}".rstrip() for line in comment.splitlines()]
    lines += [
        f"name = {json.dumps(scenario.name)}",
        f"description = {json.dumps(scenario.description)}",
        f"nodes = {scenario.nodes}",
        f"duration_s = {scenario.duration_s!r}",
    ]
    if scenario.split_bytes is not None:
        lines.append(f"split_bytes = {scenario.split_bytes}")
    if scenario.simulated_latency_ms:
        lines.append(f"simulated_latency_ms = {scenario.simulated_latency_ms!r}")
    lines += ["", "[workload]", f"clients = {scenario.clients}"]
    for key in ("registers", "counters", "lists", "indexed", "accounts"):
        lines.append(f"{key} = {getattr(scenario, key)}")
    if plan.online_at_s is not None:
        lines.append(f"index_online_at_s = {plan.online_at_s!r}")
    if plan.preload:
        lines.append(f"index_preload = {plan.preload}")
    lines += [
        "",
        "[nemesis]",
        f"faults = {json.dumps(list(scenario.faults))}",
        f"first_s = {scenario.first_s!r}",
        f"fault_s = [{scenario.fault_s[0]!r}, {scenario.fault_s[1]!r}]",
        f"quiet_s = [{scenario.quiet_s[0]!r}, {scenario.quiet_s[1]!r}]",
    ]
    for event in scenario.events:
        lines += [
            "",
            "[[nemesis.events]]",
            f"at_s = {event.at_s!r}",
            f"fault = {json.dumps(event.fault)}",
            f"target = {json.dumps(event.target)}",
        ]
    return "\n".join(lines) + "\n"


def write(shrunk: Shrunk, run: Path, path: Path) -> Any:
    """Write the shrunk scenario to `path`, saying in its comment where it comes from."""
    meta = json.loads((run / "run.json").read_text())
    comment = (
        f"Shrunk by `dynalab lab shrink {run}` from {meta['scenario']} seed {meta['seed']} "
        f"({meta['duration_s']:g} s)"
        + (f" with the planted bug of exercise {shrunk.bug}" if shrunk.bug else "")
        + f":\n{_describe(shrunk.scenario)}, still failing {', '.join(shrunk.failing)}.\n"
        "Its schedule is fixed below ([[nemesis.events]]): the seed draws the rest of the run."
    )
    path.write_text(to_toml(shrunk.scenario, comment))
