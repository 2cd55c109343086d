"""Decoding a fetched records blob a little at a time, as its records are taken.

This is the fetcher's read side (:mod:`.fetcher` decides what to fetch and
applies the answers): :func:`take_records` hands the buffered records of the
partitions out, advancing their positions, :func:`decode_more` decodes
what it hands out, and :func:`take_ends` the end-of-partition events after them.

A Fetch answer's records stay the bytes the broker sent (:class:`FetchedData`)
until the application takes them; :func:`decode_more` then decodes the next
few entries, up to the records wanted. The records are made, used and freed
while the memory is still in the CPU's cache, and a blob nobody takes (a
partition sought or revoked meanwhile) is never decoded.

Rules:

* Records below the offset the data was fetched for are skipped (a batch may
  start before it). Control batches (transaction markers) are never returned;
  they only move :attr:`FetchedData.next_position` past them.
* ``read_committed`` (:func:`skips_batch`): the answer lists the aborted
  transactions it overlaps as (first offset, producer id). A transaction is
  *open* from its first offset on, for the batches of its producer, until that
  producer's next control batch (its abort marker). A transactional batch of a
  producer with an open aborted transaction is dropped; everything else is kept.
* A corrupt entry ends the blob when records were decoded before it (they are
  handed out; the error comes back once the position reaches it), and raises
  when it is the first thing to decode: ``KafkaError(CORRUPT_MESSAGE)`` for a
  v2 batch, the codec's ``DecodeError`` for a legacy message or an entry whose
  bounds cannot be read.
* The per-record hot path is the codec's: a run of plain batches (not
  transactional when aborted transactions are to be dropped) becomes records in
  one call (C when built). Python code here runs once per run or per entry that
  is not plain, never per record.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections import deque
from collections.abc import Mapping, Sequence
from typing import Any

from trafka.codec import DecodeError, ErrorCode, KafkaError
from trafka.codec.columns import (
    ColumnBuffers,
    RecordColumns,
    decode_batch_columns,
    decode_batch_run_columns,
)
from trafka.codec.legacy import LegacyMessageHeader, decode_legacy_entry
from trafka.codec.records import (
    RecordBatchHeader,
    decode_batch_as,
    decode_batch_run_as,
    iter_batches,
)

from .consumer_types import ConsumerRecord, PartitionEOF, TopicPartition

__all__ = [
    "FetchedData",
    "NO_TIMESTAMP_TYPE",
    "TakeTally",
    "decode_more",
    "skips_batch",
    "take_ends",
    "take_records",
]

_new: Any = tuple.__new__
_TURNS = itertools.count()  # the order in which buffered data became current

#: ConsumerRecord.timestamp_type of legacy magic 0 messages, which have no timestamp.
NO_TIMESTAMP_TYPE = -1


@dataclasses.dataclass(slots=True)
class FetchedData:
    """A fetched blob, decoded a little at a time as its records are taken."""

    position: int  # the offset the data was fetched for
    blob: bytes
    aborted: list[tuple[int, int]] | None  # (first offset, producer id), read_committed only
    end: int | None = None  # the offset after the blob's last complete entry, if any
    # Decoded (tuples, or columns for take_columns); those from index on not handed out.
    records: Sequence[ConsumerRecord] | RecordColumns = ()
    index: int = 0
    next_position: int = -1  # the offset after the last entry decoded
    cursor: int = 0  # where the next entry to decode starts in the blob
    done: bool = False  # nothing more to decode (the end, or a corrupt batch after records)
    aborts_seen: int = 0  # how many of `aborted` have started by the decoded entries
    aborted_open: set[int] = dataclasses.field(default_factory=set)  # their producer ids

    def __post_init__(self) -> None:
        if self.next_position < 0:
            self.next_position = self.position

    @property
    def drained(self) -> bool:
        return self.done and self.index >= len(self.records)


@dataclasses.dataclass(slots=True)
class PartitionState:
    """One assigned partition's fetch position, log ends and buffered answers
    (the :class:`FetchedData` being taken and up to ``depth`` after it)."""

    position: int | None = None
    reset: int | None = None  # EARLIEST / LATEST / a timestamp strategy waiting to run
    paused: bool = False
    in_flight: bool = False
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1
    completed: FetchedData | None = None  # being consumed
    # The data after it, in order (only with completed), at most ``depth`` answers.
    ahead: deque[FetchedData] = dataclasses.field(default_factory=deque)
    depth: int = 1
    turn: int = 0  # when ``completed`` became current: partitions are taken in this order
    fetch_end: int | None = None  # no fetch asks for this offset or later (seek's until)
    records_taken: int = 0  # records handed out by take() (statistics)
    bytes_fetched: int = 0  # record bytes of fetch answers (statistics)
    eof_offset: int | None = None  # the end last handed out as a PartitionEOF

    @property
    def prefetched(self) -> FetchedData | None:
        """The first answer after the one being taken, if any."""
        return self.ahead[0] if self.ahead else None

    def drop_buffered(self) -> None:
        self.completed = None
        self.ahead.clear()

    def make_current(self, data: FetchedData | None) -> None:
        """``data`` is the data to take now: it takes its turn behind the data of
        the other partitions already waiting (see :func:`take_records`)."""
        self.completed = data
        self.turn = next(_TURNS)

    def start_at(self, position: int | None) -> None:
        """Start over at ``position`` (None: unknown until a lookup): what is
        buffered is dropped, and the end is reported again (librdkafka starts
        a partition's fetching over, its ``eof_offset`` too, on a seek, an
        assignment or an offset reset)."""
        self.position = position
        self.reset = None
        self.eof_offset = None
        self.drop_buffered()

    def learn_ends(self, answer: Any) -> None:
        """The log's ends as a fetch answer without error gives them."""
        self.high_watermark = answer.high_watermark
        if answer.last_stable_offset >= 0:
            self.last_stable_offset = answer.last_stable_offset
        if answer.log_start_offset >= 0:
            self.log_start_offset = answer.log_start_offset

    def at_end(self, read_committed: bool) -> bool:
        """Whether an end-of-partition event is due: nothing buffered, and the
        position at the end of the last answer, not yet reported."""
        if self.completed is not None or self.position is None:
            return False
        end = self.high_watermark
        if read_committed and self.last_stable_offset >= 0:
            end = self.last_stable_offset
        return end >= 0 and self.position == end and self.eof_offset != end

    def has_more(self, read_committed: bool) -> bool:
        """Whether the log held more than what is buffered, as of the last answer."""
        last = self.ahead[-1] if self.ahead else self.completed
        if last is None or last.end is None:
            return True
        end = self.last_stable_offset if read_committed else self.high_watermark
        return end < 0 or last.end < end

    def next_fetch_offset(self) -> int | None:
        """The offset the next fetch asks for; None while no fetch is wanted
        (or when it would be at or past :attr:`fetch_end`)."""
        c = self.completed
        if c is None:
            offset = self.position
        else:
            last = self.ahead[-1] if self.ahead else c
            if len(self.ahead) >= self.depth or last.end is None or last.end <= last.position:
                return None
            offset = last.end
        if offset is not None and self.fetch_end is not None and offset >= self.fetch_end:
            return None
        return offset


