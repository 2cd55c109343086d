"""A share consumer's fetching and acknowledgements (KIP-932), without I/O.

:class:`ShareFetcher` decides which ShareFetch and ShareAcknowledge requests go
to which broker, keeps the records they acquire until the application takes
them, and turns the application's acknowledgements into acknowledgement
batches. The driver (:mod:`.share_consumer`) sends what :meth:`ShareFetcher.requests`
returns and feeds back :meth:`~ShareFetcher.on_response` /
:meth:`~ShareFetcher.on_failure`; nothing here blocks, reads a clock or
touches a socket.

It is five modules: this one (what to send when, the acknowledgements
pending, the answers), :mod:`.share_sessions` (sessions and the requests),
:mod:`.share_acks` (acknowledgement types, batches, units and the delivered
records' types), :mod:`.share_buffer` (the records acquired and not handed out
yet) and :mod:`.share_records` (decoding the acquired records). Every name stays importable from here.

Rules and invariants:

* One share session per broker that leads assigned partitions
  (:class:`ShareSession`). Its epoch is 0 until a ShareFetch opens it; every
  answered request moves it on by one, wrapping from 2**31-1 to 1; -1 (on
  ShareAcknowledge) closes it. SHARE_SESSION_NOT_FOUND,
  INVALID_SHARE_SESSION_EPOCH, SHARE_SESSION_LIMIT_REACHED and a lost
  connection reset it to 0, so the next ShareFetch lists every partition
  again; another request-level error still moves it on (as Kafka's client does).
* At most one request is in flight per broker, since both APIs share the
  session's epoch. A ShareFetch at epoch 0 lists every partition the session
  should fetch; later ones list only partitions added (and those carrying
  acknowledgements) and name the ones dropped in ForgottenTopicsData. A topic
  recreated under a new id is dropped and added again.
* Fetching is demand driven, as in Kafka's client: :meth:`ShareFetcher.want_records`
  (the application polled with nothing buffered) starts fetching; a response
  that brings records stops it until the application wants more. Records sit
  acquired (their acquisition locks run) until they are handed out, so nothing
  is prefetched beyond one response per broker.
* Records handed to the application are exactly the offsets inside the
  response's AcquiredRecords ranges (a batch may cover more), each with its
  range's delivery count. (A batch inside one range whose records carry its
  offsets one by one, the usual case, is decoded straight into ShareRecords;
  any other is filtered record by record, with the same result.) An acquired
  offset that carries no record in the data (a control record, a record
  removed by compaction) is acknowledged as a GAP (type 0); acquired offsets
  past the end of the data (a batch cut off by the size limit) are released,
  never marked as gaps. A corrupt batch's acquired records are rejected and
  the error is raised by the next poll (Kafka's client does both). Records
  acquired for a partition that has left the assignment meanwhile are
  released at once.
* Acknowledgements: records handed out by the last poll are *delivered*;
  :meth:`ShareFetcher.acknowledge` types one of them (again: the type changes)
  until :meth:`ShareFetcher.take_acknowledged` moves every typed one out
  (poll, commit and close do): from then on they are *pending* for the broker
  that delivered them. Pending acknowledgements ride on that broker's next
  ShareFetch when the fetch keeps all their partitions in an open session;
  otherwise (a partition dropped from the assignment, no fetch wanted) they go
  in a ShareAcknowledge first. Acknowledgements meant for a ShareAcknowledge
  (:meth:`ShareFetcher.send_pending_now`, retries) that have not left when a
  ShareFetch to their broker does ride on it under the same condition (one
  round trip, and one share-state write on the broker, instead of two),
  unless they belong to a commit; they keep a ShareAcknowledge's retries. A
  session at epoch 0 cannot take any: Kafka refuses acknowledgements on the
  request that opens a session, so they fail with INVALID_SHARE_SESSION_EPOCH
  (or SHARE_SESSION_NOT_FOUND for a ShareAcknowledge), as in Kafka's client.
* Acknowledgements travel as batches (:func:`acknowledgement_batches`): a run
  of consecutive offsets is one batch; a run of one type carries that one
  type, a mixed run one type per offset, except that long stretches of one
  type inside it become batches of their own.
* :meth:`ShareFetcher.commit` sends every pending acknowledgement in a
  ShareAcknowledge and reports per partition: None, or the error. Retriable
  partition errors are sent again (with backoff) until the commit's deadline,
  then fail with REQUEST_TIMED_OUT; session errors and lost connections fail
  at once. Every acknowledgement sent ends in exactly one :class:`AckOutcome`
  (for the acknowledgement commit callback).
* Renewing (AcknowledgeType.RENEW, KIP-1222): a record typed RENEW is
  pending as any other, but travels only in a ShareAcknowledge marked
  IsRenewAck (never on a ShareFetch, where Kafka would refuse to fetch); the
  record is kept, and once the broker renewed its lock it is buffered again,
  first, so a later poll hands it out again (a failed renewal is reported and
  the record is not). A broker serving ShareAcknowledge v1 cannot renew: the
  driver fails such a request's acknowledgements with UNSUPPORTED_VERSION.
* Closing (:meth:`ShareFetcher.close`): each open session gets a last
  ShareAcknowledge at epoch -1 carrying what is still pending; records
  buffered and not handed out are released first.
"""

