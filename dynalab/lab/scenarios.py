"""Scenarios: the experiments in `dynalab/scenarios/*.toml`, and the fault schedule each one draws
from a seed.

A scenario names a workload (how many clients, how many keys of each kind) and a nemesis (which
faults, how long each lasts, how long the cluster is left alone in between). `schedule` turns a
scenario, a seed and a duration into the list of fault events the nemesis will execute, each
`{"at_s", "fault", "target"}`: a fault and the event that heals it, one fault at a time. It is a
pure function of its arguments, so the same scenario and seed always give the same
`faults.json`, which is what makes a run replayable.
"""

from __future__ import annotations

import random
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynalab.lab.indexed import IndexPlan

SCENARIO_DIR = Path(__file__).resolve().parents[1] / "scenarios"  # Shipped in the package.
ROUTER = "router-1"
REPLICATOR = "replicator-1"
SETTLE_S = 2.0  # Quiet time left at the end of a run, after the last fault is healed.
# A simulated call's latency at most: well under the clients' timeout and a node call's deadline.
SIMULATED_LATENCY_MS_MAX = 50.0

# Each fault and the event that undoes it.
HEALS = {
    "kill-node": "restart-node",  # SIGKILL a storage node; start it again on its data.
    "pause-node": "resume-node",  # SIGSTOP a storage node; SIGCONT it.
    "kill-router": "restart-router",  # SIGKILL the router; start it again.
    "kill-replicator": "restart-replicator",  # SIGKILL the GSI replicator; start it again.
    "slow-node": "restore-node",  # Stop a storage node for most of every tenth of a second.
    # Kernel faults on a storage node's traffic (`dynalab.lab.network`), in both directions.
    "partition-node": "heal-partition",  # Drop every packet.
    "drop-packets": "stop-dropping",  # Drop a share of the packets at random.
    "slow-link": "restore-link",  # Limit the bandwidth.
}
# The faults that need the experiment in a private network namespace.
NETWORK_FAULTS = frozenset({"partition-node", "drop-packets", "slow-link"})


