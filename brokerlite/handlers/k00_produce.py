"""Produce (key 0), versions 0-13 served (3-13 with ``protocol_version`` 4.0).

* Versions 0-2 (Kafka 3.9's, removed by KIP-896) carry legacy message sets
  (magic 0 or 1): each partition's set is converted into one magic 2 batch
  (:mod:`trafka.brokerlite.storage.message_format`) and then appended as any other
  batch, so offsets and log-append time are assigned by the log. v0 answers
  have no throttle time, v0-1 no log-append time. Under ``protocol_version``
  4.0 they are advertised (Kafka 4.0 advertises them: older librdkafka
  releases look for them) but answered with UNSUPPORTED_VERSION.

* Records must be magic-2 batches (v3+), one per partition (more is
  INVALID_RECORD, as Kafka's log validation says). Each partition's blob is handed to
  the producer states (:mod:`trafka.brokerlite.transactions.eos`) and then, unless refused,
  to ``PartitionLog.append`` as received: the log validates every batch (size,
  magic, CRC-32C, ``max.message.bytes``) before writing any, assigns offsets
  by rewriting base offsets, and never re-encodes. Its errors become the
  partition's error code (CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_RECORD,
  ...) with the reason in ``error_message`` (v8+); other partitions of the
  request are unaffected.
* Idempotence, as Kafka: a batch that repeats one of its producer's last five
  (same epoch and sequence range) is answered with the original base offset
  and not written again; a sequence gap is OUT_OF_ORDER_SEQUENCE_NUMBER; an
  epoch older than the partition has seen is INVALID_PRODUCER_EPOCH; a producer
  the partition does not know is accepted at any sequence (KIP-360). The
  checks survive restarts (the state is rebuilt from the log and snapshots).
* Transactions: a transactional batch must come from the transaction's current
  producer epoch, with the partition added to its ongoing transaction
  (KIP-890's verification): otherwise INVALID_PRODUCER_ID_MAPPING,
  INVALID_PRODUCER_EPOCH or INVALID_TXN_STATE, and nothing is written. In
  cluster mode the coordinator may be another broker: the request is parked
  while the leader asks it (AddPartitionsToTxn v4 ``verify_only``,
  :mod:`trafka.brokerlite.transactions.verification`), then handled with the
  answers; a coordinator unreachable or busy gives NOT_ENOUGH_REPLICAS
  (retriable). An acks=0 request is never parked: one that needs asking fails.
* v12 (transaction version 2, KIP-890 part 2): the client sends no
  AddPartitionsToTxn; a transactional batch adds its partition to the
  producer's transaction, as Kafka's leader does (AddPartitionsToTxn without
  ``verify_only``, ``TransactionSupportedOperation.ADD_PARTITION`` for any
  v12+ request, whatever the finalized ``transaction.version``). The
  coordinator's answers map as Kafka's leader maps them: PRODUCER_FENCED (a
  late batch of a transaction whose EndTxn bumped the epoch, or a fenced
  instance) is INVALID_PRODUCER_EPOCH; INVALID_PRODUCER_ID_MAPPING passes on;
  CONCURRENT_TRANSACTIONS (the last transaction's markers not yet written) and
  a journal failure are NOT_ENOUGH_REPLICAS (retriable). In cluster mode the
  leader asks the coordinator as for a v11 batch (parked, one question per
  partition not yet open), but to add: AddPartitionsToTxn v5 without
  ``verify_only`` (:mod:`trafka.brokerlite.transactions.verification`), or the
  coordinator's own add when it is this broker.
* v13 (KIP-516) names topics by id: each is looked up first; an id no topic
  has is UNKNOWN_TOPIC_ID on each of its partitions (before authorization,
  which needs a name), and the answer names topics by the ids asked.
* ``acks`` 1 and -1 are the same thing on one node: the reply is sent once the
  batches are in the log (flushing follows the flush settings), except that the
  ISR is this node alone, so an ``acks=-1`` produce to a topic whose
  ``min.insync.replicas`` is above 1 is refused with NOT_ENOUGH_REPLICAS and
  nothing is written (as Kafka refuses it on an RF 1 topic). In cluster mode
  only the partition's leader appends (else NOT_LEADER_OR_FOLLOWER); ``acks=1``
  is answered after the leader's append, ``acks=-1`` (all) once the high
  watermark has passed the records, i.e. every in-sync replica has them
  (REQUEST_TIMED_OUT after ``timeout_ms``). With fewer in-sync replicas than
  ``min.insync.replicas`` an ``acks=-1`` produce is refused before the append
  (NOT_ENOUGH_REPLICAS); when the ISR shrank below it by the time the records
  were committed, NOT_ENOUGH_REPLICAS_AFTER_APPEND. A NOT_LEADER_OR_FOLLOWER
  answer carries the current leader and its endpoint (KIP-951, v10+), an
  ``acks=-1`` one whose leadership was lost while it waited too. An ``acks=-1``
  produce's error after its append (leadership lost, the timeout, too few
  replicas) keeps the append's base offset, log append time and log start
  offset, as Kafka's answer to a delayed produce does. ``acks=0``
  sends no reply; when a partition failed the connection is closed instead,
  which is how Kafka tells an acks=0 producer that something went wrong.
  Other values are INVALID_REQUIRED_ACKS.
* Unknown topics or partitions are UNKNOWN_TOPIC_OR_PARTITION: produce never
  creates topics (Metadata does). Kafka's internal topics (``__consumer_offsets``,
  ``__transaction_state``, ``__share_group_state``) are written by their
  coordinators only: a client's records for one of their partitions are
  INVALID_TOPIC_EXCEPTION, checked after the partition's existence and before
  anything else, as Kafka's ReplicaManager does (Kafka lets the client id
  ``__admin_client`` through; brokerlite does not, docs/compatibility.md).
* Appending wakes Fetch requests parked on the partition.
* Authorization: transactional batches need WRITE on the request's
  transactional id, else the whole request fails with
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED (acks=0: the connection is closed);
  each topic needs WRITE, else its partitions get TOPIC_AUTHORIZATION_FAILED
  (checked before existence) and the rest of the request proceeds.
  Idempotent producers were authorized at InitProducerId.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.errors import (
    BrokerError,
    InvalidRecordError,
    InvalidTopicError,
    NotEnoughReplicasError,
)
from trafka.brokerlite.storage.internal_topics import is_internal
from trafka.brokerlite.storage.message_format import up_convert
from trafka.brokerlite.transactions.verification import VERIFY_VERSION, added_code
from trafka.codec import ApiKey
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.messages import k00_produce as m
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.records import read_batch_header

from ..outcomes import Close, NoResponse, ParkAgain, Parked
from ._base import HandlerSpec, RequestContext
from ._util import check_partition, code_of, denied, leader_log, message_of

if TYPE_CHECKING:
    from trafka.brokerlite.cluster.view import ClusterView
    from trafka.brokerlite.storage.partition import PartitionLog
    from trafka.brokerlite.transactions.eos import ProduceResult, TxnVerifier
    from trafka.brokerlite.transactions.verification import Question, TxnVerification

API_KEY = ApiKey.PRODUCE
MIN_VERSION = 3
MAX_VERSION = 13
#: The first version naming topics by id (KIP-516).
TOPIC_IDS_VERSION = 13
#: The first version whose transactional batches add their partition (KIP-890 part 2).
IMPLICIT_ADD_VERSION = 12
ADVERTISED_MIN_VERSION = 0
OLD_MIN_VERSION = 0  # Kafka 3.9's

TopicResponse = m.ProduceResponse.TopicProduceResponse
PartitionResponse = m.ProduceResponse.PartitionProduceResponse


def _one_batch(records: bytes) -> None:
    """Kafka takes one magic 2 batch per partition and request, no more."""
    try:
        header = read_batch_header(records)
    except DecodeError:
        return  # the log's validation names what is wrong
    if header.magic == 2 and len(records) > header.size:
        raise InvalidRecordError(
            "more than one record batch for a partition in one request (Kafka takes one)"
        )


def _has_transactional_batches(request: m.ProduceRequest) -> bool:
    """Whether the first batch of some partition is transactional (what Kafka
    looks at to decide that the request needs the transactional id's WRITE)."""
    for topic in request.topic_data:
        for data in topic.partition_data:
            if data.records:
                try:
                    if read_batch_header(data.records).is_transactional:
                        return True
                except DecodeError:
                    continue  # the log refuses it later, partition by partition
    return False


def handle(
    ctx: RequestContext, request: m.ProduceRequest
) -> m.ProduceResponse | NoResponse | Close | Parked:
    if ctx.version >= TOPIC_IDS_VERSION:
        request = _named(ctx, request)
    refused = _refuse_transactional_id(ctx, request)
    if refused is not None:
        return refused
    verification = ctx.txn_verification
    if verification is not None and request.acks != 0:
        questions = _questions(ctx, verification, request)
        if questions:
            # KIP-890: the coordinator answers first (another broker, or this one
            # while it completes the producer's last transaction); the request is
            # then handled with its answers.
            waiter = _VerifyWaiter(ctx, request, verification, questions)
            if waiter.asks_others:
                parked = ctx.park(waiter)
                waiter.ticket = parked.ticket
                waiter.ask()
                return parked
            outcome = waiter.decide(ctx.now_ms)
            if isinstance(outcome, ParkAgain):
                parked = ctx.park(waiter)
                waiter.ticket = parked.ticket
                return parked
            return _answer_or_park(ctx, outcome)
    verify = ctx.verify_transactional
    if ctx.version >= IMPLICIT_ADD_VERSION:
        if verification is None:
            verify = _adding(ctx)
        else:  # a cluster: acks=0, or no partition to add (none transactional, or all open)
            verify = verification.verifier({}, add=True, now_ms=ctx.now_ms)
    return _answer_or_park(ctx, _produce(ctx, request, verify))


def _answer_or_park(
    ctx: RequestContext, outcome: m.ProduceResponse | NoResponse | Close | _AcksAllWaiter
) -> m.ProduceResponse | NoResponse | Close | Parked:
    if isinstance(outcome, _AcksAllWaiter):
        return ctx.park(outcome)
    return outcome


def _named(ctx: RequestContext, request: m.ProduceRequest) -> m.ProduceRequest:
    """v13: each topic named by its id's topic ("" for an id no topic has)."""
    topics = [
        dataclasses.replace(t, name=ctx.topic_name(t.topic_id) or "") for t in request.topic_data
    ]
    return dataclasses.replace(request, topic_data=topics)


def _produce(
    ctx: RequestContext, request: m.ProduceRequest, verify: TxnVerifier
) -> m.ProduceResponse | NoResponse | Close | _AcksAllWaiter:
    """Append each partition's batches (the transactional id authorized, the
    coordinator's answers in ``verify``): the answer, or the waiter of an
    acks=all Produce whose high watermarks must move first."""
    unwritable = denied(
        ctx, AclOperation.WRITE, AclResourceType.TOPIC, (t.name for t in request.topic_data)
    )
    run = _ProduceRun(ctx, request, verify)
    for topic in request.topic_data:
        run.produce_topic(topic, topic.name in unwritable)
    return run.answer()


def _adding(ctx: RequestContext) -> TxnVerifier:
    """The transaction check of a Produce v12+ on one node (KIP-890 part 2): the
    coordinator adds the partition, asked as Kafka's leader asks it (the brokers'
    AddPartitionsToTxn, not ``verify_only``), its answer mapped as the leader maps it."""
    txn, now_ms = ctx.txn, ctx.now_ms
    Add = apt.AddPartitionsToTxnRequest

    def verify(tid: str, producer_id: int, epoch: int, topic: str, partition: int) -> ErrorCode:
        if not tid:
            return ErrorCode.INVALID_PRODUCER_ID_MAPPING  # (as v11's check answers it)
        one = Add.AddPartitionsToTxnTransaction(
            transactional_id=tid,
            producer_id=producer_id,
            producer_epoch=epoch,
            verify_only=False,
            topics=[Add.AddPartitionsToTxnTopic(name=topic, partitions=[partition])],
        )
        answer = txn.add_partitions_to_txn(Add(transactions=[one]), VERIFY_VERSION, now_ms)
        result = answer.results_by_transaction[0].topic_results[0].results_by_partition[0]
        return added_code(ErrorCode(result.partition_error_code))

    return verify


def _questions(
    ctx: RequestContext, verification: TxnVerification, request: m.ProduceRequest
) -> list[Question]:
    """The partitions of a transactional Produce that the coordinator must confirm
    are in the producer's ongoing transaction (cluster mode, KIP-890 part 1), or
    add to it (v12+, part 2): each partition led here whose transaction is not
    open here yet."""
    out: list[Question] = []
    tid = request.transactional_id
    if tid is None:
        return out
    adding = ctx.version >= IMPLICIT_ADD_VERSION
    for topic in request.topic_data:
        for data in topic.partition_data:
            try:
                header = read_batch_header(data.records) if data.records else None
                if header is None or not header.is_transactional or header.is_control:
                    continue
                leader_log(ctx, topic.name, data.index)
                question = (tid, header.producer_id, header.producer_epoch, topic.name, data.index)
                if verification.must_ask(question) or (
                    adding and not verification.open_here(question)
                ):
                    out.append(question)
            except (DecodeError, BrokerError):
                continue  # refused with its own error when the request is handled
    return out


class _VerifyWaiter:
    """A transactional Produce in a cluster whose partitions the transaction
    coordinator must verify or add first (KIP-890): parked while other brokers
    answer (or until the request's timeout), then handled with the answers.

    A Produce v12+ adds its partitions, and a coordinator still writing the
    producer's last markers refuses that with CONCURRENT_TRANSACTIONS: as Kafka
    4.0's leader does (KAFKA-18654), the coordinator is asked again every
    ``add.partitions.to.txn.retry.backoff.ms`` until
    ``add.partitions.to.txn.retry.backoff.max.ms`` after the first question
    (within the request's own timeout), and only then is the partition answered
    NOT_ENOUGH_REPLICAS: a client's retry costs it a backoff, and franz-go
    refreshes its metadata first (at most every 5 s). The coordinator here is
    asked in memory, another broker by request."""

    def __init__(
        self,
        ctx: RequestContext,
        request: m.ProduceRequest,
        verification: TxnVerification,
        questions: list[Question],
    ) -> None:
        self._ctx = ctx
        self._request = request
        self._verification = verification
        self._adding = ctx.version >= IMPLICIT_ADD_VERSION
        self._remote: list[Question] = []  # asked of the coordinator, another broker
        self._local: list[Question] = []  # the coordinator here (v12+ only)
        for question in questions:
            (self._remote if verification.must_ask(question) else self._local).append(question)
        self._request_deadline_ms = ctx.mono_ms + max(request.timeout_ms, 0)
        self._retry_ms = ctx.config.add_partitions_to_txn_retry_backoff_ms
        self._retry_until_ms = min(
            ctx.mono_ms + ctx.config.add_partitions_to_txn_retry_backoff_max_ms,
            self._request_deadline_ms,
        )
        self._kept: dict[Question, ErrorCode] = {}  # the answers of earlier rounds
        self._asking = list(self._remote)  # this round's questions to other brokers
        self._backing_off = False
        self.answers: Mapping[Question, ErrorCode] = {}
        self.ticket = 0
        self.deadline_ms = self._request_deadline_ms
        self.watches: frozenset[tuple[str, int]] = frozenset()

    @property
    def asks_others(self) -> bool:
        return bool(self._asking)

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return False

    def ask(self) -> None:
        """Ask other brokers this round's questions (the request parked as ``ticket``)."""
        self._backing_off = False
        self.deadline_ms = self._request_deadline_ms
        self.answers = self._verification.ask(
            self._asking, functools.partial(self._ctx.purgatory.wake, self.ticket), add=self._adding
        )

    def decide(
        self, now_ms: int
    ) -> ParkAgain | m.ProduceResponse | NoResponse | Close | _AcksAllWaiter:
        """With this round's answers: handle the request, or wait to ask again
        (:class:`ParkAgain`) after a CONCURRENT_TRANSACTIONS."""
        answers = {**self._kept, **self.answers}
        if self._adding:
            for question in self._local:
                if answers.get(question) is not ErrorCode.NONE:
                    answers[question] = self._verification.add_here(question, now_ms)
        busy = [q for q, code in answers.items() if code is ErrorCode.CONCURRENT_TRANSACTIONS]
        now = mono_ms(now_ms)
        if busy and self._adding and now < self._retry_until_ms:
            self._kept = {q: code for q, code in answers.items() if q not in busy}
            self._asking = [q for q in busy if q in self._remote]
            self._backing_off = True
            self.answers = {}
            self.deadline_ms = min(now + self._retry_ms, self._request_deadline_ms)
            return ParkAgain(self)
        verify = self._verification.verifier(answers, add=self._adding, now_ms=now_ms)
        return _produce(dataclasses.replace(self._ctx, now_ms=now_ms), self._request, verify)

    def complete(self, now_ms: int) -> m.ProduceResponse | ParkAgain:
        self._verification.forget(self.answers)
        if self._backing_off and self._asking and mono_ms(now_ms) < self._request_deadline_ms:
            self.ask()
            return ParkAgain(self)
        outcome = self.decide(now_ms)
        if isinstance(outcome, _AcksAllWaiter):
            return ParkAgain(outcome)
        # (acks=0 is never parked: it has no answer to wait for.)
        assert isinstance(outcome, (m.ProduceResponse, ParkAgain))
        return outcome


def _refuse_transactional_id(
    ctx: RequestContext, request: m.ProduceRequest
) -> m.ProduceResponse | Close | None:
    """The whole request's refusal when it carries transactional batches without
    WRITE on its transactional id (checked before any topic), else None."""
    if ctx.authorizer is None or not _has_transactional_batches(request):
        return None
    txn_id = request.transactional_id
    if txn_id is not None and ctx.allowed(
        AclOperation.WRITE, AclResourceType.TRANSACTIONAL_ID, txn_id
    ):
        return None
    if request.acks == 0:
        return Close(
            f"acks=0 produce: not authorized to write transactional id {txn_id!r}",
            ctx.client_id,
        )
    return error_response(request, ctx.version, ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED)


class _ProduceRun:
    """One Produce request, answered partition by partition: each partition's
    outcome is its own (the others proceed), and what the answer needs is kept
    here (the failures that close an acks=0 connection, the acks=all waits, the
    leaders named in NOT_LEADER_OR_FOLLOWER hints)."""

    def __init__(self, ctx: RequestContext, request: m.ProduceRequest, verify: TxnVerifier) -> None:
        self._ctx = ctx
        self._request = request
        self._verify = verify
        self._cluster = ctx.cluster
        self._responses: list[TopicResponse] = []
        self._failures: list[str] = []
        # acks=all in cluster mode: (topic index, partition index, topic, partition,
        # offset the high watermark must reach) of each partition appended to.
        self._waits: list[tuple[int, int, str, int, int]] = []
        self._hinted: set[int] = set()

    def produce_topic(self, topic: m.ProduceRequest.TopicProduceData, unwritable: bool) -> None:
        partitions: list[PartitionResponse] = []
        unknown = self._ctx.version >= TOPIC_IDS_VERSION and not topic.name
        for data in topic.partition_data:
            partitions.append(
                self._produce_partition(topic.name, data, unwritable, len(partitions), unknown)
            )
        self._responses.append(
            TopicResponse(name=topic.name, topic_id=topic.topic_id, partition_responses=partitions)
        )

    def _produce_partition(
        self,
        topic: str,
        data: m.ProduceRequest.PartitionProduceData,
        unwritable: bool,
        position: int,
        unknown: bool = False,
    ) -> PartitionResponse:
        acks = self._request.acks
        start = -1
        if unknown:
            code, message = ErrorCode.UNKNOWN_TOPIC_ID, "no topic has this id"
        elif unwritable:
            code = ErrorCode.TOPIC_AUTHORIZATION_FAILED
            message = f"not authorized to write to topic {topic!r}"
        elif acks not in (0, 1, -1):
            code, message = ErrorCode.INVALID_REQUIRED_ACKS, f"acks={acks} is not 0, 1 or -1"
        else:
            try:
                result, size, plog = self._append(topic, data)
            except BrokerError as exc:
                code, message = code_of(exc), message_of(exc)
            else:
                start = result.log_start_offset if self._ctx.version >= 5 else -1
                code, message = result.error, result.message or result.error.name
                if code is ErrorCode.NONE:
                    self._appended(topic, data.index, result, size, plog, position)
                    return PartitionResponse(
                        index=data.index,
                        error_code=ErrorCode.NONE,
                        base_offset=result.base_offset,
                        log_append_time_ms=result.log_append_time_ms,
                        log_start_offset=start,
                        error_message=None,
                    )
        self._failures.append(f"{topic}-{data.index}: {code.name} ({message})")
        self._ctx.metrics.produce_failed(topic, code)
        return PartitionResponse(
            index=data.index,
            error_code=code,
            base_offset=-1,
            log_append_time_ms=-1,
            # Kafka: the log start offset for a refusal by the producer state or
            # the transaction check, -1 for a partition or batch refused outright.
            log_start_offset=start,
            error_message=message if self._ctx.version >= 8 else None,
            current_leader=_leader_hint(self._cluster, topic, data.index, code, self._hinted),
        )

    def _append(
        self, topic: str, data: m.ProduceRequest.PartitionProduceData
    ) -> tuple[ProduceResult, int, PartitionLog]:
        """Check one partition's records and hand them to the producer states;
        returns their result, the size appended and the partition's log.

        Raises:
            BrokerError: the partition refused them (nothing written).
        """
        ctx = self._ctx
        records = data.records
        if is_internal(topic):
            check_partition(ctx, topic, data.index)
            raise InvalidTopicError(f"Cannot append to internal topic {topic}")
        plog = leader_log(ctx, topic, data.index)
        if not records:
            raise InvalidRecordError("produce request without records")
        if ctx.version < 3:
            records = up_convert(records)
        else:
            _one_batch(records)
        if self._request.acks == -1 and ctx.broker.check_min_isr(topic, data.index):
            raise NotEnoughReplicasError(
                f"{topic}-{data.index} has fewer in-sync replicas than "
                "min.insync.replicas: nothing written"
            )
        result = ctx.producers.produce(
            topic,
            data.index,
            records,
            transactional_id=self._request.transactional_id,
            verify=self._verify,
            now_ms=ctx.now_ms,
        )
        return result, len(records), plog

    def _appended(
        self,
        topic: str,
        partition: int,
        result: ProduceResult,
        size: int,
        plog: PartitionLog,
        position: int,
    ) -> None:
        """What follows a partition's accepted records: parked fetches woken and
        metrics (unless a retry wrote nothing), replication told, acks=all waited on."""
        ctx = self._ctx
        if not result.duplicate:
            ctx.purgatory.notify_append(topic, partition, size)
            ctx.metrics.produced(topic, plog.log_end_offset - result.base_offset, size)
        if self._cluster is not None:
            self._cluster.replicas.appended(topic, partition)
            if self._request.acks == -1:
                self._waits.append(
                    (len(self._responses), position, topic, partition, plog.log_end_offset)
                )

    def answer(self) -> m.ProduceResponse | NoResponse | Close | _AcksAllWaiter:
        """The reply: none for acks=0 (the connection closed when a partition
        failed), parked for acks=all in cluster mode until the replicas have the
        records, else at once."""
        ctx = self._ctx
        if self._request.acks == 0:
            if self._failures:
                return Close("acks=0 produce failed: " + "; ".join(self._failures), ctx.client_id)
            return NoResponse()
        version = ctx.version
        endpoints = _endpoints(self._cluster, self._hinted) if version >= 10 else []
        if self._waits:
            assert self._cluster is not None
            deadline_ms = ctx.mono_ms + max(self._request.timeout_ms, 0)
            waiter = _AcksAllWaiter(
                self._cluster, self._responses, self._waits, deadline_ms, version, endpoints
            )
            if not waiter.decided():
                return waiter
            return waiter.complete(ctx.now_ms)
        return m.ProduceResponse(responses=self._responses, node_endpoints=endpoints)


def _leader_hint(
    cluster: ClusterView | None, topic: str, partition: int, code: ErrorCode, hinted: set[int]
) -> m.ProduceResponse.LeaderIdAndEpoch:
    """KIP-951: the partition's current leader, for a NOT_LEADER_OR_FOLLOWER answer (the
    client retries there without asking for metadata first)."""
    if cluster is None or code != ErrorCode.NOT_LEADER_OR_FOLLOWER:
        return m.ProduceResponse.LeaderIdAndEpoch()
    leader = cluster.leader(topic, partition)
    state = cluster.state(topic, partition)
    if leader < 0 or state is None:
        return m.ProduceResponse.LeaderIdAndEpoch()
    hinted.add(leader)
    return m.ProduceResponse.LeaderIdAndEpoch(leader_id=leader, leader_epoch=state.leader_epoch)


def _endpoints(
    cluster: ClusterView | None, nodes: set[int]
) -> list[m.ProduceResponse.NodeEndpoint]:
    """KIP-951: where the leaders named in the answer's hints are."""
    if cluster is None:
        return []
    out = []
    for node in sorted(nodes):
        info = cluster.broker(node)
        if info is not None:
            out.append(
                m.ProduceResponse.NodeEndpoint(
                    node_id=node, host=info.host, port=info.port, rack=info.rack
                )
            )
    return out


class _AcksAllWaiter:
    """An ``acks=all`` Produce in cluster mode, waiting for its partitions' high
    watermarks to pass what it appended (or for the timeout, or for an error)."""

    def __init__(
        self,
        cluster: ClusterView,
        responses: list[TopicResponse],
        waits: list[tuple[int, int, str, int, int]],
        deadline_ms: int,
        version: int,
        endpoints: list[m.ProduceResponse.NodeEndpoint],
    ) -> None:
        self._cluster = cluster
        self._responses = responses
        self._waits = waits
        self._version = version
        self._endpoints = endpoints  # KIP-951's, for the hints of the other partitions
        self.deadline_ms = deadline_ms
        self.watches = frozenset((t, p) for _, _, t, p, _ in waits)

    def decided(self) -> bool:
        replicas = self._cluster.replicas
        return all(
            replicas.acks_all_outcome(t, p, need) is not None for _, _, t, p, need in self._waits
        )

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self.decided()

    def complete(self, now_ms: int) -> m.ProduceResponse:
        replicas = self._cluster.replicas
        hinted: set[int] = set()
        for ti, pi, t, p, need in self._waits:
            code = replicas.acks_all_outcome(t, p, need)
            if code is ErrorCode.NONE:
                continue
            if code is None:
                code = ErrorCode.REQUEST_TIMED_OUT
                message = f"{t}-{p}: the in-sync replicas did not all acknowledge in time"
            else:
                message = f"{t}-{p}: {code.name}"
            partitions = self._responses[ti].partition_responses
            old = partitions[pi]
            # The append's offset, time and log start stay, whatever the error,
            # as in Kafka's answer to a delayed produce (its DelayedProduce sets
            # only the error of the status the append made).
            partitions[pi] = PartitionResponse(
                index=old.index,
                error_code=code,
                base_offset=old.base_offset,
                log_append_time_ms=old.log_append_time_ms,
                log_start_offset=old.log_start_offset,
                error_message=message if self._version >= 8 else None,
                # Leadership lost while waiting: hinted as an immediate refusal is
                # (Kafka's KafkaApis hints every NOT_LEADER_OR_FOLLOWER partition
                # of the answer, whenever it completes).
                current_leader=_leader_hint(self._cluster, t, p, code, hinted),
            )
        endpoints = self._endpoints
        known = {e.node_id for e in endpoints}
        if self._version >= 10 and hinted - known:
            endpoints = [*endpoints, *_endpoints(self._cluster, hinted - known)]
            endpoints.sort(key=lambda e: e.node_id)
        return m.ProduceResponse(responses=self._responses, node_endpoints=endpoints)


def error_response(
    request: m.ProduceRequest | None, version: int, code: ErrorCode
) -> m.ProduceResponse:
    responses = []
    for topic in request.topic_data if request is not None else []:
        responses.append(
            TopicResponse(
                name=topic.name,
                topic_id=topic.topic_id,
                partition_responses=[
                    PartitionResponse(
                        index=p.index,
                        error_code=code,
                        base_offset=-1,
                        log_append_time_ms=-1,
                        log_start_offset=-1,
                        error_message=None,
                    )
                    for p in topic.partition_data
                ],
            )
        )
    return m.ProduceResponse(responses=responses)


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    advertised_min=ADVERTISED_MIN_VERSION,
    old_min=OLD_MIN_VERSION,
    uses="logs producers cluster authorizer metrics verify_transactional txn_verification purgatory broker txn config",
)
