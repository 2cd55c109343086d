"""confluent-kafka's ``ShareConsumer`` on a brokerlite (which serves share
groups, KIP-932), run against ``confluent_kafka`` 2.16 itself and against
``trafka.compat.confluent``: records produced once are delivered, ACCEPT
takes them off the queue, RELEASE delivers them again (``delivery_count``
2), REJECT never again; implicit acknowledgement accepts what was polled;
``commit_sync`` and the acknowledgement commit callback report per
partition; ``DeserializingShareConsumer`` deserializes in place and marks
what fails. Both clients must answer alike, and as produced.

Whether a record is gone for good is read from the queue itself: a record
produced after the others (the sentinel) is delivered only once every record
before it is acknowledged, so a new member that gets the sentinel and nothing
else shows that nothing before it is left to deliver.
"""

from __future__ import annotations

import importlib
import time
import types
import uuid
from typing import Any

import pytest

from trafka.sdk import blocking

pytest.importorskip("confluent_kafka")

pytestmark = pytest.mark.timeout(240)

APIS = ["confluent_kafka", "trafka.compat.confluent"]
WAIT_S = 60.0  # the longest wait for records that are there (a busy machine)
SENTINEL = b"sentinel"


def _queue(bs: str, partitions: int, values: list[bytes]) -> tuple[str, str]:
    """A fresh topic holding ``values`` (spread over ``partitions`` in turn, the
    i-th keyed ``k<i>`` and with a header on odd ones) and a share group reading
    it from the start."""
    topic, group = f"share-{uuid.uuid4().hex[:10]}", f"share-g-{uuid.uuid4().hex[:10]}"
    with blocking.Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([topic], num_partitions=partitions, replication_factor=1)
        admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
    _produce(bs, topic, partitions, values)
    return topic, group


def _produce(bs: str, topic: str, partitions: int, values: list[bytes]) -> None:
    with blocking.Producer(bootstrap_servers=bs) as producer:
        for i, value in enumerate(values):
            headers = [("n", b"%d" % i)] if i % 2 else []
            producer.send(topic, value, b"k%d" % i, partition=i % partitions, headers=headers)
        producer.flush()


def _fields(msg: Any) -> tuple[Any, ...]:
    return (
        msg.error(),
        msg.partition(),
        msg.offset(),
        msg.key(),
        msg.value(),
        msg.headers(),
        msg.timestamp()[0],
        msg.delivery_count(),
    )


def _only_the_sentinel_is_left(ck: types.ModuleType, bs: str, topic: str, group: str) -> bool:
    """Produce the sentinel; a new member of ``group`` gets it and nothing else."""
    _produce(bs, topic, 1, [SENTINEL])
    consumer = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + WAIT_S
    while SENTINEL not in got and time.monotonic() < deadline:
        got += [m.value() for m in consumer.poll(0.5)]
    consumer.close()
    return got == [SENTINEL]


