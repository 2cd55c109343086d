"""IncrementalAlterConfigs (key 44), versions 0-1: change some topic or group configs.

Operations per config: SET (0), DELETE (1, back to the default), APPEND (2)
and SUBTRACT (3) for list configs (``cleanup.policy``); APPEND/SUBTRACT on a
non-list config is INVALID_CONFIG. The whole resource is validated before
anything changes; ``validate_only`` changes nothing. A resource named twice,
or a config named twice in one resource, is INVALID_REQUEST. Groups (resource
type 32) take the ``share.*`` group configs (none is a list), validated as
Kafka validates them: INVALID_CONFIG for an unknown name, a bad value or one
outside the broker's ``group.share.min.*``/``max.*`` bounds.

Brokers (resource type 4; cluster mode only: a single node takes only DELETE
of them, which changes nothing, and refuses the rest with INVALID_REQUEST): the
replication throttles' rates, ``leader.replication.throttled.rate`` and
``follower.replication.throttled.rate`` (KIP-73), SET or DELETE, for this
broker (its id) or every broker (``""``, Kafka's ``<default>``), as a
ZooKeeper-mode Kafka takes them: another broker's id, or any other broker
config (brokerlite's others are static), is INVALID_REQUEST; a value that is
not a whole number from 0 to 2^63-1, or APPEND/SUBTRACT, INVALID_CONFIG.

Client metrics (resource type 16, KIP-714 subscriptions): ``metrics``,
``interval.ms`` and ``match``, authorized on the cluster. The set a change
leaves is validated as Kafka's controller validates it
(:func:`trafka.brokerlite.telemetry.parse_subscription`): an empty name, an
unknown setting or an interval outside 100-3600000 is INVALID_REQUEST; a value
that does not parse, a null SET value or a bad ``match`` item INVALID_CONFIG;
APPEND/SUBTRACT on ``interval.ms`` (not a list) INVALID_CONFIG. Deleting the
last setting deletes the resource. Changes are durable (a journal).

Authorization (after the duplicate check): ALTER_CONFIGS on the topic for a
topic, on the group for a group, on the cluster for the broker and broker
loggers; otherwise that resource gets TOPIC_, GROUP_ or
CLUSTER_AUTHORIZATION_FAILED and is unchanged.

Cluster mode: a topic's change is checked here and written to ZooKeeper
(``/config/topics/T``), whence every broker applies it; the answer comes once
this broker's reading of ZooKeeper shows it. A broker's change is written to
``/config/brokers/<id>`` (``<default>``) with a ``/config/changes``
notification, and answered once this broker has applied it. A group's change
likewise goes to ``/config/groups/<group>``
(:mod:`trafka.brokerlite.cluster.driver.group_config_sync`).
"""

from __future__ import annotations

import logging
from collections import Counter

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage.topic_configs import ConfigType
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k44_incremental_alter_configs as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._configs import ResourceType, client_metrics_changes
from ._util import (
    alter_resource_configs,
    code_of,
    config_authorization_error,
    message_of,
    park_results_on_tasks,
)

API_KEY = ApiKey.INCREMENTAL_ALTER_CONFIGS
MIN_VERSION = 0
MAX_VERSION = 1

SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

log = logging.getLogger("trafka.brokerlite")

Result = m.IncrementalAlterConfigsResponse.AlterConfigsResourceResponse


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _changes(
    ctx: RequestContext, resource: m.IncrementalAlterConfigsRequest.AlterConfigsResource
) -> dict[str, str | None]:
    names = Counter(c.name for c in resource.configs)
    repeated = [n for n, k in names.items() if k > 1]
    if repeated:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"configs named twice: {', '.join(repeated)}")
    if resource.resource_type in (ResourceType.GROUP, ResourceType.BROKER):
        return _plain_changes(resource)
    current = {e.name: e for e in ctx.logs.describe_configs(resource.resource_name)}
    changes: dict[str, str | None] = {}
    for c in resource.configs:
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise _Refused(ErrorCode.INVALID_CONFIG, f"{c.name}: a null value")
            changes[c.name] = c.value
        elif op == DELETE:
            changes[c.name] = None
        elif op in (APPEND, SUBTRACT):
            entry = current.get(c.name)
            if entry is None or entry.config_type != ConfigType.LIST:
                raise _Refused(
                    ErrorCode.INVALID_CONFIG,
                    f"{c.name}: append and subtract only apply to list configs",
                )
            items = [i for i in (entry.value or "").split(",") if i]
            given = [i.strip() for i in (c.value or "").split(",") if i.strip()]
            if op == APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            changes[c.name] = ",".join(items)
        else:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"{c.name}: unknown operation {op}")
    return changes


