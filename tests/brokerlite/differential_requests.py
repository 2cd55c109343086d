"""Requests for the differential conversations (:mod:`differential`): one method
per request, at versions brokerlite, Kafka 3.9 and Kafka 4.x all serve, each
returning the raw answer (None when the broker closed the connection).

Records are written with fixed timestamps (``TS`` onwards), never the clock, so
the answers can be compared.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from differential import Talk, assert_same

from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k08_offset_commit as commit
from trafka.codec.messages import k09_offset_fetch as offset_fetch
from trafka.codec.messages import k10_find_coordinator as find_coordinator
from trafka.codec.messages import k11_join_group as join
from trafka.codec.messages import k12_heartbeat as heartbeat
from trafka.codec.messages import k13_leave_group as leave
from trafka.codec.messages import k14_sync_group as sync
from trafka.codec.messages import k19_create_topics as create
from trafka.codec.messages import k21_delete_records as delete_records
from trafka.codec.messages import k22_init_producer_id as init_pid
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions
from trafka.codec.messages import k26_end_txn as end_txn
from trafka.codec.messages import k32_describe_configs as describe_configs
from trafka.codec.messages import k33_alter_configs as alter_configs
from trafka.codec.messages import k44_incremental_alter_configs as incremental
from trafka.codec.messages import k65_describe_transactions as describe_transactions
from trafka.codec.messages import k76_share_group_heartbeat as share_heartbeat
from trafka.codec.messages import k78_share_fetch as share_fetch
from trafka.codec.messages import k79_share_acknowledge as share_ack
from trafka.codec.records import encode_batch

TS = 1_700_000_000_000
#: The configs of a topic whose records (stamped ``TS`` on, far older than
#: Kafka's 7-day retention.ms) must stay: Kafka runs its first retention check
#: 30 s after it starts (log.initial.task.delay.ms), whatever
#: log.retention.check.interval.ms says, and deletes them then, its active
#: segment too (brokerlite never deletes an active segment). A script reading
#: them back on a Kafka peer started just before it creates its topics so.
KEEP = {"retention.ms": "-1"}
#: the version of each API the conversations use
V = {0: 9, 1: 12, 2: 8, 3: 12, 8: 8, 9: 7, 10: 3, 11: 7, 12: 4, 13: 4, 14: 5}
V |= {19: 7, 21: 2, 22: 4, 24: 3, 26: 3, 32: 4, 33: 2, 44: 1}
TOPIC, BROKER, GROUP = 2, 4, 32


def until(talk: Talk, ask: Any, done: Any, *, timeout: float = 120.0, what: Any = "") -> Any:
    """Ask (unrecorded) until ``done(answer)``; that answer. ``what`` names the
    wait in the failure message (a callable: called then, for what it knows)."""
    talk.recording = False
    deadline = time.monotonic() + timeout
    try:
        while True:
            answer = ask()
            if done(answer):
                return answer
            if time.monotonic() >= deadline:
                label = what() if callable(what) else what
                where = f"{talk.address}: {label}: " if label else f"{talk.address}: "
                raise AssertionError(f"{where}still {answer!r}")
            time.sleep(0.1)
    finally:
        talk.recording = True


def records(
    values: list[bytes | None],
    *,
    keys: list[bytes | None] | None = None,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    txn: bool = False,
    ts: int = TS,
) -> bytes:
    """One batch of ``values``, timestamps 1 ms apart from ``ts``."""
    keys = keys or [None] * len(values)
    return encode_batch(
        [(ts + i, k, v, ()) for i, (k, v) in enumerate(zip(keys, values, strict=True))],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=txn,
    )


class Kafka:
    """A script's view of one broker: ``k.produce(...)`` and so on."""

    def __init__(self, talk: Talk, conn: str = "main") -> None:
        self.talk = talk
        #: the connection requests go on unless one is named
        self.conn = conn

    def ask(
        self, key: int, body: Any, *, conn: str | None = None, version: int | None = None
    ) -> Any:
        version = V[key] if version is None else version
        return self.talk.ask(key, version, body, conn=conn or self.conn)

    def settle(self, topic: str, partition: int = 0, *, timeout: float = 60.0) -> None:
        """Wait (unrecorded) until no transaction is open on the partition: its
        last stable offset has reached its high watermark, and both have stayed
        put over two reads (transaction markers are written after EndTxn has
        been answered). No fetch is part of the condition: Kafka's fetch from
        the transaction's first offset can leave the marker out for as long as
        one cares to wait (see docs/brokerlite.md), which made each settle on
        Kafka last its whole timeout."""
        self.talk.recording = False
        deadline = time.monotonic() + timeout
        seen: list[tuple[int, ...]] = []
        try:
            while time.monotonic() < deadline:
                ends = tuple(
                    self.list_offsets(topic, -1, partition=partition, isolation=i)
                    .topics[0]
                    .partitions[0]
                    .offset
                    for i in (0, 1)
                )
                seen.append(ends)
                if len(seen) >= 2 and seen[-1] == seen[-2] and len(set(seen[-1])) == 1:
                    return
                time.sleep(0.05)
            raise AssertionError(f"{topic}-{partition}: still open after {timeout} s: {seen[-3:]}")
        finally:
            self.talk.recording = True

    def metadata(self, *topics: str, auto: bool = False) -> Any:
        req = metadata.MetadataRequest
        body = req(
            topics=[req.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=auto,
        )
        return self.ask(3, body)

    def create(
        self,
        name: str,
        partitions: int = 1,
        rf: int = 1,
        *,
        validate_only: bool = False,
        **configs: str,
    ) -> Any:
        req = create.CreateTopicsRequest
        topic = req.CreatableTopic(
            name=name,
            num_partitions=partitions,
            replication_factor=rf,
            configs=[req.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
        )
        answer = self.ask(19, req(topics=[topic], timeout_ms=30000, validate_only=validate_only))
        if not validate_only and answer.topics and answer.topics[0].error_code == 0:
            self.served(name, partitions)
        return answer

    def served(self, topic: str, partitions: int, *, timeout: float = 60.0) -> None:
        """Wait (unrecorded) until every partition's leader serves ListOffsets:
        Kafka answers CreateTopics before its leaders have taken the partitions,
        and a request in between gets NOT_LEADER_OR_FOLLOWER from one run to
        the next but not always."""
        self.talk.recording = False
        deadline = time.monotonic() + timeout
        try:
            for partition in range(partitions):
                while time.monotonic() < deadline:
                    answer = self.list_offsets(topic, -1, partition=partition)
                    if answer.topics[0].partitions[0].error_code == 0:
                        break
                    time.sleep(0.05)
        finally:
            self.talk.recording = True

    def produce(
        self,
        topic: str,
        blob: bytes | None,
        *,
        acks: int = -1,
        partition: int = 0,
        tid: str | None = None,
        version: int | None = None,
    ) -> Any:
        req = produce.ProduceRequest
        body = req(
            transactional_id=tid,
            acks=acks,
            timeout_ms=30000,
            topic_data=[
                req.TopicProduceData(
                    name=topic,
                    partition_data=[req.PartitionProduceData(index=partition, records=blob)],
                )
            ],
        )
        if acks == 0:
            v = V[0] if version is None else version
            self.talk.send(0, v, body, conn=self.conn, expect_answer=False)
            return None
        return self.ask(0, body, version=version)

    def fetch(
        self,
        topic: str,
        offset: int = 0,
        *,
        partition: int = 0,
        isolation: int = 0,
        max_bytes: int = 1 << 20,
        partition_max_bytes: int = 1 << 20,
        session_id: int = 0,
        session_epoch: int = -1,
        forgotten: list[str] | None = None,
    ) -> Any:
        req = fetch.FetchRequest
        topics = [
            req.FetchTopic(
                topic=topic,
                partitions=[
                    req.FetchPartition(
                        partition=partition,
                        fetch_offset=offset,
                        partition_max_bytes=partition_max_bytes,
                    )
                ],
            )
        ]
        body = req(
            max_wait_ms=0,
            min_bytes=0,
            max_bytes=max_bytes,
            isolation_level=isolation,
            session_id=session_id,
            session_epoch=session_epoch,
            topics=topics if forgotten is None else [],
            forgotten_topics_data=[
                req.ForgottenTopic(topic=t, partitions=[partition]) for t in forgotten or []
            ],
        )
        return self.ask(1, body)

    def list_offsets(
        self, topic: str, timestamp: int, *, partition: int = 0, isolation: int = 0
    ) -> Any:
        req = list_offsets.ListOffsetsRequest
        part = req.ListOffsetsPartition(partition_index=partition, timestamp=timestamp)
        body = req(
            replica_id=-1,
            isolation_level=isolation,
            topics=[req.ListOffsetsTopic(name=topic, partitions=[part])],
        )
        return self.ask(2, body)

    def commit(
        self,
        group: str,
        topic: str,
        offset: int,
        *,
        generation: int = -1,
        member: str = "",
        partition: int = 0,
    ) -> Any:
        req = commit.OffsetCommitRequest
        part = req.OffsetCommitRequestPartition(
            partition_index=partition, committed_offset=offset, committed_metadata="m"
        )
        body = req(
            group_id=group,
            generation_id_or_member_epoch=generation,
            member_id=member,
            topics=[req.OffsetCommitRequestTopic(name=topic, partitions=[part])],
        )
        return self.ask(8, body)

    def offsets(self, group: str, topic: str, *, partition: int = 0) -> Any:
        req = offset_fetch.OffsetFetchRequest
        topics = [req.OffsetFetchRequestTopic(name=topic, partition_indexes=[partition])]
        return self.ask(9, req(group_id=group, topics=topics))

    def coordinator(self, key: str, key_type: int = 0) -> Any:
        req = find_coordinator.FindCoordinatorRequest
        return self.ask(10, req(key=key, key_type=key_type))

    def join_body(self, group: str, member: str = "", *, session_ms: int = 30000) -> Any:
        req = join.JoinGroupRequest
        return req(
            group_id=group,
            session_timeout_ms=session_ms,
            rebalance_timeout_ms=60000,
            member_id=member,
            protocol_type="consumer",
            protocols=[req.JoinGroupRequestProtocol(name="range", metadata=b"\x00\x01")],
        )

    def join(self, group: str, member: str = "", *, conn: str | None = None) -> Any:
        return self.ask(11, self.join_body(group, member), conn=conn)

    def sync(
        self,
        group: str,
        generation: int,
        member: str,
        *,
        leader: bool = True,
        conn: str | None = None,
    ) -> Any:
        req = sync.SyncGroupRequest
        assignments = [req.SyncGroupRequestAssignment(member_id=member, assignment=b"a")]
        body = req(
            group_id=group,
            generation_id=generation,
            member_id=member,
            protocol_type="consumer",
            protocol_name="range",
            assignments=assignments if leader else [],
        )
        return self.ask(14, body, conn=conn)

    def heartbeat(self, group: str, generation: int, member: str) -> Any:
        req = heartbeat.HeartbeatRequest
        return self.ask(12, req(group_id=group, generation_id=generation, member_id=member))

    def leave(self, group: str, *members: str) -> Any:
        req = leave.LeaveGroupRequest
        return self.ask(
            13, req(group_id=group, members=[req.MemberIdentity(member_id=m) for m in members])
        )

    def completed(self, tid: str, *, timeout: float = 60.0) -> None:
        """Wait (unrecorded) until the coordinator has completed ``tid``'s last
        transaction (DescribeTransactions, KIP-664): its markers written is not
        enough, since the coordinator moves to CompleteCommit or CompleteAbort
        after them, and until then an InitProducerId is CONCURRENT_TRANSACTIONS
        (a client retries it; a script must not meet it on one broker only)."""
        self.talk.recording = False
        deadline = time.monotonic() + timeout
        try:
            while True:
                ask = describe_transactions.DescribeTransactionsRequest(transactional_ids=[tid])
                (state,) = self.talk.ask(65, 0, ask).transaction_states
                if state.transaction_state in ("CompleteCommit", "CompleteAbort", "Empty"):
                    return
                assert time.monotonic() < deadline, f"{tid}: {state.transaction_state}"
                time.sleep(0.05)
        finally:
            self.talk.recording = True

    def init_pid(self, tid: str | None, *, pid: int = -1, epoch: int = -1) -> Any:
        req = init_pid.InitProducerIdRequest
        body = req(
            transactional_id=tid,
            transaction_timeout_ms=60000,
            producer_id=pid,
            producer_epoch=epoch,
        )
        return self.ask(22, body)

    def add_partitions(self, tid: str, pid: int, epoch: int, topic: str, partition: int = 0) -> Any:
        req = add_partitions.AddPartitionsToTxnRequest
        body = req(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[req.AddPartitionsToTxnTopic(name=topic, partitions=[partition])],
        )
        return self.ask(24, body)

    def end_txn(self, tid: str, pid: int, epoch: int, *, commit: bool = True) -> Any:
        req = end_txn.EndTxnRequest
        body = req(transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit)
        return self.ask(26, body)

    def delete_records(self, topic: str, offset: int, *, partition: int = 0) -> Any:
        req = delete_records.DeleteRecordsRequest
        part = req.DeleteRecordsPartition(partition_index=partition, offset=offset)
        body = req(topics=[req.DeleteRecordsTopic(name=topic, partitions=[part])], timeout_ms=30000)
        return self.ask(21, body)

    def describe_configs(self, name: str, *keys: str, kind: int = TOPIC) -> Any:
        req = describe_configs.DescribeConfigsRequest
        resource = req.DescribeConfigsResource(
            resource_type=kind, resource_name=name, configuration_keys=list(keys)
        )
        return self.ask(32, req(resources=[resource]))

    def alter_configs(self, topic: str, *, validate_only: bool = False, **configs: str) -> Any:
        req = alter_configs.AlterConfigsRequest
        resource = req.AlterConfigsResource(
            resource_type=TOPIC,
            resource_name=topic,
            configs=[req.AlterableConfig(name=k, value=v) for k, v in configs.items()],
        )
        return self.ask(33, req(resources=[resource], validate_only=validate_only))

    def incremental(self, topic: str, op: int, name: str, value: str | None) -> Any:
        req = incremental.IncrementalAlterConfigsRequest
        resource = req.AlterConfigsResource(
            resource_type=TOPIC,
            resource_name=topic,
            configs=[req.AlterableConfig(name=name, config_operation=op, value=value)],
        )
        return self.ask(44, req(resources=[resource]))


_warm: set[str] = set()
#: COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
_LOADING = (14, 15, 16)


def warm(bootstrap: str, *, timeout: float = 120.0) -> None:
    """Once per broker: wait until its group and transaction coordinators serve
    (Kafka creates ``__consumer_offsets`` and ``__transaction_state`` on their
    first use and answers "loading" meanwhile), so that a conversation's answers
    do not depend on whether it is the broker's first."""
    if bootstrap in _warm:
        return
    talk = Talk(bootstrap)
    k = Kafka(talk)
    deadline = time.monotonic() + timeout
    try:
        for ask in (
            lambda: k.coordinator("warm-group", 0),
            lambda: k.coordinator("warm-txn", 1),
            lambda: k.init_pid(None),
            lambda: k.init_pid("warm-txn"),
            lambda: k.offsets("warm-group", "warm-topic"),
        ):
            while ask().error_code in _LOADING:
                assert time.monotonic() < deadline, f"{bootstrap}: coordinators not ready"
                time.sleep(0.2)
    finally:
        talk.close()
    _warm.add(bootstrap)


def check(reference: Any, peer: Any, script: Callable[[Talk], None]) -> None:
    """Run ``script`` on the reference (a KafkaCluster) and on ``peer`` (a
    kafka_fixtures.Peer) and compare the answers (:func:`differential.assert_same`)."""
    warm(reference.bootstrap_servers)
    warm(peer.bootstrap_servers)
    assert_same(reference.bootstrap_servers, peer.bootstrap_servers, script)


class ShareKafka(Kafka):
    """Share-group requests (KIP-932), at the versions brokerlite and Kafka 4.x serve."""

    def group_config(self, group: str, name: str, value: str) -> Any:
        req = incremental.IncrementalAlterConfigsRequest
        resource = req.AlterConfigsResource(
            resource_type=GROUP,
            resource_name=group,
            configs=[req.AlterableConfig(name=name, config_operation=0, value=value)],
        )
        return self.ask(44, req(resources=[resource]))

    def group_configs_landed(self, group: str, *names: str) -> None:
        """Wait (unrecorded) until DescribeConfigs shows each of ``names`` set on
        ``group`` (source 8, GROUP_CONFIG). Kafka 4.x answers
        IncrementalAlterConfigs once its controller committed the change; its
        broker takes it from the metadata log a moment later (Kafka 4.4's
        ``BrokerMetadataPublisher``: the metadata cache DescribeConfigs reads,
        then, in the same pass, the group config manager). Its share-partition
        leader reads ``share.auto.offset.reset`` from that manager once, when a
        member's first ShareFetch initialises the share-partition
        (``SharePartition.startOffsetDuringInitialization``): one initialised
        before the change landed starts at the log end for good, and never
        sees the records before it. The other ``share.*`` configs are read
        when used (a late one changes that answer). A brokerlite node applies
        a change before it answers."""
        wanted = set(names)

        def described() -> Any:
            return self.describe_configs(group, *names, kind=GROUP)

        def landed(answer: Any) -> bool:
            configs = answer.results[0].configs if answer and answer.results else []
            return wanted <= {c.name for c in configs if c.config_source == 8}

        until(self.talk, described, landed, what=f"group {group}'s {', '.join(names)} not set")

    def share_heartbeat(self, group: str, member: str, epoch: int, *topics: str) -> Any:
        req = share_heartbeat.ShareGroupHeartbeatRequest
        body = req(
            group_id=group,
            member_id=member,
            member_epoch=epoch,
            subscribed_topic_names=list(topics) if topics else None,
        )
        return self.ask(76, body, version=1)

    def share_fetch(
        self,
        group: str,
        member: str,
        session_epoch: int,
        topic_id: Any,
        acks: list[tuple[int, int, int]] = (),  # type: ignore[assignment]
        *,
        version: int = 1,
        max_records: int = 100,
        acquire_mode: int = 0,
        renew: bool = False,
        wait: tuple[int, int, int] = (0, 1, 1 << 20),
    ) -> Any:
        """One partition's fetch (and acknowledgements); v2 adds ``acquire_mode``
        (KIP-1206) and ``renew`` (KIP-1222); ``wait`` is (MaxWaitMs, MinBytes, MaxBytes)."""
        req = share_fetch.ShareFetchRequest
        part = req.FetchPartition(
            partition_index=0,
            acknowledgement_batches=[
                req.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=[t])
                for a, b, t in acks
            ],
        )
        body = req(
            group_id=group,
            member_id=member,
            share_session_epoch=session_epoch,
            max_wait_ms=wait[0],
            min_bytes=wait[1],
            max_bytes=wait[2],
            max_records=max_records,
            batch_size=max_records,
            share_acquire_mode=acquire_mode,
            is_renew_ack=renew,
            topics=[req.FetchTopic(topic_id=topic_id, partitions=[part])],
        )
        return self.ask(78, body, version=version)

    def share_ack(
        self,
        group: str,
        member: str,
        session_epoch: int,
        topic_id: Any,
        first: int,
        last: int,
        kind: int,
        *more: tuple[int, int, int],
        version: int = 1,
        renew: bool = False,
    ) -> Any:
        """One range of one type (and ``more`` ranges after it)."""
        req = share_ack.ShareAcknowledgeRequest
        batches = [
            req.AcknowledgementBatch(first_offset=a, last_offset=b, acknowledge_types=[t])
            for a, b, t in [(first, last, kind), *more]
        ]
        body = req(
            group_id=group,
            member_id=member,
            share_session_epoch=session_epoch,
            is_renew_ack=renew,
            topics=[
                req.AcknowledgeTopic(
                    topic_id=topic_id,
                    partitions=[
                        req.AcknowledgePartition(partition_index=0, acknowledgement_batches=batches)
                    ],
                )
            ],
        )
        return self.ask(79, body, version=version)
