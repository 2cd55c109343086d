"""confluent-kafka's asyncio clients (``confluent_kafka.aio``) over the drop-in's
producer and consumer.

Rules:

* Every call is a coroutine. A call that may wait (``flush``, ``poll``,
  ``consume``, ``commit``, the transaction calls, ``close``...) runs the
  drop-in client's call in a thread of the client's executor (its own, or the
  one given), so the event loop never blocks. A rebalance callback's own
  calls on the consumer run while the call that met the rebalance waits, as
  with confluent-kafka's (the drop-in's consumer takes calls from any thread).
* ``AIOProducer.produce()`` queues the record at once (it never waits for
  I/O) and returns an :class:`asyncio.Future` that resolves to the delivered
  ``Message``, or fails with :class:`KafkaException` carrying its delivery
  error: ``msg = await (await producer.produce(topic, value))``. The delivery
  reports are served by a thread of the producer's, so no ``poll()`` is
  needed; a report also goes to the ``on_delivery`` given, if any.
* The configuration's callbacks (``error_cb``, ``stats_cb``, ``oauth_cb``...)
  are the drop-in's: served by that thread (the producer's) or by the
  consumer's calls. ``AIOConsumer.subscribe``'s rebalance callbacks may be
  coroutine functions: they run on the event loop, given the ``AIOConsumer``.
* ``batch_size`` and ``buffer_timeout`` are taken for confluent-kafka's
  signature; trafka's producer batches by ``linger.ms`` and ``batch.size``
  itself, so records are not held back by a buffer of this module's.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import threading
from typing import Any

from .._consumer import Consumer
from .._errors import KafkaException
from .._producer import Producer
from .._serde_building import abuild, aclose_all, maybe_await, pop_specs
from ..error import (
    ConsumeError,
    KeyDeserializationError,
    KeySerializationError,
    ValueDeserializationError,
    ValueSerializationError,
)
from ..serialization import MessageField, SerializationContext

__all__ = ["AIOConsumer", "AIOProducer", "AsyncDeserializingConsumer", "AsyncSerializingProducer"]


class _Executing:
    """A drop-in client's calls run in an executor's threads."""

    def __init__(self, executor: concurrent.futures.Executor | None, max_workers: int) -> None:
        self._own = executor is None
        self._executor = executor or concurrent.futures.ThreadPoolExecutor(
            max_workers=max_workers, thread_name_prefix="trafka-aio"
        )

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    def _shutdown(self) -> None:
        if self._own:
            self._executor.shutdown(wait=False)


def _forward(name: str) -> Any:
    """An ``async def name(*args, **kwargs)`` running the drop-in client's ``name``."""

    async def call(self: Any, *args: Any, **kwargs: Any) -> Any:
        return await self._run(getattr(self._client, name), *args, **kwargs)

    call.__name__ = call.__qualname__ = name
    call.__doc__ = f"``{name}()`` of the drop-in client, in the executor."
    return call


