"""trafka.codec.records: record batches (magic 2) and records blobs.

Three independent references check the hand-written fast paths:

* the construct definitions (``RecordBatchV2``, ``RecordV2``), interpreted and
  compiled, byte for byte in both directions;
* kafka-python 3.x's ``kafka.record`` (``DefaultRecordBatchBuilder``,
  ``DefaultRecordBatch``, ``MemoryRecords``), in both directions;
* hand-assembled bytes for the malformed cases.
"""

from __future__ import annotations

import os
import struct
from typing import Any

import crc32c as crc32c_package
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import peak_allocation

from trafka.codec.compression import Compression, compress
from trafka.codec.errors import DecodeError, EncodeError
from trafka.codec.legacy import LegacyMessageHeader, encode_message_set
from trafka.codec.records import (
    ControlRecord,
    ControlRecordType,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    RecordBatchHeader,
    RecordBatchV2,
    RecordV2,
    TimestampType,
    assign_offsets,
    batches_of,
    check_batch,
    decode_batch,
    decode_control_record,
    decode_records,
    encode_batch,
    encode_control_batch,
    iter_batches,
    read_batch_header,
    set_base_offset,
    set_partition_leader_epoch,
    verify_crc,
)

kafka_record = pytest.importorskip("kafka.record.default_records")
kafka_memory = pytest.importorskip("kafka.record.memory_records")
kafka_codec = pytest.importorskip("kafka.codec")

CODECS = list(Compression)
RECORD_V2_COMPILED = RecordV2.compile()
BATCH_V2_COMPILED = RecordBatchV2.compile()
TS = 1_700_000_000_000


def kafka_can(codec: int) -> bool:
    return {
        0: lambda: True,
        1: kafka_codec.has_gzip,
        2: kafka_codec.has_snappy,
        3: kafka_codec.has_lz4,
        4: kafka_codec.has_zstd,
    }[codec]()


# -- strategies ------------------------------------------------------------------------

