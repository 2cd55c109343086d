"""The sans-IO broker core: dispatch, versions, and each handler's Kafka semantics.

Every request goes through the real codec both ways (see ``Core`` in conftest),
so these tests also prove each response is encodable at its version.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from brokerlite_wire import create, produce_request
from kafka.protocol.broker_version_data import (
    BROKER_API_VERSIONS,
    infer_broker_version_from_api_versions,
)

from trafka.brokerlite.broker import Broker
from trafka.brokerlite.config import BrokerConfig
from trafka.brokerlite.handlers import HANDLERS
from trafka.brokerlite.outcomes import Close, NoResponse, Parked, Reply
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k10_find_coordinator as find_coordinator
from trafka.codec.messages import k11_join_group as join_group
from trafka.codec.messages import k14_sync_group as sync_group
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k20_delete_topics as delete_topics
from trafka.codec.messages import k21_delete_records as delete_records
from trafka.codec.messages import k22_init_producer_id as init_producer_id
from trafka.codec.messages import k23_offset_for_leader_epoch as offset_for_leader_epoch
from trafka.codec.messages import k32_describe_configs as describe_configs
from trafka.codec.messages import k33_alter_configs as alter_configs
from trafka.codec.messages import k37_create_partitions as create_partitions
from trafka.codec.messages import k44_incremental_alter_configs as incremental_alter_configs
from trafka.codec.messages import k60_describe_cluster as describe_cluster
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import api, encode_request
from trafka.codec.records import encode_batch

# -- helpers ----------------------------------------------------------------------------------


def fetch_request(
    topic: str,
    offset: int = 0,
    *,
    partitions: tuple[int, ...] = (0,),
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 * 1024 * 1024,
    partition_max_bytes: int = 1024 * 1024,
    topic_id: uuid.UUID | None = None,
    session_id: int = 0,
    session_epoch: int = -1,
) -> fetch.FetchRequest:
    return fetch.FetchRequest(
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        session_id=session_id,
        session_epoch=session_epoch,
        topics=[
            fetch.FetchRequest.FetchTopic(
                topic=topic,
                topic_id=topic_id or uuid.UUID(int=0),
                partitions=[
                    fetch.FetchRequest.FetchPartition(
                        partition=p, fetch_offset=offset, partition_max_bytes=partition_max_bytes
                    )
                    for p in partitions
                ],
            )
        ],
    )


def values_of(records: bytes | None) -> list[bytes | None]:
    from trafka.codec.records import decode_records

    return [r.value for r in decode_records(records or b"")]


def topic_id(core: Any, name: str) -> uuid.UUID:
    info = core.broker.logs.topic(name)
    assert info is not None
    return info.topic_id


# -- dispatch and versions -----------------------------------------------------------------


# ShareGroupHeartbeat/Describe at Kafka 4.1's first stable version; ShareFetch and
# ShareAcknowledge at Kafka 4.2's v2 (KIP-1206, KIP-1222).
SHARE_GROUP_KEYS = {76: (1, 1), 77: (1, 1), 78: (1, 2), 79: (1, 2)}
# Kafka 4.1's share-group offsets admin (90 gained its v1, the lag, in 4.2).
SHARE_OFFSETS_KEYS = {90: (0, 1), 91: (0, 0), 92: (0, 0)}
# The share coordinator's inter-broker APIs (Initialize/Read/Write/DeleteShareGroupState),
# v0 as Kafka 4.1 serves them (WriteShareGroupState v1, KIP-1226's DeliveryCompleteCount,
# as Kafka 4.2); Kafka 4.0 had them only with share groups enabled.
SHARE_STATE_KEYS = {83: (0, 0), 84: (0, 0), 85: (0, 1), 86: (0, 0)}
# KIP-714's push: Kafka advertises it only with a telemetry receiver plugin
# (kafka-python's recorded 4.0 broker had none); brokerlite's receiver is built in.
TELEMETRY_KEYS = {71: (0, 0), 72: (0, 0)}


#: The highest versions brokerlite serves below the codec's (Kafka 4.4's specs):
#: InitProducerId v6 (KIP-939) is unstable in Kafka 4.4, which does not advertise
#: it either (docs/compatibility.md, "Kafka 4.2 to 4.4's protocol changes").
BELOW_THE_CODEC = {22: 5}


def test_advertised_versions_are_the_handlers_and_read_as_kafka_4_0(open_core: Any) -> None:
    core = open_core(protocol_version="4.0")
    response = core.call(18, 3, api_versions.ApiVersionsRequest())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert response.error_code == 0
    assert set(ranges) == set(HANDLERS)
    assert ranges[0] == (0, 13)  # Produce: Kafka 4.0 advertises v0, serves v3+
    assert ranges[1] == (4, 18)
    assert ranges[2] == (1, 11)
    # As from Kafka 4.4 itself: the newest release kafka-python knows.
    assert infer_broker_version_from_api_versions(ranges) == max(BROKER_API_VERSIONS)
    # Kafka 4.0's lowest versions (as kafka-python recorded them from a real
    # broker), Kafka 4.4's highest (the codec's; issue #84).
    kafka_4_0 = BROKER_API_VERSIONS[(4, 0)]
    for key, (low, high) in ranges.items():
        if key in SHARE_GROUP_KEYS:
            # Kafka 4.0 served these only when enabled, at v0 (early access).
            assert (low, high) == SHARE_GROUP_KEYS[key], key
            continue
        if key in SHARE_OFFSETS_KEYS:
            assert (low, high) == SHARE_OFFSETS_KEYS[key], key
            continue
        if key in SHARE_STATE_KEYS:
            assert (low, high) == SHARE_STATE_KEYS[key], key
            continue
        if key in TELEMETRY_KEYS:
            assert (low, high) == TELEMETRY_KEYS[key], key
            continue
        assert low == kafka_4_0[key][0], key
        # (Produce v12+ and TxnOffsetCommit v5+, KIP-890 part 2's implicit adds,
        # are served as Kafka serves them, whatever transaction.version.)
        assert high == BELOW_THE_CODEC.get(key, api(key).max_version), key


def test_by_default_the_lowest_versions_are_kafka_3_9s(core: Any) -> None:
    """Issue #37: clients older than Kafka 4 find every version Kafka 3.9 served."""
    response = core.call(18, 3, api_versions.ApiVersionsRequest())
    ranges = {k.api_key: (k.min_version, k.max_version) for k in response.api_keys}
    assert set(ranges) == set(HANDLERS)
    assert ranges[0] == (0, 13)
    assert ranges[1] == (0, 18)
    assert ranges[2] == (0, 11)
    assert ranges[8] == (0, 10)
    assert ranges[9] == (0, 10)
    assert ranges[11] == (0, 9)
    kafka_3_9 = BROKER_API_VERSIONS[(3, 9)]
    for key, (low, high) in ranges.items():
        if key in SHARE_GROUP_KEYS or key in SHARE_OFFSETS_KEYS or key in TELEMETRY_KEYS:
            continue  # not in 3.9 (or early access there): as under 4.0
        if key in kafka_3_9:
            assert low == kafka_3_9[key][0], key
        # The highest versions stay the newest the broker serves.
        assert high == HANDLERS[key].max_version, key


