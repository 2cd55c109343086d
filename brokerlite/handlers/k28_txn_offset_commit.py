"""TxnOffsetCommit (key 28), versions 0-6: a transaction's consumer offsets.

Handed to the transaction coordinator, which holds the offsets (durably) with the
transaction: a commit applies them to the group, an abort drops them. Until then
OffsetFetch with ``require_stable`` answers UNSTABLE_OFFSET_COMMIT for those
partitions.

Per partition, in Kafka's order: UNKNOWN_TOPIC_OR_PARTITION; then the request's
INVALID_PRODUCER_ID_MAPPING, INVALID_PRODUCER_EPOCH, CONCURRENT_TRANSACTIONS, or
INVALID_TXN_STATE when the group was not added with AddOffsetsToTxn (v0-4); from
v3 the group's generation checks (KIP-447: FENCED_INSTANCE_ID, UNKNOWN_MEMBER_ID,
ILLEGAL_GENERATION), which fence a producer whose consumer lost its partitions in
a rebalance; then OFFSET_METADATA_TOO_LARGE.

v5 (transaction version 2, KIP-890 part 2): the client sends no
AddOffsetsToTxn; once the checks above passed, the commit adds its group to the
producer's transaction itself (starting one if none is ongoing), as Kafka's
group coordinator does for v5+ (``TransactionSupportedOperation.ADD_PARTITION``).
In a cluster the group's coordinator has the transaction coordinator add the
group's ``__consumer_offsets`` partition (AddPartitionsToTxn v5 without
``verify_only``, below), as Kafka's does.

v6 (KIP-1319, Kafka 4.4) is v5 with topics named by id, as OffsetCommit v10
(an id no topic has: UNKNOWN_TOPIC_ID; :mod:`._topic_ids`), and the group
coordinator's own codes: a group that does not exist, asked with a
generation, GROUP_ID_NOT_FOUND, a consumer group member's stale epoch
STALE_MEMBER_EPOCH, both ILLEGAL_GENERATION before v6
(:func:`~trafka.brokerlite.transactions.coordinator.classic_group_validator`).

Authorization: WRITE on the transactional id, then READ on the group (else every
partition gets TRANSACTIONAL_ID_AUTHORIZATION_FAILED or GROUP_AUTHORIZATION_FAILED);
then READ per topic, else that topic's partitions get TOPIC_AUTHORIZATION_FAILED
and only the others join the transaction.

In a cluster the group's coordinator does not hold the transaction: as Kafka's
(KIP-890 part 1, GroupCoordinator.handleTxnCommitOffsets since 3.6), it first
has the transaction coordinator confirm that the group's ``__consumer_offsets``
partition is in the producer's ongoing transaction (AddPartitionsToTxn v4,
``verify_only``; :mod:`~trafka.brokerlite.transactions.verification`), parked
until the answer. A commit the producer gave up on and that arrives after its
transaction ended is refused (INVALID_TXN_STATE) instead of being held as
pending offsets no marker will ever settle. The coordinator's other answers map
as Kafka maps them for an offset commit: one it cannot give is
COORDINATOR_NOT_AVAILABLE (retriable); the producer's own errors pass on.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from trafka.brokerlite.transactions.verification import added_code, produce_code
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k28_txn_offset_commit as m

from ._authz import (
    AclOperation,
    commit_readable_topics,
    enabled,
    group_allowed,
    transactional_id_allowed,
)
from ._base import HandlerSpec, RequestContext
from ._topic_ids import Named, by_name

if TYPE_CHECKING:
    from trafka.brokerlite.outcomes import Parked
    from trafka.brokerlite.transactions.verification import Question, TxnVerification

API_KEY = ApiKey.TXN_OFFSET_COMMIT
MIN_VERSION = 0
MAX_VERSION = 6
TOPIC_IDS_VERSION = 6
#: The first version whose commit adds its group to the transaction (KIP-890 part 2).
ADDS_VERSION = 5

Response = m.TxnOffsetCommitResponse
#: what turns the coordinator's answer (topics by name) into the request's
Finish = Callable[[Response], Response]


#: How long a commit waits for the transaction coordinator's confirmation (Kafka's
#: inter-broker request timeout).
VERIFY_TIMEOUT_MS = 30_000


def handle(ctx: RequestContext, request: m.TxnOffsetCommitRequest) -> Response | Parked:
    if ctx.version < TOPIC_IDS_VERSION:
        return _by_name(ctx, request, _same)
    named = by_name(ctx, request.topics)
    finish = functools.partial(_by_ids, named)
    return _by_name(ctx, dataclasses.replace(request, topics=named.known), finish)


def _same(answer: Response) -> Response:
    return answer


def _by_ids(named: Named, answer: Response) -> Response:
    """v6: the answer's topics by the ids asked, those of unknown ids first."""
    unknown = [
        Response.TxnOffsetCommitResponseTopic(
            topic_id=t.topic_id,
            partitions=[
                Response.TxnOffsetCommitResponsePartition(
                    partition_index=p.partition_index, error_code=ErrorCode.UNKNOWN_TOPIC_ID
                )
                for p in t.partitions
            ],
        )
        for t in named.unknown
    ]
    return dataclasses.replace(answer, topics=[*unknown, *named.answer_ids(answer.topics)])


