"""Helpers of the proxy tests: topics, and records in and out."""

from __future__ import annotations

import itertools
from typing import Any

import anyio
import confluent_kafka

from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer

_names = itertools.count()


def fresh(prefix: str = "px") -> str:
    return f"{prefix}-{next(_names)}"


def create(servers: str, topic: str, partitions: int) -> None:
    async def go() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, partitions)])

    anyio.run(go, backend="trio")


def placement(servers: str, topic: str, partitions: int, **settings: Any) -> list[Any]:
    """Every record of the topic, read to its end (read_committed with ``settings``)."""

    async def go() -> list[Any]:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        out: list[Any] = []
        async with open_consumer(bootstrap_servers=servers, **settings) as consumer:
            consumer.assign(tps)
            consumer.seek_to_beginning(*tps)
            ends = await consumer.end_offsets(tps)
            with anyio.fail_after(30):
                for tp in tps:
                    while await consumer.position(tp) < ends[tp]:
                        for recs in (await consumer.getmany(tp, timeout_ms=500)).values():
                            out.extend(recs)
        return out

    result: list[Any] = anyio.run(go, backend="trio")
    return result


def confluent_produce(servers: str, topic: str, n: int) -> None:
    producer = confluent_kafka.Producer({"bootstrap.servers": servers, "linger.ms": 5})
    failures: list[Any] = []
    for i in range(n):
        producer.produce(
            topic,
            value=b"v%d" % i,
            key=b"user-%d" % (i % 23),
            on_delivery=lambda err, _msg: failures.append(err) if err else None,
        )
    assert producer.flush(30) == 0
    assert failures == []
