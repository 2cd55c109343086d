"""Durable committed offsets and consumer-group metadata for brokerlite.

Kafka keeps this state in the ``__consumer_offsets`` topic; brokerlite keeps it in
one small append-only journal file, replayed into memory when the store opens,
and in that topic in cluster mode. Either way the state is one
:class:`OffsetState`, changed by *entries*, and the store is a
:class:`GroupStore`: the state and the persistence port the entries are written
through (:mod:`..storage.state_port`). :class:`OffsetStore` writes them to the
journal file; :class:`~.replicated_offsets.ReplicatedOffsetStore` turns them into
records of ``__consumer_offsets``.

Journal format: a :class:`~trafka.brokerlite.storage.journal.CrcJournal` (length-prefixed,
CRC-32C-checked JSON entries; torn tails truncated on open; atomic rewrites) whose
header names no format, only its version (offset journals predate format names).

* Binary values (member metadata, assignments) are base64.
* An entry whose kind this code does not know is an error, never skipped: it comes
  from a newer brokerlite, and dropping it would silently lose state.
* Entry kinds: ``commit`` (one OffsetCommit request's offsets for one group, so a
  request is all-or-nothing on disk), ``group`` (a full snapshot of one group's
  metadata), ``consumer_group`` (a full snapshot of one consumer group of the
  new protocol, KIP-848, or its removal when the snapshot is null; the data is
  :meth:`~trafka.brokerlite.groups.consumer_groups.ConsumerGroups.snapshot`'s),
  ``delete_group`` (metadata, consumer group and offsets), ``delete_offsets``
  (some partitions of one group) and ``delete_topic`` (a topic's offsets in
  every group).

Rules and invariants:

* State is last-writer-wins per key: offsets per (group, topic, partition),
  metadata per group. Replaying the journal from the start rebuilds it exactly.
* A mutating method returns only after its entry is written (and fsynced when
  ``fsync=True``); the in-memory state changes only after that. A caller that
  acknowledges a commit after the method returns therefore never acknowledges
  something a crash can lose.
* A crash mid-write leaves at most one torn entry, at the tail, which the next open
  drops; a failed write is rolled back (see :mod:`..storage.journal`).
* Compaction rewrites the live state atomically (see :mod:`..storage.journal`). It runs on
  open when the journal has grown well past its live state, and again whenever
  appends have made it grow by the same factor.
"""

from __future__ import annotations

import base64
import dataclasses
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trafka.brokerlite.errors import OffsetStoreError
from trafka.brokerlite.storage.journal import CrcJournal, JournalFile
from trafka.brokerlite.storage.state_port import DurableStore, StatePort

__all__ = [
    "CommittedOffset",
    "GroupRecord",
    "GroupStore",
    "MemberRecord",
    "OffsetState",
    "OffsetStore",
    "OffsetStoreError",
    "offset_rows",
]

FORMAT_VERSION = 1


@dataclasses.dataclass(frozen=True, slots=True)
class CommittedOffset:
    """One committed offset of a group for one partition.

    Attributes:
        offset: the committed offset (the next record the group will read).
        leader_epoch: the committed leader epoch, -1 when unknown.
        metadata: the client's metadata string.
        commit_timestamp_ms: when the commit happened (broker time unless the
            OffsetCommit v1 request gave one).
    """

    offset: int
    leader_epoch: int = -1
    metadata: str | None = ""
    commit_timestamp_ms: int = -1


@dataclasses.dataclass(frozen=True, slots=True)
class MemberRecord:
    """A group member as persisted (enough to resume it after a restart).

    Attributes:
        member_id: the coordinator-assigned member id.
        group_instance_id: the static instance id, or None for a dynamic member.
        client_id, client_host: as seen on the member's JoinGroup.
        rebalance_timeout_ms, session_timeout_ms: from the member's JoinGroup.
        protocol_type: the member's protocol type (e.g. ``consumer``).
        protocols: ``(name, metadata)`` in the member's order of preference.
        assignment: the member's assignment in the persisted generation.
    """

    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    assignment: bytes = b""


