"""Fetch (key 1), versions 0-18 (4-18 with ``protocol_version`` 4.0): records,
straight from the segment files.

* Versions 0-3 (Kafka 3.9's, removed by KIP-896) are answered like v4 with
  read_uncommitted, but their records are down-converted to the message format
  the version reads (magic 0 for v0-1, magic 1 for v2-3;
  :mod:`trafka.brokerlite.storage.message_format`), so those answers are built in
  memory rather than sent from the files. v0-2 have no response ``max_bytes``:
  only ``partition_max_bytes`` limits them.

Rules (Kafka's, for a consumer fetching from the leader):

* Fetch sessions (KIP-227, v7+): the request's ``session_id`` and
  ``session_epoch`` choose a sessionless full fetch, a full fetch that creates
  a session, or an incremental fetch on one, as :mod:`..fetch_sessions`
  states. An incremental fetch reads every partition of its session and
  answers only those with news; a session error is answered at once with no
  partitions. Before v7 every fetch is sessionless.
* Topics are named by name up to v12 and by topic id from v13 (unknown id:
  UNKNOWN_TOPIC_ID for each of its partitions). A session made by id keeps
  the name it learnt for each id: when that topic is gone its partitions get
  UNKNOWN_TOPIC_OR_PARTITION, and when another topic now has the name,
  INCONSISTENT_TOPIC_ID.
* v18 (KIP-1166) adds each partition's high watermark as a follower knows it,
  for the leader's replication; a consumer leaves it at its default, and
  brokerlite answers v18 as v17 (its answer is the same).
* Per partition: an offset outside ``[log_start_offset, log_end_offset]`` is
  OFFSET_OUT_OF_RANGE (Kafka's LocalLog.read; a consumer's offset past the high
  watermark but within the log, as after a leader change, gets an empty
  answer); otherwise whole batches from the offset, at most
  ``partition_max_bytes`` and at most what is left of ``max_bytes`` for the
  response, except that the first non-empty partition gets at least one batch
  even when that batch is bigger (so a consumer can always make progress).
  Without replication the high watermark is the log end offset.
* Transactions: every answer carries the partition's last stable offset (the
  first offset of its oldest open transaction, else the high watermark).
  ``isolation_level`` 1 (read_committed) returns batches only below it, plus
  the aborted transactions (producer id, first offset) whose ABORT marker is
  at or after the fetch offset and whose first batch is below it, so the
  client can drop their records; read_uncommitted returns everything up to the
  high watermark and a null list, as Kafka does.
* ``current_leader_epoch`` (v9+) is checked against the leader's epoch (the
  only epoch, 0, on the single-node broker).
* A single node's internal topics (``__consumer_offsets`` and its siblings,
  :mod:`trafka.brokerlite.storage.internal_topics`) have no log here: each of
  their partitions reads as an empty log (high watermark, last stable offset
  and log start offset 0; any other offset than 0 OFFSET_OUT_OF_RANGE). Kafka
  serves its coordinators' records there (docs/compatibility.md).
* Cluster mode: a partition this broker does not lead is NOT_LEADER_OR_FOLLOWER
  (v16+: with its current leader and that leader's endpoint, KIP-951; below
  v16 without either, as Kafka, though v12+ could carry the leader).
  A follower's fetch (``replica_id``, in ``replica_state`` from v15) reads up
  to the log end offset and tells the leader how far the follower has come
  (:mod:`..cluster.replica_manager`: ISR and high watermark); a consumer reads below
  the high watermark only, and its long poll wakes when the high watermark
  moves, not when the leader appends. A follower's long poll is the other way
  round (Kafka's delayed fetch, ``replica.fetch.min.bytes``): it wakes when
  records are appended, or the partition's leadership or log changes, not when
  the high watermark moves. The leader's replication throttle
  (KIP-73, :mod:`..cluster.replication_quotas`) counts what a follower's answer
  carries of throttled partitions, and gives an out-of-sync follower no
  records of them while the quota is exceeded (their new bytes do not end its
  long poll either).
* Long poll: when no partition has an error and fewer than ``min_bytes`` are
  available, the request is parked until enough bytes have been appended to
  its partitions (all of its session's, for an incremental fetch), a
  transaction marker is written to one of them (it can make a whole
  transaction readable at once), ``max_wait_ms`` passes, or one of its topics
  is deleted; the answer is then read afresh (and, for a session, filtered
  then). A read_committed fetch woken by records that are still inside a
  transaction may therefore return early with nothing; clients treat that as
  any empty answer.
* Authorization: a follower's fetch (cluster mode, ``replica_id`` >= 0) needs
  CLUSTER_ACTION on the cluster and then no topic ACL; without it every
  partition is TOPIC_AUTHORIZATION_FAILED, as Kafka answers a follower (not
  CLUSTER_AUTHORIZATION_FAILED). A consumer's fetch: each topic needs READ,
  else its partitions get TOPIC_AUTHORIZATION_FAILED, checked before existence
  so that a refused name says nothing about whether the topic exists. A topic
  id this broker does not know is UNKNOWN_TOPIC_ID whoever asks (an id is not a
  secret; a known id without READ is TOPIC_AUTHORIZATION_FAILED), as Kafka
  answers.
* Quotas: an answer replaced by an empty throttled one (``FetchPlan.throttled``)
  tells the session nothing: a session it would have created is closed, and
  the news it carried stay news for the next fetch.
* Record data is never copied into Python: the response body is a plan whose
  :meth:`FetchPlan.encode_parts` yields the small encoded pieces and the file
  ranges of the log between them, for ``os.sendfile``. The bytes are exactly
  what the generated codec produces for the same response (tests check this).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from trafka.brokerlite.cluster.replica_manager import check_epoch
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.fetch_sessions import (
    INVALID_SESSION_ID,
    CachedPartition,
    FetchContext,
    FullContext,
    IncrementalContext,
    PartitionKey,
    SessionErrorContext,
    SessionlessContext,
)
from trafka.brokerlite.security.authorizer import CLUSTER_NAME
from trafka.brokerlite.storage.message_format import down_convert, fetch_magic
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k01_fetch as m
from trafka.codec.protocol import encode_response_body

from ..outcomes import Parked, Part
from ._base import HandlerSpec, Partitions, RequestContext
from ._util import (
    LEADER_EPOCH,
    NULL_UUID,
    check_partition,
    code_of,
    denied,
    kept_elsewhere,
    leader_log,
)

if TYPE_CHECKING:
    from trafka.brokerlite.storage.partition import PartitionLog, ReadResult

API_KEY = ApiKey.FETCH
MIN_VERSION = 4
MAX_VERSION = 18
OLD_MIN_VERSION = 0  # Kafka 3.9's; not with protocol_version 4.0

READ_COMMITTED = 1
# What a high watermark's move counts as for parked consumer fetches: enough to
# wake every one of them (they read afresh, whatever bytes they still wait for).
# A follower's parked fetch ignores it: it waits for records past its fetch
# offset, as Kafka's delayed fetch does (it learns the high watermark from its
# next answer).
HIGH_WATERMARK_WAKES = 1 << 61
# What a partition's change of state counts as (its leadership lost, its log back
# online): every parked fetch on it, a follower's too, is answered afresh.
PARTITION_CHANGED_WAKES = 3 << 61

Aborted = m.FetchResponse.AbortedTransaction

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihq")  # partition_index, error_code, high_watermark
_I64 = struct.Struct(">q")
_LEADER = struct.Struct(">ii")  # leader_id, leader_epoch
# The errors a partition's answer carries its current leader with (KIP-951).
_LEADER_HINTED = frozenset({ErrorCode.NOT_LEADER_OR_FOLLOWER, ErrorCode.FENCED_LEADER_EPOCH})


@dataclasses.dataclass(slots=True)
class PartitionResult:
    """One partition of a Fetch response, with its records as a log read."""

    partition: int
    error_code: int
    high_watermark: int = -1
    last_stable_offset: int = -1
    log_start_offset: int = -1
    aborted_transactions: list[Any] | None = None
    records: ReadResult | None = None
    #: KIP-951, with NOT_LEADER_OR_FOLLOWER or FENCED_LEADER_EPOCH (cluster mode):
    #: (leader id, leader epoch, host, port, rack) of the partition's leader.
    current_leader: tuple[int, int, str, int, str | None] | None = None
    #: The offset asked for (down-conversion for Fetch v0-3 drops what is before it).
    fetch_offset: int = 0

    @property
    def size(self) -> int:
        return 0 if self.records is None else self.records.size


@dataclasses.dataclass(slots=True)
class TopicResult:
    name: str
    topic_id: uuid.UUID
    partitions: list[PartitionResult]


@dataclasses.dataclass(slots=True)
class FetchPlan:
    """A Fetch response body whose records stay in the segment files until sent."""

    error_code: int
    session_id: int
    topics: list[TopicResult]
    throttle_time_ms: int = 0
    # Undoes what this answer told its fetch session and gives the empty answer
    # to send instead, when a quota throttles it (None: sessionless).
    on_throttle: Callable[[], FetchPlan] | None = dataclasses.field(
        default=None, repr=False, compare=False
    )

    @property
    def records_size(self) -> int:
        return sum(p.size for t in self.topics for p in t.partitions)

    def throttled(self) -> FetchPlan:
        """The empty answer sent instead of this one when a quota throttles it
        (Kafka's ``getThrottledResponse``); the session forgets this answer."""
        if self.on_throttle is not None:
            return self.on_throttle()
        return FetchPlan(ErrorCode.NONE, INVALID_SESSION_ID, [])

    def encode_parts(self, version: int) -> list[Part]:
        """The body at ``version`` as bytes and file ranges (see the module rules)."""
        if OLD_MIN_VERSION <= version < MIN_VERSION:
            return [encode_response_body(API_KEY, version, self.legacy_message(version))]
        if not MIN_VERSION <= version <= MAX_VERSION:
            raise ValueError(f"Fetch v{version} is not encoded here")
        flexible = version >= 12
        parts: list[Part] = []
        out = bytearray()
        out += _I32.pack(self.throttle_time_ms)
        if version >= 7:
            out += _I16.pack(self.error_code)
            out += _I32.pack(self.session_id)
        _array_len(out, len(self.topics), flexible)
        for topic in self.topics:
            if version >= 13:
                out += topic.topic_id.bytes
            else:
                _string(out, topic.name, flexible)
            _array_len(out, len(topic.partitions), flexible)
            for p in topic.partitions:
                out += _PARTITION_HEAD.pack(p.partition, p.error_code, p.high_watermark)
                out += _I64.pack(p.last_stable_offset)
                if version >= 5:
                    out += _I64.pack(p.log_start_offset)
                aborted = p.aborted_transactions
                if aborted is None:
                    out += b"\x00" if flexible else b"\xff\xff\xff\xff"
                else:
                    _array_len(out, len(aborted), flexible)
                    for txn in aborted:
                        out += _I64.pack(txn.producer_id)
                        out += _I64.pack(txn.first_offset)
                        if flexible:
                            out += b"\x00"
                if version >= 11:
                    out += _I32.pack(-1)  # preferred_read_replica
                size = p.size
                if flexible:
                    out += _uvarint(size + 1)
                else:
                    out += _I32.pack(size)
                if size:
                    parts.append(bytes(out))
                    out = bytearray()
                    assert p.records is not None
                    parts.extend(p.records.chunks)
                if flexible:
                    leader = p.current_leader
                    if leader is None:
                        out += b"\x00"  # partition tagged fields
                    else:
                        # One tagged field, current_leader (tag 1): 9 bytes.
                        out += b"\x01\x01\x09" + _LEADER.pack(leader[0], leader[1]) + b"\x00"
            if flexible:
                out += b"\x00"  # topic tagged fields
        endpoints = self.node_endpoints() if version >= 16 else []
        if endpoints:
            field = bytearray()
            _array_len(field, len(endpoints), True)
            for node, host, port, rack in endpoints:
                field += _I32.pack(node)
                _string(field, host, True)
                field += _I32.pack(port)
                if rack is None:
                    field += b"\x00"
                else:
                    _string(field, rack, True)
                field += b"\x00"
            out += b"\x01\x00" + _uvarint(len(field)) + field  # node_endpoints (tag 0)
        elif flexible:
            out += b"\x00"  # response tagged fields
        parts.append(bytes(out))
        return parts

    def node_endpoints(self) -> list[tuple[int, str, int, str | None]]:
        """KIP-951: where the leaders named in the partitions' hints are, once each."""
        seen: dict[int, tuple[int, str, int, str | None]] = {}
        for topic in self.topics:
            for p in topic.partitions:
                if p.current_leader is not None:
                    node, _, host, port, rack = p.current_leader
                    seen.setdefault(node, (node, host, port, rack))
        return [seen[n] for n in sorted(seen)]

    def legacy_message(self, version: int) -> m.FetchResponse:
        """The answer to a Fetch v0-3: records down-converted to the message
        format of ``version`` (magic 0 for v0-1, 1 for v2-3), and only the
        fields those versions have (the rest are not ignorable)."""
        magic = fetch_magic(version)
        return m.FetchResponse(
            throttle_time_ms=self.throttle_time_ms,
            responses=[
                m.FetchResponse.FetchableTopicResponse(
                    topic=t.name,
                    partitions=[
                        m.FetchResponse.PartitionData(
                            partition_index=p.partition,
                            error_code=p.error_code,
                            high_watermark=p.high_watermark,
                            records=b""
                            if p.records is None
                            else down_convert(p.records.tobytes(), magic, p.fetch_offset),
                        )
                        for p in t.partitions
                    ],
                )
                for t in self.topics
            ],
        )

    def to_message(self) -> m.FetchResponse:
        """The same response as the generated dataclass (records read into bytes)."""
        return m.FetchResponse(
            throttle_time_ms=self.throttle_time_ms,
            error_code=self.error_code,
            session_id=self.session_id,
            responses=[
                m.FetchResponse.FetchableTopicResponse(
                    topic=t.name,
                    topic_id=t.topic_id,
                    partitions=[
                        m.FetchResponse.PartitionData(
                            partition_index=p.partition,
                            error_code=p.error_code,
                            high_watermark=p.high_watermark,
                            last_stable_offset=p.last_stable_offset,
                            log_start_offset=p.log_start_offset,
                            aborted_transactions=p.aborted_transactions,
                            records=b"" if p.records is None else p.records.tobytes(),
                            current_leader=m.FetchResponse.LeaderIdAndEpoch(
                                leader_id=p.current_leader[0], leader_epoch=p.current_leader[1]
                            )
                            if p.current_leader is not None
                            else m.FetchResponse.LeaderIdAndEpoch(),
                        )
                        for p in t.partitions
                    ],
                )
                for t in self.topics
            ],
            node_endpoints=[
                m.FetchResponse.NodeEndpoint(node_id=n, host=h, port=port, rack=r)
                for n, h, port, r in self.node_endpoints()
            ],
        )


def _uvarint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _array_len(out: bytearray, n: int, flexible: bool) -> None:
    if flexible:
        out += _uvarint(n + 1)
    else:
        out += _I32.pack(n)


def _string(out: bytearray, text: str, flexible: bool) -> None:
    data = text.encode("utf-8")
    if flexible:
        out += _uvarint(len(data) + 1)
    else:
        out += _I16.pack(len(data))
    out += data


# -- building a response -------------------------------------------------------------


def _fetch_data(where: Partitions, version: int, request: m.FetchRequest) -> list[CachedPartition]:
    """The request's partitions, topics named (by id from v13; None: unknown id)."""
    out: list[CachedPartition] = []
    by_id = version >= 13
    for topic in request.topics:
        if by_id:
            info = where.logs.topic_by_id(topic.topic_id)
            name: str | None = info.name if info is not None else None
            tid = topic.topic_id
        else:
            name, tid = topic.topic, NULL_UUID
        for want in topic.partitions:
            out.append(
                CachedPartition(
                    name,
                    tid,
                    want.partition,
                    want.fetch_offset,
                    want.partition_max_bytes,
                    want.current_leader_epoch,
                    want.log_start_offset,
                )
            )
    return out


def read_partitions(
    where: Partitions,
    version: int,
    wants: list[CachedPartition],
    max_bytes: int,
    read_committed: bool,
    unreadable: frozenset[str] = frozenset(),
    replica_id: int = -1,
    now_ms: int = 0,
) -> list[PartitionResult]:
    """Read every partition of ``wants`` now (no waiting), one result each; the
    topics named in ``unreadable`` get TOPIC_AUTHORIZATION_FAILED. A follower's
    fetch (``replica_id`` >= 0, cluster mode) reads up to the log end offset and
    counts as that follower's progress."""
    budget = max_bytes
    first = True  # until a partition returns data, the first batch is always allowed
    by_id = version >= 13
    results: list[PartitionResult] = []
    for want in wants:
        name = want.topic
        if name is None or name in unreadable:
            # Refused before any read: an empty aborted-transactions list, not null,
            # as Kafka's FetchResponse.partitionResponse leaves it.
            refused = (
                ErrorCode.UNKNOWN_TOPIC_ID if name is None else ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )
            results.append(PartitionResult(want.partition, refused, aborted_transactions=[]))
            continue
        try:
            log = _log_read(where, name, want, replica_id, now_ms)
            if log is None:
                results.append(_empty_partition(want, read_committed))
                continue
            if by_id:
                # A session keeps the name it learnt: the topic may have been
                # deleted and created again under it since (Kafka's check).
                info = where.logs.topic(name)
                if info is not None and info.topic_id != want.topic_id:
                    results.append(PartitionResult(want.partition, ErrorCode.INCONSISTENT_TOPIC_ID))
                    continue
            high = log.high_watermark
            start = log.log_start_offset
            state = where.producers.state(name, want.partition)
            stable = state.last_stable_offset(high, start)
            # A follower copies the whole log; consumers stop at the high watermark.
            end = log.log_end_offset if replica_id >= 0 else high
            result = PartitionResult(
                want.partition,
                ErrorCode.NONE,
                high_watermark=high,
                last_stable_offset=stable,
                log_start_offset=start,
                aborted_transactions=(
                    [
                        Aborted(producer_id=pid, first_offset=first)
                        for pid, first in state.aborted_transactions(want.fetch_offset, stable)
                    ]
                    if read_committed
                    else None
                ),
                fetch_offset=want.fetch_offset,
            )
            # Out of range is judged against the log itself, for consumers too: an
            # offset between the high watermark and the log end offset (a new
            # leader whose high watermark has not caught up yet) is an empty answer.
            if not start <= want.fetch_offset <= log.log_end_offset:
                # Kafka tells no offsets with this error (its watermarks are -1).
                result = PartitionResult(want.partition, ErrorCode.OFFSET_OUT_OF_RANGE)
            elif want.fetch_offset < end and not (
                replica_id >= 0 and _held_back(where, name, want.partition, replica_id)
            ):
                limit = min(want.max_bytes, max(budget, 0))
                if limit > 0 or first:
                    read = log.read(
                        want.fetch_offset,
                        limit,
                        upper_bound=stable if read_committed else end,
                        min_one_batch=first,
                    )
                    if read.size:
                        result.records = read
                        budget -= read.size
                        first = False
        except BrokerError as exc:
            result = PartitionResult(want.partition, code_of(exc))
            # Kafka hints from v16 only (KafkaApis), with the endpoint: a client
            # of an older version learns the new leader from Metadata.
            if result.error_code in _LEADER_HINTED and where.cluster is not None and version >= 16:
                result.current_leader = _leader_of(where, name, want.partition)
        results.append(result)
    return results


def _log_read(
    where: Partitions, name: str, want: CachedPartition, replica_id: int, now_ms: int
) -> PartitionLog | None:
    """The log a fetch of ``want`` reads: the leader's (a follower's fetch counted
    as its progress, cluster mode); None for a single node's partition of an
    internal topic, which has none (an empty partition).

    Raises:
        BrokerError: the partition's refusal (unknown, not led here, epochs).
    """
    if replica_id >= 0 and where.cluster is not None:
        check_partition(where, name, want.partition)
        return where.cluster.replicas.on_follower_fetch(
            name,
            want.partition,
            replica_id,
            want.fetch_offset,
            now_ms,
            current_leader_epoch=want.current_leader_epoch,
            log_start_offset=want.fetcher_log_start_offset,
        )
    if kept_elsewhere(where, name, want.partition):
        return None
    return leader_log(where, name, want.partition, want.current_leader_epoch)


def _empty_partition(want: CachedPartition, read_committed: bool) -> PartitionResult:
    """A single node's partition of an internal topic, read as an empty log.

    Raises:
        FencedLeaderEpochError, UnknownLeaderEpochError: the request's epoch
            (unless -1) is not 0.
    """
    check_epoch(want.current_leader_epoch, LEADER_EPOCH)
    if want.fetch_offset != 0:
        return PartitionResult(want.partition, ErrorCode.OFFSET_OUT_OF_RANGE)
    return PartitionResult(
        want.partition,
        ErrorCode.NONE,
        high_watermark=0,
        last_stable_offset=0,
        log_start_offset=0,
        aborted_transactions=[] if read_committed else None,
        fetch_offset=0,
    )


def _held_back(where: Partitions, topic: str, partition: int, replica_id: int) -> bool:
    """Whether a follower's fetch of a partition gets no records: the leader's
    replication throttle holds it back (:mod:`..cluster.replication_quotas`)."""
    cluster = where.cluster
    assert cluster is not None
    return cluster.replication_quotas.leader.holds_back(
        topic, partition, in_sync=cluster.replicas.in_isr(topic, partition, replica_id)
    )


def _leader_of(
    where: Partitions, topic: str, partition: int
) -> tuple[int, int, str, int, str | None] | None:
    """The partition's leader for a KIP-951 hint, None when it has none."""
    cluster = where.cluster
    assert cluster is not None
    leader = cluster.leader(topic, partition)
    state = cluster.state(topic, partition)
    info = cluster.broker(leader)
    if leader < 0 or state is None or info is None:
        return None
    return (leader, state.leader_epoch, info.host, info.port, info.rack)


def _topics(
    version: int, pairs: Iterable[tuple[CachedPartition, PartitionResult]]
) -> list[TopicResult]:
    """Results grouped by topic: a new topic entry whenever the topic changes
    from the previous partition's (Kafka's FetchResponse.of does the same)."""
    by_id = version >= 13
    topics: list[TopicResult] = []
    current: TopicResult | None = None
    for want, result in pairs:
        name = want.topic or ""
        tid = want.topic_id if by_id else NULL_UUID
        if current is None or current.name != name or current.topic_id != tid:
            current = TopicResult(name, tid, [])
            topics.append(current)
        current.partitions.append(result)
    return topics


def build(
    where: Partitions,
    version: int,
    request: m.FetchRequest,
    unreadable: frozenset[str] = frozenset(),
) -> FetchPlan:
    """A sessionless answer to ``request``, read now (no waiting); the topics
    named in ``unreadable`` get TOPIC_AUTHORIZATION_FAILED."""
    wants = _fetch_data(where, version, request)
    results = read_partitions(
        where,
        version,
        wants,
        request.max_bytes,
        request.isolation_level == READ_COMMITTED,
        unreadable,
    )
    return FetchPlan(ErrorCode.NONE, 0, _topics(version, zip(wants, results, strict=True)))


class _Fetch:
    """One Fetch request's reads and answer, under its session context."""

    def __init__(
        self,
        where: Partitions,
        version: int,
        request: m.FetchRequest,
        context: SessionlessContext | FullContext | IncrementalContext,
        unreadable: frozenset[str],
    ) -> None:
        self.where = where
        self.version = version
        self.max_bytes = request.max_bytes
        self.read_committed = request.isolation_level == READ_COMMITTED
        self.context = context
        self.wants: list[CachedPartition] = (
            list(context.partitions.values())
            if isinstance(context, FullContext)
            else context.partitions
        )
        self.unreadable = unreadable
        self.replica_id = replica_id_of(version, request) if where.cluster is not None else -1

    def read(self, now_ms: int) -> list[PartitionResult]:
        return read_partitions(
            self.where,
            self.version,
            self.wants,
            self.max_bytes,
            self.read_committed,
            self.unreadable,
            self.replica_id,
            now_ms,
        )

    def answer(self, results: list[PartitionResult], now_ms: int) -> FetchPlan:
        """The answer from ``results``, as the context decides (see the module rules)."""
        context = self.context
        if self.replica_id >= 0:
            self._count_replication(results)
        pairs = zip(self.wants, results, strict=True)
        if isinstance(context, SessionlessContext):
            return FetchPlan(ErrorCode.NONE, INVALID_SESSION_ID, _topics(self.version, pairs))
        if isinstance(context, FullContext):
            for want, r in zip(self.wants, results, strict=True):
                want.remember(
                    r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset
                )
            session = context.cache.maybe_create(
                now_ms, context.privileged, context.partitions, context.uses_topic_ids
            )
            if session is None:
                return FetchPlan(ErrorCode.NONE, INVALID_SESSION_ID, _topics(self.version, pairs))
            cache, created = context.cache, session.id

            def close_unsent() -> FetchPlan:
                # Throttled: the answer is not sent, so no session was made (Kafka
                # answers a throttled full fetch before creating one).
                cache.remove(created)
                return FetchPlan(ErrorCode.NONE, INVALID_SESSION_ID, [])

            return FetchPlan(
                ErrorCode.NONE, created, _topics(self.version, pairs), on_throttle=close_unsent
            )
        session = context.session
        if not context.still_current:
            # Another request moved the session on while this one waited.
            return FetchPlan(ErrorCode.INVALID_FETCH_SESSION_EPOCH, session.id, [])
        kept: list[tuple[CachedPartition, PartitionResult]] = []
        told: list[tuple[CachedPartition, int, int, int]] = []
        for want, r in pairs:
            if not want.has_news(
                r.size, r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset
            ):
                continue
            kept.append((want, r))
            told.append(
                (want, want.high_watermark, want.last_stable_offset, want.local_log_start_offset)
            )
            want.remember(r.error_code, r.high_watermark, r.last_stable_offset, r.log_start_offset)
            if r.size:
                session.move_to_end(want)

        def untell() -> FetchPlan:
            # Throttled: the partitions are not sent, so they are still news.
            for cached, high, stable, start in told:
                cached.high_watermark = high
                cached.last_stable_offset = stable
                cached.local_log_start_offset = start
            return FetchPlan(ErrorCode.NONE, session.id, [])

        return FetchPlan(
            ErrorCode.NONE, session.id, _topics(self.version, kept), on_throttle=untell
        )

    def _count_replication(self, results: list[PartitionResult]) -> None:
        """A follower's answer: what it carries of throttled partitions counts
        against the leader's replication quota, in sync or not (KIP-73)."""
        cluster = self.where.cluster
        assert cluster is not None
        quota = cluster.replication_quotas.leader
        quota.record(
            sum(
                r.size
                for want, r in zip(self.wants, results, strict=True)
                if want.topic is not None and quota.is_throttled(want.topic, want.partition)
            )
        )


class _FetchWaiter:
    """A parked Fetch: waits for ``needed`` more bytes on its partitions."""

    def __init__(
        self,
        fetch: _Fetch,
        needed: int,
        deadline_ms: int,
        watches: frozenset[tuple[str, int]],
    ) -> None:
        self._fetch = fetch
        self._needed = needed
        self.deadline_ms = deadline_ms
        self.watches = watches
        replicated = fetch.where.cluster is not None
        self._high_watermark_only = replicated and fetch.replica_id < 0
        self._records_only = replicated and fetch.replica_id >= 0

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        if self._high_watermark_only and nbytes < HIGH_WATERMARK_WAKES:
            # A consumer of a replicated partition sees records once the high
            # watermark passes them, not when the leader appends them.
            return False
        if self._records_only:
            if nbytes == HIGH_WATERMARK_WAKES:
                # A follower waits for records (see HIGH_WATERMARK_WAKES).
                return False
            fetch = self._fetch
            if nbytes != PARTITION_CHANGED_WAKES and _held_back(
                fetch.where, topic, partition, fetch.replica_id
            ):
                # Bytes the throttle would not send do not complete a follower's
                # fetch (Kafka's DelayedFetch skips them too).
                return False
        self._needed -= nbytes
        return self._needed <= 0

    def complete(self, now_ms: int) -> FetchPlan:
        return self._fetch.answer(self._fetch.read(now_ms), now_ms)


def handle(ctx: RequestContext, request: m.FetchRequest) -> FetchPlan | Parked:
    version = ctx.version
    fetch_data = _fetch_data(ctx, version, request)
    context: FetchContext
    if version >= 7:

        def forgotten(by_id: bool) -> list[PartitionKey]:
            return [
                (t.topic_id if by_id else t.topic, p)
                for t in request.forgotten_topics_data
                for p in t.partitions
            ]

        context = ctx.fetch_sessions.new_context(
            version,
            request.session_id,
            request.session_epoch,
            fetch_data,
            forgotten,
            ctx.topic_name,
            ctx.now_ms,
            privileged=ctx.cluster is not None and replica_id_of(version, request) >= 0,
        )
        if isinstance(context, SessionErrorContext):
            return FetchPlan(context.error, INVALID_SESSION_ID, [])
    else:
        context = SessionlessContext(fetch_data)
    # Authorized once, when the request arrives (as Kafka does), not again on
    # waking; an incremental fetch authorizes every partition of its session.
    fetch = _Fetch(ctx, version, request, context, frozenset())
    names = (w.topic for w in fetch.wants if w.topic is not None)
    if fetch.replica_id < 0:
        fetch.unreadable = frozenset(denied(ctx, AclOperation.READ, AclResourceType.TOPIC, names))
    elif not ctx.allowed(AclOperation.CLUSTER_ACTION, AclResourceType.CLUSTER, CLUSTER_NAME):
        # A follower's fetch needs ClusterAction on the cluster, else every partition
        # is TOPIC_AUTHORIZATION_FAILED (Kafka's KafkaApis.handleFetchRequest).
        fetch.unreadable = frozenset(names)
    results = fetch.read(ctx.now_ms)
    available = sum(r.size for r in results)
    if request.max_wait_ms <= 0 or available >= request.min_bytes or not fetch.wants:
        return fetch.answer(results, ctx.now_ms)
    watches: set[tuple[str, int]] = set()
    for want, r in zip(fetch.wants, results, strict=True):
        if r.error_code != ErrorCode.NONE:
            return fetch.answer(results, ctx.now_ms)
        assert want.topic is not None  # an unknown topic id is an error
        watches.add((want.topic, want.partition))
    waiter = _FetchWaiter(
        fetch,
        request.min_bytes - available,
        ctx.mono_ms + request.max_wait_ms,
        frozenset(watches),
    )
    return ctx.park(waiter)


def replica_id_of(version: int, request: m.FetchRequest) -> int:
    """The fetching follower's broker id (-1: a consumer); in the body up to v14, in
    ``replica_state`` from v15."""
    return request.replica_state.replica_id if version >= 15 else request.replica_id


def error_response(
    request: m.FetchRequest | None, version: int, code: ErrorCode
) -> m.FetchResponse:
    if version >= 7 or request is None:
        return m.FetchResponse(error_code=code if version >= 7 else 0)
    return m.FetchResponse(
        responses=[
            m.FetchResponse.FetchableTopicResponse(
                topic=t.topic,
                partitions=[
                    m.FetchResponse.PartitionData(
                        partition_index=p.partition, error_code=code, high_watermark=-1, records=b""
                    )
                    for p in t.partitions
                ],
            )
            for t in request.topics
        ],
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    old_min=OLD_MIN_VERSION,
    uses="logs producers cluster fetch_sessions authorizer purgatory",
)
