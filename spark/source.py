"""The PySpark data source ``trafka``: Kafka topics as DataFrames, batch and streaming.

Register it once per session, then read and write with Spark's Kafka options::

    from trafka.spark import register
    register(spark)
    df = (spark.read.format("trafka")
          .option("kafka.bootstrap.servers", "localhost:9092")
          .option("subscribe", "events")
          .load())

The classes follow Spark's Python data source API (Spark 4.2 or newer): the
driver plans offset ranges (:mod:`._kafka`), each executor task reads one
range or writes its rows with trafka's own clients.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import pyarrow as pa
from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceReader,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
    SimpleDataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from ..codec.columns import (
    BinaryColumn,
    ColumnBuffers,
    HeaderColumns,
    RecordColumns,
    TimestampColumn,
)
from ..sdk.errors import ConfigError
from ..sdk.txn_handoff import PreparedTransaction
from . import _eos, _kafka, _loss, schemas
from .options import (
    ReadOptions,
    WriteOptions,
    check_read_options,
    include_headers,
    parse_read_options,
    parse_write_options,
)

__all__ = ["KafkaDataSource", "register", "SCHEMA"]

SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
"""The columns of a read, as Spark's Kafka connector has them."""

_HEADERS = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)


def register(spark: Any, *, parallelism: int | None = None) -> None:
    """Make ``format("trafka")`` available in a Spark session.

    Args:
        parallelism: how many tasks a read's small offset ranges are merged into
            (``mergeOffsetRanges``); by default the session's default
            parallelism (its cores), as Spark reports it now.
    """
    spark.dataSource.register(_bound("trafka", parallelism or _default_parallelism(spark)))


