"""confluent-kafka's client lifecycle and the consumer's assignment calls, run
against ``confluent_kafka`` and ``trafka.compat.confluent`` on one brokerlite
and compared (confluent-kafka's API reference, and what 2.16.1 does):

* the producer and the consumer are context managers: leaving the block closes
  them (the producer flushes first: its reports are served), and the
  exception of the block goes on; ``close()`` twice is harmless;
* after ``close()`` a producer's calls raise ``RuntimeError("Producer has been
  closed")`` and ``len()`` is 0, a consumer's ``RuntimeError("Consumer
  closed")``; ``bool(producer)`` is True even with nothing queued;
* ``incremental_assign`` adds partitions (from their offsets),
  ``incremental_unassign`` removes them; ``offsets_for_times`` answers the
  first offset at or after each timestamp, -1 past the end; ``memberid()`` is
  the coordinator's id once the consumer joined its group.
"""

from __future__ import annotations

import importlib
import time
import uuid
from typing import Any

import pytest

from trafka.sdk import blocking

pytestmark = pytest.mark.timeout(240)

APIS = ["confluent_kafka", "trafka.compat.confluent"]
WAIT_S = 30.0
BASE_MS = 1_700_000_000_000


def _topic(bs: str) -> str:
    topic = f"compat-life-{uuid.uuid4().hex[:8]}"
    with blocking.Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([topic], num_partitions=2, replication_factor=1)
    with blocking.Producer(bootstrap_servers=bs) as producer:
        for p in range(2):
            for i in range(5):
                producer.send(topic, b"v%d" % i, partition=p, timestamp_ms=BASE_MS + i * 1000)
        producer.flush()
    return topic


def _offsets(consumer: Any, n: int) -> list[tuple[int, int]]:
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + WAIT_S
    while len(got) < n and time.monotonic() < deadline:
        got += [(m.partition(), m.offset()) for m in consumer.consume(n - len(got), 1.0)]
    return sorted(got)


def lifecycle(api: str, bs: str) -> dict[str, Any]:
    ck = importlib.import_module(api)
    topic = _topic(bs)
    out: dict[str, Any] = {}
    reports: list[Any] = []
    conf = {"bootstrap.servers": bs}
    with ck.Producer(conf) as producer:
        out["bool_idle"] = bool(producer)
        producer.produce(topic, b"x", partition=0, on_delivery=lambda e, m: reports.append(e))
    out["reports_at_exit"] = reports
    for name, call in (
        ("produce", lambda: producer.produce(topic, b"y")),
        ("flush", producer.flush),
        ("poll", lambda: producer.poll(0)),
    ):
        with pytest.raises(RuntimeError, match="Producer has been closed"):
            call()
        out[f"closed_{name}"] = True
    out["len_closed"] = len(producer)
    out["close_again"] = producer.close()
    with pytest.raises(ValueError), ck.Producer(conf) as failing:
        raise ValueError("the block's own")
    with pytest.raises(RuntimeError):
        failing.produce(topic, b"z")

    group = f"g-{uuid.uuid4().hex}"
    with ck.Consumer({**conf, "group.id": group, "enable.auto.commit": False}) as consumer:
        consumer.incremental_assign([ck.TopicPartition(topic, 0, 2)])
        out["after_first"] = _offsets(consumer, 3)
        consumer.incremental_assign([ck.TopicPartition(topic, 1, 4)])
        out["after_second"] = _offsets(consumer, 2)  # (0, 5): the producer's above
        out["assignment"] = [(t.topic == topic, t.partition) for t in consumer.assignment()]
        consumer.incremental_unassign([ck.TopicPartition(topic, 0)])
        out["assignment_after_unassign"] = [t.partition for t in consumer.assignment()]
        asked = [
            ck.TopicPartition(topic, 0, BASE_MS + 2500),
            ck.TopicPartition(topic, 1, BASE_MS + 60_000),
        ]
        found = consumer.offsets_for_times(asked, timeout=WAIT_S)
        out["offsets_for_times"] = [(t.partition, t.offset) for t in found]
    with pytest.raises(RuntimeError, match="Consumer closed"):
        consumer.assignment()
    consumer.close()  # again: nothing

    member = ck.Consumer({**conf, "group.id": group})
    try:
        member.subscribe([topic])
        deadline = time.monotonic() + WAIT_S
        while not member.assignment() and time.monotonic() < deadline:
            member.poll(0.2)
        out["memberid_joined"] = bool(member.memberid())
        out["group_metadata"] = member.consumer_group_metadata() is not None
    finally:
        member.close()
    return out


def test_lifecycle_and_assignment_calls_answer_as_confluent_kafkas(brokerlite_peer: str) -> None:
    theirs = lifecycle("confluent_kafka", brokerlite_peer)
    ours = lifecycle("trafka.compat.confluent", brokerlite_peer)
    assert ours == theirs
    assert theirs["reports_at_exit"] == [None] and theirs["len_closed"] == 0
    assert theirs["after_first"] == [(0, 2), (0, 3), (0, 4)]
    assert theirs["after_second"] == [(0, 5), (1, 4)]
    assert theirs["assignment_after_unassign"] == [1]
    assert theirs["offsets_for_times"] == [(0, 3), (1, -1)]
    assert theirs["memberid_joined"] is True
