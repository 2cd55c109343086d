"""The configuration's ``logger`` as librdkafka serves it: each line of the
client's is queued and the application's logger gets it when a call serves
the queue (``poll``, ``flush``, ``consume``...), as ``FACILITY [name]
[thrd:app]: text``; a client with ``debug`` set starts with librdkafka's
``INIT`` line, a consumer whose ``socket.timeout.ms`` is not 1 s above its
``fetch.wait.max.ms`` with librdkafka's ``CONFWARN``."""

from __future__ import annotations

import contextlib
import itertools
import logging
from importlib.metadata import version as _metadata_version
from typing import Any

from ._callbacks import Served

__all__ = ["QueuedLog", "client_name", "log_startup", "queue_logs"]

log = logging.getLogger("trafka.compat.confluent")

_clients = itertools.count(1)


def client_name(kind: str) -> str:
    """A name for a new client's log lines, as librdkafka numbers its clients."""
    return f"trafka#{kind}-{next(_clients)}"


class QueuedLog:
    """The ``logger`` of the configuration as trafka's client sees it
    (``log(level, text)``), each line queued for a call to serve."""

    def __init__(self, served: Served, logger: Any, name: str) -> None:
        self._served = served
        self._logger = logger
        self._name = name

    def log(self, level: int, text: str, facility: str = "LOG") -> None:
        self._served.put(self._logger.log, level, f"{facility} [{self._name}] [thrd:app]: {text}")


def _startup_lines(conf: dict[str, Any], name: str, kind: str) -> list[tuple[int, str, str]]:
    lines: list[tuple[int, str, str]] = []
    debug = conf.get("debug")
    if debug:
        text = f"trafka {_metadata_version('trafka')} {name} initialized (debug {debug})"
        lines.append((logging.DEBUG, "INIT", text))
    if "consumer" not in kind:
        return lines
    socket_timeout = conf.get("socket.timeout.ms")
    wait = conf.get("fetch.wait.max.ms", conf.get("fetch.max.wait.ms", 500))
    with contextlib.suppress(TypeError, ValueError):
        if socket_timeout is not None and int(socket_timeout) < int(wait) + 1000:
            lines.append(
                (
                    logging.WARNING,
                    "CONFWARN",
                    f"Configuration property `fetch.wait.max.ms` ({int(wait)}) should be set "
                    f"lower than `socket.timeout.ms` ({int(socket_timeout)}) by at least "
                    "1000ms to avoid blocking and timing out sub-sequent requests",
                )
            )
    return lines


def log_startup(conf: dict[str, Any], name: str, queued: QueuedLog | None, kind: str) -> None:
    """librdkafka's first lines to the configuration's logger (queued), else to Python's logging."""
    for level, facility, text in _startup_lines(conf, name, kind):
        if queued is not None:
            queued.log(level, text, facility)
        else:
            log.log(level, "%s [%s] [thrd:app]: %s", facility, name, text)


def queue_logs(conf: dict[str, Any], served: Served, kind: str) -> None:
    """Put the configuration's ``logger`` behind a :class:`QueuedLog` (in
    ``conf``) and queue the client's first lines."""
    name = client_name(kind)
    logger = conf.get("logger")
    queued = None if logger is None else QueuedLog(served, logger, name)
    if queued is not None:
        conf["logger"] = queued
    log_startup(conf, name, queued, kind)
