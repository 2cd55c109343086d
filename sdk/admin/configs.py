"""Configs of topics, brokers, groups and client-metrics resources:
DescribeConfigs, IncrementalAlterConfigs (AlterConfigs for brokers without it)
and ListClientMetricsResources (KIP-714). Requests built and answers read here,
without I/O; :class:`~trafka.sdk.admin.Admin` sends them to the controller.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import ApiKey
from trafka.codec.messages import k32_describe_configs as dc
from trafka.codec.messages import k33_alter_configs as ac
from trafka.codec.messages import k44_incremental_alter_configs as iac
from trafka.codec.messages import k74_list_config_resources as lcmr

from ..calls import TRANSIENT, check
from ._common import fit

__all__ = [
    "BROKER_RESOURCE",
    "CLIENT_METRICS_RESOURCE",
    "GROUP_RESOURCE",
    "TOPIC_RESOURCE",
    "alter_configs_request",
    "describe_configs_request",
    "incremental_alter_configs_request",
    "is_override",
    "list_client_metrics_resources_request",
    "read_alter_configs",
    "read_describe_configs",
    "read_list_client_metrics_resources",
]

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32  # group configs (KIP-848 and KIP-932: share.auto.offset.reset ...)
CLIENT_METRICS_RESOURCE = 16  # KIP-714 subscriptions: metrics, interval.ms, match

# DescribeConfigs config_source values that mean "set on this very resource".
_DYNAMIC_TOPIC_CONFIG = 1
_DYNAMIC_BROKER_CONFIG = 2
_GROUP_CONFIG = 8
_OVERRIDE_SOURCE = {
    TOPIC_RESOURCE: _DYNAMIC_TOPIC_CONFIG,
    BROKER_RESOURCE: _DYNAMIC_BROKER_CONFIG,
    GROUP_RESOURCE: _GROUP_CONFIG,
    CLIENT_METRICS_RESOURCE: 7,  # CLIENT_METRICS_CONFIG
}


def is_override(entry: Any, resource_type: int) -> bool:
    """Whether a DescribeConfigs entry is set on the resource itself (not a default)."""
    if entry.config_source < 0:  # v0 has no source, only is_default
        return not entry.is_default
    return bool(entry.config_source == _OVERRIDE_SOURCE.get(resource_type))


def describe_configs_request(version: int, resources: Iterable[tuple[int, str]]) -> Any:
    """DescribeConfigs at ``version`` of ``(resource type, name)`` pairs, every key."""
    req = dc.DescribeConfigsRequest
    entries = [
        req.DescribeConfigsResource(resource_type=kind, resource_name=name, configuration_keys=None)
        for kind, name in resources
    ]
    return fit(ApiKey.DESCRIBE_CONFIGS, version, req, resources=entries)


def read_describe_configs(resp: Any, *, overrides_only: bool) -> dict[str, dict[str, str | None]]:
    """Per resource name, its settings (only those set on it with ``overrides_only``).

    Raises:
        Again: a resource with a transient error.
        KafkaError: a resource's other error.
    """
    out: dict[str, dict[str, str | None]] = {}
    for r in resp.results:
        check(
            r.error_code,
            f"describing configs of {r.resource_name!r}",
            r.error_message,
            again=TRANSIENT,
        )
        out[r.resource_name] = {
            c.name: c.value
            for c in r.configs
            if not overrides_only or is_override(c, r.resource_type)
        }
    return out


def incremental_alter_configs_request(
    resource_type: int, changes: Mapping[str, Mapping[str, str | None]]
) -> Any:
    """IncrementalAlterConfigs: per resource, set each key, or delete it for None."""
    req = iac.IncrementalAlterConfigsRequest
    return req(
        resources=[
            req.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    req.AlterableConfig(name=k, config_operation=0 if v is not None else 1, value=v)
                    for k, v in cfgs.items()
                ],
            )
            for name, cfgs in changes.items()
        ]
    )


def alter_configs_request(
    resource_type: int, changes: Mapping[str, Mapping[str, str | None]]
) -> Any:
    """The legacy AlterConfigs, which replaces each resource's config with the
    keys set (a key with None is left out, so it goes back to its default)."""
    req = ac.AlterConfigsRequest
    return req(
        resources=[
            req.AlterConfigsResource(
                resource_type=resource_type,
                resource_name=name,
                configs=[
                    req.AlterableConfig(name=k, value=v) for k, v in cfgs.items() if v is not None
                ],
            )
            for name, cfgs in changes.items()
        ]
    )


def read_alter_configs(resp: Any) -> None:
    """Nothing when every resource of an (Incremental)AlterConfigs answer was changed.

    Raises:
        Again: a resource with a transient error.
        KafkaError: a resource's other error.
    """
    for r in resp.responses:
        check(
            r.error_code,
            f"altering configs of {r.resource_name!r}",
            r.error_message,
            again=TRANSIENT,
        )


def list_client_metrics_resources_request() -> Any:
    """ListClientMetricsResources."""
    return lcmr.ListConfigResourcesRequest()


def read_list_client_metrics_resources(resp: Any) -> list[str]:
    """The resource names of a ListClientMetricsResources answer, sorted.

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(resp.error_code, "listing client-metrics resources", None, again=TRANSIENT)
    return sorted(r.resource_name for r in resp.config_resources)
