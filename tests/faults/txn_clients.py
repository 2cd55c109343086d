"""The transactional processor of txn_workload.py written with other clients:
librdkafka's (confluent-kafka) and Kafka's Java client (tests/interop/java/
TxnProcessor.java, one JVM for the whole run). Each does what trafka's processor
does (txn_workload.py's module docstring): a ``read_committed`` consumer in the
processor group, one transaction per poll (at most 20 records), its outputs
``t<txn>:<partition>:<offset>:<input value>`` to the sink with the input's key,
the consumer's positions sent with the group's metadata (KIP-447), one in five
(seeded) aborted on purpose after a flush; after an abort or an error the
consumer goes back to the group's committed offsets; after a fatal error, or a
commit whose outcome it was not told, a new producer with the same
``transactional.id`` takes over. What each was told is recorded the same way
(:class:`txn_workload.Txn`: outputs, offsets, outcome, delivery reports of a
committed one's outputs), so the same checker rules apply.

Outcomes, per client: ``committed`` when its commit call returned; ``aborted``
when its abort call returned, or the commit was never asked for; ``unknown`` when
the commit was asked for and did not return (an error, or a retriable error
that a retry did not settle).
"""

from __future__ import annotations

import contextlib
import json
import random
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

# the same sizes and timeouts as trafka's processor (txn_workload.py)
MAX_RECORDS = 20
TIMEOUTS = {"request.timeout.ms": 5000, "transaction.timeout.ms": 15000}


class LibrdkafkaProcessor:
    """confluent-kafka's consumer and transactional producer, in the calling thread
    (which must be in the clients' namespace), until ``stopped()``."""

    def __init__(self, workload: Any, stopped: Callable[[], bool]) -> None:
        self.w = workload
        self.told = workload.told
        self.stopped = stopped
        self.rng = random.Random(workload.rng.random())

    def run(self) -> None:
        from confluent_kafka import Consumer

        consumer = Consumer({
            "bootstrap.servers": self.w.bootstrap,
            "group.id": self.w.txn_group,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "session.timeout.ms": 10000,
        })  # fmt: skip
        consumer.subscribe([self.w.topic])
        try:
            while not self.stopped():
                self._producer_life(consumer)
        finally:
            consumer.close()

    def _producer_life(self, consumer: Any) -> None:
        from confluent_kafka import Producer

        self.told.producers += 1
        producer = Producer({
            "bootstrap.servers": self.w.bootstrap,
            "transactional.id": f"tx-{self.w.txn_group}",
            "linger.ms": 5,
            "message.timeout.ms": 10000,
            "socket.timeout.ms": 5000,
            **TIMEOUTS,
        })  # fmt: skip
        try:
            producer.init_transactions(10)
            self._rewind(consumer)
            while not self.stopped():
                if not self._transaction(consumer, producer):
                    break
        except Exception as exc:  # a new producer takes over
            self.w._error(exc)
        finally:
            producer.flush(5)

    def _rewind(self, consumer: Any) -> None:
        from confluent_kafka import OFFSET_BEGINNING, OFFSET_INVALID, TopicPartition

        assigned = consumer.assignment()
        if not assigned:
            return
        resumed: dict[int, int] = {}
        for tp in consumer.committed(assigned, timeout=15):
            resumed[tp.partition] = -1 if tp.offset == OFFSET_INVALID else tp.offset
            offset = OFFSET_BEGINNING if tp.offset == OFFSET_INVALID else tp.offset
            with contextlib.suppress(Exception):  # not fetching yet: it starts there anyway
                consumer.seek(TopicPartition(tp.topic, tp.partition, offset))
        self.told.rewinds.append((len(self.told.txns), resumed))

    def _transaction(self, consumer: Any, producer: Any) -> bool:
        from confluent_kafka import KafkaException, TopicPartition
        from txn_workload import Txn

        records = [m for m in consumer.consume(MAX_RECORDS, 0.3) if m.error() is None]
        if not records:
            return True
        number = len(self.told.txns)
        outputs = [b"t%d:%d:%d:%s" % (number, m.partition(), m.offset(), m.value())
                   for m in records]  # fmt: skip
        txn = Txn(outputs, {}, after_rewind=len(self.told.rewinds) - 1)
        for m in records:
            txn.offsets[m.partition()] = max(txn.offsets.get(m.partition(), 0), m.offset() + 1)
        self.told.txns.append(txn)
        reports: dict[bytes, tuple[int, int]] = {}

        def delivered(err: Any, msg: Any) -> None:
            if err is None:
                reports[msg.value()] = (msg.partition(), msg.offset())

        abort = self.rng.random() < self.w.abort_ratio
        committing = False
        try:
            producer.begin_transaction()
            for out, m in zip(outputs, records, strict=True):
                producer.produce(self.w.sink, out, key=m.key(), on_delivery=delivered)
            offsets = [TopicPartition(self.w.topic, p, o) for p, o in txn.offsets.items()]
            producer.send_offsets_to_transaction(offsets, consumer.consumer_group_metadata(), 10)
            if abort:
                producer.flush(10)
            else:
                committing = True
                self._commit(producer)
                txn.outcome = "committed"
                txn.reports = {out: reports.get(out, (-1, -1)) for out in outputs}
                return True
        except Exception as exc:  # what the client said, recorded
            self.w._error(exc)
            error = exc.args[0] if isinstance(exc, KafkaException) else None
            if error is not None and not error.txn_requires_abort():  # fatal, or unsettled
                txn.outcome = "unknown" if committing else "aborted"
                return False
        try:
            producer.abort_transaction(10)
        except KafkaException as exc:
            self.w._error(exc)
            txn.outcome = "unknown" if committing else "aborted"
            return False
        txn.outcome = "aborted"
        self._rewind(consumer)
        return True

    @staticmethod
    def _commit(producer: Any) -> None:
        """commit_transaction, again while it fails retriably (librdkafka's rule: a
        retriable error leaves the commit to be called again), three times at most."""
        from confluent_kafka import KafkaException

        for attempt in range(3):
            try:
                producer.commit_transaction(10)
                return
            except KafkaException as exc:
                if not exc.args[0].retriable() or attempt == 2:
                    raise


