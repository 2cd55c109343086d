"""Serving the console: hypercorn (its trio worker) runs the app of :mod:`.app`
beside an admin client, a producer and the lag sampler, all on the caller's
trio loop.

Rules:

* :func:`serve_console` runs until cancelled and reports the bound
  ``(host, port)`` through ``task_status``; a port that cannot be bound fails
  the start, not a later request.
* The console listens on 127.0.0.1 unless told otherwise: it has no login, so
  whoever reaches it may change the cluster. On a loopback address it answers
  only to loopback ``Host`` names; on any other it answers to any.
* Every ``sample_interval`` seconds the sampler records each consumer group's
  lag (for the groups' charts); a failed round is logged and the next one
  tries again.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
from collections.abc import Mapping
from typing import Any

import trio

from trafka.codec import TrafkaError
from trafka.sdk import AdminConfig, open_admin

from .cluster import Console, client_settings
from .model import LagHistory

__all__ = ["ConsoleSettings", "missing_dependencies", "parse_listen", "serve_console"]

log = logging.getLogger("trafka.console")

DEFAULT_LISTEN = "127.0.0.1:8080"
#: How long the admin calls of a page may take unless the client settings say.
PAGE_TIMEOUT_MS = 15_000


@dataclasses.dataclass(frozen=True, slots=True)
class ConsoleSettings:
    """How to run the console.

    Attributes:
        client_config: Kafka-style client settings: ``bootstrap.servers`` and
            any security settings, used by the admin client, the consumers and
            the producer alike.
        listen: ``host:port`` to serve HTTP on (port 0: any free one).
        sample_interval: seconds between two lag samples of every group.
        allowed_hosts: extra ``Host`` names to answer to (a name the console is
            reached by through a proxy, for example).
    """

    client_config: Mapping[str, Any]
    listen: str = DEFAULT_LISTEN
    sample_interval: float = 10.0
    allowed_hosts: tuple[str, ...] = ()


def missing_dependencies() -> str | None:
    """Why the console cannot run here (its extra is not installed), or None."""
    import importlib.util

    missing = [
        m for m in ("hypercorn", "starlette", "jinja2") if importlib.util.find_spec(m) is None
    ]
    if not missing:
        return None
    return f"the console needs {', '.join(missing)}: pip install 'trafka[console]'"


def parse_listen(listen: str) -> tuple[str, int]:
    """``(host, port)`` of ``host:port`` (``[::1]:8080`` for IPv6).

    Raises:
        ValueError: not ``host:port`` with a port from 0 to 65535.
    """
    host, sep, port = listen.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or int(port) > 65535:
        raise ValueError(f"listen address must be HOST:PORT, got {listen!r}")
    return host, int(port)


def _allowed_hosts(host: str, extra: tuple[str, ...]) -> list[str]:
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        ip = None
    if ip is not None and ip.is_unspecified:
        return ["*"]
    names = {host, "localhost", "127.0.0.1", "::1", "[::1]", *extra}
    if ip is not None and ip.version == 6:
        names.add(f"[{host}]")
    return sorted(names)


async def _sample_forever(console: Console, interval: float) -> None:
    while True:
        try:
            await console.sample_lag()
        except TrafkaError as exc:
            log.info("lag sampling failed: %s", exc)
        await trio.sleep(interval)


async def serve_console(
    settings: ConsoleSettings,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the console until cancelled.

    Raises:
        ImportError: the ``console`` extra is not installed.
        ValueError: ``settings.listen`` is not ``host:port``.
        OSError: the address cannot be bound.
        ConfigError: invalid client settings.
    """
    reason = missing_dependencies()
    if reason is not None:
        raise ImportError(reason)
    from hypercorn.config import Config
    from hypercorn.trio import serve

    from .app import make_app

    host, port = parse_listen(settings.listen)
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None
    config.errorlog = logging.getLogger("trafka.console.http")
    config.graceful_timeout = 1.0
    admin_settings = client_settings(AdminConfig, settings.client_config)
    keys = {k.replace("_", ".") for k in admin_settings}
    if "default.api.timeout.ms" not in keys:
        # A page should say the cluster is away in seconds, not after the
        # admin client's minute.
        admin_settings["default.api.timeout.ms"] = PAGE_TIMEOUT_MS
    async with open_admin(config=admin_settings) as admin:
        console = Console(
            admin,
            settings.client_config,
            history=LagHistory(),
            allowed_hosts=_allowed_hosts(host, settings.allowed_hosts),
        )
        async with trio.open_nursery() as nursery:
            await nursery.start(console.run_producer)
            binds = await nursery.start(serve, make_app(console), config)
            bound = _address(binds[0]) if binds else (host, port)
            nursery.start_soon(_sample_forever, console, settings.sample_interval)
            log.info("trafka console on http://%s:%d/", *bound)
            task_status.started(bound)


def _address(bind: str) -> tuple[str, int]:
    """``(host, port)`` of hypercorn's ``http://host:port``."""
    netloc = bind.split("://", 1)[-1]
    host, _, port = netloc.rpartition(":")
    return host.strip("[]"), int(port)
