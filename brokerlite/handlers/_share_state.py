"""What the share coordinator's inter-broker handlers share (KIP-932, cluster mode):
InitializeShareGroupState (83), ReadShareGroupState (84), WriteShareGroupState
(85) and DeleteShareGroupState (86), sent by share-partition leaders to the
coordinator of each share-partition's key (:mod:`trafka.brokerlite.shares.coordinator`).

Rules:

* Authorization: CLUSTER_ACTION on the cluster (brokers send these), else every
  partition is answered CLUSTER_AUTHORIZATION_FAILED and nothing changes.
* Each partition is answered on its own; a partition whose key this broker does
  not coordinate (its ``__share_group_state`` partition is led elsewhere, or the
  broker is a single node, whose share state is a journal) gets NOT_COORDINATOR.
* The answer waits until what the request wrote is on the in-sync replicas of
  the ``__share_group_state`` partitions it touched (the high watermark passed
  it), at most :data:`STATE_REPLICATION_TIMEOUT_MS`: a partition whose
  coordinator lost its leadership meanwhile is then answered NOT_COORDINATOR,
  one not replicated in time REQUEST_TIMED_OUT (both retriable: the leader
  asks again).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from typing import Any

from trafka.brokerlite.cluster.view import SHARE_STATE_TOPIC
from trafka.codec.errors import ErrorCode

from ._authz import CLUSTER_NAME, AclOperation, AclResourceType
from ._base import RequestContext

__all__ = ["STATE_REPLICATION_TIMEOUT_MS", "Row", "codes_only", "refusal_of", "serve"]

#: How long an answer waits for its state records to replicate (Kafka's
#: share coordinator waits for its writes like the group coordinator's).
STATE_REPLICATION_TIMEOUT_MS = 5_000


class Row:
    """One partition's answer: its code and whatever the API returns with it."""

    __slots__ = ("code", "partition", "payload", "state_partition", "topic_id")

    def __init__(self, topic_id: uuid.UUID, partition: int, code: ErrorCode, payload: Any) -> None:
        self.topic_id = topic_id
        self.partition = partition
        self.code = code
        self.payload = payload
        self.state_partition: int | None = None


Act = Callable[[Any, str, Any], tuple[ErrorCode, Any]]
"""``act(coordinator, topic_id, partition_data) -> (code, payload)``."""


def serve(
    ctx: RequestContext,
    group_id: str,
    topics: Iterable[Any],
    act: Act,
    build: Callable[[list[Row]], Any],
) -> Any:
    """Answer a share-state request: ``act`` on each partition, ``build`` the body."""
    rows: list[Row] = []
    allowed = ctx.allowed(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, CLUSTER_NAME)
    coordinator = ctx.share_coordinator
    for topic in topics:
        for data in topic.partitions:
            row = Row(topic.topic_id, data.partition, ErrorCode.NOT_COORDINATOR, None)
            if not allowed:
                row.code = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
            elif coordinator is not None and group_id:
                tid = str(topic.topic_id)
                row.state_partition = coordinator.partition_of(group_id, tid, data.partition)
                row.code, row.payload = act(coordinator, tid, data)
            elif coordinator is not None:
                row.code = ErrorCode.INVALID_REQUEST
            rows.append(row)
    required: dict[tuple[str, int], int] = {}
    for row in rows:
        if row.code == ErrorCode.NONE and row.state_partition is not None:
            plog = ctx.logs.partition(SHARE_STATE_TOPIC, row.state_partition)
            if plog.high_watermark < plog.log_end_offset:
                required[(SHARE_STATE_TOPIC, row.state_partition)] = plog.log_end_offset
    if not required:
        return build(rows)
    return ctx.park(
        _StateReplicated(ctx, rows, build, required, ctx.mono_ms + STATE_REPLICATION_TIMEOUT_MS)
    )


class _StateReplicated:
    """A share-state answer waiting for its records to reach the ISR."""

    def __init__(
        self,
        ctx: RequestContext,
        rows: list[Row],
        build: Callable[[list[Row]], Any],
        required: dict[tuple[str, int], int],
        deadline_ms: int,
    ) -> None:
        self._ctx = ctx
        self._rows = rows
        self._build = build
        self._required = required
        self.deadline_ms = deadline_ms
        self.watches = frozenset(required)

    def _codes(self) -> tuple[dict[int, ErrorCode], bool]:
        """Per state partition, the error replacing NONE (lost, not yet replicated),
        and whether any still waits."""
        cluster = self._ctx.cluster
        codes: dict[int, ErrorCode] = {}
        waiting = False
        for (topic, index), needed in self._required.items():
            replica = None if cluster is None else cluster.replicas.replica(topic, index)
            if cluster is None or replica is None or replica.leader != cluster.node_id:
                codes[index] = ErrorCode.NOT_COORDINATOR
            elif self._ctx.logs.partition(topic, index).high_watermark < needed:
                codes[index] = ErrorCode.REQUEST_TIMED_OUT
                waiting = True
        return codes, waiting

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return not self._codes()[1]

    def complete(self, now_ms: int) -> Any:
        codes = self._codes()[0]
        for row in self._rows:
            if row.code == ErrorCode.NONE and row.state_partition in codes:
                row.code = codes[row.state_partition]
                row.payload = None
        return self._build(self._rows)


def codes_only(response: Any, result: Any) -> Callable[[list[Row]], Any]:
    """The ``build`` of an API whose answer is one error code per partition
    (``response`` the response class, ``result`` its per-topic class)."""

    def build(rows: list[Row]) -> Any:
        by_topic: dict[uuid.UUID, list[Any]] = {}
        for row in rows:
            by_topic.setdefault(row.topic_id, []).append(
                response.PartitionResult(partition=row.partition, error_code=row.code)
            )
        return response(results=[result(topic_id=t, partitions=ps) for t, ps in by_topic.items()])

    return build


def refusal_of(build: Callable[[list[Row]], Any]) -> Callable[[Any, int, ErrorCode], Any]:
    """A handler's ``error_response``: ``code`` for every partition of the request."""

    def error_response(request: Any, version: int, code: ErrorCode) -> Any:
        topics = request.topics if request is not None else []
        return build(
            [Row(t.topic_id, p.partition, code, None) for t in topics for p in t.partitions]
        )

    return error_response
