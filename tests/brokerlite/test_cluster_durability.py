"""Durability of a brokerlite cluster under repeated ``kill -9``: nothing acknowledged is lost.

Three broker processes (:class:`ClusterProcesses`, coordinated by a private ZooKeeper)
serve a topic with six partitions, replication factor 3 and ``min.insync.replicas=2``.
One idempotent confluent-kafka producer (``acks=all``) writes keyed records all along,
noting every acknowledged ``(partition, offset, value)``, and one consumer reads
all along, noting what it read. Meanwhile, cycle after cycle, a broker is killed
with SIGKILL (in turn a partition leader, a broker leading nothing, the controller,
as the metadata and ZooKeeper say), and restarted once ZooKeeper has dropped its
registration (a broker cannot register again while its old session lives: Kafka's
rule too).

Then, with production stopped and every ISR whole again:

* every acknowledged record is in the log at its offset, exactly once, and each
  partition holds its records in the order they were produced;
* everything the concurrent consumer read is in the log at the offset it read it
  at (consumers never see a record that later disappears);
* after a clean stop, the three replicas of each partition hold byte-identical
  record batches below the high watermark (partition leader epoch included), read
  straight from the segment files.

The kills are driven from the test; every wait has a deadline, and nothing asserts
how fast anything happened.
"""

from __future__ import annotations

import collections
import json
import random
import struct
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_helpers import wait_for
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic
from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.brokerlite.dev.zookeeper_server import zookeeper_available

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not zookeeper_available(),
        reason="ZooKeeper not found (apt-get install zookeeper, or set TRAFKA_ZOOKEEPER_CLASSPATH)",
    ),
]

TOPIC = "durability"
PARTITIONS = 6
NODES = (1, 2, 3)
# One cycle of each kind of victim choose_victim takes in turn (a partition's
# leader, a broker leading none, the controller): each kind is a different
# failover, and a second round of the same three proves no other; each cycle is
# some 7 s of the suite's longest test (10 cycles once, then 6).
CYCLES = 3
# A killed broker is noticed when its ZooKeeper session expires, which each cycle
# waits out: 4 s rather than ClusterProcesses' 6 s (the expiry is what is tested,
# not its length; below 4 s a loaded machine's live brokers risk losing theirs).
SESSION_SETTINGS = {"zookeeper.session.timeout.ms": 4000}
KEYS = [b"key-%02d" % i for i in range(24)]
SEED = 20240607


# -- the record batches in a partition directory --------------------------------------------


def read_batches(partition_dir: Path) -> list[tuple[int, int, bytes]]:
    """Every record batch of a partition's segments, in offset order.

    Kafka's v2 framing: base offset (int64), length (int32), then ``length`` bytes
    whose 4th byte on is the magic byte, CRC, attributes and last offset delta
    (at byte 23 of the whole batch). A torn tail (a batch cut short) ends a segment.

    Returns:
        ``(base_offset, last_offset, whole batch bytes)`` for each batch.
    """
    batches: list[tuple[int, int, bytes]] = []
    for segment in sorted(partition_dir.glob("*.log"), key=lambda p: int(p.stem)):
        data = segment.read_bytes()
        pos = 0
        while pos + 12 <= len(data):
            base, length = struct.unpack_from(">qi", data, pos)
            end = pos + 12 + length
            if length < 49 or end > len(data):
                break
            (delta,) = struct.unpack_from(">i", data, pos + 23)
            batches.append((base, base + delta, data[pos:end]))
            pos = end
    return batches


def batches_below(batches: list[tuple[int, int, bytes]], hw: int) -> list[tuple[int, bytes]]:
    return [(base, raw) for base, _last, raw in batches if base < hw]


def describe_difference(a: list[tuple[int, bytes]], b: list[tuple[int, bytes]]) -> str:
    for (base_a, raw_a), (base_b, raw_b) in zip(a, b, strict=False):
        if base_a != base_b or raw_a != raw_b:
            fields = []
            if base_a != base_b:
                fields.append(f"base offset {base_a} != {base_b}")
            if raw_a[12:16] != raw_b[12:16]:
                epochs = struct.unpack(">i", raw_a[12:16]), struct.unpack(">i", raw_b[12:16])
                fields.append(f"partition leader epoch {epochs[0][0]} != {epochs[1][0]}")
            if raw_a[16:] != raw_b[16:]:
                fields.append("batch contents differ")
            return f"first differing batch at offset {base_a}: " + ", ".join(fields)
    return f"{len(a)} batches vs {len(b)} (one is a prefix of the other)"