def test_unknown_api_versions_version_gets_a_v0_error_listing_its_range(core: Any) -> None:
    header = RequestHeader(
        request_api_key=18, request_api_version=4, correlation_id=77, client_id="future"
    )
    frame = bytearray(encode_request(header, api_versions.ApiVersionsRequest())[4:])
    frame[2:4] = (9).to_bytes(2, "big")  # a version from the future
    outcome = core.broker.handle_frame(1, bytes(frame), core.now)
    assert isinstance(outcome, Reply)
    assert (outcome.api_version, outcome.correlation_id) == (0, 77)
    body = core.decode(outcome)
    assert body.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in body.api_keys] == [(18, 0, 5)]


@pytest.mark.parametrize("key", sorted(HANDLERS))
def test_every_served_version_answers_a_default_request(core: Any, key: int) -> None:
    spec = HANDLERS[key]
    low, high = spec.served("3.9")  # the default: Kafka 4.0's versions and those it removed
    for version in range(low, high + 1):
        body = api(key).request_type()
        if key == 0:
            body = produce.ProduceRequest(acks=1)
        outcome = core.send(key, version, body)
        assert isinstance(outcome, Reply | NoResponse), (version, outcome)
        if isinstance(outcome, Reply):
            core.decode(outcome)  # raises if not encodable at this version


@pytest.mark.parametrize(
    ("key", "version", "body"),
    [
        (0, 2, produce_request("t", b"")),
        (1, 3, fetch_request("t")),
        (
            2,
            0,
            list_offsets.ListOffsetsRequest(
                replica_id=-1,  # (a client's, as Kafka's consumers send)
                topics=[
                    list_offsets.ListOffsetsRequest.ListOffsetsTopic(
                        name="t",
                        partitions=[list_offsets.ListOffsetsRequest.ListOffsetsPartition()],
                    )
                ],
            ),
        ),
        (
            19,
            1,
            create_topics.CreateTopicsRequest(
                topics=[create_topics.CreateTopicsRequest.CreatableTopic(name="t")]
            ),
        ),
        (
            23,
            1,
            offset_for_leader_epoch.OffsetForLeaderEpochRequest(
                topics=[
                    offset_for_leader_epoch.OffsetForLeaderEpochRequest.OffsetForLeaderTopic(
                        topic="t",
                        partitions=[
                            offset_for_leader_epoch.OffsetForLeaderEpochRequest.OffsetForLeaderPartition()
                        ],
                    )
                ]
            ),
        ),
        (
            32,
            0,
            describe_configs.DescribeConfigsRequest(
                resources=[
                    describe_configs.DescribeConfigsRequest.DescribeConfigsResource(
                        resource_type=2, resource_name="t"
                    )
                ]
            ),
        ),
        (11, 1, join_group.JoinGroupRequest(group_id="g")),
    ],
)
def test_known_but_unserved_versions_get_unsupported_version(
    open_core: Any, key: int, version: int, body: Any
) -> None:
    """With ``protocol_version`` 4.0 the versions KIP-896 removed are refused."""
    core = open_core(protocol_version="4.0")
    response = core.call(key, version, body)
    codes = _error_codes(response)
    assert codes, response
    assert set(codes) == {ErrorCode.UNSUPPORTED_VERSION}


def _error_codes(obj: Any) -> list[int]:
    """Every error_code in a response, depth first."""
    out = []
    if hasattr(obj, "__dataclass_fields__"):
        for name in obj.__dataclass_fields__:
            value = getattr(obj, name)
            if name == "error_code" and value:
                out.append(value)
            else:
                out.extend(_error_codes(value))
    elif isinstance(obj, list):
        for item in obj:
            out.extend(_error_codes(item))
    return out


def test_bad_frames_close_the_connection(core: Any) -> None:
    broker = core.broker
    assert isinstance(broker.handle_frame(1, b"\x00\x01", core.now), Close)
    unknown = (999).to_bytes(2, "big") + b"\x00\x00" + b"\x00\x00\x00\x01" + b"\xff\xff"
    outcome = broker.handle_frame(1, unknown, core.now)
    assert isinstance(outcome, Close) and "unknown API key 999" in outcome.reason
    # DescribeAcls: the codec knows it, brokerlite does not serve it.
    acls = (29).to_bytes(2, "big") + b"\x00\x01" + b"\x00\x00\x00\x01" + b"\x00\x01x"
    outcome = broker.handle_frame(1, acls, core.now)
    assert isinstance(outcome, Close) and outcome.client_id == "x"
    # Fetch v99: no schema to answer with.
    future = (1).to_bytes(2, "big") + (99).to_bytes(2, "big") + b"\x00\x00\x00\x01\xff\xff"
    assert isinstance(broker.handle_frame(1, future, core.now), Close)
    # A Metadata v1 body whose topic count claims far more than the frame holds.
    lying = (3).to_bytes(2, "big") + b"\x00\x01" + b"\x00\x00\x00\x01\xff\xff" + b"\x7f\xff\xff\xff"
    outcome = broker.handle_frame(1, lying, core.now)
    assert isinstance(outcome, Close) and "malformed Metadata v1" in outcome.reason


# -- Metadata ---------------------------------------------------------------------------------


def test_metadata_auto_creates_only_when_allowed(core: Any) -> None:
    m = metadata.MetadataRequest
    ask = m.MetadataRequestTopic
    refused = core.call(3, 12, m(topics=[ask(name="a")], allow_auto_topic_creation=False))
    assert refused.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert core.broker.logs.topic("a") is None
    # Allowed: the topic is made, and this answer names it as Kafka 3.9 names a
    # topic its request is creating (LEADER_NOT_AVAILABLE, no partitions; Kafka 4:
    # UNKNOWN_TOPIC_OR_PARTITION); the next request finds it.
    making = core.call(3, 12, m(topics=[ask(name="a")], allow_auto_topic_creation=True))
    assert [(t.name, t.error_code, t.partitions) for t in making.topics] == [
        ("a", ErrorCode.LEADER_NOT_AVAILABLE, [])
    ]
    assert core.broker.logs.topic("a") is not None
    created = core.call(3, 12, m(topics=[ask(name="a")], allow_auto_topic_creation=False))
    topic = created.topics[0]
    assert topic.error_code == 0 and topic.name == "a"
    assert topic.topic_id == topic_id(core, "a")
    [partition] = topic.partitions
    assert (partition.leader_id, partition.leader_epoch) == (1, 0)
    assert partition.replica_nodes == partition.isr_nodes == [1]
    assert created.cluster_id == core.broker.cluster_id and created.controller_id == 1
    assert [(b.node_id, b.host, b.port) for b in created.brokers] == [(1, "127.0.0.1", 9999)]
    # Before v4 there is no flag: creation is allowed.
    old = core.call(3, 3, m(topics=[ask(name="b")]))
    assert old.topics[0].error_code == ErrorCode.LEADER_NOT_AVAILABLE
    assert core.broker.logs.topic("b") is not None
    bad = core.call(3, 12, m(topics=[ask(name="bad name!")]))
    assert bad.topics[0].error_code == ErrorCode.INVALID_TOPIC_EXCEPTION


