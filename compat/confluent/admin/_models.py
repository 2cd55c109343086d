"""The values confluent-kafka's admin API takes and returns: what to create
(:class:`NewTopic`, :class:`NewPartitions`), SCRAM credentials, offset specs,
and the results of the describe and list calls.

Rules: what a caller builds is checked as confluent-kafka checks it (a
topic's name must be a str, its counts ints: TypeError); results are plain
objects with confluent-kafka's attributes; an enum field of a result takes a
member, its number or its name.
"""

from __future__ import annotations

import functools
import operator
from typing import Any

from .._model import ConsumerGroupState, ConsumerGroupType, Node
from ._enums import AclOperation, ScramMechanism, to_enum

__all__ = [
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "DeletedRecords",
    "DescribeClusterResult",
    "ListConsumerGroupsResult",
    "ListOffsetsResultInfo",
    "MemberAssignment",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OffsetSpec",
    "ScramCredentialInfo",
    "TopicDescription",
    "UserScramCredentialAlteration",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
    "spec_number",
]


def _str_arg(position: int, value: Any) -> str:
    if not isinstance(value, str):
        raise TypeError(f"argument {position} must be str, not {_type_name(value)}")
    return value


def _int_arg(value: Any) -> int:
    number: int = operator.index(value)  # (TypeError: cannot be interpreted as an integer)
    return number


def _type_name(value: Any) -> str:
    return "None" if value is None else type(value).__name__


@functools.total_ordering
class NewTopic:
    """A topic for ``create_topics``: its name and, as librdkafka takes them,
    a partition count and replication factor (-1: the broker's defaults), or a
    replica assignment (a list of broker ids per partition), and its configs.

    Raises:
        TypeError: a name that is not a str, counts that are not ints, configs
            that are not a dict.
    """

    def __init__(
        self,
        topic: str,
        num_partitions: int = -1,
        replication_factor: int = -1,
        replica_assignment: list[list[int]] | None = None,
        config: dict[str, str] | None = None,
    ) -> None:
        self.topic = _str_arg(1, topic)
        self.num_partitions = _int_arg(num_partitions)
        self.replication_factor = _int_arg(replication_factor)
        self.replica_assignment = replica_assignment
        if config is not None and not isinstance(config, dict):
            raise TypeError("config must be a dict of strings")
        self.config = config

    def __repr__(self) -> str:
        counts = "" if self.num_partitions == -1 else f",num_partitions={self.num_partitions}"
        return f"NewTopic(topic={self.topic}{counts})"

    def __hash__(self) -> int:
        return hash(self.topic)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NewTopic):
            return NotImplemented
        return _new_topic_key(self) == _new_topic_key(other)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, NewTopic):
            return NotImplemented
        less: bool = _new_topic_key(self) < _new_topic_key(other)
        return less


def _new_topic_key(t: NewTopic) -> tuple[Any, ...]:
    return (
        t.topic,
        t.num_partitions,
        t.replication_factor,
        repr(t.replica_assignment),
        repr(t.config),
    )


@functools.total_ordering
class NewPartitions:
    """Partitions for ``create_partitions``: the topic's new total count and,
    optionally, the broker ids of each new partition's replicas."""

    def __init__(
        self, topic: str, new_total_count: int, replica_assignment: list[list[int]] | None = None
    ) -> None:
        self.topic = _str_arg(1, topic)
        self.new_total_count = _int_arg(new_total_count)
        self.replica_assignment = replica_assignment

    def __repr__(self) -> str:
        return f"NewPartitions(topic={self.topic},new_total_count={self.new_total_count})"

    def __hash__(self) -> int:
        return hash(self.topic)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, NewPartitions):
            return NotImplemented
        return _new_partitions_key(self) == _new_partitions_key(other)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, NewPartitions):
            return NotImplemented
        less: bool = _new_partitions_key(self) < _new_partitions_key(other)
        return less


