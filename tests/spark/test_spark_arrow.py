"""A chunk of records as the Arrow batch Spark is handed (no Spark session)."""

from __future__ import annotations

import datetime

from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.types import StructType

from trafka.sdk.fetcher import ConsumerRecord, TopicPartition
from trafka.spark._kafka import _chunk
from trafka.spark.source import _HEADERS, SCHEMA, _batch

UTC = datetime.UTC


def test_columns_types_and_missing_timestamps() -> None:
    records = [
        ConsumerRecord("t", 3, 10, 1_700_000_000_123, b"k", b"v", (("h", b"1"),), 0, 0),
        ConsumerRecord("t", 3, 12, -1, None, b"", (), -1, 0),  # a magic 0 message
        ConsumerRecord("t", 3, 13, 5, b"", None, (("n", None),), 1, 0),
    ]
    schema = to_arrow_schema(StructType([*SCHEMA.fields, _HEADERS]), timezone="UTC")
    batch = _batch(_chunk(TopicPartition("t", 3), records, True), schema)
    assert batch.schema == schema
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
        "headers": [[{"key": "h", "value": b"1"}], [], [{"key": "n", "value": None}]],
    }
    plain = to_arrow_schema(SCHEMA, timezone="UTC")
    assert _batch(_chunk(TopicPartition("t", 3), records[:1], False), plain).num_columns == 7
