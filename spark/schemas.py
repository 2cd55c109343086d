"""Schema Registry framed keys and values as typed struct columns, both ways.

A read with ``value.format`` (and/or ``key.format``) set to ``avro``,
``protobuf`` or ``json-schema`` and ``schema.registry.url`` decodes the column
into a struct whose Spark type is derived from the subject's latest schema
(:mod:`._schema_types` says how each format maps); a write with the same
options encodes a struct column with the subject's latest schema. The names:
``key.format``/``value.format`` as Flink's Kafka connector spells them (Spark's
own connector has no such option), ``schema.registry.*`` as confluent-kafka
spells the registry's settings (passed through, as ``kafka.*`` are to the
client), ``deserialization.error.handler`` as the SDK's consumer spells it.

Rules:

* The subject is ``key.subject``/``value.subject``, else ``<topic>-key`` /
  ``<topic>-value`` of the one topic read or written (Confluent's default
  strategy); a read of several topics or a pattern, or a write without a
  ``topic`` option, must name it.
* The schema is the subject's latest version when the query is planned (a
  stream: each time it starts). Every record is decoded with the schema its
  frame names (the payload prefix, or the ``__value_schema_id`` header when
  the read includes headers); Avro records are then resolved to the planned
  schema (Avro's schema resolution: a field added with a default reads as the
  default), Protobuf and JSON Schema records keep the planned struct's fields
  (a field the writer lacks is null, one the planned schema lacks is left out).
* A record that does not decode (a wrong magic byte, an unknown schema id, a
  payload its schema does not read): ``deserialization.error.handler``
  ``stop`` (the default) fails the task with an error naming the topic,
  partition and offset and the cause; ``skip`` leaves the row out, ``null``
  keeps it with a null column; both log, per range, how many records and the
  first one's offset and cause.
* :func:`from_registry` and :func:`to_registry` do the same for any column,
  as Spark's ``from_avro``/``to_avro`` (Python UDFs, a row at a time).
* Writing registers nothing: each row is encoded with the subject's latest
  schema, by its id, as confluent's serializers do with
  ``use.latest.version`` and ``auto.register.schemas`` off; a row the schema
  refuses fails the task, naming the topic and subject.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.pandas.types import to_arrow_type
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    MapType,
    StringType,
    StructField,
    StructType,
)

from ..sdk.errors import ConfigError
from . import _schema_types as types

__all__ = ["FieldSchema", "SchemaOptions", "from_registry", "split_options", "to_registry"]

log = logging.getLogger(__name__)

FORMATS = ("avro", "protobuf", "json-schema")
HANDLERS = ("stop", "skip", "null")
_OWN = {"key.format", "value.format", "key.subject", "value.subject", "key.message",
        "value.message", "deserialization.error.handler"}  # fmt: skip


@dataclass(frozen=True, slots=True)
class SchemaOptions:
    """The schema options of a read or a write (see the module doc)."""

    formats: tuple[tuple[str, str], ...]  # (field, format), field "key" or "value"
    subjects: tuple[tuple[str, str], ...]
    messages: tuple[tuple[str, str], ...]
    registry: tuple[tuple[str, str], ...]  # registry settings, "schema.registry."-prefixed
    on_error: str

    def registry_conf(self) -> dict[str, str]:
        return dict(self.registry)


def split_options(options: Mapping[str, str]) -> tuple[SchemaOptions | None, dict[str, str]]:
    """The schema options and the data source's other options.

    Raises:
        ConfigError: an unknown format or handler, or a format without a registry.
    """
    own: dict[str, str] = {}
    registry: dict[str, str] = {}
    rest: dict[str, str] = {}
    for key, value in options.items():
        low = key.lower()
        if low in _OWN:
            own[low] = str(value)
        elif low.startswith("schema.registry."):
            registry[low] = str(value)
        else:
            rest[key] = value
    formats = []
    for field in ("key", "value"):
        fmt = own.get(f"{field}.format")
        if fmt is None:
            continue
        if fmt.strip().lower() not in FORMATS:
            raise ConfigError(
                f"option '{field}.format' must be one of {', '.join(FORMATS)}, not {fmt!r}"
            )
        formats.append((field, fmt.strip().lower()))
    if not formats:
        if own or registry:
            raise ConfigError(
                f"option(s) {sorted({*own, *registry})} need 'key.format' or 'value.format'"
            )
        return None, rest
    if "schema.registry.url" not in registry:
        raise ConfigError(
            "option 'schema.registry.url' is required with 'key.format'/'value.format'"
        )
    handler = own.get("deserialization.error.handler", "stop").strip().lower()
    if handler not in HANDLERS:
        raise ConfigError(
            f"option 'deserialization.error.handler' must be one of {', '.join(HANDLERS)}, "
            f"not {handler!r}"
        )

    def pick(kind: str) -> tuple[tuple[str, str], ...]:
        return tuple((f, own[f"{f}.{kind}"]) for f in ("key", "value") if f"{f}.{kind}" in own)

    return SchemaOptions(
        tuple(formats), pick("subject"), pick("message"), tuple(sorted(registry.items())), handler
    ), rest


@dataclass(frozen=True, slots=True)
class FieldSchema:
    """What the driver resolved for one column: pickled to the tasks."""

    field: str
    format: str
    subject: str
    schema_id: int
    version: int
    message: str | None
    spark_json: str  # the Spark type, as JSON (hashable)

    def spark_type(self) -> DataType:
        return _parse_type(self.spark_json)


@functools.lru_cache(maxsize=32)
def _parse_type(spark_json: str) -> DataType:
    parsed = StructType.fromJson({"type": "struct", "fields": [json.loads(spark_json)]})
    return parsed.fields[0].dataType


def _subject(opts: SchemaOptions, field: str, topics: Iterable[str]) -> str:
    given = dict(opts.subjects).get(field)
    if given:
        return given
    topics = list(topics)
    if len(topics) != 1:
        raise ConfigError(
            f"option '{field}.subject' is required: the subject of {field}s cannot be told "
            "from one topic (Confluent's topic name strategy) here"
        )
    return f"{topics[0]}-{field}"


@functools.lru_cache(maxsize=8)
def _registry(conf: tuple[tuple[str, str], ...]) -> Any:
    """One registry client per worker and setting (its caches are what keep a
    task from asking the registry for each record)."""
    from ..sdk.schemas import SchemaRegistryClient

    return SchemaRegistryClient(dict(conf))


def resolve(opts: SchemaOptions, topics: Iterable[str]) -> tuple[FieldSchema, ...]:
    """On the driver: each formatted column's subject, latest schema and Spark type.

    Raises:
        ConfigError: no subject, or a schema that has no Spark type.
        SchemaRegistryError: the registry refused (an unknown subject) or is unreachable.
    """
    from ..sdk.schemas import SchemaRegistryClient

    topics = list(topics)
    out = []
    for field, fmt in opts.formats:
        subject = _subject(opts, field, topics)
        # A client of its own: the kept one caches a subject's latest version.
        with SchemaRegistryClient(opts.registry_conf()) as fresh:
            latest = fresh.get_latest_version(subject)
        message = dict(opts.messages).get(field)
        codec = _Codec(opts, fmt, latest.schema, message)
        spark = json.dumps(StructField(field, codec.spark_type, True).jsonValue())
        out.append(
            FieldSchema(field, fmt, subject, latest.schema_id, latest.version, message, spark)
        )
    return tuple(out)


def read_schema(base: StructType, fields: tuple[FieldSchema, ...]) -> StructType:
    """A read's columns with the formatted ones as their structs."""
    typed = {f.field: f.spark_type() for f in fields}
    return StructType(
        [StructField(c.name, typed[c.name], True) if c.name in typed else c for c in base.fields]
    )


