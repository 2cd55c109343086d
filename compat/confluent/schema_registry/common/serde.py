"""confluent-kafka's ``confluent_kafka.schema_registry.common.serde``: what the
sync and async serdes share, none of it asking the registry.

Rules:

* :class:`SchemaId` is the schema a record names: an id (magic byte ``0`` and
  4 bytes, big-endian) or a GUID (magic byte ``1`` and 16 bytes), then for
  Protobuf the message indexes (the layout is :mod:`trafka.sdk.schemas.framing`'s,
  which reads and writes the bytes here).
* The schema id serializers put it in front of the payload
  (:func:`prefix_schema_id_serializer`, the default) or in the record's
  ``__key_schema_id`` / ``__value_schema_id`` header
  (:func:`header_schema_id_serializer`, by GUID); the deserializers read the
  header first and else the prefix (:func:`dual_schema_id_deserializer`, the
  default), or only the prefix.
* Subject name strategies are callables ``(ctx, record_name) -> subject``.
* Domain rules: a :class:`RuleExecutor` (registered by its ``type()`` in a
  :class:`~..rule_registry.RuleRegistry`) transforms or checks a message in a
  :class:`RuleContext`; a :class:`RuleAction` runs on its success or failure.
"""

from __future__ import annotations

import abc
import contextvars
import enum
import io
import threading
import uuid
from collections.abc import Callable, Generator
from typing import Any, Generic, NamedTuple, TypeVar

from trafka.sdk.schemas.framing import (
    KEY_SCHEMA_ID_HEADER,
    VALUE_SCHEMA_ID_HEADER,
    FramingError,
    decode_indexes,
    encode_indexes,
)

from ...serialization import MessageField, SerializationError

__all__ = [
    "DLQ_HEADER_PREFIX",
    "DLQ_RULE_EXCEPTION_HEADER",
    "DLQ_RULE_MODE_HEADER",
    "DLQ_RULE_NAME_HEADER",
    "DLQ_RULE_SUBJECT_HEADER",
    "DLQ_RULE_TOPIC_HEADER",
    "FALLBACK_TYPE",
    "KAFKA_CLUSTER_ID",
    "STRATEGY_TYPE_MAP",
    "AssociatedNameStrategy",
    "AsyncAssociatedNameStrategy",
    "Steps",
    "ErrorAction",
    "FieldContext",
    "FieldRuleExecutor",
    "FieldTransform",
    "FieldTransformer",
    "FieldType",
    "Migration",
    "NoneAction",
    "ParsedSchemaCache",
    "RuleAction",
    "RuleBase",
    "RuleConditionError",
    "RuleContext",
    "RuleError",
    "RuleExecutor",
    "SchemaId",
    "SubjectNameStrategyType",
    "ValidationRulesExecution",
    "ask",
    "clear_original_key",
    "dual_schema_id_deserializer",
    "execute_rules",
    "get_original_key",
    "has_domain_rules",
    "has_migration_rules",
    "is_not_found",
    "migration_mode",
    "header_schema_id_serializer",
    "prefix_schema_id_deserializer",
    "prefix_schema_id_serializer",
    "record_subject_name_strategy",
    "reference_subject_name_strategy",
    "run_steps",
    "run_steps_async",
    "serialization_error",
    "set_original_key",
    "topic_record_subject_name_strategy",
    "topic_subject_name_strategy",
]

DLQ_HEADER_PREFIX = "__rule."
DLQ_RULE_NAME_HEADER = DLQ_HEADER_PREFIX + "name"
DLQ_RULE_MODE_HEADER = DLQ_HEADER_PREFIX + "mode"
DLQ_RULE_SUBJECT_HEADER = DLQ_HEADER_PREFIX + "subject"
DLQ_RULE_TOPIC_HEADER = DLQ_HEADER_PREFIX + "topic"
DLQ_RULE_EXCEPTION_HEADER = DLQ_HEADER_PREFIX + "exception"

