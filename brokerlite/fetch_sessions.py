"""Incremental fetch sessions (KIP-227): the broker's session cache and its rules.

A consumer that fetches the same partitions again and again may ask the broker
to remember them: the broker keeps a *session* (the partitions and their fetch
positions), and later requests name only what changed while answers carry only
the partitions with something new. This module is the I/O-free bookkeeping;
the Fetch handler (``handlers/k01_fetch.py``) reads the logs.

Rules (Kafka's ``FetchManager.newContext``, ``FetchSessionCache``, ``FetchSession``
and the fetch contexts of ``FetchContext.java``):

* A request's ``(session_id, session_epoch)`` chooses what happens:

  - ``(0, -1)``: a sessionless full fetch; the answer carries session 0.
  - ``(0, 0)``: a full fetch; once its answer is ready a session is created
    from it when the cache has room (or can evict one, below), and the answer
    carries the new id, else 0. An id is random, positive, never 0 and never
    one of a live session.
  - ``(X, 0)`` and ``(X, -1)``: session X (if any) is closed first, then as
    ``(0, 0)`` and ``(0, -1)``.
  - ``(X, n)`` with any other ``n``: an incremental fetch on X.
    FETCH_SESSION_ID_NOT_FOUND when X is not in the cache,
    INVALID_FETCH_SESSION_EPOCH unless ``n`` is the session's expected epoch,
    FETCH_SESSION_TOPIC_ID_ERROR when the session was made with topic ids (v13+)
    and the request has none, or the other way round. These answers have no
    partitions and session 0. Otherwise the request's partitions are added to
    the session or update it (fetch offset, log start offset, max bytes, leader
    epoch), the forgotten ones are removed, and the epoch moves on
    (:func:`next_epoch`: 1, 2, ... 2147483647, then 1). A session left with no
    partition is closed and the fetch is answered as a sessionless one.

* An incremental answer lists only the session's partitions that have news
  since the last answer to the session: records, or an error, or a high
  watermark, last stable offset or log start offset different from the one
  last sent. An error also forgets the high watermark sent, so that the
  partition is sent again once the error is gone. Partitions that returned
  records move to the end of the session's order, so that with a tight
  ``max_bytes`` every partition gets its turn.

* A parked (long-poll) incremental fetch checks, when it is answered, that no
  other request moved the session on meanwhile; if one did, the answer is
  INVALID_FETCH_SESSION_EPOCH with the session's id and no partitions.

* The cache holds at most ``max_entries`` sessions
  (``max.incremental.fetch.session.cache.slots``). A new session may evict an
  existing one when the cache is full: the least recently used one if it has
  not been used for ``eviction_ms`` (Kafka's fixed 120 s); else the smallest
  session (fewest partitions) among those created more than ``eviction_ms``
  ago, and only if the new one has more partitions (or is privileged: a
  follower broker's, in cluster mode, and the victim is not). Otherwise no
  session is created.

* Sessions belong to no connection: a client may reconnect and go on. They
  are not dropped when a topic is deleted (Kafka's cache does not watch
  topics): the partitions stay, are answered with their error on every fetch,
  until the client forgets them.
"""

from __future__ import annotations

import collections
import random
import uuid
from collections.abc import Callable, Iterable
from typing import TypeAlias

from trafka.codec.errors import ErrorCode
from trafka.codec.fetch_sessions import FINAL_EPOCH, INITIAL_EPOCH, INVALID_SESSION_ID, next_epoch

__all__ = [
    "FINAL_EPOCH",
    "INITIAL_EPOCH",
    "INVALID_SESSION_ID",
    "CachedPartition",
    "FetchManager",
    "FetchSession",
    "FetchSessionCache",
    "FullContext",
    "IncrementalContext",
    "SessionErrorContext",
    "SessionlessContext",
    "next_epoch",
]

#: Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS, not a setting there either.
MIN_EVICTION_MS = 120_000

# A partition's key in a session: (topic id, partition) for sessions made with
# topic ids, (topic name, partition) otherwise; as Kafka's CachedPartition equality.
PartitionKey: TypeAlias = tuple[uuid.UUID | str, int]


