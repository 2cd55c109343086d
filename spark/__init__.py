"""trafka.spark: a PySpark data source for Kafka topics (batch and streaming, read and write).

Needs pyspark 4.2 or newer (``pip install 'trafka[spark]'``)::

    from trafka.spark import register
    register(spark)
    spark.read.format("trafka").option("kafka.bootstrap.servers", servers) \\
        .option("subscribe", "events").load()

The options and columns are those of Spark's own Kafka connector; see the
Spark page of the documentation.
"""

from __future__ import annotations

from typing import Any

from ._kafka import offsets_behind_latest
from .options import ReadOptions, WriteOptions, parse_read_options, parse_write_options

try:
    from .source import SCHEMA, KafkaDataSource, register
except ImportError as _e:  # pragma: no cover - depends on the environment
    if _e.name is None or not _e.name.startswith(("pyspark", "pyarrow", "py4j")):
        raise
    _missing = _e

    def register(spark: Any, *, parallelism: int | None = None) -> None:
        """Unavailable: pyspark is not installed."""
        raise ImportError(
            "trafka.spark needs pyspark 4.2 or newer: pip install 'trafka[spark]'"
        ) from _missing


__all__ = [
    "SCHEMA",
    "KafkaDataSource",
    "ReadOptions",
    "WriteOptions",
    "offsets_behind_latest",
    "parse_read_options",
    "parse_write_options",
    "register",
]
