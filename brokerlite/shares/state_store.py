"""The share-state journal: every share-partition's durable state on this broker
(Kafka keeps it in ``__share_group_state`` through the share coordinator).

Rules and invariants:

* A :class:`~trafka.brokerlite.storage.journal.CrcJournal` of JSON entries
  (format ``share-state``): the latest ``partition`` entry of a share-partition
  wins; ``drop_group``, ``drop_topic`` and ``drop_partition`` forget state.
* An entry of a kind this code does not know is an error, never skipped.
* :meth:`ShareStateStore.write` writes its entries in one fsynced append
  before they take effect in memory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage.journal import CrcJournal, JournalStore
from trafka.codec.errors import ErrorCode

__all__ = ["SP", "ShareStateError", "ShareStateStore"]

SP = tuple[str, str, int]  # (group, topic, partition)

FORMAT = "share-state"

FORMAT_VERSION = 1


class ShareStateError(BrokerError):
    """The share-state journal cannot be read or written."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


class ShareStateStore(JournalStore):
    """Share-partition snapshots in a CRC journal (``trafka-share-state.journal``).

    Entries: ``{"kind": "partition", "group", "topic", "topic_id", "partition",
    "start", "runs"}`` (the latest one of a partition wins), ``{"kind":
    "drop_group", "group"}``, ``{"kind": "drop_topic", "topic"}`` and ``{"kind":
    "drop_partition", "group", "topic", "partition"}`` (one group's state of one
    partition, forgotten by DeleteShareGroupOffsets; journals written before it
    existed read as before, and a brokerlite that predates it refuses a journal
    holding one as of an unknown kind rather than misread it).
    """

    def __init__(self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 1 << 20) -> None:
        journal = CrcJournal(
            Path(path),
            format_name=FORMAT,
            version=FORMAT_VERSION,
            fsync=fsync,
            error=ShareStateError,
        )
        super().__init__(journal, compact_min_bytes=compact_min_bytes, name="share-state journal")
        self._partitions: dict[SP, dict[str, Any]] = {}
        self._load()

    def partitions(self) -> dict[SP, dict[str, Any]]:
        """Every stored share-partition snapshot (a copy)."""
        return dict(self._partitions)

    def write(self, entries: list[dict[str, Any]]) -> None:
        """Write ``entries`` in one fsynced append, then apply them."""
        if entries:
            self._write(*entries)

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        if kind == "partition":
            key = (entry["group"], entry["topic"], int(entry["partition"]))
            self._partitions[key] = entry
        elif kind == "drop_group":
            for key in [k for k in self._partitions if k[0] == entry["group"]]:
                del self._partitions[key]
        elif kind == "drop_topic":
            for key in [k for k in self._partitions if k[1] == entry["topic"]]:
                del self._partitions[key]
        elif kind == "drop_partition":
            self._partitions.pop((entry["group"], entry["topic"], int(entry["partition"])), None)
        else:
            raise ShareStateError(f"{self.path}: unknown entry kind {kind!r}")

    def _live_entries(self) -> list[dict[str, Any]]:
        return list(self._partitions.values())
