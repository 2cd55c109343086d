"""A model of a routed idempotent producer's whole path, without sockets: a
librdkafka-like client, the proxy's real planning and sequence code
(:func:`~trafka.proxy.idempotent_plan.prepare_idempotent`,
:func:`~trafka.proxy.idempotent_plan.commit_idempotent`, :class:`~trafka.proxy.sequences.Session`,
the answer builders, the journal's recovery path) driven the way
:mod:`trafka.proxy.exactly_once` drives it, and upstream brokers modelled as
per-partition logs with Kafka's idempotent producer rules.

Every step is picked from a tape of integers (``choose``), so a failing run
is replayed, and shrunk, from its tape; :attr:`World.trace` says what happened.

The brokers (Kafka's ``ProducerStateManager``, as brokerlite has it):

* a batch whose first and last sequence equal one of the producer's last five
  written there is a retry: answered with no error and the original base
  offset, nothing written;
* with state for the producer, a batch whose first sequence does not follow the
  last is OUT_OF_ORDER_SEQUENCE_NUMBER; without state (a new producer, or state
  expired) any sequence is taken (KIP-360);
* a batch holding a record too large (its value ends with ``!``) is
  MESSAGE_TOO_LARGE, before any sequence check; a partition may answer a
  retriable error (NOT_ENOUGH_REPLICAS) and write nothing.

Connections: one per leader at a time, its requests applied in order; a cut
connection applied some of its queued requests (their answers lost) and lost
the rest. The client (librdkafka's rules): one connection to the proxy,
answers in request order; per partition at most five batches in flight, sent
in sequence order; a batch answered with a retriable error is sent again with
the same sequence and bytes; a batch's success acknowledges the earlier ones of
its partition not yet acknowledged (implicit acknowledgement), with no offset;
record ``i`` of a batch answered with base offset ``b >= 0`` is at ``b + i``.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from proxy_helpers import request

from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.records import decode_batch, encode_batch, read_batch_header
from trafka.proxy.keyrouting.exactly_once import _journaled_targets
from trafka.proxy.keyrouting.idempotent_plan import (
    IdempotentPlan,
    commit_idempotent,
    idempotent_answer_bytes,
    prepare_idempotent,
    read_batches,
)
from trafka.proxy.keyrouting.sequences import Placement, PlacementKey, Sequences, State, Upstream
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.topics import Topics

TOPIC = "orders"
PARTITIONS = 3
LEADERS = {0: 1, 1: 2, 2: 1}
PID, EPOCH = 4242, 0
VERSION = 9
KEYS = [b"key-%d" % i for i in range(12)]
IN_FLIGHT = 5  # librdkafka's max.in.flight with idempotence
RETAINED = 5  # batches a broker remembers per producer and partition


class Violation(AssertionError):
    """An invariant broke; the message says which, and the trace what led there."""


# -- the brokers --------------------------------------------------------------------------


@dataclass
class ProducerState:
    last: int
    batches: list[tuple[int, int, int]]  # (first sequence, last sequence, base offset)


@dataclass
class Partition:
    log: list[bytes] = field(default_factory=list)  # record values; the offset is the index
    state: ProducerState | None = None


@dataclass
class Sent:
    """An upstream Produce on a connection."""

    link: int
    leader: int
    batches: list[Upstream]
    datas: list[tuple[int, bytes]]
    refuse: set[int]  # partitions answering NOT_ENOUGH_REPLICAS
    answer: dict[int, tuple[ErrorCode, int]] | None = None  # partition -> (error, base offset)
    lost: bool = False  # the connection broke before its answer came
    timed_out: bool = False  # the proxy stopped waiting


class Brokers:
    def __init__(self) -> None:
        self.parts = {p: Partition() for p in range(PARTITIONS)}

    def append(self, partition: int, data: bytes, refuse: bool) -> tuple[ErrorCode, int]:
        header = read_batch_header(data)
        values = [r.value for r in decode_batch(data).records]
        if any(v.endswith(b"!") for v in values):
            return ErrorCode.MESSAGE_TOO_LARGE, -1
        if refuse:
            return ErrorCode.NOT_ENOUGH_REPLICAS, -1
        part = self.parts[partition]
        first = header.base_sequence
        last = first + len(values) - 1
        state = part.state
        if state is not None:
            for f, ll, base in state.batches:
                if (f, ll) == (first, last):
                    return ErrorCode.NONE, base  # a retry: the original's offset
            if first != state.last + 1:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, -1
        base = len(part.log)
        part.log.extend(values)
        if state is None:
            state = part.state = ProducerState(last, [])
        state.last = last
        state.batches = [*state.batches, (first, last, base)][-RETAINED:]
        return ErrorCode.NONE, base

    def last_sequence(self, partition: int) -> int:
        state = self.parts[partition].state
        return -1 if state is None else state.last


# -- the client ---------------------------------------------------------------------------


@dataclass(eq=False)
class Batch:
    partition: int
    sequence: int
    values: list[bytes]
    data: bytes
    state: str = "queued"  # queued, flight, retry, done, failed
    offset: int | None = None  # the base offset it was answered with (done)
    sends: int = 0


# -- the proxy's side of one client request -----------------------------------------------


@dataclass(eq=False)
class ProxyRequest:
    body: Any
    batches: list[Batch]
    plan: IdempotentPlan | None = None
    written: list[tuple[list[Upstream], Sent | ErrorCode]] = field(default_factory=list)
    settled: bool = False
    answer: bytes | None = None


class World:
    """The client, the proxy and the brokers; ``choose(n)`` picks 0..n-1.

    Options: ``journal`` (the proxy's placement journal), ``restarts`` (how many
    proxy restarts at most), ``state_loss`` (a leader forgets the producer while
    it is idle: Kafka's own hazard, see the test), ``too_large`` (some records
    too large: their upstream batches are refused for good), ``ghosts`` (a
    restart leaves some of the dead proxy's writes in the network, *ghosts*,
    which a broker applies at a later step), ``grace`` (the restarted proxy
    waits its restart grace before it first asks a leader: every ghost lands
    before that, which is what the grace is for; without it a ghost may land
    after the proxy asked).
    """

    def __init__(
        self,
        choose: Callable[[int], int],
        *,
        journal: bool,
        restarts: int = 1_000,
        state_loss: bool = False,
        too_large: bool = True,
        ghosts: bool = False,
        grace: bool = True,
    ) -> None:
        self.choose = choose
        self.with_ghosts = ghosts
        self.grace = grace
        # The dead proxies' writes still in the network, oldest first: (leader, write).
        self.ghosts: list[tuple[int, Sent]] = []
        # Whether the proxy has asked a leader since its last restart (its grace over).
        self.asked = False
        self.journaled = journal
        self.restarts = restarts
        self.state_loss = state_loss
        self.too_large = too_large
        self.brokers = Brokers()
        self.topics = Topics({TOPIC: PARTITIONS}, {(TOPIC, p): LEADERS[p] for p in LEADERS})
        self.stats = RouteStats()
        self.journal: dict[PlacementKey, Placement] = {}
        self.sequences = Sequences(journaled=journal)
        self.sequences.born(PID, EPOCH)
        self.links: dict[int, int] = {}  # leader -> its connection's serial
        self.serials = itertools.count(1)
        self.queues: dict[int, list[Sent]] = {leader: [] for leader in set(LEADERS.values())}
        self.requests: list[ProxyRequest] = []  # in the client's order
        self.batches: dict[int, list[Batch]] = {p: [] for p in range(PARTITIONS)}
        self.next_sequence = dict.fromkeys(range(PARTITIONS), 0)
        self.values = itertools.count()
        self.trace: list[str] = []
        # Values of batches outstanding at a restart without a journal: the
        # only ones that may be written twice.
        self.may_repeat: set[bytes] = set()
        self.said_failed: set[bytes] = set()
        self.restarted = 0
        self.faults = True  # off while draining

    # -- the client ---------------------------------------------------------------------------

    def produce(self) -> None:
        p = self.choose(PARTITIONS)
        n = 1 + self.choose(6)
        huge = self.choose(12) == 0 and self.too_large
        records = []
        for i in range(n):
            value = b"v%d" % next(self.values)
            if huge and i == n - 1:
                value += b"!"
            records.append((1_000 + i, KEYS[self.choose(len(KEYS))], value, []))
        seq = self.next_sequence[p]
        self.next_sequence[p] += n
        data = encode_batch(records, producer_id=PID, producer_epoch=EPOCH, base_sequence=seq)
        self.batches[p].append(Batch(p, seq, [r[2] for r in records], data))
        self.trace.append(f"client: batch p{p} seq {seq} x{n}{' (too large)' if huge else ''}")

    def sendable(self, p: int) -> Batch | None:
        """The partition's next batch to send: the lowest unsent, behind every
        batch in flight (never out of sequence order)."""
        flight = [b for b in self.batches[p] if b.state == "flight"]
        if len(flight) >= IN_FLIGHT:
            return None
        todo = [b for b in self.batches[p] if b.state in ("queued", "retry")]
        if not todo:
            return None
        first = todo[0]
        if any(b.sequence > first.sequence for b in flight):
            return None  # librdkafka drains the partition before a retry
        return first

    def send(self) -> None:
        ready = [b for p in range(PARTITIONS) if (b := self.sendable(p)) is not None]
        if not ready:
            return
        # A request holds one batch per partition: some of the ready ones.
        mask = 1 + self.choose((1 << len(ready)) - 1)
        chosen = [b for i, b in enumerate(ready) if mask >> i & 1]
        for b in chosen:
            b.state = "flight"
            b.sends += 1
        body = request({b.partition: [b.data] for b in chosen})
        self.trace.append(
            "client: sends " + ", ".join(f"p{b.partition} seq {b.sequence}" for b in chosen)
        )
        req = ProxyRequest(body, chosen)
        self.requests.append(req)
        self.plan(req)

    def receive(self) -> None:
        """The proxy's answer to the client's oldest request, if ready."""
        if not self.requests or self.requests[0].answer is None:
            return
        req = self.requests.pop(0)
        assert req.answer is not None
        read = protocol.decode_response_body(0, VERSION, req.answer)
        got = {
            p.index: (p.error_code, p.base_offset)
            for t in read.responses
            for p in t.partition_responses
        }
        notes = []
        for b in req.batches:
            code, base = got[b.partition]
            error = ErrorCode(code)
            notes.append(f"p{b.partition} seq {b.sequence}: {error.name} {base}")
            if b.state != "flight":
                continue
            if error is ErrorCode.NONE:
                b.state, b.offset = "done", base
                for earlier in self.batches[b.partition]:
                    if earlier.sequence < b.sequence and earlier.state in (
                        "queued",
                        "retry",
                        "flight",
                    ):
                        earlier.state, earlier.offset = "done", -1  # implicitly acknowledged
            elif error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER and any(
                e.state == "failed" and e.sequence < b.sequence for e in self.batches[b.partition]
            ):
                # A gap of the client's own (an earlier batch failed for good):
                # a broker says the same; librdkafka gives the batch up.
                b.state = "failed"
                self.said_failed.update(b.values)
            elif error.retriable or error in (
                ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                ErrorCode.REQUEST_TIMED_OUT,
                ErrorCode.NETWORK_EXCEPTION,
            ):
                b.state = "retry"
            else:
                b.state = "failed"
                self.said_failed.update(b.values)
        self.trace.append("client: answered " + "; ".join(notes))

    # -- the proxy (as exactly_once.ExactlyOnce drives the plan) ------------------------------

    def sync(self, session: Any, partition: int) -> None:
        last = self.last_sequence(partition)
        journaled = list(self.journal.items()) if self.journaled else []
        Sequences.synced(session, TOPIC, partition, last, EPOCH if last >= 0 else -1, journaled)

    def last_sequence(self, partition: int) -> int:
        """DescribeProducers, on the leader's connection: behind what is queued
        there (and, with the grace, behind every ghost: it waited for them)."""
        if self.grace and self.ghosts and not self.asked:
            self.trace.append("proxy: waits its restart grace")
            while self.ghosts:
                self.land_ghost()
        self.asked = True
        self.flush(LEADERS[partition])
        return self.brokers.last_sequence(partition)

    def plan(self, req: ProxyRequest) -> None:
        session = self.sequences.session(PID, EPOCH, 0)
        assert session is not None
        recovered = None
        headers = read_batches(req.body)  # as the filter reads them, once
        if self.journaled:
            journal = _Lookup(self.journal)
            targets = _journaled_targets(journal, session, req.body, headers)
            for _, x in Sequences.unsynced(session, targets):
                self.sync(session, x)

            def recovered(topic: str, partition: int, base: int) -> Placement | None:
                return self.journal.get((PID, EPOCH, topic, partition, base))

        prepared = prepare_idempotent(
            req.body,
            session=session,
            topics=self.topics,
            hash_name="murmur2",
            stats=self.stats,
            recovered=recovered,
            headers=headers,
        )
        assert prepared is not None
        for _, x in Sequences.unsynced(session, prepared.targets):
            self.sync(session, x)
        plan = req.plan = commit_idempotent(req.body, prepared, session)
        if self.journaled:  # one journal write, before anything is written
            self.journal.update(session.take_stale())
            for b in session.take_journal():
                self.journal[(PID, EPOCH, b.topic, b.partition, b.base_sequence)] = b.placement()
        for batches in plan.rounds:
            by_leader: dict[int, list[Upstream]] = {}
            for u in batches:
                by_leader.setdefault(LEADERS[u.partition], []).append(u)
            for leader, group in by_leader.items():
                self.write(session, req, leader, group)
        self.trace.append(
            "proxy: writes "
            + ", ".join(
                f"p{u.partition}[{u.base_sequence}..{u.last_sequence}]"
                + ("" if isinstance(w, Sent) else " (held)")
                for group, w in req.written
                for u in group
            )
        )

    def write(self, session: Any, req: ProxyRequest, leader: int, group: list[Upstream]) -> None:
        link = self.links.get(leader)
        if link is None:
            link = self.links[leader] = next(self.serials)
        group = [u for u in group if u.state is not State.ACKED]
        held = [u for u in group if not session.in_order(u, link)]
        for u in held:
            session.sent(u)
        if held:
            req.written.append((held, ErrorCode.NETWORK_EXCEPTION))
        todo = [u for u in group if u not in held]
        if todo:
            for u in todo:
                session.sent(u, link)
            assert all(u.data is not None for u in todo)
            sent = Sent(
                link,
                leader,
                todo,
                [(u.partition, u.data) for u in todo if u.data is not None],
                {u.partition for u in todo if self.faults and self.choose(8) == 0},
            )
            self.queues[leader].append(sent)
            req.written.append((todo, sent))

    def settle(self, req: ProxyRequest, *, deadline: bool = False) -> None:
        """The request's parts answered (``deadline``: those unanswered time out)."""
        session = self.sequences.get(PID)
        notes: list[str] = []
        for group, w in req.written:
            if isinstance(w, ErrorCode):
                answers = {u.partition: (w, -1) for u in group}
            elif w.answer is not None and not w.timed_out:
                answers = w.answer
            elif w.lost:
                answers = {u.partition: (ErrorCode.NETWORK_EXCEPTION, -1) for u in group}
            else:
                assert deadline
                w.timed_out = True
                answers = {u.partition: (ErrorCode.REQUEST_TIMED_OUT, -1) for u in group}
            for u in group:
                if session is None or u.state is not State.SENT:
                    continue
                error, base = answers[u.partition]
                if error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER:
                    last = self.last_sequence(u.partition)
                    if last >= u.last_sequence:
                        error = ErrorCode.NONE
                was = f"p{u.partition}[{u.base_sequence}..{u.last_sequence}]"
                session.settle(
                    u,
                    error,
                    base_offset=base if answers[u.partition][0] is ErrorCode.NONE else -1,
                    retriable=error.retriable or error is ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
                )
                notes.append(f"{was} {error.name}: {u.state.name}")
        self.trace.append("proxy: settles " + ", ".join(notes))
        req.settled = True

    def ready(self, req: ProxyRequest) -> bool:
        return all(
            isinstance(w, ErrorCode) or w.answer is not None or w.lost for _, w in req.written
        )

    def finish(self, *, deadline: bool = False) -> None:
        """Write the answer of every settled request nothing it waits for is
        unanswered for (``deadline``: the oldest's, whatever it waits for)."""
        for i, req in enumerate(self.requests):
            if req.answer is not None or not req.settled:
                continue
            assert req.plan is not None
            waiting = any(
                not isinstance(entry, ErrorCode) and entry.unanswered()
                for _, entries in req.plan.answers
                for _, entry in entries
            )
            if waiting and not (deadline and i == 0):
                continue
            req.answer = idempotent_answer_bytes(req.plan, None, VERSION, "librdkafka")

    # -- the connections ----------------------------------------------------------------------

    def deliver(self, leader: int) -> None:
        """The leader applies the oldest request on its connection and answers it."""
        queue = self.queues[leader]
        if not queue:
            return
        sent = queue.pop(0)
        sent.answer = {p: self.brokers.append(p, data, p in sent.refuse) for p, data in sent.datas}
        self.trace.append(
            f"broker {leader}: "
            + ", ".join(f"p{p} {e.name} {b}" for p, (e, b) in sent.answer.items())
        )

    def flush(self, leader: int) -> None:
        while self.queues[leader]:
            self.deliver(leader)

    def cut(self, leader: int) -> None:
        """The leader's connection breaks: it had read the first ``k`` queued
        requests (and wrote them), their answers are lost; the rest are lost."""
        queue = self.queues[leader]
        k = self.choose(len(queue) + 1)
        for sent in queue[:k]:
            for p, data in sent.datas:
                self.brokers.append(p, data, p in sent.refuse)
        for sent in queue:
            sent.lost = True
        self.trace.append(
            f"cut broker {leader}: {k} of {len(queue)} queued requests written, answers lost"
        )
        self.queues[leader] = []
        self.links.pop(leader, None)

    def restart(self) -> None:
        """The proxy restarts: its sessions, connections and client requests gone
        (with ``ghosts``, the last of a connection's queued writes may stay in
        the network, applied by the broker later: :meth:`land_ghost`)."""
        for leader in list(self.queues):
            queue = self.queues[leader]
            if self.with_ghosts and queue:
                # The connection's last writes are still on their way.
                k = self.choose(len(queue) + 1)
                kept = queue[len(queue) - k :]
                for sent in kept:
                    sent.lost = True
                    self.ghosts.append((leader, sent))
                self.queues[leader] = queue[: len(queue) - k]
                if k:
                    self.trace.append(f"broker {leader}: {k} writes of the dead proxy on their way")
            if self.queues[leader]:
                self.cut(leader)
        self.links.clear()
        for req in self.requests:
            for b in req.batches:
                if b.state == "flight":
                    b.state = "retry"
        self.requests = []
        if not self.journaled:
            for batches in self.batches.values():
                for b in batches:
                    if b.state not in ("done", "failed"):
                        self.may_repeat.update(b.values)
        self.sequences = Sequences(journaled=self.journaled)
        self.asked = False
        self.restarted += 1
        self.trace.append(f"proxy restarts ({'with' if self.journaled else 'without'} its journal)")

    def land_ghost(self) -> None:
        """A broker applies the oldest write of a dead proxy (its answer goes nowhere)."""
        if not self.ghosts:
            return
        leader, sent = self.ghosts.pop(0)
        got = {p: self.brokers.append(p, data, p in sent.refuse) for p, data in sent.datas}
        self.trace.append(
            f"broker {leader}: a dead proxy's write lands: "
            + ", ".join(
                f"p{p}[{read_batch_header(data).base_sequence}..] {got[p][0].name} {got[p][1]}"
                for p, data in sent.datas
            )
        )

    def lose_state(self) -> None:
        """A leader forgets the producer (its state expired while it was idle)."""
        if any(b.state not in ("done", "failed") for bs in self.batches.values() for b in bs):
            return
        if any(self.queues.values()):
            return
        p = self.choose(PARTITIONS)
        self.brokers.parts[p].state = None
        self.trace.append(f"broker: p{p} forgets the producer")

    # -- one step -----------------------------------------------------------------------------

    def step(self, *, faults: bool = True) -> None:
        kinds: list[Callable[[], None]] = [
            self.produce,
            self.send,
            self.send,
            self.receive,
            self.receive,
            lambda: self.deliver(self.pick_leader()),
            lambda: self.deliver(self.pick_leader()),
            lambda: self.deliver(self.pick_leader()),
            self.settle_one,
            self.settle_one,
        ]
        if faults:
            kinds += [lambda: self.cut(self.pick_leader()), self.timeout]
            if self.restarted < self.restarts:
                kinds.append(self.restart)
            if self.state_loss:
                kinds.append(self.lose_state)
            if self.ghosts:
                kinds.append(self.land_ghost)
        kinds[self.choose(len(kinds))]()
        self.finish()
        self.check()

    def pick_leader(self) -> int:
        leaders = sorted(self.queues)
        return leaders[self.choose(len(leaders))]

    def settle_one(self) -> None:
        ready = [r for r in self.requests if not r.settled and self.ready(r)]
        if ready:
            self.settle(ready[self.choose(len(ready))])

    def timeout(self) -> None:
        """The oldest request's deadline passes."""
        if not self.requests or self.requests[0].answer is not None:
            return
        req = self.requests[0]
        self.trace.append("proxy: the oldest request's deadline passes")
        if not req.settled:
            self.settle(req, deadline=True)
        self.finish(deadline=True)

    def quiet(self) -> bool:
        """Nothing left to do: every batch answered for good."""
        return not self.requests and all(
            b.state in ("done", "failed") for bs in self.batches.values() for b in bs
        )

    def drain(self, steps: int = 3_000) -> None:
        """No more faults nor batches: everything in flight ends."""
        self.faults = False
        while self.ghosts:
            self.land_ghost()
        for _ in range(steps):
            if self.quiet():
                return
            for leader in self.queues:
                self.flush(leader)
            for req in list(self.requests):
                if not req.settled and self.ready(req):
                    self.settle(req)
            self.finish()
            self.receive()
            self.send()
            self.check()
        raise Violation("the producer never finished: " + self.describe_pending())

    def describe_pending(self) -> str:
        return ", ".join(
            f"p{b.partition} seq {b.sequence} {b.state}"
            for bs in self.batches.values()
            for b in bs
            if b.state not in ("done", "failed")
        )

    # -- invariants ---------------------------------------------------------------------------

    def check(self) -> None:
        where: dict[bytes, list[tuple[int, int]]] = {}
        for p, part in self.brokers.parts.items():
            for offset, value in enumerate(part.log):
                where.setdefault(value, []).append((p, offset))
        for bs in self.batches.values():
            for b in bs:
                if b.state != "done":
                    continue
                for i, value in enumerate(b.values):
                    if value not in where:
                        raise Violation(
                            f"p{b.partition} seq {b.sequence} said written, record {i} "
                            f"({value!r}) is in no log"
                        )
                    if b.offset is not None and b.offset >= 0:
                        at = (b.partition, b.offset + i)
                        log = self.brokers.parts[b.partition].log
                        found = log[at[1]] if at[1] < len(log) else None
                        if found != value:
                            raise Violation(
                                f"p{b.partition} seq {b.sequence} record {i} ({value!r}) "
                                f"reported at offset {at[1]}, which holds {found!r}"
                            )
        twice = [v for v, at in where.items() if len(at) > 1 and v not in self.may_repeat]
        if twice:
            raise Violation(f"written twice: {twice[:5]} at {[where[v] for v in twice[:5]]}")


class _Lookup:
    """The journal as :func:`~trafka.proxy.exactly_once._journaled_targets` reads it."""

    def __init__(self, entries: dict[PlacementKey, Placement]) -> None:
        self.entries = entries

    def lookup(self, key: PlacementKey) -> Placement | None:
        return self.entries.get(key)


def run(tape: list[int], *, journal: bool, **options: Any) -> World:
    """Play ``tape`` (each choice taken from it, 0 past its end) step by step
    until it is used up, then drain."""
    position = [0]

    def choose(n: int) -> int:
        i = position[0]
        position[0] += 1
        return tape[i] % n if i < len(tape) else 0

    world = World(choose, journal=journal, **options)
    try:
        while position[0] < len(tape):
            world.step()
        world.drain()
    except Violation as exc:
        raise Violation(f"{exc}\nafter these events:\n  " + "\n  ".join(world.trace)) from None
    return world
