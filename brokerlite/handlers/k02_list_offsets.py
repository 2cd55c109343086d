"""ListOffsets (key 2), versions 0-11 (1-11 with ``protocol_version`` 4.0):
offsets by time or position.

Per partition, by the requested ``timestamp``:

* ``-2`` earliest: the log start offset. ``-4`` earliest-local (v8+): the same,
  as there is no tiered storage.
* ``-1`` latest: the high watermark; with ``isolation_level`` 1
  (read_committed, v2+) the last stable offset instead, so a read_committed
  consumer's end of the partition stops before open transactions.
* ``-3`` max timestamp (v7+): the first record carrying the largest timestamp.
* ``-5`` latest-tiered (v9+): offset -1, as a broker without tiered storage
  answers.
* ``-6`` earliest pending upload (v11+, KIP-1023): the first offset not yet
  copied to tiered storage; offset -1, as a broker without tiered storage
  answers.
* One of these special targets in a request older than the version that
  brought it in is UNSUPPORTED_VERSION for its partition (from v1; Kafka 4.4
  answers so).
* ``t >= 0``: the first record whose timestamp is at least ``t`` (the time
  index finds the batch, the batch's records give the record); offset and
  timestamp -1 when there is none.

``current_leader_epoch`` (v4+) is checked against the leader's epoch (0 on the
single-node broker), which is also the ``leader_epoch`` returned. In cluster
mode only the partition's leader answers (else NOT_LEADER_OR_FOLLOWER).

A single node's internal topics have no log here
(:mod:`trafka.brokerlite.storage.internal_topics`): their partitions answer as
empty logs (earliest and latest 0, nothing found by time).

A client's offsets (``replica_id`` -1) stop where it may fetch, as Kafka's
``Partition.fetchOffsetForTimestamp`` and ``ReplicaManager.fetchOffset`` have
them: a found offset at or past the last fetchable offset (the high watermark;
the last stable offset under read_committed) is answered as none (offset and
timestamp -1), and a leader elected since its high watermark was last moved
(the high watermark still below the log end it had when it began leading, its
epoch's start) answers the latest offset, and a lookup by time that finds
nothing before that point, OFFSET_NOT_AVAILABLE (v5+; LEADER_NOT_AVAILABLE
before), a retriable error, rather than an end that may go back (KIP-207). A
request from another replica id is answered to the log end, without either.

Version 0 (Kafka 3.9's, removed by KIP-896) answers a list,
``old_style_offsets``, of at most ``max_num_offsets`` offsets: the same single
offset v1 would find, or none when there is none. Kafka's v0 listed segment
base offsets by the segments' file times for ``t >= 0``, an answer only as
fine as a segment; its answers for -1 and -2 (what old clients ask) are these.

Authorization: each topic needs DESCRIBE, else its partitions get
TOPIC_AUTHORIZATION_FAILED without the topic's existence being looked at.
"""

from __future__ import annotations

from trafka.brokerlite.cluster.replica_manager import check_epoch
from trafka.brokerlite.errors import BrokerError
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k02_list_offsets as m

from ._base import HandlerSpec, RequestContext
from ._util import LEADER_EPOCH, code_of, denied, kept_elsewhere, leader_log

API_KEY = ApiKey.LIST_OFFSETS
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0
MIN_VERSION = 1
MAX_VERSION = 11

LATEST = -1
EARLIEST = -2
MAX_TIMESTAMP = -3
EARLIEST_LOCAL = -4
LATEST_TIERED = -5
EARLIEST_PENDING_UPLOAD = -6
#: the special targets and the version each came in with
TARGET_SINCE = {MAX_TIMESTAMP: 7, EARLIEST_LOCAL: 8, LATEST_TIERED: 9, EARLIEST_PENDING_UPLOAD: 11}

READ_COMMITTED = 1
CONSUMER = -1  # the replica id of a client's request

Topic = m.ListOffsetsResponse.ListOffsetsTopicResponse
Partition = m.ListOffsetsResponse.ListOffsetsPartitionResponse


class _OffsetNotAvailable(BrokerError):
    code = ErrorCode.OFFSET_NOT_AVAILABLE


class _LeaderNotAvailable(BrokerError):
    code = ErrorCode.LEADER_NOT_AVAILABLE