class TakeTally:
    """What a :func:`take_records` did, kept also when it raises."""

    __slots__ = ("drained", "records")

    def __init__(self) -> None:
        self.drained = False  # a buffered blob was used up: a buffer slot freed
        self.records = 0  # records handed out


def take_records(
    partitions: Mapping[TopicPartition, PartitionState],
    max_records: int,
    columns: bool | None,
    verify: bool,
    tally: TakeTally,
) -> dict[TopicPartition, Any]:
    """Up to ``max_records`` buffered records of the unpaused ``partitions``,
    advancing their positions (record lists, or columns when ``columns`` is set).

    Partitions take turns as Java's consumer hands out its completed fetches:
    in the order their data became current (:meth:`PartitionState.make_current`),
    each one's data up to its end before the next one's, within one call too
    (``FetchCollector.collectFetch``). A blob used up gives way to the
    prefetched one when that starts at the new position (otherwise both are
    dropped: stale), which takes its turn behind the data already waiting, as
    Java fetches a partition again only once its data is used up
    (``AbstractFetch.fetchablePartitions``). A decoding error with records
    already taken hands them out (the error comes back at the next call); with
    none, it is raised.
    """
    out: dict[TopicPartition, Any] = {}
    left = max_records
    ready = [
        (s.turn, tp) for tp, s in partitions.items() if s.completed is not None and not s.paused
    ]
    ready.sort(key=_first)
    turns = deque(tp for _, tp in ready)
    while turns and left > 0:
        tp = turns.popleft()
        s = partitions[tp]
        c = s.completed
        assert c is not None
        chunk, failed = _take_from(tp, c, left, columns, verify, bool(out))
        if chunk is not None:
            s.position = (
                chunk.last_offset + 1 if isinstance(chunk, RecordColumns) else chunk[-1].offset + 1
            )
            n = len(chunk)
            left -= n
            s.records_taken += n
            tally.records += n
            # A partition seen again in one call (its prefetched data) joins its chunks.
            out[tp] = chunk if tp not in out else out[tp] + chunk
        if failed or not c.drained:
            continue
        # Drained: the prefetched data when it continues from here, behind the others.
        tally.drained = True
        if c.next_position > (s.position or 0):
            s.position = c.next_position
        nxt = s.ahead.popleft() if s.ahead else None
        if nxt is None or nxt.position != s.position:
            s.drop_buffered()
        else:
            s.make_current(nxt)
            turns.append(tp)
    return out