class CachedPartition:
    """One partition of a fetch: what the fetcher asked for, and (in a session)
    what it was last told.

    ``topic`` is None for a topic id this broker did not know when the
    partition was added; it is looked up again on each fetch.
    """

    __slots__ = (
        "current_leader_epoch",
        "fetch_offset",
        "fetcher_log_start_offset",
        "high_watermark",
        "last_stable_offset",
        "local_log_start_offset",
        "max_bytes",
        "partition",
        "topic",
        "topic_id",
    )

    def __init__(
        self,
        topic: str | None,
        topic_id: uuid.UUID,
        partition: int,
        fetch_offset: int,
        max_bytes: int,
        current_leader_epoch: int = -1,
        fetcher_log_start_offset: int = -1,
    ) -> None:
        self.topic = topic
        self.topic_id = topic_id
        self.partition = partition
        self.fetch_offset = fetch_offset
        self.max_bytes = max_bytes
        self.current_leader_epoch = current_leader_epoch
        self.fetcher_log_start_offset = fetcher_log_start_offset
        # What the fetcher was last told (-1: nothing yet, or an error since).
        self.high_watermark = -1
        self.last_stable_offset = -1
        self.local_log_start_offset = -1

    def key(self, uses_topic_ids: bool) -> PartitionKey:
        if uses_topic_ids:
            return (self.topic_id, self.partition)
        return (self.topic or "", self.partition)

    def update_request(self, other: CachedPartition) -> None:
        """Take the request parameters of ``other`` (the same partition, asked again)."""
        self.fetch_offset = other.fetch_offset
        self.max_bytes = other.max_bytes
        self.current_leader_epoch = other.current_leader_epoch
        self.fetcher_log_start_offset = other.fetcher_log_start_offset

    def remember(
        self, error_code: int, high_watermark: int, last_stable_offset: int, log_start_offset: int
    ) -> None:
        """Record what an answer told the fetcher about this partition."""
        self.high_watermark = -1 if error_code else high_watermark
        self.last_stable_offset = last_stable_offset
        self.local_log_start_offset = log_start_offset

    def has_news(
        self,
        records_size: int,
        error_code: int,
        high_watermark: int,
        last_stable_offset: int,
        log_start_offset: int,
    ) -> bool:
        """Whether an incremental answer must include this partition."""
        return bool(
            records_size
            or error_code
            or high_watermark != self.high_watermark
            or last_stable_offset != self.last_stable_offset
            or log_start_offset != self.local_log_start_offset
        )

    def __repr__(self) -> str:
        return (
            f"CachedPartition({self.topic!r}, {self.topic_id}, {self.partition}, "
            f"fetch_offset={self.fetch_offset}, high_watermark={self.high_watermark})"
        )


class FetchSession:
    """One incremental fetch session: its partitions, in fetch order, and its epoch."""

    __slots__ = (
        "cached_size",
        "creation_ms",
        "epoch",
        "evictable_by_all",
        "evictable_by_privileged",
        "id",
        "last_used_ms",
        "partitions",
        "privileged",
        "uses_topic_ids",
    )

    def __init__(
        self,
        session_id: int,
        privileged: bool,
        partitions: dict[PartitionKey, CachedPartition],
        uses_topic_ids: bool,
        now_ms: int,
    ) -> None:
        self.id = session_id
        self.privileged = privileged
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.creation_ms = now_ms
        self.last_used_ms = now_ms
        self.epoch = next_epoch(INITIAL_EPOCH)
        self.cached_size = -1  # the size the cache last counted; -1: not counted
        self.evictable_by_all = False
        self.evictable_by_privileged = False

    @property
    def size(self) -> int:
        return len(self.partitions)

    def update(
        self, fetch_data: Iterable[CachedPartition], forgotten: Iterable[PartitionKey]
    ) -> tuple[int, int, int]:
        """Apply an incremental request: (added, updated, removed) counts."""
        added = updated = removed = 0
        ids = self.uses_topic_ids
        for want in fetch_data:
            key = want.key(ids)
            cached = self.partitions.get(key)
            if cached is None:
                self.partitions[key] = want
                added += 1
            else:
                cached.update_request(want)
                updated += 1
        for key in forgotten:
            if self.partitions.pop(key, None) is not None:
                removed += 1
        return added, updated, removed

    def move_to_end(self, cached: CachedPartition) -> None:
        """Put a partition that returned records last, for the next fetches."""
        key = cached.key(self.uses_topic_ids)
        if self.partitions.get(key) is cached:
            del self.partitions[key]
            self.partitions[key] = cached

    def __repr__(self) -> str:
        return (
            f"FetchSession(id={self.id}, epoch={self.epoch}, partitions={self.size}, "
            f"uses_topic_ids={self.uses_topic_ids})"
        )


