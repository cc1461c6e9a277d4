"""`dynalab lab sweep`: one scenario over many seeds in simulation, in parallel processes.

A simulated run (`dynalab.lab.simulated`) is a pure function of its scenario, seed and duration,
so a thousand seeds are a thousand independent jobs: `sweep` hands them to a
`concurrent.futures.ProcessPoolExecutor` (one process per core by default; a run is CPU-bound
Python, so threads would share one core), collects each seed's verdict as it ends, and says which
seeds failed and the one command that replays each, with its history, timeline and report:

    dynalab lab sweep mixed-chaos --seeds 1-1000          # every seed's verdict, the failing ones
    dynalab lab sweep mixed-chaos --seed 17 --out DIR     # seed 17 again, its files in DIR/17

A run that raises (a bug in the simulation or in the code under it, not a verdict) counts as
failing, with the exception's last line for its reason: a sweep never stops at one seed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import multiprocessing
import os
import shlex
import time
import traceback
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path
from typing import Any

from dynalab.lab import scenarios

# More workers than seeds only costs process start-ups.
JOBS_MAX = 64
# What a job imports (a run, a shrink's try, a run's report), imported once by the forkserver
# that every job's process is forked from (`fresh_processes`).
PRELOADED = (
    "dynalab.lab.sweep",
    "dynalab.lab.shrink",
    "dynalab.lab.simulated",
    "dynalab.lab.timeline",
    "dynalab.lab.run",
    "dynalab.lab.report",
)


def seeds_of(text: str) -> list[int]:
    """Seeds as a command line names them: 17, 0-999, 3,17 or 1-5,9."""
    seeds: list[int] = []
    for part in text.split(","):
        low, dash, high = part.strip().partition("-")
        high = high if dash else low
        if not low.isdigit() or not high.isdigit() or int(high) < int(low):
            raise ValueError(f"seeds are N, N-M or a comma-separated list of them, not {text!r}")
        seeds.extend(range(int(low), int(high) + 1))
    return seeds


@dataclasses.dataclass(frozen=True)
class SeedResult:
    """One seed's run: its verdict (`valid`), the checkers it ran and those that found a
    violation, its operation counts and the faults played; `error` is the exception a run raised
    instead of a verdict."""

    seed: int
    valid: bool
    checkers: tuple[str, ...]
    failed_checkers: tuple[str, ...]
    operations: dict[str, int]
    faults: int
    seconds: float
    error: str | None = None


def run_seed(
    scenario: str,
    seed: int,
    duration_s: float | None,
    out: str | None = None,
    bug: str | None = None,
) -> SeedResult:
    """Simulate one seed of a scenario (a name or a scenario file) and, with `out`, write its run
    under `out/SEED` with its report; `bug` is a planted bug to switch on (an exercise's). A
    process pool's job: its arguments and result pickle."""
    # Imported here: each pool worker imports the cluster's code once, on its first seed.
    from dynalab.lab import simulated, timeline

    started = time.monotonic()
    try:
        with quiet():
            loaded = scenarios.resolve(scenario)
            trace = timeline.Timeline(0.0) if out is not None else None
            verdict, history, executed = simulated.simulate(
                loaded, seed, duration_s, trace=trace, bug=bug
            )
        if out is not None:
            directory = Path(out) / str(seed)
            duration = loaded.duration_s if duration_s is None else duration_s
            simulated.write_run(
                directory, loaded, seed, duration, verdict, history, executed, trace, bug
            )
            if Path(scenario).suffix == ".toml":  # A scenario file: a shrink needs it again.
                meta = json.loads((directory / "run.json").read_text())
                meta["scenario_file"] = str(Path(scenario).resolve())
                (directory / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
            write_report(directory)
    except Exception as exc:
        last = traceback.format_exception_only(exc)[-1].strip()
        return SeedResult(seed, False, (), (), {}, 0, time.monotonic() - started, last)
    failed = tuple(name for name, result in verdict["checkers"].items() if not result["valid"])
    faults = sum(1 for event in executed if event["fault"] in scenarios.HEALS)
    return SeedResult(
        seed,
        bool(verdict["valid"]),
        tuple(verdict["checkers"]),
        failed,
        dict(verdict["operations"]),
        faults,
        time.monotonic() - started,
    )


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """A simulated run without its chatter: the simulator's seed line and the warnings the
    cluster's code logs under faults (a node that does not answer, ...), which the verdict
    judges, would interleave across the workers' seeds."""
    disabled = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        logging.disable(disabled)


def write_report(directory: Path) -> None:
    """A written run's report, when this installation can draw one (the `lab` extra)."""
    from dynalab.lab import run as lab_run

    if lab_run.plots_missing() is None:
        lab_run.write_verdict_and_report(directory)


def sweep(
    scenario: str,
    seeds: Sequence[int],
    duration_s: float | None = None,
    *,
    jobs: int | None = None,
    out: str | None = None,
    bug: str | None = None,
    on_result: Callable[[SeedResult], None] | None = None,
) -> list[SeedResult]:
    """Every seed's `SeedResult`, in seed order; `on_result` sees each as it ends. `jobs`
    processes at once (default: the cores), each seed in a new one (`fresh_processes`). `bug`:
    a planted bug switched on in every run."""
    scenarios.resolve(scenario)  # A scenario that does not load fails here, not in every worker.
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(seeds), JOBS_MAX))
    results: list[SeedResult] = []
    with fresh_processes(jobs) as pool:
        futures = [pool.submit(run_seed, scenario, s, duration_s, out, bug) for s in seeds]
        for future in as_completed(futures):
            results.append(future.result())
            if on_result is not None:
                on_result(results[-1])
    return sorted(results, key=lambda result: result.seed)


