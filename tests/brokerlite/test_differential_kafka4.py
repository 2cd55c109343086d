"""Differential conversations on the request versions Kafka 4.0 added over 3.9
(issue #61): Kafka 4.x is the reference (Kafka 3.9 does not serve them);
brokerlite must answer the same (:mod:`differential`).

* Metadata v13 (KIP-1102) adds a top-level error code, 0 in an answer.
* DescribeCluster v2 (KIP-1073) asks whether to list fenced brokers and tells
  of each broker whether it is fenced; a running single-node cluster has none.
* DescribeGroups v6 (KIP-1043) answers a group that does not exist, or that is
  not a classic group, GROUP_ID_NOT_FOUND where v5 described it ``Dead``.
* ConsumerGroupDescribe v1 (KIP-1099) tells each member's type: 1 for a member
  of the consumer protocol; v0 has no such field (read as -1, unknown).
* Transaction version 2 (KIP-890 part 2): ApiVersions finalizes
  ``transaction.version`` 2 on a new cluster; Produce v12 and TxnOffsetCommit
  v5 add the partition and the group to the transaction; EndTxn v5 bumps the
  epoch (the markers carry it), a retry gets the same answer, a late batch of
  the previous epoch is refused.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest
from differential import Talk
from differential_requests import Kafka, check, records

from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k15_describe_groups as describe_groups
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k22_init_producer_id as init_pid_msg
from trafka.codec.messages import k25_add_offsets_to_txn as add_offsets
from trafka.codec.messages import k26_end_txn as end_txn
from trafka.codec.messages import k28_txn_offset_commit as txn_offset_commit
from trafka.codec.messages import k60_describe_cluster as describe_cluster
from trafka.codec.messages import k61_describe_producers as describe_producers
from trafka.codec.messages import k65_describe_transactions as describe_transactions
from trafka.codec.messages import k68_consumer_group_heartbeat as heartbeat
from trafka.codec.messages import k69_consumer_group_describe as group_describe
from trafka.codec.records import iter_batches


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "Metadata v13/DescribeCluster v2")
def test_metadata_v13_and_describe_cluster_v2(kafka4: Any, peer: Any) -> None:
    """Metadata v13 of a topic and of a missing one (no auto-creation): the
    top-level error code is 0, the missing topic UNKNOWN_TOPIC_OR_PARTITION
    (KIP-1102). DescribeCluster v2, without and with ``include_fenced_brokers``,
    lists the one broker, not fenced (KIP-1073); v1 lists it too."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, missing = talk.name("topic"), talk.name("missing")
        k.create(topic, 1)
        req = metadata.MetadataRequest
        talk.ask(
            3,
            13,
            req(
                topics=[req.MetadataRequestTopic(name=t) for t in (topic, missing)],
                allow_auto_topic_creation=False,
            ),
        )
        talk.recording = False
        for version, fenced in ((1, False), (2, False), (2, True)):
            answer = talk.ask(
                60, version, describe_cluster.DescribeClusterRequest(include_fenced_brokers=fenced)
            )
            talk.note(
                f"DescribeCluster v{version} include_fenced_brokers={fenced}",
                {
                    "error_code": answer.error_code,
                    "endpoint_type": answer.endpoint_type,
                    "brokers": [b.is_fenced for b in answer.brokers],
                },
            )
        talk.recording = True

    check(kafka4, peer, script)


def _heartbeat(k: Kafka, group: str, member: str, epoch: int, topic: str) -> Any:
    body = heartbeat.ConsumerGroupHeartbeatRequest(
        group_id=group,
        member_id=member,
        member_epoch=epoch,
        rebalance_timeout_ms=30000,
        subscribed_topic_names=[topic],
        topic_partitions=[],
    )
    return k.ask(68, body, version=1)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "DescribeGroups v6/ConsumerGroupDescribe v1")
