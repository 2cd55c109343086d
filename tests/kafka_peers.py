"""Apache Kafka itself as a test and benchmark peer: its jars from Maven Central,
and its brokers as processes, the way production runs them.

Rules:

* The jars come from the poms in ``tests/peers/`` (Kafka's broker and the
  classes behind its scripts; Spark's own Kafka connector), copied by
  ``mvn dependency:copy-dependencies`` into ``.cache/peers/<name>-<version>/``
  (ignored by git) once; a ``.complete`` file there says the copy finished, so an
  interrupted copy is made again. ``python tests/kafka_peers.py fetch`` (run by
  ``make pytest`` and ``make bench``) fetches every peer; :func:`classpath`
  never downloads: it names what is missing and how to get it.
* :class:`KafkaCluster` runs ``nodes`` broker processes of one version:
  ZooKeeper mode for 3.x (given a ZooKeeper connect string with a chroot of its
  own), KRaft for 4.x (combined broker and controller on every node, the quorum
  formatted by Kafka's own ``StorageTool``). Everything a cluster writes lives
  under its ``data_dir``: ``node-N/server.properties``, ``node-N/kafka.log`` (the
  JVM's output, Kafka's log at WARN and its start-up lines) and the logs.
* Ports are picked once (free at the first start) and kept across restarts of
  a node, so a killed node comes back at the same address.
* :meth:`KafkaCluster.start` returns once every node answers a Metadata
  request naming all the cluster's brokers (a 3.x broker registered in
  ZooKeeper, a 4.x broker unfenced by the quorum), not once a port is open.
  On failure it raises :class:`KafkaPeerError` with the tail of the node's log.
* No orphan JVM: each runs in its own session and gets SIGKILL when the thread
  that forked it ends (fork from the main thread, as pytest's fixtures do).
* Small heaps, the serial collector and (unless ``jit=True``, for benchmarks)
  the C1 compiler only: a suite on two cores starts several of them.
* Class-data sharing (the JDK's dynamic AppCDS archives): ``fetch`` also runs a
  node of each version once and stops it cleanly, the JVM writing the classes
  it loaded to ``broker.jsa``, and (for 4.x, whose jars the tools JVMs run)
  a JVM running a storage format and the scripts' clients writing
  ``scripts.jsa``, in the peer's folder. Every later JVM of that version maps
  them instead of loading and verifying the classes from the jars again: a
  node's start-up CPU roughly halves (4.4: 5.5 s to 3.1 s, formatting 2.2 s to
  1.2 s); a ScriptRunner JVM of three commands takes 1.2 s instead of 1.8 s
  (with an archive of StorageTool's classes only), the 86 steps of
  test_kafka_scripts.py 6.5 s instead of 8.9 s. Without an archive (or with one
  the JDK refuses: after a JDK update, or written with the jars at another path)
  a JVM loads its classes as before, silently; ``fetch`` writes a refused one
  again, and the jars are named by their real path (a worktree's linked
  ``.cache`` and the main checkout's share the archives).
"""

from __future__ import annotations

import argparse
import base64
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from trafka.brokerlite.dev.zookeeper_server import free_port, parent_death_signal
from trafka.codec.framing import FrameReader
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.messages.k03_metadata import MetadataRequest
from trafka.codec.protocol import decode_response, encode_request

#: The last ZooKeeper-era release line, and the current 4.x (KRaft only).
KAFKA_3 = "3.9.2"
KAFKA_4 = "4.4.0"
#: Spark's Kafka connector. Maven Central serves none for PySpark 4.3 here, so
#: the newest served (4.2) runs in PySpark 4.3's JVM (Scala 2.13 both).
SPARK_KAFKA = "4.2.0"

ROOT = Path(__file__).resolve().parent.parent
POMS = ROOT / "tests" / "peers"
CACHE = ROOT / ".cache" / "peers"
#: Set to 1 to skip the tests that need Apache Kafka (no Java or Maven here);
#: the run's summary then says so. Without it a missing peer fails those tests.
SKIP_ENV = "TRAFKA_SKIP_KAFKA"