class AIOProducer(_Executing):
    """confluent-kafka's ``AIOProducer(producer_conf, max_workers=4,
    executor=None, batch_size=1000, buffer_timeout=1.0)``."""

    def __init__(
        self,
        producer_conf: dict[str, Any],
        max_workers: int = 4,
        executor: concurrent.futures.Executor | None = None,
        batch_size: int = 1000,
        buffer_timeout: float = 1.0,
    ) -> None:
        if not isinstance(producer_conf, dict):
            raise TypeError("expected configuration dict")
        super().__init__(executor, max_workers)
        self._client = Producer(producer_conf)
        self._closing = threading.Event()
        self._server = threading.Thread(
            target=self._serve_reports, name="trafka-aio-producer", daemon=True
        )
        self._server.start()

    def _serve_reports(self) -> None:
        client = self._client
        while not self._closing.is_set():
            try:
                client.poll(0.1)
            except RuntimeError:
                return  # closed
            except Exception:  # a callback of the application's raised: it is its to log
                continue

    async def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
        callback: Any = None,
    ) -> asyncio.Future[Any]:
        """Queue a record; the future resolves to its delivered ``Message``.

        Raises:
            BufferError: ``queue.buffering.max.messages`` records await their report.
            KafkaException, TypeError: the record was refused.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        given = on_delivery or callback

        def settle(err: Any, msg: Any) -> None:
            if future.done():
                return
            if err is not None:
                future.set_exception(KafkaException(err))
            else:
                future.set_result(msg)

        def report(err: Any, msg: Any) -> None:
            loop.call_soon_threadsafe(settle, err, msg)
            if given is not None:
                given(err, msg)

        self._client.produce(
            topic, value, key, partition, report, timestamp=timestamp, headers=headers
        )
        return future

    flush = _forward("flush")
    purge = _forward("purge")
    list_topics = _forward("list_topics")
    cluster_id = _forward("cluster_id")
    init_transactions = _forward("init_transactions")
    begin_transaction = _forward("begin_transaction")
    commit_transaction = _forward("commit_transaction")
    abort_transaction = _forward("abort_transaction")
    send_offsets_to_transaction = _forward("send_offsets_to_transaction")
    set_sasl_credentials = _forward("set_sasl_credentials")

    async def poll(self, timeout: float = 0, *args: Any, **kwargs: Any) -> int:
        """Reports are served by the producer's thread; this waits ``timeout`` s
        for callbacks of the configuration's that are due."""
        served: int = await self._run(self._client.poll, timeout, *args, **kwargs)
        return served

    async def close(self) -> None:
        """Flush, then close the producer."""
        self._closing.set()
        await self._run(self._client.close)
        self._shutdown()

    async def __aenter__(self) -> AIOProducer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class AIOConsumer(_Executing):
    """confluent-kafka's ``AIOConsumer(consumer_conf, max_workers=100, executor=None)``."""

    def __init__(
        self,
        consumer_conf: dict[str, Any],
        max_workers: int = 100,
        executor: concurrent.futures.Executor | None = None,
    ) -> None:
        if not isinstance(consumer_conf, dict):
            raise TypeError("expected configuration dict")
        super().__init__(executor, max_workers)
        self._client = Consumer(consumer_conf)

    poll = _forward("poll")
    consume = _forward("consume")

    async def subscribe(
        self,
        topics: list[str],
        on_assign: Any = None,
        on_revoke: Any = None,
        on_lost: Any = None,
    ) -> None:
        """Subscribe; the rebalance callbacks (coroutine functions or plain
        ones) are called with this ``AIOConsumer`` and the partitions, a
        coroutine on the event loop, and the consumer's call that met the
        rebalance waits for it, as confluent-kafka's."""
        loop = asyncio.get_running_loop()
        hooks = [self._on_loop(loop, fn) for fn in (on_assign, on_revoke, on_lost)]
        await self._run(self._client.subscribe, topics, *hooks)

    def _on_loop(self, loop: asyncio.AbstractEventLoop, fn: Any) -> Any:
        if fn is None:
            return None

        def call(_consumer: Any, partitions: Any) -> None:
            result = fn(self, partitions)
            if asyncio.iscoroutine(result):
                asyncio.run_coroutine_threadsafe(result, loop).result()

        return call

    unsubscribe = _forward("unsubscribe")
    assign = _forward("assign")
    unassign = _forward("unassign")
    incremental_assign = _forward("incremental_assign")
    incremental_unassign = _forward("incremental_unassign")
    assignment = _forward("assignment")
    commit = _forward("commit")
    committed = _forward("committed")
    store_offsets = _forward("store_offsets")
    position = _forward("position")
    seek = _forward("seek")
    pause = _forward("pause")
    resume = _forward("resume")
    get_watermark_offsets = _forward("get_watermark_offsets")
    offsets_for_times = _forward("offsets_for_times")
    list_topics = _forward("list_topics")
    cluster_id = _forward("cluster_id")
    consumer_group_metadata = _forward("consumer_group_metadata")
    set_sasl_credentials = _forward("set_sasl_credentials")

    async def close(self) -> None:
        """Commit (with auto-commit), leave the group and close."""
        await self._run(self._client.close)
        self._shutdown()

    async def __aenter__(self) -> AIOConsumer:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()


class _AwaitedInit:
    """Made with ``await Cls(conf, **kwargs)``, as confluent-kafka's asyncio
    serializing clients (their serdes' builders may be coroutines): the
    instance is usable once awaited."""

    def __init__(self, conf: dict[str, Any], **kwargs: Any) -> None:
        if not isinstance(conf, dict):
            raise TypeError("expected configuration dict")
        self._pending_init = (conf, kwargs)

    def __await__(self) -> Any:
        return self._start().__await__()

    async def _start(self) -> Any:
        conf, kwargs = self._pending_init
        await self._init(conf, **kwargs)
        return self

    async def _init(self, conf: dict[str, Any], **kwargs: Any) -> None:
        raise NotImplementedError


