"""confluent-kafka's ``confluent_kafka.schema_registry.serde``: the base classes
of the Avro, JSON Schema and Protobuf serdes, sync and async, and the names of
:mod:`.common.serde`.

Rules:

* A serde's work is written once, as a generator of *steps*: it yields each
  registry call it needs (``_Ask``: a method name of confluent-kafka's client
  and its arguments) and is sent the answer (or thrown the error). The sync
  serdes run the steps against a ``SchemaRegistryClient``, the async ones
  await an ``AsyncSchemaRegistryClient``'s coroutines; nothing else differs.
* A serializer resolves its subject's schema once per subject (registering it
  with ``auto.register.schemas``, else looking it up), unless a fixed
  ``use.schema.id``, ``use.latest.with.metadata`` or ``use.latest.version`` names
  the schema to write with; that one is asked of the client for each record
  (the client caches it).
* A deserializer reads the schema id (header, else prefix), fetches that
  schema once per serde, and decodes; with ``use.latest.version`` (or
  ``use.latest.with.metadata``) the subject's latest schema is the reader.
* Settings are checked as confluent-kafka 2.16.1 checks them, with its
  messages (``ValueError``); an unknown one is an error naming it.
* Encoding and decoding errors are raised as :class:`SerializationError`
  subclasses that are also the library's error type (a ``ValueError`` stays a
  ``ValueError``), so code catching either works.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import threading
from collections.abc import Callable, Generator
from typing import Any, NamedTuple, TypeVar

from ..serialization import Deserializer, MessageField, Serializer
from .common.serde import (
    DLQ_HEADER_PREFIX,
    DLQ_RULE_EXCEPTION_HEADER,
    DLQ_RULE_MODE_HEADER,
    DLQ_RULE_NAME_HEADER,
    DLQ_RULE_SUBJECT_HEADER,
    DLQ_RULE_TOPIC_HEADER,
    FALLBACK_TYPE,
    KAFKA_CLUSTER_ID,
    STRATEGY_TYPE_MAP,
    AssociatedNameStrategy,
    AsyncAssociatedNameStrategy,
    ErrorAction,
    FieldContext,
    FieldRuleExecutor,
    FieldTransform,
    FieldTransformer,
    FieldType,
    Migration,
    NoneAction,
    ParsedSchemaCache,
    RuleAction,
    RuleBase,
    RuleConditionError,
    RuleContext,
    RuleError,
    RuleExecutor,
    SchemaId,
    Steps,
    SubjectNameStrategyType,
    ValidationRulesExecution,
    ask,
    clear_original_key,
    dual_schema_id_deserializer,
    execute_rules,
    get_original_key,
    has_domain_rules,
    has_encoding_rules,
    has_migration_rules,
    is_not_found,
    migration_mode,
    prefix_schema_id_serializer,
    run_steps,
    run_steps_async,
    set_original_key,
)
from .rule_registry import RuleRegistry

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
    "AsyncBaseSerde",
    "async_build_serde",
    "build_serde",
    "AsyncBaseDeserializer",
    "AsyncBaseSerializer",
    "BaseDeserializer",
    "BaseSerde",
    "BaseSerializer",
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
    "clear_original_key",
    "get_original_key",
    "set_original_key",
]

T = TypeVar("T")


def rule_mode(name: str) -> Any:
    """The client's ``RuleMode`` named ``name`` (the name itself without one)."""
    from .. import schema_registry as package

    kind = getattr(package, "RuleMode", None)
    return name if kind is None else kind(name)


def check_bool(conf: dict[str, Any], name: str) -> bool:
    value = conf.pop(name)
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be a boolean value")
    return value


def check_callable(conf: dict[str, Any], name: str) -> Any:
    value = conf.pop(name)
    if not callable(value):
        raise ValueError(f"{name} must be callable")
    return value


