"""The tenants' quota arithmetic without sockets (``trafka.proxy.quota_rate``,
``trafka.proxy.tenants_quotas``; issue #83 item 2, quotas per tenant), on an
injected clock: no test here depends on the machine's pace.

The expected figures are Kafka's documented behaviour: its design docs
("Quotas": the delay computed at once and returned with the answer, then the
channel muted; several small windows), KIP-13 (the throttle time X = (O - T)
/ T * W that brings the observed rate O back to the target T over the window
W), KIP-219 (``throttle_time_ms`` returned at once, the channel muted for it),
and the figures of Kafka's own ClientQuotaManager tests (quota 50, observed
100, 3 samples: 2000 ms).
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

from trafka.codec import ApiKey, protocol
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages import k01_fetch as fm
from trafka.codec.messages.headers import RequestHeader
from trafka.proxy.filters import FilterContext, Session
from trafka.proxy.quota_rate import Rate, Windows, throttle_ms
from trafka.proxy.tenants import Tenants
from trafka.proxy.tenants_quotas import MUTED, TenantQuotas
from trafka.sdk import ConfigError


class Clock:
    """A clock the test moves (seconds)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# -- the rate and the throttle time (quota_rate) -----------------------------------------------


def test_kafkas_figure_quota_50_observed_100_three_samples_is_2000_ms() -> None:
    """Kafka's ClientQuotaManager test: a quota of 50/s, an observed 100/s
    over 3 samples of 1 s (the window counted as 2 whole windows at least):
    2000 ms, which brings the rate back to 50/s (KIP-13: X = (O - T) / T * W)."""
    windows = Windows(num=3, size_ms=1000)
    assert throttle_ms(100.0, 50.0, 2000) == 2000
    rate = Rate()
    assert rate.throttle(200, 0, windows, 50.0) == 2000  # 200 B over 2 s: 100/s
    assert rate.measure(0, windows) == 100.0
    # X more ms bring O * W / (W + X) down to T: 200 B over 4 s is 50/s.
    assert 200 / ((2000 + 2000) / 1000) == 50.0


def test_the_bound_is_an_upper_bound_and_halves_round_up() -> None:
    """A rate equal to the quota passes (Kafka's Quota.upperBound accepts
    value <= bound); the throttle time is Java's Math.round (halves up)."""
    assert throttle_ms(50.0, 50.0, 10_000) == 0
    assert throttle_ms(49.9, 50.0, 10_000) == 0
    assert throttle_ms(101.0, 100.0, 50) == 1  # 0.5 ms: 1, not Python's 0
    assert throttle_ms(105.0, 100.0, 50) == 3  # 2.5 ms: 3
    rate = Rate()
    assert rate.throttle(10_000, 0, Windows(), 1000.0) == 0  # 10 kB over 10 s: 1000/s


def test_a_first_burst_is_spread_over_num_minus_one_windows() -> None:
    """Kafka's Rate assumes N - 1 whole windows have passed (11 samples of
    1 s by default: 10 s), so a first burst is not divided by the few
    milliseconds measured so far: 10 kB at once is 1000/s, and against 500/s
    it earns (1000 - 500) / 500 * 10 s."""
    rate = Rate()
    assert rate.window_ms(0, Windows()) == 10_000
    assert rate.throttle(10_000, 0, Windows(), 500.0) == 10_000
    # No quota: measured all the same, never throttled.
    free = Rate()
    assert free.throttle(10**9, 0, Windows(), None) == 0
    assert free.measure(0, Windows()) == 10**9 / 10


def test_samples_roll_and_the_overlapping_one_is_kept() -> None:
    """A record past the current sample's window starts a new sample; a
    sample is emptied once its last record is num * size old; the oldest
    sample left may have started before the measured window (Kafka keeps it:
    num + 1 samples), and the rate is divided by the time since it started."""
    w = Windows(num=2, size_ms=1000)
    rate = Rate()
    rate.record(1000, 0, w)
    rate.record(1000, 1000, w)  # a second sample
    assert rate.window_ms(1000, w) == 1000
    assert rate.measure(1000, w) == 2000.0
    rate.record(0, 2500, w)  # a third; the first (last record at 0) is emptied
    assert rate.window_ms(2500, w) == 1500  # since the second started, at 1000
    assert rate.measure(2500, w) == pytest.approx(1000 / 1.5)
    # Nothing recorded for num * size: every sample emptied, no throttle.
    assert rate.measure(5000, w) == 0.0
    assert rate.throttle(10, 5000, w, 100.0) == 0


