"""Deleting a group's committed offsets (OffsetDelete, KIP-496) against brokerlite:
trafka's admin and kafka-python's ``delete_group_offsets`` on a classic group
with an active member (its subscribed topic is refused, the others deleted), a
KIP-848 group, an unknown group, and ``trafka groups delete-offsets``."""

from __future__ import annotations

import time
from collections.abc import Iterator

import anyio
import pytest
from click.testing import CliRunner
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer
from trafka.tools.cli import main as cli

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(
        tmp_path_factory,
        "offset-delete",
        group_consumer_min_heartbeat_interval_ms=200,
        group_consumer_heartbeat_interval_ms=200,
    )


async def _setup(bs: str, group: str) -> tuple[str, str]:
    """Two topics with committed offsets of ``group`` on both (no members yet)."""
    watched, other = fresh("watched"), fresh("other")
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(watched, 2), NewTopic(other, 2)])
        await admin.alter_consumer_group_offsets(
            group, {TopicPartition(t, p): 3 for t in (watched, other) for p in (0, 1)}
        )
    return watched, other


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_a_member_keeps_its_topics_offsets_the_others_go(
    broker: RunningBroker, protocol: str
) -> None:
    bs, group = broker.bootstrap_servers, fresh("g")

    async def main() -> None:
        watched, other = await _setup(bs, group)
        async with (
            open_consumer(
                bootstrap_servers=bs,
                group_id=group,
                group_protocol=protocol,
                enable_auto_commit=False,
            ) as member,
            open_admin(bootstrap_servers=bs) as admin,
        ):
            member.subscribe([watched])
            with anyio.fail_after(20):
                while not member.assignment():
                    await member.getmany(timeout_ms=50)
            with pytest.raises(KafkaError) as caught:
                await admin.delete_consumer_group_offsets(
                    group, [TopicPartition(watched, 0), TopicPartition(other, 0)]
                )
            assert caught.value.code == ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC
            assert f"{watched}-0" in str(caught.value)
            await admin.delete_consumer_group_offsets(group, [(other, 1)])
            left = await admin.list_consumer_group_offsets(group)
            # The refused partition kept its offset; the others' went, as Kafka does.
            assert set(left) == {TopicPartition(watched, 0), TopicPartition(watched, 1)}

    anyio.run(main, backend="trio")


def test_kafka_python_deletes_offsets_and_is_told_what_it_may_not(
    broker: RunningBroker,
) -> None:
    from kafka import KafkaAdminClient, KafkaConsumer
    from kafka import TopicPartition as KTP
    from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError

    bs, group = broker.bootstrap_servers, fresh("g")
    watched, other = anyio.run(_setup, bs, group)
    admin = KafkaAdminClient(bootstrap_servers=bs)
    member = KafkaConsumer(bootstrap_servers=bs, group_id=group)
    try:
        # kafka-python's leader assigns only the partitions its metadata knows, and
        # then waits for its next metadata refresh (5 minutes) to join again: let
        # it see the new topic before it joins.
        deadline = time.monotonic() + 60
        while not member.partitions_for_topic(watched):
            assert time.monotonic() < deadline, "kafka-python never saw the topic"
            time.sleep(0.05)
        member.subscribe([watched])
        while not member.assignment():
            assert time.monotonic() < deadline, "kafka-python's member got no assignment"
            member.poll(timeout_ms=100)
        result = admin.delete_group_offsets(group, [KTP(watched, 0), KTP(other, 0)])
        assert result == {
            KTP(watched, 0): GroupSubscribedToTopicError,
            KTP(other, 0): NoError,
        }
        with pytest.raises(GroupIdNotFoundError):
            admin.delete_group_offsets(fresh("nobody"), [KTP(other, 0)])
    finally:
        member.close()
        admin.close()


def test_unknown_group_and_the_command_line(broker: RunningBroker) -> None:
    bs, group = broker.bootstrap_servers, fresh("g")
    watched, other = anyio.run(_setup, bs, group)

    async def unknown() -> None:
        async with open_admin(bootstrap_servers=bs) as admin:
            with pytest.raises(KafkaError) as caught:
                await admin.delete_consumer_group_offsets(fresh("nobody"), [(other, 0)])
            assert caught.value.code == ErrorCode.GROUP_ID_NOT_FOUND

    anyio.run(unknown, backend="trio")
    runner = CliRunner()
    done = runner.invoke(
        cli, ["groups", "delete-offsets", group, "-t", other, "-t", f"{watched}:1", "-b", bs]
    )
    assert done.exit_code == 0, done.output
    assert "3 partition(s)" in done.output

    async def left() -> set[TopicPartition]:
        async with open_admin(bootstrap_servers=bs) as admin:
            return set(await admin.list_consumer_group_offsets(group))

    assert anyio.run(left, backend="trio") == {TopicPartition(watched, 0)}
    refused = runner.invoke(cli, ["groups", "delete-offsets", "nobody-here", "-t", other, "-b", bs])
    assert refused.exit_code != 0 and "GROUP_ID_NOT_FOUND" in refused.output