# Lengths around the 1-, 2- and 3-byte zig-zag varint boundaries (64 and 8192).
blobs = (
    st.binary(max_size=10)
    | st.binary(min_size=62, max_size=66)
    | st.integers(8190, 8194).map(lambda n: bytes(range(256)) * (n // 256) + b"\x07" * (n % 256))
)
nullable_blobs = st.none() | blobs
header_lists = st.lists(
    st.tuples(st.text(max_size=8), st.none() | st.binary(max_size=10)), max_size=3
).map(tuple)


@st.composite
def record_lists(
    draw: Any, max_size: int = 8
) -> list[tuple[int, bytes | None, bytes | None, tuple[Any, ...]]]:
    base = draw(st.integers(-(2**40), 2**50))
    deltas = (
        st.integers(-100, 100)
        | st.integers(-(2**40), 2**40)
        | st.sampled_from([8191, 8192, -8192, -8193])
    )
    n = draw(st.integers(1, max_size))
    return [
        (
            base + (0 if i == 0 else draw(deltas)),
            draw(nullable_blobs),
            draw(nullable_blobs),
            draw(header_lists),
        )
        for i in range(n)
    ]


batch_options = st.fixed_dictionaries(
    {
        "base_offset": st.integers(0, 2**62),
        "producer_id": st.sampled_from([-1, 0, 2**62]),
        "producer_epoch": st.sampled_from([-1, 0, 2**15 - 1]),
        "base_sequence": st.sampled_from([-1, 0, 2**31 - 1]),
        "is_transactional": st.booleans(),
        "partition_leader_epoch": st.sampled_from([-1, 0, 7]),
        "timestamp_type": st.sampled_from([0, 1]),
    }
)


# -- the construct oracle --------------------------------------------------------------------


def construct_records(records: list[Any], base_ts: int) -> list[dict[str, Any]]:
    return [
        {
            "attributes": 0,
            "timestamp_delta": ts - base_ts,
            "offset_delta": i,
            "key": key,
            "value": value,
            "headers": [{"key": k, "value": v} for k, v in headers],
        }
        for i, (ts, key, value, headers) in enumerate(records)
    ]


def construct_batch(
    records: list[Any], *, compiled: bool, compression: int = 0, **options: Any
) -> bytes:
    """Build a batch with construct; only the CRC comes from elsewhere (crc32c package)."""
    record_cons = RECORD_V2_COMPILED if compiled else RecordV2
    batch_cons = BATCH_V2_COMPILED if compiled else RecordBatchV2
    base_ts = records[0][0]
    items = construct_records(records, base_ts)
    payload = b"".join(record_cons.build(item) for item in items)
    if compression:
        payload = compress(compression, payload)
    attributes = (
        compression
        | (0x08 if options.get("timestamp_type") else 0)
        | (0x10 if options.get("is_transactional") else 0)
        | (0x20 if options.get("is_control") else 0)
    )
    fields = {
        "base_offset": options.get("base_offset", 0),
        "batch_length": 49 + len(payload),
        "partition_leader_epoch": options.get("partition_leader_epoch", -1),
        "crc": 0,
        "attributes": attributes,
        "last_offset_delta": len(records) - 1,
        "base_timestamp": base_ts,
        "max_timestamp": max(r[0] for r in records),
        "producer_id": options.get("producer_id", -1),
        "producer_epoch": options.get("producer_epoch", -1),
        "base_sequence": options.get("base_sequence", -1),
        "records_count": len(records),
        "records": payload if compression else items,
    }
    unsigned = batch_cons.build(fields)
    fields["crc"] = crc32c_package.crc32c(unsigned[21:])
    return bytes(batch_cons.build(fields))


def expected_records(
    records: list[Any], base_offset: int, log_append: bool = False
) -> list[Record]:
    max_ts = max(r[0] for r in records)
    return [
        Record(base_offset + i, max_ts if log_append else ts, key, value, tuple(headers))
        for i, (ts, key, value, headers) in enumerate(records)
    ]


# -- fast path == construct ---------------------------------------------------------------------


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists(), options=batch_options, compiled=st.booleans())
def test_encode_matches_construct_build(
    records: list[Any], options: dict[str, Any], compiled: bool
) -> None:
    assert encode_batch(records, **options) == construct_batch(
        records, compiled=compiled, **options
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists(max_size=4), codec=st.sampled_from(CODECS[1:]), compiled=st.booleans())
def test_compressed_encode_matches_construct_build(
    records: list[Any], codec: int, compiled: bool
) -> None:
    assert encode_batch(records, compression=codec) == construct_batch(
        records, compiled=compiled, compression=codec
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists(), options=batch_options, compiled=st.booleans())
def test_decode_matches_construct_parse(
    records: list[Any], options: dict[str, Any], compiled: bool
) -> None:
    data = construct_batch(records, compiled=compiled, **options)
    parsed = (BATCH_V2_COMPILED if compiled else RecordBatchV2).parse(data)
    batch = decode_batch(data)
    for name in RecordBatchHeader._fields:
        assert getattr(batch.header, name) == parsed[name], name
    log_append = parsed.attributes & 0x08
    assert batch.records == [
        Record(
            parsed.base_offset + r.offset_delta,
            parsed.max_timestamp if log_append else parsed.base_timestamp + r.timestamp_delta,
            r.key,
            r.value,
            tuple((h.key, h.value) for h in r.headers),
        )
        for r in parsed.records
    ]
    assert batch.records == expected_records(records, options["base_offset"], bool(log_append))


def test_constructs_compile_and_agree_on_a_sample() -> None:
    records = [(TS, b"k", b"v", (("h", b"x"), ("n", None))), (TS + 5, None, None, ())]
    data = encode_batch(records, base_offset=3)
    assert RecordBatchV2.parse(data) == BATCH_V2_COMPILED.parse(data)
    parsed = RecordBatchV2.parse(data)
    assert RecordBatchV2.build(parsed) == BATCH_V2_COMPILED.build(parsed) == data


@pytest.mark.parametrize("compiled", [False, True])
def test_construct_rejects_malformed_batches(compiled: bool) -> None:
    cons = BATCH_V2_COMPILED if compiled else RecordBatchV2
    data = encode_batch([(TS, b"key", b"value", ())])
    with pytest.raises(DecodeError):
        cons.parse(data[:-1])
    with pytest.raises(DecodeError):
        cons.parse(data[:16] + b"\x01" + data[17:])  # magic 1
    lying = bytearray(data)
    lying[57:61] = struct.pack(">i", 2**31 - 1)
    with pytest.raises(DecodeError):
        cons.parse(bytes(lying))


# -- round trips -------------------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_round_trip_every_codec(codec: Compression) -> None:
    records = [
        (
            TS + i,
            None if i % 3 == 0 else b"key-%d" % i,
            os.urandom(50) + b"x" * i,
            (("h", b"%d" % i),) if i % 2 else (),
        )
        for i in range(200)
    ]
    data = encode_batch(records, compression=codec, base_offset=1000)
    batch = decode_batch(data)
    assert batch.header.compression == codec
    assert batch.header.records_count == 200
    assert batch.records == expected_records(records, 1000)
    assert list(decode_records(data)) == batch.records


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists(), options=batch_options, codec=st.sampled_from(CODECS))
def test_round_trip_property(records: list[Any], options: dict[str, Any], codec: int) -> None:
    data = encode_batch(records, compression=codec, **options)
    batch = decode_batch(data)
    assert isinstance(batch, RecordBatch)
    header = batch.header
    assert header.size == len(data)
    assert header.base_offset == options["base_offset"]
    assert header.producer_id == options["producer_id"]
    assert header.is_transactional == options["is_transactional"]
    assert header.timestamp_type == options["timestamp_type"]
    assert header.last_offset == options["base_offset"] + len(records) - 1
    assert header.max_timestamp == max(r[0] for r in records)
    assert batch.records == expected_records(
        records, options["base_offset"], options["timestamp_type"] == 1
    )