# The key a key serializer last saw in this thread or task, for the value's
# rule actions (a dead letter queue writes it); the value's serde clears it.
_original_key: contextvars.ContextVar[Any] = contextvars.ContextVar(
    "trafka_sr_original_key", default=None
)


def set_original_key(key: Any) -> None:
    """Remember the record's key for the value's serde (see the module doc)."""
    _original_key.set(key)


def get_original_key() -> Any:
    """The key :func:`set_original_key` remembered, or None."""
    return _original_key.get()


def clear_original_key() -> None:
    """Forget the remembered key."""
    _original_key.set(None)


# -- the schema a record names ---------------------------------------------------------


class SchemaId:
    """A schema's id or GUID, as a record's bytes carry it.

    Args:
        schema_type: ``AVRO``, ``JSON`` or ``PROTOBUF`` (Protobuf frames carry
            message indexes too).
        schema_id: the registry's id.
        guid: the schema's GUID (text).
        message_indexes: Protobuf's path to the message in its file.
    """

    __slots__ = ("guid", "id", "message_indexes", "schema_type")

    def __init__(
        self,
        schema_type: str,
        schema_id: int | None = None,
        guid: str | uuid.UUID | None = None,
        message_indexes: list[int] | None = None,
    ) -> None:
        self.schema_type = schema_type
        self.id = schema_id
        self.guid = None if guid is None else uuid.UUID(str(guid))
        self.message_indexes = message_indexes

    def __repr__(self) -> str:
        return (
            f"SchemaId({self.schema_type!r}, id={self.id}, guid={self.guid},"
            f" message_indexes={self.message_indexes})"
        )

    def from_bytes(self, payload: io.BytesIO) -> io.BytesIO:
        """Read the magic byte, the id or GUID (and the message indexes) from
        ``payload``; returns ``payload``, positioned at what follows.

        Raises:
            SerializationError: a magic byte neither 0 nor 1, or truncated bytes.
        """
        magic = payload.read(1)
        if magic == b"\x00":
            raw = payload.read(4)
            if len(raw) != 4:
                raise SerializationError("Truncated schema id")
            self.id = int.from_bytes(raw, "big")
        elif magic == b"\x01":
            raw = payload.read(16)
            if len(raw) != 16:
                raise SerializationError("Truncated schema GUID")
            self.guid = uuid.UUID(bytes=raw)
        else:
            raise SerializationError("Invalid magic byte")
        if self.schema_type == "PROTOBUF":
            rest = payload.read()
            try:
                indexes, used = decode_indexes(rest, 0)
            except FramingError as exc:
                raise SerializationError(str(exc)) from exc
            self.message_indexes = list(indexes)
            payload = io.BytesIO(rest[used:])
        return payload

    def _indexes(self) -> bytes:
        return b"" if self.message_indexes is None else encode_indexes(self.message_indexes)

    def id_to_bytes(self) -> bytes:
        """Magic byte 0, the id, and the message indexes (if any).

        Raises:
            SerializationError: no id.
        """
        if self.id is None:
            raise SerializationError("Schema ID is not set")
        return b"\x00" + self.id.to_bytes(4, "big") + self._indexes()

    def guid_to_bytes(self) -> bytes:
        """Magic byte 1, the GUID, and the message indexes (if any).

        Raises:
            SerializationError: no GUID.
        """
        if self.guid is None:
            raise SerializationError("Schema GUID is not set")
        return b"\x01" + self.guid.bytes + self._indexes()


def _header_name(ctx: Any) -> str:
    return KEY_SCHEMA_ID_HEADER if ctx.field == MessageField.KEY else VALUE_SCHEMA_ID_HEADER


