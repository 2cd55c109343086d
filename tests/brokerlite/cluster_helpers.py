"""A three-node brokerlite cluster for client interop tests, and the checks they share.

The cluster runs in a trio loop (:func:`run_with_cluster`); the test's flow runs
in that loop too and drives a client through the async :class:`Client`
interface. Blocking clients (librdkafka, kafka-python, kcat) are adapted with
:class:`InThread`, which runs each call in a worker thread; asyncio clients run
on a private event loop in a thread of their own (:class:`AsyncioThread`). What
the flow learns of the cluster (partition states, logs) it reads from the brokers'
cores in the trio loop, which is the only place they may be touched.

Records are numbered: record ``seq`` has key ``key-<seq % KEYS>`` and value
``value-<seq>``, so that a consumed record tells its key, its place in the order
it was sent, and whether it was sent at all.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import json
import threading
import time
from collections.abc import Awaitable, Callable, Coroutine, Iterable
from pathlib import Path
from typing import Any, Protocol, TypeVar

import trio

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.cluster.zk_layout import PartitionState
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.codec.framing import FrameReader
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response_frame, encode_request

NODES = 3
PARTITIONS = 6  # two leaders per node, as the controller spreads them
REPLICATION = 3
KEYS = 37
OFFSETS_PARTITIONS = 3
# What any wait on the cluster may take before the test fails.
WAIT_S = 30.0
CLUSTER_SETTINGS: dict[str, Any] = {
    "group_initial_rebalance_delay_ms": 0,
    # Three partitions of __consumer_offsets (RF 3) instead of 50: one less
    # thing for the brokers to set up when a client uses a group.
    "offsets_topic_num_partitions": OFFSETS_PARTITIONS,
}

_T = TypeVar("_T")


def run(test: Callable[[], Awaitable[Any]], deadline: float = 90) -> None:
    """Run a trio test function within ``deadline`` seconds."""

    async def main() -> None:
        with trio.fail_after(deadline):
            await test()

    trio.run(main)


async def until(check: Callable[[], Any], what: str, timeout: float = WAIT_S) -> Any:
    """Wait until ``check()`` is truthy (the cluster converges asynchronously); its value."""
    with trio.move_on_after(timeout):
        while not (result := check()):
            await trio.sleep(0.05)
        return result
    raise AssertionError(f"not within {timeout:g} s: {what}")


def wait_for(what: str, probe: Callable[[], _T | None], timeout: float) -> _T:
    """Poll ``probe`` (blocking, for tests around broker processes) until it returns
    something other than None; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        result = probe()
        if result is not None:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.2)


# -- records ------------------------------------------------------------------------------------


def change_notifications(client: Any) -> list[Any]:
    """The documents of ``/config/changes``, in order, through a started kazoo client."""
    return [
        json.loads(client.get(f"/config/changes/{c}")[0])
        for c in sorted(client.get_children("/config/changes"))
    ]


def records(start: int, count: int) -> list[tuple[bytes, bytes]]:
    """``(key, value)`` of records ``start`` .. ``start + count - 1``."""
    return [
        (b"key-%02d" % (seq % KEYS), b"value-%06d" % seq) for seq in range(start, start + count)
    ]


def seq_of(value: bytes) -> int:
    return int(value.rsplit(b"-", 1)[1])


@dataclasses.dataclass(frozen=True, slots=True)
class Consumed:
    """A record as a consumer returned it (the tests send no null keys or values)."""

    partition: int
    offset: int
    key: bytes
    value: bytes


#: ``value -> (partition, offset)`` as the producer reported; None for clients
#: that do not report (kcat).
Deliveries = dict[bytes, tuple[int, int]] | None
#: A group's committed offset per partition, as the client reads it back; None for
#: clients that cannot (kcat).
Committed = dict[int, int | None] | None


