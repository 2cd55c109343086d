"""A consumer group of mixed clients across joins, a crash, a leave and a broker restart.

Three members share one group on a 6-partition topic while a producer keeps
writing: a kafka-python consumer and a confluent-kafka consumer on threads,
and a confluent-kafka consumer in a subprocess that is killed with SIGKILL
(no LeaveGroup: the broker must notice through the session timeout). After
each change the live members must converge on a disjoint assignment covering
all six partitions. Members commit after processing (at-least-once). Finally
the broker restarts on the same data directory and a new member resumes from
the committed offsets: every record produced must have been consumed.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaException, Producer
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from trafka.brokerlite import broker_in_thread

pytestmark = pytest.mark.timeout(180)

TOPIC = "orders"
GROUP = "mixed-group"
PARTITIONS = set(range(6))
SESSION_MS = 3000


class Ledger:
    """What was produced and consumed, shared between threads."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.produced: set[bytes] = set()
        self.consumed: dict[str, set[bytes]] = {}

    def got(self, member: str, value: bytes) -> None:
        with self.lock:
            self.consumed.setdefault(member, set()).add(value)

    def all_consumed(self) -> set[bytes]:
        with self.lock:
            return set().union(*self.consumed.values()) if self.consumed else set()


class Member(threading.Thread):
    """A group member on a thread; ``assignment`` is its current partition set."""

    def __init__(self, name: str, ledger: Ledger) -> None:
        super().__init__(name=name, daemon=True)
        self.ledger = ledger
        self.stop = threading.Event()
        self.assignment: frozenset[int] = frozenset()
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.consume()
        except BaseException as exc:  # surfaced by the test
            self.error = exc

    def consume(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        self.stop.set()
        self.join(30)
        assert not self.is_alive(), f"{self.name} did not stop"
        assert self.error is None, self.error


class KafkaPythonMember(Member):
    def __init__(self, name: str, ledger: Ledger, servers: str) -> None:
        super().__init__(name, ledger)
        self.servers = servers

    def consume(self) -> None:
        consumer = KafkaConsumer(
            TOPIC,
            bootstrap_servers=self.servers,
            group_id=GROUP,
            client_id=self.name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=SESSION_MS,
            heartbeat_interval_ms=300,
            max_poll_records=50,
        )
        # Have the topic's partitions before the first join. Otherwise (seen with
        # kafka-python 3.0.12) the first assignment is empty, the metadata that
        # arrives next starts a second join, and when poll(timeout_ms=100) gives
        # up while that join is in flight, the assignment it brings is never
        # applied: the member stays without partitions, and the broker thinks it
        # holds all of them.
        assert consumer.partitions_for_topic(TOPIC) == PARTITIONS
        try:
            while not self.stop.is_set():
                batches = consumer.poll(timeout_ms=100)
                for records in batches.values():
                    for record in records:
                        self.ledger.got(self.name, record.value)
                if batches:
                    try:
                        consumer.commit()
                    except KafkaError:
                        pass  # a rebalance is under way; the next commit covers it
                self.assignment = frozenset(tp.partition for tp in consumer.assignment())
        finally:
            consumer.close()  # leaves the group


class ConfluentMember(Member):
    def __init__(self, name: str, ledger: Ledger, servers: str) -> None:
        super().__init__(name, ledger)
        self.servers = servers

    def consume(self) -> None:
        consumer = Consumer(
            {
                "bootstrap.servers": self.servers,
                "group.id": GROUP,
                "client.id": self.name,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "session.timeout.ms": SESSION_MS,
                "heartbeat.interval.ms": 300,
            }
        )

        def on_assign(_: Any, partitions: list[Any]) -> None:
            self.assignment = frozenset(p.partition for p in partitions)

        def on_revoke(_: Any, partitions: list[Any]) -> None:
            self.assignment = frozenset()

        consumer.subscribe([TOPIC], on_assign=on_assign, on_revoke=on_revoke)
        try:
            while not self.stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None or msg.error() or msg.value() is None:
                    continue
                self.ledger.got(self.name, msg.value())
                try:
                    consumer.commit(message=msg, asynchronous=False)
                except KafkaException:
                    pass  # rebalancing; the next commit covers it
        finally:
            consumer.close()


CRASHER = """
import json, sys
from confluent_kafka import Consumer
c = Consumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2], "client.id": "crasher",
              "auto.offset.reset": "earliest", "enable.auto.commit": False,
              "session.timeout.ms": int(sys.argv[4]), "heartbeat.interval.ms": 300})
def on_assign(_, parts):
    print(json.dumps({"assigned": [p.partition for p in parts]}), flush=True)
def on_revoke(_, parts):
    print(json.dumps({"assigned": []}), flush=True)
c.subscribe([sys.argv[3]], on_assign=on_assign, on_revoke=on_revoke)
while True:
    m = c.poll(0.1)
    if m is None or m.error():
        continue
    # Reported before the commit: whatever gets committed has been reported.
    print(json.dumps({"value": m.value().decode()}), flush=True)
    c.commit(message=m, asynchronous=False)
"""


class Crasher:
    """A member in a subprocess, to be killed without warning."""

    def __init__(self, servers: str, ledger: Ledger) -> None:
        self.ledger = ledger
        self.assignment: frozenset[int] = frozenset()
        self.proc = subprocess.Popen(
            [sys.executable, "-c", CRASHER, servers, GROUP, TOPIC, str(SESSION_MS)],
            stdout=subprocess.PIPE,
            text=True,
        )
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            event = json.loads(line)
            if "assigned" in event:
                self.assignment = frozenset(event["assigned"])
            else:
                self.ledger.got("crasher", event["value"].encode())

    def kill(self) -> None:
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)
        self.reader.join(10)
        self.assignment = frozenset()


