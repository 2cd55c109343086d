"""trafka.codec.batch_split: the C pass that splits a batch by key, against the
reference it stands in for (decode every record, hash its key with the SDK's
``KEY_HASHES``, encode each group again with ``encode_batch``).

Properties: on any batch the C pass accepts, it gives the same partitions in the
same order and byte-identical batches (keys null, empty and long, headers,
timestamps far apart, producer fields, the transactional and log-append bits,
every codec); wherever the reference raises, the C pass declines (None), and it
never raises itself; with the accelerator off it always declines.
"""

from __future__ import annotations

import random
import struct
from collections.abc import Iterator
from typing import Any

import cramjam
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_records import batch_options, raw_record, record_lists, wrap, zz

from trafka.codec import _accel, batch_split, records
from trafka.codec.compression import Compression
from trafka.codec.crc import crc32c
from trafka.codec.errors import CodecError
from trafka.codec.records import (
    decode_batch,
    encode_batch,
    read_batch_header,
    set_partition_leader_epoch,
)
from trafka.sdk.partitioners import KEY_HASHES

try:
    from trafka.codec import _speedups as C  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - test_speedups.py reports a failed build
    C = None

pytestmark = pytest.mark.skipif(
    C is None or _accel.speedups is None, reason="the C accelerator is not built or is off"
)
SETTINGS = settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
HASH_NAMES = sorted(batch_split.HASH_IDS)


def test_the_c_hashes_are_the_sdks() -> None:
    assert set(batch_split.HASH_IDS) <= set(KEY_HASHES)


def reference(
    batch: bytes, partitions: int, hash_name: str, own: int
) -> list[tuple[int, list[Any]]]:
    """Each target partition's records, in first-seen order (the proxy's reference)."""
    hash_of = KEY_HASHES[hash_name]
    groups: dict[int, list[Any]] = {}
    for r in decode_batch(batch).records:
        target = own if r.key is None else hash_of(r.key, partitions)
        groups.setdefault(target, []).append((r.timestamp, r.key, r.value, r.headers))
    return list(groups.items())


def reference_batch(rows: list[Any], attributes: int, producer_id: int, epoch: int) -> bytes:
    return encode_batch(
        rows,
        compression=Compression(attributes & 0x07),
        timestamp_type=1 if attributes & 0x08 else 0,
        producer_id=producer_id,
        producer_epoch=epoch,
        base_sequence=0 if producer_id >= 0 else -1,
        is_transactional=bool(attributes & 0x10),
    )


def split(batch: bytes, partitions: int, hash_name: str, own: int) -> Any:
    return batch_split.split_batch(
        batch, read_batch_header(batch), partitions=partitions, hash_name=hash_name, own=own
    )


def build(pieces: list[Any], attributes: int, producer_id: int = -1, epoch: int = -1) -> bytes:
    built = batch_split.build_batch(
        pieces, attributes=attributes, producer_id=producer_id, producer_epoch=epoch
    )
    assert built is not None
    return built[0]


codecs = st.sampled_from(list(Compression))
layouts = st.tuples(st.integers(1, 9), st.sampled_from(HASH_NAMES), st.integers(0, 8))


@SETTINGS
@given(record_lists(max_size=12), batch_options, codecs, layouts)
def test_the_c_pass_splits_as_the_reference_does(
    rows: list[Any], options: dict[str, Any], codec: Compression, layout: tuple[int, str, int]
) -> None:
    partitions, hash_name, own = layout
    own %= partitions
    batch = encode_batch(rows, compression=codec, **options)
    header = read_batch_header(batch)
    expected = reference(batch, partitions, hash_name, own)
    found = split(batch, partitions, hash_name, own)
    assert found is not None
    assert [t for t, _ in found] == [t for t, _ in expected]
    for (_, spans), (_, group) in zip(found, expected, strict=True):
        assert len(spans[1]) // batch_split.SPAN_SIZE == len(group)
        for pid, epoch in ((-1, -1), (options["producer_id"], options["producer_epoch"])):
            assert build([spans], header.attributes, pid, epoch) == reference_batch(
                group, header.attributes, pid, epoch
            )


