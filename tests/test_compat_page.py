"""The ``compat_page`` plugin: a run whose marked tests' outcomes differ from the
page's table fails and names the rows; with TRAFKA_WRITE_COMPAT=1 it writes them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

TESTS = """
import pytest

@pytest.mark.compat("SDK", "works")
@pytest.mark.parametrize("peer", ["brokerlite", "4"])
def test_works(peer):
    pass

@pytest.mark.compat("SDK", "differs")
@pytest.mark.xfail(strict=True)
def test_differs():
    assert False

@pytest.mark.compat("CLI", "breaks", peer="Kafka 3.9")
def test_breaks():
    assert False
"""

PAGE = """# page
<!-- compat:begin -->
| area | feature | brokerlite | Kafka 3.9 | Kafka 4.x |
|---|---|---|---|---|
| Proxy | kept, no test ran | yes |  |  |
<!-- compat:end -->
after
"""


def _run(tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "compat_page"]
    environ = {**os.environ, "PYTHONPATH": str(HERE), "TRAFKA_COMPAT_PAGE": str(tmp_path / "p.md")}
    return subprocess.run(
        [*args, str(tmp_path)], capture_output=True, text=True, env={**environ, **env}, timeout=120
    )


def test_a_stale_page_fails_the_run_and_a_written_one_passes(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(PAGE)
    stale = _run(tmp_path)
    assert stale.returncode == 1
    assert "stale for 3 row(s)" in stale.stdout
    assert "CLI: breaks; SDK: differs; SDK: works" in stale.stdout

    written = _run(tmp_path, TRAFKA_WRITE_COMPAT="1")
    assert written.returncode == 1  # test_breaks still fails
    rows = page.read_text().split("<!-- compat:begin -->")[1].split("<!-- compat:end -->")[0]
    assert rows.strip().splitlines()[2:] == [
        "| CLI | breaks |  | fails |  |",
        "| Proxy | kept, no test ran | yes |  |  |",
        "| SDK | differs | no |  |  |",
        "| SDK | works | yes |  | yes |",
    ]
    assert page.read_text().endswith("after\n")
    again = _run(tmp_path)
    assert "compatibility.md is stale" not in again.stdout
