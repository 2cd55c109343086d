"""Exactly-once through the sans-IO broker: idempotent produce, transactions, restarts.

Requests go through the real codec both ways (``Core`` in conftest). The
producer-state and coordinator rules themselves are tested in
test_producer_state.py and test_transactions.py; these tests check the wiring:
what a client sees on the wire, what lands in the logs, and what survives a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import batch, create, markers, read, send

from trafka.brokerlite.errors import LogStorageError
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.messages import k09_offset_fetch as offset_fetch
from trafka.codec.messages import k20_delete_topics as delete_topics
from trafka.codec.messages import k21_delete_records as delete_records
from trafka.codec.messages import k22_init_producer_id as init_producer_id
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions
from trafka.codec.messages import k25_add_offsets_to_txn as add_offsets
from trafka.codec.messages import k26_end_txn as end_txn
from trafka.codec.messages import k27_write_txn_markers as write_txn_markers
from trafka.codec.messages import k28_txn_offset_commit as txn_offset_commit
from trafka.codec.messages import k61_describe_producers as describe_producers
from trafka.codec.messages import k65_describe_transactions as describe_transactions
from trafka.codec.messages import k66_list_transactions as list_transactions
from trafka.codec.records import decode_batch, iter_batches

# -- helpers ----------------------------------------------------------------------------------


def data_values(records: bytes | None) -> list[bytes | None]:
    """The values of the data (not control) records in a records blob."""
    out = []
    for header, raw in iter_batches(records or b""):
        if not header.is_control:
            out.extend(r.value for r in decode_batch(raw).records)
    return out


def latest(core: Any, topic: str, isolation: int) -> int:
    body = list_offsets.ListOffsetsRequest(
        replica_id=-1,  # (a client's, as Kafka's consumers send)
        isolation_level=isolation,
        topics=[
            list_offsets.ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[list_offsets.ListOffsetsRequest.ListOffsetsPartition(timestamp=-1)],
            )
        ],
    )
    return int(core.call(2, 7, body).topics[0].partitions[0].offset)


def init(core: Any, tid: str | None = None, timeout_ms: int = 60_000) -> tuple[int, int]:
    body = init_producer_id.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=timeout_ms
    )
    response = core.call(22, 4, body)
    if response.error_code == ErrorCode.CONCURRENT_TRANSACTIONS:
        core.poll()  # let the fenced transaction's abort complete, then retry
        response = core.call(22, 4, body)
    assert response.error_code == 0, ErrorCode(response.error_code)
    return response.producer_id, response.producer_epoch


def add(core: Any, tid: str, pid: int, epoch: int, topic: str, *parts: int) -> list[int]:
    body = add_partitions.AddPartitionsToTxnRequest(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[
            add_partitions.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                name=topic, partitions=list(parts)
            )
        ],
    )
    result = core.call(24, 3, body).results_by_topic_v3_and_below[0]
    return [p.partition_error_code for p in result.results_by_partition]


def end(core: Any, tid: str, pid: int, epoch: int, commit: bool, version: int = 3) -> int:
    body = end_txn.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    return int(core.call(26, version, body).error_code)


def offsets_of(core: Any, group: str, topic: str, *, stable: bool) -> list[tuple[int, int]]:
    body = offset_fetch.OffsetFetchRequest(
        group_id=group,
        require_stable=stable,
        topics=[
            offset_fetch.OffsetFetchRequest.OffsetFetchRequestTopic(
                name=topic, partition_indexes=[0]
            )
        ],
    )
    part = core.call(9, 7, body).topics[0].partitions[0]
    return [(part.committed_offset, part.error_code)]


# -- idempotence ------------------------------------------------------------------------------


def test_a_retried_batch_gets_its_original_offset_and_is_not_written_again(core: Any) -> None:
    create(core, "t")
    pid, epoch = init(core)
    first = send(core, "t", batch(core, [b"a", b"b"], pid, epoch, 0))
    second = send(core, "t", batch(core, [b"c"], pid, epoch, 2))
    assert (first.error_code, first.base_offset, second.base_offset) == (0, 0, 2)
    retry = send(core, "t", batch(core, [b"a", b"b"], pid, epoch, 0))
    # Kafka answers a retry with the remembered batch's timestamp as its log-append
    # time (found by tests/brokerlite/test_differential_data.py on 3.9 and 4.x).
    assert (retry.error_code, retry.base_offset, retry.log_append_time_ms) == (0, 0, core.now)
    assert core.broker.logs.partition("t", 0).log_end_offset == 3
    assert data_values(read(core, "t").records) == [b"a", b"b", b"c"]


def test_gaps_are_out_of_order_and_old_epochs_are_fenced(core: Any) -> None:
    create(core, "t")
    pid, _ = init(core)
    assert send(core, "t", batch(core, [b"a"], pid, 0, 0)).error_code == 0
    gap = send(core, "t", batch(core, [b"x"], pid, 0, 5))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert gap.error_message  # v8+ says why
    # A bumped epoch starts again at sequence 0; the old epoch is fenced from then on.
    assert send(core, "t", batch(core, [b"b"], pid, 1, 0)).error_code == 0
    old = send(core, "t", batch(core, [b"y"], pid, 0, 1))
    assert old.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert data_values(read(core, "t").records) == [b"a", b"b"]


def test_an_unknown_producer_is_accepted_at_any_sequence(core: Any) -> None:
    # Kafka since KIP-360: the broker cannot tell a lost state from a new producer.
    create(core, "t")
    assert send(core, "t", batch(core, [b"a"], 4242, 3, 17)).error_code == 0
    assert send(core, "t", batch(core, [b"b"], 4242, 3, 18)).error_code == 0
    gap = send(core, "t", batch(core, [b"c"], 4242, 3, 20))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER


@pytest.mark.parametrize("restart", ["clean", "replay", "stale-snapshot"])
def test_retries_are_still_recognised_after_a_restart(
    open_core: Any, data_dir: Path, restart: str
) -> None:
    core = open_core()
    create(core, "t")
    pid, epoch = init(core)
    for seq in range(3):
        assert send(core, "t", batch(core, [b"v%d" % seq], pid, epoch, seq)).error_code == 0
    core.broker.close()
    partition_dir = data_dir / "t-0"
    snapshots = sorted(p.name for p in partition_dir.glob("*.snapshot"))
    # A clean close snapshots the state at the log end offset.
    assert snapshots == ["00000000000000000003.snapshot"]
    if restart == "replay":
        # As after a crash: no snapshot and no clean-shutdown marker, so the log is
        # recovered and the producer state rebuilt from its batches.
        (partition_dir / snapshots[0]).unlink()
        (partition_dir / ".clean-shutdown").unlink()
    elif restart == "stale-snapshot":
        # A snapshot beyond the log end (the log lost its tail) must not be used.
        (partition_dir / snapshots[0]).rename(partition_dir / "00000000000000000009.snapshot")
    core = open_core()
    retry = send(core, "t", batch(core, [b"v2"], pid, epoch, 2))
    assert (retry.error_code, retry.base_offset) == (0, 2)
    gap = send(core, "t", batch(core, [b"v9"], pid, epoch, 9))
    assert gap.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert send(core, "t", batch(core, [b"v3"], pid, epoch, 3)).base_offset == 3
    assert not (partition_dir / "00000000000000000009.snapshot").exists()


def test_segment_rolls_write_snapshots_and_two_are_kept(core: Any, data_dir: Path) -> None:
    create(core, "t", **{"segment.bytes": "400"})
    pid, epoch = init(core)
    for seq in range(12):
        response = send(core, "t", batch(core, [b"x" * 100], pid, epoch, seq))
        assert response.error_code == 0
    log = core.broker.logs.partition("t", 0)
    snapshots = sorted(int(p.name.split(".")[0]) for p in (data_dir / "t-0").glob("*.snapshot"))
    assert len(log.segment_base_offsets) > 3
    # One per roll, named after the new segment's base offset; the two newest stay.
    assert snapshots == log.segment_base_offsets[-2:]


def test_a_crash_before_the_roll_snapshot_is_made_good_at_the_next_load(
    open_core: Any, data_dir: Path
) -> None:
    core = open_core()
    create(core, "t", **{"segment.bytes": "400"})
    pid, epoch = init(core)
    for seq in range(6):
        assert send(core, "t", batch(core, [b"x" * 100], pid, epoch, seq)).error_code == 0
    bases = core.broker.logs.partition("t", 0).segment_base_offsets
    core.broker.close()
    partition_dir = data_dir / "t-0"
    # As if killed between the last roll and its snapshot: the snapshots there were
    # before it, and no clean shutdown.
    for path in partition_dir.glob("*.snapshot"):
        if int(path.name.split(".")[0]) >= bases[-2]:
            path.unlink()
    (partition_dir / ".clean-shutdown").unlink()
    core = open_core()
    retry = send(core, "t", batch(core, [b"x" * 100], pid, epoch, 5))
    assert (retry.error_code, retry.base_offset) == (0, 5)
    # Loading the state wrote the snapshot the roll lost, at the log end offset.
    snapshots = sorted(int(p.name.split(".")[0]) for p in partition_dir.glob("*.snapshot"))
    assert snapshots[-1] == 6 and bases[-1] <= 6


# -- transactions -----------------------------------------------------------------------------


def test_commit_and_abort_as_read_committed_and_read_uncommitted_consumers_see_them(
    core: Any,
) -> None:
    create(core, "t")
    pid, epoch = init(core, "tx")
    assert add(core, "tx", pid, epoch, "t", 0) == [0]
    response = send(core, "t", batch(core, [b"c1", b"c2"], pid, epoch, 0, txn=True), tid="tx")
    assert (response.error_code, response.base_offset) == (0, 0)
    # Open: read_committed stops at the transaction's first offset (the LSO).
    committed_view = read(core, "t", isolation=1)
    assert (committed_view.high_watermark, committed_view.last_stable_offset) == (2, 0)
    assert data_values(committed_view.records) == []
    assert committed_view.aborted_transactions == []
    everything = read(core, "t")
    assert data_values(everything.records) == [b"c1", b"c2"]
    assert everything.last_stable_offset == 0 and everything.aborted_transactions is None
    assert (latest(core, "t", 1), latest(core, "t", 0)) == (0, 2)

    assert end(core, "tx", pid, epoch, commit=True) == 0
    after = read(core, "t", isolation=1)
    assert after.last_stable_offset == after.high_watermark == 3
    assert data_values(after.records) == [b"c1", b"c2"]
    assert markers(after.records) == [(2, True)]

    assert add(core, "tx", pid, epoch, "t", 0) == [0]
    send(core, "t", batch(core, [b"a1"], pid, epoch, 2, txn=True), tid="tx")
    assert end(core, "tx", pid, epoch, commit=False) == 0
    aborted = read(core, "t", isolation=1)
    assert [(t.producer_id, t.first_offset) for t in aborted.aborted_transactions] == [(pid, 3)]
    assert markers(aborted.records) == [(2, True), (4, False)]
    assert aborted.last_stable_offset == 5
    # From past the abort marker there is nothing left to drop.
    assert read(core, "t", isolation=1, offset=5).aborted_transactions == []
    # Retrying the EndTxn that completed is fine; the other outcome is not.
    assert end(core, "tx", pid, epoch, commit=False) == 0
    assert end(core, "tx", pid, epoch, commit=True) == ErrorCode.INVALID_TXN_STATE


def test_transactional_batches_need_their_partition_in_the_transaction(core: Any) -> None:
    create(core, "t", 2)
    pid, epoch = init(core, "tx")
    assert add(core, "tx", pid, epoch, "t", 0) == [0]
    stray = send(core, "t", batch(core, [b"x"], pid, epoch, 0, txn=True), partition=1, tid="tx")
    assert stray.error_code == ErrorCode.INVALID_TXN_STATE
    assert core.broker.logs.partition("t", 1).log_end_offset == 0
    assert add(core, "tx", pid, epoch, "t", 9) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert add(core, "nope", pid, epoch, "t", 0) == [ErrorCode.INVALID_PRODUCER_ID_MAPPING]


def test_a_new_instance_fences_the_old_one_and_aborts_its_transaction(core: Any) -> None:
    create(core, "t")
    pid, epoch = init(core, "tx")
    add(core, "tx", pid, epoch, "t", 0)
    send(core, "t", batch(core, [b"zombie"], pid, epoch, 0, txn=True), tid="tx")
    fenced = core.call(
        22,
        4,
        init_producer_id.InitProducerIdRequest(transactional_id="tx", transaction_timeout_ms=60000),
    )
    # The old instance's transaction is aborted first (markers at a bumped epoch).
    assert fenced.error_code == ErrorCode.CONCURRENT_TRANSACTIONS
    assert markers(read(core, "t").records) == [(1, False)]
    pid2, epoch2 = init(core, "tx")
    assert (pid2, epoch2) == (pid, epoch + 2)
    late = send(core, "t", batch(core, [b"late"], pid, epoch, 1, txn=True), tid="tx")
    assert late.error_code == ErrorCode.INVALID_PRODUCER_EPOCH
    assert end(core, "tx", pid, epoch, commit=True) == ErrorCode.PRODUCER_FENCED
    assert end(core, "tx", pid, epoch, commit=True, version=1) == ErrorCode.INVALID_PRODUCER_EPOCH
    view = read(core, "t", isolation=1)
    assert data_values(view.records) == [b"zombie"]  # below the LSO, but aborted:
    assert [(t.producer_id, t.first_offset) for t in view.aborted_transactions] == [(pid, 0)]


def test_a_transaction_that_times_out_is_aborted_and_its_producer_fenced(open_core: Any) -> None:
    core = open_core()
    create(core, "t")
    pid, epoch = init(core, "slow", timeout_ms=1000)
    add(core, "slow", pid, epoch, "t", 0)
    send(core, "t", batch(core, [b"late"], pid, epoch, 0, txn=True), tid="slow")
    assert read(core, "t", isolation=1).last_stable_offset == 0
    assert core.broker.next_deadline() <= core.now + 1000
    core.poll(1001)
    view = read(core, "t", isolation=1)
    assert view.last_stable_offset == view.high_watermark == 2
    assert markers(view.records) == [(1, False)]
    assert end(core, "slow", pid, epoch, commit=True) == ErrorCode.PRODUCER_FENCED


def test_the_transaction_timeout_is_capped(open_core: Any) -> None:
    core = open_core(transaction_max_timeout_ms=5000)
    body = init_producer_id.InitProducerIdRequest(
        transactional_id="tx", transaction_timeout_ms=6000
    )
    assert core.call(22, 4, body).error_code == ErrorCode.INVALID_TRANSACTION_TIMEOUT


def test_offsets_apply_on_commit_and_are_unstable_until_then(core: Any) -> None:
    create(core, "in")
    create(core, "out")
    pid, epoch = init(core, "ctp")

    def commit_offset(offset: int) -> None:
        body = add_offsets.AddOffsetsToTxnRequest(
            transactional_id="ctp", producer_id=pid, producer_epoch=epoch, group_id="g"
        )
        assert core.call(25, 3, body).error_code == 0
        t = txn_offset_commit.TxnOffsetCommitRequest
        body2 = t(
            transactional_id="ctp",
            group_id="g",
            producer_id=pid,
            producer_epoch=epoch,
            topics=[
                t.TxnOffsetCommitRequestTopic(
                    name="in",
                    partitions=[
                        t.TxnOffsetCommitRequestPartition(
                            partition_index=0, committed_offset=offset
                        )
                    ],
                )
            ],
        )
        response = core.call(28, 3, body2)
        assert response.topics[0].partitions[0].error_code == 0

    commit_offset(10)
    # Pending: not applied; a require_stable fetch is told to retry.
    assert offsets_of(core, "g", "in", stable=False) == [(-1, 0)]
    assert offsets_of(core, "g", "in", stable=True) == [(-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)]
    v8 = offset_fetch.OffsetFetchRequest
    grouped = core.call(
        9,
        8,
        v8(
            require_stable=True,
            groups=[
                v8.OffsetFetchRequestGroup(
                    group_id="g",
                    topics=[v8.OffsetFetchRequestTopics(name="in", partition_indexes=[0])],
                )
            ],
        ),
    )
    assert grouped.groups[0].topics[0].partitions[0].error_code == ErrorCode.UNSTABLE_OFFSET_COMMIT
    assert end(core, "ctp", pid, epoch, commit=True) == 0
    assert offsets_of(core, "g", "in", stable=True) == [(10, 0)]
    commit_offset(20)
    assert end(core, "ctp", pid, epoch, commit=False) == 0
    assert offsets_of(core, "g", "in", stable=True) == [(10, 0)]


def test_txn_offset_commit_checks_the_group_generation(core: Any) -> None:
    # KIP-447: a producer whose consumer is no longer the group's member is fenced.
    create(core, "in")
    pid, epoch = init(core, "ctp")
    body = add_offsets.AddOffsetsToTxnRequest(
        transactional_id="ctp", producer_id=pid, producer_epoch=epoch, group_id="g"
    )
    assert core.call(25, 3, body).error_code == 0
    t = txn_offset_commit.TxnOffsetCommitRequest

    def attempt(generation: int, member: str) -> int:
        request = t(
            transactional_id="ctp",
            group_id="g",
            producer_id=pid,
            producer_epoch=epoch,
            generation_id_or_member_epoch=generation,
            member_id=member,
            topics=[
                t.TxnOffsetCommitRequestTopic(
                    name="in", partitions=[t.TxnOffsetCommitRequestPartition(committed_offset=1)]
                )
            ],
        )
        return int(core.call(28, 3, request).topics[0].partitions[0].error_code)

    # "g" has never had members: Kafka 4.4 takes a commit without a generation
    # whatever member id it names, and answers one with a generation
    # GROUP_ID_NOT_FOUND, ILLEGAL_GENERATION before v6 (KIP-1319).
    assert attempt(-1, "gone-member") == 0
    assert attempt(3, "") == ErrorCode.ILLEGAL_GENERATION
    assert attempt(-1, "") == 0


def test_a_restart_finishes_prepared_transactions_and_resumes_open_ones(
    open_core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    core = open_core()
    create(core, "t", 2)
    pid, epoch = init(core, "done", timeout_ms=5000)
    add(core, "done", pid, epoch, "t", 0)
    send(core, "t", batch(core, [b"kept"], pid, epoch, 0, txn=True), tid="done")
    other, other_epoch = init(core, "open", timeout_ms=5000)
    add(core, "open", other, other_epoch, "t", 1)
    send(
        core, "t", batch(core, [b"lost"], other, other_epoch, 0, txn=True), partition=1, tid="open"
    )

    def broken_disk(*args: Any, **kwargs: Any) -> int:
        raise LogStorageError("disk on fire")

    monkeypatch.setattr(core.broker.producers, "write_marker", broken_disk)
    # The commit decision is durable before the answer, even if no marker got out.
    assert end(core, "done", pid, epoch, commit=True) == 0
    assert read(core, "t", isolation=1).last_stable_offset == 0
    core.broker.close()

    core = open_core(now_ms=core.now + 100)
    core.poll()  # the first tick re-issues the prepared commit
    view = read(core, "t", isolation=1)
    assert data_values(view.records) == [b"kept"] and markers(view.records) == [(1, True)]
    # The open transaction still holds partition 1 back until its timeout aborts it.
    assert read(core, "t", isolation=1, partition=1).last_stable_offset == 0
    core.poll(6000)
    other_view = read(core, "t", isolation=1, partition=1)
    assert other_view.last_stable_offset == 2
    assert [t.producer_id for t in other_view.aborted_transactions] == [other]


def test_delete_records_drops_aborted_entries_below_the_log_start(core: Any) -> None:
    create(core, "t")
    pid, epoch = init(core, "tx")
    add(core, "tx", pid, epoch, "t", 0)
    send(core, "t", batch(core, [b"a"], pid, epoch, 0, txn=True), tid="tx")
    end(core, "tx", pid, epoch, commit=False)
    core.poll()  # the markers follow the answer; no request came since to write them
    assert len(core.broker.producers.state("t", 0).aborted_index()) == 1
    d = delete_records.DeleteRecordsRequest
    body = d(
        topics=[
            d.DeleteRecordsTopic(
                name="t", partitions=[d.DeleteRecordsPartition(partition_index=0, offset=2)]
            )
        ]
    )
    assert core.call(21, 2, body).topics[0].partitions[0].low_watermark == 2
    assert core.broker.producers.state("t", 0).aborted_index() == []
    assert read(core, "t", isolation=1, offset=2).aborted_transactions == []


def test_deleting_a_topic_forgets_its_producers(core: Any) -> None:
    create(core, "t")
    pid, epoch = init(core)
    send(core, "t", batch(core, [b"a"], pid, epoch, 0))
    assert ("t", 0) in core.broker.producers.loaded()
    body = delete_topics.DeleteTopicsRequest(topic_names=["t"])
    assert core.call(20, 5, body).responses[0].error_code == 0
    assert ("t", 0) not in core.broker.producers.loaded()
    create(core, "t")
    # The recreated partition has never seen the producer: any sequence goes.
    fresh = send(core, "t", batch(core, [b"b"], pid, epoch, 7))
    assert (fresh.error_code, fresh.base_offset) == (0, 0)


def test_idle_producers_expire(open_core: Any) -> None:
    core = open_core(
        producer_id_expiration_ms=10_000, producer_id_expiration_check_interval_ms=1000
    )
    create(core, "t")
    pid, epoch = init(core)
    send(core, "t", batch(core, [b"a"], pid, epoch, 0))
    core.poll(5_000)
    assert core.broker.producers.state("t", 0).entry(pid) is not None
    core.poll(6_000)
    assert core.broker.producers.state("t", 0).entry(pid) is None


def test_describe_and_list_transactions(core: Any) -> None:
    create(core, "t")
    pid, epoch = init(core, "tx")
    add(core, "tx", pid, epoch, "t", 0)
    described = core.call(
        65, 0, describe_transactions.DescribeTransactionsRequest(transactional_ids=["tx", "?"])
    )
    state, unknown = described.transaction_states
    assert (state.transaction_state, state.producer_id, state.producer_epoch) == (
        "Ongoing",
        pid,
        epoch,
    )
    assert [(t.topic, t.partitions) for t in state.topics] == [("t", [0])]
    assert unknown.error_code == ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
    listed = core.call(66, 1, list_transactions.ListTransactionsRequest(state_filters=["Ongoing"]))
    assert [(s.transactional_id, s.producer_id) for s in listed.transaction_states] == [("tx", pid)]


def test_describe_producers(core: Any) -> None:
    create(core, "t")
    idempotent, _ = init(core)
    send(core, "t", batch(core, [b"a", b"b"], idempotent, 0, 0))
    pid, epoch = init(core, "tx")
    add(core, "tx", pid, epoch, "t", 0)
    send(core, "t", batch(core, [b"c"], pid, epoch, 0, txn=True), tid="tx")
    d = describe_producers.DescribeProducersRequest
    body = d(
        topics=[
            d.TopicRequest(name="t", partition_indexes=[0, 5]),
        ]
    )
    known, unknown = core.call(61, 0, body).topics[0].partitions
    assert [
        (p.producer_id, p.producer_epoch, p.last_sequence, p.current_txn_start_offset)
        for p in known.active_producers
    ] == [(idempotent, 0, 1, -1), (pid, epoch, 0, 2)]
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def write_markers(
    core: Any, pid: int, epoch: int, coordinator_epoch: int, *parts: tuple[str, int]
) -> list[int]:
    """An admin's WriteTxnMarkers (ABORT) for ``parts``; their error codes."""
    w = write_txn_markers.WriteTxnMarkersRequest
    marker = w.WritableTxnMarker(
        producer_id=pid,
        producer_epoch=epoch,
        transaction_result=False,
        topics=[w.WritableTxnMarkerTopic(name=t, partition_indexes=[p]) for t, p in parts],
        coordinator_epoch=coordinator_epoch,
    )
    (result,) = core.call(27, 1, w(markers=[marker])).markers
    assert result.producer_id == pid
    return [p.error_code for t in result.topics for p in t.partitions]


