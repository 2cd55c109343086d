"""AddOffsetsToTxn (key 25), versions 0-4: a consumer group's offsets join a transaction.

Handed to the transaction coordinator. The group's offsets then travel with the
transaction (TxnOffsetCommit) and are applied only if it commits. The checks are
AddPartitionsToTxn's (INVALID_PRODUCER_ID_MAPPING, PRODUCER_FENCED or
INVALID_PRODUCER_EPOCH before v2, CONCURRENT_TRANSACTIONS); an empty group id is
INVALID_GROUP_ID.

Authorization: WRITE on the transactional id (else
TRANSACTIONAL_ID_AUTHORIZATION_FAILED), then READ on the group (else
GROUP_AUTHORIZATION_FAILED).
"""

from __future__ import annotations

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k25_add_offsets_to_txn as m

from ._authz import AclOperation, group_allowed, transactional_id_allowed
from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.ADD_OFFSETS_TO_TXN
MIN_VERSION = 0
MAX_VERSION = 4


def handle(ctx: RequestContext, request: m.AddOffsetsToTxnRequest) -> m.AddOffsetsToTxnResponse:
    if not transactional_id_allowed(ctx, AclOperation.WRITE, request.transactional_id):
        return m.AddOffsetsToTxnResponse(error_code=ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
    if not group_allowed(ctx, AclOperation.READ, request.group_id):
        return m.AddOffsetsToTxnResponse(error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED)
    return ctx.txn.add_offsets_to_txn(request, ctx.version, ctx.now_ms)


def error_response(
    request: m.AddOffsetsToTxnRequest | None, version: int, code: ErrorCode
) -> m.AddOffsetsToTxnResponse:
    return m.AddOffsetsToTxnResponse(error_code=code)


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="txn authorizer")
