"""DeleteRecords (key 21), versions 0-2: move a partition's log start offset forward.

A topic whose ``cleanup.policy`` lacks ``delete`` (compacted only) answers
POLICY_VIOLATION, as Kafka's leader does. ``offset`` -1 means the high watermark. An offset beyond the high watermark is
OFFSET_OUT_OF_RANGE (low watermark -1); otherwise the partition's log start
offset becomes ``offset`` (if larger) and is returned as ``low_watermark``.
Whole segments below it are deleted by the log; records below it are no
longer readable even where they share a segment with newer ones. The
partition's aborted-transaction index forgets entries below it; its producers'
sequence state is kept (as Kafka does), so their retries are still recognised.

Cluster mode: only the partition's leader answers (else NOT_LEADER_OR_FOLLOWER).
The followers move their log start offsets when their next fetch tells them
the leader's, and report theirs in the fetch after. As in Kafka, the answer
waits until every in-sync replica's log start offset has reached ``offset``
and carries the lowest (the low watermark); a partition not there within the
request's ``timeout_ms`` gets REQUEST_TIMED_OUT, one whose leadership moved
meanwhile NOT_LEADER_OR_FOLLOWER.

Kafka's internal topics are their coordinators' to prune: their partitions are
answered INVALID_TOPIC_EXCEPTION (low watermark -1), after their existence is
checked, as Kafka's ReplicaManager answers them.

Authorization: each topic needs DELETE, else its partitions get
TOPIC_AUTHORIZATION_FAILED (before existence is looked at) and nothing of it
is deleted.
"""

from __future__ import annotations

from trafka.brokerlite.errors import BrokerError, InvalidTopicError
from trafka.brokerlite.storage.internal_topics import is_internal
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k21_delete_records as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import check_partition, code_of, denied, leader_log

API_KEY = ApiKey.DELETE_RECORDS
MIN_VERSION = 0
MAX_VERSION = 2


Topic = m.DeleteRecordsResponse.DeleteRecordsTopicResult
Partition = m.DeleteRecordsResponse.DeleteRecordsPartitionResult


def handle(
    ctx: RequestContext, request: m.DeleteRecordsRequest
) -> m.DeleteRecordsResponse | Parked:
    required: dict[tuple[str, int], int] = {}
    response = _delete(ctx, request, required)
    if ctx.cluster is None or not required:
        return response
    waiter = _ReplicasMoved(ctx, response, required, ctx.mono_ms + max(request.timeout_ms, 0))
    if waiter.settled():
        return waiter.complete(ctx.now_ms)
    return ctx.park(waiter)


class _ReplicasMoved:
    """A DeleteRecords answer waiting for the in-sync replicas' log start offsets."""

    def __init__(
        self,
        ctx: RequestContext,
        answer: m.DeleteRecordsResponse,
        required: dict[tuple[str, int], int],
        deadline_ms: int,
    ) -> None:
        self._cluster = ctx.cluster
        self._answer = answer
        self._required = required
        self.deadline_ms = deadline_ms
        self.watches = frozenset(required)

    def _lows(self) -> dict[tuple[str, int], int | None]:
        cluster = self._cluster
        assert cluster is not None
        return {tp: cluster.replicas.low_watermark(*tp) for tp in self._required}

    def settled(self) -> bool:
        lows = self._lows()
        return all(low is None or low >= self._required[tp] for tp, low in lows.items())

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self.settled()

    def complete(self, now_ms: int) -> m.DeleteRecordsResponse:
        lows = self._lows()
        topics = []
        for topic in self._answer.topics:
            parts = []
            for part in topic.partitions:
                tp = (topic.name, part.partition_index)
                if tp in self._required:
                    low = lows[tp]
                    if low is None:
                        part = Partition(
                            partition_index=part.partition_index,
                            low_watermark=-1,
                            error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER,
                        )
                    elif low < self._required[tp]:
                        part = Partition(
                            partition_index=part.partition_index,
                            low_watermark=-1,
                            error_code=ErrorCode.REQUEST_TIMED_OUT,
                        )
                    else:
                        part = Partition(
                            partition_index=part.partition_index,
                            low_watermark=low,
                            error_code=ErrorCode.NONE,
                        )
                parts.append(part)
            topics.append(Topic(name=topic.name, partitions=parts))
        return m.DeleteRecordsResponse(topics=topics)


def _delete(
    ctx: RequestContext, request: m.DeleteRecordsRequest, required: dict[tuple[str, int], int]
) -> m.DeleteRecordsResponse:
    refused = denied(
        ctx, AclOperation.DELETE, AclResourceType.TOPIC, (t.name for t in request.topics)
    )
    topics: list[Topic] = []
    for topic in request.topics:
        partitions: list[Partition] = []
        for want in topic.partitions:
            if topic.name in refused:
                partitions.append(
                    Partition(
                        partition_index=want.partition_index,
                        low_watermark=-1,
                        error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    )
                )
                continue
            try:
                if is_internal(topic.name):
                    check_partition(ctx, topic.name, want.partition_index)
                    raise InvalidTopicError(f"Cannot delete records of internal topic {topic.name}")
                log = leader_log(ctx, topic.name, want.partition_index)
                # The log checks the topic's policy, then the offset (as Kafka's
                # leader: POLICY_VIOLATION first, then OFFSET_OUT_OF_RANGE).
                low = log.delete_records(want.offset)  # -1: the high watermark
                ctx.producers.truncate_head(topic.name, want.partition_index)
            except BrokerError as exc:
                partitions.append(
                    Partition(
                        partition_index=want.partition_index,
                        low_watermark=-1,
                        error_code=code_of(exc),
                    )
                )
                continue
            required[(topic.name, want.partition_index)] = low
            partitions.append(
                Partition(
                    partition_index=want.partition_index,
                    low_watermark=low,
                    error_code=ErrorCode.NONE,
                )
            )
        topics.append(Topic(name=topic.name, partitions=partitions))
    return m.DeleteRecordsResponse(topics=topics)


def error_response(
    request: m.DeleteRecordsRequest | None, version: int, code: ErrorCode
) -> m.DeleteRecordsResponse:
    if request is None:
        return m.DeleteRecordsResponse()
    return m.DeleteRecordsResponse(
        topics=[
            Topic(
                name=t.name,
                partitions=[
                    Partition(partition_index=p.partition_index, low_watermark=-1, error_code=code)
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
    uses="logs producers cluster authorizer purgatory",
)
