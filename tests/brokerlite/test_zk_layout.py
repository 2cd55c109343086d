"""The ZooKeeper layout (:mod:`trafka.brokerlite.cluster.zk_layout`): Kafka 3.9's ZkData documents.

The expected JSON documents and the "Kafka-written" samples are written by hand
from Kafka's ``kafka.zk.ZkData`` encoders (``TopicZNode``, ``TopicPartitionStateZNode``,
``BrokerIdZNode`` version 5, ``ControllerZNode`` versions 1 and 2,
``ClusterIdZNode``, ``ConfigEntityZNode``, ``ProducerIdBlockZNode``), in the key
order and with the extra fields Kafka writes, so that decoding is checked against
Kafka's documents and not only against our own encoder.
"""

from __future__ import annotations

import base64
import json
import uuid
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trafka.brokerlite.cluster import zk_layout
from trafka.brokerlite.cluster.zk_layout import (
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    ZkDataError,
    broker_path,
    decode_broker,
    decode_cluster_id,
    decode_controller,
    decode_controller_epoch,
    decode_partition_state,
    decode_producer_id_block,
    decode_topic,
    decode_topic_config,
    encode_broker,
    encode_cluster_id,
    encode_controller,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic,
    encode_topic_config,
    partition_state_path,
    topic_config_path,
    topic_id_text,
    topic_path,
)

NOW = 1_718_000_000_000
TOPIC_ID = uuid.UUID("a56e2155-dd9c-483c-901a-6dd9e31df351")
TOPIC_ID_TEXT = "pW4hVd2cSDyQGm3Z4x3zUQ"  # Kafka's Uuid.toString of TOPIC_ID


def doc(data: bytes) -> Any:
    return json.loads(data)


# -- paths --------------------------------------------------------------------------------


def test_paths_are_kafkas() -> None:
    assert zk_layout.CLUSTER_ID == "/cluster/id"
    assert zk_layout.CONTROLLER == "/controller"
    assert zk_layout.CONTROLLER_EPOCH == "/controller_epoch"
    assert zk_layout.BROKER_IDS == "/brokers/ids"
    assert zk_layout.BROKER_TOPICS == "/brokers/topics"
    assert zk_layout.CONFIG_TOPICS == "/config/topics"
    assert zk_layout.ADMIN_DELETE_TOPICS == "/admin/delete_topics"
    assert zk_layout.PRODUCER_ID_BLOCK == "/latest_producer_id_block"
    assert broker_path(3) == "/brokers/ids/3"
    assert topic_path("orders") == "/brokers/topics/orders"
    assert partition_state_path("orders", 7) == "/brokers/topics/orders/partitions/7/state"
    assert topic_config_path("orders") == "/config/topics/orders"


# -- topic ids ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("topic_id", "text"),
    [
        # Kafka's Uuid.ZERO_UUID and Uuid.METADATA_TOPIC_ID (new Uuid(0L, 1L)).
        (uuid.UUID(int=0), "AAAAAAAAAAAAAAAAAAAAAA"),
        (uuid.UUID(int=1), "AAAAAAAAAAAAAAAAAAAAAQ"),
        (TOPIC_ID, TOPIC_ID_TEXT),
        # URL-safe alphabet: '-' and '_' where standard base64 has '+' and '/'.
        (uuid.UUID(bytes=b"\xfb\xef\xbe" * 5 + b"\xff"), "--------------------_w"),
    ],
)
def test_topic_id_text_is_kafkas_uuid_string(topic_id: uuid.UUID, text: str) -> None:
    assert topic_id_text(topic_id) == text
    assert len(text) == 22


@given(st.uuids())
def test_topic_id_text_is_url_safe_base64_without_padding(topic_id: uuid.UUID) -> None:
    text = topic_id_text(topic_id)
    assert len(text) == 22
    assert "=" not in text and "+" not in text and "/" not in text
    assert base64.urlsafe_b64decode(text + "==") == topic_id.bytes


# -- cluster id ---------------------------------------------------------------------------


def test_cluster_id_document() -> None:
    # ClusterIdZNode.toJson writes the version as a string.
    assert doc(encode_cluster_id("hwWFk0QpTl-0iB4Fgcp9Lw")) == {
        "version": "1",
        "id": "hwWFk0QpTl-0iB4Fgcp9Lw",
    }


