"""Fetch (key 1), versions 4-17: records, straight from the segment files.

Rules (Kafka's, for a consumer fetching from the leader):

* Sessionless: a request with ``session_id`` 0 is a full fetch and the answer
  carries ``session_id`` 0 (v7+), which tells the client no session was
  created, so it keeps sending full fetches. A non-zero ``session_id`` (never
  handed out here) gets FETCH_SESSION_ID_NOT_FOUND. ``forgotten_topics_data``
  is therefore meaningless and ignored.
* Topics are named by name up to v12 and by topic id from v13 (unknown id:
  UNKNOWN_TOPIC_ID for each of its partitions).
* Per partition: an offset outside ``[log_start_offset, high_watermark]`` is
  OFFSET_OUT_OF_RANGE; otherwise whole batches from the offset, at most
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
* ``current_leader_epoch`` (v9+) is checked against the only epoch, 0.
* Long poll: when no partition has an error and fewer than ``min_bytes`` are
  available, the request is parked until enough bytes have been appended to
  its partitions, a transaction marker is written to one of them (it can make
  a whole transaction readable at once), ``max_wait_ms`` passes, or one of its
  topics is deleted; the answer is then read afresh. A read_committed fetch
  woken by records that are still inside a transaction may therefore return
  early with nothing; clients treat that as any empty answer.
* Authorization: each topic needs READ, else its partitions get
  TOPIC_AUTHORIZATION_FAILED, checked before existence so that a refused name
  says nothing about whether the topic exists. A topic id this broker does not
  know is UNKNOWN_TOPIC_ID whoever asks (an id is not a secret; a known id
  without READ is TOPIC_AUTHORIZATION_FAILED), as Kafka answers.
* Record data is never copied into Python: the response body is a plan whose
  :meth:`FetchPlan.encode_parts` yields the small encoded pieces and the file
  ranges of the log between them, for ``os.sendfile``. The bytes are exactly
  what the generated codec produces for the same response (tests check this).
"""

from __future__ import annotations

import dataclasses
import struct
import uuid
from typing import TYPE_CHECKING, Any

from trafka.brokerlite.errors import BrokerError
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k01_fetch as m

from ._base import HandlerSpec, Parked, Part, RequestContext
from ._util import NULL_UUID, check_leader_epoch, code_of, denied, partition_log

if TYPE_CHECKING:
    from trafka.brokerlite.broker import Broker
    from trafka.brokerlite.log import ReadResult

API_KEY = 1
MIN_VERSION = 4
MAX_VERSION = 17

READ_COMMITTED = 1

Aborted = m.FetchResponse.AbortedTransaction

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION_HEAD = struct.Struct(">ihq")  # partition_index, error_code, high_watermark
_I64 = struct.Struct(">q")


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

    @property
    def records_size(self) -> int:
        return sum(p.size for t in self.topics for p in t.partitions)

    def encode_parts(self, version: int) -> list[Part]:
        """The body at ``version`` as bytes and file ranges (see the module rules)."""
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
                    out += b"\x00"  # partition tagged fields
            if flexible:
                out += b"\x00"  # topic tagged fields
        if flexible:
            out += b"\x00"  # response tagged fields (no node endpoints)
        parts.append(bytes(out))
        return parts

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
                        )
                        for p in t.partitions
                    ],
                )
                for t in self.topics
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


def _resolve(broker: Broker, version: int, topic: m.FetchRequest.FetchTopic) -> tuple[str, bool]:
    """(name, known) of a requested topic; by id from v13."""
    if version >= 13:
        info = broker.logs.topic_by_id(topic.topic_id)
        return (info.name, True) if info is not None else ("", False)
    return topic.topic, True