class FetchSessionCache:
    """The live sessions, bounded (see the module rules for eviction).

    Args:
        max_entries: the most sessions kept; 0 disables sessions.
        eviction_ms: how long a session must go unused before any newcomer may
            evict it, and how old it must be before a bigger newcomer may.
        rng: where session ids come from (tests pass a seeded one).
    """

    def __init__(
        self,
        max_entries: int,
        eviction_ms: int = MIN_EVICTION_MS,
        *,
        rng: random.Random | None = None,
    ) -> None:
        self.max_entries = max_entries
        self.eviction_ms = eviction_ms
        self._rng = rng or random.Random()
        self._sessions: dict[int, FetchSession] = {}
        # Least recently used first (touches come in time order).
        self._last_used: collections.OrderedDict[int, FetchSession] = collections.OrderedDict()
        self._num_partitions = 0
        #: Sessions created, and evicted to make room, since the broker started.
        self.created = 0
        self.evictions = 0

    @property
    def size(self) -> int:
        """How many sessions are live."""
        return len(self._sessions)

    @property
    def total_partitions(self) -> int:
        """How many partitions the live sessions hold (as last counted)."""
        return self._num_partitions

    def get(self, session_id: int) -> FetchSession | None:
        return self._sessions.get(session_id)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._sessions

    def _new_id(self) -> int:
        while True:
            session_id = self._rng.randrange(1, 2**31)
            if session_id not in self._sessions:
                return session_id

    def maybe_create(
        self,
        now_ms: int,
        privileged: bool,
        partitions: dict[PartitionKey, CachedPartition],
        uses_topic_ids: bool,
    ) -> FetchSession | None:
        """A new session holding ``partitions``, or None when there is no room."""
        if len(self._sessions) >= self.max_entries and not self._try_evict(
            privileged, len(partitions), now_ms
        ):
            return None
        session = FetchSession(self._new_id(), privileged, partitions, uses_topic_ids, now_ms)
        self._sessions[session.id] = session
        self.created += 1
        self.touch(session, now_ms)
        return session

    def _try_evict(self, privileged: bool, size: int, now_ms: int) -> bool:
        if not self._last_used:
            return False
        stalest = next(iter(self._last_used.values()))
        if now_ms - stalest.last_used_ms > self.eviction_ms:
            self.remove(stalest.id)
            self.evictions += 1
            return True
        # Only reached with a full cache and no stale session: a scan of at most
        # max_entries sessions is cheaper than keeping a second ordering.
        candidates = [
            s
            for s in self._sessions.values()
            if (s.evictable_by_privileged if privileged else s.evictable_by_all)
        ]
        if not candidates:
            return False
        victim = min(candidates, key=lambda s: (s.privileged, s.cached_size, s.id))
        if (privileged, size, 0) < (victim.privileged, victim.cached_size, victim.id):
            return False
        self.remove(victim.id)
        self.evictions += 1
        return True

    def remove(self, session_id: int) -> FetchSession | None:
        """Close a session; the removed session, or None when there was none."""
        session = self._sessions.pop(session_id, None)
        if session is None:
            return None
        self._last_used.pop(session_id, None)
        if session.cached_size > 0:
            self._num_partitions -= session.cached_size
        session.cached_size = -1
        return session

    def touch(self, session: FetchSession, now_ms: int) -> None:
        """The session was used at ``now_ms``: its place in the LRU order, its
        evictability and its counted size follow."""
        if session.id not in self._sessions:
            return
        self._last_used.pop(session.id, None)
        self._last_used[session.id] = session
        session.last_used_ms = now_ms
        if session.cached_size > 0:
            self._num_partitions -= session.cached_size
        session.cached_size = session.size
        self._num_partitions += session.cached_size
        old_enough = now_ms - session.creation_ms > self.eviction_ms
        session.evictable_by_privileged = (not session.privileged) or old_enough
        session.evictable_by_all = old_enough

    def clear(self) -> None:
        self._sessions.clear()
        self._last_used.clear()
        self._num_partitions = 0


