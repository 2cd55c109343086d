"""Sequence numbers of the idempotent and transactional producers the proxy
routes, I/O-free.

Rules:

* A routed idempotent producer's records do not stay in the partitions it
  numbered them for: the proxy writes them upstream in batches of its own
  (:class:`Upstream`), at most one per target partition and request, and owns
  their sequence numbers, per producer id, epoch and target partition,
  consecutive from the first one it learns: 0 for a producer whose
  InitProducerId answer it passed (:meth:`Sequences.born`); for any other (the
  proxy restarted, or the producer came through another proxy), the
  partition's last sequence for the producer, which the driver asks of the
  partition's leader (DescribeProducers) before the first write
  (:meth:`Sequences.unsynced`, :meth:`Sequences.synced`).
* A client batch is known by its producer id, epoch, topic, partition and base
  sequence (:class:`ClientBatch`). The first time it comes, its records are
  placed in new upstream batches. Every later time (the client's retry) it
  stands for the very same upstream batches, never new ones: those
  acknowledged are not sent again, those in flight are waited for, those that
  failed are sent again with the same sequence numbers, so a broker that had
  written one answers with it instead of writing it twice.
* Towards the client the proxy checks sequences as a broker would: a batch it
  does not know must continue the producer's last batch for that partition
  (else OUT_OF_ORDER_SEQUENCE_NUMBER, and nothing is sent); the first batch the
  proxy sees from a producer for a partition is taken at any sequence. A batch
  from an epoch older than the producer's newest is INVALID_PRODUCER_EPOCH.
* A target partition's upstream batches are written in sequence order: when a
  batch is to be written, every earlier one of its partition that failed is
  written again first (:meth:`Session.resend_before`).
* A batch is written only behind every earlier unacknowledged batch of its
  partition, on the same connection, which carries them to the broker in
  order (:meth:`Session.in_order`); else it is not written and fails, to be
  written again with the earlier ones. A broker refuses a batch whose first
  sequence does not follow the last it wrote (KIP-98), but takes any from a
  producer it has no state for (KIP-360): a batch written on a new connection
  while an earlier one was lost with a cut one would be written over the gap,
  and the answers below would take the lost one as written. For the same
  reason, while the partition's leader may hold no state for the producer (no
  batch of this epoch acknowledged there yet, nor a sequence learnt from it; or
  it answered UNKNOWN_PRODUCER_ID), a batch is written only when no earlier one
  of its partition is unanswered, even on the same connection: the broker
  could refuse the earlier one and take the later one, which leaves a gap the
  proxy would fill with a duplicate (:attr:`_Target.confirmed`): the later one
  is not written and fails, to be written again (the client retries it) once
  the earlier is answered. Once the leader has state, it refuses whatever does
  not follow its last sequence itself.
* Upstream answers (:meth:`Sequences.settle`): no error, or
  DUPLICATE_SEQUENCE_NUMBER: acknowledged, its bytes dropped.
  OUT_OF_ORDER_SEQUENCE_NUMBER: the driver first asks the leader for the
  producer's last sequence; at or past the batch's last, the batch had been
  written (the answer to an earlier send was lost): acknowledged; otherwise it
  failed and is sent again later. Any other retriable error: failed. An error
  retrying cannot mend: the batch is *dead*, and since no broker can have
  written anything after it, the partition's later unacknowledged batches take
  its sequence numbers, renumbered before they are next sent (none is written
  before: a leader without state would take it over the gap).
* What the client hears for a partition: success when every upstream batch of
  its batch is acknowledged, with the broker's base offset when the client's
  records were the first of a single upstream batch of the same partition and
  none moved (else -1, which the answer turns into the client's "no offset",
  see :func:`.plan.unknown_base_offset`). Otherwise the error of the first that failed, with
  OUT_OF_ORDER_SEQUENCE_NUMBER (a state between the proxy and the broker) and
  a lost upstream connection said as REQUEST_TIMED_OUT, which every client
  retries with the same sequence numbers.
* A transactional producer's EndTxn ends its batches: those that failed
  upstream are never written again (in the next transaction, an aborted one's
  records would be committed), and their partitions' next sequences are asked
  of the leaders again, since a failed write may have reached the broker
  (:meth:`Session.end_transaction`).
* With a journal (:mod:`.journal`), every client batch placed, and every one
  whose upstream batches were renumbered, waits in
  :meth:`Session.take_journal` until the driver records it; an upstream batch
  is written only at the numbers its placement was journaled with
  (:attr:`Upstream.journaled`; a renumbered one is journaled again first,
  :meth:`Session.journaled_again`); after a restart a
  target's leader's last sequence, learnt when synced, tells which of a
  journaled batch's upstream batches were written
  (:meth:`Session.written_upstream`).
* State is per producer id; a newer epoch replaces an older one (the brokers
  fence the older epoch anyway). Each partition remembers the client's last
  :data:`CLIENT_BATCHES_KEPT` batches; an acknowledged upstream batch keeps no
  bytes. Producers idle past ``idle_ms``, or beyond ``max_producers``, are
  forgotten, the longest idle first.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from trafka.codec.errors import ErrorCode
from trafka.codec.records import read_batch_header, set_base_sequence

__all__ = [
    "CLIENT_BATCHES_KEPT",
    "ClientBatch",
    "Placement",
    "PlacementKey",
    "Sequences",
    "Session",
    "State",
    "Upstream",
    "Walked",
    "next_sequence",
]

CLIENT_BATCHES_KEPT = 16
_INT32_MAX = 0x7FFFFFFF

# What the proxy itself went through (a lost connection, an order to restore
# upstream): said as REQUEST_TIMED_OUT, which every client retries with the same
# sequence numbers (librdkafka fails a batch answered NETWORK_EXCEPTION).
_PROXY_STATE_ERRORS = frozenset(
    {ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.NETWORK_EXCEPTION}
)


# What the client hears for a partition: (error, message, base offset, log
# append time, log start offset).
Outcome = tuple[ErrorCode, str | None, int, int, int]

# (producer id, epoch, topic, partition, base sequence) of a client batch.
PlacementKey = tuple[int, int, str, int, int]


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one client batch's records went (a journal's record, see :mod:`.journal`).

    Attributes:
        count: the client batch's record count.
        targets: (target partition, last sequence of the upstream batch holding
            the records bound there), in target order.
    """

    count: int
    targets: tuple[tuple[int, int], ...]