@given(st.text(min_size=1))
def test_cluster_id_round_trip(cluster_id: str) -> None:
    assert decode_cluster_id(encode_cluster_id(cluster_id)) == cluster_id


def test_cluster_id_written_by_kafka() -> None:
    assert decode_cluster_id(b'{"version":"1","id":"hwWFk0QpTl-0iB4Fgcp9Lw"}') == (
        "hwWFk0QpTl-0iB4Fgcp9Lw"
    )


@pytest.mark.parametrize(
    "data",
    [b"", b"not json", b'"abc"', b"[]", b"{}", b'{"version":"1","id":""}', b'{"id":42}'],
)
def test_bad_cluster_id(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="/cluster/id"):
        decode_cluster_id(data)


# -- controller ---------------------------------------------------------------------------


def test_controller_document() -> None:
    """Kafka 3.9's ``ControllerZNode.encode``: version 2, and a ZooKeeper
    controller's ``kraftControllerEpoch`` is -1."""
    assert doc(encode_controller(2, NOW)) == {
        "version": 2,
        "brokerid": 2,
        "timestamp": str(NOW),
        "kraftControllerEpoch": -1,
    }


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**62))
def test_controller_round_trip(node_id: int, timestamp: int) -> None:
    assert decode_controller(encode_controller(node_id, timestamp)) == node_id


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":1,"brokerid":1,"timestamp":"1718000000000"}',
        # Kafka 3.4+ ControllerZNode version 2 (a KRaft controller during migration).
        b'{"version":2,"brokerid":3000,"timestamp":"1718000000000","kraftControllerEpoch":7}',
    ],
)
def test_controller_written_by_kafka(data: bytes) -> None:
    assert decode_controller(data) == json.loads(data)["brokerid"]


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"1",
        b"[1]",
        b'{"version":1}',
        b'{"brokerid":null}',
        b'{"brokerid":1.5}',
        b'{"brokerid":true}',
        b'{"brokerid":[1]}',
        b'{"brokerid":"one"}',
        b'{"brokerid":NaN}',
        b'{"brokerid":1e400}',
        b"\xff\xfe\x00",
    ],
)
def test_bad_controller(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="/controller"):
        decode_controller(data)


@pytest.mark.parametrize("text", [b"0", b"1", b"42", b"42\n", b" 7 "])
def test_controller_epoch(text: bytes) -> None:
    # ControllerEpochZNode: the epoch as decimal text.
    assert decode_controller_epoch(text) == int(text)


@pytest.mark.parametrize("text", [b"", b"-1", b"1.0", b"x", b"\xff", b'{"epoch":1}'])
def test_bad_controller_epoch(text: bytes) -> None:
    with pytest.raises(ZkDataError, match="/controller_epoch"):
        decode_controller_epoch(text)


# -- brokers ------------------------------------------------------------------------------


def test_broker_document_is_version_5() -> None:
    data = encode_broker(BrokerRegistration(1, "kafka-1.example.com", 9092), NOW)
    assert doc(data) == {
        "version": 5,
        "host": "kafka-1.example.com",
        "port": 9092,
        "jmx_port": -1,
        "timestamp": str(NOW),
        "endpoints": ["PLAINTEXT://kafka-1.example.com:9092"],
        "listener_security_protocol_map": {"PLAINTEXT": "PLAINTEXT"},
        "features": {},
    }


def test_broker_document_with_rack_and_protocol() -> None:
    data = encode_broker(BrokerRegistration(2, "b2", 9094, "SASL_SSL", "us-east-1a"), NOW)
    d = doc(data)
    assert d["rack"] == "us-east-1a"
    assert d["endpoints"] == ["SASL_SSL://b2:9094"]
    assert d["listener_security_protocol_map"] == {"SASL_SSL": "SASL_SSL"}
    assert "rack" not in doc(encode_broker(BrokerRegistration(2, "b2", 9094), NOW))


