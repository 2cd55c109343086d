"""What a coordinator's store kept in an internal topic (cluster mode) has in
place of a journal file.

:class:`~..groups.replicated_offsets.ReplicatedOffsetStore` (``__consumer_offsets``) and
:class:`~..transactions.replicated_journal.ReplicatedTxnJournal` (``__transaction_state``) replace the
single-node journals; this mixin, listed first among their bases, answers for
them what the journal base class answered from its file, and reads a partition's
records back when this broker starts leading it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import ClassVar

from trafka.codec.errors import DecodeError
from trafka.codec.records import decode_records

from ..errors import BrokerError

__all__ = ["TopicStore"]


class TopicStore:
    """The file-less half of a store kept in the internal topic ``TOPIC``.

    Args:
        partition_for: the topic's partition of a key (group or transactional
            id), or None while the topic does not exist.
        append: appends a record batch to one of its partitions on this broker.
        read: ``read(partition) -> chunks``: the partition's whole log here.
        now_ms: the clock, for record timestamps.
    """

    TOPIC: ClassVar[str]

    def __init__(
        self,
        *,
        partition_for: Callable[[str], int | None],
        append: Callable[[int, bytes], None],
        read: Callable[[int], Iterable[bytes]],
        now_ms: Callable[[], int],
    ) -> None:
        # No journal file: the journal base class's __init__ is not called.
        self._partition_for = partition_for
        self._append = append
        self._read = read
        self._now_ms = now_ms
        self._loaded: set[int] = set()
        self._empty_state()

    def _empty_state(self) -> None:
        """Set up the store's in-memory state, empty (each store its own)."""
        raise NotImplementedError

    @property
    def path(self) -> Path:
        return Path(self.TOPIC)

    @property
    def journal_bytes(self) -> int:
        return 0

    def compact(self) -> None:
        """Compaction is the topic's (``cleanup.policy=compact``)."""

    def flush(self) -> None:
        """Nothing buffered here: every change was appended to the log."""

    def loaded_partitions(self) -> set[int]:
        """The partitions whose state is in memory (this broker leads them)."""
        return set(self._loaded)

    def _records_of(
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
                raise error(f"{self.TOPIC}-{partition}: {exc}") from exc
            for record in records:
                yield record.key, record.value
