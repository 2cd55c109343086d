"""trafka.codec.legacy: message sets of magic 0 and 1.

Checked against the construct definitions (``MessageSetEntry``, ``MessageV0``,
``MessageV1``), against kafka-python 3.x's ``LegacyRecordBatchBuilder`` and
``MemoryRecords`` in both directions, and against hand-assembled bytes.
"""

from __future__ import annotations

import struct
import zlib
from io import BytesIO
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import peak_allocation

from trafka.codec.compression import Compression, compress, decompress
from trafka.codec.errors import DecodeError, EncodeError
from trafka.codec.legacy import (
    LegacyMessageHeader,
    MessageSetEntry,
    MessageV0,
    MessageV1,
    assign_legacy_offsets,
    decode_legacy_entry,
    encode_message_set,
    read_message_header,
)
from trafka.codec.records import (
    Record,
    TimestampType,
    assign_offsets,
    check_batch,
    decode_message_set,
    decode_records,
    iter_batches,
    verify_crc,
)

kafka_legacy = pytest.importorskip("kafka.record.legacy_records")
kafka_memory = pytest.importorskip("kafka.record.memory_records")
kafka_codec = pytest.importorskip("kafka.codec")

LEGACY_CODECS = [Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4]
ENTRY_COMPILED = MessageSetEntry.compile()
TS = 1_600_000_000_000


def kafka_can(codec: int, magic: int) -> bool:
    if codec == 3 and magic == 0:
        return kafka_codec.xxhash is not None  # kafka-python needs xxhash for KAFKA-3160
    return {
        0: True,
        1: kafka_codec.has_gzip(),
        2: kafka_codec.has_snappy(),
        3: kafka_codec.has_lz4(),
    }[codec]


def entries(data: bytes, compiled: bool = False) -> list[Any]:
    """Parse a message set entry by entry with construct."""
    cons = ENTRY_COMPILED if compiled else MessageSetEntry
    stream = BytesIO(data)
    out = []
    while stream.tell() < len(data):
        out.append(cons.parse_stream(stream))
    return out


def message(
    offset: int, magic: int, attributes: int, timestamp: int, key: bytes, value: bytes
) -> bytes:
    """A message from raw key/value fields (length prefixes included), with a correct CRC."""
    body = (
        bytes((magic, attributes)) + (struct.pack(">q", timestamp) if magic else b"") + key + value
    )
    return struct.pack(">qiI", offset, 4 + len(body), zlib.crc32(body)) + body


def nb(data: bytes | None) -> bytes:
    return b"\xff\xff\xff\xff" if data is None else struct.pack(">i", len(data)) + data


MESSAGES = [
    (TS + i * 3, b"key-%d" % i if i % 2 else None, b"value-%d" % i * (i + 1), ()) for i in range(20)
]


# -- round trips -----------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_round_trip(magic: int, codec: Compression) -> None:
    data = encode_message_set(MESSAGES, magic=magic, compression=codec, base_offset=1000)
    expected = [
        Record(1000 + i, ts if magic else -1, key, value, ())
        for i, (ts, key, value, _) in enumerate(MESSAGES)
    ]
    assert decode_message_set(data) == expected
    assert list(decode_records(data)) == expected
    headers = [h for h, _ in iter_batches(data)]
    assert all(isinstance(h, LegacyMessageHeader) and h.magic == magic for h in headers)
    assert headers[-1].next_offset == 1020
    if codec:
        assert len(headers) == 1 and headers[0].compression == codec and headers[0].offset == 1019
    else:
        assert [h.offset for h in headers] == list(range(1000, 1020))
    assert all(verify_crc(view) for _, view in iter_batches(data))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(
        st.tuples(
            st.integers(0, 2**62),
            st.none() | st.binary(max_size=20),
            st.none() | st.binary(max_size=20),
            st.just(()),
        ),
        min_size=1,
        max_size=6,
    ),
    magic=st.sampled_from([0, 1]),
    codec=st.sampled_from(LEGACY_CODECS),
    base_offset=st.integers(0, 2**40),
)
def test_round_trip_property(messages: list[Any], magic: int, codec: int, base_offset: int) -> None:
    data = encode_message_set(messages, magic=magic, compression=codec, base_offset=base_offset)
    assert list(decode_records(data)) == [
        Record(base_offset + i, ts if magic else -1, k, v, ())
        for i, (ts, k, v, _) in enumerate(messages)
    ]


