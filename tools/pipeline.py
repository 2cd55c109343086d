"""The main job of ``make demo``: a small order pipeline on the embedded broker.

It starts brokerlite in-process (loopback, a throw-away data directory), then:

1. creates a topic of three partitions with the trafka admin client;
2. starts a consumer group of two trafka consumers and waits until the group has
   split the partitions between them;
3. produces keyed orders with the trafka producer (idempotent, lz4); every key
   lands on the partition murmur2 gives it, as Java's client would put it;
4. lets the group consume every order, commits, and checks the committed offsets
   against the partitions' end offsets (lag 0);
5. reads the same topic with a different Kafka client (kafka-python), which sees
   the same records on the same partitions (skipped, in one line saying why, where
   kafka-python or the lz4 package it decompresses these batches with is missing);
6. works through the same orders as a queue: a share group (KIP-932) of two
   trafka share consumers, where each order goes to one of them; the first
   delivery of every tenth order is released (as a failed job would be) and
   comes back, to either member, with delivery count 2; in the end every order
   is accepted exactly once and a third member finds nothing left.

Each step checks what it claims; :func:`main_job` returns False on any mismatch.
"""

from __future__ import annotations

import collections
import json
import tempfile
from collections.abc import Callable
from typing import Any

import anyio

from trafka.brokerlite import serve_broker
from trafka.sdk import (
    AcknowledgeType,
    NewTopic,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
    open_share_consumer,
)
from trafka.sdk.partitioners import murmur2
from trafka.tools._peers import kafka_python_missing, skip

TOPIC = "orders"
PARTITIONS = 3
GROUP = "billing"
SHIPPING = "shipping"
ITEMS = ("tea", "cups", "kettle", "teapot", "strainer")


def orders(count: int) -> list[tuple[str, dict[str, Any]]]:
    """``count`` (customer key, order) pairs, deterministic."""
    return [
        (
            f"customer-{(i * 7) % 23:02d}",
            {"order": i, "item": ITEMS[i % len(ITEMS)], "qty": 1 + i % 4},
        )
        for i in range(count)
    ]


def expected_partition(key: str) -> int:
    # Java's default partitioner for keyed records: murmur2, made positive, mod n.
    return (murmur2(key.encode()) & 0x7FFFFFFF) % PARTITIONS


async def _member(
    name: str,
    bootstrap: str,
    seen: dict[str, list[Any]],
    stop: anyio.Event,
    ready: dict[str, set[Any]],
) -> None:
    async with open_consumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        group_id=GROUP,
        client_id=name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    ) as consumer:
        while not stop.is_set():
            batch = await consumer.getmany(timeout_ms=100)
            ready[name] = set(consumer.assignment())
            for records in batch.values():
                seen[name].extend(records)
        await consumer.commit()


