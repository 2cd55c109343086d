"""docs/compatibility.md's feature table, generated from the tests' outcomes
(a plugin loaded by tests/conftest.py).

A test that proves a feature on a peer says so with a marker::

    @pytest.mark.compat("SDK", "transactions, read_committed")

Its peer is ``peer=`` on the marker when given (a name, or a tuple of names: a
differential test that passes proves the feature on each peer it compared);
otherwise it is read from the fixtures it uses: ``kafka`` and ``kafka_cluster``
(by their parameter), ``kafka3`` / ``kafka3_cluster`` -> Kafka 3.9,
``kafka4`` / ``kafka4_cluster`` -> Kafka 4.x; a
parameter named ``peer`` (``brokerlite``, ``3.9``, ``4``) in a differential
test; otherwise brokerlite.

Rules:

* A cell of the table is ``yes`` when every test of that feature on that peer
  passed, ``no`` when one is an expected failure (xfail: a difference written
  down), ``fails`` when one failed, and empty when no test ran there.
* At the end of a run, every cell whose tests ran is compared with the page's
  generated block (between ``<!-- compat:begin -->`` and ``<!-- compat:end -->``).
  A cell the run computed that the page lacks or shows otherwise makes the run
  fail, naming its row: the page is stale. Cells (and rows) of tests that did
  not run are left as they are, so a partial run checks only what it ran (a
  row's test on one peer may run while its test on another is skipped or
  deselected).
* ``TRAFKA_WRITE_COMPAT=1`` writes the cells the run computed into the page
  (keeping the others) instead of failing; ``make compat`` runs the marked tests
  that way. A row no test names any more is dropped only by a run that ran
  every marked test (``make compat``).
* docs/brokerlite.md (the ``brokerlite.md`` beside the page) has a block of its
  own (between ``<!-- compat:brokerlite:begin -->`` and ``<!-- compat:brokerlite:end -->``):
  the page's rows of the areas in ``BROKERLITE_AREAS``, re-rendered. It is
  derived from the page, never from a run, so the two cannot disagree: a run
  that writes the page writes it, a run that checks the page checks it too
  (and tests/test_compat_page.py checks it without any run).
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
DERIVED = "brokerlite.md"
DERIVED_BEGIN, DERIVED_END = "<!-- compat:brokerlite:begin -->", "<!-- compat:brokerlite:end -->"
#: The areas of the page whose rows docs/brokerlite.md shows, in this order.
BROKERLITE_AREAS = ("Kafka scripts", "Kafka's Java client", "Protocol")

# (area, feature) -> peer -> cell, from the reports this process saw.
_cells: dict[tuple[str, str], dict[str, str]] = defaultdict(dict)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "compat(area, feature, peer=None): a row of docs/compatibility.md"
    )


def _peers(item: pytest.Item, mark: pytest.Mark) -> tuple[str, ...]:
    named = mark.kwargs.get("peer")
    if named:
        peers = (named,) if isinstance(named, str) else tuple(named)
        unknown = [p for p in peers if p not in PEERS]
        if unknown:  # (it would fill no column, silently)
            raise pytest.UsageError(f"{item.nodeid}: compat peer {unknown} is none of {PEERS}")
        return peers
    return (_peer(item),)


def _peer(item: pytest.Item) -> str:
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
    return "brokerlite"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        mark = item.get_closest_marker("compat")
        if mark is None:
            continue
        area, feature = mark.args
        for peer in _peers(item, mark):
            item.user_properties.append(("compat", (area, feature, peer)))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    found = [value for name, value in report.user_properties if name == "compat"]
    if not found:
        return
    if report.when == "call" or report.failed or report.skipped:
        if report.skipped and not hasattr(report, "wasxfail"):
            return  # skipped (a missing peer, an opt-out): says nothing of the feature
        if hasattr(report, "wasxfail"):
            cell = "no" if report.skipped else "yes"
        else:
            cell = "yes" if report.passed else "fails"
        for area, feature, peer in found:
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


def render_brokerlite(page: str) -> str:
    """docs/brokerlite.md's block, from the compatibility page's text: a table per
    area of ``BROKERLITE_AREAS`` (a script's action, a Java client's scenario, an
    API), with the page's cells."""
    rows = _read_rows(page)
    parts = []
    for area in BROKERLITE_AREAS:
        mine = sorted((feature, cells) for (a, feature), cells in rows.items() if a == area)
        if not mine:
            continue
        parts += [
            f"**{area}**",
            "",
            "| | " + " | ".join(PEERS) + " |",
            "|---|" + "---|" * len(PEERS),
        ]
        parts += [f"| {f} | " + " | ".join(c.get(p, "") for p in PEERS) + " |" for f, c in mine]
        parts.append("")
    return "\n".join([DERIVED_BEGIN, *parts, DERIVED_END])


def derived_block(text: str) -> str | None:
    """The generated block of a page like docs/brokerlite.md (None: it has none)."""
    found = re.search(re.escape(DERIVED_BEGIN) + ".*?" + re.escape(DERIVED_END), text, re.S)
    return None if found is None else found[0]


def _derived(page: Path, text: str, write: bool) -> str | None:
    """Bring the brokerlite page's block in line with the compatibility page's text
    (``write``), or say how it is stale (None: it is not)."""
    path = page.parent / DERIVED
    if not path.exists():
        return None
    derived = path.read_text()
    block = derived_block(derived)
    if block is None or block == render_brokerlite(text):
        return None if block is not None else f"{path.name} has no {DERIVED_BEGIN} block"
    if write:
        path.write_text(derived.replace(block, render_brokerlite(text)))
        return None
    return f"{path.name}'s generated block differs from {page.name}'s rows"


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if hasattr(session.config, "workerinput") or not _cells:
        return  # a worker: the controller gathers every worker's reports
    path = Path(os.environ.get(PAGE_ENV) or PAGE)
    text = path.read_text()
    page = _read_rows(text)
    ran = {key: dict(cells) for key, cells in _cells.items()}
    stale = sorted(
        f"{a}: {f}"
        for (a, f), cells in ran.items()
        if any(page.get((a, f), {}).get(peer) != cell for peer, cell in cells.items())
    )
    if os.environ.get(WRITE_ENV) == "1":
        everything = session.config.getoption("markexpr", "") == "compat"
        rows = (
            ran if everything else {**page, **{k: {**page.get(k, {}), **c} for k, c in ran.items()}}
        )
        block = f"{BEGIN}\n{_render(rows)}\n{END}"
        new = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
        path.write_text(new)
        _derived(path, new, write=True)
        return
    messages = []
    if stale:
        said = "; ".join(stale[:10]) + (f"; and {len(stale) - 10} more" if len(stale) > 10 else "")
        messages.append(
            f"docs/compatibility.md is stale for {len(stale)} row(s) this run tested: {said}."
        )
    derived = _derived(path, text, write=False)
    if derived is not None:
        messages.append(derived + ".")
    if messages:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        message = " ".join(messages) + (
            f" Run `make compat` (or this run again with {WRITE_ENV}=1) and commit the pages."
        )
        if reporter is not None:
            reporter.write("\n")
            reporter.write_line(message, red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