def test_the_fetch_cap_is_what_the_window_lets_through() -> None:
    """Kafka caps a consumer's fetch max_bytes at quota * (num - 1) * size
    (getMaxValueInQuotaWindow): more would be throttled for sure."""
    assert Windows().fetch_cap(1000.0) == 10_000
    assert Windows(num=2, size_ms=1000).fetch_cap(100.0) == 100
    assert Windows(num=3, size_ms=2000).fetch_cap(10.5) == 42


# -- per tenant, across connections (tenants_quotas) ------------------------------------------

TENANTS = {
    "tenants": [
        {"name": "acme", "prefix": "acme.", "principals": ["User:alice"],
         "producer_byte_rate": 100, "consumer_byte_rate": 100},
        {"name": "globex", "prefix": "globex.", "principals": ["User:bob"]},
    ],
    "quota_window_num": 2,
    "quota_window_size_seconds": 1,
}  # fmt: skip


def _ctx(key: int, version: int, principal: str, state: dict[str, Any]) -> FilterContext:
    session = Session(authenticated=True, principal=principal)
    return FilterContext(key, version, 7, "c", ("127.0.0.1", 1), -1, state, session)


def _produce_frame(size: int) -> bytes:
    body = pm.ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name="orders",
                partition_data=[
                    pm.ProduceRequest.PartitionProduceData(index=0, records=b"x" * size)
                ],
            )
        ],
    )
    header = RequestHeader(
        request_api_key=ApiKey.PRODUCE, request_api_version=9, correlation_id=7, client_id="c"
    )
    return protocol.encode_request(header, body)[4:]


def _filter(clock: Clock) -> Tenants:
    tenants = Tenants()
    tenants.quotas.clock = clock
    tenants.configure(TENANTS)
    return tenants


def test_a_tenant_is_measured_across_its_connections_and_muted_per_connection() -> None:
    """Two connections of one tenant share its rate (Kafka: all connections of
    a quota group share the quota); the answer carries max(broker's,
    tenant's) throttle_time_ms; the connection that was throttled is muted
    (its next request held), the other is not; another tenant, with no
    quota, is measured and never throttled."""
    clock = Clock()
    tenants = _filter(clock)
    one, two, other = {}, {}, {}  # type: ignore[var-annotated]
    frame = _produce_frame(40)  # under 100 B: no throttle yet
    ctx = _ctx(ApiKey.PRODUCE, 9, "User:alice", one)
    sent = tenants.on_request_frame(ctx, frame)
    assert isinstance(sent, bytes) and b"acme.orders" in sent
    assert "trafka.proxy.tenants:throttle" not in ctx.notes
    first = len(sent)
    ctx2 = _ctx(ApiKey.PRODUCE, 9, "User:alice", two)
    sent2 = tenants.on_request_frame(ctx2, frame)  # together over 100 B in 1 s
    rate = (first + len(sent2)) / 1.0
    expected = throttle_ms(rate, 100.0, 1000)
    assert expected > 0 and ctx2.notes["trafka.proxy.tenants:throttle"] == expected
    assert MUTED in two and MUTED not in one
    assert tenants.quotas.held(ctx2) == pytest.approx(expected / 1000)  # muted from the request
    clock.now += 0.005  # the broker answers 5 ms later: muted from the answer on
    answer = pm.ProduceResponse(responses=[], throttle_time_ms=0)
    assert tenants.on_response(ctx2, answer).throttle_time_ms == expected
    broker_said = pm.ProduceResponse(responses=[], throttle_time_ms=expected + 5)
    assert tenants.on_response(ctx2, broker_said).throttle_time_ms == expected + 5
    assert tenants.quotas.held(ctx2) == pytest.approx(expected / 1000)
    # globex: counted, never throttled.
    ctx3 = _ctx(ApiKey.PRODUCE, 9, "User:bob", other)
    tenants.on_request_frame(ctx3, _produce_frame(10_000))
    assert "trafka.proxy.tenants:throttle" not in ctx3.notes and not other
    stats = tenants.statistics()["tenant_quotas"]
    assert stats["bytes"][("acme", "produce")] == first + len(sent2)
    assert stats["bytes"][("globex", "produce")] > 10_000
    assert stats["throttled_ms"] == {("acme", "produce"): expected}
    families = {(s.family, s.labels): s.value for s in tenants.samples()}
    assert (
        families[
            ("trafka_proxy_tenant_throttle_seconds", (("tenant", "acme"), ("quota", "produce")))
        ]
        == expected / 1000
    )
    assert ("trafka_proxy_tenant_quota_bytes", (("tenant", "globex"), ("quota", "produce"))) in (
        families
    )
    # Once the throttle time has passed, the connection is not held.
    clock.now += expected / 1000
    assert tenants.quotas.held(ctx2) == 0 and MUTED not in two


