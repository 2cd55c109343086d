"""DescribeTopicPartitions (key 75), version 0 (KIP-966), as a Kafka 4.0 broker answers.

* Which topics: an empty list means every topic, otherwise the named ones
  (each once). Either way only names at or after the cursor's topic, compared
  as Java compares strings (UTF-16 code units), are considered, and they are
  answered in that order. With a list, the cursor's topic must be in it, or the
  whole request is INVALID_REQUEST: every named topic gets that code and
  nothing else, as Kafka's error answer does.
* The cursor's partition index is where its topic starts; other topics start
  at 0. A start past the last partition gives the topic with no partitions.
* The partition budget is ``response_partition_limit`` capped at Kafka's
  ``max.request.partition.size.limit`` default (2000). Topics are described in
  order until the budget runs out: a topic cut short ends the answer with
  ``next_cursor`` at its first partition left out; a topic reached with the
  budget at exactly 0 ends it with ``next_cursor`` at that topic's partition 0
  (whether or not the topic exists). Unknown topics cost nothing. Kafka's
  arithmetic is kept for odd cursors: a negative start skips the missing
  indexes but still counts them towards the end of the page. A negative limit
  describes nothing and gives no cursor.
* A named topic that does not exist: UNKNOWN_TOPIC_OR_PARTITION, or
  INVALID_TOPIC_EXCEPTION for a name breaking Kafka's rules; zero topic id.
  With an empty list, only existing topics appear.
* Each partition says what Metadata says: on one node, this node leads it at
  leader epoch 0, replicas and ISR are ``[node_id]`` and offline replicas none;
  in cluster mode, its leader (LEADER_NOT_AVAILABLE without one), leader epoch,
  replicas, ISR and offline replicas as ZooKeeper last had them. The eligible
  (ELR) and last known ELR lists are empty (KIP-966's ELR is KRaft's; a
  ZooKeeper-era cluster has none). Internal topics say so, by name (as
  Kafka: also when answered with an error), on one node as in a cluster
  (:mod:`trafka.brokerlite.storage.internal_topics`). Topic ids
  are the registry's; authorized operations are what the principal may do on
  each topic described (everything, without an authorizer).
* Authorization: a topic needs DESCRIBE. Without it a topic is skipped as if
  absent (it costs no budget and is never the cursor); when it was named, it
  is answered after the others with TOPIC_AUTHORIZATION_FAILED and a zero
  topic id, once the walk has reached it, as Kafka's lazy filter does.
"""

from __future__ import annotations

from trafka.brokerlite.errors import InvalidTopicError
from trafka.brokerlite.storage.internal_topics import is_internal
from trafka.brokerlite.storage.topics import validate_topic_name
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k75_describe_topic_partitions as m

from ._base import HandlerSpec, RequestContext
from ._util import LEADER_EPOCH, NO_AUTHORIZED_OPERATIONS, NULL_UUID, cluster_partition

API_KEY = ApiKey.DESCRIBE_TOPIC_PARTITIONS
MIN_VERSION = 0
MAX_VERSION = 0

#: Kafka's ``max.request.partition.size.limit`` default: the most partitions
#: one answer describes, whatever the request's limit.
MAX_REQUEST_PARTITION_SIZE_LIMIT = 2000

Topic = m.DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
Partition = m.DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponsePartition
Cursor = m.DescribeTopicPartitionsResponse.Cursor


def _java_order(name: str) -> bytes:
    # Java's String.compareTo compares UTF-16 code units; big-endian UTF-16
    # bytes sort the same way (Python's str order is by code point, which
    # differs above the BMP).
    return name.encode("utf-16-be", "surrogatepass")


