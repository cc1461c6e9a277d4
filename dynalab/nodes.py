"""Node controls: stop, start, kill, pause and resume the processes of a running `dynalab up`.

`Controls` acts on one `LocalCluster`'s processes by name (`node-2`, `router-1`, `replicator-1`).
`dynalab up` owns one and so does the fault lab's nemesis (`dynalab.lab.nemesis`): a person at a
terminal and a scripted experiment break the cluster the same way.

Another process (`dynalab node stop node-2`) reaches the `Controls` of a running `dynalab up`
through a small control channel: a Unix socket that `dynalab up` listens on, named, together with
its own pid and every child's pid and port, in `<data_dir>/control.json`. The socket lives in a
private temporary directory rather than the data directory because a Unix socket's path is
limited to about a hundred bytes. `dynalab up` executes each request on its main thread, the one
that started the cluster: a child asks the kernel for SIGTERM when its parent *thread* ends
(`rpc.lifeline`), so a node started again from any other thread would die with that thread, and
one started by the requesting process would outlive the cluster. Started from there, it dies with
the cluster like every other child.

A request is one JSON line, `{"command": "stop", "name": "node-2"}`, answered by one JSON line,
`{"ok": true, "message": "...", "services": [...]}` with the state of every process after it.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import shutil
import signal
import socket
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynalab.cluster import STARTUP_TIMEOUT_S, ClusterError, LocalCluster, ServiceProcess

CONTROL_FILE = "control.json"
COMMANDS = ("list", "stop", "start", "kill", "pause", "resume")
REQUEST_BYTES_MAX = 4096  # A request names a command and a process: far less than this.
REQUEST_TIMEOUT_S = 5.0  # How long the control thread waits for a connection's request line.
REPLY_BYTES_MAX = 1 << 20  # The state of every process of the biggest cluster fits many times.
# How long a client waits for an answer: a start waits for the process to be ready.
REPLY_TIMEOUT_S = STARTUP_TIMEOUT_S + 15.0
ACCEPT_BACKLOG = 8


class ControlError(Exception):
    """A control request that cannot be carried out: no such process, wrong state, no cluster."""


def _state(service: ServiceProcess, paused: bool, stopped: bool) -> dict[str, Any]:
    process = service.process
    code = None if process is None else process.poll()
    if process is not None and code is None:
        state = "paused" if paused else "running"
    elif stopped or process is None:
        state = "stopped"
    else:
        state = "exited"
    return {
        "name": service.name,
        "role": service.name.rsplit("-", 1)[0],
        "state": state,
        "pid": service.pid if code is None else None,
        "address": service.address,
        "exit_code": code,
    }


class Controls:
    """Stop, start, kill, pause and resume the processes of one cluster, by name.

    Call it only from the thread that started the cluster (see the module's paragraph).
    """

    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self._paused: set[str] = set()
        self._stopped: set[str] = set()  # Stopped on request, as opposed to exited by itself.

    def service(self, name: str) -> ServiceProcess:
        for service in self.cluster.services():
            if service.name == name:
                return service
        names = ", ".join(sorted(s.name for s in self.cluster.services()))
        raise ControlError(f"no process named {name!r} in this cluster (there are: {names})")

    def services(self) -> list[dict[str, Any]]:
        """The state of every process: running, paused, stopped (on request) or exited."""
        ordered = [*self.cluster.nodes, *self.cluster.routers, *self.cluster.replicators]
        return [_state(s, s.name in self._paused, s.name in self._stopped) for s in ordered]

    def is_paused(self, name: str) -> bool:
        return name in self._paused

    def was_stopped(self, name: str) -> bool:
        """Whether the process is down because someone asked for it."""
        return name in self._stopped

    def run(self, command: str, name: str) -> str:
        """Carry out `command` on the process `name`; a line saying what was done."""
        service = self.service(name)
        running = service.is_running()
        if command == "start":
            if running:
                raise ControlError(f"{name} is already running (pid {service.pid})")
            service.start()
            self._stopped.discard(name)
            return f"{name} started (pid {service.pid}) and ready on {service.address}"
        if not running:
            raise ControlError(f"{name} is not running")
        if command == "stop":
            self._continue(service)  # A stopped (SIGSTOP) process cannot act on SIGTERM.
            code = service.stop()
            self._stopped.add(name)
            return f"{name} stopped (exit code {code})"
        if command == "kill":
            service.kill()
            self._paused.discard(name)
            self._stopped.add(name)
            return f"{name} killed (SIGKILL)"
        if command == "pause":
            if name in self._paused:
                raise ControlError(f"{name} is already paused")
            os.kill(_pid(service), signal.SIGSTOP)
            self._paused.add(name)
            return f"{name} paused (SIGSTOP); resume it with: dynalab node resume {name}"
        if command == "resume":
            if name not in self._paused:
                raise ControlError(f"{name} is not paused")
            self._continue(service)
            return f"{name} resumed (SIGCONT)"
        raise ControlError(f"unknown command {command!r}; commands: {', '.join(COMMANDS)}")

    def heal(self) -> None:
        """Resume every paused process and start every one that is not running."""
        for service in self.cluster.services():
            self._continue(service)
        for service in [*self.cluster.nodes, *self.cluster.routers, *self.cluster.replicators]:
            if not service.is_running():
                service.start()
                self._stopped.discard(service.name)

    def _continue(self, service: ServiceProcess) -> None:
        if service.name in self._paused:
            self._paused.discard(service.name)
            if service.is_running():
                os.kill(_pid(service), signal.SIGCONT)


def _pid(service: ServiceProcess) -> int:
    assert service.pid is not None, f"{service.name} has no process"
    return service.pid


@dataclass
class _Request:
    connection: socket.socket
    body: dict[str, Any]


class ControlServer:
    """The control channel of a running `dynalab up`.

    A thread accepts connections and reads one request from each; `serve_pending`, called on the
    cluster's own thread, carries them out and answers. `close` removes the socket and the
    control file.
    """

    def __init__(self, controls: Controls) -> None:
        self.controls = controls
        self.data_dir = controls.cluster.data_dir
        self._directory = Path(tempfile.mkdtemp(prefix="dynalab-control-"))
        self.socket_path = self._directory / "control.sock"
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(str(self.socket_path))
        self._listener.listen(ACCEPT_BACKLOG)
        self._requests: queue.Queue[_Request] = queue.Queue()
        self._closed = threading.Event()
        self._acceptor = threading.Thread(target=self._accept, name="control", daemon=True)

    def start(self) -> ControlServer:
        self.record()
        self._acceptor.start()
        return self

    def record(self) -> None:
        """Write control.json: where the socket is, and who is running under which pid."""
        record = {
            "pid": os.getpid(),
            "socket": str(self.socket_path),
            "services": self.controls.services(),
        }
        path = self.data_dir / CONTROL_FILE
        scratch = path.with_suffix(".tmp")
        scratch.write_text(json.dumps(record, indent=2) + "\n")
        scratch.replace(path)

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                connection, _ = self._listener.accept()
            except OSError:
                return  # The listener was closed.
            connection.settimeout(REQUEST_TIMEOUT_S)
            try:
                body = json.loads(_read_line(connection, REQUEST_BYTES_MAX))
                if not isinstance(body, dict):
                    raise ValueError("a request is a JSON object")
            except (OSError, ValueError) as exc:
                _answer(connection, {"ok": False, "message": f"bad request: {exc}"})
                continue
            self._requests.put(_Request(connection, body))

    def serve_pending(self, timeout_s: float) -> None:
        """Carry out the requests that arrive within `timeout_s`, or just wait that long."""
        try:
            request = self._requests.get(timeout=timeout_s)
        except queue.Empty:
            return
        while True:
            self._serve(request)
            try:
                request = self._requests.get_nowait()
            except queue.Empty:
                return

    def _serve(self, request: _Request) -> None:
        command = request.body.get("command")
        name = request.body.get("name")
        try:
            if command == "list":
                message = ""
            elif not isinstance(command, str) or not isinstance(name, str):
                raise ControlError("a request names a command and a process")
            else:
                message = self.controls.run(command, name)
            reply = {"ok": True, "message": message}
        except (ControlError, ClusterError, OSError) as exc:
            reply = {"ok": False, "message": str(exc)}
        reply["services"] = self.controls.services()
        self.record()
        _answer(request.connection, reply)

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            (self.data_dir / CONTROL_FILE).unlink()
        shutil.rmtree(self._directory, ignore_errors=True)
        while not self._requests.empty():
            _answer(self._requests.get_nowait().connection, {"ok": False, "message": "stopping"})


def _read_line(connection: socket.socket, limit: int) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = connection.recv(limit)
        if not chunk:
            break
        data += chunk
        if len(data) > limit:
            raise ValueError(f"message longer than {limit} bytes")
    return data


def _answer(connection: socket.socket, reply: dict[str, Any]) -> None:
    with connection, contextlib.suppress(OSError):
        connection.sendall(json.dumps(reply).encode() + b"\n")


def _up_is_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def request(
    data_dir: str | os.PathLike[str], command: str, name: str | None = None
) -> dict[str, Any]:
    """Ask the `dynalab up` running on `data_dir` to carry out `command` (on process `name`)."""
    directory = Path(data_dir).resolve()
    try:
        record = json.loads((directory / CONTROL_FILE).read_text())
    except FileNotFoundError:
        raise ControlError(f"no dynalab up is running on {directory}") from None
    if not _up_is_alive(int(record["pid"])):
        raise ControlError(
            f"no dynalab up is running on {directory} (pid {record['pid']} in its "
            f"{CONTROL_FILE} is gone)"
        )
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as connection:
        connection.settimeout(REPLY_TIMEOUT_S)
        try:
            connection.connect(record["socket"])
            connection.sendall(json.dumps({"command": command, "name": name}).encode() + b"\n")
            line = _read_line(connection, REPLY_BYTES_MAX)
        except OSError as exc:
            raise ControlError(f"cannot reach the dynalab up on {directory}: {exc}") from None
    if not line:
        raise ControlError(f"the dynalab up on {directory} closed the connection unanswered")
    reply: dict[str, Any] = json.loads(line)
    return reply
