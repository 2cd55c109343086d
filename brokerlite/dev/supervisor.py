"""``trafka cluster``'s supervisor: a private ZooKeeper and every broker a process of its
own, with node control from another terminal (``trafka cluster node stop 2``).

Rules:

* The supervisor owns the processes (:class:`~.local_cluster.ClusterProcesses` with
  ``detached=True``): brokers run in sessions of their own, so a terminal's Ctrl-C
  reaches only the supervisor, which stops every broker (SIGTERM, a clean
  shutdown that deregisters it at once) and then ZooKeeper. Brokers get SIGTERM
  when the supervisor dies however it dies (Linux's parent-death signal), so none
  is left behind.
* A broker that exits without being asked to is reported (its id and exit status,
  or the signal that ended it); the others keep running, and ``node start``
  brings it back.
* The control channel: the supervisor listens on a loopback TCP port and writes
  ``<data dir>/cluster.json`` (mode 0600: the port, a random token, the
  supervisor's and ZooKeeper's pids, each node's id, address, pid, data
  directory and state). A control command reads that file and sends one JSON
  line, ``{"token": ..., "command": "list"|"start"|"stop"|"kill", "node": N}``;
  the answer is one JSON line, ``{"ok": true, "nodes": [...]}`` or
  ``{"ok": false, "error": "..."}``. The token keeps other local users (who can
  reach the port, not the file) out. A request line is at most
  :data:`MAX_REQUEST_BYTES`; one operation runs at a time.
* A restarted node keeps its id, port and data directory; it registers in
  ZooKeeper again (waiting out a killed predecessor's session) and catches up.
* One supervisor per data directory: it holds an exclusive lock on
  ``cluster.lock`` there from before it starts anything until everything has
  stopped, and a second one is refused before it touches a file.
* The state file goes when the supervisor stops; one left by a supervisor that
  died is recognised (its pid is gone) and replaced.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import secrets
import signal
import socket
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import trio

from .local_cluster import ClusterProcesses

__all__ = [
    "LOCK_FILE",
    "MAX_REQUEST_BYTES",
    "STATE_FILE",
    "ClusterSupervisor",
    "ControlError",
    "control",
    "describe_exit",
    "read_state",
]

#: The state file's name, in the cluster's data directory.
STATE_FILE = "cluster.json"
#: Locked (flock) by the supervisor while it runs: one cluster per data directory.
LOCK_FILE = "cluster.lock"
#: The longest control request line accepted.
MAX_REQUEST_BYTES = 4096
_POLL_S = 0.1
_COMMANDS = ("list", "start", "stop", "kill")


class ControlError(Exception):
    """A control request could not be sent, or the supervisor refused it."""


def describe_exit(returncode: int) -> str:
    """``exit status 1`` or ``killed by SIGKILL``, as a shell would say it."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name}"
    return f"exit status {returncode}"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_state(data_dir: Path) -> dict[str, Any]:
    """The running supervisor's state file in ``data_dir``.

    Raises:
        ControlError: no supervisor runs with that directory (no file, an unreadable
            one, or one whose supervisor is gone).
    """
    path = Path(data_dir) / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ControlError(
            f"no cluster runs with data directory {data_dir} (no {path}): start one with "
            f"`trafka cluster --data-dir {data_dir}`, or give its --data-dir"
        ) from None
    except (OSError, ValueError) as exc:
        raise ControlError(f"cannot read {path}: {exc}") from None
    if not isinstance(state, dict) or not isinstance(state.get("supervisor_pid"), int):
        raise ControlError(f"{path} is not a trafka cluster state file")
    if not _pid_alive(state["supervisor_pid"]):
        raise ControlError(
            f"the cluster supervisor of {data_dir} (pid {state['supervisor_pid']}) is gone; "
            f"{path} is stale"
        )
    return state


