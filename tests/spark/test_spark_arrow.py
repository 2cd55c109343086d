"""Records as the Arrow batches Spark is handed (no Spark session): the column
buffers the codec decodes, wrapped by the data source."""

from __future__ import annotations

import datetime

import pytest
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
from trafka.codec.records import encode_batch
from trafka.sdk.fetcher import ConsumerRecord
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
            [],
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
        headers = tuple((h["key"], h["value"]) for h in row["headers"])
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
