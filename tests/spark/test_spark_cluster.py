"""The data source against a three-node brokerlite cluster (ZooKeeper mode):
leaders on every node, and a leader stopped while Spark reads its partitions,
cleanly (brokers in this process) or with SIGKILL (broker processes). The read
must still return every record exactly once, at the offsets the producer was
given."""

from __future__ import annotations

import math
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from spark_helpers import KafkaNodes, fresh

from trafka.brokerlite.dev.local_cluster import ClusterProcesses, LocalCluster, serve_cluster
from trafka.sdk import NewTopic, open_admin, open_producer
from trafka.sdk.errors import TrafkaError

# tests/brokerlite is not a package: its helpers are imported from its folder,
# which leaves sys.path as it was.
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "brokerlite"))
try:
    from cluster_helpers import CLUSTER_SETTINGS, PARTITIONS, REPLICATION, ClusterControl
finally:
    del sys.path[0]

pytestmark = pytest.mark.timeout(300)

#: Some 500 records a partition, read in 5 tasks each: with 4 tasks done when
#: the leader goes (of partition 0, which it leads), the tasks of the other
#: partition it leads (there are two a node) are still to start (asserted).
RECORDS = 3_000
TASK_RECORDS = 100


class ClusterThread:
    """``serve_cluster`` on a trio loop in a thread of its own, so that the test's
    thread can drive Spark (synchronous) while the brokers serve; :meth:`call`
    runs an async function on that loop, where the brokers may be touched."""

    def __init__(self, zk: str) -> None:
        self.zk = zk
        self.cluster: LocalCluster | None = None
        self._token: Any = None
        self._ready = threading.Event()
        self._done: trio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="cluster", daemon=True)

    def _run(self) -> None:
        async def main() -> None:
            async with serve_cluster(3, zookeeper_connect=self.zk, **CLUSTER_SETTINGS) as cluster:
                self.cluster = cluster
                self._token = trio.lowlevel.current_trio_token()
                self._done = trio.Event()
                await cluster.wait_formed()
                self._ready.set()
                await self._done.wait()

        try:
            trio.run(main)
        except BaseException as exc:
            self._error = exc
            self._ready.set()

    def __enter__(self) -> ClusterThread:
        self._thread.start()
        assert self._ready.wait(120), "the cluster did not start"
        if self._error is not None:
            raise self._error
        return self

    def __exit__(self, *exc: object) -> None:
        if self._done is not None:
            trio.from_thread.run_sync(self._done.set, trio_token=self._token)
        self._thread.join(60)

    def call(self, fn: Any, *args: Any) -> Any:
        """``await fn(*args)`` on the cluster's loop (every wait there has its own deadline)."""
        return trio.from_thread.run(fn, *args, trio_token=self._token)


@pytest.fixture
def cluster(zk: str) -> Iterator[ClusterThread]:
    with ClusterThread(zk) as running:
        yield running


def _run(fn: Any) -> Any:
    async def main() -> Any:
        with trio.fail_after(120):
            return await fn()

    return trio.run(main)


def _create(servers: str, topic: str) -> None:
    async def create() -> None:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, PARTITIONS, REPLICATION)])

    _run(create)


def _produce(servers: str, topic: str) -> dict[tuple[int, int], bytes]:
    """Sends RECORDS records: ``{(partition, offset): value}`` as the producer was told."""

    async def send() -> list[Any]:
        async with open_producer(bootstrap_servers=servers, acks="all", linger_ms=20) as producer:
            futures = [
                await producer.send(topic, b"value-%06d" % i, key=b"key-%02d" % (i % 37))
                for i in range(RECORDS)
            ]
            await producer.flush()
            return [await f for f in futures]

    metas = _run(send)
    return {(m.partition, m.offset): b"value-%06d" % i for i, m in enumerate(metas)}