class JavaProcessor:
    """tests/interop/java/TxnProcessor.java in one JVM on the clients' host: it
    prints one JSON line per event (a producer started, an error, a transaction
    begun with its outputs and offsets, a transaction ended with its outcome and
    reports); :meth:`read` turns them into ``told``. It stops when the stop file
    exists."""

    def __init__(
        self,
        workload: Any,
        root: Path,
        spawn: Callable[[list[str], IO[bytes]], subprocess.Popen[bytes]],
    ) -> None:
        self.w = workload
        self.out = Path(root) / f"java-{workload.txn_group}.jsonl"
        self.stop_file = Path(root) / f"java-{workload.txn_group}.stop"
        self.spawn = spawn
        self.proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()
        self._read = 0

    def start(self) -> None:
        from java_harness import compiled
        from kafka_peers import java_command

        home = compiled()
        argv = java_command("TxnProcessor", self.w.bootstrap, self.w.topic, self.w.sink,
                            self.w.txn_group, str(self.w.rng.randrange(1 << 30)),
                            str(self.w.abort_ratio), str(self.stop_file))  # fmt: skip
        cp = argv.index("-cp") + 1
        argv[cp] = f"{argv[cp]}:{home}"
        argv.insert(cp - 1, f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}")
        with open(self.out, "wb") as log:
            self.proc = self.spawn(argv, log)

    def stop(self, timeout: float = 120) -> None:
        self.stop_file.touch()
        assert self.proc is not None
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.read()

    def read(self) -> None:
        """What the JVM printed since the last read, into ``told``."""
        from txn_workload import Txn

        told = self.w.told
        if not self.out.exists():  # not started yet
            return
        with self._lock, open(self.out, "rb") as f:
            f.seek(self._read)
            for line in f:
                if not line.endswith(b"\n"):
                    break
                self._read += len(line)
                if not line.startswith(b"{"):
                    continue  # the client's own logs
                event = json.loads(line)
                if "producer" in event:
                    told.producers += 1
                elif "error" in event:
                    told.errors[event["error"]] = told.errors.get(event["error"], 0) + 1
                elif "outputs" in event:
                    outputs = [o.encode() for o in event["outputs"]]
                    offsets = {int(p): o for p, o in event["offsets"].items()}
                    told.txns.append(Txn(outputs, offsets))
                else:
                    txn = told.txns[event["txn"]]
                    txn.outcome = event["outcome"]
                    txn.reports = {
                        o.encode(): tuple(r) for o, r in event.get("reports", {}).items()
                    }

    def wait_running(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc is not None and self.proc.poll() is None:
            self.read()
            if self.w.told.producers:
                return
            time.sleep(0.2)
