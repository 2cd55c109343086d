"""librdkafka's and Java's settings that services set, taken and honoured (issue #62).

* Every setting librdkafka (CONFIGURATION.md) or Java defines that a service
  sets in practice is taken; each test below shows its effect on a real
  broker (brokerlite) or, for a rule, that librdkafka itself (confluent-kafka,
  installed for the tests) agrees.
* Under librdkafka's names, librdkafka's rules: ``message.timeout.ms`` is
  ``0 .. 2147483647``, 0 meaning no limit, and must be greater than
  ``linger.ms`` (librdkafka: "`message.timeout.ms` must be greater than
  `linger.ms`"); Java's ``delivery.timeout.ms >= linger.ms + request.timeout.ms``
  applies to Java's name only.
* A configuration with several problems is refused once, naming them all.
* ``statistics.interval.ms`` with ``stats_cb`` hands over librdkafka's
  statistics JSON (STATISTICS.md: top-level ``name``, ``client_id``,
  ``type``, ``ts``, ``time``, ``age``, ``msg_cnt``, ``txmsgs``, ``rxmsgs``...,
  ``brokers``, ``topics.<t>.partitions.<p>`` with ``txmsgs`` / ``rxmsgs``,
  ``hi_offset``, ``consumer_lag``).
"""

from __future__ import annotations

import json
import logging
import socket
import threading
from collections.abc import Iterator
from typing import Any

import anyio
import anyio.to_thread
import confluent_kafka
import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.sdk import (
    BrokerUnreachableError,
    NewTopic,
    open_producer,
)
from trafka.sdk.blocking import Admin, Consumer, Producer
from trafka.sdk.config import ConsumerConfig, ProducerConfig
from trafka.sdk.connection import BrokerConnection
from trafka.sdk.errors import ConfigError

pytestmark = [pytest.mark.timeout(120)]
DEADLINE_S = 60  # generous: a busy machine


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "librdkafka-settings")


def _topic(bs: str, partitions: int = 1) -> str:
    name = fresh("rdk")
    with Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(name, partitions)])
    return name


#: The settings issue #62 found refused, each with a value librdkafka or Java takes.
ISSUE_62_PRODUCER = {
    "queue.buffering.max.messages": 100_000,
    "queue.buffering.max.kbytes": 1_048_576,
    "batch.num.messages": 10_000,
    "statistics.interval.ms": 0,
    "stats_cb": print,
    "error_cb": print,
    "throttle_cb": print,
    "logger": logging.getLogger("svc"),
    "log_level": 6,
    "debug": "broker,msg",
    "on_delivery": print,
    "delivery.report.only.error": False,
    "message.max.bytes": 1_000_000,
    "socket.timeout.ms": 60_000,
    "socket.keepalive.enable": True,
    "socket.send.buffer.bytes": 0,
    "socket.receive.buffer.bytes": 0,
    "topic.metadata.refresh.interval.ms": 300_000,
    "api.version.request": True,
    "broker.version.fallback": "0.10.0",
    "api.version.fallback.ms": 0,
    "message.timeout.ms": 30_000,
}
JAVA = {
    "metrics.num.samples": 2,
    "metrics.sample.window.ms": 30_000,
    "metrics.recording.level": "INFO",
}


def test_a_typical_librdkafka_producer_dict_is_taken_as_librdkafka_takes_it() -> None:
    settings = {k: v for k, v in ISSUE_62_PRODUCER.items() if k != "logger"}
    confluent_kafka.Producer({**settings, "logger": logging.getLogger("svc")})  # librdkafka: fine
    cfg = ProducerConfig.from_dict({**ISSUE_62_PRODUCER, **JAVA})
    # librdkafka's message.timeout.ms is not held to Java's linger + request timeout.
    assert cfg.delivery_timeout_ms == 30_000 and cfg.request_timeout_ms == 60_000
    assert cfg.buffer_memory == 1_048_576 * 1024 and cfg.max_request_size == 1_000_000
    assert cfg.metadata_max_age_ms == 300_000 and cfg.socket_keepalive_enable
    assert cfg.debug == ("broker", "msg") and cfg.batch_num_messages == 10_000
    java = ProducerConfig.from_dict({"send.buffer.bytes": 131_072, "receive.buffer.bytes": -1})
    assert (java.socket_send_buffer_bytes, java.socket_receive_buffer_bytes) == (131_072, -1)


