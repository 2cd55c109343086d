"""Proxy benchmark: what going through ``trafka proxy`` costs a real client.

The workload (issue #34): ``--records`` records (default 3,000,000) of
``--size`` bytes (default 100) of random, incompressible values (drawn from
``os.urandom`` once, before any clock starts: a pool of 65,536 distinct values
used in turn, so no batch holds one twice), with ``--keys`` distinct keys
(default 1,000), to a topic of ``--partitions`` partitions (default 12),
produced by confluent-kafka (librdkafka, its default CRC32 partitioner,
``--compression`` lz4 unless told otherwise, linger.ms=5), then read back by a
confluent-kafka consumer. Two producers:

* **plain**: acks=1, not idempotent;
* **idempotent**: enable.idempotence=true, acks=all.

Paths, each measured in the same run against the same brokers:

* **direct**: the client talks to brokerlite.
* **route none**: through ``trafka proxy --route-keys none`` (address
  rewriting and byte-for-byte forwarding only).
* **murmur2**: through ``trafka proxy`` (every batch decoded; those with
  records for other partitions rebuilt and sent to their partitions' leaders
  over the proxy's pooled upstream connections).
* **murmur2 workers**: the same through ``trafka proxy --workers`` (``--workers``,
  default 2: processes sharing the bootstrap port, see docs/proxy.md). One
  client reaches one worker, so give it ``--clients`` 2 or more (producers
  running at once, the records split between them; the kernel places each
  client, so two can reach the same worker). Its ratio to ``murmur2`` of the
  same run is printed; its proxy CPU counts the supervisor and every worker.

Setups (``--cluster``, default ``1,3``): ``1`` is one single-node brokerlite
process (no ZooKeeper); ``N`` > 1 is N broker processes with a private
ZooKeeper (or a chroot on the running server ``TRAFKA_BENCH_ZOOKEEPER`` names:
bench/_kafka.py), the topic's ``--replication`` (default 1: replication would measure
brokerlite, not the proxy; the partitions' leaders are still spread over the N
brokers, so routing moves records across brokers). Brokers and proxies run in
their own processes (``trafka broker``, ``trafka proxy``), as in production.

Figures: records per second (produce: first ``produce()`` until ``flush()``
returns; consume: until every record is read) and the ratio to the direct path
of the same setup and producer; CPU seconds per 100,000 records of the proxy
process, the broker process(es) and this process (the client, librdkafka's
threads included), from ``/proc/<pid>/stat``. After each run the records read
back are counted against the records sent and the topic's high watermarks (no
record lost or written twice; where murmur2 put them is the tests' business).
Through a proxy (not ``--workers``), its metrics (``--metrics-listen``) give the
Produce requests it got from the client and its round trips upstream while
producing ("Produce requests N in, M out").

The consume path on its own (issue #60): each proxied path's consume rate
against direct's, the proxy's CPU per 100,000 records read, and what was busy
while the consumer read (the proxy, the brokers, the client, the machine, as
shares of the cores each can use), naming the first side near its ceiling as
what limits the path, or the round trips when none is.

Idle connections (``--idle``, default 2,000; 0 skips it): single small produce
round trips (one 100-byte record, acks=1, linger.ms=0, waiting for its
delivery report before the next) directly, through the routing proxy, and
through the routing proxy while ``--idle`` other connections to it (spread over
its listeners, each having done one ApiVersions round trip) stay open and
silent; p50/p99 of ``--samples`` round trips (default 2,000) each, and the
proxy's resident memory and CPU while the connections sit idle. A figure, not a
test.

``--rounds N`` (``make bench``: 3) measures issue #83's direction N times and
gives the medians, with the range of the rounds: the proxy's CPU per MB/s of
the plain producer's runs through ``route none`` and ``murmur2``, and the
open-loop latency of those paths and of direct (the added latency is the
difference of the medians). Each path's rounds run one after the other through
the same proxy.

``--partitioner murmur2_random`` makes librdkafka place keyed records where the
proxy's murmur2 does: the routing path then checks every record and moves none,
which separates checking from moving. ``--py-spy DIR`` samples each proxy with
py-spy (``pip install py-spy`` into this Python's environment; ``--gil``, so
the stacks are those of the thread holding the GIL) into collapsed-stack files.

``--pin`` (Linux, two CPUs or more) produces and consumes on the first CPU and
moves the brokers and the proxy to the others, direct and proxied alike, as if
the client ran on a machine of its own: librdkafka's threads wake for every
record queued once its in-flight window is full, so a client whose answers come
later spins and, on shared cores, takes the CPU the proxy and the brokers need
(docs/proxy.md, *Sizing*).

``--upstream kafka`` puts Apache Kafka 4.x itself behind the proxy instead of
brokerlite (KRaft nodes started from the jars ``make peers`` fetched, full JIT;
tests/kafka_peers.py): ``1`` is one node, ``N`` is N nodes (combined broker and
controller); the topics' ``--replication`` as above.

Open-loop latency (``--rate``, records per second, one rate or several
comma-separated; 0 skips it; a smoke run takes the first): for each path and
rate of the plan, a plain producer (acks=1, linger.ms=0, no compression) is given
one keyed record every 1/rate seconds for ``--rate-seconds``, on schedule
whatever the answers do (a closed loop would wait and hide queueing), and each
record's latency is from its scheduled time to its delivery report. p50/p99 per
path, and what each adds over direct at the same rate: how operators size a
proxy below saturation. A routing path's requests of one record each cost the
proxy far more than a forwarded one's (docs/proxy.md, *Sizing*), so a low rate
next to a high one shows it below and near its saturation.

The machine's other load moves every figure; run it on a quiet machine for
absolute numbers. Run: ``python bench/proxy.py`` (``--cluster 1 --records
300000`` for the old single-broker run).
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import itertools
import json
import os
import re
import shlex
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from statistics import median
from typing import Any

from _kafka import kafka_cluster, zookeeper_chroot  # bench/ is the script's directory
from _open_loop import open_loop as measure_open_loop
from _open_loop import smoke_window
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from trafka.brokerlite.dev.local_cluster import ClusterProcesses, free_port

VALUE_POOL = 65_536  # distinct random values, used in turn
CLK_TCK = os.sysconf("SC_CLK_TCK")
PATHS = {
    "direct": None,
    "route none": "none",
    "murmur2": "murmur2",
    "murmur2 workers": "murmur2+workers",  # trafka proxy --workers (--workers N)
    "murmur2 journal": "murmur2+journal",  # --journal DIR: exactly once across proxy restarts
    # --journal topic: the placements in the cluster, shared by every proxy instance
    "murmur2 topic": "murmur2+topic",
    # The record-encryption filter (key-file KMS) on every topic: not by default.
    "none encrypted": "none+encrypt",
    "murmur2 encrypted": "murmur2+encrypt",
}
# The paths --paths leaves out unless named.
OPT_IN = ("murmur2 workers", "none encrypted", "murmur2 encrypted")
ENCRYPTED = tuple(path for path, mode in PATHS.items() if mode and mode.endswith("+encrypt"))
#: The encrypted paths' producers' batch.size unless --batch-size gives one, as
#: docs/proxy.md ("Batches grow") advises: librdkafka's own (1,000,000) fills
#: batches that pass the broker's max.message.bytes (1 MB) once their 100-byte
#: values are frames (about twice the size), refused MESSAGE_TOO_LARGE when
#: forwarded (a routed batch is split by partition first).
ENCRYPTED_BATCH_SIZE = 400_000
PATH_W = max(map(len, PATHS)) + 2  # the tables' path column
PRODUCERS = ("plain", "idempotent")


# -- processes -------------------------------------------------------------------------


def with_children(pid: int) -> list[int]:
    """``pid`` and its child processes now (a proxy's workers)."""
    children: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*/children"):
        children += [int(c) for c in task.read_text().split()]
    return [pid, *children]


def pin(pids: list[int], cpus: set[int]) -> None:
    """Every thread of these processes onto ``cpus`` (the threads they start
    later inherit it); a thread gone meanwhile is skipped."""
    for pid in pids:
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                os.sched_setaffinity(int(task.name), cpus)


@contextmanager
def client_cpu(cpus: set[int] | None) -> Iterator[None]:
    """The calling thread, and the client threads it starts meanwhile
    (librdkafka's), on ``cpus`` (None: unchanged)."""
    if cpus is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, cpus)
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def cpu_seconds(pids: list[int]) -> float:
    """User + system CPU seconds of these processes (all their threads), so far."""
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/stat") as stat:
            # The command name (field 2) may hold spaces: count from its ")".
            fields = stat.read().rpartition(")")[2].split()
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15)
    return total / CLK_TCK


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


