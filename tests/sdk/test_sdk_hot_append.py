"""The producer's per-record path (trafka.sdk.hot_append): the C appender
against its Python reference.

Two producer cores, one appending through the C ``Appender`` and one through
``PyAppender``, are driven by the same records, as a driver drives them: the
hot path first, the general path (``open_batch``, or ``prepare`` and
``append_at`` for records with headers, a timestamp or a partition) when it
says so, and the sender's drains and acknowledgements in between. Every answer
must be the same (the batch's place, True, False), and so must every batch,
byte for byte as the accumulator encodes it, over partitioners (each key hash,
sticky and random key-less records), compression, idempotence, transactional
batches and the record bounds of librdkafka's settings.
"""

from __future__ import annotations

import contextlib
import random
import time
import types
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sdk_metadata import one_topic_cache

import trafka.sdk.producer_core as producer_core
from trafka.sdk import hot_append
from trafka.sdk.accumulator import ProducerBatch
from trafka.sdk.config import ProducerConfig, make_config
from trafka.sdk.hot_append import PyAppender
from trafka.sdk.partitioners import crc32_partition, fnv1a_partition, murmur2_partition
from trafka.sdk.producer_core import ProducerCore

C = hot_append.accelerated
needs_c = pytest.mark.skipif(C is None, reason="the C extension is not built or is turned off")

PARTITIONS = 4
WALL_MS = 1_700_000_000_123
KEYS = [None, b"", b"a", b"key-1", b"key-2", b"another key", bytes(range(40))]


class Clock:
    """The wall clock both cores read (records' timestamps), moved by the test."""

    def __init__(self) -> None:
        self.ms = WALL_MS

    def wall_ms(self) -> int:
        return self.ms

    def time(self) -> float:
        return self.ms / 1000


def _core(appender: type, clock: Clock, seed: int, settings_: dict[str, Any]) -> ProducerCore:
    config = make_config(ProducerConfig, None, {"bootstrap_servers": "h:1", **settings_})

    def make(*args: Any, **kwargs: Any) -> Any:
        return appender(*args, **kwargs, wall_ms=clock.wall_ms)

    real = producer_core.Appender
    producer_core.Appender = make  # type: ignore[assignment,misc]
    try:
        core = ProducerCore(config, one_topic_cache("t", PARTITIONS), lambda: 0.0)
    finally:
        producer_core.Appender = real  # type: ignore[misc]
    # The same random choices (sticky and random partitions, the drain's start),
    # and the partitioner on a clock of its own, so that the appenders keep no
    # timed partition (test_a_timed_sticky_partition_is_kept_until_due has that).
    core._partitioner._rng = random.Random(seed)
    core._partitioner._clock = lambda: 0.0
    core.acc._rng = random.Random(seed)
    if core.acc.idempotent:
        core.acc.producer_id, core.acc.producer_epoch = 4242, 7
    return core


@contextlib.contextmanager
def wall_clock() -> Iterator[Clock]:
    """A clock of the test's for the records' timestamps, the general path's too
    (it stamps records with time.time(): open_batch, send_prepared)."""
    clock = Clock()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(producer_core, "time", types.SimpleNamespace(time=clock.time))
        yield clock


def _place(answer: Any) -> Any:
    """An answer as comparable across the two cores: a batch by its place."""
    if isinstance(answer, ProducerBatch):
        return ("batch", answer.partition, answer.seq, len(answer.records))
    if hasattr(answer, "batch"):  # a record handle
        return ("handle", answer.batch.partition, answer.batch.seq, answer.index)
    return answer


def _send(core: ProducerCore, op: tuple[Any, ...], clock: Clock) -> list[Any]:
    """One record into ``core`` as a driver sends it; what each step answered."""
    hot, key, size, partition, headers, ts = op
    value = bytes([size % 251]) * size
    said: list[Any] = []
    if hot:
        got = core.append_hot("t", value, key)
        said.append(_place(got))
        if got is True:
            placed = core.open_batch("t", value, key, now=0.0)
            said.append(None if placed is None else _place(placed[0]))
            if placed is not None:
                return said
        elif got is not False:
            return said
        partition = headers = ts = None
    record = core.prepare("t", value, key, partition, headers, ts)
    topic, value_bytes, key_bytes, part, hdrs, stamp = record
    info = core.metadata.topics[topic]
    p, sticky = core.pick(topic, key_bytes, PARTITIONS, info, part)
    handle, _ = core.append_at(
        topic,
        p,
        sticky,
        PARTITIONS,
        stamp if stamp is not None else clock.wall_ms(),
        key_bytes,
        value_bytes,
        hdrs,
        part is None and core.hot_path,
        0.0,
    )
    said.append(_place(handle))
    return said