def header_schema_id_serializer(payload: bytes, ctx: Any, schema_id: SchemaId) -> bytes:
    """Put ``schema_id``'s GUID in the record's schema id header; the payload as is.

    Raises:
        SerializationError: no context, no headers, or headers neither a list nor a dict.
    """
    if ctx is None:
        raise SerializationError("SerializationContext is required for header_schema_id_serializer")
    headers = ctx.headers
    if headers is None:
        raise SerializationError("Missing headers")
    value = schema_id.guid_to_bytes()
    if isinstance(headers, list):
        headers.append((_header_name(ctx), value))
    elif isinstance(headers, dict):
        headers[_header_name(ctx)] = value
    else:
        raise SerializationError("Invalid headers type")
    return payload


def prefix_schema_id_serializer(payload: bytes, ctx: Any, schema_id: SchemaId) -> bytes:
    """``payload`` after magic byte 0 and ``schema_id``'s id (the classic framing)."""
    return schema_id.id_to_bytes() + payload


def dual_schema_id_deserializer(payload: bytes, ctx: Any, schema_id: SchemaId) -> io.BytesIO:
    """Read the schema from the record's schema id header if it has one (the
    payload is then all encoding), else from the payload's prefix; the encoding."""
    found = None
    headers = None if ctx is None else ctx.headers
    if isinstance(headers, dict):
        found = headers.get(_header_name(ctx))
    elif headers is not None:
        name = _header_name(ctx)
        found = next((v for k, v in headers if k == name), None)
    if found is not None:
        schema_id.from_bytes(io.BytesIO(found))
        return io.BytesIO(payload)
    return schema_id.from_bytes(io.BytesIO(payload))


def prefix_schema_id_deserializer(payload: bytes, ctx: Any, schema_id: SchemaId) -> io.BytesIO:
    """Read the schema from the payload's prefix; the encoding after it."""
    return schema_id.from_bytes(io.BytesIO(payload))


# -- subject names ---------------------------------------------------------------------


def topic_subject_name_strategy(ctx: Any, record_name: str | None) -> str | None:
    """``<topic>-key`` or ``<topic>-value``.

    Raises:
        ValueError: no context.
    """
    if ctx is None:
        raise ValueError(
            "SerializationContext is required for topic_subject_name_strategy. "
            "Either provide a SerializationContext or use record_subject_name_strategy."
        )
    return f"{ctx.topic}-{ctx.field}"


def topic_record_subject_name_strategy(ctx: Any, record_name: str | None) -> str | None:
    """``<topic>-<record's full name>`` (None without a record name).

    Raises:
        ValueError: no context.
    """
    if ctx is None:
        raise ValueError(
            "SerializationContext is required for topic_record_subject_name_strategy. "
            "Either provide a SerializationContext or use record_subject_name_strategy."
        )
    return None if record_name is None else f"{ctx.topic}-{record_name}"


def record_subject_name_strategy(ctx: Any, record_name: str | None) -> str | None:
    """The record's full name (no context needed)."""
    return record_name


def reference_subject_name_strategy(ctx: Any, schema_ref: Any) -> str | None:
    """A referenced schema's subject: its name (a .proto file's name)."""
    return None if schema_ref is None else schema_ref.name


class SubjectNameStrategyType(str, enum.Enum):  # noqa: UP042 (str() as confluent-kafka's)
    """The strategies ``subject.name.strategy.type`` names."""

    NONE = "NONE"
    TOPIC = "TOPIC"
    RECORD = "RECORD"
    TOPIC_RECORD = "TOPIC_RECORD"
    ASSOCIATED = "ASSOCIATED"


STRATEGY_TYPE_MAP: dict[SubjectNameStrategyType, Callable[[Any, str | None], str | None]] = {
    SubjectNameStrategyType.TOPIC: topic_subject_name_strategy,
    SubjectNameStrategyType.RECORD: record_subject_name_strategy,
    SubjectNameStrategyType.TOPIC_RECORD: topic_record_subject_name_strategy,
}


class ValidationRulesExecution(str, enum.Enum):  # noqa: UP042 (str() as confluent-kafka's)
    """When a serde checks a schema's inline validation rules (accepted; trafka
    has no inline validation rules, see docs/migrating-from-confluent-kafka.md)."""

    DISABLED = "DISABLED"
    BEFORE_DOMAIN_RULES = "BEFORE_DOMAIN_RULES"
    AFTER_DOMAIN_RULES = "AFTER_DOMAIN_RULES"


