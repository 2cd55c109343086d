"""The proxy's counters tell the truth (issue #62, section 3): for each series,
something that must count in it is made to happen through real sockets against
a real proxy and brokerlite, and a look-alike that must not count in it.

An operator pages on ``trafka_proxy_errors_total``: it counts what failed for a
client. An idempotent producer's batch the proxy holds back until an earlier one
of its partition is answered (the client sends it again and never sees an
error) is flow control, ``trafka_proxy_flow_control_total{kind="held"}``; an
idle connection closed after ``connections.max.idle.ms`` is routine (Kafka's
SocketServer closes them too), ``trafka_proxy_idle_connections_closed_total``.

One proxy (small limits, a filter that fails on a marked request) in front of
the module's brokerlite serves every case but two: the failed part needs a
broker that advertises an address nothing listens on, the unreachable upstream
a proxy whose upstream is down. Counters are compared before and after each
case: what must count grows by exactly what was done where nothing else can
add to it (at least 1 where other clients' connections may add too).
(``flow_control{kind="budget_wait"}`` is proven in test_proxy_limits.py's
budget tests.)
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import confluent_kafka
import pytest
import trio
from proxy_helpers import call, create, fresh, request
from test_proxy_limits import api_versions_frame, closed_by_proxy, served
from test_proxy_metrics import samples

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec import ErrorCode
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.records import encode_batch
from trafka.proxy import Filter, FilterContext, RunningProxy, proxy_in_thread

pytestmark = pytest.mark.timeout(180)

DEADLINE = 60
Key = tuple[str, tuple[tuple[str, str], ...]]
LIMIT = 64 * 1024  # the proxy's max_decompressed_bytes here


def series(name: str, **labels: str) -> Key:
    return (name, tuple(sorted(labels.items())))


ERRORS = "trafka_proxy_errors_total"
BAD = series(ERRORS, kind="bad_request")
TIMEOUT = series(ERRORS, kind="timeout")
TOO_LARGE = series(ERRORS, kind="too_large")
PART_FAILED = series(ERRORS, kind="part_failed")
FILTER = series(ERRORS, kind="filter")
UNREACHABLE = series(ERRORS, kind="upstream_unreachable")
HELD = series("trafka_proxy_flow_control_total", kind="held")
IDLE = series("trafka_proxy_idle_connections_closed_total")
OPEN = series("trafka_proxy_connections_open")
ACCEPTED = series("trafka_proxy_connections_total")


class Explodes(Filter):
    """A filter that fails on the ApiVersions of a client named ``explode``."""

    api_keys = frozenset({18})

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        if body.client_software_name == "explode":
            raise RuntimeError("a filter's own bug")
        return body


@pytest.fixture(scope="module")
def proxy(broker: RunningBroker) -> Iterator[RunningProxy]:
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,),
        port=0,
        metrics_listen="127.0.0.1:0",
        connections_max_idle_ms=1500,
        request_receive_timeout_ms=1500,
        max_decompressed_bytes=LIMIT,
        filters=(Explodes(),),
    ) as px:
        yield px


def scrape(px: RunningProxy) -> dict[Key, float]:
    assert px.metrics_address is not None
    host, port = px.metrics_address
    return samples(f"http://{host}:{port}/metrics")


def run(main: Callable[[], Any]) -> None:
    async def bounded() -> None:
        with trio.fail_after(DEADLINE):
            await main()

    trio.run(bounded)


# -- what each case does ------------------------------------------------------------


def undecodable_request(px: RunningProxy) -> None:
    """A frame whose header does not decode (2 bytes): the proxy closes it."""

    async def main() -> None:
        stream = await trio.open_tcp_stream(*px.address)
        await stream.send_all(struct.pack(">i", 2) + b"\x00\x12")
        await closed_by_proxy(stream)

    run(main)


def served_then_closed_by_client(px: RunningProxy) -> None:
    """A well-formed request answered, then the client hangs up."""

    async def main() -> None:
        stream = await trio.open_tcp_stream(*px.address)
        await served(stream, 1)
        await stream.aclose()

    run(main)


def failing_filter(px: RunningProxy) -> None:
    """A request a filter raises on: the proxy closes the connection."""

    async def main() -> None:
        stream = await trio.open_tcp_stream(*px.address)
        await stream.send_all(api_versions_frame(1, software="explode"))
        await closed_by_proxy(stream)

    run(main)


def half_sent_request(px: RunningProxy) -> None:
    """9 of a request's 104 bytes, then nothing (request.receive.timeout.ms)."""

    async def main() -> None:
        stream = await trio.open_tcp_stream(*px.address)
        await stream.send_all(struct.pack(">i", 100) + b"\x00\x12\x00\x03\x00")
        await closed_by_proxy(stream)

    run(main)


