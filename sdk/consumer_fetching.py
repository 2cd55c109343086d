"""The consumer's fetching: Fetch requests on the connections, and the
positions they start from (offset resets and committed offsets, looked up
through :class:`~trafka.sdk.consumer_offsets.OffsetLookups`), into the
consumer's core.

Rules:

* At most one Fetch is in flight per broker. It is written synchronously
  (:meth:`~.transport.BrokerConnection.send`) and its response handled by a
  completion in the connection's reader, which at once sends the next fetch:
  the partitions' *prefetch* (see :mod:`.fetcher`) goes out while the
  application still consumes the previous response. Each partition buffers at
  most two responses: memory is bounded by twice ``max.partition.fetch.bytes``
  per partition.
* The task (:meth:`FetchDriver.run`) only handles what needs waiting:
  connecting, offset lookups (one per leader, for partitions with a known
  leader), committed offsets, and the backoff after a failed fetch
  (``retry.backoff.ms`` per broker). A caller that wants a position
  (:meth:`FetchDriver.position`) wakes the task and waits for those lookups.
* A fetch that could only wait at the broker while the application has
  buffered records to take is held back (:meth:`~.fetcher.Fetcher.fetchable`),
  unless a poll is waiting for records (:attr:`FetchDriver.polls_waiting`).
* Fetch sessions (KIP-227): a failed fetch starts the broker's session over;
  :meth:`FetchDriver.close_sessions` sends each broker holding one a fetch with
  epoch -1 that drops it (as Java's consumer), and no fetch after.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

from trafka.codec import ApiKey, KafkaError, TrafkaError

from .consumer_core import ConsumerCore
from .consumer_offsets import OffsetLookups
from .errors import ApiTimeoutError
from .fetcher import TopicPartition
from .transport import BrokerConnection, CallbackCompletion, Cluster

if TYPE_CHECKING:
    from .config.consumer import ConsumerConfig
    from .metadata import MetadataCache

__all__ = ["FetchDriver"]

log = logging.getLogger("trafka.sdk.consumer")


class FetchDriver:
    """Fetches for a :class:`~trafka.sdk.consumer_core.ConsumerCore` (see the
    module doc); the async consumer's, on its loop.

    Args:
        lookups: the consumer's ListOffsets and OffsetFetch, for the positions
            it starts from (resets, committed offsets).

    Attributes:
        polls_waiting: polls waiting for records now (no fetch is held back).
        poll_idle: seconds polls have spent waiting for records, in all.
        stopped: no fetch is sent any more (closed, or closing the sessions).
    """

    def __init__(
        self,
        config: ConsumerConfig,
        core: ConsumerCore[Any, Any],
        cluster: Cluster,
        lookups: OffsetLookups,
        task_group: anyio.abc.TaskGroup,
    ) -> None:
        self.config = config
        self._core = core
        self._cluster = cluster
        self._lookups = lookups
        self._tg = task_group
        self._data = anyio.Event()
        self._wake = anyio.Event()
        self._fetching: set[int] = set()  # brokers with a Fetch in flight
        self.polls_waiting = 0
        self.poll_idle = 0.0
        self._fetch_retry_at: dict[int, float] = {}  # brokers backing off after a failed fetch
        self._resetting: set[TopicPartition] = set()
        self.stopped = False

    def wake(self) -> None:
        """Have the task look at the partitions again."""
        self._wake.set()

    def data_arrived(self) -> None:
        """Wake the polls waiting for records (records, an error, or the end)."""
        event, self._data = self._data, anyio.Event()
        event.set()

    async def wait_data(self, timeout: float) -> None:
        """A poll's wait, up to ``timeout`` seconds, for :meth:`data_arrived`;
        meanwhile no fetch is held back (:meth:`Fetcher.fetchable
        <trafka.sdk.fetcher.Fetcher.fetchable>`'s ``hold_back``)."""
        event = self._data
        start = anyio.current_time()
        self.polls_waiting += 1
        try:
            if self._core.fetcher.held_back:
                self.send_fetches()
            with anyio.move_on_after(timeout):
                await event.wait()
        finally:
            self.polls_waiting -= 1
            self.poll_idle += anyio.current_time() - start

    async def position(self, tp: TopicPartition) -> int:
        """The consumer's :meth:`~trafka.sdk.consumer.Consumer.position`: the
        offset of the next record to hand out, waiting up to
        ``default.api.timeout.ms`` for the lookup that sets it (a reset's or
        the committed offset's, this driver's).

        Raises:
            KeyError: the partition is not assigned.
            ApiTimeoutError: the position was not known in time.
        """
        core = self._core
        timeout_ms = self.config.default_api_timeout_ms
        with anyio.move_on_after(timeout_ms / 1000):
            while True:
                pos = core.fetcher.position(tp)
                if pos is not None:
                    return pos - core.held_count(tp)
                self.wake()
                # Offset lookups and committed-offset loads signal data_arrived when done.
                await self.wait_data(math.inf)
        raise ApiTimeoutError(
            f"the position of {tp.topic}-{tp.partition} was not known within "
            f"default.api.timeout.ms ({timeout_ms} ms){_why_no_position(self._cluster.metadata, tp)}"
        )

    def send_wanted(self) -> None:
        """:meth:`send_fetches` if taking records made a fetch possible
        (``fetcher.fetch_wanted``)."""
        if self._core.fetcher.fetch_wanted:
            self.send_fetches()

    async def run(self) -> None:
        fetcher = self._core.fetcher
        cluster = self._cluster
        md = cluster.metadata
        while True:
            self._wake = anyio.Event()
            missing = fetcher.missing_positions()
            if missing:
                if self.config.group_id is not None:
                    fetcher.mark_committed_lookup(missing)
                    self._tg.start_soon(self._load_committed, missing)
                else:
                    try:
                        fetcher.default_reset(missing)
                    except KafkaError as exc:
                        fetcher.errors.append(exc)
                        self.data_arrived()
            # One lookup per leader, for partitions with a known leader only (as
            # Java's consumer): a partition without one, or a broker out of reach,
            # holds back no other partition's start; the rest wait for metadata.
            by_leader: dict[int, dict[TopicPartition, int]] = {}
            for tp, ts in fetcher.needs_reset().items():
                leader = md.leader_for(tp.topic, tp.partition)
                if tp not in self._resetting and leader is not None:
                    by_leader.setdefault(leader, {})[tp] = ts
            for resets in by_leader.values():
                self._resetting |= set(resets)
                self._tg.start_soon(self._do_resets, resets)
            unknown = fetcher.unknown_leaders()
            if unknown:
                md.add_topics(unknown)
                md.request_update()
                cluster.nudge()
            retry_at = self._fetch_retry_at
            if retry_at:
                now = anyio.current_time()
                for node in [n for n, due in retry_at.items() if due <= now]:
                    del retry_at[node]
            self.send_fetches()
            timeout = math.inf
            if retry_at:
                timeout = max(min(retry_at.values()) - anyio.current_time(), 0.0)
            hold = fetcher.hold_deadline
            if hold is not None:
                timeout = min(timeout, max(hold - anyio.current_time(), 0.0))
            with anyio.move_on_after(timeout):
                await self._wake.wait()

    def send_fetches(self, *, hold_back: bool | None = None) -> None:
        """Write a Fetch to every broker that leads fetchable partitions and has none in flight.

        Synchronous, so that a response's completion can send the next fetch at
        once. Brokers without a ready connection are connected in the
        background; the connection's arrival wakes the fetch task.

        A fetch that could only wait at the broker while the application has
        buffered records to take is held back (:meth:`Fetcher.fetchable`),
        unless ``hold_back`` is False or a poll is waiting for records.
        """
        fetcher = self._core.fetcher
        fetcher.fetch_wanted = False
        if self.stopped:
            return
        cluster = self._cluster
        retry_at = self._fetch_retry_at
        if hold_back is None:
            hold_back = not self.polls_waiting
        deadline = fetcher.hold_deadline
        fetchable = fetcher.fetchable(hold_back=hold_back, now=anyio.current_time())
        if fetcher.hold_deadline is not None and fetcher.hold_deadline != deadline:
            self.wake()  # its wait must end when the hold does
        for node, tps in fetchable.items():
            if node in self._fetching:
                continue
            if retry_at and node in retry_at:
                continue  # backing off after a failed fetch; the fetch task clears it
            conn = cluster.ready_connection(node)
            if conn is None:
                cluster.connect_soon(node)
                continue
            self._send_fetch(conn, tps)

    def _send_fetch(self, conn: BrokerConnection, tps: list[TopicPartition]) -> None:
        fetcher = self._core.fetcher
        node = conn.node_id
        positions: dict[TopicPartition, int] = {}
        try:
            session = fetcher.session(node)
            version = fetcher.fetch_version(conn.version_for(ApiKey.FETCH), tps, session)
            request, positions = fetcher.build_fetch(tps, version, session)
            timeout = (self.config.request_timeout_ms + self.config.fetch_max_wait_ms) / 1000
            self._fetching.add(node)
            completion = CallbackCompletion(
                partial(self._on_fetch_response, node, positions),
                partial(self._on_fetch_failed, node, positions),
            )
            conn.send(ApiKey.FETCH, request, completion, timeout=timeout, version=version)
        except TrafkaError as exc:
            # The completion was not registered (a failed connection reports to it instead).
            self._on_fetch_failed(node, positions, exc)

    def _on_fetch_response(
        self, node: int, positions: dict[TopicPartition, int], response: Any
    ) -> None:
        """A Fetch response, in the connection's reader: buffer it, then fetch again."""
        fetcher = self._core.fetcher
        try:
            # The positions carry the request's session and version.
            got = fetcher.handle_fetch_response(positions, response)
        except TrafkaError as exc:
            self._on_fetch_failed(node, positions, exc)
            return
        except Exception as exc:  # a bug of ours: the application must hear of it
            fetcher.errors.append(exc)
            self.data_arrived()
            self._on_fetch_failed(node, positions, exc)
            return
        self._fetching.discard(node)
        if fetcher.metadata.update_requested:
            # A partition's error (NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH...)
            # asked for fresh metadata: the refresher wakes now, not at the next
            # metadata.max.age.ms. Kafka's clients refresh on such an error; the
            # KIP-951 hint that spares it is in Fetch v16+ only, which a client
            # behind an older broker or the proxy does not get.
            self._cluster.nudge()
        if got or fetcher.errors or fetcher.partition_errors:
            self.data_arrived()
        if fetcher.reset_wanted:
            # Out of range: the fetch task starts the ListOffsets lookup.
            fetcher.reset_wanted = False
            self.wake()
        self.send_fetches()

    def _on_fetch_failed(
        self, node: int, positions: dict[TopicPartition, int], error: BaseException
    ) -> None:
        log.debug("fetch from node %s failed: %s", node, error)
        self._fetching.discard(node)
        # A session starts over: a full fetch asking for a new one (Java's handleError).
        self._core.fetcher.fetch_failed(positions)
        self._fetch_retry_at[node] = anyio.current_time() + self.config.retry_backoff_ms / 1000
        self._cluster.metadata.request_update()
        self._cluster.nudge()
        self.wake()

    async def close_sessions(self, timeout: float) -> None:
        """As Java's consumer on close: tell each broker holding a fetch session
        of ours to drop it (a fetch with epoch -1 and no partitions), waiting up
        to ``timeout`` seconds for the answers. No more fetches are sent."""
        self.stopped = True
        fetcher = self._core.fetcher

        async def close_one(conn: BrokerConnection, request: Any, version: int) -> None:
            try:
                await conn.request(ApiKey.FETCH, request, version=version, timeout=timeout)
            except TrafkaError as exc:  # the broker drops it when it expires
                log.debug("closing the fetch session with node %s failed: %s", conn.node_id, exc)

        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as tg:
                for node, session in list(fetcher.sessions.items()):
                    conn = self._cluster.ready_connection(node)
                    if conn is None:
                        continue  # as Java: no close for a broker it cannot reach now
                    version = conn.version_for(ApiKey.FETCH)
                    request = fetcher.build_close_fetch(session, version)
                    if request is not None:
                        tg.start_soon(close_one, conn, request, version)

    async def _load_committed(self, tps: list[TopicPartition]) -> None:
        try:
            got = await self._lookups.committed_offsets(tps)
        except TrafkaError as exc:
            log.debug("offset fetch failed: %s", exc)
            await anyio.sleep(self.config.retry_backoff_ms / 1000)
            self._core.fetcher.committed_lookup_failed(tps)
            self.wake()
            return
        self._core.fetcher.apply_committed(tps, got)
        self.data_arrived()
        self.wake()

    async def _do_resets(self, targets: dict[TopicPartition, int]) -> None:
        try:
            results = await self._lookups.list_offsets("offset reset", targets, partial=True)
        except TrafkaError as exc:
            log.debug("offset reset failed: %s", exc)
            await anyio.sleep(self.config.retry_backoff_ms / 1000)
        else:
            answered = {tp: r for tp, r in results.items() if not isinstance(r, TrafkaError)}
            self._core.fetcher.apply_reset_results(targets, answered)
            if len(answered) < len(results):
                log.debug("offset reset of %d partition(s) failed", len(results) - len(answered))
                await anyio.sleep(self.config.retry_backoff_ms / 1000)
        finally:
            self._resetting -= set(targets)
            self.wake()
            self.data_arrived()


def _why_no_position(md: MetadataCache, tp: TopicPartition) -> str:
    """What metadata says of a partition whose position could not be looked up."""
    code = md.topic_errors.get(tp.topic)
    if code is not None:
        return f": {code.name} for topic {tp.topic!r} in the last metadata"
    if md.leader_for(tp.topic, tp.partition) is None:
        return ": no leader of it is known"
    return ""
