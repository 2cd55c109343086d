"""The producer's core without I/O: its public methods, driven as a driver would,
with a metadata cache filled from a Metadata answer and the driver's effects
(wake, memory freed, transaction requests) recorded instead of performed."""

from __future__ import annotations

from typing import Any

import pytest
from sdk_metadata import one_topic_cache

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k00_produce as produce
from trafka.sdk.accumulator import RECORD_OVERHEAD, ProducerBatch
from trafka.sdk.config import ProducerConfig, make_config
from trafka.sdk.errors import ClientClosedError, OutcomeUnknownError, ProducerFencedError
from trafka.sdk.partitioners import murmur2_partition
from trafka.sdk.producer_core import ProducerCore
from trafka.sdk.transactions import Kind, TxnRequest

PARTITIONS = 3


class Effects:
    """What the core asked of its driver."""

    def __init__(self) -> None:
        self.wakes = 0
        self.freed = 0
        self.requests: list[TxnRequest] = []

    def core(self, leader_epoch: int = 0, **settings: Any) -> ProducerCore:
        config = make_config(ProducerConfig, None, {"bootstrap_servers": "h:1", **settings})
        now = [0.0]
        return ProducerCore(
            config,
            one_topic_cache("t", PARTITIONS, leader_epoch=leader_epoch),
            lambda: now[0],
            wake=self.wake,
            memory_freed=self.memory_freed,
            start_request=self.requests.append,
        )

    def wake(self) -> None:
        self.wakes += 1

    def memory_freed(self) -> None:
        self.freed += 1


def open_batch(core: ProducerCore, value: bytes, key: bytes | None = None) -> ProducerBatch:
    """The general path for a record the hot path has no batch for, as a driver takes it."""
    assert core.append_hot("t", value, key) is True
    placed = core.open_batch("t", value, key, now=1.0)
    assert placed is not None
    handle, joined = placed
    assert not joined
    return handle.batch


def test_the_hot_path_fills_the_batch_the_general_path_opened() -> None:
    core = Effects().core(linger_ms=1000)
    assert core.hot_path
    batch = open_batch(core, b"first")
    for i in range(5):
        assert core.append_hot("t", b"v%d" % i, None) is batch
    assert [r[2] for r in batch.records] == [b"first", b"v0", b"v1", b"v2", b"v3", b"v4"]
    # Both paths charged buffer.memory through the one append (append_to).
    assert core.acc.used_memory == batch.memory > 0


def test_keyed_bytes_records_go_to_their_murmur2_partitions_batch() -> None:
    core = Effects().core()
    batch = open_batch(core, b"v", b"key-1")
    again = core.append_hot("t", b"w", b"key-1")
    assert again is batch
    assert [r[1] for r in batch.records] == [b"key-1", b"key-1"]
    assert batch.partition == murmur2_partition(b"key-1", PARTITIONS)
    # A key of another partition, which has no batch yet: the general path opens one.
    other = next(
        k
        for k in (b"key-%d" % i for i in range(2, 100))
        if murmur2_partition(k, PARTITIONS) != batch.partition
    )
    assert core.append_hot("t", b"w", other) is True


def test_a_full_batch_sends_the_next_record_to_the_general_path() -> None:
    core = Effects().core(batch_size=RECORD_OVERHEAD * 8)
    batch = open_batch(core, b"x")
    while not batch.full:
        got = core.append_hot("t", b"x", None)
        if got is True:
            break
        assert got is batch
    assert core.append_hot("t", b"x", None) is True


def test_misuse_is_refused_by_prepare() -> None:
    core = Effects().core()
    assert core.prepare("t", b"v", None, None, None, None) == ("t", b"v", None, None, (), None)
    with pytest.raises(ValueError, match="topic"):
        core.prepare("no/topic", b"v", None, None, None, None)
    with pytest.raises(TypeError, match="timestamp_ms"):
        core.prepare("t", b"v", None, None, None, "now")