def silent_connection(px: RunningProxy) -> None:
    """A connection that never sends a byte (connections.max.idle.ms)."""

    async def main() -> None:
        stream = await trio.open_tcp_stream(*px.address)
        await closed_by_proxy(stream)

    run(main)


def gzip_produce(px: RunningProxy, size: int) -> list[Any]:
    """confluent-kafka sends one gzip record of ``size`` zero bytes (a few
    hundred bytes on the wire); its delivery errors."""
    topic = fresh("truth")
    create(px.bootstrap_servers, topic, 2)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": px.bootstrap_servers,
            "compression.type": "gzip",
            "retries": 0,
            "message.timeout.ms": 30_000,
        }
    )
    errors: list[Any] = []
    producer.produce(
        topic, b"\0" * size, key=b"k", on_delivery=lambda e, _m: errors.append(e) if e else None
    )
    assert producer.flush(DEADLINE) == 0
    return errors


def inflating_batch(px: RunningProxy) -> None:
    errors = gzip_produce(px, 4 * LIMIT)
    assert [e.code() for e in errors] == [confluent_kafka.KafkaError.MSG_SIZE_TOO_LARGE]


def batch_within_the_limit(px: RunningProxy) -> None:
    assert gzip_produce(px, LIMIT // 2) == []


def many_small_batches(px: RunningProxy, prefix: str, *, idempotence: bool) -> None:
    """confluent-kafka sends 1000 keyed records in batches of 5 (many in flight)
    to a new topic of 4 partitions; every one is delivered without an error."""
    topic = fresh(prefix)
    create(px.bootstrap_servers, topic, 4)
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": px.bootstrap_servers,
            "enable.idempotence": idempotence,
            "linger.ms": 0,
            "batch.num.messages": 5,
        }
    )
    errors: list[Any] = []
    for i in range(1000):
        producer.produce(
            topic, b"v%d" % i, key=b"k%d" % (i % 31), on_delivery=lambda e, _m: errors.append(e)
        )
    assert producer.flush(DEADLINE) == 0
    assert [e for e in errors if e] == []


def idempotent_producer(px: RunningProxy) -> None:
    """With enable.idempotence: until a leader has acknowledged one of a new
    producer's batches, the proxy holds back its next ones (KIP-360, see
    test_proxy_pipelining); the client sends them again and reports no error.
    A fresh producer each round until one had a batch held (on a loaded machine
    the first answer can come before the second batch)."""
    for _ in range(10):
        before = scrape(px)[HELD]
        many_small_batches(px, "held", idempotence=True)
        if scrape(px)[HELD] > before:
            return
    pytest.fail("no batch of 10 new idempotent producers was held back")


def plain_producer(px: RunningProxy) -> None:
    """The same without idempotence: nothing to hold back (no sequences)."""
    many_small_batches(px, "plain", idempotence=False)


def three_connections(px: RunningProxy) -> None:
    """Three clients connected and served, then closed: accepted +3, open back."""
    socks = [socket.create_connection(px.address, timeout=DEADLINE) for _ in range(3)]
    try:
        for sock in socks:  # served: accepted by now
            sock.sendall(api_versions_frame(1))
            assert sock.recv(4)
        # At least these (others may close meanwhile: idle, or done).
        assert scrape(px)[OPEN] >= 3
    finally:
        for sock in socks:
            sock.close()


def a_scrape(px: RunningProxy) -> None:
    """Two scrapes of /metrics: HTTP connections are not client connections."""
    scrape(px)
    scrape(px)


@dataclass(frozen=True)
class Case:
    name: str
    provoke: Callable[[RunningProxy], None]
    grows: dict[Key, int]  # by exactly this (0: at least 1)
    still: tuple[Key, ...]


