"""A batch read's planning on the driver, without Spark: what
``spark.read.format("trafka")...load()`` asks the brokers before any task runs
(:func:`trafka.spark._kafka.batch_offsets`), timed and counted.

A brokerlite in this process (on a thread) holds ``--topics`` topics of
``--partitions`` partitions with a few records each; a read subscribed to them
all, from the earliest to the latest offsets, is planned ``--queries`` times in
a row in this process, as one Spark session's queries are. Printed: the wall
and CPU milliseconds of the first query and the median of the others (the
process's CPU: the broker's thread included), the connections the broker
accepted, and the requests it handled per query, by API.

Run: ``python bench/spark_plan.py``; ``--smoke`` plans 3 queries of one topic
of 2 partitions, whatever the other options say (tests/bench/test_bench_smoke.py).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

import anyio

from trafka.brokerlite import broker_in_thread
from trafka.codec.protocol import api
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.spark import _kafka
from trafka.spark.options import parse_read_options


def _setup(servers: str, topics: list[str], partitions: int) -> None:
    async def go() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(t, partitions) for t in topics])
        async with open_producer(bootstrap_servers=servers) as producer:
            for t in topics:
                for p in range(partitions):
                    await producer.send(t, b"x", partition=p)
            await producer.flush()

    anyio.run(go, backend="trio")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--topics", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, not a measurement: 3 queries, 1 topic, 2 partitions",
    )
    args = parser.parse_args()
    if args.smoke:
        args.queries, args.topics, args.partitions = 3, 1, 2
    with (
        tempfile.TemporaryDirectory() as data,
        broker_in_thread(port=0, host="127.0.0.1", data_dir=Path(data)) as broker,
    ):
        topics = [f"plan-{i}" for i in range(args.topics)]
        _setup(broker.bootstrap_servers, topics, args.partitions)
        core = broker.broker
        requests: Counter[int] = Counter()
        connections = 0
        handled, opened = core.metrics.handled, core.connection_opened

        def count_request(api_key: int, seconds: float) -> None:
            requests[api_key] += 1
            handled(api_key, seconds)

        def count_connection(*a: Any, **k: Any) -> None:
            nonlocal connections
            connections += 1
            opened(*a, **k)

        core.metrics.handled = count_request  # type: ignore[method-assign]
        core.connection_opened = count_connection  # type: ignore[method-assign]
        opts = parse_read_options(
            {
                "kafka.bootstrap.servers": broker.bootstrap_servers,
                "subscribe": ",".join(topics),
                "startingOffsets": "earliest",
                "endingOffsets": "latest",
            },
            streaming=False,
        )
        walls, cpus = [], []
        for _ in range(args.queries):
            wall, cpu = time.perf_counter(), time.process_time()
            _kafka.batch_offsets(opts)
            walls.append((time.perf_counter() - wall) * 1000)
            cpus.append((time.process_time() - cpu) * 1000)
        rest = slice(1, None) if args.queries > 1 else slice(None)
        print(
            f"{args.queries} queries, {args.topics} topic(s) x {args.partitions} partitions: "
            f"first {walls[0]:.1f} ms wall / {cpus[0]:.1f} ms CPU, then median "
            f"{statistics.median(walls[rest]):.1f} ms wall / {statistics.median(cpus[rest]):.1f} "
            f"ms CPU; {connections / args.queries:.1f} connections per query"
        )
        per_query = ", ".join(
            f"{api(k).name} {n / args.queries:.1f}" for k, n in sorted(requests.items())
        )
        print(f"requests per query: {sum(requests.values()) / args.queries:.1f} ({per_query})")


if __name__ == "__main__":
    main()
