"""CreateTopics (key 19), versions 0-7 (2-7 with ``protocol_version`` 4.0): create topics, or check that they could be.

* ``num_partitions`` -1 (v4+) means the broker's ``num_partitions``;
  ``replication_factor`` must be 1 or -1 (there is one broker), anything else
  is INVALID_REPLICATION_FACTOR. Manual ``assignments`` must put every
  partition on this node, numbered from 0, and come with both counts at -1.
* Cluster mode: the topic is written to ZooKeeper by the cluster driver
  (:mod:`..cluster`), placed as Kafka places replicas (``replication_factor``
  -1: ``default.replication.factor``; more than the live brokers:
  INVALID_REPLICATION_FACTOR), or as the explicit ``assignments`` say (live
  brokers, none twice, one factor: else INVALID_REPLICA_ASSIGNMENT). The answer
  comes once every partition has a leader, or at ``timeout_ms`` with
  REQUEST_TIMED_OUT (the creation goes on); with ``timeout_ms`` 0 that at
  once, once written (Kafka's ZkAdminManager and DelayedCreatePartitions).
* Configs are topic configs by Kafka name; a null value is INVALID_CONFIG.
* An internal topic's name (``__consumer_offsets``...) not yet made is created
  as Kafka 4.4 creates it, as asked, like any topic; on one node it is listed
  without logs, as the coordinators make it
  (:mod:`trafka.brokerlite.storage.internal_topics`).
* ``validate_only`` runs every check and changes nothing; the answer (v5+) is
  the topic that would have been made: its partition count, replication factor
  (placed as it would have been) and effective configs, as Kafka answers (KIP-525).
* A topic named twice in one request gets INVALID_REQUEST for every copy.
* From v5 the result carries the partition count, replication factor and the
  topic's effective configs; from v7 the topic id.
* ``controller_mutation_rate`` (KIP-599, :mod:`trafka.brokerlite.quotas`): each
  topic created counts its partitions; from v6 a topic asked while the quota is
  exceeded gets THROTTLING_QUOTA_EXCEEDED, before v6 it is created and the
  answer only throttled. ``validate_only`` counts nothing.
* Authorization: CREATE on the cluster allows every topic, else each topic
  needs CREATE on itself (TOPIC_AUTHORIZATION_FAILED, before existence is
  looked at). A topic created without DESCRIBE_CONFIGS on it is answered
  without its partition count, replication factor and configs, and with
  ``topic_config_error_code`` TOPIC_AUTHORIZATION_FAILED (v5+); so is a topic
  refused before its creation was tried (not allowed, or named twice), as Kafka
  answers it; other refusals have ``topic_config_error_code`` NONE.
"""

from __future__ import annotations

import logging
from collections import Counter
from typing import TYPE_CHECKING

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.quotas import MUTATION_THROTTLED
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.brokerlite.storage.internal_topics import is_internal
from trafka.brokerlite.storage.topics import topic_exists
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k19_create_topics as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext

if TYPE_CHECKING:
    from trafka.brokerlite.storage.topics import TopicInfo
from trafka.codec import ApiKey

from ._util import NULL_UUID, code_of, denied, park_on_tasks, task_outcome

API_KEY = ApiKey.CREATE_TOPICS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 2
MAX_VERSION = 7
STRICT_QUOTA_FROM = 6  # THROTTLING_QUOTA_EXCEEDED (KIP-599)

log = logging.getLogger("trafka.brokerlite")

