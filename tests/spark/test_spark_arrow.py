"""Records as the Arrow batches Spark is handed (no Spark session): the column
buffers the codec decodes, wrapped by the data source."""

from __future__ import annotations

import datetime

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from trafka.codec import _accel
from trafka.codec import records as codec_records
from trafka.codec.columns import (
    ColumnBuffers,
    RecordColumns,
    decode_batch_columns,
    decode_batch_run_columns,
)
from trafka.codec.compression import Compression
from trafka.codec.legacy import encode_message_set
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k03_metadata as md
from trafka.codec.records import (
    DecodeError,
    encode_batch,
    encode_control_batch,
    set_base_offset,
)
from trafka.sdk.fetcher import ConsumerRecord, Fetcher, TopicPartition
from trafka.sdk.metadata import MetadataCache
from trafka.spark._kafka import _packed
from trafka.spark.source import _HEADERS, SCHEMA, _batch

UTC = datetime.UTC
EPOCH = datetime.datetime(1970, 1, 1, tzinfo=UTC)
WITH_HEADERS = to_arrow_schema(StructType([*SCHEMA.fields, _HEADERS]), timezone="UTC")
PLAIN = to_arrow_schema(SCHEMA, timezone="UTC")


def test_columns_types_and_missing_timestamps() -> None:
    records = [
        ConsumerRecord("t", 3, 10, 1_700_000_000_123, b"k", b"v", (("h", b"1"),), 0, 0),
        ConsumerRecord("t", 3, 12, -1, None, b"", (), -1, 0),  # a magic 0 message
        ConsumerRecord("t", 3, 13, 5, b"", None, (("n", None), ("\u00e9", b"")), 1, 0),
    ]
    batch = _batch(_packed(records, True), "t", 3, WITH_HEADERS)
    batch.validate(full=True)
    assert batch.schema == WITH_HEADERS
    assert batch.to_pydict() == {
        "key": [b"k", None, b""],
        "value": [b"v", b"", None],
        "topic": ["t"] * 3,
        "partition": [3] * 3,
        "offset": [10, 12, 13],
        "timestamp": [
            datetime.datetime(2023, 11, 14, 22, 13, 20, 123000, tzinfo=UTC),
            None,
            datetime.datetime(1970, 1, 1, 0, 0, 0, 5000, tzinfo=UTC),
        ],
        "timestampType": [0, -1, 1],
        "headers": [
            [{"key": "h", "value": b"1"}],
            None,  # no headers: null, as Spark's connector has it (not an empty list)
            [{"key": "n", "value": None}, {"key": "\u00e9", "value": b""}],
        ],
    }
    assert _batch(_packed(records[:1], False), "t", 3, PLAIN).num_columns == 7


def _blob() -> tuple[bytes, list[tuple[int, int, bytes | None, bytes | None, tuple]]]:
    """Three batches (one log-append time) of records with nulls, empties and headers."""
    blob = b""
    expected = []
    offset = 0
    for b, ts_type in enumerate((0, 1, 0)):
        records = [
            (
                1_000 + i,
                None if i % 3 == 0 else b"k%d" % i,
                None if i % 5 == 0 else b"v" * i,
                tuple((f"h{j}", None if j % 2 else b"x%d" % j) for j in range(i % 3)),
            )
            for i in range(7 + b)
        ]
        batch = encode_batch(records, base_offset=offset, timestamp_type=ts_type)
        blob += batch
        for i, (ts, key, value, headers) in enumerate(records):
            stamp = codec_records.read_batch_header(batch).max_timestamp if ts_type else ts
            expected.append((offset + i, stamp, key, value, headers, ts_type))
        offset += len(records)
    return blob, expected


def _rows(batch, topic: str = "t", partition: int = 1) -> list[tuple]:
    out = []
    for row in batch.to_pylist():
        ts = row["timestamp"]
        ms = None if ts is None else (ts - EPOCH) // datetime.timedelta(milliseconds=1)
        headers = tuple((h["key"], h["value"]) for h in row["headers"] or ())
        assert row["headers"] is None or headers, "a record without headers has null"
        assert (row["topic"], row["partition"]) == (topic, partition)
        out.append((row["offset"], ms, row["key"], row["value"], headers, row["timestampType"]))
    return out


