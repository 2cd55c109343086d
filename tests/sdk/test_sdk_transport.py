"""BrokerConnection / Cluster against the fake broker: timeouts, protocol errors, reconnects."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.from_thread
import pytest
from sdk_fakebroker import FakeBroker

from trafka.codec.messages import k03_metadata as md
from trafka.sdk.config import ClientConfig
from trafka.sdk.errors import (
    KafkaConnectionError,
    NoBrokersAvailableError,
    ProtocolError,
    RequestTimeoutError,
)
from trafka.sdk.transport import Cluster, backoff_delay

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def connected(
    broker: FakeBroker, *, timeout: float = 10, **settings: Any
) -> AsyncIterator[tuple[Cluster, Any]]:
    """A cluster and a connection to ``broker``; their tasks stop at the end."""
    with anyio.fail_after(timeout):
        async with anyio.create_task_group() as tg:
            cluster = Cluster(ClientConfig(bootstrap_servers=broker.bootstrap, **settings), tg)
            yield cluster, await cluster.any_connection()
            tg.cancel_scope.cancel()


def _produce_request(topic: str, batches: list[bytes], timeout_ms: int = 1000) -> Any:
    """A Produce request with one batch for each partition, from 0, naming the topic
    (sent at v12: v13 names topics by id)."""
    from trafka.codec.messages import k00_produce as produce

    P = produce.ProduceRequest
    return P(
        acks=1,
        timeout_ms=timeout_ms,
        topic_data=[
            P.TopicProduceData(
                name=topic,
                partition_data=[
                    P.PartitionProduceData(index=i, records=r) for i, r in enumerate(batches)
                ],
            )
        ],
    )


def test_backoff_delay_bounds() -> None:
    import random

    rng = random.Random(3)
    assert backoff_delay(0.05, 1.0, 0) == 0.0
    for n, base in ((1, 0.05), (2, 0.1), (3, 0.2), (10, 1.0)):
        d = backoff_delay(0.05, 1.0, n, rng)
        assert 0.8 * base <= d <= 1.2 * base


async def test_pipelined_requests_and_metadata(fake_broker: FakeBroker) -> None:
    async with connected(fake_broker) as (cluster, conn):
        results: list[Any] = []

        async def one() -> None:
            results.append(await conn.request(3, md.MetadataRequest(topics=None)))

        async with anyio.create_task_group() as inner:
            for _ in range(20):
                inner.start_soon(one)
        assert len(results) == 20 and all(r.cluster_id == "fake" for r in results)
        await cluster.refresh_metadata(["t"])
        assert cluster.metadata.partition_count("t") == 3
        assert cluster.metadata.leader_for("t", 1) == 0
        await cluster.aclose()


async def test_request_timeout_fails_connection(fake_broker: FakeBroker) -> None:
    async def hang(header: object, body: object) -> None:
        await anyio.sleep_forever()

    async with connected(fake_broker, request_timeout_ms=200) as (_, conn):
        fake_broker.handlers[3] = hang
        with pytest.raises(RequestTimeoutError):
            await conn.request(3, md.MetadataRequest())
        assert not conn.alive
        with pytest.raises(KafkaConnectionError):
            await conn.request(3, md.MetadataRequest())


async def test_request_timeout_after_an_answer_on_the_same_connection(
    fake_broker: FakeBroker,
) -> None:
    # The reader has just handled an answer and waits for the socket with no
    # request in flight; the next request must still bring its deadline to it.
    answered = 0

    async def once(header: Any, body: Any) -> Any:
        nonlocal answered
        if answered:
            await anyio.sleep_forever()
        answered += 1
        return fake_broker.metadata(header, body)

    async with connected(fake_broker, request_timeout_ms=300) as (_, conn):
        fake_broker.handlers[3] = once
        first = await conn.request(3, md.MetadataRequest(topics=None))
        assert first.cluster_id == "fake"
        await anyio.sleep(0.05)  # the reader is waiting for the socket by now
        # (Were the deadline lost, the test's own fail_after would end it instead.)
        with pytest.raises(RequestTimeoutError):
            await conn.request(3, md.MetadataRequest(topics=None))
        assert not conn.alive


async def test_wrong_correlation_id_is_protocol_error(fake_broker: FakeBroker) -> None:
    from trafka.codec import encode_response

    def liar(header: Any, body: object) -> bytes:
        return encode_response(
            header.correlation_id + 7, 3, header.request_api_version, md.MetadataResponse()
        )

    async with connected(fake_broker) as (cluster, conn):
        fake_broker.handlers[3] = liar
        with pytest.raises(ProtocolError, match="correlation id"):
            await conn.request(3, md.MetadataRequest())
        assert not conn.alive
        # a new connection is made for the next caller
        del fake_broker.handlers[3]
        again = await cluster.any_connection()
        assert again is not conn and again.alive


async def test_undecodable_answer_fails_its_request(fake_broker: FakeBroker) -> None:
    # The request the bad frame answers must fail at once (it used to be dropped
    # from the queue before decoding, and waited forever).
    def garbage(header: Any, body: object) -> bytes:
        return b"\x00\x00\x00\x06" + header.correlation_id.to_bytes(4, "big") + b"\xff\xff"

    async with connected(fake_broker, request_timeout_ms=60_000) as (_, conn):
        fake_broker.handlers[3] = garbage
        with anyio.fail_after(5), pytest.raises(ProtocolError, match="undecodable"):
            await conn.request(3, md.MetadataRequest())
        assert not conn.alive


async def test_api_versions_error_fails_the_connect(fake_broker: FakeBroker) -> None:
    from trafka.codec import encode_response
    from trafka.codec.messages import k18_api_versions as av

    def refuse(header: Any, body: object) -> bytes:
        answer = av.ApiVersionsResponse(error_code=57, api_keys=[])
        return encode_response(header.correlation_id, 18, header.request_api_version, answer)

    fake_broker.handlers[18] = refuse
    cfg = ClientConfig(bootstrap_servers=fake_broker.bootstrap, request_timeout_ms=60_000)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            cluster = Cluster(cfg, tg)
            with pytest.raises(NoBrokersAvailableError, match="ApiVersions failed"):
                await cluster.any_connection()
            tg.cancel_scope.cancel()


async def test_broker_closing_connection(fake_broker: FakeBroker) -> None:
    async with connected(fake_broker) as (_, conn):
        fake_broker.handlers[3] = lambda h, b: "close"
        with pytest.raises(KafkaConnectionError, match="closed"):
            await conn.request(3, md.MetadataRequest())
        # The dead connection's reader and writer end with it.
        for _ in range(100):
            names = [t.name or "" for t in anyio.get_running_tasks()]
            if not any(n.startswith(("trafka reader", "trafka writer")) for n in names):
                break
            await anyio.sleep(0.01)
        else:
            raise AssertionError(f"connection tasks still running: {names}")


async def test_no_brokers(anyio_backend: str) -> None:
    async with await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0) as listener:
        port = listener.extra(anyio.abc.SocketAttribute.local_port)
    cfg = ClientConfig(bootstrap_servers=f"127.0.0.1:{port}")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            cluster = Cluster(cfg, tg)
            with pytest.raises(NoBrokersAvailableError):
                await cluster.any_connection()
            # the failed node backs off before the next attempt
            assert cluster.connect_delay(-1) > 0
            tg.cancel_scope.cancel()


@pytest.mark.parametrize("component", ["admin", "consumer", "producer"])
async def test_errors_leave_unwrapped(fake_broker: FakeBroker, component: str) -> None:
    from trafka.sdk import open_admin, open_consumer, open_producer

    opener = {"admin": open_admin, "consumer": open_consumer, "producer": open_producer}[component]
    with anyio.fail_after(10):
        with pytest.raises(KeyError, match="boom"):
            async with opener(bootstrap_servers=fake_broker.bootstrap):
                await anyio.sleep(0.01)
                raise KeyError("boom")


async def test_frames_larger_than_the_socket_buffer_go_out_whole_and_in_order(
    fake_broker: FakeBroker,
) -> None:
    """A frame the socket cannot take at once is queued; later frames wait behind it."""
    from trafka.codec.records import encode_batch

    big = encode_batch([(0, None, b"v" * (8 << 20), ())])
    big1 = encode_batch([(0, None, b"w" * (4 << 20), ())])
    small = encode_batch([(0, None, b"after", ())])

    async with connected(fake_broker, timeout=20) as (_, conn):
        results: list[int] = []

        async def one(*records: bytes) -> None:
            # One batch per partition: each big one is a frame part of its own,
            # written by sendmsg without a copy; what the socket does not take is queued.
            resp = await conn.request(0, _produce_request("t", list(records)), version=12)
            results.append(resp.responses[0].partition_responses[0].base_offset)

        async with anyio.create_task_group() as inner:
            inner.start_soon(one, big, big1)
            await anyio.sleep(0)  # the big frame is written (or queued) first
            inner.start_soon(one, small)
        assert sorted(results) == [0, 1]
        assert [r.value for r in fake_broker.records("t", 0)] == [b"v" * (8 << 20), b"after"]
        assert [r.value for r in fake_broker.records("t", 1)] == [b"w" * (4 << 20)]
        assert conn.alive


async def test_a_frame_of_more_parts_than_one_sendmsg_takes(anyio_backend: str) -> None:
    """A Produce of 600 partitions has 1,201 parts: one sendmsg takes at most
    512 of them, the rest follow from the queue, in order."""
    from sdk_fakebroker import serving

    from trafka.codec.records import encode_batch

    values = [bytes([65 + i % 26]) * 9000 + b"%d" % i for i in range(600)]
    request = _produce_request("many", [encode_batch([(0, None, v, ())]) for v in values], 5000)
    async with serving(FakeBroker(topics={"many": 600})) as broker:
        async with connected(broker, timeout=30) as (_, conn):
            resp = await conn.request(0, request, version=12)
            assert all(p.error_code == 0 for p in resp.responses[0].partition_responses)
            assert conn.alive
        for i, v in enumerate(values):
            assert [r.value for r in broker.records("many", i)] == [v]


@pytest.mark.parametrize("has_sendmsg", [True, False])
async def test_a_frames_parts_go_in_one_sendmsg_or_joined_without_it(
    fake_broker: FakeBroker, monkeypatch: pytest.MonkeyPatch, has_sendmsg: bool
) -> None:
    """A frame with big batches is one sendmsg of its parts; without sendmsg
    (Windows), the parts are joined and sent as one."""
    from trafka.codec.records import encode_batch
    from trafka.sdk import connection

    monkeypatch.setattr(connection, "_HAS_SENDMSG", has_sendmsg)
    values = [b"x" * 20000, b"y" * 30000]
    request = _produce_request("t", [encode_batch([(0, None, v, ())]) for v in values])
    async with connected(fake_broker) as (_, conn):
        sent: list[Any] = []
        real = conn._sock
        monkeypatch.setattr(conn, "_sock", _Recording(real, sent))
        resp = await conn.request(0, request, version=12)
        assert all(p.error_code == 0 for p in resp.responses[0].partition_responses)
        assert sent == ["sendmsg" if has_sendmsg else "send"]
    assert [r.value for r in fake_broker.records("t", 0)] == [values[0]]
    assert [r.value for r in fake_broker.records("t", 1)] == [values[1]]


class _Recording:
    """A socket that records which of send and sendmsg is called."""

    def __init__(self, sock: Any, calls: list[str]) -> None:
        self._sock, self._calls = sock, calls

    def send(self, data: Any) -> int:
        self._calls.append("send")
        return int(self._sock.send(data))

    def sendmsg(self, buffers: Any) -> int:
        self._calls.append("sendmsg")
        return int(self._sock.sendmsg(buffers))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sock, name)


async def test_cancelled_caller_does_not_break_the_connection(fake_broker: FakeBroker) -> None:
    """Cancelling a request's caller leaves the frame written and the connection usable."""

    async def slow(header: object, body: object) -> object:
        await anyio.sleep(0.2)
        return fake_broker.metadata(header, body)

    async with connected(fake_broker) as (_, conn):
        fake_broker.handlers[3] = slow
        with anyio.move_on_after(0.05) as scope:
            await conn.request(3, md.MetadataRequest(topics=None))
        assert scope.cancelled_caught
        # The late response is matched (and dropped); the next one is ours.
        resp = await conn.request(3, md.MetadataRequest(topics=None))
        assert resp.cluster_id == "fake" and conn.alive


