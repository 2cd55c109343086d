"""DescribeUserScramCredentials (key 50), version 0: which users have SCRAM
credentials, with each mechanism's iteration count (KIP-554).

Answered by :meth:`ScramCredentials.describe <trafka.brokerlite.security.scram.ScramCredentials.describe>`
from the configuration's users and the API's changes, as Kafka does: a null or
empty list names every user with a credential; per user RESOURCE_NOT_FOUND for
one without any, DUPLICATE_RESOURCE for one named twice. Served on every
listener.

Authorization: DESCRIBE on the cluster, else CLUSTER_AUTHORIZATION_FAILED at
the top and for every user named.
"""

from __future__ import annotations

from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k50_describe_user_scram_credentials as m

from ._base import HandlerSpec, RequestContext

API_KEY = ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS
MIN_VERSION = 0
MAX_VERSION = 0


def handle(
    ctx: RequestContext, request: m.DescribeUserScramCredentialsRequest
) -> m.DescribeUserScramCredentialsResponse:
    if not ctx.allowed(AclOperation.DESCRIBE, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    return ctx.scram.describe(request)


def error_response(
    request: m.DescribeUserScramCredentialsRequest | None, version: int, code: ErrorCode
) -> m.DescribeUserScramCredentialsResponse:
    # As Kafka: the error at the top and for each user named.
    users = dict.fromkeys(u.name for u in (request.users or [])) if request is not None else {}
    return m.DescribeUserScramCredentialsResponse(
        error_code=code,
        error_message=None,
        results=[
            m.DescribeUserScramCredentialsResponse.DescribeUserScramCredentialsResult(
                user=name, error_code=code, error_message=None, credential_infos=[]
            )
            for name in users
        ],
    )


SPEC = HandlerSpec(
    API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response, uses="authorizer scram"
)
