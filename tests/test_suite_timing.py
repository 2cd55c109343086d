"""tests/suite_timing.py records each test phase of a run when asked, and
nothing when not."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import suite_timing
from suite_timing import OUT, summary

HERE = Path(__file__).resolve().parent


def _pytest(where: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    (where / "test_two.py").write_text(
        "import time\n"
        "def test_passes():\n    time.sleep(0.3)\n"
        "def test_fails():\n    assert False\n"
    )
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "suite_timing", "-p", "no:cacheprovider",
         "-p", "no:randomly", "-n", "0", "test_two.py"],
        cwd=where, capture_output=True, text=True, timeout=120, check=False,
        env={**{k: v for k, v in os.environ.items() if k != OUT}, "PYTHONPATH": str(HERE), **env},
    )  # fmt: skip


def test_each_phase_is_recorded(tmp_path: Path) -> None:
    """A pytest run with the plugin and TRAFKA_TIMING_OUT: one line per phase."""
    out = tmp_path / "timing.tsv"
    done = _pytest(tmp_path, {OUT: str(out)})
    assert done.returncode == 1, done.stdout + done.stderr  # one test fails
    rows = [line.split("\t") for line in out.read_text().splitlines()]
    phases = [(when, outcome, nodeid) for _, when, outcome, _, nodeid in rows]
    assert phases == [
        ("setup", "passed", "test_two.py::test_passes"),
        ("call", "passed", "test_two.py::test_passes"),
        ("teardown", "passed", "test_two.py::test_passes"),
        ("setup", "passed", "test_two.py::test_fails"),
        ("call", "failed", "test_two.py::test_fails"),
        ("teardown", "passed", "test_two.py::test_fails"),
    ]
    assert float(rows[1][3]) >= 0.3  # time.sleep(0.3) lasts that long at least
    text = summary(out)
    assert "in 2 tests; slowest files:" in text
    assert f"{sum(float(r[3]) for r in rows):8.1f}  test_two.py\n" in text


def test_nothing_is_recorded_unless_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(OUT, raising=False)
    monkeypatch.chdir(tmp_path)
    report = pytest.TestReport("t.py::t", ("t.py", 0, "t"), {}, "passed", None, "call", [], 1.0)
    suite_timing.pytest_runtest_logreport(report)
    assert list(tmp_path.iterdir()) == []
    monkeypatch.setenv(OUT, str(tmp_path / "asked.tsv"))
    suite_timing.pytest_runtest_logreport(report)
    assert (tmp_path / "asked.tsv").read_text().split("\t")[1:] == [
        "call",
        "passed",
        "1.00",
        "t.py::t\n",
    ]
