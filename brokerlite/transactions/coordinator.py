"""brokerlite's transaction coordinator: Kafka's exactly-once protocol, sans-IO.

:class:`TransactionCoordinator` takes decoded requests (the generated codec
dataclasses), the request version and the current time, and returns responses plus
the side effects the broker must carry out. It owns no socket, task or clock. It
follows Kafka's ``TransactionCoordinator``/``TransactionMetadata`` with transaction
version 1 semantics: one producer epoch per producer session, not per transaction
(KIP-890 part 2 is not implemented; brokerlite does not advertise the
``transaction.version`` feature, so clients do not expect it).

Calling protocol:

* Every request method writes the transaction journal before it answers; a journal
  failure is COORDINATOR_NOT_AVAILABLE (retriable) and changes nothing. The write
  is fsynced when a power loss could otherwise contradict the answer: producer ids
  and epochs (InitProducerId) and the decisions of timeouts and fencing.
  Partitions and groups joining a transaction (AddPartitionsToTxn,
  AddOffsetsToTxn) and its offsets (TxnOffsetCommit) are written unsynced: they
  only count if the transaction commits, and the fsync of its decision carries
  every entry before it to disk (the journal is append-only). A power loss can
  take a partition's join while keeping data the producer wrote there; the
  broker finds such data when it opens (an open transaction the coordinator does
  not hold on that partition) and hands it to :meth:`~TransactionCoordinator.adopt_hanging`,
  which aborts the transaction and fences its producer, so that neither a hanging
  transaction nor a commit answered for the lost join is possible.
* EndTxn's decision is fsynced before the answer only when a partition of the
  transaction fsyncs its records before answering them (``sync_decision_for``:
  ``flush.messages=1``) or when it has no partitions. Otherwise it is answered
  once written, like the records it decides (and like Kafka on one node): a
  crash of the process loses nothing, a power loss may take the decision, and
  the transaction is then aborted whole, because the broker fsyncs the journal
  before it writes any marker or offset of a completion.
* Completing a transaction is a side effect. :meth:`~TransactionCoordinator.end_txn`,
  :meth:`~TransactionCoordinator.init_producer_id` (fencing an open transaction)
  and :meth:`~TransactionCoordinator.tick` (timeouts, retries, restart) return
  :class:`TxnCompletion` objects, each once its PrepareCommit/PrepareAbort record
  (the decision) is written: EndTxn is answered then, as Kafka does, before any
  marker exists. For each, the broker fsyncs the journal if needed
  (:meth:`~TransactionCoordinator.flush_decisions`), then appends a COMMIT/ABORT
  control batch (:func:`trafka.codec.records.encode_control_batch`) to every
  partition in ``markers`` (skipping partitions that no longer exist or whose
  producer state rejects the marker as fenced), applies ``offsets`` to the offset
  store when committing, and then calls
  :meth:`~TransactionCoordinator.markers_written` with where the markers went. Until then the transaction stays in
  PrepareCommit/PrepareAbort and its requests get CONCURRENT_TRANSACTIONS; a
  completion not acknowledged within ``marker_retry_backoff_ms`` is issued again by
  :meth:`~TransactionCoordinator.tick`, so writing a marker twice must be harmless
  (it is: while the transaction is prepared nothing new of its producer can reach
  its partitions, and a marker for a producer without an open transaction only
  updates epochs).
* Markers are not fsynced. The CompleteCommit/CompleteAbort record is written
  unsynced, after the markers' positions (see :mod:`trafka.brokerlite.transactions.journal`);
  the broker reports with :meth:`~TransactionCoordinator.markers_synced` when it
  knows them on disk (a segment roll, a clean close, an fsync), and after a power
  loss it writes again every recorded marker its logs lost
  (:meth:`~TransactionCoordinator.unsynced_markers`) before serving.
* The broker calls :meth:`~TransactionCoordinator.tick` when
  :meth:`~TransactionCoordinator.next_deadline` is reached.

Rules and invariants (Kafka's):

* States: Empty -> Ongoing (AddPartitionsToTxn/AddOffsetsToTxn) -> PrepareCommit or
  PrepareAbort (EndTxn, timeout, fencing) -> CompleteCommit/CompleteAbort (markers
  written) -> Ongoing (next transaction) or Empty (InitProducerId). An id is
  deleted ("Dead") when it stays Empty/Complete* for ``transactional_id_expiration_ms``.
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
* A transaction times out ``timeout_ms`` after its first partition or group was
  added: it is aborted with the epoch bumped, fencing the producer.
* TxnOffsetCommit (KIP-447): the offsets are held by the transaction (durably, in
  the journal) and applied to the group only by a commit; an abort drops them.
  The group's member id, instance id and generation are checked by the
  ``validate_group`` callable (see :func:`classic_group_validator`).
* After a restart every Prepare* transaction is completed again (its markers
  re-issued by the first :meth:`~TransactionCoordinator.tick`) and Ongoing ones
  time out as usual.
"""

from __future__ import annotations

import dataclasses
import heapq
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, NamedTuple

