"""confluent-kafka's calls at their edges, run against ``confluent_kafka``
itself and ``trafka.compat.confluent`` and compared (issue #82, item 8):
confluent-kafka's API reference (``produce_batch``, ``purge``,
``init_transactions``, ``commit``, ``store_offsets``) and what 2.16.1 does
with no broker in reach:

* a client is made from a dict (or keyword settings); nothing, or not a dict,
  is ``TypeError("expected configuration dict")``; a setting of None is
  librdkafka's NULL (its default); ``default.topic.config``'s settings win
  over the top level; ``log.thread.name`` is taken; a partitioner librdkafka
  does not have is ``_INVALID_ARG`` naming it; a consumer needs a group.id;
* ``produce(headers=...)`` refuses what is not a dict or a list of pairs, and
  header values that are not None, bytes or str, with ``TypeError``;
* ``produce_batch`` checks every message before producing any, queues the
  rest, and marks each one it could not queue with ``_error`` (the queue full:
  ``_QUEUE_FULL``); it returns how many it queued;
* ``purge()`` fails the records not sent yet with ``_PURGE_QUEUE``, reported
  by ``poll()``/``flush()``; ``purge(in_queue=False)`` leaves them;
* ``init_transactions(timeout)`` with no coordinator in reach raises a
  retriable ``_TIMED_OUT``; until it completes the other transaction calls
  raise a retriable ``_CONFLICT``;
* ``commit()`` with nothing to commit raises ``_NO_OFFSET`` (synchronous) or
  hands ``_NO_OFFSET`` and the partitions to ``on_commit`` (asynchronous);
  ``message`` and ``offsets`` together are a ``ValueError``, and
  ``store_offsets()`` with neither; ``committed(timeout)`` with no coordinator
  raises ``_TIMED_OUT`` once the timeout passes;
* a subclass that never calls ``__init__`` and a closed client raise
  ``RuntimeError`` with confluent-kafka's words.
"""

from __future__ import annotations

import importlib
import socket
import time
from typing import Any

import pytest

pytestmark = pytest.mark.timeout(120)

APIS = ["confluent_kafka", "trafka.compat.confluent"]
QUEUE_FULL, PURGE_QUEUE, TIMED_OUT, CONFLICT, NO_OFFSET = -184, -152, -185, -173, -168
INVALID_ARG, INVALID_OFFSET = -186, -1001


def dead_address() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def outcome(fn: Any) -> tuple[str, str]:
    """What a call did: ("ok", repr of the result) or (exception type, code or text)."""
    try:
        return ("ok", repr(fn()))
    except Exception as exc:
        first = exc.args[0] if exc.args else None
        code = first.code() if hasattr(first, "code") else str(exc)
        return (type(exc).__name__, str(code))


def configs(api: str) -> list[tuple[str, str]]:
    ck = importlib.import_module(api)
    bs = dead_address()
    made = [outcome(lambda: ck.Producer())]
    for args, kwargs in [
        (("x",), {}),
        ((None,), {}),
        (({"bootstrap.servers": bs, "partitioner": "murmur"},), {}),
        (({"bootstrap.servers": bs, "log.thread.name": True},), {}),
        (({"bootstrap.servers": None},), {}),
    ]:
        made.append(outcome(lambda a=args, k=kwargs: type(ck.Producer(*a, **k)).__name__))
    made.append(outcome(lambda: ck.Consumer({"bootstrap.servers": bs})))
    return made


@pytest.mark.parametrize("api", APIS)
def test_configuration_is_taken_as_confluent_kafka_takes_it(api: str) -> None:
    assert configs(api) == configs("confluent_kafka")


