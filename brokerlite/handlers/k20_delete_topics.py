"""DeleteTopics (key 20), versions 0-6 (1-6 with ``protocol_version`` 4.0): delete topics by name, or by id (v6+).

A deleted topic's logs are removed, Fetch requests parked on it are answered
at once (with UNKNOWN_TOPIC_OR_PARTITION) and the group coordinator drops its
committed offsets. Unknown names get UNKNOWN_TOPIC_OR_PARTITION, unknown ids
UNKNOWN_TOPIC_ID, an entry with neither INVALID_REQUEST.

``controller_mutation_rate`` (KIP-599, :mod:`trafka.brokerlite.quotas`): each
topic deleted counts its partitions; from v5 a topic asked while the quota is
exceeded gets THROTTLING_QUOTA_EXCEEDED, before v5 it is deleted and the answer
only throttled.

Authorization: DELETE on the cluster allows every topic; otherwise a topic
needs DELETE on itself, else TOPIC_AUTHORIZATION_FAILED. A name without
DESCRIBE is refused before its existence is looked at; a known id without
DESCRIBE is refused without its name.

Cluster mode: the deletion is the controller's. The topic is marked in
``/admin/delete_topics``; the controller removes it from ZooKeeper, and every
broker deletes its logs when it sees it gone. The answer comes then, or at
``timeout_ms`` (REQUEST_TIMED_OUT; the deletion goes on); with ``timeout_ms`` 0
that at once, once marked (Kafka's ZkAdminManager and DelayedDeleteTopics).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Callable

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.quotas import MUTATION_THROTTLED, MutationQuota
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.brokerlite.storage.topics import TopicInfo
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k20_delete_topics as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import NULL_UUID, code_of, message_of, park_on_tasks, task_outcome

API_KEY = ApiKey.DELETE_TOPICS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 6
STRICT_QUOTA_FROM = 5  # THROTTLING_QUOTA_EXCEEDED (KIP-599)

log = logging.getLogger("trafka.brokerlite")

Result = m.DeleteTopicsResponse.DeletableTopicResult


def handle(ctx: RequestContext, request: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse | Parked:
    version = ctx.version
    may = _permission(ctx)
    quota = ctx.mutation_quota(STRICT_QUOTA_FROM)
    results: list[Result] = []
    tasks: list[ZkTask] = []
    for name, topic_id in _wanted(version, request):
        found = _find_deletable(ctx, may, name, topic_id)
        if isinstance(found, Result):
            results.append(found)
        elif not quota.admit(found.num_partitions):
            results.append(
                _result(version, found, ErrorCode.THROTTLING_QUOTA_EXCEEDED, MUTATION_THROTTLED)
            )
        elif ctx.cluster is not None:
            tasks.append(
                ZkTask("delete_topic", {"name": found.name, "timeout_ms": request.timeout_ms})
            )
            results.append(
                Result(name=found.name, topic_id=found.topic_id if version >= 6 else NULL_UUID)
            )
        else:
            results.append(_delete_here(ctx, found))
    if tasks:
        return park_on_tasks(
            ctx,
            tasks,
            request.timeout_ms,
            functools.partial(_answer, version, quota, results, tasks),
        )
    return m.DeleteTopicsResponse(throttle_time_ms=quota.throttle_ms(), responses=results)


def _wanted(version: int, request: m.DeleteTopicsRequest) -> list[tuple[str | None, uuid.UUID]]:
    """``(name, id)`` of each topic asked for: names before v6, either from v6."""
    if version >= 6:
        return [(t.name, t.topic_id) for t in request.topics]
    return [(name, NULL_UUID) for name in request.topic_names]


def _permission(ctx: RequestContext) -> Callable[[int, str], bool]:
    """Whether the principal may do an operation on a topic: DELETE on the
    cluster allows everything (asked once per request)."""
    everything = ctx.allowed(AclOperation.DELETE, AclResourceType.CLUSTER, CLUSTER_NAME)

    def may(operation: int, topic: str) -> bool:
        return everything or ctx.allowed(operation, AclResourceType.TOPIC, topic)

    return may


def _find_deletable(
    ctx: RequestContext, may: Callable[[int, str], bool], name: str | None, topic_id: uuid.UUID
) -> TopicInfo | Result:
    """The topic to delete, or the entry's refusal: a name is authorized before
    its existence is looked at, an id after (a known id without DESCRIBE is
    refused without its name)."""
    version = ctx.version
    by_id = name is None
    if by_id and topic_id == NULL_UUID:
        message = "neither a topic name nor a topic id" if version >= 5 else None
        return Result(
            name=None,
            topic_id=NULL_UUID,
            error_code=ErrorCode.INVALID_REQUEST,
            error_message=message,
        )
    if not by_id and not may(AclOperation.DESCRIBE, name or ""):
        return Result(
            name=name,
            topic_id=NULL_UUID,
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            error_message=None,
        )
    shown_id = topic_id if version >= 6 else NULL_UUID
    info = ctx.logs.topic_by_id(topic_id) if by_id else ctx.logs.topic(name or "")
    if info is None:
        code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        return Result(name=name, topic_id=shown_id, error_code=code, error_message=None)
    if not may(AclOperation.DELETE, info.name):
        shown = not by_id or may(AclOperation.DESCRIBE, info.name)
        return Result(
            name=info.name if shown else None,
            topic_id=shown_id,
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            error_message=None,
        )
    return info


def _result(version: int, info: TopicInfo, code: ErrorCode, message: str | None) -> Result:
    return Result(
        name=info.name,
        topic_id=info.topic_id if version >= 6 else NULL_UUID,
        error_code=code,
        error_message=message,
    )


def _delete_here(ctx: RequestContext, info: TopicInfo) -> Result:
    """Single node: remove the topic's logs now and tell who watches it."""
    try:
        ctx.logs.delete_topic(info.name)
    except BrokerError as exc:
        message = message_of(exc) if ctx.version >= 5 else None
        return _result(ctx.version, info, code_of(exc), message)
    log.info("deleted topic %r", info.name)
    ctx.broker.notify_topic_changed(info.name, deleted=True)
    return _result(ctx.version, info, ErrorCode.NONE, None)


def _answer(
    version: int, quota: MutationQuota, results: list[Result], tasks: list[ZkTask]
) -> m.DeleteTopicsResponse:
    """Cluster mode, once the controller has deleted the topics (or the timeout
    passed): each task's outcome in its topic's entry."""
    by_name = {t.args["name"]: t for t in tasks}
    out: list[Result] = []
    for result in results:
        task = by_name.get(result.name or "")
        if task is not None:
            code, message = task_outcome(task)
            result = dataclasses.replace(
                result,
                error_code=code,
                error_message=message if code and version >= 5 else None,
            )
        out.append(result)
    return m.DeleteTopicsResponse(throttle_time_ms=quota.throttle_ms(), responses=out)


def error_response(
    request: m.DeleteTopicsRequest | None, version: int, code: ErrorCode
) -> m.DeleteTopicsResponse:
    if request is None:
        return m.DeleteTopicsResponse()
    if version >= 6:
        results = [
            Result(name=t.name, topic_id=t.topic_id, error_code=code) for t in request.topics
        ]
    else:
        results = [Result(name=n, error_code=code) for n in request.topic_names]
    return m.DeleteTopicsResponse(responses=results)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="logs cluster authorizer quotas purgatory broker",
)
