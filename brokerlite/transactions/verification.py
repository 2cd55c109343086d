"""KIP-890 in cluster mode: a partition leader verifies a transactional Produce
with the transaction coordinator before appending (part 1), or has it add the
partition to the transaction (part 2) (sans-IO).

On a single node the coordinator is in the same process and the Produce
handler asks it directly. In a cluster the coordinator of a transactional id
(the leader of its ``__transaction_state`` partition) is often another broker;
as Kafka's ReplicaManager does, the leader then sends it AddPartitionsToTxn
v4 with ``verify_only`` and appends only once the answer says the partition is
in the producer's ongoing transaction. A Produce v12+ or a TxnOffsetCommit
v5+ (transaction version 2, whose clients send no AddPartitionsToTxn) asks
the coordinator to add the partition instead: the same request without
``verify_only``, as Kafka's ``AddPartitionsToTxnManager`` sends it for
``TransactionSupportedOperation.ADD_PARTITION``. The driver that sends the questions
is :mod:`trafka.brokerlite.cluster.driver.txn_verify`; this module holds the
rules.

Rules and invariants:

* A transactional batch needs no question when its partition already has an
  open transaction of that producer at that epoch (its first batch was
  verified or added; Kafka skips the check the same way), nor when this broker
  is the id's coordinator (asked in memory: verified, or added through the
  coordinator's own AddPartitionsToTxn).
* A question is asked to add (``verify_only`` false) or to verify. The
  questions of one producer's transaction go in one entry of the request,
  which adds when any of them does (an added partition answers a
  verification of it too). A request that adds goes as AddPartitionsToTxn v5
  (what Kafka's brokers send), one that only verifies as v4.
* Otherwise the request waits (parked) for the coordinator's answer. Questions
  for one coordinator go out together, one AddPartitionsToTxn v4 request, one
  in flight per coordinator; a question asked again while one is out waits for
  that answer.
* The coordinator's answers map as Kafka's leader maps them for a producer:
  NONE appends; INVALID_TXN_STATE, INVALID_PRODUCER_EPOCH, PRODUCER_FENCED and
  INVALID_PRODUCER_ID_MAPPING refuse the partition with that code (an added
  partition's PRODUCER_FENCED as INVALID_PRODUCER_EPOCH, which a producer of
  transaction version 2 aborts on, as Kafka's leader answers it); a coordinator
  that moved, is loading, busy writing markers (CONCURRENT_TRANSACTIONS) or
  unreachable, and a question unanswered by the request's deadline, refuse it
  with NOT_ENOUGH_REPLICAS, which the producer retries.
* An answer serves only the request that waited for it: nothing is cached
  beyond the partition's own producer state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k24_add_partitions_to_txn as m

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from .coordinator import TransactionCoordinator
    from .eos import ProducerStates, TxnVerifier

__all__ = ["ADD_VERSION", "VERIFY_VERSION", "Question", "TxnVerification", "VerifyBatch"]

#: The AddPartitionsToTxn version brokers verify with (v4: batched, ``verify_only``).
VERIFY_VERSION = 4
#: The version a leader asks with to add partitions (KIP-890 part 2; Kafka's
#: brokers send the newest, v5).
ADD_VERSION = 5

Question = tuple[str, int, int, str, int]
"""``(transactional_id, producer_id, producer_epoch, topic, partition)``."""

# What the producer is told for the coordinator's own codes (Kafka's leader turns
# the coordinator's transient states into a retriable produce error).
_PASSED_ON = frozenset(
    {
        ErrorCode.NONE,
        ErrorCode.INVALID_TXN_STATE,
        ErrorCode.INVALID_PRODUCER_EPOCH,
        ErrorCode.PRODUCER_FENCED,
        ErrorCode.INVALID_PRODUCER_ID_MAPPING,
    }
)


def produce_code(coordinator_code: ErrorCode) -> ErrorCode:
    """The Produce error for the coordinator's answer to a verification."""
    return coordinator_code if coordinator_code in _PASSED_ON else ErrorCode.NOT_ENOUGH_REPLICAS


def added_code(coordinator_code: ErrorCode) -> ErrorCode:
    """The Produce error for the coordinator's answer to an add (transaction
    version 2): PRODUCER_FENCED is what a producer expects as INVALID_PRODUCER_EPOCH."""
    if coordinator_code is ErrorCode.PRODUCER_FENCED:
        return ErrorCode.INVALID_PRODUCER_EPOCH
    return produce_code(coordinator_code)