def _new_partitions_key(p: NewPartitions) -> tuple[Any, ...]:
    return (p.topic, p.new_total_count, repr(p.replica_assignment))


# -- SCRAM credentials ---------------------------------------------------------------------------


class ScramCredentialInfo:
    """A SCRAM credential's mechanism and iteration count."""

    def __init__(self, mechanism: ScramMechanism, iterations: int) -> None:
        self.mechanism = mechanism
        self.iterations = iterations


class UserScramCredentialsDescription:
    """A user's SCRAM credentials (what ``describe_user_scram_credentials`` finds)."""

    def __init__(self, user: str, scram_credential_infos: list[ScramCredentialInfo]) -> None:
        self.user = user
        self.scram_credential_infos = scram_credential_infos


class UserScramCredentialAlteration:
    """A change of a user's SCRAM credentials (an upsertion or a deletion)."""

    def __init__(self, user: str) -> None:
        self.user = user


class UserScramCredentialUpsertion(UserScramCredentialAlteration):
    """Set a user's password for a mechanism; the salt is random when None."""

    def __init__(
        self,
        user: str,
        scram_credential_info: ScramCredentialInfo,
        password: bytes,
        salt: bytes | None = None,
    ) -> None:
        super().__init__(user)
        self.scram_credential_info = scram_credential_info
        self.password = password
        self.salt = salt


class UserScramCredentialDeletion(UserScramCredentialAlteration):
    """Delete a user's credential for a mechanism."""

    def __init__(self, user: str, mechanism: ScramMechanism) -> None:
        super().__init__(user)
        self.mechanism = mechanism


# -- offsets and records -------------------------------------------------------------------------


#: The specs with a fixed number, one instance each (filled below).
_SPECS: dict[int, OffsetSpec] = {}


class OffsetSpec:
    """Which offset ``list_offsets`` looks up in a partition:
    :meth:`earliest`, :meth:`latest`, :meth:`max_timestamp` (the record with
    the highest timestamp) or :meth:`for_timestamp` (the first at or after
    it). ``OffsetSpec(n)``: librdkafka's number (-1 latest, -2 earliest, -3
    max timestamp) or a timestamp."""

    def __new__(cls, index: int) -> OffsetSpec:
        if index < 0:
            return _SPECS[index]
        return TimestampSpec(index)

    @classmethod
    def earliest(cls) -> OffsetSpec:
        return _SPECS[-2]

    @classmethod
    def latest(cls) -> OffsetSpec:
        return _SPECS[-1]

    @classmethod
    def max_timestamp(cls) -> OffsetSpec:
        return _SPECS[-3]

    @classmethod
    def for_timestamp(cls, timestamp: int) -> OffsetSpec:
        return TimestampSpec(timestamp)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, OffsetSpec):
            return NotImplemented
        return spec_number(self) < spec_number(other)


class TimestampSpec(OffsetSpec):
    """The first offset whose timestamp is at or after ``timestamp`` (ms)."""

    def __new__(cls, timestamp: int) -> TimestampSpec:
        return object.__new__(cls)

    def __init__(self, timestamp: int) -> None:
        self.timestamp = timestamp


class _Fixed(OffsetSpec):
    def __new__(cls) -> _Fixed:
        return object.__new__(cls)


class LatestSpec(_Fixed):
    """The partition's end (the offset the next record gets)."""


class EarliestSpec(_Fixed):
    """The partition's first offset."""


class MaxTimestampSpec(_Fixed):
    """The offset of the record with the highest timestamp."""


_SPECS.update({-1: LatestSpec(), -2: EarliestSpec(), -3: MaxTimestampSpec()})


def spec_number(spec: OffsetSpec) -> int:
    """librdkafka's number of a spec: -1, -2, -3, or the timestamp."""
    if isinstance(spec, TimestampSpec):
        timestamp: int = spec.timestamp
        return timestamp
    for number, fixed in _SPECS.items():
        if type(spec) is type(fixed):
            return number
    raise TypeError("Value must be a OffsetSpec")


