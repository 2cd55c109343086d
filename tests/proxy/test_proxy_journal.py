"""The placement journal (exactly once across a restart of the proxy), without
sockets: what a restarted proxy does with a retried batch the journal knows
(written upstream batches left out, the rest written afresh), retries that
split otherwise, renumbered batches journaled again, and the file itself (torn
last line, newest record wins, rewritten when it grows, group commit)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import trio
from proxy_helpers import keyed, request

from trafka.codec.errors import ErrorCode
from trafka.codec.records import decode_batch, encode_batch
from trafka.proxy.keyrouting import journal as journal_module
from trafka.proxy.keyrouting.idempotent_plan import (
    commit_idempotent,
    idempotent_answer,
    prepare_idempotent,
)
from trafka.proxy.keyrouting.journal import Journal, decode, encode
from trafka.proxy.keyrouting.sequences import Placement, Sequences, Session
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.topics import Topics
from trafka.sdk.partitioners import murmur2_partition

PID, EPOCH = 42, 3


def cluster(partitions: int = 6) -> Topics:
    return Topics({"orders": partitions}, {("orders", p): 1 + p % 3 for p in range(partitions)})


def batch(n: int, seq: int) -> bytes:
    return encode_batch(keyed(n, keys=29), producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)


def place(
    session: Session, body: Any, *, topics: Topics | None = None, journal: dict[Any, Any] | None = None,
    leaders: dict[int, int] | None = None, stats: RouteStats | None = None,
) -> Any:  # fmt: skip
    """Prepare (leaders asked first, as the driver does), then number."""
    recovered = None
    if journal is not None:

        def recovered(topic: str, partition: int, base: int) -> Placement | None:
            return journal.get((PID, EPOCH, topic, partition, base))

        for placement in list(journal.values()):
            for x, _ in placement.targets:
                if ("orders", x) in Sequences.unsynced(session, [("orders", x)]):
                    Sequences.synced(
                        session, "orders", x, (leaders or {}).get(x, -1), EPOCH,
                        list(journal.items()),
                    )  # fmt: skip
    prepared = prepare_idempotent(
        body, session=session, topics=topics or cluster(), hash_name="murmur2",
        stats=stats or RouteStats(), recovered=recovered,
    )  # fmt: skip
    assert prepared is not None
    for topic, partition in Sequences.unsynced(session, prepared.targets):
        Sequences.synced(
            session, topic, partition, (leaders or {}).get(partition, -1), EPOCH,
            list((journal or {}).items()),
        )  # fmt: skip
    plan = commit_idempotent(body, prepared, session)
    if journal is not None:  # journaled again before anything is written
        journal.update(session.take_stale())
    return plan


def _template() -> Any:
    from trafka.codec.messages import k00_produce as pm

    return pm.ProduceResponse()


def placed_before_a_restart(n: int, seq: int) -> tuple[Any, Any, Placement]:
    """A batch placed and journaled by a proxy born with the producer: its
    request, its plan (upstream batches from sequence 0) and its placement."""
    before = Sequences(journaled=True)
    before.born(PID, EPOCH)
    old = before.session(PID, EPOCH, 0)
    assert old is not None
    body = request({0: [batch(n, seq)]})
    first = place(old, body)
    (journaled,) = old.take_journal()
    return body, first, journaled.placement()


def fresh_session() -> Session:
    """The producer's session in a proxy just started."""
    session = Sequences(journaled=True).session(PID, EPOCH, 0)
    assert session is not None
    return session


