"""confluent-kafka's ``Producer`` over trafka's blocking producer.

Rules:

* ``produce()`` hands the record to :class:`trafka.sdk.blocking.Producer`
  and returns; its delivery report (``on_delivery(err, msg)``, from the call
  or the configuration's ``on_delivery`` / ``dr_cb`` / ``dr_msg_cb``) is
  called by ``poll()`` or ``flush()`` in the caller's thread, as librdkafka's.
* ``len(producer)`` counts the records produced whose report has not been
  served yet; past ``queue.buffering.max.messages`` (librdkafka's default
  100000) ``produce()`` raises ``BufferError`` at once, as librdkafka's; the
  bytes buffered are bounded by librdkafka's ``queue.buffering.max.kbytes``
  (1 GiB by default), not by Java's 32 MiB ``buffer.memory``.
* A record's outcome is awaited per batch, not per record: the records that
  went into one batch of trafka's producer form a group, and one callback on
  its first record queues the whole group for ``poll()`` once the batch is
  done (a record whose batch is not known when ``produce()`` returns is a
  group of its own). Groups are served in the order their batches finish, so
  a slow partition holds up no other's reports, as librdkafka's. A group
  counts its records and keeps an entry only for a record with a report to
  serve; ``len()`` is the records produced less those whose group was served.
  Where the C extension is built, ``produce()`` of a record given no
  partition, timestamp or headers is one C call (``GroupedSend``, in
  :mod:`trafka.sdk.hot_append`'s extension) over the blocking producer's
  ``send`` (itself one C call); the Python ``produce`` is its reference and
  takes every other call.
* Keys hash as librdkafka's (``partitioner`` ``consistent_random``) unless
  the configuration says otherwise, so records land where confluent-kafka put
  them.
* ``message.timeout.ms`` bounds a record as librdkafka's does (300000 by
  default, or ``transaction.timeout.ms`` for a transactional producer, as
  librdkafka's): ``produce()`` never waits for its topic's metadata (the
  blocking producer's ``metadata_wait="delivery.timeout.ms"``), and a record
  still without it when its timeout passes is reported ``_MSG_TIMED_OUT``
  (its partition and offset None, as librdkafka's unassigned ones); a topic
  the brokers say does not exist is reported ``UNKNOWN_TOPIC_OR_PART`` after
  ``topic.metadata.propagation.max.ms`` (30 s) if that comes first.
* ``error_cb`` hears, through ``poll()``/``flush()``, of each broker or
  bootstrap address going out of reach (``_TRANSPORT``) and of every broker
  being down (``_ALL_BROKERS_DOWN``): trafka's cluster reports each once until
  it is reached again, where librdkafka repeats ``_TRANSPORT`` at every failed
  connect.
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

import operator
import threading
import time
import types
import weakref
from typing import Any, NoReturn

from trafka.sdk import ProducerBlockedError, hot_append
from trafka.sdk.blocking import Producer as _Producer

from ._callbacks import (
    ClosedClient,
    Served,
    check_sasl_credentials,
    config_of,
    seconds_to_ms,
    translate_config,
)
from ._errors import KafkaError, KafkaException, error_of, internal
from ._logs import queue_logs
from ._types import TIMESTAMP_CREATE_TIME, TIMESTAMP_NOT_AVAILABLE, Message, TopicPartition

__all__ = ["Producer"]

_REPORTS = ("on_delivery", "dr_cb", "dr_msg_cb")


class _Counts:
    """``GroupedSend``'s counts and groups where the C extension is not built
    (``trafka.sdk._hot_append``): the same calls, under a lock. A group is
    ``[batch, records, reports]``."""

    __slots__ = ("_groups", "_lock", "max", "produced", "served")

    def __init__(self, groups: dict[Any, list[Any]], max_: int) -> None:
        self._groups = groups
        self._lock = threading.Lock()
        self.max = max_
        self.produced = 0
        self.served = 0

    def reserve(self) -> bool:
        with self._lock:
            if self.max and self.produced - self.served >= self.max:
                return False
            self.produced += 1
            return True

    def unreserve(self) -> None:
        with self._lock:
            self.produced -= 1

    def join(self, future: Any, entry: tuple[Any, ...] | None) -> list[Any] | None:
        batch = future.batch
        with self._lock:
            group = None if batch is None else self._groups.get(batch)
            first = group is None
            if group is None:
                group = [batch, 0, []]
                if batch is not None:
                    self._groups[batch] = group
            group[1] += 1
            if entry is not None:
                group[2].append(entry)
        return group if first else None


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

    #: Until ``__init__`` has made the client (a subclass that never calls it
    #: has none), every call raises as after ``close()``, as confluent-kafka's.
    _closed = True
    _producer: Any = ClosedClient("Producer has been closed")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        conf = config_of(args, kwargs, "Producer")
        self._conf = dict(conf)
        _check_partitioner(conf.get("partitioner"))
        self._served = Served()
        self._report = None
        queue_logs(conf, self._served, "producer")
        for name in _REPORTS:
            self._report = conf.pop(name, None) or self._report
        self._only_errors = str(conf.pop("delivery.report.only.error", False)).lower() == "true"
        self._max = int(conf.pop("queue.buffering.max.messages", 100_000))
        conf.setdefault("partitioner", "consistent_random")
        if "buffer.memory" not in conf:  # librdkafka's default bound, 1 GiB (Java's: 32 MiB)
            conf.setdefault("queue.buffering.max.kbytes", 1_048_576)
        _default_message_timeout(conf)
        self._lock = threading.Lock()
        # The group of each batch that records went into, until it is served:
        # [batch, records, reports], changed only by the counts' join().
        self._groups: dict[Any, list[Any]] = {}
        # (translate_config's ValueError and ImportError are raised as they are)
        translated = translate_config(conf, self._served)
        try:
            self._producer = _Producer(translated, metadata_wait="delivery.timeout.ms")
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None
        self._send = self._producer.send
        C = hot_append.accelerated
        # Records produced and served (len() is the difference), in one C call
        # per record where the extension is built: produce() below is its
        # reference, and takes every call the C one does not finish.
        self._counts: Any
        # produce() as this class does it (a subclass that serializes first calls it).
        self._produce_one: Any = types.MethodType(Producer.produce, self)
        if C is not None:
            self._counts = C.GroupedSend(
                self._send,
                self._groups,
                self._first,
                self._produce_one,
                self._failed,
                self._report,
                self._max,
            )
            self._produce_one = self._counts.produce
            if type(self).produce is Producer.produce:  # (a subclass's own produce stays)
                self.produce = self._counts.produce  # type: ignore[method-assign]
        else:
            self._counts = _Counts(self._groups, self._max)
        self._finalizer = weakref.finalize(self, _close_aside, self._producer)
        self._finalizer.atexit = False
        self._closed = False

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
        if self._closed:
            _closed()
        report = on_delivery or callback or self._report
        if value is not None and type(value) is not bytes:
            value = _bytes("value", value)
        if key is not None and type(key) is not bytes:
            key = _bytes("key", key)
        if not self._counts.reserve():
            raise BufferError(KafkaError(internal("_QUEUE_FULL"), "Local: Queue full"))
        if headers is not None:
            _check_headers(headers)
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
            self._failed(exc)
        # The record joins the group of its batch, served once the batch is done
        # (a record whose batch is not known yet, queued for the loop, is a group
        # of its own); what its report needs is kept only for a record with one.
        entry = None
        if report is not None:
            entry = (future, report, topic, partition, key, value, headers)
        group = self._counts.join(future, entry)
        if group is not None:
            self._first(future, group)

    def produce_batch(
        self,
        topic: str,
        messages: list[dict[str, Any]],
        partition: int = -1,
        on_delivery: Any = None,
        callback: Any = None,
    ) -> int:
        """Produce each of ``messages`` (dicts of ``value``, ``key``,
        ``partition``, ``callback``) as :meth:`produce`; how many were queued.

        A message that could not be queued (the queue is full, it is too
        large...) gets its error as ``_error`` in its dict, as confluent-kafka's.
        The messages are checked first: a malformed one raises before any is
        produced.

        Raises:
            TypeError: ``messages`` is not a list of dicts of bytes or str.
            NotImplementedError: a message has a ``timestamp`` (as confluent-kafka's).
        """
        if self._closed:
            _closed()
        if not isinstance(topic, str):
            raise TypeError(f"argument 1 must be str, not {_type_name(topic)}")
        if not isinstance(messages, list):
            raise TypeError("messages must be a list")
        partition = operator.index(partition)
        _check_batch(messages)
        default = on_delivery or callback
        produce = self._produce_one
        queued = 0
        for message in messages:
            get = message.get
            part = get("partition")
            try:
                produce(
                    topic,
                    get("value"),
                    get("key"),
                    partition if part is None else part,
                    get("callback") or default,
                )
            except BufferError as exc:
                message["_error"] = exc.args[0]
            except KafkaException as exc:
                message["_error"] = exc.args[0]
            else:
                queued += 1
        return queued

    def purge(self, in_queue: bool = True, in_flight: bool = True, blocking: bool = True) -> None:
        """Fail the records not sent yet (``in_queue``) with ``_PURGE_QUEUE``;
        their reports come through ``poll()`` / ``flush()``.

        Records in flight keep their outcome (librdkafka reports them
        ``_PURGE_INFLIGHT`` at once, not knowing whether they were written:
        trafka waits for the broker's answer, which says)."""
        if self._closed:
            _closed()
        if in_queue:
            self._call(self._producer.purge)

    def _failed(self, exc: Exception) -> NoReturn:
        """A record counted by the counts' reserve() was refused: uncount it and
        raise the error as confluent-kafka's."""
        self._counts.unreserve()
        raise KafkaException(error_of(exc)) from None

    def _first(self, future: Any, group: list[Any]) -> None:
        """The first record of ``group``: the group is served once its batch is done."""
        future.add_done_callback(lambda _: self._served.put(self._deliver, group))

    def _deliver(self, group: list[Any]) -> None:
        """Serve the reports of a group whose batch is done."""
        batch, _, reports = group
        with self._lock:
            if batch is not None and self._groups.get(batch) is group:
                del self._groups[batch]  # first: no record joins it any more
            self._counts.served += group[1]  # read after: every record it has
        for entry in reports:
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
            # The partition the record was given (None while it had none: an
            # unassigned record's, as librdkafka's); no offset, no timestamp.
            batch = future.batch
            placed = batch.partition if batch is not None else partition if partition >= 0 else None
            msg = Message(
                topic,
                placed,
                None,
                key,
                value,
                None,  # (confluent-kafka's delivery reports carry no headers)
                error_of(error),
                (TIMESTAMP_NOT_AVAILABLE, -1),
            )
            report(msg.error(), msg)
            return
        if self._only_errors:
            return
        md = future.result()
        stamp = (TIMESTAMP_CREATE_TIME, md.timestamp)
        report(
            None,
            Message(md.topic, md.partition, md.offset, key, value, None, None, stamp),
        )

    def poll(self, timeout: float | None = None) -> int:
        """Serve the reports and callbacks due, waiting up to ``timeout`` s
        (None or negative: until one) for a first; how many were served."""
        if self._closed:
            _closed()
        return self._served.serve(None if timeout is None or timeout < 0 else timeout)

    def flush(self, timeout: float | None = None) -> int:
        """Wait for every record's outcome (up to ``timeout`` s) and serve
        the reports; the number of records still awaiting theirs."""
        if self._closed:
            _closed()
        if timeout is None or timeout < 0:
            self._producer.flush()
        else:
            deadline = time.monotonic() + timeout
            while len(self):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._served.serve(min(left, 0.1))
        self._served.serve(0)
        return len(self)

    def __len__(self) -> int:
        if self._closed:
            return 0
        counts = self._counts
        unserved: int = counts.produced - counts.served
        return unserved

    def __bool__(self) -> bool:  # (not len(): an idle producer is still a producer)
        return True

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """confluent-kafka's call, its arguments checked as there; trafka's
        client keeps logging in with the credentials it was made with."""
        check_sasl_credentials(username, password)
        if self._closed:
            raise RuntimeError("Producer has been closed")

    def __enter__(self) -> Producer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Flush and close, as ``close()``; an exception of the block goes on."""
        if not self._closed:
            self.close()

    def cluster_id(self, timeout: float = -1) -> str | None:
        """The id of the cluster the client's brokers belong to."""
        from .admin._client import ask_cluster  # (the admin client loads when first asked)

        found: str | None = ask_cluster(None if self._closed else self._conf, "cluster_id", timeout)
        return found

    def list_topics(self, topic: str | None = None, timeout: float = -1) -> Any:
        """The cluster's brokers and topics (or ``topic`` alone), as
        confluent-kafka's ``ClusterMetadata``."""
        from .admin._client import ask_cluster

        return ask_cluster(None if self._closed else self._conf, "list_topics", topic, timeout)

    #: An ``init_transactions()`` that timed out and goes on in the background:
    #: the other transaction calls are ``_CONFLICT`` until one completes, as
    #: librdkafka's.
    _initializing = False

    def init_transactions(self, timeout: float | None = None) -> None:
        """Get the producer id of ``transactional.id``, waiting up to ``timeout``
        s (None or negative: ``max.block.ms``). Timed out, it raises a retriable
        ``_TIMED_OUT`` and goes on: call it again to keep waiting."""
        if self._closed:
            _closed()
        self._initializing = True
        try:
            self._producer.init_transactions(seconds_to_ms(timeout))
        except ProducerBlockedError as exc:
            raise KafkaException(
                KafkaError(internal("_TIMED_OUT"), str(exc), retriable=True)
            ) from None
        except Exception as exc:
            self._initializing = False
            raise KafkaException(error_of(exc)) from None
        self._initializing = False

    def _txn_call(self, what: str, fn: Any, *args: Any) -> Any:
        if self._closed:
            _closed()
        if self._initializing:
            raise KafkaException(
                KafkaError(
                    internal("_CONFLICT"),
                    f"{what} conflicts with init_transactions(), which has not completed: "
                    "call it again first",
                    retriable=True,
                )
            )
        return self._call(fn, *args)

    def begin_transaction(self) -> None:
        self._txn_call("begin_transaction()", self._producer.begin_transaction)

    def commit_transaction(self, timeout: float | None = None) -> None:
        self._txn_call("commit_transaction()", self.flush)
        self._call(self._producer.commit_transaction)

    def abort_transaction(self, timeout: float | None = None) -> None:
        self._txn_call("abort_transaction()", self._producer.abort_transaction)

    def send_offsets_to_transaction(
        self, positions: list[TopicPartition], group_metadata: Any, timeout: float | None = None
    ) -> None:
        from trafka.sdk import TopicPartition as _TP

        offsets = {_TP(tp.topic, tp.partition): tp.offset for tp in positions}
        self._txn_call(
            "send_offsets_to_transaction()",
            self._producer.send_offsets_to_transaction,
            offsets,
            group_metadata,
        )

    def _call(self, fn: Any, *args: Any) -> Any:
        if self._closed:
            _closed()
        try:
            return fn(*args)
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None

    def close(self) -> bool:
        """As confluent-kafka's (2.x): flush (abort a transaction still open),
        serve the reports, and close trafka's producer; True. Every call but
        ``len()`` (0) then raises ``RuntimeError``, as confluent-kafka's."""
        if self._closed:
            return True
        self._finalizer.detach()
        self._producer.close()
        self._served.stop_background()
        self._served.serve(0)
        self._closed = True
        # The C produce bound on the instance goes too (produce() checks above).
        self.__dict__.pop("produce", None)
        self._produce_one = types.MethodType(Producer.produce, self)
        return True


def _closed() -> NoReturn:
    raise RuntimeError("Producer has been closed")


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


#: librdkafka's partitioners (trafka's others are not librdkafka's to name).
_PARTITIONERS = frozenset(
    (
        "random",
        "consistent",
        "consistent_random",
        "murmur2",
        "murmur2_random",
        "fnv1a",
        "fnv1a_random",
    )
)


def _check_partitioner(name: Any) -> None:
    if isinstance(name, str) and name not in _PARTITIONERS:
        raise KafkaException(
            KafkaError(
                internal("_INVALID_ARG"),
                f'Invalid value for configuration property "partitioner": {name}',
            )
        )


def _check_headers(headers: Any) -> None:
    """confluent-kafka's checks of ``produce(headers=...)``, with its TypeErrors."""
    if isinstance(headers, dict):
        pairs = list(headers.items())
    elif isinstance(headers, list):
        pairs = headers
        for pair in pairs:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise TypeError("Headers are expected to be a list of (key, value) tuples")
    else:
        raise TypeError(
            f"expected headers to be dict or list of (key, value) tuples, not {_type_name(headers)}"
        )
    for _, value in pairs:
        if value is not None and not isinstance(value, bytes | str):
            raise TypeError(
                "expected header value to be None, binary, or unicode string, "
                f"not {_type_name(value)}"
            )


def _check_batch(messages: list[Any]) -> None:
    """confluent-kafka's checks of ``produce_batch``'s messages, all before any is produced."""
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise TypeError(f"Message at index {i} must be a dict")
        for field in ("value", "key"):
            v = message.get(field)
            if v is not None and not isinstance(v, bytes | str):
                raise TypeError(f"Message {field} at index {i} must be bytes or str")
        part = message.get("partition")
        if part is not None and (not isinstance(part, int) or isinstance(part, bool)):
            raise TypeError(f"Message partition at index {i} must be int")
        if "timestamp" in message:
            raise NotImplementedError(
                "Message timestamps are not currently supported in batch mode"
            )


def _default_message_timeout(conf: dict[str, Any]) -> None:
    """librdkafka's ``message.timeout.ms`` unless a delivery timeout is set:
    300000, or a transactional producer's ``transaction.timeout.ms`` (librdkafka
    lowers it so; Java's ``delivery.timeout.ms`` default is 120000)."""
    names = ("message.timeout.ms", "message_timeout_ms", "delivery.timeout.ms")
    if any(name in conf for name in (*names, "delivery_timeout_ms")):
        return
    timeout = 300_000
    if conf.get("transactional.id", conf.get("transactional_id")) is not None:
        txn = conf.get("transaction.timeout.ms", conf.get("transaction_timeout_ms", 60_000))
        try:
            timeout = min(timeout, int(txn))
        except (TypeError, ValueError):
            pass  # the configuration refuses it, naming it
    conf["message.timeout.ms"] = timeout


def _close_aside(producer: _Producer) -> None:
    """Close a dropped producer on a daemon thread (see the module's rules)."""

    def close() -> None:
        try:
            producer.close()
        except Exception:
            pass  # nobody is left to tell

    threading.Thread(target=close, name="trafka-dropped-producer", daemon=True).start()
