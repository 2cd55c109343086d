"""The CLI's fault matrix: ``trafka`` client commands, each run as a real process,
against five faults:

(a) no broker at the address (nothing listens);
(b) a broker stopping while the command runs (the long-running ones: consume,
    produce from a file, share-consume);
(c) a partition without a leader (offline: its only replica's broker is down);
(d) a topic that does not exist;
(e) SIGINT (Ctrl-C), at a moment the command is known to be at work.

Every command must say what happened on stderr (a hang guard waits up to
``HANG_S`` for the message and fails when the process did not say it; no other
timing is asserted), exit non-zero (130 on SIGINT; a command that did what it
was asked despite the fault, such as describing an offline partition, exits
0), lose nothing acknowledged (records ``produce`` counts as delivered are in
the topic, read back) and keep serving what is reachable.

What runs where, to keep the module cheap: one two-node cluster (ZooKeeper
mode, on the worker's shared ZooKeeper) for (b) and (c), whose node 2 leads
one partition of each test topic and is stopped and started again by the
tests that need it so (its partitions go offline while it is down); one
standalone broker, which creates no topic on use, for (d) and (e) (and share
groups, which the cluster mode does not serve); a fresh standalone broker for
share-consume's (b). Every client command of ``tools/cli.py`` must have a
line in :data:`COMMANDS` (a new one fails
:func:`test_every_client_command_is_in_the_matrix` until it is given one) and
runs against (a): the long-running commands as processes, the others in this
process through click's test runner (the same code from the command line to
the connect, without some 50 process start-ups; each family runs as a process
in (e)); (c) and (d) run the commands
that touch a topic's partitions, a few as processes and the others in this
process the same way (their exit status and stderr are what they check);
(e) runs the long-running commands at work, and one command of each family
(:data:`INTERRUPTED`) while it waits for a broker: the others of a family take
the same path from the command line to the connect. Processes of (a) and (e)
run a few at a time.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import json
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import IO, Any

import click
import pytest
import trio
from click.testing import CliRunner
from terminal_sigint import sigint_as_at_a_terminal
from unique_names import names as _names

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.dev.local_cluster import ClusterProcesses, LocalCluster, serve_cluster
from trafka.brokerlite.dev.zookeeper_server import free_port
from trafka.codec.messages import k19_create_topics as ct
from trafka.sdk import (
    BrokerUnreachableError,
    KafkaConnectionError,
    NewTopic,
    TopicPartition,
    open_admin,
    open_consumer,
    open_producer,
)
from trafka.sdk.metadata import MetadataCache, PartitionInfo, TopicInfo
from trafka.tools.cli import main
from trafka.tools.cli_faults import BrokerNotices, PartitionWatch

pytestmark = pytest.mark.timeout(120)

CLI = [sys.executable, "-m", "trafka.tools.cli"]
#: How long a process may take to say what happened, or to exit: a hang guard, far
#: above what any of them needs (10 s is the promise), not a timing assertion.
HANG_S = 30.0
#: Seconds the commands wait for blocking calls (-m): -e gives up on a partition
#: it cannot reach after this long.
M = "2"


def fresh(prefix: str) -> str:
    return f"faults-{prefix}-{next(_names)}"


# -- the trackers, pure ------------------------------------------------------------------------


def _metadata(leaders: dict[int, int], offline: tuple[int, ...] = ()) -> Any:
    """A metadata cache whose topic ``t`` has these partition leaders."""
    cache = MetadataCache()
    parts = tuple(
        PartitionInfo("t", p, leader, 0, (2,) if leader < 0 else (leader,), (), offline)
        for p, leader in sorted(leaders.items())
    )
    cache.topics["t"] = TopicInfo("t", uuid.UUID(int=1), False, parts)
    return cache


def test_partition_watch_says_once_when_a_partition_goes_and_when_it_comes_back() -> None:
    said: list[str] = []
    watch = PartitionWatch(5.0, said.append, "waiting", notice=1.0)
    tps = [TopicPartition("t", 0), TopicPartition("t", 1)]
    both = _metadata({0: 1, 1: 2})
    watch.update(tps, both, {}, now=0.0)
    assert said == [] and watch.unreachable == {}
    gone = _metadata({0: 1, 1: -1}, offline=(2,))
    watch.update(tps, gone, {}, now=1.0)
    assert said == []  # a blink without a leader is no news
    watch.update(tps, gone, {}, now=2.0)
    watch.update(tps, gone, {}, now=3.0)
    reason = "it has no leader (offline: its replicas on broker(s) 2 are down)"
    assert said == [f"warning: partition t-1 is unreachable: {reason}; waiting"]
    assert watch.unreachable == {tps[1]: reason}
    assert watch.given_up(5.9) == {} and watch.given_up(6.0) == {tps[1]: reason}
    watch.update(tps, both, {}, now=7.0)
    assert said[1:] == ["partition t-1 is reachable again"] and watch.given_up(99.0) == {}


def test_partition_watch_counts_a_leader_out_of_reach() -> None:
    said: list[str] = []
    watch = PartitionWatch(0.0, said.append, notice=0.0)
    tp = TopicPartition("t", 0)
    watch.update([tp], _metadata({0: 3}), {3: "down"}, now=0.0)
    assert said == ["warning: partition t-0 is unreachable: its leader, broker 3, is unreachable"]
    # A topic metadata does not know yet is waited for, not a fault.
    watch.update([TopicPartition("other", 0)], _metadata({0: 3}), {3: "down"}, now=1.0)
    assert watch.unreachable == {}


def test_broker_notices_say_down_then_back() -> None:
    said: list[str] = []
    notices = BrokerNotices(said.append)
    cause = KafkaConnectionError("node 2 closed the connection")
    notices(BrokerUnreachableError(2, "h", 9092, cause))
    notices.check({2: "still"})
    notices.check({})
    notices.check({})
    assert said == [
        "warning: broker 2 at h:9092 is unreachable: node 2 closed the connection (retrying)",
        "broker 2 at h:9092 is reachable again",
    ]


# -- processes --------------------------------------------------------------------------------


@dataclasses.dataclass
class Done:
    """A finished process: exit status and what it wrote."""

    rc: int
    out: str
    err: str

    def said(self, pattern: str) -> bool:
        return re.search(pattern, self.err) is not None


def _environment() -> dict[str, str]:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    env.pop("TRAFKA_BOOTSTRAP_SERVERS", None)
    return env


def run(args: list[str], bootstrap: str, stdin: bytes = b"") -> Done:
    """Run a command to its end (failing the test if it hangs)."""
    proc = subprocess.Popen(
        [*CLI, *args, "-b", bootstrap],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environment(),
        preexec_fn=sigint_as_at_a_terminal,
    )
    try:
        out, err = proc.communicate(stdin, timeout=HANG_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"trafka {' '.join(args)} hung; stderr: {err.decode()[-2000:]}")
    return Done(proc.returncode, out.decode(errors="replace"), err.decode(errors="replace"))


class Running:
    """A command left running: its stdout and stderr are read by threads, so that
    a test can wait for a line (:meth:`expect_out`, :meth:`expect_err`)."""

    def __init__(self, args: list[str], bootstrap: str, stdin: int | IO[Any] | None = None):
        self.args = args
        self.proc = subprocess.Popen(
            [*CLI, *args, "-b", bootstrap],
            stdin=stdin if stdin is not None else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_environment(),
            preexec_fn=sigint_as_at_a_terminal,  # (e) interrupts it
        )
        self._lines: dict[str, list[str]] = {"out": [], "err": []}
        self._changed = threading.Condition()
        self._readers = [
            threading.Thread(target=self._read, args=(name, stream), daemon=True)
            for name, stream in (("out", self.proc.stdout), ("err", self.proc.stderr))
        ]
        self._paused = threading.Event()  # set: the stdout reader stops reading
        self._pause_at: int | None = None  # pause once stdout has this many lines
        for reader in self._readers:
            reader.start()

    def _read(self, name: str, stream: IO[bytes] | None) -> None:
        assert stream is not None
        while True:
            if name == "out":
                while self._paused.is_set():
                    time.sleep(0.02)
            line = stream.readline()
            if not line:
                break
            with self._changed:
                lines = self._lines[name]
                lines.append(line.decode(errors="replace"))
                if name == "out" and self._pause_at is not None and len(lines) >= self._pause_at:
                    self._pause_at = None
                    self._paused.set()
                self._changed.notify_all()

    def pause_stdout_after(self, count: int) -> None:
        """Stop reading stdout once it has ``count`` lines: the command then blocks
        writing when the pipe is full."""
        with self._changed:
            if len(self._lines["out"]) >= count:
                self._paused.set()
            else:
                self._pause_at = count

    def resume_stdout(self) -> None:
        with self._changed:
            self._pause_at = None
            self._paused.clear()

    @property
    def out(self) -> str:
        with self._changed:
            return "".join(self._lines["out"])

    @property
    def err(self) -> str:
        with self._changed:
            return "".join(self._lines["err"])

    def _expect(self, name: str, done: Callable[[list[str]], bool], what: str) -> None:
        deadline = time.monotonic() + HANG_S
        with self._changed:
            while not done(self._lines[name]):
                left = deadline - time.monotonic()
                if left <= 0 or (self.proc.poll() is not None and not self._readers_alive()):
                    self.kill()
                    pytest.fail(
                        f"trafka {' '.join(self.args)} did not {what} "
                        f"(exit {self.proc.poll()}); stderr:\n{''.join(self._lines['err'])}"
                    )
                self._changed.wait(min(left, 0.2))

    def _readers_alive(self) -> bool:
        return any(r.is_alive() for r in self._readers)

    def expect_err(self, pattern: str) -> str:
        """Wait for a stderr line matching ``pattern``; the line."""
        found: list[str] = []

        def done(lines: list[str]) -> bool:
            found[:] = [line for line in lines if re.search(pattern, line)]
            return bool(found)

        self._expect("err", done, f"say /{pattern}/ on stderr")
        return found[0]

    def expect_line(self, text: str) -> None:
        """Wait until stdout has the line ``text``."""
        self._expect("out", lambda lines: f"{text}\n" in lines, f"print {text!r}")

    def expect_out(self, count: int) -> list[str]:
        """Wait until stdout has at least ``count`` lines; all of them so far."""
        self._expect("out", lambda lines: len(lines) >= count, f"print {count} lines")
        return self.out.splitlines()

    def signal(self, signum: signal.Signals) -> None:
        self.proc.send_signal(signum)

    def wait(self) -> Done:
        """Wait for the exit (failing the test if it hangs)."""
        self.resume_stdout()
        try:
            self.proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            self.kill()
            pytest.fail(f"trafka {' '.join(self.args)} did not exit; stderr:\n{self.err}")
        for reader in self._readers:
            reader.join(HANG_S)
        return Done(self.proc.returncode, self.out, self.err)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def running(
    args: list[str], bootstrap: str, stdin: int | IO[Any] | None = None
) -> Iterator[Running]:
    proc = Running(args, bootstrap, stdin)
    try:
        yield proc
    finally:
        proc.kill()


def no_traceback(done: Done) -> None:
    assert "Traceback" not in done.err, done.err


CLI_PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def documented(done: Done) -> None:
    """What the command said of its SIGINT is docs/cli.md's, word for word (its
    count with N for the numbers)."""
    page = CLI_PAGE.read_text()
    lines = done.err.splitlines()
    said = [i for i, line in enumerate(lines) if line.startswith(("SIGINT: ", "interrupted ("))]
    assert said, done.err
    assert f"`{lines[said[0]]}`" in page, f"docs/cli.md does not show {lines[said[0]]!r}"
    after = [re.sub(r"\d+", "N", line) for line in lines[said[0] + 1 :]]
    counts = [line for line in after if re.fullmatch(r"N records consumed( and accepted)?", line)]
    assert all(f"`{line}`" in page for line in counts), counts


# -- data ------------------------------------------------------------------------------------


def produce_values(bootstrap: str, topic: str, values: dict[int, list[bytes]], **cfg: Any) -> None:
    """Write ``values`` to their partitions and wait for the acknowledgements."""

    async def go() -> None:
        async with open_producer(bootstrap_servers=bootstrap, **cfg) as producer:
            for partition, vs in values.items():
                for v in vs:
                    await producer.send(topic, v, partition=partition)

    trio.run(go)


def read_back(bootstrap: str, topic: str, partition: int) -> list[str]:
    """Every value of one partition (the records really in the topic)."""
    tp = TopicPartition(topic, partition)

    async def go() -> list[str]:
        async with open_consumer(bootstrap_servers=bootstrap) as consumer:
            consumer.assign([tp])
            end = (await consumer.end_offsets([tp]))[tp]
            consumer.seek(tp, 0)
            values: list[str] = []
            with trio.fail_after(HANG_S):
                while await consumer.position(tp) < end:
                    batch = await consumer.getmany(timeout_ms=200)
                    values += [r.value.decode() for r in batch.get(tp, [])]
            return values

    return trio.run(go)


def commit(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    async def go() -> None:
        async with open_consumer(bootstrap_servers=bootstrap, group_id=group) as consumer:
            consumer.assign(list(offsets))
            await consumer.commit(offsets)

    trio.run(go)


def committed(bootstrap: str, group: str) -> dict[tuple[str, int], int]:
    async def go() -> dict[tuple[str, int], int]:
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            found = await admin.list_consumer_group_offsets(group)
            return {(tp.topic, tp.partition): offset for tp, offset in found.items()}

    return trio.run(go)


# -- the cluster -----------------------------------------------------------------------------

CLUSTER_SETTINGS: dict[str, Any] = {
    "group_initial_rebalance_delay_ms": 0,
    "offsets_topic_num_partitions": 2,
    "transaction_state_log_num_partitions": 2,
    # As kcat is used against clusters that refuse it: an unknown topic stays unknown.
    "auto_create_topics": False,
}


class TwoNodes:
    """Two brokerlite nodes on ZooKeeper, in a trio loop of their own thread.

    Node 1 stays up and is every command's bootstrap server; node 2 leads
    partition 1 of each topic made by :meth:`create` (partition 0: node 1), so
    that those partitions are offline while it is down."""

    def __init__(self, zookeeper_connect: str, data_dir: Path) -> None:
        self._connect = zookeeper_connect
        self._data_dir = data_dir
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self._cluster: LocalCluster | None = None
        self._token: Any = None
        self._quit: trio.Event | None = None
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def _serve(self) -> None:
        async def main() -> None:
            async with serve_cluster(
                2,
                data_dir=self._data_dir,
                zookeeper_connect=self._connect,
                **CLUSTER_SETTINGS,
            ) as cluster:
                self._cluster = cluster
                self._token = trio.lowlevel.current_trio_token()
                self._quit = trio.Event()
                self._ready.set()
                await self._quit.wait()

        try:
            trio.run(main)
        except BaseException as exc:  # reported to the test thread
            self._error = exc
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(90) or self._error is not None:
            raise RuntimeError(f"the cluster did not start: {self._error!r}")
        self.bootstrap = self._in_loop(lambda: self._cluster_().node(1).bootstrap_servers)

    def close(self) -> None:
        if self._quit is not None:
            trio.from_thread.run_sync(self._quit.set, trio_token=self._token)
        self._thread.join(60)

    def _cluster_(self) -> LocalCluster:
        assert self._cluster is not None
        return self._cluster

    def _in_loop(self, fn: Callable[[], Any]) -> Any:
        return trio.from_thread.run_sync(fn, trio_token=self._token)

    def _until(self, what: str, done: Callable[[], bool]) -> None:
        deadline = time.monotonic() + 60
        while not self._in_loop(done):
            if time.monotonic() > deadline:
                raise AssertionError(f"the cluster did not converge: {what}")
            time.sleep(0.05)

    def _image(self) -> Any:
        return self._cluster_().node(1).broker.cluster.image

    def node2_up(self) -> bool:
        return bool(self._in_loop(lambda: self._cluster_().running(2)))

    def stop_node2(self) -> None:
        """Stop node 2 (a clean shutdown); return once node 1 sees its partitions
        offline and every leadership it could move moved."""
        trio.from_thread.run(self._cluster_().stop_node, 2, trio_token=self._token)

        def moved() -> bool:
            image = self._image()
            return 2 not in image.brokers and all(s.leader != 2 for s in image.states.values())

        self._until("node 2 stopped", moved)

    def start_node2(self) -> None:
        """Start node 2 again; return once it leads its partitions again."""
        trio.from_thread.run(self._cluster_().start_node, 2, trio_token=self._token)

        def back() -> bool:
            image = self._image()
            return 2 in image.brokers and all(s.leader >= 0 for s in image.states.values())

        self._until("node 2 back", back)

    def ensure(self, node2: bool) -> None:
        if self.node2_up() != node2:
            (self.start_node2 if node2 else self.stop_node2)()

    def group_coordinated_by(self, node: int) -> str:
        """A new group id whose coordinator is ``node`` now: the leader of its
        ``__consumer_offsets`` partition (which has a replica on each node; the
        topic must exist). Leaders go back to their preferred replicas first: a
        node that was stopped leads nothing until then."""
        partitions = CLUSTER_SETTINGS["offsets_topic_num_partitions"]
        tps = [("__consumer_offsets", p) for p in range(partitions)]

        async def elect() -> None:
            async with open_admin(bootstrap_servers=self.bootstrap) as admin:
                await admin.elect_leaders(tps, election_type="preferred")

        def leaders() -> dict[int, int]:
            return {tp[1]: self._image().states[tp].leader for tp in tps}

        def in_sync() -> bool:
            return all(node in self._image().states[tp].isr for tp in tps)

        deadline = time.monotonic() + 60
        while node not in self._in_loop(leaders).values():
            # A preferred replica leads again once it is back in sync.
            if self._in_loop(in_sync):
                trio.run(elect)
            assert time.monotonic() < deadline, f"node {node} leads no offsets partition"
            time.sleep(0.1)
        led = {p for p, leader in self._in_loop(leaders).items() if leader == node}
        for _ in range(1000):
            group = fresh("group")
            if coordinator_partition(group, partitions) in led:
                return group
        raise AssertionError(f"no group id hashes to partitions {led}")

    def create(self, topic: str) -> None:
        """A topic of two partitions of one replica: 0 on node 1, 1 on node 2."""
        create_placed(self.bootstrap, topic, [1, 2])


def create_placed(bootstrap: str, topic: str, leaders: list[int]) -> None:
    """A topic whose partition ``p`` has one replica, on broker ``leaders[p]``;
    returns once metadata names those leaders."""

    async def go() -> None:
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            await admin.cluster.refresh_metadata()
            controller = admin.cluster.metadata.controller_id
            conn = await admin.cluster.connection(controller)
            C = ct.CreateTopicsRequest
            placed = [C.CreatableReplicaAssignment(partition_index=p, broker_ids=[node])
                      for p, node in enumerate(leaders)]  # fmt: skip
            request = C(
                topics=[
                    C.CreatableTopic(
                        name=topic, num_partitions=-1, replication_factor=-1, assignments=placed
                    )
                ],
                timeout_ms=30_000,
            )
            answer = await conn.request(19, request)
            assert answer.topics[0].error_code == 0, answer
            with trio.fail_after(30):
                while True:
                    infos = await admin.describe_topics([topic])
                    if [p.leader for p in infos[topic].partitions] == leaders:
                        return
                    await trio.sleep(0.05)

    trio.run(go)


@dataclasses.dataclass(frozen=True)
class Offline:
    """What the cluster holds for (c): ``topic``'s partition 1 has no leader
    (node 2 down) and partition 0 holds ``values``; ``group`` committed
    offset 2 of both partitions."""

    topic: str
    values: list[str]
    group: str


@pytest.fixture(scope="module")
def cluster(module_zk: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TwoNodes]:
    nodes = TwoNodes(module_zk, tmp_path_factory.mktemp("cli-faults"))
    nodes.start()
    try:
        yield nodes
    finally:
        nodes.close()


@pytest.fixture(scope="module")
def offline_data(cluster: TwoNodes) -> Offline:
    """Made while node 2 is up (a topic cannot be placed on a broker that is down)."""
    cluster.ensure(node2=True)
    data = Offline(fresh("offline"), [f"on-node-1-{i}" for i in range(5)], fresh("group"))
    cluster.create(data.topic)
    produce_values(
        cluster.bootstrap,
        data.topic,
        {0: [v.encode() for v in data.values], 1: [b"on-node-2-%d" % i for i in range(5)]},
    )
    commit(cluster.bootstrap, data.group, {TopicPartition(data.topic, p): 2 for p in (0, 1)})
    return data


@pytest.fixture
def offline(cluster: TwoNodes, offline_data: Offline) -> Offline:
    cluster.ensure(node2=False)
    return offline_data


@pytest.fixture
def both_up(cluster: TwoNodes, offline_data: Offline) -> TwoNodes:
    # offline_data first: it must exist before any test stops node 2.
    cluster.ensure(node2=True)
    return cluster


# -- standalone brokers ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def single(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    """One broker that creates no topic on use; never stopped."""
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("cli-faults-single"),
        group_initial_rebalance_delay_ms=0,
        auto_create_topics=False,
    ) as running_broker:
        yield running_broker


def make_topic(bootstrap: str, topic: str) -> None:
    async def go() -> None:
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(topic, 1)])

    trio.run(go)


def share_group(bootstrap: str) -> str:
    """A share group that starts at the beginning of the log."""
    group = fresh("share")

    async def go() -> None:
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            await admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})

    trio.run(go)
    return group


# -- the commands ----------------------------------------------------------------------------

#: Commands that are not clients of a cluster (offline tools, servers, the demo,
#: zeroconf discovery): outside the matrix.
# (schemas: a Schema Registry client, not a Kafka cluster's)
NOT_CLIENTS = {
    "decode",
    "demo",
    "broker",
    "cluster",
    "proxy",
    "console",
    "discover",
    "log",
    "schemas",
}

_PLAN = '{"version": 1, "partitions": [{"topic": "t", "partition": 0, "replicas": [1]}]}'
_TOPICS = '{"version": 1, "topics": [{"topic": "t"}]}'

#: Every client command, as run against a cluster: its arguments (``{plan}`` and
#: ``{topics}`` are files written for it) and its standard input.
COMMANDS: dict[str, tuple[list[str], bytes]] = {
    "acls add": (["--allow", "--principal", "User:a", "--operation", "Read", "--topic", "t"], b""),
    "acls list": ([], b""),
    "acls remove": (["--principal", "User:a", "--topic", "t"], b""),
    "client-metrics": (["--list"], b""),
    "consume": (["t", "-e"], b""),
    "elect-leaders": (["--all-topic-partitions"], b""),
    "features describe": ([], b""),
    "features disable": (["--feature", "group.version"], b""),
    "features downgrade": (["--feature", "group.version=0"], b""),
    "features upgrade": (["--feature", "group.version=1"], b""),
    "groups configs": (["g"], b""),
    "groups delete": (["g"], b""),
    "groups delete-offsets": (["g", "-t", "t"], b""),
    "groups describe": (["g"], b""),
    "groups list": ([], b""),
    "groups remove-members": (["g", "--all"], b""),
    "groups reset-offsets": (["g", "-t", "t", "--to-earliest"], b""),
    "groups set-config": (["g", "share.auto.offset.reset=earliest"], b""),
    "log-dirs describe": ([], b""),
    "log-dirs move": (["t", "0", "1", "/tmp/nowhere"], b""),
    "log-dirs reopen": (["t", "0", "1"], b""),
    "log-dirs replica": (["t", "0", "1"], b""),
    "produce": (["t"], b"one\ntwo\n"),
    "quotas alter": (["--client-id", "c", "--add-config", "producer_byte_rate=1024"], b""),
    "quotas describe": ([], b""),
    "reassign execute": (["--reassignment-json-file", "{plan}"], b""),
    "reassign generate": (["--topics-to-move-json-file", "{topics}", "--broker-list", "1"], b""),
    "reassign verify": (["--reassignment-json-file", "{plan}"], b""),
    "share-consume": (["t", "-G", "g"], b""),
    "tokens create": ([], b""),
    "tokens describe": ([], b""),
    "tokens expire": (["--hmac", "AAAA", "--expiry-time-period", "-1"], b""),
    "tokens renew": (["--hmac", "AAAA"], b""),
    "topics add-partitions": (["t", "-p", "2"], b""),
    "topics alter": (["t", "--add-config", "retention.ms=1000"], b""),
    "topics create": (["t"], b""),
    "topics delete": (["t"], b""),
    "topics describe": (["t"], b""),
    "topics list": ([], b""),
    "transactions abort": (
        [
            "-t",
            "t",
            "-p",
            "0",
            "--producer-id",
            "1",
            "--producer-epoch",
            "0",
            "--coordinator-epoch",
            "0",
        ],
        b"",
    ),
    "transactions describe": (["tx"], b""),
    "transactions describe-producers": (["t"], b""),
    "transactions fence": (["tx"], b""),
    "transactions find-hanging": ([], b""),
    "transactions list": ([], b""),
    "users delete": (["u"], b""),
    "users describe": (["u"], b""),
    "users list": ([], b""),
    "users set-password": (["u", "--password-stdin"], b"a secret\n"),
}


#: One command of each family (each module of tools/, which share one path from
#: the command to the SDK's connect): run as a process in (e), where SIGINT is
#: handled above them, in the command group, or by the long-running commands
#: themselves (all three among these).
INTERRUPTED = sorted({name.split()[0]: name for name in sorted(COMMANDS, reverse=True)}.values())
#: The commands (a) runs as processes: the long-running ones, which read their
#: input or print records from threads of their own and end with a summary.
#: Every family runs as a process in (e) already; the rest of (a) runs in this
#: process (a process start is about a second of CPU).
DOWN_AS_PROCESSES = ("consume", "produce", "share-consume")


def client_commands() -> list[str]:
    """Every leaf command of ``trafka`` that talks to a cluster."""
    ctx = click.Context(main)
    found: list[str] = []

    def walk(cmd: click.Command, path: list[str]) -> None:
        if isinstance(cmd, click.Group):
            for name in cmd.list_commands(ctx):
                if path or name not in NOT_CLIENTS:
                    sub = cmd.get_command(ctx, name)
                    assert sub is not None
                    walk(sub, [*path, name])
        else:
            found.append(" ".join(path))

    walk(main, [])
    return found


def command_args(name: str, files: Path) -> tuple[list[str], bytes]:
    args, stdin = COMMANDS[name]
    plan, topics = files / "plan.json", files / "topics.json"
    if not plan.exists():
        plan.write_text(_PLAN)
        topics.write_text(_TOPICS)
    filled = [a.format(plan=plan, topics=topics) for a in args]
    return [*name.split(), *filled], stdin


def test_every_client_command_is_in_the_matrix() -> None:
    assert sorted(client_commands()) == sorted(COMMANDS)


def run_many(jobs: dict[str, Callable[[], Done]], width: int = 3) -> dict[str, Done]:
    """Run ``jobs`` a few at a time (each starts a process and waits for it)."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=width) as pool:
        futures = {name: pool.submit(job) for name, job in jobs.items()}
        return {name: f.result() for name, f in futures.items()}


