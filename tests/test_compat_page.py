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

@pytest.mark.compat("Kafka scripts", "kafka-topics --list", peer=("brokerlite", "Kafka 3.9"))
def test_compared():
    pass
"""

PAGE = """# page
<!-- compat:begin -->
| area | feature | brokerlite | Kafka 3.9 | Kafka 4.x |
|---|---|---|---|---|
| Proxy | kept, no test ran | yes |  |  |
<!-- compat:end -->
after
"""

BROKERLITE = """# brokerlite
<!-- compat:brokerlite:begin -->
<!-- compat:brokerlite:end -->
after
"""


def _run(tmp_path: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_inner.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "compat_page"]
    environ = {**os.environ, "PYTHONPATH": str(HERE), "TRAFKA_COMPAT_PAGE": str(tmp_path / "p.md")}
    return subprocess.run(
        [*args, *extra, str(tmp_path)],
        capture_output=True,
        text=True,
        env={**environ, **env},
        timeout=120,
    )


def test_a_stale_page_fails_the_run_and_a_written_one_passes(tmp_path: Path) -> None:
    page = tmp_path / "p.md"
    page.write_text(PAGE)
    derived = tmp_path / "brokerlite.md"
    derived.write_text(BROKERLITE)
    stale = _run(tmp_path)
    assert stale.returncode == 1
    assert "stale for 4 row(s)" in stale.stdout
    assert "CLI: breaks; Kafka scripts: kafka-topics --list; SDK: differs; SDK: works" in (
        stale.stdout
    )
    assert derived.read_text() == BROKERLITE

    written = _run(tmp_path, TRAFKA_WRITE_COMPAT="1")
    assert written.returncode == 1  # test_breaks still fails
    rows = page.read_text().split("<!-- compat:begin -->")[1].split("<!-- compat:end -->")[0]
    assert rows.strip().splitlines()[2:] == [
        "| CLI | breaks |  | fails |  |",
        "| Kafka scripts | kafka-topics --list | yes | yes |  |",
        "| Proxy | kept, no test ran | yes |  |  |",
        "| SDK | differs | no |  |  |",
        "| SDK | works | yes |  | yes |",
    ]
    assert page.read_text().endswith("after\n")
    # docs/brokerlite.md's block: the rows of its areas only, from the page
    assert derived.read_text().splitlines() == [
        "# brokerlite",
        "<!-- compat:brokerlite:begin -->",
        "**Kafka scripts**",
        "",
        "| | brokerlite | Kafka 3.9 | Kafka 4.x |",
        "|---|---|---|---|",
        "| kafka-topics --list | yes | yes |  |",
        "",
        "<!-- compat:brokerlite:end -->",
        "after",
    ]
    again = _run(tmp_path)
    assert "is stale" not in again.stdout and "differs" not in again.stdout

    # the derived block edited by hand: the run says it is stale
    derived.write_text(derived.read_text().replace("| kafka-topics --list | yes | yes |", "| a |"))
    edited = _run(tmp_path)
    assert "brokerlite.md's generated block differs from p.md's rows" in edited.stdout


def test_brokerlite_pages_block_is_the_compatibility_pages_rows() -> None:
    """docs/brokerlite.md's generated block is what docs/compatibility.md's rows
    make of it (the plugin writes both; an edit of one alone is caught here)."""
    import compat_page

    docs = HERE.parent / "docs"
    block = compat_page.derived_block((docs / "brokerlite.md").read_text())
    assert block is not None, "docs/brokerlite.md has lost its generated block"
    assert block == compat_page.render_brokerlite((docs / "compatibility.md").read_text()), (
        "docs/brokerlite.md is stale: run `make compat` (or the marked tests with "
        "TRAFKA_WRITE_COMPAT=1)"
    )


def test_a_run_of_one_peer_of_a_row_checks_and_writes_that_cell_only(tmp_path: Path) -> None:
    """A row's test on one peer ran, on another not (deselected, or skipped as
    test_kgo_suite's whole control is in make test): the page's other cell is
    neither stale nor dropped."""
    page = tmp_path / "p.md"
    page.write_text(
        PAGE.replace("| Proxy | kept", "| SDK | works | yes |  | yes |\n| Proxy | kept")
    )
    one = _run(tmp_path, "-k", "works and brokerlite")
    assert one.returncode == 0, one.stdout
    assert "is stale" not in one.stdout

    page.write_text(
        PAGE.replace("| Proxy | kept", "| SDK | works | fails |  | yes |\n| Proxy | kept")
    )
    differs = _run(tmp_path, "-k", "works and brokerlite")
    assert differs.returncode == 1
    assert "stale for 1 row(s) this run tested: SDK: works." in differs.stdout

    written = _run(tmp_path, "-k", "works and brokerlite", TRAFKA_WRITE_COMPAT="1")
    assert written.returncode == 0, written.stdout
    assert "| SDK | works | yes |  | yes |" in page.read_text()