class BaseSerde:
    """What serializers and deserializers share: the registry, the rule
    registry, the subject name strategy, ``use.latest.*`` and the cache of
    parsed schemas."""

    _schema_type = "AVRO"
    _registry: Any = None
    _use_schema_id: int | None = None
    _use_latest_version = False
    _use_latest_with_metadata: dict[str, Any] | None = None
    _schema_fmt: str | None = None  # the ``format`` asked of the registry (Protobuf)
    _associated: type[AssociatedNameStrategy] = AssociatedNameStrategy  # the default strategy

    def _init_serde(
        self,
        registry: Any,
        conf: dict[str, Any] | None,
        defaults: dict[str, Any],
        rule_registry: RuleRegistry | None,
    ) -> dict[str, Any]:
        """Keep what both kinds take; the rest of the settings (defaults applied)."""
        self._registry = registry
        self._rule_registry = rule_registry or RuleRegistry.get_global_instance()
        self._parsed_schemas: ParsedSchemaCache[Any] = ParsedSchemaCache()
        self._by_schema_id: dict[Any, Any] = {}  # the registry's schemas by id or GUID
        self._by_reference: dict[tuple[str, int], Any] = {}
        self._lock = threading.Lock()
        settings = dict(defaults)
        settings.update(conf or {})
        return settings

    def _init_latest(self, settings: dict[str, Any]) -> None:
        self._use_latest_version = check_bool(settings, "use.latest.version")
        meta = settings.pop("use.latest.with.metadata")
        if meta is not None and not isinstance(meta, dict):
            raise ValueError("use.latest.with.metadata must be a dict value")
        self._use_latest_with_metadata = meta

    def configure_subject_name_strategy(
        self,
        subject_name_strategy_type: Any = None,
        subject_name_strategy_conf: dict[str, Any] | None = None,
        subject_name_strategy: Callable[..., Any] | None = None,
    ) -> None:
        """Take the strategy: a callable, else a type's (``TOPIC``, ``RECORD``,
        ``TOPIC_RECORD``, ``ASSOCIATED``), else the associated strategy.

        Raises:
            ValueError: not a callable, or an unknown type.
        """
        self._subject_name_conf = subject_name_strategy_conf
        if subject_name_strategy is not None:
            if not callable(subject_name_strategy):
                raise ValueError("subject.name.strategy must be callable")
            self._subject_name_func: Any = subject_name_strategy
            self._strategy_accepts_client = isinstance(
                subject_name_strategy, AssociatedNameStrategy
            )
            return
        if subject_name_strategy_type is None:
            self._subject_name_func = self._associated()
            self._strategy_accepts_client = True
            return
        try:
            kind = SubjectNameStrategyType(
                str(
                    getattr(subject_name_strategy_type, "value", subject_name_strategy_type)
                ).upper()
            )
        except ValueError:
            raise ValueError(
                f"Invalid subject.name.strategy.type: {subject_name_strategy_type}. Valid values"
                f" are: {[e.value for e in SubjectNameStrategyType]}"
            ) from None
        if kind == SubjectNameStrategyType.NONE:
            raise ValueError(
                f"Invalid subject.name.strategy.type: {kind}. NONE cannot be used as a"
                " subject name strategy."
            )
        self._subject_name_func = (
            self._associated()
            if kind == SubjectNameStrategyType.ASSOCIATED
            else STRATEGY_TYPE_MAP[kind]
        )
        self._strategy_accepts_client = kind == SubjectNameStrategyType.ASSOCIATED

    def _init_strategy(self, settings: dict[str, Any]) -> None:
        self.configure_subject_name_strategy(
            settings.pop("subject.name.strategy.type"),
            settings.pop("subject.name.strategy.conf"),
            settings.pop("subject.name.strategy"),
        )

    @staticmethod
    def _check_unknown(settings: dict[str, Any]) -> None:
        for name in ("validation.rules.execution", "validation.rules.fail.fast"):
            settings.pop(name, None)
        settings.pop("validation.rules.executor", None)
        if settings:
            raise ValueError(f"Unrecognized properties: {', '.join(settings)}")

    def _configure_rules(self, rule_conf: dict[str, Any] | None) -> None:
        rules = list(self._rule_registry.get_executors()) + list(self._rule_registry.get_actions())
        if not rules:
            return
        config = getattr(self._registry, "config", None)
        client_conf = config() if callable(config) else {}
        for rule in rules:
            rule.configure(client_conf if isinstance(client_conf, dict) else {}, rule_conf or {})

    def set_cluster_id_resolver(self, resolver: Callable[[], str]) -> None:
        """Accepted (the associated strategy uses ``subject.name.strategy.kafka.cluster.id``)."""

    def own_schema_registry_client(self) -> None:
        """Close the registry client with this serde (a builder made the client)."""
        self._owns_registry = True

    def _close_rules(self) -> None:
        # A rule registry of the serde's own is closed with it; the global one
        # is every serde's, and lives as long as the process.
        if self._rule_registry is RuleRegistry.get_global_instance():
            return
        for rule in [*self._rule_registry.get_actions(), *self._rule_registry.get_executors()]:
            with contextlib.suppress(Exception):
                rule.close()

    def close(self) -> None:
        """Close what the serde owns: its own rule registry's executors and
        actions, and the registry client a builder made for it."""
        try:
            self._close_rules()
        finally:
            if getattr(self, "_owns_registry", False):
                self._owns_registry = False
                self._registry.close()

    # -- steps -------------------------------------------------------------------------

    def _subject_steps(self, ctx: Any, record_name: str | None) -> Steps[str | None]:
        func = self._subject_name_func
        if isinstance(func, AssociatedNameStrategy):
            return (
                yield from func.steps(ctx, record_name, self._subject_name_conf, self._registry)
            )
        return func(ctx, record_name)  # type: ignore[no-any-return]

    def _reader_schema_steps(self, subject: str) -> Steps[Any]:
        """The registered schema ``use.schema.id`` / ``use.latest.*`` names, or None."""
        if self._use_schema_id is not None:
            key = ("use.schema.id", subject)
            hit = self._by_schema_id.get(key)
            if hit is None:
                schema = yield from ask(
                    "get_schema", self._use_schema_id, subject, self._schema_fmt
                )
                # its version and GUID (a header names the GUID), when the subject has it
                try:
                    hit = yield from ask("lookup_schema", subject, schema, False, True)
                except Exception as exc:
                    if not is_not_found(exc):
                        raise
                    hit = _Registered(self._use_schema_id, None, schema, None)
                self._by_schema_id[key] = hit
            return hit
        if self._use_latest_with_metadata is not None:
            return (
                yield from ask(
                    "get_latest_with_metadata", subject, self._use_latest_with_metadata, True
                )
            )
        if self._use_latest_version:
            return (yield from ask("get_latest_version", subject))
        return None

    def _references_steps(
        self, schema: Any, seen: set[tuple[str, int]] | None = None
    ) -> Steps[list[tuple[str, Any]]]:
        """Every schema ``schema`` references, depth first: (name, schema)."""
        out: list[tuple[str, Any]] = []
        seen = set() if seen is None else seen
        for ref in getattr(schema, "references", None) or ():
            key = (ref.subject, int(ref.version))
            if key in seen:
                continue
            seen.add(key)
            registered = self._by_reference.get(key)
            if registered is None:
                registered = yield from ask("get_version", ref.subject, int(ref.version))
                self._by_reference[key] = registered
            out.extend((yield from self._references_steps(registered.schema, seen)))
            out.append((ref.name, registered.schema))
        return out

    def _parsed_steps(self, schema: Any) -> Steps[Any]:
        """The format's parsed form of ``schema`` (its references fetched first)."""
        hit = self._parsed_schemas.get_parsed_schema(schema)
        if hit is None:
            referenced = yield from self._references_steps(schema)
            hit = self._parse(schema, referenced)
            self._parsed_schemas.set(schema, hit)
        return hit

    def _parse(self, schema: Any, referenced: list[tuple[str, Any]]) -> Any:
        """The format's parsed form of ``schema``, given its references."""
        raise NotImplementedError

    def _field_transformer(self, parsed: Any) -> Any:
        """The format's walk over a message's fields for field rules (None: none)."""
        return None

    def _rules_steps(
        self,
        ctx: Any,
        subject: str | None,
        record_name: str | None,
        mode: str,
        target: Any,
        parsed: Any,
        message: Any,
    ) -> Steps[Any]:
        """``message`` after ``target``'s domain rules (see :func:`.common.serde.execute_rules`);
        the subject is found only when there are rules to run."""
        if ctx is None or not has_domain_rules(target):
            return message
        if subject is None:
            subject = yield from self._subject_steps(ctx, record_name)
            if subject is None:
                return message
        transformer = self._field_transformer(parsed)
        return execute_rules(
            self._rule_registry,
            ctx,
            subject,
            rule_mode(mode),
            None,
            target,
            message,
            None,
            transformer,
        )

    def _encoding_steps(
        self,
        ctx: Any,
        subject: str | None,
        record_name: str | None,
        mode: str,
        target: Any,
        payload: Any,
    ) -> Steps[Any]:
        """The payload (bytes; on read a stream) after ``target``'s encoding rules
        (``ENCRYPT_PAYLOAD``): on write after the encoding, on read before the decoding."""
        if ctx is None or not has_encoding_rules(target):
            return payload
        if subject is None:
            subject = yield from self._subject_steps(ctx, record_name)
            if subject is None:
                return payload
        out = execute_rules(
            self._rule_registry,
            ctx,
            subject,
            rule_mode(mode),
            None,
            target,
            payload,
            phase="ENCODING",
        )
        if mode == "READ" and isinstance(out, (bytes, bytearray)):
            return io.BytesIO(bytes(out))
        return out


