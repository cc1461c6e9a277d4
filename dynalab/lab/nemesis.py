"""The nemesis: executes a fault schedule against a `LocalCluster` while the workloads run.

It runs on the thread that started the cluster (the main thread), and the clients on another:
a child asks the kernel for SIGTERM when its parent dies (`rpc.lifeline`, PR_SET_PDEATHSIG), and
the kernel means the parent *thread*, so a node restarted from a thread that then ends would be
stopped with it. Each event runs at its `at_s` on the run's clock (time.monotonic() less the
run's start), or as soon as the previous event is done if that took longer (restarting a node
waits until it is ready). What actually happened is kept as `executed`: the time each event
started and finished, and the error if it failed, which is what the report shades. Kills,
restarts, pauses and resumes are carried out by `dynalab.nodes.Controls`, as `dynalab node ...`
does them for a person at a terminal. `heal_all` leaves the cluster whole whatever happened:
every network fault lifted, every slowed or paused process continued, every dead one started
again.

A slow node is a duty cycle: a thread of the nemesis stops the node with SIGSTOP for
`SLOW_STOPPED_S` of every `SLOW_PERIOD_S` and continues it for the rest, so the node serves at a
fraction of its speed with every request delayed by up to the stopped time: a node starved of CPU
or stalled on a slow disk, as its clients see it. Network faults are `dynalab.lab.network`'s.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol

from dynalab.cluster import ClusterError, LocalCluster, ServiceProcess
from dynalab.lab import network
from dynalab.lab.compose import ComposeError
from dynalab.lab.scenarios import FaultEvent
from dynalab.nodes import ControlError, Controls

SLOW_PERIOD_S = 0.1
SLOW_STOPPED_S = 0.07


class Faults(Protocol):
    """What plays the faults: `LocalFaults` on a `dynalab up`-style cluster of this machine,
    `dynalab.lab.compose.ComposeCluster` through Docker."""

    def execute(self, fault: str, target: str) -> None: ...

    def heal_all(self) -> None: ...


class Nemesis:
    """Plays a schedule of fault events on time and records what happened."""

    def __init__(self, faults: Faults, events: list[FaultEvent], start: float) -> None:
        self.faults = faults
        self.events = events
        self.start = start
        self.executed: list[dict[str, Any]] = []

    def run(self, stop: threading.Event) -> None:
        """Execute the events in order, each at its time, until they are done or `stop` is set;
        then heal everything."""
        for event in self.events:
            delay = self.start + event.at_s - time.monotonic()
            if stop.wait(max(0.0, delay)):
                break
            began = time.monotonic() - self.start
            record: dict[str, Any] = {**event.to_json(), "at_s": round(began, 3)}
            try:
                self.faults.execute(event.fault, event.target)
            except (ClusterError, ControlError, ComposeError, OSError) as exc:
                record["error"] = str(exc).splitlines()[0]
            record["done_s"] = round(time.monotonic() - self.start, 3)
            self.executed.append(record)
        self.faults.heal_all()


class LocalFaults:
    """Faults on the processes of a `LocalCluster`: node controls, duty cycles and the kernel's
    network faults."""

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.controls = Controls(cluster)
        self._slowed: dict[str, tuple[threading.Event, threading.Thread]] = {}
        # The ports each network fault of `_PORT_FAULTS` holds, to heal at the end.
        self._cut: dict[str, set[int]] = {fault: set() for fault in _PORT_FAULTS}
        self._slow_link = False

    def _service(self, target: str) -> ServiceProcess:
        if target.startswith("router"):
            return next(r for r in self.cluster.routers if r.name == target)
        if target.startswith("replicator"):
            return next(r for r in self.cluster.replicators if r.name == target)
        return self.cluster.node(target)

    def execute(self, fault: str, target: str) -> None:
        command = _CONTROLS.get(fault)
        if command is not None:
            self.controls.run(command, target)
            return
        service = self._service(target)
        if fault in _PORT_FAULTS:
            _PORT_FAULTS[fault].start(service.port)
            self._cut[fault].add(service.port)
        elif fault in _PORT_HEALS:
            cause = _PORT_HEALS[fault]
            self._cut[cause].discard(service.port)
            _PORT_FAULTS[cause].heal(service.port)
        elif fault == "slow-node":
            assert service.pid is not None
            self._slow(target, service.pid)
        elif fault == "restore-node":
            self._restore(target)
        elif fault == "slow-link":
            network.slow_link(service.port)
            self._slow_link = True
        elif fault == "restore-link":
            self._slow_link = False
            network.restore_link()
        else:
            raise ValueError(f"unknown fault {fault!r}")

    def _slow(self, target: str, pid: int) -> None:
        done = threading.Event()

        def duty_cycle() -> None:
            try:
                while not done.is_set():
                    os.kill(pid, signal.SIGSTOP)
                    done.wait(SLOW_STOPPED_S)
                    os.kill(pid, signal.SIGCONT)
                    done.wait(SLOW_PERIOD_S - SLOW_STOPPED_S)
            except ProcessLookupError:
                return  # The node died meanwhile; the restart heals it.

        thread = threading.Thread(target=duty_cycle, name=f"slow-{target}", daemon=True)
        self._slowed[target] = (done, thread)
        thread.start()

    def _restore(self, target: str) -> None:
        done, thread = self._slowed.pop(target)
        done.set()
        thread.join()

    def heal_all(self) -> None:
        for fault, ports in self._cut.items():
            for port in sorted(ports):
                _PORT_FAULTS[fault].heal(port)
            ports.clear()
        if self._slow_link:
            network.restore_link()
            self._slow_link = False
        for target in sorted(self._slowed):
            self._restore(target)
        self.controls.heal()


class _PortFault(NamedTuple):
    """A network fault on one service's port, the fault that heals it, and the two actions."""

    healed_by: str
    start: Callable[[int], None]
    heal: Callable[[int], None]


_PORT_FAULTS = {
    "partition-node": _PortFault("heal-partition", network.partition, network.heal_partition),
    "drop-packets": _PortFault("stop-dropping", network.drop_packets, network.stop_dropping),
}
_PORT_HEALS = {fault.healed_by: name for name, fault in _PORT_FAULTS.items()}


# The faults that are node controls (`dynalab.nodes`), and the command each one is.
_CONTROLS = {
    "kill-node": "kill",
    "kill-router": "kill",
    "kill-replicator": "kill",
    "restart-node": "start",
    "restart-router": "start",
    "restart-replicator": "start",
    "pause-node": "pause",
    "resume-node": "resume",
}
