"""The producer's sender: Produce and transaction requests on the connections,
and their answers into the producer's core.

Rules:

* One task (:meth:`Sender.run`) decides what to send (the accumulator's ready
  check) and drains per broker, writing each Produce request at once
  (:meth:`~trafka.sdk.transport.BrokerConnection.send`), at most
  ``max.in.flight.requests.per.connection`` per broker. An answer comes back
  to a completion called by the connection's reader (no task per request),
  which hands it to the :class:`~trafka.sdk.producer_core.ProducerCore`.
* A broker that throttles the connection for a quota (KIP-219) gets no
  Produce until the throttle time has passed: its batches stay in the
  accumulator and the sender wakes when the time is up.
* The transaction manager's requests go one at a time (the core's
  ``start_request``): written through a completion on a live coordinator
  connection, else in a task that connects first. No idempotent batch is
  drained before the producer has an id.
* :meth:`Sender.send_now`, :meth:`Sender.send_if_idle` and
  :meth:`Sender.take_answers` let the producer's ``send``, ``flush`` and
  commits send (and take answers already arrived) at once, ahead of the task,
  without a yield.
"""

from __future__ import annotations

import logging
import math
import select
import uuid
from collections.abc import Callable, Iterable
from functools import partial
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from trafka.codec import ApiKey, TrafkaError, UnsupportedVersionError

from .accumulator import ProducerBatch, build_produce_request, produce_version
from .config import ProducerConfig
from .errors import ClientClosedError
from .producer_batches import PRODUCE_TOPIC_ID_VERSION
from .producer_core import ProducerCore
from .statistics import Interval
from .transactions import Kind, TxnRequest, TxnState
from .transport import BrokerConnection, CallbackCompletion, Cluster, is_coordinator_id

__all__ = ["Sender"]

log = logging.getLogger("trafka.sdk.producer")


