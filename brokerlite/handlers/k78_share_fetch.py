"""ShareFetch (key 78), version 1 (Kafka 4.1's first stable version; v0 was
4.0's early access and is not served, as from Kafka 4.1).

Share sessions, acknowledgements piggy-backed on fetches, acquisition and
waiting are the share fetcher's (:mod:`trafka.brokerlite.shares`; its module
docstring states the rules). A fetch that acquires nothing waits up to
MaxWaitMs: it is parked, woken by records appended to one of its session's
partitions or released there, and answered afresh.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k78_share_fetch as m

from ._base import HandlerSpec, Parked, RequestContext

if TYPE_CHECKING:
    from trafka.brokerlite.shares import PendingFetch, ShareFetcher

API_KEY = 78
MIN_VERSION = 1
MAX_VERSION = 1


class _ShareFetchWaiter:
    """A parked ShareFetch: any change to a watched partition may let it acquire."""

    def __init__(self, shares: ShareFetcher, pending: PendingFetch) -> None:
        self._shares = shares
        self._pending = pending
        self.deadline_ms = pending.deadline_ms
        self.watches = pending.watches

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return True

    def complete(self, now_ms: int) -> m.ShareFetchResponse:
        return self._shares.complete(self._pending, now_ms)


def handle(ctx: RequestContext, request: m.ShareFetchRequest) -> m.ShareFetchResponse | Parked:
    shares = ctx.broker.shares
    outcome = shares.fetch(request, ctx.conn_id, ctx.now_ms)
    if isinstance(outcome, m.ShareFetchResponse):
        return outcome
    return ctx.park(_ShareFetchWaiter(shares, outcome))


def error_response(
    request: m.ShareFetchRequest | None, version: int, code: ErrorCode
) -> m.ShareFetchResponse:
    return m.ShareFetchResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
