"""The client against an in-process brokerlite, on both anyio backends.

brokerlite runs on its own thread (``broker_in_thread``) so that the client can
run on trio and on asyncio against the same broker.

Consumers fetch with ``fetch_max_wait_ms=50`` (:data:`QUICK`) unless the wait is
what a test is about: a consumer's close waits for the fetch the broker holds at
the log's end (one request at a time on a connection, as Kafka answers), 500 ms
with the default, which was a third of this module's time.
"""

from __future__ import annotations

import logging
import select
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.lowlevel
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import consumer_offsets
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.connection import BrokerConnection, request_all
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.errors import DeliveryTimeoutError, UsageError
from trafka.sdk.partitioners import murmur2_partition
from trafka.sdk.producer import open_producer


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "brokerlite", num_partitions=3)


async def _create(bs: str, topic: str, partitions: int = 3) -> None:
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, partitions)])


async def _consume_all(bs: str, tps: list[TopicPartition], n: int, **kw: object) -> list[object]:
    out: list[object] = []
    settings = {**QUICK, **kw}
    async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest", **settings) as c:
        c.assign(tps)
        while len(out) < n:
            got = await c.getmany(timeout_ms=2000)
            for recs in got.values():
                out.extend(recs)
    return out


pytestmark = pytest.mark.anyio

#: Consumer settings: see the module's docstring.
QUICK: dict[str, Any] = {"fetch_max_wait_ms": 50}


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4", "zstd"])
async def test_round_trip_every_codec(broker: RunningBroker, codec: str) -> None:
    bs = broker.bootstrap_servers
    topic = fresh(codec)
    with anyio.fail_after(30):
        await _create(bs, topic, 2)
        async with open_producer(bootstrap_servers=bs, compression_type=codec, linger_ms=5) as p:
            futures = [
                await p.send(
                    topic,
                    b"v%d" % i * 10,
                    key=b"k%d" % i,
                    headers=[("n", str(i))],
                    timestamp_ms=1_700_000_000_000 + i,
                )
                for i in range(50)
            ]
        metas = [await f for f in futures]
        records = await _consume_all(bs, [TopicPartition(topic, 0), TopicPartition(topic, 1)], 50)
    by_key = {r.key: r for r in records}  # type: ignore[attr-defined]
    assert len(by_key) == 50
    for i, md in enumerate(metas):
        r = by_key[b"k%d" % i]
        assert r.value == b"v%d" % i * 10
        assert r.headers == (("n", str(i).encode()),)
        assert r.timestamp == 1_700_000_000_000 + i
        assert (r.partition, r.offset) == (md.partition, md.offset)
        assert md.partition == murmur2_partition(b"k%d" % i, 2)


