"""AlterClientQuotas (key 49), versions 0-1.

Sets and removes client quotas (:mod:`trafka.brokerlite.quotas`), entity by
entity: each entry is answered on its own, so one invalid entry does not stop
the others. An entry is INVALID_REQUEST, with the reason, for an empty entity,
an unknown or repeated entity type, ``ip`` combined with ``user`` or
``client-id``, an ``ip`` that is not an address, an unknown key or one the
entity does not take, a key named twice, or a value that is not a whole number
(0 or more) for the byte rates and the connection rate, or is not finite. As in
Kafka, values are not checked further, and removing a key that is not set is
not an error. An entity named again later in the same request is applied once,
from its first entry; the later entries are INVALID_REQUEST. ``validate_only`` checks without changing anything.
A change is fsynced before the answer and applies to the next request of every
connection. In cluster mode the changes are written to ZooKeeper instead, as
Kafka's dynamic configs (``/config/users/<user>``, ``/config/clients/<id>``,
``/config/users/<user>/clients/<id>``, ``/config/ips/<ip>``:
:mod:`trafka.brokerlite.security.zk_quotas`), and every broker applies them
when notified.

Authorization: ALTER_CONFIGS on the cluster, else CLUSTER_AUTHORIZATION_FAILED
for every entry.
"""

from __future__ import annotations

import logging

from trafka.brokerlite.cluster.view import ZkTask
from trafka.brokerlite.quotas import (
    Entity,
    QuotaError,
    QuotaStoreError,
    entity_of,
)
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k49_alter_client_quotas as m

from ..outcomes import Parked
from ._base import HandlerSpec, RequestContext
from ._util import park_on_tasks, task_outcome

API_KEY = ApiKey.ALTER_CLIENT_QUOTAS
MIN_VERSION = 0
MAX_VERSION = 1

log = logging.getLogger("trafka.brokerlite")

Response = m.AlterClientQuotasResponse


def handle(ctx: RequestContext, request: m.AlterClientQuotasRequest) -> Response | Parked:
    if not ctx.allowed(AclOperation.ALTER_CONFIGS, AclResourceType.CLUSTER, CLUSTER_NAME):
        return error_response(
            request,
            ctx.version,
            ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
            f"{ctx.principal} may not alter client quotas (ALTER_CONFIGS on the cluster)",
        )
    if ctx.cluster is not None:
        return _in_cluster(ctx, request)
    quotas = ctx.quotas
    done: set[Entity] = set()
    results = []
    for entry in request.entries:
        code, message = ErrorCode.NONE, None
        ops = [(op.key, None if op.remove else op.value) for op in entry.ops]
        try:
            entity = entity_of((e.entity_type, e.entity_name) for e in entry.entity)
            if entity in done:
                raise QuotaError("the request already altered this entity; this entry is ignored")
            quotas.alter(entity, ops, validate_only=request.validate_only)
            done.add(entity)
            if not request.validate_only:
                log.info(
                    "client quotas of %s altered by %r: %s",
                    _entity_text(entity),
                    ctx.principal,
                    ", ".join(f"{k}={'(removed)' if v is None else v}" for k, v in ops),
                )
        except QuotaError as exc:
            code, message = exc.code, str(exc)
        except QuotaStoreError as exc:
            log.error("cannot store client quotas: %s", exc)
            code, message = ErrorCode.UNKNOWN_SERVER_ERROR, "the quota journal cannot be written"
        results.append(
            Response.EntryData(error_code=code, error_message=message, entity=_echo(entry))
        )
    return Response(entries=results)


def _in_cluster(ctx: RequestContext, request: m.AlterClientQuotasRequest) -> Response | Parked:
    """Cluster mode: the entries are checked here and their changes written to
    ZooKeeper (:mod:`trafka.brokerlite.security.zk_quotas`) by one task, whence
    every broker applies them; answered once written."""
    done: set[Entity] = set()
    outcomes: list[tuple[ErrorCode, str | None]] = []
    changes: list[tuple[Entity, dict[str, float], list[str]]] = []
    written: list[int] = []  # the entries the task writes
    for i, entry in enumerate(request.entries):
        ops = [(op.key, None if op.remove else op.value) for op in entry.ops]
        try:
            entity = entity_of((e.entity_type, e.entity_name) for e in entry.entity)
            if entity in done:
                raise QuotaError("the request already altered this entity; this entry is ignored")
            set_, remove = ctx.quotas.check_ops(entity, ops)
            done.add(entity)
            outcomes.append((ErrorCode.NONE, None))
            if not request.validate_only and (set_ or remove):
                changes.append((entity, set_, remove))
                written.append(i)
        except QuotaError as exc:
            outcomes.append((exc.code, str(exc)))

    def answer() -> Response:
        if changes:
            code, message = task_outcome(task)
            for i in written:
                if code:
                    outcomes[i] = (code, message or f"ZooKeeper: {code.name}")
            if not code:
                for entity, set_, remove in changes:
                    log.info(
                        "client quotas of %s altered by %r: %s",
                        _entity_text(entity),
                        ctx.principal,
                        ", ".join(
                            [
                                *(f"{k}={v}" for k, v in set_.items()),
                                *(f"{k}=(removed)" for k in remove),
                            ]
                        ),
                    )
        return Response(
            entries=[
                Response.EntryData(error_code=code, error_message=message, entity=_echo(entry))
                for (code, message), entry in zip(outcomes, request.entries, strict=True)
            ]
        )

    if not changes:
        return answer()
    task = ZkTask("quotas", {"changes": changes})
    return park_on_tasks(ctx, [task], 30_000, answer)


def _entity_text(entity: Entity) -> str:
    return ", ".join(f"{t}={'<default>' if n is None else repr(n)}" for t, n in entity)


def _echo(entry: m.AlterClientQuotasRequest.EntryData) -> list[Response.EntityData]:
    return [
        Response.EntityData(entity_type=e.entity_type, entity_name=e.entity_name)
        for e in entry.entity
    ]


def error_response(
    request: m.AlterClientQuotasRequest | None,
    version: int,
    code: ErrorCode,
    message: str | None = None,
) -> Response:
    entries = request.entries if request is not None else []
    return Response(
        entries=[
            Response.EntryData(
                error_code=code, error_message=message or code.message, entity=_echo(e)
            )
            for e in entries
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="cluster authorizer quotas purgatory",
)