# -- domain rules ----------------------------------------------------------------------


class FieldType(str, enum.Enum):  # noqa: UP042 (str() as confluent-kafka's)
    """A field's type, as a field rule sees it."""

    RECORD = "RECORD"
    ENUM = "ENUM"
    ARRAY = "ARRAY"
    MAP = "MAP"
    COMBINED = "COMBINED"
    FIXED = "FIXED"
    STRING = "STRING"
    BYTES = "BYTES"
    INT = "INT"
    LONG = "LONG"
    FLOAT = "FLOAT"
    DOUBLE = "DOUBLE"
    BOOLEAN = "BOOLEAN"
    NULL = "NULL"


class FieldContext:
    """The field a field rule is at: its containing value, full name, name,
    type and tags."""

    __slots__ = ("containing_message", "field_type", "full_name", "name", "tags")

    def __init__(
        self, containing_message: Any, full_name: str, name: str, field_type: FieldType, tags: Any
    ) -> None:
        self.containing_message = containing_message
        self.full_name = full_name
        self.name = name
        self.field_type = field_type
        self.tags = set(tags or ())

    def is_primitive(self) -> bool:
        """Whether the field holds a scalar (no record, array, map or union)."""
        return self.field_type in {
            FieldType.INT,
            FieldType.LONG,
            FieldType.FLOAT,
            FieldType.DOUBLE,
            FieldType.BOOLEAN,
            FieldType.NULL,
            FieldType.STRING,
            FieldType.BYTES,
        }

    def type_name(self) -> str:
        """The field type's name (``STRING``...)."""
        return self.field_type.name


FieldTransform = Callable[["RuleContext", FieldContext, Any], Any]
FieldTransformer = Callable[["RuleContext", FieldTransform, Any], Any]


class RuleContext:
    """What a rule runs in: the serde's context, the source and target schemas,
    the subject, the rule mode and rule, its position in its rule set, the
    schema's inline tags and the format's field transformer."""

    def __init__(
        self,
        ser_ctx: Any,
        source: Any,
        target: Any,
        subject: str,
        rule_mode: Any,
        rule: Any,
        index: int,
        rules: list[Any],
        inline_tags: dict[str, set[str]] | None,
        field_transformer: FieldTransformer | None,
    ) -> None:
        self.ser_ctx = ser_ctx
        self.source = source
        self.target = target
        self.subject = subject
        self.rule_mode = rule_mode
        self.rule = rule
        self.index = index
        self.rules = rules
        self.inline_tags = inline_tags or {}
        self.field_transformer = field_transformer
        self._fields: list[FieldContext] = []

    def get_parameter(self, name: str) -> str | None:
        """The rule's parameter ``name``, else the target schema's metadata property."""
        params = getattr(self.rule, "params", None)
        found = _lookup(getattr(params, "params", params), name)
        if found is not None:
            return str(found)
        metadata = getattr(self.target, "metadata", None)
        props = getattr(metadata, "properties", None)
        found = _lookup(getattr(props, "properties", props), name)
        return None if found is None else str(found)

    def current_field(self) -> FieldContext | None:
        """The field being transformed, if any."""
        return self._fields[-1] if self._fields else None

    def enter_field(
        self, containing_message: Any, full_name: str, name: str, field_type: FieldType, tags: Any
    ) -> FieldContext:
        """Step into a field (its tags: the given and the schema's inline ones)."""
        all_tags = set(tags or ()) | self.get_tags(full_name)
        field = FieldContext(containing_message, full_name, name, field_type, all_tags)
        self._fields.append(field)
        return field

    def get_tags(self, full_name: str) -> set[str]:
        """The inline tags of the field ``full_name`` (wildcards as the rules write them)."""
        from ..wildcard_matcher import wildcard_match

        out: set[str] = set()
        for pattern, tags in self.inline_tags.items():
            if wildcard_match(full_name, pattern):
                out |= set(tags)
        return out

    def exit_field(self) -> None:
        """Step out of the current field."""
        if self._fields:
            self._fields.pop()


