"""`dynalab lab run` and `replay`: one experiment from start to verdict.

A run starts its own `LocalCluster` under `<out>/cluster` (its logs stay there), creates the
workload's tables, starts the clients and the nemesis on the same clock, stops the clients after
the duration, heals every fault, reads every key back, stops the cluster and writes into `<out>`:

- `run.json`: scenario, seed, duration, and what the nemesis did;
- `faults.json`: the fault schedule drawn from scenario and seed (identical for the same pair);
- `history.jsonl`: every operation, one JSON object a line;
- `verdict.json`: `{"valid": bool, "checkers": {name: {"valid": bool, ...}}}`;
- `report.html`: the plots with the fault windows shaded, and the verdict; `report.png`, the
  same plots as a picture. A simulated run's directory also holds `timeline.json`, every message
  between its processes, which the report draws (`timeline`).

`replay` runs the scenario, seed and duration recorded in an earlier run's `run.json` again.
"""

from __future__ import annotations

import asyncio
import importlib.util
import json
import threading
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from dynalab.bench import DynamoDBClient
from dynalab.cluster import ClusterError, LocalCluster
from dynalab.lab import checkers, network, timeline, workloads
from dynalab.lab import compose as compose_faults
from dynalab.lab.compose import ComposeCluster
from dynalab.lab.history import Operation, parse_lines
from dynalab.lab.nemesis import Faults, LocalFaults, Nemesis
from dynalab.lab.scenarios import Scenario, schedule


def write_schedule(scenario: Scenario, seed: int, duration_s: float, out: Path) -> list[Any]:
    events = [event.to_json() for event in schedule(scenario, seed, duration_s)]
    (out / "faults.json").write_text(json.dumps(events, indent=1) + "\n")
    return events


def _experiment(
    endpoint: str, faults: Faults, scenario: Scenario, seed: int, duration_s: float
) -> tuple[list[Operation], list[dict[str, Any]]]:
    """Clients on a thread of their own, the nemesis on this one (see `nemesis`), then the final
    reads once every fault is healed."""
    keys = workloads.Keys.make(
        scenario.registers, scenario.counters, scenario.lists, scenario.indexed, scenario.accounts
    )
    plan = scenario.index_plan
    asyncio.run(_with_api(endpoint, lambda api: workloads.create_tables(api, keys, plan)))
    asyncio.run(_with_api(endpoint, lambda api: workloads.open_accounts(api, keys)))
    start = time.monotonic()
    recorder = workloads.Recorder(start)
    done = threading.Event()

    def clients() -> None:
        try:
            asyncio.run(
                _with_api(
                    endpoint,
                    lambda api: workloads.run_clients(
                        api,
                        recorder,
                        keys,
                        scenario.clients,
                        duration_s,
                        f"{scenario.name}/{seed}",
                        plan,
                    ),
                )
            )
        finally:
            done.set()

    worker = threading.Thread(target=clients, name="lab-clients")
    worker.start()
    nemesis = Nemesis(faults, schedule(scenario, seed, duration_s), start)
    try:
        nemesis.run(done)
    finally:
        worker.join()
    asyncio.run(_with_api(endpoint, lambda api: workloads.final_reads(api, recorder, keys)))
    return recorder.history, nemesis.executed


async def _with_api(endpoint: str, action: Callable[[DynamoDBClient], Awaitable[None]]) -> None:
    http, api = workloads.session(endpoint)
    async with http:
        await action(api)


def run(
    scenario: Scenario,
    seed: int,
    out: Path,
    duration_s: float | None = None,
    compose: ComposeCluster | None = None,
) -> bool:
    """Run one experiment into `out`, on a cluster of its own or on `compose`; return whether
    the verdict is valid."""
    duration = scenario.duration_s if duration_s is None else duration_s
    if compose is not None:
        unplayable = sorted(set(scenario.faults) - compose_faults.FAULTS)
        if unplayable or scenario.indexed or scenario.replicated:
            what = ", ".join(unplayable)
            if not what:
                what = (
                    "the indexed workload (no replicator)"
                    if scenario.indexed
                    else "replicated partitions (the lab plays them on a cluster of its own, "
                    "real or simulated, whose replication factor it sets)"
                )
            raise ClusterError(
                f"scenario {scenario.name} needs what a compose cluster lacks: {what}"
            )
    out.mkdir(parents=True, exist_ok=True)
    write_schedule(scenario, seed, duration, out)
    if compose is not None:
        history, executed = _experiment(compose.router_url, compose, scenario, seed, duration)
    else:
        history, executed = _local(scenario, seed, out, duration)
    meta = {
        "scenario": scenario.name,
        "description": scenario.description,
        "seed": seed,
        "duration_s": duration,
        "executed": executed,
    }
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    with (out / "history.jsonl").open("w") as file:
        for operation in history:
            file.write(json.dumps(operation.to_json()) + "\n")
    return write_verdict_and_report(out)


def _local(
    scenario: Scenario, seed: int, out: Path, duration: float
) -> tuple[list[Operation], list[dict[str, Any]]]:
    """The experiment on a cluster of its own, under `out/cluster`."""
    if scenario.needs_private_network:
        why_not = network.unavailable()
        if why_not is not None:
            raise ClusterError(f"scenario {scenario.name}: {why_not}")
        # Everything the experiment starts from here on lives in the namespace (see `network`).
        network.enter_private_namespace()
    # The GSI replicator runs when the workload has an indexed table to keep.
    replicators = 1 if scenario.indexed else 0
    with LocalCluster(
        out / "cluster",
        nodes=scenario.nodes,
        replicators=replicators,
        split_bytes=scenario.split_bytes,
        replication_factor=scenario.replication_factor,
    ) as cluster:
        return _experiment(cluster.router_url, LocalFaults(cluster), scenario, seed, duration)


def plots_missing() -> str | None:
    """Why this installation cannot draw a run's report (None: it can)."""
    if importlib.util.find_spec("matplotlib") is None:
        return (
            "the lab's report needs matplotlib: pip install 'dynalab[lab]' "
            "(from a checkout: pip install '.[lab]')"
        )
    return None


def write_verdict_and_report(out: Path) -> bool:
    """Check the recorded history of a run in `out` and (re)write its verdict and report."""
    # Imported here: the plots need the `lab` extra (matplotlib), which the cluster does not.
    from dynalab.lab import report

    meta = json.loads((out / "run.json").read_text())
    with (out / "history.jsonl").open() as file:
        history = list(parse_lines(file))
    verdict = checkers.check(history)
    (out / "verdict.json").write_text(json.dumps(verdict, indent=1) + "\n")
    figure = report.plot(history, meta["executed"])
    trace = timeline.read(out)
    page = report.render(meta, history, meta["executed"], verdict, figure, trace)
    (out / "report.html").write_text(page)
    figure.savefig(out / "report.png", format="png", dpi=80)
    return bool(verdict["valid"])


def recorded(out: Path) -> dict[str, Any]:
    """The scenario, seed and duration of an earlier run."""
    meta: dict[str, Any] = json.loads((out / "run.json").read_text())
    return meta
