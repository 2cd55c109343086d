"""Differential conversations on Kafka's internal topics (issue #84): Kafka 4.4
is the reference; brokerlite, one node, must answer the same
(:mod:`differential`).

* Once a group's and a transactional id's coordinators have been looked up
  (``check`` does so on both brokers first), Metadata (v1, the first with
  ``is_internal``; v4; v12) and DescribeTopicPartitions describe
  ``__consumer_offsets`` and ``__transaction_state``: internal, the broker's
  partition counts (the peers are sized alike: ``kafka_fixtures.INTERNAL_TOPIC_SIZES``),
  led by the one node at epoch 0. A share group's first assignment makes
  ``__share_group_state``.
* A client's Produce to one is INVALID_TOPIC_EXCEPTION, so is DeleteRecords;
  CreateTopics of one is TOPIC_ALREADY_EXISTS; DescribeConfigs shows the
  configs Kafka sets on them (dynamic topic configs); AlterConfigs may change
  them (validated only here: the brokers are shared).
* A KIP-848 member's regex is matched against internal topics too: one that
  matches ``__consumer_offsets`` is assigned its partitions.
* On brokers that never served a group or a transaction (each made for the
  test), none is listed, and a name asked for is UNKNOWN_TOPIC_OR_PARTITION
  with ``is_internal`` true; a group's FindCoordinator makes
  ``__consumer_offsets`` only.

What a single node answers differently (reads of their partitions, which
Kafka serves from its coordinators' records) is in docs/compatibility.md and
``test_internal_topics.py``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from differential import Talk, assert_same
from differential_requests import Kafka, ShareKafka, check, records
from kafka_fixtures import INTERNAL_TOPIC_SIZES

from trafka.codec.messages import k03_metadata as metadata
from trafka.codec.messages import k68_consumer_group_heartbeat as heartbeat
from trafka.codec.messages import k75_describe_topic_partitions as dtp

OFFSETS, TXN, SHARE = "__consumer_offsets", "__transaction_state", "__share_group_state"
ROW = "Internal topics (Metadata, DescribeTopicPartitions, regex groups), made on first use"
MD = metadata.MetadataRequest
DTP = dtp.DescribeTopicPartitionsRequest


def _metadata(talk: Talk, version: int, *names: str) -> Any:
    wanted = [MD.MetadataRequestTopic(name=n) for n in names]
    body = MD(topics=wanted, allow_auto_topic_creation=False) if version >= 4 else MD(topics=wanted)
    return talk.ask(3, version, body, step=f"Metadata v{version}")


def _describe(talk: Talk, *names: str, limit: int = 100) -> Any:
    body = DTP(topics=[DTP.TopicRequest(name=n) for n in names], response_partition_limit=limit)
    return talk.ask(75, 0, body, step="DescribeTopicPartitions")


def _until(talk: Talk, ask: Any, done: Any, *, timeout: float = 120.0) -> Any:
    """Ask (unrecorded) until ``done(answer)``; that answer."""
    talk.recording = False
    deadline = time.monotonic() + timeout
    try:
        while not done(answer := ask()):
            assert time.monotonic() < deadline, f"{talk.address}: still {answer!r}"
            time.sleep(0.1)
        return answer
    finally:
        talk.recording = True


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", ROW)
def test_internal_topics_in_metadata_and_topic_admin(kafka4: Any, peer: Any) -> None:
    """The two coordinators' topics as Metadata and DescribeTopicPartitions
    describe them; writes refused; their configs; CreateTopics of one."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1)
        for version in (1, 4, 12):
            _metadata(talk, version, OFFSETS, TXN, topic)
        _describe(talk, OFFSETS, TXN, topic)
        _describe(talk, TXN, OFFSETS, limit=7)  # (a page ends inside __transaction_state)
        k.produce(OFFSETS, records([b"v"]))
        k.produce(TXN, records([b"v"]), partition=4)
        k.produce(TXN, records([b"v"]), partition=5)  # (no such partition)
        k.delete_records(OFFSETS, 0)
        k.create(OFFSETS, 1)
        k.describe_configs(OFFSETS)
        k.describe_configs(TXN)
        k.alter_configs(OFFSETS, validate_only=True, **{"retention.ms": "1000"})

    check(kafka4, peer, script)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", ROW)
