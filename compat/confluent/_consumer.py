"""confluent-kafka's ``Consumer`` over trafka's blocking consumer.

Rules:

* ``poll()`` returns a :class:`Message` (a record, or an event with
  ``error()`` set: the end of a partition, ``_PARTITION_EOF``) or None, and
  serves the configuration's callbacks (``on_commit``, ``error_cb``,
  ``stats_cb``) in the caller's thread; an error trafka raises is raised as
  :class:`KafkaException` with librdkafka's code for it.
* ``on_assign`` / ``on_revoke`` / ``on_lost`` are called with the consumer
  and a list of :class:`TopicPartition`, while the consumer waits for them.
* ``commit(asynchronous=False)`` returns the partitions committed, with their
  offsets; with nothing to commit it raises ``_NO_OFFSET``, as librdkafka.
* ``consume(n, timeout)`` returns once it has ``n`` records and events or the
  timeout has passed (librdkafka's ``rd_kafka_consume_batch_queue``), at most ``n``.
* Records come in bulk: ``consume()`` takes whole lists of what the blocking
  consumer holds back (:meth:`trafka.sdk.blocking.Consumer.take`), ``poll()``
  one record of it; the blocking consumer keeps what is held back out of
  commits and drops it on a seek, a pause, an assignment and when partitions
  are revoked or lost. A position is after the last record *handed out*.
* A record is handed out as a :class:`Message` over the SDK's record tuple
  (:class:`_Fetched`): built with one slot set, its fields read when asked.
  The C extension ``trafka.compat.confluent._message`` (optional, off with
  ``TRAFKA_NO_SPEEDUPS``) is the same view without a Python frame per record
  (``FetchedMessage``, a virtual subclass of :class:`Message`); ``_Fetched``
  is its reference and fallback.
"""

from __future__ import annotations

import operator
import time
from typing import Any

from trafka.common.extensions import load_extension
from trafka.sdk import PartitionEOF
from trafka.sdk import TopicPartition as _TP
from trafka.sdk.blocking import Consumer as _Consumer

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
from ._types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    TIMESTAMP_NOT_AVAILABLE,
    Message,
    TopicPartition,
)

__all__ = ["Consumer"]


def _tps(offsets: Any) -> list[TopicPartition]:
    return [TopicPartition(tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())]


# The SDK's ConsumerRecord fields, by index (a tuple: indexing is its cheapest read).
_TOPIC, _PARTITION, _OFFSET, _TIMESTAMP, _KEY, _VALUE, _HEADERS, _TS_TYPE, _EPOCH = range(9)
# ConsumerRecord.timestamp_type (0 create, 1 log append, -1 none: a magic 0 message)
# as librdkafka's.
_TIMESTAMP_TYPES = {0: TIMESTAMP_CREATE_TIME, 1: TIMESTAMP_LOG_APPEND_TIME}
_NO_TIMESTAMP = (TIMESTAMP_NOT_AVAILABLE, -1)  # an event's, as librdkafka's
_tp_of = operator.itemgetter(_TOPIC, _PARTITION)
_offset_of = operator.itemgetter(_OFFSET)


class _Fetched(Message):
    """A consumed record, as confluent-kafka's :class:`Message`: a view of the
    SDK's record tuple (``_r``), so that handing a record out costs one object
    with one slot, and each field is read when asked. The setters put a new
    tuple in its place; ``headers()`` makes its list once (confluent-kafka's
    returns the same list each time), or None when there are none."""

    __slots__ = ("_r",)

    def __init__(self, record: Any) -> None:
        self._r = record

    def topic(self) -> str:
        topic: str = self._r[_TOPIC]
        return topic

    def partition(self) -> int:
        partition: int = self._r[_PARTITION]
        return partition

    def offset(self) -> int:
        offset: int = self._r[_OFFSET]
        return offset

    def key(self) -> Any:
        return self._r[_KEY]

    def value(self) -> Any:
        return self._r[_VALUE]

    def headers(self) -> list[tuple[str, bytes | None]] | None:
        record = self._r
        headers = record[_HEADERS]
        if type(headers) is tuple:  # as decoded
            headers = list(headers) or None
            self._r = record._replace(headers=headers)
        result: list[tuple[str, bytes | None]] | None = headers
        return result

    def error(self) -> KafkaError | None:
        try:  # (set only by set_error)
            error: KafkaError | None = self._error
        except AttributeError:
            return None
        return error

    def delivery_count(self) -> int | None:
        return None

    def timestamp(self) -> tuple[int, int]:
        record = self._r
        kind = _TIMESTAMP_TYPES.get(record[_TS_TYPE], TIMESTAMP_NOT_AVAILABLE)
        return (kind, record[_TIMESTAMP] if kind != TIMESTAMP_NOT_AVAILABLE else -1)

    def latency(self) -> float | None:
        return None

    def leader_epoch(self) -> int | None:
        epoch: int = self._r[_EPOCH]
        return epoch if epoch >= 0 else None

    def set_key(self, key: Any) -> None:
        self._r = self._r._replace(key=key)

    def set_value(self, value: Any) -> None:
        self._r = self._r._replace(value=value)

    def set_headers(self, headers: list[tuple[str, bytes | None]] | None) -> None:
        self._r = self._r._replace(headers=headers)

    def set_topic(self, topic: str | None) -> None:
        self._r = self._r._replace(topic=topic)

    def __len__(self) -> int:
        value = self._r[_VALUE]
        return len(value) if isinstance(value, bytes | str) else 0

    def __repr__(self) -> str:
        r = self._r
        return (
            f"Message(topic={r[_TOPIC]!r}, partition={r[_PARTITION]}, "
            f"offset={r[_OFFSET]}, error={self.error()!r})"
        )