def test_broker_ipv6_host_is_bracketed_in_the_endpoint() -> None:
    # Kafka's EndPoint.connectionString uses Utils.formatAddress: [host]:port for IPv6.
    broker = BrokerRegistration(3, "2001:db8::1", 9092)
    d = doc(encode_broker(broker, NOW))
    assert d["endpoints"] == ["PLAINTEXT://[2001:db8::1]:9092"]
    assert d["host"] == "2001:db8::1"
    assert decode_broker(3, encode_broker(broker, NOW)) == broker


hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9.-]{0,30}", fullmatch=True),
    st.ip_addresses().map(str),
)


@given(
    node_id=st.integers(0, 2**31 - 1),
    host=hosts,
    port=st.integers(1, 65535),
    protocol=st.sampled_from(["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]),
    rack=st.none() | st.text(min_size=1),
)
def test_broker_round_trip(
    node_id: int, host: str, port: int, protocol: str, rack: str | None
) -> None:
    broker = BrokerRegistration(node_id, host, port, protocol, rack)
    assert decode_broker(node_id, encode_broker(broker, NOW)) == broker


def test_broker_written_by_kafka() -> None:
    # BrokerIdZNode version 5 as Kafka 3.9 writes it (a single PLAINTEXT listener).
    data = (
        b'{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://kafka-1.example.com:9092"],"jmx_port":9999,'
        b'"port":9092,"host":"kafka-1.example.com","version":5,"timestamp":"1718000000000"}'
    )
    assert decode_broker(1, data) == BrokerRegistration(1, "kafka-1.example.com", 9092)


def test_broker_with_named_listeners_and_rack_written_by_kafka() -> None:
    # Listener names map to protocols; the first endpoint is the one taken.
    data = (
        b'{"features":{"metadata.version":{"min_version":1,"max_version":21}},'
        b'"listener_security_protocol_map":{"INTERNAL":"SASL_PLAINTEXT","EXTERNAL":"SASL_SSL"},'
        b'"endpoints":["INTERNAL://10.0.0.5:19092","EXTERNAL://broker2.example.com:9094"],'
        b'"rack":"us-east-1a","jmx_port":-1,"port":-1,"host":null,"version":5,'
        b'"timestamp":"1718000000000"}'
    )
    assert decode_broker(2, data) == BrokerRegistration(
        2, "10.0.0.5", 19092, "SASL_PLAINTEXT", "us-east-1a"
    )


def test_ssl_only_broker_written_by_kafka() -> None:
    # Without a PLAINTEXT endpoint Kafka writes host null and port -1: the endpoint counts.
    data = (
        b'{"listener_security_protocol_map":{"SSL":"SSL"},"endpoints":["SSL://b3:9093"],'
        b'"jmx_port":-1,"port":-1,"host":null,"version":5,"timestamp":"1718000000000",'
        b'"features":{}}'
    )
    assert decode_broker(3, data) == BrokerRegistration(3, "b3", 9093, "SSL")


def test_ipv6_broker_written_by_kafka() -> None:
    data = (
        b'{"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},'
        b'"endpoints":["PLAINTEXT://[fe80::1%25eth0]:9092"],"jmx_port":-1,'
        b'"port":9092,"host":"fe80::1%25eth0","version":5,"timestamp":"1","features":{}}'
    )
    assert decode_broker(4, data).host == "fe80::1%25eth0"
    assert decode_broker(4, data).port == 9092


def test_broker_without_protocol_map_uses_the_listener_name() -> None:
    data = b'{"version":5,"endpoints":["SSL://h:9093"]}'
    assert decode_broker(1, data) == BrokerRegistration(1, "h", 9093, "SSL")


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b"{}",
        b'{"endpoints":[]}',
        b'{"endpoints":"PLAINTEXT://h:1"}',
        b'{"endpoints":[42]}',
        b'{"endpoints":[null]}',
        b'{"endpoints":["h:9092"]}',
        b'{"endpoints":["PLAINTEXT://h"]}',
        b'{"endpoints":["PLAINTEXT://h:"]}',
        b'{"endpoints":["PLAINTEXT://h:port"]}',
        b'{"endpoints":["PLAINTEXT://h:-1"]}',
        b'{"endpoints":["PLAINTEXT://h:90 92"]}',
        b'{"host":"h","port":9092,"version":1}',  # no endpoints at all (version 1)
    ],
)
def test_bad_broker(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="/brokers/ids/5"):
        decode_broker(5, data)