def test_write_txn_markers_aborts_an_open_transaction_on_request(core: Any) -> None:
    """KIP-664's abort of a hanging transaction: an ABORT marker for the producer,
    with the checks of the coordinator's own markers."""
    create(core, "t")
    pid, epoch = init(core, "tx")
    assert add(core, "tx", pid, epoch, "t", 0) == [0]
    send(core, "t", batch(core, [b"lost"], pid, epoch, 0, txn=True), tid="tx")
    assert read(core, "t", isolation=1).last_stable_offset == 0

    unknown = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert write_markers(core, pid, epoch, 0, ("t", 3), ("nope", 0)) == [unknown, unknown]
    assert write_markers(core, pid, epoch - 1, 0, ("t", 0)) == [ErrorCode.INVALID_PRODUCER_EPOCH]
    assert read(core, "t", isolation=1).last_stable_offset == 0  # nothing written yet

    assert write_markers(core, pid, epoch, 5, ("t", 0)) == [0]
    after = read(core, "t", isolation=1)
    assert after.last_stable_offset == after.high_watermark == 2
    assert markers(after.records) == [(1, False)]
    assert [(a.producer_id, a.first_offset) for a in after.aborted_transactions] == [(pid, 0)]
    # The partition has seen coordinator epoch 5 now: an older one is fenced.
    fenced = ErrorCode.TRANSACTION_COORDINATOR_FENCED
    assert write_markers(core, pid, epoch, 4, ("t", 0)) == [fenced]


