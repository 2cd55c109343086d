"""MetadataCache: refresh rules, leader epochs, queries (no sockets)."""

from __future__ import annotations

from trafka.codec import ErrorCode
from trafka.codec.messages import k03_metadata as md
from trafka.sdk.metadata import MetadataCache

R = md.MetadataResponse


def _resp(parts: dict[str, list[tuple[int, int]]], *, topic_error: int = 0) -> R:
    return R(
        brokers=[
            R.MetadataResponseBroker(node_id=n, host="127.0.0.1", port=9000 + n) for n in (1, 2)
        ],
        cluster_id="c",
        controller_id=1,
        topics=[
            R.MetadataResponseTopic(
                name=name,
                error_code=topic_error,
                partitions=[
                    R.MetadataResponsePartition(
                        partition_index=i, leader_id=leader, leader_epoch=epoch
                    )
                    for i, (leader, epoch) in enumerate(ps)
                ],
            )
            for name, ps in parts.items()
        ],
    )


def test_refresh_due_when_new_topic_or_max_age() -> None:
    m = MetadataCache(max_age=10.0, backoff=1.0)
    assert m.needs_update(0.0)
    m.add_topics(["t"])
    req = m.build_request(12)
    assert [t.name for t in req.topics] == ["t"]
    m.attempt_started(0.0)
    m.update(_resp({"t": [(1, 0), (2, 0)]}), now=0.0)
    assert not m.needs_update(5.0)
    assert m.needs_update(10.0)
    assert m.next_update_at(5.0) == 10.0
    assert m.add_topics(["t"]) is False
    assert m.add_topics(["u"]) is True
    assert m.needs_update(1.0)
    assert m.next_update_at(0.5) == 1.0  # backoff after the last attempt


def test_queries() -> None:
    m = MetadataCache()
    m.update(_resp({"t": [(1, 3), (-1, 3)]}), now=0.0)
    assert m.partition_count("t") == 2
    assert m.leader_for("t", 0) == 1
    assert m.leader_for("t", 1) is None
    assert m.leader_for("t", 5) is None
    assert m.topics["t"].available_partitions == (0,)
    assert m.broker(2).port == 9002
    assert m.needs_update(0.0)  # a partition without a leader asks for another refresh


def test_stale_leader_epoch_ignored() -> None:
    m = MetadataCache()
    m.update(_resp({"t": [(1, 5)]}), now=0.0)
    m.update(_resp({"t": [(2, 4)]}), now=1.0)
    assert m.leader_for("t", 0) == 1 and m.leader_epoch("t", 0) == 5
    assert m.needs_update(1.0)
    m.update(_resp({"t": [(2, 6)]}), now=2.0)
    assert m.leader_for("t", 0) == 2


def test_negative_partition_indexes_are_not_partitions() -> None:
    m = MetadataCache()
    m.update(_resp({"t": [(1, 0), (2, 0)]}), now=0.0)
    bad = _resp({"t": [(1, 0)]})
    bad.topics[0].partitions.extend(
        R.MetadataResponsePartition(partition_index=i, leader_id=2, leader_epoch=0)
        for i in (-(2**31), -1)
    )
    m.update(bad, now=1.0)  # raised IndexError before
    assert m.partition_count("t") == 1 and m.leader_for("t", 0) == 1
    assert m.needs_update(1.0)


def test_error_codes_trigger_refresh() -> None:
    m = MetadataCache()
    m.update(_resp({"t": [(1, 0)]}), now=0.0)
    assert not m.needs_update(0.0)
    assert m.on_partition_error(ErrorCode.NOT_LEADER_OR_FOLLOWER, "t", 0)
    assert m.needs_update(0.0)
    m.update(_resp({"t": [(1, 0)]}), now=0.0)
    assert not m.on_partition_error(ErrorCode.MESSAGE_TOO_LARGE)
    assert not m.needs_update(0.0)