from trafka.brokerlite.groups.offsets import CommittedOffset
from trafka.brokerlite.transactions.journal import (
    TransactionState,
    TxnJournalError,
    TxnRecord,
    TxnStore,
    WrittenMarker,
)
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as _ipi
from trafka.codec.messages import k24_add_partitions_to_txn as _apt
from trafka.codec.messages import k25_add_offsets_to_txn as _aot
from trafka.codec.messages import k26_end_txn as _et
from trafka.codec.messages import k28_txn_offset_commit as _toc
from trafka.codec.messages import k65_describe_transactions as _dt
from trafka.codec.messages import k66_list_transactions as _lt

if TYPE_CHECKING:
    from trafka.brokerlite.groups.coordinator import GroupCoordinator

__all__ = [
    "DEFAULT_MAX_TIMEOUT_MS",
    "TransactionCoordinator",
    "TransactionState",
    "TxnCompletion",
    "TxnMarker",
    "TxnRecord",
    "WrittenMarker",
    "classic_group_validator",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000  # transactional.id.expiration.ms
DEFAULT_EXPIRATION_CHECK_INTERVAL_MS = 3_600_000
DEFAULT_MARKER_RETRY_BACKOFF_MS = 1_000
PRODUCER_ID_BLOCK = 1000
NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
_MAX_EPOCH = 32767

_S = TransactionState
_PREPARED = (_S.PREPARE_COMMIT, _S.PREPARE_ABORT)
_COMPLETE = (_S.COMPLETE_COMMIT, _S.COMPLETE_ABORT)
_TIMEOUT = "timeout"
_MARKERS = "markers"
_EXPIRE = "expire"

# The API version from which each transaction API can carry PRODUCER_FENCED; older
# clients get INVALID_PRODUCER_EPOCH instead, which they handle the same way (KIP-588).
_FENCED_SINCE = {22: 4, 24: 2, 25: 2, 26: 2}

GroupValidator = Callable[[str, int, str, "str | None"], ErrorCode]
StageGroupOffsets = Callable[[str, int, int, Mapping[tuple[str, int], CommittedOffset]], ErrorCode]


def is_epoch_exhausted(epoch: int) -> bool:
    """Kafka keeps the last epoch free so that an instance can always be fenced."""
    return epoch >= _MAX_EPOCH - 1


def _always(_topic: str, _partition: int) -> bool:
    return True


def _accept_group(_group: str, _generation: int, _member: str, _instance: str | None) -> ErrorCode:
    return ErrorCode.NONE


class TxnMarker(NamedTuple):
    """One control batch the broker must append."""

    topic: str
    partition: int
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool


@dataclasses.dataclass(frozen=True, slots=True)
class TxnCompletion:
    """A transaction outcome for the broker to write (see the module docstring).

    Attributes:
        transactional_id: the transaction's id.
        producer_id, producer_epoch: the producer as the markers carry it.
        coordinator_epoch: the coordinator epoch for the markers.
        commit: True to commit, False to abort.
        markers: one per partition in the transaction.
        offsets: when committing, the group offsets to apply:
            ``group -> (topic, partition) -> CommittedOffset``; empty when aborting.
        groups: every group whose pending offsets this outcome settles.
    """

    transactional_id: str
    producer_id: int
    producer_epoch: int
    coordinator_epoch: int
    commit: bool
    markers: tuple[TxnMarker, ...]
    offsets: Mapping[str, Mapping[tuple[str, int], CommittedOffset]]
    groups: tuple[str, ...]


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


def classic_group_validator(groups: GroupCoordinator) -> GroupValidator:
    """Kafka's group checks for TxnOffsetCommit, against brokerlite's group coordinator.

    Unlike OffsetCommit, a transactional commit is accepted during a rebalance and
    from a producer that is not a group member (generation -1, empty member id);
    the checks are: static member fenced (FENCED_INSTANCE_ID), unknown member id
    (UNKNOWN_MEMBER_ID), generation (ILLEGAL_GENERATION) when one is given. A
    share group (KIP-932) id gets GROUP_ID_NOT_FOUND, as OffsetCommit does.

    Args:
        groups: the broker's group coordinator (only its read-only ``group()`` is used).

    Returns:
        A ``(group_id, generation_id, member_id, group_instance_id) -> ErrorCode``
        callable for :class:`TransactionCoordinator`.
    """

    def validate(
        group_id: str, generation_id: int, member_id: str, instance: str | None
    ) -> ErrorCode:
        share = getattr(groups, "share", None)
        if share is not None and share.is_share_group(group_id):
            # A share group keeps no committed offsets (OffsetCommit gets the same).
            return ErrorCode.GROUP_ID_NOT_FOUND
        consumer = groups.consumer_group(group_id)
        if consumer is not None:
            # A consumer group (KIP-848): the generation is the member's epoch.
            if not member_id and generation_id < 0:
                return ErrorCode.NONE
            member = consumer.members.get(member_id)
            if member is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation_id >= 0 and generation_id != member.epoch:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.NONE
        group = groups.group(group_id)
        if group is None:
            # Kafka creates an empty group (generation 0) for the offsets.
            if member_id:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if generation_id >= 0 and generation_id != 0:
                return ErrorCode.ILLEGAL_GENERATION
            return ErrorCode.NONE
        if instance is not None:
            owner = group.static_members.get(instance)
            if owner is not None and owner != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id and member_id not in group.members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if generation_id >= 0 and generation_id != group.generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        return ErrorCode.NONE

    return validate


class _Refused(Exception):
    """A request is answered with an error without changing anything (internal)."""

    def __init__(self, code: ErrorCode) -> None:
        super().__init__(code.name)
        self.code = code


class TransactionCoordinator:
    """Kafka's transaction coordinator for one broker, without I/O.

    Args:
        journal: where transaction metadata and producer-id reservations persist;
            transactions found in it are resumed (see the module docstring).
        allocate_producer_id: hands out producer ids; by default they come from the
            journal in reserved blocks. Pass the broker's allocator if it already
            has one, so that ids never come from two counters.
        max_timeout_ms: Kafka's ``transaction.max.timeout.ms``.
        transactional_id_expiration_ms: Kafka's ``transactional.id.expiration.ms``.
        expiration_check_interval_ms: Kafka's
            ``transaction.remove.expired.transaction.cleanup.interval.ms``.
        marker_retry_backoff_ms: how long a completion may stay unacknowledged
            before :meth:`tick` issues it again.
        coordinator_epoch: the epoch written in markers (one node: constant).
        coordinator_epoch_for: ``transactional_id -> epoch`` when it depends on the
            id (cluster mode: the leader epoch of its ``__transaction_state``
            partition, which fences the markers of a former coordinator).
        group_partition: ``group_id -> (topic, partition)`` of the group's offsets
            partition when it is a partition of the transaction (cluster mode:
            ``__consumer_offsets``, whose leader holds TxnOffsetCommit's offsets
            until the marker settles them, as in Kafka); None on one node, where
            the coordinator holds them itself.
        stage_group_offsets: with ``group_partition``: ``(group_id, producer_id,
            producer_epoch, offsets) -> ErrorCode``, the group coordinator's
            store for TxnOffsetCommit's offsets, which then only checks the
            group (the transaction's own state is on another broker).
        partition_exists: ``(topic, partition) -> bool``; AddPartitionsToTxn and
            TxnOffsetCommit answer UNKNOWN_TOPIC_OR_PARTITION where it is False.
        validate_group: ``(group_id, generation_id, member_id, group_instance_id) ->
            ErrorCode`` for TxnOffsetCommit v3+ (KIP-447); see
            :func:`classic_group_validator`. By default every commit is accepted.
        offset_metadata_max_bytes: Kafka's ``offset.metadata.max.bytes``.
        sync_decision_for: ``(topic, partition) -> bool``: whether EndTxn waits for
            the fsync of a decision involving the partition.
        log_end_offset: ``(topic, partition) -> int`` (-1 for none), recorded with
            each decision (``TxnRecord.decision_ends``) for :meth:`adopt_hanging`.
    """

    def __init__(
        self,
        journal: TxnStore,
        *,
        allocate_producer_id: Callable[[], int] | None = None,
        max_timeout_ms: int = DEFAULT_MAX_TIMEOUT_MS,
        transactional_id_expiration_ms: int = DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS,
        expiration_check_interval_ms: int = DEFAULT_EXPIRATION_CHECK_INTERVAL_MS,
        marker_retry_backoff_ms: int = DEFAULT_MARKER_RETRY_BACKOFF_MS,
        coordinator_epoch: int = 0,
        coordinator_epoch_for: Callable[[str], int] | None = None,
        group_partition: Callable[[str], tuple[str, int]] | None = None,
        stage_group_offsets: StageGroupOffsets | None = None,
        partition_exists: Callable[[str, int], bool] = _always,
        validate_group: GroupValidator = _accept_group,
        offset_metadata_max_bytes: int = 4096,
        sync_decision_for: Callable[[str, int], bool] = _always,
        log_end_offset: Callable[[str, int], int] | None = None,
    ) -> None:
        if max_timeout_ms <= 0:
            raise ValueError("max_timeout_ms must be > 0")
        self._journal = journal
        self._allocate_external = allocate_producer_id
        self._max_timeout_ms = max_timeout_ms
        self._expiration_ms = transactional_id_expiration_ms
        self._expiration_check_ms = expiration_check_interval_ms
        self._retry_ms = marker_retry_backoff_ms
        self._coordinator_epoch = coordinator_epoch
        self._coordinator_epoch_for = coordinator_epoch_for
        self._group_partition = group_partition
        self._stage_group_offsets = stage_group_offsets
        self._partition_exists = partition_exists
        self._validate_group = validate_group
        self._metadata_max = offset_metadata_max_bytes
        self._sync_decision_for = sync_decision_for
        self._log_end_offset = log_end_offset
        self._records: dict[str, TxnRecord] = journal.records()
        self._next_pid = journal.producer_id_limit
        # transactional id -> when its completion is (re)issued; 0 = at the first tick
        self._issue_at: dict[str, int] = {}
        self._heap: list[tuple[int, int, str, str]] = []
        self._seq = 0
        self._next_expiration_ms: int | None = None
        self._resume(self._records)

    def _resume(self, records: Mapping[str, TxnRecord]) -> None:
        # Decided transactions are completed again at the first tick; ongoing ones
        # time out as usual.
        for tid, record in records.items():
            if record.state in _PREPARED:
                self._set_issue(tid, 0)
            elif record.state is _S.ONGOING:
                self._push(record.txn_start_ms + record.timeout_ms, tid, _TIMEOUT)

    # -- cluster mode: the ids of the partitions this broker leads ------------------------------

    def load(self, records: Mapping[str, TxnRecord]) -> None:
        """Take charge of transactional ids (this broker now leads their
        ``__transaction_state`` partition): decided transactions are completed
        again by the next :meth:`tick`, ongoing ones time out as usual."""
        self._records.update(records)
        self._resume(records)

    def unload(self, transactional_ids: Iterable[str]) -> None:
        """Forget transactional ids (another broker coordinates them now); their
        timers lapse."""
        for tid in transactional_ids:
            self._records.pop(tid, None)
            self._issue_at.pop(tid, None)

    # -- introspection --------------------------------------------------------------------------

    @property
    def journal(self) -> TxnStore:
        """The journal the coordinator writes to."""
        return self._journal

    @property
    def coordinator_epoch(self) -> int:
        """The coordinator epoch written in markers (on one node)."""
        return self._coordinator_epoch

    def _epoch_of(self, transactional_id: str) -> int:
        if self._coordinator_epoch_for is None:
            return self._coordinator_epoch
        return self._coordinator_epoch_for(transactional_id)

    def record(self, transactional_id: str) -> TxnRecord | None:
        """The current metadata of ``transactional_id``, or None."""
        return self._records.get(transactional_id)

    def transactional_ids(self) -> list[str]:
        """Every known transactional id, sorted."""
        return sorted(self._records)

    def has_pending_offsets(self, group_id: str, topic: str, partition: int) -> bool:
        """Whether an unfinished transaction holds an offset of ``group_id`` for the partition.

        OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for such
        partitions.
        """
        return any(
            (topic, partition) in r.pending_offsets.get(group_id, {})
            for r in self._records.values()
        )

    def pending_offset_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """Every ``(topic, partition)`` of ``group_id`` with a pending transactional offset."""
        out: set[tuple[str, int]] = set()
        for r in self._records.values():
            out.update(r.pending_offsets.get(group_id, {}))
        return out

    def verify_partition(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
    ) -> ErrorCode:
        """Whether a transactional Produce to a partition belongs to an ongoing transaction.

        Kafka checks this since KIP-890 part 1 to keep a late or zombie write from
        opening a transaction nobody will ever end (which would hold the last
        stable offset back forever).

        Returns:
            NONE; INVALID_PRODUCER_ID_MAPPING (unknown id or another producer id);
            INVALID_PRODUCER_EPOCH (not the current epoch); INVALID_TXN_STATE (the
            partition is not in an ongoing transaction).
        """
        record = self._records.get(transactional_id)
        if record is None or record.producer_id != producer_id:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING
        if record.producer_epoch != producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if record.state is not _S.ONGOING or (topic, partition) not in record.partitions:
            return ErrorCode.INVALID_TXN_STATE
        return ErrorCode.NONE

    # -- requests -------------------------------------------------------------------------------

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
        except _Refused as refused:
            code = self._fenced_code(refused.code, 22, version)
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
                if record.state in _PREPARED:
                    raise _Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
            except _Refused as refused:
                return order, dict.fromkeys(wanted, refused.code)
            return order, {
                tp: ErrorCode.NONE if tp in record.partitions else ErrorCode.INVALID_TXN_STATE
                for tp in wanted
            }
        code = self._add(tid, producer_id, producer_epoch, set(wanted), None, now_ms)
        return order, dict.fromkeys(wanted, self._fenced_code(code, 24, version))

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
        return _aot.AddOffsetsToTxnResponse(error_code=self._fenced_code(code, 25, version))

    def end_txn(
        self, request: _et.EndTxnRequest, version: int, now_ms: int
    ) -> tuple[_et.EndTxnResponse, list[TxnCompletion]]:
        """Handle EndTxn: commit or abort the ongoing transaction.

        Transactions follow Kafka's transaction version 1 (one epoch per producer
        session) at every version; v5 answers carry the (unchanged) producer id
        and epoch.

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
        )
        code = self._fenced_code(code, 26, version)
        record = self._records.get(request.transactional_id)
        if version >= 5 and code is ErrorCode.NONE and record is not None:
            # v5 reports the producer's id and epoch (transaction version 2 bumps the
            # epoch per transaction); brokerlite keeps version 1's epoch, so it
            # reports the unchanged one, which a v5 client goes on using.
            return _et.EndTxnResponse(
                error_code=code,
                producer_id=record.producer_id,
                producer_epoch=record.producer_epoch,
            ), completions
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
            error = self._check_txn_commit(request, version)
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

    def describe_transactions(
        self, request: _dt.DescribeTransactionsRequest, version: int
    ) -> _dt.DescribeTransactionsResponse:
        """Handle DescribeTransactions (admin): TRANSACTIONAL_ID_NOT_FOUND for unknown ids."""
        Response = _dt.DescribeTransactionsResponse
        states = []
        for tid in request.transactional_ids:
            record = self._records.get(tid) if tid else None
            if record is None:
                code = (
                    ErrorCode.INVALID_REQUEST if not tid else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
                )
                states.append(Response.TransactionState(error_code=code, transactional_id=tid))
                continue
            by_topic: dict[str, list[int]] = {}
            for t, p in record.partitions:
                by_topic.setdefault(t, []).append(p)
            states.append(
                Response.TransactionState(
                    transactional_id=tid,
                    transaction_state=record.state.value,
                    transaction_timeout_ms=record.timeout_ms,
                    transaction_start_time_ms=record.txn_start_ms,
                    producer_id=record.producer_id,
                    producer_epoch=record.producer_epoch,
                    topics=[
                        Response.TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()
                    ],
                )
            )
        return Response(transaction_states=states)

    def list_transactions(
        self, request: _lt.ListTransactionsRequest, version: int, now_ms: int
    ) -> _lt.ListTransactionsResponse:
        """Handle ListTransactions (admin), with the state, producer id and (v1+)
        duration filters; unknown state names are echoed in ``unknown_state_filters``."""
        names = {s.value for s in TransactionState}
        wanted_states = set(request.state_filters)
        unknown = [s for s in request.state_filters if s not in names]
        pids = set(request.producer_id_filters)
        duration = request.duration_filter if version >= 1 else -1
        Response = _lt.ListTransactionsResponse
        listed = []
        for tid in sorted(self._records):
            r = self._records[tid]
            if wanted_states and r.state.value not in wanted_states:
                continue
            if pids and r.producer_id not in pids:
                continue
            # As Kafka: an id without a transaction (start -1) passes the duration filter.
            if duration >= 0 and now_ms - r.txn_start_ms <= duration:
                continue
            listed.append(
                Response.TransactionState(
                    transactional_id=tid, producer_id=r.producer_id, transaction_state=r.state.value
                )
            )
        return Response(unknown_state_filters=unknown, transaction_states=listed)

    # -- completions and time -------------------------------------------------------------------

    def flush_decisions(self) -> bool:
        """fsync the journal, so that every decision written so far is durable.

        The broker calls it before it writes a completion's markers or offsets
        (a no-op when nothing written since the last fsync).

        Returns:
            False when the fsync failed (logged): nothing of the completions may
            be written yet; they are issued again after the retry backoff.
        """
        try:
            self._journal.flush()
        except TxnJournalError as exc:
            log.error("cannot make transaction decisions durable: %s", exc)
            return False
        return True

    def markers_written(
        self,
        completion: TxnCompletion,
        now_ms: int,
        written: Sequence[WrittenMarker] = (),
    ) -> bool:
        """Record that the broker wrote a completion's markers (and applied its offsets).

        A completion that no longer matches the transaction (already acknowledged,
        or superseded) is ignored. The CompleteCommit/CompleteAbort record is not
        fsynced: until a later synced write, a power loss brings back the prepared
        state, whose markers are then written again.

        Args:
            completion: what the broker carried out.
            now_ms: the current time.
            written: where each marker went (the markers skipped are left out):
                remembered until :meth:`markers_synced` reports them on disk.

        Returns:
            True when the transaction moved to CompleteCommit/CompleteAbort; False
            when ignored, or when the journal write failed (the completion is then
            issued again later).
        """
        tid = completion.transactional_id
        record = self._records.get(tid)
        expected = _S.PREPARE_COMMIT if completion.commit else _S.PREPARE_ABORT
        if (
            record is None
            or record.state is not expected
            or record.producer_id != completion.producer_id
            or record.producer_epoch != completion.producer_epoch
        ):
            return False
        done = dataclasses.replace(
            record,
            state=_S.COMPLETE_COMMIT if completion.commit else _S.COMPLETE_ABORT,
            partitions=(),
            groups=(),
            pending_offsets={},
            last_update_ms=now_ms,
            decision_ends=(),
        )
        try:
            self._write(done, sync=False, markers=written)
        except _Refused:
            return False
        self._issue_at.pop(tid, None)
        log.debug("transaction %r: %s complete", tid, done.state.value)
        return True

    def unsynced_markers(self) -> dict[tuple[str, int], list[WrittenMarker]]:
        """Markers written but not known to be on disk, per partition, in offset order."""
        return self._journal.unsynced_markers()

    @property
    def unsynced_marker_count(self) -> int:
        """How many markers :meth:`unsynced_markers` holds."""
        return self._journal.unsynced_marker_count

    def markers_synced(
        self, synced: Mapping[tuple[str, int], int | None], *, sync: bool = False
    ) -> bool:
        """Forget recorded markers the broker has made durable (or dealt with).

        Args:
            synced: per partition, an offset below which its log is on disk (its
                markers below are forgotten), or None to forget all of its markers.
            sync: fsync the journal entry (needed when the markers were just
                written again after a crash and must not be looked at twice).

        Returns:
            False when the journal write failed (the markers stay recorded, which
            only costs a later retry).
        """
        try:
            self._journal.markers_synced(synced, sync=sync)
        except TxnJournalError as exc:
            log.warning("cannot record synced transaction markers: %s", exc)
            return False
        return True

    def adopt_hanging(
        self, hanging: Mapping[int, Mapping[tuple[str, int], int]], now_ms: int
    ) -> tuple[list[TxnCompletion], set[int]]:
        """Take charge of open transactions that partition logs hold and the journal lost.

        The broker calls it when it opens, with every producer id that has an open
        transaction on a partition whose log was not closed cleanly: ``producer id ->
        (topic, partition) -> first offset of that transaction``. A power loss can
        keep such data while taking the unsynced AddPartitionsToTxn entry (and
        everything after it) from the journal. Each transaction found this way is
        aborted with its producer's epoch bumped: the producer is fenced, so it can
        neither commit the transaction nor have an EndTxn taken for a retry of the
        previous outcome.

        A decided transaction (PrepareCommit/PrepareAbort) whose producer has data
        outside it (on another partition, or at or past the log end recorded with
        the decision) is already complete, since the next transaction only starts
        once every marker is written: its completion is issued again without those
        partitions, and at a bumped epoch. Once it is complete, a second call
        aborts the later transaction.

        Returns:
            The completions to carry out, in order, and the producer ids no
            transactional id holds (their data only needs an ABORT marker at the
            epoch it was written with). Data a transaction holds, ongoing or
            decided, is left to its own completion.
        """
        by_pid = {r.producer_id: r for r in self._records.values()}
        completions: list[TxnCompletion] = []
        orphans: set[int] = set()
        for pid, found in sorted(hanging.items()):
            record = by_pid.get(pid)
            if record is None:
                orphans.add(pid)
                continue
            tid = record.transactional_id
            try:
                if record.state in _PREPARED:
                    ends = {(t, p): o for t, p, o in record.decision_ends}
                    later = {
                        tp
                        for tp, first in found.items()
                        if tp not in record.partitions or (tp in ends and first >= ends[tp])
                    }
                    if not later:
                        continue  # its own data, waiting for the markers issued at start
                    log.warning(
                        "transaction %r: a later transaction of producer %d is open on %s, "
                        "which the journal lost (power loss); completing this one without "
                        "them",
                        tid,
                        pid,
                        _names(later),
                    )
                    kept = dataclasses.replace(
                        record,
                        producer_epoch=_bumped(record.producer_epoch),
                        last_producer_epoch=NO_PRODUCER_EPOCH,
                        partitions=tuple(tp for tp in record.partitions if tp not in later),
                        decision_ends=tuple(e for e in record.decision_ends if e[:2] not in later),
                        last_update_ms=now_ms,
                    )
                    self._write(kept)
                    completions.append(self._issue(kept, now_ms))
                    continue
                # Ongoing: what it holds is its own. Empty and Complete* hold nothing.
                missing = set(found) - set(record.partitions)
                if not missing:
                    continue  # its own data; it ends or times out as usual
                log.warning(
                    "transaction %r: open on %s, which the journal lost (power loss); "
                    "aborting it and fencing producer %d epoch %d",
                    tid,
                    _names(missing),
                    pid,
                    record.producer_epoch,
                )
                widened = dataclasses.replace(
                    record, partitions=tuple(sorted(set(record.partitions) | missing))
                )
                completions.append(self._fence_and_abort(widened, now_ms))
            except _Refused:
                log.error("transaction %r: cannot record its recovery; retried at next start", tid)
        return completions, orphans

    def tick(self, now_ms: int) -> list[TxnCompletion]:
        """Fire every timer due at ``now_ms``: transaction timeouts (abort, fencing the
        producer), completions to issue again (and those pending since a restart),
        and transactional-id expiry.

        Returns:
            The completions for the broker to carry out.
        """
        out: list[TxnCompletion] = []
        if self._next_expiration_ms is None:
            self._next_expiration_ms = now_ms + self._expiration_check_ms
        while self._heap and self._heap[0][0] <= now_ms:
            deadline, _, tid, kind = heapq.heappop(self._heap)
            if not self._timer_valid(deadline, tid, kind):
                continue
            if kind == _TIMEOUT:
                self._abort_timed_out(tid, now_ms, out)
            elif kind == _MARKERS:
                record = self._records[tid]
                log.info("transaction %r: issuing %s markers again", tid, record.state.value)
                out.append(self._issue(record, now_ms))
        if now_ms >= self._next_expiration_ms:
            self._expire(now_ms)
            self._next_expiration_ms = now_ms + self._expiration_check_ms
        return out

    def next_deadline(self) -> int | None:
        """When :meth:`tick` must next be called (ms); 0 means at once."""
        while self._heap:
            deadline, _, tid, kind = self._heap[0]
            if self._timer_valid(deadline, tid, kind):
                break
            heapq.heappop(self._heap)
        deadlines = [self._heap[0][0]] if self._heap else []
        deadlines.append(0 if self._next_expiration_ms is None else self._next_expiration_ms)
        return min(deadlines)

    def close(self) -> None:
        """Close the journal."""
        self._journal.close()

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
            raise _Refused(ErrorCode.INVALID_REQUEST)
        timeout = request.transaction_timeout_ms
        if not 0 < timeout <= self._max_timeout_ms:
            raise _Refused(ErrorCode.INVALID_TRANSACTION_TIMEOUT)
        expected: tuple[int, int] | None = None
        if version >= 3:
            given = (request.producer_id, request.producer_epoch)
            if given != (NO_PRODUCER_ID, NO_PRODUCER_EPOCH):
                if given[0] == NO_PRODUCER_ID or given[1] == NO_PRODUCER_EPOCH:
                    raise _Refused(ErrorCode.INVALID_REQUEST)
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
            raise _Refused(ErrorCode.PRODUCER_FENCED)
        if record.state in _PREPARED:
            raise _Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
        if record.state is _S.ONGOING:
            # Abort the previous instance's transaction with a bumped epoch (so its
            # markers fence it everywhere) and let the client retry for its own epoch.
            completions.append(self._fence_and_abort(record, now_ms))
            log.info("transaction %r: aborting the ongoing transaction of a fenced instance", tid)
            raise _Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
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
                raise _Refused(ErrorCode.PRODUCER_FENCED)
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
                raise _Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
        if self._next_pid >= self._journal.producer_id_limit:
            try:
                self._journal.reserve_producer_ids(self._next_pid + PRODUCER_ID_BLOCK)
            except TxnJournalError as exc:
                log.error("cannot reserve producer ids: %s", exc)
                raise _Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
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
    ) -> ErrorCode:
        try:
            record = self._checked(tid, producer_id, producer_epoch)
            if record.state in _PREPARED:
                raise _Refused(ErrorCode.CONCURRENT_TRANSACTIONS)
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
            )
            # Unsynced: a join lost with its data's fsync is adopted at open
            # (see the module docstring and adopt_hanging).
            self._write(ongoing, sync=False)
        except _Refused as refused:
            return refused.code
        if starting:
            self._push(ongoing.txn_start_ms + ongoing.timeout_ms, tid, _TIMEOUT)
        return ErrorCode.NONE

    def _checked(self, tid: str, producer_id: int, producer_epoch: int) -> TxnRecord:
        if not tid:
            raise _Refused(ErrorCode.INVALID_REQUEST)
        record = self._records.get(tid)
        if record is None or record.producer_id != producer_id:
            raise _Refused(ErrorCode.INVALID_PRODUCER_ID_MAPPING)
        if record.producer_epoch != producer_epoch:
            raise _Refused(ErrorCode.PRODUCER_FENCED)
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
    ) -> ErrorCode:
        try:
            record = self._checked(tid, producer_id, producer_epoch)
        except _Refused as refused:
            return refused.code
        state = record.state
        if state is _S.ONGOING:
            prepared = dataclasses.replace(
                record,
                state=_S.PREPARE_COMMIT if commit else _S.PREPARE_ABORT,
                last_update_ms=now_ms,
                decision_ends=self._ends(record.partitions),
            )
            try:
                self._write(prepared, sync=self._decision_sync(record))
            except _Refused as refused:
                return refused.code
            completions.append(self._issue(prepared, now_ms))
            return ErrorCode.NONE
        if state in _COMPLETE:
            # A retry of an EndTxn that already completed is answered the same way.
            same = (state is _S.COMPLETE_COMMIT) == commit
            return ErrorCode.NONE if same else ErrorCode.INVALID_TXN_STATE
        if state in _PREPARED:
            same = (state is _S.PREPARE_COMMIT) == commit
            return ErrorCode.CONCURRENT_TRANSACTIONS if same else ErrorCode.INVALID_TXN_STATE
        return ErrorCode.INVALID_TXN_STATE

    def _decision_sync(self, record: TxnRecord) -> bool:
        """Whether EndTxn waits for the fsync of ``record``'s decision.

        Only when a partition of the transaction fsyncs its records before it
        answers (``sync_decision_for``), or when the transaction holds no
        records: a decision is acknowledged as durably as its records are.
        """
        partitions = record.partitions
        return not partitions or any(self._sync_decision_for(t, p) for t, p in partitions)

    def _fence_and_abort(self, record: TxnRecord, now_ms: int) -> TxnCompletion:
        epoch = record.producer_epoch
        aborting = dataclasses.replace(
            record,
            producer_epoch=_bumped(epoch),
            last_producer_epoch=NO_PRODUCER_EPOCH,
            state=_S.PREPARE_ABORT,
            last_update_ms=now_ms,
            decision_ends=self._ends(record.partitions),
        )
        self._write(aborting)
        return self._issue(aborting, now_ms)

    def _ends(self, partitions: Iterable[tuple[str, int]]) -> tuple[tuple[str, int, int], ...]:
        if self._log_end_offset is None:
            return ()
        ends = ((t, p, self._log_end_offset(t, p)) for t, p in partitions)
        return tuple(e for e in ends if e[2] >= 0)

    def _abort_timed_out(self, tid: str, now_ms: int, out: list[TxnCompletion]) -> None:
        record = self._records[tid]
        log.info(
            "transaction %r: timed out after %d ms, aborting (producer id %d epoch %d fenced)",
            tid,
            record.timeout_ms,
            record.producer_id,
            record.producer_epoch,
        )
        try:
            out.append(self._fence_and_abort(record, now_ms))
        except _Refused:
            # The journal refused the write: try again shortly.
            self._push(now_ms + self._retry_ms, tid, _TIMEOUT)

    def _issue(self, record: TxnRecord, now_ms: int) -> TxnCompletion:
        commit = record.state is _S.PREPARE_COMMIT
        self._set_issue(record.transactional_id, now_ms + self._retry_ms)
        epoch = self._epoch_of(record.transactional_id)
        return TxnCompletion(
            transactional_id=record.transactional_id,
            producer_id=record.producer_id,
            producer_epoch=record.producer_epoch,
            coordinator_epoch=epoch,
            commit=commit,
            markers=tuple(
                TxnMarker(t, p, record.producer_id, record.producer_epoch, epoch, commit)
                for t, p in record.partitions
            ),
            offsets=dict(record.pending_offsets) if commit else {},
            groups=record.groups,
        )

    # -- TxnOffsetCommit ------------------------------------------------------------------------

    def _check_txn_commit(self, request: _toc.TxnOffsetCommitRequest, version: int) -> ErrorCode:
        # At the group's coordinator of a cluster (stage_group_offsets), which does
        # not hold the transaction, only the group is checked here; the producer's
        # epoch is checked against the offsets it holds when they are staged.
        if self._stage_group_offsets is None:
            record = self._records.get(request.transactional_id)
            if record is None or record.producer_id != request.producer_id:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING
            if record.producer_epoch != request.producer_epoch:
                # What Kafka's offsets partition answers for a stale producer epoch.
                return ErrorCode.INVALID_PRODUCER_EPOCH
            if record.state in _PREPARED:
                return ErrorCode.CONCURRENT_TRANSACTIONS
            if record.state is not _S.ONGOING or request.group_id not in record.groups:
                return ErrorCode.INVALID_TXN_STATE
        if version >= 3:
            return self._validate_group(
                request.group_id,
                request.generation_id,
                request.member_id,
                request.group_instance_id,
            )
        return ErrorCode.NONE

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
        except _Refused as refused:
            code = refused.code
        else:
            code = ErrorCode.NONE
        for key in accepted:
            codes[key] = code

    # -- internals ------------------------------------------------------------------------------

    def _write(
        self, record: TxnRecord, *, sync: bool = True, markers: Sequence[WrittenMarker] = ()
    ) -> None:
        try:
            self._journal.put(record, sync=sync, markers=markers)
        except TxnJournalError as exc:
            log.error("transaction %r: journal write failed: %s", record.transactional_id, exc)
            raise _Refused(ErrorCode.COORDINATOR_NOT_AVAILABLE) from exc
        self._records[record.transactional_id] = record

    def _expire(self, now_ms: int) -> None:
        for tid, record in list(self._records.items()):
            if record.state in (_S.EMPTY, *_COMPLETE) and (
                record.last_update_ms + self._expiration_ms <= now_ms
            ):
                try:
                    self._journal.delete(tid)
                except TxnJournalError as exc:
                    log.warning("transaction %r: expiry not written: %s", tid, exc)
                    return
                del self._records[tid]
                self._issue_at.pop(tid, None)
                log.info("transactional id %r expired", tid)

    @staticmethod
    def _fenced_code(code: ErrorCode, api_key: int, version: int) -> ErrorCode:
        if code is ErrorCode.PRODUCER_FENCED and version < _FENCED_SINCE[api_key]:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        return code

    def _set_issue(self, tid: str, at: int) -> None:
        self._issue_at[tid] = at
        self._push(at, tid, _MARKERS)

    def _push(self, deadline: int, tid: str, kind: str) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (deadline, self._seq, tid, kind))

    def _timer_valid(self, deadline: int, tid: str, kind: str) -> bool:
        record = self._records.get(tid)
        if record is None:
            return False
        if kind == _TIMEOUT:
            # Stale timers of earlier transactions fall before this one's deadline; a
            # retry after a failed abort falls after it.
            return (
                record.state is _S.ONGOING and deadline >= record.txn_start_ms + record.timeout_ms
            )
        if kind == _MARKERS:
            return record.state in _PREPARED and self._issue_at.get(tid) == deadline
        return False


def _bumped(epoch: int) -> int:
    return epoch + 1 if epoch < _MAX_EPOCH else epoch


def _names(partitions: Iterable[tuple[str, int]]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in sorted(partitions))