def _small_tasks(spark: Any, servers: str, topic: str) -> Any:
    """The topic's records in small tasks of TASK_RECORDS (Spark runs two at a
    time), so that most are still to run when a leader goes: some 30 (a task's
    own start is most of its cost: they read at five or six a second; 120 tasks
    of 50 were some 20 s of the Kafka kill test after its kill)."""
    return (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", servers)
        .option("subscribe", topic)
        .option("maxRecordsPerPartition", str(TASK_RECORDS))
        .load()
        .selectExpr("partition", "offset", "value")
    )


def _waiting(stages: list[Any]) -> int:
    """The tasks of ``stages`` (Spark's SparkStageInfo) not yet started."""
    return sum(s.numTasks - s.numCompletedTasks - s.numActiveTasks for s in stages if s)


def _tasks_after(expected: dict[tuple[int, int], bytes], partitions: list[int]) -> int:
    """How many of the read's tasks come after the last one of ``partitions``:
    the tasks are a partition's pieces of TASK_RECORDS, in partition order
    (spark/_kafka.py's plan_ranges), and Spark starts a stage's tasks in that
    order (their index), so a read with more tasks than these still waiting
    still has a task of ``partitions`` to start."""
    counts = Counter(p for p, _ in expected)
    return sum(math.ceil(n / TASK_RECORDS) for p, n in counts.items() if p > max(partitions))


@pytest.mark.slow
def test_a_leader_stopped_mid_read_loses_and_doubles_nothing(
    spark: Any, cluster: ClusterThread
) -> None:
    assert cluster.cluster is not None
    servers = cluster.cluster.bootstrap_servers
    topic = "spark-cluster"

    _create(servers, topic)
    control = ClusterControl(cluster.cluster, topic)
    states = cluster.call(control.wait_topic_ready)
    leaders = {p: s.leader for p, s in states.items()}
    assert set(leaders.values()) == set(cluster.cluster.node_ids), leaders  # leaders everywhere

    expected = _produce(servers, topic)

    df = _small_tasks(spark, servers, topic)
    # The read runs in this thread (Spark's active session is this thread's);
    # another stops the leader once some tasks are done and most are not.
    tracker = spark.sparkContext.statusTracker()
    stopper: dict[str, Any] = {}

    def stop_a_leader() -> None:
        try:
            deadline = time.monotonic() + 120
            while True:
                assert time.monotonic() < deadline, "the read did not start"
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
                if sum(s.numCompletedTasks for s in stages if s is not None) >= 4:
                    break
                time.sleep(0.05)
            stopper["waiting"] = _waiting(stages)
            stopper["stopped"] = cluster.call(control.stop_leader_of, 0)
        except BaseException as exc:
            stopper["error"] = exc

    thread = threading.Thread(target=stop_a_leader, daemon=True)
    thread.start()
    try:
        rows = df.collect()
    finally:
        thread.join(120)
    assert "error" not in stopper, stopper["error"]
    victim = leaders[0]
    assert stopper["stopped"] == victim  # stopped while the read ran (it had tasks left)
    got = {(r.partition, r.offset): r.value for r in rows}
    assert len(rows) == len(got) == RECORDS  # nothing doubled
    assert got == expected  # nothing lost, every record where the producer was told
    # The partitions the stopped node led were read from their new leaders (a
    # task of one had yet to start when it stopped).
    moved = [p for p, leader in leaders.items() if leader == victim]
    assert stopper["waiting"] > _tasks_after(expected, moved), stopper
    assert moved and all(cluster.call(_leader_of, control, p) != victim for p in moved)


async def _leader_of(control: ClusterControl, partition: int) -> int:
    return control.states()[partition].leader


# -- a leader killed with SIGKILL: broker processes -------------------------------------------


