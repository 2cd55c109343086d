"""Serving the console: hypercorn (its trio worker) runs the app of :mod:`.app`
beside an admin client, a producer and the lag sampler, all on the caller's
trio loop.

Rules:

* :func:`serve_console` runs until cancelled and reports the bound
  ``(host, port)`` through ``task_status``; a port that cannot be bound fails
  the start, not a later request.
* The console listens on 127.0.0.1 unless told otherwise. Who may use it is
  :mod:`.access`'s decision: a password, a reverse proxy's identity header, or
  nobody asked; a console that asks nobody is read-only anywhere but on
  loopback, and the start logs what was decided. On a loopback address it
  answers only to loopback ``Host`` names; on any other it answers to any.
* The cluster is checked (:mod:`.health`) from the start: one that does not
  answer is logged at WARNING within a check's timeout, pages say so, and
  it is logged again when it answers.
* Every ``sample_interval`` seconds the sampler records each consumer group's
  lag (for the groups' charts); a failed round is logged and the next one
  tries again.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import logging
import os
import re
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

from trafka.codec import TrafkaError
from trafka.sdk import AdminConfig, open_admin

from .access import DEFAULT_TRUSTED_PROXIES, AccessPolicy, decide_access
from .cluster import Console, client_settings
from .health import CHECK_INTERVAL, CHECK_TIMEOUT, ClusterHealth
from .http_log import AccessLog
from .model import LagHistory

__all__ = [
    "ENV_PASSWORD",
    "ConsoleSettings",
    "access_of",
    "check_cluster_name",
    "missing_dependencies",
    "parse_listen",
    "read_password_file",
    "serve_console",
    "settings_from_environment",
]

log = logging.getLogger("trafka.console")

DEFAULT_LISTEN = "127.0.0.1:8080"
#: The environment variables the console's protection is read from (the
#: password is never taken on a command line, where ``ps`` shows it).
ENV_PASSWORD = "TRAFKA_CONSOLE_PASSWORD"
ENV_PASSWORD_FILE = "TRAFKA_CONSOLE_PASSWORD_FILE"
ENV_READ_ONLY = "TRAFKA_CONSOLE_READ_ONLY"
ENV_AUTH_HEADER = "TRAFKA_CONSOLE_AUTH_HEADER"
ENV_TRUSTED_PROXIES = "TRAFKA_CONSOLE_TRUSTED_PROXIES"
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
        password: the password people log in with (None: none asked).
        auth_header: the header a reverse proxy in front names the person in
            (None: no proxy trusted).
        trusted_proxies: addresses or networks that header is believed from.
        read_only: offer and accept no change of the cluster.
        check_interval, check_timeout: how often the cluster is checked, and
            how long a check may take (see :mod:`.health`).
        cluster_name: the name of the cluster of ``client_config`` (the
            default one, served at ``/`` and under ``/clusters/NAME/``).
        clusters: more clusters, each by its name with its own client
            settings, served under ``/clusters/NAME/``. The protection
            settings cover every cluster; each is checked on its own.
        access_log: log every HTTP request and its answer, one INFO line each
            on the ``trafka.console.access`` logger (see :mod:`.http_log`).
        schema_registry: the URL of the default cluster's Schema Registry
            (None: none), which decodes framed records (see :mod:`.schemas`).
    """

    client_config: Mapping[str, Any]
    listen: str = DEFAULT_LISTEN
    sample_interval: float = 10.0
    allowed_hosts: tuple[str, ...] = ()
    password: str | None = dataclasses.field(default=None, repr=False)
    auth_header: str | None = None
    trusted_proxies: tuple[str, ...] = DEFAULT_TRUSTED_PROXIES
    read_only: bool = False
    check_interval: float = CHECK_INTERVAL
    check_timeout: float = CHECK_TIMEOUT
    cluster_name: str = "default"
    clusters: Mapping[str, Mapping[str, Any]] = dataclasses.field(default_factory=dict)
    access_log: bool = False
    schema_registry: str | None = None

    def all_clusters(self) -> dict[str, Mapping[str, Any]]:
        """Every cluster's client settings by its name, the default first.

        Raises:
            ValueError: a name that is not a cluster name (see
                :func:`check_cluster_name`) or given twice.
        """
        named = [(self.cluster_name, self.client_config), *self.clusters.items()]
        out: dict[str, Mapping[str, Any]] = {}
        for name, config in named:
            check_cluster_name(name)
            if name in out:
                raise ValueError(f"cluster {name!r} is named twice")
            out[name] = config
        return out


def check_cluster_name(name: str) -> str:
    """``name`` when it may name a cluster in the console's paths: letters,
    digits, ``.``, ``_`` and ``-``, at most 64.

    Raises:
        ValueError: it may not.
    """
    if not re.fullmatch(r"[A-Za-z0-9._-]{1,64}", name) or name in (".", ".."):
        raise ValueError(
            f"a cluster name is 1 to 64 letters, digits, '.', '_' or '-', got {name!r}"
        )
    return name


