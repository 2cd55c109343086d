"""The proxy assembled: its core (:mod:`.server`) serving the filter chain the
configuration asks for. Here, not in the core, the chain is built: the user's
filters (``ProxyConfig.filters``), then key routing (:mod:`.keyrouting`) when
``route_keys`` is not ``none`` and the user did not place a
:class:`~.keyrouting.KeyRouting` in the chain themselves, then the SASL watch
(:class:`~.principals.SaslPrincipals`) and address rewriting
(:class:`~.rewrite.BrokerAddresses`), nearest the brokers: so every other
filter sees the proxy's addresses in answers and who the client logged in as,
and they judge what the brokers got and answered. These two come last in
every chain (``[[filter]]`` entries of the file map to the chain's first
filters, see :mod:`.reload`). With ``sni_virtual_hosts``, the SNI virtual
hosts' renaming (:class:`~.rewrite.VirtualHostNames`) follows the user's filters,
before key routing, whose answers it renames too (a ``KeyRouting`` the user
placed among their filters answers before it: its Produce answers' leader
hints then name brokers without the label). With named listeners
(``listeners``), their renaming (:class:`~.rewrite.ListenerAddresses`) takes
the same place, for the same reasons. The core takes the chain as
given and knows no filter by type.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import replace
from typing import Any

import trio

from trafka.sdk import ConfigError

from .config import ProxyConfig
from .filters import Filter
from .keyrouting import KeyRouting
from .principals import SaslPrincipals
from .rewrite import BrokerAddresses, ListenerAddresses, VirtualHostNames
from .server import RunningProxy, serve_core
from .startup import discover_upstream

__all__ = ["filter_chain", "proxy_in_thread", "serve_proxy"]


def filter_chain(config: ProxyConfig) -> tuple[Filter, ...]:
    """The chain ``config`` asks for: its filters, then key routing unless
    ``route_keys`` is ``none`` or the filters hold one, then the SASL watch and
    address rewriting (nearest the brokers).

    Raises:
        ValueError: the principal credentials file cannot be read.
    """
    core = (SaslPrincipals.configured(config), BrokerAddresses())
    names = config.sni_names()
    # Virtual hosts (.sni): after the user's filters (reloading maps them to
    # the chain's first), before key routing, whose answers name brokers too.
    users = config.filters
    if names is not None and names.virtual_hosts:
        users = (*users, VirtualHostNames(names))
    if config.listeners:  # named listeners (.listeners): the same place, for the same reason
        users = (*users, ListenerAddresses())
    if config.route_keys == "none" or any(isinstance(f, KeyRouting) for f in config.filters):
        return (*users, *core)
    journal = None
    if config.journal_topic is not None:
        from .keyrouting.journal_topic import TopicJournal  # the SDK's clients: only here

        tls = config.upstream_ssl_context()
        settings: dict[str, Any] = {}
        if tls is not None:
            settings.update(security_protocol="ssl", ssl_context=tls)
        journal = TopicJournal(
            config.upstream,
            client_settings=settings,
            topic=config.journal_topic,
            takeover_grace=config.journal_takeover_grace_ms / 1000,
            timeout=config.connect_timeout,
        )
    routing = KeyRouting(
        config.route_keys,
        max_decompressed_bytes=config.max_decompressed_bytes,
        connect_timeout=config.connect_timeout,
        journal_dir=config.journal_dir,
        journal_peers=config.journal_peer_dirs,
        journal=journal,
        origin_headers=config.origin_headers,
        coalesce=config.coalesce,
        restart_grace=config.journal_takeover_grace_ms / 1000,
    )
    return (*users, routing, *core)


@asynccontextmanager
async def serve_proxy(
    config: ProxyConfig | None = None, **overrides: Any
) -> AsyncIterator[RunningProxy]:
    """Serve the proxy while the block runs.

    Args:
        config: the settings; or give them as keyword arguments.

    Yields:
        The :class:`~.server.RunningProxy` (the bootstrap listener's real port
        included).

    Raises:
        ValueError: invalid settings (a :class:`~trafka.sdk.ConfigError` when a
            filter's settings do not fit the proxy's, :meth:`.Filter.check_with`).
        OSError: the bootstrap port cannot be bound.
    """
    if config is None:
        config = ProxyConfig(**overrides)
    elif overrides:
        config = replace(config, **overrides)
    problems = [p for f in config.filters for p in f.check_with(config)]
    if problems:
        raise ConfigError.of(problems)
    # Found before the chain is built: a journal topic lives in the upstream cluster.
    config = await discover_upstream(config)
    async with serve_core(replace(config, filters=filter_chain(config))) as running:
        yield running


@contextmanager
def proxy_in_thread(
    config: ProxyConfig | None = None, *, startup_timeout: float = 30.0, **overrides: Any
) -> Iterator[RunningProxy]:
    """Serve the proxy on a background thread (for synchronous clients and tests)."""
    started = threading.Event()
    state: dict[str, Any] = {}

    async def main() -> None:
        try:
            async with serve_proxy(config, **overrides) as running:
                state["running"] = running
                state["stop"] = trio.Event()
                state["token"] = trio.lowlevel.current_trio_token()
                started.set()
                await state["stop"].wait()
        except BaseException as exc:
            state["error"] = exc
            started.set()

    thread = threading.Thread(target=trio.run, args=(main,), name="trafka-proxy", daemon=True)
    thread.start()
    if not started.wait(startup_timeout):
        raise TimeoutError("the proxy did not start in time")
    if "error" in state:
        thread.join()
        raise state["error"]
    try:
        yield state["running"]
    finally:
        trio.from_thread.run_sync(state["stop"].set, trio_token=state["token"])
        thread.join(startup_timeout)
