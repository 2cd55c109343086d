"""Share groups' dead-letter queues on brokerlite (KIP-1191, ``share.version``
2): the edges the differential conversation with Kafka 4.4
(test_differential_dead_letters.py) does not reach: the feature level, lock
expiry at the delivery-count limit, the broker's DLQ settings, and restarts.

What Kafka promises across a crash (KIP-1191; Kafka 4.4's ``SharePartition``
writes a record's ARCHIVING state before its dead letter and ARCHIVED after
it, and ``maybeResumeDlqArchiving`` writes the dead letters of the ARCHIVING
records it reads at start): a dead letter is written at least once. brokerlite
writes the same states in the same order, before it answers the
acknowledgement, so a dead letter acknowledged before a kill -9 is there once
after the restart; one whose writing a crash cut short is written then.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import pytest
from differential import Talk
from differential_requests import ShareKafka
from test_differential_dead_letters import Member, _letters
from test_share_fetch import (
    GROUP,
    LOCK_MS,
    REJECT,
    RELEASE,
    Session,
    delivered,
    partitions_of,
    produce_values,
)

from trafka.brokerlite.broker import SHARE_STATE_JOURNAL
from trafka.brokerlite.shares.dead_letters import EXCEEDED_MESSAGE, HEADERS, REJECTED_MESSAGE
from trafka.brokerlite.shares.partition import ARCHIVED, ARCHIVING, SharePartition
from trafka.brokerlite.shares.state_store import ShareStateStore
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k44_incremental_alter_configs as iac
from trafka.codec.messages import k57_update_features as uf
from trafka.codec.records import decode_batch, iter_batches

DLQ = "dlq.q"
ENABLE = {"errors.deadletterqueue.group.enable": "true"}


def create(core: Any, name: str, partitions: int = 1, configs: dict[str, str] | None = None) -> Any:
    r = create_topics.CreateTopicsRequest
    topic = r.CreatableTopic(
        name=name,
        num_partitions=partitions,
        replication_factor=1,
        configs=[r.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
    )
    answer = core.call(19, 7, r(topics=[topic]))
    assert answer.topics[0].error_code == 0, answer
    return core.broker.logs.topic(name).topic_id


def group_config(core: Any, **configs: str) -> None:
    r = iac.IncrementalAlterConfigsRequest
    resource = r.AlterConfigsResource(
        resource_type=32,
        resource_name=GROUP,
        configs=[
            r.AlterableConfig(name=k.replace("_", "."), config_operation=0, value=v)
            for k, v in configs.items()
        ],
    )
    assert core.call(44, 1, r(resources=[resource])).responses[0].error_code == 0


def share_version(core: Any, level: int, upgrade_type: int) -> None:
    r = uf.UpdateFeaturesRequest
    update = r.FeatureUpdateKey(
        feature="share.version", max_version_level=level, upgrade_type=upgrade_type
    )
    answer = core.call(57, 1, r(timeout_ms=5000, feature_updates=[update]))
    assert answer.error_code == 0, answer


def letters(core: Any, topic: str = DLQ, partition: int = 0) -> list[tuple[Any, ...]]:
    """(key, value, {header: value}) of each record of a DLQ partition."""
    plog = core.broker.logs.partition(topic, partition)
    out = []
    for _, view in iter_batches(plog.read(0, 1 << 20).tobytes()):
        for _o, _ts, key, value, headers in decode_batch(bytes(view)).records:
            out.append((key, value, {h: (v or b"").decode() for h, v in headers}))
    return out


def setup(core: Any, make_batch: Any, **configs: str) -> tuple[Any, Session]:
    """Topic "q" (3 records), DLQ topic "dlq.q", the group's DLQ set; member "a"."""
    tp = (create(core, "q"), 0)
    create(core, DLQ, 1, ENABLE)
    group_config(core, errors_deadletterqueue_topic_name=DLQ, **configs)
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [b"0", b"1", b"2"])
    return tp, a


def test_a_rejection_is_written_before_the_answer(core: Any, make_batch: Any) -> None:
    tp, a = setup(core, make_batch)
    a.fetch()
    assert a.ack({tp: [(0, 0, [REJECT])]}).error_code == 0
    ((key, value, headers),) = letters(core)
    assert (key, value) == (None, None)  # (copy.record.enable is false by default)
    assert list(headers) == list(HEADERS)
    assert headers["__dlq.errors.offset"] == "0"
    assert headers["__dlq.errors.message"] == REJECTED_MESSAGE
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.start_offset == 1 and sp.state_of(0) is None


