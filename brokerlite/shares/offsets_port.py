"""The share-group offsets admin's port to share state (KIP-932): one interface,
two implementations. Sans-IO.

DescribeShareGroupOffsets, AlterShareGroupOffsets, DeleteShareGroupOffsets and
DeleteGroups (of a share group) are answered by the group coordinator. Their
handlers hold the rules of the request (authorization, the group's checks, the
answer's shape) once; where the share-partitions' state is read and changed is
this port's:

* :class:`LocalShareOffsets` (one node): the share fetcher's own
  share-partitions and journal (:mod:`.offsets_admin`); every job is done when
  it is made.
* :class:`ClusterShareOffsets` (cluster mode): the share coordinators of the
  share-partitions' keys, in ``__share_group_state``, as Kafka's group
  coordinator reaches them through its persister. A job is a set of
  share-state requests (ReadShareGroupState with leader epoch -1, then
  InitializeShareGroupState or DeleteShareGroupState) that the driver
  (:mod:`trafka.brokerlite.cluster.driver.share_state`) sends; the handler parks
  until the job is done (:data:`ADMIN_WATCH` is notified then).

Rules of the cluster implementation:

* Alter reads each share-partition's state epoch, then initialises it at the
  next one with the new start offset (nothing in flight): a share-partition
  leader still holding the old state is fenced at its next write
  (FENCED_STATE_EPOCH) and reads the new one. Delete reads, then deletes the
  share-partitions that have state (the coordinator leaves a deletion marker at
  the next state epoch, with the same effect).
* A retriable answer (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, a lost
  connection...) is retried after :data:`~.persister.RETRY_BACKOFF_MS` until
  the job is abandoned (its request's deadline): a share coordinator's broker
  that dies is replaced by the new leader of its ``__share_group_state``
  partition. Another error is that share-partition's answer.
* The log bounds and topic ids the handler needs come from the broker's view
  (``topic_info``, ``bounds``). A lag needs the partition's high watermark,
  which only its leader knows for sure (a follower's lags behind, and a broker
  without a replica has none): Describe asks the leader, ListOffsets for the
  latest offset, read_uncommitted, as Kafka's group coordinator does (its
  NetworkPartitionMetadataClient, KIP-1226). A leader that cannot be asked
  (none, or an error that retrying does not cure) leaves the lag -1, Kafka's
  unknown lag.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k02_list_offsets as _list
from trafka.codec.messages import k83_initialize_share_group_state as _init
from trafka.codec.messages import k84_read_share_group_state as _read
from trafka.codec.messages import k86_delete_share_group_state as _delete

from .coordinator import ADMIN_READ_EPOCH, SHARE_STATE_TOPIC, state_key
from .offsets_admin import EntryResult, ShareOffsetInfo
from .partition import SharePartition
from .persister import RETRIABLE, RETRY_BACKOFF_MS, StateRequest

if TYPE_CHECKING:
    from trafka.brokerlite.storage.log_manager import LogManager

    from .fetcher import ShareFetcher

__all__ = [
    "ADMIN_WATCH",
    "ClusterShareOffsets",
    "Job",
    "LocalShareOffsets",
    "ShareOffsetsPort",
]

#: What parked offsets-admin requests watch: notified when a job is done.
ADMIN_WATCH = (f"{SHARE_STATE_TOPIC}.admin", -1)

TP = tuple[str, int]
Describe = dict[TP, ShareOffsetInfo | None]
Alter = dict[TP, EntryResult]
DeleteTopics = dict[str, EntryResult]

_OK: EntryResult = (ErrorCode.NONE, None)
_LATEST = -1  # ListOffsets' timestamp for the latest offset (the high watermark)
#: A leader that moved: asked again after a lookup. (LEADER_NOT_AVAILABLE, no
#: leader at all, leaves the lag unknown, as on Kafka.)
_LEADER_MOVED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER})
_UNKNOWN = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class Job:
    """One request's work on share state: ``value`` once done (None before)."""

    def __init__(self, value: Any = None) -> None:
        self.value = value
        self.done = value is not None


