"""``trafka proxy`` as a service: its configuration checked whole
(:func:`check`), then served in the foreground until SIGINT or SIGTERM, with
SIGHUP reloading what can change (:mod:`.reload`).

Rules:

* SIGINT and SIGTERM stop the proxy as leaving :func:`~.server.serve_proxy`
  does: the listeners close, then the connections, then the journal. SIGTERM
  is how service managers (systemd, Kubernetes) stop a process, so it gets the
  same clean stop as Ctrl-C rather than the default of dying where it stands.
* SIGHUP never stops the proxy (its default action would): it reloads, or,
  when the proxy was started without its sources (:func:`run_proxy` from
  code), logs that there is nothing to reload. With ``--workers``, the
  supervisor hands SIGHUP to every worker, and each reloads itself.
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import trio

from trafka.common.logformat import LINE_FORMAT, quiet_libraries

from .assembly import serve_proxy
from .config import ProxyConfig
from .reload import Loaded, load, log_level, reloader, until_stopped
from .settings import SETTINGS, Sources
from .workers import check_workers, run_workers

__all__ = ["check", "run_proxy", "serve", "summary"]

log = logging.getLogger("trafka.proxy")


def check(sources: Sources) -> Loaded:
    """The whole configuration of ``sources``, checked without binding anything.

    Raises:
        ConfigError: every problem found.
    """

    def workers(values: Mapping[str, Any], config: ProxyConfig) -> list[str]:
        try:
            check_workers(config, values["workers"], values["node_port_stride"])
        except ValueError as exc:
            return [str(exc)]
        return []

    return load(sources, workers)


def summary(loaded: Loaded) -> str:
    """What ``--check-config`` prints: each setting not at its default, and where it came from."""
    lines = ["the configuration is valid"]
    for s in SETTINGS:
        if loaded.origin[s.name] != s.name:
            value = loaded.values[s.name]
            if s.kind == "filters":
                value = ", ".join(f.use for f in value)
            elif s.kind == "listeners":
                value = ", ".join(f"{n.name} on {n.host}:{n.port}" for n in value)
            elif s.kind == "list":
                value = ",".join(value)
            lines.append(f"  {s.name} = {value}  ({loaded.origin[s.name]})")
    lines += [f"warning: {w}" for w in loaded.config.certificate_warnings()]
    return "\n".join(lines)


def serve(loaded: Loaded, sources: Sources) -> None:
    """Serve ``loaded`` until SIGINT or SIGTERM (blocking, from the main thread).

    Raises:
        WorkerGaveUp, ValueError, OSError: as :func:`~.workers.run_workers` and
        :func:`run_proxy`.
    """
    values = loaded.values
    logging.basicConfig(level=log_level(values), format=LINE_FORMAT)
    quiet_libraries(log_level(values))  # httpx's INFO line per request (a registry's 404s)
    for warning in loaded.config.certificate_warnings():
        log.warning("%s: clients that check host names will refuse the proxy", warning)
    if values["workers"] > 1:
        run_workers(
            replace(loaded.config, filters=()),
            values["workers"],
            stride=values["node_port_stride"],
            filter_specs=values["filter"],
            verbose=log_level(values) == logging.DEBUG,
            reload=(sources, values),
        )
    else:
        run_proxy(loaded.config, reload=(sources, values))


def run_proxy(
    config: ProxyConfig, *, reload: tuple[Sources, Mapping[str, Any]] | None = None
) -> None:
    """Serve ``config`` until SIGINT or SIGTERM (blocking, from the main thread);
    SIGHUP reloads from ``reload`` (the sources and the values ``config`` was
    made of; see the module's rules)."""

    async def main() -> None:
        signums = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        with trio.open_signal_receiver(*signums) as signals:
            async with serve_proxy(config) as running:
                await until_stopped(signals, reloader(reload, running.filters, running.client_tls))
        log.info("proxy stopped")

    trio.run(main)