# -- (a) no broker at the address ------------------------------------------------------------


def run_in_process(args: list[str], bootstrap: str, stdin: bytes = b"") -> Done:
    """Run a command in this process, through click's test runner: the same code
    from the command line to the connect and the error as :func:`run`, without a
    process's start-up (about a second of CPU each). What the runner caught is
    written out as a process would have (a traceback on stderr)."""
    result = CliRunner().invoke(
        main, [*args, "-b", bootstrap], input=stdin, env={"TRAFKA_BOOTSTRAP_SERVERS": None}
    )
    err = result.stderr
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        err += "Traceback (caught in process):\n" + "".join(
            traceback.format_exception(result.exception)
        )
    return Done(result.exit_code, result.stdout, err)


@pytest.fixture(scope="module")
def down_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    """Every command, run once against a port nothing listens on: the
    long-running ones (:data:`DOWN_AS_PROCESSES`) as processes of their own
    (their exit status and stderr as a shell sees them), the others in this
    process (the same path from the command line to the connect; each family
    runs as a process in (e))."""
    files = tmp_path_factory.mktemp("cli-faults-files")
    nowhere = f"127.0.0.1:{free_port('127.0.0.1')}"

    def job(name: str) -> Callable[[], Done]:
        args, stdin = command_args(name, files)
        return lambda: run(args, nowhere, stdin)

    results = run_many({name: job(name) for name in DOWN_AS_PROCESSES})
    for name in sorted(set(COMMANDS) - set(DOWN_AS_PROCESSES)):
        args, stdin = command_args(name, files)
        results[name] = run_in_process(args, nowhere, stdin)
    return results


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_a_no_broker(name: str, down_results: dict[str, Done]) -> None:
    done = down_results[name]
    assert done.rc == 1, done
    assert done.said(r"^Error: no broker available \(bootstrap 127\.0\.0\.1:\d+\)"), done.err
    assert done.out == ""
    no_traceback(done)


