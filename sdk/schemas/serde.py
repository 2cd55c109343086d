"""What the three formats' serializers and deserializers share: settings,
subject names, the registry's answers cached per serde, and framing.

Rules:

* A serializer resolves a subject's schema once (registering it with
  ``auto.register.schemas``, taking the subject's latest version with
  ``use.latest.version``, a fixed ``use.schema.id``, else looking it up) and
  keeps the answer: after the first record of a subject, serializing makes no
  request. A deserializer parses a writer schema once per id (or GUID).
* Subject names (``subject.name.strategy``): ``topic`` (``<topic>-key`` /
  ``<topic>-value``, the default), ``record`` (the record's full name),
  ``topic_record`` (``<topic>-<full name>``); Confluent's Java class names
  (``TopicNameStrategy``...) are accepted too, or a callable
  ``(topic, is_key, record_name) -> subject``.
* Framing (``schema.id.framing``): ``prefix`` (magic byte, id, payload) or
  ``header`` (the schema's GUID, or its id when the registry gives no GUID, in
  ``__key_schema_id`` / ``__value_schema_id``). Deserializers read either.
* Each serde is a callable as confluent-kafka's are (``serde(obj, ctx)``, ``ctx``
  with ``topic``, ``field`` and ``headers``), and the SDK's producer and
  consumer call :meth:`SchemaSerializer.serialize_record` /
  :meth:`SchemaDeserializer.deserialize_record` with the record's topic,
  headers (and partition and offset), so errors name them.
* Every failure is a :class:`~.types.SchemaSerializationError` naming the
  topic and subject (serializing) or the topic, partition and offset
  (deserializing) and what was wrong; the library's or the registry's error is
  its ``__cause__``.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from ..errors import ConfigError
from .blocking_registry import SchemaRegistryClient
from .framing import FramingError, SchemaRef, guid_frame, header_name, id_frame, read_frame
from .types import RegisteredSchema, Schema, SchemaRegistryError, SchemaSerializationError

__all__ = ["SchemaDeserializer", "SchemaSerializer", "subject_name"]

_STRATEGIES = {
    "topic": "topic",
    "topicnamestrategy": "topic",
    "record": "record",
    "recordnamestrategy": "record",
    "topic_record": "topic_record",
    "topicrecord": "topic_record",
    "topicrecordnamestrategy": "topic_record",
}


def subject_name(strategy: str, topic: str, is_key: bool, record_name: str | None) -> str:
    """The subject of a record under ``strategy`` (see the module doc)."""
    if strategy == "topic":
        return f"{topic}-{'key' if is_key else 'value'}"
    if not record_name:
        raise ValueError(f"the {strategy} subject name strategy needs a named record")
    return record_name if strategy == "record" else f"{topic}-{record_name}"


def _strategy(value: Any) -> Any:
    if callable(value):
        return value
    name = str(value).rsplit(".", 1)[-1].lower()
    if name not in _STRATEGIES:
        raise ConfigError(f"unknown subject.name.strategy {value!r}")
    return _STRATEGIES[name]


def _bool(conf: dict[str, Any], name: str, default: bool) -> bool:
    value = conf.pop(name, default)
    if not isinstance(value, bool):
        raise ConfigError(f"{name} must be a bool, got {value!r}")
    return value


def _registry(client: Any) -> Any:
    if isinstance(client, Mapping):
        return SchemaRegistryClient(client)
    for method in ("register_schema", "get_schema", "get_latest_version", "lookup_schema"):
        if not callable(getattr(client, method, None)):
            raise ConfigError(
                "schema_registry_client must be a blocking SchemaRegistryClient or its settings"
            )
    return client


class _Serde:
    """Settings and the registry shared by serializers and deserializers."""

    schema_type = "AVRO"

    def __init__(
        self, registry: Any, conf: Mapping[str, Any] | None, known: dict[str, Any]
    ) -> None:
        # None only for a deserializer that needs no schema (Protobuf's generated classes).
        self.registry: Any = None if registry is None else _registry(registry)
        given = {k.replace("_", "."): v for k, v in (conf or {}).items()}
        unknown = set(given) - set(known)
        if unknown:
            raise ConfigError(f"unknown {type(self).__name__} setting(s): {sorted(unknown)}")
        self.conf = {**known, **given}
        self._lock = threading.Lock()

    def referenced_schemas(
        self, schema: Schema, seen: set[tuple[str, int]] | None = None
    ) -> list[tuple[str, Schema]]:
        """Every schema ``schema`` references, depth first (name, schema),
        each fetched once per serde."""
        out: list[tuple[str, Schema]] = []
        seen = set() if seen is None else seen
        for ref in schema.references:
            if (ref.subject, ref.version) in seen:
                continue
            seen.add((ref.subject, ref.version))
            registered: RegisteredSchema = self.registry.get_version(ref.subject, ref.version)
            out.extend(self.referenced_schemas(registered.schema, seen))
            out.append((ref.name, registered.schema))
        return out


class SchemaSerializer(_Serde):
    """The registry side of a serializer; a format supplies :meth:`_schema`,
    :meth:`_record_name`, :meth:`_writer` and :meth:`_encode`."""

    def __init__(
        self, registry: Any, conf: Mapping[str, Any] | None, extra: dict[str, Any] | None = None
    ) -> None:
        known = {
            "auto.register.schemas": True,
            "normalize.schemas": False,
            "use.latest.version": False,
            "use.schema.id": None,
            "subject.name.strategy": "topic",
            "schema.id.framing": "prefix",
            **(extra or {}),
        }
        if registry is None:
            raise ConfigError(f"{type(self).__name__} needs a schema_registry_client")
        super().__init__(registry, conf, known)
        c = self.conf
        self.auto_register = _bool(c, "auto.register.schemas", True)
        self.normalize = _bool(c, "normalize.schemas", False)
        self.use_latest = _bool(c, "use.latest.version", False)
        self.use_schema_id = c.pop("use.schema.id")
        self.strategy = _strategy(c.pop("subject.name.strategy"))
        self.framing = c.pop("schema.id.framing")
        if self.framing not in ("prefix", "header"):
            raise ConfigError(
                f"schema.id.framing must be 'prefix' or 'header', got {self.framing!r}"
            )
        # subject -> (the registered schema, the format's parsed writer).
        self._resolved: dict[str, tuple[RegisteredSchema, Any]] = {}

    # -- what a format supplies ---------------------------------------------------------

    def _schema(self, obj: Any) -> Schema:
        """The schema this serializer writes ``obj`` with (registered or looked up)."""
        raise NotImplementedError

    def _record_name(self, obj: Any) -> str | None:
        """The full name of ``obj``'s record (the record strategies), if any."""
        return None

    def _writer(self, registered: RegisteredSchema) -> Any:
        """The format's parsed form of the schema to write with."""
        raise NotImplementedError

    def _encode(self, obj: Any, writer: Any, ctx: Any) -> tuple[bytes, tuple[int, ...] | None]:
        """``obj`` encoded, and Protobuf's message indexes (None for other formats)."""
        raise NotImplementedError

    # -- serializing --------------------------------------------------------------------

    def __call__(self, obj: Any, ctx: Any = None) -> bytes | None:
        """confluent-kafka's calling convention: ``ctx`` has ``topic``, ``field``
        (``key`` or ``value``) and ``headers`` (a list, appended to with header framing)."""
        if ctx is None:
            raise SchemaSerializationError("a schema serializer needs the record's topic (ctx)")
        headers = ctx.headers
        if headers is None and self.framing == "header":
            headers = ctx.headers = []
        return self.serialize_record(obj, ctx.topic, ctx.field == "key", headers, ctx)

    def serialize_record(
        self, obj: Any, topic: str, is_key: bool, headers: Any = None, ctx: Any = None
    ) -> bytes | None:
        """``obj`` framed for ``topic``; with header framing the schema header is
        added to ``headers`` (a list, or a dict).

        Raises:
            SchemaSerializationError: the subject's schema could not be resolved,
                or ``obj`` does not match it.
        """
        if obj is None:
            return None
        subject = self._subject(obj, topic, is_key)
        resolved = self._resolved.get(subject)
        if resolved is None:
            resolved = self._resolve(obj, subject, topic, is_key)
        registered, writer = resolved
        try:
            payload, indexes = self._encode(obj, writer, ctx)
        except SchemaSerializationError:
            raise
        except Exception as exc:
            raise SchemaSerializationError(
                f"does not match schema id {registered.schema_id}: {exc}",
                topic=topic,
                is_key=is_key,
                subject=subject,
            ) from exc
        if self.framing == "prefix":
            return id_frame(registered.schema_id, indexes) + payload
        frame = (
            guid_frame(registered.guid, indexes)
            if registered.guid is not None
            else id_frame(registered.schema_id, indexes)
        )
        if isinstance(headers, dict):
            headers[header_name(is_key)] = frame
        elif isinstance(headers, list):
            headers.append((header_name(is_key), frame))
        else:
            raise SchemaSerializationError(
                "header framing needs the record's headers (a list or a dict)",
                topic=topic,
                is_key=is_key,
                subject=subject,
            )
        return payload

    def needs_registry(self, obj: Any, topic: str, is_key: bool) -> bool:
        """Whether serializing ``obj`` for ``topic`` would ask the registry (its
        subject's schema not resolved yet): an async producer then serializes on
        a worker thread, so that its event loop is not held for the request."""
        if obj is None:
            return False
        try:
            return self._subject(obj, topic, is_key) not in self._resolved
        except SchemaSerializationError:
            return False  # raised at once by serialize_record

    def _subject(self, obj: Any, topic: str, is_key: bool) -> str:
        try:
            strategy = self.strategy
            record = None if strategy == "topic" else self._record_name(obj)
            if callable(strategy):
                return str(strategy(topic, is_key, record))
            return subject_name(strategy, topic, is_key, record)
        except Exception as exc:
            raise SchemaSerializationError(
                f"no subject name: {exc}", topic=topic, is_key=is_key
            ) from exc

    def _resolve(
        self, obj: Any, subject: str, topic: str, is_key: bool
    ) -> tuple[RegisteredSchema, Any]:
        registry = self.registry
        with self._lock:
            hit = self._resolved.get(subject)
            if hit is not None:
                return hit
            try:
                if self.use_schema_id is not None:
                    schema_id = int(self.use_schema_id)
                    registered = RegisteredSchema(schema_id, registry.get_schema(schema_id))
                elif self.use_latest:
                    registered = registry.get_latest_version(subject)
                elif self.auto_register:
                    schema = self._schema(obj)
                    # (confluent-kafka's client returns the id here, its full answer there)
                    register = getattr(registry, "register_schema_full_response", None)
                    register = register or registry.register_schema
                    registered = register(subject, schema, self.normalize)
                else:
                    registered = registry.lookup_schema(subject, self._schema(obj), self.normalize)
                writer = self._writer(registered)
            except SchemaRegistryError as exc:
                raise SchemaSerializationError(
                    f"the registry refused: {exc}", topic=topic, is_key=is_key, subject=subject
                ) from exc
            except SchemaSerializationError:
                raise
            except Exception as exc:
                raise SchemaSerializationError(
                    f"schema not usable: {exc}", topic=topic, is_key=is_key, subject=subject
                ) from exc
            self._resolved[subject] = (registered, writer)
            return registered, writer


