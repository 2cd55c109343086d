"""The persistence port of a coordinator's store (issue #47).

The group coordinator's store (:mod:`..groups.offsets`) and the transaction
coordinator's (:mod:`..transactions.journal`) each keep one in-memory state
and write its changes through a :class:`StatePort`, of which there are two:

* :class:`~.journal.JournalFile`: entries of a journal file (one node);
* an internal topic (cluster mode): records of ``__consumer_offsets``
  (:class:`~..groups.replicated_offsets.OffsetTopic`) or of
  ``__transaction_state`` (:class:`~..transactions.replicated_journal.TxnTopic`),
  over :class:`~.internal_topic.InternalTopic`.

A change is a JSON object, an *entry* (the journal's unit; a topic port turns
it into keyed records). Rules every port keeps:

* :meth:`StatePort.write` makes the entries durable (as the port understands
  durability: an fsync, or the partition's log, whose replication the broker
  waits for) and only then applies them to the state, so that the state never
  runs ahead of what a restart or a new leader would read back.
* A write that fails raises the store's error class and applies nothing that
  it did not write.
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType
from typing import Any, Protocol, Self

__all__ = ["DurableStore", "StatePort"]


class StatePort(Protocol):
    """Where a store's changes go (see the module rules)."""

    @property
    def path(self) -> Path:
        """What errors and log lines call it: the journal file, or the topic."""
        ...

    @property
    def size(self) -> int:
        """The journal's size in bytes (0 for a topic, whose size is the log's)."""
        ...

    def write(self, *entries: dict[str, Any], sync: bool = True) -> None:
        """Write ``entries``, then apply them to the state: a journal in one
        append (all or none), a topic one batch per entry.

        ``sync`` is a journal's fsync; a topic's durability is its replication.
        """
        ...

    def compact(self) -> None:
        """Rewrite the journal to its live state (a topic is compacted by its
        ``cleanup.policy``)."""
        ...

    def flush(self) -> None:
        """Make every write so far durable."""
        ...

    def close(self) -> None:
        """Release the file or forget the partitions; later writes fail."""
        ...


class DurableStore:
    """What every store over a :class:`StatePort` offers of its port: where it
    lives, its size, compaction, flush and close (also as a context manager).

    Args:
        port: where the store's changes are written.
    """

    def __init__(self, port: StatePort) -> None:
        self._port = port

    @property
    def path(self) -> Path:
        """The journal file, or the topic's name."""
        return self._port.path

    @property
    def journal_bytes(self) -> int:
        """The journal's current size in bytes (0 for a topic)."""
        return self._port.size

    def compact(self) -> None:
        """Rewrite the journal to hold only the live state (a topic: nothing to do).

        Raises:
            The store's error class: the rewrite failed; the old journal is still in place.
        """
        self._port.compact()

    def flush(self) -> None:
        """fsync the journal (a no-op when every write is already fsynced)."""
        self._port.flush()

    def close(self) -> None:
        """Flush and close the journal (or forget the topic's partitions); later
        writes raise the store's error class."""
        self._port.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
