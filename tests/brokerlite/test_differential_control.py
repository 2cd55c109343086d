"""Differential conversations on groups, offsets, transactions, configs and bad
requests (issue #61): the same requests to Kafka 3.9 (the reference) and to each
peer, the answers compared field by field (:mod:`differential`).

The behaviour each conversation walks through is Kafka's documented one (the
protocol guide's error table, KIP-98 for transactions, KIP-394 for the member id
a JoinGroup must first ask for, KIP-511/KIP-35 for ApiVersions); the reference
broker's answers are the expected values.
"""

from __future__ import annotations

import struct
import time
from typing import Any

import pytest
from differential import Talk
from differential_requests import TS, Kafka, check, records


@pytest.mark.compat("Protocol", "OffsetCommit/OffsetFetch")
def test_offsets_without_a_member(kafka3: Any, peer: Any) -> None:
    """OffsetFetch of a group that never existed: offset -1 and no error;
    OffsetCommit with no generation (-1, no member: a "simple" group) is
    stored and fetched back with its metadata; a commit naming a generation or
    member the group never had is refused (ILLEGAL_GENERATION or
    UNKNOWN_MEMBER_ID); an unknown partition UNKNOWN_TOPIC_OR_PARTITION."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, group = talk.name("topic"), talk.name("group")
        k.create(topic, 1)
        k.offsets(group, topic)
        k.commit(group, topic, 5)
        k.offsets(group, topic)
        k.commit(group, topic, 6, generation=3, member="nobody")
        k.commit(group, topic, 7, generation=-1, member="nobody")
        k.commit(group, topic, 8, partition=4)
        k.commit(group, talk.name("missing"), 8)
        k.offsets(group, topic)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "JoinGroup/SyncGroup/Heartbeat/LeaveGroup")
def test_group_membership_sequence(kafka3: Any, peer: Any) -> None:
    """Classic group protocol: a JoinGroup without member id is
    MEMBER_ID_REQUIRED (79) with the id to use (KIP-394); joining with it makes
    the member leader of generation 1; SyncGroup hands out the assignment;
    Heartbeat answers NONE, ILLEGAL_GENERATION (22) for another generation,
    UNKNOWN_MEMBER_ID (25) for another member; a second member's join starts a
    rebalance, so the first one's heartbeat is REBALANCE_IN_PROGRESS (27) until
    it joins again; commits at a stale generation are ILLEGAL_GENERATION; after
    LeaveGroup the member is unknown."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, group = talk.name("topic"), talk.name("group")
        k.create(topic, 1)
        k.heartbeat(group, 1, "nobody")
        member = k.join(group).member_id
        joined = k.join(group, member)
        gen = joined.generation_id
        k.sync(group, gen, member)
        k.heartbeat(group, gen, member)
        k.heartbeat(group, gen + 5, member)
        k.heartbeat(group, gen, member + "-other")
        k.commit(group, topic, 3, generation=gen, member=member)
        k.commit(group, topic, 4, generation=gen + 1, member=member)
        k.offsets(group, topic)
        other = k.join(group, conn="b").member_id
        talk.send(11, 7, k.join_body(group, other), conn="b")
        # The join arrives on another connection: wait (unrecorded) until the
        # rebalance it starts shows, then record that answer.
        talk.recording = False
        while not k.heartbeat(group, gen, member).error_code:
            time.sleep(0.05)
        talk.recording = True
        k.heartbeat(group, gen, member)
        k.join(group, member)
        talk.receive(conn="b")
        k.heartbeat(group, gen, member)
        k.leave(group, other)
        k.leave(group, member)
        k.heartbeat(group, gen + 1, member)
        k.leave(group, member)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "FindCoordinator")
