"""Kafka record batches (magic 2), and the walk over a records blob of any magic.

A *records blob* is the ``records`` field of a Produce request or Fetch response:
entries laid end to end, each starting with ``[int64 offset][int32 length]``
and holding either a record batch (magic 2) or a legacy message (magic 0 and
1, see :mod:`trafka.codec.legacy`). The magic byte sits at byte 16 in every
format, so the walk reads the length, then the magic, then hands the entry to
the right decoder.

Batch layout (big-endian; 61-byte header)::

    0  base_offset int64           21 attributes int16        43 producer_id int64
    8  batch_length int32          23 last_offset_delta int32 51 producer_epoch int16
    12 partition_leader_epoch int32 27 base_timestamp int64   53 base_sequence int32
    16 magic int8 (= 2)            35 max_timestamp int64     57 records_count int32
    17 crc uint32                                             61 records...

Rules and invariants:

* ``batch_length`` counts the bytes after itself, so a batch is
  ``12 + batch_length`` bytes and ``batch_length >= 49``.
* The CRC-32C covers ``attributes`` to the end of the batch. It does not cover
  ``base_offset`` or ``partition_leader_epoch``: the broker rewrites those two
  in place (:func:`set_base_offset`, :func:`set_partition_leader_epoch`) and
  stores the batch otherwise byte for byte as the producer sent it.
* attributes: bits 0-2 compression codec, bit 3 timestamp type (1 =
  log-append time, when every record's timestamp is ``max_timestamp``), bit 4
  transactional, bit 5 control. With compression, everything after
  ``records_count`` is one compressed payload holding the records.
* A record is ``[varint length][int8 attributes][varlong timestamp_delta]
  [varint offset_delta][varint key length][key][varint value length][value]
  [varint header count]([varint key length][utf-8 key][varint value length]
  [value])*``. Varints are zig-zag; a length of -1 is null (not allowed for
  header keys); int32 varints have at most 5 bytes, varlongs 10.
* In a blob, a trailing entry cut short (a Fetch response may end mid-batch) is
  skipped silently; a length below the format's minimum is corrupt. No buffer is
  ever sized from a length before the bytes behind it have been received.

Every malformed input raises :class:`~trafka.codec.errors.DecodeError` naming
the structure and the field (``records[3].key``), never a lower-level error.

The decoder and encoder are hand-written for speed and checked byte for byte
against the declarative construct definitions (:data:`RecordBatchV2`,
:data:`RecordV2`) by the property tests.

The per-record loops also exist in C (``codec/_speedups.c``, an optional
extension; ``TRAFKA_NO_SPEEDUPS=1`` turns it off). The C code only *refuses*:
given anything malformed or unusual it returns None, and the Python loop
runs and raises the located error. Both paths give equal records and identical
bytes (tests/codec/test_speedups.py). A consumer's walk over a whole blob goes
the same way (:func:`decode_batch_run_as`): C decodes the run of plain batches
it accepts and stops before anything else, which the ordinary walk then handles
(tests/codec/test_records_consumer_paths.py).

This module is the public face; the code lives in private modules by concern,
whose names it re-exports: ``_batch_format`` (layout constants, varints),
``_batch_header`` (header, blob walk, CRCs, in-place rewrites), ``_batch_decode``
and ``_batch_encode`` (the hot paths), ``_control_records`` (transaction
markers), ``_batch_schema`` (the construct oracle) and ``_accel`` (the switch to
the C accelerator, read at each call; tests patch ``_accel.speedups``).
"""

from __future__ import annotations

from ._accel import accelerated as accelerated
from ._batch_decode import (
    RecordBatch,
    decode_batch,
    decode_batch_as,
    decode_batch_run_as,
    decode_message_set,
    decode_records,
)
from ._batch_encode import (
    RecordBatchBuilder,
    encode_batch,
    rebuild_batch,
)
from ._batch_encode import (
    assemble_batch as assemble_batch,
)
from ._batch_format import (
    BATCH_HEADER_SIZE,
    MIN_BATCH_LENGTH,
    Header,
    Record,
    TimestampType,
)
from ._batch_format import (
    LOG_OVERHEAD as LOG_OVERHEAD,
)
from ._batch_format import (
    BytesLike as BytesLike,
)
from ._batch_format import (
    RecordInput as RecordInput,
)
from ._batch_header import (
    RecordBatchHeader,
    assign_offsets,
    batches_of,
    blob_next_offset,
    check_batch,
    iter_batches,
    read_batch_header,
    set_base_offset,
    set_base_sequence,
    set_partition_leader_epoch,
    verify_crc,
)
from ._batch_schema import (
    Counted as Counted,
)
from ._batch_schema import (
    LengthPrefixed as LengthPrefixed,
)
from ._batch_schema import (
    Magic as Magic,
)
from ._batch_schema import (
    RecordBatchV2,
    RecordHeaderV2,
    RecordV2,
)
from ._batch_schema import (
    Ref as Ref,
)
from ._batch_schema import (
    Sized as Sized,
)
from ._batch_schema import (
    VarIntBytes as VarIntBytes,
)
from ._batch_schema import (
    VarIntString as VarIntString,
)
from ._control_records import (
    ControlRecord,
    ControlRecordType,
    decode_control_record,
    encode_control_batch,
)

# Names this module offered before the split (#47), kept for importers.
from .compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE as DEFAULT_MAX_DECOMPRESSED_SIZE,
)
from .compression import (
    Compression as Compression,
)
from .compression import (
    compress as compress,
)
from .compression import (
    decompress as decompress,
)
from .crc import (
    crc32 as crc32,
)
from .crc import (
    crc32c as crc32c,
)
from .crc import (
    crc32c_function as crc32c_function,
)
from .errors import (
    CodecError as CodecError,
)
from .errors import (
    DecodeError as DecodeError,
)
from .errors import (
    EncodeError as EncodeError,
)
from .primitives import (
    Int8 as Int8,
)
from .primitives import (
    Int16 as Int16,
)
from .primitives import (
    Int32 as Int32,
)
from .primitives import (
    Int64 as Int64,
)
from .primitives import (
    UInt32 as UInt32,
)
from .primitives import (
    VarInt as VarInt,
)
from .primitives import (
    VarLong as VarLong,
)

__all__ = [
    "BATCH_HEADER_SIZE",
    "MIN_BATCH_LENGTH",
    "ControlRecord",
    "ControlRecordType",
    "Header",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "RecordBatchHeader",
    "RecordBatchV2",
    "RecordHeaderV2",
    "RecordV2",
    "TimestampType",
    "assign_offsets",
    "blob_next_offset",
    "check_batch",
    "decode_batch",
    "decode_batch_as",
    "decode_batch_run_as",
    "decode_message_set",
    "decode_control_record",
    "decode_records",
    "encode_batch",
    "encode_control_batch",
    "iter_batches",
    "batches_of",
    "read_batch_header",
    "rebuild_batch",
    "set_base_offset",
    "set_base_sequence",
    "set_partition_leader_epoch",
    "verify_crc",
]
