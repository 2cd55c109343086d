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
``timeout_ms`` (REQUEST_TIMED_OUT).
"""

from __future__ import annotations

import dataclasses
import logging
import uuid

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.quotas import MUTATION_THROTTLED
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k20_delete_topics as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import NULL_UUID, code_of, message_of, park_on_tasks, task_outcome

API_KEY = 20
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 6
STRICT_QUOTA_FROM = 5  # THROTTLING_QUOTA_EXCEEDED (KIP-599)

log = logging.getLogger("trafka.brokerlite")

Result = m.DeleteTopicsResponse.DeletableTopicResult


def handle(ctx: RequestContext, request: m.DeleteTopicsRequest) -> m.DeleteTopicsResponse | Parked:
    broker = ctx.broker
    version = ctx.version
    wanted: list[tuple[str | None, uuid.UUID]] = []
    if version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, NULL_UUID) for name in request.topic_names]
    everything = ctx.allowed(AclOperation.DELETE, AclResourceType.CLUSTER, CLUSTER_NAME)

    def may(operation: int, topic: str) -> bool:
        return everything or ctx.allowed(operation, AclResourceType.TOPIC, topic)

    quota = ctx.mutation_quota(STRICT_QUOTA_FROM)
    results: list[Result] = []
    tasks: list[ZkTask] = []
    for name, topic_id in wanted:
        by_id = name is None
        if by_id and topic_id == NULL_UUID:
            results.append(
                Result(
                    name=None,
                    topic_id=NULL_UUID,
                    error_code=ErrorCode.INVALID_REQUEST,
                    error_message="neither a topic name nor a topic id" if version >= 5 else None,
                )
            )
            continue
        if not by_id and not may(AclOperation.DESCRIBE, name or ""):
            results.append(
                Result(
                    name=name,
                    topic_id=NULL_UUID,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message=None,
                )
            )
            continue
        info = ctx.logs.topic_by_id(topic_id) if by_id else ctx.logs.topic(name or "")
        if info is not None and not may(AclOperation.DELETE, info.name):
            shown = not by_id or may(AclOperation.DESCRIBE, info.name)
            results.append(
                Result(
                    name=info.name if shown else None,
                    topic_id=topic_id if version >= 6 else NULL_UUID,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    error_message=None,
                )
            )
            continue
        if info is None:
            code = ErrorCode.UNKNOWN_TOPIC_ID if by_id else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
            results.append(
                Result(
                    name=name,
                    topic_id=topic_id if version >= 6 else NULL_UUID,
                    error_code=code,
                    error_message=None,
                )
            )
            continue
        if not quota.admit(info.num_partitions):
            results.append(
                Result(
                    name=info.name,
                    topic_id=info.topic_id if version >= 6 else NULL_UUID,
                    error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                    error_message=MUTATION_THROTTLED,
                )
            )
            continue
        if ctx.cluster is not None:
            tasks.append(
                ZkTask("delete_topic", {"name": info.name, "timeout_ms": request.timeout_ms})
            )
            results.append(
                Result(name=info.name, topic_id=info.topic_id if version >= 6 else NULL_UUID)
            )
            continue
        try:
            ctx.logs.delete_topic(info.name)
        except BrokerError as exc:
            results.append(
                Result(
                    name=info.name,
                    topic_id=info.topic_id if version >= 6 else NULL_UUID,
                    error_code=code_of(exc),
                    error_message=message_of(exc) if version >= 5 else None,
                )
            )
            continue
        log.info("deleted topic %r", info.name)
        broker.notify_topic_changed(info.name, deleted=True)
        results.append(
            Result(
                name=info.name,
                topic_id=info.topic_id if version >= 6 else NULL_UUID,
                error_code=ErrorCode.NONE,
                error_message=None,
            )
        )
    if tasks:
        by_name = {t.args["name"]: t for t in tasks}

        def answer() -> m.DeleteTopicsResponse:
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

        return park_on_tasks(ctx, tasks, request.timeout_ms, answer)
    return m.DeleteTopicsResponse(throttle_time_ms=quota.throttle_ms(), responses=results)


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
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, old_min=OLD_MIN_VERSION
)
