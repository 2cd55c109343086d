"""Requests the network delivers after the client gave up on them.

A client whose request times out closes the connection; what it wrote and the
kernel could not send stays in the closed (orphaned) socket's send queue, and
the kernel keeps trying. Behind netlab's cut (a blackhole route, which fails the
sender's own transmission) the data never left, so it is the zero-window probe
timer that tries again, at intervals that double (about 3, 6.5, 13, 26 s after
the write on this kernel, but the first one depends on the measured round trip).
A fixed wait cannot tell when the request will land: these scenarios watch the
socket instead (``/proc/thread-self/net/tcp`` of the client's namespace, the
calling thread's own) and heal the cut just after a try, when the next one is
far enough off for what must happen first; then they watch the queue drain, so
they know the late request did reach the broker before they read its effect.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from dataclasses import dataclass
from typing import Any

import trio
from netlab import run_in_namespace
from nscluster import PORT, NsCluster
from schedules import CLIENT, ensure_host

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.sdk import TopicPartition, open_consumer, open_producer
from trafka.sdk.errors import TrafkaError

ATTEMPTS = 3  # scenarios whose precondition the machine broke (see Precondition)
#: How far off the abandoned request's next try must be when a read that must
#: come before it starts.
READ_MARGIN_S = 1.0


class Precondition(Exception):
    """The network did not give the scenario the order it needs (the late request
    reached the broker before the later one, or never left): nothing about the
    broker was learnt, the scenario runs again."""


@dataclass(frozen=True)
class Queued:
    """One TCP socket of this thread's namespace with unsent or unacknowledged data."""

    local_port: int
    remote: str
    queued: int  # bytes in the send queue
    timer: int  # /proc/net/tcp's timer kind: 1 retransmission, 4 zero-window probe
    due_s: float  # until that timer fires
    state: int = 0  # its TCP state (include/net/tcp_states.h): 4 FIN_WAIT1, closed unsent


#: A socket its owner closed with data still unsent (the kernel owns it now).
FIN_WAIT1 = 4


def _address(field: str) -> tuple[str, int]:
    host, port = field.split(":")
    return socket.inet_ntoa(struct.pack("<I", int(host, 16))), int(port, 16)


def queued_to(remote: str, port: int = PORT) -> list[Queued]:
    """The sockets of the calling thread's network namespace that hold data for
    ``remote:port`` (proc(5), /proc/net/tcp: tx_queue, tr and tm->when in clock ticks)."""
    found = []
    with open("/proc/thread-self/net/tcp") as table:
        for line in list(table)[1:]:
            fields = line.split()
            local, (peer, peer_port) = _address(fields[1]), _address(fields[2])
            queued = int(fields[4].split(":")[0], 16)
            timer, due = fields[5].split(":")
            if (peer, peer_port) == (remote, port) and queued:
                found.append(
                    Queued(
                        local[1],
                        peer,
                        queued,
                        int(timer, 16),
                        int(due, 16) / 100,
                        int(fields[3], 16),
                    )
                )
    return found


async def heal_between_tries(cluster: NsCluster, remote: str, gap_s: float) -> frozenset[int]:
    """Wait until every socket the client closed with data for ``remote`` (the
    abandoned request's, and any other of its connections there cut mid-request,
    such as a consumer's Fetch: it found both once) has its next try at least
    ``gap_s`` away, then heal every cut: those sockets' local ports. Which of them
    holds the request is not known, so the callers watch them all."""
    with trio.fail_after(90):
        while True:
            waiting = [q for q in queued_to(remote) if q.timer in (1, 4) and q.state == FIN_WAIT1]
            if waiting and min(q.due_s for q in waiting) >= gap_s:
                cluster.lab.heal()
                return frozenset(q.local_port for q in waiting)
            await trio.sleep(0.02)


def still_queued(remote: str, local_ports: frozenset[int]) -> bool:
    """Whether every one of the sockets still holds its data."""
    return local_ports <= {q.local_port for q in queued_to(remote)}


