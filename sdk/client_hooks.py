"""What a client runs beside its work for the settings that ask for it: the
Prometheus listener (``metrics.listen``), OpenTelemetry's instruments
(``otel.enabled``, ``otel.meter.provider``: :mod:`.otel_metrics`), librdkafka's statistics callback
(``stats_cb`` every ``statistics.interval.ms``) and librdkafka's logging
settings (``logger``, ``log_level``, ``debug``).

Rules:

* Each runs as a task of the client's task group, so it ends when the client
  closes; a setting left unset costs nothing.
* ``stats_cb`` runs in the client's event loop, as ``error_cb``: it must not
  block, and what it raises is logged.
* ``debug`` turns the loggers of its contexts
  (:data:`~.config.values.DEBUG_CONTEXTS`) to DEBUG while the client is open;
  ``logger`` receives the lines of trafka's loggers from ``log_level`` up
  while the client is open. Both are process-wide (Python's loggers are):
  the levels set are put back when the client closes.
"""

from __future__ import annotations

import itertools
import logging
import time
from typing import Any

import anyio
import anyio.abc

from ._util import serve_metrics_if_asked
from .config.values import DEBUG_CONTEXTS

__all__ = ["SYSLOG_LEVELS", "start_client_hooks"]

log = logging.getLogger("trafka.sdk")

#: librdkafka's ``log_level`` (syslog's severities) as Python's levels.
SYSLOG_LEVELS = {
    0: logging.CRITICAL,
    1: logging.CRITICAL,
    2: logging.CRITICAL,
    3: logging.ERROR,
    4: logging.WARNING,
    5: logging.INFO,
    6: logging.INFO,
    7: logging.DEBUG,
}

_instances = itertools.count(1)


async def start_client_hooks(tg: anyio.abc.TaskGroup, client: Any, kind: str, cfg: Any) -> None:
    """Start in ``tg`` what ``cfg`` (the client's configuration) asks for."""
    await serve_metrics_if_asked(tg, client, kind, cfg.metrics_listen)
    if cfg.otel_enabled or cfg.otel_meter_provider is not None:
        from .otel_metrics import serve_otel_metrics

        await tg.start(serve_otel_metrics, client, kind, cfg.otel_meter_provider)
    if cfg.debug or cfg.logger is not None:
        await tg.start(_bridge_logs, cfg)
    if cfg.stats_cb is not None and cfg.statistics_interval_ms > 0:
        name = f"{cfg.client_id}#{kind}-{next(_instances)}"
        tg.start_soon(_emit_statistics, client, kind, cfg, name, name=f"trafka {kind} stats_cb")


async def _emit_statistics(client: Any, kind: str, cfg: Any, name: str) -> None:
    from .statistics.librdkafka import librdkafka_json

    started = time.monotonic()
    interval = cfg.statistics_interval_ms / 1000
    while True:
        await anyio.sleep(interval)
        now = time.monotonic()
        try:
            text = librdkafka_json(
                client.statistics(),
                kind=kind,
                name=name,
                client_id=cfg.client_id,
                ts_us=int(now * 1e6),
                time_s=int(time.time()),
                age_us=int((now - started) * 1e6),
            )
        except Exception:  # a bug here must not end the client's tasks (and the client)
            log.exception("the statistics for stats_cb could not be made")
            continue
        try:
            cfg.stats_cb(text)
        except Exception:
            log.exception("stats_cb raised")


class _ToLogger(logging.Handler):
    """Passes trafka's log records on to the application's logger."""

    def __init__(self, target: Any, level: int) -> None:
        super().__init__(level)
        self.target = target

    def emit(self, record: logging.LogRecord) -> None:
        target = self.target
        if isinstance(target, logging.Logger):
            if target.isEnabledFor(record.levelno):
                target.handle(record)
        else:
            target.log(record.levelno, record.getMessage())


async def _bridge_logs(cfg: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
    # The loggers whose level this sets: the level set, and the one before.
    levels: dict[str, tuple[int, int]] = {}
    for context in cfg.debug:
        for name in DEBUG_CONTEXTS[context]:
            levels.setdefault(name, (logging.DEBUG, logging.getLogger(name).level))
    handler = None
    root = logging.getLogger("trafka")
    if cfg.logger is not None:
        # As librdkafka: debug contexts raise log_level to debug.
        level = logging.DEBUG if cfg.debug else SYSLOG_LEVELS[cfg.log_level]
        handler = _ToLogger(cfg.logger, level)
        if root.getEffectiveLevel() > level:
            levels.setdefault("trafka", (level, root.level))
    try:
        for name, (wanted, _) in levels.items():
            logging.getLogger(name).setLevel(wanted)
        if handler is not None:
            root.addHandler(handler)
        task_status.started()
        await anyio.sleep_forever()
    finally:
        if handler is not None:
            root.removeHandler(handler)
        for name, (_, before) in levels.items():
            logging.getLogger(name).setLevel(before)
