"""The consumer's partition positions and prefetch buffers, without I/O.

Rules and invariants:

* A partition is *assigned* (by :meth:`Fetcher.assign` or a group) before it
  is fetched. Its *position* is the offset of the next record to hand to the
  user. A position of ``None`` means unknown: it must first come from the
  committed offset or an offset reset (``auto.offset.reset``), which the
  driver performs with ListOffsets (:meth:`Fetcher.needs_reset`,
  :meth:`Fetcher.apply_reset`).
* A partition is *fetchable* when assigned, not paused, its position known,
  its leader known, no fetch for it is in flight, at most one fetched
  response for it is buffered, and the offset to fetch is below the end a
  seek gave it, if any (a reader of a known range sends no fetch past it,
  which the broker would hold for ``fetch.max.wait.ms`` with nothing to return). The next fetch asks for the position when
  nothing is buffered, else for the offset after the buffered blob's last
  complete entry (a *prefetch*: the next data is on its way while the
  application consumes the current data). Hence at most two fetches are
  buffered per partition (the one being consumed and the next) and memory is
  bounded by twice ``max.partition.fetch.bytes`` per partition and
  ``fetch.max.bytes`` per request.
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
* Fetch errors: OFFSET_OUT_OF_RANGE resets the position per
  ``auto.offset.reset`` (or raises with ``none``); leadership errors ask for a
  metadata refresh; others are surfaced to the user at the next poll.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, NamedTuple

from typing_extensions import TypeVar

from trafka.codec import DecodeError, ErrorCode, KafkaError
from trafka.codec.columns import (
    ColumnBuffers,
    RecordColumns,
    decode_batch_columns,
    decode_batch_run_columns,
)
from trafka.codec.legacy import decode_legacy_entry
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.messages import k02_list_offsets as list_offsets
from trafka.codec.records import (
    RecordBatchHeader,
    blob_next_offset,
    decode_batch_as,
    decode_batch_run_as,
    iter_batches,
)

from .fetch_sessions import SESSION_ERRORS, FetchSession, SessionPartition
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
    "OffsetOutOfRangeError",
    "TopicPartition",
]

EARLIEST = -2
LATEST = -1
#: Reset "strategy" of a partition whose committed offset the driver is looking up.
COMMITTED = -100


class TopicPartition(NamedTuple):
    """A topic and partition."""

    topic: str
    partition: int


class OffsetAndMetadata(int):
    """An offset to commit with its metadata string (Java's ``OffsetAndMetadata``):
    ``consumer.commit({tp: OffsetAndMetadata(42, "batch 7")})``. It is the offset
    itself (an ``int``) wherever an offset is expected; the coordinator keeps
    ``metadata`` with it."""

    metadata: str | None

    def __new__(cls, offset: int, metadata: str | None = "") -> OffsetAndMetadata:
        value = super().__new__(cls, offset)
        value.metadata = metadata
        return value

    @property
    def offset(self) -> int:
        return int(self)

    def __repr__(self) -> str:
        return f"OffsetAndMetadata({int(self)}, {self.metadata!r})"


# Bare ConsumerRecord / Consumer mean [Any, Any].
K = TypeVar("K", default=Any)
V = TypeVar("V", default=Any)


class ConsumerRecord(NamedTuple, Generic[K, V]):
    """A consumed record (key and value after deserialization: ``K`` and ``V``
    are the deserializers' result types; ``Any`` unless the consumer was opened
    with typed deserializer functions).

    ``timestamp_type`` is 0 for create time, 1 for log-append time (from the
    batch attributes), -1 for legacy magic 0 messages; ``leader_epoch`` is the
    batch's partition leader epoch (-1 when unknown).
    """

    topic: str
    partition: int
    offset: int
    timestamp: int
    key: K
    value: V
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp_type: int = 0
    leader_epoch: int = -1


class OffsetOutOfRangeError(KafkaError):
    """The position is outside the log and ``auto.offset.reset`` is ``none``."""

    def __init__(self, tp: TopicPartition, offset: int) -> None:
        super().__init__(
            ErrorCode.OFFSET_OUT_OF_RANGE, f"offset {offset} of {tp.topic}-{tp.partition}"
        )
        self.tp = tp
        self.offset = offset


_new: Any = tuple.__new__

#: ConsumerRecord.timestamp_type of legacy magic 0 messages, which have no timestamp.
NO_TIMESTAMP_TYPE = -1


@dataclasses.dataclass(slots=True)
class _Completed:
    """A fetched blob, decoded a little at a time as its records are taken.

    Records are decoded just before they are handed out, a few batches at a
    time rather than the whole blob at once: the objects are then made, used
    and freed while the memory is still in the CPU's cache.
    """

    position: int  # the offset the data was fetched for
    blob: bytes
    aborted: list[tuple[int, int]] | None  # (first offset, producer id), read_committed only
    end: int | None = None  # the offset after the blob's last complete entry, if any
    # Decoded (tuples, or columns for take_columns); those from index on not handed out.
    records: Sequence[ConsumerRecord] | RecordColumns = ()
    index: int = 0
    next_position: int = -1  # the offset after the last entry decoded
    cursor: int = 0  # where the next entry to decode starts in the blob
    done: bool = False  # nothing more to decode (the end, or a corrupt batch after records)
    aborts_seen: int = 0  # how many of `aborted` have started by the decoded entries
    aborted_open: set[int] = dataclasses.field(default_factory=set)  # their producer ids

    def __post_init__(self) -> None:
        if self.next_position < 0:
            self.next_position = self.position

    @property
    def drained(self) -> bool:
        return self.done and self.index >= len(self.records)


@dataclasses.dataclass(slots=True)
class PartitionState:
    position: int | None = None
    reset: int | None = None  # EARLIEST / LATEST / a timestamp strategy waiting to run
    paused: bool = False
    in_flight: bool = False
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    leader_epoch: int = -1
    completed: _Completed | None = None  # being consumed
    prefetched: _Completed | None = None  # the data after it (only with completed)
    fetch_end: int | None = None  # no fetch asks for this offset or later (seek's until)
    records_taken: int = 0  # records handed out by take() (statistics)
    bytes_fetched: int = 0  # record bytes of fetch answers (statistics)

    def drop_buffered(self) -> None:
        self.completed = self.prefetched = None

    def has_more(self, read_committed: bool) -> bool:
        """Whether the log held more than what is buffered, as of the last answer."""
        last = self.prefetched or self.completed
        if last is None or last.end is None:
            return True
        end = self.last_stable_offset if read_committed else self.high_watermark
        return end < 0 or last.end < end

    def next_fetch_offset(self) -> int | None:
        """The offset the next fetch asks for; None while no fetch is wanted
        (or when it would be at or past :attr:`fetch_end`)."""
        c = self.completed
        if c is None:
            offset = self.position
        elif self.prefetched is not None or c.end is None or c.end <= c.position:
            return None
        else:
            offset = c.end
        if offset is not None and self.fetch_end is not None and offset >= self.fetch_end:
            return None
        return offset


class FetchPositions(dict[TopicPartition, int]):
    """The offsets a fetch request asks for, with the session it was built
    for (None: sessionless) and its version."""

    __slots__ = ("session", "version")

    def __init__(self, session: FetchSession | None = None, version: int = 12) -> None:
        super().__init__()
        self.session = session
        self.version = version


class Fetcher:
    """Positions and fetched data of the assigned partitions.

    Args:
        metadata: leaders come from here; leadership errors request refreshes.
        auto_offset_reset: ``earliest``, ``latest`` or ``none``.
        fetch_min_bytes, fetch_max_wait_ms, fetch_max_bytes, max_partition_fetch_bytes: Kafka's.
        read_committed: drop aborted transactional records and read up to the LSO.
        check_crcs: verify batch CRCs.
        incremental_fetch_sessions: ask brokers for incremental fetch sessions
            (KIP-227) in the requests built with :meth:`session`'s sessions.

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
    ) -> None:
        self.metadata = metadata
        self.auto_offset_reset = auto_offset_reset
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.max_partition_fetch_bytes = max_partition_fetch_bytes
        self.read_committed = read_committed
        self.check_crcs = check_crcs
        self.incremental_fetch_sessions = incremental_fetch_sessions
        #: The fetch session with each broker (node id), made by :meth:`session`.
        self.sessions: dict[int, FetchSession] = {}
        self.partitions: dict[TopicPartition, PartitionState] = {}
        self.errors: list[BaseException] = []
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
        for tp in wanted:
            self.partitions.setdefault(tp, PartitionState())

    def add(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self.partitions.setdefault(tp, PartitionState())

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
        state.position = offset
        state.reset = None
        state.fetch_end = until
        state.drop_buffered()

    def request_reset(self, tp: TopicPartition, strategy: int) -> None:
        """Position the partition at EARLIEST (-2) or LATEST (-1) once the driver asks the leader."""
        state = self._state(tp)
        state.reset = strategy
        state.position = None
        state.drop_buffered()

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
        state.position = offset
        state.reset = None
        state.drop_buffered()

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
        if session is not None and version >= 7:
            return self._build_session_fetch(tps, version, session)
        # Rotate the order so that fetch.max.bytes does not always favour the same partitions.
        if len(tps) > 1:
            self._rotation = (self._rotation + 1) % len(tps)
            tps = tps[self._rotation :] + tps[: self._rotation]
        by_topic: dict[str, list[Any]] = {}
        positions: dict[TopicPartition, int] = {}
        for tp in tps:
            s = self.partitions[tp]
            offset = s.next_fetch_offset()
            assert offset is not None
            s.in_flight = True
            positions[tp] = offset
            by_topic.setdefault(tp.topic, []).append(
                fetch.FetchRequest.FetchPartition(
                    partition=tp.partition,
                    current_leader_epoch=self.metadata.leader_epoch(tp.topic, tp.partition)
                    if version >= 9
                    else -1,
                    fetch_offset=offset,
                    partition_max_bytes=self.max_partition_fetch_bytes,
                )
            )
        topics = []
        for t, p in by_topic.items():
            if version >= 13:
                topic_id = self.metadata.topic_id(t)
                if topic_id is None:
                    raise KeyError(f"no topic id for {t!r}; use Fetch v12")
                self._topic_names[topic_id] = t
                topics.append(fetch.FetchRequest.FetchTopic(topic_id=topic_id, partitions=p))
            else:
                topics.append(fetch.FetchRequest.FetchTopic(topic=t, partitions=p))
        kwargs: dict[str, Any] = {
            "replica_id": -1,
            "max_wait_ms": self.fetch_max_wait_ms,
            "min_bytes": self.fetch_min_bytes,
            "topics": topics,
        }
        if version >= 3:
            kwargs["max_bytes"] = self.fetch_max_bytes
        if version >= 4:
            kwargs["isolation_level"] = 1 if self.read_committed else 0
        if version >= 7:
            kwargs["session_id"] = 0
            kwargs["session_epoch"] = -1  # full fetches; no incremental sessions
        return fetch.FetchRequest(**kwargs), positions

    def _request_kwargs(self, version: int) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "replica_id": -1,
            "max_wait_ms": self.fetch_max_wait_ms,
            "min_bytes": self.fetch_min_bytes,
        }
        if version >= 3:
            kwargs["max_bytes"] = self.fetch_max_bytes
        if version >= 4:
            kwargs["isolation_level"] = 1 if self.read_committed else 0
        return kwargs

    def _build_session_fetch(
        self, tps: list[TopicPartition], version: int, session: FetchSession
    ) -> tuple[Any, dict[TopicPartition, int]]:
        if len(tps) > 1:
            self._rotation = (self._rotation + 1) % len(tps)
            tps = tps[self._rotation :] + tps[: self._rotation]
        md = self.metadata
        null = uuid.UUID(int=0)
        wanted: dict[TopicPartition, SessionPartition] = {}
        for tp in tps:
            offset = self.partitions[tp].next_fetch_offset()
            assert offset is not None
            wanted[tp] = SessionPartition(
                md.topic_id(tp.topic) or null,
                offset,
                -1,
                self.max_partition_fetch_bytes,
                md.leader_epoch(tp.topic, tp.partition) if version >= 9 else -1,
            )
        plan = session.build(wanted)
        if version >= 13 and not plan.use_topic_ids:
            # fetch_version should have chosen v12: start over with a full fetch.
            session.handle_error()
            raise KeyError("a topic of the fetch session has no topic id; use Fetch v12")
        positions = FetchPositions(session, version)
        for tp, data in plan.partitions.items():
            self.partitions[tp].in_flight = True
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
                self._topic_names[ids[t]] = t
                topics.append(fetch.FetchRequest.FetchTopic(topic_id=ids[t], partitions=p))
            else:
                topics.append(fetch.FetchRequest.FetchTopic(topic=t, partitions=p))
        forget: dict[tuple[str, uuid.UUID], list[int]] = {}
        gone = list(plan.to_forget)
        if version >= 13:
            gone += plan.to_replace  # the old topic id leaves the session
        for tp, topic_id in gone:
            key = (tp.topic, topic_id) if version >= 13 else (tp.topic, null)
            forget.setdefault(key, []).append(tp.partition)
        forgotten = [
            fetch.FetchRequest.ForgottenTopic(topic_id=i, partitions=p)
            if version >= 13
            else fetch.FetchRequest.ForgottenTopic(topic=t, partitions=p)
            for (t, i), p in forget.items()
        ]
        kwargs = self._request_kwargs(version)
        kwargs.update(
            topics=topics,
            forgotten_topics_data=forgotten,
            session_id=plan.session_id,
            session_epoch=plan.epoch,
        )
        return fetch.FetchRequest(**kwargs), positions

    def build_close_fetch(self, session: FetchSession, version: int) -> Any | None:
        """The request closing ``session`` at the broker (epoch -1, no
        partitions), or None when there is no session to close (see
        :meth:`FetchSession.close_plan`)."""
        if version < 7:
            return None
        plan = session.close_plan()
        if plan is None:
            return None
        kwargs = self._request_kwargs(version)
        kwargs.update(session_id=plan.session_id, session_epoch=plan.epoch, max_wait_ms=0)
        return fetch.FetchRequest(**kwargs)

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
        got = False
        names = self._topic_names
        for t in response.responses:
            topic = t.topic or names.get(t.topic_id, "")
            for p in t.partitions:
                tp = TopicPartition(topic, p.partition_index)
                s = self.partitions.get(tp)
                asked = positions.get(tp)
                if s is None or asked is None or s.next_fetch_offset() != asked:
                    continue  # revoked or sought while the fetch was in flight
                code = p.error_code
                if code == ErrorCode.NONE:
                    s.high_watermark = p.high_watermark
                    if p.last_stable_offset >= 0:
                        s.last_stable_offset = p.last_stable_offset
                    if p.log_start_offset >= 0:
                        s.log_start_offset = p.log_start_offset
                    if p.records:
                        size = len(p.records)
                        s.bytes_fetched += size
                        self.bytes_fetched += size
                        aborted = None
                        if self.read_committed and p.aborted_transactions:
                            aborted = sorted(
                                (a.first_offset, a.producer_id) for a in p.aborted_transactions
                            )
                        data = _Completed(asked, p.records, aborted, blob_next_offset(p.records))
                        if s.completed is None:
                            s.completed = data
                        else:
                            s.prefetched = data
                        got = True
                elif code == ErrorCode.OFFSET_OUT_OF_RANGE:
                    if self.auto_offset_reset == "none":
                        self.errors.append(OffsetOutOfRangeError(tp, asked))
                    else:
                        self.request_reset(
                            tp, EARLIEST if self.auto_offset_reset == "earliest" else LATEST
                        )
                        self.reset_wanted = True
                elif code in REFRESH_ERRORS:
                    leader = p.current_leader  # KIP-951 hint (v12+), -1 when absent
                    if leader.leader_id >= 0:
                        self.metadata.on_leader_hint(
                            tp.topic, tp.partition, leader.leader_id, leader.leader_epoch
                        )
                    self.metadata.on_partition_error(code, tp.topic, tp.partition)
                else:
                    hint = (
                        f": the client's principal needs READ on topic {tp.topic!r} "
                        "(an ACL on the broker)"
                        if code == ErrorCode.TOPIC_AUTHORIZATION_FAILED
                        else ""
                    )
                    self.errors.append(
                        KafkaError(code, f"fetching {tp.topic}-{tp.partition}{hint}")
                    )
        return got

    # -- handing out records --------------------------------------------------------------

    def has_data(self) -> bool:
        return bool(self.errors) or any(
            s.completed is not None and not s.paused for s in self.partitions.values()
        )

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
        if self.errors:
            raise self.errors.pop(0)
        out: dict[TopicPartition, Any] = {}
        left = max_records
        for tp, s in self.partitions.items():
            if left <= 0:
                break
            c = s.completed
            if c is None or s.paused:
                continue
            taken: Any = None
            while True:
                recs = c.records
                if c.index >= len(recs) and not c.done:
                    try:
                        recs = self._decode_more(tp, c, left)
                    except (KafkaError, DecodeError):
                        if out or taken:
                            break  # hand out what was taken; the error comes back next time
                        raise
                start = c.index
                end = min(start + left, len(recs))
                if end > start:
                    # A new list (the application may keep and change it), also
                    # when the fast path decoded into a tuple.
                    part = recs[start:end]
                    if isinstance(part, RecordColumns):
                        chunk: Any = part
                        s.position = part.last_offset + 1
                    else:
                        chunk = part if type(part) is list else list(part)
                        s.position = chunk[-1].offset + 1
                    # Only at a prefetch boundary is there a second chunk to join.
                    taken = chunk if taken is None else taken + chunk
                    left -= end - start
                    c.index = end
                if not c.drained:
                    if left > 0:
                        continue  # decode more of the blob
                    break
                # Drained: move on to the prefetched data when it continues from here.
                self.fetch_wanted = True
                if c.next_position > (s.position or 0):
                    s.position = c.next_position
                nxt, s.prefetched = s.prefetched, None
                if nxt is None or nxt.position != s.position:
                    s.completed = None
                    break
                s.completed = c = nxt
                if left <= 0:
                    break
            if taken:
                out[tp] = taken
                s.records_taken += len(taken)
                self.records_taken += len(taken)
        return out

    def _decode_more(
        self, tp: TopicPartition, c: _Completed, want: int
    ) -> Sequence[ConsumerRecord] | RecordColumns:
        """Decode the next entries of ``c`` until ``want`` records (or the end) are in.

        The records (at or after the fetch position) replace ``c.records``; ``c``
        keeps where decoding stands. A corrupt batch ends the blob after records
        decoded before it (the error comes back when the position reaches it)
        and raises when it is the first thing to decode.
        """
        prefix = (tp.topic, tp.partition)
        columns = self._columns  # None: record tuples; else columns, with headers or not
        # Joined at the end: a run of plain batches stays the one tuple the fast path made.
        parts: list[Any] = []
        n = 0
        position = c.position
        blob = c.blob
        aborted = c.aborted
        # With aborted transactions to drop, transactional batches go the ordinary way.
        stop_at_transactional = aborted is not None
        verify = self.check_crcs
        pos = c.cursor
        while n < want:
            # The per-record hot path: the codec builds the ConsumerRecords of a
            # run of plain batches itself (in C when built), skipping records
            # below the position; the entry after the run goes the ordinary way.
            run: Any
            if columns is None:
                run, pos, run_next = decode_batch_run_as(
                    blob,
                    pos,
                    ConsumerRecord,
                    prefix=prefix,
                    min_offset=position,
                    verify=verify,
                    stop_at_transactional=stop_at_transactional,
                    max_records=want - n,
                )
            else:
                run, pos, run_next = decode_batch_run_columns(
                    blob,
                    pos,
                    min_offset=position,
                    headers=columns,
                    verify=verify,
                    stop_at_transactional=stop_at_transactional,
                    max_records=want - n,
                )
            c.cursor = pos
            if run_next is not None:
                parts.append(run)
                n += len(run)
                c.next_position = run_next
                if n >= want:
                    break
            try:
                entry = next(iter_batches(blob, pos), None)
            except DecodeError:
                if n:
                    c.done = True
                    break
                raise
            if entry is None:
                c.done = True
                break
            header, view = entry
            if header.next_offset <= position:
                c.cursor = pos = pos + len(view)
                continue
            records: Sequence[ConsumerRecord] | RecordColumns
            if isinstance(header, RecordBatchHeader):
                if aborted is not None:
                    while c.aborts_seen < len(aborted) and (
                        aborted[c.aborts_seen][0] <= header.last_offset
                    ):
                        c.aborted_open.add(aborted[c.aborts_seen][1])
                        c.aborts_seen += 1
                attrs = header.attributes
                if attrs & 0x20:  # control batch: a transaction marker
                    c.aborted_open.discard(header.producer_id)
                    records = ()
                elif attrs & 0x10 and header.producer_id in c.aborted_open:
                    records = ()
                else:
                    try:
                        if columns is None:
                            _, records = decode_batch_as(
                                view,
                                ConsumerRecord,
                                prefix=prefix,
                                suffix=((attrs >> 3) & 1, header.partition_leader_epoch),
                                min_offset=position,
                                verify=verify,
                            )
                        else:
                            _, records = decode_batch_columns(
                                view, min_offset=position, headers=columns, verify=verify
                            )
                    except DecodeError as exc:
                        if n:
                            c.done = True  # hand out what precedes; the error comes back
                            break
                        raise KafkaError(
                            ErrorCode.CORRUPT_MESSAGE, f"{tp.topic}-{tp.partition}: {exc}"
                        ) from exc
            else:
                try:
                    legacy = decode_legacy_entry(view, verify=verify)
                except DecodeError:
                    if n:
                        c.done = True
                        break
                    raise
                ts_type = (header.attributes >> 3) & 1 if header.magic else NO_TIMESTAMP_TYPE
                if legacy and legacy[0].offset < position:
                    legacy = [r for r in legacy if r.offset >= position]
                if columns is not None:
                    records = RecordColumns.whole(ColumnBuffers.pack(legacy, ts_type, columns))
                else:
                    # tuple.__new__ skips the NamedTuple constructor, and concatenating to
                    # the decoded record tuple is the cheapest way to widen it.
                    suffix = (ts_type, -1)
                    records = [_new(ConsumerRecord, prefix + r + suffix) for r in legacy]
            if records:
                parts.append(records)
                n += len(records)
            c.next_position = header.next_offset
            c.cursor = pos = pos + len(view)
        out: Sequence[ConsumerRecord] | RecordColumns
        if columns is not None:
            out = RecordColumns.join(parts)
        else:
            out = parts[0] if len(parts) == 1 else list(itertools.chain.from_iterable(parts))
        c.records = out
        c.index = 0
        return out