def test_default_topic_config_wins_over_the_top_level() -> None:
    """librdkafka: a record's ``message.timeout.ms`` is the topic config's."""
    for api in APIS:
        ck = importlib.import_module(api)
        reports: list[int] = []
        producer = ck.Producer(
            {
                "bootstrap.servers": dead_address(),
                "message.timeout.ms": 600_000,
                "default.topic.config": {"message.timeout.ms": 500},
            }
        )
        started = time.monotonic()
        producer.produce("t", b"v", on_delivery=lambda err, msg, r=reports: r.append(err.code()))
        producer.flush(30)
        assert reports == [-192], api
        assert time.monotonic() - started < 30, api


def headers(api: str) -> list[tuple[str, str]]:
    ck = importlib.import_module(api)
    producer = ck.Producer({"bootstrap.servers": dead_address(), "message.timeout.ms": 1000})
    cases = [("a", "b"), ["pair"], [("k", "v", "x")], {"anint": 1}, [("k", bytearray(b"v"))]]
    cases += [[("k", "v"), ("k", None)], {"k": b"v"}]
    return [outcome(lambda h=h: producer.produce("t", b"v", headers=h)) for h in cases]


def test_headers_are_checked_as_confluent_kafka_checks_them() -> None:
    assert headers("trafka.compat.confluent") == headers("confluent_kafka")


def batch(api: str) -> dict[str, Any]:
    ck = importlib.import_module(api)
    producer = ck.Producer({"bootstrap.servers": dead_address(), "queue.buffering.max.messages": 3})
    out: dict[str, Any] = {}
    bad = [{"value": b"good"}, "not a dict", {"value": b"good2"}]
    out["not a dict"] = (outcome(lambda: producer.produce_batch("t", bad)), len(producer))
    out["bad value"] = outcome(lambda: producer.produce_batch("t", [{"value": 5}]))
    out["bad key"] = outcome(lambda: producer.produce_batch("t", [{"key": ["k"]}]))
    out["bad partition"] = outcome(lambda: producer.produce_batch("t", [{"partition": "x"}]))
    out["timestamp"] = outcome(lambda: producer.produce_batch("t", [{"timestamp": 1}]))
    out["not a list"] = outcome(lambda: producer.produce_batch("t", {"value": b"v"}))
    out["topic"] = outcome(lambda: producer.produce_batch(None, []))
    messages: list[dict[str, Any]] = [{"value": b"m%d" % i, "key": "k"} for i in range(5)]
    out["queued"] = producer.produce_batch("t", messages)
    out["marked"] = [m["_error"].code() if "_error" in m else None for m in messages]
    out["len"] = len(producer)
    out["empty"] = producer.produce_batch("t", [])
    return out


def test_produce_batch_answers_as_confluent_kafkas() -> None:
    got, expected = batch("trafka.compat.confluent"), batch("confluent_kafka")
    # One difference, on purpose (the migration page): confluent-kafka queues
    # the messages before a malformed one and then raises; the drop-in checks
    # them all first, so a batch it refuses queues nothing.
    assert got.pop("not a dict") == (expected.pop("not a dict")[0], 0)
    assert got == {k: v for k, v in expected.items() if k not in ("len", "marked", "queued")} | {
        k: got[k] for k in ("len", "marked", "queued")
    }
    # with the queue's 3 places, the drop-in queued 3 of the 5 and marked 2 full
    assert (got["queued"], got["len"]) == (3, 3)
    assert got["marked"] == [None, None, None, QUEUE_FULL, QUEUE_FULL]
    assert got["empty"] == expected["empty"] == 0


def purge(api: str) -> list[Any]:
    ck = importlib.import_module(api)
    reports: list[int] = []
    producer = ck.Producer({"bootstrap.servers": dead_address(), "message.timeout.ms": 60_000})
    producer.produce("t", b"v", partition=0, on_delivery=lambda e, m: reports.append(e.code()))
    producer.flush(0.01)
    seen = [list(reports)]
    producer.purge(in_queue=False)
    producer.flush(0.01)
    seen.append(list(reports))
    producer.purge()
    deadline = time.monotonic() + 30
    while not reports and time.monotonic() < deadline:
        producer.poll(0.1)
    seen += [list(reports), len(producer)]
    return seen


