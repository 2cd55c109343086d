"""confluent-kafka's consumer over records taken in bulk (issue #81, item 4):
``consume(n)`` and ``poll()`` hand out records the blocking consumer holds
back, and what is held back never counts as handed out.

The same calls run against ``confluent_kafka`` itself and against
``trafka.compat.confluent`` on one brokerlite, and must answer alike: a
partial ``consume()`` of a fetched batch, the positions after it, ``commit()``
without arguments (only what was handed out), a seek and a pause while records
are held back, ``consume()`` returning at most ``num_messages`` (and what there
is once the timeout passes), the end-of-partition event, and the message's
fields (headers, timestamp, leader epoch, setters).

Rebalances are timed differently by the two clients, so the revocation test
runs on trafka alone: records held back when partitions are revoked are
neither committed by the revocation's auto-commit nor handed out afterwards.
"""

from __future__ import annotations

import importlib
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from trafka.sdk import TopicPartition as SdkTP
from trafka.sdk import blocking

pytestmark = pytest.mark.timeout(240)

RECORDS = 40  # one fetch holds them all: the blocking consumer holds back the rest
WAIT_S = 30.0  # the longest wait for records that are there (a busy machine)


def _produce(bs: str, topic: str, partitions: int, per_partition: int) -> None:
    with blocking.Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([topic], num_partitions=partitions, replication_factor=1)
    with blocking.Producer(bootstrap_servers=bs, linger_ms=50) as producer:
        for p in range(partitions):
            for i in range(per_partition):
                headers = [("n", b"%d" % i), ("empty", None)] if i % 2 else []
                producer.send(topic, b"v%d" % i, b"k%d" % i, partition=p, headers=headers)
        producer.flush()


