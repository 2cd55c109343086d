"""What the transaction coordinator tells about its transactions:
DescribeTransactions, ListTransactions, the pending transactional offsets that
OffsetFetch's ``require_stable`` asks about, and the check of a transactional
Produce (sans-IO).

Rules (Kafka's):

* DescribeTransactions answers TRANSACTIONAL_ID_NOT_FOUND for an unknown id,
  INVALID_REQUEST for an empty one.
* ListTransactions filters by state, producer id and (v1+) duration; unknown
  state names are echoed in ``unknown_state_filters``; an id without a
  transaction passes the duration filter.
* A transactional Produce belongs to an ongoing transaction that holds its
  partition, at the current epoch (KIP-890 part 1).
"""

from __future__ import annotations

from trafka.brokerlite.transactions.decisions import TxnDecisions
from trafka.brokerlite.transactions.journal import TransactionState, TxnRecord
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k65_describe_transactions as _dt
from trafka.codec.messages import k66_list_transactions as _lt

__all__ = ["TxnDescribe"]

_S = TransactionState


class TxnDescribe(TxnDecisions):
    """The coordinator's transactions, described (see the module rules)."""

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
