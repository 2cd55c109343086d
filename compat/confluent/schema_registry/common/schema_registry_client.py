"""confluent-kafka's ``confluent_kafka.schema_registry.common.schema_registry_client``:
what the registry stores and answers, as confluent-kafka names and shapes them.

Rules:

* Each model reads the registry's JSON with ``from_dict`` and writes it with
  ``to_dict`` (camelCase keys, a field left out when it is None), as
  confluent-kafka's do; attribute names and the order of positional
  arguments are confluent-kafka's.
* ``Schema`` and ``RegisteredSchema`` are frozen and hashable (the client's
  caches key on them); a list they hold (references, tags) is compared but
  not hashed. ``RuleParams``, ``MetadataTags``, ``MetadataProperties`` and
  ``RuleSet`` hash by content, so a ``Schema`` carrying them is hashable.
"""

from __future__ import annotations

import enum
import random
from dataclasses import MISSING, dataclass, field
from typing import Any

__all__ = [
    "Association",
    "AssociationCreateOrUpdateInfo",
    "AssociationCreateOrUpdateRequest",
    "AssociationInfo",
    "AssociationResponse",
    "ConfigCompatibilityLevel",
    "Metadata",
    "MetadataProperties",
    "MetadataTags",
    "RegisteredSchema",
    "Rule",
    "RuleKind",
    "RuleMode",
    "RuleParams",
    "RulePhase",
    "RuleSet",
    "Schema",
    "SchemaReference",
    "SchemaVersion",
    "ServerConfig",
    "VALID_AUTH_PROVIDERS",
    "full_jitter",
    "is_retriable",
    "is_success",
    "normalize_identity_pool",
]

#: The ``bearer.auth.credentials.source`` values the clients take.
VALID_AUTH_PROVIDERS = ["URL", "USER_INFO"]


def is_success(status_code: int) -> bool:
    """Whether an HTTP status is a 2xx."""
    return 200 <= status_code <= 299


def is_retriable(status_code: int) -> bool:
    """Whether a request answered with this status is tried again."""
    return status_code in (408, 429, 500, 502, 503, 504)


def full_jitter(base_delay_ms: int, max_delay_ms: int, retries_attempted: int) -> float:
    """A random wait (ms) before retry ``retries_attempted`` + 1: up to the
    doubled base, capped at ``max_delay_ms``."""
    return random.random() * min(base_delay_ms * 2.0**retries_attempted, max_delay_ms)


def normalize_identity_pool(identity_pool_raw: str | list[str] | None) -> str | None:
    """``bearer.auth.identity.pool.id`` as sent: a list joined with commas.

    Raises:
        TypeError: neither a str nor a list of str.
    """
    if identity_pool_raw is None or isinstance(identity_pool_raw, str):
        return identity_pool_raw
    if isinstance(identity_pool_raw, list):
        if any(not isinstance(item, str) for item in identity_pool_raw):
            raise TypeError("All items in identity pool list must be strings")
        return ",".join(identity_pool_raw)
    raise TypeError(f"identity pool id must be a str or list, not {type(identity_pool_raw)}")


def _put(out: dict[str, Any], key: str, value: Any) -> None:
    if value is not None:
        out[key] = value


def _dump(value: Any) -> Any:
    return value.to_dict() if hasattr(value, "to_dict") else value


def _enum_value(value: Any) -> Any:
    return value.value if isinstance(value, enum.Enum) else value


class _StrEnum(enum.StrEnum):
    def __str__(self) -> str:
        return str(self.value)


class RuleKind(_StrEnum):
    """Whether a rule checks (CONDITION) or changes (TRANSFORM) a message."""

    CONDITION = "CONDITION"
    TRANSFORM = "TRANSFORM"


class RulePhase(_StrEnum):
    """Where a rule runs."""

    MIGRATION = "MIGRATION"
    DOMAIN = "DOMAIN"
    ENCODING = "ENCODING"


class RuleMode(_StrEnum):
    """When a rule runs."""

    UPGRADE = "UPGRADE"
    DOWNGRADE = "DOWNGRADE"
    UPDOWN = "UPDOWN"
    READ = "READ"
    WRITE = "WRITE"
    WRITEREAD = "WRITEREAD"