# -- (b) a broker stopping mid-command -------------------------------------------------------


def test_b_consume_e_reads_the_rest_when_a_broker_stops(both_up: TwoNodes) -> None:
    cluster = both_up
    topic = fresh("b-consume")
    cluster.create(topic)
    # 1 KiB records, one per batch and fetch: the reading takes many fetches, and
    # stdout (not read for a while) fills after some 60 of them.
    pad = b"." * 1000
    values = {p: [b"p%d-%03d-" % (p, i) + pad for i in range(150)] for p in (0, 1)}
    produce_values(cluster.bootstrap, topic, values, linger_ms=0, batch_size=1100)
    tuning = ["-X", "max.partition.fetch.bytes=1024", "-X", "fetch.max.bytes=1024"]
    with running(["consume", topic, "-e", "-m", M, *tuning], cluster.bootstrap) as proc:
        proc.pause_stdout_after(1)
        proc.expect_out(1)  # and it blocks writing soon, most of both partitions unread
        cluster.stop_node2()
        proc.resume_stdout()
        proc.expect_err(r"partition .*-1 is unreachable|broker 2 at \S+ is unreachable")
        done = proc.wait()
    assert done.rc == 1, done
    assert f"Error: partition {topic}-1 was not read to its end" in done.err
    printed = done.out.splitlines()
    # Everything node 1 holds was printed, in order; of node 2's, what came before.
    assert [v for v in printed if v.startswith("p0-")] == [v.decode() for v in values[0]]
    p1 = [v for v in printed if v.startswith("p1-")]
    assert p1 == [v.decode() for v in values[1][: len(p1)]] and len(p1) < 150
    no_traceback(done)