def next_sequence(sequence: int, increment: int) -> int:
    """``sequence + increment``, wrapping past int32's maximum to 0 as Kafka does."""
    if sequence > _INT32_MAX - increment:
        return increment - (_INT32_MAX - sequence) - 1
    return sequence + increment


class State(enum.Enum):
    PLANNED = "planned"  # numbered, not yet written
    SENT = "sent"  # written, answer to come
    ACKED = "acked"
    FAILED = "failed"  # to be written again
    DEAD = "dead"  # refused for good; its numbers went to the next ones


# The states by module names: a member looked up on its Enum class costs about
# 0.1 µs in Python 3.11, and every answer walks its batches' upstream batches.
_PLANNED, _SENT, _ACKED, _FAILED, _DEAD = (
    State.PLANNED,
    State.SENT,
    State.ACKED,
    State.FAILED,
    State.DEAD,
)
_UNANSWERED = (_PLANNED, _SENT)


@dataclass(slots=True, eq=False)
class Upstream:
    """One batch the proxy writes upstream.

    Attributes:
        topic, partition: where it goes.
        base_sequence, count: its sequence numbers.
        data: its bytes (None once acknowledged).
        state: see :class:`State`.
        error: the last error it got (NONE when acknowledged).
        base_offset: the broker's base offset once acknowledged (-1: unknown).
        slot: the driver's (what waits for the answer); not read here.
        link: the driver's name of the connection it was last written on
            (-1: none), see :meth:`Session.in_order`.
        journaled: with a journal, the base sequence it had when a journal
            write holding its placement was acknowledged (None: none yet);
            set by the driver. It is written only at that base sequence.
    """

    topic: str
    partition: int
    base_sequence: int
    count: int
    data: bytes | None
    state: State = _PLANNED
    error: ErrorCode = ErrorCode.NONE
    error_message: str | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    slot: Any = None
    link: int = -1
    journaled: int | None = None

    @property
    def last_sequence(self) -> int:
        return next_sequence(self.base_sequence, self.count - 1)

    def renumber(self, base_sequence: int) -> None:
        assert self.data is not None
        self.base_sequence = base_sequence
        self.data = set_base_sequence(self.data, base_sequence)


