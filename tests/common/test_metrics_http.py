"""The metrics listener's answers (trafka.common.metrics_http), without sockets."""

from __future__ import annotations

from typing import Any

from trafka.common.metrics_http import CONTENT_TYPE, http_answer


def _never() -> Any:
    raise AssertionError("refused before any state is read")


def test_a_malformed_or_unknown_request_gets_an_http_error() -> None:
    assert http_answer(_never, _never, b"garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    post = http_answer(_never, _never, b"POST /metrics HTTP/1.1\r\n\r\n")
    assert post.startswith(b"HTTP/1.1 405")
    assert http_answer(_never, _never, b"GET /nope HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")


def test_metrics_health_and_readiness() -> None:
    metrics = http_answer(lambda: b"up 1\n", _never, b"GET /metrics?x=1 HTTP/1.1\r\n\r\n")
    head, body = metrics.split(b"\r\n\r\n", 1)
    assert head.startswith(b"HTTP/1.1 200") and CONTENT_TYPE.encode() in head
    assert body == b"up 1\n"
    # HEAD: the headers of GET (the length of the body), no body.
    only_head = http_answer(lambda: b"up 1\n", _never, b"HEAD /metrics HTTP/1.1\r\n\r\n")
    assert only_head.endswith(b"Content-Length: 5\r\nConnection: close\r\n\r\n")
    assert http_answer(_never, _never, b"GET /healthz HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 200")
    assert http_answer(_never, lambda: False, b"GET /readyz HTTP/1.1\r\n\r\n").startswith(
        b"HTTP/1.1 503"
    )
    assert http_answer(_never, lambda: True, b"GET /readyz HTTP/1.1\r\n\r\n").startswith(
        b"HTTP/1.1 200"
    )


def test_pages_built_with_io_are_served_and_a_failing_one_is_a_500() -> None:
    import trio

    from trafka.common.metrics_http import Endpoint, serve_metrics

    async def built() -> bytes:
        await trio.sleep(0)  # a page may wait for I/O (brokerlite's /metrics/cluster)
        return b"whole 1\n"

    async def broken() -> bytes:
        raise RuntimeError("a bug")

    async def exchange(port: int, head: bytes) -> bytes:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        await stream.send_all(head)
        answer = b""
        while data := await stream.receive_some(4096):
            answer += data
        await stream.aclose()
        return answer

    async def main() -> None:
        with trio.fail_after(10):
            listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
            port = listeners[0].socket.getsockname()[1]
            endpoint = Endpoint(
                lambda: b"up 1\n", lambda: True, {"/whole": built, "/broken": broken}
            )
            async with trio.open_nursery() as nursery:
                await nursery.start(serve_metrics, endpoint, listeners)
                whole = await exchange(port, b"GET /whole?x=1 HTTP/1.1\r\n\r\n")
                assert whole.startswith(b"HTTP/1.1 200") and CONTENT_TYPE.encode() in whole
                assert whole.endswith(b"\r\n\r\nwhole 1\n")
                head = await exchange(port, b"HEAD /whole HTTP/1.1\r\n\r\n")
                assert head.endswith(b"Content-Length: 8\r\nConnection: close\r\n\r\n")
                post = await exchange(port, b"POST /whole HTTP/1.1\r\n\r\n")
                assert post.startswith(b"HTTP/1.1 405")
                failed = await exchange(port, b"GET /broken HTTP/1.1\r\n\r\n")
                assert failed.startswith(b"HTTP/1.1 500")
                # The listener still serves.
                metrics = await exchange(port, b"GET /metrics HTTP/1.1\r\n\r\n")
                assert metrics.endswith(b"up 1\n")
                nursery.cancel_scope.cancel()

    trio.run(main)