def test_explicit_base_timestamp() -> None:
    records = [(TS + 10, None, b"a", ()), (TS + 20, None, b"b", ())]
    batch = decode_batch(encode_batch(records, base_timestamp=TS + 50))
    assert batch.header.base_timestamp == TS + 50
    assert batch.header.max_timestamp == TS + 20
    assert [r.timestamp for r in batch.records] == [TS + 10, TS + 20]


def test_input_buffers_of_any_kind() -> None:
    data = encode_batch([(TS, bytearray(b"k"), memoryview(b"value"), (("h", bytearray(b"v")),))])
    assert decode_batch(bytearray(data)).records == [Record(0, TS, b"k", b"value", (("h", b"v"),))]
    assert decode_batch(memoryview(data)).records == decode_batch(data).records


# -- kafka-python cross-checks ---------------------------------------------------------------------


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_our_batches(codec: Compression) -> None:
    if not kafka_can(codec):
        pytest.skip("kafka-python lacks this codec's library")
    records = [
        (
            TS + i * 7,
            b"k%d" % i if i % 2 else None,
            b"v" * (i * 37 % 300),
            (("a", b"1"), ("b", None)) if i % 4 == 0 else (),
        )
        for i in range(150)
    ]
    data = encode_batch(
        records,
        compression=codec,
        base_offset=42,
        producer_id=9,
        producer_epoch=2,
        base_sequence=17,
    )
    theirs = kafka_record.DefaultRecordBatch(data)
    assert theirs.validate_crc()
    assert theirs.base_offset == 42 and theirs.producer_id == 9 and theirs.base_sequence == 17
    assert theirs.compression_type == codec
    got = [(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert got == [tuple(r) for r in expected_records(records, 42)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists(max_size=5), codec=st.sampled_from(CODECS))
def test_kafka_python_reads_our_batches_property(records: list[Any], codec: int) -> None:
    if not kafka_can(codec):
        return
    theirs = kafka_record.DefaultRecordBatch(encode_batch(records, compression=codec))
    assert theirs.validate_crc()
    got = [Record(r.offset, r.timestamp, r.key, r.value, tuple(r.headers)) for r in theirs]
    assert got == expected_records(records, 0)


def kafka_python_batch(records: list[Any], codec: int, **kwargs: Any) -> bytes:
    builder = kafka_record.DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=kwargs.get("is_transactional", False),
        producer_id=kwargs.get("producer_id", -1),
        producer_epoch=kwargs.get("producer_epoch", -1),
        base_sequence=kwargs.get("base_sequence", -1),
        batch_size=2**30,
    )
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.append(i, ts, key, value, list(headers)) is not None
    return bytes(builder.build())


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_we_read_kafka_python_batches(codec: Compression) -> None:
    if not kafka_can(codec):
        pytest.skip("kafka-python lacks this codec's library")
    records = [
        (
            TS + i,
            b"key" if i % 2 else None,
            os.urandom(20) * 5,
            (("x", b"y"),) if i % 3 == 0 else (),
        )
        for i in range(300)
    ]
    data = kafka_python_batch(
        records, codec, is_transactional=True, producer_id=5, producer_epoch=1, base_sequence=0
    )
    batch = decode_batch(data)
    assert batch.header.is_transactional and batch.header.producer_id == 5
    assert batch.records == expected_records(records, 0)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=record_lists(max_size=5))
def test_we_read_kafka_python_batches_property(records: list[Any]) -> None:
    data = kafka_python_batch(records, 0)
    # Same bytes as ours, except the leader epoch kafka-python leaves at 0 (Java: -1).
    assert set_partition_leader_epoch(encode_batch(records), 0) == data
    assert decode_batch(data).records == expected_records(records, 0)


def test_we_read_kafka_python_memory_records() -> None:
    blob = b""
    expected: list[Record] = []
    offset = 0
    for n, codec in ((3, 0), (5, 1), (1, 3), (4, 4), (2, 2)):
        if not kafka_can(codec):
            continue
        builder = kafka_memory.MemoryRecordsBuilder(
            magic=2, compression_type=codec, batch_size=2**20, offset=offset
        )
        for i in range(n):
            builder.append(TS + i, b"k", b"value-%d" % (offset + i), [])
            expected.append(Record(offset + i, TS + i, b"k", b"value-%d" % (offset + i), ()))
        builder.close()
        blob += bytes(builder.buffer())
        offset += n
    assert list(decode_records(blob)) == expected
    assert [h.base_offset for h, _ in iter_batches(blob)] == [
        b.base_offset for b in kafka_memory.MemoryRecords(blob)
    ]


# -- header -----------------------------------------------------------------------------------------