def test_purge_reports_the_queued_records_purged() -> None:
    assert (
        purge("trafka.compat.confluent") == purge("confluent_kafka") == [[], [], [PURGE_QUEUE], 0]
    )


def transactions(api: str) -> list[tuple[str, str, bool]]:
    ck = importlib.import_module(api)
    producer = ck.Producer({"bootstrap.servers": dead_address(), "transactional.id": "t"})
    out = []
    for call in (
        lambda: producer.init_transactions(0.5),
        producer.begin_transaction,
        lambda: producer.commit_transaction(0.5),
        lambda: producer.abort_transaction(0.5),
    ):
        try:
            call()
            out.append(("ok", "", False))
        except ck.KafkaException as exc:
            err = exc.args[0]
            out.append((type(exc).__name__, str(err.code()), err.retriable()))
    return out


def test_init_transactions_times_out_and_the_rest_conflict() -> None:
    got = transactions("trafka.compat.confluent")
    assert got == transactions("confluent_kafka")
    assert got[0] == ("KafkaException", str(TIMED_OUT), True)
    assert {g[1] for g in got[1:]} == {str(CONFLICT)}


def commits(api: str) -> list[Any]:
    ck = importlib.import_module(api)
    heard: list[Any] = []
    consumer = ck.Consumer(
        {
            "bootstrap.servers": dead_address(),
            "group.id": "g",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "on_commit": lambda err, tps: heard.append(
                (err.code(), [(tp.topic, tp.partition, tp.offset) for tp in tps])
            ),
        }
    )
    tp = ck.TopicPartition("t", 2)
    out: list[Any] = [outcome(lambda: consumer.assign([tp]))]
    out.append(outcome(lambda: consumer.commit(asynchronous=False)))
    out.append(outcome(lambda: consumer.commit()))
    deadline = time.monotonic() + 10
    while not heard and time.monotonic() < deadline:
        consumer.poll(0.1)
    out.append(heard)
    message = ck.Message(topic="t", partition=2)
    out.append(outcome(lambda: consumer.commit(message=message, offsets=[])))
    out.append(outcome(lambda: consumer.store_offsets()))
    out.append(outcome(lambda: consumer.store_offsets(offsets=[ck.TopicPartition("t", 2, -1)])))
    out.append(outcome(lambda: consumer.store_offsets(offsets=[ck.TopicPartition("u", 0, 5)])))
    out.append(outcome(lambda: consumer.committed([tp], timeout=0.5)))
    consumer.close()
    out.append(outcome(lambda: consumer.close()))
    out.append(outcome(lambda: consumer.position([tp])))
    out.append(outcome(lambda: consumer.list_topics()))
    return out


def test_commit_and_store_offsets_edges_answer_as_confluent_kafkas() -> None:
    got = commits("trafka.compat.confluent")
    expected = commits("confluent_kafka")
    assert got[3] == expected[3] == [(NO_OFFSET, [("t", 2, INVALID_OFFSET)])]
    # store_offsets of a partition not assigned: librdkafka says _UNKNOWN_PARTITION
    # for each; which of them confluent-kafka raises first is its own detail.
    assert got[:7] + got[8:] == expected[:7] + expected[8:]
    assert got[7][0] == expected[7][0] == "KafkaException"


def uninitialised(api: str) -> list[tuple[str, str]]:
    ck = importlib.import_module(api)

    class NoInitProducer(ck.Producer):  # type: ignore[misc, name-defined]
        def __init__(self, conf: Any) -> None:
            pass

    class NoInitConsumer(ck.Consumer):  # type: ignore[misc, name-defined]
        def __init__(self, conf: Any) -> None:
            pass

    p, c = NoInitProducer({}), NoInitConsumer({})
    calls = [
        lambda: p.produce("t", b"v"),
        p.poll,
        p.flush,
        p.purge,
        lambda: p.produce_batch("t", [{}]),
        p.init_transactions,
        p.begin_transaction,
        lambda: len(p),
        lambda: c.subscribe(["t"]),
        c.poll,
        c.assignment,
        lambda: c.committed([ck.TopicPartition("t", 0)]),
        lambda: c.position([ck.TopicPartition("t", 0)]),
        c.list_topics,
    ]
    return [outcome(call) for call in calls]


