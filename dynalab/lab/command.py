"""`dynalab lab list | run SCENARIO --seed N --out DIR [--duration S] [--endpoint URL --compose
FILE] | replay DIR | check DIR | sweep SCENARIO --seeds N|N-M|--seed N [--jobs J] [--duration S]
[--out DIR] [--exercise NAME] | shrink RUN [--out FILE] | exercise list | exercise start NAME |
exercise check NAME --answer FILE:FUNCTION`."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from dynalab.bench import DynamoDBError
from dynalab.cluster import ClusterError
from dynalab.lab import exercises, scenarios
from dynalab.lab import run as lab_run
from dynalab.lab import shrink as lab_shrink
from dynalab.lab import sweep as lab_sweep
from dynalab.lab.compose import ComposeCluster, ComposeError


def add_parser(commands: Any) -> None:
    lab = commands.add_parser("lab", help="break a local cluster on purpose and check what it did")
    actions = lab.add_subparsers(dest="lab_command", required=True)
    actions.add_parser("list", help="the scenarios, with what each one does")
    run = actions.add_parser("run", help="run a scenario against a cluster it starts itself")
    run.add_argument("scenario", help="a scenario name from `dynalab lab list`")
    run.add_argument("--seed", type=int, required=True, help="draws the fault schedule")
    run.add_argument("--out", required=True, help="a new directory for the results")
    run.add_argument("--duration", type=float, default=None, help="seconds of workload")
    run.add_argument(
        "--endpoint",
        help="a running cluster's router (with --compose) instead of a cluster of its own",
    )
    run.add_argument("--compose", help="the compose file of that cluster: faults go through Docker")
    run.add_argument("--project", help="its compose project name, if not the default")
    replay = actions.add_parser("replay", help="run an earlier run's scenario and seed again")
    replay.add_argument("dir", help="the earlier run's --out directory")
    replay.add_argument("--out", default=None, help="where to write (default: DIR/replay)")
    check = actions.add_parser("check", help="check an earlier run's history again")
    check.add_argument("dir", help="the earlier run's --out directory")
    sweep = actions.add_parser(
        "sweep", help="run a scenario over many seeds in simulation, in parallel processes"
    )
    sweep.add_argument("scenario", help="a scenario name from `dynalab lab list`, or its file")
    which = sweep.add_mutually_exclusive_group(required=True)
    which.add_argument("--seeds", help="seeds: 1000 (seeds 1 to 1000), 1-200, 3,17 or 1-5,9")
    which.add_argument("--seed", type=int, help="one seed (to replay it, with --out)")
    sweep.add_argument(
        "--jobs", type=int, default=None, help=f"processes (default: the cores, {os.cpu_count()})"
    )
    sweep.add_argument("--duration", type=float, default=None, help="virtual seconds of workload")
    sweep.add_argument("--out", default=None, help="write each seed's run and report in DIR/SEED")
    sweep.add_argument(
        "--exercise", default=None, help="switch on that exercise's planted bug in every run"
    )
    shrink = actions.add_parser(
        "shrink", help="find a smaller schedule on which a failing simulated run still fails"
    )
    shrink.add_argument("run", help="the failing run's directory (`sweep ... --out DIR`: DIR/SEED)")
    shrink.add_argument("--out", default=None, help="the scenario file to write (RUN/shrunk.toml)")
    shrink.add_argument("--jobs", type=int, default=None, help="processes (default: the cores)")
    shrink.add_argument(
        "--runs-max", type=int, default=None, help="simulations to try at most (default 60)"
    )
    exercise = actions.add_parser(
        "exercise", help="find a bug planted in the cluster (docs/guide/course.md)"
    )
    steps = exercise.add_subparsers(dest="exercise_command", required=True)
    steps.add_parser("list", help="the exercises, from the first to the last")
    start = steps.add_parser("start", help="run an exercise's scenario with its bug switched on")
    start.add_argument("name", help="an exercise from `dynalab lab exercise list`")
    start.add_argument("--seeds", default=None, help="seeds to run (default: the exercise's own)")
    start.add_argument("--jobs", type=int, default=None, help="processes (default: the cores)")
    start.add_argument("--out", default=None, help="where its failing runs go (lab-runs/NAME)")
    answer = steps.add_parser("check", help="say whether a diagnosis is right, revealing nothing")
    answer.add_argument("name", help="the exercise")
    answer.add_argument(
        "--answer", required=True, help="FILE:FUNCTION of the bug, e.g. router/items.py:put_item"
    )


def main(args: argparse.Namespace, console: Console) -> int:
    if args.lab_command == "list":
        for name in scenarios.available():
            scenario = scenarios.load(name)
            console.print(f"[bold]{name}[/bold]: {scenario.description}", highlight=False)
        return 0
    if args.lab_command == "sweep":
        return _sweep(args, console)
    if args.lab_command == "exercise":
        return _exercise(args, console)
    if args.lab_command == "shrink":
        return _shrink(args, console)
    missing = lab_run.plots_missing()
    if missing is not None:
        console.print(f"[red]dynalab lab:[/red] {missing}")
        return 2
    if args.lab_command == "run":
        if (args.endpoint is None) != (args.compose is None):
            console.print("[red]dynalab lab:[/red] --endpoint and --compose go together")
            return 2
        compose = None
        if args.compose is not None:
            try:
                compose = ComposeCluster(args.endpoint, Path(args.compose), args.project)
            except ComposeError as exc:
                console.print(f"[red]dynalab lab:[/red] {exc}")
                return 2
        return _run(args.scenario, args.seed, Path(args.out), args.duration, console, compose)
    earlier = Path(args.dir)
    try:
        meta = lab_run.recorded(earlier)
    except FileNotFoundError:
        console.print(f"[red]dynalab lab {args.lab_command}:[/red] {earlier} holds no run.json")
        return 2
    if args.lab_command == "check":
        return _summarise(lab_run.write_verdict_and_report(earlier), earlier, console)
    out = Path(args.out) if args.out else earlier / "replay"
    code = _run(meta["scenario"], meta["seed"], out, meta["duration_s"], console)
    same = json.loads((earlier / "faults.json").read_text()) == json.loads(
        (out / "faults.json").read_text()
    )
    console.print("same fault schedule as the earlier run" if same else "[red]schedule differs")
    return code


def _run(
    name: str,
    seed: int,
    out: Path,
    duration: float | None,
    console: Console,
    compose: ComposeCluster | None = None,
) -> int:
    try:
        scenario = scenarios.load(name)
    except ValueError as exc:
        console.print(f"[red]dynalab lab:[/red] {exc}")
        return 2
    if out.exists() and any(out.iterdir()):
        console.print(f"[red]dynalab lab:[/red] {out} is not empty; give a new directory")
        return 2
    with console.status(f"running {name} with seed {seed}"):
        try:
            valid = lab_run.run(scenario, seed, out, duration, compose)
        except (ClusterError, ComposeError, DynamoDBError, TimeoutError) as exc:
            console.print(f"[red]dynalab lab: the cluster failed:[/red] {exc}")
            return 1
    return _summarise(valid, out, console)


def _summarise(valid: bool, out: Path, console: Console) -> int:
    """Print a run's verdict; the exit code: 0 valid, 3 invalid."""
    verdict = json.loads((out / "verdict.json").read_text())
    for checker, result in verdict["checkers"].items():
        mark = "[green]valid[/green]" if result["valid"] else "[red]INVALID[/red]"
        console.print(f"  {checker}: {mark}")
    ops = verdict["operations"]
    console.print(
        f"{ops['total']} operations: {ops['ok']} ok, {ops['failed']} failed, "
        f"{ops['unknown']} unknown; report: {out / 'report.html'}"
    )
    console.print("[bold green]VALID[/bold green]" if valid else "[bold red]INVALID[/bold red]")
    return 0 if valid else 3


