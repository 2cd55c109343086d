"""confluent-kafka's ``Producer`` over trafka's blocking producer.

Rules:

* ``produce()`` hands the record to :class:`trafka.sdk.blocking.Producer`
  and returns; its delivery report (``on_delivery(err, msg)``, from the call
  or the configuration's ``on_delivery`` / ``dr_cb`` / ``dr_msg_cb``) is
  called by ``poll()`` or ``flush()`` in the caller's thread, as librdkafka's.
* ``len(producer)`` counts the records produced whose report has not been
  served yet; past ``queue.buffering.max.messages`` (librdkafka's default
  100000) ``produce()`` raises ``BufferError`` at once, as librdkafka's.
* A record's outcome is awaited per batch, not per record: the records that
  went into one batch of trafka's producer form a group, and one callback on
  its first record queues the whole group for ``poll()`` once the batch is
  done (a record whose batch is not known when ``produce()`` returns is a
  group of its own). Groups are served in the order their batches finish, so
  a slow partition holds up no other's reports, as librdkafka's. A group
  counts its records (``len()``) and keeps an entry only for a record with a
  report to serve: a record without one costs nothing more per record than
  the blocking producer's ``send`` (the core's one C call, :mod:`trafka.sdk.hot_append`).
* Keys hash as librdkafka's (``partitioner`` ``consistent_random``) unless
  the configuration says otherwise, so records land where confluent-kafka put
  them.
* A producer dropped without ``close()`` (confluent-kafka's goes with its last
  reference) is flushed and closed by a finalizer on a daemon thread of its
  own, never on the thread the garbage collector happens to run in: that can
  be another client's loop thread, where closing cannot reach its own loop
  (trio refuses a blocking call from a thread running trio, anyio's portal
  swallows the refusal and waits for its loop's thread forever). Not while the
  interpreter exits: then the SDK closes every client still open (a script
  without ``close()`` exits, and its records are delivered).
"""

from __future__ import annotations

import threading
import time
import weakref
from typing import Any

from trafka.sdk.blocking import Producer as _Producer

from ._callbacks import Served, translate_config
from ._errors import KafkaError, KafkaException, error_of, internal
from ._types import TIMESTAMP_CREATE_TIME, Message, TopicPartition

__all__ = ["Producer"]

_REPORTS = ("on_delivery", "dr_cb", "dr_msg_cb")


class _Group:
    """The records produced into one batch of trafka's producer, served together:
    how many, and what the reports of those that asked for one need."""

    __slots__ = ("batch", "records", "reports")

    def __init__(self, batch: Any) -> None:
        self.batch = batch
        self.records = 0
        self.reports: list[tuple[Any, ...]] = []


def _bytes(name: str, value: Any) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"{name} must be bytes or str, not {type(value).__name__}")


