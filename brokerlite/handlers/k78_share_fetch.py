"""ShareFetch (key 78), versions 1-2 (1: Kafka 4.1's first stable version; 2: Kafka 4.2's
ShareAcquireMode (KIP-1206) and renew acknowledgements (KIP-1222); v0 was
4.0's early access and is not served, as from Kafka 4.1).

Share sessions, acknowledgements piggy-backed on fetches, acquisition and
waiting are the share fetcher's (:mod:`trafka.brokerlite.shares.fetcher`; its module
docstring states the rules). A fetch that acquires nothing waits up to
MaxWaitMs: it is parked, woken by records appended to one of its session's
partitions or released there, and answered afresh.

An answer refused after it acquired records (in a cluster, its share-state
writes did not settle in time, :mod:`._share_durable`) puts them back at once
(:meth:`~trafka.brokerlite.shares.fetcher.ShareFetcher.undeliver`; the share
fetcher's "Refused answers" rule): the next fetch gets them, with the delivery
counts they had before. Writes that failed fail only their share-partitions:
their acknowledgements are answered in AcknowledgeErrorCode; the records of a
share-partition fenced (forgotten) are put back and the partition answered
with the error
(:meth:`~trafka.brokerlite.shares.fetcher.ShareFetcher.fail_writes`); the other
partitions are delivered, as Kafka's KafkaApis answers a ShareFetch whose
acknowledgements failed.

Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED for the request;
then READ per topic: a named partition of a topic the principal may not read is
answered TOPIC_AUTHORIZATION_FAILED (its acknowledgements too, unapplied) and
does not join the share session, and the fetch is answered at once.

While ``share.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
share groups are off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

import dataclasses
import uuid
from typing import TYPE_CHECKING

from trafka.brokerlite.features import SHARE_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k78_share_fetch as m

from ..outcomes import ParkAgain, Parked
from ._authz import AclOperation, allowed_topics, enabled, group_allowed
from ._base import HandlerSpec, RequestContext
from ._share_durable import WritesSettled, when_durable, with_leaders

if TYPE_CHECKING:
    from trafka.brokerlite.shares.fetcher import PendingFetch
    from trafka.brokerlite.shares.state_store import SP

API_KEY = ApiKey.SHARE_FETCH
MIN_VERSION = 1
MAX_VERSION = 2


class _ShareFetchWaiter:
    """A parked ShareFetch: any change to a watched partition may let it acquire."""

    def __init__(
        self, ctx: RequestContext, request: m.ShareFetchRequest, pending: PendingFetch, mark: int
    ) -> None:
        self._ctx = ctx
        self._request = request
        self._pending = pending
        self._mark = mark
        self.deadline_ms = pending.deadline_ms
        self.watches = pending.watches

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return True

    def complete(self, now_ms: int) -> m.ShareFetchResponse | ParkAgain:
        outcome = _durable(self._ctx, self._request, self._mark, self._pending, now_ms, {})
        if isinstance(outcome, m.ShareFetchResponse):
            return outcome
        return ParkAgain(outcome)


# Partitions refused for want of READ on their topic: topic id -> (partition, had acks).
_Refused = dict[uuid.UUID, list[tuple[int, bool]]]


def handle(ctx: RequestContext, request: m.ShareFetchRequest) -> m.ShareFetchResponse | Parked:
    mark = ctx.shares.writes_mark()
    refused: _Refused = {}
    if enabled(ctx):
        if not group_allowed(ctx, AclOperation.READ, request.group_id or ""):
            return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
        request, refused = _readable_only(ctx, request)
    fetching = ctx.shares.fetch(request, ctx.conn_id, ctx.now_ms)
    if not isinstance(fetching, m.ShareFetchResponse) and not (fetching.ready or refused):
        return ctx.park(_ShareFetchWaiter(ctx, request, fetching, mark))
    # (with a topic refused the answer goes at once: it carries an error)
    outcome = _durable(ctx, request, mark, fetching, ctx.now_ms, refused)
    if isinstance(outcome, m.ShareFetchResponse):
        return outcome
    return ctx.park(outcome)


def _durable(
    ctx: RequestContext,
    request: m.ShareFetchRequest,
    mark: int,
    fetching: m.ShareFetchResponse | PendingFetch,
    now_ms: int,
    refused: _Refused,
) -> m.ShareFetchResponse | WritesSettled:
    """The answer once the share-state writes since ``mark`` settled, or a waiter
    for them; a refusal puts back what the fetch acquired (module docstring)."""
    if isinstance(fetching, m.ShareFetchResponse):
        pending, answer = None, fetching  # (refused whole: nothing applied or acquired)
    else:
        pending, answer = fetching, ctx.shares.complete(fetching, now_ms)
    if refused:
        answer = _with_refused(answer, refused)

    def refusal(code: ErrorCode) -> m.ShareFetchResponse:
        if pending is not None:
            ctx.shares.undeliver(pending)  # (never sent: available to the next fetch)
        return error_response(request, ctx.version, code)

    def settle(failed: dict[SP, ErrorCode]) -> m.ShareFetchResponse:
        settled = answer
        if pending is not None:
            ctx.shares.fail_writes(pending, failed)
            settled = ctx.shares.complete(pending, now_ms)  # (ready: the answer again)
            settled = _with_refused(settled, refused) if refused else settled
        named: m.ShareFetchResponse = with_leaders(ctx, settled)
        return named

    outcome: m.ShareFetchResponse | WritesSettled
    outcome = when_durable(ctx, with_leaders(ctx, answer), mark, refusal, settle)
    return outcome


def _readable_only(
    ctx: RequestContext, request: m.ShareFetchRequest
) -> tuple[m.ShareFetchRequest, _Refused]:
    """``request`` without the topics the principal may not READ, and those."""
    names = {t.topic_id: ctx.topic_name(t.topic_id) for t in request.topics}
    readable = allowed_topics(ctx, AclOperation.READ, (n for n in names.values() if n))
    kept: list[m.ShareFetchRequest.FetchTopic] = []
    refused: _Refused = {}
    for topic in request.topics:
        name = names[topic.topic_id]
        if name is None or name in readable:  # (unknown ids: the share fetcher's error)
            kept.append(topic)
            continue
        refused.setdefault(topic.topic_id, []).extend(
            (p.partition_index, bool(p.acknowledgement_batches)) for p in topic.partitions
        )
    if not refused:
        return request, refused
    return dataclasses.replace(request, topics=kept), refused


def _with_refused(response: m.ShareFetchResponse, refused: _Refused) -> m.ShareFetchResponse:
    if response.error_code != ErrorCode.NONE:
        return response
    denied = ErrorCode.TOPIC_AUTHORIZATION_FAILED
    extra = [
        m.ShareFetchResponse.ShareFetchableTopicResponse(
            topic_id=topic_id,
            partitions=[
                m.ShareFetchResponse.PartitionData(
                    partition_index=index,
                    error_code=denied,
                    acknowledge_error_code=denied if acked else ErrorCode.NONE,
                    current_leader=m.ShareFetchResponse.LeaderIdAndEpoch(
                        leader_id=-1, leader_epoch=-1
                    ),
                    records=b"",
                )
                for index, acked in parts
            ],
        )
        for topic_id, parts in refused.items()
    ]
    return dataclasses.replace(response, responses=[*response.responses, *extra])


def error_response(
    request: m.ShareFetchRequest | None, version: int, code: ErrorCode
) -> m.ShareFetchResponse:
    return m.ShareFetchResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=SHARE_VERSION,
    uses="logs cluster shares authorizer purgatory",
)