_HEAP = ("-Xms64m", "-Xmx512m")
_JVM_FLAGS = (
    "-XX:+UseSerialGC",
    "-XX:-UsePerfData",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
_C1_ONLY = "-XX:TieredStopAtLevel=1"
_LOG_TAIL_LINES = 40


class KafkaPeerError(Exception):
    """Apache Kafka could not be fetched, started or stopped."""


# --- the jars ----------------------------------------------------------------------------------


def _peer(name: str, version: str) -> tuple[Path, Path]:
    return POMS / name / "pom.xml", CACHE / f"{name}-{version}"


def _install_hint() -> str:
    return (
        "needs Java and Maven (as root: apt-get install default-jdk-headless maven), "
        f"then `python tests/kafka_peers.py fetch`; or set {SKIP_ENV}=1 to skip those tests"
    )


def missing(name: str = "kafka", version: str = KAFKA_4) -> str | None:
    """Why the peer ``name`` at ``version`` cannot run here, or None."""
    if shutil.which("java") is None:
        return f"no java on PATH: Apache Kafka {_install_hint()}"
    if not (_peer(name, version)[1] / ".complete").is_file():
        return f"{name} {version} is not in {CACHE}: Apache Kafka {_install_hint()}"
    return None


def fetch(name: str, version: str) -> Path:
    """The folder of ``name``'s jars at ``version``, copied by Maven when missing."""
    pom, folder = _peer(name, version)
    if (folder / ".complete").is_file():
        return folder
    mvn = shutil.which("mvn")
    if mvn is None:
        raise KafkaPeerError(f"mvn not found: fetching {name} {version} {_install_hint()}")
    shutil.rmtree(folder, ignore_errors=True)
    prop = "spark.version" if name == "spark-kafka" else "kafka.version"
    argv = [mvn, "-q", "-B", "-f", str(pom), f"-D{prop}={version}"]
    if name == "kafka" and not version.startswith("3."):
        argv.append("-Plog4j2")
    argv += ["dependency:copy-dependencies", f"-DoutputDirectory={folder}"]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join((done.stdout + done.stderr).splitlines()[-20:])
        raise KafkaPeerError(f"mvn could not fetch {name} {version}:\n{tail}")
    jars = sorted(p.name for p in folder.glob("*.jar"))
    (folder / ".complete").write_text("\n".join(jars) + "\n")
    return folder


def classpath(name: str = "kafka", version: str = KAFKA_4) -> str:
    """The Java classpath of a fetched peer (never downloads), by the folder's
    real path: a class-data archive holds the classpath it was written with and
    is refused under any other, so a ``.cache`` reached through a link (a git
    worktree's, linked to the main checkout's) must name the same jars as the
    checkout that wrote the archive."""
    why = missing(name, version)
    if why is not None:
        raise KafkaPeerError(why)
    return str(_peer(name, version)[1].resolve() / "*")


def jars(name: str, version: str) -> list[Path]:
    """The jar files of a fetched peer."""
    classpath(name, version)
    return sorted(_peer(name, version)[1].glob("*.jar"))


def fetch_all() -> None:
    """Every peer fetched and its class-data archives written, one process at a
    time: checkouts sharing a ``.cache`` (a worktree's, linked) may run ``make
    peers`` together, and a second Maven copy or archive dump would overwrite
    the first's files while they are written."""
    import fcntl

    CACHE.mkdir(parents=True, exist_ok=True)
    with open(CACHE / ".fetching.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for name, version in (("kafka", KAFKA_3), ("kafka", KAFKA_4), ("spark-kafka", SPARK_KAFKA)):
            fetch(name, version)
        for version in (KAFKA_3, KAFKA_4):
            train(version)
        # Spark's class-data archive too (tests/spark_home.py): the same idea for
        # the Spark JVMs of the tests.
        import spark_home

        spark_home.train()


# --- class-data sharing (see the module's rules) -------------------------------------------


def _archive(version: str, role: str) -> Path:
    """The archive of a ``broker`` or a ``scripts`` (tools) JVM (``java_command``'s)."""
    return _peer("kafka", version)[1] / f"{role}.jsa"


def _share(version: str, role: str, dump: bool = False) -> list[str]:
    """The JVM flags that use the archive when there is one (or, ``dump``,
    write it when the JVM exits, to a temporary name :func:`train` renames)."""
    path = _archive(version, role)
    if dump:
        return [f"-XX:ArchiveClassesAtExit={path}.part"]
    if not path.is_file():
        return []
    # A refused archive (another JDK, changed jars) is said on standard output: not here.
    return [f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off", "-Xlog:cds+dynamic=off"]


def _usable(version: str, role: str) -> bool:
    """Whether the JVM maps the archive (``-Xshare:on`` fails at start-up, in
    about 0.1 s, on one it refuses: another JDK, other jars, or jars at another
    path, as when the archive was written in a checkout that is gone)."""
    path = _archive(version, role)
    if not path.is_file():
        return False
    java = shutil.which("java") or "java"
    argv = [java, "-Xshare:on", f"-XX:SharedArchiveFile={path}", "-Xlog:cds=off"]
    argv += ["-cp", classpath("kafka", version), "-version"]
    return subprocess.run(argv, capture_output=True, check=False).returncode == 0


def train(version: str) -> None:
    """The class-data-sharing archives of ``version``, when missing or refused:
    one node (on a ZooKeeper of its own for 3.x; none when ZooKeeper is not
    installed) started and stopped cleanly, its JVMs writing the classes they
    loaded. (Archives written in a worktree since removed were refused by every
    JVM here, which then loaded its classes from the jars again, silently.)"""
    import tempfile

    from trafka.brokerlite.dev.zookeeper_server import ZooKeeperServer, zookeeper_available

    roles = ["broker", "scripts"] if not version.startswith("3.") else ["broker"]
    if missing("kafka", version) is not None or all(_usable(version, r) for r in roles):
        return
    if version.startswith("3.") and not zookeeper_available():
        return
    with tempfile.TemporaryDirectory(prefix="trafka-kafka-cds-") as tmp:
        zookeeper = None if not version.startswith("3.") else ZooKeeperServer(Path(tmp) / "zk")
        try:
            if zookeeper is not None:
                zookeeper.start(timeout=60.0)
            connect = None if zookeeper is None else zookeeper.connect_string + "/cds"
            cluster = KafkaCluster(version, Path(tmp) / "kafka", zookeeper=connect)
            cluster.dump = True
            try:
                cluster.start()
                if "scripts" in roles:
                    _train_scripts(version, cluster, Path(tmp))
                cluster.node(1).stop(timeout=120.0)
            finally:
                cluster.stop()
        finally:
            if zookeeper is not None:
                zookeeper.stop()
    for role in roles:
        part = Path(f"{_archive(version, role)}.part")
        if part.is_file():
            part.replace(_archive(version, role))


def _train_scripts(version: str, cluster: KafkaCluster, tmp: Path) -> None:
    """``scripts.jsa`` written by a JVM that runs, as tests/interop/java/ScriptRunner
    does, a storage format and the scripts the tests run most (topics, configs,
    groups, console and perf clients, a transactional producer) against the
    training node: the tools JVMs of the tests (ScriptRunner, KafkaHarness, the
    perf and verifiable tools) then map the clients' classes too, not only
    StorageTool's. ScriptRunner runs from its source (the JDK's source launcher),
    so the archive's classpath is Kafka's jars alone, a prefix of every tools
    JVM's (the archive is refused unless the dump's classpath is)."""
    bs = cluster.bootstrap_servers
    # The training node's own settings, formatting a log dir of its own.
    props = tmp / "format.properties"
    settings = (cluster.node(1).folder / "server.properties").read_text()
    props.write_text(re.sub(r"(?m)^log\.dirs=.*$", f"log.dirs={tmp / 'format'}", settings))
    tools, b = "org.apache.kafka.tools.", f"--bootstrap-server {bs} "
    records = "".join(f"k{i}\tv{i}\n" for i in range(20)).encode()
    stdin = "--stdin-base64=" + base64.b64encode(records).decode()
    steps = [
        ["kafka.tools.StorageTool", "format", "-t", _cluster_id(), "-c", str(props)],
        f"TopicCommand {b}--create --topic cds --partitions 2".split(),
        f"TopicCommand {b}--describe --topic cds".split(),
        f"ConfigCommand {b}--describe --entity-type topics".split(),
        [*f"ConsoleProducer {b}--topic cds --property parse.key=true".split(), stdin],
        f"consumer.ConsoleConsumer {b}--topic cds --group cds --from-beginning "
        "--max-messages 20 --timeout-ms 20000".split(),
        f"consumer.group.ConsumerGroupCommand {b}--describe --all-groups".split(),
        "ProducerPerformance --topic cds --num-records 200 --record-size 10 --throughput -1 "
        f"--transactional-id cds --producer-props bootstrap.servers={bs}".split(),
        f"ConsumerPerformance {b}--topic cds --messages 200 --timeout 20000".split(),
    ]
    steps[1:] = [[tools + step[0], *step[1:]] for step in steps[1:]]
    commands = tmp / "scripts.commands"
    commands.write_text("".join("\t".join(step) + "\n" for step in steps))
    argv = java_command("ScriptRunner", str(commands), version=version)
    argv = [a for a in argv if a not in _share(version, "scripts")]
    argv[1:1] = _share(version, "scripts", dump=True)
    runner = ROOT / "tests" / "interop" / "java" / "ScriptRunner.java"
    argv[argv.index("ScriptRunner")] = str(runner)
    subprocess.run(argv, capture_output=True, timeout=300, check=False)


def java_command(
    main: str, *args: str, version: str = KAFKA_4, heap: str = "-Xmx256m", jit: bool = False
) -> list[str]:
    """The command line running ``main`` (a class of Kafka's jars at ``version``,
    e.g. a script's class) with a small heap, the way Kafka's scripts start it;
    ``jit`` for the full JIT compiler (benchmarks), else C1 only (starts faster)."""
    java = shutil.which("java") or "java"
    flags = [*_JVM_FLAGS] if jit else [*_JVM_FLAGS, _C1_ONLY]
    flags += _share(version, "scripts")
    return [java, heap, *flags, "-cp", classpath("kafka", version), main, *args]


# --- the brokers -------------------------------------------------------------------------------


def _log_config(folder: Path, version: str) -> list[str]:
    """Kafka's logging at WARN to the JVM's output (the node's log file), with the
    lines that say a broker started, for a human reading a failed run."""
    if version.startswith("3."):
        path = folder / "log4j.properties"
        path.write_text(
            "log4j.rootLogger=WARN, out\n"
            "log4j.appender.out=org.apache.log4j.ConsoleAppender\n"
            "log4j.appender.out.layout=org.apache.log4j.PatternLayout\n"
            "log4j.appender.out.layout.ConversionPattern=[%d] %p %m (%c)%n\n"
            "log4j.logger.kafka.server.KafkaServer=INFO\n"
        )
        return [f"-Dlog4j.configuration=file:{path}"]
    path = folder / "log4j2.properties"
    path.write_text(
        "status = warn\n"
        "appender.out.type = Console\n"
        "appender.out.name = out\n"
        "appender.out.layout.type = PatternLayout\n"
        "appender.out.layout.pattern = [%d] %p %m (%c)%n\n"
        "rootLogger.level = WARN\n"
        "rootLogger.appenderRef.out.ref = out\n"
        "logger.broker.name = kafka.server.BrokerServer\n"
        "logger.broker.level = INFO\n"
        # The active controller's fencing of a broker whose session timed out
        # ("Fencing broker N at epoch E because its session has timed out"),
        # that line alone: tests that kill a node read whom it fenced.
        "logger.fence.name = org.apache.kafka.controller.ReplicationControlManager\n"
        "logger.fence.level = INFO\n"
        "logger.fence.filter.only.type = RegexFilter\n"
        "logger.fence.filter.only.regex = .*Fencing broker .*\n"
        "logger.fence.filter.only.onMatch = NEUTRAL\n"
        "logger.fence.filter.only.onMismatch = DENY\n"
    )
    return [f"-Dlog4j2.configurationFile={path}"]


def _metadata(host: str, port: int, timeout: float, topics: Sequence[str] = ()) -> Any:
    """A broker's Metadata answer (v9) for ``topics`` (none: brokers only), or None
    when it does not answer."""
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            header = RequestHeader(request_api_key=3, request_api_version=9, correlation_id=1)
            asked = [MetadataRequest.MetadataRequestTopic(name=t) for t in topics]
            request = MetadataRequest(topics=asked, allow_auto_topic_creation=False)
            sock.sendall(encode_request(header, request))
            frames = FrameReader()
            while (frame := frames.next_frame()) is None:
                data = sock.recv(65536)
                if not data:
                    return None
                frames.feed(data)
    except OSError:
        return None
    return decode_response(frame, 3, 9)[1]


def _metadata_brokers(host: str, port: int, timeout: float) -> set[int] | None:
    """The node ids a broker's Metadata answer names, or None when it does not answer."""
    response = _metadata(host, port, timeout)
    return None if response is None else {broker.node_id for broker in response.brokers}


def wait_topic_everywhere(
    bootstrap_servers: str, topic: str, partitions: int, timeout: float = 60.0
) -> None:
    """Until every broker of ``bootstrap_servers`` answers Metadata with ``topic``
    and its ``partitions`` partitions, each with a leader: a broker learns of a new
    topic after the controller (by UpdateMetadata on ZooKeeper, by the metadata log
    in KRaft), so a script run right after a create may meet one that has not yet.
    """
    deadline = time.monotonic() + timeout
    for address in bootstrap_servers.split(","):
        host, _, port = address.rpartition(":")
        while True:
            answer = _metadata(host, int(port), 2.0, [topic])
            found = (
                [t for t in answer.topics if t.name == topic and not t.error_code] if answer else []
            )
            leaders = [p.leader_id for p in found[0].partitions] if found else []
            if len(leaders) == partitions and min(leaders) >= 0:
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{address} has not {topic} with {partitions} partitions")
            time.sleep(0.1)


def _cluster_id() -> str:
    """A random KRaft cluster id, never starting with "-": StorageTool's
    argument parser takes ``-t -abc...`` for an option and fails (Kafka's own
    ``Uuid.randomUuid`` draws again for the same reason)."""
    while (found := base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("="))[0] == "-":
        pass
    return found


class KafkaNode:
    """One broker process of a :class:`KafkaCluster` (see the module's rules)."""

    def __init__(self, cluster: KafkaCluster, node_id: int) -> None:
        self.cluster = cluster
        self.node_id = node_id
        self.folder = cluster.data_dir / f"node-{node_id}"
        self.ports: dict[str, int] = {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def port(self) -> int:
        """The port of the first (client) listener."""
        return self.ports[next(iter(self.cluster.listeners))]

    @property
    def host(self) -> str:
        """The address it listens on and advertises."""
        return self.cluster.node_hosts.get(self.node_id, self.cluster.host)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def log_path(self) -> Path:
        return self.folder / "kafka.log"

    @property
    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])

    def launch(self) -> None:
        if self.running:
            raise KafkaPeerError(f"node {self.node_id} is already running")
        self.folder.mkdir(parents=True, exist_ok=True)
        c = self.cluster
        argv = [
            *(c.wrap(self.node_id) if c.wrap is not None else ()),
            shutil.which("java") or "java",
            *_HEAP,
            *_JVM_FLAGS,
            *(() if c.jit else (_C1_ONLY,)),
            *_share(c.version, "broker", c.dump),
            *_log_config(self.folder, c.version),
            *c.jvm_options,
            "-cp",
            classpath("kafka", c.version),
            "kafka.Kafka",
            str(self.folder / "server.properties"),
        ]
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=self.folder,
                start_new_session=True,
                preexec_fn=parent_death_signal(signal.SIGKILL),
            )

    def signal(self, signum: int) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, signum)
            except (ProcessLookupError, PermissionError):
                pass

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        self.signal(signal.SIGKILL)
        if self.proc is not None:
            self.proc.wait(10)

    def stop(self, timeout: float = 30.0) -> None:
        """A controlled shutdown (SIGTERM), then SIGKILL past ``timeout``."""
        if self.proc is None:
            return
        self.signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()