def check_consumed(
    sent: list[tuple[bytes, bytes]], consumed: list[Consumed], deliveries: Deliveries
) -> None:
    """Every record sent was consumed exactly once, each partition's records in the
    order they were sent at consecutive offsets from 0, each key in one partition,
    and (when the producer reported positions) where the producer was told."""
    values = [c.value for c in consumed]
    assert len(values) == len(set(values)), "a record was consumed twice"
    key_of = dict((v, k) for k, v in sent)
    assert set(values) == set(key_of), (
        f"missing {sorted(set(key_of) - set(values))[:5]}, "
        f"unexpected {sorted(set(values) - set(key_of))[:5]}"
    )
    by_partition: dict[int, list[Consumed]] = {}
    partitions_of_key: dict[bytes, set[int]] = {}
    for c in consumed:
        assert c.key == key_of[c.value], c
        by_partition.setdefault(c.partition, []).append(c)
        partitions_of_key.setdefault(c.key, set()).add(c.partition)
    assert set(by_partition) == set(range(PARTITIONS)), "the keys did not reach every partition"
    for partition, got in by_partition.items():
        assert [c.offset for c in got] == list(range(len(got))), (
            f"partition {partition}: offsets {[c.offset for c in got][:20]}..."
        )
        seqs = [seq_of(c.value) for c in got]
        assert seqs == sorted(seqs), f"partition {partition}: records out of the order sent"
    assert all(len(ps) == 1 for ps in partitions_of_key.values()), partitions_of_key
    if deliveries is not None:
        assert set(deliveries) == set(key_of)
        for c in consumed:
            assert deliveries[c.value] == (c.partition, c.offset), c


# -- metadata -----------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionView:
    leader: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class MetadataView:
    """What a client's metadata says of the cluster and the topic."""

    brokers: frozenset[int]
    partitions: dict[int, PartitionView]


def check_metadata(
    seen: MetadataView,
    states: dict[int, PartitionState],
    live: Iterable[int],
    *,
    balanced: bool = False,
) -> None:
    """A client's metadata matches the cluster: the live brokers, and every partition's
    leader and ISR as ZooKeeper has them, with all replicas listed. ``balanced``:
    every live broker leads a partition and every ISR is complete."""
    live = frozenset(live)
    assert seen.brokers == live, seen
    assert set(seen.partitions) == set(range(PARTITIONS)), seen
    for p, view in seen.partitions.items():
        state = states[p]
        assert sorted(view.replicas) == list(range(1, NODES + 1)), (p, view)
        assert view.leader == state.leader and view.leader in live, (p, view, state)
        assert sorted(view.isr) == sorted(state.isr), (p, view, state)
        assert set(view.isr) <= live and view.leader in view.isr, (p, view)
        if balanced:
            assert len(view.isr) == REPLICATION, (p, view)
    if balanced:
        assert {v.leader for v in seen.partitions.values()} == live, seen


# -- clients ------------------------------------------------------------------------------------


class Client(Protocol):
    """One client library, as the flows drive it (all calls bounded by the client's
    own timeouts)."""

    name: str

    async def create_topic(self) -> None: ...

    async def describe(self) -> MetadataView: ...

    async def send(self, batch: list[tuple[bytes, bytes]]) -> None:
        """Hand records to the producer (acks=all) without waiting for them."""

    async def flush(self) -> Deliveries:
        """Wait until every record sent is acknowledged (failing on any error)."""

    async def consume(self, count: int) -> list[Consumed]:
        """Read every partition from the beginning (no group) until ``count`` records came."""

    async def consume_group(self, group: str, count: int) -> tuple[list[Consumed], Committed]:
        """Subscribe in ``group`` (new: it starts at the earliest offsets), read until
        ``count`` records came, commit, and read the committed offsets back."""

    async def aclose(self) -> None: ...


class InThread:
    """A :class:`Client` made of a blocking one: every call runs in a worker thread
    (abandoned, not waited for, when the test's deadline passes)."""

    def __init__(self, blocking: Any) -> None:
        self.blocking = blocking
        self.name = blocking.name

    async def _run(self, fn: Callable[..., _T], *args: Any) -> _T:
        return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

    async def create_topic(self) -> None:
        await self._run(self.blocking.create_topic)

    async def describe(self) -> MetadataView:
        return await self._run(self.blocking.describe)

    async def send(self, batch: list[tuple[bytes, bytes]]) -> None:
        await self._run(self.blocking.send, batch)

    async def flush(self) -> Deliveries:
        return await self._run(self.blocking.flush)

    async def consume(self, count: int) -> list[Consumed]:
        return await self._run(self.blocking.consume, count)

    async def consume_group(self, group: str, count: int) -> tuple[list[Consumed], Committed]:
        return await self._run(self.blocking.consume_group, group, count)

    async def aclose(self) -> None:
        with trio.CancelScope(shield=True):
            await self._run(self.blocking.close)


class AsyncioThread:
    """An asyncio event loop running in a thread of its own, for asyncio clients
    whose objects must outlive one call."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, _T], timeout: float = 60.0) -> _T:
        """Run ``coro`` on the loop; block until it is done (at most ``timeout`` s)."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(10)
        if not self._thread.is_alive():
            self.loop.close()


# -- the cluster --------------------------------------------------------------------------------


