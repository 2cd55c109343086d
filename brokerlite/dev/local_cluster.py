"""A whole brokerlite cluster on this machine: a private ZooKeeper and N brokers on free
loopback ports, their data in one directory. For tests, the demo and ``trafka cluster``.

Two ways to run one:

* :func:`serve_cluster`: every broker in this process's trio loop (fast to
  start; nodes can be stopped and started again, which closes their ZooKeeper
  session at once like a clean shutdown).
* :class:`ClusterProcesses`: every broker a process of its own
  (``trafka broker --zookeeper ...``), so that a test can ``kill -9`` one and
  its session expires as a crashed Kafka broker's would.

Layout of the directory: ``zookeeper/`` (the server's data and log) and
``node-<id>/`` (each broker's data directory; a process's log in
``node-<id>.log``).
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio

from trafka.codec import ApiKey

from ..config import BrokerConfig
from ..server.connections import collapse
from ..server.launch import RunningBroker, serve_broker
from .zookeeper_server import ZooKeeperServer, free_port, parent_death_signal

__all__ = ["ClusterProcesses", "LocalCluster", "free_port", "serve_cluster"]

# Shorter than Kafka's defaults so that a dead broker is noticed within seconds.
DEFAULT_SESSION_TIMEOUT_MS = 6000


@dataclasses.dataclass
class _Node:
    node_id: int
    config: BrokerConfig
    running: RunningBroker | None = None
    stop: trio.Event | None = None
    done: trio.Event | None = None


class LocalCluster:
    """A cluster served by :func:`serve_cluster`.

    Attributes:
        zookeeper: the private ZooKeeper server (None when one was given).
        zookeeper_connect: the connect string the brokers use.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        zookeeper: ZooKeeperServer | None,
        zookeeper_connect: str,
        nodes: dict[int, _Node],
    ) -> None:
        self._nursery = nursery
        self.zookeeper = zookeeper
        self.zookeeper_connect = zookeeper_connect
        self._nodes = nodes

    @property
    def node_ids(self) -> list[int]:
        return sorted(self._nodes)

    @property
    def bootstrap_servers(self) -> str:
        """``host:port`` of every running broker, comma-separated."""
        return ",".join(
            n.running.bootstrap_servers
            for _, n in sorted(self._nodes.items())
            if n.running is not None
        )

    def node(self, node_id: int) -> RunningBroker:
        """A running broker (its core is ``.broker``; touch it from this trio loop only).

        Raises:
            KeyError: no such node, or it is stopped.
        """
        running = self._nodes[node_id].running
        if running is None:
            raise KeyError(f"node {node_id} is stopped")
        return running

    def running(self, node_id: int) -> bool:
        return self._nodes[node_id].running is not None

    async def wait_formed(self, timeout: float = 30.0) -> None:
        """Wait until every running broker sees every running broker and a controller.

        Raises:
            TimeoutError: the cluster did not form in time.
        """
        with trio.move_on_after(timeout):
            while not self._formed():
                await trio.sleep(0.02)
            return
        raise TimeoutError(f"the cluster did not form within {timeout} s")

    def _formed(self) -> bool:
        up = {n for n, node in self._nodes.items() if node.running is not None}
        for n in up:
            view = self.node(n).broker.cluster
            if view is None or set(view.image.brokers) != up or view.image.controller_id not in up:
                return False
        return True

    async def stop_node(self, node_id: int) -> None:
        """Stop one broker (a clean shutdown: its registration goes at once)."""
        node = self._nodes[node_id]
        if node.stop is None or node.done is None:
            return
        node.stop.set()
        await node.done.wait()

    async def start_node(self, node_id: int) -> RunningBroker:
        """Start a stopped broker again (same id, port and data); returns once every
        running broker sees it."""
        node = self._nodes[node_id]
        if node.running is not None:
            return node.running
        running: RunningBroker = await self._nursery.start(_run_node, node)
        await self.wait_formed()
        return running