@pytest.mark.parametrize("accelerated", [True, False])
def test_decoded_columns_slices_and_joins(
    accelerated: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    blob, expected = _blob()
    if not accelerated:
        monkeypatch.setattr(_accel, "speedups", None)
    elif _accel.speedups is None:
        pytest.skip("the C accelerator is not built")
    run, pos, next_offset = decode_batch_run_columns(blob, 0, min_offset=3, headers=True)
    if accelerated:
        assert (pos, next_offset, len(run)) == (len(blob), len(expected), len(expected) - 3)
    else:
        # Without C the run is empty; the fetcher decodes batch by batch instead.
        assert (pos, next_offset, len(run)) == (0, None, 0)
        parts = []
        for _, view in codec_records.iter_batches(blob):
            parts.append(decode_batch_columns(view, min_offset=3, headers=True)[1])
        run = RecordColumns.join(parts)
    want = expected[3:]
    batch = _batch(run, "t", 1, WITH_HEADERS)
    batch.validate(full=True)
    assert _rows(batch) == want
    # Slices across pieces, joined again, and cut below an offset.
    cut = run[2:9] + run[9:]
    assert cut.offsets() == [r[0] for r in want[2:]]
    assert _rows(_batch(cut, "t", 1, WITH_HEADERS)) == want[2:]
    assert run.below(10).offsets() == list(range(3, 10))
    assert run.last_offset == want[-1][0]
    assert len(run[5:5]) == 0


def test_packed_and_decoded_columns_are_equal() -> None:
    if _accel.speedups is None:
        pytest.skip("the C accelerator is not built")
    blob, expected = _blob()
    run, _, _ = decode_batch_run_columns(blob, 0, headers=True)
    ((fast, _, _),) = list(run.pieces())
    packed = ColumnBuffers.pack([r[:5] for r in expected], [r[5] for r in expected], True)
    assert fast == packed


# -- the C columns against the pure-Python reference, through the fetcher ---------------------

_Row = tuple[int, bytes | None, bytes | None, tuple[tuple[str, bytes | None], ...]]

_bytes_or_null = st.none() | st.just(b"") | st.binary(min_size=1, max_size=12)
# Kafka's "no timestamp" (-1), other negatives (null too), and real ones.
_stamps = st.sampled_from([-1, -7, 0]) | st.integers(0, 2**44)
_row_lists = st.lists(
    st.tuples(
        _stamps,
        _bytes_or_null,
        _bytes_or_null,
        st.lists(st.tuples(st.text(max_size=3), _bytes_or_null), max_size=2).map(tuple),
    ),
    min_size=1,
    max_size=6,
)
# (kind, records, compression or fate): a committed or aborted transaction's
# batch is followed by its marker, an aborted one is listed as the broker lists it.
_ENTRY_KINDS = ["plain", "log-append", "compressed", "txn", "legacy0", "legacy1"]


def _fetch_blob(
    entries: list[tuple[str, list[_Row], int]],
) -> tuple[bytes, list[fetch.FetchResponse.AbortedTransaction]]:
    parts, aborted = [], []
    offset = 0
    for i, (kind, rows, pick) in enumerate(entries):
        compression = [Compression.NONE, Compression.GZIP, Compression.LZ4][pick % 3]
        if kind.startswith("legacy"):
            # Legacy messages carry no headers (and magic 0 no timestamp).
            legacy = [(ts, k, v, ()) for ts, k, v, _ in rows]
            magic = int(kind[-1])
            parts.append(
                encode_message_set(legacy, magic=magic, compression=compression, base_offset=offset)
            )
            offset += len(rows)
            continue
        pid = 100 + i
        raw = encode_batch(
            rows,  # type: ignore[arg-type]
            compression=compression if kind != "plain" else Compression.NONE,
            timestamp_type=int(kind == "log-append"),
            producer_id=pid if kind == "txn" else -1,
            producer_epoch=0 if kind == "txn" else -1,
            base_sequence=0 if kind == "txn" else -1,
            is_transactional=kind == "txn",
        )
        parts.append(bytes(set_base_offset(raw, offset)))
        if kind == "txn":
            commit = pick % 2 == 0
            if not commit:
                aborted.append(
                    fetch.FetchResponse.AbortedTransaction(first_offset=offset, producer_id=pid)
                )
            offset += len(rows)
            marker = encode_control_batch(
                int(commit), producer_id=pid, producer_epoch=0, coordinator_epoch=0, timestamp=1
            )
            parts.append(bytes(set_base_offset(marker, offset)))
            offset += 1
        else:
            offset += len(rows)
    return b"".join(parts), aborted


def _fetched(
    blob: bytes,
    aborted: list[fetch.FetchResponse.AbortedTransaction],
    read_committed: bool,
    position: int,
    columns: bool | None = None,
) -> Fetcher:
    M = md.MetadataResponse
    cache = MetadataCache()
    cache.update(
        M(
            brokers=[M.MetadataResponseBroker(node_id=1, host="h", port=1)],
            topics=[
                M.MetadataResponseTopic(
                    name="t",
                    partitions=[M.MetadataResponsePartition(partition_index=0, leader_id=1)],
                )
            ],
        ),
        now=0.0,
    )
    f = Fetcher(cache, read_committed=read_committed)
    f.columns = columns
    tp = TopicPartition("t", 0)
    f.assign([tp])
    f.seek(tp, position)
    _, positions = f.build_fetch([tp], 12)
    R = fetch.FetchResponse
    answer = R(
        responses=[
            R.FetchableTopicResponse(
                topic="t",
                partitions=[
                    R.PartitionData(
                        partition_index=0,
                        high_watermark=10_000,
                        last_stable_offset=10_000,
                        records=blob,
                        aborted_transactions=aborted,
                    )
                ],
            )
        ]
    )
    assert f.handle_fetch_response(positions, answer)
    return f


def _arrow_of_records(records: list[ConsumerRecord], schema: pa.Schema) -> pa.RecordBatch:
    """The records the tuple path decoded, as Spark's row values, converted by
    pyarrow from Python lists: a reference independent of the column buffers."""
    columns = {
        "key": [r.key for r in records],
        "value": [r.value for r in records],
        "topic": [r.topic for r in records],
        "partition": [r.partition for r in records],
        "offset": [r.offset for r in records],
        "timestamp": [
            EPOCH + datetime.timedelta(milliseconds=r.timestamp) if r.timestamp >= 0 else None
            for r in records
        ],
        "timestampType": [r.timestamp_type for r in records],
        "headers": [[{"key": k, "value": v} for k, v in r.headers] or None for r in records],
    }
    return pa.RecordBatch.from_pydict({f.name: columns[f.name] for f in schema}, schema=schema)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(
        st.tuples(st.sampled_from(_ENTRY_KINDS), _row_lists, st.integers(0, 5)),
        min_size=1,
        max_size=6,
    ),
    read_committed=st.booleans(),
    headers=st.booleans(),
    position=st.integers(0, 4),
    chunk=st.integers(1, 9),
)
def test_c_and_python_columns_make_equal_record_batches(
    entries: list[tuple[str, list[_Row], int]],
    read_committed: bool,
    headers: bool,
    position: int,
    chunk: int,
) -> None:
    """What Spark is handed is the same whether the C accelerator decoded the
    fetch into column buffers or the pure-Python path packed them, chunk for
    chunk, and equals the records of the tuple path converted by pyarrow:
    nulls, empty values, negative timestamps (null), compressed batches,
    legacy message sets, and under ``read_committed`` the control records and
    aborted transactions left out (KIP-98)."""
    if _accel.speedups is None:
        pytest.skip("the C accelerator is not built")
    blob, aborted = _fetch_blob(entries)
    schema = WITH_HEADERS if headers else PLAIN
    tp = TopicPartition("t", 0)

    def batches(fast: bool) -> list[pa.RecordBatch]:
        saved = _accel.speedups
        _accel.speedups = saved if fast else None
        try:
            f = _fetched(blob, aborted, read_committed, position, columns=headers)
            out = []
            while f.has_data():
                records = f.take_columns(chunk).get(tp)
                if records:
                    out.append(_batch(records, "t", 0, schema))
            return out
        finally:
            _accel.speedups = saved

    fast, slow = batches(True), batches(False)
    assert [b.num_rows for b in fast] == [b.num_rows for b in slow]
    for got, want in zip(fast, slow, strict=True):
        got.validate(full=True)
        assert got.schema == schema
        assert got.equals(want)
    f = _fetched(blob, aborted, read_committed, position)
    records = []
    while f.has_data():
        records.extend(f.take(chunk).get(tp, ()))
    reference = _arrow_of_records(records, schema)
    assert (
        pa.Table.from_batches(fast, schema)
        .combine_chunks()
        .equals(pa.Table.from_batches([reference], schema).combine_chunks())
    )


def test_a_timestamp_beyond_microseconds_is_a_clear_error() -> None:
    """Spark's TimestampType holds int64 microseconds; a Kafka timestamp past
    that (ms above 2**63 // 1000) has no value there, so both paths refuse the
    batch, naming the timestamp, rather than wrap it around (Spark's own
    connector fails on it too)."""
    too_big = (2**63 - 1) // 1000 + 1
    batch = encode_batch([(5, None, b"a", ()), (too_big, None, b"b", ())])
    for speedups in (_accel.speedups, None):
        saved = _accel.speedups
        _accel.speedups = speedups
        try:
            with pytest.raises(DecodeError, match=f"timestamp {too_big} ms"):
                decode_batch_columns(batch)
        finally:
            _accel.speedups = saved
    ok = encode_batch([(too_big - 1, None, b"a", ())])
    ((buffers, _, _),) = decode_batch_columns(ok)[1].pieces()
    assert buffers.timestamps.millis(0) == too_big - 1
