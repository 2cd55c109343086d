"""A group coordinator's offsets count once replicated (cluster mode), without sockets.

Kafka 3.9's group coordinator appends a commit to ``__consumer_offsets`` with
``offsets.commit.required.acks=-1`` and puts it in its cache only in the
append's callback, on success (``GroupMetadataManager.storeOffsets``,
``createPutCacheCallback``); meanwhile the commit is pending: OffsetFetch
answers the offset before it, or UNSTABLE_OFFSET_COMMIT with ``require_stable``
(``GroupMetadata.prepareOffsetCommit``, ``hasPendingOffsetCommitsForTopicPartition``).
A transaction's offsets become committed once its marker is replicated
(``KafkaApis.handleWriteTxnMarkersRequest`` calls ``onTransactionCompleted``
from the acks=-1 append's callback). Kafka 4's coordinator answers OffsetFetch
from its state as of the partition's high watermark (``GroupCoordinatorService
.fetchOffsets``: a read operation at the last committed offset), so a commit
whose answer timed out counts once its record does replicate: brokerlite does
that too.

A cluster-mode broker core with a cluster image given by hand: node 1 leads the
group's ``__consumer_offsets`` partition (ISR 1 and 2), node 2 the transaction's
``__transaction_state`` partition and the input topic.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from trafka.brokerlite.cluster.view import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, ClusterImage
from trafka.brokerlite.cluster.zk_layout import BrokerRegistration, PartitionState, TopicAssignment
from trafka.brokerlite.outcomes import Parked, Reply
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k09_offset_fetch as of
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k27_write_txn_markers as wtm
from trafka.codec.messages import k28_txn_offset_commit as toc

ME = 1
GROUP = "g"


def coordinator(open_core: Any) -> Any:
    core = open_core(node_id=ME, zookeeper_connect="127.0.0.1:1")
    brokers = {n: BrokerRegistration(n, "127.0.0.1", 9090 + n, "PLAINTEXT", None) for n in (1, 2)}
    led = {OFFSETS_TOPIC: (1, 2), TRANSACTION_STATE_TOPIC: (2, 1), "in": (2, 1)}
    topics = {t: TopicAssignment(t, uuid.uuid4(), {0: r}) for t, r in led.items()}
    states = {(t, 0): PartitionState(r[0], 1, r, 1, 0) for t, r in led.items()}
    core.broker.cluster.apply(ClusterImage(brokers, 2, 1, topics, states, {}), core.now)
    return core


def replicate(core: Any) -> None:
    """Node 2 fetches ``__consumer_offsets-0`` up to its log end."""
    plog = core.broker.logs.partition(OFFSETS_TOPIC, 0)
    core.broker.cluster.replicas.on_follower_fetch(
        OFFSETS_TOPIC, 0, 2, plog.log_end_offset, core.now, current_leader_epoch=1
    )


def fetch(core: Any, *, stable: bool) -> tuple[int, ErrorCode]:
    """The group's committed offset of ``in-0`` (OffsetFetch v7) and its error."""
    request = of.OffsetFetchRequest(
        group_id=GROUP,
        topics=[of.OffsetFetchRequest.OffsetFetchRequestTopic(name="in", partition_indexes=[0])],
        require_stable=stable,
    )
    [topic] = core.call(ApiKey.OFFSET_FETCH, 7, request).topics
    [part] = topic.partitions
    return part.committed_offset, ErrorCode(part.error_code)


def commit(core: Any, offset: int) -> Any:
    """A standalone OffsetCommit (v8) of ``offset`` for ``in-0``: its outcome."""
    R = oc.OffsetCommitRequest
    request = R(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            R.OffsetCommitRequestTopic(
                name="in",
                partitions=[
                    R.OffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
                ],
            )
        ],
    )
    return core.send(ApiKey.OFFSET_COMMIT, 8, request)


def code_of(core: Any, outcome: Any) -> ErrorCode:
    reply = outcome if isinstance(outcome, Reply) else outcome.reply
    [[part]] = [t.partitions for t in core.decode(reply).topics]
    return ErrorCode(part.error_code)