def test_metadata_auto_creation_answers_as_kafka_4_with_its_protocol(open_core: Any) -> None:
    """With ``protocol_version`` 4.0 the request that makes a topic is answered
    as Kafka 4 answers it, its creation handed to the controller
    (UNKNOWN_TOPIC_OR_PARTITION, no partitions; kafka-go's TestConn expects no
    partitions there); the next request finds the topic."""
    core = open_core(protocol_version="4.0")
    m = metadata.MetadataRequest
    asked = m(topics=[m.MetadataRequestTopic(name="a")], allow_auto_topic_creation=True)
    making = core.call(3, 12, asked)
    assert [(t.error_code, t.partitions) for t in making.topics] == [
        (ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, [])
    ]
    assert core.broker.logs.topic("a") is not None
    assert len(core.call(3, 12, asked).topics[0].partitions) == 1


def test_metadata_lists_all_topics_and_finds_topics_by_id(core: Any) -> None:
    create(core, "x", 3)
    create(core, "y", 1)
    everything = core.call(3, 12, metadata.MetadataRequest(topics=None))
    assert {t.name: len(t.partitions) for t in everything.topics} == {"x": 3, "y": 1}
    v0_all = core.call(3, 0, metadata.MetadataRequest(topics=[]))
    assert {t.name for t in v0_all.topics} == {"x", "y"}
    ask = metadata.MetadataRequest.MetadataRequestTopic
    by_id = core.call(
        3, 12, metadata.MetadataRequest(topics=[ask(topic_id=topic_id(core, "x"), name=None)])
    )
    assert by_id.topics[0].name == "x"
    unknown = core.call(
        3, 12, metadata.MetadataRequest(topics=[ask(topic_id=uuid.uuid4(), name=None)])
    )
    assert unknown.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_ID


@pytest.mark.parametrize("version", [10, 11])
def test_metadata_v10_and_v11_refuse_topic_ids_as_kafka_does(core: Any, version: int) -> None:
    # Those versions carry the field but not its meaning: a topic by id, or
    # without a name, is INVALID_REQUEST for the whole request, and the answer
    # must still encode (their response names are not nullable).
    create(core, "x", 1)
    ask = metadata.MetadataRequest.MetadataRequestTopic
    tid = topic_id(core, "x")
    for topics in (
        [ask(name="x"), ask(topic_id=tid, name=None)],
        [ask(topic_id=tid, name="x")],
        [ask(name=None)],
    ):
        answer = core.call(3, version, metadata.MetadataRequest(topics=topics))
        assert [(t.error_code, t.name, t.partitions) for t in answer.topics] == [
            (ErrorCode.INVALID_REQUEST, t.name or "", []) for t in topics
        ]
    named = core.call(3, version, metadata.MetadataRequest(topics=[ask(name="x")]))
    assert named.topics[0].error_code == 0 and named.topics[0].topic_id == tid


def test_auto_create_can_be_disabled(data_dir: Path) -> None:
    config = BrokerConfig(port=0, data_dir=data_dir, auto_create_topics=False)
    broker = Broker(config, now_ms=0)
    try:
        header = RequestHeader(request_api_key=3, request_api_version=12, correlation_id=1)
        body = metadata.MetadataRequest(
            topics=[metadata.MetadataRequest.MetadataRequestTopic(name="nope")]
        )
        outcome = broker.handle(1, header, body, 0)
        assert isinstance(outcome, Reply)
        assert outcome.body.topics[0].error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        assert broker.logs.topic("nope") is None
    finally:
        broker.close()


# -- Produce ------------------------------------------------------------------------------


def test_produce_assigns_offsets_and_fetch_returns_them(core: Any, make_batch: Any) -> None:
    create(core, "t")
    first = core.call(0, 9, produce_request("t", make_batch([b"a", b"b"])))
    second = core.call(0, 3, produce_request("t", make_batch([b"c"])))
    p1 = first.responses[0].partition_responses[0]
    p2 = second.responses[0].partition_responses[0]
    assert (p1.error_code, p1.base_offset, p1.log_start_offset) == (0, 0, 0)
    assert (p2.error_code, p2.base_offset) == (0, 2)
    assert p1.log_append_time_ms == -1  # CreateTime topic
    response = core.call(1, 12, fetch_request("t"))
    part = response.responses[0].partitions[0]
    assert part.error_code == 0
    assert (part.high_watermark, part.last_stable_offset, part.log_start_offset) == (3, 3, 0)
    assert values_of(part.records) == [b"a", b"b", b"c"]
    assert part.aborted_transactions is None


def test_produce_reports_log_append_time(core: Any, make_batch: Any) -> None:
    create(core, "la", **{"message.timestamp.type": "LogAppendTime"})
    response = core.call(0, 9, produce_request("la", make_batch([b"x"])))
    assert response.responses[0].partition_responses[0].log_append_time_ms == core.now


def test_produce_errors_are_per_partition(core: Any, make_batch: Any) -> None:
    create(core, "t", 2, **{"max.message.bytes": "200"})
    corrupt = bytearray(make_batch([b"ok"]))
    corrupt[-1] ^= 0xFF  # breaks the CRC
    body = produce.ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=0, records=bytes(corrupt)),
                    produce.ProduceRequest.PartitionProduceData(
                        index=1, records=make_batch([b"x" * 500])
                    ),
                    produce.ProduceRequest.PartitionProduceData(
                        index=7, records=make_batch([b"y"])
                    ),
                ],
            ),
            produce.ProduceRequest.TopicProduceData(
                name="missing",
                partition_data=[
                    produce.ProduceRequest.PartitionProduceData(index=0, records=make_batch([b"z"]))
                ],
            ),
        ],
    )
    response = core.call(0, 9, body)
    codes = [p.error_code for t in response.responses for p in t.partition_responses]
    assert codes == [
        ErrorCode.CORRUPT_MESSAGE,
        ErrorCode.MESSAGE_TOO_LARGE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    ]
    assert response.responses[0].partition_responses[0].error_message
    assert core.broker.logs.partition("t", 0).log_end_offset == 0


