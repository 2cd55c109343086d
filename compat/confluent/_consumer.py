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
"""

from __future__ import annotations

from typing import Any

from trafka.sdk import PartitionEOF
from trafka.sdk import TopicPartition as _TP
from trafka.sdk.blocking import Consumer as _Consumer

from ._callbacks import Served, seconds_to_ms, translate_config
from ._errors import KafkaError, KafkaException, error_of, internal
from ._types import (
    OFFSET_BEGINNING,
    OFFSET_END,
    OFFSET_INVALID,
    TIMESTAMP_CREATE_TIME,
    TIMESTAMP_LOG_APPEND_TIME,
    Message,
    TopicPartition,
)

__all__ = ["Consumer"]


def _tps(offsets: Any) -> list[TopicPartition]:
    return [TopicPartition(tp.topic, tp.partition, off) for tp, off in sorted(offsets.items())]


def _message(record: Any) -> Message:
    if isinstance(record, PartitionEOF):
        eof = KafkaError(internal("_PARTITION_EOF"), "Broker: No more messages")
        return Message(record.topic, record.partition, record.offset, error=eof)
    kind = TIMESTAMP_LOG_APPEND_TIME if record.timestamp_type == 1 else TIMESTAMP_CREATE_TIME
    headers = list(record.headers) or None
    epoch = record.leader_epoch if record.leader_epoch >= 0 else None
    return Message(
        record.topic,
        record.partition,
        record.offset,
        record.key,
        record.value,
        headers,
        None,
        (kind, record.timestamp),
        None,
        epoch,
    )


class _Listener:
    """on_assign / on_revoke / on_lost as trafka's rebalance listener."""

    def __init__(self, consumer: Consumer, assign: Any, revoke: Any, lost: Any) -> None:
        self._consumer = consumer
        self._calls = {"assigned": assign, "revoked": revoke, "lost": lost or revoke}

    def _call(self, which: str, partitions: Any) -> None:
        fn = self._calls[which]
        if fn is not None:
            fn(
                self._consumer,
                [TopicPartition(tp.topic, tp.partition) for tp in sorted(partitions)],
            )

    def on_partitions_assigned(self, partitions: Any) -> None:
        self._call("assigned", partitions)

    def on_partitions_revoked(self, partitions: Any) -> None:
        self._call("revoked", partitions)

    def on_partitions_lost(self, partitions: Any) -> None:
        self._call("lost", partitions)


class Consumer:
    """confluent-kafka's ``Consumer(config)``."""

    def __init__(self, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        conf = {**(config or {}), **kwargs}
        self._served = Served()
        on_commit = conf.pop("on_commit", None)
        if on_commit is not None:
            conf["on_commit"] = self._served.wrap(
                on_commit,
                lambda err, offsets: (None if err is None else error_of(err), _tps(offsets)),
            )
        self._conf = conf
        self._closed = False
        # librdkafka's position: after the last record handed out (or where a
        # seek put it), not known (-1001) before either.
        self._positions: dict[tuple[str, int], int] = {}
        try:
            self._consumer: Any = _Consumer(config=translate_config(conf, self._served))
        except Exception as exc:
            raise KafkaException(error_of(exc)) from None

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
        listener = _Listener(self, on_assign, on_revoke, on_lost)
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
        self._served.serve(0)
        record = self._call(self._consumer.getone, timeout_ms=seconds_to_ms(timeout))
        self._served.serve(0)
        return None if record is None else self._handed(record)

    def _handed(self, record: Any) -> Message:
        if not isinstance(record, PartitionEOF):
            self._positions[(record.topic, record.partition)] = record.offset + 1
        return _message(record)

    def consume(self, num_messages: int = 1, timeout: float | None = None) -> list[Message]:
        """Up to ``num_messages`` records and events, waiting up to ``timeout`` s."""
        if num_messages < 1 or num_messages > 1_000_000:
            raise ValueError("num_messages must be between 0 and 1000000 (1M)")
        self._served.serve(0)
        got = self._call(
            self._consumer.getmany, timeout_ms=seconds_to_ms(timeout), max_records=num_messages
        )
        self._served.serve(0)
        messages: list[Message] = []
        for records in got.values():
            messages.extend(map(_message, records))
            for record in reversed(records):  # the position: after the last record
                if not isinstance(record, PartitionEOF):
                    self._positions[(record.topic, record.partition)] = record.offset + 1
                    break
        return messages

    def _offsets(self, message: Any, offsets: Any) -> dict[_TP, int] | None:
        if message is not None:
            return {_TP(message.topic(), message.partition()): message.offset() + 1}
        if offsets is not None:
            return {_TP(tp.topic, tp.partition): tp.offset for tp in offsets}
        return None

    def commit(
        self, message: Any = None, offsets: Any = None, asynchronous: bool = True
    ) -> list[TopicPartition] | None:
        """Commit the offset after ``message``, ``offsets``, or what was consumed."""
        if message is not None and message.error() is not None:
            raise KafkaException(KafkaError(internal("_INVALID_ARG")))
        chosen = self._offsets(message, offsets)
        if chosen is None:
            chosen = self._call(self._consumer.consumed_offsets)
            if not chosen:
                raise KafkaException(KafkaError(internal("_NO_OFFSET"), "Local: No offset stored"))
        if asynchronous:
            self._call(self._consumer.commit_async, chosen)
            return None
        self._call(self._consumer.commit, chosen)
        return _tps(chosen)

    def store_offsets(self, message: Any = None, offsets: Any = None) -> None:
        chosen = self._offsets(message, offsets)
        self._call(self._consumer.store_offsets, chosen)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self._call(self._consumer.assign, [_TP(tp.topic, tp.partition) for tp in partitions])
        for tp in partitions:
            if tp.offset != OFFSET_INVALID and tp.offset > -1000:
                self.seek(tp)

    def unassign(self) -> None:
        self._call(self._consumer.assign, [])

    def assignment(self) -> list[TopicPartition]:
        return [
            TopicPartition(tp.topic, tp.partition) for tp in sorted(self._consumer.assignment())
        ]

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
        for tp in partitions:
            offset = self._call(self._consumer.committed, _TP(tp.topic, tp.partition))
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

    def close(self) -> None:
        """Commit (with auto-commit), leave the group and close."""
        if self._closed:
            return
        self._consumer.close()
        self._closed = True
        self._served.serve(0)
