"""Reading a partition's log for share groups (:mod:`.fetcher`): where a new
share-partition starts, the log's batches as acquisition sees them, and the
batches holding offsets acquired again. Sans-IO apart from reading the log.
"""

from __future__ import annotations

from typing import Any

from trafka.brokerlite.groups.group_configs import duration_ms
from trafka.codec.records import RecordBatchHeader, iter_batches

from .partition import BatchSpan

__all__ = ["batch_spans", "initial_offset", "last_of", "read_into"]

_READ_MAX = 1 << 20  # the most log bytes read for new records per partition and fetch


def initial_offset(reset: str, plog: Any, now_ms: int) -> int:
    """A new share-partition's start offset by ``share.auto.offset.reset`` (module rules)."""
    if reset == "earliest":
        return int(plog.log_start_offset)
    if reset.startswith("by_duration:"):
        ms = duration_ms(reset.split(":", 1)[1])
        found = None if ms is None else plog.offset_for_timestamp(now_ms - ms)
        return int(plog.log_end_offset) if found is None else int(found[0])
    return int(plog.log_end_offset)


def batch_spans(
    plog: Any,
    start: int,
    upper: int,
    max_bytes: int,
    first: bool,
    aborted: list[tuple[int, int]],
    views: dict[int, memoryview],
) -> list[BatchSpan]:
    """The log's batches from ``start`` (below ``upper``) as acquisition sees them;
    ``aborted``: the aborted transactions there (producer id, first offset), for
    read_committed. Each deliverable batch's bytes go to ``views``, by base offset."""
    # A fetch's MaxBytes is often 2**31-1; MaxRecords ends it long before that.
    result = plog.read(start, min(max_bytes, _READ_MAX), upper_bound=upper, min_one_batch=first)
    if result.size == 0:
        return []
    open_aborts: set[int] = set()
    spans = []
    previous_end = start
    for header, view in iter_batches(result.tobytes()):
        base = _base_of(header)
        if header.last_offset < start:
            previous_end = header.last_offset + 1
            continue
        first_offset = base if header.magic == 2 else previous_end
        previous_end = header.last_offset + 1
        deliverable = True
        if isinstance(header, RecordBatchHeader):
            pid = header.producer_id
            while aborted and aborted[0][1] <= base:
                open_aborts.add(aborted.pop(0)[0])
            if header.is_control:
                deliverable = False
                open_aborts.discard(pid)
            elif header.is_transactional and pid in open_aborts:
                deliverable = False
        spans.append(BatchSpan(first_offset, header.last_offset, deliverable))
        if deliverable:
            views[base] = view
    return spans


def read_into(views: dict[int, memoryview], plog: Any, first: int, last: int, upper: int) -> None:
    """Put the log's batches holding ``first..last`` (below ``upper``) in ``views``,
    by base offset."""
    offset = first
    while offset <= last and offset < upper:
        result = plog.read(offset, 1 << 20, upper_bound=upper)
        if result.size == 0:
            return
        progressed = False
        for header, view in iter_batches(result.tobytes()):
            if header.last_offset < offset:
                continue
            views[_base_of(header)] = view
            offset = header.last_offset + 1
            progressed = True
            if offset > last:
                return
        if not progressed:
            return


def _base_of(header: Any) -> int:
    return int(header.base_offset) if header.magic == 2 else int(header.offset)


def last_of(view: memoryview) -> int:
    for header, _ in iter_batches(view):
        return int(header.last_offset)
    return -1
