"""Client benchmark: trafka's producer and consumer against aiokafka, kafka-python and
confluent-kafka, all talking to one brokerlite (``make bench``).

The workload: ``--records`` records (default 1,000,000) of ``--size`` bytes
(default 100), no key, no headers, no compression, acks=1 and each client's
default batching, into a topic of ``--partitions`` partitions (default 1).
With ``--keys K`` record i has the key ``key-<i mod K>`` and goes where each
client's default partitioner puts it (murmur2 for trafka, kafka-python and
aiokafka; librdkafka's ``consistent_random``, CRC-32).

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
* **consume (common topic)**: every consumer reads the same topic too,
  aiokafka's (16 KiB batches, as Java's defaults make them), so that the
  consumers are compared on the same batches: each client's own topic is
  shaped by its defaults (``batch.size``: trafka 1 MB, aiokafka and
  kafka-python 16 KiB, librdkafka 1 MB), and larger batches are cheaper to
  read. confluent-kafka's consumer runs with ``fetch.queue.backoff.ms`` 10
  instead of its default 1,000: with the default, librdkafka pauses fetching for
  a second each time its queue holds ``queued.min.messages`` (100,000), and a
  fast reader spends most of the run waiting (about 180k instead of 830k
  records/s here).
* For trafka's producer the worker also reports its peak memory: the growth
  of the process's peak RSS over its size before producing, and the peak of
  what the accumulator counted against ``buffer.memory``.

``trafka-try-send`` is trafka's async producer written as its docs suggest
for a loop that only sends (``try_send``, else ``await send``); ``trafka`` is
the plain ``await send`` per record. Its consumer is trafka's.

``trafka-blocking`` is trafka.sdk.blocking (the async producer and consumer run
on a loop in a thread of their own): its producer calls ``send()`` per record
and flushes, its consumer iterates record by record; it gets its own ratio
lines against the other blocking clients (kafka-python, confluent-kafka).

Ratios are trafka / other, so above 1 means trafka is faster. The broker is
shared and written in Python, so it may be the limit for the fast clients;
the raw broker numbers are in ``bench/broker.py``. This is a measurement, not
a test: nothing fails on a slow result.

``--broker kafka`` runs the same against Apache Kafka 4.x itself (one KRaft
node started from the jars ``make peers`` fetched, full JIT; tests/kafka_peers.py)
instead of brokerlite; ``--broker brokerlite,kafka`` runs it against both in
turn and prints brokerlite / Kafka per client (issue 61: the same clients, the
two brokers), with each broker's CPU seconds per 100k records (from /proc, the
broker's processes only). The ``java`` client is Kafka's own (the classes behind
``kafka-producer-perf-test`` and ``kafka-consumer-perf-test``:
``ProducerPerformance`` with acks=1 and ``ConsumerPerformance``, whose rate is
read from their own report: the producer's from its first send to its last
acknowledgement, the consumer's over its fetch time, after its group join); it
sends no keys, so it does not take ``--keys``. Each runs in a JVM of its own, full
JIT; a ``--smoke`` run, which measures nothing, runs them all in one JVM, C1 only.

``--cluster N`` (throughput suite) runs each broker as a cluster of N nodes
instead: brokerlite's nodes as processes on a private ZooKeeper, and Apache Kafka
3.9 on ZooKeeper (N brokers, full JIT), rather than 4.x on KRaft, so that both
clusters are coordinated the same way and the brokers' CPU is their data path and
replication, without a KRaft quorum working in the same processes. Every topic
gets replication factor N and every producer acks=all (ProducerPerformance too);
the broker CPU per 100k records is that of the N broker processes summed
(ZooKeeper's is left out of both). ``--rate R`` adds, per broker, the open-loop
produce latency of ``bench/_open_loop.py`` (confluent-kafka, linger.ms 0, one
record every 1/R s for ``--rate-seconds``, acks as above): p50 and p99 at a rate
below saturation, where a closed loop would hide the queueing.

``--suite eos`` (or ``all``) measures what delivery guarantees cost, for trafka
(async and blocking, the latter with ``with producer.transaction():`` blocks)
and confluent-kafka in the same run: the produce workload with acks=all in
up to four modes, each in its own worker process and topic: **plain**
(idempotence off), **idempotent** (producer id and sequence numbers, the
default of both clients), **transactional** (a ``transactional.id``; a
transaction commits every ``--txn-records`` records, default 1,000) and, for
the clients that can (trafka's), **pipelined**: the same transactions, each
begun while the previous one commits (``commit_transaction(wait=False)``).
Every mode runs ``--rounds`` times (default 3), each round in a rotated order
of the modes, since whichever runs first on a fresh broker has an edge. It
prints each mode's median rate and the median of its per-round fraction of the
client's plain rate; the targets for trafka are idempotence costing under 10%
and transactions of 1,000 records under 25%, judged on the pipelined mode (how
trafka runs transactions fastest). The transactional mode, each commit awaited
before the next transaction begins, is reported against the floor below, which
caps it short of that target against brokerlite on a small machine.

A commit cannot overlap the records of its own transaction (pipelining
overlaps it with the next one's): ``commit_transaction()`` waits for the last
Produce's acknowledgement, then for EndTxn (which brokerlite answers once the
decision is written; its fsync follows the answer unless a partition has
``flush.messages=1``). For trafka the suite therefore also prints
the median commit latency, the commit budget the transactional target leaves
(from the plain rate), and what this machine charges for the parts of that chain
that no code can remove, measured in the same run:

* the **floor**: the last Produce (one record) and then EndTxn, sent by a bare
  blocking client (a socket and trafka.codec, ``bench/_raw.py``) to the same
  broker, as a fraction of the budget, and the best fraction of the plain rate
  it allows;
* a serial round trip to a plain-Python echo server on loopback (the machine's
  share of each of those two round trips);
* a 256-byte append with fsync in the broker's data directory (what an fsync
  before the EndTxn answer would add).

Pipelined transactions overlap a commit with the next transaction's records,
but not with the next commit: the coordinator takes one transaction of a
producer at a time. The suite times that **chain** (Produce, which adds the
partition on transaction version 2 as a single brokerlite finalizes it, or
AddPartitionsToTxn then Produce on version 1; then EndTxn; one after the other)
with pipelined transactions of one record each, and prints how much of it is
the producer's own CPU. The floor keeps version 1's requests on purpose.

``--suite producer`` measures issue 81's producer fronts against confluent-kafka:
trafka's async ``send`` (``trafka``), ``try_send`` (``trafka-try-send``),
trafka.sdk.blocking (``trafka-blocking``), confluent-kafka's benchmark code on
trafka.compat.confluent (``trafka-compat``: the same function, its import
changed) and on confluent-kafka itself. Each front produces the workload
``--rounds`` times (default 3), each time in a worker and a topic of its own,
the fronts in a rotated order per round so that none always runs first; the
table gives per front the median rate, the median of its rate over
confluent-kafka's in the same round, beside issue 81's target (printed, never
asserted: async ``send`` and ``try_send`` 1.0x, the blocking front and the
drop-in 0.8x), the median CPU per record (the worker process's user + system
time over the produce loop, all its threads: the I/O thread of the blocking
fronts, librdkafka's threads for confluent-kafka) and the median growth of the
peak RSS over the loop. For a workload that reads too, confluent-kafka's
consumer and the drop-in's read the topic confluent-kafka produced in that round
(the same batches), in alternating order: the drop-in's consume ratio (target
1.0x). ``--workloads a,b,c,d,e`` runs the issue's workloads, each on its broker
(if ``--broker`` names it): (a) brokerlite, 1 partition, no key, 1,000,000
records; (b) the same on Apache Kafka 4.x; (c) brokerlite, 6 partitions, 1,000
keys, 500,000; (d) brokerlite, 1 partition, no key, 500,000; (e) brokerlite,
1 KiB values, 200,000 records (a fifth of (a)'s, twice its bytes); (a) and (b)
read too. ``--profile FRONT`` runs that front (and confluent-kafka, for the ratio)
with its produce loop under cProfile, and prints the top 25 entries by tottime,
of the calling thread and of the threads it started: where each record's time goes.

``--suite share`` (or ``all``) measures share-group consumers (KIP-932):
trafka's ``ShareConsumer`` and librdkafka's (confluent-kafka) each drain the
same topic, filled once by trafka's producer, through a share group of their
own (``share.auto.offset.reset=earliest``, implicit acknowledgement, each
client's defaults), from the first poll until the last records are committed.
Every record is acquired, handed out and accepted, so the broker's
share-partition bookkeeping and its fsynced acknowledgements are part of it.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from _kafka import (  # bench/'s own
    RUNNING_ZK,
    RUNNING_ZK_PIDS,
    kafka_peers,
    running_cluster,
    script_session,
    zookeeper_chroot,
)
from _open_loop import OpenLoop, open_loop, smoke_window

CLIENTS = (
    "trafka",
    "trafka-try-send",
    "trafka-blocking",
    "aiokafka",
    "kafka-python",
    "confluent-kafka",
    "trafka-compat",
    "java",
)
# The blocking clients, compared with trafka.sdk.blocking in their own lines.
SYNC_PEERS = ("kafka-python", "confluent-kafka")
EOS_CLIENTS = ("trafka", "trafka-blocking", "confluent-kafka")
EOS_MODES = ("plain", "idempotent", "transactional", "pipelined")
# The clients that can begin a transaction while the previous one commits.
PIPELINING_CLIENTS = ("trafka", "trafka-blocking")
# Targets (fraction of the plain rate kept) for trafka, from the exactly-once issue:
# idempotence, and transactions of 1,000 records as trafka runs them fastest
# (pipelined commits). Awaited commits are reported against the floor that caps
# them (print_commit_budget), with the same 25% as their commit's budget.
EOS_TARGETS = {"idempotent": 0.90, "pipelined": 0.75}
TXN_TARGET = EOS_TARGETS["pipelined"]
BUFFER_MEMORY = 32 * 1024 * 1024  # every client's default (librdkafka's is 1 GiB of queue)
# What failed in this run ("what: why"). The tables still print whatever did run,
# but the exit status is 1, so that a broken measurement cannot pass for a slow one.
FAILURES: list[str] = []
# The producers' acks: 1, or -1 (all) with --cluster (set in the worker from --acks).
ACKS = 1
# Kafka's perf JVMs with the full JIT compiler; a smoke run's (--smoke in the worker
# too) with C1 only, which starts sooner on less CPU: its figures are not judged.
JIT = True
# A smoke run's JVM for Kafka's perf clients (_kafka.script_session): every java
# measurement of the run in it, one after the other, in this process, instead of
# a worker and a JVM each (four JVM starts a line, against two brokers).
JAVA_SESSION: Any = None
# A smoke run's limit for each measurement (seconds).
SMOKE_TIMEOUT = 120.0


def _failed(what: str, error: str, shown: str | None = None) -> None:
    """Count a failed measurement and print why (``shown``, else indented ``error``)."""
    FAILURES.append(f"{what}: {error}")
    print(shown if shown is not None else f"    {error}", flush=True)


def _rss_bytes() -> int:
    # ru_maxrss is in KiB on Linux.
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def _current_rss() -> int:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return _rss_bytes()


def _process_cpu() -> float:
    """The process's user + system CPU seconds so far, every thread of it."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class _Meter:
    """A produce loop's figures, from its first send to its last acknowledgement:
    wall seconds, the worker process's own CPU seconds (user + system from
    ``getrusage(RUSAGE_SELF)``, so every thread of the process: trafka.sdk.blocking's
    and the drop-in's I/O thread, and librdkafka's threads for confluent-kafka) and
    the growth of the process's peak RSS over its RSS when the loop began (after
    the records' keys were built). Under ``--profile`` (:data:`PROFILE`), the
    profile covers the same span."""

    def __init__(self) -> None:
        self.base_rss = _current_rss()
        if PROFILE is not None:
            PROFILE.start()
        self.cpu = _process_cpu()
        self.start = time.perf_counter()

    def done(self, out: dict[str, Any]) -> dict[str, Any]:
        out["seconds"] = time.perf_counter() - self.start
        out["cpu_seconds"] = _process_cpu() - self.cpu
        if PROFILE is not None:
            PROFILE.stop()
        out["peak_rss_growth"] = max(_rss_bytes() - self.base_rss, 0)
        return out


