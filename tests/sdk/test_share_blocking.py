"""The blocking share consumer (trafka.sdk.blocking.ShareConsumer) against the
scripted share broker, which runs on a loop in a thread of its own: iteration
with ``consumer_timeout_ms``, records an iteration has not reached neither
accepted by a commit nor by closing (they are released), explicit
acknowledgement with ``commit`` and ``commit_async``, the callback, and
configuration errors from the constructor."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anyio
import anyio.abc
import pytest
from anyio.from_thread import start_blocking_portal
from share_scripted_broker import ShareScriptedBroker

from trafka.sdk import ConfigError, TopicPartition
from trafka.sdk.blocking import Producer, ShareConsumer
from trafka.sdk.share_consumer import AcknowledgeType

pytestmark = pytest.mark.timeout(60)

ACCEPT, RELEASE, REJECT = AcknowledgeType.ACCEPT, AcknowledgeType.RELEASE, AcknowledgeType.REJECT


@pytest.fixture
def broker() -> Iterator[ShareScriptedBroker]:
    b = ShareScriptedBroker(topics={"q": 1})

    async def serve(task_status: anyio.abc.TaskStatus[None]) -> None:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        b.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener:
            task_status.started()
            await listener.serve(b.serve)

    with start_blocking_portal("trio") as portal:
        future, _ = portal.start_task(serve)
        yield b
        future.cancel()


def fill(broker: ShareScriptedBroker, n: int) -> None:
    with Producer(bootstrap_servers=broker.bootstrap) as producer:
        for i in range(n):
            producer.send("q", b"v%d" % i)


def acks(broker: ShareScriptedBroker) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for _, _, o, kind, _ in broker.acknowledgements:
        out.setdefault(o, []).append(kind)
    return out


def test_iteration_accepts_what_it_handed_out_and_releases_the_rest(
    broker: ShareScriptedBroker,
) -> None:
    fill(broker, 4)
    seen = []
    with ShareConsumer(
        "q", bootstrap_servers=broker.bootstrap, group_id="g", consumer_timeout_ms=5000
    ) as consumer:
        for record in consumer:
            seen.append(record.value)
            if len(seen) == 2:
                break
        assert consumer.commit() == {TopicPartition("q", 0): None}
    assert seen == [b"v0", b"v1"]
    assert acks(broker) == {0: [ACCEPT], 1: [ACCEPT], 2: [RELEASE], 3: [RELEASE]}


def test_iteration_ends_after_consumer_timeout_ms(broker: ShareScriptedBroker) -> None:
    fill(broker, 3)
    with ShareConsumer(
        "q", bootstrap_servers=broker.bootstrap, group_id="g", consumer_timeout_ms=1500
    ) as consumer:
        values = [r.value for r in consumer]
    assert values == [b"v0", b"v1", b"v2"]
    assert acks(broker) == {0: [ACCEPT], 1: [ACCEPT], 2: [ACCEPT]}


def test_explicit_acknowledgement_with_commits_and_the_callback(
    broker: ShareScriptedBroker,
) -> None:
    fill(broker, 2)
    outcomes: list[Any] = []
    with ShareConsumer(
        bootstrap_servers=broker.bootstrap,
        group_id="g",
        share_acknowledgement_mode="explicit",
    ) as consumer:
        consumer.set_acknowledgement_commit_callback(
            lambda offsets, error: outcomes.append((offsets, error))
        )
        consumer.subscribe(["q"])
        records: list[Any] = []
        while len(records) < 2:
            records += consumer.poll(timeout_ms=2000)
        consumer.acknowledge(records[0], type=REJECT)
        assert consumer.commit_async().result(timeout=10) == {TopicPartition("q", 0): None}
        consumer.acknowledge_offset("q", 0, records[1].offset, type=ACCEPT)
        assert consumer.commit() == {TopicPartition("q", 0): None}
        assert consumer.subscription() == {"q"}
    assert acks(broker) == {0: [REJECT], 1: [ACCEPT]}
    assert [(o, e) for o, e in outcomes] == [
        ({TopicPartition("q", 0): {0}}, None),
        ({TopicPartition("q", 0): {1}}, None),
    ]


def test_configuration_errors_come_from_the_constructor() -> None:
    with pytest.raises(ConfigError, match="isolation"):
        ShareConsumer(
            bootstrap_servers="127.0.0.1:1", group_id="g", isolation_level="read_committed"
        )
