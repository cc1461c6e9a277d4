"""The fault lab's scenarios on the in-process cluster: deterministic, on virtual time, many seeds.

`simulate(scenario, seed)` runs a scenario of `dynalab/scenarios/` the way `dynalab lab run` does
(the same workload clients, the same fault schedule drawn from the same seed, the same checkers),
but against `SimCluster`: the real router and node code in one process, joined by the seeded
in-process network, on the virtual-time loop. Nothing waits for real time, and every interleaving
follows from the seed, so a seed that fails replays exactly (`dynalab lab sweep`, in
`dynalab.lab.sweep`, runs many seeds in parallel and replays one with its files):

    dynalab lab sweep SCENARIO --seeds 1-200            # prints every failing seed
    dynalab lab sweep SCENARIO --seed 17 --out DIR      # one seed, its files and report in DIR/17

How each fault is played in one process (the real lab's faults are processes and kernels):

- `kill-node`: the node's process is gone (`SimCluster.kill_node`: calls fail at once as
  unreachable, and its splitter and mover stop where they are, with the splits and moves it was
  running); its restart is a new `StorageNode` over the same store, with a new splitter and mover,
  which is what a restarted process reads back from disk: everything committed, nothing in memory.
- `pause-node` and `partition-node`: the node is unreachable until the heal, and keeps its state.
  Its own calls still leave it (as in a partition that cuts one way): a split or a move it drives
  goes on talking to the catalog and to its target.
- `drop-packets` and `slow-link`: the network loses (30%) or delays calls while the fault lasts.
  The in-process network's faults are per call, not per node, so they hit every node's calls.
- `slow-node`: every call is delayed up to 70 ms while it lasts (per call too).
- `kill-router`: the router's requests in flight are cancelled (their clients see a broken
  connection: unknown outcome) and new ones are refused (failed) until a new router, knowing only
  what it reads from the catalog, takes its place.
- `kill-replicator`: the GSI replicator (`SimCluster.start_replicator`, run when the workload is
  indexed) dies as by kill -9, its leases held until they expire; its restart is a new replicator
  process, which resumes from the checkpoints and the backfill progress in the catalog.

The nodes run their background drivers as node processes do (`SimCluster(split_bytes=...)`:
the splitter's recovery and size check, at the scenario's split size, and the mover's settling),
and the router its placement mover (`router.placement`), which asks a split child's node to move
it (`move_partition`, through the network to that node's mover); a killed router's goes with it.

Between faults the network delivers every call at once, or, if the scenario sets
`simulated_latency_ms`, after up to that long (`baseline_faults`). `simulate(..., bug=NAME)` runs
with one planted bug of `core.planted` switched on (`planted_bug`: the one place that sets it),
as `dynalab lab exercise` does.

Each client request takes a seeded 20-100 ms of virtual time (the network and the client's own
work), so clients interleave, the virtual clock moves, and a scenario's own duration and fault
schedule (those of `dynalab lab run`) cost a couple of thousand operations.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import functools
import itertools
import json
import random
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from core import limits, planted
from core.errors import DynamoError, InternalServerError
from dynalab.bench import DynamoDBClient
from dynalab.lab import checkers, scenarios, timeline, workloads
from dynalab.lab.history import Operation
from dynalab.lab.scenarios import FaultEvent, Scenario, schedule
from dynalab.sim.cluster import SimCluster, run, virtual_unix_time
from router import transactions
from router.app import load_operations
from router.context import RouterContext
from router.placement import PlacementMover
from router.protocol import error_body
from rpc.local import Faults
from storagenode.memory_store import MemoryStore

# The virtual time a client request takes, drawn per request: long enough that a scenario's own
# duration (tens of virtual seconds) stays a couple of thousand operations of real CPU.
REQUEST_SECONDS = (0.02, 0.1)
LOSSY = Faults(drop_request=0.15, drop_reply=0.15, timeout_seconds=0.2)
SLOW = Faults(delay=1.0, delay_seconds_max=0.07, timeout_seconds=0.2)


class SimRouterClient(DynamoDBClient):
    """The lab's client, calling the router's handlers in-process instead of over HTTP."""

    def __init__(self, cluster: SimCluster, rng: random.Random) -> None:
        self.cluster = cluster
        self.rng = rng
        self.router: RouterContext | None = cluster.routers[0]
        self.in_flight: set[asyncio.Task[Any]] = set()
        self.handlers = load_operations()
        self.placement: asyncio.Task[None] | None = None
        # With a timeline, each request and its reply are recorded as messages (`trace`).
        self.timeline: timeline.Timeline | None = None
        self._requests = itertools.count(1)

    async def start_router(self) -> None:
        """As the router process starts: its catalog refreshes every second (so it sees what
        others change, an index the replicator makes ACTIVE, a split, without a miss or a stale
        epoch), and its placement mover runs."""
        assert self.router is not None
        await self.router.start()
        self.placement = asyncio.ensure_future(PlacementMover(self.router).run())

    async def call(self, operation: str, request: dict[str, Any]) -> tuple[int, bytes]:
        sent_at = self.cluster.network.clock()
        await asyncio.sleep(self.rng.uniform(*REQUEST_SECONDS))
        router = self.router
        traced = self._traced(operation, sent_at)
        if router is None:
            traced.request(None)
            raise ConnectionRefusedError("the router is down")
        traced.request(router.advertise)
        # A copy, as the bytes of an HTTP body would be: handlers may keep or change what they get.
        task = asyncio.ensure_future(
            self.handlers[operation](router, orjson.loads(orjson.dumps(request)))
        )
        task.add_done_callback(functools.partial(traced.reply, router.advertise))
        self.in_flight.add(task)
        try:
            reply = await asyncio.wait_for(asyncio.shield(task), workloads.CLIENT_TIMEOUT_S)
        except TimeoutError:
            traced.given_up = True
            raise
        except asyncio.CancelledError:
            if router is not self.router:  # The router was killed with this request in it.
                raise ConnectionResetError("the router died with the request in flight") from None
            raise
        except DynamoError as error:
            return error.http_status, error_body(error)
        except ConnectionError:
            raise
        except Exception:
            error = InternalServerError("Internal server error")
            return error.http_status, error_body(error)
        finally:
            self.in_flight.discard(task)
        return 200, orjson.dumps(reply)

    def _traced(self, operation: str, sent_at: float) -> _TracedCall:
        return _TracedCall(self, operation, sent_at, f"c{next(self._requests)}")

    async def stop_placement(self) -> None:
        placement, self.placement = self.placement, None
        if placement is not None:
            placement.cancel()
            await asyncio.gather(placement, return_exceptions=True)

    async def kill_router(self) -> None:
        router, self.router = self.router, None
        for task in list(self.in_flight):
            task.cancel()
        await self.stop_placement()
        if router is not None:
            await router.close()

    async def restart_router(self) -> None:
        self.router = self.cluster.add_router()
        await self.start_router()


class _TracedCall:
    """One client request to the router and its reply, as messages on the client's timeline (if
    it has one): the request left when the client sent it, and reached the router after the
    client's share of the request time; the reply left when the handler ended, and arrived, unless
    the client had given up on it (its timeout)."""

    def __init__(self, api: SimRouterClient, operation: str, sent_at: float, call: str) -> None:
        self.api, self.operation, self.sent_at, self.call = api, operation, sent_at, call
        self.serving = timeline.SERVING.get()
        self.given_up = False

    def request(self, router: str | None) -> None:
        now = self.api.cluster.network.clock()
        fate = "unreachable" if router is None else "delivered"
        # A client finding the router dead addresses the one it knew last.
        lane = router or self.api.cluster.routers[-1].advertise
        self._add(
            "request", self._client(), lane, self.sent_at, None if router is None else now, fate
        )

    def reply(self, router: str, task: asyncio.Future[Any]) -> None:
        if task.cancelled():
            return  # The router died with the request in it: no reply ever left.
        error = task.exception()
        if error is None:
            fate = "ok"
        else:
            fate = error.type_name if isinstance(error, DynamoError) else "InternalServerError"
        now = self.api.cluster.network.clock()
        arrived = None if self.given_up else now
        self._add("reply", router, self._client(), now, arrived, "late" if self.given_up else fate)

    def _client(self) -> str:
        return timeline.client_lane(0 if self.serving is None else self.serving.process)

    def _add(
        self,
        kind: str,
        source: str,
        destination: str,
        sent_at: float,
        arrived_at: float | None,
        fate: str,
    ) -> None:
        recording = self.api.timeline
        if recording is None:
            return
        recording.add(
            timeline.Message(
                call=self.call,
                kind=kind,
                source=source,
                destination=destination,
                op=self.operation,
                sent_s=sent_at - recording.origin,
                arrived_s=None if arrived_at is None else arrived_at - recording.origin,
                fate=fate,
                process=None if self.serving is None else self.serving.process,
                keys=() if self.serving is None else self.serving.keys,
            )
        )


class SimNemesis:
    """Executes the fault schedule on the in-process cluster, each event at its virtual time."""

    def __init__(
        self,
        cluster: SimCluster,
        api: SimRouterClient,
        recorder: workloads.Recorder,
        forget_recent_writes: bool = False,
    ) -> None:
        self.cluster = cluster
        self.api = api
        self.recorder = recorder
        self.executed: list[dict[str, Any]] = []
        # A deliberate bug, for the tests that the checkers catch it: a restarted node comes back
        # with its store as it was after the previous heal (or at the start), losing the
        # acknowledged writes made since.
        self.forget_recent_writes = forget_recent_writes
        self._snapshots: dict[str, MemoryStore] = {}
        # The network between faults: the scenario's latency, or none (`baseline_faults`).
        self.baseline: Faults | None = None

    async def run(self, events: list[FaultEvent]) -> None:
        self._snapshot()
        for event in events:
            await asyncio.sleep(max(0.0, event.at_s - self.recorder.now()))
            record: dict[str, Any] = {**event.to_json(), "at_s": round(self.recorder.now(), 6)}
            await self.execute(event)
            record["done_s"] = round(self.recorder.now(), 6)
            self.executed.append(record)
            if event.fault not in scenarios.HEALS:
                self._snapshot()

    def _snapshot(self) -> None:
        """With the deliberate bug: remember the stores as they are now (after a heal)."""
        if self.forget_recent_writes:
            self._snapshots = {n: copy.deepcopy(s) for n, s in self.cluster.stores.items()}

    async def execute(self, event: FaultEvent) -> None:
        cluster, fault = self.cluster, event.fault
        # A replicated cluster's nodes are named as the scenario names them (node-1, ...).
        node_id = event.target if cluster.raft is not None else event.target.replace("-", "")
        if fault == "restart-node" and self.forget_recent_writes:
            cluster.stores[node_id] = self._snapshots[node_id]
        if fault == "kill-node":
            await cluster.kill_node(node_id)
        elif fault in ("pause-node", "partition-node"):
            cluster.isolate(node_id)
        elif fault == "restart-node":
            await cluster.restart_node(node_id)
            cluster.rejoin(node_id)
        elif fault in ("resume-node", "heal-partition"):
            cluster.rejoin(node_id)
        elif fault == "drop-packets":
            cluster.faults(LOSSY)
        elif fault in ("slow-link", "slow-node"):
            cluster.faults(SLOW)
        elif fault in ("stop-dropping", "restore-link", "restore-node"):
            cluster.faults(self.baseline)
        elif fault == "kill-replicator":
            for name in list(cluster.replicators):
                await cluster.kill_replicator(name)
        elif fault == "restart-replicator":
            if not cluster.replicators:
                cluster.start_replicator()
        elif fault == "kill-router":
            await self.api.kill_router()
        elif fault == "restart-router":
            await self.api.restart_router()
        else:
            raise ValueError(f"the simulation cannot play {fault!r}")


def simulate(
    scenario: Scenario,
    seed: int,
    duration_s: float | None = None,
    *,
    forget_recent_writes: bool = False,
    observe: Callable[[SimCluster], Awaitable[None]] | None = None,
    trace: timeline.Timeline | None = None,
    bug: str | None = None,
) -> tuple[dict[str, Any], list[Operation], list[dict[str, Any]]]:
    """Run one scenario and seed on the in-process cluster: (verdict, history, executed); the
    scenario's own duration unless `duration_s` is given, in virtual seconds. `observe` looks
    at the cluster once the final reads are done. With `trace`, every message between the
    processes from the start of the workload on is recorded there (`dynalab.lab.timeline`); a
    traced run is the same run as an untraced one. `bug` switches on one deliberate bug of
    `core.planted` for this run (an exercise's, `dynalab.lab.exercises`)."""
    duration_s = scenario.duration_s if duration_s is None else duration_s
    split_bytes = (
        limits.PARTITION_SPLIT_BYTES_DEFAULT
        if scenario.split_bytes is None
        else scenario.split_bytes
    )

    async def experiment(cluster: SimCluster) -> tuple[list[Operation], list[dict[str, Any]]]:
        cluster.faults(baseline_faults(scenario))
        rng = random.Random(f"{scenario.name}/{seed}/requests")
        api = SimRouterClient(cluster, rng)
        await api.start_router()
        keys = workloads.Keys.make(
            scenario.registers,
            scenario.counters,
            scenario.lists,
            scenario.indexed,
            scenario.accounts,
        )
        plan = scenario.index_plan
        if scenario.indexed:
            # As `dynalab lab run` runs one replicator when the workload has an indexed table.
            cluster.start_replicator()
        await workloads.create_tables(api, keys, plan)
        await workloads.open_accounts(api, keys)
        # Every dynalab router runs the transaction resolver (`router.app`); so does this one.
        resolver = asyncio.ensure_future(_resolve_forever(api))
        recorder = workloads.Recorder(asyncio.get_running_loop().time(), clock=_loop_time)
        if trace is not None:
            trace.origin = virtual_unix_time()  # The network's clock at the history's zero.
            trace.names = {address: node for node, address in cluster.addresses.items()}
            cluster.network.trace = trace.hop
            api.timeline = trace
        nemesis = SimNemesis(cluster, api, recorder, forget_recent_writes)
        nemesis.baseline = baseline_faults(scenario)
        faults = asyncio.ensure_future(nemesis.run(schedule(scenario, seed, duration_s)))
        await workloads.run_clients(
            api, recorder, keys, scenario.clients, duration_s, f"{scenario.name}/{seed}", plan
        )
        await faults
        # As `dynalab lab run` heals everything before the final reads.
        for event in _heals(nemesis.executed):
            await nemesis.execute(event)
        await workloads.final_reads(api, recorder, keys)
        # Requests their clients gave up on may still be running: let them end in the run.
        await asyncio.gather(*api.in_flight, return_exceptions=True)
        resolver.cancel()
        await api.stop_placement()
        if observe is not None:
            await observe(cluster)
        return recorder.history, nemesis.executed

    with planted_bug(bug):
        history, executed = run(
            seed,
            experiment,
            routers=1,
            split_bytes=split_bytes,
            replication_factor=scenario.replication_factor,
        )
    return checkers.check(history), history, executed


def baseline_faults(scenario: Scenario) -> Faults | None:
    """The network outside the scenario's faults: every call delayed by up to its
    `simulated_latency_ms`, or (0) none."""
    if scenario.simulated_latency_ms == 0:
        return None
    return Faults(delay=1.0, delay_seconds_max=scenario.simulated_latency_ms / 1000)


@contextlib.contextmanager
def planted_bug(name: str | None) -> Iterator[None]:
    """Switch on the deliberate bug `name` (None: none) while the block runs. The one place that
    sets `core.planted.ACTIVE` (see that module for why production never does)."""
    if name is not None and name not in planted.BUGS:
        raise ValueError(f"no planted bug {name!r}; there are: {', '.join(sorted(planted.BUGS))}")
    before = planted.ACTIVE
    planted.ACTIVE = frozenset() if name is None else frozenset({name})
    try:
        yield
    finally:
        planted.ACTIVE = before


async def _resolve_forever(api: SimRouterClient) -> None:
    """`router.transactions.resolve_forever` on whichever router is up (a killed one is
    replaced by a new one)."""
    while True:
        await asyncio.sleep(limits.TRANSACTION_RESOLVE_INTERVAL_SECONDS)
        if api.router is not None:
            try:
                await transactions.resolve_once(api.router)
            except DynamoError:
                continue


def _loop_time() -> float:
    return asyncio.get_running_loop().time()


def _heals(executed: list[dict[str, Any]]) -> list[FaultEvent]:
    """The heal of a fault still open at the end (a schedule always heals; this is for safety)."""
    open_faults: dict[tuple[str, str], str] = {}
    heal_of = {heal: fault for fault, heal in scenarios.HEALS.items()}
    for event in executed:
        key = (event["fault"], event["target"])
        if event["fault"] in scenarios.HEALS:
            open_faults[key] = scenarios.HEALS[event["fault"]]
        elif event["fault"] in heal_of:
            open_faults.pop((heal_of[event["fault"]], event["target"]), None)
    return [FaultEvent(0.0, heal, target) for (_, target), heal in open_faults.items()]


def write_run(
    out: Path,
    scenario: Scenario,
    seed: int,
    duration_s: float,
    verdict: dict[str, Any],
    history: list[Operation],
    executed: list[dict[str, Any]],
    trace: timeline.Timeline | None,
    bug: str | None = None,
) -> None:
    """Write a simulated run as `dynalab lab run` writes a real one (`run.json`, `history.jsonl`,
    `verdict.json`), and its message timeline if it was traced; `dynalab lab check` judges it
    again and draws its report."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "verdict.json").write_text(json.dumps(verdict, indent=1) + "\n")
    meta = {
        "scenario": scenario.name,
        "description": f"{scenario.description} (simulated)",
        "seed": seed,
        "duration_s": duration_s,
        "executed": executed,
        "simulated": True,
    }
    if bug is not None:
        meta["exercise"] = bug  # The planted bug it ran with: its replay needs it again.
    (out / "run.json").write_text(json.dumps(meta, indent=1) + "\n")
    with (out / "history.jsonl").open("w") as file:
        file.writelines(json.dumps(o.to_json()) + "\n" for o in history)
    if trace is not None:
        trace.write(out)