def test_b_consume_group_says_a_broker_left_and_keeps_serving(both_up: TwoNodes) -> None:
    cluster = both_up
    # Node 2 coordinates the group too: the coordinator goes away with it.
    topic, group = fresh("b-group"), cluster.group_coordinated_by(2)
    cluster.create(topic)
    produce_values(
        cluster.bootstrap, topic, {p: [b"p%d-%d" % (p, i) for i in range(3)] for p in (0, 1)}
    )
    with running(["consume", topic, "-G", group, "-m", M], cluster.bootstrap) as proc:
        assert sorted(proc.expect_out(6)) == sorted(f"p{p}-{i}" for p in (0, 1) for i in range(3))
        cluster.stop_node2()
        proc.expect_err(r"broker 2 at \S+ is unreachable|partition .*-1 is unreachable")
        # Node 1's partition is still read (the group may rebalance meanwhile,
        # with its new coordinator).
        produce_values(cluster.bootstrap, topic, {0: [b"p0-after"]})
        proc.expect_line("p0-after")
        proc.signal(signal.SIGINT)
        done = proc.wait()
    assert done.rc == 130, done
    assert "SIGINT: stopping and committing" in done.err
    # What it printed of the partition it could reach is committed.
    assert committed(cluster.bootstrap, group)[(topic, 0)] == 4
    no_traceback(done)


