"""The nemesis: executes a fault schedule against a `LocalCluster` while the workloads run.

It runs on the thread that started the cluster (the main thread), and the clients on another:
a child asks the kernel for SIGTERM when its parent dies (`rpc.lifeline`, PR_SET_PDEATHSIG), and
the kernel means the parent *thread*, so a node restarted from a thread that then ends would be
stopped with it. Each event runs at its `at_s` on the run's clock (time.monotonic() less the
run's start), or as soon as the previous event is done if that took longer (restarting a node
waits until it is ready). What actually happened is kept as `executed`: the time each event
started and finished, and the error if it failed, which is what the report shades. `heal_all`
leaves the cluster whole whatever happened: every paused process continued, every dead one
started again.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from typing import Any

from dynalab.cluster import ClusterError, LocalCluster, ServiceProcess
from dynalab.lab.scenarios import FaultEvent


class Nemesis:
    def __init__(self, cluster: LocalCluster, events: list[FaultEvent], start: float) -> None:
        self.cluster = cluster
        self.events = events
        self.start = start
        self.executed: list[dict[str, Any]] = []
        self._paused: set[str] = set()

    def _service(self, target: str) -> ServiceProcess:
        if target.startswith("router"):
            return next(r for r in self.cluster.routers if r.name == target)
        return self.cluster.node(target)

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
                self.execute(event)
            except (ClusterError, OSError) as exc:
                record["error"] = str(exc).splitlines()[0]
            record["done_s"] = round(time.monotonic() - self.start, 3)
            self.executed.append(record)
        self.heal_all()

    def execute(self, event: FaultEvent) -> None:
        service = self._service(event.target)
        if event.fault in ("kill-node", "kill-router"):
            service.kill()
        elif event.fault in ("restart-node", "restart-router"):
            service.start()
        elif event.fault == "pause-node":
            assert service.pid is not None
            os.kill(service.pid, signal.SIGSTOP)
            self._paused.add(event.target)
        elif event.fault == "resume-node":
            assert service.pid is not None
            os.kill(service.pid, signal.SIGCONT)
            self._paused.discard(event.target)
        else:
            raise ValueError(f"unknown fault {event.fault!r}")

    def heal_all(self) -> None:
        for target in sorted(self._paused):
            pid = self._service(target).pid
            if pid is not None:
                os.kill(pid, signal.SIGCONT)
        self._paused.clear()
        for service in [*self.cluster.nodes, *self.cluster.routers]:
            if not service.is_running():
                service.start()
