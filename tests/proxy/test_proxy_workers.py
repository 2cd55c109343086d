"""``trafka proxy --workers N`` (issue #46): the rules of :mod:`trafka.proxy.workers`
without sockets, then the command itself in front of an in-process brokerlite,
with librdkafka producers (idempotent and plain) and a consumer through it, a
worker killed -9 and started again, and a clean stop on SIGTERM."""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import confluent_kafka
import pytest
import trio
import trio.testing
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families
from proxy_helpers import INIT_PRODUCER_ID, call, keyed, placement, produce_batch

from trafka.brokerlite.server import broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k03_metadata as mm
from trafka.proxy import ProxyConfig
from trafka.proxy.keyrouting.sync_grace import SyncGrace
from trafka.proxy.keyrouting.worker_lives import MAX_BIRTHS, Births, SupervisorLink
from trafka.proxy.listeners import NamedListener
from trafka.proxy.metrics import merged_exposition
from trafka.proxy.startup import shared_sockets
from trafka.proxy.workers import (
    FIRST_DELAY_S,
    MAX_DELAY_S,
    STABLE_S,
    Backoff,
    check_workers,
    worker_config,
)
from trafka.sdk.partitioners import murmur2_partition

# -- the rules, without sockets ---------------------------------------------------------


def test_each_worker_has_its_own_node_ports_journal_and_metrics() -> None:
    config = ProxyConfig(
        upstream=("kafka:9092",),
        port=19092,
        node_port_base=20000,
        journal_dir="/var/lib/proxy",
        metrics_listen="0.0.0.0:9100",
        announce=True,
    )
    second = worker_config(config, 1, 100, {3: 20103, 7: 31000}, workers=3)
    assert second.reuse_port and second.port == 19092
    assert (second.node_port_base, second.node_port_span) == (20100, 100)
    assert second.journal_dir == "/var/lib/proxy/worker-1"
    # The other workers' journals are read (see test_proxy_journal_peers.py).
    assert second.journal_peer_dirs == ("/var/lib/proxy/worker-0", "/var/lib/proxy/worker-2")
    assert second.metrics_listen == "127.0.0.1:0"  # the supervisor serves 9100
    assert not second.announce
    # The ports it served before a restart come first; the others from its base.
    assert second.node_port(7) == 31000
    assert second.node_port(2) == 20102
    with pytest.raises(ValueError, match="outside the 100 ports from 20100"):
        second.node_port(100)  # would be worker 2's broker 0: a free port instead
    # A named listener's broker ports likewise, from its own base.
    acme = NamedListener("acme", "127.0.0.1", 29092, node_port_base=29093)
    named = worker_config(
        replace(config, listeners=(acme,)), 1, 100, listener_ports={("acme", 4): 31500}, workers=2
    ).listeners[0]
    assert (named.port, named.node_port_base, named.node_port_span) == (29092, 29193, 100)
    assert (named.node_port(4), named.node_port(2)) == (31500, 29195)
    with pytest.raises(ValueError, match="outside the 100 ports from 29193"):
        named.node_port(100)
    # Without a base: free ports (0), and no journal or metrics when not asked.
    plain = worker_config(ProxyConfig(upstream=("kafka:9092",)), 0, 100)
    assert plain.node_port(5) == 0 and plain.node_port_span is None
    assert plain.journal_dir is None and plain.metrics_listen is None
    assert plain.journal_peer_dirs == ()


def test_worker_counts_and_strides_that_cannot_be_served_are_refused() -> None:
    config = ProxyConfig(upstream=("kafka:9092",), node_port_base=65000)
    check_workers(config, 5, 100)  # 65000..65499
    with pytest.raises(ValueError, match="past 65535"):
        check_workers(config, 6, 100)
    with pytest.raises(ValueError, match="workers must be 1 or more"):
        check_workers(config, 0, 100)
    with pytest.raises(ValueError, match="stride"):
        check_workers(config, 2, 0)
    with pytest.raises(ValueError, match="out of range"):
        ProxyConfig(upstream=("kafka:9092",), node_ports=((1, 70000),))
    # Named listeners' spans: within 65535, clear of each other and of every bootstrap port.
    high = NamedListener("acme", "127.0.0.1", 9000, node_port_base=65400)
    with pytest.raises(ValueError, match=r"listener 'acme': 2 workers of 100 .* past 65535"):
        check_workers(replace(config, node_port_base=None, listeners=(high,)), 2, 100)
    own = ProxyConfig(upstream=("kafka:9092",), port=9092, node_port_base=9093)
    check_workers(replace(own, listeners=(NamedListener("a", "h", 9400, 9401),)), 3, 100)
    with pytest.raises(ValueError, match=r"the proxy and listener 'a': .* 9093-9392 and 9301-9600"):
        check_workers(replace(own, listeners=(NamedListener("a", "h", 9300, 9301),)), 3, 100)
    with pytest.raises(ValueError, match="the proxy: the workers' node ports 9093-9392 take"):
        check_workers(replace(own, listeners=(NamedListener("a", "h", 9200),)), 3, 100)