def raw_schema(schema: StructType, fields: tuple[FieldSchema, ...]) -> StructType:
    """The columns as read from Kafka, before decoding (key and value binary)."""
    names = {f.field for f in fields}
    return StructType(
        [StructField(c.name, BinaryType(), True) if c.name in names else c for c in schema.fields]
    )


class _Codec:
    """One column's format, schema and (lazily) serdes."""

    def __init__(self, opts: SchemaOptions, fmt: str, schema: Any, message: str | None) -> None:
        self.opts, self.format, self.schema, self.message = opts, fmt, schema, message
        registry = _registry(opts.registry)
        if fmt == "avro":
            import fastavro

            from ..sdk.schemas import AvroDeserializer

            named: dict[str, Any] = {}
            probe = AvroDeserializer(registry)
            for _, ref in probe.referenced_schemas(schema):
                fastavro.parse_schema(json.loads(ref.schema_str), named_schemas=named)
            self.parsed = fastavro.parse_schema(json.loads(schema.schema_str), named_schemas=named)
            self.named = named
            self.spark_type, _ = types.avro_type(self.parsed, named)
        elif fmt == "protobuf":
            from ..sdk.schemas import ProtobufDeserializer

            file = ProtobufDeserializer(schema_registry_client=registry).file_descriptor(schema)
            self.descriptor = _message(file, message)
            self.spark_type = types.proto_type(self.descriptor)
        else:
            self.document = json.loads(schema.schema_str)
            self.spark_type = types.json_type(self.document)
        self.arrow = to_arrow_type(self.spark_type, timezone="UTC")

    @functools.cached_property
    def deserializer(self) -> Any:
        from ..sdk import schemas

        registry = _registry(self.opts.registry)
        if self.format == "avro":
            return schemas.AvroDeserializer(registry, self.schema)
        if self.format == "protobuf":
            return schemas.ProtobufDeserializer(schema_registry_client=registry)
        return schemas.JSONDeserializer(None, schema_registry_client=registry)

    def row(self, decoded: Any) -> Any:
        if self.format == "avro":
            return types.from_avro_value(self.parsed, self.named, decoded)
        if self.format == "protobuf":
            return types.from_proto_message(decoded)
        return types.from_json_value(self.spark_type, decoded)

    def serializer(self, subject: str, schema_id: int) -> Any:
        from ..sdk import schemas

        registry = _registry(self.opts.registry)
        conf = {"use.schema.id": schema_id, "auto.register.schemas": False,
                "subject.name.strategy": lambda *_: subject}  # fmt: skip
        if self.format == "avro":
            return schemas.AvroSerializer(registry, None, conf=conf)
        if self.format == "protobuf":
            from google.protobuf import message_factory

            cls = message_factory.GetMessageClass(self.descriptor)
            return schemas.ProtobufSerializer(cls, registry, conf=conf)
        return schemas.JSONSerializer(None, registry, conf=conf)

    def value(self, row: Any) -> Any:
        if self.format == "avro":
            return types.to_avro_value(self.parsed, self.named, row)
        if self.format == "protobuf":
            from google.protobuf import message_factory

            return types.to_proto_message(message_factory.GetMessageClass(self.descriptor)(), row)
        return types.to_json_value(self.spark_type, row)