class _Registered(NamedTuple):
    """A schema fetched by id (``use.schema.id``), as a registered schema."""

    schema_id: int
    guid: Any
    schema: Any
    version: int | None


class BaseSerializer(BaseSerde, Serializer):
    """A sync serializer: ``serializer(obj, ctx) -> bytes``."""

    def __call__(self, obj: Any, ctx: Any = None) -> bytes | None:
        return run_steps(self._registry, self._serialize(obj, ctx))

    def _serialize(self, obj: Any, ctx: Any) -> Steps[bytes | None]:
        try:
            if obj is None:
                return None
            return (yield from self._serialize_steps(obj, ctx))
        finally:
            if ctx is not None and ctx.field == MessageField.KEY:
                set_original_key(obj)
            else:
                clear_original_key()

    def _serialize_steps(self, obj: Any, ctx: Any) -> Steps[bytes | None]:
        raise NotImplementedError


class BaseDeserializer(BaseSerde, Deserializer):
    """A sync deserializer: ``deserializer(data, ctx) -> object``."""

    def __call__(self, data: bytes | None, ctx: Any = None) -> Any:
        return run_steps(self._registry, self._deserialize(data, ctx))

    def _deserialize(self, data: bytes | None, ctx: Any) -> Steps[Any]:
        try:
            if data is None:
                return None
            return (yield from self._deserialize_steps(data, ctx))
        finally:
            if ctx is not None and ctx.field == MessageField.KEY:
                set_original_key(data)
            else:
                clear_original_key()

    def _deserialize_steps(self, data: bytes, ctx: Any) -> Steps[Any]:
        raise NotImplementedError