@dataclass(slots=True, eq=False)
class ClientBatch:
    """A batch as the client sent it, and the upstream batches holding its records.

    ``offset_of`` is the upstream batch whose base offset is the client's
    (its records first in it, none moved), else None.
    """

    topic: str
    partition: int
    base_sequence: int
    count: int
    upstream: tuple[Upstream, ...]
    offset_of: Upstream | None = None
    # The client's batch of the partition placed before this one, until it is
    # known written (see :meth:`outcome`).
    after: ClientBatch | None = None
    # The error the client was last answered with for it (None: no answer
    # since it last came): unless final, the client may send it again.
    told: ErrorCode | None = None

    def placement(self, targets: dict[int, tuple[tuple[int, int], ...]] | None = None) -> Placement:
        """Its journal record. ``targets``: those of the upstream batches
        already recorded, by ``id`` of the tuple (shared, see :meth:`own_outcome`)."""
        if targets is None:
            return Placement(self.count, _targets(self.upstream))
        key = id(self.upstream)
        found = targets.get(key)
        if found is None:
            found = targets[key] = _targets(self.upstream)
        return Placement(self.count, found)

    def unanswered(self) -> list[Upstream]:
        """The upstream batches, its own and its unsettled predecessors', whose
        answers its outcome waits for."""
        return [u for batch in self._chain() for u in batch.upstream if u.state in _UNANSWERED]

    def _chain(self) -> list[ClientBatch]:
        """This batch and the earlier ones it waits for, newest first (walked in
        a loop: a client may place any number behind one it never retries)."""
        out: list[ClientBatch] = [self]
        while (earlier := out[-1].after) is not None:
            out.append(earlier)
        return out

    def outcome(self, walked: Walked | None = None) -> Outcome | None:
        """(error, message, base offset, log append time, log start offset), or
        None while an upstream batch it waits for is unanswered (``walked``: see
        :meth:`own_outcome`).

        A broker acknowledges a producer's batch only when the batches before it
        (of the same partition) are written, and idempotent clients rely on it:
        librdkafka takes a later batch's success for the earlier ones' (its
        implicit acknowledgement). The proxy writes a client batch's records to
        other partitions than the earlier batches', so it keeps that rule
        itself: while any earlier batch failed and the client has not heard a
        final error for it (an error it retries, or none yet: its answer may
        still come as one, at its deadline), this one is said not written
        either (the client sends it again, and its records, written already,
        are not written twice)."""
        chain = self._chain()
        retried = False  # an earlier batch is to be sent again by the client
        for batch in reversed(chain[1:]):  # the earlier ones, the oldest first
            theirs = batch.own_outcome(walked)
            if theirs is None:
                return None
            if not retried:
                batch.after = None  # every earlier one settled for good: not waited for
            # Failed: the client may send it again until it has heard a final error.
            retried = retried or (
                theirs[0] is not ErrorCode.NONE and (batch.told is None or _retried(batch.told))
            )
        own = self.own_outcome(walked)
        if own is None:
            return None
        if not retried:
            self.after = None
        if not retried or own[0] is not ErrorCode.NONE:
            return own
        return (
            ErrorCode.REQUEST_TIMED_OUT,
            f"an earlier batch of {self.topic}-{self.partition} is to be sent again first",
            -1,
            -1,
            -1,
        )

    def own_outcome(self, walked: Walked | None = None) -> Outcome | None:
        """What its own upstream batches came to, whatever the earlier batches'
        (None while one is unanswered). ``walked``: what the upstream batches
        walked already came to, by ``id`` of the tuple (the client batches of
        one request placed alike share one, see
        :func:`.idempotent_plan.commit_idempotent`); valid while no answer is
        settled."""
        if walked is None:
            found = _walk(self.upstream)
        else:
            key = id(self.upstream)
            if key not in walked:
                walked[key] = _walk(self.upstream)
            found = walked[key]
        if found is not _WRITTEN or self.offset_of is None:
            return found
        o = self.offset_of
        return ErrorCode.NONE, None, o.base_offset, o.log_append_time_ms, o.log_start_offset


def _targets(upstream: tuple[Upstream, ...]) -> tuple[tuple[int, int], ...]:
    """:attr:`Placement.targets` of ``upstream``. A dead upstream batch's
    numbers go to other records: its target is journaled as not written (-1),
    never as the sequence it once had."""
    return tuple(
        sorted((u.partition, -1 if u.state is _DEAD else u.last_sequence) for u in upstream)
    )


