"""DeleteGroups (key 42), versions 0-3: delete empty groups and their offsets.

Handed to the group coordinator: NON_EMPTY_GROUP while a group has members,
GROUP_ID_NOT_FOUND for unknown groups. v3 (Kafka 4.4) adds a message to
each group's result; Kafka 4.4 leaves it null for these errors, and so does
brokerlite (null also for an error of the share coordinator).

An empty share group's share-partitions' state is deleted first, through the
share-offsets port (:mod:`trafka.brokerlite.shares.offsets_port`; in a cluster,
DeleteShareGroupState to the share coordinators, and the answer waits for
them), so that a new group of the same name starts by
``share.auto.offset.reset``; a group whose state could not be deleted keeps
its membership and is answered the share coordinator's error.

Authorization: DELETE per group; a group the principal may not delete gets
GROUP_AUTHORIZATION_FAILED and is left alone.
"""

from __future__ import annotations

import dataclasses

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k42_delete_groups as m

from ..outcomes import Parked
from ._authz import AclOperation, enabled, group_allowed
from ._base import HandlerSpec, RequestContext
from ._share_admin import Later, answer

API_KEY = ApiKey.DELETE_GROUPS
MIN_VERSION = 0
MAX_VERSION = 3


def handle(ctx: RequestContext, request: m.DeleteGroupsRequest) -> m.DeleteGroupsResponse | Parked:
    names = request.groups_names
    if enabled(ctx):
        allowed = [group_allowed(ctx, AclOperation.DELETE, g) for g in names]
    else:
        allowed = [True] * len(names)
    permitted = [g for g, ok in zip(names, allowed, strict=True) if ok]
    share_groups = ctx.share_groups
    # An empty share group's share-partitions' state goes first (Kafka's group
    # coordinator deletes it through its persister before the group).
    emptied = [g for g in permitted if share_groups.offsets_change_refusal(g, create=False) is None]
    job = ctx.share_offsets.delete_groups({g: share_groups.initialized(g) for g in emptied})

    def build() -> m.DeleteGroupsResponse:
        failed: dict[str, ErrorCode] = {
            g: code for g, code in job.value.items() if code != ErrorCode.NONE
        }
        deleted = iter(
            ctx.groups.delete_groups(
                dataclasses.replace(
                    request, groups_names=[g for g in permitted if g not in failed]
                ),
                ctx.version,
            ).results
        )
        results = []
        for g, ok in zip(names, allowed, strict=True):
            if not ok:
                code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            elif g in failed:
                code = failed[g]
            else:
                results.append(next(deleted))
                continue
            results.append(m.DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code))
        return m.DeleteGroupsResponse(results=results)

    result: m.DeleteGroupsResponse | Parked = answer(
        ctx, Later([job], build), lambda code: error_response(request, ctx.version, code)
    )
    return result


def error_response(
    request: m.DeleteGroupsRequest | None, version: int, code: ErrorCode
) -> m.DeleteGroupsResponse:
    names = request.groups_names if request is not None else []
    return m.DeleteGroupsResponse(
        results=[
            m.DeleteGroupsResponse.DeletableGroupResult(group_id=g, error_code=code) for g in names
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="groups share_groups share_offsets authorizer purgatory",
)