class Producer:
    """confluent-kafka's ``Producer(config)``: ``produce``, ``poll``,
    ``flush``, ``len()`` and the transactions' calls."""

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        conf = {**(config or {}), **kwargs}
        self._served = Served()
        self._report = None
        for name in _REPORTS:
            self._report = conf.pop(name, None) or self._report
        self._only_errors = str(conf.pop("delivery.report.only.error", False)).lower() == "true"
        self._max = int(conf.pop("queue.buffering.max.messages", 100_000))
        conf.setdefault("partitioner", "consistent_random")
        self._unserved = 0  # produced, report not served yet
        self._lock = threading.Lock()
        # The group of each batch that records went into, until it is served.
        self._groups: dict[Any, _Group] = {}
        try:
            self._producer = _Producer(translate_config(conf, self._served))
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None
        self._send = self._producer.send
        self._finalizer = weakref.finalize(self, _close_aside, self._producer)
        self._finalizer.atexit = False

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
        callback: Any = None,
    ) -> None:
        """Queue a record; its report comes through ``poll()``/``flush()``.

        Raises:
            BufferError: ``queue.buffering.max.messages`` records await their report.
            TypeError: a key or value that is not bytes or str.
            KafkaException: the record was refused (``_INVALID_ARG``...).
        """
        report = on_delivery or callback or self._report
        if value is not None and type(value) is not bytes:
            value = _bytes("value", value)
        if key is not None and type(key) is not bytes:
            key = _bytes("key", key)
        lock = self._lock
        lock.acquire()
        if self._max and self._unserved >= self._max:
            lock.release()
            raise BufferError(KafkaError(internal("_QUEUE_FULL"), "Local: Queue full"))
        self._unserved += 1
        lock.release()
        try:
            if partition < 0 and headers is None and not timestamp:
                future = self._send(topic, value, key)  # the blocking producer's fast path
            else:
                future = self._send(
                    topic,
                    value,
                    key,
                    partition=None if partition < 0 else partition,
                    headers=headers,
                    timestamp_ms=timestamp or None,
                )
        except Exception as exc:
            with lock:
                self._unserved -= 1
            raise KafkaException(error_of(exc)) from None
        # The record joins the group of its batch, served once the batch is done;
        # a record whose batch is not known yet (queued for the loop) is a group
        # of its own.
        batch = future.batch
        lock.acquire()
        group = None if batch is None else self._groups.get(batch)
        first = group is None
        if group is None:
            group = _Group(batch)
            if batch is not None:
                self._groups[batch] = group
        group.records += 1
        if report is not None:  # what the report needs, kept only for a report
            group.reports.append((future, report, topic, partition, key, value, headers))
        lock.release()
        if first:
            future.add_done_callback(lambda _: self._served.put(self._deliver, group))

    def _deliver(self, group: _Group) -> None:
        """Serve the reports of a group whose batch is done."""
        with self._lock:
            if group.batch is not None:  # no record joins it any more
                self._groups.pop(group.batch, None)
            self._unserved -= group.records
        for entry in group.reports:
            self._report_one(*entry)

    def _report_one(
        self,
        future: Any,
        report: Any,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Any,
    ) -> None:
        error = future.exception()
        if error is not None:
            msg = Message(topic, partition, -1001, key, value, _headers(headers), error_of(error))
            report(msg.error(), msg)
            return
        if self._only_errors:
            return
        md = future.result()
        stamp = (TIMESTAMP_CREATE_TIME, md.timestamp)
        report(
            None,
            Message(md.topic, md.partition, md.offset, key, value, _headers(headers), None, stamp),
        )

    def poll(self, timeout: float | None = None) -> int:
        """Serve the reports and callbacks due, waiting up to ``timeout`` s
        (None or negative: until one) for a first; how many were served."""
        return self._served.serve(None if timeout is None or timeout < 0 else timeout)

    def flush(self, timeout: float | None = None) -> int:
        """Wait for every record's outcome (up to ``timeout`` s) and serve
        the reports; the number of records still awaiting theirs."""
        if timeout is None or timeout < 0:
            self._producer.flush()
        else:
            deadline = time.monotonic() + timeout
            while self._unserved:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._served.serve(min(left, 0.1))
        self._served.serve(0)
        return len(self)

    def __len__(self) -> int:
        return self._unserved

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """The partitions of ``topic`` (waiting for its metadata), as
        confluent-kafka's ``ClusterMetadata``; only with a topic here."""
        from .admin import ClusterMetadata, TopicMetadata

        if topic is None:
            raise KafkaException(KafkaError(internal("_NOT_IMPLEMENTED"), "name a topic"))
        partitions = self._call(self._producer.partitions_for, topic)
        return ClusterMetadata({topic: TopicMetadata(topic, dict.fromkeys(partitions))})

    def init_transactions(self, timeout: float | None = None) -> None:
        self._call(self._producer.init_transactions)

    def begin_transaction(self) -> None:
        self._call(self._producer.begin_transaction)

    def commit_transaction(self, timeout: float | None = None) -> None:
        self.flush()
        self._call(self._producer.commit_transaction)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._call(self._producer.abort_transaction)

    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float | None = None
    ) -> None:
        from trafka.sdk import TopicPartition as _TP

        offsets = {_TP(tp.topic, tp.partition): tp.offset for tp in positions}
        self._call(self._producer.send_offsets_to_transaction, offsets, group_metadata)

    def _call(self, fn: Any, *args: Any) -> Any:
        try:
            return fn(*args)
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None

    def close(self) -> None:
        """Not in confluent-kafka (its producer goes with its last reference):
        flush and close trafka's producer."""
        self._finalizer.detach()
        self._producer.close()


def _close_aside(producer: _Producer) -> None:
    """Close a dropped producer on a daemon thread (see the module's rules)."""

    def close() -> None:
        try:
            producer.close()
        except Exception:
            pass  # nobody is left to tell

    threading.Thread(target=close, name="trafka-dropped-producer", daemon=True).start()


def _headers(headers: Any) -> list[tuple[str, bytes | None]] | None:
    if not headers:
        return None
    items = headers.items() if isinstance(headers, dict) else headers
    return [(k, v.encode() if isinstance(v, str) else v) for k, v in items]
