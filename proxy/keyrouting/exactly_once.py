"""The driver of routed idempotent and transactional producers.

The protocol logic is :mod:`.sequences` (sequence numbers, retries) and
:mod:`.plan` (placing records); this module does their I/O over the
proxy's pooled upstream connections:

* One producer's requests are planned one at a time (a lock per producer
  id), and written in the order they were planned: without a journal before
  the lock is let go; with one, once the journal write holding their
  placements is acknowledged and the producer's previous request wrote its
  batches (:mod:`.journal_pipeline`). The sequence numbers of a target
  partition are written in the order they were given, whichever client
  connection of the producer the requests came on.
* Before the first write to a partition for a producer the proxy did not see
  born, the leader is asked the producer's last sequence there
  (DescribeProducers). An OUT_OF_ORDER_SEQUENCE_NUMBER answer is checked the
  same way (see :mod:`.sequences`).
* No leader is asked before the producer's grace has passed
  (:mod:`.sync_grace`): for a producer not seen born, ``restart_grace`` from
  the proxy's start, and from its first sync when the journal holds
  placements of it (a former instance's or another worker's writes still in
  the network land meanwhile); with a shared journal, a takeover's grace
  from the claim. The
  client's request is held for it while its own timeout allows, else answered
  REQUEST_TIMED_OUT, with nothing numbered.
* A transactional producer's records moved to a partition its transaction does
  not hold yet are preceded by the proxy's own AddPartitionsToTxn (version 3,
  as the client would send it, with the client's transactional id, producer
  id and epoch) to the transaction's coordinator, retried on the retriable
  coordinator errors until the request's deadline. The partitions a
  transaction holds are learnt from the answers to the client's own
  AddPartitionsToTxn requests (a partition answered without error; not one
  only asked for, which Kafka's leaders would refuse a write to until added)
  and the proxy's; its EndTxn empties them.
* When that preparation fails (no leader to ask, no coordinator), the client's
  partitions are answered with a retriable error and nothing is written or
  numbered, so its retry starts afresh.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import trio

from trafka.codec import ApiKey, protocol
from trafka.codec.errors import DecodeError, ErrorCode, TrafkaError
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k24_add_partitions_to_txn as apt
from trafka.codec.messages import k61_describe_producers as dp
from trafka.codec.produce_response import PartitionAnswer, ProduceAnswer
from trafka.codec.records import iter_batches

from ..filters import FilterContext
from ..pool import HeldBack, UpstreamError, UpstreamPool, Waiter, produce_answer
from ..topics import Topics
from .answers import Endpoints, failed_answer, failed_part, learn_leaders
from .idempotent_plan import (
    Headers,
    IdempotentPlan,
    commit_idempotent,
    idempotent_answer_bytes,
    prepare_idempotent,
    upstream_body,
)
from .journal import PlacementJournal
from .journal_peers import PeersJournal
from .journal_pipeline import JournalTicket, Outcome, Turn, WriteTurns, submit
from .place import place
from .placement import Hashing
from .sequences import Placement, Sequences, Session, State, Upstream
from .stats import RouteStats
from .sync_grace import GraceOutlasts, SyncGrace
from .worker_lives import Siblings

__all__ = ["ExactlyOnce", "Numbered", "Preparation", "Written"]

log = logging.getLogger("trafka.proxy")
# Each written part's batches and waiter, or why they were not written.
Written = list[tuple[list[Upstream], Waiter | UpstreamError]]

MAX_TRANSACTIONAL_IDS = 100_000
# Requests that name a transactional id (and so teach the proxy of its transaction).
_NAMING_TXN = frozenset({ApiKey.INIT_PRODUCER_ID, ApiKey.ADD_OFFSETS_TO_TXN})
_DESCRIBE = ApiKey.DESCRIBE_PRODUCERS
# Producers whose first request is remembered per client connection (a
# connection normally carries one; past this many, checked again).
_PRODUCERS_PER_CONNECTION = 64
_COORDINATOR_RETRY = frozenset(
    {
        ErrorCode.NOT_COORDINATOR,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.CONCURRENT_TRANSACTIONS,
    }
)


class Preparation(Exception):
    """The request could not be prepared; its partitions get ``code``."""

    def __init__(self, message: str, code: ErrorCode = ErrorCode.REQUEST_TIMED_OUT) -> None:
        super().__init__(message)
        self.code = code


@dataclass(slots=True)
class Numbered:
    """A request numbered and handed to the journal, to be written."""

    plan: IdempotentPlan
    session: Session
    ticket: JournalTicket
    turn: Turn


@dataclass(slots=True)
class _Txn:
    producer_id: int
    epoch: int
    partitions: set[tuple[str, int]] = field(default_factory=set)
    coordinator: int = -1


class ExactlyOnce:
    """Routes idempotent and transactional producers' Produce requests.

    Args:
        pool: the proxy's upstream connections.
        topics: partition counts and leaders.
        stats: routing counters.
        refresh: asks the cluster again for these topics' leaders.
        nodes: the node ids the proxy knows (to find a coordinator through).
        max_size: the most a batch may inflate to (see :func:`.idempotent_plan.prepare_idempotent`).
        journal: where placements are recorded before they are written, and
            read back after a restart or by another instance (see
            :mod:`.journal`); None: nowhere.
        origin_headers: see :func:`.plan.plan_produce`.
        restart_grace: see :class:`.sync_grace.SyncGrace`.
        siblings: with ``trafka proxy --workers``, the worker's supervisor
            (:mod:`.worker_lives`): told of every InitProducerId answer passed.
    """

    def __init__(
        self,
        pool: UpstreamPool,
        topics: Topics,
        stats: RouteStats,
        refresh: Callable[[set[str]], None],
        nodes: Callable[[], list[int]],
        max_size: int,
        journal: PlacementJournal | None = None,
        *,
        origin_headers: bool = False,
        restart_grace: float = 0.0,
        siblings: Siblings | None = None,
    ) -> None:
        self.max_size = max_size
        # When producers' sequences may be asked of the leaders.
        self._grace = SyncGrace(restart_grace, siblings)
        self.siblings = siblings
        self.origin_headers = origin_headers
        self.pool = pool
        self.topics = topics
        self.stats = stats
        self.refresh = refresh
        self.nodes = nodes
        self.journal = journal
        self.sequences = Sequences(journaled=journal is not None)
        # Per transactional id, the longest unused forgotten first beyond the cap
        # (a forgotten one only costs an AddPartitionsToTxn the coordinator
        # answers at once for partitions it already holds).
        self.transactions: OrderedDict[str, _Txn] = OrderedDict()
        self._locks: dict[int, trio.Lock] = {}
        self._turns = WriteTurns()

    def _pool(self, ctx: FilterContext) -> UpstreamPool:
        """The connections to write the client's requests on: those that log in
        as its principal (a SASL client's, see :mod:`..principals`), else the shared ones."""
        return ctx.pool or self.pool

    # -- what the client's other requests teach ------------------------------------------------

    def init_answered(self, body: Any) -> None:
        """An InitProducerId answer passed to a client."""
        if not body.error_code and body.producer_id >= 0:
            self.sequences.born(body.producer_id, body.producer_epoch)
            if self.siblings is not None:
                self.siblings.born(body.producer_id, body.producer_epoch)

    async def before_end(self, body: Any, deadline: float) -> None:
        """Hold a client's EndTxn until the producer's routed writes are answered
        (or ``deadline``, trio's clock): the proxy may have answered a Produce at
        its deadline with some of its writes still unanswered, and EndTxn must
        not overtake them. A write landing after the transaction's markers would
        belong to no transaction, or to the producer's next one."""
        session = self.sequences.get(body.producer_id)
        if session is None or session.epoch != body.producer_epoch:
            return
        with trio.move_on_at(deadline):
            for u in session.unanswered():
                if isinstance(u.slot, trio.Event):
                    await u.slot.wait()

    def client_request(self, key: int, version: int, body: Any, node_id: int) -> None:
        """A transaction request the client sent to broker ``node_id``."""
        if key == ApiKey.ADD_PARTITIONS_TO_TXN and version <= 3:
            txn = self._txn(
                body.v3_and_below_transactional_id,
                body.v3_and_below_producer_id,
                body.v3_and_below_producer_epoch,
            )
            txn.coordinator = node_id if node_id >= 0 else txn.coordinator
        elif key == ApiKey.END_TXN:  # the next transaction starts empty
            txn = self._txn(body.transactional_id, body.producer_id, body.producer_epoch)
            txn.coordinator = node_id if node_id >= 0 else txn.coordinator
            txn.partitions.clear()
            session = self.sequences.get(body.producer_id)
            if session is not None and session.epoch == body.producer_epoch:
                session.end_transaction()
        elif key in _NAMING_TXN and getattr(body, "transactional_id", None):
            self._txn(
                body.transactional_id,
                getattr(body, "producer_id", -1),
                getattr(body, "producer_epoch", -1),
            ).coordinator = node_id

    def client_added(self, request: Any, answer: Any) -> None:
        """A client's AddPartitionsToTxn (v3 and below) answered: what it added
        without error is the transaction's (see the module's rules)."""
        if not answer.error_code:
            tid = request.v3_and_below_transactional_id
            txn = self._txn(
                tid, request.v3_and_below_producer_id, request.v3_and_below_producer_epoch
            )
            txn.partitions.update(_added(answer))

    def _txn(self, tid: str, pid: int, epoch: int) -> _Txn:
        txn = self.transactions.get(tid)
        if txn is None or (pid >= 0 and (txn.producer_id, txn.epoch) != (pid, epoch)):
            old = txn
            txn = self.transactions[tid] = _Txn(pid, epoch)
            if old is not None:
                txn.coordinator = old.coordinator
        self.transactions.move_to_end(tid)
        while len(self.transactions) > MAX_TRANSACTIONAL_IDS:
            self.transactions.popitem(last=False)
        return txn

    # -- Produce ---------------------------------------------------------------------------

    async def plan(
        self,
        ctx: FilterContext,
        body: Any,
        producer: tuple[int, int],
        hash_name: Hashing,
        deadline: float,
        headers: Headers | None = None,
    ) -> tuple[IdempotentPlan, Written | Numbered] | Any | None:
        """Plan and write a request (``ctx``: its :class:`~..filters.FilterContext`;
        ``headers``: as :func:`.idempotent_plan.read_batches` read them, None: here).

        Returns:
            (the plan, each written part's batches and waiter); with a
            journal, (the plan, the request :class:`Numbered`: written by
            :meth:`settle` once its journal write is durable); or a ready
            answer (a ProduceResponse) when the proxy answers itself; or None
            when the request is not for this path.
        """
        pid = producer[0]
        lock = self._locks.setdefault(pid, trio.Lock())
        try:
            async with lock:
                planned = await self._plan_locked(
                    ctx, body, *producer, hash_name, deadline, headers
                )
                if not isinstance(planned, Numbered):
                    return planned
                if self.journal is None:
                    # Written before the lock is let go: the next request of
                    # the producer is numbered behind this one's writes.
                    # Nothing may cut this short (see _plan_locked).
                    with trio.CancelScope(shield=True):
                        written = await self._write_numbered(ctx, body, planned, deadline)
                    return planned.plan, written
        finally:
            if not lock.locked() and not lock.statistics().tasks_waiting:
                self._locks.pop(pid, None)
        # Written by settle(), which the proxy always runs (see RespondLater):
        # the client's next request is read, numbered and handed to the
        # journal meanwhile (see :mod:`.journal_pipeline`).
        return planned.plan, planned

    async def _plan_locked(
        self,
        ctx: FilterContext,
        body: Any,
        pid: int,
        epoch: int,
        hash_name: Hashing,
        deadline: float,
        headers: Headers | None,
        again: bool = False,
    ) -> Any:
        if self.journal is not None and self.journal.shared:
            try:
                await self._grace.claim(self.journal, pid, epoch, deadline, self.sequences.forget)
            except GraceOutlasts as exc:
                return _all_failed(body, ErrorCode.REQUEST_TIMED_OUT, str(exc))
        session = _session(ctx, self.sequences, self._grace, self.journal, pid, epoch)
        if session is None:
            return _all_failed(body, ErrorCode.INVALID_PRODUCER_EPOCH)
        recovered = None
        if self.journal is not None:
            # Batches placed before a restart: their targets' leaders say first
            # what had been written.
            journal = self.journal
            try:
                for topic, partition in Sequences.unsynced(
                    session, _journaled_targets(journal, session, body, headers)
                ):
                    await self._sync(ctx, session, topic, partition, deadline)
            except Preparation as exc:
                return _all_failed(body, exc.code, str(exc))

            def recovered(topic: str, partition: int, base: int) -> Placement | None:
                return journal.lookup((pid, epoch, topic, partition, base))

        # Placing and encoding the records may run on a worker thread (it only
        # reads the session, which nothing else changes while this producer's
        # lock is held).
        prepared = await place(
            body,
            hash_name,
            self.origin_headers,
            partial(
                prepare_idempotent,
                body,
                session=session,
                topics=self.topics,
                hash_name=hash_name,
                stats=self.stats,
                max_size=self.max_size,
                recovered=recovered,
                origin_headers=self.origin_headers,
                headers=headers,
            ),
        )
        if prepared is None:
            return None
        if (
            self.journal is not None
            and self.journal.shared
            and ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER in prepared.refused.values()
            and not again
        ):
            # A batch out of order here may be in order for the producer: it
            # went through another proxy since. Claimed back, the producer's
            # sequences are learnt afresh if so (else the refusal stands).
            self._grace.unclaim(pid)
            return await self._plan_locked(
                ctx, body, pid, epoch, hash_name, deadline, headers, True
            )
        if prepared.stale:
            self.refresh(prepared.stale)
        try:
            for topic, partition in Sequences.unsynced(session, prepared.targets):
                await self._sync(ctx, session, topic, partition, deadline)
            if body.transactional_id is not None:
                await self._add_to_txn(ctx, body, pid, epoch, prepared.targets, deadline)
        except Preparation as exc:
            log.debug("a Produce of producer %d is answered %s: %s", pid, exc.code.name, exc)
            return _all_failed(body, exc.code, str(exc))
        # From numbering to the last write nothing may be cut short (the client's
        # connection closing cancels its tasks): a batch numbered but neither
        # written nor failed would hold its partition's sequence forever.
        with trio.CancelScope(shield=True):
            plan = commit_idempotent(body, prepared, session)
            # With a journal, nothing is written before its placement is
            # durable: handed to the journal now, awaited once the lock is free.
            ticket = await submit(
                self.journal, session, prepared.retried, bool(plan.rounds), deadline
            )
            for batches in plan.rounds:
                for u in batches:
                    # What a retry of its client batch waits for, from now on
                    # (this request may write it after the retry is planned).
                    _fresh_slot(u)
            return Numbered(plan, session, ticket, self._turns.take(pid))

    async def _write_numbered(
        self, ctx: FilterContext, body: Any, numbered: Numbered, deadline: float
    ) -> Written:
        """Write a numbered request's batches once its journal write is durable
        and the producer's previous request wrote its own; what was written,
        with its waiter, and what was not, with why (settled as failed)."""
        plan, session, turn = numbered.plan, numbered.session, numbered.turn
        written: Written = []
        try:
            outcome = await numbered.ticket.wait(deadline)
            with trio.move_on_at(deadline):
                await turn.wait()
                if outcome is Outcome.WRITTEN:
                    # Renumbered while it waited (an earlier batch of a
                    # partition refused for good): journaled again first.
                    outcome = await numbered.ticket.catch_up(plan.rounds, deadline)
                if outcome is Outcome.WRITTEN:
                    for batches in plan.rounds:
                        for leader, group in _by_leader(batches, self.topics).items():
                            await self._write(ctx, body, session, leader, group, written)
            if outcome is Outcome.FENCED:
                self.sequences.forget(session.producer_id)
                self._grace.unclaim(session.producer_id)
            unsent = [u for batches in plan.rounds for u in batches if u.state is State.PLANNED]
            if unsent:
                written.append(
                    (unsent, UpstreamError("not written in time", ErrorCode.REQUEST_TIMED_OUT))
                )
                for u in unsent:
                    session.sent(u)
                    _fresh_slot(u)
        finally:
            turn.finish()
        return written

    async def _write(
        self,
        ctx: FilterContext,
        body: Any,
        session: Session,
        leader: int,
        group: list[Upstream],
        written: list[tuple[list[Upstream], Waiter | UpstreamError]],
    ) -> None:
        """Write ``group`` (one batch a partition, all led by ``leader``) and add
        to ``written`` what was written, with its waiter, and what was not, with
        why (each is settled as failed): a batch an earlier one of its partition
        is unanswered for on another connection (:meth:`.Session.in_order`), a
        batch whose placement at its numbers is not journaled (renumbered since,
        see :mod:`.journal_pipeline`), or all when the connection fails or the
        deadline passes."""
        for u in group:
            _fresh_slot(u)
        todo, why = group, UpstreamError("not written in time", ErrorCode.REQUEST_TIMED_OUT)
        try:
            link = await self._pool(ctx).link(leader)
            # A batch to write again may have been acknowledged since it was
            # planned (a later one of its partition was): nothing is left of it
            # to write (its bytes are gone). Or, pipelined behind a journal
            # write, an earlier request of the producer may have written it
            # since (its answer is awaited through its slot), or it was refused
            # for good.
            for u in group:
                if u.state is State.ACKED:
                    u.slot.set()
            todo = group = [u for u in group if u.state in (State.PLANNED, State.FAILED)]
            # Checked with nothing awaited before the batches are marked sent:
            # an answer settled meanwhile may hold them back or renumber them.
            held = [
                u
                for u in group
                if not session.in_order(u, link)
                or (self.journal is not None and u.journaled != u.base_sequence)
            ]
            if held:
                self.stats.batches_held += len(held)
                for u in held:
                    session.sent(u)
                held_back = HeldBack(
                    f"broker {leader}: not written while an earlier batch of its "
                    "partition is unanswered on a lost connection, or before the "
                    "broker has acknowledged one of the producer's batches there, "
                    "or renumbered since its placement was journaled"
                )
                written.append((held, held_back))
                todo = [u for u in group if u not in held]
            if todo:
                for u in todo:
                    session.sent(u, link)
                part = upstream_body(body, todo)
                waiter = await self._pool(ctx).send(
                    leader, ctx.client_id, ApiKey.PRODUCE, ctx.api_version, part, link=link
                )
                written.append((todo, waiter))
                todo = []
        except UpstreamError as exc:
            why = exc
        finally:
            todo = [u for u in todo if u.state is not State.ACKED]
            if todo:  # not written: settled as failed
                for u in todo:
                    session.sent(u)
                written.append((todo, why))

    async def settle(
        self,
        ctx: FilterContext,
        body: Any,
        plan: IdempotentPlan,
        written: Written | Numbered,
        deadline: float,
        endpoints: Endpoints | None = None,
    ) -> bytes:
        """Write a :class:`Numbered` request's batches first (see :meth:`plan`),
        await the parts' answers, settle their batches, and write the client's
        answer (a ProduceResponse body at the request's version; ``endpoints``:
        see :func:`.idempotent_plan.idempotent_answer_bytes`)."""
        if isinstance(written, Numbered):
            numbered = written
            # From numbering to the last write nothing may be cut short (see
            # _plan_locked).
            with trio.CancelScope(shield=True):
                written = await self._write_numbered(ctx, body, numbered, deadline)
        assert not isinstance(written, Numbered)
        session = self.sequences.get(plan.producer_id)
        version = ctx.api_version
        stale: set[str] = set()
        template = None
        for group, waiter in written:
            answer, error = await produce_answer(
                self._pool(ctx),
                waiter,
                deadline,
                version,
                partial(_failed_part, body, group, version),
            )
            # A batch held back is flow control (counted as batches_held).
            if error is not None and not isinstance(error, HeldBack):
                self.stats.parts_failed += 1
            template = template or answer
            stale |= learn_leaders(self.topics, answer)
            got = answer.partitions
            for u in group:
                await self._settle_one(ctx, session, u, got.get((u.topic, u.partition)), deadline)
        if stale:
            self.refresh(stale)
        for u in plan.waits:
            if u.slot is not None:
                with trio.move_on_at(deadline):
                    await u.slot.wait()
        # A client batch's outcome also waits for the client's earlier batch of
        # its partition (:meth:`.ClientBatch.outcome`), written by an earlier
        # request whose answers come in their own time.
        with trio.move_on_at(deadline):
            for _, entries in plan.answers:
                for _, entry in entries:
                    while not isinstance(entry, ErrorCode) and (
                        waiting := [
                            u.slot
                            for u in entry.unanswered()
                            if isinstance(u.slot, trio.Event) and not u.slot.is_set()
                        ]
                    ):
                        await waiting[0].wait()
        return idempotent_answer_bytes(plan, template, version, ctx.client_software, endpoints)

    async def _settle_one(
        self,
        ctx: FilterContext,
        session: Session | None,
        u: Upstream,
        p: PartitionAnswer | None,
        deadline: float,
    ) -> None:
        try:
            if session is None or u.state is not State.SENT:
                return
            if p is None:
                session.settle(u, ErrorCode.NETWORK_EXCEPTION, message="no answer for the batch")
                return
            error = ErrorCode(p.error_code)
            if error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                last = await self._last_sequence(ctx, session, u.topic, u.partition, deadline)
                if last is not None and last >= u.last_sequence:
                    error = ErrorCode.NONE  # written before; the answer had been lost
            session.settle(
                u,
                error,
                message=p.error_message,
                base_offset=p.base_offset if not p.error_code else -1,
                log_append_time_ms=p.log_append_time_ms,
                log_start_offset=p.log_start_offset,
                retriable=error.retriable or error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
            )
        finally:
            if isinstance(u.slot, trio.Event):
                u.slot.set()

    # -- asking the cluster ------------------------------------------------------------------

    async def _request(
        self, node: int, ctx: FilterContext, key: int, version: int, body: Any, deadline: float
    ) -> Any:
        try:
            waiter = await self._pool(ctx).send(node, ctx.client_id, key, version, body)
            frame = await self._pool(ctx).wait(waiter, deadline)
            return protocol.decode_response(frame, key, version)[1]
        except (UpstreamError, DecodeError, TrafkaError) as exc:
            raise Preparation(f"broker {node}: {exc}") from None

    async def _last_sequence(
        self, ctx: FilterContext, session: Session, topic: str, partition: int, deadline: float
    ) -> int | None:
        """The producer's last sequence at the partition's leader, at its epoch
        (-1: none); None when the leader cannot tell."""
        leader = self.topics.leader(topic, partition)
        request = dp.DescribeProducersRequest(
            topics=[
                dp.DescribeProducersRequest.TopicRequest(name=topic, partition_indexes=[partition])
            ]
        )
        self.stats.sequence_lookups += 1
        try:
            answer = await self._request(leader, ctx, _DESCRIBE, 0, request, deadline)
        except Preparation:
            return None
        for t in answer.topics:
            for p in t.partitions:
                if p.error_code:
                    return None
                for s in p.active_producers:
                    if s.producer_id == session.producer_id:
                        return s.last_sequence if s.producer_epoch == session.epoch else -1
        return -1

    async def _sync(
        self, ctx: FilterContext, session: Session, topic: str, partition: int, deadline: float
    ) -> None:
        journaled = (
            ()
            if self.journal is None
            else self.journal.placements(session.producer_id, session.epoch)
        )
        if not session.born:
            try:
                # A shared journal's claims order the instances instead.
                shared = self.journal is not None and self.journal.shared
                routed_elsewhere = bool(journaled) and not shared
                await self._grace.before_sync(
                    session.producer_id, session.epoch, routed_elsewhere, deadline
                )
            except GraceOutlasts as exc:
                raise Preparation(str(exc)) from None
        last = await self._last_sequence(ctx, session, topic, partition, deadline)
        if last is None:
            raise Preparation(
                f"the leader of {topic}-{partition} did not tell the producer's state"
            )
        # Placements journaled by an earlier proxy whose numbers here the
        # leader lacks are journaled again (that target not written) in the
        # journal write before this target's next write (see Sequences.synced).
        Sequences.synced(
            session, topic, partition, last, session.epoch if last >= 0 else -1, journaled
        )

    async def _add_to_txn(
        self,
        ctx: FilterContext,
        body: Any,
        pid: int,
        epoch: int,
        targets: set[tuple[str, int]],
        deadline: float,
    ) -> None:
        txn = self._txn(body.transactional_id, pid, epoch)
        missing = sorted(targets - txn.partitions)
        if not missing:
            return
        by_topic: dict[str, list[int]] = {}
        for topic, partition in missing:
            by_topic.setdefault(topic, []).append(partition)
        request = apt.AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=body.transactional_id,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[
                apt.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=t, partitions=ps)
                for t, ps in by_topic.items()
            ],
        )
        delay = 0.02
        while True:
            if txn.coordinator < 0:
                txn.coordinator = await self._find_coordinator(ctx, body.transactional_id, deadline)
            answer = await self._request(
                txn.coordinator, ctx, ApiKey.ADD_PARTITIONS_TO_TXN, 3, request, deadline
            )
            errors = {
                ErrorCode(p.partition_error_code)
                for t in answer.results_by_topic_v3_and_below
                for p in t.results_by_partition
                if p.partition_error_code
            } | ({ErrorCode(answer.error_code)} if answer.error_code else set())
            if not errors:
                txn.partitions.update(missing)
                return
            if not errors <= _COORDINATOR_RETRY | {ErrorCode.OPERATION_NOT_ATTEMPTED}:
                error = min(errors - {ErrorCode.OPERATION_NOT_ATTEMPTED})
                raise Preparation(f"adding {missing} to the transaction: {error.name}", error)
            if errors & {ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE}:
                txn.coordinator = -1
            if trio.current_time() + delay > deadline:
                raise Preparation(
                    f"adding {missing} to the transaction: {sorted(e.name for e in errors)}"
                )
            await trio.sleep(delay)
            delay = min(delay * 2, 0.5)

    async def _find_coordinator(self, ctx: FilterContext, tid: str, deadline: float) -> int:
        for node in self.nodes():
            try:
                find = fc.FindCoordinatorRequest(key=tid, key_type=1)
                answer = await self._request(node, ctx, ApiKey.FIND_COORDINATOR, 1, find, deadline)
            except Preparation:
                continue
            if not answer.error_code and answer.node_id >= 0:
                return int(answer.node_id)
        raise Preparation(f"no coordinator found for transactional id {tid!r}")


