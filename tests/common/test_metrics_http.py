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
