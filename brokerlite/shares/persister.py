"""The share-partition leader's persister in cluster mode (KIP-932): share-partition
state read from and written to the share coordinators. Sans-IO.

On a single node the share fetcher keeps its share-partitions' state in a journal
(:mod:`.state_store`). In a cluster it must outlive the broker that leads the data
partition, so, as Kafka's share-partition leader does through its persister, the
state goes to the share coordinator of each share-partition's key
(:mod:`.coordinator`), in ``__share_group_state``. :class:`RemotePersister` is
the port the share fetcher writes to (the same ``write`` as the journal's); the
driver (:mod:`trafka.brokerlite.cluster.driver.share_state`) sends its requests
(ReadShareGroupState, WriteShareGroupState) and reports the answers.

Rules and invariants:

* Loading. A share-partition the fetcher does not hold in memory is read from
  its coordinator first (:meth:`RemotePersister.want` queues the read and says
  "not yet"; the fetch acquires nothing there meanwhile and is woken when the
  answer arrives). Start offset -1 means not initialized: the fetcher then
  initialises it from ``share.auto.offset.reset`` and writes it.
* Writing. Every write is a whole snapshot of one share-partition, numbered by
  a *ticket* (increasing). A snapshot queued while an older one of the same
  share-partition has not left replaces it and takes over its tickets, so the
  coordinator sees each share-partition's snapshots in order and a waiter
  counts the write that carries its state. One request at a time goes to a
  coordinator (the driver's rule), so snapshots of one share-partition never
  overtake each other.
* A read of a share-partition is sent only once no write of it is queued or
  in flight (the fetcher forgets idle share-partitions and reads them again:
  the read must see their last write).
* Every read and write carries the data partition's leader epoch *as of the
  snapshot* (the coordinator fences a deposed leader's writes with
  FENCED_LEADER_EPOCH), and the state epoch the read returned.
* A request answered with a retriable error (NOT_COORDINATOR,
  COORDINATOR_NOT_AVAILABLE, REQUEST_TIMED_OUT, a lost connection) is queued
  again, behind any newer snapshot of the share-partition, and retried after
  :data:`RETRY_BACKOFF_MS`. A write still failing so :data:`GIVE_UP_AFTER_MS`
  after its first failure (the oldest of the tickets it carries) is given up,
  as Kafka 4.4's persister gives a write up after its attempts
  (``PersisterStateManager.WriteStateHandler``: five, 1 s apart doubling);
  brokerlite retries sooner between them (its coordinators move in well under
  a second), over the same time. A fenced one (FENCED_LEADER_EPOCH,
  FENCED_STATE_EPOCH), a write given up, or any other error fails its
  tickets.
* Every write that settles is reported with its tickets and the client's
  error (NONE when written: :attr:`RemotePersister.on_written`), before the
  waiters are woken: the fetcher keeps or rolls back its transitions, or
  forgets the share-partition (:mod:`.writes`). :meth:`RemotePersister.retake`
  replaces a queued snapshot that a rollback made stale.
* :meth:`RemotePersister.outcome` answers for a request's tickets: None while
  one is queued or in flight, NONE once all are on the coordinator's in-sync
  replicas, else an error: a ShareFetch or ShareAcknowledge is answered only
  then (an acknowledgement is never answered before it is durable), and
  :meth:`RemotePersister.failures` names the share-partitions whose tickets
  failed, each answered with its error (the fetcher's rules).
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, Protocol

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k84_read_share_group_state as _read
from trafka.codec.messages import k85_write_share_group_state as _write

from .coordinator import SHARE_STATE_TOPIC, state_key
from .partition import ACKNOWLEDGED, ARCHIVED
from .state_store import SP

__all__ = [
    "GIVE_UP_AFTER_MS",
    "RETRIABLE",
    "RETRY_BACKOFF_MS",
    "SETTLED_WATCH",
    "Loaded",
    "RemotePersister",
    "StateRequest",
    "StateRequestOwner",
]

#: How long a share-state request that failed waits before it is sent again.
RETRY_BACKOFF_MS = 100
#: How long a write keeps being retried: Kafka's persister makes five attempts,
#: 1, 2, 4 and 8 s apart (its backoff: 1 s doubling, jitter aside), so about 15 s.
GIVE_UP_AFTER_MS = 15_000
#: What requests waiting for their writes watch: woken when writes settle.
SETTLED_WATCH = (f"{SHARE_STATE_TOPIC}.writes", -1)

#: Share-state answers that are asked again (after :data:`RETRY_BACKOFF_MS`).
RETRIABLE = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.UNKNOWN_SERVER_ERROR,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class Loaded:
    """A share-partition's state as its coordinator returned it: ``snapshot`` is
    the share fetcher's form (``{"start", "runs"}``), None when not initialized."""

    snapshot: dict[str, Any] | None