class ShareOffsetsPort(Protocol):
    """Where the offsets admin reads and changes share state (see the module)."""

    def describe(self, group_id: str, wanted: list[TP] | None) -> Job:
        """Start offsets and lags (``Describe``); ``wanted`` None: every
        share-partition of the group."""
        ...

    def alter(self, group_id: str, offsets: Mapping[TP, int]) -> Job:
        """New start offsets (``Alter``)."""
        ...

    def delete_topics(self, group_id: str, topics: list[str]) -> Job:
        """Forget whole topics (``DeleteTopics``)."""
        ...

    def delete_groups(self, groups: Mapping[str, set[TP]]) -> Job:
        """Forget deleted groups' state: ``{group: ErrorCode}``."""
        ...

    def abandon(self, job: Job) -> None:
        """The request stopped waiting for ``job``."""
        ...

    def topic_id(self, topic: str) -> uuid.UUID | None:
        """A topic's id, None if it does not exist."""
        ...


class LocalShareOffsets:
    """One node: the share fetcher's share-partitions and journal."""

    def __init__(self, fetcher: ShareFetcher, logs: LogManager) -> None:
        self._fetcher = fetcher
        self._logs = logs

    def topic_id(self, topic: str) -> uuid.UUID | None:
        info = self._logs.topic(topic)
        return None if info is None else info.topic_id

    def describe(self, group_id: str, wanted: list[TP] | None) -> Job:
        shares = self._fetcher
        if wanted is None:
            return Job(dict(shares.start_offsets(group_id)))
        return Job({(t, p): shares.start_offset(group_id, t, p) for t, p in wanted})

    def alter(self, group_id: str, offsets: Mapping[TP, int]) -> Job:
        return Job(self._fetcher.alter_start_offsets(group_id, offsets))

    def delete_topics(self, group_id: str, topics: list[str]) -> Job:
        return Job(self._fetcher.delete_topics(group_id, topics))

    def delete_groups(self, groups: Mapping[str, set[TP]]) -> Job:
        # (the fetcher forgets a deleted group's state itself: a listener of the groups)
        return Job({group: ErrorCode.NONE for group in groups})

    def abandon(self, job: Job) -> None:
        return None


@dataclasses.dataclass(slots=True)
class _Op:
    """One share-partition's part of a job."""

    job: _ClusterJob
    group: str
    tp: TP
    topic_id: str
    then: str  # after the read: "end" (describe), "init" or "delete"
    start: int = -1  # alter: the new start offset
    phase: str = "read"
    code: ErrorCode | None = None  # set when done
    read: Any = None  # the read's partition result
    end: int = -1  # describe: the leader's high watermark, -1 unknown
    not_before: int = 0


class _ClusterJob(Job):
    def __init__(self, finish: Callable[[_ClusterJob], Any]) -> None:
        super().__init__()
        self.ops: list[_Op] = []
        self.finish = finish
        self.abandoned = False