def _message(file: Any, name: str | None) -> Any:
    messages = list(file.message_types_by_name.values())
    if name is None:
        if not messages:
            raise ConfigError(f"the Protobuf schema {file.name} has no message")
        return messages[0]
    full = name if "." in name or not file.package else f"{file.package}.{name}"
    try:
        return file.pool.FindMessageTypeByName(full)
    except KeyError:
        raise ConfigError(f"no message {name!r} in the Protobuf schema") from None


@functools.lru_cache(maxsize=16)
def _codec(opts: SchemaOptions, field: FieldSchema) -> _Codec:
    """A column's codec, kept by the worker between tasks (with its serdes' caches)."""
    schema = _registry(opts.registry).get_version(field.subject, field.version).schema
    return _Codec(opts, field.format, schema, field.message)


class Decoder:
    """Decodes a read's formatted columns, batch by batch, in a task."""

    def __init__(
        self, opts: SchemaOptions, fields: tuple[FieldSchema, ...], final: pa.Schema
    ) -> None:
        self.opts, self.fields, self.final = opts, fields, final

    def batches(
        self, batches: Iterator[pa.RecordBatch], topic: str, partition: int
    ) -> Iterator[pa.RecordBatch]:
        failed: list[tuple[int, BaseException]] = []
        for batch in batches:
            yield self._batch(batch, topic, partition, failed)
        if failed:
            offset, first = failed[0]
            log.warning(
                "%s: %d record(s) of %s-%d did not decode (%s); the first at offset %d: %s",
                "deserialization.error.handler",
                len(failed),
                topic,
                partition,
                "skipped" if self.opts.on_error == "skip" else "read as null",
                offset,
                first,
            )

    def _batch(
        self,
        batch: pa.RecordBatch,
        topic: str,
        partition: int,
        failed: list[tuple[int, BaseException]],
    ) -> pa.RecordBatch:
        from ..sdk.schemas import SchemaSerializationError

        names = batch.schema.names
        offsets = batch.column(names.index("offset")).to_pylist()
        headers = batch.column(names.index("headers")).to_pylist() if "headers" in names else None
        bad: set[int] = set()
        columns = list(batch.columns)
        for field in self.fields:
            codec = _codec(self.opts, field)
            is_key = field.field == "key"
            rows = []
            for i, data in enumerate(batch.column(names.index(field.field)).to_pylist()):
                hdrs = (
                    None
                    if headers is None or headers[i] is None
                    else [(h["key"], h["value"]) for h in headers[i]]
                )
                try:
                    decoded = codec.deserializer.deserialize_record(
                        data, topic, partition, offsets[i], hdrs, is_key
                    )
                    row = None if decoded is None else codec.row(decoded)
                    if row is not None:
                        pa.array([row], type=codec.arrow)  # a row the struct cannot hold fails here
                except (SchemaSerializationError, pa.ArrowException, ValueError, TypeError) as exc:
                    if self.opts.on_error == "stop":
                        if isinstance(exc, SchemaSerializationError):
                            raise
                        raise SchemaSerializationError(
                            f"does not fit the {field.subject} schema's Spark type: {exc}",
                            topic=topic, partition=partition, offset=offsets[i], is_key=is_key,
                        ) from exc  # fmt: skip
                    if i not in bad:
                        failed.append((offsets[i], exc))
                    bad.add(i)
                    row = None
                rows.append(row)
            columns[names.index(field.field)] = pa.array(rows, type=codec.arrow)
        out = pa.RecordBatch.from_arrays(columns, schema=self.final)
        if bad and self.opts.on_error == "skip":
            out = out.filter(pa.array([i not in bad for i in range(out.num_rows)]))
        return out