def test_a_worker_that_keeps_dying_is_started_again_ever_more_slowly() -> None:
    backoff = Backoff()
    quick = [backoff.delay(1.0) for _ in range(9)]
    assert quick[:4] == [0.0, FIRST_DELAY_S, 2 * FIRST_DELAY_S, 4 * FIRST_DELAY_S]
    assert quick[-1] == MAX_DELAY_S
    # A run that lasted is not a crash loop: at once again.
    assert backoff.delay(STABLE_S) == 0.0
    assert backoff.delay(1.0) == FIRST_DELAY_S


def test_the_supervisor_answers_yes_only_for_a_birth_after_every_end_seen() -> None:
    """:mod:`trafka.proxy.worker_lives`'s rule, its times injected: a producer
    born through a worker may be synced at once by another only when every
    worker process that ended was seen ended before the birth, and all are
    alive at the answer; whatever is not known is a no."""
    births = Births(started=100.0)
    births.born(1, 0, 99.0)  # before the supervisor started: never a yes
    births.born(2, 0, 101.0)
    births.born(3, 5, 102.0)
    assert not births.answer(1, 0, True, 103.0)
    assert births.answer(2, 0, True, 103.0)
    assert not births.answer(2, 1, True, 103.0)  # another epoch was never born
    assert births.answer(3, 5, True, 103.0)
    births.ended(104.0)  # a worker process seen ended after those births
    assert not births.answer(2, 0, True, 105.0)
    assert not births.answer(3, 5, True, 105.0)
    births.born(3, 5, 104.5)  # passed again (a retried InitProducerId): the first counts
    assert not births.answer(3, 5, True, 105.0)
    births.born(1, 0, 104.5)
    assert not births.answer(1, 0, True, 105.0)
    births.born(4, 0, 103.5)  # a birth told late, older than the end: a no
    births.born(5, 0, 106.0)
    assert not births.answer(4, 0, True, 107.0)
    assert births.answer(5, 0, True, 107.0)
    # A worker found dead at the answer counts as ended then.
    assert not births.answer(5, 0, False, 108.0)
    assert not births.answer(5, 0, True, 109.0)
    for n in range(MAX_BIRTHS + 1):  # the oldest forgotten beyond the cap
        births.born(n, 9, 200.0 + n)
    assert not births.answer(0, 9, True, 1e9)
    assert births.answer(MAX_BIRTHS, 9, True, 1e9)


def test_a_worker_asks_its_supervisor_over_its_pipe_and_never_waits_past_its_bound() -> None:
    """:class:`~trafka.proxy.worker_lives.SupervisorLink` on a real pipe: a
    birth told, a question answered, one unanswered by its bound is a no,
    and the pipe's end stops the worker."""

    async def main() -> None:
        ours, theirs = multiprocessing.Pipe()
        link = SupervisorLink(theirs)
        link.born(7, 1)
        kind, (pid, epoch, at) = ours.recv()
        assert (kind, pid, epoch) == ("born", 7, 1) and at > 0
        gone = trio.CancelScope()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(link.read, gone)

            async def supervisor() -> None:
                await trio.lowlevel.wait_readable(ours.fileno())
                kind, (qid, pid, epoch) = ours.recv()
                assert (kind, pid, epoch) == ("born_alive", 7, 1)
                ours.send(("born_alive", (qid, True)))

            nursery.start_soon(supervisor)
            assert await link.born_alive(7, 1, trio.current_time() + 60)
            start = trio.current_time()
            assert not await link.born_alive(8, 0, start + 5)  # not answered
            assert trio.current_time() == start + 5
            ours.recv()  # the unanswered question
            ours.close()
        assert gone.cancel_called

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


