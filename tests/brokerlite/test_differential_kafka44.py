"""Differential conversations on the request versions Kafka 4.2, 4.3 and 4.4
added (issue #84 item 3): Kafka 4.4 is the reference; brokerlite must answer
the same (:mod:`differential`). docs/compatibility.md ("Kafka 4.2 to 4.4's
protocol changes") has the table these cover.

* ApiVersions v5 (KIP-1242, Kafka 4.4): the client names the cluster id and
  node id it means to reach; a broker of another cluster, or another node,
  answers REBOOTSTRAP_REQUIRED; either left out (null, -1) is not checked.
* ListOffsets v11 (KIP-1023, Kafka 4.2): ``-6``, the earliest offset not yet
  uploaded to tiered storage; a broker without tiered storage answers none.
* DeleteGroups v3 (Kafka 4.4): a per-group error message.
* DescribeLogDirs v5 (KIP-1066, Kafka 4.3): whether each log dir is cordoned.
* The versions ApiVersions advertises: brokerlite's highest of each API Kafka
  4.4 serves is Kafka's (never above it).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

import pytest
from differential import Talk, plain
from differential_requests import Kafka, check, records, until

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.messages import k08_offset_commit as commit
from trafka.codec.messages import k09_offset_fetch as offset_fetch
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k26_end_txn as end_txn
from trafka.codec.messages import k27_write_txn_markers as write_markers
from trafka.codec.messages import k28_txn_offset_commit as txn_offset_commit
from trafka.codec.messages import k35_describe_log_dirs as describe_log_dirs
from trafka.codec.messages import k42_delete_groups as delete_groups
from trafka.codec.messages import k44_incremental_alter_configs as incremental
from trafka.codec.messages import k45_alter_partition_reassignments as reassign
from trafka.codec.messages import k61_describe_producers as describe_producers
from trafka.codec.messages import k66_list_transactions as list_transactions
from trafka.codec.messages import k68_consumer_group_heartbeat as heartbeat
from trafka.codec.messages import k74_list_config_resources as list_config_resources

KEEP = {"retention.ms": "-1"}

#: APIs whose highest version brokerlite keeps below Kafka 4.4's, each with
#: the reason (docs/compatibility.md, "Kafka 4.2 to 4.4's protocol changes");
#: none now.
BELOW_KAFKA: dict[int, str] = {}


def _hello(cluster_id: str | None = None, node_id: int = -1) -> Any:
    return api_versions.ApiVersionsRequest(
        client_software_name="trafka-differential",
        client_software_version="1",
        cluster_id=cluster_id,
        node_id=node_id,
    )


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "ApiVersions v5: cluster and node checked (KIP-1242)")
def test_api_versions_v5(kafka4: Any, peer: Any) -> None:
    """KIP-1242: ApiVersions v5 carries the cluster id and node id the client
    believes it is connecting to. The broker's own ids, or none of them (null,
    -1), are answered as v4 is; another cluster's id, or another node's id
    (with the right cluster or without one), REBOOTSTRAP_REQUIRED, with no
    API list; the connection stays open and v4 still answers on it."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        talk.recording = False
        meta = k.metadata()
        cluster, node = meta.cluster_id, meta.brokers[0].node_id
        talk.recording = True
        other = str(uuid.UUID(int=1))
        for step, cid, nid in (
            ("none", None, -1),
            ("right", cluster, node),
            ("right cluster, no node", cluster, -1),
            ("no cluster, right node", None, node),
            ("other cluster", other, node),
            ("other node", cluster, node + 1),
            ("no cluster, other node", None, node + 1),
            ("other cluster, no node", other, -1),
        ):
            answer = talk.ask(18, 5, _hello(cid, nid), step=step)
            talk.note(
                f"{step}: answered",
                None if answer is None else (answer.error_code, bool(answer.api_keys)),
            )
        talk.recording = False
        answer = talk.ask(18, 4, _hello())
        talk.note("v4 after", (answer.error_code, bool(answer.api_keys)))

    check(kafka4, peer, _summarised(script))


