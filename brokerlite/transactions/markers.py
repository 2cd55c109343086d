"""Transaction outcomes carried out on this broker's partitions: markers, offsets,
and the positions of the markers not yet on disk.

The transaction coordinator (:mod:`.coordinator`) decides; :class:`TransactionMarkers`
writes what it decided (single-node mode: in a cluster, ``cluster_txn`` queues the
markers for the partitions' leaders) and tells it where the markers went.

Rules and invariants:

* A transaction outcome (:meth:`TransactionMarkers.complete`) is acknowledged
  to the coordinator only after all its markers and offsets are written; until
  then the coordinator keeps it prepared and issues it again.
* EndTxn (and InitProducerId fencing an open transaction) is answered once the
  coordinator's decision is written (fsynced too when a partition of the
  transaction has ``flush.messages=1``); its markers are written just after
  (:meth:`TransactionMarkers.defer`): by the broker's next poll
  (:meth:`TransactionMarkers.next_deadline` asks for one at once), or before
  the next request is handled, whichever comes first, and always after an
  fsync of the decision. No request is therefore
  ever handled while a decided transaction waits for its markers, unless
  writing them failed (then it gets CONCURRENT_TRANSACTIONS until the
  coordinator's retry succeeds).
* Markers are not fsynced. Their positions are in the coordinator's journal
  (written before the transaction counts as complete) until the broker knows
  them on disk: below a partition's active segment (a roll fsyncs the segment it
  finishes; checked every ``MARKER_CHECK_MS``), after a clean close, or after
  an fsync of the partitions done early because ``MARKER_SYNC_MAX`` positions
  piled up (the journal keeps one per producer, partition and outcome run, so a
  steady stream of commits holds one). When the broker opens
  (:meth:`TransactionMarkers.recover`), a producer's recorded marker at or beyond its partition's log end was lost with the log's
  tail in a power loss: if the producer still has a transaction open there, the
  marker is written again (and fsynced) before anything else, so no transaction
  is left open by a lost marker and the last stable offset never passes a
  transaction before its marker is in the log.
* Open transactions of logs opened without a clean close that the journal lost
  go to the coordinator, or get an ABORT marker when no transactional id holds
  them (:meth:`TransactionMarkers.abort_hanging`), before the first request.
* Every marker goes through the producer states (``producers.write_marker``)
  and wakes the requests parked on its partition, whatever bytes they wait for.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable

from trafka.codec.errors import ErrorCode

from ..errors import BrokerError
from ..groups.coordinator import GroupCoordinator
from ..storage.log_manager import LogManager
from .cluster_mode import ClusterTransactions
from .coordinator import TransactionCoordinator, TxnCompletion
from .eos import ProducerStates
from .journal import WrittenMarker

__all__ = ["MARKER_CHECK_MS", "MARKER_SYNC_MAX", "MARKER_WAKES", "TransactionMarkers"]

log = logging.getLogger("trafka.brokerlite")

# A marker can make a whole transaction readable at once: it wakes every parked
# fetch of its partition, whatever bytes they still wait for.
MARKER_WAKES = 1 << 62
# Unsynced transaction markers: look this often for those a segment roll made
# durable, and fsync their partitions only when this many positions pile up. The
# fsync writes all the partition's data not yet on disk, which the kernel would
# otherwise write in the background for free.
MARKER_CHECK_MS = 1000
MARKER_SYNC_MAX = 1024


class TransactionMarkers:
    """Writes the transaction coordinator's outcomes to this broker's partitions.

    Args:
        txn: the transaction coordinator.
        producers: the producer states every marker is written through.
        logs: the partition logs (fsyncs, segment positions).
        groups: the group coordinator, for a commit's offsets.
        cluster_txn: the cluster side of the coordinator (cluster mode), which
            takes the outcomes instead; None on a single node.
        partition_exists: whether a partition (still) exists.
        notify_append: wakes the requests parked on a partition.
        now_ms: the current time.
    """

    def __init__(
        self,
        *,
        txn: TransactionCoordinator,
        producers: ProducerStates,
        logs: LogManager,
        groups: GroupCoordinator,
        cluster_txn: ClusterTransactions | None,
        partition_exists: Callable[[str, int], bool],
        notify_append: Callable[[str, int, int], None],
        now_ms: int,
    ) -> None:
        self.txn = txn
        self.producers = producers
        self.logs = logs
        self.groups = groups
        self.cluster_txn = cluster_txn
        self._partition_exists = partition_exists
        self._notify_append = notify_append
        self._pending: list[TxnCompletion] = []
        #: The time of the latest deferral or run, for what close still has to carry out.
        self.last_now_ms = now_ms
        self._next_check_ms = now_ms + MARKER_CHECK_MS

    @property
    def pending(self) -> bool:
        """True when deferred outcomes wait to be carried out."""
        return bool(self._pending)

    def check(self, now_ms: int) -> None:
        """Periodic work: forget the markers a segment roll made durable, every
        ``MARKER_CHECK_MS``."""
        if now_ms >= self._next_check_ms:
            self._next_check_ms = now_ms + MARKER_CHECK_MS
            self.prune()

    def next_deadline(self) -> int | None:
        """When :meth:`run_deferred` or :meth:`check` has work: at once while
        outcomes are deferred, else at the next check while markers are unsynced."""
        if self._pending:
            return 0
        if self.txn.unsynced_marker_count:
            return self._next_check_ms
        return None

    def close(self) -> None:
        """Carry out what was deferred and fsync the unsynced markers (a clean close)."""
        if self._pending:
            self.run_deferred(self.last_now_ms)
        if self.txn.unsynced_marker_count:
            self.sync(None)

    def complete(self, completions: Iterable[TxnCompletion], now_ms: int) -> None:
        """Carry out transaction outcomes: markers, then offsets, then acknowledge.

        For each completion (see :mod:`.coordinator`): a COMMIT or ABORT control
        batch goes to every partition of the transaction that still exists, a
        commit's group offsets are applied, and only then does the coordinator hear
        that the markers are written, and where. The journal is fsynced first, so
        that no marker or offset reaches the disk before its decision (EndTxn may
        have been answered with the decision only written). Markers are not
        fsynced here (see the module docstring). Any failure leaves the
        transaction prepared; the coordinator issues it again after its retry
        backoff, and markers written twice are harmless.
        """
        if self.cluster_txn is not None:
            # Markers go to the partitions' leaders once the decision is replicated.
            self.cluster_txn.queue(completions)
            return
        txn = self.txn
        completions = list(completions)
        if completions and not txn.flush_decisions():
            return  # no marker before its decision is on disk; issued again later
        for completion in completions:
            written = self._write_completion(completion, now_ms)
            if written is not None:
                txn.markers_written(completion, now_ms, written)
        if txn.unsynced_marker_count >= MARKER_SYNC_MAX:
            self.sync(now_ms)

    def defer(self, completions: Iterable[TxnCompletion], now_ms: int) -> None:
        """Carry out transaction outcomes after the current request is answered.

        For handlers whose answer only needs the decision written (EndTxn,
        InitProducerId): the markers are written by the next the broker's next poll or
        before the next request, whichever comes first (or by :meth:`close`).
        """
        self.last_now_ms = now_ms
        self._pending.extend(completions)

    def run_deferred(self, now_ms: int) -> None:
        self.last_now_ms = now_ms
        pending, self._pending = self._pending, []
        try:
            self.complete(pending, now_ms)
        except Exception:
            # Never the fault of the request that happens to come next; the
            # coordinator issues what is still prepared again after its backoff.
            log.exception("internal error completing transactions")

    def _write_completion(
        self, completion: TxnCompletion, now_ms: int
    ) -> list[WrittenMarker] | None:
        """Write a completion's markers and offsets; where the markers went, or None."""
        outcome = "commit" if completion.commit else "abort"
        written: list[WrittenMarker] = []
        for marker in completion.markers:
            topic, partition = marker.topic, marker.partition
            if not self._partition_exists(topic, partition):
                continue  # deleted since it joined the transaction
            try:
                offset = self.producers.write_marker(
                    topic,
                    partition,
                    producer_id=marker.producer_id,
                    producer_epoch=marker.producer_epoch,
                    coordinator_epoch=marker.coordinator_epoch,
                    commit=marker.commit,
                    now_ms=now_ms,
                )
            except Exception:
                log.exception(
                    "transaction %r: cannot write its %s marker to %s-%d; will retry",
                    completion.transactional_id,
                    outcome,
                    topic,
                    partition,
                )
                return None
            if offset is not None:
                written.append(
                    WrittenMarker(
                        topic,
                        partition,
                        offset,
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        marker.commit,
                    )
                )
                self._notify_append(topic, partition, MARKER_WAKES)
        for group_id, offsets in completion.offsets.items():
            live = {tp: o for tp, o in offsets.items() if self._partition_exists(*tp)}
            if not live:
                continue
            try:
                self.groups.commit_transactional_offsets(group_id, live, now_ms)
            except Exception:
                log.exception(
                    "transaction %r: cannot apply the offsets of group %r; will retry",
                    completion.transactional_id,
                    group_id,
                )
                return None
        return written

    def prune(self) -> None:
        """Forget the marker positions that segment rolls made durable (no fsync)."""
        durable: dict[tuple[str, int], int | None] = {}
        for (topic, partition), markers in self.txn.unsynced_markers().items():
            if not self._partition_exists(topic, partition):
                durable[(topic, partition)] = None
                continue
            try:
                base = self.logs.partition(topic, partition).active_segment_base_offset
            except Exception:
                continue
            if markers[0].offset < base:
                durable[(topic, partition)] = base
        if durable:
            self.txn.markers_synced(durable)

    def sync(self, now_ms: int | None) -> None:
        """fsync the partitions holding unsynced markers, then let the journal forget them."""
        synced: dict[tuple[str, int], int | None] = {}
        for topic, partition in self.txn.unsynced_markers():
            if not self._partition_exists(topic, partition):
                synced[(topic, partition)] = None
                continue
            try:
                plog = self.logs.partition(topic, partition)
                end = plog.log_end_offset
                plog.flush(now_ms=now_ms)
            except Exception:
                # Kept: a later sync (or the next start) deals with them.
                log.exception("cannot fsync the transaction markers of %s-%d", topic, partition)
                continue
            synced[(topic, partition)] = end
        if synced:
            self.txn.markers_synced(synced)

    def recover(self, now_ms: int) -> None:
        """Write again the recorded markers that a crash took from the logs (at open).

        A partition log comes back from a power loss as a prefix of what was
        written, so a recorded marker at or beyond its log end is lost together with
        everything after it: a producer's first such marker in a partition is the
        one its open transaction there (if any) is waiting for.
        """
        dealt_with: dict[tuple[str, int], int | None] = {}
        for (topic, partition), markers in self.txn.unsynced_markers().items():
            if not self._partition_exists(topic, partition):
                dealt_with[(topic, partition)] = None
                continue
            try:
                plog = self.logs.partition(topic, partition)
                end = plog.log_end_offset
                # Each producer's first lost marker (markers are in offset order).
                lost: dict[int, WrittenMarker] = {}
                for m in markers:
                    if m.offset >= end:
                        lost.setdefault(m.producer_id, m)
                if not lost:
                    continue  # all in the log; they reach the disk like the rest of it
                open_txns = set(
                    self.producers.state(topic, partition).ongoing_transactions().values()
                )
                for m in lost.values():
                    if m.producer_id not in open_txns:
                        continue  # its transaction's records were lost too
                    log.warning(
                        "%s-%d: the %s marker of producer %d (offset %d) was lost in a "
                        "crash; writing it again",
                        topic,
                        partition,
                        "COMMIT" if m.commit else "ABORT",
                        m.producer_id,
                        m.offset,
                    )
                    self.producers.write_marker(
                        topic,
                        partition,
                        producer_id=m.producer_id,
                        producer_epoch=m.producer_epoch,
                        coordinator_epoch=m.coordinator_epoch,
                        commit=m.commit,
                        now_ms=now_ms,
                    )
                # The positions no longer match the log: make it durable and forget them.
                plog.flush(now_ms=now_ms)
            except Exception:
                log.exception(
                    "%s-%d: cannot restore lost transaction markers; will try at the next start",
                    topic,
                    partition,
                )
                continue
            dealt_with[(topic, partition)] = None
        if dealt_with:
            # Synced: a marker written again must never be looked for at its old offset.
            self.txn.markers_synced(dealt_with, sync=True)

    def abort_hanging(self, now_ms: int) -> None:
        """Deal with open transactions of crashed logs that the journal lost (at open).

        A partition's join is written to the journal without fsync, so a power
        loss can keep a transaction's data and lose the join. Only a log opened
        without a clean close can hold such data. Each producer with an open
        transaction there goes to the coordinator (``adopt_hanging``), whose
        completions are carried out here, before the first request; a decided
        transaction completed this way can reveal a later one, hence a second
        pass. Producers no transactional id holds get an ABORT marker.
        """
        unclean = [
            (info.name, index)
            for info in self.logs.topics()
            for index, plog in self.logs.hosted(info.name)
            if not plog.opened_clean
        ]
        for _ in range(2):
            hanging: dict[int, dict[tuple[str, int], int]] = {}
            for topic, partition in unclean:
                try:
                    ongoing = self.producers.state(topic, partition).ongoing_transactions()
                except Exception:
                    log.exception("%s-%d: cannot load its producer state", topic, partition)
                    continue
                for first, pid in ongoing.items():
                    hanging.setdefault(pid, {})[(topic, partition)] = first
            if not hanging:
                return
            completions, orphans = self.txn.adopt_hanging(hanging, now_ms)
            for pid in sorted(orphans):
                for topic, partition in sorted(hanging[pid]):
                    self._abort_orphan(topic, partition, pid, now_ms)
            if not completions:
                return
            self.complete(completions, now_ms)

    def write_requested(
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
        transaction_version: int = 0,
    ) -> ErrorCode:
        """Write a marker a client asked for (WriteTxnMarkers: an admin's abort of a
        hanging transaction, KIP-664), durably, with the checks of the coordinator's
        own markers (a marker of ``transaction_version`` 2 needs an epoch above the
        partition's, KIP-1228).

        Returns:
            NONE, UNKNOWN_TOPIC_OR_PARTITION, INVALID_PRODUCER_EPOCH (an older epoch
            than the partition has seen), TRANSACTION_COORDINATOR_FENCED (an older
            coordinator epoch), or the storage error's code.
        """
        if not self._partition_exists(topic, partition):
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        try:
            refused = self.producers.state(topic, partition).check_marker(
                producer_id, producer_epoch, coordinator_epoch, transaction_version
            )
            if refused is not ErrorCode.NONE:
                return refused
            offset = self.producers.write_marker(
                topic,
                partition,
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                coordinator_epoch=coordinator_epoch,
                commit=commit,
                now_ms=now_ms,
            )
            # The coordinator's markers are tracked until a roll makes them durable;
            # nothing tracks this one, so it is on disk before the answer.
            self.logs.partition(topic, partition).flush(now_ms=now_ms)
        except BrokerError as exc:
            return exc.code
        if offset is not None:  # (None: refused, which the check above rules out)
            log.warning(
                "%s-%d: wrote %s marker for producer %d (epoch %d) at offset %d, as a client asked",
                topic,
                partition,
                "a COMMIT" if commit else "an ABORT",
                producer_id,
                producer_epoch,
                offset,
            )
            self._notify_append(topic, partition, MARKER_WAKES)
        return ErrorCode.NONE

    def _abort_orphan(self, topic: str, partition: int, pid: int, now_ms: int) -> None:
        """Write an ABORT marker for an open transaction no transactional id holds."""
        log.warning(
            "%s-%d: producer %d has an open transaction no transactional id holds "
            "(the journal lost it); aborting it",
            topic,
            partition,
            pid,
        )
        try:
            entry = self.producers.state(topic, partition).entry(pid)
            if entry is None:
                return
            self.producers.write_marker(
                topic,
                partition,
                producer_id=pid,
                producer_epoch=entry.epoch,
                coordinator_epoch=max(entry.coordinator_epoch, self.txn.coordinator_epoch),
                commit=False,
                now_ms=now_ms,
            )
            self.logs.partition(topic, partition).flush(now_ms=now_ms)
        except Exception:
            log.exception(
                "%s-%d: cannot abort the open transaction of producer %d; will try at the "
                "next start",
                topic,
                partition,
                pid,
            )