class Writer(threading.Thread):
    """Keeps producing to every partition until stopped."""

    def __init__(self, servers: str, ledger: Ledger) -> None:
        super().__init__(name="writer", daemon=True)
        self.ledger = ledger
        self.producer = Producer({"bootstrap.servers": servers, "linger.ms": 5})
        self.stop = threading.Event()
        self.count = 0

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            with self.ledger.lock:
                self.ledger.produced.add(msg.value())

    def run(self) -> None:
        while not self.stop.is_set():
            for partition in sorted(PARTITIONS):
                self.count += 1
                self.producer.produce(
                    TOPIC, b"r%06d" % self.count, partition=partition, on_delivery=self._delivered
                )
            self.producer.poll(0.02)
        assert self.producer.flush(30) == 0

    def finish(self) -> None:
        self.stop.set()
        self.join(60)


def wait_for(
    what: str, condition: Callable[[], bool], members: list[Any], timeout: float = 60
) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        for member in members:
            assert getattr(member, "error", None) is None, member.error
        assert time.monotonic() < deadline, (what, [m.assignment for m in members])
        time.sleep(0.05)


def balanced(members: list[Any]) -> Callable[[], bool]:
    """Every member has partitions, none twice, all six covered."""

    def check() -> bool:
        sets = [m.assignment for m in members]
        return (
            all(sets)
            and sum(len(s) for s in sets) == len(PARTITIONS)
            and set().union(*sets) == PARTITIONS
        )

    return check


def test_mixed_group_rebalances_and_resumes_without_loss(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    ledger = Ledger()
    settings = {
        "port": 0,
        "data_dir": data_dir,
        "group_initial_rebalance_delay_ms": 0,
        "group_min_session_timeout_ms": 1000,
        "num_partitions": len(PARTITIONS),
    }
    with broker_in_thread(**settings) as running:
        servers = running.bootstrap_servers
        writer = Writer(servers, ledger)
        writer.start()
        # The writer's first records create the topic. A member that joined before
        # would get an empty assignment (kafka-python's range assignor: "No
        # partition metadata") and keep it until its next metadata refresh.
        wait_for("the topic exists", lambda: len(ledger.produced) >= len(PARTITIONS), [])

        first = KafkaPythonMember("kafka-python-member", ledger, servers)
        first.start()
        wait_for("one member owns everything", balanced([first]), [first])

        second = ConfluentMember("confluent-member", ledger, servers)
        second.start()
        wait_for("two members split the topic", balanced([first, second]), [first, second])

        crasher = Crasher(servers, ledger)
        wait_for("three members", balanced([first, second, crasher]), [first, second, crasher])
        wait_for("the crasher consumed", lambda: bool(ledger.consumed.get("crasher")), [])

        crasher.kill()  # no LeaveGroup: only its session timeout tells the broker
        wait_for("survivors take over", balanced([first, second]), [first, second])

        second.close()  # a clean leave
        wait_for("the last member owns everything", balanced([first]), [first])

        writer.finish()
        produced = len(ledger.produced)
        assert produced >= len(PARTITIONS)
        # Let the last member catch up, then stop it (its loop commits what it
        # consumed before it looks at the stop flag).
        wait_for(
            "the last member catches up",
            lambda: ledger.produced <= ledger.all_consumed(),
            [first],
        )
        first.close()

    # The broker restarts on the same data directory (and a new port).
    with broker_in_thread(**settings) as running:
        resumer = KafkaConsumer(
            bootstrap_servers=running.bootstrap_servers,
            group_id=GROUP,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        try:
            tps = [TopicPartition(TOPIC, p) for p in sorted(PARTITIONS)]
            committed = {tp.partition: resumer.committed(tp) for tp in tps}
            ends = {tp.partition: off for tp, off in resumer.end_offsets(tps).items()}
            assert all(committed[p] is not None for p in PARTITIONS), committed
            assert all(committed[p] <= ends[p] for p in PARTITIONS)
            resumer.assign(tps)
            first_seen: dict[int, int] = {}
            deadline = time.monotonic() + 30
            while any(resumer.position(tp) < ends[tp.partition] for tp in tps):
                assert time.monotonic() < deadline
                for tp, records in resumer.poll(timeout_ms=200).items():
                    first_seen.setdefault(tp.partition, records[0].offset)
                    for record in records:
                        ledger.got("resumer", record.value)
            # The new member started exactly at the committed offsets.
            for partition, offset in first_seen.items():
                assert offset == committed[partition]
        finally:
            resumer.close()
    missing = ledger.produced - ledger.all_consumed()
    assert not missing, f"{len(missing)} of {produced} records lost"
    assert {"kafka-python-member", "confluent-member", "crasher"} <= set(ledger.consumed)
    assert os.path.exists(data_dir / "trafka-groups.journal")