# -- fetch contexts (what newContext decides for one request) -------------------------


class SessionErrorContext:
    """The request named a session wrongly: answered with ``error`` and nothing else."""

    __slots__ = ("error",)

    def __init__(self, error: ErrorCode) -> None:
        self.error = error


class SessionlessContext:
    """A full fetch that neither has nor creates a session."""

    __slots__ = ("partitions",)

    def __init__(self, partitions: list[CachedPartition]) -> None:
        self.partitions = partitions


class FullContext:
    """A full fetch whose answer creates a session when the cache has room."""

    __slots__ = ("cache", "partitions", "privileged", "uses_topic_ids")

    def __init__(
        self,
        cache: FetchSessionCache,
        partitions: dict[PartitionKey, CachedPartition],
        uses_topic_ids: bool,
        privileged: bool = False,
    ) -> None:
        self.cache = cache
        self.partitions = partitions
        self.uses_topic_ids = uses_topic_ids
        self.privileged = privileged


class IncrementalContext:
    """A fetch on a session: every partition of the session is read.

    ``partitions`` is the session's order when the request arrived; the answer
    is checked against ``expected_epoch`` when it is made (see the module rules).
    """

    __slots__ = ("expected_epoch", "partitions", "session")

    def __init__(self, session: FetchSession, request_epoch: int) -> None:
        self.session = session
        self.expected_epoch = next_epoch(request_epoch)
        self.partitions = list(session.partitions.values())

    @property
    def still_current(self) -> bool:
        return self.session.epoch == self.expected_epoch


FetchContext: TypeAlias = (
    SessionErrorContext | SessionlessContext | FullContext | IncrementalContext
)


class FetchManager:
    """Turns a Fetch request's session fields into a fetch context (Kafka's
    ``FetchManager.newContext``), and counts what happened.

    Args:
        cache: the sessions.
    """

    def __init__(self, cache: FetchSessionCache) -> None:
        self.cache = cache
        #: Requests answered incrementally, and refused for a session error.
        self.incremental_fetches = 0
        self.session_errors = 0

    @property
    def size(self) -> int:
        """How many sessions are live."""
        return self.cache.size

    def new_context(
        self,
        version: int,
        session_id: int,
        epoch: int,
        fetch_data: list[CachedPartition],
        forgotten: Callable[[bool], list[PartitionKey]],
        resolve_name: Callable[[uuid.UUID], str | None],
        now_ms: int,
        privileged: bool = False,
    ) -> FetchContext:
        """The context of one request.

        Args:
            version: the request's version (v13+ names topics by id).
            session_id, epoch: the request's session fields (0 and -1 before v7).
            fetch_data: the request's partitions, in order.
            forgotten: the keys of ``forgotten_topics_data``, given whether the
                session uses topic ids.
            resolve_name: a topic id's name, None when unknown.
            now_ms: the current time.
            privileged: a follower's fetch (its session may evict a consumer's).
        """
        uses_topic_ids = version >= 13
        if epoch in (INITIAL_EPOCH, FINAL_EPOCH):
            if session_id != INVALID_SESSION_ID:
                # Any session named in a full fetch is closed.
                self.cache.remove(session_id)
            if epoch == FINAL_EPOCH:
                return SessionlessContext(fetch_data)
            partitions = {p.key(uses_topic_ids): p for p in fetch_data}
            return FullContext(self.cache, partitions, uses_topic_ids, privileged)
        session = self.cache.get(session_id)
        if session is None:
            self.session_errors += 1
            return SessionErrorContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND)
        if session.epoch != epoch:
            self.session_errors += 1
            return SessionErrorContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH)
        if session.uses_topic_ids != uses_topic_ids:
            self.session_errors += 1
            return SessionErrorContext(ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR)
        session.update(fetch_data, forgotten(session.uses_topic_ids))
        if not session.partitions:
            self.cache.remove(session.id)
            return SessionlessContext(fetch_data)
        if session.uses_topic_ids:
            for cached in session.partitions.values():
                if cached.topic is None:
                    cached.topic = resolve_name(cached.topic_id)
        self.cache.touch(session, now_ms)
        session.epoch = next_epoch(session.epoch)
        self.incremental_fetches += 1
        return IncrementalContext(session, epoch)