def test_find_coordinator(kafka3: Any, peer: Any) -> None:
    """FindCoordinator for a group and for a transactional id answers a node;
    an unknown key type is INVALID_REQUEST (42)."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        k.coordinator(talk.name("group"), 0)
        k.coordinator(talk.name("txn"), 1)
        k.coordinator(talk.name("other"), 7)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "InitProducerId/AddPartitionsToTxn/EndTxn")
def test_transactions_fencing_and_states(kafka3: Any, peer: Any) -> None:
    """Transactions (KIP-98): EndTxn with no transaction under way is
    INVALID_TXN_STATE (48); AddPartitionsToTxn of an unknown topic
    UNKNOWN_TOPIC_OR_PARTITION with the other partitions
    OPERATION_NOT_ATTEMPTED; a second InitProducerId bumps the epoch, fencing the
    first: its calls are PRODUCER_FENCED (90, KIP-588) / INVALID_PRODUCER_EPOCH
    (47); a transactional Produce to a partition not added to the transaction is
    refused (KIP-890 part 1: ``transaction.partition.verification.enable`` is
    true by default in Kafka 3.9); a committed transaction is visible."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic, tid = talk.name("topic"), talk.name("txn")
        k.create(topic, 1)
        init = k.init_pid(tid)
        pid, epoch = init.producer_id, init.producer_epoch
        k.end_txn(tid, pid, epoch)
        k.add_partitions(tid, pid, epoch, talk.name("missing"))
        k.produce(topic, records([b"x"], pid=pid, epoch=epoch, seq=0, txn=True), tid=tid)
        k.add_partitions(tid, pid, epoch, topic)
        k.add_partitions(tid, pid, epoch, topic)
        k.produce(topic, records([b"a"], pid=pid, epoch=epoch, seq=0, txn=True), tid=tid)
        k.end_txn(tid, pid, epoch)
        k.settle(topic)
        k.completed(tid)
        k.list_offsets(topic, -1, isolation=1)
        bumped = k.init_pid(tid)
        k.add_partitions(tid, pid, epoch, topic)
        k.end_txn(tid, pid, epoch, commit=False)
        k.produce(topic, records([b"b"], pid=pid, epoch=epoch, seq=1, txn=True), tid=tid)
        k.add_partitions(tid, bumped.producer_id, bumped.producer_epoch, topic)
        k.end_txn(tid, bumped.producer_id, bumped.producer_epoch, commit=False)
        k.settle(topic)
        k.list_offsets(topic, -1, isolation=1)

    check(kafka3, peer, script)


@pytest.mark.compat("Protocol", "DescribeConfigs/AlterConfigs/IncrementalAlterConfigs")
def test_topic_configs(kafka3: Any, peer: Any) -> None:
    """Topic configs: DescribeConfigs of named keys answers them with their
    source; AlterConfigs and IncrementalAlterConfigs refuse an invalid value or
    an unknown name with INVALID_CONFIG (40) (or INVALID_REQUEST) and an unknown
    topic with UNKNOWN_TOPIC_OR_PARTITION; a valid change shows as a
    DYNAMIC_TOPIC_CONFIG; DELETE returns it to the default."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        topic = talk.name("topic")
        k.create(topic, 1, **{"retention.ms": "100000"})
        keys = ("retention.ms", "cleanup.policy", "max.message.bytes")
        k.describe_configs(topic, *keys)
        k.alter_configs(topic, **{"retention.ms": "soon"})
        k.alter_configs(topic, **{"no.such.config": "1"})
        k.alter_configs(topic, validate_only=True, **{"retention.ms": "5000"})
        k.describe_configs(topic, *keys)
        k.incremental(topic, 0, "cleanup.policy", "bogus")
        k.incremental(topic, 0, "max.message.bytes", "-7")
        k.incremental(topic, 0, "max.message.bytes", "5000")
        k.describe_configs(topic, *keys)
        k.incremental(topic, 1, "max.message.bytes", None)
        k.describe_configs(topic, *keys)
        k.incremental(talk.name("missing"), 0, "retention.ms", "1")
        k.describe_configs(talk.name("missing"), "retention.ms")

    check(kafka3, peer, script)


def _raw_request(key: int, version: int, correlation_id: int) -> bytes:
    """A request frame with header v2 (flexible: no tagged fields) and an empty
    body at any version."""
    client = b"differential"
    body = struct.pack(">hhih", key, version, correlation_id, len(client)) + client + b"\0"
    return struct.pack(">i", len(body)) + body


@pytest.mark.compat("Protocol", "Unsupported versions")
def test_unsupported_versions(kafka3: Any, peer: Any) -> None:
    """A request at a version the broker does not serve: ApiVersions is
    answered at version 0 with UNSUPPORTED_VERSION (35) and the versions it
    serves (KIP-511), any other API closes the connection."""

    def script(talk: Talk) -> None:
        k = Kafka(talk)
        answer = talk.ask(18, 0, None, raw=_raw_request(18, 99, 1))
        talk.transcript[-1] = ("18v99", {"error_code": answer.error_code})
        talk.ask(3, 0, None, raw=_raw_request(3, 99, 2))
        k.metadata(talk.name("topic"))
        k.produce(talk.name("topic"), records([b"x"], ts=TS))

    check(kafka3, peer, script)
