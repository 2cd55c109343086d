"""Accumulator: batching, linger, memory, ordering, retries, expiry (no sockets)."""

from __future__ import annotations

import random

import pytest

from trafka.codec import ErrorCode, KafkaError, decode_request
from trafka.codec.compression import Compression
from trafka.codec.records import decode_batch, read_batch_header
from trafka.sdk.accumulator import (
    RECORD_MEMORY_OVERHEAD,
    RECORD_OVERHEAD,
    Accumulator,
    BufferFullError,
    build_produce_request,
    produce_results,
    produce_version,
)
from trafka.sdk.errors import DeliveryTimeoutError, UsageError


def leader(topic: str, partition: int) -> int | None:
    return {0: 1, 1: 2}.get(partition)


def acc(**kw: object) -> Accumulator:
    kw.setdefault("rng", random.Random(0))
    return Accumulator(**kw)  # type: ignore[arg-type]


def test_linger_then_ready() -> None:
    a = acc(linger=0.5)
    h = a.append("t", 0, 1000, b"k", b"v", (), now=10.0)
    assert not h.done()
    r = a.ready(10.1, leader)
    assert r.nodes == set() and r.next_check == pytest.approx(10.5)
    assert a.ready(10.5, leader).nodes == {1}
    batches = a.drain(10.5, 1, leader)
    assert len(batches) == 1 and batches[0].in_flight
    rec = decode_batch(batches[0].encoded).records
    assert [(r.timestamp, r.key, r.value) for r in rec] == [(1000, b"k", b"v")]
    a.complete(batches[0], base_offset=42)
    md = h.result()
    assert (md.topic, md.partition, md.offset, md.timestamp) == ("t", 0, 42, 1000)
    assert md.serialized_key_size == 1 and md.serialized_value_size == 1
    assert a.used_memory == 0 and not a.has_pending()


def test_full_batch_ready_without_linger() -> None:
    a = acc(linger=100.0, batch_size=200)
    handles = [a.append("t", 0, 0, None, b"x" * 50, (), now=0.0) for _ in range(5)]
    assert a.ready(0.0, leader).nodes == {1}
    first = a.drain(0.0, 1, leader)
    assert len(first) == 1
    n = first[0].record_count
    assert 1 < n < 5
    assert [h.index for h in handles[:n]] == list(range(n))
    assert handles[n].batch is not first[0]


def test_abort_on_new_batch() -> None:
    a = acc(batch_size=100)
    assert a.append("t", 0, 0, None, b"x" * 80, (), now=0.0, abort_on_new_batch=True) is not None
    assert a.append("t", 0, 0, None, b"x" * 80, (), now=0.0, abort_on_new_batch=True) is None
    assert a.append("t", 0, 0, None, b"x" * 80, (), now=0.0) is not None


def test_first_record_always_fits_batch() -> None:
    a = acc(batch_size=10)
    h = a.append("t", 0, 0, None, b"x" * 100, (), now=0.0)
    assert h.batch.full


def test_buffer_memory_bound() -> None:
    # A 200-byte value reserves its estimated encoded size plus CPython's per-record cost.
    charge = 200 + RECORD_OVERHEAD + RECORD_MEMORY_OVERHEAD
    a = acc(buffer_memory=2 * charge - 1, linger=0.0)
    a.append("t", 0, 0, None, b"x" * 200, (), now=0.0)
    assert a.used_memory == charge
    with pytest.raises(BufferFullError):
        a.append("t", 0, 0, None, b"x" * 200, (), now=0.0)
    (b,) = a.drain(0.0, 1, leader)
    assert a.used_memory == charge + len(b.encoded)  # the encoded copy counts too
    a.complete(b, 0)
    assert a.free_memory == 2 * charge - 1
    a.append("t", 0, 0, None, b"x" * 200, (), now=0.0)
    with pytest.raises(KafkaError) as info:  # can never fit buffer.memory
        acc(buffer_memory=charge - 1).append("t", 0, 0, None, b"x" * 200, (), now=0.0)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_too_large_record() -> None:
    a = acc(max_request_size=1000)
    with pytest.raises(KafkaError) as info:
        a.append("t", 0, 0, None, b"x" * 2000, (), now=0.0)
    assert info.value.code == ErrorCode.MESSAGE_TOO_LARGE


