"""Share sessions, ShareFetch and ShareAcknowledge (KIP-932): the share-partition
leader's side of share groups. Sans-IO apart from reading the partition logs and
writing the share-state journal.

:class:`ShareFetcher` holds every share-partition (:mod:`.partition`) of
every share group, the share sessions of their members, and the journal that
keeps the partitions' state across restarts (Kafka keeps it in
``__share_group_state`` through the share coordinator).

Rules and invariants:

* Initialisation. A share-partition is created the first time the group's
  assignment includes it (:meth:`ShareFetcher.partitions_assigned`) or a member
  fetches it, whichever comes first. Its start offset comes from the group's
  ``share.auto.offset.reset``: ``latest`` (the default) is the log end offset
  then, ``earliest`` the log start offset, ``by_duration:<ISO-8601>`` the first
  record at most that old (the log end offset when there is none).
* Share sessions are keyed by (group id, member id) and numbered by the request's
  ShareSessionEpoch. 0 opens one (replacing the member's previous session, whose
  records are released); it must not carry acknowledgements (INVALID_REQUEST).
  -1 closes one after applying the request's acknowledgements, releases what the
  member still holds in its partitions, and fetches nothing. Any other epoch
  must be the session's next one (INVALID_SHARE_SESSION_EPOCH; no session:
  SHARE_SESSION_NOT_FOUND); the next one after 2**31-1 is 1. A ShareFetch adds
  its Topics to the session (those that exist: an unknown topic id or
  partition is answered with its error and not kept) and removes its
  ForgottenTopicsData; it fetches every partition of the session, starting
  with a different one each time.
  ShareAcknowledge never opens a session (epoch 0: INVALID_SHARE_SESSION_EPOCH).
  A session ends with its connection or when the group is deleted; its
  member's records are then released. A member that leaves the group keeps its
  session until the session closes (a leaving client may send its leave
  heartbeat before its last acknowledgements); a member removed without a
  session has its records released at once.
* Acknowledgements are applied per partition, all or nothing (see
  :meth:`.SharePartition.acknowledge`), and written, before records are
  acquired, and reported in AcknowledgeErrorCode (ShareFetch) or ErrorCode
  (ShareAcknowledge). Acknowledging is allowed on a partition the session
  does not fetch. Type 4, RENEW (v2, KIP-1222), is allowed only in a request
  marked IsRenewAck (else INVALID_REQUEST for its partition); it restarts the
  records' locks, unless the group's ``share.renew.acknowledge.enable`` is false
  (INVALID_RECORD_STATE for the partition, as Kafka 4.4). A ShareFetch marked IsRenewAck must ask for nothing
  (MaxWaitMs, MinBytes, MaxBytes, MaxRecords 0, else INVALID_REQUEST for the
  request) and acquires nothing: it is answered at once.
* Acknowledging and releasing a member's records (its session closed or
  replaced, it left without one) are transitions until written
  (:mod:`.partition`, :mod:`.writes`). A failed write of acknowledgements
  (one node: the journal's) fails them alone, as Kafka 4.4's
  ``SharePartition.rollbackOrProcessStateUpdates`` and
  ``SharePartitionManager.mapAcknowledgementFutures`` do: the records they
  changed go back to their state from before
  (:meth:`.SharePartition.settle`: held again by the member, lock deadline
  and delivery counts unchanged; a release's too), and each of their partitions is answered
  UNKNOWN_SERVER_ERROR (Kafka's ``Errors.forException`` of a persister write
  that failed without a coordinator's error code); the ShareFetch still
  acquires and delivers, and the request is answered. Acquiring is not
  written first (as in Kafka): when the write after acquiring fails, only a
  share-partition never written yet (created by this fetch) is answered with
  the error, its records put back; the others deliver theirs. Any failed
  write (also of a lock expiry, a release, a closed session) leaves its
  share-partitions :attr:`~.SharePartition.dirty`, written with the next
  write, and is logged. The writing is :mod:`.writes`'.
* Acquisition honours the request's MaxRecords (500 when it is not positive)
  over all partitions, whole batches (ShareAcquireMode BATCH_OPTIMIZED, 0), or
  at most MaxRecords records, splitting a batch (RECORD_LIMIT, 1, KIP-1206;
  another mode is INVALID_REQUEST), and MaxBytes (the first partition with
  records always gets its first batch). ``share.isolation.level``
  read_committed stops at the last stable offset and archives the records of
  aborted transactions; control batches are archived and never handed out. The
  answer carries the record batches holding the acquired offsets and the
  acquired ranges with their delivery counts; a batch may hold offsets outside
  the ranges, which clients ignore, and an acquired range may hold offsets
  without a record (compacted away), which clients acknowledge as GAP.
* A ShareFetch that acquires nothing and reports no error waits up to MaxWaitMs
  (:meth:`ShareFetcher.fetch` returns a :class:`PendingFetch` not ``ready``):
  it is answered (:meth:`ShareFetcher.complete`) when records are appended to,
  or become available again in, one of its partitions, or at the deadline.
* Locks. An acquired record's lock ends ``share.record.lock.duration.ms`` after
  it was acquired; :meth:`ShareFetcher.tick` releases expired ones (and
  :meth:`ShareFetcher.next_deadline` says when).
* Refused answers. A ShareFetch answer refused after it acquired records (in a
  cluster: its share-state writes failed or did not settle in time) never
  reaches its member: :meth:`ShareFetcher.undeliver` puts back
  what it acquired (:meth:`.SharePartition.unacquire`: AVAILABLE at once, with
  the delivery counts from before) and wakes the fetches waiting there. Kafka
  never refuses a ShareFetch for a share-state write, so its member sees every
  acquisition; a closed connection, though, releases its session's records
  keeping their counts, here as in Kafka 4.4 (``SharePartitionManager``
  ``releaseSession`` from the share session cache's disconnect listener).
* Durability. After every request or tick, each share-partition whose durable
  form changed (:attr:`.SharePartition.dirty`) is written to the journal in one
  fsynced write before the answer goes out, so an acknowledged record is never
  delivered again after a restart. Acquisitions alone are not written: after a
  restart, records acquired and never acknowledged are available again.
* Cluster mode (the store is a :class:`~.persister.RemotePersister`): this
  broker serves only the partitions it leads (NOT_LEADER_OR_FOLLOWER for the
  others, acknowledgements included). A share-partition not in memory is read
  from its share coordinator first and acquires nothing until the answer
  arrives (its fetches are woken then); one never written is initialised as
  above and written. Writes go to the coordinators, and the handlers answer a
  request only once its writes are on the coordinators' in-sync replicas
  (:meth:`ShareFetcher.writes_mark`, :meth:`ShareFetcher.writes_outcome`).
  A share-partition whose leadership was lost is forgotten here (a new
  leader epoch of a leadership that went on keeps it); a write the
  coordinator refused with a fenced error forgets it too (read again, without
  what the write carried; another error rolls back that write's transitions
  alone, :mod:`.writes`), and so does a group with no
  share session left here (so that a change of the offsets admin, made while
  the group is empty, is read by the next member). The answer of a request
  whose writes failed fails their share-partitions alone
  (:meth:`ShareFetcher.writes_failed`, :meth:`ShareFetcher.fail_writes`):
  their acknowledgements are answered with the error, and so is a ShareFetch's
  partition with records from one fenced or forgotten (put back); the other
  partitions are answered as they are. The group coordinator is another broker's:
  assignments initialise nothing here.
* Dead letters (KIP-1191, :mod:`.dead_letters`). Before a
  share-partition acknowledges, releases or expires locks, it is told whether
  its group has a dead-letter queue now (:attr:`.SharePartition.dead_letters`);
  after each successful write, the dead letters of the ARCHIVING runs written
  are appended to the DLQ topic and those records archived, in a second
  write. ARCHIVING runs read from the journal at start are due at once
  (:meth:`ShareFetcher.next_deadline` is then 0). Cluster mode: a run is due
  once the coordinator has its ARCHIVING state (the write settled, or the
  state was read so); its dead letters are produced to the DLQ partition's
  leader (:mod:`.dead_letter_outbox`), and the records are archived when that
  write is done or given up, then written at the next tick. A share-partition
  with ARCHIVING records or dead letters on their way is not forgotten as
  idle; one forgotten otherwise (leadership lost, group or topic deleted)
  archives nothing when its write ends: its next leader reads the records as
  ARCHIVING and writes their dead letters again (at least once).
* Offsets admin (DescribeShareGroupOffsets, AlterShareGroupOffsets,
  DeleteShareGroupOffsets) works on the same share-partitions, with rules of
  its own (:mod:`.offsets_admin`); the journal is :mod:`.state_store`'s.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.errors import BrokerError
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k78_share_fetch as _sf
from trafka.codec.messages import k79_share_acknowledge as _sa

from .dead_letters import DeadLetters
from .log_reads import batch_spans, initial_offset, last_of, read_into
from .offsets_admin import ShareOffsetInfo, ShareOffsetsAdmin
from .partition import RENEW, AcquiredRange, SharePartition
from .persister import RemotePersister
from .share_config import DefaultShareConfig, ShareConfig
from .state_store import SP, ShareStateError, ShareStateStore
from .writes import FENCED, Acked, ShareWrites

if TYPE_CHECKING:
    from trafka.brokerlite.storage.log_manager import LogManager
    from trafka.brokerlite.transactions.eos import ProducerStates

__all__ = [
    "DEFAULT_MAX_RECORDS",
    "PendingFetch",
    "ShareConfig",
    "ShareFetcher",
    "ShareOffsetInfo",
    "ShareStateError",
    "ShareStateStore",
]

log = logging.getLogger("trafka.brokerlite")

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
DEFAULT_MAX_RECORDS = 500
_MAX_EPOCH = 2**31 - 1
_RECORD_LIMIT = 1  # ShareAcquireMode (KIP-1206); 0 is BATCH_OPTIMIZED
_ACQUIRE_MODES = (0, _RECORD_LIMIT)


# -- sessions and pending fetches -------------------------------------------------------


@dataclasses.dataclass(slots=True)
class ShareSession:
    """One member's share session on this broker."""

    group_id: str
    member_id: str
    conn_id: int
    epoch: int  # the epoch the next request must carry
    partitions: dict[tuple[uuid.UUID, int], None]  # ordered set
    rotation: int = 0