# -- topics ---------------------------------------------------------------------------------


def test_topic_document_is_version_3() -> None:
    topic = TopicAssignment("orders", TOPIC_ID, {0: (1, 2)})
    assert doc(encode_topic(topic)) == {
        "version": 3,
        "topic_id": TOPIC_ID_TEXT,
        "partitions": {"0": [1, 2]},
        "adding_replicas": {},
        "removing_replicas": {},
    }


def test_topic_document_with_a_reassignment() -> None:
    topic = TopicAssignment(
        "orders",
        TOPIC_ID,
        {1: (4, 2, 3, 1), 0: (1, 2, 3)},
        adding={1: (4,)},
        removing={1: (1,)},
    )
    assert doc(encode_topic(topic)) == {
        "version": 3,
        "topic_id": TOPIC_ID_TEXT,
        "partitions": {"0": [1, 2, 3], "1": [4, 2, 3, 1]},
        "adding_replicas": {"1": [4]},
        "removing_replicas": {"1": [1]},
    }
    assert decode_topic("orders", encode_topic(topic)) == topic


def test_a_partition_with_nothing_removed_is_left_out_of_removing_replicas() -> None:
    """Kafka's TopicZNode lists in ``adding_replicas`` (``removing_replicas``)
    only the partitions with replicas being added (removed): a move that only adds
    one writes ``"removing_replicas":{}``."""
    topic = TopicAssignment("orders", TOPIC_ID, {0: (1, 2)}, adding={0: (2,)}, removing={0: ()})
    assert doc(encode_topic(topic))["removing_replicas"] == {}
    assert doc(encode_topic(topic))["adding_replicas"] == {"0": [2]}


def _partition_maps(n: int) -> st.SearchStrategy[dict[int, tuple[int, ...]]]:
    replicas = st.lists(st.integers(0, 2**31 - 1), min_size=1, max_size=5).map(tuple)
    return st.fixed_dictionaries({p: replicas for p in range(n)})


@given(
    name=st.from_regex(r"[a-zA-Z0-9._-]{1,40}", fullmatch=True),
    topic_id=st.uuids(),
    replicas=st.integers(1, 20).flatmap(_partition_maps),
    adding=st.dictionaries(st.integers(0, 19), st.lists(st.integers(0, 99), min_size=1).map(tuple)),
    removing=st.dictionaries(
        st.integers(0, 19), st.lists(st.integers(0, 99), min_size=1).map(tuple)
    ),
)
def test_topic_round_trip(
    name: str,
    topic_id: uuid.UUID,
    replicas: dict[int, tuple[int, ...]],
    adding: dict[int, tuple[int, ...]],
    removing: dict[int, tuple[int, ...]],
) -> None:
    topic = TopicAssignment(name, topic_id, replicas, adding, removing)
    decoded = decode_topic(name, encode_topic(topic))
    assert decoded == topic
    assert decoded.num_partitions == len(replicas)


def test_topic_written_by_kafka() -> None:
    data = (
        b'{"partitions":{"2":[3,1,2],"0":[1,2,3],"1":[2,3,1]},'
        b'"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","adding_replicas":{},'
        b'"removing_replicas":{},"version":3}'
    )
    assert decode_topic("orders", data) == TopicAssignment(
        "orders", TOPIC_ID, {0: (1, 2, 3), 1: (2, 3, 1), 2: (3, 1, 2)}
    )


def test_topic_under_reassignment_written_by_kafka() -> None:
    # ReplicaAssignment.fromOriginalAndTarget([1,2,3] -> [4,2,3]): the full set is
    # target ++ original, distinct.
    data = (
        b'{"removing_replicas":{"0":[1]},"partitions":{"0":[4,2,3,1]},'
        b'"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","adding_replicas":{"0":[4]},"version":3}'
    )
    topic = decode_topic("orders", data)
    assert topic.replicas == {0: (4, 2, 3, 1)}
    assert topic.adding == {0: (4,)}
    assert topic.removing == {0: (1,)}


