"""A producer service: keyed records with headers and timestamps, a delivery
callback per record, ``poll(0)`` between ``produce()`` calls and ``flush()`` at
the end (the calls of confluent-kafka's producer example).

    python examples/confluent/producer.py --lib trafka -b localhost:9092 -t orders -n 30

Prints each delivery report (partition, offset, key, value, headers, timestamp),
sorted by partition and offset, then what ``flush()`` left and ``len()``.
"""

from __future__ import annotations

import clientlib

#: Each record's timestamp is this plus its number (a fixed clock, so two runs agree).
EPOCH_MS = 1_700_000_000_000


def main() -> None:
    cli = clientlib.parser("A producer with delivery callbacks")
    cli.add_argument("-t", dest="topic", required=True)
    cli.add_argument("-n", dest="count", type=int, default=30)
    args = cli.parse_args()
    ck = clientlib.module(args.lib)

    delivered: list[list[object]] = []
    failed: list[str] = []

    def delivery_report(err, msg):
        # Served by poll() and flush(), on this thread.
        if err is not None:
            failed.append(str(err))
            return
        kind, stamp = msg.timestamp()
        delivered.append(
            [
                msg.partition(),
                msg.offset(),
                msg.key(),
                msg.value(),
                msg.headers(),
                [kind == ck.TIMESTAMP_CREATE_TIME, stamp],
            ]
        )

    conf = {"bootstrap.servers": args.bootstrap_servers, "linger.ms": 5, "acks": "all"}
    with ck.Producer(conf) as producer:
        for i in range(args.count):
            options: dict[str, object] = {"timestamp": EPOCH_MS + i}
            if i % 3 == 0:
                options["headers"] = [("source", b"example"), ("n", str(i).encode())]
            if i % 10 == 9:  # no key: a partition of its own choosing
                options["partition"] = 0
                key = None
            else:
                key = f"customer-{i % 7}".encode()
            while True:
                try:
                    producer.produce(
                        args.topic,
                        f"order {i}".encode(),
                        key,
                        on_delivery=delivery_report,
                        **options,
                    )
                    break
                except BufferError:  # the queue is full: serve reports, then retry
                    producer.poll(1)
            producer.poll(0)
        left = producer.flush(30)
        clientlib.emit("flushed", left=left, queued=len(producer))
    clientlib.emit("delivered", records=sorted(delivered, key=lambda r: (r[0], r[1])))
    clientlib.emit("failed", errors=failed)


if __name__ == "__main__":
    main()