def _summarised(script: Any) -> Any:
    """The script with ApiVersions' lists left out of its transcript (each
    broker lists its own versions; :func:`test_advertised_versions` compares
    them), its notes kept."""

    def run(talk: Talk) -> None:
        script(talk)
        talk.transcript[:] = [
            (step, answer)
            for step, answer in talk.transcript
            if not (isinstance(answer, dict) and "api_keys" in answer)
        ]

    return run


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "ApiVersions: Kafka 4.4's highest versions")
def test_advertised_versions(kafka4: Any, peer: Any) -> None:
    """ApiVersions v5 (KIP-511's list) on both: for every API both serve,
    brokerlite's highest version is Kafka 4.4's, except those of
    :data:`BELOW_KAFKA` (not above Kafka's), each written down in
    docs/compatibility.md. (The APIs only one of them serves are listed there
    too: KRaft's and streams groups' on Kafka, telemetry's on brokerlite.)"""
    highest = {}
    for name, bootstrap in (
        ("kafka", kafka4.bootstrap_servers),
        ("brokerlite", peer.bootstrap_servers),
    ):
        talk = Talk(bootstrap)
        try:
            answer = talk.ask(18, 5, _hello())
        finally:
            talk.close()
        assert answer.error_code == 0, (name, answer)
        highest[name] = {a.api_key: a.max_version for a in answer.api_keys}
    kafka, ours = highest["kafka"], highest["brokerlite"]
    differ = {
        ApiKey(key).name: (kafka[key], ours[key])
        for key in kafka.keys() & ours.keys()
        if kafka[key] != ours[key] and key not in BELOW_KAFKA
    }
    assert not differ, f"(Kafka 4.4, brokerlite) highest versions differ: {differ}"
    above = {ApiKey(k).name: (kafka[k], ours[k]) for k in BELOW_KAFKA if ours.get(k, -1) > kafka[k]}
    assert not above, above


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "ListOffsets v11 (KIP-1023)")
def test_list_offsets_v11(kafka4: Any, peer: Any) -> None:
    """KIP-1023: ListOffsets v11 takes ``-6``, the earliest offset still to be
    uploaded to tiered storage; the topic has no tiered storage, so no offset
    is found; the older targets answer as in v10."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1, **KEEP)
        k.produce(topic, records([b"a", b"b", b"c"]))
        req = list_offsets.ListOffsetsRequest
        for version in (10, 11):
            for target in (-1, -2, -3, -4, -5, -6, 0):
                part = req.ListOffsetsPartition(partition_index=0, timestamp=target)
                body = req(
                    replica_id=-1,
                    isolation_level=0,
                    topics=[req.ListOffsetsTopic(name=topic, partitions=[part])],
                )
                talk.ask(2, version, body, step=f"v{version} {target}")
        # Each special target before the version that brought it in.
        for target, version in ((-3, 6), (-4, 7), (-5, 8), (-6, 10)):
            part = req.ListOffsetsPartition(partition_index=0, timestamp=target)
            body = req(
                replica_id=-1,
                isolation_level=0,
                topics=[req.ListOffsetsTopic(name=topic, partitions=[part])],
            )
            talk.ask(2, version, body, step=f"v{version} {target}")

    check(kafka4, peer, script)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "DeleteGroups v3, DescribeLogDirs v5")
def test_delete_groups_v3_and_describe_log_dirs_v5(kafka4: Any, peer: Any) -> None:
    """DeleteGroups v3 adds a message to each group's result (its text is the
    broker's: only whether there is one is compared): a group that does not
    exist, one with offsets, one with a member. DescribeLogDirs v5 (KIP-1066)
    tells whether each log dir is cordoned: none is on a broker not told to."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        empty, busy, missing = talk.name("empty"), talk.name("busy"), talk.name("missing")
        k.create(topic, 1, **KEEP)
        k.commit(empty, topic, 1)
        k.coordinator(busy)
        first = k.join(busy)
        joined = k.join(busy, first.member_id)
        k.sync(busy, joined.generation_id, joined.member_id)
        # One group a request: Kafka answers a request's groups in the order of
        # their coordinators' partitions, which the run's names decide.
        for version in (2, 3):
            for group in (missing, busy):
                answer = k.ask(
                    42, delete_groups.DeleteGroupsRequest(groups_names=[group]), version=version
                )
                talk.note(f"v{version} message", answer.results[0].error_message is not None)
        k.ask(42, delete_groups.DeleteGroupsRequest(groups_names=[empty]), version=3)
        talk.recording = False
        req = describe_log_dirs.DescribeLogDirsRequest
        body = req(topics=[req.DescribableLogDirTopic(topic=topic, partitions=[0])])
        for version in (4, 5):
            answer = talk.ask(35, version, body)
            talk.note(
                f"DescribeLogDirs v{version}",
                [
                    {
                        "error_code": d.error_code,
                        "is_cordoned": d.is_cordoned,
                        "topics": [t.name for t in d.topics],
                    }
                    for d in answer.results
                ],
            )

    check(kafka4, peer, script)


