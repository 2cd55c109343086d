"""The proxy's extension point: filters that see decoded requests and answers.

A filter is Python code the proxy runs on the requests and answers of the APIs
it names, decoded (the codec's dataclasses, as :mod:`trafka.codec.protocol`
gives them). It may pass them on unchanged, change them (return a new body:
the codec's dataclasses are frozen, so ``dataclasses.replace``), answer a
request itself (:class:`Respond`), which then never reaches a broker, or
answer it later (:class:`RespondLater`) from work of its own, such as requests
to other brokers over the proxy's pooled connections. The proxy's key routing
is such a filter (:class:`~.keyrouting.filter.KeyRouting`).

Rules:

* Filters run in the order given (``ProxyConfig.filters``) on requests, and in
  the reverse order on answers, as a chain: each sees what the one before it
  returned. The proxy's key routing is the chain's last filter (nearest the
  brokers): a user's filter sees what the client sends and what it will
  receive (broker addresses already the proxy's, a routed Produce's answer
  already merged).
* A request answered by :class:`Respond` or :class:`RespondLater` goes to no
  broker; the filters before the one that answered see that answer on their
  way back, as any other. The client's answers keep the order of its
  requests, whichever way each was answered.
* ``on_request`` may be a coroutine function (``async def``): the client's
  next request is read once it returns, so it should only start slow work and
  hand it over as :class:`RespondLater`. ``on_response`` is synchronous. Both
  run on the proxy's event loop: keep them quick, no blocking I/O (use
  ``trio.to_thread`` for CPU-heavy work).
* A filter that raises closes the client's connection (the error is logged, at
  most once a minute per filter); other clients go on. Raising
  :class:`CloseConnection` does the same, logged as a warning with its message.
* :class:`FilterContext` tells a filter who is asking (the client's address,
  client id, the broker the connection stands for, whether it authenticated)
  and carries ``state``, a dictionary private to the client connection, and
  ``notes``, one private to the request and its answer.
* :meth:`Filter.attach` hands a filter the proxy's :class:`ProxyServices` when
  the proxy starts: its pooled upstream connections, what it knows of topics
  and leaders, its nursery. :meth:`Filter.detach` is called when it stops.
  :meth:`Filter.configure` hands it the settings of its entry in ``trafka
  proxy``'s file, before the proxy starts and again on SIGHUP (see
  :mod:`.reload`).
* An API the proxy's codec does not know, or a version it does not, passes
  unfiltered (it cannot be decoded).
* A filter declares the APIs it sees (:attr:`Filter.api_keys`, or its
  :meth:`Filter.wants`); the proxy asks once per request. A request no filter
  asks to see is not decoded: it crosses the proxy as the bytes that arrived
  (its header read for its API, version and correlation id), and so does its
  answer unless it names brokers (see :mod:`.rewrite`). Name only the APIs you
  need: ``api_keys = None`` (every API) makes the proxy decode everything.
* What a filter counts reaches the proxy through the filter's own surface:
  :meth:`Filter.statistics` (shown in ``RunningProxy.statistics.filters``)
  and :meth:`Filter.samples` (the proxy's Prometheus metrics). The proxy's
  core knows no filter by type: key routing (:mod:`.keyrouting`) uses this API
  and nothing else, so a user's filter can do all it does (requests of its
  own over the pool, answers merged from several brokers, state per client
  connection or per producer).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import trio

    from trafka.common.lograte import RateLimitedLog

    from .pool import UpstreamPool
    from .topics import Topics

__all__ = [
    "CloseConnection",
    "EncodedBody",
    "Filter",
    "FilterContext",
    "FilterError",
    "ProxyServices",
    "Respond",
    "RespondLater",
    "Sample",
    "load_filter",
]


@dataclass(slots=True)
class FilterContext:
    """What a filter knows of a request.

    Attributes:
        api_key, api_version: the request's API and version.
        correlation_id: the client's correlation id.
        client_id: the client id the client sent (None if none).
        client_address: the client's (host, port).
        node_id: the broker the client's connection stands for (-1: the
            bootstrap listener).
        state: private to the client's connection, shared by its requests.
        authenticated: the client authenticated (SASL) on its connection: its
            requests cannot go over the proxy's shared connections.
        principal: who the client authenticated as (``User:<name>``), once its
            SASL exchange succeeded and the proxy could read the name (see
            :mod:`.principals`); None otherwise.
        pool: pooled connections that log in as the client's principal (the
            proxy holds a login for it), for what a filter sends on the
            client's behalf instead of the shared pool; None when there are none.
        notes: private to this request and its answer.
        client_software: the client software name the connection's ApiVersions
            request gave (v3+, KIP-511: ``librdkafka``, ``apache-kafka-java``...),
            None when it gave none.
    """

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_address: tuple[str, int] | None
    node_id: int
    state: dict[str, Any] = field(default_factory=dict)
    authenticated: bool = False
    notes: dict[str, Any] = field(default_factory=dict)
    client_software: str | None = None
    principal: str | None = None
    pool: UpstreamPool | None = None


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the request with ``body`` (the API's response dataclass) instead of
    forwarding it. A request that gets no answer (a Produce with acks=0) is
    only kept from the brokers; ``body`` may then be None."""

    body: Any