def _seeds(text: str) -> list[int]:
    """`--seeds`: a bare count N means seeds 1 to N (`--seeds 1000`), else as `sweep.seeds_of`
    reads it (one seed alone is `--seed N`)."""
    if text.isdigit():
        return list(range(1, int(text) + 1))
    return lab_sweep.seeds_of(text)


def _sweep(args: argparse.Namespace, console: Console) -> int:
    """Run the seeds, print a table of verdicts by checker, the failing seeds and the command that
    replays each; the exit code: 0 every seed valid, 3 some invalid, 1 some run raised."""
    try:
        seeds = [args.seed] if args.seed is not None else _seeds(args.seeds)
        scenarios.resolve(args.scenario)
        if args.exercise is not None:
            exercises.get(args.exercise)
    except ValueError as exc:
        console.print(f"[red]dynalab lab sweep:[/red] {exc}")
        return 2
    if args.jobs is not None and args.jobs < 1:
        console.print("[red]dynalab lab sweep:[/red] --jobs must be at least 1")
        return 2
    done = 0

    def progress(result: lab_sweep.SeedResult) -> None:
        nonlocal done
        done += 1
        if not result.valid:
            why = result.error or ", ".join(result.failed_checkers)
            console.print(f"  seed {result.seed}: [red]INVALID[/red] ({why})", highlight=False)

    with console.status(f"simulating {args.scenario}, {len(seeds)} seeds"):
        results = lab_sweep.sweep(
            args.scenario,
            seeds,
            args.duration,
            jobs=args.jobs,
            out=args.out,
            bug=args.exercise,
            on_result=progress,
        )
    summary = lab_sweep.summary(results)
    table = Table(title=f"{args.scenario}: {summary['seeds']} seeds")
    table.add_column("checker")
    table.add_column("invalid seeds", justify="right")
    table.add_column("first failing seeds")
    checker_names = sorted({name for result in results for name in result.checkers})
    for name in checker_names:
        failing = summary["by_checker"].get(name, [])
        table.add_row(name, str(len(failing)), " ".join(map(str, failing[:10])))
    if summary["errors"]:
        errors = summary["errors"]
        table.add_row("(run raised)", str(len(errors)), " ".join(map(str, errors[:10])))
    console.print(table)
    ops = sum(r.operations.get("total", 0) for r in results)
    seconds = sum(r.seconds for r in results)
    console.print(
        f"{summary['valid']} of {summary['seeds']} seeds valid; {ops} operations, "
        f"{seconds:.0f} s of simulation",
        highlight=False,
    )
    failing = [r for r in results if not r.valid]
    if not failing:
        return 0
    console.print("failing seeds: " + " ".join(str(r.seed) for r in failing), highlight=False)
    console.print("replay one, with its history, timeline and report:", highlight=False)
    out = args.out or f"lab-runs/{Path(args.scenario).stem}"
    for result in failing:
        command = lab_sweep.replay_command(
            args.scenario, result.seed, args.duration, out, args.exercise
        )
        console.print(f"  {command}", highlight=False, markup=False, soft_wrap=True)
    return 1 if summary["errors"] else 3