# -- workers: each runs in its own process and prints one JSON line ----------------------


def _key_sequence(n: int, keys: int) -> list[bytes | None]:
    """Record i's key: ``key-<i mod keys>``, or None for all with ``keys`` 0. Built
    before the clock starts, so that every client's loop only walks a list."""
    if keys <= 0:
        return [None] * n
    names = [b"key-%d" % k for k in range(keys)]
    return [names[i % keys] for i in range(n)]


def produce_trafka(bs: str, topic: str, n: int, size: int, keys: int) -> dict[str, Any]:
    import trio

    from trafka.sdk import open_producer

    value = b"x" * size
    out: dict[str, Any] = {}

    async def main() -> None:
        async with open_producer(bootstrap_servers=bs, acks=ACKS) as producer:
            await producer.partitions_for(topic)
            acc = producer._acc
            peak_used = 0
            sequence = _key_sequence(n, keys)
            meter = _Meter()
            send = producer.send
            for i, key in enumerate(sequence):
                await send(topic, value, key)
                if i & 255 == 0:
                    used = acc.used_memory
                    if used > peak_used:
                        peak_used = used
            await producer.flush()
            meter.done(out)
            out["peak_accounted"] = peak_used
            out["buffer_memory"] = producer.config.buffer_memory

    trio.run(main)
    return out


def produce_trafka_try_send(bs: str, topic: str, n: int, size: int, keys: int) -> dict[str, Any]:
    """trafka's async producer with the loop its docs give for speed: ``try_send``,
    else ``await send`` (for the records that open a batch)."""
    import trio

    from trafka.sdk import open_producer

    value = b"x" * size
    out: dict[str, Any] = {}

    async def main() -> None:
        async with open_producer(bootstrap_servers=bs, acks=ACKS) as producer:
            await producer.partitions_for(topic)
            sequence = _key_sequence(n, keys)
            meter = _Meter()
            try_send, send = producer.try_send, producer.send
            for key in sequence:
                if try_send(topic, value, key) is None:
                    await send(topic, value, key)
            await producer.flush()
            meter.done(out)

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


def produce_trafka_blocking(bs: str, topic: str, n: int, size: int, keys: int) -> dict[str, Any]:
    from trafka.sdk.blocking import Producer

    value = b"x" * size
    with Producer(bootstrap_servers=bs, acks=ACKS) as producer:
        producer.partitions_for(topic)
        sequence = _key_sequence(n, keys)
        meter = _Meter()
        send = producer.send
        for key in sequence:
            send(topic, value, key)
        producer.flush()
        return meter.done({})


def consume_trafka_blocking(bs: str, topic: str, n: int, partitions: int) -> dict[str, Any]:
    from trafka.sdk import TopicPartition
    from trafka.sdk.blocking import Consumer

    with Consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        got = 0
        start = time.perf_counter()
        for _ in consumer:  # record by record, as a blocking application reads
            got += 1
            if got >= n:
                break
        return {"seconds": time.perf_counter() - start, "records": got}


def produce_aiokafka(bs: str, topic: str, n: int, size: int, keys: int) -> dict[str, Any]:
    import asyncio

    from aiokafka import AIOKafkaProducer

    value = b"x" * size
    out: dict[str, Any] = {}

    async def main() -> None:
        producer = AIOKafkaProducer(bootstrap_servers=bs, acks=ACKS)
        await producer.start()
        try:
            await producer.partitions_for(topic)
            sequence = _key_sequence(n, keys)
            start = time.perf_counter()
            for key in sequence:
                await producer.send(topic, value, key)
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


def produce_kafka_python(bs: str, topic: str, n: int, size: int, keys: int) -> dict[str, Any]:
    from kafka import KafkaProducer

    value = b"x" * size
    producer = KafkaProducer(bootstrap_servers=bs, acks=ACKS)
    try:
        producer.partitions_for(topic)
        sequence = _key_sequence(n, keys)
        start = time.perf_counter()
        send = producer.send
        for key in sequence:
            send(topic, value, key)
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


def produce_confluent(
    bs: str, topic: str, n: int, size: int, keys: int, api: str = "confluent_kafka"
) -> dict[str, Any]:
    """confluent-kafka's producer loop; with ``api="trafka.compat.confluent"``
    the same code on trafka (its one changed import)."""
    Producer = importlib.import_module(api).Producer

    value = b"x" * size
    producer = Producer({"bootstrap.servers": bs, "acks": ACKS})
    producer.list_topics(topic, timeout=10)
    sequence = _key_sequence(n, keys)
    meter = _Meter()
    produce, poll = producer.produce, producer.poll
    for i, key in enumerate(sequence):
        while True:
            try:
                produce(topic, value, key)
                break
            except BufferError:  # librdkafka's queue is full: serve delivery reports
                poll(0.05)
        if i & 1023 == 0:
            poll(0)
    left = producer.flush(120)
    return meter.done({"undelivered": left})


def consume_confluent(
    bs: str, topic: str, n: int, partitions: int, api: str = "confluent_kafka"
) -> dict[str, Any]:
    module = importlib.import_module(api)
    OFFSET_BEGINNING, Consumer, TopicPartition = (
        module.OFFSET_BEGINNING,
        module.Consumer,
        module.TopicPartition,
    )

    consumer = Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": f"bench-{uuid.uuid4().hex}",  # required; nothing is committed
            "enable.auto.commit": False,
            "enable.partition.eof": False,
            # librdkafka stops fetching for fetch.queue.backoff.ms (default 1000)
            # whenever its queue holds queued.min.messages; a reader that drains
            # 100,000 records in a fraction of that then sits idle, and measures
            # about 180k records/s. 10 ms measures the consumer instead.
            "fetch.queue.backoff.ms": 10,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        got = 0
        start = time.perf_counter()
        while got < n:
            # At most what is left: consume() returns once it has num_messages (or
            # after the timeout), so asking for more than the topic holds waited out
            # the whole second (a run of fewer than 10,000 records measured 1 s).
            for m in consumer.consume(num_messages=min(10_000, n - got), timeout=1.0):
                if m.error() is None:
                    got += 1
        return {"seconds": time.perf_counter() - start, "records": got}
    finally:
        consumer.close()


def produce_trafka_eos(
    bs: str, topic: str, n: int, size: int, mode: str, per_txn: int
) -> dict[str, Any]:
    import trio

    from trafka.sdk import open_producer

    value = b"x" * size
    out: dict[str, Any] = {}
    settings: dict[str, Any] = {"acks": "all", "enable_idempotence": mode != "plain"}
    transactional = mode in ("transactional", "pipelined")
    if transactional:
        settings["transactional_id"] = f"bench-{uuid.uuid4().hex}"

    async def main() -> None:
        async with open_producer(bootstrap_servers=bs, **settings) as producer:
            await producer.partitions_for(topic)
            # One record delivered before the clock starts: connections, the
            # producer id and the transaction coordinator are in place.
            if transactional:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send(topic, value)
                await producer.commit_transaction()
            else:
                await producer.send_and_wait(topic, value)
            start = time.perf_counter()
            cpu_start = time.thread_time()  # the loop's thread: the producer's own CPU
            send = producer.send
            if mode == "pipelined":
                # Each transaction fills its batches while the previous one commits.
                pending = None
                for first in range(0, n, per_txn):
                    producer.begin_transaction()
                    for _ in range(min(per_txn, n - first)):
                        await send(topic, value)
                    pending = await producer.commit_transaction(wait=False)
                if pending is not None:
                    await pending.wait()
            elif transactional:
                commits: list[float] = []
                busy: list[float] = []  # this thread's CPU time during each commit
                for first in range(0, n, per_txn):
                    producer.begin_transaction()
                    for _ in range(min(per_txn, n - first)):
                        await send(topic, value)
                    began, cpu = time.perf_counter(), time.thread_time()
                    await producer.commit_transaction()
                    commits.append(time.perf_counter() - began)
                    busy.append(time.thread_time() - cpu)
                out["commit_ms"] = statistics.median(commits) * 1000
                out["commit_cpu_ms"] = statistics.median(busy) * 1000
            else:
                for _ in range(n):
                    await send(topic, value)
                await producer.flush()
            out["seconds"] = time.perf_counter() - start
            out["cpu_us_per_record"] = (time.thread_time() - cpu_start) * 1e6 / n

    trio.run(main)
    return out


