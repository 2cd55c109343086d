"""The requests that move a transaction: InitProducerId, AddPartitionsToTxn,
AddOffsetsToTxn, EndTxn and TxnOffsetCommit (sans-IO), over the records of
:mod:`.decisions`.

Rules and invariants (Kafka's ``TransactionCoordinator``):

* Every request writes the store before it answers. The write is fsynced when a
  power loss could otherwise contradict the answer: producer ids and epochs
  (InitProducerId). Partitions and groups joining a transaction
  (AddPartitionsToTxn, AddOffsetsToTxn) and its offsets (TxnOffsetCommit) are
  written unsynced: they only count if the transaction commits, and the fsync of
  its decision carries every entry before it to disk.
* InitProducerId without a transactional id returns a fresh producer id with epoch
  0, always. With one: a new id gets a fresh producer id and epoch 0; an existing
  one keeps its producer id and gets the next epoch, which fences every older
  instance. If a transaction is Ongoing it is aborted first with the epoch bumped
  (so the abort markers fence the old instance on every partition) and the answer
  is CONCURRENT_TRANSACTIONS; the client retries and gets the epoch after that. An
  exhausted epoch (32766) moves to a new producer id at epoch 0.
* KIP-360 (InitProducerId v3+ with ``producer_id``/``producer_epoch``): the epoch
  given must be the current one (it is bumped) or the previous one (a retry; the
  current epoch is returned), and the producer id the current one (or the previous
  one after an exhausted epoch); otherwise PRODUCER_FENCED.
* Transaction APIs check, in order: the transactional id is known and bound to the
  producer id (INVALID_PRODUCER_ID_MAPPING), the epoch is the current one
  (PRODUCER_FENCED, INVALID_PRODUCER_EPOCH before AddPartitionsToTxn/AddOffsetsToTxn/
  EndTxn v2 and InitProducerId v4), then the state (CONCURRENT_TRANSACTIONS while
  Prepare*, INVALID_TXN_STATE for an EndTxn that contradicts it). EndTxn repeating
  a completed outcome succeeds (a retry).
* EndTxn's decision is fsynced before the answer only when a partition of the
  transaction fsyncs its records before answering them (``sync_decision_for``:
  ``flush.messages=1``) or when it has no partitions.
* TxnOffsetCommit (KIP-447): the offsets are held by the transaction (durably, in
  the store) and applied to the group only by a commit; an abort drops them.
  The group's member id, instance id and generation are checked by the
  ``validate_group`` callable. In a cluster the group's coordinator holds them
  instead (``stage_group_offsets``), and only the group is checked here.
* Transaction version 2 (KIP-890 part 2; its rules in :mod:`.tv2`), decided per
  request as Kafka decides it: the brokers' AddPartitionsToTxn v4+ without
  ``verify_only`` (what a Produce v12+ leader sends) adds as TV2; TxnOffsetCommit
  v5+ adds its group itself once the group's checks passed; EndTxn v5+ bumps the
  epoch in its decision and answers with the next transaction's id and epoch.
  An abort that fences (InitProducerId, timeout) bumps once; it is a TV2
  decision when the finalized ``transaction.version`` is 2 (Kafka decides it
  by that level), so the fenced instance's EndTxn v5 is a retry of it
  (INVALID_TXN_STATE for a commit), else PRODUCER_FENCED.
"""

from __future__ import annotations

import dataclasses
import logging

from trafka.brokerlite.groups.offsets import CommittedOffset
from trafka.brokerlite.transactions.decisions import (
    NO_PRODUCER_EPOCH,
    NO_PRODUCER_ID,
    PREPARED,
    TIMEOUT,
    Refused,
    TxnCompletion,
    TxnDecisions,
    is_epoch_exhausted,
)
from trafka.brokerlite.transactions.journal import TransactionState, TxnJournalError, TxnRecord
from trafka.brokerlite.transactions.tv2 import (
    decided_epochs,
    next_ids,
    producer_check,
    settled_outcome,
)
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as _ipi
from trafka.codec.messages import k24_add_partitions_to_txn as _apt
from trafka.codec.messages import k25_add_offsets_to_txn as _aot
from trafka.codec.messages import k26_end_txn as _et
from trafka.codec.messages import k28_txn_offset_commit as _toc

