"""A consumer-group service: ``subscribe()`` with rebalance callbacks, a
``poll()`` loop that stops at the end of every assigned partition
(``enable.partition.eof``), manual commits (``commit(message=...)`` of every
record whose offset is one less than a multiple of ``--commit-every``, then a
synchronous ``commit()`` of what is left), and ``close()``
(the calls of confluent-kafka's consumer example, with commits by hand).

    python examples/confluent/consumer.py --lib trafka -b localhost:9092 -g billing -t orders -n 30

Prints the rebalance callbacks as they come, every record (sorted by partition
and offset), the commits' answers, then ``committed()`` and ``position()``.
"""

from __future__ import annotations

import logging
import sys

import clientlib


def main() -> None:
    cli = clientlib.parser("A consumer in a group, committing by hand")
    cli.add_argument("-t", dest="topic", required=True)
    cli.add_argument("-g", dest="group", required=True)
    cli.add_argument("-n", dest="count", type=int, required=True, help="records to read")
    cli.add_argument("--commit-every", type=int, default=4)
    args = cli.parse_args()
    ck = clientlib.module(args.lib)

    logger = logging.getLogger("consumer")
    logger.addHandler(logging.StreamHandler(sys.stderr))
    conf = {
        "bootstrap.servers": args.bootstrap_servers,
        "group.id": args.group,
        "session.timeout.ms": 6000,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "enable.partition.eof": True,
    }
    consumer = ck.Consumer(conf, logger=logger)

    def on_assign(consumer, partitions):
        clientlib.emit("assigned", partitions=sorted([p.partition, p.offset] for p in partitions))

    def on_revoke(consumer, partitions):
        clientlib.emit("revoked", partitions=sorted(p.partition for p in partitions))

    def on_lost(consumer, partitions):
        clientlib.emit("lost", partitions=sorted(p.partition for p in partitions))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_lost)
    records: list[list[object]] = []
    commits: list[list[int]] = []
    at_end: set[int] = set()
    try:
        while len(records) < args.count or at_end != {p.partition for p in consumer.assignment()}:
            msg = consumer.poll(timeout=1.0)
            if msg is None:
                continue
            if msg.error():
                if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                    at_end.add(msg.partition())
                    continue
                raise ck.KafkaException(msg.error())
            at_end.discard(msg.partition())
            records.append([msg.partition(), msg.offset(), msg.key(), msg.value()])
            if (msg.offset() + 1) % args.commit_every == 0:
                done = consumer.commit(message=msg, asynchronous=False)
                commits.extend([tp.partition, tp.offset] for tp in done)
        clientlib.emit("records", records=sorted(records, key=lambda r: (r[0], r[1])))
        clientlib.emit("commits", partitions=sorted(commits))
        final = consumer.commit(asynchronous=False)
        clientlib.emit("final_commit", partitions=sorted([tp.partition, tp.offset] for tp in final))
        assignment = consumer.assignment()
        committed = consumer.committed(assignment, timeout=10)
        clientlib.emit(
            "committed", partitions=sorted([tp.partition, tp.offset] for tp in committed)
        )
        positions = consumer.position(assignment)
        clientlib.emit(
            "positions", partitions=sorted([tp.partition, tp.offset] for tp in positions)
        )
    finally:
        consumer.close()
        clientlib.emit("closed")


if __name__ == "__main__":
    main()