@dataclass
class Service:
    """A ``trafka`` process of ours: its address and process."""

    address: str
    proc: subprocess.Popen[bytes]
    metrics: str | None = None  # the proxy's --metrics-listen address


@contextmanager
def service(args: list[str], pattern: str, log: Path, timeout: float = 60) -> Iterator[Service]:
    """Run ``trafka <args>`` with its output in ``log``; yield once ``pattern``
    (one group: the address) appears there. A file, not a pipe: a pipe nobody
    reads stops the process once it is full."""
    start = log.stat().st_size if log.exists() else 0  # a reused log: only what follows
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "trafka.tools.cli", *args],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, PYTHONUNBUFFERED="1"),
        )
    try:
        deadline = time.monotonic() + timeout
        while True:
            with open(log, "rb") as text:
                text.seek(start)
                match = re.search(pattern, text.read().decode(errors="replace"))
            if match:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.05)
        yield Service(match.group(1), proc)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@dataclass
class Brokers:
    name: str
    servers: str
    pids: list[int]
    replication: int = 1  # of the topics it is given


@contextmanager
def kafka_brokers(nodes: int, root: Path, replication: int = 1) -> Iterator[Brokers]:
    """Apache Kafka 4.x: ``nodes`` KRaft nodes (combined mode), full JIT (or the
    running cluster bench/_kafka.py's RUNNING names)."""
    with kafka_cluster(root / f"kafka-{nodes}", nodes) as cluster:
        yield Brokers(
            f"Kafka {nodes}", cluster.bootstrap_servers, cluster.pids, min(replication, nodes)
        )


@contextmanager
def brokers(
    nodes: int, root: Path, replication: int = 1, upstream: str = "brokerlite"
) -> Iterator[Brokers]:
    if upstream == "kafka":
        with kafka_brokers(nodes, root, replication) as setup:
            yield setup
        return
    if nodes == 1:
        with service(
            [
                "broker",
                "--no-announce",
                "--listen",
                f"127.0.0.1:{free_port()}",
                "--data-dir",
                str(root / "single"),
            ],
            r"ready on (127\.0\.0\.1:\d+)",
            root / "broker.log",
        ) as broker:
            yield Brokers("1 broker", broker.address, [broker.proc.pid])
        return
    # A private ZooKeeper, or a chroot on the smoke test's (bench/_kafka.py).
    cluster = ClusterProcesses(root / "cluster", nodes, zookeeper_connect=zookeeper_chroot())
    try:
        cluster.start(timeout=120)
        yield Brokers(
            f"{nodes} nodes",
            cluster.bootstrap_servers,
            [proc.pid for proc in cluster.procs.values()],
            min(replication, nodes),
        )
    finally:
        cluster.stop()


