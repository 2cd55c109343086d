"""Differential conversations on the data path (issue #61): the same requests sent
to Kafka 3.9 (the reference) and to each peer (brokerlite, Kafka 3.9 again, Kafka
4.x), the answers compared field by field (:mod:`differential`'s rules say what
is normalised). Kafka 3.9 run twice shows the normalisation leaves nothing that
differs from run to run.

Each conversation is the documented behaviour it names, as Kafka's protocol
guide (the error table) and the KIPs state it; the reference broker's answers
are the expected values.
"""

from __future__ import annotations

import time
from typing import Any

import pytest
from differential import Talk
from differential_requests import TS, Kafka, check, records


@pytest.mark.compat("Protocol", "Metadata")
def test_metadata_unknown_topic_and_auto_create(kafka3: Any, peer: Any) -> None:
    """Metadata of a topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION (3)
    when the request forbids auto-creation; with it allowed (and the brokers'
    ``auto.create.topics.enable`` true, both defaults) the topic is created with
    ``num.partitions`` partitions and the answer is LEADER_NOT_AVAILABLE (5) or
    the new topic (KIP-204's ``allow_auto_topic_creation``). An invalid name is
    INVALID_TOPIC_EXCEPTION (17)."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.metadata(topic)
        created = k.metadata(topic, auto=True)
        # Kafka may answer LEADER_NOT_AVAILABLE while the new topic's leader is
        # elected: ask until the topic is served, then record that it is.
        deadline = time.monotonic() + 60
        while created.topics[0].error_code != 0 and time.monotonic() < deadline:
            time.sleep(0.1)
            created = k.metadata(topic)
        talk.transcript = talk.transcript[:1]
        talk.note("created", {"error_code": created.topics[0].error_code})
        k.metadata(topic)
        k.metadata("bad name!", auto=True)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "CreateTopics")
def test_create_topics_refusals(kafka3: Any, peer: Any) -> None:
    """CreateTopics: TOPIC_ALREADY_EXISTS (36); zero or negative partitions
    INVALID_PARTITIONS (37); a replication factor above the brokers' count
    INVALID_REPLICATION_FACTOR (38); an unknown or invalid config INVALID_CONFIG
    (40); an invalid name INVALID_TOPIC_EXCEPTION (17); ``validate_only``
    (KIP-108) answers as for a real creation without creating the topic."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 2)
        k.create(topic, 2)
        k.create(talk.name("zero"), 0)
        k.create(talk.name("negative"), -5)
        k.create(talk.name("rf"), 1, 3)
        k.create(talk.name("rf0"), 1, 0)
        k.create(talk.name("cfg"), 1, **{"cleanup.policy": "bogus"})
        k.create(talk.name("cfg2"), 1, **{"no.such.config": "1"})
        k.create(talk.name("cfg3"), 1, **{"retention.ms": "soon"})
        k.create("bad/name", 1)
        k.create(talk.name("validate"), 3, validate_only=True)
        k.metadata(talk.name("validate"))
        k.create(talk.name("validate-rf"), 1, 5, validate_only=True)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "Produce")
def test_produce_acks_and_refusals(kafka3: Any, peer: Any) -> None:
    """Produce: acks 1 and -1 answer the batch's base offset; acks 0 gets no
    answer at all (the next answer on the connection is the next request's);
    an unknown topic or partition is UNKNOWN_TOPIC_OR_PARTITION (3); a batch
    above the topic's ``max.message.bytes`` MESSAGE_TOO_LARGE (10); a batch
    whose CRC does not match CORRUPT_MESSAGE (2); acks other than -1, 0, 1
    INVALID_REQUIRED_ACKS (21)."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1, **{"max.message.bytes": "2000"})
        k.produce(topic, records([b"a", b"b"]), acks=1)
        k.produce(topic, records([b"c"]), acks=-1)
        k.produce(topic, records([b"d"]), acks=0)
        k.list_offsets(topic, -1)
        k.produce(topic, records([b"x" * 3000]))
        k.produce(topic, records([b"e"]), partition=3)
        k.produce(talk.name("missing"), records([b"e"]))
        corrupt = bytearray(records([b"f", b"g"]))
        corrupt[-1] ^= 0xFF
        k.produce(topic, bytes(corrupt))
        k.produce(topic, records([b"h"]), acks=2)
        k.fetch(topic)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "Produce (idempotent)")
def test_produce_idempotent_sequences(kafka3: Any, peer: Any) -> None:
    """Idempotent Produce (KIP-98): the next sequence is appended; a duplicate
    of the last batch answers its original offset without appending again; a
    gap is OUT_OF_ORDER_SEQUENCE_NUMBER (45); an epoch older than the
    producer's INVALID_PRODUCER_EPOCH (47); a first batch of a new epoch must
    start at sequence 0; a producer id the broker never gave out with a
    non-zero sequence is UNKNOWN_PRODUCER_ID (59) or OUT_OF_ORDER (KIP-360)."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1)
        pid = k.init_pid(None).producer_id
        k.produce(topic, records([b"a", b"b"], pid=pid, epoch=0, seq=0))
        k.produce(topic, records([b"c"], pid=pid, epoch=0, seq=2))
        k.produce(topic, records([b"c"], pid=pid, epoch=0, seq=2))
        k.produce(topic, records([b"a", b"b"], pid=pid, epoch=0, seq=0))
        k.produce(topic, records([b"z"], pid=pid, epoch=0, seq=7))
        k.produce(topic, records([b"d"], pid=pid, epoch=1, seq=5))
        k.produce(topic, records([b"d"], pid=pid, epoch=1, seq=0))
        k.produce(topic, records([b"e"], pid=pid, epoch=0, seq=4))
        k.produce(topic, records([b"f"], pid=pid + 1000, epoch=0, seq=3))
        k.fetch(topic)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "Fetch")