def produce_trafka_blocking_eos(
    bs: str, topic: str, n: int, size: int, mode: str, per_txn: int
) -> dict[str, Any]:
    from trafka.sdk.blocking import Producer

    value = b"x" * size
    settings: dict[str, Any] = {"acks": "all", "enable_idempotence": mode != "plain"}
    transactional = mode in ("transactional", "pipelined")
    if transactional:
        settings["transactional_id"] = f"bench-{uuid.uuid4().hex}"
    with Producer(bootstrap_servers=bs, **settings) as producer:
        producer.partitions_for(topic)
        # One record delivered before the clock starts, as for the others.
        if transactional:
            producer.init_transactions()
            with producer.transaction():
                producer.send(topic, value)
        else:
            producer.send_and_wait(topic, value)
        start = time.perf_counter()
        send = producer.send
        if mode == "pipelined":
            pending = None
            for first in range(0, n, per_txn):
                producer.begin_transaction()
                for _ in range(min(per_txn, n - first)):
                    send(topic, value)
                pending = producer.commit_transaction(wait=False)
            if pending is not None:
                pending.wait()
        elif transactional:
            for first in range(0, n, per_txn):
                with producer.transaction():
                    for _ in range(min(per_txn, n - first)):
                        send(topic, value)
        else:
            for _ in range(n):
                send(topic, value)
            producer.flush()
        return {"seconds": time.perf_counter() - start}


def produce_confluent_eos(
    bs: str, topic: str, n: int, size: int, mode: str, per_txn: int
) -> dict[str, Any]:
    from confluent_kafka import Producer

    value = b"x" * size
    config: dict[str, Any] = {
        "bootstrap.servers": bs,
        "acks": "all",
        "enable.idempotence": mode != "plain",
    }
    if mode == "transactional":
        config["transactional.id"] = f"bench-{uuid.uuid4().hex}"
    producer = Producer(config)
    producer.list_topics(topic, timeout=10)
    transactional = mode == "transactional"
    # One record delivered before the clock starts, as for trafka: librdkafka asks
    # for its producer id from a timer, which otherwise adds up to 0.5 s to the
    # idempotent run.
    if transactional:
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, value)
        producer.commit_transaction(30)
    else:
        producer.produce(topic, value)
        if producer.flush(30):
            raise RuntimeError("the warm-up record was not delivered")
    start = time.perf_counter()
    produce, poll = producer.produce, producer.poll
    for i in range(n):
        if transactional and i % per_txn == 0:
            if i:
                producer.commit_transaction(120)
            producer.begin_transaction()
        while True:
            try:
                produce(topic, value)
                break
            except BufferError:
                poll(0.05)
        if i & 1023 == 0:
            poll(0)
    if transactional:
        producer.commit_transaction(120)
        left = 0
    else:
        left = producer.flush(120)
    return {"seconds": time.perf_counter() - start, "undelivered": left}


EOS_WORKERS: dict[str, Callable[..., dict[str, Any]]] = {
    "trafka": produce_trafka_eos,
    "trafka-blocking": produce_trafka_blocking_eos,
    "confluent-kafka": produce_confluent_eos,
}


def _java_perf(main: str, *args: str) -> str:
    """What ``main`` (a perf tool's class) printed: in a JVM of its own, or in the
    smoke run's :data:`JAVA_SESSION`."""
    if JAVA_SESSION is not None:
        (done,) = JAVA_SESSION.run([(main, list(args), None)], timeout=SMOKE_TIMEOUT)
        if done["exit"] != 0:
            raise RuntimeError(f"{main} exited {done['exit']}: {done['err'].strip()[-300:]}")
        return str(done["out"])
    peers = kafka_peers()
    command = peers.java_command(main, *args, heap="-Xmx1g", jit=JIT)
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{main} exited {done.returncode}: {done.stderr.strip()[-300:]}")
    return done.stdout


def produce_java(bs: str, topic: str, n: int, size: int, keys: int) -> dict[str, Any]:
    """Kafka's ProducerPerformance (kafka-producer-perf-test): its own rate."""
    if keys:
        raise RuntimeError("ProducerPerformance sends no keys")
    out = _java_perf(
        "org.apache.kafka.tools.ProducerPerformance",
        *("--topic", topic, "--num-records", str(n), "--record-size", str(size)),
        *("--throughput", "-1", "--command-property", f"bootstrap.servers={bs}", f"acks={ACKS}"),
    )
    match = re.search(rf"^{n} records sent, ([\d.]+) records/sec", out, re.M)
    if match is None:
        raise RuntimeError(f"no rate in ProducerPerformance's report: {out[-300:]!r}")
    return {"seconds": n / float(match.group(1))}


def consume_java(bs: str, topic: str, n: int, partitions: int) -> dict[str, Any]:
    """Kafka's ConsumerPerformance (kafka-consumer-perf-test): records over its fetch time."""
    out = _java_perf(
        "org.apache.kafka.tools.ConsumerPerformance",
        *("--bootstrap-server", bs, "--topic", topic, "--num-records", str(n)),
        # Its default gives up after 10 s without a record, which a group's first
        # join on a cluster (the offsets topic made RF 3) can take on a busy machine.
        *("--timeout", "60000"),
    )
    rows = [line.split(", ") for line in out.splitlines() if line.count(", ") >= 9]
    names, values = rows[0], rows[-1]
    got = dict(zip([name.strip() for name in names], values, strict=False))
    if int(got["data.consumed.in.nMsg"]) < n:
        raise RuntimeError(f"ConsumerPerformance read {got['data.consumed.in.nMsg']} of {n}")
    return {"seconds": int(got["fetch.time.ms"]) / 1000}


PRODUCERS: dict[str, Callable[..., dict[str, Any]]] = {
    "trafka": produce_trafka,
    "trafka-try-send": produce_trafka_try_send,
    "trafka-blocking": produce_trafka_blocking,
    "aiokafka": produce_aiokafka,
    "kafka-python": produce_kafka_python,
    "confluent-kafka": produce_confluent,
    "trafka-compat": functools.partial(produce_confluent, api="trafka.compat.confluent"),
    "java": produce_java,
}
CONSUMERS: dict[str, Callable[..., dict[str, Any]]] = {
    "trafka": consume_trafka,
    "trafka-try-send": consume_trafka,  # the same consumer, on the topic it produced
    "trafka-blocking": consume_trafka_blocking,
    "aiokafka": consume_aiokafka,
    "kafka-python": consume_kafka_python,
    "confluent-kafka": consume_confluent,
    "trafka-compat": functools.partial(consume_confluent, api="trafka.compat.confluent"),
    "java": consume_java,
}


# -- share groups (KIP-932) --------------------------------------------------------------------


def _share_group(topic: str, client: str) -> str:
    return f"{topic}-{client}"


def share_consume_trafka(bs: str, topic: str, n: int, partitions: int) -> dict[str, Any]:
    import trio

    from trafka.sdk import open_admin, open_share_consumer

    out: dict[str, Any] = {}
    group = _share_group(topic, "trafka")

    async def main() -> None:
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
        async with open_share_consumer(topic, bootstrap_servers=bs, group_id=group) as c:
            got = 0
            start = time.perf_counter()
            while got < n:
                got += len(await c.poll(1000))
            await c.commit()  # the last poll's records are accepted too
            out["seconds"] = time.perf_counter() - start
            out["records"] = got

    trio.run(main)
    return out


def share_consume_confluent(bs: str, topic: str, n: int, partitions: int) -> dict[str, Any]:
    from confluent_kafka import ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    group = _share_group(topic, "confluent-kafka")
    earliest = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    admin = AdminClient({"bootstrap.servers": bs})
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[earliest])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)
    consumer = ShareConsumer({"bootstrap.servers": bs, "group.id": group})
    try:
        consumer.subscribe([topic])
        got = 0
        start = time.perf_counter()
        while got < n:
            got += sum(1 for m in consumer.poll(1.0) if m.error() is None)
        # Implicit mode accepts a poll's records at the next poll or commit;
        # librdkafka 2.16's close() alone would release the last poll's.
        consumer.commit_sync(60)
        return {"seconds": time.perf_counter() - start, "records": got}
    finally:
        consumer.close()


SHARE_CONSUMERS = {"trafka": share_consume_trafka, "confluent-kafka": share_consume_confluent}


def run_share(
    args: argparse.Namespace, clients: list[str], bootstrap: str, run_id: str
) -> dict[str, dict[str, Any]]:
    """The share-group suite: one topic filled once (by trafka's producer), then each
    share consumer of ``clients`` drains it through a share group of its own
    (``share.auto.offset.reset=earliest``, implicit acknowledgement, each client's
    defaults), from its first poll to the commit of its last records."""
    topic = f"bench-share-{run_id}"
    create_topic(bootstrap, topic, args.partitions)
    produced = measure(args, "trafka", "produce", bootstrap, topic)
    print(f"share groups: {topic} filled at {_fmt_rate(produced)} records/s", flush=True)
    out: dict[str, dict[str, Any]] = {}
    if "error" in produced:
        _failed("share suite: trafka produce", produced["error"])
        return out
    for client in clients:
        result = measure(args, client, "share-consume", bootstrap, topic)
        out[client] = result
        print(f"  {client:<16} share-consume {_fmt_rate(result):>12} records/s", flush=True)
        if "error" in result:
            _failed(f"share suite: {client} share-consume", result["error"])
    a, b = out.get("trafka"), out.get("confluent-kafka")
    if a and b and "error" not in a and "error" not in b:
        print(f"  trafka / confluent-kafka share-consume {a['rate'] / b['rate']:.2f}", flush=True)
    return out


# -- the producer fronts (issue 81) ------------------------------------------------------------

