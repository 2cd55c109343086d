"""TransactionManager (sans-IO): what a new transaction waits for, and how long.

Right after EndTxn the coordinator may still be writing the previous transaction's
markers and answer the next AddPartitionsToTxn/AddOffsetsToTxn with
CONCURRENT_TRANSACTIONS: that retry must be short and bounded, while every other
retry keeps the configured exponential backoff. The driver learns from
``add_partition`` when an AddPartitionsToTxn is wanted, so it can send it at once.
"""

from __future__ import annotations

import random
from typing import Any

import pytest

from trafka.codec import ErrorCode
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k25_add_offsets_to_txn as aot
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.transactions import (
    ConsumerGroupMetadata,
    Kind,
    TransactionManager,
    TxnRequest,
    TxnState,
)

COORD = (7, "127.0.0.1", 9092)
VERSIONS = {10: 6, 22: 5, 24: 3, 25: 4, 26: 4, 28: 4}


def manager(retry_backoff: float = 0.1, retry_backoff_max: float = 1.0) -> TransactionManager:
    return TransactionManager(
        "tx",
        rng=random.Random(0),
        retry_backoff=retry_backoff,
        retry_backoff_max=retry_backoff_max,
    )


def step(m: TransactionManager, now: float = 0.0) -> TxnRequest:
    req = m.poll(now, batches_pending=False)
    assert req is not None, f"no request in state {m.state}"
    return req


def answer(m: TransactionManager, req: TxnRequest, body: Any, now: float = 0.0) -> None:
    m.on_response(req, VERSIONS[req.api_key], body, now)


def add_resp(code: int, *tps: tuple[str, int]) -> Any:
    R = apt.AddPartitionsToTxnResponse
    return R(
        results_by_topic_v3_and_below=[
            R.AddPartitionsToTxnTopicResult(
                name=t,
                results_by_partition=[
                    R.AddPartitionsToTxnPartitionResult(
                        partition_index=p, partition_error_code=code
                    )
                ],
            )
            for t, p in tps
        ]
    )


def ready(m: TransactionManager) -> None:
    m.init()
    C = fc.FindCoordinatorResponse.Coordinator
    node, host, port = COORD
    answer(
        m,
        step(m),
        fc.FindCoordinatorResponse(
            coordinators=[C(key="tx", node_id=node, host=host, port=port, error_code=0)]
        ),
    )
    answer(m, step(m), ipid.InitProducerIdResponse(producer_id=42, producer_epoch=3))
    assert m.state is TxnState.READY


def test_add_partition_says_when_an_add_partitions_request_is_wanted() -> None:
    m = manager()
    ready(m)
    m.begin()
    assert m.add_partition("a", 0) is True
    assert m.add_partition("a", 0) is False  # waiting to be added
    req = step(m)
    assert req.kind is Kind.ADD_PARTITIONS
    assert m.add_partition("a", 0) is False  # being added
    assert m.add_partition("b", 1) is True
    answer(m, req, add_resp(0, ("a", 0)))
    assert m.add_partition("a", 0) is False  # in the transaction
    req = step(m)
    assert [(t.name, t.partitions) for t in req.build(3).v3_and_below_topics] == [("b", [1])]


def test_concurrent_transactions_at_the_start_of_a_transaction_retries_within_20_ms() -> None:
    m = manager()
    ready(m)
    m.begin()
    m.add_partition("a", 0)
    now = 10.0
    waits = []
    for _ in range(8):
        req = step(m, now)
        assert req.kind is Kind.ADD_PARTITIONS
        answer(m, req, add_resp(ErrorCode.CONCURRENT_TRANSACTIONS, ("a", 0)), now)
        retry_at = m.next_deadline(now)
        assert retry_at is not None
        assert m.poll(now, batches_pending=False) is None
        waits.append(retry_at - now)
        now = retry_at
    assert 0.004 <= waits[0] <= 0.006 * 1.2  # the first retry comes after about 5 ms
    assert waits[1] > waits[0]  # then doubles
    assert max(waits) <= 0.02 * 1.2  # and stays bounded (jitter included)
    answer(m, step(m, now), add_resp(0, ("a", 0)), now)
    assert m.is_send_allowed("a", 0) and m.next_deadline(now) is None


def test_the_first_add_offsets_gets_the_short_retry_too() -> None:
    m = manager()
    ready(m)
    m.begin()
    m.send_offsets({TopicPartition("in", 0): 5}, ConsumerGroupMetadata("g"))
    req = step(m, 1.0)
    assert req.kind is Kind.ADD_OFFSETS
    answer(m, req, aot.AddOffsetsToTxnResponse(error_code=ErrorCode.CONCURRENT_TRANSACTIONS), 1.0)
    retry_at = m.next_deadline(1.0)
    assert retry_at is not None and retry_at - 1.0 <= 0.006 * 1.2


@pytest.mark.parametrize("code", [ErrorCode.CONCURRENT_TRANSACTIONS, ErrorCode.NOT_ENOUGH_REPLICAS])
def test_other_retries_keep_the_configured_backoff(code: ErrorCode) -> None:
    m = manager()
    ready(m)
    m.begin()
    m.add_partition("a", 0)
    answer(m, step(m), add_resp(0, ("a", 0)))
    # Within a started transaction, CONCURRENT_TRANSACTIONS is not the previous
    # transaction's markers; neither is any other retriable error.
    m.add_partition("b", 0)
    req = step(m, 1.0)
    answer(m, req, add_resp(code, ("b", 0)), 1.0)
    retry_at = m.next_deadline(1.0)
    assert retry_at is not None and retry_at - 1.0 >= 0.1 * 0.8


def test_the_short_retry_never_exceeds_the_configured_backoff() -> None:
    m = manager(retry_backoff=0.001, retry_backoff_max=0.002)
    ready(m)
    m.begin()
    m.add_partition("a", 0)
    now = 0.0
    for _ in range(5):
        answer(m, step(m, now), add_resp(ErrorCode.CONCURRENT_TRANSACTIONS, ("a", 0)), now)
        retry_at = m.next_deadline(now)
        assert retry_at is not None and retry_at - now <= 0.002 * 1.2
        now = retry_at