def test_topic_without_reassignment_fields_decodes() -> None:
    data = b'{"version":3,"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":[1]}}'
    topic = decode_topic("t", data)
    assert topic.adding == {} and topic.removing == {}


BAD_TOPICS = {
    "not json": b"{",
    "not an object": b"[1,2]",
    "not utf-8": b"\xff\xff",
    # Kafka 2.7 and older wrote no topic id (version 1 and 2 documents).
    "no topic id": b'{"version":2,"partitions":{"0":[1]},"adding_replicas":{},'
    b'"removing_replicas":{}}',
    "topic id null": b'{"topic_id":null,"partitions":{"0":[1]}}',
    "topic id a number": b'{"topic_id":7,"partitions":{"0":[1]}}',
    "topic id in UUID form": b'{"topic_id":"a56e2155-dd9c-483c-901a-6dd9e31df351",'
    b'"partitions":{"0":[1]}}',
    "topic id too short": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zU","partitions":{"0":[1]}}',
    "topic id too long": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQA","partitions":{"0":[1]}}',
    "topic id padded": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3z==","partitions":{"0":[1]}}',
    "topic id bad characters": b'{"topic_id":"!!!!!!!!!!!!!!!!!!!!!!","partitions":{"0":[1]}}',
    "topic id not ascii": '{"topic_id":"\u00e9AAAAAAAAAAAAAAAAAAAAA","partitions":{"0":[1]}}'.encode(),
    "no partitions": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ"}',
    "partitions empty": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{}}',
    "partitions a list": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":[[1]]}',
    "partitions not from 0": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"1":[1]}}',
    "partitions with a gap": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ",'
    b'"partitions":{"0":[1],"2":[1]}}',
    "negative partition": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":[1],"-1":[1]}}',
    "partition not a number": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"a":[1]}}',
    "replicas not a list": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":1}}',
    "replica a string": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":["1"]}}',
    "replica a bool": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":[true]}}',
    "replica a float": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":[1.0]}}',
    "adding not an object": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":[1]},'
    b'"adding_replicas":[1]}',
    "removing bad replicas": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":[1]},'
    b'"removing_replicas":{"0":"1"}}',
    "adding bad partition": b'{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"0":[1]},'
    b'"adding_replicas":{"x":[1]}}',
}


@pytest.mark.parametrize("data", list(BAD_TOPICS.values()), ids=list(BAD_TOPICS))
def test_bad_topic(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="/brokers/topics/orders"):
        decode_topic("orders", data)


# -- topic configs ----------------------------------------------------------------------------


def test_topic_config_document() -> None:
    assert doc(encode_topic_config({"retention.ms": "86400000"})) == {
        "version": 1,
        "config": {"retention.ms": "86400000"},
    }


@given(st.dictionaries(st.text(), st.text()))
def test_topic_config_round_trip(configs: dict[str, str]) -> None:
    assert decode_topic_config("t", encode_topic_config(configs)) == configs


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            b'{"version":1,"config":{"retention.ms":"86400000","cleanup.policy":"compact"}}',
            {"retention.ms": "86400000", "cleanup.policy": "compact"},
        ),
        (b'{"version":1,"config":{}}', {}),
        (b'{"version":1}', {}),
    ],
)
def test_topic_config_written_by_kafka(data: bytes, expected: dict[str, str]) -> None:
    assert decode_topic_config("orders", data) == expected


@pytest.mark.parametrize(
    "data",
    [
        b"nope",
        b"[]",
        b'{"config":null}',
        b'{"config":[["a","b"]]}',
        b'{"config":{"retention.ms":86400000}}',
        b'{"config":{"a":null}}',
    ],
)
def test_bad_topic_config(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="/config/topics/orders"):
        decode_topic_config("orders", data)


# -- partition state --------------------------------------------------------------------------


def test_partition_state_document() -> None:
    data = encode_partition_state(PartitionState(1, 0, (1, 2), 1, zk_version=9))
    # The znode version is ZooKeeper's, never part of the document.
    assert doc(data) == {
        "controller_epoch": 1,
        "leader": 1,
        "version": 1,
        "leader_epoch": 0,
        "isr": [1, 2],
    }


