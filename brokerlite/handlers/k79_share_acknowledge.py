"""ShareAcknowledge (key 79), versions 1-2 (1: Kafka 4.1's first stable version; 2: Kafka
4.2's renew acknowledgements, KIP-1222, and the lock timeout in the answer).

Acknowledges records of a share session without fetching; parked only while
its share-state writes settle (a cluster, :mod:`._share_durable`). The rules
are the share fetcher's (:mod:`trafka.brokerlite.shares.fetcher`): a partition
whose write failed is answered with the error, the others as they are.

Authorization: READ on the group, else GROUP_AUTHORIZATION_FAILED for the request;
then READ per topic, else that topic's partitions are answered
TOPIC_AUTHORIZATION_FAILED and their acknowledgements are not applied.

While ``share.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
share groups are off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from trafka.brokerlite.features import SHARE_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k79_share_acknowledge as m

from ..outcomes import Parked
from ._authz import AclOperation, allowed_topics, enabled, group_allowed
from ._base import HandlerSpec, RequestContext
from ._share_durable import when_durable, with_leaders

if TYPE_CHECKING:
    from trafka.brokerlite.shares.state_store import SP

API_KEY = ApiKey.SHARE_ACKNOWLEDGE
MIN_VERSION = 1
MAX_VERSION = 2


def handle(
    ctx: RequestContext, request: m.ShareAcknowledgeRequest
) -> m.ShareAcknowledgeResponse | Parked:
    mark = ctx.shares.writes_mark()
    raw = _handle(ctx, request)

    def refusal(code: ErrorCode) -> m.ShareAcknowledgeResponse:
        return error_response(request, ctx.version, code)

    def settle(failed: dict[SP, ErrorCode]) -> m.ShareAcknowledgeResponse:
        named: m.ShareAcknowledgeResponse
        named = with_leaders(ctx, _with_failed(ctx, request.group_id or "", raw, failed))
        return named

    outcome = when_durable(ctx, with_leaders(ctx, raw), mark, refusal, settle)
    if isinstance(outcome, m.ShareAcknowledgeResponse):
        return outcome
    return ctx.park(outcome)


def _handle(ctx: RequestContext, request: m.ShareAcknowledgeRequest) -> m.ShareAcknowledgeResponse:
    acknowledge = ctx.shares.acknowledge
    if not enabled(ctx):
        return acknowledge(request, ctx.now_ms)
    if not group_allowed(ctx, AclOperation.READ, request.group_id or ""):
        return error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED)
    names = {t.topic_id: ctx.topic_name(t.topic_id) for t in request.topics}
    readable = allowed_topics(ctx, AclOperation.READ, (n for n in names.values() if n))

    def may_read(topic: m.ShareAcknowledgeRequest.AcknowledgeTopic) -> bool:
        name = names[topic.topic_id]
        return name is None or name in readable  # (unknown ids: the share fetcher's error)

    denied = [t for t in request.topics if not may_read(t)]
    if not denied:
        return acknowledge(request, ctx.now_ms)
    kept = [t for t in request.topics if may_read(t)]
    response = acknowledge(dataclasses.replace(request, topics=kept), ctx.now_ms)
    if response.error_code != ErrorCode.NONE:
        return response
    R = m.ShareAcknowledgeResponse
    extra = [
        R.ShareAcknowledgeTopicResponse(
            topic_id=t.topic_id,
            partitions=[
                R.PartitionData(
                    partition_index=p.partition_index,
                    error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                    current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                )
                for p in t.partitions
            ],
        )
        for t in denied
    ]
    return dataclasses.replace(response, responses=[*response.responses, *extra])


def _with_failed(
    ctx: RequestContext,
    group_id: str,
    response: m.ShareAcknowledgeResponse,
    failed: dict[SP, ErrorCode],
) -> m.ShareAcknowledgeResponse:
    """``response`` with the acknowledgements applied where the writes failed
    answered with the error (Kafka's ``SharePartitionManager.mapAcknowledgementFutures``)."""
    topics = []
    for topic in response.responses:
        name = ctx.topic_name(topic.topic_id)
        parts = []
        for p in topic.partitions:
            code = failed.get((group_id, name, p.partition_index)) if name else None
            if code is not None and p.error_code == ErrorCode.NONE:
                p = dataclasses.replace(p, error_code=code)
            parts.append(p)
        topics.append(dataclasses.replace(topic, partitions=parts))
    return dataclasses.replace(response, responses=topics)


def error_response(
    request: m.ShareAcknowledgeRequest | None, version: int, code: ErrorCode
) -> m.ShareAcknowledgeResponse:
    return m.ShareAcknowledgeResponse(error_code=code)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=SHARE_VERSION,
    uses="logs cluster shares authorizer purgatory",
)
