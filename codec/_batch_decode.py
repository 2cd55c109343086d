"""Decoding magic 2 record batches into records (the consumer's hot path).

Job: :func:`decode_batch` (to :class:`Record`), :func:`decode_batch_as` and
:func:`decode_batch_run_as` (straight into a consumer's own tuples), and
:func:`decode_records` over a blob of any magic.

Rules: the C accelerator (read as ``_accel.speedups`` at each call) is tried
first and only ever refuses; the Python loop (:func:`_decode_records_v2`) then
runs on the same bytes and raises the located error (``records[3].key``). Both
give equal records. The Python loop keeps its 1- and 2-byte varints inline:
it is the fallback on every record when the accelerator is not built, so no
per-record helper call is added to it.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Iterator
from typing import Any

from . import _accel
from ._batch_format import (
    _ATTRIBUTES_AT,
    _CODEC_MASK,
    _CONTROL_BIT,
    _MIN_RECORD,
    _NAME,
    _T,
    _TIMESTAMP_TYPE_BIT,
    _ZZ1,
    _ZZ2,
    BATCH_HEADER_SIZE,
    BytesLike,
    Header,
    Record,
    _new,
    _VarintError,
    _zigzag_tail,
    _zz2_table,
)
from ._batch_header import (
    RecordBatchHeader,
    iter_batches,
    read_batch_header,
)
from .compression import DEFAULT_MAX_DECOMPRESSED_SIZE, decompress
from .crc import crc32c, crc32c_function
from .errors import DecodeError
from .legacy import decode_legacy_entry

# -- records --------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class RecordBatch:
    """A decoded magic 2 batch: its header and its records, decompressed."""

    header: RecordBatchHeader
    records: list[Record]


def decode_batch(
    batch: BytesLike,
    *,
    verify: bool = True,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> RecordBatch:
    """Decode one magic 2 batch, decompressing its records.

    Args:
        batch: the batch's bytes (bytes after its declared length are ignored).
        verify: check the CRC first.
        max_size: the largest decompressed payload accepted.

    Returns:
        The batch. Under log-append time every record carries ``max_timestamp``.

    Raises:
        DecodeError: anything malformed, located (``records[3].key``).
    """
    header, payload = _checked_payload(batch, verify)
    return RecordBatch(header, _records_of(header, payload, max_size))


def decode_batch_as(
    batch: BytesLike,
    record_type: type[_T],
    *,
    prefix: tuple[Any, ...] = (),
    suffix: tuple[Any, ...] = (),
    min_offset: int | None = None,
    verify: bool = True,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> tuple[RecordBatchHeader, list[_T]]:
    """Decode one magic 2 batch straight into the caller's record tuples.

    For consumers that hand out their own record type: each record becomes
    ``record_type(*prefix, offset, timestamp, key, value, headers, *suffix)``,
    built as ``tuple.__new__`` would (the class is not called), without a
    :class:`Record` in between.

    Args:
        batch: the batch's bytes, as for :func:`decode_batch`.
        record_type: ``tuple`` or a tuple subclass that adds no per-instance
            storage, such as a ``NamedTuple``. Records whose fields are all
            atomic (ints, strs, bytes, None, untracked tuples) are left
            untracked by the garbage collector, as CPython does for plain
            tuples: so the class must not hold its own records.
        prefix, suffix: fields placed before and after each record's five.
        min_offset: leave out records with a lower offset (None: keep all).
        verify, max_size: as for :func:`decode_batch`.

    Returns:
        ``(header, records)``.

    Raises:
        DecodeError: anything malformed, located as by :func:`decode_batch`.
        TypeError: ``record_type`` is not such a class.
    """
    if not (isinstance(record_type, type) and issubclass(record_type, tuple)):
        raise TypeError(f"{record_type!r} is not a tuple subclass")
    header, payload = _checked_payload(batch, verify)
    data, count, log_append = _records_section(header, payload, max_size)
    sp = _accel.speedups
    if sp is not None:
        fast = sp.decode_records(
            data,
            count,
            header.base_offset,
            header.base_timestamp,
            log_append,
            record_type,
            prefix,
            suffix,
            min_offset,
        )
        if fast is not None:
            return header, fast
    records = _decode_records_v2(
        bytes(data), count, header.base_offset, header.base_timestamp, log_append
    )
    new = _new
    if min_offset is None:
        return header, [new(record_type, prefix + r + suffix) for r in records]
    return header, [new(record_type, prefix + r + suffix) for r in records if r[0] >= min_offset]


def decode_batch_run_as(
    buf: BytesLike,
    pos: int,
    record_type: type[_T],
    *,
    prefix: tuple[Any, ...] = (),
    min_offset: int | None = None,
    verify: bool = True,
    stop_at_transactional: bool = False,
    max_records: int | None = None,
) -> tuple[tuple[_T, ...], int, int | None]:
    """Decode the run of *plain* batches of a blob starting at ``pos``, if it is fast to.

    The consumer's fast path over a Fetch response: a plain batch is magic 2,
    uncompressed and not a control batch (nor transactional, with
    ``stop_at_transactional``). Each of its records becomes, as by
    :func:`decode_batch_as`, ``record_type(*prefix, offset, timestamp, key,
    value, headers, timestamp_type, partition_leader_epoch)``: the batch's
    timestamp type and leader epoch follow the record's fields. Batches ending
    at or below ``min_offset`` are skipped unread (as a consumer skips data
    below its position); records below it are left out.

    The run stops at the first entry that is not plain, at a trailing partial
    entry, at the end, at anything malformed or unusual, and after the batch
    that brings it to ``max_records`` records (so that a consumer decodes
    what it hands out next while the memory is still warm). The caller then
    handles the entry at the returned position the ordinary way
    (:func:`iter_batches` from there, :func:`decode_batch_as`), which also
    raises the located error for malformed input. Without the C accelerator
    (or for input it does not take, such as a blob that is not ``bytes``) the
    run is empty: the ordinary way then does all the work, with equal results.

    Args:
        buf: the records blob.
        pos: where an entry starts.
        record_type, prefix: as for :func:`decode_batch_as`.
        min_offset: leave out records with a lower offset (None: keep all).
        verify: check each batch's CRC.
        stop_at_transactional: end the run at transactional batches too.
        max_records: end the run once it holds this many records (None: no limit).

    Returns:
        ``(records, pos, next_offset)``: the run's records (a tuple: it costs
        the garbage collector nothing to keep), the position after the run,
        and the ``next_offset`` of its last batch that was decoded rather than
        skipped (None when there is none).

    Raises:
        TypeError: ``record_type`` is not a tuple subclass.
    """
    if not (isinstance(record_type, type) and issubclass(record_type, tuple)):
        raise TypeError(f"{record_type!r} is not a tuple subclass")
    sp = _accel.speedups
    if sp is None or type(buf) is not bytes:
        return (), pos, None
    # The crc32c package's C function itself: no Python code runs inside the loop.
    crc = crc32c_function if verify else None
    limit = sys.maxsize if max_records is None else max_records
    run: tuple[tuple[_T, ...], int, int | None] = sp.decode_batch_run(
        buf, pos, record_type, prefix, min_offset, crc, stop_at_transactional, limit
    )
    return run


def _checked_payload(batch: BytesLike, verify: bool) -> tuple[RecordBatchHeader, memoryview]:
    """The header and the (maybe compressed) records payload of a whole batch."""
    header = read_batch_header(batch)
    view = memoryview(batch)
    size = header.size
    if len(view) < size:
        raise DecodeError(
            f"truncated: the batch needs {size} bytes, {len(view)} given", message_name=_NAME
        )
    if verify:
        computed = crc32c(view[_ATTRIBUTES_AT:size])
        if computed != header.crc:
            raise DecodeError(
                f"CRC mismatch: stored {header.crc:#010x}, computed {computed:#010x}",
                message_name=_NAME,
                field="crc",
            )
    return header, view[BATCH_HEADER_SIZE:size]


def _records_section(
    header: RecordBatchHeader, payload: memoryview, max_size: int
) -> tuple[bytes | memoryview, int, int | None]:
    """The decompressed records, their checked count, and the log-append timestamp."""
    codec = header.attributes & _CODEC_MASK
    data: bytes | memoryview
    if codec:
        try:
            data = decompress(codec, payload, max_size=max_size)
        except DecodeError as exc:
            raise type(exc)(exc.detail, message_name=_NAME, field="records") from None
    else:
        if payload.ndim != 1 or payload.itemsize != 1:
            payload = payload.cast("B")
        data = payload
    count = header.records_count
    if count < 0 or count * _MIN_RECORD > len(data):
        raise DecodeError(
            f"records_count {count} does not fit the {len(data)} bytes of records",
            message_name=_NAME,
            field="records_count",
        )
    log_append = header.max_timestamp if header.attributes & _TIMESTAMP_TYPE_BIT else None
    return data, count, log_append


def _records_of(header: RecordBatchHeader, payload: memoryview, max_size: int) -> list[Record]:
    data, count, log_append = _records_section(header, payload, max_size)
    sp = _accel.speedups
    if sp is not None:
        # The C loop reads the buffer in place (no copy of an uncompressed
        # payload); None means it refused, and the Python loop explains why.
        fast: list[Record] | None = sp.decode_records(
            data, count, header.base_offset, header.base_timestamp, log_append, Record, (), (), None
        )
        if fast is not None:
            return fast
    if type(data) is not bytes:
        data = bytes(data)
    return _decode_records_v2(data, count, header.base_offset, header.base_timestamp, log_append)


def _decode_records_v2(
    data: bytes, count: int, base_offset: int, base_ts: int, log_append: int | None
) -> list[Record]:
    # The hot loop: one pass over ``data`` with the 1- and 2-byte varint cases
    # inlined (each varint: one byte, else two, else the rare longer tail). ``f``
    # names the field being read so that an IndexError (data ran out) can be
    # reported where it happened. Only errors leave through helper calls.
    out: list[Record] = []
    append, new, rec = out.append, _new, Record
    zz1, zz2, tail = _ZZ1, _ZZ2 or _zz2_table(), _zigzag_tail
    end, pos, i, f = len(data), 0, 0, "length"
    try:
        for i in range(count):
            f = "length"
            if (b := data[pos]) < 0x80:
                n = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                n = zz2[(b & 0x7F) | (c << 7)]
                pos += 2
            else:
                n, pos = tail(data, pos, 5)
            rec_end = pos + n
            if n < 6 or rec_end > end:
                raise _located(f"length {n} does not fit the {end - pos} bytes left", i, f)
            f = "timestamp_delta"
            pos += 1  # the attributes byte has no defined bits
            if (b := data[pos]) < 0x80:
                tsd = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                tsd = zz2[(b & 0x7F) | (c << 7)]
                pos += 2
            else:
                tsd, pos = tail(data, pos, 10)
            f = "offset_delta"
            if (b := data[pos]) < 0x80:
                od = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                od = zz2[(b & 0x7F) | (c << 7)]
                pos += 2
            else:
                od, pos = tail(data, pos, 5)
            f = "key"
            if (b := data[pos]) < 0x80:
                n = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                n = zz2[(b & 0x7F) | (c << 7)]
                pos += 2
            else:
                n, pos = tail(data, pos, 5)
            if n >= 0:
                if (stop := pos + n) > rec_end:
                    raise _located(f"length {n} overruns the record", i, f)
                key: bytes | None = data[pos:stop]
                pos = stop
            elif n == -1:
                key = None
            else:
                raise _located(f"invalid length {n}", i, f)
            f = "value"
            if (b := data[pos]) < 0x80:
                n = zz1[b]
                pos += 1
            elif (c := data[pos + 1]) < 0x80:
                n = zz2[(b & 0x7F) | (c << 7)]
                pos += 2
            else:
                n, pos = tail(data, pos, 5)
            if n >= 0:
                if (stop := pos + n) > rec_end:
                    raise _located(f"length {n} overruns the record", i, f)
                value: bytes | None = data[pos:stop]
                pos = stop
            elif n == -1:
                value = None
            else:
                raise _located(f"invalid length {n}", i, f)
            f = "headers"
            if data[pos] == 0:
                headers: tuple[Header, ...] = ()
                pos += 1
            else:
                headers, pos = _read_headers(data, pos, rec_end, i)
            if pos != rec_end:
                raise _misfit(pos, rec_end, i)
            ts = base_ts + tsd if log_append is None else log_append
            append(new(rec, (base_offset + od, ts, key, value, headers)))
    except IndexError:
        raise _located("truncated", i, f) from None
    except _VarintError as exc:
        raise _located(str(exc), i, f) from None
    if pos != end:
        raise _leftover(end - pos, count)
    return out


def _leftover(left: int, count: int) -> DecodeError:
    return DecodeError(
        f"{left} bytes left after the last of {count} records", message_name=_NAME, field="records"
    )


def _misfit(pos: int, rec_end: int, index: int) -> DecodeError:
    """A record whose length disagrees with the fields it holds."""
    if pos < rec_end:
        return _located(
            f"record length says {rec_end - pos} more bytes than its fields use", index, "length"
        )
    return _located("fields overrun the record length", index, "length")


def _located(detail: str, index: int, field: str) -> DecodeError:
    return DecodeError(detail, message_name=_NAME, field=f"records[{index}].{field}")


def _read_varint32(data: bytes, pos: int) -> tuple[int, int]:
    b = data[pos]
    if b < 0x80:
        return (b >> 1) ^ -(b & 1), pos + 1
    return _zigzag_tail(data, pos, 5)


def _read_headers(
    data: bytes, pos: int, rec_end: int, index: int
) -> tuple[tuple[Header, ...], int]:
    # Off the hottest path (most records have no headers) but still common
    # enough to inline the 1-byte varints and build error locations lazily.
    zz1 = _ZZ1
    b = data[pos]
    if b < 0x80:
        count = zz1[b]
        pos += 1
    else:
        count, pos = _read_varint32(data, pos)
    if count < 0 or count * 2 > rec_end - pos:
        raise _located(f"header count {count} does not fit the record", index, "headers")
    out: list[Header] = []
    append = out.append
    for h in range(count):
        b = data[pos]
        if b < 0x80:
            n = zz1[b]
            pos += 1
        else:
            n, pos = _read_varint32(data, pos)
        stop = pos + n
        if n < 0 or stop > rec_end:
            raise _located(f"invalid length {n}", index, f"headers[{h}].key")
        try:
            name = data[pos:stop].decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _located(
                f"invalid UTF-8 at byte {exc.start}", index, f"headers[{h}].key"
            ) from None
        pos = stop
        b = data[pos]
        if b < 0x80:
            n = zz1[b]
            pos += 1
        else:
            n, pos = _read_varint32(data, pos)
        if n >= 0:
            stop = pos + n
            if stop > rec_end:
                raise _located(f"length {n} overruns the record", index, f"headers[{h}].value")
            append((name, data[pos:stop]))
            pos = stop
        elif n == -1:
            append((name, None))
        else:
            raise _located(f"invalid length {n}", index, f"headers[{h}].value")
    return tuple(out), pos


def decode_records(
    buf: BytesLike,
    *,
    verify: bool = True,
    include_control: bool = False,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> Iterator[Record]:
    """Every record of a blob of any magic (0, 1, 2), in order.

    A trailing partial entry is skipped (see :func:`iter_batches`).

    Args:
        buf: the records blob.
        verify: check each entry's CRC.
        include_control: also yield the records of control batches (transaction
            markers), which consumers normally skip.
        max_size: the largest decompressed payload accepted per entry.

    Yields:
        :class:`Record` objects, offsets absolute.

    Raises:
        DecodeError: anything malformed.
    """
    for header, view in iter_batches(buf):
        if header.magic == 2:
            if not include_control and header.attributes & _CONTROL_BIT:
                continue
            yield from decode_batch(view, verify=verify, max_size=max_size).records
        else:
            yield from decode_legacy_entry(view, verify=verify, max_size=max_size)


def decode_message_set(
    buf: BytesLike,
    *,
    verify: bool = True,
    max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
) -> list[Record]:
    """Every record of a legacy message set (a trailing partial entry is skipped).

    Raises:
        DecodeError: anything malformed, or a magic 2 batch in the set.
    """
    out: list[Record] = []
    for header, view in iter_batches(buf):
        if header.magic == 2:
            raise DecodeError(
                "magic 2 batch in a legacy message set", message_name="Message", field="magic"
            )
        out += decode_legacy_entry(view, verify=verify, max_size=max_size)
    return out
