"""How followers fetch from their leaders, seen on the wire of an in-process cluster
(a real ZooKeeper, real sockets): the requests a follower sends and what the
leader keeps for it."""

from __future__ import annotations

from typing import Any

import pytest
from cluster_helpers import run, until

from trafka.brokerlite.cluster.inter_broker import InterBrokerConnection
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.codec.fetch_sessions import INVALID_SESSION_ID
from trafka.sdk import NewTopic, open_admin, open_producer

pytestmark = pytest.mark.timeout(120)

TOPIC = "replicated"


class FetchLog:
    """Records every Fetch a replica fetcher sends, and its answer once it comes,
    by fetching broker."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.fetches: list[list[Any]] = []  # [client id, request, answer or None]
        original = InterBrokerConnection.request
        fetches = self.fetches

        async def request(conn: InterBrokerConnection, key: int, body: Any, **kw: Any) -> Any:
            entry = [conn.client_id, body, None]
            if key == 1:
                fetches.append(entry)
            entry[2] = await original(conn, key, body, **kw)
            return entry[2]

        monkeypatch.setattr(InterBrokerConnection, "request", request)

    def sent(self, follower: int) -> list[tuple[Any, Any]]:
        """The requests ``follower`` sent, with their answers (None: not yet)."""
        return [(b, a) for c, b, a in self.fetches if c == f"broker-{follower}-fetcher"]


def named(request: Any) -> set[tuple[str, int]]:
    return {(t.topic, p.partition) for t in request.topics for p in t.partitions}


def in_sync(cluster: LocalCluster) -> bool:
    image = cluster.node(1).broker.cluster.image
    found = [s for (t, _), s in image.states.items() if t == TOPIC]
    return len(found) == 4 and all(len(s.isr) == 2 and s.leader >= 0 for s in found)


def agree(cluster: LocalCluster, partition: int) -> bool:
    ends = {
        (plog.log_end_offset, plog.high_watermark)
        for n in (1, 2)
        if (plog := cluster.node(n).broker.logs.partition(TOPIC, partition))
    }
    return len(ends) == 1


def test_followers_fetch_in_incremental_sessions(zk: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """KIP-227 between brokers, as Kafka's replica fetchers use it: after a full
    fetch that creates the session (epoch 0), a follower's fetches are incremental
    (the session's id, epochs 1, 2, ...) and name only the partitions whose
    fetch offset moved; the leader keeps the session as privileged (a follower's).
    A session the leader lost (FETCH_SESSION_ID_NOT_FOUND) is replaced by a full
    fetch, and replication goes on."""
    wire = FetchLog(monkeypatch)

    async def test() -> None:
        async with serve_cluster(2, zookeeper_connect=zk) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic(TOPIC, 4, 2)])
            await until(lambda: in_sync(cluster), "every ISR is full")
            image = cluster.node(1).broker.cluster.image
            led_by_1 = sorted(
                p for (t, p), s in image.states.items() if t == TOPIC and s.leader == 1
            )
            assert len(led_by_1) == 2  # two each, as the controller spreads them
            busy, idle = led_by_1
            leader_cache = cluster.node(1).broker.fetch_sessions.cache

            def settled() -> bool:
                # Follower 2 fetches both partitions in its session (it may have
                # added them one at a time, as each was reconciled).
                sent = wire.sent(2)
                held = sent and leader_cache.get(sent[-1][0].session_id)
                return bool(held) and {(k[0], k[1]) for k in held.partitions} == {
                    (TOPIC, busy),
                    (TOPIC, idle),
                }

            await until(settled, "follower 2's session at leader 1 holds both partitions")

            def answered_since(count: int) -> list[tuple[Any, Any]]:
                return [(b, a) for b, a in wire.sent(2)[count:] if a is not None]

            async def produce(count: int) -> None:
                async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                    for i in range(count):
                        await producer.send_and_wait(TOPIC, b"v%d" % i, partition=busy)

            seen = len(wire.sent(2))
            await produce(20)
            await until(lambda: agree(cluster, busy), "the replicas of the busy partition agree")
            later = answered_since(seen)
            assert later
            for request, answer in later:
                assert request.session_id != INVALID_SESSION_ID and request.session_epoch >= 1
                assert answer.error_code == 0 and answer.session_id == request.session_id
                # Only the partition that got records moves its fetch offset.
                assert named(request) <= {(TOPIC, busy)}
                assert (TOPIC, idle) not in {
                    (t.topic, p.partition_index) for t in answer.responses for p in t.partitions
                }
            epochs = [r.session_epoch for r, _ in later]
            assert epochs == list(range(epochs[0], epochs[0] + len(epochs)))
            assert any(named(r) for r, _ in later), "the busy partition was named"
            session = leader_cache.get(later[-1][0].session_id)
            assert session is not None and session.privileged
            assert {(k[0], k[1]) for k in session.partitions} == {(TOPIC, busy), (TOPIC, idle)}

            # The leader forgets the session: the follower starts a new one.
            leader_cache.remove(session.id)
            seen = len(wire.sent(2))
            await produce(10)
            await until(lambda: agree(cluster, busy), "the replicas agree again")
            after = answered_since(seen)
            refused = [i for i, (_, a) in enumerate(after) if a.error_code != 0]
            assert refused, "the lost session was refused"
            retry, answer = after[refused[0] + 1]
            assert (retry.session_epoch, answer.error_code) == (0, 0)
            assert named(retry) == {(TOPIC, busy), (TOPIC, idle)}  # a full fetch
            assert answer.session_id not in (INVALID_SESSION_ID, session.id)
            high = cluster.node(1).broker.logs.partition(TOPIC, busy).high_watermark
            assert high == 30

    run(test)


def test_a_parked_follower_fetch_is_answered_by_new_records_only(
    zk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's delayed fetch for a follower (``replica.fetch.min.bytes``, 1 by
    default): a follower's fetch parked at its leader is answered when records
    are appended past its fetch offset (or the leader stops leading, or
    ``replica.fetch.wait.max.ms`` passes), not when the high watermark moves; the
    follower learns the high watermark from its next answer. With three replicas
    the high watermark moves when the slower follower fetches, while the other's
    fetch is parked: that must not answer it. The wait is made longer than the
    test so that no answer comes from it."""
    wire = FetchLog(monkeypatch)

    async def test() -> None:
        async with serve_cluster(
            3, zookeeper_connect=zk, replica_fetch_wait_max_ms=300_000
        ) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic(TOPIC, 1, 3)])

            def state() -> Any:
                return cluster.node(1).broker.cluster.image.states.get((TOPIC, 0))

            await until(lambda: (s := state()) is not None and len(s.isr) == 3, "a full ISR")
            leader = state().leader
            followers = [n for n in (1, 2, 3) if n != leader]
            await until(
                lambda: all(wire.sent(f) for f in followers) or None, "both followers fetched"
            )
            seen = {f: len(wire.sent(f)) for f in followers}
            async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                for i in range(10):
                    meta = await producer.send_and_wait(TOPIC, b"v%d" % i)
                    assert meta.offset == i
            leader_log = cluster.node(leader).broker.logs.partition(TOPIC, 0)
            assert leader_log.high_watermark == 10
            await until(
                lambda: all(
                    cluster.node(f).broker.logs.partition(TOPIC, 0).log_end_offset == 10
                    for f in followers
                ),
                "both followers have every record",
            )
            answered = 0
            for f in followers:
                # From the fetch parked when the first record came.
                answers = [a for _, a in wire.sent(f)[seen[f] - 1 :] if a is not None]
                for answer in answers:
                    for t in answer.responses:
                        for p in t.partitions:
                            answered += 1
                            assert p.error_code == 0
                            assert p.records, f"follower {f} got an answer without records: {p!r}"
            assert answered >= len(followers)

    run(test)


