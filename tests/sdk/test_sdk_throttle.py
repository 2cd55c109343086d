"""Client-side quota throttling (KIP-219): the version rule, the connection state,
the transport's holding of requests, statistics, and the producer and consumer
while a broker throttles them.

Timing assertions here are lower bounds the protocol guarantees: a request the
client held cannot reach the (in-process, same clock) fake broker before the
throttle time after the throttled response was sent. Nothing asserts speed.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import logging
import math
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from sdk_fakebroker import FakeBroker

from trafka.codec import api, encode_response
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k48_describe_client_quotas as dcq
from trafka.sdk import KafkaConnectionError, TopicPartition, open_consumer, open_producer
from trafka.sdk.config import ClientConfig
from trafka.sdk.connection_state import (
    CLIENT_THROTTLE_VERSIONS,
    ConnectionState,
    client_throttles,
)
from trafka.sdk.errors import RequestTimeoutError
from trafka.sdk.statistics import NodeCounters, broker_statistics
from trafka.sdk.transport import Cluster

pytestmark = pytest.mark.anyio

SPECS = Path(__file__).resolve().parents[2] / "codec" / "specs" / "kafka-protocol" / "message"

# -- the version rule -----------------------------------------------------------------------------


def _has_throttle_field(key: int, version: int) -> bool:
    schema = api(key).module.RESPONSE_SCHEMAS[version]
    return any(name == "throttle_time_ms" for name, _ in schema.fields)


def test_kip219_boundaries_are_those_kafkas_specs_state() -> None:
    said: dict[int, int] = {}
    for path in SPECS.glob("*Response.json"):
        text = path.read_text()
        comments = " ".join(
            line.strip()[2:].strip() for line in text.splitlines() if line.strip().startswith("//")
        )
        found = re.search(r"Starting in version (\d+), on quota violation,? brokers send", comments)
        if found:
            key = json.loads(re.sub(r"^\s*//.*$", "", text, flags=re.M))["apiKey"]
            said[key] = int(found.group(1))
    # ProduceResponse.json says nothing; Java's ProduceResponse.shouldClientThrottle
    # is version >= 6 (KIP-219 bumped Produce to v6 in Kafka 2.0).
    assert said == {k: v for k, v in CLIENT_THROTTLE_VERSIONS.items() if k != 0}
    assert CLIENT_THROTTLE_VERSIONS[0] == 6


def test_each_boundary_is_a_version_with_a_throttle_field() -> None:
    for key, first in CLIENT_THROTTLE_VERSIONS.items():
        info = api(key)
        for version in range(info.min_version, info.max_version + 1):
            assert client_throttles(key, version) == (version >= first), (key, version)
            if version >= first:
                assert _has_throttle_field(key, version), (key, version)


def test_newer_apis_throttle_wherever_their_response_has_the_field() -> None:
    # Java's default since KAFKA-20828: the schema decides.
    assert client_throttles(48, 0) and client_throttles(49, 1)  # the client-quota APIs
    assert client_throttles(68, 0)  # ConsumerGroupHeartbeat
    assert not client_throttles(23, 1) and client_throttles(23, 2)  # OffsetForLeaderEpoch
    assert not client_throttles(17, 1)  # SaslHandshake: no field
    assert not client_throttles(27, 1)  # WriteTxnMarkers: no field
    assert not client_throttles(4242, 0)  # an API the codec does not know


# -- the connection state (sans-IO) ---------------------------------------------------------------


def _state(stats: NodeCounters) -> ConnectionState:
    state = ConnectionState("c", stats=stats)
    state.handshake(now=10.0, timeout=30.0)
    versions = api_versions.ApiVersionsResponse(
        api_keys=[
            api_versions.ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=v)
            for k, v in ((18, 4), (3, 12), (48, 1))
        ]
    )
    state.receive_data(encode_response(0, 18, 3, versions), now=10.0)
    assert state.ready
    return state


def _metadata_answer(state: ConnectionState, version: int, throttle_ms: int, now: float) -> None:
    corr, _ = state.send_request(3, md.MetadataRequest(), now=now, timeout=30.0, version=version)
    answer = md.MetadataResponse(throttle_time_ms=throttle_ms)
    (response,) = state.receive_data(encode_response(corr, 3, version, answer), now=now)
    assert response.body.throttle_time_ms == (throttle_ms if version >= 3 else 0)


def test_a_throttled_response_sets_the_deadline_from_its_arrival() -> None:
    stats = NodeCounters()
    state = _state(stats)
    assert state.throttled_until == -math.inf
    _metadata_answer(state, 12, 0, now=20.0)
    assert state.throttled_until == -math.inf and stats.throttles == 0
    _metadata_answer(state, 12, 250, now=20.0)
    assert state.throttled_until == pytest.approx(20.25)
    assert (stats.throttles, stats.throttle_ms_total, stats.throttle_ms_max) == (1, 250, 250)
    assert state.last_throttle == (3, 12, 250)
    # A shorter throttle later never moves the deadline back.
    _metadata_answer(state, 12, 100, now=20.1)
    assert state.throttled_until == pytest.approx(20.25)
    _metadata_answer(state, 12, 500, now=20.1)
    assert state.throttled_until == pytest.approx(20.6)
    assert (stats.throttles, stats.throttle_ms_total, stats.throttle_ms_max) == (3, 850, 500)
    snap = broker_statistics(0, [stats], connected=True, in_flight=0, throttle_remaining=0.3)
    assert snap.throttle.count == 3 and snap.throttle.total_ms == 850
    assert snap.throttle.avg_ms == pytest.approx(850 / 3) and snap.throttle.max_ms == 500
    assert snap.throttle.remaining_ms == pytest.approx(300.0)


def test_versions_before_kip219_are_counted_but_not_held() -> None:
    stats = NodeCounters()
    state = _state(stats)
    _metadata_answer(state, 5, 300, now=20.0)  # Metadata v5 has the field; v6 is KIP-219's
    assert state.throttled_until == -math.inf
    assert stats.throttles == 1 and stats.throttle_ms_max == 300


def test_a_version_without_the_field_is_unaffected() -> None:
    stats = NodeCounters()
    state = _state(stats)
    _metadata_answer(state, 2, 300, now=20.0)  # v2 has no throttle_time_ms on the wire
    assert state.throttled_until == -math.inf and stats.throttles == 0
    snap = broker_statistics(0, [stats], connected=True, in_flight=0)
    assert snap.throttle.count == 0 and snap.throttle.avg_ms is None
    assert snap.throttle.max_ms is None and snap.throttle.remaining_ms == 0.0


def test_a_throttled_handshake_and_newer_apis_hold_too() -> None:
    stats = NodeCounters()
    state = ConnectionState("c", stats=stats)
    state.handshake(now=10.0, timeout=30.0)
    versions = api_versions.ApiVersionsResponse(
        api_keys=[
            api_versions.ApiVersionsResponse.ApiVersion(api_key=k, min_version=0, max_version=v)
            for k, v in ((18, 4), (48, 1))
        ],
        throttle_time_ms=40,
    )
    state.receive_data(encode_response(0, 18, 3, versions), now=10.0)
    assert state.throttled_until == pytest.approx(10.04)
    corr, _ = state.send_request(48, dcq.DescribeClientQuotasRequest(), now=11.0, timeout=30.0)
    answer = dcq.DescribeClientQuotasResponse(throttle_time_ms=70)
    state.receive_data(encode_response(corr, 48, 1, answer), now=11.0)
    assert state.throttled_until == pytest.approx(11.07)
    assert stats.throttles == 2


# -- the transport against the fake broker --------------------------------------------------------


@dataclasses.dataclass
class Seen:
    """One request the fake broker answered: when it had it, when it answered."""

    received: float
    answered: float
    throttle_ms: int


def throttling(broker: FakeBroker, key: int, throttle_for: Callable[[int], int]) -> list[Seen]:
    """Wrap ``broker``'s handler of ``key``: its n-th answer (from 0) carries
    ``throttle_for(n)`` ms; returns the log of what it answered."""
    inner = broker.handler_for(key)
    assert inner is not None
    seen: list[Seen] = []

    def handler(header: Any, body: Any) -> Any:
        received = anyio.current_time()
        response = inner(header, body)
        ms = throttle_for(len(seen))
        if ms and response is not None:
            response = dataclasses.replace(response, throttle_time_ms=ms)
        seen.append(Seen(received, anyio.current_time(), ms))
        return response

    broker.handlers[key] = handler
    return seen


@asynccontextmanager
async def connected(broker: FakeBroker, **settings: Any) -> AsyncIterator[tuple[Cluster, Any]]:
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            cluster = Cluster(ClientConfig(bootstrap_servers=broker.bootstrap, **settings), tg)
            yield cluster, await cluster.any_connection()
            tg.cancel_scope.cancel()


def held_until_throttle_passed(seen: list[Seen]) -> None:
    """Each request after a throttled answer reached the broker no earlier than
    the throttle time after that answer was sent."""
    for before, after in itertools.pairwise(seen):
        if before.throttle_ms:
            assert after.received >= before.answered + before.throttle_ms / 1000, (before, after)


async def test_the_next_request_waits_out_the_throttle(fake_broker: FakeBroker) -> None:
    seen = throttling(fake_broker, 3, lambda n: 300 if n == 0 else 0)
    async with connected(fake_broker) as (cluster, conn):
        first = await conn.request(3, md.MetadataRequest(topics=None))
        assert first.throttle_time_ms == 300
        assert conn.throttled_until >= seen[0].answered + 0.3
        second = await conn.request(3, md.MetadataRequest(topics=None))
        assert second.throttle_time_ms == 0
        assert len(seen) == 2
        held_until_throttle_passed(seen)
        throttle = cluster.broker_statistics()[conn.node_id].throttle
        assert (throttle.count, throttle.total_ms, throttle.max_ms) == (1, 300, 300)
        assert throttle.avg_ms == pytest.approx(300.0)
        assert throttle.requests_held == 1
        # Not throttled any more: the next request goes out at once, unheld.
        await conn.request(3, md.MetadataRequest(topics=None))
        assert cluster.broker_statistics()[conn.node_id].throttle.requests_held == 1


async def test_a_throttled_handshake_holds_the_first_request(fake_broker: FakeBroker) -> None:
    handshake = throttling(fake_broker, 18, lambda n: 250 if n == 0 else 0)
    metadata = throttling(fake_broker, 3, lambda n: 0)
    async with connected(fake_broker) as (cluster, conn):
        await conn.request(3, md.MetadataRequest(topics=None))
        assert metadata[0].received >= handshake[0].answered + 0.25
        assert cluster.broker_statistics()[conn.node_id].throttle.requests_held >= 1


async def test_held_requests_keep_their_order_and_in_flight_ones_are_answered(
    fake_broker: FakeBroker,
) -> None:
    seen = throttling(fake_broker, 3, lambda n: 200 if n == 0 else 0)
    order: list[list[str]] = []
    inner = fake_broker.handlers[3]

    def recording(header: Any, body: Any) -> Any:
        order.append([t.name for t in body.topics or ()])
        return inner(header, body)

    fake_broker.handlers[3] = recording
    async with connected(fake_broker) as (_, conn):
        answers: dict[str, Any] = {}

        async def ask(name: str) -> None:
            body = md.MetadataRequest(topics=[md.MetadataRequest.MetadataRequestTopic(name=name)])
            answers[name] = await conn.request(3, body)

        async with anyio.create_task_group() as tg:
            # Both are written before the first answer arrives: in flight, not held.
            tg.start_soon(ask, "t")
            tg.start_soon(ask, "one")
            await anyio.wait_all_tasks_blocked()
        # Whichever the broker answered first carries the throttle.
        assert sorted(a.throttle_time_ms for a in answers.values()) == [0, 200]
        async with anyio.create_task_group() as tg:
            for name in ("a", "b", "c", "d"):
                tg.start_soon(ask, name)
                await anyio.wait_all_tasks_blocked()
        assert order[2:] == [["a"], ["b"], ["c"], ["d"]]
        assert len(answers) == 6
        assert sum(a.throttle_time_ms for a in answers.values()) == 200
        # The four came after the throttled answer; none reached the broker early.
        for later in seen[2:]:
            assert later.received >= seen[0].answered + 0.2


async def test_a_connection_closing_fails_its_held_requests(fake_broker: FakeBroker) -> None:
    seen = throttling(fake_broker, 3, lambda n: 60_000 if n == 0 else 0)
    async with connected(fake_broker) as (cluster, conn):
        await conn.request(3, md.MetadataRequest(topics=None))
        failure: list[BaseException] = []

        async def held() -> None:
            try:
                await conn.request(3, md.MetadataRequest(topics=None))
            except KafkaConnectionError as exc:
                failure.append(exc)

        async with anyio.create_task_group() as tg:
            tg.start_soon(held)
            await anyio.wait_all_tasks_blocked()
            stats = cluster.broker_statistics()[conn.node_id].throttle
            assert stats.requests_held == 1 and stats.remaining_ms > 0
            assert len(seen) == 1  # the broker never saw the held request
            await conn.aclose()
        assert len(failure) == 1 and len(seen) == 1


async def test_a_held_request_fails_at_its_timeout_and_the_connection_stays(
    fake_broker: FakeBroker,
) -> None:
    # A throttle time longer than a request's timeout (a lying or badly configured
    # broker: 2**31-1 ms is 24 days) must not make the request wait past it.
    seen = throttling(fake_broker, 3, lambda n: 2**31 - 1 if n == 0 else 0)
    async with connected(fake_broker, request_timeout_ms=300) as (cluster, conn):
        await conn.request(3, md.MetadataRequest(topics=None))
        started = anyio.current_time()
        with pytest.raises(
            RequestTimeoutError,
            match=r"held past its timeout and never sent: node .* throttles this client",
        ):
            await conn.request(3, md.MetadataRequest(topics=None))
        assert anyio.current_time() - started >= 0.3
        with pytest.raises(RequestTimeoutError):
            await conn.request(3, md.MetadataRequest(topics=None), timeout=0.05)
        # Held behind one with a long timeout, a short one still fails at its own.
        failed: list[str] = []

        async def ask(name: str, timeout: float) -> None:
            with pytest.raises(RequestTimeoutError):
                await conn.request(3, md.MetadataRequest(topics=None), timeout=timeout)
            failed.append(name)

        async with anyio.create_task_group() as tg:
            tg.start_soon(ask, "long", 1.0)
            await anyio.wait_all_tasks_blocked()
            tg.start_soon(ask, "short", 0.05)
        assert failed == ["short", "long"]
        stats = cluster.broker_statistics()[conn.node_id]
        assert (stats.throttle.requests_held, stats.throttle.requests_expired) == (4, 4)
        assert stats.connected and stats.disconnects == 0 and len(seen) == 1
        # The connection still works once the throttle is over.
        conn.throttled_until = anyio.current_time()
        conn._update_hold()
        answer = await conn.request(3, md.MetadataRequest(topics=None))
        assert answer.throttle_time_ms == 0 and len(seen) == 2


async def test_the_time_held_counts_against_the_request_timeout(fake_broker: FakeBroker) -> None:
    # Held 1 s of a 1.5 s timeout, then sent to a broker that takes 1 s to answer:
    # the request times out 1.5 s after it was made, not 1.5 s after it was sent.
    # Checked on the deadline the request went out with, not on the wall clock.
    seen = throttling(fake_broker, 3, lambda n: 1000 if n == 0 else 0)
    answer_plain = fake_broker.handlers[3]

    async def slow_second(header: Any, body: Any) -> Any:
        if len(seen) == 1:
            await anyio.sleep(1.0)
        return answer_plain(header, body)

    fake_broker.handlers[3] = slow_second
    async with connected(fake_broker, request_timeout_ms=1500) as (_, conn):
        await conn.request(3, md.MetadataRequest(topics=None))
        held_until = conn.throttled_until
        deadlines: list[float] = []
        send_parts = conn._state.send_request_parts

        def recording(*args: Any, **kwargs: Any) -> Any:
            deadlines.append(kwargs["now"] + kwargs["timeout"])
            return send_parts(*args, **kwargs)

        conn._state.send_request_parts = recording
        assert anyio.current_time() < held_until  # made while the throttle holds it
        with pytest.raises(RequestTimeoutError):
            await conn.request(3, md.MetadataRequest(topics=None))
        # Sent once the hold ended (at held_until or later), its deadline still
        # counted from when it was made; counted from the send it would be at
        # held_until + 1.5 or later (and the 1 s answer would have come in time).
        assert len(deadlines) == 1 and deadlines[0] < held_until + 1.5


async def test_a_throttle_is_logged_once_not_per_response(
    fake_broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    throttling(fake_broker, 3, lambda n: 20)
    caplog.set_level(logging.INFO, logger="trafka.sdk")
    async with connected(fake_broker) as (_, conn):
        for _ in range(4):
            await conn.request(3, md.MetadataRequest(topics=None))
    lines = [r for r in caplog.records if "throttles this client" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].levelno == logging.INFO and "20 ms on API key 3 v12" in lines[0].getMessage()


async def test_no_throttle_no_hold(fake_broker: FakeBroker) -> None:
    seen = throttling(fake_broker, 3, lambda n: 0)
    async with connected(fake_broker) as (cluster, conn):
        for _ in range(3):
            await conn.request(3, md.MetadataRequest(topics=None))
        throttle = cluster.broker_statistics()[conn.node_id].throttle
        assert (throttle.count, throttle.requests_held, throttle.remaining_ms) == (0, 0, 0.0)
        assert conn.throttled_until == -math.inf and len(seen) == 3


# -- producer and consumer while throttled -----------------------------------------------------


async def test_a_throttled_producer_keeps_delivering_and_waits(fake_broker: FakeBroker) -> None:
    seen = throttling(fake_broker, 0, lambda n: 150 if n in (0, 2) else 0)
    with anyio.fail_after(30):
        # One request in flight at a time: each is written after the previous
        # answer arrived, so each throttled answer bounds the next request.
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap,
            linger_ms=0,
            max_in_flight_requests_per_connection=1,
        ) as producer:
            futures = []
            for i in range(200):
                futures.append(await producer.send("t", b"v%d" % i, partition=i % 3))
                if i % 20 == 0:
                    await producer.flush()
            await producer.flush()
            assert all(f.exception() is None for f in futures)
            stats = producer.statistics()
    assert sum(len(fake_broker.records("t", p)) for p in range(3)) == 200
    held_until_throttle_passed(seen)
    throttle = stats.brokers[0].throttle
    assert throttle.count == 2 and throttle.max_ms == 150
    # The producer itself kept its batches while throttled (as Java's sender
    # does), rather than handing the connection requests to hold.
    assert throttle.requests_held == 0
    assert stats.records_sent == 200 and stats.records_failed == 0


async def test_a_throttled_consumer_keeps_reading_and_waits(fake_broker: FakeBroker) -> None:
    async with open_producer(bootstrap_servers=fake_broker.bootstrap) as producer:
        for i in range(30):
            await producer.send("one", b"r%d" % i)
    seen = throttling(fake_broker, 1, lambda n: 150 if n < 2 else 0)
    tp = TopicPartition("one", 0)
    got: list[bytes] = []
    with anyio.fail_after(30):
        async with open_consumer(
            bootstrap_servers=fake_broker.bootstrap, auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([tp])
            while len(got) < 30 or len(seen) < 4:
                batch = await consumer.getmany(timeout_ms=500)
                got += [r.value for r in batch.get(tp, [])]
            stats = consumer.statistics()
    assert got == [b"r%d" % i for i in range(30)]
    held_until_throttle_passed(seen)
    assert stats.brokers[0].throttle.count >= 2
