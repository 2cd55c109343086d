"""docs/compatibility.md's feature table, generated from the tests' outcomes
(a plugin loaded by tests/conftest.py).

A test that proves a feature on a peer says so with a marker::

    @pytest.mark.compat("SDK", "transactions, read_committed")

Its peer is read from the fixtures it uses: ``kafka`` (by its parameter),
``kafka_cluster`` (by its parameter), ``kafka3`` / ``kafka3_cluster`` -> Kafka 3.9,
``kafka4`` / ``kafka4_cluster`` -> Kafka 4.x; a
parameter named ``peer`` (``brokerlite``, ``3.9``, ``4``) in a differential
test; otherwise ``peer=`` on the marker; otherwise brokerlite.

Rules:

* A cell of the table is ``yes`` when every test of that feature on that peer
  passed, ``no`` when one is an expected failure (xfail: a difference written
  down), ``fails`` when one failed, and empty when no test ran there.
* At the end of a run, every row whose tests ran is compared with the page's
  generated block (between ``<!-- compat:begin -->`` and ``<!-- compat:end -->``).
  A row the run computed that the page lacks or shows otherwise makes the run
  fail, naming the rows: the page is stale. Rows of tests that did not run are
  left as they are, so a partial run checks only what it ran.
* ``TRAFKA_WRITE_COMPAT=1`` writes the rows the run computed into the page
  (keeping the others) instead of failing; ``make compat`` runs the marked tests
  that way. A row no test names any more is dropped only by a run that ran
  every marked test (``make compat``).
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from pathlib import Path

import pytest

PAGE = Path(__file__).resolve().parent.parent / "docs" / "compatibility.md"
#: Another page instead of docs/compatibility.md (the plugin's own test).
PAGE_ENV = "TRAFKA_COMPAT_PAGE"
BEGIN, END = "<!-- compat:begin -->", "<!-- compat:end -->"
PEERS = ("brokerlite", "Kafka 3.9", "Kafka 4.x")
WRITE_ENV = "TRAFKA_WRITE_COMPAT"
_PEER_BY_PARAM = {"brokerlite": "brokerlite", "3.9": "Kafka 3.9", "4": "Kafka 4.x"}
_PEER_BY_FIXTURE = {
    "kafka3": "Kafka 3.9",
    "kafka3_cluster": "Kafka 3.9",
    "kafka4": "Kafka 4.x",
    "kafka4_cluster": "Kafka 4.x",
}
_RANK = {"yes": 0, "no": 1, "fails": 2}

# (area, feature) -> peer -> cell, from the reports this process saw.
_cells: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "compat(area, feature, peer=None): a row of docs/compatibility.md"
    )


def _peer(item: pytest.Item, mark: pytest.Mark) -> str:
    params = getattr(getattr(item, "callspec", None), "params", {})
    names = set(getattr(item, "fixturenames", ()))
    for fixture in ("kafka", "kafka_cluster"):
        if fixture in names and fixture in params:
            return _PEER_BY_PARAM[str(params[fixture])]
    if "peer" in params:
        return _PEER_BY_PARAM[str(params["peer"])]
    for fixture, peer in _PEER_BY_FIXTURE.items():
        if fixture in names:
            return peer
    return str(mark.kwargs.get("peer") or "brokerlite")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("compat")
        if mark is None:
            continue
        area, feature = mark.args
        item.user_properties.append(("compat", (area, feature, _peer(item, mark))))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    found = [value for name, value in report.user_properties if name == "compat"]
    if not found:
        return
    area, feature, peer = found[0]
    if report.when == "call" or report.failed or report.skipped:
        if report.skipped and not hasattr(report, "wasxfail"):
            return  # skipped (a missing peer, an opt-out): says nothing of the feature
        if hasattr(report, "wasxfail"):
            cell = "no" if report.skipped else "yes"
        else:
            cell = "yes" if report.passed else "fails"
        row = _cells[(area, feature)]
        if _RANK[cell] >= _RANK.get(row.get(peer, "yes"), 0):
            row[peer] = cell


def _read_rows(text: str) -> dict[tuple[str, str], dict[str, str]]:
    rows: dict[tuple[str, str], dict[str, str]] = {}
    if BEGIN not in text:
        return rows
    block = text.split(BEGIN, 1)[1].split(END, 1)[0]
    for line in block.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) != 2 + len(PEERS) or cells[0] in ("area", "") or set(cells[0]) <= {"-"}:
            continue
        rows[(cells[0], cells[1])] = {
            peer: cell for peer, cell in zip(PEERS, cells[2:], strict=True) if cell
        }
    return rows


def _render(rows: dict[tuple[str, str], dict[str, str]]) -> str:
    lines = [
        "| area | feature | " + " | ".join(PEERS) + " |",
        "|---|---|" + "---|" * len(PEERS),
    ]
    for (area, feature), cells in sorted(rows.items()):
        lines.append(
            f"| {area} | {feature} | " + " | ".join(cells.get(p, "") for p in PEERS) + " |"
        )
    return "\n".join(lines)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or not _cells:
        return  # a worker: the controller gathers every worker's reports
    path = Path(os.environ.get(PAGE_ENV) or PAGE)
    text = path.read_text()
    page = _read_rows(text)
    ran = {key: dict(cells) for key, cells in _cells.items()}
    stale = sorted(f"{a}: {f}" for (a, f), cells in ran.items() if page.get((a, f)) != cells)
    if os.environ.get(WRITE_ENV) == "1":
        everything = session.config.getoption("markexpr", "") == "compat"
        rows = ran if everything else {**page, **ran}
        block = f"{BEGIN}\n{_render(rows)}\n{END}"
        new = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
        path.write_text(new)
        return
    if stale:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        said = "; ".join(stale[:10]) + (f"; and {len(stale) - 10} more" if len(stale) > 10 else "")
        message = (
            f"docs/compatibility.md is stale for {len(stale)} row(s) this run tested: {said}. "
            f"Run `make compat` (or this run again with {WRITE_ENV}=1) and commit the page."
        )
        if reporter is not None:
            reporter.write("\n")
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
