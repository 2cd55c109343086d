"""Decoding the records a share consumer acquired (KIP-932), without I/O.

A ShareFetch answer carries a partition's records blob and the ranges of
offsets acquired for this member, each with its delivery count;
:func:`decode_acquired` turns them into :class:`ShareRecord` records and the
acknowledgements the records' absence means.

Rules:

* Records handed to the application are exactly the offsets inside the
  acquired ranges (a batch may cover more), each with its range's delivery
  count. A batch inside one range whose records carry its offsets one by one
  (the usual case) is decoded straight into ShareRecords; any other is
  filtered record by record, with the same result.
* An acquired offset without a record in the data (a control record, a record
  removed by compaction) is a GAP; acquired offsets past the end of the data
  (a batch cut off by the size limit) are released; a corrupt batch's
  acquired records are rejected, and its error returned.
"""

from __future__ import annotations

import bisect
import operator
from collections.abc import Iterable, Sequence
from typing import Any, NamedTuple

from trafka.codec import DecodeError, ErrorCode, KafkaError
from trafka.codec.legacy import decode_legacy_entry
from trafka.codec.records import RecordBatchHeader, decode_batch_as, iter_batches

from .consumer_types import TopicPartition
from .share_acks import GAP, AcknowledgeType

__all__ = ["OFFSET", "ShareRecord", "decode_acquired"]


class ShareRecord(NamedTuple):
    """A record delivered by a share group (key and value after deserialization).

    As :class:`~trafka.sdk.fetcher.ConsumerRecord`, plus ``delivery_count``:
    how many times the group has delivered it (1 the first time).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: Any
    value: Any
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_type: int = 0
    leader_epoch: int = -1
    delivery_count: int = 1


_new: Any = tuple.__new__
OFFSET = operator.itemgetter(2)  # a ShareRecord's (and a decoded tuple's) offset
_INT64_MAX = 2**63 - 1


def decode_acquired(
    tp: TopicPartition,
    blob: bytes,
    ranges: Sequence[tuple[int, int, int]],
    check_crcs: bool = True,
) -> tuple[list[ShareRecord], dict[int, int], KafkaError | None]:
    """The records of ``blob`` inside the acquired ``(first, last, delivery_count)`` ranges.

    Returns:
        ``(records, acknowledgements, error)``: the records in offset order;
        GAP for acquired offsets without a record up to the end of the data,
        RELEASE for acquired offsets past it, REJECT for those of a corrupt
        batch; the error of a corrupt batch (CORRUPT_MESSAGE), if any.
    """
    ranges = sorted(ranges)
    starts = [r[0] for r in ranges]
    prefix = (tp.topic, tp.partition)
    records: list[ShareRecord] = []
    acks: dict[int, int] = {}
    error: KafkaError | None = None
    end: int | None = None  # the offset after the last complete entry
    # Offsets with a record: entries whose every offset has one (the usual case,
    # checked without a set), and the offsets of the others one by one.
    full: list[tuple[int, int]] = []
    present: set[int] = set()

    def count_of(offset: int) -> int | None:
        i = bisect.bisect_right(starts, offset) - 1
        if i >= 0 and offset <= ranges[i][1]:
            return ranges[i][2]
        return None

    def keep(decoded: Iterable[tuple[Any, ...]]) -> None:
        for r in decoded:
            n = count_of(r[2])
            if n is not None:
                records.append(_new(ShareRecord, (*r[:9], n)))
                present.add(r[2])

    try:
        for header, view in iter_batches(blob):
            first, last = _entry_bounds(header)
            end = header.next_offset
            if not _overlaps(ranges, first, last):
                continue  # nothing acquired in this entry
            # One range holding the whole batch: its records come out of the
            # decoder as ShareRecords with that range's delivery count.
            count = None
            if isinstance(header, RecordBatchHeader) and not header.attributes & 0x20:
                count = _one_range_count(ranges, starts, first, last)
            decoded: Sequence[tuple[Any, ...]]
            try:
                if count is None:
                    decoded = _decode_entry(header, view, prefix, check_crcs)
                else:
                    assert isinstance(header, RecordBatchHeader)
                    decoded = whole = _decode_batch_for(header, view, prefix, count, check_crcs)
            except (DecodeError, KafkaError) as exc:
                for o in range(first, last + 1):
                    if count_of(o) is not None:
                        acks[o] = AcknowledgeType.REJECT
                error = error or KafkaError(
                    ErrorCode.CORRUPT_MESSAGE,
                    f"{tp.topic}-{tp.partition} at offset {first}: {exc} (its records were rejected)",
                )
                continue
            if count is not None and _offsets_are(whole, first, last):
                records.extend(whole)
                full.append((first, last))
            else:
                keep(decoded)
    except DecodeError as exc:
        # The entries cannot be told apart from here on: give the rest back.
        error = error or KafkaError(
            ErrorCode.CORRUPT_MESSAGE, f"{tp.topic}-{tp.partition}: {exc} (the rest was released)"
        )
    spans = _merged(full)
    for first, last, _ in ranges:
        o = first
        i = bisect.bisect_right(spans, (o, _INT64_MAX)) - 1
        while o <= last:
            if i >= 0 and o <= spans[i][1]:
                o = spans[i][1] + 1  # a stretch where every offset has a record
            elif o not in present and o not in acks:
                acks[o] = GAP if end is not None and o < end else AcknowledgeType.RELEASE
                o += 1
            else:
                o += 1
            if i + 1 < len(spans) and spans[i + 1][0] <= o:
                i += 1
    return records, acks, error


def _merged(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``(first, last)`` spans sorted, overlapping and adjacent ones joined."""
    out: list[tuple[int, int]] = []
    for first, last in sorted(spans):
        if out and first <= out[-1][1] + 1:
            if last > out[-1][1]:
                out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return out


