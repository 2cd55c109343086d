"""Transactions in cluster mode: the transaction coordinator over replicated topics.

:class:`~.coordinator.TransactionCoordinator` holds the rules of Kafka's
exactly-once protocol; this module places it in a cluster, as Kafka's
ZooKeeper-era brokers do. It is sans-IO: the cluster driver sends the
WriteTxnMarkers requests it asks for (:mod:`.marker_queue`) and reports the
answers.

Rules and invariants:

* The coordinator of a transactional id is the leader of its
  ``__transaction_state`` partition (Kafka's hash of the id); the topic is
  created on the first FindCoordinator for a transactional id. Only the ids of
  the partitions this broker leads are in memory: replayed
  (:mod:`.replicated_journal`) when leadership arrives, dropped together with their queued
  completions when it leaves. A transaction request for another id gets
  NOT_COORDINATOR, and the client looks the coordinator up again.
* A transaction request is answered once what it wrote is on the in-sync
  replicas of its id's partition (the high watermark reached the log end); a
  leader lost meanwhile answers NOT_COORDINATOR, a timeout
  COORDINATOR_NOT_AVAILABLE (both retriable). So a decision a client was told
  of survives the coordinator's death.
* The coordinator epoch of markers is the leader epoch of the id's partition:
  partitions refuse the markers of a deposed coordinator
  (TRANSACTION_COORDINATOR_FENCED).
* Completions (decided transactions) wait in the marker queue until their
  decision is replicated, then go to each partition's leader, as WriteTxnMarkers
  v2 saying each marker's transaction version (KIP-1228: 2 for a decision that
  bumped the epoch, KIP-890 part 2). Once every
  marker is written the coordinator records the transaction complete, without
  waiting for that record to replicate: a coordinator that dies first leaves
  the decision to its successor, which sends the same markers again
  (a marker written twice is harmless).
* WriteTxnMarkers at a partition's leader: the marker is written after
  Kafka's checks (INVALID_PRODUCER_EPOCH, TRANSACTION_COORDINATOR_FENCED; a
  marker of version 2 needs an epoch above the partition's, or the same one
  with no transaction open there: the marker sent again) and
  answered once it is on the partition's in-sync replicas (acks=all); a
  partition led elsewhere is NOT_LEADER_OR_FOLLOWER. A marker reaching a
  ``__consumer_offsets`` partition also settles the producer's pending
  TxnOffsetCommit offsets there (:mod:`..groups.replicated_offsets`; a
  marker of version 2 commits those held at the epoch before its own).
* TxnOffsetCommit goes to the group's coordinator (the leader of the group's
  ``__consumer_offsets`` partition), which holds the offsets until the marker:
  AddOffsetsToTxn made that partition one of the transaction's (for a
  TxnOffsetCommit v5+, the group's coordinator has the transaction's add it).
* A transactional Produce is verified with the coordinator before it is
  appended (KIP-890 part 1), or, from v12, has the coordinator add its
  partition (part 2; :mod:`.verification`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k27_write_txn_markers as m

from ..cluster.controller import coordinator_partition
from ..cluster.view import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..errors import BrokerError, OffsetStoreError, UnknownTopicOrPartitionError
from ..groups.offsets import CommittedOffset
from ..groups.replicated_offsets import ReplicatedOffsetStore
from .coordinator import TxnCompletion
from .journal import TxnJournalError
from .marker_queue import MarkerQueue, MarkerRequest
from .replicated_journal import ReplicatedTxnJournal

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..config import BrokerConfig
    from ..groups.coordinator import GroupCoordinator
    from ..storage.log_manager import LogManager
    from .coordinator import TransactionCoordinator
    from .eos import ProducerStates

__all__ = ["ClusterTransactions", "CoordinatorHost", "MarkersReplicated"]


class CoordinatorHost(Protocol):
    """What the cluster side of the transaction coordinator uses of its broker
    (:class:`~trafka.brokerlite.broker.Broker` is one, in cluster mode):
    declared here, so that this module does not import the broker that owns it."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def node_id(self) -> int: ...

    @property
    def cluster(self) -> ClusterView | None: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def producers(self) -> ProducerStates: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def txn(self) -> TransactionCoordinator: ...

    def notify_append(self, topic: str, partition: int, nbytes: int) -> None: ...


log = logging.getLogger("trafka.brokerlite.transactions")

Response = m.WriteTxnMarkersResponse

# How long a WriteTxnMarkers waits for its markers to reach the in-sync replicas.
MARKER_REPLICATION_TIMEOUT_MS = 30_000


