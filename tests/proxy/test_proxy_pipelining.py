"""A client connection's requests are pipelined through the proxy, and answered
in their order.

Kafka's rule (its protocol guide, "Network"): a broker handles the requests
of one connection in the order they were sent and answers them in that order;
clients keep several requests in flight on a connection (librdkafka's
``max.in.flight``, 5 for an idempotent producer, KIP-98's limit). Key routing sends a request's parts to other brokers than
the one the client talks to, whose answers can come in any order.

The upstream here is a fake two-broker cluster (``FakeCluster``: Metadata,
InitProducerId and Produce, as a Kafka broker answers them) that holds its
Produce answers until the test releases them, broker by broker: the proxy must
have every request of the client upstream at once while none is answered, and
the client must get its answers in its requests' order when the brokers answer
the later ones first.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio

from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages import k03_metadata as md
from trafka.codec.messages import k22_init_producer_id as ip
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.records import encode_batch, iter_batches
from trafka.proxy import serve_proxy
from trafka.sdk.partitioners import murmur2_partition

TOPIC = "orders"
LEADERS = {0: 1, 1: 2}  # partition -> node
KEYS = {
    p: [k for k in (b"k-%d" % i for i in range(100)) if murmur2_partition(k, 2) == p]
    for p in (0, 1)
}
PRODUCER = 4001


@dataclass
class FakeBroker:
    """One node: its listener, the Produce requests it holds unanswered."""

    node_id: int
    listener: trio.SocketListener
    held: list[tuple[trio.SocketStream, int, int, Any]] = field(default_factory=list)
    received: int = 0
    offsets: dict[int, int] = field(default_factory=dict)
    # (partition, producer id, base sequence, records) of each batch written, in order
    written: list[tuple[int, int, int, int]] = field(default_factory=list)
    bodies: list[Any] = field(default_factory=list)  # each Produce request, as received

    @property
    def port(self) -> int:
        return int(self.listener.socket.getsockname()[1])


_SENDING: dict[int, trio.Lock] = {}


async def _send(stream: trio.SocketStream, frame: bytes) -> None:
    """One answer written whole: the reader's answers and the released ones come from
    two tasks, and a broker writes one answer at a time on a connection."""
    lock = _SENDING.setdefault(id(stream), trio.Lock())
    async with lock:
        await stream.send_all(frame)


class FakeCluster:
    def __init__(self, nodes: list[FakeBroker]) -> None:
        self.nodes = {n.node_id: n for n in nodes}
        self.release: dict[int, trio.Event] = {n.node_id: trio.Event() for n in nodes}
        self.proxy: Any = None  # the RunningProxy in front of it
        # ("in" | "out", node, first base sequence) of each Produce received / answered
        self.log: list[tuple[str, int, int]] = []
        self.errors: dict[int, int] = {}  # partition -> the error its answers give

    def received(self) -> int:
        return sum(n.received for n in self.nodes.values())

    async def serve(self, node: FakeBroker) -> None:
        await trio.serve_listeners(lambda s: self._connection(node, s), [node.listener])

    async def _connection(self, node: FakeBroker, stream: trio.SocketStream) -> None:
        reader = FrameReader()
        async with trio.open_nursery() as nursery:
            while data := await stream.receive_some(65536):
                reader.feed(data)
                for frame in reader:
                    header, body = protocol.decode_request(frame, allow_trailing=True)
                    key, version = header.request_api_key, header.request_api_version
                    corr = header.correlation_id
                    if key == 0:
                        node.received += 1
                        node.bodies.append(body)
                        self.log.append(("in", node.node_id, _first_sequence(body)))
                        if body.acks == 0:  # Kafka answers none (the protocol guide)
                            self._produce(node, body)
                            self.log.append(("out", node.node_id, _first_sequence(body)))
                            continue
                        node.held.append((stream, corr, version, body))
                        if len(node.held) == 1:
                            nursery.start_soon(self._answer_when_released, node)
                    elif key == 3:
                        await _send(stream, protocol.encode_response(corr, key, version,
                                                                     self._metadata()))  # fmt: skip
                    elif key == 22:
                        answer = ip.InitProducerIdResponse(producer_id=PRODUCER, producer_epoch=0)
                        await _send(stream, protocol.encode_response(corr, key, version, answer))

    async def _answer_when_released(self, node: FakeBroker) -> None:
        await self.release[node.node_id].wait()
        while node.held:  # in the order they came, as a broker does
            stream, corr, version, body = node.held[0]
            answer = self._produce(node, body)
            await _send(stream, protocol.encode_response(corr, 0, version, answer))
            self.log.append(("out", node.node_id, _first_sequence(body)))
            node.held.pop(0)

    def rearm(self) -> None:
        """Hold the next answers again (after the earlier ones were all sent)."""
        assert not any(n.held for n in self.nodes.values())
        self.release = {n: trio.Event() for n in self.nodes}

    def _produce(self, node: FakeBroker, body: Any) -> Any:
        r = pm.ProduceResponse
        topics = []
        for t in body.topic_data:
            parts = []
            for p in t.partition_data:
                if p.index in self.errors:
                    error = self.errors[p.index]
                    # No offset, time or log start with an error, as Kafka's broker answers
                    # (its ProduceResponse.PartitionResponse(Errors): INVALID_OFFSET, -1).
                    parts.append(
                        r.PartitionProduceResponse(
                            index=p.index,
                            error_code=error,
                            base_offset=-1,
                            log_append_time_ms=-1,
                            log_start_offset=-1,
                        )
                    )
                    continue
                base = node.offsets.get(p.index, 0)
                for header, _ in iter_batches(p.records):
                    node.written.append(
                        (p.index, header.producer_id, header.base_sequence, header.records_count)
                    )
                    node.offsets[p.index] = node.offsets.get(p.index, 0) + header.records_count
                parts.append(r.PartitionProduceResponse(index=p.index, base_offset=base))
            topics.append(r.TopicProduceResponse(name=t.name, partition_responses=parts))
        return r(responses=topics)

    def _metadata(self) -> Any:
        m = md.MetadataResponse
        return m(
            brokers=[
                m.MetadataResponseBroker(node_id=n.node_id, host="127.0.0.1", port=n.port)
                for n in self.nodes.values()
            ],
            controller_id=1,
            topics=[
                m.MetadataResponseTopic(
                    name=TOPIC,
                    partitions=[
                        m.MetadataResponsePartition(
                            partition_index=p,
                            leader_id=leader,
                            replica_nodes=[leader],
                            isr_nodes=[leader],
                        )
                        for p, leader in LEADERS.items()
                    ],
                )
            ],
        )


def _first_sequence(body: Any) -> int:
    for t in body.topic_data:
        for p in t.partition_data:
            for header, _ in iter_batches(p.records):
                return int(header.base_sequence)
    return -1


class Client:
    """A raw client connection: requests written without waiting, answers read in turn."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = FrameReader()
        self.sent: dict[int, tuple[int, int]] = {}
        self.corr = 0

    async def send(self, key: int, version: int, body: Any) -> int:
        self.corr += 1
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=self.corr,
            client_id="pipe",
        )
        self.sent[self.corr] = (key, version)
        await self.stream.send_all(protocol.encode_request(header, body))
        return self.corr

    async def answer(self) -> tuple[int, Any]:
        while (frame := self.reader.next_frame()) is None:
            data = await self.stream.receive_some(65536)
            assert data, "the proxy closed the connection"
            self.reader.feed(data)
        corr = protocol.peek_correlation_id(frame)
        key, version = self.sent[corr]
        return corr, protocol.decode_response(frame, key, version)[1]


