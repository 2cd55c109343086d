"""Exactly-once against real clients: faults, crashes, fencing and transactions.

* An idempotent producer (confluent-kafka, and kafka-python 3.x with its
  defaults) sends 100,000 numbered records through a proxy that cuts
  connections after the broker appended a batch but before the producer saw
  the answer, and delays and swaps answers: every record lands exactly once,
  in order, per partition.
* brokerlite runs as a subprocess and is killed with SIGKILL twice during an
  idempotent load, and restarted on the same port and data directory: every
  acknowledged record is there exactly once, in order, at its acknowledged offset.
  Killed with transactions open, it comes back with them: one is committed by
  its producer after the restart, another aborted by its producer's successor.
* Transactions: a zombie producer is fenced; confluent-kafka's and kafka-python's
  transactional producers commit and abort; confluent-kafka's and kafka-python's
  read_committed consumers see exactly the committed records; a
  consume-transform-produce loop killed with SIGKILL mid-transaction and
  restarted produces each input record exactly once.

Records are checked against the broker's log with raw Fetch requests, without a
client in between, except where a client's view is the point.
"""

from __future__ import annotations

import os
import random
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from brokerlite_faultproxy import Action, FaultPlan, FaultProxy
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from trafka.brokerlite.server import broker_in_thread
from trafka.codec.messages import k01_fetch as fetch
from trafka.codec.records import decode_batch, iter_batches

N = 100_000
PARTITIONS = 3
HERE = Path(__file__).resolve().parent
PARTITION_EOF = -191  # librdkafka's _PARTITION_EOF

# -- helpers -------------------------------------------------------------------------------------


def create_topics(servers: str, *topics: tuple[str, int]) -> None:
    admin = AdminClient({"bootstrap.servers": servers})
    for future in admin.create_topics([NewTopic(t, n, 1) for t, n in topics]).values():
        future.result(30)


def read_log(raw_client: Any, address: tuple[str, int], topic: str, partition: int) -> list[Any]:
    """Every data record of a partition, read_uncommitted, straight from the broker."""
    client = raw_client(address)
    records: list[Any] = []
    offset = 0
    while True:
        request = fetch.FetchRequest(
            max_wait_ms=0,
            min_bytes=1,
            max_bytes=16 << 20,
            topics=[
                fetch.FetchRequest.FetchTopic(
                    topic=topic,
                    partitions=[
                        fetch.FetchRequest.FetchPartition(
                            partition=partition, fetch_offset=offset, partition_max_bytes=16 << 20
                        )
                    ],
                )
            ],
        )
        part = client.request(1, 12, request).responses[0].partitions[0]
        assert part.error_code == 0, part.error_code
        blob = part.records or b""
        last = offset - 1
        for header, raw in iter_batches(blob):
            last = header.last_offset
            if not header.is_control:
                records.extend(r for r in decode_batch(raw).records if r.offset >= offset)
        if last < offset:
            return records
        offset = last + 1
        if offset >= part.high_watermark:
            return records


def numbers_in_order(records: list[Any], partition: int, n: int = N) -> bool:
    return [int(r.value) for r in records] == list(range(partition, n, PARTITIONS))


