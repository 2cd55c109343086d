"""A share consumer's group membership (KIP-932's share group protocol), without I/O.

The driver (:mod:`.share_consumer`) calls :meth:`ShareMembership.outputs` with
its clock and carries out what comes back: :class:`ShareGroupRequest` objects
to send (FindCoordinator, ShareGroupHeartbeat), :class:`AssignmentChanged`,
:class:`NeedMetadata` and :class:`Fatal`. It reports answers with
:meth:`~ShareMembership.on_response` / :meth:`~ShareMembership.on_failure` and
sleeps until :meth:`~ShareMembership.next_deadline`. The coordinator lookup
and the ``max.poll.interval.ms`` timer are the consumer group's
(:class:`~trafka.sdk.coordinator_lookup.CoordinatorLookup`,
:class:`~trafka.sdk.poll_timer.PollTimer`).

Rules and invariants:

* The coordinator is found with FindCoordinator (key type 0, the group) on any
  broker whenever the member has group work and knows none; a failure or
  NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE from the current one forgets it.
* The member names itself (KIP-1082): a random UUID, written as Kafka writes
  UUIDs (22 characters of URL-safe base64), because brokers parse the member
  id of ShareFetch as one. It keeps its id for its whole life, rejoins included.
* Joining: ShareGroupHeartbeat at epoch 0 with the subscribed topic names and
  the rack. Later heartbeats, every HeartbeatIntervalMs the coordinator sets,
  carry the epoch and send the topic names only when they changed since the
  last answered heartbeat (null otherwise) and the rack only after a failure
  (Kafka's client sends both again then). A subscription change sends a
  heartbeat at once. At most one heartbeat is in flight.
* There is no reconciliation: the coordinator's Assignment (topic ids) is the
  member's assignment as soon as it arrives (a null Assignment: unchanged).
  Ids are named through the client's metadata (:meth:`set_topic_names`); an
  unknown id asks for metadata and is named once it arrives.
* UNKNOWN_MEMBER_ID and FENCED_MEMBER_EPOCH: the assignment is gone and the
  member joins again at once at epoch 0, with the same id. Coordinator errors
  find the coordinator again; retriable ones back off; any other error
  (GROUP_AUTHORIZATION_FAILED, GROUP_MAX_SIZE_REACHED, INVALID_REQUEST, a
  coordinator without the API, ...) is fatal.
* Leaving sends epoch -1 (closing, unsubscribing, or an application that did
  not poll for ``max.poll.interval.ms``; it joins again at its next poll).
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import random
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from functools import partial
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError, UnsupportedVersionError
from trafka.codec.messages import k76_share_group_heartbeat as sgh

from ._backoff import backoff_delay
from .consumer_types import TopicPartition
from .coordinator_lookup import CoordinatorLookup
from .group_protocol import Action, classify
from .poll_timer import PollTimer

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "AssignmentChanged",
    "Fatal",
    "NeedMetadata",
    "ShareGroupRequest",
    "ShareMembership",
    "ShareMembershipConfig",
    "kafka_uuid",
]

JOIN_EPOCH = 0
LEAVE_EPOCH = -1


def kafka_uuid(value: uuid.UUID | None = None) -> str:
    """A UUID as Kafka's ``Uuid.toString()`` writes it: URL-safe base64, no padding."""
    raw = (value or uuid.uuid4()).bytes
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode("ascii")


class Phase(enum.Enum):
    IDLE = "idle"  # not subscribed (or waiting for the next poll after a poll timeout)
    JOINING = "joining"  # the epoch 0 heartbeat is due or out
    STABLE = "stable"
    FATAL = "fatal"
    CLOSED = "closed"


@dataclasses.dataclass(frozen=True, slots=True)
class ShareMembershipConfig:
    """The settings the state machine needs (seconds, not milliseconds)."""

    group_id: str
    rack: str | None = None
    request_timeout: float = 30.0
    retry_backoff: float = 0.1
    retry_backoff_max: float = 1.0
    max_poll_interval: float = 300.0