def test_produce_takes_one_batch_per_partition(core: Any, make_batch: Any) -> None:
    """Kafka's log validation refuses a partition's records that hold more than one
    magic 2 batch (INVALID_RECORD), as brokerlite does: a producer sends one batch
    per partition and request. (bench/broker.py's raw ingest packed several into
    each request, and make bench died on it: issue #45.)"""
    create(core, "t", 2)
    part = produce.ProduceRequest.PartitionProduceData
    two = make_batch([b"a"]) + make_batch([b"b", b"c"])
    body = produce.ProduceRequest(
        acks=1,
        timeout_ms=1000,
        topic_data=[
            produce.ProduceRequest.TopicProduceData(
                name="t",
                partition_data=[
                    part(index=0, records=two),
                    part(index=1, records=make_batch([b"d"])),
                ],
            )
        ],
    )
    refused, taken = core.call(0, 9, body).responses[0].partition_responses
    assert refused.error_code == ErrorCode.INVALID_RECORD
    assert "more than one record batch" in (refused.error_message or "")
    assert (taken.error_code, taken.base_offset) == (0, 0)  # other partitions unaffected
    assert core.broker.logs.partition("t", 0).log_end_offset == 0
    # The same batches, one request each, are taken.
    for records in (make_batch([b"a"]), make_batch([b"b", b"c"])):
        answer = core.call(0, 9, produce_request("t", records)).responses[0]
        assert answer.partition_responses[0].error_code == 0
    assert core.broker.logs.partition("t", 0).log_end_offset == 3


def test_produce_acks(core: Any, make_batch: Any) -> None:
    create(core, "t")
    bad_acks = core.call(0, 9, produce_request("t", make_batch([b"a"]), acks=2))
    assert (
        bad_acks.responses[0].partition_responses[0].error_code == ErrorCode.INVALID_REQUIRED_ACKS
    )
    assert isinstance(core.send(0, 9, produce_request("t", make_batch([b"a"]), acks=0)), NoResponse)
    assert core.broker.logs.partition("t", 0).log_end_offset == 1
    # acks=0 cannot carry an error: Kafka closes the connection instead.
    outcome = core.send(0, 9, produce_request("nope", make_batch([b"a"]), acks=0))
    assert isinstance(outcome, Close) and "UNKNOWN_TOPIC_OR_PARTITION" in outcome.reason


def test_acks_all_below_min_insync_replicas_is_refused_and_not_written(
    core: Any, make_batch: Any
) -> None:
    """Kafka's topic config ``min.insync.replicas``: "When a producer sets acks to
    "all" (or "-1"), min.insync.replicas specifies the minimum number of replicas
    that must acknowledge a write for the write to be considered successful. If
    this minimum cannot be met, then the producer will raise an exception (either
    NotEnoughReplicas or NotEnoughReplicasAfterAppend)"; design.html ("Availability
    and Durability Guarantees"): the minimum ISR size "only takes effect if the
    producer uses acks=all". errors.json: 19 NOT_ENOUGH_REPLICAS, "Messages are
    rejected since there are fewer in-sync replicas than required."

    One node holds the only replica (RF 1), so the ISR is 1 < 2."""
    create(core, "strict", **{"min.insync.replicas": "2"})
    refused = core.call(0, 9, produce_request("strict", make_batch([b"no"]), acks=-1))
    answer = refused.responses[0].partition_responses[0]
    assert answer.error_code == ErrorCode.NOT_ENOUGH_REPLICAS == 19
    assert answer.base_offset == -1
    assert "min.insync.replicas" in answer.error_message
    # Nothing was appended: the log is empty, and a fetch reads no records.
    assert core.broker.logs.partition("strict", 0).log_end_offset == 0
    fetched = core.call(1, 12, fetch_request("strict")).responses[0].partitions[0]
    assert fetched.error_code == ErrorCode.NONE
    assert fetched.high_watermark == 0 and values_of(fetched.records) == []
    # acks=1 (and acks=0) need the leader only.
    accepted = core.call(0, 9, produce_request("strict", make_batch([b"yes"]), acks=1))
    assert accepted.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    assert accepted.responses[0].partition_responses[0].base_offset == 0
    assert isinstance(
        core.send(0, 9, produce_request("strict", make_batch([b"too"]), acks=0)), NoResponse
    )
    again = core.call(1, 12, fetch_request("strict")).responses[0].partitions[0]
    assert values_of(again.records) == [b"yes", b"too"]
    # A topic without the override (min.insync.replicas 1) takes acks=all.
    create(core, "lenient")
    fine = core.call(0, 9, produce_request("lenient", make_batch([b"ok"]), acks=-1))
    assert fine.responses[0].partition_responses[0].error_code == ErrorCode.NONE


def test_transactional_produce_needs_the_transaction(core: Any) -> None:
    create(core, "t")
    batch = encode_batch(
        [(0, None, b"a", ())],
        producer_id=7,
        producer_epoch=0,
        base_sequence=0,
        is_transactional=True,
    )
    body = produce.ProduceRequest(
        transactional_id="tx",
        acks=-1,
        topic_data=produce_request("t", batch).topic_data,
    )
    response = core.call(0, 9, body)
    code = response.responses[0].partition_responses[0].error_code
    # No InitProducerId bound "tx" to producer 7: nothing may be written (KIP-890).
    assert code == ErrorCode.INVALID_PRODUCER_ID_MAPPING
    assert core.broker.logs.partition("t", 0).log_end_offset == 0


# -- Fetch ----------------------------------------------------------------------------------


def test_fetch_out_of_range_and_unknown(core: Any, make_batch: Any) -> None:
    create(core, "t")
    core.call(0, 9, produce_request("t", make_batch([b"a"])))
    past = core.call(1, 11, fetch_request("t", 5)).responses[0].partitions[0]
    assert past.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    # Kafka tells no offsets with this error (tests/brokerlite/test_differential_data.py).
    assert (past.high_watermark, past.last_stable_offset, past.log_start_offset) == (-1, -1, -1)
    unknown = core.call(1, 11, fetch_request("nope")).responses[0].partitions[0]
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_past_the_high_watermark_but_within_the_log_is_empty(
    core: Any, make_batch: Any
) -> None:
    """A consumer's offset between the high watermark and the log end offset (a
    new leader's high watermark catching up after an election) is not out of
    range: Kafka's LocalLog.read raises OffsetOutOfRange only past the log end
    offset (or below its start) and answers an empty read above the isolation
    bound. Only past the log end is it OFFSET_OUT_OF_RANGE."""
    create(core, "t")
    core.call(0, 9, produce_request("t", make_batch([b"a", b"b", b"c"])))
    plog = core.broker.logs.partition("t", 0)
    assert plog.set_high_watermark(1) == 1 and plog.log_end_offset == 3

    def fetch(offset: int) -> Any:
        return core.call(1, 11, fetch_request("t", offset)).responses[0].partitions[0]

    for offset in (1, 2, 3):
        answer = fetch(offset)
        assert answer.error_code == ErrorCode.NONE, offset
        assert not answer.records and answer.high_watermark == 1
    below = fetch(0)
    assert below.error_code == ErrorCode.NONE and below.records  # only below the mark
    past = fetch(4)
    assert past.error_code == ErrorCode.OFFSET_OUT_OF_RANGE
    by_id = core.call(1, 13, fetch_request("", topic_id=uuid.uuid4())).responses[0].partitions[0]
    assert by_id.error_code == ErrorCode.UNKNOWN_TOPIC_ID


def test_fetch_by_topic_id_from_v13(core: Any, make_batch: Any) -> None:
    create(core, "t")
    core.call(0, 9, produce_request("t", make_batch([b"a"])))
    tid = topic_id(core, "t")
    response = core.call(1, 17, fetch_request("", topic_id=tid))
    assert response.responses[0].topic_id == tid
    assert values_of(response.responses[0].partitions[0].records) == [b"a"]