class _Siblings:
    """A supervisor that answers ``yes`` after ``delay`` seconds (trio's clock)."""

    def __init__(self, yes: bool, delay: float = 0.0) -> None:
        self.yes, self.delay, self.asked, self.told = yes, delay, 0, 0

    def born(self, producer_id: int, epoch: int) -> None:
        self.told += 1

    async def born_alive(self, producer_id: int, epoch: int, until: float) -> bool:
        self.asked += 1
        with trio.move_on_at(until):
            await trio.sleep(self.delay)
            return self.yes
        return False


def test_a_worker_in_its_grace_syncs_a_sibling_born_producer_at_once() -> None:
    """Within its restart's grace a worker asks the supervisor about a producer
    it did not see born: a yes syncs it at once; a no, or an answer that does
    not come before the grace's end, waits the grace as before, never longer;
    after the grace nothing is asked."""

    async def main() -> None:
        yes = _Siblings(True, delay=0.5)
        await SyncGrace(10.0, yes).before_sync(1, 0, False, 100.0)
        assert trio.current_time() == 0.5  # one round trip to the supervisor
        no = _Siblings(False)
        await SyncGrace(10.0, no).before_sync(1, 0, False, 100.0)
        assert trio.current_time() == 10.5
        silent = _Siblings(True, delay=1000.0)
        await SyncGrace(10.0, silent).before_sync(1, 0, False, 100.0)
        assert trio.current_time() == 20.5
        grace = SyncGrace(10.0, yes)
        # Yes lifts the restart's grace only: a producer another proxy routed
        # (its placements journaled) still waits a failover's grace.
        await grace.before_sync(2, 0, True, 100.0)
        assert trio.current_time() == 30.5  # from its first sync, at 20.5
        await grace.before_sync(3, 0, False, 100.0)  # after the grace: not asked
        assert yes.asked == 2

    trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def _samples(page: bytes) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(page.decode())
        for s in family.samples
    }


def test_the_workers_metrics_are_one_exposition_labelled_by_worker() -> None:
    def page(produce: int) -> bytes:
        return (
            "# HELP trafka_proxy_requests Client requests, per API.\n"
            "# TYPE trafka_proxy_requests counter\n"
            f'trafka_proxy_requests_total{{request="Produce"}} {produce}\n'
            "# HELP trafka_proxy_connections_open Client connections open.\n"
            "# TYPE trafka_proxy_connections_open gauge\n"
            "trafka_proxy_connections_open 2\n"
        ).encode()

    merged = merged_exposition(
        {0: page(5), 1: page(7), 2: None}, {0: True, 1: True, 2: False}, {2: 3}
    )
    samples = _samples(merged)

    def at(name: str, **labels: str) -> float:
        return samples[(name, frozenset(labels.items()))]

    assert at("trafka_proxy_requests_total", request="Produce", worker="0") == 5
    assert at("trafka_proxy_requests_total", request="Produce", worker="1") == 7
    assert at("trafka_proxy_connections_open", worker="1") == 2
    assert not any(("worker", "2") in labels for (name, labels) in samples if "requests" in name)
    assert [at("trafka_proxy_worker_up", worker=w) for w in "012"] == [1, 1, 0]
    assert at("trafka_proxy_worker_restarts_total", worker="2") == 3
    # One HELP and TYPE per family (Prometheus refuses a second).
    assert merged.count(b"# TYPE trafka_proxy_requests_total counter") == 1


def test_a_shared_port_is_held_by_the_supervisor_and_served_by_every_worker() -> None:
    held = shared_sockets("127.0.0.1", 0, listen=False)
    port = held[0].getsockname()[1]
    workers = [shared_sockets("127.0.0.1", port)[0] for _ in range(2)]
    try:
        # A program that does not share it cannot take it.
        with socket.socket() as other, pytest.raises(OSError):
            other.bind(("127.0.0.1", port))
        # The held socket is not listening: every connection reaches a worker.
        clients = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(8)]
        accepted = 0
        for listener in workers:
            listener.setblocking(False)
            while True:
                try:
                    listener.accept()[0].close()
                except BlockingIOError:
                    break
                accepted += 1
        assert accepted == 8
        for client in clients:
            client.close()
    finally:
        for sock in [*held, *workers]:
            sock.close()