#: The fronts of ``--suite producer``: trafka's async ``send`` and ``try_send``,
#: trafka.sdk.blocking, confluent-kafka's benchmark code on trafka.compat.confluent
#: (its import changed), and that code on confluent-kafka itself, the reference.
PRODUCER_FRONTS = (
    "trafka",
    "trafka-try-send",
    "trafka-blocking",
    "trafka-compat",
    "confluent-kafka",
)
PRODUCER_REFERENCE = "confluent-kafka"
#: Issue 81's targets, front / confluent-kafka in the same round: printed, never asserted.
PRODUCER_TARGETS = {
    "trafka": 1.0,
    "trafka-try-send": 1.0,
    "trafka-blocking": 0.8,
    "trafka-compat": 0.8,
}
COMPAT_CONSUME_TARGET = 1.0


class Workload(NamedTuple):
    """One produce workload of ``--suite producer`` (acks=1, no headers, no compression)."""

    name: str
    broker: str  # "brokerlite" or "kafka": where --workloads runs it
    records: int
    partitions: int
    keys: int
    size: int
    consume: bool = False  # the drop-in's consume ratio too, on confluent-kafka's topic

    def describe(self) -> str:
        keys = f"{self.keys:,} keys" if self.keys > 0 else "no key"
        size = f"{self.size // 1024} KiB" if self.size % 1024 == 0 else f"{self.size} B"
        return (
            f"{self.records:,} records of {size}, {self.partitions} partition"
            f"{'s' if self.partitions > 1 else ''}, {keys}"
        )


#: Issue 81's workloads (its table's four rows, and 1 KiB values), for ``--workloads``.
#: (e) has a fifth of (a)'s records, twice its bytes (1 KiB values).
ISSUE_WORKLOADS = {
    "a": Workload("a", "brokerlite", 1_000_000, 1, 0, 100, consume=True),
    "b": Workload("b", "kafka", 1_000_000, 1, 0, 100, consume=True),
    "c": Workload("c", "brokerlite", 500_000, 6, 1_000, 100),
    "d": Workload("d", "brokerlite", 500_000, 1, 0, 100),
    "e": Workload("e", "brokerlite", 200_000, 1, 0, 1024),
}


def producer_workloads(args: argparse.Namespace, kind: str) -> list[Workload]:
    """The workloads ``--suite producer`` runs on the broker ``kind``: those of
    ``--workloads`` that name it (each capped at ``--records`` records; a smoke run
    keeps the first only), else one from ``--records``, ``--size``, ``--partitions``,
    ``--keys``, consumed too."""
    if not args.workloads:
        return [
            Workload(kind, kind, args.records, args.partitions, args.keys, args.size, consume=True)
        ]
    chosen = [
        w._replace(records=min(w.records, args.records))
        for name in args.workloads.split(",")
        if (w := ISSUE_WORKLOADS[name.strip()]).broker == kind
    ]
    return chosen[:1] if args.smoke else chosen


def _median_of(rounds: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rounds if key in r]
    return statistics.median(values) if values else None


def run_producer(
    args: argparse.Namespace,
    fronts: list[str],
    broker: AnyBroker,
    workload: Workload,
    run_id: str,
) -> dict[str, Any]:
    """One workload for every front, ``--rounds`` times, each round in a rotated
    order of the fronts (so that none always runs first, on a fresher broker or a
    quieter machine); each front in a worker of its own, on a topic of its own.

    Then, for a workload with ``consume``, confluent-kafka's consumer and the
    drop-in's read the topic confluent-kafka produced in that round (the same
    batches for both), in alternating order."""
    wargs = argparse.Namespace(
        **{
            **vars(args),
            "records": workload.records,
            "size": workload.size,
            "partitions": workload.partitions,
            "keys": workload.keys,
        }
    )
    rounds: dict[str, list[dict[str, Any]]] = {f: [] for f in fronts}
    ratios: dict[str, list[float]] = {f: [] for f in fronts}
    consumed: dict[str, list[dict[str, Any]]] = {PRODUCER_REFERENCE: [], "trafka-compat": []}
    consume_ratios: list[float] = []
    print(f"  ({workload.name}) {workload.describe()}", flush=True)
    for n in range(args.rounds):
        order = fronts[n % len(fronts) :] + fronts[: n % len(fronts)]
        this: dict[str, dict[str, Any]] = {}
        for front in order:
            topic = f"bench-producer-{workload.name}-{front}-{n}-{run_id}"
            create_topic(broker.bootstrap, topic, workload.partitions)
            r = measure(wargs, front, "produce", broker.bootstrap, topic)
            this[front] = r
            rounds[front].append(r)
            print(
                f"    round {n + 1}  {front:<16} produce {_fmt_rate(r):>12} records/s", flush=True
            )
            if "error" in r:
                _failed(f"producer suite ({workload.name}): {front} round {n + 1}", r["error"])
            elif "profile" in r:
                print(r["profile"], flush=True)
        ref = this.get(PRODUCER_REFERENCE)
        if ref is None or "error" in ref:
            continue
        for front, r in this.items():
            if "error" not in r:
                ratios[front].append(r["rate"] / ref["rate"])
        if not workload.consume or "trafka-compat" not in fronts or args.profile:
            continue
        readers = ["trafka-compat", PRODUCER_REFERENCE]
        got: dict[str, dict[str, Any]] = {}
        for reader in readers if n % 2 == 0 else readers[::-1]:
            topic = f"bench-producer-{workload.name}-{PRODUCER_REFERENCE}-{n}-{run_id}"
            r = measure(wargs, reader, "consume", broker.bootstrap, topic)
            got[reader] = r
            consumed[reader].append(r)
            print(
                f"    round {n + 1}  {reader:<16} consume {_fmt_rate(r):>12} records/s", flush=True
            )
            if "error" in r:
                _failed(
                    f"producer suite ({workload.name}): {reader} consume round {n + 1}", r["error"]
                )
        if all("error" not in r for r in got.values()):
            consume_ratios.append(got["trafka-compat"]["rate"] / got[PRODUCER_REFERENCE]["rate"])
    result: dict[str, Any] = {"workload": workload._asdict(), "fronts": {}}
    for front in fronts:
        rs = rounds[front]
        failed = next((r for r in rs if "error" in r), None)
        if failed is not None:
            result["fronts"][front] = failed
            continue
        cpu = _median_of(rs, "cpu_seconds")
        result["fronts"][front] = {
            "rate": statistics.median(r["rate"] for r in rs),
            "ratio": statistics.median(ratios[front]) if ratios[front] else None,
            "cpu_us_per_record": None if cpu is None else cpu * 1e6 / workload.records,
            "peak_rss_growth": _median_of(rs, "peak_rss_growth"),
            "peak_accounted": _median_of(rs, "peak_accounted"),
            "buffer_memory": _median_of(rs, "buffer_memory"),
            "rounds": rs,
        }
    if consume_ratios:
        result["compat_consume"] = {
            "ratio": statistics.median(consume_ratios),
            **{
                reader: statistics.median(r["rate"] for r in rs if "error" not in r)
                for reader, rs in consumed.items()
            },
        }
    return result


def print_producer(name: str, results: list[dict[str, Any]], rounds: int, load: str) -> None:
    """One broker's table: per workload, each front's median rate, median ratio to
    confluent-kafka's rate in the same round (with issue 81's target), CPU per
    record and peak RSS growth."""
    mib = 1024 * 1024
    print()
    print(
        f"producer fronts against {name}: acks=1, medians of {rounds} alternated round(s); "
        f"load average {load}"
    )
    header = (
        f"  {'front':<16} {'records/s':>11}  {'/ confluent-kafka':<17}  {'target':<18}"
        f" {'CPU us/record':>13} {'peak RSS MiB':>13}"
    )
    for result in results:
        w = Workload(**result["workload"])
        print()
        print(f"({w.name}) {w.describe()}")
        print(header)
        print("  " + "-" * (len(header) - 2))
        for front, r in result["fronts"].items():
            if "error" in r:
                print(f"  {front:<16} {'failed':>11}")
                continue
            target = PRODUCER_TARGETS.get(front)
            if front == PRODUCER_REFERENCE:
                ratio, aim = "(the reference)", ""
            elif r["ratio"] is None:
                ratio, aim = "-", ""
            else:
                ratio = f"{r['ratio']:.2f}x"
                aim = "" if target is None else f">= {target:.1f}x, "
                aim += "" if target is None else ("met" if r["ratio"] >= target else "not met")
            cpu = "-" if r["cpu_us_per_record"] is None else f"{r['cpu_us_per_record']:.2f}"
            rss = "-" if r["peak_rss_growth"] is None else f"{r['peak_rss_growth'] / mib:.1f}"
            print(f"  {front:<16} {r['rate']:>11,.0f}  {ratio:<17}  {aim:<18} {cpu:>13} {rss:>13}")
        ours = result["fronts"].get("trafka", {})
        if ours.get("peak_accounted") is not None and ours.get("buffer_memory"):
            print(
                f"  trafka's accumulator: peak {ours['peak_accounted'] / mib:.1f} MiB accounted "
                f"of buffer.memory {ours['buffer_memory'] / mib:.0f} MiB"
            )
        consume = result.get("compat_consume")
        if consume is not None:
            ratio = consume["ratio"]
            met = "met" if ratio >= COMPAT_CONSUME_TARGET else "not met"
            print(
                f"  trafka-compat / confluent-kafka consume {ratio:.2f}x "
                f"(target >= {COMPAT_CONSUME_TARGET:.1f}x {met}): "
                f"{consume['trafka-compat']:,.0f} against {consume[PRODUCER_REFERENCE]:,.0f} "
                f"records/s, both reading confluent-kafka's topic"
            )
    print()
    print(
        "CPU: the worker process's user + system time over its produce loop (first send to\n"
        "last acknowledgement), every thread of it: the I/O thread of trafka-blocking and\n"
        "trafka-compat, librdkafka's threads for confluent-kafka. Peak RSS: the growth of the\n"
        "process's peak RSS over its RSS when the loop began."
    )


