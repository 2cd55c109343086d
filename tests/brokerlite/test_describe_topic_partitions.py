"""DescribeTopicPartitions (KIP-966) as Kafka's broker answers on one node: the
handler's rules through the sans-IO core (every request and answer through the
real codec), then kafka-python's describe_topic_partitions paging through a
running brokerlite."""

from __future__ import annotations

from typing import Any

import pytest

from trafka.brokerlite.handlers import k75_describe_topic_partitions as handler
from trafka.brokerlite.handlers._util import TOPIC_AUTHORIZED_OPERATIONS
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k75_describe_topic_partitions as m

pytestmark = pytest.mark.timeout(60)

NULL_UUID = handler.NULL_UUID
Request = m.DescribeTopicPartitionsRequest
Cursor = Request.Cursor


def describe(
    core: Any,
    topics: list[str] | None = None,
    *,
    limit: int = 2000,
    cursor: tuple[str, int] | None = None,
) -> m.DescribeTopicPartitionsResponse:
    request = Request(
        topics=[Request.TopicRequest(name=t) for t in topics or []],
        response_partition_limit=limit,
        cursor=None if cursor is None else Cursor(topic_name=cursor[0], partition_index=cursor[1]),
    )
    response: m.DescribeTopicPartitionsResponse = core.call(75, 0, request)
    return response


def listed(response: m.DescribeTopicPartitionsResponse) -> list[tuple[str, int]]:
    """(topic, partition) for every partition in the answer, in order."""
    return [(t.name or "", p.partition_index) for t in response.topics for p in t.partitions]


def cursor_of(response: m.DescribeTopicPartitionsResponse) -> tuple[str, int] | None:
    c = response.next_cursor
    return None if c is None else (c.topic_name, c.partition_index)


def make_topics(core: Any, **counts: int) -> None:
    for name, n in counts.items():
        core.broker.logs.create_topic(name, n)


# -- what each partition says ----------------------------------------------------------------