Result = m.CreateTopicsResponse.CreatableTopicResult
ResultConfig = m.CreateTopicsResponse.CreatableTopicConfigs


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _partition_count(ctx: RequestContext, topic: m.CreateTopicsRequest.CreatableTopic) -> int:
    node = ctx.node_id
    if topic.assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            raise _Refused(
                ErrorCode.INVALID_REQUEST,
                "both num_partitions or replication_factor and assignments were given",
            )
        indexes = sorted(a.partition_index for a in topic.assignments)
        if indexes != list(range(len(indexes))):
            raise _Refused(
                ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                "partitions must be numbered consecutively from 0",
            )
        for a in topic.assignments:
            if ctx.cluster is not None:
                continue  # checked by the cluster driver against the live brokers
            if a.broker_ids != [node]:
                raise _Refused(
                    ErrorCode.INVALID_REPLICA_ASSIGNMENT,
                    f"partition {a.partition_index}: the only broker is {node}",
                )
        return len(indexes)
    count = topic.num_partitions
    if count == -1:
        count = ctx.config.num_partitions
    if count <= 0:
        raise _Refused(
            ErrorCode.INVALID_PARTITIONS,
            "the number of partitions must be at least 1, or -1 for the default",
        )
    if ctx.cluster is not None:
        return count  # the cluster driver checks the factor against the live brokers
    if topic.replication_factor not in (-1, 1):
        raise _Refused(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"replication factor {topic.replication_factor}: there is 1 broker",
        )
    return count


def handle(ctx: RequestContext, request: m.CreateTopicsRequest) -> m.CreateTopicsResponse | Parked:
    version = ctx.version
    counts = Counter(t.name for t in request.topics)
    uncreatable: set[str] = set()
    if not ctx.allowed(AclOperation.CREATE, AclResourceType.CLUSTER, CLUSTER_NAME):
        uncreatable = denied(ctx, AclOperation.CREATE, AclResourceType.TOPIC, counts)
    indescribable = denied(ctx, AclOperation.DESCRIBE_CONFIGS, AclResourceType.TOPIC, counts)
    quota = ctx.mutation_quota(STRICT_QUOTA_FROM)
    results: list[Result] = []
    cluster = ctx.cluster
    tasks: list[ZkTask] = []
    validated: dict[str, TopicInfo] = {}
    for topic in request.topics:
        try:
            if counts[topic.name] > 1:
                raise _Refused(ErrorCode.INVALID_REQUEST, f"topic {topic.name!r} is named twice")
            if topic.name in uncreatable:
                raise _Refused(ErrorCode.TOPIC_AUTHORIZATION_FAILED, "Authorization failed.")
            if ctx.logs.topic(topic.name) is not None:
                raise _Refused(ErrorCode.TOPIC_ALREADY_EXISTS, topic_exists(topic.name))
            partitions = _partition_count(ctx, topic)
            configs: dict[str, str | None] = {}
            for c in topic.configs:
                if c.value is None:
                    raise _Refused(ErrorCode.INVALID_CONFIG, f"{c.name}: a null value")
                configs[c.name] = c.value
            if not request.validate_only and not quota.admit(partitions):
                raise _Refused(ErrorCode.THROTTLING_QUOTA_EXCEEDED, MUTATION_THROTTLED)
            if cluster is not None:
                # Names, partitions and configs are checked here, the rest by the driver.
                validated[topic.name] = ctx.logs.create_topic(
                    topic.name, partitions, configs, validate_only=True, now_ms=ctx.now_ms
                )
                tasks.append(
                    ZkTask(
                        "create_topic",
                        {
                            "name": topic.name,
                            "num_partitions": partitions,
                            "replication_factor": topic.replication_factor,
                            "assignments": {
                                a.partition_index: list(a.broker_ids) for a in topic.assignments
                            }
                            or None,
                            "configs": configs,
                            "validate_only": request.validate_only,
                            "timeout_ms": request.timeout_ms,
                        },
                    )
                )
                results.append(Result(name=topic.name))  # filled in when the task is done
                continue
            # An internal topic's name (Kafka creates it as any topic): on one
            # node listed without logs, its data being the coordinators'.
            info = ctx.logs.create_topic(
                topic.name,
                partitions,
                configs,
                validate_only=request.validate_only,
                now_ms=ctx.now_ms,
                hosted=() if is_internal(topic.name) else None,
            )
        except (_Refused, BrokerError) as exc:
            code = exc.code if isinstance(exc, _Refused) else code_of(exc)
            # Kafka keeps the DESCRIBE_CONFIGS verdict for a topic it refused before
            # trying to create it (named twice, or not allowed), and clears it otherwise.
            early = counts[topic.name] > 1 or topic.name in uncreatable
            hidden = version >= 5 and early and topic.name in indescribable
            results.append(_refused(topic.name, version, code, str(exc) or None, hidden))
            continue
        if not request.validate_only:
            log.info("created topic %r with %d partition(s)", info.name, info.num_partitions)
        results.append(_created(ctx, request, info, indescribable, 1))
    if tasks:
        throttle_ms = quota.throttle_ms()
        return park_on_tasks(
            ctx,
            tasks,
            request.timeout_ms,
            lambda: m.CreateTopicsResponse(
                throttle_time_ms=throttle_ms,
                topics=_cluster_results(ctx, request, results, tasks, validated, indescribable),
            ),
        )
    return m.CreateTopicsResponse(throttle_time_ms=quota.throttle_ms(), topics=results)


