"""The marker queue of cluster-mode transactions (sans-IO): when markers go, where, and
what each answer does."""

from __future__ import annotations

from trafka.brokerlite.transactions.coordinator import TxnCompletion, TxnMarker
from trafka.brokerlite.transactions.marker_queue import MarkerQueue
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k27_write_txn_markers as m

R = m.WriteTxnMarkersResponse
LEADERS = {("t", 0): 1, ("t", 1): 2, ("t", 2): 1, ("__consumer_offsets", 4): 3}


def completion(
    tid: str = "tx", pid: int = 7, epoch: int = 0, commit: bool = True, parts=None
) -> TxnCompletion:
    parts = parts if parts is not None else [("t", 0), ("t", 1), ("t", 2)]
    return TxnCompletion(
        transactional_id=tid,
        producer_id=pid,
        producer_epoch=epoch,
        coordinator_epoch=3,
        commit=commit,
        markers=tuple(TxnMarker(t, p, pid, epoch, 3, commit) for t, p in parts),
        offsets={},
        groups=(),
    )


def leader_of(topic: str, partition: int) -> int:
    return LEADERS.get((topic, partition), -1)


def answer(request: m.WriteTxnMarkersRequest, codes: dict | None = None) -> R:
    codes = codes or {}
    return R(
        markers=[
            R.WritableTxnMarkerResult(
                producer_id=marker.producer_id,
                topics=[
                    R.WritableTxnMarkerTopicResult(
                        name=t.name,
                        partitions=[
                            R.WritableTxnMarkerPartitionResult(
                                partition_index=p, error_code=codes.get((t.name, p), 0)
                            )
                            for p in t.partition_indexes
                        ],
                    )
                    for t in marker.topics
                ],
            )
            for marker in request.markers
        ]
    )


def sent_partitions(request: m.WriteTxnMarkersRequest) -> set[tuple[str, int]]:
    return {(t.name, p) for mk in request.markers for t in mk.topics for p in t.partition_indexes}


def test_markers_wait_for_the_decision_to_be_replicated() -> None:
    q = MarkerQueue()
    q.add(completion(), state_partition=0, required=10)
    assert q.requests(0, lambda p: 9, leader_of) == []
    requests = q.requests(0, lambda p: 10, leader_of)
    assert {r.node for r in requests} == {1, 2}


def test_one_request_per_leader_carrying_the_markers_fields() -> None:
    q = MarkerQueue()
    q.add(completion(commit=False, epoch=4), 0, 0)
    requests = {r.node: r for r in q.requests(0, lambda p: 0, leader_of)}
    assert sent_partitions(requests[1].body) == {("t", 0), ("t", 2)}
    assert sent_partitions(requests[2].body) == {("t", 1)}
    marker = requests[1].body.markers[0]
    assert (marker.producer_id, marker.producer_epoch, marker.coordinator_epoch) == (7, 4, 3)
    assert marker.transaction_result is False
    # In flight: nothing is sent twice.
    assert q.requests(0, lambda p: 0, leader_of) == []


def test_the_completion_is_done_when_every_partition_answered() -> None:
    q = MarkerQueue()
    c = completion()
    q.add(c, 0, 0)
    first, second = q.requests(0, lambda p: 0, leader_of)
    assert q.answered(first.request_id, answer(first.body), 5) == []
    assert q.answered(second.request_id, answer(second.body), 6) == [c]
    assert len(q) == 0


def test_a_refused_partition_is_retried_after_the_backoff_at_its_new_leader() -> None:
    q = MarkerQueue(retry_backoff_ms=100)
    c = completion(parts=[("t", 0)])
    q.add(c, 0, 0)
    (request,) = q.requests(0, lambda p: 0, leader_of)
    codes = {("t", 0): ErrorCode.NOT_LEADER_OR_FOLLOWER}
    assert q.answered(request.request_id, answer(request.body, codes), 10) == []
    assert q.requests(50, lambda p: 0, leader_of) == []
    LEADERS[("t", 0)] = 2
    try:
        (again,) = q.requests(110, lambda p: 0, leader_of)
    finally:
        LEADERS[("t", 0)] = 1
    assert again.node == 2
    assert q.answered(again.request_id, answer(again.body), 120) == [c]