def test_consumer_queue_settings_are_taken() -> None:
    cfg = ConsumerConfig.from_dict({"queued.max.messages.kbytes": 1024, "group.id": "g"})
    assert cfg.fetch_max_bytes == 1024 * 1024
    with pytest.warns(UserWarning, match="queued.min.messages"):
        ConsumerConfig.from_dict({"queued.min.messages": 100_000})


@pytest.mark.parametrize(
    ("settings", "taken"),
    [
        ({"message.timeout.ms": 30_000}, True),  # the issue's: Java's rule would refuse it
        ({"message.timeout.ms": 0}, True),  # librdkafka: 0 is no limit
        ({"message.timeout.ms": 500, "linger.ms": 500}, False),  # not greater than linger
        ({"message.timeout.ms": 501, "linger.ms": 500}, True),
        ({"batch.num.messages": 0}, False),
        ({"queue.buffering.max.messages": 0}, True),
        ({"socket.timeout.ms": 9}, False),
        ({"topic.metadata.refresh.interval.ms": -1}, True),
        ({"debug": "nonsense"}, False),
        ({"log_level": 8}, False),
    ],
)
def test_librdkafka_names_follow_librdkafkas_rules(settings: dict[str, Any], taken: bool) -> None:
    try:
        confluent_kafka.Producer({"bootstrap.servers": "127.0.0.1:1", **settings})
        librdkafka_takes = True
    except confluent_kafka.KafkaException:
        librdkafka_takes = False
    assert librdkafka_takes is taken
    if taken:
        cfg = ProducerConfig.from_dict(settings)
        if "message.timeout.ms" in settings:
            assert cfg.delivery_timeout_ms == (settings["message.timeout.ms"] or 2**31 - 1)
    else:
        with pytest.raises(ConfigError):
            ProducerConfig.from_dict(settings)


def test_javas_rule_still_holds_for_javas_name() -> None:
    with pytest.raises(ConfigError, match=r"linger\.ms \+ request\.timeout\.ms"):
        ProducerConfig.from_dict({"delivery.timeout.ms": 30_000})


def test_every_problem_of_a_configuration_is_reported_at_once() -> None:
    with pytest.raises(ConfigError) as caught:
        ProducerConfig.from_dict(
            {"lingr.ms": 5, "acks": 7, "batch.num.messages": 0, "socket.keepalive.enable": "yes"}
        )
    problems = caught.value.problems
    assert len(problems) == 4, problems
    text = str(caught.value)
    for name in ("lingr.ms", "acks", "batch.num.messages", "socket.keepalive.enable"):
        assert name in text


@pytest.mark.anyio
async def test_keepalive_and_buffer_sizes_are_set_on_broker_connections(
    broker: RunningBroker,
) -> None:
    cfg = ProducerConfig.from_dict(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "socket.keepalive.enable": True,
            "socket.send.buffer.bytes": 65_536,
            "socket.receive.buffer.bytes": 32_768,
        }
    )
    host, port = cfg.bootstrap_addresses[0]
    plain = ProducerConfig.from_dict({"bootstrap.servers": broker.bootstrap_servers})
    async with anyio.create_task_group() as tg:
        with anyio.fail_after(DEADLINE_S):
            conn = BrokerConnection(-1, host, port, cfg)
            await conn.open(tg)
            other = BrokerConnection(-1, host, port, plain)
            await other.open(tg)
        # The connections' own descriptors (plaintext: BrokerConnection.fileno), dup'ed.
        sock = socket.fromfd(conn.fileno, socket.AF_INET, socket.SOCK_STREAM)
        plain_sock = socket.fromfd(other.fileno, socket.AF_INET, socket.SOCK_STREAM)
        with sock, plain_sock:
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
            assert plain_sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 0
            # Linux doubles what is asked (socket(7)), but never gives less.
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF) >= 65_536
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF) >= 32_768
        await conn.aclose()
        await other.aclose()


