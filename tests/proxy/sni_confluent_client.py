"""confluent-kafka through the proxy's one TLS port (tests/proxy/test_proxy_sni.py),
run as a process of its own whose /etc/hosts names the proxy's SNI names
127.0.0.1 (librdkafka resolves in C, with no hook to answer them otherwise).

    python sni_confluent_client.py BOOTSTRAP TOPIC CA TAG N

Sends N records plain, N idempotent and N in a transaction (values
``TAG-ck-<mode>-<i>``, keys ``key-<i % 29>``, librdkafka's partitioner), then
reads the topic back read_committed with its consumer until it has every value
sent; prints one JSON line: the delivery reports, the values sent, and the
values of those read, per partition in offset order. Exits non-zero on any error.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import confluent_kafka


def main(bootstrap: str, topic: str, ca: str, tag: str, n: int) -> None:
    tls = {"bootstrap.servers": bootstrap, "security.protocol": "SSL", "ssl.ca.location": ca}
    reports: list[tuple[str, int, int]] = []
    sent: list[str] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            raise SystemExit(f"delivery failed: {err}")
        reports.append((msg.value().decode(), msg.partition(), msg.offset()))

    modes: dict[str, dict[str, Any]] = {
        "plain": {"enable.idempotence": False, "acks": 1},
        "idempotent": {"enable.idempotence": True},
        "transactional": {"transactional.id": f"{tag}-ck"},
    }
    for mode, settings in modes.items():
        producer = confluent_kafka.Producer({**tls, "linger.ms": 5, **settings})
        if mode == "transactional":
            producer.init_transactions(60)
            producer.begin_transaction()
        for i in range(n):
            value = f"{tag}-ck-{mode}-{i}"
            producer.produce(topic, value.encode(), key=b"key-%d" % (i % 29), on_delivery=report)
            sent.append(value)
        if mode == "transactional":
            producer.commit_transaction(60)
        if producer.flush(60) != 0:
            raise SystemExit(f"{mode}: records left unsent")
    consumer = confluent_kafka.Consumer(
        {**tls, "group.id": f"{tag}-ck", "isolation.level": "read_committed"}
    )
    partitions = consumer.list_topics(topic, 60).topics[topic].partitions
    consumer.assign(
        [
            confluent_kafka.TopicPartition(topic, p, confluent_kafka.OFFSET_BEGINNING)
            for p in partitions
        ]
    )
    read: dict[int, list[str]] = {p: [] for p in partitions}
    wanted = set(sent)
    seen = 0
    while seen < len(wanted):
        msg = consumer.poll(1)
        if msg is None:
            continue
        if msg.error():
            raise SystemExit(f"consumer: {msg.error()}")
        value = msg.value().decode()
        if value in wanted:  # the topic's other records are other clients'
            read[msg.partition()].append(value)
            seen += 1
    consumer.close()
    print(json.dumps({"reports": reports, "sent": sent, "read": read}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5]))
