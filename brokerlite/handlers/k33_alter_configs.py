"""AlterConfigs (key 33), versions 0-2: replace a topic's or a group's config overrides.

The legacy, non-incremental API (kafka-python's ``alter_configs`` uses it):
the configs given become the resource's whole set of overrides; configs not
named return to their defaults. Groups (resource type 32) take the ``share.*``
group configs, as Kafka's controller allows through this API too. Validation,
``validate_only``, duplicates and broker resources behave as in
IncrementalAlterConfigs.

Client metrics (resource type 16, KIP-714 subscriptions) are taken too, as
Kafka's controller takes them here: the configs given become the resource's
whole set (none deletes it), validated as IncrementalAlterConfigs validates
them.

Brokers (cluster mode): the replication throttles' rates, as in
IncrementalAlterConfigs; the configs given become the broker's (or
``<default>``'s) whole set of dynamic configs.

Authorization (after the duplicate check): ALTER_CONFIGS on the topic for a
topic, on the group for a group, on the cluster for the broker; otherwise that
resource gets TOPIC_, GROUP_ or CLUSTER_AUTHORIZATION_FAILED and is unchanged.
Broker loggers are refused as invalid before any authorization, as Kafka does
in this legacy API.

Cluster mode: a topic's change is checked here and written to ZooKeeper
(``/config/topics/T``), whence every broker applies it; the answer comes once
this broker's reading of ZooKeeper shows it. A group's change likewise goes to
``/config/groups/<group>`` (:mod:`trafka.brokerlite.cluster.driver.group_config_sync`).
"""

from __future__ import annotations

import logging
from collections import Counter

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.errors import BrokerError
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k33_alter_configs as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._configs import ResourceType
from ._util import (
    alter_resource_configs,
    code_of,
    config_authorization_error,
    message_of,
    park_results_on_tasks,
)

API_KEY = ApiKey.ALTER_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 2

log = logging.getLogger("trafka.brokerlite")

Result = m.AlterConfigsResponse.AlterConfigsResourceResponse


def handle(ctx: RequestContext, request: m.AlterConfigsRequest) -> m.AlterConfigsResponse | Parked:
    keys = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results: list[Result] = []
    tasks: dict[int, ZkTask] = {}  # results index -> its ZooKeeper write (cluster mode)
    for resource in request.resources:
        code, message = ErrorCode.NONE, None
        names = Counter(c.name for c in resource.configs)
        refused = ErrorCode.NONE
        if resource.resource_type != ResourceType.BROKER_LOGGER:
            refused = config_authorization_error(
                ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
            )
        if keys[(resource.resource_type, resource.resource_name)] > 1:
            code, message = ErrorCode.INVALID_REQUEST, "resource named twice"
        elif refused:
            code = refused
            message = f"not authorized to alter configs of {resource.resource_name!r}"
        elif resource.resource_type not in (
            ResourceType.TOPIC,
            ResourceType.GROUP,
            ResourceType.CLIENT_METRICS,
            ResourceType.BROKER,
        ):
            code = ErrorCode.INVALID_REQUEST
            message = "only topic, group, broker and client-metrics configs can be altered"
        elif any(k > 1 for k in names.values()):
            code, message = ErrorCode.INVALID_REQUEST, "a config is named twice"
        elif any(c.value is None for c in resource.configs):
            code, message = ErrorCode.INVALID_CONFIG, "null config values are not allowed"
        else:
            changes: dict[str, str | None] = {c.name: c.value for c in resource.configs}
            try:
                if resource.resource_type == ResourceType.CLIENT_METRICS:
                    ctx.telemetry.replace(
                        resource.resource_name, changes, validate_only=request.validate_only
                    )
                else:
                    task = alter_resource_configs(
                        ctx,
                        resource.resource_type,
                        resource.resource_name,
                        changes,
                        incremental=False,
                        validate_only=request.validate_only,
                    )
                    if task is not None:
                        tasks[len(results)] = task
            except BrokerError as exc:
                code, message = code_of(exc), message_of(exc)
            else:
                if not request.validate_only and resource.resource_type == ResourceType.TOPIC:
                    log.info("topic %r configs replaced: %s", resource.resource_name, changes)
        results.append(
            Result(
                error_code=code,
                error_message=message,
                resource_type=resource.resource_type,
                resource_name=resource.resource_name,
            )
        )
    if tasks:
        return park_results_on_tasks(
            ctx, tasks, results, lambda out: m.AlterConfigsResponse(responses=out)
        )
    return m.AlterConfigsResponse(responses=results)


def error_response(
    request: m.AlterConfigsRequest | None, version: int, code: ErrorCode
) -> m.AlterConfigsResponse:
    if request is None:
        return m.AlterConfigsResponse()
    return m.AlterConfigsResponse(
        responses=[
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
    uses="logs cluster share_groups authorizer telemetry purgatory",
)
