"""The blocking producer's records that wait for their topic's metadata
(``trafka.sdk.producer_parking``), against a brokerlite that creates no topic on
a Metadata request, and against an address where nothing listens.

* Each record waits aside, under its topic: the records of a topic the cluster
  knows go on meanwhile, and a topic's records keep their order once it exists.
* Its bound runs from its send: ``max.block.ms`` for the SDK (Java's wait in
  ``send()``: ProducerBlockedError, or the topic's error when the brokers named
  one), ``delivery.timeout.ms`` with ``metadata_wait="delivery.timeout.ms"``
  (librdkafka's: DeliveryTimeoutError), where a topic the brokers do not know
  fails with UNKNOWN_TOPIC_OR_PARTITION after
  ``topic.metadata.propagation.max.ms``, as librdkafka's.
* ``abort_transaction()`` fails them; ``flush()`` waits for them.
* A script that ends without ``close()`` exits though its records cannot be
  delivered: no broker in reach, or a topic the brokers do not know.

A failure never comes before its bound: the bound is measured from a clock
read before the send (``time.monotonic``, the clock trio's loop reads), so that
assertion holds however slow the machine is; only hang guards bound the
other side.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import (
    ArgumentValueError,
    DeliveryTimeoutError,
    NewTopic,
    NoBrokersAvailableError,
    ProducerBlockedError,
    TransactionAbortedError,
)
from trafka.sdk.blocking import Admin, Producer

pytestmark = pytest.mark.timeout(180)

GUARD_S = 60  # a hang guard, never a measure
QUICK = {"retry_backoff_ms": 20, "reconnect_backoff_ms": 20, "reconnect_backoff_max_ms": 100}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "parking", auto_create_topics=False)


def dead_address() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"


def _create(bs: str, topic: str) -> None:
    with Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(topic, 1)])


def test_another_topics_records_go_on_and_a_topics_keep_their_order(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    known, later = fresh("park-known"), fresh("park-later")
    _create(bs, known)
    with Producer(bootstrap_servers=bs, max_block_ms=600_000, **QUICK) as producer:
        first = producer.send(later, b"later-0")
        dropped = producer.send(later, b"dropped")
        second = producer.send(later, b"later-1", headers=[("h", b"1")])
        other = producer.send(known, b"known-0")
        # The known topic's record is delivered while the other topic's wait.
        assert other.result(GUARD_S).offset == 0
        assert not first.done() and not second.done()
        assert dropped.cancel() and dropped.cancelled()  # waiting: it can still be dropped
        _create(bs, later)
        third = producer.send(later, b"later-2")
        producer.flush()  # waits for the parked records too
        # The dropped record was never written: the others are 0, 1, 2.
        assert [f.result(0).offset for f in (first, second, third)] == [0, 1, 2]
        assert dropped.cancelled()


def test_the_sdk_waits_max_block_ms_and_says_what_the_brokers_said(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    missing = fresh("park-missing")
    with Producer(bootstrap_servers=bs, max_block_ms=500, **QUICK) as producer:
        sent = time.monotonic()
        future = producer.send(missing, b"v")
        error = future.exception(GUARD_S)
        failed = time.monotonic()
    # The brokers answered: their error, as the async send raises it.
    assert isinstance(error, KafkaError) and error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert not isinstance(error, DeliveryTimeoutError)
    assert failed - sent >= 0.5


def test_with_no_broker_the_sdk_fails_a_record_after_max_block_ms() -> None:
    heard: list[BaseException] = []
    with Producer(
        bootstrap_servers=dead_address(), max_block_ms=300, error_cb=heard.append, **QUICK
    ) as producer:
        sent = time.monotonic()
        futures = [producer.send("a", b"1"), producer.send("b", b"2", key=b"k")]
        errors = [f.exception(GUARD_S) for f in futures]
        failed = time.monotonic()
        producer.flush()  # nothing left: returns
    assert all(isinstance(e, ProducerBlockedError) for e in errors), errors
    assert "within max.block.ms" in str(errors[0])
    assert failed - sent >= 0.3
    assert any(isinstance(e, NoBrokersAvailableError) for e in heard)


def test_librdkafkas_bound_is_delivery_timeout_ms() -> None:
    with Producer(
        bootstrap_servers=dead_address(),
        metadata_wait="delivery.timeout.ms",
        message_timeout_ms=400,
        max_block_ms=600_000,
        **QUICK,
    ) as producer:
        sent = time.monotonic()
        future = producer.send("t", b"v")
        error = future.exception(GUARD_S)
        failed = time.monotonic()
    assert isinstance(error, DeliveryTimeoutError), error
    assert "partitions were unknown" in str(error)
    assert failed - sent >= 0.4
    with pytest.raises(ArgumentValueError, match="metadata_wait"):
        Producer(bootstrap_servers=dead_address(), metadata_wait="forever")


def test_under_librdkafkas_bound_an_unknown_topic_fails_after_its_propagation_time(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    with Producer(
        bootstrap_servers=bs,
        metadata_wait="delivery.timeout.ms",
        message_timeout_ms=600_000,
        topic_metadata_propagation_max_ms=300,
        **QUICK,
    ) as producer:
        sent = time.monotonic()
        future = producer.send(fresh("park-nosuch"), b"v")
        error = future.exception(GUARD_S)
        failed = time.monotonic()
    assert isinstance(error, KafkaError) and error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert "topic.metadata.propagation.max.ms" in str(error)
    assert failed - sent >= 0.3


def test_an_aborted_transaction_fails_its_parked_records(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    with Producer(
        bootstrap_servers=bs, transactional_id=fresh("park-txn"), max_block_ms=600_000
    ) as producer:
        producer.init_transactions()
        producer.begin_transaction()
        future = producer.send(fresh("park-nosuch"), b"v")
        producer.abort_transaction()
        assert isinstance(future.exception(GUARD_S), TransactionAbortedError)


_FORGOTTEN = r"""
import sys
from trafka.sdk.blocking import Producer

producer = Producer(bootstrap_servers=sys.argv[1], max_block_ms=600_000)
for topic in sys.argv[2:]:
    producer.send(topic, b"never delivered")
print("ends without close()", flush=True)
"""


@pytest.mark.parametrize("where", ["no broker", "a topic the broker does not know"])
def test_a_script_that_cannot_deliver_still_exits(broker: RunningBroker, where: str) -> None:
    """Closed as the interpreter exits, the producer gives up what it cannot
    deliver without waiting (its records would wait 10 minutes here)."""
    if where == "no broker":
        args = [dead_address(), "t"]
    else:
        args = [broker.bootstrap_servers, fresh("park-exit")]
    done: Any = subprocess.run(
        [sys.executable, "-c", _FORGOTTEN, *args],
        capture_output=True,
        text=True,
        timeout=GUARD_S,  # a script held open by its records fails here
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "ends without close()" in done.stdout
