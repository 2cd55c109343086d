"""Client benchmark: trafka's producer and consumer against aiokafka, kafka-python and
confluent-kafka, all talking to one brokerlite (``make bench``).

The workload: ``--records`` records (default 1,000,000) of ``--size`` bytes
(default 100), no key, no headers, no compression, acks=1 and each client's
default batching, into a topic of ``--partitions`` partitions (default 1).

* One brokerlite runs in its own process (``trafka broker --listen
  127.0.0.1:0``, its data in a temporary directory); its "ready on" log line
  gives the port. It is stopped (SIGTERM, then SIGKILL) and its directory
  removed at the end, whatever happens.
* Every client gets its own topic (``bench-<client>-<run id>``), created
  before its run, so that one client's records never count for another.
* Each measurement runs in a fresh worker process (this script with
  ``--worker``), one at a time, so that the clients do not share an
  interpreter, a GIL or memory accounting, and a hung client is killed after
  ``--timeout`` seconds without stopping the others.
* **produce**: from the first send to the last acknowledgement (the final
  flush), in records per second.
* **consume**: a consumer without a group reads the partition(s) from the
  beginning until it has every record, in records per second. It reads the
  topic its own client produced.
* For trafka's producer the worker also reports its peak memory: the growth
  of the process's peak RSS over its size before producing, and the peak of
  what the accumulator counted against ``buffer.memory``.

Ratios are trafka / other, so above 1 means trafka is faster. The broker is
shared and written in Python, so it may be the limit for the fast clients;
the raw broker numbers are in ``bench/broker.py``. This is a measurement, not
a test: nothing fails on a slow result.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

CLIENTS = ("trafka", "aiokafka", "kafka-python", "confluent-kafka")
BUFFER_MEMORY = 32 * 1024 * 1024  # every client's default (librdkafka's is 1 GiB of queue)


def _rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return _rss_bytes()


# -- workers: each runs in its own process and prints one JSON line ----------------------


def produce_trafka(bs: str, topic: str, n: int, size: int) -> dict[str, Any]:
    import trio

    from trafka.sdk import open_producer

    value = b"x" * size
    out: dict[str, Any] = {}

    async def main() -> None:
        async with open_producer(bootstrap_servers=bs, acks=1) as producer:
            await producer.partitions_for(topic)
            acc = producer._acc
            base_rss = _current_rss()
            peak_used = 0
            start = time.perf_counter()
            send = producer.send
            for i in range(n):
                await send(topic, value)
                if i & 255 == 0:
                    used = acc.used_memory
                    if used > peak_used:
                        peak_used = used
            await producer.flush()
            out["seconds"] = time.perf_counter() - start
            out["peak_rss_growth"] = max(_rss_bytes() - base_rss, 0)
            out["peak_accounted"] = peak_used
            out["buffer_memory"] = producer.config.buffer_memory

    trio.run(main)
    return out


def consume_trafka(bs: str, topic: str, n: int, partitions: int) -> dict[str, Any]:
    import trio

    from trafka.sdk import TopicPartition, open_consumer

    out: dict[str, Any] = {}

    async def main() -> None:
        async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as c:
            c.assign([TopicPartition(topic, p) for p in range(partitions)])
            got = 0
            start = time.perf_counter()
            while got < n:
                batch = await c.getmany(timeout_ms=1000)
                for records in batch.values():
                    got += len(records)
            out["seconds"] = time.perf_counter() - start
            out["records"] = got

    trio.run(main)
    return out


def produce_aiokafka(bs: str, topic: str, n: int, size: int) -> dict[str, Any]:
    import asyncio

    from aiokafka import AIOKafkaProducer

    value = b"x" * size
    out: dict[str, Any] = {}

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bs, acks=1)
        await producer.start()
        try:
            await producer.partitions_for(topic)
            start = time.perf_counter()
            for _ in range(n):
                await producer.send(topic, value)
            await producer.flush()
            out["seconds"] = time.perf_counter() - start
        finally:
            await producer.stop()

    asyncio.run(main())
    return out


def consume_aiokafka(bs: str, topic: str, n: int, partitions: int) -> dict[str, Any]:
    import asyncio

    from aiokafka import AIOKafkaConsumer, TopicPartition

    out: dict[str, Any] = {}

    async def main() -> None:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bs, auto_offset_reset="earliest", enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
            got = 0
            start = time.perf_counter()
            while got < n:
                batch = await consumer.getmany(timeout_ms=1000)
                for records in batch.values():
                    got += len(records)
            out["seconds"] = time.perf_counter() - start
            out["records"] = got
        finally:
            await consumer.stop()

    asyncio.run(main())
    return out


def produce_kafka_python(bs: str, topic: str, n: int, size: int) -> dict[str, Any]:
    from kafka import KafkaProducer

    value = b"x" * size
    producer = KafkaProducer(bootstrap_servers=bs, acks=1)
    try:
        producer.partitions_for(topic)
        start = time.perf_counter()
        send = producer.send
        for _ in range(n):
            send(topic, value)
        producer.flush()
        return {"seconds": time.perf_counter() - start}
    finally:
        producer.close()


def consume_kafka_python(bs: str, topic: str, n: int, partitions: int) -> dict[str, Any]:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", enable_auto_commit=False
    )
    try:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        start = time.perf_counter()
        while got < n:
            for records in consumer.poll(timeout_ms=1000).values():
                got += len(records)
        return {"seconds": time.perf_counter() - start, "records": got}
    finally:
        consumer.close()


def produce_confluent(bs: str, topic: str, n: int, size: int) -> dict[str, Any]:
    from confluent_kafka import Producer

    value = b"x" * size
    producer = Producer({"bootstrap.servers": bs, "acks": 1})
    producer.list_topics(topic, timeout=10)
    start = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i in range(n):
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:  # librdkafka's queue is full: serve delivery reports
                poll(0.05)
        if i & 1023 == 0:
            poll(0)
    left = producer.flush(120)
    return {"seconds": time.perf_counter() - start, "undelivered": left}


def consume_confluent(bs: str, topic: str, n: int, partitions: int) -> dict[str, Any]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"bench-{uuid.uuid4().hex}",  # required; nothing is committed
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = 0
        start = time.perf_counter()
        while got < n:
            for m in consumer.consume(num_messages=10_000, timeout=1.0):
                if m.error() is None:
                    got += 1
        return {"seconds": time.perf_counter() - start, "records": got}
    finally:
        consumer.close()


WORKERS: dict[tuple[str, str], Callable[..., dict[str, Any]]] = {
    ("trafka", "produce"): produce_trafka,
    ("trafka", "consume"): consume_trafka,
    ("aiokafka", "produce"): produce_aiokafka,
    ("aiokafka", "consume"): consume_aiokafka,
    ("kafka-python", "produce"): produce_kafka_python,
    ("kafka-python", "consume"): consume_kafka_python,
    ("confluent-kafka", "produce"): produce_confluent,
    ("confluent-kafka", "consume"): consume_confluent,
}


def run_worker(args: argparse.Namespace) -> int:
    fn = WORKERS[(args.client, args.worker)]
    extra = args.size if args.worker == "produce" else args.partitions
    result = fn(args.bootstrap, args.topic, args.records, extra)
    print(json.dumps(result), flush=True)
    return 0


# -- the driver -------------------------------------------------------------------------------


class Broker:
    """brokerlite in a child process, with its data in a temporary directory."""

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="trafka-bench-clients-"))
        self.log_path = self.dir / "broker.log"
        self.proc: subprocess.Popen[bytes] | None = None
        self.bootstrap = ""

    def start(self, timeout: float = 30.0) -> None:
        log = open(self.log_path, "wb")  # noqa: SIM115 - the child keeps writing to it
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trafka.tools.cli",
                "broker",
                "--listen",
                "127.0.0.1:0",
                "--data-dir",
                str(self.dir / "data"),
                "--group-initial-rebalance-delay-ms",
                "0",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log_path.read_text(errors="replace")
            match = re.search(r"ready on (127\.0\.0\.1:\d+)", text)
            if match:
                self.bootstrap = match.group(1)
                return
            if self.proc.poll() is not None:
                raise RuntimeError(f"brokerlite exited at startup:\n{text}")
            time.sleep(0.05)
        raise RuntimeError("brokerlite did not report ready in time")

    def stop(self) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    import trio

    from trafka.sdk import NewTopic, open_admin

    async def main() -> None:
        with trio.fail_after(30):
            async with open_admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics([NewTopic(topic, partitions)])

    trio.run(main)


def measure(
    args: argparse.Namespace, client: str, phase: str, bootstrap: str, topic: str
) -> dict[str, Any]:
    cmd = [
        sys.executable,
        __file__,
        "--worker",
        phase,
        "--client",
        client,
        "--bootstrap",
        bootstrap,
        "--topic",
        topic,
        "--records",
        str(args.records),
        "--size",
        str(args.size),
        "--partitions",
        str(args.partitions),
    ]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    except subprocess.TimeoutExpired:
        return {"error": f"timed out after {args.timeout:g} s"}
    if done.returncode != 0:
        tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        return {"error": f"exit {done.returncode}: {tail}"}
    try:
        result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    except (IndexError, ValueError):
        return {"error": f"no result: {done.stdout[-200:]!r}"}
    result["rate"] = args.records / result["seconds"]
    return result


def _fmt_rate(result: dict[str, Any] | None) -> str:
    if not result:
        return "-"
    if "error" in result:
        return "failed"
    return f"{result['rate']:,.0f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per client")
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    parser.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"comma-separated, from {', '.join(CLIENTS)}",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    # Worker mode (internal): one measurement in this process.
    parser.add_argument("--worker", choices=["produce", "consume"], help=argparse.SUPPRESS)
    parser.add_argument("--client", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        return run_worker(args)

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown client(s): {', '.join(sorted(unknown))}")
    broker = Broker()
    # SIGTERM (e.g. from make or CI) must still stop the broker and remove its files.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    results: dict[str, dict[str, dict[str, Any]]] = {}
    run_id = uuid.uuid4().hex[:8]
    try:
        broker.start()
        print(
            f"brokerlite at {broker.bootstrap}; {args.records:,} records of {args.size} bytes, "
            f"acks=1, {args.partitions} partition(s), Python {sys.version.split()[0]}",
            flush=True,
        )
        for client in clients:
            topic = f"bench-{client}-{run_id}"
            create_topic(broker.bootstrap, topic, args.partitions)
            produced = measure(args, client, "produce", broker.bootstrap, topic)
            results[client] = {"produce": produced}
            print(f"  {client:<16} produce {_fmt_rate(produced):>12} records/s", flush=True)
            if "error" in produced:
                print(f"    {produced['error']}", flush=True)
                continue
            consumed = measure(args, client, "consume", broker.bootstrap, topic)
            results[client]["consume"] = consumed
            print(f"  {client:<16} consume {_fmt_rate(consumed):>12} records/s", flush=True)
            if "error" in consumed:
                print(f"    {consumed['error']}", flush=True)
    finally:
        broker.stop()

    print()
    header = f"{'client':<16} {'produce rec/s':>14} {'consume rec/s':>14}"
    print(header)
    print("-" * len(header))
    for client, r in results.items():
        print(f"{client:<16} {_fmt_rate(r.get('produce')):>14} {_fmt_rate(r.get('consume')):>14}")
    ours = results.get("trafka", {})
    if ours:
        print()
        print("trafka / other (above 1: trafka is faster)")
        for client, r in results.items():
            if client == "trafka":
                continue
            cells = []
            for phase in ("produce", "consume"):
                a, b = ours.get(phase), r.get(phase)
                ok = a and b and "error" not in a and "error" not in b
                cells.append(f"{a['rate'] / b['rate']:.2f}" if ok else "-")  # type: ignore[index]
            print(f"  vs {client:<16} produce {cells[0]:>6}   consume {cells[1]:>6}")
        p = ours.get("produce", {})
        if "peak_rss_growth" in p:
            mib = 1024 * 1024
            print()
            print(
                f"trafka producer memory: peak RSS grew {p['peak_rss_growth'] / mib:.1f} MiB; "
                f"peak accounted {p['peak_accounted'] / mib:.1f} MiB "
                f"of buffer.memory {p['buffer_memory'] / mib:.0f} MiB"
            )
    if args.json:
        print(json.dumps(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
