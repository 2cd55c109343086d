"""The drop-in's per-record produce (trafka.sdk._hot_append's ``GroupedSend``)
against its Python reference (``compat.confluent._producer``'s ``produce`` over
``_Counts``), without a broker: a send that answers futures of given batches.

confluent-kafka's rules held here: ``len()`` counts a record from ``produce()``
until its delivery report is served (librdkafka's ``rd_kafka_outq_len``);
``queue.buffering.max.messages`` records awaiting theirs make ``produce()``
raise ``BufferError``; a record's report is served once, with its batch.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.compat.confluent._producer import _Counts
from trafka.sdk import hot_append

C = hot_append.accelerated
needs_c = pytest.mark.skipif(C is None, reason="the C extension is not built or is turned off")


class Batch:
    """A batch as the joins see it: an identity."""


class Sends:
    """A send that puts records into the batch the test says, and what the
    produce's other callables were asked."""

    def __init__(self) -> None:
        self.batch: Batch | None = Batch()
        self.firsts: list[Any] = []
        self.slow: list[tuple[Any, ...]] = []
        self.fail: Exception | None = None

    def send(self, topic: str, value: Any, key: Any) -> Any:
        if self.fail is not None:
            raise self.fail
        return hot_append.HandleBase(self.batch, 0)

    def first(self, future: Any, group: list[Any]) -> None:
        self.firsts.append((future.batch, group))

    def slow_produce(self, *args: Any, **kwargs: Any) -> str:
        self.slow.append((args, kwargs))
        return "slow"


class Failed(Exception):
    pass


def _grouped(sends: Sends, groups: dict[Any, Any], report: Any = None, max_: int = 0) -> Any:
    counts: Any = None

    def failed(exc: Exception) -> None:
        counts.unreserve()
        raise Failed(str(exc)) from None

    counts = C.GroupedSend(
        sends.send, groups, sends.first, sends.slow_produce, failed, report, max_
    )
    return counts


@needs_c
def test_records_are_counted_until_their_group_is_served() -> None:
    sends = Sends()
    groups: dict[Any, Any] = {}
    counts = _grouped(sends, groups)
    first_batch = sends.batch
    for _ in range(3):
        assert counts.produce("t", b"v") is None
    sends.batch = Batch()
    counts.produce("t", b"w", b"k")
    assert counts.produced == 3 + 1 and counts.served == 0
    # One group per batch, handed over once (by its first record), no report kept.
    assert [(b, g[1], g[2]) for b, g in sends.firsts] == [
        (first_batch, 3, []),
        (sends.batch, 1, []),
    ]
    assert set(groups) == {first_batch, sends.batch}
    # A record whose batch is not known (queued for the loop) is a group of its own.
    sends.batch = None
    counts.produce("t", b"x")
    counts.produce("t", b"y")
    assert [g[1] for b, g in sends.firsts if b is None] == [1, 1]
    assert None not in groups


@needs_c
def test_a_report_keeps_what_it_needs_and_only_for_records_with_one() -> None:
    sends = Sends()
    cb, default = object(), object()
    counts = _grouped(sends, {}, report=default)
    counts.produce("t", b"v")  # the configuration's report
    counts.produce("t", b"w", None, -1, cb)  # on_delivery
    counts.produce("t", value=b"x", callback=cb)  # callback, by name
    (_, group), *_ = sends.firsts
    assert [(e[1], e[2], e[3], e[4], e[5], e[6]) for e in group[2]] == [
        (default, "t", -1, None, b"v", None),
        (cb, "t", -1, None, b"w", None),
        (cb, "t", -1, None, b"x", None),
    ]
    no_report = _grouped(Sends(), {})
    no_report.produce("t", b"v", on_delivery=None)
    assert no_report.produced == 1


@needs_c
def test_the_python_produce_takes_every_other_call() -> None:
    sends = Sends()
    counts = _grouped(sends, {}, max_=2)
    for args, kwargs in [
        (("t", b"v", b"k", 3), {}),  # a partition
        (("t", b"v"), {"timestamp": 5}),
        (("t", b"v"), {"headers": [("h", b"1")]}),
        (("t", "text"), {}),  # str: the Python produce encodes it
        (("t", b"v"), {"key": bytearray(b"k")}),
        (("t", b"v"), {"unknown": 1}),
    ]:
        assert counts.produce(*args, **kwargs) == "slow"
        assert sends.slow[-1] == (args, kwargs)
    assert counts.produced == 0
    counts.produce("t", b"v")
    counts.produce("t", b"v", None, -1, None, 0, None, None)
    assert counts.produced == 2
    # The bound: queue.buffering.max.messages awaiting their report.
    assert counts.produce("t", b"v") == "slow" and counts.produced == 2
    assert not counts.reserve()
    counts.served += 1
    assert counts.reserve() and counts.produced == 3
    counts.unreserve()
    assert counts.produced == 2


@needs_c
def test_a_refused_send_is_not_counted() -> None:
    sends = Sends()
    counts = _grouped(sends, {})
    sends.fail = ValueError("refused")
    with pytest.raises(Failed, match="refused"):
        counts.produce("t", b"v")
    assert counts.produced == 0 and sends.firsts == []


@needs_c
@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=60))
def test_join_is_the_python_references(steps: list[tuple[int, bool]]) -> None:
    batches: list[Batch | None] = [Batch(), Batch(), Batch(), None]
    fast_groups: dict[Any, Any] = {}
    ref_groups: dict[Any, Any] = {}
    fast = _grouped(Sends(), fast_groups)
    ref = _Counts(ref_groups, 0)
    for i, (which, with_report) in enumerate(steps):
        future = hot_append.HandleBase(batches[which], i)
        entry = (future, "report", i) if with_report else None
        a, b = fast.join(future, entry), ref.join(future, entry)
        assert (a is None) == (b is None)
        if a is not None:
            assert a[1:] == b[1:] and a[0] is b[0]
    assert {k: v[1:] for k, v in fast_groups.items()} == {k: v[1:] for k, v in ref_groups.items()}
