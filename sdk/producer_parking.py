"""Records that wait for their topic's metadata, for the blocking producer
(:mod:`.blocking_producer`, whose loop runs everything here).

Rules:

* The loop takes the records the sending threads queued, in order. One whose
  topic has no known partitions yet, or whose topic has records parked
  already, is *parked*: kept under its topic in the order sent, while the
  records of other topics go on to the async producer. A topic that cannot be
  resolved holds no other topic up, and no record passes one of its topic
  sent before it.
* One task per parked topic has the cluster track the topic and waits for its
  metadata; once its partitions are known it hands the topic's records to the
  async producer, in order, under the hand-over's lock (so that they do not
  interleave with the queue's), and the topic is parked no more.
* A parked record waits at most its *bound* from the moment it was sent:
  ``max.block.ms`` (Java's wait for metadata in ``send()``, the SDK's), then it
  fails with :class:`~.errors.ProducerBlockedError` (with the topic's error
  instead when an answer named one, as the async ``send``); or
  ``delivery.timeout.ms`` (librdkafka's ``message.timeout.ms``, which queues a
  record of a topic it does not know yet and reports it timed out), then it
  fails with :class:`~.errors.DeliveryTimeoutError` (the last metadata
  refresh's failure, or the topic's error, as its ``last_error``). The record
  itself is no older when it joins a batch: from there the batch's
  ``delivery.timeout.ms`` applies, as to any batch.
* What no wait can cure fails a topic's records at once, as the async
  producer's wait does: TOPIC_AUTHORIZATION_FAILED or INVALID_TOPIC_EXCEPTION
  in an answer given since the topic was parked, and credentials the brokers
  refuse. Under ``delivery.timeout.ms``, a topic that the answers say does not
  exist (UNKNOWN_TOPIC_OR_PARTITION) fails with that error once
  ``topic.metadata.propagation.max.ms`` has passed since its first record was
  sent, as librdkafka's; under either bound, at the next answer once
  :meth:`ParkedRecords.give_up_unknown` was called (the producer closing as the
  interpreter exits).
* Records still parked when the loop stops are failed by the producer with
  :meth:`ParkedRecords.fail_all`, from its thread, once the loop no longer runs.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from trafka.codec import ErrorCode, KafkaError

from .errors import DeliveryTimeoutError, ProducerBlockedError

if TYPE_CHECKING:
    from .config import ProducerConfig
    from .producer_core import PreparedRecord
    from .transport import Cluster

__all__ = ["METADATA_WAITS", "ParkedRecords"]

#: The bounds a parked record may wait under (the blocking producer's ``metadata_wait``).
METADATA_WAITS = ("max.block.ms", "delivery.timeout.ms")

# Topic errors in an answer that no wait cures (the cluster's partitions_for has the same).
_FINAL = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_TOPIC_EXCEPTION})

#: Hands one record to the async producer (and tells its future), on the loop.
Give = Callable[["PreparedRecord", Any], Awaitable[None]]


class _Topic:
    """One topic's parked records: ``(record, future, deadline)`` in the order sent."""

    __slots__ = ("records", "since")

    def __init__(self, since: float) -> None:
        self.records: collections.deque[tuple[PreparedRecord, Any, float]] = collections.deque()
        self.since = since  # when its first record was sent