def read_password_file(path: str) -> str:
    """The password in file ``path``: its first line, without the line's end.

    Raises:
        ValueError: the file cannot be read, or its first line is empty.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"cannot read the password file {path}: {exc}") from None
    password = text.splitlines()[0] if text else ""
    if not password:
        raise ValueError(f"the password file {path} is empty")
    return password


def settings_from_environment(
    environ: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The :class:`ConsoleSettings` fields the environment sets: the password
    (``TRAFKA_CONSOLE_PASSWORD``, or the first line of the file
    ``TRAFKA_CONSOLE_PASSWORD_FILE``), ``TRAFKA_CONSOLE_READ_ONLY`` (``1``,
    ``true``, ``yes``), ``TRAFKA_CONSOLE_AUTH_HEADER`` and
    ``TRAFKA_CONSOLE_TRUSTED_PROXIES`` (comma-separated). brokerlite's
    ``--console-listen`` reads its console's protection from here.

    Raises:
        ValueError: both password variables, an unreadable password file, or a
            read-only value that is not a yes or a no.
    """
    env = os.environ if environ is None else environ
    out: dict[str, Any] = {}
    password, path = env.get(ENV_PASSWORD), env.get(ENV_PASSWORD_FILE)
    if password and path:
        raise ValueError(f"set {ENV_PASSWORD} or {ENV_PASSWORD_FILE}, not both")
    if path:
        out["password"] = read_password_file(path)
    elif password is not None:
        out["password"] = password
    flag = env.get(ENV_READ_ONLY, "").strip().lower()
    if flag in ("1", "true", "yes"):
        out["read_only"] = True
    elif flag not in ("", "0", "false", "no"):
        raise ValueError(f"{ENV_READ_ONLY} must be 1 or 0, got {flag!r}")
    if env.get(ENV_AUTH_HEADER):
        out["auth_header"] = env[ENV_AUTH_HEADER]
    if env.get(ENV_TRUSTED_PROXIES):
        out["trusted_proxies"] = tuple(
            p.strip() for p in env[ENV_TRUSTED_PROXIES].split(",") if p.strip()
        )
    return out


def access_of(settings: ConsoleSettings) -> AccessPolicy:
    """The access policy of ``settings`` (see :func:`.access.decide_access`).

    Raises:
        ValueError: ``listen`` is not ``host:port``, an empty password, a bad
            header name or trusted proxy.
    """
    host, _ = parse_listen(settings.listen)
    return decide_access(
        host,
        password=settings.password,
        header=settings.auth_header,
        trusted_proxies=settings.trusted_proxies,
        read_only=settings.read_only,
    )


def _describe_access(access: AccessPolicy) -> str:
    who = {
        "open": "no login",
        "password": "password login",
        "header": f"people named by the proxy's {access.header} header",
        "password+header": f"the proxy's {access.header} header, else a password login",
    }[access.mode]
    if access.read_only:
        return f"{who}; read-only: {access.why_read_only}"
    return f"{who}; changes allowed"


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
        for what, sample in (
            ("lag", console.sample_lag),
            ("throughput", console.sample_throughput),
        ):
            try:
                await sample()
            except TrafkaError as exc:
                log.info("%s sampling of %s failed: %s", what, console.bootstrap, exc)
        await trio.sleep(interval)


async def serve_console(
    settings: ConsoleSettings,
    *,
    task_status: trio.TaskStatus[tuple[str, int]] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve the console until cancelled.

    Raises:
        ImportError: the ``console`` extra is not installed.
        ValueError: ``settings.listen`` is not ``host:port``, or the access
            settings are invalid (see :func:`access_of`).
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
    access = access_of(settings)
    clusters = settings.all_clusters()
    config = Config()
    config.bind = [f"[{host}]:{port}" if ":" in host else f"{host}:{port}"]
    config.accesslog = None  # the console's own (see .http_log)
    config.errorlog = logging.getLogger("trafka.console.http")
    config.graceful_timeout = 1.0
    async with AsyncExitStack() as stack:
        consoles: dict[str, Console] = {}
        for name, client_config in clusters.items():
            admin_settings = client_settings(AdminConfig, client_config)
            keys = {k.replace("_", ".") for k in admin_settings}
            if "default.api.timeout.ms" not in keys:
                # A page should say the cluster is away in seconds, not after
                # the admin client's minute.
                admin_settings["default.api.timeout.ms"] = PAGE_TIMEOUT_MS
            admin = await stack.enter_async_context(open_admin(config=admin_settings))
            consoles[name] = Console(
                admin,
                client_config,
                history=LagHistory(),
                allowed_hosts=_allowed_hosts(host, settings.allowed_hosts),
                sample_interval=settings.sample_interval,
                health=ClusterHealth(
                    interval=settings.check_interval, check_timeout=settings.check_timeout
                ),
                schema_registry=settings.schema_registry if name == settings.cluster_name else None,
            )
            if consoles[name].schemas is not None:
                stack.callback(consoles[name].schemas.close)  # type: ignore[union-attr]
        nursery = await stack.enter_async_context(trio.open_nursery())
        # Each cluster has its own checks, producer and sampler: a dead one
        # slows none of the others' pages.
        for console in consoles.values():
            nursery.start_soon(console.watch_cluster)
            if not access.read_only:
                await nursery.start(console.run_producer)
        app: Any = make_app(consoles, access)
        if settings.access_log:
            app = AccessLog(app, logging.getLogger("trafka.console.access"))
        binds = await nursery.start(serve, app, config)
        bound = _address(binds[0]) if binds else (host, port)
        for console in consoles.values():
            nursery.start_soon(_sample_forever, console, settings.sample_interval)
        log.info("trafka console on http://%s:%d/ (%s)", *bound, _describe_access(access))
        if len(consoles) > 1:
            log.info("clusters: %s", ", ".join(f"{n} ({c.bootstrap})" for n, c in consoles.items()))
        if access.read_only and not settings.read_only:
            log.warning("the console is read-only: %s", access.why_read_only)
        task_status.started(bound)


def _address(bind: str) -> tuple[str, int]:
    """``(host, port)`` of hypercorn's ``http://host:port``."""
    netloc = bind.split("://", 1)[-1]
    host, _, port = netloc.rpartition(":")
    return host.strip("[]"), int(port)
