"""Brokers and partitions out of reach: what the client tells its user while it
retries (``error_cb``, the log, ``Cluster.unreachable_brokers``), and the calls
that keep serving what they can reach (a partition without a leader is data;
``partial=True`` lookups; a consumer starting the partitions it can).

The scripted fake broker (:mod:`sdk_fakebroker`) drops connections and names
leaders that do not exist or do not answer.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from sdk_fakebroker import FakeBroker

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k03_metadata as md
from trafka.sdk import (
    BrokerUnreachableError,
    KafkaConnectionError,
    NoBrokersAvailableError,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.errors import ApiTimeoutError

pytestmark = pytest.mark.anyio

QUICK = {"retry_backoff_ms": 5, "retry_backoff_max_ms": 20, "reconnect_backoff_ms": 5}
# A hang guard for every call (the calls' own bounds are far longer where the
# test shows they are not waited out).
GUARD_S = 10
LONG_MS = 60_000


def leaderless(broker: FakeBroker, partition: int, *, topic_error: int = 0) -> None:
    """Metadata says ``partition`` of every topic has no leader, its replica
    (broker 7) offline, as a broker answers for a partition whose replicas are down."""
    answer = broker.metadata

    def handle(header: Any, body: Any) -> Any:
        response = answer(header, body)
        topics = []
        for t in response.topics:
            parts = [
                dataclasses.replace(
                    p,
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                    leader_id=-1,
                    replica_nodes=[7],
                    isr_nodes=[7],
                    offline_replicas=[7],
                )
                if p.partition_index == partition
                else p
                for p in t.partitions
            ]
            error = topic_error if t.partitions else t.error_code
            topics.append(dataclasses.replace(t, partitions=parts, error_code=error))
        return dataclasses.replace(response, topics=topics)

    broker.handlers[3] = handle


def led_by_nobody_answering(broker: FakeBroker, partition: int, port: int) -> None:
    """Metadata names broker 5, at ``port`` where nothing listens, leader of ``partition``."""
    answer = broker.metadata

    def handle(header: Any, body: Any) -> Any:
        R = md.MetadataResponse
        response = answer(header, body)
        topics = [
            dataclasses.replace(
                t,
                partitions=[
                    dataclasses.replace(p, leader_id=5, replica_nodes=[5], isr_nodes=[5])
                    if p.partition_index == partition
                    else p
                    for p in t.partitions
                ],
            )
            for t in response.topics
        ]
        brokers = [
            *response.brokers,
            R.MetadataResponseBroker(node_id=5, host="127.0.0.1", port=port),
        ]
        return dataclasses.replace(response, topics=topics, brokers=brokers)

    broker.handlers[3] = handle


def drop_first(broker: FakeBroker, key: int) -> None:
    """The first request of API ``key`` gets its connection closed instead of an answer."""
    answer = broker.handler_for(key)
    assert answer is not None
    drops = iter([True])

    def handle(header: Any, body: Any) -> Any:
        return "close" if next(drops, False) else answer(header, body)

    broker.handlers[key] = handle


def dead_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
def heard() -> Iterator[list[BaseException]]:
    yield []


# -- telling the user ---------------------------------------------------------------------------


async def test_a_connection_lost_mid_request_is_told_once_and_cleared_by_a_reconnect(
    fake_broker: FakeBroker, heard: list[BaseException]
) -> None:
    drop_first(fake_broker, 2)
    tp = TopicPartition("t", 0)
    async with open_admin(
        bootstrap_servers=fake_broker.bootstrap, error_cb=heard.append, **QUICK
    ) as admin:
        with anyio.fail_after(GUARD_S):
            offsets = await admin.list_offsets({tp: "latest"})
        assert offsets == {tp: (0, -1)}
        (told,) = heard
        assert isinstance(told, BrokerUnreachableError) and isinstance(told, KafkaConnectionError)
        assert (told.node_id, told.host, told.port) == (0, "127.0.0.1", fake_broker.port)
        assert str(told).startswith(f"broker 0 at 127.0.0.1:{fake_broker.port} is unreachable: ")
        # The retry reconnected: the broker is reachable again.
        assert admin.cluster.unreachable_brokers == {}


async def test_without_error_cb_it_is_a_warning_naming_the_broker(
    fake_broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    drop_first(fake_broker, 2)
    with caplog.at_level(logging.INFO, logger="trafka.sdk"):
        async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
            with anyio.fail_after(GUARD_S):
                await admin.list_offsets({TopicPartition("t", 0): "latest"})
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    (told,) = [w for w in warnings if "is unreachable" in w]
    assert told.startswith(f"broker 0 at 127.0.0.1:{fake_broker.port} is unreachable: ")
    assert told.endswith("(retrying)")
    assert any("is reachable again" in r.getMessage() for r in caplog.records)


async def test_a_broker_that_cannot_be_reached_is_told_once_while_it_stays_listed(
    fake_broker: FakeBroker, heard: list[BaseException]
) -> None:
    port = dead_port()
    led_by_nobody_answering(fake_broker, 1, port)
    tps = [TopicPartition("t", p) for p in range(3)]
    async with open_admin(
        bootstrap_servers=fake_broker.bootstrap, error_cb=heard.append, **QUICK
    ) as admin:
        with anyio.fail_after(GUARD_S):
            found = await admin.list_offsets(
                dict.fromkeys(tps, "latest"), timeout_ms=500, partial=True
            )
        # The reachable leader answered; broker 5's partition has the connect's error.
        assert found[tps[0]] == (0, -1) and found[tps[2]] == (0, -1)
        assert isinstance(found[tps[1]], KafkaConnectionError)
        assert list(admin.cluster.unreachable_brokers) == [5]
    # Told once, though every retry failed to connect again.
    assert [(e.node_id, e.port) for e in heard if isinstance(e, BrokerUnreachableError)] == [
        (5, port)
    ]


async def test_a_client_cancelled_with_a_request_in_flight_tells_nothing(
    fake_broker: FakeBroker, heard: list[BaseException], caplog: pytest.LogCaptureFixture
) -> None:
    """A client whose tasks are cancelled (its owner stopping: a broker's schema
    registry at shutdown, whose consumer always has a fetch waiting) is going
    away; the broker is not lost, and nothing says it is."""
    held = anyio.Event()

    async def hold(header: Any, body: Any) -> Any:
        held.set()
        await anyio.sleep_forever()

    fake_broker.handlers[2] = hold  # ListOffsets: never answered
    tp = TopicPartition("t", 0)

    async def ask() -> None:
        async with open_admin(
            bootstrap_servers=fake_broker.bootstrap, error_cb=heard.append, **QUICK
        ) as admin:
            await admin.list_offsets({tp: "latest"}, timeout_ms=LONG_MS)

    with caplog.at_level(logging.INFO, logger="trafka.sdk"):
        async with anyio.create_task_group() as tg:
            tg.start_soon(ask)
            with anyio.fail_after(GUARD_S):
                await held.wait()  # the request is in flight, on the broker
            tg.cancel_scope.cancel()
    assert heard == []
    assert not [r for r in caplog.records if "unreachable" in r.getMessage()]


async def test_unreachable_bootstrap_addresses_are_told_then_that_every_broker_is_down(
    heard: list[BaseException],
) -> None:
    # librdkafka's error_cb hears _TRANSPORT for the connect, then _ALL_BROKERS_DOWN;
    # a producer with no broker in reach fails no call, so this is all its user hears.
    port = dead_port()
    async with open_producer(
        bootstrap_servers=f"127.0.0.1:{port}", error_cb=heard.append, **QUICK
    ) as producer:
        cluster = producer.cluster
        with anyio.fail_after(GUARD_S):
            await cluster.wait_all_down()
            while cluster.broker_statistics()[-1].connect_failures < 3:
                await anyio.sleep(0.01)  # retried, and not told again
        assert cluster.all_brokers_down
        assert cluster.unreachable_brokers == {}  # a bootstrap address is no broker
    unreachable, down = heard
    assert isinstance(unreachable, BrokerUnreachableError) and unreachable.node_id < 0
    assert str(unreachable).startswith(f"bootstrap server at 127.0.0.1:{port} is unreachable: ")
    assert isinstance(down, NoBrokersAvailableError) and str(down) == "1/1 brokers are down"


async def test_every_broker_is_down_only_when_none_is_in_reach(
    fake_broker: FakeBroker, heard: list[BaseException]
) -> None:
    # A dead bootstrap address beside a live one: whichever is tried first, the
    # client reaches a broker, and never says they are all down.
    dead = f"127.0.0.1:{dead_port()}"
    tp = TopicPartition("t", 0)
    async with open_admin(
        bootstrap_servers=f"{dead},{fake_broker.bootstrap}", error_cb=heard.append, **QUICK
    ) as admin:
        with anyio.fail_after(GUARD_S):
            assert await admin.list_offsets({tp: "latest"}) == {tp: (0, -1)}
        assert not admin.cluster.all_brokers_down
    assert not any(isinstance(e, NoBrokersAvailableError) for e in heard), heard


async def test_an_error_cb_that_raises_is_logged_not_raised(
    fake_broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    def broken(error: BaseException) -> None:
        raise RuntimeError("a bug in the callback")

    drop_first(fake_broker, 2)
    async with open_admin(
        bootstrap_servers=fake_broker.bootstrap, error_cb=broken, **QUICK
    ) as admin:
        with anyio.fail_after(GUARD_S):
            await admin.list_offsets({TopicPartition("t", 0): "latest"})
    assert any(r.getMessage() == "error_cb raised" for r in caplog.records)


# -- a partition without a leader is data -------------------------------------------------------


@pytest.mark.parametrize("topic_error", [0, ErrorCode.LEADER_NOT_AVAILABLE])
async def test_describe_topics_reports_a_leaderless_partition(
    fake_broker: FakeBroker, topic_error: int
) -> None:
    """Kafka answers a partition whose replicas are down with LEADER_NOT_AVAILABLE
    and leader -1 (and brokers of Kafka 0.x with that error on the topic too)."""
    leaderless(fake_broker, 1, topic_error=topic_error)
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(GUARD_S):
            info = (await admin.describe_topics(["t"], timeout_ms=LONG_MS))["t"]
    p = info.partitions[1]
    assert (p.leader, p.replicas, p.isr, p.offline_replicas) == (-1, (7,), (7,), (7,))
    assert p.error == ErrorCode.LEADER_NOT_AVAILABLE
    assert [q.leader for q in info.partitions] == [0, -1, 0]


async def test_partial_lookups_answer_an_offline_partition_without_waiting(
    fake_broker: FakeBroker,
) -> None:
    leaderless(fake_broker, 1)
    tps = [TopicPartition("t", p) for p in range(3)]
    fake_broker.next_offset[("t", 2)] = 4
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(GUARD_S):
            ends = await admin.list_offsets(
                dict.fromkeys(tps, "latest"), timeout_ms=LONG_MS, partial=True
            )
    assert ends[tps[0]] == (0, -1) and ends[tps[2]] == (4, -1)
    error = ends[tps[1]]
    assert isinstance(error, KafkaError) and error.code == ErrorCode.LEADER_NOT_AVAILABLE
    assert "t-1 has no leader (offline: replicas 7 down)" in str(error)


async def test_a_whole_lookup_still_waits_for_every_partition(fake_broker: FakeBroker) -> None:
    """Without partial, an offline partition is waited for up to the call's bound
    (a leader may be being elected); the others were asked meanwhile."""
    leaderless(fake_broker, 1)
    tps = [TopicPartition("t", p) for p in range(3)]
    async with open_admin(bootstrap_servers=fake_broker.bootstrap, **QUICK) as admin:
        with anyio.fail_after(GUARD_S), pytest.raises(ApiTimeoutError) as caught:
            # A bound long enough for the first metadata answer on a loaded
            # machine (at 300 ms CI once timed out before knowing t-1's state).
            await admin.list_offsets(dict.fromkeys(tps, "latest"), timeout_ms=2000)
    assert "t-1 has no leader" in str(caught.value)
    asked = {
        p.partition_index
        for key, _, body in fake_broker.requests
        if key == 2
        for t in body.topics
        for p in t.partitions
    }
    assert asked == {0, 2}


async def test_a_consumer_reads_the_partitions_that_have_a_leader(fake_broker: FakeBroker) -> None:
    leaderless(fake_broker, 1)
    async with open_producer(bootstrap_servers=fake_broker.bootstrap, **QUICK) as producer:
        with anyio.fail_after(GUARD_S):
            for i in range(3):
                await producer.send("t", b"v%d" % i, partition=0)
    tps = [TopicPartition("t", p) for p in range(3)]
    async with open_consumer(
        bootstrap_servers=fake_broker.bootstrap, default_api_timeout_ms=LONG_MS, **QUICK
    ) as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        got: list[bytes] = []
        with anyio.fail_after(GUARD_S):
            while len(got) < 3:
                batch = await consumer.getmany(timeout_ms=100)
                got += [r.value for r in batch.get(tps[0], [])]
        assert got == [b"v0", b"v1", b"v2"]
        assert consumer.lag(tps[2]) == 0 and consumer.lag(tps[1]) is None
