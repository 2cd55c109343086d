"""Key routing's answers, I/O-free: the one ProduceResponse the client expects,
made from the answers to the parts of its request, and what those answers
teach the proxy about leaders.

Rules (key routing as a whole is in :mod:`.plan`'s doc):

* The parts' answers are read on bytes (:mod:`trafka.codec.produce_response`,
  through :func:`..pool.produce_answer`), and the client's answer is written
  on bytes (:func:`merge_answers`): a partition a broker answered alone is
  copied from that broker's answer, the others are written from a few
  numbers. :func:`merge_produce` is the same merge on decoded messages: the
  reference (property tests check both give the same bytes), and the merge of
  an answer that passes through the filters decoded (:meth:`.filter.KeyRouting.on_response`).
* The answer names exactly the partitions the client sent, in its order; a
  partition gets a broker's base offset only when it is true for every one of
  its records (otherwise :func:`~.plan.unknown_base_offset`).
* A part without an answer (a lost connection, a passed deadline) is answered
  by :func:`failed_answer` (:func:`failed_part` read as a part's answer): one
  retriable error for each of its partitions.
* :func:`unwritten`, :func:`sub_request` and :func:`patch_answer` send again
  only the partitions a leader change left unwritten, and fold the answers in.
* :func:`learn_leaders` takes KIP-951 leader hints at once and names the
  topics whose leaders must be asked again (:func:`metadata_request`).
* The client's answer keeps the first part's tagged fields, the longest
  throttle time of all, and every part's KIP-951 node endpoints (one per
  node, the last part's), their addresses the proxy's (``endpoints``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.messages import k00_produce as produce_msgs
from trafka.codec.produce_request import ProduceRequestData
from trafka.codec.produce_response import (
    ProduceAnswer,
    ProduceResponseWriter,
    produce_answer_of,
)

from ..topics import Topics
from .plan import _STALE, ProduceRoute, unknown_base_offset

__all__ = [
    "Endpoints",
    "failed_answer",
    "failed_part",
    "finish_answer",
    "learn_leaders",
    "merge_answers",
    "merge_produce",
    "patch_answer",
    "said",
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
                        own, index=index, error_code=said(own.error_code), record_errors=errors
                    )
                )
                continue
            failed = next(
                (got[(i, name, x)] for i, x in sources if got[(i, name, x)].error_code), None
            )
            merged.append(
                resp.PartitionProduceResponse(
                    index=index,
                    error_code=said(failed.error_code) if failed else 0,
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


def said(code: int) -> int:
    """The error the client hears: a part's lost connection (NETWORK_EXCEPTION, which
    no broker puts in a Produce answer and librdkafka would not retry) is said as
    REQUEST_TIMED_OUT, which every client retries."""
    return ErrorCode.REQUEST_TIMED_OUT if code == ErrorCode.NETWORK_EXCEPTION else code


# The client's node endpoints (KIP-951) from the brokers': their addresses the proxy's.
Endpoints = Callable[[list[Any]], list[Any]]


def merge_answers(
    route: ProduceRoute,
    answers: Sequence[ProduceAnswer],
    version: int,
    client_software: str | None = None,
    endpoints: Endpoints | None = None,
) -> bytes:
    """:func:`merge_produce` on bytes: the client's ProduceResponse body at
    ``version`` (that of ``answers``), from the answers to every part of its
    request, in the plan's order.

    Raises:
        DecodeError: an answer lacks a partition its part sent.
    """
    got = [a.partitions for a in answers]
    # Every partition read is there and none failed (the usual case): the
    # partitions not told their batch's answer need no look at their sources.
    clean = (
        len(route.needs) == len(got)
        and all(needs <= found.keys() for needs, found in zip(route.needs, got, strict=True))
        and not any(a.errors for a in answers)
    )
    w = ProduceResponseWriter(version, len(route.origin))
    for name, parts in route.origin:
        w.topic(name, len(parts))
        for index, sources, kept, count in parts:
            if clean:
                if kept is not None and len(sources) == 1:
                    w.copy(got[kept[0]][(name, kept[1])], index, 0, count)
                else:
                    w.add(index, 0, unknown_base_offset(count, client_software))
                continue
            try:
                found = [got[i][(name, x)] for i, x in sources]
            except KeyError:
                raise DecodeError(
                    f"the broker did not answer for every part of {name}-{index}",
                    message_name="ProduceResponse",
                ) from None
            if kept is not None and len(sources) == 1:
                own = found[0]  # a kept batch is one of the partition's sources
                w.copy(own, index, said(own.error_code), count)
                continue
            failed = next((p for p in found if p.error_code), None)
            if failed is None:
                w.add(index, 0, unknown_base_offset(count, client_software))
            else:
                w.add(index, said(failed.error_code), -1, error_message=failed.error_message)
    nodes = {e.node_id: e for a in answers for e in a.node_endpoints}
    return finish_answer(w, answers, list(nodes.values()), endpoints)


def finish_answer(
    w: ProduceResponseWriter,
    answers: Sequence[ProduceAnswer],
    nodes: list[Any],
    endpoints: Endpoints | None,
) -> bytes:
    """The body ``w`` holds, with the throttle time and tagged fields of the
    parts' ``answers`` (see the module's rules; none: no throttle, no tags) and
    the node endpoints ``nodes``, rewritten by ``endpoints`` (None: as sent)."""
    if not answers:
        return w.finish(0)
    if nodes and endpoints is not None:
        nodes = endpoints(nodes)
    return w.finish(
        max(a.throttle_time_ms for a in answers),
        nodes,
        answers[0].unknown_tagged_fields,
    )


def failed_part(
    part: Any, version: int, error: ErrorCode, message: str | None = None
) -> ProduceAnswer:
    """:func:`failed_answer`, as a part's answer read at ``version``."""
    return produce_answer_of(failed_answer(part, error, message), version)


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


