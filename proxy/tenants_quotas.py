"""Byte-rate and request-time quotas per tenant, for the tenants filter (:mod:`.tenants`).

Tenants share one Kafka cluster through the proxy's upstream connections, so
the brokers see one client and Kafka's own quotas cannot tell tenants apart:
the proxy measures and throttles each tenant as Kafka's broker measures and
throttles a client (:mod:`.quota_rate` holds the arithmetic).

Rules:

* A tenant's ``producer_byte_rate`` and ``consumer_byte_rate`` (bytes per
  second, Kafka's names; none: unlimited) bound what all its client
  connections produce and fetch, together. The rate is measured over the
  filter's ``quota_window_num`` samples (``quota.window.num``, 11) of
  ``quota_window_size_seconds`` (``quota.window.size.seconds``, 1), Kafka's
  broker settings and defaults.
* What is counted is what Kafka's broker counts, as the brokers get it: a
  Produce request's size (its header and body, the tenant's prefix added:
  Kafka's ``request.sizeInBytes``), and a Fetch or ShareFetch answer's size
  as the broker counts it (its body and 4 bytes; Kafka's ``sizeOf``).
  Every tenant is measured, with a quota or not (its metrics; a quota set by
  a reload starts from the rate measured).
* An answer carries ``throttle_time_ms`` = max(the broker's, the tenant's)
  and goes to the client at once (KIP-219). The connection's next request is
  then held until that time has passed since the answer went (a Fetch's is
  computed on its answer; a Produce's on its request, and muted from then
  too), as Kafka mutes the channel: a client that ignores the field is
  bounded so. A Produce with acks=0 gets no answer; its connection is held
  all the same, from its request.
* Unlike Kafka's broker, the proxy passes a throttled Fetch's records on
  (Kafka answers a throttled Fetch empty and takes its bytes back off the
  rate): the broker has read them already, and a share group's records are
  acquired once fetched. Their bytes stay counted.
* A Fetch or ShareFetch of a tenant with ``consumer_byte_rate`` asks for at
  most ``rate * (num - 1) * size`` bytes (``max_bytes``, and ``min_bytes``
  no more than that), as Kafka's broker caps a consumer's fetch: asking more
  would be throttled for sure.
* A tenant's ``request_percentage`` (Kafka's request quota, KIP-124; none:
  unlimited) bounds the share of one thread the proxy spends handling all
  its connections' requests, in percent (100: one whole thread; more is
  allowed, as Kafka's quota is out of its threads' count times 100). What is
  counted is the proxy's own handling of each of the tenant's requests the
  tenants filter serves: the chain's time on the request and on its answer
  on the event loop (:attr:`~.filters.FilterContext.handled_ns`, the tenants
  filter's own answer work added), not the time the brokers took. It is
  recorded when the answer passes the filter, in percent-seconds (Kafka's
  ``nanos * 100 / 10^9``), over the same windows as the byte rates; over the
  bound, the throttle time is the byte rates' formula capped at one sample
  (``quota_window_size_seconds``), as Kafka's ClientRequestQuotaManager caps
  it. The answer carries it (the larger of the broker's and the tenant's
  throttles: a Produce or Fetch over both quotas is told the larger, as
  Kafka tells it) and the connection is muted as for the byte rates. A
  Produce with acks=0 has no answer: its handling is not counted.
* The settings are checked with the rest (positive numbers) and reloaded on
  SIGHUP: a new rate applies from the next request, and the rates measured
  are kept (started afresh only when the windows change).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from functools import cache
from typing import Any

import trio

from trafka.codec import ApiKey, protocol
from trafka.codec.frame_walk import skip_tags

from .filters import FilterContext, Sample
from .quota_rate import Rate, Windows

__all__ = ["MUTED", "QUOTA_SETTINGS", "TenantQuotas", "parse_rate", "parse_windows"]

# ctx.state: until when (the quotas' clock, seconds) the connection is held
MUTED = "trafka.proxy.tenants:muted"
# ctx.state: the tenant whose throttle muted the connection
MUTED_BY = "trafka.proxy.tenants:muted_by"
# ctx.notes: the tenant's throttle time for this request's answer (ms)
THROTTLE = "trafka.proxy.tenants:throttle"

_NUM = ("quota_window_num", "quota.window.num")
_SIZE = ("quota_window_size_seconds", "quota.window.size.seconds")
QUOTA_SETTINGS = frozenset({*_NUM, *_SIZE})
PRODUCE_QUOTA, FETCH_QUOTA, REQUEST_QUOTA = "produce", "fetch", "request"
_INT32 = 2**31 - 1
# Kafka's NanosToPercentagePerSecond: a nanosecond of handling, in percent-seconds.
_PERCENT_PER_NS = 100 / 1e9


def parse_windows(settings: Mapping[str, Any], problems: list[str]) -> Windows:
    """The filter's quota windows (Kafka's defaults when not given)."""
    num = _positive_int(settings, _NUM, 11, problems)
    size = _positive_int(settings, _SIZE, 1, problems)
    return Windows(num, size * 1000)


def _positive_int(
    settings: Mapping[str, Any], names: tuple[str, str], default: int, problems: list[str]
) -> int:
    given = [n for n in names if n in settings]
    if len(given) > 1:
        problems.append(f"{names[0]} and {names[1]} are the same setting: give one")
    if not given:
        return default
    value = settings[given[0]]
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        problems.append(f"{given[0]}: {value!r} is not a positive whole number")
        return default
    return value


def parse_rate(
    entry: Mapping[str, Any],
    name: str,
    where: str,
    problems: list[str],
    unit: str = "bytes per second",
) -> float | None:
    """A tenant's byte rate ``name``, or its ``request_percentage`` (``unit``:
    percent of one thread), None: not given, unlimited."""
    value = entry.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        problems.append(f"{where}: {name} {value!r} must be a positive number ({unit})")
        return None
    return float(value)


class TenantQuotas:
    """The tenants' rates, throttles and counts (see the module's rules).

    ``clock`` gives seconds of a monotonic clock, the windows' (injected by
    tests); ``timer`` nanoseconds of one, what the filter's own handling of an
    answer took (injected by tests too)."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        timer: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.clock = clock
        self.timer = timer
        self.windows = Windows()
        self.rates: dict[tuple[str, str], Rate] = {}
        # (tenant, quota) -> bytes counted, throttle ms given
        self.bytes: dict[tuple[str, str], int] = {}
        self.throttled_ms: dict[tuple[str, str], int] = {}
        # tenant -> handling time counted against request_percentage (ns)
        self.handled_ns: dict[str, int] = {}
        # tenant -> requests its clients sent on a muted connection, held
        self.held_requests: dict[str, int] = {}

    def configure(self, windows: Windows) -> None:
        if windows != self.windows:
            self.windows, self.rates = windows, {}

    def _now_ms(self) -> int:
        return int(self.clock() * 1000)

    def count(self, tenant: str, quota: str, size: int, bound: float | None) -> int:
        """Count ``size`` bytes of ``tenant``'s against ``bound``: the throttle
        time (ms) it earns."""
        key = (tenant, quota)
        rate = self.rates.get(key)
        if rate is None:
            rate = self.rates[key] = Rate()
        self.bytes[key] = self.bytes.get(key, 0) + size
        # Kafka's int cast of a throttle time, without its wrap-around
        throttle = min(rate.throttle(size, self._now_ms(), self.windows, bound), _INT32)
        if throttle:
            self.throttled_ms[key] = self.throttled_ms.get(key, 0) + throttle
        return throttle

    def handled(self, tenant: str, nanos: int, bound: float | None) -> int:
        """Count ``nanos`` of the proxy's handling of ``tenant``'s requests
        against ``bound`` (its ``request_percentage``): the throttle time (ms)
        it earns, at most one sample's time (see the rules)."""
        key = (tenant, REQUEST_QUOTA)
        rate = self.rates.get(key)
        if rate is None:
            rate = self.rates[key] = Rate()
        self.handled_ns[tenant] = self.handled_ns.get(tenant, 0) + nanos
        value = nanos * _PERCENT_PER_NS
        earned = rate.throttle(value, self._now_ms(), self.windows, bound)
        throttle = min(earned, self.windows.size_ms)
        if throttle:
            self.throttled_ms[key] = self.throttled_ms.get(key, 0) + throttle
        return throttle

    def mute(self, ctx: FilterContext, throttle_ms: int, tenant: str) -> None:
        """Hold the connection's next request for ``throttle_ms`` from now
        (``tenant``'s throttle)."""
        until = self.clock() + throttle_ms / 1000
        if until > ctx.state.get(MUTED, 0.0):
            ctx.state[MUTED] = until
            ctx.state[MUTED_BY] = tenant

    def held(self, ctx: FilterContext) -> float:
        """How long (s) the connection's next request must still wait (0: none)."""
        until: float | None = ctx.state.get(MUTED)
        if until is None:
            return 0.0
        wait = until - self.clock()
        if wait <= 0:
            del ctx.state[MUTED]
            ctx.state.pop(MUTED_BY, None)
            return 0.0
        return wait

    def hold(self, ctx: FilterContext) -> float:
        """:meth:`held`, a request held counted (``held_requests``): one a
        client that honours its throttle times never sends."""
        wait = self.held(ctx)
        if wait:
            tenant = ctx.state.get(MUTED_BY, "")
            self.held_requests[tenant] = self.held_requests.get(tenant, 0) + 1
        return wait

    @staticmethod
    async def after(
        wait: float, go: Callable[[FilterContext, Any], Any], ctx: FilterContext, x: Any
    ) -> Any:
        """``go(ctx, x)`` once ``wait`` seconds have passed (the channel muted:
        the chain counts the wait as no handling, ``go``'s steps as handling)."""
        await trio.sleep(wait)
        return go(ctx, x)

    # -- the APIs counted ----------------------------------------------------------------

    def produced(self, ctx: FilterContext, tenant: str, bound: float | None, frame: bytes) -> None:
        """A Produce request of ``tenant`` (its ``producer_byte_rate``: ``bound``),
        as it goes to the broker."""
        throttle = self.count(tenant, PRODUCE_QUOTA, len(frame), bound)
        if throttle:
            ctx.notes[THROTTLE] = throttle
            self.mute(ctx, throttle, tenant)

    def capped(self, bound: float | None, body: Any) -> Any:
        """A Fetch or ShareFetch request asking no more than the tenant's quota
        (its ``consumer_byte_rate``: ``bound``) lets it have at once (see the rules)."""
        if bound is None:
            return body
        cap = max(self.windows.fetch_cap(bound), 1)
        if body.max_bytes <= cap and body.min_bytes <= cap:
            return body
        most = min(body.max_bytes, cap)
        return replace(body, max_bytes=most, min_bytes=min(body.min_bytes, most))

    def fetched(self, ctx: FilterContext, tenant: str, bound: float | None, frame: bytes) -> bytes:
        """A Fetch or ShareFetch answer from the broker (its frame) to ``tenant``
        (its ``consumer_byte_rate``: ``bound``): counted, and its throttle time
        raised to the tenant's when that is larger."""
        key, version = ctx.api_key, ctx.api_version
        start = _body_start(frame, key, version)
        throttle = self.count(tenant, FETCH_QUOTA, len(frame) - start + 4, bound)
        if not throttle:
            return frame
        self.mute(ctx, throttle, tenant)
        if key == ApiKey.FETCH and version < 1:
            return frame  # Fetch v0 has no throttle time to tell
        return _with_throttle(frame, start, throttle)

    def timed(
        self, ctx: FilterContext, tenant: str, bound: float | None, started: int, body: Any
    ) -> Any:
        """A decoded answer to ``tenant`` (its ``request_percentage``:
        ``bound``), the filter's own work on it begun at ``started`` (its
        ``timer``): the request's handling counted, and the answer's
        throttle_time_ms raised to what that earns when larger (an answer
        without that field: the connection muted all the same)."""
        throttle = self.handled(tenant, ctx.handled_ns + self.timer() - started, bound)
        if not throttle:
            return body
        self.mute(ctx, throttle, tenant)
        told = getattr(body, "throttle_time_ms", None)
        if told is not None and throttle > told:
            return replace(body, throttle_time_ms=throttle)
        return body

    def timed_frame(
        self, ctx: FilterContext, tenant: str, bound: float | None, started: int, frame: bytes
    ) -> bytes:
        """:meth:`timed` for a Fetch or ShareFetch answer's frame."""
        throttle = self.handled(tenant, ctx.handled_ns + self.timer() - started, bound)
        if not throttle:
            return frame
        self.mute(ctx, throttle, tenant)
        key, version = ctx.api_key, ctx.api_version
        if key == ApiKey.FETCH and version < 1:
            return frame  # Fetch v0 has no throttle time to tell
        return _with_throttle(frame, _body_start(frame, key, version), throttle)

    def answered(self, ctx: FilterContext, tenant: str, body: Any) -> Any:
        """A decoded answer (Produce's) to ``tenant`` with its throttle time, if larger."""
        throttle = ctx.notes.get(THROTTLE)
        if not throttle:
            return body
        # Muted from the answer on, as Kafka mutes a channel once its answer
        # is sent (it was muted from the request on too: acks=0 has no answer).
        self.mute(ctx, throttle, tenant)
        if throttle > body.throttle_time_ms:
            return replace(body, throttle_time_ms=throttle)
        return body

    # -- what is counted ------------------------------------------------------------------

    def samples(self) -> Iterable[Sample]:
        for (tenant, quota), n in sorted(self.bytes.items()):
            yield Sample(
                "trafka_proxy_tenant_quota_bytes",
                "Bytes counted against tenants' byte-rate quotas, as Kafka's broker counts "
                "them: Produce requests' sizes (quota=produce), Fetch and ShareFetch answers' "
                "sizes (quota=fetch).",
                (("tenant", tenant), ("quota", quota)),
                n,
            )
        for (tenant, quota), ms in sorted(self.throttled_ms.items()):
            yield Sample(
                "trafka_proxy_tenant_throttle_seconds",
                "Throttle time the proxy gave tenants' clients for their quotas (the "
                "tenant's, not the brokers'): quota=produce, fetch (byte rates), request "
                "(request_percentage).",
                (("tenant", tenant), ("quota", quota)),
                ms / 1000,
            )
        for tenant, n in sorted(self.held_requests.items()):
            yield Sample(
                "trafka_proxy_tenant_held_requests",
                "Requests of tenants' clients that came on a connection muted by a throttle "
                "and were held until its time had passed (clients that honour "
                "throttle_time_ms send none).",
                (("tenant", tenant),),
                n,
            )
        for tenant, ns in sorted(self.handled_ns.items()):
            yield Sample(
                "trafka_proxy_tenant_request_time_seconds",
                "The proxy's handling time of tenants' requests (the filter chain's, on its "
                "event loop), as counted against request_percentage quotas.",
                (("tenant", tenant),),
                ns / 1e9,
            )


def _body_start(frame: bytes, key: int, version: int) -> int:
    """Where an answer's body starts (past its header's correlation id and tags)."""
    return skip_tags(frame, 4) if _tagged_header(key, version) else 4


@cache
def _tagged_header(key: int, version: int) -> bool:
    return protocol.api(key).response_header_version(version) >= 1


def _with_throttle(frame: bytes, start: int, throttle: int) -> bytes:
    """An answer whose body opens with throttle_time_ms (Fetch v1+, ShareFetch),
    that field raised to ``throttle`` when that is larger."""
    current = int.from_bytes(frame[start : start + 4], "big", signed=True)
    if current >= throttle:
        return frame
    return frame[:start] + throttle.to_bytes(4, "big", signed=True) + frame[start + 4 :]