__all__ = ["PRODUCER_ID_BLOCK", "TxnTransitions"]

# The coordinator's logger: its log lines keep the name they had before the split.
log = logging.getLogger("trafka.brokerlite.transactions.coordinator")

PRODUCER_ID_BLOCK = 1000

_S = TransactionState

# The API version from which each transaction API can carry PRODUCER_FENCED; older
# clients get INVALID_PRODUCER_EPOCH instead, which they handle the same way (KIP-588).
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}


def _topic_results(
    order: dict[str, list[int]], codes: dict[tuple[str, int], ErrorCode]
) -> list[_apt.AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult]:
    Result = _apt.AddPartitionsToTxnResponse
    return [
        Result.AddPartitionsToTxnTopicResult(
            name=name,
            results_by_partition=[
                Result.AddPartitionsToTxnPartitionResult(
                    partition_index=p, partition_error_code=codes[(name, p)]
                )
                for p in parts
            ],
        )
        for name, parts in order.items()
    ]


def group_code(code: ErrorCode, version: int, generation: int) -> ErrorCode:
    """A TxnOffsetCommit's group check as ``version`` answers it: before v6
    (KIP-1319) a missing group asked with a generation (GROUP_ID_NOT_FOUND) and
    a stale member epoch are both ILLEGAL_GENERATION; a share group's
    GROUP_ID_NOT_FOUND, for a commit without a generation, stays."""
    if version < 6 and (
        code is ErrorCode.STALE_MEMBER_EPOCH
        or (code is ErrorCode.GROUP_ID_NOT_FOUND and generation >= 0)
    ):
        return ErrorCode.ILLEGAL_GENERATION
    return code


