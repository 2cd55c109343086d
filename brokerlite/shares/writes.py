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
* Acknowledgements are written on their own (:meth:`ShareWrites.acknowledged`),
  before records are acquired. When that write fails, each acknowledged
  share-partition goes back to its state from before them
  (:meth:`.SharePartition.restore`), as Kafka 4.4's
  ``SharePartition.rollbackOrProcessStateUpdates`` does, and the error is
  UNKNOWN_SERVER_ERROR: what Kafka's ``Errors.forException`` makes of a
  persister write that failed without a coordinator's error code.
* A share-partition created on this broker and never written yet is
  :attr:`ShareWrites.unwritten`: Kafka serves a share-partition only once its
  state is initialised on its share coordinator, so the fetcher delivers
  nothing from it while its first write fails.
* Cluster mode: a write the coordinator refused fails only its share-partitions
  (:meth:`ShareWrites.failed` names them, with the error the client is told;
  the persister's rules say which); the persister has the fetcher forget
  them, so their state is read again, without what the failed write carried.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable, Mapping

from trafka.brokerlite.errors import BrokerError
from trafka.codec.errors import ErrorCode

from .partition import Saved, SharePartition
from .persister import RemotePersister
from .state_store import SP, ShareStateStore

__all__ = ["Acked", "ShareWrites"]

log = logging.getLogger("trafka.brokerlite")

#: The share-partitions a request acknowledged in, by (topic id, partition):
#: where they are ``(topic, partition)``, and their state before (``Saved``).
Acked = dict[tuple[uuid.UUID, int], tuple[tuple[str, int], SharePartition, Saved]]


class ShareWrites:
    """The writes of the fetcher's share-partitions (see the module rules).

    Args:
        store: the journal, or the persister to the share coordinators.
        partitions: the fetcher's share-partitions (shared, not copied).
        topic_ids: their topic ids (shared, not copied).
        notify: called with ``(topic, partition)`` when records there became
            available (an acknowledgement released some).
    """

    def __init__(
        self,
        store: ShareStateStore | RemotePersister,
        partitions: Mapping[SP, SharePartition],
        topic_ids: Mapping[SP, str],
        notify: Callable[[str, int], None],
    ) -> None:
        self.store = store
        self.remote = store if isinstance(store, RemotePersister) else None
        self._partitions = partitions
        self._topic_ids = topic_ids
        self._notify = notify
        #: Share-partitions created here, never written yet.
        self.unwritten: set[SP] = set()

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
            self.store.write(entries)
        except BrokerError as exc:
            log.warning("share-state write failed: %s", exc)
            return ErrorCode.UNKNOWN_SERVER_ERROR
        for key, sp in written:
            sp.dirty = False
            self.unwritten.discard(key)
        return ErrorCode.NONE

    def acknowledged(self, acked: Acked) -> ErrorCode:
        """Write the acknowledgements just applied (with whatever else changed):
        NONE, or the error of a failed write, after which they are undone."""
        if not acked:
            return ErrorCode.NONE
        code = self.write()
        for (topic, partition), sp, saved in acked.values():
            if code != ErrorCode.NONE:
                sp.restore(saved)
            elif sp.has_available():
                self._notify(topic, partition)
        return code

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