def test_drain_respects_request_size_and_leader() -> None:
    a = acc(linger=0.0, max_request_size=400)
    for p in (0, 1):
        a.append("t", p, 0, None, b"x" * 150, (), now=0.0)
    a.append("u", 0, 0, None, b"y" * 150, (), now=0.0)
    assert a.ready(0.0, leader).nodes == {1, 2}
    one = a.drain(0.0, 1, leader)
    assert len(one) == 1  # two batches of ~230 bytes exceed 400
    two = a.drain(0.0, 1, leader)
    assert len(two) == 1 and two[0] is not one[0]
    assert [b.partition for b in a.drain(0.0, 2, leader)] == [1]


def test_unknown_leader_reported() -> None:
    a = acc(linger=0.0)
    a.append("t", 7, 0, None, b"x", (), now=0.0)
    r = a.ready(0.0, leader)
    assert r.nodes == set() and r.unknown_leaders == {"t"}


def test_retry_keeps_order_and_bytes() -> None:
    a = acc(linger=0.0, batch_size=100, retry_backoff=1.0, retry_backoff_max=1.0, max_in_flight=1)
    h1 = a.append("t", 0, 0, None, b"a" * 80, (), now=0.0)
    h2 = a.append("t", 0, 0, None, b"b" * 80, (), now=0.0)
    (b1,) = a.drain(0.0, 1, leader)
    sent = b1.encoded
    # max.in.flight.requests.per.connection=1: one batch in flight per partition, b2 waits
    assert a.drain(0.0, 1, leader) == []
    assert a.retry_or_fail(b1, KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER), now=0.0)
    r = a.ready(0.1, leader)
    assert r.nodes == set() and 0.8 <= r.next_check <= 1.2
    (again,) = a.drain(2.0, 1, leader)
    assert again is b1 and again.encoded == sent and again.attempts == 2
    a.complete(again, 10)
    (b2,) = a.drain(2.0, 1, leader)
    a.complete(b2, 11)
    assert h1.result().offset == 10 and h2.result().offset == 11


def test_non_retriable_fails() -> None:
    a = acc(linger=0.0)
    h = a.append("t", 0, 0, None, b"x", (), now=0.0)
    (b,) = a.drain(0.0, 1, leader)
    assert not a.retry_or_fail(b, KafkaError(ErrorCode.INVALID_RECORD), now=0.0)
    with pytest.raises(KafkaError, match="INVALID_RECORD"):
        h.result()
    assert isinstance(h.exception(), KafkaError)


def test_retries_exhausted() -> None:
    a = acc(linger=0.0, retries=1, retry_backoff=0.0)
    h = a.append("t", 0, 0, None, b"x", (), now=0.0)
    for expect in (True, False):
        (b,) = a.drain(0.0, 1, leader)
        assert a.retry_or_fail(b, ConnectionError("lost"), now=0.0) is expect
    assert isinstance(h.exception(), ConnectionError)


def test_delivery_timeout() -> None:
    a = acc(linger=0.0, delivery_timeout=5.0)
    h = a.append("t", 9, 0, None, b"x", (), now=0.0)  # no leader: never sent
    assert a.next_expiry() == 5.0
    assert a.expire(4.9) == []
    assert len(a.expire(5.0)) == 1
    assert isinstance(h.exception(), DeliveryTimeoutError)
    h2 = a.append("t", 0, 0, None, b"x", (), now=10.0)
    (b,) = a.drain(10.0, 1, leader)
    assert not a.retry_or_fail(b, KafkaError(ErrorCode.REQUEST_TIMED_OUT), now=15.0)
    assert isinstance(h2.exception(), DeliveryTimeoutError)


