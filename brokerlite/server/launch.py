"""Serving a broker: listeners, the core, the cluster driver, metrics, the console.

:func:`serve_broker` opens the listeners, builds the core and the cluster
driver (in cluster mode), starts the tasks and, on leaving, moves leadership
away (cluster mode), cancels every task, closes the listeners and connections,
then flushes and closes the logs; no ExceptionGroup escapes it. A failure while
starting closes what was opened. :func:`run_broker` serves until a signal, and
:func:`broker_in_thread` serves in a thread (for tests and tools).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any

import trio

from trafka.common.accept import accept_forever
from trafka.common.idle import IdleInstrument
from trafka.common.request_budget import RequestBudget

from ..broker import Broker
from ..clock import now_ms
from ..config import BrokerConfig
from .connections import Server, collapse, server_ssl_context

if TYPE_CHECKING:
    from ..cluster.driver import ClusterDriver

__all__ = ["RunningBroker", "broker_in_thread", "run_broker", "serve_broker"]


log = logging.getLogger("trafka.brokerlite")


@dataclasses.dataclass(frozen=True, slots=True)
class RunningBroker:
    """A broker being served.

    Attributes:
        address: the bound (host, port); port 0 in the config becomes the real one.
        bootstrap_servers: ``"host:port"`` for client configuration.
        config: the effective configuration.
        broker: the sans-IO core (for tests and introspection; only touch it
            from the broker's trio thread).
        request_budget: the bytes reserved by requests still arriving
            (``queued_max_request_bytes``; for tests and introspection, as ``broker``).
        metrics_address: the bound (host, port) of the metrics listener, if any.
        console_address: the bound (host, port) of the web console, if any.
        schema_registry_address: the bound (host, port) of the schema registry, if any.
    """

    address: tuple[str, int]
    bootstrap_servers: str
    config: BrokerConfig
    broker: Broker
    request_budget: RequestBudget
    metrics_address: tuple[str, int] | None = None
    console_address: tuple[str, int] | None = None
    schema_registry_address: tuple[str, int] | None = None


@asynccontextmanager
async def serve_broker(
    config: BrokerConfig | None = None, **overrides: Any
) -> AsyncIterator[RunningBroker]:
    """Serve a broker for the duration of an ``async with`` block.

    Args:
        config: the settings (default :class:`BrokerConfig`'s defaults).
        **overrides: settings applied on top, by Python or Kafka name
            (``port=0``, ``**{"num.partitions": 3}``).

    Yields:
        The :class:`RunningBroker` (with the bound address).

    Raises:
        ConfigError: an unknown override or invalid value.
        OSError: the port cannot be bound or the data directory is unusable.
    """
    cfg = config or BrokerConfig()
    if overrides:
        cfg = cfg.with_overrides(overrides)
    listeners, broker, server, driver, metrics_listeners = await _open_parts(cfg)
    advertised_host, advertised_port = broker.advertised
    running = RunningBroker(
        address=tuple(listeners[0].socket.getsockname()[:2]),
        bootstrap_servers=f"{advertised_host}:{advertised_port}",
        config=cfg,
        broker=broker,
        request_budget=server.request_budget,
        metrics_address=(
            tuple(metrics_listeners[0].socket.getsockname()[:2]) if metrics_listeners else None
        ),
    )
    idle = IdleInstrument(broker.metrics.loop_idle, time.monotonic)
    trio.lowlevel.add_instrument(idle)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server.ticker)
            if metrics_listeners:
                from trafka.common.metrics_http import serve_metrics

                from ..metrics import endpoint
                from .cluster_metrics import ClusterMetrics

                pages = {"/metrics/cluster": ClusterMetrics(broker).exposition}
                await nursery.start(serve_metrics, endpoint(broker, pages), metrics_listeners)
            jwks_url = cfg.sasl_oauthbearer_jwks_endpoint_url
            if broker.sasl_users is not None and jwks_url is not None:
                ok = await server.refresh_token_keys(jwks_url, first=True)
                nursery.start_soon(server.token_key_refresher, jwks_url, ok)
            if cfg.log_cleaner_enable:
                nursery.start_soon(server.cleaner)
            if driver is not None:
                nursery.start_soon(driver.run)
            nursery.start_soon(_serve_listeners, server, listeners)
            # The registry first: the console shows what it decodes with it.
            if cfg.schema_registry_listen is not None:
                running = await _start_registry(nursery, running, cfg)
            if cfg.console_listen is not None:
                running = await _start_console(nursery, running, cfg.console_listen)
            try:
                if cfg.announce:
                    async with _announced(cfg, broker):
                        yield running
                else:
                    yield running
            finally:
                if driver is not None:
                    # Still serving: leadership moves away before the broker stops.
                    with trio.CancelScope(shield=True):
                        await driver.controlled_shutdown()
                nursery.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise collapse(group) from None
    finally:
        with contextlib.suppress(KeyError):
            trio.lowlevel.remove_instrument(idle)
        if driver is not None:
            driver.close()
        broker.close()


async def _open_parts(
    cfg: BrokerConfig,
) -> tuple[
    list[trio.SocketListener], Broker, Server, ClusterDriver | None, list[trio.SocketListener]
]:
    """The listeners, the core, the connections' server, the cluster driver (cluster
    mode) and the metrics listeners; a failure closes what was opened."""
    ssl_context = server_ssl_context(cfg) if cfg.tls_enabled else None
    host = cfg.host or "0.0.0.0"
    listeners = await trio.open_tcp_listeners(cfg.port, host=host)
    try:
        bound = listeners[0].socket.getsockname()[:2]
        broker = Broker(cfg, now_ms=now_ms(), advertised=cfg.advertised_address(bound))
    except BaseException:
        for listener in listeners:
            await listener.aclose()
        raise
    server = Server(broker, cfg, ssl_context)
    driver = None
    if cfg.cluster_mode:
        from ..cluster.driver import ClusterDriver

        try:
            driver = ClusterDriver(broker, cfg, server.after_change)
            await driver.start()
        except BaseException:
            broker.close()
            for listener in listeners:
                await listener.aclose()
            raise
    metrics_listeners: list[trio.SocketListener] = []
    if cfg.metrics_listen is not None:
        metrics_host, _, metrics_port = cfg.metrics_listen.rpartition(":")
        try:
            metrics_listeners = await trio.open_tcp_listeners(
                int(metrics_port), host=metrics_host.strip("[]") or None
            )
        except BaseException:
            if driver is not None:
                driver.close()
            broker.close()
            for listener in listeners:
                await listener.aclose()
            raise
    return listeners, broker, server, driver, metrics_listeners


async def _start_console(
    nursery: trio.Nursery, running: RunningBroker, listen: str
) -> RunningBroker:
    """Serve the web console on ``listen`` for this broker (through its own
    listener, as any client); ``running`` with the console's address. The
    console is a companion found among the installed plug-ins (:mod:`.companions`)."""
    from ..companions import find

    console = find("console")
    services = {}
    if running.schema_registry_address is not None:
        host, port = running.schema_registry_address
        services["schema_registry"] = (
            f"http://{'127.0.0.1' if host in ('0.0.0.0', '::') else host}:{port}"
        )
    address = await nursery.start(
        functools.partial(console.serve, running.bootstrap_servers, listen, **services)
    )
    return dataclasses.replace(running, console_address=address)


async def _start_registry(
    nursery: trio.Nursery, running: RunningBroker, cfg: BrokerConfig
) -> RunningBroker:
    """Serve the schema registry (:mod:`..registry`) as a client of this broker."""
    from ..errors import BrokerError
    from ..registry import missing

    reason = missing()
    if reason is not None:
        raise BrokerError(reason)
    from ..registry.service import serve_registry

    address = await nursery.start(
        serve_registry, running.bootstrap_servers, cfg.schema_registry_listen, cfg.node_id
    )
    return dataclasses.replace(running, schema_registry_address=address)


@asynccontextmanager
async def _announced(cfg: BrokerConfig, broker: Broker) -> AsyncIterator[None]:
    """Announce the advertised listener on zeroconf while the block runs (a
    failure to is logged, never fatal: the broker serves on, unannounced)."""
    from trafka.discovery import announcing_listener

    host, port = broker.advertised
    async with announcing_listener(
        "broker",
        host,
        port,
        cluster_id=broker.cluster_id,
        node_id=cfg.node_id,
        security_protocol=cfg.security_protocol,
        sasl_mechanisms=cfg.sasl_enabled_mechanisms if cfg.sasl_enabled else (),
    ):
        yield


async def _serve_listeners(server: Server, listeners: list[trio.SocketListener]) -> None:
    async with trio.open_nursery() as connections:

        async def serve(stream: trio.SocketStream) -> None:
            try:
                await server.serve_connection(stream)
            finally:
                await trio.aclose_forcefully(stream)

        def start(stream: trio.SocketStream) -> None:
            connections.start_soon(serve, stream)

        for listener in listeners:
            connections.start_soon(accept_forever, listener, start, server.quiet)


async def _run(config: BrokerConfig) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with serve_broker(config) as running:
            log.info(
                "brokerlite node %d ready on %s:%d (advertised %s, data in %s)%s",
                config.node_id,
                running.address[0],
                running.address[1],
                running.bootstrap_servers,
                config.data_dir,
                "" if config.security_protocol == "PLAINTEXT" else _security_summary(config),
            )
            async for signum in signals:
                log.info("received %s, shutting down", signal.Signals(signum).name)
                break
    log.info("brokerlite stopped")


def _security_summary(config: BrokerConfig) -> str:
    """`` with SASL_SSL (PLAIN, SCRAM-SHA-256; 2 users)``, for the ready line."""
    details = []
    if config.sasl_enabled:
        details.append(", ".join(config.sasl_enabled_mechanisms))
    if config.tls_enabled and config.ssl_client_auth != "none":
        details.append(f"client certificates {config.ssl_client_auth}")
    return f" with {config.security_protocol}" + (f" ({'; '.join(details)})" if details else "")


def run_broker(config: BrokerConfig) -> None:
    """Run a broker until SIGINT or SIGTERM (blocking; for the command line).

    Must be called from the main thread. Shuts down cleanly on either signal.
    """
    trio.run(_run, config)


@contextmanager
def broker_in_thread(
    config: BrokerConfig | None = None, *, startup_timeout: float = 30.0, **overrides: Any
) -> Iterator[RunningBroker]:
    """Serve a broker on a background thread (for synchronous clients and tests).

    Args:
        config: the settings; ``port=0`` is the usual choice for tests.
        startup_timeout: seconds to wait for the broker to come up.
        **overrides: settings applied on top of ``config``.

    Yields:
        The :class:`RunningBroker`. Touch ``.broker`` only through
        ``trio.from_thread`` (it belongs to the broker's thread).

    Raises:
        TimeoutError: the broker did not start within ``startup_timeout``.
        Exception: whatever :func:`serve_broker` raises while starting.
    """
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        try:
            async with serve_broker(config, **overrides) as running:
                stop = trio.Event()
                state["running"] = running
                state["stop"] = stop
                state["token"] = trio.lowlevel.current_trio_token()
                started.set()
                await stop.wait()
        except BaseException as exc:
            state["error"] = exc
            if not started.is_set():
                started.set()
                return
            raise

    def runner() -> None:
        try:
            trio.run(main)
        except BaseException:
            log.exception("brokerlite thread failed")

    thread = threading.Thread(target=runner, name="brokerlite", daemon=True)
    thread.start()
    if not started.wait(startup_timeout):
        raise TimeoutError("brokerlite did not start in time")
    if "error" in state:
        thread.join()
        raise state["error"]
    try:
        yield state["running"]
    finally:
        trio.from_thread.run_sync(state["stop"].set, trio_token=state["token"])
        thread.join(startup_timeout)
