"""The directory journal's format is versioned (docs/proxy.md, "Upgrading"):
a journal written by the previous format (kept in tests/proxy/fixtures/journal-v1,
made by the proxy before the format had a version) is read by this code and
rewritten in the current format; a journal of a newer format is refused rather
than misread; a new journal starts with its header. The same for the records
of the journal in the cluster (``--journal topic``), whose previous format is
kept in tests/proxy/fixtures/journal-topic-v1.json."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import trio

from trafka.proxy.keyrouting.journal import (
    FILE_NAME,
    FORMAT,
    HEADER,
    DirectoryJournal,
    JournalError,
    format_of,
)
from trafka.proxy.keyrouting.journal_topic import FORMAT as TOPIC_FORMAT
from trafka.proxy.keyrouting.journal_topic import (
    claim_key,
    decode_record,
    encode_claim,
    encode_window,
    window_key,
)
from trafka.proxy.keyrouting.sequences import Placement

FIXTURE = Path(__file__).parent / "fixtures" / "journal-v1"
# What the fixture holds (its last line repeats the first placement).
WRITTEN = {
    (4001, 0, "orders", 0, 0): Placement(3, ((0, 0), (2, 1))),
    (4001, 0, "orders", 0, 3): Placement(2, ((1, 0),)),
    (4002, 1, "payments", 2, 10): Placement(5, ((0, 4), (1, 2), (2, 7))),
}


def test_a_journal_of_the_previous_format_is_read_and_rewritten_in_the_current(
    tmp_path: Path,
) -> None:
    shutil.copytree(FIXTURE, tmp_path, dirs_exist_ok=True)
    path = tmp_path / FILE_NAME
    assert format_of(path.read_bytes()) == 1
    journal = DirectoryJournal(tmp_path)
    assert journal.open() == 3
    assert {k: journal.lookup(k) for k in WRITTEN} == WRITTEN
    assert sorted(journal.placements(4001, 0)) == sorted(
        (k, p) for k, p in WRITTEN.items() if k[:2] == (4001, 0)
    )
    assert path.read_bytes().startswith(HEADER) and format_of(path.read_bytes()) == FORMAT
    added = ((4003, 0, "orders", 1, 0), Placement(1, ((1, 0),)))
    trio.run(journal.record, [added])
    journal.close()
    again = DirectoryJournal(tmp_path)
    assert again.open() == 4
    assert {k: again.lookup(k) for k in WRITTEN} == WRITTEN
    assert again.lookup(added[0]) == added[1]
    again.close()
    assert path.read_bytes().count(HEADER) == 1


def test_a_journal_of_a_newer_format_is_refused_untouched(tmp_path: Path) -> None:
    path = tmp_path / FILE_NAME
    newer = b'{"trafka_proxy_journal":%d}\n' % (FORMAT + 1) + b'[1,0,"t",0,0,1,[[0,0]]]\n'
    path.write_bytes(newer)
    with pytest.raises(JournalError, match=f"format {FORMAT + 1}"):
        DirectoryJournal(tmp_path).open()
    assert path.read_bytes() == newer


def test_a_new_journal_starts_with_its_header(tmp_path: Path) -> None:
    journal = DirectoryJournal(tmp_path / "new")
    assert journal.open() == 0
    trio.run(journal.record, [((7, 0, "t", 0, 0), Placement(1, ((0, 0),)))])
    journal.close()
    data = (tmp_path / "new" / FILE_NAME).read_bytes()
    assert data.startswith(HEADER) and format_of(data) == FORMAT
    reopened = DirectoryJournal(tmp_path / "new")
    assert reopened.open() == 1
    reopened.close()


def test_topic_journal_records_of_the_previous_format_are_read() -> None:
    """Records of the journal topic as the proxy wrote them before their format
    had a version (tests/proxy/fixtures/journal-topic-v1.json) decode as they did."""
    records = json.loads((FIXTURE.parent / "journal-topic-v1.json").read_text())
    decoded = [decode_record(r["key"].encode(), r["value"].encode()) for r in records]
    assert decoded == [
        (
            "p",
            (
                (4001, "orders", 0),
                "proxy-a",
                17,
                [
                    (0, 0, WRITTEN[(4001, 0, "orders", 0, 0)]),
                    (0, 3, WRITTEN[(4001, 0, "orders", 0, 3)]),
                ],
            ),
        ),
        ("c", (4001, "proxy-a", 0)),
        ("b", 4001),
    ]


def test_topic_journal_records_carry_their_format_and_a_newer_one_is_skipped() -> None:
    window = [(0, 0, Placement(1, ((0, 0),)))]
    key = window_key((9, "t", 0), "me")
    value = encode_window(5, window)
    assert json.loads(value)["v"] == TOPIC_FORMAT
    assert json.loads(encode_claim("me", 2))["v"] == TOPIC_FORMAT
    assert decode_record(key, value) == ("p", ((9, "t", 0), "me", 5, window))
    assert decode_record(claim_key(9), encode_claim("me", 2)) == ("c", (9, "me", 2))
    newer = json.dumps({"v": TOPIC_FORMAT + 1, "c": 5, "w": []}).encode()
    assert decode_record(key, newer) is None
    assert decode_record(claim_key(9), json.dumps({"v": TOPIC_FORMAT + 1}).encode()) is None
