"""``trafka cluster``: every node its own process, controlled from another terminal.

The command runs as a user runs it (``python -m trafka.tools.cli cluster``, with
its private ZooKeeper), and the test acts as the operator: it reads the pids the
command prints, ``kill -9``s the partition leader's process, and drives
``trafka cluster node stop|start|kill|list`` as separate processes. A
confluent-kafka (librdkafka) producer with ``acks=all`` and idempotence writes
throughout; every record it had acknowledged is read back afterwards. Kafka's
rule this relies on: with RF 3 and ``min.insync.replicas=2`` an acknowledged
record survives the loss of any one broker (docs: ``min.insync.replicas``,
https://kafka.apache.org/documentation/#brokerconfigs_min.insync.replicas).

Every wait is bounded (:func:`wait_for`); nothing is timed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from terminal_sigint import sigint_as_at_a_terminal

from trafka.brokerlite.dev.supervisor import STATE_FILE, ControlError, control
from trafka.brokerlite.dev.zookeeper_server import zookeeper_available
from trafka.brokerlite.storage.partition import CLEAN_SHUTDOWN_FILE

WAIT_S = 60.0
TOPIC = "orders"
PARTITIONS = 3

_T = TypeVar("_T")

needs_zookeeper = pytest.mark.skipif(
    not zookeeper_available(), reason="ZooKeeper not found (apt-get install zookeeper)"
)


def wait_for(what: str, probe: Callable[[], _T | None], timeout: float = WAIT_S) -> _T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def trafka(*args: str, timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "trafka.tools.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, reaped or not, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


class Supervisor:
    """``trafka cluster`` in a child process, its stdout and stderr collected."""

    def __init__(self, data_dir: Path, *args: str) -> None:
        self.data_dir = data_dir
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "trafka.tools.cli",
                "cluster",
                "--nodes",
                "3",
                "--data-dir",
                str(data_dir),
                "--session-timeout-ms",
                "3000",
                "--num-partitions",
                str(PARTITIONS),
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            # The supervisor keeps an ignored SIGINT ignored, on purpose.
            preexec_fn=sigint_as_at_a_terminal,
        )
        self.out: list[str] = []
        self.err: list[str] = []
        self._lock = threading.Lock()
        for stream, lines in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._pump, args=(stream, lines), daemon=True).start()

    def _pump(self, stream: Any, lines: list[str]) -> None:
        for line in stream:
            with self._lock:
                lines.append(line.rstrip("\n"))

    def stdout(self) -> str:
        with self._lock:
            return "\n".join(self.out)

    def stderr(self) -> str:
        with self._lock:
            return "\n".join(self.err)

    def started(self) -> dict[str, Any]:
        """What the command printed once up: ZooKeeper's pid, each node's address and pid."""

        def ready() -> str | None:
            if self.proc.poll() is not None:
                raise AssertionError(f"trafka cluster exited: {self.stderr()}")
            text = self.stdout()
            return text if "bootstrap servers:" in text else None

        text = wait_for("trafka cluster to start", ready, 120.0)
        nodes = {
            int(m[1]): (m[2], int(m[3]))
            for m in re.finditer(r"^node (\d+): (\S+) pid (\d+)$", text, re.M)
        }
        zk = re.search(r"ZooKeeper at \S+ \(pid (\d+)\)", text)
        assert zk is not None, text
        bootstrap = re.search(r"^bootstrap servers: (\S+)$", text, re.M)
        assert bootstrap is not None, text
        return {"nodes": nodes, "zookeeper_pid": int(zk[1]), "bootstrap": bootstrap[1]}

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture
def supervisor(tmp_path: Path) -> Iterator[Supervisor]:
    running = Supervisor(tmp_path / "cluster")
    try:
        yield running
    finally:
        running.stop()


def partition_state(admin: Any, partition: int) -> tuple[int, list[int]] | None:
    """(leader, ISR) of ``orders``/``partition`` as confluent-kafka's metadata says."""
    try:
        meta = admin.list_topics(TOPIC, timeout=5)
    except Exception:
        return None
    topic = meta.topics.get(TOPIC)
    if topic is None or topic.error is not None or partition not in topic.partitions:
        return None
    state = topic.partitions[partition]
    return (state.leader, list(state.isrs)) if state.leader >= 0 else None