def _consume(consumer: Any, n: int, timeout: float = WAIT_S) -> list[Any]:
    """``consume(n, timeout)`` until ``n`` messages (a client may hand out fewer
    at once only when the timeout passes first)."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout
    while len(got) < n and time.monotonic() < deadline:
        got.extend(consumer.consume(n - len(got), 1.0))
    return got


def _fields(msg: Any) -> tuple[Any, ...]:
    return (
        msg.error(),
        msg.partition(),
        msg.offset(),
        msg.key(),
        msg.value(),
        msg.headers(),
        msg.timestamp()[0],
        msg.leader_epoch(),
        len(msg),
    )


def scenario(api: str, bs: str, topic: str) -> dict[str, Any]:
    """One partition of RECORDS records read in parts; what each call answered."""
    ck = importlib.import_module(api)
    tp = ck.TopicPartition(topic, 0)
    out: dict[str, Any] = {}
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{uuid.uuid4().hex}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    out["position_before"] = [p.offset for p in consumer.position([tp])]
    # A part of the batch: the rest is held back (trafka) or queued (librdkafka).
    first = _consume(consumer, 5)
    out["first"] = [_fields(m) for m in first]
    out["position_after_5"] = [p.offset for p in consumer.position([tp])]
    polled = None
    for _ in range(int(WAIT_S)):
        polled = consumer.poll(1.0)
        if polled is not None:
            break
    assert polled is not None
    out["polled"] = _fields(polled)
    out["position_after_poll"] = [p.offset for p in consumer.position([tp])]
    # Only what was handed out is committed.
    done = consumer.commit(asynchronous=False)
    out["commit_returned"] = [(p.partition, p.offset) for p in done]
    out["committed"] = [p.offset for p in consumer.committed([tp], timeout=WAIT_S)]
    # A seek drops what is held back: the next records are from the seek's offset.
    consumer.seek(ck.TopicPartition(topic, 0, 20))
    out["after_seek"] = [m.offset() for m in _consume(consumer, 3)]
    out["position_after_seek"] = [p.offset for p in consumer.position([tp])]
    # A pause: nothing more of the partition until it is resumed; then the
    # records after the last one handed out, none skipped and none twice.
    consumer.pause([tp])
    out["while_paused"] = [m.offset() for m in consumer.consume(5, 0.5)]
    consumer.resume([tp])
    out["after_resume"] = [m.offset() for m in _consume(consumer, 3)]
    # More asked for than there is: what there is, once the timeout passes.
    out["rest"] = [m.offset() for m in consumer.consume(100, 3.0)]
    out["none_left"] = consumer.consume(10, 0.2)
    out["commit_all"] = [(p.partition, p.offset) for p in consumer.commit(asynchronous=False)]
    # The message's setters and its headers list (the same list each time).
    msg = first[1]
    headers = msg.headers()
    out["headers_same_list"] = headers is msg.headers()
    msg.set_key(b"new key")
    msg.set_value(b"new value")
    msg.set_headers([("h", b"x")])
    out["after_setters"] = (msg.key(), msg.value(), msg.headers(), msg.offset(), len(msg))
    out["consume_0"] = consumer.consume(0, 0.1)  # (librdkafka: a batch of none)
    for wrong in (-1, 1_000_001):
        with pytest.raises(ValueError):
            consumer.consume(wrong, 0.1)
    consumer.close()

    reader = ck.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"r-{uuid.uuid4().hex}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    reader.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
    seen: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline and not (seen and seen[-1][0] == "eof"):
        for m in reader.consume(RECORDS + 10, 1.0):
            if m.error() is not None:
                seen.append(("eof", m.error().code(), m.offset()))
            else:
                seen.append(("record", m.offset()))
    out["with_eof"] = seen
    out["position_at_eof"] = [p.offset for p in reader.position([tp])]
    reader.close()
    return out


def test_confluent_consumers_bulk_path_gives_confluent_kafkas_answers(
    brokerlite_peer: str,
) -> None:
    topic = f"compat-bulk-{uuid.uuid4().hex[:8]}"
    _produce(brokerlite_peer, topic, 1, RECORDS)
    # Side by side: groups of their own on one topic, each mostly waiting on the broker.
    with ThreadPoolExecutor(1, thread_name_prefix="confluent-kafka") as pool:
        on_theirs = pool.submit(scenario, "confluent_kafka", brokerlite_peer, topic)
        ours = scenario("trafka.compat.confluent", brokerlite_peer, topic)
        theirs = on_theirs.result()
    for key in theirs:
        assert ours[key] == theirs[key], key
    # The answers say something.
    assert theirs["position_before"] == [-1001]
    assert [f[2] for f in theirs["first"]] == [0, 1, 2, 3, 4]
    assert theirs["position_after_poll"] == [6]
    assert theirs["commit_returned"] == [(0, 6)] and theirs["committed"] == [6]
    assert theirs["after_seek"] == [20, 21, 22]
    assert theirs["while_paused"] == []
    assert theirs["after_resume"] == [23, 24, 25]
    assert theirs["rest"] == list(range(26, RECORDS))
    assert theirs["commit_all"] == [(0, RECORDS)]
    assert theirs["with_eof"][-1][0] == "eof" and len(theirs["with_eof"]) == RECORDS + 1


def test_consume_returns_at_most_num_messages_of_a_held_batch(brokerlite_peer: str) -> None:
    """One fetched batch handed out in parts: each ``consume(n)`` at most ``n``,
    in order, none lost or twice; ``poll()`` between them takes the next one."""
    import trafka.compat.confluent as ck

    topic = f"compat-parts-{uuid.uuid4().hex[:8]}"
    _produce(brokerlite_peer, topic, 1, RECORDS)
    consumer = ck.Consumer({"bootstrap.servers": brokerlite_peer, "group.id": "parts"})
    try:
        consumer.assign([ck.TopicPartition(topic, 0, ck.OFFSET_BEGINNING)])
        offsets: list[int] = []
        sizes = []
        deadline = time.monotonic() + WAIT_S
        while len(offsets) < RECORDS and time.monotonic() < deadline:
            for n in (1, 3, 7):
                got = consumer.consume(n, 1.0)
                sizes.append((n, len(got)))
                offsets.extend(m.offset() for m in got)
            msg = consumer.poll(1.0)
            if msg is not None:
                offsets.append(msg.offset())
        assert offsets == list(range(RECORDS))
        assert all(got <= n for n, got in sizes)
    finally:
        consumer.close()


def test_revoked_partitions_held_records_are_neither_committed_nor_handed_out(
    brokerlite_peer: str,
) -> None:
    """A member polls one record of a fetched batch (the rest held back), then
    a second member joins: at the revocation, the auto-commit commits the offset
    after the one record (not the batch's end), and after it the first member
    hands out no record of a partition it no longer has; the second member
    reads its partition from the committed offset, so no record is lost."""
    import trafka.compat.confluent as ck

    topic = f"compat-revoke-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    _produce(brokerlite_peer, topic, 2, RECORDS)
    events: list[tuple[str, list[int]]] = []

    def on_assign(c: Any, parts: list[Any]) -> None:
        events.append(("assign", sorted(p.partition for p in parts)))

    def on_revoke(c: Any, parts: list[Any]) -> None:
        events.append(("revoke", sorted(p.partition for p in parts)))

    conf = {
        "bootstrap.servers": brokerlite_peer,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": True,
        "auto.commit.interval.ms": 3_600_000,  # only the revocation's commit
        "heartbeat.interval.ms": 100,
    }
    first = ck.Consumer(conf)
    second = None
    try:
        first.subscribe([topic], on_assign=on_assign, on_revoke=on_revoke)
        msg = None
        deadline = time.monotonic() + WAIT_S
        while msg is None and time.monotonic() < deadline:
            msg = first.poll(1.0)
        assert msg is not None and msg.error() is None
        handed = msg.partition(), msg.offset()
        # The rest of the fetched batch is held back (what the test is about).
        held = first._consumer._held()
        assert held.get(SdkTP(topic, msg.partition()), -1) == msg.offset() + 1

        second = ck.Consumer(conf)
        second.subscribe([topic])
        later: list[tuple[int, int]] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and ("revoke", [0, 1]) not in events:
            got = second.poll(0.2)
            if got is not None and got.error() is None:
                later.append((got.partition(), got.offset()))
        assert ("revoke", [0, 1]) in events, events
        committed = first.committed([ck.TopicPartition(topic, p) for p in (0, 1)], timeout=WAIT_S)
        by_partition = {tp.partition: tp.offset for tp in committed}
        assert by_partition[handed[0]] == handed[1] + 1
        # Nothing of the other one was handed out: not committed, or at its start.
        assert by_partition[1 - handed[0]] in (-1001, 0)

        # From here on, the first member hands out only its new partitions'
        # records; between them, the two read every record once more at most.
        mine: list[tuple[int, int]] = []
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and len(set(mine + later)) < 2 * RECORDS - 1:
            for c, into in ((first, mine), (second, later)):
                got = c.poll(0.2)
                if got is not None and got.error() is None:
                    into.append((got.partition(), got.offset()))
        owned = {tp.partition for tp in first.assignment()}
        assert {p for p, _ in mine} <= owned
        everything = {(p, o) for p in (0, 1) for o in range(RECORDS)}
        assert set(mine) | set(later) | {handed} == everything
        assert len(mine) == len(set(mine)) and len(later) == len(set(later))
    finally:
        first.close()
        if second is not None:
            second.close()
