"""The exactly-once sink (``deliveryGuarantee=exactly-once``) on a three-node
brokerlite cluster (ZooKeeper mode, broker processes) and on Apache Kafka 4's
(KRaft, the shared ``kafka4_cluster``), topics of replication factor 3 with
``min.insync.replicas`` 2, across processes killed with SIGKILL
in the middle of a micro-batch: a Spark executor, the Spark driver (before its
commit, and in the middle of it), a broker that coordinates the transaction
and leads a partition it writes to. Every row must reach ``read_committed``
readers (KIP-98) exactly once.

Each stream (tests/spark/eos_cluster_driver.py) stops micro-batch 1 at a
gate (a task with its transaction open, the driver's commit, or the driver's
commit after its first EndTxn) until the test has killed what it kills; in a
Spark driver process of its own where the test kills the driver or an
executor, else in the tests' Spark. The kills of Spark's own processes share
one driver (``local-cluster``, two executor processes), which runs their
three streams at once: a driver's start, its executors' and its first
micro-batches' were most of what each kill cost (three drivers took 61 s of
the suite's 92 s for this module). The tests share one cluster: a test
that kills a broker starts it again, and each test first makes sure every
broker serves (Kafka's killed node is started again after the module, too).

The kills of Spark's own processes (an executor, the driver twice) run on
Kafka only (:data:`ON_KAFKA`): what they prove is the sink's part (a retried
task fencing its dead attempt with InitProducerId on the same transactional id;
a restarted query finishing or redoing a batch from the sink's commit log), and
the broker's part of it (fencing, EndTxn, markers sent by a coordinator that
leads no partition written) is Kafka's protocol, which Kafka itself answers
here. brokerlite's answers to the same steps are proven by
tests/spark/test_spark_eos_sink.py (the same sink on one brokerlite: a driver's
death injected before its decision and mid-commit, then the restart),
tests/spark/test_spark_standalone.py (a failed task retried by a standalone
cluster and its zombie fenced, on one brokerlite) and
tests/brokerlite/test_cluster_transactions.py (fencing and markers across a
brokerlite cluster's coordinators). The kill of a broker, where brokerlite's own
cluster (coordinator and leader failover) is what is under test, runs on both.
Each of the three Spark kills took 45 to 67 s per peer in the suite when each
ran on both.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import eos_cluster_driver
import pytest
from pyspark import cloudpickle
from spark_helpers import KafkaNodes, consume_all, fresh, produce, run

from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.sdk import NewTopic, ProducerFencedError, open_admin
from trafka.sdk.group_protocol import find_coordinator_request, read_find_coordinator
from trafka.sdk.txn_handoff import PreparedTransaction, end_transaction
from trafka.spark import _eos

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

# Its gates run in Spark's Python workers, which cannot import it.
cloudpickle.register_pickle_by_value(eos_cluster_driver)

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "eos_cluster_driver.py"
RECORDS = 120  # over 2 source partitions; micro-batches of 60: batches 0 and 1
# What a Spark driver may take to reach its gate, or to finish (a loaded
# two-core machine took 220 s for the first).
SPARK_S = 480
SETTINGS = {
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.num.partitions": 3,
    "transaction.state.log.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
    # A killed broker's session expires after 4 s rather than 6 s (its length is
    # not what is tested; not lower: a loaded machine's live brokers could lose theirs).
    "zookeeper.session.timeout.ms": 4000,
}


@pytest.fixture(scope="module", params=["brokerlite", "4"])
def cluster(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[ClusterProcesses | KafkaNodes]:
    """Three broker processes: brokerlite's, in a chroot of the shared ZooKeeper
    of their own, or Kafka 4's shared three nodes (KRaft; a node a test killed
    is started again after it, so the cluster is whole for the tests after)."""
    if request.param != "brokerlite":
        nodes = KafkaNodes(request.getfixturevalue("kafka4_cluster"))
        try:
            yield nodes
        finally:
            for node in nodes.ports:
                nodes.start_node(node)
        return
    running = ClusterProcesses(
        tmp_path_factory.mktemp("eos-cluster"),
        3,
        zookeeper_connect=request.getfixturevalue("module_zk"),
        settings=SETTINGS,
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


#: The tests that run on Kafka 4's cluster only (see the module's docstring).
ON_KAFKA = pytest.mark.parametrize("cluster", ["4"], indirect=True)


@pytest.fixture
def servers(cluster: ClusterProcesses | KafkaNodes) -> str:
    """The cluster's bootstrap servers, every broker serving (a test before may
    have killed one)."""
    for node in cluster.ports:
        cluster.start_node(node)
    return cluster.bootstrap_servers


def create(servers: str, topic: str, partitions: int) -> None:
    """A topic replicated on the three nodes, two of them in sync for a write
    (SETTINGS's defaults, which Kafka's shared cluster does not have)."""
    settings = {"min.insync.replicas": "2"}
    _admin(servers, lambda admin: admin.create_topics([NewTopic(topic, partitions, 3, settings)]))


class Brokers:
    """What spark_helpers needs of a broker: where to connect."""

    def __init__(self, bootstrap_servers: str) -> None:
        self.bootstrap_servers = bootstrap_servers


def _values(servers: str, topic: str, partitions: int, isolation_level: str) -> list[bytes]:
    records = consume_all(Brokers(servers), topic, partitions, isolation_level=isolation_level)
    return sorted(r.value for r in records)


def committed(servers: str, topic: str, partitions: int = 3) -> list[bytes]:
    """The sink's values as a read_committed consumer sees them, sorted."""
    return _values(servers, topic, partitions, "read_committed")


