"""Commits with metadata (OffsetAndMetadata), plain and transactional, read back
by another client (kafka-python's admin) from brokerlite."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import kafka
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk import (
    NewTopic,
    OffsetAndMetadata,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "commit-metadata")


def read_back(servers: str, group: str) -> dict[int, Any]:
    """The group's committed offsets by partition, as kafka-python's admin reads
    them (OffsetFetch): each with ``.offset`` and ``.metadata``."""
    admin = kafka.KafkaAdminClient(bootstrap_servers=servers)
    try:
        got = admin.list_group_offsets(group)
    finally:
        admin.close()
    return {tp.partition: om for tp, om in got[group].items()}


def test_offset_and_metadata_is_its_offset() -> None:
    o = OffsetAndMetadata(42, "batch 7")
    assert o == 42 and o.offset == 42 and o + 1 == 43 and o.metadata == "batch 7"
    assert repr(o) == "OffsetAndMetadata(42, 'batch 7')"


def test_commit_with_metadata_is_read_back_by_another_client(broker: RunningBroker) -> None:
    topic, group = fresh("meta"), fresh("meta-group")
    servers = broker.bootstrap_servers

    async def main() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
        async with open_consumer(bootstrap_servers=servers, group_id=group) as consumer:
            consumer.assign([TopicPartition(topic, 0), TopicPartition(topic, 1)])
            await consumer.commit(
                {
                    TopicPartition(topic, 0): OffsetAndMetadata(0, "checkpoint a"),
                    TopicPartition(topic, 1): 0,  # a plain offset: empty metadata
                }
            )

    anyio.run(main, backend="trio")
    by_partition = read_back(servers, group)
    assert (by_partition[0].offset, by_partition[0].metadata) == (0, "checkpoint a")
    assert (by_partition[1].offset, by_partition[1].metadata) == (0, "")


def test_transactional_offsets_keep_their_metadata(broker: RunningBroker) -> None:
    """KIP-98's TxnOffsetCommit carries each partition's ``committed_metadata``
    as OffsetCommit does; once the transaction commits, OffsetFetch (kafka-python's
    admin here) returns it, as Java's ``sendOffsetsToTransaction`` with an
    ``OffsetAndMetadata`` does."""
    topic, group, tid = fresh("txn-meta"), fresh("txn-meta-group"), fresh("txn-meta-id")
    servers = broker.bootstrap_servers

    async def main() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
        async with open_producer(bootstrap_servers=servers, transactional_id=tid) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            # Metadata that is no string is refused at the call, as commit() does.
            with pytest.raises(TypeError, match=r"offsets\[.*\]\.metadata must be"):
                await producer.send_offsets_to_transaction(
                    {TopicPartition(topic, 0): OffsetAndMetadata(0, 7)},
                    group,
                )
            await producer.send_offsets_to_transaction(
                {
                    TopicPartition(topic, 0): OffsetAndMetadata(0, "txn checkpoint"),
                    TopicPartition(topic, 1): 0,  # a plain offset: empty metadata
                },
                group,
            )
            await producer.commit_transaction()

    anyio.run(main, backend="trio")
    by_partition = read_back(servers, group)
    assert (by_partition[0].offset, by_partition[0].metadata) == (0, "txn checkpoint")
    assert (by_partition[1].offset, by_partition[1].metadata) == (0, "")