def _failed_part(
    body: Any, group: list[Upstream], version: int, code: ErrorCode, message: str
) -> ProduceAnswer:
    return failed_part(upstream_body(body, group), version, code, message)


def _journaled_targets(
    journal: PlacementJournal, session: Session, body: Any, headers: Headers | None = None
) -> set[tuple[str, int]]:
    """The targets of the request's batches the session does not know but the
    journal does (``headers``: as :func:`~.idempotent_plan.read_batches` read
    them, its one batch per partition not read again)."""
    out: set[tuple[str, int]] = set()
    pid, epoch = session.producer_id, session.epoch
    ones = None if headers is None else headers.batches
    for i, t in enumerate(body.topic_data):
        for j, p in enumerate(t.partition_data):
            if ones is not None:
                firsts: Any = (ones[i][j],)
            else:
                firsts = iter_batches(p.records or b"")
            for header, _ in firsts:
                base = getattr(header, "base_sequence", -1)
                if base >= 0 and session.known(t.name, p.index, base) is None:
                    placement = journal.lookup((pid, epoch, t.name, p.index, base))
                    if placement is not None:
                        out.update((t.name, x) for x, _ in placement.targets)
                break
    return out


def _session(
    ctx: FilterContext,
    sequences: Sequences,
    grace: SyncGrace,
    journal: PlacementJournal | None,
    pid: int,
    epoch: int,
) -> Session | None:
    """The producer's session (None: ``epoch`` is older than its newest); with
    the sibling workers' journals, not one they have written past."""
    peers = journal if isinstance(journal, PeersJournal) else None
    if peers is not None and _came_back(ctx, peers, sequences, pid, epoch):
        grace.moved(pid, epoch)
    session = sequences.session(pid, epoch, int(trio.current_time() * 1000))
    if session is not None and peers is not None and session.peer_writes < 0:
        session.peer_writes = peers.peer_writes(pid, epoch, read=False)
        # Born here, written by a sibling (the client's Metadata came from
        # there): its sequences are the leaders' to tell, not 0.
        session.born = session.born and not peers.peers_placed(pid, epoch)
    return session


