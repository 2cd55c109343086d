"""The idempotent plan's new batches placed by one C call per topic
(``placement.place_topic``'s fast path, no Python object per piece) against
the same placed a batch at a time, with the accelerator on and off: over random runs of
requests of one producer (two topics, one perhaps named twice, retries, batches
out of order, upstream batches acknowledged or failed and written again,
merged batches capped small, a target without a known leader), what is
written upstream (every round's batches, numbered, byte for byte), what is
waited for, what the journal would record, what the client is answered (its
answer's bytes) and the counters are the same.
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

from trafka.codec import _accel, batch_split, records
from trafka.codec.compression import Compression
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.legacy import encode_message_set
from trafka.codec.records import encode_batch
from trafka.proxy.keyrouting import journal_pipeline, placement
from trafka.proxy.keyrouting.idempotent_plan import (
    commit_idempotent,
    idempotent_answer_bytes,
    idempotent_producer,
    prepare_idempotent,
    read_batches,
)
from trafka.proxy.keyrouting.sequences import Placement, Sequences
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.topics import Topics

C = _accel.speedups
pytestmark = pytest.mark.skipif(C is None, reason="the C accelerator is not built or is off")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PID, EPOCH = 42, 3
TOPICS = {"orders": 6, "audit": 3}

keys = (
    st.none()
    | st.just(b"")
    | st.integers(0, 40).map(lambda i: b"user-%d" % i)
    | st.integers(60, 300).map(lambda n: b"k" * n)
)


@contextmanager
def patched(module: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(module, name)
    setattr(module, name, value)
    try:
        yield
    finally:
        setattr(module, name, saved)


def cluster(unknown_leader: bool) -> Topics:
    leaders = {(t, p): 1 + p % 3 for t, n in TOPICS.items() for p in range(n)}
    if unknown_leader:
        del leaders[("orders", 5)]
    return Topics(dict(TOPICS), leaders)


@st.composite
def client_batch(draw: Any, base_sequence: int, transactional: bool) -> bytes:
    n = draw(st.integers(1, 25))
    rows = [
        (
            1_700_000_000_000 + draw(st.integers(0, 5000)),
            draw(keys),
            draw(st.binary(max_size=30)),
            [],
        )
        for _ in range(n)
    ]
    return encode_batch(
        rows,
        compression=draw(st.sampled_from(list(Compression))),
        producer_id=PID,
        producer_epoch=EPOCH,
        base_sequence=base_sequence,
        is_transactional=transactional,
    )


@st.composite
def runs(draw: Any) -> list[tuple[Any, list[bool]]]:
    """Requests of one producer, each with whether its upstream batches (in the
    order written) are acknowledged (else they fail, to be written again)."""
    transactional = draw(st.booleans())
    sent: dict[tuple[str, int], tuple[int, bytes]] = {}  # the last batch of each partition
    nxt: dict[tuple[str, int], int] = {}
    out = []
    for _ in range(draw(st.integers(1, 4))):
        topic_data = []
        names = draw(st.lists(st.sampled_from(sorted(TOPICS)), min_size=1, max_size=3))
        used: set[tuple[str, int]] = set()
        for name in names:
            chosen = draw(
                st.lists(st.integers(0, TOPICS[name] - 1), min_size=1, max_size=4, unique=True)
            )
            parts: dict[int, list[bytes]] = {}
            for p in chosen:
                key = (name, p)
                if key in used:
                    continue
                used.add(key)
                how = draw(st.sampled_from(["new", "new", "new", "retry", "gap"]))
                if how == "retry" and key in sent:
                    parts[p] = [sent[key][1]]
                    continue
                base = nxt.get(key, 0) + (draw(st.integers(1, 5)) if how == "gap" else 0)
                data = draw(client_batch(base, transactional))
                if how != "gap":
                    count = int.from_bytes(data[57:61], "big")
                    nxt[key] = base + count
                    sent[key] = (base, data)
                parts[p] = [data]
            if parts:
                topic_data.append(request(parts, topic=name).topic_data[0])
        if not topic_data:
            continue
        body = dataclasses.replace(request({}), topic_data=topic_data)
        out.append((body, draw(st.lists(st.booleans(), min_size=40, max_size=40))))
    return out


def replay(
    steps: list[tuple[Any, list[bool]]],
    topics: Topics,
    recovered: Any = None,
    leader_last: dict[tuple[str, int], int] | None = None,
) -> list[Any]:
    """Everything observable of planning, writing and answering ``steps``, for a
    producer born through the proxy (else one whose partitions' leaders said
    ``leader_last``, as after a restart)."""
    seqs = Sequences(journaled=True)
    if leader_last is None:
        seqs.born(PID, EPOCH)
    session = seqs.session(PID, EPOCH, 0)
    assert session is not None
    for (topic, partition), last in (leader_last or {}).items():
        Sequences.synced(session, topic, partition, last, EPOCH)
    stats = RouteStats()
    seen: list[Any] = []
    offset = 1000
    for body, acked in steps:
        # As the filter runs it: the batch headers read once, for both.
        headers = read_batches(body)
        assert headers == (idempotent_producer(body), one_batch_each(body))
        prepared = prepare_idempotent(
            body,
            session=session,
            topics=topics,
            hash_name="murmur2",
            stats=stats,
            recovered=recovered,
            headers=headers,
        )
        assert prepared is not None
        seen.append(
            (
                [(c.topic, c.partition, c.data, c.count, c.leads) for c in prepared.chunks],
                sorted(prepared.refused.items()),
                sorted(prepared.targets),
                sorted(prepared.stale),
            )
        )
        plan = commit_idempotent(body, prepared, session)
        linked(prepared, session)
        seen.append(
            [[(u.topic, u.partition, u.base_sequence, u.data) for u in r] for r in plan.rounds]
        )
        seen.append([(u.topic, u.partition, u.base_sequence, u.count) for u in plan.waits])
        seen.append(
            sorted(
                (b.topic, b.partition, b.base_sequence, b.placement())
                for b in session.take_journal()
            )
        )
        i = 0
        for batches in plan.rounds:
            for u in batches:
                session.sent(u, 0)
                if acked[i % len(acked)]:
                    session.settle(u, ErrorCode.NONE, base_offset=offset)
                    offset += u.count
                else:
                    session.settle(u, ErrorCode.REQUEST_TIMED_OUT)
                i += 1
        walked_once(plan)
        seen.append(idempotent_answer_bytes(plan, None, 9, "librdkafka"))
        seen.append(idempotent_answer_bytes(plan, None, 9, "apache-kafka-java"))
    seen.append(stats)
    return seen


def linked(prepared: Any, session: Any) -> None:
    """Each placed client batch holds the upstream batches holding its records,
    in the order numbered (client batches placed alike share the tuple)."""
    for split, _ in prepared.new:
        batch = session.known(split.topic, split.partition, split.header.base_sequence)
        expected = [
            (c.topic, c.partition, c.count)
            for c in prepared.chunks
            if any(s is split for s in c.splits)
        ]
        taken = len(prepared.written.get(id(split), []))
        assert [(u.topic, u.partition, u.count) for u in batch.upstream[taken:]] == expected


def walked_once(plan: Any) -> None:
    """What shared upstream batches came to, walked once for an answer (or a
    journal write), is what each client batch's own walk finds."""
    walked: dict[int, Any] = {}
    targets: dict[int, Any] = {}
    for _, entries in plan.answers:
        for _, entry in entries:
            if not isinstance(entry, ErrorCode):
                assert entry.own_outcome(walked) == entry.own_outcome()
                assert entry.placement(targets) == entry.placement()


