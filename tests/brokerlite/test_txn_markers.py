"""Transaction completion in brokerlite: EndTxn answered before its markers, markers
made durable in batches, and what a crash or a power loss in between leaves.

Requests go through the real codec both ways (``Core`` in conftest). A crash of the
broker process is played by a forked child that exits with ``os._exit``: no
clean-shutdown step runs, and everything it wrote stays in the page cache, as after
SIGKILL. A power loss additionally loses the unsynced tail of a partition log,
which the tests cut off by hand (a log comes back as a prefix of what was written).
"""

from __future__ import annotations

import json
import os
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import batch, create, markers, read, send

from trafka.brokerlite import broker as broker_module
from trafka.brokerlite.transactions import markers as txn_markers
from trafka.brokerlite.transactions.coordinator import TransactionCoordinator, TransactionState
from trafka.brokerlite.transactions.journal import TxnJournal, TxnRecord, WrittenMarker
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k20_delete_topics as delete_topics
from trafka.codec.messages import k22_init_producer_id as init_producer_id
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions
from trafka.codec.messages import k25_add_offsets_to_txn as add_offsets
from trafka.codec.messages import k26_end_txn as end_txn
from trafka.codec.messages import k28_txn_offset_commit as txn_offset_commit
from trafka.codec.records import decode_batch, iter_batches

START_MS = 1_700_000_000_000

# -- helpers ----------------------------------------------------------------------------------


def txn_batch(core: Any, values: list[bytes], pid: int, epoch: int, seq: int) -> bytes:
    return batch(core, values, pid, epoch, seq, txn=True)


def read_committed(core: Any, topic: str, *, partition: int = 0) -> Any:
    return read(core, topic, partition=partition, isolation=1)


def visible(view: Any) -> list[bytes | None]:
    """What a read_committed consumer keeps: data records, minus aborted transactions."""
    aborted = sorted((t.first_offset, t.producer_id) for t in (view.aborted_transactions or []))
    dropping: set[int] = set()
    out: list[bytes | None] = []
    for header, raw in iter_batches(view.records or b""):
        while aborted and aborted[0][0] <= header.base_offset:
            dropping.add(aborted.pop(0)[1])
        if header.is_control:
            dropping.discard(header.producer_id)
        elif header.producer_id not in dropping:
            out.extend(r.value for r in decode_batch(raw).records)
    return out


def init(core: Any, tid: str, timeout_ms: int = 60_000) -> tuple[int, int]:
    body = init_producer_id.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=timeout_ms
    )
    response = core.call(22, 4, body)
    assert response.error_code == 0, ErrorCode(response.error_code)
    return response.producer_id, response.producer_epoch


def add(core: Any, tid: str, pid: int, epoch: int, topic: str, partition: int = 0) -> int:
    R = add_partitions.AddPartitionsToTxnRequest
    body = R(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[R.AddPartitionsToTxnTopic(name=topic, partitions=[partition])],
    )
    result = core.call(24, 3, body).results_by_topic_v3_and_below[0]
    return int(result.results_by_partition[0].partition_error_code)


def end(core: Any, tid: str, pid: int, epoch: int, commit: bool) -> int:
    body = end_txn.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return int(core.call(26, 3, body).error_code)


def transaction(
    core: Any, tid: str, pid: int, epoch: int, seq: int, values: list[bytes], partition: int = 0
) -> None:
    """AddPartitionsToTxn and one Produce of ``values`` (the transaction stays open)."""
    assert add(core, tid, pid, epoch, "t", partition) == 0
    records = txn_batch(core, values, pid, epoch, seq)
    assert send(core, "t", records, tid=tid, partition=partition).error_code == 0


class Killed:
    """What a crashed broker left: its data directory, and what it reported before dying."""

    def __init__(self, data_dir: Path, report: dict[str, Any]) -> None:
        self.data_dir = data_dir
        self.report = report

    def lose_log_tail(self, partition_dir: str, keep_bytes: int) -> None:
        """A power loss: the partition log keeps only its first ``keep_bytes``."""
        (segment,) = (self.data_dir / partition_dir).glob("*.log")
        with open(segment, "r+b") as f:
            f.truncate(keep_bytes)

    def lose_journal_tail(self, keep_bytes: int) -> None:
        """A power loss: the transaction journal keeps only its first ``keep_bytes``;
        after them, its reserve reads as the zeros an earlier fsync made durable."""
        with open(self.data_dir / broker_module.TRANSACTIONS_JOURNAL, "r+b") as f:
            size = f.seek(0, os.SEEK_END)
            assert size > keep_bytes  # a journal that fsyncs holds a reserve
            f.seek(keep_bytes)
            f.write(bytes(size - keep_bytes))


