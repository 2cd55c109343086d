"""Differential conversation on share groups (KIP-932; issue #61): Kafka 4.x is
the reference here (Kafka 3.9 has no share groups); brokerlite, and Kafka 4.x
run again, must answer the same (:mod:`differential`).
"""

from __future__ import annotations

import base64
import time
import uuid
from typing import Any

import pytest
from differential import Talk, plain
from differential_requests import ShareKafka, check, records

ACCEPT, RELEASE = 1, 2


def _until(talk: Talk, ask: Any, done: Any, *, timeout: float = 120.0) -> Any:
    """Ask (unrecorded) until ``done(answer)``; that answer."""
    talk.recording = False
    deadline = time.monotonic() + timeout
    try:
        while True:
            answer = ask()
            if done(answer):
                return answer
            assert time.monotonic() < deadline, f"{talk.address}: still {answer!r}"
            time.sleep(0.1)
    finally:
        talk.recording = True


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
        k.create(topic, 1)
        k.produce(topic, records([b"a", b"b", b"c"]))
        k.group_config(group, "share.auto.offset.reset", "earliest")
        topic_id = k.metadata(topic).topics[0].topic_id
        member = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        epoch = [0]

        def heartbeat() -> Any:
            answer = k.share_heartbeat(group, member, epoch[0], topic)
            epoch[0] = max(answer.member_epoch, epoch[0])
            return answer

        assigned = _until(talk, heartbeat, lambda a: a.assignment and a.assignment.topic_partitions)
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

        fetched = _until(
            talk, fetch, lambda a: a.responses and a.responses[0].partitions[0].records
        )
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
