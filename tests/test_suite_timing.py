"""tests/suite_timing.py records each test phase when asked, and nothing when
not; its summary adds a test's phases and a file's tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import suite_timing
from suite_timing import OUT, summary


def _report(nodeid: str, when: str, outcome: str, seconds: float) -> pytest.TestReport:
    where = (nodeid.split("::")[0], 0, nodeid)
    return pytest.TestReport(nodeid, where, {}, outcome, None, when, [], seconds)


def test_phases_are_recorded_only_when_asked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(OUT, raising=False)
    monkeypatch.delenv("PYTEST_XDIST_WORKER", raising=False)
    suite_timing.pytest_runtest_logreport(_report("a.py::t", "call", "passed", 1.0))
    assert list(tmp_path.iterdir()) == []

    out = tmp_path / "timing.tsv"
    monkeypatch.setenv(OUT, str(out))
    phases = [
        ("a.py::slow", "setup", "passed", 4.0),
        ("a.py::slow", "call", "failed", 2.5),
        ("a.py::slow", "teardown", "passed", 0.5),
        ("a.py::quick", "call", "passed", 0.25),
        ("b.py::t", "call", "passed", 5.0),
    ]
    for phase in phases:
        suite_timing.pytest_runtest_logreport(_report(*phase))
    # An xdist worker writes nothing: its reports reach the controller, which does.
    monkeypatch.setenv("PYTEST_XDIST_WORKER", "gw0")
    suite_timing.pytest_runtest_logreport(_report("c.py::t", "call", "passed", 9.0))

    rows = [line.split("\t")[1:] for line in out.read_text().splitlines()]
    assert rows == [[w, o, f"{s:.2f}", n] for n, w, o, s in phases]
    assert summary(out, 2).splitlines() == [
        "12 s in 3 tests; slowest files:",
        "     7.2  a.py",
        "     5.0  b.py",
        "slowest tests:",
        "     7.0  a.py::slow",
        "     5.0  b.py::t",
    ]
