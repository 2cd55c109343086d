"""Where the suite's time goes: an opt-in record of every test phase's duration
(a plugin loaded by tests/conftest.py; it does nothing unless asked).

``TRAFKA_TIMING_OUT=FILE make pytest`` (or any pytest run of the suite) appends
one tab-separated line per test phase to FILE: the wall clock when reported,
the phase (setup, call, teardown), its outcome, its seconds and the test's
node id. Under xdist the controller writes them all (the workers' reports reach
it), so one file holds the run; each session fixture's start (a shared
broker's, Spark's) goes to FILE.fixtures, a line each: the wall clock, the
worker, the fixture, its seconds and the test that asked for it.
``python tests/suite_timing.py FILE [N]`` then
prints the N files (default 30) and tests that took longest, setup and
teardown included (a session fixture's start counts to the first test that
asked for it).

Each test's teardown line also carries the CPU seconds the test process and every
process under it spent since the previous test ended (brokers, JVMs and clients
the tests start included; a shared broker's idle time counts to whatever test was
running). On a machine whose cores are all busy, as the suite's is, the wall
time of a test says how long it was queued as much as what it costs; its CPU
says what removing it would save. The summary then lists the files by CPU too.
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

OUT = "TRAFKA_TIMING_OUT"
_CPU_KEY = "trafka_cpu_s"
_TICKS = os.sysconf("SC_CLK_TCK")


def tree_cpu_seconds(pid: int) -> float:
    """CPU seconds (user and system) of a process and of every process under it:
    those alive (found by their parent ids, one read of /proc's process list,
    whatever their threads) and those reaped (their parents' cutime and cstime).
    A process that left the tree (re-parented) is not counted."""
    children: dict[int, list[int]] = defaultdict(list)
    ticks: dict[int, int] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            stat = Path(f"/proc/{name}/stat").read_text()
        except (FileNotFoundError, ProcessLookupError):
            continue  # it ended while we read: its time moved to its parent's cutime
        # Fields after the command (which may hold spaces) in its parentheses: the
        # parent id is the 4th of the line; utime, stime, cutime, cstime the 14th-17th.
        fields = stat[stat.rindex(")") + 2 :].split()
        children[int(fields[1])].append(int(name))
        ticks[int(name)] = sum(int(v) for v in fields[11:15])
    total = 0
    todo = [pid]
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo.extend(children.get(p, ()))
    return total / _TICKS


_last_cpu: list[float] = []


def pytest_configure(config: pytest.Config) -> None:
    if os.environ.get(OUT):
        _last_cpu[:] = [tree_cpu_seconds(os.getpid())]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> object:
    outcome = yield
    # Read once per test, at its teardown (the whole test's CPU on that line): a
    # reading costs milliseconds when JVMs run under the process.
    if os.environ.get(OUT) and _last_cpu and call.when == "teardown":
        now = tree_cpu_seconds(os.getpid())
        outcome.get_result().user_properties.append((_CPU_KEY, now - _last_cpu[0]))
        _last_cpu[0] = now


_current: list[str] = []  # the test being run (its node id)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_logstart(nodeid: str, location: object) -> None:
    _current[:] = [nodeid]


@pytest.hookimpl(hookwrapper=True)
def pytest_fixture_setup(fixturedef: Any, request: pytest.FixtureRequest) -> Iterator[None]:
    """A session fixture's start (a shared broker, Spark, ZooKeeper...), in
    FILE.fixtures: which worker started it, for which test, in how many
    seconds, so that a run shows how many workers start each peer."""
    out = os.environ.get(OUT)
    start = time.monotonic()
    yield
    if out and fixturedef.scope == "session":
        worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        line = (
            f"{time.time():.1f}\t{worker}\t{fixturedef.argname}\t"
            f"{time.monotonic() - start:.2f}\t{_current[0] if _current else ''}\n"
        )
        with open(f"{out}.fixtures", "a", encoding="utf-8") as f:
            f.write(line)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    out = os.environ.get(OUT)
    if not out or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    cpu = dict(report.user_properties).get(_CPU_KEY)
    with open(out, "a", encoding="utf-8") as f:
        f.write(
            f"{time.time():.1f}\t{report.when}\t{report.outcome}\t"
            f"{report.duration:.2f}\t{'' if cpu is None else f'{cpu:.2f}'}\t{report.nodeid}\n"
        )


def summary(path: Path, top: int = 30) -> str:
    """The ``top`` slowest files and tests of a record, as text."""
    tests: dict[str, float] = defaultdict(float)
    cpu: dict[str, float] = defaultdict(float)
    for line in path.read_text(encoding="utf-8").splitlines():
        fields = line.split("\t")
        # Five fields in a record made before the CPU column, six after it.
        seconds, nodeid = fields[3], fields[-1]
        tests[nodeid] += float(seconds)
        if len(fields) == 6 and fields[4]:
            cpu[nodeid] += float(fields[4])
    files: dict[str, float] = defaultdict(float)
    for nodeid, seconds in tests.items():
        files[nodeid.split("::", 1)[0]] += seconds
    lines = [f"{sum(tests.values()):.0f} s in {len(tests)} tests; slowest files:"]
    lines += [f"{s:8.1f}  {f}" for f, s in sorted(files.items(), key=lambda x: -x[1])[:top]]
    lines.append("slowest tests:")
    lines += [f"{s:8.1f}  {t}" for t, s in sorted(tests.items(), key=lambda x: -x[1])[:top]]
    if cpu:
        file_cpu: dict[str, float] = defaultdict(float)
        for nodeid, seconds in cpu.items():
            file_cpu[nodeid.split("::", 1)[0]] += seconds
        lines.append(f"{sum(cpu.values()):.0f} CPU s; files by CPU (CPU s, wall s):")
        lines += [
            f"{s:8.1f} {files[f]:8.1f}  {f}"
            for f, s in sorted(file_cpu.items(), key=lambda x: -x[1])[:top]
        ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30))