def one_batch_each(body: Any) -> list[list[Any]] | None:
    """The reference of :func:`read_batches`'s ``batches``: per topic of the
    request, per partition its one magic 2 batch (header, bytes); None unless
    every partition holds exactly one."""
    out = []
    for t in body.topic_data:
        found = []
        for p in t.partition_data:
            batches = records.batches_of(p.records)
            if len(batches) != 1 or not isinstance(batches[0][0], records.RecordBatchHeader):
                return None
            found.append(batches[0])
        out.append(found)
    return out


def three_ways(steps: Any, topics: Any, small_cap: bool, *args: Any) -> list[Any]:
    """``replay`` placed by the C call a topic, a batch at a time with the
    accelerator on, and without it."""
    out = []
    cap = 0 if small_cap else placement._MIN_MERGE_BYTES
    with patched(placement, "_MIN_MERGE_BYTES", cap):
        out.append(replay(steps, topics, *args))
        with patched(batch_split, "placing", lambda *args: False):
            out.append(replay(steps, topics, *args))
        saved = _accel.speedups
        _accel.speedups = None
        try:
            out.append(replay(steps, topics, *args))
        finally:
            _accel.speedups = saved
    return out


@SETTINGS
@given(runs(), st.booleans(), st.booleans())
def test_the_idempotent_plan_placed_by_one_c_call_is_the_reference(
    steps: Any, small_cap: bool, unknown_leader: bool
) -> None:
    placed, reference, python = three_ways(steps, cluster(unknown_leader), small_cap)
    assert placed == reference == python