def test_a_muted_connections_next_request_waits_for_the_throttle_time() -> None:
    """KIP-219: the answer goes at once, and the channel is muted for the
    throttle time: the next request (acks=0's too, which has no answer) is
    handed on only once that time has passed on the clock (trio's virtual
    clock here: no real waiting)."""

    async def main() -> None:
        clock = Clock()
        tenants = _filter(clock)
        tenants.quotas.clock = trio.current_time
        state: dict[str, Any] = {}
        ctx = _ctx(ApiKey.PRODUCE, 9, "User:alice", state)
        tenants.on_request_frame(ctx, _produce_frame(1000))  # acks=-1 or 0: muted alike
        throttle = ctx.notes["trafka.proxy.tenants:throttle"]
        assert throttle > 0
        start = trio.current_time()
        from trafka.codec.messages import k03_metadata as md

        request = md.MetadataRequest(topics=None)
        held = tenants.on_request(_ctx(ApiKey.METADATA, 12, "User:alice", state), request)
        assert not isinstance(held, md.MetadataRequest)  # an awaitable: muted
        assert await held == request
        assert trio.current_time() - start == pytest.approx(throttle / 1000)
        assert tenants.quotas.held_requests == {"acme": 1}  # counted once
        # Unmuted: the next one passes at once, as a body.
        again = tenants.on_request(_ctx(ApiKey.METADATA, 12, "User:alice", state), request)
        assert again == request

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _fetch_answer(records: int, throttle: int, version: int = 16) -> bytes:
    body = fm.FetchResponse(
        throttle_time_ms=throttle,
        error_code=0,
        session_id=0,
        responses=[
            fm.FetchResponse.FetchableTopicResponse(
                topic="",
                partitions=[
                    fm.FetchResponse.PartitionData(
                        partition_index=0, high_watermark=1, records=b"r" * records
                    )
                ],
            )
        ],
    )
    return protocol.encode_response(7, ApiKey.FETCH, version, body)[4:]


def test_fetch_answers_are_counted_as_kafka_sizes_them_and_say_the_throttle() -> None:
    """A Fetch answer counts 4 bytes and its body (Kafka's FetchResponse.sizeOf),
    and its throttle_time_ms becomes the tenant's when larger; the records
    pass (the broker has read them); the request asked at most the quota's
    window (Kafka caps a consumer's max_bytes so)."""
    clock = Clock()
    tenants = _filter(clock)
    state: dict[str, Any] = {}
    request = fm.FetchRequest(max_bytes=50 * 1024 * 1024, min_bytes=1_000, topics=[])
    ctx = _ctx(ApiKey.FETCH, 16, "User:alice", state)
    asked = tenants.on_request(ctx, request)
    assert (asked.max_bytes, asked.min_bytes) == (100, 100)  # 100 B/s * (2 - 1) * 1 s
    frame = _fetch_answer(300, throttle=0)
    out = tenants.on_response_frame(ctx, frame)
    counted = tenants.quotas.bytes[("acme", "fetch")]
    assert counted == len(frame) - 5 + 4  # header v1: correlation id and no tags
    answer = protocol.decode_response(out, ApiKey.FETCH, 16)[1]
    assert answer.throttle_time_ms == throttle_ms(counted, 100.0, 1000) > 0
    assert answer.responses[0].partitions[0].records == b"r" * 300
    assert MUTED in state
    # The broker's larger throttle is kept.
    ctx = _ctx(ApiKey.FETCH, 16, "User:alice", {})
    tenants.on_request(ctx, request)
    out = tenants.on_response_frame(ctx, _fetch_answer(10, throttle=10**6))
    assert protocol.decode_response(out, ApiKey.FETCH, 16)[1].throttle_time_ms == 10**6
    # ShareFetch (KIP-932): counted and told alike.
    from trafka.codec.messages import k78_share_fetch as sf

    ctx = _ctx(ApiKey.SHARE_FETCH, 1, "User:alice", {})
    shared = sf.ShareFetchResponse(throttle_time_ms=0, error_code=0, responses=[])
    frame = protocol.encode_response(7, ApiKey.SHARE_FETCH, 1, shared)[4:]
    alice = tenants.by_principal["User:alice"]
    out = tenants.quotas.fetched(ctx, alice.name, alice.consumer_byte_rate, frame)
    assert protocol.decode_response(out, ApiKey.SHARE_FETCH, 1)[1].throttle_time_ms > 0
    # globex (no quota): the request is not capped.
    ctx = _ctx(ApiKey.FETCH, 16, "User:bob", {})
    assert tenants.on_request(ctx, request).max_bytes == 50 * 1024 * 1024