class ListOffsetsResultInfo:
    """What ``list_offsets`` found for a partition (``leader_epoch`` None when unknown)."""

    def __init__(self, offset: int, timestamp: int, leader_epoch: int) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.leader_epoch: int | None = None if leader_epoch < 0 else leader_epoch


class DeletedRecords:
    """A partition's low watermark after ``delete_records``."""

    def __init__(self, low_watermark: int) -> None:
        self.low_watermark = low_watermark


# -- groups, topics, the cluster ------------------------------------------------------------------


def _operations(ops: list[Any] | None) -> list[AclOperation] | None:
    return [to_enum(op, AclOperation) for op in ops] if ops else None


class ConsumerGroupListing:
    """A group as ``list_consumer_groups`` lists it."""

    def __init__(
        self,
        group_id: str,
        is_simple_consumer_group: bool,
        state: ConsumerGroupState | str | int | None = None,
        type: ConsumerGroupType | str | int | None = None,
    ) -> None:
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        if state is not None:
            self.state = to_enum(state, ConsumerGroupState)
        if type is not None:
            self.type = to_enum(type, ConsumerGroupType)


class ListConsumerGroupsResult:
    """``list_consumer_groups``: the groups listed, and the errors met."""

    def __init__(
        self, valid: list[ConsumerGroupListing] | None = None, errors: list[Any] | None = None
    ) -> None:
        self.valid = valid
        self.errors = errors


class MemberAssignment:
    """The partitions of a group's member."""

    def __init__(self, topic_partitions: list[Any] | None) -> None:
        self.topic_partitions = topic_partitions or []


class MemberDescription:
    """A member of a group, as ``describe_consumer_groups`` describes it."""

    def __init__(
        self,
        member_id: str,
        client_id: str,
        host: str,
        assignment: MemberAssignment,
        group_instance_id: str | None = None,
        target_assignment: MemberAssignment | None = None,
    ) -> None:
        self.member_id = member_id
        self.client_id = client_id
        self.host = host
        self.assignment = assignment
        self.target_assignment = target_assignment
        self.group_instance_id = group_instance_id


class ConsumerGroupDescription:
    """A group, as ``describe_consumer_groups`` describes it."""

    def __init__(
        self,
        group_id: str,
        is_simple_consumer_group: bool,
        members: list[MemberDescription],
        partition_assignor: str,
        state: ConsumerGroupState | str | int | None,
        coordinator: Node,
        authorized_operations: list[Any] | None = None,
        type: ConsumerGroupType | str | int = ConsumerGroupType.UNKNOWN,
    ) -> None:
        self.group_id = group_id
        self.is_simple_consumer_group = is_simple_consumer_group
        self.members = members
        self.authorized_operations = _operations(authorized_operations)
        self.partition_assignor = partition_assignor
        if state is not None:
            self.state = to_enum(state, ConsumerGroupState)
        if type is not None:
            self.type = to_enum(type, ConsumerGroupType)
        self.coordinator = coordinator


class TopicDescription:
    """A topic, as ``describe_topics`` describes it: its id, whether it is
    internal, its partitions (``TopicPartitionInfo``)."""

    def __init__(
        self,
        name: str,
        topic_id: Any,
        is_internal: bool,
        partitions: list[Any],
        authorized_operations: list[Any] | None = None,
    ) -> None:
        self.name = name
        self.topic_id = topic_id
        self.is_internal = is_internal
        self.partitions = partitions
        self.authorized_operations = _operations(authorized_operations)


class DescribeClusterResult:
    """The cluster, as ``describe_cluster`` describes it."""

    def __init__(
        self,
        controller: Node,
        nodes: list[Node],
        cluster_id: str | None = None,
        authorized_operations: list[Any] | None = None,
    ) -> None:
        self.cluster_id = cluster_id
        self.controller = controller
        self.nodes = nodes
        self.authorized_operations = _operations(authorized_operations)
