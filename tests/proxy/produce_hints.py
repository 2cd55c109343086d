"""KIP-951's Produce hints through the proxy, with every client (issue #83 item
6): trafka's SDK, confluent-kafka and Kafka's Java producer, each plain,
idempotent and transactional, writing one partition before and after its
leader moves, through a forwarding proxy whose Metadata requests are held after
the move (:class:`ProducerGate`: only the Produce answer's hint can bring a
producer to the new leader) and through a routing proxy (which follows leaders
itself). One leader move serves every producer of every proxy.

Rules:

* Each producer has a client id of its own (``<way>-<client>-<mode>``), so the
  gate tells which producers wrote on the new leader's listener after the move.
* A plain producer has one request in flight at a time: with more, a batch
  refused by the former leader and sent again may land after the next ones,
  as Kafka's producer configuration says of
  ``max.in.flight.requests.per.connection`` without idempotence (seen here).
* Phases: every producer writes :data:`N` records ``<way>-<client>-<mode>-before-<i>``
  and has them acknowledged (the transactional ones in a committed
  transaction); then the gate shuts, the leader moves, and each writes
  ``...-after-<i>`` the same way. No record is in flight while the leader
  moves, so none may be written twice, even by a plain producer.
* Kafka's Java producers run in one JVM (tests/interop/java/HintedProducers,
  compiled with the rest of tests/interop/java by tests/java_harness.py): six
  producers, three per proxy, told by a line on standard input that the leader moved.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import tempfile
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import IO, Any

import confluent_kafka
import trio
from hint_helpers import MAX_AGE_MS, MetadataGate, N, move_leader
from proxy_helpers import placement

from trafka.codec import ApiKey, ErrorCode
from trafka.proxy.filters import FilterContext
from trafka.sdk import TopicPartition, open_producer

MODES = ("plain", "idempotent", "transactional")
CLIENTS = ("sdk", "ck", "java")
PHASES = ("before", "after")

# (value, offset) of one acknowledged record.
Ack = tuple[str, int]


class ProducerGate(MetadataGate):
    """A :class:`MetadataGate` that notes, once shut, each Produce request's
    client id and the listener it came to, and each refusal's hint; it holds a
    client's Metadata requests until the proxy has passed that client a Produce
    answer naming the new leader (:attr:`new`, set once the leader moved), or
    its first Produce request reached that leader's listener. Held longer, a
    Metadata request would hold the connection it was sent on, and the Produce
    request the client sends the new leader behind it, until the client's
    request timeout (a broker, as the proxy, answers a connection's requests in
    order): seen with Kafka's Java producers, 30 s each time."""

    def attach(self, services: Any) -> None:
        super().attach(services)
        self.new = -1
        self.produced_by: dict[str, set[int]] = {}
        self.released: dict[str, trio.Event] = {}
        # Once shut, each NOT_LEADER_OR_FOLLOWER partition's hint: (the listener's
        # node, leader id, leader epoch).
        self.hints: list[tuple[int, int, int]] = []
        # The clients passed a hint naming the new leader.
        self.told: set[str] = set()

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        if ctx.api_key == ApiKey.PRODUCE and body is not None and self.shut:
            hints = [
                (ctx.node_id, p.current_leader.leader_id, p.current_leader.leader_epoch)
                for t in body.responses
                for p in t.partition_responses
                if p.error_code == ErrorCode.NOT_LEADER_OR_FOLLOWER
            ]
            self.hints.extend(hints)
            if any(leader == self.new for _, leader, _ in hints):
                self.told.add(ctx.client_id or "")
                self._released(ctx.client_id or "").set()
        return super().on_response(ctx, body)

    def _released(self, client: str) -> trio.Event:
        return self.released.setdefault(client, trio.Event())

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        client = ctx.client_id or ""
        if ctx.api_key == ApiKey.PRODUCE and self.shut:
            self.produced_by.setdefault(client, set()).add(ctx.node_id)
            if ctx.node_id == self.new:
                self._released(client).set()
        elif ctx.api_key == ApiKey.METADATA and self.shut and not self.gate.is_set():
            self.held += 1
            await self._released(client).wait()
            return body
        return await super().on_request(ctx, body)

    def open(self) -> None:
        def release() -> None:
            self.gate.set()
            for event in self.released.values():
                event.set()

        trio.from_thread.run_sync(release, trio_token=self.token)