def _first(item: tuple[int, TopicPartition]) -> int:
    return item[0]


def _take_from(
    tp: TopicPartition, c: FetchedData, left: int, columns: bool | None, verify: bool, some: bool
) -> tuple[Any, bool]:
    """Up to ``left`` records of one blob, decoding as needed (a new list: the
    application may keep and change it), and whether a decoding error stopped
    it, with records taken in this call already (``some``, or from this blob);
    without any, the error is raised."""
    taken: Any = None
    while True:
        recs = c.records
        if c.index >= len(recs) and not c.done:
            try:
                recs = decode_more(tp, c, left, columns, verify)
            except (KafkaError, DecodeError):
                if some or taken is not None:
                    return taken, True  # the error comes back next time
                raise
        start = c.index
        end = min(start + left, len(recs))
        if end > start:
            part = recs[start:end]
            chunk = part if isinstance(part, RecordColumns) or type(part) is list else list(part)
            taken = chunk if taken is None else taken + chunk
            left -= end - start
            c.index = end
        if c.drained or left <= 0:
            return taken, False


def take_ends(
    partitions: Mapping[TopicPartition, PartitionState],
    read_committed: bool,
    wanted: set[TopicPartition] | None,
) -> list[PartitionEOF]:
    """An end-of-partition event for each of the unpaused ``partitions`` (of
    ``wanted``; None: all) at its end (:meth:`PartitionState.at_end
    <trafka.sdk.fetch_decode.PartitionState.at_end>`), each end handed out once."""
    out = []
    for tp, s in partitions.items():
        if not s.paused and (wanted is None or tp in wanted) and s.at_end(read_committed):
            assert s.position is not None
            s.eof_offset = s.position
            out.append(PartitionEOF(tp.topic, tp.partition, s.position))
    return out


def skips_batch(c: FetchedData, header: RecordBatchHeader) -> bool:
    """Whether the v2 batch ``header`` hands out no record: a control batch,
    or (read_committed) a batch of an aborted transaction. Keeps ``c``'s
    record of the aborted transactions open at this batch."""
    aborted = c.aborted
    if aborted is not None:
        while c.aborts_seen < len(aborted) and aborted[c.aborts_seen][0] <= header.last_offset:
            c.aborted_open.add(aborted[c.aborts_seen][1])
            c.aborts_seen += 1
    attrs = header.attributes
    if attrs & 0x20:  # control batch: a transaction marker closes its producer's
        c.aborted_open.discard(header.producer_id)
        return True
    return bool(attrs & 0x10) and header.producer_id in c.aborted_open


