"""Byte-rate quotas per tenant, for the tenants filter (:mod:`.tenants`).

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
# ctx.notes: the tenant's throttle time for this request's answer (ms)
THROTTLE = "trafka.proxy.tenants:throttle"

_NUM = ("quota_window_num", "quota.window.num")
_SIZE = ("quota_window_size_seconds", "quota.window.size.seconds")
QUOTA_SETTINGS = frozenset({*_NUM, *_SIZE})
PRODUCE_QUOTA, FETCH_QUOTA = "produce", "fetch"
_INT32 = 2**31 - 1


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
    entry: Mapping[str, Any], name: str, where: str, problems: list[str]
) -> float | None:
    """A tenant's byte rate ``name`` (None: not given, unlimited)."""
    value = entry.get(name)
    if value is None:
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or value <= 0
    ):
        problems.append(f"{where}: {name} {value!r} must be a positive number (bytes per second)")
        return None
    return float(value)


class TenantQuotas:
    """The tenants' rates, throttles and counts (see the module's rules).

    ``clock`` gives seconds of a monotonic clock (injected by tests)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.windows = Windows()
        self.rates: dict[tuple[str, str], Rate] = {}
        # (tenant, quota) -> bytes counted, throttle ms given
        self.bytes: dict[tuple[str, str], int] = {}
        self.throttled_ms: dict[tuple[str, str], int] = {}

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

    def mute(self, ctx: FilterContext, throttle_ms: int) -> None:
        """Hold the connection's next request for ``throttle_ms`` from now."""
        until = self.clock() + throttle_ms / 1000
        if until > ctx.state.get(MUTED, 0.0):
            ctx.state[MUTED] = until

    def held(self, ctx: FilterContext) -> float:
        """How long (s) the connection's next request must still wait (0: none)."""
        until: float | None = ctx.state.get(MUTED)
        if until is None:
            return 0.0
        wait = until - self.clock()
        if wait <= 0:
            del ctx.state[MUTED]
            return 0.0
        return wait

    @staticmethod
    async def after(
        wait: float, go: Callable[[FilterContext, Any], Any], ctx: FilterContext, x: Any
    ) -> Any:
        """``go(ctx, x)`` once ``wait`` seconds have passed (the channel muted)."""
        await trio.sleep(wait)
        return go(ctx, x)

    # -- the APIs counted ----------------------------------------------------------------

    def produced(self, ctx: FilterContext, tenant: str, bound: float | None, frame: bytes) -> None:
        """A Produce request of ``tenant`` (its ``producer_byte_rate``: ``bound``),
        as it goes to the broker."""
        throttle = self.count(tenant, PRODUCE_QUOTA, len(frame), bound)
        if throttle:
            ctx.notes[THROTTLE] = throttle
            self.mute(ctx, throttle)

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
        self.mute(ctx, throttle)
        if key == ApiKey.FETCH and version < 1:
            return frame  # Fetch v0 has no throttle time to tell
        return _with_throttle(frame, start, throttle)

    def answered(self, ctx: FilterContext, body: Any) -> Any:
        """A decoded answer (Produce's) with the tenant's throttle time, if larger."""
        throttle = ctx.notes.get(THROTTLE)
        if not throttle:
            return body
        # Muted from the answer on, as Kafka mutes a channel once its answer
        # is sent (it was muted from the request on too: acks=0 has no answer).
        self.mute(ctx, throttle)
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
                "Throttle time the proxy gave tenants' clients for their byte-rate quotas "
                "(the tenant's, not the brokers').",
                (("tenant", tenant), ("quota", quota)),
                ms / 1000,
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
