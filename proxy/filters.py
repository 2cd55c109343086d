"""The proxy's extension point: filters that see decoded requests and answers.

A filter is Python code the proxy runs on the requests and answers of the APIs
it names, decoded (the codec's dataclasses, as :mod:`trafka.codec.protocol`
gives them). It may pass them on unchanged, change them (return a new body:
the codec's dataclasses are frozen, so ``dataclasses.replace``), or answer a
request itself (:class:`Respond`), which then never reaches a broker.

Rules:

* Filters run in the order given (``ProxyConfig.filters``) on requests, and in
  the reverse order on answers, as a chain: each sees what the one before it
  returned. Requests go through the filters before the proxy's own work (key
  routing of Produce, see :mod:`.routing`); answers after it (broker addresses
  already the proxy's, a routed Produce's answer already merged), so a filter
  sees what the client sends and what it will receive.
* A request answered by :class:`Respond` goes to no broker; the filters before
  the one that answered see that answer on their way back, as any other.
* ``on_request`` and ``on_response`` run on the proxy's event loop: keep them
  quick (no blocking I/O). A filter that raises closes the client's connection
  (the error is logged, at most once a minute per filter); other clients go on.
* :class:`FilterContext` tells a filter who is asking (the client's address,
  client id, the broker the connection stands for) and carries ``state``, a
  dictionary private to the client connection that filters may use across its
  requests.
* An API the proxy's codec does not know, or a version it does not, passes
  unfiltered (it cannot be decoded).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["Filter", "FilterContext", "FilterError", "Respond", "load_filter"]


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
    """

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None
    client_address: tuple[str, int] | None
    node_id: int
    state: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Respond:
    """Answer the request with ``body`` (the API's response dataclass) instead of
    forwarding it."""

    body: Any


class Filter:
    """A filter: subclass it and override what you need.

    Attributes:
        api_keys: the APIs whose requests and answers the filter sees (None:
            every API the proxy's codec knows).
    """

    api_keys: frozenset[int] | None = None

    def on_request(self, ctx: FilterContext, body: Any) -> Any:
        """A request on its way to a broker.

        Returns:
            ``body`` (passed on), a new body, or :class:`Respond`.
        """
        return body

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        """An answer on its way to the client.

        Returns:
            ``body`` or a new body.
        """
        return body

    def wants(self, api_key: int) -> bool:
        return self.api_keys is None or api_key in self.api_keys


class FilterError(Exception):
    """A filter raised, or returned something that is not a body."""


def wanted(filters: Sequence[Filter], api_key: int) -> tuple[Filter, ...]:
    """The filters that see ``api_key``."""
    return tuple(f for f in filters if f.wants(api_key))


def run_request(
    filters: Sequence[Filter], ctx: FilterContext, body: Any
) -> tuple[Any, Respond | None, int]:
    """Run the request through ``filters`` in order.

    Returns:
        (the body to forward, or a :class:`Respond` when a filter answered, and
        how many filters saw the request, for the answer's way back).

    Raises:
        FilterError: a filter raised.
    """
    for i, f in enumerate(filters):
        try:
            out = f.on_request(ctx, body)
        except Exception as exc:
            raise FilterError(f"{_name(f)}.on_request: {exc!r}") from exc
        if isinstance(out, Respond):
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