@pytest.fixture
def broker_in_thread() -> Iterator[FakeBroker]:
    """A fake broker on its own event loop in another thread: it answers while the
    test's loop is blocked, so a test can hold its own tasks (the reader) back."""
    broker = FakeBroker(topics={"t": 3})

    async def serve(*, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        broker.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener:
            task_status.started()
            await listener.serve(broker.serve)

    with anyio.from_thread.start_blocking_portal() as portal:
        serving, _ = portal.start_task(serve)
        yield broker
        serving.cancel()


class _Recorded:
    def __init__(self) -> None:
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False

    def resolve(self, result: Any) -> None:
        self.result, self.done = result, True

    def fail(self, error: BaseException) -> None:
        self.error, self.done = error, True


def _receive_without_yielding(conn: Any, completion: _Recorded) -> None:
    """Call receive_ready() until ``completion`` is done, never yielding to the loop
    (so the connection's reader task cannot be the one that handled it)."""
    deadline = time.monotonic() + 10
    while not completion.done and time.monotonic() < deadline:
        conn.receive_ready()
        if not completion.done:
            time.sleep(0.001)


async def test_receive_ready_handles_a_waiting_response_without_the_reader(
    broker_in_thread: FakeBroker,
) -> None:
    async with connected(broker_in_thread, timeout=20) as (_, conn):
        conn.receive_ready()  # nothing waiting: a no-op
        first, second = _Recorded(), _Recorded()
        conn.send(3, md.MetadataRequest(topics=None), first)
        conn.send(3, md.MetadataRequest(topics=None), second)
        _receive_without_yielding(conn, second)
        assert first.done and second.done  # in order, both from one call or two
        assert first.result.cluster_id == "fake" and second.result.cluster_id == "fake"
        assert conn.alive and conn.in_flight == 0
        # The reader goes on as before.
        assert (await conn.request(3, md.MetadataRequest(topics=None))).cluster_id == "fake"


async def test_receive_ready_fails_the_connection_the_broker_closed(
    broker_in_thread: FakeBroker,
) -> None:
    async with connected(broker_in_thread, timeout=20) as (_, conn):
        broker_in_thread.handlers[3] = lambda h, b: "close"
        waiting = _Recorded()
        conn.send(3, md.MetadataRequest(topics=None), waiting)
        _receive_without_yielding(conn, waiting)
        assert isinstance(waiting.error, KafkaConnectionError)
        assert "closed the connection" in str(waiting.error)
        assert not conn.alive
        conn.receive_ready()  # a dead connection: nothing to do


async def test_the_loop_clock_is_anyios_clock_called_directly(anyio_backend: str) -> None:
    """The drivers read the running loop's own clock (what anyio.current_time()
    returns) without anyio's backend lookup on every call."""
    from trafka.sdk._util import loop_clock

    clock = loop_clock()
    assert clock is not anyio.current_time
    before = anyio.current_time()
    now = clock()
    assert before <= now <= anyio.current_time()
    await anyio.sleep(0.02)
    assert clock() >= now + 0.01


def test_the_loop_clock_follows_a_mock_clock_and_falls_back_outside_a_loop() -> None:
    import trio
    import trio.testing

    from trafka.sdk._util import loop_clock

    mock = trio.testing.MockClock()

    async def main() -> None:
        clock = loop_clock()
        assert clock == mock.current_time  # the clock's own method, one call
        mock.jump(1000.0)
        assert clock() == anyio.current_time() == mock.current_time()

    trio.run(main, clock=mock)
    assert loop_clock() is anyio.current_time  # no loop running here