# -- the command ------------------------------------------------------------------------

TOPIC = "workers"
PARTITIONS = 6
PER_CLIENT = 300


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class ProxyProcess:
    """``trafka proxy --workers 2`` (``command``) in a process of its own, its
    log in ``log``; returns once every worker serves."""

    def __init__(self, command: list[str], log: Path) -> None:
        self.log = log
        with self.log.open("wb") as out:
            self.proc = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
        self.wait_for(r"proxy on 127\.0\.0\.1:\d+ for .* \(2 workers\)")

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def wait_for(self, pattern: str, timeout: float = 120) -> re.Match[str]:
        deadline = time.monotonic() + timeout
        while (found := re.search(pattern, self.text())) is None:
            assert self.proc.poll() is None, self.text()
            assert time.monotonic() < deadline, f"no {pattern!r} in:\n{self.text()}"
            time.sleep(0.1)
        return found

    def pids(self) -> dict[int, int]:
        """Each worker's process now (the last one started)."""
        return {
            int(k): int(p) for k, p in re.findall(r"worker (\d) started \(pid (\d+)\)", self.text())
        }

    def every_pid(self) -> list[int]:
        """Every worker process started."""
        return [int(p) for p in re.findall(r"worker \d started \(pid (\d+)\)", self.text())]

    def close(self) -> None:
        """SIGTERM if it still runs, SIGKILL if that does not stop it."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Supervisor(ProxyProcess):
    """``trafka proxy --workers 2`` in front of ``upstream``, with metrics."""

    def __init__(
        self, tmp_path: Path, upstream: str, journal: tuple[str, ...] | None = None
    ) -> None:
        """``journal``: the proxy's journal options (default: ``--journal DIR``)."""
        self.port, self.metrics_port = _free_port(), _free_port()
        command = [
            sys.executable, "-m", "trafka.tools.cli", "proxy", "--upstream", upstream,
            "--listen", f"127.0.0.1:{self.port}", "--no-announce", "--workers", "2",
            "--metrics-listen", f"127.0.0.1:{self.metrics_port}",
        ]  # fmt: skip
        command += ("--journal", str(tmp_path / "journal")) if journal is None else journal
        super().__init__(command, tmp_path / "proxy.log")

    def metrics(self) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
        url = f"http://127.0.0.1:{self.metrics_port}/metrics"
        with urllib.request.urlopen(url, timeout=30) as answer:
            return _samples(answer.read())

    def produce_requests(self) -> dict[str, float]:
        return {
            dict(labels)["worker"]: value
            for (name, labels), value in self.metrics().items()
            if name == "trafka_proxy_requests_total" and ("request", "Produce") in labels
        }


class Client:
    """A librdkafka producer through the proxy, with its delivery reports."""

    def __init__(self, servers: str, n: int) -> None:
        self.n = n
        self.idempotent = n % 2 == 0
        self.failures: list[Any] = []
        self.delivered = 0
        self.producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": servers,
                "client.id": f"workers-{n}",
                "enable.idempotence": self.idempotent,
                "acks": "all" if self.idempotent else 1,
                "linger.ms": 5,
                "reconnect.backoff.max.ms": 500,
                "message.timeout.ms": 120_000,
            }
        )

    def produce(self, phase: int) -> None:
        for i in range(PER_CLIENT):
            self.producer.produce(
                TOPIC,
                value=b"%d-%d-%d" % (phase, self.n, i),
                key=b"key-%d" % (i % 29),
                on_delivery=self._report,
            )
        assert self.producer.flush(150) == 0
        assert self.failures == []

    def _report(self, err: Any, _msg: Any) -> None:
        if err:
            self.failures.append(err)
        else:
            self.delivered += 1


