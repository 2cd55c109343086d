"""Kafka's primitive types, arrays, nullable structs and tagged fields.

Every decoding case runs through both of the codec's paths, the interpreted
one (construct walking the declarations) and the compiled one (the source the
schema emits); they must return the same value and consume the same bytes, or
both raise :class:`DecodeError`. The probe is a one-field schema, so that the
compiled path generates its real per-field code (runs of fixed-width fields,
the fixed-width array fast path, the inline tagged-field section).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from io import BytesIO
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trafka.codec import DecodeError, EncodeError
from trafka.codec import primitives as p


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Probe:
    value: Any = None
    other: Any = None
    extra: int = 0
    unknown_tagged_fields: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)


EXTRA = p.TaggedField(1, "extra", p.Int32, 0)


def probe(con: Any, *, flexible: bool = False, tagged: bool = False, pair: bool = False) -> Any:
    fields = [("value", con)] + ([("other", con)] if pair else [])
    return p.Schema("Probe v0", Probe, fields, tagged=[EXTRA] if tagged else [], flexible=flexible)


def decode(con: Any, data: bytes, **kw: Any) -> Any:
    """``value`` decoded by both paths; DecodeError if both refuse.

    Asserts that the paths agree on the value and on the bytes consumed.
    """
    schema = probe(con, **kw)
    outcomes: list[Any] = []
    for path in (schema, schema.compile()):
        io = BytesIO(data)
        try:
            obj = path.parse_stream(io)
        except DecodeError as exc:
            outcomes.append(exc)
        else:
            outcomes.append((obj, io.tell()))
    interpreted, compiled = outcomes
    if isinstance(interpreted, DecodeError) or isinstance(compiled, DecodeError):
        assert isinstance(interpreted, DecodeError), f"only compiled refused: {compiled}"
        assert isinstance(compiled, DecodeError), f"only interpreted refused: {interpreted}"
        raise interpreted
    assert interpreted == compiled
    obj, used = interpreted
    assert used == len(data), "trailing bytes left unread"
    return obj if kw.get("tagged") or kw.get("pair") else obj.value


def encode(con: Any, value: Any = None, **kw: Any) -> bytes:
    """``value`` (or a whole Probe) encoded by both paths, which must agree."""
    schema = probe(con, **{k: v for k, v in kw.items() if k != "obj"})
    obj = kw.get("obj") or Probe(value=value)
    outcomes: list[Any] = []
    for path in (schema, schema.compile()):
        try:
            outcomes.append(path.build(obj))
        except EncodeError as exc:
            outcomes.append(exc)
    interpreted, compiled = outcomes
    if isinstance(interpreted, EncodeError) or isinstance(compiled, EncodeError):
        assert isinstance(interpreted, EncodeError), f"only compiled refused: {compiled}"
        assert isinstance(compiled, EncodeError), f"only interpreted refused: {interpreted}"
        raise interpreted
    assert interpreted == compiled
    return interpreted  # type: ignore[no-any-return]


def refused(con: Any, data: bytes, match: str | None = None, **kw: Any) -> DecodeError:
    with pytest.raises(DecodeError, match=match) as info:
        decode(con, data, **kw)
    return info.value


# -- varints ------------------------------------------------------------------------------

UVARINTS = [
    (0, "00"),
    (1, "01"),
    (127, "7f"),
    (128, "8001"),
    (300, "ac02"),
    (16383, "ff7f"),
    (16384, "808001"),
    (2**21 - 1, "ffff7f"),
    (2**28 - 1, "ffffff7f"),
    (2**28, "8080808001"),
    (2**32 - 1, "ffffffff0f"),
]
VARINTS = [
    (0, "00"),
    (-1, "01"),
    (1, "02"),
    (-2, "03"),
    (63, "7e"),
    (-64, "7f"),
    (64, "8001"),
    (2**31 - 1, "feffffff0f"),
    (-(2**31), "ffffffff0f"),
]
VARLONGS = [
    (0, "00"),
    (-1, "01"),
    (2**31, "8080808010"),
    (2**63 - 1, "feffffffffffffffff01"),
    (-(2**63), "ffffffffffffffffff01"),
]


@pytest.mark.parametrize(
    ("con", "value", "hexed"),
    [(p.UVarInt, v, h) for v, h in UVARINTS]
    + [(p.VarInt, v, h) for v, h in VARINTS]
    + [(p.VarLong, v, h) for v, h in VARLONGS],
)
def test_varint_boundaries(con: Any, value: int, hexed: str) -> None:
    assert encode(con, value) == bytes.fromhex(hexed)
    assert decode(con, bytes.fromhex(hexed)) == value


@pytest.mark.parametrize(
    ("con", "hexed", "match"),
    [
        (p.UVarInt, "", "truncated"),
        (p.UVarInt, "80", "truncated"),
        (p.UVarInt, "ffffffff", "truncated"),
        (p.UVarInt, "808080808001", "longer than 5 bytes"),
        (p.UVarInt, "ffffffff1f", "32 bits"),  # 35 bits of payload
        (p.VarInt, "8080808080", "longer than 5 bytes"),
        (p.VarInt, "ffffffff1f", "32 bits"),
        (p.VarLong, "ffffffffffffffffff", "truncated"),
        (p.VarLong, "8080808080808080808001", "longer than 10 bytes"),
        (p.VarLong, "ffffffffffffffffff7f", "64 bits"),  # 70 bits of payload
    ],
)
def test_bad_varints_are_refused(con: Any, hexed: str, match: str) -> None:
    refused(con, bytes.fromhex(hexed), match)


@pytest.mark.parametrize(
    ("con", "hexed", "value"),
    [(p.UVarInt, "8000", 0), (p.UVarInt, "ff80808000", 127), (p.VarInt, "8100", -1)],
)
def test_non_minimal_varints_are_accepted(con: Any, hexed: str, value: int) -> None:
    """Kafka's Java readers accept padded varints (they only bound the length); so do we."""
    assert decode(con, bytes.fromhex(hexed)) == value