@dataclass
class Moved:
    """What :func:`produce_across_a_move` saw: the leaders, and every
    acknowledged record by producer (``<way>-<client>-<mode>``)."""

    old: int
    new: int
    acks: dict[str, list[Ack]] = field(default_factory=dict)


def java_command() -> list[str]:
    """The command running HintedProducers (Kafka 4.4's kafka-clients)."""
    import java_harness
    from kafka_peers import java_command as command

    home = java_harness.compiled()
    argv = command("HintedProducers", heap="-Xmx192m")
    cp = argv.index("-cp") + 1
    argv[cp] = f"{argv[cp]}{os.pathsep}{home}"  # Kafka's jars first: their CDS archive applies
    argv.insert(cp - 1, f"-Dlog4j2.configurationFile={home / 'log4j2.properties'}")
    return argv


def _value(way: str, client: str, mode: str, phase: str, i: int) -> str:
    return f"{way}-{client}-{mode}-{phase}-{i}"


async def _sdk_phase(producer: Any, topic: str, way: str, mode: str, phase: str) -> list[Ack]:
    transactional = mode == "transactional"
    if transactional:
        producer.begin_transaction()
    values = [_value(way, "sdk", mode, phase, i) for i in range(N)]
    futures = [await producer.send(topic, v.encode(), partition=0) for v in values]
    await producer.flush()
    if transactional:
        await producer.commit_transaction()
    return [(v, (await f).offset) for v, f in zip(values, futures, strict=True)]


def _ck_phase(
    producers: dict[tuple[str, str], Any], topic: str, phase: str
) -> dict[str, list[Ack]]:
    """confluent-kafka's producers' ``phase``, one after the other (the plain and
    idempotent ones' records go out while the transactional one commits)."""
    acks: dict[str, list[Ack]] = {}
    failures: list[Any] = []

    def report(err: Any, msg: Any) -> None:
        if err is not None:
            failures.append(err)
        else:
            value = msg.value().decode()
            acks.setdefault(value.rsplit("-", 2)[0], []).append((value, msg.offset()))

    for (way, mode), producer in producers.items():
        if mode == "transactional":
            producer.begin_transaction()
        for i in range(N):
            producer.produce(
                topic,
                value=_value(way, "ck", mode, phase, i).encode(),
                partition=0,
                on_delivery=report,
            )
        if mode == "transactional":
            producer.commit_transaction(60)
    for producer in producers.values():
        assert producer.flush(60) == 0
    assert failures == [], failures
    return acks


def _java_acks(stdout: str) -> dict[str, list[Ack]]:
    acks: dict[str, list[Ack]] = {}
    for line in stdout.splitlines():
        value, offset = line.split()
        acks.setdefault(value.rsplit("-", 2)[0], []).append((value, int(offset)))
    return acks


