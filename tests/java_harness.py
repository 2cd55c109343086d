"""Kafka's own Java client and scripts as test peers: ``tests/interop/java/``'s
``KafkaHarness.java`` (client scenarios) and ``ScriptRunner.java`` (the scripts'
main classes, one after the other), each run with a list of work in one JVM.

Rules:

* The sources are compiled with ``javac`` against the jars of
  :data:`kafka_peers.KAFKA_4` (no build tool), into a directory of the system's
  temporary folder named by the hash of the sources and the Kafka version: a
  second test session, or a second xdist worker, finds it compiled (a lock
  file makes the others wait while one compiles; the classes are renamed into
  place whole).
* One JVM runs every scenario a test asks for (a JVM start costs about a second
  of CPU), one after the other or a few at a time (``parallel``); it prints one
  JSON line per scenario (``scenario``, ``ok``, ``error``, ``seconds``,
  ``details``) and the client's logs (WARN and above) on standard error.
* The run has a deadline: ``timeout`` seconds for the whole process, after which
  it is killed and the scenarios that had not reported are failures.
* A :class:`ScriptSession` keeps one ScriptRunner JVM for several lists of
  commands, each chosen once the outcomes of the one before are known.
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import hashlib
import json
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from kafka_peers import KAFKA_4, classpath, java_command

SOURCES = Path(__file__).resolve().parent / "interop" / "java"
MAIN = "KafkaHarness"
SCRIPT_RUNNER = "ScriptRunner"

_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = WARN
rootLogger.appenderRef.err.ref = err
"""


def compiled(version: str = KAFKA_4) -> Path:
    """The directory of the compiled harness (compiled now if no one has yet)."""
    sources = sorted(SOURCES.glob("*.java"))
    digest = hashlib.sha256(
        b"".join(p.name.encode() + p.read_bytes() for p in sources) + version.encode()
    ).hexdigest()[:16]
    home = Path(tempfile.gettempdir()) / f"trafka-java-harness-{digest}"
    if (home / f"{MAIN}.class").is_file():
        return home
    lock_path = Path(tempfile.gettempdir()) / f"trafka-java-harness-{digest}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (home / f"{MAIN}.class").is_file():
            return home
        work = Path(tempfile.mkdtemp(prefix=f"{home.name}-", dir=home.parent))
        javac = shutil.which("javac") or "javac"
        done = subprocess.run(
            [javac, "-d", str(work), "-cp", classpath("kafka", version), *map(str, sources)],
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        if done.returncode != 0:
            shutil.rmtree(work, ignore_errors=True)
            raise RuntimeError(f"javac {SOURCES} failed:\n{done.stdout}{done.stderr}")
        (work / "log4j2.properties").write_text(_LOG4J2)
        os.rename(work, home)
    return home


def run(
    bootstrap: str,
    scenarios: list[str],
    *,
    timeout: float,
    replication: int = 1,
    parallel: int = 1,
    version: str = KAFKA_4,
    properties: dict[str, str] | None = None,
) -> tuple[dict[str, dict[str, Any]], str]:
    """Every scenario's outcome by name, and the JVM's standard error.

    ``replication`` is the replication factor of the topics the scenarios make;
    ``parallel`` how many scenarios run at a time (1: one after the other);
    ``properties`` more system properties for the scenarios (``harness.topic``...).
    A scenario missing from the output (the JVM died or ran out of ``timeout``)
    is reported as failed, with the reason."""
    home = compiled(version)
    argv = java_command(MAIN, bootstrap, f"jh{uuid.uuid4().hex[:8]}", *scenarios, version=version)
    cp = argv.index("-cp") + 1
    argv[cp] = f"{argv[cp]}{os.pathsep}{home}"  # Kafka's jars first: their CDS archive applies
    argv[cp - 1 : cp - 1] = [
        f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}",
        f"-Dharness.replication={replication}",
        f"-Dharness.parallel={parallel}",
        *(f"-D{k}={v}" for k, v in (properties or {}).items()),
    ]
    outcomes: dict[str, dict[str, Any]] = {}
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        stdout, stderr, why = done.stdout, done.stderr, f"the JVM exited with {done.returncode}"
    except subprocess.TimeoutExpired as exc:
        stdout = _text(exc.stdout)
        stderr = _text(exc.stderr)
        why = f"the JVM was killed after {timeout:.0f} s"
    for line in stdout.splitlines():
        if line.startswith('{"scenario"'):
            outcome = json.loads(line)
            outcomes[outcome["scenario"]] = outcome
    for name in scenarios:
        outcomes.setdefault(name, {"scenario": name, "ok": False, "error": f"no outcome: {why}"})
    return outcomes, stderr