def test_acks_all_is_answered_by_the_fetch_that_proves_replication(
    zk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Kafka's DelayedProduce: a follower's fetch at offset N tells the leader that
    it holds every record below N; the leader moves the high watermark as that
    fetch arrives and completes the acks=all produces it satisfies then, while
    the fetch itself parks (nothing new to send). No later fetch is needed. The
    followers' long polls are made longer than the test, so the produce can only
    be answered by the arrival of the fetches at offset 1, both of which are still
    parked when the producer has its acknowledgement."""
    wire = FetchLog(monkeypatch)

    async def test() -> None:
        async with serve_cluster(
            3, zookeeper_connect=zk, replica_fetch_wait_max_ms=300_000
        ) as cluster:
            bs = cluster.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic(TOPIC, 1, 3)])

            def state() -> Any:
                return cluster.node(1).broker.cluster.image.states.get((TOPIC, 0))

            await until(lambda: (s := state()) is not None and len(s.isr) == 3, "a full ISR")
            leader = state().leader
            followers = [n for n in (1, 2, 3) if n != leader]

            def parked(f: int) -> bool:
                sent = wire.sent(f)
                return bool(sent) and sent[-1][1] is None

            # Each follower's fetch at 0 is parked.
            await until(lambda: all(parked(f) for f in followers) or None, "parked fetches")
            seen = {f: len(wire.sent(f)) for f in followers}
            async with open_producer(bootstrap_servers=bs, acks="all") as producer:
                meta = await producer.send_and_wait(TOPIC, b"v0")
                assert meta.offset == 0
                for f in followers:
                    since = wire.sent(f)[seen[f] - 1 :]
                    # The fetch parked at 0, answered with the record; then the
                    # fetch at 1 that released the produce, still unanswered.
                    assert len(since) == 2, since
                    (_, answer), (second, pending) = since
                    assert answer is not None and answer.responses[0].partitions[0].records
                    assert pending is None
                    offsets = [p.fetch_offset for t in second.topics for p in t.partitions]
                    assert offsets == [1]
                leader_log = cluster.node(leader).broker.logs.partition(TOPIC, 0)
                assert leader_log.high_watermark == 1
                # The followers learn the high watermark from their next answer.
                for f in followers:
                    assert cluster.node(f).broker.logs.partition(TOPIC, 0).high_watermark == 0

    run(test)
