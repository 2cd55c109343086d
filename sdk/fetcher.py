"""The consumer's partition positions and prefetch buffers, without I/O.

Rules and invariants:

* A partition is *assigned* (by :meth:`Fetcher.assign` or a group) before it
  is fetched. Its *position* is the offset of the next record to hand to the
  user. A position of ``None`` means unknown: it must first come from the
  committed offset or an offset reset (``auto.offset.reset``), which the
  driver performs with ListOffsets (:meth:`Fetcher.needs_reset`,
  :meth:`Fetcher.apply_reset`).
* A partition is *fetchable* when assigned, not paused, its position known,
  its leader known, no fetch for it is in flight, fewer than ``prefetch``
  fetched responses for it are buffered beyond the one being taken (1 by
  default, as Java's consumer), and the offset to fetch is below the end a
  seek gave it, if any (a reader of a known range sends no fetch past it,
  which the broker would hold for ``fetch.max.wait.ms`` with nothing to return). The next fetch asks for the position when
  nothing is buffered, else for the offset after the buffered blob's last
  complete entry (a *prefetch*: the next data is on its way while the
  application consumes the current data). Hence at most ``prefetch + 1``
  answers are buffered per partition (by default the one being consumed and
  the next) and memory is bounded by that many ``max.partition.fetch.bytes``
  per partition and ``fetch.max.bytes`` per request.
* Fetched data is kept as the raw records blob and decoded only as the user
  takes records, at most a few batches ahead of what is handed out (so that
  records are made and freed while the memory is warm). Records below the
  position (a batch starts earlier than the requested offset) are skipped;
  control batches are never returned but advance the position; with
  ``read_committed``, records of aborted transactions are dropped.
* Buffered data is tagged with the offset it was fetched for, and a response
  is kept only if it answers the fetch the partition expects next (the
  position, or the end of the buffered blob); seeking, revoking or resetting
  a partition drops everything buffered (stale data is never returned). A
  prefetched blob is consumed only if it starts exactly where the previous
  one left the position.
* Incremental fetch sessions (KIP-227, :mod:`.fetch_sessions`): with a
  :class:`~trafka.sdk.fetch_sessions.FetchSession` per broker, a request names
  only the partitions that are new or whose fetch offset moved, and forgets
  those not fetchable this time (paused, unassigned, leader elsewhere, or two
  answers buffered); the broker reads every session partition at the offset
  last sent. A partition an incremental answer leaves out had nothing new: its
  position, buffers and watermarks stay as they were. An answer the session
  rejects (an error, or partitions outside the session) is applied to no
  partition; its partitions are simply fetched again.
* :meth:`Fetcher.take_columns` hands the same records out as column buffers
  (:class:`~trafka.codec.columns.RecordColumns`) instead of record tuples,
  for readers that pass them on in bulk; which of the two a fetcher decodes
  into is its ``columns`` setting, and changing it drops what is buffered
  (fetched again from the positions), so no data decoded the other way is
  ever handed out.
* The fetcher is three modules: this one (positions, what to fetch, fetch
  answers, handing records out), :mod:`.fetch_decode` (the fetched blob,
  decoded as its records are taken, and read_committed's dropping of aborted
  transactions) and :mod:`.fetch_requests` (the Fetch and ListOffsets requests).
  The consumer's value types are in :mod:`.consumer_types`; every name stays
  importable from here.
* End-of-partition events (``enable.partition.eof``, librdkafka's; off by
  default): a partition is *at its end* when nothing of it is buffered and
  its position equals the end the last fetch answer gave (the high watermark;
  the last stable offset under ``read_committed``). :meth:`Fetcher.take_eofs`
  hands out a :class:`~.consumer_types.PartitionEOF` for it once per end
  reached (librdkafka's ``eof_offset``): again only at a new end, or after the
  position was set anew (a seek, an offset reset, an assignment). Paused
  partitions have none.
* Fetch errors: OFFSET_OUT_OF_RANGE resets the position per
  ``auto.offset.reset`` (or raises with ``none``); leadership errors ask for a
  metadata refresh; others are surfaced to the user at the next poll.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.columns import RecordColumns
from trafka.codec.records import blob_next_offset

from .consumer_types import (
    ConsumedPositions,
    ConsumerRecord,
    K,
    OffsetAndMetadata,
    OffsetOutOfRangeError,
    PartitionEOF,
    TopicPartition,
    V,
)
from .fetch_decode import (
    NO_TIMESTAMP_TYPE,
    FetchedData,
    PartitionState,
    TakeTally,
    take_ends,
    take_records,
)
from .fetch_requests import (
    FetchPositions,
    build_close_fetch,
    build_full_fetch,
    build_list_offsets,
    build_session_fetch,
    parse_list_offsets,
    request_fields,
)
from .fetch_sessions import SESSION_ERRORS, FetchSession
from .metadata import REFRESH_ERRORS, MetadataCache

if TYPE_CHECKING:
    from .config import ConsumerConfig

__all__ = [
    "COMMITTED",
    "ConsumedPositions",
    "EARLIEST",
    "LATEST",
    "ConsumerRecord",
    "build_list_offsets",
    "parse_list_offsets",
    "Fetcher",
    "K",
    "NO_TIMESTAMP_TYPE",
    "OffsetAndMetadata",
    "OffsetOutOfRangeError",
    "PartitionEOF",
    "TopicPartition",
    "V",
]


EARLIEST = -2
LATEST = -1
#: Reset "strategy" of a partition whose committed offset the driver is looking up.
COMMITTED = -100


class Fetcher:
    """Positions and fetched data of the assigned partitions.

    Args:
        metadata: leaders come from here; leadership errors request refreshes.
        auto_offset_reset: ``earliest``, ``latest`` or ``none``.
        fetch_min_bytes, fetch_max_wait_ms, fetch_max_bytes, max_partition_fetch_bytes: Kafka's.
        read_committed: drop aborted transactional records and read up to the LSO.
        check_crcs: verify batch CRCs.
        incremental_fetch_sessions: incremental fetch sessions (KIP-227), see :meth:`session`.
        partition_eof: end-of-partition events (:meth:`take_eofs`, ``enable.partition.eof``).
        prefetch: answers a partition buffers beyond the one being taken (``fetch.prefetch``).

    Attributes:
        columns: None (the default) decodes records for :meth:`take`; False or
            True for :meth:`take_columns`, True with the header columns.
            Changing it drops the buffered data.
    """

    def __init__(
        self,
        metadata: MetadataCache,
        *,
        auto_offset_reset: str = "latest",
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        max_partition_fetch_bytes: int = 1_048_576,
        read_committed: bool = False,
        check_crcs: bool = True,
        incremental_fetch_sessions: bool = False,
        partition_eof: bool = False,
        prefetch: int = 1,
    ) -> None:
        self.metadata = metadata
        self.prefetch = prefetch
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.read_committed = read_committed
        self.check_crcs = check_crcs
        self.incremental_fetch_sessions = incremental_fetch_sessions
        self.partition_eof = partition_eof
        #: The fetch session with each broker (node id), made by :meth:`session`.
        self.sessions: dict[int, FetchSession] = {}
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.errors: list[BaseException] = []
        self.partition_errors: list[HeldError] = []  # raised when due (due_errors)
        self._rotation = 0
        self._n_paused = 0
        #: Set when taking records made a partition fetchable again (the driver
        #: clears it after sending fetches).
        self.fetch_wanted = False
        #: Whether the last :meth:`fetchable` held a broker's fetch back, and
        #: until when at most (the driver's clock).
        self.held_back = False
        self.hold_deadline: float | None = None
        self._held_since: dict[int, float] = {}  # node -> when its fetch was first held
        self._hold_max = fetch_max_wait_ms / 1000
        #: Set when a fetch answer asked for an offset lookup (OFFSET_OUT_OF_RANGE
        #: under auto.offset.reset): the driver's lookups are not started from its
        #: response path, so it must wake the task that starts them.
        self.reset_wanted = False
        # Topic ids sent in Fetch v13+ requests, to name the topics of responses.
        self._topic_names: dict[uuid.UUID, str] = {}
        #: Totals over every partition ever assigned (statistics).
        self.records_taken = 0
        self.bytes_fetched = 0
        self._columns: bool | None = None

    @classmethod
    def for_consumer(cls, metadata: MetadataCache, config: ConsumerConfig) -> Fetcher:
        """A fetcher with a consumer configuration's fetch settings."""
        return cls(
            metadata,
            auto_offset_reset=config.auto_offset_reset,
            fetch_min_bytes=config.fetch_min_bytes,
            fetch_max_wait_ms=config.fetch_max_wait_ms,
            fetch_max_bytes=config.fetch_max_bytes,
            max_partition_fetch_bytes=config.max_partition_fetch_bytes,
            read_committed=config.read_committed,
            check_crcs=config.check_crcs,
            incremental_fetch_sessions=config.enable_incremental_fetch_sessions,
            partition_eof=config.enable_partition_eof,
            prefetch=config.fetch_prefetch,
        )

    @property
    def columns(self) -> bool | None:
        return self._columns

    @columns.setter
    def columns(self, value: bool | None) -> None:
        if value is not self._columns:
            for s in self.partitions.values():
                s.drop_buffered()
            self._columns = value

    # -- assignment and positions ---------------------------------------------------------

    def assign(self, tps: Iterable[TopicPartition]) -> None:
        """Set the assigned partitions; kept partitions keep their state.

        New partitions are added in the order given, so fetches ask for them in
        that order (a set would give an order that changes with the hash seed).
        """
        wanted = dict.fromkeys(tps)
        self.remove([tp for tp in self.partitions if tp not in wanted])
        for tp in wanted:  # (librdkafka's assign reports every partition's end again)
            self.partitions.setdefault(tp, PartitionState(depth=self.prefetch)).eof_offset = None

    def add(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.setdefault(tp, PartitionState(depth=self.prefetch))

    def remove(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            state = self.partitions.pop(tp, None)
            if state is not None and state.paused:
                self._n_paused -= 1

    @property
    def assignment(self) -> set[TopicPartition]:
        return set(self.partitions)

    def _state(self, tp: TopicPartition) -> PartitionState:
        state = self.partitions.get(tp)
        if state is None:
            raise KeyError(f"{tp.topic}-{tp.partition} is not assigned")
        return state

    def seek(self, tp: TopicPartition, offset: int, until: int | None = None) -> None:
        """Set the position; buffered data for the partition is dropped. With
        ``until``, no fetch asks for that offset or a later one (until the next seek)."""
        state = self._state(tp)
        state.start_at(offset)
        state.fetch_end = until

    def request_reset(self, tp: TopicPartition, strategy: int) -> None:
        """Position the partition at EARLIEST (-2) or LATEST (-1) once the driver asks the leader."""
        state = self._state(tp)
        state.start_at(None)
        state.reset = strategy

    def position(self, tp: TopicPartition) -> int | None:
        return self._state(tp).position

    def pause(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            state = self._state(tp)
            if not state.paused:
                state.paused = True
                self._n_paused += 1

    def resume(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            state = self._state(tp)
            if state.paused:
                state.paused = False
                self._n_paused -= 1

    def any_paused(self) -> bool:
        """Whether some assigned partition is paused (O(1): asked once per record)."""
        return self._n_paused > 0

    def paused(self) -> set[TopicPartition]:
        return {tp for tp, s in self.partitions.items() if s.paused}

    def missing_positions(self) -> list[TopicPartition]:
        """Partitions with neither a position nor a pending reset (need committed offsets)."""
        return [tp for tp, s in self.partitions.items() if s.position is None and s.reset is None]

    def default_reset(self, tps: Iterable[TopicPartition]) -> None:
        """Apply ``auto.offset.reset`` to partitions without a committed offset.

        Raises:
            OffsetOutOfRangeError: ``auto.offset.reset`` is ``none``.
        """
        for tp in tps:
            if self.auto_offset_reset == "none":
                raise OffsetOutOfRangeError(tp, -1)
            self.request_reset(tp, EARLIEST if self.auto_offset_reset == "earliest" else LATEST)

    def needs_reset(self) -> dict[TopicPartition, int]:
        """Partitions waiting for an offset lookup, with the timestamp to look up."""
        return {
            tp: s.reset
            for tp, s in self.partitions.items()
            if s.reset is not None and s.reset != COMMITTED and s.position is None
        }

    def mark_committed_lookup(self, tps: Iterable[TopicPartition]) -> None:
        """The driver is fetching committed offsets for these partitions."""
        for tp in tps:
            s = self.partitions.get(tp)
            if s is not None and s.position is None:
                s.reset = COMMITTED
                s.drop_buffered()

    def committed_lookup_failed(self, tps: Iterable[TopicPartition]) -> None:
        """The committed-offset lookup failed: look these partitions up again."""
        for tp in tps:
            state = self.partitions.get(tp)
            if state is not None and state.reset == COMMITTED:
                state.reset = None

    def apply_committed(
        self, tps: Iterable[TopicPartition], committed: Mapping[TopicPartition, int]
    ) -> None:
        """Position partitions at their committed offsets, the rest per ``auto.offset.reset``.

        Only partitions still waiting for the lookup are touched (a seek since wins).
        With ``auto.offset.reset=none`` a partition without a commit queues an
        :class:`OffsetOutOfRangeError` for the next poll.
        """
        rest = []
        for tp in tps:
            state = self.partitions.get(tp)
            if state is None or state.reset != COMMITTED:
                continue
            off = committed.get(tp)
            if off is not None and off >= 0:
                self.seek(tp, off)
            else:
                state.reset = None
                rest.append(tp)
        try:
            self.default_reset(rest)
        except KafkaError as exc:
            self.errors.append(exc)

    def apply_reset_results(
        self,
        targets: Mapping[TopicPartition, int],
        results: Mapping[TopicPartition, tuple[int, int] | None],
    ) -> None:
        """Apply ListOffsets answers for :meth:`needs_reset` lookups.

        An empty partition has no earliest or latest record: it starts at 0. A
        timestamp with no record at or after it leaves the reset pending.
        """
        for tp, res in results.items():
            strategy = targets.get(tp)
            if strategy in (EARLIEST, LATEST):
                off = res[0] if res else 0
            else:
                off = res[0] if res else -1
            if off >= 0:
                self.apply_reset(tp, off, strategy)

    def awaiting_committed(self, tp: TopicPartition) -> bool:
        s = self.partitions.get(tp)
        return s is not None and s.reset == COMMITTED

    def apply_reset(self, tp: TopicPartition, offset: int, strategy: int | None = None) -> None:
        """The leader answered the lookup for ``tp``.

        Args:
            strategy: what was looked up; when given and the partition has been
                asked for another reset since, the answer is stale and ignored.
        """
        state = self.partitions.get(tp)
        if state is None or state.reset is None:
            return
        if strategy is not None and state.reset != strategy:
            return
        state.start_at(offset)

    def lag(self, tp: TopicPartition) -> int | None:
        """Records between the position and the high watermark (LSO under read_committed)."""
        s = self._state(tp)
        end = s.last_stable_offset if self.read_committed else s.high_watermark
        if s.position is None or end < 0:
            return None
        return max(end - s.position, 0)

    def high_watermark(self, tp: TopicPartition) -> int:
        return self._state(tp).high_watermark

    # -- fetch requests -------------------------------------------------------------------

    def fetchable(
        self,
        leader_of: Callable[[str, int], int | None] | None = None,
        *,
        hold_back: bool = False,
        now: float = 0.0,
    ) -> dict[int, list[TopicPartition]]:
        """Fetchable partitions grouped by leader.

        With ``hold_back``, a broker is left out when every partition it would
        be asked for had reached its end (the high watermark, or the LSO under
        read_committed) at its last answer, while another of its partitions,
        whose log goes on, waits only for the application to take what is
        buffered. That fetch would be held by the broker for up to
        ``fetch.max.wait.ms`` with nothing to return, and as only one fetch per
        broker is in flight, the partition with data could not be fetched
        meanwhile: the application would stall once it has taken the buffered
        data. Held back, the fetch goes out with that partition in it once a
        buffer slot frees (taking records sets :attr:`fetch_wanted`), or after
        ``fetch.max.wait.ms`` (seconds of ``now``, the driver's clock) if no
        slot frees by then: an application slow to take the buffered records
        would otherwise get no new records of the other partitions meanwhile.
        :attr:`hold_deadline` is when the first hold ends. A poll that finds
        nothing to take must fetch without ``hold_back``.
        """
        leader_of = leader_of or self.metadata.leader_for
        read_committed = self.read_committed
        out: dict[int, list[TopicPartition]] = {}
        waiting: set[int] = set()  # leaders of partitions waiting for a buffer slot
        live: set[int] = set()  # leaders with a fetchable partition not at its end
        for tp, s in self.partitions.items():
            if s.paused or s.in_flight:
                continue
            offset = s.next_fetch_offset()
            if offset is None:
                if hold_back and s.completed is not None and s.has_more(read_committed):
                    leader = leader_of(tp.topic, tp.partition)
                    if leader is not None:
                        waiting.add(leader)
                continue
            leader = leader_of(tp.topic, tp.partition)
            if leader is None:
                continue
            out.setdefault(leader, []).append(tp)
            if hold_back:
                end = s.last_stable_offset if read_committed else s.high_watermark
                if end < 0 or offset < end:
                    live.add(leader)
        holds = self._held_since
        deadline = math.inf
        for leader in waiting - live:
            if leader not in out:
                continue
            ends = holds.setdefault(leader, now) + self._hold_max
            if now < ends:
                del out[leader]
                deadline = min(deadline, ends)
        for leader in [n for n in holds if n in out or n not in waiting]:
            del holds[leader]  # sent (a hold that ran out), or nothing to hold for
        self.held_back = deadline < math.inf
        self.hold_deadline = deadline if self.held_back else None
        return out

    def unknown_leaders(self) -> set[str]:
        return {
            tp.topic
            for tp in self.partitions
            if self.metadata.leader_for(tp.topic, tp.partition) is None
        }

    def session(self, node_id: int) -> FetchSession:
        """The fetch session with broker ``node_id`` (made at first use)."""
        session = self.sessions.get(node_id)
        if session is None:
            session = self.sessions[node_id] = FetchSession(
                node_id, incremental=self.incremental_fetch_sessions
            )
        return session

    def fetch_version(
        self,
        negotiated: int,
        tps: Iterable[TopicPartition],
        session: FetchSession | None = None,
    ) -> int:
        """The Fetch version to use: ``negotiated``, or v12 when it is v13+ (topics
        named by id) and a topic's id is unknown (metadata older than v10), or
        ``session`` would forget a partition it holds without a topic id."""
        if negotiated >= 13:
            tps = list(tps)
            if any(self.metadata.topic_id(tp.topic) is None for tp in tps):
                return 12
            if session is not None and session.forgets_nameless(tps):
                return 12
        return negotiated

    def build_fetch(
        self, tps: list[TopicPartition], version: int, session: FetchSession | None = None
    ) -> tuple[Any, dict[TopicPartition, int]]:
        """A FetchRequest for ``tps`` (marked in flight) and the offsets it asks for.

        Each partition is asked for its :meth:`PartitionState.next_fetch_offset`:
        its position, or the end of its buffered data (a prefetch).

        From v13 topics are named by id (see :meth:`fetch_version`); the
        response is matched back to names by the ids sent.

        With ``session`` (v7+) the request is that session's next one: full,
        or incremental (naming only new and changed partitions, forgetting
        those of the session not in ``tps``). Without, a sessionless full
        fetch ``(0, -1)``.

        Raises:
            KeyError: v13+ and a topic's id is unknown.
        """
        if len(tps) > 1:
            self._rotation = (self._rotation + 1) % len(tps)
            tps = tps[self._rotation :] + tps[: self._rotation]
        fields = self._request_fields(version)
        if session is not None and version >= 7:
            request, positions = build_session_fetch(
                {tp: self.partitions[tp].next_fetch_offset() for tp in tps},
                version,
                session,
                self.metadata,
                self.max_partition_fetch_bytes,
                fields,
                self._topic_names,
            )
            for tp in positions:
                self.partitions[tp].in_flight = True
            return request, positions
        offsets: dict[TopicPartition, int] = {}
        for tp in tps:
            s = self.partitions[tp]
            offset = s.next_fetch_offset()
            assert offset is not None
            s.in_flight = True
            offsets[tp] = offset
        request = build_full_fetch(
            offsets,
            version,
            self.metadata,
            self.max_partition_fetch_bytes,
            fields,
            self._topic_names,
        )
        return request, offsets

    def _request_fields(self, version: int) -> dict[str, Any]:
        return request_fields(
            version,
            max_wait_ms=self.fetch_max_wait_ms,
            min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes,
            read_committed=self.read_committed,
        )

    def build_close_fetch(self, session: FetchSession, version: int) -> Any | None:
        """The request closing ``session`` at the broker (epoch -1, no
        partitions), or None when there is no session to close (see
        :meth:`FetchSession.close_plan`)."""
        return build_close_fetch(session, version, self._request_fields(version))

    def fetch_failed(self, positions: dict[TopicPartition, int]) -> None:
        """The request failed (connection error): the partitions may be fetched
        again, and the request's session starts over (a full fetch asking for a
        new one)."""
        for tp in positions:
            s = self.partitions.get(tp)
            if s is not None:
                s.in_flight = False
        if isinstance(positions, FetchPositions) and positions.session is not None:
            positions.session.handle_error()

    def handle_fetch_response(self, positions: dict[TopicPartition, int], response: Any) -> bool:
        """Apply a FetchResponse. Returns True if new data is buffered.

        Args:
            positions: what :meth:`build_fetch` returned with the request; for a
                session's request (:class:`FetchPositions`) the session moves
                on, or starts over after a session error or an invalid answer.

        Raises:
            KafkaError: a request-level error code other than a session error
                (those only start the session over).
        """
        for tp in positions:
            s = self.partitions.get(tp)
            if s is not None:
                s.in_flight = False
        session = positions.session if isinstance(positions, FetchPositions) else None
        if session is not None:
            assert isinstance(positions, FetchPositions)
            usable, _problem = session.handle_response(response, positions.version)
            if not usable:
                code = getattr(response, "error_code", 0)
                if not code or code in SESSION_ERRORS:
                    if code == ErrorCode.FETCH_SESSION_TOPIC_ID_ERROR:
                        self.metadata.request_update()
                    self.fetch_wanted = True  # fetch again at once, with a full fetch
                    return False
        if getattr(response, "error_code", 0):
            code = response.error_code
            self.metadata.on_partition_error(code)
            raise KafkaError(code, "fetch failed")
        self.metadata.learn_endpoints(getattr(response, "node_endpoints", ()))
        got = False
        names = self._topic_names
        for t in response.responses:
            topic = t.topic or names.get(t.topic_id, "")
            for p in t.partitions:
                tp = TopicPartition(topic, p.partition_index)
                s = self.partitions.get(tp)
                asked = positions.get(tp)
                if s is None or asked is None:
                    continue  # revoked while the fetch was in flight
                code = p.error_code
                if s.next_fetch_offset() != asked:
                    # Sought meanwhile: the records are not wanted, but the log's
                    # ends are still news. An incremental session names the
                    # partition again only once they change (KIP-227), so ends
                    # dropped here would stay unknown (lag None, no end reached).
                    if code == ErrorCode.NONE:
                        s.learn_ends(p)
                    continue
                if code == ErrorCode.NONE:
                    got = self._buffer_answer(s, asked, p) or got
                else:
                    self._partition_error(tp, asked, code, p)
        return got

    def _buffer_answer(self, s: PartitionState, asked: int, p: Any) -> bool:
        """Apply a partition's answer without error; True if it buffered
        records (or made an end-of-partition event due)."""
        s.learn_ends(p)
        if not p.records:
            return self.partition_eof and s.at_end(self.read_committed)
        size = len(p.records)
        s.bytes_fetched += size
        self.bytes_fetched += size
        aborted = None
        if self.read_committed and p.aborted_transactions:
            aborted = sorted((a.first_offset, a.producer_id) for a in p.aborted_transactions)
        data = FetchedData(asked, p.records, aborted, blob_next_offset(p.records))
        if s.completed is None:
            s.make_current(data)
        else:
            s.ahead.append(data)
        return True

    def _partition_error(self, tp: TopicPartition, asked: int, code: int, p: Any) -> None:
        """Apply a partition's error: a reset, a metadata refresh, or an error for the next poll."""
        if code == ErrorCode.OFFSET_OUT_OF_RANGE:
            if self.auto_offset_reset == "none":
                self.partition_errors.append((tp, asked, OffsetOutOfRangeError(tp, asked)))
            else:
                self.request_reset(tp, EARLIEST if self.auto_offset_reset == "earliest" else LATEST)
                self.reset_wanted = True
        elif code in REFRESH_ERRORS:
            hint = p.current_leader  # KIP-951 (v12+), leader -1 when absent: then no move
            self.metadata.on_leader_hint(tp.topic, tp.partition, hint.leader_id, hint.leader_epoch)
            self.metadata.on_partition_error(code, tp.topic, tp.partition)
        else:
            self.partition_errors.append((tp, asked, fetch_error(tp, code)))

    # -- handing out records --------------------------------------------------------------

    def has_data(self) -> bool:
        """Whether :meth:`take` (or :meth:`take_eofs`) has something to hand out."""
        ends, read_committed = self.partition_eof, self.read_committed
        self.partition_errors = due_errors(self.partitions, self.partition_errors, self.errors)
        return bool(self.errors) or any(
            not s.paused and (s.completed is not None or (ends and s.at_end(read_committed)))
            for s in self.partitions.values()
        )

    def take_eofs(self, wanted: set[TopicPartition] | None = None) -> list[PartitionEOF]:
        """The end-of-partition events due (with :attr:`partition_eof`), of the
        ``wanted`` partitions (None: all): after :meth:`take`'s records."""
        return take_ends(self.partitions, self.read_committed, wanted) if self.partition_eof else []

    def take(self, max_records: int) -> dict[TopicPartition, list[ConsumerRecord]]:
        """Up to ``max_records`` records, advancing positions (with :attr:`columns` None).

        Raises:
            KafkaError: an error recorded by a fetch (raised once), or a corrupt
                batch (CORRUPT_MESSAGE) before any record could be taken; the
                position stays before the batch, so the error comes back at
                every call until the application seeks past it.
            DecodeError: a records blob whose entries cannot be told apart, or
                a corrupt legacy message (raised the same way).
        """
        if self.columns is not None:
            raise RuntimeError("this fetcher decodes columns: use take_columns()")
        return self._take(max_records)

    def take_columns(self, max_records: int) -> dict[TopicPartition, RecordColumns]:
        """:meth:`take`, with the records as columns (with :attr:`columns` set):
        the same records, positions and errors."""
        if self.columns is None:
            raise RuntimeError("this fetcher decodes records: use take()")
        return self._take(max_records)

    def _take(self, max_records: int) -> dict[TopicPartition, Any]:
        self.partition_errors = due_errors(self.partitions, self.partition_errors, self.errors)
        if self.errors:
            raise self.errors.pop(0)
        tally = TakeTally()
        try:
            return take_records(self.partitions, max_records, self._columns, self.check_crcs, tally)
        finally:
            if tally.drained:
                self.fetch_wanted = True  # a buffer slot freed
            self.records_taken += tally.records


def fetch_error(tp: TopicPartition, code: int) -> KafkaError:
    """The error a partition's fetch answer gave, for the application."""
    hint = (
        f": the client's principal needs READ on topic {tp.topic!r} (an ACL on the broker)"
        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
        else ""
    )
    return KafkaError(code, f"fetching {tp.topic}-{tp.partition}{hint}")


#: A partition's fetch error, with the offset the fetch that met it asked for.
HeldError = tuple[TopicPartition, int, BaseException]


def due_errors(
    partitions: dict[TopicPartition, PartitionState],
    held: list[HeldError],
    errors: list[BaseException],
) -> list[HeldError]:
    """Move to ``errors`` the partition errors now due, those of partitions whose
    records fetched before them were all taken (the position at the offset the
    failed fetch asked for, nothing buffered), as Kafka's consumer returns a
    partition's records before it raises the error its next fetch met; the
    errors still held are returned. One whose partition was sought elsewhere,
    or left the assignment, is dropped (a fetch from the new position meets it
    again if it still holds)."""
    kept = []
    for tp, asked, error in held:
        s = partitions.get(tp)
        if s is None or (s.completed is None and s.position != asked):
            continue
        if s.completed is None:
            errors.append(error)
        else:
            kept.append((tp, asked, error))
    return kept