def _lookup(mapping: Any, name: str) -> Any:
    return mapping.get(name) if isinstance(mapping, dict) else None


class RuleBase(metaclass=abc.ABCMeta):
    """What rule executors and actions share: settings and a type name."""

    def configure(self, client_conf: dict[str, Any], rule_conf: dict[str, Any]) -> None:  # noqa: B027
        """Take the registry client's and the rules' settings (nothing by default)."""

    @abc.abstractmethod
    def type(self) -> str:
        """The rule type this handles (``CEL``, ``ENCRYPT``...)."""

    def close(self) -> None:  # noqa: B027
        """Release what the rule holds (nothing by default)."""


class RuleExecutor(RuleBase):
    """Runs a rule on a whole message."""

    @abc.abstractmethod
    def transform(self, ctx: RuleContext, message: Any) -> Any:
        """The message after the rule (a condition returns a bool)."""


class FieldRuleExecutor(RuleExecutor):
    """Runs a rule on each field of a message, through the format's field transformer."""

    @abc.abstractmethod
    def new_transform(self, ctx: RuleContext) -> FieldTransform:
        """The per-field transform of this rule."""

    def transform(self, ctx: RuleContext, message: Any) -> Any:
        transformer = ctx.field_transformer
        if transformer is None:
            raise RuleError("this format has no field transformer")
        return transformer(ctx, self.new_transform(ctx), message)


class RuleAction(RuleBase):
    """Runs after a rule, on its success or its failure (``ex``)."""

    @abc.abstractmethod
    def run(self, ctx: RuleContext, message: Any, ex: Exception | None) -> None:
        """Act on the rule's outcome."""


class RuleError(Exception):
    """A rule could not run, or failed."""


class RuleConditionError(RuleError):
    """A condition rule's check came out false."""

    def __init__(self, rule: Any) -> None:
        super().__init__(self.error_message(rule))
        self.rule = rule

    @staticmethod
    def error_message(rule: Any) -> str:
        doc = getattr(rule, "doc", None)
        if doc:
            return str(doc)
        expr = getattr(rule, "expr", None)
        return (
            f"Expr failed: '{expr}'" if expr else f"Condition failed: '{getattr(rule, 'name', '')}'"
        )


class ErrorAction(RuleAction):
    """The ``ERROR`` action: a failed rule fails the serde."""

    def type(self) -> str:
        return "ERROR"

    def run(self, ctx: RuleContext, message: Any, ex: Exception | None) -> None:
        raise SerializationError(f"Rule failed: {ex}" if ex is not None else "Rule failed") from ex


class NoneAction(RuleAction):
    """The ``NONE`` action: nothing."""

    def type(self) -> str:
        return "NONE"

    def run(self, ctx: RuleContext, message: Any, ex: Exception | None) -> None:
        pass


class Migration:
    """One step of a schema migration: the rule mode and the two schemas."""

    def __init__(self, rule_mode: Any, source: Any, target: Any) -> None:
        self.rule_mode = rule_mode
        self.source = source
        self.target = target


T = TypeVar("T")


class ParsedSchemaCache(Generic[T]):
    """A format's parsed form of each schema a serde has seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._parsed: dict[Any, T] = {}

    @staticmethod
    def _key(schema: Any) -> Any:
        refs = tuple(
            (r.name, r.subject, r.version) for r in (getattr(schema, "references", None) or ())
        )
        return (schema.schema_str, getattr(schema, "schema_type", None), refs)

    def set(self, schema: Any, parsed_schema: T) -> None:
        """Keep ``parsed_schema`` as ``schema``'s parsed form."""
        with self._lock:
            self._parsed[self._key(schema)] = parsed_schema

    def get_parsed_schema(self, schema: Any) -> T | None:
        """``schema``'s parsed form, if kept."""
        with self._lock:
            return self._parsed.get(self._key(schema))

    def clear(self) -> None:
        """Forget every parsed schema."""
        with self._lock:
            self._parsed.clear()


