"""librdkafka's (confluent-kafka's) configuration names in trafka's configs.

* A librdkafka name that means exactly what a trafka setting means is an alias
  of it: the value lands on that setting (librdkafka's CONFIGURATION.md names
  each pair: ``queue.buffering.max.ms`` is ``linger.ms``, ``compression.codec`` is
  ``compression.type``, ``fetch.wait.max.ms`` / ``fetch.max.wait.ms`` bound the
  broker's wait for ``fetch.min.bytes``, ``fetch.message.max.bytes`` is
  ``max.partition.fetch.bytes``, ``request.required.acks`` is ``acks``,
  ``message.send.max.retries`` is ``retries``, ``max.in.flight`` is
  ``max.in.flight.requests.per.connection``, ``metadata.broker.list`` is
  ``bootstrap.servers``).
* librdkafka's ``auto.offset.reset`` spellings (smallest, beginning, largest,
  end, error) mean earliest, latest and none.
* ``enable.partition.eof`` is taken by the consumer with librdkafka's default,
  false (CONFIGURATION.md: "Emit RD_KAFKA_RESP_ERR__PARTITION_EOF event
  whenever the consumer reaches the end of a partition", default false, "not
  supported for share consumers"); what it does is in test_sdk_partition_eof.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from trafka.sdk.config import (
    AdminConfig,
    ConsumerConfig,
    ProducerConfig,
    ShareConsumerConfig,
)
from trafka.sdk.config.keys import _names, _norm
from trafka.sdk.errors import ConfigError

PRODUCER_ALIASES = [
    ("queue.buffering.max.ms", 3, "linger_ms"),
    ("compression.codec", "lz4", "compression_type"),
    ("request.required.acks", 1, "acks"),
    ("message.send.max.retries", 4, "retries"),
    ("max.in.flight", 2, "max_in_flight_requests_per_connection"),
    ("metadata.broker.list", "h:1", "bootstrap_servers"),
]
CONSUMER_ALIASES = [
    ("fetch.wait.max.ms", 77, "fetch_max_wait_ms"),
    ("fetch.message.max.bytes", 4096, "max_partition_fetch_bytes"),
]


@pytest.mark.parametrize(("key", "value", "attr"), PRODUCER_ALIASES)
def test_librdkafka_producer_names_set_the_same_setting(key: str, value: Any, attr: str) -> None:
    cfg = ProducerConfig.from_dict({key: value, "request.timeout.ms": 1_000})
    expected = (value,) if attr == "bootstrap_servers" else value
    assert getattr(cfg, attr) == expected
    # The same value under trafka's own name gives the same config.
    dotted = next(k for k, v in cfg.to_dict().items() if _names(ProducerConfig)[_norm(k)] == attr)
    assert ProducerConfig.from_dict({dotted: value, "request.timeout.ms": 1_000}) == cfg


@pytest.mark.parametrize(("key", "value", "attr"), CONSUMER_ALIASES)
def test_librdkafka_consumer_names_set_the_same_setting(key: str, value: Any, attr: str) -> None:
    assert getattr(ConsumerConfig.from_dict({key: value}), attr) == value


def test_the_fetch_wait_alias_holds_for_share_consumers_too() -> None:
    cfg = ShareConsumerConfig.from_dict({"group.id": "g", "fetch.wait.max.ms": 9})
    assert cfg.fetch_max_wait_ms == 9


def test_an_alias_and_its_name_together_are_one_option_given_twice() -> None:
    with pytest.raises(ConfigError, match="set the same option"):
        ProducerConfig.from_dict({"message.timeout.ms": 5_000, "delivery.timeout.ms": 6_000})


@pytest.mark.parametrize(
    ("value", "policy"),
    [
        ("smallest", "earliest"),
        ("beginning", "earliest"),
        ("largest", "latest"),
        ("end", "latest"),
        ("error", "none"),
        ("EARLIEST", "earliest"),
    ],
)
def test_librdkafkas_offset_reset_spellings(value: str, policy: str) -> None:
    assert ConsumerConfig.from_dict({"auto.offset.reset": value}).auto_offset_reset == policy


def test_an_unknown_offset_reset_lists_every_spelling() -> None:
    with pytest.raises(ConfigError, match=r"latest, earliest, none.*smallest"):
        ConsumerConfig.from_dict({"auto.offset.reset": "oldest"})


def test_on_commit_must_be_callable_and_is_a_consumer_setting() -> None:
    assert ConsumerConfig.from_dict({"on_commit": print}).on_commit is print
    with pytest.raises(ConfigError, match="on_commit must be a callable"):
        ConsumerConfig.from_dict({"on_commit": "print"})
    with pytest.raises(ConfigError, match="is a ConsumerConfig setting"):
        ProducerConfig.from_dict({"on_commit": print})


def test_the_offset_store_setting_is_librdkafkas_and_a_consumers() -> None:
    assert ConsumerConfig().enable_auto_offset_store
    assert not ConsumerConfig.from_dict(
        {"enable.auto.offset.store": "false"}
    ).enable_auto_offset_store
    with pytest.raises(ConfigError, match="is a ConsumerConfig setting"):
        ShareConsumerConfig.from_dict({"group.id": "g", "enable.auto.offset.store": False})


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ({}, False),
        ({"enable.partition.eof": "true"}, True),
        ({"enable.partition.eof": False}, False),
    ],
)
def test_partition_eof_is_a_consumer_setting_off_by_default(
    given: dict[str, Any], expected: bool
) -> None:
    assert ConsumerConfig.from_dict(given).enable_partition_eof is expected
    assert ConsumerConfig.from_dict({"enable_partition_eof": expected}).enable_partition_eof is (
        expected
    )


@pytest.mark.parametrize("cls", [ProducerConfig, AdminConfig])
def test_partition_eof_belongs_to_the_consumer(cls: type[Any]) -> None:
    with pytest.raises(ConfigError, match="is a ConsumerConfig setting"):
        cls.from_dict({"enable.partition.eof": True})


def test_a_share_consumer_refuses_partition_eof_saying_why() -> None:
    with pytest.raises(ConfigError, match="not a share consumer setting: records are shared"):
        ShareConsumerConfig.from_dict({"group.id": "g", "enable.partition.eof": True})


def test_a_typo_still_gets_its_near_name() -> None:
    with pytest.raises(ConfigError, match=r"did you mean 'delivery\.timeout\.ms'"):
        ProducerConfig.from_dict({"delivery.timeout.msx": 1})