class ClusterControl:
    """The cluster as a flow sees it (call from the trio loop only)."""

    def __init__(self, cluster: LocalCluster, topic: str) -> None:
        self.cluster = cluster
        self.topic = topic
        # Every node's address, the stopped ones' too: clients keep their bootstrap list.
        self.bootstrap_servers = cluster.bootstrap_servers
        self.all_nodes = frozenset(cluster.node_ids)

    @property
    def live(self) -> frozenset[int]:
        return frozenset(n for n in self.cluster.node_ids if self.cluster.running(n))

    def _images(self) -> list[Any]:
        return [self.cluster.node(n).broker.cluster.image for n in sorted(self.live)]

    async def _until(self, what: str, done: Callable[[], bool]) -> None:
        try:
            with trio.fail_after(WAIT_S):
                while not done():
                    await trio.sleep(0.05)
        except trio.TooSlowError:
            raise AssertionError(f"not within {WAIT_S:g} s: {what}: {self.describe()}") from None

    def describe(self) -> str:
        """Each live node's view of the topic, for failure messages."""
        out = []
        for n in sorted(self.live):
            broker = self.cluster.node(n).broker
            image = broker.cluster.image
            parts = []
            for p in range(PARTITIONS):
                s = image.states.get((self.topic, p))
                try:
                    plog = broker.logs.partition(self.topic, p)
                    ends = f"leo={plog.log_end_offset} hw={plog.high_watermark}"
                except Exception as exc:
                    ends = repr(exc)
                parts.append(f"p{p}:{s and (s.leader, s.isr, s.leader_epoch)} {ends}")
            out.append(f"node {n} (brokers {sorted(image.brokers)}): " + "; ".join(parts))
        return "\n".join(out)

    async def wait_formed(self) -> None:
        """Until every node's image lists every live broker (``serve_cluster`` returns
        as soon as each node serves, before they know each other)."""
        await self._until(
            "the cluster forms",
            lambda: all(set(i.brokers) == self.live for i in self._images()),
        )

    def states(self) -> dict[int, PartitionState]:
        """The topic's partition states, as the first live node has them."""
        image = self._images()[0]
        return {p: image.states[(self.topic, p)] for p in range(PARTITIONS)}

    def _agreed(self, check: Callable[[PartitionState], bool]) -> bool:
        images = self._images()
        for p in range(PARTITIONS):
            states = [i.states.get((self.topic, p)) for i in images]
            if any(s is None or s != states[0] or not check(s) for s in states):
                return False
        return True

    async def wait_topic_ready(self) -> dict[int, PartitionState]:
        """Until every live node has the topic with a leader and a full ISR everywhere."""
        await self._until(
            "the topic is online with full ISRs on every node",
            lambda: self._agreed(lambda s: s.leader >= 0 and len(s.isr) == REPLICATION),
        )
        return self.states()

    def controller_partition(self) -> int:
        """A partition the controller leads (every node leads some)."""
        controller = self._images()[0].controller_id
        return min(p for p, s in self.states().items() if s.leader == controller)

    async def stop_leader_of(self, partition: int) -> int:
        """Stop the broker leading ``partition``; wait until the other nodes moved every
        leadership and ISR place off it. Returns its id."""
        leader = self.states()[partition].leader
        await self.cluster.stop_node(leader)
        await self._until(
            f"leadership moves off node {leader}",
            lambda: (
                all(leader not in i.brokers for i in self._images())
                and self._agreed(lambda s: s.leader not in (-1, leader) and leader not in s.isr)
            ),
        )
        return leader

    def _in_sync(self) -> bool:
        if not self._agreed(lambda s: len(s.isr) == REPLICATION):
            return False
        for p, state in self.states().items():
            leader_log = self.cluster.node(state.leader).broker.logs.partition(self.topic, p)
            hw = leader_log.high_watermark
            for n in self.all_nodes:
                plog = self.cluster.node(n).broker.logs.partition(self.topic, p)
                if plog.log_end_offset != hw or plog.high_watermark != hw:
                    return False
        return True

    async def start_and_wait_in_sync(self, node: int) -> None:
        """Start ``node`` again; wait until every ISR is full again and every replica
        has caught up with its leader (log end and high watermark)."""
        await self.cluster.start_node(node)
        await self.wait_formed()
        await self._until(f"node {node} catches up and rejoins every ISR", self._in_sync)

    def check_replicas_identical(self) -> None:
        """Every replica of every partition holds the same bytes up to the high watermark
        (and the same leader epoch history)."""
        for p in range(PARTITIONS):
            logs = {
                n: self.cluster.node(n).broker.logs.partition(self.topic, p)
                for n in sorted(self.all_nodes)
            }
            hws = {n: plog.high_watermark for n, plog in logs.items()}
            assert len(set(hws.values())) == 1, (p, hws)
            hw = hws[min(hws)]
            contents = {
                n: plog.read(plog.log_start_offset, 1 << 30, upper_bound=hw).tobytes()
                for n, plog in logs.items()
            }
            starts = {n: plog.log_start_offset for n, plog in logs.items()}
            assert len(set(starts.values())) == 1, (p, starts)
            assert hw > 0 and all(contents.values()), (p, hws)
            reference = contents[min(contents)]
            for n, data in contents.items():
                assert data == reference, (
                    f"partition {p}: node {n}'s log differs from node {min(contents)}'s "
                    f"({len(data)} vs {len(reference)} bytes up to offset {hw})"
                )
            epochs = {n: plog.epoch_entries for n, plog in logs.items()}
            assert all(e == epochs[min(epochs)] for e in epochs.values()), (p, epochs)

    def coordinator(self, group: str) -> int:
        """The node coordinating ``group`` (the leader of its ``__consumer_offsets``
        partition), as every live node agrees; -1 while they do not."""
        nodes = {self.cluster.node(n).broker.cluster.coordinator(group) for n in self.live}
        return nodes.pop() if len(nodes) == 1 else -1

    def high_watermarks(self) -> dict[int, int]:
        """Each partition's high watermark at its leader."""
        return {
            p: self.cluster.node(s.leader).broker.logs.partition(self.topic, p).high_watermark
            for p, s in self.states().items()
        }


