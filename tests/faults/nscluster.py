"""A brokerlite cluster whose ZooKeeper and brokers each run on a host of a :class:`NetLab`.

Hosts ``zk`` (one ZooKeeper server, standalone; or, with ``zookeepers=3``, an
ensemble of three on hosts ``zk1`` .. ``zk3``) and ``b1`` .. ``bN`` (``trafka broker``
processes in ZooKeeper mode, each listening on and advertising its namespace's
address, port 9092). The client host reaches all of them over the bridge.

Operations a schedule uses: :meth:`NsCluster.pause` / :meth:`NsCluster.resume`
(SIGSTOP/SIGCONT), :meth:`NsCluster.kill` (SIGKILL) and :meth:`NsCluster.start_node`
(restart on the same data), the lab's ``isolate``/``heal`` on host names, and
:meth:`NsCluster.state` / :meth:`NsCluster.wait_healthy` (what the brokers' metadata
say, through trafka's admin client from the client host).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio
from clockshift import ClockShift
from netlab import NetLab
from slowfs import SlowDisk

from trafka.brokerlite.dev.zookeeper_server import find_zookeeper
from trafka.sdk import NewTopic, open_admin

PORT = 9092
ZK_PORT = 2181
#: ZooKeeper's JVMs: one GC thread and the C1 compiler only (as the suite's shared
#: ZooKeeper, brokerlite/dev/zookeeper_server.py): the ensemble's three servers
#: are all but idle, and C2's compiling and the parallel collector's threads were
#: most of their CPU.
ZK_JVM_FLAGS = ("-Xmx128m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-XX:-UsePerfData",
                "-Dzookeeper.jmx.log4j.disable=true", "-Dzookeeper.forceSync=no")  # fmt: skip


def wait_for(what: str, probe: Any, timeout: float) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def zk_mode(address: str) -> str | None:
    """What the ZooKeeper server at ``address`` says it is (``standalone``,
    ``leader``, ``follower``), or None when it does not serve (no quorum, down)."""
    try:
        with socket.create_connection((address, ZK_PORT), timeout=1) as sock:
            sock.sendall(b"srvr")
            answer = sock.recv(4096)
    except OSError:
        return None
    for line in answer.decode(errors="replace").splitlines():
        if line.startswith("Mode: "):
            return line.removeprefix("Mode: ").strip()
    return None


def _zk_serving(address: str) -> bool | None:
    return True if zk_mode(address) is not None else None


class NsCluster:
    def __init__(
        self,
        lab: NetLab,
        root: Path,
        nodes: int = 3,
        settings: dict[str, Any] | None = None,
        zookeepers: int = 1,
        disks: bool = False,
        clocks: bool = False,
        client_timeout_ms: int = 10_000,
        client_pace_s: float = 0.01,
    ) -> None:
        self.lab = lab
        # the workload's clients' request timeout (schedules.py), which the cuts
        # between them and a leader are held past
        self.client_timeout_ms = client_timeout_ms
        # the workload's producers' pace: each sends a record every so many seconds
        self.client_pace_s = client_pace_s
        self.with_disks = disks  # each node's log dir on a slowfs (slowfs.py)
        self.disks: dict[int, SlowDisk] = {}
        # each node's wall clock movable (clockshift.py)
        self.clocks = {n: ClockShift(Path(root) / f"clock-{n}") for n in range(1, nodes + 1)
                       } if clocks else {}  # fmt: skip
        self.root = Path(root)
        self.nodes = list(range(1, nodes + 1))
        self.settings = {
            "zookeeper.session.timeout.ms": 6000,
            "replica.lag.time.max.ms": 6000,
            "min.insync.replicas": 2,
            "default.replication.factor": 3,
            "unclean.leader.election.enable": "false",
            **(settings or {}),
        }
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.zk_hosts = ["zk"] if zookeepers == 1 else [f"zk{i}" for i in range(1, zookeepers + 1)]
        self.zk_addresses = {host: lab.add_host(host) for host in self.zk_hosts}
        self.address = {n: lab.add_host(f"b{n}") for n in self.nodes}
        self.zookeepers: list[subprocess.Popen[bytes]] = []

    @property
    def zk_connect(self) -> str:
        return ",".join(f"{a}:{ZK_PORT}" for a in self.zk_addresses.values())

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.address[n]}:{PORT}" for n in self.nodes)

    def disk_path(self, n: int) -> Path:
        return self.root / f"node-{n}"

    def mount_disks(self) -> None:
        """Each node's log dir on a slowfs of its own, when the cluster has disks."""
        if not self.with_disks:
            return
        self.root.mkdir(parents=True, exist_ok=True)
        for n in self.nodes:
            with open(self.root / f"disk-{n}.log", "ab") as log:
                self.disks[n] = SlowDisk(self.disk_path(n), log)

    def start(self) -> None:
        self.mount_disks()
        self.start_zookeeper()
        for n in self.nodes:
            self.start_node(n, wait=False)
        wait_for("every broker to register", lambda: self._formed(len(self.nodes)), 120)

    def start_zookeeper(self) -> None:
        """The ZooKeeper server, or the ensemble's (each on its host; server ``i`` is
        ``zk<i>``, its quorum and election ports 2888 and 3888)."""
        self.root.mkdir(parents=True, exist_ok=True)
        java, classpath = find_zookeeper()
        ensemble = len(self.zk_hosts) > 1
        main = "QuorumPeerMain" if ensemble else "ZooKeeperServerMain"
        for i, (host, address) in enumerate(self.zk_addresses.items(), 1):
            zk_dir = self.root / host
            (zk_dir / "data").mkdir(parents=True, exist_ok=True)
            cfg = zk_dir / "zoo.cfg"
            lines = [f"tickTime=500\ndataDir={zk_dir / 'data'}\nclientPort={ZK_PORT}\n"
                     f"clientPortAddress={address}\nmaxSessionTimeout=60000\n"
                     "maxClientCnxns=0\nadmin.enableServer=false\n"
                     "4lw.commands.whitelist=srvr,stat\n"]  # fmt: skip
            if ensemble:
                (zk_dir / "data" / "myid").write_text(f"{i}\n")
                lines.append("initLimit=10\nsyncLimit=4\n")
                lines += [f"server.{j}={a}:2888:3888\n"
                          for j, a in enumerate(self.zk_addresses.values(), 1)]  # fmt: skip
            cfg.write_text("".join(lines))
            with open(zk_dir / "zookeeper.log", "ab") as log:
                self.zookeepers.append(self.lab.spawn(
                    host,
                    [java, *ZK_JVM_FLAGS, "-cp", classpath,
                     f"org.apache.zookeeper.server.{'quorum.' if ensemble else ''}{main}",
                     str(cfg)],
                    log,
                ))  # fmt: skip
        for address in self.zk_addresses.values():
            wait_for("ZooKeeper to serve", lambda a=address: _zk_serving(a), 90)

    def zk_leader(self) -> str:
        """The ensemble's leader's host."""
        modes = {h: zk_mode(a) for h, a in self.zk_addresses.items()}
        return next(h for h, mode in modes.items() if mode in ("leader", "standalone"))

    def _properties(self, n: int) -> Path:
        path = self.root / f"node-{n}.properties"
        lines = [
            f"node.id={n}",
            f"listeners=PLAINTEXT://{self.address[n]}:{PORT}",
            f"log.dirs={self.root / f'node-{n}'}",
            f"zookeeper.connect={self.zk_connect}",
            *(f"{k}={v}" for k, v in self.settings.items()),
        ]
        path.write_text("\n".join(lines) + "\n")
        return path

    def start_node(self, n: int, wait: bool = True) -> None:
        argv = [sys.executable, "-m", "trafka.tools.cli", "broker"]
        argv += ["--config", str(self._properties(n)), "--no-announce"]
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        if n in self.clocks:
            env |= self.clocks[n].env()
        with open(self.root / f"node-{n}.log", "ab") as log:
            self.procs[n] = self.lab.spawn(f"b{n}", argv, log, env=env)
        if wait:
            wait_for(f"broker {n} to register", lambda: self._formed(len(self.nodes)), 120)

    def _formed(self, count: int) -> bool | None:
        try:
            state = self.state()
        except Exception:
            return None
        return True if len(state["brokers"]) >= count and state["controller"] >= 0 else None

    def pause(self, n: int) -> None:
        self.procs[n].send_signal(signal.SIGSTOP)

    def resume(self, n: int) -> None:
        self.procs[n].send_signal(signal.SIGCONT)

    def kill(self, n: int) -> None:
        proc = self.procs[n]
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait()

    def state(self, topic: str | None = None, bootstrap: str | None = None) -> dict[str, Any]:
        """Brokers, controller and (with ``topic``) each partition's (leader, ISR), as
        the cluster's metadata answer says (asked of ``bootstrap``: a proxy, say)."""

        async def ask() -> dict[str, Any]:
            async with open_admin(
                bootstrap_servers=bootstrap or self.bootstrap_servers,
                request_timeout_ms=4000,
                default_api_timeout_ms=8000,
            ) as admin:
                cluster = await admin.describe_cluster(timeout_ms=8000)
                out: dict[str, Any] = {
                    "brokers": sorted(b.node_id for b in cluster.brokers),
                    "controller": cluster.controller_id,
                }
                if topic is not None:
                    desc = (await admin.describe_topics([topic], timeout_ms=8000))[topic]
                    out["partitions"] = {
                        p.partition: (p.leader, sorted(p.isr)) for p in desc.partitions
                    }
                return out

        return trio.run(ask)

    def create_topic(self, topic: str, partitions: int) -> None:
        async def create() -> None:
            async with open_admin(bootstrap_servers=self.bootstrap_servers) as admin:
                await admin.create_topics(
                    [NewTopic(topic, partitions, 3, configs={"min.insync.replicas": "2"})],
                    timeout_ms=30000,
                )

        trio.run(create)
        self.wait_healthy(topic, 120)

    def healthy(self, topic: str) -> dict[str, Any] | None:
        try:
            state = self.state(topic)
        except Exception:
            return None
        whole = all(
            leader >= 0 and len(isr) == len(self.nodes)
            for leader, isr in state["partitions"].values()
        )
        return state if whole and len(state["brokers"]) == len(self.nodes) else None

    def wait_healthy(self, topic: str, timeout: float) -> dict[str, Any]:
        """Wait until every broker is registered and every partition has a leader and a
        whole ISR; the state then."""
        return wait_for(f"{topic}: every ISR whole", lambda: self.healthy(topic), timeout)

    def log_tail(self, n: int, lines: int = 40) -> str:
        text = (self.root / f"node-{n}.log").read_text(errors="replace")
        return "\n".join(text.splitlines()[-lines:])

    def stop(self) -> None:
        """Everything killed (the data is thrown away: no clean shutdown needed)."""
        for disk in self.disks.values():
            disk.set("0")  # a process stuck on a stalled disk dies only once it moves
        for proc in [*self.procs.values(), *self.zookeepers]:
            if proc is not None and proc.poll() is None:
                proc.kill()
                proc.wait()
        self.unmount_disks()

    def unmount_disks(self) -> None:
        for disk in self.disks.values():
            disk.close()