@dataclass(frozen=True, slots=True)
class EncodedBody:
    """A response body already encoded at the request's API version (what
    follows the response header), for :class:`Respond` and
    :class:`RespondLater` to give instead of the response dataclass: key
    routing writes its merged answers on bytes."""

    data: bytes


@dataclass(frozen=True, slots=True)
class RespondLater:
    """Answer the request with what ``answer()`` returns (the API's response
    dataclass, or :class:`EncodedBody`), awaited in the proxy's nursery: it is always awaited once
    ``on_request`` has returned this, and completes even if the client's
    connection closes meanwhile, so bound it with a deadline. The
    client's later requests are served meanwhile; its answers keep their order.
    If ``answer()`` raises, the client's connection closes."""

    answer: Callable[[], Awaitable[Any]]


class CloseConnection(Exception):
    """Raised by a filter: close the client's connection (logged as a warning,
    at most once a minute per message's first word)."""


@dataclass(frozen=True, slots=True)
class ProxyServices:
    """What a proxy offers its filters (:meth:`Filter.attach`).

    Attributes:
        pool: the proxy's pooled upstream connections, one per broker
            (``await pool.send(node_id, client_id, api_key, api_version,
            body)`` writes a request and returns a waiter;
            ``await pool.wait(waiter, deadline)`` its answer's frame).
        topics: partition counts and leaders, as the answers passing through
            the proxy taught it.
        nodes: the ids of the brokers the proxy knows.
        refresh: asks the cluster again for these topics' leaders.
        from_upstream: what the proxy does to every answer from a broker,
            for an answer a filter got over the pool: ``from_upstream(api_key,
            api_version, body)`` learns from it (a Metadata answer's
            partitions and leaders) and returns it naming the proxy's
            listeners instead of brokers.
        nursery: the proxy's own nursery, for work that outlives a client's
            connection.
        quiet: the proxy's rate-limited log.
    """

    pool: UpstreamPool
    topics: Topics
    nodes: Callable[[], list[int]]
    refresh: Callable[[set[str]], None]
    from_upstream: Callable[[int, int, Any], Any]
    nursery: trio.Nursery
    quiet: RateLimitedLog


@dataclass(frozen=True, slots=True)
class Sample:
    """One value of a filter's metric, for the proxy's Prometheus exposition
    (:meth:`Filter.samples`).

    Attributes:
        family: the metric's name (``trafka_proxy_...``; a counter's without
            ``_total``). A family the proxy has itself (``trafka_proxy_errors``
            and ``trafka_proxy_flow_control``, by ``kind``) takes the sample
            among its own.
        help: what the metric means (the first sample's, per family).
        labels: (name, value) pairs, the same names for every sample of a family.
        value: the value now (a counter's never decreases).
        kind: ``counter`` or ``gauge``.
    """

    family: str
    help: str
    labels: tuple[tuple[str, str], ...] = ()
    value: float = 0
    kind: Literal["counter", "gauge"] = "counter"