def test_a_reload_keeps_the_rate_measured_and_applies_the_new_bound() -> None:
    """SIGHUP: a new rate applies from the next request, measured from what
    was counted before; new windows start the rates afresh."""
    clock = Clock()
    tenants = _filter(clock)
    ctx = _ctx(ApiKey.PRODUCE, 9, "User:bob", {})
    sent = tenants.on_request_frame(ctx, _produce_frame(500))  # globex: unlimited
    assert "trafka.proxy.tenants:throttle" not in ctx.notes
    reloaded = {
        "tenants": [
            TENANTS["tenants"][0],  # type: ignore[index]
            {"name": "globex", "prefix": "globex.", "principals": ["User:bob"],
             "producer_byte_rate": 200},
        ],
        "quota_window_num": 2,
        "quota_window_size_seconds": 1,
    }  # fmt: skip
    tenants.configure(reloaded)
    ctx = _ctx(ApiKey.PRODUCE, 9, "User:bob", {})
    again = tenants.on_request_frame(ctx, _produce_frame(1))
    expected = throttle_ms(len(sent) + len(again), 200.0, 1000)
    assert ctx.notes["trafka.proxy.tenants:throttle"] == expected > 0
    # Other windows: measured afresh (a small request passes).
    tenants.configure({**reloaded, "quota_window_num": 11})
    ctx = _ctx(ApiKey.PRODUCE, 9, "User:bob", {})
    tenants.on_request_frame(ctx, _produce_frame(1))
    assert "trafka.proxy.tenants:throttle" not in ctx.notes


def test_every_problem_of_the_quota_settings_is_named() -> None:
    with pytest.raises(ConfigError) as refused:
        Tenants().configure(
            {
                "tenants": [
                    {"name": "a", "prefix": "a.", "principals": ["User:a"],
                     "producer_byte_rate": 0, "consumer_byte_rate": "fast"},
                    {"name": "b", "prefix": "b.", "principals": ["User:b"],
                     "producer_byte_rate": True, "consumer_byte_rate": -5.5},
                    {"name": "c", "prefix": "c.", "principals": ["User:c"],
                     "request_percentage": 0, "request_rate": 10},
                ],
                "quota_window_num": 0,
                "quota.window.size.seconds": 1,
                "quota_window_size_seconds": 1.5,
            }
        )  # fmt: skip
    problems = refused.value.problems
    for expected in (
        "tenants[0]: producer_byte_rate 0 must be a positive number",
        "tenants[0]: consumer_byte_rate 'fast' must be a positive number",
        "tenants[1]: producer_byte_rate True must be a positive number",
        "tenants[1]: consumer_byte_rate -5.5 must be a positive number",
        "tenants[2]: request_percentage 0 must be a positive number (percent of one thread)",
        "tenants[2]: unknown setting 'request_rate'",
        "quota_window_num: 0 is not a positive whole number",
        "quota_window_size_seconds and quota.window.size.seconds are the same setting",
    ):
        assert any(expected in p for p in problems), (expected, problems)
    # Kafka's dotted names are taken too; floats are rates.
    tenants = Tenants()
    tenants.configure(
        {
            "tenants": [{"name": "a", "prefix": "a.", "principals": ["User:a"],
                         "producer_byte_rate": 1.5e6}],
            "quota.window.num": 30,
            "quota.window.size.seconds": 2,
        }
    )  # fmt: skip
    assert tenants.quotas.windows == Windows(30, 2000)
    assert tenants.by_principal["User:a"].producer_byte_rate == 1.5e6


def test_quotas_alone_make_no_tenant_wait() -> None:
    """No muting state: the request is handed on as a body, not an awaitable
    (the unthrottled path costs a dictionary's truth test)."""
    tenants = TenantQuotas()
    ctx = _ctx(ApiKey.METADATA, 12, "User:alice", {})
    assert tenants.held(ctx) == 0.0


# -- request_percentage (Kafka's request quota, KIP-124) -------------------------------------