class _Awaitable:
    """``await Serde(...)``, as confluent-kafka's async serdes are made: the serde."""

    def __await__(self) -> Generator[Any, None, Any]:
        return self._ready().__await__()

    async def _ready(self) -> Any:
        return self


class _AsyncClosing(BaseSerde):
    _associated = AsyncAssociatedNameStrategy

    async def aclose(self) -> None:
        """:meth:`close` for the async serdes: the owned client's ``aclose()`` awaited."""
        try:
            self._close_rules()
        finally:
            if getattr(self, "_owns_registry", False):
                self._owns_registry = False
                aclose = getattr(self._registry, "aclose", None)
                if aclose is not None:
                    await aclose()
                else:
                    await self._registry.close()


AsyncBaseSerde = _AsyncClosing  # (confluent-kafka's name of what the async serdes share)


class AsyncBaseSerializer(_AsyncClosing, _Awaitable, BaseSerializer):
    """An async serializer: ``await serializer(obj, ctx) -> bytes``."""

    async def __call__(self, obj: Any, ctx: Any = None) -> bytes | None:  # type: ignore[override]
        return await run_steps_async(self._registry, self._serialize(obj, ctx))


class AsyncBaseDeserializer(_AsyncClosing, _Awaitable, BaseDeserializer):
    """An async deserializer: ``await deserializer(data, ctx) -> object``."""

    async def __call__(self, data: bytes | None, ctx: Any = None) -> Any:
        return await run_steps_async(self._registry, self._deserialize(data, ctx))