class Filter:
    """A filter: subclass it and override what you need.

    Attributes:
        api_keys: the APIs whose requests and answers the filter sees (None:
            every API the proxy's codec knows). The others pass the proxy
            undecoded, as bytes.
    """

    api_keys: frozenset[int] | None = None

    def attach(self, services: ProxyServices) -> None:
        """Called once when the proxy starts, before any request."""

    def detach(self) -> None:
        """Called once when the proxy stops."""

    def configure(self, settings: Mapping[str, Any]) -> None:
        """Take the settings of the filter's entry in ``trafka proxy``'s file
        (``[[filter]]``'s ``settings`` table): once before the proxy starts,
        and again on SIGHUP when they changed (on the proxy's event loop).

        Raises:
            ValueError: the settings are refused (the proxy does not start, or
                keeps the old ones). The default takes none.
        """
        if settings:
            raise ValueError(f"{_name(self)} takes no settings")

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        """A request on its way to a broker (may be ``async def``).

        Returns:
            ``body`` (passed on), a new body, :class:`Respond` or
            :class:`RespondLater`.
        """
        return body

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        """An answer on its way to the client.

        Returns:
            ``body`` or a new body.
        """
        return body

    def statistics(self) -> Mapping[str, Any]:
        """Live counters to show in ``RunningProxy.statistics.filters``, by
        name (read once when the proxy starts; give objects that the filter
        keeps updating). Key routing gives ``routing``. The default: none."""
        return {}

    def samples(self) -> Iterable[Sample]:
        """The filter's metrics now, for the proxy's ``/metrics`` (called at each
        scrape, on the proxy's event loop: quick). The default: none."""
        return ()

    def wants(self, api_key: int) -> bool:
        """Whether the filter sees ``api_key``'s requests and answers (by
        default: it is in :attr:`api_keys`)."""
        return self.api_keys is None or api_key in self.api_keys


class FilterError(Exception):
    """A filter raised, or returned something that is not a body."""


def wanted(filters: Sequence[Filter], api_key: int) -> tuple[Filter, ...]:
    """The filters that see ``api_key``."""
    return tuple(f for f in filters if f.wants(api_key))


async def run_request(
    filters: Sequence[Filter], ctx: FilterContext, body: Any
) -> tuple[Any, Respond | RespondLater | None, int]:
    """Run the request through ``filters`` in order.

    Returns:
        (the body to forward, or the :class:`Respond` / :class:`RespondLater`
        of the filter that answered, and how many filters saw the request, for
        the answer's way back).

    Raises:
        FilterError: a filter raised.
        CloseConnection: a filter asked for it.
    """
    for i, f in enumerate(filters):
        try:
            out = f.on_request(ctx, body)
            if inspect.isawaitable(out):
                out = await out
        except CloseConnection:
            raise
        except Exception as exc:
            raise FilterError(f"{_name(f)}.on_request: {exc!r}") from exc
        if isinstance(out, Respond | RespondLater):
            return body, out, i + 1
        if out is None:
            raise FilterError(f"{_name(f)}.on_request returned None")
        body = out
    return body, None, len(filters)


def run_response(filters: Sequence[Filter], ctx: FilterContext, body: Any) -> Any:
    """Run an answer back through ``filters`` (the ones that saw its request), in
    reverse order.

    Raises:
        FilterError: a filter raised.
    """
    for f in reversed(filters):
        try:
            out = f.on_response(ctx, body)
        except Exception as exc:
            raise FilterError(f"{_name(f)}.on_response: {exc!r}") from exc
        if out is None:
            raise FilterError(f"{_name(f)}.on_response returned None")
        body = out
    return body


def load_filter(spec: str) -> Filter:
    """A filter from ``module:attribute`` (a :class:`Filter` subclass or factory,
    called with no arguments, or an instance).

    Raises:
        ValueError: the spec does not name a filter.
    """
    import importlib

    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"filter {spec!r} is not module:attribute")
    try:
        target: Any = importlib.import_module(module_name)
        for part in attr.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"filter {spec!r}: {exc}") from None
    made = target() if callable(target) and not isinstance(target, Filter) else target
    if not isinstance(made, Filter):
        raise ValueError(f"filter {spec!r} is not a trafka.proxy.Filter")
    return made


def _name(f: Filter) -> str:
    return type(f).__name__
