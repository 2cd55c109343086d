"""The suite's ``signal_hygiene`` plugin: a test that leaves its process with
SIGINT ignored or blocked errors, and the tests after it find SIGINT as before
(a child they start sees Ctrl-C)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from terminal_sigint import sigint_as_at_a_terminal

HERE = Path(__file__).resolve().parent

TESTS = """
import signal
import subprocess
import sys

def test_ignores():
    signal.signal(signal.SIGINT, signal.SIG_IGN)

def test_blocks():
    signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGINT])

def test_a_child_after_sees_sigint():
    # A child that sends itself SIGINT ends by it when SIGINT is handled by
    # default and not blocked (Python's KeyboardInterrupt: exit 1, "KeyboardInterrupt").
    code = "import os, signal, time; os.kill(os.getpid(), signal.SIGINT); time.sleep(2)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert "KeyboardInterrupt" in done.stderr, (done.returncode, done.stderr)
"""


def _run(tmp_path: Path, *plugins: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:randomly", "-p", "no:cacheprovider"]
    for plugin in plugins:
        args += ["-p", plugin]
    env = {"PYTHONPATH": str(HERE), "PATH": "/usr/bin:/bin"}
    return subprocess.run(
        [*args, "test_inner.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        # Whatever this run was given (a background job's SIGINT is ignored):
        # what the inner run does to SIGINT is what is tested.
        preexec_fn=sigint_as_at_a_terminal,
    )


def test_the_test_that_ignores_or_blocks_sigint_errors_and_the_next_is_unharmed(
    tmp_path: Path,
) -> None:
    done = _run(tmp_path, "signal_hygiene")
    out = done.stdout + done.stderr
    assert "3 passed, 2 errors" in done.stdout, out
    assert "ERROR test_inner.py::test_ignores - Failed: " in done.stdout, out
    assert "left the process with SIGINT ignored" in done.stdout, out
    assert "ERROR test_inner.py::test_blocks - Failed: " in done.stdout, out
    assert "left the process with SIGINT blocked" in done.stdout, out


def test_without_the_plugin_a_child_after_them_ignores_sigint(tmp_path: Path) -> None:
    """What the plugin is for (and that the test above can fail)."""
    done = _run(tmp_path)
    assert "1 failed, 2 passed" in done.stdout, done.stdout + done.stderr
