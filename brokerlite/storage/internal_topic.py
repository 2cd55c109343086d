"""The internal topic a coordinator's state is kept in, in cluster mode: the
partitions of ``__consumer_offsets`` or ``__transaction_state`` as its store sees
them.

A store kept in an internal topic (:mod:`..groups.replicated_offsets`,
:mod:`..transactions.replicated_journal`) writes each change as one record batch
of the partition that its key (a group or transactional id) hashes to, and reads
a partition's records back when this broker starts leading it.
:class:`InternalTopic` is the part of that which does not depend on what the
records say; each store's port (a :class:`~.state_port.StatePort`) says that.

Rules and invariants:

* A partition is *loaded* while this broker leads it and its records are in
  the store's memory. A write to a key whose partition is not loaded is
  refused: another broker coordinates it, or its records could not be read.
* A batch is appended whole or not at all (the partition log's rule); the
  store changes its memory only after the append succeeded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from trafka.codec.errors import DecodeError
from trafka.codec.records import decode_records, encode_batch

from ..errors import BrokerError

__all__ = ["InternalTopic", "TopicPort"]


class InternalTopic:
    """The partitions of the internal topic ``topic`` on this broker.

    Args:
        topic: the topic's name.
        partition_for: the topic's partition of a key (group or transactional
            id), or None while the topic does not exist.
        append: appends a record batch to one of its partitions on this broker.
        read: ``read(partition) -> chunks``: the partition's whole log here.
        now_ms: the clock, for record timestamps.
    """

    def __init__(
        self,
        topic: str,
        *,
        partition_for: Callable[[str], int | None],
        append: Callable[[int, bytes], None],
        read: Callable[[int], Iterable[bytes]],
        now_ms: Callable[[], int],
    ) -> None:
        self.topic = topic
        self.partition_for = partition_for
        self._append = append
        self._read = read
        self._now_ms = now_ms
        self._loaded: set[int] = set()

    @property
    def path(self) -> Path:
        """What log lines and errors call the store's home: the topic's name."""
        return Path(self.topic)

    def loaded_partitions(self) -> set[int]:
        """The partitions whose state is in memory (this broker leads them)."""
        return set(self._loaded)

    def loaded(self, partition: int) -> None:
        """``partition``'s records are in memory now."""
        self._loaded.add(partition)

    def unloaded(self, partition: int) -> None:
        """``partition``'s records are no longer in memory."""
        self._loaded.discard(partition)

    def unload_all(self) -> None:
        """Nothing is in memory any more (the store closed)."""
        self._loaded.clear()

    def records_of(
        self, partition: int, error: type[BrokerError]
    ) -> Iterator[tuple[bytes | None, bytes | None]]:
        """``(key, value)`` of every record of one partition's log here, in order.

        Raises:
            error: a batch cannot be decoded.
        """
        for chunk in self._read(partition):
            try:
                records = list(decode_records(chunk))
            except DecodeError as exc:
                raise error(f"{self.topic}-{partition}: {exc}") from exc
            for record in records:
                yield record.key, record.value

    def append(
        self,
        key: str,
        records: Iterable[tuple[bytes, bytes | None]],
        error: type[BrokerError],
        holder: str,
    ) -> None:
        """Append ``records`` as one batch to the partition of ``key``.

        Args:
            key: the group or transactional id whose partition takes the batch.
            records: ``(key, value)`` pairs; a None value is a tombstone.
            error: the store's error class.
            holder: what the refusal calls ``key`` (``group 'g'``).

        Raises:
            error: the partition is not loaded here, or the append failed.
        """
        partition = self.partition_for(key)
        if partition is None or partition not in self._loaded:
            raise error(f"{holder}: this broker does not hold its {self.topic} partition")
        now = self._now_ms()
        batch = encode_batch([(now, k, v, ()) for k, v in records])
        try:
            self._append(partition, batch)
        except BrokerError as exc:
            raise error(f"{self.topic}-{partition}: {exc}") from exc


class TopicPort:
    """What every topic port (a :class:`~.state_port.StatePort` over an internal
    topic) does alike: the topic is its home, compaction is the topic's
    ``cleanup.policy``, and every change is in the log once written. A subclass
    writes entries as records (``write``) and replays them.

    Args:
        topic: the topic's partitions here.
    """

    def __init__(self, topic: InternalTopic) -> None:
        self.topic = topic

    @property
    def path(self) -> Path:
        return self.topic.path

    @property
    def size(self) -> int:
        return 0

    def compact(self) -> None:
        """Compaction is the topic's (``cleanup.policy=compact``)."""

    def flush(self) -> None:
        """Nothing buffered here: every change was appended to the log."""

    def close(self) -> None:
        """Forget every partition: later writes are refused."""
        self.topic.unload_all()