def test_log_append_time() -> None:
    data = encode_message_set(MESSAGES[:3], magic=1, compression=Compression.GZIP, timestamp_type=1)
    ((header, _),) = iter_batches(data)
    assert header.timestamp_type is TimestampType.LOG_APPEND_TIME
    assert header.timestamp == MESSAGES[2][0]
    assert [r.timestamp for r in decode_records(data)] == [MESSAGES[2][0]] * 3
    plain = encode_message_set(MESSAGES[:3], magic=1, timestamp_type=1)
    assert [h.timestamp_type for h, _ in iter_batches(plain)] == [TimestampType.LOG_APPEND_TIME] * 3
    assert (
        read_message_header(encode_message_set(MESSAGES[:1], magic=0)).timestamp_type
        is TimestampType.NO_TIMESTAMP_TYPE
    )


# -- wire structure, checked with construct --------------------------------------------------------


@pytest.mark.parametrize("compiled", [False, True])
def test_compressed_v1_uses_relative_inner_offsets(compiled: bool) -> None:
    data = encode_message_set(MESSAGES[:4], magic=1, compression=Compression.GZIP, base_offset=50)
    (wrapper,) = entries(data, compiled)
    assert wrapper.offset == 53  # the last inner offset
    assert wrapper.message.key is None and wrapper.message.attributes == 1
    assert wrapper.message.timestamp == MESSAGES[3][0]  # the largest inner timestamp
    inner = entries(decompress(Compression.GZIP, wrapper.message.value), compiled)
    assert [e.offset for e in inner] == [0, 1, 2, 3]
    assert [e.message.attributes for e in inner] == [0] * 4


def test_compressed_v0_uses_absolute_inner_offsets() -> None:
    data = encode_message_set(MESSAGES[:4], magic=0, compression=Compression.LZ4, base_offset=50)
    (wrapper,) = entries(data)
    assert wrapper.offset == 53 and wrapper.message.timestamp is None
    inner = entries(decompress(Compression.LZ4, wrapper.message.value, magic=0))
    assert [e.offset for e in inner] == [50, 51, 52, 53]
    # Magic 0 lz4 carries the pre-0.10 header checksum.
    with pytest.raises(DecodeError, match="checksum"):
        decompress(Compression.LZ4, wrapper.message.value)


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    messages=st.lists(
        st.tuples(
            st.integers(-1, 2**50),
            st.none() | st.binary(max_size=12),
            st.none() | st.binary(max_size=12),
            st.just(()),
        ),
        min_size=1,
        max_size=5,
    ),
    magic=st.sampled_from([0, 1]),
    base_offset=st.integers(0, 2**62),
    compiled=st.booleans(),
)
def test_encode_matches_construct(
    messages: list[Any], magic: int, base_offset: int, compiled: bool
) -> None:
    cons = ENTRY_COMPILED if compiled else MessageSetEntry
    expected = b""
    for i, (ts, key, value, _) in enumerate(messages):
        fields = {
            "crc": 0,
            "magic": magic,
            "attributes": 0,
            "timestamp": ts if magic else None,
            "key": key,
            "value": value,
        }
        unsigned = cons.build({"offset": base_offset + i, "message": fields})
        fields["crc"] = zlib.crc32(unsigned[16:])
        expected += cons.build({"offset": base_offset + i, "message": fields})
    data = encode_message_set(messages, magic=magic, base_offset=base_offset)
    assert data == expected
    parsed = entries(data, compiled)
    assert decode_message_set(data) == [
        Record(e.offset, e.message.timestamp if magic else -1, e.message.key, e.message.value, ())
        for e in parsed
    ]
    single = MessageV1 if magic else MessageV0
    for e, (_, view) in zip(parsed, iter_batches(data), strict=True):
        assert single.parse(bytes(view[12:])) == single.compile().parse(bytes(view[12:]))
        assert single.parse(bytes(view[12:])).crc == e.message.crc


@pytest.mark.parametrize("compiled", [False, True])
def test_construct_rejects_malformed_messages(compiled: bool) -> None:
    data = encode_message_set(MESSAGES[:1], magic=1)
    cons = MessageV1.compile() if compiled else MessageV1
    with pytest.raises(DecodeError):
        cons.parse(data[12:-1])
    with pytest.raises(DecodeError):
        (MessageV0.compile() if compiled else MessageV0).parse(data[12:])  # magic 1
    with pytest.raises(DecodeError):
        entries(data[:8] + struct.pack(">i", 2**31 - 1) + data[12:], compiled)