@dataclasses.dataclass(frozen=True, slots=True)
class VerifyBatch:
    """One AddPartitionsToTxn request to send to coordinator ``node``, as
    ``version`` (v4 to verify only, v5 when it adds)."""

    node: int
    questions: tuple[Question, ...]
    body: m.AddPartitionsToTxnRequest
    version: int = VERIFY_VERSION


class _Wait:
    """The questions of one parked request, and the answers so far."""

    __slots__ = ("answers", "missing", "wake")

    def __init__(self, questions: set[Question], wake: Callable[[], None]) -> None:
        self.missing = set(questions)
        self.answers: dict[Question, ErrorCode] = {}
        self.wake = wake


class TxnVerification:
    """A cluster member's verification of transactional Produce (see the module rules).

    Args:
        node_id: this broker.
        cluster: the cluster view (who leads ``__transaction_state`` partitions).
        producers: the partitions' producer states.
        txn: the local transaction coordinator.
        owns: whether this broker coordinates a transactional id now.
    """

    def __init__(
        self,
        *,
        node_id: int,
        cluster: ClusterView,
        producers: ProducerStates,
        txn: TransactionCoordinator,
        owns: Callable[[str], bool],
    ) -> None:
        self._node_id = node_id
        self._cluster = cluster
        self._producers = producers
        self._txn = txn
        self._owns = owns
        self._waits: dict[Question, list[_Wait]] = {}
        self._unsent: set[Question] = set()
        self._adds: set[Question] = set()  # waiting questions asked to add
        self._busy: set[int] = set()  # coordinators with a request in flight
        #: How many questions were sent to coordinators (for diagnostics).
        self.asked = 0
        #: Called when questions are ready to send (the sender wakes).
        self.on_ready: Callable[[], None] = lambda: None

    # -- the leader's side ------------------------------------------------------------

    def open_here(self, question: Question) -> bool:
        """Whether the partition has the producer's transaction open (at its epoch)."""
        _, pid, epoch, topic, partition = question
        entry = self._producers.state(topic, partition).entry(pid)
        return entry is not None and entry.txn_first_offset is not None and entry.epoch == epoch

    def must_ask(self, question: Question) -> bool:
        """Whether another broker (the coordinator) must be asked."""
        return not self.open_here(question) and not self._owns(question[0])

    def local(self, question: Question, *, add: bool = False, now_ms: int = 0) -> ErrorCode | None:
        """The check made without asking anyone, or None when the coordinator
        must be asked. With ``add`` (transaction version 2) the coordinator here
        adds the partition (at ``now_ms``), which is no check: call it once."""
        tid, pid, epoch, topic, partition = question
        if self.open_here(question):
            return ErrorCode.NONE
        if not self._owns(tid):
            return None
        if add:
            return added_code(self.add_here(question, now_ms))
        return self._txn.verify_partition(tid, pid, epoch, topic, partition)

    def add_here(self, question: Question, now_ms: int) -> ErrorCode:
        """The coordinator here adds the partition, asked as another broker asks it:
        its answer, as another broker would get it (unmapped)."""
        answer = self._txn.add_partitions_to_txn(
            _request([question], add=True), ADD_VERSION, now_ms
        )
        result = answer.results_by_transaction[0].topic_results[0].results_by_partition[0]
        return ErrorCode(result.partition_error_code)

    def verifier(
        self, answers: Mapping[Question, ErrorCode], *, add: bool = False, now_ms: int = 0
    ) -> TxnVerifier:
        """The Produce check with the coordinator's ``answers`` at hand: a question
        neither answered nor checkable here is refused (NOT_ENOUGH_REPLICAS).
        With ``add`` (a Produce v12+) the questions were asked to add."""
        mapped = added_code if add else produce_code

        def verify(tid: str, pid: int, epoch: int, topic: str, partition: int) -> ErrorCode:
            if add and not tid:
                return ErrorCode.INVALID_PRODUCER_ID_MAPPING  # (as v11's check answers it)
            question = (tid, pid, epoch, topic, partition)
            if question in answers:  # the coordinator's, here or by request
                return mapped(answers[question])
            code = self.local(question, add=add, now_ms=now_ms)
            if code is not None:
                return code
            return mapped(ErrorCode.REQUEST_TIMED_OUT)

        return verify

    def ask(
        self, questions: Iterable[Question], wake: Callable[[], None], *, add: bool = False
    ) -> Mapping[Question, ErrorCode]:
        """Ask the coordinators ``questions`` (``add``: to add the partitions,
        transaction version 2); ``wake`` is called once all are answered.
        Returns the answers as they arrive (a live mapping)."""
        wait = _Wait(set(questions), wake)
        for question in wait.missing:
            self._waits.setdefault(question, []).append(wait)
            self._unsent.add(question)
            if add:
                self._adds.add(question)
        self.on_ready()
        return wait.answers

    def forget(self, answers: Mapping[Question, ErrorCode]) -> None:
        """The request waiting with ``answers`` is gone (answered at its deadline,
        or its connection closed): stop waking it."""
        for question, waits in list(self._waits.items()):
            kept = [w for w in waits if w.answers is not answers]
            if kept:
                self._waits[question] = kept
            else:
                del self._waits[question]
                self._unsent.discard(question)
                self._adds.discard(question)

    # -- the sender's side ------------------------------------------------------------

    def coordinator(self, transactional_id: str) -> int:
        """The broker coordinating ``transactional_id`` now, -1 when unknown."""
        return self._cluster.coordinator(transactional_id, transactional=True)

    def batches(self) -> list[VerifyBatch]:
        """The requests to send now: the unsent questions, one request per
        coordinator without one in flight. Questions without a known
        coordinator are answered NOT_COORDINATOR at once."""
        by_node: dict[int, list[Question]] = {}
        for question in list(self._unsent):
            node = self.coordinator(question[0])
            if node < 0 or node == self._node_id:
                # No coordinator, or one that moved here between the ask and now.
                self._unsent.discard(question)
                self._answer(question, ErrorCode.NOT_COORDINATOR)
            elif node not in self._busy:
                by_node.setdefault(node, []).append(question)
        out = []
        for node, questions in by_node.items():
            self._unsent.difference_update(questions)
            self._busy.add(node)
            self.asked += len(questions)
            adding = [q for q in questions if q in self._adds]
            version = ADD_VERSION if adding else VERIFY_VERSION
            body = _request(questions, adding=adding)
            out.append(VerifyBatch(node, tuple(questions), body, version))
        return out

    def answered(self, batch: VerifyBatch, response: m.AddPartitionsToTxnResponse) -> None:
        """The coordinator's answer to ``batch``."""
        self._busy.discard(batch.node)
        top = ErrorCode(response.error_code)
        codes: dict[tuple[str, str, int], ErrorCode] = {}
        for result in response.results_by_transaction:
            for topic in result.topic_results:
                for part in topic.results_by_partition:
                    key = (result.transactional_id, topic.name, part.partition_index)
                    codes[key] = ErrorCode(part.partition_error_code)
        for question in batch.questions:
            tid, _, _, name, index = question
            code = top if top is not ErrorCode.NONE else codes.get((tid, name, index))
            self._answer(question, ErrorCode.NOT_COORDINATOR if code is None else code)
        self.on_ready()

    def failed(self, batch: VerifyBatch) -> None:
        """``batch`` got no answer (connection lost, timeout)."""
        self._busy.discard(batch.node)
        for question in batch.questions:
            self._answer(question, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        self.on_ready()

    @property
    def pending(self) -> int:
        """How many questions wait to be sent."""
        return len(self._unsent)

    def _answer(self, question: Question, code: ErrorCode) -> None:
        self._adds.discard(question)
        for wait in self._waits.pop(question, ()):
            wait.answers[question] = code
            wait.missing.discard(question)
            if not wait.missing:
                wait.wake()


def _request(
    questions: list[Question], *, add: bool = False, adding: Iterable[Question] = ()
) -> m.AddPartitionsToTxnRequest:
    """The request for ``questions``: a transaction is verified only, unless
    ``add`` or one of its questions is in ``adding``."""
    Request = m.AddPartitionsToTxnRequest
    by_txn: dict[tuple[str, int, int], dict[str, list[int]]] = {}
    adds = {q[:3] for q in adding}
    for tid, pid, epoch, topic, partition in questions:
        by_txn.setdefault((tid, pid, epoch), {}).setdefault(topic, []).append(partition)
    return Request(
        transactions=[
            Request.AddPartitionsToTxnTransaction(
                transactional_id=tid,
                producer_id=pid,
                producer_epoch=epoch,
                verify_only=not add and (tid, pid, epoch) not in adds,
                topics=[
                    Request.AddPartitionsToTxnTopic(name=t, partitions=sorted(ps))
                    for t, ps in topics.items()
                ],
            )
            for (tid, pid, epoch), topics in by_txn.items()
        ]
    )