# What the upstream batches of a client batch came to (see ClientBatch.own_outcome).
Walked = dict[int, Outcome | None]
_WRITTEN: Outcome = (ErrorCode.NONE, None, -1, -1, -1)


def _walk(upstream: tuple[Upstream, ...]) -> Outcome | None:
    """What ``upstream`` came to: None while one is unanswered, the first
    error, or :data:`_WRITTEN`."""
    for u in upstream:
        if u.state in _UNANSWERED:
            return None
    for u in upstream:
        if u.state is not _ACKED:
            error = u.error or ErrorCode.REQUEST_TIMED_OUT
            if error in _PROXY_STATE_ERRORS:
                return (
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"the proxy's write to {u.topic}-{u.partition} is retried",
                    -1,
                    -1,
                    -1,
                )
            return error, u.error_message, -1, -1, -1
    return _WRITTEN


def _precedes(sequence: int, other: int) -> bool:
    """Whether ``sequence`` comes before ``other`` (sequences wrap past int32's maximum)."""
    return sequence != other and (other - sequence) % (_INT32_MAX + 1) < (_INT32_MAX + 1) // 2


def _retried(error: ErrorCode) -> bool:
    """Whether a client sends again a batch answered with ``error``."""
    return error.retriable or error in _PROXY_STATE_ERRORS


@dataclass(slots=True)
class _Target:
    next_sequence: int | None = None  # None: not yet learned (see the rules)
    leader_last: int | None = None  # the leader's last sequence when learned (-1: none)
    pending: list[Upstream] = field(default_factory=list)  # not acknowledged, in order
    gap: int | None = None  # a dead batch's base sequence: renumber from here
    # The leader is known to hold the producer's state at this epoch (it
    # acknowledged a batch, or told its last sequence): only then may batches
    # of the partition be in flight together (see the rules).
    confirmed: bool = False


