"""A share consumer's sessions and the requests that carry them (KIP-932), without I/O.

Rules:

* One share session per broker (:class:`ShareSession`). Its epoch is 0 until a
  ShareFetch opens it; every answered request moves it on by one, wrapping
  from 2**31-1 to 1 (:func:`next_epoch`); -1 (on ShareAcknowledge) closes it.
  The session errors (:data:`SESSION_ERRORS`) and a lost connection reset it
  to 0, so that the next ShareFetch lists every partition again.
* A ShareFetch at epoch 0 lists every partition the session should fetch;
  later ones list only partitions added (and those carrying
  acknowledgements) and name the ones dropped in ForgottenTopicsData
  (:meth:`ShareSession.plan`). A topic recreated under a new id is dropped
  and added again.
* :func:`build_share_fetch` and :func:`build_share_acknowledge` write the
  requests, with their acknowledgements as batches
  (:func:`~trafka.sdk.share_acks.acknowledgement_batches`); the driver hands
  the :class:`ShareRequest` back with its answer.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from trafka.codec import ApiKey, ErrorCode
from trafka.codec.messages import k78_share_fetch as sf
from trafka.codec.messages import k79_share_acknowledge as sa

from .consumer_types import TopicPartition
from .share_acks import AckUnit, acknowledgement_batches, merged_acks, renews

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "SESSION_ERRORS",
    "SHARE_SESSION_LIMIT_REACHED",
    "ShareRequest",
    "ShareSession",
    "build_share_acknowledge",
    "build_share_fetch",
    "next_epoch",
]

#: The share session epoch that opens a session (ShareFetch only).
INITIAL_EPOCH = 0
#: The share session epoch that closes a session.
FINAL_EPOCH = -1
INT32_MAX = 2**31 - 1

#: SHARE_SESSION_LIMIT_REACHED (Kafka 4.1; newer than the codec's error table).
SHARE_SESSION_LIMIT_REACHED = 133
#: Request-level errors after which the broker has no session for us: start a new one.
SESSION_ERRORS = frozenset(
    {
        ErrorCode.SHARE_SESSION_NOT_FOUND,
        ErrorCode.INVALID_SHARE_SESSION_EPOCH,
        SHARE_SESSION_LIMIT_REACHED,
    }
)


def next_epoch(epoch: int) -> int:
    """The session epoch after ``epoch``: -1 stays -1, 2**31-1 wraps to 1."""
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


class ShareSession:
    """The client's view of its share session with one broker.

    ``partitions`` is what the broker holds in the session (assuming the last
    request built was answered); ``epoch`` the epoch of the next request.
    """

    __slots__ = ("epoch", "node", "partitions")

    def __init__(self, node: int) -> None:
        self.node = node
        self.epoch = INITIAL_EPOCH
        self.partitions: dict[TopicPartition, uuid.UUID] = {}

    @property
    def is_open(self) -> bool:
        """Whether the broker holds the session (a ShareFetch opened it)."""
        return self.epoch > INITIAL_EPOCH

    def advance(self) -> None:
        self.epoch = next_epoch(self.epoch)

    def reset(self) -> None:
        """Start a new session with the next ShareFetch (every partition listed again)."""
        self.epoch = INITIAL_EPOCH
        self.partitions = {}

    def plan(
        self, wanted: Mapping[TopicPartition, uuid.UUID]
    ) -> tuple[list[TopicPartition], list[tuple[TopicPartition, uuid.UUID]]]:
        """The next ShareFetch's ``(added, forgotten)`` to make the session hold ``wanted``."""
        if self.epoch == INITIAL_EPOCH:
            added = list(wanted)
            forgotten: list[tuple[TopicPartition, uuid.UUID]] = []
        else:
            added = [tp for tp, tid in wanted.items() if self.partitions.get(tp) != tid]
            forgotten = [(tp, tid) for tp, tid in self.partitions.items() if wanted.get(tp) != tid]
        self.partitions = dict(wanted)
        return added, forgotten


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class ShareRequest:
    """A request for the driver to send to ``node``, and to hand back with its answer."""

    node: int
    api_key: int  # 78 ShareFetch, 79 ShareAcknowledge
    body: Any
    units: tuple[AckUnit, ...] = ()
    closing: bool = False

    @property
    def is_fetch(self) -> bool:
        return self.api_key == ApiKey.SHARE_FETCH