def everything(servers: str, topic: str, partitions: int = 3) -> list[bytes]:
    """Every value written to the sink, aborted ones included, sorted."""
    return _values(servers, topic, partitions, "read_uncommitted")


def _admin(servers: str, fn: Any) -> Any:
    async def go() -> Any:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=servers) as admin:
                return await fn(admin)

    return run(go)


def open_transactions(servers: str, prefix: str) -> list[str]:
    """The transactional ids of ``prefix`` with a transaction open."""

    async def listed(admin: Any) -> list[str]:
        found = await admin.list_transactions(states=["Ongoing"])
        return sorted(t.transactional_id for t in found if t.transactional_id.startswith(prefix))

    result: list[str] = _admin(servers, listed)
    return result


def describe(servers: str, tid: str) -> Any:
    async def described(admin: Any) -> Any:
        return (await admin.describe_transactions([tid]))[tid]

    return _admin(servers, described)


def leaders(servers: str, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """``{partition: (leader, isr)}``."""

    async def described(admin: Any) -> Any:
        info = (await admin.describe_topics([topic]))[topic]
        return {p.partition: (p.leader, tuple(sorted(p.isr))) for p in info.partitions}

    result: dict[int, tuple[int, tuple[int, ...]]] = _admin(servers, described)
    return result


def until(what: str, probe: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while not (found := probe()):
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.2)
    return found


class Stream:
    """A source topic of RECORDS keyed records over 2 partitions, an empty sink
    topic (of 3 partitions unless told), a checkpoint and notes in ``folder``,
    and what streams one into the other (in 2 write tasks, one per source
    partition) and stops at ``gate`` (see tests/spark/eos_cluster_driver.py)."""

    def __init__(self, servers: str, folder: Path, gate: str, sink_partitions: int = 3) -> None:
        self.servers = servers
        self.gate_name = gate
        self.source = fresh("eos-cluster-src")
        self.sink = fresh("eos-cluster-sink")
        create(servers, self.source, 2)
        create(servers, self.sink, sink_partitions)
        self.sink_partitions = sink_partitions
        values = [b"v%d" % i for i in range(RECORDS)]
        produce(
            Brokers(servers), self.source, [(b"k%d" % i, v, None) for i, v in enumerate(values)]
        )
        self.values = sorted(values)
        self.folder = folder
        self.use_checkpoint(folder / "checkpoint")
        self.notes = folder / "notes"
        self.notes.mkdir(parents=True)

    def use_checkpoint(self, checkpoint: Path) -> None:
        """Stream with ``checkpoint`` (which names the tasks' transactional ids)."""
        self.checkpoint = checkpoint
        self.prefix = _eos.default_prefix(str(checkpoint))
        self.tids = [_eos.transactional_id(self.prefix, p) for p in range(2)]

    def spec(self) -> str:
        """The stream as tests/spark/eos_cluster_driver.py takes it."""
        return ",".join(
            [self.source, self.sink, str(self.checkpoint), str(self.notes), self.gate_name]
        )

    def start_here(self, spark: Any, gate: str | None = None) -> Any:
        """The same stream in this process's Spark (``local[2]``), started, with
        ``gate`` (its own by default)."""
        return eos_cluster_driver.start_stream(
            spark,
            self.servers,
            self.source,
            self.sink,
            str(self.checkpoint),
            str(self.notes),
            gate or self.gate_name,
        )

    def gate(self, driver: Driver | Any) -> dict[str, Any]:
        """Wait until the stream stops at its gate; what the process there noted.

        Args:
            driver: the driver process, or the query in this process."""
        path = self.notes / "gate.json"

        def reached() -> bool:
            if isinstance(driver, Driver):
                driver.running()
            else:
                assert driver.isActive, f"the query ended: {driver.exception()}"
            return path.exists()

        until(f"the gate ({self.gate_name})", reached, SPARK_S)
        noted: dict[str, Any] = json.loads(path.read_text())
        return noted

    def ended(self, driver: Driver) -> None:
        """Wait until the driver's query of this stream ended, without an error."""
        path = self.notes / "ended.json"

        def reached() -> bool:
            driver.running()
            return path.exists()

        until(f"the end of the stream ({self.gate_name})", reached, SPARK_S)
        assert json.loads(path.read_text()) is None, driver.log()

    def open_gate(self) -> None:
        (self.notes / "open").touch()

    def decision(self, batch_id: int) -> _eos.Decision:
        decided = _eos.CommitLog(str(self.checkpoint)).read(batch_id)
        assert decided is not None and decided.committed
        return decided


class Driver:
    """tests/spark/eos_cluster_driver.py running ``streams``, in a process group
    of its own (which a kill -9 of the driver takes whole, as the loss of its
    machine would)."""

    def __init__(self, master: str, streams: list[Stream], folder: Path) -> None:
        self.path = folder / "driver.log"
        with self.path.open("wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, str(DRIVER), master, streams[0].servers,
                 *(stream.spec() for stream in streams)],
                stdout=log, stderr=subprocess.STDOUT, cwd=HERE, start_new_session=True,
                env=dict(os.environ, SPARK_LOCAL_IP="127.0.0.1"),
            )  # fmt: skip

    def log(self) -> str:
        return self.path.read_text(errors="replace")[-4000:]

    def running(self) -> None:
        assert self.proc.poll() is None, f"the driver exited:\n{self.log()}"

    def kill(self) -> None:
        """SIGKILL to the driver's whole process group."""
        os.killpg(self.proc.pid, signal.SIGKILL)
        assert self.proc.wait(60) == -signal.SIGKILL


