"""The proxy's own sequence numbers for routed idempotent producers, without
sockets: numbering, retries mapped to the same upstream batches, failed batches
written again in order, dead batches' numbers given to the next, and the client's
sequence checks."""

from __future__ import annotations

import sys
from typing import Any

from proxy_helpers import keyed, request

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k26_end_txn as et
from trafka.codec.records import decode_batch, encode_batch, read_batch_header
from trafka.proxy.keyrouting.exactly_once import ExactlyOnce
from trafka.proxy.keyrouting.idempotent_plan import (
    commit_idempotent,
    idempotent_answer,
    idempotent_producer,
    prepare_idempotent,
)
from trafka.proxy.keyrouting.sequences import Sequences, State, Upstream
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.topics import Topics
from trafka.sdk.partitioners import murmur2_partition

PID, EPOCH = 42, 3


def cluster() -> Topics:
    return Topics({"orders": 6}, {("orders", p): 1 + p % 3 for p in range(6)})


def batch(n: int, seq: int, *, start: int = 0) -> bytes:
    records = keyed(n + start, keys=29)[start:]
    return encode_batch(records, producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)


def plan(seqs: Sequences, body: Any) -> Any:
    session = seqs.session(PID, EPOCH, 0)
    assert session is not None
    prepared = prepare_idempotent(
        body, session=session, topics=cluster(), hash_name="murmur2", stats=RouteStats()
    )
    assert prepared is not None
    for topic, partition in Sequences.unsynced(session, prepared.targets):
        Sequences.synced(session, topic, partition, -1, -1)
    return session, commit_idempotent(body, prepared, session)


def ack_all(session: Any, batches: list[Upstream]) -> None:
    for u in batches:
        session.sent(u)
        session.settle(u, ErrorCode.NONE, base_offset=100)


def test_every_record_goes_once_to_its_partition_with_the_proxys_sequences() -> None:
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    body = request({0: [batch(120, 7)]})
    assert idempotent_producer(body) == (PID, EPOCH)
    _, p = plan(seqs, body)
    (writes,) = p.rounds
    seen = []
    for u in writes:
        header = read_batch_header(u.data)
        # Born here: every target partition starts at 0, whatever the client's 7.
        assert (header.producer_id, header.producer_epoch, header.base_sequence) == (PID, EPOCH, 0)
        for r in decode_batch(u.data).records:
            assert murmur2_partition(r.key, 6) == u.partition
            seen.append(r.value)
    assert sorted(seen) == sorted(v for _, _, v, _ in keyed(120, keys=29))
    # A second batch continues each partition's numbers.
    _, p2 = plan(seqs, request({0: [batch(60, 127, start=120)]}))
    for u in p2.rounds[0]:
        first = next(x for x in writes if x.partition == u.partition)
        assert u.base_sequence == first.count


def test_a_retry_writes_only_what_failed_with_the_same_sequences() -> None:
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    body = request({0: [batch(120, 0)]})
    session, first = plan(seqs, body)
    writes = first.rounds[0]
    lost, *rest = writes
    ack_all(session, rest)
    session.sent(lost)
    session.settle(lost, ErrorCode.NETWORK_EXCEPTION)  # its answer was lost
    (answer,) = idempotent_answer(first, _template()).responses[0].partition_responses
    assert answer.error_code == ErrorCode.REQUEST_TIMED_OUT  # every client retries it
    lost_bytes = lost.data
    # The client retries the same batch: only the lost part goes again, unchanged.
    _, retry = plan(seqs, body)
    assert retry.rounds == [[lost]] and lost.data == lost_bytes
    ack_all(session, [lost])
    # Records moved: no offset for any of the 120 (see routing.unknown_base_offset).
    (answer,) = idempotent_answer(retry, _template()).responses[0].partition_responses
    assert (answer.error_code, answer.base_offset, answer.log_append_time_ms) == (0, -120, -1)
    (answer,) = idempotent_answer(retry, _template(), "trafka").responses[0].partition_responses
    assert answer.error_code == 0 and answer.base_offset == -1


