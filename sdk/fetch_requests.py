"""Fetch and ListOffsets requests the consumer sends, built without I/O.

The :class:`~trafka.sdk.fetcher.Fetcher` decides which partitions to fetch and
from which offset; the functions here write those decisions as requests:

* :func:`build_full_fetch`: a sessionless fetch (session 0, epoch -1 from v7)
  naming every partition.
* :func:`build_session_fetch`: a fetch session's next request (KIP-227), full
  or incremental as :meth:`~trafka.sdk.fetch_sessions.FetchSession.build` plans
  it, with the partitions it forgets.
* :func:`build_close_fetch`: the request closing a session (epoch -1, no
  partitions).

From Fetch v13 topics are named by id; every id sent is recorded in the
caller's ``topic_names`` so that the answer's topics can be named back. A
topic with no known id raises ``KeyError`` (the fetcher's ``fetch_version``
chooses v12 then). The offsets a request asks for come back as a
:class:`FetchPositions`, which remembers the session and the version the
answer is to be read with.
"""

from __future__ import annotations

import uuid
from typing import Any

from trafka.codec import KafkaError
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as list_offsets

from .consumer_types import TopicPartition
from .fetch_sessions import FetchSession, SessionPartition
from .metadata import MetadataCache

__all__ = [
    "FetchPositions",
    "build_close_fetch",
    "build_full_fetch",
    "build_list_offsets",
    "build_session_fetch",
    "parse_list_offsets",
    "request_fields",
]

_NULL_ID = uuid.UUID(int=0)


class FetchPositions(dict[TopicPartition, int]):
    """The offsets a fetch request asks for, with the session it was built
    for (None: sessionless) and its version."""

    __slots__ = ("session", "version")

    def __init__(self, session: FetchSession | None = None, version: int = 12) -> None:
        super().__init__()
        self.session = session
        self.version = version


def request_fields(
    version: int, *, max_wait_ms: int, min_bytes: int, max_bytes: int, read_committed: bool
) -> dict[str, Any]:
    """The request-level fields of a Fetch at ``version`` (a consumer's: replica -1)."""
    fields: dict[str, Any] = {
        "replica_id": -1,
        "max_wait_ms": max_wait_ms,
        "min_bytes": min_bytes,
    }
    if version >= 3:
        fields["max_bytes"] = max_bytes
    if version >= 4:
        fields["isolation_level"] = 1 if read_committed else 0
    return fields


def build_full_fetch(
    offsets: dict[TopicPartition, int],
    version: int,
    metadata: MetadataCache,
    partition_max_bytes: int,
    fields: dict[str, Any],
    topic_names: dict[uuid.UUID, str],
) -> Any:
    """A sessionless FetchRequest asking for every partition of ``offsets`` at its offset.

    Raises:
        KeyError: v13+ and a topic's id is unknown.
    """
    by_topic: dict[str, list[Any]] = {}
    for tp, offset in offsets.items():
        by_topic.setdefault(tp.topic, []).append(
            fetch.FetchRequest.FetchPartition(
                partition=tp.partition,
                current_leader_epoch=metadata.leader_epoch(tp.topic, tp.partition)
                if version >= 9
                else -1,
                fetch_offset=offset,
                partition_max_bytes=partition_max_bytes,
            )
        )
    topics = []
    for t, p in by_topic.items():
        if version >= 13:
            topic_id = metadata.topic_id(t)
            if topic_id is None:
                raise KeyError(f"no topic id for {t!r}; use Fetch v12")
            topic_names[topic_id] = t
            topics.append(fetch.FetchRequest.FetchTopic(topic_id=topic_id, partitions=p))
        else:
            topics.append(fetch.FetchRequest.FetchTopic(topic=t, partitions=p))
    kwargs = dict(fields, topics=topics)
    if version >= 7:
        kwargs["session_id"] = 0
        kwargs["session_epoch"] = -1  # a full fetch outside any session
    return fetch.FetchRequest(**kwargs)