def consume_confluent(servers: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    """Values of a topic from the start to its end (the LSO for read_committed)."""
    consumer = Consumer(
        {
            "bootstrap.servers": servers,
            "group.id": "verifier",
            "isolation.level": isolation,
            "enable.partition.eof": True,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        at_end: set[int] = set()
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(at_end) < partitions and time.monotonic() < deadline:
            for message in consumer.consume(1000, timeout=0.5):
                error = message.error()
                if error is None:
                    values.append(message.value())
                elif error.code() == PARTITION_EOF:
                    at_end.add(message.partition())
                else:
                    raise AssertionError(error)
        assert len(at_end) == partitions, "did not reach the end in time"
        return values
    finally:
        consumer.close()


def end_offset(servers: str, topic: str, partition: int, isolation: str) -> int:
    """ListOffsets' latest offset: the last stable offset under read_committed."""
    consumer = Consumer(
        {"bootstrap.servers": servers, "group.id": "verifier", "isolation.level": isolation}
    )
    try:
        _, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
        return int(high)
    finally:
        consumer.close()


def consume_kafka_python(servers: str, topic: str, partitions: int, isolation: str) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KafkaTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=servers,
        isolation_level=isolation,
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
    )
    try:
        tps = [KafkaTopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(tps)
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if all(consumer.position(tp) >= ends[tp] for tp in tps):
                return values
            for records in consumer.poll(timeout_ms=300).values():
                values.extend(r.value for r in records)
        raise AssertionError("did not reach the end in time")
    finally:
        consumer.close()


# -- idempotence under faults --------------------------------------------------------------------


@pytest.mark.timeout(120)
@pytest.mark.parametrize("client", ["confluent-kafka", "kafka-python"])
def test_idempotent_producer_through_a_faulty_network(
    data_dir: Path, raw_client: Any, client: str
) -> None:
    plan = FaultPlan(seed=7, cut_every=5, max_cuts=4, delay=0.1, swap=0.1, skip_first=2)
    with (
        FaultProxy(plan) as proxy,
        broker_in_thread(
            port=0, data_dir=data_dir, advertised_listener=f"127.0.0.1:{proxy.address[1]}"
        ) as running,
    ):
        proxy.upstream = running.address
        servers = running.bootstrap_servers  # the proxy: the broker advertises it
        create_topics(servers, ("numbers", PARTITIONS))
        if client == "confluent-kafka":
            failures = produce_confluent(servers)
        else:
            failures = produce_kafka_python(servers)
        assert failures == []
        # The faults happened: four answers to appended batches never arrived.
        assert plan.counts[Action.CUT] == 4
        assert plan.counts[Action.DELAY] + plan.counts[Action.SWAP] > 0
        for partition in range(PARTITIONS):
            records = read_log(raw_client, running.address, "numbers", partition)
            assert numbers_in_order(records, partition)
            # Exactly once: the retried batches were not written a second time.
            assert running.broker.logs.partition("numbers", partition).log_end_offset == len(
                records
            )


def produce_confluent(servers: str) -> list[Any]:
    failures: list[Any] = []

    def on_delivery(err: Any, _msg: Any) -> None:
        if err is not None:
            failures.append(err)

    producer = Producer(
        {
            "bootstrap.servers": servers,
            "enable.idempotence": True,
            "linger.ms": 20,
            "batch.num.messages": 2000,
            "queue.buffering.max.messages": 2 * N,
            "reconnect.backoff.max.ms": 200,
        }
    )
    for i in range(N):
        producer.produce("numbers", b"%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
        if i % 10_000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0
    return failures


def produce_kafka_python(servers: str) -> list[Any]:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=servers)  # 3.x defaults: idempotent, acks=all
    try:
        assert producer.config["enable_idempotence"]
        futures = [producer.send("numbers", b"%d" % i, partition=i % PARTITIONS) for i in range(N)]
        producer.flush(60)
        return [f.exception for f in futures if not f.succeeded()]
    finally:
        producer.close(10)


# -- crash and restart ---------------------------------------------------------------------------

_READY = re.compile(r"ready on 127\.0\.0\.1:(\d+)")


class BrokerProcess:
    """``python -m trafka.tools.cli broker`` in a subprocess, its log in a file."""

    def __init__(self, data_dir: Path, log_path: Path) -> None:
        self.data_dir = data_dir
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None
        self.port = 0

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.proc = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trafka.tools.cli",
                    "broker",
                    "--no-announce",
                    "--listen",
                    f"127.0.0.1:{self.port}",
                    "--data-dir",
                    str(self.data_dir),
                    "--log-segment-bytes",
                    "262144",
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
            )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            found = _READY.search(self.log_path.read_text(errors="replace"))
            if found:
                self.port = int(found.group(1))
                return
            assert self.proc.poll() is None, self.log_path.read_text(errors="replace")
            time.sleep(0.05)
        raise AssertionError("the broker did not start in time")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, sig)
        self.proc.wait(30)


@pytest.fixture
def broker_process(tmp_path: Path) -> Iterator[BrokerProcess]:
    process = BrokerProcess(tmp_path / "data", tmp_path / "broker.log")
    yield process
    if process.proc is not None and process.proc.poll() is None:
        process.kill(signal.SIGTERM)


@pytest.mark.timeout(120)
def test_kill_9_during_an_idempotent_load(broker_process: BrokerProcess, raw_client: Any) -> None:
    broker_process.start()
    servers = f"127.0.0.1:{broker_process.port}"
    create_topics(servers, ("numbers", PARTITIONS))
    acked: list[tuple[int, int, bytes]] = []
    failures: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            acked.append((msg.partition(), msg.offset(), msg.value()))

    producer = Producer(
        {
            "bootstrap.servers": servers,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.num.messages": 1000,
            "queue.buffering.max.messages": 2 * N,
            "reconnect.backoff.max.ms": 100,
        }
    )
    kills = [N // 3, 2 * N // 3]
    for i in range(N):
        producer.produce("numbers", b"%d" % i, partition=i % PARTITIONS, on_delivery=on_delivery)
        if i % 1000 == 999:
            # Keep about 5,000 records in flight, so that the kills land mid-stream.
            while len(acked) + len(failures) < i - 5000:
                producer.poll(0.01)
            if kills and i >= kills[0]:
                kills.pop(0)
                broker_process.kill()
                broker_process.start()  # same port, same data directory
    assert producer.flush(60) == 0
    assert failures == []
    assert len(acked) == N
    logs = [
        read_log(raw_client, ("127.0.0.1", broker_process.port), "numbers", p) for p in range(3)
    ]
    for partition, records in enumerate(logs):
        assert numbers_in_order(records, partition)
    by_offset = [{r.offset: r.value for r in records} for records in logs]
    for partition, offset, value in acked:
        assert by_offset[partition][offset] == value
    # Segments rolled during the load, so restarts began from producer snapshots.
    assert list((broker_process.data_dir / "numbers-0").glob("*.snapshot"))


@pytest.mark.timeout(120)
def test_kill_9_during_a_trafka_idempotent_load(
    broker_process: BrokerProcess, raw_client: Any
) -> None:
    """The SDK's idempotent producer (the default) rides through two kill -9 restarts:
    it reconnects and retries what went unanswered, and nothing is lost, duplicated or
    reordered. Whether a kill lands between an append and its answer (the retry the
    restarted broker must recognise from its rebuilt producer state) is up to timing
    here, as in the confluent-kafka test above; tests/sdk's cut-response tests make
    that case certain."""
    import trio

    from trafka.sdk import open_producer

    broker_process.start()
    servers = f"127.0.0.1:{broker_process.port}"
    create_topics(servers, ("numbers", PARTITIONS))
    kills = [N // 3, 2 * N // 3]

    async def produce() -> list[tuple[int, int, bytes]]:
        async with open_producer(
            bootstrap_servers=servers,
            acks="all",
            linger_ms=5,
            batch_size=16384,
            retry_backoff_ms=20,
            reconnect_backoff_max_ms=100,
        ) as producer:
            futures = []
            for i in range(N):
                value = b"%d" % i
                futures.append(
                    (value, await producer.send("numbers", value, partition=i % PARTITIONS))
                )
                if kills and i >= kills[0]:
                    kills.pop(0)
                    # Mid-stream: what came 5,000 records earlier is acknowledged, the
                    # rest is in flight or queued.
                    await futures[i - 5000][1]
                    await trio.to_thread.run_sync(broker_process.kill)
                    await trio.to_thread.run_sync(broker_process.start)
            await producer.flush()
            acked = []
            for value, future in futures:
                metadata = await future
                acked.append((metadata.partition, metadata.offset, value))
            return acked

    acked = trio.run(produce)
    assert not kills
    assert len(acked) == N
    logs = [
        read_log(raw_client, ("127.0.0.1", broker_process.port), "numbers", p)
        for p in range(PARTITIONS)
    ]
    for partition, records in enumerate(logs):
        assert numbers_in_order(records, partition)
    by_offset = [{r.offset: r.value for r in records} for records in logs]
    for partition, offset, value in acked:
        assert by_offset[partition][offset] == value


# -- transactions --------------------------------------------------------------------------------


def transactional_confluent(servers: str, txn_id: str) -> Producer:
    producer = Producer({"bootstrap.servers": servers, "transactional.id": txn_id, "linger.ms": 5})
    producer.init_transactions(30)
    return producer


@pytest.mark.timeout(90)
def test_a_zombie_producer_is_fenced(running: Any) -> None:
    servers = running.bootstrap_servers
    create_topics(servers, ("fenced", 1))
    zombie = transactional_confluent(servers, "shared-id")
    zombie.begin_transaction()
    for i in range(5):
        zombie.produce("fenced", b"zombie-%d" % i)
    zombie.flush(30)
    # The same transactional.id starts again elsewhere: the old instance is fenced
    # and its open transaction aborted.
    successor = transactional_confluent(servers, "shared-id")
    successor.begin_transaction()
    successor.produce("fenced", b"successor")
    successor.commit_transaction(30)
    with pytest.raises(KafkaException) as failure:
        zombie.produce("fenced", b"zombie-late")
        zombie.commit_transaction(30)
    assert failure.value.args[0].fatal()
    assert consume_confluent(servers, "fenced", 1, "read_committed") == [b"successor"]
    # Its records are in the log (aborted); its late one was refused.
    uncommitted = consume_confluent(servers, "fenced", 1, "read_uncommitted")
    assert sorted(uncommitted) == [b"successor"] + [b"zombie-%d" % i for i in range(5)]


@pytest.mark.timeout(90)
def test_kafka_python_admin_describes_and_aborts_an_open_transaction(running: Any) -> None:
    """kafka-python's KIP-664 admin calls on brokerlite: a librdkafka transaction left
    open is listed, described at its coordinator and on its partition, and aborted
    there with WriteTxnMarkers; read_committed consumers then get past it."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import AbortTransactionSpec

    servers = running.bootstrap_servers
    create_topics(servers, ("inspected", 1))
    open_txn = transactional_confluent(servers, "cf-open")
    open_txn.begin_transaction()
    for i in range(3):
        open_txn.produce("inspected", b"open-%d" % i, partition=0)
    assert open_txn.flush(30) == 0
    plain = Producer({"bootstrap.servers": servers})
    plain.produce("inspected", b"after", partition=0)
    assert plain.flush(30) == 0
    assert consume_confluent(servers, "inspected", 1, "read_committed") == []

    admin = KafkaAdminClient(bootstrap_servers=servers)
    try:
        listed = [
            t for ts in admin.list_transactions(state_filters=["Ongoing"]).values() for t in ts
        ]
        assert [t.transactional_id for t in listed] == ["cf-open"]
        description = admin.describe_transactions(["cf-open"])["cf-open"]
        tp = KafkaTopicPartition("inspected", 0)
        assert description.producer_id == listed[0].producer_id
        assert description.topic_partitions == {tp}
        (state,) = admin.describe_producers([tp])[tp].active_producers
        assert (state.producer_id, state.current_transaction_start_offset) == (
            description.producer_id,
            0,
        )
        admin.abort_transaction(
            AbortTransactionSpec(tp, state.producer_id, state.producer_epoch, 0)
        )
        (state,) = admin.describe_producers([tp])[tp].active_producers
        assert state.current_transaction_start_offset == -1
    finally:
        admin.close()
    assert consume_confluent(servers, "inspected", 1, "read_committed") == [b"after"]
    open_txn.abort_transaction(30)


@pytest.mark.timeout(90)
def test_commit_and_abort_cycles_interleaved_across_clients(running: Any) -> None:
    from kafka import KafkaProducer

    servers = running.bootstrap_servers
    create_topics(servers, ("txns", 2))
    confluent = transactional_confluent(servers, "cf-tx")
    kafka_python = KafkaProducer(bootstrap_servers=servers, transactional_id="kp-tx", linger_ms=5)
    kafka_python.init_transactions()
    expected: list[bytes] = []
    everything = 0
    try:
        for cycle in range(4):
            commit = cycle % 2 == 0
            confluent.begin_transaction()
            kafka_python.begin_transaction()
            for i in range(10):
                confluent.produce("txns", b"cf-%d-%d" % (cycle, i), partition=i % 2)
                kafka_python.send("txns", b"kp-%d-%d" % (cycle, i), partition=i % 2)
            confluent.flush(30)
            kafka_python.flush(30)
            everything += 20
            if commit:
                confluent.commit_transaction(30)
                kafka_python.commit_transaction()
                expected += [b"cf-%d-%d" % (cycle, i) for i in range(10)]
                expected += [b"kp-%d-%d" % (cycle, i) for i in range(10)]
            else:
                # One aborts while the other's transaction is still open on the
                # same partitions: the LSO must wait for both.
                kafka_python.abort_transaction()
                confluent.abort_transaction(30)
    finally:
        kafka_python.close(10)
    for consume in (consume_confluent, consume_kafka_python):
        assert sorted(consume(servers, "txns", 2, "read_committed")) == sorted(expected)
    assert len(consume_confluent(servers, "txns", 2, "read_uncommitted")) == everything


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_consume_transform_produce_is_exactly_once_across_kill_9(running: Any) -> None:
    servers = running.bootstrap_servers
    inputs = 3000
    create_topics(servers, ("ctp-in", 2), ("ctp-out", 2))
    producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
    for i in range(inputs):
        producer.produce("ctp-in", b"%d" % i, partition=i % 2)
    assert producer.flush(30) == 0
    command = [
        sys.executable,
        str(HERE / "eos_ctp_worker.py"),
        servers,
        "ctp-in",
        "ctp-out",
        "ctp-group",
        "ctp-tx",
        "25",  # input records per transaction
        "30",  # ms to wait with written, uncommitted records
    ]
    rng = random.Random(11)
    for _ in range(3):
        worker = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
        try:
            assert worker.stdout is not None
            target = rng.randrange(100, 600)
            for line in worker.stdout:
                kind, count = line.split()
                if kind == "open" and int(count) >= target:
                    break
            else:
                raise AssertionError(f"the worker ended early with {worker.wait()}")
        finally:
            # Inside a transaction whose records are written but not committed.
            worker.send_signal(signal.SIGKILL)
            worker.wait(30)
    final = subprocess.run(command, capture_output=True, text=True, timeout=90)
    assert final.returncode == 0, final.stderr[-2000:]
    committed = consume_confluent(servers, "ctp-out", 2, "read_committed")
    assert sorted(committed) == sorted(b"%d!" % i for i in range(inputs))
    # The killed transactions' records are in the log, aborted: read_uncommitted
    # shows them again, read_committed never does.
    assert len(consume_confluent(servers, "ctp-out", 2, "read_uncommitted")) > inputs


@pytest.mark.timeout(120)
def test_kill_9_with_transactions_in_flight(broker_process: BrokerProcess) -> None:
    broker_process.start()
    servers = f"127.0.0.1:{broker_process.port}"
    create_topics(servers, ("crash-txns", 2))
    producer = transactional_confluent(servers, "survivor")
    producer.begin_transaction()
    for i in range(10):
        producer.produce("crash-txns", b"first-%d" % i, partition=i % 2)
    producer.commit_transaction(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce("crash-txns", b"second-%d" % i, partition=i % 2)
    producer.flush(30)
    # The coordinator's state is durable: after the crash the open transaction is
    # still there, and its producer can commit it.
    broker_process.kill()
    broker_process.start()
    producer.commit_transaction(30)
    orphan = transactional_confluent(servers, "orphan")
    orphan.begin_transaction()
    for i in range(10):
        orphan.produce("crash-txns", b"orphan-%d" % i, partition=i % 2)
    orphan.flush(30)
    broker_process.kill()
    broker_process.start()
    # Its producer never comes back; a new instance with its id aborts what it left.
    del orphan
    transactional_confluent(servers, "orphan")
    committed = consume_confluent(servers, "crash-txns", 2, "read_committed")
    expected = [b"first-%d" % i for i in range(10)] + [b"second-%d" % i for i in range(10)]
    assert sorted(committed) == sorted(expected)
    assert len(consume_confluent(servers, "crash-txns", 2, "read_uncommitted")) == 30
    # Nothing is left hanging: the last stable offset is the high watermark again.
    for partition in range(2):
        assert end_offset(servers, "crash-txns", partition, "read_committed") == end_offset(
            servers, "crash-txns", partition, "read_uncommitted"
        )