def test_failed_batches_go_again_before_later_ones_of_their_partition() -> None:
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [batch(120, 0)]}))
    for u in first.rounds[0]:
        session.sent(u)
        session.settle(u, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    # The client's next batch (another partition) must not overtake them.
    _, second = plan(seqs, request({1: [batch(120, 0, start=500)]}))
    assert len(second.rounds) == 2
    assert {id(u) for u in second.rounds[0]} == {id(u) for u in first.rounds[0]}
    for u in second.rounds[1]:
        earlier = next(x for x in first.rounds[0] if x.partition == u.partition)
        assert u.base_sequence == earlier.base_sequence + earlier.count


def test_an_acknowledged_later_batch_means_the_earlier_were_written() -> None:
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [batch(60, 0)]}))
    _, second = plan(seqs, request({0: [batch(60, 60, start=60)]}))
    target = second.rounds[0][0]
    earlier = next(u for u in first.rounds[0] if u.partition == target.partition)
    session.sent(earlier)
    session.settle(earlier, ErrorCode.NETWORK_EXCEPTION)
    session.sent(target)
    session.settle(target, ErrorCode.NONE, base_offset=9)
    assert earlier.state is State.ACKED and earlier.data is None


def test_a_batch_is_written_only_behind_the_earlier_ones_on_their_connection() -> None:
    """KIP-98/KIP-360: a broker without state for the producer takes any sequence, so
    a batch written on another connection than an earlier unanswered one of its
    partition (lost with a cut connection) could be written over the gap."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, warm = plan(seqs, request({0: [batch(60, 0)]}))
    ack_all(session, warm.rounds[0])  # the leaders hold the producer's state now
    _, first = plan(seqs, request({0: [batch(60, 60, start=60)]}))
    _, second = plan(seqs, request({0: [batch(60, 120, start=120)]}))
    later = second.rounds[0][0]
    earlier = next(u for u in first.rounds[0] if u.partition == later.partition)
    assert session.in_order(earlier, 1) and session.in_order(earlier, 2)
    session.sent(earlier, 1)
    assert session.in_order(later, 1)
    assert not session.in_order(later, 2)  # connection 1 was lost: 2 is a new one
    session.settle(earlier, ErrorCode.NETWORK_EXCEPTION)
    assert not session.in_order(later, 1)  # failed: written again first
    session.sent(earlier, 2)
    assert session.in_order(later, 2)
    session.settle(earlier, ErrorCode.NONE, base_offset=0)
    assert session.in_order(later, 3)  # nothing unanswered before it


def test_before_the_leader_holds_the_producers_state_a_partition_has_one_batch_in_flight() -> None:
    """KIP-360: a broker with no state for a producer takes its first batch at
    any sequence (Kafka's ProducerStateManager since 2.5; brokerlite's
    producer_state does the same). Two batches of a partition in flight there
    on one connection: the broker may refuse the first (say MESSAGE_TOO_LARGE)
    and take the second over the gap, and the proxy would then give the first's
    numbers to the next batch, which the broker takes for a retry of nothing it
    has. So the second is not written until the first is answered; once the leader has
    acknowledged a batch (or told its last sequence) it refuses any gap itself,
    and batches are pipelined again."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [batch(60, 0)]}))
    _, second = plan(seqs, request({0: [batch(60, 60, start=60)]}))
    later = second.rounds[0][0]
    earlier = next(u for u in first.rounds[0] if u.partition == later.partition)
    session.sent(earlier, 1)
    assert not session.in_order(later, 1)  # even on the same connection
    session.settle(earlier, ErrorCode.NONE, base_offset=0)
    assert session.in_order(later, 1)
    session.sent(later, 1)
    _, third = plan(seqs, request({0: [batch(60, 120, start=120)]}))
    after = next(u for u in third.rounds[0] if u.partition == later.partition)
    assert session.in_order(after, 1)
    # The leader lost the producer's state: one batch at a time again.
    session.settle(later, ErrorCode.UNKNOWN_PRODUCER_ID, retriable=False)
    _, fourth = plan(seqs, request({0: [batch(60, 180, start=180)]}))
    last = next(u for u in fourth.rounds[0] if u.partition == later.partition)
    session.sent(after, 1)
    assert not session.in_order(last, 1)


