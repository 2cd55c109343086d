"""The admin client's config calls: describing and altering the configs of
brokers, topics, groups and client-metrics resources (KIP-714).

A part of :class:`~trafka.sdk.admin.Admin` (see :mod:`.client_core`): what
goes on the wire and what an answer means is in :mod:`.configs`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError

from .._validate import (
    check_bool,
    check_group_id,
    check_group_ids,
    check_names,
    check_str,
    check_topic,
    check_topics,
)
from ._common import check_broker_id, check_config_changes
from .client_core import AdminCore
from .configs import (
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
    alter_configs_request,
    describe_configs_request,
    incremental_alter_configs_request,
    list_client_metrics_resources_request,
    read_alter_configs,
    read_describe_configs,
    read_list_client_metrics_resources,
)

__all__ = ["ConfigCalls"]


def _any_str(name: str, value: Any) -> str:
    """A str, empty or not (a name the broker judges)."""
    result: str = check_str(name, value, empty=True)
    return result


def _broker_or_default(name: str, value: Any) -> int | None:
    """A broker id, or None for the cluster-wide default broker."""
    return None if value is None else check_broker_id(name, value)


class ConfigCalls(AdminCore):
    """The calls on configs."""

    async def describe_configs(
        self,
        topics: Iterable[str] = (),
        brokers: Iterable[int] = (),
        *,
        overrides_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, dict[str, str | None]]:
        """Current configs of topics (keyed by name) and brokers (keyed by ``str(node_id)``).

        Args:
            topics: the topics whose configs to describe.
            brokers: the broker ids whose configs to describe.
            overrides_only: leave out settings at their default (static or
                broker-wide values a topic inherits).
        """
        topics = check_topics("topics", topics)
        brokers = check_names("brokers", brokers, check_broker_id, "broker ids")
        check_bool("overrides_only", overrides_only)
        resources = [(TOPIC_RESOURCE, t) for t in topics]
        resources += [(BROKER_RESOURCE, str(b)) for b in brokers]
        return await self._describe_configs(
            "describe_configs", resources, overrides_only, timeout_ms
        )

    async def describe_group_configs(
        self,
        group_ids: Iterable[str],
        *,
        overrides_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, dict[str, str | None]]:
        """Current configs of groups (ConfigResource GROUP), keyed by group id: for
        share groups ``share.auto.offset.reset``, ``share.record.lock.duration.ms``...

        Args:
            overrides_only: leave out settings at their default (the broker's).
        """
        group_ids = check_group_ids("group_ids", group_ids)
        check_bool("overrides_only", overrides_only)
        resources = [(GROUP_RESOURCE, g) for g in group_ids]
        return await self._describe_configs(
            "describe_group_configs", resources, overrides_only, timeout_ms
        )

    async def _describe_configs(
        self,
        what: str,
        resources: list[tuple[int, str]],
        overrides_only: bool,
        timeout_ms: int | None,
    ) -> dict[str, dict[str, str | None]]:
        # As Java's admin client routes them: a broker's own configs are asked
        # of that broker (a ZooKeeper-mode broker describes only itself and
        # refuses another's id with INVALID_REQUEST); the rest of one broker.
        by_target: dict[int | None, list[tuple[int, str]]] = {}
        for resource in resources:
            kind, name = resource
            target = int(name) if kind == BROKER_RESOURCE and name else None
            by_target.setdefault(target, []).append(resource)

        async def attempt(deadline: float) -> dict[str, dict[str, str | None]]:
            out: dict[str, dict[str, str | None]] = {}
            for target, asked in by_target.items():
                if target is None:
                    conn = await self._controller()
                else:
                    await self._cluster.refresh_metadata()
                    conn = await self._cluster.connection(target)
                body = describe_configs_request(conn.version_for(ApiKey.DESCRIBE_CONFIGS), asked)
                resp = await conn.request(ApiKey.DESCRIBE_CONFIGS, body)
                out.update(read_describe_configs(resp, overrides_only=overrides_only))
            return out

        return await self._calls.run(what, timeout_ms, attempt)

    async def alter_topic_configs(
        self,
        changes: Mapping[str, Mapping[str, str | None]],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set (or, with ``None``, reset to default) topic configs.

        Uses IncrementalAlterConfigs when the broker has it (other settings are
        kept), else AlterConfigs (which replaces the topic's whole config).
        Both are idempotent, so a retry repeats the whole change.
        """
        changes = check_config_changes("changes", changes, check_topic)
        await self._alter_configs("alter_topic_configs", TOPIC_RESOURCE, changes, timeout_ms)

    async def alter_broker_configs(
        self,
        changes: Mapping[int | None, Mapping[str, str | None]],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set (or, with ``None``, delete) brokers' dynamic configs, such as the
        replication throttles' ``leader.replication.throttled.rate`` and
        ``follower.replication.throttled.rate`` (KIP-73)::

            await admin.alter_broker_configs({1: {"leader.replication.throttled.rate": "1000000"}})

        Args:
            changes: per broker id (``None``: the cluster-wide default, Kafka's
                ``<default>``), the configs to set or delete. Each broker's
                change is sent to that broker, as Java's admin client sends
                them (a ZooKeeper-mode broker changes only its own), with
                IncrementalAlterConfigs (other configs are kept).

        Raises:
            KafkaError: a broker refused its change (INVALID_CONFIG for a bad
                value, INVALID_REQUEST for a config it cannot change at run
                time), or UNSUPPORTED_VERSION from a broker without
                IncrementalAlterConfigs (Kafka 2.3+).
        """
        checked = check_config_changes("changes", changes, _broker_or_default)
        done: set[int | None] = set()

        async def attempt(deadline: float) -> None:
            for broker, configs in checked.items():
                if broker in done:
                    continue
                if broker is None:
                    conn = await self._controller()
                else:
                    await self._cluster.refresh_metadata()
                    conn = await self._cluster.connection(broker)
                name = "" if broker is None else str(broker)
                if not conn.supports(ApiKey.INCREMENTAL_ALTER_CONFIGS):
                    raise KafkaError(
                        ErrorCode.UNSUPPORTED_VERSION,
                        "the broker does not serve IncrementalAlterConfigs (Kafka 2.3+)",
                    )
                resp = await conn.request(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    incremental_alter_configs_request(BROKER_RESOURCE, {name: configs}),
                )
                read_alter_configs(resp)
                done.add(broker)

        await self._calls.run("alter_broker_configs", timeout_ms, attempt)

    async def alter_group_configs(
        self,
        changes: Mapping[str, Mapping[str, str | None]],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set (or, with ``None``, reset to default) group configs (ConfigResource
        GROUP), as :meth:`alter_topic_configs` does for topics. A share group starts
        reading where ``share.auto.offset.reset`` says (``latest`` by default)::

            await admin.alter_group_configs({"workers": {"share.auto.offset.reset": "earliest"}})
        """
        changes = check_config_changes("changes", changes, check_group_id)
        await self._alter_configs("alter_group_configs", GROUP_RESOURCE, changes, timeout_ms)

    async def list_client_metrics_resources(self, *, timeout_ms: int | None = None) -> list[str]:
        """The names of the client-metrics resources (KIP-714 subscriptions), sorted,
        as Java's ``listClientMetricsResources`` (ListClientMetricsResources, key 74).

        Raises:
            KafkaError: CLUSTER_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS on
                the cluster; UNSUPPORTED_VERSION from a broker without the API.
        """

        async def attempt(deadline: float) -> list[str]:
            conn = await self._controller()
            if not conn.supports(ApiKey.LIST_CONFIG_RESOURCES):
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    "the broker does not serve ListClientMetricsResources (Kafka 3.7+)",
                )
            resp = await conn.request(
                ApiKey.LIST_CONFIG_RESOURCES, list_client_metrics_resources_request()
            )
            return read_list_client_metrics_resources(resp)

        return await self._calls.run("list_client_metrics_resources", timeout_ms, attempt)

    async def describe_client_metrics_configs(
        self,
        names: Iterable[str],
        *,
        overrides_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, dict[str, str | None]]:
        """The settings of client-metrics resources (ConfigResource CLIENT_METRICS),
        keyed by name: ``metrics``, ``interval.ms`` and ``match``, each the
        resource's own value or Kafka's default (any name can be described).

        Args:
            overrides_only: only the settings the resource sets.
        """
        names = check_names("names", names, _any_str)
        check_bool("overrides_only", overrides_only)
        resources = [(CLIENT_METRICS_RESOURCE, n) for n in names]
        return await self._describe_configs(
            "describe_client_metrics_configs", resources, overrides_only, timeout_ms
        )

    async def alter_client_metrics_configs(
        self,
        name: str,
        changes: Mapping[str, str | None],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set (or, with ``None``, delete) settings of one client-metrics resource, as
        :meth:`alter_group_configs` does for groups; deleting every setting deletes
        the resource. Lists are comma-separated strings::

            await admin.alter_client_metrics_configs(
                "producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}
            )

        Raises:
            KafkaError: INVALID_REQUEST (empty name, unknown setting, interval
                outside 100-3600000 ms) or INVALID_CONFIG (a bad ``match`` item or
                value), as the broker refuses it.
        """
        check_str("name", name, empty=True)  # the broker's to refuse (INVALID_REQUEST)
        changes = check_config_changes("changes", {name: changes}, _any_str)[name]
        await self._alter_configs(
            "alter_client_metrics_configs", CLIENT_METRICS_RESOURCE, {name: changes}, timeout_ms
        )

    async def _alter_configs(
        self,
        what: str,
        resource_type: int,
        changes: Mapping[str, Mapping[str, str | None]],
        timeout_ms: int | None,
    ) -> None:
        async def attempt(deadline: float) -> None:
            conn = await self._controller()
            if conn.supports(ApiKey.INCREMENTAL_ALTER_CONFIGS):
                resp = await conn.request(
                    ApiKey.INCREMENTAL_ALTER_CONFIGS,
                    incremental_alter_configs_request(resource_type, changes),
                )
            else:
                resp = await conn.request(
                    ApiKey.ALTER_CONFIGS, alter_configs_request(resource_type, changes)
                )
            read_alter_configs(resp)

        await self._calls.run(what, timeout_ms, attempt)