def build_share_fetch(
    node: int,
    session: ShareSession,
    wanted: dict[TopicPartition, uuid.UUID],
    carried: list[AckUnit],
    names: dict[uuid.UUID, str],
    *,
    group_id: str,
    member_id: str,
    max_wait_ms: int,
    min_bytes: int,
    max_bytes: int,
    max_records: int,
    acquire_mode: int = 0,
) -> ShareRequest:
    """The ShareFetch moving ``session`` to hold ``wanted`` and carrying the
    ``carried`` acknowledgements; the topic ids it names go into ``names``."""
    R = sf.ShareFetchRequest
    epoch = session.epoch
    added, forgotten = session.plan(wanted)
    acks = merged_acks(carried)
    topics: dict[uuid.UUID, list[Any]] = {}
    for tp in dict.fromkeys([*added, *acks]):
        tid = wanted[tp]
        names[tid] = tp.topic
        batches = [
            R.AcknowledgementBatch(first_offset=f, last_offset=last, acknowledge_types=list(t))
            for f, last, t in acknowledgement_batches(acks.get(tp, {}))
        ]
        topics.setdefault(tid, []).append(
            R.FetchPartition(partition_index=tp.partition, acknowledgement_batches=batches)
        )
    gone: dict[uuid.UUID, list[int]] = {}
    for tp, tid in forgotten:
        gone.setdefault(tid, []).append(tp.partition)
    body = R(
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=epoch,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        max_records=max_records,
        batch_size=max_records,
        share_acquire_mode=acquire_mode,
        topics=[R.FetchTopic(topic_id=t, partitions=ps) for t, ps in topics.items()],
        forgotten_topics_data=[
            R.ForgottenTopic(topic_id=t, partitions=sorted(ps)) for t, ps in gone.items()
        ],
    )
    return ShareRequest(node, ApiKey.SHARE_FETCH, body, tuple(carried))


def build_share_acknowledge(
    node: int,
    session: ShareSession,
    units: list[AckUnit],
    topic_id: Callable[[TopicPartition], uuid.UUID | None],
    *,
    group_id: str,
    member_id: str,
    closing: bool = False,
) -> ShareRequest:
    """The ShareAcknowledge carrying ``units`` in ``session`` (at epoch -1 when
    ``closing``); partitions ``topic_id`` knows no id for are left out."""
    R = sa.ShareAcknowledgeRequest
    topics: dict[uuid.UUID, list[Any]] = {}
    for tp, acks in merged_acks(units).items():
        tid = topic_id(tp)
        if tid is None:
            continue  # never fetched here: failed when answered
        topics.setdefault(tid, []).append(
            R.AcknowledgePartition(
                partition_index=tp.partition,
                acknowledgement_batches=[
                    R.AcknowledgementBatch(
                        first_offset=f, last_offset=last, acknowledge_types=list(t)
                    )
                    for f, last, t in acknowledgement_batches(acks)
                ],
            )
        )
    body = R(
        group_id=group_id,
        member_id=member_id,
        share_session_epoch=FINAL_EPOCH if closing else session.epoch,
        is_renew_ack=any(renews(u.acks) for u in units),
        topics=[R.AcknowledgeTopic(topic_id=t, partitions=ps) for t, ps in topics.items()],
    )
    return ShareRequest(node, ApiKey.SHARE_ACKNOWLEDGE, body, tuple(units), closing)