# -- running a schema's domain rules -----------------------------------------------------


def _name(value: Any) -> str | None:
    """An enum's (or a plain string's) name: ``RuleMode.WRITE`` -> ``WRITE``."""
    if value is None:
        return None
    return str(getattr(value, "value", value)).upper()


def _applies(rule_mode: str, mode: str | None) -> bool:
    if mode == "WRITEREAD":
        return rule_mode in ("WRITE", "READ")
    if mode == "UPDOWN":
        return rule_mode in ("UPGRADE", "DOWNGRADE")
    return mode == rule_mode


def _action_name(rule: Any, rule_mode: str, name: str | None) -> str | None:
    # "ERROR,NONE" on a WRITEREAD (UPDOWN) rule: the first on write (upgrade), the second on read.
    if name and "," in name and _name(rule.mode) in ("WRITEREAD", "UPDOWN"):
        first, _, second = name.partition(",")
        return first if rule_mode in ("WRITE", "UPGRADE") else second
    return name or None


def execute_rules(
    rule_registry: Any,
    ser_ctx: Any,
    subject: str,
    rule_mode: Any,
    source: Any,
    target: Any,
    message: Any,
    inline_tags: dict[str, set[str]] | None = None,
    field_transformer: FieldTransformer | None = None,
    phase: str = "DOMAIN",
) -> Any:
    """``message`` after the domain rules (``phase="ENCODING"``: the encoding
    rules, on the payload's bytes) of ``target``'s rule set that apply in
    ``rule_mode`` (``WRITE``/``READ``; read runs them last to first), or its
    migration rules (``UPGRADE``; ``DOWNGRADE``: ``source``'s, last to first): each rule's
    executor (by its type, from ``rule_registry``) checks (a CONDITION) or
    changes (a TRANSFORM) the message, then its ``on_success`` action runs (NONE
    by default), or on an error its ``on_failure`` one (ERROR by default: the
    serde fails with a :class:`SerializationError`). A rule type's override in
    the rule registry may disable it or replace its actions.
    """
    mode = _name(rule_mode) or ""
    if mode == "UPGRADE":
        rules = list(getattr(getattr(target, "rule_set", None), "migration_rules", None) or ())
    elif mode == "DOWNGRADE":
        rules = list(getattr(getattr(source, "rule_set", None), "migration_rules", None) or ())
        rules.reverse()
    else:
        which = "encoding_rules" if phase == "ENCODING" else "domain_rules"
        rules = list(getattr(getattr(target, "rule_set", None), which, None) or ())
        if mode == "READ":
            rules.reverse()
    if message is None or not rules:
        return message
    for index, rule in enumerate(rules):
        override = rule_registry.get_override(rule.type) if rule.type else None
        disabled = (
            override.disabled if override and override.disabled is not None else rule.disabled
        )
        if disabled or not _applies(mode, _name(rule.mode)):
            continue
        ctx = RuleContext(
            ser_ctx,
            source,
            target,
            subject,
            rule_mode,
            rule,
            index,
            rules,
            inline_tags,
            field_transformer,
        )
        on_success = (override.on_success if override else None) or rule.on_success
        on_failure = (override.on_failure if override else None) or rule.on_failure
        executor = rule_registry.get_executor(str(rule.type or "").upper())
        if executor is None:
            error = RuleError(f"could not find rule executor of type {rule.type}")
            _run_action(rule_registry, ctx, rule, mode, on_failure, message, error, "ERROR")
            return message
        try:
            result = executor.transform(ctx, message)
            if _name(rule.kind) == "CONDITION":
                if not result:
                    raise RuleConditionError(rule)
            elif _name(rule.kind) == "TRANSFORM":
                message = result
        except SerializationError:
            raise
        except Exception as exc:
            _run_action(rule_registry, ctx, rule, mode, on_failure, message, exc, "ERROR")
        else:
            _run_action(rule_registry, ctx, rule, mode, on_success, message, None, "NONE")
    return message