async def main_job(echo: Callable[[str], None], count: int = 300) -> bool:
    """Run the pipeline, reporting with ``echo``; True when every check held."""
    ok = True

    def check(condition: bool, what: str) -> None:
        nonlocal ok
        ok = ok and condition
        echo(f"  {'ok' if condition else 'FAILED'}: {what}")

    with tempfile.TemporaryDirectory(prefix="trafka-demo-") as data_dir:
        async with serve_broker(
            port=0, data_dir=data_dir, group_initial_rebalance_delay_ms=0
        ) as broker:
            bootstrap = broker.bootstrap_servers
            echo(f"brokerlite serving on {bootstrap}, data in a temporary directory")

            async with open_admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics([NewTopic(TOPIC, PARTITIONS)])
                echo(f"created topic {TOPIC!r} with {PARTITIONS} partitions")

            seen: dict[str, list[Any]] = {"member-a": [], "member-b": []}
            ready: dict[str, set[Any]] = {}
            stop = anyio.Event()
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    for name in seen:
                        tg.start_soon(_member, name, bootstrap, seen, stop, ready)
                    # Wait until the group has split the partitions between both members.
                    while not (
                        len(ready) == 2
                        and all(ready.values())
                        and sum(len(a) for a in ready.values()) == PARTITIONS
                    ):
                        await anyio.sleep(0.05)
                    split = {n: sorted(tp.partition for tp in a) for n, a in sorted(ready.items())}
                    echo(f"consumer group {GROUP!r} formed: partitions {split}")

                    sent = orders(count)
                    async with open_producer(
                        bootstrap_servers=bootstrap,
                        key_serializer="str",
                        value_serializer="json",
                        compression_type="lz4",
                        linger_ms=5,
                    ) as producer:
                        futures = [await producer.send(TOPIC, v, key=k) for k, v in sent]
                        await producer.flush()
                    metas = [f.result() for f in futures]
                    per_partition = collections.Counter(m.partition for m in metas)
                    echo(
                        f"produced {len(metas)} orders (idempotent, lz4): "
                        f"{dict(sorted(per_partition.items()))} per partition"
                    )
                    check(
                        all(
                            m.partition == expected_partition(k)
                            for m, (k, _) in zip(metas, sent, strict=True)
                        ),
                        "every key is on its murmur2 partition (Java's default partitioner)",
                    )

                    while sum(len(v) for v in seen.values()) < count:
                        await anyio.sleep(0.05)
                    stop.set()

            got = {n: len(v) for n, v in seen.items()}
            echo(f"the group consumed {sum(got.values())} orders: {got}")
            received = sorted(json.loads(r.value)["order"] for v in seen.values() for r in v)
            check(received == list(range(count)), "each order consumed exactly once")
            in_order = all(
                [json.loads(r.value)["order"] for r in v if r.partition == p]
                == sorted(json.loads(r.value)["order"] for r in v if r.partition == p)
                for v in seen.values()
                for p in range(PARTITIONS)
            )
            check(in_order, "per-partition order preserved")

            async with open_admin(bootstrap_servers=bootstrap) as admin:
                tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
                committed = await admin.list_consumer_group_offsets(GROUP)
                ends = await admin.list_offsets({tp: "latest" for tp in tps})
            lag = {tp.partition: (ends[tp] or (0, 0))[0] - committed.get(tp, 0) for tp in tps}
            echo(f"committed offsets {[committed.get(tp, 0) for tp in tps]}, lag {lag}")
            check(all(v == 0 for v in lag.values()), "the group's lag is 0 on every partition")

            missing = kafka_python_missing()
            if missing is not None:
                skip(echo, "the kafka-python read", missing)
            else:
                peer = await anyio.to_thread.run_sync(_read_with_kafka_python, bootstrap, count)
                same = sorted(peer) == sorted(
                    (r.partition, r.offset, r.key.decode()) for v in seen.values() for r in v
                )
                echo(f"kafka-python read {len(peer)} records from the same broker")
                check(same, "kafka-python sees the same keys at the same partitions and offsets")

            await _work_queue(bootstrap, count, echo, check)
    return ok


async def _work_queue(
    bootstrap: str, count: int, echo: Callable[[str], None], check: Callable[[bool, str], None]
) -> None:
    """Step 6: the orders as a work queue, through a share group of two members."""
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        await admin.alter_group_configs({SHIPPING: {"share.auto.offset.reset": "earliest"}})
    accepted: dict[str, list[int]] = {"worker-1": [], "worker-2": []}
    released: list[int] = []
    redelivered: list[tuple[int, int]] = []
    settings: dict[str, Any] = {
        "bootstrap_servers": bootstrap,
        "group_id": SHIPPING,
        "share_acknowledgement_mode": "explicit",
        "max_poll_records": 25,
    }
    with anyio.fail_after(60):
        async with (
            open_share_consumer(TOPIC, **settings) as one,
            open_share_consumer(TOPIC, **settings) as two,
        ):
            workers = {"worker-1": one, "worker-2": two}
            while sum(map(len, accepted.values())) < count:
                for name, worker in workers.items():
                    for record in await worker.poll(100):
                        order = json.loads(record.value)["order"]
                        if order % 10 == 0 and record.delivery_count == 1:
                            worker.acknowledge(record, AcknowledgeType.RELEASE)
                            released.append(order)
                            continue
                        if record.delivery_count > 1:
                            redelivered.append((order, record.delivery_count))
                        worker.acknowledge(record, AcknowledgeType.ACCEPT)
                        accepted[name].append(order)
                    await worker.commit()
        async with open_share_consumer(TOPIC, **settings) as third:
            left = await third.poll(1000)
    done = {name: len(orders) for name, orders in accepted.items()}
    echo(
        f"share group {SHIPPING!r} worked through {sum(done.values())} orders: {done}; "
        f"{len(released)} released once and delivered again"
    )
    everything = sorted(o for orders in accepted.values() for o in orders)
    check(everything == list(range(count)), "each order accepted exactly once by the share group")
    check(
        sorted(redelivered) == [(o, 2) for o in sorted(released)],
        "every released order came back once, with delivery count 2",
    )
    check(all(done.values()), "both members of the share group took orders")
    check(left == [], "nothing is left for a third member")


def _read_with_kafka_python(bootstrap: str, count: int) -> list[tuple[int, int, str]]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        TOPIC,
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        consumer_timeout_ms=10_000,
    )
    try:
        out = []
        for record in consumer:
            out.append((record.partition, record.offset, record.key.decode()))
            if len(out) == count:
                break
        return out
    finally:
        consumer.close()