@dataclasses.dataclass(slots=True)
class _PartitionAnswer:
    """What a ShareFetch says about one partition."""

    error: ErrorCode = ErrorCode.NONE
    ack_error: ErrorCode | None = None  # None: no acknowledgement for it
    records: bytes | None = None
    acquired: list[AcquiredRange] = dataclasses.field(default_factory=list)
    # Where ``acquired`` was taken: the share-partition, its (topic, partition)
    # and the acquisition's lock deadline.
    source: tuple[SharePartition, tuple[str, int], int] | None = None

    def of(self, sp: SharePartition | None) -> bool:
        """Whether what was acquired for this answer was acquired in ``sp``."""
        return self.source is not None and self.source[0] is sp

    def put_back(self, member_id: str) -> tuple[SharePartition, tuple[str, int]] | None:
        """Put back what was acquired for this answer, never sent
        (:meth:`.SharePartition.unacquire`); the share-partition and where it
        is when any record was put back."""
        source, self.source = self.source, None
        acquired, self.acquired, self.records = self.acquired, [], None
        if source is None:
            return None
        sp, where, deadline = source
        back = [
            sp.unacquire(member_id, r.first, r.last, r.delivery_count, deadline) for r in acquired
        ]
        return (sp, where) if any(back) else None


@dataclasses.dataclass(slots=True)
class PendingFetch:
    """A ShareFetch being answered: ``ready`` to answer (:meth:`ShareFetcher.complete`),
    or else waiting for records (see the module rules)."""

    session: ShareSession
    max_records: int
    max_bytes: int
    deadline_ms: int
    watches: frozenset[tuple[str, int]]
    answers: dict[tuple[uuid.UUID, int], _PartitionAnswer]
    lock_ms: int
    ready: bool = False
    strict: bool = False  # RECORD_LIMIT (KIP-1206): MaxRecords is a hard limit