def test_fetch_sessions_open_and_unknown_ones_are_refused(core: Any, make_batch: Any) -> None:
    create(core, "t")
    # A client asking to open a session (epoch 0) gets a full answer and its id
    # (the rest is in test_fetch_sessions.py).
    opened = core.call(1, 12, fetch_request("t", session_epoch=0))
    assert opened.session_id != 0 and opened.error_code == 0
    assert opened.responses[0].partitions[0].error_code == 0
    stale = core.call(1, 12, fetch_request("t", session_id=123, session_epoch=1))
    assert stale.error_code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND


def test_fetch_max_bytes_and_first_batch_rule(core: Any, make_batch: Any) -> None:
    create(core, "t", 2)
    for partition in (0, 1):
        for i in range(3):
            value = bytes([65 + i]) * 1000
            core.call(0, 9, produce_request("t", make_batch([value]), partition=partition))
    # A budget smaller than one batch still returns the first partition's first batch.
    tiny = core.call(1, 12, fetch_request("t", partitions=(0, 1), max_bytes=10))
    sizes = [len(values_of(p.records)) for p in tiny.responses[0].partitions]
    assert sizes == [1, 0]
    # partition_max_bytes bounds each partition, whole batches only.
    per_partition = core.call(
        1, 12, fetch_request("t", partitions=(0, 1), partition_max_bytes=2500)
    )
    sizes = [len(values_of(p.records)) for p in per_partition.responses[0].partitions]
    assert sizes == [2, 2]
    everything = core.call(1, 12, fetch_request("t", partitions=(0, 1)))
    sizes = [len(values_of(p.records)) for p in everything.responses[0].partitions]
    assert sizes == [3, 3]


def test_long_poll_parks_until_data_arrives(core: Any, make_batch: Any) -> None:
    create(core, "t")
    outcome = core.send(1, 12, fetch_request("t", max_wait_ms=5000, min_bytes=1), conn_id=7)
    assert isinstance(outcome, Parked)
    assert core.poll(100) == []  # nothing yet, deadline not reached
    assert core.broker.next_deadline() <= core.now + 4900
    core.call(0, 9, produce_request("t", make_batch([b"late"])), conn_id=8)
    assert core.broker.has_ready()
    [done] = core.poll()
    assert done.conn_id == 7 and done.ticket == outcome.ticket
    part = core.decode(done.reply).responses[0].partitions[0]
    assert values_of(part.records) == [b"late"]


def test_long_poll_waits_for_min_bytes_then_times_out(core: Any, make_batch: Any) -> None:
    create(core, "t")
    outcome = core.send(1, 12, fetch_request("t", max_wait_ms=500, min_bytes=100_000))
    assert isinstance(outcome, Parked)
    core.call(0, 9, produce_request("t", make_batch([b"small"])), conn_id=2)
    assert core.poll() == []  # not enough bytes yet
    [done] = core.poll(500)
    part = core.decode(done.reply).responses[0].partitions[0]
    assert values_of(part.records) == [b"small"]


def test_parked_fetch_completes_when_its_topic_is_deleted(core: Any) -> None:
    create(core, "t")
    assert isinstance(core.send(1, 12, fetch_request("t", max_wait_ms=60_000)), Parked)
    body = delete_topics.DeleteTopicsRequest(topic_names=["t"])
    assert core.call(20, 5, body, conn_id=2).responses[0].error_code == 0
    [done] = core.poll()
    part = core.decode(done.reply).responses[0].partitions[0]
    assert part.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def test_closing_a_connection_drops_its_parked_fetch(core: Any, make_batch: Any) -> None:
    create(core, "t")
    assert isinstance(core.send(1, 12, fetch_request("t", max_wait_ms=1000), conn_id=5), Parked)
    core.broker.connection_closed(5)
    core.call(0, 9, produce_request("t", make_batch([b"a"])), conn_id=6)
    assert core.poll(2000) == []


def test_fetch_does_not_park_on_errors(core: Any) -> None:
    outcome = core.send(1, 12, fetch_request("nope", max_wait_ms=5000))
    assert isinstance(outcome, Reply)


# -- ListOffsets, DeleteRecords, OffsetForLeaderEpoch ------------------------------------------


def _list_offsets(core: Any, topic: str, timestamp: int, version: int = 9) -> tuple[int, int]:
    body = list_offsets.ListOffsetsRequest(
        replica_id=-1,
        topics=[
            list_offsets.ListOffsetsRequest.ListOffsetsTopic(
                name=topic,
                partitions=[
                    list_offsets.ListOffsetsRequest.ListOffsetsPartition(
                        partition_index=0, timestamp=timestamp
                    )
                ],
            )
        ],
    )
    part = core.call(2, version, body).topics[0].partitions[0]
    assert part.error_code == 0
    return part.offset, part.timestamp


def test_list_offsets(core: Any, make_batch: Any) -> None:
    create(core, "t")
    base = 1_600_000_000_000
    core.call(0, 9, produce_request("t", make_batch([b"a", b"b"], timestamp=base)))
    core.call(0, 9, produce_request("t", make_batch([b"c"], timestamp=base + 100)))
    core.call(0, 9, produce_request("t", make_batch([b"d"], timestamp=base + 50)))
    assert _list_offsets(core, "t", -2) == (0, -1)
    assert _list_offsets(core, "t", -1) == (4, -1)
    assert _list_offsets(core, "t", base + 1) == (1, base + 1)
    assert _list_offsets(core, "t", base + 60) == (2, base + 100)
    assert _list_offsets(core, "t", base + 1000) == (-1, -1)
    assert _list_offsets(core, "t", -3) == (2, base + 100)
    body = delete_records.DeleteRecordsRequest(
        topics=[
            delete_records.DeleteRecordsRequest.DeleteRecordsTopic(
                name="t",
                partitions=[
                    delete_records.DeleteRecordsRequest.DeleteRecordsPartition(
                        partition_index=0, offset=2
                    ),
                ],
            )
        ]
    )
    result = core.call(21, 2, body).topics[0].partitions[0]
    assert (result.error_code, result.low_watermark) == (0, 2)
    assert _list_offsets(core, "t", -2) == (2, -1)
    assert _list_offsets(core, "t", base) == (2, base + 100)
    gone = core.call(1, 12, fetch_request("t", 0)).responses[0].partitions[0]
    assert gone.error_code == ErrorCode.OFFSET_OUT_OF_RANGE


def test_delete_records_beyond_the_end(core: Any) -> None:
    create(core, "t")
    body = delete_records.DeleteRecordsRequest(
        topics=[
            delete_records.DeleteRecordsRequest.DeleteRecordsTopic(
                name="t",
                partitions=[
                    delete_records.DeleteRecordsRequest.DeleteRecordsPartition(
                        partition_index=0, offset=10
                    )
                ],
            )
        ]
    )
    result = core.call(21, 2, body).topics[0].partitions[0]
    assert (result.error_code, result.low_watermark) == (ErrorCode.OFFSET_OUT_OF_RANGE, -1)


