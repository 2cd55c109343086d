"""FindCoordinator (key 10), versions 0-6: where a group's or transaction's coordinator lives.

* Group keys (key_type 0) and transaction keys (key_type 1, transactional
  ids): this node, always (it coordinates every group and every transaction).
  v4+ batches keys in ``coordinator_keys`` and answers one entry per key.
* Share-group keys (key_type 2) and unknown types: INVALID_REQUEST.

Authorization, per key: DESCRIBE on the group (else GROUP_AUTHORIZATION_FAILED)
or on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k10_find_coordinator as m

from ._authz import AclOperation, group_allowed, transactional_id_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = 10
MIN_VERSION = 0
MAX_VERSION = 6

GROUP = 0
TRANSACTION = 1


def _answer(ctx: RequestContext, key: str, key_type: int) -> tuple[ErrorCode, str | None]:
    if key_type == GROUP:
        if not group_allowed(ctx, AclOperation.DESCRIBE, key):
            return ErrorCode.GROUP_AUTHORIZATION_FAILED, "not authorized to describe the group"
        return ErrorCode.NONE, None
    if key_type == TRANSACTION:
        if not transactional_id_allowed(ctx, AclOperation.DESCRIBE, key):
            return (
                ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                "not authorized to describe the transactional id",
            )
        return ErrorCode.NONE, None
    return ErrorCode.INVALID_REQUEST, f"unsupported coordinator key type {key_type}"


def handle(ctx: RequestContext, request: m.FindCoordinatorRequest) -> m.FindCoordinatorResponse:
    host, port = ctx.broker.advertised
    node = ctx.broker.node_id
    if ctx.version >= 4:
        coordinators = []
        for key in request.coordinator_keys:
            code, message = _answer(ctx, key, request.key_type)
            ok = code == ErrorCode.NONE
            coordinators.append(
                m.FindCoordinatorResponse.Coordinator(
                    key=key,
                    node_id=node if ok else -1,
                    host=host if ok else "",
                    port=port if ok else -1,
                    error_code=code,
                    error_message=message,
                )
            )
        return m.FindCoordinatorResponse(coordinators=coordinators)
    code, message = _answer(ctx, request.key, request.key_type)
    ok = code == ErrorCode.NONE
    return m.FindCoordinatorResponse(
        error_code=code,
        error_message=message if ctx.version >= 1 else "",
        node_id=node if ok else -1,
        host=host if ok else "",
        port=port if ok else -1,
    )


def error_response(
    request: m.FindCoordinatorRequest | None, version: int, code: ErrorCode
) -> m.FindCoordinatorResponse:
    if version >= 4:
        keys = request.coordinator_keys if request is not None else []
        return m.FindCoordinatorResponse(
            coordinators=[
                m.FindCoordinatorResponse.Coordinator(
                    key=k, node_id=-1, port=-1, error_code=code, error_message=None
                )
                for k in keys
            ]
        )
    return m.FindCoordinatorResponse(error_code=code, error_message=None, node_id=-1, port=-1)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