def unwritten(answer: ProduceAnswer) -> set[tuple[str, int]]:
    """The partitions of a part's answer refused with an error that says
    nothing was written and the partition's leader is elsewhere (or soon will be)."""
    return {k for k, p in answer.partitions.items() if p.error_code in _UNWRITTEN}


def sub_request(part: Any, wanted: set[tuple[str, int]]) -> Any:
    """``part`` (a ProduceRequest, or its :class:`ProduceRequestData`) with only
    the ``wanted`` partitions."""
    if isinstance(part, ProduceRequestData):
        picked = [(t, [p for p in ps if (t, p[0]) in wanted]) for t, ps in part.topics]
        return ProduceRequestData(
            part.transactional_id, part.acks, part.timeout_ms, [t for t in picked if t[1]]
        )
    topics = []
    for t in part.topic_data:
        kept = [p for p in t.partition_data if (t.name, p.index) in wanted]
        if kept:
            topics.append(dataclasses.replace(t, partition_data=kept))
    return dataclasses.replace(part, topic_data=topics)


def patch_answer(answer: ProduceAnswer, newer: ProduceAnswer) -> ProduceAnswer:
    """``answer`` with the partition answers ``newer`` has put in their place."""
    got = newer.partitions
    return dataclasses.replace(
        answer, partitions={k: got.get(k, p) for k, p in answer.partitions.items()}
    )


def learn_leaders(topics: Topics, answer: ProduceAnswer) -> set[str]:
    """Take the leader hints of a part's answer.

    Returns:
        The topics whose leaders the proxy should ask again (an error says its
        view is stale and the answer gave no hint).
    """
    stale: set[str] = set()
    for (topic, index), p in answer.partitions.items():
        if p.error_code not in _STALE:
            continue
        if p.leader_id >= 0:
            topics.leaders[(topic, index)] = p.leader_id
        else:
            stale.add(topic)
    return stale