def test_offset_for_leader_epoch(core: Any, make_batch: Any) -> None:
    create(core, "t")
    core.call(0, 9, produce_request("t", make_batch([b"a", b"b"])))
    req = offset_for_leader_epoch.OffsetForLeaderEpochRequest
    body = req(
        replica_id=-1,
        topics=[
            req.OffsetForLeaderTopic(
                topic="t",
                partitions=[
                    req.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=0, leader_epoch=0
                    ),
                    req.OffsetForLeaderPartition(
                        partition=0, current_leader_epoch=5, leader_epoch=0
                    ),
                ],
            )
        ],
    )
    ok, fenced = core.call(23, 4, body).topics[0].partitions
    assert (ok.error_code, ok.leader_epoch, ok.end_offset) == (0, 0, 2)
    assert fenced.error_code == ErrorCode.UNKNOWN_LEADER_EPOCH


# -- admin ----------------------------------------------------------------------------------


def test_create_topics_rules(core: Any) -> None:
    topic = create_topics.CreateTopicsRequest.CreatableTopic
    body = create_topics.CreateTopicsRequest(
        topics=[
            topic(name="dflt", num_partitions=-1, replication_factor=-1),
            topic(name="rf3", num_partitions=1, replication_factor=3),
            topic(name="dup", num_partitions=1, replication_factor=1),
            topic(name="dup", num_partitions=2, replication_factor=1),
            topic(name="zero", num_partitions=0, replication_factor=1),
            topic(
                name="badcfg",
                num_partitions=1,
                replication_factor=1,
                configs=[
                    create_topics.CreateTopicsRequest.CreatableTopicConfig(
                        name="retention.ms", value="soon"
                    )
                ],
            ),
        ]
    )
    results = {(r.name, i): r for i, r in enumerate(core.call(19, 7, body).topics)}
    codes = [r.error_code for r in results.values()]
    assert codes == [
        0,
        ErrorCode.INVALID_REPLICATION_FACTOR,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_REQUEST,
        ErrorCode.INVALID_PARTITIONS,
        ErrorCode.INVALID_CONFIG,
    ]
    created = results[("dflt", 0)]
    assert created.num_partitions == 1 and created.replication_factor == 1
    assert created.topic_id == topic_id(core, "dflt")
    assert {c.name for c in created.configs} >= {"retention.ms", "segment.bytes"}
    again = core.call(19, 7, create_topics.CreateTopicsRequest(topics=[topic(name="dflt")]))
    assert again.topics[0].error_code == ErrorCode.TOPIC_ALREADY_EXISTS


def test_create_topics_validate_only_changes_nothing(core: Any) -> None:
    topic = create_topics.CreateTopicsRequest.CreatableTopic
    body = create_topics.CreateTopicsRequest(
        topics=[topic(name="v", num_partitions=4, replication_factor=1)], validate_only=True
    )
    result = core.call(19, 7, body).topics[0]
    assert (result.error_code, result.num_partitions) == (0, 4)
    assert core.broker.logs.topic("v") is None


