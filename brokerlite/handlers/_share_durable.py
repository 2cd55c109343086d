"""ShareFetch and ShareAcknowledge answered only once durable (KIP-932, cluster
mode), each partition answer naming its leader.

In a cluster the share fetcher's writes go to share coordinators on other
brokers (:mod:`trafka.brokerlite.shares.persister`). An acknowledgement must not
be answered before its share-partition's state is on the coordinator's in-sync
replicas, or a leader dying right after could deliver the record again although
its consumer was told it was done.

Rules:

* The handler takes the persister's mark before it changes anything; its answer
  leaves once every write since then has settled. On a single node the
  journal's fsync is done before the handler returns, so nothing waits.
* A write that failed (the coordinator fenced this leader, which lost the
  partition: NOT_LEADER_OR_FOLLOWER, and the client finds the partition's new
  leader) fails only its share-partitions: the handler's ``settle`` answers
  their partitions with the error (the acknowledgements there rolled back,
  and a ShareFetch's records from a fenced one put back) and the others as
  they are, as
  Kafka answers per partition (``SharePartitionManager``
  ``mapAcknowledgementFutures``). A wait longer than :data:`DURABLE_WAIT_MS`
  is answered REQUEST_TIMED_OUT for the whole request (the writes may still
  land); a waiter completed before then with a write still on its way waits
  on. A ShareFetch's ``refusal`` puts back the records its answer acquired
  (:mod:`.k78_share_fetch`): they never reached the member.
* CurrentLeader (:func:`with_leaders`): every partition answer names the
  partition's leader and leader epoch as this broker knows them (-1 and -1 when
  it does not: an unknown topic or partition, a topic the principal may not
  read, no leader). With NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH the
  leader's endpoint is in NodeEndpoints too, as Kafka's KafkaApis answers them,
  so the client goes there without asking for metadata (KIP-951's hint). Kafka
  fills CurrentLeader only with those two errors and otherwise sends the
  schema's default 0 and 0, which names no leader; brokerlite names the true
  one (docs/brokerlite.md).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.shares.persister import SETTLED_WATCH
from trafka.codec.errors import ErrorCode

from ..outcomes import ParkAgain
from ._base import RequestContext
from ._util import LEADER_EPOCH

if TYPE_CHECKING:
    from trafka.brokerlite.shares.fetcher import ShareFetcher
    from trafka.brokerlite.shares.state_store import SP

__all__ = ["DURABLE_WAIT_MS", "WritesSettled", "when_durable", "with_leaders"]

#: The longest an answer waits for its writes (Kafka's request.timeout.ms).
DURABLE_WAIT_MS = 30_000


class WritesSettled:
    """An answer waiting for the share-state writes made since ``after``."""

    def __init__(
        self,
        shares: ShareFetcher,
        answer: Any,
        after: int,
        refusal: Callable[[ErrorCode], Any],
        settle: Callable[[dict[SP, ErrorCode]], Any],
        deadline_ms: int,
    ) -> None:
        self._shares = shares
        self._answer = answer
        self._after = after
        self._refusal = refusal
        self._settle = settle
        self.deadline_ms = deadline_ms
        self.watches = frozenset({SETTLED_WATCH})

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self._shares.writes_outcome(self._after) is not None

    def complete(self, now_ms: int) -> Any:
        code = self._shares.writes_outcome(self._after)
        if code is None:
            if mono_ms(now_ms) < self.deadline_ms:
                return ParkAgain(self)  # (woken early: a write still on its way)
            return self._refusal(ErrorCode.REQUEST_TIMED_OUT)
        if code == ErrorCode.NONE:
            return self._answer
        return self._settle(self._shares.writes_failed(self._after))


def when_durable(
    ctx: RequestContext,
    answer: Any,
    after: int,
    refusal: Callable[[ErrorCode], Any],
    settle: Callable[[dict[SP, ErrorCode]], Any],
) -> Any:
    """``answer`` now if the writes since ``after`` settled, ``settle`` of the
    share-partitions whose writes failed if some did, else a waiter to park
    (the caller parks or re-parks it); ``refusal`` answers a wait too long."""
    code = ctx.shares.writes_outcome(after)
    if code == ErrorCode.NONE:
        return answer
    if code is not None:
        return settle(ctx.shares.writes_failed(after))
    deadline = ctx.mono_ms + DURABLE_WAIT_MS
    return WritesSettled(ctx.shares, answer, after, refusal, settle, deadline)


_LEADERSHIP = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})
_UNNAMED = frozenset({ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION})


def with_leaders(ctx: RequestContext, answer: Any) -> Any:
    """A ShareFetch or ShareAcknowledge ``answer`` with CurrentLeader set in each
    partition answer, and NodeEndpoints (see the module rules)."""
    if answer.error_code != ErrorCode.NONE:
        return answer
    kind = type(answer)
    endpoints: dict[int, Any] = {}
    topics = []
    for topic in answer.responses:
        name = ctx.topic_name(topic.topic_id)
        parts = []
        for p in topic.partitions:
            leader, epoch = -1, -1
            if name is not None and p.error_code not in _UNNAMED:
                leader, epoch = _leader(ctx, name, p.partition_index)
            if leader >= 0 and p.error_code in _LEADERSHIP and ctx.cluster is not None:
                info = ctx.cluster.broker(leader)
                if info is not None:
                    endpoints[leader] = kind.NodeEndpoint(
                        node_id=leader, host=info.host, port=info.port, rack=info.rack
                    )
            current = kind.LeaderIdAndEpoch(leader_id=leader, leader_epoch=epoch)
            parts.append(dataclasses.replace(p, current_leader=current))
        topics.append(dataclasses.replace(topic, partitions=parts))
    return dataclasses.replace(
        answer,
        responses=topics,
        node_endpoints=[*answer.node_endpoints, *(endpoints[n] for n in sorted(endpoints))],
    )


def _leader(ctx: RequestContext, topic: str, partition: int) -> tuple[int, int]:
    """(leader id, leader epoch) of a partition, -1 for what is not known."""
    cluster = ctx.cluster
    if cluster is None:
        info = ctx.logs.topic(topic)
        if info is None or not 0 <= partition < info.num_partitions:
            return -1, -1
        return ctx.node_id, LEADER_EPOCH  # one node leads everything, never elected again
    leader = cluster.leader(topic, partition)
    state = cluster.state(topic, partition)
    if leader < 0:
        return -1, -1
    return leader, state.leader_epoch if state is not None else -1