def test_header_fields_and_properties() -> None:
    data = encode_batch(
        [
            (TS, None, b"a", ()),
            (TS + 9, None, b"b", ()),
            (TS + 3, None, b"c", ()),
            (TS + 1, None, b"d", ()),
        ],
        base_offset=100,
        compression=Compression.GZIP,
        producer_id=77,
        producer_epoch=3,
        base_sequence=2**31 - 2,
        is_transactional=True,
        partition_leader_epoch=12,
        timestamp_type=1,
    )
    h = read_batch_header(data)
    assert h == RecordBatchHeader(
        base_offset=100,
        batch_length=len(data) - 12,
        partition_leader_epoch=12,
        magic=2,
        crc=crc32c_package.crc32c(data[21:]),
        attributes=0x01 | 0x08 | 0x10,
        last_offset_delta=3,
        base_timestamp=TS,
        max_timestamp=TS + 9,
        producer_id=77,
        producer_epoch=3,
        base_sequence=2**31 - 2,
        records_count=4,
    )
    assert h.compression is Compression.GZIP
    assert h.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert h.is_transactional and not h.is_control
    assert (h.last_offset, h.next_offset, h.size) == (103, 104, len(data))
    assert h.last_sequence == 1  # wraps past 2**31-1 to 0, as Java does
    assert read_batch_header(b"junk" + data, 4) == h
    assert decode_batch(data).records[0].timestamp == TS + 9  # log-append time


def test_last_sequence_without_idempotence() -> None:
    assert read_batch_header(encode_batch([(TS, None, b"", ())])).last_sequence == -1
    assert (
        read_batch_header(encode_batch([(TS, None, b"", ())] * 3, base_sequence=5)).last_sequence
        == 7
    )


def patched(data: bytes, at: int, fmt: str, value: int) -> bytes:
    out = bytearray(data)
    struct.pack_into(fmt, out, at, value)
    return bytes(out)


SAMPLE = encode_batch(
    [
        (TS, b"k0", b"v0", ()),
        (TS + 1, None, b"v1" * 50, (("h1", b"x"), ("h2", None))),
        (TS + 2, b"k2", None, ()),
        (TS + 3, b"k3", b"v3", (("h3", b""),)),
    ],
    base_offset=10,
)


@pytest.mark.parametrize(
    ("data", "match"),
    [
        (SAMPLE[:60], "truncated"),
        (SAMPLE[:16] + b"\x01" + SAMPLE[17:], "magic 1 is not 2"),
        (patched(SAMPLE, 8, ">i", 48), "batch_length 48"),
        (patched(SAMPLE, 8, ">i", -1), "batch_length -1"),
        (patched(SAMPLE, 21, ">h", 5), "unknown compression codec 5"),
    ],
)
def test_read_batch_header_errors(data: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match) as info:
        read_batch_header(data)
    assert info.value.message_name == "RecordBatch"


# -- CRC ------------------------------------------------------------------------------------------


def test_crc() -> None:
    assert verify_crc(SAMPLE)
    check_batch(SAMPLE)
    for pos in (21, 30, 60, 70, len(SAMPLE) - 1):
        damaged = bytearray(SAMPLE)
        damaged[pos] ^= 0x40
        assert not verify_crc(damaged)
        with pytest.raises(DecodeError, match="CRC mismatch") as info:
            check_batch(damaged)
        assert info.value.field == "crc"
        with pytest.raises(DecodeError, match="CRC mismatch"):
            decode_batch(bytes(damaged))
        try:
            decode_batch(bytes(damaged), verify=False)
        except DecodeError as exc:
            assert "CRC" not in str(exc)
    # base_offset and partition_leader_epoch are outside the CRC.
    assert verify_crc(set_partition_leader_epoch(set_base_offset(SAMPLE, 99), 5))
    # Bytes past the declared length do not count.
    assert verify_crc(SAMPLE + b"next batch")
    with pytest.raises(DecodeError, match="truncated"):
        verify_crc(SAMPLE[:-1])
    with pytest.raises(DecodeError):
        verify_crc(SAMPLE[:10])


# -- in-place rewrites and offset assignment ----------------------------------------------------------


def test_set_base_offset_and_epoch() -> None:
    out = set_base_offset(SAMPLE, 2**40)
    assert isinstance(out, bytes) and out[8:] == SAMPLE[8:]
    assert read_batch_header(out).base_offset == 2**40
    assert read_batch_header(SAMPLE).base_offset == 10  # the original is untouched
    assert [r.offset for r in decode_batch(out).records] == [2**40 + i for i in range(4)]

    buf = bytearray(SAMPLE)
    assert set_base_offset(buf, 7) is buf
    assert read_batch_header(buf).base_offset == 7

    big = bytearray(b"\x00" * 5 + SAMPLE)
    view = memoryview(big)[5:]
    assert set_partition_leader_epoch(view, 33) is view
    assert read_batch_header(big, 5).partition_leader_epoch == 33
    assert verify_crc(view)

    readonly = set_base_offset(memoryview(SAMPLE), 1)
    assert isinstance(readonly, bytes) and read_batch_header(readonly).base_offset == 1

    with pytest.raises(EncodeError):
        set_base_offset(SAMPLE, 2**63)
    with pytest.raises(EncodeError):
        set_partition_leader_epoch(SAMPLE, 2**31)
    with pytest.raises(DecodeError):
        set_base_offset(encode_message_set([(TS, None, b"x", ())], magic=1), 3)