def _one_range_count(
    ranges: Sequence[tuple[int, int, int]], starts: Sequence[int], first: int, last: int
) -> int | None:
    """The delivery count of the one range that holds ``first..last`` whole
    and no other range touches (None otherwise)."""
    i = bisect.bisect_right(starts, first) - 1
    if i < 0 or ranges[i][1] < last or (i + 1 < len(ranges) and starts[i + 1] <= last):
        return None
    return ranges[i][2]


def _offsets_are(records: Sequence[tuple[Any, ...]], first: int, last: int) -> bool:
    """Whether ``records`` carry exactly the offsets ``first..last``, in order."""
    return len(records) == last - first + 1 and [*map(OFFSET, records)] == [*range(first, last + 1)]


def _decode_batch_for(
    header: RecordBatchHeader,
    view: memoryview,
    prefix: tuple[str, int],
    delivery_count: int,
    check_crcs: bool,
) -> list[ShareRecord]:
    """A magic 2 batch's records as ShareRecords of one delivery count."""
    attrs = header.attributes
    _, records = decode_batch_as(
        view,
        ShareRecord,
        prefix=prefix,
        suffix=((attrs >> 3) & 1, header.partition_leader_epoch, delivery_count),
        verify=check_crcs,
    )
    return records


def _overlaps(ranges: Sequence[tuple[int, int, int]], first: int, last: int) -> bool:
    return any(a <= last and b >= first for a, b, _ in ranges)


def _entry_bounds(header: Any) -> tuple[int, int]:
    if isinstance(header, RecordBatchHeader):
        return header.base_offset, header.last_offset
    return header.last_offset, header.last_offset  # legacy: wrapper offsets are its last


def _decode_entry(
    header: Any, view: memoryview, prefix: tuple[str, int], check_crcs: bool
) -> Sequence[tuple[Any, ...]]:
    """The records of one entry as ConsumerRecord-shaped tuples (control batches: none)."""
    if isinstance(header, RecordBatchHeader):
        if header.attributes & 0x20:
            return ()  # a control batch: its offsets are gaps
        attrs = header.attributes
        _, records = decode_batch_as(
            view,
            tuple,
            prefix=prefix,
            suffix=((attrs >> 3) & 1, header.partition_leader_epoch),
            verify=check_crcs,
        )
        return records
    legacy = decode_legacy_entry(view, verify=check_crcs)
    ts_type = (header.attributes >> 3) & 1 if header.magic else -1
    return [(*prefix, *r, ts_type, -1) for r in legacy]
