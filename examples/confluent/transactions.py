"""An exactly-once service: a consume-transform-produce loop that reads an
partition of an input topic (``assign()``: one transactional producer per
input partition, as before KIP-447), writes each record upper-cased to
an output topic in transactions of ``--per-transaction`` records, and commits
the consumer's positions inside each transaction
(``send_offsets_to_transaction``), the calls of confluent-kafka's EOS example.
Before it starts, one transaction is aborted on purpose: its record must never
reach a ``read_committed`` reader.

    python examples/confluent/transactions.py --lib trafka -b localhost:9092 \
        -i orders -o orders-shouted -g shouters --transactional-id shouter-1

Prints the delivery reports, each transaction's size, and the group's
committed offsets and the consumer's positions at the end.
"""

from __future__ import annotations

import clientlib


def transform(msg):
    value = msg.value()
    return msg.key(), None if value is None else value.upper()


def main() -> None:
    cli = clientlib.parser("Read, transform and write exactly once")
    cli.add_argument("-i", dest="input_topic", required=True)
    cli.add_argument("-o", dest="output_topic", required=True)
    cli.add_argument("-p", dest="partition", type=int, default=0, help="the input partition")
    cli.add_argument("-g", dest="group", required=True)
    cli.add_argument("--transactional-id", required=True)
    cli.add_argument("--per-transaction", type=int, default=5)
    args = cli.parse_args()
    ck = clientlib.module(args.lib)

    consumer = ck.Consumer(
        {
            "bootstrap.servers": args.bootstrap_servers,
            "group.id": args.group,
            "auto.offset.reset": "earliest",
            # The offsets go with the transaction, never on their own.
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    consumer.assign([ck.TopicPartition(args.input_topic, args.partition)])

    producer = ck.Producer(
        {"bootstrap.servers": args.bootstrap_servers, "transactional.id": args.transactional_id}
    )
    delivered = []

    def delivery_report(err, msg):
        if err is not None:
            delivered.append(["failed", str(err)])
        else:
            delivered.append([msg.partition(), msg.offset(), msg.key(), msg.value()])

    producer.init_transactions()

    # A transaction given up: its record is written, then aborted.
    producer.begin_transaction()
    producer.produce(
        args.output_topic, b"never seen", b"aborted", partition=0, on_delivery=delivery_report
    )
    producer.flush(30)
    producer.abort_transaction()

    sizes = []
    at_end: set[int] = set()
    in_transaction = 0
    producer.begin_transaction()
    while at_end != {p.partition for p in consumer.assignment()}:
        producer.poll(0)
        msg = consumer.poll(timeout=1.0)
        if msg is None:
            continue
        if msg.error():
            if msg.error().code() == ck.KafkaError._PARTITION_EOF:
                at_end.add(msg.partition())
                continue
            raise ck.KafkaException(msg.error())
        at_end.discard(msg.partition())
        key, value = transform(msg)
        producer.produce(args.output_topic, value, key, on_delivery=delivery_report)
        in_transaction += 1
        if in_transaction == args.per_transaction:
            producer.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
            )
            producer.commit_transaction()
            sizes.append(in_transaction)
            in_transaction = 0
            producer.begin_transaction()
    producer.send_offsets_to_transaction(
        consumer.position(consumer.assignment()), consumer.consumer_group_metadata()
    )
    producer.commit_transaction()
    sizes.append(in_transaction)

    clientlib.emit("delivered", records=sorted(delivered))
    clientlib.emit("transactions", sizes=sizes)
    assignment = consumer.assignment()
    committed = consumer.committed(assignment, timeout=10)
    clientlib.emit("committed", partitions=sorted([tp.partition, tp.offset] for tp in committed))
    positions = consumer.position(assignment)
    clientlib.emit("positions", partitions=sorted([tp.partition, tp.offset] for tp in positions))
    consumer.close()


if __name__ == "__main__":
    main()
