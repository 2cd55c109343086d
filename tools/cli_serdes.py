"""Key and value formats of ``trafka produce`` and ``consume``: plain bytes,
text, JSON, and the Schema Registry formats (Avro, Protobuf, JSON Schema).

Rules:

* ``--key-format`` / ``--value-format`` name a field's format; kcat's
  spellings are taken too: ``-s key=avro``, ``-s value=avro``, ``-s avro``
  (both), with kcat's ``s`` for text, and ``-r URL`` for
  ``--schema-registry`` (default ``$TRAFKA_SCHEMA_REGISTRY_URL``). A
  registry format without a registry URL is a usage error.
* ``consume`` decodes with the SDK's deserializers (the consumer calls them
  with the record's topic, partition and offset), so a record that does not
  decode stops the command there with one line naming the field, topic,
  partition, offset and what is wrong (exit 1), after printing the records
  before it; with ``-G`` the commit stops before it too. ``-X
  deserialization.error.handler=skip`` passes it over, said on stderr.
  Decoded values print as JSON: with ``-J`` in the envelope, with the schema
  id and subject (``value_schema_id``, ``value_subject``, as kcat names the
  id); raw and ``-f`` print the value as compact JSON text.
* ``produce`` reads each input message as JSON and encodes it with the
  subject's latest schema (topic-name strategy: ``<topic>-key`` /
  ``<topic>-value``), or with ``--value-schema FILE`` registered under that
  subject first. Everything the registry could refuse (no such subject, an
  incompatible schema, none reachable) is asked before the producer starts,
  so it fails at once. An input message that is not JSON, or does not match
  the schema, ends the input with one line naming its line (message) number;
  what was sent before it is still delivered, and the command exits 1.
"""

from __future__ import annotations

import dataclasses
import functools
import json
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import click

from .clikit import OutputFormat, record_to_json, record_writer

__all__ = [
    "ENV_REGISTRY",
    "FORMATS",
    "FieldFormats",
    "InputError",
    "format_options",
    "parse_serdes",
    "registry_client",
    "registry_error",
]

ENV_REGISTRY = "TRAFKA_SCHEMA_REGISTRY_URL"
#: The registry formats, and the registry's schema type of each.
REGISTRY_TYPES = {"avro": "AVRO", "protobuf": "PROTOBUF", "json-schema": "JSON"}
FORMATS = ("bytes", "string", "json", *REGISTRY_TYPES)
_ALIASES = {
    "s": "string",
    "str": "string",
    "raw": "bytes",
    "proto": "protobuf",
    "json_schema": "json-schema",
    "jsonschema": "json-schema",
}


class InputError(Exception):
    """An input message that cannot be encoded (its number is in the message)."""


def _format_name(text: str, what: str) -> str:
    name = _ALIASES.get(text.strip().lower(), text.strip().lower())
    if name not in FORMATS:
        raise click.BadParameter(
            f"unknown format {text!r} (known: {', '.join(FORMATS)})", param_hint=what
        )
    return name


def parse_serdes(specs: tuple[str, ...]) -> dict[str, str]:
    """kcat's ``-s`` values: ``key=FMT``, ``value=FMT`` or ``FMT`` (both) -> {field: format}."""
    out: dict[str, str] = {}
    for spec in specs:
        field, sep, fmt = spec.partition("=")
        if not sep:
            out["key"] = out["value"] = _format_name(spec, "-s")
        elif field in ("key", "value"):
            out[field] = _format_name(fmt, "-s")
        else:
            raise click.BadParameter(
                f"{spec!r}: use key=FORMAT, value=FORMAT or FORMAT", param_hint="-s"
            )
    return out


def registry_error(exc: Any) -> click.ClickException:
    """A registry's refusal (or silence) as one line: its message and error code."""
    if exc.status is None:
        return click.ClickException(f"schema registry: {exc.message}")
    return click.ClickException(f"schema registry: {exc.message} (error_code {exc.error_code})")


def registry_client(url: str, timeout: float) -> Any:
    """A blocking registry client for a command: few, quick retries (a person waits)."""
    from trafka.sdk.schemas import SchemaRegistryClient

    return SchemaRegistryClient(
        {"url": url, "timeout": timeout, "max.retries": 1, "retries.wait.ms": 200}
    )


class _Decoder:
    """A consumer's deserializer for one field: text, JSON, or a registry format
    (the SDK's, told where the record is, which checks the schema's type)."""

    def __init__(self, fmt: str, registry: Any) -> None:
        from trafka.sdk.schemas.decoded import DecodingDeserializer

        self.fmt = fmt
        expect = REGISTRY_TYPES.get(fmt)
        self.inner = None if expect is None else DecodingDeserializer(registry, expect)

    def __call__(self, data: bytes | None, ctx: Any = None) -> Any:
        topic = getattr(ctx, "topic", "")
        is_key = getattr(ctx, "field", "value") == "key"
        return self.deserialize_record(
            data, topic, None, None, getattr(ctx, "headers", None), is_key
        )

    def deserialize_record(
        self,
        data: bytes | None,
        topic: str,
        partition: int | None,
        offset: int | None,
        headers: Any = None,
        is_key: bool = False,
        ctx: Any = None,
    ) -> Any:
        from trafka.sdk.schemas.decoded import Decoded

        if data is None:
            return None
        if self.inner is not None:
            return self.inner.deserialize_record(data, topic, partition, offset, headers, is_key)
        return Decoded(data.decode("utf-8") if self.fmt == "string" else json.loads(data))


