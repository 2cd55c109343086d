"""tests/suite_timing.py records each test phase when asked, and nothing when
not; its summary adds a test's phases and a file's tests."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import suite_timing
from suite_timing import OUT, summary, tree_cpu_seconds


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
    # (No CPU column: these reports did not pass through a worker's makereport.)
    assert rows == [[w, o, f"{s:.2f}", "", n] for n, w, o, s in phases]
    assert summary(out, 2).splitlines() == [
        "12 s in 3 tests; slowest files:",
        "     7.2  a.py",
        "     5.0  b.py",
        "slowest tests:",
        "     7.0  a.py::slow",
        "     5.0  b.py::t",
    ]


_BURN = "import time\nwhile time.process_time() < 0.4: pass\n"


def test_a_process_trees_cpu_counts_children_alive_and_reaped() -> None:
    """The CPU column counts what the processes under a test spent, whether they
    still run (a shared broker) or have ended (a client run to completion)."""

    before = tree_cpu_seconds(os.getpid())
    subprocess.run([sys.executable, "-c", _BURN], check=True)  # reaped: our cutime
    reaped = tree_cpu_seconds(os.getpid())
    # (The kernel counts in clock ticks: allow it a little less than the 0.4 s.)
    assert reaped - before >= 0.3
    # Alive, under a child of ours: a shell that runs the burner, then sleeps.
    shell = subprocess.Popen(
        ["sh", "-c", f"{sys.executable} -c '{_BURN}'; exec sleep 30"],
    )
    try:
        while True:
            children = Path(f"/proc/{shell.pid}/task/{shell.pid}/children").read_text()
            status = Path(f"/proc/{shell.pid}/stat").read_text()
            if not children and "sleep" in status:
                break
            time.sleep(0.05)
        assert tree_cpu_seconds(os.getpid()) - reaped >= 0.3
    finally:
        shell.kill()
        shell.wait()


def test_the_summary_ranks_files_by_cpu_when_recorded(tmp_path: Path) -> None:
    record = tmp_path / "timing.tsv"
    record.write_text(
        "1.0\tcall\tpassed\t9.00\t0.50\ta.py::waits\n"
        "2.0\tcall\tpassed\t2.00\t3.00\tb.py::burns\n"
        "3.0\tteardown\tpassed\t1.00\t1.25\tb.py::burns\n"
    )
    assert summary(record, 2).splitlines()[-3:] == [
        "5 CPU s; files by CPU (CPU s, wall s):",
        "     4.2      3.0  b.py",
        "     0.5      9.0  a.py",
    ]


_PYTEST = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"]
_INNER = """
import pytest

@pytest.fixture(scope="session")
def shared_peer():
    return 1

@pytest.fixture
def per_test():
    return 2

def test_first(per_test):
    pass

def test_asks(shared_peer, per_test):
    pass

def test_again(shared_peer):
    pass
"""


def test_a_session_fixtures_start_is_recorded_with_the_test_that_asked(tmp_path: Path) -> None:
    (tmp_path / "test_inner.py").write_text(_INNER)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    out = tmp_path / "timing.tsv"
    env = {
        **os.environ,
        "PYTHONPATH": str(Path(__file__).resolve().parent),
        OUT: str(out),
    }
    env.pop("PYTEST_XDIST_WORKER", None)
    done = subprocess.run(
        [*_PYTEST, "-p", "suite_timing", str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rows = [line.split("\t")[1:] for line in Path(f"{out}.fixtures").read_text().splitlines()]
    mine = [row for row in rows if row[1] == "shared_peer"]  # (pytest's own too: tmp_path...)
    assert len(mine) == 1 and mine[0][0] == "main", rows
    assert mine[0][3] == "test_inner.py::test_asks"
    assert not [row for row in rows if row[1] == "per_test"]