@pytest.fixture
def crash(data_dir: Path, open_core: Any) -> Callable[..., Killed]:
    """``crash(scenario)``: run ``scenario(core, report)`` on a broker in a forked child
    that is then killed (``os._exit``), and return what it left in ``data_dir``."""

    def run(scenario: Callable[[Any, dict[str, Any]], None]) -> Killed:
        read_end, write_end = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child never returns
            status = 0
            try:
                os.close(read_end)
                report: dict[str, Any] = {}
                scenario(open_core(), report)
                os.write(write_end, json.dumps(report).encode())
            except BaseException:
                os.write(write_end, json.dumps({"error": traceback.format_exc()}).encode())
                status = 1
            finally:
                os._exit(status)  # killed: no close, no flush, no clean-shutdown marker
        os.close(write_end)
        chunks = []
        while chunk := os.read(read_end, 65536):
            chunks.append(chunk)
        os.close(read_end)
        _, status = os.waitpid(pid, 0)
        report = json.loads(b"".join(chunks) or b"{}")
        assert status == 0 and "error" not in report, report.get("error", status)
        return Killed(data_dir, report)

    return run


# -- EndTxn answered before its markers -------------------------------------------------------------


def test_end_txn_is_answered_before_its_markers_and_no_request_sees_them_missing(
    core: Any,
) -> None:
    create(core, "t")
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"committed"])
    log = core.broker.logs.partition("t", 0)
    assert end(core, "tx", pid, epoch, commit=True) == 0
    # Answered on the decision alone: no marker yet, the transaction still open.
    assert log.log_end_offset == 1
    assert core.broker.producers.last_stable_offset("t", 0) == 0
    assert core.broker.txn.record("tx").state.value == "PrepareCommit"
    assert core.broker.next_deadline() <= core.now  # the driver is asked to poll at once
    # The next request, whoever sends it, finds the markers written.
    view = read_committed(core, "t")
    assert markers(view.records) == [(1, True)]
    assert view.last_stable_offset == 2 and visible(view) == [b"committed"]
    assert core.broker.txn.record("tx").state.value == "CompleteCommit"

    transaction(core, "tx", pid, epoch, 1, [b"aborted"])
    assert end(core, "tx", pid, epoch, commit=False) == 0
    # Before the abort marker a read_committed consumer stops short of the aborted data...
    assert core.broker.producers.last_stable_offset("t", 0) == 2
    # ...and after it, it is told to drop them.
    view = read_committed(core, "t")
    assert markers(view.records) == [(1, True), (3, False)]
    assert visible(view) == [b"committed"]
    assert [t.first_offset for t in view.aborted_transactions] == [2]


def test_poll_writes_the_markers_of_an_answered_end_txn(core: Any) -> None:
    create(core, "t")
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"v"])
    assert end(core, "tx", pid, epoch, commit=True) == 0
    assert core.broker.next_deadline() <= core.now
    core.poll()
    assert core.broker.next_deadline() > core.now
    assert core.broker.producers.last_stable_offset("t", 0) == 2
    # The producer's next transaction starts at once: no CONCURRENT_TRANSACTIONS.
    assert add(core, "tx", pid, epoch, "t") == 0


def test_add_partitions_while_the_markers_cannot_be_written_is_concurrent_transactions(
    core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(core, "t")
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"v"])
    write_marker = core.broker.producers.write_marker

    def broken(*args: Any, **kwargs: Any) -> int:
        raise OSError("disk on fire")

    monkeypatch.setattr(core.broker.producers, "write_marker", broken)
    assert end(core, "tx", pid, epoch, commit=True) == 0
    assert add(core, "tx", pid, epoch, "t") == ErrorCode.CONCURRENT_TRANSACTIONS
    assert end(core, "tx", pid, epoch, commit=True) == ErrorCode.CONCURRENT_TRANSACTIONS
    assert read_committed(core, "t").last_stable_offset == 0
    monkeypatch.setattr(core.broker.producers, "write_marker", write_marker)
    core.poll(1000)  # the coordinator's retry
    assert add(core, "tx", pid, epoch, "t") == 0
    assert visible(read_committed(core, "t")) == [b"v"]


