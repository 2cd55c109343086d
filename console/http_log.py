"""The console's HTTP access log (``ConsoleSettings.access_log``; off by default).

One INFO line per request on the ``trafka.console.access`` logger, written
when its answer has been sent (or the exchange ended without one), in the
combined log format of web servers: the Common Log Format (client address,
``-``, ``-``, the time, the request line, the status, the body's bytes), then
the referrer and the user agent. The time is the request's start, local time
with its UTC offset (``[10/Oct/2024:13:55:36 +0200]``); a status or a size the
exchange never had is ``-``. The query string is logged (pages are GETs whose
query is the whole query: what was browsed or searched); form bodies (the login
password, the form token) are not.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

__all__ = ["AccessLog"]

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]


class AccessLog:
    """ASGI middleware: ``app``'s HTTP exchanges, logged to ``logger``
    (``clock``: seconds since the epoch, for the line's time)."""

    def __init__(
        self, app: App, logger: logging.Logger, clock: Callable[[], float] = time.time
    ) -> None:
        self.app = app
        self.logger = logger
        self.clock = clock

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = self.clock()
        answer: dict[str, int] = {"size": 0}

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = int(message["status"])
            elif message["type"] == "http.response.body":
                answer["size"] += len(message.get("body", b""))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.logger.info("%s", _line(scope, began, answer))


def _line(scope: Scope, began: float, answer: dict[str, int]) -> str:
    client = scope.get("client")
    headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
    target = scope.get("raw_path") or scope["path"].encode()
    if scope.get("query_string"):
        target += b"?" + scope["query_string"]
    when = dt.datetime.fromtimestamp(began).astimezone().strftime("%d/%b/%Y:%H:%M:%S %z")
    request = (
        f"{scope['method']} {target.decode('latin-1')} HTTP/{scope.get('http_version', '1.1')}"
    )
    status = answer.get("status", "-")
    size = answer["size"] or "-"
    referrer = headers.get("referer", "-")
    agent = headers.get("user-agent", "-")
    host = client[0] if client else "-"
    return f'{host} - - [{when}] "{_safe(request)}" {status} {size} "{_safe(referrer)}" "{_safe(agent)}"'


def _safe(text: str) -> str:
    """Quotes, backslashes and control characters escaped: a request cannot forge
    a line or a field."""
    out = []
    for c in text:
        if c in '"\\':
            out.append("\\" + c)
        elif not c.isprintable():
            out.append(f"\\x{ord(c):02x}")
        else:
            out.append(c)
    return "".join(out)
