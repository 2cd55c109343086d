"""What the consumer group state machines take and give, without I/O.

The classic :class:`~trafka.sdk.membership.Membership` and the consumer group
protocol's :class:`~trafka.sdk.consumer_membership.ConsumerMembership` are
driven the same way (:class:`~trafka.sdk.group.GroupDriver`), so they share
these types: their settings (:class:`MembershipConfig`), their phases, the
requests they hand out (:class:`GroupRequest`, one :class:`Kind` per API) and
the events for the consumer (:class:`Revoke`, :class:`Assign`, :class:`Lose`,
:class:`NeedMetadata`, :class:`AutoCommitDue`, :class:`CommitDone`,
:class:`Fatal`), and the rebalance latency they measure. ``trafka.sdk.membership``
re-exports every name.

Rules: every type here is data (frozen where it crosses to the driver); none
reads a clock, sends or decides anything. A request's body is built only when
the driver knows the version (``GroupRequest.build(version)``).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Callable, Mapping
from typing import Any

from trafka.codec import ApiKey

from .consumer_types import TopicPartition
from .statistics import Interval, Windowed

__all__ = [
    "Assign",
    "AutoCommitDue",
    "CommitDone",
    "Fatal",
    "GroupRequest",
    "Kind",
    "Lose",
    "MembershipConfig",
    "NeedMetadata",
    "Output",
    "Phase",
    "QueuedCommit",
    "RebalanceLatency",
    "Revoke",
]


class Phase(enum.Enum):
    PREPARING = "preparing"
    JOINING = "joining"
    ASSIGNING = "assigning"
    SYNCING = "syncing"
    STABLE = "stable"
    CLOSED = "closed"


class Kind(enum.Enum):
    FIND_COORDINATOR = ApiKey.FIND_COORDINATOR
    OFFSET_COMMIT = ApiKey.OFFSET_COMMIT
    JOIN = ApiKey.JOIN_GROUP
    HEARTBEAT = ApiKey.HEARTBEAT
    LEAVE = ApiKey.LEAVE_GROUP
    SYNC = ApiKey.SYNC_GROUP
    CONSUMER_HEARTBEAT = (
        ApiKey.CONSUMER_GROUP_HEARTBEAT
    )  # the consumer group protocol (KIP-848): join, heartbeat, leave


@dataclasses.dataclass(frozen=True, slots=True)
class MembershipConfig:
    """The settings the state machine needs (seconds, not milliseconds).

    ``managed=False`` is a consumer that only commits (``assign()`` with a
    ``group.id``): no joining, generation -1.
    """

    group_id: str
    instance_id: str | None = None
    session_timeout: float = 45.0
    heartbeat_interval: float = 3.0
    max_poll_interval: float = 300.0
    request_timeout: float = 30.0
    retry_backoff: float = 0.1
    retry_backoff_max: float = 1.0
    auto_commit: bool = True
    auto_commit_interval: float = 5.0
    commit_timeout: float = 60.0
    assignors: tuple[str, ...] = ("range", "cooperative-sticky")
    rack: str | None = None
    managed: bool = True


# -- outputs --------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class GroupRequest:
    """A request for the driver to send.

    Attributes:
        kind: which API.
        build: ``build(version) -> request body`` for the negotiated version.
        coordinator: ``(node_id, host, port)`` to send it to; ``None`` means any broker.
        timeout: seconds to wait for the response.
        generation: the generation it was sent in (stale answers are ignored).
        commit: the queued commit it carries (OffsetCommit only).
    """

    kind: Kind
    build: Callable[[int], Any]
    coordinator: tuple[int, str, int] | None
    timeout: float
    generation: int = -1
    commit: QueuedCommit | None = None

    @property
    def api_key(self) -> int:
        return self.kind.value


@dataclasses.dataclass(frozen=True, slots=True)
class Revoke:
    """Commit consumed positions (with auto-commit), run the listener, drop the
    partitions, then call :meth:`~trafka.sdk.membership.Membership.revoke_done`."""

    partitions: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class Assign:
    """Start fetching these partitions and run the listener's ``on_partitions_assigned``."""

    partitions: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class Lose:
    """The partitions are gone without a commit (``on_partitions_lost``)."""

    partitions: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class NeedMetadata:
    """The leader needs partition counts for these topics: call
    :meth:`~trafka.sdk.membership.Membership.assignment_metadata`."""

    topics: frozenset[str]


@dataclasses.dataclass(frozen=True, slots=True)
class AutoCommitDue:
    """Time to commit the consumed positions (:meth:`~trafka.sdk.membership.Membership.commit`)."""


@dataclasses.dataclass(frozen=True, slots=True)
class CommitDone:
    """A commit finished: ``error`` is None on success."""

    offsets: Mapping[TopicPartition, int]
    cookie: Any
    error: BaseException | None


@dataclasses.dataclass(frozen=True, slots=True)
class Fatal:
    """The member cannot go on (e.g. FENCED_INSTANCE_ID)."""

    error: BaseException


Output = GroupRequest | Revoke | Assign | Lose | NeedMetadata | AutoCommitDue | CommitDone | Fatal


@dataclasses.dataclass(slots=True)
class RebalanceLatency(Interval):
    """How long the member's rebalances took (seconds), as Java's consumer
    coordinator measures its ``rebalance-latency``: :meth:`start` at the first
    step of a rebalance (later calls do nothing until it ends), :meth:`end` once
    the member has its new assignment, which adds the time taken. ``window``
    holds each completed rebalance's latency for Java's windowed
    ``rebalance-latency-avg``/``-max`` and ``rebalance-rate-per-hour``;
    ``ended`` is when the last one ended (None before)."""

    started: float | None = None
    ended: float | None = None
    window: Windowed = dataclasses.field(default_factory=Windowed)

    def start(self, now: float) -> None:
        if self.started is None:
            self.started = now

    def end(self, now: float) -> None:
        if self.started is None:
            return
        took = max(0.0, now - self.started)
        self.started = None
        self.add(took)
        self.window.record(now, took)
        self.ended = now


@dataclasses.dataclass(slots=True, eq=False)
class QueuedCommit:
    """A commit in the queue (:class:`~trafka.sdk.group_commits.CommitQueue`):
    what it commits, the caller's cookie, its deadline, its attempts so far and,
    while backing off, when it may go again."""

    offsets: dict[TopicPartition, int]
    cookie: Any
    deadline: float
    attempts: int = 0
    retry_at: float = -math.inf  # not retrying (any clock reading is after it)