def serializer_defaults(**extra: Any) -> dict[str, Any]:
    """The settings every serializer takes (2.16.1's defaults), and ``extra``."""
    return {
        "auto.register.schemas": True,
        "normalize.schemas": False,
        "use.schema.id": None,
        "use.latest.version": False,
        "use.latest.with.metadata": None,
        "subject.name.strategy.type": None,
        "subject.name.strategy.conf": None,
        "subject.name.strategy": None,
        "schema.id.serializer": prefix_schema_id_serializer,
        "validation.rules.execution": ValidationRulesExecution.DISABLED,
        "validation.rules.fail.fast": False,
        "validation.rules.executor": None,
        **extra,
    }


def deserializer_defaults(**extra: Any) -> dict[str, Any]:
    """The settings every deserializer takes (2.16.1's defaults), and ``extra``."""
    return {
        "use.latest.version": False,
        "use.latest.with.metadata": None,
        "subject.name.strategy.type": None,
        "subject.name.strategy.conf": None,
        "subject.name.strategy": None,
        "schema.id.deserializer": dual_schema_id_deserializer,
        **extra,
    }


class SerializerSettings(BaseSerde):
    """A serializer's settings, checked as 2.16.1 checks them."""

    def _init_serializer(
        self,
        registry: Any,
        conf: dict[str, Any] | None,
        defaults: dict[str, Any],
        rule_registry: RuleRegistry | None,
    ) -> dict[str, Any]:
        settings = self._init_serde(registry, conf, defaults, rule_registry)
        self._known_subjects: dict[str, SchemaId] = {}
        self._schema_id: SchemaId | None = None
        self._auto_register = check_bool(settings, "auto.register.schemas")
        self._normalize_schemas = check_bool(settings, "normalize.schemas")
        use_id = settings.pop("use.schema.id")
        if use_id is not None and not isinstance(use_id, int):
            raise ValueError("use.schema.id must be an int value")
        self._use_schema_id = use_id
        self._init_latest(settings)
        if self._use_latest_version and self._auto_register:
            raise ValueError("cannot enable both use.latest.version and auto.register.schemas")
        self._init_strategy(settings)
        self._schema_id_serializer = check_callable(settings, "schema.id.serializer")
        return settings

    def _schema_id_steps(self, subject: str | None, schema: Any) -> Steps[SchemaId | None]:
        """The id of ``schema`` under ``subject`` (registered, or looked up), once per subject."""
        if subject is None:
            return self._schema_id
        hit = self._known_subjects.get(subject)
        if hit is None:
            method = "register_schema_full_response" if self._auto_register else "lookup_schema"
            registered = yield from ask(method, subject, schema, self._normalize_schemas)
            hit = SchemaId(self._schema_type, registered.schema_id, guid_of(registered))
            self._known_subjects[subject] = self._schema_id = hit
        return hit


def guid_of(registered: Any) -> Any:
    guid = getattr(registered, "guid", None)
    return None if not guid else str(guid)