class Sender:
    """Sends what a :class:`~trafka.sdk.producer_core.ProducerCore` has ready
    (see the module doc); the async producer's, on its loop.

    Attributes:
        done: its task has ended (the producer's tasks were cancelled or it
            closed): nothing will be sent any more.
        queue_time: the time batches waited in the accumulator (KIP-714),
            measured per Produce request.
    """

    def __init__(
        self,
        config: ProducerConfig,
        core: ProducerCore,
        cluster: Cluster,
        task_group: anyio.abc.TaskGroup,
        clock: Callable[[], float],
    ) -> None:
        self.config = config
        self.core = core
        self._cluster = cluster
        self._tg = task_group
        self._now = clock
        # The sockets this producer's answers arrive on, by file descriptor, for
        # one readiness check per poll of the answers (a failing recv costs about
        # three times as much, per socket); None with TLS, whose decrypted bytes
        # the check cannot see, and where the system has no poll().
        self._poller: Any = None
        if not cluster.uses_tls and hasattr(select, "poll"):
            self._poller = select.poll()
        self._watched: dict[int, BrokerConnection] = {}
        self._wake = anyio.Event()
        self._node_in_flight: dict[int, int] = {}
        # The earliest end of a broker's quota throttle that kept batches back.
        self._throttle_wake = math.inf
        self.done = False
        self.queue_time = Interval()

    def wake(self) -> None:
        """Have the task look at the batches again."""
        self._wake.set()

    @property
    def in_flight(self) -> int:
        """Produce requests in flight, over every broker."""
        return sum(self._node_in_flight.values())

    def start_txn_request(self, request: TxnRequest) -> None:
        """The core's ``start_request``: written at once on a live coordinator
        connection, else by a task that connects first."""
        if not self._send_txn_request(request):
            self._tg.start_soon(self._txn_request, request)

    def receive_txn_answer(self) -> bool:
        """Handle a transaction request's answer already received, if there is
        one; whether anything had arrived."""
        coordinator = self.core.txn.coordinator
        if self.core.request_busy and coordinator is not None:
            conn = self._cluster.ready_coordinator_connection(coordinator[0])
            if conn is not None:
                return conn.receive_ready()
        return False

    def _send_txn_request(self, request: TxnRequest) -> bool:
        """Write ``request`` on a live coordinator connection, without a task.

        Returns False when there is none yet (the caller starts
        :meth:`_txn_request`, which connects first).
        """
        if request.coordinator is None:
            return False
        node, _, _ = request.coordinator
        conn = self._cluster.ready_coordinator_connection(node)
        if conn is None:
            return False
        try:
            version = min(conn.version_for(request.api_key), request.max_version)
            body = request.build(version)
        except UnsupportedVersionError:
            return False  # the task path decides what that means for this request
        completion = CallbackCompletion(
            partial(self._txn_answered, request, version), partial(self._txn_failed, request)
        )
        try:
            conn.send(request.api_key, body, completion, timeout=request.timeout, version=version)
        except TrafkaError as exc:
            completion.fail(exc)
        else:
            self.watch(conn)
        return True

    async def _txn_request(self, request: TxnRequest) -> None:
        txn = self.core.txn
        try:
            conn = await self._cluster.coordinator_connection(request.coordinator)
            version = min(conn.version_for(request.api_key), request.max_version)
            body = await conn.request(
                request.api_key, request.build(version), timeout=request.timeout, version=version
            )
        except UnsupportedVersionError as exc:
            if (
                request.kind is Kind.INIT_PRODUCER_ID
                and not self.core.transactional
                and not self.config.enable_idempotence
            ):
                # Implicit idempotence: Java quietly turns it off too.
                self.core.idempotence_unsupported()
            else:
                txn.on_failure(request, exc, self._now())
        except TrafkaError as exc:
            self.core.on_request_failed(request, exc, self._now())
        else:
            txn.on_response(request, version, body, self._now())
        finally:
            self._txn_done()

    def _txn_answered(self, request: TxnRequest, version: int, body: Any) -> None:
        """A transaction request's answer, in the connection's reader."""
        try:
            self.core.txn.on_response(request, version, body, self._now())
        finally:
            self._txn_done()

    def _txn_failed(self, request: TxnRequest, error: BaseException) -> None:
        """A transaction request written without a task got no answer."""
        try:
            self.core.on_request_failed(request, error, self._now())
        finally:
            self._txn_done()

    def _txn_done(self) -> None:
        """A transaction manager request ended: apply its outcome, then the next request."""
        core = self.core
        txn = self.core.txn
        core.request_done()
        self.wake()
        if not self.done and core.fatal is None:
            # The next request (say EndTxn after the last AddPartitionsToTxn), and
            # the batches that the answer made sendable, at once rather than after
            # a round of the sender loop.
            core.step(self._now())
            if self.core.acc.flushing or txn.state is TxnState.COMMITTING_TRANSACTION:
                # A commit's batches wait for their partitions to join. Sent
                # here, not by the sender loop: a reader task that took this
                # answer while the caller yielded once (to open a batch of the
                # transaction begun ahead) would leave them until the caller
                # next yields, a whole transaction later.
                self.send_now()

    async def run(self) -> None:
        try:
            await self._send_loop()
        finally:
            # Cancelled with its producer (e.g. by a scope around open_producer): no
            # transaction call can complete any more; do not let them wait for it.
            self.done = True
            self.core.txn.close(ClientClosedError("the producer's tasks were cancelled"))

    async def _send_loop(self) -> None:
        acc = self.core.acc
        txn = self.core.txn
        cluster = self._cluster
        md = cluster.metadata
        while True:
            self._wake = anyio.Event()
            now = self._now()
            if acc.expire(now):
                self.core.memory_freed()
            if acc.idempotent:
                self.core.step(now)
            check = acc.ready(now, md.leader_for)
            if check.unknown_leaders:
                md.add_topics(check.unknown_leaders)
                md.request_update()
                cluster.nudge()
            self._throttle_wake = math.inf
            self._send_ready(now, check.nodes)
            wake_at = check.next_check
            if self._throttle_wake < math.inf and (
                wake_at is None or self._throttle_wake < wake_at
            ):
                wake_at = self._throttle_wake
            expiry = acc.next_expiry()
            if expiry is not None and (wake_at is None or expiry < wake_at):
                wake_at = expiry
            if acc.idempotent:
                retry = txn.next_deadline(now)
                if retry is not None and (wake_at is None or retry < wake_at):
                    wake_at = retry
            if wake_at is None:
                if not self._wake.is_set():
                    await self._wake.wait()  # nothing timed: no cancel scope needed
                continue
            timeout = max(wake_at - self._now(), 0.0)
            if timeout > 0 and not self._wake.is_set():
                with anyio.move_on_after(timeout):
                    await self._wake.wait()
            elif timeout <= 0:
                await anyio.lowlevel.checkpoint()

    def _send_ready(self, now: float, nodes: Iterable[int]) -> None:
        """Drain and write a Produce request to each of ``nodes`` that can take one."""
        acc = self.core.acc
        cluster = self._cluster
        leader_for = cluster.metadata.leader_for
        max_in_flight = self.config.max_in_flight_requests_per_connection
        in_flight = self._node_in_flight
        for node in nodes:
            conn = cluster.ready_connection(node)
            if conn is None:
                cluster.connect_soon(node)
                continue
            if now < conn.throttled_until:
                # KIP-219: the broker reads nothing more from us until then.
                if conn.throttled_until < self._throttle_wake:
                    self._throttle_wake = conn.throttled_until
                continue
            # As many requests as the node may have in flight: a drain takes the
            # first batch of each partition only, and full batches queue behind it
            # (a flush, a commit, a burst of sends between two yields).
            while in_flight.get(node, 0) < max_in_flight:
                batches = acc.drain(now, node, leader_for)
                if not batches:
                    break
                in_flight[node] = in_flight.get(node, 0) + 1
                self._produce(conn, batches)
                if cluster.ready_connection(node) is not conn or not acc.node_ready(
                    now, node, leader_for
                ):
                    break

    def send_if_idle(self) -> None:
        """Send what is ready now if no Produce is in flight, once the answers that
        have already arrived are taken (the readers would take them only when this
        task yields). In a transaction the coordinator's answer comes first: a
        batch leaves only once its partition has joined. With a request still in
        flight, its answer wakes the sender, and the batches filled meanwhile share
        a request."""
        self.take_answers()
        if not any(self._node_in_flight.values()):
            self.send_now()

    def batch_opened(self) -> None:
        """On the loop, after the producer opened a batch: :meth:`send_if_idle`
        (unless stopped), and wake the sender loop (a linger to start)."""
        if not self.done:
            self.send_if_idle()
        self._wake.set()

    def watch(self, conn: BrokerConnection) -> None:
        """``conn`` was just sent a request: :meth:`_take_answers` checks its socket."""
        fd = conn.fileno
        if fd >= 0 and self._watched.get(fd) is not conn and self._poller is not None:
            self._watched[fd] = conn  # a descriptor closed and reused: the new socket
            self._poller.register(fd, select.POLLIN)

    def take_answers(self) -> bool:
        """Handle the answers that have already arrived (the transaction
        coordinator's first), without waiting; whether anything had arrived."""
        poller = self._poller
        if poller is not None:
            ready = poller.poll(0)
            if not ready:
                return False
            watched = self._watched
            if len(ready) > 1:  # the coordinator's first, as below
                ready.sort(key=lambda event: not is_coordinator_id(watched[event[0]].node_id))
            arrived = False
            for fd, _ in ready:
                sender = watched[fd]
                if sender.alive:
                    arrived = sender.receive_ready() or arrived
                else:  # closed: its descriptor may be another socket's by now
                    del watched[fd]
                    poller.unregister(fd)
            return arrived
        arrived = self.core.transactional and self.receive_txn_answer()
        in_flight = self._node_in_flight
        busy = [node for node, n in in_flight.items() if n]
        for node in busy:
            conn = self._cluster.ready_connection(node)
            if conn is not None and conn.receive_ready():
                arrived = True
        return arrived

    def send_now(self) -> None:
        """Send what is ready at once, ahead of the sender loop (which still runs)."""
        now = self._now()
        self._throttle_wake = math.inf
        self._send_ready(now, self.core.acc.ready(now, self._cluster.metadata.leader_for).nodes)
        if self._throttle_wake < math.inf:
            self._wake.set()  # the sender loop waits for the throttle's end

    def _produce(self, conn: BrokerConnection, batches: list[ProducerBatch]) -> None:
        """Write one Produce request; its outcome arrives through :class:`_ProduceCompletion`."""
        acks = self.config.acks
        topic_id = self._cluster.metadata.topic_id
        topics = {b.topic for b in batches}
        try:
            version = produce_version(
                conn.version_for(ApiKey.PRODUCE),
                topics,
                topic_id,
                # A transaction of transaction version 2 may use v12+ (KIP-890).
                transactional=self.core.transactional and not self.core.txn.txn_tv2,
            )
        except TrafkaError as exc:
            self._produce_failed(conn.node_id, batches, exc)
            return
        ids = None
        if version >= PRODUCE_TOPIC_ID_VERSION:  # every topic has an id (produce_version)
            ids = {t: i for t in topics if (i := topic_id(t)) is not None}
        request = build_produce_request(
            batches,
            acks=acks,
            timeout_ms=self.config.request_timeout_ms,
            transactional_id=self.config.transactional_id,
            topic_ids=ids,
        )
        queue_time = self.queue_time
        now = self._now()
        for batch in batches:
            queue_time.add(now - batch.created)
        node = conn.node_id
        completion = CallbackCompletion(
            partial(self._produce_answered, node, batches, ids),
            partial(self._produce_failed, node, batches),
        )
        try:
            conn.send(ApiKey.PRODUCE, request, completion if acks != 0 else None, version=version)
        except TrafkaError as exc:
            completion.fail(exc)
        else:
            self.watch(conn)
            if acks == 0:
                completion.resolve(None)

    def _produce_answered(
        self,
        node: int,
        batches: list[ProducerBatch],
        topic_ids: dict[str, uuid.UUID] | None,
        response: Any,
    ) -> None:
        """A Produce answer (None for ``acks=0``), in the connection's reader."""
        try:
            if self.core.on_produce_response(batches, response, self._now(), topic_ids):
                self._cluster.nudge()
        finally:
            self._produce_done(node)

    def _produce_failed(self, node: int, batches: list[ProducerBatch], exc: BaseException) -> None:
        try:
            self.core.on_produce_failed(batches, exc, self._now())
            self._cluster.nudge()
        finally:
            self._produce_done(node)

    def _produce_done(self, node_id: int) -> None:
        self._node_in_flight[node_id] -= 1
        self.core.memory_freed()
        self._wake.set()
        core = self.core
        if self.core.transactional and not core.request_busy and not core.batches_pending():
            # A commit or abort waits for the last batch: its EndTxn goes now,
            # not after a round of the sender loop.
            core.step(self._now())