@dataclass(slots=True)
class Session:
    """One producer id's state at its newest epoch."""

    producer_id: int
    epoch: int
    born: bool
    last_used: int
    targets: dict[tuple[str, int], _Target] = field(default_factory=dict)
    batches: dict[tuple[str, int], OrderedDict[int, ClientBatch]] = field(default_factory=dict)
    next_client: dict[tuple[str, int], int] = field(default_factory=dict)
    # Client batches to journal (None: no journal).
    journal: list[ClientBatch] | None = None
    # Partitions whose last kept batch belongs to a transaction the client
    # ended (EndTxn): the next batch there waits for none before it.
    ended: set[tuple[str, int]] = field(default_factory=set)
    # Placements journaled before a sync whose numbers at a synced target the
    # leader had not written: journaled again, that target not written (-1),
    # before the next write (see :meth:`Sequences.synced`).
    stale: dict[PlacementKey, Placement] = field(default_factory=dict)
    # With ``--workers --journal DIR``: the sibling workers' placements of
    # the producer when this state was made (see journal_peers; -1: none taken).
    peer_writes: int = -1

    # -- the client's side ------------------------------------------------------------------

    def known(self, topic: str, partition: int, base_sequence: int) -> ClientBatch | None:
        kept = self.batches.get((topic, partition))
        return None if kept is None else kept.get(base_sequence)

    def check_new(self, topic: str, partition: int, base_sequence: int) -> ErrorCode:
        """Whether a batch the proxy does not know may be placed (NONE) or is out
        of order."""
        expected = self.next_client.get((topic, partition))
        if expected is None or expected == base_sequence:
            return ErrorCode.NONE
        return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER

    def unanswered(self) -> list[Upstream]:
        """Its upstream batches numbered and not yet answered (planned or sent)."""
        return [p for t in self.targets.values() for p in t.pending if p.state in _UNANSWERED]

    def end_transaction(self) -> None:
        """The client ended its transaction (EndTxn): it sends none of that
        transaction's batches again, so the next ones wait for none of them
        (:meth:`ClientBatch.outcome`)."""
        self.ended = set(self.batches)
        # Its upstream batches that failed are never written again: written in
        # the next transaction, an aborted one's records would be committed
        # with it. Whether a failed write reached the broker is unknown, so the
        # partition's next sequence is asked of the leader again.
        for t in self.targets.values():
            if not any(p.state is _FAILED for p in t.pending):
                continue
            dropped = {p for p in t.pending if p.state is _FAILED}
            for p in dropped:
                p.state, p.data = _DEAD, None
            self._journal_again(dropped)
            t.pending = [p for p in t.pending if p.state is not _DEAD]
            t.gap = None
            t.next_sequence = t.leader_last = None
            t.confirmed = False

    def remember(self, batch: ClientBatch) -> None:
        """Keep ``batch``, placed now: ``after`` it the client's last batch of
        the partition placed here, if kept and not of a transaction the client
        has ended since."""
        key = (batch.topic, batch.partition)
        kept = self.batches.get(key)
        if kept is None:
            kept = self.batches[key] = OrderedDict()
        elif kept and key not in self.ended:
            batch.after = next(reversed(kept.values()))
        self.ended.discard(key)
        kept[batch.base_sequence] = batch
        while len(kept) > CLIENT_BATCHES_KEPT:
            kept.popitem(last=False)
        self.next_client[key] = next_sequence(batch.base_sequence, batch.count)
        if self.journal is not None:
            self.journal.append(batch)

    def take_journal(self) -> list[ClientBatch]:
        """The client batches to journal before the next write (and forgets them)."""
        out = self.journal or []
        if self.journal is not None:
            self.journal = []
        return list(dict.fromkeys(out))

    def take_stale(self) -> list[tuple[PlacementKey, Placement]]:
        """The stale placements to journal again before the next write (and
        forgets them); not those of client batches placed here since, which
        are journaled from their own upstream batches."""
        out = [(k, p) for k, p in self.stale.items() if self.known(*k[2:]) is None]
        self.stale.clear()
        return out

    def journaled_again(self, batches: Iterable[Upstream]) -> list[ClientBatch]:
        """The kept client batches holding any of ``batches`` whose placement
        was not journaled at its numbers (renumbered since), to journal before
        they are written; taken out of :meth:`take_journal`'s."""
        stale = {u for u in batches if u.journaled != u.base_sequence and u.data is not None}
        if not stale:
            return []
        out = [
            b
            for kept in self.batches.values()
            for b in kept.values()
            if any(u in stale for u in b.upstream)
        ]
        if self.journal is not None:
            self.journal[:] = [b for b in self.journal if b not in out]
        return out

    def written_upstream(self, topic: str, partition: int, last_sequence: int) -> bool:
        """Whether an upstream batch ending at ``last_sequence`` had been written
        at the partition when its leader was asked (False when not asked)."""
        t = self.targets.get((topic, partition))
        if last_sequence < 0 or t is None or t.leader_last is None or t.leader_last < 0:
            return False
        return (t.leader_last - last_sequence) % (_INT32_MAX + 1) < (_INT32_MAX + 1) // 2

    # -- the upstream side ------------------------------------------------------------------

    def target(self, topic: str, partition: int) -> _Target:
        t = self.targets.get((topic, partition))
        if t is None:
            t = self.targets[(topic, partition)] = _Target(0 if self.born else None)
        return t

    def number(
        self, topic: str, partition: int, count: int, data: bytes, built: int | None = None
    ) -> Upstream:
        """A new upstream batch for ``data`` (one batch of this producer), numbered next.

        The caller has made sure the partition's next sequence is known.
        ``built``: the base sequence ``data`` carries (None: read from it);
        rewritten (and checksummed again) only when it is not the next
        (:meth:`next_for`).
        """
        t = self.target(topic, partition)
        self._close_gap(t)
        assert t.next_sequence is not None
        u = Upstream(topic, partition, t.next_sequence, count, data)
        if built is None:
            built = read_batch_header(data).base_sequence
        if built != u.base_sequence:
            u.data = set_base_sequence(data, u.base_sequence)
        t.next_sequence = next_sequence(t.next_sequence, count)
        t.pending.append(u)
        return u

    def next_for(self, topic: str, partition: int) -> int | None:
        """The base sequence the partition's next upstream batch is numbered
        at (:meth:`number`) if nothing changes before, or None when that is not
        known yet (to be learnt from the leader, or a dead batch's numbers to
        give). Changes nothing: batches built at it are checksummed once."""
        t = self.targets.get((topic, partition))
        if t is None:
            return 0 if self.born else None
        return t.next_sequence if t.gap is None else None

    def resend_before(self, u: Upstream) -> list[Upstream]:
        """The failed batches of ``u``'s partition to write again before it, in
        order (``u`` itself included when it failed)."""
        t = self.target(u.topic, u.partition)
        self._close_gap(t)
        out = []
        for p in t.pending:
            if p.state is _FAILED:
                out.append(p)
            if p is u:
                break
        return out

    def _close_gap(self, t: _Target) -> None:
        # Renumber once nothing numbered after the dead batch is in flight.
        if t.gap is None or any(p.state is _SENT for p in t.pending):
            return
        sequence = t.gap
        # Those numbered before the dead batch keep their numbers: the broker
        # expects them before it.
        later = [p for p in t.pending if not _precedes(p.base_sequence, t.gap)]
        for p in later:
            p.renumber(sequence)
            sequence = next_sequence(sequence, p.count)
        t.next_sequence = sequence
        t.gap = None
        # Their placements changed: journaled again before they are written.
        self._journal_again(set(later))

    def _journal_again(self, changed: set[Upstream]) -> None:
        """Journal again, before the next write, the client batches holding a
        batch of ``changed`` (renumbered, or dead: its numbers go to others)."""
        if self.journal is None or not changed:
            return
        for kept in self.batches.values():
            self.journal.extend(b for b in kept.values() if any(u in changed for u in b.upstream))

    def settle(
        self,
        u: Upstream,
        error: ErrorCode,
        *,
        message: str | None = None,
        base_offset: int = -1,
        log_append_time_ms: int = -1,
        log_start_offset: int = -1,
        retriable: bool = True,
    ) -> None:
        """Record an upstream answer (after the driver resolved an out-of-order
        answer, see the rules)."""
        t = self.target(u.topic, u.partition)
        if error in (ErrorCode.NONE, ErrorCode.DUPLICATE_SEQUENCE_NUMBER):
            t.confirmed = True
            u.state, u.error, u.error_message = _ACKED, ErrorCode.NONE, None
            u.base_offset = base_offset
            u.log_append_time_ms = log_append_time_ms
            u.log_start_offset = log_start_offset
            u.data = None
            # A later batch acknowledged means every earlier one was written.
            if u in t.pending:
                at = t.pending.index(u)
                for p in t.pending[:at]:
                    if p.state is _FAILED:
                        p.state, p.error, p.data = _ACKED, ErrorCode.NONE, None
                t.pending = [p for p in t.pending if p.state is not _ACKED]
            return
        u.error, u.error_message = error, message
        if error is ErrorCode.UNKNOWN_PRODUCER_ID:
            t.confirmed = False  # the leader lost the producer's state (KIP-360)
        if retriable:
            u.state = _FAILED
            return
        u.state = _DEAD
        u.data = None
        self._journal_again({u})
        if u in t.pending:
            at = t.pending.index(u)
            t.pending.remove(u)
            later = t.pending[at:]
            if later:
                if t.gap is None or u.base_sequence < t.gap:
                    t.gap = u.base_sequence
            elif t.gap is None:
                t.next_sequence = u.base_sequence
            self._close_gap(t)

    def in_order(self, u: Upstream, link: int) -> bool:
        """Whether ``u`` may be written on connection ``link`` now: every earlier
        unacknowledged batch of its partition is in flight on that connection,
        and there is none while the leader may hold no state for the producer;
        and it is not numbered past a dead batch whose numbers are still to be
        given to the next ones."""
        t = self.targets.get((u.topic, u.partition))
        if t is None:
            return True
        if t.gap is not None and not _precedes(u.base_sequence, t.gap):
            # Numbered past a dead batch, to be renumbered: a leader without
            # state would take it over the gap.
            return False
        for p in t.pending:
            if p is u:
                break
            if p.state is not _SENT or p.link != link or not t.confirmed:
                return False
        return True

    def sent(self, u: Upstream, link: int = -1) -> None:
        """``u`` is written on connection ``link`` (-1: it is not, and fails)."""
        if u.state in (_PLANNED, _FAILED):
            u.state = _SENT
        u.link = link