def test_a_keyed_idempotent_request_takes_the_one_call(monkeypatch: pytest.MonkeyPatch) -> None:
    """The C placing runs (one call per topic), and a batch whose records move is
    built once, numbered and answered as the reference does."""
    calls = []
    real = batch_split.place_sections

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(batch_split, "place_sections", counting)
    rows = [(1_700_000_000_000, b"user-%d" % i, b"v", []) for i in range(30)]
    data = encode_batch(rows, producer_id=PID, producer_epoch=EPOCH, base_sequence=0)
    steps = [(request({0: [data]}), [True] * 40)]
    placed, reference, python = three_ways(steps, cluster(False), False)
    assert placed == reference == python
    assert len(calls) == 1
    stats = placed[-1]
    assert stats.batches_rebuilt == 1 and stats.requests_idempotent == 1
    assert len(placed[0][0]) > 1  # spread over several partitions


def test_a_batch_the_journal_placed_before_a_restart_is_written_only_in_part() -> None:
    """A retried batch the session does not know but the journal does: placed
    (by the C call), the pieces its targets' leaders have are taken out and
    the rest written, as a batch at a time and without the accelerator."""
    rows = [(1_700_000_000_000, b"user-%d" % i, b"v", []) for i in range(20)]
    data = encode_batch(rows, producer_id=PID, producer_epoch=EPOCH, base_sequence=0)
    body = request({0: [data]})
    topics = cluster(False)
    before = replay([(body, [True] * 40)], topics)
    chunks = before[0][0]  # (topic, partition, data, count, leads), numbered from 0
    assert len(chunks) > 1
    journaled = Placement(20, tuple(sorted((c[1], c[3] - 1) for c in chunks)))
    # The leader of the first target has its batch; the others' do not.
    leader_last = {("orders", c[1]): (c[3] - 1 if i == 0 else -1) for i, c in enumerate(chunks)}

    def recovered(topic: str, partition: int, base: int) -> Placement | None:
        return journaled if (topic, partition, base) == ("orders", 0, 0) else None

    placed, reference, python = three_ways(
        [(body, [True] * 40)], topics, False, recovered, leader_last
    )
    assert placed == reference == python
    stats = placed[-1]
    assert stats.batches_recovered == 1 and stats.records_not_rewritten == chunks[0][3]
    assert len(placed[0][0]) == len(chunks) - 1  # the written one is not written again


def test_a_batch_with_a_target_without_leader_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A moved record's target without a known leader refuses its batch: the C
    call declines the topic (adding nothing), and placed a batch at a time the
    batch is left out and refused."""
    rows = [(1_700_000_000_000, b"user-%d" % i, b"v", []) for i in range(30)]
    data = encode_batch(rows, producer_id=PID, producer_epoch=EPOCH, base_sequence=0)
    body = request({0: [data]})
    topics = cluster(True)  # orders-5 has no known leader
    calls = []
    real = batch_split.place_sections

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(real(*args, **kwargs))
        return calls[-1]

    monkeypatch.setattr(batch_split, "place_sections", counting)
    placed, reference, python = three_ways([(body, [True] * 40)], topics, False)
    assert calls == [None]
    assert placed == reference == python
    assert placed[0][1] == [(("orders", 0), ErrorCode.NOT_LEADER_OR_FOLLOWER)]
    assert placed[0][0] == []  # nothing written


def test_upstream_batches_are_built_at_the_sequence_they_are_numbered_at() -> None:
    """Each upstream batch is built (and checksummed) at its final sequence:
    numbering keeps its bytes. When an answer changed the next sequence between
    placing and numbering (an earlier batch refused for good), numbering
    rewrites it, as the reference's batches built at 0 are."""
    rows = [(1_700_000_000_000, b"user-%d" % i, b"v", []) for i in range(30)]
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session = seqs.session(PID, EPOCH, 0)
    assert session is not None
    topics = cluster(False)

    def prepared_at(base: int) -> Any:
        data = encode_batch(rows, producer_id=PID, producer_epoch=EPOCH, base_sequence=base)
        body = request({0: [data]})
        prepared = prepare_idempotent(
            body, session=session, topics=topics, hash_name="murmur2", stats=RouteStats()
        )
        assert prepared is not None and len(prepared.chunks) > 1
        return body, prepared

    body, first = prepared_at(0)
    plan = commit_idempotent(body, first, session)
    written = {u.partition: u for r in plan.rounds for u in r}
    for chunk in first.chunks:
        u = written[chunk.partition]
        assert chunk.sequence == u.base_sequence == 0
        assert u.data is chunk.data  # numbered as built: not checksummed again
        session.sent(u, 0)
    body, second = prepared_at(30)
    # One of the first request's batches is refused for good before the second
    # is numbered: its numbers go to the second's batch of that partition.
    dead = written[second.chunks[0].partition]
    session.settle(dead, ErrorCode.INVALID_RECORD, retriable=False)
    plan = commit_idempotent(body, second, session)
    again = {u.partition: u for r in plan.rounds for u in r}
    for chunk in second.chunks:
        u = again[chunk.partition]
        if chunk.partition == dead.partition:
            assert (chunk.sequence, u.base_sequence) == (dead.count, 0)
            assert u.data != chunk.data
            assert u.data == records.set_base_sequence(chunk.data, 0)
        else:
            assert u.base_sequence == chunk.sequence == written[chunk.partition].count
            assert u.data is chunk.data