@dataclasses.dataclass(slots=True)
class _Write:
    key: SP
    topic_id: str
    leader_epoch: int
    snapshot: dict[str, Any]
    tickets: list[int]
    #: When its (oldest ticket's) writes began failing, None while none has.
    failing_since: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class StateRequest:
    """One request for the driver to send: to the coordinator of ``coordinator_key``
    (``group:topic-id:partition``), API ``api_key`` (83-86) with ``body``; or,
    with ``leader_of``, to that partition's leader."""

    api_key: int
    coordinator_key: str
    body: Any
    key: SP
    write: _Write | None = None
    #: Who is told the answer (None: the persister that made the request).
    owner: StateRequestOwner | None = None
    #: The owner's own note of what the request is for.
    tag: Any = None
    #: Sent to this data partition's leader instead of a share coordinator
    #: (the offsets admin's ListOffsets for a lag, KIP-1226).
    leader_of: tuple[str, int] | None = None
    version: int = 0


class StateRequestOwner(Protocol):
    """What the driver reports a share-state request's answer to."""

    #: Set by the driver: called when there is something to send.
    on_ready: Callable[[], None]

    def answered(self, request: StateRequest, code: ErrorCode, payload: Any, now_ms: int) -> None:
        """The coordinator's answer (``payload``: the partition's result), or a
        failure of the driver's own (COORDINATOR_NOT_AVAILABLE)."""
        ...

    def take(self, now_ms: int) -> list[StateRequest]:
        """The requests to send now."""
        ...

    def next_retry(self) -> int | None:
        """When a failed request is due again (None: none waits)."""
        ...