async def _run_node(node: _Node, task_status: Any = trio.TASK_STATUS_IGNORED) -> None:
    node.stop = trio.Event()
    node.done = trio.Event()
    try:
        async with serve_broker(node.config) as running:
            node.running = running
            if running.address[1] != node.config.port:
                node.config = node.config.with_overrides({"port": running.address[1]})
            task_status.started(running)
            await node.stop.wait()
    finally:
        node.running = None
        node.done.set()


@asynccontextmanager
async def serve_cluster(
    nodes: int = 3,
    *,
    data_dir: Path | str | None = None,
    zookeeper_connect: str | None = None,
    host: str = "127.0.0.1",
    node_overrides: Mapping[int, Mapping[str, Any]] | None = None,
    **overrides: Any,
) -> AsyncIterator[LocalCluster]:
    """Serve a cluster of ``nodes`` brokers (ids 1..N) for an ``async with`` block.

    Args:
        nodes: how many brokers.
        data_dir: where everything lives (a temporary directory, removed after, if None).
        zookeeper_connect: use this ZooKeeper instead of starting a private one.
        host: the brokers' listening address.
        node_overrides: node id -> settings for that node only, on top of ``overrides``
            (a node misconfigured on purpose, for instance).
        **overrides: broker settings for every node, by Python or Kafka name.

    Yields:
        The :class:`LocalCluster`.
    """
    with tempfile.TemporaryDirectory(prefix="trafka-cluster-") as tmp:
        root = Path(data_dir) if data_dir is not None else Path(tmp)
        root.mkdir(parents=True, exist_ok=True)
        zookeeper: ZooKeeperServer | None = None
        if zookeeper_connect is None:
            zookeeper = ZooKeeperServer(root / "zookeeper")
            await trio.to_thread.run_sync(zookeeper.start)
            zookeeper_connect = zookeeper.connect_string
        try:
            settings: dict[str, Any] = {
                "zookeeper_session_timeout_ms": DEFAULT_SESSION_TIMEOUT_MS,
                **overrides,
            }
            members: dict[int, _Node] = {}
            for node_id in range(1, nodes + 1):
                config = BrokerConfig(
                    host=host,
                    port=0,
                    node_id=node_id,
                    data_dir=root / f"node-{node_id}",
                    zookeeper_connect=zookeeper_connect,
                ).with_overrides({**settings, **(node_overrides or {}).get(node_id, {})})
                members[node_id] = _Node(node_id, config)
            try:
                async with trio.open_nursery() as nursery:
                    cluster = LocalCluster(nursery, zookeeper, zookeeper_connect, members)
                    try:
                        for node_id in members:
                            await nursery.start(_run_node, members[node_id])
                        await cluster.wait_formed()
                        yield cluster
                    finally:
                        for node_id in members:
                            node = members[node_id]
                            if node.stop is not None:
                                node.stop.set()
            except BaseExceptionGroup as group:
                raise collapse(group) from None
        finally:
            if zookeeper is not None:
                await trio.to_thread.run_sync(zookeeper.stop)


def cluster_metadata(
    host: str, port: int, timeout: float = 2.0, config: BrokerConfig | None = None
) -> tuple[set[int], int]:
    """The broker ids and the controller id a broker's Metadata (v1) names.

    The request goes over an inter-broker connection (the SDK's connection core):
    with ``config`` (a node's own configuration) on a listener that takes TLS or
    SASL, secured as another broker would secure it (TLS verified, then a login
    with the node's inter-broker credentials), so that the readiness check works
    on every listener kind; without it, in plaintext.

    Raises:
        OSError: the broker cannot be reached (or refused the connection's security).
        ValueError: its answer cannot be read.
    """
    if config is None:
        from ..config import BrokerConfig

        config = BrokerConfig()
    answer = trio.run(_metadata, config, host, port, timeout)
    return {b.node_id for b in answer.brokers}, answer.controller_id