class Writer:
    """An idempotent ``acks=all`` producer writing numbered records until stopped."""

    def __init__(self, bootstrap: str) -> None:
        from confluent_kafka import Producer

        self.acked: set[bytes] = set()
        self.failed: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "acks": "all",
                "enable.idempotence": True,
                "linger.ms": 5,
                "message.timeout.ms": 120000,
            }
        )
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _delivered(self, err: Any, msg: Any) -> None:
        if err is None:
            self.acked.add(msg.value())
        else:
            self.failed.append(str(err))

    def _run(self) -> None:
        seq = 0
        while not self._stop.is_set():
            self._producer.produce(
                TOPIC, b"value-%d" % seq, key=b"key-%d" % (seq % 11), on_delivery=self._delivered
            )
            seq += 1
            # Paced, so that what is read back stays small; poll serves the callbacks.
            self._producer.poll(0.01)

    def count(self) -> int:
        return len(self.acked)

    def finish(self) -> None:
        self._stop.set()
        self._thread.join(30)
        assert self._producer.flush(120) == 0, "records still unacknowledged"


def read_all(
    bootstrap: str, expected: set[bytes], security: dict[str, str] | None = None
) -> set[bytes]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            **(security or {}),
            "bootstrap.servers": bootstrap,
            "group.id": "audit",
            "enable.auto.commit": False,
        }
    )
    seen: set[bytes] = set()
    try:
        consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        deadline = time.monotonic() + WAIT_S
        while not expected <= seen and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is not None and msg.error() is None:
                seen.add(msg.value())
    finally:
        consumer.close()
    return seen


def node_list(data_dir: Path) -> dict[int, dict[str, Any]]:
    """``trafka cluster node list``'s answer, asked in this process (the command line
    costs seconds to start: it is run where its output is what is tested)."""
    return {n["id"]: n for n in control(data_dir, "list")["nodes"]}