@contextmanager
def proxy(
    upstream: str, route: str, log: Path, profile: Path | None = None, workers: int = 2
) -> Iterator[Service]:
    """A ``trafka proxy`` process (``route`` ``murmur2+workers``: with
    ``--workers``); with ``profile``, py-spy samples it all along (collapsed
    stacks per thread in that file, for ``--py-spy``)."""
    route, _, journal = route.partition("+")
    # Its metrics, for the requests it got and sent (not with --workers: one port).
    metrics = None if journal == "workers" else f"127.0.0.1:{free_port()}"
    if journal == "encrypt":
        journal, encrypt = "", ["--config", str(encryption_config(log))]
    else:
        encrypt = []
    extra = (
        encrypt
        + (["--metrics-listen", metrics] if metrics else [])
        + (
            ["--journal", "topic"]
            if journal == "topic"
            else ["--workers", str(workers)]
            if journal == "workers"
            else ["--journal", str(log.with_suffix(".journal"))]
            if journal
            else []
        )
    )
    with service(
        [
            "proxy",
            "--no-announce",
            "--upstream",
            upstream,
            "--listen",
            "127.0.0.1:0",
            "--route-keys",
            route,
            *extra,
        ],
        # The supervisor's line, once every worker serves (theirs say "[worker k]").
        r"trafka\.proxy: proxy on (127\.0\.0\.1:\d+)",
        log,
    ) as running:
        running.metrics = metrics
        if profile is None:
            yield running
            return
        spy = subprocess.Popen(
            [
                str(Path(sys.executable).with_name("py-spy")),
                "record",
                "--pid",
                str(running.proc.pid),
                "--format=raw",
                "--gil",  # what holds the GIL: the proxy's one core of Python
                "--nonblocking",
                "--rate=200",
                f"--output={profile}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            yield running
        finally:
            spy.send_signal(signal.SIGINT)
            spy.wait(60)


def encryption_config(log: Path) -> Path:
    """A proxy configuration file whose one filter encrypts every topic's record
    values with a key-file KEK (docs/proxy.md, "Record encryption")."""
    from trafka.proxy.encryption import add_key_version

    keys = log.with_suffix(".keks.toml")
    add_key_version(keys, "bench")
    toml = log.with_suffix(".toml")
    toml.write_text(
        "[[filter]]\n"
        'use = "trafka.proxy.encryption:RecordEncryption"\n'
        f'settings = {{ kms = "keyfile", key_file = "{keys}", topics = {{ "[^_].*" = "bench" }} }}\n'
    )
    return toml


# -- topics ----------------------------------------------------------------------------


def admin_client(servers: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": servers, "log_level": 3})


def create_topic(servers: str, topic: str, partitions: int, replication: int) -> None:
    """Create the topic and wait until every partition has a leader that serves
    it: Apache Kafka names a leader in Metadata before that leader serves the
    partition, and a plain producer's records sent meanwhile can be lost (a
    smoke run against Kafka lost a partition's records so under load)."""
    admin = admin_client(servers)
    try:
        admin.create_topics([NewTopic(topic, partitions, replication)])[topic].result(60)
        deadline = time.monotonic() + 60
        ends = {TopicPartition(topic, p): OffsetSpec.latest() for p in range(partitions)}
        while True:
            try:
                info = admin.list_topics(topic=topic, timeout=5).topics.get(topic)
                if (
                    info is not None
                    and info.error is None
                    and len(info.partitions) == partitions
                    and all(p.leader >= 0 for p in info.partitions.values())
                ):
                    for future in admin.list_offsets(ends, request_timeout=5).values():
                        future.result(10)
                    return
            except KafkaException:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{topic}: no leader for every partition in 60 s")
            time.sleep(0.1)
    finally:
        del admin
        gc.collect()  # its connections go now


def delete_topic(servers: str, topic: str) -> None:
    """Free the disk a 3M-record topic takes (best effort)."""
    admin = admin_client(servers)
    try:
        admin.delete_topics([topic])[topic].result(60)
    except KafkaException:
        pass
    finally:
        del admin
        gc.collect()


# -- produce and consume ---------------------------------------------------------------


def producer_config(
    servers: str, kind: str, args: argparse.Namespace, replication: int = 1, path: str = ""
) -> dict[str, Any]:
    config: dict[str, Any] = {
        "bootstrap.servers": servers,
        "compression.type": args.compression,
        "partitioner": args.partitioner,
        "linger.ms": 5,
        "queue.buffering.max.messages": 2_000_000,
        "queue.buffering.max.kbytes": 2_000_000,
        "log_level": 3,
    }
    if args.batch_size:
        config["batch.size"] = args.batch_size
    elif path in ENCRYPTED:
        config["batch.size"] = ENCRYPTED_BATCH_SIZE
    if kind == "idempotent":
        config.update({"acks": "all", "enable.idempotence": True})
    elif args.smoke and replication > 1:
        # A smoke run checks that every record comes back. With acks=1 Kafka
        # acknowledges a record its followers may not have yet (its documentation
        # of acks: lost if the leader fails before they copy it): two smoke runs
        # on a fresh 3-node Kafka on a loaded machine read back ~65% of a plain
        # producer's acknowledged records on the direct path (no proxy), none
        # refused (the cause within Kafka not seen: its logs were at WARN).
        # acks=all keeps the check about the paths.
        config.update({"acks": "all", "enable.idempotence": False})
    else:
        config.update({"acks": 1, "enable.idempotence": False})
    return config


def produce(
    config: dict[str, Any],
    topic: str,
    records: int,
    values: list[bytes],
    keys: list[bytes],
    stats_ms: int = 1000,
    clients: int = 1,
) -> tuple[float, int, list[Any]]:
    """:func:`produce_one` by ``clients`` producers at once, each on a thread of
    its own with its share of the records: seconds from the start until the last
    is acknowledged, the requests retried (-1: unknown), and the failed records' errors."""
    if clients == 1:
        return produce_one(config, topic, records, values, keys, stats_ms)
    shares = [records // clients + (i < records % clients) for i in range(clients)]
    results: list[tuple[float, int, list[Any]] | BaseException] = [(0.0, 0, [])] * clients

    def run(i: int) -> None:
        try:
            results[i] = produce_one(
                {**config, "client.id": f"bench-{i}"}, topic, shares[i], values, keys, stats_ms
            )
        except BaseException as exc:
            results[i] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(clients)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for result in results:
        if isinstance(result, BaseException):
            raise result
    done = [r for r in results if not isinstance(r, BaseException)]
    retried = [r[1] for r in done]
    return elapsed, -1 if -1 in retried else sum(retried), [e for r in done for e in r[2]]


def produce_one(
    config: dict[str, Any],
    topic: str,
    records: int,
    values: list[bytes],
    keys: list[bytes],
    stats_ms: int = 1000,
) -> tuple[float, int, list[Any]]:
    """Seconds from the first ``produce()`` until every record is acknowledged or
    failed, the requests librdkafka retried meanwhile (-1: its statistics did not
    come), and the errors of the records whose delivery failed.

    Delivery reports only for failures (``delivery.report.only.error``): a Python
    call per record would cost the client, but a record the brokers refused must
    be told apart from one they lost (``flush()`` counts either as done)."""
    errors: list[Any] = []
    failed: list[Any] = []
    stats: list[str] = []
    producer = Producer(
        {
            **config,
            "error_cb": errors.append,
            "delivery.report.only.error": True,
            "on_delivery": lambda error, _message: failed.append(error),
            # Its last statistics tell the requests retried (txretries); the
            # wait for them after the flush is up to stats_ms.
            "statistics.interval.ms": stats_ms,
            "stats_cb": stats.append,
        }
    )
    send = producer.produce
    nvalues, nkeys = len(values), len(keys)
    start = time.perf_counter()
    for i in range(records):
        while True:
            try:
                send(topic, values[i % nvalues], keys[i % nkeys])
                break
            except BufferError:
                producer.poll(0.01)
        if i & 0xFFFF == 0:
            producer.poll(0)
    left = producer.flush(300)
    elapsed = time.perf_counter() - start
    stats.clear()
    deadline = time.monotonic() + 3
    while not stats and time.monotonic() < deadline:
        producer.poll(0.1)
    del producer
    gc.collect()
    if left:
        raise RuntimeError(f"{topic}: {left} records unsent after 300 s ({errors[:3]})")
    retries = -1  # unknown
    if stats:
        brokers = json.loads(stats[-1]).get("brokers", {}).values()
        retries = sum(b.get("txretries", 0) for b in brokers)
    return elapsed, retries, failed


def stored_records(servers: str, topic: str, partitions: int) -> int:
    """What the topic's watermarks count, asked of ``servers``."""
    consumer = Consumer({"bootstrap.servers": servers, "group.id": "bench", "log_level": 3})
    try:
        total = 0
        for p in range(partitions):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 30)
            total += high - low
        return total
    finally:
        consumer.close()


def consume(servers: str, topic: str, partitions: int, brokers: str) -> tuple[float, int, int]:
    """Read the topic from the start through ``servers``: (seconds, records
    read, records stored: the high watermarks' count, asked of the ``brokers``
    themselves, not of the path). Stops at that count or after 300 s."""
    stored = stored_records(brokers, topic, partitions)
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": f"bench-{time.time_ns()}",
            "enable.auto.commit": False,
            # librdkafka stops fetching a partition for fetch.queue.backoff.ms (1 s)
            # while its queue holds queued.min.messages (100,000 by default): with
            # that, this loop read ~185,000 records/s on every path, the client's
            # own pace. A million keeps the fetches going.
            "queued.min.messages": 1_000_000,
            "log_level": 3,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        seen = 0
        start = time.perf_counter()
        deadline = start + 300
        while seen < stored and time.perf_counter() < deadline:
            # No more than what is left: consume() waits its whole timeout for a
            # count that never comes, which would add up to 1 s to every run.
            for message in consumer.consume(min(10_000, stored - seen), 1.0):
                if message.error() is None:
                    seen += 1
        elapsed = time.perf_counter() - start
    finally:
        consumer.close()
    return elapsed, seen, stored


@dataclass
class Run:
    setup: str
    path: str
    producer: str
    records: int
    produce_s: float
    consume_s: float
    # CPU seconds while producing / consuming: proxy, brokers, this process
    produce_cpu: tuple[float, float, float]
    consume_cpu: tuple[float, float, float]
    check: str
    # The machine's load average (1 minute) when the read ended: everyone's, not ours
    load: float = 0.0
    size: int = 100  # bytes of each record's value

    def ms_per_mb(self, seconds: float) -> float:
        """CPU milliseconds per MB of values: a core's share at 1 MB/s."""
        return seconds * 1e3 / (self.records * self.size / 1e6)

    def per_100k(self, seconds: float) -> float:
        return seconds / self.records * 100_000

    @property
    def ok(self) -> bool:
        """Every record written was read back: only then are its rates figures."""
        return self.check.startswith("ok")


def measure(
    setup: Brokers,
    path: str,
    proxy_svc: Service | None,
    kind: str,
    args: argparse.Namespace,
    values: list[bytes],
    keys: list[bytes],
) -> Run:
    servers = setup.servers if proxy_svc is None else proxy_svc.address
    topic = f"bench-{path.replace(' ', '-')}-{kind}-{next(_ROUND)}"
    create_topic(setup.servers, topic, args.partitions, setup.replication)
    proxy_pids = [] if proxy_svc is None else with_children(proxy_svc.proc.pid)

    def sample() -> tuple[float, float, float]:
        return (
            cpu_seconds(proxy_pids),
            cpu_seconds(setup.pids),
            cpu_seconds([os.getpid()]),
        )

    def diff(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, float, float]:
        return (b[0] - a[0], b[1] - a[1], b[2] - a[2])

    metrics = None if proxy_svc is None else proxy_svc.metrics
    client = None
    if args.pin:
        # The client on the first CPU, the brokers and the proxy on the others.
        client = {min(os.sched_getaffinity(0))}
        pin(setup.pids + proxy_pids, os.sched_getaffinity(0) - client)
    counted = requests_counted(metrics)
    before = sample()
    config = producer_config(servers, kind, args, setup.replication, path)
    stats_ms = 100 if args.smoke else 1000
    clients = args.clients
    with client_cpu(client):
        produce_s, retries, failed = produce(
            config, topic, args.records, values, keys, stats_ms, clients
        )
    produced = sample()
    counted = tuple(b - a for a, b in zip(counted, requests_counted(metrics), strict=True))
    with client_cpu(client):
        consume_s, seen, stored = consume(servers, topic, args.partitions, setup.servers)
    consumed = sample()
    # What the path's own ListOffsets answers say is stored (a client's lag reads them).
    told = stored if proxy_svc is None else stored_records(servers, topic, args.partitions)
    delete_topic(setup.servers, topic)
    check = "ok" if seen == stored == told == args.records else f"read {seen}, stored {stored}"
    if told != stored:
        check += f", the path's watermarks count {told}"
    if failed:
        check += f", {len(failed):,} refused (first: {failed[0]})"
    if retries:
        check += f", {retries} retried" if retries > 0 else ", retries ?"
    if metrics is not None:
        check += f"; Produce requests {counted[0]:,} in, {counted[1]:,} out"
    run = Run(
        setup.name,
        path,
        kind,
        args.records,
        produce_s,
        consume_s,
        diff(before, produced),
        diff(produced, consumed),
        check,
        os.getloadavg()[0],
        args.size,
    )
    if not run.ok:
        # No rate from records that are not there (a read of 0 records takes ~0 s).
        print(f"  {setup.name:<9} {path:<11} {kind:<11} FAILED: {check}", flush=True)
        return run
    print(
        f"  {setup.name:<9} {path:<11} {kind:<11} produce {args.records / produce_s:>9,.0f}/s"
        f"  consume {args.records / consume_s:>9,.0f}/s  proxy CPU "
        f"{run.per_100k(run.produce_cpu[0]):.2f}/{run.per_100k(run.consume_cpu[0]):.2f}"
        f" s per 100k  {check}",
        flush=True,
    )
    return run


def requests_counted(metrics: str | None) -> tuple[int, int]:
    """The proxy's Produce requests from clients and its round trips on its own
    upstream connections so far, from its metrics (0, 0 without them)."""
    if metrics is None:
        return 0, 0
    with urllib.request.urlopen(f"http://{metrics}/metrics", timeout=10) as page:
        text = page.read().decode()
    got = re.search(r'^trafka_proxy_requests_total\{request="Produce"\} (\S+)', text, re.M)
    upstream = re.findall(
        r"^trafka_proxy_upstream_request_seconds_count\{[^}]*\} (\S+)", text, re.M
    )
    return int(float(got.group(1))) if got else 0, sum(int(float(n)) for n in upstream)


# -- idle connections ------------------------------------------------------------------


def api_versions_frame(correlation_id: int) -> bytes:
    """An ApiVersions v0 request (header v1: key, version, correlation id, client id)."""
    client_id = b"bench-idle"
    body = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(body)) + body


def read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = bytearray()
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("closed by the proxy")
            data += chunk
        return bytes(data)

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def open_idle(addresses: list[tuple[str, int]], count: int) -> list[socket.socket]:
    """``count`` connections spread over ``addresses``, each after one ApiVersions
    round trip (so the proxy has accepted it and opened its upstream side)."""
    socks: list[socket.socket] = []
    batch = 100  # under the listeners' accept backlog (128)
    try:
        for start in range(0, count, batch):
            group = []
            for i in range(start, min(count, start + batch)):
                sock = socket.create_connection(addresses[i % len(addresses)], timeout=30)
                socks.append(sock)
                group.append(sock)
                sock.sendall(api_versions_frame(i))
            for sock in group:
                read_frame(sock)
    except BaseException:
        for sock in socks:
            sock.close()
        raise
    return socks


def round_trips(
    servers: str, topic: str, samples: int, keys: list[bytes], warmup: int = 100
) -> list[float]:
    """Seconds per single-record produce round trip (``samples`` of them, after
    ``warmup`` unmeasured): produce one record, wait for its delivery report."""
    done: list[Any] = []
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "acks": 1,
            "enable.idempotence": False,
            "linger.ms": 0,
            "log_level": 3,
            "on_delivery": lambda err, _msg: done.append(err),
        }
    )
    value = os.urandom(100)
    times = []
    try:
        for i in range(warmup + samples):
            done.clear()
            start = time.perf_counter()
            producer.produce(topic, value, keys[i % len(keys)])
            while not done:
                producer.poll(1.0)
                if time.perf_counter() - start > 30:
                    raise TimeoutError("a produce round trip took over 30 s")
            if done[0] is not None:
                raise RuntimeError(f"round trip {i}: {done[0]}")
            if i >= warmup:
                times.append(time.perf_counter() - start)
    finally:
        producer.flush(10)
        del producer
        gc.collect()
    return times


