"""DescribeClientQuotas (key 48), versions 0-1.

Lists the configured client quotas (:mod:`trafka.brokerlite.quotas`) of the
entities the filter matches, each with all its keys, in the order they were
first set. A component matches an entity type's named entity (match type 0),
its default entity (1) or any entity of it (2); ``strict`` keeps only entities
of exactly the filter's types. An invalid filter (a type named twice, an exact
match without a name, a name on a default or any match, an unknown match type,
``ip`` with ``user`` or ``client-id``) fails the request with INVALID_REQUEST
and the reason, and null entries; an unknown entity type with
UNSUPPORTED_VERSION, as Kafka answers it. A match of any entity of a type
includes its default entity; with no components, ``strict`` matches nothing.

Authorization: DESCRIBE_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

from trafka.brokerlite.quotas import QuotaError
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k48_describe_client_quotas as m

from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.DESCRIBE_CLIENT_QUOTAS
MIN_VERSION = 0
MAX_VERSION = 1

Response = m.DescribeClientQuotasResponse


def handle(ctx: RequestContext, request: m.DescribeClientQuotasRequest) -> Response:
    if not ctx.allowed(AclOperation.DESCRIBE_CONFIGS, AclResourceType.CLUSTER, CLUSTER_NAME):
        return _failed(
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{ctx.principal} may not describe client quotas (DESCRIBE_CONFIGS on the cluster)",
        )
    try:
        found = ctx.quotas.describe(
            ((c.entity_type, c.match_type, c.match) for c in request.components),
            strict=request.strict,
        )
    except QuotaError as exc:
        return _failed(exc.code, str(exc))
    return Response(
        error_code=ErrorCode.NONE,
        error_message=None,
        entries=[
            Response.EntryData(
                entity=[Response.EntityData(entity_type=t, entity_name=n) for t, n in entity],
                values=[Response.ValueData(key=k, value=v) for k, v in values.items()],
            )
            for entity, values in found
        ],
    )


def _failed(code: ErrorCode, message: str | None) -> Response:
    return Response(error_code=code, error_message=message, entries=None)


def error_response(
    request: m.DescribeClientQuotasRequest | None, version: int, code: ErrorCode
) -> Response:
    return _failed(code, code.message)


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="authorizer quotas"
)