@given(
    leader=st.integers(-1, 2**31 - 1),
    leader_epoch=st.integers(0, 2**31 - 1),
    isr=st.lists(st.integers(0, 2**31 - 1), max_size=6).map(tuple),
    controller_epoch=st.integers(0, 2**31 - 1),
    zk_version=st.integers(0, 2**31 - 1),
)
def test_partition_state_round_trip(
    leader: int, leader_epoch: int, isr: tuple[int, ...], controller_epoch: int, zk_version: int
) -> None:
    state = PartitionState(leader, leader_epoch, isr, controller_epoch, zk_version)
    data = encode_partition_state(state)
    assert decode_partition_state("t", 0, data, zk_version) == state


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (
            b'{"controller_epoch":3,"leader":2,"version":1,"leader_epoch":5,"isr":[2,3]}',
            PartitionState(2, 5, (2, 3), 3, 11),
        ),
        # Offline: no leader, the last ISR kept.
        (
            b'{"controller_epoch":3,"leader":-1,"version":1,"leader_epoch":6,"isr":[2]}',
            PartitionState(-1, 6, (2,), 3, 11),
        ),
        # Kafka 3.2+ adds leader_recovery_state when it is not RECOVERED (KIP-704).
        (
            b'{"controller_epoch":4,"leader":3,"version":1,"leader_epoch":7,"isr":[3],'
            b'"leader_recovery_state":1}',
            PartitionState(3, 7, (3,), 4, 11),
        ),
    ],
)
def test_partition_state_written_by_kafka(data: bytes, expected: PartitionState) -> None:
    assert decode_partition_state("orders", 0, data, 11) == expected


BAD_STATES = {
    "not json": b"leader=1",
    "not an object": b"[1]",
    "no leader": b'{"leader_epoch":0,"isr":[1],"controller_epoch":1}',
    "no leader epoch": b'{"leader":1,"isr":[1],"controller_epoch":1}',
    "no isr": b'{"leader":1,"leader_epoch":0,"controller_epoch":1}',
    "no controller epoch": b'{"leader":1,"leader_epoch":0,"isr":[1]}',
    "leader a float": b'{"leader":1.0,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
    "leader a bool": b'{"leader":false,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
    "leader null": b'{"leader":null,"leader_epoch":0,"isr":[1],"controller_epoch":1}',
    "leader epoch text": b'{"leader":1,"leader_epoch":"zero","isr":[1],"controller_epoch":1}',
    "isr not a list": b'{"leader":1,"leader_epoch":0,"isr":1,"controller_epoch":1}',
    "isr of strings": b'{"leader":1,"leader_epoch":0,"isr":["1"],"controller_epoch":1}',
    "isr nested": b'{"leader":1,"leader_epoch":0,"isr":[[1]],"controller_epoch":1}',
    "isr an object": b'{"leader":1,"leader_epoch":0,"isr":{"1":1},"controller_epoch":1}',
}


@pytest.mark.parametrize("data", list(BAD_STATES.values()), ids=list(BAD_STATES))
def test_bad_partition_state(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="/brokers/topics/orders/partitions/3/state"):
        decode_partition_state("orders", 3, data, 0)


# -- producer id blocks ----------------------------------------------------------------------


def test_producer_id_block_document() -> None:
    # ProducerIdBlockZNode writes the bounds as strings.
    assert doc(encode_producer_id_block(1, 1000, 1999)) == {
        "version": 1,
        "broker": 1,
        "block_start": "1000",
        "block_end": "1999",
    }


@given(st.integers(0, 2**31 - 1), st.integers(0, 2**63 - 1), st.integers(0, 2**63 - 1))
def test_producer_id_block_round_trip(node_id: int, start: int, end: int) -> None:
    assert decode_producer_id_block(encode_producer_id_block(node_id, start, end)) == (start, end)


def test_producer_id_block_written_by_kafka() -> None:
    data = b'{"version":1,"broker":2,"block_start":"5000","block_end":"5999"}'
    assert decode_producer_id_block(data) == (5000, 5999)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"[]",
        b'{"version":1,"broker":1}',
        b'{"block_start":"0"}',
        b'{"block_start":"0","block_end":"x"}',
        b'{"block_start":"1-2","block_end":"3"}',
        b'{"block_start":"0","block_end":9.5}',
        b'{"block_start":"","block_end":"1"}',
    ],
)
def test_bad_producer_id_block(data: bytes) -> None:
    with pytest.raises(ZkDataError, match="/latest_producer_id_block"):
        decode_producer_id_block(data)


