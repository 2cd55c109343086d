"""What the filter API gives a user's filter since address rewriting and the
SASL watch became filters on it (issue #65): answers seen on their frames
(``answer_frames``/``on_response_frame``), requests answered with a frame
(``request_frames``/``on_request_frame``), an answer after which the client's
connection closes (``CloseAfter``), and a pool of the filter's own chosen for a
client's connection (``ProxyServices.new_pool`` and ``ctx.session.pool``),
which key routing then writes that client's records over.

The rules are the proxy's own (docs/proxy.md, "Filters"; proxy/filters.py).
What the client is told is checked against Kafka: a Metadata answer names the
brokers a client may connect to (the protocol guide's "Metadata" and the
proxy's promise that every filter sees the proxy's listeners there), and a
delivery report names the offset its record has in the partition it names
(ProduceResponse's base offset, KIP-98), read back from the broker; keyed
records are on the partition Java's murmur2 gives them (Kafka's
``BuiltInPartitioner.partitionForKey``).
"""

from __future__ import annotations

import socket
import struct
from typing import Any

import pytest
from proxy_helpers import create, fresh, kafka_python_reports, misreported, placement

from trafka.brokerlite import RunningBroker
from trafka.codec import ApiKey, protocol
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k16_list_groups as lg
from trafka.codec.messages.headers import RequestHeader
from trafka.proxy import CloseAfter, Filter, FilterContext, ProxyServices, Respond, proxy_in_thread
from trafka.sdk.partitioners import murmur2_partition

pytestmark = pytest.mark.timeout(180)


def _frame(key: int, version: int, corr: int, body: Any) -> bytes:
    header = RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=corr, client_id="api"
    )
    return protocol.encode_request(header, body)


def _answer(sock: socket.socket) -> bytes:
    """One answer's frame (size prefix not included)."""

    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            assert chunk, "the proxy closed the connection"
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _connect(servers: str) -> socket.socket:
    host, port = servers.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=30)


class MetadataFrames(Filter):
    """Sees Metadata answers as frames; with ``close``, the client's last."""

    def __init__(self, close: bool = False) -> None:
        self.close = close
        self.seen: list[bytes] = []

    def answer_frames(self, api_key: int, api_version: int) -> bool:
        return api_key == ApiKey.METADATA

    def on_response_frame(self, ctx: FilterContext, frame: bytes) -> Any:
        self.seen.append(frame)
        return CloseAfter(frame) if self.close else frame


def test_a_users_filter_sees_answers_as_frames_naming_the_proxy(broker: RunningBroker) -> None:
    """A filter that asks for Metadata answers as frames gets the frame the
    client then receives, byte for byte, and it already names the proxy's
    listener for the broker (address rewriting sits nearest the brokers), not
    the broker; the answers it did not ask for (ListGroups) it never sees."""
    watch = MetadataFrames()
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, route_keys="none", filters=(watch,)
    ) as px:
        with _connect(px.bootstrap_servers) as sock:
            sock.sendall(_frame(ApiKey.METADATA, 9, 1, md.MetadataRequest(topics=[])))
            got = _answer(sock)
            sock.sendall(_frame(ApiKey.LIST_GROUPS, 4, 2, lg.ListGroupsRequest()))
            _, groups = protocol.decode_response(_answer(sock), ApiKey.LIST_GROUPS, 4)
        listeners = dict(px.statistics.nodes)
    assert watch.seen == [got]
    assert groups.error_code == 0
    _, body = protocol.decode_response(got, ApiKey.METADATA, 9)
    named = {b.node_id: (b.host, b.port) for b in body.brokers}
    assert named and named == listeners
    assert broker.bootstrap_servers not in {f"{h}:{p}" for h, p in named.values()}


def test_close_after_sends_the_answer_then_closes(broker: RunningBroker) -> None:
    """``CloseAfter`` from ``on_response_frame``: the client gets that answer
    whole, then its connection ends (what the SASL watch does to a refused
    client)."""
    watch = MetadataFrames(close=True)
    with (
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,), port=0, route_keys="none", filters=(watch,)
        ) as px,
        _connect(px.bootstrap_servers) as sock,
    ):
        sock.sendall(_frame(ApiKey.METADATA, 9, 5, md.MetadataRequest(topics=[])))
        header, body = protocol.decode_response(_answer(sock), ApiKey.METADATA, 9)
        assert header.correlation_id == 5 and body.brokers
        assert sock.recv(100) == b""


class ListGroupsHere(Filter):
    """Answers ListGroups itself, with a frame it writes (no broker asked)."""

    def request_frames(self, api_key: int, api_version: int) -> bool:
        return api_key == ApiKey.LIST_GROUPS

    def on_request_frame(self, ctx: FilterContext, frame: bytes) -> Any:
        body = lg.ListGroupsResponse(
            error_code=0, groups=[lg.ListGroupsResponse.ListedGroup(group_id="made-here")]
        )
        answer = protocol.encode_response(ctx.correlation_id, ctx.api_key, ctx.api_version, body)
        return Respond(answer[4:])


