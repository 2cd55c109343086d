"""trafka.spark: a PySpark data source for Kafka topics (batch and streaming, read and write).

Needs pyspark 4.2 or newer (``pip install 'trafka[spark]'``)::

    from trafka.spark import register
    register(spark)
    spark.read.format("trafka").option("kafka.bootstrap.servers", servers) \\
        .option("subscribe", "events").load()

The options and columns are those of Spark's own Kafka connector; see the
Spark page of the documentation.

Every name here is loaded when first used (PEP 562): each Python worker Spark
starts imports this package before the module of the class it unpickles, and a
worker that reads or writes a task's records needs none of the planning (the
admin client) that ``offsets_behind_latest`` or the options would bring in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from trafka.common.lazy import lazy_exports

_LAZY = {
    "offsets_behind_latest": "._kafka",
    "ReadOptions": ".options",
    "WriteOptions": ".options",
    "parse_read_options": ".options",
    "parse_write_options": ".options",
    "SCHEMA": ".source",
    "KafkaDataSource": ".source",
    "register": ".source",
    "from_registry": ".schemas",
    "to_registry": ".schemas",
}

if TYPE_CHECKING:
    from ._kafka import offsets_behind_latest
    from .options import ReadOptions, WriteOptions, parse_read_options, parse_write_options
    from .schemas import from_registry, to_registry
    from .source import SCHEMA, KafkaDataSource, register

_lazy_getattr, __dir__ = lazy_exports(__name__, _LAZY)


def _unavailable(missing: ImportError) -> Any:
    def register(spark: Any, *, parallelism: int | None = None) -> None:
        """Unavailable: pyspark is not installed."""
        raise ImportError(
            "trafka.spark needs pyspark 4.2 or newer: pip install 'trafka[spark]'"
        ) from missing

    return register


def __getattr__(name: str) -> Any:
    try:
        return _lazy_getattr(name)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        # Without pyspark the options and the offsets stay usable; register()
        # says what is missing when called, the data source's names when named.
        if name != "register" or exc.name is None:
            raise
        if not exc.name.startswith(("pyspark", "pyarrow", "py4j")):
            raise
        globals()["register"] = _unavailable(exc)
        return globals()["register"]


__all__ = [
    "SCHEMA",
    "KafkaDataSource",
    "ReadOptions",
    "WriteOptions",
    "from_registry",
    "offsets_behind_latest",
    "parse_read_options",
    "parse_write_options",
    "register",
    "to_registry",
]
