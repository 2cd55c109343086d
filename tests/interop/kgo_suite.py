"""franz-go's own ``pkg/kgo`` test suite, run unchanged against a broker.

The module comes from the Go module proxy into Go's module cache (never into the
repository); its tests are compiled once (``go test -c``, in the module's own
directory, as its go.mod and go.sum pin them) into ``.cache/kgo/`` (ignored,
shared by worktrees linking ``.cache``), and the binary is run with the
package's directory as its working directory, as ``go test`` runs it (a test
reads ``config.go`` beside it). The broker is named by ``KGO_SEEDS``;
``KGO_TEST_RF`` and ``KGO_TEST_RECORDS`` set the replication factor of the
topics the tests make and the records of the long group and transaction runs.

A run's outcome is one word per top-level test (``pass``, ``fail``, ``skip``,
or ``unfinished`` for a test the binary started and never ended: a timeout or
a panic), read from ``-test.v``'s lines, with each skip's reason.
"""

from __future__ import annotations

import dataclasses
import fcntl
import os
import re
import shutil
import subprocess
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

MODULE = "github.com/twmb/franz-go"
VERSION = "v1.22.3"
PACKAGE = "pkg/kgo"
CACHE = Path(__file__).resolve().parents[2] / ".cache" / "kgo"
#: The records of TestGroupETL and TestTxnEtl (franz-go's default: 500,000).
RECORDS = 10_000
#: How many of its tests run at once (-test.parallel; Go's default is GOMAXPROCS,
#: two here): the tests mostly wait on the broker, and at two the short ones
#: queued behind the long group and transaction runs (81 s against Kafka 4.4 at
#: two, 52 s at eight; brokerlite 49 s at eight, the same 147 passing).
PARALLEL = 8
#: The binary's own deadline (-test.timeout); the process is killed a minute later.
DEADLINE_S = 600

_RESULT = re.compile(r"^--- (PASS|FAIL|SKIP): (\S+) \(")
_RUN = re.compile(r"^=== RUN   ([^/\s]+)$")


@dataclass
class Run:
    """One run of the suite against one broker."""

    broker: str
    #: top-level test -> pass / fail / skip / unfinished
    outcomes: dict[str, str]
    #: skipped test -> the first line it logged (its reason, usually); failed
    #: test -> the lines it logged (its errors among them)
    reasons: dict[str, str] = field(default_factory=dict)
    seconds: float = 0.0
    #: the last lines of the output when the binary did not end cleanly
    tail: str = ""
    #: test -> what it did in the whole run, for those that passed when run again alone
    retried: dict[str, str] = field(default_factory=dict)

    def named(self, outcome: str) -> set[str]:
        return {name for name, got in self.outcomes.items() if got == outcome}

    def summary(self) -> str:
        counts = {o: len(self.named(o)) for o in ("pass", "fail", "skip", "unfinished")}
        said = ", ".join(f"{n} {o}" for o, n in counts.items() if n)
        again = f" ({len(self.retried)} passing only when run again)" if self.retried else ""
        return f"{self.broker}: {said} of {len(self.outcomes)}{again} in {self.seconds:.0f} s"


def go_env() -> dict[str, str]:
    env = {**os.environ, "GO111MODULE": "on", "GOFLAGS": "-mod=readonly -buildvcs=false"}
    if "HOME" not in env:
        env["GOCACHE"] = str(CACHE / "go-build")
        env["GOMODCACHE"] = str(CACHE / "go-mod")
    return env