def test_every_topic_in_name_order_with_metadatas_facts(core: Any) -> None:
    make_topics(core, zeta=2, alpha=3, mid=1)
    response = describe(core)
    assert [t.name for t in response.topics] == ["alpha", "mid", "zeta"]
    assert response.next_cursor is None

    meta = core.call(3, 12, metadata.MetadataRequest(topics=None))
    node = core.broker.node_id
    by_name = {t.name: t for t in meta.topics}
    for topic in response.topics:
        expected = by_name[topic.name]
        assert topic.error_code == ErrorCode.NONE
        assert topic.topic_id == expected.topic_id != NULL_UUID
        assert topic.is_internal is False
        assert topic.topic_authorized_operations == TOPIC_AUTHORIZED_OPERATIONS
        assert [
            (p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
            for p in topic.partitions
        ] == [
            (p.partition_index, p.leader_id, p.leader_epoch, p.replica_nodes, p.isr_nodes)
            for p in expected.partitions
        ]
        for p in topic.partitions:
            assert p.error_code == ErrorCode.NONE
            assert p.leader_id == node
            assert p.eligible_leader_replicas == []
            assert p.last_known_elr == []
            assert p.offline_replicas == []


def test_no_topics_at_all(core: Any) -> None:
    response = describe(core)
    assert response.topics == []
    assert response.next_cursor is None


def test_named_topics_once_each_in_name_order_and_unknown_ones_reported(core: Any) -> None:
    make_topics(core, b=1, a=2)
    response = describe(core, ["b", "no-such", "a", "b", "bad/name", ""])
    got = [(t.name, t.error_code, t.topic_id, len(t.partitions)) for t in response.topics]
    assert got == [
        ("", ErrorCode.INVALID_TOPIC_EXCEPTION, NULL_UUID, 0),
        ("a", ErrorCode.NONE, core.broker.logs.topic("a").topic_id, 2),
        ("b", ErrorCode.NONE, core.broker.logs.topic("b").topic_id, 1),
        ("bad/name", ErrorCode.INVALID_TOPIC_EXCEPTION, NULL_UUID, 0),
        ("no-such", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, NULL_UUID, 0),
    ]
    assert all(
        t.topic_authorized_operations == TOPIC_AUTHORIZED_OPERATIONS for t in response.topics
    )


def test_names_sort_as_java_compares_strings(core: Any) -> None:
    # U+FF5E sorts after U+1F600 by code point but before it in UTF-16 (the
    # emoji is a surrogate pair, 0xD83D...). Neither is a legal topic name.
    response = describe(core, ["\U0001f600", "\uff5e", "a"])
    assert [t.name for t in response.topics] == ["a", "\U0001f600", "\uff5e"]


# -- pages -----------------------------------------------------------------------------------


def pages(core: Any, topics: list[str] | None, limit: int) -> list[list[tuple[str, int]]]:
    """Every page, following next_cursor until there is none."""
    out = []
    cursor = None
    for _ in range(100):
        response = describe(core, topics, limit=limit, cursor=cursor)
        out.append(listed(response))
        cursor = cursor_of(response)
        if cursor is None:
            return out
    raise AssertionError("the cursor never ran out")


def test_limit_splits_topics_and_the_cursor_points_at_the_first_partition_left_out(
    core: Any,
) -> None:
    make_topics(core, a=3, b=1, c=4)
    first = describe(core, limit=2)
    assert listed(first) == [("a", 0), ("a", 1)]
    assert cursor_of(first) == ("a", 2)

    second = describe(core, limit=2, cursor=("a", 2))
    assert listed(second) == [("a", 2), ("b", 0)]
    # The budget ran out exactly at the end of b: the cursor is c's start.
    assert cursor_of(second) == ("c", 0)

    third = describe(core, limit=2, cursor=("c", 0))
    assert listed(third) == [("c", 0), ("c", 1)]
    assert cursor_of(third) == ("c", 2)

    last = describe(core, limit=2, cursor=("c", 2))
    assert listed(last) == [("c", 2), ("c", 3)]
    assert last.next_cursor is None


@pytest.mark.parametrize("limit", [1, 2, 3, 4, 5, 7, 8, 9, 50])
@pytest.mark.parametrize("named", [False, True])
def test_pages_add_up_to_everything_whatever_the_limit(core: Any, limit: int, named: bool) -> None:
    make_topics(core, t1=3, t2=1, t3=4)
    topics = ["t3", "missing", "t1", "t2"] if named else None
    everything = listed(describe(core, topics))
    assert len(everything) == 8
    got = pages(core, topics, limit)
    assert all(len(page) <= limit for page in got)
    assert [tp for page in got for tp in page] == everything


def test_unknown_topics_cost_nothing_but_can_hold_the_cursor(core: Any) -> None:
    make_topics(core, a=2, c=1)
    response = describe(core, ["a", "b-missing", "c"], limit=2)
    assert listed(response) == [("a", 0), ("a", 1)]
    # The budget is spent when b-missing is reached: Kafka puts the cursor there.
    assert [t.name for t in response.topics] == ["a"]
    assert cursor_of(response) == ("b-missing", 0)
    rest = describe(core, ["a", "b-missing", "c"], limit=2, cursor=("b-missing", 0))
    assert [(t.name, t.error_code) for t in rest.topics] == [
        ("b-missing", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
        ("c", ErrorCode.NONE),
    ]
    assert listed(rest) == [("c", 0)]
    assert rest.next_cursor is None


def test_topics_before_the_cursor_are_left_out(core: Any) -> None:
    make_topics(core, a=2, b=2, c=2)
    response = describe(core, ["c", "a", "b"], cursor=("b", 1))
    assert listed(response) == [("b", 1), ("c", 0), ("c", 1)]
    # With every topic, a cursor topic that does not exist is only a bound.
    response = describe(core, cursor=("bb", 1))
    assert listed(response) == [("c", 0), ("c", 1)]


def test_a_cursor_topic_missing_from_the_list_is_an_invalid_request(core: Any) -> None:
    make_topics(core, a=2, b=2)
    response = describe(core, ["a", "b", "a"], cursor=("c", 0))
    assert [(t.name, t.error_code, t.topic_id, t.partitions) for t in response.topics] == [
        ("a", ErrorCode.INVALID_REQUEST, NULL_UUID, []),
        ("b", ErrorCode.INVALID_REQUEST, NULL_UUID, []),
        ("a", ErrorCode.INVALID_REQUEST, NULL_UUID, []),
    ]
    assert response.next_cursor is None


def test_a_cursor_past_the_end_gives_the_topic_without_partitions(core: Any) -> None:
    make_topics(core, a=2, b=1)
    response = describe(core, cursor=("a", 5))
    assert [(t.name, len(t.partitions)) for t in response.topics] == [("a", 0), ("b", 1)]
    assert response.next_cursor is None


def test_a_negative_cursor_partition_follows_kafkas_arithmetic(core: Any) -> None:
    make_topics(core, a=4)
    # Indexes -1..1 are in range of the page; only 0 and 1 exist.
    response = describe(core, limit=3, cursor=("a", -1))
    assert listed(response) == [("a", 0), ("a", 1)]
    assert cursor_of(response) == ("a", 2)
    # Far below 0 the page holds nothing and the cursor stays below 0.
    response = describe(core, limit=3, cursor=("a", -10))
    assert listed(response) == []
    assert cursor_of(response) == ("a", -7)


def test_a_zero_limit_points_at_the_first_topic_and_a_negative_one_at_nothing(
    core: Any,
) -> None:
    make_topics(core, a=2, b=1)
    response = describe(core, limit=0)
    assert response.topics == []
    assert cursor_of(response) == ("a", 0)
    response = describe(core, ["b", "zz"], limit=-1)
    assert response.topics == []
    assert response.next_cursor is None


def test_the_broker_caps_the_requested_limit(core: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    assert handler.MAX_REQUEST_PARTITION_SIZE_LIMIT == 2000  # Kafka's default
    make_topics(core, a=5)
    monkeypatch.setattr(handler, "MAX_REQUEST_PARTITION_SIZE_LIMIT", 3)
    response = describe(core, limit=10)
    assert listed(response) == [("a", 0), ("a", 1), ("a", 2)]
    assert cursor_of(response) == ("a", 3)
    response = describe(core, limit=2)
    assert cursor_of(response) == ("a", 2)


# -- kafka-python ----------------------------------------------------------------------------


def test_kafka_python_pages_through_describe_topic_partitions(running: Any) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=running.bootstrap_servers, request_timeout_ms=10_000)
    try:
        admin.create_topics([NewTopic("dtp-b", 3, 1), NewTopic("dtp-a", 2, 1)])
        whole = admin.describe_topic_partitions(["dtp-b", "dtp-a", "dtp-none"])
        seen = []
        cursor = None
        for _ in range(10):
            page = admin.describe_topic_partitions(
                ["dtp-a", "dtp-b"], response_partition_limit=2, cursor=cursor
            )
            seen.append(
                [
                    (t["name"], [p["partition_index"] for p in t["partitions"]])
                    for t in page["topics"]
                ]
            )
            cursor = page["next_cursor"]
            if cursor is None:
                break
    finally:
        admin.close()
    node = running.broker.node_id
    assert [(t["name"], t["error_code"]) for t in whole["topics"]] == [
        ("dtp-a", 0),
        ("dtp-b", 0),
        ("dtp-none", ErrorCode.UNKNOWN_TOPIC_OR_PARTITION),
    ]
    assert whole["next_cursor"] is None
    a = whole["topics"][0]
    assert a["partitions"][0]["leader_id"] == node
    assert a["partitions"][0]["replica_nodes"] == [node]
    assert a["partitions"][0]["isr_nodes"] == [node]
    assert seen == [
        [("dtp-a", [0, 1])],
        [("dtp-b", [0, 1])],
        [("dtp-b", [2])],
    ]