def _load_average() -> str:
    """The machine's 1, 5 and 15-minute load averages: the figures' noise depends on it."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


class _Profile:
    """``--profile``: cProfile over a worker's produce loop (the span :class:`_Meter`
    measures), in the calling thread and, apart, in the threads started after
    :meth:`install` (trafka.sdk.blocking's and the drop-in's I/O thread, whose
    entries from before the loop are cleared when it begins). librdkafka's threads
    are C: confluent-kafka's appear as the calls into it."""

    def __init__(self) -> None:
        import cProfile

        self.main = cProfile.Profile()
        self.threads: list[cProfile.Profile] = []

    def install(self) -> None:
        import cProfile
        import threading

        def hook(*_: Any) -> None:
            # threading's first profile event in a new thread: a C profiler of its
            # own takes over from this hook there.
            profiler = cProfile.Profile()
            self.threads.append(profiler)
            profiler.enable()

        threading.setprofile(hook)

    def start(self) -> None:
        for profiler in self.threads:
            profiler.clear()  # under the GIL: that thread's setup is forgotten
        self.main.enable()

    def stop(self) -> None:
        self.main.disable()
        # The threads' profilers may still run (an idle I/O thread): their entries
        # are copied now, not disabled from here.
        for profiler in self.threads:
            profiler.snapshot_stats()

    def report(self, top: int = 25) -> str:
        import io
        import pstats

        class Snapshot:  # what pstats takes: create_stats() and stats
            def __init__(self, profiler: Any) -> None:
                self.stats = getattr(profiler, "stats", {})

            def create_stats(self) -> None:
                pass

        self.main.snapshot_stats()
        parts = []
        for label, profilers in (
            ("the caller's thread", [self.main]),
            ("its other threads", self.threads),
        ):
            snapshots = [Snapshot(p) for p in profilers if getattr(p, "stats", None)]
            if not snapshots:
                continue
            out = io.StringIO()
            stats = pstats.Stats(*snapshots, stream=out)  # type: ignore[arg-type]
            stats.sort_stats("tottime").print_stats(top)
            body = out.getvalue().strip().splitlines()
            # From pstats' total on (its preamble names no file worth keeping).
            first = next((i for i, line in enumerate(body) if "function calls" in line), 0)
            parts.append(
                f"      profile of {label} over the produce loop, top {top} by tottime "
                "(the profiler slows the loop: this round's rate is not a measurement):"
            )
            parts.extend(f"      {line}" for line in body[first:] if line.strip())
        # File names from site-packages, the standard library's folder and the
        # repository's root: shorter lines.
        text = re.sub(r"\S*/site-packages/", "", "\n".join(parts))
        text = re.sub(r"\S*/lib/python3\.\d+/", "", text)
        return text.replace(str(Path(__file__).resolve().parents[1]) + "/", "")


#: The worker's profiler under ``--profile`` (its front's produce only).
PROFILE: _Profile | None = None


def run_worker(args: argparse.Namespace) -> int:
    global ACKS, JIT
    ACKS = args.acks
    JIT = not args.smoke
    if args.worker in EOS_MODES:
        result = EOS_WORKERS[args.client](
            args.bootstrap, args.topic, args.records, args.size, args.worker, args.txn_records
        )
        print(json.dumps(result), flush=True)
        return 0
    if args.worker == "share-consume":
        result = SHARE_CONSUMERS[args.client](
            args.bootstrap, args.topic, args.records, args.partitions
        )
        print(json.dumps(result), flush=True)
        return 0
    if args.worker == "produce":
        global PROFILE
        if args.profile == args.client:
            PROFILE = _Profile()
            PROFILE.install()
        result = PRODUCERS[args.client](
            args.bootstrap, args.topic, args.records, args.size, args.keys
        )
        if PROFILE is not None:
            result["profile"] = PROFILE.report()
    else:
        result = CONSUMERS[args.client](args.bootstrap, args.topic, args.records, args.partitions)
    print(json.dumps(result), flush=True)
    return 0


# -- what a commit cannot avoid -----------------------------------------------------------------


_ECHO_SERVER = """
import socket, sys
server = socket.create_server(("127.0.0.1", 0))
print(server.getsockname()[1], flush=True)
conn, _ = server.accept()
conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
while data := conn.recv(65536):
    conn.sendall(data)
"""


def echo_round_trip_ms(count: int = 2000, size: int = 64) -> float:
    """Median serial round trip, in ms, of ``size`` bytes to a plain-Python echo
    server in another process on loopback: the transport's share of any request
    between a client and a broker process on this machine."""
    server = subprocess.Popen(
        [sys.executable, "-c", _ECHO_SERVER], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        payload = b"x" * size
        times: list[float] = []
        with socket.create_connection(("127.0.0.1", port)) as sock:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for _ in range(count):
                began = time.perf_counter()
                sock.sendall(payload)
                got = 0
                while got < size:
                    chunk = sock.recv(65536)
                    if not chunk:
                        raise RuntimeError("the echo server went away")
                    got += len(chunk)
                times.append(time.perf_counter() - began)
        return statistics.median(times) * 1000
    finally:
        server.kill()
        server.wait()


def commit_floor_ms(bootstrap: str, topic: str, count: int = 500, warmup: int = 50) -> float:
    """Median, in ms, of the two round trips that end every transaction, its last
    Produce and then EndTxn, sent one after the other by a bare blocking client
    (:mod:`_raw`: a socket and trafka.codec) with one record per transaction.

    No producer can commit faster against this broker on this machine: the
    commit must wait for the last Produce's answer before it may send EndTxn.
    Each transaction first joins partition 0 of ``topic`` (AddPartitionsToTxn,
    not timed: a producer overlaps it with its records)."""
    from _raw import RawClient

    from trafka.codec import api
    from trafka.codec.messages import k00_produce as produce
    from trafka.codec.messages import k18_api_versions as api_versions
    from trafka.codec.messages import k22_init_producer_id as ipid
    from trafka.codec.messages import k24_add_partitions_to_txn as apt
    from trafka.codec.messages import k26_end_txn as et
    from trafka.codec.records import encode_batch

    client = RawClient(bootstrap, timeout=30)
    try:
        offered = {
            k.api_key: k.max_version
            for k in client.request(18, 3, api_versions.ApiVersionsRequest()).api_keys
        }
        version = {k: min(api(k).max_version, offered[k]) for k in (0, 22, 24, 26)}
        version[24] = min(version[24], 3)  # v4+ is the brokers' batched form; clients send v3
        # Transaction version 1's flow, kept on purpose (the SDK's producer follows
        # version 2 where the cluster finalized it, sdk/txn_version.py): Produce
        # v12+ and EndTxn v5+ are version 2's (KIP-890: an EndTxn v5 bumps the epoch).
        version[0], version[26] = min(version[0], 11), min(version[26], 4)
        tid = f"bench-floor-{uuid.uuid4().hex}"
        init = client.request(
            22,
            version[22],
            ipid.InitProducerIdRequest(
                transactional_id=tid,
                transaction_timeout_ms=60_000,
                producer_id=-1,
                producer_epoch=-1,
            ),
        )
        if init.error_code:
            raise RuntimeError(f"InitProducerId failed with error {init.error_code}")
        pid, epoch = init.producer_id, init.producer_epoch
        add = apt.AddPartitionsToTxnRequest
        join = add(
            v3_and_below_transactional_id=tid,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[add.AddPartitionsToTxnTopic(name=topic, partitions=[0])],
        )
        commit = et.EndTxnRequest(
            transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
        )
        P = produce.ProduceRequest
        value = b"x" * 100
        times: list[float] = []
        for seq in range(warmup + count):
            joined = client.request(24, version[24], join)
            code = joined.results_by_topic_v3_and_below[0].results_by_partition[0]
            if code.partition_error_code:
                raise RuntimeError(f"AddPartitionsToTxn failed: {code.partition_error_code}")
            batch = encode_batch(
                [(int(time.time() * 1000), None, value, ())],
                producer_id=pid,
                producer_epoch=epoch,
                base_sequence=seq,
                is_transactional=True,
            )
            request = P(
                transactional_id=tid,
                acks=-1,
                timeout_ms=30_000,
                topic_data=[
                    P.TopicProduceData(
                        name=topic, partition_data=[P.PartitionProduceData(index=0, records=batch)]
                    )
                ],
            )
            began = time.perf_counter()
            produced = client.request(0, version[0], request)
            ended = client.request(26, version[26], commit)
            took = time.perf_counter() - began
            code = produced.responses[0].partition_responses[0].error_code or ended.error_code
            if code:
                raise RuntimeError(f"a floor transaction failed with error {code}")
            if seq >= warmup:
                times.append(took)
        return statistics.median(times) * 1000
    finally:
        client.close()


def fsync_ms(directory: Path, count: int = 300) -> float:
    """Median cost, in ms, of appending 256 bytes to a file in ``directory`` and
    fsyncing it: what brokerlite's EndTxn pays before it answers when a partition
    of the transaction has ``flush.messages=1``, and after it otherwise."""
    path = directory / f"fsync-probe-{uuid.uuid4().hex}"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    times: list[float] = []
    try:
        for _ in range(count):
            began = time.perf_counter()
            os.write(fd, b"x" * 256)
            os.fsync(fd)
            times.append(time.perf_counter() - began)
    finally:
        os.close(fd)
        path.unlink()
    return statistics.median(times) * 1000


def print_commit_budget(
    plain: dict[str, Any],
    txn: dict[str, Any],
    per_txn: int,
    data_dir: Path,
    floor_ms: float | None,
    smoke: bool = False,
) -> None:
    """What the transactional target leaves a commit, against what it costs here
    (``smoke``: fewer samples of the machine's round trip and fsync)."""
    target = TXN_TARGET
    records_ms = per_txn / plain["rate"] * 1000  # one transaction's records at the plain rate
    budget_ms = records_ms * (1 / target - 1)
    rtt = echo_round_trip_ms(200) if smoke else echo_round_trip_ms()
    sync = fsync_ms(data_dir, 20) if smoke else fsync_ms(data_dir)
    print(
        f"trafka transactional: {per_txn:,} records take {records_ms:.2f} ms at the plain rate, "
        f"so a {1 - target:.0%} cost leaves a commit {budget_ms:.2f} ms; "
        f"the median commit took {txn['commit_ms']:.2f} ms, "
        f"{txn['commit_cpu_ms']:.2f} ms of it the producer's own CPU time"
    )
    if floor_ms is not None:
        print(
            f"  floor: a bare blocking client (a socket and trafka.codec) needs {floor_ms:.2f} ms "
            f"for the last Produce (one record) and EndTxn against this broker, "
            f"{floor_ms / budget_ms:.0%} of that budget; alone it caps a transactional producer "
            f"at {records_ms / (records_ms + floor_ms):.0%} of the plain rate"
        )
    print(
        f"  this machine: loopback round trip {rtt:.3f} ms (plain-Python echo; two of them are "
        f"{2 * rtt / budget_ms:.0%} of the budget); 256 B append + fsync {sync:.3f} ms "
        f"(before the EndTxn answer only with flush.messages=1)"
    )


def print_pipeline_chain(args: argparse.Namespace, bootstrap: str, run_id: str) -> None:
    """How long one pipelined transaction takes with next to no records.

    A producer has one transaction at the coordinator at a time: the next one's
    first request (Produce on transaction version 2, AddPartitionsToTxn on 1)
    waits for the last EndTxn, its EndTxn for its Produce's answer. Pipelined transactions of one record each
    time that chain: the round trips, the broker's work, and the producer's
    reactions through its event loop (which the polls of a transaction filling
    its records make cheaper, so it is an upper bound for that case)."""
    count = 100 if args.smoke else 2000
    chain_args = argparse.Namespace(**{**vars(args), "records": count, "txn_records": 1})
    topic = f"bench-eos-chain-{run_id}"
    create_topic(bootstrap, topic, 1)
    r = measure(chain_args, "trafka", "pipelined", bootstrap, topic)
    if "error" in r:
        _failed(
            "eos suite: pipelined chain",
            r["error"],
            f"  (the pipelined chain failed: {r['error']})",
        )
        return
    chain_ms = r["seconds"] / count * 1000
    print(
        f"  chain: pipelined transactions of one record take {chain_ms:.2f} ms each against "
        f"this broker ({1000 / chain_ms:,.0f} a second; "
        f"{r['cpu_us_per_record'] / 1000:.2f} ms of it the producer's own CPU)"
    )


# -- the driver -------------------------------------------------------------------------------


class Broker:
    """brokerlite in a child process, with its data in a temporary directory."""

    name = "brokerlite"

    def pids(self) -> list[int]:
        return [] if self.proc is None else [self.proc.pid]

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
                "--no-announce",
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


class KafkaBroker:
    """Apache Kafka 4.x, one KRaft node with the full JIT, its data in a temporary
    directory; or the running node :data:`_kafka.RUNNING` names (the smoke test's)."""

    name = "Apache Kafka"

    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="trafka-bench-kafka-"))
        self.cluster = kafka_peers().KafkaCluster(
            kafka_peers().KAFKA_4, self.dir, jit=True, config={"num.partitions": 1}
        )
        self.bootstrap = ""
        self.running: list[int] | None = None  # the pids of a running node

    def pids(self) -> list[int]:
        if self.running is not None:
            return self.running
        return [node.proc.pid for node in self.cluster.nodes if node.proc is not None]

    def start(self) -> None:
        found = running_cluster(1)
        if found is not None:
            self.bootstrap, self.running = found
        else:
            self.cluster.start()
            self.bootstrap = self.cluster.bootstrap_servers
        self.name = f"Apache Kafka {self.cluster.version}"

    def stop(self) -> None:
        if self.running is None:
            self.cluster.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class BrokerliteCluster:
    """``--cluster N``: N brokerlite processes on a private ZooKeeper (its CPU not counted),
    or on a chroot of the running server ``TRAFKA_BENCH_ZOOKEEPER`` names (bench/_kafka.py)."""

    name = "brokerlite cluster"

    def __init__(self, nodes: int) -> None:
        from trafka.brokerlite.dev.local_cluster import ClusterProcesses

        self.dir = Path(tempfile.mkdtemp(prefix="trafka-bench-clients-cluster-"))
        self.cluster = ClusterProcesses(
            self.dir,
            nodes,
            # As tests/kafka_peers.py sets up Kafka: a small offsets topic.
            settings={"group.initial.rebalance.delay.ms": 0, "offsets.topic.num.partitions": 5},
            zookeeper_connect=zookeeper_chroot(),
        )
        self.bootstrap = ""

    def pids(self) -> list[int]:
        return [p.pid for p in self.cluster.procs.values() if p.poll() is None]

    def start(self) -> None:
        self.cluster.start(timeout=120)
        self.bootstrap = self.cluster.bootstrap_servers
        self.name = f"brokerlite, {len(self.cluster.ports)} nodes"

    def stop(self) -> None:
        self.cluster.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