CASES = [
    Case("bad_request", undecodable_request, {BAD: 1}, (TIMEOUT,)),
    Case("client_hangs_up", served_then_closed_by_client, {}, (BAD, TIMEOUT, FILTER, UNREACHABLE)),
    Case("filter_raises", failing_filter, {FILTER: 1}, (BAD, UNREACHABLE)),
    Case("half_sent_request", half_sent_request, {TIMEOUT: 1}, (BAD,)),
    Case("idle_connection", silent_connection, {IDLE: 0}, (TIMEOUT, BAD)),
    Case("too_large", inflating_batch, {TOO_LARGE: 1}, (PART_FAILED,)),
    Case("within_limit", batch_within_the_limit, {}, (TOO_LARGE, PART_FAILED)),
    Case("held_back", idempotent_producer, {HELD: 0}, (PART_FAILED, TIMEOUT, BAD)),
    Case("not_held", plain_producer, {}, (HELD, PART_FAILED)),
    Case("connections", three_connections, {ACCEPTED: 3}, (BAD,)),
    Case("metrics_scrape", a_scrape, {}, (ACCEPTED, BAD)),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_a_counter_counts_its_event_and_not_a_look_alike(proxy: RunningProxy, case: Case) -> None:
    before = scrape(proxy)
    case.provoke(proxy)
    after = scrape(proxy)
    for key, by in case.grows.items():
        grew = after.get(key, 0) - before.get(key, 0)
        assert grew == by if by else grew >= 1, (key, before.get(key), after.get(key))
    for key in case.still:
        assert after[key] == before[key], (key, before[key], after[key])


def _create(port: int, topic: str, partitions: int) -> None:
    body = ct.CreateTopicsRequest(
        topics=[
            ct.CreateTopicsRequest.CreatableTopic(
                name=topic,
                num_partitions=partitions,
                replication_factor=1,
                assignments=[],
                configs=[],
            )
        ],
        timeout_ms=30_000,
        validate_only=False,
    )
    with socket.create_connection(("127.0.0.1", port), timeout=DEADLINE) as sock:
        answer = call(sock, 19, 5, body)
    assert [t.error_code for t in answer.topics] == [0]


def test_a_part_no_broker_answers_is_an_error(tmp_path: Any) -> None:
    """The one case errors{part_failed} is for: the leader of a routed Produce's
    partition cannot be reached (it advertises an address nothing listens on),
    so the part gets no answer and the client's partition fails; nothing is held back. A raw client on the proxy's
    bootstrap port (forwarded to the broker's real address) asks Metadata, which
    teaches the proxy the topic's leader, then produces."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]
    with (
        broker_in_thread(
            port=0,
            host="127.0.0.1",
            data_dir=tmp_path,
            advertised_listener=f"127.0.0.1:{dead}",
            auto_create_topics=False,
        ) as broker,
        proxy_in_thread(
            upstream=(f"127.0.0.1:{broker.address[1]}",), port=0, metrics_listen="127.0.0.1:0"
        ) as px,
    ):
        topic = fresh("dead")
        _create(broker.address[1], topic, 2)
        before = scrape(px)
        with socket.create_connection(px.address, timeout=DEADLINE) as sock:
            meta = call(sock, 3, 9, _metadata(topic))
            assert [t.error_code for t in meta.topics] == [0]
            batch = encode_batch([(0, b"k", b"v", [])])
            answer = call(sock, 0, 9, request({0: [batch]}, acks=1, topic=topic))
        codes = [p.error_code for t in answer.responses for p in t.partition_responses]
        # No answer came: the proxy's stand-in (its attempts to connect may use
        # up the request's timeout first).
        assert codes in ([ErrorCode.NETWORK_EXCEPTION], [ErrorCode.REQUEST_TIMED_OUT])
        after = scrape(px)
        assert after[PART_FAILED] - before[PART_FAILED] == 1
        assert after[HELD] == before[HELD]


def _metadata(topic: str) -> Any:
    return md.MetadataRequest(
        topics=[md.MetadataRequest.MetadataRequestTopic(name=topic)],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def test_a_client_no_upstream_broker_can_serve_is_an_error() -> None:
    """errors{upstream_unreachable}: the proxy's upstream is down, so a client's
    first request finds no broker and its connection is closed. A client that
    connects and sends nothing costs no upstream connection and is not one."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        dead = free.getsockname()[1]
    with proxy_in_thread(
        upstream=(f"127.0.0.1:{dead}",), port=0, metrics_listen="127.0.0.1:0"
    ) as px:

        async def quiet_then_asking() -> None:
            quiet = await trio.open_tcp_stream(*px.address)
            await quiet.aclose()
            assert scrape(px)[UNREACHABLE] == 0
            asking = await trio.open_tcp_stream(*px.address)
            await asking.send_all(api_versions_frame(1))
            await closed_by_proxy(asking)

        run(quiet_then_asking)
        after = scrape(px)
        assert after[UNREACHABLE] == 1
        assert after[BAD] == 0 and after[FILTER] == 0