@contextlib.contextmanager
def killed_at_the_end(driver: Driver) -> Iterator[None]:
    """A driver that a failed test leaves running is killed (its whole group)."""
    try:
        yield
    finally:
        if driver.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(driver.proc.pid, signal.SIGKILL)
            driver.proc.wait()


def _parent(pid: int) -> int:
    # /proc/<pid>/stat: "pid (comm) state ppid ..."; comm may hold spaces.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat.rsplit(")", 1)[1].split()[1])


def _cmdline(pid: int) -> str:
    return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()


def _zombie_is_fenced(servers: str, zombie: PreparedTransaction) -> None:
    """The killed attempt's transaction can no longer be committed."""

    async def commit(admin: Any) -> None:
        await end_transaction(admin, zombie, commit=True)

    with pytest.raises(ProducerFencedError):
        _admin(servers, commit)


def coordinators(servers: str, tids: list[str]) -> dict[str, int]:
    """The broker that coordinates each transactional id (FindCoordinator)."""

    async def found(admin: Any) -> dict[str, int]:
        conn = await admin._cluster.any_connection()
        version = conn.version_for(10)
        nodes = {}
        for tid in tids:
            # Kafka makes __transaction_state on the first lookup, and answers
            # COORDINATOR_NOT_AVAILABLE (15) until it is served.
            while True:
                answer = await conn.request(10, find_coordinator_request(version, tid, 1))
                code, nodes[tid], _, _ = read_find_coordinator(version, answer)
                if code != 15:
                    break
                await anyio.sleep(0.5)
            assert code == 0, (tid, code)
        return nodes

    result: dict[str, int] = _admin(servers, found)
    return result


def _coordinated_apart(stream: Stream) -> dict[str, int]:
    """Point ``stream`` at a checkpoint whose write tasks' transactional ids are
    coordinated by brokers that lead no partition of its sink (the ids hash to
    a partition of __transaction_state: a few names are tried); their coordinators."""
    led = {leader for leader, _ in leaders(stream.servers, stream.sink).values()}
    for attempt in range(64):
        stream.use_checkpoint(stream.folder / f"checkpoint-{attempt}")
        found = coordinators(stream.servers, stream.tids)
        if not led & set(found.values()):
            return found
    raise AssertionError(f"no checkpoint name put the coordinators apart from leaders {led}")