@dataclasses.dataclass(frozen=True, slots=True)
class GroupRecord:
    """A classic group's metadata as persisted after a rebalance completes.

    Attributes:
        protocol_type: the group's protocol type, None for a group that only
            ever had standalone commits.
        generation_id: the generation the record belongs to.
        protocol_name: the selected protocol, None when the group is empty.
        leader_id: the leader's member id, None when the group is empty.
        state_timestamp_ms: when the group entered its current state (drives
            offset expiry of empty groups).
        members: the members of the generation (empty for an empty group).
    """

    protocol_type: str | None
    generation_id: int
    protocol_name: str | None
    leader_id: str | None
    state_timestamp_ms: int | None
    members: tuple[MemberRecord, ...] = ()


# --- JSON shapes -----------------------------------------------------------------------------


def offset_rows(offsets: Mapping[tuple[str, int], CommittedOffset]) -> list[list[Any]]:
    """``offsets`` as the rows a ``commit`` entry carries:
    ``[topic, partition, offset, leader_epoch, metadata, commit_timestamp_ms]``."""
    return [
        [t, p, o.offset, o.leader_epoch, o.metadata, o.commit_timestamp_ms]
        for (t, p), o in offsets.items()
    ]


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _group_to_json(record: GroupRecord) -> dict[str, Any]:
    return {
        "protocol_type": record.protocol_type,
        "generation_id": record.generation_id,
        "protocol_name": record.protocol_name,
        "leader_id": record.leader_id,
        "state_timestamp_ms": record.state_timestamp_ms,
        "members": [
            {
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "session_timeout_ms": m.session_timeout_ms,
                "protocol_type": m.protocol_type,
                "protocols": [[name, _b64(meta)] for name, meta in m.protocols],
                "assignment": _b64(m.assignment),
            }
            for m in record.members
        ],
    }


def _group_from_json(obj: dict[str, Any]) -> GroupRecord:
    members = tuple(
        MemberRecord(
            member_id=str(m["member_id"]),
            group_instance_id=m["group_instance_id"],
            client_id=str(m["client_id"]),
            client_host=str(m["client_host"]),
            rebalance_timeout_ms=int(m["rebalance_timeout_ms"]),
            session_timeout_ms=int(m["session_timeout_ms"]),
            protocol_type=str(m["protocol_type"]),
            protocols=tuple((str(name), _unb64(meta)) for name, meta in m["protocols"]),
            assignment=_unb64(m["assignment"]),
        )
        for m in obj["members"]
    )
    return GroupRecord(
        protocol_type=obj["protocol_type"],
        generation_id=int(obj["generation_id"]),
        protocol_name=obj["protocol_name"],
        leader_id=obj["leader_id"],
        state_timestamp_ms=obj["state_timestamp_ms"],
        members=members,
    )