def test_a_client_never_initialised_raises_as_confluent_kafkas() -> None:
    assert uninitialised("trafka.compat.confluent") == uninitialised("confluent_kafka")


def test_aio_produces_and_consumes(brokerlite_peer: str) -> None:
    """``AIOProducer.produce`` resolves to the delivered message; an
    ``AIOConsumer`` reads it back (on both libraries, the same records)."""
    import asyncio
    import uuid

    async def run(api: str, topic: str) -> list[Any]:
        aio = importlib.import_module(api + ".aio")
        producer = aio.AIOProducer({"bootstrap.servers": brokerlite_peer})
        delivered = []
        for i in range(3):
            future = await producer.produce(topic, b"v%d" % i, b"k", partition=0)
            msg = await future
            delivered.append((msg.partition(), msg.offset(), msg.value()))
        await producer.close()
        consumer = aio.AIOConsumer(
            {
                "bootstrap.servers": brokerlite_peer,
                "group.id": f"g-{uuid.uuid4().hex[:6]}",
                "auto.offset.reset": "earliest",
            }
        )
        await consumer.subscribe([topic])
        read: list[Any] = []
        deadline = time.monotonic() + 30
        while len(read) < 3 and time.monotonic() < deadline:
            for m in await consumer.consume(3, 1.0):
                if m.error() is None:
                    read.append((m.partition(), m.offset(), m.value()))
        await consumer.close()
        return [delivered, read]

    for api in APIS:
        topic = f"aio-{uuid.uuid4().hex[:8]}"
        delivered, read = asyncio.run(run(api, topic))
        assert [d[1:] for d in delivered] == [(0, b"v0"), (1, b"v1"), (2, b"v2")], api
        assert read == delivered, api


def ordering(api: str) -> list[Any]:
    ck = importlib.import_module(api)
    tps = [ck.TopicPartition(t, p, o) for t, p, o in [("b", 1, 5), ("a", 9, 0), ("b", 0, 1)]]
    a, b = ck.TopicPartition("aa", 13), ck.TopicPartition("aa", 12, 40)
    return [
        [(tp.topic, tp.partition) for tp in sorted(tps)],
        [a > b, a >= b, a < b, a <= b, a == ck.TopicPartition("aa", 13, 7)],
        outcome(lambda: ck.TopicPartition(None)),
    ]


def test_topic_partitions_order_as_confluent_kafkas() -> None:
    """By topic, then partition; the offset takes no part (confluent-kafka's)."""
    assert ordering("trafka.compat.confluent") == ordering("confluent_kafka")


def first_lines(api: str) -> list[bool]:
    import io
    import logging
    import uuid

    ck = importlib.import_module(api)
    seen = []
    for kind in ("Producer", "Consumer"):
        buffer = io.StringIO()
        logger = logging.getLogger(f"edges-{uuid.uuid4().hex[:6]}")
        handler = logging.StreamHandler(buffer)
        handler.setFormatter(logging.Formatter(f"{kind} | %(message)s"))
        logger.addHandler(handler)
        logger.setLevel(logging.DEBUG)
        conf = {"bootstrap.servers": dead_address(), "logger": logger, "debug": "msg"}
        if kind == "Producer":
            client = ck.Producer(conf)
            client.flush(0)
        else:
            client = ck.Consumer({**conf, "group.id": "g"})
            client.poll(0)
        seen.append(f"{kind} | INIT" in buffer.getvalue())
        client.close()
    return seen