class DeserializerSettings(BaseSerde):
    """A deserializer's settings, checked as 2.16.1 checks them."""

    def _init_deserializer(
        self,
        registry: Any,
        conf: dict[str, Any] | None,
        defaults: dict[str, Any],
        rule_registry: RuleRegistry | None,
    ) -> dict[str, Any]:
        settings = self._init_serde(registry, conf, defaults, rule_registry)
        self._init_latest(settings)
        self._init_strategy(settings)
        self._schema_id_deserializer = check_callable(settings, "schema.id.deserializer")
        return settings

    def _latest_reader_steps(self, ctx: Any, record_name: str | None) -> Steps[Any]:
        """The subject's latest schema with ``use.latest.*``, else None."""
        found = yield from self._latest_and_subject_steps(ctx, record_name)
        return found[0]

    def _latest_and_subject_steps(
        self, ctx: Any, record_name: str | None
    ) -> Steps[tuple[Any, str | None]]:
        """The subject's latest schema with ``use.latest.*`` (else None), and the subject."""
        if not (self._use_latest_version or self._use_latest_with_metadata is not None):
            return None, None
        subject = yield from self._subject_steps(ctx, record_name)
        if subject is None:
            return None, None
        return (yield from self._reader_schema_steps(subject)), subject

    def _migrations_steps(
        self, subject: str, writer_schema: Any, latest: Any
    ) -> Steps[list[Migration]]:
        """The migrations from the writer's version of ``subject`` to ``latest``'s
        (each step between two versions whose later one has migration rules)."""
        if latest is None or latest.version is None:
            return []
        source = yield from ask("lookup_schema", subject, writer_schema, False, True)
        if source.version is None:
            return []
        mode = migration_mode(int(source.version), int(latest.version))
        if mode is None:
            return []
        first, last = (source, latest) if mode == "UPGRADE" else (latest, source)
        chain = [first]
        for version in range(int(first.version) + 1, int(last.version)):
            chain.append((yield from ask("get_version", subject, version)))
        chain.append(last)
        out = []
        for previous, current in itertools.pairwise(chain):
            if has_migration_rules(current.schema, mode):
                pair = (previous, current) if mode == "UPGRADE" else (current, previous)
                out.append(Migration(rule_mode(mode), *pair))
        if mode == "DOWNGRADE":
            out.reverse()
        return out

    def _migrate(self, ctx: Any, subject: str, migrations: list[Migration], message: Any) -> Any:
        """``message`` after each migration's rules."""
        for m in migrations:
            message = execute_rules(
                self._rule_registry,
                ctx,
                subject,
                m.rule_mode,
                m.source.schema,
                m.target.schema,
                message,
            )
        return message

    def _writer_schema_steps(self, schema_id: SchemaId) -> Steps[Any]:
        """The schema a record names, fetched once per serde."""
        key = schema_id.id if schema_id.guid is None else schema_id.guid
        hit = self._by_schema_id.get(key)
        if hit is None:
            if schema_id.guid is not None:
                hit = yield from ask("get_schema_by_guid", str(schema_id.guid), self._schema_fmt)
            else:
                hit = yield from ask("get_schema", schema_id.id, None, self._schema_fmt)
            self._by_schema_id[key] = hit
        return hit


def _new_client(conf: dict[str, Any], is_async: bool) -> Any:
    from .. import schema_registry as package

    kind = getattr(package, "AsyncSchemaRegistryClient" if is_async else "SchemaRegistryClient")
    make = getattr(kind, "new_client", kind)
    return make(conf)


def _built(
    client: Any,
    conf: dict[str, Any] | None,
    construct: Callable[[Any], Any],
    init: Any,
    is_async: bool,
) -> Any:
    if client is not None and conf is not None:
        raise ValueError(
            "Cannot specify both a Schema Registry client and a configuration; use one or the other"
        )
    owned = client is None and conf is not None
    if owned:
        client = _new_client(dict(conf or {}), is_async)
    try:
        serde = construct(client)
    except BaseException:
        if owned:
            with contextlib.suppress(Exception):
                client.close()
        raise
    if owned:
        serde.own_schema_registry_client()
    if init is not None:
        try:
            init(serde)
        except BaseException:
            with contextlib.suppress(Exception):
                serde.close()
            raise
    return serde