from __future__ import annotations

import math
import random
import uuid
from collections import Counter, deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from functools import partial
from typing import Any

from trafka.codec import ErrorCode, KafkaError

from ._backoff import backoff_delay
from .consumer_types import TopicPartition
from .metadata import REFRESH_ERRORS, MetadataCache
from .share_acks import (
    GAP,
    AcknowledgeType,
    AckOutcome,
    AckUnit,
    Deliveries,
    ShareCommit,
    acknowledgement_batches,
    can_ride,
    renews,
)
from .share_buffer import RecordBuffer
from .share_records import ShareRecord, decode_acquired
from .share_sessions import (
    FINAL_EPOCH,
    INITIAL_EPOCH,
    SESSION_ERRORS,
    ShareRequest,
    ShareSession,
    build_share_acknowledge,
    build_share_fetch,
    next_epoch,
)
from .statistics.counters import Interval, error_name

__all__ = [
    "FINAL_EPOCH",
    "GAP",
    "INITIAL_EPOCH",
    "AckOutcome",
    "AcknowledgeType",
    "ShareCommit",
    "ShareFetcher",
    "ShareRecord",
    "ShareRequest",
    "ShareSession",
    "acknowledgement_batches",
    "decode_acquired",
    "next_epoch",
]


def _error(code: int, what: str, message: str | None) -> KafkaError:
    return KafkaError(code, f"{what}: {message}" if message else what)


