"""Proxy benchmark: what going through ``trafka proxy`` costs a real client.

The workload: ``--records`` records (default 300,000) of ``--size`` bytes
(default 100) with ``--keys`` distinct keys (default 1,000), to a topic of
``--partitions`` partitions (default 12), produced by confluent-kafka
(librdkafka; acks=1, not idempotent, its default CRC32 partitioner, lz4), then
read back by a confluent-kafka consumer.

Paths, each measured in the same run against the same broker process:

* **direct**: the client talks to brokerlite.
* **proxy, route none**: through ``trafka proxy --route-keys none`` (address
  rewriting and byte-for-byte forwarding only).
* **proxy, murmur2**: through ``trafka proxy`` (every batch decoded; those
  with records for other partitions rebuilt, lz4 again).

brokerlite and the proxies run in their own processes (``trafka broker``,
``trafka proxy``), as in production. The figures are records per second and
the ratio to the direct path. Run: ``python bench/proxy.py``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic


def _start(args: list[str], pattern: str) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-m", "trafka.tools.cli", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        match = re.search(pattern, line)
        if match:
            return proc, match.group(1)
    raise RuntimeError(f"{args[0]} did not start")


@contextmanager
def running(args: list[str], pattern: str) -> Iterator[str]:
    proc, address = _start(args, pattern)
    try:
        yield address
    finally:
        proc.terminate()
        proc.wait(10)


def produce(servers: str, topic: str, records: int, size: int, keys: int) -> float:
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "acks": 1,
            "enable.idempotence": False,
            "compression.type": "lz4",
            "linger.ms": 5,
            "queue.buffering.max.messages": 2_000_000,
            "queue.buffering.max.kbytes": 2_000_000,
        }
    )
    value = b"x" * size
    key_list = [b"key-%d" % i for i in range(keys)]
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                producer.produce(topic, value, key_list[i % keys])
                break
            except BufferError:
                producer.poll(0.01)
    if producer.flush(120):
        raise RuntimeError("records left unsent")
    return records / (time.perf_counter() - start)


def consume(servers: str, topic: str, partitions: int, records: int) -> float:
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"bench-{time.time_ns()}",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    seen = 0
    start = time.perf_counter()
    deadline = start + 120
    while seen < records and time.perf_counter() < deadline:
        for message in consumer.consume(10_000, 1.0):
            if message.error() is None:
                seen += 1
    elapsed = time.perf_counter() - start
    consumer.close()
    if seen < records:
        raise RuntimeError(f"read {seen} of {records} records")
    return records / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=12)
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory() as data,
        running(
            ["broker", "--no-announce", "--listen", "127.0.0.1:0", "--data-dir", data],
            r"ready on (127\.0\.0\.1:\d+)",
        ) as broker,
    ):
        paths = {"direct": None, "proxy, route none": "none", "proxy, murmur2": "murmur2"}
        results: dict[str, tuple[float, float]] = {}
        for name, route in paths.items():
            topic = f"bench-{route or 'direct'}"
            admin = AdminClient({"bootstrap.servers": broker})
            admin.create_topics([NewTopic(topic, args.partitions, 1)])[topic].result(30)
            if route is None:
                servers = broker
                results[name] = (
                    produce(servers, topic, args.records, args.size, args.keys),
                    consume(servers, topic, args.partitions, args.records),
                )
                continue
            proxy_args = [
                "proxy",
                "--no-announce",
                "--upstream",
                broker,
                "--listen",
                "127.0.0.1:0",
            ]
            with running(
                [*proxy_args, "--route-keys", route], r"proxy on (127\.0\.0\.1:\d+)"
            ) as servers:
                results[name] = (
                    produce(servers, topic, args.records, args.size, args.keys),
                    consume(servers, topic, args.partitions, args.records),
                )

    print(
        f"proxy: {args.records:,} records of {args.size} B, {args.keys:,} keys, "
        f"{args.partitions} partitions, confluent-kafka (lz4)"
    )
    base_p, base_c = results["direct"]
    print(f"{'path':<20}{'produce rec/s':>16}{'ratio':>8}{'consume rec/s':>16}{'ratio':>8}")
    for name, (p, c) in results.items():
        print(f"{name:<20}{p:>16,.0f}{p / base_p:>8.2f}{c:>16,.0f}{c / base_c:>8.2f}")


if __name__ == "__main__":
    main()
