"""Writing the share-partitions' state (KIP-932), and what a failed write undoes.

The share fetcher (:mod:`.fetcher`) changes share-partitions in memory; what
must outlive the broker goes to the share-state journal (:mod:`.state_store`,
one node) or to the share coordinators (:class:`.persister.RemotePersister`,
cluster mode). :class:`ShareWrites` is that step, over the fetcher's
share-partitions. Sans-IO apart from the journal's fsynced append.

Rules and invariants:

* A write takes every share-partition whose durable form changed
  (:attr:`.SharePartition.dirty`), a whole snapshot each. One node: one fsynced
  append; a share-partition stays dirty until the append succeeded, so a failed
  one is carried by the next write. Cluster: the snapshots are queued to the
  coordinators (never failing at once); the handlers answer once they settled
  (:meth:`ShareWrites.outcome`).
* Acknowledgements and a member's release are transitions
  (:mod:`.partition`) until the write carrying them settles: one node, at
  once; a cluster, when the coordinator answers (:meth:`ShareWrites.settled`).
  A write that failed rolls back the records its transitions changed, and
  only those (:meth:`.SharePartition.settle`), as Kafka 4.4's
  ``SharePartition.rollbackOrProcessStateUpdates`` does; its share-partition
  is kept. One node's error is UNKNOWN_SERVER_ERROR: what Kafka's
  ``Errors.forException`` makes of a persister write that failed without a
  coordinator's error code.
* Acknowledgements are written before records are acquired (the fetcher's
  first write of a request that acknowledged).
* A share-partition created on this broker and never written yet is
  :attr:`ShareWrites.unwritten`: Kafka serves a share-partition only once its
  state is initialised on its share coordinator, so the fetcher delivers
  nothing from it while its first write fails (cluster: that write's failure
  forgets it, :meth:`ShareWrites.settled`).
* Cluster mode: a write the coordinator refused fails only its share-partitions
  (:meth:`ShareWrites.failed` names them, with the error the client is told;
  the persister's rules say which). A *fenced* error, as Kafka's
  ``SharePartitionManager`` ``fencedSharePartitionHandler`` tells them
  (NOT_LEADER_OR_FOLLOWER, which a FENCED_LEADER_EPOCH or FENCED_STATE_EPOCH
  becomes, GROUP_ID_NOT_FOUND, UNKNOWN_TOPIC_OR_PARTITION), forgets the
  share-partition: it is read again, without what the failed write carried.
  Any other error (UNKNOWN_SERVER_ERROR, COORDINATOR_NOT_AVAILABLE of a write
  given up) keeps it and rolls back that write's transitions; a newer snapshot
  of it still queued is taken again, so that it does not carry them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Iterable, Mapping

from trafka.brokerlite.errors import BrokerError
from trafka.codec.errors import ErrorCode

from .partition import SharePartition
from .persister import RemotePersister
from .state_store import SP, ShareStateStore

__all__ = ["FENCED", "Acked", "ShareWrites"]

log = logging.getLogger("trafka.brokerlite")

#: The share-partitions a request acknowledged in, by (topic id, partition):
#: where they are ``(topic, partition)``, and the share-partition.
Acked = dict[tuple[uuid.UUID, int], tuple[tuple[str, int], SharePartition]]

#: The clients' errors of a failed write that forget its share-partition (Kafka
#: 4.4's ``SharePartitionManager.fencedSharePartitionHandler``).
FENCED = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.GROUP_ID_NOT_FOUND,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


class ShareWrites:
    """The writes of the fetcher's share-partitions (see the module rules).

    Args:
        store: the journal, or the persister to the share coordinators.
        partitions: the fetcher's share-partitions (shared, not copied).
        topic_ids: their topic ids (shared, not copied).
        notify: called with ``(topic, partition)`` when records there became
            available (a release's write settled).
        forget: cluster mode: forgets a share-partition (read again when needed).
    """

    def __init__(
        self,
        store: ShareStateStore | RemotePersister,
        partitions: Mapping[SP, SharePartition],
        topic_ids: Mapping[SP, str],
        notify: Callable[[str, int], None],
        forget: Callable[[SP], None] = lambda _key: None,
    ) -> None:
        self.store = store
        self.remote = store if isinstance(store, RemotePersister) else None
        self._partitions = partitions
        self._topic_ids = topic_ids
        self._notify = notify
        self._forget = forget
        #: Share-partitions created here, never written yet.
        self.unwritten: set[SP] = set()
        #: Cluster mode: the share-partitions created here whose first write
        #: has not settled, with its ticket.
        self._initial: dict[SP, int] = {}

    def write(self) -> ErrorCode:
        """Write every dirty share-partition: NONE, or UNKNOWN_SERVER_ERROR when the
        journal append failed (logged; they stay dirty)."""
        entries = []
        written = []
        for key, sp in self._partitions.items():
            if sp.dirty:
                group, topic, partition = key
                entries.append(
                    {
                        "kind": "partition",
                        "group": group,
                        "topic": topic,
                        "topic_id": self._topic_ids.get(key, ""),
                        "partition": partition,
                        **sp.snapshot(),
                    }
                )
                written.append((key, sp))
        try:
            tickets = self.store.write(entries)
        except BrokerError as exc:
            log.warning("share-state write failed: %s", exc)
            for _key, sp in written:
                sp.settle((0,), written=False)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        for key, sp in written:
            sp.dirty = False
            ticket = tickets.get(key) if tickets is not None else None
            if ticket is None:  # (the journal's, or written nowhere: not led here)
                self._settled(key, sp, (0,))
            else:
                sp.begin_write(ticket)
                if key in self.unwritten:
                    self._initial[key] = ticket
            self.unwritten.discard(key)
        return ErrorCode.NONE

    def settled(self, key: SP, tickets: list[int], code: ErrorCode, now_ms: int) -> None:
        """Cluster mode: the persister's writes ``tickets`` of ``key`` settled
        with the client's ``code``, at ``now_ms`` (see the module rules)."""
        initial = self._initial.get(key)
        if initial is not None and initial in tickets:
            del self._initial[key]
        else:
            initial = None
        sp = self._partitions.get(key)
        if sp is None:
            return
        if code == ErrorCode.NONE:
            self._settled(key, sp, tickets)
            return
        if code in FENCED or initial is not None:
            self._initial.pop(key, None)
            self._forget(key)
            return
        if sp.settle(tickets, written=False, now_ms=now_ms) and self.remote is not None:
            self.remote.retake(key, sp.snapshot())

    def _settled(self, key: SP, sp: SharePartition, tickets: Iterable[int]) -> None:
        """Transitions written: the records a release made available may be acquired."""
        if sp.settle(tuple(tickets), written=True) and sp.has_available():
            self._notify(key[1], key[2])

    # -- cluster mode ---------------------------------------------------------------------

    def mark(self) -> int:
        """The last write handed to the persister so far (0 on one node)."""
        return 0 if self.remote is None else self.remote.mark()

    def outcome(self, after: int) -> ErrorCode | None:
        """Whether the writes since ``after`` (a :meth:`mark`) settled: NONE, None
        while one is on its way, else an error (one node: NONE, written already)."""
        if self.remote is None:
            return ErrorCode.NONE
        return self.remote.outcome(after, self.remote.mark())

    def failed(self, after: int) -> dict[SP, ErrorCode]:
        """The share-partitions whose writes since ``after`` failed, with the error
        their clients are told."""
        if self.remote is None:
            return {}
        return self.remote.failures(after, self.remote.mark())