def test_a_share_groups_assignment_makes_the_share_state_topic(kafka4: Any, peer: Any) -> None:
    """Once a share group has been assigned a partition, ``__share_group_state``
    is listed: internal, ``share.coordinator.state.topic.num.partitions``
    partitions, Kafka's configs."""

    def script(talk: Talk) -> None:
        k = ShareKafka(talk)
        topic, group = talk.name("topic"), talk.name("group")
        k.create(topic, 1)
        member, epoch = uuid.uuid4().hex, 0

        def beat_then_look() -> Any:
            # Kafka's coordinator initializes share-partitions (and so makes the
            # topic) after a heartbeat, and tries again on a later one.
            nonlocal epoch
            answer = k.share_heartbeat(group, member, epoch, *([topic] if epoch == 0 else []))
            epoch = answer.member_epoch if answer.error_code == 0 else epoch
            return _metadata(talk, 12, SHARE)

        _until(
            talk, beat_then_look, lambda a: a.topics[0].error_code == 0 and a.topics[0].partitions
        )
        _metadata(talk, 12, SHARE)
        _describe(talk, SHARE)
        k.describe_configs(SHARE)
        talk.recording = False
        k.share_heartbeat(group, member, -1)  # (its answer's epoch is the member's own)
        talk.recording = True

    check(kafka4, peer, script)


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", ROW)
def test_a_members_regex_is_matched_against_internal_topics(kafka4: Any, peer: Any) -> None:
    """KIP-848: the coordinator resolves a member's regex against every topic,
    ``__consumer_offsets`` too (Kafka 4.4's TopicRegexResolver); the member is
    assigned all its partitions and the regular topic's."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, group = talk.name("topic"), talk.name("group")
        k.create(topic, 1)
        names = {t.topic_id: t.name for t in _metadata(talk, 12, OFFSETS, topic).topics}
        member, epoch = uuid.uuid4().hex, 0
        req = heartbeat.ConsumerGroupHeartbeatRequest

        def beat() -> Any:
            nonlocal epoch
            answer = k.ask(
                68,
                req(
                    group_id=group,
                    member_id=member,
                    member_epoch=epoch,
                    rebalance_timeout_ms=30000,
                    subscribed_topic_regex=f"{OFFSETS}|{topic}" if epoch == 0 else None,
                    topic_partitions=[] if epoch == 0 else None,
                ),
                version=1,
            )
            epoch = answer.member_epoch if answer.error_code == 0 else epoch
            return answer

        answer = _until(
            talk,
            beat,
            lambda a: a.assignment is not None and len(a.assignment.topic_partitions) == 2,
        )
        talk.note(
            "assigned",
            sorted(
                [names[tp.topic_id], sorted(tp.partitions)]
                for tp in answer.assignment.topic_partitions
            ),
        )
        epoch = -1
        beat()

    check(kafka4, peer, script)


@pytest.fixture
def fresh_brokerlite(tmp_path: Path) -> Iterator[str]:
    """A brokerlite that never served a group, sized as the Kafka peers."""
    from trafka.brokerlite.server import broker_in_thread

    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path / "brokerlite",
        group_initial_rebalance_delay_ms=0,
        log_segment_bytes=16 << 20,
        **INTERNAL_TOPIC_SIZES,
    ) as running:
        yield running.bootstrap_servers


@pytest.mark.compat("Protocol", ROW)
def test_internal_topics_are_made_on_first_use(make_kafka: Any, fresh_brokerlite: str) -> None:
    """A broker that has served no group: Metadata of every topic lists none of
    them; asked by name they are UNKNOWN_TOPIC_OR_PARTITION, internal (Metadata
    and DescribeTopicPartitions). A group's FindCoordinator then makes
    ``__consumer_offsets`` alone (Kafka answers COORDINATOR_NOT_AVAILABLE while it
    does, brokerlite at once: that answer is not compared)."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1)
        every = talk.ask(3, 12, MD(topics=None, allow_auto_topic_creation=False), step="all")
        talk.note("listed", sorted(t.name for t in every.topics))
        _metadata(talk, 12, OFFSETS, TXN, SHARE)
        _describe(talk, OFFSETS, TXN, SHARE)
        group = talk.name("group")
        _until(talk, lambda: k.coordinator(group), lambda a: a.error_code == 0)
        every = talk.ask(3, 12, MD(topics=None, allow_auto_topic_creation=False), step="all")
        talk.note("listed", sorted(t.name for t in every.topics))
        _metadata(talk, 12, OFFSETS, TXN)

    kafka = make_kafka()
    assert_same(kafka.bootstrap_servers, fresh_brokerlite, script)
