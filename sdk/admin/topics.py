"""Topics: listing and describing them (Metadata), creating and deleting them,
adding partitions. Requests built and answers read here, without I/O;
:class:`~trafka.sdk.admin.Admin` sends them to the controller and retries
per name (see :func:`~trafka.sdk.admin._common.settle`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k20_delete_topics as dt
from trafka.codec.messages import k37_create_partitions as cpart

from .._validate import INT32_MAX, check_int, check_names, check_str, check_topic, describe
from ..calls import TRANSIENT, check
from ..errors import ArgumentTypeError, ArgumentValueError
from ..metadata import PartitionInfo, TopicInfo
from ._common import Result, check_broker_id, check_new_topic_counts, fit

__all__ = [
    "NewPartitions",
    "NewTopic",
    "check_assignments",
    "check_new_totals",
    "check_new_topics",
    "create_partitions_request",
    "create_topics_request",
    "delete_topics_request",
    "new_topics",
    "read_create_partitions",
    "read_create_topics",
    "read_delete_topics",
    "read_describe_topics",
    "read_list_topics",
]


@dataclasses.dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. ``-1`` partitions or replication factor: the broker's default.

    ``replica_assignments`` places the partitions instead (as Kafka's
    ``NewTopic(name, replicasAssignments)`` and ``kafka-topics
    --replica-assignment``): ``{partition: [broker ids]}``, the first broker of
    each the partition's preferred leader. The broker checks the placement
    (partitions numbered from 0, as many replicas each, brokers that exist:
    INVALID_REPLICA_ASSIGNMENT otherwise); the counts are then left at -1.

    Raises:
        TypeError, ValueError: a name Kafka cannot have, a count that is neither
            -1 nor at least 1, configs that are not a mapping of strings, or
            replica assignments together with a count.
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)
    replica_assignments: Mapping[int, Sequence[int]] | None = None

    def __post_init__(self) -> None:
        check_topic("name", self.name)
        check_new_topic_counts(self.num_partitions, self.replication_factor)
        if self.replica_assignments is not None:
            check_assignments("replica_assignments", self.replica_assignments)
            if self.num_partitions != -1 or self.replication_factor != -1:
                raise ArgumentValueError(
                    "give num_partitions and replication_factor, or replica_assignments, "
                    "not both (the assignments say how many of each)"
                )
        if not isinstance(self.configs, Mapping):
            raise ArgumentTypeError(
                f"configs must be a mapping of settings, got {describe(self.configs)}"
            )
        for key, value in self.configs.items():
            check_str(f"configs key {key!r}", key)
            check_str(f"configs[{key!r}]", value, empty=True, none=True)


def check_new_topics(
    topics: Any, num_partitions: Any, replication_factor: Any
) -> list[NewTopic | str]:
    """``create_topics``' arguments, checked: topics are NewTopic or names."""
    check_new_topic_counts(num_partitions, replication_factor)
    if isinstance(topics, NewTopic):
        raise ArgumentTypeError("topics must be an iterable of NewTopic or names, not one NewTopic")

    def one(name: str, value: Any) -> NewTopic | str:
        if isinstance(value, NewTopic):
            return value
        return check_topic(name, value)

    return check_names("topics", topics, one, "NewTopic or topic names")


def read_list_topics(resp: Any, *, include_internal: bool) -> dict[str, int]:
    """Each topic of a Metadata answer and its partition count (topics with an
    error left out, internal ones unless ``include_internal``)."""
    return {
        t.name: len(t.partitions)
        for t in resp.topics
        if t.name is not None and not t.error_code and (include_internal or not t.is_internal)
    }


def read_describe_topics(resp: Any, names: Iterable[str]) -> dict[str, TopicInfo]:
    """The topics of a Metadata answer, partitions sorted.

    A partition without a leader (LEADER_NOT_AVAILABLE, leader -1: its replicas
    are offline) is data, described as it is; so is a topic whose error is
    LEADER_NOT_AVAILABLE but which lists its partitions (Kafka 0.x answered so
    for a topic with an offline partition). Only a topic with no partitions yet
    (being created) is asked again.

    Raises:
        Again: a topic with a transient error.
        KafkaError: a topic's other error; UNKNOWN_TOPIC_OR_PARTITION for one of
            ``names`` the answer lacks.
    """
    out: dict[str, TopicInfo] = {}
    for t in resp.topics:
        if t.name is None:
            continue
        code = ErrorCode.of(t.error_code)
        if not (code == ErrorCode.LEADER_NOT_AVAILABLE and t.partitions):
            check(t.error_code, f"describing topic {t.name!r}", again=TRANSIENT)
        parts = sorted(
            (
                PartitionInfo(
                    t.name,
                    p.partition_index,
                    p.leader_id,
                    p.leader_epoch,
                    tuple(p.replica_nodes),
                    tuple(p.isr_nodes),
                    tuple(p.offline_replicas),
                    ErrorCode.of(p.error_code),
                )
                for p in t.partitions
            ),
            key=lambda p: p.partition,
        )
        out[t.name] = TopicInfo(t.name, t.topic_id, t.is_internal, tuple(parts), code)
    for name in names:
        if name not in out:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"describing topic {name!r}")
    return out