@SETTINGS
@given(record_lists(max_size=8), codecs, st.integers(0, 0x7FFFFFFF))
def test_a_batch_built_at_a_base_sequence_is_the_one_numbered_after(
    rows: list[Any], codec: Compression, sequence: int
) -> None:
    """Built at its base sequence (checksummed once), a batch is byte for byte
    the one built at 0 and numbered after (its checksum computed again)."""
    batch = encode_batch(rows, compression=codec)
    found = split(batch, 1, "murmur2", 0)
    assert found is not None
    spans = [s for _, s in found]
    at = batch_split.build_batch(
        spans, attributes=codec, producer_id=7, producer_epoch=2, base_sequence=sequence
    )
    at_zero = batch_split.build_batch(spans, attributes=codec, producer_id=7, producer_epoch=2)
    assert at is not None and at_zero is not None
    assert at[0] == records.set_base_sequence(at_zero[0], sequence)
    assert read_batch_header(at[0]).base_sequence == sequence
    ((_, group),) = reference(batch, 1, "murmur2", 0)
    assert at[0] == encode_batch(
        group, compression=codec, producer_id=7, producer_epoch=2, base_sequence=sequence
    )


@SETTINGS
@given(record_lists(max_size=6), record_lists(max_size=6), codecs, codecs, layouts)
def test_pieces_of_several_batches_make_one_batch_as_the_reference_does(
    first: list[Any],
    second: list[Any],
    codec: Compression,
    other: Compression,
    layout: tuple[int, str, int],
) -> None:
    partitions, hash_name, own = layout
    own %= partitions
    a = encode_batch(first, compression=codec, is_transactional=True)
    b = encode_batch(second, compression=other, timestamp_type=1)
    pieces, rows = [], []
    for batch in (a, b):
        found = split(batch, partitions, hash_name, own)
        assert found is not None
        pieces += [spans for _, spans in found]
        rows += [row for _, group in reference(batch, partitions, hash_name, own) for row in group]
    attributes = read_batch_header(a).attributes
    assert build(pieces, attributes) == reference_batch(rows, attributes, -1, -1)


@st.composite
def jobs(draw: Any) -> list[batch_split.Job]:
    """Jobs of :func:`batch_split.build_batches`: pieces of random batches, each
    job with its own attributes, producer and base sequence."""
    out: list[batch_split.Job] = []
    for _ in range(draw(st.integers(1, 4))):
        pieces = []
        for _ in range(draw(st.integers(1, 3))):
            rows = draw(record_lists(max_size=5))
            batch = encode_batch(rows, compression=draw(codecs))
            found = split(batch, 3, "murmur2", 0)
            assert found is not None
            pieces += [spans for _, spans in found]
        codec = draw(st.sampled_from([Compression.NONE, Compression.LZ4, Compression.LZ4]))
        attributes = codec | draw(st.sampled_from([0, 0x08, 0x10, 0x18]))
        producer = draw(st.sampled_from([(-1, -1), (7, 2), (2**63 - 1, 2**15 - 1)]))
        sequence = draw(st.sampled_from([-1, 0, 0x7FFFFFFF]) | st.integers(0, 0x7FFFFFFF))
        out.append((pieces, attributes, *producer, sequence))
    return out


def built_one_by_one(jobs: list[batch_split.Job]) -> list[tuple[bytes, int] | None]:
    """The reference: :func:`batch_split.build_batch` of each job."""
    return [
        batch_split.build_batch(
            pieces, attributes=attributes, producer_id=pid, producer_epoch=epoch, base_sequence=seq
        )
        for pieces, attributes, pid, epoch, seq in jobs
    ]


