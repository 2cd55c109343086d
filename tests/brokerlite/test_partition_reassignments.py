"""AlterPartitionReassignments and ListPartitionReassignments as Kafka's
controller answers on one node: every partition already sits on its only
possible replica set, no reassignment is ever in progress. Sans-IO through the
real codec, then kafka-python's admin against a running brokerlite."""

from __future__ import annotations

from typing import Any

import pytest

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k45_alter_partition_reassignments as alter
from trafka.codec.messages import k46_list_partition_reassignments as listing

pytestmark = pytest.mark.timeout(60)

Topic = alter.AlterPartitionReassignmentsRequest.ReassignableTopic
Part = alter.AlterPartitionReassignmentsRequest.ReassignablePartition
ListTopic = listing.ListPartitionReassignmentsRequest.ListPartitionReassignmentsTopics


def reassign(core: Any, *topics: tuple[str, list[tuple[int, list[int] | None]]]) -> Any:
    request = alter.AlterPartitionReassignmentsRequest(
        topics=[
            Topic(name=name, partitions=[Part(partition_index=i, replicas=r) for i, r in parts])
            for name, parts in topics
        ]
    )
    return core.call(45, 0, request)


def codes(response: Any) -> list[tuple[str, int, int]]:
    return [
        (t.name, p.partition_index, p.error_code) for t in response.responses for p in t.partitions
    ]


@pytest.fixture
def node(core: Any) -> int:
    core.broker.logs.create_topic("t", 2)
    node_id: int = core.broker.node_id
    return node_id


def test_the_current_replicas_are_a_success_with_nothing_to_do(core: Any, node: int) -> None:
    response = reassign(core, ("t", [(0, [node]), (1, [node])]), ("t", [(0, [node])]))
    assert (response.error_code, response.error_message) == (ErrorCode.NONE, None)
    assert codes(response) == [
        ("t", 0, ErrorCode.NONE),
        ("t", 1, ErrorCode.NONE),
        ("t", 0, ErrorCode.NONE),
    ]
    assert all(p.error_message is None for t in response.responses for p in t.partitions)
    assert list_all(core) == []


def test_cancelling_when_nothing_is_in_progress(core: Any, node: int) -> None:
    response = reassign(core, ("t", [(1, None)]))
    [[p]] = [t.partitions for t in response.responses]
    assert p.error_code == ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
    # Kafka 4.4 gives no message (tests/brokerlite/test_differential_kafka44.py).
    assert p.error_message is None


@pytest.mark.parametrize(
    ("replicas", "words"),
    [
        ([], "empty"),
        (["node", "node"], "more than once"),
        (["node", 7], "broker 7 is not registered"),
        ([7, 7], "broker 7 is not registered"),  # unknown is found before the repeat
        (["node", "node", 0], "broker 0 is not registered"),  # ascending: 0 comes first
        (["node", 9, "node"], "more than once"),  # ascending: the repeat comes before 9
        ([-1], "broker -1 is not registered"),
    ],
)
def test_invalid_replica_lists(core: Any, node: int, replicas: list[Any], words: str) -> None:
    wanted = [node if r == "node" else r for r in replicas]
    response = reassign(core, ("t", [(0, wanted)]))
    [[p]] = [t.partitions for t in response.responses]
    assert p.error_code == ErrorCode.INVALID_REPLICA_ASSIGNMENT
    assert words in p.error_message
    assert response.error_code == ErrorCode.NONE


def test_unknown_topics_and_partitions_come_first(core: Any, node: int) -> None:
    response = reassign(
        core,
        ("nope", [(0, [node]), (1, None), (2, [])]),
        ("t", [(2, [node]), (-1, None), (5, [7, 7]), (0, None)]),
    )
    assert codes(response) == [
        ("nope", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("nope", 2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", 2, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", -1, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", 5, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("t", 0, ErrorCode.NO_REASSIGNMENT_IN_PROGRESS),
    ]
    messages = [p.error_message for t in response.responses for p in t.partitions]
    assert "nope" in messages[0]
    assert "t-2" in messages[3]


def test_an_empty_request_gets_kafkas_empty_answer(core: Any) -> None:
    response = reassign(core)
    assert (response.error_code, response.error_message, response.responses) == (
        ErrorCode.NONE,
        "",
        [],
    )


def list_all(core: Any, topics: list[Any] | None = None) -> list[Any]:
    response = core.call(46, 0, listing.ListPartitionReassignmentsRequest(topics=topics))
    assert (response.error_code, response.error_message) == (ErrorCode.NONE, None)
    topics_listed: list[Any] = response.topics
    return topics_listed


def test_nothing_is_ever_being_reassigned(core: Any, node: int) -> None:
    reassign(core, ("t", [(0, [node]), (1, None)]))
    assert list_all(core) == []
    assert list_all(core, []) == []
    # Named topics, known or not, and partitions that do not exist: all absent.
    named = [
        ListTopic(name="t", partition_indexes=[0, 1, 9, -1]),
        ListTopic(name="no-such-topic", partition_indexes=[0]),
        ListTopic(name="", partition_indexes=[]),
    ]
    assert list_all(core, named) == []


# -- kafka-python ----------------------------------------------------------------------------


def test_kafka_python_alters_and_lists_reassignments(running: Any) -> None:
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.admin import NewTopic
    from kafka.errors import (
        InvalidReplicationAssignmentError,
        NoReassignmentInProgressError,
        UnknownTopicOrPartitionError,
    )

    node = running.broker.node_id
    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic("moves", 2, 1)])
        result = admin.alter_partition_reassignments(
            {
                TopicPartition("moves", 0): [node],
                TopicPartition("moves", 1): None,
                TopicPartition("moves", 7): [node],
                TopicPartition("absent", 0): [node],
            }
        )
        bad = admin.alter_partition_reassignments({TopicPartition("moves", 0): [node, node + 1]})
        everything = admin.list_partition_reassignments()
        named = admin.list_partition_reassignments([TopicPartition("moves", 0)])
        by_dict = admin.list_partition_reassignments({"moves": [0, 1], "absent": [0]})
    finally:
        admin.close()
    assert result == {
        TopicPartition("moves", 0): None,
        TopicPartition("moves", 1): NoReassignmentInProgressError,
        TopicPartition("moves", 7): UnknownTopicOrPartitionError,
        TopicPartition("absent", 0): UnknownTopicOrPartitionError,
    }
    assert bad == {TopicPartition("moves", 0): InvalidReplicationAssignmentError}
    assert everything == named == by_dict == {}