def control(data_dir: Path, command: str, node: int | None = None, timeout: float = 120.0) -> Any:
    """Send one request to the supervisor running with ``data_dir``; its answer.

    Raises:
        ControlError: no supervisor, it cannot be reached, or it refused the request.
    """
    state = read_state(data_dir)
    request = json.dumps({"token": state["token"], "command": command, "node": node}) + "\n"
    try:
        with socket.create_connection(("127.0.0.1", state["control_port"]), timeout) as sock:
            sock.sendall(request.encode())
            with sock.makefile("rb") as answer:
                line = answer.readline(1 << 20)
    except OSError as exc:
        raise ControlError(f"cannot reach the cluster supervisor: {exc}") from None
    try:
        reply = json.loads(line)
    except ValueError:
        raise ControlError("the supervisor gave no answer") from None
    if not reply.get("ok"):
        raise ControlError(str(reply.get("error", "refused")))
    return reply


class ClusterSupervisor:
    """Runs a :class:`ClusterProcesses` until a signal, serving node control.

    Args:
        processes: the cluster (``detached=True``), not started yet.
        say: where reports go (a line each).
    """

    def __init__(self, processes: ClusterProcesses, say: Callable[[str], None]) -> None:
        self.processes = processes
        self._say = say
        self._token = secrets.token_hex(16)
        self._control_port = 0
        # node id -> "running", "stopped" (asked), "killed" (asked) or "exited" (not asked)
        self.states = dict.fromkeys(processes.ports, "running")
        self.exits: dict[int, str] = {}
        self._lock = trio.Lock()
        self._lock_file: IO[str] | None = None

    @property
    def state_path(self) -> Path:
        return self.processes.root / STATE_FILE

    def start(self) -> None:
        """Start ZooKeeper and every broker (blocking; from the main thread, see
        ``detached``). Stops what started if it fails or is interrupted.

        Raises:
            ControlError: another supervisor runs with this data directory.
        """
        root = self.processes.root
        root.mkdir(parents=True, exist_ok=True)
        lock = open(root / LOCK_FILE, "a")  # noqa: SIM115 - held until run() ends
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            lock.close()
            raise ControlError(
                f"a cluster already runs with data directory {root} "
                "(see `trafka cluster node list --data-dir ...`)"
            ) from None
        self._lock_file = lock
        try:
            self.processes.start()
        except BaseException:
            self.processes.stop()
            self._release()
            raise

    def _release(self) -> None:
        if self._lock_file is not None:
            self._lock_file.close()
            self._lock_file = None

    async def run(self, ready: Callable[[], None] = lambda: None) -> int:
        """Serve until SIGINT or SIGTERM, then stop everything; 128 + the signal.
        ``ready`` is called once signals are watched and the state file is written.
        A SIGINT ignored when the process started (a script's background job) stays
        ignored, as in the other commands."""
        received = signal.SIGTERM
        wanted = [signal.SIGTERM]
        if signal.getsignal(signal.SIGINT) is not signal.SIG_IGN:
            wanted.append(signal.SIGINT)
        try:
            with trio.open_signal_receiver(*wanted) as signals:
                listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
                self._control_port = listeners[0].socket.getsockname()[1]
                self._write_state()
                ready()
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(self._watch)
                    nursery.start_soon(trio.serve_listeners, self._serve_client, listeners)
                    async for signum in signals:
                        received = signal.Signals(signum)
                        self._say(f"received {received.name}, stopping the cluster")
                        break
                    nursery.cancel_scope.cancel()
        finally:
            with contextlib.suppress(OSError):
                self.state_path.unlink()
            with trio.CancelScope(shield=True):
                await trio.to_thread.run_sync(self.processes.stop)
            self._release()
        return 128 + received

    def nodes(self) -> list[dict[str, Any]]:
        """Each node's id, address, pid, data directory and state."""
        out = []
        for node_id, port in sorted(self.processes.ports.items()):
            proc = self.processes.procs.get(node_id)
            state = self.states[node_id]
            out.append(
                {
                    "id": node_id,
                    "address": f"{self.processes.host}:{port}",
                    "pid": proc.pid if proc is not None and state == "running" else None,
                    "data_dir": str(self.processes.root / f"node-{node_id}"),
                    "log": str(self.processes.root / f"node-{node_id}.log"),
                    "state": state,
                    "last_exit": self.exits.get(node_id),
                }
            )
        return out

    def _write_state(self) -> None:
        zookeeper = self.processes.zookeeper
        state = {
            "supervisor_pid": os.getpid(),
            "control_port": self._control_port,
            "token": self._token,
            "zookeeper": {
                "connect": self.processes.zookeeper_connect,
                "pid": zookeeper.pid if zookeeper is not None else None,
            },
            "bootstrap_servers": self.processes.bootstrap_servers,
            "nodes": self.nodes(),
        }
        tmp = self.state_path.with_suffix(".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(state, out, indent=2)
            out.write("\n")
        os.replace(tmp, self.state_path)

    async def _watch(self) -> None:
        """Report brokers that exit without being asked to."""
        while True:
            changed = False
            for node_id, proc in list(self.processes.procs.items()):
                code = proc.poll()
                if code is None or self.states[node_id] != "running":
                    continue
                self.states[node_id] = "exited"
                self.exits[node_id] = describe_exit(code)
                self._say(
                    f"node {node_id} (pid {proc.pid}) exited: {describe_exit(code)}; "
                    f"the others keep running (`trafka cluster node start {node_id}`)"
                )
                changed = True
            if changed:
                self._write_state()
            await trio.sleep(_POLL_S)

    async def _serve_client(self, stream: trio.SocketStream) -> None:
        async with stream:
            try:
                with trio.fail_after(10):
                    line = await _read_line(stream)
                request = json.loads(line)
                if not isinstance(request, dict) or not secrets.compare_digest(
                    str(request.get("token", "")), self._token
                ):
                    raise ValueError("bad token")
            except (ValueError, trio.TooSlowError, trio.BrokenResourceError):
                with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                    await stream.send_all(b'{"ok": false, "error": "bad request"}\n')
                return
            try:
                reply: dict[str, Any] = {"ok": True, **await self._handle(request)}
            except ControlError as exc:
                reply = {"ok": False, "error": str(exc)}
            with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
                await stream.send_all(json.dumps(reply).encode() + b"\n")

    async def _handle(self, request: dict[str, Any]) -> dict[str, Any]:
        command = request.get("command")
        if command not in _COMMANDS:
            raise ControlError(f"unknown command {command!r}: one of {', '.join(_COMMANDS)}")
        if command == "list":
            return {"nodes": self.nodes(), "zookeeper": self.processes.zookeeper_connect}
        node_id = request.get("node")
        if not isinstance(node_id, int) or node_id not in self.processes.ports:
            raise ControlError(
                f"no node {node_id}: the nodes are {', '.join(map(str, self.processes.ports))}"
            )
        async with self._lock:
            if command == "start":
                await self._start(node_id)
            else:
                await self._end(node_id, command)
            self._write_state()
        return {"nodes": self.nodes()}

    async def _start(self, node_id: int) -> None:
        proc = self.processes.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            raise ControlError(f"node {node_id} is running (pid {proc.pid})")
        # Forked from the main thread: the parent-death signal follows the forking thread.
        self.processes.start_node(node_id, wait=False)
        self.states[node_id] = "running"
        pid = self.processes.procs[node_id].pid
        self._say(f"node {node_id} starting (pid {pid})")
        try:
            await trio.to_thread.run_sync(self.processes.wait_serving, node_id)
        except RuntimeError as exc:
            raise ControlError(str(exc)) from None
        self._say(f"node {node_id} rejoined the cluster (pid {pid})")

    async def _end(self, node_id: int, command: str) -> None:
        proc = self.processes.procs.get(node_id)
        if proc is None or proc.poll() is not None:
            raise ControlError(f"node {node_id} is not running ({self.states[node_id]})")
        self.states[node_id] = "stopped" if command == "stop" else "killed"
        ending = self.processes.stop_node if command == "stop" else self.processes.kill
        started = time.monotonic()
        await trio.to_thread.run_sync(ending, node_id)
        code = proc.returncode
        self.exits[node_id] = describe_exit(code)
        self._say(
            f"node {node_id} (pid {proc.pid}) {self.states[node_id]} on request: "
            f"{describe_exit(code)} after {time.monotonic() - started:.1f} s"
        )


async def _read_line(stream: trio.SocketStream) -> bytes:
    data = b""
    while b"\n" not in data:
        chunk = await stream.receive_some(MAX_REQUEST_BYTES)
        if not chunk:
            break
        data += chunk
        if len(data) > MAX_REQUEST_BYTES:
            raise ValueError("request too long")
    return data.split(b"\n", 1)[0]