class ConfigCompatibilityLevel(_StrEnum):
    """A subject's (or the registry's) compatibility rule."""

    BACKWARD = "BACKWARD"
    BACKWARD_TRANSITIVE = "BACKWARD_TRANSITIVE"
    FORWARD = "FORWARD"
    FORWARD_TRANSITIVE = "FORWARD_TRANSITIVE"
    FULL = "FULL"
    FULL_TRANSITIVE = "FULL_TRANSITIVE"
    NONE = "NONE"


@dataclass
class RuleParams:
    """A rule's parameters (str to str)."""

    params: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.params)

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> RuleParams:
        return cls(params=dict(src_dict))

    def __hash__(self) -> int:
        return hash(frozenset(self.params.items()))


@dataclass(frozen=True)
class Rule:
    """A data-contract rule (CEL condition, field encryption, migration...)."""

    name: str | None
    doc: str | None
    kind: RuleKind | None
    mode: RuleMode | None
    type: str | None
    tags: list[str] | None = field(hash=False)
    params: RuleParams | None
    expr: str | None
    on_success: str | None
    on_failure: str | None
    disabled: bool | None

    def to_dict(self) -> dict[str, Any]:
        # confluent-kafka's always writes "type", null too
        out: dict[str, Any] = {"type": self.type}
        for key, value in (
            ("name", self.name),
            ("doc", self.doc),
            ("kind", _enum_value(self.kind)),
            ("mode", _enum_value(self.mode)),
            ("tags", self.tags),
            ("params", None if self.params is None else self.params.to_dict()),
            ("expr", self.expr),
            ("onSuccess", self.on_success),
            ("onFailure", self.on_failure),
            ("disabled", self.disabled),
        ):
            _put(out, key, value)
        return out

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> Rule:
        d = src_dict
        kind, mode, params = d.get("kind"), d.get("mode"), d.get("params")
        return cls(
            name=d.get("name"),
            doc=d.get("doc"),
            kind=None if kind is None else RuleKind(kind),
            mode=None if mode is None else RuleMode(mode),
            type=d.get("type"),
            tags=d.get("tags"),
            params=None if params is None else RuleParams.from_dict(params),
            expr=d.get("expr"),
            on_success=d.get("onSuccess"),
            on_failure=d.get("onFailure"),
            disabled=d.get("disabled"),
        )


def _rules(items: Any) -> list[Rule]:
    return [Rule.from_dict(r) for r in items or ()]


@dataclass
class RuleSet:
    """A schema's rules, by phase."""

    migration_rules: list[Rule] | None
    domain_rules: list[Rule] | None
    encoding_rules: list[Rule] | None = None
    enable_at: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, rules in (
            ("migrationRules", self.migration_rules),
            ("domainRules", self.domain_rules),
            ("encodingRules", self.encoding_rules),
        ):
            _put(out, key, None if rules is None else [r.to_dict() for r in rules])
        _put(out, "enableAt", self.enable_at)
        return out

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> RuleSet:
        d = src_dict
        return cls(
            migration_rules=_rules(d.get("migrationRules")),
            domain_rules=_rules(d.get("domainRules")),
            encoding_rules=_rules(d.get("encodingRules")),
            enable_at=d.get("enableAt"),
        )

    def __hash__(self) -> int:
        every = (self.migration_rules or []) + (self.domain_rules or [])
        return hash((frozenset(every + (self.encoding_rules or [])), self.enable_at))


@dataclass
class MetadataTags:
    """Tags by field path."""

    tags: dict[str, list[str]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.tags)

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> MetadataTags:
        return cls(tags=dict(src_dict))

    def __hash__(self) -> int:
        return hash(frozenset((k, tuple(v)) for k, v in self.tags.items()))


@dataclass
class MetadataProperties:
    """A schema's properties (str to str)."""

    properties: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.properties)

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> MetadataProperties:
        return cls(properties=dict(src_dict))

    def __hash__(self) -> int:
        return hash(frozenset(self.properties.items()))


