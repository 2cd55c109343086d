"""CrcJournal: a journal that fsyncs writes its entries over a reserve of zeros."""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

import pytest

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage import journal as journal_mod
from trafka.brokerlite.storage.journal import CrcJournal, frame

CHUNK = journal_mod._PREALLOC


def open_journal(path: Path, *, fsync: bool = True) -> tuple[CrcJournal, list[dict[str, object]]]:
    j = CrcJournal(path, format_name="test", version=1, fsync=fsync)
    return j, j.open()


def replay(path: Path) -> list[dict[str, object]]:
    """The entries a journal at ``path`` holds, read by opening (and closing) it."""
    j, entries = open_journal(path)
    j.close()
    return entries


def entry(i: int) -> dict[str, object]:
    return {"kind": "e", "i": i, "pad": "x" * 100}


def test_entries_are_written_over_a_reserve_that_close_cuts_off(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j, entries = open_journal(path)
    assert entries == []
    header_size = j.size
    assert path.stat().st_size == header_size  # nothing reserved before the first entry
    j.append(entry(0))
    assert path.stat().st_size == CHUNK
    # Appends inside the reserve overwrite zeros: the file keeps its size.
    for i in range(1, 50):
        j.append(entry(i))
        assert path.stat().st_size == CHUNK
    written = header_size + sum(len(frame(entry(i))) for i in range(50))
    assert j.size == written
    data = path.read_bytes()
    assert data[j.size :] == bytes(CHUNK - j.size)
    j.close()
    assert path.stat().st_size == written
    assert replay(path) == [entry(i) for i in range(50)]


def test_the_reserve_grows_by_a_chunk_when_an_entry_passes_its_end(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j, _ = open_journal(path)
    big = {"kind": "e", "pad": "y" * (CHUNK // 3)}
    for _ in range(4):
        j.append(big)
    assert j.size > CHUNK
    assert path.stat().st_size == 2 * CHUNK
    j.close()
    assert replay(path) == [big] * 4


def test_a_reserve_left_by_a_crash_is_not_damage(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j"
    j, _ = open_journal(path)
    for i in range(3):
        j.append(entry(i))
    # What a crash of the process leaves: the file as it is while open.
    crashed = tmp_path / "crashed"
    shutil.copy(path, crashed)
    j.close()
    assert crashed.stat().st_size == CHUNK
    with caplog.at_level(logging.WARNING, logger="trafka.brokerlite.storage.journal"):
        again, entries = open_journal(crashed)
    assert entries == [entry(i) for i in range(3)]
    assert caplog.records == []
    # The reserve is used, not rebuilt: the next entry lands after the last one.
    again.append(entry(3))
    assert crashed.stat().st_size == CHUNK
    again.close()
    assert replay(crashed) == [entry(i) for i in range(4)]


def test_an_entry_torn_inside_the_reserve_is_cut_off(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "j"
    j, _ = open_journal(path)
    j.append(entry(0))
    good = j.size
    j.append(entry(1))
    crashed = tmp_path / "crashed"
    shutil.copy(path, crashed)
    j.close()
    # Half of the second entry reached the disk: the zeros after it stay zeros.
    data = bytearray(crashed.read_bytes())
    half = good + len(frame(entry(1))) // 2
    data[half : half + len(frame(entry(1)))] = bytes(len(frame(entry(1))))
    crashed.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="trafka.brokerlite.storage.journal"):
        again, entries = open_journal(crashed)
    assert entries == [entry(0)]
    assert "torn or corrupt tail" in caplog.text
    assert crashed.stat().st_size == good
    again.append(entry(2))
    again.close()
    assert replay(crashed) == [entry(0), entry(2)]


def test_a_failed_write_drops_the_reserve_and_the_next_one_rebuilds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "j"
    j, _ = open_journal(path)
    j.append(entry(0))
    size = j.size
    real_write = journal_mod._write_all

    def half_then_fail(fd: int, data: bytes) -> None:
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal_mod, "_write_all", half_then_fail)
    with pytest.raises(BrokerError, match="No space left"):
        j.append(entry(1))
    assert path.stat().st_size == size
    monkeypatch.setattr(journal_mod, "_write_all", real_write)
    j.append(entry(2))
    assert path.stat().st_size == CHUNK
    j.close()
    assert replay(path) == [entry(0), entry(2)]


def test_a_journal_that_does_not_fsync_reserves_nothing(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j, _ = open_journal(path, fsync=False)
    for i in range(5):
        j.append(entry(i))
        assert path.stat().st_size == j.size
    j.close()


def test_compaction_leaves_the_reserve_to_the_next_entry(tmp_path: Path) -> None:
    path = tmp_path / "j"
    j, _ = open_journal(path)
    for i in range(10):
        j.append(entry(i))
    j.rewrite([entry(9)])
    assert path.stat().st_size == j.size
    j.append(entry(10))
    assert path.stat().st_size == CHUNK
    fd = os.open(path, os.O_RDONLY)
    try:
        assert os.pread(fd, 4, j.size) == bytes(4)
    finally:
        os.close(fd)
    j.close()
    assert replay(path) == [entry(9), entry(10)]


@pytest.mark.parametrize(
    "head",
    [b"garbage, not a journal" * 3, b"\x00\x00\x00\x05hello", b"\xff" * 40 + b"\x00" * 100],
)
def test_damage_at_the_head_is_refused_and_the_file_kept(tmp_path: Path, head: bytes) -> None:
    """Only a crash tears an entry, and a journal's header is created whole: other
    bytes where the header should be are damage. Emptying the store would drop
    everything it held (an ACL journal: every ACL), so the file is refused as it is."""
    path = tmp_path / "j.journal"
    path.write_bytes(head)
    with pytest.raises(BrokerError, match=r"header entry is damaged.*move the file away"):
        open_journal(path)
    assert path.read_bytes() == head


@pytest.mark.parametrize("cut", [1, 7, 20])
def test_a_header_cut_short_starts_the_store_empty(tmp_path: Path, cut: int) -> None:
    path = tmp_path / "j.journal"
    j, _ = open_journal(path)
    j.append(entry(1))
    j.close()
    header = frame({"kind": "header", "format": "test", "version": 1})
    path.write_bytes(header[:cut])
    assert replay(path) == []
    j, _ = open_journal(path)  # and it is a journal again
    j.append(entry(2))
    j.close()
    assert replay(path) == [entry(2)]