def test_a_failed_request_and_a_partition_without_leader_go_again() -> None:
    q = MarkerQueue(retry_backoff_ms=100)
    c = completion(parts=[("t", 0), ("t", 9)])  # t-9 has no leader
    q.add(c, 0, 0)
    (request,) = q.requests(0, lambda p: 0, leader_of)
    assert sent_partitions(request.body) == {("t", 0)}
    q.failed(request.request_id, 10)
    assert q.requests(20, lambda p: 0, leader_of) == []
    (again,) = q.requests(200, lambda p: 0, leader_of)
    assert sent_partitions(again.body) == {("t", 0)}
    assert len(q) == 1


def test_a_deleted_partition_counts_as_done() -> None:
    q = MarkerQueue()
    c = completion(parts=[("t", 0)])
    q.add(c, 0, 0)
    (request,) = q.requests(0, lambda p: 0, leader_of)
    codes = {("t", 0): ErrorCode.UNKNOWN_TOPIC_OR_PARTITION}
    assert q.answered(request.request_id, answer(request.body, codes), 1) == [c]


def test_a_fenced_coordinator_abandons_the_completion() -> None:
    q = MarkerQueue()
    q.add(completion(parts=[("t", 0), ("t", 1)]), 0, 0)
    requests = q.requests(0, lambda p: 0, leader_of)
    by_node = {r.node: r for r in requests}
    codes = {("t", 0): ErrorCode.TRANSACTION_COORDINATOR_FENCED}
    assert q.answered(by_node[1].request_id, answer(by_node[1].body, codes), 1) == []
    assert len(q) == 0
    # The other leader's answer comes too late to complete anything.
    assert q.answered(by_node[2].request_id, answer(by_node[2].body), 2) == []
    assert q.requests(1000, lambda p: 0, leader_of) == []


def test_a_reissued_completion_keeps_its_progress_and_a_new_one_replaces_it() -> None:
    q = MarkerQueue()
    c = completion(parts=[("t", 0), ("t", 1)])
    q.add(c, 0, 0)
    requests = {r.node: r for r in q.requests(0, lambda p: 0, leader_of)}
    q.add(completion(parts=[("t", 0), ("t", 1)]), 0, 0)  # the retry timer: the same
    assert q.requests(0, lambda p: 0, leader_of) == []
    assert q.answered(requests[1].request_id, answer(requests[1].body), 1) == []
    # Fenced by a new instance: an abort at a bumped epoch replaces it.
    abort = completion(epoch=1, commit=False, parts=[("t", 0), ("t", 1)])
    q.add(abort, 0, 0)
    assert q.answered(requests[2].request_id, answer(requests[2].body), 2) == []
    fresh = q.requests(3, lambda p: 0, leader_of)
    assert {p for r in fresh for p in sent_partitions(r.body)} == {("t", 0), ("t", 1)}
    done = [d for r in fresh for d in q.answered(r.request_id, answer(r.body), 4)]
    assert done == [abort]


def test_two_ids_of_one_producer_never_share_a_request() -> None:
    q = MarkerQueue()
    q.add(completion(tid="a", parts=[("t", 0)]), 0, 0)
    q.add(completion(tid="b", parts=[("t", 2)]), 1, 0)
    (first,) = q.requests(0, lambda p: 0, leader_of)
    assert len(first.body.markers) == 1
    (second,) = q.requests(0, lambda p: 0, leader_of)
    assert second.request_id != first.request_id


def test_dropped_ids_send_nothing_more() -> None:
    q = MarkerQueue()
    q.add(completion(), 0, 0)
    requests = q.requests(0, lambda p: 0, leader_of)
    q.drop(["tx"])
    assert len(q) == 0
    for r in requests:
        assert q.answered(r.request_id, answer(r.body), 1) == []