def test_b_produce_counts_only_what_was_acknowledged_when_its_broker_stops(
    both_up: TwoNodes, tmp_path: Path
) -> None:
    cluster = both_up
    topic = fresh("b-produce")
    cluster.create(topic)
    fifo = tmp_path / "input"
    os.mkfifo(fifo)
    lines = [f"line-{i}" for i in range(100)]
    fast = ["-X", "delivery.timeout.ms=3000", "-X", "request.timeout.ms=1000", "-X", "linger.ms=0"]
    with running(["produce", topic, "-l", str(fifo), "-p", "1", *fast], cluster.bootstrap) as proc:
        with open(fifo, "w") as feed:
            feed.write("".join(f"{v}\n" for v in lines[:50]))
            feed.flush()
            # Some records delivered before the stop (partition 1 holds some).
            deadline = time.monotonic() + HANG_S
            while end_offset(cluster.bootstrap, topic, partition=1) == 0:
                assert time.monotonic() < deadline, "nothing was delivered before the stop"
                time.sleep(0.05)
            cluster.stop_node2()
            feed.write("".join(f"{v}\n" for v in lines[50:]))
        proc.expect_err(r"broker 2 at \S+ is unreachable|partition .*-1 is unreachable")
        done = proc.wait()
    assert done.rc == 1, done
    summary = re.search(r"(\d+) of 100 messages delivered", done.err)
    assert summary, done.err
    delivered = int(summary.group(1))
    assert delivered < 100
    cluster.start_node2()
    # Nothing counted as delivered is missing; nothing is there twice or out of order.
    written = read_back(cluster.bootstrap, topic, 1)
    assert written == lines[: len(written)] and len(written) >= delivered
    no_traceback(done)


def test_b_share_consume_says_its_broker_stopped(tmp_path: Path) -> None:
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=tmp_path, group_initial_rebalance_delay_ms=0
    ) as broker:
        bootstrap = broker.bootstrap_servers
        topic = fresh("b-share")
        make_topic(bootstrap, topic)
        group = share_group(bootstrap)
        produce_values(bootstrap, topic, {0: [b"s%d" % i for i in range(3)]})
        proc = Running(["share-consume", topic, "-G", group, "-m", M], bootstrap)
        try:
            assert proc.expect_out(3) == ["s0", "s1", "s2"]
        except BaseException:
            proc.kill()
            raise
    # The broker is gone.
    try:
        proc.expect_err(r"broker \d+ at \S+ is unreachable")
        proc.signal(signal.SIGINT)
        done = proc.wait()
    finally:
        proc.kill()
    assert done.rc == 130, done
    no_traceback(done)


# -- (c) a partition without a leader --------------------------------------------------------


def test_c_topics_describe_shows_the_partition_offline(offline: Offline, cluster: TwoNodes) -> None:
    # A process (as a shell runs it): the other commands of (c) run in this one.
    done = run(["topics", "describe", offline.topic], cluster.bootstrap)
    assert done.rc == 0, done
    assert done.said(rf"warning: offline \(no leader\): {offline.topic}-1")
    rows = {line.split()[0]: line.split() for line in done.out.splitlines()[2:]}
    # As kafka-topics --describe: "Leader: none", its replica and ISR as they were.
    assert rows["1"][:6] == ["1", "none", "2", "2", "-", "-"]
    assert rows["0"][:6] == ["0", "1", "1", "1", "0", "5"]
    as_json = run_in_process(["topics", "describe", offline.topic, "--json"], cluster.bootstrap)
    (desc,) = json.loads(as_json.out)
    assert [(p["leader"], p["latest_offset"]) for p in desc["partitions"]] == [(1, 5), (-1, None)]
    no_traceback(done)