@dataclass
class Latency:
    setup: str
    what: str
    times: list[float]
    note: str = ""
    rate: float = 0  # an open loop's records/s
    cpu_ms: float | None = None  # an open loop's proxy CPU per request

    def quantile(self, q: float) -> float:
        ordered = sorted(self.times)
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def idle_latency(
    setup: Brokers,
    root: Path,
    args: argparse.Namespace,
    keys: list[bytes],
    running: Service | None = None,
) -> list[Latency]:
    """Round trips direct, through a routing proxy, and through it with ``--idle``
    connections open: a fresh ``murmur2`` proxy's, or (a smoke run) ``running``'s."""
    with ExitStack() as stack:
        if running is None:
            log = root / f"proxy-idle-{setup.name}.log"
            running = stack.enter_context(proxy(setup.servers, "murmur2", log))
        return _idle_latency(setup, running, args, keys)


def _idle_latency(
    setup: Brokers, running: Service, args: argparse.Namespace, keys: list[bytes]
) -> list[Latency]:
    topic = "bench-latency"
    create_topic(setup.servers, topic, args.partitions, setup.replication)
    # A smoke run only checks that this works: shorter warm-up and idle windows
    # (its idle CPU then counts a few of the kernel's 10 ms ticks: not a figure).
    warmup, settle_s, idle_s = (10, 0.05, 0.25) if args.smoke else (100, 1.0, 5.0)
    direct = round_trips(setup.servers, topic, args.samples, keys, warmup)
    results = [Latency(setup.name, "direct", direct)]
    pid = running.proc.pid
    alone = round_trips(running.address, topic, args.samples, keys, warmup)
    rss_before = rss_mb(pid)
    results.append(Latency(setup.name, "murmur2", alone, f"proxy RSS {rss_before:.0f} MB"))
    admin = admin_client(running.address)
    try:
        meta = admin.list_topics(timeout=10)
        listeners = [(b.host, b.port) for b in meta.brokers.values()]
    finally:
        del admin
        gc.collect()
    host, port = running.address.rsplit(":", 1)
    listeners.append((host, int(port)))
    opened = time.perf_counter()
    socks = open_idle(listeners, args.idle)
    opened = time.perf_counter() - opened
    try:
        time.sleep(settle_s)
        cpu0 = cpu_seconds([pid])
        time.sleep(idle_s)
        idle_cpu = (cpu_seconds([pid]) - cpu0) / idle_s
        rss_idle = rss_mb(pid)
        crowded = round_trips(running.address, topic, args.samples, keys, warmup)
        dead = 0
        for sock in socks:  # still open? (a closed one reads as b"" at once)
            sock.setblocking(False)
            try:
                if sock.recv(1) == b"":
                    dead += 1
            except BlockingIOError:
                pass
    finally:
        for sock in socks:
            sock.close()
    results.append(
        Latency(
            setup.name,
            f"murmur2 + {args.idle:,} idle",
            crowded,
            f"opened in {opened:.1f} s over {len(listeners)} listeners; proxy RSS "
            f"{rss_idle:.0f} MB, CPU {idle_cpu:.1%} of a core while idle"
            + (f"; {dead} closed by the proxy" if dead else ""),
        )
    )
    delete_topic(setup.servers, topic)
    for r in results[-3:]:
        print(
            f"  {r.setup:<9} {r.what:<22} p50 {r.quantile(0.5) * 1e3:6.2f} ms"
            f"  p99 {r.quantile(0.99) * 1e3:6.2f} ms  {r.note}",
            flush=True,
        )
    return results