class ClusterTransactions:
    """The cluster side of a broker's transaction coordinator (see the module rules).

    Args:
        broker: the broker core, in cluster mode.
    """

    def __init__(self, broker: CoordinatorHost) -> None:
        self._broker = broker
        self.markers = MarkerQueue()
        #: Called when marker requests may be ready (the driver sends them).
        self.on_ready: Callable[[], None] = lambda: None

    # -- where ids live ---------------------------------------------------------------------------

    def _num_partitions(self, topic: str) -> int | None:
        cluster = self._broker.cluster
        assignment = None if cluster is None else cluster.image.topics.get(topic)
        return None if assignment is None else assignment.num_partitions

    def state_partition(self, transactional_id: str) -> int | None:
        """The id's ``__transaction_state`` partition (None before the topic exists)."""
        n = self._num_partitions(TRANSACTION_STATE_TOPIC)
        return None if n is None else coordinator_partition(transactional_id, n)

    def group_partition(self, group_id: str) -> tuple[str, int]:
        """The group's ``__consumer_offsets`` partition (AddOffsetsToTxn adds it)."""
        n = self._num_partitions(OFFSETS_TOPIC) or self._broker.config.offsets_topic_num_partitions
        return OFFSETS_TOPIC, coordinator_partition(group_id, n)

    def owns(self, transactional_id: str) -> bool:
        """Whether this broker coordinates the id now (its partition is loaded here)."""
        partition = self.state_partition(transactional_id)
        journal = self._journal()
        return partition is not None and partition in journal.loaded_partitions()

    def coordinator_epoch(self, transactional_id: str) -> int:
        """The epoch markers of the id carry: its partition's leader epoch."""
        cluster = self._broker.cluster
        partition = self.state_partition(transactional_id)
        if cluster is None or partition is None:
            return 0
        state = cluster.state(TRANSACTION_STATE_TOPIC, partition)
        return 0 if state is None else max(state.leader_epoch, 0)

    def _journal(self) -> ReplicatedTxnJournal:
        journal = self._broker.txn.journal
        assert isinstance(journal, ReplicatedTxnJournal)
        return journal

    def _group_store(self) -> ReplicatedOffsetStore:
        store = self._broker.groups.store
        assert isinstance(store, ReplicatedOffsetStore)
        return store

    # -- leadership of __transaction_state --------------------------------------------------------

    def leadership_changed(self, partition: int, leads: bool) -> None:
        """Load or drop the ids of a ``__transaction_state`` partition."""
        journal = self._journal()
        txn = self._broker.txn
        if not leads:
            gone = journal.unload_partition(partition)
            txn.unload(gone)
            self.markers.drop(gone)
            return
        try:
            records = journal.load_partition(partition)
        except TxnJournalError:
            log.exception(
                "cannot load the transactions of %s-%d", TRANSACTION_STATE_TOPIC, partition
            )
            return
        txn.load(records)
        if records:
            log.info(
                "coordinating %d transactional id(s) of %s-%d",
                len(records),
                TRANSACTION_STATE_TOPIC,
                partition,
            )

    # -- completions ------------------------------------------------------------------------------

    def queue(self, completions: Iterable[TxnCompletion]) -> None:
        """Queue decided transactions for their markers."""
        queued = False
        for completion in completions:
            partition = self.state_partition(completion.transactional_id)
            if partition is None:
                continue
            try:
                end = self._broker.logs.partition(TRANSACTION_STATE_TOPIC, partition).log_end_offset
            except UnknownTopicOrPartitionError:
                continue
            self.markers.add(completion, partition, end)
            queued = True
        if queued:
            self.on_ready()

    def state_high_watermark(self, partition: int) -> int:
        """The high watermark of a ``__transaction_state`` partition this broker
        leads (-1 otherwise)."""
        cluster = self._broker.cluster
        assert cluster is not None
        replica = cluster.replicas.replica(TRANSACTION_STATE_TOPIC, partition)
        if replica is None or replica.leader != self._broker.node_id:
            return -1
        return self._broker.logs.partition(TRANSACTION_STATE_TOPIC, partition).high_watermark

    def requests(self, now_ms: int) -> list[MarkerRequest]:
        """The WriteTxnMarkers requests to send now."""
        cluster = self._broker.cluster
        assert cluster is not None
        return self.markers.requests(now_ms, self.state_high_watermark, cluster.leader)

    def answered(self, request_id: int, response: Response, now_ms: int) -> None:
        """A leader answered; transactions whose markers are all written complete."""
        for completion in self.markers.answered(request_id, response, now_ms):
            self._broker.txn.markers_written(completion, now_ms)

    def failed(self, request_id: int, now_ms: int) -> None:
        self.markers.failed(request_id, now_ms)

    # -- TxnOffsetCommit at the group's coordinator ---------------------------------------------

    def stage_group_offsets(
        self,
        group_id: str,
        producer_id: int,
        producer_epoch: int,
        offsets: Mapping[tuple[str, int], CommittedOffset],
    ) -> ErrorCode:
        try:
            return self._group_store().stage_transactional(
                group_id, producer_id, producer_epoch, offsets
            )
        except OffsetStoreError as exc:
            log.warning("group %r: cannot hold transactional offsets: %s", group_id, exc)
            return ErrorCode.COORDINATOR_NOT_AVAILABLE

    # -- WriteTxnMarkers at a partition's leader ------------------------------------------------

    def write_markers(
        self, request: m.WriteTxnMarkersRequest, now_ms: int
    ) -> tuple[Response, dict[tuple[str, int], int]]:
        """Write the markers of a coordinator's request to the partitions led here.

        Returns:
            The answer, and per partition written the offset its high watermark must
            reach before the answer is sent (acks=all).
        """
        broker = self._broker
        cluster = broker.cluster
        assert cluster is not None
        required: dict[tuple[str, int], int] = {}
        results = []
        for marker in request.markers:
            topics = []
            for topic in marker.topics:
                parts = []
                for index in topic.partition_indexes:
                    code = self._write_marker(marker, topic.name, index, now_ms, required)
                    parts.append(
                        Response.WritableTxnMarkerPartitionResult(
                            partition_index=index, error_code=code
                        )
                    )
                topics.append(
                    Response.WritableTxnMarkerTopicResult(name=topic.name, partitions=parts)
                )
            results.append(
                Response.WritableTxnMarkerResult(producer_id=marker.producer_id, topics=topics)
            )
        return Response(markers=results), required

    def _write_marker(
        self,
        marker: Any,
        topic: str,
        partition: int,
        now_ms: int,
        required: dict[tuple[str, int], int],
    ) -> ErrorCode:
        broker = self._broker
        cluster = broker.cluster
        assert cluster is not None
        try:
            plog = cluster.replicas.leader_log(topic, partition)
            refused = broker.producers.state(topic, partition).check_marker(
                marker.producer_id,
                marker.producer_epoch,
                marker.coordinator_epoch,
                marker.transaction_version,
            )
            if refused is not ErrorCode.NONE:
                return refused
            settled: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
            if topic == OFFSETS_TOPIC:
                if partition not in self._group_store().loaded_partitions():
                    # Its groups (and their pending offsets) could not be loaded:
                    # settling nothing would lose them; the coordinator retries.
                    return ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
                # The group's pending offsets first: should this fail, no marker
                # says the transaction is settled here, and the coordinator retries.
                settled = self._group_store().settle_transaction(
                    partition,
                    marker.producer_id,
                    marker.producer_epoch,
                    marker.transaction_result,
                    tv2=marker.transaction_version >= 2,
                )
            broker.producers.write_marker(
                topic,
                partition,
                producer_id=marker.producer_id,
                producer_epoch=marker.producer_epoch,
                coordinator_epoch=marker.coordinator_epoch,
                commit=marker.transaction_result,
                now_ms=now_ms,
            )
        except BrokerError as exc:
            return exc.code
        for group_id in settled:
            broker.groups.adopt_offsets_group(group_id, now_ms)
        cluster.replicas.appended(topic, partition)
        broker.notify_append(topic, partition, 1)
        required[(topic, partition)] = plog.log_end_offset
        return ErrorCode.NONE