@needs_zookeeper
@pytest.mark.slow
def test_nodes_are_processes_killed_stopped_and_restarted(supervisor: Supervisor) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    started = supervisor.started()
    nodes = started["nodes"]
    bootstrap = started["bootstrap"]
    pids = {pid for _, pid in nodes.values()}
    assert sorted(nodes) == [1, 2, 3]
    assert len(pids) == 3 and supervisor.proc.pid not in pids
    assert all(alive(pid) for pid in pids)
    assert {n["pid"] for n in node_list(supervisor.data_dir).values()} == pids

    admin = AdminClient({"bootstrap.servers": bootstrap})
    created = admin.create_topics(
        [NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"})]
    )
    created[TOPIC].result(timeout=WAIT_S)
    leader, _ = wait_for("a leader of partition 0", lambda: partition_state(admin, 0))

    writer = Writer(bootstrap)
    wait_for("acknowledged records", lambda: writer.count() >= 200 or None)

    # kill -9 of the leader's process, as an operator would: the supervisor reports
    # it, another node leads, the writer keeps being acknowledged.
    os.kill(nodes[leader][1], signal.SIGKILL)
    wait_for(
        "the supervisor to report the dead node",
        lambda: (
            f"node {leader} (pid {nodes[leader][1]}) exited: killed by SIGKILL"
            in supervisor.stderr()
            or None
        ),
    )

    def moved() -> tuple[int, list[int]] | None:
        state = partition_state(admin, 0)
        return state if state is not None and leader not in (state[0], *state[1]) else None

    wait_for("another leader of partition 0, the dead node out of the ISR", moved)
    listed = node_list(supervisor.data_dir)
    assert listed[leader]["state"] == "exited" and listed[leader]["pid"] is None
    assert listed[leader]["last_exit"] == "killed by SIGKILL"
    before = writer.count()
    wait_for("writes acknowledged without the old leader", lambda: writer.count() > before or None)

    # node start brings it back, with its id and port, into the ISR.
    done = trafka("cluster", "node", "start", str(leader), "--data-dir", str(supervisor.data_dir))
    assert done.returncode == 0, done.stderr
    listed = node_list(supervisor.data_dir)
    assert listed[leader]["state"] == "running"
    assert listed[leader]["address"] == nodes[leader][0]
    assert listed[leader]["pid"] not in pids and alive(listed[leader]["pid"])

    def rejoined() -> tuple[int, list[int]] | None:
        state = partition_state(admin, 0)
        return state if state is not None and leader in state[1] else None

    wait_for("the restarted node back in the ISR", rejoined)

    writer.finish()
    assert writer.failed == []
    seen = read_all(bootstrap, writer.acked)
    assert writer.acked - seen == set()

    # node stop is a clean shutdown (exit status 0); node kill is SIGKILL.
    other, third = (n for n in nodes if n != leader)
    done = trafka("cluster", "node", "stop", str(other), "--data-dir", str(supervisor.data_dir))
    assert done.returncode == 0, done.stderr
    assert not alive(nodes[other][1])
    with pytest.raises(ControlError, match=f"node {other} is not running"):
        control(supervisor.data_dir, "stop", other)
    done = trafka("cluster", "node", "kill", str(third), "--data-dir", str(supervisor.data_dir))
    assert done.returncode == 0, done.stderr
    done = trafka("cluster", "node", "list", "--data-dir", str(supervisor.data_dir))
    assert done.returncode == 0, done.stderr
    rows = {int(line.split()[0]): line.split() for line in done.stdout.splitlines()[1:]}
    assert rows[other][1:3] == ["stopped", "-"] and rows[other][4:] == ["exit", "status", "0"]
    assert rows[third][1:3] == ["killed", "-"] and rows[third][4:] == ["killed", "by", "SIGKILL"]
    assert rows[leader][1] == "running"
    control(supervisor.data_dir, "start", other)
    assert node_list(supervisor.data_dir)[other]["state"] == "running"

    # SIGINT to the supervisor: exit 130, and no node or ZooKeeper left running.
    children = {n["pid"] for n in node_list(supervisor.data_dir).values()}
    children.add(started["zookeeper_pid"])
    supervisor.proc.send_signal(signal.SIGINT)
    assert supervisor.proc.wait(60) == 130, supervisor.stderr()
    assert [pid for pid in children if alive(pid)] == []
    assert not (supervisor.data_dir / STATE_FILE).exists()
    # The running nodes, stopped together, each made a clean shutdown: every
    # partition log of theirs holds its clean-shutdown marker, where the node
    # killed above left none (it never closed its logs).
    for node in (leader, other, third):
        logs = [
            d
            for d in (supervisor.data_dir / f"node-{node}").iterdir()
            if d.is_dir() and re.fullmatch(r".+-\d+", d.name)
        ]
        marked = [d.name for d in logs if (d / CLEAN_SHUTDOWN_FILE).exists()]
        expected = [] if node == third else sorted(d.name for d in logs)
        assert logs and sorted(marked) == expected, (node, marked)


def test_node_control_without_a_cluster(tmp_path: Path) -> None:
    done = trafka("cluster", "node", "list", "--data-dir", str(tmp_path))
    assert done.returncode == 1
    assert f"no cluster runs with data directory {tmp_path}" in done.stderr
    # A state file left by a supervisor that died is recognised as stale.
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / STATE_FILE).write_text(
        json.dumps({"supervisor_pid": dead.pid, "control_port": 1, "token": "x"})
    )
    with pytest.raises(ControlError, match="is stale"):
        control(tmp_path, "list")


def test_control_refuses_a_wrong_token(tmp_path: Path) -> None:
    """The control port answers only requests that carry the state file's token."""
    import trio

    from trafka.brokerlite.dev.local_cluster import ClusterProcesses
    from trafka.brokerlite.dev.supervisor import ClusterSupervisor

    processes = ClusterProcesses(tmp_path, 1, zookeeper_connect="127.0.0.1:1")
    supervisor = ClusterSupervisor(processes, lambda line: None)

    async def main() -> None:
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(supervisor.run)
                while not (tmp_path / STATE_FILE).exists():
                    await trio.sleep(0.02)
                state = json.loads((tmp_path / STATE_FILE).read_text())
                assert (tmp_path / STATE_FILE).stat().st_mode & 0o777 == 0o600

                def ask(request: bytes) -> Any:
                    with socket.create_connection(("127.0.0.1", state["control_port"]), 10) as s:
                        s.sendall(request)
                        with s.makefile("rb") as answer:
                            return json.loads(answer.readline())

                wrong = await trio.to_thread.run_sync(
                    ask, b'{"token": "guess", "command": "kill", "node": 1}\n'
                )
                assert wrong == {"ok": False, "error": "bad request"}
                right = await trio.to_thread.run_sync(
                    ask,
                    json.dumps({"token": state["token"], "command": "stop", "node": 7}).encode()
                    + b"\n",
                )
                assert right["ok"] is False and "no node 7" in right["error"]
                listed = await trio.to_thread.run_sync(control, tmp_path, "list")
                assert [n["id"] for n in listed["nodes"]] == [1]
                os.kill(os.getpid(), signal.SIGTERM)

    trio.run(main)
    assert not (tmp_path / STATE_FILE).exists()


