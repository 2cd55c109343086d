"""Client quota requests and answers (DescribeClientQuotas, AlterClientQuotas;
KIP-546), for the entities, filters and alterations of :mod:`trafka.sdk.quotas`.
No I/O; :class:`~trafka.sdk.admin.Admin` sends them to any broker.

As with ACLs, the values stay in :mod:`trafka.sdk.quotas` (loaded by ``import
trafka.sdk``) and the wire side, which needs the codec's messages, is here.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k48_describe_client_quotas as dcq
from trafka.codec.messages import k49_alter_client_quotas as acq

from ..calls import TRANSIENT, Again, check
from ..errors import ArgumentValueError
from ..quotas import ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilterComponent
from ._common import partition_outcome

__all__ = [
    "alter_client_quotas_request",
    "client_quota_alterations",
    "describe_client_quotas_request",
    "read_alter_client_quotas",
    "read_describe_client_quotas",
]

_ALTERING = "altering the client quotas of"


def _entity(entry: Any) -> ClientQuotaEntity:
    return ClientQuotaEntity((e.entity_type, e.entity_name) for e in entry.entity)


def describe_client_quotas_request(
    components: Iterable[ClientQuotaFilterComponent], *, strict: bool
) -> Any:
    """DescribeClientQuotas with the filter's components."""
    req = dcq.DescribeClientQuotasRequest
    return req(
        components=[
            req.ComponentData(entity_type=c.entity_type, match_type=c.match_type, match=c.match)
            for c in components
        ],
        strict=strict,
    )


def read_describe_client_quotas(resp: Any) -> dict[ClientQuotaEntity, dict[str, float]]:
    """Each entity's quotas, entities in order of their types and names (defaults
    first), keys sorted.

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(resp.error_code, "describing client quotas", resp.error_message, again=TRANSIENT)
    found = {_entity(entry): {v.key: v.value for v in entry.values} for entry in resp.entries or ()}
    return {
        e: dict(sorted(found[e].items())) for e in sorted(found, key=ClientQuotaEntity.sort_key)
    }


def client_quota_alterations(
    alterations: Iterable[ClientQuotaAlteration],
) -> dict[ClientQuotaEntity, ClientQuotaAlteration]:
    """The alterations by entity.

    Raises:
        ValueError: an entity given twice.
    """
    wanted: dict[ClientQuotaEntity, ClientQuotaAlteration] = {}
    for alt in alterations:
        if alt.entity in wanted:
            raise ArgumentValueError(f"client quota entity {alt.entity} given twice")
        wanted[alt.entity] = alt
    return wanted


def alter_client_quotas_request(
    alterations: Iterable[ClientQuotaAlteration], *, validate_only: bool
) -> Any:
    """AlterClientQuotas: per entity, set each key, or remove it for None."""
    req = acq.AlterClientQuotasRequest
    return req(
        entries=[
            req.EntryData(
                entity=[
                    req.EntityData(entity_type=t, entity_name=n) for t, n in alt.entity.entries
                ],
                ops=[
                    req.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                    for k, v in alt.ops.items()
                ],
            )
            for alt in alterations
        ],
        validate_only=validate_only,
    )


def read_alter_client_quotas(
    resp: Any,
    pending: set[ClientQuotaEntity],
    failed: dict[ClientQuotaEntity, KafkaError],
) -> None:
    """Record an AlterClientQuotas answer: entities done (changed or failed for
    good, into ``failed``) leave ``pending``; one with a transient error stays
    and asks for another attempt. An entity the broker did not answer for fails.

    Raises:
        Again: an entity had a transient error.
    """
    retry: KafkaError | None = None
    for entry in resp.entries:
        entity = _entity(entry)
        if entity not in pending:
            continue
        error = partition_outcome(entry.error_code, entry.error_message, f"{_ALTERING} {entity}")
        if error is not None and error.code in TRANSIENT:
            retry = retry or error
            continue
        pending.discard(entity)
        if error is not None:
            failed[entity] = error
    if retry is not None:
        raise Again(retry)
    for entity in pending:
        failed[entity] = KafkaError(
            ErrorCode.UNKNOWN_SERVER_ERROR, f"{_ALTERING} {entity}: no answer"
        )
    pending.clear()