def explicit_scenario(api: str, bs: str) -> dict[str, Any]:
    """Every fifth record RELEASEd at its first delivery (then accepted), the
    ones after those REJECTed, the rest ACCEPTed; a commit after each batch."""
    ck = importlib.import_module(api)
    values = [b"v%d" % i for i in range(20)]
    topic, group = _queue(bs, 2, values)
    decisions = {0: ck.AcknowledgeType.RELEASE, 1: ck.AcknowledgeType.REJECT}
    answered: list[tuple[int, frozenset[int], Any]] = []
    consumer = ck.ShareConsumer(
        {"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"}
    )
    consumer.set_acknowledgement_commit_callback(
        lambda offsets, error: answered.extend(
            (tp.partition, frozenset(found), error) for tp, found in offsets.items()
        )
    )
    consumer.subscribe([topic])
    delivered: list[tuple[Any, ...]] = []
    commits: list[Any] = []
    expected = len(values) + 4  # the four RELEASEd come again
    deadline = time.monotonic() + WAIT_S
    while len(delivered) < expected and time.monotonic() < deadline:
        batch = consumer.poll(0.5)
        for msg in batch:
            delivered.append(_fields(msg))
            index = int(msg.value()[1:])
            kind = ck.AcknowledgeType.ACCEPT
            if msg.delivery_count() == 1 and index % 5 in decisions:
                kind = decisions[index % 5]
            consumer.acknowledge(msg, kind)
        if batch:
            result = consumer.commit_sync(WAIT_S)
            commits.append(sorted((tp.topic == topic, tp.partition, e) for tp, e in result.items()))
    consumer.close()  # (serves the callbacks still queued)
    acknowledged: dict[int, set[int]] = {}
    for partition, offsets, error in answered:
        assert error is None
        acknowledged.setdefault(partition, set()).update(offsets)
    return {
        "delivered": sorted(delivered, key=lambda f: (f[1], f[2], f[7])),
        "commit_partitions": sorted({c for batch in commits for c in batch}),
        "acknowledged": acknowledged,
        "only_sentinel_left": _only_the_sentinel_is_left(ck, bs, topic, group),
    }


def implicit_scenario(api: str, bs: str) -> dict[str, Any]:
    """Records polled are accepted by the next poll, a commit or the close."""
    ck = importlib.import_module(api)
    values = [b"w%d" % i for i in range(12)]
    topic, group = _queue(bs, 3, values)
    consumer = ck.ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    consumer.subscribe([topic])
    got: list[bytes] = []
    commits: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < len(values) and time.monotonic() < deadline:
        batch = consumer.poll(0.5)
        got += [m.value() for m in batch]
        if batch and not commits:  # the first batch by commit, the others by poll and close
            commits.append(sorted(e is None for e in consumer.commit_sync(WAIT_S).values()))
    consumer.close()
    return {
        "got": sorted(got),
        "commits": commits,
        "only_sentinel_left": _only_the_sentinel_is_left(ck, bs, topic, group),
    }


def deserializing_scenario(api: str, bs: str) -> dict[str, Any]:
    """Values as str; one that will not decode keeps its bytes and gets the error."""
    ck = importlib.import_module(api)
    serialization = importlib.import_module(f"{api}.serialization")
    values = [b"x0", b"x1", b"\xff\xfe", b"x3"]
    topic, group = _queue(bs, 1, values)
    consumer = ck.DeserializingShareConsumer(
        {
            "bootstrap.servers": bs,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            "key.deserializer": serialization.StringDeserializer(),
            "value.deserializer": serialization.StringDeserializer(),
        }
    )
    consumer.subscribe([topic])
    seen: list[tuple[Any, ...]] = []
    deadline = time.monotonic() + WAIT_S
    while len(seen) < len(values) and time.monotonic() < deadline:
        for msg in consumer.poll(0.5):
            error = msg.error()
            seen.append((msg.offset(), msg.key(), msg.value(), error and error.code()))
            kind = ck.AcknowledgeType.ACCEPT if error is None else ck.AcknowledgeType.REJECT
            consumer.acknowledge(msg, kind)
    consumer.close()
    return {
        "seen": sorted(seen),
        "value_error": ck.KafkaError._VALUE_DESERIALIZATION,
        "only_sentinel_left": _only_the_sentinel_is_left(ck, bs, topic, group),
    }