def test_an_end_txn_costs_one_fsync_and_its_markers_none(
    core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(core, "t", **{"segment.bytes": "1000"})
    pid, epoch = init(core, "tx")
    syncs: list[int] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def fsync(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    def fdatasync(fd: int) -> None:
        syncs.append(fd)
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "fdatasync", fdatasync)
    monkeypatch.setattr("trafka.brokerlite.storage.segment._fdatasync", fdatasync)
    for seq in range(3):
        transaction(core, "tx", pid, epoch, seq, [b"v%d" % seq])
        del syncs[:]
        assert end(core, "tx", pid, epoch, commit=True) == 0
        core.poll(txn_markers.MARKER_CHECK_MS)
        # The decision only: neither the markers nor the completion are fsynced.
        assert len(syncs) == 1
        # A run of commits keeps one position: the newest.
        assert core.broker.txn.unsynced_marker_count == 1
    # Once the partition rolls past the marker (fsyncing the finished segment), the
    # next check forgets the position, without an fsync of its own.
    log = core.broker.logs.partition("t", 0)
    transaction(core, "tx", pid, epoch, 3, [b"x" * 600])
    assert log.active_segment_base_offset > core.broker.txn.unsynced_markers()[("t", 0)][0].offset
    del syncs[:]
    core.poll(txn_markers.MARKER_CHECK_MS)
    assert syncs == []
    assert core.broker.txn.unsynced_marker_count == 0


def fsync_log(core: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """In order: the names of the files fsynced, and "marker" for each marker written."""
    events: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        events.append(os.path.basename(os.readlink(f"/proc/self/fd/{fd}")))
        real_fsync(fd)

    write_marker = core.broker.producers.write_marker

    def marker_written(*args: Any, **kwargs: Any) -> Any:
        events.append("marker")
        return write_marker(*args, **kwargs)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(core.broker.producers, "write_marker", marker_written)
    return events


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_end_txn_is_answered_before_the_fsync_of_its_decision_and_markers_wait_for_it(
    core: Any, monkeypatch: pytest.MonkeyPatch, commit: bool
) -> None:
    create(core, "t", partitions=2)
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"v"], partition=0)
    transaction(core, "tx", pid, epoch, 0, [b"w"], partition=1)
    events = fsync_log(core, monkeypatch)
    assert end(core, "tx", pid, epoch, commit=commit) == 0
    assert events == []  # answered with the decision in the page cache
    core.poll()
    journal = broker_module.TRANSACTIONS_JOURNAL
    assert events == [journal, "marker", "marker"]
    for partition in (0, 1):
        assert markers(read_committed(core, "t", partition=partition).records) == [(1, commit)]


def test_end_txn_fsyncs_its_decision_first_when_a_partition_fsyncs_every_record(
    core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(core, "t")
    create(core, "durable", **{"flush.messages": "1"})
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"v"])
    events = fsync_log(core, monkeypatch)
    assert end(core, "tx", pid, epoch, commit=True) == 0
    assert events == []  # no partition of this one asks for it
    core.poll()
    assert add(core, "tx", pid, epoch, "durable") == 0
    records = txn_batch(core, [b"d"], pid, epoch, 0)
    assert send(core, "durable", records, tid="tx").error_code == 0
    del events[:]
    assert end(core, "tx", pid, epoch, commit=True) == 0
    assert events == [broker_module.TRANSACTIONS_JOURNAL]  # before the answer
    core.poll()
    assert events[1:] == ["marker"]
    assert visible(read_committed(core, "durable")) == [b"d"]


def test_markers_wait_while_the_decision_cannot_be_fsynced(
    core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(core, "t")
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"v"])
    real_fsync = os.fsync

    def failing(fd: int) -> None:
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "fsync", failing)
    assert end(core, "tx", pid, epoch, commit=True) == 0
    core.poll()
    assert core.broker.logs.partition("t", 0).log_end_offset == 1  # no marker
    assert core.broker.txn.record("tx").state is TransactionState.PREPARE_COMMIT
    assert add(core, "tx", pid, epoch, "t") == ErrorCode.CONCURRENT_TRANSACTIONS
    monkeypatch.setattr(os, "fsync", real_fsync)
    core.poll(1000)  # the coordinator's retry
    assert visible(read_committed(core, "t")) == [b"v"]
    assert add(core, "tx", pid, epoch, "t") == 0


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_decision_lost_in_a_power_loss_aborts_the_whole_transaction(
    crash: Callable[..., Killed], open_core: Any, commit: bool
) -> None:
    def answered_then_killed(core: Any, report: dict[str, Any]) -> None:
        create(core, "t", partitions=2)
        pid, epoch = init(core, "tx")
        transaction(core, "tx", pid, epoch, 0, [b"a"], partition=0)
        transaction(core, "tx", pid, epoch, 0, [b"b"], partition=1)
        report["journal_bytes"] = core.broker.txn.journal.journal_bytes
        assert end(core, "tx", pid, epoch, commit=commit) == 0
        assert core.broker.txn.journal.journal_bytes > report["journal_bytes"]

    killed = crash(answered_then_killed)
    killed.lose_journal_tail(killed.report["journal_bytes"])  # the unsynced decision
    core = open_core(now_ms=START_MS + 100)
    assert core.broker.txn.record("tx").state is TransactionState.ONGOING
    for partition in (0, 1):
        assert read_committed(core, "t", partition=partition).last_stable_offset == 0
    # The producer starts again: its open transaction is aborted on every partition.
    body = init_producer_id.InitProducerIdRequest(
        transactional_id="tx", transaction_timeout_ms=60_000
    )
    assert core.call(22, 4, body).error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    core.poll()
    for partition in (0, 1):
        view = read_committed(core, "t", partition=partition)
        assert markers(view.records) == [(1, False)]
        assert visible(view) == [] and view.last_stable_offset == 2