def _topic_id(k: Kafka, topic: str) -> uuid.UUID:
    """``topic``'s id, from an unrecorded Metadata request."""
    k.talk.recording = False
    try:
        return k.metadata(topic).topics[0].topic_id
    finally:
        k.talk.recording = True


def _by_ids(k: Kafka, key: int, version: int, body: Any, names: dict[uuid.UUID, str]) -> Any:
    """Ask; record the answer with each topic id replaced by its topic's name
    (``names``; another id: ``unknown``), so that topics are compared by
    name, not by order nor as the ``<uuid>`` every id becomes."""

    def named(value: Any) -> Any:
        if isinstance(value, dict):
            if isinstance(value.get("topic_id"), uuid.UUID):
                value = value | {
                    "name": names.get(value["topic_id"], "unknown"),
                    "topic_id": "<id>",
                }
            return {key: named(v) for key, v in value.items()}
        if isinstance(value, list):
            return [named(v) for v in value]
        return value

    k.talk.recording = False
    try:
        answer = k.ask(key, body, version=version)
    finally:
        k.talk.recording = True
    k.talk.note(f"{key}v{version}", named(plain(answer)))
    return answer


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "Produce v13 (KIP-516), Fetch v18 (KIP-1166)")
def test_produce_v13_and_fetch_v18(kafka4: Any, peer: Any) -> None:
    """Produce v13 names topics by id (KIP-516): records of two topics by
    their ids are appended; an id no topic has is UNKNOWN_TOPIC_ID, the other
    topic's records of the same request still appended. Fetch v18 (KIP-1166
    adds a follower's high watermark, which a consumer leaves out) answers a
    consumer as v17 does."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, other = talk.name("topic"), talk.name("other")
        k.create(topic, 1, **KEEP)
        k.create(other, 1, **KEEP)
        ids = [_topic_id(k, topic), _topic_id(k, other)]
        missing = uuid.uuid4()
        names = dict(zip(ids, (topic, other), strict=True))
        req = produce.ProduceRequest

        def send(targets: list[uuid.UUID], values: list[bytes]) -> None:
            body = req(
                acks=-1,
                timeout_ms=30000,
                topic_data=[
                    req.TopicProduceData(
                        topic_id=i,
                        partition_data=[req.PartitionProduceData(index=0, records=records(values))],
                    )
                    for i in targets
                ],
            )
            _by_ids(k, 0, 13, body, names)

        send(ids, [b"a", b"b"])
        send([missing, ids[0]], [b"c"])
        freq = fetch.FetchRequest
        for version in (17, 18):
            body = freq(
                max_wait_ms=0,
                min_bytes=0,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    freq.FetchTopic(
                        topic_id=i,
                        partitions=[
                            freq.FetchPartition(
                                partition=0, fetch_offset=0, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                    for i in [*ids, missing]
                ],
            )
            _by_ids(k, 1, version, body, names)

    check(kafka4, peer, script)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "ListTransactions v2 (KIP-1152), ListConfigResources v1 (KIP-1142)")
def test_list_transactions_v2_and_list_config_resources_v1(kafka4: Any, peer: Any) -> None:
    """ListTransactions v2 (KIP-1152) filters by a regular expression the
    whole transactional id must match (null or empty: all); one that does not
    compile is INVALID_REGULAR_EXPRESSION. ListConfigResources v1 (KIP-1142)
    lists the config resources of the types asked (none asked: every type):
    topics (internal ones included), the broker and its logger, client-metrics
    subscriptions, groups that have a config set (not the others); a type that
    is none of those is UNSUPPORTED_VERSION. Only this run's names are
    compared (the brokers hold other tests' too)."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        base = talk.name("txn")
        for suffix in ("a1", "a2", "b1"):
            k.coordinator(f"{base}-{suffix}", 1)
            k.init_pid(f"{base}-{suffix}")
        talk.recording = False
        patterns = (None, "", f"{base}-a.*", "a1", ".*-a1", f"^{base}-b1$", "[", "A.*")
        for i, pattern in enumerate(patterns):
            answer = talk.ask(
                66, 2, list_transactions.ListTransactionsRequest(transactional_id_pattern=pattern)
            )
            talk.note(
                f"ListTransactions v2, pattern {i}",
                {
                    "error_code": answer.error_code,
                    "listed": sorted(
                        s.transactional_id
                        for s in answer.transaction_states
                        if s.transactional_id.startswith(base)
                    ),
                },
            )
        topic, group, plain_group = talk.name("topic"), talk.name("group"), talk.name("plain")
        metrics = talk.name("metrics")
        k.create(topic, 1, **KEEP)
        k.commit(plain_group, topic, 1)
        req = incremental.IncrementalAlterConfigsRequest
        k.ask(
            44,
            req(
                resources=[
                    req.AlterConfigsResource(
                        resource_type=kind,
                        resource_name=name,
                        configs=[req.AlterableConfig(name=key, config_operation=0, value=value)],
                    )
                    for kind, name, key, value in (
                        (32, group, "consumer.session.timeout.ms", "50000"),
                        (16, metrics, "interval.ms", "60000"),
                    )
                ]
            ),
        )
        ours = {topic, group, plain_group, metrics, "__consumer_offsets", "__transaction_state"}
        # Kafka answers IncrementalAlterConfigs once the config records are
        # committed; its broker lists them once its metadata image has them, a
        # moment later (a loaded run listed no client-metrics resource yet).
        until(
            talk,
            lambda: talk.ask(74, 1, list_config_resources.ListConfigResourcesRequest()),
            lambda answer: {r.resource_name for r in answer.config_resources} >= {group, metrics},
            timeout=30,
        )
        talk.recording = False
        for version, types in ((0, []), (1, []), (1, [2]), (1, [4, 8]), (1, [16, 32]), (1, [99])):
            body = list_config_resources.ListConfigResourcesRequest(resource_types=types)
            answer = talk.ask(74, version, body)
            listed = [(r.resource_type, r.resource_name) for r in answer.config_resources]
            talk.note(
                f"ListConfigResources v{version} {types}",
                {
                    "error_code": answer.error_code,
                    "ours": sorted(f"{t} {n}" for t, n in listed if n in ours),
                    "brokers": sorted(t for t, n in listed if n.isdigit()),
                },
            )
        talk.recording = True

    check(kafka4, peer, script)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "AlterPartitionReassignments v1 (KIP-860)")