def test_a_delivery_timeout_names_the_error_the_batch_was_retried_after() -> None:
    """A retriable refusal retried until ``delivery.timeout.ms`` (Kafka's topic config
    ``min.insync.replicas``: with acks=all below it "the producer will raise an
    exception (either NotEnoughReplicas or NotEnoughReplicasAfterAppend)") fails
    as a timeout that still names it: ``last_error``, ``__cause__`` and the text.
    Every retry is reported to ``on_retry`` as it happens."""
    a = acc(linger=0.0, delivery_timeout=5.0, retry_backoff=0.5)
    retried: list[tuple[int, str]] = []
    a.on_retry = lambda b, exc: retried.append((b.attempts, str(exc)))
    h = a.append("t", 0, 0, None, b"x", (), now=0.0)
    refusal = KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "t-0: too few in-sync replicas")
    (b,) = a.drain(0.0, 1, leader)
    assert a.retry_or_fail(b, refusal, now=0.1)
    assert retried == [(1, str(refusal))]
    # Expired while waiting out its backoff, not in flight.
    assert len(a.expire(5.0)) == 1
    error = h.exception()
    assert isinstance(error, DeliveryTimeoutError)
    assert error.code == ErrorCode.REQUEST_TIMED_OUT
    assert error.last_error is refusal and error.__cause__ is refusal
    assert "NOT_ENOUGH_REPLICAS" in str(error) and "t-0" in str(error)
    # Expired when its answer came back: the answer's error is the last one.
    h2 = a.append("t", 0, 0, None, b"x", (), now=10.0)
    (b2,) = a.drain(10.0, 1, leader)
    assert not a.retry_or_fail(b2, refusal, now=15.0)
    error2 = h2.exception()
    assert isinstance(error2, DeliveryTimeoutError) and error2.last_error is refusal
    # Never sent (no leader): nothing to name.
    h3 = a.append("t", 9, 0, None, b"x", (), now=20.0)
    a.expire(25.0)
    error3 = h3.exception()
    assert isinstance(error3, DeliveryTimeoutError) and error3.last_error is None
    assert error3.__cause__ is None and "unsent" in str(error3)


def test_idempotent_sequences_and_in_flight() -> None:
    a = acc(linger=0.0, batch_size=70, idempotent=True, max_in_flight=5)
    a.producer_id, a.producer_epoch = 77, 3
    for _ in range(3):
        a.append("t", 0, 0, None, b"x" * 60, (), now=0.0)
        a.append("t", 0, 0, None, b"y", (), now=0.0)
    drained = [a.drain(0.0, 1, leader) for _ in range(4)]
    batches = [d[0] for d in drained if d]
    heads = [read_batch_header(b.encoded) for b in batches]
    assert [h.producer_id for h in heads] == [77] * len(heads)
    # every record is its own batch here (each fills batch.size); four in flight at once
    assert [h.base_sequence for h in heads] == [0, 1, 2, 3]
    assert [h.producer_epoch for h in heads] == [3] * 4
    assert all(b.in_flight for b in batches)


def test_callbacks_and_waker() -> None:
    class Ev:
        fired = 0

        def set(self) -> None:
            Ev.fired += 1

    a = acc(linger=0.0)
    h = a.append("t", 0, 5, b"k", None, (), now=0.0)
    with pytest.raises(UsageError):
        h.result()
    seen: list[int] = []
    h.add_done_callback(lambda hh: seen.append(hh.result().offset))
    h.batch.waker = Ev()
    (b,) = a.drain(0.0, 1, leader)
    a.complete(b, 3)
    assert seen == [3] and Ev.fired == 1
    h.add_done_callback(lambda hh: seen.append(-1))
    assert seen == [3, -1]
    assert h.result().serialized_value_size == -1


def test_flush_makes_ready() -> None:
    a = acc(linger=100.0)
    a.append("t", 0, 0, None, b"x", (), now=0.0)
    assert a.ready(0.0, leader).nodes == set()
    a.flushing += 1
    assert a.ready(0.0, leader).nodes == {1}


@pytest.mark.parametrize("codec", list(Compression))
def test_produce_request_with_compression(codec: Compression) -> None:
    from trafka.codec import RequestHeader, encode_request

    a = acc(linger=0.0, compression=codec)
    a.append("t", 0, 1, b"k", b"v" * 100, [("h", b"1")], now=0.0)
    a.append("t", 1, 2, None, b"w", (), now=0.0)
    batches = a.drain(0.0, 1, leader) + a.drain(0.0, 2, leader)
    req = build_produce_request(batches, acks=-1, timeout_ms=1000)
    frame = encode_request(
        RequestHeader(request_api_key=0, request_api_version=9, correlation_id=1), req
    )
    _, body = decode_request(frame[4:])
    blob = body.topic_data[0].partition_data[0].records
    rec = decode_batch(blob).records[0]
    assert rec.value == b"v" * 100 and rec.headers == (("h", b"1"),)
    assert read_batch_header(blob).compression == codec
    from trafka.codec.messages import k00_produce as produce

    resp = produce.ProduceResponse(
        responses=[
            produce.ProduceResponse.TopicProduceResponse(
                name="t",
                partition_responses=[
                    produce.ProduceResponse.PartitionProduceResponse(index=1, base_offset=9)
                ],
            )
        ]
    )
    pairs = produce_results(batches, resp)
    assert [(b.partition, p.base_offset if p else None) for b, p in pairs] == [(0, None), (1, 9)]