def test_lock_expiry_at_the_limit_writes_a_dead_letter(core: Any, make_batch: Any) -> None:
    tp, a = setup(core, make_batch, share_delivery_count_limit="2")
    for _ in range(2):
        assert delivered(partitions_of(a.fetch())[tp])
        core.poll(LOCK_MS)  # the lock ends exactly at its deadline
    counts = [h["__dlq.errors.delivery.count"] for _, _, h in letters(core)]
    assert counts == ["2", "2", "2"]
    assert {h["__dlq.errors.message"] for _, _, h in letters(core)} == {EXCEEDED_MESSAGE}
    assert core.broker.shares.share_partition(GROUP, "q", 0).start_offset == 3


def test_share_version_1_writes_none(core: Any, make_batch: Any) -> None:
    """Kafka 4.4 writes dead letters only from share.version 2
    (``ShareVersion.supportsShareGroupDLQ``)."""
    tp, a = setup(core, make_batch, errors_deadletterqueue_copy_record_enable="true")
    share_version(core, 1, 2)  # (a safe downgrade)
    a.fetch()
    a.ack({tp: [(0, 0, [REJECT]), (1, 2, [RELEASE])]})
    assert letters(core) == []
    sp = core.broker.shares.share_partition(GROUP, "q", 0)
    assert sp.start_offset == 1  # archived all the same
    share_version(core, 2, 1)  # (an upgrade)
    a.fetch()
    a.ack({tp: [(1, 2, [REJECT])]})
    assert [(k, v) for k, v, _ in letters(core)] == [(None, b"1"), (None, b"2")]


def test_a_run_larger_than_the_dlq_topic_s_batch_limit_goes_in_parts(
    core: Any, make_batch: Any
) -> None:
    tp = (create(core, "q"), 0)
    create(core, DLQ, 1, {**ENABLE, "max.message.bytes": "1500"})
    group_config(
        core,
        errors_deadletterqueue_topic_name=DLQ,
        errors_deadletterqueue_copy_record_enable="true",
    )
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [bytes([i]) * 400 for i in range(10)])
    a.fetch()
    a.ack({tp: [(0, 9, [REJECT])]})
    assert [v for _, v, _ in letters(core)] == [bytes([i]) * 400 for i in range(10)]
    plog = core.broker.logs.partition(DLQ, 0)
    sizes = [len(view) for _, view in iter_batches(plog.read(0, 1 << 20).tobytes())]
    assert len(sizes) > 1 and max(sizes) <= 1500


def test_the_broker_s_prefix_and_auto_creation(open_core: Any, make_batch: Any) -> None:
    core = open_core(
        errors_deadletterqueue_topic_name_prefix="",
        errors_deadletterqueue_auto_create_topics_enable=True,
        num_partitions=2,
    )
    tp = (create(core, "q"), 0)
    group_config(core, errors_deadletterqueue_topic_name="anything")
    a = Session(core, "a")
    a.fetch([tp])
    produce_values(core, make_batch, "q", [b"0"])
    a.fetch()
    a.ack({tp: [(0, 0, [REJECT])]})
    info = core.broker.logs.topic("anything")
    assert info.num_partitions == 2
    assert info.configs["errors.deadletterqueue.group.enable"] == "true"
    assert len(letters(core, "anything")) == 1


def test_an_archiving_record_read_at_start_gets_its_dead_letter(
    open_core: Any, make_batch: Any
) -> None:
    """A crash after the ARCHIVING state was written and before the dead letter:
    the restarted broker writes it (at once: its next deadline is now)."""
    core = open_core()
    topic_id = create(core, "q")
    create(core, DLQ, 1, ENABLE)
    group_config(core, errors_deadletterqueue_topic_name=DLQ)
    produce_values(core, make_batch, "q", [b"0", b"1"])
    core.broker.close()
    store = ShareStateStore(core.broker.data_dir / SHARE_STATE_JOURNAL)
    entry = {"kind": "partition", "group": GROUP, "topic": "q", "topic_id": str(topic_id)}
    store.write([{**entry, "partition": 0, "start": 0, "runs": [[0, 0, ARCHIVING, 1]]}])
    store.close()
    core = open_core()
    assert core.broker.next_deadline() == 0
    core.poll()
    ((_, _, headers),) = letters(core)
    assert headers["__dlq.errors.message"] == REJECTED_MESSAGE  # (count 1 < limit 5)
    assert core.broker.shares.share_partition(GROUP, "q", 0).start_offset == 1