def build_session_fetch(
    offsets: dict[TopicPartition, int | None],
    version: int,
    session: FetchSession,
    metadata: MetadataCache,
    partition_max_bytes: int,
    fields: dict[str, Any],
    topic_names: dict[uuid.UUID, str],
) -> tuple[Any, FetchPositions]:
    """``session``'s next FetchRequest for the partitions of ``offsets`` (each
    at its offset), and the offsets it asks for (those the session plans to
    read).

    Raises:
        KeyError: v13+ and a topic of the session has no id (the session
            starts over with a full fetch).
    """
    wanted: dict[TopicPartition, SessionPartition] = {}
    for tp, offset in offsets.items():
        assert offset is not None
        wanted[tp] = SessionPartition(
            metadata.topic_id(tp.topic) or _NULL_ID,
            offset,
            -1,
            partition_max_bytes,
            metadata.leader_epoch(tp.topic, tp.partition) if version >= 9 else -1,
        )
    plan = session.build(wanted)
    if version >= 13 and not plan.use_topic_ids:
        # fetch_version should have chosen v12: start over with a full fetch.
        session.handle_error()
        raise KeyError("a topic of the fetch session has no topic id; use Fetch v12")
    positions = FetchPositions(session, version)
    for tp, data in plan.partitions.items():
        positions[tp] = data.fetch_offset
    by_topic: dict[str, list[Any]] = {}
    ids: dict[str, uuid.UUID] = {}
    for tp, data in plan.to_send.items():
        ids[tp.topic] = data.topic_id
        by_topic.setdefault(tp.topic, []).append(
            fetch.FetchRequest.FetchPartition(
                partition=tp.partition,
                current_leader_epoch=data.leader_epoch,
                fetch_offset=data.fetch_offset,
                log_start_offset=data.log_start_offset,
                partition_max_bytes=data.max_bytes,
            )
        )
    topics = []
    for t, p in by_topic.items():
        if version >= 13:
            topic_names[ids[t]] = t
            topics.append(fetch.FetchRequest.FetchTopic(topic_id=ids[t], partitions=p))
        else:
            topics.append(fetch.FetchRequest.FetchTopic(topic=t, partitions=p))
    forget: dict[tuple[str, uuid.UUID], list[int]] = {}
    gone = list(plan.to_forget)
    if version >= 13:
        gone += plan.to_replace  # the old topic id leaves the session
    for tp, topic_id in gone:
        key = (tp.topic, topic_id) if version >= 13 else (tp.topic, _NULL_ID)
        forget.setdefault(key, []).append(tp.partition)
    forgotten = [
        fetch.FetchRequest.ForgottenTopic(topic_id=i, partitions=p)
        if version >= 13
        else fetch.FetchRequest.ForgottenTopic(topic=t, partitions=p)
        for (t, i), p in forget.items()
    ]
    kwargs = dict(
        fields,
        topics=topics,
        forgotten_topics_data=forgotten,
        session_id=plan.session_id,
        session_epoch=plan.epoch,
    )
    return fetch.FetchRequest(**kwargs), positions


def build_close_fetch(session: FetchSession, version: int, fields: dict[str, Any]) -> Any | None:
    """The request closing ``session`` at the broker (epoch -1, no partitions,
    no wait), or None when there is no session to close (see
    :meth:`FetchSession.close_plan`)."""
    if version < 7:
        return None
    plan = session.close_plan()
    if plan is None:
        return None
    kwargs = dict(fields, session_id=plan.session_id, session_epoch=plan.epoch, max_wait_ms=0)
    return fetch.FetchRequest(**kwargs)


def build_list_offsets(
    targets: dict[TopicPartition, int],
    version: int,
    *,
    read_committed: bool = False,
    leader_epochs: dict[TopicPartition, int] | None = None,
) -> Any:
    """A ListOffsetsRequest looking up ``targets`` (timestamp, or EARLIEST -2 / LATEST -1)."""
    by_topic: dict[str, list[Any]] = {}
    for tp, ts in targets.items():
        by_topic.setdefault(tp.topic, []).append(
            list_offsets.ListOffsetsRequest.ListOffsetsPartition(
                partition_index=tp.partition,
                current_leader_epoch=(leader_epochs or {}).get(tp, -1) if version >= 4 else -1,
                timestamp=ts,
            )
        )
    kwargs: dict[str, Any] = {
        "replica_id": -1,
        "topics": [
            list_offsets.ListOffsetsRequest.ListOffsetsTopic(name=t, partitions=p)
            for t, p in by_topic.items()
        ],
    }
    if version >= 2:
        kwargs["isolation_level"] = 1 if read_committed else 0
    return list_offsets.ListOffsetsRequest(**kwargs)


def parse_list_offsets(response: Any) -> dict[TopicPartition, tuple[int, int] | KafkaError]:
    """``tp -> (offset, timestamp)`` or the partition's error (offset -1: no such record)."""
    out: dict[TopicPartition, tuple[int, int] | KafkaError] = {}
    for t in response.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            if p.error_code:
                out[tp] = KafkaError(p.error_code, f"ListOffsets {t.name}-{p.partition_index}")
            else:
                out[tp] = (p.offset, p.timestamp)
    return out