def next_try_s(remote: str, local_ports: frozenset[int]) -> float | None:
    """Until the first next try of the sockets; None when one's queue is empty
    (delivered)."""
    queued = {q.local_port: q.due_s for q in queued_to(remote)}
    if not local_ports <= set(queued):
        return None
    return min(queued[port] for port in local_ports)


async def until_delivered(remote: str, local_ports: frozenset[int]) -> None:
    """Until the sockets' queues are empty (the broker acknowledged the bytes) or the
    sockets are gone; a socket the kernel aborted instead would leave this waiting,
    so the wait is bounded by the probe schedule's next tries."""
    with trio.fail_after(120):
        while any(q.local_port in local_ports for q in queued_to(remote)):
            await trio.sleep(0.1)


def _in_client(cluster: NsCluster, main: Any) -> None:
    failure: list[BaseException] = []

    def run() -> None:
        try:
            run_in_namespace(cluster.lab.namespace(CLIENT), main)
        except BaseException as exc:  # handed to the caller's thread
            failure.append(exc)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]


def _leaders(cluster: NsCluster, topic: str) -> dict[int, int]:
    return {p: leader for p, (leader, _) in cluster.state(topic)["partitions"].items()}


def _coordinator(cluster: NsCluster, key: str, internal: str) -> int:
    leaders = _leaders(cluster, internal)
    return leaders[coordinator_partition(key, len(leaders))]


def _attempts(scenario: Any) -> Any:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            return scenario()
        except Precondition as exc:
            if attempt == ATTEMPTS:
                raise
            print(f"attempt {attempt}: {exc}; again")  # shown with the test's output


def abandoned_commit_lands_late(cluster: NsCluster) -> list[int]:
    """An OffsetCommit the client gives up on while cut from every broker (its request
    times out and the client closes the connection), then a later commit once
    healed, which reaches the broker before the first one (checked on the first
    one's socket): the group's committed offset read once before the first one's
    bytes were delivered, then from their delivery until its offset shows, or for
    30 s."""
    ensure_host(cluster, CLIENT)
    # healed just after the orphan's first try (about 3 s after its write), whose
    # next one is some 3.5 s off: enough for the later commit on a machine that is
    # not overloaded; when it was not (Precondition), the next attempts wait for a
    # 5 s gap (after the second try, about 6.5 s after the write: the third comes
    # about 13 s after it)
    gaps = iter((3.0, 5.0, 5.0))
    return _attempts(lambda: _abandoned_commit(cluster, next(gaps)))


def _abandoned_commit(cluster: NsCluster, gap_s: float) -> list[int]:
    topic = f"late-commit-{time.monotonic_ns()}"
    cluster.create_topic(topic, 1)
    tp = TopicPartition(topic, 0)
    group = f"g-{topic}"
    brokers = [f"b{n}" for n in cluster.nodes]
    seen: list[int] = []

    async def main() -> None:
        async with open_consumer(bootstrap_servers=cluster.bootstrap_servers,
                                 group_id=group, enable_auto_commit=False,
                                 request_timeout_ms=3000, default_api_timeout_ms=3000,
                                 ) as consumer:  # fmt: skip
            consumer.assign([tp])
            await consumer.commit({tp: 1})
            at = cluster.address[await trio.to_thread.run_sync(
                _coordinator, cluster, group, "__consumer_offsets")]  # fmt: skip
            cluster.lab.isolate([CLIENT], brokers)
            with contextlib.suppress(TrafkaError):  # what the test is about
                await consumer.commit({tp: 5})
                raise AssertionError("a commit through a cut succeeded")
            orphan = await heal_between_tries(cluster, at, gap_s)
            with trio.fail_after(60):
                while True:
                    with contextlib.suppress(TrafkaError):  # the link is coming back
                        await consumer.commit({tp: 10})
                        break
                    await trio.sleep(0.2)
            # The read must come before the abandoned commit's next try: a try
            # during the read can land before it while its acknowledgement is still
            # on the way, and the socket then still looks queued (seen under load).
            due = next_try_s(at, orphan)
            if due is None:
                raise Precondition(
                    "the abandoned commit (or another cut request) was delivered first"
                )
            if due < READ_MARGIN_S:
                raise Precondition(f"the abandoned commit's next try is {due} s off")
            seen.append(await consumer.committed(tp))
            if not still_queued(at, orphan):
                raise Precondition("the abandoned commit was delivered during the read")
            await until_delivered(at, orphan)
            with trio.move_on_after(30):
                while 5 not in seen:
                    with contextlib.suppress(TrafkaError):
                        seen.append(await consumer.committed(tp))
                    await trio.sleep(0.2)

    _in_client(cluster, main)
    return seen


