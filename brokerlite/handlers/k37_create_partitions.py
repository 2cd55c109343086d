"""CreatePartitions (key 37), versions 0-3: grow topics.

``count`` is the new total and must exceed the current one
(INVALID_PARTITIONS). Manual assignments must place each new partition on
this node only (INVALID_REPLICA_ASSIGNMENT) and name exactly the new
partitions (an empty list, unlike null, names none: refused, as Kafka). ``validate_only`` checks and changes nothing. A topic named twice
gets INVALID_REQUEST. Existing data stays where it is: keys hashed to the old
count may now land elsewhere, as in Kafka.

``controller_mutation_rate`` (KIP-599, :mod:`trafka.brokerlite.quotas`): the
partitions added count; from v3 a topic asked while the quota is exceeded gets
THROTTLING_QUOTA_EXCEEDED, before v3 it grows and the answer is only throttled.
``validate_only`` counts nothing.

Cluster mode: the new partitions are placed as Kafka places them (the topic's
replication factor; explicit assignments name live brokers) and written to
ZooKeeper; the answer comes once ZooKeeper has them and their leaders are
elected, or at ``timeout_ms`` with REQUEST_TIMED_OUT (the change goes on); with
``timeout_ms`` 0 that at once, once written (as Kafka's ZkAdminManager).

Authorization: each topic needs ALTER, else TOPIC_AUTHORIZATION_FAILED (after
the duplicate check, before existence is looked at).
"""

from __future__ import annotations

import logging
from collections import Counter

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.quotas import MUTATION_THROTTLED
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k37_create_partitions as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import code_of, denied, message_of, park_on_tasks, task_outcome

API_KEY = ApiKey.CREATE_PARTITIONS
MIN_VERSION = 0
MAX_VERSION = 3
STRICT_QUOTA_FROM = 3  # THROTTLING_QUOTA_EXCEEDED (KIP-599)

log = logging.getLogger("trafka.brokerlite")

Result = m.CreatePartitionsResponse.CreatePartitionsTopicResult


def handle(
    ctx: RequestContext, request: m.CreatePartitionsRequest
) -> m.CreatePartitionsResponse | Parked:
    counts = Counter(t.name for t in request.topics)
    unalterable = denied(ctx, AclOperation.ALTER, AclResourceType.TOPIC, counts)
    quota = ctx.mutation_quota(STRICT_QUOTA_FROM)
    results: list[Result] = []
    tasks: list[ZkTask] = []
    for topic in request.topics:
        code, message = ErrorCode.NONE, None
        if counts[topic.name] > 1:
            code, message = ErrorCode.INVALID_REQUEST, f"topic {topic.name!r} is named twice"
        elif topic.name in unalterable:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            message = "The topic authorization is failed."
        else:
            current = _partitions(ctx, topic.name)
            if current is None and ctx.cluster is None:
                code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                message = f"unknown topic {topic.name!r}"
            elif (
                current is not None
                and topic.assignments is not None  # (an empty list assigns none: refused)
                and topic.count > current
                and (
                    len(topic.assignments) != topic.count - current
                    or (
                        ctx.cluster is None
                        and any(a.broker_ids != [ctx.node_id] for a in topic.assignments)
                    )
                )
            ):
                code = ErrorCode.INVALID_REPLICA_ASSIGNMENT
                message = _assignments_wanted(topic.count - current, ctx)
            elif (
                current is not None
                and not request.validate_only
                and topic.count > current
                and not quota.admit(topic.count - current)
            ):
                code, message = ErrorCode.THROTTLING_QUOTA_EXCEEDED, MUTATION_THROTTLED
            elif ctx.cluster is not None and (current is None or topic.count > current):
                # ZooKeeper decides (the task checks existence, count and
                # assignments again there): this node's view may lag it.
                tasks.append(
                    ZkTask(
                        "create_partitions",
                        {
                            "name": topic.name,
                            "total": topic.count,
                            "assignments": None
                            if topic.assignments is None
                            else [list(a.broker_ids) for a in topic.assignments],
                            "validate_only": request.validate_only,
                            "timeout_ms": request.timeout_ms,
                        },
                    )
                )
            else:
                try:
                    ctx.logs.create_partitions(
                        topic.name,
                        topic.count,
                        validate_only=request.validate_only,
                        now_ms=ctx.now_ms,
                    )
                except BrokerError as exc:
                    code, message = code_of(exc), message_of(exc)
                else:
                    if not request.validate_only:
                        log.info("topic %r now has %d partitions", topic.name, topic.count)
                        ctx.broker.notify_topic_changed(topic.name, deleted=False)
        results.append(Result(name=topic.name, error_code=code, error_message=message))
    if tasks:
        by_name = {t.args["name"]: t for t in tasks}

        def answer() -> m.CreatePartitionsResponse:
            out = []
            for result in results:
                task = by_name.get(result.name)
                if task is not None:
                    code, message = task_outcome(task)
                    result = Result(name=result.name, error_code=code, error_message=message)
                out.append(result)
            return m.CreatePartitionsResponse(throttle_time_ms=quota.throttle_ms(), results=out)

        return park_on_tasks(ctx, tasks, request.timeout_ms, answer)
    return m.CreatePartitionsResponse(throttle_time_ms=quota.throttle_ms(), results=results)


def _partitions(ctx: RequestContext, name: str) -> int | None:
    """The topic's partition count as this node knows it: its logs, else (a
    cluster node whose logs have not caught up) its reading of ZooKeeper."""
    info = ctx.logs.topic(name)
    if info is not None:
        return info.num_partitions
    if ctx.cluster is not None:
        known = ctx.cluster.image.topics.get(name)
        if known is not None:
            return known.num_partitions
    return None


def _assignments_wanted(added: int, ctx: RequestContext) -> str:
    where = "" if ctx.cluster is not None else f", each on broker {ctx.node_id} only"
    return f"assignments must name the {added} new partition(s){where}"


def error_response(
    request: m.CreatePartitionsRequest | None, version: int, code: ErrorCode
) -> m.CreatePartitionsResponse:
    if request is None:
        return m.CreatePartitionsResponse()
    return m.CreatePartitionsResponse(
        results=[Result(name=t.name, error_code=code) for t in request.topics]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="logs cluster authorizer quotas purgatory broker",
)