def _drain(core: ProducerCore) -> list[tuple[int, bytes]]:
    """The sender's turn: every sendable batch encoded and acknowledged."""
    out = []
    while True:
        batches = core.acc.drain(1.0, 1, lambda t, p: 1)
        if not batches:
            return out
        for b in batches:
            assert b.encoded is not None
            out.append((b.partition, b.encoded))
            core.acc.complete(b, 100, now=1.0)


def _state(core: ProducerCore) -> Any:
    acc = core.acc
    return (
        acc.used_memory,
        sorted(
            (b.partition, b.seq, b.size, b.memory, b.full, b.done, b.limit, list(b.records))
            for b in acc.incomplete_batches()
        ),
    )


ops = st.lists(
    st.tuples(
        st.booleans() | st.just(True),  # the hot path first (most records), or the general one
        st.sampled_from(KEYS),
        st.integers(0, 300),  # value bytes
        st.none() | st.integers(0, PARTITIONS - 1),  # a partition (general path only)
        st.none() | st.lists(st.tuples(st.sampled_from(["h", "trace"]), st.binary(max_size=8))),
        st.none() | st.integers(0, 2**41),  # a timestamp (general path only)
    ),
    max_size=120,
)

producer_settings = st.fixed_dictionaries(
    {
        "partitioner": st.sampled_from(
            [
                "murmur2",
                "murmur2_random",
                "consistent_random",
                "consistent",
                "crc32",
                "fnv1a",
                "fnv1a_random",
                "random",
            ]
        ),
        "compression_type": st.sampled_from(["none", "gzip", "lz4", "zstd", "snappy"]),
        "batch_size": st.integers(100, 3000),
        "enable_idempotence": st.booleans(),
    },
    optional={
        "batch_num_messages": st.integers(1, 20),
        "queue_buffering_max_messages": st.just(100_000),
        "sticky_partitioning_linger_ms": st.sampled_from([0, 10]),
    },
)


@needs_c
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    settings_=producer_settings,
    records=ops,
    transactional=st.booleans(),
    seed=st.integers(0, 2**32),
    drain_every=st.integers(1, 40),
)
def test_the_c_appender_answers_and_batches_as_the_python_reference(
    settings_: dict[str, Any],
    records: list[tuple[Any, ...]],
    transactional: bool,
    seed: int,
    drain_every: int,
) -> None:
    with wall_clock() as wall:
        _compare(wall, settings_, records, transactional, seed, drain_every)


def _compare(
    wall: Clock,
    settings_: dict[str, Any],
    records: list[tuple[Any, ...]],
    transactional: bool,
    seed: int,
    drain_every: int,
) -> None:
    fast = _core(C.Appender, wall, seed, settings_)
    ref = _core(PyAppender, wall, seed, settings_)
    assert type(fast.appender) is C.Appender and type(ref.appender) is PyAppender
    for core in (fast, ref):
        # A transactional producer's batches carry the flag once sequenced.
        core.acc.transactional = transactional and core.acc.idempotent
    sent_fast: list[tuple[int, bytes]] = []
    sent_ref: list[tuple[int, bytes]] = []
    for i, op in enumerate(records):
        wall.ms += i % 3  # records a millisecond or two apart
        assert _send(fast, op, wall) == _send(ref, op, wall), op
        assert _state(fast) == _state(ref)
        if i % drain_every == drain_every - 1:
            sent_fast += _drain(fast)
            sent_ref += _drain(ref)
    sent_fast += _drain(fast)
    sent_ref += _drain(ref)
    assert sent_fast == sent_ref
    assert fast.acc.used_memory == ref.acc.used_memory == 0


def _one_batch_core(appender: type, **settings_: Any) -> ProducerCore:
    clock = Clock()
    core = _core(appender, clock, 1, settings_)
    assert core.append_hot("t", b"v", None) is True
    assert core.open_batch("t", b"v", None, now=0.0) is not None
    return core


@needs_c
@pytest.mark.parametrize("appender", [PyAppender, "C"])
def test_try_send_and_take_answer_a_handle_at_the_records_place(appender: Any) -> None:
    appender = C.Appender if appender == "C" else appender
    core = _one_batch_core(appender, linger_ms=1000)
    a = core.appender
    batch = core._sticky_batches["t"]
    handle = a.try_send("t", b"w")
    assert type(handle) is producer_core.RecordHandle
    assert (handle.batch, handle.index) == (batch, 1)
    handle = a.try_send(topic="t", value=b"x", key=None)
    assert (handle.batch, handle.index) == (batch, 2)
    taken = a.take("t", b"y", None)
    assert (taken.batch, taken.index) == (batch, 3)
    assert [r[2] for r in batch.records] == [b"v", b"w", b"x", b"y"]
    a.enabled = False
    assert a.try_send("t", b"z") is None
    assert a.take("t", b"z", None).index == 4  # take() is every front's; enabled is try_send's
    assert a.take("t", "not bytes", None) is False
    a.open = False
    assert a.take("t", b"z", None) is False