# -- kafka-python cross-checks ------------------------------------------------------------------------


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_kafka_python_reads_our_message_sets(magic: int, codec: Compression) -> None:
    if not kafka_can(codec, magic):
        pytest.skip("kafka-python lacks this codec's library")
    data = encode_message_set(MESSAGES, magic=magic, compression=codec, base_offset=300)
    got = []
    for batch in kafka_memory.MemoryRecords(data):
        assert batch.validate_crc()
        got += [(r.offset, r.timestamp, r.key, r.value) for r in batch]
    assert got == [
        (300 + i, ts if magic else None, k, v) for i, (ts, k, v, _) in enumerate(MESSAGES)
    ]


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_we_read_kafka_python_message_sets(magic: int, codec: Compression) -> None:
    if not kafka_can(codec, magic):
        pytest.skip("kafka-python lacks this codec's library")
    builder = kafka_legacy.LegacyRecordBatchBuilder(
        magic=magic, compression_type=codec, batch_size=2**20
    )
    for i, (ts, key, value, _) in enumerate(MESSAGES):
        assert builder.append(i, ts, key, value) is not None
    data = bytes(builder.build())
    # kafka-python leaves the wrapper's offset at 0 for the broker to assign.
    data, next_offset = assign_legacy_offsets(data, 700)
    assert next_offset == 720
    assert list(decode_records(data)) == [
        Record(700 + i, ts if magic else -1, k, v, ()) for i, (ts, k, v, _) in enumerate(MESSAGES)
    ]


# -- assigning offsets --------------------------------------------------------------------------------


def test_assign_offsets_uncompressed_and_in_order_v1() -> None:
    plain = encode_message_set(MESSAGES[:3], magic=1)
    wrapped = encode_message_set(MESSAGES[:4], magic=1, compression=Compression.SNAPPY)
    out, next_offset = assign_legacy_offsets(plain + wrapped, 10)
    assert next_offset == 17
    assert [r.offset for r in decode_records(out)] == list(range(10, 17))
    # Only offsets changed: the v1 wrapper was not recompressed.
    assert out[12:].endswith(wrapped[8:])
    assert len(out) == len(plain) + len(wrapped)
    assert all(verify_crc(v) for _, v in iter_batches(out))


def test_assign_offsets_renumbers_v0_wrappers_and_v1_with_gaps() -> None:
    v0 = encode_message_set(MESSAGES[:3], magic=0, compression=Compression.LZ4, base_offset=999)
    inner = b"".join(message(rel, 1, 0, TS, nb(None), nb(b"x%d" % rel)) for rel in (0, 4, 9))
    gappy = message(0, 1, Compression.GZIP, TS, nb(None), nb(compress(Compression.GZIP, inner)))
    out, next_offset = assign_offsets(v0 + gappy, 20)
    assert next_offset == 26
    records = list(decode_records(out))
    assert [r.offset for r in records] == list(range(20, 26))
    assert [r.value for r in records][3:] == [b"x0", b"x4", b"x9"]
    (w0, _), (w1, _) = iter_batches(out)
    assert (w0.offset, w1.offset) == (22, 25)


# -- errors -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "options", "match"),
    [
        (MESSAGES[:1], {"magic": 1, "compression": Compression.ZSTD}, "needs magic 2"),
        (MESSAGES[:1], {"magic": 2}, "magic 2"),
        ([], {"magic": 1}, "at least one"),
        ([(TS, None, b"v", (("h", b"x"),))], {"magic": 1}, "no headers"),
        ([(TS, "k", b"v", ())], {"magic": 0}, "not bytes"),
        ([(TS, None, b"v")], {"magic": 0}, "tuple"),
        ([("ts", None, b"v", ())], {"magic": 1}, "not an int"),
        ([(2**63, None, b"v", ())], {"magic": 1}, None),
        (MESSAGES[:1], {"magic": 1, "timestamp_type": 3}, "timestamp_type"),
        (MESSAGES[:1], {"magic": 1, "base_offset": 2**63}, None),
    ],
)
def test_encode_errors(messages: list[Any], options: dict[str, Any], match: str | None) -> None:
    with pytest.raises(EncodeError, match=match):
        encode_message_set(messages, **options)


def wrapper(inner: bytes, codec: int = 1, magic: int = 1) -> bytes:
    return message(0, magic, codec, TS, nb(None), nb(compress(codec, inner, magic=magic)))