def test_assign_offsets() -> None:
    batches = [encode_batch([(TS, None, b"%d" % i, ())] * n) for i, n in enumerate((3, 1, 5))]
    legacy = encode_message_set([(TS, None, b"old", ())] * 2, magic=1, compression=Compression.GZIP)
    blob = b"".join(batches) + legacy
    out, next_offset = assign_offsets(blob, 100)
    assert next_offset == 111
    assert [r.offset for r in decode_records(out)] == list(range(100, 111))
    assert all(verify_crc(view) for _, view in iter_batches(out))
    assert [h.last_offset for h, _ in iter_batches(out)] == [102, 103, 108, 110]
    with pytest.raises(DecodeError, match="incomplete"):
        assign_offsets(blob[:-1], 0)


# -- walking a blob ------------------------------------------------------------------------------------


def test_iter_batches_mixed_magics() -> None:
    v0 = encode_message_set([(TS, b"a", b"b", ())], magic=0, base_offset=5)
    v1 = encode_message_set(
        [(TS, None, b"c", ()), (TS + 1, None, b"d", ())], magic=1, base_offset=6
    )
    v2 = encode_batch([(TS, None, b"e", ())] * 3, base_offset=8)
    blob = v0 + v1 + v2
    entries = list(iter_batches(blob))
    assert [type(h) for h, _ in entries] == [LegacyMessageHeader] * 3 + [RecordBatchHeader]
    assert [h.magic for h, _ in entries] == [0, 1, 1, 2]
    assert [bytes(v) for _, v in entries][-1] == v2
    assert b"".join(bytes(v) for _, v in entries) == blob
    assert [h.next_offset for h, _ in entries] == [6, 7, 8, 11]
    assert [r.offset for r in decode_records(blob)] == list(range(5, 11))
    assert [r.timestamp for r in decode_records(blob)][:3] == [-1, TS, TS + 1]


def test_iter_batches_skips_a_trailing_partial_entry() -> None:
    blob = SAMPLE + SAMPLE
    for cut in range(len(SAMPLE), len(blob)):
        entries = list(iter_batches(blob[:cut]))
        assert [bytes(v) for _, v in entries] == [SAMPLE]
    assert list(iter_batches(b"")) == []
    assert list(iter_batches(SAMPLE[:11])) == []


@pytest.mark.parametrize(
    ("blob", "match"),
    [
        (patched(SAMPLE, 8, ">i", -1), "length -1"),
        (patched(SAMPLE, 8, ">i", -(2**31)), "length -2147483648"),
        (patched(SAMPLE, 8, ">i", 13), "length 13"),
        (patched(SAMPLE, 8, ">i", 30), "batch_length 30"),
        (SAMPLE[:16] + b"\x03" + SAMPLE[17:], "unsupported magic 3"),
        (SAMPLE[:16] + b"\xff" + SAMPLE[17:], "unsupported magic"),
    ],
)
def test_iter_batches_errors(blob: bytes, match: str) -> None:
    with pytest.raises(DecodeError, match=match):
        list(iter_batches(blob))


def test_iter_batches_does_not_trust_lengths() -> None:
    # A length of 2**31-1 is a partial batch: no allocation, nothing yielded.
    assert list(iter_batches(patched(SAMPLE, 8, ">i", 2**31 - 1))) == []


# -- control batches ----------------------------------------------------------------------------------


@pytest.mark.parametrize("marker", [ControlRecordType.ABORT, ControlRecordType.COMMIT])
def test_control_batch(marker: ControlRecordType) -> None:
    data = encode_control_batch(
        marker, producer_id=7, producer_epoch=3, coordinator_epoch=9, timestamp=TS, base_offset=50
    )
    batch = decode_batch(data)
    h = batch.header
    assert h.is_control and h.is_transactional and h.records_count == 1
    assert (h.producer_id, h.producer_epoch, h.base_offset) == (7, 3, 50)
    assert decode_control_record(batch.records[0]) == ControlRecord(marker, 0, 9)
    assert batch.records[0].key == struct.pack(">hh", 0, marker)
    assert batch.records[0].value == struct.pack(">hi", 0, 9)

    theirs = list(kafka_record.DefaultRecordBatch(data))
    assert theirs[0].type == marker and theirs[0].commit == (marker == ControlRecordType.COMMIT)

    blob = (
        encode_batch(
            [(TS, None, b"data", ())],
            producer_id=7,
            producer_epoch=3,
            base_sequence=0,
            is_transactional=True,
        )
        + data
    )
    assert [r.value for r in decode_records(blob)] == [b"data"]
    assert len(list(decode_records(blob, include_control=True))) == 2