async def _metadata(config: BrokerConfig, host: str, port: int, timeout: float) -> Any:
    from trafka.codec.errors import CodecError
    from trafka.codec.messages import k03_metadata as metadata

    from ..cluster.inter_broker import InterBrokerConnection

    try:
        with trio.fail_after(timeout):
            conn = await InterBrokerConnection.open(
                config, host, port, "cluster-check", f"broker at {host}:{port}"
            )
            try:
                return await conn.request(
                    ApiKey.METADATA, metadata.MetadataRequest(topics=[]), version=1
                )
            finally:
                with trio.CancelScope(shield=True):
                    await conn.aclose()
    except trio.TooSlowError:
        raise OSError(f"the broker at {host}:{port} did not answer in {timeout} s") from None
    except CodecError as exc:
        raise ValueError(str(exc)) from None


def _listener_name(settings: dict[str, Any]) -> str:
    """The listener's name in every node's ``listeners`` line: that of a ``listeners``
    setting (its address is each node's own), else the security protocol's."""
    from ..config_keys import listener_name_of

    listeners = settings.pop("listeners", None)
    named = None if listeners is None else listener_name_of(listeners)
    if named is not None:
        return named
    protocol = settings.get("security.protocol", settings.get("security_protocol"))
    return "PLAINTEXT" if protocol is None else str(protocol).strip().upper()