@dataclass(frozen=True)
class Metadata:
    """A schema's metadata: tags, properties and its sensitive fields."""

    tags: MetadataTags | None
    properties: MetadataProperties | None
    sensitive: list[str] | None = field(hash=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "tags", None if self.tags is None else self.tags.to_dict())
        _put(out, "properties", None if self.properties is None else self.properties.to_dict())
        _put(out, "sensitive", None if self.sensitive is None else list(self.sensitive))
        return out

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> Metadata:
        tags, props = src_dict.get("tags"), src_dict.get("properties")
        return cls(
            tags=None if tags is None else MetadataTags.from_dict(tags),
            properties=None if props is None else MetadataProperties.from_dict(props),
            sensitive=list(src_dict.get("sensitive") or ()),
        )


def _parsed(kind: Any, data: Any) -> Any:
    if data is None:
        return None
    if not isinstance(data, dict):
        raise TypeError(f"{kind.__name__} must be a JSON object, not {type(data)}")
    return kind.from_dict(data)


@dataclass(frozen=True)
class SchemaVersion:
    """A (subject, version) that holds a schema."""

    subject: str | None
    version: int | None

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> SchemaVersion:
        return cls(subject=src_dict.get("subject"), version=src_dict.get("version"))


@dataclass(frozen=True)
class SchemaReference:
    """A schema another imports: ``name`` is ``version`` of ``subject``."""

    name: str | None
    subject: str | None
    version: int | None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in ("name", "subject", "version"):
            _put(out, key, getattr(self, key))
        return out

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> SchemaReference:
        d = src_dict
        return cls(name=d.get("name"), subject=d.get("subject"), version=d.get("version"))


@dataclass
class ServerConfig:
    """A subject's (or the registry's) configuration."""

    compatibility: ConfigCompatibilityLevel | None = None
    compatibility_level: ConfigCompatibilityLevel | None = None
    compatibility_group: str | None = None
    default_metadata: Metadata | None = None
    override_metadata: Metadata | None = None
    default_rule_set: RuleSet | None = None
    override_rule_set: RuleSet | None = None

    _KEYS = (
        ("compatibility", "compatibility"),
        ("compatibility_level", "compatibilityLevel"),
        ("compatibility_group", "compatibilityGroup"),
        ("default_metadata", "defaultMetadata"),
        ("override_metadata", "overrideMetadata"),
        ("default_rule_set", "defaultRuleSet"),
        ("override_rule_set", "overrideRuleSet"),
    )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr, key in self._KEYS:
            _put(out, key, _dump(_enum_value(getattr(self, attr))))
        return out

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> ServerConfig:
        d = src_dict
        compat, level = d.get("compatibility"), d.get("compatibilityLevel")
        return cls(
            compatibility=None if compat is None else ConfigCompatibilityLevel(compat),
            compatibility_level=None if level is None else ConfigCompatibilityLevel(level),
            compatibility_group=d.get("compatibilityGroup"),
            default_metadata=_parsed(Metadata, d.get("defaultMetadata")),
            override_metadata=_parsed(Metadata, d.get("overrideMetadata")),
            default_rule_set=_parsed(RuleSet, d.get("defaultRuleSet")),
            override_rule_set=_parsed(RuleSet, d.get("overrideRuleSet")),
        )


@dataclass(frozen=True)
class Schema:
    """A schema: its text, type (``AVRO``, ``PROTOBUF``, ``JSON``), the schemas
    it references, and its metadata and rules."""

    schema_str: str | None
    schema_type: str | None = "AVRO"
    references: list[SchemaReference] | None = field(default_factory=list, hash=False)
    metadata: Metadata | None = None
    rule_set: RuleSet | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        _put(out, "schema", self.schema_str)
        _put(out, "schemaType", self.schema_type)
        out["references"] = [r.to_dict() for r in self.references or ()]
        if isinstance(self.metadata, Metadata):
            out["metadata"] = self.metadata.to_dict()
        if isinstance(self.rule_set, RuleSet):
            out["ruleSet"] = self.rule_set.to_dict()
        return out

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> Schema:
        d = src_dict
        return cls(
            schema_str=d.get("schema"),
            schema_type=d.get("schemaType", "AVRO"),
            references=[SchemaReference.from_dict(r) for r in d.get("references") or ()],
            metadata=_parsed(Metadata, d.get("metadata")),
            rule_set=_parsed(RuleSet, d.get("ruleSet")),
        )