class ConsumedPositions:
    """What commits commit: the position after the last record the application processed.

    Rules (at-least-once): records handed out by a poll count as processed
    once the *next* poll starts (:meth:`poll_started`); an explicit
    :meth:`all` (``commit()`` without offsets) counts everything handed out
    so far. Partitions that leave the assignment are forgotten.
    """

    __slots__ = ("_done", "_handed")

    def __init__(self) -> None:
        self._done: dict[TopicPartition, int] = {}
        self._handed: dict[TopicPartition, int] = {}

    def handed_out(self, tp: TopicPartition, next_offset: int) -> None:
        """Records of ``tp`` up to ``next_offset`` went to the application."""
        self._handed[tp] = next_offset

    def poll_started(self) -> None:
        if self._handed:
            self._done.update(self._handed)
            self._handed = {}

    def processed(self, assigned: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Positions as of the last poll's start (auto-commit)."""
        return {tp: off for tp, off in self._done.items() if tp in assigned}

    def all(self, assigned: set[TopicPartition]) -> dict[TopicPartition, int]:
        """Positions after everything handed out (``commit()``)."""
        self.poll_started()
        return self.processed(assigned)

    def forget(self, tps: Iterable[TopicPartition]) -> None:
        for tp in tps:
            self._done.pop(tp, None)
            self._handed.pop(tp, None)

    def rewind(self, tp: TopicPartition, next_offset: int) -> None:
        """Records of ``tp`` from ``next_offset`` on were handed out but not
        processed (a caller gave them back): commits stop before them."""
        for positions in (self._done, self._handed):
            if positions.get(tp, next_offset) > next_offset:
                positions[tp] = next_offset


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
