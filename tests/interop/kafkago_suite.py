"""segmentio/kafka-go's own test suite, run unchanged against a broker.

As franz-go's (kgo_suite.py): the module comes from the Go module proxy into Go's
module cache (never into the repository), the tests of its packages that talk
to a broker (the root package ``kafka`` and ``compress``) are compiled once
(``go test -c``, in the module's own directory, as its go.mod and go.sum pin
them) into ``.cache/kafkago/`` (ignored, shared by worktrees linking ``.cache``),
and each binary runs with its package's directory as its working directory, as
``go test`` runs it (tests read ``fixtures/`` beside them).

kafka-go's tests name their broker nowhere but in code: ``localhost:9092``
(its docker-compose files' PLAINTEXT listener; SASL on ``localhost:9093``). So
each run gets a network namespace of its own (private_net.py) where the broker
listens on 9092 and the binary runs: workers never collide, and no port of the
machine is taken. ``KAFKA_VERSION`` (which gates its tests by the broker's
version) is the control's Kafka version, for every broker measured;
``KAFKA_SKIP_NETTEST`` is set, as kafka-go's own CI sets it (golang.org/x/net's
conformance tests of a Conn, which its CI found flaky against any broker).

A run's outcome is one word per top-level test (``pass``, ``fail``, ``skip``,
``unfinished``), read from ``-test.v``'s lines by :func:`kgo_suite.parse`; the
tests of ``compress`` are named ``compress.TestX``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

import kgo_suite
import pytest
from kgo_suite import Run
from private_net import PrivateNetwork

MODULE = "github.com/segmentio/kafka-go"
VERSION = "v0.4.51"
#: the packages whose tests talk to a broker: "" is the module's root (package kafka)
PACKAGES = ("", "compress")
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "kafkago"
#: The binary's own deadline (-test.timeout); the process is killed a minute later.
DEADLINE_S = 600

#: kafka-go tests left out on every broker, with why: those needing what a
#: broker of one listener cannot give (a SASL_PLAINTEXT listener on
#: localhost:9093 beside the PLAINTEXT one on 9092, with the users of kafka-go's
#: docker-compose files; brokerlite serves one listener per node), and the
#: subtests that call kafka-go's own helper ``getOffsets``, whose ConsumerGroup
#: has no ``connect`` function: a nil call that panics and ends the whole binary
#: (the tests after it never run), on any broker.
_NIL_CONNECT = "kafka-go v0.4.51's getOffsets calls a nil ConsumerGroupConfig.connect (a panic)"
SKIPPED = {
    "TestWriter/writing_a_message_with_SASL_Plain_authentication": (
        "a SASL_PLAINTEXT listener on localhost:9093 beside 9092"
    ),
    "TestUnsupportedSASLMechanism": "a SASL_PLAINTEXT listener on localhost:9093",
    "TestReaderConsumerGroup/verify_offset_committed": _NIL_CONNECT,
    "TestReaderConsumerGroup/verify_offset_committed_when_using_interval_committer": _NIL_CONNECT,
    "TestReaderConsumerGroup/consumer_group_commits_on_close": _NIL_CONNECT,
}


def skip_pattern() -> str:
    """The subtests of :data:`SKIPPED` as ``-test.skip`` takes them: one pattern,
    a level per ``/`` (pairing every parent with every subtest named: the parents
    have no subtests of each other's names). A top-level test is never skipped
    by a two-level pattern: those of :data:`SKIPPED` run, and :func:`run` sets
    their outcome to ``skip``."""
    pairs = [name.split("/", 1) for name in SKIPPED if "/" in name]
    parents = "|".join(sorted({parent for parent, _ in pairs}))
    children = "|".join(sorted({child for _, child in pairs}))
    return f"^({parents})$/^({children})$"


def build() -> tuple[dict[str, Path], Path]:
    """The compiled test binary of each of :data:`PACKAGES` and the module's
    directory. Built once per checkout sharing ``.cache``: the first caller
    builds while the others wait on a lock. Skips without Go or without the
    module (no proxy); a failed build fails."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed (make system-deps installs Debian's golang-go)")
    CACHE.mkdir(parents=True, exist_ok=True)
    binaries = {
        package: CACHE / f"kafka-go-{VERSION}-{package or 'kafka'}.test" for package in PACKAGES
    }
    with open(CACHE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        home = kgo_suite.module_dir(go, MODULE, VERSION)
        for package, binary in binaries.items():
            if binary.is_file():
                continue
            partial = binary.with_suffix(".partial")
            done = subprocess.run(
                [go, "test", "-c", "-o", str(partial), f"./{package}"],
                cwd=home,
                env=kgo_suite.go_env(),
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            assert done.returncode == 0, (
                f"go test -c of {MODULE}/{package}@{VERSION} failed:\n{done.stderr}"
            )
            partial.rename(binary)
    return binaries, home


def _run_one(
    binary: Path,
    workdir: Path,
    env: dict[str, str],
    network: PrivateNetwork,
    only: Iterable[str],
    out: Path,
) -> tuple[str, bool]:
    """One binary's ``-test.v`` output (written to ``out`` as it runs), and
    whether it ended cleanly."""
    patterns = [f"-test.skip={skip_pattern()}"]
    wanted = sorted(only)
    if wanted:
        patterns.append(f"-test.run=^({'|'.join(wanted)})$")
    with open(out, "w") as sink, network.entered():
        try:
            done = subprocess.run(
                [str(binary), "-test.v", f"-test.timeout={DEADLINE_S}s", *patterns],
                cwd=workdir,
                env=env,
                stdout=sink,
                stderr=subprocess.STDOUT,
                timeout=DEADLINE_S + 60,
                check=False,
            )
            code: int | None = done.returncode
        except subprocess.TimeoutExpired:
            code = None
    output = out.read_text(errors="replace")
    return output, code in (0, 1) and "panic:" not in output


def run(
    built: tuple[dict[str, Path], Path],
    broker: str,
    network: PrivateNetwork,
    kafka_version: str,
    logs: Path,
    only: Iterable[str] = (),
    label: str = "suite",
) -> Run:
    """The suite (or the tests named in ``only``, ``compress.`` prefixed for that
    package's) against the broker listening on ``localhost:9092`` in ``network``;
    each package's output written to ``logs`` (``kafkago-<label>-<package>.log``)."""
    binaries, home = built
    env = {**os.environ, "KAFKA_VERSION": kafka_version, "KAFKA_SKIP_NETTEST": "1"}
    wanted = set(only)
    merged = Run(broker, {})
    start = time.monotonic()
    for package, binary in binaries.items():
        prefix = f"{package}." if package else ""
        mine = {
            n[len(prefix) :] for n in wanted if n.startswith(prefix) and "." not in n[len(prefix) :]
        }
        if wanted and not mine:
            continue
        sink = logs / f"kafkago-{label}-{package or 'kafka'}.log"
        output, ended = _run_one(binary, home / package, env, network, mine, sink)
        part = kgo_suite.parse(broker, output)
        merged.outcomes.update({prefix + n: o for n, o in part.outcomes.items()})
        merged.reasons.update({prefix + n: r for n, r in part.reasons.items()})
        if not ended or part.named("unfinished"):
            merged.tail += "\n".join(output.splitlines()[-40:])
    for name, why in SKIPPED.items():
        if "/" not in name and name in merged.outcomes:
            merged.outcomes[name] = "skip"
            merged.reasons[name] = f"left out: it needs {why}"
    merged.seconds = time.monotonic() - start
    return merged


def retry(
    built: tuple[dict[str, Path], Path],
    measured: Run,
    network: PrivateNetwork,
    kafka_version: str,
    logs: Path,
    among: set[str],
) -> None:
    """As :func:`kgo_suite.retry`: the tests of ``among`` that failed (or never
    ended) in the whole run, run again alone; those passing then count, noted
    in ``measured.retried``."""
    again = sorted(n for n in among if measured.outcomes.get(n) in ("fail", "unfinished"))
    if not again:
        return
    second = run(built, measured.broker, network, kafka_version, logs, only=again, label="again")
    for name in again:
        if second.outcomes.get(name) == "pass":
            first = measured.outcomes[name]
            why = measured.reasons.pop(name, "")
            measured.retried[name] = first + (f": {why}" if why else "")
            measured.outcomes[name] = "pass"


if __name__ == "__main__":  # the binaries built once, ahead of an opt-in run
    try:
        print(*build()[0].values())
    except pytest.skip.Exception as why:
        print(f"warning: kafka-go's tests will be skipped: {why}")