@dataclass(frozen=True)
class RegisteredSchema:
    """A schema as the registry holds it: its id and GUID, and the subject
    and version it is (None where the answer did not say)."""

    subject: str | None
    version: int | None
    schema_id: int | None
    guid: str | None
    schema: Schema

    def to_dict(self) -> dict[str, Any]:
        out = self.schema.to_dict() if self.schema is not None else {}
        for key, value in (
            ("id", self.schema_id),
            ("guid", self.guid),
            ("subject", self.subject),
            ("version", self.version),
        ):
            _put(out, key, value)
        return out

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> RegisteredSchema:
        d = src_dict
        return cls(
            subject=d.get("subject"),
            version=d.get("version"),
            schema_id=d.get("id"),
            guid=d.get("guid"),
            schema=Schema.from_dict(d),
        )


_ASSOCIATION_KEYS = (
    ("subject", "subject"),
    ("guid", "guid"),
    ("resource_name", "resourceName"),
    ("resource_namespace", "resourceNamespace"),
    ("resource_id", "resourceId"),
    ("resource_type", "resourceType"),
    ("association_type", "associationType"),
    ("lifecycle", "lifecycle"),
    ("frozen", "frozen"),
    ("normalize", "normalize"),
)


class _Json:
    """to_dict / from_dict by the attribute-to-key table above; a schema and a
    list of associations nested."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for attr, key in _ASSOCIATION_KEYS:
            if hasattr(self, attr):
                _put(out, key, getattr(self, attr))
        schema = getattr(self, "schema", None)
        _put(out, "schema", None if schema is None else schema.to_dict())
        items = getattr(self, "associations", None)
        _put(out, "associations", None if items is None else [a.to_dict() for a in items])
        return out

    @classmethod
    def from_dict(cls, src_dict: dict[str, Any]) -> Any:
        fields: dict[str, Any] = cls.__dataclass_fields__  # type: ignore[attr-defined]
        # a field without a default is None when the JSON lacks it
        kwargs: dict[str, Any] = {
            attr: src_dict.get(key)
            for attr, key in _ASSOCIATION_KEYS
            if attr in fields and (key in src_dict or fields[attr].default is MISSING)
        }
        if "schema" in fields and src_dict.get("schema") is not None:
            kwargs["schema"] = Schema.from_dict(src_dict["schema"])
        if "associations" in fields and src_dict.get("associations") is not None:
            item = _ITEM_KINDS[cls.__name__]
            kwargs["associations"] = [item.from_dict(a) for a in src_dict["associations"]]
        return cls(**kwargs)


@dataclass(frozen=True)
class Association(_Json):
    """A subject associated with a resource (a topic...)."""

    subject: str | None
    guid: str | None
    resource_name: str | None
    resource_namespace: str | None
    resource_id: str | None
    resource_type: str | None
    association_type: str | None
    frozen: bool = False


@dataclass
class AssociationInfo(_Json):
    """One association of a resource, as the registry answers it."""

    subject: str | None = None
    association_type: str | None = None
    lifecycle: str | None = None
    frozen: bool = False
    schema: Schema | None = None


@dataclass
class AssociationCreateOrUpdateInfo(_Json):
    """One association to create or update."""

    subject: str | None = None
    association_type: str | None = None
    lifecycle: str | None = None
    frozen: bool | None = None
    schema: Schema | None = None
    normalize: bool | None = None


@dataclass
class AssociationCreateOrUpdateRequest(_Json):
    """The associations to create or update for one resource."""

    resource_name: str | None = None
    resource_namespace: str | None = None
    resource_id: str | None = None
    resource_type: str | None = None
    associations: list[AssociationCreateOrUpdateInfo] | None = None


@dataclass
class AssociationResponse(_Json):
    """A resource's associations, as the registry answers them."""

    resource_name: str | None = None
    resource_namespace: str | None = None
    resource_id: str | None = None
    resource_type: str | None = None
    associations: list[AssociationInfo] | None = None


_ITEM_KINDS: dict[str, Any] = {
    "AssociationCreateOrUpdateRequest": AssociationCreateOrUpdateInfo,
    "AssociationResponse": AssociationInfo,
}