class SchemaDeserializer(_Serde):
    """The registry side of a deserializer; a format supplies :meth:`_reader` and :meth:`_decode`."""

    with_indexes = False
    schema_format: str | None = None  # asked of the registry (Protobuf: "serialized")

    def __init__(
        self, registry: Any, conf: Mapping[str, Any] | None, extra: dict[str, Any] | None = None
    ) -> None:
        super().__init__(registry, conf, dict(extra or {}))
        self._readers: dict[Any, Any] = {}
        # What :meth:`preload` could not load, raised by the record's deserializing.
        self._unloadable: dict[Any, SchemaSerializationError] = {}

    def _reader(self, schema: Schema) -> Any:
        """The format's parsed form of a writer schema."""
        raise NotImplementedError

    def _decode(self, payload: memoryview, reader: Any, ref: SchemaRef, ctx: Any) -> Any:
        raise NotImplementedError

    def __call__(self, data: bytes | None, ctx: Any = None) -> Any:
        """confluent-kafka's calling convention (``ctx``: ``topic``, ``field``, ``headers``)."""
        topic = None if ctx is None else ctx.topic
        headers = None if ctx is None else ctx.headers
        is_key = ctx is not None and ctx.field == "key"
        return self.deserialize_record(data, topic, None, None, headers, is_key, ctx)

    def deserialize_record(
        self,
        data: bytes | None,
        topic: str | None,
        partition: int | None,
        offset: int | None,
        headers: Any = None,
        is_key: bool = False,
        ctx: Any = None,
    ) -> Any:
        """The object ``data`` holds (None stays None).

        Raises:
            SchemaSerializationError: the frame is wrong (magic byte, truncated),
                the schema unknown to the registry or the registry unreachable,
                or the payload does not decode with its schema.
        """
        if data is None:
            return None
        where = _where(topic, partition, offset, is_key)
        ref, payload = self._framed(data, headers, is_key, where)
        key = ref.schema_key
        reader = self._readers.get(key)
        if reader is None and self.registry is not None:
            failed = self._unloadable.pop(key, None)
            if failed is not None:
                raise failed
            reader = self._load(ref, key, where)
        try:
            return self._decode(payload, reader, ref, ctx)
        except SchemaSerializationError:
            raise
        except Exception as exc:
            raise SchemaSerializationError(
                f"does not decode with schema {_named(ref)}: {exc!r}", **where
            ) from exc

    def needs_registry(self, data: bytes | None, headers: Any = None, is_key: bool = False) -> bool:
        """Whether deserializing ``data`` would ask the registry (its schema not
        loaded yet): an async consumer then calls :meth:`preload` on a worker
        thread first, so that its event loop is not held for the request."""
        if data is None or self.registry is None:
            return False
        try:
            ref, _ = self._framed(data, headers, is_key, {})
        except SchemaSerializationError:
            return False  # raised at once by deserialize_record
        key = ref.schema_key
        return key not in self._readers and key not in self._unloadable

    def preload(
        self,
        data: bytes | None,
        topic: str | None,
        partition: int | None,
        offset: int | None,
        headers: Any = None,
        is_key: bool = False,
    ) -> None:
        """Load the schema ``data`` names (as :meth:`deserialize_record` would,
        without decoding); a failure is kept and raised by the deserializing of
        that record (once: the next record with that schema asks again)."""
        if data is None or self.registry is None:
            return
        where = _where(topic, partition, offset, is_key)
        ref, _ = self._framed(data, headers, is_key, where)
        key = ref.schema_key
        try:
            self._load(ref, key, where)
        except SchemaSerializationError as exc:
            self._unloadable[key] = exc

    def _framed(
        self, data: bytes, headers: Any, is_key: bool, where: dict[str, Any]
    ) -> tuple[SchemaRef, memoryview]:
        try:
            frame = _header(headers, header_name(is_key))
            if frame is not None:
                ref, _ = read_frame(frame, self.with_indexes)
                return ref, memoryview(data)
            ref, start = read_frame(data, self.with_indexes)
            return ref, memoryview(data)[start:]
        except FramingError as exc:
            raise SchemaSerializationError(f"not a schema registry frame: {exc}", **where) from exc

    def _load(self, ref: SchemaRef, key: Any, where: dict[str, Any]) -> Any:
        with self._lock:
            hit = self._readers.get(key)
            if hit is not None:
                return hit
            try:
                if ref.guid is not None:
                    schema = self.registry.get_schema_by_guid(ref.guid, self.schema_format)
                else:
                    schema = self.registry.get_schema(ref.schema_id, None, self.schema_format)
                reader = self._reader(schema)
            except SchemaRegistryError as exc:
                raise SchemaSerializationError(
                    f"schema {_named(ref)}: {exc.message} (registry error_code {exc.error_code})",
                    **where,
                ) from exc
            except Exception as exc:
                raise SchemaSerializationError(
                    f"schema {_named(ref)} not usable: {exc!r}", **where
                ) from exc
            self._readers[key] = reader
            return reader


def _where(
    topic: str | None, partition: int | None, offset: int | None, is_key: bool
) -> dict[str, Any]:
    """Where a record is, as a deserializing error names it."""
    return {"topic": topic, "partition": partition, "offset": offset, "is_key": is_key}


def _named(ref: SchemaRef) -> str:
    return f"GUID {ref.guid}" if ref.guid is not None else f"id {ref.schema_id}"


def _header(headers: Any, name: str) -> bytes | None:
    if not headers:
        return None
    if isinstance(headers, Mapping):
        value = headers.get(name)
        return None if value is None else bytes(value)
    found = None
    for k, v in headers:
        if k == name and v is not None:
            found = bytes(v)  # the last one wins, as a header map would
    return found