def test_delete_topics_by_name_and_id(core: Any) -> None:
    create(core, "a")
    create(core, "b")
    state = delete_topics.DeleteTopicsRequest.DeleteTopicState
    body = delete_topics.DeleteTopicsRequest(
        topics=[
            state(name=None, topic_id=topic_id(core, "a")),
            state(name="b"),
            state(name=None, topic_id=uuid.uuid4()),
            state(name="c"),
        ]
    )
    codes = [r.error_code for r in core.call(20, 6, body).responses]
    assert codes == [0, 0, ErrorCode.UNKNOWN_TOPIC_ID, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
    assert core.broker.logs.topics() == []


def test_create_partitions(core: Any) -> None:
    create(core, "t", 2)
    grow = create_partitions.CreatePartitionsRequest.CreatePartitionsTopic
    checked = core.call(
        37,
        3,
        create_partitions.CreatePartitionsRequest(
            topics=[grow(name="t", count=5, assignments=None)], validate_only=True
        ),
    )
    assert checked.results[0].error_code == 0
    assert core.broker.logs.topic("t").num_partitions == 2
    grown = core.call(
        37,
        3,
        create_partitions.CreatePartitionsRequest(
            topics=[grow(name="t", count=5, assignments=None)]
        ),
    )
    assert grown.results[0].error_code == 0
    assert core.broker.logs.topic("t").num_partitions == 5
    shrink = core.call(
        37,
        3,
        create_partitions.CreatePartitionsRequest(
            topics=[grow(name="t", count=3, assignments=None)]
        ),
    )
    assert shrink.results[0].error_code == ErrorCode.INVALID_PARTITIONS
    elsewhere = create_partitions.CreatePartitionsRequest.CreatePartitionsAssignment(broker_ids=[2])
    bad = core.call(
        37,
        3,
        create_partitions.CreatePartitionsRequest(
            topics=[grow(name="t", count=6, assignments=[elsewhere])]
        ),
    )
    assert bad.results[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    # An empty list is an assignment of no new partition, not a null one (as Kafka:
    # test_kafka_topic_timeouts.py).
    empty = core.call(
        37, 3, create_partitions.CreatePartitionsRequest(topics=[grow(name="t", count=6)])
    )
    assert empty.results[0].error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert core.broker.logs.topic("t").num_partitions == 5


def _describe(core: Any, resource_type: int, name: str, keys: list[str] | None = None) -> Any:
    resource = describe_configs.DescribeConfigsRequest.DescribeConfigsResource(
        resource_type=resource_type, resource_name=name, configuration_keys=keys
    )
    body = describe_configs.DescribeConfigsRequest(resources=[resource], include_synonyms=True)
    return core.call(32, 4, body).results[0]


def test_describe_and_alter_topic_configs(core: Any) -> None:
    create(core, "t", **{"retention.ms": "1000"})
    result = _describe(core, 2, "t", ["retention.ms", "segment.bytes"])
    entries = {c.name: c for c in result.configs}
    assert set(entries) == {"retention.ms", "segment.bytes"}
    assert entries["retention.ms"].value == "1000"
    assert entries["retention.ms"].config_source == 1  # DYNAMIC_TOPIC_CONFIG
    assert entries["retention.ms"].config_type == 5  # LONG
    assert entries["segment.bytes"].config_source == 5  # DEFAULT_CONFIG
    # No broker synonym: log.retention.ms has no default in Kafka (log.retention.hours
    # has), and Kafka 3.9 lists none (kafka-configs --describe, tests/tools/test_kafka_scripts.py)
    assert [s.name for s in entries["retention.ms"].synonyms] == ["retention.ms"]
    assert [s.name for s in entries["segment.bytes"].synonyms] == ["log.segment.bytes"]

    inc = incremental_alter_configs.IncrementalAlterConfigsRequest
    body = inc(
        resources=[
            inc.AlterConfigsResource(
                resource_type=2,
                resource_name="t",
                configs=[
                    inc.AlterableConfig(name="retention.ms", config_operation=1, value=None),
                    inc.AlterableConfig(name="segment.bytes", config_operation=0, value="100000"),
                    inc.AlterableConfig(name="cleanup.policy", config_operation=2, value="compact"),
                ],
            )
        ]
    )
    assert core.call(44, 1, body).responses[0].error_code == 0
    entries = {c.name: c for c in _describe(core, 2, "t").configs}
    assert entries["retention.ms"].value == "604800000"
    assert entries["segment.bytes"].value == "100000"
    # APPEND adds at the end, as Kafka's ConfigAdminManager does (the default was "delete")
    assert entries["cleanup.policy"].value == "delete,compact"
    assert core.broker.logs.partition("t", 0).config.segment_bytes == 100000

    bad = inc(
        resources=[
            inc.AlterConfigsResource(
                resource_type=2,
                resource_name="t",
                configs=[inc.AlterableConfig(name="segment.bytes", config_operation=2, value="1")],
            )
        ]
    )
    assert core.call(44, 1, bad).responses[0].error_code == ErrorCode.INVALID_CONFIG

    legacy = alter_configs.AlterConfigsRequest
    replace = legacy(
        resources=[
            legacy.AlterConfigsResource(
                resource_type=2,
                resource_name="t",
                configs=[legacy.AlterableConfig(name="retention.bytes", value="5000")],
            )
        ]
    )
    assert core.call(33, 2, replace).responses[0].error_code == 0
    overrides = core.broker.logs.topic("t").configs
    assert overrides == {"retention.bytes": "5000"}


def test_describe_broker_configs_and_unknown_resources(core: Any) -> None:
    result = _describe(core, 4, "1", ["num.partitions", "log.segment.bytes"])
    entries = {c.name: c for c in result.configs}
    assert entries["num.partitions"].value == "1"
    assert entries["num.partitions"].read_only
    assert _describe(core, 2, "nope").error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert _describe(core, 4, "42").error_code == ErrorCode.INVALID_REQUEST


@pytest.mark.parametrize("broker_min_isr", [1, 2])
def test_topic_configs_the_broker_defaults_are_reported_as_enforced(
    open_core: Any, make_batch: Any, broker_min_isr: int
) -> None:
    """A topic without an override of ``min.insync.replicas`` or
    ``unclean.leader.election.enable`` takes the broker's setting of the same
    name, and DescribeConfigs reports the value the broker enforces, with its
    source: Kafka's DescribeConfigs (KIP-226, "ConfigSource") gives a topic
    config the broker sets statically as STATIC_BROKER_CONFIG (4), with the
    broker setting as its synonym, and Kafka's own default as DEFAULT_CONFIG (5).
    The broker resource reports both settings under their Kafka names."""
    unclean = broker_min_isr == 2
    core = open_core(min_insync_replicas=broker_min_isr, unclean_leader_election_enable=unclean)
    create(core, "t")
    # What the broker enforces: one node is one in-sync replica.
    written = core.call(0, 9, produce_request("t", make_batch([b"x"]), acks=-1))
    code = written.responses[0].partition_responses[0].error_code
    assert code == (ErrorCode.NONE if broker_min_isr == 1 else ErrorCode.NOT_ENOUGH_REPLICAS)

    static, default = 4, 5
    source = static if broker_min_isr == 2 else default
    topic = {c.name: c for c in _describe(core, 2, "t").configs}
    broker = {c.name: c for c in _describe(core, 4, "1").configs}
    for name, value in (
        ("min.insync.replicas", str(broker_min_isr)),
        ("unclean.leader.election.enable", str(unclean).lower()),
    ):
        assert (topic[name].value, topic[name].config_source) == (value, source), name
        assert [(s.name, s.value, s.source) for s in topic[name].synonyms] == [
            (name, value, source)
        ]
        assert (broker[name].value, broker[name].config_source) == (value, source), name
        assert broker[name].read_only
    assert topic["min.insync.replicas"].config_type == 3  # INT
    assert topic["unclean.leader.election.enable"].config_type == 1  # BOOLEAN
    assert broker["min.insync.replicas"].config_type == 3
    assert broker["unclean.leader.election.enable"].config_type == 1


# -- producer ids, coordinators, cluster ---------------------------------------------------------


def test_producer_ids_are_unique_across_restarts(core: Any, data_dir: Path) -> None:
    req = init_producer_id.InitProducerIdRequest
    first = core.call(22, 4, req(transactional_id=None, transaction_timeout_ms=60000))
    second = core.call(22, 4, req(transactional_id=None, transaction_timeout_ms=60000))
    assert first.error_code == second.error_code == 0
    assert second.producer_id == first.producer_id + 1 and first.producer_epoch == 0
    txn = core.call(22, 4, req(transactional_id="tx", transaction_timeout_ms=60000))
    assert txn.error_code == 0 and txn.producer_id > second.producer_id
    assert txn.producer_epoch == 0
    core.broker.close()
    again = Broker(BrokerConfig(port=0, data_dir=data_dir), now_ms=0)
    try:
        assert again.allocate_producer_id() > txn.producer_id
        assert again.cluster_id == core.broker.cluster_id
    finally:
        again.close()


def test_find_coordinator(core: Any) -> None:
    req = find_coordinator.FindCoordinatorRequest
    old = core.call(10, 3, req(key="g", key_type=0))
    assert (old.error_code, old.node_id, old.host, old.port) == (0, 1, "127.0.0.1", 9999)
    batched = core.call(10, 6, req(key_type=0, coordinator_keys=["a", "b"]))
    assert [(c.key, c.node_id, c.error_code) for c in batched.coordinators] == [
        ("a", 1, 0),
        ("b", 1, 0),
    ]
    txn = core.call(10, 6, req(key_type=1, coordinator_keys=["tx"]))
    assert [(c.key, c.node_id, c.port, c.error_code) for c in txn.coordinators] == [
        ("tx", 1, 9999, 0)
    ]
    old_txn = core.call(10, 2, req(key="tx", key_type=1))
    assert (old_txn.error_code, old_txn.node_id, old_txn.port) == (0, 1, 9999)
    share = core.call(10, 6, req(key_type=2, coordinator_keys=["s"]))
    assert share.coordinators[0].error_code == ErrorCode.INVALID_REQUEST


def test_describe_cluster(core: Any) -> None:
    response = core.call(60, 1, describe_cluster.DescribeClusterRequest())
    assert response.cluster_id == core.broker.cluster_id
    assert response.controller_id == 1
    assert [(b.broker_id, b.host, b.port) for b in response.brokers] == [(1, "127.0.0.1", 9999)]
    controllers = core.call(60, 1, describe_cluster.DescribeClusterRequest(endpoint_type=2))
    assert controllers.error_code == ErrorCode.UNSUPPORTED_ENDPOINT_TYPE


# -- groups through the broker ---------------------------------------------------------------------


def test_join_group_parks_and_completes_through_poll(core: Any) -> None:
    join = join_group.JoinGroupRequest
    protocols = [join.JoinGroupRequestProtocol(name="range", metadata=b"m")]
    body = join(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        protocol_type="consumer",
        protocols=protocols,
    )
    required = core.call(11, 9, body, conn_id=3)
    assert required.error_code == ErrorCode.MEMBER_ID_REQUIRED
    member = required.member_id
    rejoin = join(
        group_id="g",
        session_timeout_ms=10_000,
        rebalance_timeout_ms=10_000,
        member_id=member,
        protocol_type="consumer",
        protocols=protocols,
    )
    outcome = core.send(11, 9, rejoin, conn_id=3)
    if isinstance(outcome, Parked):
        completions = core.poll(1)
        [done] = [c for c in completions if c.conn_id == 3]
        joined = core.decode(done.reply)
    else:
        joined = core.decode(outcome)
    assert joined.error_code == 0 and joined.leader == member
    sync = sync_group.SyncGroupRequest(
        group_id="g",
        generation_id=joined.generation_id,
        member_id=member,
        protocol_type="consumer",
        protocol_name="range",
        assignments=[
            sync_group.SyncGroupRequest.SyncGroupRequestAssignment(
                member_id=member, assignment=b"a"
            )
        ],
    )
    synced = core.call(14, 5, sync, conn_id=3)
    assert (synced.error_code, synced.assignment) == (0, b"a")


# -- robustness and periodic work ------------------------------------------------------------


def test_trailing_bytes_after_a_body_are_ignored_like_kafka(core: Any) -> None:
    # librdkafka 2.x's "all topics" Metadata v12 request, byte for byte: three
    # stray zero bytes follow the body, and Kafka accepts it.
    frame = bytes.fromhex("0003000c00000003000772646b61666b610000000000010000")
    outcome = core.broker.handle_frame(1, frame, core.now)
    assert isinstance(outcome, Reply)
    assert outcome.correlation_id == 3 and outcome.body.topics == []


def test_a_handler_bug_becomes_unknown_server_error(
    core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    import dataclasses

    def broken(ctx: Any, request: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setitem(HANDLERS, 20, dataclasses.replace(HANDLERS[20], handle=broken))
    response = core.call(20, 5, delete_topics.DeleteTopicsRequest(topic_names=["a"]))
    assert response.responses[0].error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    # and the broker carries on
    assert core.call(60, 1, describe_cluster.DescribeClusterRequest()).error_code == 0


def test_a_metadata_v13_refused_whole_carries_the_code_at_the_top_too(
    core: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Metadata v13's top-level error code (KIP-1102) is 0 in an answer; an
    error response (Kafka's ``MetadataRequest.getErrorResponse``) sets it as
    well as each topic's."""
    import dataclasses

    ask = metadata.MetadataRequest(topics=[metadata.MetadataRequest.MetadataRequestTopic(name="t")])
    assert core.call(3, 13, ask).error_code == ErrorCode.NONE

    def broken(ctx: Any, request: Any) -> Any:
        raise RuntimeError("bug")

    monkeypatch.setitem(HANDLERS, 3, dataclasses.replace(HANDLERS[3], handle=broken))
    response = core.call(3, 13, ask)
    assert response.error_code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert [t.error_code for t in response.topics] == [ErrorCode.UNKNOWN_SERVER_ERROR]


def test_retention_runs_from_poll(data_dir: Path, make_batch: Any) -> None:
    config = BrokerConfig(
        port=0,
        data_dir=data_dir,
        log_segment_bytes=300,
        log_retention_ms=60_000,
        log_retention_check_interval_ms=1000,
    )
    now = 1_700_000_000_000
    broker = Broker(config, now_ms=now)
    try:
        broker.logs.create_topic("old", 1, now_ms=now)
        log = broker.logs.partition("old", 0)
        for i in range(5):  # an hour old: past retention, one segment each
            log.append(make_batch([b"x" * 150], timestamp=now - 3_600_000 + i), now_ms=now)
        assert log.log_start_offset == 0
        assert broker.next_deadline() <= now + 1000
        broker.poll(now + 500)
        assert log.log_start_offset == 0  # not yet due
        broker.poll(now + 1000)
        assert log.log_start_offset == 4  # all but the active segment deleted
    finally:
        broker.close()


@pytest.mark.parametrize(
    "journal",
    [
        "trafka-groups.journal",
        "trafka-share-groups.journal",
        "trafka-scram.journal",
        "trafka-transactions.journal",
        "trafka-share-state.journal",
        "trafka-quotas.journal",
        "trafka-delegation-tokens.journal",
        "trafka-features.journal",
        "trafka-client-metrics.journal",
    ],
)
def test_an_unreadable_store_stops_the_start_and_releases_everything(
    open_core: Any, data_dir: Path, journal: str
) -> None:
    """Whichever of its stores a broker cannot open, it refuses to start, closes
    what it had opened (the data directory's lock first of all: a second start
    in this process would otherwise find it taken) and starts once the store is
    readable, with what the other stores kept."""
    first = open_core()
    create(first, "kept", 1)
    first.broker.close()
    (data_dir / journal).unlink(missing_ok=True)
    (data_dir / journal).mkdir()
    with pytest.raises(Exception, match=journal.replace(".", r"\.")):
        open_core()
    (data_dir / journal).rmdir()
    again = open_core()
    assert again.broker.logs.topic("kept") is not None


def test_an_acks_all_answer_keeps_the_leader_endpoints_of_its_hints() -> None:
    """KIP-951: a Produce v10+ answer that names another partition's leader
    (NOT_LEADER_OR_FOLLOWER with ``current_leader``) carries that leader's
    endpoint in ``node_endpoints``; an answer that first waited for acks=all is
    no exception (it was sent without them)."""
    from types import SimpleNamespace

    from trafka.brokerlite.handlers.k00_produce import _AcksAllWaiter

    endpoint = produce.ProduceResponse.NodeEndpoint(node_id=2, host="h2", port=9092, rack=None)
    written = produce.ProduceResponse.PartitionProduceResponse(index=0, error_code=0, base_offset=5)
    hinted = produce.ProduceResponse.PartitionProduceResponse(
        index=1,
        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
        base_offset=-1,
        current_leader=produce.ProduceResponse.LeaderIdAndEpoch(leader_id=2, leader_epoch=3),
    )
    responses = [produce.ProduceResponse.TopicProduceResponse(
        name="t", partition_responses=[written, hinted]
    )]  # fmt: skip
    replicas = SimpleNamespace(acks_all_outcome=lambda topic, partition, need: ErrorCode.NONE)
    waiter = _AcksAllWaiter(
        SimpleNamespace(replicas=replicas),  # type: ignore[arg-type]
        responses,
        [(0, 0, "t", 0, 6)],
        deadline_ms=1000,
        version=11,
        endpoints=[endpoint],
    )
    assert waiter.decided()
    answer = waiter.complete(0)
    assert answer.node_endpoints == [endpoint]
    assert answer.responses[0].partition_responses == [written, hinted]
