"""Producers and transactions (KIP-664 and KIP-618): DescribeProducers at
partition leaders, ListTransactions at every broker, DescribeTransactions and
InitProducerId (fencing) at transaction coordinators, WriteTxnMarkers (aborting
a hanging transaction) at a leader; and how hanging transactions are told from
live ones. Requests built and answers read here, without I/O;
:class:`~trafka.sdk.admin.Admin` sends them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from typing import Any

from trafka.codec import ApiKey, KafkaError, UnsupportedVersionError
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k27_write_txn_markers as wtm
from trafka.codec.messages import k61_describe_producers as dp
from trafka.codec.messages import k65_describe_transactions as dtx
from trafka.codec.messages import k66_list_transactions as ltx

from ..calls import TRANSIENT, check
from ..consumer_types import TopicPartition
from ..errors import ArgumentValueError
from ._common import by_topic, fit, partition_outcome

__all__ = [
    "LIVE_TRANSACTION_STATES",
    "ProducerState",
    "TransactionDescription",
    "TransactionListing",
    "abort_transaction_request",
    "check_list_transactions",
    "describe_producers_request",
    "describe_transactions_request",
    "fence_producer_request",
    "hanging",
    "list_transactions_request",
    "read_abort_transaction",
    "read_describe_producers",
    "read_describe_transactions",
    "read_fence_producer",
    "read_list_transactions",
    "suspects",
]

#: The coordinator states in which a transaction still ends by itself.
LIVE_TRANSACTION_STATES = frozenset(
    {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}
)


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer that a partition's leader knows (DescribeProducers).

    ``last_sequence`` and ``last_timestamp`` (ms) are -1 when unknown;
    ``current_transaction_start_offset`` is None unless the producer has a
    transaction open on the partition, ``coordinator_epoch`` until a
    transaction marker of this producer was written there.
    """

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    current_transaction_start_offset: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionListing:
    """A transactional id that a coordinator knows (ListTransactions)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transactional id's state at its coordinator (DescribeTransactions).

    ``state`` is Kafka's name: ``Empty``, ``Ongoing``, ``PrepareCommit``,
    ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``, ``Dead`` or
    ``PrepareEpochFence``. ``transaction_start_time_ms`` is when the current
    (or, once complete, the last) transaction started; None if none did.
    """

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: frozenset[TopicPartition]


# -- producers at partition leaders ---------------------------------------------------------


def describe_producers_request(partitions: Iterable[TopicPartition]) -> Any:
    """DescribeProducers of one leader's partitions."""
    req = dp.DescribeProducersRequest
    return req(
        topics=[
            req.TopicRequest(name=t, partition_indexes=p) for t, p in by_topic(partitions).items()
        ]
    )


def read_describe_producers(resp: Any) -> dict[TopicPartition, list[ProducerState] | KafkaError]:
    """Per partition its producers, or its error."""
    out: dict[TopicPartition, list[ProducerState] | KafkaError] = {}
    for t in resp.topics:
        for p in t.partitions:
            tp = TopicPartition(t.name, p.partition_index)
            error = partition_outcome(
                p.error_code,
                p.error_message,
                f"describing the producers of {t.name}-{p.partition_index}",
            )
            if error is not None:
                out[tp] = error
                continue
            out[tp] = [
                ProducerState(
                    e.producer_id,
                    e.producer_epoch,
                    e.last_sequence,
                    e.last_timestamp,
                    None if e.coordinator_epoch < 0 else e.coordinator_epoch,
                    None if e.current_txn_start_offset < 0 else e.current_txn_start_offset,
                )
                for e in p.active_producers
            ]
    return out


def abort_transaction_request(
    partition: TopicPartition, producer_id: int, producer_epoch: int, coordinator_epoch: int
) -> Any:
    """WriteTxnMarkers with one ABORT marker of the producer on ``partition``."""
    req = wtm.WriteTxnMarkersRequest
    marker = req.WritableTxnMarker(
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        transaction_result=False,
        topics=[
            req.WritableTxnMarkerTopic(
                name=partition.topic, partition_indexes=[partition.partition]
            )
        ],
        coordinator_epoch=coordinator_epoch,
    )
    return req(markers=[marker])


def read_abort_transaction(
    resp: Any, partition: TopicPartition, producer_id: int
) -> dict[TopicPartition, KafkaError | None]:
    """Per partition of a WriteTxnMarkers answer, None when the marker was written."""
    what = (
        f"aborting the transaction of producer {producer_id} "
        f"on {partition.topic}-{partition.partition}"
    )
    return {
        TopicPartition(t.name, p.partition_index): (
            KafkaError(p.error_code, what) if p.error_code else None
        )
        for m in resp.markers
        for t in m.topics
        for p in t.partitions
    }


# -- transactional ids at coordinators ------------------------------------------------------


