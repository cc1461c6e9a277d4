"""A docker-compose cluster as the lab's target: `dynalab lab run ... --endpoint URL --compose
FILE`.

The workload talks to the router at `--endpoint`, as to any cluster; faults go through Docker, on
the services of `deploy/docker-compose.yml` (or any file naming its services the same way):

- `kill-node` / `restart-node`: `compose kill` (SIGKILL) the `storagenode-N` service; `compose
  start` it and wait until its healthcheck passes;
- `pause-node` / `resume-node`: `compose pause` (the cgroup freezer stops the container's
  processes, as SIGSTOP does); `compose unpause`;
- `kill-router` / `restart-router`: the same on the `router` service;
- `partition-node` / `heal-partition`: `docker network disconnect` the node's container from the
  compose network; connect it again under its service name.

Docker networks between containers are real networks, so a disconnected node is partitioned
without root on the host and without touching anything else. The faults that need the node's port
on one kernel (`drop-packets`, `slow-link`) or its process id (`slow-node`) are refused for a
compose cluster, as is the indexed workload's replicator (the compose file runs none).
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

COMMAND_TIMEOUT_S = 120.0
HEALTHY_TIMEOUT_S = 120.0
HEALTH_POLL_S = 0.5
# The faults a compose cluster can play (see the table above).
FAULTS = frozenset(
    {
        "kill-node",
        "restart-node",
        "pause-node",
        "resume-node",
        "kill-router",
        "restart-router",
        "partition-node",
        "heal-partition",
    }
)


class ComposeError(RuntimeError):
    """A Docker or Compose command failed."""


def compose_command() -> list[str]:
    """`docker compose` (v2) when it is installed, else `docker-compose` (v1)."""
    if shutil.which("docker") is not None:
        done = subprocess.run(
            ["docker", "compose", "version"], capture_output=True, text=True, timeout=30
        )
        if done.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose") is not None:
        return ["docker-compose"]
    raise ComposeError("--compose needs Docker Compose (docker compose or docker-compose)")


def service_of(target: str) -> str:
    """The compose service of a lab target: node-2 -> storagenode-2, router-1 -> router."""
    if target.startswith("node-"):
        return f"storagenode-{target.removeprefix('node-')}"
    if target == "router-1":
        return "router"
    return target


class ComposeCluster:
    """The lab's view of a compose cluster: its endpoint, and Docker for its faults."""

    def __init__(self, endpoint: str, compose_file: Path, project: str | None = None) -> None:
        self.router_url = endpoint
        self.compose = [*compose_command(), "-f", str(compose_file)]
        if project is not None:
            self.compose += ["-p", project]
        self._paused: set[str] = set()
        self._killed: set[str] = set()
        self._partitioned: dict[str, list[str]] = {}  # Service: the networks it was cut from.

    def _run(self, *argv: str) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S)
        if done.returncode != 0:
            raise ComposeError(f"{' '.join(argv)} failed: {done.stderr.strip()[-500:]}")
        return done.stdout

    def container(self, service: str) -> str:
        container = self._run(*self.compose, "ps", "-q", service).strip()
        if not container:
            raise ComposeError(f"no container for service {service}")
        return container.splitlines()[0]

    def execute(self, fault: str, target: str) -> None:
        service = service_of(target)
        if fault in ("kill-node", "kill-router"):
            self._run(*self.compose, "kill", service)
            self._killed.add(service)
        elif fault in ("restart-node", "restart-router"):
            self._run(*self.compose, "start", service)
            self._killed.discard(service)
            self.wait_healthy(service)
        elif fault == "pause-node":
            self._run(*self.compose, "pause", service)
            self._paused.add(service)
        elif fault == "resume-node":
            self._run(*self.compose, "unpause", service)
            self._paused.discard(service)
        elif fault == "partition-node":
            self.partition(service)
        elif fault == "heal-partition":
            self.heal_partition(service)
        else:
            raise ComposeError(f"a compose cluster cannot play {fault!r}")

    def partition(self, service: str) -> None:
        container = self.container(service)
        template = "{{range $name, $_ := .NetworkSettings.Networks}}{{$name}} {{end}}"
        networks = self._run("docker", "inspect", "-f", template, container).split()
        for network in networks:
            self._run("docker", "network", "disconnect", network, container)
        self._partitioned[service] = networks

    def heal_partition(self, service: str) -> None:
        container = self.container(service)
        for network in self._partitioned.pop(service, []):
            self._run("docker", "network", "connect", "--alias", service, network, container)

    def health(self, service: str) -> str:
        template = "{{if .State.Health}}{{.State.Health.Status}}{{else}}{{.State.Status}}{{end}}"
        return self._run("docker", "inspect", "-f", template, self.container(service)).strip()

    def wait_healthy(self, service: str) -> None:
        deadline = time.monotonic() + HEALTHY_TIMEOUT_S
        while (status := self.health(service)) not in ("healthy", "running"):
            if time.monotonic() > deadline:
                raise ComposeError(f"{service} not healthy after {HEALTHY_TIMEOUT_S} s: {status}")
            time.sleep(HEALTH_POLL_S)

    def heal_all(self) -> None:
        """Reconnect, unpause and start whatever the run left broken."""
        for service in sorted(self._partitioned):
            self.heal_partition(service)
        for service in sorted(self._paused):
            self._run(*self.compose, "unpause", service)
        self._paused.clear()
        for service in sorted(self._killed):
            self._run(*self.compose, "start", service)
            self.wait_healthy(service)
        self._killed.clear()