def test_decode_control_record_edge_cases() -> None:
    leader_change = Record(0, TS, struct.pack(">hh", 0, 2), b"\x00\x00whatever", ())
    assert decode_control_record(leader_change) == ControlRecord(
        ControlRecordType.LEADER_CHANGE, 0, -1
    )
    unknown = decode_control_record(Record(0, TS, struct.pack(">hh", 1, 99), None, ()))
    assert unknown == ControlRecord(99, 1, -1)
    for key, value in (
        (None, b""),
        (b"\x00", b""),
        (struct.pack(">hh", -1, 0), b"\x00" * 6),
        (struct.pack(">hh", 0, 1), b"\x00\x00"),
    ):
        with pytest.raises(DecodeError):
            decode_control_record(Record(0, TS, key, value, ()))
    with pytest.raises(EncodeError):
        encode_control_batch(2, producer_id=1, producer_epoch=0, coordinator_epoch=0, timestamp=TS)


# -- builder ---------------------------------------------------------------------------------------------


def test_builder_matches_encode_batch() -> None:
    records = [
        (TS + i, b"k" if i % 2 else None, b"v" * i, (("h", b"x"),) if i == 3 else ())
        for i in range(20)
    ]
    builder = RecordBatchBuilder(max_bytes=10**6, producer_id=4, producer_epoch=1, base_sequence=0)
    assert [builder.append(*r) for r in records] == list(range(20))
    assert builder.record_count == 20
    built = builder.build(base_offset=5)
    assert built == encode_batch(
        records, base_offset=5, producer_id=4, producer_epoch=1, base_sequence=0
    )
    assert builder.estimated_size == len(built)
    # Producer state can be set when the batch is drained.
    again = builder.build(producer_id=8, producer_epoch=2, base_sequence=100, is_transactional=True)
    h = read_batch_header(again)
    assert (h.producer_id, h.producer_epoch, h.base_sequence, h.is_transactional) == (
        8,
        2,
        100,
        True,
    )
    assert decode_batch(again).records == decode_batch(built).records[:0] + [
        r._replace(offset=r.offset - 5) for r in decode_batch(built).records
    ]


def test_builder_respects_max_bytes() -> None:
    builder = RecordBatchBuilder(max_bytes=500)
    assert builder.append(TS, None, b"x" * 1000) == 0  # the first record always fits
    assert builder.append(TS, None, b"y") is None
    assert builder.record_count == 1

    builder = RecordBatchBuilder(max_bytes=400)
    results = [builder.append(TS + i, None, b"z" * 50) for i in range(10)]
    accepted = [r for r in results if r is not None]
    assert accepted == list(range(len(accepted))) and None in results
    assert builder.estimated_size <= 400
    assert len(builder.build()) == builder.estimated_size


@pytest.mark.parametrize("codec", CODECS[1:], ids=lambda c: c.name)
def test_builder_compressed(codec: Compression) -> None:
    builder = RecordBatchBuilder(max_bytes=10**6, compression=codec)
    for i in range(100):
        builder.append(TS + i, None, b"compressible " * 10)
    built = builder.build()
    assert len(built) < builder.estimated_size
    assert [r.value for r in decode_batch(built).records] == [b"compressible " * 10] * 100


def test_builder_errors() -> None:
    with pytest.raises(EncodeError, match="at least one record"):
        RecordBatchBuilder().build()
    with pytest.raises(EncodeError):
        RecordBatchBuilder(compression=9)
    builder = RecordBatchBuilder()
    with pytest.raises(EncodeError):
        builder.append(None, None, b"x")  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        builder.append(TS, "text", b"x")  # type: ignore[arg-type]
    assert builder.append(TS, None, b"ok") == 0


# -- encode errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("records", "options", "field"),
    [
        ([], {}, None),
        ([(TS, None, b"", ()), (TS, "str", b"", ())], {}, "records[1].key"),
        ([(TS, None, 5, ())], {}, "records[0].value"),
        ([(None, None, b"", ())], {}, "records[0].timestamp"),
        ([(TS, None, b"", ()), ("later", None, b"", ())], {}, "records[1].timestamp"),
        ([(TS, None, b"", ((1, b"x"),))], {}, "records[0].headers"),
        ([(TS, None, b"", ()), (TS, None, b"", (("k", 5),))], {}, "records[1].headers"),
        ([(TS, None, b"")], {}, "records[0]"),
        ([(0, None, b"", ()), (2**63 + 5, None, b"", ())], {}, None),
        ([(TS, None, memoryview(b"abcd").cast("I"), ())], {}, "records"),
        ([(TS, None, b"", ())], {"producer_id": 2**63}, "producer_id"),
        ([(TS, None, b"", ())], {"base_offset": 1.5}, "base_offset"),
        ([(TS, None, b"", ())], {"producer_epoch": 2**15}, "producer_epoch"),
        ([(TS, None, b"", ())], {"timestamp_type": 2}, None),
        ([(TS, None, b"", ())], {"compression": 7}, None),
    ],
)
def test_encode_errors(records: list[Any], options: dict[str, Any], field: str | None) -> None:
    with pytest.raises(EncodeError) as info:
        encode_batch(records, **options)
    if field is not None:
        assert field in (info.value.field or "")