def _exercise(args: argparse.Namespace, console: Console) -> int:
    if args.exercise_command == "list":
        for exercise in exercises.ordered():
            console.print(
                f"{exercise.level}. [bold]{exercise.name}[/bold]: {exercise.title} "
                f"(scenario {exercise.scenario})",
                highlight=False,
            )
        return 0
    try:
        exercise = exercises.get(args.name)
    except ValueError as exc:
        console.print(f"[red]dynalab lab exercise:[/red] {exc}")
        return 2
    if args.exercise_command == "check":
        try:
            verdict = exercises.check(exercise.name, args.answer)
        except ValueError as exc:
            console.print(f"[red]dynalab lab exercise check:[/red] {exc}")
            return 2
        if verdict == "right":
            console.print(f"[bold green]Right[/bold green]: that is the bug of {exercise.name}.")
            return 0
        if verdict == "file":
            console.print("Not yet: the file is right, the function is not.")
        else:
            console.print("Not yet: the bug is elsewhere.")
        return 1
    return _start(exercise, args, console)


def _start(exercise: exercises.Exercise, args: argparse.Namespace, console: Console) -> int:
    """Run the exercise's scenario with its bug on, and write the first failing seed's run (its
    history, verdict, timeline and report) for the learner to read."""
    try:
        seeds = list(exercise.seeds) if args.seeds is None else _seeds(args.seeds)
    except ValueError as exc:
        console.print(f"[red]dynalab lab exercise:[/red] {exc}")
        return 2
    console.print(f"[bold]{exercise.title}[/bold] ({exercise.name})", highlight=False)
    console.print(exercise.symptom, highlight=False)
    console.print("Read first:", highlight=False)
    for where in exercise.read_first:
        console.print(f"  {where}", highlight=False)
    out = args.out or f"lab-runs/{exercise.name}"
    # Each seed's run is written as it is judged, in a scratch directory, and only the first
    # failing seed's is kept: the run to read is the one that failed, not a second run of it.
    with tempfile.TemporaryDirectory(prefix="dynalab-exercise-") as scratch:
        with console.status(f"simulating {exercise.scenario} with the bug, {len(seeds)} seeds"):
            results = lab_sweep.sweep(
                exercise.scenario,
                seeds,
                exercise.duration_s,
                jobs=args.jobs,
                out=scratch,
                bug=exercise.name,
            )
        failing = [r for r in results if not r.valid]
        console.print(f"{len(failing)} of {len(results)} seeds invalid", highlight=False)
        if not failing:
            console.print("no seed failed: try more seeds (--seeds 1-50)")
            return 0
        first = failing[0]
        written = Path(scratch) / str(first.seed)
        if written.is_dir():  # A run that raised may have written nothing.
            shutil.copytree(written, Path(out) / str(first.seed), dirs_exist_ok=True)
    checkers_failed = ", ".join(first.failed_checkers) or first.error or "?"
    console.print(
        f"seed {first.seed} fails {checkers_failed}: read {Path(out) / str(first.seed)}"
        "/report.html",
        highlight=False,
        soft_wrap=True,
    )
    console.print(
        "other failing seeds: " + (" ".join(str(r.seed) for r in failing[1:]) or "none"),
        highlight=False,
    )
    command = lab_sweep.replay_command(
        exercise.scenario, first.seed, exercise.duration_s, out, exercise.name
    )
    console.print(f"replay it: {command}", highlight=False, markup=False, soft_wrap=True)
    console.print(
        f"then: dynalab lab exercise check {exercise.name} --answer FILE:FUNCTION",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )
    return 0