class ShareStateLoading(BrokerError):
    """A share-partition's state is being read from its share coordinator."""

    code = ErrorCode.NONE


def _next_epoch(epoch: int) -> int:
    return 1 if epoch >= _MAX_EPOCH else epoch + 1


# -- the manager ------------------------------------------------------------------------


class ShareFetcher(ShareOffsetsAdmin):
    """Share-partitions, share sessions and their journal (see the module rules): one
    state with the offsets :class:`ShareOffsetsAdmin` alters.

    Args:
        logs: the partition logs.
        producers: producer state, for read_committed.
        store: the share-state journal, or (cluster mode) the persister to the
            share coordinators (owned: closed by :meth:`close`).
        config_for: a group's share configuration.
        notify: called with ``(topic, partition)`` when records there become
            available again (to wake waiting fetches).
        leads: cluster mode: whether this broker leads a data partition.
        dead_letters: writes share groups' dead letters (None: none).
    """

    def __init__(
        self,
        logs: LogManager,
        producers: ProducerStates,
        store: ShareStateStore | RemotePersister,
        *,
        config_for: Callable[[str], ShareConfig] | None = None,
        notify: Callable[[str, int], None] | None = None,
        leads: Callable[[str, int], bool] | None = None,
        dead_letters: DeadLetters | None = None,
    ) -> None:
        self._logs = logs
        self._letters = dead_letters or DeadLetters(logs, None)
        self._producers = producers
        self._store = store
        self._remote = store if isinstance(store, RemotePersister) else None
        self._leads = leads
        if self._remote is not None:
            self._remote.on_loaded = self._state_arrived
            self._remote.on_lost = self._state_lost
            self._remote.on_written = self._written
        self._config_for = config_for or (lambda _group: DefaultShareConfig())
        self._notify = notify or (lambda _t, _p: None)
        self._partitions: dict[SP, SharePartition] = {}
        self._topic_ids: dict[SP, str] = {}
        self._sessions: dict[tuple[str, str], ShareSession] = {}
        self._writes = ShareWrites(
            store, self._partitions, self._topic_ids, self._notify, self._state_lost
        )
        self._deadline: int | None = None
        self._deadline_stale = True
        for key, data in store.partitions().items():
            config = self._config_for(key[0])
            try:
                sp = SharePartition.from_snapshot(
                    data,
                    delivery_count_limit=config.delivery_count_limit,
                    max_record_locks=config.partition_max_record_locks,
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ShareStateError(f"{store.path}: share-partition {key}: {exc}") from exc
            self._partitions[key] = sp
            self._topic_ids[key] = str(data.get("topic_id", ""))
        self._letters.bind(self._partitions, self._remote)

    # -- listener of the share-group coordinator ---------------------------------------------

    def partitions_assigned(
        self, group_id: str, partitions: set[tuple[str, int]], now_ms: int
    ) -> None:
        """Initialise the share-partitions a group's assignment now covers."""
        if self._remote is not None:
            return  # (their leaders are elsewhere: each initialises its own)
        for topic, partition in sorted(partitions):
            try:
                self._share_partition(group_id, topic, partition, now_ms)
            except BrokerError as exc:
                log.warning(
                    "share group %r: cannot initialise %s-%d: %s", group_id, topic, partition, exc
                )
        self._write()

    def member_removed(self, group_id: str, member_id: str, now_ms: int) -> None:
        """A member left or was fenced: release its records unless it still has
        a share session, which ends (and releases them) on its own. A leaving
        client sends its last acknowledgements and its leave heartbeat at once,
        to the leader and the coordinator, so the leave may come first."""
        if (group_id, member_id) not in self._sessions:
            self._release_member(group_id, member_id)
            self._write()

    def group_deleted(self, group_id: str) -> None:
        """A share group was deleted: forget its sessions and state."""
        for session_key in [k for k in self._sessions if k[0] == group_id]:
            del self._sessions[session_key]
        self._drop([k for k in self._partitions if k[0] == group_id])
        self._store.write([{"kind": "drop_group", "group": group_id}])

    def topic_deleted(self, topic: str) -> None:
        """A topic was deleted: forget its share-partitions in every group."""
        gone = [k for k in self._partitions if k[1] == topic]
        if not gone:
            return
        self._drop(gone)
        self._store.write([{"kind": "drop_topic", "topic": topic}])

    def connection_closed(self, conn_id: int) -> None:
        """End the sessions of a closed connection, releasing their records."""
        for key, session in list(self._sessions.items()):
            if session.conn_id == conn_id:
                del self._sessions[key]
                self._release_member(*key)
        self._write()

    # -- cluster mode -------------------------------------------------------------------------

    def leadership_changed(self, topic: str, partition: int, leads: bool) -> None:
        """This broker stopped leading a data partition, or leads it at a new
        leader epoch. A lost leadership forgets its share-partitions (a later one
        reads them from the coordinators again); a new epoch of a leadership that
        went on (the controller bumps it when it shrinks the ISR) keeps them."""
        if self._remote is None or leads:
            return
        self._drop([k for k in self._partitions if k[1:] == (topic, partition)])
        self._remote.forget(topic, partition)
        self._deadline_stale = True
        self._notify(topic, partition)

    def writes_mark(self) -> int:
        """Cluster mode: the last write handed to the persister so far (0 on one node)."""
        return self._writes.mark()

    def writes_outcome(self, after: int) -> ErrorCode | None:
        """Cluster mode: whether the writes since ``after`` (a :meth:`writes_mark`)
        are durable: NONE, None while one is on its way, else an error."""
        return self._writes.outcome(after)

    def writes_failed(self, after: int) -> dict[SP, ErrorCode]:
        """Cluster mode: the share-partitions whose writes since ``after`` failed."""
        return self._writes.failed(after)

    def _state_arrived(self, key: SP) -> None:
        self._notify(key[1], key[2])

    def _written(self, key: SP, tickets: list[int], code: ErrorCode, now_ms: int) -> None:
        self._writes.settled(key, tickets, code, now_ms)
        self._deadline_stale = True
        self._letters.settled(key, tickets, written=code == ErrorCode.NONE)

    def _state_lost(self, key: SP) -> None:
        self._drop([key])
        self._deadline_stale = True
        self._notify(key[1], key[2])

    # -- reading (tests, describe) ------------------------------------------------------------

    def share_partition(self, group_id: str, topic: str, partition: int) -> SharePartition | None:
        """The state of one share-partition, if it exists."""
        return self._partitions.get((group_id, topic, partition))

    def session(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def group_partitions(self, group_id: str) -> dict[tuple[str, int], SharePartition]:
        """Every share-partition of a group, keyed by (topic, partition)."""
        return {(k[1], k[2]): sp for k, sp in self._partitions.items() if k[0] == group_id}

    # -- requests -----------------------------------------------------------------------------

    def fetch(
        self, request: _sf.ShareFetchRequest, conn_id: int, now_ms: int
    ) -> _sf.ShareFetchResponse | PendingFetch:
        """Handle a ShareFetch: the answer of a request refused whole, else a
        :class:`PendingFetch`, ready (a closing session's too) or to wait on."""
        refused = _refusal(request)
        if refused is not None:
            return refused
        group_id, member_id = request.group_id or "", request.member_id or ""
        epoch, renewing = request.share_session_epoch, request.is_renew_ack
        key = (group_id, member_id)
        config = self._config_for(group_id)
        renew_until = self._renew_until(group_id, renewing, now_ms)
        if epoch == INITIAL_EPOCH:
            # Opened again: the old session goes, the member keeps what it holds
            # (Kafka's SharePartitionManager.newContext only removes the session).
            self._sessions.pop(key, None)
            session = ShareSession(group_id, member_id, conn_id, 1, {})
            self._sessions[key] = session
        else:
            found = self._session_for(key, epoch)
            if isinstance(found, ErrorCode):
                return _fetch_error(found, None)
            session = found
            session.conn_id = conn_id
        answers: dict[tuple[uuid.UUID, int], _PartitionAnswer] = {}
        acked: Acked = {}
        for topic in request.topics:
            for part in topic.partitions:
                tp = (topic.topic_id, part.partition_index)
                answer = answers.setdefault(tp, _PartitionAnswer())
                if batches := part.acknowledgement_batches:
                    answer.ack_error = self._acknowledge(
                        group_id, member_id, tp, batches, acked, renew_until
                    )
                if epoch != FINAL_EPOCH:
                    where = self._locate(tp)
                    if isinstance(where, ErrorCode):
                        answer.error = where  # reported now, never kept in the session
                    else:
                        session.partitions[tp] = None
        for forgotten in request.forgotten_topics_data:
            for index in forgotten.partitions:
                session.partitions.pop((forgotten.topic_id, index), None)
        code = self._write() if acked else ErrorCode.NONE  # (undone if it fails)
        for tp in acked:
            if answers[tp].ack_error == ErrorCode.NONE:
                answers[tp].ack_error = code
        lock_ms = config.record_lock_duration_ms
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            self._release_member(group_id, member_id)
            self._write()
            return PendingFetch(session, 0, 0, 0, frozenset(), answers, lock_ms, ready=True)
        session.epoch = _next_epoch(epoch)
        max_records = request.max_records if request.max_records > 0 else DEFAULT_MAX_RECORDS
        pending = PendingFetch(
            session,
            max_records,
            request.max_bytes,
            mono_ms(now_ms) + max(request.max_wait_ms, 0),
            frozenset(_watches(self._logs, session)),
            answers,
            lock_ms,
            ready=renewing,  # (fetches nothing)
            strict=request.share_acquire_mode == _RECORD_LIMIT,
        )
        if renewing:
            return pending
        acquired = self._acquire(pending, now_ms)
        self._write_acquired(pending)
        errors = any(a.error != ErrorCode.NONE for a in answers.values())
        # (an unknown topic or partition is answered at once, with its error)
        pending.ready = bool(
            acquired or errors or request.max_wait_ms <= 0 or not session.partitions
        )
        return pending

    def complete(self, pending: PendingFetch, now_ms: int) -> _sf.ShareFetchResponse:
        """The answer of a ShareFetch: a waiting one acquires now (records arrived,
        or its deadline passed)."""
        session = pending.session
        if (
            not pending.ready
            and self._sessions.get((session.group_id, session.member_id)) is session
        ):
            self._acquire(pending, now_ms)
            self._write_acquired(pending)
        pending.ready = True
        return _fetch_response(pending.answers, pending.lock_ms)

    def undeliver(self, pending: PendingFetch) -> None:
        """A ShareFetch answer that acquired records was refused, never sent: put
        back what it acquired (:meth:`.SharePartition.unacquire`: available at once,
        with the delivery counts from before), and wake the fetches waiting there."""
        self._put_back(pending, pending.answers.values())

    def fail_writes(self, pending: PendingFetch, failed: Mapping[SP, ErrorCode]) -> None:
        """Cluster mode: the writes of some share-partitions failed
        (:meth:`writes_failed`): this answer's acknowledgements there are answered
        with the error, and its records from one fenced or forgotten since (put
        back); one kept (its transitions rolled back: :mod:`.writes`) delivers them."""
        group_id = pending.session.group_id
        answers = []
        for (topic_id, index), answer in pending.answers.items():
            info = self._logs.topic_by_id(topic_id)
            key = (group_id, info.name if info is not None else "", index)
            if (code := failed.get(key)) is None:
                continue
            if answer.ack_error == ErrorCode.NONE:  # (None: it acknowledged nothing)
                answer.ack_error = code
            if answer.acquired and (code in FENCED or not answer.of(self._partitions.get(key))):
                answer.error = code
                answers.append(answer)
        self._put_back(pending, answers)

    def _put_back(self, pending: PendingFetch, answers: Iterable[_PartitionAnswer]) -> None:
        group_id, member_id = pending.session.group_id, pending.session.member_id
        for answer in answers:
            back = answer.put_back(member_id)
            if back is not None and self._partitions.get((group_id, *back[1])) is back[0]:
                self._notify(*back[1])
        self._deadline_stale = True

    def _write_acquired(self, pending: PendingFetch) -> None:
        """Write what acquiring changed: when the write fails, the records of a
        share-partition never written yet are put back and its answer is the
        error; the others are delivered (acquisition need not be durable)."""
        code = self._write()
        if code == ErrorCode.NONE:
            return
        group_id, member_id = pending.session.group_id, pending.session.member_id
        for answer in pending.answers.values():
            source = answer.source
            if source is not None and (group_id, *source[1]) in self._writes.unwritten:
                answer.put_back(member_id)
                answer.error = code

    def _write(self) -> ErrorCode:
        """Write what changed (:meth:`.ShareWrites.write`: NONE, or the error of a
        failed journal write, logged); cluster mode: then forget idle groups."""
        self._deadline_stale = True
        code = self._writes.write()
        if self._letters.flush(self._partitions, self._config_for, code == ErrorCode.NONE):
            self._writes.write()  # (a failure leaves them dirty, for the next write)
        if self._remote is not None:
            self._forget_idle()
        return code

    def acknowledge(
        self, request: _sa.ShareAcknowledgeRequest, now_ms: int
    ) -> _sa.ShareAcknowledgeResponse:
        """Handle a ShareAcknowledge."""
        group_id, member_id = request.group_id or "", request.member_id or ""
        if not group_id or not member_id or request.share_session_epoch == INITIAL_EPOCH:
            return _ack_refusal(request)
        key, epoch = (group_id, member_id), request.share_session_epoch
        found = self._session_for(key, epoch)
        if isinstance(found, ErrorCode):
            return _ack_error(found, None)
        acked: Acked = {}
        codes: dict[tuple[uuid.UUID, int], ErrorCode] = {}
        renew_until = self._renew_until(group_id, request.is_renew_ack, now_ms)
        for topic in request.topics:
            for part in topic.partitions:
                tp = (topic.topic_id, part.partition_index)
                batches = part.acknowledgement_batches
                codes[tp] = self._acknowledge(group_id, member_id, tp, batches, acked, renew_until)
        failed = self._write() if acked else ErrorCode.NONE
        if failed != ErrorCode.NONE:
            codes.update((tp, failed) for tp in acked if codes[tp] == ErrorCode.NONE)
        if epoch == FINAL_EPOCH:
            del self._sessions[key]
            self._release_member(group_id, member_id)
            self._write()
        else:
            found.epoch = _next_epoch(epoch)
        return _ack_response(request, codes, self._config_for(group_id).record_lock_duration_ms)

    # -- time ---------------------------------------------------------------------------------

    def tick(self, now_ms: int) -> None:
        """Release expired acquisition locks."""
        woken = []
        for (group, topic, partition), sp in self._partitions.items():
            if self._letters.mark(sp, self._config_for(group)).expire_locks(now_ms):
                woken.append((topic, partition))
        self._write()
        for topic, partition in woken:
            self._notify(topic, partition)

    def next_deadline(self) -> int | None:
        """When :meth:`tick` next has a lock to expire (computed again only after a
        request or tick changed something: the broker asks after every request)."""
        if self._letters.due:
            return 0
        if self._deadline_stale:
            deadlines = [
                d for sp in self._partitions.values() if (d := sp.next_deadline()) is not None
            ]
            self._deadline = min(deadlines) if deadlines else None
            self._deadline_stale = False
        return self._deadline

    def close(self) -> None:
        self._store.close()

    # -- internals ----------------------------------------------------------------------------

    def _session_for(self, key: tuple[str, str], epoch: int) -> ShareSession | ErrorCode:
        session = self._sessions.get(key)
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch != FINAL_EPOCH and epoch != session.epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        return session

    def _locate(self, tp: tuple[uuid.UUID, int]) -> tuple[str, int] | ErrorCode:
        return _locate(self._logs, self._leads, tp)

    def _acknowledge(
        self,
        group_id: str,
        member_id: str,
        tp: tuple[uuid.UUID, int],
        batches: Iterable[Any],
        acked: Acked,
        renew_until_ms: int | None,
    ) -> ErrorCode:
        """Apply one partition's acknowledgements (transitions until written);
        ``acked`` collects the share-partitions acknowledged in; RENEW moves
        locks to ``renew_until_ms`` (None: a request not marked IsRenewAck)."""
        where = self._locate(tp)
        if isinstance(where, ErrorCode):
            return where
        plan = [(b.first_offset, b.last_offset, list(b.acknowledge_types)) for b in batches]
        renewing = renew_until_ms is not None and any(RENEW in types for _, _, types in plan)
        if renewing and not self._config_for(group_id).renew_acknowledge_enable:
            return ErrorCode.INVALID_RECORD_STATE  # (the group's share.renew.acknowledge.enable)
        sp = self._partitions.get((group_id, *where))
        if sp is None:
            return ErrorCode.INVALID_RECORD_STATE
        acked.setdefault(tp, (where, sp))
        self._letters.mark(sp, self._config_for(group_id))
        return sp.acknowledge(member_id, plan, renew_until_ms=renew_until_ms)

    def _renew_until(self, group_id: str, renewing: bool, now_ms: int) -> int | None:
        """Where a RENEW moves a lock (KIP-1222), or None when it is not allowed."""
        if not renewing:
            return None
        self._deadline_stale = True
        return mono_ms(now_ms) + self._config_for(group_id).record_lock_duration_ms

    def _release_member(self, group_id: str, member_id: str) -> None:
        config = self._config_for(group_id)
        for (group, topic, partition), sp in self._partitions.items():
            if group == group_id and self._letters.mark(sp, config).release_member(member_id):
                self._notify(topic, partition)

    def _share_partition(
        self, group_id: str, topic: str, partition: int, now_ms: int
    ) -> SharePartition:
        key = (group_id, topic, partition)
        plog = self._logs.partition(topic, partition)
        info = self._logs.topic(topic)
        topic_id = str(info.topic_id) if info is not None else ""
        sp = self._partitions.get(key)
        if sp is not None and self._topic_ids.get(key) in ("", topic_id):
            return sp
        config = self._config_for(group_id)
        if self._remote is not None:
            loaded = self._remote.want(key, topic_id)
            if loaded is None:
                raise ShareStateLoading(f"share-partition {key}: reading its state")
            if loaded.snapshot is not None:
                try:
                    sp = SharePartition.from_snapshot(
                        loaded.snapshot,
                        delivery_count_limit=config.delivery_count_limit,
                        max_record_locks=config.partition_max_record_locks,
                    )
                except (KeyError, TypeError, ValueError) as exc:
                    raise ShareStateError(f"share-partition {key}: {exc}") from exc
                self._partitions[key], self._topic_ids[key] = sp, topic_id
                self._deadline_stale = True
                self._letters.settled(key)  # (ARCHIVING runs a leader before us left)
                return sp
        sp = SharePartition(
            initial_offset(config.auto_offset_reset, plog, now_ms),
            delivery_count_limit=config.delivery_count_limit,
            max_record_locks=config.partition_max_record_locks,
        )
        sp.dirty = True
        self._partitions[key] = sp
        self._topic_ids[key] = topic_id
        self._writes.unwritten.add(key)
        return sp

    def _acquire(self, pending: PendingFetch, now_ms: int) -> int:
        """Acquire records for a fetch into its answers; the number of offsets acquired."""
        session = pending.session
        order = list(session.partitions)
        if not order:
            return 0
        start = session.rotation % len(order)
        session.rotation += 1
        order = order[start:] + order[:start]
        config = self._config_for(session.group_id)
        records_left = pending.max_records
        bytes_left = pending.max_bytes
        total = 0
        for tp in order:
            answer = pending.answers.setdefault(tp, _PartitionAnswer())
            if answer.acquired:
                continue  # already answered (a wait woken after a first pass cannot add)
            where = self._locate(tp)
            if isinstance(where, ErrorCode):
                answer.error = where
                continue
            if records_left <= 0 or bytes_left <= 0:
                continue
            try:
                got, data, sp = self._acquire_partition(
                    session,
                    where,
                    config,
                    (records_left, bytes_left, pending.strict),
                    total == 0,
                    now_ms,
                )
            except ShareStateLoading:
                continue  # (woken when its state arrives)
            except BrokerError as exc:
                answer.error = exc.code
                continue
            if got:
                answer.acquired = got
                answer.records = data
                answer.source = (sp, where, mono_ms(now_ms) + config.record_lock_duration_ms)
                count = sum(r.last - r.first + 1 for r in got)
                records_left -= count
                bytes_left -= len(data)
                total += count
        return total

    def _acquire_partition(
        self,
        session: ShareSession,
        where: tuple[str, int],
        config: ShareConfig,
        limits: tuple[int, int, bool],
        first: bool,
        now_ms: int,
    ) -> tuple[list[AcquiredRange], bytes, SharePartition]:
        """Acquire in one share-partition within ``limits`` (records, bytes, whether
        the records are a hard limit); what was acquired, the batches holding it."""
        max_records, max_bytes, strict = limits
        topic, partition = where
        sp = self._share_partition(session.group_id, topic, partition, now_ms)
        plog = self._logs.partition(topic, partition)
        sp.move_start(plog.log_start_offset)
        lock_ms = config.record_lock_duration_ms
        got = sp.acquire_available(session.member_id, max_records, now_ms=now_ms, lock_ms=lock_ms)
        left = max_records - sum(r.last - r.first + 1 for r in got)
        read_committed = config.isolation_level == "read_committed"
        upper = (
            self._producers.last_stable_offset(topic, partition)
            if read_committed
            else plog.high_watermark
        )
        views: dict[int, memoryview] = {}
        for r in got:  # the batches holding re-acquired offsets
            read_into(views, plog, r.first, r.last, upper)
        if left > 0 and sp.end_offset < upper and not sp.window_full():
            start = sp.end_offset
            aborted: list[tuple[int, int]] = []
            if read_committed:
                state = self._producers.state(topic, partition)
                aborted = list(state.aborted_transactions(start, upper))
            spans = batch_spans(plog, start, upper, max_bytes, first, aborted, views)
            new = sp.acquire_new(
                session.member_id, spans, left, now_ms=now_ms, lock_ms=lock_ms, strict=strict
            )
            got = sorted([*got, *new], key=lambda r: r.first)
        if not got:
            return [], b"", sp
        wanted = [
            view
            for base, view in sorted(views.items())
            if any(r.first <= last_of(view) and base <= r.last for r in got)
        ]
        return got, b"".join(bytes(v) for v in wanted), sp

    def _forget_idle(self) -> None:
        """Cluster mode: forget the share-partitions of groups without a share
        session here (written already; read again when needed), so the next
        member sees what the offsets admin changed while the group was empty."""
        active = {group for group, _member in self._sessions}
        self._drop([k for k in self._partitions if k[0] not in active and self._letters.idle(k)])

    def _drop(self, keys: Iterable[SP]) -> None:
        """Forget share-partitions (read again, or initialised, when needed)."""
        for key in keys:
            self._partitions.pop(key, None)
            self._topic_ids.pop(key, None)


def _watches(logs: LogManager, session: ShareSession) -> Iterable[tuple[str, int]]:
    """Where a session's partitions are, by (topic, partition)."""
    for topic_id, partition in session.partitions:
        info = logs.topic_by_id(topic_id)
        if info is not None:
            yield info.name, partition


def _locate(
    logs: LogManager, leads: Callable[[str, int], bool] | None, tp: tuple[uuid.UUID, int]
) -> tuple[str, int] | ErrorCode:
    """Where a partition named by topic id is, or why it cannot be served here."""
    info = logs.topic_by_id(tp[0])
    if info is None:
        return ErrorCode.UNKNOWN_TOPIC_ID
    if not 0 <= tp[1] < info.num_partitions:
        return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    if leads is not None and not leads(info.name, tp[1]):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    return info.name, tp[1]


def _fetch_response(
    answers: Mapping[tuple[uuid.UUID, int], _PartitionAnswer], lock_ms: int
) -> _sf.ShareFetchResponse:
    by_topic: dict[uuid.UUID, list[_sf.ShareFetchResponse.PartitionData]] = {}
    for (topic_id, partition), a in answers.items():
        if a.error == ErrorCode.NONE and a.ack_error is None and not a.acquired:
            continue
        by_topic.setdefault(topic_id, []).append(
            _sf.ShareFetchResponse.PartitionData(
                partition_index=partition,
                error_code=a.error,
                acknowledge_error_code=a.ack_error or ErrorCode.NONE,
                current_leader=_sf.ShareFetchResponse.LeaderIdAndEpoch(
                    leader_id=-1, leader_epoch=-1
                ),
                records=a.records if a.acquired else b"",
                acquired_records=[
                    _sf.ShareFetchResponse.AcquiredRecords(
                        first_offset=r.first,
                        last_offset=r.last,
                        delivery_count=r.delivery_count,
                    )
                    for r in a.acquired
                ],
            )
        )
    return _sf.ShareFetchResponse(
        acquisition_lock_timeout_ms=lock_ms,
        responses=[
            _sf.ShareFetchResponse.ShareFetchableTopicResponse(topic_id=tid, partitions=parts)
            for tid, parts in by_topic.items()
        ],
    )


def _refusal(request: _sf.ShareFetchRequest) -> _sf.ShareFetchResponse | None:
    """The answer of a ShareFetch refused whole for what it asks (module rules), or None."""
    why = None
    if not request.group_id or not request.member_id:
        why = "GroupId and MemberId must be set"
    elif request.share_acquire_mode not in _ACQUIRE_MODES:
        why = f"unknown ShareAcquireMode {request.share_acquire_mode}"
    elif request.is_renew_ack and (
        request.max_wait_ms or request.min_bytes or request.max_bytes or request.max_records
    ):
        why = (
            "a ShareFetch with IsRenewAck must ask for no records: MaxWaitMs, MinBytes, "
            "MaxBytes and MaxRecords must be 0"
        )
    elif request.share_session_epoch == INITIAL_EPOCH and any(
        p.acknowledgement_batches for t in request.topics for p in t.partitions
    ):
        why = "a ShareFetch opening a share session cannot acknowledge records"
    return None if why is None else _fetch_error(ErrorCode.INVALID_REQUEST, why)


def _ack_refusal(request: _sa.ShareAcknowledgeRequest) -> _sa.ShareAcknowledgeResponse:
    """The answer of a ShareAcknowledge without group or member, or opening a session."""
    if not request.group_id or not request.member_id:
        return _ack_error(ErrorCode.INVALID_REQUEST, "GroupId and MemberId must be set")
    return _ack_error(
        ErrorCode.INVALID_SHARE_SESSION_EPOCH, "ShareAcknowledge cannot open a share session"
    )


def _ack_response(
    request: _sa.ShareAcknowledgeRequest,
    codes: Mapping[tuple[uuid.UUID, int], ErrorCode],
    lock_ms: int,
) -> _sa.ShareAcknowledgeResponse:
    """A ShareAcknowledge's answer: each partition's code, the lock timeout (v2)."""
    R = _sa.ShareAcknowledgeResponse
    return R(
        acquisition_lock_timeout_ms=lock_ms,
        responses=[
            R.ShareAcknowledgeTopicResponse(
                topic_id=topic.topic_id,
                partitions=[
                    R.PartitionData(
                        partition_index=part.partition_index,
                        error_code=codes[(topic.topic_id, part.partition_index)],
                        current_leader=R.LeaderIdAndEpoch(leader_id=-1, leader_epoch=-1),
                    )
                    for part in topic.partitions
                ],
            )
            for topic in request.topics
        ],
    )


def _fetch_error(code: ErrorCode, message: str | None) -> _sf.ShareFetchResponse:
    return _sf.ShareFetchResponse(error_code=code, error_message=message)


def _ack_error(code: ErrorCode, message: str | None) -> _sa.ShareAcknowledgeResponse:
    return _sa.ShareAcknowledgeResponse(error_code=code, error_message=message)
