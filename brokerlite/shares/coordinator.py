"""The share coordinator (KIP-932, cluster mode): share-partitions' durable state
kept in the replicated internal topic ``__share_group_state``. Sans-IO.

A share-partition (a share group's view of one partition) is served by the
*share-partition leader*, the broker leading the data partition. Its state
(start offset, in-flight runs with their states and delivery counts) must
outlive that broker, so, as in Kafka, the leader reads and writes it through
the *share coordinator* of its key, ``"<group>:<topic id>:<partition>"``: the
leader of the key's ``__share_group_state`` partition (Kafka's hash of the key,
as for groups). The requests are Kafka's inter-broker ReadShareGroupState,
WriteShareGroupState, InitializeShareGroupState and DeleteShareGroupState; the
handlers (``k83``..``k86``) call :class:`ShareCoordinator`.

Rules and invariants:

* One record per write, keyed per share-partition, so that log compaction keeps
  exactly the live state. Keys and values are JSON (brokerlite's layout: the
  specs this project generates from do not carry Kafka's ShareSnapshot and
  ShareUpdate record schemas):

  ==========================================  =============================================
  key                                         value
  ==========================================  =============================================
  ``["share", group, topic_id, partition]``   ``{"state_epoch", "leader_epoch", "start",
                                              "runs": [[first, last, state, count], ...]}``
                                              (a snapshot); null: deleted
  ==========================================  =============================================

  brokerlite's share-partition leader sends the whole state in every write
  (Kafka's sends the changed batches), so every record is a snapshot: Kafka's
  ShareSnapshot, never a ShareUpdate.
* A change is appended to the key's partition on this broker (its leader) and
  applied to memory only after the append succeeded. Answering only once the
  partition's in-sync replicas have it is the broker's job (the handler's reply
  waits for the high watermark).
* A partition's keys are in memory only while this broker leads it:
  :meth:`ShareCoordinator.load_partition` replays its log in offset order,
  :meth:`ShareCoordinator.unload_partition` forgets them. A key whose partition
  is not loaded here is answered NOT_COORDINATOR.
* Fencing, as Kafka's share coordinator: a read or write carrying a leader epoch
  (of the data partition) below the one stored is refused with
  FENCED_LEADER_EPOCH, so a deposed share-partition leader cannot overwrite its
  successor's state; a read with a newer one records it (written like any
  change). A write with a state epoch below the stored one is refused with
  FENCED_STATE_EPOCH. InitializeShareGroupState sets the state epoch and
  start offset and drops the in-flight runs.
* A read of a key never written answers start offset -1 (not initialized): the
  share-partition leader then initialises it from the group's
  ``share.auto.offset.reset`` and writes it.
* A read with leader epoch -1 is the group coordinator's (the share-group
  offsets admin, where Kafka sends ReadShareGroupStateSummary): it is neither
  fenced nor recorded.
* DeleteShareGroupState leaves a *deletion marker*: start offset -1 at the next
  state epoch, not a tombstone. A share-partition leader still holding the old
  state then has its next write refused (FENCED_STATE_EPOCH: it forgets it and
  reads the marker, which says "not initialized"), instead of writing the old
  state back over the deletion.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterable
from typing import Any

from trafka.codec.errors import ErrorCode

from ..cluster.view import SHARE_STATE_TOPIC
from ..errors import BrokerError
from ..storage.internal_topic import InternalTopic

__all__ = [
    "ADMIN_READ_EPOCH",
    "NOT_INITIALIZED",
    "SHARE_STATE_TOPIC",
    "ShareCoordinator",
    "ShareCoordinatorError",
    "ShareStateRecord",
    "state_key",
]

SK = tuple[str, str, int]  # (group, topic id as text, partition)

#: The leader epoch of the group coordinator's reads (never fenced nor recorded).
ADMIN_READ_EPOCH = -1
#: The start offset of a share-partition not initialized (or deleted).
NOT_INITIALIZED = -1


class ShareCoordinatorError(BrokerError):
    """The share coordinator's topic cannot be read or written."""

    code = ErrorCode.COORDINATOR_NOT_AVAILABLE