class RemotePersister:
    """The share fetcher's state port in cluster mode (see the module rules).

    Args:
        leader_epoch: the leader epoch of a data partition this broker leads,
            None when it does not lead it.
    """

    def __init__(self, leader_epoch: Callable[[str, int], int | None]) -> None:
        self._leader_epoch = leader_epoch
        self._reads: dict[SP, str] = {}  # queued reads: key -> topic id
        self._reading: set[SP] = set()  # reads in flight
        self._loaded: dict[SP, Loaded] = {}  # answers not yet taken by the fetcher
        self._state_epochs: dict[SP, int] = {}
        self._writes: dict[SP, _Write] = {}  # queued, not in flight
        self._writing: set[SP] = set()  # keys with a write in flight
        self._outstanding: set[int] = set()
        self._latest: dict[SP, int] = {}  # the newest ticket of each key
        self._failed: dict[int, tuple[SP, ErrorCode]] = {}  # ticket -> its key, the error
        self._ticket = 0
        self._not_before: dict[SP, int] = {}  # a failed request's key: when to send again
        #: Called when there is something to send (the driver's wake-up).
        self.on_ready: Callable[[], None] = lambda: None
        #: Called with a key whose answer arrived (its fetches may acquire now).
        self.on_loaded: Callable[[SP], None] = lambda _key: None
        #: Called with a key whose state could not be read (the fetcher forgets it).
        self.on_lost: Callable[[SP], None] = lambda _key: None
        #: Called with a key, the tickets of its write that settled, the client's
        #: error (NONE: written) and the time of the answer.
        self.on_written: Callable[[SP, list[int], ErrorCode, int], None] = lambda _k, _t, _c, _n: (
            None
        )
        #: Called when writes settled (waiters may answer now).
        self.on_settled: Callable[[], None] = lambda: None

    # -- the share fetcher's side --------------------------------------------------------------

    @property
    def path(self) -> Path:
        return Path(SHARE_STATE_TOPIC)

    def partitions(self) -> dict[SP, dict[str, Any]]:
        """Nothing is known before it is read (the journal's start-up load)."""
        return {}

    def close(self) -> None:
        """Forget everything queued (the broker is stopping)."""
        self._reads.clear()
        self._writes.clear()
        self._not_before.clear()

    def want(self, key: SP, topic_id: str) -> Loaded | None:
        """The state of a share-partition read from its coordinator, once; None
        while it is being read (the read is queued on the first call)."""
        loaded = self._loaded.pop(key, None)
        if loaded is not None:
            return loaded
        if key not in self._reading and key not in self._reads:
            self._reads[key] = topic_id
            self.on_ready()
        return None

    def forget(self, topic: str, partition: int) -> None:
        """This broker stopped (or started) leading a data partition: drop its
        reads and unread answers (queued writes go on: the coordinator fences
        them if a newer leader wrote)."""
        for store in (self._reads, self._loaded):
            for key in [k for k in store if k[1:] == (topic, partition)]:
                del store[key]

    def write(self, entries: Iterable[dict[str, Any]]) -> dict[SP, int]:
        """Queue the fetcher's changes (snapshots; a share-partition the broker
        does not lead any more is not written): the ticket of each one queued."""
        given: dict[SP, int] = {}
        for entry in entries:
            if entry.get("kind") != "partition":
                continue  # (dropping a group's state is not the leader's in a cluster)
            key: SP = (entry["group"], entry["topic"], int(entry["partition"]))
            epoch = self._leader_epoch(key[1], key[2])
            if epoch is None or not entry.get("topic_id"):
                continue
            self._ticket += 1
            snapshot = {"start": entry["start"], "runs": entry["runs"]}
            queued = self._writes.get(key)
            tickets = [*(queued.tickets if queued is not None else []), self._ticket]
            since = queued.failing_since if queued is not None else None
            self._writes[key] = _Write(key, entry["topic_id"], epoch, snapshot, tickets, since)
            self._outstanding.add(self._ticket)
            given[key] = self._latest[key] = self._ticket
        if self._writes:
            self.on_ready()
        return given

    def writing(self, key: SP) -> bool:
        """Whether a write of ``key`` is queued or in flight."""
        return key in self._writes or key in self._writing

    def latest(self, key: SP) -> int:
        """The newest ticket handed out for ``key`` (0: none)."""
        return self._latest.get(key, 0)

    def retake(self, key: SP, snapshot: dict[str, Any]) -> None:
        """A snapshot of ``key`` still queued (not sent) is replaced by ``snapshot``
        (``{"start", "runs"}``): a failed write's rollback made it stale."""
        queued = self._writes.get(key)
        if queued is not None:
            queued.snapshot = {"start": snapshot["start"], "runs": snapshot["runs"]}

    def mark(self) -> int:
        """The last ticket handed out: a request's writes are the tickets after the
        mark taken before it."""
        return self._ticket

    def outcome(self, after: int, through: int) -> ErrorCode | None:
        """The outcome of tickets ``after+1..through`` (see the module rules)."""
        if any(after < t <= through for t in self._outstanding):
            return None
        for ticket, (_key, code) in self._failed.items():
            if after < ticket <= through:
                return code
        return ErrorCode.NONE

    def failures(self, after: int, through: int) -> dict[SP, ErrorCode]:
        """The share-partitions whose tickets ``after+1..through`` failed, with the
        error (the one of their latest failed ticket)."""
        return {
            key: code
            for ticket, (key, code) in sorted(self._failed.items())
            if after < ticket <= through
        }

    # -- the driver's side ---------------------------------------------------------------------

    def take(self, now_ms: int) -> list[StateRequest]:
        """The requests to send now (one per share-partition)."""
        out: list[StateRequest] = []
        for key, topic_id in list(self._reads.items()):
            if self._not_before.get(key, 0) > now_ms or key in self._writes or key in self._writing:
                continue  # (a read waits for the key's writes: it must see them)
            epoch = self._leader_epoch(key[1], key[2])
            del self._reads[key]
            if epoch is None:
                continue
            self._reading.add(key)
            read = _read_body(key, topic_id, epoch)
            out.append(
                StateRequest(
                    ApiKey.READ_SHARE_GROUP_STATE, state_key(key[0], topic_id, key[2]), read, key
                )
            )
        for key, write in list(self._writes.items()):
            if key in self._writing or self._not_before.get(key, 0) > now_ms:
                continue  # one at a time per share-partition: the next after its answer
            del self._writes[key]
            self._writing.add(key)
            body = _write_body(write, self._state_epochs.get(key, 0))
            coordinator_key = state_key(key[0], write.topic_id, key[2])
            out.append(
                StateRequest(ApiKey.WRITE_SHARE_GROUP_STATE, coordinator_key, body, key, write)
            )
        return out

    def next_retry(self) -> int | None:
        """When a failed request is due again (None: none waits)."""
        waiting = [
            when
            for key, when in self._not_before.items()
            if key in self._reads or key in self._writes
        ]
        return min(waiting, default=None)

    def answered(self, request: StateRequest, code: ErrorCode, payload: Any, now_ms: int) -> None:
        """The coordinator's answer for ``request`` (``payload``: a read's
        partition result), or a failure of its own (a lost connection:
        COORDINATOR_NOT_AVAILABLE)."""
        key = request.key
        self._not_before.pop(key, None)
        if request.write is None:
            self._reading.discard(key)
            if code == ErrorCode.NONE:
                self._state_epochs[key] = int(payload.state_epoch)
                self._loaded[key] = Loaded(_snapshot_of(payload))
                self.on_loaded(key)
            elif code in RETRIABLE or code == ErrorCode.FENCED_LEADER_EPOCH:
                # (a fenced read: this broker's view of the epoch is behind; it
                # catches up, or stops leading and the read is dropped)
                self._reads.setdefault(key, str(request.body.topics[0].topic_id))
                self._not_before[key] = now_ms + RETRY_BACKOFF_MS
                self.on_ready()  # (the driver sets its timer to the retry)
            else:
                self.on_lost(key)
            return
        write = request.write
        self._writing.discard(key)
        if code == ErrorCode.NONE:
            self._outstanding.difference_update(write.tickets)
            self.on_written(key, write.tickets, ErrorCode.NONE, now_ms)
            self.on_settled()
        elif code in RETRIABLE and (
            write.failing_since is None or now_ms - write.failing_since < GIVE_UP_AFTER_MS
        ):
            if write.failing_since is None:
                write.failing_since = now_ms
            self._requeue(write, now_ms)
            self._not_before[key] = now_ms + RETRY_BACKOFF_MS
        else:
            self._fail(write, code, now_ms)
        if key in self._writes or key in self._reads:
            self.on_ready()  # (its next snapshot, a read behind it, or a retry: the driver's timer)

    # -- internals -----------------------------------------------------------------------------

    def _requeue(self, write: _Write, now_ms: int) -> None:
        """Queue a failed write again, unless a newer snapshot of its
        share-partition is queued: that one then carries its tickets too."""
        newer = self._writes.get(write.key)
        if newer is not None:
            newer.tickets[:0] = write.tickets
            newer.failing_since = write.failing_since  # (its older tickets' wait goes on)
        elif self._leader_epoch(write.key[1], write.key[2]) is None:
            self._fail(write, ErrorCode.NOT_LEADER_OR_FOLLOWER, now_ms)
        else:
            self._writes[write.key] = write

    def _fail(self, write: _Write, code: ErrorCode, now_ms: int) -> None:
        self._outstanding.difference_update(write.tickets)
        client = _client_code(code)
        for ticket in write.tickets:
            self._failed[ticket] = (write.key, client)
        # Only recent failures can still be asked about.
        if len(self._failed) > 10_000:
            for ticket in sorted(self._failed)[:5_000]:
                del self._failed[ticket]
        self.on_written(write.key, write.tickets, client, now_ms)
        self.on_settled()