def test_unsynced_markers_are_fsynced_when_too_many_pile_up(
    core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(txn_markers, "MARKER_SYNC_MAX", 3)
    create(core, "t")
    pid, epoch = init(core, "tx")
    counts = []
    for seq, commit in enumerate([True, False, True]):
        transaction(core, "tx", pid, epoch, seq, [b"v%d" % seq])
        assert end(core, "tx", pid, epoch, commit=commit) == 0
        core.poll()
        counts.append(core.broker.txn.unsynced_marker_count)
    # Alternating outcomes each need their position, until the third forces an fsync.
    assert counts == [1, 2, 0]


def test_a_clean_close_writes_pending_markers(open_core: Any) -> None:
    core = open_core()
    create(core, "t")
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"v"])
    assert end(core, "tx", pid, epoch, commit=True) == 0
    core.broker.close()
    core = open_core()
    assert core.broker.txn.record("tx").state.value == "CompleteCommit"
    assert core.broker.txn.unsynced_marker_count == 0
    assert visible(read_committed(core, "t")) == [b"v"]


def test_deleting_a_topic_forgets_its_unsynced_marker_positions(core: Any) -> None:
    create(core, "t")
    create(core, "u")
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"v"])
    assert add(core, "tx", pid, epoch, "u") == 0
    assert end(core, "tx", pid, epoch, commit=True) == 0
    core.poll()
    assert sorted(core.broker.txn.unsynced_markers()) == [("t", 0), ("u", 0)]
    body = delete_topics.DeleteTopicsRequest(topic_names=["t"])
    assert core.call(20, 5, body).responses[0].error_code == 0
    # A topic recreated as "t" must never be given the old partition's marker.
    assert sorted(core.broker.txn.unsynced_markers()) == [("u", 0)]


# -- crashes and power losses -------------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_broker_killed_between_the_decision_and_the_markers_completes_on_restart(
    crash: Callable[..., Killed], open_core: Any, commit: bool
) -> None:
    def decide(core: Any, report: dict[str, Any]) -> None:
        create(core, "t", 2)
        other, other_epoch = init(core, "other")
        transaction(core, "other", other, other_epoch, 0, [b"other"], partition=1)
        pid, epoch = init(core, "tx")
        transaction(core, "tx", pid, epoch, 0, [b"decided"], partition=0)
        assert end(core, "tx", pid, epoch, commit=commit) == 0
        # Answered; the kill comes before the marker.
        assert core.broker.logs.partition("t", 0).log_end_offset == 1

    crash(decide)
    core = open_core(now_ms=START_MS + 100)
    assert core.broker.txn.record("tx").state.value == (
        "PrepareCommit" if commit else "PrepareAbort"
    )
    core.poll()  # the first tick issues the prepared outcome again
    view = read_committed(core, "t", partition=0)
    assert markers(view.records) == [(1, commit)]
    assert visible(view) == ([b"decided"] if commit else [])
    assert view.last_stable_offset == 2
    # The other producer's open transaction is left to its own outcome.
    assert read_committed(core, "t", partition=1).last_stable_offset == 0