def write_fields(
    opts: SchemaOptions, topic: str | None, schema: StructType
) -> tuple[FieldSchema, ...]:
    """On the driver: the formatted columns of a write, each checked against its
    subject's latest schema's Spark type.

    Raises:
        ConfigError: a column whose type is not the schema's.
    """
    fields = resolve(opts, [] if topic is None else [topic])
    given = {c.name: c.dataType for c in schema.fields}
    for f in fields:
        want = f.spark_type()
        have = given.get(f.field)
        if (
            have is not None
            and not isinstance(have, (StringType, BinaryType))
            and not _fits(have, want)
        ):
            raise ConfigError(
                f"column {f.field!r} is {have.simpleString()}, but subject {f.subject}'s schema "
                f"(version {f.version}) is {want.simpleString()}"
            )
    return fields


def _fits(have: DataType, want: DataType) -> bool:
    """Whether a struct column can be written with a schema: the same fields by
    name (nullability and order aside), with the same types."""
    if isinstance(have, StructType) and isinstance(want, StructType):
        wanted = {f.name: f.dataType for f in want.fields}
        return set(wanted) == set(have.fieldNames()) and all(
            _fits(f.dataType, wanted[f.name]) for f in have.fields
        )
    return have.simpleString() == want.simpleString()


def encode_chunks(
    opts: SchemaOptions, fields: tuple[FieldSchema, ...], default_topic: str | None,
    chunks: Iterable[dict[str, list[Any]]],
) -> Iterator[dict[str, list[Any]]]:  # fmt: skip
    """A write's chunks with the formatted columns encoded (in a task)."""
    encoders = [(f, _codec(opts, f)) for f in fields]
    serializers = {f.field: c.serializer(f.subject, f.schema_id) for f, c in encoders}
    for chunk in chunks:
        topics = chunk.get("topic") or [default_topic] * len(next(iter(chunk.values()), []))
        for f, codec in encoders:
            column = chunk.get(f.field)
            if column is None:
                continue
            serializer, is_key = serializers[f.field], f.field == "key"
            chunk[f.field] = [
                v if isinstance(v, (bytes, str)) or v is None
                else serializer.serialize_record(codec.value(v), t or default_topic, is_key)
                for v, t in zip(column, topics, strict=True)
            ]  # fmt: skip
        yield chunk