class KafkaZkCluster:
    """``--cluster N``: N Apache Kafka 3.9 brokers on a private ZooKeeper (its CPU not
    counted), full JIT. 3.9 on ZooKeeper rather than 4.x on KRaft: the same
    coordination as brokerlite's cluster, so the brokers' CPU is their data path and
    replication, without a KRaft quorum's work in the same processes. Or the
    running cluster :data:`_kafka.RUNNING_ZK` names, when it has as many nodes
    (the smoke test's: its figures are not judged)."""

    name = "Apache Kafka"

    def __init__(self, nodes: int) -> None:
        from trafka.brokerlite.dev.zookeeper_server import ZooKeeperServer

        self.dir = Path(tempfile.mkdtemp(prefix="trafka-bench-kafka-zk-"))
        self.zookeeper = ZooKeeperServer(self.dir / "zookeeper")
        self.nodes = nodes
        self.cluster: Any = None
        self.bootstrap = ""
        self.running: list[int] | None = None  # the pids of a running cluster's brokers

    def pids(self) -> list[int]:
        if self.running is not None:
            return self.running
        nodes = [] if self.cluster is None else self.cluster.nodes
        return [node.proc.pid for node in nodes if node.proc is not None]

    def start(self) -> None:
        peers = kafka_peers()
        found = running_cluster(self.nodes, RUNNING_ZK, RUNNING_ZK_PIDS)
        if found is not None:
            self.bootstrap, self.running = found
            self.name = f"Apache Kafka {peers.KAFKA_3}, {self.nodes} nodes"
            return
        self.zookeeper.start(timeout=60)
        self.cluster = peers.KafkaCluster(
            peers.KAFKA_3,
            self.dir / "kafka",
            nodes=self.nodes,
            zookeeper=self.zookeeper.connect_string + "/kafka",
            jit=True,
            config={"num.partitions": 1},
        )
        self.cluster.start()
        self.bootstrap = self.cluster.bootstrap_servers
        self.name = f"Apache Kafka {self.cluster.version}, {self.nodes} nodes"

    def stop(self) -> None:
        if self.cluster is not None:
            self.cluster.stop()
        if self.running is None:
            self.zookeeper.stop()
        shutil.rmtree(self.dir, ignore_errors=True)


AnyBroker = Broker | KafkaBroker | BrokerliteCluster | KafkaZkCluster


def make_broker(kind: str, nodes: int) -> AnyBroker:
    if nodes > 1:
        return KafkaZkCluster(nodes) if kind == "kafka" else BrokerliteCluster(nodes)
    return KafkaBroker() if kind == "kafka" else Broker()


def run_open_loop(args: argparse.Namespace, broker: AnyBroker, run_id: str) -> OpenLoop:
    """Produce latency at a fixed rate below saturation (bench/_open_loop.py), acks as
    the throughput runs (all with --cluster), into a topic of its own."""
    topic = f"bench-open-loop-{run_id}"
    create_topic(broker.bootstrap, topic, args.partitions, args.cluster)
    result = open_loop(
        broker.bootstrap,
        topic,
        rate=args.rate,
        seconds=args.rate_seconds,
        size=args.size,
        keys=max(1, args.keys),
        acks=-1 if args.cluster > 1 else 1,
        warmup=smoke_window(args.rate)[1] if args.smoke else 0.5,
    )
    print(
        f"  open loop: p50 {result.quantile(0.5) * 1e3:.2f} ms, p99 "
        f"{result.quantile(0.99) * 1e3:.2f} ms ({result.note(args.rate, args.rate_seconds)})",
        flush=True,
    )
    if result.failed or len(result.times) != result.sent:
        _failed("open-loop produce", result.note(args.rate, args.rate_seconds))
    return result


def create_topic(bootstrap: str, topic: str, partitions: int, replication: int = 1) -> None:
    import trio

    from trafka.codec.errors import ErrorCode, KafkaError
    from trafka.sdk import NewTopic, TopicPartition, open_admin

    async def main() -> None:
        with trio.fail_after(60):
            async with open_admin(bootstrap_servers=bootstrap) as admin:
                await admin.create_topics([NewTopic(topic, partitions, replication)])
                # Kafka answers CreateTopics before its partitions are served (on
                # ZooKeeper, before the brokers even know the topic).
                tps = [TopicPartition(topic, p) for p in range(partitions)]
                while True:
                    try:
                        await admin.list_offsets({tp: "latest" for tp in tps})
                        return
                    except KafkaError as exc:
                        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                            raise
                    await trio.sleep(0.1)

    trio.run(main)


def measure(
    args: argparse.Namespace, client: str, phase: str, bootstrap: str, topic: str
) -> dict[str, Any]:
    if client == "java" and JAVA_SESSION is not None:
        return _measure_java(args, phase, bootstrap, topic)
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
        "--txn-records",
        str(args.txn_records),
        "--keys",
        str(args.keys),
        "--acks",
        str(-1 if args.cluster > 1 else 1),
        *(["--smoke"] if args.smoke else []),
        *(["--profile", args.profile] if getattr(args, "profile", None) else []),
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


def _measure_java(
    args: argparse.Namespace, phase: str, bootstrap: str, topic: str
) -> dict[str, Any]:
    """:func:`measure` of Kafka's perf clients in the smoke run's :data:`JAVA_SESSION`."""
    global ACKS
    ACKS = -1 if args.cluster > 1 else 1
    try:
        if phase == "produce":
            result = produce_java(bootstrap, topic, args.records, args.size, args.keys)
        else:
            result = consume_java(bootstrap, topic, args.records, args.partitions)
    except (OSError, RuntimeError, KeyError, IndexError, ValueError) as exc:
        return {"error": str(exc)}
    result["rate"] = args.records / result["seconds"]
    return result


def _fmt_rate(result: dict[str, Any] | None) -> str:
    if not result or "skipped" in result:
        return "-"
    if "error" in result:
        return "failed"
    return f"{result['rate']:,.0f}"