class OffsetState:
    """Committed offsets, classic groups' metadata and consumer groups' snapshots
    in memory: what :meth:`apply` made of the entries (see the module rules).

    Args:
        where: what errors call the store (``offset journal <path>``).
    """

    def __init__(self, where: str) -> None:
        self.where = where
        #: group -> (topic, partition) -> its committed offset
        self.offsets: dict[str, dict[tuple[str, int], CommittedOffset]] = {}
        #: group -> the classic group's persisted metadata
        self.groups: dict[str, GroupRecord] = {}
        #: group -> the consumer group's (KIP-848) persisted snapshot
        self.consumer_groups: dict[str, dict[str, Any]] = {}

    def knows(self, group: str) -> bool:
        """Whether anything of ``group`` is held."""
        return group in self.groups or group in self.offsets or group in self.consumer_groups

    def forget(self, group: str) -> None:
        """Drop everything of ``group`` from memory (not from the store)."""
        self.offsets.pop(group, None)
        self.groups.pop(group, None)
        self.consumer_groups.pop(group, None)

    def apply(self, entry: dict[str, Any]) -> None:
        """Apply one entry.

        Raises:
            OffsetStoreError: the entry's kind is unknown (a newer brokerlite wrote
                it) or it is malformed.
        """
        kind = entry.get("kind")
        try:
            if kind == "commit":
                offsets = self.offsets.setdefault(entry["group"], {})
                for topic, partition, offset, epoch, metadata, ts in entry["offsets"]:
                    offsets[(topic, partition)] = CommittedOffset(offset, epoch, metadata, ts)
            elif kind == "group":
                self.groups[entry["group"]] = _group_from_json(entry["metadata"])
            elif kind == "consumer_group":
                if entry["snapshot"] is None:
                    self.consumer_groups.pop(entry["group"], None)
                else:
                    self.consumer_groups[entry["group"]] = dict(entry["snapshot"])
            elif kind == "delete_group":
                self.forget(entry["group"])
            elif kind == "delete_offsets":
                offsets = self.offsets.get(entry["group"], {})
                for topic, partition in entry["partitions"]:
                    offsets.pop((topic, partition), None)
                if not offsets:
                    self.offsets.pop(entry["group"], None)
            elif kind == "delete_topic":
                topic = entry["topic"]
                for group in list(self.offsets):
                    offsets = self.offsets[group]
                    for key in [k for k in offsets if k[0] == topic]:
                        del offsets[key]
                    if not offsets:
                        del self.offsets[group]
            else:
                raise OffsetStoreError(
                    f"{self.where}: unknown entry kind {kind!r} (written by a newer brokerlite?)"
                )
        except (KeyError, TypeError, ValueError) as exc:
            # The CRC matched, so this is not a torn write but a malformed entry.
            raise OffsetStoreError(f"{self.where}: malformed {kind!r} entry: {exc!r}") from exc

    def live_entries(self) -> list[dict[str, Any]]:
        """The entries that rebuild the state as it is (a journal's compaction)."""
        entries: list[dict[str, Any]] = [
            {"kind": "group", "group": group, "metadata": _group_to_json(record)}
            for group, record in self.groups.items()
        ]
        entries.extend(
            {"kind": "consumer_group", "group": group, "snapshot": snapshot}
            for group, snapshot in self.consumer_groups.items()
        )
        for group, offsets in self.offsets.items():
            if offsets:
                entries.append({"kind": "commit", "group": group, "offsets": offset_rows(offsets)})
        return entries