def decode_more(
    tp: TopicPartition, c: FetchedData, want: int, columns: bool | None, verify: bool
) -> Sequence[ConsumerRecord] | RecordColumns:
    """Decode the next entries of ``c`` until ``want`` records (or the end) are in.

    The records (at or after the fetch position) replace ``c.records``; ``c``
    keeps where decoding stands. ``columns`` None decodes record tuples, else
    columns (True: with the header columns); ``verify`` checks batch CRCs.

    Raises:
        KafkaError: CORRUPT_MESSAGE, a corrupt v2 batch first to decode.
        DecodeError: entries that cannot be told apart, or a corrupt legacy
            message, first to decode.
    """
    prefix = (tp.topic, tp.partition)
    # Joined at the end: a run of plain batches stays the one tuple the fast path made.
    parts: list[Any] = []
    n = 0
    position = c.position
    blob = c.blob
    # With aborted transactions to drop, transactional batches go the ordinary way.
    stop_at_transactional = c.aborted is not None
    pos = c.cursor
    while n < want:
        # The per-record hot path: the codec builds the ConsumerRecords of a
        # run of plain batches itself (in C when built), skipping records
        # below the position; the entry after the run goes the ordinary way.
        run: Any
        if columns is None:
            run, pos, run_next = decode_batch_run_as(
                blob,
                pos,
                ConsumerRecord,
                prefix=prefix,
                min_offset=position,
                verify=verify,
                stop_at_transactional=stop_at_transactional,
                max_records=want - n,
            )
        else:
            run, pos, run_next = decode_batch_run_columns(
                blob,
                pos,
                min_offset=position,
                headers=columns,
                verify=verify,
                stop_at_transactional=stop_at_transactional,
                max_records=want - n,
            )
        c.cursor = pos
        if run_next is not None:
            parts.append(run)
            n += len(run)
            c.next_position = run_next
            if n >= want:
                break
        try:
            entry = next(iter_batches(blob, pos), None)
            if entry is None:
                c.done = True
                break
            header, view = entry
            if header.next_offset <= position:
                c.cursor = pos = pos + len(view)
                continue
            records = _decode_entry(tp, c, header, view, columns, verify)
        except (KafkaError, DecodeError):
            if n:
                c.done = True  # hand out what precedes; the error comes back
                break
            raise
        if records:
            parts.append(records)
            n += len(records)
        c.next_position = header.next_offset
        c.cursor = pos = pos + len(view)
    out: Sequence[ConsumerRecord] | RecordColumns
    if columns is not None:
        out = RecordColumns.join(parts)
    else:
        out = parts[0] if len(parts) == 1 else list(itertools.chain.from_iterable(parts))
    c.records = out
    c.index = 0
    return out


def _decode_entry(
    tp: TopicPartition,
    c: FetchedData,
    header: RecordBatchHeader | LegacyMessageHeader,
    view: Any,
    columns: bool | None,
    verify: bool,
) -> Sequence[ConsumerRecord] | RecordColumns:
    """The records of one entry the fast path left (a transactional, control
    or legacy one, or a batch past the run's records limit), at or after the
    fetch position."""
    position = c.position
    prefix = (tp.topic, tp.partition)
    records: Sequence[ConsumerRecord] | RecordColumns
    if isinstance(header, RecordBatchHeader):
        if skips_batch(c, header):
            return ()
        try:
            if columns is None:
                _, records = decode_batch_as(
                    view,
                    ConsumerRecord,
                    prefix=prefix,
                    suffix=((header.attributes >> 3) & 1, header.partition_leader_epoch),
                    min_offset=position,
                    verify=verify,
                )
            else:
                _, records = decode_batch_columns(
                    view, min_offset=position, headers=columns, verify=verify
                )
        except DecodeError as exc:
            raise KafkaError(
                ErrorCode.CORRUPT_MESSAGE, f"{tp.topic}-{tp.partition}: {exc}"
            ) from exc
        return records
    legacy = decode_legacy_entry(view, verify=verify)
    ts_type = (header.attributes >> 3) & 1 if header.magic else NO_TIMESTAMP_TYPE
    if legacy and legacy[0].offset < position:
        legacy = [r for r in legacy if r.offset >= position]
    if columns is not None:
        return RecordColumns.whole(ColumnBuffers.pack(legacy, ts_type, columns))
    # tuple.__new__ skips the NamedTuple constructor, and concatenating to
    # the decoded record tuple is the cheapest way to widen it.
    suffix = (ts_type, -1)
    return [_new(ConsumerRecord, prefix + r + suffix) for r in legacy]