async def produce_across_a_move(
    servers: str,
    ways: dict[str, str],
    gate: ProducerGate,
    topic: str,
    settled: Callable[[], Awaitable[None]] | None = None,
) -> Moved:
    """Every client in every mode through each proxy of ``ways`` (way's name:
    the proxy's bootstrap servers) writes before and after the leader of
    ``topic``'s partition 0 moves; ``gate`` shuts before the move and opens
    once every producer is done; ``settled``, when given, is awaited after the
    move (every broker knows the new leader: a plain producer's batch taken by
    a former leader that had not yet heard of the move, then refused, could be
    written twice). Returns what they were told."""
    tp = TopicPartition(topic, 0)
    sdk: dict[tuple[str, str], Any] = {}
    ck: dict[tuple[str, str], Any] = {}
    moved = Moved(-1, -1)
    with _java(topic, ways) as (java, logs):
        async with contextlib.AsyncExitStack() as stack:
            for way, proxied in ways.items():
                for mode in MODES:
                    name = f"{way}-sdk-{mode}"
                    settings: dict[str, Any] = {
                        "bootstrap_servers": proxied,
                        "client_id": name,
                        "acks": "all",
                        "linger_ms": 5,
                        "metadata_max_age_ms": MAX_AGE_MS,
                        "enable_idempotence": mode != "plain",
                    }
                    if mode == "plain":  # else a retried batch may land after later ones
                        settings["max_in_flight_requests_per_connection"] = 1
                    if mode == "transactional":
                        settings["transactional_id"] = f"{topic}-{name}"
                    sdk[(way, mode)] = await stack.enter_async_context(open_producer(**settings))
                    if mode == "transactional":
                        await sdk[(way, mode)].init_transactions()
                    # In a thread: init_transactions blocks, and the proxy may be on this loop.
                    ck[(way, mode)] = await trio.to_thread.run_sync(
                        _ck_producer, proxied, topic, way, mode
                    )
                    stack.push_async_callback(trio.to_thread.run_sync, _close, ck[(way, mode)])

            async def phase(phase: str) -> None:
                async def one(way: str, mode: str) -> None:
                    acks = await _sdk_phase(sdk[(way, mode)], topic, way, mode, phase)
                    moved.acks.setdefault(f"{way}-sdk-{mode}", []).extend(acks)

                async def confluent() -> None:
                    acks = await trio.to_thread.run_sync(_ck_phase, ck, topic, phase)
                    for name, got in acks.items():
                        moved.acks.setdefault(name, []).extend(got)

                async with trio.open_nursery() as nursery:
                    for way, mode in sdk:
                        nursery.start_soon(one, way, mode)
                    nursery.start_soon(confluent)

            with trio.fail_after(90):
                await phase("before")
                before = await trio.to_thread.run_sync(_ready, java, abandon_on_cancel=True)
                for name, got in _java_acks(before).items():
                    moved.acks.setdefault(name, []).extend(got)
            gate.shut = True
            try:
                with trio.fail_after(120):
                    moved.old, moved.new = await move_leader(servers, tp)
                    if settled is not None:
                        await settled()
                gate.new = moved.new
                with trio.fail_after(90):
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(phase, "after")
                        out = await trio.to_thread.run_sync(_go, java, abandon_on_cancel=True)
            finally:
                await trio.to_thread.run_sync(gate.open)
            code = await trio.to_thread.run_sync(java.wait, 30)
            assert code == 0, (code, _tail(logs))
            for name, got in _java_acks(out).items():
                moved.acks.setdefault(name, []).extend(got)
    return moved


@contextlib.contextmanager
def _java(topic: str, ways: dict[str, str]) -> Iterator[tuple[subprocess.Popen[str], IO[str]]]:
    """HintedProducers running for ``ways``, and the file of its logs (a pipe no
    one reads while it runs would fill); killed on leaving if still running."""
    with tempfile.TemporaryFile("w+") as logs:
        java = subprocess.Popen(
            [*java_command(), topic, str(N), topic, *(f"{w}={s}" for w, s in ways.items())],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=logs,
            text=True,
        )
        try:
            yield java, logs
        finally:
            if java.poll() is None:
                java.kill()
                java.communicate()


def _tail(logs: Any) -> str:
    logs.seek(0)
    return str(logs.read()[-4000:])


