"""Authorization helpers shared by the group, transaction and share-group handlers.

Rules and invariants:

* Without an authorizer (:func:`enabled` is False) a handler takes its old path
  untouched: nothing is filtered, reordered or re-encoded.
* A request's topics are authorized once per distinct name (:func:`allowed_topics`),
  as Kafka's ``filterByAuthorized`` does; the authorizer caches decisions too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any, TypeVar

from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode

from ._base import RequestContext
from ._util import denied

_R = TypeVar("_R")  # a response body
_T = TypeVar("_T")  # a request's topic entry

__all__ = [
    "CLUSTER_NAME",
    "AclOperation",
    "AclResourceType",
    "allowed_topics",
    "split_topics",
    "commit_readable_topics",
    "describe_groups_authorized",
    "enabled",
    "group_allowed",
    "heartbeat_refusal",
    "transactional_id_allowed",
]


def enabled(ctx: RequestContext) -> bool:
    """Whether the broker authorizes requests (an authorizer is configured)."""
    return ctx.authorizer is not None


def group_allowed(ctx: RequestContext, operation: int, group_id: str) -> bool:
    """Whether the principal may do ``operation`` on the group."""
    return ctx.allowed(operation, AclResourceType.GROUP, group_id)


def transactional_id_allowed(ctx: RequestContext, operation: int, transactional_id: str) -> bool:
    """Whether the principal may do ``operation`` on the transactional id."""
    return ctx.allowed(operation, AclResourceType.TRANSACTIONAL_ID, transactional_id)


def allowed_topics(ctx: RequestContext, operation: int, names: Iterable[str]) -> set[str]:
    """The names among ``names`` the principal may do ``operation`` on."""
    asked = set(names)
    return asked - denied(ctx, operation, AclResourceType.TOPIC, asked)


def heartbeat_refusal(
    ctx: RequestContext, group_id: str, subscribed: list[str] | None
) -> ErrorCode | None:
    """Why a KIP-848 or share-group heartbeat is refused: READ on the group,
    DESCRIBE on every subscribed topic; None when it may go on."""
    if not group_allowed(ctx, AclOperation.READ, group_id):
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if subscribed and len(allowed_topics(ctx, AclOperation.DESCRIBE, subscribed)) < len(
        set(subscribed)
    ):
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    return None


def split_topics(
    ctx: RequestContext, operation: int, topics: list[_T], name_of: Callable[[_T], str]
) -> tuple[list[_T], list[_T]]:
    """A request's topic entries split into those the principal may do
    ``operation`` on and the refused ones, each in request order."""
    allowed = allowed_topics(ctx, operation, map(name_of, topics))
    return (
        [t for t in topics if name_of(t) in allowed],
        [t for t in topics if name_of(t) not in allowed],
    )


def _name(topic: Any) -> str:
    return str(topic.name)


def commit_readable_topics(
    ctx: RequestContext,
    request: Any,
    commit: Callable[[Any, int, int], _R],
    refuse: Callable[[Any, int, ErrorCode], _R],
    empty: Callable[[], _R],
) -> _R:
    """An offset commit (OffsetCommit, TxnOffsetCommit) of the topics the
    principal may READ; the others get TOPIC_AUTHORIZATION_FAILED on each of their
    partitions, after the committed ones.

    ``commit(request, version, now_ms)`` is the coordinator's call, ``refuse`` the
    handler's error response and ``empty`` its empty response (Kafka does not ask
    the coordinator when no topic is left).
    """
    permitted, refused_topics = split_topics(ctx, AclOperation.READ, request.topics, _name)
    if not refused_topics:
        return commit(request, ctx.version, ctx.now_ms)
    committed = (
        commit(dataclasses.replace(request, topics=permitted), ctx.version, ctx.now_ms)
        if permitted
        else empty()
    )
    refused = refuse(
        dataclasses.replace(request, topics=refused_topics),
        ctx.version,
        ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    )
    topics = [*committed.topics, *refused.topics]  # type: ignore[attr-defined]
    return dataclasses.replace(committed, topics=topics)  # type: ignore[type-var]


def describe_groups_authorized(
    ctx: RequestContext,
    group_ids: list[str],
    describe: Callable[[list[str]], list[Any]],
    topics_of: Callable[[Any], Iterable[str]],
    error_group: Callable[[str, ErrorCode, str | None], Any],
    include_operations: bool,
) -> list[Any]:
    """ConsumerGroupDescribe's and ShareGroupDescribe's rule, in request order.

    ``describe`` describes the groups the principal may DESCRIBE (one answer per
    id, in order); the others get ``error_group(id, GROUP_AUTHORIZATION_FAILED,
    None)``. With ``include_operations`` a described group carries the
    principal's authorized operations. A described group naming a topic
    (``topics_of``) the principal may not DESCRIBE is answered
    TOPIC_AUTHORIZATION_FAILED without members, so its assignments reveal
    nothing. Without an authorizer every group is described, and asked-for
    operations are all of a group's (as Kafka reports them then).
    """
    if not enabled(ctx):
        groups = describe(group_ids)
        if not include_operations:
            return groups
        ops = ctx.authorized_operations(AclResourceType.GROUP, "")
        return [
            dataclasses.replace(g, authorized_operations=ops) if g.error_code == 0 else g
            for g in groups
        ]
    allowed = [group_allowed(ctx, AclOperation.DESCRIBE, g) for g in group_ids]
    described = describe([g for g, ok in zip(group_ids, allowed, strict=True) if ok])
    seen = allowed_topics(ctx, AclOperation.DESCRIBE, (t for g in described for t in topics_of(g)))
    answers = iter(described)
    out = []
    for group_id, ok in zip(group_ids, allowed, strict=True):
        if not ok:
            out.append(error_group(group_id, ErrorCode.GROUP_AUTHORIZATION_FAILED, None))
            continue
        group = next(answers)
        if any(t not in seen for t in topics_of(group)):
            group = error_group(
                group_id,
                ErrorCode.TOPIC_AUTHORIZATION_FAILED,
                "the group has topics the client is not authorized to describe",
            )
        elif include_operations and group.error_code == ErrorCode.NONE:
            ops = ctx.authorized_operations(AclResourceType.GROUP, group_id)
            group = dataclasses.replace(group, authorized_operations=ops)
        out.append(group)
    return out