def produce(partition: int, keys_to: int, first: int, n: int, *, producer: bool = False) -> Any:
    """A Produce (v9, acks=-1) of ``n`` records for ``partition``, keyed to ``keys_to``."""
    records = [
        (1_000 + i, KEYS[keys_to][i % len(KEYS[keys_to])], b"v%d" % i, [])
        for i in range(first, first + n)
    ]
    if producer:
        batch = encode_batch(records, producer_id=PRODUCER, producer_epoch=0, base_sequence=first)
    else:
        batch = encode_batch(records)
    return pm.ProduceRequest(
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    pm.ProduceRequest.PartitionProduceData(index=partition, records=batch)
                ],
            )
        ],
    )


async def with_proxy(test: Any, **settings: Any) -> None:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            listeners = [(await trio.open_tcp_listeners(0, host="127.0.0.1"))[0] for _ in LEADERS]
            cluster = FakeCluster([FakeBroker(1, listeners[0]), FakeBroker(2, listeners[1])])
            for node in cluster.nodes.values():
                nursery.start_soon(cluster.serve, node)
            upstream = f"127.0.0.1:{cluster.nodes[1].port}"
            async with serve_proxy(
                upstream=[upstream], host="127.0.0.1", port=0, announce=False, **settings
            ) as px:
                cluster.proxy = px
                stream = await trio.open_tcp_stream(*px.address)
                client = Client(stream)
                await client.send(
                    3,
                    9,
                    md.MetadataRequest(
                        topics=[md.MetadataRequest.MetadataRequestTopic(name=TOPIC)]
                    ),
                )
                _, meta = await client.answer()
                assert {b.port for b in meta.brokers} <= {
                    p for _, p in px.statistics.nodes.values()
                }
                await test(cluster, client)
                await stream.aclose()
            nursery.cancel_scope.cancel()


async def all_upstream(cluster: FakeCluster, n: int) -> None:
    """Wait until the fake brokers hold ``n`` Produce requests, none answered."""
    while cluster.received() < n:
        await trio.sleep(0.01)
    assert all(not e.is_set() for e in cluster.release.values())


async def release_first(cluster: FakeCluster, node: int) -> None:
    """Let ``node`` answer what it holds, and wait until it has, the other still holding."""
    cluster.release[node].set()
    while cluster.nodes[node].held:
        await trio.sleep(0.01)