def _came_back(
    ctx: FilterContext, peers: PeersJournal, sequences: Sequences, pid: int, epoch: int
) -> bool:
    """At the producer's first request on a client connection, drop its
    state here (True) if a sibling worker journaled placements of it since
    that state was made: the client moved there and back (see :mod:`.journal_peers`)."""
    seen = ctx.state.setdefault("trafka.peers_read", set())
    if (pid, epoch) in seen:
        return False
    if len(seen) >= _PRODUCERS_PER_CONNECTION:
        seen.clear()
    seen.add((pid, epoch))
    writes = peers.peer_writes(pid, epoch)
    session = sequences.get(pid)
    if session is None or session.epoch != epoch or session.peer_writes in (-1, writes):
        return False
    log.info(
        "producer %d was routed by another worker since it was here: "
        "its sequences are asked of the leaders again",
        pid,
    )
    sequences.forget(pid)
    return True


def _fresh_slot(u: Upstream) -> None:
    """Give ``u`` an unset event for its next answer, keeping one not yet set
    (a retry of its client batch may wait for it already)."""
    if not isinstance(u.slot, trio.Event) or u.slot.is_set():
        u.slot = trio.Event()


def _by_leader(batches: list[Upstream], topics: Topics) -> dict[int, list[Upstream]]:
    out: dict[int, list[Upstream]] = {}
    for u in batches:
        out.setdefault(topics.leader(u.topic, u.partition), []).append(u)
    return out


def _all_failed(body: Any, code: ErrorCode, message: str | None = None) -> Any:
    return failed_answer(body, code, message or code.message)


def _added(answer: Any) -> set[tuple[str, int]]:
    """The partitions an AddPartitionsToTxn answer (v3 and below) added without
    error. Not those the request named: until then, or with an error such as
    CONCURRENT_TRANSACTIONS, Kafka's leaders refuse a transactional write there
    (KIP-890's verification)."""
    return {
        (t.name, r.partition_index)
        for t in answer.results_by_topic_v3_and_below
        for r in t.results_by_partition
        if not r.partition_error_code
    }
