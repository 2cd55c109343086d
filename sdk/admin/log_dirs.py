"""Brokers' log directories and the replicas in them: DescribeLogDirs and
AlterReplicaLogDirs (KIP-113), one request per broker. Requests built and
answers read here, without I/O; :class:`~trafka.sdk.admin.Admin` sends them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from trafka.codec import ErrorCode, KafkaError
from trafka.codec.messages import k34_alter_replica_log_dirs as arld
from trafka.codec.messages import k35_describe_log_dirs as dld

from ..calls import TRANSIENT, check
from ..consumer_types import TopicPartition
from ._common import partition_outcome

__all__ = [
    "LogDirDescription",
    "ReplicaLogDirInfo",
    "TopicPartitionReplica",
    "alter_replica_log_dirs_plan",
    "alter_replica_log_dirs_request",
    "check_log_dirs",
    "moving",
    "describe_log_dirs_request",
    "read_alter_replica_log_dirs",
    "read_log_dirs",
    "read_replica_log_dirs",
    "replica_log_dirs_plan",
]


@dataclasses.dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory of a broker, as DescribeLogDirs reports it.

    Attributes:
        node_id: the broker.
        path: the directory on the broker.
        error: why the directory cannot be used (offline), or None.
        partitions: the bytes each partition takes there.
        total_bytes, usable_bytes: of the directory's file system; None when the
            broker does not say (before DescribeLogDirs v4).
    """

    node_id: int
    path: str
    error: KafkaError | None
    partitions: Mapping[TopicPartition, int]
    total_bytes: int | None = None
    usable_bytes: int | None = None


class TopicPartitionReplica(NamedTuple):
    """The replica of a partition on one broker (Java's ``TopicPartitionReplica``);
    a plain ``(topic, partition, broker_id)`` tuple is taken too."""

    topic: str
    partition: int
    broker_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaLogDirInfo:
    """Where a broker keeps a replica, as :meth:`Admin.describe_replica_log_dirs`
    reports it (Java's ``DescribeReplicaLogDirsResult.ReplicaLogDirInfo``, with the
    sizes besides).

    Attributes:
        current_log_dir: the directory the replica is in; None when the broker
            holds no replica of the partition (or only in an offline directory).
        current_offset_lag: how far its log end is behind the partition's
            high watermark (for the current replica); None with no current dir.
        future_log_dir: the directory it is being moved to (AlterReplicaLogDirs),
            None when no move is under way.
        future_offset_lag: how far the copy in ``future_log_dir`` is behind the
            current replica; None with no future dir.
        size, future_size: bytes on disk of the current replica and of the
            copy; None when there is no such replica.
    """

    current_log_dir: str | None = None
    current_offset_lag: int | None = None
    future_log_dir: str | None = None
    future_offset_lag: int | None = None
    size: int | None = None
    future_size: int | None = None


def describe_log_dirs_request(partitions: Mapping[str, Sequence[int]] | None) -> Any:
    """DescribeLogDirs of the partitions by topic (None: all of them)."""
    req = dld.DescribeLogDirsRequest
    topics = (
        None
        if partitions is None
        else [
            req.DescribableLogDirTopic(topic=t, partitions=list(ps)) for t, ps in partitions.items()
        ]
    )
    return req(topics=topics)


def check_log_dirs(version: int, resp: Any) -> None:
    """The error of a DescribeLogDirs answer as a whole (v3+ has one).

    Raises:
        Again: a transient error.
        KafkaError: any other error.
    """
    if version >= 3:
        check(resp.error_code, "DescribeLogDirs", again=TRANSIENT)


def read_log_dirs(node_id: int, version: int, resp: Any) -> list[LogDirDescription]:
    """Broker ``node_id``'s directories in its DescribeLogDirs answer at ``version``."""
    return [
        LogDirDescription(
            node_id=node_id,
            path=r.log_dir,
            error=KafkaError(r.error_code, f"log directory {r.log_dir}") if r.error_code else None,
            partitions={
                TopicPartition(t.name, p.partition_index): p.partition_size
                for t in r.topics
                for p in t.partitions
            },
            total_bytes=r.total_bytes if version >= 4 and r.total_bytes >= 0 else None,
            usable_bytes=r.usable_bytes if version >= 4 and r.usable_bytes >= 0 else None,
        )
        for r in resp.results
    ]