class KafkaNsCluster(NsCluster):
    """The same cluster of Apache Kafka 3.9 brokers (on the namespaces' ZooKeeper), the
    control: :class:`kafka_peers.KafkaCluster` with each JVM under ``ip netns exec``."""

    def __init__(
        self,
        lab: NetLab,
        root: Path,
        nodes: int = 3,
        settings: dict[str, Any] | None = None,
        zookeepers: int = 1,
        disks: bool = False,
        clocks: bool = False,
        client_timeout_ms: int = 10_000,
        client_pace_s: float = 0.01,
    ) -> None:
        from kafka_peers import KAFKA_3, KafkaCluster

        super().__init__(lab, root, nodes, settings, zookeepers=zookeepers, disks=disks,
                         clocks=clocks, client_timeout_ms=client_timeout_ms,
                         client_pace_s=client_pace_s)  # fmt: skip
        self.kafka = KafkaCluster(
            KAFKA_3,
            self.root / "kafka",
            nodes=nodes,
            zookeeper=self.zk_connect,
            config=self.settings,
            node_hosts=self.address,
            wrap=self._wrap,
        )

    def _wrap(self, n: int) -> list[str]:
        """Node ``n``'s JVM in its namespace (and under its clock shift, if any)."""
        env = self.clocks[n].env() if n in self.clocks else {}
        return ["ip", "netns", "exec", self.lab.namespace(f"b{n}"), "env",
                *(f"{k}={v}" for k, v in env.items())]  # fmt: skip

    def disk_path(self, n: int) -> Path:
        return self.kafka.node(n).folder / "logs"

    def start(self) -> None:
        self.mount_disks()
        self.start_zookeeper()
        self.kafka.start(timeout=300)

    def start_node(self, n: int, wait: bool = True) -> None:
        self.kafka.start_node(n, timeout=300)

    def pause(self, n: int) -> None:
        self.kafka.node(n).signal(signal.SIGSTOP)

    def resume(self, n: int) -> None:
        self.kafka.node(n).signal(signal.SIGCONT)

    def kill(self, n: int) -> None:
        self.resume(n)
        self.kafka.node(n).kill()

    def log_tail(self, n: int, lines: int = 40) -> str:
        return self.kafka.node(n).log_tail(lines)

    def stop(self) -> None:
        for disk in self.disks.values():
            disk.set("0")
        for n in self.nodes:
            self.resume(n)
        self.kafka.stop()
        for proc in self.zookeepers:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        self.unmount_disks()