def test_produce_v13_names_topics_by_id_and_reads_answers_by_id() -> None:
    """Produce v13 replaces topic names with ids (KIP-516, Kafka 4.4's spec): the
    request carries only ids, on the wire too, and the answer is matched back by them."""
    import uuid

    from trafka.codec import RequestHeader, encode_request
    from trafka.codec.messages import k00_produce as produce

    a = acc(linger=0.0)
    a.append("t", 0, 1, None, b"v", (), now=0.0)
    batches = a.drain(0.0, 1, leader)
    tid = uuid.UUID(int=42)
    req = build_produce_request(batches, acks=-1, timeout_ms=1000, topic_ids={"t": tid})
    frame = encode_request(
        RequestHeader(request_api_key=0, request_api_version=13, correlation_id=1), req
    )
    _, body = decode_request(frame[4:])
    assert [(t.name, t.topic_id) for t in body.topic_data] == [("", tid)]
    r = produce.ProduceResponse
    answer = r(
        responses=[
            r.TopicProduceResponse(
                topic_id=tid,
                partition_responses=[r.PartitionProduceResponse(index=0, base_offset=5)],
            ),
            r.TopicProduceResponse(
                topic_id=uuid.UUID(int=7),
                partition_responses=[r.PartitionProduceResponse(index=0, base_offset=9)],
            ),
        ]
    )
    [(batch, part)] = produce_results(batches, answer, {"t": tid})
    assert (batch.topic, part.base_offset) == ("t", 5)


def test_produce_version_steps_down_without_ids_and_in_transactions() -> None:
    """v13 needs every topic's id (KIP-516); a transaction of transaction version 1
    stays at v11 ("the client can't use produce request version higher than 11
    within a transaction" unless transaction version 2 is enabled, KIP-890)."""
    import uuid

    ids = {"a": uuid.UUID(int=1), "b": None}
    assert produce_version(13, ["a"], ids.get, transactional=False) == 13
    assert produce_version(13, ["a", "b"], ids.get, transactional=False) == 12
    assert produce_version(11, ["b"], ids.get, transactional=False) == 11
    assert produce_version(13, ["a"], ids.get, transactional=True) == 11
    assert produce_version(9, ["a"], ids.get, transactional=True) == 9


def test_split_after_message_too_large_keeps_order_and_sequences() -> None:
    a = acc(linger=0.0, batch_size=10_000, idempotent=True, max_in_flight=5)
    a.producer_id, a.producer_epoch = 7, 0
    first = [a.append("t", 0, i, None, b"a%d" % i, (), now=0.0) for i in range(5)]
    (big,) = a.drain(0.0, 1, leader)
    assert big.base_sequence == 0
    later = a.append("t", 0, 99, None, b"later", (), now=0.0)
    assert a.split(big)
    assert not big.done and a.has_pending()
    # The halves go first, in order, with the sequence numbers of their records.
    (h1,) = a.drain(0.0, 1, leader)
    (h2,) = a.drain(0.0, 1, leader)
    (tail,) = a.drain(0.0, 1, leader)
    assert [b.record_count for b in (h1, h2)] == [2, 3]
    assert (h1.base_sequence, h2.base_sequence, tail.base_sequence) == (0, 2, 5)
    for b, seq in ((h1, 0), (h2, 2)):
        header = read_batch_header(b.encoded)
        assert (header.base_sequence, header.producer_id) == (seq, 7)
    assert tail is later.batch and h1.attempts == h2.attempts == 1
    # A half may itself be split again; single records cannot be.
    assert a.split(h2)
    (h2a,) = a.drain(0.0, 1, leader)
    (h2b,) = a.drain(0.0, 1, leader)
    assert [b.record_count for b in (h2a, h2b)] == [1, 2]
    assert not a.split(h2a)
    a.complete(h1, base_offset=100)
    a.complete(h2a, base_offset=102)
    assert not first[0].done()  # resolves when every part has
    a.fail(h2b, KafkaError(ErrorCode.MESSAGE_TOO_LARGE, "still too large"))
    assert all(h.done() for h in first)
    assert [first[i].result().offset for i in range(3)] == [100, 101, 102]
    for h in first[3:]:
        assert isinstance(h.exception(), KafkaError)
        with pytest.raises(KafkaError):
            h.result()
    a.complete(tail, base_offset=105)
    assert later.result().offset == 105
    assert a.used_memory == 0 and not a.has_pending()