# The C view of a record, or None (not built, or TRAFKA_NO_SPEEDUPS).
_accelerated = load_extension(f"{__package__}._message")
if _accelerated is not None:
    Message.register(_accelerated.FetchedMessage)
    _view: Any = _accelerated.FetchedMessage
    _wrap: Any = _accelerated.wrap
else:
    _view = _Fetched

    def _wrap(records: list[Any]) -> list[Message]:
        return list(map(_Fetched, records))


def _eof_message(record: Any) -> Message:
    eof = KafkaError(internal("_PARTITION_EOF"), "Broker: No more messages")
    return Message(
        record.topic, record.partition, record.offset, error=eof, timestamp=_NO_TIMESTAMP
    )


def _message(record: Any) -> Message:
    """A record or an end-of-partition event as confluent-kafka's message."""
    return _eof_message(record) if type(record) is PartitionEOF else _view(record)


class _Listener:
    """on_assign / on_revoke / on_lost as trafka's rebalance listener."""

    def __init__(self, consumer: Consumer, assign: Any, revoke: Any, lost: Any) -> None:
        self._consumer = consumer
        self._calls = {"assigned": assign, "revoked": revoke, "lost": lost or revoke}
        #: While a callback runs: its event and the partitions trafka's group
        #: hands over (librdkafka's callback assigns them itself: the drop-in's
        #: assign() of them there only starts them at the offsets given).
        self.event: str | None = None
        self.handing_over: frozenset[_TP] = frozenset()

    def _call(self, which: str, partitions: Any) -> None:
        fn = self._calls[which]
        if fn is not None:
            self.event, self.handing_over = which, frozenset(partitions)
            try:
                fn(
                    self._consumer,
                    [TopicPartition(tp.topic, tp.partition) for tp in sorted(partitions)],
                )
            finally:
                self.event, self.handing_over = None, frozenset()

    def on_partitions_assigned(self, partitions: Any) -> None:
        self._call("assigned", partitions)

    def on_partitions_revoked(self, partitions: Any) -> None:
        self._call("revoked", partitions)

    def on_partitions_lost(self, partitions: Any) -> None:
        self._call("lost", partitions)