def fresh_processes(jobs: int) -> ProcessPoolExecutor:
    """A pool that runs every job in a new process of its own, forked from a server process that
    imported the simulation's modules and ran nothing else (multiprocessing's forkserver). A
    simulated run is a function of its scenario and seed only in a process that ran nothing
    before it: some of the cluster's module state outlives a run (ids, caches), and a later run
    in the same process can take other turns (seen on move-under-faults). So a seed gives one
    verdict wherever it runs: in a sweep, its replay, a shrink, a test. A fork of a process that
    only imported is such a process, and it starts without importing the cluster's code again
    (a second and more of a job's two to three on a 20 s double-count run). Its run's files are
    byte for byte those of a spawned process (compared on lossy-network and bank-slow-network
    seeds; move-under-faults differs from one spawned run to the next already)."""
    context = multiprocessing.get_context("forkserver")
    # Read only when this process starts its forkserver, the first time it needs one; a module
    # that does not import (the report's, without the `lab` extra) is left to the job.
    context.set_forkserver_preload(list(PRELOADED))
    return ProcessPoolExecutor(max_workers=jobs, mp_context=context, max_tasks_per_child=1)


def replay_command(
    scenario: str, seed: int, duration_s: float | None, out: str, bug: str | None = None
) -> str:
    """The command that runs one seed again and writes its files and report under `out/SEED`."""
    words = ["dynalab", "lab", "sweep", scenario, "--seed", str(seed)]
    if duration_s is not None:
        words += ["--duration", f"{duration_s:g}"]
    if bug is not None:
        words += ["--exercise", bug]
    words += ["--out", out]
    return shlex.join(words)


def summary(results: Sequence[SeedResult]) -> dict[str, Any]:
    """The counts a sweep's table shows: seeds valid and invalid, and per checker the seeds it
    failed."""
    by_checker: dict[str, list[int]] = {}
    for result in results:
        for name in result.failed_checkers:
            by_checker.setdefault(name, []).append(result.seed)
    return {
        "seeds": len(results),
        "valid": sum(1 for r in results if r.valid),
        "invalid": [r.seed for r in results if not r.valid and r.error is None],
        "errors": [r.seed for r in results if r.error is not None],
        "by_checker": by_checker,
    }