def _median_result(rounds: list[dict[str, Any]], plain: list[dict[str, Any]]) -> dict[str, Any]:
    """One mode's rounds as one result: median rate, median fraction of the same round's plain
    rate, and the median commit figures of a transactional producer."""
    if not rounds:
        return {"skipped": True}
    failed = next((r for r in rounds if "error" in r), None)
    if failed is not None:
        return failed
    out: dict[str, Any] = {"rate": statistics.median(r["rate"] for r in rounds)}
    pairs = [(r, p) for r, p in zip(rounds, plain, strict=True) if "error" not in p]
    if pairs:
        out["fraction"] = statistics.median(r["rate"] / p["rate"] for r, p in pairs)
    for key in ("commit_ms", "commit_cpu_ms", "cpu_us_per_record"):
        if all(key in r for r in rounds):
            out[key] = statistics.median(r[key] for r in rounds)
    out["rounds"] = rounds
    return out


def run_eos(
    args: argparse.Namespace,
    clients: list[str],
    bootstrap: str,
    run_id: str,
    data_dir: Path,
) -> dict[str, dict[str, dict[str, Any]]]:
    """The delivery-guarantee suite: every client of ``clients`` in every mode, ``--rounds``
    times, each round in a rotated order of the modes (so that none always runs first on
    a fresh broker); each mode's rate and fraction of plain are medians over the rounds."""
    rounds: dict[str, dict[str, list[dict[str, Any]]]] = {
        c: {m: [] for m in EOS_MODES} for c in clients
    }
    print(
        f"delivery guarantees: acks=all, {args.records:,} records of {args.size} bytes, "
        f"transactions of {args.txn_records:,} records, {args.rounds} round(s)",
        flush=True,
    )
    for n in range(args.rounds):
        order = EOS_MODES[n % len(EOS_MODES) :] + EOS_MODES[: n % len(EOS_MODES)]
        for client in clients:
            for mode in order:
                if mode == "pipelined" and client not in PIPELINING_CLIENTS:
                    continue
                topic = f"bench-eos-{client}-{mode}-{n}-{run_id}"
                create_topic(bootstrap, topic, args.partitions)
                r = measure(args, client, mode, bootstrap, topic)
                rounds[client][mode].append(r)
                print(
                    f"  round {n + 1}  {client:<16} {mode:<14} {_fmt_rate(r):>12} records/s",
                    flush=True,
                )
                if "error" in r:
                    _failed(f"eos suite: {client} {mode} round {n + 1}", r["error"])
    results = {
        client: {mode: _median_result(rs[mode], rs["plain"]) for mode in EOS_MODES}
        for client, rs in rounds.items()
    }
    print()
    header = f"{'client':<16} " + " ".join(f"{m:>14}" for m in EOS_MODES)
    print(header + "   (median records/s; in brackets: median fraction of plain)")
    print("-" * len(header))
    for client, r in results.items():
        cells = []
        for mode in EOS_MODES:
            this = r[mode]
            cell = _fmt_rate(this)
            if mode != "plain" and "fraction" in this:
                cell += f" ({this['fraction']:.2f})"
            cells.append(f"{cell:>14}")
        print(f"{client:<16} " + " ".join(cells))
    ours = results.get("trafka", {})
    plain = ours.get("plain")
    if plain and "error" not in plain:
        print()
        for mode in EOS_MODES:
            this = ours.get(mode)
            if mode == "plain" or not this or "fraction" not in this:
                continue
            kept = this["fraction"]
            cost = f"costs {1 - kept:.0%}" if kept < 1 else "no measurable cost"
            target = EOS_TARGETS.get(mode)
            if target is None:
                judged = "each commit awaited: see its floor below"
            else:
                verdict = "meets" if kept >= target else "misses"
                judged = f"target: cost < {1 - target:.0%}, {verdict} it"
            print(f"trafka {mode}: keeps {kept:.0%} of the plain rate ({cost}; {judged})")
        piped = ours.get("pipelined")
        if piped and "cpu_us_per_record" in piped and "cpu_us_per_record" in plain:
            # Less noisy than the rate: the producer is bound by its own CPU when
            # pipelining, and waiting for the broker costs none.
            per_txn = args.txn_records / 1000
            extra = (piped["cpu_us_per_record"] - plain["cpu_us_per_record"]) * per_txn
            allowed = plain["cpu_us_per_record"] * per_txn * (1 / EOS_TARGETS["pipelined"] - 1)
            print(
                f"trafka pipelined: a transaction of {args.txn_records:,} records costs the "
                f"producer {extra:.2f} ms of CPU beyond plain "
                f"({plain['cpu_us_per_record']:.2f} against "
                f"{piped['cpu_us_per_record']:.2f} us a record); a 25% cost allows "
                f"{allowed:.2f} ms"
            )
            print_pipeline_chain(args, bootstrap, run_id)
        txn = ours.get("transactional")
        if txn and "commit_ms" in txn:
            topic = f"bench-eos-floor-{run_id}"
            create_topic(bootstrap, topic, 1)
            try:
                floor: float | None = commit_floor_ms(
                    bootstrap, topic, *((50, 5) if args.smoke else ())
                )
            except (OSError, RuntimeError) as exc:
                _failed(
                    "eos suite: commit floor", str(exc), f"  (the bare-client floor failed: {exc})"
                )
                floor = None
            print_commit_budget(plain, txn, args.txn_records, data_dir, floor, args.smoke)
    return results


def _exit_status() -> int:
    """0, or 1 after listing on stderr what failed."""
    if not FAILURES:
        return 0
    print(f"\n{len(FAILURES)} measurement(s) failed:", file=sys.stderr)
    for failure in FAILURES:
        print(f"  {failure}", file=sys.stderr)
    return 1


def _cpu_seconds(pids: list[int]) -> float:
    """CPU seconds (user + system) the processes used so far, from /proc."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def run_throughput(
    args: argparse.Namespace, clients: list[str], broker: AnyBroker, run_id: str
) -> dict[str, dict[str, dict[str, Any]]]:
    """Every client's produce and consume on its own topic, then every consumer on
    a common topic; each result with the broker's CPU seconds while it ran."""
    results: dict[str, dict[str, dict[str, Any]]] = {}

    def timed(client: str, phase: str, topic: str) -> dict[str, Any]:
        before = _cpu_seconds(broker.pids())
        result = measure(args, client, phase, broker.bootstrap, topic)
        result["broker_cpu"] = _cpu_seconds(broker.pids()) - before
        return result

    for client in clients:
        topic = f"bench-{client}-{run_id}"
        create_topic(broker.bootstrap, topic, args.partitions, args.cluster)
        produced = timed(client, "produce", topic)
        results[client] = {"produce": produced}
        print(f"  {client:<16} produce {_fmt_rate(produced):>12} records/s", flush=True)
        if "error" in produced:
            _failed(f"{client} produce", produced["error"])
            continue
        consumed = timed(client, "consume", topic)
        results[client]["consume"] = consumed
        print(f"  {client:<16} consume {_fmt_rate(consumed):>12} records/s", flush=True)
        if "error" in consumed:
            _failed(f"{client} consume", consumed["error"])
    # Each client's defaults shape its own topic (batch.size: trafka 1 MB,
    # Java-like clients 16 KiB, librdkafka 1 MB), and bigger batches are cheaper
    # to read. So every consumer also reads one common topic, written with
    # small batches, to compare the consumers alone.
    common = next(
        (
            c
            for c in ("aiokafka", "kafka-python", "java", *clients)
            if "error" not in results.get(c, {}).get("produce", {"error": ""})
        ),
        None,
    )
    # A smoke run reads the common topic with one client: the others would run
    # the consume code they ran on their own topics again.
    readers = clients[:1] if args.smoke else clients
    for client in readers if common else ():
        if "error" in results[client]["produce"]:
            continue
        same = timed(client, "consume", f"bench-{common}-{run_id}")
        results[client]["consume_common"] = same
        print(
            f"  {client:<16} consume {_fmt_rate(same):>12} records/s ({common}'s topic)",
            flush=True,
        )
        if "error" in same:
            _failed(f"{client} consume ({common}'s topic)", same["error"])
    return results


def _ratio(a: dict[str, Any] | None, b: dict[str, Any] | None) -> str:
    ok = a and b and "error" not in a and "error" not in b
    return f"{a['rate'] / b['rate']:.2f}" if ok else "-"  # type: ignore[index]


def print_throughput(
    name: str, results: dict[str, dict[str, dict[str, Any]]], acks: str = "1"
) -> None:
    print()
    print(f"throughput against {name}: acks={acks}")
    header = f"{'client':<16} {'produce rec/s':>14} {'consume rec/s':>14} {'common topic':>14}"
    print(header)
    print("-" * len(header))
    for client, r in results.items():
        print(
            f"{client:<16} {_fmt_rate(r.get('produce')):>14} {_fmt_rate(r.get('consume')):>14}"
            f" {_fmt_rate(r.get('consume_common')):>14}"
        )
    blocking = results.get("trafka-blocking", {})
    compat = results.get("trafka-compat", {})
    if compat and blocking:
        # confluent-kafka's code on trafka (trafka.compat.confluent) against
        # trafka's own blocking clients: what the compatibility layer costs.
        cells = [_ratio(compat.get(p), blocking.get(p)) for p in ("produce", "consume")]
        print()
        print(f"trafka-compat / trafka-blocking produce {cells[0]:>6}   consume {cells[1]:>6}")
    ours = results.get("trafka", {})
    if not ours:
        return
    print()
    print("trafka / other (above 1: trafka is faster)")
    for client, r in results.items():
        if client == "trafka":
            continue
        cells = [_ratio(ours.get(p), r.get(p)) for p in ("produce", "consume", "consume_common")]
        print(
            f"  vs {client:<16} produce {cells[0]:>6}   consume {cells[1]:>6}"
            f"   consume (common topic) {cells[2]:>6}"
        )
    blocking = results.get("trafka-blocking", {})
    peers = [c for c in SYNC_PEERS if c in results]
    if blocking and peers:
        print()
        print("trafka-blocking / other (above 1: trafka.sdk.blocking is faster)")
        for client in peers:
            r = results[client]
            cells = [_ratio(blocking.get(p), r.get(p)) for p in ("produce", "consume")]
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