def _read_all(servers: str, expected: int) -> list[Any]:
    """Every record of the topic, read through ``servers`` by a librdkafka consumer."""
    consumer = confluent_kafka.Consumer(
        {"bootstrap.servers": servers, "group.id": "workers-check", "enable.auto.commit": False}
    )
    out: list[Any] = []
    try:
        consumer.assign([confluent_kafka.TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 120
        while len(out) < expected and time.monotonic() < deadline:
            for message in consumer.consume(500, 1.0):
                assert message.error() is None, message.error()
                out.append(message)
    finally:
        consumer.close()
    return out


def _check_placed(records: list[Any], expected: set[bytes]) -> None:
    """Every record once, on the murmur2 partition of its key."""
    values = Counter(m.value() for m in records)
    assert set(values) == expected, (len(values), len(expected))
    assert [v for v, n in values.items() if n > 1] == []
    wrong = [m for m in records if m.partition() != murmur2_partition(m.key(), PARTITIONS)]
    assert wrong == []


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_workers_route_every_record_once_and_survive_a_kill(tmp_path: Path) -> None:
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path / "broker") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        # The restarted worker holds the idempotent clients' next writes for its
        # restart's grace (they were born before a worker ended, so the
        # supervisor cannot lift it): 1 s, not the 5 s default, as every write of
        # the killed worker was answered before the kill.
        grace = ("--journal", str(tmp_path / "journal"), "--journal-takeover-grace-ms", "1000")
        proxy = Supervisor(tmp_path, broker.bootstrap_servers, grace)
        servers = f"127.0.0.1:{proxy.port}"
        clients: list[Client] = []
        try:
            # The kernel places each client's bootstrap connection: clients come
            # until both workers have served Produce requests (at least two of
            # each kind; the chance that 40 all reach one worker is 2**-39).
            while len(clients) < 4 or len(proxy.produce_requests()) < 2:
                assert len(clients) < 40, proxy.produce_requests()
                client = Client(servers, len(clients))
                clients.append(client)
                client.produce(1)
            expected = {b"1-%d-%d" % (c.n, i) for c in clients for i in range(PER_CLIENT)}
            _check_placed(_read_all(servers, len(expected)), expected)

            # A worker that served clients is killed -9; the supervisor starts it
            # again on the ports its clients know, and they carry on.
            served = proxy.produce_requests()
            victim = max(served, key=lambda w: served[w])
            pid = proxy.pids()[int(victim)]
            port = proxy.wait_for(rf"\[worker {victim}\] broker \d+ .* served on port (\d+)")[1]
            os.kill(pid, signal.SIGKILL)
            ended = rf"worker {victim} \(pid {pid}\) ended \(signal SIGKILL\)"
            # Started again, it serves the broker on its old port at once.
            proxy.wait_for(ended + rf"[\s\S]*\[worker {victim}\] proxy on")
            proxy.wait_for(ended + rf"[\s\S]*\[worker {victim}\] broker \d+ .* port {port}\b")
            assert proxy.pids()[int(victim)] != pid
            for client in clients:
                client.produce(2)
            samples = proxy.metrics()
            assert (
                samples[("trafka_proxy_worker_restarts_total", frozenset({("worker", victim)}))]
                == 1
            )
            assert samples[("trafka_proxy_worker_up", frozenset({("worker", victim)}))] == 1

            expected |= {b"2-%d-%d" % (c.n, i) for c in clients for i in range(PER_CLIENT)}
            _check_placed(_read_all(servers, len(expected)), expected)
            assert all(c.delivered == 2 * PER_CLIENT for c in clients)
            del clients[:]  # their connections close before the proxy stops

            # SIGTERM to the supervisor: every worker stops cleanly, the port is free.
            workers = proxy.pids()
            proxy.proc.send_signal(signal.SIGTERM)
            assert proxy.proc.wait(60) == 0, proxy.text()
            text = proxy.text()
            assert "proxy stopped" in text
            for k in workers:
                assert f"[worker {k}] received SIGTERM, shutting down" in text
                assert f"[worker {k}] worker stopped" in text
            for pid in workers.values():
                with pytest.raises(ProcessLookupError):
                    os.kill(pid, 0)
            with socket.socket() as s:
                s.bind(("127.0.0.1", proxy.port))
        finally:
            if proxy.proc.poll() is None:
                proxy.proc.kill()
                proxy.proc.wait()


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "trafka.tools.cli", "proxy", "--no-announce", *args]


def test_a_worker_that_cannot_start_stops_the_proxy_with_its_error(tmp_path: Path) -> None:
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    done = subprocess.run(
        _cli(
            "--upstream",
            "127.0.0.1:1",
            "--listen",
            "127.0.0.1:0",
            "--workers",
            "2",
            "--journal",
            str(not_a_dir),
        ),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr
    assert re.search(
        r"Error: cannot start the proxy: worker \d: cannot open the journal", done.stderr
    )
    for pid in re.findall(r"worker \d started \(pid (\d+)\)", done.stderr):
        with pytest.raises(ProcessLookupError):
            os.kill(int(pid), 0)
    # The supervisor's lines and each worker's say when, as brokerlite's do.
    when = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}"
    assert re.search(rf"^{when} INFO trafka\.proxy: worker \d started", done.stderr, re.M)
    assert re.search(rf"^{when} ERROR trafka\.proxy: \[worker \d\] cannot start", done.stderr, re.M)