def test_a_connection_s_requests_go_upstream_together_and_are_answered_in_order() -> None:
    """Five Produce requests of one connection (librdkafka's in-flight default):
    the two brokers hold all five before answering any; broker 2 answers first,
    for requests 2 and 4; the client gets 1 to 5 in order, each naming its own
    partition and records. (Without coalescing: with it, the requests after the
    first to a leader wait for it, see test_proxy_coalesce.py.)"""

    async def test(cluster: FakeCluster, client: Client) -> None:
        # Requests alternate between the partitions of the two leaders; the
        # fourth's records all move from partition 0 to 1.
        shapes = [(0, 0), (1, 1), (0, 0), (0, 1), (1, 1)]
        sent = [
            await client.send(0, 9, produce(p, to, 10 * i, 3)) for i, (p, to) in enumerate(shapes)
        ]
        await all_upstream(cluster, len(sent))
        await release_first(cluster, 2)  # the later requests' answers first
        cluster.release[1].set()
        got = [await client.answer() for _ in sent]
        assert [corr for corr, _ in got] == sent
        for (p, to), (_, answer) in zip(shapes, got, strict=True):
            (part,) = answer.responses[0].partition_responses
            assert part.index == p and part.error_code == 0
            assert part.base_offset >= 0 if p == to else part.base_offset == -3

    trio.run(partial(with_proxy, test, coalesce=False))


def test_an_idempotent_producer_s_requests_are_pipelined_in_sequence_order() -> None:
    """An idempotent producer's five requests in flight, every record moved to
    the other broker's partition: all five upstream before any answer, each
    target's batches written with the proxy's consecutive sequences, and the
    answers in the requests' order though the brokers answer out of it."""

    async def test(cluster: FakeCluster, client: Client) -> None:
        init = ip.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
        await client.send(22, 4, init)
        _, born = await client.answer()
        assert born.producer_id == PRODUCER
        # One acknowledged batch on each target first: until then a leader may
        # hold no state for the producer and gets one batch at a time (see the
        # next test).
        seq = {0: 0, 1: 0}
        for p, to in ((0, 1), (1, 0)):
            await client.send(0, 9, produce(p, to, seq[p], 2, producer=True))
            seq[p] += 2
        for node in cluster.release.values():
            node.set()
        for _ in range(2):
            _, warm = await client.answer()
            assert warm.responses[0].partition_responses[0].error_code == 0
        cluster.rearm()
        sent_before = cluster.received()
        shapes = [(0, 1), (1, 0), (0, 1), (1, 0), (0, 1)]
        sent = []
        for p, to in shapes:
            sent.append(await client.send(0, 9, produce(p, to, seq[p], 2, producer=True)))
            seq[p] += 2
        await all_upstream(cluster, sent_before + len(sent))
        await release_first(cluster, 1)
        cluster.release[2].set()
        got = [await client.answer() for _ in sent]
        assert [corr for corr, _ in got] == sent
        for (p, _), (_, answer) in zip(shapes, got, strict=True):
            (part,) = answer.responses[0].partition_responses
            assert (part.index, part.error_code, part.base_offset) == (p, 0, -2)
        for target, node in ((1, 2), (0, 1)):
            batches = [w for w in cluster.nodes[node].written if w[0] == target]
            assert [(pid, base, n) for _, pid, base, n in batches] == [
                (PRODUCER, 2 * i, 2) for i in range(len(batches))
            ]

    trio.run(with_proxy, test)


def test_a_new_producer_s_second_batch_of_a_partition_waits_for_the_first_s_answer() -> None:
    """KIP-360: a leader with no state for a producer takes a batch at any
    sequence, so a second batch in flight behind the first could be written
    over a gap the first leaves when it is refused. Until the leader has
    acknowledged one, the proxy does not write a partition's next batch while
    the earlier is unanswered: it answers it REQUEST_TIMED_OUT, which the
    client retries with the same sequences; the retries are then pipelined and
    written with the proxy's consecutive sequences."""

    async def test(cluster: FakeCluster, client: Client) -> None:
        init = ip.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
        await client.send(22, 4, init)
        await client.answer()
        bodies = [produce(0, 1, 2 * i, 2, producer=True) for i in range(3)]
        sent = [await client.send(0, 9, body) for body in bodies]
        await all_upstream(cluster, 1)
        while cluster.proxy.statistics.routing.batches_held < 2:  # the two behind it
            await trio.sleep(0.01)
        assert cluster.received() == 1
        cluster.release[2].set()
        got = [await client.answer() for _ in sent]
        assert [corr for corr, _ in got] == sent
        codes = [a.responses[0].partition_responses[0].error_code for _, a in got]
        assert codes == [0, ErrorCode.REQUEST_TIMED_OUT, ErrorCode.REQUEST_TIMED_OUT]
        assert cluster.log == [("in", 2, 0), ("out", 2, 0)]
        again = [await client.send(0, 9, body) for body in bodies[1:]]
        got = [await client.answer() for _ in again]
        assert [a.responses[0].partition_responses[0].error_code for _, a in got] == [0, 0]
        assert sorted(cluster.log[2:]) == [("in", 2, 2), ("in", 2, 4), ("out", 2, 2), ("out", 2, 4)]

    trio.run(with_proxy, test)