def test_describe_groups_v6_and_consumer_group_describe_v1(kafka4: Any, peer: Any) -> None:
    """A consumer group (KIP-848: one member, client-made id, KIP-1082), a
    classic group holding only offsets, and a group that never existed.
    DescribeGroups v5 describes the consumer group and the missing one ``Dead``
    without error; v6 answers both GROUP_ID_NOT_FOUND with a message and the
    classic group as v5 does (KIP-1043). ConsumerGroupDescribe v1 gives the
    member's type, 1 (consumer), where v0 leaves it unknown, -1 (KIP-1099);
    the two others are GROUP_ID_NOT_FOUND in both versions."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, group = talk.name("topic"), talk.name("group")
        classic, missing = talk.name("classic"), talk.name("missing")
        k.create(topic, 1)
        k.commit(classic, topic, 5)
        member = uuid.uuid4().hex
        talk.recording = False
        epoch, deadline = 0, time.monotonic() + 120
        while True:
            answer = _heartbeat(k, group, member, epoch, topic)
            assert answer.error_code == 0, answer
            epoch = answer.member_epoch
            if answer.assignment is not None and answer.assignment.topic_partitions:
                break
            assert time.monotonic() < deadline, f"{talk.address}: no assignment"
            time.sleep(0.1)
        talk.recording = True
        # One group a request: Kafka answers a request's groups in the order of
        # their coordinators' partitions, which the run's names decide.
        for name in (missing, classic, group):
            for version in (5, 6):
                answer = k.ask(
                    15, describe_groups.DescribeGroupsRequest(groups=[name]), version=version
                )
                talk.note("with a message", answer.groups[0].error_message is not None)
        talk.recording = False
        for name in (missing, classic, group):
            for version in (0, 1):
                answer = k.ask(
                    69,
                    group_describe.ConsumerGroupDescribeRequest(group_ids=[name]),
                    version=version,
                )
                talk.note(
                    f"ConsumerGroupDescribe v{version}",
                    [
                        {
                            "group_id": g.group_id,
                            "error_code": g.error_code,
                            "group_state": g.group_state,
                            "member_types": [m.member_type for m in g.members],
                        }
                        for g in answer.groups
                    ],
                )
        talk.recording = True

    check(kafka4, peer, script)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "transaction version 2 (KIP-890 part 2)")
def test_transaction_version_2(kafka4: Any, peer: Any) -> None:
    """KIP-890 part 2 on one node: ``transaction.version`` finalized at 2 (supported
    0-2); a transactional Produce v12 and a TxnOffsetCommit v5 without
    AddPartitionsToTxn/AddOffsetsToTxn are taken (their partition and group
    join the transaction); EndTxn v5 answers the bumped epoch, and the partition
    learns it from the marker (DescribeProducers); a retry of that EndTxn (the
    epoch before) gets the same answer, the bumped epoch is PRODUCER_FENCED; a
    late Produce of the old epoch is INVALID_PRODUCER_EPOCH; the next
    transaction, at the bumped epoch from sequence 0, aborts with the next bump;
    only the committed offset and records count; with nothing ongoing, a commit
    is INVALID_TXN_STATE and an abort bumps the epoch again."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, tid, group = talk.name("topic"), talk.name("txn"), talk.name("group")
        k.create(topic, 1, **KEEP)
        talk.recording = False
        hello = api_versions.ApiVersionsRequest(
            client_software_name="trafka-differential", client_software_version="1"
        )
        answer = talk.ask(18, 4, hello)
        talk.note(
            "transaction.version",
            {
                "supported": [
                    (f.min_version, f.max_version)
                    for f in answer.supported_features
                    if f.name == "transaction.version"
                ],
                "finalized": [
                    f.max_version_level
                    for f in answer.finalized_features
                    if f.name == "transaction.version"
                ],
            },
        )
        # Before v4, no feature supported from level 0 is listed (KAFKA-17011).
        older = talk.ask(18, 3, hello)
        talk.note(
            "ApiVersions v3: features supported from 0",
            sorted(f.name for f in older.supported_features if f.min_version == 0),
        )
        talk.recording = True
        init = k.init_pid(tid)
        pid, epoch = init.producer_id, init.producer_epoch

        def end(at: int, commit: bool = True) -> Any:
            body = end_txn.EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=at, committed=commit
            )
            return k.ask(26, body, version=5)

        def producer_epoch() -> None:
            talk.recording = False
            req = describe_producers.DescribeProducersRequest
            answer = talk.ask(
                61, 0, req(topics=[req.TopicRequest(name=topic, partition_indexes=[0])])
            )
            found = answer.topics[0].partitions[0].active_producers
            talk.note("producer epoch on the partition", [p.producer_epoch for p in found])
            talk.recording = True

        k.produce(
            topic, records([b"a"], pid=pid, epoch=epoch, seq=0, txn=True), tid=tid, version=12
        )
        k.ask(28, _offset_commit(tid, group, pid, epoch, topic), version=5)
        end(epoch)
        k.settle(topic)
        producer_epoch()
        end(epoch)
        end(epoch + 1)
        k.produce(
            topic, records([b"late"], pid=pid, epoch=epoch, seq=1, txn=True), tid=tid, version=12
        )
        k.produce(
            topic, records([b"b"], pid=pid, epoch=epoch + 1, seq=0, txn=True), tid=tid, version=12
        )
        end(epoch + 1, commit=False)
        k.settle(topic)
        producer_epoch()
        k.list_offsets(topic, -1, isolation=1)
        k.list_offsets(topic, -1)
        k.offsets(group, topic)
        # Nothing ongoing: a commit is INVALID_TXN_STATE, an abort bumps the epoch.
        end(epoch + 2)
        end(epoch + 2, commit=False)

    check(kafka4, peer, script)