def test_unknown_topic_recorded() -> None:
    m = MetadataCache()
    m.add_topics(["nope"])
    m.update(_resp({"nope": []}, topic_error=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), now=0.0)
    assert m.topic_errors["nope"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert m.partition_count("nope") is None
    assert m.needs_update(0.0)


def test_leader_hint() -> None:
    m = MetadataCache()
    m.update(_resp({"t": [(1, 1)]}), now=0.0)
    v = m.version
    assert m.on_leader_hint("t", 0, 2, 2) is True
    assert m.leader_for("t", 0) == 2 and m.version == v + 1
    assert not m.update_requested
    assert m.on_leader_hint("t", 0, 1, 1) is False  # older epoch: ignored, refresh
    assert m.leader_for("t", 0) == 2 and m.update_requested


def test_want_all_drops_deleted_topics() -> None:
    m = MetadataCache()
    m.want_all = True
    assert m.build_request(12).topics is None
    m.update(_resp({"a": [(1, 0)], "b": [(1, 0)]}), now=0.0)
    m.update(_resp({"a": [(1, 0)]}), now=1.0)
    assert set(m.topics) == {"a"}


def test_topic_added_while_request_in_flight_stays_due() -> None:
    m = MetadataCache(max_age=100.0, backoff=0.1)
    m.add_topics(["a"])
    m.attempt_started(0.0)  # the request for ["a"] goes out ...
    m.add_topics(["b"])  # ... and "b" is wanted before its response arrives
    m.update(_resp({"a": [(1, 0)]}), 0.05)
    assert m.needs_update(0.05)
    assert m.next_update_at(0.05) == 0.1
    m.attempt_started(0.1)
    m.update(_resp({"a": [(1, 0)], "b": [(1, 0)]}), 0.15)
    assert not m.needs_update(0.15)


def test_wanting_every_topic_makes_a_refresh_due() -> None:
    """Issue #45 item 12: a pattern subscription made after a response was applied
    must not wait for metadata.max.age.ms to see the topics it matches."""
    m = MetadataCache(max_age=300.0, backoff=0.1)
    m.attempt_started(0.0)
    m.build_request(12)  # a client's first request, before any subscription
    m.update(_resp({}), 0.05)
    assert not m.needs_update(1.0) and m.all_topics_version == 0
    m.track_all_topics(True)
    assert m.needs_update(1.0) and m.next_update_at(1.0) == 1.0
    m.attempt_started(1.0)
    assert m.build_request(12).topics is None
    m.update(_resp({"p-a": [(1, 0)], "p-b": [(1, 0)]}), 1.05)
    assert not m.needs_update(1.05)
    assert m.all_topics_version == m.version and set(m.topics) == {"p-a", "p-b"}


def test_every_topic_wanted_while_a_narrower_request_is_in_flight() -> None:
    """A response to a request built before every topic was wanted lists only some
    topics: it drops none of the others, does not count as listing them all, and
    leaves a refresh due."""
    m = MetadataCache(max_age=300.0, backoff=0.1)
    m.track_all_topics(True)
    m.attempt_started(0.0)
    m.build_request(12)
    m.update(_resp({"a": [(1, 0)], "b": [(1, 0)]}), 0.05)
    listed = m.all_topics_version
    m.track_all_topics(False)
    m.add_topics(["a"])
    m.attempt_started(1.0)
    m.build_request(12)  # ... for ["a"] only, and then a pattern again
    m.track_all_topics(True)
    m.update(_resp({"a": [(1, 0)]}), 1.05)
    assert set(m.topics) == {"a", "b"}
    assert m.all_topics_version == listed and m.needs_update(1.05)
    m.attempt_started(1.1)
    m.build_request(12)
    m.update(_resp({"a": [(1, 0)]}), 1.15)  # every topic: b is gone
    assert set(m.topics) == {"a"} and m.all_topics_version == m.version
    assert not m.needs_update(1.15)


def test_auto_create_follows_the_setting() -> None:
    assert MetadataCache().build_request(12).allow_auto_topic_creation is True
    m = MetadataCache(auto_create=False)
    m.add_topics(["t"])
    assert m.build_request(12).allow_auto_topic_creation is False


def test_resize_listeners_hear_partition_count_changes_only() -> None:
    """A topic that appears, grows or goes is announced once; a leader change is not."""
    m = MetadataCache()
    heard: list[str] = []
    m.resize_listeners.append(heard.append)
    m.update(_resp({"t": [(1, 0), (2, 0)], "u": [(1, 0)]}), now=0.0)
    assert sorted(heard) == ["t", "u"]
    heard.clear()
    m.update(_resp({"t": [(2, 1), (1, 1)], "u": [(1, 0)]}), now=1.0)  # leaders moved
    assert heard == []
    m.update(_resp({"t": [(1, 1), (2, 1), (1, 0)], "u": [(1, 0)]}), now=2.0)  # t grew
    assert heard == ["t"]
    heard.clear()
    m.want_all = True
    m.update(_resp({"t": [(1, 1), (2, 1), (1, 0)]}), now=3.0)  # u was deleted
    assert heard == ["u"]
    heard.clear()
    m.forget_topic("t")
    m.forget_topic("t")
    assert heard == ["t"]