def _run_action(
    rule_registry: Any,
    ctx: RuleContext,
    rule: Any,
    mode: str,
    name: str | None,
    message: Any,
    error: Exception | None,
    default: str,
) -> None:
    chosen = _action_name(rule, mode, name) or default
    if chosen == "ERROR":
        action: Any = ErrorAction()
    elif chosen == "NONE":
        action = NoneAction()
    else:
        action = rule_registry.get_action(chosen)
        if action is None:
            raise SerializationError(f"Could not find rule action of type {chosen}")
    try:
        action.run(ctx, message, error)
    except SerializationError:
        raise
    except Exception as exc:
        raise SerializationError(f"rule action {chosen} failed: {exc}") from exc


def has_domain_rules(schema: Any) -> bool:
    """Whether ``schema`` carries domain rules (a serde then needs its subject to run them)."""
    return bool(getattr(getattr(schema, "rule_set", None), "domain_rules", None))


def has_encoding_rules(schema: Any) -> bool:
    """Whether ``schema`` carries encoding rules (run on the payload's bytes:
    ``ENCRYPT_PAYLOAD``)."""
    return bool(getattr(getattr(schema, "rule_set", None), "encoding_rules", None))


def migration_mode(source_version: int, target_version: int) -> str | None:
    """``UPGRADE`` from an older writer to a newer reader, ``DOWNGRADE`` the
    other way, None between equal versions."""
    if source_version < target_version:
        return "UPGRADE"
    return "DOWNGRADE" if source_version > target_version else None


def has_migration_rules(schema: Any, mode: str) -> bool:
    """Whether ``schema`` has migration rules for ``mode`` (or for both: ``UPDOWN``)."""
    rules = getattr(getattr(schema, "rule_set", None), "migration_rules", None) or ()
    return any(_name(r.mode) in (mode, "UPDOWN") for r in rules)


# -- the steps of a serde: the registry calls it needs, made by its driver --------------

KAFKA_CLUSTER_ID = "subject.name.strategy.kafka.cluster.id"
FALLBACK_TYPE = "subject.name.strategy.fallback.type"


class _Ask(NamedTuple):
    """A step's registry call: confluent-kafka's method name and arguments."""

    method: str
    args: tuple[Any, ...]


Steps = Generator[_Ask, Any, T]


def ask(method: str, *args: Any) -> Steps[Any]:
    """One registry call, as a step (``answer = yield from ask(...)``)."""
    return (yield _Ask(method, args))


def run_steps(registry: Any, steps: Steps[T]) -> T:
    """Run ``steps`` against a blocking client: each call made, its answer sent
    back (its error thrown in); the steps' result."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            asked = steps.throw(error) if error is not None else steps.send(send)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        send, error = None, None
        try:
            send = getattr(registry, asked.method)(*asked.args)
        except Exception as exc:
            error = exc


async def run_steps_async(registry: Any, steps: Steps[T]) -> T:
    """:func:`run_steps` against an async client (each call awaited)."""
    send: Any = None
    error: BaseException | None = None
    while True:
        try:
            asked = steps.throw(error) if error is not None else steps.send(send)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        send, error = None, None
        try:
            send = await getattr(registry, asked.method)(*asked.args)
        except Exception as exc:
            error = exc


_AS_SERIALIZATION_ERROR: dict[type, type] = {}


def serialization_error(exc: Exception) -> Exception:
    """``exc`` as a :class:`SerializationError` that is still of its own type
    (a plain SerializationError where the two types cannot be combined)."""
    if isinstance(exc, SerializationError):
        return exc
    kind = type(exc)
    made = _AS_SERIALIZATION_ERROR.get(kind)
    if made is None:
        try:
            made = type(kind.__name__, (SerializationError, kind), {"__module__": __name__})
        except TypeError:
            made = SerializationError
        _AS_SERIALIZATION_ERROR[kind] = made
    try:
        out: Exception = made(str(exc))
    except Exception:
        out = SerializationError(str(exc))
    out.__cause__ = exc
    return out


def is_not_found(exc: Exception) -> bool:
    """Whether ``exc`` is the registry's 404 (no such subject, schema or version)."""
    status = getattr(exc, "http_status_code", getattr(exc, "status", None))
    return status == 404