@dataclasses.dataclass(frozen=True, slots=True, eq=False)
class ShareGroupRequest:
    """A request to send: ``build(version)`` makes its body; ``coordinator`` is
    ``(node, host, port)``, or None for any broker; ``seq`` matches its answer."""

    api_key: int
    build: Callable[[int], Any]
    coordinator: tuple[int, str, int] | None
    timeout: float
    seq: int = 0
    epoch: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class AssignmentChanged:
    """The member's assignment is now ``partitions``."""

    partitions: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class NeedMetadata:
    """The assignment names topic ids the metadata does not know yet: refresh it."""


@dataclasses.dataclass(frozen=True, slots=True)
class Fatal:
    """The member cannot go on."""

    error: BaseException


Output = ShareGroupRequest | AssignmentChanged | NeedMetadata | Fatal

# Unchanged fields are left out of a heartbeat: None.
_UNCHANGED: Any = None


def _heartbeat_body(version: int, **fields: Any) -> Any:
    return sgh.ShareGroupHeartbeatRequest(**fields)


class ShareMembership:
    """The share group membership state machine of one share consumer.

    Args:
        config: see :class:`ShareMembershipConfig`.
        now: the driver's clock (seconds).
        member_id: the member's id (default: a new one, see :func:`kafka_uuid`).
        rng: for backoff jitter.
    """

    def __init__(
        self,
        config: ShareMembershipConfig,
        now: float,
        *,
        member_id: str | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.config = config
        self.member_id = member_id or kafka_uuid()
        self.epoch = JOIN_EPOCH
        self.phase = Phase.IDLE
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.fatal: BaseException | None = None
        self.heartbeat_interval: float | None = None
        self.joins = 0  # successful joins (statistics, tests)
        self._rng = rng or random.Random()
        self._events: deque[Output] = deque()
        self.lookup = CoordinatorLookup(config, now, self._rng)
        self.polls = PollTimer(config.max_poll_interval, now)
        self._topics: tuple[str, ...] = ()
        self._names: dict[uuid.UUID, str] = {}
        self._target: dict[uuid.UUID, frozenset[int]] = {}
        self._asked_metadata = False
        self._seq = 0
        self._in_flight: int | None = None  # seq of the heartbeat in flight
        self._failures = 0
        self._next_heartbeat = now
        self._sent_topics: tuple[str, ...] | None = None
        self._sent_rack = False
        self._pending_topics: tuple[str, ...] | None = None

    # -- inputs ---------------------------------------------------------------------------

    def set_subscription(self, topics: Iterable[str], now: float) -> None:
        """The topics subscribed to now (empty: unsubscribe, leaving the group)."""
        topics = tuple(sorted(set(topics)))
        if topics == self._topics:
            return
        self._topics = topics
        if not topics:
            if self.phase in (Phase.JOINING, Phase.STABLE):
                self._leave_now(now)
            return
        if self.phase is Phase.IDLE and not self.polls.awaiting_poll:
            self._start_join(now)
        elif self.phase is Phase.STABLE:
            self._next_heartbeat = now  # tell the coordinator at once

    def set_topic_names(self, ids: Mapping[uuid.UUID, str]) -> None:
        """Topic names by id, from the client's metadata."""
        if ids != self._names:
            self._names = dict(ids)
            self._asked_metadata = False
            if self._target:
                self._apply_target()

    def poll_started(self, now: float) -> bool:
        """The application entered a poll. True: it may rejoin now (wake the driver)."""
        if self.polls.started(now):
            if self._topics and self.phase is Phase.IDLE:
                self._start_join(now)
            return True
        return False

    def poll_ended(self, now: float) -> None:
        """The application left a poll; ``max.poll.interval.ms`` counts from here."""
        self.polls.ended(now)

    @property
    def heartbeat_in_flight(self) -> bool:
        """A heartbeat has been handed out and has neither an answer nor a failure yet."""
        return self._in_flight is not None

    def leave(self, now: float) -> ShareGroupRequest | None:
        """Stop being a member for good; the heartbeat (epoch -1) to send, if any.

        Send it only once :attr:`heartbeat_in_flight` is false, as Kafka's client
        does: a heartbeat still on its way could otherwise reach the coordinator
        after the leave and be answered as from an unknown member."""
        request = self._leave_request()
        self._lose()
        self.phase = Phase.CLOSED
        return request

    # -- what to do now -------------------------------------------------------------------

    def outputs(self, now: float) -> list[Output]:
        """Requests to send and events to handle now, in order."""
        if self.phase in (Phase.JOINING, Phase.STABLE):
            self._check_poll(now)
        if self.phase in (Phase.JOINING, Phase.STABLE):
            self._maybe_find_coordinator(now)
            self._maybe_heartbeat(now)
        out = list(self._events)
        self._events.clear()
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`outputs` may have something new without any input (None: never)."""
        if self.phase not in (Phase.JOINING, Phase.STABLE):
            return None
        times = [t for t in (self.lookup.deadline(), self.polls.deadline()) if t is not None]
        if self.coordinator is not None and self._in_flight is None:
            times.append(self._next_heartbeat)
        return min(times) if times else None

    # -- answers --------------------------------------------------------------------------

    def on_response(self, request: ShareGroupRequest, version: int, body: Any, now: float) -> None:
        """The answer to ``request`` (decoded at ``version``)."""
        if request.api_key == ApiKey.FIND_COORDINATOR:
            self._on_find(version, body, now)
        elif request.epoch != LEAVE_EPOCH:
            self._on_heartbeat(request, body, now)

    def on_failure(self, request: ShareGroupRequest, error: BaseException, now: float) -> None:
        """``request`` got no answer (connection lost, timeout, no common version)."""
        if request.api_key == ApiKey.FIND_COORDINATOR:
            self.lookup.on_failure(now, error)
            return
        if request.epoch == LEAVE_EPOCH or request.seq != self._in_flight:
            return
        self._in_flight = None
        self._sent_rack = False
        self._sent_topics = None
        if isinstance(error, UnsupportedVersionError):
            self._fail(
                KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"the coordinator of share group {self.config.group_id!r} does not serve "
                    "ShareGroupHeartbeat v1: share groups (KIP-932) need Kafka 4.1 or later, "
                    "with share groups enabled",
                )
            )
            return
        self._lost_coordinator(request.coordinator, now)
        self._failures += 1
        self._next_heartbeat = now + self._backoff()

    # -- coordinator ----------------------------------------------------------------------

    @property
    def coordinator(self) -> tuple[int, str, int] | None:
        """The share group's coordinator, ``(node_id, host, port)``; None while it is looked for."""
        return self.lookup.coordinator

    def _maybe_find_coordinator(self, now: float) -> None:
        build = self.lookup.start(now)
        if build is not None:
            request = ShareGroupRequest(
                ApiKey.FIND_COORDINATOR, build, None, self.config.request_timeout
            )
            self._events.append(request)

    def _on_find(self, version: int, body: Any, now: float) -> None:
        code = self.lookup.on_answer(version, body, now)
        if code:
            self._fail(
                KafkaError(code, f"FindCoordinator for share group {self.config.group_id!r}")
            )

    def _lost_coordinator(self, which: tuple[int, str, int] | None, now: float) -> None:
        self.lookup.lost(which, now)

    # -- heartbeats -----------------------------------------------------------------------

    def _start_join(self, now: float) -> None:
        self.phase = Phase.JOINING
        self.epoch = JOIN_EPOCH
        self._sent_topics = None
        self._sent_rack = False
        self._next_heartbeat = now

    def _maybe_heartbeat(self, now: float) -> None:
        if self.coordinator is None or self._in_flight is not None or now < self._next_heartbeat:
            return
        joining = self.phase is Phase.JOINING
        topics = self._topics if joining or self._topics != self._sent_topics else _UNCHANGED
        rack = self.config.rack if not self._sent_rack else _UNCHANGED
        self._seq += 1
        self._in_flight = self._seq
        self._pending_topics = topics
        self._events.append(
            self._request(self.epoch, subscribed_topic_names=_listed(topics), rack_id=rack)
        )

    def _request(self, epoch: int, **fields: Any) -> ShareGroupRequest:
        assert self.coordinator is not None
        return ShareGroupRequest(
            ApiKey.SHARE_GROUP_HEARTBEAT,
            partial(
                _heartbeat_body,
                group_id=self.config.group_id,
                member_id=self.member_id,
                member_epoch=epoch,
                **fields,
            ),
            self.coordinator,
            self.config.request_timeout,
            self._seq,
            epoch,
        )

    def _on_heartbeat(self, request: ShareGroupRequest, body: Any, now: float) -> None:
        if request.seq != self._in_flight:
            return  # overtaken: the member left, was fenced or failed meanwhile
        self._in_flight = None
        if self.phase not in (Phase.JOINING, Phase.STABLE):
            return
        code = body.error_code
        if code:
            self._on_error(code, body.error_message, request, now)
            return
        self._failures = 0
        if self._pending_topics is not None:
            self._sent_topics = self._pending_topics
        self._sent_rack = True
        if self.phase is Phase.JOINING:
            self.phase = Phase.STABLE
            self.joins += 1
        self.epoch = body.member_epoch
        if body.heartbeat_interval_ms > 0:
            self.heartbeat_interval = body.heartbeat_interval_ms / 1000
        self._next_heartbeat = now + (self.heartbeat_interval or self.config.retry_backoff_max)
        if body.assignment is not None:
            self._target = {
                t.topic_id: frozenset(t.partitions) for t in body.assignment.topic_partitions
            }
            self._asked_metadata = False
            self._apply_target()
        if self._topics != self._sent_topics:
            self._next_heartbeat = now

    def _on_error(
        self, code: int, message: str | None, request: ShareGroupRequest, now: float
    ) -> None:
        self._sent_topics = None
        self._sent_rack = False
        what = f"ShareGroupHeartbeat {self.config.group_id!r}" + (f": {message}" if message else "")
        if code in (ErrorCode.UNKNOWN_MEMBER_ID, ErrorCode.FENCED_MEMBER_EPOCH):
            again = self.phase is Phase.JOINING  # refused while joining: do not hammer
            self._lose()
            self._start_join(now)
            if again:
                self._failures += 1
                self._next_heartbeat = now + self._backoff()
            return
        action = classify(code)
        if action is Action.REDISCOVER:
            self._lost_coordinator(request.coordinator, now)
            self._next_heartbeat = now
        elif action is Action.RETRY:
            self._failures += 1
            self._next_heartbeat = now + self._backoff()
        else:
            self._fail(KafkaError(code, what))

    def _backoff(self) -> float:
        cfg = self.config
        return backoff_delay(cfg.retry_backoff, cfg.retry_backoff_max, self._failures, self._rng)

    # -- assignment -----------------------------------------------------------------------

    def _apply_target(self) -> None:
        named: set[TopicPartition] = set()
        unnamed = False
        for tid, partitions in self._target.items():
            name = self._names.get(tid)
            if name is None:
                unnamed = True
                continue
            named.update(TopicPartition(name, p) for p in partitions)
        if unnamed and not self._asked_metadata:
            self._asked_metadata = True
            self._events.append(NeedMetadata())
        self._set_assignment(frozenset(named))

    def _set_assignment(self, partitions: frozenset[TopicPartition]) -> None:
        if partitions != self.assignment:
            self.assignment = partitions
            self._events.append(AssignmentChanged(partitions))

    def _lose(self) -> None:
        self._target = {}
        self._set_assignment(frozenset())

    # -- leaving --------------------------------------------------------------------------

    def _leave_request(self) -> ShareGroupRequest | None:
        joined = self.phase is Phase.STABLE or (
            self.phase is Phase.JOINING and self._in_flight is not None
        )
        if not joined or self.coordinator is None:
            return None
        self._seq += 1
        return self._request(LEAVE_EPOCH)

    def _leave_now(self, now: float) -> None:
        request = self._leave_request()
        if request is not None:
            self._events.append(request)
        self._in_flight = None
        self._lose()
        self.phase = Phase.IDLE
        self.epoch = JOIN_EPOCH

    def _check_poll(self, now: float) -> None:
        if not self.polls.expired(now):
            return
        # As Kafka's client: a member whose application stopped polling leaves;
        # its next poll joins again.
        self._leave_now(now)
        self.polls.awaiting_poll = True

    def _fail(self, error: BaseException) -> None:
        self.fatal = error
        self.phase = Phase.FATAL
        self._in_flight = None
        self._lose()
        self._events.append(Fatal(error))


def _listed(topics: tuple[str, ...] | None) -> list[str] | None:
    return None if topics is None else list(topics)