def open_loop(
    setup: Brokers,
    path: str,
    servers: str,
    args: argparse.Namespace,
    rate: float,
    proxy_pid: int | None = None,
) -> Latency:
    """One record every 1/rate s on schedule; each one's latency from its
    scheduled time to its delivery report (see the module's docstring). Through
    a proxy (``proxy_pid``), the note gives its CPU per record (one Produce
    request each: linger.ms 0), the warm-up's records counted with the window's."""
    topic = f"bench-open-{path.replace(' ', '-')}-{rate:g}-{next(_ROUND)}"
    create_topic(setup.servers, topic, args.partitions, setup.replication)
    pids = [] if proxy_pid is None else with_children(proxy_pid)
    warmup = smoke_window(rate)[1] if args.smoke else 0.5
    cpu = cpu_seconds(pids)
    run = measure_open_loop(
        servers,
        topic,
        rate=rate,
        seconds=args.rate_seconds,
        size=args.size,
        keys=args.keys,
        warmup=warmup,
    )
    cpu = cpu_seconds(pids) - cpu
    delete_topic(setup.servers, topic)
    note = run.note(rate, args.rate_seconds)
    cpu_ms = None
    if pids:
        # Every record the loop gave: a warm-up one per partition, the warm-up, the window.
        records = args.partitions + round(rate * warmup)
        cpu_ms = cpu / (records + run.sent) * 1e3
        note += f"; proxy CPU {cpu_ms:.2f} ms per request"
    times = run.times or [float("nan")]
    result = Latency(setup.name, f"{path} (open loop)", times, note, rate, cpu_ms)
    print(
        f"  {setup.name:<9} {path:<11} open loop p50 {result.quantile(0.5) * 1e3:6.2f} ms"
        f"  p99 {result.quantile(0.99) * 1e3:6.2f} ms  {note}",
        flush=True,
    )
    return result