def _offset_commit(tid: str, group: str, pid: int, epoch: int, topic: str) -> Any:
    """A TxnOffsetCommit of offset 1 on ``topic``'s partition 0, outside any generation."""
    t = txn_offset_commit.TxnOffsetCommitRequest
    return t(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            t.TxnOffsetCommitRequestTopic(
                name=topic,
                partitions=[
                    t.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=1)
                ],
            )
        ],
    )


# The timed-out transactions' timeout: long enough that the steps before the
# wait (AddPartitionsToTxn ... TxnOffsetCommit) end first on a loaded machine.
TIMEOUT_MS = 5000
# The records carry a fixed old timestamp (differential_requests.TS). Kafka's first
# retention check runs 30 s after its start (log.initial.task.delay.ms), whatever
# log.retention.check.interval.ms says, and deleted such records of a test that
# ran then: its fetches met OFFSET_OUT_OF_RANGE. These topics keep them.
KEEP = {"retention.ms": "-1"}


def _fenced(talk: Talk, *, timeout_ms: int | None, tv2: bool = True) -> None:
    """A transaction version 2 producer (Produce v12, TxnOffsetCommit v5, EndTxn
    v5; with ``tv2`` False one of version 1: AddPartitionsToTxn v3,
    AddOffsetsToTxn, Produce v9, TxnOffsetCommit v3, EndTxn v4) whose
    transaction is ended behind its back: fenced by an admin (InitProducerId
    with the transactional id only, KIP-664's fenceProducers) when
    ``timeout_ms`` is None, else timed out. Then the old producer's EndTxn
    commit and abort, Produce and TxnOffsetCommit at its old epoch; the abort
    markers' epoch; what DescribeTransactions and DescribeProducers say; the
    next InitProducerId (the fencer's retry, or the timed-out producer's own
    KIP-360 bump with its id and epoch) and the old epoch after it."""
    k = Kafka(talk)
    topic, tid, group = talk.name("topic"), talk.name("txn"), talk.name("group")
    k.create(topic, 1, **KEEP)
    req = init_pid_msg.InitProducerIdRequest
    first = req(
        transactional_id=tid,
        transaction_timeout_ms=60000 if timeout_ms is None else timeout_ms,
        producer_id=-1,
        producer_epoch=-1,
    )
    init = k.ask(22, first, version=5)
    pid, epoch = init.producer_id, init.producer_epoch

    def end(at: int, commit: bool) -> None:
        body = end_txn.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=at, committed=commit
        )
        v = 5 if tv2 else 4
        talk.ask(26, v, body, step=f"EndTxn v{v} {'commit' if commit else 'abort'} at {at}")

    def offset_commit(at: int) -> None:
        body = _offset_commit(tid, group, pid, at, topic)
        v = 5 if tv2 else 3
        talk.ask(28, v, body, step=f"TxnOffsetCommit v{v} at {at}")

    def described(label: str) -> None:
        """The coordinator's and the partition's view, without clocks."""
        talk.recording = False
        d = describe_transactions.DescribeTransactionsRequest(transactional_ids=[tid])
        (state,) = talk.ask(65, 0, d).transaction_states
        p = describe_producers.DescribeProducersRequest
        body = p(topics=[p.TopicRequest(name=topic, partition_indexes=[0])])
        found = talk.ask(61, 0, body).topics[0].partitions[0].active_producers
        talk.recording = True
        talk.note(
            f"DescribeTransactions {label}",
            {
                "error_code": state.error_code,
                "state": state.transaction_state,
                "producer_id": state.producer_id,
                "producer_epoch": state.producer_epoch,
                "topics": [(t.topic == topic, t.partitions) for t in state.topics],
            },
        )
        talk.note(
            f"DescribeProducers {label}",
            [
                {
                    "producer_id": s.producer_id,
                    "producer_epoch": s.producer_epoch,
                    "last_sequence": s.last_sequence,
                    "current_txn_start_offset": s.current_txn_start_offset,
                }
                for s in found
            ],
        )

    def ended() -> None:
        """Wait (unrecorded) until the coordinator completed the abort."""
        talk.recording = False
        deadline = time.monotonic() + 90
        try:
            while True:
                d = describe_transactions.DescribeTransactionsRequest(transactional_ids=[tid])
                (state,) = talk.ask(65, 0, d).transaction_states
                if state.transaction_state == "CompleteAbort":
                    break
                assert time.monotonic() < deadline, f"{tid}: {state.transaction_state}"
                time.sleep(0.2)
        finally:
            talk.recording = True
        k.settle(topic)

    def markers() -> None:
        """The partition's batches as (control, producer epoch), fetched
        (unrecorded) from the offset after the last one seen until the abort
        marker came: Kafka hands a marker out on a later fetch only
        (docs/brokerlite.md)."""
        talk.recording = False
        deadline = time.monotonic() + 30
        seen: list[tuple[bool, int]] = []
        offset = 0
        try:
            while not any(control for control, _ in seen) and time.monotonic() < deadline:
                blob = k.fetch(topic, offset).responses[0].partitions[0].records or b""
                for h, _ in iter_batches(blob):
                    seen.append((bool(h.attributes & 0x20), h.producer_epoch))
                    offset = h.base_offset + h.last_offset_delta + 1
                time.sleep(0.1)
        finally:
            talk.recording = True
        talk.note("batches (control, producer epoch)", seen)

    produce_version = 12 if tv2 else None
    if not tv2:
        k.add_partitions(tid, pid, epoch, topic)
        body = add_offsets.AddOffsetsToTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, group_id=group
        )
        k.ask(25, body, version=3)
    batch = records([b"a"], pid=pid, epoch=epoch, seq=0, txn=True)
    k.produce(topic, batch, tid=tid, version=produce_version)
    offset_commit(epoch)
    if timeout_ms is None:
        fence = req(transactional_id=tid, transaction_timeout_ms=60000)
        talk.ask(22, 5, fence, step="InitProducerId (fence)")
    ended()
    markers()
    described("after the abort")
    end(epoch, commit=True)
    end(epoch, commit=False)
    late = records([b"late"], pid=pid, epoch=epoch, seq=1, txn=True)
    k.produce(topic, late, tid=tid, version=produce_version)
    offset_commit(epoch)
    described("after the old producer's calls")
    if timeout_ms is None:
        again = req(transactional_id=tid, transaction_timeout_ms=60000)
        talk.ask(22, 5, again, step="InitProducerId (the fencer's retry)")
    else:
        own = req(
            transactional_id=tid,
            transaction_timeout_ms=60000,
            producer_id=pid,
            producer_epoch=epoch,
        )
        talk.ask(22, 5, own, step="InitProducerId (the producer's own, KIP-360)")
    end(epoch, commit=True)
    end(epoch + 1, commit=True)
    described("after InitProducerId")
    k.offsets(group, topic)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "transaction version 2: a fenced producer (KIP-890, KIP-664)")
