"""The consumer's side of incremental fetch sessions (KIP-227), without I/O.

One :class:`FetchSession` per broker, as Java's ``FetchSessionHandler``.

Rules and invariants:

* The session is described by ``(session_id, epoch)``, the metadata the next
  request carries. It starts at *initial* ``(0, 0)``: a full request that asks
  the broker for a session. A full answer with a non-zero ``session_id``
  creates one: the next request is incremental with epoch 1, and each
  accepted incremental answer moves the epoch on (after 2**31-1 comes 1, as
  Java's ``FetchMetadata.nextEpoch``). A full answer with ``session_id`` 0
  means the broker made no session: the next request is full again (a broker
  without sessions always gets full fetches).
* ``partitions`` holds, for each partition in the session, what was last sent
  for it (topic id, fetch offset, log start offset, max bytes, leader epoch):
  the broker fetches every session partition at each request with those
  values, whether or not the request names it. A full request sends every
  wanted partition and replaces the session's partitions with them. An
  incremental request sends only partitions that are new or whose values
  changed (an offset moved after records arrived), and *forgets* session
  partitions that are not wanted this time (unassigned, paused, leader moved,
  or with buffered data not yet consumed: Java removes them from the session
  too, so the broker stops reading them). After building, the session's
  partitions are exactly the wanted ones, so a request asks for every session
  partition at the offset recorded here.
* A partition whose topic id changed (both ids known) is *replaced*: sent with
  its new id and, from Fetch v13, forgotten under its old id.
* Answers: a full answer must hold exactly the session's partitions (else the
  next request starts over at initial); an incremental answer may leave
  partitions out (nothing new for them) but must not name a partition or
  topic id outside the session (else the session is closed and a new one
  asked for). Partitions left out keep their positions and watermarks.
* Errors: FETCH_SESSION_ID_NOT_FOUND starts over at initial ``(0, 0)``; any
  other request-level error (INVALID_FETCH_SESSION_EPOCH,
  FETCH_SESSION_TOPIC_ID_ERROR...) and a failed request (connection lost,
  timeout) keep the session id and ask for a new session with epoch 0 (the
  broker closes the old one and may create another), as Java's
  ``nextCloseExistingAttemptNew``.
* Closing: :meth:`FetchSession.close_plan` is a full request with no partitions
  and epoch -1 for an open session, which tells the broker to drop it (Java's
  consumer sends it on close); answers to fetches still in flight then are
  not applied.
* With incremental sessions off (``enable.incremental.fetch.sessions=false``)
  every request is full and sessionless, ``(0, -1)``, as before KIP-227.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from trafka.codec import ErrorCode
from trafka.codec.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "SESSION_ERRORS",
    "FetchPlan",
    "FetchSession",
    "SessionPartition",
    "next_epoch",
]

log = logging.getLogger("trafka.sdk.fetch_sessions")

_NULL_UUID = uuid.UUID(int=0)

#: Request-level errors about the session itself.
SESSION_ERRORS = frozenset(
    {
        ErrorCode.FETCH_SESSION_ID_NOT_FOUND,
        ErrorCode.INVALID_FETCH_SESSION_EPOCH,
        ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR,
    }
)


class SessionPartition(NamedTuple):
    """What a request asked of a partition (compared to tell what changed)."""

    topic_id: uuid.UUID
    fetch_offset: int
    log_start_offset: int
    max_bytes: int
    leader_epoch: int


@dataclasses.dataclass(frozen=True, slots=True)
class FetchPlan:
    """One Fetch request of a session.

    Attributes:
        session_id, epoch: the request's session metadata.
        to_send: the partitions the request names (all of them when full).
        to_forget: ``(partition, topic id)`` leaving the session.
        to_replace: ``(partition, old topic id)`` of partitions whose topic id
            changed (forgotten under the old id from Fetch v13).
        partitions: every partition the request fetches (named or implied).
        use_topic_ids: every partition involved has a topic id (Fetch v13+ possible).
    """

    session_id: int
    epoch: int
    to_send: dict[Any, SessionPartition]
    to_forget: list[tuple[Any, uuid.UUID]]
    to_replace: list[tuple[Any, uuid.UUID]]
    partitions: dict[Any, SessionPartition]
    use_topic_ids: bool

    @property
    def full(self) -> bool:
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)


class FetchSession:
    """The fetch session with one broker (see the module's rules).

    Args:
        node_id: the broker.
        incremental: ask for sessions; False sends sessionless full fetches ``(0, -1)``.
    """

    def __init__(self, node_id: int, *, incremental: bool = True) -> None:
        self.node_id = node_id
        self.incremental = incremental
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH if incremental else FINAL_EPOCH
        #: Partitions in the session, with what was last sent for each (in order).
        self.partitions: dict[Any, SessionPartition] = {}
        #: Topic ids of the session's partitions -> names (empty unless all have ids).
        self.topic_names: dict[uuid.UUID, str] = {}
        #: Requests built (statistics).
        self.full_fetches = 0
        self.incremental_fetches = 0
        #: Set by :meth:`close_plan`: answers still in flight are not applied.
        self.closed = False

    @property
    def is_full(self) -> bool:
        """Whether the next request is a full one."""
        return self.epoch in (INITIAL_EPOCH, FINAL_EPOCH)

    def _initial(self) -> None:
        self.session_id = INVALID_SESSION_ID
        self.epoch = INITIAL_EPOCH

    def _close_existing_attempt_new(self) -> None:
        self.epoch = INITIAL_EPOCH

    # -- requests --------------------------------------------------------------------------

    def build(self, wanted: Mapping[Any, SessionPartition]) -> FetchPlan:
        """The next request, fetching exactly ``wanted`` (a topic-partition ->
        what to ask); the session's partitions become ``wanted``."""
        names: dict[uuid.UUID, str] = {}
        use_ids = True
        for tp, data in wanted.items():
            if data.topic_id == _NULL_UUID:
                use_ids = False
            else:
                names.setdefault(data.topic_id, tp.topic)
        if self.is_full:
            self.partitions = dict(wanted)
            self.topic_names = names if use_ids else {}
            self.full_fetches += 1
            return FetchPlan(
                self.session_id,
                self.epoch,
                dict(wanted),
                [],
                [],
                dict(self.partitions),
                use_ids,
            )
        added: dict[Any, SessionPartition] = {}
        changed: dict[Any, SessionPartition] = {}
        forget: list[tuple[Any, uuid.UUID]] = []
        replace: list[tuple[Any, uuid.UUID]] = []
        kept: dict[Any, SessionPartition] = {}
        for tp, prev in self.partitions.items():
            if tp not in wanted:
                forget.append((tp, prev.topic_id))
                if prev.topic_id == _NULL_UUID:
                    use_ids = False  # forgetting it needs its name: Fetch v12
                continue
            kept[tp] = wanted[tp]
            data = wanted[tp]
            if (
                prev.topic_id != data.topic_id
                and prev.topic_id != _NULL_UUID
                and data.topic_id != _NULL_UUID
            ):
                replace.append((tp, prev.topic_id))
                changed[tp] = data
            elif prev != data:
                changed[tp] = data
        for tp, data in wanted.items():
            if tp not in kept:
                added[tp] = data
        # New partitions first, then the changed ones (Java's order).
        self.partitions = {**kept, **added}
        self.topic_names = names if use_ids else {}
        self.incremental_fetches += 1
        return FetchPlan(
            self.session_id,
            self.epoch,
            {**added, **changed},
            forget,
            replace,
            dict(self.partitions),
            use_ids,
        )

    def forgets_nameless(self, wanted: Iterable[Any]) -> bool:
        """Whether an incremental request fetching ``wanted`` would forget a
        partition without a topic id (it must then name topics: Fetch v12)."""
        if self.is_full:
            return False
        keep = set(wanted)
        return any(p.topic_id == _NULL_UUID for tp, p in self.partitions.items() if tp not in keep)

    def close_plan(self) -> FetchPlan | None:
        """The request that closes the session (epoch -1, no partitions), or
        None without one."""
        if not self.incremental or self.session_id == INVALID_SESSION_ID:
            return None
        plan = FetchPlan(self.session_id, FINAL_EPOCH, {}, [], [], {}, True)
        self.closed = True
        self.partitions = {}
        self.topic_names = {}
        self.epoch = FINAL_EPOCH
        return plan

    # -- answers ---------------------------------------------------------------------------

    def response_partitions(self, response: Any, version: int) -> tuple[set[Any], set[uuid.UUID]]:
        """The partitions an answer names (from v13 only topics whose ids the
        session knows are resolved) and the topic ids it carries."""
        tps: set[Any] = set()
        ids: set[uuid.UUID] = set()
        for t in response.responses:
            if version >= 13:
                ids.add(t.topic_id)
                name = self.topic_names.get(t.topic_id)
                if name is None:
                    continue
            else:
                name = t.topic
            for p in t.partitions:
                tps.add((name, p.partition_index))  # equal to a TopicPartition
        return tps, ids

    def verify_full(self, tps: set[Any], ids: set[uuid.UUID], version: int) -> str | None:
        """None when a full answer names exactly the session's partitions, else the problem."""
        problems = []
        omitted = [tp for tp in self.partitions if tp not in tps]
        extra = [tp for tp in tps if tp not in self.partitions]
        extra_ids = [i for i in ids if i not in self.topic_names] if version >= 13 else []
        if omitted:
            problems.append(f"omitted partitions {sorted(omitted)}")
        if extra:
            problems.append(f"extra partitions {sorted(extra)}")
        if extra_ids:
            problems.append(f"unknown topic ids {sorted(map(str, extra_ids))}")
        return "; ".join(problems) or None

    def verify_incremental(self, tps: set[Any], ids: set[uuid.UUID], version: int) -> str | None:
        """None when an incremental answer names only session partitions, else the problem."""
        problems = []
        extra = [tp for tp in tps if tp not in self.partitions]
        extra_ids = [i for i in ids if i not in self.topic_names] if version >= 13 else []
        if extra:
            problems.append(f"extra partitions {sorted(extra)}")
        if extra_ids:
            problems.append(f"unknown topic ids {sorted(map(str, extra_ids))}")
        return "; ".join(problems) or None

    def handle_response(self, response: Any, version: int) -> tuple[bool, str | None]:
        """Move the session on after an answer to the last built request.

        Returns:
            ``(usable, problem)``: whether the answer's partition data may be
            applied, and why not (None when usable, or when a request-level
            error code says it).
        """
        if not self.incremental:
            return True, None
        if self.closed:
            return False, "the session is closed"
        code = getattr(response, "error_code", 0)
        if code:
            log.info(
                "node %s could not serve fetch session (%s, %s): %s",
                self.node_id,
                self.session_id,
                self.epoch,
                ErrorCode(code).name if code in ErrorCode._value2member_map_ else code,
            )
            if code == ErrorCode.FETCH_SESSION_ID_NOT_FOUND:
                self._initial()
            else:
                self._close_existing_attempt_new()
            return False, None
        tps, ids = self.response_partitions(response, version)
        session_id = getattr(response, "session_id", 0)
        if self.is_full:
            if not tps and getattr(response, "throttle_time_ms", 0) > 0:
                # KIP-219: an empty full answer asks the client to wait out a throttle.
                self._initial()
                return False, "throttled"
            problem = self.verify_full(tps, ids, version)
            if problem is not None:
                log.info("node %s: %s", self.node_id, problem)
                self._initial()
                return False, f"invalid full fetch answer: {problem}"
            if session_id == INVALID_SESSION_ID:
                self._initial()
            else:
                self.session_id = session_id
                self.epoch = next_epoch(INITIAL_EPOCH)
            return True, None
        problem = self.verify_incremental(tps, ids, version)
        if problem is not None:
            log.info("node %s: %s", self.node_id, problem)
            self._close_existing_attempt_new()
            return False, f"invalid incremental fetch answer: {problem}"
        if session_id == INVALID_SESSION_ID:
            self._initial()  # the broker closed the session
        else:
            self.epoch = next_epoch(self.epoch)
        return True, None

    def handle_error(self) -> None:
        """The request failed (no answer): close the session at the next request
        and ask for a new one."""
        if self.incremental and not self.closed:
            self._close_existing_attempt_new()
