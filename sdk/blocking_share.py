"""The blocking share consumer (KIP-932): :class:`~trafka.sdk.share_consumer.ShareConsumer`
on a trio loop in a thread of its own, as the other clients of :mod:`.blocking`.

The rules of :mod:`.blocking` hold (a client owns its thread; calls cross to it
and back; leaving a ``with`` block with an exception is what the async block
does then). Importable as ``trafka.sdk.blocking.ShareConsumer``, which loads
this module, and with it the async share consumer, when first named: a
service that only produces and consumes does not pay for it (issue #48).
"""

from __future__ import annotations

import collections
from collections.abc import Iterable, Iterator
from concurrent.futures import Future
from functools import partial
from typing import Any

from ._loop_thread import Forwarding, Portal
from ._validate import check_timeout, check_topics
from .consumer_types import TopicPartition
from .share_consumer import AcknowledgeType, ShareCommitResult, ShareRecord, open_share_consumer
from .share_consumer import ShareConsumer as AsyncShareConsumer

__all__ = ["ShareConsumer"]


class ShareConsumer(Forwarding):
    """A blocking share consumer (KIP-932): :class:`~trafka.sdk.share_consumer.ShareConsumer`
    on a loop of its own (see the module doc for how it runs).

    Records come in batches (:meth:`poll`) or one at a time (iteration); a poll
    with implicit acknowledgement accepts the records of the previous one.
    Records an iteration has not reached yet are never accepted: a commit or
    close in the middle of a batch leaves them out (closing releases them).
    The acknowledgement commit callback runs on the client's thread while
    ``poll``, ``commit`` or ``close`` waits for it.

    Args:
        *topics: topics to subscribe to; or call :meth:`subscribe`.
        config: a :class:`~trafka.sdk.config.ShareConsumerConfig` or a mapping of
            Kafka-style keys.
        consumer_timeout_ms: iteration ends after this long without a record
            (default: it never ends).
        **settings: settings in Python spelling.

    Raises:
        ConfigError: invalid configuration.
    """

    def __init__(
        self,
        *topics: str,
        config: Any = None,
        consumer_timeout_ms: float | None = None,
        **settings: Any,
    ) -> None:
        check_timeout("consumer_timeout_ms", consumer_timeout_ms)
        if topics:
            check_topics("topics", topics)
        self._buffer: collections.deque[ShareRecord] = collections.deque()
        self._timeout_ms = consumer_timeout_ms
        self._loop = Portal(partial(open_share_consumer, config=config, **settings), self)
        self._consumer: AsyncShareConsumer = self._loop.client
        if topics:
            try:
                self.subscribe(list(topics))
            except BaseException as exc:
                self._loop.close(exc)
                raise

    def __iter__(self) -> Iterator[ShareRecord]:
        """Records as they come; ends only with ``consumer_timeout_ms`` (or close)."""
        while True:
            if not self._buffer:
                self._buffer.extend(self._poll(self._timeout_ms))
                if not self._buffer:
                    return
            yield self._buffer.popleft()

    def poll(self, timeout_ms: float | None = None) -> list[ShareRecord]:
        """Records delivered to this member, waiting up to ``timeout_ms`` (None: until
        some come); records an iteration had not reached come first."""
        check_timeout("timeout_ms", timeout_ms)
        if self._buffer:
            out = list(self._buffer)
            self._buffer.clear()
            return out
        return self._poll(timeout_ms)

    def _poll(self, timeout_ms: float | None) -> list[ShareRecord]:
        for left in self._loop.slices(timeout_ms, "the share consumer is closed"):
            records: list[ShareRecord] = self._call(self._consumer.poll, timeout_ms=left * 1000)
            if records:
                return records
        return []

    def _give_back(self) -> None:
        """Records iteration has not reached: not to be accepted."""
        if self._buffer:
            held = list(self._buffer)
            self._buffer.clear()
            self._loop.call(self._consumer.unseen, held)

    def acknowledge(
        self, record: ShareRecord, type: AcknowledgeType | int = AcknowledgeType.ACCEPT
    ) -> None:
        """Acknowledge a record of the last poll (``share.acknowledgement.mode=explicit``):
        accept it (the default), or ``AcknowledgeType.RELEASE`` / ``REJECT`` it."""
        self._call(self._consumer.acknowledge, record, type)

    def acknowledge_offset(
        self,
        topic: str,
        partition: int,
        offset: int,
        type: AcknowledgeType | int = AcknowledgeType.ACCEPT,
    ) -> None:
        """:meth:`acknowledge` a record of the last poll by its coordinates."""
        self._call(self._consumer.acknowledge_offset, topic, partition, offset, type)

    def commit(self, timeout_ms: int | None = None) -> dict[TopicPartition, BaseException | None]:
        """Send the acknowledgements made so far and wait: per partition None or the error."""
        check_timeout("timeout_ms", timeout_ms)
        self._give_back()
        result: dict[TopicPartition, BaseException | None] = self._call(
            self._consumer.commit, timeout_ms
        )
        return result

    def commit_async(self) -> Future[dict[TopicPartition, BaseException | None]]:
        """Send the acknowledgements made so far; the future holds the per-partition outcome."""
        self._give_back()
        # The acknowledgements are taken now, on the loop, before this returns: one
        # acknowledged again after it is refused as already sent, as librdkafka does.
        started: ShareCommitResult = self._call(self._consumer.commit_async)

        async def run() -> dict[TopicPartition, BaseException | None]:
            return await started.wait()

        future: Future[dict[TopicPartition, BaseException | None]] = (
            self._loop.portal.start_task_soon(run)
        )
        return future

    def subscribe(self, topics: Iterable[str]) -> None:
        self._call(self._consumer.subscribe, check_topics("topics", topics))

    def close(self) -> None:
        """Acknowledge (implicit mode) or release what was delivered, close the
        share sessions, leave the group and stop (idempotent)."""
        if self._loop.closing:
            return
        try:
            self._give_back()
        finally:
            self._loop.close()

    def __enter__(self) -> ShareConsumer:
        return self

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            self.close()
        elif not self._loop.closing:
            # As the async block: what was delivered is released, not accepted.
            self._buffer.clear()
            self._loop.close(exc)
