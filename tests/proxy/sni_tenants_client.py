"""confluent-kafka as a tenant picked by its SNI label
(tests/proxy/test_proxy_sni_tenants.py), run as a process of its own whose
/etc/hosts names the proxy's SNI names 127.0.0.1 (librdkafka resolves in C),
or by its listener (tests/proxy/test_proxy_listener_tenants.py: CA ``-``,
plaintext).

    python sni_tenants_client.py BOOTSTRAP TOPIC GROUP CA TAG N

Sends N records (values ``TAG-<i>``, idempotent) to TOPIC, reads them back
with a consumer in GROUP and commits, then lists the topics (with the brokers'
hosts and ports librdkafka's metadata names) and the consumer groups; prints
one JSON line.
Exits non-zero on any error.
"""

from __future__ import annotations

import json
import sys
from typing import Any

import confluent_kafka
import confluent_kafka.admin


def main(bootstrap: str, topic: str, group: str, ca: str, tag: str, n: int) -> None:
    tls = {"bootstrap.servers": bootstrap}
    if ca != "-":
        tls.update({"security.protocol": "SSL", "ssl.ca.location": ca})
    errors: list[str] = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            errors.append(str(err))

    producer = confluent_kafka.Producer({**tls, "enable.idempotence": True, "linger.ms": 5})
    sent = [f"{tag}-{i}" for i in range(n)]
    for value in sent:
        producer.produce(topic, value.encode(), key=value.encode(), on_delivery=report)
    if producer.flush(60) != 0 or errors:
        raise SystemExit(f"records left unsent: {errors}")
    consumer = confluent_kafka.Consumer(
        {**tls, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    consumer.subscribe([topic])
    read: list[str] = []
    while len(read) < n:
        msg = consumer.poll(1)
        if msg is None:
            continue
        if msg.error():
            raise SystemExit(f"consumer: {msg.error()}")
        read.append(msg.value().decode())
    consumer.commit(asynchronous=False)
    metadata = consumer.list_topics(timeout=60)
    consumer.close()
    admin = confluent_kafka.admin.AdminClient(tls)
    groups = admin.list_consumer_groups(request_timeout=60).result(timeout=60)
    print(
        json.dumps(
            {
                "read": read,
                "topics": sorted(metadata.topics),
                "brokers": sorted(b.host for b in metadata.brokers.values()),
                "ports": sorted(b.port for b in metadata.brokers.values()),
                "groups": sorted(g.group_id for g in groups.valid),
            }
        )
    )


if __name__ == "__main__":
    main(*sys.argv[1:6], int(sys.argv[6]))