@pytest.mark.parametrize(
    ("con", "value"),
    [
        (p.UVarInt, -1),
        (p.UVarInt, 2**32),
        (p.UVarInt, True),
        (p.VarInt, 2**31),
        (p.VarInt, -(2**31) - 1),
        (p.VarInt, 1.0),
        (p.VarLong, 2**63),
        (p.VarLong, "1"),
    ],
)
def test_out_of_range_varints_are_encode_errors(con: Any, value: Any) -> None:
    with pytest.raises(EncodeError):
        encode(con, value)


@settings(max_examples=200, deadline=None)
@given(st.integers(-(2**63), 2**63 - 1))
def test_varlong_zigzag_roundtrip(value: int) -> None:
    data = encode(p.VarLong, value)
    assert decode(p.VarLong, data) == value
    # Zig-zag: small magnitudes, of either sign, take few bytes.
    zigzag = 2 * value if value >= 0 else -2 * value - 1
    assert len(data) == max(1, -(-zigzag.bit_length() // 7))


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_uvarint_roundtrip(value: int) -> None:
    assert decode(p.UVarInt, encode(p.UVarInt, value)) == value


# -- fixed-width ----------------------------------------------------------------------------

FIXED = [
    (p.Int8, -(2**7), 2**7 - 1, 1),
    (p.Int16, -(2**15), 2**15 - 1, 2),
    (p.Int32, -(2**31), 2**31 - 1, 4),
    (p.Int64, -(2**63), 2**63 - 1, 8),
    (p.UInt16, 0, 2**16 - 1, 2),
    (p.UInt32, 0, 2**32 - 1, 4),
]


@pytest.mark.parametrize(("con", "lo", "hi", "size"), FIXED, ids=[c.kafka_type for c, *_ in FIXED])
def test_fixed_width_integers(con: Any, lo: int, hi: int, size: int) -> None:
    for value in (lo, hi, 0):
        data = encode(con, value)
        assert len(data) == size
        assert data == value.to_bytes(size, "big", signed=lo < 0)
        assert decode(con, data) == value
    for bad in (lo - 1, hi + 1, "3", None):
        with pytest.raises(EncodeError):
            encode(con, bad)
    refused(con, b"\x01" * (size - 1), "truncated")
    # Two in a row: the compiled path reads such runs with one struct call.
    assert decode(con, data * 2, pair=True) == Probe(value=0, other=0)
    with pytest.raises(DecodeError) as info:
        decode(con, data + data[:-1], pair=True)
    assert info.value.field == "other"


def test_bool_reads_any_non_zero_byte_as_true() -> None:
    assert encode(p.Boolean, True) == b"\x01"
    assert encode(p.Boolean, False) == b"\x00"
    assert decode(p.Boolean, b"\x02") is True
    assert decode(p.Boolean, b"\x02\x00", pair=True) == Probe(value=True, other=False)
    with pytest.raises(EncodeError):
        encode(p.Boolean, 1)
    with pytest.raises(EncodeError):
        encode(p.Boolean, True, pair=True, obj=Probe(value=True, other="yes"))


def test_float64_and_uuid() -> None:
    assert encode(p.Float64, 1.5) == struct.pack(">d", 1.5)
    assert decode(p.Float64, struct.pack(">d", -0.25)) == -0.25
    u = uuid.UUID("01234567-89ab-cdef-0123-456789abcdef")
    assert encode(p.Uuid, u) == u.bytes
    assert decode(p.Uuid, u.bytes) == u
    refused(p.Uuid, u.bytes[:15], "truncated")
    with pytest.raises(EncodeError):
        encode(p.Uuid, str(u))


# -- strings and bytes ----------------------------------------------------------------------


def test_classic_strings() -> None:
    assert encode(p.String, "") == b"\x00\x00"
    assert encode(p.String, "\u00e9") == b"\x00\x02\xc3\xa9"
    assert decode(p.String, b"\x00\x02\xc3\xa9") == "\u00e9"
    assert encode(p.NullableString, None) == b"\xff\xff"
    assert decode(p.NullableString, b"\xff\xff") is None
    assert decode(p.NullableString, b"\x00\x00") == ""
    refused(p.String, b"\xff\xff", "null for a non-nullable")
    refused(p.NullableString, b"\xff\xfe", "invalid length -2")
    refused(p.String, b"\x00\x05abc", "truncated")
    refused(p.String, b"\x00", "truncated")
    with pytest.raises(EncodeError, match="null"):
        encode(p.String, None)
    assert len(encode(p.String, "x" * 0x7FFF)) == 2 + 0x7FFF
    with pytest.raises(EncodeError, match="exceeds"):
        encode(p.String, "x" * 0x8000)


def test_compact_strings() -> None:
    assert encode(p.CompactString, "") == b"\x01"
    assert encode(p.CompactString, "ab") == b"\x03ab"
    assert encode(p.CompactNullableString, None) == b"\x00"
    assert decode(p.CompactNullableString, b"\x00") is None
    assert decode(p.CompactString, b"\x01") == ""
    refused(p.CompactString, b"\x00", "null for a non-nullable")
    refused(p.CompactString, b"\x05ab", "truncated")
    refused(p.CompactString, b"\xff\xff\xff\xff\x0fab", "exceeds 32767")
    long = "y" * 200  # a two-byte length
    assert encode(p.CompactString, long)[:2] == bytes.fromhex("c901")
    assert decode(p.CompactString, bytes.fromhex("c901") + long.encode()) == long
    with pytest.raises(EncodeError, match="exceeds"):
        encode(p.CompactString, "x" * 0x8000)


def test_compact_string_decoder_refuses_what_the_encoder_cannot_write() -> None:
    n = 0x8000
    data = encode(p.UVarInt, n + 1) + b"z" * n
    refused(p.CompactString, data)


@pytest.mark.parametrize(
    ("con", "data"),
    [
        (p.String, b"\x00\x01\xff"),
        (p.NullableString, b"\x00\x02\xc3\x28"),
        (p.CompactString, b"\x02\xff"),
        (p.CompactNullableString, b"\x04\xed\xa0\x80"),  # an encoded surrogate
    ],
)
def test_invalid_utf8_is_refused(con: Any, data: bytes) -> None:
    error = refused(con, data, "invalid UTF-8")
    assert error.field == "value"


def test_unencodable_text_is_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode(p.String, "\ud800")
    with pytest.raises(EncodeError):
        encode(p.CompactString, b"bytes")


def test_bytes() -> None:
    assert encode(p.Bytes, b"") == b"\x00\x00\x00\x00"
    assert encode(p.Bytes, b"ab") == b"\x00\x00\x00\x02ab"
    assert encode(p.Bytes, bytearray(b"ab")) == b"\x00\x00\x00\x02ab"
    assert encode(p.NullableBytes, None) == b"\xff\xff\xff\xff"
    assert encode(p.CompactBytes, b"ab") == b"\x03ab"
    assert encode(p.CompactNullableBytes, None) == b"\x00"
    assert decode(p.Bytes, b"\x00\x00\x00\x02ab") == b"ab"
    assert decode(p.NullableBytes, b"\xff\xff\xff\xff") is None
    assert decode(p.CompactNullableBytes, b"\x00") is None
    assert decode(p.Records, b"\xff\xff\xff\xff") is None
    assert decode(p.CompactRecords, b"\x03ab") == b"ab"
    refused(p.Bytes, b"\xff\xff\xff\xff", "null for a non-nullable")
    refused(p.NullableBytes, b"\xff\xff\xff\xfe", "invalid length")
    refused(p.CompactBytes, b"\x00", "null")
    refused(p.Bytes, b"\x7f\xff\xff\xffab", "truncated")
    refused(p.CompactBytes, b"\xff\xff\xff\xff\x0fab", "truncated")
    with pytest.raises(EncodeError):
        encode(p.Bytes, "text")
    with pytest.raises(EncodeError):
        encode(p.CompactBytes, None)


# -- arrays --------------------------------------------------------------------------------

ARRAYS = [
    pytest.param(p.Int32, id="fixed"),  # the compiled fixed-width fast path
    pytest.param(p.String, id="string"),
]


@pytest.mark.parametrize("elem", ARRAYS)
def test_array_counts(elem: Any) -> None:
    classic = p.Array(elem)
    compact = p.Array(elem, compact=True)
    nullable = p.Array(elem, nullable=True)
    compact_nullable = p.Array(elem, compact=True, nullable=True)
    one = encode(elem, 0 if elem is p.Int32 else "a")

    assert encode(classic, []) == b"\x00\x00\x00\x00"
    assert encode(compact, []) == b"\x01"
    assert encode(nullable, None) == b"\xff\xff\xff\xff"
    assert encode(compact_nullable, None) == b"\x00"
    for con in (classic, compact):
        with pytest.raises(EncodeError):
            encode(con, None)
    with pytest.raises(EncodeError):
        encode(classic, 5)

    assert decode(classic, b"\x00\x00\x00\x02" + one * 2) == [decode(elem, one)] * 2
    assert decode(compact, b"\x03" + one * 2) == [decode(elem, one)] * 2
    assert decode(nullable, b"\xff\xff\xff\xff") is None
    assert decode(compact_nullable, b"\x00") is None
    refused(classic, b"\xff\xff\xff\xff", "null for a non-nullable")
    refused(compact, b"\x00", "null for a non-nullable")
    refused(nullable, b"\xff\xff\xff\xfe", "invalid length -2")
    refused(classic, b"\x80\x00\x00\x00", "invalid length")


@pytest.mark.parametrize("elem", ARRAYS)
@pytest.mark.parametrize("count", [3, 65, 1000, 2**31 - 1])
def test_array_count_larger_than_the_bytes_left(elem: Any, count: int) -> None:
    one = encode(elem, 0 if elem is p.Int32 else "a")
    error = refused(p.Array(elem), struct.pack(">i", count) + one * 2)
    assert error.field is not None and error.field.startswith("value")
    compact_count = encode(p.UVarInt, min(count + 1, 2**32 - 1))
    refused(p.Array(elem, compact=True), compact_count + one * 2)


def test_big_lying_count_is_refused_before_reading_elements() -> None:
    error = refused(p.Array(p.String), struct.pack(">i", 100_000) + b"\x00\x00" * 10)
    assert "exceeds" in error.detail
    assert error.field == "value"


def test_array_element_errors_name_the_index() -> None:
    data = b"\x00\x00\x00\x02" + b"\x00\x01a" + b"\x00\x02\xff\xfe"
    error = refused(p.Array(p.String), data, "invalid UTF-8")
    assert error.field == "value[1]"
    with pytest.raises(EncodeError) as info:
        encode(p.Array(p.Int16), [1, 2, 70000])
    assert info.value.field == "value[2]"


# -- nullable structs -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class Inner:
    n: int = 0


INNER = p.Schema("Inner", Inner, [("n", p.Int16)])


def test_nullable_struct_marker() -> None:
    con = p.NullableStruct(INNER)
    assert encode(con, None) == b"\xff"
    assert encode(con, Inner(n=3)) == b"\x01\x00\x03"
    assert decode(con, b"\xff") is None
    assert decode(con, b"\x01\x00\x03") == Inner(n=3)
    # Java reads any non-negative marker as "present".
    assert decode(con, b"\x00\x00\x03") == Inner(n=3)
    refused(con, b"", "truncated")
    refused(con, b"\x01\x00", "truncated")
    with pytest.raises(EncodeError, match="expected Inner"):
        encode(con, Probe())


# -- tagged fields ---------------------------------------------------------------------------


def test_flexible_struct_without_tags_is_one_zero_byte() -> None:
    assert encode(p.Int8, obj=Probe(value=5), flexible=True) == b"\x05\x00"
    assert decode(p.Int8, b"\x05\x00", flexible=True) == 5
    refused(p.Int8, b"\x05", "truncated", flexible=True)


def test_known_and_unknown_tags_are_written_in_tag_order() -> None:
    obj = Probe(value=5, extra=7, unknown_tagged_fields=[(5, b"x"), (0, b"")])
    data = encode(p.Int8, obj=obj, flexible=True, tagged=True)
    assert data == bytes.fromhex("050300000104000000070501") + b"x"
    back = decode(p.Int8, data, flexible=True, tagged=True)
    assert back == Probe(value=5, extra=7, unknown_tagged_fields=[(0, b""), (5, b"x")])


def test_default_tagged_value_is_not_written() -> None:
    obj = Probe(value=5, extra=0)
    assert encode(p.Int8, obj=obj, flexible=True, tagged=True) == b"\x05\x00"


@settings(max_examples=100, deadline=None)
@given(
    unknown=st.lists(
        st.tuples(st.integers(0, 2**32 - 1).filter(lambda t: t != 1), st.binary(max_size=300)),
        max_size=4,
        unique_by=lambda t: t[0],
    ),
    extra=st.integers(-(2**31), 2**31 - 1),
)
def test_unknown_tags_survive_a_round_trip(unknown: list[tuple[int, bytes]], extra: int) -> None:
    obj = Probe(value=1, extra=extra, unknown_tagged_fields=sorted(unknown))
    data = encode(p.Int8, obj=obj, flexible=True, tagged=True)
    assert decode(p.Int8, data, flexible=True, tagged=True) == obj


@pytest.mark.parametrize(
    ("tags", "match"),
    [
        ("0101050000000700", "trailing"),  # the int32 tag carries 5 bytes
        ("010103000007", "truncated"),  # ... or 3
    ],
)
def test_known_tag_with_wrong_size_is_refused(tags: str, match: str) -> None:
    error = refused(p.Int8, bytes.fromhex("05" + tags), match, flexible=True, tagged=True)
    assert error.field == "extra"


@pytest.mark.parametrize(
    "tags",
    [
        "020500",  # two tags announced, one present
        "010509ab",  # size larger than the bytes left
        "01ffffffffff00",  # tag is a 6-byte varint
        "0105ffffffff0f",  # size of 4 GiB
        "ffffffff0f",  # tag count of 4 billion
    ],
)
def test_bad_tag_sections_are_refused(tags: str) -> None:
    error = refused(p.Int8, bytes.fromhex("05" + tags), flexible=True, tagged=True)
    assert error.field == "_tagged_fields"


def test_a_tag_given_twice_is_an_encode_error() -> None:
    with pytest.raises(EncodeError, match="twice"):
        encode(
            p.Int8,
            obj=Probe(value=1, extra=7, unknown_tagged_fields=[(1, b"\x00\x00\x00\x07")]),
            flexible=True,
            tagged=True,
        )
    with pytest.raises(EncodeError, match="twice"):
        encode(
            p.Int8,
            obj=Probe(value=1, unknown_tagged_fields=[(4, b""), (4, b"")]),
            flexible=True,
            tagged=True,
        )


def test_errors_inside_a_schema_name_it() -> None:
    schema = p.Schema("Probe v3", Probe, [("value", p.Array(p.NullableStruct(INNER)))])
    for path in (schema, schema.compile()):
        with pytest.raises(DecodeError) as info:
            path.parse(b"\x00\x00\x00\x02" + b"\xff" + b"\x01\x00")
        assert info.value.field == "value[1].n"
        with pytest.raises(EncodeError) as enc:
            path.build(Probe(value=[Inner(n=1 << 20)]))
        assert enc.value.field == "value[0].n"
        with pytest.raises(EncodeError, match="expected Probe"):
            path.build(Inner())


def test_negative_tag_is_an_encode_error() -> None:
    with pytest.raises(EncodeError):
        encode(p.Int8, obj=Probe(value=1, unknown_tagged_fields=[(-1, b"")]), flexible=True)


@pytest.mark.parametrize("tag", [2**32, 2**35])
def test_tag_beyond_32_bits_is_an_encode_error(tag: int) -> None:
    with pytest.raises(EncodeError):
        encode(p.Int8, obj=Probe(value=1, unknown_tagged_fields=[(tag, b"")]), flexible=True)