def module_dir(go: str, module: str = MODULE, version: str = VERSION) -> Path:
    """``module``'s directory in Go's module cache (downloaded from the proxy when
    missing, with the modules its go.mod needs); skips when that cannot be done."""
    env = go_env()
    CACHE.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        [go, "mod", "download", "-json", f"{module}@{version}"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        env={**env, "GOFLAGS": ""},
        cwd=CACHE,
    )
    found = re.search(r'"Dir":\s*"([^"]+)"', done.stdout)
    if done.returncode != 0 or found is None:
        pytest.skip(
            f"{module}@{version} not in the module cache nor from the proxy: {done.stderr or done.stdout}"[
                :400
            ]
        )
    home = Path(found[1])
    deps = subprocess.run(
        [go, "mod", "download"],
        cwd=home,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    if deps.returncode != 0:
        pytest.skip(f"the modules {module}@{version} needs are not at hand: {deps.stderr}"[:400])
    return home


def build() -> tuple[Path, Path]:
    """The compiled test binary of ``pkg/kgo`` and the package's directory (the
    binary's working directory). Built once per checkout sharing ``.cache``: the
    first caller builds while the others wait on a lock. Skips without Go or
    without the module (no proxy); a failed build fails."""
    go = shutil.which("go")
    if go is None:
        pytest.skip("Go is not installed (make system-deps installs Debian's golang-go)")
    CACHE.mkdir(parents=True, exist_ok=True)
    binary = CACHE / f"franz-go-{VERSION}-kgo.test"
    with open(CACHE / "build.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        home = module_dir(go)
        if not binary.is_file():
            partial = binary.with_suffix(".partial")
            done = subprocess.run(
                [go, "test", "-c", "-o", str(partial), f"./{PACKAGE}"],
                cwd=home,
                env=go_env(),
                capture_output=True,
                text=True,
                timeout=900,
                check=False,
            )
            assert done.returncode == 0, (
                f"go test -c of {MODULE}/{PACKAGE}@{VERSION} failed:\n{done.stderr}"
            )
            partial.rename(binary)
    return binary, home / PACKAGE


def parse(broker: str, output: str) -> Run:
    """The outcome of each top-level test in ``-test.v`` output, with what a
    skipped test logged first (its reason) and a failed one's last lines."""
    outcomes: dict[str, str] = {}
    reasons: dict[str, str] = {}
    logged: dict[str, list[str]] = {}
    current = ""
    for line in output.splitlines():
        started = _RUN.match(line)
        if started:
            outcomes.setdefault(started[1], "unfinished")
            current = started[1]
            continue
        if line.startswith(("=== CONT  ", "=== PAUSE ", "=== NAME  ")):
            current = line[10:].strip()
            continue
        ended = _RESULT.match(line)
        if ended:
            outcome, name = ended[1].lower(), ended[2]
            outcomes[name] = outcome
            said = logged.get(name, [])
            if outcome == "skip" and said:
                reasons[name] = said[0]
            elif outcome == "fail" and said:
                reasons[name] = "\n".join(said[-10:])
            continue
        if line.startswith("    ") and current and "/" not in current:
            logged.setdefault(current, []).append(line.strip())
    return Run(broker, outcomes, reasons)


def run(
    binary: Path,
    workdir: Path,
    broker: str,
    seeds: str,
    rf: int = 1,
    records: int = RECORDS,
    log: Path | None = None,
    only: Iterable[str] = (),
) -> Run:
    """The whole suite (or the tests named in ``only``) against ``seeds``, the tests
    in parallel as ``go test`` runs them; its whole output written to ``log``
    when given."""
    env = {
        **os.environ,
        "KGO_SEEDS": seeds,
        "KGO_TEST_RF": str(rf),
        "KGO_TEST_RECORDS": str(records),
    }
    start = time.monotonic()
    try:
        done = subprocess.run(
            [
                str(binary),
                "-test.v",
                f"-test.parallel={PARALLEL}",
                f"-test.timeout={DEADLINE_S}s",
                *([f"-test.run=^({'|'.join(sorted(only))})$"] if only else []),
            ],
            cwd=workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=DEADLINE_S + 60,
            check=False,
        )
        output, clean = done.stdout, done.returncode in (0, 1) and "panic:" not in done.stdout
    except subprocess.TimeoutExpired as expired:
        out = expired.stdout or b""
        output, clean = out.decode() if isinstance(out, bytes) else out, False
    if log is not None:
        log.write_text(output)
    result = parse(broker, output)
    result.seconds = time.monotonic() - start
    if not clean or result.named("unfinished"):
        result.tail = "\n".join(output.splitlines()[-40:])
    return result


#: franz-go's tests of share groups against a broker: they need share groups at
#: Kafka 4.2's protocol (ShareFetch and ShareAcknowledge v2) and skip without it.
SHARE_GROUP_TESTS = frozenset(
    {
        "TestShareGroup",
        "TestShareGroupAckOnClose",
        "TestShareGroupETL",
        "TestShareGroupOffsetsAdmin",
        "TestConsumeRegexShareSkipsInternal",
    }
)


def listed(binary: Path, workdir: Path) -> set[str]:
    """Every top-level test the binary holds (``-test.list``: no broker asked)."""
    done = subprocess.run(
        [str(binary), "-test.list", ".*"],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return {line.strip() for line in done.stdout.splitlines() if line.startswith("Test")}


def retry(
    binary: Path, workdir: Path, measured: Run, seeds: str, among: set[str], **options: Any
) -> None:
    """Run again, alone, the tests of ``among`` that failed (or never ended) in
    ``measured``'s run of the whole suite, and count those that pass then as
    passing, noting them in ``measured.retried``. On a loaded machine a test with
    a deadline of its own (a 30 s poll, a 15 s wait) can miss it among the whole
    suite's traffic while the broker does what it asks; a skip is the broker's
    answer, not its pace, and is not retried."""
    again = sorted(n for n in among if measured.outcomes.get(n) in ("fail", "unfinished"))
    if not again:
        return
    second = run(binary, workdir, measured.broker, seeds, only=again, **options)
    for name in again:
        if second.outcomes.get(name) == "pass":
            first = measured.outcomes[name]
            why = measured.reasons.pop(name, "")
            measured.retried[name] = first + (f": {why}" if why else "")
            measured.outcomes[name] = "pass"


def misses(control: Run, measured: Run, among: set[str] | None = None) -> list[str]:
    """The tests passing on ``control`` that do not pass on ``measured`` (a skip
    there is a miss), each with what it did there."""
    out = []
    for name in sorted(control.named("pass")):
        if among is not None and name not in among:
            continue
        got = measured.outcomes.get(name, "not run")
        if got != "pass":
            why = measured.reasons.get(name, "")[-2000:]
            out.append(f"{name}: {got}" + (f" ({why})" if why else ""))
    return out


SUITE = f"franz-go {VERSION} pkg/kgo tests"


def measure(
    binary: tuple[Path, Path],
    broker: str,
    seeds: str,
    logs: Path,
    control: Run | None = None,
    measured: Run | None = None,
    **options: Any,
) -> Run:
    """The suite's run against ``seeds`` (its output in ``logs``; ``measured`` when
    it ran already), the tests that failed in it and pass on ``control`` (or any,
    without one) run again alone (:func:`retry`); each one passing only then is a
    warning."""
    if measured is None:
        measured = run(*binary, broker, seeds, log=logs / "kgo.log", **options)
    among = set(measured.outcomes) if control is None else control.named("pass")
    retry(*binary, measured, seeds, among, **options)
    for name, first in measured.retried.items():
        warnings.warn(
            f"kgo {name} on {broker} passed only when run again alone; in the whole "
            f"suite's run ({logs / 'kgo.log'}): {first}"[:1500],
            stacklevel=1,
        )
    return measured


def control_of_misses(
    binary: tuple[Path, Path],
    measured: Run,
    kafka_seeds: Callable[[], str],
    logs: Path,
    apart: Iterable[str] = (),
) -> Run:
    """Kafka's control for ``measured``, lazily: every test of the binary counts
    in ``measured`` (one it never reported is ``not run``), and only those that
    did not pass there (``apart`` aside) run on Kafka (``kafka_seeds()``, called
    only then), again alone when they fail, as :func:`measure` does. Kafka and
    franz-go are pinned, so a test passing on Kafka here is a miss, the verdict
    Kafka's whole run would give."""
    for name in listed(*binary) - set(measured.outcomes):
        measured.outcomes[name] = "not run"
    doubted = sorted(
        name for name, got in measured.outcomes.items() if got != "pass" and name not in apart
    )
    if not doubted:
        return Run("Kafka 4.x", {})
    seeds = kafka_seeds()
    ran = run(*binary, "Kafka 4.x", seeds, log=logs / "kafka.log", only=doubted)
    return measure(binary, "Kafka 4.x", seeds, logs, measured=ran)


def check_no_failure(measured: Run, apart: Iterable[str] = ()) -> None:
    """No kgo test (``apart`` aside) failed or never ended in ``measured``."""
    left = set(apart)
    shown = dataclasses.replace(
        measured, outcomes={n: o for n, o in measured.outcomes.items() if n not in left}
    )
    failed = sorted(shown.named("fail") | shown.named("unfinished"))
    said = "\n".join(f"{name}: {shown.reasons.get(name, '')}" for name in failed)
    assert not failed, f"{shown.summary()}; failed:\n{said}\n{shown.tail}"


def check_passes_as(
    control: Run,
    measured: Run,
    apart: Iterable[str] = (),
    *,
    shares: bool = False,
    whole: bool = True,
) -> None:
    """Every test passing on ``control`` (``apart`` aside, and the share-group
    tests unless ``shares``) passes on ``measured``. A whole control passes
    some (else the harness, not a broker, is at fault); the control of the
    tests brokerlite did not pass may pass none."""
    assert control.named("pass") or not whole, control.summary()
    among = set(control.outcomes) - set(apart)
    if not shares:
        among -= SHARE_GROUP_TESTS
    missed = misses(control, measured, among)
    assert not missed, (
        f"{measured.summary()} ({control.summary()}); {len(missed)} passing on "
        f"{control.broker} do not pass on {measured.broker}:\n"
        + "\n".join(missed)
        + (f"\n{measured.tail}" if measured.tail else "")
    )


if __name__ == "__main__":  # `make peers`: the binary built once, ahead of the tests
    try:
        print(build()[0])
    except pytest.skip.Exception as why:
        print(f"warning: franz-go's kgo tests will be skipped: {why}")