class KafkaCluster:
    """``nodes`` Apache Kafka brokers of ``version`` on ``host`` (see the module's rules).

    Args:
        version: a fetched Kafka version; 3.x runs on ZooKeeper, 4.x on KRaft.
        data_dir: where the cluster's files go (made when missing).
        nodes: how many brokers (each also a controller under KRaft).
        zookeeper: ``host:port/chroot`` for 3.x (required there).
        listeners: the client listeners, name to security protocol, in order
            (the first is :attr:`bootstrap_servers`'s); brokers talk to each
            other on the first.
        config: settings for every node's ``server.properties`` over the
            defaults here (small, test-sized; replication factors follow ``nodes``).
        jvm_options: more JVM arguments (e.g. a JAAS file for SASL).
        jit: the full JIT compiler, for benchmarks (tests start faster without).
        node_hosts: node id to the address it listens on and advertises, for
            nodes not on ``host`` (e.g. each in a network namespace of its own:
            they then listen on fixed ports, 9092 and 9093 for KRaft's controller).
        wrap: node id to a command prefix its JVM runs under (e.g.
            ``ip netns exec NS``; the prefix must exec the JVM, keeping its pid).
    """

    def __init__(
        self,
        version: str,
        data_dir: Path,
        *,
        nodes: int = 1,
        zookeeper: str | None = None,
        listeners: Mapping[str, str] | None = None,
        config: Mapping[str, Any] | None = None,
        jvm_options: Iterable[str] = (),
        jit: bool = False,
        host: str = "127.0.0.1",
        node_hosts: Mapping[int, str] | None = None,
        wrap: Callable[[int], Sequence[str]] | None = None,
    ) -> None:
        self.version = version
        self.node_hosts = dict(node_hosts or {})
        self.wrap = wrap
        self.kraft = not version.startswith("3.")
        if not self.kraft and zookeeper is None:
            raise KafkaPeerError(f"Kafka {version} runs on ZooKeeper: pass zookeeper=")
        self.data_dir = Path(data_dir)
        self.zookeeper = zookeeper
        self.listeners = dict(listeners or {"PLAINTEXT": "PLAINTEXT"})
        self.config = dict(config or {})
        self.jvm_options = tuple(jvm_options)
        self.jit = jit
        self.host = host
        self.cluster_id = _cluster_id()
        self.nodes = [KafkaNode(self, i + 1) for i in range(nodes)]
        #: the JVMs write class-data-sharing archives when they exit (:func:`train`)
        self.dump = False
        self._formatted = False
        self._served = False

    def __repr__(self) -> str:
        return f"KafkaCluster({self.version}, {len(self.nodes)} nodes, {self.bootstrap_servers})"

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(node.address for node in self.nodes)

    def node(self, node_id: int) -> KafkaNode:
        return self.nodes[node_id - 1]

    def _defaults(self) -> dict[str, Any]:
        replicas = min(3, len(self.nodes))
        return {
            "num.partitions": 1,
            "default.replication.factor": 1,
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": 5,
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": max(1, replicas - 1),
            "transaction.state.log.num.partitions": 5,
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": max(1, replicas - 1),
            "share.coordinator.state.topic.num.partitions": 3,
            "group.initial.rebalance.delay.ms": 0,
            # A timed-out transaction is aborted within a second of its timeout
            # rather than within Kafka's default 10 s scan (tests that time one out
            # wait for the abort).
            "transaction.abort.timed.out.transaction.cleanup.interval.ms": 1000,
            "log.segment.bytes": 16 << 20,
            # Tests write records with fixed old timestamps, which the 7-day
            # retention would delete at its next check (every 5 minutes) under a
            # long run's shared brokers: no periodic check within a test run. Nor
            # the first, which runs log.initial.task.delay.ms after the start (an
            # internal setting, 30 s by default, not shown by DescribeConfigs):
            # it deleted the records of a test that read them back 30 s after
            # its Kafka started, its active segment's too (the dead-letter
            # differential's flake, s93). The log's other periodic tasks wait as
            # long (checkpoints of recovery points and start offsets: a node
            # killed -9 recovers its logs from their start, as after any crash).
            "log.retention.check.interval.ms": 24 * 3600 * 1000,
            "log.initial.task.delay.ms": 24 * 3600 * 1000,
            "num.network.threads": 2,
            "num.io.threads": 2,
            "num.recovery.threads.per.data.dir": 1,
            "background.threads": 2,
            "log.cleaner.threads": 1,
            "log.cleaner.dedupe.buffer.size": 2 << 20,
        }

    def _pick_ports(self) -> None:
        """Ports for the nodes that have none, each distinct from every other
        node's: the OS may hand the same free port out twice in a row (once, two
        nodes of a 3.9 cluster got one port; the second died as "already
        registered", and the cluster served on two)."""
        taken = {port for node in self.nodes for port in node.ports.values()}

        def fresh() -> int:
            while (port := free_port(self.host)) in taken:
                pass
            taken.add(port)
            return port

        for node in self.nodes:
            if node.ports:
                continue
            if node.host != self.host:  # an address of its own: the ports are its own too
                node.ports = {name: 9092 + i for i, name in enumerate(self.listeners)}
                if self.kraft:
                    node.ports["CONTROLLER"] = 9092 + len(self.listeners)
                continue
            for name in self.listeners:
                node.ports[name] = fresh()
            if self.kraft:
                node.ports["CONTROLLER"] = fresh()

    def _write_properties(self, node: KafkaNode) -> None:
        listeners = {name: node.ports[name] for name in self.listeners}
        protocols = dict(self.listeners)
        settings: dict[str, Any] = self._defaults()
        first = next(iter(self.listeners))
        if self.kraft:
            listeners["CONTROLLER"] = node.ports["CONTROLLER"]
            protocols["CONTROLLER"] = "PLAINTEXT"
            settings |= {
                "process.roles": "broker,controller",
                "node.id": node.node_id,
                "controller.listener.names": "CONTROLLER",
                "controller.quorum.voters": ",".join(
                    f"{n.node_id}@{n.host}:{n.ports['CONTROLLER']}" for n in self.nodes
                ),
                # The active controller's no-op records (KIP-835) every 5 s, not
                # every 0.5 s: half an idle node's CPU (one node, 60 s idle: 2.8%
                # of a core at 500 ms, 1.7% at 5 s), and a worker's shared nodes
                # idle between the tests that use them. They only show the
                # quorum alive in metrics; a write commits when it is made.
                "metadata.max.idle.interval.ms": 5000,
            }
        else:
            settings |= {"broker.id": node.node_id, "zookeeper.connect": self.zookeeper}
        settings |= {
            "listeners": ",".join(f"{n}://{node.host}:{p}" for n, p in listeners.items()),
            "advertised.listeners": ",".join(
                f"{n}://{node.host}:{node.ports[n]}" for n in self.listeners
            ),
            "listener.security.protocol.map": ",".join(f"{n}:{p}" for n, p in protocols.items()),
            "inter.broker.listener.name": first,
            "log.dirs": str(node.folder / "logs"),
        }
        settings |= self.config
        node.folder.mkdir(parents=True, exist_ok=True)
        lines = [f"{key}={value}" for key, value in settings.items()]
        (node.folder / "server.properties").write_text("\n".join(lines) + "\n")

    def _format(self) -> None:
        """KRaft: every node's log dir formatted with the cluster's id, once."""
        for node in self.nodes:
            argv = java_command(
                "kafka.tools.StorageTool",
                "format",
                "-t",
                self.cluster_id,
                "-c",
                str(node.folder / "server.properties"),
                "--ignore-formatted",
                version=self.version,
            )
            if self.dump:
                argv = [a for a in argv if a not in _share(self.version, "scripts")]
                argv[1:1] = _share(self.version, "scripts", dump=True)
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            if done.returncode != 0:
                raise KafkaPeerError(
                    f"formatting node {node.node_id}'s storage failed:\n{done.stdout}{done.stderr}"
                )
        self._formatted = True

    def start(self, timeout: float = 120.0) -> None:
        """Every node (not running) started, and served (see the module's rules)."""
        self._pick_ports()
        for node in self.nodes:
            self._write_properties(node)
        if self.kraft and not self._formatted:
            self._format()
        stopped = [node for node in self.nodes if not node.running]
        for node in stopped:
            node.launch()
        try:
            self.wait_serving(stopped, timeout)
        except KafkaPeerError as exc:
            # A port picked free was taken (by another worker's JVM) before ours
            # bound it: pick again, once, while the cluster has never served.
            if self._served or (
                "BindException" not in str(exc) and "Address already" not in str(exc)
            ):
                raise
            self.stop()
            for node in self.nodes:
                node.ports.clear()
                shutil.rmtree(node.folder, ignore_errors=True)
            self._formatted = False
            self._served = True  # no third try
            self.start(timeout)
        self._served = True

    def start_node(self, node_id: int, timeout: float = 120.0) -> None:
        """One node started again (after :meth:`KafkaNode.kill` or ``stop``)."""
        node = self.node(node_id)
        node.launch()
        self.wait_serving([node], timeout)

    def wait_serving(self, nodes: Iterable[KafkaNode], timeout: float = 120.0) -> None:
        """Wait until each of ``nodes`` names every running broker in its Metadata."""
        deadline = time.monotonic() + timeout
        nodes = list(nodes)
        for node in nodes:
            while True:
                # Any of them gone is a failure, not a smaller cluster to wait for.
                for launched in nodes:
                    if launched.proc is not None and launched.proc.poll() is not None:
                        raise KafkaPeerError(
                            f"Kafka {self.version} node {launched.node_id} exited with "
                            f"{launched.proc.returncode}; its log ends:\n{launched.log_tail()}"
                        )
                expected = {n.node_id for n in self.nodes if n.running}
                seen = _metadata_brokers(node.host, node.port, 2.0)
                if seen is not None and expected <= seen:
                    break
                if time.monotonic() > deadline:
                    node.kill()
                    raise KafkaPeerError(
                        f"Kafka {self.version} node {node.node_id} did not serve within "
                        f"{timeout:.0f} s (saw brokers {seen}); its log ends:\n{node.log_tail()}"
                    )
                time.sleep(0.2)

    def stop(self) -> None:
        """Every node killed (tests need no clean shutdown; the data dir is thrown away)."""
        for node in self.nodes:
            node.signal(signal.SIGKILL)
        for node in self.nodes:
            if node.proc is not None:
                node.proc.wait(10)

    def __enter__(self) -> KafkaCluster:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("command", choices=["fetch"])
    parser.parse_args(argv)
    if os.environ.get(SKIP_ENV) == "1":
        print(f"{SKIP_ENV}=1: not fetching Apache Kafka; the tests that need it will be skipped")
        return 0
    try:
        fetch_all()
    except KafkaPeerError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