def test_explicit_acknowledgement_accept_release_reject(brokerlite_peer: str) -> None:
    theirs, ours = (explicit_scenario(api, brokerlite_peer) for api in APIS)
    assert ours == theirs
    # As produced: each record once, the RELEASEd ones (v0, v5, v10, v15) twice.
    firsts = [f for f in ours["delivered"] if f[7] == 1]
    seconds = [f for f in ours["delivered"] if f[7] == 2]
    assert sorted(f[4] for f in firsts) == sorted(b"v%d" % i for i in range(20))
    assert sorted(f[4] for f in seconds) == sorted(b"v%d" % i for i in (0, 5, 10, 15))
    for error, partition, offset, key, value, headers, _, _ in ours["delivered"]:
        index = int(value[1:])
        assert error is None
        assert (partition, offset, key) == (index % 2, index // 2, b"k%d" % index)
        assert headers == ([("n", b"%d" % index)] if index % 2 else None)
    assert ours["acknowledged"] == {0: set(range(10)), 1: set(range(10))}
    assert ours["commit_partitions"] == [(True, 0, None), (True, 1, None)]
    assert ours["only_sentinel_left"]  # REJECTed records never come back


def test_implicit_acknowledgement_accepts_what_was_polled(brokerlite_peer: str) -> None:
    theirs, ours = (implicit_scenario(api, brokerlite_peer) for api in APIS)
    assert ours == theirs
    assert ours["got"] == sorted(b"w%d" % i for i in range(12))
    assert ours["commits"] and all(all(ok) for ok in ours["commits"])
    assert ours["only_sentinel_left"]


def test_deserializing_share_consumer(brokerlite_peer: str) -> None:
    theirs, ours = (deserializing_scenario(api, brokerlite_peer) for api in APIS)
    assert ours == theirs
    assert ours["seen"] == [
        (0, "k0", "x0", None),
        (1, "k1", "x1", None),
        (2, b"k2", b"\xff\xfe", ours["value_error"]),  # (left as fetched)
        (3, "k3", "x3", None),
    ]
    assert ours["only_sentinel_left"]


def _tried(fn: Any) -> tuple[str, ...]:
    try:
        fn()
    except Exception as exc:
        return type(exc).__name__, str(exc)
    return ("ok",)


def explicit_misuse_scenario(api: str, bs: str) -> list[Any]:
    """A poll with records of the last one unacknowledged, an acknowledgement
    changed before it is sent and made after it was, the consumer called from
    inside its acknowledgement commit callback."""
    ck = importlib.import_module(api)
    topic, group = _queue(bs, 1, [b"y%d" % i for i in range(6)])
    out: list[Any] = []
    consumer = ck.ShareConsumer(
        {"bootstrap.servers": bs, "group.id": group, "share.acknowledgement.mode": "explicit"}
    )

    def callback(offsets: Any, error: Any) -> None:
        out.append(("callback", sorted(o for found in offsets.values() for o in found), error))
        out.append(_tried(lambda: consumer.poll(0)))
        out.append(_tried(consumer.commit_async))
        out.append(_tried(lambda: consumer.set_acknowledgement_commit_callback(None)))
        out.append(_tried(consumer.subscription))

    consumer.set_acknowledgement_commit_callback(callback)
    consumer.subscribe([topic])
    batch: list[Any] = []
    deadline = time.monotonic() + WAIT_S
    while not batch and time.monotonic() < deadline:
        batch = list(consumer.poll(0.5))
    for msg in batch[:-1]:  # (the last one left for the next poll to find)
        consumer.acknowledge(msg)
    out.append(len(batch))
    out.append(_tried(lambda: consumer.poll(0.1)))
    out.append(_tried(lambda: consumer.acknowledge(batch[0], ck.AcknowledgeType.REJECT)))
    consumer.acknowledge(batch[0])
    consumer.acknowledge(batch[-1])
    consumer.commit_async()
    out.append(_tried(lambda: consumer.acknowledge(batch[0])))
    while not any(isinstance(o, tuple) and o[0] == "callback" for o in out):
        if time.monotonic() > deadline:
            break
        consumer.poll(0.2)
    consumer.close()
    return out


def test_explicit_acknowledgement_misuse(brokerlite_peer: str) -> None:
    theirs, ours = (explicit_misuse_scenario(api, brokerlite_peer) for api in APIS)
    assert ours == theirs
    assert ours[0] == 6
    assert ours[1] == (
        "IllegalStateException",
        "1 records from previous poll have not been acknowledged",
    )
    assert ours[-5] == ("callback", list(range(6)), None)