def _wait_for(condition: Any, what: str) -> None:
    done = threading.Event()
    for _ in range(DEADLINE_S * 20):
        if condition():
            return
        done.wait(0.05)
    raise AssertionError(f"never: {what}")


def test_stats_cb_gets_librdkafkas_statistics_json_with_true_counts(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    produced: list[dict[str, Any]] = []
    conf = {
        "bootstrap.servers": bs,
        "client.id": "stats-svc",
        "statistics.interval.ms": 100,
        "stats_cb": lambda text: produced.append(json.loads(text)),
    }
    with Producer(conf) as producer:
        for i in range(7):
            producer.send(topic, b"v%d" % i, partition=i % 2)
        producer.flush()
        _wait_for(lambda: produced and produced[-1].get("txmsgs") == 7, "txmsgs of 7")
    last = produced[-1]
    assert (last["client_id"], last["type"]) == ("stats-svc", "producer")
    assert last["name"].startswith("stats-svc#producer-")
    assert isinstance(last["ts"], int) and isinstance(last["time"], int) and last["age"] >= 0
    assert last["msg_cnt"] == 0 and last["txmsg_bytes"] > 0
    parts = last["topics"][topic]["partitions"]
    assert (parts["0"]["txmsgs"], parts["1"]["txmsgs"]) == (4, 3)
    assert last["tx"] == sum(b["tx"] for b in last["brokers"].values()) > 0
    assert any(b["state"] == "UP" and b["nodeid"] >= 0 for b in last["brokers"].values())

    consumed: list[dict[str, Any]] = []
    conf = {
        "bootstrap.servers": bs,
        "group.id": fresh("g"),
        "auto.offset.reset": "earliest",
        "statistics.interval.ms": 100,
        "stats_cb": lambda text: consumed.append(json.loads(text)),
    }
    with Consumer(topic, config=conf) as consumer:
        got = 0
        while got < 7:
            got += sum(len(r) for r in consumer.getmany(timeout_ms=1000).values())
        _wait_for(lambda: consumed and consumed[-1].get("rxmsgs") == 7, "rxmsgs of 7")
    part = consumed[-1]["topics"][topic]["partitions"]["0"]
    assert (part["hi_offset"], part["next_offset"], part["consumer_lag"]) == (4, 4, 0)
    assert consumed[-1]["type"] == "consumer" and consumed[-1]["cgrp"]["assignment_size"] == 2


def test_logger_and_debug_receive_the_clients_debug_lines(broker: RunningBroker) -> None:
    lines: list[logging.LogRecord] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            lines.append(record)

    app = logging.getLogger(fresh("svc"))
    app.setLevel(logging.DEBUG)
    app.addHandler(Keep())
    app.propagate = False
    before = logging.getLogger("trafka.sdk").level
    conf = {"bootstrap.servers": broker.bootstrap_servers, "logger": app, "debug": "broker"}
    with Producer(conf) as producer:
        producer.send(_topic(broker.bootstrap_servers), b"v").result(DEADLINE_S)
    assert any(r.levelno == logging.DEBUG and "connected to" in r.getMessage() for r in lines)
    assert logging.getLogger("trafka.sdk").level == before  # put back at close
    quiet: list[logging.LogRecord] = []
    app.handlers[0].emit = quiet.append  # type: ignore[method-assign]
    with Producer({"bootstrap.servers": broker.bootstrap_servers, "logger": app}) as producer:
        producer.send(_topic(broker.bootstrap_servers), b"v").result(DEADLINE_S)
    assert not any(r.levelno < logging.INFO for r in quiet)  # log_level 6: INFO and up


@pytest.mark.anyio
async def test_queue_buffering_max_messages_bounds_the_records_buffered(
    broker: RunningBroker,
) -> None:
    """librdkafka: "Maximum number of messages allowed on the producer queue".
    A record past it waits for room, as one past buffer.memory does (up to
    max.block.ms): the buffered records are sent without waiting for their
    linger, and the record goes in once they are delivered."""
    topic = await anyio.to_thread.run_sync(_topic, broker.bootstrap_servers)
    for bound in (0, 3):
        async with open_producer(
            {
                "bootstrap.servers": broker.bootstrap_servers,
                "queue.buffering.max.messages": bound,
                "linger.ms": 600_000,  # nothing leaves before flush() but for the bound
                "message.timeout.ms": 0,  # librdkafka's: no limit
            }
        ) as producer:
            with anyio.fail_after(DEADLINE_S):
                futures = [await producer.send(topic, b"v%d" % i) for i in range(3)]
                await producer.send(topic, b"the fourth")
                done = [f.done() for f in futures]
                await producer.flush()
            assert done == [bool(bound)] * 3, bound


@pytest.mark.anyio
async def test_batch_num_messages_bounds_a_batch_in_records(broker: RunningBroker) -> None:
    topic = await anyio.to_thread.run_sync(_topic, broker.bootstrap_servers)
    async with open_producer(
        {
            "bootstrap.servers": broker.bootstrap_servers,
            "batch.num.messages": 2,
            "linger.ms": 600_000,
            "message.timeout.ms": 0,
        }
    ) as producer:
        with anyio.fail_after(DEADLINE_S):
            futures = [await producer.send(topic, b"v%d" % i) for i in range(5)]
            await producer.flush()
            offsets = [(await f).offset for f in futures]
        assert offsets == [0, 1, 2, 3, 4]
        assert producer.statistics().batches_sent == 3  # 2 + 2 + 1


def test_error_cb_hears_of_a_broker_that_went_down(tmp_path: Any) -> None:
    heard: list[BaseException] = []
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path) as running:
        bs = running.bootstrap_servers
        topic = _topic(bs)
        conf = {"bootstrap.servers": bs, "error_cb": heard.append, "message.timeout.ms": 3_000}
        producer = Producer(conf)
        producer.send(topic, b"before").result(DEADLINE_S)
    # The broker is gone: the producer's next request finds it out of reach.
    failed = producer.send(topic, b"after")
    _wait_for(lambda: heard, "error_cb called")
    assert isinstance(heard[0], BrokerUnreachableError)
    assert failed.exception(DEADLINE_S) is not None  # not delivered, and said so
    producer.close()


def test_on_delivery_in_the_configuration_reports_every_record(broker: RunningBroker) -> None:
    topic = _topic(broker.bootstrap_servers)
    reports: list[tuple[Any, Any]] = []
    conf = {
        "bootstrap.servers": broker.bootstrap_servers,
        "dr_msg_cb": lambda e, m: reports.append((e, m)),
    }
    with Producer(conf) as producer:
        producer.send(topic, b"a")
        producer.send(topic, b"b")
        producer.flush()
    assert [(e, m.offset) for e, m in reports] == [(None, 0), (None, 1)]
    only: list[Any] = []
    conf = {
        "bootstrap.servers": broker.bootstrap_servers,
        "on_delivery": lambda e, m: only.append(e),
        "delivery.report.only.error": True,
    }
    with Producer(conf) as producer:
        producer.send(topic, b"c")
        producer.send(topic, b"d", partition=7)  # no such partition: fails
        producer.flush()
    assert len(only) == 1 and only[0] is not None
