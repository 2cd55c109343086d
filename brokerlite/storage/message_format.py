"""Message-format conversion for the clients older than Kafka 0.11 (issue #37).

Produce v0-2 carries legacy message sets (magic 0 or 1) and Fetch v0-3 must
answer with them: v0-1 with magic 0, v2-3 with magic 1. The log stores magic 2
batches only, so brokerlite converts at the edges, as Kafka 3.x does when its
log format is v2 (``LogValidator`` on append, ``RecordsUtil.downConvert`` on
fetch).

Rules:

* **Up-conversion** (:func:`up_convert`, on append): every record of the set,
  in order, goes into one magic 2 batch, compressed with the codec of the
  set's compressed wrappers (the topic's ``compression.type`` is stored, not
  applied, as for magic 2 producers). Magic 0 records carry no timestamp: they
  are stored with -1, as Kafka stores them; magic 1 timestamps are kept. The
  batch is create-time and has no producer id, so the log then treats it as
  any other non-idempotent batch: it assigns the offsets and, for a
  ``LogAppendTime`` topic, the timestamp. Every message's CRC is checked first
  (CORRUPT_MESSAGE), and a set that mixes in magic 2 is INVALID_RECORD.
* **Down-conversion** (:func:`down_convert`, on fetch): each magic 2 batch
  becomes messages of the asked magic with the same absolute offsets. Control
  batches (transaction markers) are left out, and so are headers, which the
  old formats cannot carry; magic 0 also loses timestamps. A compressed batch
  becomes one compressed wrapper with the same codec (whole: old clients skip
  the records before their offset themselves); zstd, which magic 0/1 cannot
  carry, and batches whose offsets are not contiguous become uncompressed
  messages. Of uncompressed messages only those from the fetch offset on are
  kept, as Kafka does for old consumers. Log-append-time batches keep
  their type in magic 1.
* Both are pure functions over bytes: no log, no clock (``now`` is not needed:
  the log stamps log-append time after conversion).
"""

from __future__ import annotations

from trafka.codec.compression import Compression
from trafka.codec.errors import DecodeError, EncodeError
from trafka.codec.legacy import decode_legacy_entry, encode_message_set
from trafka.codec.records import (
    BytesLike,
    RecordBatchHeader,
    TimestampType,
    decode_batch,
    encode_batch,
    iter_batches,
)

from ..errors import CorruptRecordError, InvalidRecordError

__all__ = ["fetch_magic", "is_legacy", "up_convert", "down_convert"]

_LEGACY_CODECS = (Compression.GZIP, Compression.SNAPPY, Compression.LZ4)


def fetch_magic(version: int) -> int:
    """The message format a Fetch response of ``version`` carries (2 from v4)."""
    if version >= 4:
        return 2
    return 1 if version >= 2 else 0


def is_legacy(records: BytesLike) -> bool:
    """Whether ``records`` starts with a magic 0 or 1 message."""
    return len(records) > 16 and records[16] in (0, 1)


def up_convert(records: BytesLike) -> bytes:
    """A legacy message set as one magic 2 batch (see the module rules).

    Args:
        records: a Produce v0-2 partition's records: whole magic 0/1 messages.

    Returns:
        One create-time batch, base offset 0, no producer id.

    Raises:
        CorruptRecordError: a truncated set, a bad CRC or an undecodable message.
        InvalidRecordError: a magic 2 batch in the set, or no messages.
    """
    items: list[tuple[int, bytes | None, bytes | None, tuple[()]]] = []
    codec = Compression.NONE
    size = 0
    try:
        for header, view in iter_batches(records):
            if isinstance(header, RecordBatchHeader):
                raise InvalidRecordError("a legacy message set must not hold magic 2 batches")
            size += header.size
            if header.compression != Compression.NONE:
                codec = header.compression
            items += [(r.timestamp, r.key, r.value, ()) for r in decode_legacy_entry(view)]
    except DecodeError as exc:
        raise CorruptRecordError(f"legacy message set: {exc}") from None
    if size != len(records):
        raise CorruptRecordError(
            f"legacy message set: {len(records) - size} trailing bytes are not a whole message"
        )
    if not items:
        raise InvalidRecordError("produce request without messages")
    try:
        return encode_batch(items, compression=codec)
    except EncodeError as exc:
        raise InvalidRecordError(f"legacy message set: {exc}") from None


def down_convert(records: BytesLike, magic: int, fetch_offset: int) -> bytes:
    """Magic 2 batches as a message set of ``magic`` 0 or 1 (see the module rules).

    Args:
        records: whole batches as read from the log (legacy entries pass as they are).
        magic: 0 or 1.
        fetch_offset: the offset the consumer asked for.

    Returns:
        The message set; empty when nothing is left (control batches only).

    Raises:
        DecodeError: a batch the log holds is malformed (not expected: the log
            validated it on append).
    """
    if magic not in (0, 1):
        raise ValueError(f"magic {magic!r} is not 0 or 1")
    out: list[bytes] = []
    for header, view in iter_batches(records):
        if not isinstance(header, RecordBatchHeader):
            out.append(bytes(view))
            continue
        if header.is_control:
            continue
        batch = decode_batch(view, verify=False)
        rows = batch.records
        ts_type = 1 if header.timestamp_type == TimestampType.LOG_APPEND_TIME else 0
        codec = header.compression
        contiguous = all(r.offset == rows[0].offset + i for i, r in enumerate(rows))
        if codec in _LEGACY_CODECS and contiguous and rows:
            out.append(
                encode_message_set(
                    [(r.timestamp, r.key, r.value, ()) for r in rows],
                    magic=magic,
                    compression=codec,
                    base_offset=rows[0].offset,
                    timestamp_type=ts_type,
                )
            )
            continue
        for r in rows:
            if r.offset < fetch_offset:
                continue
            out.append(
                encode_message_set(
                    [(r.timestamp, r.key, r.value, ())],
                    magic=magic,
                    base_offset=r.offset,
                    timestamp_type=ts_type,
                )
            )
    return b"".join(out)