def test_a_restarted_proxy_writes_again_only_what_the_leaders_lack() -> None:
    # Before the restart: a batch placed, its placement journaled, its upstream
    # batches written; the leaders got some of them before the proxy died.
    body, first, placement = placed_before_a_restart(120, 7)
    assert placement.count == 120
    assert {x for x, _ in placement.targets} == {u.partition for u in first.rounds[0]}
    ups = first.rounds[0]
    landed = {u.partition: u.last_sequence for u in ups[: len(ups) // 2]}
    missing = {u.partition for u in ups[len(ups) // 2 :]}
    # After: a fresh proxy; the leaders know the sequences of what landed.
    session = fresh_session()
    stats = RouteStats()
    retry = place(
        session, body, journal={(PID, EPOCH, "orders", 0, 7): placement},
        leaders=landed, stats=stats,
    )  # fmt: skip
    (again,) = retry.rounds
    assert {u.partition for u in again} == missing
    for u in again:  # written afresh, after what the leader has
        assert u.base_sequence == 0
        assert len(decode_batch(u.data).records) == next(
            x.count for x in ups if x.partition == u.partition
        )
    assert stats.batches_recovered == 1
    assert stats.records_not_rewritten == sum(u.count for u in ups[: len(ups) // 2])
    for u in again:
        session.sent(u)
        session.settle(u, ErrorCode.NONE, base_offset=5)
    (answer,) = idempotent_answer(retry, _template()).responses[0].partition_responses
    assert answer.error_code == 0  # the client hears its batch is written, once
    # The batch is journaled again: what landed before, and its new batches.
    (rejournaled,) = session.take_journal()
    assert rejournaled.placement().targets == tuple(
        sorted([*landed.items(), *((u.partition, u.last_sequence) for u in again)])
    )


def test_a_retry_whose_moved_records_landed_names_no_offset() -> None:
    # Before the restart, the records the batch moved to other partitions were
    # written; those it kept in its own partition were not. After the restart
    # these are all that is written, at the head of an upstream batch of the
    # client's partition, whose base offset is not the client batch's:
    # librdkafka gives record i the offset base + i (CI at f571e52: 23 delivery
    # reports named places holding other records).
    body, first, placement = placed_before_a_restart(120, 7)
    ups = first.rounds[0]
    own = next(u for u in ups if u.partition == 0)
    landed = {u.partition: u.last_sequence for u in ups if u is not own}
    session = fresh_session()
    retry = place(session, body, journal={(PID, EPOCH, "orders", 0, 7): placement}, leaders=landed)
    (again,) = retry.rounds
    assert [u.partition for u in again] == [0] and again[0].count == own.count < 120
    for u in again:
        session.sent(u)
        session.settle(u, ErrorCode.NONE, base_offset=500)
    for software in ("librdkafka", "apache-kafka-java"):
        (answer,) = idempotent_answer(retry, _template(), software).responses[0].partition_responses
        assert answer.error_code == 0
        # No record of the 120 is given an offset (librdkafka: base + i < 0).
        assert answer.base_offset + 119 < 0 or answer.base_offset == -1


def test_a_retry_whose_every_part_landed_writes_nothing() -> None:
    body, first, placement = placed_before_a_restart(80, 0)
    leaders = {u.partition: u.last_sequence for u in first.rounds[0]}
    retry = place(
        fresh_session(), body, journal={(PID, EPOCH, "orders", 0, 0): placement}, leaders=leaders
    )
    assert retry.rounds == []
    (answer,) = idempotent_answer(retry, _template()).responses[0].partition_responses
    assert answer.error_code == 0


def test_without_a_journal_record_or_with_a_split_that_changed_the_batch_is_placed_afresh() -> None:
    body, first, placement = placed_before_a_restart(80, 0)
    leaders = {u.partition: u.last_sequence for u in first.rounds[0]}
    # The topic gained partitions: the records would go elsewhere now.
    stats = RouteStats()
    retry = place(
        fresh_session(), body, topics=cluster(8), journal={(PID, EPOCH, "orders", 0, 0): placement},
        leaders=leaders, stats=stats,
    )  # fmt: skip
    assert sum(u.count for u in retry.rounds[0]) == 80 and stats.batches_recovered == 0


def test_renumbered_batches_are_journaled_again() -> None:
    seqs = Sequences(journaled=True)
    seqs.born(PID, EPOCH)
    session = seqs.session(PID, EPOCH, 0)
    assert session is not None
    first = place(session, request({0: [batch(40, 0)]}))
    second = place(session, request({0: [batch(40, 40)]}))
    assert len(session.take_journal()) == 2
    dead = first.rounds[0][0]
    later = next(u for u in second.rounds[0] if u.partition == dead.partition)
    for u in first.rounds[0] + second.rounds[0]:
        session.sent(u)
    session.settle(later, ErrorCode.NETWORK_EXCEPTION)  # failed, to be sent again
    session.settle(dead, ErrorCode.INVALID_RECORD, retriable=False)  # its numbers go to `later`
    assert later.base_sequence == dead.base_sequence
    # Both journaled again: the dead batch's client batch with that target not
    # written (-1: its numbers are `later`'s now, a restarted proxy must not
    # take it as written), and `later`'s at its new numbers.
    gone, again = session.take_journal()
    assert dead in gone.upstream and (dead.partition, -1) in gone.placement().targets
    assert (
        later in again.upstream
        and (dead.partition, later.last_sequence) in again.placement().targets
    )


def _to_zero(n: int, seq: int, first: int) -> bytes:
    """``n`` records (values ``first``...) whose keys all hash to partition 0 (of 6)."""
    keys = [k for k in (b"key-%d" % i for i in range(200)) if murmur2_partition(k, 6) == 0]
    records = [(1_000 + i, keys[i], b"v%d" % (first + i), []) for i in range(n)]
    return encode_batch(records, producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)


def test_a_placement_whose_numbers_were_given_to_others_since_is_not_taken_as_written() -> None:
    """Partition 0's batch is placed and journaled, and lost with the proxy. The
    restarted proxy learns partition 0's last sequence (none) and gives its
    numbers to another client partition's records, which are written. After a
    second restart the first batch's retry finds its journaled placement, and
    the leader's last sequence covers it: it must not be taken as written (the
    first restart journaled it again with partition 0 not written)."""
    before = Sequences(journaled=True)
    before.born(PID, EPOCH)
    first = before.session(PID, EPOCH, 0)
    assert first is not None
    lost = request({0: [_to_zero(2, 0, 0)]})
    place(first, lost)
    journal = {
        (PID, EPOCH, b.topic, b.partition, b.base_sequence): b.placement()
        for b in first.take_journal()
    }
    assert journal[(PID, EPOCH, "orders", 0, 0)].targets == ((0, 1),)
    # Restart: another client partition's records, moved to 0, take sequences 0-1.
    second = fresh_session()
    other = place(second, request({1: [_to_zero(2, 0, 100)]}), journal=journal)
    assert [(u.partition, u.base_sequence, u.count) for u in other.rounds[0]] == [(0, 0, 2)]
    for b in second.take_journal():
        journal[(PID, EPOCH, b.topic, b.partition, b.base_sequence)] = b.placement()
    # The sync of partition 0 found the lost batch's numbers there unwritten.
    assert journal[(PID, EPOCH, "orders", 0, 0)] == Placement(2, ((0, -1),))
    # Restart again; the leader of 0 wrote sequences 0-1 (the other records).
    retry = place(fresh_session(), lost, journal=journal, leaders={0: 1})
    assert sum(u.count for batches in retry.rounds for u in batches) == 2


def test_the_file_keeps_the_newest_record_and_survives_a_torn_line(tmp_path: Path) -> None:
    a = ((PID, EPOCH, "orders", 0, 0), Placement(10, ((1, 4), (2, 9))))
    b = ((PID, EPOCH, "orders", 0, 0), Placement(10, ((1, 4), (2, 19))))
    c = ((PID, EPOCH, "orders", 1, 0), Placement(3, ((1, 7),)))
    (tmp_path / journal_module.FILE_NAME).write_bytes(
        encode(*a) + b"not json\n" + encode(*b) + encode(*c)[:-7]  # torn
    )
    j = Journal(tmp_path)
    assert j.open() == 1
    assert j.lookup(a[0]) == b[1] and j.lookup(c[0]) is None

    async def more() -> None:
        async with trio.open_nursery() as nursery:  # concurrent callers share syncs
            for i in range(20):
                nursery.start_soon(j.record, [((PID, EPOCH, "t", i, 0), Placement(1, ((0, i),)))])

    trio.run(more)
    assert 1 <= j.syncs <= 20
    j.close()
    again = Journal(tmp_path)
    assert again.open() == 21
    assert again.lookup((PID, EPOCH, "t", 19, 0)) == Placement(1, ((0, 19),))
    again.close()
    assert dict(decode(encode(*a))) == {a[0]: a[1]}


def test_a_producers_placements_are_listed_for_a_sync_after_reopening_and_eviction(
    tmp_path: Path,
) -> None:
    old = ((PID, EPOCH, "orders", 0, 0), Placement(2, ((0, 1),)))
    kept = [((PID, EPOCH, "orders", p, 0), Placement(1, ((p, 0),))) for p in (1, 2)]
    others = [
        ((PID, EPOCH + 1, "orders", 0, 0), old[1]),
        ((PID + 1, EPOCH, "orders", 0, 0), old[1]),
    ]
    j = Journal(tmp_path, max_entries=4)
    j.open()
    trio.run(j.record, [old, *kept, *others])  # five: the oldest is evicted
    assert j.placements(PID, EPOCH) == kept
    j.close()
    again = Journal(tmp_path, max_entries=10)
    assert again.open() == 5
    assert again.placements(PID, EPOCH) == [old, *kept]
    assert again.placements(PID + 1, EPOCH) == others[1:]
    again.close()


def test_a_stale_placement_is_journaled_again_in_the_next_write_and_survives_its_failure() -> None:
    """The sync marks the lost batch's partition not written; the journal
    write that fails puts it back, for the next write, before any batch
    numbered from the leader's last sequence is written."""
    from trafka.proxy.keyrouting.journal_pipeline import submit

    journal = {(PID, EPOCH, "orders", 0, 0): Placement(2, ((0, 1), (3, 4)))}
    session = fresh_session()
    Sequences.synced(session, "orders", 0, -1, -1, list(journal.items()))
    Sequences.synced(session, "orders", 3, 4, EPOCH, list(journal.items()))  # 3 was written
    stale = ((PID, EPOCH, "orders", 0, 0), Placement(2, ((0, -1), (3, 4))))

    class Failing:
        shared = False

        async def submit(self, entries: Any, **_: Any) -> Any:
            self.entries = list(entries)
            raise journal_module.JournalError("disk full")

    failing = Failing()
    ticket = trio.run(submit, failing, session, [], True, 10.0)
    assert ticket.failed and failing.entries == [stale]
    assert session.take_stale() == [stale]  # put back for the next write


def test_the_file_is_rewritten_with_the_newest_records_when_it_grows(
    tmp_path: Path, monkeypatch: Any
) -> None:
    monkeypatch.setattr(journal_module, "_MIN_REWRITE_BYTES", 2000)
    j = Journal(tmp_path, max_entries=10)
    j.open()

    async def write() -> None:
        for i in range(200):
            await j.record([((PID, EPOCH, "orders", 0, i), Placement(1, ((0, i),)))])

    trio.run(write)
    j.close()
    size = (tmp_path / journal_module.FILE_NAME).stat().st_size
    assert size < 4000  # not 200 lines
    again = Journal(tmp_path, max_entries=10)
    assert again.open() == 10
    assert again.lookup((PID, EPOCH, "orders", 0, 199)) is not None
    assert again.lookup((PID, EPOCH, "orders", 0, 100)) is None
    again.close()


def test_a_failed_write_loses_no_waiting_callers_placements(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """The write of a group fails half way: its caller hears it, the caller
    waiting on the same group writes the group again, and every placement reads
    back (the torn half-line does not swallow the next one)."""
    j = Journal(tmp_path)
    j.open()
    real_write = journal_module.os.write
    failures = [1]

    def flaky(fd: int, data: Any) -> int:
        if failures:
            failures.pop()
            real_write(fd, bytes(data)[: len(data) // 2])
            raise OSError(28, "No space left on device")
        return real_write(fd, data)

    monkeypatch.setattr(journal_module.os, "write", flaky)
    outcomes: dict[int, str] = {}

    async def one(i: int) -> None:
        try:
            await j.record([((PID, EPOCH, "orders", i, 0), Placement(2, ((0, i), (1, i))))])
            outcomes[i] = "synced"
        except journal_module.JournalError:
            outcomes[i] = "failed"

    async def both() -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(one, 0)
            nursery.start_soon(one, 1)

    trio.run(both)
    j.close()
    assert sorted(outcomes.values()) == ["failed", "synced"]
    again = Journal(tmp_path)
    assert again.open() == 2
    assert again.lookup((PID, EPOCH, "orders", 1, 0)) == Placement(2, ((0, 1), (1, 1)))
    again.close()