class Sequences:
    """Every routed producer's :class:`Session`.

    Args:
        max_producers: sessions kept at most (the longest idle is forgotten).
        idle_ms: a session unused this long is forgotten.
    """

    def __init__(
        self, *, max_producers: int = 100_000, idle_ms: int = 3_600_000, journaled: bool = False
    ) -> None:
        self.max_producers = max_producers
        self.idle_ms = idle_ms
        self.journaled = journaled
        self._sessions: OrderedDict[int, Session] = OrderedDict()
        self._born: OrderedDict[tuple[int, int], None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def born(self, producer_id: int, epoch: int) -> None:
        """An InitProducerId answer gave this id and epoch: it has written nothing yet."""
        self._born[(producer_id, epoch)] = None
        while len(self._born) > self.max_producers:
            self._born.popitem(last=False)

    def session(self, producer_id: int, epoch: int, now_ms: int) -> Session | None:
        """The producer's session at ``epoch`` (a newer epoch replaces the
        older); None when ``epoch`` is older than the newest seen."""
        s = self._sessions.get(producer_id)
        if s is not None and s.epoch > epoch:
            return None
        if s is None or s.epoch < epoch:
            born = (producer_id, epoch) in self._born
            self._born.pop((producer_id, epoch), None)
            s = Session(producer_id, epoch, born, now_ms)
            if self.journaled:
                s.journal = []
            self._sessions[producer_id] = s
        s.last_used = now_ms
        self._sessions.move_to_end(producer_id)
        self._expire(now_ms)
        return s

    def get(self, producer_id: int) -> Session | None:
        return self._sessions.get(producer_id)

    def forget(self, producer_id: int) -> None:
        """Drop the producer's session (another proxy owns its sequences now)."""
        self._sessions.pop(producer_id, None)

    def _expire(self, now_ms: int) -> None:
        while self._sessions:
            pid, oldest = next(iter(self._sessions.items()))
            if len(self._sessions) > self.max_producers or now_ms - oldest.last_used > self.idle_ms:
                del self._sessions[pid]
            else:
                break

    @staticmethod
    def unsynced(session: Session, targets: Iterable[tuple[str, int]]) -> list[tuple[str, int]]:
        """The target partitions whose next sequence must be asked of their leader first."""
        out = []
        for key in targets:
            t = session.targets.get(key)
            if (t is None and not session.born) or (t is not None and t.next_sequence is None):
                out.append(key)
        return sorted(set(out))

    @staticmethod
    def synced(
        session: Session,
        topic: str,
        partition: int,
        last_sequence: int,
        last_epoch: int,
        journaled: Iterable[tuple[PlacementKey, Placement]] = (),
    ) -> None:
        """The leader's answer: the producer's last sequence (-1: none) and epoch there.

        ``journaled``: the producer's placements at its epoch as journaled
        (by an earlier proxy). Those naming the partition at a sequence the
        leader had not written are stale: this proxy numbers the partition's
        next batches from the leader's last sequence, so those numbers go to
        other records, and a proxy restarted later would find them written
        and take the journaled batch for written. They are journaled again
        with the partition not written (-1) before anything is written
        (:meth:`Session.take_stale`). A write of the earlier proxy still on its
        way must land before the leader is asked (the driver's restart grace,
        see :mod:`.exactly_once`): landing after, it takes the numbers given
        here to other records, whose batch the broker then answers as its
        duplicate.
        """
        t = session.target(topic, partition)
        if t.next_sequence is not None:
            return
        if last_epoch == session.epoch and last_sequence >= 0:
            t.next_sequence = next_sequence(last_sequence, 1)
            t.leader_last = last_sequence
            t.confirmed = True
        else:
            t.next_sequence = 0
            t.leader_last = -1
        for key, placement in journaled:
            pid, epoch, key_topic, client_partition, base = key
            if (pid, epoch, key_topic) != (session.producer_id, session.epoch, topic):
                continue
            if session.known(key_topic, client_partition, base) is not None:
                continue  # placed here: journaled from its own upstream batches
            placement = session.stale.get(key, placement)
            if not any(
                x == partition and s >= 0 and not session.written_upstream(topic, x, s)
                for x, s in placement.targets
            ):
                continue
            session.stale[key] = Placement(
                placement.count,
                tuple(
                    (x, -1 if x == partition and not session.written_upstream(topic, x, s) else s)
                    for x, s in placement.targets
                ),
            )