def replica_log_dirs_plan(
    replicas: Iterable[TopicPartitionReplica],
) -> dict[int, dict[str, list[int]]]:
    """Per broker, its replicas' partitions by topic."""
    plan: dict[int, dict[str, list[int]]] = {}
    for r in replicas:
        plan.setdefault(r.broker_id, {}).setdefault(r.topic, []).append(r.partition)
    return plan


def read_replica_log_dirs(
    broker: int, resp: Any, replicas: Iterable[TopicPartitionReplica]
) -> dict[TopicPartitionReplica, ReplicaLogDirInfo]:
    """Where broker ``broker`` keeps ``replicas``, from its DescribeLogDirs answer:
    all None for a replica it does not hold (or holds only in an offline directory).

    Raises:
        KafkaError: a directory's error other than KAFKA_STORAGE_ERROR (offline).
    """
    found: dict[TopicPartition, dict[str, Any]] = {}
    for d in resp.results:
        if d.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
            continue  # an offline directory lists no replicas
        check(d.error_code, f"log directory {d.log_dir} of broker {broker}")
        for t in d.topics:
            for p in t.partitions:
                fields = found.setdefault(TopicPartition(t.name, p.partition_index), {})
                if p.is_future_key:
                    fields.update(
                        future_log_dir=d.log_dir,
                        future_offset_lag=p.offset_lag,
                        future_size=p.partition_size,
                    )
                else:
                    fields.update(
                        current_log_dir=d.log_dir,
                        current_offset_lag=p.offset_lag,
                        size=p.partition_size,
                    )
    return {
        r: ReplicaLogDirInfo(**found.get(TopicPartition(r.topic, r.partition), {}))
        for r in replicas
    }


def alter_replica_log_dirs_plan(
    wanted: Mapping[TopicPartitionReplica, str],
) -> dict[int, dict[str, dict[str, list[int]]]]:
    """Per broker, per directory, the partitions to move there by topic."""
    plan: dict[int, dict[str, dict[str, list[int]]]] = {}
    for r, path in wanted.items():
        topics = plan.setdefault(r.broker_id, {}).setdefault(path, {})
        topics.setdefault(r.topic, []).append(r.partition)
    return plan


def alter_replica_log_dirs_request(dirs: Mapping[str, Mapping[str, list[int]]]) -> Any:
    """AlterReplicaLogDirs for one broker's part of :func:`alter_replica_log_dirs_plan`."""
    req = arld.AlterReplicaLogDirsRequest
    return req(
        dirs=[
            req.AlterReplicaLogDir(
                path=path,
                topics=[
                    req.AlterReplicaLogDirTopic(name=t, partitions=ps) for t, ps in topics.items()
                ],
            )
            for path, topics in dirs.items()
        ]
    )


def moving(r: TopicPartitionReplica, path: str) -> str:
    """What moving replica ``r`` to ``path`` is called in errors."""
    return f"moving {r.topic}-{r.partition} on broker {r.broker_id} to {path!r}"


def read_alter_replica_log_dirs(
    broker: int, resp: Any, wanted: Mapping[TopicPartitionReplica, str]
) -> dict[TopicPartitionReplica, KafkaError | None]:
    """Per replica of ``wanted`` on broker ``broker``, None when the broker took
    the move, else its error (UNKNOWN_SERVER_ERROR for one it did not answer)."""
    got: dict[TopicPartitionReplica, KafkaError | None] = {}
    for t in resp.results:
        for p in t.partitions:
            r = TopicPartitionReplica(t.topic_name, p.partition_index, broker)
            if r in wanted:
                got[r] = partition_outcome(p.error_code, None, moving(r, wanted[r]))
    return {
        r: got[r]
        if r in got
        else KafkaError(
            ErrorCode.UNKNOWN_SERVER_ERROR, f"{moving(r, wanted[r])}: the broker did not answer"
        )
        for r in wanted
        if r.broker_id == broker
    }