def _kill_the_executor(stream: Stream, noted: dict[str, Any]) -> PreparedTransaction:
    """Kill -9 the executor whose task stopped at ``stream``'s gate (``noted``
    there) with its transaction open; that transaction (the zombie's)."""
    servers = stream.servers
    tid = noted["transactional_id"]
    held = describe(servers, tid)
    assert held.state == "Ongoing"
    written = tuple(sorted((tp.topic, tp.partition) for tp in held.topic_partitions))
    zombie = PreparedTransaction(tid, held.producer_id, held.producer_epoch, written)
    # The task's Python worker was forked by PySpark's daemon, which its
    # executor's JVM started.
    executor = _parent(noted["ppid"])
    assert "CoarseGrainedExecutorBackend" in _cmdline(executor)
    os.kill(executor, signal.SIGKILL)
    return zombie


def _retried_and_fenced(stream: Stream, zombie: PreparedTransaction) -> None:
    """``stream`` ended with every row once, its task run again under the
    zombie's transactional id with a higher epoch, the zombie fenced."""
    servers = stream.servers
    assert committed(servers, stream.sink) == stream.values
    assert open_transactions(servers, stream.prefix) == []
    tid = zombie.transactional_id
    (retry,) = [t for t in stream.decision(1).transactions if t.transactional_id == tid]
    assert retry.producer_id == zombie.producer_id
    assert retry.producer_epoch > zombie.producer_epoch
    _zombie_is_fenced(servers, zombie)
    assert committed(servers, stream.sink) == stream.values


def _midcommit_held(stream: Stream, noted: dict[str, Any]) -> str:
    """At ``stream``'s mid-commit gate: one of batch 1's two transactions is
    committed (its markers written), the other open; the committed one's id."""
    servers = stream.servers
    assert noted["transactional_ids"] == stream.tids
    done: str = noted["committed"]
    (left,) = [t for t in stream.tids if t != done]
    assert open_transactions(servers, stream.prefix) == [left]
    # EndTxn is answered once the decision is logged; its markers may still be going out.
    until("the first commit's markers", lambda: describe(servers, done).state == "CompleteCommit")
    return done


def _midcommit_left(stream: Stream, noted: dict[str, Any]) -> _eos.Decision:
    """After the driver's kill at ``stream``'s mid-commit gate: the decision is
    logged ``committing``, batch 0 and one task's share of batch 1 committed."""
    servers, partitions = stream.servers, stream.sink_partitions
    # The commit's Python runner (at the gate) died with its group.
    until("the commit's runner to die", lambda: not Path(f"/proc/{noted['pid']}").exists(), 30)
    decided = _eos.CommitLog(str(stream.checkpoint)).read(1)
    assert decided is not None and not decided.committed
    assert sorted(t.transactional_id for t in decided.transactions) == stream.tids
    # The other transaction is open: read_committed readers of a partition stop
    # at its first record (the last stable offset), so they see batch 0 and, of
    # batch 1, what the committed transaction wrote before it.
    in_kafka = committed(servers, stream.sink, partitions)
    assert 60 <= len(in_kafka) < RECORDS
    assert len(set(in_kafka)) == len(in_kafka) and set(in_kafka) <= set(stream.values)
    assert everything(servers, stream.sink, partitions) == stream.values
    return decided


