"""What ``list_topics()`` and ``list_groups()`` return, as confluent-kafka's:
:class:`ClusterMetadata` (brokers and topics by id and name),
:class:`TopicMetadata`, :class:`PartitionMetadata`, :class:`BrokerMetadata`,
:class:`GroupMetadata` and :class:`GroupMember`.

The constructors take no argument in confluent-kafka; here they also take
the topics (and a topic its partitions) as the drop-in's producer builds
them, a partition given as None standing for one known by its id only.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "BrokerMetadata",
    "ClusterMetadata",
    "GroupMember",
    "GroupMetadata",
    "PartitionMetadata",
    "TopicMetadata",
]


class ClusterMetadata:
    """The cluster: its id, controller, brokers (by id) and topics (by name)."""

    def __init__(self, topics: dict[str, TopicMetadata] | None = None) -> None:
        self.cluster_id: str | None = None
        self.controller_id = -1
        self.brokers: dict[int, BrokerMetadata] = {}
        self.topics: dict[str, TopicMetadata] = dict(topics or {})
        self.orig_broker_id = -1
        self.orig_broker_name: str | None = None

    def __repr__(self) -> str:
        return f"ClusterMetadata({self.cluster_id})"

    def __str__(self) -> str:
        return str(self.cluster_id)


class BrokerMetadata:
    """A broker: its id, host and port."""

    def __init__(self, id: int = -1, host: str | None = None, port: int = -1) -> None:
        self.id = id
        self.host = host
        self.port = port

    def __repr__(self) -> str:
        return f"BrokerMetadata({self.id}, {self.host}:{self.port})"

    def __str__(self) -> str:
        return f"{self.host}:{self.port}/{self.id}"


class TopicMetadata:
    """A topic: its name, partitions (by id) and error (a KafkaError or None)."""

    def __init__(self, topic: str | None = None, partitions: dict[int, Any] | None = None) -> None:
        self.topic = topic
        self.partitions: dict[int, PartitionMetadata] = {
            p: PartitionMetadata(p) if m is None else m for p, m in (partitions or {}).items()
        }
        self.error: Any = None

    def __repr__(self) -> str:
        if self.error is not None:
            return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions, {self.error})"
        return f"TopicMetadata({self.topic}, {len(self.partitions)} partitions)"

    def __str__(self) -> str:
        return str(self.topic)


class PartitionMetadata:
    """A partition: its id, leader, replicas and in-sync replicas (broker ids)."""

    def __init__(self, id: int = -1, leader: int = -1) -> None:
        self.id = id
        self.leader = leader
        self.replicas: list[int] = []
        self.isrs: list[int] = []
        self.error: Any = None

    def __repr__(self) -> str:
        if self.error is not None:
            return f"PartitionMetadata({self.id}, {self.error})"
        return f"PartitionMetadata({self.id})"

    def __str__(self) -> str:
        return f"{self.id}"


class GroupMember:
    """A member of a group (``list_groups``)."""

    def __init__(self) -> None:
        self.id: str | None = None
        self.client_id: str | None = None
        self.client_host: str | None = None
        self.metadata: bytes | None = None
        self.assignment: bytes | None = None


class GroupMetadata:
    """A group (``list_groups``): its broker, id, state, protocol and members."""

    def __init__(self) -> None:
        self.broker: BrokerMetadata | None = None
        self.id: str | None = None
        self.error: Any = None
        self.state: str | None = None
        self.protocol_type: str | None = None
        self.protocol: str | None = None
        self.members: list[GroupMember] = []

    def __repr__(self) -> str:
        if self.error is not None:
            return f"GroupMetadata({self.id}, {self.error})"
        return f"GroupMetadata({self.id})"

    def __str__(self) -> str:
        return str(self.id)