class TxnTransitions(TxnDecisions):
    """The transaction requests (see the module rules)."""

    def init_producer_id(
        self, request: _ipi.InitProducerIdRequest, version: int, now_ms: int
    ) -> tuple[_ipi.InitProducerIdResponse, list[TxnCompletion]]:
        """Handle InitProducerId (v0-5), for idempotent and transactional producers.

        Returns:
            The response, and the completion to carry out when an ongoing transaction
            of the previous instance is being aborted (the response is then
            CONCURRENT_TRANSACTIONS and the client retries).
        """
        completions: list[TxnCompletion] = []
        try:
            pid, epoch = self._init(request, version, now_ms, completions)
        except Refused as refused:
            code = self._fenced_code(refused.code, ApiKey.INIT_PRODUCER_ID, version)
            return _ipi.InitProducerIdResponse(
                error_code=code, producer_id=-1, producer_epoch=-1
            ), completions
        return _ipi.InitProducerIdResponse(producer_id=pid, producer_epoch=epoch), completions

    def add_partitions_to_txn(
        self, request: _apt.AddPartitionsToTxnRequest, version: int, now_ms: int
    ) -> _apt.AddPartitionsToTxnResponse:
        """Handle AddPartitionsToTxn: v0-3 (clients: one transaction) and v4-5 (a
        batch of transactions, each adding partitions or, with ``verify_only``,
        checking which are in it, as brokers ask since KIP-890).

        Per transaction: unknown partitions get UNKNOWN_TOPIC_OR_PARTITION and the
        others OPERATION_NOT_ATTEMPTED (nothing is added); otherwise every partition
        gets the one outcome (for ``verify_only``: NONE or INVALID_TXN_STATE each).
        """
        Result = _apt.AddPartitionsToTxnResponse
        if version < 4:
            order, codes = self._add_topics(
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                request.v3_and_below_topics,
                False,
                version,
                now_ms,
            )
            return Result(results_by_topic_v3_and_below=_topic_results(order, codes))
        results = []
        for txn in request.transactions:
            order, codes = self._add_topics(
                txn.transactional_id,
                txn.producer_id,
                txn.producer_epoch,
                txn.topics,
                txn.verify_only,
                version,
                now_ms,
            )
            results.append(
                Result.AddPartitionsToTxnResult(
                    transactional_id=txn.transactional_id,
                    topic_results=_topic_results(order, codes),
                )
            )
        return Result(results_by_transaction=results)

    def _add_topics(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        topics: list[_apt.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic],
        verify_only: bool,
        version: int,
        now_ms: int,
    ) -> tuple[dict[str, list[int]], dict[tuple[str, int], ErrorCode]]:
        order: dict[str, list[int]] = {}
        for topic in topics:
            seen = order.setdefault(topic.name, [])
            seen.extend(p for p in topic.partitions if p not in seen)
        wanted = [(t, p) for t, ps in order.items() for p in ps]
        unknown = {tp for tp in wanted if not self._partition_exists(*tp)}
        if unknown:
            return order, {
                tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                if tp in unknown
                else ErrorCode.OPERATION_NOT_ATTEMPTED
                for tp in wanted
            }
        if verify_only:
            try:
                record = self._checked(tid, producer_id, producer_epoch)
                if record.state in PREPARED:
                    raise Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
            except Refused as refused:
                return order, dict.fromkeys(wanted, refused.code)
            return order, {
                tp: ErrorCode.NONE if tp in record.partitions else ErrorCode.INVALID_TXN_STATE
                for tp in wanted
            }
        # v4+ is the brokers' form, sent for TV2 clients (Kafka: TV_2 from v4).
        code = self._add(tid, producer_id, producer_epoch, set(wanted), None, now_ms, version >= 4)
        return order, dict.fromkeys(
            wanted, self._fenced_code(code, ApiKey.ADD_PARTITIONS_TO_TXN, version)
        )

    def add_offsets_to_txn(
        self, request: _aot.AddOffsetsToTxnRequest, version: int, now_ms: int
    ) -> _aot.AddOffsetsToTxnResponse:
        """Handle AddOffsetsToTxn: add a consumer group's offsets to the transaction."""
        if not request.group_id:
            return _aot.AddOffsetsToTxnResponse(error_code=ErrorCode.INVALID_GROUP_ID)
        # In a cluster the group's offsets partition joins the transaction, so that
        # its leader (the group's coordinator) gets the marker that settles them.
        joining = (
            set() if self._group_partition is None else {self._group_partition(request.group_id)}
        )
        code = self._add(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            joining,
            request.group_id,
            now_ms,
        )
        return _aot.AddOffsetsToTxnResponse(
            error_code=self._fenced_code(code, ApiKey.ADD_OFFSETS_TO_TXN, version)
        )

    def end_txn(
        self, request: _et.EndTxnRequest, version: int, now_ms: int
    ) -> tuple[_et.EndTxnResponse, list[TxnCompletion]]:
        """Handle EndTxn: commit or abort the ongoing transaction. v0-4 keep the
        epoch (TV1); v5+ bump it (TV2, :mod:`.tv2`) and answer with the next
        transaction's producer id and epoch.

        Returns:
            The response (sent as soon as the outcome is durable, as Kafka does),
            and the completion to carry out (at most one).
        """
        completions: list[TxnCompletion] = []
        code = self._end(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            request.committed,
            now_ms,
            completions,
            version >= 5,
        )
        code = self._fenced_code(code, ApiKey.END_TXN, version)
        record = self._records.get(request.transactional_id)
        if version >= 5 and code is ErrorCode.NONE and record is not None:
            pid, epoch = next_ids(record)
            answer = _et.EndTxnResponse(error_code=code, producer_id=pid, producer_epoch=epoch)
            return answer, completions
        return _et.EndTxnResponse(error_code=code), completions

    def txn_offset_commit(
        self, request: _toc.TxnOffsetCommitRequest, version: int, now_ms: int
    ) -> _toc.TxnOffsetCommitResponse:
        """Handle TxnOffsetCommit: hold offsets until the transaction commits.

        Per partition, in Kafka's order: UNKNOWN_TOPIC_OR_PARTITION, then the
        request-wide errors (INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH,
        INVALID_TXN_STATE when the group was not added with AddOffsetsToTxn or no
        transaction is ongoing, CONCURRENT_TRANSACTIONS while it completes, the
        group's FENCED_INSTANCE_ID / UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION from v3),
        then OFFSET_METADATA_TOO_LARGE.
        """
        codes: dict[tuple[int, int], ErrorCode] = {}
        known: list[tuple[int, int]] = []
        for ti, topic in enumerate(request.topics):
            for pi, part in enumerate(topic.partitions):
                if self._partition_exists(topic.name, part.partition_index):
                    known.append((ti, pi))
                else:
                    codes[(ti, pi)] = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        if known:
            error = self._check_txn_commit(request, version, now_ms)
            if error is not ErrorCode.NONE:
                codes.update(dict.fromkeys(known, error))
            else:
                self._stage_offsets(request, version, now_ms, known, codes)
        Response = _toc.TxnOffsetCommitResponse
        return Response(
            topics=[
                Response.TxnOffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        Response.TxnOffsetCommitResponsePartition(
                            partition_index=part.partition_index, error_code=codes[(ti, pi)]
                        )
                        for pi, part in enumerate(topic.partitions)
                    ],
                )
                for ti, topic in enumerate(request.topics)
            ]
        )

    # -- InitProducerId -------------------------------------------------------------------------

    def _init(
        self,
        request: _ipi.InitProducerIdRequest,
        version: int,
        now_ms: int,
        completions: list[TxnCompletion],
    ) -> tuple[int, int]:
        tid = request.transactional_id
        if tid is None:
            # An idempotent producer: always a fresh id (an epoch bump included).
            return self._allocate(), 0
        if not tid:
            raise Refused(ErrorCode.INVALID_REQUEST)
        timeout = request.transaction_timeout_ms
        if not 0 < timeout <= self._max_timeout_ms:
            raise Refused(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        expected: tuple[int, int] | None = None
        if version >= 3:
            given = (request.producer_id, request.producer_epoch)
            if given != (NO_PRODUCER_ID, NO_PRODUCER_EPOCH):
                if given[0] == NO_PRODUCER_ID or given[1] == NO_PRODUCER_EPOCH:
                    raise Refused(ErrorCode.INVALID_REQUEST)
                expected = given
        record = self._records.get(tid)
        if record is None:
            record = TxnRecord(
                transactional_id=tid,
                producer_id=self._allocate(),
                timeout_ms=timeout,
                last_update_ms=now_ms,
            )
        if expected is not None and not (
            record.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == record.producer_id
            or (expected[0] == record.last_producer_id and is_epoch_exhausted(expected[1]))
        ):
            raise Refused(ErrorCode.PRODUCER_FENCED)
        if record.state in PREPARED:
            raise Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
        if record.state is _S.ONGOING:
            # Abort the previous instance's transaction with a bumped epoch (so its
            # markers fence it everywhere) and let the client retry for its own epoch.
            completions.append(self._fence_and_abort(record, now_ms))
            log.info("transaction %r: aborting the ongoing transaction of a fenced instance", tid)
            raise Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
        if is_epoch_exhausted(record.producer_epoch) and (
            expected is None or expected[1] == record.producer_epoch
        ):
            new_pid = self._allocate()
            log.info(
                "transaction %r: epochs exhausted, producer id %d -> %d",
                tid,
                record.producer_id,
                new_pid,
            )
            epoch, last_epoch = (
                0,
                (record.producer_epoch if expected is not None else NO_PRODUCER_EPOCH),
            )
            pid = new_pid
        else:
            pid = record.producer_id
            bumped = record.producer_epoch + 1
            if expected is None:
                epoch, last_epoch = bumped, NO_PRODUCER_EPOCH
            elif record.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == record.producer_epoch:
                epoch, last_epoch = bumped, record.producer_epoch
            elif expected[1] == record.last_producer_epoch:
                # A retry of a bump whose answer was lost: same answer again.
                epoch, last_epoch = record.producer_epoch, record.last_producer_epoch
            else:
                raise Refused(ErrorCode.PRODUCER_FENCED)
        ready = dataclasses.replace(
            record,
            producer_id=pid,
            last_producer_id=record.producer_id,
            producer_epoch=epoch,
            last_producer_epoch=last_epoch,
            timeout_ms=timeout,
            state=_S.EMPTY,
            partitions=(),
            groups=(),
            pending_offsets={},
            txn_start_ms=-1,
            last_update_ms=now_ms,
            tv2=False,
        )
        self._write(ready)
        log.info("transaction %r: producer id %d epoch %d", tid, pid, epoch)
        return pid, epoch

    def _allocate(self) -> int:
        if self._allocate_external is not None:
            try:
                return self._allocate_external()
            except Exception as exc:
                log.error("cannot allocate a producer id: %s", exc)
                raise Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
        if self._next_pid >= self._journal.producer_id_limit:
            try:
                self._journal.reserve_producer_ids(self._next_pid + PRODUCER_ID_BLOCK)
            except TxnJournalError as exc:
                log.error("cannot reserve producer ids: %s", exc)
                raise Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
        pid = self._next_pid
        self._next_pid += 1
        return pid

    # -- AddPartitionsToTxn / AddOffsetsToTxn ---------------------------------------------------

    def _add(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        partitions: set[tuple[str, int]],
        group: str | None,
        now_ms: int,
        tv2: bool = False,
    ) -> ErrorCode:
        try:
            record = self._checked(tid, producer_id, producer_epoch)
            if record.state in PREPARED:
                raise Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
            if (
                record.state is _S.ONGOING
                and partitions <= set(record.partitions)
                and (group is None or group in record.groups)
            ):
                return ErrorCode.NONE
            starting = record.state is not _S.ONGOING
            groups = set(record.groups)
            if group is not None:
                groups.add(group)
            ongoing = dataclasses.replace(
                record,
                state=_S.ONGOING,
                partitions=tuple(sorted(set(record.partitions) | partitions)),
                groups=tuple(sorted(groups)),
                txn_start_ms=now_ms if starting else record.txn_start_ms,
                last_update_ms=now_ms,
                tv2=tv2,
            )
            # Unsynced: a join lost with its data's fsync is adopted at open
            # (see the module docstring and adopt_hanging).
            self._write(ongoing, sync=False)
        except Refused as refused:
            return refused.code
        if starting:
            self._push(ongoing.txn_start_ms + ongoing.timeout_ms, tid, TIMEOUT)
        return ErrorCode.NONE

    def _checked(self, tid: str, pid: int, epoch: int, ending: bool = False) -> TxnRecord:
        if not tid:
            raise Refused(ErrorCode.INVALID_REQUEST)
        record = self._records.get(tid)
        code = producer_check(record, pid, epoch, ending=ending)
        if record is None or code is not ErrorCode.NONE:
            raise Refused(code)
        return record

    # -- EndTxn ---------------------------------------------------------------------------------

    def _end(
        self,
        tid: str,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        now_ms: int,
        completions: list[TxnCompletion],
        bump: bool = False,
    ) -> ErrorCode:
        try:
            record = self._checked(tid, producer_id, producer_epoch, ending=bump)
        except Refused as refused:
            return refused.code
        if record.state is not _S.ONGOING:
            code = settled_outcome(record, producer_id, producer_epoch, commit, bump)
            if code is not None:  # (None: TV2's abort with nothing ongoing, which bumps)
                return code
        try:
            prepared = dataclasses.replace(
                record,
                state=_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT,
                last_update_ms=now_ms,
                decision_ends=self._ends(record.partitions),
                **decided_epochs(record, bump, self._allocate),
            )
            self._write(prepared, sync=self._decision_sync(record))
        except Refused as refused:
            return refused.code
        completions.append(self._issue(prepared, now_ms))
        return ErrorCode.NONE

    def _decision_sync(self, record: TxnRecord) -> bool:
        """Whether EndTxn waits for the fsync of ``record``'s decision.

        Only when a partition of the transaction fsyncs its records before it
        answers (``sync_decision_for``), or when the transaction holds no
        records: a decision is acknowledged as durably as its records are.
        """
        partitions = record.partitions
        return not partitions or any(self._sync_decision_for(t, p) for t, p in partitions)

    # -- TxnOffsetCommit ------------------------------------------------------------------------

    def _check_txn_commit(
        self, request: _toc.TxnOffsetCommitRequest, version: int, now_ms: int
    ) -> ErrorCode:
        # At the group's coordinator of a cluster (stage_group_offsets), which does
        # not hold the transaction, only the group is checked here; the producer's
        # epoch is checked against the offsets it holds when they are staged.
        joins = False  # v5+ (TV2): the group joins itself once its checks passed
        if self._stage_group_offsets is None:
            record = self._records.get(request.transactional_id)
            if record is None or record.producer_id != request.producer_id:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if record.producer_epoch != request.producer_epoch:
                # What Kafka's offsets partition answers for a stale producer epoch.
                return ErrorCode.INVALID_PRODUCER_EPOCH
            if record.state in PREPARED:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            if record.state is not _S.ONGOING or request.group_id not in record.groups:
                if version < 5:
                    return ErrorCode.INVALID_TXN_STATE
                joins = True
        if version < 3:
            return ErrorCode.NONE
        generation = request.generation_id_or_member_epoch
        code = self._validate_group(
            request.group_id, generation, request.member_id, request.group_instance_id
        )
        code = group_code(code, version, generation)
        if joins and code is ErrorCode.NONE:
            tid, pid, epoch = request.transactional_id, request.producer_id, request.producer_epoch
            return self._add(tid, pid, epoch, set(), request.group_id, now_ms, True)
        return code

    def _stage_offsets(
        self,
        request: _toc.TxnOffsetCommitRequest,
        version: int,
        now_ms: int,
        known: list[tuple[int, int]],
        codes: dict[tuple[int, int], ErrorCode],
    ) -> None:
        staged: dict[tuple[str, int], CommittedOffset] = {}
        accepted: list[tuple[int, int]] = []
        for ti, pi in known:
            topic = request.topics[ti]
            part = topic.partitions[pi]
            metadata = part.committed_metadata
            if metadata is not None and len(metadata) > self._metadata_max:
                codes[(ti, pi)] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            staged[(topic.name, part.partition_index)] = CommittedOffset(
                offset=part.committed_offset,
                leader_epoch=part.committed_leader_epoch if version >= 2 else -1,
                metadata=metadata,
                commit_timestamp_ms=now_ms,
            )
            accepted.append((ti, pi))
        if not accepted:
            return
        if self._stage_group_offsets is not None:
            code = self._stage_group_offsets(
                request.group_id, request.producer_id, request.producer_epoch, staged
            )
            for key in accepted:
                codes[key] = code
            return
        record = self._records[request.transactional_id]
        pending = dict(record.pending_offsets)
        merged = dict(pending.get(request.group_id, {}))
        merged.update(staged)
        pending[request.group_id] = merged
        try:
            self._write(
                dataclasses.replace(record, pending_offsets=pending, last_update_ms=now_ms),
                sync=False,  # counts only through the fsynced PrepareCommit
            )
        except Refused as refused:
            code = refused.code
        else:
            code = ErrorCode.NONE
        for key in accepted:
            codes[key] = code

    @staticmethod
    def _fenced_code(code: ErrorCode, api_key: int, version: int) -> ErrorCode:
        if code is ErrorCode.PRODUCER_FENCED and version < _FENCED_SINCE[api_key]:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return code
