"""Key routing's C fast path (trafka.codec.batch_split) against its pure-Python
reference: for random requests (several partitions and batches, keys null, empty
and long, headers, timestamps far apart, every codec, plain, idempotent and
transactional producers), the plain, single-connection and idempotent plans
built with the accelerator on and off are equal: the same parts, byte for byte,
the same routes and the same counters. Also: a keyed batch really takes the C
pass, and which requests are planned without a worker thread (cheap_to_plan).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proxy_helpers import request

from trafka.codec import _accel, batch_split
from trafka.codec.compression import Compression
from trafka.codec.records import encode_batch
from trafka.proxy.keyrouting import placement
from trafka.proxy.keyrouting import plan as routing
from trafka.proxy.keyrouting.idempotent_plan import prepare_idempotent
from trafka.proxy.keyrouting.plan import cheap_to_plan, plan_produce, route_produce
from trafka.proxy.keyrouting.sequences import Sequences
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.topics import Topics

C = _accel.speedups
pytestmark = pytest.mark.skipif(C is None, reason="the C accelerator is not built or is off")
SETTINGS = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PID, EPOCH = 42, 3
PARTITIONS = 6


@contextmanager
def accelerated(on: bool) -> Iterator[None]:
    saved = _accel.speedups
    _accel.speedups = C if on else None
    try:
        yield
    finally:
        _accel.speedups = saved


def cluster() -> Topics:
    return Topics({"orders": PARTITIONS}, {("orders", p): 1 + p % 3 for p in range(PARTITIONS)})


keys = (
    st.none()
    | st.just(b"")
    | st.binary(min_size=1, max_size=12)
    | st.integers(0, 40).map(lambda i: b"user-%d" % i)
    | st.integers(60, 300).map(lambda n: b"k" * n)
)
headers = st.lists(
    st.tuples(st.sampled_from(["a", "trace", "é"]), st.none() | st.binary(max_size=6)),
    max_size=2,
)


@st.composite
def batches(draw: Any, producer: bool) -> bytes:
    base = draw(st.integers(0, 2**42))
    n = draw(st.integers(1, 30))
    rows = [
        (
            base + draw(st.integers(-5000, 5000) | st.just(0)),
            draw(keys),
            draw(st.none() | st.binary(max_size=40)),
            draw(headers),
        )
        for _ in range(n)
    ]
    options: dict[str, Any] = {
        "compression": draw(st.sampled_from(list(Compression))),
        "timestamp_type": draw(st.sampled_from([0, 0, 1])),
    }
    if producer:
        options.update(
            producer_id=PID,
            producer_epoch=EPOCH,
            base_sequence=0,
            is_transactional=draw(st.booleans()),
        )
    return encode_batch(rows, **options)


@st.composite
def requests(draw: Any, producer: bool = False) -> Any:
    chosen = draw(st.lists(st.integers(0, PARTITIONS - 1), min_size=1, max_size=4, unique=True))
    return request(
        {p: [draw(batches(producer))] for p in chosen}, acks=draw(st.sampled_from([1, -1]))
    )


def both(fn: Any) -> tuple[Any, Any]:
    """``fn()`` with the accelerator on, then off."""
    out = []
    for on in (True, False):
        with accelerated(on):
            out.append(fn())
    return out[0], out[1]


@SETTINGS
@given(requests(), st.sampled_from(["murmur2", "crc32", "fnv1a"]))
def test_the_plain_plan_is_the_same_on_both_paths(body: Any, hash_name: str) -> None:
    def go() -> Any:
        stats = RouteStats()
        plan = plan_produce(body, topics=cluster(), hash_name=hash_name, stats=stats)
        return plan, stats

    fast, slow = both(go)
    assert fast == slow
    assert fast[0] is not None


@st.composite
def busy_requests(draw: Any) -> Any:
    """Several batches to a partition, empty partitions, as librdkafka sends."""
    chosen = draw(st.lists(st.integers(0, PARTITIONS - 2), min_size=1, max_size=5, unique=True))
    parts = {p: [draw(batches(False)) for _ in range(draw(st.integers(0, 3)))] for p in chosen}
    return request(parts, acks=1)


@contextmanager
def patched(module: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


@SETTINGS
@given(busy_requests(), st.booleans(), st.booleans())
def test_the_plain_plan_without_piece_objects_is_the_general_one(
    body: Any, small_cap: bool, unknown_leader: bool
) -> None:
    """The plain plan placed by one C call a topic against the same placed a
    batch at a time with the C pass and without it: the same parts byte for
    byte (rounds too, with merged batches capped at the largest batch), the
    same route and counts; a target without a known leader keeps its batch whole."""

    def go(at_once: bool) -> Any:
        topics = cluster()
        if unknown_leader:
            del topics.leaders[("orders", PARTITIONS - 1)]
        stats = RouteStats()
        cap = 0 if small_cap else placement._MIN_MERGE_BYTES
        with patched(placement, "_MIN_MERGE_BYTES", cap):
            if at_once:
                plan = plan_produce(body, topics=topics, hash_name="murmur2", stats=stats)
            else:
                with patched(batch_split, "placing", lambda *args: False):
                    plan = plan_produce(body, topics=topics, hash_name="murmur2", stats=stats)
        return plan, stats

    with accelerated(True):
        fast, general = go(True), go(False)
    with accelerated(False):
        reference = go(False)
    assert fast == general == reference
    assert fast[0] is not None


@SETTINGS
@given(requests(), requests(producer=True))
def test_a_request_with_a_producer_id_is_not_placed_as_a_plain_one(
    plain: Any, idempotent: Any
) -> None:
    """The coalescing path asks place_spans without checking each batch first
    (plain_request(batches=False)): a batch with a producer id declines it."""
    theirs = idempotent.topic_data[0].partition_data[0]
    mixed = dataclasses.replace(
        plain,
        topic_data=[
            dataclasses.replace(
                plain.topic_data[0],
                partition_data=[*plain.topic_data[0].partition_data, theirs],
            )
        ],
    )
    assert routing.place_spans(mixed, cluster(), "murmur2", 1 << 24) is None
    assert routing.place_spans(plain, cluster(), "murmur2", 1 << 24) is not None


@SETTINGS
@given(requests(), st.integers(1, 3))
def test_the_single_connection_plan_is_the_same_on_both_paths(body: Any, node: int) -> None:
    def go() -> Any:
        stats = RouteStats()
        routed = route_produce(
            body, node_id=node, topics=cluster(), hash_name="murmur2", stats=stats
        )
        return routed, stats

    fast, slow = both(go)
    assert fast == slow


@SETTINGS
@given(requests(producer=True))
def test_the_idempotent_plan_is_the_same_on_both_paths(body: Any) -> None:
    def go() -> Any:
        seqs = Sequences()
        seqs.born(PID, EPOCH)
        session = seqs.session(PID, EPOCH, 0)
        assert session is not None
        stats = RouteStats()
        prepared = prepare_idempotent(
            body, session=session, topics=cluster(), hash_name="murmur2", stats=stats
        )
        assert prepared is not None
        chunks = [(c.topic, c.partition, c.data, c.count, c.leads) for c in prepared.chunks]
        return chunks, prepared.refused, prepared.targets, stats

    fast, slow = both(go)
    assert fast == slow


def test_a_keyed_batch_takes_the_c_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A silent fall back to the reference would only show in benchmarks."""
    calls: list[str] = []

    class Spy:
        def __getattr__(self, name: str) -> Any:
            calls.append(name)
            return getattr(C, name)

    body = request({0: [encode_batch([(1, b"user-%d" % i, b"v", ()) for i in range(50)])]})
    with accelerated(True):
        monkeypatch.setattr(_accel, "speedups", Spy())
        plan = plan_produce(body, topics=cluster(), hash_name="murmur2", stats=RouteStats())
    assert plan is not None and len(plan.parts) == 3
    # The topic's batches are indexed and placed in one C call (placing() asks
    # first), the request's batches built in one.
    assert calls.count("place_sections") == 2 and "index_records" not in calls
    assert calls.count("build_batches") == 1 and "build_records" not in calls


def test_only_requests_the_c_pass_makes_cheap_are_planned_without_a_thread() -> None:
    def body(codec: Compression, n: int = 10, size: int = 10) -> Any:
        rows = [(1, b"k%d" % i, bytes(size), ()) for i in range(n)]
        return request({0: [encode_batch(rows, compression=codec)]})

    small, gzip = body(Compression.LZ4), body(Compression.GZIP)
    large = body(Compression.NONE, n=1100, size=1000)  # more than 1 MiB of records
    with accelerated(True):
        assert cheap_to_plan(small, hash_name="murmur2", origin_headers=False)
        assert cheap_to_plan(small, hash_name="fnv1a", origin_headers=False)
        assert not cheap_to_plan(small, hash_name="murmur2", origin_headers=True)
        assert not cheap_to_plan(gzip, hash_name="murmur2", origin_headers=False)
        assert not cheap_to_plan(large, hash_name="murmur2", origin_headers=False)
    with accelerated(False):
        assert not cheap_to_plan(small, hash_name="murmur2", origin_headers=False)