def test_txn_offset_commit_to_a_share_group_is_refused(core: Any) -> None:
    """A share group (KIP-932) keeps no committed offsets: GROUP_ID_NOT_FOUND, as
    OffsetCommit answers, and nothing is stored for the transaction."""
    from trafka.codec.messages import k76_share_group_heartbeat as hb

    create(core, "in")
    joined = core.call(
        76,
        1,
        hb.ShareGroupHeartbeatRequest(
            group_id="queue", member_id="m-1", member_epoch=0, subscribed_topic_names=["in"]
        ),
    )
    assert joined.error_code == 0
    pid, epoch = init(core, "ctp")
    body = add_offsets.AddOffsetsToTxnRequest(
        transactional_id="ctp", producer_id=pid, producer_epoch=epoch, group_id="queue"
    )
    assert core.call(25, 3, body).error_code == 0
    t = txn_offset_commit.TxnOffsetCommitRequest
    request = t(
        transactional_id="ctp",
        group_id="queue",
        producer_id=pid,
        producer_epoch=epoch,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            t.TxnOffsetCommitRequestTopic(
                name="in", partitions=[t.TxnOffsetCommitRequestPartition(committed_offset=1)]
            )
        ],
    )
    answer = core.call(28, 3, request)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.GROUP_ID_NOT_FOUND
    assert not core.broker.txn.has_pending_offsets("queue", "in", 0)
