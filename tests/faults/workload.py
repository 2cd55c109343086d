"""The workload a schedule runs its faults under, and everything its clients were told.

One trafka idempotent producer (``acks=all``) writes keyed, numbered records
(value ``k<key>:<seq>``, the sequence counting up per run) at a steady pace (a
record every ``interval`` seconds; the tests' clusters say theirs) and
keeps every delivery report: the (partition, offset) it names, or the error;
confluent-kafka's (librdkafka's) idempotent producer does the same alongside
(values ``ck<key>:<seq>``, the same keys). With ``acks1``, a third producer,
trafka's with ``acks=1`` (which cannot be idempotent: idempotence needs
``acks=all``, KIP-98), writes ``a1k<key>:<seq>`` alongside: the checker holds
what it was told to no promise (see checker.py). One
consumer in a group reads all along and commits every second; after each
commit that succeeded it reads the group's committed offsets back from the
coordinator and keeps them. Every record the consumer returned is kept too.

Through a proxy, a delivery report may name no offset (the proxy moved the
record to its key's partition: see docs/proxy.md, "No offset"); it is kept as
offset -1.

It runs in its own trio loop in a thread of its own, in the namespace of a
host of its own when given one (``netns``: a schedule can then cut it off), (:meth:`Workload.start`,
:meth:`Workload.stop`) while the schedule acts on the cluster from the caller's
thread. Times are the injected clock's (``time.monotonic`` by default); they
serve the unavailability figures only.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable
from typing import Any

import trio
from netlab import in_namespace, run_in_namespace

from trafka.sdk import TopicPartition, open_consumer, open_producer

KEYS = 8


@dataclasses.dataclass
class Told:
    """What the clients were told, as they were told it."""

    sent: int = 0
    sent_librdkafka: int = 0
    sent_acks1: int = 0
    acked: dict[bytes, tuple[int, int]] = dataclasses.field(default_factory=dict)
    # (time, partition) of each acknowledgement
    ack_times: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    failed: dict[bytes, str] = dataclasses.field(default_factory=dict)
    consumed: list[tuple[int, int, bytes]] = dataclasses.field(default_factory=list)
    # (time, partition, committed offset read back after a commit that succeeded)
    committed: list[tuple[float, int, int]] = dataclasses.field(default_factory=list)
    commit_errors: int = 0


class Workload:
    def __init__(
        self,
        bootstrap: str,
        topic: str,
        partitions: int,
        group: str,
        interval: float = 0.01,
        clock: Callable[[], float] = time.monotonic,
        librdkafka: bool = True,
        netns: str | None = None,
        acks1: bool = False,
        request_timeout_ms: int = 10_000,
    ) -> None:
        self.librdkafka = librdkafka
        self.request_timeout_ms = request_timeout_ms  # trafka's clients
        self.acks1 = acks1
        self.netns = netns
        self.bootstrap = bootstrap
        self.topic = topic
        self.partitions = partitions
        self.group = group
        self.interval = interval
        self.clock = clock
        self.told = Told()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)
        self.error: BaseException | None = None

    def start(self) -> None:
        self._thread.start()

    def progress(self) -> int:
        """How far the workload got: records acknowledged."""
        return len(self.told.acked)

    def stop(self, timeout: float = 180.0) -> Told:
        self._stop.set()
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise AssertionError(f"the workload did not stop within {timeout} s")
        if self.error is not None:
            raise self.error
        return self.told

    def _main(self) -> None:
        try:
            run_in_namespace(self.netns, self._run)
        except BaseException as exc:  # reported by stop()
            self.error = exc

    async def _run(self) -> None:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._produce)
            if self.librdkafka:
                nursery.start_soon(trio.to_thread.run_sync, self._produce_librdkafka)
            nursery.start_soon(self._consume)
            if self.acks1:
                nursery.start_soon(self._produce, 1)

    async def _stopped(self) -> bool:
        await trio.sleep(0)
        return self._stop.is_set()

    async def _produce(self, acks: int = -1) -> None:
        """Write numbered records all along; with ``acks=1`` (not idempotent), values
        ``a1k<key>:<seq>``."""
        prefix = b"a1" if acks == 1 else b""
        async with (
            open_producer(
                bootstrap_servers=self.bootstrap,
                acks=acks,
                enable_idempotence=acks == -1,
                linger_ms=5,
                request_timeout_ms=self.request_timeout_ms,
                delivery_timeout_ms=120_000,
            ) as producer,
            trio.open_nursery() as waiters,
        ):
            seq = 0
            while not await self._stopped():
                key = b"k%d" % (seq % KEYS)
                value = b"%s%s:%08d" % (prefix, key, seq)
                future = await producer.send(self.topic, value, key=key)
                if acks == 1:
                    self.told.sent_acks1 += 1
                else:
                    self.told.sent += 1
                waiters.start_soon(self._delivered, value, future)
                seq += 1
                await trio.sleep(self.interval)
            with trio.move_on_after(150):
                await producer.flush()

    def _produce_librdkafka(self) -> None:
        """confluent-kafka's (librdkafka's) idempotent producer alongside, its values
        ``c<key>:<seq>`` (a sequence of its own), in a thread of its own."""
        with in_namespace(self.netns):  # a worker thread of trio's, shared
            self._librdkafka_loop()

    def _librdkafka_loop(self) -> None:
        from confluent_kafka import Producer

        def delivered(err: Any, msg: Any) -> None:
            if err is not None:
                self.told.failed[msg.value()] = str(err)
            else:
                offset = msg.offset()
                self.told.acked[msg.value()] = (msg.partition(), -1 if offset is None else offset)
                self.told.ack_times.append((self.clock(), msg.partition()))

        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120_000,
            }
        )
        seq = 0
        while not self._stop.is_set():
            key = b"k%d" % (seq % KEYS)
            producer.produce(self.topic, b"c%s:%08d" % (key, seq), key=key, on_delivery=delivered)
            self.told.sent_librdkafka += 1
            seq += 1
            producer.poll(self.interval)
        producer.flush(150)

    async def _delivered(self, value: bytes, future: Any) -> None:
        try:
            meta = await future
        except Exception as exc:  # a delivery report naming an error
            self.told.failed[value] = repr(exc)
            return
        self.told.acked[value] = (meta.partition, meta.offset)
        if not value.startswith(b"a1"):  # writes are available when acks=all ones are
            self.told.ack_times.append((self.clock(), meta.partition))

    async def _consume(self) -> None:
        tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
        async with open_consumer(
            self.topic,
            bootstrap_servers=self.bootstrap,
            group_id=self.group,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            request_timeout_ms=self.request_timeout_ms,
            default_api_timeout_ms=self.request_timeout_ms,
        ) as consumer:
            last_commit = self.clock()
            while not await self._stopped():
                for batch in (await consumer.getmany(timeout_ms=300)).values():
                    self.told.consumed += [(r.partition, r.offset, r.value) for r in batch]
                if self.clock() - last_commit < 1.0:
                    continue
                last_commit = self.clock()
                try:
                    await consumer.commit()
                    for tp in tps:
                        offset = await consumer.committed(tp)
                        if offset is not None:
                            self.told.committed.append((self.clock(), tp.partition, offset))
                except Exception:  # a commit refused during a fault
                    self.told.commit_errors += 1


async def _read_log(
    bootstrap: str, topic: str, partitions: int, isolation: str
) -> tuple[dict[int, list[bytes]], dict[int, int]]:
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with open_consumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        isolation_level=isolation,
        request_timeout_ms=10_000,
        # the close waits for the fetch the broker holds (docs/sdk.md): not 500 ms
        fetch_max_wait_ms=50,
    ) as consumer:
        ends = await consumer.end_offsets(tps)  # the LSO under read_committed
        consumer.assign(tps)
        consumer.seek_to_beginning()
        log: dict[int, dict[int, bytes]] = {p: {} for p in range(partitions)}
        while any([await consumer.position(tp) < ends[tp] for tp in tps]):
            for tp, batch in (await consumer.getmany(timeout_ms=500)).items():
                for r in batch:
                    if r.offset < ends[tp]:
                        log[tp.partition][r.offset] = r.value
    # Offsets with no record (transaction markers, aborted records under
    # read_committed) are kept as empty values: the checker compares offsets.
    return (
        {p: [log[p].get(o, b"") for o in range(ends[TopicPartition(topic, p)])] for p in log},
        {tp.partition: end for tp, end in ends.items()},
    )


def read_log(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout: float = 120,
    isolation: str = "read_uncommitted",
) -> Any:
    """Every partition's records below its high watermark (its last stable offset
    under ``read_committed``): ``{partition: [value, ...]}`` (index = offset)."""
    return read_log_and_ends(bootstrap, topic, partitions, timeout, isolation)[0]


def read_log_and_ends(
    bootstrap: str,
    topic: str,
    partitions: int,
    timeout: float = 120,
    isolation: str = "read_uncommitted",
) -> tuple[dict[int, list[bytes]], dict[int, int]]:
    """:func:`read_log`, and the end offsets it read to."""

    async def main() -> Any:
        with trio.fail_after(timeout):
            return await _read_log(bootstrap, topic, partitions, isolation)

    return trio.run(main)
