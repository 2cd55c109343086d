"""The SDK's consumer groups against Apache Kafka itself (3.9 on ZooKeeper, 4.x
on KRaft): every client-side assignor of the classic protocol, cooperative
rebalancing, static membership, commits, seek, offsets_for_times and
pause/resume; KIP-848's ``group.protocol=consumer`` on Kafka 4.

What Kafka defines and these tests check:

* the assignors' splits, as Kafka's javadoc states them: RangeAssignor gives
  each member a contiguous range of every topic's partitions, the first
  members (sorted by member id) one more when they do not divide evenly;
  RoundRobinAssignor deals all partitions, sorted by topic then partition,
  to the members in turn; the sticky assignors (KIP-54, KIP-429) keep the
  counts within one of each other;
* KIP-429 (incremental cooperative rebalancing): with ``cooperative-sticky`` a
  member that keeps partitions is never asked to revoke them when another
  joins, only those that move; the eager protocol revokes everything;
* KIP-345 (static membership): a member that leaves with ``group.instance.id``
  set sends no LeaveGroup, and rejoining with the same id within the session
  gets the same assignment without a rebalance (the generation stays);
* KIP-848: with ``group.protocol=consumer`` the coordinator assigns, and two
  members split the partitions.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from kafka_peers import KafkaCluster
from sdk_brokers import fresh

from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.consumer import Consumer

pytestmark = pytest.mark.anyio

FAST: dict[str, Any] = {"heartbeat_interval_ms": 200, "auto_offset_reset": "earliest"}


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _topics(bs: str, *topics: tuple[str, int]) -> None:
    """Create the topics and wait until every partition has a leader that answers.

    CreateTopics answers before every broker's metadata has the topic, and
    ListOffsets fails on a topic the metadata does not have, as Java's admin
    client does (ListOffsetsHandler does not tolerate unknown topics): so the
    topics' offsets are asked for again while the brokers do not know them yet."""
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(t, n) for t, n in topics])
        while True:
            try:
                await admin.list_offsets(
                    {TopicPartition(t, p): "latest" for t, n in topics for p in range(n)}
                )
                return
            except KafkaError as exc:
                if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                    raise
            await anyio.sleep(0.05)


class Revocations:
    """A rebalance listener that records what each call handed over."""

    def __init__(self) -> None:
        self.revoked: list[set[TopicPartition]] = []
        self.assigned: list[set[TopicPartition]] = []

    async def on_partitions_revoked(self, partitions: Any) -> None:
        self.revoked.append(set(partitions))

    async def on_partitions_assigned(self, partitions: Any) -> None:
        self.assigned.append(set(partitions))


async def _settle(
    members: list[Consumer[Any, Any]], total: int, *, classic: bool = True
) -> dict[TopicPartition, list[int]]:
    """Poll every member until they hold ``total`` partitions between them, each
    some, none twice (on one generation: the classic protocol's); the offsets
    handed out meanwhile."""
    offsets: dict[TopicPartition, list[int]] = {}
    while True:
        for m in members:
            for tp, recs in (await m.getmany(timeout_ms=50)).items():
                offsets.setdefault(tp, []).extend(r.offset for r in recs)
        held = [m.assignment() for m in members]
        generations = {m.group_metadata().generation_id for m in members}
        if (
            all(held)
            and sum(map(len, held)) == total
            and len(set().union(*held)) == total
            and (len(generations) == 1 or not classic)
        ):
            return offsets


def _expected(strategy: str, first: str, second: str, topics: list[str]) -> dict[str, set[Any]]:
    parts = [TopicPartition(t, p) for t in topics for p in range(3)]
    lo, hi = sorted([first, second])
    if strategy == "range":  # per topic: partitions 0-1 to the first member id, 2 to the next
        return {
            lo: {tp for tp in parts if tp.partition < 2},
            hi: {tp for tp in parts if tp.partition == 2},
        }
    if strategy == "roundrobin":
        return {lo: set(parts[0::2]), hi: set(parts[1::2])}
    return {}


@pytest.mark.compat("SDK", "consumer groups: range, roundrobin, sticky, cooperative-sticky")
async def test_every_assignor_splits_and_rebalances(kafka: KafkaCluster) -> None:
    bs = kafka.bootstrap_servers
    topics = [fresh("asg-a"), fresh("asg-b")]
    everything = {TopicPartition(t, p) for t in topics for p in range(3)}

    async def one(strategy: str) -> None:
        group = fresh(f"g-{strategy}")
        first_listener, second_listener = Revocations(), Revocations()
        settings = dict(FAST, partition_assignment_strategy=[strategy], group_id=group)
        async with open_consumer(*topics, bootstrap_servers=bs, **settings) as first:
            first.subscribe(topics, listener=first_listener)
            await _settle([first], 6)
            assert first.assignment() == everything
            async with open_consumer(*topics, bootstrap_servers=bs, **settings) as second:
                second.subscribe(topics, listener=second_listener)
                await _settle([first, second], 6)
                ids = [first.group_metadata().member_id, second.group_metadata().member_id]
                held = {ids[0]: first.assignment(), ids[1]: second.assignment()}
                expected = _expected(strategy, *ids, topics)
                if expected:
                    assert held == expected, strategy
                else:
                    assert sorted(map(len, held.values())) == [3, 3], strategy
                moved = second.assignment()
                if strategy == "cooperative-sticky":
                    # KIP-429: only what moved is revoked; the first never lost the rest.
                    assert set().union(*first_listener.revoked) == moved
                    assert first_listener.assigned[0] == everything
                else:
                    # Eager: everything is revoked before the rejoin.
                    assert first_listener.revoked[-1] == everything

    with anyio.fail_after(120):
        await _topics(bs, (topics[0], 3), (topics[1], 3))
        async with anyio.create_task_group() as tg:
            for strategy in ("range", "roundrobin", "sticky", "cooperative-sticky"):
                tg.start_soon(one, strategy)


