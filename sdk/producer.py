"""The producer: an anyio driver around :mod:`.accumulator` and :mod:`.transport`.

Rules:

* :func:`open_producer` owns every task it starts (sender, connection readers,
  metadata refresher); leaving the block flushes buffered records and then
  cancels them. Leaving it with an exception (or cancellation) does not wait:
  unsent records fail with :class:`~trafka.sdk.errors.ClientClosedError`.
  Errors leave as themselves, never as an ExceptionGroup.
* :meth:`Producer.send` only blocks when it must: for the first metadata of a
  topic, or for ``buffer.memory`` to free up (both bounded by
  ``max.block.ms``). Otherwise it yields to the scheduler once per new batch
  (a checkpoint), so that the sender runs while a tight loop of sends goes on.
  Its result is a :class:`RecordFuture`, awaitable for the
  :class:`~trafka.sdk.accumulator.RecordMetadata`.
* One sender task decides what to send (the accumulator's ready check),
  drains per broker and starts one task per produce request, at most
  ``max.in.flight.requests.per.connection`` per broker. Response handling
  (retries, metadata refresh, resolution) is in the accumulator's terms.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel

from trafka.codec import ErrorCode, KafkaError, TrafkaError, UnsupportedVersionError
from trafka.codec.messages import k22_init_producer_id as init_pid

from ._util import collapse_group, get_serializer, normalize_headers
from .accumulator import (
    Accumulator,
    BufferFullError,
    ProducerBatch,
    RecordHandle,
    RecordMetadata,
    build_produce_request,
    produce_results,
)
from .config import ProducerConfig, make_config
from .errors import ClientClosedError, ProducerBlockedError
from .metadata import REFRESH_ERRORS
from .partitioners import Partitioner
from .transport import BrokerConnection, Cluster

__all__ = ["Producer", "RecordFuture", "RecordMetadata", "open_producer"]

log = logging.getLogger("trafka.sdk.producer")


class RecordFuture(RecordHandle):
    """The result of :meth:`Producer.send`: await it for the record's metadata.

    ``await future`` returns a :class:`RecordMetadata` or raises the delivery
    error. :meth:`done`, :meth:`result`, :meth:`exception` and
    :meth:`add_done_callback` work without awaiting.
    """

    __slots__ = ()

    def __await__(self) -> Any:
        return self._wait().__await__()

    async def _wait(self) -> RecordMetadata:
        batch = self.batch
        if not batch.done:
            if batch.waker is None:
                batch.waker = anyio.Event()
            await batch.waker.wait()
        return self.result()


async def _wait_batch(batch: ProducerBatch) -> None:
    if not batch.done:
        if batch.waker is None:
            batch.waker = anyio.Event()
        await batch.waker.wait()


class Producer:
    """A Kafka producer. Create it with :func:`open_producer`."""

    def __init__(self, config: ProducerConfig, task_group: anyio.abc.TaskGroup) -> None:
        self.config = config
        self._tg = task_group
        self._cluster = Cluster(config, task_group)
        self._cluster.on_change.append(self._wake_sender)
        self._acc = Accumulator(
            batch_size=config.batch_size,
            linger=config.linger_ms / 1000,
            buffer_memory=config.buffer_memory,
            delivery_timeout=config.delivery_timeout_ms / 1000,
            retries=config.retries,
            retry_backoff=config.retry_backoff_ms / 1000,
            retry_backoff_max=config.retry_backoff_max_ms / 1000,
            compression=["none", "gzip", "snappy", "lz4", "zstd"].index(config.compression_type),
            compression_level=config.compression_level,
            max_request_size=config.max_request_size,
            idempotent=config.idempotent,
            max_in_flight=config.max_in_flight_requests_per_connection,
            handle_class=RecordFuture,
            clock=anyio.current_time,
        )
        self._partitioner = Partitioner(config.partitioner)
        self._sticky = self._partitioner.sticky
        # Keyed hash partitioners never look at availability; skip computing it.
        self._partitioner_needs_available = self._partitioner.name not in (
            "murmur2_random",
            "consistent",
            "fnv1a",
        )
        self._key_ser = get_serializer(config.key_serializer)
        self._value_ser = get_serializer(config.value_serializer)
        self._raw_keys = config.key_serializer == "bytes"
        self._raw_values = config.value_serializer == "bytes"
        self._wake = anyio.Event()
        self._memory = anyio.Event()
        self._node_in_flight: dict[int, int] = {}
        self._closed = False
        self._fatal: BaseException | None = None
        self._pid_pending = config.idempotent

    # -- public API ---------------------------------------------------------------------

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        *,
        partition: int | None = None,
        headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None = None,
        timestamp_ms: int | None = None,
    ) -> RecordFuture:
        """Buffer a record for sending.

        Args:
            topic: the topic.
            value, key: serialized with the configured serializers.
            partition: an explicit partition; default: the partitioner's choice.
            headers: ``(str, bytes | str | None)`` pairs or a mapping.
            timestamp_ms: the record's timestamp; default now.

        Returns:
            A :class:`RecordFuture` (await it for the :class:`RecordMetadata`).

        Raises:
            ClientClosedError: the producer is closed.
            SerializationError: the key or value could not be serialized.
            ProducerBlockedError: no metadata or buffer space within ``max.block.ms``.
            KafkaError: the topic does not exist, or the record is too large.
        """
        if self._closed or self._fatal is not None:
            raise self._fatal or ClientClosedError("the producer is closed")
        # The default bytes serializer is the identity on bytes and None: skip the call.
        if self._raw_keys and (key is None or type(key) is bytes):
            key_bytes = key
        else:
            key_bytes = self._key_ser(key)
        if self._raw_values and (value is None or type(value) is bytes):
            value_bytes = value
        else:
            value_bytes = self._value_ser(value)
        hdrs = normalize_headers(headers) if headers else ()
        ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
        md = self._cluster.metadata
        info = md.topics.get(topic)
        n = len(info.partitions) if info is not None else 0
        if not n:
            n = await self._wait_for_topic(topic)
            info = md.topics[topic]
        assert info is not None
        sticky = False
        if partition is None:
            available = info.available_partitions if self._partitioner_needs_available else ()
            p = self._partitioner.partition(topic, key_bytes, n, available)
            sticky = key_bytes is None and self._sticky
        elif 0 <= partition < n:
            p = partition
        else:
            raise KafkaError(
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"partition {partition} of {topic!r} (it has {n})",
            )
        acc = self._acc
        deadline: float | None = None
        while True:
            try:
                handle = acc.append(
                    topic, p, ts, key_bytes, value_bytes, hdrs, abort_on_new_batch=sticky
                )
            except BufferFullError:
                if deadline is None:
                    deadline = anyio.current_time() + self.config.max_block_ms / 1000
                await self._wait_for_memory(deadline)
                continue
            if handle is None:
                # KIP-480: the sticky partition's batch is done; move on and append there.
                available = md.topics[topic].available_partitions
                self._partitioner.on_new_batch(topic, p, n, available)
                p = self._partitioner.partition(topic, key_bytes, n, available)
                sticky = False
                continue
            break
        if handle.index == 0:
            # A new batch: the sender may have a complete one to send (or a linger
            # to start). Yield once so that it runs while we keep appending; without
            # this a caller that never awaits anything else would fill buffer.memory
            # before the first request left.
            self._wake.set()
            await anyio.lowlevel.checkpoint()
        elif handle.batch.full:
            self._wake.set()
        return handle  # type: ignore[return-value]

    async def send_and_wait(
        self, topic: str, value: Any = None, key: Any = None, **kwargs: Any
    ) -> RecordMetadata:
        """:meth:`send`, then wait for the record's :class:`RecordMetadata`."""
        future = await self.send(topic, value, key, **kwargs)
        result: RecordMetadata = await future
        return result

    async def flush(self) -> None:
        """Send everything buffered now (ignoring ``linger.ms``) and wait for the outcomes.

        Records that fail do not make ``flush`` raise; their futures hold the errors.
        """
        acc = self._acc
        acc.flushing += 1
        try:
            self._wake_sender()
            for batch in acc.incomplete_batches():
                await _wait_batch(batch)
        finally:
            acc.flushing -= 1

    async def partitions_for(self, topic: str) -> list[int]:
        """The topic's partition numbers (waits for metadata up to ``max.block.ms``)."""
        n = self._cluster.metadata.partition_count(topic)
        if n is None:
            n = await self._wait_for_topic(topic)
        return list(range(n))

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    # -- internals ----------------------------------------------------------------------

    def _wake_sender(self) -> None:
        self._wake.set()

    async def _wait_for_topic(self, topic: str) -> int:
        try:
            return await self._cluster.partitions_for(topic, self.config.max_block_ms / 1000)
        except KafkaError as exc:
            if (
                exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
                and topic not in self._cluster.metadata.topic_errors
            ):
                raise ProducerBlockedError(
                    f"no metadata for topic {topic!r} within max.block.ms"
                ) from None
            raise

    async def _wait_for_memory(self, deadline: float) -> None:
        acc = self._acc
        acc.memory_waiters += 1
        self._wake_sender()
        try:
            left = deadline - anyio.current_time()
            if left <= 0:
                raise ProducerBlockedError(
                    f"buffer.memory ({acc.buffer_memory} bytes) stayed full for max.block.ms"
                )
            event = self._memory
            with anyio.move_on_after(left):
                await event.wait()
        finally:
            acc.memory_waiters -= 1

    def _memory_freed(self) -> None:
        event, self._memory = self._memory, anyio.Event()
        event.set()

    async def _start(self) -> None:
        self._cluster.start()
        self._tg.start_soon(self._sender, name="trafka producer sender")

    async def _init_producer_id(self) -> None:
        self._pid_pending = False
        try:
            conn = await self._cluster.any_connection()
            if not conn.supports(22):
                raise UnsupportedVersionError("the broker does not support InitProducerId")
            resp = await conn.request(
                22,
                init_pid.InitProducerIdRequest(
                    transactional_id=None, transaction_timeout_ms=2**31 - 1
                ),
            )
            if resp.error_code:
                raise KafkaError(resp.error_code, "InitProducerId failed")
        except UnsupportedVersionError:
            if self.config.enable_idempotence:
                self._fatal = UnsupportedVersionError(
                    "enable.idempotence=true but the broker has no InitProducerId"
                )
                self._acc.abort(self._fatal)
                return
            self._acc.idempotent = False  # implicit idempotence: Java quietly turns it off too
            self._acc.partition_in_flight = 1
            return
        except TrafkaError as exc:
            self._pid_pending = True
            if isinstance(exc, KafkaError) and not exc.retriable:
                self._fatal = exc
                self._acc.abort(exc)
                return
            await anyio.sleep(self.config.retry_backoff_ms / 1000)
            return
        self._acc.producer_id = resp.producer_id
        self._acc.producer_epoch = resp.producer_epoch
        self._acc.reset_sequences()

    async def _sender(self) -> None:
        acc = self._acc
        cluster = self._cluster
        md = cluster.metadata
        max_in_flight = self.config.max_in_flight_requests_per_connection
        while True:
            self._wake = anyio.Event()
            now = anyio.current_time()
            if acc.expire(now):
                self._memory_freed()
            if self._pid_pending and acc.has_pending():
                await self._init_producer_id()
                continue
            check = acc.ready(now, md.leader_for)
            if check.unknown_leaders:
                md.add_topics(check.unknown_leaders)
                md.request_update()
                cluster.nudge()
            for node in check.nodes:
                conn = cluster.ready_connection(node)
                if conn is None:
                    cluster.connect_soon(node)
                    continue
                if self._node_in_flight.get(node, 0) >= max_in_flight:
                    continue
                batches = acc.drain(now, node, md.leader_for)
                if batches:
                    self._node_in_flight[node] = self._node_in_flight.get(node, 0) + 1
                    self._tg.start_soon(self._produce, conn, batches)
            wake_at = check.next_check
            expiry = acc.next_expiry()
            if expiry is not None and (wake_at is None or expiry < wake_at):
                wake_at = expiry
            timeout = math.inf if wake_at is None else max(wake_at - anyio.current_time(), 0.0)
            if timeout > 0 and not self._wake.is_set():
                with anyio.move_on_after(timeout):
                    await self._wake.wait()
            elif timeout <= 0:
                await anyio.lowlevel.checkpoint()

    async def _produce(self, conn: BrokerConnection, batches: list[ProducerBatch]) -> None:
        acc = self._acc
        md = self._cluster.metadata
        acks = self.config.acks
        request = build_produce_request(
            batches, acks=acks, timeout_ms=self.config.request_timeout_ms
        )
        try:
            response = await conn.request(0, request, expect_response=acks != 0)
        except TrafkaError as exc:
            now = anyio.current_time()
            for b in batches:
                acc.retry_or_fail(b, exc, now)
            md.request_update()
            self._cluster.nudge()
        else:
            if response is None:
                for b in batches:
                    acc.complete(b, -1)
            else:
                self._on_produce_response(batches, response)
        finally:
            self._node_in_flight[conn.node_id] -= 1
            self._memory_freed()
            self._wake_sender()

    def _on_produce_response(self, batches: list[ProducerBatch], response: Any) -> None:
        acc = self._acc
        md = self._cluster.metadata
        now = anyio.current_time()
        refresh = False
        for b, p in produce_results(batches, response):
            if p is None:
                acc.retry_or_fail(
                    b,
                    KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, "partition missing from the response"
                    ),
                    now,
                )
                continue
            code = p.error_code
            if code == 0:
                acc.complete(b, p.base_offset, p.log_append_time_ms)
                continue
            if code == ErrorCode.DUPLICATE_SEQUENCE_NUMBER:
                acc.complete(b, p.base_offset)
                continue
            if code == ErrorCode.MESSAGE_TOO_LARGE and acc.split(b):
                continue
            err = KafkaError(code, p.error_message)
            if code in REFRESH_ERRORS:
                refresh = True
                leader = p.current_leader
                if leader.leader_id >= 0:
                    md.on_leader_hint(b.topic, b.partition, leader.leader_id, leader.leader_epoch)
                else:
                    md.on_partition_error(code, b.topic, b.partition)
            force = code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and acc.has_earlier(b)
            acc.retry_or_fail(b, err, now, force=force)
        if refresh:
            md.request_update()
            self._cluster.nudge()

    async def _close(self, *, flush: bool) -> None:
        if flush and not self._closed:
            await self.flush()
        self._closed = True
        self._acc.closing = True
        self._acc.abort(ClientClosedError("the producer was closed before the record was sent"))


@asynccontextmanager
async def open_producer(
    config: ProducerConfig | Mapping[str, Any] | None = None, **kwargs: Any
) -> AsyncIterator[Producer]:
    """Open a producer; leaving the block flushes and closes it.

    Args:
        config: a :class:`~trafka.sdk.config.ProducerConfig` or a mapping of
            Kafka-style keys (``{"bootstrap.servers": "host:9092", "linger.ms": 5}``).
        **kwargs: settings in Python spelling (``linger_ms=5``); they override ``config``.

    Yields:
        The :class:`Producer`.

    Raises:
        ConfigError: invalid configuration.
    """
    cfg = make_config(ProducerConfig, config, kwargs)
    error: BaseException | None = None
    try:
        async with anyio.create_task_group() as tg:
            producer = Producer(cfg, tg)
            await producer._start()
            try:
                yield producer
            except BaseException:
                with anyio.CancelScope(shield=True):
                    await producer._close(flush=False)
                raise
            else:
                await producer._close(flush=True)
            finally:
                tg.cancel_scope.cancel()
                with anyio.CancelScope(shield=True):
                    await producer._cluster.aclose()
    except BaseExceptionGroup as group:
        error = collapse_group(group)
        if error is group:
            raise
    if error is not None:
        raise error