@ON_KAFKA
def test_spark_processes_killed_mid_batch_write_every_row_once(
    spark: Any, servers: str, tmp_path: Path
) -> None:
    """One driver in local-cluster mode (two executors, each a JVM of its own
    with its Python workers) runs three streams, each stopped in micro-batch 1:

    * ``task``: the executor running the task of partition 0 is killed -9 while
      the task's transaction is open; Spark runs the task again on an executor
      that lives, and its InitProducerId on the same transactional id fences
      the dead attempt and aborts its transaction.
    * ``commit``: the tasks have written and reported, the commit has not
      started.
    * ``midcommit``: the driver recorded its decision (``committing``) and one
      task's transaction is committed (its EndTxn answered), the other's not
      yet. The sink has 1 partition and the checkpoint is named so that neither
      transaction's coordinator leads it: the commit markers go to another
      broker, the harder case (the case of a coordinator leading the partition
      it wrote ran too when this test was written; it is left out to keep the
      suite's time).

    Once the first stream has ended, the driver's process group (its Python,
    its JVM, the Python runners of the sink's commits, its executors) is killed
    -9 with the other two at their gates, and both restart in the tests' Spark.
    ``commit``'s runs batch 1 again (Spark retries the batch): its new tasks
    fence the open transactions of the dead run, and only the new ones are
    committed. ``midcommit``'s first commits the rest of the decision, then runs
    batch 1 again (Spark's checkpoint says it did not finish) and aborts what
    that writes. Every row once."""
    task = Stream(servers, tmp_path / "task", "task")
    commit = Stream(servers, tmp_path / "commit", "commit")
    midcommit = Stream(servers, tmp_path / "midcommit", "midcommit", 1)
    _coordinated_apart(midcommit)
    driver = Driver("local-cluster[2,1,1024]", [task, commit, midcommit], tmp_path)
    with killed_at_the_end(driver):
        # Every stream at its gate first: the executor's kill fails no task of the others.
        at = {stream.gate_name: stream.gate(driver) for stream in (task, commit, midcommit)}
        zombie = _kill_the_executor(task, at["task"])
        task.ended(driver)
        tids = at["commit"]["transactional_ids"]
        assert tids and open_transactions(servers, commit.prefix) == tids
        _midcommit_held(midcommit, at["midcommit"])
        driver.kill()
    _retried_and_fenced(task, zombie)

    assert _eos.CommitLog(str(commit.checkpoint)).read(1) is None
    # Batch 0 is committed; batch 1's rows are written, none committed.
    assert len(committed(servers, commit.sink)) == 60
    first_try = len(everything(servers, commit.sink)) - 60
    assert first_try == 60
    decided = _midcommit_left(midcommit, at["midcommit"])

    # Both restarts at once, in the tests' Spark.
    again = [stream.start_here(spark, "none") for stream in (commit, midcommit)]
    for query in again:
        query.awaitTermination(SPARK_S)
        assert query.exception() is None
    assert committed(servers, commit.sink) == commit.values
    assert (
        len(everything(servers, commit.sink)) == RECORDS + first_try
    )  # batch 1 twice, once aborted
    assert open_transactions(servers, commit.prefix) == []
    assert commit.decision(1).run != commit.decision(0).run

    partitions = midcommit.sink_partitions
    assert committed(servers, midcommit.sink, partitions) == midcommit.values
    assert (
        len(everything(servers, midcommit.sink, partitions)) == RECORDS + 60
    )  # batch 1 again, aborted
    assert open_transactions(servers, midcommit.prefix) == []
    finished = midcommit.decision(1)
    assert finished.transactions == decided.transactions
    assert finished.run == decided.run


def test_a_broker_killed_mid_batch_loses_and_doubles_nothing(
    spark: Any, cluster: ClusterProcesses | KafkaNodes, servers: str, tmp_path: Path
) -> None:
    """Micro-batch 1's task of partition 0 has sent its rows (not flushed) in a
    transaction; the broker that coordinates the transaction, which also leads
    a partition of the sink, is killed -9. The task flushes to the new leaders
    and the driver commits through the new coordinator: every row once."""
    stream = Stream(servers, tmp_path, "task")
    before = leaders(servers, stream.sink)
    assert all(len(isr) == 3 for _, isr in before.values()), before
    query = stream.start_here(spark)
    try:
        noted = stream.gate(query)
        tid = noted["transactional_id"]
        held = describe(servers, tid)
        assert held.state == "Ongoing"
        victim = held.coordinator_id
        led = [p for p, (leader, _) in before.items() if leader == victim]
        assert led, (victim, before)  # it leads a sink partition too
        cluster.kill(victim)
        stream.open_gate()
        query.awaitTermination(SPARK_S)
        assert query.exception() is None
    finally:
        stream.open_gate()
        if query.isActive:
            query.stop()

    # The other brokers served on (a verification to the dead coordinator in
    # flight once took a partition leader down with it).
    assert [n for n, p in cluster.procs.items() if p.poll() is not None] == [victim]
    assert committed(servers, stream.sink) == stream.values
    assert open_transactions(servers, stream.prefix) == []
    after = leaders(servers, stream.sink)
    assert all(after[p][0] not in (victim, -1) for p in led), after
    if isinstance(cluster, KafkaNodes):
        # Kafka's controller fenced the killed node (its heartbeats stopped), no live one.
        assert cluster.fenced() == [victim]
    assert describe(servers, tid).coordinator_id != victim