def test_a_filter_answers_with_a_frame_and_nothing_reaches_the_broker(
    broker: RunningBroker,
) -> None:
    """A filter that sees ListGroups requests as frames answers them with a
    frame: the client gets that answer, in its place among its answers (a
    Metadata forwarded before it and one after), and the broker's own groups
    are not listed."""
    with (
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,),
            port=0,
            route_keys="none",
            filters=(ListGroupsHere(),),
        ) as px,
        _connect(px.bootstrap_servers) as sock,
    ):
        sock.sendall(
            _frame(ApiKey.METADATA, 9, 1, md.MetadataRequest(topics=[]))
            + _frame(ApiKey.LIST_GROUPS, 4, 2, lg.ListGroupsRequest())
            + _frame(ApiKey.METADATA, 9, 3, md.MetadataRequest(topics=[]))
        )
        first, second, third = _answer(sock), _answer(sock), _answer(sock)
    assert protocol.decode_response(first, ApiKey.METADATA, 9)[0].correlation_id == 1
    header, groups = protocol.decode_response(second, ApiKey.LIST_GROUPS, 4)
    assert header.correlation_id == 2 and [g.group_id for g in groups.groups] == ["made-here"]
    assert protocol.decode_response(third, ApiKey.METADATA, 9)[0].correlation_id == 3


class OwnPool(Filter):
    """Chooses, for every client connection, a pool of its own (opened with
    ``services.new_pool``, counting the connections it opens) as the one that
    requests on the client's behalf go over."""

    api_keys = frozenset({ApiKey.API_VERSIONS})

    def attach(self, services: ProxyServices) -> None:
        self.opened: list[int] = []

        async def connect(node_id: int) -> Any:
            self.opened.append(node_id)
            return await services.connect(node_id)

        self.pool = services.new_pool(connect)

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        ctx.session.pool = self.pool
        return body


def _routed_over_own_pool(servers: str) -> None:
    topic = fresh("ownpool")
    create(servers, topic, 4, served=True)
    own = OwnPool()
    sends = [(b"v%d" % i, b"k%d" % (i % 23)) for i in range(300)]
    with proxy_in_thread(upstream=(servers,), port=0, filters=(own,)) as px:
        reports = kafka_python_reports(px.bootstrap_servers, topic, sends, acks="all")
        routing = px.statistics.routing
    records = placement(servers, topic, 4)
    assert misreported(records, reports) is None
    assert sorted(r.value for r in records) == sorted(v for v, _ in sends)
    keys = dict((v, k) for v, k in sends)
    assert all(r.partition == murmur2_partition(keys[r.value], 4) for r in records)
    assert routing.records_moved > 0  # kafka-python placed them by CRC32: the proxy moved them
    assert own.opened  # the routed parts went over the filter's pool


def test_key_routing_writes_over_the_pool_a_filter_chose(broker: RunningBroker) -> None:
    """A user's filter sets ``ctx.session.pool`` to a pool it opened with
    ``ProxyServices.new_pool`` (as the SASL watch does per principal): key
    routing writes the client's routed records over it, every key lands on its
    murmur2 partition, and every delivery report is true."""
    _routed_over_own_pool(broker.bootstrap_servers)


@pytest.mark.kafka
def test_key_routing_writes_over_the_pool_a_filter_chose_on_kafka(kafka4: Any) -> None:
    """The same in front of Apache Kafka 4."""
    _routed_over_own_pool(kafka4.bootstrap_servers)


def test_handled_ns_counts_the_chains_steps_and_not_its_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``ctx.handled_ns`` (docs/proxy.md, "Filters"; what the tenants filter's
    request_percentage counts, as Kafka's request quota counts a request
    handler thread's time, KIP-124): the time the chain spends on a request
    and, on the way back, what came before the filter reading it. On a clock
    the filters move themselves: a synchronous filter's 5 ms, an async one's
    7 ms and 3 ms around a wait, during which other work moves the clock by a
    second that is no handling; on the answer's way back the async one's 2 ms
    is in what the first one reads."""
    import trio
    import trio.testing

    from trafka.proxy import filters

    now = [0]
    monkeypatch.setattr(filters, "handling_clock", lambda: now[0])
    ms = 1_000_000
    read: list[int] = []

    class Sync(Filter):
        api_keys = frozenset({ApiKey.LIST_GROUPS})

        def on_request(self, ctx: FilterContext, body: Any) -> Any:
            now[0] += 5 * ms
            return body

        def on_response(self, ctx: FilterContext, body: Any) -> Any:
            read.append(ctx.handled_ns)
            return body

    class Waits(Sync):
        async def on_request(self, ctx: FilterContext, body: Any) -> Any:
            now[0] += 7 * ms
            await trio.sleep(1)
            now[0] += 3 * ms
            return body

        def on_response(self, ctx: FilterContext, body: Any) -> Any:
            now[0] += 2 * ms
            return body

    async def other_work() -> None:
        await trio.sleep(0.5)  # while the async filter waits
        now[0] += 1000 * ms

    chain = filters.Route.of((Sync(), Waits()), ApiKey.LIST_GROUPS, 4).chain
    ctx = FilterContext(ApiKey.LIST_GROUPS, 4, 9, "api", None, -1)

    async def main() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(other_work)
            request = _frame(ApiKey.LIST_GROUPS, 4, 9, lg.ListGroupsRequest())[4:]
            await filters.run_request(chain, ctx, request)

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))
    assert ctx.handled_ns == 15 * ms
    answer = protocol.encode_response(9, ApiKey.LIST_GROUPS, 4, lg.ListGroupsResponse())[4:]
    filters.run_response(chain, ctx, answer)
    assert read == [17 * ms] and ctx.handled_ns == 17 * ms