def _ck_producer(proxied: str, topic: str, way: str, mode: str) -> Any:
    name = f"{way}-ck-{mode}"
    settings: dict[str, Any] = {
        "bootstrap.servers": proxied,
        "client.id": name,
        "acks": "all",
        "linger.ms": 5,
        "enable.idempotence": mode != "plain",
        "metadata.max.age.ms": MAX_AGE_MS,
        "topic.metadata.refresh.interval.ms": MAX_AGE_MS,
    }
    if mode == "plain":  # else a retried batch may land after later ones
        settings["max.in.flight"] = 1
    if mode == "transactional":
        settings["transactional.id"] = f"{topic}-{name}"
    producer = confluent_kafka.Producer(settings)
    if mode == "transactional":
        producer.init_transactions(60)
    return producer


def _close(producer: Any) -> None:
    """A confluent-kafka producer closed at once (a failed test's would retry on
    the proxy's closed port to the end of the run)."""
    producer.purge()
    producer.close()


def _ready(java: subprocess.Popen[str]) -> str:
    """The JVM's first phase's reports, once it says "ready"."""
    assert java.stdout is not None
    lines = []
    for line in java.stdout:
        if line == "ready\n":
            return "".join(lines)
        lines.append(line)
    java.wait()
    raise AssertionError(f"the JVM ended ({java.returncode}) before its first phase was done")


def _go(java: subprocess.Popen[str]) -> str:
    """Tells the JVM the leader moved; its second phase's reports, once it says
    "ok" (it then closes its producers, which may ask for metadata)."""
    assert java.stdin is not None and java.stdout is not None
    java.stdin.write("moved\n")
    java.stdin.flush()
    lines = []
    for line in java.stdout:
        if line == "ok\n":
            return "".join(lines)
        lines.append(line)
    java.wait()
    raise AssertionError(f"the JVM ended ({java.returncode}) before its second phase was done")


def check_acks(servers: str, topic: str, moved: Moved, ways: Sequence[str]) -> None:
    """Every producer of ``ways`` had every record acknowledged, each read back
    once, at the offset its report named, in the order it was sent."""
    records = placement(servers, topic, 1)
    counts = Counter(r.value.decode() for r in records)
    at = {r.value.decode(): r.offset for r in records}
    for way in ways:
        for client in CLIENTS:
            for mode in MODES:
                name = f"{way}-{client}-{mode}"
                sent = [_value(way, client, mode, p, i) for p in PHASES for i in range(N)]
                acks = moved.acks.get(name, [])
                assert sorted(v for v, _ in acks) == sorted(sent), (name, acks)
                assert [counts[v] for v in sent] == [1] * len(sent), (name, counts)
                assert all(at[v] == offset for v, offset in acks), (name, acks)
                offsets = [at[v] for v in sent]
                assert offsets == sorted(offsets), (name, offsets)


def followed(gate: ProducerGate, moved: Moved, way: str, listeners: dict[int, Any]) -> None:
    """Every producer through the gated proxy ``way`` was passed a refusal
    naming the new leader (KIP-951's ``current_leader``) and then wrote on the
    proxy's listener for it, at Produce v10+; no refusal named another leader
    at the new leader's epoch or later (a broker whose view lags may name the
    former leader at its older epoch, or none, which clients ignore, as they
    may in front of Kafka); every node the answers named was the proxy's
    listener for it."""
    producers = [f"{way}-{c}-{m}" for c in CLIENTS for m in MODES]
    assert sorted(gate.told) == sorted(producers), (moved.old, moved.new, gate.hints)
    late = [p for p in producers if moved.new not in gate.produced_by.get(p, set())]
    assert late == [], (moved.old, moved.new, gate.produced_by)
    assert gate.produce_versions and min(gate.produce_versions) >= 10, gate.produce_versions
    epoch = min(e for _, n, e in gate.hints if n == moved.new)
    assert epoch > 0 and all(n == moved.new or e < epoch for _, n, e in gate.hints), gate.hints
    assert gate.named and all((h, p) == listeners[n] for n, h, p in gate.named), gate.named