# -- malformed input -------------------------------------------------------------------------------------


def zz(value: int) -> bytes:
    """A zig-zag varint, written independently of the code under test."""
    raw = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        if raw < 0x80:
            out.append(raw)
            return bytes(out)
        out.append((raw & 0x7F) | 0x80)
        raw >>= 7


def raw_record(
    *,
    length: bytes | None = None,
    ts: bytes = b"\x00",
    od: bytes = b"\x00",
    key: bytes = b"\x01",
    value: bytes = b"\x01",
    headers: bytes = b"\x00",
) -> bytes:
    body = b"\x00" + ts + od + key + value + headers
    return (zz(len(body)) if length is None else length) + body


def wrap(records: bytes, count: int, codec: int = 0, *, precompressed: bool = False) -> bytes:
    """A batch around raw record bytes, with a correct CRC so decoding goes deep."""
    payload = compress(codec, records) if codec and not precompressed else records
    tail = struct.pack(">hiqqqhii", codec, count - 1, TS, TS, -1, -1, -1, count)
    crc = crc32c_package.crc32c(payload, crc32c_package.crc32c(tail))
    return struct.pack(">qiibI", 0, 49 + len(payload), -1, 2, crc) + tail + payload


def test_wrap_builds_what_encode_batch_builds() -> None:
    assert wrap(raw_record(value=zz(2) + b"ab"), 1) == set_partition_leader_epoch(
        encode_batch([(TS, None, b"ab", ())]), -1
    )


BAD_CASES = [
    (wrap(raw_record(), 2), "records_count", "records_count 2 does not fit"),
    (
        wrap(raw_record(value=zz(20) + b"x" * 20) + zz(6) + b"\x00\x00\x00\x80\x80\x80", 2),
        "records[1].key",
        "truncated",
    ),
    (
        wrap(raw_record(value=zz(20) + b"x" * 20) + zz(40), 2),
        "records[1].length",
        "length 40 does not fit",
    ),
    (wrap(raw_record(), -1), "records_count", "records_count -1"),
    (wrap(raw_record(), 2**31 - 1), "records_count", "2147483647"),
    (wrap(raw_record() + b"\x00", 1), "records", "left after"),
    (wrap(raw_record(length=zz(2**31 - 1)), 1), "records[0].length", "2147483647"),
    (wrap(raw_record(length=zz(-1)), 1), "records[0].length", "length -1"),
    (wrap(raw_record(length=zz(5)), 1), "records[0].length", "length 5"),
    (wrap(raw_record(length=zz(7)) + b"\x00", 1), "records[0].length", "more bytes"),
    (wrap(raw_record(length=zz(6), key=zz(1) + b"k"), 1), "records[0].length", "overrun"),
    (wrap(raw_record(key=zz(2**31 - 1)), 1), "records[0].key", "2147483647"),
    (wrap(raw_record(key=zz(-2)), 1), "records[0].key", "invalid length -2"),
    (wrap(raw_record(value=zz(2**31 - 1)), 1), "records[0].value", "overruns"),
    (wrap(raw_record(value=zz(-(2**31))), 1), "records[0].value", "invalid length"),
    (
        wrap(raw_record(od=b"\xff\xff\xff\xff\xff\x01"), 1),
        "records[0].offset_delta",
        "longer than 5 bytes",
    ),
    (wrap(raw_record(od=b"\xff\xff\xff\xff\x7f"), 1), "records[0].offset_delta", "32 bits"),
    (
        wrap(raw_record(ts=b"\xff" * 10 + b"\x01"), 1),
        "records[0].timestamp_delta",
        "longer than 10 bytes",
    ),
    (wrap(raw_record(ts=b"\xff" * 9 + b"\x7f"), 1), "records[0].timestamp_delta", "64 bits"),
    (wrap(raw_record(headers=zz(2**31 - 1)), 1), "records[0].headers", "header count"),
    (wrap(raw_record(headers=zz(-1)), 1), "records[0].headers", "header count -1"),
    (
        wrap(raw_record(headers=zz(1) + zz(-1) + zz(-1)), 1),
        "records[0].headers[0].key",
        "invalid length -1",
    ),
    (
        wrap(raw_record(headers=zz(1) + zz(2) + b"\xff\xfe" + zz(-1)), 1),
        "records[0].headers[0].key",
        "UTF-8",
    ),
    (
        wrap(raw_record(headers=zz(1) + zz(1) + b"k" + zz(2**31 - 1)), 1),
        "records[0].headers[0].value",
        "overruns",
    ),
    (
        wrap(raw_record(headers=zz(1) + zz(1) + b"k" + zz(-3)), 1),
        "records[0].headers[0].value",
        "invalid",
    ),
    (wrap(raw_record(), 1, codec=1)[:-1], None, "truncated"),
    (wrap(raw_record(value=zz(20) + b"x" * 20) * 2, 3, codec=4), "records[2].length", "truncated"),
    (wrap(b"garbage", 1, codec=2, precompressed=True), "records", "invalid snappy data"),
    (
        wrap(compress(4, raw_record() + bytes(5000)), 1, codec=4, precompressed=True),
        "records",
        "5000 bytes left after",
    ),
]