def test_alter_partition_reassignments_v1(kafka4: Any, peer: Any) -> None:
    """KIP-860: AlterPartitionReassignments v1 may forbid a move that changes a
    partition's replication factor (``allow_replication_factor_change``
    false), and its answer says which was asked. On one node: the partition's
    own replica (no change), two replicas, the same one twice, none, and a
    cancellation, with and without the change allowed."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1, **KEEP)
        talk.recording = False
        node = k.metadata(topic).brokers[0].node_id
        talk.recording = True
        req = reassign.AlterPartitionReassignmentsRequest
        for allow in (True, False):
            for replicas in ([node], [node, node + 1], [node, node], [], None):
                body = req(
                    timeout_ms=30000,
                    allow_replication_factor_change=allow,
                    topics=[
                        req.ReassignableTopic(
                            name=topic,
                            partitions=[
                                req.ReassignablePartition(partition_index=0, replicas=replicas)
                            ],
                        )
                    ],
                )
                answer = k.ask(45, body, version=1)
                talk.note(
                    "with a message",
                    [p.error_message is not None for t in answer.responses for p in t.partitions],
                )

    check(kafka4, peer, script)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "WriteTxnMarkers v2 (KIP-1228)")
def test_write_txn_markers_v2(kafka4: Any, peer: Any) -> None:
    """KIP-1228: WriteTxnMarkers v2 tells each marker's transaction version. A
    transaction version 2 coordinator bumps the producer epoch before it
    writes the markers, so a marker of version 2 must carry an epoch above the
    one the partition has seen (INVALID_PRODUCER_EPOCH otherwise); a marker of
    version 0 or 1 (and v1's, which has none) may carry the same epoch. A
    version 2 marker sent again once it is written (same epoch, no transaction
    open on the partition) is the same marker retried and is written again
    (KAFKA-19999: a coordinator that took over a decision sends its markers
    once more). The markers are written as an admin aborting a hanging
    transaction (KIP-664) writes them, with the coordinator epoch
    DescribeProducers tells."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1, **KEEP)
        for label, version, tv, bump, times in (
            ("tv2-same", 2, 2, 0, 1),
            ("tv2-bumped", 2, 2, 1, 1),
            ("tv2-again", 2, 2, 1, 2),
            ("tv0-same", 2, 0, 0, 1),
            ("v1-same", 1, 0, 0, 1),
        ):
            tid = talk.name(label)
            k.coordinator(tid, 1)
            init = k.init_pid(tid)
            pid, epoch = init.producer_id, init.producer_epoch
            k.add_partitions(tid, pid, epoch, topic)
            k.produce(topic, records([b"x"], pid=pid, epoch=epoch, seq=0, txn=True), tid=tid)
            talk.recording = False
            req = describe_producers.DescribeProducersRequest
            found = talk.ask(
                61, 0, req(topics=[req.TopicRequest(name=topic, partition_indexes=[0])])
            )
            mine = [
                p for p in found.topics[0].partitions[0].active_producers if p.producer_id == pid
            ]
            talk.recording = True
            w = write_markers.WriteTxnMarkersRequest
            body = w(
                markers=[
                    w.WritableTxnMarker(
                        producer_id=pid,
                        producer_epoch=epoch + bump,
                        transaction_result=False,
                        topics=[w.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
                        coordinator_epoch=mine[0].coordinator_epoch,
                        transaction_version=tv,
                    )
                ]
            )
            for _ in range(times):
                k.ask(27, body, version=version)

    check(kafka4, peer, script)


def _commit_by_id(
    group: str, ids: list[uuid.UUID], offset: int, *, generation: int = -1, member: str = ""
) -> Any:
    req = commit.OffsetCommitRequest
    return req(
        group_id=group,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[
            req.OffsetCommitRequestTopic(
                topic_id=i,
                partitions=[
                    req.OffsetCommitRequestPartition(
                        partition_index=p, committed_offset=offset, committed_metadata="m"
                    )
                    for p in (0, 1)
                ],
            )
            for i in ids
        ],
    )


def _fetch_by_id(group: str, ids: list[uuid.UUID] | None) -> Any:
    req = offset_fetch.OffsetFetchRequest
    topics = None
    if ids is not None:
        topics = [req.OffsetFetchRequestTopics(topic_id=i, partition_indexes=[0, 1]) for i in ids]
    return req(
        groups=[
            req.OffsetFetchRequestGroup(
                group_id=group,
                topics=topics,
            )
        ],
        require_stable=True,
    )


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "OffsetCommit/OffsetFetch v10: topic ids (KIP-848)")
def test_offset_commit_and_fetch_v10(kafka4: Any, peer: Any) -> None:
    """OffsetCommit v10 and OffsetFetch v10 name topics by id, not by name
    (KIP-848, stable in Kafka 4.2): a standalone commit by id, read back by id
    (asked by id, and every committed topic) and by name (v9); a topic id no
    topic has is UNKNOWN_TOPIC_ID, in a commit and in a fetch; a commit by
    name (v9) is read back by id."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, other = talk.name("topic"), talk.name("other")
        group, second = talk.name("group"), talk.name("second")
        k.create(topic, 2, **KEEP)
        k.create(other, 2, **KEEP)
        ids = [_topic_id(k, topic), _topic_id(k, other)]
        names = dict(zip(ids, (topic, other), strict=True))
        missing = uuid.uuid4()
        k.coordinator(group)
        _by_ids(k, 8, 10, _commit_by_id(group, ids, 5), names)
        _by_ids(k, 8, 10, _commit_by_id(group, [missing], 6), names)
        _by_ids(k, 8, 10, _commit_by_id(group, [ids[0], missing], 7), names)
        _by_ids(k, 9, 10, _fetch_by_id(group, ids), names)
        _by_ids(k, 9, 10, _fetch_by_id(group, [missing]), names)
        _by_ids(k, 9, 10, _fetch_by_id(group, None), names)
        k.offsets(group, topic)
        k.coordinator(second)
        k.commit(second, other, 3)
        _by_ids(k, 9, 10, _fetch_by_id(second, [ids[1]]), names)
        _by_ids(k, 9, 10, _fetch_by_id(second, None), names)

    check(kafka4, peer, script)


def _txn_commit_by_id(
    tid: str,
    group: str,
    pid: int,
    epoch: int,
    ids: list[uuid.UUID],
    *,
    generation: int = -1,
    member: str = "",
) -> Any:
    t = txn_offset_commit.TxnOffsetCommitRequest
    return t(
        transactional_id=tid,
        group_id=group,
        producer_id=pid,
        producer_epoch=epoch,
        generation_id_or_member_epoch=generation,
        member_id=member,
        topics=[
            t.TxnOffsetCommitRequestTopic(
                topic_id=i,
                partitions=[
                    t.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=4)
                ],
            )
            for i in ids
        ],
    )


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "TxnOffsetCommit v6: topic ids (KIP-1319)")
def test_txn_offset_commit_v6(kafka4: Any, peer: Any) -> None:
    """KIP-1319: TxnOffsetCommit v6 names topics by id, as OffsetCommit v10.
    In a transaction of transaction version 2 (no AddOffsetsToTxn), a commit by
    id of a group that does not exist yet (generation -1, no member) is pending
    (OffsetFetch with require_stable: UNSTABLE_OFFSET_COMMIT) until EndTxn
    commits it, then read back by id; a topic id no topic has is
    UNKNOWN_TOPIC_ID; a second transaction's commit by id is aborted, and the
    first one's offset stays."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, tid, group = talk.name("topic"), talk.name("txn"), talk.name("group")
        k.create(topic, 2, **KEEP)
        ids = [_topic_id(k, topic)]
        names = {ids[0]: topic}
        missing = uuid.uuid4()
        k.coordinator(group)
        k.coordinator(tid, 1)
        init = k.init_pid(tid)
        pid, epoch = init.producer_id, init.producer_epoch
        _by_ids(k, 28, 6, _txn_commit_by_id(tid, group, pid, epoch, ids), names)
        _by_ids(k, 28, 6, _txn_commit_by_id(tid, group, pid, epoch, [missing]), names)
        _by_ids(k, 9, 10, _fetch_by_id(group, ids), names)

        def end(at: int, commit: bool) -> Any:
            body = end_txn.EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=at, committed=commit
            )
            return k.ask(26, body, version=5)

        ended = end(epoch, True)
        talk.recording = False
        _stable(k, group, ids)
        talk.recording = True
        _by_ids(k, 9, 10, _fetch_by_id(group, ids), names)
        epoch = ended.producer_epoch
        body = _txn_commit_by_id(tid, group, pid, epoch, ids)
        body.topics[0].partitions[0] = dataclasses.replace(
            body.topics[0].partitions[0], committed_offset=9
        )
        _by_ids(k, 28, 6, body, names)
        end(epoch, False)
        talk.recording = False
        _stable(k, group, ids)
        talk.recording = True
        _by_ids(k, 9, 10, _fetch_by_id(group, ids), names)

    check(kafka4, peer, script)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "TxnOffsetCommit v6: topic ids (KIP-1319)")
