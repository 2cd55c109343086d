"""The dead-letter outbox of a cluster's share-partition leader
(:mod:`trafka.brokerlite.shares.dead_letter_outbox`), without sockets: which
Produce requests go where, what is retried, and when a job ends.

The rules are Kafka 4.4's ``ShareGroupDLQStateManager`` ``ProduceRequestHandler``'s
(read from its classes): ``acks=-1`` with a 30 s timeout; NOT_LEADER_OR_FOLLOWER,
a lost connection (NETWORK_EXCEPTION) and REQUEST_TIMED_OUT retried, the leader
looked up again; other errors end the write; a run's records go in batches that
fit the DLQ topic's ``max.message.bytes``, one request at a time. The cluster
behaviour end to end is test_cluster_share_dead_letters.py's.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite.shares.dead_letter_outbox import (
    GIVE_UP_AFTER_MS,
    RETRY_BACKOFF_MS,
    DeadLetterOutbox,
    LetterJob,
)
from trafka.brokerlite.shares.dead_letters import DeadLetterPort, DeadLetters
from trafka.brokerlite.shares.partition import ARCHIVING, Run, SharePartition
from trafka.brokerlite.shares.persister import RemotePersister
from trafka.brokerlite.shares.share_config import DefaultShareConfig
from trafka.brokerlite.storage.log_manager import LogManager
from trafka.codec.errors import ErrorCode
from trafka.codec.records import decode_batch, encode_batch

NOW = 1_000_000
KEY = ("g", "jobs", 4)


@pytest.fixture
def logs(tmp_path: Path) -> Iterator[LogManager]:
    with LogManager(tmp_path, now_ms=NOW) as manager:
        manager.create_topic("dlq.jobs", 3, {}, now_ms=NOW)
        yield manager


def records(
    n: int, size: int = 10
) -> list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
    return [(NOW, None, bytes([i]) * size, []) for i in range(n)]


def outbox_of(
    logs: LogManager, leaders: dict[tuple[str, int], int | None], limit: int = 1 << 20
) -> tuple[DeadLetterOutbox, list[LetterJob]]:
    def batches(rows: list[object], _topic: str) -> list[bytes]:
        out, part = [], []
        for row in rows:
            part.append(row)
            if len(encode_batch(part)) > limit:
                out.append(encode_batch(part[:-1]))
                part = [row]
        return [*out, encode_batch(part)]

    box = DeadLetterOutbox(logs, lambda t, p: leaders.get((t, p)), batches)
    done: list[LetterJob] = []
    box.on_done = done.append
    return box, done


def job(first: int, last: int, sp: SharePartition | None = None, rows: int = 2) -> LetterJob:
    run = Run(first, last, ARCHIVING, 1, rejected=True)
    return LetterJob(
        key=KEY, sp=sp or SharePartition(0), run=run, dlq_topic="dlq.jobs", records=records(rows)
    )


def test_a_job_goes_to_the_leader_of_p_mod_partitions_with_acks_all(logs: LogManager) -> None:
    box, done = outbox_of(logs, {("dlq.jobs", 1): 7})
    box.add(job(0, 1))
    (send,) = box.take(NOW)
    assert send.node == 7  # partition 4 % 3
    assert (send.body.acks, send.body.timeout_ms) == (-1, 30_000)
    (topic,) = send.body.topic_data
    assert topic.topic_id == logs.topic("dlq.jobs").topic_id
    (data,) = topic.partition_data
    assert data.index == 1
    assert [r[3] for r in decode_batch(data.records).records] == [b"\0" * 10, b"\1" * 10]
    assert box.take(NOW) == []  # one request at a time
    assert done == []  # not done before the answer
    box.answered(send, ErrorCode.NONE, "", NOW)
    assert done == [send.job] and send.job.written
    assert not box.busy(KEY)


def test_not_leader_is_sent_again_to_the_new_leader(logs: LogManager) -> None:
    leaders: dict[tuple[str, int], int | None] = {("dlq.jobs", 1): 7}
    box, done = outbox_of(logs, leaders)
    box.add(job(0, 1))
    (send,) = box.take(NOW)
    box.answered(send, ErrorCode.NOT_LEADER_OR_FOLLOWER, "", NOW)
    assert done == [] and box.next_retry() == NOW + RETRY_BACKOFF_MS
    assert box.take(NOW) == []
    leaders[("dlq.jobs", 1)] = None  # (an election under way)
    assert box.take(NOW + RETRY_BACKOFF_MS) == []
    leaders[("dlq.jobs", 1)] = 8
    (again,) = box.take(NOW + 2 * RETRY_BACKOFF_MS)
    assert again.node == 8 and again.body.topic_data == send.body.topic_data
    box.answered(again, ErrorCode.NONE, "", NOW + 2 * RETRY_BACKOFF_MS)
    assert done == [send.job] and send.job.written


def test_a_lost_connection_is_retried_until_the_time_is_up(logs: LogManager) -> None:
    box, done = outbox_of(logs, {("dlq.jobs", 1): 7})
    box.add(job(0, 1))
    now = NOW
    while not done:
        (send,) = box.take(now)
        box.answered(send, ErrorCode.NETWORK_EXCEPTION, "closed", now)
        now += RETRY_BACKOFF_MS
    assert now - RETRY_BACKOFF_MS - NOW >= GIVE_UP_AFTER_MS
    assert not done[0].written  # given up: the share-partition archives all the same


def test_another_error_ends_the_job_at_once(logs: LogManager) -> None:
    box, done = outbox_of(logs, {("dlq.jobs", 1): 7})
    box.add(job(0, 1))
    (send,) = box.take(NOW)
    box.answered(send, ErrorCode.RECORD_LIST_TOO_LARGE, "", NOW)
    assert done == [send.job] and not send.job.written


def test_batches_go_in_order_one_after_the_other(logs: LogManager) -> None:
    box, done = outbox_of(logs, {("dlq.jobs", 1): 7}, limit=200)
    box.add(job(0, 9, rows=10))
    values: list[bytes] = []
    while not done:
        (send,) = box.take(NOW)
        (data,) = send.body.topic_data[0].partition_data
        assert len(data.records) <= 200
        values += [r[3] for r in decode_batch(data.records).records]
        box.answered(send, ErrorCode.NONE, "", NOW)
    assert values == [bytes([i]) * 10 for i in range(10)]
    assert done[0].sent > 1


def test_a_topic_not_created_yet_is_waited_for(logs: LogManager) -> None:
    box, done = outbox_of(logs, {("dlq.new", 0): 5})
    box.add(
        LetterJob(
            key=KEY,
            sp=SharePartition(0),
            run=Run(0, 0, ARCHIVING, 1),
            dlq_topic="dlq.new",
            records=records(1),
        )
    )
    assert box.take(NOW) == [] and done == []
    logs.create_topic("dlq.new", 2, {}, now_ms=NOW)
    (send,) = box.take(NOW + RETRY_BACKOFF_MS)
    assert send.node == 5 and send.body.topic_data[0].partition_data[0].index == 0


def test_only_offsets_not_on_their_way_are_sent_again(logs: LogManager) -> None:
    """A run of ARCHIVING records that grew while its first part was being written."""
    box, _done = outbox_of(logs, {})
    sp, other = SharePartition(0), SharePartition(0)
    box.add(job(2, 4, sp))
    grown = Run(0, 9, ARCHIVING, 1)
    assert [(r.first, r.last) for r in box.unsent(KEY, sp, grown)] == [(0, 1), (5, 9)]
    # (a share-partition read again is another object: nothing of it is on its way)
    assert [(r.first, r.last) for r in box.unsent(KEY, other, grown)] == [(0, 9)]


# -- the share-partition's side: when a run's dead letters go, when it is archived --------


def cluster_letters(logs: LogManager) -> tuple[DeadLetters, RemotePersister, SharePartition]:
    """A cluster's dead-letter writer over one share-partition (KEY) of ``jobs``
    with ARCHIVING offsets 0-1 (delivered too often), its state not written."""
    logs.create_topic("jobs", 5, {}, now_ms=NOW)
    logs.alter_configs("dlq.jobs", {"errors.deadletterqueue.group.enable": "true"})

    def unused(*_args: object) -> None:
        raise AssertionError("a cluster neither appends nor creates here")

    port = DeadLetterPort(
        enabled=lambda: True,
        create=unused,
        append=unused,
        now_ms=lambda: NOW,
        leader=lambda _t, _p: 7,
    )
    letters = DeadLetters(logs, port)
    persister = RemotePersister(lambda _t, _p: 0)
    persister.on_written = lambda key, tickets, code, _now: letters.settled(
        key, tickets, written=code == ErrorCode.NONE
    )
    sp = SharePartition(0, delivery_count_limit=2, runs=[Run(0, 1, ARCHIVING, 2)])
    letters.bind({KEY: sp}, persister)
    return letters, persister, sp


def write_state(persister: RemotePersister, logs: LogManager, sp: SharePartition) -> Any:
    """Queue ``sp``'s snapshot, as the fetcher's write does; the request taken."""
    topic_id = str(logs.topic("jobs").topic_id)
    entry = {"kind": "partition", "group": KEY[0], "topic": KEY[1], "partition": KEY[2]}
    persister.write([{**entry, "topic_id": topic_id, **sp.snapshot()}])
    (request,) = persister.take(NOW)
    return request


def test_dead_letters_wait_for_the_write_of_their_archiving_state(logs: LogManager) -> None:
    """KIP-1191: ARCHIVING is written before the dead letter (a lock expiry at the
    limit changes the state at once, so its write must settle first)."""
    letters, persister, sp = cluster_letters(logs)
    config = DefaultShareConfig(dlq_topic="dlq.jobs")
    request = write_state(persister, logs, sp)
    assert not letters.flush({KEY: sp}, lambda _g: config)
    assert letters.outbox is not None and not letters.outbox.busy(KEY)
    persister.answered(request, ErrorCode.NONE, None, NOW)
    assert letters.due
    letters.flush({KEY: sp}, lambda _g: config)
    (send,) = letters.outbox.take(NOW)
    assert [r.state for r in sp.runs()] == [ARCHIVING]  # (not archived before the answer)
    assert not letters.idle(KEY)  # (not forgotten while it is on its way)
    letters.outbox.answered(send, ErrorCode.NONE, "", NOW)
    assert sp.start_offset == 2 and letters.due  # archived: written at the next tick
    assert letters.idle(KEY)


def test_a_run_of_a_share_partition_read_again_is_not_archived_by_the_old_write(
    logs: LogManager,
) -> None:
    """Leadership lost and found again while a write was on its way: the share-partition
    read again keeps its ARCHIVING records, and writes their dead letters itself."""
    letters, persister, sp = cluster_letters(logs)
    config = DefaultShareConfig(dlq_topic="dlq.jobs")
    letters.flush({KEY: sp}, lambda _g: config)
    assert letters.outbox is not None
    (send,) = letters.outbox.take(NOW)
    again = SharePartition(0, delivery_count_limit=2, runs=[Run(0, 1, ARCHIVING, 2)])
    letters.bind({KEY: again}, persister)
    letters.outbox.answered(send, ErrorCode.NONE, "", NOW)
    assert [r.state for r in again.runs()] == [ARCHIVING]
    letters.flush({KEY: again}, lambda _g: config)
    assert letters.outbox.busy(KEY)