def _shrink(args: argparse.Namespace, console: Console) -> int:
    """Shrink a failing run, write the scenario file and print the command that replays it."""
    run = Path(args.run)
    if not (run / "run.json").is_file() or not (run / "verdict.json").is_file():
        console.print(f"[red]dynalab lab shrink:[/red] {run} holds no run.json and verdict.json")
        return 2
    if not lab_run.recorded(run).get("simulated"):
        console.print("[red]dynalab lab shrink:[/red] only a simulated run replays exactly")
        return 2
    jobs = args.jobs or os.cpu_count() or 1
    runs_max = args.runs_max or lab_shrink.RUNS_MAX

    def step(text: str) -> None:
        console.print(f"  still fails with {text}", highlight=False)

    try:
        with console.status(f"shrinking {run}"):
            shrunk = lab_shrink.shrink(run, jobs=jobs, runs_max=runs_max, on_step=step)
    except ValueError as exc:
        console.print(f"[red]dynalab lab shrink:[/red] {exc}")
        return 1
    out = Path(args.out) if args.out else run / "shrunk.toml"
    lab_shrink.write(shrunk, run, out)
    console.print(
        f"{shrunk.faults} faults, {shrunk.scenario.clients} clients, "
        f"{shrunk.scenario.duration_s:g} s after {shrunk.runs} runs; still failing "
        f"{', '.join(shrunk.failing)}; written to {out}",
        highlight=False,
        soft_wrap=True,
    )
    command = lab_sweep.replay_command(
        str(out), shrunk.seed, None, str(run.parent / f"{run.name}-shrunk"), shrunk.bug
    )
    console.print(f"replay it: {command}", highlight=False, markup=False, soft_wrap=True)
    return 0