class MarkersReplicated:
    """A WriteTxnMarkers answer waiting for its markers to reach each partition's ISR."""

    def __init__(
        self,
        cluster: ClusterView,
        logs: LogManager,
        answer: Response,
        required: dict[tuple[str, int], int],
        deadline_ms: int,
    ) -> None:
        self._cluster = cluster
        self._logs = logs
        self._answer = answer
        self._required = required
        self.deadline_ms = deadline_ms
        self.watches = frozenset(required)

    def _codes(self) -> tuple[dict[tuple[str, int], ErrorCode], bool]:
        """The error of each partition that lost its leadership (NOT_LEADER_OR_FOLLOWER)
        or has not replicated its marker yet (REQUEST_TIMED_OUT, for a timeout), and
        whether any partition still waits."""
        cluster = self._cluster
        codes: dict[tuple[str, int], ErrorCode] = {}
        waiting = False
        for (topic, partition), needed in self._required.items():
            replica = cluster.replicas.replica(topic, partition)
            if replica is None or replica.leader != cluster.node_id:
                codes[(topic, partition)] = ErrorCode.NOT_LEADER_OR_FOLLOWER
            elif self._logs.partition(topic, partition).high_watermark < needed:
                codes[(topic, partition)] = ErrorCode.REQUEST_TIMED_OUT
                waiting = True
        return codes, waiting

    def replicated(self) -> bool:
        """Whether no partition still waits for its marker to reach the ISR."""
        return not self._codes()[1]

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self.replicated()

    def complete(self, now_ms: int) -> Response:
        # At the deadline, what has not reached the ISR is retried by the coordinator.
        return _with_codes(self._answer, self._codes()[0])


def _with_codes(answer: Response, codes: dict[tuple[str, int], ErrorCode]) -> Response:
    if not codes:
        return answer
    return Response(
        markers=[
            Response.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    Response.WritableTxnMarkerTopicResult(
                        name=topic.name,
                        partitions=[
                            Response.WritableTxnMarkerPartitionResult(
                                partition_index=part.partition_index,
                                error_code=codes.get(
                                    (topic.name, part.partition_index), part.error_code
                                ),
                            )
                            for part in topic.partitions
                        ],
                    )
                    for topic in marker.topics
                ],
            )
            for marker in answer.markers
        ]
    )
