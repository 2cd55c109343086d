"""Where the suite's time goes: an opt-in record of every test phase's duration
(a plugin loaded by tests/conftest.py; it does nothing unless asked).

``TRAFKA_TIMING_OUT=FILE make pytest`` (or any pytest run of the suite) appends
one tab-separated line per test phase to FILE: the wall clock when reported,
the phase (setup, call, teardown), its outcome, its seconds and the test's
node id. Under xdist the controller writes them all (the workers' reports reach
it), so one file holds the run. ``python tests/suite_timing.py FILE [N]`` then
prints the N files (default 30) and tests that took longest, setup and
teardown included (a session fixture's start counts to the first test that
asked for it).
"""

from __future__ import annotations

import os
import sys
import time
from collections import defaultdict
from pathlib import Path

import pytest

OUT = "TRAFKA_TIMING_OUT"


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    out = os.environ.get(OUT)
    if not out or os.environ.get("PYTEST_XDIST_WORKER"):
        return
    with open(out, "a", encoding="utf-8") as f:
        f.write(
            f"{time.time():.1f}\t{report.when}\t{report.outcome}\t"
            f"{report.duration:.2f}\t{report.nodeid}\n"
        )


def summary(path: Path, top: int = 30) -> str:
    """The ``top`` slowest files and tests of a record, as text."""
    tests: dict[str, float] = defaultdict(float)
    for line in path.read_text(encoding="utf-8").splitlines():
        _, _, _, seconds, nodeid = line.split("\t", 4)
        tests[nodeid] += float(seconds)
    files: dict[str, float] = defaultdict(float)
    for nodeid, seconds in tests.items():
        files[nodeid.split("::", 1)[0]] += seconds
    lines = [f"{sum(tests.values()):.0f} s in {len(tests)} tests; slowest files:"]
    lines += [f"{s:8.1f}  {f}" for f, s in sorted(files.items(), key=lambda x: -x[1])[:top]]
    lines.append("slowest tests:")
    lines += [f"{s:8.1f}  {t}" for t, s in sorted(tests.items(), key=lambda x: -x[1])[:top]]
    return "\n".join(lines)


if __name__ == "__main__":
    print(summary(Path(sys.argv[1]), int(sys.argv[2]) if len(sys.argv) > 2 else 30))
