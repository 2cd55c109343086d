"""AlterReplicaLogDirs (key 34), versions 0-2 (1-2 with ``protocol_version`` 4.0).

brokerlite keeps every partition in one log directory, its ``data_dir``,
named as DescribeLogDirs names it (the absolute path, symbolic links
resolved). Moving a partition there is a success with nothing to do: it is
already there. Each partition is checked in the order of Kafka's
``ReplicaManager.alterReplicaLogDirs``:

1. INVALID_TOPIC_EXCEPTION when the name Kafka would give the partition's
   future directory (``<topic>-<partition>.<32 hex digits>-future``) would be
   longer than 255 characters;
2. LOG_DIR_NOT_FOUND for any path other than that exact string (Kafka
   compares it with its configured directories as given, without normalising);
3. UNKNOWN_TOPIC_OR_PARTITION when the partition does not exist;
4. otherwise NONE, except for a partition that went offline (a write that
   could not be undone, see :mod:`trafka.brokerlite.storage.partition`): "moving" it to its
   own directory is how an operator brings it back without a restart
   (``trafka log-dirs reopen``). The broker checks that the directory takes a
   write again and opens the log afresh, recovery validating it as at a
   restart (:meth:`~trafka.brokerlite.broker.Broker.reopen_partition`): NONE
   when it is back online, KAFKA_STORAGE_ERROR (what Kafka answers for a replica
   on an offline log directory) when it stays offline.

A partition named under several paths is answered once, for the last path
(Kafka collects the request into a map). Results are grouped by topic.

Authorization: ALTER on the cluster, else every partition gets
CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import logging

from trafka.brokerlite.errors import LogStorageError
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k34_alter_replica_log_dirs as m

from ._base import HandlerSpec, RequestContext
from ._util import log_dir_path

log = logging.getLogger("trafka.brokerlite")

API_KEY = ApiKey.ALTER_REPLICA_LOG_DIRS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 2

TopicResult = m.AlterReplicaLogDirsResponse.AlterReplicaLogDirTopicResult
PartitionResult = m.AlterReplicaLogDirsResponse.AlterReplicaLogDirPartitionResult

# "-" + partition + "." + 32 hex digits + "-future", around the topic name.
_FUTURE_DIR_EXTRA = 1 + 1 + 32 + len("-future")
_MAX_DIR_NAME = 255


def _java_length(text: str) -> int:
    # Java's String.length counts UTF-16 code units.
    return len(text.encode("utf-16-le", "surrogatepass")) // 2


def _code(ctx: RequestContext, topic: str, partition: int, path: str, here: str) -> ErrorCode:
    if _java_length(topic) + len(str(partition)) + _FUTURE_DIR_EXTRA > _MAX_DIR_NAME:
        return ErrorCode.INVALID_TOPIC_EXCEPTION
    if path != here:
        return ErrorCode.LOG_DIR_NOT_FOUND
    info = ctx.logs.topic(topic)
    if info is None or not 0 <= partition < info.num_partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    try:
        if ctx.broker.reopen_partition(topic, partition, ctx.now_ms):
            log.warning("%s-%d reopened, as %r asked", topic, partition, ctx.principal)
    except LogStorageError as exc:
        log.error("%s-%d stays offline: %s", topic, partition, exc)
        return ErrorCode.KAFKA_STORAGE_ERROR
    return ErrorCode.NONE


def handle(
    ctx: RequestContext, request: m.AlterReplicaLogDirsRequest
) -> m.AlterReplicaLogDirsResponse:
    if not ctx.allowed(AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    wanted: dict[tuple[str, int], str] = {}
    for d in request.dirs:
        for t in d.topics:
            for p in t.partitions:
                wanted[(t.name, p)] = d.path
    here = log_dir_path(ctx)
    by_topic: dict[str, list[PartitionResult]] = {}
    for (topic, partition), path in wanted.items():
        by_topic.setdefault(topic, []).append(
            PartitionResult(
                partition_index=partition, error_code=_code(ctx, topic, partition, path, here)
            )
        )
    return m.AlterReplicaLogDirsResponse(
        results=[TopicResult(topic_name=name, partitions=parts) for name, parts in by_topic.items()]
    )


def error_response(
    request: m.AlterReplicaLogDirsRequest | None, version: int, code: ErrorCode
) -> m.AlterReplicaLogDirsResponse:
    results = []
    if request is not None:
        results = [
            TopicResult(
                topic_name=t.name,
                partitions=[
                    PartitionResult(partition_index=p, error_code=code) for p in t.partitions
                ],
            )
            for d in request.dirs
            for t in d.topics
        ]
    return m.AlterReplicaLogDirsResponse(results=results)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="logs authorizer broker",
)
