"""Dead-letter queues of share groups (KIP-1191; Kafka 4.4, ``share.version`` 2).

A share group whose ``errors.deadletterqueue.topic.name`` group config is set
has its undeliverable records copied to that topic: a record the consumer
REJECTs, or one released (RELEASE, its lock ending, its holder leaving) at
the delivery-count limit, is ARCHIVING (:mod:`.partition`) until its *dead
letter* is written here, then ARCHIVED. Sans-IO apart from reading the source
log; the append to the DLQ topic goes through the broker's port (one node)
or the outbox (a cluster).

Rules, as Kafka 4.4's ``ShareGroupDLQStateManager`` writes them (read from its
classes and checked against a Kafka 4.4 node by
tests/brokerlite/test_differential_dead_letters.py):

* Nothing is written while ``share.version`` is below 2 or the group has no
  DLQ topic; the records are archived as before KIP-1191.
* The DLQ topic must start with the broker's
  ``errors.deadletterqueue.topic.name.prefix`` (``dlq.`` by default; ``""``
  allows any name), must not start with ``__``, and must exist with the topic
  config ``errors.deadletterqueue.group.enable=true``. A topic that does not
  exist is created (the broker's default partition count, that config set,
  ``message.timestamp.type=CreateTime``) only when the broker's
  ``errors.deadletterqueue.auto.create.topics.enable`` is true (false by
  default). When a rule fails, or the append fails, the dead letter is given
  up (logged) and the records are archived all the same, as Kafka 4.4's
  ``SharePartition.initiateDLQAndArchive`` archives them whatever the write's
  outcome.
* A record from partition *p* goes to DLQ partition ``p % partitions``.
* Each ARCHIVING run of records is one batch (split in halves while it is
  larger than the DLQ topic's ``max.message.bytes``, as Kafka sends a run in
  rounds that fit; a single dead letter too large is given up): one record
  per offset, in offset order, no producer id, each stamped with the broker's time
  (CreateTime), carrying the context headers ``__dlq.errors.topic``,
  ``__dlq.errors.partition``, ``__dlq.errors.offset``, ``__dlq.errors.group``,
  ``__dlq.errors.delivery.count`` (decimal text) and
  ``__dlq.errors.message`` (``Offset rejected by client.`` or ``Offset
  delivery count exceeded the threshold.``). With the group config
  ``errors.deadletterqueue.copy.record.enable`` true the record's key and
  value are copied (its headers are not); an offset without a record
  (compacted away) gets none. (Kafka makes one batch per log batch archived
  whole and one per record once it tracks a batch's offsets one by one: the
  records are the same, the batch boundaries may differ.)
* Durability is the partition's: a dead letter is written after the
  ARCHIVING state is, and ARCHIVED is written after the dead letter, so a
  crash between the two writes it again after the restart (at least once).
* Cluster mode (the port has ``leader``): the dead letters are produced to
  the DLQ partition's leader (:mod:`.dead_letter_outbox`, which says how it
  retries and when it gives up); a run goes once the share coordinator has
  its ARCHIVING state (the write carrying it settled), and its records are
  archived once the produce's outcome is known, written or given up. A DLQ
  topic to create is asked of the cluster and written to once it appears.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable, Collection, Mapping
from typing import TYPE_CHECKING, Any

from trafka.brokerlite.errors import BrokerError
from trafka.codec.errors import TrafkaError
from trafka.codec.records import decode_batch, encode_batch

from .dead_letter_outbox import DeadLetterOutbox, LetterJob, inside, outside
from .log_reads import read_into
from .partition import ARCHIVING, Run, SharePartition
from .persister import RemotePersister
from .share_config import ShareConfig

if TYPE_CHECKING:
    from trafka.brokerlite.storage.log_manager import LogManager

__all__ = [
    "AUTO_CREATED_CONFIGS",
    "DLQ_GROUP_ENABLE",
    "EXCEEDED_MESSAGE",
    "HEADERS",
    "REJECTED_MESSAGE",
    "DeadLetterPort",
    "DeadLetters",
    "archiving",
]

#: A share-partition's key: (group, topic, partition).
_SP = tuple[str, str, int]

log = logging.getLogger("trafka.brokerlite")

#: The context headers of a dead letter, in Kafka's order.
HEADERS = (
    "__dlq.errors.topic",
    "__dlq.errors.partition",
    "__dlq.errors.offset",
    "__dlq.errors.group",
    "__dlq.errors.delivery.count",
    "__dlq.errors.message",
)
REJECTED_MESSAGE = "Offset rejected by client."
EXCEEDED_MESSAGE = "Offset delivery count exceeded the threshold."
#: The topic config that lets share groups write dead letters to a topic.
DLQ_GROUP_ENABLE = "errors.deadletterqueue.group.enable"
#: The configs of a DLQ topic the broker creates itself.
AUTO_CREATED_CONFIGS = {DLQ_GROUP_ENABLE: "true", "message.timestamp.type": "CreateTime"}


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class DeadLetterPort:
    """What writing dead letters needs of the broker.

    Attributes:
        enabled: whether ``share.version`` is 2 or more now.
        prefix: the broker's ``errors.deadletterqueue.topic.name.prefix``.
        auto_create: the broker's ``errors.deadletterqueue.auto.create.topics.enable``.
        create: creates a DLQ topic with :data:`AUTO_CREATED_CONFIGS` and the
            broker's defaults (raises BrokerError).
        append: appends one batch to a partition as the broker's own write,
            waking its readers (raises BrokerError); one node.
        now_ms: the wall clock's milliseconds (the dead letters' timestamps).
        leader: cluster mode: the leader of a partition as this broker sees it
            (None when none); the dead letters are then produced to it
            (:mod:`.dead_letter_outbox`), and ``create`` only asks for the
            topic (it appears later).
    """

    enabled: Callable[[], bool]
    prefix: str = "dlq."
    auto_create: bool = False
    create: Callable[[str], None]
    append: Callable[[str, int, bytes], None]
    now_ms: Callable[[], int]
    leader: Callable[[str, int], int | None] | None = None


class DeadLetters:
    """Writes share groups' dead letters (see the module rules).

    Args:
        logs: the partition logs (the DLQ topics, the records copied).
        port: the broker's side; None writes none (ARCHIVING records are archived).
    """

    def __init__(self, logs: LogManager, port: DeadLetterPort | None) -> None:
        self._logs = logs
        self._port = port
        #: Cluster mode (the port has ``leader``): the writes on their way.
        self.outbox: DeadLetterOutbox | None = None
        if port is not None and port.leader is not None:
            self.outbox = DeadLetterOutbox(logs, port.leader, self._topic_batches)
            self.outbox.on_done = self._sent
        #: Whether dead letters may be due now (the fetcher then writes at once).
        self.due = False
        self._partitions: Mapping[_SP, SharePartition] = {}
        self._remote: RemotePersister | None = None
        # Cluster mode: per share-partition, the newest of its state writes known
        # written, and the ARCHIVING offsets (first, last) seen due while a write
        # was on its way, with the newest ticket then (the write carrying them).
        self._written_through: dict[_SP, int] = {}
        self._seen: dict[_SP, list[tuple[int, int, int]]] = {}

    def bind(
        self, partitions: Mapping[_SP, SharePartition], remote: RemotePersister | None = None
    ) -> None:
        """Follow the fetcher's share-partitions (shared, not copied); those read
        with ARCHIVING runs have their dead letters due. Cluster mode:
        ``remote`` is the persister their state goes to."""
        self._partitions = partitions
        self._remote = remote
        self.due = archiving(partitions)

    def settled(self, key: _SP, tickets: Collection[int] = (), *, written: bool = True) -> None:
        """Cluster mode: the state of ``key`` was written to (write ``tickets``), or
        read from, its coordinator (unless not ``written``): its ARCHIVING runs'
        dead letters may go now."""
        if not written:
            return
        if tickets:
            self._written_through[key] = max(self._written_through.get(key, 0), *tickets)
        sp = self._partitions.get(key)
        if sp is not None and archiving({key: sp}):
            self.due = True

    def idle(self, key: _SP) -> bool:
        """Whether ``key`` may be forgotten: no ARCHIVING runs, no dead letters on
        their way."""
        sp = self._partitions.get(key)
        busy = self.outbox is not None and self.outbox.busy(key)
        return not busy and (sp is None or not archiving({key: sp}))

    def _sent(self, job: LetterJob) -> None:
        """Cluster mode: a write ended (written or given up): archive its records
        (written at the fetcher's next tick), unless the share-partition was
        forgotten meanwhile (its next reader writes them again)."""
        if self._partitions.get(job.key) is job.sp:
            job.sp.dead_letters_written(job.run.first, job.run.last)
            self.due = True

    def _durable(self, key: _SP, due: list[Run]) -> list[Run]:
        """Cluster mode: the parts of ``due`` whose ARCHIVING state the coordinator
        has: all of them when no write of ``key`` is on its way, else those first
        seen due before a write that has been written since (the others are noted
        with the newest write, which carries them)."""
        assert self._remote is not None
        if not self._remote.writing(key):
            self._seen.pop(key, None)
            return due
        seen = self._seen.setdefault(key, [])
        latest = self._remote.latest(key)
        for run in due:
            seen += [(p.first, p.last, latest) for p in outside(run, [s[:2] for s in seen])]
        through = self._written_through.get(key, 0)
        ready = [
            part
            for run in due
            for first, last, ticket in seen
            if ticket <= through and (part := inside(run, first, last)) is not None
        ]
        self._seen[key] = [s for s in seen if s[2] > through]
        return ready

    def active(self, config: ShareConfig) -> bool:
        """Whether a group of ``config`` has a dead-letter queue now (its records
        become ARCHIVING rather than ARCHIVED)."""
        return bool(config.dlq_topic) and self._port is not None and self._port.enabled()

    def mark(self, sp: SharePartition, config: ShareConfig) -> SharePartition:
        """Tell ``sp`` whether its group (of ``config``) has a dead-letter queue now."""
        sp.dead_letters = self.active(config)
        return sp

    def flush(
        self,
        partitions: Mapping[_SP, SharePartition],
        config_for: Callable[[str], ShareConfig],
        written: bool = True,
    ) -> bool:
        """After the fetcher's write (``written``: it succeeded; else nothing is
        done), write the dead letters due in ``partitions`` and archive their
        records, written or given up; True when any share-partition changed.
        Cluster mode (:attr:`outbox`): the dead letters are queued to be
        produced, and their records archived when the outbox says the write is
        done, and a run's dead letters go only once the coordinator has its
        ARCHIVING state (:meth:`_durable`)."""
        self.due = False
        if not written:
            return False
        changed = False
        for key, sp in partitions.items():
            if self.outbox is not None and sp.dirty:
                continue  # (its write failed: the ARCHIVING state is not written yet)
            due = sp.dead_letters_due()
            if due and self._remote is not None:
                due = self._durable(key, due)
            config = config_for(key[0]) if due else None
            for run in due:
                assert config is not None
                if self.outbox is None:
                    self.write(*key, run, config)
                    changed |= sp.dead_letters_written(run.first, run.last)
                    continue
                for part in self.outbox.unsent(key, sp, run):
                    job = self._job(key, sp, part, config)
                    if job is None:  # (given up: archived at once)
                        changed |= sp.dead_letters_written(part.first, part.last)
                    else:
                        self.outbox.add(job)
        return changed

    def _job(self, key: _SP, sp: SharePartition, run: Run, config: ShareConfig) -> LetterJob | None:
        """Cluster mode: the job writing ``run``'s dead letters, None when they are
        given up (logged) by the rules checked here."""
        letters = self._letters(*key, run, config)
        if letters is None:
            return None
        return LetterJob(key=key, sp=sp, run=run, dlq_topic=config.dlq_topic, records=letters[1])

    def _letters(
        self, group_id: str, topic: str, partition: int, run: Run, config: ShareConfig
    ) -> tuple[str, list[Any]] | None:
        """Where ``run`` is (for logs) and its dead letters' records, or None
        when they are given up (logged) by the rules checked here."""
        name = config.dlq_topic
        if self._port is None or not self.active(config):
            return None
        where = f"share group {group_id!r}, {topic}-{partition} offsets {run.first}-{run.last}"
        why = self._refusal(name)
        if why is not None:
            log.error("%s: no dead letters written to %r: %s", where, name, why)
            return None
        try:
            records = self._records(group_id, topic, partition, run, config.dlq_copy_record)
        except (BrokerError, TrafkaError, OSError) as exc:
            log.error("%s: no dead letters written to %r: %s", where, name, exc)
            return None
        return where, records

    def _topic_batches(self, records: list[Any], topic: str) -> list[bytes]:
        return _batches(records, self._logs.config(topic).message_max_bytes)

    def write(
        self, group_id: str, topic: str, partition: int, run: Run, config: ShareConfig
    ) -> bool:
        """Write the dead letters of ``run`` (ARCHIVING offsets of ``topic``-``partition``
        in ``group_id``); True when written, False when given up (logged)."""
        letters = self._letters(group_id, topic, partition, run, config)
        if letters is None:
            return False
        where, records = letters
        name = config.dlq_topic
        info = self._logs.topic(name)
        if self._port is None or info is None or not info.num_partitions:
            log.error("%s: no dead letters written: DLQ topic %r has no partitions", where, name)
            return False
        written = True
        try:
            batches = _batches(records, self._logs.config(name).message_max_bytes)
        except (BrokerError, TrafkaError, OSError) as exc:
            log.error("%s: no dead letters written to %r: %s", where, name, exc)
            return False
        for batch in batches:
            try:
                self._port.append(name, partition % info.num_partitions, batch)
            except (BrokerError, TrafkaError, OSError) as exc:
                log.error("%s: writing dead letters to %r failed: %s", where, name, exc)
                written = False
        return written

    def _refusal(self, name: str) -> str | None:
        """Why dead letters cannot go to ``name`` (creating it when allowed), or None."""
        assert self._port is not None
        prefix = self._port.prefix
        if name.startswith("__"):
            return "a DLQ topic name cannot start with '__'"
        if prefix and not name.startswith(prefix):
            return f"it does not start with the DLQ topic prefix {prefix!r}"
        info = self._logs.topic(name)
        if info is None:
            if not self._port.auto_create:
                return "the topic does not exist and DLQ topics are not created automatically"
            try:
                self._port.create(name)
            except BrokerError as exc:
                return f"creating it failed: {exc}"
            log.info("created DLQ topic %r", name)  # (cluster mode: asked to)
            return None
        if info.configs.get(DLQ_GROUP_ENABLE) != "true":
            return f"the topic's {DLQ_GROUP_ENABLE} is not true"
        return None

    def _records(
        self, group_id: str, topic: str, partition: int, run: Run, copy: bool
    ) -> list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes]]]]:
        """The run's dead letters, as records to encode (module rules)."""
        originals: dict[int, tuple[bytes | None, bytes | None]] = {}
        if copy:
            plog = self._logs.partition(topic, partition)
            views: dict[int, memoryview] = {}
            read_into(views, plog, run.first, run.last, plog.log_end_offset)
            for view in views.values():
                for record in decode_batch(view).records:
                    originals[record[0]] = (record[2], record[3])
        message = (REJECTED_MESSAGE if run.rejected else EXCEEDED_MESSAGE).encode()
        assert self._port is not None
        now = self._port.now_ms()
        records = []
        for offset in range(run.first, run.last + 1):
            key, value = originals.get(offset, (None, None))
            context = (topic, str(partition), str(offset), group_id, str(run.delivery_count))
            headers = [(h, v.encode()) for h, v in zip(HEADERS, context, strict=False)]
            headers.append((HEADERS[-1], message))
            records.append((now, key, value, headers))
        return records


def _batches(records: list[Any], limit: int) -> list[bytes]:
    """``records`` as batches of at most ``limit`` bytes where they fit (halved
    until they do; a record alone is one batch, whatever its size)."""
    batch = encode_batch(records)
    if len(batch) <= limit or len(records) == 1:
        return [batch]
    half = len(records) // 2
    return _batches(records[:half], limit) + _batches(records[half:], limit)


def archiving(partitions: Mapping[_SP, SharePartition]) -> bool:
    """Whether a share-partition has ARCHIVING records (read at start: their dead
    letters are due)."""
    return any(r.state == ARCHIVING for sp in partitions.values() for r in sp.runs())