class Consumer:
    """confluent-kafka's ``Consumer(config)``."""

    #: Until ``__init__`` has made the client (a subclass that never calls it
    #: has none), every call raises as after ``close()``, as confluent-kafka's.
    _closed = True
    _consumer: Any = ClosedClient("Consumer closed")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        conf = config_of(args, kwargs, "Consumer")
        if conf.get("group.id", conf.get("group_id")) is None:
            raise ValueError("Failed to create consumer: group.id must be set")
        _heartbeat_within_session(conf)
        self._served = Served()
        self._pending = self._served.pending
        queue_logs(conf, self._served, "consumer")
        on_commit = conf.pop("on_commit", None)
        self._on_commit = on_commit
        if on_commit is not None:
            conf["on_commit"] = self._served.wrap(
                on_commit,
                lambda err, offsets: (None if err is None else error_of(err), _tps(offsets)),
            )
        self._conf = conf
        self._closed = False
        # What commit(asynchronous=False) committed, per partition (librdkafka
        # commits a position once: see commit()).
        self._committed: dict[_TP, int] = {}
        # librdkafka's position: after the last record handed out (or where a
        # seek put it), not known (-1001) before either.
        self._positions: dict[tuple[str, int], int] = {}
        # An error met by consume() after it had taken records: raised next.
        self._error: BaseException | None = None
        # (translate_config's ValueError and ImportError are raised as they are)
        translated = translate_config(conf, self._served)
        try:
            self._consumer: Any = _Consumer(config=translated)
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None
        self._getone = self._consumer.getone  # (timeout_ms)
        self._take = self._consumer.take  # (max_records, timeout_ms)
        self._eof_events: bool = self._consumer.config.enable_partition_eof

    def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        if self._closed:
            raise RuntimeError("Consumer closed")
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None

    def subscribe(
        self, topics: list[str], on_assign: Any = None, on_revoke: Any = None, on_lost: Any = None
    ) -> None:
        listener = self._listener = _Listener(self, on_assign, on_revoke, on_lost)
        pattern = [t for t in topics if t.startswith("^")]
        if pattern:
            self._call(
                self._consumer.subscribe,
                pattern="|".join(p[1:] for p in pattern),
                listener=listener,
            )
        else:
            self._call(self._consumer.subscribe, topics, listener=listener)

    def unsubscribe(self) -> None:
        self._call(self._consumer.unsubscribe)

    def poll(self, timeout: float | None = None) -> Message | None:
        """The next record or event, waiting up to ``timeout`` s (None: forever)."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        if self._pending():
            self._served.serve(0)
        if self._error is not None:
            self._raise_held_error()
        record: Any
        try:  # (seconds_to_ms inline: this is the per-record path)
            record = self._getone(None if timeout is None or timeout < 0 else timeout * 1000)
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None
        if self._pending():
            self._served.serve(0)
        if record is None:
            return None
        if type(record) is PartitionEOF:
            return _eof_message(record)
        self._positions[record[_TOPIC], record[_PARTITION]] = record[_OFFSET] + 1
        message: Message = _view(record)
        return message

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` records and events: once there are that many,
        or once ``timeout`` s (None or negative: forever) have passed."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        if num_messages < 0 or num_messages > 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")
        if self._pending():
            self._served.serve(0)
        if self._error is not None:
            self._raise_held_error()
        if num_messages == 0:
            return []
        timeout_ms = seconds_to_ms(timeout)
        deadline = None if timeout_ms is None else time.monotonic() + timeout_ms / 1000
        messages: list[Message] = []
        take = self._take
        while True:
            try:
                records = take(num_messages - len(messages), timeout_ms)
            except Exception as exc:
                if not messages:
                    raise KafkaException(error_of(exc)) from None
                # Those taken are handed out; the error comes with the next call.
                self._error = exc
                break
            if records:
                self._hand_out(records, messages)
                if len(messages) >= num_messages:
                    break
            if deadline is not None:
                timeout_ms = (deadline - time.monotonic()) * 1000
                if timeout_ms <= 0:
                    break
        if self._pending():
            self._served.serve(0)
        return messages

    def _hand_out(self, records: list[Any], messages: list[Message]) -> None:
        """``records`` (taken) as messages onto ``messages``, with the positions after them."""
        if self._eof_events:
            messages.extend(map(_message, records))
            records = [r for r in records if type(r) is not PartitionEOF]
        else:
            messages.extend(_wrap(records))
        # The last offset of each partition (records of a partition come in
        # order): one pass in C over the records, then one step per partition.
        last = dict(zip(map(_tp_of, records), map(_offset_of, records), strict=True))
        positions = self._positions
        for tp, offset in last.items():
            positions[tp] = offset + 1

    def _raise_held_error(self) -> None:
        exc, self._error = self._error, None
        assert exc is not None
        raise KafkaException(error_of(exc)) from None

    def _offsets(self, message: Any, offsets: Any) -> dict[_TP, int] | None:
        if self._closed:
            raise RuntimeError("Consumer closed")
        if message is not None and offsets is not None:
            raise ValueError("message and offsets are mutually exclusive")
        if message is not None:
            offset = message.offset()  # (None for a Message made by hand: librdkafka's -1001)
            return {
                _TP(message.topic(), message.partition()): (
                    OFFSET_INVALID if offset is None else offset
                )
                + 1
            }
        if offsets is not None:
            return {_TP(tp.topic, tp.partition): tp.offset for tp in offsets}
        return None

    def commit(
        self, message: Any = None, offsets: Any = None, asynchronous: bool = True
    ) -> list[TopicPartition] | None:
        """Commit the offset after ``message``, ``offsets``, or what was consumed.

        Logical offsets (negative: none consumed yet) are not committed; with
        none left the commit fails ``_NO_OFFSET``: raised, or given to
        ``on_commit`` when asynchronous, as librdkafka's."""
        if message is not None and message.error() is not None:
            raise KafkaException(KafkaError(internal("_INVALID_ARG")))
        chosen = self._offsets(message, offsets)
        if chosen is None:
            # librdkafka's: every assigned partition, those whose position moved
            # since this consumer's last commit of it with that position, the
            # others OFFSET_INVALID (not committed again)
            consumed = self._call(self._consumer.consumed_offsets)
            done = self._committed
            chosen = {
                tp: offset
                if (offset := consumed.get(tp, OFFSET_INVALID)) != done.get(tp)
                else OFFSET_INVALID
                for tp in sorted(self._call(self._consumer.assignment))
            }
        valid = {tp: offset for tp, offset in chosen.items() if offset >= 0}
        if not valid:
            self._nothing_to_commit(chosen, asynchronous)
            return None
        if asynchronous:
            self._call(self._consumer.commit_async, valid)
            return None
        self._call(self._consumer.commit, valid)
        self._committed.update(valid)
        return _tps(chosen)

    def _nothing_to_commit(self, chosen: dict[_TP, int], asynchronous: bool) -> None:
        error = KafkaError(internal("_NO_OFFSET"), "Commit failed: Local: No offset stored")
        if not asynchronous:
            raise KafkaException(error)
        on_commit = self._on_commit
        if on_commit is not None:
            self._served.put(on_commit, error, _tps(chosen))

    def store_offsets(self, message: Any = None, offsets: Any = None) -> None:
        """Store the offset after ``message``, or ``offsets``, for the next
        commit (``enable.auto.offset.store=false``); logical offsets are skipped."""
        chosen = self._offsets(message, offsets)
        if chosen is None:
            raise ValueError("expected either message or offsets")
        if self._consumer.config.enable_auto_offset_store:
            raise KafkaException(
                KafkaError(
                    internal("_INVALID_ARG"),
                    "StoreOffsets failed: store_offsets() needs enable.auto.offset.store=false",
                )
            )
        valid = {tp: offset for tp, offset in chosen.items() if offset >= 0}
        assigned = self._call(self._consumer.assignment)
        missing = [tp for tp in valid if tp not in assigned]
        if missing:
            raise KafkaException(
                KafkaError(
                    internal("_UNKNOWN_PARTITION"),
                    f"StoreOffsets failed: not assigned to this consumer: {_tps(dict.fromkeys(missing, 0))}",
                )
            )
        if valid:
            self._call(self._consumer.store_offsets, valid)

    #: The listener of the subscription (its callback's event, if one runs).
    _listener: _Listener | None = None

    def _in_callback(self, event: str) -> frozenset[_TP] | None:
        """The partitions being handed over, inside an ``event`` callback."""
        listener = self._listener
        if listener is None or listener.event != event:
            return None
        return listener.handing_over

    def assign(self, partitions: list[TopicPartition]) -> None:
        """Consume ``partitions`` (from their offsets, if given); in an
        ``on_assign`` callback, start the partitions handed over there."""
        if self._in_callback("assigned") is not None:
            self._start_at_given(partitions)
            return
        self._call(self._consumer.assign, [_TP(tp.topic, tp.partition) for tp in partitions])
        self._start_at_given(partitions)

    def _start_at_given(self, partitions: list[TopicPartition]) -> None:
        """Seek each partition given with an offset (or OFFSET_BEGINNING/END)."""
        for tp in partitions:
            if tp.offset != OFFSET_INVALID and tp.offset > -1000:
                self.seek(tp)

    def unassign(self) -> None:
        if self._in_callback("revoked") is not None or self._in_callback("lost") is not None:
            return  # (the group takes them back as the callback returns)
        self._call(self._consumer.assign, [])

    def assignment(self) -> list[TopicPartition]:
        assigned = self._call(self._consumer.assignment)
        return [TopicPartition(tp.topic, tp.partition) for tp in sorted(assigned)]

    def seek(self, partition: TopicPartition) -> None:
        tp = _TP(partition.topic, partition.partition)
        if partition.offset == OFFSET_BEGINNING:
            self._call(self._consumer.seek_to_beginning, tp)
        elif partition.offset == OFFSET_END:
            self._call(self._consumer.seek_to_end, tp)
        else:
            self._call(self._consumer.seek, tp, partition.offset)
            self._positions[(tp.topic, tp.partition)] = partition.offset

    def position(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """After the last record handed out of each partition (or where a
        seek put it); -1001 (OFFSET_INVALID) before either, as librdkafka's."""
        if self._closed:
            raise RuntimeError("Consumer closed")
        return [
            TopicPartition(
                tp.topic,
                tp.partition,
                self._positions.get((tp.topic, tp.partition), OFFSET_INVALID),
            )
            for tp in partitions
        ]

    def committed(
        self, partitions: list[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        out = []
        timeout_ms = seconds_to_ms(timeout)
        for tp in partitions:
            offset = self._call(self._consumer.committed, _TP(tp.topic, tp.partition), timeout_ms)
            out.append(
                TopicPartition(tp.topic, tp.partition, OFFSET_INVALID if offset is None else offset)
            )
        return out

    def get_watermark_offsets(
        self, partition: TopicPartition, timeout: float | None = None, cached: bool = False
    ) -> tuple[int, int]:
        tp = _TP(partition.topic, partition.partition)
        low = self._call(self._consumer.beginning_offsets, [tp])[tp]
        high = self._call(self._consumer.end_offsets, [tp])[tp]
        return low, high

    def pause(self, partitions: list[TopicPartition]) -> None:
        self._call(self._consumer.pause, *[_TP(tp.topic, tp.partition) for tp in partitions])

    def resume(self, partitions: list[TopicPartition]) -> None:
        self._call(self._consumer.resume, *[_TP(tp.topic, tp.partition) for tp in partitions])

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        """Add ``partitions`` to the assignment (each from its offset, if given)."""
        handed = self._in_callback("assigned") or frozenset()
        current = self._call(self._consumer.assignment)
        added = [tp for p in partitions if (tp := _TP(p.topic, p.partition)) not in handed]
        if not added:
            self._start_at_given(partitions)
            return
        if set(added) & set(current):
            raise KafkaException(KafkaError(internal("_INVALID_ARG"), "partition already assigned"))
        self._call(self._consumer.assign, [*current, *added])
        self._start_at_given(partitions)

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        """Remove ``partitions`` from the assignment."""
        if self._in_callback("revoked") is not None or self._in_callback("lost") is not None:
            return  # (the group takes them back as the callback returns)
        current = self._call(self._consumer.assignment)
        removed = {_TP(tp.topic, tp.partition) for tp in partitions}
        self._call(self._consumer.assign, [tp for tp in current if tp not in removed])
        for tp in removed:
            self._positions.pop((tp.topic, tp.partition), None)

    def offsets_for_times(
        self, partitions: list[TopicPartition], timeout: float | None = None
    ) -> list[TopicPartition]:
        """For each partition (its ``offset`` a timestamp in ms), the offset of
        the first record at or after that time; -1 (``OFFSET_END``) when none is."""
        asked = {_TP(tp.topic, tp.partition): tp.offset for tp in partitions}
        found = self._call(self._consumer.offsets_for_times, asked, seconds_to_ms(timeout))
        out = []
        for tp in partitions:
            hit = found.get(_TP(tp.topic, tp.partition))
            out.append(
                TopicPartition(tp.topic, tp.partition, OFFSET_END if hit is None else hit[0])
            )
        return out

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

    def consumer_group_metadata(self) -> Any:
        """The group membership to pass to ``Producer.send_offsets_to_transaction``."""
        return self._call(self._consumer.group_metadata)

    def memberid(self) -> str | None:
        """The member id the group coordinator gave this consumer, None before it has one."""
        member_id: str = self._call(self._consumer.group_metadata).member_id
        return member_id or None

    def set_sasl_credentials(self, username: str, password: str) -> None:
        """confluent-kafka's call, its arguments checked as there; trafka's
        client keeps logging in with the credentials it was made with."""
        check_sasl_credentials(username, password)
        if self._closed:
            raise RuntimeError("Consumer closed")

    def __enter__(self) -> Consumer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        """Close, as ``close()``; an exception of the block goes on."""
        self.close()

    def close(self) -> None:
        """Commit (with auto-commit), leave the group and close."""
        if self._closed:
            return
        self._consumer.close()
        self._closed = True
        self._consumer = ClosedClient("Consumer closed")
        self._served.serve_at_close()


def _heartbeat_within_session(conf: dict[str, Any]) -> None:
    """librdkafka takes a ``heartbeat.interval.ms`` at or above
    ``session.timeout.ms`` (its member then misses its session); trafka's
    consumer refuses one (as Java's), so the drop-in heartbeats at a third of
    the session instead, the ratio of the two defaults' spirit."""
    try:
        session = int(conf.get("session.timeout.ms", 45_000))
        heartbeat = int(conf.get("heartbeat.interval.ms", 3_000))
    except (TypeError, ValueError):
        return  # the configuration refuses it, naming it
    if 0 < session <= heartbeat:
        conf["heartbeat.interval.ms"] = max(1, session // 3)