def group_per_offsets_partition(prefix: str) -> list[str]:
    """Group ids whose state lives in ``__consumer_offsets`` partitions 0, 1, 2, ...
    (Kafka's hash of the group id): one coordinated by each leader of that topic."""
    out: dict[int, str] = {}
    for i in itertools.count():
        name = f"{prefix}-group-{i}"
        out.setdefault(coordinator_partition(name, OFFSETS_PARTITIONS), name)
        if len(out) == OFFSETS_PARTITIONS:
            return [out[p] for p in range(OFFSETS_PARTITIONS)]
    raise AssertionError("unreachable")


def _leaves(group: BaseExceptionGroup[Any]) -> list[BaseException]:
    out: list[BaseException] = []
    for exc in group.exceptions:
        out.extend(_leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc])
    return out


def run_with_cluster(
    zookeeper_connect: str,
    data_dir: Path,
    topic: str,
    flow: Callable[[ClusterControl], Awaitable[None]],
    *,
    timeout: float,
) -> None:
    """Serve a cluster of ``NODES`` brokers on ``zookeeper_connect`` and run ``flow``
    in its trio loop; the flow must finish within ``timeout`` seconds."""

    async def main() -> None:
        deadline = trio.current_time() + timeout
        # Starting and stopping the brokers have a bound of their own.
        with trio.fail_after(timeout + 30):
            async with serve_cluster(
                NODES, zookeeper_connect=zookeeper_connect, data_dir=data_dir, **CLUSTER_SETTINGS
            ) as cluster:
                control = ClusterControl(cluster, topic)
                with trio.move_on_at(deadline) as scope:
                    await control.wait_formed()
                    await flow(control)
                if scope.cancelled_caught:
                    raise AssertionError(
                        f"the test did not finish within {timeout:g} s; the cluster:\n"
                        + control.describe()
                    )

    try:
        trio.run(main)
    except BaseExceptionGroup as group:
        # serve_cluster's nursery wraps what the flow raised: report the flow's error.
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


async def raw_request(cluster: LocalCluster, node: int, key: int, version: int, body: Any) -> Any:
    """One request on a connection of its own to ``node``; the decoded answer."""
    host, port = cluster.node(node).address
    return await raw_request_to(host, port, key, version, body)


async def raw_request_to(host: str, port: int, key: int, version: int, body: Any) -> Any:
    """One request on a connection of its own to ``host:port``; the decoded answer."""
    header = RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=1, client_id="cluster-test"
    )
    with trio.fail_after(15):
        stream = await trio.open_tcp_stream(host, port)
        async with stream:
            await stream.send_all(encode_request(header, body))
            reader = FrameReader()
            while (frame := reader.next_frame()) is None:
                data = await stream.receive_some(1 << 16)
                if not data:
                    raise ConnectionError(f"{host}:{port} closed the connection")
                reader.feed(data)
    return decode_response_frame(frame, key, version)
