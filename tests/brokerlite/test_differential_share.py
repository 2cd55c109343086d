"""Differential conversation on share groups (KIP-932; issue #61): Kafka 4.x is
the reference here (Kafka 3.9 has no share groups); brokerlite, and Kafka 4.x
run again, must answer the same (:mod:`differential`).
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from differential import Talk, plain
from differential_requests import KEEP, ShareKafka, check, records, until

ACCEPT, RELEASE = 1, 2


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "ShareFetch/ShareAcknowledge")
def test_share_acknowledgements(kafka4: Any, peer: Any) -> None:
    """A share group's member (its id made by the client, KIP-1082) is assigned
    the topic's partition; ShareFetch acquires the records (from the earliest,
    ``share.auto.offset.reset=earliest``); acknowledging offsets it does not hold
    (never handed out, past the in-flight window) is INVALID_REQUEST for that
    partition; accepting a held record succeeds, and accepting it again (now
    below the start offset) is ignored; a wrong share session epoch is
    INVALID_SHARE_SESSION_EPOCH. The same rules hold for acknowledgements a
    ShareFetch carries (AcknowledgeErrorCode), where a range from below the
    start offset accepts its held offsets and skips the others. Two ranges that
    touch (the second starting at the first's last offset) pass the request's
    check (Kafka's KafkaApis.validateAcknowledgementBatches refuses only a range
    starting before the previous one's last offset) and are then
    INVALID_RECORD_STATE, nothing applied: the shared offset, acknowledged by the
    first range, is no longer held when the second comes. Every partition
    answer names its leader (KIP-932; Kafka's SharePartition.acknowledge)."""

    def script(talk: Talk) -> None:
        k = ShareKafka(talk)
        topic, group = talk.name("topic"), talk.name("group")
        k.create(topic, 1, **KEEP)
        k.produce(topic, records([b"a", b"b", b"c"]))
        k.group_config(group, "share.auto.offset.reset", "earliest")
        k.group_configs_landed(group, "share.auto.offset.reset")
        topic_id = k.metadata(topic).topics[0].topic_id
        member = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        epoch = [0]

        def heartbeat() -> Any:
            answer = k.share_heartbeat(group, member, epoch[0], topic)
            epoch[0] = max(answer.member_epoch, epoch[0])
            return answer

        assigned = until(talk, heartbeat, lambda a: a.assignment and a.assignment.topic_partitions)
        talk.note(
            "assigned",
            {"error_code": assigned.error_code, "assignment": plain(assigned.assignment)},
        )
        session = [0]

        def fetch() -> Any:
            answer = k.share_fetch(group, member, session[0], topic_id)
            if answer.error_code == 0:
                session[0] += 1
            return answer

        fetched = until(talk, fetch, lambda a: a.responses and a.responses[0].partitions[0].records)
        talk.note("fetched", plain(fetched.responses[0].partitions[0]))
        k.share_ack(group, member, session[0], topic_id, 10, 12, ACCEPT)
        k.share_ack(group, member, session[0] + 1, topic_id, 0, 0, ACCEPT)
        k.share_ack(group, member, session[0] + 2, topic_id, 0, 0, ACCEPT)
        k.share_ack(group, member, session[0] + 3, topic_id, 1, 1, ACCEPT, (1, 2, ACCEPT))
        k.share_fetch(group, member, session[0] + 4, topic_id, [(10, 12, ACCEPT)])
        k.share_fetch(group, member, session[0] + 5, topic_id, [(0, 0, ACCEPT)])
        k.share_fetch(group, member, session[0] + 6, topic_id, [(1, 1, ACCEPT), (1, 2, ACCEPT)])
        k.share_fetch(group, member, session[0] + 7, topic_id, [(0, 1, ACCEPT)])
        k.share_ack(group, member, session[0] + 10, topic_id, 2, 2, RELEASE)

    check(kafka4, peer, script)


RENEW = 4
BATCH_OPTIMIZED, RECORD_LIMIT = 0, 1


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "ShareFetch/ShareAcknowledge v2")
def test_share_fetch_and_acknowledge_v2(kafka4: Any, peer: Any) -> None:
    """ShareFetch and ShareAcknowledge v2 (Kafka 4.2+). KIP-1206: with
    ShareAcquireMode RECORD_LIMIT (1) MaxRecords is a hard limit, so a fetch
    for 2 records of a 3-record batch acquires 2 of them; BATCH_OPTIMIZED (0)
    takes whole batches. KIP-1222: an acknowledgement of type RENEW (4) keeps
    the record acquired and restarts its lock; it travels only in a request
    with IsRenewAck set, and a ShareFetch with IsRenewAck must ask for no data
    (MaxWaitMs, MinBytes, MaxBytes and MaxRecords 0: Kafka's KafkaApis
    refuses it otherwise) and fetches nothing. A ShareAcknowledge v2 answer
    carries the acquisition lock timeout. Renewed records are then accepted;
    the rest of the batch is acquired by the next fetch. A group whose
    ``share.renew.acknowledge.enable`` is false (Kafka 4.4's group config,
    true by default) answers renewals INVALID_RECORD_STATE. (An unknown
    ShareAcquireMode, where brokerlite differs, is test_share_fetch's.)"""

    def script(talk: Talk) -> None:
        k = ShareKafka(talk)
        topic, group = talk.name("topic"), talk.name("group")
        k.create(topic, 1, **KEEP)
        k.produce(topic, records([b"a", b"b", b"c"]))
        k.produce(topic, records([b"d", b"e"]))
        k.group_config(group, "share.auto.offset.reset", "earliest")
        k.group_configs_landed(group, "share.auto.offset.reset")
        topic_id = k.metadata(topic).topics[0].topic_id
        member = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        epoch = [0]

        def heartbeat() -> Any:
            answer = k.share_heartbeat(group, member, epoch[0], topic)
            epoch[0] = max(answer.member_epoch, epoch[0])
            return answer

        until(talk, heartbeat, lambda a: a.assignment and a.assignment.topic_partitions)
        session = [0]

        def fetch(acks: Any = (), **options: Any) -> Any:
            answer = k.share_fetch(
                group, member, session[0], topic_id, list(acks), version=2, **options
            )
            if answer.error_code == 0:
                session[0] += 1
            return answer

        def ack(*batches: tuple[int, int, int], **options: Any) -> Any:
            answer = k.share_ack(
                group, member, session[0], topic_id, *batches[0], *batches[1:], **options
            )
            if answer.error_code == 0:
                session[0] += 1
            return answer

        talk.recording = False
        fetched = until(
            talk,
            lambda: fetch(max_records=2, acquire_mode=RECORD_LIMIT),
            lambda a: a.responses and a.responses[0].partitions[0].acquired_records,
        )
        talk.recording = True
        talk.note("record limit", plain(fetched.responses[0].partitions[0].acquired_records))
        zero = (0, 0, 0)
        # IsRenewAck with data asked for: refused whole.
        fetch([(0, 0, RENEW)], renew=True, max_records=0, wait=(0, 0, 1 << 20))
        fetch([(0, 0, RENEW)], renew=True, max_records=5, wait=zero)
        # RENEW without IsRenewAck.
        fetch([(0, 0, RENEW)], max_records=0, wait=zero)
        ack((0, 0, RENEW), version=2)
        ack((0, 0, RENEW), version=1)
        # Renewing: the records stay held.
        fetch([(0, 0, RENEW)], renew=True, max_records=0, wait=zero)
        ack((1, 1, RENEW), version=2, renew=True)
        ack((0, 1, ACCEPT), version=2)
        rest = fetch(max_records=1, acquire_mode=BATCH_OPTIMIZED)
        talk.note("batch optimized", plain(rest.responses))
        # A group whose share.renew.acknowledge.enable is false refuses renewals.
        k.group_config(group, "share.renew.acknowledge.enable", "false")
        k.group_configs_landed(group, "share.renew.acknowledge.enable")
        fetch([(2, 2, RENEW)], renew=True, max_records=0, wait=zero)
        ack((2, 2, RENEW), version=2, renew=True)
        ack((2, 2, ACCEPT), version=2)

    check(kafka4, peer, script)
