"""Exactly-once glue: every partition's producer state, kept in step with its log.

:class:`ProducerStates` owns one :class:`~trafka.brokerlite.transactions.producer_state.ProducerStateManager`
per partition and is the only way the broker writes to a partition log: producers'
batches go through :meth:`ProducerStates.produce` (deduplication, sequence and epoch
checks, transaction verification) and transaction markers through
:meth:`ProducerStates.write_marker`. It reads no clock; the broker passes the time in.

Rules and invariants:

* After every write, a loaded state's ``map_end_offset`` is its log's end offset:
  the state is updated right after the log accepted the bytes, and a refused append
  changes neither. Reads (the last stable offset, aborted transactions) therefore
  always describe the whole log.
* A partition's state is loaded the first time anything needs it: the newest
  snapshot not beyond the log end offset, then a replay of the log after it
  (:func:`~trafka.brokerlite.transactions.producer_state.replay_log`). A snapshot beyond the log
  end (the log lost its tail in a crash recovery) or one that fails its checks is
  deleted. A log that cannot be replayed leaves an empty state (logged): producers
  are then unknown, which Kafka accepts (KIP-360).
* Snapshots are ``<offset>.snapshot`` files in the partition directory, named by the
  offset they describe (the state's ``map_end_offset``), written atomically (temp
  file, fsync, rename) when the log rolls to a new segment, when a state is loaded
  with no snapshot since its active segment began (a crash came before the roll's
  snapshot was written), and for every changed state on :meth:`ProducerStates.close`
  (a clean shutdown). The two newest are kept.
  Restarts therefore replay at most about one segment per partition, and after a
  clean shutdown nothing.
* Retention and DeleteRecords move log start offsets; :meth:`ProducerStates.truncate_heads`
  drops the aborted-transaction entries below them. Producers themselves are only
  forgotten by :meth:`ProducerStates.expire` (``producer_id_expiration_ms`` after
  their last write), as in Kafka.
* A deleted topic's states go with it (:meth:`ProducerStates.drop_topic`); its
  snapshot files go with its directory.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.records import ControlRecordType, encode_control_batch, iter_batches

from ..storage.cleaner import CleaningPass, CleaningStats
from ..storage.files import atomic_write
from ..storage.log_manager import LogManager
from ..storage.partition import AppendResult, PartitionLog
from .producer_state import (
    DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ProducerStateError,
    ProducerStateManager,
    headers_of,
    replay_log,
)

__all__ = ["CleaningJob", "ProduceResult", "ProducerStates", "TxnVerifier"]

logger = logging.getLogger("trafka.brokerlite.eos")

SNAPSHOT_SUFFIX = ".snapshot"
SNAPSHOTS_KEPT = 2

TxnVerifier = Callable[[str, int, int, str, int], ErrorCode]
"""``(transactional_id, producer_id, producer_epoch, topic, partition) -> ErrorCode``."""


@dataclasses.dataclass(frozen=True, slots=True)
class CleaningJob:
    """A compaction pass planned for one partition (:meth:`ProducerStates.plan_cleaning`)."""

    topic: str
    partition: int
    log: PartitionLog
    cleaning: CleaningPass


class ProduceResult(NamedTuple):
    """The outcome of one partition of a Produce request.

    Attributes:
        error: NONE when the records are in the log (written now, or earlier for a
            retried batch).
        message: why not, for the response's ``error_message``.
        base_offset: the first record's offset (the original one for a retry).
        log_append_time_ms: the LogAppendTime stamped, else -1 (also for a retry).
        log_start_offset: the partition's log start offset (also with a producer
            state error, as Kafka answers those; -1 when the transaction check
            refused the records before the log saw them).
        duplicate: the records repeat a batch already in the log (nothing written).
    """

    error: ErrorCode
    message: str | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    duplicate: bool = False


@dataclasses.dataclass(slots=True)
class _Loaded:
    state: ProducerStateManager
    log: PartitionLog
    segment_base: int  # the log's active segment when last seen, to notice rolls
    snapshot_offset: int  # map_end_offset of the newest snapshot file, -1 when none


def _snapshot_files(directory: Path) -> list[tuple[int, Path]]:
    """``(offset, path)`` of the snapshot files in ``directory``, oldest first."""
    found: list[tuple[int, Path]] = []
    try:
        names = os.listdir(directory)
    except OSError:
        return found
    for name in names:
        stem = name[: -len(SNAPSHOT_SUFFIX)]
        if name.endswith(SNAPSHOT_SUFFIX) and len(stem) == 20 and stem.isdigit():
            found.append((int(stem), directory / name))
    found.sort()
    return found


class ProducerStates:
    """The producer state of every partition of a broker (see the module docstring).

    Args:
        logs: the broker's log manager (the partitions).
        producer_id_expiration_ms: Kafka's ``producer.id.expiration.ms``.
    """

    def __init__(
        self,
        logs: LogManager,
        *,
        producer_id_expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS,
    ) -> None:
        self._logs = logs
        self._expiration_ms = producer_id_expiration_ms
        self._loaded: dict[tuple[str, int], _Loaded] = {}

    # -- access -------------------------------------------------------------------------------

    def state(self, topic: str, partition: int) -> ProducerStateManager:
        """The producer state of a partition, loaded (snapshot and replay) if needed.

        Raises:
            UnknownTopicOrPartitionError: no such partition.
        """
        return self._entry(topic, partition, self._logs.partition(topic, partition)).state

    def last_stable_offset(self, topic: str, partition: int) -> int:
        """Where ``read_committed`` consumers must stop: the first offset of the oldest
        open transaction, else the high watermark.

        Raises:
            UnknownTopicOrPartitionError: no such partition.
        """
        log = self._logs.partition(topic, partition)
        state = self._entry(topic, partition, log).state
        return state.last_stable_offset(log.high_watermark, log.log_start_offset)

    def loaded(self) -> list[tuple[str, int]]:
        """The partitions whose state is in memory (for tests and diagnostics)."""
        return sorted(self._loaded)

    # -- writes -------------------------------------------------------------------------------

    def produce(
        self,
        topic: str,
        partition: int,
        records: bytes | bytearray | memoryview,
        *,
        transactional_id: str | None,
        verify: TxnVerifier,
        now_ms: int,
    ) -> ProduceResult:
        """Append a producer's batches to a partition, unless they are a retry or refused.

        In order: a retry of one of the producer's last five batches is acknowledged
        with its original offsets and not written again; transactional batches must
        belong to an ongoing transaction that added the partition (``verify``, KIP-890);
        then the producer state's sequence and epoch checks; then the log's own
        validation.

        Args:
            topic, partition: where.
            records: the request's records blob (magic 2 batches).
            transactional_id: the request's transactional id.
            verify: the transaction coordinator's partition check.
            now_ms: the current time.

        Returns:
            The outcome; errors are reported, not raised, except storage errors.

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            BrokerError: the log refused the records (corrupt, too large, storage).
        """
        log = self._logs.partition(topic, partition)
        try:
            headers = headers_of(records)
        except DecodeError:
            # The log refuses whatever cannot be framed, and names the fault precisely
            # (legacy format, bad length, codec). Should it ever accept such bytes, the
            # state is rebuilt from the log instead of drifting from it.
            result = log.append(records, now_ms=now_ms)
            self._loaded.pop((topic, partition), None)
            return ProduceResult(
                ErrorCode.NONE,
                None,
                result.base_offset,
                result.log_append_time_ms,
                result.log_start_offset,
            )
        entry = self._entry(topic, partition, log)
        state = entry.state
        check = state.check_append(headers)
        if check.duplicate is not None:
            # Kafka answers a retry with the batch's remembered timestamp as its
            # log-append time, whatever the topic's timestamp type.
            return ProduceResult(
                ErrorCode.NONE,
                None,
                check.duplicate.first_offset,
                check.duplicate.timestamp,
                log.log_start_offset,
                duplicate=True,
            )
        txn = next((h for h in headers if h.is_transactional), None)
        if txn is not None and not txn.is_control:
            code = verify(
                transactional_id or "", txn.producer_id, txn.producer_epoch, topic, partition
            )
            if code is not ErrorCode.NONE:
                return ProduceResult(
                    code,
                    f"producer {txn.producer_id} epoch {txn.producer_epoch} has no ongoing "
                    f"transaction with {topic}-{partition} ({code.name})",
                )
        if check.error is not ErrorCode.NONE:
            return ProduceResult(check.error, check.message, log_start_offset=log.log_start_offset)
        result = self._append(entry, records, now_ms=now_ms, from_client=True)
        state.on_append(headers, result.base_offset, append_time_ms=result.log_append_time_ms)
        return ProduceResult(
            ErrorCode.NONE,
            None,
            result.base_offset,
            result.log_append_time_ms,
            result.log_start_offset,
        )

    def write_marker(
        self,
        topic: str,
        partition: int,
        *,
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int,
        commit: bool,
        now_ms: int,
    ) -> int | None:
        """Append a COMMIT or ABORT control batch for a producer's transaction.

        A marker the producer state refuses (an older producer or coordinator epoch
        than it has seen: a stale retry) is skipped.

        Returns:
            The marker's offset, or None when it was skipped.

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            BrokerError: the log could not write it.
        """
        log = self._logs.partition(topic, partition)
        entry = self._entry(topic, partition, log)
        refused = entry.state.check_marker(producer_id, producer_epoch, coordinator_epoch)
        if refused is not ErrorCode.NONE:
            logger.warning(
                "%s-%d: skipping a %s marker of producer %d epoch %d: %s",
                topic,
                partition,
                "COMMIT" if commit else "ABORT",
                producer_id,
                producer_epoch,
                refused.name,
            )
            return None
        data = encode_control_batch(
            ControlRecordType.COMMIT if commit else ControlRecordType.ABORT,
            producer_id=producer_id,
            producer_epoch=producer_epoch,
            coordinator_epoch=coordinator_epoch,
            timestamp=now_ms,
        )
        result = self._append(entry, data, now_ms=now_ms, from_client=False)
        entry.state.on_marker(
            producer_id,
            producer_epoch,
            coordinator_epoch,
            commit=commit,
            offset=result.base_offset,
            timestamp=now_ms,
        )
        return result.base_offset

    def append_replicated(
        self, topic: str, partition: int, records: bytes | memoryview, *, now_ms: int
    ) -> AppendResult:
        """Append a follower's copy of its leader's batches (offsets, epochs and
        markers as the leader wrote them; no producer checks: the leader made
        them) and bring the partition's producer state up to date with them, so
        that the follower deduplicates and knows open transactions as its leader
        did should it lead next.

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            BrokerError: the log refused the batches.
        """
        log = self._logs.partition(topic, partition)
        before = log.log_end_offset
        result = log.append_replicated(records, now_ms=now_ms)
        entry = self._loaded.get((topic, partition))
        if entry is not None and entry.log is log:
            if entry.state.map_end_offset == before:
                # The batches just written, as fetched: no need to read them back.
                entry.state.rebuild(iter_batches(records))
            else:
                replay_log(entry.state, log)
            base = log.active_segment_base_offset
            if base != entry.segment_base:
                entry.segment_base = base
                self._write_snapshot(entry)
        return result

    def forget(self, topic: str, partition: int) -> None:
        """Drop a partition's state from memory (its log was truncated): the next
        use loads it again from the snapshots and the log."""
        self._loaded.pop((topic, partition), None)

    # -- maintenance --------------------------------------------------------------------------

    def truncate_head(self, topic: str, partition: int) -> None:
        """Forget aborted transactions below one partition's log start offset (after
        DeleteRecords moved it); a partition not loaded is left alone (its load will)."""
        entry = self._loaded.get((topic, partition))
        if entry is not None and not entry.log.closed:
            entry.state.truncate_head(entry.log.log_start_offset)

    def truncate_heads(self) -> None:
        """Forget aborted transactions below each partition's log start offset
        (after retention or DeleteRecords moved it)."""
        for entry in self._loaded.values():
            if not entry.log.closed:
                entry.state.truncate_head(entry.log.log_start_offset)

    def expire(self, now_ms: int) -> int:
        """Forget producers idle for ``producer_id_expiration_ms`` (and without an open
        transaction) on every loaded partition.

        Returns:
            How many producer entries were forgotten.
        """
        return sum(entry.state.expire(now_ms) for entry in self._loaded.values())

    def drop_topic(self, topic: str) -> None:
        """Forget the states of a deleted topic."""
        for key in [k for k in self._loaded if k[0] == topic]:
            del self._loaded[key]

    def close(self) -> None:
        """Snapshot every state that changed since its last snapshot (clean shutdown).

        Call before the logs are closed. Failures are logged: they only cost a longer
        replay at the next start.
        """
        for entry in self._loaded.values():
            if entry.log.closed:
                continue
            if entry.state.map_end_offset != entry.snapshot_offset:
                self._write_snapshot(entry)
        self._loaded.clear()

    # -- compaction ---------------------------------------------------------------------------

    def plan_cleaning(self, now_ms: int, *, force: bool = False) -> CleaningJob | None:
        """The compaction pass due most, over all compacted partitions (see ``cleaner.py``).

        The partition with the largest dirty ratio among those due goes first. The
        pass gets what only the producer state knows: the last stable offset (no
        open transaction is compacted), the aborted transactions (their records
        go) and each producer's last batch (kept for its sequence state).

        Args:
            now_ms: the current time.
            force: plan a pass for any partition with dirty bytes.

        Returns:
            The job (run its ``cleaning.run()``, then :meth:`finish_cleaning`), or None.
        """
        candidates: list[tuple[float, str, int, PartitionLog, int]] = []
        for info in self._logs.topics():
            if not self._logs.config(info.name).compact:
                continue
            for index, log in self._logs.hosted(info.name):
                if log.cleaning or log.closed:
                    continue
                lso = self.last_stable_offset(info.name, index)
                ratio = log.dirty_ratio(now_ms, last_stable_offset=lso)
                if ratio > 0:
                    candidates.append((ratio, info.name, index, log, lso))
        candidates.sort(key=lambda c: -c[0])
        for _, topic, index, log, lso in candidates:
            state = self._entry(topic, index, log).state
            aborted: dict[int, list[tuple[int, int]]] = {}
            for txn in state.aborted_index():
                aborted.setdefault(txn.producer_id, []).append((txn.first_offset, txn.last_offset))
            last_offsets = {
                pid: entry.batches[-1].last_offset
                for pid, entry in state.producers.items()
                if entry.batches
            }
            cleaning = log.plan_cleaning(
                now_ms,
                last_stable_offset=lso,
                aborted=aborted,
                producer_last_offsets=last_offsets,
                force=force,
            )
            if cleaning is not None:
                return CleaningJob(topic, index, log, cleaning)
        return None

    def finish_cleaning(self, job: CleaningJob, now_ms: int) -> CleaningStats | None:
        """Swap a finished pass in (see :meth:`PartitionLog.finish_cleaning`).

        Returns:
            The pass's figures, or None when it was thrown away (the log changed
            or went away meanwhile).

        Raises:
            LogStorageError: the swap failed half-way (the log is offline).
        """
        current = self._logs.partition(job.topic, job.partition) if self._has(job) else None
        if current is not job.log:
            job.cleaning.discard()
            return None
        return job.log.finish_cleaning(job.cleaning, now_ms=now_ms)

    def abandon_cleaning(self, job: CleaningJob, reason: str) -> None:
        """Throw away a pass that failed: its files go, and its partition is not
        compacted again until the broker restarts."""
        job.cleaning.discard()
        job.log.abandon_cleaning(job.cleaning, reason)

    def _has(self, job: CleaningJob) -> bool:
        info = self._logs.topic(job.topic)
        return info is not None and job.partition < info.num_partitions

    # -- internals ----------------------------------------------------------------------------

    def _entry(self, topic: str, partition: int, log: PartitionLog) -> _Loaded:
        key = (topic, partition)
        entry = self._loaded.get(key)
        if entry is None or entry.log is not log:
            # A new log object under a known name is a recreated topic: start afresh.
            entry = self._loaded[key] = self._load(topic, partition, log)
        return entry

    def _load(self, topic: str, partition: int, log: PartitionLog) -> _Loaded:
        state = ProducerStateManager(
            producer_id_expiration_ms=self._expiration_ms, name=f"{topic}-{partition}"
        )
        end = log.log_end_offset
        newest = -1
        for offset, path in reversed(_snapshot_files(log.directory)):
            if offset > end:
                logger.info("%s: dropping snapshot %s beyond the log end %d", log, path.name, end)
                path.unlink(missing_ok=True)
                continue
            if newest >= 0:
                continue
            try:
                state.load_snapshot(path.read_bytes())
            except (OSError, ProducerStateError) as exc:
                logger.warning("%s: dropping unusable snapshot %s: %s", log, path.name, exc)
                path.unlink(missing_ok=True)
                continue
            newest = offset
        try:
            applied = replay_log(state, log)
        except Exception:
            logger.exception(
                "%s: cannot rebuild producer state from the log; producers start unknown", log
            )
            state.clear(end)
            applied = 0
        if applied:
            logger.debug("%s: producer state rebuilt (%d batches replayed)", log, applied)
        entry = _Loaded(state, log, log.active_segment_base_offset, newest)
        if max(newest, 0) < entry.segment_base <= state.map_end_offset:
            # A crash took the snapshot of the last roll (or came between the roll and
            # the snapshot): take it now, so the next start replays one segment again.
            self._write_snapshot(entry)
        return entry

    def _append(
        self,
        entry: _Loaded,
        data: bytes | bytearray | memoryview,
        *,
        now_ms: int,
        from_client: bool,
    ) -> AppendResult:
        before = entry.state.map_end_offset
        result = entry.log.append(data, now_ms=now_ms, from_client=from_client)
        base = entry.log.active_segment_base_offset
        if base != entry.segment_base:
            entry.segment_base = base
            # The state still describes the log up to this append: snapshot it there.
            if before == result.base_offset:
                self._write_snapshot(entry)
        return result

    def _write_snapshot(self, entry: _Loaded) -> None:
        state = entry.state
        directory = entry.log.directory
        offset = state.map_end_offset
        try:
            atomic_write(directory / f"{offset:020d}{SNAPSHOT_SUFFIX}", state.snapshot())
        except OSError as exc:
            logger.warning("%s: cannot write a producer snapshot: %s", entry.log, exc)
            return
        entry.snapshot_offset = offset
        files = _snapshot_files(directory)
        for _, path in files[:-SNAPSHOTS_KEPT]:
            try:
                path.unlink()
            except OSError as exc:
                logger.warning("%s: cannot delete old snapshot %s: %s", entry.log, path.name, exc)