class _Encoder:
    """Encodes one field of input messages for a topic."""

    def __init__(
        self, fmt: str, registry: Any, topic: str, is_key: bool, schema_file: str | None
    ) -> None:
        self.fmt, self.topic, self.is_key = fmt, topic, is_key
        self.field = "key" if is_key else "value"
        self.serializer: Any = None
        self.message: Any = None
        if fmt in REGISTRY_TYPES:
            self._resolve(registry, schema_file)

    def _resolve(self, registry: Any, schema_file: str | None) -> None:
        from trafka.sdk.schemas import Schema, SchemaRegistryError

        subject = f"{self.topic}-{self.field}"
        schema_type = REGISTRY_TYPES[self.fmt]
        try:
            if schema_file is not None:
                text = Path(schema_file).read_text(encoding="utf-8")
                registered = registry.register_schema(subject, Schema(text, schema_type))
                schema = Schema(text, schema_type)
            else:
                registered = registry.get_latest_version(subject)
                schema = registered.schema
        except SchemaRegistryError as exc:
            if exc.error_code == 40401:
                raise click.ClickException(
                    f"subject {subject!r} not found: give --{self.field}-schema FILE to register "
                    "a schema under it"
                ) from None
            raise registry_error(exc) from None
        if schema.schema_type != schema_type:
            raise click.ClickException(
                f"subject {subject!r} holds a {schema.schema_type} schema, not {schema_type} ({self.fmt})"
            )
        conf = {"use.schema.id": registered.schema_id, "auto.register.schemas": False}
        if self.fmt == "avro":
            from trafka.sdk.schemas import AvroSerializer

            self.serializer = AvroSerializer(registry, schema, conf=conf)
        elif self.fmt == "json-schema":
            from trafka.sdk.schemas import JSONSerializer

            self.serializer = JSONSerializer(schema, registry, conf=conf)
        else:
            from trafka.sdk.schemas import ProtobufDeserializer, ProtobufSerializer

            try:
                reader = ProtobufDeserializer(schema_registry_client=registry)
                self.message = reader.message_class(schema)
            except Exception as exc:
                raise click.ClickException(
                    f"subject {subject!r}: schema not usable: {exc}"
                ) from None
            self.serializer = ProtobufSerializer(self.message, registry, conf)

    def encode(self, data: bytes | None, where: str, headers: list[Any]) -> bytes | None:
        if data is None or self.fmt in ("bytes", "string"):
            return data
        try:
            obj = json.loads(data)
        except ValueError as exc:
            raise InputError(f"{where}: the {self.field} is not JSON: {exc}") from None
        if self.fmt == "json":
            return data
        from trafka.sdk.schemas import SchemaSerializationError

        if self.message is not None:
            from google.protobuf import json_format

            try:
                obj = json_format.ParseDict(obj, self.message())
            except json_format.ParseError as exc:
                raise InputError(
                    f"{where}: the {self.field} does not match the schema: {exc}"
                ) from None
        try:
            out: bytes | None = self.serializer.serialize_record(
                obj, self.topic, self.is_key, headers
            )
        except SchemaSerializationError as exc:
            raise InputError(f"{where}: {exc}") from None
        return out


