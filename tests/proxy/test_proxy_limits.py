"""The proxy's own limits (issue #46), with Kafka's names and meanings as
brokerlite has them, through real sockets: the bytes of requests it holds
(``queued.max.request.bytes``: reading pauses, nothing fails), idle connections
(``connections.max.idle.ms``), requests that stop or trickle mid-frame
(``request.receive.timeout.ms``), frames larger than ``socket.request.max.bytes``
(``max_frame_size``) and size prefixes that lie; and what an idle connection
costs (no upstream connection until it speaks).

Each test starts its own proxy with small limits, in front of the module's
brokerlite. A misbehaving raw socket sits beside well-behaved peers (a raw
ApiVersions client, confluent-kafka) that must go on being served. Nothing here
measures time: the tests wait, under ``trio.fail_after`` deadlines, for what must
happen.
"""

from __future__ import annotations

import logging
import socket
import struct
import threading
import tracemalloc
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import trio
from click.testing import CliRunner
from proxy_helpers import confluent_produce, create, fresh, placement
from test_proxy_metrics import samples

from trafka.brokerlite import RunningBroker
from trafka.codec import protocol
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages.headers import RequestHeader
from trafka.proxy import (
    Filter,
    FilterContext,
    ProxyConfig,
    RespondLater,
    RunningProxy,
    proxy_in_thread,
)
from trafka.proxy.cli import command

pytestmark = pytest.mark.timeout(120)

DEADLINE = 30  # seconds any step may take on a loaded machine


def api_versions_frame(corr: int, software: str = "trafka-test") -> bytes:
    """A whole ApiVersions v3 request, size prefix included."""
    header = RequestHeader(
        request_api_key=18, request_api_version=3, correlation_id=corr, client_id="limits"
    )
    body = api_versions.ApiVersionsRequest(
        client_software_name=software, client_software_version="1"
    )
    return protocol.encode_request(header, body)


async def read_frame(stream: trio.SocketStream) -> bytes:
    data = bytearray()
    while len(data) < 4 or len(data) < 4 + int.from_bytes(data[:4], "big"):
        chunk = await stream.receive_some(65536)
        assert chunk, "closed by the proxy"
        data += chunk
    return bytes(data[4:])


async def served(stream: trio.SocketStream, corr: int) -> None:
    """One ApiVersions round trip, answered without error."""
    await stream.send_all(api_versions_frame(corr))
    header, body = protocol.decode_response(await read_frame(stream), 18, 3)
    assert header.correlation_id == corr
    assert body.error_code == 0


async def closed_by_proxy(stream: trio.SocketStream) -> None:
    while True:
        try:
            data = await stream.receive_some(65536)
        except trio.BrokenResourceError:  # reset: closed all the same
            return
        if not data:
            return


async def until(condition: Callable[[], bool]) -> None:
    while not condition():
        await trio.sleep(0.01)


def run(main: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        with trio.fail_after(DEADLINE * 3):
            await main()

    trio.run(bounded)


def proxy(broker: RunningBroker, **limits: Any) -> Any:
    return proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0, **limits)


def two_partitions(broker: RunningBroker) -> str:
    """A new topic of two partitions (for a producer beside a misbehaving client)."""
    topic = fresh()
    create(broker.bootstrap_servers, topic, 2)
    return topic


def produce_beside(px: RunningProxy, topic: str, n: int = 50) -> Awaitable[None]:
    """confluent-kafka producing through the proxy (in a thread)."""
    return trio.to_thread.run_sync(confluent_produce, px.bootstrap_servers, topic, n)


def test_the_cli_takes_the_limits() -> None:
    """``trafka proxy`` hands each option to ProxyConfig (a bad value is a usage
    error naming the setting, before anything is started)."""
    for option, name in (
        ("--queued-max-request-bytes", "queued_max_request_bytes"),
        ("--connections-max-idle-ms", "connections_max_idle_ms"),
        ("--request-receive-timeout-ms", "request_receive_timeout_ms"),
    ):
        result = CliRunner().invoke(command, ["--upstream", "b:9092", option, "0"])
        assert result.exit_code == 2
        assert name in result.output


