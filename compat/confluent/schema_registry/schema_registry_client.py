# The operations return the registry's JSON as parsed (Any): each method's
# annotation is what confluent-kafka documents it to return.
# mypy: disable-error-code="no-any-return"
"""confluent-kafka's ``confluent_kafka.schema_registry.schema_registry_client``:
:class:`SchemaRegistryClient` (blocking) and :class:`AsyncSchemaRegistryClient`,
with confluent-kafka 2.16's methods, configuration, caching and return values,
over the SDK's registry client (:mod:`trafka.sdk.schemas`: its HTTP requests,
retries, authentication and TLS). The operations are written once
(:mod:`._client_ops`); these classes drive them. Needs the ``schemas`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from trafka.sdk.schemas import AsyncSchemaRegistryClient as _SdkAsyncClient
from trafka.sdk.schemas import RegistryConfig
from trafka.sdk.schemas import SchemaRegistryClient as _SdkClient

from ._client_conf import read_conf
from ._client_ops import Operations
from ._mock_registry import AsyncMemoryRegistry, MemoryRegistry
from .common.schema_registry_client import (  # noqa: F401 (confluent-kafka's module has them)
    VALID_AUTH_PROVIDERS,
    Association,
    AssociationCreateOrUpdateInfo,
    AssociationCreateOrUpdateRequest,
    AssociationInfo,
    AssociationResponse,
    ConfigCompatibilityLevel,
    Metadata,
    MetadataProperties,
    MetadataTags,
    RegisteredSchema,
    Rule,
    RuleKind,
    RuleMode,
    RuleParams,
    RulePhase,
    RuleSet,
    Schema,
    SchemaReference,
    SchemaVersion,
    ServerConfig,
    full_jitter,
    is_retriable,
    is_success,
    normalize_identity_pool,
)
from .error import SchemaRegistryError

__all__ = [
    "Association",
    "AssociationCreateOrUpdateInfo",
    "AssociationCreateOrUpdateRequest",
    "AssociationInfo",
    "AssociationResponse",
    "AsyncMockSchemaRegistryClient",
    "AsyncSchemaRegistryClient",
    "ConfigCompatibilityLevel",
    "Metadata",
    "MetadataProperties",
    "MetadataTags",
    "MockSchemaRegistryClient",
    "RegisteredSchema",
    "Rule",
    "RuleKind",
    "RuleMode",
    "RuleParams",
    "RulePhase",
    "RuleSet",
    "Schema",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SchemaVersion",
    "ServerConfig",
]


class SchemaRegistryClient:
    """A blocking client of Confluent's Schema Registry, as confluent-kafka's.

    Callable from any thread (the SDK's client runs on a loop of its own).

    Args:
        conf: confluent-kafka's settings (``url``, ``basic.auth.user.info``,
            ``bearer.auth.*``, ``ssl.*``, ``timeout``, ``cache.capacity``,
            ``cache.latest.ttl.sec``, ``max.retries``, ``retries.wait.ms``,
            ``retries.max.wait.ms``, ``proxy``).

    Raises:
        ValueError, TypeError: a setting is missing, unknown or invalid (as
            confluent-kafka's text says).
    """

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._conf = conf
        settings = read_conf(conf)
        self._ops = Operations(
            settings.cache_capacity, settings.cache_latest_ttl_sec, not _is_mock(conf)
        )
        self._rest = self._open(settings.registry)

    def _open(self, registry: RegistryConfig) -> Any:
        return _SdkClient(registry)

    def __enter__(self) -> SchemaRegistryClient:
        return self

    def __exit__(self, *args: object) -> None:
        self.close()

    def close(self) -> None:
        """Close the HTTP connections (and the loop the requests run on)."""
        self._rest.close()

    def config(self) -> Mapping[str, Any]:
        """The configuration the client was made with."""
        return self._conf

    @staticmethod
    def new_client(conf: Mapping[str, Any]) -> SchemaRegistryClient:
        """A client for ``conf``; with a ``mock://`` URL, one with an in-memory
        registry of its own (as confluent-kafka's mock client, for tests)."""
        if _is_mock(conf):
            return MockSchemaRegistryClient(conf)
        return SchemaRegistryClient(conf)

    def clear_latest_caches(self) -> None:
        """Forget the cached latest versions."""
        self._ops.cache.clear_latest()

    def clear_caches(self) -> None:
        """Forget every cached answer."""
        self._ops.cache.clear()

    def register_schema(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> int:
        """Register ``schema`` under ``subject_name`` (or find it there); its id."""
        registered = self.register_schema_full_response(subject_name, schema, normalize_schemas)
        return registered.schema_id  # type: ignore[return-value]

    def register_schema_full_response(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> RegisteredSchema:
        """Register ``schema`` under ``subject_name`` (or find it there); the registered schema."""
        return self._ops.run(
            self._ops.register_schema_full_response(subject_name, schema, normalize_schemas),
            self._rest,
        )

    def get_schema(
        self,
        schema_id: int,
        subject_name: str | None = None,
        fmt: str | None = None,
        reference_format: str | None = None,
    ) -> Schema:
        """The schema with id ``schema_id`` (``fmt``: ``serialized`` for Protobuf's descriptor)."""
        return self._ops.run(
            self._ops.get_schema(schema_id, subject_name, fmt, reference_format), self._rest
        )

    def get_schema_by_guid(self, guid: str, fmt: str | None = None) -> Schema:
        """The schema with this GUID."""
        return self._ops.run(self._ops.get_schema_by_guid(guid, fmt), self._rest)

    def get_schema_types(self) -> list[str]:
        """The schema types the registry knows (``AVRO``, ``JSON``, ``PROTOBUF``)."""
        return self._ops.run(self._ops.get_schema_types(), self._rest)

    def get_subjects_by_schema_id(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[str]:
        """The subjects that hold the schema with id ``schema_id``."""
        return self._ops.run(
            self._ops.get_subjects_by_schema_id(schema_id, subject_name, deleted, offset, limit),
            self._rest,
        )

    def get_schema_versions(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[SchemaVersion]:
        """The (subject, version) pairs holding the schema with id ``schema_id``."""
        return self._ops.run(
            self._ops.get_schema_versions(schema_id, subject_name, deleted, offset, limit),
            self._rest,
        )

    def lookup_schema(
        self,
        subject_name: str,
        schema: Schema,
        normalize_schemas: bool = False,
        fmt: str | None = None,
        deleted: bool = False,
    ) -> RegisteredSchema:
        """The version of ``subject_name`` holding ``schema`` (40403 when none does)."""
        return self._ops.run(
            self._ops.lookup_schema(subject_name, schema, normalize_schemas, fmt, deleted),
            self._rest,
        )

    def get_subjects(
        self,
        subject_prefix: str | None = None,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[str]:
        """The registry's subjects."""
        return self._ops.run(
            self._ops.get_subjects(subject_prefix, deleted, deleted_only, offset, limit), self._rest
        )

    def delete_subject(self, subject_name: str, permanent: bool = False) -> list[int]:
        """Delete a subject (soft; then ``permanent``); the versions deleted."""
        return self._ops.run(self._ops.delete_subject(subject_name, permanent), self._rest)

    def get_latest_version(self, subject_name: str, fmt: str | None = None) -> RegisteredSchema:
        """The subject's latest version."""
        return self._ops.run(self._ops.get_latest_version(subject_name, fmt), self._rest)

    def get_latest_with_metadata(
        self,
        subject_name: str,
        metadata: dict[str, str],
        deleted: bool = False,
        fmt: str | None = None,
    ) -> RegisteredSchema:
        """The subject's latest version whose metadata holds ``metadata``."""
        return self._ops.run(
            self._ops.get_latest_with_metadata(subject_name, metadata, deleted, fmt), self._rest
        )

    def get_version(
        self,
        subject_name: str,
        version: int | str = "latest",
        deleted: bool = False,
        fmt: str | None = None,
    ) -> RegisteredSchema:
        """Version ``version`` of ``subject_name``."""
        return self._ops.run(self._ops.get_version(subject_name, version, deleted, fmt), self._rest)

    def get_referenced_by(
        self, subject_name: str, version: int | str = "latest", offset: int = 0, limit: int = -1
    ) -> list[int]:
        """The ids of the schemas that reference this version."""
        return self._ops.run(
            self._ops.get_referenced_by(subject_name, version, offset, limit), self._rest
        )

    def get_versions(
        self,
        subject_name: str,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[int]:
        """The subject's version numbers."""
        return self._ops.run(
            self._ops.get_versions(subject_name, deleted, deleted_only, offset, limit), self._rest
        )

    def delete_version(self, subject_name: str, version: int, permanent: bool = False) -> int:
        """Delete one version of a subject; its number."""
        return self._ops.run(self._ops.delete_version(subject_name, version, permanent), self._rest)

    def set_compatibility(self, subject_name: str | None = None, level: str | None = None) -> Any:
        """Set the compatibility level of ``subject_name`` (None: the registry's); the registry's answer."""
        return self._ops.run(self._ops.set_compatibility(subject_name, level), self._rest)

    def get_compatibility(self, subject_name: str | None = None) -> str:
        """The compatibility level of ``subject_name`` (None: the registry's)."""
        return self._ops.run(self._ops.get_compatibility(subject_name), self._rest)

    def test_compatibility(
        self,
        subject_name: str,
        schema: Schema,
        version: int | str = "latest",
        normalize: bool = False,
        verbose: bool = False,
    ) -> bool:
        """Whether ``schema`` may follow ``version`` of ``subject_name``."""
        return self._ops.run(
            self._ops.test_compatibility(subject_name, schema, version, normalize, verbose),
            self._rest,
        )

    def test_compatibility_all_versions(
        self, subject_name: str, schema: Schema, normalize: bool = False, verbose: bool = False
    ) -> bool:
        """Whether ``schema`` may follow every version of ``subject_name``."""
        return self._ops.run(
            self._ops.test_compatibility_all_versions(subject_name, schema, normalize, verbose),
            self._rest,
        )

    def set_config(
        self, subject_name: str | None = None, config: ServerConfig | None = None
    ) -> Any:
        """Update the configuration of ``subject_name`` (None: the registry's)."""
        return self._ops.run(self._ops.set_config(subject_name, config), self._rest)

    def delete_config(self, subject_name: str | None = None) -> ServerConfig:
        """Delete the configuration of ``subject_name`` (None: the registry's)."""
        return self._ops.run(self._ops.delete_config(subject_name), self._rest)

    def get_config(self, subject_name: str | None = None) -> ServerConfig:
        """The configuration of ``subject_name`` (None: the registry's)."""
        return self._ops.run(self._ops.get_config(subject_name), self._rest)

    def get_mode(self, subject_name: str) -> str:
        """The subject's mode (READWRITE, READONLY, IMPORT)."""
        return self._ops.run(self._ops.get_mode(subject_name), self._rest)

    def update_mode(self, subject_name: str, mode: str, force: bool = False) -> str:
        """Set the subject's mode."""
        return self._ops.run(self._ops.update_mode(subject_name, mode, force), self._rest)

    def delete_mode(self, subject_name: str) -> str:
        """Delete the subject's mode."""
        return self._ops.run(self._ops.delete_mode(subject_name), self._rest)

    def get_global_mode(self) -> str:
        """The registry's mode."""
        return self._ops.run(self._ops.get_global_mode(), self._rest)

    def update_global_mode(self, mode: str, force: bool = False) -> str:
        """Set the registry's mode."""
        return self._ops.run(self._ops.update_global_mode(mode, force), self._rest)

    def get_contexts(self, offset: int = 0, limit: int = -1) -> list[str]:
        """The registry's contexts."""
        return self._ops.run(self._ops.get_contexts(offset, limit), self._rest)

    def get_associations_by_resource_name(
        self,
        resource_name: str,
        resource_namespace: str,
        resource_type: str | None = None,
        association_types: list[str] | None = None,
        offset: int = 0,
        limit: int = -1,
    ) -> list[Association]:
        """The associations of a resource."""
        return self._ops.run(
            self._ops.get_associations_by_resource_name(
                resource_name, resource_namespace, resource_type, association_types, offset, limit
            ),
            self._rest,
        )

    def create_association(self, request: AssociationCreateOrUpdateRequest) -> AssociationResponse:
        """Create or update a resource's associations."""
        return self._ops.run(self._ops.create_association(request), self._rest)

    def delete_associations(
        self,
        resource_id: str,
        resource_type: str | None = None,
        association_types: list[str] | None = None,
        cascade_lifecycle: bool = False,
    ) -> None:
        """Delete a resource's associations."""
        return self._ops.run(
            self._ops.delete_associations(
                resource_id, resource_type, association_types, cascade_lifecycle
            ),
            self._rest,
        )


class AsyncSchemaRegistryClient:
    """confluent-kafka's async client of Confluent's Schema Registry: the
    methods of :class:`SchemaRegistryClient` as coroutines (asyncio or trio).

    Args:
        conf: as :class:`SchemaRegistryClient`'s.
    """

    def __init__(self, conf: Mapping[str, Any]) -> None:
        self._conf = conf
        settings = read_conf(conf)
        self._ops = Operations(
            settings.cache_capacity, settings.cache_latest_ttl_sec, not _is_mock(conf)
        )
        self._rest = self._open(settings.registry)

    def _open(self, registry: RegistryConfig) -> Any:
        return _SdkAsyncClient(registry)

    async def __aenter__(self) -> AsyncSchemaRegistryClient:
        return self

    async def __aexit__(self, *args: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the HTTP connections."""
        await self._rest.aclose()

    def config(self) -> Mapping[str, Any]:
        """The configuration the client was made with."""
        return self._conf

    @staticmethod
    def new_client(conf: Mapping[str, Any]) -> AsyncSchemaRegistryClient:
        """A client for ``conf``; with a ``mock://`` URL, one with an in-memory
        registry of its own (as confluent-kafka's mock client, for tests)."""
        if _is_mock(conf):
            return AsyncMockSchemaRegistryClient(conf)
        return AsyncSchemaRegistryClient(conf)

    async def clear_latest_caches(self) -> None:
        """Forget the cached latest versions."""
        self._ops.cache.clear_latest()

    async def clear_caches(self) -> None:
        """Forget every cached answer."""
        self._ops.cache.clear()

    async def register_schema(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> int:
        """Register ``schema`` under ``subject_name`` (or find it there); its id."""
        registered = await self.register_schema_full_response(
            subject_name, schema, normalize_schemas
        )
        return registered.schema_id  # type: ignore[return-value]

    async def register_schema_full_response(
        self, subject_name: str, schema: Schema, normalize_schemas: bool = False
    ) -> RegisteredSchema:
        """Register ``schema`` under ``subject_name`` (or find it there); the registered schema."""
        return await self._ops.arun(
            self._ops.register_schema_full_response(subject_name, schema, normalize_schemas),
            self._rest,
        )

    async def get_schema(
        self,
        schema_id: int,
        subject_name: str | None = None,
        fmt: str | None = None,
        reference_format: str | None = None,
    ) -> Schema:
        """The schema with id ``schema_id`` (``fmt``: ``serialized`` for Protobuf's descriptor)."""
        return await self._ops.arun(
            self._ops.get_schema(schema_id, subject_name, fmt, reference_format), self._rest
        )

    async def get_schema_by_guid(self, guid: str, fmt: str | None = None) -> Schema:
        """The schema with this GUID."""
        return await self._ops.arun(self._ops.get_schema_by_guid(guid, fmt), self._rest)

    async def get_schema_types(self) -> list[str]:
        """The schema types the registry knows (``AVRO``, ``JSON``, ``PROTOBUF``)."""
        return await self._ops.arun(self._ops.get_schema_types(), self._rest)

    async def get_subjects_by_schema_id(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[str]:
        """The subjects that hold the schema with id ``schema_id``."""
        return await self._ops.arun(
            self._ops.get_subjects_by_schema_id(schema_id, subject_name, deleted, offset, limit),
            self._rest,
        )

    async def get_schema_versions(
        self,
        schema_id: int,
        subject_name: str | None = None,
        deleted: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[SchemaVersion]:
        """The (subject, version) pairs holding the schema with id ``schema_id``."""
        return await self._ops.arun(
            self._ops.get_schema_versions(schema_id, subject_name, deleted, offset, limit),
            self._rest,
        )

    async def lookup_schema(
        self,
        subject_name: str,
        schema: Schema,
        normalize_schemas: bool = False,
        fmt: str | None = None,
        deleted: bool = False,
    ) -> RegisteredSchema:
        """The version of ``subject_name`` holding ``schema`` (40403 when none does)."""
        return await self._ops.arun(
            self._ops.lookup_schema(subject_name, schema, normalize_schemas, fmt, deleted),
            self._rest,
        )

    async def get_subjects(
        self,
        subject_prefix: str | None = None,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[str]:
        """The registry's subjects."""
        return await self._ops.arun(
            self._ops.get_subjects(subject_prefix, deleted, deleted_only, offset, limit), self._rest
        )

    async def delete_subject(self, subject_name: str, permanent: bool = False) -> list[int]:
        """Delete a subject (soft; then ``permanent``); the versions deleted."""
        return await self._ops.arun(self._ops.delete_subject(subject_name, permanent), self._rest)

    async def get_latest_version(
        self, subject_name: str, fmt: str | None = None
    ) -> RegisteredSchema:
        """The subject's latest version."""
        return await self._ops.arun(self._ops.get_latest_version(subject_name, fmt), self._rest)

    async def get_latest_with_metadata(
        self,
        subject_name: str,
        metadata: dict[str, str],
        deleted: bool = False,
        fmt: str | None = None,
    ) -> RegisteredSchema:
        """The subject's latest version whose metadata holds ``metadata``."""
        return await self._ops.arun(
            self._ops.get_latest_with_metadata(subject_name, metadata, deleted, fmt), self._rest
        )

    async def get_version(
        self,
        subject_name: str,
        version: int | str = "latest",
        deleted: bool = False,
        fmt: str | None = None,
    ) -> RegisteredSchema:
        """Version ``version`` of ``subject_name``."""
        return await self._ops.arun(
            self._ops.get_version(subject_name, version, deleted, fmt), self._rest
        )

    async def get_referenced_by(
        self, subject_name: str, version: int | str = "latest", offset: int = 0, limit: int = -1
    ) -> list[int]:
        """The ids of the schemas that reference this version."""
        return await self._ops.arun(
            self._ops.get_referenced_by(subject_name, version, offset, limit), self._rest
        )

    async def get_versions(
        self,
        subject_name: str,
        deleted: bool = False,
        deleted_only: bool = False,
        offset: int = 0,
        limit: int = -1,
    ) -> list[int]:
        """The subject's version numbers."""
        return await self._ops.arun(
            self._ops.get_versions(subject_name, deleted, deleted_only, offset, limit), self._rest
        )

    async def delete_version(self, subject_name: str, version: int, permanent: bool = False) -> int:
        """Delete one version of a subject; its number."""
        return await self._ops.arun(
            self._ops.delete_version(subject_name, version, permanent), self._rest
        )

    async def set_compatibility(
        self, subject_name: str | None = None, level: str | None = None
    ) -> Any:
        """Set the compatibility level of ``subject_name`` (None: the registry's); the registry's answer."""
        return await self._ops.arun(self._ops.set_compatibility(subject_name, level), self._rest)

    async def get_compatibility(self, subject_name: str | None = None) -> str:
        """The compatibility level of ``subject_name`` (None: the registry's)."""
        return await self._ops.arun(self._ops.get_compatibility(subject_name), self._rest)

    async def test_compatibility(
        self,
        subject_name: str,
        schema: Schema,
        version: int | str = "latest",
        normalize: bool = False,
        verbose: bool = False,
    ) -> bool:
        """Whether ``schema`` may follow ``version`` of ``subject_name``."""
        return await self._ops.arun(
            self._ops.test_compatibility(subject_name, schema, version, normalize, verbose),
            self._rest,
        )

    async def test_compatibility_all_versions(
        self, subject_name: str, schema: Schema, normalize: bool = False, verbose: bool = False
    ) -> bool:
        """Whether ``schema`` may follow every version of ``subject_name``."""
        return await self._ops.arun(
            self._ops.test_compatibility_all_versions(subject_name, schema, normalize, verbose),
            self._rest,
        )

    async def set_config(
        self, subject_name: str | None = None, config: ServerConfig | None = None
    ) -> Any:
        """Update the configuration of ``subject_name`` (None: the registry's)."""
        return await self._ops.arun(self._ops.set_config(subject_name, config), self._rest)

    async def delete_config(self, subject_name: str | None = None) -> ServerConfig:
        """Delete the configuration of ``subject_name`` (None: the registry's)."""
        return await self._ops.arun(self._ops.delete_config(subject_name), self._rest)

    async def get_config(self, subject_name: str | None = None) -> ServerConfig:
        """The configuration of ``subject_name`` (None: the registry's)."""
        return await self._ops.arun(self._ops.get_config(subject_name), self._rest)

    async def get_mode(self, subject_name: str) -> str:
        """The subject's mode (READWRITE, READONLY, IMPORT)."""
        return await self._ops.arun(self._ops.get_mode(subject_name), self._rest)

    async def update_mode(self, subject_name: str, mode: str, force: bool = False) -> str:
        """Set the subject's mode."""
        return await self._ops.arun(self._ops.update_mode(subject_name, mode, force), self._rest)

    async def delete_mode(self, subject_name: str) -> str:
        """Delete the subject's mode."""
        return await self._ops.arun(self._ops.delete_mode(subject_name), self._rest)

    async def get_global_mode(self) -> str:
        """The registry's mode."""
        return await self._ops.arun(self._ops.get_global_mode(), self._rest)

    async def update_global_mode(self, mode: str, force: bool = False) -> str:
        """Set the registry's mode."""
        return await self._ops.arun(self._ops.update_global_mode(mode, force), self._rest)

    async def get_contexts(self, offset: int = 0, limit: int = -1) -> list[str]:
        """The registry's contexts."""
        return await self._ops.arun(self._ops.get_contexts(offset, limit), self._rest)

    async def get_associations_by_resource_name(
        self,
        resource_name: str,
        resource_namespace: str,
        resource_type: str | None = None,
        association_types: list[str] | None = None,
        offset: int = 0,
        limit: int = -1,
    ) -> list[Association]:
        """The associations of a resource."""
        return await self._ops.arun(
            self._ops.get_associations_by_resource_name(
                resource_name, resource_namespace, resource_type, association_types, offset, limit
            ),
            self._rest,
        )

    async def create_association(
        self, request: AssociationCreateOrUpdateRequest
    ) -> AssociationResponse:
        """Create or update a resource's associations."""
        return await self._ops.arun(self._ops.create_association(request), self._rest)

    async def delete_associations(
        self,
        resource_id: str,
        resource_type: str | None = None,
        association_types: list[str] | None = None,
        cascade_lifecycle: bool = False,
    ) -> None:
        """Delete a resource's associations."""
        return await self._ops.arun(
            self._ops.delete_associations(
                resource_id, resource_type, association_types, cascade_lifecycle
            ),
            self._rest,
        )


def _is_mock(conf: Mapping[str, Any]) -> bool:
    url = conf.get("url")
    return isinstance(url, str) and url.startswith("mock://")


class MockSchemaRegistryClient(SchemaRegistryClient):
    """A :class:`SchemaRegistryClient` whose registry is in memory, its own
    (``new_client()`` with a ``mock://`` URL): for tests of serdes."""

    def _open(self, registry: RegistryConfig) -> Any:
        return MemoryRegistry()


class AsyncMockSchemaRegistryClient(AsyncSchemaRegistryClient):
    """The async :class:`MockSchemaRegistryClient`."""

    def _open(self, registry: RegistryConfig) -> Any:
        return AsyncMemoryRegistry()