def new_topics(
    topics: Iterable[NewTopic | str], num_partitions: int, replication_factor: int
) -> dict[str, NewTopic]:
    """The topics by name; a plain name takes ``num_partitions`` and ``replication_factor``."""
    return {
        t.name: t
        for t in (
            t if isinstance(t, NewTopic) else NewTopic(t, num_partitions, replication_factor)
            for t in topics
        )
    }


def create_topics_request(
    version: int,
    topics: Iterable[NewTopic],
    *,
    timeout_ms: int,
    validate_only: bool,
) -> Any:
    """CreateTopics at ``version``."""
    C = ct.CreateTopicsRequest
    return fit(
        ApiKey.CREATE_TOPICS,
        version,
        C,
        topics=[
            C.CreatableTopic(
                name=t.name,
                num_partitions=t.num_partitions,
                replication_factor=t.replication_factor,
                assignments=[
                    C.CreatableReplicaAssignment(partition_index=p, broker_ids=list(ids))
                    for p, ids in sorted((t.replica_assignments or {}).items())
                ],
                configs=[C.CreatableTopicConfig(name=k, value=v) for k, v in t.configs.items()],
            )
            for t in topics
        ],
        timeout_ms=timeout_ms,
        validate_only=validate_only,
    )


def read_create_topics(resp: Any) -> list[Result]:
    """``(name, error code, message)`` per topic of a CreateTopics answer."""
    return [(r.name, r.error_code, r.error_message) for r in resp.topics]


def delete_topics_request(version: int, names: list[str], *, timeout_ms: int) -> Any:
    """DeleteTopics at ``version`` (by name: ``topics`` from v6, ``topic_names`` before)."""
    if version >= 6:
        return dt.DeleteTopicsRequest(
            topics=[dt.DeleteTopicsRequest.DeleteTopicState(name=n) for n in names],
            timeout_ms=timeout_ms,
        )
    return fit(
        ApiKey.DELETE_TOPICS,
        version,
        dt.DeleteTopicsRequest,
        topic_names=names,
        timeout_ms=timeout_ms,
    )


def read_delete_topics(resp: Any) -> list[Result]:
    """``(name, error code, message)`` per topic of a DeleteTopics answer."""
    return [(r.name, r.error_code, r.error_message) for r in resp.responses]


@dataclasses.dataclass(frozen=True, slots=True)
class NewPartitions:
    """A topic's new partition count, and optionally where the partitions it
    adds go (Kafka's ``NewPartitions.increaseTo(total, newAssignments)``): one
    list of broker ids per new partition, in partition order, the first of each
    its preferred leader. Without them the controller places them.

    Raises:
        TypeError, ValueError: a count below 1, or assignments that are not
            lists of broker ids.
    """

    total_count: int
    new_assignments: Sequence[Sequence[int]] | None = None

    def __post_init__(self) -> None:
        check_int("total_count", self.total_count, minimum=1, maximum=INT32_MAX)
        if self.new_assignments is not None:
            check_assignments("new_assignments", dict(enumerate(self.new_assignments)))


def check_assignments(name: str, value: Any) -> None:
    """Replica assignments: ``{partition: [broker ids]}``."""
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(
            f"{name} must be a mapping of partition to broker ids, got {describe(value)}"
        )
    for partition, brokers in value.items():
        check_int(f"{name} key {partition!r}", partition, minimum=0, maximum=INT32_MAX)
        check_names(f"{name}[{partition!r}]", brokers, check_broker_id, "broker ids")


def check_new_totals(value: Any) -> dict[str, NewPartitions]:
    """``create_partitions``' ``{topic: new partition count or NewPartitions}``."""
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(
            f"new_totals must be a mapping of topic to count, got {describe(value)}"
        )
    return {
        check_topic(f"new_totals key {topic!r}", topic): count
        if isinstance(count, NewPartitions)
        else NewPartitions(check_int(f"new_totals[{topic!r}]", count, minimum=1))
        for topic, count in value.items()
    }


def create_partitions_request(
    totals: Mapping[str, NewPartitions], *, timeout_ms: int, validate_only: bool
) -> Any:
    """CreatePartitions growing each topic to its total."""
    C = cpart.CreatePartitionsRequest
    return C(
        topics=[
            C.CreatePartitionsTopic(
                name=n,
                count=new.total_count,
                assignments=None
                if new.new_assignments is None
                else [
                    C.CreatePartitionsAssignment(broker_ids=list(ids))
                    for ids in new.new_assignments
                ],
            )
            for n, new in totals.items()
        ],
        timeout_ms=timeout_ms,
        validate_only=validate_only,
    )


def read_create_partitions(resp: Any) -> list[Result]:
    """``(name, error code, message)`` per topic of a CreatePartitions answer."""
    return [(r.name, r.error_code, r.error_message) for r in resp.results]