def _plain_changes(
    resource: m.IncrementalAlterConfigsRequest.AlterConfigsResource,
) -> dict[str, str | None]:
    """The changes of a resource whose configs are not lists (a group's, a broker's)."""
    changes: dict[str, str | None] = {}
    for c in resource.configs:
        op = c.config_operation
        if op == SET:
            if c.value is None:
                raise _Refused(ErrorCode.INVALID_CONFIG, f"{c.name}: a null value")
            changes[c.name] = c.value
        elif op == DELETE:
            changes[c.name] = None
        elif op in (APPEND, SUBTRACT):
            raise _Refused(
                ErrorCode.INVALID_CONFIG,
                f"{c.name}: append and subtract only apply to list configs",
            )
        else:
            raise _Refused(ErrorCode.INVALID_REQUEST, f"{c.name}: unknown operation {op}")
    return changes


def _alter_client_metrics(
    ctx: RequestContext,
    resource: m.IncrementalAlterConfigsRequest.AlterConfigsResource,
    validate_only: bool,
) -> None:
    names = Counter(c.name for c in resource.configs)
    repeated = [n for n, k in names.items() if k > 1]
    if repeated:
        raise _Refused(ErrorCode.INVALID_REQUEST, f"configs named twice: {', '.join(repeated)}")
    for c in resource.configs:
        if c.config_operation not in (SET, DELETE, APPEND, SUBTRACT):
            raise _Refused(
                ErrorCode.INVALID_REQUEST, f"{c.name}: unknown operation {c.config_operation}"
            )
    telemetry = ctx.telemetry
    after = client_metrics_changes(
        telemetry.configs(resource.resource_name),
        [(c.name, c.config_operation, c.value) for c in resource.configs],
    )
    if isinstance(after, str):
        raise _Refused(ErrorCode.INVALID_CONFIG, after)
    telemetry.replace(resource.resource_name, after, validate_only=validate_only)


def handle(
    ctx: RequestContext, request: m.IncrementalAlterConfigsRequest
) -> m.IncrementalAlterConfigsResponse | Parked:
    keys = Counter((r.resource_type, r.resource_name) for r in request.resources)
    results: list[Result] = []
    tasks: dict[int, ZkTask] = {}  # results index -> its ZooKeeper write (cluster mode)
    for resource in request.resources:
        code, message = ErrorCode.NONE, None
        try:
            if keys[(resource.resource_type, resource.resource_name)] > 1:
                raise _Refused(ErrorCode.INVALID_REQUEST, "resource named twice")
            refused = config_authorization_error(
                ctx, AclOperation.ALTER_CONFIGS, resource.resource_type, resource.resource_name
            )
            if refused:
                raise _Refused(
                    refused, f"not authorized to alter configs of {resource.resource_name!r}"
                )
            if resource.resource_type == ResourceType.CLIENT_METRICS:
                _alter_client_metrics(ctx, resource, request.validate_only)
                results.append(
                    Result(
                        error_code=ErrorCode.NONE,
                        error_message=None,
                        resource_type=resource.resource_type,
                        resource_name=resource.resource_name,
                    )
                )
                continue
            if resource.resource_type not in (
                ResourceType.TOPIC,
                ResourceType.GROUP,
                ResourceType.BROKER,
            ):
                raise _Refused(
                    ErrorCode.INVALID_REQUEST,
                    "only topic, group, broker and client-metrics configs can be altered",
                )
            changes = _changes(ctx, resource)
            task = alter_resource_configs(
                ctx,
                resource.resource_type,
                resource.resource_name,
                changes,
                incremental=True,
                validate_only=request.validate_only,
            )
            if task is not None:
                tasks[len(results)] = task
            if not request.validate_only and resource.resource_type == ResourceType.TOPIC:
                log.info("topic %r configs changed: %s", resource.resource_name, changes)
        except _Refused as exc:
            code, message = exc.code, str(exc)
        except BrokerError as exc:
            code, message = code_of(exc), message_of(exc)
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
            ctx, tasks, results, lambda out: m.IncrementalAlterConfigsResponse(responses=out)
        )
    return m.IncrementalAlterConfigsResponse(responses=results)


def error_response(
    request: m.IncrementalAlterConfigsRequest | None, version: int, code: ErrorCode
) -> m.IncrementalAlterConfigsResponse:
    if request is None:
        return m.IncrementalAlterConfigsResponse()
    return m.IncrementalAlterConfigsResponse(
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