def test_a_commit_is_read_once_replicated(open_core: Any) -> None:
    core = coordinator(open_core)
    assert isinstance(commit(core, 10), Parked)
    # In the leader's log only: a claim not yet true.
    assert fetch(core, stable=False) == (-1, ErrorCode.NONE)
    assert fetch(core, stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    replicate(core)
    [done] = core.poll()
    assert code_of(core, done) is ErrorCode.NONE
    assert fetch(core, stable=False) == (10, ErrorCode.NONE)
    assert fetch(core, stable=True) == (10, ErrorCode.NONE)
    # The next one: the previous offset stands until it replicates.
    assert isinstance(commit(core, 20), Parked)
    assert fetch(core, stable=False) == (10, ErrorCode.NONE)
    replicate(core)
    [done] = core.poll()
    assert fetch(core, stable=False) == (20, ErrorCode.NONE)


def test_a_commit_that_timed_out_is_not_read_until_its_record_replicates(open_core: Any) -> None:
    core = coordinator(open_core)
    assert isinstance(commit(core, 10), Parked)
    [done] = core.poll(6_000)  # past offsets.commit.timeout.ms
    assert code_of(core, done) is ErrorCode.REQUEST_TIMED_OUT
    assert fetch(core, stable=False) == (-1, ErrorCode.NONE)
    # The record is in the log: once the follower has it, it is the group's offset
    # (as a successor would replay it; Kafka 4 reads at the high watermark).
    replicate(core)
    assert fetch(core, stable=False) == (10, ErrorCode.NONE)


def test_a_lost_leadership_drops_what_did_not_replicate(open_core: Any) -> None:
    core = coordinator(open_core)
    assert isinstance(commit(core, 10), Parked)
    replicate(core)
    core.poll()
    assert isinstance(commit(core, 20), Parked)
    # Node 2 takes the partition over and gives it back (epochs 2, 3) without
    # ever fetching offset 20: this broker truncates to its successor's log.
    broker = core.broker
    plog = broker.logs.partition(OFFSETS_TOPIC, 0)
    hw = plog.high_watermark
    image = broker.cluster.image
    for leader, epoch in ((2, 2), (1, 3)):
        state = PartitionState(leader, epoch, (1, 2), epoch, 0)
        image = dataclasses.replace(image, states={**image.states, (OFFSETS_TOPIC, 0): state})
        broker.cluster.apply(image, core.now)
        if leader == 2:
            plog.truncate_to(hw)
    assert fetch(core, stable=False) == (10, ErrorCode.NONE)


def txn_commit(core: Any, offset: int) -> Parked:
    """A TxnOffsetCommit of ``offset`` for ``in-0``, verified by node 2, staged here."""
    T = toc.TxnOffsetCommitRequest
    request = T(
        transactional_id="tx",
        group_id=GROUP,
        producer_id=7,
        producer_epoch=0,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            T.TxnOffsetCommitRequestTopic(
                name="in",
                partitions=[
                    T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=offset)
                ],
            )
        ],
    )
    parked = core.send(ApiKey.TXN_OFFSET_COMMIT, 3, request)
    assert isinstance(parked, Parked), parked
    verification = core.broker.txn_verification
    [batch] = verification.batches()
    R = apt.AddPartitionsToTxnResponse
    verification.answered(
        batch,
        R(
            results_by_transaction=[
                R.AddPartitionsToTxnResult(
                    transactional_id="tx",
                    topic_results=[
                        R.AddPartitionsToTxnTopicResult(
                            name=OFFSETS_TOPIC,
                            results_by_partition=[
                                R.AddPartitionsToTxnPartitionResult(partition_index=0)
                            ],
                        )
                    ],
                )
            ]
        ),
    )
    assert core.poll() == []  # verified: now it waits for its replicas
    return parked


def marker(core: Any, *, commit: bool) -> Any:
    """The transaction coordinator's marker for ``__consumer_offsets-0``: its outcome."""
    W = wtm.WriteTxnMarkersRequest
    request = W(
        markers=[
            W.WritableTxnMarker(
                producer_id=7,
                producer_epoch=0,
                transaction_result=commit,
                topics=[W.WritableTxnMarkerTopic(name=OFFSETS_TOPIC, partition_indexes=[0])],
                coordinator_epoch=0,
            )
        ]
    )
    return core.send(ApiKey.WRITE_TXN_MARKERS, 1, request)


def test_a_transactions_offsets_are_read_once_its_marker_replicates(open_core: Any) -> None:
    core = coordinator(open_core)
    txn_commit(core, 10)
    replicate(core)
    [done] = core.poll()
    assert code_of(core, done) is ErrorCode.NONE
    assert fetch(core, stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    assert fetch(core, stable=False) == (-1, ErrorCode.NONE)
    assert isinstance(marker(core, commit=True), Parked)
    # The marker is in the leader's log only: the offsets are not committed yet.
    assert fetch(core, stable=False) == (-1, ErrorCode.NONE)
    assert fetch(core, stable=True) == (-1, ErrorCode.UNSTABLE_OFFSET_COMMIT)
    replicate(core)
    core.poll()
    assert fetch(core, stable=False) == (10, ErrorCode.NONE)
    assert fetch(core, stable=True) == (10, ErrorCode.NONE)