class ScriptSession:
    """One ScriptRunner JVM that runs the commands it is given as they come
    (its commands file is its standard input): a caller that chooses its next
    commands from the first ones' outcomes (a token's HMAC, a wait for the
    brokers between phases) pays one JVM start and warm-up, not one a phase.
    Closed (its JVM ended) on leaving the ``with`` block."""

    def __init__(self, version: str = KAFKA_4, home: Path | None = None) -> None:
        # ``home``: the classes :func:`compiled` made (found again by a process
        # whose temporary folder is another, as a bench smoke line's is).
        home = compiled(version) if home is None else home
        argv = java_command(SCRIPT_RUNNER, "-", version=version)
        cp = argv.index("-cp") + 1
        argv[cp] = f"{argv[cp]}{os.pathsep}{home}"  # Kafka's jars first: their CDS archive applies
        argv.insert(cp - 1, f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}")
        self._proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,  # the clients' logs
            text=True,
        )
        self._lines: queue.Queue[str | None] = queue.Queue()
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self._sent = 0

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def run(
        self, commands: list[tuple[str, list[str], str | None]], *, timeout: float
    ) -> list[dict[str, Any]]:
        """Each command's outcome, in order (see :func:`run_scripts`); past
        ``timeout`` the JVM is killed, and this and later runs' commands are lost."""
        lines = []
        for main, args, stdin in commands:
            assert all("\t" not in a and "\n" not in a for a in args), args
            extra = (
                []
                if stdin is None
                else ["--stdin-base64=" + base64.b64encode(stdin.encode()).decode()]
            )
            lines.append("\t".join([main, *args, *extra]))
        first = self._sent
        self._sent += len(lines)
        found: dict[int, dict[str, Any]] = {}
        try:
            assert self._proc.stdin is not None
            self._proc.stdin.write("".join(f"{line}\n" for line in lines))
            self._proc.stdin.flush()
        except OSError:  # the JVM is gone: every command is lost
            pass
        deadline = time.monotonic() + timeout
        while len(found) < len(lines):
            try:
                line = self._lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                self._proc.kill()
                break
            if line is None:
                self._lines.put(None)  # the JVM ended: so for later runs too
                break
            if line.startswith('{"index"'):
                outcome = json.loads(line)
                outcome["index"] -= first
                found[outcome["index"]] = outcome
        return [
            found.get(i, {"index": i, "exit": "lost", "out": "", "err": ""})
            for i in range(len(lines))
        ]

    def close(self) -> None:
        if self._proc.stdin is not None:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()
        try:
            self._proc.wait(30)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()

    def __enter__(self) -> ScriptSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def run_scripts(
    commands: list[tuple[str, list[str], str | None]], *, timeout: float, version: str = KAFKA_4
) -> list[dict[str, Any]]:
    """Each command's outcome (``exit``, ``out``, ``err``, ``ms``), in order: a
    command is a script's main class, its arguments and its standard input (or
    None), all run one after the other in one JVM by ``ScriptRunner``. A command
    without an outcome (the JVM died or ran out of ``timeout``) has exit ``"lost"``."""
    with ScriptSession(version) as session:
        return session.run(commands, timeout=timeout)


def _text(data: bytes | str | None) -> str:
    if data is None:
        return ""
    return data if isinstance(data, str) else data.decode(errors="replace")