REQUEST_QUOTA = {
    "tenants": [
        {"name": "acme", "prefix": "acme.", "principals": ["User:alice"],
         "request_percentage": 10},
        {"name": "globex", "prefix": "globex.", "principals": ["User:bob"]},
    ],
    "quota_window_num": 2,
    "quota_window_size_seconds": 1,
}  # fmt: skip


def _metadata_round(tenants: Tenants, principal: str, state: dict[str, Any], ms: int) -> Any:
    """A Metadata request through the filter, the chain having spent ``ms`` on
    it by the time its answer reaches the filter: the answer the client gets."""
    from trafka.codec.messages import k03_metadata as md

    ctx = _ctx(ApiKey.METADATA, 12, principal, state)
    tenants.on_request(ctx, md.MetadataRequest(topics=None))
    ctx.handled_ns = ms * 1_000_000
    return tenants.on_response(ctx, md.MetadataResponse(throttle_time_ms=0, brokers=[], topics=[]))


def test_request_percentage_counts_the_proxys_handling_time_as_kafkas_request_quota() -> None:
    """Kafka's design docs ("Request Rate Quotas": the percentage of time a
    client may use a thread within a quota window; n% is n% of one thread)
    and its ClientRequestQuotaManager: a request's handling time is recorded
    as percent-seconds (nanos * 100 / 10^9) and the throttle time is the
    byte rates' formula, capped at one sample (quota.window.size.seconds).
    request_percentage 10, 2 samples of 1 s: 150 ms of handling is 15
    percent-seconds over the first burst's 1 s, 15% > 10%: (15 - 10) / 10 *
    1000 = 500 ms, told in the answer and the connection muted for it; 2 s
    more is capped at 1000 ms; a Fetch answer's frame tells it too; a tenant
    without the quota is counted, never throttled; the metrics show both."""
    clock = Clock()
    tenants = Tenants()
    tenants.quotas.clock, tenants.quotas.timer = clock, lambda: 0
    tenants.configure(REQUEST_QUOTA)
    state: dict[str, Any] = {}
    assert _metadata_round(tenants, "User:alice", state, 150).throttle_time_ms == 500
    assert tenants.quotas.held(_ctx(ApiKey.METADATA, 12, "User:alice", state)) == 0.5
    # Another connection of the tenant: the rate is the tenant's.
    assert _metadata_round(tenants, "User:alice", {}, 2000).throttle_time_ms == 1000
    fetch = _ctx(ApiKey.FETCH, 16, "User:alice", {})
    tenants.on_request(fetch, fm.FetchRequest(max_bytes=1 << 20, min_bytes=1, topics=[]))
    fetch.handled_ns = 1_000_000
    out = tenants.on_response_frame(fetch, _fetch_answer(10, throttle=0))
    assert protocol.decode_response(out, ApiKey.FETCH, 16)[1].throttle_time_ms == 1000
    assert MUTED in fetch.state
    # globex: counted, never throttled.
    other: dict[str, Any] = {}
    assert _metadata_round(tenants, "User:bob", other, 5000).throttle_time_ms == 0
    assert MUTED not in other
    stats = tenants.statistics()["tenant_quotas"]
    assert stats["handled_ns"] == {"acme": 2_151_000_000, "globex": 5_000_000_000}
    assert stats["throttled_ms"] == {("acme", "request"): 2500}
    families = {(s.family, s.labels): s.value for s in tenants.samples()}
    assert families[("trafka_proxy_tenant_request_time_seconds", (("tenant", "globex"),))] == 5
    throttled = (("tenant", "acme"), ("quota", "request"))
    assert families[("trafka_proxy_tenant_throttle_seconds", throttled)] == 2.5
    # Once the windows have passed with nothing handled, the tenant starts afresh.
    clock.now += 2
    assert _metadata_round(tenants, "User:alice", {}, 50).throttle_time_ms == 0


def test_the_filters_own_answer_work_is_handling_too() -> None:
    """The chain's time reaches the tenants filter before its own answer work
    (it is first on requests, last on answers): that work, timed by its own
    timer, is added. 120 ms of the chain's and 30 ms of its own: the 500 ms
    of 150 ms above."""
    clock = Clock()
    ticks = iter([0, 30_000_000])
    tenants = Tenants()
    tenants.quotas.clock, tenants.quotas.timer = clock, lambda: next(ticks)
    tenants.configure(REQUEST_QUOTA)
    assert _metadata_round(tenants, "User:alice", {}, 120).throttle_time_ms == 500