def test_the_workers_stop_when_their_supervisor_is_killed(tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            _cli("--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--workers", "2"),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "(2 workers)" not in log.read_text():
            assert proc.poll() is None, log.read_text()
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        proc.kill()
        proc.wait()
        while log.read_text().count("worker stopped") < 2:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert log.read_text().count("the supervisor is gone: stopping") == 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _node_port(sock: socket.socket) -> int:
    """The broker port the worker holding ``sock`` names (each worker names its own)."""
    md = mm.MetadataRequest
    answer = call(sock, 3, 9, md(topics=[md.MetadataRequestTopic(name=TOPIC)]))
    port: int = answer.brokers[0].port
    return port


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_init_producer_id_answered_by_another_worker_costs_nothing_but_a_round_trip(
    tmp_path: Path,
) -> None:
    """The module's ownership rule: an idempotent producer whose InitProducerId
    went through one worker (on a bootstrap connection) and whose Produce
    requests reach another is served by the second from sequence 0, which asks
    the leader (DescribeProducers) first: every record once, on its murmur2
    partition. Its worker is in its restart's grace (an hour here): the
    supervisor saw no worker end since the producer's birth, so it is not held
    (:mod:`trafka.proxy.worker_lives`), and its Produce requests (1 s timeout)
    are written. Then that worker is killed -9, having written for a second
    producer born on the other worker: started again, it holds that
    producer's next batch (the killed instance may have left writes in the
    network), answered REQUEST_TIMED_OUT with nothing written."""
    grace = ("--journal", str(tmp_path / "journal"), "--journal-takeover-grace-ms", "3600000")
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path / "broker") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        proxy = Supervisor(tmp_path, broker.bootstrap_servers, grace)
        by_port: dict[int, socket.socket] = {}
        try:
            # The kernel places bootstrap connections: open them until two workers answer.
            for _ in range(40):
                sock = socket.create_connection(("127.0.0.1", proxy.port), timeout=30)
                port = _node_port(sock)
                if port in by_port:
                    sock.close()
                    continue
                by_port[port] = sock
                if len(by_port) == 2:
                    break
            assert len(by_port) == 2, "40 bootstrap connections all reached one worker"
            (first_port, _), (_, second) = by_port.items()
            born, other = (call(second, 22, 4, INIT_PRODUCER_ID) for _ in range(2))
            assert born.error_code == other.error_code == 0
            sent = keyed(90, keys=29)
            with socket.create_connection(("127.0.0.1", first_port), timeout=30) as leader:
                for seq in (0, 30):
                    assert produce_batch(leader, TOPIC, born, sent[seq : seq + 30], seq) == [0]
                assert produce_batch(leader, TOPIC, other, sent[60:90], 0) == [0]
            records = placement(broker.bootstrap_servers, TOPIC, PARTITIONS)
            assert sorted(r.value for r in records) == sorted(v for _, _, v, _ in sent)
            assert all(r.partition == murmur2_partition(r.key, PARTITIONS) for r in records)
            # The worker that answered the InitProducerId wrote none of them.
            served = proxy.produce_requests()
            assert list(served.values()) == [3], served
            # The producers' worker is killed -9 and started again on its port.
            k = int(
                proxy.wait_for(rf"\[worker (\d)\] broker \d+ .* served on port {first_port}")[1]
            )
            os.kill(proxy.pids()[k], signal.SIGKILL)
            proxy.wait_for(rf"(?s)served on port {first_port}\n.*served on port {first_port}\n")
            with socket.create_connection(("127.0.0.1", first_port), timeout=30) as leader:
                more = [(t, key, b"more-" + v, h) for t, key, v, h in keyed(10, keys=29)]
                assert _node_port(leader) == first_port  # it learns the topic
                assert produce_batch(leader, TOPIC, other, more, 30) == [
                    ErrorCode.REQUEST_TIMED_OUT
                ]
            records = placement(broker.bootstrap_servers, TOPIC, PARTITIONS)
            assert sorted(r.value for r in records) == sorted(v for _, _, v, _ in sent)
        finally:
            for sock in by_port.values():
                sock.close()
            proxy.close()