async def test_consumer_positions_seek_pause_lag(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("pos")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(30):
        await _create(bs, topic, 1)
        async with open_producer(bootstrap_servers=bs, value_serializer="str") as p:
            for i in range(10):
                await p.send(topic, f"m{i}", timestamp_ms=1000 + i * 10)
        # Each seek and offsets lookup below waits for the fetch the broker holds at
        # the log's end (one request at a time on a connection, as Kafka answers):
        # 50 ms rather than 500 (the wait is not what is tested).
        async with open_consumer(
            bootstrap_servers=bs,
            auto_offset_reset="earliest",
            value_deserializer="str",
            fetch_max_wait_ms=50,
        ) as c:
            c.assign([tp])
            assert await c.position(tp) == 0
            got = await c.getmany(timeout_ms=5000, max_records=4)
            assert [r.value for r in got[tp]] == ["m0", "m1", "m2", "m3"]
            assert await c.position(tp) == 4
            assert c.lag(tp) == 6
            c.seek(tp, 8)
            got = await c.getmany(timeout_ms=5000)
            assert [r.offset for r in got[tp]] == [8, 9]
            c.seek_to_beginning(tp)
            first = await c.getone()
            assert first.offset == 0
            c.pause(tp)
            assert await c.getmany(timeout_ms=200) == {}
            c.resume(tp)
            assert (await c.getone()).offset == 1
            assert await c.beginning_offsets([tp]) == {tp: 0}
            assert await c.end_offsets([tp]) == {tp: 10}
            found = await c.offsets_for_times({tp: 1045})
            assert found[tp] is not None and found[tp][0] == 5
            assert (await c.offsets_for_times({tp: 10**13}))[tp] is None
            c.seek_to_end(tp)
            assert await c.position(tp) == 10


async def test_latest_reset_sees_only_new_records(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("latest")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(30):
        await _create(bs, topic, 1)
        async with open_producer(bootstrap_servers=bs) as p:
            await p.send_and_wait(topic, b"old")
            async with open_consumer(bootstrap_servers=bs, **QUICK) as c:
                c.assign([tp])
                assert await c.position(tp) == 1
                await p.send_and_wait(topic, b"new")
                assert (await c.getone()).value == b"new"


async def test_a_position_before_deleted_records_resets_at_once(broker: RunningBroker) -> None:
    # OFFSET_OUT_OF_RANGE under auto.offset.reset=earliest: the answer's path must
    # start the lookup itself (it once waited for the next metadata refresh).
    bs = broker.bootstrap_servers
    topic = fresh("gone")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(30):
        await _create(bs, topic, 1)
        async with open_producer(bootstrap_servers=bs) as p:
            for i in range(10):
                await p.send(topic, b"%d" % i)
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.delete_records({tp: 6})
        async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest", **QUICK) as c:
            c.assign([tp])
            c.seek(tp, 2)
            got = await c.getmany(timeout_ms=3_000)
            assert [r.value for r in got[tp]] == [b"6", b"7", b"8", b"9"]


async def test_offset_bounds_are_the_first_and_end_offsets_in_one_round_trip(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("bounds")
    tps = [TopicPartition(topic, p) for p in range(3)]
    with anyio.fail_after(30):
        await _create(bs, topic, 3)
        async with open_producer(bootstrap_servers=bs) as p:
            for i in range(9):
                await p.send(topic, b"%d" % i, partition=i % 3)
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.delete_records({tps[0]: 2})
        # A missing partition is looked up again a few times (last below): with
        # backoffs of 10 ms, not the default 100 ms doubling (1.5 s in all).
        async with open_consumer(bootstrap_servers=bs, retry_backoff_ms=10) as c:
            firsts, ends = await c.offset_bounds(tps, tps[1:])
            assert firsts == await c.beginning_offsets(tps) == {tps[0]: 2, tps[1]: 0, tps[2]: 0}
            assert ends == {tps[1]: 3, tps[2]: 3}
            # One leader: both requests written back to back, in one call.
            sent: list[list[int]] = []

            async def spy(conn: BrokerConnection, requests: Any, **kw: Any) -> Any:
                sent.append([api_key for api_key, _ in requests])
                return await request_all(conn, requests, **kw)

            monkeypatch.setattr(consumer_offsets, "request_all", spy)
            assert await c.offset_bounds(tps, tps) == (firsts, dict.fromkeys(tps, 3))
            assert sent == [[2, 2]]
            with pytest.raises(KafkaError):
                await c.offset_bounds([TopicPartition(topic, 7)], [])


async def test_admin_operations(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("admin")
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 2, configs={"retention.ms": "100000"})])
            with pytest.raises(KafkaError) as info:
                await admin.create_topics([topic])
            assert info.value.code == ErrorCode.TOPIC_ALREADY_EXISTS
            assert (await admin.list_topics())[topic] == 2
            cluster = await admin.describe_cluster()
            assert cluster.cluster_id and len(cluster.brokers) == 1
            await admin.create_partitions({topic: 3})
            assert (await admin.list_topics())[topic] == 3
            configs = await admin.describe_configs(topics=[topic])
            assert configs[topic]["retention.ms"] == "100000"
            await admin.alter_topic_configs({topic: {"retention.ms": "200000"}})
            assert (await admin.describe_configs(topics=[topic]))[topic]["retention.ms"] == "200000"
            async with open_producer(bootstrap_servers=bs) as p:
                for i in range(5):
                    await p.send(topic, b"x", partition=0, timestamp_ms=5000 + i)
            tp = TopicPartition(topic, 0)
            offsets = await admin.list_offsets({tp: "latest"})
            assert offsets[tp] is not None and offsets[tp][0] == 5
            assert (await admin.delete_records({tp: 3}))[tp] == 3
            earliest = await admin.list_offsets({tp: "earliest"})
            assert earliest[tp] is not None and earliest[tp][0] == 3
            await admin.alter_consumer_group_offsets("admin-group", {tp: 4})
            assert await admin.list_consumer_group_offsets("admin-group") == {tp: 4}
            assert await admin.list_consumer_group_offsets("admin-group", [tp]) == {tp: 4}
            await admin.delete_topics([topic])
            assert topic not in await admin.list_topics()


async def test_admin_never_creates_a_topic_by_looking_it_up(broker: RunningBroker) -> None:
    """The broker creates topics on Metadata requests that allow it; an admin's never
    do (as Kafka's AdminClient's): a missing topic is an error after a few quick
    lookups (a broker may not know a topic just created yet), not after
    default.api.timeout.ms."""
    bs = broker.bootstrap_servers
    missing = fresh("missing")
    with anyio.fail_after(10):  # not after default.api.timeout.ms of waiting for it
        # The lookups' backoff (1.5 s in all with the default) is not what is tested.
        async with open_admin(bootstrap_servers=bs, retry_backoff_ms=10) as admin:
            for call in (
                admin.list_offsets({TopicPartition(missing, 0): "latest"}),
                admin.delete_records({TopicPartition(missing, 0): 0}),
                admin.describe_producers([(missing, 0)]),
            ):
                with pytest.raises(KafkaError) as info:
                    await call
                assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            assert missing not in await admin.list_topics()


async def test_admin_finds_partitions_another_client_added(broker: RunningBroker) -> None:
    """A partition added by another client since this admin read the metadata is
    looked up again, not refused as missing; one that does not exist still is."""
    bs = broker.bootstrap_servers
    topic = fresh("grown")
    with anyio.fail_after(30):
        await _create(bs, topic, 1)
        # A missing partition is looked up again a few times (last below): with
        # backoffs of 10 ms, not the default 100 ms doubling (1.5 s in all).
        async with open_admin(bootstrap_servers=bs, retry_backoff_ms=10) as admin:
            first = TopicPartition(topic, 0)
            assert (await admin.list_offsets({first: "latest"}))[first] is not None
            async with open_admin(bootstrap_servers=bs) as other:
                await other.create_partitions({topic: 3})
            async with open_producer(bootstrap_servers=bs) as p:
                for _ in range(2):
                    await p.send(topic, b"x", partition=2)
            added = TopicPartition(topic, 2)
            latest = await admin.list_offsets({added: "latest"})
            assert latest[added] is not None and latest[added][0] == 2
            assert (await admin.delete_records({added: 1}))[added] == 1
            with pytest.raises(KafkaError) as info:
                await admin.list_offsets({TopicPartition(topic, 3): "latest"})
            assert info.value.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


async def test_group_commit_and_resume(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("grp")
    group = fresh("g")
    with anyio.fail_after(60):
        await _create(bs, topic, 2)
        async with open_producer(bootstrap_servers=bs) as p:
            for i in range(20):
                await p.send(topic, b"%d" % i, partition=i % 2)
        seen = []
        async with open_consumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **QUICK,
        ) as c:
            while len(seen) < 10:
                got = await c.getmany(timeout_ms=5000, max_records=10 - len(seen))
                for recs in got.values():
                    seen.extend(recs)
            assert c.assignment() == {TopicPartition(topic, 0), TopicPartition(topic, 1)}
            await c.commit()
            committed = {tp: await c.committed(tp) for tp in c.assignment()}
            assert sum(v or 0 for v in committed.values()) == 10
        rest = []
        async with open_consumer(
            topic, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest", **QUICK
        ) as c:
            while len(rest) < 10:
                got = await c.getmany(timeout_ms=5000)
                for recs in got.values():
                    rest.extend(recs)
        values = sorted(int(r.value) for r in seen + rest)
        assert values == list(range(20))
        async with open_admin(bootstrap_servers=bs) as admin:
            # auto-commit on close committed what the second consumer consumed
            offsets = await admin.list_consumer_group_offsets(group)
            assert offsets == {TopicPartition(topic, 0): 10, TopicPartition(topic, 1): 10}
            groups = {g.group_id for g in await admin.list_groups()}
            assert group in groups


@pytest.mark.parametrize("strategy", ["range", "roundrobin", "sticky", "cooperative-sticky"])
async def test_group_rebalance_two_members(broker: RunningBroker, strategy: str) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("rb")
    group = fresh("g")
    events: list[tuple[str, str, frozenset[TopicPartition]]] = []

    class Listener:
        def __init__(self, name: str) -> None:
            self.name = name

        async def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
            events.append((self.name, "revoked", frozenset(tps)))

        async def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
            events.append((self.name, "assigned", frozenset(tps)))

    common = dict(
        bootstrap_servers=bs,
        group_id=group,
        partition_assignment_strategy=[strategy],
        heartbeat_interval_ms=100,
        session_timeout_ms=6000,
        auto_offset_reset="earliest",
        **QUICK,
    )
    all_tps = {TopicPartition(topic, i) for i in range(4)}
    with anyio.fail_after(60):
        await _create(bs, topic, 4)
        async with open_consumer(**common) as a:  # type: ignore[arg-type]
            a.subscribe([topic], listener=Listener("a"))
            while a.assignment() != all_tps:
                await a.getmany(timeout_ms=100)
            async with open_consumer(**common) as b:  # type: ignore[arg-type]
                b.subscribe([topic], listener=Listener("b"))
                while not (len(a.assignment()) == 2 and len(b.assignment()) == 2):
                    await a.getmany(timeout_ms=50)
                    await b.getmany(timeout_ms=50)
                assert a.assignment() | b.assignment() == all_tps
                assert not a.assignment() & b.assignment()
            # b left: a takes everything back
            while a.assignment() != all_tps:
                await a.getmany(timeout_ms=50)
    # When b joined, eager protocols made a revoke everything first; the
    # cooperative one revoked only the two partitions that moved to b.
    a_revoked = [tps for name, kind, tps in events if name == "a" and kind == "revoked"]
    assert len(a_revoked[0]) == (2 if strategy == "cooperative-sticky" else 4)


async def _settle(consumers: list[Any], sizes: list[int], everything: set[TopicPartition]) -> None:
    """Poll every consumer until their assignments have these sizes and together
    cover ``everything`` once (the caller's deadline bounds the wait)."""
    while True:
        got = [c.assignment() for c in consumers]
        if [len(g) for g in got] == sizes and set().union(*got) == everything:
            return
        for c in consumers:
            await c.getmany(timeout_ms=20)


async def test_sticky_group_keeps_partitions_through_joins_and_a_leave(
    broker: RunningBroker,
) -> None:
    """Issue #45 item 5, against brokerlite with real trafka members of an eager
    ``sticky`` group. Java's StickyAssignor javadoc: "topic partitions stay with their
    previously assigned consumers as much as possible" (after balance), and its first
    example: when a consumer is removed, the survivors keep all they had. The eager
    protocol revokes everything before each JoinGroup, so this only holds if each
    member's user data tells the leader what it held.
    """
    bs = broker.bootstrap_servers
    topic = fresh("sticky")
    everything = {TopicPartition(topic, i) for i in range(6)}
    common = dict(
        bootstrap_servers=bs,
        group_id=fresh("g"),
        partition_assignment_strategy=["sticky"],
        heartbeat_interval_ms=100,
        session_timeout_ms=6000,
        auto_offset_reset="earliest",
        **QUICK,
    )
    with anyio.fail_after(60):
        await _create(bs, topic, 6)
        async with open_consumer(**common) as a:  # type: ignore[arg-type]
            a.subscribe([topic])
            await _settle([a], [6], everything)
            async with open_consumer(**common) as b:  # type: ignore[arg-type]
                b.subscribe([topic])
                await _settle([a, b], [3, 3], everything)
                # b's three came from a; a kept the other three (the fewest moves).
                a_two, b_two = a.assignment(), b.assignment()
                async with open_consumer(**common) as c:  # type: ignore[arg-type]
                    c.subscribe([topic])
                    await _settle([a, b, c], [2, 2, 2], everything)
                    a_three, b_three = a.assignment(), b.assignment()
                    # c joined: a and b each gave up one partition and kept two.
                    assert a_three <= a_two and b_three <= b_two
                # c left: a and b keep what they had and share c's two.
                await _settle([a, b], [3, 3], everything)
                assert a.assignment() >= a_three and b.assignment() >= b_three


async def test_static_membership(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("static")
    with anyio.fail_after(30):
        await _create(bs, topic, 2)
        async with open_consumer(
            topic,
            bootstrap_servers=bs,
            group_id=fresh("g"),
            group_instance_id="instance-1",
            heartbeat_interval_ms=100,
            **QUICK,
        ) as c:
            while len(c.assignment()) != 2:
                await c.getmany(timeout_ms=50)


@pytest.mark.parametrize("metadata_first", [False, True], ids=["fresh", "after-metadata"])
async def test_pattern_subscription(broker: RunningBroker, metadata_first: bool) -> None:
    """With ``metadata_first`` (issue #45 item 12): a pattern subscribed to once the
    consumer already has metadata (here asked for first; in the flaky run, a
    response to a request that went out without the pattern). The subscription used
    to be matched against that response, which lists none of the pattern's topics,
    and no refresh was due until metadata.max.age.ms (5 minutes): the member joined
    with no topics and got nothing.
    """
    bs = broker.bootstrap_servers
    prefix = fresh("pat")
    with anyio.fail_after(30):
        await _create(bs, f"{prefix}-a", 1)
        await _create(bs, f"{prefix}-b", 1)
        async with open_consumer(
            bootstrap_servers=bs, group_id=fresh("g"), heartbeat_interval_ms=100, **QUICK
        ) as c:
            if metadata_first:
                await c.cluster.refresh_metadata()
            c.subscribe(pattern=f"{prefix}-.*")
            while len(c.assignment()) != 2:
                await c.getmany(timeout_ms=50)
            assert {tp.topic for tp in c.assignment()} == {f"{prefix}-a", f"{prefix}-b"}


@pytest.mark.parametrize(
    ("protocol", "exclude"),
    [("classic", True), ("consumer", True), ("classic", False)],
    ids=["classic", "consumer", "classic-internal-included"],
)
async def test_pattern_subscriptions_skip_internal_topics(
    broker: RunningBroker, protocol: str, exclude: bool
) -> None:
    """brokerlite lists ``__consumer_offsets`` once a group has asked for its
    coordinator, marked internal, as Kafka does (issue #84); a pattern matching
    it leaves it out with ``exclude.internal.topics`` (the default; the consumer
    matches patterns itself under both protocols, as Java's consumer does with
    a ``Pattern``) and takes its partitions without it, reading them as empty.
    The admin client lists it only when asked to (Java's ``listInternal``)."""
    bs = broker.bootstrap_servers
    prefix, group = fresh("internal"), fresh("g")
    with anyio.fail_after(30):
        await _create(bs, f"{prefix}-a", 1)
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.list_consumer_group_offsets(group)  # (a FindCoordinator: the topic made)
            assert "__consumer_offsets" not in await admin.list_topics()
            internal = (await admin.list_topics(include_internal=True))["__consumer_offsets"]
        async with open_consumer(
            bootstrap_servers=bs,
            group_id=group,
            group_protocol=protocol,
            exclude_internal_topics=exclude,
            **({"heartbeat_interval_ms": 100} if protocol == "classic" else {}),
            **QUICK,
        ) as c:
            want = {(f"{prefix}-a", 0)}
            if not exclude:
                want |= {("__consumer_offsets", p) for p in range(internal)}
            c.subscribe(pattern=f"__consumer_offsets|{prefix}-.*")
            records = []
            while {(tp.topic, tp.partition) for tp in c.assignment()} != want:
                for batch in (await c.getmany(timeout_ms=50)).values():
                    records.extend(batch)
            for _ in range(3):
                for batch in (await c.getmany(timeout_ms=50)).values():
                    records.extend(batch)
            assert not records


async def test_commit_a_message_as_confluent_kafka_does(broker: RunningBroker) -> None:
    """``commit(message=record)`` commits the offset after the record, in its partition."""
    bs = broker.bootstrap_servers
    topic = fresh("msgcommit")
    group = fresh("g")
    with anyio.fail_after(60):
        await _create(bs, topic, 2)
        async with open_producer(bootstrap_servers=bs) as p:
            for i in range(6):
                await p.send(topic, b"%d" % i, partition=i % 2)
        async with open_consumer(
            topic,
            bootstrap_servers=bs,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            **QUICK,
        ) as c:
            got: list = []
            while len(got) < 6:
                for recs in (await c.getmany(timeout_ms=5000)).values():
                    got.extend(recs)
            third = next(r for r in got if r.partition == 1 and r.offset == 1)
            await c.commit(message=third)
            assert await c.committed(TopicPartition(topic, 1)) == 2
            assert await c.committed(TopicPartition(topic, 0)) is None
            await c.commit_async(message=got[0])
            assert await c.committed(TopicPartition(got[0].topic, got[0].partition)) == (
                got[0].offset + 1
            )
            with pytest.raises(UsageError, match="not both"):
                await c.commit({TopicPartition(topic, 0): 1}, message=third)


async def test_commit_async_ordered_with_callback(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("ca")
    tp = TopicPartition(topic, 0)
    done: list[tuple[int, object]] = []
    with anyio.fail_after(30):
        await _create(bs, topic, 1)
        async with open_consumer(bootstrap_servers=bs, group_id=fresh("g"), **QUICK) as c:
            c.assign([tp])
            futures = [
                c.commit_async({tp: i}, lambda offs, err: done.append((offs[tp], err)))
                for i in range(1, 6)
            ]
            for f in futures:
                await f
            assert done == [(i, None) for i in range(1, 6)]
            assert await c.committed(tp) == 5


async def test_cancellation_closes_connections(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    from trafka.sdk import transport

    opened: list[transport.BrokerConnection] = []
    real_open = transport.BrokerConnection.open

    async def recording_open(self: transport.BrokerConnection, tg: object) -> None:
        opened.append(self)
        await real_open(self, tg)  # type: ignore[arg-type]

    monkeypatch.setattr(transport.BrokerConnection, "open", recording_open)
    bs = broker.bootstrap_servers
    topic = fresh("cancel")
    with anyio.fail_after(30):
        await _create(bs, topic, 1)
        opened.clear()
        with anyio.move_on_after(0.5) as scope:
            async with open_consumer(topic, bootstrap_servers=bs, group_id=fresh("g")) as c:
                await c.getone()  # nothing to read: cancelled here
        assert scope.cancelled_caught
    # bootstrap, leader and coordinator connections were opened, and all are closed
    assert len(opened) >= 2
    assert all(conn._closed.is_set() and not conn.alive for conn in opened)


async def test_a_tight_send_loop_keeps_one_request_in_flight(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no other task running (a caller that never awaits anything but send()),
    opening a batch takes the answers already in and sends the full batch when no
    request is left in flight, and only then."""
    bs = broker.bootstrap_servers
    topic = fresh("tight")
    value = b"x" * 100
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
        async with open_producer(bootstrap_servers=bs, batch_size=2048, linger_ms=60_000) as p:
            await p.send(topic, b"warm-up")  # the producer id and the connection
            await p.flush()

            async def no_yield() -> None:
                return None

            async def fill(batch: object) -> Any:
                """Send until a record opens a new batch after ``batch``; that record."""
                while True:
                    record = await p.send(topic, value)
                    if record.batch is not batch:
                        return record

            monkeypatch.setattr(anyio.lowlevel, "cancel_shielded_checkpoint", no_yield)
            first = await p.send(topic, value)
            second = await fill(first.batch)
            assert first.batch.in_flight  # the broker was idle: it left at once
            third = await fill(second.batch)
            if first.batch.done:  # its answer came already and was taken: idle again
                assert second.batch.in_flight or second.batch.done
            else:  # a request in flight: the second batch is left to the sender
                assert not second.batch.in_flight
            # The first answer arrives (however long that takes); no task of ours runs.
            in_flight = [c for c in p._cluster._conns.values() if c.in_flight]
            assert first.batch.done or in_flight
            for conn in in_flight:
                select.select([conn.fileno], [], [], 30)
            fourth = await fill(third.batch)
            assert first.batch.done  # taken by the send that opened the fourth batch
            assert second.batch.in_flight or second.batch.done
            monkeypatch.undo()
            await p.flush()
            metas = [await r for r in (first, second, third, fourth)]
        assert [m.offset for m in metas] == sorted(m.offset for m in metas)


async def test_acks_all_below_min_insync_replicas_names_not_enough_replicas(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """Kafka's topic config ``min.insync.replicas``: "When a producer sets acks to
    "all" (or "-1"), min.insync.replicas specifies the minimum number of replicas
    that must acknowledge a write for the write to be considered successful. If
    this minimum cannot be met, then the producer will raise an exception (either
    NotEnoughReplicas or NotEnoughReplicasAfterAppend)". NOT_ENOUGH_REPLICAS is
    retriable (errors.json), so with retries the producer retries it until
    ``delivery.timeout.ms``: it says so as it retries, and the timeout it finally
    fails with carries the refusal. acks=1 is not affected."""
    bs = broker.bootstrap_servers
    topic = fresh("min-isr")
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1, {"min.insync.replicas": "2"})])
        async with open_producer(bootstrap_servers=bs, acks="all", retries=0) as p:
            with pytest.raises(KafkaError) as at_once:
                await p.send_and_wait(topic, b"refused")
        assert at_once.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        caplog.set_level(logging.WARNING, logger="trafka.sdk.producer")
        async with open_producer(
            bootstrap_servers=bs,
            acks="all",
            linger_ms=0,
            request_timeout_ms=1000,
            delivery_timeout_ms=2000,
        ) as p:
            with pytest.raises(DeliveryTimeoutError) as timed_out:
                await p.send_and_wait(topic, b"retried")
        last = timed_out.value.last_error
        assert isinstance(last, KafkaError) and last.code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert "NOT_ENOUGH_REPLICAS" in str(timed_out.value)
        told = [r.getMessage() for r in caplog.records if r.name == "trafka.sdk.producer"]
        assert any(f"{topic}-0" in m and "NOT_ENOUGH_REPLICAS" in m for m in told), told
        async with open_producer(bootstrap_servers=bs, acks=1) as p:
            meta = await p.send_and_wait(topic, b"accepted")
        assert meta.offset == 0  # neither refused record was written
        records = await _consume_all(bs, [TopicPartition(topic, 0)], 1)
    assert [r.value for r in records] == [b"accepted"]  # type: ignore[attr-defined]


async def test_batches_over_max_message_bytes_are_split(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("split")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1, configs={"max.message.bytes": "1200"})])
        async with open_producer(bootstrap_servers=bs, linger_ms=50, batch_size=64_000) as p:
            futures = [await p.send(topic, b"%03d" % i + b"." * 200) for i in range(40)]
            await p.flush()
            metas = [await f for f in futures]
            # A record larger than the topic allows fails alone, after splitting.
            with pytest.raises(KafkaError) as info:
                await p.send_and_wait(topic, b"x" * 1500)
            assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE
        assert [m.offset for m in metas] == list(range(40))
        records = await _consume_all(bs, [tp], 40)
    assert [r.value[:3] for r in records] == [b"%03d" % i for i in range(40)]  # type: ignore[attr-defined]


async def test_max_poll_interval_leaves_and_rejoins_on_next_poll(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("slow")
    group = fresh("g")
    lost: list[set[TopicPartition]] = []

    class Listener:
        async def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
            pass

        async def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
            pass

        async def on_partitions_lost(self, tps: set[TopicPartition]) -> None:
            lost.append(tps)

    with anyio.fail_after(30):
        await _create(bs, topic, 2)
        async with open_consumer(
            bootstrap_servers=bs,
            group_id=group,
            max_poll_interval_ms=600,
            heartbeat_interval_ms=100,
            session_timeout_ms=60_000,  # longer than the whole test: no eviction in it
            **QUICK,
        ) as c:
            c.subscribe([topic], listener=Listener())
            while len(c.assignment()) != 2:
                await c.getmany(timeout_ms=50)
            # The application stalls (no poll) for longer than max.poll.interval.ms.
            while not lost:
                await anyio.sleep(0.05)
            assert lost == [{TopicPartition(topic, 0), TopicPartition(topic, 1)}]
            assert c.assignment() == set()
            # It left the group instead of waiting to be evicted: gone long before
            # session.timeout.ms (60 s, past the test's 30 s deadline) could have
            # evicted it.
            async with open_admin(bootstrap_servers=bs) as admin:
                while (await admin.describe_groups([group]))[group].members != ():
                    await anyio.sleep(0.05)
            # The next poll rejoins.
            while len(c.assignment()) != 2:
                await c.getmany(timeout_ms=50)


async def test_no_record_of_a_partition_is_handed_out_once_its_revocation_began(
    broker: RunningBroker,
) -> None:
    # on_partitions_revoked is where the application commits for the last time; a
    # poll running meanwhile (another task, or a blocking consumer's thread) must
    # not get records the commit cannot cover.
    bs = broker.bootstrap_servers
    old, new = fresh("rev-old"), fresh("rev-new")
    entered, release = anyio.Event(), anyio.Event()

    class Listener:
        async def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
            if any(tp.topic == old for tp in tps):
                entered.set()
                await release.wait()

        async def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
            pass

    with anyio.fail_after(30):
        await _create(bs, old, 1)
        await _create(bs, new, 1)
        async with open_producer(bootstrap_servers=bs) as p:
            for i in range(200):
                await p.send(old, b"%d" % i)
        async with open_consumer(
            bootstrap_servers=bs, group_id=fresh("g"), auto_offset_reset="earliest", **QUICK
        ) as c:
            c.subscribe([old], listener=Listener())
            first: dict[TopicPartition, list[Any]] = {}
            while not first:
                first = await c.getmany(timeout_ms=100, max_records=1)
            c.subscribe([new], listener=Listener())
            await entered.wait()  # 199 records of the old topic are still buffered
            during = await c.getmany(timeout_ms=0)
            release.set()
            assert not any(tp.topic == old for tp in during)


async def test_log_append_time_reaches_records_and_metadata(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = fresh("lat")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics(
                [NewTopic(topic, 1, configs={"message.timestamp.type": "LogAppendTime"})]
            )
        async with open_producer(bootstrap_servers=bs) as p:
            meta = await p.send_and_wait(topic, b"x", timestamp_ms=1000)
        (record,) = await _consume_all(bs, [tp], 1)
    assert record.timestamp_type == 1  # type: ignore[attr-defined]
    assert record.timestamp == meta.timestamp != 1000  # type: ignore[attr-defined]