def _by_name(
    ctx: RequestContext, request: m.TxnOffsetCommitRequest, finish: Finish
) -> Response | Parked:
    if enabled(ctx):
        if not transactional_id_allowed(ctx, AclOperation.WRITE, request.transactional_id):
            code = ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
            return finish(error_response(request, ctx.version, code))
        if not group_allowed(ctx, AclOperation.READ, request.group_id):
            code = ErrorCode.GROUP_AUTHORIZATION_FAILED
            return finish(error_response(request, ctx.version, code))
    verification, cluster = ctx.txn_verification, ctx.cluster_txn
    if verification is None or cluster is None:
        return finish(_commit(ctx, request))
    topic, partition = cluster.group_partition(request.group_id)
    question = (
        request.transactional_id,
        request.producer_id,
        request.producer_epoch,
        topic,
        partition,
    )
    add = ctx.version >= ADDS_VERSION  # (transaction version 2: no AddOffsetsToTxn)
    known = verification.local(question, add=add, now_ms=ctx.now_ms)
    if known is not None:
        return finish(_verified(ctx, request, known))
    waiter = _VerifyWaiter(ctx, request, verification, question, finish)
    parked = ctx.park(waiter)
    waiter.answers = verification.ask(
        [question], functools.partial(ctx.purgatory.wake, parked.ticket), add=add
    )
    return parked


def _commit(ctx: RequestContext, request: m.TxnOffsetCommitRequest) -> Response:
    commit = ctx.txn.txn_offset_commit
    if not enabled(ctx):
        return commit(request, ctx.version, ctx.now_ms)
    return commit_readable_topics(ctx, request, commit, error_response, Response)


def _verified(ctx: RequestContext, request: m.TxnOffsetCommitRequest, code: ErrorCode) -> Response:
    """The commit once the transaction coordinator answered ``code``."""
    if code is ErrorCode.NONE:
        return _commit(ctx, request)
    # As Kafka: the append-side code first, then maybeConvertOffsetCommitError's.
    code = added_code(code) if ctx.version >= ADDS_VERSION else produce_code(code)
    if code is ErrorCode.NOT_ENOUGH_REPLICAS:
        code = ErrorCode.COORDINATOR_NOT_AVAILABLE
    return error_response(request, ctx.version, code)


class _VerifyWaiter:
    """A TxnOffsetCommit waiting for the transaction coordinator's confirmation:
    woken once answered, or at :data:`VERIFY_TIMEOUT_MS`."""

    def __init__(
        self,
        ctx: RequestContext,
        request: m.TxnOffsetCommitRequest,
        verification: TxnVerification,
        question: Question,
        finish: Finish,
    ) -> None:
        self._ctx = ctx
        self._request = request
        self._finish = finish
        self._verification, self._question = verification, question
        self.answers: Mapping[Question, ErrorCode] = {}
        self.deadline_ms = ctx.mono_ms + VERIFY_TIMEOUT_MS
        self.watches: frozenset[tuple[str, int]] = frozenset()

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return False

    def complete(self, now_ms: int) -> Response:
        self._verification.forget(self.answers)
        code = self.answers.get(self._question, ErrorCode.REQUEST_TIMED_OUT)
        ctx = dataclasses.replace(self._ctx, now_ms=now_ms)
        return self._finish(_verified(ctx, self._request, code))


def error_response(
    request: m.TxnOffsetCommitRequest | None, version: int, code: ErrorCode
) -> Response:
    topics = request.topics if request is not None else []
    return Response(
        topics=[
            Response.TxnOffsetCommitResponseTopic(
                name=t.name,
                topic_id=t.topic_id,
                partitions=[
                    Response.TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=code
                    )
                    for p in t.partitions
                ],
            )
            for t in topics
        ]
    )


SPEC = HandlerSpec(
    API_KEY,
    MIN_VERSION,
    MAX_VERSION,
    handle,
    error_response,
    uses="txn authorizer txn_verification cluster_txn purgatory logs",
)