def print_open_loop(results: list[Latency]) -> None:
    """Each path's open-loop latency against direct's at the same rate; a path
    measured in several rounds (``--rounds``) by the medians of its rounds'
    p50 and p99 (and proxy CPU per request), the range of its p50s noted."""
    if not results:
        return
    rounds: dict[tuple[str, str, float], list[Latency]] = {}
    for r in results:
        rounds.setdefault((r.setup, r.what, r.rate), []).append(r)
    p50 = {key: median(r.quantile(0.5) for r in rs) for key, rs in rounds.items()}
    p99 = {key: median(r.quantile(0.99) for r in rs) for key, rs in rounds.items()}
    print(
        f"\n{'setup':<10}{'open-loop produce latency':<34}{'p50 ms':>8}{'p99 ms':>8}"
        f"{'added p50':>11}{'added p99':>11}"
        "  (direction with no filter: added p50 <= 0.3 ms at 2,000 records/s)"
    )
    for (setup, what, rate), rs in rounds.items():
        key = (setup, what, rate)
        base = next(
            (k for k in rounds if k[0] == setup and k[2] == rate and k[1].startswith("direct ")),
            None,
        )
        added = (
            f"{(p50[key] - p50[base]) * 1e3:>+11.2f}{(p99[key] - p99[base]) * 1e3:>+11.2f}"
            if base is not None and base != key
            else f"{'-':>11}{'-':>11}"
        )
        note = rs[0].note
        if len(rs) > 1:
            spread = sorted(r.quantile(0.5) * 1e3 for r in rs)
            note = f"median of {len(rs)} rounds, p50 {spread[0]:.2f}-{spread[-1]:.2f} ms"
            cpu = [r.cpu_ms for r in rs if r.cpu_ms is not None]
            if cpu:
                note += f"; proxy CPU {median(cpu):.2f} ms per request"
        print(f"{setup:<10}{what:<34}{p50[key] * 1e3:>8.2f}{p99[key] * 1e3:>8.2f}{added}  {note}")


# -- report ----------------------------------------------------------------------------


def print_runs(runs: list[Run]) -> None:
    base = {(r.setup, r.producer): r for r in runs if r.path == "direct" and r.ok}
    print(
        f"\n{'setup':<10}{'path':<{PATH_W}}{'producer':<12}{'produce/s':>11}{'ratio':>7}"
        f"{'consume/s':>11}{'ratio':>7}   {'CPU s per 100k records, produce (consume)':<44}"
        "check"
    )
    print(f"{'':<{58 + PATH_W}}{'proxy':>13}{'brokers':>13}{'client':>13}")
    for r in runs:
        if not r.ok:
            print(f"{r.setup:<10}{r.path:<{PATH_W}}{r.producer:<12}FAILED: {r.check}")
            continue
        b = base.get((r.setup, r.producer))
        p_ratio = f"{b.produce_s / r.produce_s:.2f}" if b else "-"
        c_ratio = f"{b.consume_s / r.consume_s:.2f}" if b else "-"
        cpu = "".join(
            f"{r.per_100k(p):>6.2f} ({r.per_100k(c):.2f})"
            for p, c in zip(r.produce_cpu, r.consume_cpu, strict=True)
        )
        print(
            f"{r.setup:<10}{r.path:<{PATH_W}}{r.producer:<12}{r.records / r.produce_s:>11,.0f}"
            f"{p_ratio:>7}{r.records / r.consume_s:>11,.0f}{c_ratio:>7}   {cpu:<44}{r.check}"
        )

    print_cpu_per_mb(runs)
    # What the journals cost the idempotent producer (issue #46: the shared one
    # at most 10% more than routing without one), from the same run.
    rate = {(r.setup, r.path, r.producer): r.records / r.produce_s for r in runs if r.ok}
    lines = []
    for (setup, path, producer), topic in rate.items():
        if path != "murmur2 topic" or producer != "idempotent":
            continue  # a plain producer's batches are not journaled: noise only
        versus = [
            f"{topic / rate[(setup, other, producer)]:.2f}x {label}"
            for other, label in (("murmur2", "no journal"), ("murmur2 journal", "directory"))
            if (setup, other, producer) in rate
        ]
        lines.append(f"  {setup:<9} {producer:<11} topic journal: " + ", ".join(versus))
    if lines:
        print("\njournal in the cluster, produce rate vs (same run):")
        print("\n".join(lines))
    # What --workers gives over one proxy process (issue #46), from the same run.
    lines = [
        f"  {setup:<9} {producer:<11} workers: produce {workers / rate[(setup, 'murmur2', producer)]:.2f}x"
        for (setup, path, producer), workers in rate.items()
        if path == "murmur2 workers" and (setup, "murmur2", producer) in rate
    ]
    if lines:
        print("\nproxy workers vs one proxy process, produce rate (same run, same clients):")
        print("\n".join(lines))


#: Issue #83's direction for the proxy with no filter, ms of its CPU per MB/s of
#: 100-byte values produced, by path: forwarding and routed by key.
CPU_PER_MB_GOALS = {"route none": 4.0, "murmur2": 7.0}
#: Numbers the topics, so that a round's never meets the last one's being deleted.
_ROUND = itertools.count()
#: The paths whose plain runs and open loops ``--rounds`` repeats: the direction's.
ROUNDED_RUNS = tuple(CPU_PER_MB_GOALS)


def print_cpu_per_mb(runs: list[Run]) -> None:
    """The proxy's CPU per MB/s of values, each path through it: the sizing
    figure Kroxylicious publishes (millicores per MB/s); a path and producer
    measured in several rounds (``--rounds``) by the medians of its rounds."""
    rounds: dict[tuple[str, str, str], list[Run]] = {}
    for r in runs:
        if r.ok and r.path != "direct":
            rounds.setdefault((r.setup, r.path, r.producer), []).append(r)
    if not rounds:
        return
    print(
        "\nproxy CPU per MB/s of values, produce (consume), against the direction with no filter:"
    )
    for (setup, path, producer), rs in rounds.items():
        goal = CPU_PER_MB_GOALS.get(path)
        versus = f"  (direction <= {goal:.0f} ms)" if goal is not None and rs[0].size == 100 else ""
        produce = sorted(r.ms_per_mb(r.produce_cpu[0]) for r in rs)
        consume = median(r.ms_per_mb(r.consume_cpu[0]) for r in rs)
        spread = (
            f", median of {len(rs)} rounds ({produce[0]:.1f}-{produce[-1]:.1f})"
            if len(rs) > 1
            else ""
        )
        print(
            f"  {setup:<9} {path:<{PATH_W}} {producer:<11} "
            f"{median(produce):6.1f} ms ({consume:.1f})"
            f" per MB/s of {rs[0].size}-byte values{spread}{versus}"
        )