@dataclasses.dataclass(slots=True)
class FieldFormats:
    """The key's and the value's formats of one command, and the registry they need."""

    key: str = "bytes"
    value: str = "bytes"
    registry_url: str | None = None
    key_schema: str | None = None
    value_schema: str | None = None
    timeout: float = 10.0
    _registry: Any = None

    @property
    def plain(self) -> bool:
        return self.key == "bytes" and self.value == "bytes"

    def registry(self) -> Any:
        if self._registry is None and self.registry_url:
            self._registry = registry_client(self.registry_url, self.timeout)
        return self._registry

    def close(self) -> None:
        if self._registry is not None:
            self._registry.close()
            self._registry = None

    def deserializers(self) -> dict[str, Any]:
        """The consumer's settings that decode keys and values (none for bytes)."""
        out = {}
        for field in ("key", "value"):
            fmt = getattr(self, field)
            if fmt != "bytes":
                out[f"{field}.deserializer"] = _Decoder(fmt, self.registry())
        return out

    def encoders(
        self, topic: str
    ) -> Callable[[bytes | None, bytes | None, str, list[Any]], tuple[bytes | None, bytes | None]]:
        """``(key, value, where, headers) -> (key, value)`` encoded for ``topic``.

        Raises:
            click.ClickException: the registry refused or could not be reached.
        """
        from trafka.sdk.schemas import SchemaRegistryError

        try:
            k = _Encoder(self.key, self.registry(), topic, True, self.key_schema)
            v = _Encoder(self.value, self.registry(), topic, False, self.value_schema)
        except SchemaRegistryError as exc:
            raise registry_error(exc) from None

        def encode(
            key: bytes | None, value: bytes | None, where: str, headers: list[Any]
        ) -> tuple[bytes | None, bytes | None]:
            return k.encode(key, where, headers), v.encode(value, where, headers)

        return encode

    def writer(self, opts: OutputFormat, out: IO[bytes]) -> Callable[[Any], None]:
        """consume's record writer, with decoded keys and values."""
        if self.plain:
            return record_writer(opts, out)
        if opts.json:
            return record_writer(opts, out, _decoded_json)
        write = record_writer(opts, out)

        def write_text(record: Any) -> None:
            write(record._replace(key=_as_text(record.key), value=_as_text(record.value)))

        return write_text


def _as_text(field: Any) -> bytes | None:
    from trafka.sdk.schemas.decoded import Decoded

    if not isinstance(field, Decoded):
        return field  # type: ignore[no-any-return]
    if isinstance(field.value, str):
        return field.value.encode("utf-8")
    return json.dumps(field.value, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def _decoded_json(record: Any) -> dict[str, Any]:
    from trafka.sdk.schemas.decoded import Decoded

    out = record_to_json(record._replace(key=None, value=None))
    for field in ("key", "value"):
        decoded = getattr(record, field)
        if isinstance(decoded, Decoded):
            out[field] = decoded.value
            if decoded.schema_id is not None:
                out[f"{field}_schema_id"] = decoded.schema_id
                out[f"{field}_subject"] = decoded.subject
        elif decoded is not None:  # not decoded (bytes): as record_to_json shows bytes
            out[field] = record_to_json(record._replace(key=None, value=decoded))["value"]
    return out


def format_options(*, produce: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add the format options to a command; it receives them as ``formats``
    (a :class:`FieldFormats`)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def wrapper(
            key_format: str | None,
            value_format: str | None,
            serdes: tuple[str, ...],
            schema_registry: str | None,
            key_schema: str | None = None,
            value_schema: str | None = None,
            **kwargs: Any,
        ) -> Any:
            kcat = parse_serdes(serdes)
            chosen = {}
            for field, given in (("key", key_format), ("value", value_format)):
                fmt = _format_name(given, f"--{field}-format") if given else None
                if fmt and kcat.get(field, fmt) != fmt:
                    raise click.UsageError(
                        f"--{field}-format {fmt} and -s {field}={kcat[field]} disagree"
                    )
                chosen[field] = fmt or kcat.get(field, "bytes")
            for field, schema in (("key", key_schema), ("value", value_schema)):
                if schema is not None and chosen[field] not in REGISTRY_TYPES:
                    raise click.UsageError(
                        f"--{field}-schema needs --{field}-format avro, protobuf or json-schema"
                    )
            needs = [f for f, fmt in chosen.items() if fmt in REGISTRY_TYPES]
            if needs and not schema_registry:
                raise click.UsageError(
                    f"--{needs[0]}-format {chosen[needs[0]]} needs a schema registry: "
                    f"--schema-registry URL (-r URL, or ${ENV_REGISTRY})"
                )
            formats = FieldFormats(
                chosen["key"],
                chosen["value"],
                schema_registry if needs else None,
                key_schema,
                value_schema,
                kwargs.get("timeout", 10.0),
            )
            try:
                return fn(formats=formats, **kwargs)
            finally:
                formats.close()

        choices = "bytes (default), string, json, avro, protobuf or json-schema"
        for field in ("value", "key"):
            if produce:
                wrapper = click.option(
                    f"--{field}-schema",
                    type=click.Path(exists=True, dir_okay=False),
                    help=f"Register this schema under TOPIC-{field} and encode the {field}s with it "
                    "(default: the subject's latest).",
                )(wrapper)
        wrapper = click.option(
            "-r",
            "--schema-registry",
            envvar=ENV_REGISTRY,
            metavar="URL",
            help=f"The Schema Registry's URL (also ${ENV_REGISTRY}).",
        )(wrapper)
        wrapper = click.option(
            "-s",
            "serdes",
            multiple=True,
            metavar="[key=|value=]FORMAT",
            help="kcat's spelling of the formats: -s value=avro, -s key=s, -s avro (both).",
        )(wrapper)
        for field in ("value", "key"):
            wrapper = click.option(
                f"--{field}-format", metavar="FORMAT", help=f"The {field}s': {choices}."
            )(wrapper)
        return wrapper

    return decorate
