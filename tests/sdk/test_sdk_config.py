"""ProducerConfig / ConsumerConfig / AdminConfig: names, defaults, coercion, errors."""

from __future__ import annotations

import pytest

from trafka.sdk.config import AdminConfig, ConsumerConfig, ProducerConfig, make_config
from trafka.sdk.errors import ConfigError


def test_kafka_defaults() -> None:
    p = ProducerConfig()
    assert p.acks == -1
    assert p.linger_ms == 5
    assert p.batch_size == 1_000_000  # librdkafka's (docs/sdk.md says why not Java's)
    assert p.buffer_memory == 32 * 1024 * 1024
    assert p.delivery_timeout_ms == 120_000
    assert p.retries == 2**31 - 1
    assert p.idempotent
    c = ConsumerConfig()
    assert c.auto_offset_reset == "latest"
    assert c.session_timeout_ms == 45_000
    assert c.max_poll_records == 500
    assert c.partition_assignment_strategy == ("range", "cooperative-sticky")
    assert not c.auto_commit  # no group: nothing to commit
    assert ConsumerConfig(group_id="g").auto_commit
    assert AdminConfig().default_api_timeout_ms == 60_000


def test_dotted_and_snake_names_and_string_values() -> None:
    cfg = ProducerConfig.from_dict(
        {
            "bootstrap.servers": "a:1, b:2",
            "linger.ms": "7",
            "acks": "all",
            "enable.idempotence": "false",
        },
        batch_size=10,
    )
    assert cfg.bootstrap_servers == ("a:1", "b:2")
    assert cfg.bootstrap_addresses == [("a", 1), ("b", 2)]
    assert cfg.linger_ms == 7
    assert cfg.batch_size == 10
    assert cfg.enable_idempotence is False
    assert not cfg.idempotent


def test_keywords_override_mapping() -> None:
    cfg = make_config(ProducerConfig, {"linger.ms": 1}, {"linger_ms": 9})
    assert cfg.linger_ms == 9
    cfg2 = make_config(ProducerConfig, cfg, {"linger.ms": 3})
    assert cfg2.linger_ms == 3 and cfg.linger_ms == 9


def test_unknown_key_names_closest() -> None:
    with pytest.raises(ConfigError, match=r"'linger\.msx'.*did you mean 'linger\.ms'"):
        ProducerConfig.from_dict({"linger.msx": 1})
    with pytest.raises(ConfigError, match="auto_offset_reset"):
        ConsumerConfig.from_dict(auto_ofset_reset="earliest")


def test_key_of_another_component() -> None:
    with pytest.raises(ConfigError, match="ConsumerConfig setting"):
        ProducerConfig.from_dict({"group.id": "g"})


def test_same_key_twice_in_one_source() -> None:
    with pytest.raises(ConfigError, match="same option"):
        ProducerConfig.from_dict({"linger.ms": 1, "linger_ms": 2})


@pytest.mark.parametrize(
    ("key", "value", "pattern"),
    [
        ("acks", 2, "acks"),
        ("acks", "some", "acks"),
        ("linger.ms", -1, "linger.ms must be >= 0"),
        ("linger.ms", True, "integer"),
        ("linger.ms", "5ms", "integer"),
        ("compression.type", "brotli", "compression.type"),
        ("bootstrap.servers", "host:", "host:port"),
        ("bootstrap.servers", "has space", "host:port"),
        ("bootstrap.servers", "h:99999", "host:port"),
        ("partitioner", "nope", "partitioner"),
        ("value.serializer", 3, "value.serializer"),
    ],
)
def test_invalid_producer_values(key: str, value: object, pattern: str) -> None:
    with pytest.raises(ConfigError, match=pattern):
        ProducerConfig.from_dict({key: value})


def test_idempotence_conflicts() -> None:
    assert not ProducerConfig(acks=1).idempotent
    assert not ProducerConfig(max_in_flight_requests_per_connection=6).idempotent
    with pytest.raises(ConfigError, match="acks must be all"):
        ProducerConfig(acks=1, enable_idempotence=True)
    # replace keeps "unset", so changing acks later is not an explicit conflict
    assert not ProducerConfig().replace(acks=0).idempotent


def test_consumer_validation() -> None:
    with pytest.raises(ConfigError, match=r"heartbeat\.interval\.ms"):
        ConsumerConfig(heartbeat_interval_ms=10, session_timeout_ms=10)
    with pytest.raises(ConfigError, match=r"group\.instance\.id requires group\.id"):
        ConsumerConfig(group_instance_id="x")
    with pytest.raises(ConfigError, match=r"isolation\.level"):
        ConsumerConfig.from_dict({"isolation.level": "dirty"})
    cfg = ConsumerConfig.from_dict(
        {
            "partition.assignment.strategy": "org.apache.kafka.clients.consumer.RoundRobinAssignor,sticky"
        }
    )
    assert cfg.partition_assignment_strategy == ("roundrobin", "sticky")
    with pytest.raises(ConfigError, match="unknown assignor"):
        ConsumerConfig(partition_assignment_strategy=["magic"])


def test_config_object_of_wrong_class() -> None:
    with pytest.raises(ConfigError, match="expected a ProducerConfig"):
        make_config(ProducerConfig, ConsumerConfig(), {})


def test_to_dict_round_trip() -> None:
    cfg = ConsumerConfig(group_id="g", fetch_max_wait_ms=10)
    d = cfg.to_dict()
    assert d["group.id"] == "g" and d["fetch.max.wait.ms"] == 10
    assert ConsumerConfig.from_dict(d) == cfg


@pytest.mark.parametrize(
    ("server", "address"),
    [
        ("localhost", ("localhost", 9092)),
        ("[::1]", ("::1", 9092)),
        ("[::1]:9093", ("::1", 9093)),
        ("kafka.example:19092", ("kafka.example", 19092)),
    ],
)
def test_a_server_without_a_port_is_on_9092(server: str, address: tuple[str, int]) -> None:
    config = ProducerConfig.from_dict({"bootstrap.servers": server})
    assert config.bootstrap_addresses == [address]
