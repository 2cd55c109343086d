"""Journal writes pipelined: a routed producer's next request is journaled
while the last one still waits for its journal write.

Rules (see :mod:`.journal` for what a placement is, :mod:`.exactly_once`
for the driver):

* Under the producer's lock the driver numbers a request's batches and hands
  their placements to the journal (:meth:`.PlacementJournal.submit`), then
  lets the lock go: the producer's next request is planned and handed to the
  journal while this one's write is under way, and the journal writes
  whatever was handed meanwhile, of every producer, at once (group commit).
* A request's batches are written upstream only once the journal write that
  holds their placements is durable (:meth:`JournalTicket.wait`), and only
  after the producer's previous request wrote its batches
  (:class:`WriteTurns`): a partition's sequence numbers reach the broker in
  the order they were given, each behind its earlier unanswered batches on
  one connection (:meth:`.sequences.Session.in_order`).
* A batch is written only at the sequence numbers its placement was
  journaled with (:attr:`.sequences.Upstream.journaled`, set when the
  journal write is acknowledged). An earlier batch of a partition refused for
  good gives its numbers to the later ones (renumbered) at any moment, also
  while a request waits for its turn: once its turn has come, the request
  journals again the placements of its batches renumbered since
  (:meth:`JournalTicket.catch_up`), and a batch renumbered even after that
  (while the request's earlier writes were awaited) is held, not written
  (:meth:`.exactly_once.ExactlyOnce`'s ``_write``): it fails retriably and its
  new placement is journaled before the client's retry writes it.
* A batch held by :meth:`.sequences.Session.in_order` (until a partition's
  leader holds the producer's state, one batch of it in flight; behind a
  batch unanswered on a lost connection) fails at once, as without a
  journal: it never waits in its turn for an answer, so the producer's next
  request is not held up by it (it is held in turn if it follows it in a
  partition). Its placement stays journaled at its numbers, with which it is
  written again.
* A placement an earlier proxy journaled, naming a target whose leader had
  not written its numbers there when this proxy learnt its last sequence, is
  journaled again with that target not written (-1) in the first journal
  write after, before any batch numbered from there is written
  (:meth:`.sequences.Sequences.synced`).
* A write that fails leaves its batches unwritten: they fail retriably and
  the client retries them; their placements are journaled again first.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

import trio

from .journal import JournalError, JournalFenced, JournalWrite, PlacementJournal
from .sequences import ClientBatch, Placement, PlacementKey, Session, State, Upstream

__all__ = ["JournalTicket", "Outcome", "Turn", "WriteTurns", "submit"]

log = logging.getLogger("trafka.proxy")


class Outcome(enum.Enum):
    """What a journal write came to."""

    WRITTEN = "written"  # durable: the batches may be written
    FAILED = "failed"  # not durable: nothing is written, the client retries
    FENCED = "fenced"  # another proxy owns the producer: nothing is written


@dataclass(slots=True)
class JournalTicket:
    """A request's journal write under way (``write`` None: nothing to write,
    or handing it over failed already, see ``failed``)."""

    journal: PlacementJournal | None
    session: Session
    write: JournalWrite | None = None
    batches: list[ClientBatch] = field(default_factory=list)
    failed: bool = False
    # The upstream batches the write holds, with the base sequence each had
    # when handed (what the journal says once the write is acknowledged).
    bases: list[tuple[Upstream, int]] = field(default_factory=list)
    # Placements of an earlier proxy journaled again with a target not
    # written (see :meth:`.sequences.Sequences.synced`).
    stale: list[tuple[PlacementKey, Placement]] = field(default_factory=list)

    async def wait(self, deadline: float) -> Outcome:
        """Wait for the write (``deadline``: a topic journal's write has its own)."""
        if self.failed:
            return Outcome.FAILED
        try:
            if self.write is not None:
                await self.write.wait()
        except JournalError as exc:
            return self._failed(exc)
        self._acknowledged()
        return Outcome.WRITTEN

    async def catch_up(self, rounds: Iterable[Iterable[Upstream]], deadline: float) -> Outcome:
        """Journal the placements of the client batches holding any of
        ``rounds``' batches renumbered since they were journaled (see the
        rules), before they are written."""
        if self.journal is None:
            return Outcome.WRITTEN
        again = self.session.journaled_again(u for batches in rounds for u in batches)
        if not again:
            return Outcome.WRITTEN
        self.batches, self.bases = again, _bases(again)
        try:
            await self.journal.record(
                _entries(self.session, again),
                deadline=deadline,
                producer=self.session.producer_id,
            )
        except JournalError as exc:
            return self._failed(exc)
        self._acknowledged()
        return Outcome.WRITTEN

    def _acknowledged(self) -> None:
        for u, base in self.bases:
            u.journaled = base

    def _failed(self, exc: JournalError) -> Outcome:
        pid = self.session.producer_id
        if isinstance(exc, JournalFenced):
            log.warning("producer %d: %s", pid, exc)
            return Outcome.FENCED
        log.error("producer %d's batches are not written: %s", pid, exc)
        self.put_back()
        return Outcome.FAILED

    def put_back(self) -> None:
        if self.session.journal is not None:
            self.session.journal[:0] = self.batches  # journaled before the next write
        for key, placement in self.stale:
            self.session.stale.setdefault(key, placement)


def _bases(batches: Iterable[ClientBatch]) -> list[tuple[Upstream, int]]:
    # Once per upstream batch: the client batches of a request placed alike
    # share their tuple of them.
    shared = {id(b.upstream): b.upstream for b in batches}
    return [(u, u.base_sequence) for upstream in shared.values() for u in upstream]


def _entries(
    session: Session, batches: Iterable[ClientBatch]
) -> Iterable[tuple[PlacementKey, Placement]]:
    pid, epoch = session.producer_id, session.epoch
    targets: dict[int, tuple[tuple[int, int], ...]] = {}
    return (
        ((pid, epoch, b.topic, b.partition, b.base_sequence), b.placement(targets)) for b in batches
    )


async def submit(
    journal: PlacementJournal | None,
    session: Session,
    retried: list[ClientBatch],
    writes: bool,
    deadline: float,
) -> JournalTicket:
    """Hand the session's new placements to the journal, before anything of
    them is written. A shared journal is written before every write, retries
    included: reading the write back is what tells the proxy it still owns
    the producer (:mod:`.journal_topic`)."""
    ticket = JournalTicket(journal, session)
    if journal is None:
        return ticket
    batches = session.take_journal()
    stale = session.take_stale()
    if not batches and journal.shared:
        batches = [b for b in retried if any(u.state is not State.ACKED for u in b.upstream)]
    if not batches and not stale and not (writes and journal.shared):
        return ticket
    ticket.batches, ticket.bases, ticket.stale = batches, _bases(batches), stale
    try:
        ticket.write = await journal.submit(
            [*stale, *_entries(session, batches)], deadline=deadline, producer=session.producer_id
        )
    except JournalError as exc:
        log.error("producer %d's batches are not written: %s", session.producer_id, exc)
        ticket.put_back()
        ticket.failed = True
    return ticket


class WriteTurns:
    """Per producer, the order in which its requests write upstream: the
    order they were numbered in."""

    def __init__(self) -> None:
        self._last: dict[int, trio.Event] = {}

    def take(self, pid: int) -> Turn:
        """The next turn of producer ``pid`` (taken under its lock, as its
        request is numbered)."""
        done = trio.Event()
        turn = Turn(self, pid, self._last.get(pid), done)
        self._last[pid] = done
        return turn

    def finished(self, turn: Turn) -> None:
        """``turn``'s request wrote its batches (or will not): the next may write."""
        turn.done.set()
        if self._last.get(turn.pid) is turn.done:
            del self._last[turn.pid]

    def __len__(self) -> int:
        return len(self._last)


@dataclass(slots=True)
class Turn:
    turns: WriteTurns
    pid: int
    before: trio.Event | None
    done: trio.Event

    async def wait(self) -> None:
        """Until the producer's previous request wrote (or gave up on) its batches."""
        if self.before is not None:
            await self.before.wait()

    def finish(self) -> None:
        """This request's batches are written (or will not be): the next may write."""
        self.turns.finished(self)