class ParkedRecords:
    """The parked records of one blocking producer (see the module's rules).

    Args:
        cluster: the async producer's cluster (its metadata and refresher).
        config: the producer's settings (the bounds).
        bound: one of :data:`METADATA_WAITS`.
        lock: the blocking producer's hand-over lock.
        give: hands one record over (:data:`Give`), under ``lock``.
        emptied: called on the loop whenever the last parked record has gone.
    """

    def __init__(
        self,
        cluster: Cluster,
        config: ProducerConfig,
        bound: str,
        lock: anyio.Lock,
        give: Give,
        emptied: Callable[[], None],
    ) -> None:
        self._cluster = cluster
        self._md = cluster.metadata
        self._librdkafka = bound == "delivery.timeout.ms"
        ms = config.delivery_timeout_ms if self._librdkafka else config.max_block_ms
        self._bound = bound
        #: How long a record may stay parked, in seconds.
        self.wait_s = ms / 1000
        self._propagation = config.topic_metadata_propagation_max_ms / 1000
        self._lock = lock
        self._give = give
        self._emptied = emptied
        self._topics: dict[str, _Topic] = {}
        self._changed: anyio.Event  # (made on the loop, by start())
        self._tg: anyio.abc.TaskGroup | None = None
        self._giving_up = False

    def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """On the loop: where each parked topic's task runs (cancelled on close)."""
        self._tg = task_group
        self._changed = anyio.Event()

    @property
    def holding(self) -> bool:
        """Whether any record is parked."""
        return bool(self._topics)

    def takes(self, topic: str) -> bool:
        """Whether a record of ``topic`` taken now must be parked."""
        return topic in self._topics or self._md.partition_count(topic) is None

    def park(self, record: PreparedRecord, future: Any, sent_at: float) -> None:
        """Park ``record`` (sent at ``sent_at``, the loop's clock) behind its topic's."""
        topic = record[0]
        parked = self._topics.get(topic)
        if parked is None:
            parked = self._topics[topic] = _Topic(sent_at)
            assert self._tg is not None, "start() first"
            self._tg.start_soon(self._wait_for, topic, parked, name=f"trafka parked {topic}")
        parked.records.append((record, future, sent_at + self.wait_s))

    async def settled(self) -> None:
        """Return once no record is parked (each handed over or failed)."""
        while self._topics:
            await self._changed.wait()

    async def wait_change(self) -> None:
        """Return once some parked record has been handed over or failed."""
        await self._changed.wait()

    def give_up_unknown(self) -> None:
        """From the next answer on, fail the records of topics it says do not
        exist, whatever the bound (the producer closes as the interpreter exits)."""
        self._giving_up = True
        if self._topics:
            self._md.request_update()
            self._cluster.nudge()

    def fail_all(self, error: BaseException, *, on_loop: bool = True) -> None:
        """Fail every parked record with ``error`` (their tasks then end); from
        another thread (``on_loop`` False) only once the loop has stopped."""
        topics, self._topics = self._topics, {}
        for parked in topics.values():
            self._fail(parked, error)
        if on_loop:
            self._signal()
            self._emptied()

    # -- the task of a parked topic --------------------------------------------------------

    async def _wait_for(self, topic: str, parked: _Topic) -> None:
        md, cluster = self._md, self._cluster
        if not md.add_topics([topic]) and topic in md.topic_errors:
            md.request_update()  # an error known before: ask again now
        cluster.nudge()
        answered = False  # an answer came since: a topic error in md is current
        try:
            while True:
                now = anyio.current_time()
                self._expire(topic, parked, now)
                if not parked.records or self._topics.get(topic) is not parked:
                    return
                if md.partition_count(topic) is not None:
                    await self._release(topic, parked)
                    return
                error = self._incurable(topic, parked, answered, now)
                if error is not None:
                    self._fail(parked, error)
                    return
                until = parked.records[0][2]
                if self._librdkafka and topic in md.topic_errors:
                    until = min(until, parked.since + self._propagation)
                answered = await cluster.wait_metadata_change(max(until - now, 0.0)) or answered
        finally:
            if self._topics.get(topic) is parked and not parked.records:
                del self._topics[topic]
            self._signal()
            if not self._topics:
                self._emptied()

    async def _release(self, topic: str, parked: _Topic) -> None:
        """The topic's partitions are known: hand its records over, in order."""
        async with self._lock:
            records = parked.records
            while records:
                record, future, _ = records.popleft()
                if not future.cancelled():
                    await self._give(record, future)
            if self._topics.get(topic) is parked:
                del self._topics[topic]  # under the lock: the next record goes straight

    def _expire(self, topic: str, parked: _Topic, now: float) -> None:
        records = parked.records
        if not records or records[0][2] > now:
            return
        error = self._expired(topic)
        while records and records[0][2] <= now:
            _, future, _ = records.popleft()
            if not future.cancelled():
                future.set_exception(error)
        self._signal()

    def _expired(self, topic: str) -> BaseException:
        """What a record whose bound passed fails with."""
        code = self._md.topic_errors.get(topic)
        why = self._cluster.refresh_error
        if self._librdkafka:
            last = why if code is None else KafkaError(code, f"topic {topic!r}: {code.name}")
            return DeliveryTimeoutError(
                f"a record for {topic} expired: delivery.timeout.ms passed while the "
                "topic's partitions were unknown",
                last,
            )
        failed = "" if why is None else f" (the last metadata refresh failed: {why})"
        if code is not None:
            return KafkaError(
                code, f"topic {topic!r} not present in metadata after {self.wait_s:g} s{failed}"
            )
        return ProducerBlockedError(f"no metadata for topic {topic!r} within max.block.ms{failed}")

    def _incurable(
        self, topic: str, parked: _Topic, answered: bool, now: float
    ) -> BaseException | None:
        """An error waiting cannot cure, that the topic's records fail with now."""
        refused = self._cluster.auth_error
        if refused is not None:
            return refused.again()
        code = self._md.topic_errors.get(topic)
        if not answered or code is None:
            return None
        if code in _FINAL:
            return KafkaError(code, f"topic {topic!r}: {code.name} (from the broker's metadata)")
        if code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            if self._giving_up:
                return KafkaError(code, f"topic {topic!r} is not in the cluster's metadata")
            if self._librdkafka and now >= parked.since + self._propagation:
                return KafkaError(
                    code,
                    f"topic {topic!r} is not in the cluster's metadata after "
                    "topic.metadata.propagation.max.ms",
                )
        return None

    def _fail(self, parked: _Topic, error: BaseException) -> None:
        records = parked.records
        while records:
            _, future, _ = records.popleft()
            if not future.cancelled():
                future.set_exception(error)

    def _signal(self) -> None:
        event, self._changed = self._changed, anyio.Event()
        event.set()
