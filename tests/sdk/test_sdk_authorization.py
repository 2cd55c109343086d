"""trafka's clients against brokerlite with ACLs: what a refusal looks like to the
caller (an error at once, naming the Kafka code, never a wait), and that the
same calls work once an ACL allows them."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    NewTopic,
    PatternType,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.errors import TransactionFatalError

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

USERS = {"admin": "admin-pw", "alice": "alice-pw"}
ALICE = "User:alice"


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[RunningBroker]:
    """A broker per test: ACLs one test grants must not leak into the next
    (an idempotent producer may write once it may write any topic)."""
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path,
        group_initial_rebalance_delay_ms=0,
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        super_users=("User:admin",),
    ) as running:
        yield running


def login(broker: RunningBroker, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": broker.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


async def allow(
    broker: RunningBroker, resource: AclResourceType, name: str, *ops: AclOperation
) -> None:
    async with open_admin(**login(broker, "admin")) as admin:
        created = await admin.create_acls(
            [
                AclBinding(
                    resource, name, PatternType.LITERAL, ALICE, "*", op, AclPermissionType.ALLOW
                )
                for op in ops
            ]
        )
    assert all(error is None for error in created.values()), created


async def topic(broker: RunningBroker, records: int = 0) -> str:
    name = fresh("authz")
    async with open_admin(**login(broker, "admin")) as admin:
        await admin.create_topics([NewTopic(name, 1, 1)])
    if records:
        async with open_producer(**login(broker, "admin")) as producer:
            for i in range(records):
                await producer.send(name, b"r%d" % i)
    return name


async def test_producer_refused_then_allowed(broker: RunningBroker) -> None:
    name = await topic(broker)
    with anyio.fail_after(60):
        # Without DESCRIBE the topic is invisible: the send fails at the first
        # metadata answer (max.block.ms is a minute).
        async with open_producer(enable_idempotence=False, **login(broker, "alice")) as producer:
            with pytest.raises(KafkaError) as info:
                await producer.send(name, b"x")
            assert info.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        await allow(broker, AclResourceType.TOPIC, name, AclOperation.DESCRIBE)
        # Seen, not writable: the broker refuses the Produce itself.
        async with open_producer(enable_idempotence=False, **login(broker, "alice")) as producer:
            with pytest.raises(KafkaError) as info:
                await producer.send_and_wait(name, b"x")
            assert info.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        # An idempotent producer needs WRITE on some topic (KIP-679) before it
        # even gets its producer id.
        async with open_producer(**login(broker, "alice")) as producer:
            with pytest.raises(KafkaError) as info:
                await producer.send_and_wait(name, b"x")
            assert info.value.code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            assert "IDEMPOTENT_WRITE on the cluster" in str(info.value)  # says what to grant
        await allow(broker, AclResourceType.TOPIC, name, AclOperation.WRITE)
        async with open_producer(**login(broker, "alice")) as producer:
            written = await producer.send_and_wait(name, b"x")
    assert written.offset == 0


async def test_transactional_id_needs_write(broker: RunningBroker) -> None:
    name = await topic(broker)
    tid = fresh("tid")
    await allow(broker, AclResourceType.TOPIC, name, AclOperation.WRITE)
    with anyio.fail_after(60):
        async with open_producer(transactional_id=tid, **login(broker, "alice")) as producer:
            with pytest.raises(TransactionFatalError) as info:
                await producer.init_transactions()
            assert info.value.code == ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            assert f"WRITE on transactional id {tid!r}" in str(info.value)
        await allow(broker, AclResourceType.TRANSACTIONAL_ID, tid, AclOperation.WRITE)
        async with open_producer(transactional_id=tid, **login(broker, "alice")) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send(name, b"in a transaction")
            await producer.commit_transaction()
    async with open_consumer(
        bootstrap_servers=broker.bootstrap_servers,
        isolation_level="read_committed",
        **{k: v for k, v in login(broker, "admin").items() if k != "bootstrap_servers"},
    ) as consumer:
        consumer.assign([TopicPartition(name, 0)])
        consumer.seek_to_beginning()
        with anyio.fail_after(30):
            got = await consumer.getmany(timeout_ms=10_000)
    assert [r.value for rs in got.values() for r in rs] == [b"in a transaction"]


async def test_consumer_group_and_topic_reads(broker: RunningBroker) -> None:
    name = await topic(broker, records=3)
    group = fresh("g")
    settings = {**login(broker, "alice"), "group_id": group, "auto_offset_reset": "earliest"}
    with anyio.fail_after(60):
        async with open_consumer(name, **settings) as consumer:
            with pytest.raises(KafkaError) as info:
                await consumer.getmany(timeout_ms=5000)
            assert info.value.code == ErrorCode.GROUP_AUTHORIZATION_FAILED
            assert f"READ on group {group!r}" in str(info.value)
        # An assigned consumer needs no group, but READ on the topic.
        await allow(broker, AclResourceType.TOPIC, name, AclOperation.DESCRIBE)
        async with open_consumer(**login(broker, "alice")) as consumer:
            consumer.assign([TopicPartition(name, 0)])
            with pytest.raises(KafkaError) as info:
                await consumer.getmany(timeout_ms=5000)
            assert info.value.code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
            assert f"READ on topic {name!r}" in str(info.value)
        await allow(broker, AclResourceType.TOPIC, name, AclOperation.READ)
        await allow(broker, AclResourceType.GROUP, group, AclOperation.READ)
        got: list[bytes] = []
        async with open_consumer(name, **settings) as consumer:
            while len(got) < 3:
                batch = await consumer.getmany(timeout_ms=5000)
                got.extend(r.value for rs in batch.values() for r in rs)
            await consumer.commit()
    assert got == [b"r0", b"r1", b"r2"]