# -- supervision under misuse: real processes, the supervisor's timings injected --------

# ``trafka proxy`` with settings of the supervisor replaced (argv: NAME=VALUE
# pairs for trafka.proxy.workers, "--", then the command's arguments).
_INJECTED = """
import sys
from trafka.proxy import cli, workers
cut = sys.argv.index("--")
for pair in sys.argv[1:cut]:
    name, value = pair.split("=")
    setattr(workers, name, type(getattr(workers, name))(value))
cli.command.main(sys.argv[cut + 1:], prog_name="trafka proxy")
"""


class Injected(ProxyProcess):
    """``trafka proxy --workers 2 --journal DIR`` (upstream nowhere: workers
    start without it) with the supervisor's ``settings`` injected."""

    def __init__(self, tmp_path: Path, **settings: float) -> None:
        self.journal = tmp_path / "journal"
        args = [*(f"{k}={v}" for k, v in settings.items()), "--", "--no-announce",
                "--upstream", "127.0.0.1:1", "--listen", "127.0.0.1:0", "--workers", "2",
                "--journal", str(self.journal)]  # fmt: skip
        super().__init__([sys.executable, "-c", _INJECTED, *args], tmp_path / "proxy.log")

    def break_worker(self, k: int) -> int:
        """Make worker ``k`` unable to start again (its journal directory becomes
        a file), then kill it -9; its pid."""
        pid = self.pids()[k]
        directory = self.journal / f"worker-{k}"
        for f in directory.iterdir():
            f.unlink()
        directory.rmdir()
        directory.write_text("")
        os.kill(pid, signal.SIGKILL)
        return pid


def _gone(pids: list[int]) -> bool:
    for pid in pids:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            continue
        return False
    return True


def test_a_worker_that_keeps_failing_to_start_again_stops_the_proxy(tmp_path: Path) -> None:
    """Not restarted for ever: after a doubling back-off, the given number of
    failed starts in a row stop the proxy with the worker's error, exit code 1;
    the other worker stops cleanly."""
    proxy = Injected(tmp_path, FIRST_DELAY_S=0.01, MAX_DELAY_S=0.04, MAX_START_FAILURES=4)
    try:
        pid = proxy.break_worker(1)
        assert proxy.proc.wait(120) == 1, proxy.text()
        text = proxy.text()
        assert f"worker 1 (pid {pid}) ended (signal SIGKILL); starting it again\n" in text
        # Three failed starts started again, ever later (capped), the fourth not.
        delays = re.findall(
            r"worker 1 \(pid \d+\) ended \(exit code 1\); starting it again in (\S+) s", text
        )
        assert delays == ["0.01", "0.02", "0.04"]
        assert text.count("[worker 1] cannot start: cannot open the journal") == 4
        assert "worker 1 failed to start 4 times in a row" in text
        assert re.search(
            r"Error: the proxy stopped: worker 1: cannot open the journal .* "
            r"\(started again, it failed 4 times in a row\)",
            text,
        )
        assert "[worker 0] received SIGTERM, shutting down" in text
        assert "[worker 0] worker stopped" in text
        assert _gone(proxy.every_pid())
    finally:
        proxy.proc.kill()
        proxy.proc.wait()


def test_sigterm_while_a_worker_waits_to_be_started_again(tmp_path: Path) -> None:
    """SIGTERM during a restart's back-off (an hour, injected): the proxy stops
    at once, cleanly, the waiting worker not started again."""
    proxy = Injected(tmp_path, FIRST_DELAY_S=3600, MAX_DELAY_S=3600)
    try:
        proxy.break_worker(1)
        proxy.wait_for(r"worker 1 \(pid \d+\) ended \(exit code 1\); starting it again in 3600 s")
        started = len(proxy.every_pid())
        proxy.proc.send_signal(signal.SIGTERM)
        assert proxy.proc.wait(60) == 0, proxy.text()
        text = proxy.text()
        assert "received SIGTERM, shutting down" in text and "proxy stopped" in text
        assert "[worker 0] worker stopped" in text
        assert len(proxy.every_pid()) == started
        assert _gone(proxy.every_pid())
    finally:
        proxy.proc.kill()
        proxy.proc.wait()