def state_key(group: str, topic_id: str, partition: int) -> str:
    """The share coordinator's key of a share-partition (what places it)."""
    return f"{group}:{topic_id}:{partition}"


@dataclasses.dataclass(frozen=True, slots=True)
class ShareStateRecord:
    """One share-partition's state as the coordinator keeps it."""

    state_epoch: int
    leader_epoch: int
    start: int
    runs: tuple[tuple[int, int, int, int], ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "state_epoch": self.state_epoch,
            "leader_epoch": self.leader_epoch,
            "start": self.start,
            "runs": [list(r) for r in self.runs],
        }

    @classmethod
    def from_json(cls, doc: Any) -> ShareStateRecord:
        """Raises ValueError for anything but what :meth:`to_json` writes."""
        try:
            runs = tuple((int(a), int(b), int(c), int(d)) for a, b, c, d in doc["runs"])
            return cls(int(doc["state_epoch"]), int(doc["leader_epoch"]), int(doc["start"]), runs)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"bad share state {doc!r}: {exc}") from exc


class ShareCoordinator:
    """The share-partition states this broker coordinates (see the module rules).

    Args:
        partition_for: the ``__share_group_state`` partition of a key, or None
            while the topic does not exist.
        append: appends a record batch to one of its partitions on this broker.
        read: ``read(partition) -> chunks``: the partition's whole log here.
        now_ms: the clock, for record timestamps.
    """

    def __init__(
        self,
        *,
        partition_for: Callable[[str], int | None],
        append: Callable[[int, bytes], None],
        read: Callable[[int], Iterable[bytes]],
        now_ms: Callable[[], int],
    ) -> None:
        self.topic = InternalTopic(
            SHARE_STATE_TOPIC, partition_for=partition_for, append=append, read=read, now_ms=now_ms
        )
        self._states: dict[SK, ShareStateRecord] = {}

    # -- partitions -------------------------------------------------------------------------

    def partition_of(self, group: str, topic_id: str, partition: int) -> int | None:
        """The ``__share_group_state`` partition of a share-partition (None: no topic)."""
        return self.topic.partition_for(state_key(group, topic_id, partition))

    def loaded_partitions(self) -> set[int]:
        return self.topic.loaded_partitions()

    def load_partition(self, partition: int) -> int:
        """Replay one partition's log (this broker now leads it); how many
        share-partitions it holds.

        Raises:
            ShareCoordinatorError: a record cannot be read; the partition stays unloaded.
        """
        self.unload_partition(partition)
        for key, value in self.topic.records_of(partition, ShareCoordinatorError):
            try:
                kind, group, topic_id, index = json.loads(key or b"null")
                if kind != "share":
                    raise ValueError(f"unknown record kind {kind!r}")
                sk = (str(group), str(topic_id), int(index))
                if value is None:
                    self._states.pop(sk, None)
                else:
                    self._states[sk] = ShareStateRecord.from_json(json.loads(value))
            except (ValueError, TypeError) as exc:
                self.unload_partition(partition)
                raise ShareCoordinatorError(
                    f"{SHARE_STATE_TOPIC}-{partition}: unreadable record {key!r}: {exc}"
                ) from exc
        self.topic.loaded(partition)
        return sum(1 for sk in self._states if self.partition_of(*sk) == partition)

    def unload_partition(self, partition: int) -> None:
        """Forget one partition's share-partitions (this broker no longer leads it)."""
        self.topic.unloaded(partition)
        for sk in [k for k in self._states if self.partition_of(*k) == partition]:
            del self._states[sk]

    def state(self, group: str, topic_id: str, partition: int) -> ShareStateRecord | None:
        """What is stored for a share-partition (None: never written, or not here)."""
        return self._states.get((group, topic_id, partition))

    # -- the requests -----------------------------------------------------------------------

    def read(
        self, group: str, topic_id: str, partition: int, leader_epoch: int
    ) -> tuple[ErrorCode, ShareStateRecord | None]:
        """ReadShareGroupState for one share-partition: its state (None with NONE:
        not initialized), or the refusal."""
        sk = (group, topic_id, partition)
        refused = self._not_here(sk)
        if refused is not None:
            return refused, None
        current = self._states.get(sk)
        if current is None:
            return ErrorCode.NONE, None
        if leader_epoch == ADMIN_READ_EPOCH:
            return ErrorCode.NONE, current
        if leader_epoch < current.leader_epoch:
            return ErrorCode.FENCED_LEADER_EPOCH, None
        if leader_epoch > current.leader_epoch:
            current = dataclasses.replace(current, leader_epoch=leader_epoch)
            code = self._store(sk, current)
            if code != ErrorCode.NONE:
                return code, None
        return ErrorCode.NONE, current

    def write(
        self,
        group: str,
        topic_id: str,
        partition: int,
        *,
        state_epoch: int,
        leader_epoch: int,
        start: int,
        runs: Iterable[tuple[int, int, int, int]],
    ) -> ErrorCode:
        """WriteShareGroupState for one share-partition (its whole state)."""
        sk = (group, topic_id, partition)
        refused = self._refused(sk, start)
        if refused is not None:
            return refused
        current = self._states.get(sk)
        if current is not None:
            if leader_epoch < current.leader_epoch:
                return ErrorCode.FENCED_LEADER_EPOCH
            if state_epoch < current.state_epoch:
                return ErrorCode.FENCED_STATE_EPOCH
        return self._store(sk, ShareStateRecord(state_epoch, leader_epoch, start, tuple(runs)))

    def initialize(
        self, group: str, topic_id: str, partition: int, *, state_epoch: int, start: int
    ) -> ErrorCode:
        """InitializeShareGroupState: a fresh state at ``start`` (nothing in flight)."""
        sk = (group, topic_id, partition)
        refused = self._refused(sk, start)
        if refused is not None:
            return refused
        current = self._states.get(sk)
        if current is not None and state_epoch < current.state_epoch:
            return ErrorCode.FENCED_STATE_EPOCH
        leader_epoch = -1 if current is None else current.leader_epoch
        return self._store(sk, ShareStateRecord(state_epoch, leader_epoch, start))

    def delete(self, group: str, topic_id: str, partition: int) -> ErrorCode:
        """DeleteShareGroupState: forget a share-partition (a deletion marker, see
        the module rules)."""
        sk = (group, topic_id, partition)
        refused = self._not_here(sk)
        if refused is not None:
            return refused
        current = self._states.get(sk)
        if current is None or current.start < 0:
            return ErrorCode.NONE
        marker = ShareStateRecord(current.state_epoch + 1, current.leader_epoch, NOT_INITIALIZED)
        return self._store(sk, marker)

    # -- internals --------------------------------------------------------------------------

    def _not_here(self, sk: SK) -> ErrorCode | None:
        index = self.partition_of(*sk)
        if index is None or index not in self.topic.loaded_partitions():
            return ErrorCode.NOT_COORDINATOR
        return None

    def _refused(self, sk: SK, start: int) -> ErrorCode | None:
        """A write's or initialisation's refusal before its epochs are looked at."""
        refused = self._not_here(sk)
        if refused is None and start < 0:
            return ErrorCode.INVALID_REQUEST
        return refused

    def _store(self, sk: SK, state: ShareStateRecord) -> ErrorCode:
        code = self._append(sk, state)
        if code == ErrorCode.NONE:
            self._states[sk] = state
        return code

    def _append(self, sk: SK, state: ShareStateRecord | None) -> ErrorCode:
        key = json.dumps(["share", *sk], separators=(",", ":")).encode()
        value = (
            None if state is None else json.dumps(state.to_json(), separators=(",", ":")).encode()
        )
        try:
            self.topic.append(
                state_key(*sk), [(key, value)], ShareCoordinatorError, f"share-partition {sk}"
            )
        except ShareCoordinatorError:
            return ErrorCode.NOT_COORDINATOR
        return ErrorCode.NONE