def test_txn_offset_commit_v6_group_errors(kafka4: Any, peer: Any) -> None:
    """KIP-1319: TxnOffsetCommit v6 answers the group coordinator's own codes
    where v5 answered ILLEGAL_GENERATION: a group that does not exist, asked
    with a generation, GROUP_ID_NOT_FOUND; a consumer group (KIP-848)
    member's stale epoch STALE_MEMBER_EPOCH. Without a generation a group
    that does not exist is made, whatever member id the commit names; an
    unknown member of a consumer group is UNKNOWN_MEMBER_ID in both."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, tid, group = talk.name("topic"), talk.name("txn"), talk.name("consumers")
        k.create(topic, 1, **KEEP)
        ids = [_topic_id(k, topic)]
        k.coordinator(group)
        k.coordinator(tid, 1)
        member = uuid.uuid4().hex
        # (Unrecorded: the epoch a first heartbeat gets is not what is compared.)
        talk.recording = False
        joined = k.ask(
            68,
            heartbeat.ConsumerGroupHeartbeatRequest(
                group_id=group,
                member_id=member,
                member_epoch=0,
                rebalance_timeout_ms=30000,
                subscribed_topic_names=[topic],
                topic_partitions=[],
            ),
            version=1,
        )
        talk.recording = True
        init = k.init_pid(tid)
        pid, epoch = init.producer_id, init.producer_epoch
        cases = (
            ("missing", "missing", 3, ""),
            ("missing, a member", "missing", 3, "someone"),
            ("made", "made", -1, "someone"),
            ("stale epoch", "consumers", joined.member_epoch + 5, member),
            ("unknown member", "consumers", joined.member_epoch, "nobody"),
        )
        for label, group_label, generation, who in cases:
            name = talk.name(group_label)
            for version in (5, 6):
                body = _txn_commit_by_id(
                    tid, name, pid, epoch, ids, generation=generation, member=who
                )
                if version == 5:
                    body = dataclasses.replace(
                        body,
                        topics=[dataclasses.replace(body.topics[0], name=topic)],
                    )
                answer = k.ask(28, body, version=version)
                talk.note(
                    f"{label} v{version}",
                    answer.topics[0].partitions[0].error_code,
                )
        k.ask(
            26,
            end_txn.EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=False
            ),
            version=5,
        )

    check(kafka4, peer, script)


def _stable(k: Kafka, group: str, ids: list[uuid.UUID], timeout: float = 60.0) -> None:
    """Wait until no offset of ``group`` is pending (the markers are written
    after EndTxn is answered)."""
    deadline = time.monotonic() + timeout
    while True:
        answer = k.ask(9, _fetch_by_id(group, ids), version=10)
        codes = [p.error_code for t in answer.groups[0].topics for p in t.partitions]
        if ErrorCode.UNSTABLE_OFFSET_COMMIT not in codes:
            return
        assert time.monotonic() < deadline, f"{group}: offsets still pending"
        time.sleep(0.05)