def _client_code(code: ErrorCode) -> ErrorCode:
    """What a client is told when its share-partition's state could not be written,
    as Kafka 4.4's ``SharePartition.fetchPersisterError`` maps the coordinator's
    error: a deposed leader's NOT_LEADER_OR_FOLLOWER (the client finds the new
    one), a coordinator not found (a write given up) COORDINATOR_NOT_AVAILABLE,
    GROUP_ID_NOT_FOUND and UNKNOWN_TOPIC_OR_PARTITION as they are, any other
    UNKNOWN_SERVER_ERROR."""
    if code in (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.FENCED_STATE_EPOCH):
        return ErrorCode.NOT_LEADER_OR_FOLLOWER
    if code in _NO_COORDINATOR:
        return ErrorCode.COORDINATOR_NOT_AVAILABLE
    if code in _AS_THEY_ARE:
        return code
    return ErrorCode.UNKNOWN_SERVER_ERROR


_DONE = (ACKNOWLEDGED, ARCHIVED)  # record states whose delivery is complete
_NO_COORDINATOR = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
    }
)
_AS_THEY_ARE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,  # (this broker stopped leading: _requeue)
        ErrorCode.GROUP_ID_NOT_FOUND,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


def _read_body(key: SP, topic_id: str, epoch: int) -> _read.ReadShareGroupStateRequest:
    req = _read.ReadShareGroupStateRequest
    return req(
        group_id=key[0],
        topics=[
            req.ReadStateData(
                topic_id=uuid.UUID(topic_id),
                partitions=[req.PartitionData(partition=key[2], leader_epoch=epoch)],
            )
        ],
    )


