"""The same misuses against brokerlite, Kafka 3.9 and Kafka 4.x: the same Kafka
error code, raised as the same SDK exception class, on every peer.

The codes are Kafka's own answers, as its protocol guide's error table
(errors.json) and the APIs' docs state them:

* CreateTopics: a name taken is TOPIC_ALREADY_EXISTS (36); a replication
  factor above the brokers' count is INVALID_REPLICATION_FACTOR (38); an
  invalid value of a topic config (``cleanup.policy=bogus``) is INVALID_CONFIG
  (40); zero partitions is refused before sending (the SDK's own check).
* Metadata (admin, ``allow_auto_topic_creation`` false), DeleteTopics and
  ListOffsets: an unknown topic, or a partition the topic does not have, is
  UNKNOWN_TOPIC_OR_PARTITION (3). A record sent to a partition the topic lacks
  is refused by the SDK itself, with that code, on every peer (Java's producer
  refuses it too, as a plain KafkaException).
* Produce: a batch above the topic's ``max.message.bytes`` is MESSAGE_TOO_LARGE
  (10), the record failing alone once the producer has split the batch down to
  it.
* IncrementalAlterConfigs: an invalid value is INVALID_CONFIG (40).
* DeleteRecords on a topic whose ``cleanup.policy`` lacks ``delete`` is
  POLICY_VIOLATION (44): a compacted topic's records go only by compaction
  (Kafka's ``Partition.deleteRecordsOnLeader``; brokerlite deleted them).
* A transactional producer fenced by a newer one with the same
  ``transactional.id`` (KIP-98; PRODUCER_FENCED, 90, since KIP-588) raises
  ``ProducerFencedError``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
import pytest
from kafka_fixtures import Peer
from sdk_brokers import fresh

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_producer
from trafka.sdk.admin import Admin
from trafka.sdk.errors import KafkaError, ProducerFencedError

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


Case = Callable[[str, Admin, str], Awaitable[Any]]


async def _already_exists(bs: str, admin: Admin, topic: str) -> None:
    await admin.create_topics([NewTopic(topic, 1)])


async def _replication_factor(bs: str, admin: Admin, topic: str) -> None:
    await admin.create_topics([NewTopic(fresh("rf"), 1, replication_factor=3)])


async def _invalid_topic_config(bs: str, admin: Admin, topic: str) -> None:
    await admin.create_topics([NewTopic(fresh("cfg"), 1, configs={"cleanup.policy": "bogus"})])


async def _invalid_alter_config(bs: str, admin: Admin, topic: str) -> None:
    await admin.alter_topic_configs({topic: {"cleanup.policy": "bogus"}})


async def _unknown_topic_describe(bs: str, admin: Admin, topic: str) -> None:
    await admin.describe_topics([fresh("nope")])


async def _unknown_topic_delete(bs: str, admin: Admin, topic: str) -> None:
    await admin.delete_topics([fresh("nope")])


async def _unknown_partition(bs: str, admin: Admin, topic: str) -> None:
    await admin.list_offsets({TopicPartition(topic, 7): "latest"})


async def _produce_unknown_partition(bs: str, admin: Admin, topic: str) -> None:
    async with open_producer(bootstrap_servers=bs, max_block_ms=5000) as producer:
        await producer.send_and_wait(topic, b"v", partition=7)


async def _record_too_large(bs: str, admin: Admin, topic: str) -> None:
    async with open_producer(bootstrap_servers=bs, linger_ms=0) as producer:
        await producer.send_and_wait(topic, b"x" * 4000, partition=0)


async def _delete_compacted(bs: str, admin: Admin, topic: str) -> None:
    compacted = fresh("compacted")
    await admin.create_topics([NewTopic(compacted, 1, configs={"cleanup.policy": "compact"})])
    await admin.list_offsets({TopicPartition(compacted, 0): "latest"})
    await admin.delete_records({TopicPartition(compacted, 0): 0})


async def _fenced(bs: str, admin: Admin, topic: str) -> None:
    tid = fresh("tid")
    async with open_producer(bootstrap_servers=bs, transactional_id=tid) as old:
        await old.init_transactions()
        old.begin_transaction()
        await old.send_and_wait(topic, b"zombie", partition=0)
        async with open_producer(bootstrap_servers=bs, transactional_id=tid) as new:
            await new.init_transactions()
        await old.commit_transaction()


CASES: dict[str, tuple[Case, type[Exception], str]] = {
    "topic already exists": (_already_exists, KafkaError, "TOPIC_ALREADY_EXISTS"),
    "invalid replication factor": (_replication_factor, KafkaError, "INVALID_REPLICATION_FACTOR"),
    "invalid config (create)": (_invalid_topic_config, KafkaError, "INVALID_CONFIG"),
    "invalid config (alter)": (_invalid_alter_config, KafkaError, "INVALID_CONFIG"),
    "unknown topic (describe)": (_unknown_topic_describe, KafkaError, "UNKNOWN_TOPIC_OR_PARTITION"),
    "unknown topic (delete)": (_unknown_topic_delete, KafkaError, "UNKNOWN_TOPIC_OR_PARTITION"),
    "unknown partition": (_unknown_partition, KafkaError, "UNKNOWN_TOPIC_OR_PARTITION"),
    "produce to a partition it lacks": (
        _produce_unknown_partition,
        KafkaError,
        "UNKNOWN_TOPIC_OR_PARTITION",
    ),
    "record too large": (_record_too_large, KafkaError, "MESSAGE_TOO_LARGE"),
    "delete records, compacted topic": (_delete_compacted, KafkaError, "POLICY_VIOLATION"),
    "fenced producer": (_fenced, ProducerFencedError, "PRODUCER_FENCED"),
}


@pytest.mark.compat("SDK", "errors: Kafka's codes and the SDK's classes for misuses")
async def test_misuses_fail_alike_on_every_peer(peer: Peer) -> None:
    bs, topic = peer.bootstrap_servers, fresh("err")
    outcomes: dict[str, tuple[str, str]] = {}
    with anyio.fail_after(90):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1, configs={"max.message.bytes": "1024"})])
            await admin.list_offsets({TopicPartition(topic, 0): "latest"})
            for name, (case, _, _) in CASES.items():
                try:
                    await case(bs, admin, topic)
                except KafkaError as exc:
                    outcomes[name] = (type(exc).__name__, exc.code.name)
                else:
                    outcomes[name] = ("no error", "")
    expected = {name: (cls.__name__, code) for name, (_, cls, code) in CASES.items()}
    assert outcomes == expected
