"""OffsetStore: the journal of committed offsets and group metadata."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from trafka.brokerlite.groups.offsets import (
    CommittedOffset,
    GroupRecord,
    MemberRecord,
    OffsetStore,
    OffsetStoreError,
)
from trafka.brokerlite.storage import journal as journal_mod
from trafka.brokerlite.storage.journal import frame


def journal(tmp_path: Path) -> Path:
    return tmp_path / "groups" / "offsets.journal"


def sample_group(generation: int = 3) -> GroupRecord:
    return GroupRecord(
        protocol_type="consumer",
        generation_id=generation,
        protocol_name="range",
        leader_id="a-1",
        state_timestamp_ms=1234,
        members=(
            MemberRecord(
                member_id="a-1",
                group_instance_id=None,
                client_id="a",
                client_host="/127.0.0.1",
                rebalance_timeout_ms=30000,
                session_timeout_ms=10000,
                protocol_type="consumer",
                protocols=(("range", b"\x00\x01sub"), ("roundrobin", b"\xff")),
                assignment=b"\x00\x00assign",
            ),
            MemberRecord(
                member_id="b-2",
                group_instance_id="inst-b",
                client_id="b",
                client_host="/127.0.0.2",
                rebalance_timeout_ms=60000,
                session_timeout_ms=45000,
                protocol_type="consumer",
                protocols=(("range", b""),),
            ),
        ),
    )


def test_commit_survives_close_and_reopen(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path) as store:
        store.commit_offsets(
            "g", {("t", 0): CommittedOffset(42, 7, "meta", 1000), ("t", 1): CommittedOffset(5)}
        )
        store.commit_offsets("g", {("t", 0): CommittedOffset(43, 8, None, 2000)})
        store.commit_offsets("h", {("u", 3): CommittedOffset(1, -1, "", 3000)})
    with OffsetStore(path) as store:
        assert store.offset("g", "t", 0) == CommittedOffset(43, 8, None, 2000)
        assert store.offset("g", "t", 1) == CommittedOffset(5)
        assert store.offset("g", "t", 2) is None
        assert store.offset("nope", "t", 0) is None
        assert store.group_offsets("h") == {("u", 3): CommittedOffset(1, -1, "", 3000)}
        assert sorted(store.offset_groups()) == ["g", "h"]


@pytest.mark.parametrize("fsync", [True, False])
def test_acknowledged_commit_survives_crash_without_close(tmp_path: Path, fsync: bool) -> None:
    path = journal(tmp_path)
    store = OffsetStore(path, fsync=fsync)
    store.commit_offsets("g", {("t", 0): CommittedOffset(100)})
    # "Crash": never close or flush; a second process opens the same journal.
    reopened = OffsetStore(path)
    assert reopened.offset("g", "t", 0) == CommittedOffset(100)
    reopened.close()
    os.close(store._journal._fd)  # type: ignore[arg-type]  # no close(): no fsync


def test_group_metadata_roundtrip_and_delete(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path) as store:
        store.store_group("g", sample_group(1))
        store.store_group("g", sample_group(2))
        store.store_group("h", GroupRecord(None, 0, None, None, None))
        store.commit_offsets("h", {("t", 0): CommittedOffset(1)})
    with OffsetStore(path) as store:
        assert store.group_metadata("g") == sample_group(2)
        assert store.groups()["h"] == GroupRecord(None, 0, None, None, None)
        store.delete_group("h")
        assert store.group_metadata("h") is None
        assert not store.has_offsets("h")
    with OffsetStore(path) as store:
        assert set(store.groups()) == {"g"}
        assert store.offset_groups() == []


def test_delete_topic_and_partition_offsets_are_durable(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path) as store:
        store.commit_offsets("g", {("a", 0): CommittedOffset(1), ("b", 0): CommittedOffset(2)})
        store.commit_offsets("h", {("a", 1): CommittedOffset(3), ("c", 0): CommittedOffset(4)})
        assert store.delete_topic_offsets("a") == 2
        assert store.delete_topic_offsets("a") == 0
        assert store.delete_offsets("h", [("c", 0), ("zzz", 9)]) == 1
    with OffsetStore(path) as store:
        assert store.group_offsets("g") == {("b", 0): CommittedOffset(2)}
        assert store.group_offsets("h") == {}
        assert store.offset_groups() == ["g"]


def test_torn_tail_is_truncated_and_appends_continue(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path) as store:
        store.commit_offsets("g", {("t", 0): CommittedOffset(1)})
        good = store.journal_bytes
        store.commit_offsets("g", {("t", 0): CommittedOffset(2)})
        full = store.journal_bytes
    # Cut the last entry in half, as a crash in the middle of its write would.
    with open(path, "r+b") as f:
        f.truncate(good + (full - good) // 2)
    with OffsetStore(path) as store:
        assert store.offset("g", "t", 0) == CommittedOffset(1)
        assert path.stat().st_size == good
        store.commit_offsets("g", {("t", 1): CommittedOffset(9)})
    with OffsetStore(path) as store:
        assert store.group_offsets("g") == {
            ("t", 0): CommittedOffset(1),
            ("t", 1): CommittedOffset(9),
        }


def test_damaged_entry_ends_replay(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path) as store:
        store.commit_offsets("g", {("t", 0): CommittedOffset(1)})
        good = store.journal_bytes
        store.commit_offsets("g", {("t", 0): CommittedOffset(2)})
        store.commit_offsets("g", {("t", 0): CommittedOffset(3)})
    data = bytearray(path.read_bytes())
    data[good + 12] ^= 0x40  # a payload byte of the second commit: its CRC no longer matches
    path.write_bytes(bytes(data))
    with OffsetStore(path) as store:
        assert store.offset("g", "t", 0) == CommittedOffset(1)
    assert path.stat().st_size == good


def test_garbage_after_last_entry_is_dropped(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path) as store:
        store.commit_offsets("g", {("t", 0): CommittedOffset(1)})
        good = store.journal_bytes
    with open(path, "ab") as f:
        f.write(b"\xff\xff\xff\xff\x00\x00\x00\x00garbage")
    with OffsetStore(path) as store:
        assert store.offset("g", "t", 0) == CommittedOffset(1)
    assert path.stat().st_size == good


def test_failed_write_is_rolled_back(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = journal(tmp_path)
    store = OffsetStore(path)
    store.commit_offsets("g", {("t", 0): CommittedOffset(1)})
    size = store.journal_bytes
    real_write = journal_mod._write_all

    def half_then_fail(fd: int, data: bytes) -> None:
        real_write(fd, data[: len(data) // 2])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(journal_mod, "_write_all", half_then_fail)
    with pytest.raises(OffsetStoreError):
        store.commit_offsets("g", {("t", 0): CommittedOffset(2)})
    assert store.offset("g", "t", 0) == CommittedOffset(1)
    assert path.stat().st_size == size
    monkeypatch.setattr(journal_mod, "_write_all", real_write)
    store.commit_offsets("g", {("t", 0): CommittedOffset(3)})
    store.close()
    with OffsetStore(path) as reopened:
        assert reopened.offset("g", "t", 0) == CommittedOffset(3)


def test_compaction_bounds_the_journal(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path, fsync=False, compact_min_bytes=4096) as store:
        store.store_group("g", sample_group())
        for i in range(2000):
            store.commit_offsets("g", {("t", i % 4): CommittedOffset(i, -1, "x" * 20, i)})
        # Live state is tiny; 2000 commits of ~80 bytes would be ~160 KB uncompacted.
        assert store.journal_bytes < 4 * 4096
        assert path.stat().st_size == store.journal_bytes
    with OffsetStore(path) as store:
        assert store.group_offsets("g") == {
            ("t", p): CommittedOffset(1996 + p, -1, "x" * 20, 1996 + p) for p in range(4)
        }
        assert store.group_metadata("g") == sample_group()


def test_open_compacts_a_grown_journal(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path, fsync=False, compact_min_bytes=1 << 30) as store:
        for i in range(500):
            store.commit_offsets("g", {("t", 0): CommittedOffset(i)})
        grown = store.journal_bytes
    with OffsetStore(path, compact_min_bytes=1024) as store:
        assert store.journal_bytes < grown // 10
        assert store.offset("g", "t", 0) == CommittedOffset(499)
    assert not path.with_name(path.name + ".compact.tmp").exists()


def test_leftover_compaction_file_is_ignored(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path) as store:
        store.commit_offsets("g", {("t", 0): CommittedOffset(7)})
    tmp = path.with_name(path.name + ".compact.tmp")
    tmp.write_bytes(b"half a compaction")
    with OffsetStore(path) as store:
        assert store.offset("g", "t", 0) == CommittedOffset(7)
    assert not tmp.exists()


def test_unknown_entry_kind_or_version_is_an_error(tmp_path: Path) -> None:
    path = journal(tmp_path)
    with OffsetStore(path) as store:
        store.commit_offsets("g", {("t", 0): CommittedOffset(7)})
    with open(path, "ab") as f:
        f.write(frame({"kind": "from-the-future", "group": "g"}))
    with pytest.raises(OffsetStoreError, match="from-the-future"):
        OffsetStore(path)
    other = tmp_path / "v2.journal"
    other.write_bytes(frame({"kind": "header", "version": 2}))
    with pytest.raises(OffsetStoreError, match="version"):
        OffsetStore(other)


def test_closed_store_refuses_writes(tmp_path: Path) -> None:
    store = OffsetStore(journal(tmp_path))
    store.close()
    store.close()
    with pytest.raises(OffsetStoreError, match="closed"):
        store.commit_offsets("g", {("t", 0): CommittedOffset(1)})


# --- property: the journal replays to the model, and a torn tail loses only unfinished writes --

_ops = st.lists(
    st.one_of(
        st.tuples(
            st.just("commit"),
            st.sampled_from(["g1", "g2", ""]),
            st.dictionaries(
                st.tuples(st.sampled_from(["a", "b", "ü"]), st.integers(0, 3)),
                st.builds(
                    CommittedOffset,
                    st.integers(-1, 2**40),
                    st.integers(-1, 5),
                    st.one_of(st.none(), st.text(max_size=8)),
                    st.integers(-1, 2**41),
                ),
                min_size=1,
                max_size=3,
            ),
        ),
        st.tuples(st.just("delete_group"), st.sampled_from(["g1", "g2", ""])),
        st.tuples(st.just("delete_topic"), st.sampled_from(["a", "b", "ü"])),
    ),
    max_size=12,
)


def _apply_model(model: dict[str, dict[tuple[str, int], CommittedOffset]], op: tuple) -> None:  # type: ignore[type-arg]
    if op[0] == "commit":
        model.setdefault(op[1], {}).update(op[2])
    elif op[0] == "delete_group":
        model.pop(op[1], None)
    else:
        for g in list(model):
            model[g] = {k: v for k, v in model[g].items() if k[0] != op[1]}
            if not model[g]:
                del model[g]


def _state(store: OffsetStore) -> dict[str, dict[tuple[str, int], CommittedOffset]]:
    return {g: store.group_offsets(g) for g in store.offset_groups()}


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=_ops, cut=st.floats(0, 1))
def test_replay_matches_model_and_torn_tail_keeps_a_prefix(
    tmp_path_factory: pytest.TempPathFactory,
    ops: list[tuple],
    cut: float,  # type: ignore[type-arg]
) -> None:
    path = tmp_path_factory.mktemp("prop") / "offsets.journal"
    store = OffsetStore(path, fsync=False)
    model: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
    prefixes = [(store.journal_bytes, {})]  # (journal size after op, model after op)
    for op in ops:
        if op[0] == "commit":
            store.commit_offsets(op[1], op[2])
        elif op[0] == "delete_group":
            store.delete_group(op[1])
        else:
            store.delete_topic_offsets(op[1])
        _apply_model(model, op)
        prefixes.append((store.journal_bytes, {g: dict(o) for g, o in model.items()}))
    store.close()
    with OffsetStore(path, fsync=False) as reopened:
        assert _state(reopened) == model
    size = path.stat().st_size
    with open(path, "r+b") as f:
        f.truncate(int(size * cut))
    with OffsetStore(path, fsync=False) as torn:
        survived = _state(torn)
    # Whatever survives is exactly the state after some prefix of the operations.
    expected = [m for s, m in prefixes if s <= int(size * cut)]
    assert survived == (expected[-1] if expected else {})


def test_journal_header_is_unchanged_and_other_formats_are_refused(tmp_path: Path) -> None:
    """The offset journal keeps its original header (no format name), so journals
    written before the shared CrcJournal still open; a named format is refused."""
    path = journal(tmp_path)
    OffsetStore(path).close()
    assert path.read_bytes() == frame({"kind": "header", "version": 1})
    old = frame({"kind": "header", "version": 1}) + frame(
        {"kind": "commit", "group": "g", "offsets": [["t", 0, 42, -1, "", 7]]}
    )
    path.write_bytes(old)
    with OffsetStore(path) as store:
        assert store.offset("g", "t", 0) == CommittedOffset(42, -1, "", 7)
    other = tmp_path / "txn.journal"
    other.write_bytes(frame({"kind": "header", "format": "trafka-transactions", "version": 1}))
    with pytest.raises(OffsetStoreError, match="trafka-transactions"):
        OffsetStore(other)