class GroupStore(DurableStore):
    """The group coordinator's store: an :class:`OffsetState` and the
    :class:`~..storage.state_port.StatePort` its changes are written through.

    Made as :class:`OffsetStore` (a journal file) or
    :class:`~.replicated_offsets.ReplicatedOffsetStore` (``__consumer_offsets``).
    Every write method returns only once its change is written, and the state
    changes only then (see the module rules).

    Args:
        state: the in-memory state, which ``port`` applies the changes to.
        port: where the changes are written.
    """

    def __init__(self, state: OffsetState, port: StatePort) -> None:
        super().__init__(port)
        self._state = state

    # -- reading ------------------------------------------------------------------------------

    def offset(self, group: str, topic: str, partition: int) -> CommittedOffset | None:
        """The committed offset of ``group`` for one partition, or None."""
        offsets = self._state.offsets.get(group)
        return None if offsets is None else offsets.get((topic, partition))

    def group_offsets(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        """All committed offsets of ``group``, keyed by ``(topic, partition)`` (a copy)."""
        return dict(self._state.offsets.get(group, {}))

    def readable_offsets(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        """The committed offsets of ``group`` that OffsetFetch answers: all of them here
        (in a cluster, those replicated)."""
        return self.group_offsets(group)

    def has_offsets(self, group: str) -> bool:
        """Whether ``group`` has at least one committed offset."""
        return bool(self._state.offsets.get(group))

    def offset_groups(self) -> list[str]:
        """Ids of the groups that have committed offsets."""
        return [g for g, offsets in self._state.offsets.items() if offsets]

    def group_metadata(self, group: str) -> GroupRecord | None:
        """The last persisted metadata of ``group``, or None."""
        return self._state.groups.get(group)

    def groups(self) -> dict[str, GroupRecord]:
        """The persisted metadata of every group (a copy)."""
        return dict(self._state.groups)

    def consumer_groups(self) -> dict[str, dict[str, Any]]:
        """The persisted snapshots of the consumer groups of the new protocol (a copy)."""
        return dict(self._state.consumer_groups)

    # -- writing ------------------------------------------------------------------------------

    def commit_offsets(
        self, group: str, offsets: Mapping[tuple[str, int], CommittedOffset]
    ) -> None:
        """Durably record ``offsets`` for ``group`` (all of them or none).

        Args:
            group: the group id.
            offsets: ``(topic, partition) -> CommittedOffset``.

        Raises:
            OffsetStoreError: the write failed; nothing was recorded.
        """
        if not offsets:
            return
        self._port.write({"kind": "commit", "group": group, "offsets": offset_rows(offsets)})

    def store_group(self, group: str, record: GroupRecord) -> None:
        """Durably record the metadata of ``group``, replacing the previous record.

        Raises:
            OffsetStoreError: the write failed; the previous record stays.
        """
        self._port.write({"kind": "group", "group": group, "metadata": _group_to_json(record)})

    def store_consumer_group(self, group: str, snapshot: Mapping[str, Any] | None) -> None:
        """Durably record a consumer group's snapshot (None: the group is gone).

        Raises:
            OffsetStoreError: the write failed; the previous snapshot stays.
        """
        if snapshot is None and group not in self._state.consumer_groups:
            return
        self._port.write({"kind": "consumer_group", "group": group, "snapshot": snapshot})

    def delete_group(self, group: str) -> None:
        """Durably remove the metadata, consumer group snapshot and every offset of ``group``.

        Raises:
            OffsetStoreError: the write failed; nothing was removed.
        """
        if self._state.knows(group):
            self._port.write({"kind": "delete_group", "group": group})

    def delete_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> int:
        """Durably remove some committed offsets of ``group``.

        Args:
            group: the group id.
            partitions: ``(topic, partition)`` pairs; those without an offset are ignored.

        Returns:
            How many offsets were removed.

        Raises:
            OffsetStoreError: the write failed; nothing was removed.
        """
        offsets = self._state.offsets.get(group, {})
        present = sorted({tp for tp in partitions if tp in offsets})
        if present:
            self._port.write(
                {
                    "kind": "delete_offsets",
                    "group": group,
                    "partitions": [list(tp) for tp in present],
                }
            )
        return len(present)

    def delete_topic_offsets(self, topic: str) -> int:
        """Durably remove the offsets of ``topic`` in every group (the topic was deleted).

        Returns:
            How many offsets were removed.

        Raises:
            OffsetStoreError: the write failed; nothing was removed.
        """
        count = sum(1 for offsets in self._state.offsets.values() for t, _ in offsets if t == topic)
        if count:
            self._port.write({"kind": "delete_topic", "topic": topic})
        return count


class OffsetStore(GroupStore):
    """The group coordinator's store in an append-only journal file (one node).

    Opening the store replays the journal (truncating a torn tail) and compacts it
    when it has grown well past its live state.

    Args:
        path: the journal file; its directory is created if missing.
        fsync: fsync after every write (survives power loss, not only a crash of
            the process). Turn off only where durability does not matter.
        compact_min_bytes: never compact a journal smaller than this.

    Raises:
        OffsetStoreError: the journal cannot be read or written, or was written by
            a newer format.
    """

    def __init__(self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 1 << 20) -> None:
        # The header names no format: offset journals predate format names.
        self._journal = CrcJournal(
            Path(path),
            format_name=None,
            version=FORMAT_VERSION,
            fsync=fsync,
            error=OffsetStoreError,
        )
        state = OffsetState(f"offset journal {self._journal.path}")
        port = JournalFile.over(
            self._journal, state, compact_min_bytes=compact_min_bytes, name="offset journal"
        )
        super().__init__(state, port)
        port.open()