def test_a_worker_that_does_not_stop_in_time_is_killed(tmp_path: Path) -> None:
    """SIGTERM to the supervisor with a worker that cannot act on it (stopped:
    SIGSTOP): after the stop timeout (injected short) it is killed, and the
    proxy stops, exit 0."""
    proxy = Injected(tmp_path, STOP_TIMEOUT_S=0.5)
    try:
        stuck = proxy.pids()[1]
        os.kill(stuck, signal.SIGSTOP)
        proxy.proc.send_signal(signal.SIGTERM)
        assert proxy.proc.wait(60) == 0, proxy.text()
        text = proxy.text()
        assert "worker 1 did not stop in time: killing it" in text
        assert "[worker 0] worker stopped" in text and "[worker 1] worker stopped" not in text
        assert "proxy stopped" in text
        assert _gone(proxy.every_pid())
    finally:
        proxy.proc.kill()
        proxy.proc.wait()


def _listener_metadata(port: int) -> set[int]:
    """The broker ports a Metadata answer on ``127.0.0.1:port`` names."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        md = mm.MetadataRequest
        answer = call(sock, 3, 9, md(topics=[md.MetadataRequestTopic(name=TOPIC)]))
        return {b.port for b in answer.brokers}


@pytest.mark.timeout(300)
def test_a_named_listener_is_served_by_every_worker_on_ports_of_its_own(tmp_path: Path) -> None:
    """Named listeners with ``--workers`` (trafka.proxy.listeners' and
    workers' rules): each worker serves the listener's bootstrap port (port 0:
    chosen once, by the supervisor) and names, on its connections, broker
    ports of its own for that listener, which name themselves again; a worker
    killed -9 is started again on the listener's broker ports it served, and a
    producer through the listener writes every record once."""
    with broker_in_thread(port=0, host="127.0.0.1", data_dir=tmp_path / "broker") as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        admin.create_topics([NewTopic(TOPIC, PARTITIONS, 1)])[TOPIC].result(30)
        port = _free_port()
        proxy = ProxyProcess(
            _cli("--upstream", broker.bootstrap_servers, "--listen", f"127.0.0.1:{port}",
                 "--workers", "2", "--listeners", "acme=127.0.0.1:0"),
            tmp_path / "proxy.log",
        )  # fmt: skip
        try:
            at = {
                int(p) for p in re.findall(r"\] listener acme on 127\.0\.0\.1:(\d+)", proxy.text())
            }
            assert len(at) == 1, proxy.text()  # both workers on the one port
            bootstrap = at.pop()
            # The kernel places each connection: ask until both workers answered.
            named: dict[int, int] = {}  # a listener broker port -> its worker
            for _ in range(40):
                (broker_port,) = _listener_metadata(bootstrap)
                line = (
                    rf"\[worker (\d)\] broker \d+ is served on port {broker_port} for listener acme"
                )
                named[broker_port] = int(proxy.wait_for(line)[1])
                if len(named) == 2:
                    break
            assert sorted(named.values()) == [0, 1], named
            own = re.findall(r"broker \d+ \(.*\) is served on port (\d+)", proxy.text())
            assert own and not set(named) & {int(p) for p in own} and bootstrap != port
            for broker_port in named:  # each names itself: its clients stay with it
                assert _listener_metadata(broker_port) == {broker_port}

            victim_port, victim = next(iter(named.items()))
            # Once the supervisor knows the port, a restart serves it again.
            proxy.wait_for(rf"worker {victim} serves broker \d+ on port {victim_port} for listener")
            pid = proxy.pids()[victim]
            os.kill(pid, signal.SIGKILL)
            ended = rf"worker {victim} \(pid {pid}\) ended \(signal SIGKILL\)"
            proxy.wait_for(
                ended + rf"[\s\S]*\[worker {victim}\] broker \d+ is served on port {victim_port} "
                "for listener acme"
            )
            assert _listener_metadata(victim_port) == {victim_port}

            client = Client(f"127.0.0.1:{bootstrap}", 0)  # idempotent
            client.produce(1)
            expected = {b"1-0-%d" % i for i in range(PER_CLIENT)}
            _check_placed(_read_all(f"127.0.0.1:{bootstrap}", len(expected)), expected)
        finally:
            proxy.close()