@pytest.mark.compat("SDK", "consumer groups: static membership, commits, seek, pause")
async def test_static_member_commits_seek_and_pause(kafka: KafkaCluster) -> None:
    bs = kafka.bootstrap_servers
    topic, group = fresh("static"), fresh("g-static")
    tps = [TopicPartition(topic, p) for p in range(2)]
    settings = dict(FAST, group_id=group, group_instance_id=fresh("inst"), enable_auto_commit=False)
    with anyio.fail_after(120):
        await _topics(bs, (topic, 2))
        async with open_producer(bootstrap_servers=bs) as producer:
            for i in range(10):
                for tp in tps:
                    await producer.send(
                        topic,
                        b"%d" % i,
                        partition=tp.partition,
                        timestamp_ms=1_700_000_000_000 + i * 1000,
                    )
        async with open_consumer(topic, bootstrap_servers=bs, **settings) as c:
            await _settle([c], 2)
            # Sync commit, then an async one, both read back.
            await c.commit({tps[0]: 3})
            assert await c.committed(tps[0]) == 3
            done = anyio.Event()
            results: list[Any] = []

            def callback(offsets: Any, error: Any) -> None:
                results.append((offsets, error))
                done.set()

            c.commit_async({tps[1]: 7}, callback=callback)
            await done.wait()
            assert results[0][1] is None
            assert await c.committed(tps[1]) == 7
            # offsets_for_times: the first record at or after the time.
            found = await c.offsets_for_times(
                {tps[0]: 1_700_000_004_500, tps[1]: 1_800_000_000_000}
            )
            assert found[tps[0]] == (5, 1_700_000_005_000)
            assert found[tps[1]] is None
            # seek, then pause one partition: only the other hands out records.
            c.seek(tps[0], 8)
            c.seek(tps[1], 8)
            c.pause(tps[1])
            assert c.paused() == {tps[1]}
            got: dict[TopicPartition, list[int]] = {}
            while len(got.get(tps[0], [])) < 2:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    got.setdefault(tp, []).extend(r.offset for r in recs)
            assert got == {tps[0]: [8, 9]}
            c.resume(tps[1])
            while len(got.get(tps[1], [])) < 2:
                for tp, recs in (await c.getmany(timeout_ms=200)).items():
                    got.setdefault(tp, []).extend(r.offset for r in recs)
            assert got[tps[1]] == [8, 9]
            # The generation it leaves with (a rejoin meanwhile, which a loaded
            # machine can cause, is not what this test is about).
            generation = c.group_metadata().generation_id
            member = c.group_metadata().member_id
        # KIP-345: the static member closed without leaving; the same instance id
        # takes its place with the same assignment and no new generation.
        async with open_consumer(topic, bootstrap_servers=bs, **settings) as again:
            got = await _settle([again], 2)
            assert again.group_metadata().generation_id == generation
            assert again.group_metadata().member_id != member
            assert again.assignment() == set(tps)
            # It reads on from the commits.
            while len(got) < 2:
                for tp, recs in (await again.getmany(timeout_ms=200)).items():
                    got.setdefault(tp, []).extend(r.offset for r in recs)
            assert (got[tps[0]][0], got[tps[1]][0]) == (3, 7)


@pytest.mark.compat("SDK", "consumer groups: KIP-848 group.protocol=consumer")
async def test_consumer_protocol_members_split_partitions(kafka4: KafkaCluster) -> None:
    bs = kafka4.bootstrap_servers
    topic, group = fresh("kip848"), fresh("g-848")
    settings: dict[str, Any] = {
        "group_id": group,
        "group_protocol": "consumer",
        "auto_offset_reset": "earliest",
    }
    with anyio.fail_after(120):
        await _topics(bs, (topic, 4))
        async with open_consumer(topic, bootstrap_servers=bs, **settings) as first:
            await _settle([first], 4, classic=False)
            async with open_consumer(topic, bootstrap_servers=bs, **settings) as second:
                await _settle([first, second], 4, classic=False)
                assert sorted([len(first.assignment()), len(second.assignment())]) == [2, 2]
                await first.commit(
                    {
                        TopicPartition(topic, p): 1
                        for p in range(4)
                        if TopicPartition(topic, p) in first.assignment()
                    }
                )
                mine = sorted(first.assignment())
                assert [await first.committed(tp) for tp in mine] == [1, 1]
