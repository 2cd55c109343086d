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

Then a stream's triggers, as its driver asks at each one
(:func:`trafka.spark._kafka.latest_offsets` on a planner kept between triggers;
no wait at the brokers, no Spark): ``--triggers`` of them, timed one by one, with
``partitionDiscovery=trigger`` (the default: the read's partitions listed at every
trigger, one Metadata request) and ``metadataMaxAge`` (the list kept), in
``--rounds`` alternating rounds after a warm-up trigger each. Printed: the median
wall and CPU milliseconds of a trigger in each mode and its requests, and the
median of the partition listing alone (the Metadata request on the kept, warm
connection). ``--other-topics`` adds topics the read does not subscribe to (a
Metadata answer lists every topic of the cluster).

Run: ``python bench/spark_plan.py``; ``--smoke`` plans 3 queries of one topic
of 2 partitions and 3 triggers of each mode, whatever the other options say
(tests/bench/test_bench_smoke.py).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections import Counter
from functools import partial
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


def _median_ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


async def _list_partitions(
    planner: _kafka.Planner, times: int, admin: Any, _consumer: Any
) -> list[float]:
    """Seconds of each of ``times`` partition listings, one after another, on
    the planner's loop (no hop between threads in them)."""
    took = []
    for _ in range(times):
        began = time.perf_counter()
        await planner.partitions(admin)
        took.append(time.perf_counter() - began)
    return took


def stream_triggers(
    servers: str, topics: list[str], triggers: int, rounds: int, requests: Counter[int]
) -> None:
    """A stream's triggers in each ``partitionDiscovery`` mode (see the module doc)."""
    modes = ("trigger", "metadataMaxAge")
    walls: dict[str, list[float]] = {mode: [] for mode in modes}
    cpus: dict[str, list[float]] = {mode: [] for mode in modes}
    asked: dict[str, Counter[int]] = {mode: Counter() for mode in modes}
    listing: list[float] = []
    for _ in range(rounds):
        for mode in modes:
            opts = parse_read_options(
                {
                    "kafka.bootstrap.servers": servers,
                    "subscribe": ",".join(topics),
                    "partitionDiscovery": mode,
                },
                streaming=True,
            )
            planner = _kafka.Planner(opts, keep=True)
            try:
                start = _kafka.starting_offsets(opts, planner)
                _kafka.latest_offsets(opts, since=start, planner=planner)  # connected, warm
                requests.clear()
                for _ in range(triggers):
                    wall, cpu = time.perf_counter(), time.process_time()
                    _kafka.latest_offsets(opts, since=start, planner=planner)
                    walls[mode].append(time.perf_counter() - wall)
                    cpus[mode].append(time.process_time() - cpu)
                asked[mode].update(requests)
                if mode == "trigger":
                    listing.extend(planner.call(partial(_list_partitions, planner, triggers)))
            finally:
                planner.close()
    print(f"stream triggers, {rounds} x {triggers} per mode, median ms wall / CPU:")
    for mode in modes:
        n = rounds * triggers
        per = ", ".join(f"{api(k).name} {c / n:.1f}" for k, c in sorted(asked[mode].items()))
        print(
            f"  partitionDiscovery={mode}: {_median_ms(walls[mode]):.2f} / "
            f"{_median_ms(cpus[mode]):.2f}; requests per trigger: {per}"
        )
    print(
        f"  the partition listing alone (Metadata on the kept connection): "
        f"{_median_ms(listing):.3f} ms wall (median of {len(listing)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--queries", type=int, default=20)
    parser.add_argument("--topics", type=int, default=1)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--triggers", type=int, default=200, help="a stream's triggers per round")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds of triggers")
    parser.add_argument(
        "--other-topics", type=int, default=0, help="topics of the cluster the reads do not read"
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, not a measurement: 3 queries, 1 topic, 2 partitions",
    )
    args = parser.parse_args()
    if args.smoke:
        args.queries, args.topics, args.partitions = 3, 1, 2
        args.triggers, args.rounds, args.other_topics = 3, 1, 0
    with (
        tempfile.TemporaryDirectory() as data,
        broker_in_thread(port=0, host="127.0.0.1", data_dir=Path(data)) as broker,
    ):
        topics = [f"plan-{i}" for i in range(args.topics)]
        _setup(broker.bootstrap_servers, topics, args.partitions)
        if args.other_topics:
            _setup(
                broker.bootstrap_servers,
                [f"other-{i}" for i in range(args.other_topics)],
                args.partitions,
            )
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
        stream_triggers(broker.bootstrap_servers, topics, args.triggers, args.rounds, requests)


if __name__ == "__main__":
    main()