def _write_body(write: _Write, state_epoch: int) -> _write.WriteShareGroupStateRequest:
    req = _write.WriteShareGroupStateRequest
    return req(
        group_id=write.key[0],
        topics=[
            req.WriteStateData(
                topic_id=uuid.UUID(write.topic_id),
                partitions=[
                    req.PartitionData(
                        partition=write.key[2],
                        state_epoch=state_epoch,
                        leader_epoch=write.leader_epoch,
                        start_offset=write.snapshot["start"],
                        # (v1, KIP-1226: the in-flight offsets done, for the lag)
                        delivery_complete_count=sum(
                            b - a + 1 for a, b, c, _ in write.snapshot["runs"] if c in _DONE
                        ),
                        state_batches=[
                            req.StateBatch(
                                first_offset=a,
                                last_offset=b,
                                delivery_state=c,
                                delivery_count=d,
                            )
                            for a, b, c, d in write.snapshot["runs"]
                        ],
                    )
                ],
            )
        ],
    )


def _snapshot_of(result: Any) -> dict[str, Any] | None:
    """The fetcher's snapshot form of a ReadShareGroupState partition result."""
    if result.start_offset < 0:
        return None
    return {
        "start": int(result.start_offset),
        "runs": [
            [b.first_offset, b.last_offset, b.delivery_state, b.delivery_count]
            for b in result.state_batches
        ],
    }
