"""The executors' reader pool (no Spark): one reader serves every query that
reads a cluster the same way, whatever group id each draws; what a worker keeps
idle is bounded, the least recently used closed first, the expired closed too.
Sockets are checked where they end: the broker's open connections."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from spark_helpers import create, fresh, produce

from trafka.brokerlite import RunningBroker
from trafka.sdk import TopicPartition
from trafka.spark import _kafka, _pools
from trafka.spark._wire import reader_settings
from trafka.spark.options import parse_read_options

pytestmark = pytest.mark.timeout(120)

RECORDS = 100


@pytest.fixture(scope="module")
def topic(broker: RunningBroker) -> str:
    name = fresh("pool")
    create(broker, name, 1)
    produce(broker, name, [(None, b"%d" % i, None) for i in range(RECORDS)])
    return name


@pytest.fixture
def live(broker: RunningBroker) -> Iterator[Callable[[str], int]]:
    """How many connections the broker holds open now for a client id."""
    core = broker.broker
    open_ids: dict[int, None] = {}
    opened, closed = core.connection_opened, core.connection_closed

    def on_open(conn_id: int, *args: Any, **kwargs: Any) -> Any:
        open_ids[conn_id] = None
        return opened(conn_id, *args, **kwargs)

    def on_close(conn_id: int) -> None:
        open_ids.pop(conn_id, None)
        closed(conn_id)

    core.connection_opened = on_open  # type: ignore[method-assign]
    core.connection_closed = on_close  # type: ignore[method-assign]
    try:
        yield lambda client_id: sum(
            1 for c in tuple(open_ids) if core.connections.client_id(c) == client_id
        )
    finally:
        core.connection_opened = opened  # type: ignore[method-assign]
        core.connection_closed = closed  # type: ignore[method-assign]


def _until(condition: Callable[[], bool], what: str) -> None:
    """Wait for the broker to see what the client did (its sockets closing)."""
    deadline = time.monotonic() + 30
    while not condition():
        assert time.monotonic() < deadline, what
        time.sleep(0.01)


def _options(broker: RunningBroker, topic: str, **options: str) -> _kafka.ReadOptions:
    given = {"kafka.bootstrap.servers": broker.bootstrap_servers, "subscribe": topic, **options}
    return parse_read_options(given, streaming=False)


def _read(pool: _pools.ReaderPool, broker: RunningBroker, topic: str, client_id: str) -> None:
    config = _options(broker, topic, **{"kafka.client.id": client_id}).consumer_config()
    with pool.lease(config) as reader:
        got = [
            o
            for records, _ in reader.read(TopicPartition(topic, 0), 0, RECORDS, 5000, 500)
            for o in records.offsets()
        ]
    assert got == list(range(RECORDS))


def test_queries_with_different_group_ids_share_one_reader(
    broker: RunningBroker, topic: str, live: Callable[[str], int], monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = _pools.ReaderPool()
    monkeypatch.setattr(_kafka, "READERS", pool)
    client = fresh("one-reader")
    try:
        # More queries than the pool keeps readers: each draws its own group id.
        for i in range(20):
            group = {"kafka.group.id": f"etl-{i}"} if i % 2 else {"groupIdPrefix": f"q{i}"}
            opts = _options(broker, topic, **{"kafka.client.id": client}, **group)
            task = _kafka.OffsetRange(topic, 0, 0, RECORDS)
            offsets = [o for chunk in _kafka.read_range(opts, task) for o in chunk.offsets()]
            assert offsets == list(range(RECORDS))
        # The bootstrap connection and the leader's, for all twenty.
        assert live(client) == 2
        assert pool.statistics() == {"idle_readers": 1, "idle_sockets": 2, "created": 1}
    finally:
        pool.close()
    _until(lambda: live(client) == 0, "the closed pool's sockets")


def test_the_key_is_what_a_reader_needs() -> None:
    def settings(**options: str) -> Any:
        given = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "t", **options}
        return reader_settings(parse_read_options(given, streaming=False).consumer_config())

    plain = settings()
    assert plain.group_id is None
    for noise in ({}, {"groupIdPrefix": "nightly"}, {"kafka.group.id": "etl"}):
        assert settings(**noise) == plain and hash(settings(**noise)) == hash(plain)
    # What changes where a reader connects, who it is, or what it fetches, splits.
    for differs in (
        {"kafka.bootstrap.servers": "127.0.0.1:9093"},
        {"kafka.client.id": "other"},
        {
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.username": "u",
            "kafka.sasl.password": "p",
        },
        {"kafka.isolation.level": "read_committed"},
        {"kafka.fetch.max.bytes": "1024"},
        {"failOnDataLoss": "false"},
    ):
        assert settings(**differs) != plain, differs


def test_the_pool_keeps_its_bounds_closing_the_least_recently_used(
    broker: RunningBroker, topic: str, live: Callable[[str], int]
) -> None:
    c = [fresh("bounds") for _ in range(6)]
    # At most two readers.
    pool = _pools.ReaderPool(max_readers=2, max_idle_sockets=8)
    try:
        _read(pool, broker, topic, c[0])
        _read(pool, broker, topic, c[1])
        assert pool.statistics() == {"idle_readers": 2, "idle_sockets": 4, "created": 2}
        _read(pool, broker, topic, c[2])  # c[0]'s reader is the least recently used
        assert pool.statistics() == {"idle_readers": 2, "idle_sockets": 4, "created": 3}
        _until(lambda: live(c[0]) == 0, "the evicted reader's sockets")
        _read(pool, broker, topic, c[1])  # used again: c[2]'s is now the oldest
        _read(pool, broker, topic, c[3])
        assert pool.statistics() == {"idle_readers": 2, "idle_sockets": 4, "created": 4}
        _until(lambda: live(c[2]) == 0, "the evicted reader's sockets")
        assert (live(c[1]), live(c[3])) == (2, 2)
    finally:
        pool.close()
    # At most three idle sockets: two readers of two each do not fit.
    pool = _pools.ReaderPool(max_readers=8, max_idle_sockets=3)
    try:
        _read(pool, broker, topic, c[4])
        _read(pool, broker, topic, c[5])
        assert pool.statistics() == {"idle_readers": 1, "idle_sockets": 2, "created": 2}
        _until(lambda: live(c[4]) == 0, "the evicted reader's sockets")
        assert live(c[5]) == 2
    finally:
        pool.close()


def test_a_reader_over_the_socket_bound_keeps_its_most_recent_sockets(
    broker: RunningBroker, topic: str, live: Callable[[str], int]
) -> None:
    client = fresh("trim")
    pool = _pools.ReaderPool(max_idle_sockets=1)
    try:
        _read(pool, broker, topic, client)
        assert pool.statistics() == {"idle_readers": 1, "idle_sockets": 1, "created": 1}
        _until(lambda: live(client) == 1, "the bootstrap connection closed")
        # The leader's connection is the one kept: the next read opens none.
        _read(pool, broker, topic, client)
        assert live(client) == 1
        assert pool.statistics()["created"] == 1
    finally:
        pool.close()


def test_expired_readers_are_closed(
    broker: RunningBroker, topic: str, live: Callable[[str], int]
) -> None:
    clock = [3.0]  # a machine booted seconds ago
    pool = _pools.ReaderPool(idle_timeout_s=300, clock=lambda: clock[0])
    old, new = fresh("expiry"), fresh("expiry")
    try:
        _read(pool, broker, topic, old)
        clock[0] += 299
        pool.expire()
        assert pool.statistics()["idle_readers"] == 1 and live(old) == 2
        clock[0] += 1
        _read(pool, broker, topic, new)  # any use of the pool closes what expired
        assert pool.statistics() == {"idle_readers": 1, "idle_sockets": 2, "created": 2}
        _until(lambda: live(old) == 0, "the expired reader's sockets")
        clock[0] += 300
        pool.expire()
        assert pool.statistics()["idle_readers"] == 0
        _until(lambda: live(new) == 0, "the expired reader's sockets")
    finally:
        pool.close()


def test_idle_bookkeeping() -> None:
    """Idle alone: the newest entry of a key first, the least recently used of
    any key evicted, weights bounded, the entry just given back always kept."""
    idle: _pools.Idle[str] = _pools.Idle(3, 10.0, max_weight=6, weight=len, clock=lambda: 0.0)
    assert idle.put("a", "a1") == []
    assert idle.put("b", "b1") == []
    assert idle.put("a", "a2") == []
    assert idle.put("c", "c1") == ["a1"]  # four entries: the least recently used goes
    assert idle.take("a") == ("a2", [])
    assert idle.take("a") == (None, [])
    assert idle.put("d", "dddd") == ["b1"]  # weights 2 + 2 + 4 > 6
    assert idle.put("e", "eeeeeee") == ["c1", "dddd"]  # alone over the bound, and kept
    assert (len(idle), idle.weight) == (1, 7)
    assert idle.take("e", lambda entry: False) == (None, ["eeeeeee"])  # passed over: dropped