def _refused(
    name: str, version: int, code: int, message: str | None, hidden: bool = False
) -> Result:
    """A topic not created; ``hidden``: its configs' TOPIC_AUTHORIZATION_FAILED."""
    return Result(
        name=name,
        error_code=code,
        error_message=message,
        topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED if hidden else 0,
        num_partitions=-1,
        replication_factor=-1,
        configs=[],
    )


def _cluster_results(
    ctx: RequestContext,
    request: m.CreateTopicsRequest,
    results: list[Result],
    tasks: list[ZkTask],
    validated: dict[str, TopicInfo],
    indescribable: set[str],
) -> list[Result]:
    """The results once the driver carried the topics' ZooKeeper writes out."""
    assert ctx.cluster is not None
    by_name = {t.args["name"]: t for t in tasks}
    out: list[Result] = []
    for result in results:
        task = by_name.get(result.name)
        if task is None:
            out.append(result)
            continue
        code, message = task_outcome(task)
        if code:
            out.append(_refused(result.name, ctx.version, code, message))
            continue
        if request.validate_only:
            # Answered as Kafka answers (KIP-525): the topic that would have been
            # made, placed as the driver would have placed it.
            planned = task.args["planned"]
            out.append(
                _created(ctx, request, validated[result.name], indescribable, len(planned[0]))
            )
            continue
        info = ctx.logs.topic(result.name)
        assignment = ctx.cluster.image.topics.get(result.name)
        if info is None:
            out.append(Result(name=result.name, num_partitions=-1, replication_factor=-1))
            continue
        factor = len(assignment.replicas[0]) if assignment is not None else -1
        out.append(_created(ctx, request, info, indescribable, factor))
    return out


def _created(
    ctx: RequestContext,
    request: m.CreateTopicsRequest,
    info: TopicInfo,
    indescribable: set[str],
    replication_factor: int,
) -> Result:
    """The result of a topic created (or validated)."""
    version = ctx.version
    topic_id = info.topic_id if version >= 7 and not request.validate_only else NULL_UUID
    if version >= 5 and info.name in indescribable:
        return Result(
            name=info.name,
            topic_id=topic_id,
            error_code=ErrorCode.NONE,
            error_message=None,
            topic_config_error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            num_partitions=-1,
            replication_factor=-1,
            configs=[],
        )
    described: list[ResultConfig] = []
    if version >= 5:
        # A validated-only topic is described as it would have been created (Kafka's answer).
        entries = (
            ctx.logs.describe_new_configs(info.configs)
            if request.validate_only
            else ctx.logs.describe_configs(info.name)
        )
        described = [
            ResultConfig(
                name=e.name,
                value=e.value,
                read_only=e.read_only,
                config_source=int(e.source),
                is_sensitive=e.sensitive,
            )
            for e in entries
        ]
    return Result(
        name=info.name,
        topic_id=topic_id,
        error_code=ErrorCode.NONE,
        error_message=None,
        num_partitions=info.num_partitions if version >= 5 else -1,
        replication_factor=replication_factor if version >= 5 else -1,
        configs=described,
    )


def error_response(
    request: m.CreateTopicsRequest | None, version: int, code: ErrorCode
) -> m.CreateTopicsResponse:
    if request is None:
        return m.CreateTopicsResponse()
    return m.CreateTopicsResponse(
        topics=[Result(name=t.name, error_code=code, error_message=None) for t in request.topics]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="config logs cluster authorizer quotas purgatory",
)