def test_the_limits_are_checked_when_configured() -> None:
    for name in (
        "queued_max_request_bytes",
        "connections_max_idle_ms",
        "request_receive_timeout_ms",
    ):
        with pytest.raises(ValueError, match=name):
            ProxyConfig(upstream=("b:9092",), **{name: 0})
        assert getattr(ProxyConfig(upstream=("b:9092",), **{name: -1}), name) == -1


def test_a_silent_connection_opens_no_upstream_connection(broker: RunningBroker) -> None:
    """Until a client sends its first request, its connection is one task and
    its socket: no upstream connection is opened for it."""
    with proxy(broker) as px:

        async def main() -> None:
            silent = [await trio.open_tcp_stream(*px.address) for _ in range(20)]
            with trio.fail_after(DEADLINE):
                await until(lambda: px.statistics.open_connections == 20)
            assert px.statistics.upstream_connections == 0
            await served(silent[0], 1)
            assert px.statistics.upstream_connections == 1
            for stream in silent:
                await stream.aclose()
            with trio.fail_after(DEADLINE):
                await until(lambda: px.statistics.open_connections == 0)
            assert px.statistics.upstream_connections == 0

        run(main)


def test_idle_connections_are_closed_and_others_go_on(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """connections.max.idle.ms: a connection silent since it opened, and one
    silent after a request, are both closed; a producer is served after."""
    caplog.set_level(logging.DEBUG, logger="trafka.proxy")
    with proxy(broker, connections_max_idle_ms=1000) as px:
        topic = two_partitions(broker)

        async def main() -> None:
            silent = await trio.open_tcp_stream(*px.address)
            spoke = await trio.open_tcp_stream(*px.address)
            await served(spoke, 1)
            with trio.fail_after(DEADLINE):
                await closed_by_proxy(silent)
                await closed_by_proxy(spoke)
            assert px.statistics.idle_closed >= 2 and px.statistics.timeouts == 0
            with trio.fail_after(DEADLINE):
                await produce_beside(px, topic)

        run(main)
        assert "(connections.max.idle.ms)" in caplog.text
        assert len(placement(broker.bootstrap_servers, topic, 2)) == 50


class HeldApiVersions(Filter):
    """Answers ApiVersions itself once the test lets it (a slow answer)."""

    api_keys = frozenset({18})

    def __init__(self) -> None:
        self.release = threading.Event()

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        async def answer() -> Any:
            await trio.to_thread.run_sync(self.release.wait, abandon_on_cancel=True)
            return api_versions.ApiVersionsResponse(error_code=0)

        return RespondLater(answer)


def test_a_connection_waiting_for_its_answer_is_not_idle(broker: RunningBroker) -> None:
    """As brokerlite (a parked request does not count as idle): a client waiting
    for an answer longer than connections.max.idle.ms gets it, then idles out.
    Meanwhile its request's bytes stay reserved: a filter's answer made later
    (as key routing's) holds them until it is made."""
    held = HeldApiVersions()
    with proxy(broker, connections_max_idle_ms=200, filters=(held,), route_keys="none") as px:
        frame = api_versions_frame(7)

        async def main() -> None:
            stream = await trio.open_tcp_stream(*px.address)
            await stream.send_all(frame)
            with trio.fail_after(DEADLINE):
                await until(lambda: px.request_budget.used == len(frame) - 4)
            # Several idle periods pass while the answer is owed.
            await trio.sleep(1.0)
            assert px.statistics.idle_closed == 0
            assert px.request_budget.used == len(frame) - 4
            held.release.set()
            with trio.fail_after(DEADLINE):
                header, body = protocol.decode_response(await read_frame(stream), 18, 3)
                assert (header.correlation_id, body.error_code) == (7, 0)
                assert px.request_budget.used == 0
                await closed_by_proxy(stream)  # then, silent, it is idle
            assert px.statistics.idle_closed == 1

        run(main)


def test_a_request_that_stops_mid_frame_is_dropped_and_a_producer_goes_on(
    broker: RunningBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """request.receive.timeout.ms: 9 of a request's 104 bytes, then nothing: the
    connection is closed; a raw client and confluent-kafka are served meanwhile."""
    caplog.set_level(logging.WARNING, logger="trafka.proxy")
    with proxy(broker, request_receive_timeout_ms=500) as px:
        topic = two_partitions(broker)

        async def main() -> None:
            bystander = await trio.open_tcp_stream(*px.address)
            stalled = await trio.open_tcp_stream(*px.address)
            await stalled.send_all(struct.pack(">i", 100) + b"\x00\x12\x00\x03\x00")
            with trio.fail_after(DEADLINE):
                await produce_beside(px, topic)
                await served(bystander, 1)
                await closed_by_proxy(stalled)
                await served(bystander, 2)
                # Its reservation given back; waited for: a request of the
                # producer's (a metadata refresh) may still be in flight.
                await until(lambda: px.request_budget.used == 0)

        run(main)
        assert "9 of 104 bytes of a request arrived in 500 ms (request.receive.timeout.ms)" in (
            caplog.text
        )
        assert px.statistics.timeouts == 1
        assert len(placement(broker.bootstrap_servers, topic, 2)) == 50


def test_a_trickled_request_is_dropped_however_steady_the_trickle(broker: RunningBroker) -> None:
    """Slowloris: a byte every 20 ms never completes a request; the request's own
    deadline (not a gap between reads) closes the connection."""
    with proxy(broker, request_receive_timeout_ms=500) as px:

        async def main() -> None:
            stream = await trio.open_tcp_stream(*px.address)
            await stream.send_all(struct.pack(">i", 1000))
            with trio.fail_after(DEADLINE):
                try:
                    while not px.statistics.timeouts:
                        await stream.send_all(b"\x00")
                        await trio.sleep(0.02)
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    pass
                await closed_by_proxy(stream)
            assert px.statistics.timeouts == 1

        run(main)


def test_a_size_prefix_past_max_frame_size_closes_before_any_body(broker: RunningBroker) -> None:
    """socket.request.max.bytes: a size prefix beyond it closes the connection at
    once, without waiting for (or reserving) the body it announces."""
    with proxy(broker, max_frame_size=10_000) as px:

        async def main() -> None:
            bystander = await trio.open_tcp_stream(*px.address)
            liar = await trio.open_tcp_stream(*px.address)
            await liar.send_all(struct.pack(">i", 10_001))
            with trio.fail_after(DEADLINE):
                await closed_by_proxy(liar)
                await served(bystander, 1)
            assert px.statistics.refused_frames == 1
            assert px.request_budget.used == 0

        run(main)


def test_a_lying_size_prefix_allocates_nothing_it_announces(broker: RunningBroker) -> None:
    """A prefix announcing 64 MiB (under max_frame_size), then 10 bytes: the
    proxy reserves the size from its budget (accounting only) but allocates
    memory for the bytes that came, not for the length; the others go on."""
    announced = 64 * 1024 * 1024
    with proxy(broker, request_receive_timeout_ms=-1) as px:

        async def main() -> None:
            bystander = await trio.open_tcp_stream(*px.address)
            await served(bystander, 1)
            liar = await trio.open_tcp_stream(*px.address)
            tracemalloc.start()
            try:
                await liar.send_all(struct.pack(">i", announced) + b"\x00\x12\x00\x03" + b"x" * 6)
                with trio.fail_after(DEADLINE):
                    await until(lambda: px.request_budget.used == announced)
                    await served(bystander, 2)  # 100 MiB budget: room left for it
                _, peak = tracemalloc.get_traced_memory()
            finally:
                tracemalloc.stop()
            # Python's allocations (this process: the proxy's thread included)
            # never came near the announced size.
            assert peak < announced // 4
            await liar.aclose()
            with trio.fail_after(DEADLINE):
                await until(lambda: px.request_budget.used == 0)
            await served(bystander, 3)

        run(main)


def test_a_full_request_budget_pauses_reading_and_fails_nothing(broker: RunningBroker) -> None:
    """queued.max.request.bytes: one connection's request still arriving holds
    nearly the whole budget; the next requests (a raw client's, confluent-kafka's)
    wait unread (backpressure), then are all served, none refused, once it is in.
    The waits are flow control, trafka_proxy_flow_control_total{kind="budget_wait"},
    not errors."""
    big = api_versions_frame(1, software="a" * 4000)
    limit = len(big) - 4 + 10  # no room for another request beside it
    with proxy(broker, queued_max_request_bytes=limit, metrics_listen="127.0.0.1:0") as px:
        budget = px.request_budget
        topic = two_partitions(broker)

        async def main() -> None:
            holder = await trio.open_tcp_stream(*px.address)
            waiter = await trio.open_tcp_stream(*px.address)
            await holder.send_all(big[:100])
            with trio.fail_after(DEADLINE):
                await until(lambda: budget.used == len(big) - 4)
            await waiter.send_all(api_versions_frame(2))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(produce_beside, px, topic)
                with trio.fail_after(DEADLINE):
                    # The raw client and the producer's first request wait unread.
                    await until(lambda: budget.waiting >= 2)
                assert budget.used == len(big) - 4
                await holder.send_all(big[100:])
                with trio.fail_after(DEADLINE):
                    header, body = protocol.decode_response(await read_frame(holder), 18, 3)
                    assert (header.correlation_id, body.error_code) == (1, 0)
                    header, body = protocol.decode_response(await read_frame(waiter), 18, 3)
                    assert (header.correlation_id, body.error_code) == (2, 0)
            with trio.fail_after(DEADLINE):
                await until(lambda: budget.used == 0 and budget.waiting == 0)

        run(main)
        assert len(placement(broker.bootstrap_servers, topic, 2)) == 50
        scraped = metric_samples(px)
        assert scraped[("trafka_proxy_flow_control_total", (("kind", "budget_wait"),))] >= 2
        assert {v for (name, _), v in scraped.items() if name == "trafka_proxy_errors_total"} == {0}


def metric_samples(px: RunningProxy) -> dict[Any, float]:
    assert px.metrics_address is not None
    host, port = px.metrics_address
    return samples(f"http://{host}:{port}/metrics")


def test_a_request_larger_than_the_whole_budget_goes_alone(broker: RunningBroker) -> None:
    """As Kafka's memory pool and brokerlite: a request larger than
    queued.max.request.bytes is not refused; it is read when nothing else is
    (nothing waited: no budget_wait)."""
    big = api_versions_frame(1, software="a" * 2000)
    with proxy(broker, queued_max_request_bytes=100, metrics_listen="127.0.0.1:0") as px:

        async def main() -> None:
            stream = await trio.open_tcp_stream(*px.address)
            with trio.fail_after(DEADLINE):
                await served(stream, 0)
                await stream.send_all(big)
                header, body = protocol.decode_response(await read_frame(stream), 18, 3)
                assert (header.correlation_id, body.error_code) == (1, 0)
                await until(lambda: px.request_budget.used == 0)

        run(main)
        waits = ("trafka_proxy_flow_control_total", (("kind", "budget_wait"),))
        assert metric_samples(px)[waits] == 0


def test_requests_are_served_however_the_reads_split_them(broker: RunningBroker) -> None:
    """A request alone in its read (taken without the reader's buffer), several in
    one read, one cut over reads of one byte, and one whole request followed by
    a piece of the next: all answered, in order, and their bytes given back."""
    with proxy(broker, route_keys="none") as px:
        frames = [api_versions_frame(corr) for corr in range(1, 7)]

        async def main() -> None:
            stream = await trio.open_tcp_stream(*px.address)
            stream.socket.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            reader = FrameReader()

            async def answered(*corrs: int) -> None:
                # Answers ready together may come in one read.
                for corr in corrs:
                    while (frame := reader.next_frame()) is None:
                        data = await stream.receive_some(65536)
                        assert data, "closed by the proxy"
                        reader.feed(data)
                    header, body = protocol.decode_response(frame, 18, 3)
                    assert (header.correlation_id, body.error_code) == (corr, 0)

            with trio.fail_after(DEADLINE):
                await stream.send_all(frames[0])
                await answered(1)
                await stream.send_all(frames[1] + frames[2])
                await answered(2, 3)
                for i in range(len(frames[3])):
                    await stream.send_all(frames[3][i : i + 1])
                    await trio.sleep(0.001)  # each byte its own read, most likely
                await answered(4)
                await stream.send_all(frames[4] + frames[5][:3])
                await answered(5)
                await stream.send_all(frames[5][3:])
                await answered(6)
                await until(lambda: px.request_budget.used == 0)
            assert px.statistics.timeouts == 0
            await stream.aclose()

        run(main)