def build(
    broker: Broker,
    version: int,
    request: m.FetchRequest,
    unreadable: frozenset[str] = frozenset(),
) -> FetchPlan:
    """Read every requested partition now (no waiting); the topics named in
    ``unreadable`` get TOPIC_AUTHORIZATION_FAILED."""
    budget = request.max_bytes
    first = True  # until a partition returns data, the first batch is always allowed
    read_committed = request.isolation_level == READ_COMMITTED
    topics: list[TopicResult] = []
    for topic in request.topics:
        name, known = _resolve(broker, version, topic)
        results: list[PartitionResult] = []
        for want in topic.partitions:
            if not known:
                results.append(PartitionResult(want.partition, ErrorCode.UNKNOWN_TOPIC_ID))
                continue
            if name in unreadable:
                results.append(
                    PartitionResult(want.partition, ErrorCode.TOPIC_AUTHORIZATION_FAILED)
                )
                continue
            code = check_leader_epoch(want.current_leader_epoch) if version >= 9 else 0
            if code:
                results.append(PartitionResult(want.partition, code))
                continue
            try:
                log = partition_log(broker, name, want.partition)
                high = log.log_end_offset
                start = log.log_start_offset
                state = broker.producers.state(name, want.partition)
                stable = state.last_stable_offset(high, start)
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
                )
                if not start <= want.fetch_offset <= high:
                    result.error_code = ErrorCode.OFFSET_OUT_OF_RANGE
                elif want.fetch_offset < high:
                    limit = min(want.partition_max_bytes, max(budget, 0))
                    if limit > 0 or first:
                        read = log.read(
                            want.fetch_offset,
                            limit,
                            upper_bound=stable if read_committed else high,
                            min_one_batch=first,
                        )
                        if read.size:
                            result.records = read
                            budget -= read.size
                            first = False
            except BrokerError as exc:
                result = PartitionResult(want.partition, code_of(exc))
            results.append(result)
        topics.append(TopicResult(name, topic.topic_id if version >= 13 else NULL_UUID, results))
    return FetchPlan(ErrorCode.NONE, 0, topics)


class _FetchWaiter:
    """A parked Fetch: waits for ``needed`` more bytes on its partitions."""

    def __init__(
        self,
        broker: Broker,
        version: int,
        request: m.FetchRequest,
        needed: int,
        deadline_ms: int,
        watches: frozenset[tuple[str, int]],
        unreadable: frozenset[str],
    ) -> None:
        self._broker = broker
        self._version = version
        self._request = request
        self._unreadable = unreadable
        self._needed = needed
        self.deadline_ms = deadline_ms
        self.watches = watches

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        self._needed -= nbytes
        return self._needed <= 0

    def complete(self, now_ms: int) -> FetchPlan:
        return build(self._broker, self._version, self._request, self._unreadable)


def handle(ctx: RequestContext, request: m.FetchRequest) -> FetchPlan | Parked:
    version = ctx.version
    if version >= 7 and request.session_id != 0:
        return FetchPlan(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, [])
    # Authorized once, when the request arrives (as Kafka does), not again on waking.
    names = (_resolve(ctx.broker, version, t) for t in request.topics)
    unreadable = frozenset(
        denied(ctx, AclOperation.READ, AclResourceType.TOPIC, (n for n, known in names if known))
    )
    plan = build(ctx.broker, version, request, unreadable)
    available = plan.records_size
    if request.max_wait_ms <= 0 or available >= request.min_bytes or not request.topics:
        return plan
    watches: set[tuple[str, int]] = set()
    for topic in plan.topics:
        for p in topic.partitions:
            if p.error_code != ErrorCode.NONE:
                return plan
            watches.add((topic.name, p.partition))
    waiter = _FetchWaiter(
        ctx.broker,
        version,
        request,
        request.min_bytes - available,
        ctx.now_ms + request.max_wait_ms,
        frozenset(watches),
        unreadable,
    )
    return ctx.park(waiter)


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


SPEC = HandlerSpec(API_KEY, MIN_VERSION, MAX_VERSION, handle, error_response)
