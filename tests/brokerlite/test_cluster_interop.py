"""Clients against a three-node brokerlite cluster coordinated by ZooKeeper.

For each of confluent-kafka (librdkafka), kafka-python, aiokafka, kcat and
trafka's SDK (and, but for the leader move, kafka-python pinned to Kafka
0.10.2's request versions, issue #37), against a topic of six partitions with
three replicas each:

* metadata: the client sees the three brokers, a leader on every node, all
  replicas and full ISRs, as ZooKeeper has them; records produced with
  ``acks=all`` (idempotent) are consumed back (every partition assigned)
  exactly once, in the order sent per partition, at the offsets the producer
  was told;
* consumer groups: three groups, each coordinated by another node (the leader
  of its ``__consumer_offsets`` partition), read every record and commit; the
  committed offsets read back are the high watermarks;
* a leader move: records are sent, the leader of a partition, the controller
  too, is stopped (a clean shutdown, like Kafka's) while they are on their way,
  and more are sent: the client follows the new leaders (every record is
  acknowledged and lands once, that partition grows at its new leader), its
  metadata shows the two live brokers; started again, the node rejoins every ISR within a deadline
  and each replica's log holds the same bytes up to the high watermark.

Each test runs its own cluster (in a trio loop; blocking clients in worker
threads) on its own chroot of the ZooKeeper server shared by a pytest worker.
kcat cannot create topics: confluent-kafka's AdminClient does it for kcat.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster_helpers import (
    PARTITIONS,
    REPLICATION,
    AsyncioThread,
    Client,
    ClusterControl,
    Committed,
    Consumed,
    Deliveries,
    InThread,
    MetadataView,
    PartitionView,
    check_consumed,
    check_metadata,
    group_per_offsets_partition,
    records,
    run_with_cluster,
)

KCAT = shutil.which("kcat") or "/usr/bin/kcat"
# The flow's deadline (trio); pytest's is above it and the cluster's start and stop.
TEST_DEADLINE_S = 120

pytestmark = pytest.mark.timeout(180)

COUNT = 300  # records in the round trip
BEFORE = 150  # in the leader-move test: records before, during and after the stop
DURING = 100
AFTER = 100
CONSUME_S = 30.0
# trafka's consumers: a close waits for the fetch the broker holds at the log's end
# (one request at a time on a connection, as Kafka answers), 500 ms by default.
QUICK_CLOSE = {"fetch_max_wait_ms": 50}


# -- clients ------------------------------------------------------------------------------------


class ConfluentClient:
    """confluent-kafka (librdkafka): AdminClient, an idempotent Producer, and
    Consumers (assigned, or subscribed in a group)."""

    name = "confluent-kafka"

    def __init__(self, servers: str, topic: str) -> None:
        self.servers = servers
        self.topic = topic
        self.producer: Any = None
        self.deliveries: dict[bytes, tuple[int, int]] = {}
        self.errors: list[Any] = []

    def _admin(self) -> Any:
        from confluent_kafka.admin import AdminClient

        return AdminClient({"bootstrap.servers": self.servers, "socket.timeout.ms": 10_000})

    def create_topic(self) -> None:
        from confluent_kafka.admin import NewTopic

        admin = self._admin()  # kept: the futures fail once the client is collected
        futures = admin.create_topics(
            [NewTopic(self.topic, PARTITIONS, REPLICATION)], operation_timeout=20
        )
        futures[self.topic].result(30)

    def describe(self) -> MetadataView:
        md = self._admin().list_topics(self.topic, timeout=10)
        topic = md.topics[self.topic]
        assert topic.error is None, topic.error
        return MetadataView(
            frozenset(md.brokers),
            {
                p.id: PartitionView(p.leader, tuple(p.replicas), tuple(p.isrs))
                for p in topic.partitions.values()
            },
        )

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None:
            self.errors.append(err)
        else:
            self.deliveries[msg.value()] = (msg.partition(), msg.offset())

    def send(self, batch: list[tuple[bytes, bytes]]) -> None:
        from confluent_kafka import Producer

        if self.producer is None:
            self.producer = Producer(
                {
                    "bootstrap.servers": self.servers,
                    "acks": "all",
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "message.timeout.ms": 30_000,
                    "socket.timeout.ms": 10_000,
                }
            )
        for key, value in batch:
            self.producer.produce(self.topic, value, key=key, on_delivery=self._on_delivery)
            self.producer.poll(0)

    def flush(self) -> Deliveries:
        assert self.producer.flush(45) == 0, "records still unacknowledged"
        assert not self.errors, self.errors
        return dict(self.deliveries)

    def _consumer(self, group: str) -> Any:
        from confluent_kafka import Consumer

        return Consumer(
            {
                "bootstrap.servers": self.servers,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "socket.timeout.ms": 10_000,
            }
        )

    @staticmethod
    def _poll(consumer: Any, count: int) -> list[Consumed]:
        got: list[Consumed] = []
        deadline = time.monotonic() + CONSUME_S
        while len(got) < count and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            assert msg.error() is None, msg.error()
            got.append(Consumed(msg.partition(), msg.offset(), msg.key(), msg.value()))
        return got

    def consume(self, count: int) -> list[Consumed]:
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        consumer = self._consumer(f"{self.topic}-reader")
        try:
            consumer.assign(
                [TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
            )
            return self._poll(consumer, count)
        finally:
            consumer.close()

    def consume_group(self, group: str, count: int) -> tuple[list[Consumed], Committed]:
        from confluent_kafka import TopicPartition

        consumer = self._consumer(group)
        try:
            consumer.subscribe([self.topic])
            got = self._poll(consumer, count)
            consumer.commit(asynchronous=False)
            committed = consumer.committed(
                [TopicPartition(self.topic, p) for p in range(PARTITIONS)], timeout=10
            )
        finally:
            consumer.close()
        return got, {tp.partition: tp.offset for tp in committed}

    def close(self) -> None:
        if self.producer is not None:
            self.producer.flush(5)


class KafkaPythonClient:
    """kafka-python 3.x: KafkaAdminClient, an idempotent KafkaProducer, and
    KafkaConsumers (assigned, or subscribed in a group)."""

    name = "kafka-python"

    def __init__(self, servers: str, topic: str) -> None:
        self.servers = servers.split(",")
        self.topic = topic
        self.producer: Any = None
        self.futures: list[tuple[bytes, Any]] = []

    def _admin(self) -> Any:
        from kafka import KafkaAdminClient

        return KafkaAdminClient(bootstrap_servers=self.servers, request_timeout_ms=20_000)

    def create_topic(self) -> None:
        from kafka.admin import NewTopic

        admin = self._admin()
        try:
            admin.create_topics([NewTopic(self.topic, PARTITIONS, REPLICATION)], timeout_ms=20_000)
        finally:
            admin.close()

    def describe(self) -> MetadataView:
        admin = self._admin()
        try:
            [topic] = admin.describe_topics([self.topic])
            cluster = admin.describe_cluster()
        finally:
            admin.close()
        assert topic["error_code"] == 0, topic
        return MetadataView(
            frozenset(b["broker_id"] for b in cluster["brokers"]),
            {
                p["partition_index"]: PartitionView(
                    p["leader_id"], tuple(p["replica_nodes"]), tuple(p["isr_nodes"])
                )
                for p in topic["partitions"]
            },
        )

    def send(self, batch: list[tuple[bytes, bytes]]) -> None:
        from kafka import KafkaProducer

        if self.producer is None:
            self.producer = KafkaProducer(
                bootstrap_servers=self.servers,
                acks="all",
                enable_idempotence=True,
                linger_ms=5,
                request_timeout_ms=10_000,
                delivery_timeout_ms=30_000,
            )
        for key, value in batch:
            self.futures.append((value, self.producer.send(self.topic, value=value, key=key)))

    def flush(self) -> Deliveries:
        self.producer.flush(timeout=45)
        out = {}
        for value, future in self.futures:
            meta = future.get(timeout=1)
            out[value] = (meta.partition, meta.offset)
        return out

    def _consumer(self, *topics: str, group: str | None = None) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(
            *topics,
            bootstrap_servers=self.servers,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=10_000,
        )

    @staticmethod
    def _poll(consumer: Any, count: int) -> list[Consumed]:
        got: list[Consumed] = []
        deadline = time.monotonic() + CONSUME_S
        while len(got) < count and time.monotonic() < deadline:
            for batch in consumer.poll(timeout_ms=500).values():
                got += [Consumed(r.partition, r.offset, r.key, r.value) for r in batch]
        return got

    def consume(self, count: int) -> list[Consumed]:
        from kafka import TopicPartition

        consumer = self._consumer()
        try:
            consumer.assign([TopicPartition(self.topic, p) for p in range(PARTITIONS)])
            consumer.seek_to_beginning()
            return self._poll(consumer, count)
        finally:
            consumer.close()

    def consume_group(self, group: str, count: int) -> tuple[list[Consumed], Committed]:
        from kafka import TopicPartition

        consumer = self._consumer(self.topic, group=group)
        try:
            got = self._poll(consumer, count)
            consumer.commit()
            committed = {
                p: consumer.committed(TopicPartition(self.topic, p)) for p in range(PARTITIONS)
            }
        finally:
            consumer.close()
        return got, committed

    def close(self) -> None:
        if self.producer is not None:
            self.producer.close(timeout=5)


class OldKafkaPythonClient(KafkaPythonClient):
    """kafka-python's producer and consumers pinned to Kafka 0.10.2's versions
    (issue #37: Produce v2 with magic 1 message sets, Fetch v3, JoinGroup v1,
    ListOffsets v1), without idempotence, which 0.10.2 lacks; the admin client
    stays modern (the checks read the cluster through it)."""

    name = "kafka-python-0.10.2"

    def send(self, batch: list[tuple[bytes, bytes]]) -> None:
        from kafka import KafkaProducer

        if self.producer is None:
            self.producer = KafkaProducer(
                bootstrap_servers=self.servers,
                acks="all",
                enable_idempotence=False,
                linger_ms=5,
                request_timeout_ms=10_000,
                api_version=(0, 10, 2),
            )
        for key, value in batch:
            self.futures.append((value, self.producer.send(self.topic, value=value, key=key)))

    def _consumer(self, *topics: str, group: str | None = None) -> Any:
        from kafka import KafkaConsumer

        return KafkaConsumer(
            *topics,
            bootstrap_servers=self.servers,
            group_id=group,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            request_timeout_ms=10_000,
            api_version=(0, 10, 2),
        )


class AiokafkaClient:
    """aiokafka, on an asyncio loop of its own: AIOKafkaAdminClient, an idempotent
    AIOKafkaProducer, and AIOKafkaConsumers (assigned, or subscribed in a group)."""

    name = "aiokafka"

    def __init__(self, servers: str, topic: str) -> None:
        self.servers = servers
        self.topic = topic
        self.loop = AsyncioThread()
        self.producer: Any = None
        self.futures: list[tuple[bytes, Any]] = []

    async def _with_admin(self, use: Callable[[Any], Awaitable[Any]]) -> Any:
        from aiokafka.admin import AIOKafkaAdminClient

        admin = AIOKafkaAdminClient(bootstrap_servers=self.servers, request_timeout_ms=20_000)
        await admin.start()
        try:
            return await use(admin)
        finally:
            await admin.close()

    def create_topic(self) -> None:
        from aiokafka.admin import NewTopic

        async def create(admin: Any) -> None:
            await admin.create_topics(
                [NewTopic(self.topic, PARTITIONS, REPLICATION)], timeout_ms=20_000
            )

        self.loop.run(self._with_admin(create))

    def describe(self) -> MetadataView:
        async def describe(admin: Any) -> tuple[Any, Any]:
            return await admin.describe_topics([self.topic]), await admin.describe_cluster()

        [topic], cluster = self.loop.run(self._with_admin(describe))
        assert topic["error_code"] == 0, topic
        return MetadataView(
            frozenset(b["node_id"] for b in cluster["brokers"]),
            {
                p["partition"]: PartitionView(p["leader"], tuple(p["replicas"]), tuple(p["isr"]))
                for p in topic["partitions"]
            },
        )

    def send(self, batch: list[tuple[bytes, bytes]]) -> None:
        from aiokafka import AIOKafkaProducer

        async def send() -> None:
            if self.producer is None:
                self.producer = AIOKafkaProducer(
                    bootstrap_servers=self.servers,
                    acks="all",
                    enable_idempotence=True,
                    linger_ms=5,
                    request_timeout_ms=10_000,
                )
                await self.producer.start()
            for key, value in batch:
                self.futures.append((value, await self.producer.send(self.topic, value, key=key)))

        self.loop.run(send())

    def flush(self) -> Deliveries:
        async def flush() -> Deliveries:
            await self.producer.flush()
            out = {}
            for value, future in self.futures:
                meta = await future
                out[value] = (meta.partition, meta.offset)
            return out

        return self.loop.run(asyncio.wait_for(flush(), 45))

    @staticmethod
    async def _poll(consumer: Any, count: int) -> list[Consumed]:
        got: list[Consumed] = []
        deadline = time.monotonic() + CONSUME_S
        while len(got) < count and time.monotonic() < deadline:
            for batch in (await consumer.getmany(timeout_ms=500)).values():
                got += [Consumed(r.partition, r.offset, r.key, r.value) for r in batch]
        return got

    def consume(self, count: int) -> list[Consumed]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition

        async def consume() -> list[Consumed]:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self.servers,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                request_timeout_ms=10_000,
            )
            await consumer.start()
            try:
                consumer.assign([TopicPartition(self.topic, p) for p in range(PARTITIONS)])
                await consumer.seek_to_beginning()
                return await self._poll(consumer, count)
            finally:
                await consumer.stop()

        return self.loop.run(consume())

    def consume_group(self, group: str, count: int) -> tuple[list[Consumed], Committed]:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition

        async def consume() -> tuple[list[Consumed], Committed]:
            consumer = AIOKafkaConsumer(
                self.topic,
                bootstrap_servers=self.servers,
                group_id=group,
                enable_auto_commit=False,
                auto_offset_reset="earliest",
                request_timeout_ms=10_000,
            )
            await consumer.start()
            try:
                got = await self._poll(consumer, count)
                await consumer.commit()
                committed = {
                    p: await consumer.committed(TopicPartition(self.topic, p))
                    for p in range(PARTITIONS)
                }
            finally:
                await consumer.stop()
            return got, committed

        return self.loop.run(consume())

    def close(self) -> None:
        try:
            if self.producer is not None:
                self.loop.run(self.producer.stop(), timeout=10)
        finally:
            self.loop.close()


class KcatClient:
    """kcat (a separate librdkafka build): ``-L -J`` for metadata, one idempotent
    ``-P`` process fed records on stdin across the leader move, ``-C``/``-G`` with
    ``-e -J`` to read (kcat cannot read committed offsets back)."""

    name = "kcat"

    def __init__(self, servers: str, topic: str) -> None:
        self.servers = servers
        self.topic = topic
        self.proc: subprocess.Popen[bytes] | None = None
        self.stderr: Any = None

    def create_topic(self) -> None:
        ConfluentClient(self.servers, self.topic).create_topic()

    def _kcat(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        done = subprocess.run(
            [KCAT, "-b", self.servers, *args], capture_output=True, timeout=60, check=False
        )
        assert done.returncode == 0, done.stderr.decode(errors="replace")
        return done

    def describe(self) -> MetadataView:
        md = json.loads(self._kcat("-L", "-J", "-t", self.topic).stdout)
        [topic] = md["topics"]
        assert topic["topic"] == self.topic and "error" not in topic, topic
        return MetadataView(
            frozenset(b["id"] for b in md["brokers"]),
            {
                p["partition"]: PartitionView(
                    p["leader"],
                    tuple(r["id"] for r in p["replicas"]),
                    tuple(r["id"] for r in p["isrs"]),
                )
                for p in topic["partitions"]
            },
        )

    def send(self, batch: list[tuple[bytes, bytes]]) -> None:
        if self.proc is None:
            # A file, not a pipe: librdkafka logs every refused connection to a stopped
            # node, and a full pipe would block kcat. Closed in flush() or close().
            self.stderr = tempfile.TemporaryFile()  # noqa: SIM115
            self.proc = subprocess.Popen(
                [
                    KCAT, "-b", self.servers, "-P", "-t", self.topic, "-K", "\t",
                    "-X", "enable.idempotence=true", "-X", "acks=all", "-X", "linger.ms=5",
                    "-X", "message.timeout.ms=30000",
                ],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=self.stderr,
            )  # fmt: skip
        assert self.proc.stdin is not None
        self.proc.stdin.write(b"".join(k + b"\t" + v + b"\n" for k, v in batch))
        self.proc.stdin.flush()

    def flush(self) -> Deliveries:
        proc, self.proc = self.proc, None
        assert proc is not None and proc.stdin is not None
        proc.stdin.close()
        code = proc.wait(60)
        self.stderr.seek(0)
        errors = self.stderr.read().decode(errors="replace")
        self.stderr.close()
        # kcat reports refused connections to a stopped node as errors too: only a
        # record that failed counts.
        assert code == 0, errors
        assert "Delivery failed" not in errors and "Failed to produce" not in errors, errors
        return None

    @staticmethod
    def _parse(out: bytes) -> list[Consumed]:
        got = []
        for line in out.splitlines():
            msg = json.loads(line)
            got.append(
                Consumed(
                    msg["partition"], msg["offset"], msg["key"].encode(), msg["payload"].encode()
                )
            )
        return got

    def consume(self, count: int) -> list[Consumed]:
        return self._parse(
            self._kcat("-C", "-t", self.topic, "-o", "beginning", "-e", "-J", "-q").stdout
        )

    def consume_group(self, group: str, count: int) -> tuple[list[Consumed], Committed]:
        # -G: the high-level (group) consumer; it commits what it read as it leaves.
        out = self._kcat(
            "-G", group, "-X", "auto.offset.reset=earliest", "-e", "-J", "-q", self.topic
        ).stdout
        return self._parse(out), None

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.stderr.close()


class SdkClient:
    """trafka's own SDK, in the cluster's trio loop: ``open_admin``, an idempotent
    ``open_producer`` kept open across the leader move, and ``open_consumer``
    (assigned, or subscribed in a group)."""

    name = "trafka-sdk"

    def __init__(self, servers: str, topic: str) -> None:
        self.servers = servers
        self.topic = topic
        self._producer_cm: Any = None
        self.producer: Any = None
        self.futures: list[tuple[bytes, Any]] = []

    async def create_topic(self) -> None:
        from trafka.sdk import NewTopic, open_admin

        async with open_admin(bootstrap_servers=self.servers, request_timeout_ms=10_000) as admin:
            await admin.create_topics(
                [NewTopic(self.topic, PARTITIONS, REPLICATION)], timeout_ms=20_000
            )

    async def describe(self) -> MetadataView:
        from trafka.sdk import open_admin

        async with open_admin(bootstrap_servers=self.servers, request_timeout_ms=10_000) as admin:
            cluster = await admin.describe_cluster(timeout_ms=10_000)
            topic = (await admin.describe_topics([self.topic], timeout_ms=10_000))[self.topic]
        return MetadataView(
            frozenset(b.node_id for b in cluster.brokers),
            {p.partition: PartitionView(p.leader, p.replicas, p.isr) for p in topic.partitions},
        )

    async def send(self, batch: list[tuple[bytes, bytes]]) -> None:
        from trafka.sdk import open_producer

        if self.producer is None:
            self._producer_cm = open_producer(
                bootstrap_servers=self.servers,
                acks="all",
                enable_idempotence=True,
                linger_ms=5,
                request_timeout_ms=10_000,
                delivery_timeout_ms=30_000,
            )
            self.producer = await self._producer_cm.__aenter__()
        for key, value in batch:
            self.futures.append((value, await self.producer.send(self.topic, value, key=key)))

    async def flush(self) -> Deliveries:
        await self.producer.flush()
        out = {}
        for value, future in self.futures:
            meta = await future
            out[value] = (meta.partition, meta.offset)
        return out

    @staticmethod
    async def _poll(consumer: Any, count: int) -> list[Consumed]:
        got: list[Consumed] = []
        with trio.move_on_after(CONSUME_S):
            while len(got) < count:
                for batch in (await consumer.getmany(timeout_ms=500)).values():
                    got += [Consumed(r.partition, r.offset, r.key, r.value) for r in batch]
        return got

    async def consume(self, count: int) -> list[Consumed]:
        from trafka.sdk import TopicPartition, open_consumer

        async with open_consumer(
            bootstrap_servers=self.servers,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            request_timeout_ms=10_000,
            **QUICK_CLOSE,
        ) as consumer:
            consumer.assign([TopicPartition(self.topic, p) for p in range(PARTITIONS)])
            consumer.seek_to_beginning()
            return await self._poll(consumer, count)

    async def consume_group(self, group: str, count: int) -> tuple[list[Consumed], Committed]:
        from trafka.sdk import TopicPartition, open_consumer

        async with open_consumer(
            self.topic,
            bootstrap_servers=self.servers,
            group_id=group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            request_timeout_ms=10_000,
            default_api_timeout_ms=10_000,
            **QUICK_CLOSE,
        ) as consumer:
            got = await self._poll(consumer, count)
            await consumer.commit()
            committed = {
                p: await consumer.committed(TopicPartition(self.topic, p))
                for p in range(PARTITIONS)
            }
        return got, committed

    async def aclose(self) -> None:
        # Left in the cancel scopes it was entered in (no shield or timeout around it:
        # trio requires a nursery to be exited where it was opened).
        if self._producer_cm is not None:
            await self._producer_cm.__aexit__(None, None, None)


def make_client(name: str, servers: str, topic: str) -> Client:
    if name == "trafka-sdk":
        return SdkClient(servers, topic)
    blocking = {
        "confluent-kafka": ConfluentClient,
        "kafka-python": KafkaPythonClient,
        "kafka-python-0.10.2": OldKafkaPythonClient,
        "aiokafka": AiokafkaClient,
        "kcat": KcatClient,
    }[name]
    return InThread(blocking(servers, topic))


CLIENTS = [
    "confluent-kafka",
    "kafka-python",
    "aiokafka",
    pytest.param(
        "kcat", marks=pytest.mark.skipif(shutil.which("kcat") is None, reason="kcat not installed")
    ),
    "trafka-sdk",
]


def run(
    zk_chroot: Any,
    tmp_path: Path,
    topic: str,
    client_name: str,
    flow: Callable[[ClusterControl, Client], Awaitable[None]],
) -> None:
    async def with_client(control: ClusterControl) -> None:
        client = make_client(client_name, control.bootstrap_servers, topic)
        try:
            await flow(control, client)
        finally:
            await client.aclose()

    run_with_cluster(
        zk_chroot.connect_string, tmp_path / "cluster", topic, with_client, timeout=TEST_DEADLINE_S
    )


# -- flows --------------------------------------------------------------------------------------


async def metadata_and_round_trip(control: ClusterControl, client: Client) -> None:
    await client.create_topic()
    states = await control.wait_topic_ready()
    check_metadata(await client.describe(), states, control.all_nodes, balanced=True)

    sent = records(0, COUNT)
    await client.send(sent)
    deliveries = await client.flush()
    assert sum(control.high_watermarks().values()) == COUNT
    check_consumed(sent, await client.consume(COUNT), deliveries)


async def follow_leader_move(control: ClusterControl, client: Client) -> None:
    await client.create_topic()
    await control.wait_topic_ready()
    before, during, after = (
        records(0, BEFORE),
        records(BEFORE, DURING),
        records(BEFORE + DURING, AFTER),
    )
    sent = before + during + after
    await client.send(before)
    deliveries = await client.flush()
    ends = control.high_watermarks()
    # The controller's partition: its leader and the controller move at once.
    moved = control.controller_partition()

    # Records on their way while the leader stops, and more after: the client must
    # find the new leaders (and, idempotent, must not write any record twice).
    await client.send(during)
    stopped = await control.stop_leader_of(moved)
    await client.send(after)
    later = await client.flush()
    live = control.all_nodes - {stopped}
    check_metadata(await client.describe(), control.states(), live)
    hws = control.high_watermarks()
    assert control.states()[moved].leader != stopped
    assert hws[moved] > ends[moved], "nothing landed on the moved partition's new leader"
    assert sum(hws.values()) == len(sent)
    if deliveries is not None and later is not None:
        assert any(later[v][0] == moved and later[v][1] >= ends[moved] for _, v in after), (
            "no record sent after the stop was acknowledged on the moved partition"
        )
        deliveries = {**deliveries, **later}

    await control.start_and_wait_in_sync(stopped)
    control.check_replicas_identical()
    check_metadata(await client.describe(), control.states(), control.all_nodes)
    assert sum(control.high_watermarks().values()) == len(sent)
    check_consumed(sent, await client.consume(len(sent)), deliveries)


async def groups_on_every_coordinator(control: ClusterControl, client: Client) -> None:
    await client.create_topic()
    await control.wait_topic_ready()
    sent = records(0, COUNT)
    await client.send(sent)
    deliveries = await client.flush()
    hws = control.high_watermarks()
    coordinators = {}
    for group in group_per_offsets_partition(control.topic):
        consumed, committed = await client.consume_group(group, COUNT)
        check_consumed(sent, consumed, deliveries)
        if committed is not None:
            assert committed == hws, (group, committed, hws)
        coordinators[group] = control.coordinator(group)
    # The premise: every node coordinated one of the groups.
    assert set(coordinators.values()) == control.all_nodes, coordinators


# -- tests --------------------------------------------------------------------------------------


# The leader-move test needs retries that only an idempotent producer makes
# exactly-once; the old-protocol client takes part in the other two.
OLD_CLIENTS = ["kafka-python-0.10.2"]


@pytest.mark.parametrize("client", CLIENTS + OLD_CLIENTS)
def test_metadata_and_round_trip(zk_chroot: Any, tmp_path: Path, topic_name: str, client: str):
    run(zk_chroot, tmp_path, topic_name, client, metadata_and_round_trip)


@pytest.mark.parametrize("client", CLIENTS)
def test_follow_leader_move(zk_chroot: Any, tmp_path: Path, topic_name: str, client: str):
    run(zk_chroot, tmp_path, topic_name, client, follow_leader_move)


@pytest.mark.parametrize("client", CLIENTS + OLD_CLIENTS)
def test_consumer_groups_on_every_coordinator(
    zk_chroot: Any, tmp_path: Path, topic_name: str, client: str
) -> None:
    run(zk_chroot, tmp_path, topic_name, client, groups_on_every_coordinator)
