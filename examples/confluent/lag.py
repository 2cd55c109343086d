"""A lag report: a group's committed offsets against each partition's
watermarks (``list_topics``, ``committed``, ``get_watermark_offsets``, the
calls of confluent-kafka's watermark example), then the records not yet
consumed, read with ``assign()`` from the committed offsets without joining
the group (``seek`` where nothing is committed, as its seek example).

    python examples/confluent/lag.py --lib trafka -b localhost:9092 -g billing -t orders

Prints one row per partition (committed offset, low and high watermarks, lag)
and the unconsumed records (sorted by partition and offset).
"""

from __future__ import annotations

import clientlib


def lag(ck, consumer, topic):
    """One row per partition: [partition, committed, low, high, lag]."""
    metadata = consumer.list_topics(topic, timeout=10)
    if metadata.topics[topic].error is not None:
        raise ck.KafkaException(metadata.topics[topic].error)
    partitions = [ck.TopicPartition(topic, p) for p in sorted(metadata.topics[topic].partitions)]
    rows = []
    for tp in consumer.committed(partitions, timeout=10):
        low, high = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        committed = None if tp.offset == ck.OFFSET_INVALID else tp.offset
        rows.append(
            [tp.partition, committed, low, high, high - (low if committed is None else committed)]
        )
    return rows


def unread(ck, consumer, topic, rows):
    """The records past each partition's committed offset (from its low
    watermark where nothing is committed), up to its high watermark."""
    behind = [(p, committed, low, high) for p, committed, low, high, lag in rows if lag > 0]
    consumer.assign(
        [
            ck.TopicPartition(topic, p, ck.OFFSET_BEGINNING if c is None else c)
            for p, c, _, _ in behind
        ]
    )
    for p, committed, low, _ in behind:
        if committed is None:
            consumer.seek(ck.TopicPartition(topic, p, low))
    left = {p: high for p, _, _, high in behind}
    records = []
    while left:
        msg = consumer.poll(1.0)
        if msg is None:
            continue
        if msg.error():
            raise ck.KafkaException(msg.error())
        records.append([msg.partition(), msg.offset(), msg.key(), msg.value()])
        if msg.offset() + 1 >= left.get(msg.partition(), 0):
            left.pop(msg.partition(), None)
            consumer.pause([ck.TopicPartition(topic, msg.partition())])
    return sorted(records)


def main() -> None:
    cli = clientlib.parser("A group's lag, and what it has not read yet")
    cli.add_argument("-t", dest="topic", required=True)
    cli.add_argument("-g", dest="group", required=True)
    args = cli.parse_args()
    ck = clientlib.module(args.lib)

    # The group.id names the group committed() asks about; this consumer never joins it.
    conf = {"bootstrap.servers": args.bootstrap_servers, "group.id": args.group,
            "enable.auto.commit": False}  # fmt: skip
    with ck.Consumer(conf) as consumer:
        rows = lag(ck, consumer, args.topic)
        clientlib.emit("lag", partitions=rows)
        clientlib.emit("unread", records=unread(ck, consumer, args.topic, rows))


if __name__ == "__main__":
    main()