def late_txn_offset_commit(cluster: NsCluster, reads: int = 5) -> list[Any]:
    """A transaction's TxnOffsetCommit that the client gives up on while cut from the
    group's coordinator (not from the transaction's), the transaction then aborted,
    and the request delivered after the abort (checked on its socket). What a
    ``read_committed`` OffsetFetch of the group answers afterwards, ``reads`` times a
    second from the delivery: the committed offset (1, from a first committed
    transaction) or the error's name (UNSTABLE_OFFSET_COMMIT while offsets are
    pending)."""
    ensure_host(cluster, CLIENT)
    return _attempts(lambda: _late_txn_offset_commit(cluster, reads))


def _late_txn_offset_commit(cluster: NsCluster, reads: int) -> list[Any]:
    topic = f"late-txn-{time.monotonic_ns()}"
    cluster.create_topic(topic, 1)
    tp = TopicPartition(topic, 0)

    async def warm() -> None:  # both internal topics made (they are made on first use)
        async with open_producer(bootstrap_servers=cluster.bootstrap_servers,
                                 transactional_id=f"warm-{topic}") as producer:  # fmt: skip
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send_offsets_to_transaction({tp: 1}, f"warm-{topic}")
            await producer.commit_transaction()

    trio.run(warm)
    tid = f"tx-{topic}"
    txn_at = _coordinator(cluster, tid, "__transaction_state")
    offsets = _leaders(cluster, "__consumer_offsets")
    group = next(g for g in (f"g{i}-{topic}" for i in range(100))
                 if offsets[coordinator_partition(g, len(offsets))] != txn_at)  # fmt: skip
    group_at = offsets[coordinator_partition(group, len(offsets))]
    at = cluster.address[group_at]
    seen: list[Any] = []

    async def main() -> None:
        async with open_producer(bootstrap_servers=cluster.bootstrap_servers,
                                 transactional_id=tid, request_timeout_ms=3000,
                                 max_block_ms=3000) as producer:  # fmt: skip
            await producer.init_transactions()
            producer.begin_transaction()  # a first one: connections to both coordinators
            await producer.send_offsets_to_transaction({tp: 1}, group)
            await producer.commit_transaction()
            producer.begin_transaction()
            cluster.lab.isolate([CLIENT], [f"b{group_at}"])
            with contextlib.suppress(TrafkaError):  # what the test is about
                await producer.send_offsets_to_transaction({tp: 5}, group)
                raise AssertionError("a TxnOffsetCommit through a cut succeeded")
            await producer.abort_transaction()
            orphan = await heal_between_tries(cluster, at, gap_s=0.0)
            await until_delivered(at, orphan)
        async with open_consumer(bootstrap_servers=cluster.bootstrap_servers, group_id=group,
                                 isolation_level="read_committed", enable_auto_commit=False,
                                 default_api_timeout_ms=1000) as consumer:  # fmt: skip
            for _ in range(reads):
                try:
                    seen.append(await consumer.committed(tp))
                except TrafkaError as exc:
                    seen.append("UNSTABLE_OFFSET_COMMIT" if "UNSTABLE" in str(exc) else repr(exc))
                await trio.sleep(1)

    _in_client(cluster, main)
    return seen