def test_the_logger_hears_librdkafkas_first_line_from_the_served_queue() -> None:
    """With ``logger`` and ``debug``, the first line served is ``INIT``."""
    assert first_lines("trafka.compat.confluent") == first_lines("confluent_kafka") == [True, True]


def rebalance_assigns(api: str, bs: str, topic: str, strategy: str) -> list[Any]:
    import uuid

    ck = importlib.import_module(api)
    consumer = ck.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"g-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "latest",
            "partition.assignment.strategy": strategy,
        }
    )
    heard: list[Any] = []

    def on_assign(c: Any, partitions: list[Any]) -> None:
        # confluent-kafka's documented pattern: start each partition where the
        # application says (here the beginning, against auto.offset.reset=latest)
        for tp in partitions:
            tp.offset = ck.OFFSET_BEGINNING
        heard.append(sorted(tp.partition for tp in partitions))
        if strategy == "cooperative-sticky":
            c.incremental_assign(partitions)
        else:
            c.assign(partitions)

    consumer.subscribe([topic], on_assign=on_assign)
    read: list[Any] = []
    deadline = time.monotonic() + 30
    while len(read) < 4 and time.monotonic() < deadline:
        for m in consumer.consume(4, 1.0):
            if m.error() is None:
                read.append((m.partition(), m.offset(), m.value()))
    out = [heard, sorted(read), sorted(tp.partition for tp in consumer.assignment())]
    consumer.close()
    return out


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
def test_an_on_assign_callback_assigns_from_the_offsets_it_gives(
    brokerlite_peer: str, strategy: str
) -> None:
    """librdkafka's rebalance callback assigns the partitions itself
    (``assign``, or ``incremental_assign`` with a cooperative assignor), at the
    offsets it sets on them: both libraries read from the beginning."""
    import uuid

    from trafka.sdk import blocking

    topic = f"edges-assign-{uuid.uuid4().hex[:8]}"
    with blocking.Admin(bootstrap_servers=brokerlite_peer) as admin:
        admin.create_topics([topic], num_partitions=2, replication_factor=1)
    with blocking.Producer(bootstrap_servers=brokerlite_peer) as producer:
        for p in range(2):
            for i in range(2):
                producer.send(topic, b"v%d" % i, partition=p)
        producer.flush()
    got = [rebalance_assigns(api, brokerlite_peer, topic, strategy) for api in APIS]
    assert got[0] == got[1]
    assert got[1][1] == [(0, 0, b"v0"), (0, 1, b"v1"), (1, 0, b"v0"), (1, 1, b"v1")]


def test_cluster_id_and_list_topics_answer_as_confluent_kafkas(brokerlite_peer: str) -> None:
    """``cluster_id()`` and ``list_topics()`` of the producer and the consumer:
    the broker's cluster id and every topic (both libraries, one broker)."""
    import uuid

    from trafka.sdk import blocking

    topic = f"edges-md-{uuid.uuid4().hex[:8]}"
    with blocking.Admin(bootstrap_servers=brokerlite_peer) as admin:
        admin.create_topics([topic], num_partitions=3, replication_factor=1)
        expected_id = admin.describe_cluster().cluster_id
    seen = []
    for api in APIS:
        ck = importlib.import_module(api)
        producer = ck.Producer({"bootstrap.servers": brokerlite_peer})
        consumer = ck.Consumer({"bootstrap.servers": brokerlite_peer, "group.id": "g"})
        md = consumer.list_topics(timeout=10)
        seen.append(
            (
                producer.cluster_id(10),
                consumer.cluster_id(10),
                sorted(md.topics[topic].partitions),
                topic in producer.list_topics(timeout=10).topics,
                sorted(producer.list_topics(topic, timeout=10).topics),
            )
        )
        consumer.close()
        producer.close()
    assert seen[0] == seen[1] == [(expected_id, expected_id, [0, 1, 2], True, [topic])][0]