def test_c_topics_describe_reports_list_the_offline_partition(
    offline: Offline, cluster: TwoNodes
) -> None:
    # kafka-topics.sh --describe's report options (TopicCommand): a partition
    # without a leader is "unavailable" and "under min ISR"; a partition with its
    # leader and every replica in sync is neither.
    for flag in ("--unavailable-partitions", "--under-min-isr-partitions"):
        done = run_in_process(
            ["topics", "describe", offline.topic, flag, "--json"], cluster.bootstrap
        )
        assert done.rc == 0, done
        listed = [(r["topic"], r["partition"], r["leader"]) for r in json.loads(done.out)]
        assert listed == [(offline.topic, 1, -1)], (flag, done.out)
    # Every topic when none is named: the offline one is found among them.
    everything = run_in_process(
        ["topics", "describe", "--unavailable-partitions"], cluster.bootstrap
    )
    assert everything.rc == 0, everything
    rows = [line.split()[:3] for line in everything.out.splitlines()[1:]]
    # (Other tests' topics have partitions on node 2 as well.)
    assert [offline.topic, "1", "none"] in rows, everything.out
    assert not [r for r in rows if r[0] == offline.topic and r[1] != "1"], everything.out
    no_traceback(everything)


def test_c_topics_describe_reports_a_replica_out_of_sync(both_up: TwoNodes) -> None:
    # Two replicas, one on the broker that stops: the partition keeps its leader
    # and loses an in-sync replica, so kafka-topics' rules list it as
    # under-replicated and not as unavailable.
    topic = fresh("two-replicas")

    async def create_and_wait(isr: list[int]) -> None:
        async with open_admin(bootstrap_servers=both_up.bootstrap) as admin:
            if isr == [1, 2]:
                await admin.create_topics([NewTopic(topic, 1, 2)])
            with trio.fail_after(HANG_S):
                while True:
                    infos = await admin.describe_topics([topic])
                    (part,) = infos[topic].partitions
                    if sorted(part.isr) == isr and part.leader in isr:
                        return
                    await trio.sleep(0.1)

    trio.run(create_and_wait, [1, 2])
    assert (
        run_in_process(
            ["topics", "describe", topic, "--under-replicated-partitions"], both_up.bootstrap
        ).out
        == ""
    )
    both_up.ensure(node2=False)
    trio.run(create_and_wait, [1])
    done = run_in_process(
        ["topics", "describe", topic, "--under-replicated-partitions", "--json"], both_up.bootstrap
    )
    assert done.rc == 0, done
    assert [
        (r["partition"], r["leader"], r["isr"], r["reports"]) for r in json.loads(done.out)
    ] == [(0, 1, [1], ["under-replicated"])]
    unavailable = run_in_process(
        ["topics", "describe", topic, "--unavailable-partitions"], both_up.bootstrap
    )
    assert unavailable.rc == 0 and unavailable.out == "", unavailable


@pytest.mark.parametrize("group", [False, True], ids=["assigned", "group"])
def test_c_consume_e_prints_what_it_can_and_names_the_rest(
    offline: Offline, cluster: TwoNodes, group: bool
) -> None:
    extra = ["-G", fresh("group")] if group else []
    # One of the two a process (as a shell runs it), the other in this one.
    go = run_in_process if group else run
    done = go(["consume", offline.topic, "-e", "-m", M, *extra], cluster.bootstrap)
    assert done.rc == 1, done
    assert done.out.splitlines() == offline.values
    assert done.said(rf"warning: partition {offline.topic}-1 is unreachable: it has no leader")
    assert done.said(rf"Error: partition {offline.topic}-1 was not read to its end")
    no_traceback(done)


def named_leaders(bootstrap: str, topic: str) -> list[int]:
    """The leaders metadata names for ``topic``'s partitions, asked of the
    bootstrap broker (the one connection an admin has when it opens)."""

    async def go() -> list[int]:
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            with trio.fail_after(HANG_S):
                await admin.cluster.refresh_metadata([topic])
            return [p.leader for p in admin.cluster.metadata.topics[topic].partitions]

    return trio.run(go)


def test_c_consume_e_names_leaders_that_metadata_names_but_do_not_answer(
    zk: str, tmp_path: Path
) -> None:
    """Leaders metadata still names (ZooKeeper has not expired their sessions)
    but that cannot serve: broker 2 killed (connections refused) and broker 3
    hung (SIGSTOP: the kernel accepts its connections, nothing answers, as a
    frozen host). ``consume -e`` prints partition 0 to its end, names the other
    two and their brokers, and exits 1. A hung broker's connect is bounded by
    ``socket.connection.setup.timeout.ms`` (5 s in the commands), the ApiVersions
    handshake included (librdkafka's rule), and is the client's task, not its
    caller's: before, each ListOffsets' deadline (``-m``) cancelled the
    handshake unreported, and the command waited in silence for as long as the
    broker was hung."""
    # Sessions outlive the test: metadata keeps naming brokers 2 and 3.
    settings = {"zookeeper.session.timeout.ms": 120_000, "auto.create.topics.enable": "false"}
    nodes = ClusterProcesses(tmp_path, 3, settings=settings, zookeeper_connect=zk)
    nodes.start()
    try:
        bootstrap = f"127.0.0.1:{nodes.ports[1]}"
        topic = fresh("named-dead")
        create_placed(bootstrap, topic, [1, 2, 3])
        values = {p: [b"p%d-%d" % (p, i) for i in range(3)] for p in range(3)}
        produce_values(bootstrap, topic, values)
        nodes.kill(2)
        nodes.procs[3].send_signal(signal.SIGSTOP)
        done = run_in_process(["consume", topic, "-e", "-m", M], bootstrap)
        assert named_leaders(bootstrap, topic) == [1, 2, 3]  # still
    finally:
        nodes.kill(3)  # SIGKILL ends a stopped process too
        nodes.stop()
    assert done.rc == 1, done
    assert done.out.splitlines() == ["p0-0", "p0-1", "p0-2"]
    assert done.said(r"warning: broker 2 at \S+ is unreachable: cannot connect"), done.err
    assert done.said(r"warning: broker 3 at \S+ is unreachable"), done.err
    for p in (1, 2):
        why = rf"its leader, broker {p + 1}, is unreachable"
        assert done.said(rf"warning: partition {topic}-{p} is unreachable: {why}"), done.err
        assert done.said(rf"Error: partition {topic}-{p} was not read to its end: {why}")
    no_traceback(done)


def test_c_produce_to_the_offline_partition_fails_and_counts_nothing(
    offline: Offline, cluster: TwoNodes
) -> None:
    fast = ["-X", "delivery.timeout.ms=2000", "-X", "request.timeout.ms=1000"]
    done = run_in_process(
        ["produce", offline.topic, "-p", "1", *fast], cluster.bootstrap, b"x\ny\n"
    )
    assert done.rc == 1, done
    assert done.said(rf"warning: partition {offline.topic}-1 is unreachable: it has no leader")
    assert done.said(rf"0 of 2 messages delivered to {offline.topic}")
    no_traceback(done)


def test_c_produce_without_a_partition_uses_the_online_one(
    offline: Offline, cluster: TwoNodes
) -> None:
    done = run_in_process(["produce", offline.topic], cluster.bootstrap, b"extra\n")
    assert done.rc == 0, done
    assert done.said(rf"1 of 1 messages delivered to {offline.topic}")
    assert read_back(cluster.bootstrap, offline.topic, 0)[-1] == "extra"
    no_traceback(done)


def test_c_groups_describe_shows_the_lag_it_cannot_know(
    offline: Offline, cluster: TwoNodes
) -> None:
    done = run_in_process(["groups", "describe", offline.group, "--json"], cluster.bootstrap)
    assert done.rc == 0, done
    assert done.said(rf"warning: the lag of {offline.topic}-1 is unknown: .*LEADER_NOT_AVAILABLE")
    (desc,) = json.loads(done.out)
    by_partition = {r["partition"]: (r["current_offset"], r["lag"]) for r in desc["partitions"]}
    assert by_partition[1] == (2, None) and by_partition[0][0] == 2
    no_traceback(done)


