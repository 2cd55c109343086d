"""Dead letters on their way to another broker (KIP-1191, cluster mode). Sans-IO.

On a single node a share-partition leader appends its dead letters to its own
log (:mod:`.dead_letters`). In a cluster the DLQ topic's partition may be led by
any broker, so, as Kafka 4.4's ``ShareGroupDLQStateManager`` does, the leader
*produces* them to that partition's leader. :class:`DeadLetterOutbox` holds
those writes; the driver (:mod:`trafka.brokerlite.cluster.driver.dead_letters`)
sends its requests and reports the answers.

Rules and invariants (Kafka 4.4's ``ShareGroupDLQStateManager`` and its
``ProduceRequestHandler``, read from their classes):

* A *job* is one ARCHIVING run's dead letters (the records are made when the
  job is made: the source partition is led here). Its batches (:func:`.dead_letters.batches`:
  halved while larger than the DLQ topic's ``max.message.bytes``) are made once
  the DLQ topic is known to this broker (one the broker has asked ZooKeeper to
  create appears later) and go to partition ``p % partitions``, one Produce
  request (v13, by topic id) per batch, in order.
* Each request goes to the leader of the DLQ partition as this broker sees it
  when the request is sent (this broker too: Kafka's writer always goes
  through its network client), with ``acks=-1`` (all in-sync replicas) and a
  30 s timeout, as Kafka's. No producer id: a batch whose answer was lost and
  that is sent again may be written twice (at least once).
* Retried, after :data:`RETRY_BACKOFF_MS`: NOT_LEADER_OR_FOLLOWER (the
  partition moved), a lost or refused connection (NETWORK_EXCEPTION), no
  answer in time (REQUEST_TIMED_OUT), as Kafka's handler retries those; and,
  while they last, no leader known yet or the DLQ topic not created yet. A
  job still failing :data:`GIVE_UP_AFTER_MS` after its first failure is given
  up: Kafka makes five attempts backing off 2, 4, 8 and 16 s (its
  ``ExponentialBackoffManager``: 1 s times 2 to the attempts made), about 30 s;
  brokerlite retries sooner over the same time (its elections take a
  ZooKeeper session timeout, a few seconds). Any other error gives the job up
  at once. A job given up is logged.
* A job ends *written* (every batch acknowledged by the DLQ partition's
  in-sync replicas) or *given up*; either way :attr:`DeadLetterOutbox.on_done`
  is told, and only then, so the share-partition archives the records only
  once their write's outcome is known (as Kafka's
  ``SharePartition.initiateDLQAndArchive`` archives when the DLQ future
  completes, failed or not).
* The outbox knows which offsets of which share-partition are in flight
  (:meth:`DeadLetterOutbox.unsent`): a run of ARCHIVING records that grew
  meanwhile is sent for its new offsets only.
"""

from __future__ import annotations

import dataclasses
import logging
import uuid
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as _produce

from .partition import Run, SharePartition
from .state_store import SP

if TYPE_CHECKING:
    from trafka.brokerlite.storage.log_manager import LogManager

__all__ = [
    "GIVE_UP_AFTER_MS",
    "PRODUCE_TIMEOUT_MS",
    "PRODUCE_VERSION",
    "RETRIABLE",
    "RETRY_BACKOFF_MS",
    "DeadLetterOutbox",
    "LetterJob",
    "LetterSend",
    "inside",
    "outside",
]

log = logging.getLogger("trafka.brokerlite")

#: How long a dead-letter write that failed waits before it is sent again.
RETRY_BACKOFF_MS = 200
#: How long a dead-letter write keeps being retried after its first failure.
GIVE_UP_AFTER_MS = 30_000
#: Kafka's DLQ writer's Produce timeout (and brokerlite's: the same request).
PRODUCE_TIMEOUT_MS = 30_000
#: The Produce version the dead letters are sent with (topic ids, Kafka 4.x).
PRODUCE_VERSION = 13
#: Answers a dead-letter write is sent again after (module rules).
RETRIABLE = frozenset(
    {
        ErrorCode.NOT_LEADER_OR_FOLLOWER,
        ErrorCode.NETWORK_EXCEPTION,
        ErrorCode.REQUEST_TIMED_OUT,
        ErrorCode.LEADER_NOT_AVAILABLE,
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
    }
)


@dataclasses.dataclass(slots=True, eq=False)
class LetterJob:
    """The dead letters of one ARCHIVING run of a share-partition.

    Attributes:
        key: the share-partition (group, topic, partition).
        sp: the share-partition the run is in (a share-partition read again
            later is another object: the job's outcome is not for it).
        run: the ARCHIVING offsets (first, last, delivery count, why).
        dlq_topic: where they go.
        records: the dead letters, as :func:`trafka.codec.records.encode_batch` takes them.
        written: set once every batch was acknowledged.
    """

    key: SP
    sp: SharePartition
    run: Run
    dlq_topic: str
    records: list[Any]
    written: bool = False
    batches: list[bytes] | None = None
    dlq_partition: int = -1
    topic_id: uuid.UUID | None = None
    sent: int = 0  # batches acknowledged
    retry_at: int = 0
    failing_since: int | None = None
    in_flight: bool = False


@dataclasses.dataclass(frozen=True, slots=True)
class LetterSend:
    """One Produce request for the driver: to broker ``node``, with ``body``."""

    node: int
    body: _produce.ProduceRequest
    job: LetterJob


