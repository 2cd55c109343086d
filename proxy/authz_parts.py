"""What the authorization filter's per-API handlers (:mod:`.authz_apis`,
:mod:`.authz_groups`, :mod:`.authz_more`, :mod:`.authz_share`) share: a
request answered in part, and groups described by id."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from trafka.codec.errors import ErrorCode

from .filters import Respond

__all__ = ["OMITTED", "described_groups", "partial"]

OMITTED = -(2**31)  # authorized operations not asked for


def partial(
    j: Any, body: Any, field: str, keep: list[Any], answer: Any, out: str, errors: list[Any]
) -> Any:
    """``body`` with ``field`` cut to ``keep`` (the refused parts' ``errors``
    merged into the answer's ``out``); ``answer`` when nothing is kept."""
    if not errors:
        return body
    if not keep:
        return Respond(answer)
    j.later(lambda r: replace(r, **{out: [*getattr(r, out), *errors]}))
    return replace(body, **{field: keep})


def described_groups(j: Any, body: Any, response: Any) -> Any:
    """A describe of groups by id (``group_ids``; ConsumerGroupDescribe,
    ShareGroupDescribe, StreamsGroupDescribe): DESCRIBE on each, the refused
    answered GROUP_AUTHORIZATION_FAILED with no message, as Kafka answers them."""
    keep = [g for g in body.group_ids if j.ok("DESCRIBE", "group", g)]
    errors = [
        response.DescribedGroup(
            error_code=ErrorCode.GROUP_AUTHORIZATION_FAILED, error_message=None, group_id=g,
            authorized_operations=OMITTED,
        )
        for g in body.group_ids
        if g not in keep
    ]  # fmt: skip
    return partial(j, body, "group_ids", keep, response(groups=errors), "groups", errors)