class ClusterShareOffsets:
    """Cluster mode: share state at the share coordinators (see the module rules).

    Args:
        topic_info: a topic's id (text) and partition count, None if unknown.
        bounds: a partition's (log start, log end, high watermark) where this
            broker has a replica of it, else None (Alter's checks; a lag asks
            the leader).
        initialized: the share-partitions a group may have state of.
    """

    def __init__(
        self,
        topic_info: Callable[[str], tuple[str, int] | None],
        bounds: Callable[[str, int], tuple[int, int, int] | None],
        initialized: Callable[[str], set[TP]],
    ) -> None:
        self._topic_info = topic_info
        self._bounds = bounds
        self._initialized = initialized
        self._queued: list[_Op] = []
        #: Called when there is something to send (the driver's wake-up).
        self.on_ready: Callable[[], None] = lambda: None
        #: Called when a job is done (parked requests look again).
        self.on_done: Callable[[], None] = lambda: None

    # -- the handlers' side ------------------------------------------------------------------

    def describe(self, group_id: str, wanted: list[TP] | None) -> Job:
        tps = sorted(self._initialized(group_id)) if wanted is None else wanted

        def finish(job: _ClusterJob) -> Describe:
            found: Describe = {tp: None for tp in tps}
            for op in job.ops:
                if op.code == ErrorCode.NONE and op.read.start_offset >= 0:
                    found[op.tp] = _info(op.read, op.end)
            if wanted is None:
                return {tp: info for tp, info in found.items() if info is not None}
            return found

        return self._start(group_id, [(tp, "end", -1) for tp in tps], finish)

    def alter(self, group_id: str, offsets: Mapping[TP, int]) -> Job:
        results: Alter = {}
        work = []
        for (topic, partition), offset in offsets.items():
            if self._id_of(topic, partition) is None:
                results[(topic, partition)] = (
                    _UNKNOWN,
                    f"unknown topic-partition {topic}-{partition}",
                )
                continue
            bounds = self._bounds(topic, partition)
            if offset < 0:
                results[(topic, partition)] = (
                    ErrorCode.INVALID_REQUEST,
                    f"{topic}-{partition}: start offset {offset} is negative",
                )
            elif bounds is not None and offset > bounds[1]:
                results[(topic, partition)] = (
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"{topic}-{partition}: start offset {offset} is past the log end "
                    f"offset {bounds[1]}",
                )
            else:
                start = offset if bounds is None else max(offset, bounds[0])
                work.append(((topic, partition), "init", start))

        def finish(job: _ClusterJob) -> Alter:
            out = dict(results)
            for op in job.ops:
                out[op.tp] = _entry(op.code)
            return out

        return self._start(group_id, work, finish)

    def delete_topics(self, group_id: str, topics: list[str]) -> Job:
        results: DeleteTopics = {}
        work: list[tuple[TP, str, int]] = []
        for topic in dict.fromkeys(topics):
            info = self._topic_info(topic)
            if info is None:
                results[topic] = (_UNKNOWN, f"unknown topic {topic}")
                continue
            results[topic] = _OK
            work.extend(((topic, p), "delete", -1) for p in range(info[1]))

        def finish(job: _ClusterJob) -> DeleteTopics:
            out = dict(results)
            for topic in out:
                ops = [op for op in job.ops if op.tp[0] == topic]
                if not ops:
                    continue
                failed = [op.code for op in ops if op.code != ErrorCode.NONE]
                if failed:
                    out[topic] = _entry(failed[0])
                elif not any(op.read.start_offset >= 0 for op in ops):
                    out[topic] = (
                        _UNKNOWN,
                        f"there is no offset information to delete: group {group_id} has "
                        f"no share state of {topic}",
                    )
            return out

        return self._start(group_id, work, finish)

    def delete_groups(self, groups: Mapping[str, set[TP]]) -> Job:
        def finish(job: _ClusterJob) -> dict[str, ErrorCode]:
            out = {group: ErrorCode.NONE for group in groups}
            for op in job.ops:
                if op.code != ErrorCode.NONE and out[op.group] == ErrorCode.NONE:
                    out[op.group] = op.code or ErrorCode.UNKNOWN_SERVER_ERROR
            return out

        job = _ClusterJob(finish)
        for group, tps in groups.items():
            self._add(job, group, [(tp, "delete", -1) for tp in sorted(tps)])
        return self._begin(job)

    def topic_id(self, topic: str) -> uuid.UUID | None:
        info = self._topic_info(topic)
        return None if info is None else uuid.UUID(info[0])

    def abandon(self, job: Job) -> None:
        if isinstance(job, _ClusterJob):
            job.abandoned = True
            self._queued = [op for op in self._queued if op.job is not job]

    # -- the driver's side -------------------------------------------------------------------

    def take(self, now_ms: int) -> list[StateRequest]:
        """The requests to send now."""
        out = []
        for op in [op for op in self._queued if op.not_before <= now_ms]:
            self._queued.remove(op)
            out.append(self._request(op))
        return out

    def next_retry(self) -> int | None:
        return min((op.not_before for op in self._queued), default=None)

    def answered(self, request: StateRequest, code: ErrorCode, payload: Any, now_ms: int) -> None:
        op: _Op = request.tag
        if op.job.abandoned:
            return
        if op.phase == "end" and code not in RETRIABLE | _LEADER_MOVED:
            # The lag is unknown (-1) unless the leader answered.
            op.end = payload.offset if code == ErrorCode.NONE else -1
            code = ErrorCode.NONE
        elif code in RETRIABLE or (op.phase == "end" and code in _LEADER_MOVED):
            op.not_before = now_ms + RETRY_BACKOFF_MS
            self._queued.append(op)
            self.on_ready()
            return
        if code == ErrorCode.NONE and op.phase == "read":
            op.read = payload
            if payload.start_offset >= 0 or op.then == "init":
                op.phase, op.not_before = op.then, now_ms
                self._queued.append(op)
                self.on_ready()
                return
        op.code = code
        self._settle(op.job)

    # -- internals ---------------------------------------------------------------------------

    def _id_of(self, topic: str, partition: int) -> str | None:
        info = self._topic_info(topic)
        return None if info is None or not 0 <= partition < info[1] else info[0]

    def _start(
        self, group: str, work: list[tuple[TP, str, int]], finish: Callable[[_ClusterJob], Any]
    ) -> Job:
        job = _ClusterJob(finish)
        self._add(job, group, work)
        return self._begin(job)

    def _add(self, job: _ClusterJob, group: str, work: Iterable[tuple[TP, str, int]]) -> None:
        for tp, then, start in work:
            topic_id = self._id_of(*tp)
            if topic_id is not None:
                job.ops.append(_Op(job, group, tp, topic_id, then, start))

    def _begin(self, job: _ClusterJob) -> Job:
        if not job.ops:
            self._settle(job)
            return job
        self._queued.extend(job.ops)
        self.on_ready()
        return job

    def _settle(self, job: _ClusterJob) -> None:
        if job.done or any(op.code is None for op in job.ops):
            return
        job.value = job.finish(job)
        job.done = True
        self.on_done()

    def _request(self, op: _Op) -> StateRequest:
        key = (op.group, op.tp[0], op.tp[1])
        coordinator_key = state_key(op.group, op.topic_id, op.tp[1])
        index = op.tp[1]
        if op.phase == "end":
            lq = _list.ListOffsetsRequest
            latest = lq.ListOffsetsPartition(partition_index=index, timestamp=_LATEST)
            body = lq(
                replica_id=-1, topics=[lq.ListOffsetsTopic(name=op.tp[0], partitions=[latest])]
            )
            return StateRequest(
                ApiKey.LIST_OFFSETS, "", body, key, owner=self, tag=op, leader_of=op.tp, version=2
            )
        if op.phase == "read":
            rq = _read.ReadShareGroupStateRequest
            part: Any = rq.PartitionData(partition=index, leader_epoch=ADMIN_READ_EPOCH)
            body = _body(rq, rq.ReadStateData, op, part)
            return StateRequest(
                ApiKey.READ_SHARE_GROUP_STATE, coordinator_key, body, key, owner=self, tag=op
            )
        if op.phase == "init":
            iq = _init.InitializeShareGroupStateRequest
            epoch = int(op.read.state_epoch) + 1
            part = iq.PartitionData(partition=index, state_epoch=epoch, start_offset=op.start)
            body = _body(iq, iq.InitializeStateData, op, part)
            return StateRequest(
                ApiKey.INITIALIZE_SHARE_GROUP_STATE, coordinator_key, body, key, owner=self, tag=op
            )
        dq = _delete.DeleteShareGroupStateRequest
        body = _body(dq, dq.DeleteStateData, op, dq.PartitionData(partition=index))
        return StateRequest(
            ApiKey.DELETE_SHARE_GROUP_STATE, coordinator_key, body, key, owner=self, tag=op
        )


def _body(request: Any, topic: Any, op: _Op, partition: Any) -> Any:
    """A share-state request of one share-partition."""
    return request(
        group_id=op.group, topics=[topic(topic_id=uuid.UUID(op.topic_id), partitions=[partition])]
    )


def _info(read: Any, end: int) -> ShareOffsetInfo:
    """A share-partition's start offset and lag (KIP-1226): the records from the
    start offset up to the leader's high watermark ``end`` that have not
    completed delivery; -1 when ``end`` is unknown."""
    start = int(read.start_offset)
    if end < 0:
        return ShareOffsetInfo(start, -1)
    runs = [
        [b.first_offset, b.last_offset, b.delivery_state, b.delivery_count]
        for b in read.state_batches
    ]
    done = SharePartition.from_snapshot({"start": start, "runs": runs})
    return ShareOffsetInfo(start, max(end - start - done.delivery_complete_count(), 0))


def _entry(code: ErrorCode | None) -> EntryResult:
    if code == ErrorCode.NONE:
        return _OK
    name = "UNKNOWN_SERVER_ERROR" if code is None else code.name
    return (code or ErrorCode.UNKNOWN_SERVER_ERROR, f"the share coordinator answered {name}")