def test_an_acks_0_answer_completes_the_batches() -> None:
    core = Effects().core(acks=0)
    batch = open_batch(core, b"v")
    assert not core.on_produce_response([batch], None, now=2.0)
    assert batch.done and batch.error is None and core.acc.used_memory == 0


def test_a_leadership_error_retries_and_asks_for_metadata() -> None:
    effects = Effects()
    core = effects.core(enable_idempotence=False)
    batch = open_batch(core, b"v")
    R = produce.ProduceResponse
    answer = R(
        responses=[
            R.TopicProduceResponse(
                name="t",
                partition_responses=[
                    R.PartitionProduceResponse(
                        index=batch.partition, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
                    )
                ],
            )
        ]
    )
    assert core.acc.drain(2.0, 1, core.metadata.leader_for) == [batch]
    assert core.on_produce_response([batch], answer, now=2.0)  # refresh the metadata
    assert not batch.done and batch.attempts == 1


def test_a_leader_hint_naming_a_new_broker_moves_the_partition_at_once() -> None:
    """KIP-951: a NOT_LEADER_OR_FOLLOWER answer (Produce v10+) names the new leader
    (``current_leader``) and, in ``node_endpoints``, the address of each leader it
    names, so that the client "can update its metadata cache" and send there at
    once. A broker the client has not met yet is then known by that address."""
    effects = Effects()
    core = effects.core(enable_idempotence=False)
    batch = open_batch(core, b"v")
    md = core.metadata
    epoch = md.leader_epoch("t", batch.partition)
    assert md.broker(7) is None
    R = produce.ProduceResponse
    answer = R(
        responses=[
            R.TopicProduceResponse(
                name="t",
                partition_responses=[
                    R.PartitionProduceResponse(
                        index=batch.partition,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        current_leader=R.LeaderIdAndEpoch(leader_id=7, leader_epoch=epoch + 1),
                    )
                ],
            )
        ],
        node_endpoints=[R.NodeEndpoint(node_id=7, host="b7.example", port=9097, rack="r2")],
    )
    assert core.acc.drain(2.0, 1, md.leader_for) == [batch]
    core.on_produce_response([batch], answer, now=2.0)
    assert md.leader_for("t", batch.partition) == 7
    assert (md.broker(7).host, md.broker(7).port, md.broker(7).rack) == ("b7.example", 9097, "r2")
    assert not batch.done and batch.attempts == 1  # retried, now towards broker 7


def not_leader_answer(
    partition: int, leader: int, epoch: int, endpoints: tuple[int, ...] = ()
) -> produce.ProduceResponse:
    """A Produce v10+ answer: NOT_LEADER_OR_FOLLOWER with a KIP-951 leader hint
    (``current_leader``) and the ``node_endpoints`` of ``endpoints``."""
    R = produce.ProduceResponse
    return R(
        responses=[
            R.TopicProduceResponse(
                name="t",
                partition_responses=[
                    R.PartitionProduceResponse(
                        index=partition,
                        error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        current_leader=R.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch),
                    )
                ],
            )
        ],
        node_endpoints=[R.NodeEndpoint(node_id=n, host=f"b{n}", port=9090 + n) for n in endpoints],
    )


def test_an_applied_leader_hint_resends_at_once_to_the_new_leader_and_still_refreshes() -> None:
    """KIP-951: when the answer's hint advances the client's view of the leader,
    the batch is retried at once at the new leader, without retry.backoff.ms;
    the client still asks for a metadata refresh (as Java's Sender does after
    every NOT_LEADER_OR_FOLLOWER). Failing again at that leader backs off."""
    core = Effects().core(enable_idempotence=False, retry_backoff_ms=1000)
    batch = open_batch(core, b"v")
    md = core.metadata
    epoch = md.leader_epoch("t", batch.partition)
    assert core.acc.drain(2.0, 1, md.leader_for) == [batch]
    answer = not_leader_answer(batch.partition, 7, epoch + 1, endpoints=(7,))
    assert core.on_produce_response([batch], answer, now=2.0)  # the driver nudges its refresher
    assert md.update_requested
    assert md.leader_for("t", batch.partition) == 7
    # Sent again to broker 7 at the same instant: no backoff.
    assert core.acc.drain(2.0, 7, md.leader_for) == [batch]
    assert batch.attempts == 2
    # Broker 7 answers the same: the hint moves nothing now, so the retry backs off.
    core.on_produce_response([batch], not_leader_answer(batch.partition, 7, epoch + 1), now=3.0)
    assert md.leader_for("t", batch.partition) == 7
    assert core.acc.drain(3.0, 7, md.leader_for) == []
    assert core.acc.drain(4.5, 7, md.leader_for) == [batch]  # after the backoff (1 s, +-20 %)


