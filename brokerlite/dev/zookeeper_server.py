"""A private ZooKeeper server process, for tests, the demo and ``trafka cluster``.

This is driver-level plumbing (a subprocess and its files), with no broker logic:
brokers reach ZooKeeper through ``kazoo`` like they would reach any ensemble.

Rules and invariants:

* One :class:`ZooKeeperServer` owns at most one JVM at a time, running ZooKeeper's
  standalone ``ZooKeeperServerMain``. It listens on ``host`` only (loopback by
  default) with the admin HTTP server off.
* Everything it writes lives under ``data_dir``: ``zoo.cfg`` (rewritten at every
  start), ``zookeeper.log`` (the JVM's stdout and stderr, hence ZooKeeper's own
  logging; appended to, one header line per start) and ``data/`` (snapshots and
  transaction logs). Nothing reaches our stdout or stderr.
* ``port=0`` picks a free port at the first start and keeps it for every later
  start, so a restart keeps both the address and the data. A picked port that
  turns out taken before the JVM binds it is replaced, but only before the
  server has ever served.
* :meth:`~ZooKeeperServer.start` returns once the server answers the ``srvr``
  four-letter command with its mode, i.e. it serves requests, not just once its
  port is open. On failure (the JVM exits, the deadline passes) the JVM is
  killed and :class:`ZooKeeperError` carries the tail of ``zookeeper.log``.
* No orphan JVM: it runs in its own process group (a Ctrl-C at the terminal
  reaches Python, whose ``with`` block or finalizer stops it, rather than the
  JVM behind our back); on Linux it gets SIGKILL when its Python process dies
  however it dies (a parent-death signal set in the child; the signal follows
  the *thread* that forked, so a dedicated thread forks it and lives exactly
  as long as the JVM); a finalizer kills it at interpreter exit or when the
  object is garbage collected while the JVM runs.
* Transactions are not fsynced unless ``force_sync=True``: data survives the
  JVM being killed (it is written to the OS), not the machine crashing, which is
  what tests and demos need, at a fraction of the cost.
* Not thread-safe: one thread at a time starts and stops a given server.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import IO, Self

from trafka.codec.errors import TrafkaError

__all__ = [
    "CLASSPATH_ENV",
    "DEBIAN_JAVA_DIR",
    "ZooKeeperError",
    "free_port",
    "parent_death_signal",
    "ZooKeeperServer",
    "find_zookeeper",
    "zookeeper_available",
]

#: The environment variable naming ZooKeeper's classpath (``os.pathsep``-separated
#: jars, directories or ``dir/*`` wildcards), used instead of the Debian layout.
CLASSPATH_ENV = "TRAFKA_ZOOKEEPER_CLASSPATH"

#: Where Debian's ``zookeeper`` package (through ``libzookeeper-java``) puts its jars.
DEBIAN_JAVA_DIR = Path("/usr/share/java")

_MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
_INSTALL_HINT = (
    "install Debian's zookeeper package (as root: apt-get install zookeeper) or set "
    f"{CLASSPATH_ENV} to ZooKeeper's jars, e.g. '/opt/apache-zookeeper-3.8.4-bin/lib/*'"
)
# Read-only commands, for start() and for a human debugging a test run.
_FOUR_LETTER_WORDS = "srvr,ruok,stat,mntr,conf,cons,envi,wchs,dump"
_JVM_FLAGS = (
    "-Xms16m",
    "-Xmx256m",
    "-XX:+UseSerialGC",
    # C1 only: ZooKeeper is idle in tests, and the JVM starts faster.
    "-XX:TieredStopAtLevel=1",
    # No hsperfdata file in /tmp per JVM.
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dzookeeper.jmx.log4j.disable=true",
    "-Dzookeeper.admin.enableServer=false",
    # slf4j-simple (the Debian classpath's binding) logs to stderr, i.e. the log file.
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.dateTimeFormat=yyyy-MM-dd HH:mm:ss.SSS",
)
_LOG_TAIL_LINES = 30
_POLL_INTERVAL = 0.05


class ZooKeeperError(TrafkaError):
    """ZooKeeper could not be found, started or stopped, or the API was misused."""


# --- locating ZooKeeper ---------------------------------------------------------------------


def _find_java(java: str | None) -> str:
    if java is not None:
        found = shutil.which(java)
        if found is None:
            raise ZooKeeperError(f"java binary {java!r} not found or not executable")
        return found
    java_home = os.environ.get("JAVA_HOME")
    if java_home:
        candidate = Path(java_home) / "bin" / "java"
        if not os.access(candidate, os.X_OK):
            raise ZooKeeperError(
                f"JAVA_HOME={java_home} has no executable bin/java: fix or unset JAVA_HOME"
            )
        return str(candidate)
    found = shutil.which("java")
    if found is None:
        raise ZooKeeperError(
            "java not found: install a Java runtime (as root: apt-get install "
            "default-jre-headless) or set JAVA_HOME"
        )
    return found


def _check_classpath(classpath: str, source: str) -> str:
    entries = [entry for entry in classpath.split(os.pathsep) if entry]
    if not entries:
        raise ZooKeeperError(f"{source} is empty; {_INSTALL_HINT}")
    for entry in entries:
        exists = Path(entry[:-1] or ".").is_dir() if entry.endswith("*") else Path(entry).exists()
        if not exists:
            raise ZooKeeperError(f"{source} names {entry!r}, which does not exist")
    return os.pathsep.join(entries)


def _debian_classpath() -> str | None:
    jar = DEBIAN_JAVA_DIR / "zookeeper.jar"
    if not jar.is_file():
        return None
    # Debian's zkEnv.sh uses "/etc/zookeeper/conf:/usr/share/java/zookeeper.jar":
    # the jar's manifest names its dependencies (slf4j-api, netty, jute...) by
    # absolute path. /etc/zookeeper/conf only adds a log4j.properties that no
    # binding on that classpath reads, so ZooKeeper would log nothing at all;
    # slf4j-simple (same package as slf4j-api) sends its logs to stderr instead.
    parts = [str(jar)]
    binding = DEBIAN_JAVA_DIR / "slf4j-simple.jar"
    if binding.is_file():
        parts.append(str(binding))
    return os.pathsep.join(parts)


def _zookeeper_classpath() -> str:
    configured = os.environ.get(CLASSPATH_ENV)
    if configured is not None:
        return _check_classpath(configured, CLASSPATH_ENV)
    classpath = _debian_classpath()
    if classpath is None:
        raise ZooKeeperError(
            f"ZooKeeper not found: no {DEBIAN_JAVA_DIR / 'zookeeper.jar'} and {CLASSPATH_ENV} "
            f"is not set; {_INSTALL_HINT}"
        )
    return classpath


def find_zookeeper() -> tuple[str, str]:
    """Locate a Java runtime and ZooKeeper's classpath.

    Java: ``$JAVA_HOME/bin/java`` when ``JAVA_HOME`` is set, else ``java`` on the
    ``PATH``. ZooKeeper: ``$TRAFKA_ZOOKEEPER_CLASSPATH`` when set, else Debian's
    layout (``/usr/share/java/zookeeper.jar``, from ``apt-get install zookeeper``).

    Returns:
        ``(java, classpath)``: the java binary's path and a classpath string.

    Raises:
        ZooKeeperError: Java or ZooKeeper is missing, or the variable names paths
            that do not exist; the message says what to install or set.
    """
    return _find_java(None), _zookeeper_classpath()


def zookeeper_available() -> bool:
    """Whether :func:`find_zookeeper` finds Java and ZooKeeper (for tests to skip).

    Returns:
        ``True`` when a server could be launched.
    """
    try:
        find_zookeeper()
    except ZooKeeperError:
        return False
    return True


# --- the process ------------------------------------------------------------------------------

if sys.platform.startswith("linux"):
    _PR_SET_PDEATHSIG = 1
    _prctl: Callable[..., int] | None = ctypes.CDLL(None, use_errno=True).prctl
else:  # pragma: no cover - the finalizer and the process group remain
    _prctl = None


def _die_with_parent() -> None:
    # Runs in the child between fork and exec; the setting survives exec.
    if _prctl is not None:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def parent_death_signal(signum: int) -> Callable[[], None] | None:
    """A ``preexec_fn`` for ``subprocess.Popen`` that has the child sent ``signum`` when
    the thread that forked it ends (Linux; None elsewhere). Fork from a thread that
    lives as long as the child should, e.g. the main thread."""
    prctl = _prctl
    if prctl is None:  # pragma: no cover - Linux only
        return None

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, signum, 0, 0, 0)

    return preexec


def _spawn(argv: list[str], log: IO[bytes], cwd: Path) -> subprocess.Popen[bytes]:
    """Start ``argv`` from a thread that lives as long as the process (see the rules)."""
    started = threading.Event()
    outcome: list[subprocess.Popen[bytes] | BaseException] = []

    def own() -> None:
        try:
            proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=cwd,
                start_new_session=True,
                preexec_fn=_die_with_parent if _prctl is not None else None,
            )
        except BaseException as exc:
            outcome.append(exc)
            started.set()
            return
        outcome.append(proc)
        started.set()
        proc.wait()

    threading.Thread(target=own, name="zookeeper-owner", daemon=True).start()
    started.wait()
    result = outcome[0]
    if isinstance(result, BaseException):
        raise ZooKeeperError(f"could not launch {argv[0]}: {result}") from result
    return result


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    if proc.returncode is not None:
        return
    try:
        os.killpg(proc.pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_at_exit(proc: subprocess.Popen[bytes]) -> None:
    """The finalizer: must not refer to the server object, only to its process."""
    _signal_group(proc, signal.SIGKILL)
    with contextlib.suppress(subprocess.TimeoutExpired):
        proc.wait(5.0)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` now (the OS picks it; it may be taken again before use)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _port_is_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        # ZooKeeper binds with SO_REUSEADDR too: TIME_WAIT left by clients is no conflict.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def _four_letter_word(host: str, port: int, word: bytes, timeout: float) -> str | None:
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(word)
            chunks = []
            while chunk := sock.recv(4096):
                chunks.append(chunk)
    except OSError:
        return None
    return b"".join(chunks).decode("utf-8", "replace")


class ZooKeeperServer:
    """A standalone ZooKeeper server in a child JVM, with its files in ``data_dir``.

    Use it as a context manager (``with ZooKeeperServer(path) as zk:``) or call
    :meth:`start` and :meth:`stop`. See the module's rules.

    Args:
        data_dir: directory for ``zoo.cfg``, ``zookeeper.log`` and the data
            (created when missing). Reusing it keeps the znodes.
        port: the client port; 0 picks a free one at the first start and keeps it.
        host: the address to listen on (``clientPortAddress``).
        tick_ms: ZooKeeper's ``tickTime``; sessions last between 2 and 20 ticks
            unless ``max_session_timeout_ms`` says otherwise.
        max_session_timeout_ms: the longest session timeout the server grants.
        java: the java binary (default: see :func:`find_zookeeper`).
        classpath: ZooKeeper's classpath (default: see :func:`find_zookeeper`).
        force_sync: fsync every transaction (ZooKeeper's default; off here).

    Raises:
        ValueError: a setting out of range.
    """

    def __init__(
        self,
        data_dir: Path,
        *,
        port: int = 0,
        host: str = "127.0.0.1",
        tick_ms: int = 500,
        max_session_timeout_ms: int = 60000,
        java: str | None = None,
        classpath: str | None = None,
        force_sync: bool = False,
    ) -> None:
        if not 0 <= port <= 65535:
            raise ValueError(f"port must be in 0..65535, not {port}")
        if tick_ms <= 0:
            raise ValueError(f"tick_ms must be positive, not {tick_ms}")
        if max_session_timeout_ms < 2 * tick_ms:
            raise ValueError(
                f"max_session_timeout_ms ({max_session_timeout_ms}) must be at least "
                f"2 * tick_ms ({2 * tick_ms})"
            )
        self._data_dir = Path(data_dir).absolute()
        self._host = host
        self._port = port
        self._tick_ms = tick_ms
        self._max_session_timeout_ms = max_session_timeout_ms
        self._java = java
        self._classpath = classpath
        self._force_sync = force_sync
        self._proc: subprocess.Popen[bytes] | None = None
        self._finalizer: weakref.finalize[[subprocess.Popen[bytes]], ZooKeeperServer] | None = None
        self._served = False

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ZooKeeperServer {self._host}:{self._port} {state} data_dir={self._data_dir}>"

    # -- properties --

    @property
    def data_dir(self) -> Path:
        """The server's directory (configuration, log and data)."""
        return self._data_dir

    @property
    def log_path(self) -> Path:
        """``zookeeper.log`` in :attr:`data_dir`: the JVM's output, all starts appended."""
        return self._data_dir / "zookeeper.log"

    @property
    def host(self) -> str:
        """The address the server listens on."""
        return self._host

    @property
    def port(self) -> int:
        """The client port (0 until the first start when it was picked automatically)."""
        return self._port

    @property
    def connect_string(self) -> str:
        """``host:port``, as ``kazoo`` and ``zookeeper.connect`` take it.

        Raises:
            ZooKeeperError: the port is still to be picked (never started).
        """
        if self._port == 0:
            raise ZooKeeperError("the port is picked at the first start(): start the server first")
        host = f"[{self._host}]" if ":" in self._host else self._host
        return f"{host}:{self._port}"

    @property
    def running(self) -> bool:
        """Whether the JVM is alive (it may still be starting, or be stopping)."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The JVM's process id while one was launched and not yet stopped, else ``None``."""
        return None if self._proc is None else self._proc.pid

    # -- lifecycle --

    def start(self, timeout: float = 30.0) -> None:
        """Write ``zoo.cfg``, launch the JVM and wait until the server serves.

        Args:
            timeout: seconds to wait for the server to serve.

        Raises:
            ZooKeeperError: already running; Java or ZooKeeper not found; the
                port is taken; the JVM exited or did not serve within ``timeout``
                (the message holds the tail of :attr:`log_path`).
        """
        if self._proc is not None:
            if self.running:
                raise ZooKeeperError(f"already running on {self.connect_string}")
            self._reap()
        java = _find_java(self._java)
        if self._classpath is not None:
            classpath = _check_classpath(self._classpath, "the classpath argument")
        else:
            classpath = _zookeeper_classpath()
        self._data_dir.mkdir(parents=True, exist_ok=True)
        (self._data_dir / "data").mkdir(exist_ok=True)
        deadline = time.monotonic() + timeout
        attempts = 3 if self._port == 0 and not self._served else 1
        for attempt in range(attempts):
            port = self._port or free_port(self._host)
            if not _port_is_free(self._host, port):
                if attempt + 1 < attempts and not self._served:
                    continue
                raise ZooKeeperError(f"cannot start ZooKeeper: {self._host}:{port} is in use")
            self._port = port
            try:
                self._launch(java, classpath, deadline, timeout)
            except _PortTaken:
                if attempt + 1 < attempts:
                    self._port = 0
                    continue
                raise ZooKeeperError(
                    f"cannot start ZooKeeper: {self._host}:{port} is in use\n{self._log_tail()}"
                ) from None
            self._served = True
            return

    def _launch(self, java: str, classpath: str, deadline: float, timeout: float) -> None:
        config = self._write_config()
        argv = [
            java,
            *_JVM_FLAGS,
            f"-Dzookeeper.forceSync={'yes' if self._force_sync else 'no'}",
            # Transaction logs are preallocated in 64 MB steps by default.
            "-Dzookeeper.preAllocSize=4096",
            # For logging configurations that name a file (log4j, logback).
            f"-Dzookeeper.log.dir={self._data_dir}",
            "-Dzookeeper.log.file=zookeeper.log",
            "-cp",
            classpath,
            _MAIN_CLASS,
            str(config),
        ]
        with open(self.log_path, "ab") as log:
            stamp = time.strftime("%Y-%m-%d %H:%M:%S")
            log.write(
                f"=== trafka: ZooKeeper starting on {self.connect_string} at {stamp}\n".encode()
            )
            log.flush()
            proc = _spawn(argv, log, self._data_dir)
        self._proc = proc
        self._finalizer = weakref.finalize(self, _kill_at_exit, proc)
        try:
            self._wait_serving(proc, deadline, timeout)
        except BaseException:
            # Interrupted (Ctrl-C) or failed: never leave a half-started JVM behind.
            self._terminate(signal.SIGKILL, 5.0)
            raise

    def _wait_serving(self, proc: subprocess.Popen[bytes], deadline: float, timeout: float) -> None:
        while True:
            code = proc.poll()
            if code is not None:
                tail = self._log_tail()
                if not self._served and "Address already in use" in tail:
                    raise _PortTaken
                raise ZooKeeperError(
                    f"ZooKeeper exited with code {code} while starting on "
                    f"{self.connect_string}; last lines of {self.log_path}:\n{tail}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ZooKeeperError(
                    f"ZooKeeper did not serve on {self.connect_string} within {timeout:g} s; "
                    f"last lines of {self.log_path}:\n{self._log_tail()}"
                )
            reply = _four_letter_word(self._host, self._port, b"srvr", min(1.0, remaining))
            # "This ZooKeeper instance is not currently serving requests" until loaded.
            if reply is not None and "Mode: " in reply and proc.poll() is None:
                return
            time.sleep(min(_POLL_INTERVAL, max(0.0, deadline - time.monotonic())))

    def _write_config(self) -> Path:
        lines = [
            "# Written by trafka.brokerlite.dev.zookeeper_server at every start; edits are lost.",
            f"tickTime={self._tick_ms}",
            f"dataDir={self._data_dir / 'data'}",
            f"clientPort={self._port}",
            f"clientPortAddress={self._host}",
            f"maxSessionTimeout={self._max_session_timeout_ms}",
            # Tests open many sessions from one address; the default limit is 60.
            "maxClientCnxns=0",
            "admin.enableServer=false",
            f"4lw.commands.whitelist={_FOUR_LETTER_WORDS}",
        ]
        path = self._data_dir / "zoo.cfg"
        path.write_text("\n".join(lines) + "\n")
        return path

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server: SIGTERM, then SIGKILL after ``timeout`` seconds.

        Does nothing when it is not running. The data stays in :attr:`data_dir`.

        Args:
            timeout: seconds to wait for a clean exit before killing.
        """
        self._terminate(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Kill the server with SIGKILL at once (for fault tests: "ZooKeeper down").

        Clients lose their connections; sessions survive on disk until they
        expire after a :meth:`start`. Does nothing when it is not running.
        """
        self._terminate(signal.SIGKILL, 5.0)

    def restart(self, timeout: float = 30.0) -> None:
        """Stop (when running) and start again, on the same port and data.

        Args:
            timeout: seconds to wait for the server to serve again.

        Raises:
            ZooKeeperError: as :meth:`start`.
        """
        self.stop()
        self.start(timeout)

    def _terminate(self, signum: int, timeout: float) -> None:
        proc = self._proc
        if proc is None:
            return
        _signal_group(proc, signum)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            _signal_group(proc, signal.SIGKILL)
            proc.wait(5.0)
        self._reap()

    def _reap(self) -> None:
        if self._finalizer is not None:
            self._finalizer.detach()
            self._finalizer = None
        self._proc = None

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as log:
                log.seek(0, os.SEEK_END)
                log.seek(max(0, log.tell() - 65536))
                text = log.read().decode("utf-8", "replace")
        except OSError as exc:
            return f"(no log: {exc})"
        # Only this start's lines: from the last header on.
        text = text[text.rfind("=== trafka: ") :] if "=== trafka: " in text else text
        return "\n".join(text.splitlines()[-_LOG_TAIL_LINES:])

    # -- context manager --

    def __enter__(self) -> Self:
        if not self.running:
            self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


class _PortTaken(Exception):
    """Internal: the JVM lost the race for a port picked automatically."""
