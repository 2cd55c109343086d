"""brokerlite's transaction coordinator: Kafka's exactly-once protocol, sans-IO.

:class:`TransactionCoordinator` takes decoded requests (the generated codec
dataclasses), the request version and the current time, and returns responses plus
the side effects the broker must carry out. It owns no socket, task or clock. It
follows Kafka's ``TransactionCoordinator``/``TransactionMetadata``, transaction
version 1 and 2 alike, each decided by the request's version as Kafka decides it:
TV1 keeps one producer epoch per producer session; TV2 (KIP-890 part 2: Produce
v12+, TxnOffsetCommit v5+, EndTxn v5+) adds partitions and groups implicitly and
bumps the epoch with every decision (see :mod:`.transitions`). Which one a client
uses follows the ``transaction.version`` feature level it reads from ApiVersions
(:mod:`trafka.brokerlite.features`).

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

It is put together from its capabilities, each a module that opens with its
rules (Kafka's): :mod:`.decisions` (the records, the states and how a decision
is issued: the state the others share), :mod:`.transitions` (InitProducerId,
AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit),
:mod:`.completion` (markers written, made durable, recovered after a power
loss), :mod:`.expiry` (timeouts, re-issued completions, expiry, the ids a
cluster hands over) and :mod:`.describe` (DescribeTransactions,
ListTransactions, pending offsets).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from trafka.brokerlite.transactions.completion import TxnCompletions
from trafka.brokerlite.transactions.decisions import (
    GroupValidator,
    StageGroupOffsets,
    TxnCompletion,
    TxnMarker,
    is_epoch_exhausted,
)
from trafka.brokerlite.transactions.describe import TxnDescribe
from trafka.brokerlite.transactions.expiry import TxnExpiry
from trafka.brokerlite.transactions.journal import (
    TransactionState,
    TxnRecord,
    TxnStore,
    WrittenMarker,
)
from trafka.brokerlite.transactions.transitions import TxnTransitions
from trafka.codec.errors import ErrorCode

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
    "is_epoch_exhausted",
]

log = logging.getLogger(__name__)

DEFAULT_MAX_TIMEOUT_MS = 900_000  # transaction.max.timeout.ms
DEFAULT_TRANSACTIONAL_ID_EXPIRATION_MS = 604_800_000  # transactional.id.expiration.ms
DEFAULT_EXPIRATION_CHECK_INTERVAL_MS = 3_600_000
DEFAULT_MARKER_RETRY_BACKOFF_MS = 1_000


def _always(_topic: str, _partition: int) -> bool:
    return True


def _not_finalized() -> int:
    return 0


def _accept_group(_group: str, _generation: int, _member: str, _instance: str | None) -> ErrorCode:
    return ErrorCode.NONE


def classic_group_validator(groups: GroupCoordinator) -> GroupValidator:
    """Kafka's group checks for TxnOffsetCommit, against brokerlite's group coordinator.

    Unlike OffsetCommit, a transactional commit is accepted during a rebalance and
    from a producer that is not a group member (generation -1, empty member id);
    the checks are: static member fenced (FENCED_INSTANCE_ID), unknown member id
    (UNKNOWN_MEMBER_ID), generation (ILLEGAL_GENERATION) when one is given. A
    share group (KIP-932) id gets GROUP_ID_NOT_FOUND, as OffsetCommit does.

    The codes are those of Kafka 4.4's group coordinator, which TxnOffsetCommit
    v6 (KIP-1319) answers as they are: a group that does not exist is
    GROUP_ID_NOT_FOUND when a generation is given (with generation -1 the
    commit creates it, whatever member id it names), a consumer group member's
    stale epoch STALE_MEMBER_EPOCH. Before v6 the transaction coordinator
    answers both ILLEGAL_GENERATION
    (:meth:`~trafka.brokerlite.transactions.transitions.TxnTransitions.txn_offset_commit`).

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
                return ErrorCode.STALE_MEMBER_EPOCH
            return ErrorCode.NONE
        group = groups.group(group_id)
        if group is None:
            # Kafka 4.4 creates an empty group for the offsets of a commit without
            # a generation only (its member id not looked at).
            return ErrorCode.GROUP_ID_NOT_FOUND if generation_id >= 0 else ErrorCode.NONE
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


class TransactionCoordinator(TxnTransitions, TxnCompletions, TxnExpiry, TxnDescribe):
    """Kafka's transaction coordinator for one broker, without I/O. Its parts
    (decisions, transitions, completions, expiry, describe) share one state within a
    call: the transactional ids' records and their timers.

    Args:
        journal: where transaction metadata and producer-id reservations persist;
            transactions found in it are resumed (see the module docstring).
        allocate_producer_id: hands out producer ids (default: the journal's reserved
            blocks); pass the broker's, so that ids never come from two counters.
        max_timeout_ms: Kafka's ``transaction.max.timeout.ms``.
        transactional_id_expiration_ms: Kafka's ``transactional.id.expiration.ms``.
        expiration_check_interval_ms: Kafka's
            ``transaction.remove.expired.transaction.cleanup.interval.ms``.
        marker_retry_backoff_ms: when :meth:`tick` issues an unacknowledged completion again.
        coordinator_epoch: the epoch written in markers (one node: constant).
        coordinator_epoch_for: ``transactional_id -> epoch`` when it depends on the
            id (cluster mode: the leader epoch of its ``__transaction_state``
            partition, which fences the markers of a former coordinator).
        group_partition: ``group_id -> (topic, partition)``, the group's offsets
            partition in a transaction (cluster mode: ``__consumer_offsets``, whose
            leader holds TxnOffsetCommit's offsets until the marker settles them,
            as in Kafka); None on one node, where the coordinator holds them.
        stage_group_offsets: with ``group_partition``: ``(group_id, producer_id,
            producer_epoch, offsets) -> ErrorCode``, the group coordinator's store
            for those offsets; only the group is checked here then.
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
        transaction_version: the finalized ``transaction.version`` (0: none); from
            2 a fencing abort is a TV2 decision (:mod:`.tv2`).
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
        transaction_version: Callable[[], int] = _not_finalized,
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
        self._transaction_version = transaction_version
        self._records: dict[str, TxnRecord] = journal.records()
        self._next_pid = journal.producer_id_limit
        # transactional id -> when its completion is (re)issued; 0 = at the first tick
        self._issue_at: dict[str, int] = {}
        self._heap: list[tuple[int, int, str, str]] = []
        self._seq = 0
        self._next_expiration_ms: int | None = None
        self._resume(self._records)

    # -- introspection --------------------------------------------------------------------------

    @property
    def journal(self) -> TxnStore:
        """The journal the coordinator writes to."""
        return self._journal

    @property
    def coordinator_epoch(self) -> int:
        """The coordinator epoch written in markers (on one node)."""
        return self._coordinator_epoch

    # -- life cycle -------------------------------------------------------------------

    def close(self) -> None:
        """Close the journal."""
        self._journal.close()