def test_split_then_out_of_order_is_retried_behind_the_halves() -> None:
    a = acc(linger=0.0, batch_size=10_000, idempotent=True, max_in_flight=5)
    a.producer_id, a.producer_epoch = 1, 0
    for i in range(4):
        a.append("t", 0, i, None, b"x", (), now=0.0)
    (big,) = a.drain(0.0, 1, leader)
    a.append("t", 0, 9, None, b"y", (), now=0.0)
    (younger,) = a.drain(0.0, 1, leader)
    assert a.split(big)
    (h1,) = a.drain(0.0, 1, leader)
    # The younger batch was in flight with sequence 4 and comes back out of order.
    assert a.has_earlier(younger)
    assert a.retry_or_fail(
        younger, KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, "x"), 0.0, force=True
    )
    nxt = a.drain(10.0, 1, leader)
    assert nxt and nxt[0].parent is big and nxt[0] is not h1


def test_several_batches_of_a_partition_in_flight_without_idempotence() -> None:
    a = acc(linger=0.0, batch_size=100, max_in_flight=2)
    for _ in range(3):
        a.append("t", 0, 0, None, b"x" * 80, (), now=0.0)
    (b1,) = a.drain(0.0, 1, leader)
    (b2,) = a.drain(0.0, 1, leader)  # as in Java: up to max.in.flight per partition
    assert a.drain(0.0, 1, leader) == []
    assert b1.seq < b2.seq and b1.base_sequence == b2.base_sequence == -1


def test_node_ready_follows_ready_for_one_node() -> None:
    a = acc(linger=0.5, batch_size=10_000)
    a.append("t", 1, 0, None, b"x", (), now=0.0)
    assert not a.node_ready(0.1, 2, leader)
    assert a.ready(0.5, leader).nodes == {2}
    assert a.node_ready(0.5, 2, leader) and not a.node_ready(0.5, 1, leader)
    a.flushing += 1
    assert a.node_ready(0.1, 2, leader)
    assert len(a.drain(0.1, 2, leader)) == 1
    # Its only batch is in flight: nothing more to send there.
    assert not a.node_ready(0.1, 2, leader)


def test_batches_of_a_transaction_begun_ahead_wait_for_theirs() -> None:
    a = acc(linger=0.0)
    sending = {"n": 1}
    a.send_allowed = lambda _t, _p, number: number == sending["n"]
    a.txn_open = 1
    first = a.append("t", 0, 0, None, b"one", (), now=0.0)
    a.seal()  # the next transaction begins while this one commits
    a.txn_open = 2
    second = a.append("t", 0, 0, None, b"two", (), now=0.0)
    other = a.append("t", 1, 0, None, b"other", (), now=0.0)
    assert second.batch is not first.batch and first.batch.full
    assert (first.batch.txn, second.batch.txn, other.batch.txn) == (1, 2, 2)
    assert a.ready(0.0, leader).nodes == {1}  # partition 1 holds only the next one's batch
    (b,) = a.drain(0.0, 1, leader)
    assert b is first.batch and a.drain(0.0, 1, leader) == []  # the next one's stays
    assert a.has_pending(1) and a.has_pending(2)
    a.complete(b, base_offset=0)
    assert not a.has_pending(1) and a.has_pending(2)
    sending["n"] = 2  # its commit done: the next transaction's batches leave
    assert [x.batch for x in (second, other)] == [
        *a.drain(0.0, 1, leader),
        *a.drain(0.0, 2, leader),
    ]


def test_aborting_a_transaction_begun_ahead_fails_only_its_batches() -> None:
    a = acc(linger=0.0)
    a.send_allowed = lambda _t, _p, number: number == 1
    a.txn_open = 1
    kept = a.append("t", 0, 0, None, b"one", (), now=0.0)
    a.seal()
    a.txn_open = 2
    doomed = [a.append("t", p, 0, None, b"two", (), now=0.0) for p in (0, 1)]
    used = a.used_memory
    assert a.abort_undrained(UsageError("aborted"), 2) == 2
    assert all(isinstance(h.exception(), UsageError) for h in doomed)
    assert not kept.done() and a.used_memory < used and not a.has_pending(2)
    (b,) = a.drain(0.0, 1, leader)
    assert b is kept.batch