class ClusterProcesses:
    """A cluster whose brokers are processes (``kill -9`` works on them).

    Args:
        root: the directory for ZooKeeper's and the brokers' data.
        nodes: how many brokers (ids 1..N).
        settings: broker settings for every node (Kafka names), given as
            ``server.properties`` lines.
        zookeeper_connect: an existing ZooKeeper; None starts a private one.
        detached: start each broker in a session of its own, so that a terminal's
            Ctrl-C reaches only this process (which then stops them: :meth:`stop`), and
            have it sent SIGTERM when the thread that started it ends (Linux): call
            :meth:`start_node` from the main thread then (``trafka cluster`` does).
        broker_args: more ``trafka broker`` options for every broker.
    """

    def __init__(
        self,
        root: Path,
        nodes: int = 3,
        *,
        settings: dict[str, Any] | None = None,
        zookeeper_connect: str | None = None,
        host: str = "127.0.0.1",
        detached: bool = False,
        broker_args: tuple[str, ...] = (),
    ) -> None:
        self.root = Path(root)
        self.host = host
        self.detached = detached
        self.broker_args = broker_args
        self.settings = {
            "zookeeper.session.timeout.ms": DEFAULT_SESSION_TIMEOUT_MS,
            **(settings or {}),
        }
        self.zookeeper: ZooKeeperServer | None = None
        self._connect = zookeeper_connect
        self.ports = {n: free_port(host) for n in range(1, nodes + 1)}
        self.procs: dict[int, subprocess.Popen[bytes]] = {}
        self.listener = _listener_name(self.settings)
        # node id -> its configuration as its process reads it (the readiness check's)
        self._configs: dict[int, BrokerConfig] = {}

    @property
    def zookeeper_connect(self) -> str:
        assert self._connect is not None
        return self._connect

    @property
    def bootstrap_servers(self) -> str:
        return ",".join(f"{self.host}:{p}" for _, p in sorted(self.ports.items()))

    def start(self, timeout: float = 60.0) -> None:
        """Start ZooKeeper (unless given) and every broker; return when all serve."""
        self.root.mkdir(parents=True, exist_ok=True)
        if self._connect is None:
            self.zookeeper = ZooKeeperServer(self.root / "zookeeper")
            self.zookeeper.start()
            self._connect = self.zookeeper.connect_string
        zk_port = self.zookeeper.port if self.zookeeper is not None else None
        for node_id, port in self.ports.items():
            if port == zk_port:
                self.ports[node_id] = free_port(self.host)
        for node_id in self.ports:
            self.start_node(node_id, wait=False)
        for node_id in self.ports:
            # A port picked free can be taken before the broker binds it (the machine
            # is shared): until the first start succeeds, pick another.
            for attempt in range(3):
                try:
                    self.wait_serving(node_id, timeout)
                    break
                except RuntimeError as exc:
                    if attempt == 2 or "Address already in use" not in str(exc):
                        raise
                self.ports[node_id] = free_port(self.host)
                self.start_node(node_id, wait=False)

    def _properties(self, node_id: int) -> Path:
        path = self.root / f"node-{node_id}.properties"
        lines = [
            f"node.id={node_id}",
            f"listeners={self.listener}://{self.host}:{self.ports[node_id]}",
            f"log.dirs={self.root / f'node-{node_id}'}",
            f"zookeeper.connect={self.zookeeper_connect}",
        ]
        lines += [f"{k}={v}" for k, v in self.settings.items()]
        # The settings may hold secrets (JAAS passwords, sasl.users, key
        # passwords): the file is its owner's only, as the supervisor's state is.
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), 0o600)  # one left by an earlier run keeps its mode
            out.write("\n".join(lines) + "\n")
        self._configs[node_id] = BrokerConfig.from_properties(path)
        return path

    def start_node(self, node_id: int, *, wait: bool = True, timeout: float = 60.0) -> None:
        """Start (or restart) one broker process."""
        if node_id in self.procs and self.procs[node_id].poll() is None:
            return
        out = open(self.root / f"node-{node_id}.log", "ab")  # noqa: SIM115 - the child's
        try:
            self.procs[node_id] = subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "trafka.tools.cli",
                    "broker",
                    "--config",
                    str(self._properties(node_id)),
                    "--no-announce",
                    *self.broker_args,
                ],
                stdout=out,
                stderr=subprocess.STDOUT,
                env={**os.environ, "PYTHONUNBUFFERED": "1"},
                stdin=subprocess.DEVNULL if self.detached else None,
                start_new_session=self.detached,
                preexec_fn=parent_death_signal(signal.SIGTERM) if self.detached else None,
            )
        finally:
            out.close()
        if wait:
            self.wait_serving(node_id, timeout)

    def wait_serving(self, node_id: int, timeout: float = 60.0) -> None:
        """Wait until a broker has joined the cluster: its Metadata lists every running
        broker (itself included) and a controller.

        Raises:
            RuntimeError: it exited (with the tail of its log) or did not join in time.
        """
        deadline = time.monotonic() + timeout
        proc = self.procs[node_id]
        why = ""
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"broker {node_id} exited with {proc.returncode}:\n{self.log_tail(node_id)}"
                )
            up = {n for n, p in self.procs.items() if p.poll() is None}
            try:
                brokers, controller = cluster_metadata(
                    self.host, self.ports[node_id], config=self._configs[node_id]
                )
            except (OSError, ValueError) as exc:
                why = f" (last check: {exc})"
                time.sleep(0.05)
                continue
            if up <= brokers and controller in brokers:
                return
            time.sleep(0.05)
        raise RuntimeError(
            f"broker {node_id} did not join in {timeout} s{why}:\n{self.log_tail(node_id)}"
        )

    def log_tail(self, node_id: int, lines: int = 30) -> str:
        try:
            text = (self.root / f"node-{node_id}.log").read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def kill(self, node_id: int) -> None:
        """``kill -9`` one broker."""
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

    def stop_node(self, node_id: int, timeout: float = 30.0) -> None:
        """Stop one broker cleanly (SIGTERM)."""
        proc = self.procs.get(node_id)
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()

    def stop(self, timeout: float = 30.0) -> None:
        """Stop every broker cleanly, all at once, then ZooKeeper: SIGTERM to each,
        then wait for each (SIGKILL to those still running after ``timeout``).

        Each still makes its clean shutdown (exit status 0, its logs' clean-shutdown
        markers written): with every broker going, the controlled shutdown of each
        finds no other live in-sync replica to hand its leadership to and moves on
        at once, instead of waiting for the others as when they stop one after
        another (3 nodes: about 0.5-3 s instead of 2.5-6.6 s on a loaded machine).
        """
        running = [proc for proc in self.procs.values() if proc.poll() is None]
        for proc in running:
            proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in running:
            try:
                proc.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self.zookeeper is not None:
            self.zookeeper.stop()

    def __enter__(self) -> ClusterProcesses:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