def print_consume(runs: list[Run], workers: int) -> None:
    """The consume path (issue #60: Kroxylicious's own figures show consumers
    losing half their throughput behind a proxy): each proxied run's consume
    rate against direct's of the same setup and producer, and what was busy
    while the consumer read, as a share of what each side can use: the proxy
    one core (it serves its connections on one thread; ``--workers`` one each),
    the client one core (its Python loop; librdkafka's threads count too, so it
    can pass 100%), brokerlite one core per broker process, Kafka's JVMs and
    everything together the machine's cores, or the machine's load average when
    the read ended (every process's, others' jobs too) over its cores. The first
    side at 90% or more of that is named as the limit; none: the round trips
    (waiting, not working)."""
    base = {(r.setup, r.producer): r for r in runs if r.path == "direct" and r.ok}
    cores = os.cpu_count() or 1
    lines = []
    for r in runs:
        b = base.get((r.setup, r.producer))
        if b is None or r.path == "direct" or not r.ok:
            continue
        proxy_cpu, broker_cpu, client_cpu = (c / r.consume_s for c in r.consume_cpu)
        brokers = cores if r.setup.startswith("Kafka") else int(r.setup.split()[0])
        busy = {
            f"the machine's cores (load average {r.load:.1f})": max(
                proxy_cpu + broker_cpu + client_cpu, r.load
            )
            / cores,
            "the proxy's CPU": proxy_cpu / (workers if "workers" in r.path else 1),
            "the client's CPU": client_cpu,
            "the brokers' CPU": broker_cpu / min(brokers, cores),
        }
        limit = next((side for side, share in busy.items() if share >= 0.9), "round trips")
        lines.append(
            f"  {r.setup:<9} {r.path:<{PATH_W}} {r.producer:<11} consume {b.consume_s / r.consume_s:.2f}x"
            f" direct ({r.records / r.consume_s:,.0f}/s vs {r.records / b.consume_s:,.0f}/s);"
            f" proxy CPU {r.per_100k(r.consume_cpu[0]):.2f} s per 100k; busy: proxy"
            f" {proxy_cpu:.0%}, brokers {broker_cpu:.0%}, client {client_cpu:.0%} of a core;"
            f" limited by {limit}"
        )
    if lines:
        print(f"\nconsume path through the proxy ({cores} cores):")
        print("\n".join(lines))


def print_latency(results: list[Latency]) -> None:
    if not results:
        return
    print(f"\n{'setup':<10}{'single-record produce round trip':<34}{'p50 ms':>8}{'p99 ms':>8}")
    for r in results:
        print(
            f"{r.setup:<10}{r.what:<34}{r.quantile(0.5) * 1e3:>8.2f}{r.quantile(0.99) * 1e3:>8.2f}"
            f"  {r.note}"
        )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=3_000_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--keys", type=int, default=1_000)
    parser.add_argument("--partitions", type=int, default=12)
    parser.add_argument(
        "--cluster",
        default="1,3",
        help="comma-separated broker counts: 1 = one broker, N = N nodes with ZooKeeper",
    )
    parser.add_argument("--replication", type=int, default=1, help="of the clusters' topics")
    parser.add_argument("--compression", default="lz4", help="the producers' compression.type")
    parser.add_argument(
        "--partitioner",
        default="consistent_random",
        help="librdkafka's partitioner (its default: consistent_random, CRC32; "
        "murmur2_random puts keyed records where the proxy's murmur2 does)",
    )
    parser.add_argument(
        "--paths",
        default=",".join(p for p in PATHS if p not in OPT_IN),
        help="comma-separated, of: "
        + ", ".join(PATHS)
        + " (all but "
        + ", ".join(OPT_IN)
        + " by default)",
    )
    parser.add_argument("--producers", default=",".join(PRODUCERS))
    parser.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="the producers' batch.size (0: librdkafka's). Encrypted paths need batches "
        "that stay under the broker's max.message.bytes once their values are frames",
    )
    parser.add_argument(
        "--workers", type=int, default=2, help="the proxy processes of the murmur2 workers path"
    )
    parser.add_argument(
        "--clients", type=int, default=1, help="producers at once, the records split between them"
    )
    parser.add_argument(
        "--upstream",
        choices=["brokerlite", "kafka"],
        default="brokerlite",
        help="the brokers behind the proxy: brokerlite, or Apache Kafka 4.x itself",
    )
    parser.add_argument(
        "--rate",
        default="0",
        help="open-loop latency: records/s per path, or several comma-separated (0: skip)",
    )
    parser.add_argument("--rate-seconds", type=float, default=10.0, help="open-loop duration")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="the direction's figures (issue #83) measured this many times and their medians "
        "given: the plain producer's runs through "
        + " and ".join(ROUNDED_RUNS)
        + ", and the open loops of those paths and direct",
    )
    parser.add_argument("--idle", type=int, default=2_000, help="idle connections (0: skip)")
    parser.add_argument("--samples", type=int, default=2_000, help="round trips per latency figure")
    parser.add_argument(
        "--py-spy",
        type=Path,
        metavar="DIR",
        help="profile each proxy with py-spy (installed beside this Python): "
        "collapsed stacks in DIR/proxy-<nodes>-<route>.txt",
    )
    parser.add_argument("--keep", action="store_true", help="keep the logs and data")
    parser.add_argument(
        "--pin",
        action="store_true",
        help="produce and consume on the first CPU, the brokers and the proxy on the others "
        "(Linux, 2 CPUs or more): a client spinning on its own CPU as on another machine",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, not a measurement: 2,000 records, 3 "
        "partitions, 20 idle connections (none with --idle 0) on the murmur2 path's proxy, "
        "20 round trips, open loops of 50 records after 10 (at --rate), short waits, each "
        "path once (smoke_plan), whatever the other options say "
        "(tests/bench/test_bench_smoke.py)",
    )
    args = parser.parse_args()
    try:
        args.rates = [float(r) for r in args.rate.split(",") if float(r) > 0]
    except ValueError:
        parser.error(f"--rate: records/s, comma-separated, not {args.rate!r}")
    if args.rounds < 1:
        parser.error(f"--rounds: at least 1, not {args.rounds}")
    if args.smoke:
        args.records, args.partitions, args.samples = 2_000, 3, 20
        args.rounds = 1  # the medians' report is tested apart (tests/bench/test_bench_rounds.py)
        # At most 20 idle connections; none where the line itself skips that part
        # (--idle 0): a smoke run checks what its line runs, no more.
        args.idle = min(args.idle, 20)
        # One rate is enough to check that the open loop runs.
        args.rates = args.rates[:1]
        if args.rates:
            args.rate_seconds = min(args.rate_seconds, smoke_window(args.rates[0])[0])
    setups = [int(n) for n in args.cluster.split(",")]
    paths = [p.strip() for p in args.paths.split(",")]
    kinds = [k.strip() for k in args.producers.split(",")]
    if set(paths) - set(PATHS) or set(kinds) - set(PRODUCERS) or min(setups) < 1:
        parser.error("unknown path, producer or broker count")

    print(
        f"proxy benchmark (Python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.1f}): {args.records:,} records of {args.size} B random values, "
        f"{args.keys:,} keys, {args.partitions} partitions, confluent-kafka "
        f"(compression {args.compression}, partitioner {args.partitioner}, linger.ms=5); "
        f"clusters' replication {args.replication}\n"
        "  reproduce with: "
        + shlex.join(
            ["python", "bench/proxy.py"]
            + [f"--{k}={getattr(args, k)}" for k in ("records", "size", "keys", "partitions")]
            + [
                f"--{k}={getattr(args, k)}"
                for k in ("cluster", "replication", "compression", "partitioner")
            ]
            + [f"--idle={args.idle}", f"--samples={args.samples}"]
            + ([f"--batch-size={args.batch_size}"] if args.batch_size else [])
            + [f"--clients={args.clients}", f"--workers={args.workers}"]
            + (["--pin"] if args.pin else [])
            + [f"--upstream={args.upstream}", f"--rate={args.rate}"]
            + [f"--rate-seconds={args.rate_seconds:g}", f"--rounds={args.rounds}"]
            + [f"--paths={args.paths}", f"--producers={args.producers}"]
        ),
        flush=True,
    )
    if not args.batch_size and set(paths) & set(ENCRYPTED):
        print(
            f"  the encrypted paths' producers: batch.size={ENCRYPTED_BATCH_SIZE:,}, room for "
            "their values' frames under the broker's max.message.bytes (docs/proxy.md)"
        )
    # Up front, not timed: a pool of distinct random values (a batch never holds one twice).
    pool = os.urandom(VALUE_POOL * args.size)
    values = [pool[i * args.size : (i + 1) * args.size] for i in range(VALUE_POOL)]
    keys = [b"key-%d" % i for i in range(args.keys)]

    if args.py_spy:
        args.py_spy.mkdir(parents=True, exist_ok=True)
    root = Path(tempfile.mkdtemp(prefix="trafka-bench-proxy-"))
    runs: list[Run] = []
    latency: list[Latency] = []
    open_loops: list[Latency] = []
    plan = smoke_plan(setups, paths, kinds) if args.smoke else full_plan(setups, paths, kinds)
    try:
        for i, nodes in enumerate(setups):
            # A smoke run's idle connections once, on the last (largest) setup.
            idle = bool(args.idle) and (not args.smoke or i == len(setups) - 1)
            measure_setup(
                nodes, root, plan[nodes], idle, args, values, keys, runs, latency, open_loops
            )
    except BaseException:
        print(f"\n(logs in {root})")
        raise
    print_runs(runs)
    print_consume(runs, args.workers)
    print_latency(latency)
    print_open_loop(open_loops)
    if args.keep:
        print(f"\n(logs and data in {root})")
    else:
        shutil.rmtree(root, ignore_errors=True)
    # A run that lost or doubled records is a failure, not a figure.
    wrong = [r for r in runs if not r.ok]
    for r in wrong:
        print(
            f"FAILED: {r.setup} {r.path} {r.producer}: {r.check} "
            f"(of {r.records:,} records sent; no rate is given for it)",
            file=sys.stderr,
        )
    return 1 if wrong else 0