@dataclass(frozen=True)
class FaultEvent:
    at_s: float
    fault: str
    target: str

    def to_json(self) -> dict[str, Any]:
        return {"at_s": self.at_s, "fault": self.fault, "target": self.target}


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    nodes: int
    split_bytes: int | None  # The nodes' split size (None: the default, 10 GB).
    duration_s: float
    clients: int
    registers: int
    counters: int
    lists: int
    indexed: int
    index_plan: IndexPlan
    faults: tuple[str, ...]
    first_s: float
    fault_s: tuple[float, float]
    quiet_s: tuple[float, float]
    accounts: int = 0  # Bank accounts moved between by transactions (`workloads`).
    # In simulation, every call between processes takes up to this long (drawn per call), as a
    # real network's calls do; 0: none, every call arrives at once. Without it a step of many
    # calls (a move's fence to its switch, a transaction's prepare to its commit, a follower's
    # checkpoint to its apply) takes no time at all, and no client request or fault can fall
    # inside it. Real runs have their network's own latency and ignore it.
    simulated_latency_ms: float = 0.0
    # A fixed fault schedule instead of one drawn from the seed (`dynalab lab shrink` writes
    # one): `[[nemesis.events]]` with `at_s`, `fault` and `target`, every fault healed.
    events: tuple[FaultEvent, ...] | None = None
    # Replicas of each table's partitions (`dynalab up --replication-factor`): 1, one copy each;
    # more run on real processes and in the simulator (`SimCluster(replication_factor=...)`).
    replication_factor: int = 1

    @classmethod
    def from_toml(cls, name: str, text: str) -> Scenario:
        """A scenario from its file's text, named `name` unless the file names itself (`name =`:
        a shrunk scenario keeps its original's name, from which its runs draw their randomness)."""
        data = tomllib.loads(text)
        workload, nemesis = data["workload"], data["nemesis"]
        name = str(data.get("name", name))
        events = None
        if "events" in nemesis:
            events = tuple(
                FaultEvent(float(e["at_s"]), str(e["fault"]), str(e["target"]))
                for e in nemesis["events"]
            )
        scenario = cls(
            name=name,
            description=str(data["description"]),
            nodes=int(data.get("nodes", 3)),
            split_bytes=None if "split_bytes" not in data else int(data["split_bytes"]),
            duration_s=float(data["duration_s"]),
            clients=int(workload["clients"]),
            registers=int(workload.get("registers", 0)),
            counters=int(workload.get("counters", 0)),
            lists=int(workload.get("lists", 0)),
            indexed=int(workload.get("indexed", 0)),
            index_plan=IndexPlan(
                online_at_s=(
                    None
                    if "index_online_at_s" not in workload
                    else float(workload["index_online_at_s"])
                ),
                preload=int(workload.get("index_preload", 0)),
            ),
            faults=tuple(nemesis["faults"]),
            first_s=float(nemesis["first_s"]),
            fault_s=_range(nemesis["fault_s"]),
            quiet_s=_range(nemesis["quiet_s"]),
            accounts=int(workload.get("accounts", 0)),
            simulated_latency_ms=float(data.get("simulated_latency_ms", 0.0)),
            events=events,
            replication_factor=int(data.get("replication_factor", 1)),
        )
        unknown = set(scenario.faults) - set(HEALS)
        if unknown:
            raise ValueError(f"scenario {name}: unknown faults {sorted(unknown)}")
        if events is not None:
            _check_events(name, list(events))
        keys = (
            scenario.registers
            + scenario.counters
            + scenario.lists
            + scenario.indexed
            + scenario.accounts
        )
        if scenario.clients < 1 or keys < 1:
            raise ValueError(f"scenario {name}: needs at least one client and one key")
        if not 0 <= scenario.simulated_latency_ms <= SIMULATED_LATENCY_MS_MAX:
            raise ValueError(
                f"scenario {name}: simulated_latency_ms must be 0 to {SIMULATED_LATENCY_MS_MAX}"
            )
        if scenario.accounts == 1:
            raise ValueError(f"scenario {name}: a bank needs at least two accounts")
        if not 1 <= scenario.replication_factor <= scenario.nodes:
            raise ValueError(
                f"scenario {name}: replication_factor must be 1 to its {scenario.nodes} nodes"
            )
        return scenario

    @property
    def replicated(self) -> bool:
        return self.replication_factor > 1

    @property
    def needs_private_network(self) -> bool:
        return not NETWORK_FAULTS.isdisjoint(self.faults)

    def targets(self, fault: str) -> list[str]:
        if fault == "kill-router":
            return [ROUTER]
        if fault == "kill-replicator":
            return [REPLICATOR]
        return [f"node-{i}" for i in range(1, self.nodes + 1)]


def _check_events(name: str, events: list[FaultEvent]) -> None:
    """A fixed schedule is in time order, names known faults and heals each one it starts."""
    heal_of = {heal: fault for fault, heal in HEALS.items()}
    open_faults: set[tuple[str, str]] = set()
    for before, event in zip([None, *events], events, strict=False):
        if before is not None and event.at_s < before.at_s:
            raise ValueError(f"scenario {name}: events out of order at {event.at_s} s")
        if event.fault in HEALS:
            open_faults.add((event.fault, event.target))
        elif event.fault in heal_of:
            if (heal_of[event.fault], event.target) not in open_faults:
                raise ValueError(f"scenario {name}: {event.fault} {event.target} heals nothing")
            open_faults.discard((heal_of[event.fault], event.target))
        else:
            raise ValueError(f"scenario {name}: unknown event {event.fault!r}")
    if open_faults:
        raise ValueError(f"scenario {name}: faults never healed: {sorted(open_faults)}")