@pytest.fixture(params=["brokerlite", "4"])
def processes(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[ClusterProcesses | KafkaNodes]:
    """Three brokers, each a process of its own (so that one can be killed -9):
    brokerlite's, or Kafka 4's shared three nodes (KRaft), the killed one
    started again after the test, for the tests after.

    brokerlite's read waits for the killed leader's ZooKeeper session to
    expire: 4 s rather than ClusterProcesses' 6 s (its length is not what is
    tested); Kafka's, for its controller to fence the broker whose heartbeats
    stopped (``broker.session.timeout.ms``: 4 s on ``kafka4_cluster``,
    tests/kafka_fixtures.py)."""
    if request.param != "brokerlite":
        nodes = KafkaNodes(request.getfixturevalue("kafka4_cluster"))
        try:
            yield nodes
        finally:
            for node in nodes.ports:
                nodes.start_node(node)
        return
    running = ClusterProcesses(
        tmp_path / "cluster",
        nodes=3,
        zookeeper_connect=request.getfixturevalue("zk"),
        settings={"zookeeper.session.timeout.ms": 4000},
    )
    try:
        running.start()
        yield running
    finally:
        running.stop()


def _partitions(servers: str, topic: str) -> dict[int, tuple[int, tuple[int, ...]]]:
    """``{partition: (leader, isr)}`` as the brokers answer now."""

    async def describe() -> dict[int, tuple[int, tuple[int, ...]]]:
        async with open_admin(bootstrap_servers=servers) as admin:
            info = (await admin.describe_topics([topic]))[topic]
        return {p.partition: (p.leader, tuple(sorted(p.isr))) for p in info.partitions}

    result: dict[int, tuple[int, tuple[int, ...]]] = _run(describe)
    return result


def _until(what: str, probe: Any, timeout: float = 60) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            found = probe()
        except TrafkaError:
            found = None
        if found:
            return found
        assert time.monotonic() < deadline, f"waited {timeout:g} s for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_a_leader_killed_mid_read_loses_and_doubles_nothing(
    spark: Any, processes: ClusterProcesses | KafkaNodes
) -> None:
    servers = processes.bootstrap_servers
    topic = fresh("spark-kill")
    nodes = set(processes.ports)

    _create(servers, topic)
    states = _until(
        "every partition led, with all three replicas in sync",
        lambda: (
            s
            if len(s := _partitions(servers, topic)) == PARTITIONS
            and all(leader in nodes and set(isr) == nodes for leader, isr in s.values())
            else None
        ),
    )
    leaders = {p: leader for p, (leader, _) in states.items()}

    expected = _produce(servers, topic)
    df = _small_tasks(spark, servers, topic)
    # As above: the read runs in this thread, another kills the leader of
    # partition 0 (a process: no clean shutdown, its connections just die) once
    # some tasks are done and most are not.
    tracker = spark.sparkContext.statusTracker()
    victim = leaders[0]
    killer: dict[str, Any] = {}

    def kill_a_leader() -> None:
        try:
            deadline = time.monotonic() + 120
            while True:
                assert time.monotonic() < deadline, "the read did not start"
                stages = [tracker.getStageInfo(s) for s in tracker.getActiveStageIds()]
                done = sum(s.numCompletedTasks for s in stages if s is not None)
                if done >= 4:
                    break
                time.sleep(0.05)
            killer["left"] = sum(s.numTasks - s.numCompletedTasks for s in stages if s)
            killer["waiting"] = _waiting(stages)
            processes.kill(victim)
        except BaseException as exc:
            killer["error"] = exc

    thread = threading.Thread(target=kill_a_leader, daemon=True)
    thread.start()
    try:
        rows = df.collect()
    finally:
        thread.join(120)
    assert "error" not in killer, killer["error"]
    assert processes.procs[victim].returncode == -signal.SIGKILL
    assert killer["left"] > 0  # killed while the read had tasks left
    got = {(r.partition, r.offset): r.value for r in rows}
    assert len(rows) == len(got) == RECORDS  # nothing doubled
    assert got == expected  # nothing lost, every record where the producer was told
    # The partitions the killed node led were read from their new leaders (a
    # task of one had yet to start when it was killed).
    moved = [p for p, leader in leaders.items() if leader == victim]
    assert killer["waiting"] > _tasks_after(expected, moved), killer
    now = _partitions(servers, topic)
    assert moved and all(now[p][0] not in (victim, -1) for p in moved), now
    if isinstance(processes, KafkaNodes):
        # Moved because the controller fenced the killed node, once its heartbeats
        # stopped; no live node lost its lease (kafka4_cluster's are short).
        assert processes.fenced() == [victim]
