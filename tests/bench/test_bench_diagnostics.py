"""The bench scripts that ``make bench`` does not run (a diagnostic, a model) still
run: each with ``--smoke``, exit status 0 and its table printed. The model's
arithmetic is checked on cases worked by hand."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "bench"))

from proxy_workers_model import carried, even  # noqa: E402


@pytest.mark.parametrize(
    ("script", "line"),
    [
        ("proxy_workers_model.py", "      16      256"),
        ("proxy_route_cpu.py", "per 100,000 records"),
    ],
)
def test_a_diagnostic_script_runs(script: str, line: str) -> None:
    done = subprocess.run(
        [sys.executable, str(REPO / "bench" / script), "--smoke"],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    assert line in done.stdout, done.stdout


def test_the_workers_model_caps_each_worker_at_its_core() -> None:
    # Two workers of capacity 10, four clients of 4: evenly 2 each, 8 + 8.
    assert even(2, 4, 4.0, 10.0) == 16.0
    # Three clients of 4 on two workers: 8 + 4 at best.
    assert even(2, 3, 4.0, 10.0) == 12.0
    # Any random spread carries at most the even one, and at least one core's
    # worth when the clients could fill it.
    rng = random.Random(3)
    for _ in range(200):
        got = carried(2, 4, 4.0, 10.0, rng)
        assert 10.0 <= got <= 16.0