class ShareFetcher:
    """Share sessions, acquired records and acknowledgements of one share consumer.

    Args:
        metadata: partition leaders and topic ids come from here; leadership
            errors ask it for a refresh.
        group_id: the share group.
        member_id: this member's id (the one its heartbeats use).
        max_poll_records: ShareFetch MaxRecords and BatchSize.
        fetch_min_bytes, fetch_max_wait_ms, fetch_max_bytes: Kafka's.
        check_crcs: verify batch CRCs.
        ack_timeout: seconds an acknowledgement not given to commit() may be retried.
        retry_backoff, retry_backoff_max: seconds between retries.
        rng: for backoff jitter.
        record_limit: ShareAcquireMode RECORD_LIMIT (KIP-1206): brokers acquire at
            most ``max_poll_records`` per fetch (else whole batches).
    """

    def __init__(
        self,
        metadata: MetadataCache,
        *,
        group_id: str,
        member_id: str,
        max_poll_records: int = 500,
        fetch_min_bytes: int = 1,
        fetch_max_wait_ms: int = 500,
        fetch_max_bytes: int = 52_428_800,
        check_crcs: bool = True,
        ack_timeout: float = 60.0,
        retry_backoff: float = 0.1,
        retry_backoff_max: float = 1.0,
        rng: random.Random | None = None,
        record_limit: bool = False,
    ) -> None:
        self.metadata = metadata
        self.record_limit = record_limit
        self.group_id = group_id
        self.member_id = member_id
        self.max_poll_records = max_poll_records
        self.fetch_min_bytes = fetch_min_bytes
        self.fetch_max_wait_ms = fetch_max_wait_ms
        self.fetch_max_bytes = fetch_max_bytes
        self.check_crcs = check_crcs
        self.ack_timeout = ack_timeout
        self.retry_backoff = retry_backoff
        self.retry_backoff_max = retry_backoff_max
        self._rng = rng or random.Random()
        self.assignment: frozenset[TopicPartition] = frozenset()
        self.sessions: dict[int, ShareSession] = {}
        #: Set by the application's demand, cleared by a response with records.
        self.fetch_wanted = False
        #: Set when a partition's leader or topic id is unknown (the driver refreshes).
        self.metadata_wanted = False
        #: From the last ShareFetch response (None before the first).
        self.acquisition_lock_timeout_ms: int | None = None
        #: Errors for the application's next poll.
        self.errors: deque[BaseException] = deque()
        #: Finished acknowledgements, for the acknowledgement commit callback.
        self.outcomes: deque[AckOutcome] = deque()
        #: Finished commits.
        self.commits_done: deque[ShareCommit] = deque()
        self.closing = False
        #: Totals (statistics): records handed out; acknowledged records per
        #: type the brokers took; records per error name whose acknowledgement failed.
        self.records_taken = 0
        self.acknowledged: dict[int, int] = {}
        self.acknowledgements_failed: dict[str, int] = {}
        #: Per ShareFetch answered without a top-level error (KIP-714's fetch
        #: manager metrics): its record bytes, and the records it brought to
        #: the buffer (counted per answer, not per record).
        self.fetch_bytes = Interval()
        self.fetch_records = Interval()
        self._busy: set[int] = set()
        self._closed_nodes: set[int] = set()
        self._fetch_retry_at: dict[int, float] = {}
        self._fetch_failures: dict[int, int] = {}
        # Handed out by the last poll, and the types given to them; and the records
        # acquired and not handed out yet.
        self._deliveries = Deliveries()
        self._buffer = RecordBuffer(self._deliveries)
        # Pending, not yet in a request: node -> partition -> offset -> type.
        self._pending: dict[int, dict[TopicPartition, dict[int, int]]] = {}
        # For a ShareAcknowledge: node -> units (waiting for their retry_at).
        self._queued: dict[int, list[AckUnit]] = {}
        self._names: dict[uuid.UUID, str] = {}

    # -- inputs ---------------------------------------------------------------------------

    def set_assignment(self, partitions: Iterable[TopicPartition]) -> None:
        """The partitions the group assigns now.

        Records buffered for a partition that left are released (records
        already handed out stay acknowledgeable, and their acknowledgements
        are still sent).
        """
        new = frozenset(partitions)
        gone = self.assignment - new
        self.assignment = new
        if gone and self._buffer:
            self._buffer.release(self._add_pending, gone)

    def want_records(self) -> None:
        """The application polled with nothing buffered: fetch."""
        if not self.closing:
            self.fetch_wanted = True

    # -- the application's side -----------------------------------------------------------

    def has_records(self) -> bool:
        return bool(self._buffer)

    def take(self, max_records: int) -> list[ShareRecord]:
        """Up to ``max_records`` buffered records (not deserialized); they become delivered."""
        out = self._buffer.take(max_records)
        self.records_taken += len(out)
        return out

    def give_back(self, records: Sequence[ShareRecord]) -> None:
        """Records taken but not handed out after all: buffered again, in order, first."""
        self.records_taken -= len(records)
        self._buffer.give_back(records)

    def acknowledge(self, tp: TopicPartition, offset: int, kind: int) -> None:
        """Type a delivered record (typing it again changes the type); RENEW keeps it
        to be delivered again (:meth:`.RecordBuffer.type`).

        Raises:
            UsageError: the record is not among those delivered by the last
                poll, or its acknowledgement was already taken (committed).
        """
        self._buffer.type(tp, offset, kind)

    def acknowledge_all(
        self, kind: int, skip: Collection[tuple[TopicPartition, int]] = frozenset()
    ) -> None:
        """Type every delivered record that has no type yet (implicit acknowledgement),
        except the ``(partition, offset)`` pairs in ``skip``."""
        self._deliveries.acknowledge_all(kind, skip)

    def unacknowledged(self) -> int:
        """Delivered records without a type."""
        return self._deliveries.unacknowledged()

    def take_acknowledged(self) -> int:
        """Move every typed delivered record to pending; returns how many stay untyped."""
        return self._deliveries.take_typed(self._pending)

    def send_pending_now(self, now: float) -> None:
        """Pending acknowledgements leave in ShareAcknowledge requests rather than
        waiting for a fetch (the application took records that were buffered)."""
        for node in list(self._pending):
            self._queue(node, self._package(node, None, now))

    def commit(self, now: float, timeout: float, cookie: Any = None) -> ShareCommit:
        """Send every pending acknowledgement now; the commit is done once all are answered."""
        commit = ShareCommit(cookie)
        for node in list(self._pending):
            units = self._package(node, commit, now + timeout)
            commit.pending += len(units)
            self._queue(node, units)
        if commit.pending == 0:
            commit.done = True
        return commit

    def close(self, now: float) -> None:
        """Release what is buffered and close every session (ShareAcknowledge at epoch -1)."""
        if self.closing:
            return
        self.closing = True
        self.fetch_wanted = False
        self._buffer.release(self._add_pending)

    @property
    def close_done(self) -> bool:
        """Every session closed (or failed to) and no request in flight."""
        if not self.closing or self._busy:
            return False
        nodes = set(self.sessions) | set(self._pending) | set(self._queued)
        return nodes <= self._closed_nodes

    # -- what to send ---------------------------------------------------------------------

    def requests(self, now: float) -> list[ShareRequest]:
        """The requests to send now, at most one per broker without one in flight."""
        self._expire(now)
        for node in [n for n, at in self._fetch_retry_at.items() if at <= now]:
            del self._fetch_retry_at[node]  # the backoff is over
        wanted: dict[int, dict[TopicPartition, uuid.UUID]] = {}
        if self.fetch_wanted and not self.closing:
            wanted = self._wanted_by_node()
        nodes = set(self.sessions) | set(self._pending) | set(self._queued) | set(wanted)
        out = []
        for node in sorted(nodes):
            if node in self._busy:
                continue
            request = self._next_request(node, wanted.get(node), now)
            if request is not None:
                self._busy.add(node)
                out.append(request)
        return out

    def next_deadline(self) -> float | None:
        """When :meth:`requests` may have something new without any input (None: never).

        A broker with a request in flight is left out: its answer is an input.
        """
        times = [
            u.retry_at
            for node, units in self._queued.items()
            if node not in self._busy
            for u in units
            if u.retry_at > -math.inf
        ]
        times += [u.deadline for units in self._queued.values() for u in units]
        if self.fetch_wanted and not self.closing:
            times += [t for n, t in self._fetch_retry_at.items() if n not in self._busy]
        return min(times) if times else None

    def _wanted_by_node(self) -> dict[int, dict[TopicPartition, uuid.UUID]]:
        md = self.metadata
        out: dict[int, dict[TopicPartition, uuid.UUID]] = {}
        for tp in sorted(self.assignment):
            leader = md.leader_for(tp.topic, tp.partition)
            tid = md.topic_id(tp.topic)
            if leader is None or tid is None:
                self.metadata_wanted = True
                continue
            out.setdefault(leader, {})[tp] = tid
        return out

    def _next_request(
        self, node: int, wanted: dict[TopicPartition, uuid.UUID] | None, now: float
    ) -> ShareRequest | None:
        session = self.sessions.get(node)
        if self.closing:
            if node in self._closed_nodes:
                return None
            self._closed_nodes.add(node)
            units = self._queued.pop(node, []) + self._package(node, None, now)
            if session is None or not session.is_open:
                self.sessions.pop(node, None)
                self._fail(units, KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND, "no share session"))
                return None
            return self._acknowledge_request(node, session, units, closing=True)
        if not wanted or now < self._fetch_retry_at.get(node, -math.inf):
            wanted = None  # no fetch now
        pending = self._pending.get(node)
        queued = self._queued.get(node, [])
        due = [u for u in queued if u.retry_at <= now]
        ride: list[AckUnit] = []
        if due:
            self._queued[node] = [u for u in queued if u.retry_at > now]
            if not self._queued[node]:
                del self._queued[node]
            if session is not None and session.is_open:
                if wanted is not None and can_ride(due, pending or {}, wanted, session.partitions):
                    ride = due  # a fetch leaves now: it takes them, one round trip less
                else:
                    return self._acknowledge_request(node, session, due)
            else:
                self._fail(due, KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND, "no share session"))
        if wanted is not None:
            if session is None:
                session = self.sessions[node] = ShareSession(node)
            carried: list[AckUnit] = ride
            if pending:
                if not session.is_open:
                    units = self._package(node, None, now)
                    self._fail(
                        units,
                        KafkaError(
                            ErrorCode.INVALID_SHARE_SESSION_EPOCH,
                            "acknowledgements cannot open a share session",
                        ),
                    )
                elif all(
                    tp in wanted and tp in session.partitions and not renews(acks)
                    for tp, acks in pending.items()
                ):
                    carried = ride + self._package(node, None, now)
                else:
                    # A partition leaves the session: acknowledge before forgetting it.
                    return self._acknowledge_request(node, session, self._package(node, None, now))
            return self._fetch_request(node, session, wanted, carried)
        if pending:
            units = self._package(node, None, now)
            if session is not None and session.is_open:
                return self._acknowledge_request(node, session, units)
            self._fail(units, KafkaError(ErrorCode.SHARE_SESSION_NOT_FOUND, "no share session"))
        return None

    def _fetch_request(
        self,
        node: int,
        session: ShareSession,
        wanted: dict[TopicPartition, uuid.UUID],
        carried: list[AckUnit],
    ) -> ShareRequest:
        return build_share_fetch(
            node,
            session,
            wanted,
            carried,
            self._names,
            group_id=self.group_id,
            member_id=self.member_id,
            max_wait_ms=self.fetch_max_wait_ms,
            min_bytes=self.fetch_min_bytes,
            max_bytes=self.fetch_max_bytes,
            max_records=self.max_poll_records,
            acquire_mode=int(self.record_limit),  # (KIP-1206: 1 is RECORD_LIMIT)
        )

    def _acknowledge_request(
        self, node: int, session: ShareSession, units: list[AckUnit], *, closing: bool = False
    ) -> ShareRequest:
        return build_share_acknowledge(
            node,
            session,
            units,
            partial(self._topic_id, node),
            group_id=self.group_id,
            member_id=self.member_id,
            closing=closing,
        )

    def _topic_id(self, node: int, tp: TopicPartition) -> uuid.UUID | None:
        session = self.sessions.get(node)
        tid = session.partitions.get(tp) if session is not None else None
        if tid is None:
            tid = next((i for i, name in self._names.items() if name == tp.topic), None)
        return tid

    # -- answers ----------------------------------------------------------------------------

    def on_response(self, request: ShareRequest, body: Any, now: float) -> None:
        """The answer to ``request``."""
        self._busy.discard(request.node)
        if body.node_endpoints:
            self.metadata.learn_endpoints(body.node_endpoints)
        if request.is_fetch:
            self._on_fetch(request, body, now)
        else:
            self._on_acknowledge(request, body, now)

    def on_failure(self, request: ShareRequest, error: BaseException, now: float) -> None:
        """``request`` got no answer (connection lost, timeout): the session is gone."""
        node = request.node
        self._busy.discard(node)
        session = self.sessions.get(node)
        if session is not None:
            session.reset()
        if request.closing:
            self.sessions.pop(node, None)
        self._fail(list(request.units), error)
        if request.is_fetch:
            self._fetch_backoff(node, now)
        self.metadata.request_update()

    def _on_fetch(self, request: ShareRequest, body: Any, now: float) -> None:
        node = request.node
        session = self.sessions.setdefault(node, ShareSession(node))
        code = body.error_code
        if code:
            error = _error(code, f"ShareFetch to node {node}", body.error_message)
            if code in SESSION_ERRORS:
                session.reset()
            else:
                session.advance()
                if code in REFRESH_ERRORS:
                    self.metadata.request_update()
                else:
                    self.errors.append(error)
            again = ErrorCode.of(code).retriable and code not in SESSION_ERRORS
            for u in request.units:
                self._retry_or_fail(u, error, again and u.retriable, now)
            self._fetch_backoff(node, now)
            return
        session.advance()
        self._fetch_failures.pop(node, None)
        self._fetch_retry_at.pop(node, None)
        if body.acquisition_lock_timeout_ms > 0:
            self.acquisition_lock_timeout_ms = body.acquisition_lock_timeout_ms
        ack_codes: dict[TopicPartition, tuple[int, str | None]] = {}
        got = 0
        size = 0
        for t in body.responses:
            name = self._names.get(t.topic_id)
            if name is None:
                self.metadata_wanted = True
                continue
            for p in t.partitions:
                tp = TopicPartition(name, p.partition_index)
                ack_codes[tp] = (p.acknowledge_error_code, p.acknowledge_error_message)
                if p.error_code:
                    self._partition_error(tp, p)
                if p.records:
                    size += len(p.records)
                if p.acquired_records:
                    got += self._acquired(node, tp, p)
        self.fetch_bytes.add(size)
        self.fetch_records.add(got)
        for u in request.units:
            ack_code, message = ack_codes.get(u.tp, (0, None))
            if not ack_code:
                self._finish(u, None)
                continue
            error = _error(ack_code, f"acknowledging {u.tp.topic}-{u.tp.partition}", message)
            if u.retriable and ack_code in REFRESH_ERRORS:
                self.metadata.request_update()  # as for a ShareAcknowledge's
            self._retry_or_fail(u, error, u.retriable and ErrorCode.of(ack_code).retriable, now)
        if got:
            self.fetch_wanted = False

    def _partition_error(self, tp: TopicPartition, p: Any) -> None:
        code = p.error_code
        if code in REFRESH_ERRORS:
            leader = p.current_leader
            if leader.leader_id >= 0:
                self.metadata.on_leader_hint(
                    tp.topic, tp.partition, leader.leader_id, leader.leader_epoch
                )
            self.metadata.on_partition_error(code, tp.topic, tp.partition)
        else:
            self.errors.append(
                _error(code, f"ShareFetch {tp.topic}-{tp.partition}", p.error_message)
            )

    def _acquired(self, node: int, tp: TopicPartition, p: Any) -> int:
        """Buffer a partition's acquired records; returns how many were buffered."""
        ranges = sorted(
            (a.first_offset, a.last_offset, a.delivery_count) for a in p.acquired_records
        )
        if self.closing or tp not in self.assignment:
            self._add_pending(
                node,
                tp,
                {
                    o: AcknowledgeType.RELEASE
                    for first, last, _ in ranges
                    for o in range(first, last + 1)
                },
            )
            return 0
        records, acks, error = decode_acquired(tp, p.records or b"", ranges, self.check_crcs)
        if acks:
            self._add_pending(node, tp, acks)
        if error is not None:
            self.errors.append(error)
        if records:
            self._buffer.add(node, tp, records)
        return len(records)

    def _on_acknowledge(self, request: ShareRequest, body: Any, now: float) -> None:
        node = request.node
        session = self.sessions.get(node)
        code = body.error_code
        if request.closing:
            self.sessions.pop(node, None)
        elif session is not None:
            if code in SESSION_ERRORS:
                session.reset()
            else:
                session.advance()
        if not code and body.acquisition_lock_timeout_ms > 0:  # v2+ (KIP-1222)
            self.acquisition_lock_timeout_ms = body.acquisition_lock_timeout_ms
        if code:
            error = _error(code, f"ShareAcknowledge to node {node}", body.error_message)
            again = (
                ErrorCode.of(code).retriable and code not in SESSION_ERRORS and not request.closing
            )
            for u in request.units:
                self._retry_or_fail(u, error, again, now)
            return
        codes: dict[tuple[uuid.UUID, int], tuple[int, str | None]] = {}
        for t in body.responses:
            for p in t.partitions:
                codes[(t.topic_id, p.partition_index)] = (p.error_code, p.error_message)
                if p.error_code in REFRESH_ERRORS:
                    self.metadata.request_update()
        for u in request.units:
            tid = self._topic_id(node, u.tp)
            if tid is None:
                self._finish(
                    u,
                    KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_ID,
                        f"{u.tp.topic} was never fetched from node {node}",
                    ),
                )
                continue
            pcode, message = codes.get((tid, u.tp.partition), (0, None))
            if not pcode:
                self._finish(u, None)
                continue
            error = _error(pcode, f"acknowledging {u.tp.topic}-{u.tp.partition}", message)
            self._retry_or_fail(
                u, error, ErrorCode.of(pcode).retriable and not request.closing, now
            )

    # -- bookkeeping ------------------------------------------------------------------------

    def _add_pending(self, node: int, tp: TopicPartition, acks: Mapping[int, int]) -> None:
        if acks:
            self._pending.setdefault(node, {}).setdefault(tp, {}).update(acks)

    def _package(self, node: int, commit: ShareCommit | None, deadline: float) -> list[AckUnit]:
        """The node's pending acknowledgements as units (one per partition)."""
        pending = self._pending.pop(node, {})
        if commit is None:
            deadline += self.ack_timeout
        return [AckUnit(node, tp, acks, commit, deadline) for tp, acks in pending.items() if acks]

    def _queue(self, node: int, units: list[AckUnit]) -> None:
        for u in units:
            u.retriable = True
        if units:
            self._queued.setdefault(node, []).extend(units)

    def _expire(self, now: float) -> None:
        for node in list(self._queued):
            units = self._queued[node]
            late = [u for u in units if u.deadline <= now]
            if late:
                self._queued[node] = [u for u in units if u.deadline > now]
                if not self._queued[node]:
                    del self._queued[node]
                for u in late:
                    self._finish(
                        u,
                        KafkaError(
                            ErrorCode.REQUEST_TIMED_OUT,
                            f"acknowledging {u.tp.topic}-{u.tp.partition}: no success in time",
                        ),
                    )

    def _retry_or_fail(self, unit: AckUnit, error: KafkaError, again: bool, now: float) -> None:
        if again and now < unit.deadline:
            unit.attempts += 1
            unit.retry_at = now + backoff_delay(
                self.retry_backoff, self.retry_backoff_max, unit.attempts, self._rng
            )
            self._queue(unit.node, [unit])
        else:
            self._finish(unit, error)

    def _fail(self, units: Iterable[AckUnit], error: BaseException) -> None:
        for u in units:
            self._finish(u, error)

    def _finish(self, unit: AckUnit, error: BaseException | None) -> None:
        self.outcomes.append(AckOutcome(unit.tp, frozenset(unit.acks), error))
        self._buffer.renewed(unit.node, unit.tp, unit.acks, error is None and not self.closing)
        if error is None:
            kinds = set(unit.acks.values())
            counts = (
                {kinds.pop(): len(unit.acks)} if len(kinds) == 1 else Counter(unit.acks.values())
            )
            for kind, n in counts.items():
                self.acknowledged[kind] = self.acknowledged.get(kind, 0) + n
        else:
            name = error_name(error)
            self.acknowledgements_failed[name] = self.acknowledgements_failed.get(name, 0) + len(
                unit.acks
            )
        commit = unit.commit
        if commit is None:
            return
        if commit.results.get(unit.tp) is None:
            commit.results[unit.tp] = error
        commit.pending -= 1
        if commit.pending == 0 and not commit.done:
            commit.done = True
            self.commits_done.append(commit)

    def _fetch_backoff(self, node: int, now: float) -> None:
        n = self._fetch_failures.get(node, 0) + 1
        self._fetch_failures[node] = n
        self._fetch_retry_at[node] = now + backoff_delay(
            self.retry_backoff, self.retry_backoff_max, n, self._rng
        )
