"""The one shape of a log line of trafka's servers (broker, proxy, console):
when (local time to the millisecond, ``2024-05-01 12:00:00,123``), how bad,
which logger, what."""

from __future__ import annotations

__all__ = ["LINE_FORMAT", "line_format"]

LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def line_format(prefix: str = "") -> str:
    """:data:`LINE_FORMAT` with ``prefix`` (say ``[worker 2] ``) before the message."""
    return LINE_FORMAT.replace("%(message)s", prefix + "%(message)s")
