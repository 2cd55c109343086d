"""DeleteShareGroupOffsets (key 92), version 0: forget a share group's state of
whole topics (Kafka 4.1, KIP-932).

The group as a whole, as Kafka's coordinator decides
(:meth:`~trafka.brokerlite.groups.share_groups.ShareGroups.offsets_change_refusal`):
an empty group id is INVALID_GROUP_ID, a group that does not exist or is a
classic or consumer group GROUP_ID_NOT_FOUND (a delete creates no group), a
group with members NON_EMPTY_GROUP, each in the top-level error with no topics.
Then per topic (:meth:`~trafka.brokerlite.shares.fetcher.ShareFetcher.delete_topics`),
one answer per distinct name in the order given: the group's state of every
partition of the topic is forgotten, durably (one fsynced journal write) before
the answer, and the next member starts those partitions by
``share.auto.offset.reset``. A topic that does not exist, or of which the group
has no state, is UNKNOWN_TOPIC_OR_PARTITION with the null topic id, as in Kafka
("no offset information to delete"); a failed journal write KAFKA_STORAGE_ERROR
(nothing changed).

Authorization: DELETE on the group, else GROUP_AUTHORIZATION_FAILED; then READ per
topic, else that topic is answered TOPIC_AUTHORIZATION_FAILED (listed first, as
Kafka does) and its state kept.

While ``share.version`` is finalized at 0 (UpdateFeatures, :mod:`trafka.brokerlite.features`)
share groups are off: every request is answered UNSUPPORTED_VERSION (the broker's
gate, before authorization), as Kafka 4.x answers it.
"""

from __future__ import annotations

import dataclasses

from trafka.brokerlite.features import SHARE_VERSION
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k92_delete_share_group_offsets as m

from ..outcomes import Parked
from ._authz import AclOperation, enabled, group_allowed, split_topics
from ._base import HandlerSpec, RequestContext
from ._share_admin import Later, answer
from ._util import NULL_UUID

API_KEY = ApiKey.DELETE_SHARE_GROUP_OFFSETS
MIN_VERSION = 0
MAX_VERSION = 0

R = m.DeleteShareGroupOffsetsResponse
DENIED = "Topic authorization failed."


def handle(
    ctx: RequestContext, request: m.DeleteShareGroupOffsetsRequest
) -> m.DeleteShareGroupOffsetsResponse | Parked:
    result: m.DeleteShareGroupOffsetsResponse | Parked = answer(
        ctx, _authorized(ctx, request), lambda code: error_response(request, ctx.version, code)
    )
    return result


def _authorized(ctx: RequestContext, request: m.DeleteShareGroupOffsetsRequest) -> Later:
    if not enabled(ctx):
        return _delete(ctx, request)
    if not group_allowed(ctx, AclOperation.DELETE, request.group_id):
        return Later.now(error_response(request, ctx.version, ErrorCode.GROUP_AUTHORIZATION_FAILED))
    kept, denied = split_topics(ctx, AclOperation.READ, request.topics, lambda t: t.topic_name)
    if not denied:
        return _delete(ctx, request)
    refused = [
        R.DeleteShareGroupOffsetsResponseTopic(
            topic_name=t.topic_name,
            topic_id=NULL_UUID,
            error_code=ErrorCode.TOPIC_AUTHORIZATION_FAILED,
            error_message=DENIED,
        )
        for t in denied
    ]

    def with_refused(
        answer: m.DeleteShareGroupOffsetsResponse,
    ) -> m.DeleteShareGroupOffsetsResponse:
        if answer.error_code != ErrorCode.NONE:
            return answer
        return dataclasses.replace(answer, responses=[*refused, *answer.responses])

    return _delete(ctx, dataclasses.replace(request, topics=kept)).then(with_refused)


def _delete(ctx: RequestContext, request: m.DeleteShareGroupOffsetsRequest) -> Later:
    refusal = ctx.share_groups.offsets_change_refusal(request.group_id, create=False)
    if refusal is not None:
        code, message = refusal
        return Later.now(R(error_code=code, error_message=message))
    port = ctx.share_offsets
    job = port.delete_topics(request.group_id, [t.topic_name for t in request.topics])

    def build() -> m.DeleteShareGroupOffsetsResponse:
        results = job.value
        done = [name for name, (error, _) in results.items() if error == ErrorCode.NONE]
        ctx.share_groups.note_initialized(request.group_id, (), done)
        responses = []
        for name, (error, why) in results.items():
            known = port.topic_id(name) if error == ErrorCode.NONE else None
            responses.append(
                R.DeleteShareGroupOffsetsResponseTopic(
                    topic_name=name,
                    topic_id=known if known is not None else NULL_UUID,
                    error_code=error,
                    error_message=why,
                )
            )
        return R(responses=responses)

    return Later([job], build)


def error_response(
    request: m.DeleteShareGroupOffsetsRequest | None, version: int, code: ErrorCode
) -> m.DeleteShareGroupOffsetsResponse:
    return R(error_code=code)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    feature=SHARE_VERSION,
    uses="share_groups share_offsets authorizer purgatory",
)
