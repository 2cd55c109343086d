"""Partition leadership and placement through the controller: ElectLeaders
(KIP-460) and partition reassignments (KIP-455). Requests built and answers
read here, without I/O; :class:`~trafka.sdk.admin.Admin` sends them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError
from trafka.codec.messages import k43_elect_leaders as el
from trafka.codec.messages import k45_alter_partition_reassignments as apr
from trafka.codec.messages import k46_list_partition_reassignments as lpr

from ..calls import TRANSIENT, check
from ..consumer_types import TopicPartition
from ..errors import ArgumentValueError
from ._common import answer_timeout_ms, answered, by_topic, fit, partition_outcome

__all__ = [
    "ELECTION_TYPES",
    "PartitionReassignment",
    "alter_partition_reassignments_request",
    "elect_leaders_request",
    "election_type",
    "election_wait",
    "list_partition_reassignments_request",
    "read_alter_partition_reassignments",
    "read_elect_leaders",
    "read_list_partition_reassignments",
    "reassignments",
]

#: ElectLeaders' election types by name.
ELECTION_TYPES = {"preferred": 0, "unclean": 1}


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A partition whose replicas are being moved (ListPartitionReassignments, KIP-455).

    Attributes:
        replicas: its replicas now, the ones being added and removed included.
        adding_replicas: the brokers it is being copied to.
        removing_replicas: the brokers it will leave once they are in sync.
    """

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


def election_type(name: str) -> int:
    """ElectLeaders' number for an election type.

    Raises:
        ValueError: an unknown election type.
    """
    if not isinstance(name, str) or name not in ELECTION_TYPES:
        raise ArgumentValueError(f"election_type must be preferred or unclean, got {name!r}")
    return ELECTION_TYPES[name]


def election_wait(request_timeout_ms: int, left_s: float) -> tuple[float, int]:
    """How long an ElectLeaders attempt waits for its answer (seconds:
    ``request.timeout.ms``, at most the ``left_s`` the call has left) and the
    ``timeout_ms`` it sends (:func:`~._common.answer_timeout_ms`).

    The controller answers once the new leaders are in its metadata, or at the
    request's ``timeout_ms`` with each partition's outcome as it then stands
    (Kafka's DelayedElectLeader: REQUEST_TIMED_OUT for one not seen done yet).
    A client that stopped waiting first would ask again and read
    ELECTION_NOT_NEEDED for the elections its first request carried out. Java's
    AdminClient sends ``min(request.timeout.ms, time left)`` and waits as long,
    so it can lose that answer; Kafka 3.9's ZooKeeper controller can hold an
    answer until that timeout (when its purgatory misses the wake-up).
    """
    wait = max(0.0, min(request_timeout_ms / 1000, left_s))
    return wait, answer_timeout_ms(wait)


def elect_leaders_request(
    version: int,
    election: int,
    partitions: Mapping[str, list[int]] | None,
    *,
    timeout_ms: int,
) -> Any:
    """ElectLeaders at ``version`` (``election``: :func:`election_type`'s number)
    for the partitions by topic (None: all that need one).

    Raises:
        KafkaError: UNSUPPORTED_VERSION for an unclean election at v0.
    """
    if version == 0 and election != ELECTION_TYPES["preferred"]:
        raise KafkaError(
            ErrorCode.UNSUPPORTED_VERSION,
            "this broker elects preferred leaders only (ElectLeaders v0)",
        )
    req = el.ElectLeadersRequest
    topics = (
        None
        if partitions is None
        else [req.TopicPartitions(topic=t, partitions=ps) for t, ps in partitions.items()]
    )
    return fit(
        ApiKey.ELECT_LEADERS,
        version,
        req,
        election_type=election,
        topic_partitions=topics,
        timeout_ms=timeout_ms,
    )


def read_elect_leaders(resp: Any) -> dict[TopicPartition, KafkaError | None]:
    """Per partition of an ElectLeaders answer, None or its error.

    Raises:
        Again: a transient error for the request.
        KafkaError: the request as a whole was refused.
    """
    check(resp.error_code, "ElectLeaders", again=TRANSIENT)
    return {
        TopicPartition(r.topic, p.partition_id): partition_outcome(
            p.error_code,
            p.error_message,
            f"electing a leader of {r.topic}-{p.partition_id}",
        )
        for r in resp.replica_election_results
        for p in r.partition_result
    }


def reassignments(
    wanted: Mapping[TopicPartition, Sequence[int] | None]
    | Mapping[tuple[str, int], Sequence[int] | None],
) -> dict[TopicPartition, list[int] | None]:
    """The new replica lists (None: cancel the move) by partition."""
    return {
        TopicPartition(*tp): (None if r is None else [int(b) for b in r])
        for tp, r in wanted.items()
    }


def alter_partition_reassignments_request(
    wanted: Mapping[TopicPartition, list[int] | None], *, timeout_ms: int
) -> Any:
    """AlterPartitionReassignments for :func:`reassignments`' result."""
    req = apr.AlterPartitionReassignmentsRequest
    return req(
        timeout_ms=timeout_ms,
        topics=[
            req.ReassignableTopic(
                name=t,
                partitions=[
                    req.ReassignablePartition(
                        partition_index=p, replicas=wanted[TopicPartition(t, p)]
                    )
                    for p in ps
                ],
            )
            for t, ps in by_topic(wanted).items()
        ],
    )


def read_alter_partition_reassignments(
    resp: Any, wanted: Iterable[TopicPartition]
) -> dict[TopicPartition, KafkaError | None]:
    """Per partition of ``wanted``, None or its error.

    Raises:
        Again: a transient error for the request.
        KafkaError: the request as a whole was refused, or a partition was not answered.
    """
    check(resp.error_code, "AlterPartitionReassignments", resp.error_message, again=TRANSIENT)
    out = {
        TopicPartition(t.name, p.partition_index): partition_outcome(
            p.error_code, p.error_message, f"reassigning {t.name}-{p.partition_index}"
        )
        for t in resp.responses
        for p in t.partitions
    }
    return answered(list(wanted), out, "reassigning partition")


def list_partition_reassignments_request(
    partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None, *, timeout_ms: int
) -> Any:
    """ListPartitionReassignments of ``partitions`` (None: every move under way)."""
    req = lpr.ListPartitionReassignmentsRequest
    topics = None
    if partitions is not None:
        topics = [
            req.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
            for t, ps in by_topic(partitions).items()
        ]
    return req(timeout_ms=timeout_ms, topics=topics)


def read_list_partition_reassignments(resp: Any) -> dict[TopicPartition, PartitionReassignment]:
    """The moves a ListPartitionReassignments answer lists.

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    check(resp.error_code, "ListPartitionReassignments", resp.error_message, again=TRANSIENT)
    return {
        TopicPartition(t.name, p.partition_index): PartitionReassignment(
            tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas)
        )
        for t in resp.topics
        for p in t.partitions
    }