@needs_c
@pytest.mark.parametrize("appender", [PyAppender, "C"])
def test_limit_reached_is_called_once_the_batch_reaches_its_limit(appender: Any) -> None:
    appender = C.Appender if appender == "C" else appender
    calls: list[tuple[Any, int]] = []
    clock = Clock()
    config = make_config(ProducerConfig, None, {"bootstrap_servers": "h:1"})
    core = ProducerCore(config, one_topic_cache("t", PARTITIONS), lambda: 0.0)
    a = appender(
        core.acc,
        core._sticky_batches,
        core._keyed_batches,
        core._hot_pick,
        producer_core.RecordHandle,
        12,
        112,
        hot_append.KEYS_MURMUR2,
        True,
        lambda batch, size: calls.append((batch, size)),
        clock.wall_ms,
    )
    assert core.append_hot("t", b"v", None) is True
    assert core.open_batch("t", b"v", None, now=0.0) is not None
    batch = core._sticky_batches["t"]
    a.try_send("t", b"w")
    assert calls == []
    batch.limit = batch.size + 1  # as the async driver arms a poll
    a.try_send("t", b"x")
    assert calls == [(batch, batch.size)]
    assert batch.records[-1] == (WALL_MS, None, b"x", ())


@needs_c
@pytest.mark.parametrize("appender", [PyAppender, "C"])
def test_keyed_records_go_to_the_batch_of_their_hash(appender: Any) -> None:
    appender = C.Appender if appender == "C" else appender
    for name, hashed in [
        ("murmur2", murmur2_partition),
        ("consistent_random", crc32_partition),
        ("fnv1a", fnv1a_partition),
    ]:
        core = _core(appender, Clock(), 1, {"partitioner": name})
        for key in [b"a", b"key-1", b"key-2", bytes(range(40))]:
            got = core.append_hot("t", b"v", key)
            if got is True:
                placed = core.open_batch("t", b"v", key, now=0.0)
                assert placed is not None
                got = placed[0].batch
            assert got.partition == hashed(key, PARTITIONS), (name, key)
            assert core.append_hot("t", b"w", key) is got


@needs_c
@pytest.mark.parametrize("appender", [PyAppender, "C"])
def test_a_timed_sticky_partition_is_kept_until_due_or_the_metadata_changes(
    appender: Any,
) -> None:
    # librdkafka's sticky.partitioning.linger.ms: key-less records stick to the
    # partition drawn, and the per-record path keeps it (asking the partitioner
    # once) until the linger has passed or the metadata changed, when the
    # partitioner would check the partition's availability again.
    appender = C.Appender if appender == "C" else appender
    config = make_config(
        ProducerConfig,
        None,
        {
            "bootstrap_servers": "h:1",
            "partitioner": "consistent_random",
            "sticky_partitioning_linger_ms": 60_000,
        },
    )
    metadata = one_topic_cache("t", PARTITIONS)
    picks = []

    class Counted(ProducerCore):
        def _hot_pick(self, topic: str, key: Any, n: int) -> Any:
            picks.append(key)
            return super()._hot_pick(topic, key, n)

    real = producer_core.Appender
    producer_core.Appender = appender  # type: ignore[misc]
    try:
        core = Counted(config, metadata, lambda: 0.0)
    finally:
        producer_core.Appender = real  # type: ignore[misc]
    assert type(core.appender) is appender
    for p in range(PARTITIONS):  # a batch open on every partition
        core._keyed_batches.setdefault("t", [None] * PARTITIONS)
        handle, _ = core.append_at("t", p, False, PARTITIONS, WALL_MS, b"k", b"v", (), False)
        core._keyed_batches["t"][p] = handle.batch
    first = core.appender.append("t", b"v", None)
    assert isinstance(first, ProducerBatch) and len(picks) == 1
    assert core._timed_partitions["t"][0] == first.partition
    for key in (None, b"", None):
        assert core.appender.append("t", b"v", key) is first
    assert len(picks) == 1
    metadata.update_listeners[-1]()  # what every metadata update calls
    assert core._timed_partitions == {}
    assert isinstance(core.appender.append("t", b"v", None), ProducerBatch)
    assert len(picks) == 2
    # A pick that is due is asked again.
    core._timed_partitions["t"] = (first.partition, time.monotonic() - 1)
    core.appender.append("t", b"v", None)
    assert len(picks) == 3


def test_the_fallback_bases_have_the_c_bases_fields() -> None:
    names = {"BatchBase", "HandleBase", "AccumulatorBase"}
    for name in names:
        py = getattr(hot_append, f"_Py{name}")
        slots = vars(py).get("__slots__")
        fields = set(slots) if slots else set(vars(py)["__annotations__"])
        if C is not None:
            c_fields = {
                k
                for k, v in vars(getattr(C, name)).items()
                if type(v).__name__ == "member_descriptor"
            }
            assert fields == c_fields, name
