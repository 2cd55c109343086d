"""ShareFetch and ShareAcknowledge answered only once durable (KIP-932, cluster mode).

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
  partition) turns the answer into that request's error for the whole request
  (NOT_LEADER_OR_FOLLOWER: the client finds the partition's new leader, and its
  acknowledgements there are refused if the records were delivered again). A
  wait longer than :data:`DURABLE_WAIT_MS` is answered REQUEST_TIMED_OUT.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from trafka.brokerlite.shares.persister import SETTLED_WATCH
from trafka.codec.errors import ErrorCode

from ._base import RequestContext

if TYPE_CHECKING:
    from trafka.brokerlite.shares.fetcher import ShareFetcher

__all__ = ["DURABLE_WAIT_MS", "WritesSettled", "when_durable"]

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
        deadline_ms: int,
    ) -> None:
        self._shares = shares
        self._answer = answer
        self._after = after
        self._refusal = refusal
        self.deadline_ms = deadline_ms
        self.watches = frozenset({SETTLED_WATCH})

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self._shares.writes_outcome(self._after) is not None

    def complete(self, now_ms: int) -> Any:
        code = self._shares.writes_outcome(self._after)
        if code is None:
            code = ErrorCode.REQUEST_TIMED_OUT
        return self._answer if code == ErrorCode.NONE else self._refusal(code)


def when_durable(
    ctx: RequestContext, answer: Any, after: int, refusal: Callable[[ErrorCode], Any]
) -> Any:
    """``answer`` now if the writes since ``after`` settled, the refusal if one
    failed, else a waiter to park (the caller parks or re-parks it)."""
    code = ctx.shares.writes_outcome(after)
    if code == ErrorCode.NONE:
        return answer
    if code is not None:
        return refusal(code)
    return WritesSettled(ctx.shares, answer, after, refusal, ctx.now_ms + DURABLE_WAIT_MS)