class DeadLetterOutbox:
    """Dead-letter writes to the DLQ partitions' leaders (see the module rules).

    Args:
        logs: the partition logs (every topic of the cluster is known here).
        leader: the leader of a partition as this broker sees it, None when none.
        batches: splits a job's records into batches for a topic (its
            ``max.message.bytes``).
    """

    def __init__(
        self,
        logs: LogManager,
        leader: Callable[[str, int], int | None],
        batches: Callable[[list[Any], str], list[bytes]],
    ) -> None:
        self._logs = logs
        self._leader = leader
        self._batches = batches
        self._jobs: list[LetterJob] = []
        #: Told when a job ended (written or given up).
        self.on_done: Callable[[LetterJob], None] = lambda _job: None
        #: Told when there is something to send (the driver wakes).
        self.on_ready: Callable[[], None] = lambda: None

    # -- the share fetcher's side --------------------------------------------------------

    def unsent(self, key: SP, sp: SharePartition, run: Run) -> list[Run]:
        """The parts of ``run`` (of ``sp``) not already in a job, in offset order."""
        sent = [(j.run.first, j.run.last) for j in self._jobs if j.key == key and j.sp is sp]
        return outside(run, sent)

    def add(self, job: LetterJob) -> None:
        """Queue a job."""
        self._jobs.append(job)
        self.on_ready()

    def busy(self, key: SP) -> bool:
        """Whether a job of share-partition ``key`` is not done."""
        return any(job.key == key for job in self._jobs)

    # -- the driver's side ----------------------------------------------------------------

    def take(self, now_ms: int) -> list[LetterSend]:
        """The requests to send now (one per job at a time); jobs that cannot be
        sent now wait, and are given up past their time (module rules)."""
        sends = []
        for job in list(self._jobs):
            if job.in_flight or job.retry_at > now_ms:
                continue
            code = self._prepare(job)
            if code != ErrorCode.NONE:
                self._failed(job, code, now_ms, "")
                continue
            assert job.batches is not None and job.topic_id is not None
            node = self._leader(job.dlq_topic, job.dlq_partition)
            if node is None or node < 0:
                self._failed(job, ErrorCode.LEADER_NOT_AVAILABLE, now_ms, "")
                continue
            request = _produce.ProduceRequest
            body = request(
                transactional_id=None,
                acks=-1,
                timeout_ms=PRODUCE_TIMEOUT_MS,
                topic_data=[
                    request.TopicProduceData(
                        name=job.dlq_topic,
                        topic_id=job.topic_id,
                        partition_data=[
                            request.PartitionProduceData(
                                index=job.dlq_partition, records=job.batches[job.sent]
                            )
                        ],
                    )
                ],
            )
            job.in_flight = True
            sends.append(LetterSend(node, body, job))
        return sends

    def answered(self, send: LetterSend, code: ErrorCode, message: str, now_ms: int) -> None:
        """The answer to ``send``: its partition's ``code`` (NETWORK_EXCEPTION for a
        lost connection, REQUEST_TIMED_OUT for no answer in time)."""
        job = send.job
        job.in_flight = False
        if code != ErrorCode.NONE:
            self._failed(job, code, now_ms, message)
            return
        job.failing_since = None
        job.sent += 1
        assert job.batches is not None
        if job.sent < len(job.batches):
            self.on_ready()
            return
        job.written = True
        self._end(job)

    def next_retry(self) -> int | None:
        """When a waiting job is next due, None when none waits."""
        due = [job.retry_at for job in self._jobs if not job.in_flight]
        return min(due) if due else None

    def _prepare(self, job: LetterJob) -> ErrorCode:
        """Make the job's batches once its DLQ topic is known here."""
        if job.batches is not None:
            return ErrorCode.NONE
        info = self._logs.topic(job.dlq_topic)
        if info is None or not info.num_partitions:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        job.topic_id = info.topic_id
        job.dlq_partition = job.key[2] % info.num_partitions
        job.batches = self._batches(job.records, job.dlq_topic)
        return ErrorCode.NONE

    def _failed(self, job: LetterJob, code: ErrorCode, now_ms: int, message: str) -> None:
        if job.failing_since is None:
            job.failing_since = now_ms
        given_up = code not in RETRIABLE or now_ms - job.failing_since >= GIVE_UP_AFTER_MS
        if not given_up:
            job.retry_at = now_ms + RETRY_BACKOFF_MS
            return
        group, topic, partition = job.key
        log.error(
            "share group %r, %s-%d offsets %d-%d: writing dead letters to %r failed: %s%s",
            group,
            topic,
            partition,
            job.run.first,
            job.run.last,
            job.dlq_topic,
            code.name,
            f" ({message})" if message else "",
        )
        self._end(job)

    def _end(self, job: LetterJob) -> None:
        self._jobs.remove(job)
        self.on_done(job)


def outside(run: Run, ranges: Iterable[tuple[int, int]]) -> list[Run]:
    """The parts of ``run`` outside every ``(first, last)`` of ``ranges``, in offset order."""
    parts = [run]
    for first, last in ranges:
        left = []
        for part in parts:
            if part.last < first or part.first > last:
                left.append(part)
                continue
            if part.first < first:
                left.append(dataclasses.replace(part, last=first - 1))
            if part.last > last:
                left.append(dataclasses.replace(part, first=last + 1))
        parts = left
    return parts


def inside(run: Run, first: int, last: int) -> Run | None:
    """The part of ``run`` within ``first..last``, None when none."""
    low, high = max(run.first, first), min(run.last, last)
    return dataclasses.replace(run, first=low, last=high) if low <= high else None
