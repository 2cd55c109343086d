"""The consumer's core: what a poll hands out, and what counts as consumed,
without I/O.

Every consumer driver calls this one object's public methods: the async
:class:`~trafka.sdk.consumer.Consumer` (its fetch task, completions and waits),
its group driver (:mod:`.group`, on revocations), and the blocking consumer's
own thread while the loop waits for I/O (:mod:`.blocking`, through the async
consumer). It owns the :class:`~trafka.sdk.fetcher.Fetcher` (positions,
buffered responses, fetch requests and their answers), the records taken from
it but not handed out yet (``getone`` takes a whole poll and hands it out one
by one), and the consumed positions commits are made of. The Spark reader
drives a :class:`~trafka.sdk.fetcher.Fetcher` of its own directly
(:mod:`trafka.spark._wire`): it reads columns, not records, and commits nothing.

Rules:

* No task, event, socket or clock: taking records never sends a fetch. When
  taking made a partition fetchable again, ``fetcher.fetch_wanted`` is set and
  the driver sends it.
* Positions advance when records are handed out. A record counts as
  *consumed* once the next poll starts (:meth:`poll_started`): the caller has
  processed it. Auto-commit commits consumed positions (at-least-once).
* Records taken from the fetcher and never handed out (their partition
  revoked, sought or reassigned) are dropped and counted, so that the
  statistics count only what the application received.
* The interceptors' ``on_consume`` (:mod:`.interceptors`) sees the records
  a poll takes from the fetcher, after they count as handed out, and those
  :meth:`ConsumerCore.hold` keeps for ``getone``.
* Paused partitions hand out nothing, from the fetcher or from what was taken.
* End-of-partition events (``enable.partition.eof``): a
  :class:`~trafka.sdk.consumer_types.PartitionEOF` comes after the records of
  its partition, in the same poll or a later one. It is no record: the
  interceptors never see it, it moves no consumed position, and it is not
  counted as consumed, held or dropped.
* With ``enable.auto.offset.store=false`` (librdkafka's), commits without
  offsets (auto-commit, ``commit()``, before a revocation, at close) commit only
  what the application stored with :meth:`ConsumerCore.store_offsets`, and only
  for partitions still assigned.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Generic

from ._util import SchemaLoads, get_deserializer
from .errors import SerializationError, UsageError
from .fetcher import (
    ConsumedPositions,
    ConsumerRecord,
    Fetcher,
    K,
    PartitionEOF,
    TopicPartition,
    V,
)
from .interceptors import ConsumerInterceptors
from .metadata import MetadataCache

log = logging.getLogger("trafka.sdk.consumer")

if TYPE_CHECKING:
    from .config.consumer import ConsumerConfig
    from .statistics import ConsumerStatistics, GroupStatistics

__all__ = ["ConsumerCore"]

_new: Any = tuple.__new__

Records = dict[TopicPartition, list[ConsumerRecord[K, V]]]


class ConsumerCore(Generic[K, V]):
    """The I/O-free part of a consumer (see the module doc).

    Args:
        config: the consumer's configuration.
        metadata: the metadata cache its driver keeps fresh.

    Attributes:
        fetcher: positions, buffered fetch responses, fetch requests.
        consumed: the positions handed out, and those processed.
        dropped: records taken from the fetcher that were never handed out.
        interceptors: the consumer's interceptors (their ``on_consume`` runs
            on what :meth:`poll` takes and :meth:`hold` keeps), or None.
    """

    def __init__(self, config: ConsumerConfig, metadata: MetadataCache) -> None:
        self.config = config
        self.fetcher = Fetcher.for_consumer(metadata, config)
        self._key_de = get_deserializer(config.key_deserializer)
        self._value_de = get_deserializer(config.value_deserializer)
        # Deserializers told the record's topic, partition, offset and headers
        # (trafka.sdk.schemas), and what to do when one fails.
        self._key_rec = getattr(config.key_deserializer, "deserialize_record", None)
        self._value_rec = getattr(config.value_deserializer, "deserialize_record", None)
        self._on_error = config.deserialization_error_handler
        # Records whose schema is not loaded wait until the driver has run the
        # loads off its loop.
        self.schema_loads = SchemaLoads(config.key_deserializer, config.value_deserializer)
        self._failed: BaseException | None = None  # raised by the next take
        self._buffer: deque[ConsumerRecord[K, V]] = deque()
        self._last: ConsumerRecord[K, V] | None = None  # from next_record, processed next poll
        self.consumed = ConsumedPositions()
        self.dropped = 0
        self.interceptors = ConsumerInterceptors.of(config)
        # The application's stored offsets; None while records handed out count.
        self.stored: dict[TopicPartition, int] | None = (
            None if config.enable_auto_offset_store else {}
        )
        #: A blocking consumer's (:mod:`.blocking`): drops what its thread holds of
        #: those partitions, not handed out, answering the first offset dropped per one.
        self.held_elsewhere: Callable[[set[TopicPartition]], dict[TopicPartition, int]] | None
        self.held_elsewhere = None

    # -- handing records out ----------------------------------------------------------

    def poll_started(self) -> None:
        """A poll begins: what the caller was handed before counts as processed."""
        last = self._last
        if last is not None:
            self.consumed.handed_out(TopicPartition(last.topic, last.partition), last.offset + 1)
            self._last = None
        self.consumed.poll_started()

    def poll(self, limit: int, wanted: set[TopicPartition] | None) -> Records[K, V]:
        """What a poll hands out at once (records taken before first, then
        fetched ones; none when nothing is at hand), at most ``limit``, of the
        ``wanted`` partitions (None: all), counted as handed out."""
        out: Records[K, V] = {}
        if self._buffer:
            self._take_buffer(out, limit, wanted)  # (held: intercepted already)
            taken = False
        elif self.fetcher.has_data():
            out = self.take(limit, wanted)
            taken = True
        else:
            return out
        consumed = self.consumed
        for tp, recs in out.items():
            last: ConsumerRecord[K, V] | None = recs[-1]
            if type(last) is PartitionEOF:  # held by getone after its records
                last = _last_record(recs)
            if last is not None:
                consumed.handed_out(tp, last.offset + 1)
        if taken and out and self.interceptors is not None:
            # After counting: what an interceptor drops still counts as consumed.
            out = self.interceptors.on_consume(out)
        if taken:
            self._add_eofs(out, wanted)
        return out

    def _add_eofs(self, out: Records[K, V], wanted: set[TopicPartition] | None) -> None:
        """The end-of-partition events due, after the records taken (of ``wanted``)."""
        for eof in self.fetcher.take_eofs(wanted):
            out.setdefault(TopicPartition(eof.topic, eof.partition), []).append(eof)

    def _take_buffer(
        self, out: Records[K, V], limit: int, wanted: set[TopicPartition] | None
    ) -> None:
        paused = self.fetcher.paused()
        keep: deque[ConsumerRecord[K, V]] = deque()
        n = 0
        buffer = self._buffer
        while buffer:
            r = buffer.popleft()
            tp = TopicPartition(r.topic, r.partition)
            if n < limit and (wanted is None or tp in wanted) and tp not in paused:
                out.setdefault(tp, []).append(r)
                n += 1
            else:
                keep.append(r)
        self._buffer = keep

    def take(self, limit: int, wanted: set[TopicPartition] | None) -> Records[K, V]:
        """Up to ``limit`` fetched records of the ``wanted`` partitions (None:
        all), deserialized; not counted as handed out (:meth:`poll` does that,
        :meth:`next_record` for what :meth:`hold` keeps)."""
        if self._failed is not None:
            error, self._failed = self._failed, None
            raise error
        fetcher = self.fetcher
        paused: list[TopicPartition] = []
        if wanted is not None:
            paused = [
                tp for tp in fetcher.assignment if tp not in wanted and tp not in fetcher.paused()
            ]
            fetcher.pause(paused)
        try:
            raw = fetcher.take(limit)
        finally:
            if paused:
                fetcher.resume(paused)
        kd, vd = self._key_de, self._value_de
        if kd is None and vd is None and self._key_rec is None and self._value_rec is None:
            return raw
        out: Records[K, V] = {}
        for tp, recs in raw.items():
            if self._key_rec is not None or self._value_rec is not None:
                good = self._deserialized(tp, recs)
            else:
                try:
                    # tuple.__new__ skips the NamedTuple constructor: this is the per-record hot path.
                    good = [
                        _new(
                            ConsumerRecord,
                            (
                                t,
                                p,
                                o,
                                ts,
                                k if kd is None else kd(k),
                                v if vd is None else vd(v),
                                h,
                                tt,
                                e,
                            ),
                        )
                        for t, p, o, ts, k, v, h, tt, e in recs
                    ]
                except Exception:
                    good = self._deserialized(tp, recs)
            if good:
                out[tp] = good
        if not out and self._failed is not None:
            error, self._failed = self._failed, None
            raise error
        return out

    def _deserialized(self, tp: TopicPartition, recs: list[Any]) -> list[Any]:
        """``recs`` deserialized one at a time; a record that fails goes to
        ``deserialization.error.handler`` (see the config): skipped, or the
        partition stops there (its position back at the record, the error
        raised by the next :meth:`take` or this one if it has nothing else)."""
        kd, vd, kr, vr = self._key_de, self._value_de, self._key_rec, self._value_rec
        loads = self.schema_loads
        good: list[Any] = []
        for i, (t, p, o, ts, k, v, h, tt, e) in enumerate(recs):
            if loads and loads.need(t, p, o, k, v, h):
                # Taken again once the driver has loaded the schemas off its loop.
                self.fetcher.seek(tp, o)
                self.dropped += len(recs) - i
                break
            field = "key"
            try:
                key = kr(k, t, p, o, h, True) if kr is not None else (k if kd is None else kd(k))
                field = "value"
                value = vr(v, t, p, o, h, False) if vr is not None else (v if vd is None else vd(v))
            except Exception as exc:
                error = _located(exc, field, t, p, o)
                handler = self._on_error
                decision = handler if isinstance(handler, str) else handler(error)
                if decision == "skip":
                    log.warning("skipped a record that does not deserialize: %s", error)
                    continue
                self.fetcher.seek(tp, o)
                self.dropped += len(recs) - i
                self._failed = error
                break
            good.append(_new(ConsumerRecord, (t, p, o, ts, key, value, h, tt, e)))
        return good

    def fill(self, limit: int) -> bool:
        """Take up to ``limit`` fetched records and :meth:`hold` them, then the
        end-of-partition events due (for ``getone``). Returns whether anything
        was taken."""
        records = self.take(limit, None)
        self.hold(records)
        eofs = self.fetcher.take_eofs()
        self._buffer.extend(eofs)
        return bool(records or eofs)

    def hold(self, records: Records[K, V]) -> None:
        """Keep taken records to hand out one at a time (:meth:`next_record`),
        as the interceptors' ``on_consume`` returns them."""
        if records and self.interceptors is not None:
            records = self.interceptors.on_consume(records)
        buffer = self._buffer
        for recs in records.values():
            buffer.extend(recs)

    def next_record(self) -> ConsumerRecord[K, V] | None:
        """The first held record of a partition not paused, handed out (it
        counts as processed at the next poll); None when there is none."""
        buffer = self._buffer
        if not buffer:
            return None
        paused = self.fetcher.paused() if self.fetcher.any_paused() else None
        if not paused:
            r = buffer.popleft()
        else:
            for i, r in enumerate(buffer):
                if TopicPartition(r.topic, r.partition) not in paused:
                    del buffer[i]
                    break
            else:
                return None
        if type(r) is not PartitionEOF:  # (an event moves no position)
            self._last = r
        return r

    def held_count(self, tp: TopicPartition | None = None) -> int:
        """Records taken but not handed out (of ``tp``; default all)."""
        if tp is None:
            return sum(1 for r in self._buffer if type(r) is not PartitionEOF)
        return sum(
            1
            for r in self._buffer
            if r.partition == tp.partition and r.topic == tp.topic and type(r) is not PartitionEOF
        )

    def held_per_partition(self) -> dict[TopicPartition, int]:
        held: dict[TopicPartition, int] = {}
        for r in self._buffer:
            if type(r) is not PartitionEOF:
                tp = TopicPartition(r.topic, r.partition)
                held[tp] = held.get(tp, 0) + 1
        return held

    # -- what counts as consumed ---------------------------------------------------------

    def consumed_offsets(self) -> dict[TopicPartition, int]:
        """Positions after the records the caller has processed (what a commit
        without offsets commits); as a poll start, the last record handed out
        counts as processed."""
        self.poll_started()
        if self.stored is not None:
            return self._stored_assigned()
        return self.consumed.all(self.fetcher.assignment)

    def auto_commit_offsets(self) -> dict[TopicPartition, int]:
        """Consumed positions as of the last poll (at-least-once)."""
        if self.stored is not None:
            return self._stored_assigned()
        return self.consumed.processed(self.fetcher.assignment)

    def commit_offsets(
        self, offsets: Mapping[TopicPartition, int] | None, message: Any
    ) -> dict[TopicPartition, int]:
        """What a commit of ``offsets`` or of ``message`` (a consumed record:
        the offset after it) commits; neither: :meth:`consumed_offsets`.

        Raises:
            UsageError: both.
        """
        if message is None:
            return dict(offsets) if offsets is not None else self.consumed_offsets()
        if offsets is not None:
            raise UsageError("commit takes offsets or a message, not both")
        return {TopicPartition(message.topic, message.partition): message.offset + 1}

    def statistics(
        self, *, group: GroupStatistics | None, brokers: Any, telemetry: Any
    ) -> ConsumerStatistics:
        """The consumer's statistics from the fetcher's and the core's counts,
        with what only its drivers know (the group's, the brokers' and the
        metrics push's statistics)."""
        from .statistics import ConsumerStatistics, FetchSessionStatistics, PartitionStatistics

        fetcher = self.fetcher
        buffered = self.held_per_partition()  # taken from the fetcher, not handed out yet
        partitions = {
            tp: PartitionStatistics(
                position=s.position,
                high_watermark=s.high_watermark,
                lag=fetcher.lag(tp),
                paused=s.paused,
                records_consumed=s.records_taken - buffered.get(tp, 0),
                bytes_fetched=s.bytes_fetched,
            )
            for tp, s in sorted(fetcher.partitions.items())
        }
        return ConsumerStatistics(
            records_consumed=fetcher.records_taken - self.held_count() - self.dropped,
            bytes_fetched=fetcher.bytes_fetched,
            partitions=partitions,
            group=group,
            brokers=brokers,
            telemetry=telemetry,
            fetch_sessions={
                node: FetchSessionStatistics(
                    session_id=fs.session_id,
                    epoch=fs.epoch,
                    partitions=len(fs.partitions),
                    full_fetches=fs.full_fetches,
                    incremental_fetches=fs.incremental_fetches,
                )
                for node, fs in sorted(fetcher.sessions.items())
            },
        )

    def store_offsets(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Store the offsets that commits without offsets commit (librdkafka's
        ``store_offsets``, with ``enable.auto.offset.store=false``).

        Raises:
            UsageError: the offset store is automatic, or a partition is not assigned.
        """
        if self.stored is None:
            raise UsageError("store_offsets() needs enable.auto.offset.store=false (as librdkafka)")
        assigned = self.fetcher.assignment
        missing = sorted(tp for tp in offsets if tp not in assigned)
        if missing:
            raise UsageError(f"store_offsets(): not assigned to this consumer: {missing}")
        self.stored.update(offsets)

    def _stored_assigned(self) -> dict[TopicPartition, int]:
        assert self.stored is not None
        assigned = self.fetcher.assignment
        return {tp: offset for tp, offset in self.stored.items() if tp in assigned}

    def partitions_going(self, tps: set[TopicPartition]) -> None:
        """Partitions about to be revoked (before the commit and the listener) or
        lost: a blocking consumer's held records of theirs (:attr:`held_elsewhere`)
        are not consumed, so neither that commit nor the application sees them."""
        if self.held_elsewhere is not None and (first := self.held_elsewhere(tps)):
            self.rewind(first)

    def rewind(self, first: Mapping[TopicPartition, int]) -> list[TopicPartition]:
        """Records from ``first[tp]`` on were handed out but not processed (the
        blocking consumer held them back): commits stop before them. Returns
        those of the partitions still assigned (the driver seeks them to fetch
        them again, if it wants)."""
        assigned = self.fetcher.assignment
        for tp, offset in first.items():
            self.consumed.rewind(tp, offset)
        return [tp for tp in first if tp in assigned]

    def drop_held(self, tps: set[TopicPartition]) -> None:
        """Forget the records of ``tps`` taken but not handed out (a seek, a
        reset, an assignment): counted as dropped."""
        if self._buffer:
            before = self.held_count()
            kept = deque(r for r in self._buffer if TopicPartition(r.topic, r.partition) not in tps)
            self._buffer = kept
            self.dropped += before - self.held_count()
        last = self._last
        if last is not None and TopicPartition(last.topic, last.partition) in tps:
            self._last = None

    def partitions_removed(self, tps: set[TopicPartition]) -> None:
        """Revoked or lost: no more fetching, handing out or committing them."""
        self.fetcher.remove(tps)
        self.drop_held(tps)
        self.consumed.forget(tps)
        if self.stored:
            for tp in tps:
                self.stored.pop(tp, None)

    def seek(self, tp: TopicPartition, offset: int, until: int | None = None) -> None:
        """Fetch ``tp`` from ``offset`` next (what was taken of it is dropped)."""
        self.fetcher.seek(tp, offset, until)
        self.drop_held({tp})

    def request_resets(self, tps: Iterable[TopicPartition], strategy: int) -> None:
        """Look ``tps``' positions up again by ``strategy`` (earliest, latest)."""
        chosen = set(tps)
        for tp in chosen:
            self.fetcher.request_reset(tp, strategy)
        self.drop_held(chosen)


def _last_record(records: list[ConsumerRecord[K, V]]) -> ConsumerRecord[K, V] | None:
    """The last record of a partition's list that is not an end-of-partition event."""
    for i in range(len(records) - 1, -1, -1):
        if type(records[i]) is not PartitionEOF:
            return records[i]
    return None


def _located(exc: Exception, field: str, topic: str, partition: int, offset: int) -> Exception:
    """A deserializer's error, naming the record when it does not already."""
    if getattr(exc, "offset", None) is not None:
        return exc
    error = SerializationError(
        f"{field} of topic {topic!r}, partition {partition}, offset {offset} "
        f"does not deserialize: {exc}"
    )
    error.__cause__ = exc
    return error