def _lookup(
    ctx: RequestContext,
    topic: str,
    partition: int,
    target: int,
    read_committed: bool,
    current_leader_epoch: int,
    client: bool,
) -> tuple[int, int]:
    version = ctx.version
    if kept_elsewhere(ctx, topic, partition):
        check_epoch(current_leader_epoch, LEADER_EPOCH)
        # An empty log: it starts and ends at 0, and no timestamp finds a record.
        if target in (EARLIEST, LATEST) or (target == EARLIEST_LOCAL and version >= 8):
            return 0, -1
        return -1, -1
    log = leader_log(ctx, topic, partition, current_leader_epoch)
    if target == EARLIEST or (target == EARLIEST_LOCAL and version >= 8):
        return log.log_start_offset, -1
    if not client:
        fetchable = log.log_end_offset
    elif read_committed:
        fetchable = ctx.producers.last_stable_offset(topic, partition)
    else:
        fetchable = log.high_watermark
    lagging = client and log.high_watermark < _epoch_start(ctx, topic, partition)
    if target == LATEST:
        if lagging:
            _not_available(version, topic, partition)
        return fetchable, -1
    if target == MAX_TIMESTAMP and version >= 7:
        found = log.offset_of_max_timestamp()
    elif target < 0:
        found = None
    else:
        found = log.offset_for_timestamp(target)
    if found is None or found[0] >= fetchable:
        if lagging:
            _not_available(version, topic, partition)
        return -1, -1
    return found


def _epoch_start(ctx: RequestContext, topic: str, partition: int) -> int:
    """Where this leader's epoch began (its log end when it became leader); 0 on
    the single node, whose high watermark is never behind."""
    cluster = ctx.cluster
    replica = None if cluster is None else cluster.replicas.replica(topic, partition)
    return 0 if replica is None else replica.epoch_start_offset


def _not_available(version: int, topic: str, partition: int) -> None:
    why = (
        f"{topic}-{partition}: the high watermark is behind the start of this "
        "leader's epoch (a recent election)"
    )
    raise _OffsetNotAvailable(why) if version >= 5 else _LeaderNotAvailable(why)


def _epoch(ctx: RequestContext, topic: str, partition: int) -> int:
    cluster = ctx.cluster
    if cluster is None:
        return LEADER_EPOCH
    replica = cluster.replicas.replica(topic, partition)
    return replica.leader_epoch if replica is not None else -1


def handle(ctx: RequestContext, request: m.ListOffsetsRequest) -> m.ListOffsetsResponse:
    version = ctx.version
    read_committed = version >= 2 and request.isolation_level == READ_COMMITTED
    hidden = denied(
        ctx, AclOperation.DESCRIBE, AclResourceType.TOPIC, (t.name for t in request.topics)
    )
    topics: list[Topic] = []
    for topic in request.topics:
        partitions: list[Partition] = []
        for want in topic.partitions:
            code: int = ErrorCode.NONE
            if topic.name in hidden:
                code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            elif 0 < version < TARGET_SINCE.get(want.timestamp, 0):
                code = ErrorCode.UNSUPPORTED_VERSION
            offset = timestamp = -1
            if not code:
                try:
                    offset, timestamp = _lookup(
                        ctx,
                        topic.name,
                        want.partition_index,
                        want.timestamp,
                        read_committed,
                        want.current_leader_epoch if version >= 4 else -1,
                        request.replica_id == CONSUMER,
                    )
                except BrokerError as exc:
                    code = code_of(exc)
            if version == 0:
                found = [offset] if offset >= 0 and not code else []
                partitions.append(
                    Partition(
                        partition_index=want.partition_index,
                        error_code=code,
                        old_style_offsets=found[: max(want.max_num_offsets, 0)],
                    )
                )
                continue
            partitions.append(
                Partition(
                    partition_index=want.partition_index,
                    error_code=code,
                    timestamp=timestamp,
                    offset=offset,
                    # Kafka: no epoch for no offset (nothing at or after the
                    # timestamp, an empty log's max timestamp).
                    leader_epoch=_epoch(ctx, topic.name, want.partition_index)
                    if version >= 4 and not code and offset >= 0
                    else -1,
                )
            )
        topics.append(Topic(name=topic.name, partitions=partitions))
    return m.ListOffsetsResponse(topics=topics)


def error_response(
    request: m.ListOffsetsRequest | None, version: int, code: ErrorCode
) -> m.ListOffsetsResponse:
    if request is None:
        return m.ListOffsetsResponse()
    return m.ListOffsetsResponse(
        topics=[
            Topic(
                name=t.name,
                partitions=[
                    Partition(partition_index=p.partition_index, error_code=code)
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="logs producers cluster authorizer",
)
