"""Differential conversation on share groups' dead-letter queues (KIP-1191,
Kafka 4.4's ``share.version`` 2): Kafka 4.4 is the reference; brokerlite must
answer the same (:mod:`differential`), and write the same dead letters.

KIP-1191 (https://cwiki.apache.org/confluence/display/KAFKA/KIP-1191): a
share group whose ``errors.deadletterqueue.topic.name`` is set has every
record its consumer rejects, or that reaches the delivery-count limit, written
to that topic, with context headers (``__dlq.errors.*``) and, with
``errors.deadletterqueue.copy.record.enable``, the record's key and value. The
topic must start with the broker's ``errors.deadletterqueue.topic.name.prefix``
(``dlq.``), carry the topic config ``errors.deadletterqueue.group.enable=true``
and exist (``errors.deadletterqueue.auto.create.topics.enable`` is false by
default); otherwise the records are archived without a dead letter.
"""

from __future__ import annotations

import base64
import uuid
from typing import Any

import pytest
from differential import Talk, plain
from differential_requests import KEEP, ShareKafka, check, until

from trafka.codec.messages import k32_describe_configs as describe_configs
from trafka.codec.messages import k90_describe_share_group_offsets as share_offsets
from trafka.codec.records import decode_batch, encode_batch, iter_batches

GAP, ACCEPT, RELEASE, REJECT = 0, 1, 2, 3
GROUP = 32
TS = 1_700_000_000_000
ENABLE = {"errors.deadletterqueue.group.enable": "true"}


class Member:
    """One share-group member with its session on one partition, its answers raw."""

    def __init__(self, k: ShareKafka, group: str, topic: str) -> None:
        self.k, self.group, self.topic = k, group, topic
        self.member = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self.epoch = 0
        self.session = 0
        self.topic_id = k.metadata(topic).topics[0].topic_id
        self.acked: Any = None  # the last acknowledgement's answer (for a failure's message)

    def join(self) -> None:
        """Heartbeat (unrecorded) until the partition is assigned (a node's
        group coordinator may still be loading: FindCoordinator first)."""
        until(self.k.talk, lambda: self.k.coordinator(self.group), lambda a: a.error_code == 0)

        def beat() -> Any:
            answer = self.k.share_heartbeat(self.group, self.member, self.epoch, self.topic)
            self.epoch = max(answer.member_epoch, self.epoch)
            return answer

        until(self.k.talk, beat, lambda a: a.assignment and a.assignment.topic_partitions)

    def fetch(self, step: str) -> Any:
        """Fetch (unrecorded) until records are acquired; the acquired ranges.
        A fetch that never acquires fails naming ``step``, the group, the last
        acknowledgement's answer and the share-partition's start offset."""

        def ask() -> Any:
            answer = self.k.share_fetch(self.group, self.member, self.session, self.topic_id)
            if answer.error_code == 0:
                self.session += 1
            return answer

        fetched = until(
            self.k.talk,
            ask,
            lambda a: a.responses and a.responses[0].partitions[0].acquired_records,
            what=lambda: (
                f"{step} (group {self.group}, session epoch {self.session}): last "
                f"acknowledged {self.acked!r}; share-partition {_start(self.k, self)!r}"
            ),
        )
        return plain(fetched.responses[0].partitions[0].acquired_records)

    def ack(self, *batches: tuple[int, int, int]) -> Any:
        answer = self.k.share_ack(
            self.group, self.member, self.session, self.topic_id, *batches[0], *batches[1:]
        )
        if answer.error_code == 0:
            self.session += 1
        self.acked = answer
        return answer


def _start(k: ShareKafka, m: Member) -> Any:
    """The share-partition's start offset and lag as the group coordinator
    describes them (DescribeShareGroupOffsets), or why not (a failure's message)."""
    req = share_offsets.DescribeShareGroupOffsetsRequest
    topic = req.DescribeShareGroupOffsetsRequestTopic(topic_name=m.topic, partitions=[0])
    group = req.DescribeShareGroupOffsetsRequestGroup(group_id=m.group, topics=[topic])
    try:
        answer = k.ask(90, req(groups=[group]), version=1)
    except Exception as exc:  # (a message's detail: never the failure itself)
        return f"not described: {exc!r}"
    return answer and answer.groups


def _letters(k: ShareKafka, topic: str, partition: int) -> list[Any]:
    """A DLQ partition's records, unrecorded: (key, value, headers), the header
    values as text (so the names in them are normalised), in the order of the
    source offsets they name. Left out: the broker's timestamps, and where each
    landed (Kafka writes the dead letters of different acknowledgements from a
    queue of its own, whose order is not the test's business), and so batch
    boundaries (see brokerlite.shares.dead_letters)."""
    was, k.talk.recording = k.talk.recording, False
    try:
        answer = k.fetch(topic, 0, partition=partition)
    finally:
        k.talk.recording = was
    blob = answer.responses[0].partitions[0].records or b""
    out = []
    for _, view in iter_batches(blob):
        for _offset, _ts, key, value, headers in decode_batch(view).records:
            out.append([key, value, [[h, (v or b"").decode()] for h, v in headers]])
    return sorted(out, key=lambda letter: int(dict(letter[2]).get("__dlq.errors.offset", -1)))


def _set(*names: str) -> Any:
    """Whether a :func:`_dlq_configs` answer shows each of ``names`` set on the group."""
    return lambda configs: all(any(c[0] == n and c[2] == 8 for c in configs) for n in names)


