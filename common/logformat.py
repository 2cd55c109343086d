"""The one shape of a log line of trafka's servers (broker, proxy, console):
when (local time to the millisecond, ``2024-05-01 12:00:00,123``), how bad,
which logger, what; and the libraries kept quiet below DEBUG.

httpx logs every HTTP request it makes at INFO (``HTTP Request: GET ...
"HTTP/1.1 404 Not Found"``), a schema registry's normal answer to a subject
with no schema included: a server that asks a registry (the proxy's schema
validation, the console's schema pages) would log a line per lookup. Below
DEBUG, :func:`quiet_libraries` holds such loggers at WARNING; at DEBUG they
follow the root logger again.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

__all__ = ["CHATTY", "LINE_FORMAT", "line_format", "quiet_libraries"]

LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

#: The loggers of libraries that log routine work at INFO (httpx: each request).
CHATTY = ("httpx", "httpcore")


def line_format(prefix: str = "") -> str:
    """:data:`LINE_FORMAT` with ``prefix`` (say ``[worker 2] ``) before the message."""
    return LINE_FORMAT.replace("%(message)s", prefix + "%(message)s")


def quiet_libraries(level: int, names: Iterable[str] = CHATTY) -> None:
    """Hold ``names``' loggers at WARNING when the process logs at ``level``
    above DEBUG; at DEBUG or below, let them follow the root logger (the
    user asked for everything). Call it again when the level changes."""
    for name in names:
        logging.getLogger(name).setLevel(
            logging.WARNING if level > logging.DEBUG else logging.NOTSET
        )