def test_every_batch_sent_under_the_older_epoch_skips_its_backoff() -> None:
    """Java's ``RecordAccumulator.shouldBackoff`` (KIP-951, KAFKA-15415): a retried
    batch does not wait out retry.backoff.ms once its partition's leader epoch is
    newer than the one it was sent under. Two batches of one partition in flight
    both fail at the old leader: the first answer's hint moves the partition, the
    second's then applies nothing, and both go to the new leader at once."""
    core = Effects().core(enable_idempotence=False, retry_backoff_ms=1000, linger_ms=0)
    md = core.metadata
    first = open_batch(core, b"a", key=b"k")
    assert core.acc.drain(2.0, 1, md.leader_for) == [first]
    second = open_batch(core, b"b", key=b"k")
    assert second is not first and second.partition == first.partition
    assert core.acc.drain(2.0, 1, md.leader_for) == [second]
    epoch = md.leader_epoch("t", first.partition)
    hint = not_leader_answer(first.partition, 7, epoch + 1, endpoints=(7,))
    core.on_produce_response([first], hint, now=2.0)
    core.on_produce_response([second], not_leader_answer(first.partition, 7, epoch + 1), now=2.0)
    assert md.leader_for("t", first.partition) == 7
    assert core.acc.drain(2.0, 7, md.leader_for) == [first]
    core.on_produce_response([first], None, now=2.0)  # (acks=0: done)
    assert core.acc.drain(2.0, 7, md.leader_for) == [second]


def test_a_newer_leader_found_later_ends_the_backoff() -> None:
    """A NOT_LEADER_OR_FOLLOWER without a hint backs off; a newer leader epoch
    learnt meanwhile (a metadata refresh, another answer's hint) ends the wait,
    as in Java's accumulator."""
    core = Effects().core(enable_idempotence=False, retry_backoff_ms=1000)
    md = core.metadata
    batch = open_batch(core, b"v")
    epoch = md.leader_epoch("t", batch.partition)
    assert core.acc.drain(2.0, 1, md.leader_for) == [batch]
    core.on_produce_response([batch], not_leader_answer(batch.partition, -1, -1), now=2.0)
    assert core.acc.drain(2.1, 1, md.leader_for) == []  # backing off
    md.learn_endpoints([produce.ProduceResponse.NodeEndpoint(node_id=7, host="b7", port=9097)])
    assert md.on_leader_hint("t", batch.partition, 7, epoch + 1)
    assert core.acc.drain(2.1, 7, md.leader_for) == [batch]


@pytest.mark.parametrize(
    ("epoch_step", "endpoints"),
    [(0, (7,)), (-1, (7,)), (1, ())],
    ids=["same-epoch", "older-epoch", "no-endpoint"],
)
def test_a_leader_hint_that_does_not_apply_keeps_the_leader_and_refreshes(
    epoch_step: int, endpoints: tuple[int, ...]
) -> None:
    """KIP-951 (as Java's ``Metadata.updatePartitionLeadership``): a hint whose epoch
    is not newer than the cached one, or that names a broker of unknown endpoint,
    changes nothing; the metadata refresh finds the leader, and the batch backs
    off as before KIP-951."""
    core = Effects().core(leader_epoch=5, enable_idempotence=False, retry_backoff_ms=1000)
    batch = open_batch(core, b"v")
    md = core.metadata
    epoch = md.leader_epoch("t", batch.partition)
    assert core.acc.drain(2.0, 1, md.leader_for) == [batch]
    answer = not_leader_answer(batch.partition, 7, epoch + epoch_step, endpoints)
    assert core.on_produce_response([batch], answer, now=2.0)
    assert md.update_requested
    assert md.leader_for("t", batch.partition) == 1
    assert md.leader_epoch("t", batch.partition) == epoch
    assert core.acc.drain(2.0, 1, md.leader_for) == []  # backing off
    assert core.acc.drain(3.5, 1, md.leader_for) == [batch]