def print_brokers(
    args: argparse.Namespace, names: list[str], by_broker: list[dict[str, dict[str, Any]]]
) -> None:
    """brokerlite against Apache Kafka with the same clients (issue 61): each
    client's rates on both, and each broker process's CPU per 100k records."""
    (a_name, b_name), (a, b) = names, by_broker
    print()
    print(f"{a_name} / {b_name}, same clients (rates: above 1, {a_name} is faster)")
    print(f"{'':<20}{'produce':>9}{'consume':>9}   broker CPU s per 100k: produce, consume")
    for client in a:
        if client not in b:
            continue
        cells = [_ratio(a[client].get(p), b[client].get(p)) for p in ("produce", "consume")]
        cpu = []
        for phase in ("produce", "consume"):
            for r in (a[client].get(phase), b[client].get(phase)):
                ok = r and "broker_cpu" in r
                cpu.append(f"{r['broker_cpu'] / args.records * 1e5:.2f}" if ok else "-")  # type: ignore[index]
        print(
            f"  {client:<18}{cells[0]:>9}{cells[1]:>9}   {cpu[0]} vs {cpu[1]}, {cpu[2]} vs {cpu[3]}"
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=1_000_000, help="records per client")
    parser.add_argument("--size", type=int, default=100, help="value bytes per record")
    parser.add_argument("--partitions", type=int, default=1, help="partitions per topic")
    parser.add_argument(
        "--keys",
        type=int,
        default=0,
        help="keyed records: record i gets key-<i mod KEYS>, partitioned by each client's "
        "default (0: no key)",
    )
    parser.add_argument(
        "--clients",
        default=",".join(c for c in CLIENTS if c != "java"),
        help=f"comma-separated, from {', '.join(CLIENTS)}",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds per measurement")
    parser.add_argument(
        "--broker",
        default="brokerlite",
        help="the broker(s) every client talks to: brokerlite, kafka (Apache Kafka 4.x "
        "itself, from make peers' jars) or brokerlite,kafka (both in turn, compared)",
    )
    parser.add_argument(
        "--cluster",
        type=int,
        default=1,
        help="brokers per cluster: above 1, each broker runs as a cluster of that many "
        "nodes (brokerlite and Kafka 3.9, both on ZooKeeper), topics get that replication "
        "factor and the producers acks=all",
    )
    parser.add_argument(
        "--rate",
        type=float,
        default=0,
        help="open-loop produce latency (p50, p99) at this many records/s per broker, "
        "below saturation (0: skip)",
    )
    parser.add_argument("--rate-seconds", type=float, default=10.0, help="open-loop duration")
    parser.add_argument("--json", action="store_true", help="print the results as JSON too")
    parser.add_argument(
        "--suite",
        choices=["throughput", "eos", "share", "producer", "all"],
        default="throughput",
        help="throughput: every client produce/consume; eos: delivery guarantees "
        "(plain / idempotent / transactional) for trafka and confluent-kafka; share: "
        "share-group consumers (KIP-932) of trafka and confluent-kafka; producer: "
        "trafka's producer fronts against confluent-kafka in alternated rounds (issue 81); "
        "all: throughput, eos and share",
    )
    parser.add_argument(
        "--workloads",
        default="",
        help="producer suite: issue 81's workloads to run, from "
        + "; ".join(f"{w.name}: {w.describe()} on {w.broker}" for w in ISSUE_WORKLOADS.values())
        + " (comma-separated; each on its broker, if --broker names it, with at most "
        "--records records); without it, one workload from --records, --size, --partitions "
        "and --keys on every broker of --broker",
    )
    parser.add_argument(
        "--profile",
        metavar="FRONT",
        choices=PRODUCER_FRONTS,
        help="producer suite: run only FRONT (and confluent-kafka, for its ratio), its "
        "produce loop under cProfile, and print the top 25 entries by tottime per round",
    )
    parser.add_argument(
        "--txn-records", type=int, default=1000, help="records per transaction (eos suite)"
    )
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="eos and producer suites: rounds of every mode or front (medians are reported)",
    )
    # Worker mode (internal): one measurement in this process.
    parser.add_argument(
        "--worker",
        choices=["produce", "consume", "share-consume", *EOS_MODES],
        help=argparse.SUPPRESS,
    )
    parser.add_argument("--client", choices=CLIENTS, help=argparse.SUPPRESS)
    parser.add_argument("--acks", type=int, default=1, help=argparse.SUPPRESS)
    parser.add_argument("--bootstrap", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a check that the benchmark runs, not a measurement: 2,000 records, one eos "
        "round of 100-record transactions, few samples, the common topic read by one client, "
        "the producer suite's first workload per broker only, "
        "Kafka's perf clients in one JVM (C1 only) for the whole run, "
        "whatever the other options say (tests/bench/test_bench_smoke.py)",
    )
    args = parser.parse_args(argv)
    if args.worker:
        return run_worker(args)
    global JAVA_SESSION
    if args.smoke:
        args.records, args.rounds, args.txn_records = 2_000, 1, 100
        args.timeout = SMOKE_TIMEOUT
        if args.rate > 0:
            args.rate_seconds = min(args.rate_seconds, smoke_window(args.rate)[0])

    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = set(clients) - set(CLIENTS)
    if unknown:
        parser.error(f"unknown client(s): {', '.join(sorted(unknown))}")
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if "java" in clients and args.keys:
        parser.error("the java client (ProducerPerformance) sends no keys: drop --keys")
    kinds = [b.strip() for b in args.broker.split(",") if b.strip()]
    if not kinds or set(kinds) - {"brokerlite", "kafka"} or len(kinds) > 2:
        parser.error("--broker takes brokerlite, kafka or brokerlite,kafka")
    if args.suite in ("eos", "share", "all") and kinds != ["brokerlite"]:
        parser.error("the eos and share suites run against brokerlite only")
    if args.suite != "producer" and (args.workloads or args.profile):
        parser.error("--workloads and --profile are the producer suite's")
    if args.suite == "producer" and args.cluster > 1:
        parser.error("the producer suite runs on one broker")
    wanted = [w.strip() for w in args.workloads.split(",") if w.strip()]
    if set(wanted) - set(ISSUE_WORKLOADS):
        parser.error(f"--workloads takes {', '.join(ISSUE_WORKLOADS)}")
    for name in wanted:
        if ISSUE_WORKLOADS[name].broker not in kinds:
            print(
                f"workload ({name}) skipped: it runs on {ISSUE_WORKLOADS[name].broker}, "
                f"which --broker does not name",
                file=sys.stderr,
            )
    fronts = [f for f in PRODUCER_FRONTS if f in clients]
    if args.profile:
        fronts = [f for f in PRODUCER_FRONTS if f in (args.profile, PRODUCER_REFERENCE)]
    if args.cluster < 1 or (args.cluster > 1 and args.suite != "throughput"):
        parser.error("--cluster takes a node count, for the throughput suite")
    # SIGTERM (e.g. from make or CI) must still stop the broker and remove its files.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    eos: dict[str, dict[str, dict[str, Any]]] = {}
    share: dict[str, dict[str, Any]] = {}
    run_id = uuid.uuid4().hex[:8]
    throughput = args.suite in ("throughput", "all")
    names: list[str] = []
    by_broker: list[dict[str, dict[str, dict[str, Any]]]] = []
    latencies: list[OpenLoop] = []
    produced: list[tuple[str, list[dict[str, Any]], str]] = []
    if args.smoke and "java" in clients and throughput:
        JAVA_SESSION = script_session()
    try:
        for kind in kinds:
            broker = make_broker(kind, args.cluster)
            try:
                broker.start()
                workload = (
                    "issue 81's workloads"
                    if args.suite == "producer" and args.workloads
                    else f"{args.records:,} records of {args.size} bytes, "
                    f"{args.partitions} partition(s), "
                    f"{f'{args.keys:,} keys' if args.keys > 0 else 'no keys'}"
                )
                print(
                    f"{broker.name} at {broker.bootstrap}; {workload}, "
                    f"Python {sys.version.split()[0]}",
                    flush=True,
                )
                if args.suite in ("eos", "all"):
                    eos = run_eos(
                        args,
                        [c for c in clients if c in EOS_CLIENTS],
                        broker.bootstrap,
                        run_id,
                        broker.dir,
                    )
                if args.suite in ("share", "all"):
                    share = run_share(
                        args, [c for c in clients if c in SHARE_CONSUMERS], broker.bootstrap, run_id
                    )
                if args.suite == "producer":
                    load = _load_average()
                    tables = [
                        run_producer(args, fronts, broker, workload, run_id)
                        for workload in producer_workloads(args, kind)
                    ]
                    load += f" at the start, {_load_average()} at the end"
                    produced.append((broker.name, tables, load))
                if throughput:
                    names.append(broker.name)
                    by_broker.append(run_throughput(args, clients, broker, run_id))
                if args.rate > 0:
                    latencies.append(run_open_loop(args, broker, run_id))
            finally:
                broker.stop()
    finally:
        if JAVA_SESSION is not None:
            JAVA_SESSION.close()
            JAVA_SESSION = None

    for name, tables, load in produced:
        print_producer(name, tables, args.rounds, load)
    if produced and args.json:
        print(json.dumps({name: tables for name, tables, _ in produced}))
    if not throughput:
        if args.json and not produced:
            print(json.dumps({"eos": eos, "share": share}))
        return _exit_status()
    for name, results in zip(names, by_broker, strict=True):
        print_throughput(name, results, "all" if args.cluster > 1 else "1")
    if len(by_broker) == 2:
        print_brokers(args, names, by_broker)
    for name, latency in zip(names, latencies, strict=False):
        print(
            f"open-loop produce latency against {name}, {args.rate:,.0f} records/s: "
            f"p50 {latency.quantile(0.5) * 1e3:.2f} ms, p99 {latency.quantile(0.99) * 1e3:.2f} ms"
        )
    if args.json:
        print(json.dumps({**dict(zip(names, by_broker, strict=True)), "eos": eos, "share": share}))
    return _exit_status()


if __name__ == "__main__":
    sys.exit(main())
