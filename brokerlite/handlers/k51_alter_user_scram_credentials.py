"""AlterUserScramCredentials (key 51), version 0: set and delete users' SCRAM
credentials (KIP-554).

Answered by :meth:`ScramCredentials.alter <trafka.brokerlite.security.scram.ScramCredentials.alter>`
as Kafka's controller answers: an upsertion carries the salt, the iteration
count and the password as the client salted it, from which the broker keeps
StoredKey and ServerKey (never the password). Per user: DUPLICATE_RESOURCE for
a user named more than once in the request, UNACCEPTABLE_CREDENTIAL for an
empty name or iterations outside 4096-16384, UNSUPPORTED_SASL_MECHANISM for a
mechanism other than 1 and 2, RESOURCE_NOT_FOUND for deleting a credential that
does not exist. The valid changes are written to the data directory (one
journal entry) before the answer, and count for the next SCRAM login. Served
on every listener. In cluster mode they are written to ZooKeeper instead
(``/config/users/<user>``, salted hashes only: :mod:`trafka.brokerlite.security.zk_scram`),
whence every broker applies them.

Authorization: ALTER on the cluster, else CLUSTER_AUTHORIZATION_FAILED for
every user named, and nothing changes.
"""

from __future__ import annotations

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.brokerlite.security.scram import alter_response, log_changes
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k51_alter_user_scram_credentials as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import park_on_tasks, task_outcome

API_KEY = ApiKey.ALTER_USER_SCRAM_CREDENTIALS
MIN_VERSION = 0
MAX_VERSION = 0


def handle(
    ctx: RequestContext, request: m.AlterUserScramCredentialsRequest
) -> m.AlterUserScramCredentialsResponse | Parked:
    if not ctx.allowed(AclOperation.ALTER, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(request, ctx.version, ErrorCode.CLUSTER_AUTHORIZATION_FAILED)
    if ctx.cluster is not None:
        # Cluster mode: ZooKeeper holds the credentials; answered once written there.
        order, errors, deletions, upsertions = ctx.scram.check_alter(request)
        if not deletions and not upsertions:
            return alter_response(order, errors)
        task = ZkTask("scram", {"sets": upsertions, "deletes": list(deletions.values())})

        def answer() -> m.AlterUserScramCredentialsResponse:
            code, message = task_outcome(task)
            if code:
                for name in (*deletions, *upsertions):
                    errors[name] = (code, message or f"ZooKeeper: {code.name}")
            else:
                log_changes(deletions.values(), upsertions)
            return alter_response(order, errors)

        return park_on_tasks(ctx, [task], 30_000, answer)
    return ctx.scram.alter(request)


def error_response(
    request: m.AlterUserScramCredentialsRequest | None, version: int, code: ErrorCode
) -> m.AlterUserScramCredentialsResponse:
    # As Kafka: the error for each user the request names.
    users: dict[str, None] = {}
    if request is not None:
        users = dict.fromkeys(d.name for d in request.deletions)
        users.update(dict.fromkeys(u.name for u in request.upsertions))
    return m.AlterUserScramCredentialsResponse(
        results=[
            m.AlterUserScramCredentialsResponse.AlterUserScramCredentialsResult(
                user=name, error_code=code, error_message=None
            )
            for name in users
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="cluster authorizer scram purgatory",
)
