"""Key routing's answers, I/O-free: the one ProduceResponse the client expects,
made from the answers to the parts of its request, and what those answers
teach the proxy about leaders.

Rules (key routing as a whole is in :mod:`.routing`'s doc):

* :func:`merge_produce` names exactly the partitions the client sent, in its
  order; a partition gets a broker's base offset only when it is true for
  every one of its records (otherwise :func:`~.routing.unknown_base_offset`).
* A part without an answer (a lost connection, a passed deadline) is answered
  by :func:`failed_answer`: one retriable error for each of its partitions.
* :func:`unwritten`, :func:`sub_request` and :func:`patch_answer` send again
  only the partitions a leader change left unwritten, and fold the answers in.
* :func:`learn_leaders` takes KIP-951 leader hints at once and names the
  topics whose leaders must be asked again (:func:`metadata_request`).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterable, Sequence
from typing import Any

from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.messages import k00_produce as produce_msgs
from trafka.codec.messages import k03_metadata as metadata_msgs

from .routing import (
    _STALE,
    ProduceRoute,
    Topics,
    unknown_base_offset,
)

__all__ = [
    "failed_answer",
    "learn_leaders",
    "merge_produce",
    "metadata_request",
    "patch_answer",
    "sub_request",
    "unwritten",
]

log = logging.getLogger("trafka.proxy")


def merge_produce(
    route: ProduceRoute, answers: Sequence[Any], client_software: str | None = None
) -> Any:
    """The client's answer, from the answers to every part of its request.

    Args:
        route: the request's route.
        answers: the decoded ProduceResponse of each part (at least one), in
            the plan's order, or :func:`failed_answer`'s stand-in for a part
            that got none.
        client_software: the client's software name, for the base offset of a
            partition answered without one (:func:`unknown_base_offset`).

    Returns:
        A ProduceResponse naming exactly the client's partitions.

    Raises:
        DecodeError: an answer lacks a partition its part sent.
    """
    resp = produce_msgs.ProduceResponse
    got: dict[tuple[int, str, int], Any] = {
        (i, t.name, p.index): p
        for i, a in enumerate(answers)
        for t in a.responses
        for p in t.partition_responses
    }
    responses = []
    for name, parts in route.origin:
        merged = []
        for index, sources, kept, count in parts:
            if any((i, name, x) not in got for i, x in sources):
                raise DecodeError(
                    f"the broker did not answer for every part of {name}-{index}",
                    message_name="ProduceResponse",
                )
            if kept is not None and len(sources) == 1:
                own = got[(kept[0], name, kept[1])]
                errors = own.record_errors
                if errors:  # only the client's records' (the first ``count`` of the batch)
                    errors = [e for e in errors if e.batch_index < count]
                merged.append(
                    dataclasses.replace(
                        own, index=index, error_code=_said(own.error_code), record_errors=errors
                    )
                )
                continue
            failed = next(
                (got[(i, name, x)] for i, x in sources if got[(i, name, x)].error_code), None
            )
            merged.append(
                resp.PartitionProduceResponse(
                    index=index,
                    error_code=_said(failed.error_code) if failed else 0,
                    error_message=failed.error_message if failed else None,
                    base_offset=-1 if failed else unknown_base_offset(count, client_software),
                    log_append_time_ms=-1,
                    log_start_offset=-1,
                )
            )
        responses.append(resp.TopicProduceResponse(name=name, partition_responses=merged))
    endpoints = {e.node_id: e for a in answers for e in a.node_endpoints}
    return dataclasses.replace(
        answers[0],
        responses=responses,
        throttle_time_ms=max(a.throttle_time_ms for a in answers),
        node_endpoints=list(endpoints.values()),
    )


def _said(code: int) -> int:
    """The error the client hears: a part's lost connection (NETWORK_EXCEPTION, which
    no broker puts in a Produce answer and librdkafka would not retry) is said as
    REQUEST_TIMED_OUT, which every client retries."""
    return ErrorCode.REQUEST_TIMED_OUT if code == ErrorCode.NETWORK_EXCEPTION else code


def failed_answer(part: Any, error: ErrorCode, message: str | None = None) -> Any:
    """A stand-in answer for a part that got none: each of its partitions failed
    with ``error``."""
    resp = produce_msgs.ProduceResponse
    return resp(
        responses=[
            resp.TopicProduceResponse(
                name=t.name,
                partition_responses=[
                    resp.PartitionProduceResponse(
                        index=p.index, error_code=error, base_offset=-1, error_message=message
                    )
                    for p in t.partition_data
                ],
            )
            for t in part.topic_data
        ]
    )


# A broker refused the batch as no longer (or not yet) its leader: another may take it.
_UNWRITTEN = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.LEADER_NOT_AVAILABLE})


def unwritten(answer: Any) -> set[tuple[str, int]]:
    """The partitions of a part's answer refused with an error that says
    nothing was written and the partition's leader is elsewhere (or soon will be)."""
    return {
        (t.name, p.index)
        for t in answer.responses
        for p in t.partition_responses
        if p.error_code in _UNWRITTEN
    }


def sub_request(part: Any, wanted: set[tuple[str, int]]) -> Any:
    """``part`` (a ProduceRequest) with only the ``wanted`` partitions."""
    topics = []
    for t in part.topic_data:
        kept = [p for p in t.partition_data if (t.name, p.index) in wanted]
        if kept:
            topics.append(dataclasses.replace(t, partition_data=kept))
    return dataclasses.replace(part, topic_data=topics)


def patch_answer(answer: Any, newer: Any) -> Any:
    """``answer`` with the partition answers ``newer`` has put in their place."""
    got = {(t.name, p.index): p for t in newer.responses for p in t.partition_responses}
    return dataclasses.replace(
        answer,
        responses=[
            dataclasses.replace(
                t,
                partition_responses=[got.get((t.name, p.index), p) for p in t.partition_responses],
            )
            for t in answer.responses
        ],
    )


def learn_leaders(topics: Topics, answer: Any) -> set[str]:
    """Take the leader hints of a part's answer.

    Returns:
        The topics whose leaders the proxy should ask again (an error says its
        view is stale and the answer gave no hint).
    """
    stale: set[str] = set()
    for t in answer.responses:
        for p in t.partition_responses:
            if p.error_code not in _STALE:
                continue
            if p.current_leader.leader_id >= 0:
                topics.leaders[(t.name, p.index)] = p.current_leader.leader_id
            else:
                stale.add(t.name)
    return stale


def metadata_request(names: Iterable[str]) -> Any:
    """The proxy's own Metadata request for ``names`` (never creating topics)."""
    m = metadata_msgs.MetadataRequest
    return m(
        topics=[m.MetadataRequestTopic(name=n) for n in sorted(names)],
        allow_auto_topic_creation=False,
    )