def test_a_leader_that_told_the_producers_last_sequence_holds_its_state() -> None:
    """A producer not born here: the leader's DescribeProducers answer with a
    last sequence at the producer's epoch means the leader has its state
    (batches may be pipelined); no sequence there means it may not."""
    seqs = Sequences()
    session = seqs.session(PID, EPOCH, 0)
    assert session is not None
    Sequences.synced(session, "orders", 0, 41, EPOCH)
    Sequences.synced(session, "orders", 1, -1, -1)
    for partition, confirmed in ((0, True), (1, False)):
        one = session.number("orders", partition, 5, batch(5, 0))
        two = session.number("orders", partition, 5, batch(5, 5, start=5))
        session.sent(one, 7)
        assert session.in_order(two, 7) is confirmed


def test_a_dead_batch_gives_its_numbers_to_the_next() -> None:
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [batch(60, 0)]}))
    _, second = plan(seqs, request({0: [batch(60, 60, start=60)]}))
    target = second.rounds[0][0]
    dead = next(u for u in first.rounds[0] if u.partition == target.partition)
    session.sent(dead)
    session.sent(target)
    session.settle(target, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    session.settle(dead, ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    assert dead.state is State.DEAD
    # Nothing after the dead batch can have been written: it takes its numbers.
    assert target.base_sequence == dead.base_sequence
    assert read_batch_header(target.data).base_sequence == dead.base_sequence


def test_a_batch_renumbered_after_its_placement_was_journaled_is_journaled_again() -> None:
    """With a journal, a batch is written only at the numbers its journaled
    placement names: a dead batch's successor, renumbered, is named by
    journaled_again (its client batch, once, taken out of the batches
    waiting for the next journal write) until its new numbers are journaled."""
    seqs = Sequences(journaled=True)
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [batch(60, 0)]}))
    _, second = plan(seqs, request({0: [batch(60, 60, start=60)]}))
    placed = session.take_journal()
    assert len(placed) == 2
    for b in placed:  # the journal write holding both acknowledged
        for u in b.upstream:
            u.journaled = u.base_sequence
    later = [u for batches in second.rounds for u in batches]
    assert session.journaled_again(later) == []
    target = later[0]
    dead = next(u for u in first.rounds[0] if u.partition == target.partition)
    session.sent(dead)
    session.settle(dead, ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    assert target.base_sequence == dead.base_sequence != target.journaled
    again = session.journaled_again(later)
    assert again == [placed[1]]
    assert placed[1] not in session.take_journal()  # journaled with the request's write
    for u in placed[1].upstream:
        u.journaled = u.base_sequence
    assert session.journaled_again(later) == []


def _three_in_flight() -> tuple[Sequences, Any, tuple[Upstream, ...]]:
    """Three client batches of partition 0, all records moved to 1: their
    upstream batches (sequences 0, 5, 10) written on connection 1."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    plans = [plan(seqs, request({0: [_to(1, 5, seq)]})) for seq in (0, 5, 10)]
    session = plans[0][0]
    ups = tuple(u for _, p in plans for u in p.rounds[0])
    for u in ups:
        session.sent(u, 1)
    return seqs, session, ups


def test_dead_batches_renumber_only_the_batches_after_them() -> None:
    """A partition's first batch fails with an error retried, the next two are
    refused for good. The first keeps its numbers (the broker expects them next),
    the two dead batches' numbers go to the next new batch; renumbering the first
    after them left a gap the broker refused for ever (found by test_proxy_model:
    the client's retries never ended)."""
    seqs, session, (a, b, c) = _three_in_flight()
    session.settle(a, ErrorCode.NOT_ENOUGH_REPLICAS)
    session.settle(b, ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    session.settle(c, ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    assert (a.state, a.base_sequence, read_batch_header(a.data).base_sequence) == (
        State.FAILED,
        0,
        0,
    )
    _, fourth = plan(seqs, request({0: [_to(1, 5, 15)]}))
    # The first written again, then the new batch at the dead ones' numbers.
    assert [[(u.base_sequence, u.count) for u in r] for r in fourth.rounds] == [[(0, 5)], [(5, 5)]]


def test_no_batch_numbered_after_a_dead_one_is_written_before_the_gap_closes() -> None:
    """A batch refused for good leaves a gap; the batches after it are renumbered
    once none is in flight. One written before with its old numbers would be
    taken by a leader holding no state for the producer (KIP-360: any sequence),
    and the batches renumbered into the gap afterwards would be answered out of
    order with a last sequence past them: taken as written, never written (found
    by test_proxy_model). So it is held until the gap closes."""
    _, session, (a, b, c) = _three_in_flight()
    session.settle(b, ErrorCode.NETWORK_EXCEPTION)
    session.settle(a, ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    assert session.resend_before(b) == [b] and b.base_sequence == 5  # c is in flight
    assert not session.in_order(b, 1)
    session.settle(c, ErrorCode.NETWORK_EXCEPTION)
    assert session.resend_before(b) == [b] and b.base_sequence == 0  # the gap closed
    assert session.in_order(b, 1)


def test_the_client_hears_out_of_order_and_old_epochs_as_a_broker_would_say() -> None:
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, _ = plan(seqs, request({0: [batch(10, 0)]}))
    gap = request({0: [batch(10, 25)]})  # 10 expected
    prepared = prepare_idempotent(
        gap, session=session, topics=cluster(), hash_name="murmur2", stats=RouteStats()
    )
    assert prepared is not None
    p = commit_idempotent(gap, prepared, session)
    assert p.rounds == []
    (answer,) = idempotent_answer(p, _template()).responses[0].partition_responses
    assert answer.error_code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert seqs.session(PID, EPOCH - 1, 0) is None  # fenced by the newer epoch
    # A newer epoch starts afresh.
    newer = seqs.session(PID, EPOCH + 1, 0)
    assert newer is not None and newer.check_new("orders", 0, 0) == ErrorCode.NONE


def test_a_producer_not_born_here_asks_the_leaders_first() -> None:
    seqs = Sequences()  # e.g. the proxy restarted
    session = seqs.session(PID, EPOCH, 0)
    assert session is not None
    body = request({0: [batch(60, 500)]})
    prepared = prepare_idempotent(
        body, session=session, topics=cluster(), hash_name="murmur2", stats=RouteStats()
    )
    assert prepared is not None
    missing = Sequences.unsynced(session, prepared.targets)
    assert missing == sorted(prepared.targets)
    for topic, partition in missing:
        Sequences.synced(session, topic, partition, 40 + partition, EPOCH)
    p = commit_idempotent(body, prepared, session)
    for u in p.rounds[0]:
        assert u.base_sequence == 41 + u.partition


def _template() -> Any:
    from trafka.codec.messages import k00_produce as pm

    return pm.ProduceResponse()


def test_records_the_proxy_cannot_place_are_refused_never_forwarded_as_numbered() -> None:
    """A target without a known leader, or a topic never seen: the partition is
    answered with an error that makes the client refresh its metadata and retry,
    and nothing of it is numbered (written as the client numbered it, it would
    clash with the proxy's numbers)."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session = seqs.session(PID, EPOCH, 0)
    assert session is not None
    topics = cluster()
    del topics.leaders[("orders", 3)]  # a leader moving, say
    body = request({0: [batch(120, 0)]})
    prepared = prepare_idempotent(
        body, session=session, topics=topics, hash_name="murmur2", stats=RouteStats()
    )
    assert prepared is not None
    assert prepared.refused == {("orders", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER}
    assert prepared.stale == {"orders"} and prepared.new == []
    p = commit_idempotent(body, prepared, session)
    assert p.rounds == []
    (answer,) = idempotent_answer(p, _template()).responses[0].partition_responses
    assert answer.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
    # The retry, once the leader is known again, is placed as new (sequence 0).
    retry = prepare_idempotent(
        body, session=session, topics=cluster(), hash_name="murmur2", stats=RouteStats()
    )
    assert retry is not None and len(retry.new) == 1 and not retry.refused

    unknown = request({0: [batch(10, 0)]}, topic="never-seen")
    prepared = prepare_idempotent(
        unknown, session=session, topics=cluster(), hash_name="murmur2", stats=RouteStats()
    )
    assert prepared is not None
    assert prepared.refused == {("never-seen", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}


def test_the_transactions_the_proxy_tracks_are_bounded(monkeypatch: Any) -> None:
    from trafka.proxy.keyrouting import exactly_once
    from trafka.proxy.keyrouting.exactly_once import ExactlyOnce

    monkeypatch.setattr(exactly_once, "MAX_TRANSACTIONAL_IDS", 3)
    eos = ExactlyOnce(None, cluster(), RouteStats(), lambda _: None, list, 1 << 20)  # type: ignore[arg-type]
    for i in range(5):
        eos._txn(f"tx-{i}", i, 0).partitions.add(("orders", i))
    eos._txn("tx-2", 2, 0)  # used again: kept
    eos._txn("tx-5", 5, 0)
    assert list(eos.transactions) == ["tx-4", "tx-2", "tx-5"]
    assert eos.transactions["tx-2"].partitions == {("orders", 2)}


def test_a_partition_is_in_the_transaction_once_its_add_is_answered_without_error() -> None:
    """Kafka's leaders refuse a transactional write to a partition the
    coordinator has not added (KIP-890's verification, on since Kafka 3.6), and
    its coordinator answers an AddPartitionsToTxn with CONCURRENT_TRANSACTIONS
    while the previous transaction completes: a partition the client only asked
    for is not taken as added (the proxy adds it itself before moving records
    there); one answered without error is."""
    from trafka.codec.messages import k24_add_partitions_to_txn as apt
    from trafka.proxy.keyrouting.exactly_once import ExactlyOnce

    eos = ExactlyOnce(None, cluster(), RouteStats(), lambda _: None, list, 1 << 20)  # type: ignore[arg-type]
    q, a = apt.AddPartitionsToTxnRequest, apt.AddPartitionsToTxnResponse
    asked = q(
        v3_and_below_transactional_id="tx",
        v3_and_below_producer_id=PID,
        v3_and_below_producer_epoch=EPOCH,
        v3_and_below_topics=[q.AddPartitionsToTxnTopic(name="orders", partitions=[1, 2])],
    )
    eos.client_request(24, 3, asked, 2)
    txn = eos.transactions["tx"]
    assert (txn.coordinator, txn.partitions) == (2, set())

    def answer(*errors: int) -> Any:
        return a(
            results_by_topic_v3_and_below=[
                a.AddPartitionsToTxnTopicResult(
                    name="orders",
                    results_by_partition=[
                        a.AddPartitionsToTxnPartitionResult(
                            partition_index=p, partition_error_code=e
                        )
                        for p, e in zip((1, 2), errors, strict=True)
                    ],
                )
            ]
        )

    eos.client_added(
        asked, answer(ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.CONCURRENT_TRANSACTIONS)
    )
    assert txn.partitions == set()
    eos.client_added(asked, answer(0, ErrorCode.OPERATION_NOT_ATTEMPTED))
    assert txn.partitions == {("orders", 1)}
    eos.client_added(asked, answer(0, 0))
    assert txn.partitions == {("orders", 1), ("orders", 2)}


def _to(target: int, n: int, seq: int) -> bytes:
    """A client batch of ``n`` records whose keys all hash to ``target`` (of 6)."""
    keys = [k for k in (b"key-%d" % i for i in range(400)) if murmur2_partition(k, 6) == target]
    records = [(1_000 + i, keys[i % len(keys)], b"v%d" % i, []) for i in range(n)]
    return encode_batch(records, producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)


def test_a_later_batch_is_not_said_written_while_an_earlier_one_of_its_partition_is_retried() -> (
    None
):
    """A broker acknowledges a producer's batch only when the one before it (same
    partition) is written (KIP-98's sequence check), and librdkafka relies on it:
    a later batch's success acknowledges the earlier ones it still holds for a
    retry (its implicit acknowledgement). The proxy sends the two batches'
    records to different partitions: while the earlier failed with an error the
    client retries, the later one is answered REQUEST_TIMED_OUT (its records,
    written, are not written again when the client retries it); once the earlier
    is written, the retry is answered written."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    _, second = plan(seqs, request({0: [_to(2, 5, 5)]}))
    (early,) = first.rounds[0]
    (late,) = second.rounds[0]
    assert (early.partition, late.partition) == (1, 2)
    session.sent(early)
    session.settle(early, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    ack_all(session, [late])
    assert answer_codes(first) == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert answer_codes(second) == [ErrorCode.REQUEST_TIMED_OUT]
    # The client sends both again, in order: the earlier is written now; the
    # later's records are not written again.
    _, retry_first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    assert retry_first.rounds == [[early]]
    ack_all(session, [early])
    _, retry_second = plan(seqs, request({0: [_to(2, 5, 5)]}))
    assert retry_second.rounds == []
    assert answer_codes(retry_first) == answer_codes(retry_second) == [ErrorCode.NONE]


def test_an_earlier_batch_refused_for_good_does_not_hold_back_the_later() -> None:
    """An error the client does not retry (MESSAGE_TOO_LARGE): the earlier batch
    is given up, and the later one, written, is answered written."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    _, second = plan(seqs, request({0: [_to(2, 5, 5)]}))
    session.sent(first.rounds[0][0])
    session.settle(first.rounds[0][0], ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    ack_all(session, second.rounds[0])
    assert answer_codes(first) == [ErrorCode.MESSAGE_TOO_LARGE]  # the client hears it first
    assert answer_codes(second) == [ErrorCode.NONE]


def answer_codes(planned: Any) -> list[int]:
    return [
        p.error_code
        for t in idempotent_answer(planned, _template(), "trafka").responses
        for p in t.partition_responses
    ]


def test_many_batches_behind_one_never_retried_are_answered_without_deep_recursion() -> None:
    """A client may go on sending a partition's next batches (consecutive
    sequences) without retrying an earlier one that failed with a retriable
    error: each later batch waits for all the earlier ones. However many there
    are, each is answered (REQUEST_TIMED_OUT, the earlier one not written),
    and the proxy's request handling does not exhaust Python's stack."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_to(1, 1, 0)]}))
    session.sent(first.rounds[0][0])
    session.settle(first.rounds[0][0], ErrorCode.NOT_LEADER_OR_FOLLOWER)
    later = None
    for seq in range(1, 2 * sys.getrecursionlimit()):
        _, later = plan(seqs, request({0: [_to(2, 1, seq)]}))
        ack_all(session, later.rounds[0])
    assert answer_codes(later) == [ErrorCode.REQUEST_TIMED_OUT]


def test_a_batch_after_its_producer_ended_the_transaction_waits_for_none_of_it() -> None:
    """A transactional producer that aborts (EndTxn) a transaction whose batch
    failed with a retriable error never sends that batch again (KIP-98: the
    aborted transaction's records are dropped). The next transaction's batch of
    the same partition, at the same epoch, is answered by its own outcome, not
    held back behind the abandoned one for ever."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    session.sent(first.rounds[0][0])
    session.settle(first.rounds[0][0], ErrorCode.NOT_LEADER_OR_FOLLOWER)
    eos = ExactlyOnce(None, cluster(), RouteStats(), lambda _: None, lambda: [1], 1 << 20)  # type: ignore[arg-type]
    eos.sequences = seqs
    end = et.EndTxnRequest(
        transactional_id="t", producer_id=PID, producer_epoch=EPOCH, committed=False
    )
    eos.client_request(26, 3, end, 1)
    _, second = plan(seqs, request({0: [_to(2, 5, 5)]}))
    ack_all(session, second.rounds[0])
    assert answer_codes(second) == [ErrorCode.NONE]


def test_an_aborted_transactions_failed_batch_is_not_written_in_the_next() -> None:
    """KIP-98: an aborted transaction's records are never read by a
    read_committed consumer. A batch of the aborted transaction that failed
    upstream with a retriable error must therefore not be written again ahead
    of the next transaction's batch of the same partition (it would be part of
    that transaction, and committed with it). The partition's next sequence is
    not known either (the failed write may or may not have reached the
    broker): it is asked of the leader again before the next write."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    ack_all(session, first.rounds[0])
    _, failed = plan(seqs, request({0: [_to(1, 5, 5)]}))
    (lost,) = failed.rounds[0]
    session.sent(lost)
    session.settle(lost, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    eos = ExactlyOnce(None, cluster(), RouteStats(), lambda _: None, lambda: [1], 1 << 20)  # type: ignore[arg-type]
    eos.sequences = seqs
    end = et.EndTxnRequest(
        transactional_id="t", producer_id=PID, producer_epoch=EPOCH, committed=False
    )
    eos.client_request(26, 3, end, 1)
    body = request({0: [_to(1, 5, 10)]})
    prepared = prepare_idempotent(
        body, session=session, topics=cluster(), hash_name="murmur2", stats=RouteStats()
    )
    assert prepared is not None
    # The leader is asked first; say the lost write had not reached it.
    assert Sequences.unsynced(session, prepared.targets) == [("orders", 1)]
    Sequences.synced(session, "orders", 1, first.rounds[0][0].last_sequence, EPOCH)
    after = commit_idempotent(body, prepared, session)
    (written,) = after.rounds[0]
    assert written is not lost and lost.state is State.DEAD
    assert written.data is not None and len(decode_batch(written.data).records) == 5
    assert written.base_sequence == first.rounds[0][0].last_sequence + 1
    ack_all(session, after.rounds[0])
    assert answer_codes(after) == [ErrorCode.NONE]


def test_end_txn_waits_for_the_producers_unanswered_writes() -> None:
    """The proxy may answer a Produce at its deadline while one of its routed
    writes is still unanswered. The client's EndTxn must not overtake that
    write (KIP-98: a transaction's markers follow its records): it is held
    until the write is answered, and only then ends the session's batches."""
    import trio
    import trio.testing

    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    (u,) = first.rounds[0]
    session.sent(u)
    u.slot = trio.Event()
    eos = ExactlyOnce(None, cluster(), RouteStats(), lambda _: None, lambda: [1], 1 << 20)  # type: ignore[arg-type]
    eos.sequences = seqs
    end = et.EndTxnRequest(
        transactional_id="t", producer_id=PID, producer_epoch=EPOCH, committed=False
    )
    events: list[str] = []

    async def main() -> None:
        async def ender() -> None:
            await eos.before_end(end, trio.current_time() + 60)
            events.append("end")

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ender)
                await trio.testing.wait_all_tasks_blocked()
                assert events == []  # held while the write is unanswered
                session.settle(u, ErrorCode.NONE, base_offset=7)
                events.append("answered")
                u.slot.set()

    trio.run(main)
    assert events == ["answered", "end"]

    async def again() -> None:  # nothing unanswered now: not held
        with trio.fail_after(10):
            await eos.before_end(end, trio.current_time() + 60)

    trio.run(again)


def test_a_batch_refused_for_good_between_does_not_hide_an_earlier_one_to_retry() -> None:
    """Three batches of a partition, their records moved to three partitions: the
    first fails with an error the client retries, the second is refused for good
    (MESSAGE_TOO_LARGE), the third is written. A broker would never have written
    the third before the first; librdkafka takes the third's success for the
    first's (implicit acknowledgement), so the third is not said written while the
    first is to be sent again (found by test_proxy_model: the first's records
    were taken as written and were never)."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    _, second = plan(seqs, request({0: [_to(2, 5, 5)]}))
    _, third = plan(seqs, request({0: [_to(3, 5, 10)]}))
    session.sent(first.rounds[0][0])
    session.settle(first.rounds[0][0], ErrorCode.NOT_LEADER_OR_FOLLOWER)
    session.sent(second.rounds[0][0])
    session.settle(second.rounds[0][0], ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    ack_all(session, third.rounds[0])
    assert answer_codes(first) == [ErrorCode.NOT_LEADER_OR_FOLLOWER]
    assert answer_codes(second) == [ErrorCode.MESSAGE_TOO_LARGE]
    assert answer_codes(third) == [ErrorCode.REQUEST_TIMED_OUT]
    # The client sends the first again (written now), then the third: written.
    _, retry_first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    ack_all(session, retry_first.rounds[0])
    _, retry_third = plan(seqs, request({0: [_to(3, 5, 10)]}))
    assert retry_third.rounds == []
    assert answer_codes(retry_first) == answer_codes(retry_third) == [ErrorCode.NONE]


def test_a_batch_told_to_retry_then_refused_for_good_holds_back_the_later() -> None:
    """The client hears its first batch failed with an error it retries; before
    it sends it again, the proxy writes the batch's upstream batch again (ahead
    of another client partition's records bound to the same partition) and it
    is refused for good. The client still holds the first batch for a retry: the
    second, written meanwhile, is not said written before the client has heard
    the first's refusal (librdkafka would take the second's success for the
    first's, whose records are in no log; found by test_proxy_model)."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    _, second = plan(seqs, request({0: [_to(2, 5, 5)]}))
    (early,) = first.rounds[0]
    session.sent(early)
    session.settle(early, ErrorCode.NOT_ENOUGH_REPLICAS)
    assert answer_codes(first) == [ErrorCode.NOT_ENOUGH_REPLICAS]  # the client will retry it
    _, other = plan(seqs, request({3: [_to(1, 5, 0)]}))
    assert other.rounds[0] == [early]  # written again first
    session.sent(early)
    session.settle(early, ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    ack_all(session, second.rounds[0])
    assert answer_codes(second) == [ErrorCode.REQUEST_TIMED_OUT]
    # The client sends the first again and hears it refused; then the second:
    # written (its records are not written again).
    _, retry_first = plan(seqs, request({0: [_to(1, 5, 0)]}))
    assert retry_first.rounds == [] and answer_codes(retry_first) == [ErrorCode.MESSAGE_TOO_LARGE]
    _, retry_second = plan(seqs, request({0: [_to(2, 5, 5)]}))
    assert retry_second.rounds == [] and answer_codes(retry_second) == [ErrorCode.NONE]


def _split_to(targets: tuple[int, ...], n: int, seq: int) -> bytes:
    """A client batch of ``n`` records a target, its keys hashing to ``targets`` (of 6)."""
    records = []
    for target in targets:
        keys = [k for k in (b"key-%d" % i for i in range(400)) if murmur2_partition(k, 6) == target]
        records += [(1_000 + i, keys[i], b"v%d-%d" % (target, i), []) for i in range(n)]
    return encode_batch(records, producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)


def test_a_later_batch_waits_until_the_client_has_heard_an_earlier_ones_refusal() -> None:
    """The first batch's records go to partitions 1 and 2: the part for 1 is
    refused for good, the part for 2 fails and is written again ahead of
    another client batch (in flight when the first is answered, at its
    deadline: REQUEST_TIMED_OUT, which the client retries). The second batch,
    written, answered before it, must not be said written: librdkafka, which
    hears the first's retriable error first, would take the second's success
    for the first's, whose part for 1 is in no log (found by test_proxy_model).
    It is said written once the client has heard the first refused."""
    seqs = Sequences()
    seqs.born(PID, EPOCH)
    session, first = plan(seqs, request({0: [_split_to((1, 2), 3, 0)]}))
    _, second = plan(seqs, request({0: [_to(3, 5, 6)]}))
    a1, a2 = sorted(first.rounds[0], key=lambda u: u.partition)
    for u in (a1, a2):
        session.sent(u)
    session.settle(a1, ErrorCode.MESSAGE_TOO_LARGE, retriable=False)
    session.settle(a2, ErrorCode.NETWORK_EXCEPTION)
    ack_all(session, second.rounds[0])
    assert answer_codes(second) == [ErrorCode.REQUEST_TIMED_OUT]
    _, other = plan(seqs, request({4: [_to(2, 5, 0)]}))
    assert other.rounds[0] == [a2]
    session.sent(a2)
    assert answer_codes(first) == [ErrorCode.REQUEST_TIMED_OUT]  # its deadline: a2 unanswered
    ack_all(session, [a2])
    _, retry_first = plan(seqs, request({0: [_split_to((1, 2), 3, 0)]}))
    assert answer_codes(retry_first) == [ErrorCode.MESSAGE_TOO_LARGE]
    _, retry_second = plan(seqs, request({0: [_to(3, 5, 6)]}))
    assert retry_second.rounds == [] and answer_codes(retry_second) == [ErrorCode.NONE]
