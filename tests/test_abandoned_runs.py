"""The suite's ``abandoned_runs`` plugin: after pytest-timeout kills a test hung
in ``trio.run``, the next test of the same process can run trio again (without
it: "Attempted to call run() from inside a run()", the CI cascade after a hang)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent

TESTS = """
import pytest
import trio

@pytest.mark.timeout(2)
def test_hangs():
    trio.run(trio.sleep_forever)

# (its own time is not what is tested: a loaded machine may take seconds)
@pytest.mark.timeout(60)
def test_runs_trio_after():
    async def answer():
        await trio.sleep(0)
        return 42
    try:
        got = trio.run(answer)
    except RuntimeError as exc:
        pytest.fail(f"trio.run: {exc}", pytrace=False)
    assert got == 42
"""


def _run(tmp_path: Path, *plugins: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    for plugin in plugins:
        args += ["-p", plugin]
    # pytest-timeout's signal method: its failure lands in trio's wait for I/O.
    args += ["--timeout-method=signal", "test_inner.py"]
    env = {"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"}
    return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)


@pytest.mark.timeout(150)
def test_a_test_after_a_timed_out_trio_run_runs_trio(tmp_path: Path) -> None:
    done = _run(tmp_path, "abandoned_runs")
    assert "1 failed, 1 passed" in done.stdout, done.stdout + done.stderr
    assert "Exception ignored" not in done.stderr, done.stderr  # the run ended, not collected
    assert "FAILED test_inner.py::test_hangs - Failed: Timeout" in done.stdout


@pytest.mark.timeout(150)
def test_without_the_plugin_the_next_trio_run_fails(tmp_path: Path) -> None:
    """What the plugin is for (and that the test above can fail)."""
    done = _run(tmp_path)
    assert "2 failed" in done.stdout, done.stdout + done.stderr
    assert "Attempted to call run() from inside a run()" in done.stdout