class AssociatedNameStrategy:
    """The default subject name strategy: the subject the registry associates
    with the topic (its key or value), else ``subject.name.strategy.fallback.type``
    (TOPIC by default). A registry without associations (or a client without
    ``get_associations_by_resource_name``) means the fallback."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, bool, str | None], str] = {}

    def steps(
        self, ctx: Any, record_name: str | None, conf: dict[str, Any] | None, registry: Any
    ) -> Steps[str | None]:
        """The subject, asking the registry once per topic, field and record name."""
        if ctx is None:
            raise ValueError(
                "SerializationContext is required for AssociatedNameStrategy. "
                "Either provide a SerializationContext or use a different strategy."
            )
        if ctx.topic is None:
            return None
        is_key = ctx.field == MessageField.KEY
        key = (ctx.topic, is_key, record_name)
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None:
            return hit
        found: list[Any] = []
        if registry is not None and callable(
            getattr(registry, "get_associations_by_resource_name", None)
        ):
            namespace = (conf or {}).get(KAFKA_CLUSTER_ID) or "-"
            try:
                found = list(
                    (
                        yield from ask(
                            "get_associations_by_resource_name",
                            ctx.topic,
                            namespace,
                            "topic",
                            ["key" if is_key else "value"],
                            0,
                            -1,
                        )
                    )
                    or ()
                )
            except Exception as exc:
                if not is_not_found(exc):
                    raise
        if len(found) > 1:
            raise SerializationError(f"Multiple associated subjects found for topic {ctx.topic}")
        subject = found[0].subject if found else _fallback(conf, ctx, record_name)
        if subject is not None:
            with self._lock:
                self._cache[key] = subject
        return subject

    def __call__(
        self,
        ctx: Any,
        record_name: str | None,
        schema_registry_client: Any = None,
        conf: Any = None,
    ) -> str | None:
        """The subject, asking a blocking client (see :meth:`steps`)."""
        return run_steps(
            schema_registry_client, self.steps(ctx, record_name, conf, schema_registry_client)
        )

    def clear_cache(self) -> None:
        """Forget the subjects found."""
        with self._lock:
            self._cache.clear()


class AsyncAssociatedNameStrategy(AssociatedNameStrategy):
    """:class:`AssociatedNameStrategy` asking an async client (``await strategy(...)``)."""

    async def __call__(  # type: ignore[override]
        self,
        ctx: Any,
        record_name: str | None,
        schema_registry_client: Any = None,
        conf: Any = None,
    ) -> str | None:
        steps = self.steps(ctx, record_name, conf, schema_registry_client)
        return await run_steps_async(schema_registry_client, steps)


def _fallback(conf: dict[str, Any] | None, ctx: Any, record_name: str | None) -> str | None:
    kind = (conf or {}).get(FALLBACK_TYPE) or SubjectNameStrategyType.TOPIC
    try:
        kind = SubjectNameStrategyType(str(getattr(kind, "value", kind)).upper())
    except ValueError:
        raise ValueError(f"Invalid value for {FALLBACK_TYPE}: {kind}") from None
    if kind == SubjectNameStrategyType.NONE:
        raise SerializationError(f"No associated subject found for topic {ctx.topic}")
    if kind == SubjectNameStrategyType.ASSOCIATED:
        raise ValueError(f"Invalid value for {FALLBACK_TYPE}: ASSOCIATED")
    return STRATEGY_TYPE_MAP[kind](ctx, record_name)