def test_a_fatal_error_fails_buffered_records_and_every_later_append() -> None:
    effects = Effects()
    core = effects.core()
    batch = open_batch(core, b"v")
    core.set_fatal(ProducerFencedError(ErrorCode.PRODUCER_FENCED, "fenced"))
    assert batch.done and isinstance(batch.error, ProducerFencedError)
    assert effects.freed == 1
    assert core.append_hot("t", b"w", None) is False
    assert core.open_batch("t", b"w", None, now=3.0) is None
    with pytest.raises(ProducerFencedError):
        core.check_open()


def test_close_fails_what_is_buffered() -> None:
    core = Effects().core()
    batch = open_batch(core, b"v")
    core.close(ClientClosedError("closed"))
    assert isinstance(batch.error, ClientClosedError)
    with pytest.raises(ClientClosedError):
        core.check_open()


def test_close_tells_a_sent_record_its_outcome_is_unknown_never_that_it_was_not_sent() -> None:
    # The order of a close racing the sender, fixed: one batch is drained (its
    # Produce request written, unanswered), one retried after an attempt that
    # got no answer, one never sent; then the core closes.
    core = Effects().core(enable_idempotence=False, linger_ms=1000)
    acc = core.acc
    sent = acc.append("t", 0, 0, None, b"sent", ())
    retried = acc.append("t", 1, 0, None, b"retried", ())
    assert sent is not None and retried is not None
    drained = acc.drain(2.0, 1, core.metadata.leader_for)
    assert {b.partition for b in drained} == {0, 1}
    assert acc.retry_or_fail(retried.batch, ConnectionError("lost"), now=2.0)
    unsent = acc.append("t", 2, 0, None, b"unsent", ())
    assert unsent is not None
    core.close(ClientClosedError("closed"))
    # Written and unanswered (or about to be written again): it may be in the log.
    assert isinstance(sent.exception(), OutcomeUnknownError)
    assert isinstance(retried.exception(), OutcomeUnknownError)
    assert not isinstance(sent.exception(), ClientClosedError)
    # Never sent: certainly not in the log.
    assert isinstance(unsent.exception(), ClientClosedError)
    # The answer that comes afterwards changes nothing: a record resolves once.
    core.on_produce_response(drained, None, now=3.0)
    assert isinstance(sent.exception(), OutcomeUnknownError)


def test_closing_refuses_records_before_the_last_flush() -> None:
    core = Effects().core()
    batch = open_batch(core, b"v")
    core.stop_appends()
    assert core.append_hot("t", b"w", None) is False
    assert core.open_batch("t", b"w", None, now=1.0) is None
    with pytest.raises(ClientClosedError):
        core.check_open()
    assert [r[2] for r in batch.records] == [b"v"] and not batch.done


def test_an_idempotent_producer_asks_for_its_id_with_its_first_batch() -> None:
    effects = Effects()
    core = effects.core()  # idempotence is the default
    core.step(now=1.0)
    assert effects.requests == []  # nothing to send yet
    open_batch(core, b"v")
    core.step(now=1.0)
    assert [r.kind for r in effects.requests] == [Kind.INIT_PRODUCER_ID]
    core.step(now=1.0)  # one request at a time
    assert len(effects.requests) == 1 and core.request_busy
    core.on_request_failed(effects.requests[0], KafkaError(ErrorCode.NOT_COORDINATOR), now=1.0)
    core.request_done()
    assert not core.request_busy