def test_a_second_supervisor_on_the_same_directory_is_refused(tmp_path: Path) -> None:
    """Two clusters on one data directory would share ZooKeeper's files and the
    brokers' logs: the second is refused before it writes anything."""
    import fcntl

    from trafka.brokerlite.dev.local_cluster import ClusterProcesses
    from trafka.brokerlite.dev.supervisor import LOCK_FILE, ClusterSupervisor

    with open(tmp_path / LOCK_FILE, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = ClusterSupervisor(
            ClusterProcesses(tmp_path, 1, zookeeper_connect="127.0.0.1:1"), lambda line: None
        )
        with pytest.raises(ControlError, match="a cluster already runs with data directory"):
            second.start()
    assert sorted(p.name for p in tmp_path.iterdir()) == [LOCK_FILE]


# Every node's listener takes SASL only; the brokers log in to each other with SCRAM, or
# over TLS with OAUTHBEARER tokens of Kafka's unsecured login module, as Kafka's
# server.properties says it (docs: "Authentication using SASL", Kafka 3.9).
SCRAM_PROPERTIES = """\
listeners=SASL_PLAINTEXT://:0
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-256
sasl.users=broker:broker-pw,alice:alice-pw
listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config=\\
  org.apache.kafka.common.security.scram.ScramLoginModule required \\
  username="broker" password="broker-pw";
"""
OAUTH_TLS_PROPERTIES = """\
listeners=SASL_SSL://:0
ssl.certfile={cert}
ssl.keyfile={key}
ssl.cafile={ca}
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,OAUTHBEARER
sasl.mechanism.inter.broker.protocol=OAUTHBEARER
sasl.users=alice:alice-pw
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=\\
  org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required \\
  unsecuredLoginStringClaim_sub="broker";
"""
ALICE = {"sasl.username": "alice", "sasl.password": "alice-pw"}


def sdk_read(bootstrap: str, expected: set[bytes], security: dict[str, str]) -> set[bytes]:
    """What trafka's blocking consumer (SCRAM as alice) reads of ``orders``."""
    from trafka.sdk import TopicPartition
    from trafka.sdk.blocking import Consumer

    seen: set[bytes] = set()
    with Consumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        fetch_max_wait_ms=50,  # its close waits for the fetch the broker holds (docs/sdk.md)
        **{**security, "sasl.mechanism": "SCRAM-SHA-256"},
    ) as consumer:
        consumer.assign([TopicPartition(TOPIC, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + WAIT_S
        while not expected <= seen and time.monotonic() < deadline:
            for records in consumer.getmany(timeout_ms=500).values():
                seen.update(r.value for r in records)
    return seen


def listener_settings(tmp_path: Path, listener: str) -> tuple[str, dict[str, str]]:
    """The cluster's properties and what a client of its listener sets."""
    if listener == "SASL_PLAINTEXT":
        return SCRAM_PROPERTIES, {"security.protocol": "SASL_PLAINTEXT", **ALICE}
    trustme = pytest.importorskip("trustme")
    ca = trustme.CA()
    leaf = ca.issue_cert("127.0.0.1")
    files = {name: tmp_path / f"{name}.pem" for name in ("ca", "cert", "key")}
    ca.cert_pem.write_to_path(str(files["ca"]))
    for i, pem in enumerate(leaf.cert_chain_pems):
        pem.write_to_path(str(files["cert"]), append=i > 0)
    leaf.private_key_pem.write_to_path(str(files["key"]))
    client = {"security.protocol": "SASL_SSL", "ssl.ca.location": str(files["ca"]), **ALICE}
    return OAUTH_TLS_PROPERTIES.format(**files), client


@needs_zookeeper
@pytest.mark.slow
@pytest.mark.parametrize("listener", ["SASL_PLAINTEXT", "SASL_SSL"])
def test_a_cluster_of_sasl_only_listeners_comes_up_and_serves_sasl_clients(
    tmp_path: Path, listener: str
) -> None:
    """``trafka cluster --config`` with SASL listeners only (SCRAM between brokers, or
    TLS and OAUTHBEARER): the supervisor's readiness check logs in as the brokers do
    (a plain Metadata request is refused there), and SASL clients, confluent-kafka
    and trafka's SDK, write and read records led by every node."""
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    from trafka.brokerlite.dev.local_cluster import cluster_metadata
    from trafka.sdk.blocking import Producer as SdkProducer

    properties, security = listener_settings(tmp_path, listener)
    (tmp_path / "secured.properties").write_text(properties)
    running = Supervisor(tmp_path / "cluster", "--config", str(tmp_path / "secured.properties"))
    try:
        started = running.started()
        assert f"listener: {listener}" in running.stdout()
        bootstrap = started["bootstrap"]
        host, port = started["nodes"][1][0].rsplit(":", 1)
        with pytest.raises((OSError, ValueError)):
            cluster_metadata(host, int(port))  # no login: the listener takes SASL only
        scram = {"bootstrap.servers": bootstrap, "sasl.mechanism": "SCRAM-SHA-256", **security}
        admin = AdminClient(scram)
        for future in admin.create_topics(
            [NewTopic(TOPIC, num_partitions=PARTITIONS, replication_factor=3)]
        ).values():
            future.result(timeout=WAIT_S)
        leaders = wait_for(
            "every partition's leader",
            lambda: (
                None
                if None in (states := [partition_state(admin, p) for p in range(PARTITIONS)])
                else {state[0] for state in states if state is not None}
            ),
        )
        assert len(leaders) > 1, leaders  # records cross nodes

        producer = Producer({**scram, "acks": "all", "enable.idempotence": True})
        first = {b"librdkafka-%d" % i for i in range(30)}
        for value in first:
            producer.produce(TOPIC, value, key=value)
        assert producer.flush(WAIT_S) == 0
        assert sdk_read(bootstrap, first, security) >= first

        second = {b"trafka-%d" % i for i in range(30)}
        with SdkProducer(
            bootstrap_servers=bootstrap, acks="all", **{**security, "sasl.mechanism": "PLAIN"}
        ) as sdk_producer:
            for value in second:
                sdk_producer.send(TOPIC, value, key=value)
            sdk_producer.flush()
        read = read_all(bootstrap, first | second, {**security, "sasl.mechanism": "PLAIN"})
        assert read >= first | second
        # A restarted node is checked the same way (from the supervisor's event loop).
        control(running.data_dir, "stop", 2)
        assert node_list(running.data_dir)[2]["state"] == "stopped"
        control(running.data_dir, "start", 2)
        assert node_list(running.data_dir)[2]["state"] == "running"
        wait_for(
            "the supervisor's report",
            lambda: "node 2 rejoined the cluster" in running.stderr() or None,
        )
    finally:
        running.stop()
    assert running.proc.returncode == 128 + signal.SIGINT, running.stderr()


def test_a_nodes_properties_file_with_the_configs_secrets_is_its_owners_only(
    tmp_path: Path,
) -> None:
    """``trafka cluster --config`` copies the file's settings (JAAS passwords,
    ``sasl.users``, TLS key passwords) into each node's properties file: that
    copy is readable by its owner only, whatever the umask, as an operator keeps
    Kafka's server.properties."""
    from trafka.brokerlite.config_keys import parse_properties
    from trafka.brokerlite.dev.local_cluster import ClusterProcesses

    settings = dict(parse_properties(SCRAM_PROPERTIES, "secured.properties"))
    old = os.umask(0o022)
    try:
        cluster = ClusterProcesses(
            tmp_path / "cluster", 1, settings=settings, zookeeper_connect="127.0.0.1:1"
        )
        (tmp_path / "cluster").mkdir()
        path = cluster._properties(1)
    finally:
        os.umask(old)
    assert "broker-pw" in path.read_text()
    assert path.stat().st_mode & 0o077 == 0