def _default_parallelism(spark: Any) -> int | None:
    """The session's default parallelism, or None where Spark does not say
    (Spark Connect has no SparkContext)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:
        return None


def _bound(short_name: str, parallelism: int | None) -> type[KafkaDataSource]:
    """The data source under ``short_name``, planning for ``parallelism`` cores.

    Spark runs the planning in Python processes of its own, which cannot ask the
    session; the class Spark pickles carries the figure instead (a class made
    here is pickled by value, its attributes with it).
    """
    return type(
        f"KafkaDataSource_{short_name}",
        (KafkaDataSource,),
        {"short_name": short_name, "parallelism": parallelism, "__module__": __name__},
    )


@dataclass
class RangePartition(InputPartition):
    """One task: offset ranges, each of one Kafka partition, read one after another
    (one range, as in Spark's connector, unless small ranges were merged)."""

    ranges: tuple[_kafka.OffsetRange, ...]


@dataclass
class WriteCount(WriterCommitMessage):
    """What a write task reports: how many records it produced."""

    records: int


@dataclass
class TransactionMessage(WriterCommitMessage):
    """What an exactly-once write task reports: how many records it wrote, the
    transaction they are in (flushed, left open for the driver to end), and
    Spark's run id of the query (a stream's), read from the task's context."""

    records: int
    transaction: PreparedTransaction
    run: str | None = None


def _kind(t: DataType) -> str:
    return type(t).__name__


class KafkaDataSource(DataSource):
    """Kafka topics through trafka; options as Spark's Kafka connector's.

    Attributes:
        short_name: the format name it is registered under.
        parallelism: the cores a read plans for (see :func:`register`); None: as
            many as the planning process's machine has.
    """

    short_name = "trafka"
    parallelism: int | None = None

    @classmethod
    def name(cls) -> str:
        return cls.short_name

    def schema(self) -> StructType:
        # Spark asks at load(), before it says whether the read is a batch or a
        # stream (and never for a write): what neither accepts fails here, the
        # rest in reader() and streamReader().
        formats, options = schemas.split_options(self.options)
        check_read_options(options)
        value = next((v for k, v in options.items() if k.lower() == "includeheaders"), None)
        base = StructType([*SCHEMA.fields, _HEADERS]) if include_headers(value) else SCHEMA
        if formats is None:
            return base
        return schemas.read_schema(base, _decoding(formats, options, None)[1])

    # These run on the driver: zeroconf bootstrap specs are resolved here, once.

    def reader(self, schema: StructType) -> DataSourceReader:
        formats, options = schemas.split_options(self.options)
        opts = _pinned(parse_read_options(options, streaming=False))
        reader = _BatchReader(opts, schema, self._tasks(opts))
        reader.decoding = formats and _decoding(formats, options, schema)
        return reader

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        try:
            formats, options = schemas.split_options(self.options)
            opts = _pinned(parse_read_options(options, streaming=True))
            decoding = formats and _decoding(formats, options, schema)
        except Exception as exc:
            # PySpark's stream runner loses an exception raised here (it fails with
            # an UnboundLocalError of its own): the reader raises it at its first call.
            return _FailedStreamReader(exc)
        if opts.simple_stream_reader:
            # PySpark takes simpleStreamReader() only when this one is not
            # implemented: its one way to choose between the two.
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        reader = _StreamReader(opts, schema, tasks=self._tasks(opts))
        reader.decoding = decoding
        return reader

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        # Asked only after streamReader() declined (streamReader=simple), whose
        # options parsed then: these parse the same.
        formats, options = schemas.split_options(self.options)
        reader = _SimpleStreamReader(_pinned(parse_read_options(options, streaming=True)), schema)
        reader.stream.decoding = formats and _decoding(formats, options, schema)
        return reader

    def _tasks(self, opts: ReadOptions) -> int | None:
        """How many tasks merged ranges aim at: ``mergedPartitions``, else the
        cores, never fewer than ``minPartitions``; None when merging is off."""
        if not opts.merge_ranges:
            return None
        cores = opts.merged_partitions or self.parallelism or os.cpu_count() or 1
        return max(cores, opts.min_partitions or 0)

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        if overwrite:
            raise ConfigError("Kafka topics are append-only: use mode('append')")
        opts, columns = self._write_options(schema)
        if opts.exactly_once:
            prefix = opts.transactional_id_prefix or _eos.random_prefix()
            return _ExactlyOnceWriter(opts, columns, prefix)
        return _Writer(opts, columns)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        # Spark calls this on the driver before each micro-batch's tasks (and in
        # each commit): the exactly-once sink first finishes a commit that a
        # dead driver left half done (see _eos).
        if overwrite:
            raise ConfigError("Kafka topics are append-only: use outputMode('append')")
        opts, columns = self._write_options(schema)
        if not opts.exactly_once:
            return _StreamWriter(opts, columns)
        if opts.checkpoint is None:
            raise ConfigError("deliveryGuarantee=exactly-once needs a checkpointLocation")
        _eos.settle(opts, _eos.CommitLog(opts.checkpoint))
        prefix = opts.transactional_id_prefix or _eos.default_prefix(opts.checkpoint)
        return _ExactlyOnceStreamWriter(opts, columns, prefix)

    def _write_options(self, schema: StructType) -> tuple[WriteOptions, _Columns]:
        formats, options = schemas.split_options(self.options)
        opts = _pinned(parse_write_options(options))
        if formats is None:
            return opts, _Columns(_columns(schema))
        fields = schemas.write_fields(formats, opts.topic, schema)
        typed = {f.field for f in fields}
        return opts, _Columns(_columns(schema, typed), (formats, fields), opts.topic)


def _decoding(
    formats: schemas.SchemaOptions, options: dict[str, str], schema: StructType | None
) -> tuple[schemas.SchemaOptions, tuple[schemas.FieldSchema, ...]]:
    """A read's formatted columns, resolved on the driver; the columns Spark
    planned with must still be the subject's latest (a new version registered
    since load() changes them: load again)."""
    own = {k.lower(): v for k, v in options.items()}
    topics = [t.strip() for t in own.get("subscribe", "").split(",") if t.strip()]
    if not topics and "assign" in own:
        topics = sorted(json.loads(own["assign"]))
    fields = schemas.resolve(formats, topics)
    planned = {c.name: c.dataType.simpleString() for c in schema.fields} if schema else {}
    for f in fields:
        if f.field in planned and planned[f.field] != f.spark_type().simpleString():
            raise ConfigError(
                f"subject {f.subject} has a new version ({f.version}) since the query was "
                "defined: load() it again to read with it"
            )
    return formats, fields


@dataclass(frozen=True)
class _Columns:
    """A write's columns and, with key.format/value.format, how to encode them."""

    names: tuple[str, ...]
    encoding: tuple[schemas.SchemaOptions, tuple[schemas.FieldSchema, ...]] | None = None
    topic: str | None = None

    def chunks(self, iterator: Iterator[Any]) -> Iterator[dict[str, list[Any]]]:
        chunks = _chunks(iterator)
        if self.encoding is None:
            return chunks
        return schemas.encode_chunks(*self.encoding, self.topic, chunks)


_Opts = TypeVar("_Opts", ReadOptions, WriteOptions)


def _pinned(opts: _Opts) -> _Opts:
    return dataclasses.replace(opts, client=_kafka.pin_bootstrap(opts.client))


_WRITABLE: dict[str, tuple[str, ...]] = {
    "value": ("StringType", "BinaryType"),
    "key": ("StringType", "BinaryType"),
    "topic": ("StringType",),
    "partition": ("IntegerType", "LongType", "ShortType"),
    "headers": ("ArrayType",),
}


def _columns(schema: StructType, typed: frozenset[str] | set[str] = frozenset()) -> tuple[str, ...]:
    """The columns a write uses; checks their types (extra columns are an error;
    ``typed``: columns a schema encodes, checked by :mod:`.schemas`)."""
    names = []
    for f in schema.fields:
        allowed = (
            ("StructType", "StringType", "BinaryType") if f.name in typed else _WRITABLE.get(f.name)
        )
        if allowed is None:
            raise ConfigError(
                f"column {f.name!r} cannot be written to Kafka: use value, key, topic, "
                "partition and headers"
            )
        if _kind(f.dataType) not in allowed:
            raise ConfigError(
                f"column {f.name!r} must be {' or '.join(allowed)}, not {f.dataType.simpleString()}"
            )
        names.append(f.name)
    if "value" not in names:
        raise ConfigError("writing to Kafka needs a 'value' column")
    return tuple(names)


def _read(
    opts: ReadOptions, schema: StructType, partition: InputPartition, decoding: Any = None
) -> Iterator[Any]:
    """A range's records as Arrow batches: much cheaper for Spark than rows
    (``decoding``: the formatted columns, see :mod:`.schemas`)."""
    if not isinstance(partition, RangePartition):
        # Spark reads one partition of its own when planning found nothing to read.
        return
    # The schema Spark checks the batches against (timestamps in UTC microseconds).
    arrow = to_arrow_schema(schema, timezone="UTC")
    decoder = None
    if decoding:
        formats, fields = decoding
        decoder = schemas.Decoder(formats, fields, arrow)
        arrow = to_arrow_schema(schemas.raw_schema(schema, fields), timezone="UTC")
    config = _kafka.reader_config(opts)
    for task in partition.ranges:
        repeated = _Repeated(task.topic, task.partition)
        batches: Iterator[Any] = (
            _batch(records, task.topic, task.partition, arrow, repeated)
            for records in _kafka.read_range(opts, task, config)
        )
        if decoder is not None:
            batches = decoder.batches(batches, task.topic, task.partition)
        yield from batches


class _Repeated:
    """A range's ``topic`` and ``partition`` columns (one value each), made
    once and sliced for each chunk: a slice costs nothing, a repeat a pass."""

    def __init__(self, topic: str, partition: int) -> None:
        self._values = (pa.scalar(topic, pa.string()), pa.scalar(partition, pa.int32()))
        self._columns = [pa.repeat(value, 0) for value in self._values]

    def columns(self, n: int) -> list[pa.Array]:
        if len(self._columns[0]) < n:
            self._columns = [pa.repeat(value, n) for value in self._values]
        return [column.slice(0, n) for column in self._columns]


def _batch(
    records: RecordColumns,
    topic: str,
    partition: int,
    arrow: pa.Schema,
    repeated: _Repeated | None = None,
) -> pa.RecordBatch:
    """Decoded records as one Arrow batch: their buffers wrapped, not copied (a
    chunk of several pieces is joined once)."""
    repeated = repeated or _Repeated(topic, partition)
    batches = [_piece(b, start, stop, repeated, arrow) for b, start, stop in records.pieces()]
    if len(batches) == 1:
        return batches[0]
    # (pa.concat_batches is pyarrow 19+; the data source takes pyarrow 15.)
    columns = [pa.concat_arrays([b.column(i) for b in batches]) for i in range(len(arrow))]
    return pa.RecordBatch.from_arrays(columns, schema=arrow)


def _nullable(
    kind: pa.DataType,
    start: int,
    stop: int,
    size: int,
    validity: bytes | None,
    nulls: int,
    *buffers: bytes,
) -> pa.Array:
    """Items ``start`` to ``stop`` of a nullable column of ``size`` items,
    its buffers wrapped as ``kind``. The null count of a slice is left for
    Arrow to count (-1), from the bitmap."""
    whole = start == 0 and stop == size
    return pa.Array.from_buffers(
        kind,
        stop - start,
        [None if validity is None else pa.py_buffer(validity), *map(pa.py_buffer, buffers)],
        null_count=nulls if whole or validity is None else -1,
        offset=start,
    )


def _binary(column: BinaryColumn, kind: pa.DataType, start: int, stop: int) -> pa.Array:
    size = (len(column.offsets) >> 2) - 1
    return _nullable(
        kind, start, stop, size, column.validity, column.nulls, column.offsets, column.data
    )


def _ints(data: bytes, start: int, stop: int, kind: pa.DataType) -> pa.Array:
    return pa.Array.from_buffers(kind, stop - start, [None, pa.py_buffer(data)], 0, start)


def _timestamps(column: TimestampColumn, start: int, stop: int, kind: pa.DataType) -> pa.Array:
    """The codec's timestamp column (int64 microseconds with nulls, Spark's
    layout) typed as ``kind`` as it is wrapped: no cast, no pass over it."""
    size = len(column.micros) >> 3
    return _nullable(kind, start, stop, size, column.validity, column.nulls, column.micros)


def _piece(
    b: ColumnBuffers, start: int, stop: int, repeated: _Repeated, arrow: pa.Schema
) -> pa.RecordBatch:
    n = stop - start
    topics, partitions = repeated.columns(n)
    columns = {
        "key": _binary(b.key, pa.binary(), start, stop),
        "value": _binary(b.value, pa.binary(), start, stop),
        "topic": topics,
        "partition": partitions,
        "offset": _ints(b.offsets, start, stop, pa.int64()),
        "timestamp": _timestamps(b.timestamps, start, stop, arrow.field("timestamp").type),
        "timestampType": _ints(b.timestamp_types, start, stop, pa.int32()),
    }
    if "headers" in arrow.names:
        assert b.headers is not None, "the reader was not asked for the headers"
        columns["headers"] = _headers(b.headers, arrow.field("headers").type, start, stop)
    return pa.RecordBatch.from_arrays([columns[f.name] for f in arrow], schema=arrow)


def _headers(h: HeaderColumns, kind: pa.DataType, start: int, stop: int) -> pa.Array:
    """Records ``start`` to ``stop``'s headers: a list of (key, value) for each,
    null for a record that has none, as Spark's connector gives them (its
    KafkaRecordToRowConverter makes no empty array)."""
    # (here, not at the top: every Spark Python worker imports this module, and
    # pyarrow.compute costs about 0.1 s to import; only headers need it)
    import pyarrow.compute as pc

    n = stop - start
    entries = (len(h.names.offsets) >> 2) - 1
    names = _binary(h.names, pa.string(), 0, entries)
    values = _binary(h.values, pa.binary(), 0, entries)
    pairs = pa.StructArray.from_arrays([names, values], fields=list(kind.value_type))
    # These records' starts only (indexes into every record's entries), so the
    # validity bitmap made from their lengths lines up with them from bit 0.
    starts = pa.py_buffer(h.starts).slice(start * 4, (n + 1) * 4)
    lists = pa.Array.from_buffers(kind, n, [None, starts], 0, 0, children=[pairs])
    present = pc.not_equal(pc.list_value_length(lists), 0)
    if n == 0 or pc.all(present).as_py():
        return lists
    validity = present.buffers()[1]
    return pa.Array.from_buffers(kind, n, [validity, starts], -1, 0, children=[pairs])


# Offsets a micro-batch's task gets at the least when its ranges are merged
# (with the tasks left to aim at the cores): fewer than Spark's fixed cost of a
# Python task (about 60 ms of a core) would read. A stream's small micro-batch
# is then one task, not one per core.
SMALL_TASK_OFFSETS = 10_000


def _plan(
    opts: ReadOptions,
    tasks: int | None,
    start: _kafka.Offsets,
    end: _kafka.Offsets,
    *,
    small_task: int | None = None,
) -> list[InputPartition]:
    """The tasks of ``[start, end)``: ranges merged into ``tasks`` (None: one
    task per range); with ``small_task``, fewer tasks when there are fewer
    offsets than ``small_task`` per task, unless ``minPartitions`` or
    ``mergedPartitions`` set the tasks."""
    ranges = _kafka.plan_ranges(
        start,
        end,
        min_partitions=opts.min_partitions,
        fail_on_data_loss=opts.fail_on_data_loss,
        max_records_per_partition=opts.max_records_per_partition,
    )
    chosen = opts.min_partitions is not None or opts.merged_partitions is not None
    if tasks is not None and small_task and not chosen:
        offsets = sum(r.end - r.start for r in ranges)
        tasks = min(tasks, max(1, -(-offsets // small_task)))
    merged = _kafka.merge_ranges(
        ranges, tasks, max_records_per_partition=opts.max_records_per_partition
    )
    return [RangePartition(group) for group in merged]


def _chunks(batches: Iterator[Any]) -> Iterator[dict[str, list[Any]]]:
    for batch in batches:
        yield {name: batch.column(name).to_pylist() for name in batch.schema.names}


class _BatchReader(DataSourceReader):
    decoding: Any = None  # the formatted columns (see _decoding)

    def __init__(self, opts: ReadOptions, schema: StructType, tasks: int | None) -> None:
        self.opts = opts
        self.schema = schema
        self.tasks = tasks

    def partitions(self) -> Sequence[InputPartition]:
        return _plan(self.opts, self.tasks, *_kafka.batch_offsets(self.opts))

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, self.schema, partition, self.decoding)


class _StreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of offset ranges; Spark checkpoints the offsets, Kafka's
    group offsets are not used.

    Admission as Spark's connector: ``maxOffsetsPerTrigger`` caps a micro-batch;
    with ``minOffsetsPerTrigger`` a trigger that finds fewer new offsets is
    skipped (the start returned as the end) until ``maxTriggerDelay`` has passed
    since the last batch that ran. ``Trigger.AvailableNow`` reads up to the
    offsets of its start and is never delayed.

    Args:
        tasks: how many tasks small ranges are merged into (None: not merged).
        clock: seconds on a monotonic clock (:func:`time.monotonic`), for the
            delay; any origin (a machine booted a minute ago reads small values).
    """

    def __init__(
        self,
        opts: ReadOptions,
        schema: StructType,
        *,
        tasks: int | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.opts = opts
        self.schema = schema
        self.tasks = tasks
        self.clock = clock
        self.target: _kafka.Offsets | None = None
        self.latest: _kafka.Offsets | None = None
        # When the last micro-batch was let through; None before the first, which
        # is never delayed (as Spark's). Not a number: a monotonic clock has no
        # origin that "long ago" could be measured from.
        self.last_trigger: float | None = None
        self._planner: _kafka.Planner | None = None
        self.decoding: Any = None  # the formatted columns (see _decoding)

    @property
    def planner(self) -> _kafka.Planner:
        # Made on first use, in the driver's process that asks every trigger
        # (the reader is pickled to the executors, which never plan).
        if self._planner is None:
            self._planner = _kafka.Planner(self.opts, keep=True)
        return self._planner

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_planner"] = None
        return state

    def initialOffset(self) -> dict[str, Any]:
        return _kafka.starting_offsets(self.opts, self.planner)

    def prepareForTriggerAvailableNow(self) -> None:
        self.target = _kafka.latest_offsets(self.opts, since={}, planner=self.planner)

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.opts.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.opts.max_offsets_per_trigger)
        if self.opts.min_offsets_per_trigger is not None:
            return ReadMinRows(self.opts.min_offsets_per_trigger)
        return ReadAllAvailable()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        latest = self.target or _kafka.latest_offsets(self.opts, since=start, planner=self.planner)
        # With nothing new, Spark would ask again at once (trigger 0) or at the
        # next trigger: the brokers are asked to answer when a record comes instead.
        if self.target is None and _kafka.nothing_new(start, latest) and self.planner.wait(latest):
            latest = _kafka.latest_offsets(self.opts, since=start, planner=self.planner)
        self.latest = latest
        begin = _kafka.new_partitions(self.opts, start, latest, self.planner)
        if isinstance(limit, ReadAllAvailable):
            return _kafka.limit_offsets(begin, latest, 2**63)
        least = self.opts.min_offsets_per_trigger
        if least is not None and self.target is None:
            now = self.clock()
            if (
                self.last_trigger is not None
                and _kafka.backlog(begin, latest) < least
                and (now - self.last_trigger) * 1000 < self.opts.max_trigger_delay_ms
            ):
                return start  # no micro-batch yet: too little is new
            self.last_trigger = now
        most = self.opts.max_offsets_per_trigger
        return _kafka.limit_offsets(begin, latest, 2**63 if most is None else most)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        # The offsets the last trigger found (Spark's connector reports the same):
        # query.lastProgress shows them as the source's latestOffset.
        return self.latest

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        begin = _loss.stream_start(self.opts, start, end, self.planner)
        return _plan(self.opts, self.tasks, begin, end, small_task=SMALL_TASK_OFFSETS)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        return _read(self.opts, self.schema, partition, self.decoding)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # Spark's checkpoint holds the offsets

    def stop(self) -> None:
        if self._planner is not None:
            self._planner.close()


class _SimpleStreamReader(SimpleDataSourceStreamReader, SupportsTriggerAvailableNow):
    """``streamReader=simple``: the driver reads each micro-batch as it finds its
    end, and Spark hands the rows to the micro-batch, which runs no read task
    (PySpark's simple stream reader: for small rates, where a task's fixed cost
    is most of a micro-batch's).

    The end is found as :class:`_StreamReader` finds it (the same admission:
    ``maxOffsetsPerTrigger``, ``minOffsetsPerTrigger``, ``Trigger.AvailableNow``;
    the same wait when nothing is new). A micro-batch that a restarted query
    runs again from its checkpoint (planned, not finished) is not in the
    driver's memory: Spark then runs a task that reads its offsets again
    (:meth:`readBetweenOffsets`), the same records, since Kafka's offsets name
    them.

    The micro-batch's records are held in the driver's memory (Arrow) until
    Spark takes them, so a stream that may find a large backlog (a start at the
    earliest offsets, a query restarted after a pause) wants
    ``maxOffsetsPerTrigger``.
    """

    def __init__(
        self, opts: ReadOptions, schema: StructType, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        # Its planning is the partitioned reader's; only the reading moves.
        self.stream = _StreamReader(opts, schema, clock=clock)

    def initialOffset(self) -> dict[str, Any]:
        return self.stream.initialOffset()

    def prepareForTriggerAvailableNow(self) -> None:
        self.stream.prepareForTriggerAvailableNow()

    def read(self, start: dict[str, Any]) -> tuple[Iterator[Any], dict[str, Any]]:
        stream = self.stream
        end = stream.latestOffset(start, stream.getDefaultReadLimit())
        if _kafka.nothing_new(start, end):
            # The start itself: PySpark compares the two as JSON text, and runs
            # no micro-batch only when they are equal.
            return iter(()), start
        batches = [
            batch
            for partition in stream.partitions(start, end)
            for batch in _read(stream.opts, stream.schema, partition, stream.decoding)
        ]
        # A list's iterator: PySpark copies the iterator it keeps (a generator
        # cannot be copied).
        return iter(batches), end

    def readBetweenOffsets(self, start: dict[str, Any], end: dict[str, Any]) -> Iterator[Any]:
        # In a task of a micro-batch that is run again: a planner of its own,
        # closed when the call returns (none is kept in an executor).
        opts = self.stream.opts
        for partition in _plan(opts, None, _loss.stream_start(opts, start, end), end):
            yield from _read(opts, self.stream.schema, partition, self.stream.decoding)

    def commit(self, end: dict[str, Any]) -> None:
        pass  # Spark's checkpoint holds the offsets


class _FailedStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A stream whose options are wrong: every call raises the error."""

    def __init__(self, error: Exception) -> None:
        self.error = error

    def prepareForTriggerAvailableNow(self) -> None:
        raise self.error

    def getDefaultReadLimit(self) -> ReadLimit:
        raise self.error

    def initialOffset(self) -> dict[str, Any]:
        raise self.error

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        raise self.error

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        raise self.error

    def read(self, partition: InputPartition) -> Iterator[Any]:
        raise self.error


class _Writer(DataSourceArrowWriter):
    def __init__(self, opts: WriteOptions, columns: _Columns) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return WriteCount(_kafka.write_columns(self.opts, self.columns.chunks(iterator)))


class _StreamWriter(DataSourceStreamArrowWriter):
    """At-least-once: a retried task or micro-batch writes its rows again."""

    def __init__(self, opts: WriteOptions, columns: _Columns) -> None:
        self.opts = opts
        self.columns = columns

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return WriteCount(_kafka.write_columns(self.opts, self.columns.chunks(iterator)))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # each task's records are acknowledged before it reports

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass  # what was acknowledged stays: Kafka cannot take records back


def _task_transaction(
    opts: WriteOptions, prefix: str, iterator: Iterator[dict[str, list[Any]]]
) -> TransactionMessage:
    """Write a task's rows in the transaction of its partition's id, left open."""
    from pyspark import TaskContext

    context = TaskContext.get()
    partition = context.partitionId() if context is not None else 0
    # A stream's job group is its run id (Spark's StreamExecution sets it).
    run = context.getLocalProperty("spark.jobGroup.id") if context is not None else None
    tid = _eos.transactional_id(prefix, partition)
    transaction, records = _eos.write_transaction(opts, tid, iterator)
    return TransactionMessage(records, transaction, run)


def _transactions(messages: Sequence[WriterCommitMessage | None]) -> list[PreparedTransaction]:
    return [m.transaction for m in messages if isinstance(m, TransactionMessage)]


class _ExactlyOnceWriter(DataSourceArrowWriter):
    """A batch write whose tasks' transactions the driver commits (see :mod:`._eos`)."""

    def __init__(self, opts: WriteOptions, columns: _Columns, prefix: str) -> None:
        self.opts = opts
        self.columns = columns
        self.prefix = prefix

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _task_transaction(self.opts, self.prefix, self.columns.chunks(iterator))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _eos.commit_batch(self.opts, _transactions(messages))

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _eos.abort_batch(self.opts, self.prefix, _transactions(messages))


class _ExactlyOnceStreamWriter(DataSourceStreamArrowWriter):
    """Micro-batches whose tasks' transactions the driver commits, with a
    commit log in the checkpoint (see :mod:`._eos`)."""

    def __init__(self, opts: WriteOptions, columns: _Columns, prefix: str) -> None:
        self.opts = opts
        self.columns = columns
        self.prefix = prefix

    def _log(self) -> _eos.CommitLog:
        assert self.opts.checkpoint is not None
        return _eos.CommitLog(self.opts.checkpoint)

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return _task_transaction(self.opts, self.prefix, self.columns.chunks(iterator))

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        run = next((m.run for m in messages if isinstance(m, TransactionMessage)), None)
        _eos.commit_stream(
            self.opts, self._log(), self.prefix, batchId, _transactions(messages), run
        )

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _eos.abort_stream(self.opts, self._log(), self.prefix, batchId, _transactions(messages))