@pytest.mark.parametrize(("data", "field", "match"), BAD_CASES)
def test_malformed_records_are_located(data: bytes, field: str | None, match: str) -> None:
    with pytest.raises(DecodeError, match=match) as info:
        decode_batch(data)
    # Refused without allocating from a length it was told (the first decode
    # above warmed every cache).
    peak = peak_allocation(lambda: decode_batch(data))
    assert peak < 16 * len(data) + 64 * 1024, peak
    assert info.value.message_name == "RecordBatch"
    if field is not None:
        assert (info.value.field or "").startswith(field)
    # The flattening decoder fails the same way (a truncated batch is skipped there).
    if len(data) == read_batch_header(data).size:
        with pytest.raises(DecodeError):
            list(decode_records(data))


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_every_truncation_raises_decode_error(codec: Compression) -> None:
    data = encode_batch(
        [(TS + i, b"key", b"value" * i, (("h", b"v"),)) for i in range(5)], compression=codec
    )
    for cut in range(len(data)):
        with pytest.raises(DecodeError):
            decode_batch(data[:cut])
        with pytest.raises(DecodeError):
            decode_batch(data[:cut], verify=False)
        assert list(decode_records(data[:cut])) == []  # a partial batch is skipped


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_flipped_bytes_raise_only_decode_error(codec: Compression) -> None:
    data = encode_batch(
        [(TS + i, b"key", b"value" * i, (("h", b"v"),)) for i in range(5)], compression=codec
    )
    for pos in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[pos] ^= mask
            for verify in (True, False):
                try:
                    decode_batch(bytes(damaged), verify=verify)
                except DecodeError:
                    pass
            try:
                list(decode_records(bytes(damaged), verify=False))
            except DecodeError:
                pass


@settings(max_examples=200, deadline=None)
@given(
    body=st.binary(max_size=120),
    count=st.integers(-3, 40) | st.just(2**31 - 1),
    codec=st.sampled_from([0, 0, 0, 1, 3]),
)
def test_random_record_bytes_raise_only_decode_error(body: bytes, count: int, codec: int) -> None:
    try:
        batch = decode_batch(wrap(body, count, codec))
    except DecodeError:
        return
    assert len(batch.records) == count


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_random_blobs_raise_only_decode_error(blob: bytes) -> None:
    try:
        list(decode_records(blob))
    except DecodeError:
        pass


@pytest.mark.parametrize(
    ("field", "bits"),
    [
        ("base_offset", 64),
        ("partition_leader_epoch", 32),
        ("producer_id", 64),
        ("producer_epoch", 16),
        ("base_sequence", 32),
    ],
)
def test_a_header_field_out_of_its_range_is_refused_by_name(field: str, bits: int) -> None:
    """encode_batch's header fields: the bounds of their signed widths are written,
    one past either is an EncodeError naming the field; a bool is not an int."""
    row = [(TS, b"k", b"v", ())]
    for ok in (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1):
        assert getattr(read_batch_header(encode_batch(row, **{field: ok})), field) == ok
    for bad in (-(2 ** (bits - 1)) - 1, 2 ** (bits - 1), True):
        with pytest.raises(EncodeError) as caught:
            encode_batch(row, **{field: bad})
        assert caught.value.field == field


def test_batches_of_reads_one_batch_as_the_walk_reads_it() -> None:
    """batches_of (one magic 2 batch read without walking) gives
    what iter_batches gives, and walks whatever is not exactly one such batch."""
    one = encode_batch([(1, b"k", b"v", ())], producer_id=3, producer_epoch=0, base_sequence=0)
    two = one + encode_batch([(2, b"q", b"w", ())], compression=Compression.LZ4)
    legacy = encode_message_set([(1, b"k", b"v", ())], magic=1)
    short = bytearray(one)
    short[8:12] = (13).to_bytes(4, "big")  # below even a legacy message's length
    for blob in (one, two, one + b"\0" * 11, legacy, b"", None, memoryview(one), bytes(short)):
        try:
            walked: Any = [(h, bytes(v)) for h, v in iter_batches(blob or b"")]
        except Exception as exc:  # the walk's error is the fast path's too
            with pytest.raises(type(exc)):
                batches_of(blob)
            continue
        assert [(h, bytes(v)) for h, v in batches_of(blob)] == walked