BAD = [
    (message(0, 1, 0, TS, nb(None), nb(b"v"))[:-1], "truncated", None),
    (message(0, 1, 0, TS, struct.pack(">i", 2**31 - 1), nb(b"v")), "2147483647", "key"),
    (message(0, 1, 0, TS, struct.pack(">i", -2), nb(b"v")), "invalid length -2", "key"),
    (message(0, 0, 0, TS, nb(b"k"), struct.pack(">i", 2**31 - 1)), "2147483647", "value"),
    (
        message(0, 1, 0, TS, nb(None), nb(b"v") + b"extra"),
        "5 bytes left after the value",
        "message_size",
    ),
    (message(0, 1, 4, TS, nb(None), nb(b"v")), "codec 4 is not valid", "attributes"),
    (message(0, 1, 1, TS, nb(None), nb(None)), "without a value", "value"),
    (message(0, 1, 1, TS, nb(None), nb(b"not gzip at all")), "invalid gzip data", "value"),
    (wrapper(b""), "holds no messages", "value"),
    (
        wrapper(wrapper(message(0, 1, 0, TS, nb(None), nb(b"v")))),
        "nested compression",
        "value.messages[0].attributes",
    ),
    (wrapper(message(0, 0, 0, TS, nb(None), nb(b"v"))), "inner magic 0", "value.messages[0].magic"),
    (wrapper(message(0, 1, 0, TS, nb(None), nb(b"v"))[:-2]), "truncated", "value.messages[0]"),
    (
        wrapper(message(0, 1, 0, TS, nb(None), nb(b"v")) + b"\x00" * 5),
        "truncated",
        "value.messages[1]",
    ),
]


@pytest.mark.parametrize(("data", "match", "field"), BAD)
def test_malformed_messages_are_located(data: bytes, match: str, field: str | None) -> None:
    with pytest.raises(DecodeError, match=match) as info:
        decode_legacy_entry(data)
    peak = peak_allocation(lambda: decode_legacy_entry(data))
    assert peak < 16 * len(data) + 64 * 1024, peak
    assert info.value.message_name == "Message"
    if field is not None:
        assert (info.value.field or "").startswith(field)


def test_crc_checks() -> None:
    data = encode_message_set(MESSAGES[:1], magic=1)
    check_batch(data)
    damaged = bytearray(data)
    damaged[-1] ^= 1
    assert not verify_crc(damaged)
    with pytest.raises(DecodeError, match="CRC mismatch") as info:
        check_batch(damaged)
    assert info.value.message_name == "Message"
    with pytest.raises(DecodeError, match="CRC mismatch"):
        decode_legacy_entry(bytes(damaged))
    assert decode_legacy_entry(bytes(damaged), verify=False)[0].value != MESSAGES[0][2]
    # The offset is outside the CRC.
    assert verify_crc(struct.pack(">q", 77) + data[8:])
    # Inner messages are checked too.
    inner = bytearray(message(0, 1, 0, TS, nb(None), nb(b"v")))
    inner[-1] ^= 1
    with pytest.raises(DecodeError, match="CRC mismatch"):
        decode_legacy_entry(wrapper(bytes(inner)))


def test_header_errors() -> None:
    data = encode_message_set(MESSAGES[:1], magic=1)
    with pytest.raises(DecodeError, match="truncated"):
        read_message_header(data[:20])
    with pytest.raises(DecodeError, match="magic 2"):
        read_message_header(data[:16] + b"\x02" + data[17:])
    with pytest.raises(DecodeError, match="message_size 20"):
        read_message_header(data[:8] + struct.pack(">i", 20) + data[12:])
    with pytest.raises(DecodeError, match="magic 2 batch"):
        from trafka.codec.records import encode_batch

        decode_message_set(encode_batch([(TS, None, b"v", ())]))


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_every_truncation_raises_decode_error(magic: int, codec: Compression) -> None:
    data = encode_message_set(MESSAGES[:5], magic=magic, compression=codec)
    last = [v for _, v in iter_batches(data)][-1]
    start = len(data) - len(last)
    for cut in range(start, len(data)):
        with pytest.raises(DecodeError):
            decode_legacy_entry(data[start:cut])
        assert len(list(decode_records(data[:cut]))) == (0 if codec else 4)


@pytest.mark.parametrize("magic", [0, 1])
@pytest.mark.parametrize("codec", LEGACY_CODECS, ids=lambda c: c.name)
def test_flipped_bytes_raise_only_decode_error(magic: int, codec: Compression) -> None:
    data = encode_message_set(MESSAGES[:5], magic=magic, compression=codec)
    for pos in range(len(data)):
        for mask in (0x01, 0x80, 0xFF):
            damaged = bytearray(data)
            damaged[pos] ^= mask
            for verify in (True, False):
                try:
                    list(decode_records(bytes(damaged), verify=verify))
                except DecodeError:
                    pass
            try:
                assign_legacy_offsets(bytes(damaged), 0)
            except DecodeError:
                pass


@settings(max_examples=200, deadline=None)
@given(
    magic=st.sampled_from([0, 1]),
    attributes=st.integers(0, 3),
    body=st.binary(max_size=60),
)
def test_random_message_bodies_raise_only_decode_error(
    magic: int, attributes: int, body: bytes
) -> None:
    data = message(0, magic, attributes, TS, b"", body)
    try:
        decode_legacy_entry(data)
    except DecodeError:
        pass
