"""Coalescing plain producers' routed Produce requests, per leader.

A plain producer's request, its records placed by the codec's C pass
(:func:`.plan.place_spans`), is not built into batches at once: its pieces
(spans into the client's decompressed batches, bound for one target partition
each) join the accumulator of their target's leader. An accumulator sends one
upstream Produce at a time, and reads its answer in the same task; while it is in flight, the
pieces of later requests gather, and when it is answered the next request is
built from all of them: one batch per target partition (Kafka takes one per
partition in a request) made of the pieces of several client requests, so the
brokers get fewer, larger requests than one per client request and leader.
An accumulator queues a request's pieces for one target partition together, as
one entry (a request of 12 batches spread over 12 partitions makes 144 pieces,
12 entries), so its bookkeeping is per request and partition, not per piece.

Rules:

* Only plain producers (no producer id, no transactional id), magic 2 batches
  the C pass splits, acks 1 or -1: idempotent and transactional producers keep
  their path (their sequences are per producer), as do acks=0 requests (never
  answered: they go alone), legacy message sets and requests the C pass
  declines. An accumulator is per pool (principal), leader, acks, client id
  and Produce version: requests of different acks never share a request, the
  brokers' quotas see each client id's own requests, and every client's answer
  is read at its own version.
* Order: a target partition's pieces are taken in the order they joined, so
  the records one client request sends to a partition keep their order and
  precede those of that connection's later requests (the connection's next
  request is read only once this one's pieces have joined). A request of the
  same connection that does not coalesce waits until the pieces before it are
  written (the event ``Share.flushed``), so it cannot overtake them.
* Size: a built batch holds at most about as many bytes as the largest client
  batch of the requests its pieces came from (:func:`.placement.cap_of`), a
  request at most :data:`MAX_REQUEST_BYTES`; what does not fit waits for the
  next request, in order.
* The answer (:func:`answer`): a client partition none of whose records moved,
  whose pieces are one contiguous run of one built batch that was answered
  without error, gets the batch's base offset plus the run's position in it
  (true for each record: the broker assigns a batch's offsets in order), and
  the batch's log append time and log start offset. Any other gets the rules
  of a split batch (:mod:`.answers`): the first error of its pieces' batches,
  else no offset (:func:`.plan.unknown_base_offset`). An error in a shared
  answer goes to every client that had records in that partition.
* Time: a shared request's timeout is the smallest of its requests'; its
  answer is awaited until the latest of their deadlines, and each client is
  answered by its own deadline (REQUEST_TIMED_OUT for what is not answered by
  then). A piece whose client's deadline passed before it was sent is dropped
  (its client has been told REQUEST_TIMED_OUT).
* Leaders: the answer to a shared request is read by the caller's ``settle``
  (:data:`Settle`), which takes its leader hints and follows the partitions a
  former leader refused to the new one, as for any plain request's part; the
  pieces of a partition still waiting for its former leader go there, are
  refused and are followed the same way.
* Memory: the pieces wait as part of their client requests, whose bytes stay
  reserved in the proxy's request budget (``queued_max_request_bytes``) until
  their answers are made, so the accumulators hold no more than that budget
  allows (plus their decompressed size, bounded per batch).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from trafka.codec import ApiKey, batch_split
from trafka.codec.errors import ErrorCode
from trafka.codec.produce_request import ProduceRequestData
from trafka.codec.produce_response import PartitionAnswer, ProduceAnswer, ProduceResponseWriter

from ..pool import UpstreamError, UpstreamPool, Waiter
from .answers import Endpoints, finish_answer, said
from .plan import SpansPlaced, _in_order, _Span, unknown_base_offset
from .stats import RouteStats

__all__ = ["MAX_REQUEST_BYTES", "Coalescer", "Settle", "Share", "answer"]

log = logging.getLogger("trafka.proxy")

#: The most (estimated) bytes of records one coalesced request holds.
MAX_REQUEST_BYTES = 8 * 1024 * 1024

#: Sends nothing, answers a shared request: (pool, client id, version, leader,
#: the request, its waiter or why it was not written, deadline) -> its answer
#: (leaders learnt and followed; a stand-in failing every partition if none came).
Settle = Callable[
    [UpstreamPool, str | None, int, int, Any, Waiter | UpstreamError, float],
    Awaitable[ProduceAnswer],
]


class _Entry:
    """The records of one client request bound for one target partition: its
    pieces (one per client batch with records there, the client's own batches
    first), kept as the placing made them, in order. An entry goes upstream
    whole, but for one that does not fit a batch's size: its pieces that fit
    go, the rest stays (:meth:`split`)."""

    __slots__ = (
        "answer",
        "count",
        "error",
        "order",
        "pieces",
        "position",
        "share",
        "size",
        "target",
        "topic",
    )

    def __init__(
        self, share: Share, topic: str, target: int, pieces: list[_Span], order: tuple[int, int]
    ) -> None:
        self.share = share
        self.topic = topic
        self.target = target
        self.pieces = pieces  # .plan._Span tuples: (owner, size, whole, spans, header)
        self.order = order  # (index in its share, index of its first piece): answers' order
        self.size = sum(piece[1] for piece in pieces)
        self.count = sum(len(piece[3][1]) for piece in pieces) // batch_split.SPAN_SIZE
        self.answer: PartitionAnswer | None = None
        self.error = 0  # why it has no answer (0: not yet answered)
        self.position = 0  # records before it in its built batch

    def split(self, n: int) -> _Entry:
        """Keep the first ``n`` pieces; the rest, a new entry (of the same share,
        which has one more entry to send and answer)."""
        rest = _Entry(
            self.share, self.topic, self.target, self.pieces[n:], (self.order[0], self.order[1] + n)
        )
        self.pieces = self.pieces[:n]
        self.size -= rest.size
        self.count -= rest.count
        self.share.entries.append(rest)
        self.share.unsent += 1
        self.share.waiting += 1
        return rest

    def positions(self) -> list[int]:
        """Where each of its pieces starts in its built batch."""
        out = []
        at = self.position
        for piece in self.pieces:
            out.append(at)
            at += len(piece[3][1]) // batch_split.SPAN_SIZE
        return out


class Share:
    """One client request's entries, over every leader.

    Attributes:
        done: set once every entry is answered (or failed).
        flushed: set once every entry is written upstream (or dropped).
    """

    __slots__ = (
        "answers",
        "cap",
        "counts",
        "deadline",
        "done",
        "entries",
        "flushed",
        "moved_out",
        "timeout_ms",
        "unsent",
        "waiting",
    )

    def __init__(
        self,
        deadline: float,
        timeout_ms: int,
        counts: dict[tuple[str, int], int],
        moved_out: set[tuple[str, int]],
        cap: int,
    ) -> None:
        self.deadline = deadline
        self.timeout_ms = timeout_ms
        self.counts = counts
        self.moved_out = moved_out
        self.cap = cap  # the most (estimated) bytes of a batch its records go in
        self.entries: list[_Entry] = []
        self.answers: dict[int, ProduceAnswer] = {}  # by id: the shared answers it had
        self.done = trio.Event()
        self.flushed = trio.Event()
        self.waiting = 0
        self.unsent = 0

    def sent(self, n: int) -> None:
        """``n`` of its entries were written upstream (or dropped)."""
        self.unsent -= n
        if self.unsent <= 0:
            self.flushed.set()

    def answered(self, n: int, answer: ProduceAnswer | None) -> None:
        """``n`` of its entries were answered by ``answer`` (None: failed)."""
        if answer is not None:
            self.answers[id(answer)] = answer
        self.waiting -= n
        if self.waiting <= 0:
            self.done.set()


def _by_share(entries: list[_Entry]) -> dict[Share, int]:
    """How many of ``entries`` each share has."""
    out: dict[Share, int] = {}
    for entry in entries:
        out[entry.share] = out.get(entry.share, 0) + 1
    return out


class _Leader:
    """The accumulator of one pool, leader, acks, client id and version."""

    __slots__ = ("acks", "client_id", "draining", "leader", "pending", "pool", "version")

    def __init__(
        self, pool: UpstreamPool, leader: int, acks: int, client_id: str | None, version: int
    ) -> None:
        self.pool = pool
        self.leader = leader
        self.acks = acks
        self.client_id = client_id
        self.version = version
        # Per target partition, its entries in the order they came.
        self.pending: dict[tuple[str, int], deque[_Entry]] = {}
        self.draining = False  # its task is sending, or awaiting an answer


_Key = tuple[int, int, int, str | None, int]


class Coalescer:
    """The accumulators of one proxy (see the module's rules).

    Args:
        nursery: runs the accumulators' senders and their answers' readers.
        settle: answers a shared request (:data:`Settle`).
        stats: counts the client requests that join and the upstream requests sent.
    """

    def __init__(self, nursery: trio.Nursery, settle: Settle, stats: RouteStats) -> None:
        self._nursery = nursery
        self._settle = settle
        self._stats = stats
        self._leaders: dict[_Key, _Leader] = {}

    def add(
        self,
        pool: UpstreamPool,
        leader_of: Callable[[str, int], int],
        client_id: str | None,
        version: int,
        acks: int,
        timeout_ms: int,
        deadline: float,
        placed: SpansPlaced,
    ) -> Share:
        """The pieces of one client request, placed, join their leaders'
        accumulators (at once: nothing here waits)."""
        targets, moved_out, counts, _, cap = placed
        share = Share(deadline, timeout_ms, counts, moved_out, cap)
        started: list[_Leader] = []
        for (topic, target), (own, moved) in targets.items():
            leader = leader_of(topic, target)
            key = (id(pool), leader, acks, client_id, version)
            acc = self._leaders.get(key)
            if acc is None:
                acc = self._leaders[key] = _Leader(pool, leader, acks, client_id, version)
            queue = acc.pending.get((topic, target))
            if queue is None:
                queue = acc.pending[(topic, target)] = deque()
            entry = _Entry(share, topic, target, own + moved, (len(share.entries), 0))
            share.entries.append(entry)
            queue.append(entry)
            if not acc.draining:
                acc.draining = True
                started.append(acc)
        share.waiting = share.unsent = len(share.entries)
        self._stats.requests_coalesced += 1
        if not share.entries:
            share.done.set()
            share.flushed.set()
        for acc in started:
            self._nursery.start_soon(self._drain, acc)
        return share

    async def _drain(self, acc: _Leader) -> None:
        """Send the accumulator's pieces, one request at a time: the next is
        built once the last is answered, of every piece that came meanwhile.
        Its answer is read here, not in a task of its own: no second request
        could go while it is in flight anyway."""
        try:
            while acc.pending:
                taken = self._take(acc)
                if taken is None:
                    continue
                body, entries, deadline = taken
                try:
                    waiter: Waiter | UpstreamError = await acc.pool.send(
                        acc.leader, acc.client_id, ApiKey.PRODUCE, acc.version, body
                    )
                except UpstreamError as exc:
                    waiter = exc
                self._stats.upstream_coalesced += 1
                for share, n in _by_share(entries).items():
                    share.sent(n)
                await self._answer(acc, body, entries, waiter, deadline)
        finally:
            acc.draining = False
            self._forget(acc)

    def _take(self, acc: _Leader) -> tuple[Any, list[_Entry], float] | None:
        """The next request of ``acc``'s pending entries (those of each target
        partition in order, within the size rules), or None when every entry
        left had expired."""
        now = trio.current_time()
        batches: dict[tuple[str, int], list[_Entry]] = {}
        expired: list[_Entry] = []
        total = 0
        for key, queue in list(acc.pending.items()):
            if total >= MAX_REQUEST_BYTES:
                break
            chunk: list[_Entry] = []
            size = cap = 0
            while queue:
                entry = queue[0]
                if entry.share.deadline <= now:
                    expired.append(queue.popleft())
                    continue
                cap = max(cap, entry.share.cap)
                fits = _fitting(entry, size if chunk else -1, cap, total)
                if fits < len(entry.pieces):
                    if fits:
                        queue[0] = entry.split(fits)
                        chunk.append(entry)
                        size += entry.size
                        total += entry.size
                    break
                chunk.append(queue.popleft())
                size += entry.size
                total += entry.size
            if chunk:
                batches[key] = chunk
            if not queue:
                del acc.pending[key]
        for entry in expired:
            entry.error = ErrorCode.REQUEST_TIMED_OUT
        for share, n in _by_share(expired).items():
            share.sent(n)
            share.answered(n, None)
        if not batches:
            return None
        data: dict[str, dict[int, bytes]] = {}
        entries: list[_Entry] = []
        made = _built(batches)
        for ((topic, target), chunk), built in zip(batches.items(), made, strict=True):
            position = 0
            for entry in chunk:
                entry.position = position
                position += entry.count
            if built is None:
                for entry in chunk:
                    entry.error = ErrorCode.CORRUPT_MESSAGE
                for share, n in _by_share(chunk).items():
                    share.sent(n)
                    share.answered(n, None)
                continue
            data.setdefault(topic, {})[target] = built
            entries.extend(chunk)
        if not entries:
            return None
        shares = {id(e.share): e.share for e in entries}.values()
        timeout = min(s.timeout_ms for s in shares)
        body = ProduceRequestData(None, acc.acks, timeout, _in_order(data))
        return body, entries, max(s.deadline for s in shares)

    async def _answer(
        self,
        acc: _Leader,
        body: Any,
        entries: list[_Entry],
        waiter: Waiter | UpstreamError,
        deadline: float,
    ) -> None:
        """Read a shared request's answer and give each entry its partition's."""
        got: ProduceAnswer | None = None
        try:
            got = await self._settle(
                acc.pool, acc.client_id, acc.version, acc.leader, body, waiter, deadline
            )
        finally:
            found = {} if got is None else got.partitions
            for entry in entries:
                entry.answer = found.get((entry.topic, entry.target))
                if entry.answer is None:
                    entry.error = ErrorCode.NETWORK_EXCEPTION
            for share, n in _by_share(entries).items():
                share.answered(n, got)

    def _forget(self, acc: _Leader) -> None:
        """Drop an accumulator with nothing pending, sending or in flight."""
        if acc.pending or acc.draining:
            return
        key = (id(acc.pool), acc.leader, acc.acks, acc.client_id, acc.version)
        if self._leaders.get(key) is acc:
            del self._leaders[key]


def _built(batches: dict[tuple[str, int], list[_Entry]]) -> list[bytes | None]:
    """One batch of each chunk's records (a whole client batch byte for byte),
    those not kept whole built in one C call (``batch_split.build_batches``);
    None where the codec declined."""
    out: list[bytes | None] = []
    jobs: list[batch_split.Job] = []
    at: list[int] = []  # the chunks built, by their place in ``out``
    for chunk in batches.values():
        first = chunk[0].pieces[0]
        if len(chunk) == 1 and len(chunk[0].pieces) == 1 and first[2] is not None:
            out.append(first[2])
            continue
        spans = [piece[3] for entry in chunk for piece in entry.pieces]
        jobs.append((spans, first[4].attributes, -1, -1, -1))
        at.append(len(out))
        out.append(None)
    for i, job, built in zip(at, jobs, batch_split.build_batches(jobs), strict=True):
        if built is None:
            log.warning("coalescing: the codec declined to build a batch of %d pieces", len(job[0]))
        else:
            out[i] = built[0]
    return out


async def answer(
    share: Share,
    body: Any,
    version: int,
    client_software: str | None,
    endpoints: Endpoints | None,
) -> bytes:
    """The client's ProduceResponse body at ``version`` for its request ``body``,
    once its pieces are answered or its deadline passed (see the module's rules)."""
    with trio.move_on_at(share.deadline):
        await share.done.wait()
    # Each client partition's pieces, in the order they were placed. When every
    # one was written, a partition some of whose records moved is told no
    # offset whatever its pieces: only the others' are looked at (the client's
    # own pieces, which come first in their entries).
    of: dict[tuple[str, int], list[tuple[_Entry, int]]] = {}
    entries = sorted(share.entries, key=_placed_order)
    written = all(e.answer is not None and not e.answer.error_code for e in entries)
    for entry in entries:
        key = (entry.topic, entry.target)
        if written and (key in share.moved_out or key not in share.counts):
            continue
        for i, piece in enumerate(entry.pieces):
            if written and piece[0] != key:
                break
            of.setdefault(piece[0], []).append((entry, i))
    w = ProduceResponseWriter(version, len(body.topic_data))
    for t in body.topic_data:
        w.topic(t.name, len(t.partition_data))
        for p in t.partition_data:
            key = (t.name, p.index)
            count = share.counts.get(key, 0)
            _partition(w, p.index, of.get(key, []), key in share.moved_out, count, client_software)
    answers = list(share.answers.values())
    nodes = {e.node_id: e for a in answers for e in a.node_endpoints}
    return finish_answer(w, answers, list(nodes.values()), endpoints)


def _placed_order(entry: _Entry) -> tuple[int, int]:
    return entry.order


def _fitting(entry: _Entry, size: int, cap: int, total: int) -> int:
    """How many of ``entry``'s first pieces fit the batch being built, which
    holds ``size`` estimated bytes (-1: none yet, so its first piece goes
    whatever its size), of a request holding ``total``: a piece fits while the
    batch stays within ``cap`` and the request within :data:`MAX_REQUEST_BYTES`."""
    if max(size, 0) + entry.size <= cap and total + entry.size <= MAX_REQUEST_BYTES:
        return len(entry.pieces)
    n = 0
    for piece in entry.pieces:
        if size >= 0 and (size + piece[1] > cap or total + piece[1] > MAX_REQUEST_BYTES):
            break
        size = max(size, 0) + piece[1]
        total += piece[1]
        n += 1
    return n


def _partition(
    w: ProduceResponseWriter,
    index: int,
    pieces: list[tuple[_Entry, int]],
    moved: bool,
    count: int,
    client_software: str | None,
) -> None:
    """One client partition's answer from its pieces' (see the module's rules)."""
    for entry, _ in pieces:
        found = entry.answer
        if found is None:
            w.add(index, said(entry.error or ErrorCode.REQUEST_TIMED_OUT), -1)
            return
        if found.error_code:
            w.add(index, said(found.error_code), -1, error_message=found.error_message)
            return
    a = pieces[0][0].answer if pieces else None
    if a is not None and not moved and a.base_offset >= 0:
        # One contiguous run of one answered batch: its records' offsets follow its base.
        start = pieces[0][0].positions()[pieces[0][1]]
        told = (a.base_offset + start, a.log_append_time_ms, a.log_start_offset)
        run = start
        for entry, i in pieces:
            if entry.answer is not a or entry.positions()[i] != run:
                break
            run += len(entry.pieces[i][3][1]) // batch_split.SPAN_SIZE
        else:
            w.add(index, 0, *told)
            return
    w.add(index, 0, unknown_base_offset(count, client_software))