def test_transaction_version_2_fenced_by_an_admin(kafka4: Any, peer: Any) -> None:
    """An admin fences a TV2 transaction (records and an offset commit in it):
    the fencing InitProducerId is CONCURRENT_TRANSACTIONS while the abort runs;
    the old producer's EndTxn, Produce and TxnOffsetCommit at its old epoch,
    the abort markers' epoch and the coordinator's and partition's views are
    Kafka 4.4's, before and after the fencer's retried InitProducerId."""
    check(kafka4, peer, lambda talk: _fenced(talk, timeout_ms=None))


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "transaction version 2: a timed-out transaction (KIP-890)")
def test_transaction_version_2_timed_out(kafka4: Any, peer: Any) -> None:
    """The same for a TV2 transaction that times out (1 s; Kafka checks every
    ``transaction.abort.timed.out.transaction.cleanup.interval.ms``, 1 s on the
    tests' nodes, 10 s by default): the
    old producer's calls, the markers, the views, and the producer's own
    InitProducerId with its id and old epoch (KIP-360), as Kafka 4.4."""
    check(kafka4, peer, lambda talk: _fenced(talk, timeout_ms=TIMEOUT_MS))


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "transaction version 1 fenced where version 2 is finalized")
@pytest.mark.parametrize("how", ["fenced", "timed out"])
def test_transaction_version_1_fenced_where_2_is_finalized(
    kafka4: Any, peer: Any, how: str
) -> None:
    """A transaction of version 1 (AddPartitionsToTxn, EndTxn v4) fenced by an
    admin or timed out on a node where ``transaction.version`` 2 is finalized:
    Kafka 4.4 ends it by the finalized level (a TV2 abort that keeps the epoch
    before), so the producer's KIP-360 InitProducerId with its old epoch is a
    retry of that bump; its EndTxn v4 at the old epoch is PRODUCER_FENCED."""
    timeout_ms = None if how == "fenced" else TIMEOUT_MS
    check(kafka4, peer, lambda talk: _fenced(talk, timeout_ms=timeout_ms, tv2=False))