def test_archiving_is_not_done_until_its_dead_letter_is_written() -> None:
    sp = SharePartition(0, delivery_count_limit=2)
    sp.dead_letters = True
    sp.acquire_new("m", [_span(0, 2)], 10, now_ms=0, lock_ms=1000)
    assert sp.acknowledge("m", [(0, 0, [REJECT]), (1, 1, [0]), (2, 2, [RELEASE])]) == 0
    # A rejection archives through ARCHIVING; a GAP at once.
    assert sp.state_of(0) == (ARCHIVING, 1, None) and sp.state_of(1) == (ARCHIVED, 1, None)
    assert sp.dead_letters_due() == []  # its transition is not written yet
    sp.settle((0,), written=True)
    (due,) = sp.dead_letters_due()
    assert (due.first, due.last, due.rejected) == (0, 0, True)
    assert sp.start_offset == 0  # ARCHIVING is not done
    assert sp.snapshot()["runs"][0] == [0, 0, ARCHIVING, 1]
    assert sp.dead_letters_written(0, 0)
    assert sp.start_offset == 2 and sp.dead_letters_due() == []
    # A failed write puts a rejected record back, held by its member.
    sp.acquire_available("m", 10, now_ms=0, lock_ms=1000)
    sp.acknowledge("m", [(2, 2, [REJECT])])
    sp.settle((0,), written=False)
    assert sp.state_of(2) == (1, 2, "m") and sp.dead_letters_due() == []
    # At the delivery-count limit (2) a release archives through ARCHIVING too.
    sp.acknowledge("m", [(2, 2, [RELEASE])])
    sp.settle((0,), written=True)
    (due,) = sp.dead_letters_due()
    assert (due.first, due.delivery_count, due.rejected) == (2, 2, False)
    loaded = SharePartition.from_snapshot(sp.snapshot(), delivery_count_limit=2)
    assert [(r.first, r.state, r.rejected) for r in loaded.dead_letters_due()] == [
        (2, ARCHIVING, False)
    ]


def _span(first: int, last: int) -> Any:
    from trafka.brokerlite.shares.partition import BatchSpan

    return BatchSpan(first, last)


_CHILD = textwrap.dedent(
    """
    import signal, sys
    from trafka.brokerlite.server import broker_in_thread

    with broker_in_thread(port=0, host="127.0.0.1", data_dir=sys.argv[1],
                          group_initial_rebalance_delay_ms=0) as running:
        print(running.bootstrap_servers, flush=True)
        signal.sigwait([signal.SIGTERM])
    """
)


@pytest.mark.timeout(120)
def test_a_dead_letter_acknowledged_before_a_kill_9_is_there_once(tmp_path: Path) -> None:
    """The answer to a REJECT comes after its dead letter and the ARCHIVED
    state are written: a SIGKILL then, and a restart, leave exactly one."""

    def start() -> tuple[subprocess.Popen[str], str]:
        child = subprocess.Popen(
            [sys.executable, "-c", _CHILD, str(tmp_path / "data")],
            stdout=subprocess.PIPE,
            text=True,
        )
        assert child.stdout is not None
        return child, child.stdout.readline().strip()

    child, servers = start()
    try:
        k = ShareKafka(Talk(servers))
        k.talk.recording = False
        topic, group, dlq = "q", "g-" + uuid.uuid4().hex[:6], "dlq.q"
        k.create(topic, 1)
        k.create(dlq, 1, **ENABLE)
        k.produce(topic, _one_record())
        k.group_config(group, "share.auto.offset.reset", "earliest")
        k.group_config(group, "errors.deadletterqueue.topic.name", dlq)
        member = Member(k, group, topic)
        member.join()
        member.fetch("before the kill")
        assert member.ack((0, 0, REJECT)).responses[0].partitions[0].error_code == 0
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    assert child.returncode == -signal.SIGKILL
    child, servers = start()
    try:
        k = ShareKafka(Talk(servers))
        k.talk.recording = False
        # A member's fetch makes the restarted broker write what it has due first.
        again = Member(k, group, topic)
        again.join()
        answer = k.share_fetch(group, again.member, 0, again.topic_id)
        assert not answer.responses or not answer.responses[0].partitions[0].acquired_records
        got = _letters(k, dlq, 0)
        assert [dict(h)["__dlq.errors.offset"] for _, _, h in got] == ["0"]
    finally:
        child.send_signal(signal.SIGTERM)
        child.wait(timeout=30)


def _one_record() -> bytes:
    from trafka.codec.records import encode_batch

    return encode_batch([(1_700_000_000_000, b"k", b"v", ())])
