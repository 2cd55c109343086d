"""A consume-transform-produce worker (confluent-kafka), run as a subprocess by
test_eos_interop.py, which kills it with SIGKILL at arbitrary points.

    python eos_ctp_worker.py SERVERS INPUT OUTPUT GROUP TRANSACTIONAL_ID BATCH PAUSE_MS

Each transaction holds the output records of up to BATCH input records
(value + b"!", key "partition:offset") and the group's positions after them
(send_offsets_to_transaction with the consumer's group metadata, KIP-447). Once
a transaction's records are written it prints ``open N`` and waits PAUSE_MS
before committing, so that a kill right after that line lands inside a
transaction; after each commit it prints ``committed N`` (input records
committed by this run). It exits 0 once the group's committed offsets reach the
end of every input partition.
A static group member (group.instance.id), so a restarted worker takes its
predecessor's place at once instead of waiting for its session to expire.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition


def main(
    servers: str, source: str, sink: str, group: str, txn_id: str, batch: int, pause_ms: int
) -> int:
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "transaction.timeout.ms": 20000,
        }
    )
    producer.init_transactions(30)
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": group,
            "group.instance.id": f"{txn_id}-member",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": 10000,
        }
    )
    partitions = consumer.list_topics(source, timeout=10).topics[source].partitions
    ends = {
        p: consumer.get_watermark_offsets(TopicPartition(source, p), timeout=10)[1]
        for p in partitions
    }
    consumer.subscribe([source])
    done = 0
    try:
        while True:
            messages = [m for m in consumer.consume(batch, timeout=0.5) if m.error() is None]
            if not messages:
                assignment = consumer.assignment()
                if len(assignment) == len(ends):
                    # The group's committed offsets, not this run's positions: a
                    # partition finished by an earlier run has no position here.
                    committed = consumer.committed(assignment, timeout=10)
                    if all(tp.offset >= ends[tp.partition] for tp in committed):
                        return 0
                continue
            producer.begin_transaction()
            for m in messages:
                producer.produce(sink, m.value() + b"!", key=b"%d:%d" % (m.partition(), m.offset()))
            # The transaction's records are in the log now, not yet committed: the
            # moment a crash must not expose them.
            producer.flush(30)
            print(f"open {done}", flush=True)
            time.sleep(pause_ms / 1000)
            try:
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()),
                    consumer.consumer_group_metadata(),
                    30,
                )
                producer.commit_transaction(30)
            except KafkaException as exc:
                if not exc.args[0].txn_requires_abort():
                    raise
                # Abortable: drop this transaction and read its input again.
                producer.abort_transaction(30)
                for tp in consumer.committed(consumer.assignment(), timeout=10):
                    if tp.offset < 0:
                        tp.offset = OFFSET_BEGINNING
                    consumer.seek(tp)
                continue
            done += len(messages)
            print(f"committed {done}", flush=True)
    finally:
        consumer.close()


if __name__ == "__main__":
    servers, source, sink, group, txn_id, batch, pause_ms = sys.argv[1:8]
    sys.exit(main(servers, source, sink, group, txn_id, int(batch), int(pause_ms)))
