"""An asyncio service on ``confluent_kafka.aio``: an ``AIOProducer`` writes a
transaction of records and awaits each delivery, then an ``AIOConsumer`` in a
cooperative group (async rebalance callbacks that ``incremental_assign``,
``pause`` and ``resume``) reads them, storing each offset and committing by
hand (the calls of confluent-kafka's asyncio example).

    python examples/confluent/aio.py --lib trafka -b localhost:9092 -t events -g watchers \
        --transactional-id events-1 -n 20

Prints the delivered records, the rebalance callbacks, the records read
(sorted by partition and offset), the commit's answer, ``committed()``, and
each partition's watermarks with whether ``position()`` lies between the
committed offset and the high watermark.
"""

from __future__ import annotations

import asyncio

import clientlib


async def produce(aio, args):
    producer = aio.AIOProducer(
        {"bootstrap.servers": args.bootstrap_servers, "transactional.id": args.transactional_id},
        max_workers=2,
    )
    try:
        await producer.init_transactions()
        await producer.begin_transaction()
        pending = [
            await producer.produce(args.topic, value=f"event {i}", key=f"device-{i % 4}")
            for i in range(args.count)
        ]
        await producer.flush()
        delivered = await asyncio.gather(*pending)
        await producer.commit_transaction()
    finally:
        await producer.close()
    clientlib.emit(
        "delivered",
        records=sorted([m.partition(), m.offset(), m.key(), m.value()] for m in delivered),
    )


async def consume(aio, args):
    consumer = aio.AIOConsumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": "false",
            "enable.auto.offset.store": "false",
            "partition.assignment.strategy": "cooperative-sticky",
        }
    )

    async def on_assign(consumer, partitions):
        await consumer.incremental_assign(partitions)
        await consumer.pause(partitions)
        clientlib.emit("assigned", partitions=sorted(p.partition for p in partitions))
        await consumer.resume(partitions)

    async def on_revoke(consumer, partitions):
        clientlib.emit("revoked", partitions=sorted(p.partition for p in partitions))

    async def on_lost(consumer, partitions):
        clientlib.emit("lost", partitions=sorted(p.partition for p in partitions))

    records = []
    try:
        await consumer.subscribe(
            [args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost
        )
        while len(records) < args.count:
            msg = await consumer.poll(1.0)
            if msg is None:
                continue
            if msg.error():
                raise clientlib.module(args.lib).KafkaException(msg.error())
            records.append([msg.partition(), msg.offset(), msg.key(), msg.value()])
            await consumer.store_offsets(message=msg)
        clientlib.emit("records", records=sorted(records))
        done = await consumer.commit(asynchronous=False)
        clientlib.emit("commit", partitions=sorted([tp.partition, tp.offset] for tp in done))
        assignment = await consumer.assignment()
        committed = await consumer.committed(assignment, timeout=10)
        clientlib.emit(
            "committed", partitions=sorted([tp.partition, tp.offset] for tp in committed)
        )
        # The position is past the last record, and past the transaction's
        # commit marker once a fetch has read it (a matter of timing): between
        # the committed offset and the high watermark.
        stored = {tp.partition: tp.offset for tp in committed}
        between = []
        for tp in await consumer.position(assignment):
            low, high = await consumer.get_watermark_offsets(tp, timeout=10, cached=False)
            between.append([tp.partition, low, high, stored[tp.partition] <= tp.offset <= high])
        clientlib.emit("positions", partitions=sorted(between))
    finally:
        await consumer.unsubscribe()
        await consumer.close()
        clientlib.emit("closed")


async def main() -> None:
    cli = clientlib.parser("A producer and a consumer on asyncio")
    cli.add_argument("-t", dest="topic", required=True)
    cli.add_argument("-g", dest="group", required=True)
    cli.add_argument("--transactional-id", required=True)
    cli.add_argument("-n", dest="count", type=int, default=20)
    args = cli.parse_args()
    aio = clientlib.module(args.lib, "aio")
    await produce(aio, args)
    await consume(aio, args)


if __name__ == "__main__":
    asyncio.run(main())