def test_fetch_offsets_isolation_and_sizes(kafka3: Any, peer: Any) -> None:
    """Fetch: past the log end OFFSET_OUT_OF_RANGE (1), at the log end no
    records; the first batch is returned whole even above ``max_bytes``
    (KIP-74) and batches after it only within the limits; read_committed stops
    at the last stable offset (KIP-98): an open transaction's records are
    invisible until its commit marker, and the aborted list names an aborted
    one's records. ListOffsets by time finds no offset at or past the last
    fetchable one (Kafka's ``Partition.fetchOffsetForTimestamp``: the last stable
    offset under read_committed), so an open transaction's records are not
    found by time (nor as the max timestamp) under read_committed."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1)
        for i in range(3):
            k.produce(topic, records([bytes([i]) * 100] * 3, ts=TS + 10 * i))
        k.fetch(topic, 99)
        k.fetch(topic, 9)
        k.fetch(topic, 0, max_bytes=10)
        k.fetch(topic, 0, partition_max_bytes=10)
        k.fetch(topic, 4, max_bytes=500)
        k.fetch(topic, -1)
        tid = talk.name("txn")
        init = k.init_pid(tid)
        pid, epoch = init.producer_id, init.producer_epoch
        k.add_partitions(tid, pid, epoch, topic)
        txn = records([b"t1", b"t2"], pid=pid, epoch=epoch, seq=0, txn=True, ts=TS + 1000)
        k.produce(topic, txn, tid=tid)
        k.fetch(topic, 9, isolation=1)
        k.fetch(topic, 9, isolation=0)
        k.list_offsets(topic, -1, isolation=1)
        for isolation in (1, 0):
            k.list_offsets(topic, TS + 1000, isolation=isolation)
            k.list_offsets(topic, -3, isolation=isolation)
        k.end_txn(tid, pid, epoch, commit=False)
        k.settle(topic)
        k.list_offsets(topic, -1, isolation=1)
        k.list_offsets(topic, TS + 1000, isolation=1)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "Fetch sessions")
def test_fetch_sessions(kafka3: Any, peer: Any) -> None:
    """Incremental fetch sessions (KIP-227): epoch 0 with session id 0 opens a
    session; the next epoch answers only partitions with news; a wrong epoch is
    INVALID_FETCH_SESSION_EPOCH (71); an unknown session id
    FETCH_SESSION_ID_NOT_FOUND (70); epoch -1 closes the session."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1)
        k.produce(topic, records([b"a"]))
        opened = k.fetch(topic, 0, session_epoch=0)
        sid = opened.session_id
        k.fetch(topic, 1, session_id=sid, session_epoch=1, forgotten=[])
        k.produce(topic, records([b"b"]))
        k.fetch(topic, 1, session_id=sid, session_epoch=2, forgotten=[])
        k.fetch(topic, 1, session_id=sid, session_epoch=7, forgotten=[])
        k.fetch(topic, 1, session_id=sid + 12345, session_epoch=1, forgotten=[])
        k.fetch(topic, 1, session_id=sid, session_epoch=-1, forgotten=[])

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "ListOffsets")
def test_list_offsets(kafka3: Any, peer: Any) -> None:
    """ListOffsets: earliest (-2), latest (-1), max-timestamp (-3, KIP-734) and
    by timestamp (the first offset whose timestamp is at or after it, -1 when
    none is); an unknown partition UNKNOWN_TOPIC_OR_PARTITION (3)."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1)
        k.list_offsets(topic, -2)
        k.list_offsets(topic, -1)
        k.list_offsets(topic, -3)
        k.produce(topic, records([b"a", b"b"], ts=TS + 100))
        k.produce(topic, records([b"c", b"d"], ts=TS + 50))
        k.produce(topic, records([b"e"], ts=TS + 500))
        for ts in (-2, -1, -3, TS, TS + 101, TS + 102, TS + 400, TS + 501):
            k.list_offsets(topic, ts)
        k.list_offsets(topic, -1, partition=5)
        k.delete_records(topic, 2)
        k.list_offsets(topic, -2)
        k.list_offsets(topic, TS)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "DeleteRecords")
def test_delete_records(kafka3: Any, peer: Any) -> None:
    """DeleteRecords: moves the log start (the low watermark answered); -1
    means the high watermark; past the high watermark OFFSET_OUT_OF_RANGE (1);
    a fetch below the new start OFFSET_OUT_OF_RANGE; unknown partition 3."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1)
        k.produce(topic, records([b"a", b"b", b"c"]))
        k.produce(topic, records([b"d", b"e"]))
        k.delete_records(topic, 1)
        k.fetch(topic, 0)
        k.fetch(topic, 1)
        k.delete_records(topic, 9)
        k.delete_records(topic, -1)
        k.delete_records(topic, 0)
        k.delete_records(topic, 1, partition=4)
        k.list_offsets(topic, -2)

    check(kafka3, peer, script)