def test_client_batches_spread_over_every_target_share_their_upstream_batches() -> None:
    """Keyed batches spread over every partition: one tuple of upstream batches
    (a request x target partition each) for all the request's client batches,
    journaled once per upstream batch, answered as the reference does."""
    parts = {
        p: [
            encode_batch(
                [(1_700_000_000_000, b"user-%d" % (i * 7 + p), b"v", []) for i in range(40)],
                producer_id=PID,
                producer_epoch=EPOCH,
                base_sequence=0,
            )
        ]
        for p in range(TOPICS["orders"])
    }
    body = request(parts)
    topics = cluster(False)
    seqs = Sequences(journaled=True)
    seqs.born(PID, EPOCH)
    session = seqs.session(PID, EPOCH, 0)
    assert session is not None
    prepared = prepare_idempotent(
        body, session=session, topics=topics, hash_name="murmur2", stats=RouteStats()
    )
    assert prepared is not None
    commit_idempotent(body, prepared, session)
    batches = session.take_journal()
    assert len(batches) == TOPICS["orders"]
    assert len({id(b.upstream) for b in batches}) == 1
    assert len(batches[0].upstream) == TOPICS["orders"]
    assert len(journal_pipeline._bases(batches)) == TOPICS["orders"]
    entries = list(journal_pipeline._entries(session, batches))
    assert [p for _, p in entries] == [b.placement() for b in batches]
    placed, reference, python = three_ways([(body, [True, False] * 20)], topics, False)
    assert placed == reference == python


@st.composite
def any_records(draw: Any) -> bytes | None:
    """A partition's records as a client may send them: none, one or several
    magic 2 batches (of this producer or another, none, a control batch), a
    legacy message set, or damaged."""
    rows = [(1_700_000_000_000, b"k", b"v", [])]
    blobs = []
    for _ in range(draw(st.integers(0, 3))):
        kind = draw(
            st.sampled_from(["ours", "ours", "ours", "other", "plain", "control", "legacy"])
        )
        if kind == "legacy":
            blobs.append(encode_message_set(rows, magic=draw(st.integers(0, 1))))
            continue
        pid, epoch = {"ours": (PID, EPOCH), "other": (PID, EPOCH + 1), "plain": (-1, -1)}.get(
            kind, (PID, EPOCH)
        )
        blobs.append(
            encode_batch(
                rows,
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=0 if pid >= 0 else -1,
                is_control=kind == "control",
            )
        )
    data = b"".join(blobs)
    if not blobs and draw(st.booleans()):
        return None
    if data and draw(st.integers(0, 9)) == 0:  # a byte changed (a length, a magic...)
        i = draw(st.integers(0, len(data) - 1))
        data = data[:i] + bytes([data[i] ^ draw(st.integers(1, 255))]) + data[i + 1 :]
    return data


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(any_records(), max_size=4), min_size=1, max_size=3))
def test_the_batch_headers_read_once_are_what_both_readings_find(parts: Any) -> None:
    """:func:`read_batches` (one walk, for the filter and the plan) answers
    :func:`idempotent_producer` and, when that names a producer, what the plan
    reads (:func:`one_batch_each`, the reference); it raises where they raise."""
    body = dataclasses.replace(
        request({}),
        topic_data=[
            dataclasses.replace(
                request({}, topic=f"t{i}").topic_data[0],
                partition_data=[
                    dataclasses.replace(
                        request({0: []}).topic_data[0].partition_data[0], index=j, records=r
                    )
                    for j, r in enumerate(records_list)
                ],
            )
            for i, records_list in enumerate(parts)
        ],
    )
    try:
        producer = idempotent_producer(body)
    except DecodeError as exc:
        with pytest.raises(DecodeError) as raised:
            read_batches(body)
        assert str(raised.value) == str(exc)
        return
    headers = read_batches(body)
    assert headers.producer == producer
    if producer is None:
        assert headers.batches is None
    else:
        assert headers.batches == one_batch_each(body)