def _unknown_code(name: str) -> ErrorCode:
    try:
        validate_topic_name(name)
    except InvalidTopicError:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def handle(
    ctx: RequestContext, request: m.DescribeTopicPartitionsRequest
) -> m.DescribeTopicPartitionsResponse:
    logs = ctx.logs
    cursor = request.cursor
    cursor_topic = cursor.topic_name if cursor is not None else ""
    floor = _java_order(cursor_topic)
    fetch_all = not request.topics
    if fetch_all:
        names = {info.name for info in logs.topics() if _java_order(info.name) >= floor}
    else:
        names = {t.name for t in request.topics if _java_order(t.name) >= floor}
        if cursor is not None and cursor.topic_name not in names:
            return error_response(request, ctx.version, ErrorCode.INVALID_REQUEST)

    remaining = min(MAX_REQUEST_PARTITION_SIZE_LIMIT, request.response_partition_limit)
    topics: list[Topic] = []
    refused: list[Topic] = []
    next_cursor: Cursor | None = None
    for name in sorted(names, key=_java_order):
        if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.TOPIC, name):
            if not fetch_all:
                refused.append(
                    Topic(
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                        name=name,
                        topic_id=NULL_UUID,
                        is_internal=is_internal(name),
                        partitions=[],
                        topic_authorized_operations=NO_AUTHORIZED_OPERATIONS,
                    )
                )
            continue
        if remaining == 0:
            next_cursor = Cursor(topic_name=name, partition_index=0)
            break
        if remaining < 0:
            continue
        info = logs.topic(name)
        if info is None:  # named in the request (every topic listed exists)
            topics.append(
                Topic(
                    error_code=_unknown_code(name),
                    name=name,
                    topic_id=NULL_UUID,
                    is_internal=is_internal(name),
                    partitions=[],
                    topic_authorized_operations=ctx.authorized_operations(
                        AclResourceType.TOPIC, name
                    ),
                )
            )
            continue
        start = cursor.partition_index if cursor is not None and name == cursor_topic else 0
        count = info.num_partitions
        upper = min(count, start + remaining)
        partitions = [_partition(ctx, name, index) for index in range(max(start, 0), upper)]
        topics.append(
            Topic(
                error_code=ErrorCode.NONE,
                name=name,
                topic_id=info.topic_id,
                is_internal=is_internal(name),
                partitions=partitions,
                topic_authorized_operations=ctx.authorized_operations(AclResourceType.TOPIC, name),
            )
        )
        # Kafka's "no next partition" is -1, so an upper bound of exactly -1
        # (a start far below 0) ends the topic without a cursor, as there.
        next_partition = upper if upper < count else -1
        if next_partition != -1:
            next_cursor = Cursor(topic_name=name, partition_index=next_partition)
            break
        remaining -= len(partitions)
    return m.DescribeTopicPartitionsResponse(topics=topics + refused, next_cursor=next_cursor)


def _partition(ctx: RequestContext, topic: str, index: int) -> Partition:
    if ctx.cluster is None:
        node = ctx.node_id
        return Partition(
            error_code=ErrorCode.NONE,
            partition_index=index,
            leader_id=node,
            leader_epoch=LEADER_EPOCH,
            replica_nodes=[node],
            isr_nodes=[node],
            eligible_leader_replicas=[],
            last_known_elr=[],
            offline_replicas=[],
        )
    p = cluster_partition(ctx.cluster, topic, index)
    return Partition(
        error_code=p.error_code,
        partition_index=index,
        leader_id=p.leader_id,
        leader_epoch=p.leader_epoch,
        replica_nodes=p.replicas,
        isr_nodes=p.isr,
        eligible_leader_replicas=[],
        last_known_elr=[],
        offline_replicas=p.offline_replicas,
    )


def error_response(
    request: m.DescribeTopicPartitionsRequest | None, version: int, code: ErrorCode
) -> m.DescribeTopicPartitionsResponse:
    topics = []
    if request is not None:
        topics = [
            Topic(error_code=code, name=t.name, topic_id=NULL_UUID, is_internal=False)
            for t in request.topics
        ]
    return m.DescribeTopicPartitionsResponse(topics=topics, next_cursor=None)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="logs cluster authorizer"
)