#: What one setup runs: (path, producer) pairs, grouped by path in order.
Plan = list[tuple[str, str]]


def full_plan(setups: list[int], paths: list[str], kinds: list[str]) -> dict[int, Plan]:
    """Every path with every producer, on every setup."""
    return {nodes: [(path, kind) for path in paths for kind in kinds] for nodes in setups}


def smoke_plan(setups: list[int], paths: list[str], kinds: list[str]) -> dict[int, Plan]:
    """A smoke run's pairs: each path other than direct once, the setups and the
    producers taken in turn (so each runs at least once when there are paths
    enough), plus the direct path of each setup and producer used there (the
    ratios' base). The smoke run proves that each path runs to the end, not
    every combination (tests/bench/test_bench_smoke.py)."""
    plan: dict[int, Plan] = {nodes: [] for nodes in setups}
    others = [path for path in paths if path != "direct"] or ["direct"]
    for i, path in enumerate(others):
        plan[setups[i % len(setups)]].append((path, kinds[i % len(kinds)]))
    for pairs in plan.values():
        bases = [("direct", kind) for kind in dict.fromkeys(kind for _, kind in pairs)]
        pairs[:0] = [base for base in bases if base not in pairs]
    return plan


def measure_setup(
    nodes: int,
    root: Path,
    plan: Plan,
    idle: bool,
    args: argparse.Namespace,
    values: list[bytes],
    keys: list[bytes],
    runs: list[Run],
    latency: list[Latency],
    open_loops: list[Latency],
) -> None:
    """The plan's paths and producers against one setup (``nodes`` brokers), each
    path's open-loop latency (``--rate``), then (``idle``) the idle-connection figures
    (a smoke run's through the murmur2 path's proxy when the plan has one: a proxy
    start less; make bench's through a fresh proxy, whose memory they report)."""
    with brokers(nodes, root, args.replication, args.upstream) as setup:
        for path in dict.fromkeys(path for path, _ in plan):
            with ExitStack() as stack:
                route = PATHS[path]
                running = None
                if route is not None:
                    log = root / f"proxy-{nodes}-{route}.log"
                    profile = None
                    if args.py_spy:
                        profile = args.py_spy / f"proxy-{nodes}-{route}.txt"
                    running = stack.enter_context(
                        proxy(setup.servers, route, log, profile, args.workers)
                    )
                for kind in (kind for p, kind in plan if p == path):
                    rounded = path in ROUNDED_RUNS and kind == "plain"
                    for _ in range(args.rounds if rounded else 1):
                        runs.append(measure(setup, path, running, kind, args, values, keys))
                loops = args.rounds if path in ROUNDED_RUNS or path == "direct" else 1
                for rate in args.rates:
                    servers = setup.servers if running is None else running.address
                    pid = None if running is None else running.proc.pid
                    for _ in range(loops):
                        open_loops.append(open_loop(setup, path, servers, args, rate, pid))
                if idle and args.smoke and path == "murmur2":
                    latency += idle_latency(setup, root, args, keys, running)
                    idle = False
        if idle:
            latency += idle_latency(setup, root, args, keys)


if __name__ == "__main__":
    sys.exit(main())