def build_serde(
    schema_registry_client: Any,
    schema_registry_conf: dict[str, Any] | None,
    construct: Callable[[Any], Any],
    init: Callable[[Any], None] | None = None,
) -> Any:
    """A serde made by ``construct(client)``: the given client, or one made
    from ``schema_registry_conf`` (then owned: closed with the serde); then
    ``init(serde)``.

    Raises:
        ValueError: both a client and a configuration.
    """
    return _built(schema_registry_client, schema_registry_conf, construct, init, False)


async def async_build_serde(
    schema_registry_client: Any,
    schema_registry_conf: dict[str, Any] | None,
    construct: Callable[[Any], Any],
    init: Callable[[Any], None] | None = None,
) -> Any:
    """:func:`build_serde` for the async serdes (``construct`` may return an awaitable)."""
    serde = _built(schema_registry_client, schema_registry_conf, construct, init, True)
    return await serde if isinstance(serde, _Awaitable) else serde


_RENAMED = {
    "schema": "schema_str",
    "serializer_config": "conf",
    "deserializer_config": "conf",
    "rule_config": "rule_conf",
}


def serde_builder(name: str, serde_class: type, fields: list[tuple[str, Any]], module: str) -> type:
    """A builder class of ``serde_class`` (confluent-kafka's ``*SerializerBuilder``
    / ``*DeserializerBuilder``): its arguments are ``schema_registry_config``,
    ``schema_registry_client``, then ``fields`` (``(name, default)``: the
    serde's own arguments as the builder names them, and ``serializer_init`` /
    ``deserializer_init``), each with a ``set_<name>`` returning the builder;
    ``build(conf, is_key) -> (serde, conf)`` (a coroutine for the async serdes)."""
    import inspect

    from ..serialization import DeserializerBuilder, SerializerBuilder

    names = ["schema_registry_config", "schema_registry_client"] + [n for n, _ in fields]
    defaults = {"schema_registry_config": None, "schema_registry_client": None, **dict(fields)}
    is_async = issubclass(serde_class, _Awaitable)
    is_serializer = issubclass(serde_class, BaseSerializer)
    init_name = "serializer_init" if is_serializer else "deserializer_init"
    params = set(inspect.signature(serde_class).parameters)

    def keyword(field: str) -> str:
        if field == "message_type" and field not in params:
            return "msg_type"
        return _RENAMED.get(field, field)

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if len(args) > len(names):
            raise TypeError(f"{name}() takes at most {len(names)} arguments")
        values = dict(defaults)
        values.update(zip(names, args, strict=False))
        for key, value in kwargs.items():
            if key not in values:
                raise TypeError(f"{name}() got an unexpected keyword argument {key!r}")
            values[key] = value
        self._values = values

    def build(self: Any, conf: dict[str, Any], is_key: bool) -> Any:
        values = self._values
        own = {keyword(n): values[n] for n, _ in fields if n != init_name}
        make = async_build_serde if is_async else build_serde
        serde = make(
            values["schema_registry_client"],
            values["schema_registry_config"],
            lambda client: serde_class(schema_registry_client=client, **own),
            values[init_name],
        )
        if is_async:

            async def finish() -> Any:
                return (await serde, dict(conf))

            return finish()
        return serde, dict(conf)

    body: dict[str, Any] = {"__init__": __init__, "build": build, "__module__": module}
    body["__doc__"] = (
        f"Builds a :class:`{serde_class.__name__}` (a producer's or consumer's"
        f" ``*.builder`` setting) from {', '.join(names)}, each also set by ``set_<name>``."
    )
    for field in names:
        body[f"set_{field}"] = _setter(field)
    base = SerializerBuilder if is_serializer else DeserializerBuilder
    return type(name, (base,), body)


def _setter(field: str) -> Callable[..., Any]:
    def setter(self: Any, value: Any) -> Any:
        self._values[field] = value
        return self

    setter.__name__ = f"set_{field}"
    setter.__doc__ = f"Set ``{field}``; the builder (the setters chain)."
    return setter