def _dlq_configs(k: ShareKafka, group: str) -> Any:
    req = describe_configs.DescribeConfigsRequest
    resource = req.DescribeConfigsResource(
        resource_type=GROUP, resource_name=group, configuration_keys=None
    )
    talk = k.talk
    talk.recording = False
    try:
        answer = k.ask(32, req(resources=[resource], include_synonyms=True))
    finally:
        talk.recording = True
    # (lists, not tuples: the normaliser replaces the names in lists)
    return [
        [
            c.name,
            c.value,
            c.config_source,
            c.config_type,
            [[s.name, s.value, s.source] for s in c.synonyms],
        ]
        for c in answer.results[0].configs
        if c.name.startswith("errors.deadletterqueue.")
    ]


@pytest.mark.parametrize("peer", ["brokerlite"], indirect=True)
@pytest.mark.compat("Protocol", "share groups' dead-letter queues (KIP-1191)")
def test_dead_letters(kafka4: Any, peer: Any) -> None:
    """Group configs (KIP-1191): a DLQ topic name starting with ``__`` and a
    copy flag that is no boolean are INVALID_CONFIG; a name is stored trimmed
    (blanks: no DLQ) and described with its default. Dead letters: a record
    rejected (delivery count 1) and records released at the delivery-count
    limit (2) are written to the DLQ topic's partition ``0 % 3``, one record
    per offset with the six ``__dlq.errors.*`` headers (topic, partition,
    offset, group, delivery count, message) and, with copy enabled, the key
    and value (not the record's headers); an accepted record is not, nor a
    GAP-acknowledged one (archived without a dead letter). Groups whose
    DLQ topic does not exist (not auto-created), lacks
    ``errors.deadletterqueue.group.enable``, or misses the ``dlq.`` prefix get
    their records archived and no dead letter. (Kafka 4.4's persisted start
    offset lags its dead letters, which brokerlite's does not: not compared.)"""

    def script(talk: Talk) -> None:
        k = ShareKafka(talk)
        topic, group = talk.name("topic"), talk.name("group")
        dlq = "dlq." + talk.name("dlq")
        # (KEEP: the records are stamped TS on; Kafka's first retention check
        # deleted them under a run on a node just started, whose fetches then
        # acquired nothing, ever)
        k.create(topic, 1, **KEEP)
        k.create(dlq, 3, **ENABLE)
        batch = encode_batch(
            [
                (TS, b"k0", b"v0", (("h", b"x"),)),
                (TS + 1, None, b"v1", ()),
                (TS + 2, b"k2", None, ()),
            ]
        )
        k.produce(topic, batch)
        k.produce(topic, encode_batch([(TS + 3, b"k3", b"v3", ()), (TS + 4, b"k4", b"v4", ())]))
        k.produce(topic, encode_batch([(TS + 5, b"k5", b"v5", ())]))
        name = "errors.deadletterqueue.topic.name"
        copy = "errors.deadletterqueue.copy.record.enable"
        k.group_config(group, name, "__consumer_offsets")
        k.group_config(group, copy, "maybe")
        # Kafka's broker answers DescribeConfigs from its metadata image, which
        # takes a group config change a moment after the controller committed
        # it: asked until the overrides set show (source 8, GROUP_CONFIG).
        k.group_config(group, name, "   ")
        talk.note("blank name", until(talk, lambda: _dlq_configs(k, group), _set(name)))
        k.group_config(group, name, f"  {dlq} ")
        k.group_config(group, copy, "true")
        talk.note("configs", until(talk, lambda: _dlq_configs(k, group), _set(name, copy)))
        # No dead letter (first: Kafka writes its dead letters from a queue, so
        # once the last group's are there, these were tried): a missing topic,
        # one without the enable config, one without the prefix; nor for a GAP.
        cases = {
            "missing": "dlq." + talk.name("missing"),
            "plain": "dlq." + talk.name("plain"),
            "noprefix": talk.name("noprefix"),
        }
        k.create(cases["plain"], 1)
        k.create(cases["noprefix"], 1, **ENABLE)
        for label, target in cases.items():
            g = talk.name(f"group-{label}")
            k.group_config(g, name, target)
            k.group_config(g, "share.auto.offset.reset", "earliest")
            # (Kafka takes a group's configs a moment after it answered: see
            # ShareKafka.group_configs_landed)
            k.group_configs_landed(g, name, "share.auto.offset.reset")
            m = Member(k, g, topic)
            m.join()
            m.fetch(f"fetch of group-{label}")
            m.ack((0, 0, REJECT), (1, 1, GAP), (2, 5, ACCEPT))

        k.group_config(group, "share.auto.offset.reset", "earliest")
        k.group_config(group, "share.delivery.count.limit", "2")
        k.group_configs_landed(group, "share.auto.offset.reset", "share.delivery.count.limit")
        one = Member(k, group, topic)
        one.join()
        talk.note("acquired", one.fetch("first fetch"))
        one.ack((0, 0, REJECT), (1, 2, RELEASE), (3, 3, ACCEPT), (4, 4, RELEASE), (5, 5, GAP))
        talk.note("acquired again", one.fetch("second fetch"))
        one.ack((1, 2, RELEASE), (4, 4, RELEASE))
        letters = until(talk, lambda: _letters(k, dlq, 0), lambda got: len(got) >= 4)
        talk.note("dead letters", letters)
        talk.note("other partitions", [_letters(k, dlq, p) for p in (1, 2)])
        talk.note("missing topic", plain(k.metadata(cases["missing"]).topics[0].error_code))
        talk.note("no letters", [_letters(k, cases[c], 0) for c in ("plain", "noprefix")])

    check(kafka4, peer, script)