def list_transactions_request(
    version: int,
    node_id: int,
    states: list[str],
    producer_ids: list[int],
    min_duration_ms: int | None,
) -> Any:
    """ListTransactions at ``version`` to broker ``node_id``.

    Raises:
        UnsupportedVersionError: ``min_duration_ms`` before v1.
    """
    if min_duration_ms is not None and version < 1:
        raise UnsupportedVersionError(
            f"node {node_id} has no ListTransactions v1: it cannot filter by duration"
        )
    return fit(
        ApiKey.LIST_TRANSACTIONS,
        version,
        ltx.ListTransactionsRequest,
        state_filters=states,
        producer_id_filters=producer_ids,
        duration_filter=-1 if min_duration_ms is None else min_duration_ms,
    )


def check_list_transactions(resp: Any) -> Any:
    """A ListTransactions answer, checked.

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(resp.error_code, "ListTransactions", again=TRANSIENT)
    return resp


def read_list_transactions(responses: Iterable[Any]) -> list[TransactionListing]:
    """The transactional ids of every broker's ListTransactions answer, by id.

    Raises:
        ValueError: a state filter a broker did not know (it names it).
    """
    found: dict[str, TransactionListing] = {}
    unknown: set[str] = set()
    for resp in responses:
        unknown.update(resp.unknown_state_filters)
        for t in resp.transaction_states:
            found[t.transactional_id] = TransactionListing(
                t.transactional_id, t.producer_id, t.transaction_state
            )
    if unknown:
        raise ArgumentValueError(f"unknown transaction state(s): {', '.join(sorted(unknown))}")
    return [found[tid] for tid in sorted(found)]


def describe_transactions_request(transactional_id: str) -> Any:
    """DescribeTransactions of one transactional id."""
    return dtx.DescribeTransactionsRequest(transactional_ids=[transactional_id])


def read_describe_transactions(
    resp: Any, transactional_id: str, coordinator_id: int
) -> TransactionDescription | None:
    """The id's state in a DescribeTransactions answer of coordinator
    ``coordinator_id``; None when it is not answered for.

    Raises:
        Again: a transient error.
        KafkaError: any other error (TRANSACTIONAL_ID_NOT_FOUND...).
    """
    found = None
    for t in resp.transaction_states:
        if t.transactional_id != transactional_id:
            continue
        check(t.error_code, f"describing transactional id {transactional_id!r}", again=TRANSIENT)
        found = TransactionDescription(
            transactional_id,
            coordinator_id,
            t.transaction_state,
            t.producer_id,
            t.producer_epoch,
            t.transaction_timeout_ms,
            None if t.transaction_start_time_ms < 0 else t.transaction_start_time_ms,
            frozenset(
                TopicPartition(topic.topic, p) for topic in t.topics for p in topic.partitions
            ),
        )
    return found


def fence_producer_request(version: int, transactional_id: str, transaction_timeout_ms: int) -> Any:
    """InitProducerId at ``version`` for ``transactional_id``, as a new producer
    sends it: the coordinator bumps the id's epoch, fencing the old producer."""
    return fit(
        ApiKey.INIT_PRODUCER_ID,
        version,
        ipid.InitProducerIdRequest,
        transactional_id=transactional_id,
        transaction_timeout_ms=transaction_timeout_ms,
        producer_id=-1,
        producer_epoch=-1,
    )


def read_fence_producer(resp: Any, transactional_id: str) -> None:
    """Nothing when the coordinator gave the id its next epoch. CONCURRENT_TRANSACTIONS
    (the coordinator aborts the open transaction first) is retried until then,
    as Kafka's ``FenceProducersHandler`` does: under transaction version 2 that
    abort alone leaves the old producer's epoch a retry of it, whose abort
    succeeds and carries on; the next epoch fences it everywhere.

    Raises:
        Again: a transient error (CONCURRENT_TRANSACTIONS included).
        KafkaError: any other error.
    """
    check(resp.error_code, f"fencing transactional id {transactional_id!r}", again=TRANSIENT)


# -- hanging transactions -------------------------------------------------------------------


def suspects(
    states: Mapping[TopicPartition, list[ProducerState]],
    now_ms: int,
    max_transaction_timeout_ms: int,
) -> list[tuple[TopicPartition, ProducerState]]:
    """The producers with a transaction open on a partition for longer than
    ``max_transaction_timeout_ms`` (by their last write), by partition."""
    return [
        (tp, s)
        for tp in sorted(states)
        for s in states[tp]
        if s.current_transaction_start_offset is not None
        and now_ms - s.last_timestamp >= max_transaction_timeout_ms
    ]


def hanging(
    suspected: Iterable[tuple[TopicPartition, ProducerState]],
    ids: Mapping[int, str],
    described: Mapping[str, TransactionDescription],
) -> list[tuple[TopicPartition, ProducerState]]:
    """The suspects no coordinator holds, for that producer and with that
    partition, in a state it completes by itself (:data:`LIVE_TRANSACTION_STATES`);
    ``ids`` maps producer ids to transactional ids (ListTransactions),
    ``described`` those ids to their state (DescribeTransactions)."""
    out = []
    for tp, s in suspected:
        desc = described.get(ids.get(s.producer_id, ""))
        if (
            desc is not None
            and desc.producer_id == s.producer_id
            and desc.state in LIVE_TRANSACTION_STATES
            and tp in desc.topic_partitions
        ):
            continue  # its coordinator will end it (or time it out)
        out.append((tp, s))
    return out