class AsyncSerializingProducer(_AwaitedInit, AIOProducer):
    """confluent-kafka's ``await AsyncSerializingProducer(conf, **kwargs)``:
    an :class:`AIOProducer` whose ``produce(topic, key, value, ...)``
    serializes first (``key.serializer`` / ``value.serializer``, asyncio serdes
    or plain ones, or their ``.builder``)."""

    async def _init(self, conf: dict[str, Any], **kwargs: Any) -> None:
        specs, conf = pop_specs(conf, "key.serializer", "value.serializer")
        serdes, self._owned, conf = await abuild(specs, conf)
        self._key_serializer, self._value_serializer = serdes
        try:
            AIOProducer.__init__(self, conf, **kwargs)
        except BaseException:
            await aclose_all(self._owned)
            raise

    async def produce(  # type: ignore[override]
        self,
        topic: str,
        key: Any = None,
        value: Any = None,
        partition: int = -1,
        timestamp: int = 0,
        headers: Any = None,
    ) -> asyncio.Future[Any]:
        """Serialize the key, then the value, and queue the record (the
        future resolves to its delivered ``Message``).

        Raises:
            KeySerializationError / ValueSerializationError: a serializer failed.
        """
        if self._key_serializer is not None:
            ctx = SerializationContext(topic, MessageField.KEY, headers)
            try:
                key = await maybe_await(self._key_serializer(key, ctx))
            except Exception as exc:
                raise KeySerializationError(exc) from exc
        if self._value_serializer is not None:
            ctx = SerializationContext(topic, MessageField.VALUE, headers)
            try:
                value = await maybe_await(self._value_serializer(value, ctx))
            except Exception as exc:
                raise ValueSerializationError(exc) from exc
        return await AIOProducer.produce(
            self, topic, value, key, partition, timestamp=timestamp, headers=headers
        )

    async def close(self) -> None:
        """Close the producer, then the serializers it built."""
        await AIOProducer.close(self)
        owned, self._owned = self._owned, []
        await aclose_all(owned)


class AsyncDeserializingConsumer(_AwaitedInit, AIOConsumer):
    """confluent-kafka's ``await AsyncDeserializingConsumer(conf, **kwargs)``:
    an :class:`AIOConsumer` whose ``poll`` and ``consume`` deserialize the key,
    then the value (an error event is raised as ``ConsumeError``)."""

    async def _init(self, conf: dict[str, Any], **kwargs: Any) -> None:
        specs, conf = pop_specs(conf, "key.deserializer", "value.deserializer")
        serdes, self._owned, conf = await abuild(specs, conf)
        self._key_deserializer, self._value_deserializer = serdes
        try:
            AIOConsumer.__init__(self, conf, **kwargs)
        except BaseException:
            await aclose_all(self._owned)
            raise

    async def _deserialize(self, msg: Any) -> Any:
        error = msg.error()
        if error is not None:
            raise ConsumeError(error, kafka_message=msg)
        ctx = SerializationContext(msg.topic() or "", MessageField.KEY, msg.headers())
        key, value = msg.key(), msg.value()
        if self._key_deserializer is not None:
            try:
                key = await maybe_await(self._key_deserializer(key, ctx))
            except Exception as exc:
                raise KeyDeserializationError(exc, msg) from exc
        if self._value_deserializer is not None:
            ctx.field = MessageField.VALUE
            try:
                value = await maybe_await(self._value_deserializer(value, ctx))
            except Exception as exc:
                raise ValueDeserializationError(exc, msg) from exc
        msg.set_key(key)
        msg.set_value(value)
        return msg

    async def poll(self, timeout: float = -1) -> Any:
        """The next record, deserialized (None when none came in ``timeout`` s)."""
        msg = await self._run(self._client.poll, timeout)
        return None if msg is None else await self._deserialize(msg)

    async def consume(self, num_messages: int = 1, timeout: float = -1) -> list[Any]:
        """Up to ``num_messages`` records, deserialized."""
        msgs = await self._run(self._client.consume, num_messages, timeout)
        return [await self._deserialize(m) for m in msgs]

    async def close(self) -> None:
        """Close the consumer, then the deserializers it built."""
        await AIOConsumer.close(self)
        owned, self._owned = self._owned, []
        await aclose_all(owned)
