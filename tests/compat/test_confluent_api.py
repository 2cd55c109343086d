"""confluent-kafka's documented client API, run unchanged against
``confluent_kafka`` itself and against ``trafka.compat.confluent`` (issue #62):
the same calls on the same broker give the same values, keys, headers,
offsets (read from where the data is) and error codes.

The scenario follows confluent-kafka's documentation and its examples'
shapes (producer.py: a delivery callback, ``poll``, ``flush``; consumer.py:
a ``poll`` loop with ``commit``; adminapi.py: ``create_topics`` /
``delete_topics`` futures) and the API reference: ``Producer.produce``
(``key``, ``value``, ``partition``, ``headers``, ``on_delivery``), ``len()``,
``Consumer.subscribe(on_assign=)``, ``poll``, ``consume``,
``commit(message=, asynchronous=False)`` returning the committed
partitions, ``committed``, ``position``, ``assign`` with
``OFFSET_BEGINNING``, ``seek``, ``get_watermark_offsets``, ``store_offsets``,
``enable.partition.eof`` events (``_PARTITION_EOF``), and
``KafkaException`` codes for misuse (``TOPIC_ALREADY_EXISTS`` from a second
create, ``_NO_OFFSET`` from a commit with nothing consumed, ``TypeError`` for
a value that is not bytes or str).
"""

from __future__ import annotations

import importlib
import time
import types
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from unique_names import names as _names

from trafka.sdk import blocking

pytestmark = pytest.mark.timeout(240)
POLL_S = 1.0
ROUNDS = 120  # polls of POLL_S before giving up: generous, for a busy machine


def client_api(name: str) -> types.SimpleNamespace:
    """confluent-kafka's API from ``confluent_kafka`` or ``trafka.compat.confluent``:
    the one import line a service changes."""
    root = importlib.import_module(name)
    admin = importlib.import_module(f"{name}.admin")
    return types.SimpleNamespace(
        Producer=root.Producer,
        Consumer=root.Consumer,
        KafkaError=root.KafkaError,
        KafkaException=root.KafkaException,
        TopicPartition=root.TopicPartition,
        OFFSET_BEGINNING=root.OFFSET_BEGINNING,
        AdminClient=admin.AdminClient,
        NewTopic=admin.NewTopic,
        NewPartitions=admin.NewPartitions,
    )


def _code(exc: BaseException) -> int:
    return int(exc.args[0].code())


