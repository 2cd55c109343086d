"""Offset requests that name topics by id: OffsetCommit v10 and OffsetFetch
v10 (KIP-848), TxnOffsetCommit v6 (KIP-1319).

Rules:

* The group and transaction coordinators keep offsets by topic name; these
  versions are translated at the handler, both ways: each topic id of the
  request is looked up (:meth:`RequestContext.topic_name`), the known ones are
  handed on by name, the answer's names are turned back into the ids asked.
* A topic id no topic has (the null id included) is UNKNOWN_TOPIC_ID on each of
  its partitions, answered before the coordinator's topics, as Kafka 4.4
  orders them; a request left with no known topic still goes to the
  coordinator, with no topics (its group checks are its business).
* OffsetFetch asking for every committed topic (topics null) answers each by
  its id; a committed topic with no id here (deleted since) is left out.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Sequence
from typing import Any

from ._base import RequestContext


@dataclasses.dataclass(slots=True)
class Named:
    """A request's topics split by whether their id is known."""

    #: the topics whose id is known, their ``name`` set
    known: list[Any]
    #: the topics whose id is unknown, as asked
    unknown: list[Any]
    #: name -> the id asked for it
    ids: dict[str, uuid.UUID]

    def answer_ids(self, topics: Sequence[Any]) -> list[Any]:
        """Answer topics named by name, named by the ids asked instead."""
        return [dataclasses.replace(t, name="", topic_id=self.ids[t.name]) for t in topics]


def by_name(ctx: RequestContext, topics: Sequence[Any]) -> Named:
    """``topics`` (each with ``topic_id``) resolved to names (see the module's rules)."""
    named = Named([], [], {})
    for topic in topics:
        name = ctx.topic_name(topic.topic_id)
        if name is None:
            named.unknown.append(topic)
        else:
            named.ids[name] = topic.topic_id
            named.known.append(dataclasses.replace(topic, name=name))
    return named


def ids_of(ctx: RequestContext, topics: Sequence[Any]) -> list[Any]:
    """Answer topics named by name, named by their ids; those without one left out."""
    out = []
    for topic in topics:
        info = ctx.logs.topic(topic.name)
        if info is not None:
            out.append(dataclasses.replace(topic, name="", topic_id=info.topic_id))
    return out
