"""DescribeLogDirs (key 35), versions 0-5 (1-5 with ``protocol_version`` 4.0).

brokerlite keeps every partition in one log directory, its ``data_dir``: the
answer has that one directory, with each partition's size on disk (all its
segments) and an offset lag of 0 (there is no future replica). Asked for
topics (null: every partition), it reports the partitions that exist and omits
the others, as Kafka omits partitions no log directory holds. From v4 it gives
the file system's total and usable bytes (``statvfs``); -1 when they cannot be
read. v5 (KIP-1066, Kafka 4.3) tells whether the directory is cordoned (no
new partition placed on it): never, as brokerlite has one directory and no
``cordoned.log.dirs`` setting.

Authorization: DESCRIBE on the cluster, else the answer is
CLUSTER_AUTHORIZATION_FAILED (v3+; before that an empty answer) with no
directories.
"""

from __future__ import annotations

import os

from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k35_describe_log_dirs as m

from ._base import HandlerSpec, RequestContext
from ._util import log_dir_path

API_KEY = ApiKey.DESCRIBE_LOG_DIRS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 5

Result = m.DescribeLogDirsResponse.DescribeLogDirsResult
Topic = m.DescribeLogDirsResponse.DescribeLogDirsTopic
Partition = m.DescribeLogDirsResponse.DescribeLogDirsPartition


def handle(ctx: RequestContext, request: m.DescribeLogDirsRequest) -> m.DescribeLogDirsResponse:
    if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    logs = ctx.logs
    wanted: dict[str, set[int]] | None = None
    if request.topics is not None:
        wanted = {}
        for t in request.topics:
            wanted.setdefault(t.topic, set()).update(t.partitions)
    topics = []
    for info in logs.topics():
        if wanted is not None and info.name not in wanted:
            continue
        parts = [
            Partition(
                partition_index=index,
                partition_size=log.size,
                offset_lag=0,
                is_future_key=False,
            )
            for index, log in logs.hosted(info.name)
            if wanted is None or index in wanted[info.name]
        ]
        if parts:
            topics.append(Topic(name=info.name, partitions=parts))
    total = usable = -1
    try:
        fs = os.statvfs(logs.data_dir)
        total, usable = fs.f_blocks * fs.f_frsize, fs.f_bavail * fs.f_frsize
    except OSError:
        pass
    return m.DescribeLogDirsResponse(
        error_code=ErrorCode.NONE,
        results=[
            Result(
                error_code=ErrorCode.NONE,
                log_dir=log_dir_path(ctx),
                topics=topics,
                total_bytes=total,
                usable_bytes=usable,
            )
        ],
    )


def error_response(
    request: m.DescribeLogDirsRequest | None, version: int, code: ErrorCode
) -> m.DescribeLogDirsResponse:
    return m.DescribeLogDirsResponse(error_code=code, results=[])


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="logs authorizer",
)