# -- clients running alongside the kills -----------------------------------------------------


class Production:
    """An idempotent producer thread writing ``<counter>:<key>`` values under rotating keys."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "delivery.timeout.ms": 120_000,
                "linger.ms": 5,
                "error_cb": self._on_error,
            }
        )
        self.lock = threading.Lock()
        self.acked: list[tuple[int, int, bytes]] = []
        self.failed: list[tuple[bytes, str]] = []
        self.errors: list[str] = []
        self.produced = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="durability-producer", daemon=True)

    def _on_error(self, err: KafkaError) -> None:
        if err.fatal():
            with self.lock:
                self.errors.append(f"fatal: {err}")

    def _on_delivery(self, err: KafkaError | None, msg: Any) -> None:
        with self.lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.failed.append((msg.value(), str(err)))

    def _run(self) -> None:
        counter = 0
        while not self.stop.is_set():
            key = KEYS[counter % len(KEYS)]
            value = b"%08d:%s" % (counter, key)
            try:
                self.producer.produce(TOPIC, value, key=key, on_delivery=self._on_delivery)
            except BufferError:
                self.producer.poll(0.1)
                continue
            except KafkaException as exc:  # a fatal idempotence error: stop producing
                with self.lock:
                    self.errors.append(f"produce raised: {exc}")
                return
            counter += 1
            self.produced = counter
            self.producer.poll(0)
            time.sleep(0.002)

    def start(self) -> None:
        self.thread.start()

    def finish(self, timeout: float) -> int:
        """Stop producing and wait for every delivery report; the number still pending."""
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the producer thread did not stop"
        return int(self.producer.flush(timeout))


class Reader:
    """A consumer thread reading every partition from the start while brokers die."""

    def __init__(self, bootstrap: str) -> None:
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": "durability-reader",  # assign() only: never joins or commits
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "enable.partition.eof": False,
            }
        )
        self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        self.seen: dict[tuple[int, int], bytes] = {}
        self.conflicts: list[str] = []
        self.errors: collections.Counter[str] = collections.Counter()
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="durability-reader", daemon=True)

    def _run(self) -> None:
        try:
            while not self.stop.is_set():
                for msg in self.consumer.consume(500, 0.2):
                    if msg.error() is not None:
                        self.errors[str(msg.error())] += 1
                        continue
                    where = (msg.partition(), msg.offset())
                    value = msg.value()
                    before = self.seen.setdefault(where, value)
                    if before != value:
                        self.conflicts.append(f"{where}: read {before!r}, later {value!r}")
        finally:
            self.consumer.close()

    def start(self) -> None:
        self.thread.start()

    def finish(self, timeout: float) -> None:
        self.stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the reader thread did not stop"


# -- the cluster's state, as clients see it --------------------------------------------------


def partition_metadata(admin: AdminClient) -> dict[int, tuple[int, tuple[int, ...]]] | None:
    """``{partition: (leader, isr)}`` of the topic; None while unavailable or incomplete."""
    try:
        md = admin.list_topics(TOPIC, timeout=5)
    except KafkaException:
        return None
    topic = md.topics.get(TOPIC)
    if topic is None or topic.error is not None or len(topic.partitions) != PARTITIONS:
        return None
    return {p: (pm.leader, tuple(sorted(pm.isrs))) for p, pm in topic.partitions.items()}


def controller_id(zk: KazooClient) -> int | None:
    try:
        data, _stat = zk.get("/controller")
    except NoNodeError:
        return None
    return int(json.loads(data)["brokerid"])


def choose_victim(rng: random.Random, admin: AdminClient, zk: KazooClient, cycle: int) -> int:
    """A broker to kill, in turn: the leader of a random partition, a broker leading
    none (or fewest: usually the one restarted last, maybe still catching up), the
    controller."""
    state = wait_for("the topic's metadata", lambda: partition_metadata(admin), 60)
    led = {p: leader for p, (leader, _isr) in state.items() if leader in NODES}
    if cycle % 3 == 2:
        controller = wait_for("a controller", lambda: controller_id(zk), 60)
        if controller in NODES:
            return controller
    if cycle % 3 == 0 and led:
        return led[rng.choice(sorted(led))]
    counts = collections.Counter(led.values())
    fewest = min(counts.get(n, 0) for n in NODES)
    return rng.choice([n for n in NODES if counts.get(n, 0) == fewest])


@pytest.fixture
def cluster(tmp_path: Path, zk_chroot: Any) -> Iterator[ClusterProcesses]:
    # ZooKeeper is the worker's shared server (a chroot of its own): the brokers'
    # sessions are what the kills are about, not ZooKeeper's process.
    processes = ClusterProcesses(
        tmp_path / "cluster",
        nodes=len(NODES),
        settings=SESSION_SETTINGS,
        zookeeper_connect=zk_chroot.connect_string,
    )
    try:
        processes.start()
        yield processes
    finally:
        processes.stop()


@pytest.fixture
def zk(cluster: ClusterProcesses) -> Iterator[KazooClient]:
    client = KazooClient(hosts=cluster.zookeeper_connect, timeout=10.0)
    client.start(timeout=30.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def wait_cluster_formed(cluster: ClusterProcesses) -> None:
    """Wait until every broker's metadata names all the brokers and a controller.

    The brokers serve as soon as they registered, before their first reading of the
    cluster: an early Metadata answer can lack brokers or the controller (and
    librdkafka's AdminClient then waits for a controller until its request times out).
    """

    def formed(admin: AdminClient) -> bool | None:
        try:
            md = admin.list_topics(timeout=5)
        except KafkaException:
            return None
        return True if set(md.brokers) == set(NODES) and md.controller_id in NODES else None

    for node, port in sorted(cluster.ports.items()):
        admin = AdminClient({"bootstrap.servers": f"{cluster.host}:{port}"})
        wait_for(f"node {node} to see the whole cluster", lambda a=admin: formed(a), 60)


def registered(cluster: ClusterProcesses, zk: KazooClient, node: int) -> bool | None:
    """True once ``node`` is registered in ZooKeeper; fails when its process exited."""
    if cluster.procs[node].poll() is not None:
        raise AssertionError(f"node {node} exited:\n{cluster.log_tail(node)}")
    return True if zk.exists(f"/brokers/ids/{node}") is not None else None


def broker_logs(cluster: ClusterProcesses) -> str:
    return "\n".join(f"--- node {n} ---\n{cluster.log_tail(n, 40)}" for n in NODES)


def test_no_acknowledged_record_lost_across_kill_9_cycles(
    cluster: ClusterProcesses, zk: KazooClient
) -> None:
    rng = random.Random(SEED)
    wait_cluster_formed(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    futures = admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})],
        operation_timeout=30,
        request_timeout=40,
    )
    futures[TOPIC].result(60)
    wait_for(
        "every partition to have a leader and a whole ISR",
        lambda: (
            True
            if (s := partition_metadata(admin)) is not None
            and all(leader in NODES and isr == NODES for leader, isr in s.values())
            else None
        ),
        60,
    )

    production = Production(cluster.bootstrap_servers)
    reader = Reader(cluster.bootstrap_servers)
    production.start()
    reader.start()
    killed: list[str] = []
    try:
        wait_for("the first acknowledgements", lambda: production.acked or None, 60)
        for cycle in range(CYCLES):
            victim = choose_victim(rng, admin, zk, cycle)
            state = partition_metadata(admin) or {}
            killed.append(
                f"cycle {cycle}: killed node {victim}; controller {controller_id(zk)}, "
                f"partitions (leader, ISR) {state}"
            )
            cluster.kill(victim)
            time.sleep(rng.uniform(1.0, 3.0))
            # Its ZooKeeper session must expire (the controller then moves leadership
            # away) before it can register again.
            wait_for(
                f"node {victim}'s registration to expire",
                lambda v=victim: True if zk.exists(f"/brokers/ids/{v}") is None else None,
                60,
            )
            cluster.start_node(victim, timeout=60)
            # start_node returns once the port accepts connections, which the broker
            # opens before it joins ZooKeeper: wait until it is registered too.
            wait_for(
                f"node {victim} to register again",
                lambda v=victim: registered(cluster, zk, v),
                60,
            )
            time.sleep(rng.uniform(0.5, 2.0))
        acked_during_cycles = len(production.acked)
    finally:
        pending = production.finish(timeout=150)
        reader.finish(timeout=30)

    logs = broker_logs(cluster)
    assert production.errors == [], f"producer errors: {production.errors}\n{logs}"
    assert pending == 0, f"{pending} records never got a delivery report\n{logs}"
    assert production.failed == [], (
        f"{len(production.failed)} deliveries failed, first: {production.failed[:5]}\n{logs}"
    )
    assert len(production.acked) == production.produced
    assert acked_during_cycles > 0

    # Every ISR whole again: the restarted brokers caught up.
    final_state = wait_for(
        "every partition's ISR to hold all 3 replicas",
        lambda: (
            s
            if (s := partition_metadata(admin)) is not None
            and all(leader in NODES and isr == NODES for leader, isr in s.values())
            else None
        ),
        90,
    )

    # Read everything back, up to each partition's high watermark.
    final = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap_servers,
            "group.id": "durability-final",
            "enable.auto.commit": False,
            "enable.partition.eof": False,
        }
    )
    try:
        high = {
            p: final.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=30, cached=False)[1]
            for p in range(PARTITIONS)
        }
        final.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        log: dict[int, dict[int, bytes]] = {p: {} for p in range(PARTITIONS)}
        deadline = time.monotonic() + 90
        while any(len(log[p]) < high[p] for p in log):
            assert time.monotonic() < deadline, (
                f"final read incomplete: {[(p, len(log[p]), high[p]) for p in log]}"
            )
            for msg in final.consume(1000, 0.5):
                assert msg.error() is None, msg.error()
                previous = log[msg.partition()].setdefault(msg.offset(), msg.value())
                assert previous == msg.value()
    finally:
        final.close()

    # The log: offsets 0..HW-1, one record each (no control records: no transactions).
    for p in range(PARTITIONS):
        assert sorted(log[p]) == list(range(high[p])), f"partition {p}: offsets have gaps"
    located = collections.Counter(v for p in log for v in log[p].values())
    duplicates = [v for v, n in located.items() if n > 1]
    assert duplicates == [], f"{len(duplicates)} values written twice, e.g. {duplicates[:5]}"

    # Every acknowledged record is where its acknowledgement said.
    lost = [(p, o, v) for p, o, v in production.acked if log[p].get(o) != v]
    assert lost == [], (
        f"{len(lost)} of {len(production.acked)} acknowledged records are not at their "
        f"offsets, e.g. {[(p, o, v, log[p].get(o)) for p, o, v in lost[:5]]}\n"
        + "\n".join(killed)
        + f"\n{logs}"
    )
    assert sum(high.values()) == len(production.acked), "records nobody acknowledged"

    # Production order kept per partition (so per key too).
    for p in range(PARTITIONS):
        counters = [int(log[p][o].split(b":")[0]) for o in range(high[p])]
        assert counters == sorted(counters), f"partition {p}: records out of production order"

    # The concurrent reader never read anything that later disappeared.
    assert reader.conflicts == []
    assert reader.seen, "the concurrent reader read nothing"
    vanished = [(p, o, v) for (p, o), v in reader.seen.items() if log[p].get(o) != v]
    assert vanished == [], (
        f"{len(vanished)} records read during the cycles are not in the final log, e.g. "
        f"{[(p, o, v, log[p].get(o)) for p, o, v in vanished[:5]]}\n" + "\n".join(killed)
    )

    print(
        f"{len(production.acked)} records acknowledged, {len(reader.seen)} read during the "
        f"cycles (reader errors: {dict(reader.errors)}), high watermarks {high}\n"
        + "\n".join(killed)
    )

    # A clean stop, then the replicas' segment files: byte-identical below the HW.
    assert all(leader in NODES for leader, _ in final_state.values())
    zk.stop()
    cluster.stop()
    for p in range(PARTITIONS):
        replicas = {}
        for node in NODES:
            batches = read_batches(cluster.root / f"node-{node}" / f"{TOPIC}-{p}")
            below = batches_below(batches, high[p])
            # Whole batches from offset 0 to exactly the high watermark, contiguous.
            expected_base = 0
            for base, last, _raw in batches:
                if base >= high[p]:
                    break
                assert base == expected_base, f"node {node} partition {p}: gap at {base}"
                expected_base = last + 1
            assert expected_base == high[p], (
                f"node {node} partition {p}: batches end at {expected_base}, HW {high[p]}"
            )
            epochs = [struct.unpack_from(">i", raw, 12)[0] for _base, raw in below]
            assert epochs == sorted(epochs), f"node {node} partition {p}: leader epochs go back"
            replicas[node] = below
        reference = replicas[NODES[0]]
        for node in NODES[1:]:
            assert replicas[node] == reference, (
                f"partition {p}: node {node} differs from node {NODES[0]}: "
                + describe_difference(reference, replicas[node])
            )


def test_committed_offsets_survive_kill_9_of_the_coordinator(
    tmp_path: Path, zk_chroot: Any
) -> None:
    """A group's commits are on every in-sync replica of its ``__consumer_offsets``
    partition before they are acknowledged, so a ``kill -9`` of the coordinator
    loses none: the partition's new leader coordinates the group from them."""
    # The group's first member joins at once (no initial rebalance delay: the
    # commits are what is tested, not how long a first join waits for others).
    cluster = ClusterProcesses(
        tmp_path,
        3,
        settings={
            "offsets.topic.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0,
            **SESSION_SETTINGS,
        },
        zookeeper_connect=zk_chroot.connect_string,
    )
    cluster.start()
    try:
        bs = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("ledger", 3, 3)])["ledger"].result(30)
        producer = Producer({"bootstrap.servers": bs, "acks": "all"})
        for i in range(90):
            producer.produce("ledger", key=b"%d" % i, value=b"v%d" % i)
        assert producer.flush(30) == 0

        def consume(n: int, group: str = "g-ledger") -> list[bytes]:
            consumer = Consumer(
                {
                    "bootstrap.servers": bs,
                    "group.id": group,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                }
            )
            consumer.subscribe(["ledger"])
            seen: list[bytes] = []
            deadline = time.monotonic() + 60
            while len(seen) < n and time.monotonic() < deadline:
                message = consumer.poll(0.5)
                if message is None or message.error():
                    continue
                seen.append(message.value())
                consumer.commit(message=message, asynchronous=False)
            consumer.close()
            return seen

        first = consume(45)
        assert len(first) == 45
        described = admin.describe_consumer_groups(["g-ledger"])["g-ledger"].result(30)
        coordinator = described.coordinator.id
        committed = admin.list_consumer_group_offsets([confluent_group_request("g-ledger")])[
            "g-ledger"
        ].result(30)
        before = {(tp.topic, tp.partition): tp.offset for tp in committed.topic_partitions}
        assert sum(before.values()) == 45
        cluster.kill(coordinator)
        deadline = time.monotonic() + 60
        after: dict[tuple[str, int], int] = {}
        while time.monotonic() < deadline:
            try:
                result = admin.list_consumer_group_offsets([confluent_group_request("g-ledger")])[
                    "g-ledger"
                ].result(10)
                after = {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions}
                if after == before:
                    break
            except (KafkaException, TimeoutError):
                pass  # the dead coordinator: the group's new one is not elected yet
            time.sleep(0.5)
        assert after == before, cluster.log_tail(coordinator)
        rest = consume(45)
        # Resumed at the commits: nothing read before is read again.
        assert sorted(set(first) | set(rest)) == sorted(b"v%d" % i for i in range(90))
        assert not set(first) & set(rest)
    finally:
        cluster.stop()


def confluent_group_request(group: str) -> Any:
    from confluent_kafka import ConsumerGroupTopicPartitions

    return ConsumerGroupTopicPartitions(group)