def test_c_groups_reset_offsets_refuses_at_once(offline: Offline, cluster: TwoNodes) -> None:
    args = ["groups", "reset-offsets", offline.group, "-t", offline.topic, "--to-earliest"]
    done = run_in_process([*args, "--execute"], cluster.bootstrap)
    assert done.rc == 1, done
    assert done.said(rf"cannot plan the reset, nothing changed: the offsets of {offline.topic}-1")
    assert committed(cluster.bootstrap, offline.group) == {
        (offline.topic, 0): 2,
        (offline.topic, 1): 2,
    }
    no_traceback(done)


def test_c_transactions_describe_producers_names_the_partition(
    offline: Offline, cluster: TwoNodes
) -> None:
    done = run_in_process(
        ["transactions", "describe-producers", offline.topic, "--json"], cluster.bootstrap
    )
    assert done.rc == 1, done
    assert done.said(rf"Error: partition {offline.topic}-1 not described: .*LEADER_NOT_AVAILABLE")
    assert {r["partition"] for r in json.loads(done.out)} <= {0}
    no_traceback(done)


def test_c_elect_leaders_says_why_none_was_elected(offline: Offline, cluster: TwoNodes) -> None:
    args = ["elect-leaders", "--topic", offline.topic, "--partition", "1"]
    done = run_in_process([*args, "--election-type", "unclean"], cluster.bootstrap)
    assert done.rc == 1, done
    assert done.said(rf"Error: no leader elected for {offline.topic}-1")
    no_traceback(done)


@pytest.mark.parametrize(
    "args",
    [["topics", "list"], ["log-dirs", "describe"], ["groups", "list"]],
    ids=" ".join,
)
def test_c_commands_that_do_not_need_the_partition_serve(
    offline: Offline, cluster: TwoNodes, args: list[str]
) -> None:
    done = run_in_process(args, cluster.bootstrap)
    assert done.rc == 0, done
    no_traceback(done)


def test_c_console_pages_render_the_partition_offline(offline: Offline, cluster: TwoNodes) -> None:
    port = free_port("127.0.0.1")
    base = f"http://127.0.0.1:{port}"
    with running(["console", "--listen", f"127.0.0.1:{port}"], cluster.bootstrap) as proc:
        deadline = time.monotonic() + HANG_S
        while True:
            try:
                urllib.request.urlopen(base + "/healthz", timeout=5).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.proc.poll() is not None:
                    pytest.fail(f"the console did not serve: {proc.err}")
                time.sleep(0.1)
        pages = {}
        for path in ["/", "/topics", f"/topics/{offline.topic}",
                     f"/topics/{offline.topic}/messages", f"/groups/{offline.group}"]:  # fmt: skip
            with urllib.request.urlopen(base + path, timeout=HANG_S) as page:
                assert page.status == 200, path
                pages[path] = page.read().decode()
    topic_page = pages[f"/topics/{offline.topic}"]
    assert '<td class="n bad">none</td>' in topic_page
    assert "cannot be read now: no leader" in pages[f"/topics/{offline.topic}/messages"]
    assert all(v in pages[f"/topics/{offline.topic}/messages"] for v in offline.values)


# -- (d) a topic that does not exist ---------------------------------------------------------

UNKNOWN = "no-such-topic"
#: Commands naming a topic, with the topic left to fill in, and what they say.
UNKNOWN_TOPIC: dict[str, tuple[list[str], bytes, str]] = {
    "produce": (["produce", UNKNOWN], b"x\n", r"no such topic: no-such-topic"),
    "consume": (["consume", UNKNOWN, "-e"], b"", r"no such topic: no-such-topic"),
    "consume -G": (["consume", UNKNOWN, "-G", "g"], b"", r"no such topic: no-such-topic"),
    "share-consume": (["share-consume", UNKNOWN, "-G", "g"], b"", r"no such topic"),
    "topics describe": (["topics", "describe", UNKNOWN], b"", r"UNKNOWN_TOPIC_OR_PARTITION"),
    "topics delete": (["topics", "delete", UNKNOWN], b"", r"UNKNOWN_TOPIC_OR_PARTITION"),
    "topics alter": (
        ["topics", "alter", UNKNOWN, "-c", "retention.ms=1000"],
        b"",
        r"UNKNOWN_TOPIC_OR_PARTITION",
    ),
    "topics add-partitions": (
        ["topics", "add-partitions", UNKNOWN, "-p", "2"],
        b"",
        r"UNKNOWN_TOPIC_OR_PARTITION",
    ),
    "groups reset-offsets": (
        ["groups", "reset-offsets", "g", "-t", UNKNOWN, "--to-earliest"],
        b"",
        r"UNKNOWN_TOPIC_OR_PARTITION",
    ),
    "groups delete-offsets": (
        ["groups", "delete-offsets", "g", "-t", UNKNOWN],
        b"",
        r"UNKNOWN_TOPIC_OR_PARTITION",
    ),
    "transactions describe-producers": (
        ["transactions", "describe-producers", UNKNOWN],
        b"",
        r"UNKNOWN_TOPIC_OR_PARTITION",
    ),
    "transactions abort": (
        [
            "transactions",
            "abort",
            "-t",
            UNKNOWN,
            "-p",
            "0",
            "--producer-id",
            "1",
            "--producer-epoch",
            "0",
            "--coordinator-epoch",
            "0",
        ],
        b"",
        r"UNKNOWN_TOPIC_OR_PARTITION",
    ),
    "log-dirs replica": (["log-dirs", "replica", UNKNOWN, "0", "1"], b"", r"no replica of"),
    "log-dirs reopen": (["log-dirs", "reopen", UNKNOWN, "0", "1"], b"", r"no replica of"),
    "elect-leaders": (
        ["elect-leaders", "--topic", UNKNOWN, "--partition", "0"],
        b"",
        r"no leader elected for no-such-topic-0: .*UNKNOWN_TOPIC_OR_PARTITION",
    ),
}


#: The command of (d) run as a process (as a shell runs it); the others run in
#: this process, the same path from the command line to the broker's answer.
UNKNOWN_TOPIC_PROCESS = "consume"


@pytest.mark.parametrize("name", sorted(UNKNOWN_TOPIC))
def test_d_unknown_topic(name: str, single: RunningBroker) -> None:
    args, stdin, said = UNKNOWN_TOPIC[name]
    go = run if name == UNKNOWN_TOPIC_PROCESS else run_in_process
    done = go([*args, "-m", M], single.bootstrap_servers, stdin)
    assert done.rc == 1, done
    assert done.said(said), done.err
    no_traceback(done)


def test_d_nothing_created_the_unknown_topic(single: RunningBroker) -> None:
    async def names() -> dict[str, int]:
        async with open_admin(bootstrap_servers=single.bootstrap_servers) as admin:
            found: dict[str, int] = await admin.list_topics()
            return found

    assert UNKNOWN not in trio.run(names)


# -- (e) SIGINT ------------------------------------------------------------------------------