@pytest.mark.parametrize("commit", [True, False], ids=["commit", "abort"])
def test_a_marker_lost_in_a_power_loss_is_written_again_on_restart(
    crash: Callable[..., Killed], open_core: Any, commit: bool
) -> None:
    def complete_then_start_another(core: Any, report: dict[str, Any]) -> None:
        create(core, "t")
        pid, epoch = init(core, "tx")
        transaction(core, "tx", pid, epoch, 0, [b"first"])
        report["bytes_before_marker"] = core.broker.logs.partition("t", 0).size
        assert end(core, "tx", pid, epoch, commit=commit) == 0
        core.poll()
        assert core.broker.txn.record("tx").state.value.startswith("Complete")
        # The next transaction joins; the journal keeps it all, the log loses its tail.
        assert add(core, "tx", pid, epoch, "t") == 0

    killed = crash(complete_then_start_another)
    killed.lose_log_tail("t-0", killed.report["bytes_before_marker"])
    core = open_core(now_ms=START_MS + 100)
    log = core.broker.logs.partition("t", 0)
    assert log.log_end_offset == 2  # the data, and the marker written again
    view = read_committed(core, "t")
    assert markers(view.records) == [(1, commit)]
    assert visible(view) == ([b"first"] if commit else [])
    assert view.last_stable_offset == 2
    assert core.broker.txn.unsynced_marker_count == 0


def test_the_last_of_a_run_of_commits_is_written_again_after_a_power_loss(
    crash: Callable[..., Killed], open_core: Any
) -> None:
    def two_commits(core: Any, report: dict[str, Any]) -> None:
        create(core, "t")
        pid, epoch = init(core, "tx")
        for seq in range(2):
            transaction(core, "tx", pid, epoch, seq, [b"v%d" % seq])
            report["bytes_before_marker"] = core.broker.logs.partition("t", 0).size
            assert end(core, "tx", pid, epoch, commit=True) == 0
            core.poll()
        assert core.broker.txn.unsynced_marker_count == 1
        assert add(core, "tx", pid, epoch, "t") == 0

    killed = crash(two_commits)
    killed.lose_log_tail("t-0", killed.report["bytes_before_marker"])  # the second marker
    core = open_core(now_ms=START_MS + 100)
    view = read_committed(core, "t")
    assert markers(view.records) == [(1, True), (3, True)]
    assert visible(view) == [b"v0", b"v1"] and view.last_stable_offset == 4


def test_every_producer_gets_its_lost_marker_back(
    crash: Callable[..., Killed], open_core: Any
) -> None:
    def two_producers(core: Any, report: dict[str, Any]) -> None:
        create(core, "t")
        a, a_epoch = init(core, "a")
        b, b_epoch = init(core, "b")
        transaction(core, "a", a, a_epoch, 0, [b"a-committed"])
        transaction(core, "b", b, b_epoch, 0, [b"b-aborted"])
        report["bytes_before_markers"] = core.broker.logs.partition("t", 0).size
        assert end(core, "a", a, a_epoch, commit=True) == 0
        assert end(core, "b", b, b_epoch, commit=False) == 0
        core.poll()
        assert init(core, "c") is not None  # a synced journal write: the positions are durable

    killed = crash(two_producers)
    killed.lose_log_tail("t-0", killed.report["bytes_before_markers"])
    core = open_core(now_ms=START_MS + 100)
    view = read_committed(core, "t")
    assert sorted(markers(view.records)) == [(2, True), (3, False)]
    assert visible(view) == [b"a-committed"]
    assert view.last_stable_offset == 4


def test_a_surviving_marker_is_not_written_again_over_a_later_open_transaction(
    crash: Callable[..., Killed], open_core: Any
) -> None:
    def commit_then_open_another(core: Any, report: dict[str, Any]) -> None:
        create(core, "t")
        pid, epoch = init(core, "tx", timeout_ms=5000)
        transaction(core, "tx", pid, epoch, 0, [b"first"])
        assert end(core, "tx", pid, epoch, commit=True) == 0
        core.poll()
        transaction(core, "tx", pid, epoch, 1, [b"second"])
        report["bytes_before_third"] = core.broker.logs.partition("t", 0).size
        records = txn_batch(core, [b"third"], pid, epoch, 2)
        assert send(core, "t", records, tid="tx").error_code == 0

    killed = crash(commit_then_open_another)
    # The power loss takes the open transaction's last batch, not the marker before it.
    killed.lose_log_tail("t-0", killed.report["bytes_before_third"])
    core = open_core(now_ms=START_MS + 100)
    view = read_committed(core, "t")
    # The second transaction is still open: the first one's COMMIT must not close it.
    assert markers(view.records) == [(1, True)]
    assert view.last_stable_offset == 2 and visible(view) == [b"first"]
    core.poll(5000)  # its timeout aborts it
    view = read_committed(core, "t")
    assert markers(view.records) == [(1, True), (3, False)]
    assert view.last_stable_offset == 4 and visible(view) == [b"first"]


