"""DescribeConfigs (key 32), versions 0-4 (1-4 with ``protocol_version`` 4.0): topic and broker configs.

* Topics: every topic config with its value and source (a topic override, or
  the broker default), optionally filtered by ``configuration_keys``.
  Synonyms (when asked for) list the topic override, then the broker setting
  that supplies the default. Types are reported from v3; documentation is null.
* The broker (resource name ``""`` or the node id): its settings under their
  Kafka names, read-only; in cluster mode also the dynamic ones that are set,
  the replication throttles' rates (KIP-73), writable, with source
  DYNAMIC_BROKER_CONFIG (this broker's) or DYNAMIC_DEFAULT_BROKER_CONFIG
  (``<default>``'s; the only ones listed for ``""``).
* Groups (resource type 32, any group name, whether the group exists or not):
  the ``share.*`` group configs, each the group's override (source
  GROUP_CONFIG, 8) or the broker's ``group.share.*`` default; synonyms list the
  override, then the broker setting (or the config's own default where Kafka
  has no broker setting for it), as Kafka does. An empty group name is
  INVALID_REQUEST.
* Client metrics (resource type 16, KIP-714 subscriptions; any name, whether
  the resource exists or not): ``interval.ms``, ``match`` and ``metrics``, each
  the resource's setting (source CLIENT_METRICS_CONFIG, 7, with itself as the
  one synonym) or Kafka's default (source DEFAULT_CONFIG, no synonyms); values
  as Kafka prints them (lists joined by commas). An empty name is
  INVALID_REQUEST. Authorized on the cluster, as broker configs are.
* Broker loggers and other resource types: INVALID_REQUEST.
* An unknown topic is UNKNOWN_TOPIC_OR_PARTITION.
* Authorization: DESCRIBE_CONFIGS on the topic for a topic, on the group for a
  group, on the cluster for the broker and broker loggers; otherwise that
  resource gets TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED and no configs.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.groups.share_groups import GroupConfigEntry
from trafka.brokerlite.storage.topic_configs import ConfigEntry, ConfigSource
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k32_describe_configs as m

from ._base import HandlerSpec, RequestContext
from ._configs import (
    BROKER_SYNONYMS,
    KAFKA_NULL_DEFAULTS,
    ResourceType,
    broker_entries,
    client_metrics_entries,
    dynamic_broker_entries,
    is_broker_name,
)
from ._util import code_of, config_authorization_error, message_of

if TYPE_CHECKING:
    from trafka.brokerlite.telemetry import ClientTelemetry

API_KEY = ApiKey.DESCRIBE_CONFIGS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 4

Result = m.DescribeConfigsResponse.DescribeConfigsResult
Entry = m.DescribeConfigsResponse.DescribeConfigsResourceResult
Synonym = m.DescribeConfigsResponse.DescribeConfigsSynonym


def _synonyms(entry: ConfigEntry, broker_values: dict[str, ConfigEntry]) -> list[Synonym]:
    out = []
    if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG:
        out.append(Synonym(name=entry.name, value=entry.value, source=int(entry.source)))
    broker_name = BROKER_SYNONYMS.get(entry.name)
    broker_entry = broker_values.get(broker_name) if broker_name else None
    if broker_entry is not None:
        if (
            broker_entry.source == ConfigSource.DEFAULT_CONFIG
            and broker_name in KAFKA_NULL_DEFAULTS
        ):
            # Kafka lists a topic config's broker synonyms from the first one that
            # has a value; these have none by default (the default is another
            # unit's: log.retention.hours), so Kafka lists no broker synonym at all.
            return out
        out.append(
            Synonym(
                name=broker_entry.name, value=broker_entry.value, source=int(broker_entry.source)
            )
        )
    elif entry.source != ConfigSource.DYNAMIC_TOPIC_CONFIG:
        out.append(Synonym(name=entry.name, value=entry.value, source=int(entry.source)))
    return out


def _writable(
    name: str,
    value: str | None,
    source: int,
    synonyms: list[Synonym],
    config_type: int,
    version: int,
) -> Entry:
    """An entry of a group or client-metrics resource: writable, never sensitive."""
    return Entry(
        name=name,
        value=value,
        read_only=False,
        config_source=source,
        is_sensitive=False,
        synonyms=synonyms,
        config_type=config_type if version >= 3 else 0,
        documentation=None,
    )


def _group_entries(
    entries: list[GroupConfigEntry], version: int, include_synonyms: bool
) -> list[Entry]:
    return [
        _writable(
            e.name,
            e.value,
            e.source,
            [Synonym(name=n, value=v, source=src) for n, v, src in e.synonyms]
            if include_synonyms
            else [],
            e.config_type,
            version,
        )
        for e in entries
    ]


def _client_metrics(
    telemetry: ClientTelemetry,
    name: str,
    keys: list[str] | None,
    version: int,
    include_synonyms: bool,
) -> list[Entry]:
    wanted = set(keys) if keys else None
    return [
        _writable(
            e.name,
            e.value,
            e.source,
            [Synonym(name=e.name, value=e.value, source=e.source)]
            if include_synonyms and not e.is_default
            else [],
            e.config_type,
            version,
        )
        for e in client_metrics_entries(telemetry, name)
        if wanted is None or e.name in wanted
    ]


def handle(ctx: RequestContext, request: m.DescribeConfigsRequest) -> m.DescribeConfigsResponse:
    broker_values = {e.name: e for e in broker_entries(ctx.config)}
    results = [_described(ctx, request, r, broker_values) for r in request.resources]
    if ctx.version == 0:
        results = [_as_v0(r) for r in results]
    return m.DescribeConfigsResponse(results=results)


def _described(
    ctx: RequestContext,
    request: m.DescribeConfigsRequest,
    resource: m.DescribeConfigsRequest.DescribeConfigsResource,
    broker_values: dict[str, ConfigEntry],
) -> Result:
    """One resource's answer: its configs, or the error that refuses it."""
    version = ctx.version
    kind, name = resource.resource_type, resource.resource_name
    keys = resource.configuration_keys

    def failed(code: int, message: str | None) -> Result:
        return Result(
            error_code=code, error_message=message, resource_type=kind, resource_name=name
        )

    def found(configs: list[Entry]) -> Result:
        return Result(
            error_code=ErrorCode.NONE,
            error_message=None,
            resource_type=kind,
            resource_name=name,
            configs=configs,
        )

    refused = config_authorization_error(ctx, AclOperation.DESCRIBE_CONFIGS, kind, name)
    if refused:
        return failed(refused, f"not authorized to describe configs of {name!r}")
    try:
        if kind == ResourceType.GROUP:
            group_entries = ctx.share_groups.describe_configs(name)
            if keys:
                group_entries = [e for e in group_entries if e.name in set(keys)]
            return found(_group_entries(group_entries, version, request.include_synonyms))
        if kind == ResourceType.CLIENT_METRICS and not name:
            return failed(
                ErrorCode.INVALID_REQUEST, "Client metrics subscription name must not be empty"
            )
        if kind == ResourceType.CLIENT_METRICS:
            return found(
                _client_metrics(ctx.telemetry, name, keys, version, request.include_synonyms)
            )
        if kind == ResourceType.TOPIC:
            entries = ctx.logs.describe_configs(name)
        elif kind == ResourceType.BROKER and is_broker_name(ctx.node_id, name):
            entries = list(broker_values.values())
            if ctx.cluster is not None:
                quotas = ctx.cluster.replication_quotas
                entries = sorted(
                    entries
                    + dynamic_broker_entries(
                        quotas.own_configs, quotas.default_configs, default_only=not name
                    ),
                    key=lambda e: e.name,
                )
        else:
            return failed(
                ErrorCode.INVALID_REQUEST,
                f"resource type {kind} {name!r} is not described by brokerlite",
            )
    except BrokerError as exc:
        return failed(code_of(exc), message_of(exc))
    if keys:
        wanted = set(keys)
        entries = [e for e in entries if e.name in wanted]
    return found(
        [
            Entry(
                name=e.name,
                value=None if e.sensitive else e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_sensitive=e.sensitive,
                synonyms=_synonyms(e, broker_values) if request.include_synonyms else [],
                config_type=int(e.config_type) if version >= 3 else 0,
                documentation=None,
            )
            for e in entries
        ]
    )


_DEFAULT_CONFIG = 5  # ConfigSource.DEFAULT_CONFIG


def _as_v0(result: Result) -> Result:
    """v0 says ``is_default`` where later versions give the source."""
    return dataclasses.replace(
        result,
        configs=[
            dataclasses.replace(e, is_default=e.config_source == _DEFAULT_CONFIG)
            for e in result.configs
        ],
    )


def error_response(
    request: m.DescribeConfigsRequest | None, version: int, code: ErrorCode
) -> m.DescribeConfigsResponse:
    if request is None:
        return m.DescribeConfigsResponse()
    return m.DescribeConfigsResponse(
        results=[
            Result(
                error_code=code,
                error_message=None,
                resource_type=r.resource_type,
                resource_name=r.resource_name,
            )
            for r in request.resources
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="config logs cluster share_groups authorizer telemetry",
)