def _column_options(
    fmt: str, subject: str, url: str, options: Mapping[str, str] | None
) -> tuple[SchemaOptions, FieldSchema]:
    given = {"value.format": fmt, "value.subject": subject, "schema.registry.url": url}
    formats, rest = split_options({**given, **(options or {})})
    if rest or formats is None:
        raise ConfigError(f"unknown option(s) {sorted(rest)}: give schema.registry.* settings")
    (field,) = resolve(formats, [])
    return formats, field


def from_registry(
    data: Any, subject: str, fmt: str, url: str, options: Mapping[str, str] | None = None
) -> Any:
    """A column of registry-framed bytes decoded, as Spark's ``from_avro``: a
    struct (or the schema's type) of ``subject``'s latest schema (``fmt``:
    ``avro``, ``protobuf``, ``json-schema``; ``options``: ``schema.registry.*``
    settings, ``value.message``). A value that does not decode fails the task,
    or with ``deserialization.error.handler`` ``null`` reads as null.

    Raises:
        ConfigError: an unknown option, a schema with no Spark type.
    """
    from pyspark.sql.functions import udf

    formats, field = _column_options(fmt, subject, url, options)

    def decode(raw: bytes | None) -> Any:
        codec = _codec(formats, field)
        try:
            decoded = codec.deserializer.deserialize_record(raw, None, None, None)
        except Exception:
            if formats.on_error != "null":
                raise
            return None
        return None if decoded is None else _pairs_as_dicts(kind, codec.row(decoded))

    kind = field.spark_type()
    return udf(decode, kind, useArrow=False)(data)


def _pairs_as_dicts(kind: DataType, value: Any) -> Any:
    """A row value as a row-at-a-time UDF returns it: maps as dicts (Arrow
    takes them as key-value pairs)."""
    if value is None:
        return None
    if isinstance(kind, MapType):
        return {k: _pairs_as_dicts(kind.valueType, v) for k, v in value}
    if isinstance(kind, ArrayType):
        return [_pairs_as_dicts(kind.elementType, v) for v in value]
    if isinstance(kind, StructType):
        return {f.name: _pairs_as_dicts(f.dataType, value.get(f.name)) for f in kind.fields}
    return value


def to_registry(
    data: Any, subject: str, fmt: str, url: str, options: Mapping[str, str] | None = None
) -> Any:
    """A struct column encoded with ``subject``'s latest schema and framed with
    its id, as Spark's ``to_avro`` (registering nothing; see :func:`from_registry`).

    Raises:
        ConfigError: an unknown option, a schema with no Spark type.
    """
    from pyspark.sql.functions import udf

    formats, field = _column_options(fmt, subject, url, options)

    def encode(row: Any) -> bytes | None:
        if row is None:
            return None
        codec = _codec(formats, field)
        serializer = _serializer(formats, field)
        value = row.asDict(True) if hasattr(row, "asDict") else row
        framed: bytes | None = serializer.serialize_record(codec.value(value), subject, False)
        return framed

    return udf(encode, BinaryType(), useArrow=False)(data)


@functools.lru_cache(maxsize=16)
def _serializer(opts: SchemaOptions, field: FieldSchema) -> Any:
    return _codec(opts, field).serializer(field.subject, field.schema_id)