def test_a_lost_marker_whose_data_was_lost_too_is_not_written(
    crash: Callable[..., Killed], open_core: Any
) -> None:
    def commit(core: Any, report: dict[str, Any]) -> None:
        create(core, "t")
        pid, epoch = init(core, "tx")
        transaction(core, "tx", pid, epoch, 0, [b"gone"])
        assert end(core, "tx", pid, epoch, commit=True) == 0
        core.poll()
        assert add(core, "tx", pid, epoch, "t") == 0

    killed = crash(commit)
    killed.lose_log_tail("t-0", 0)
    core = open_core(now_ms=START_MS + 100)
    assert core.broker.logs.partition("t", 0).log_end_offset == 0
    assert core.broker.txn.unsynced_marker_count == 0


# -- the journal's marker positions ---------------------------------------------------------------


# -- A join lost in a power loss -------------------------------------------------------------


def test_add_partitions_is_answered_without_an_fsync_and_the_decision_carries_it(
    core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(core, "t", partitions=2)
    pid, epoch = init(core, "tx")
    events = fsync_log(core, monkeypatch)
    for partition in (0, 1):
        transaction(core, "tx", pid, epoch, 0, [b"v"], partition=partition)
    assert events == []
    assert end(core, "tx", pid, epoch, commit=True) == 0
    core.poll()
    assert events == [broker_module.TRANSACTIONS_JOURNAL, "marker", "marker"]


def assert_fenced(core: Any, pid: int, epoch: int) -> None:
    """The producer of a transaction recovered this way can neither commit nor abort it."""
    assert end(core, "tx", pid, epoch, commit=True) == ErrorCode.PRODUCER_FENCED
    assert end(core, "tx", pid, epoch, commit=False) == ErrorCode.PRODUCER_FENCED
    record = core.broker.txn.record("tx")
    assert record.producer_epoch > epoch
    assert record.state is TransactionState.COMPLETE_ABORT


def test_a_join_lost_after_a_commit_aborts_the_next_transaction_and_fences_it(
    crash: Callable[..., Killed], open_core: Any
) -> None:
    def commit_then_join(core: Any, report: dict[str, Any]) -> None:
        create(core, "t")
        pid, epoch = init(core, "tx")
        report["producer"] = [pid, epoch]
        transaction(core, "tx", pid, epoch, 0, [b"first"])
        assert end(core, "tx", pid, epoch, commit=True) == 0
        core.poll()
        report["journal_bytes"] = core.broker.txn.journal.journal_bytes
        transaction(core, "tx", pid, epoch, 1, [b"second"])  # joined in the page cache

    killed = crash(commit_then_join)
    killed.lose_journal_tail(killed.report["journal_bytes"])  # the join; the data stays
    core = open_core(now_ms=START_MS + 100)
    # Without the join, an EndTxn(commit) would be taken for a retry of the first
    # commit and answered NONE, and the record would hold the LSO forever.
    assert_fenced(core, *killed.report["producer"])
    view = read_committed(core, "t")
    assert markers(view.records) == [(1, True), (3, False)]
    assert visible(view) == [b"first"] and view.last_stable_offset == 4


def test_a_join_lost_mid_transaction_aborts_it_on_every_partition(
    crash: Callable[..., Killed], open_core: Any
) -> None:
    def join_two(core: Any, report: dict[str, Any]) -> None:
        create(core, "t", partitions=2)
        pid, epoch = init(core, "tx")
        report["producer"] = [pid, epoch]
        transaction(core, "tx", pid, epoch, 0, [b"kept"], partition=0)
        init(core, "other")  # a synced write: the first join is on disk
        report["journal_bytes"] = core.broker.txn.journal.journal_bytes
        transaction(core, "tx", pid, epoch, 0, [b"lost"], partition=1)

    killed = crash(join_two)
    killed.lose_journal_tail(killed.report["journal_bytes"])
    core = open_core(now_ms=START_MS + 100)
    assert_fenced(core, *killed.report["producer"])
    for partition in (0, 1):
        view = read_committed(core, "t", partition=partition)
        assert markers(view.records) == [(1, False)]
        assert visible(view) == [] and view.last_stable_offset == 2


def test_a_decided_transaction_is_not_completed_over_a_later_one(
    crash: Callable[..., Killed], open_core: Any
) -> None:
    """The journal keeps a commit's decision and loses what followed: its completion
    and the next transaction's join. Partition 1 kept the commit marker and the next
    transaction's data; partition 0 lost the marker. The commit is completed on
    partition 0 only: on partition 1 its marker would commit the later data."""

    def commit_then_join(core: Any, report: dict[str, Any]) -> None:
        create(core, "t", partitions=2)
        pid, epoch = init(core, "tx")
        report["producer"] = [pid, epoch]
        for partition in (0, 1):
            transaction(core, "tx", pid, epoch, 0, [b"first-%d" % partition], partition=partition)
        report["t-0_bytes"] = core.broker.logs.partition("t", 0).size
        assert end(core, "tx", pid, epoch, commit=True) == 0
        report["journal_bytes"] = core.broker.txn.journal.journal_bytes  # the decision
        core.poll()  # fsync, markers, completion (unsynced)
        transaction(core, "tx", pid, epoch, 1, [b"second"], partition=1)

    killed = crash(commit_then_join)
    killed.lose_journal_tail(killed.report["journal_bytes"])
    killed.lose_log_tail("t-0", killed.report["t-0_bytes"])  # partition 0's marker
    core = open_core(now_ms=START_MS + 100)
    assert_fenced(core, *killed.report["producer"])
    first = read_committed(core, "t", partition=0)
    assert markers(first.records) == [(1, True)]  # written again
    assert visible(first) == [b"first-0"] and first.last_stable_offset == 2
    second = read_committed(core, "t", partition=1)
    assert markers(second.records) == [(1, True), (3, False)]
    assert visible(second) == [b"first-1"] and second.last_stable_offset == 4


def test_an_open_transaction_whose_journal_was_lost_is_aborted(
    crash: Callable[..., Killed], open_core: Any
) -> None:
    def open_one(core: Any, report: dict[str, Any]) -> None:
        create(core, "t")
        pid, epoch = init(core, "tx")
        transaction(core, "tx", pid, epoch, 0, [b"orphan"])

    killed = crash(open_one)
    killed.lose_journal_tail(0)  # no transactional id knows the producer any more
    core = open_core(now_ms=START_MS + 100)
    view = read_committed(core, "t")
    assert markers(view.records) == [(1, False)]
    assert visible(view) == [] and view.last_stable_offset == 2


def test_a_clean_restart_leaves_open_transactions_to_their_coordinator(open_core: Any) -> None:
    core = open_core()
    create(core, "t")
    pid, epoch = init(core, "tx")
    transaction(core, "tx", pid, epoch, 0, [b"open"])
    core.broker.close()
    core = open_core(now_ms=START_MS + 100)
    assert core.broker.txn.record("tx").state is TransactionState.ONGOING
    assert read_committed(core, "t").last_stable_offset == 0
    assert end(core, "tx", pid, epoch, commit=True) == 0
    core.poll()
    assert visible(read_committed(core, "t")) == [b"open"]


def marker(offset: int, partition: int = 0, commit: bool = True, pid: int = 7) -> WrittenMarker:
    return WrittenMarker("t", partition, offset, pid, 1, 0, commit)


def test_marker_positions_are_kept_until_synced_and_survive_reopen_and_compaction(
    tmp_path: Path,
) -> None:
    path = tmp_path / "txn.journal"
    journal = TxnJournal(path, compact_min_bytes=1)
    record = TxnRecord(transactional_id="tx", producer_id=7, producer_epoch=1)
    journal.put(record, sync=False, markers=[marker(5), marker(3, partition=1)])
    journal.put(record, sync=False, markers=[marker(9, commit=False), marker(10, pid=8)])
    journal.put(record, sync=False, markers=[marker(12, commit=False)])
    # The abort at 12 repeats the one at 9 (same producer, outcome and epochs): only
    # the later one is kept. The commit at 5 is not the same outcome; producer 8's
    # marker is its own.
    expected = {
        ("t", 0): [marker(5), marker(10, pid=8), marker(12, commit=False)],
        ("t", 1): [marker(3, partition=1)],
    }
    assert journal.unsynced_markers() == expected
    assert journal.unsynced_marker_count == 4
    journal.close()

    journal = TxnJournal(path, compact_min_bytes=1)  # compacts at open
    assert journal.unsynced_markers() == expected
    journal.markers_synced({("t", 0): 6, ("t", 1): None, ("gone", 0): 1})
    assert journal.unsynced_markers() == {("t", 0): [marker(10, pid=8), marker(12, commit=False)]}
    journal.compact()
    journal.close()

    journal = TxnJournal(path)
    assert journal.unsynced_marker_count == 2
    assert journal.record("tx") == record
    journal.markers_synced({("t", 0): 13})
    assert journal.unsynced_marker_count == 0
    journal.close()
    assert TxnJournal(path).unsynced_markers() == {}


def test_unsynced_journal_writes_are_fsynced_by_the_next_synced_one_or_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    syncs: list[int] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        syncs.append(fd)
        real_fsync(fd)

    journal = TxnJournal(tmp_path / "txn.journal")
    monkeypatch.setattr(os, "fsync", fsync)
    record = TxnRecord(transactional_id="tx", producer_id=7)
    journal.put(record, sync=False, markers=[marker(1)])
    journal.flush()
    assert len(syncs) == 1  # flush() syncs what was written unsynced
    journal.flush()
    assert len(syncs) == 1
    journal.put(record, sync=False)
    journal.put(record)
    assert len(syncs) == 2
    journal.put(record, sync=False)
    journal.close()
    assert len(syncs) == 3


def test_which_coordinator_writes_are_fsynced(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    coordinator = TransactionCoordinator(TxnJournal(tmp_path / "txn.journal"))
    syncs: list[str] = []
    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", lambda fd: (syncs.append("fsync"), real_fsync(fd))[1])

    def synced(what: Callable[[], Any]) -> int:
        del syncs[:]
        what()
        return len(syncs)

    init_request = init_producer_id.InitProducerIdRequest(
        transactional_id="tx", transaction_timeout_ms=60_000
    )
    coordinator.init_producer_id(init_request, 4, START_MS)  # reserves producer ids too
    assert synced(lambda: coordinator.init_producer_id(init_request, 4, START_MS)) == 1
    record = coordinator.record("tx")
    assert record is not None
    pid, epoch = record.producer_id, record.producer_epoch
    R = add_partitions.AddPartitionsToTxnRequest

    def add_partition(partition: int) -> None:
        request = R(
            v3_and_below_transactional_id="tx",
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[R.AddPartitionsToTxnTopic(name="t", partitions=[partition])],
        )
        response = coordinator.add_partitions_to_txn(request, 3, START_MS)
        assert (
            response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
            == 0
        )

    def add_group() -> None:
        request = add_offsets.AddOffsetsToTxnRequest(
            transactional_id="tx", producer_id=pid, producer_epoch=epoch, group_id="g"
        )
        assert coordinator.add_offsets_to_txn(request, 3, START_MS).error_code == 0

    def commit_offsets() -> None:
        T = txn_offset_commit.TxnOffsetCommitRequest
        request = T(
            transactional_id="tx",
            group_id="g",
            producer_id=pid,
            producer_epoch=epoch,
            topics=[
                T.TxnOffsetCommitRequestTopic(
                    name="in",
                    partitions=[
                        T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=5)
                    ],
                )
            ],
        )
        response = coordinator.txn_offset_commit(request, 3, START_MS)
        assert response.topics[0].partitions[0].error_code == 0

    def end_commit() -> None:
        request = end_txn.EndTxnRequest(
            transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True
        )
        response, (completion,) = coordinator.end_txn(request, 3, START_MS)
        assert response.error_code == 0
        assert coordinator.markers_written(completion, START_MS, [marker(3)])

    # A join lost in a power loss is found at open through its data (adopt_hanging).
    assert synced(lambda: add_partition(0)) == 0
    assert synced(lambda: add_partition(1)) == 0
    assert synced(add_group) == 0  # counts only through the decision
    assert synced(commit_offsets) == 0
    assert synced(end_commit) == 1  # the decision; the completion rides on the next fsync
    assert coordinator.record("tx").state is TransactionState.COMPLETE_COMMIT
    coordinator.close()
    reopened = TransactionCoordinator(TxnJournal(tmp_path / "txn.journal"))
    assert reopened.record("tx").state is TransactionState.COMPLETE_COMMIT
    assert reopened.unsynced_markers() == {("t", 0): [marker(3)]}
    reopened.close()

    # When no partition asks for it, the decision waits for flush_decisions().
    lazy = TransactionCoordinator(
        TxnJournal(tmp_path / "lazy.journal"), sync_decision_for=lambda _t, _p: False
    )
    coordinator = lazy
    lazy.init_producer_id(init_request, 4, START_MS)
    record = lazy.record("tx")
    assert record is not None
    pid, epoch = record.producer_id, record.producer_epoch
    assert synced(lambda: add_partition(0)) == 0
    request = end_txn.EndTxnRequest(
        transactional_id="tx", producer_id=pid, producer_epoch=epoch, committed=True
    )
    assert synced(lambda: lazy.end_txn(request, 3, START_MS)) == 0
    # The whole transaction's one fsync, before its markers.
    assert synced(lazy.flush_decisions) == 1
    assert synced(lazy.flush_decisions) == 0
    lazy.close()
