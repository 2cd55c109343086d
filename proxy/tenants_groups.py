"""The classic consumer protocol's embedded data, rewritten for tenants
(:mod:`.tenants`): I/O-free.

Rules:

* A classic group whose protocol type is ``consumer`` carries topic names
  inside its members' opaque bytes: each member's subscription (JoinGroup's
  protocol metadata, ``ConsumerProtocolSubscription``: the topics and the
  partitions it owns) and each member's assignment (SyncGroup's,
  ``ConsumerProtocolAssignment``). The brokers read them: Kafka keeps a
  group's committed offsets of the topics it subscribes to (KIP-496), and
  describes members by them. So they are prefixed on the way to the broker
  and unprefixed on the way back (JoinGroup's members to the leader,
  SyncGroup's assignment, DescribeGroups' members), like every other name.
* The assignors' own user data is left as it is: only the group's members
  read it, and they read it as they wrote it.
* Data of another protocol type (Kafka Connect, a user's), a version newer
  than the codec knows (it would lose fields written again), or bytes that do
  not parse pass unchanged: the brokers and members judge them as before.
* A group's protocol type is known from the JoinGroup request (and SyncGroup
  v5's, DescribeGroups' answers); the filter remembers it per connection and
  group for the SyncGroup requests that do not carry it.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import replace
from typing import Any

from trafka.codec import DecodeError, decode_versioned
from trafka.codec.messages import consumer_protocol as cp

__all__ = [
    "CONSUMER",
    "assignment",
    "describe_groups_answer",
    "join_answer",
    "join_request",
    "subscription",
    "sync_answer",
    "sync_request",
]

CONSUMER = "consumer"
_I16 = struct.Struct(">h")
_SUBSCRIPTIONS = cp.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS
_ASSIGNMENTS = cp.CONSUMERPROTOCOLASSIGNMENT_SCHEMAS

Rename = Callable[[str], str]


def _rewritten(
    data: bytes | None, schemas: dict[int, Any], name: str, change: Callable[[Any], Any]
) -> bytes | None:
    if not data or len(data) < 2:
        return data
    (version,) = _I16.unpack_from(data, 0)
    if version not in schemas:
        return data
    try:
        message = decode_versioned(schemas, data, name)
    except DecodeError:
        return data
    out: bytes = schemas[version].compile().build(change(message))
    return data[:2] + out


def subscription(data: bytes | None, rename: Rename) -> bytes | None:
    """A member's subscription with its topics renamed."""

    def change(sub: Any) -> Any:
        return replace(
            sub,
            topics=[rename(t) for t in sub.topics],
            owned_partitions=[replace(t, topic=rename(t.topic)) for t in sub.owned_partitions],
        )

    return _rewritten(data, _SUBSCRIPTIONS, "ConsumerProtocolSubscription", change)


def assignment(data: bytes | None, rename: Rename) -> bytes | None:
    """A member's assignment with its topics renamed."""

    def change(given: Any) -> Any:
        return replace(
            given,
            assigned_partitions=[
                replace(t, topic=rename(t.topic)) for t in given.assigned_partitions
            ],
        )

    return _rewritten(data, _ASSIGNMENTS, "ConsumerProtocolAssignment", change)


def join_request(body: Any, rename: Rename) -> Any:
    if body.protocol_type != CONSUMER:
        return body
    return replace(
        body,
        protocols=[replace(p, metadata=subscription(p.metadata, rename)) for p in body.protocols],
    )


def join_answer(body: Any, rename: Rename, protocol_type: str | None) -> Any:
    if (body.protocol_type or protocol_type) != CONSUMER or not body.members:
        return body
    return replace(
        body,
        members=[replace(m, metadata=subscription(m.metadata, rename)) for m in body.members],
    )


def sync_request(body: Any, rename: Rename, protocol_type: str | None) -> Any:
    if (body.protocol_type or protocol_type) != CONSUMER:
        return body
    return replace(
        body,
        assignments=[
            replace(a, assignment=assignment(a.assignment, rename)) for a in body.assignments
        ],
    )


def sync_answer(body: Any, rename: Rename, protocol_type: str | None) -> Any:
    if (body.protocol_type or protocol_type) != CONSUMER:
        return body
    return replace(body, assignment=assignment(body.assignment, rename))


def describe_groups_answer(body: Any, rename: Rename) -> Any:
    return replace(
        body,
        groups=[
            replace(
                g,
                members=[
                    replace(
                        m,
                        member_metadata=subscription(m.member_metadata, rename),
                        member_assignment=assignment(m.member_assignment, rename),
                    )
                    for m in g.members
                ],
            )
            if g.protocol_type == CONSUMER and g.members
            else g
            for g in body.groups
        ],
    )