@pytest.mark.parametrize("group", [False, True], ids=["assigned", "group"])
def test_e_consume_stops_on_sigint(single: RunningBroker, group: bool) -> None:
    bootstrap = single.bootstrap_servers
    topic = fresh("e-consume")
    make_topic(bootstrap, topic)
    produce_values(bootstrap, topic, {0: [b"v%d" % i for i in range(4)]})
    name = fresh("group")
    extra = ["-G", name, "-o", "beginning"] if group else []
    with running(["consume", topic, *extra], bootstrap) as proc:
        assert proc.expect_out(4) == ["v0", "v1", "v2", "v3"]
        proc.signal(signal.SIGINT)
        done = proc.wait()
    assert done.rc == 130, done
    assert done.said(r"^SIGINT: stopping") and "4 records consumed" in done.err
    if group:
        assert committed(bootstrap, name) == {(topic, 0): 4}
    no_traceback(done)
    documented(done)


def end_offset(bootstrap: str, topic: str, partition: int = 0) -> int:
    tp = TopicPartition(topic, partition)

    async def go() -> int:
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            found = await admin.list_offsets({tp: "latest"})
            hit = found[tp]
            return hit[0] if hit else 0

    return trio.run(go)


class Feed(threading.Thread):
    """Writes numbered lines into a FIFO, without end, until :meth:`stop` or the
    reader closes it (what the reader left no room for is dropped: it stopped
    reading)."""

    def __init__(self, fifo: Path) -> None:
        super().__init__(daemon=True)
        self.fifo = fifo
        self._done = threading.Event()

    def run(self) -> None:
        fd = os.open(self.fifo, os.O_WRONLY)  # blocks until the command opens it
        os.set_blocking(fd, False)
        n, pending = 0, b""
        try:
            while not self._done.is_set():
                if not pending:
                    pending = "".join(f"line-{n + i}\n" for i in range(100)).encode()
                    n += 100
                try:
                    pending = pending[os.write(fd, pending) :]  # maybe a part of it
                except BlockingIOError:
                    time.sleep(0.005)
                except BrokenPipeError:
                    return  # the command closed its input: it stopped reading
        finally:
            os.close(fd)

    def stop(self) -> None:
        self._done.set()
        self.join(HANG_S)


@pytest.mark.parametrize("after", [1_000, 5_000, 20_000])
def test_e_produce_counts_exactly_what_it_delivered(
    single: RunningBroker, tmp_path: Path, after: int
) -> None:
    """Ctrl-C while records flow in and out (once the topic holds ``after`` of
    them): the count is exactly what the topic holds, and its records are the
    input's first ones."""
    bootstrap = single.bootstrap_servers
    topic = fresh("e-produce")
    make_topic(bootstrap, topic)
    fifo = tmp_path / "input"
    os.mkfifo(fifo)
    feed = Feed(fifo)
    with running(["produce", topic, "-l", str(fifo)], bootstrap) as proc:
        feed.start()
        try:
            deadline = time.monotonic() + HANG_S
            while end_offset(bootstrap, topic) < after:
                assert time.monotonic() < deadline, f"the topic never held {after} records"
                time.sleep(0.05)
            proc.signal(signal.SIGINT)
            proc.expect_err(r"^SIGINT: delivering what was read")
        finally:
            feed.stop()
        done = proc.wait()
    assert done.rc == 130, done
    summary = re.search(r"(\d+) of (\d+) messages delivered", done.err)
    assert summary and summary.group(1) == summary.group(2), done.err
    delivered = int(summary.group(1))
    assert delivered >= after
    written = read_back(bootstrap, topic, 0)
    assert len(written) == delivered
    assert written == [f"line-{i}" for i in range(delivered)]
    no_traceback(done)
    documented(done)


def test_e_share_consume_stops_on_sigint(single: RunningBroker) -> None:
    bootstrap = single.bootstrap_servers
    topic = fresh("e-share")
    make_topic(bootstrap, topic)
    group = share_group(bootstrap)
    produce_values(bootstrap, topic, {0: [b"s0", b"s1"]})
    with running(["share-consume", topic, "-G", group], bootstrap) as proc:
        assert proc.expect_out(2) == ["s0", "s1"]
        proc.signal(signal.SIGINT)
        done = proc.wait()
    assert done.rc == 130, done
    assert done.said(r"^SIGINT: committing") and "2 records consumed" in done.err
    no_traceback(done)
    documented(done)


@pytest.fixture(scope="module")
def interrupted_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Done]:
    """Commands interrupted while they wait for a broker that accepted the
    connection and never answers (so each is known to be at work)."""
    files = tmp_path_factory.mktemp("cli-faults-files")

    def job(name: str) -> Callable[[], Done]:
        args, stdin = command_args(name, files)

        def interrupt() -> Done:
            with socket.create_server(("127.0.0.1", 0), backlog=4) as hole:
                bootstrap = f"127.0.0.1:{hole.getsockname()[1]}"
                with tempfile.TemporaryFile() as stdin_file:
                    stdin_file.write(stdin)
                    stdin_file.seek(0)
                    return interrupt_at(args, bootstrap, stdin_file, hole)

        return interrupt

    return run_many({name: job(name) for name in INTERRUPTED})


def interrupt_at(args: list[str], bootstrap: str, stdin: IO[bytes], hole: socket.socket) -> Done:
    """Run a command, and SIGINT it once it connected to ``hole``.

    The command's connection setup timeout is far above the hang guard: it is
    still waiting for ``hole`` when the signal comes, however slowly a loaded
    machine lets this thread send it (with the commands' 5 s default, a late
    signal once met a command ending on its timeout, inside trio's shutdown)."""
    args = [*args, "-X", "socket.connection.setup.timeout.ms=120000"]
    with running(args, bootstrap, stdin) as proc:
        deadline = time.monotonic() + HANG_S
        while True:
            hole.settimeout(max(0.0, deadline - time.monotonic()))
            try:
                conn, _ = hole.accept()
            except TimeoutError:
                proc.kill()
                return Done(-1, proc.out, "never connected: " + proc.err)
            # A stale client of an earlier test in this process (a pooled
            # connection retrying a dead broker whose port the hole now has)
            # may connect first: only the command's own connection counts.
            if connected_from(proc.proc.pid, conn):
                break
            conn.close()
        with conn:
            proc.signal(signal.SIGINT)
            return proc.wait()


def connected_from(pid: int, conn: socket.socket) -> bool:
    """Whether the peer of an accepted loopback connection is a socket of ``pid``
    (Linux: the peer's socket inode in /proc/net/tcp, among the process's fds)."""
    here, there = conn.getsockname()[1], conn.getpeername()[1]
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, remote = fields[1], fields[2]
        if int(local.split(":")[1], 16) == there and int(remote.split(":")[1], 16) == here:
            target = f"socket:[{fields[9]}]"
            break
    else:
        return False
    fds = Path(f"/proc/{pid}/fd")
    with contextlib.suppress(OSError):
        for fd in fds.iterdir():
            with contextlib.suppress(OSError):
                if os.readlink(fd) == target:
                    return True
    return False


@pytest.mark.parametrize("name", INTERRUPTED)
def test_e_sigint_while_waiting_for_a_broker(
    name: str, interrupted_results: dict[str, Done]
) -> None:
    done = interrupted_results[name]
    assert done.rc == 130, done
    assert done.said(r"^(interrupted \(SIGINT\)|SIGINT: )"), done.err
    no_traceback(done)
    documented(done)