def scenario(ck: types.SimpleNamespace, bs: str, tag: str, node: int) -> dict[str, Any]:
    """confluent-kafka's documented calls; what they returned, for comparing."""
    out: dict[str, Any] = {}
    topic = f"compat-{tag}-{next(_names)}"
    admin = ck.AdminClient({"bootstrap.servers": bs})
    for future in admin.create_topics([ck.NewTopic(topic, 3, 1)]).values():
        future.result(60)
    again = admin.create_topics([ck.NewTopic(topic, 3, 1)])[topic]
    out["create_again"] = _code(again.exception(60))
    # Placed by hand (``replica_assignment``, a list per partition): on the one
    # broker, and refused on a broker that does not exist.
    placed = f"{topic}-placed"
    by_hand = ck.NewTopic(placed, 2, replica_assignment=[[node], [node]])
    admin.create_topics([by_hand])[placed].result(60)
    for counts in ((-1, -1), (2, 1)):  # librdkafka's rules: a count, no factor
        with pytest.raises(ValueError):
            admin.create_topics([ck.NewTopic(placed, *counts, replica_assignment=[[node]] * 2)])
    grow = ck.NewPartitions(placed, 3, replica_assignment=[[node]])
    admin.create_partitions([grow])[placed].result(60)
    for _ in range(ROUNDS):  # (the broker asked may learn of them a moment later)
        known = admin.list_topics(placed).topics.get(placed)
        partitions = {} if known is None else known.partitions
        if len(partitions) == 3:
            break
        time.sleep(POLL_S / 10)
    out["placed_partitions"] = sorted(partitions)
    nowhere = ck.NewTopic(f"{placed}-nowhere", 1, replica_assignment=[[99]])
    out["placed_nowhere"] = _code(admin.create_topics([nowhere])[nowhere.topic].exception(60))
    more = ck.NewPartitions(placed, 4, replica_assignment=[[99]])
    out["grown_nowhere"] = _code(admin.create_partitions([more])[placed].exception(60))

    reports: list[tuple[Any, ...]] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            reports.append(("error", err.code()))
        else:
            reports.append(
                (msg.topic() == topic, msg.partition(), msg.offset(), msg.key(), msg.value())
            )

    producer = ck.Producer({"bootstrap.servers": bs, "linger.ms": 5})
    for i in range(6):
        producer.produce(
            topic,
            value=b"v%d" % i,
            key=b"k%d" % (i % 3),
            on_delivery=report,
            headers=[("h", b"%d" % i)],
        )
        producer.poll(0)
    producer.produce(topic, "text value", "text key", partition=1, callback=report)
    out["len_before_flush"] = len(producer) > 0
    out["flush"] = producer.flush(60)
    out["len_after_flush"] = len(producer)
    out["reports"] = sorted(reports, key=repr)
    with pytest.raises(TypeError):
        producer.produce(topic, value=123)

    consumer = ck.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{topic}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    assigned: list[Any] = []
    consumer.subscribe([topic], on_assign=lambda c, parts: assigned.extend(parts))
    got = []
    last = None
    for _ in range(ROUNDS):
        msg = consumer.poll(POLL_S)
        if msg is None:
            continue
        assert msg.error() is None, msg.error()
        got.append((msg.partition(), msg.offset(), msg.key(), msg.value(), msg.headers()))
        if last is None or (msg.partition(), msg.offset()) > (last.partition(), last.offset()):
            last = msg  # the same message for both clients, whatever order they read in
        if len(got) == 7:
            break
    out["consumed"] = sorted(got, key=repr)
    out["assigned"] = sorted((tp.topic == topic, tp.partition) for tp in assigned)
    committed = consumer.commit(message=last, asynchronous=False)
    out["commit_returned"] = [(tp.partition, tp.offset) for tp in committed]
    parts = [ck.TopicPartition(topic, p) for p in range(3)]
    out["committed"] = [(tp.partition, tp.offset) for tp in consumer.committed(parts, timeout=60)]
    out["position"] = [(tp.partition, tp.offset) for tp in consumer.position(parts)]
    out["watermarks"] = [consumer.get_watermark_offsets(tp, timeout=60) for tp in parts]
    consumer.close()

    reader = ck.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"r-{topic}",
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    with pytest.raises(ck.KafkaException) as nothing:
        reader.commit(asynchronous=False)
    out["commit_nothing"] = _code(nothing.value)
    reader.assign([ck.TopicPartition(topic, 1, ck.OFFSET_BEGINNING)])
    seen = []
    for _ in range(ROUNDS):
        for msg in reader.consume(10, POLL_S):
            if msg.error() is not None:
                seen.append(("eof", msg.error().code(), msg.partition(), msg.offset()))
            else:
                seen.append((msg.offset(), msg.value()))
        if seen and seen[-1][0] == "eof":
            break
    out["partition_1_then_eof"] = seen
    reader.close()

    for future in admin.delete_topics([topic]).values():
        future.result(60)
    return out


@pytest.mark.parametrize("where", ["brokerlite", "kafka4"])
def test_confluent_kafkas_api_gives_the_same_answers_on_trafka(
    where: str, request: pytest.FixtureRequest
) -> None:
    if where == "brokerlite":
        bs = request.getfixturevalue("brokerlite_peer")
    else:
        bs = request.getfixturevalue("kafka4").bootstrap_servers
    with blocking.Admin(bootstrap_servers=bs) as admin:
        (node,) = [b.node_id for b in admin.describe_cluster().brokers]
    # Side by side: topics and groups of their own, each mostly waiting on the broker.
    with ThreadPoolExecutor(1, thread_name_prefix="confluent-kafka") as pool:
        on_theirs = pool.submit(scenario, client_api("confluent_kafka"), bs, "ck", node)
        ours = scenario(client_api("trafka.compat.confluent"), bs, "trafka", node)
        theirs = on_theirs.result()
    for key in theirs:
        assert ours[key] == theirs[key], key
    # The answers say something: all the records, where confluent-kafka put them.
    assert len(theirs["reports"]) == 7 and len(theirs["consumed"]) == 7
    assert theirs["create_again"] == 36  # TOPIC_ALREADY_EXISTS
    assert theirs["placed_partitions"] == [0, 1, 2]
    assert theirs["placed_nowhere"] == theirs["grown_nowhere"] == 39  # INVALID_REPLICA_ASSIGNMENT


def test_the_error_codes_are_librdkafkas() -> None:
    import confluent_kafka

    from trafka.compat import confluent

    names = [n for n in dir(confluent_kafka.KafkaError) if n.lstrip("_").isupper()]
    theirs = {n: getattr(confluent_kafka.KafkaError, n) for n in names}
    theirs = {n: v for n, v in theirs.items() if isinstance(v, int)}
    assert len(theirs) > 150
    assert {n: getattr(confluent.KafkaError, n, None) for n in theirs} == theirs