# -- documents that must be refused but are not (bugs) ------------------------------------------

# zk_layout checks numbers with str.isdigit() (after lstrip("-") in _int), which is
# true for "--1", superscripts and every Unicode digit; int() then raises a plain
# ValueError, which the driver (cluster.py catches ZkDataError only) does not expect.
CRASHING = {
    "controller brokerid '--1'": lambda: decode_controller(b'{"brokerid":"--1"}'),
    "controller brokerid superscript": lambda: decode_controller('{"brokerid":"\u00b2"}'.encode()),
    "producer id block '--5'": lambda: decode_producer_id_block(
        b'{"block_start":"--5","block_end":"9"}'
    ),
    "partition state leader '-superscript'": lambda: decode_partition_state(
        "orders",
        0,
        '{"leader":"-\u00b2","leader_epoch":0,"isr":[1],"controller_epoch":1}'.encode(),
        0,
    ),
    "broker port superscript": lambda: decode_broker(
        1, '{"endpoints":["PLAINTEXT://h:\u00b2"]}'.encode()
    ),
    "topic partition superscript": lambda: decode_topic(
        "orders",
        '{"topic_id":"pW4hVd2cSDyQGm3Z4x3zUQ","partitions":{"\u00b2":[1]}}'.encode(),
    ),
}


@pytest.mark.parametrize("decode", list(CRASHING.values()), ids=list(CRASHING))
def test_malformed_numbers_raise_zk_data_error(decode: Any) -> None:
    with pytest.raises(ZkDataError):
        decode()


def test_endpoint_port_in_non_ascii_digits_is_refused() -> None:
    with pytest.raises(ZkDataError):
        decode_broker(1, '{"endpoints":["PLAINTEXT://h:\u0661\u0662"]}'.encode())


def test_deeply_nested_json_raises_zk_data_error() -> None:
    # 200 kB: well under ZooKeeper's default 1 MB znode limit (jute.maxbuffer).
    with pytest.raises(ZkDataError):
        decode_controller(b"[" * 100_000 + b"]" * 100_000)


# -- /feature (Kafka 3.9's FeatureZNode) ----------------------------------------------------------


def test_feature_znode_is_kafkas_document() -> None:
    """Kafka 3.9's ``FeatureZNode.encode`` (version 2): status 1 (enabled), each
    finalized feature with its ``max_version_level`` alone, a level 0 left out;
    its ``decode`` also reads version 1 (``min_version_level`` too), and a
    disabled status (0) finalizes nothing."""
    data = zk_layout.encode_features(
        {"transaction.version": 2, "group.version": 0, "share.version": 1}
    )
    assert json.loads(data) == {
        "version": 2,
        "status": 1,
        "features": {
            "transaction.version": {"max_version_level": 2},
            "share.version": {"max_version_level": 1},
        },
    }
    assert zk_layout.decode_features(data) == {"transaction.version": 2, "share.version": 1}
    v1 = b'{"version":1,"status":1,"features":{"f":{"min_version_level":1,"max_version_level":3}}}'
    assert zk_layout.decode_features(v1) == {"f": 3}
    assert zk_layout.decode_features(b'{"version":2,"status":0,"features":{}}') == {}


@pytest.mark.parametrize(
    "data",
    [
        b'{"version":3,"status":1,"features":{}}',
        b'{"version":2,"features":{}}',
        b'{"version":2,"status":1}',
        b'{"version":2,"status":1,"features":{"f":{"max_version_level":0}}}',
        b'{"version":2,"status":1,"features":{"f":{"max_version_level":"2"}}}',
        b'{"version":2,"status":1,"features":{"f":2}}',
    ],
)
def test_a_feature_znode_kafka_would_refuse_raises_zk_data_error(data: bytes) -> None:
    with pytest.raises(ZkDataError):
        zk_layout.decode_features(data)