def _range(value: Any) -> tuple[float, float]:
    low, high = (float(v) for v in value)
    if not 0 <= low <= high:
        raise ValueError(f"a range must be [low, high] with 0 <= low <= high, got {value}")
    return low, high


def available(directory: Path = SCENARIO_DIR) -> dict[str, Path]:
    """Every scenario file by name (its file name without `.toml`)."""
    return {path.stem: path for path in sorted(directory.glob("*.toml"))}


def load(name: str, directory: Path = SCENARIO_DIR) -> Scenario:
    paths = available(directory)
    if name not in paths:
        raise ValueError(f"no scenario {name!r}; there are: {', '.join(paths)}")
    return Scenario.from_toml(name, paths[name].read_text())


def resolve(name_or_path: str) -> Scenario:
    """A scenario by its name (`dynalab lab list`) or by the path of a scenario file elsewhere
    (one `dynalab lab shrink` wrote, say), which is named by its file name."""
    path = Path(name_or_path)
    if path.suffix == ".toml" and path.is_file():
        return Scenario.from_toml(path.stem, path.read_text())
    return load(name_or_path)


def schedule(scenario: Scenario, seed: int, duration_s: float) -> list[FaultEvent]:
    """The fault events of a run: from `first_s`, a fault drawn from the scenario's list on a
    target drawn from its candidates, lasting a time drawn from `fault_s`, healed, then a quiet
    time drawn from `quiet_s`; until the next fault would not be healed `SETTLE_S` before the
    end. A scenario with a fixed schedule (`events`) has that one, whatever the seed, less the
    faults that would not be healed `SETTLE_S` before the end."""
    if scenario.events is not None:
        return _fixed(list(scenario.events), duration_s - SETTLE_S)
    rng = random.Random(f"{scenario.name}/{seed}")
    events: list[FaultEvent] = []
    at_s = scenario.first_s
    while True:
        lasting = round(rng.uniform(*scenario.fault_s), 3)
        if at_s + lasting > duration_s - SETTLE_S:
            return events
        fault = rng.choice(scenario.faults)
        target = rng.choice(scenario.targets(fault))
        events.append(FaultEvent(round(at_s, 3), fault, target))
        events.append(FaultEvent(round(at_s + lasting, 3), HEALS[fault], target))
        at_s += lasting + rng.uniform(*scenario.quiet_s)


def _fixed(events: list[FaultEvent], healed_by_s: float) -> list[FaultEvent]:
    """The fixed schedule's faults healed by `healed_by_s`, each with its heal (the next heal of
    its kind on its target: `_check_events` saw there is one)."""
    kept: list[FaultEvent] = []
    for i, event in enumerate(events):
        if event.fault not in HEALS:
            continue
        heal = next(
            e for e in events[i + 1 :] if e.fault == HEALS[event.fault] and e.target == event.target
        )
        if heal.at_s <= healed_by_s:
            kept += [event, heal]
    return sorted(kept, key=lambda e: e.at_s)


def fault_windows(events: list[dict[str, Any]], end_s: float) -> list[tuple[float, float, str]]:
    """(start, end, label) of every fault in a list of executed or scheduled events, from the
    fault to the end of its heal; a fault never healed lasts until `end_s`."""
    heal_of = {heal: fault for fault, heal in HEALS.items()}
    open_faults: dict[tuple[str, str], float] = {}
    windows = []
    for event in events:
        key = (event["fault"], event["target"])
        if event["fault"] in HEALS:
            open_faults[key] = float(event["at_s"])
        elif event["fault"] in heal_of:
            start = open_faults.pop((heal_of[event["fault"]], event["target"]), None)
            if start is not None:
                # An executed heal ends when it is done (a restarted process answers again).
                end = float(event.get("done_s", event["at_s"]))
                label = f"{heal_of[event['fault']]} {event['target']}"
                windows.append((start, end, label))
    windows.extend((start, end_s, f"{f} {t}") for (f, t), start in open_faults.items())
    return sorted(windows)