@SETTINGS
@given(jobs())
def test_batches_built_in_one_call_are_those_built_one_by_one(found: list[Any]) -> None:
    """build_batches (one C call for every upstream batch of a request) and its
    Python fallback write byte for byte what build_batch writes per batch."""
    expected = built_one_by_one(found)
    assert all(e is not None for e in expected)
    fast = C.build_batches(found, crc32c, batch_split._LZ4_HEADER)
    if fast is None:  # pragma: no cover - only without the system's liblz4
        assert any(job[1] & 0x07 for job in found)
    else:
        assert fast == expected
    assert batch_split.build_batches(found) == expected
    for (data, count), job in zip(expected, found, strict=True):  # type: ignore[misc]
        assert read_batch_header(data).records_count == count
        assert count == sum(len(spans) // batch_split.SPAN_SIZE for _, spans in job[0])


def test_batches_of_several_lz4_blocks_built_in_one_call() -> None:
    """Records past lz4's 64 KiB block, compressible and not (blocks stored)."""
    rng = random.Random(5)
    rows = [(i, b"k%d" % i, rng.randbytes(900) if i % 2 else bytes(900), ()) for i in range(300)]
    found = split(encode_batch(rows, compression=Compression.LZ4), 4, "murmur2", 0)
    assert found is not None
    pieces = [spans for _, spans in found]
    jobs: list[batch_split.Job] = [
        (pieces, 3, 7, 0, 9),
        (pieces[:1], 3, 7, 0, 1),
        (pieces, 0, 7, 0, 2),
    ]
    expected = built_one_by_one(jobs)
    assert len(expected[0][0]) > 2 * 65536  # type: ignore[index]
    assert C.build_batches(jobs, crc32c, batch_split._LZ4_HEADER) == expected
    assert batch_split.build_batches(jobs) == expected


def test_batches_the_c_call_declines_are_built_one_by_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """A codec other than none or lz4 or a field out of its range: the whole call
    is declined and each batch built by build_batch (which raises its errors)."""
    batch = encode_batch([(1, b"k", b"v", ()), (2, b"q", b"w", ())])
    found = split(batch, 1, "murmur2", 0)
    assert found is not None
    pieces = [spans for _, spans in found]
    mixed: list[batch_split.Job] = [(pieces, 3, 7, 0, 5), (pieces, 1, 7, 0, 7)]
    assert C.build_batches(mixed, crc32c, batch_split._LZ4_HEADER) is None
    expected = built_one_by_one(mixed)
    assert batch_split.build_batches(mixed) == expected
    assert read_batch_header(expected[1][0]).base_sequence == 7  # type: ignore[index]
    for field in ((7, 2**15, 0), (2**63, 0, 0), (7, 0, 2**31)):
        assert C.build_batches([(pieces, 0, *field)], crc32c, b"1234567") is None
        with pytest.raises(CodecError):
            batch_split.build_batches([(pieces, 0, *field)])
    with pytest.raises(TypeError):
        C.build_batches([(pieces, 0, 7, 0)], crc32c, b"1234567")
    assert batch_split.build_batches([]) == []
    monkeypatch.setattr(_accel, "speedups", None)
    assert batch_split.build_batches([(pieces, 0, -1, -1, -1)]) == [None]


@st.composite
def mutated(draw: Any) -> bytes:
    """A valid batch with bytes changed, cut or added (its CRC made right again,
    so that the records themselves are judged)."""
    rows = draw(record_lists(max_size=4))
    codec = draw(st.sampled_from([Compression.NONE, Compression.LZ4]))
    batch = bytearray(encode_batch(rows, compression=codec))
    for _ in range(draw(st.integers(1, 3))):
        at = draw(st.integers(61, len(batch) - 1)) if len(batch) > 61 else 61
        kind = draw(st.sampled_from(["set", "cut", "add"]))
        if kind == "set" and at < len(batch):
            batch[at] = draw(st.integers(0, 255))
        elif kind == "cut":
            del batch[at : at + draw(st.integers(1, 4))]
        else:
            batch[at:at] = draw(st.binary(min_size=1, max_size=3))
    if draw(st.booleans()):
        struct.pack_into(">i", batch, 57, draw(st.integers(-1, 8)))  # records_count
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    return with_crc(bytes(batch))


def with_crc(batch: bytes) -> bytes:
    out = bytearray(batch)
    struct.pack_into(">I", out, 17, crc32c(out[21:]))
    return bytes(out)


def test_mutations_keep_their_crc() -> None:
    batch = set_partition_leader_epoch(encode_batch([(1, b"k", b"v", ())]), 0)
    changed = batch[:-1] + b"w"
    assert not records.verify_crc(changed)
    assert records.verify_crc(with_crc(changed))


@SETTINGS
@given(mutated(), layouts)
def test_the_c_pass_declines_whatever_the_reference_refuses(
    batch: bytes, layout: tuple[int, str, int]
) -> None:
    partitions, hash_name, own = layout
    own %= partitions
    try:
        expected = reference(batch, partitions, hash_name, own)
    except CodecError:
        expected = None
    try:
        header = read_batch_header(batch)
    except CodecError:
        return
    found = batch_split.split_batch(
        batch, header, partitions=partitions, hash_name=hash_name, own=own
    )
    if expected is None:
        assert found is None
        return
    assume(found is not None)  # the C pass may decline valid but unusual input
    assert [t for t, _ in found] == [t for t, _ in expected]
    for (_, spans), (_, group) in zip(found, expected, strict=True):
        assert build([spans], header.attributes) == reference_batch(
            group, header.attributes, -1, -1
        )


def test_a_varint_longer_than_it_needs_is_left_to_the_reference() -> None:
    # A key length of 1 written in two bytes: valid, but copying it would not
    # give the bytes the encoder writes.
    record = raw_record(key=b"\x82\x00" + b"k")
    batch = wrap(record, 1)
    assert reference(batch, 3, "murmur2", 0)  # the decoder takes it
    assert split(batch, 3, "murmur2", 0) is None
    assert split(wrap(raw_record(key=zz(1) + b"k"), 1), 3, "murmur2", 0) is not None


def test_a_bad_crc_or_a_payload_too_large_is_left_to_the_reference() -> None:
    batch = bytearray(encode_batch([(1, b"k", b"v" * 1000, ())], compression=Compression.LZ4))
    header = read_batch_header(bytes(batch))
    assert (
        batch_split.split_batch(
            bytes(batch), header, partitions=3, hash_name="murmur2", own=0, max_size=100
        )
        is None
    )
    batch[-1] ^= 1
    assert split(bytes(batch), 3, "murmur2", 0) is None


def test_unknown_hashes_control_batches_and_no_accelerator_are_declined(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    batch = encode_batch([(1, b"k", b"v", ())])
    assert split(batch, 3, "sticky", 0) is None
    control = records.encode_control_batch(
        records.ControlRecordType.COMMIT,
        producer_id=1,
        producer_epoch=0,
        coordinator_epoch=0,
        timestamp=1,
    )
    assert split(control, 3, "murmur2", 0) is None
    assert split(batch, 3, "murmur2", 0) is not None
    monkeypatch.setattr(_accel, "speedups", None)
    assert split(batch, 3, "murmur2", 0) is None
    assert batch_split.build_batch([(b"", b"")], attributes=0) is None


def test_misuse_raises_rather_than_reading_outside_the_data() -> None:
    batch = encode_batch([(1, b"k", b"v", ())])
    found = split(batch, 3, "murmur2", 0)
    assert found is not None
    data, spans = found[0][1]
    with pytest.raises(ValueError, match="beyond"):
        C.build_records([(b"", spans)])
    with pytest.raises(ValueError, match="size"):
        C.build_records([(data, spans[:-1])])
    with pytest.raises(ValueError):
        C.index_records(b"", 0, 0, None, 0, 0, 0)
    # More partitions than the C pass keeps a table for: declined, not raised.
    assert C.index_records(data, 1, 1, None, 1 << 21, 0, 0) is None
    with pytest.raises(TypeError):
        C.build_records([])


def placed_section(batch: bytes, own: int) -> batch_split.Section:
    header = read_batch_header(batch)
    found = batch_split.section(batch, header, own=own, partitions=3)
    assert found is not None
    data, log_append = found
    count = header.records_count
    return (data, count, header.base_timestamp, log_append, own, len(batch), batch, own, header)


def test_a_topic_placed_in_one_call_is_its_batches_split_one_by_one() -> None:
    """place_sections: each batch as split_batch groups it, the pieces of every
    batch by target (the targets in the order first seen, a partition's own
    batches' pieces first), a batch that stays whole one piece of its bytes;
    declined when a split batch's target has no known leader (a batch that
    stays whole needs none), or when the C pass declines a batch."""
    keys = [b"k%d" % i for i in range(40)]
    mixed = encode_batch([(1, k, b"v", ()) for k in keys])
    home = [k for k in keys if KEY_HASHES["murmur2"](k, 3) == 2]
    stays = encode_batch([(1, k, b"w", ()) for k in home])
    batches = [placed_section(mixed, 0), placed_section(stays, 2)]
    got = batch_split.place_sections(batches, partitions=3, hash_name="murmur2", known=b"\1\1\1")
    assert got is not None
    order, slots, per_batch = got
    first = split(mixed, 3, "murmur2", 0)
    assert order == [t for t, _ in first]
    expected: dict[int, tuple[list[Any], list[Any]]] = {t: ([], []) for t in order}
    total = len(keys)
    for t, spans in first:
        n = len(spans[1]) // batch_split.SPAN_SIZE
        piece = (0, len(mixed) * n // total + 64, None, spans, batches[0][8])
        expected[t][0 if t == 0 else 1].append(piece)
    expected[2][0].append(
        (2, len(stays), stays, split(stays, 3, "murmur2", 2)[0][1], batches[1][8])
    )
    assert {t: slots[t] for t in order} == expected
    kept = len(keys) - sum(len(s[1]) // batch_split.SPAN_SIZE for t, s in first if t != 0)
    assert per_batch == [(total - kept, kept, True), (0, len(home), False)]
    # Partition 1's leader unknown: the mixed batch cannot go; the whole one can.
    assert (
        batch_split.place_sections(batches, partitions=3, hash_name="murmur2", known=b"\1\0\1")
        is None
    )
    alone = batch_split.place_sections(
        batches[1:], partitions=3, hash_name="murmur2", known=b"\0\0\0"
    )
    assert alone is not None and alone[0] == [2]
    # A section the C pass declines (not a well-formed record): the whole topic is declined.
    declined = (b"\x00" * 8, 1, 0, None, 0, 8, b"", 0, None)
    assert (
        batch_split.place_sections([declined], partitions=3, hash_name="murmur2", known=b"\1\1\1")
        is None
    )
    with pytest.raises(ValueError):
        C.place_sections([], 3, 0, b"\1")
    with pytest.raises(TypeError):
        C.place_sections([(b"",)], 3, 0, b"\1\1\1")


def section_of(batch: bytes, own: int, lazy: bool) -> batch_split.Section | None:
    """A batch for place_sections, its section read in Python or (``lazy``)
    left to the C call when it is an lz4 batch; None: the batch is declined."""
    header = read_batch_header(batch)
    read = batch_split.lazy_section if lazy else batch_split.section
    found = read(batch, header, own=own, partitions=3, max_size=1 << 20)
    if found is None:
        return None
    data, log_append = found
    count = header.records_count
    return (data, count, header.base_timestamp, log_append, own, len(batch), batch, own, header)


def placed_both_ways(batches: list[bytes], known: bytes) -> Any:
    """place_sections of ``batches`` (partition i % 3 each), their sections read
    in Python first and left to the C call: the same, or both declined."""
    out = []
    for lazy in (False, True):
        sections = [section_of(b, i % 3, lazy) for i, b in enumerate(batches)]
        if None in sections:
            out.append(None)
            continue
        out.append(
            batch_split.place_sections(
                sections,  # type: ignore[arg-type]
                partitions=3,
                hash_name="murmur2",
                known=known,
                max_size=1 << 20,
            )
        )
    assert out[0] == out[1]
    return out[0]


@SETTINGS
@given(st.lists(st.tuples(record_lists(max_size=6), codecs, st.booleans()), min_size=1, max_size=4))
def test_sections_read_in_the_c_call_are_those_read_in_python(batches: list[Any]) -> None:
    """lazy_section: an lz4 batch's section read by place_sections (CRC, frame)
    places its records as the section read in Python does; and a batch whose
    CRC is wrong is declined both ways."""
    made = []
    for rows, codec, damaged in batches:
        batch = encode_batch(rows, compression=codec, timestamp_type=int(damaged))
        if damaged and len(batch) > 62:
            batch = batch[:-1] + bytes((batch[-1] ^ 1,))  # the CRC no longer matches
        made.append(batch)
    placed_both_ways(made, b"\1\1\1")


def test_an_unusual_lz4_frame_is_read_in_python_when_the_c_call_cannot() -> None:
    """A frame the C reader leaves to Python (here with a content checksum):
    read by the Python path, placed the same; a frame over max_size declined."""
    rows = [(i, b"k%d" % i, b"v" * 50, ()) for i in range(30)]
    plain = encode_batch(rows)
    framed = bytes(cramjam.lz4.compress(plain[61:]))
    assert framed[4] & 0x04  # a content checksum: not the common frame
    batch = bytearray(plain[:61] + framed)
    struct.pack_into(">i", batch, 8, len(batch) - 12)
    struct.pack_into(">h", batch, 21, 3)
    unusual = with_crc(bytes(batch))
    assert C.lz4_unframe(framed, 1 << 20) is None
    got = placed_both_ways([unusual, encode_batch(rows, compression=Compression.LZ4)], b"\1\1\1")
    assert got is not None and sum(n for n, _, _ in got[2]) > 0
    big = encode_batch([(1, b"k", bytes(2 << 20), ())], compression=Compression.LZ4)
    assert placed_both_ways([big], b"\1\1\1") is None


@pytest.fixture(autouse=True)
def _speedups_on() -> Iterator[None]:
    assert _accel.speedups is C
    yield
