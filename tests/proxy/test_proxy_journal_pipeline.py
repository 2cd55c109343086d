"""Journal writes pipelined (proxy/journal_pipeline.py): the exactly-once
driver against one brokerlite, with a journal whose writes the test
acknowledges or fails by hand, and every Produce the driver writes upstream
counted on its pooled connection (whose answers the test can hold back).

Requests of one idempotent producer, their records keyed to one partition
(so that their upstream batches are consecutive sequences of one partition,
the case KIP-98's ordering is about): a request is numbered and handed to
the journal while the earlier one's journal write is under way; a batch is
never written upstream before the journal write that holds its placement,
at the numbers it is written with, is acknowledged, and a failed journal
write leaves nothing written (the client hears a retriable error and
retries; every record lands once, in order).

Until a partition's leader has acknowledged one of the producer's batches,
the proxy keeps one batch of it in flight (KIP-360: a leader without the
producer's state takes any sequence); the pipelining tests warm the target
up first (:meth:`Rig.warm`), and two tests are about the batches held before.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import anyio
import pytest
import trio
import trio.testing
from proxy_helpers import fresh, placement
from test_proxy_cut_moments import KEYS, PARTITIONS, TARGET, CutOnce, produce_request

from trafka.brokerlite import RunningBroker
from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as ip
from trafka.codec.records import encode_batch
from trafka.proxy.filters import FilterContext
from trafka.proxy.keyrouting.exactly_once import ExactlyOnce, Numbered
from trafka.proxy.keyrouting.journal import (
    DirectoryJournal,
    JournalError,
    JournalFenced,
    PlacementJournal,
)
from trafka.proxy.keyrouting.sequences import Placement, PlacementKey
from trafka.proxy.keyrouting.stats import RouteStats
from trafka.proxy.pool import UpstreamPool
from trafka.proxy.topics import Topics
from trafka.sdk import NewTopic, open_admin
from trafka.sdk.partitioners import murmur2_partition

N = 50  # records a client batch
W = 5  # records of the warm-up batch (client partition 2, sequence 0)
OTHER = 0  # a partition other than TARGET
OTHER_KEYS = [
    k for k in (b"o-%d" % i for i in range(200)) if murmur2_partition(k, PARTITIONS) == OTHER
]


def batch(
    pid: int, epoch: int, first: int, n: int, *, sequence: int = 0, keys: list[bytes] = KEYS
) -> bytes:
    """``n`` records (values ``v-first``...), each about 120 bytes, keyed to
    TARGET (or where ``keys`` hash), the client's batch at ``sequence``."""
    records = [
        (1_000 + i, keys[i % len(keys)], b"v-%d-" % i + b"x" * 100, [])
        for i in range(first, first + n)
    ]
    return encode_batch(records, producer_id=pid, producer_epoch=epoch, base_sequence=sequence)


class Counted(CutOnce):
    """A pooled connection that counts the Produce requests written to it
    (and cuts none), and whose answers wait while ``hold[0]`` is an unset event."""

    def __init__(
        self, inner: trio.abc.Stream, produces: list[int], hold: list[trio.Event | None]
    ) -> None:
        super().__init__(inner, [False])
        self.produces = produces
        self.hold = hold

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if bytes(data[4:6]) == b"\x00\x00":  # a Produce's api key
            self.produces[0] += 1
        await super().send_all(data)

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await super().receive_some(max_bytes)
        while (gate := self.hold[0]) is not None:
            await gate.wait()
        return data


class _Group:
    """One journal write: the entries handed while it was open."""

    def __init__(self) -> None:
        self.entries: list[tuple[PlacementKey, Placement]] = []
        self.sealed = False
        self.done = trio.Event()
        self.error: JournalError | None = None

    def ack(self) -> None:
        self.done.set()

    def fail(self, error: JournalError) -> None:
        self.error = error
        self.done.set()

    async def wait(self) -> None:
        await self.done.wait()
        if self.error is not None:
            raise self.error


class GatedJournal:
    """A journal whose writes the test acknowledges or fails: entries handed
    join the open group (a group commit) until the test seals it."""

    shared = False

    def __init__(self) -> None:
        self.groups: list[_Group] = []
        self.entries: dict[PlacementKey, Placement] = {}

    def seal(self) -> _Group:
        self.groups[-1].sealed = True
        return self.groups[-1]

    def lookup(self, key: PlacementKey) -> Placement | None:
        return self.entries.get(key)

    def placements(self, pid: int, epoch: int) -> list[tuple[PlacementKey, Placement]]:
        return [(k, p) for k, p in self.entries.items() if k[:2] == (pid, epoch)]

    def __len__(self) -> int:
        return len(self.entries)

    async def claim(self, pid: int, epoch: int, deadline: float) -> float:
        return 0.0

    async def submit(
        self,
        entries: Iterable[tuple[PlacementKey, Placement]],
        *,
        deadline: float | None = None,
        producer: int | None = None,
    ) -> _Group:
        if not self.groups or self.groups[-1].sealed:
            self.groups.append(_Group())
        group = self.groups[-1]
        for key, value in entries:
            group.entries.append((key, value))
            self.entries[key] = value
        return group

    async def record(
        self,
        entries: Iterable[tuple[PlacementKey, Placement]],
        *,
        deadline: float | None = None,
        producer: int | None = None,
    ) -> None:
        await (await self.submit(entries, deadline=deadline, producer=producer)).wait()

    def close(self) -> None:
        pass


class Rig:
    """The driver on a pool to the broker, a producer id, and its two requests."""

    def __init__(
        self,
        broker: RunningBroker,
        journal: PlacementJournal,
        configs: dict[str, str] | None = None,
    ) -> None:
        self.broker = broker
        self.journal = journal
        self.topic = fresh("pipelined")

        async def setup() -> None:
            async with open_admin(bootstrap_servers=broker.bootstrap_servers) as admin:
                await admin.create_topics([NewTopic(self.topic, PARTITIONS, configs=configs or {})])

        anyio.run(setup, backend="trio")
        self.produces = [0]
        self.hold: list[trio.Event | None] = [None]
        self.stats = RouteStats()
        self.node = broker.config.node_id
        self.ctx = FilterContext(0, 9, 1, "pipelined", None, self.node)
        self.expected: list[range] = []  # the values every record written has, per client batch

    async def start(self, nursery: trio.Nursery) -> None:
        host, port = self.broker.address

        async def connect(node_id: int) -> trio.abc.Stream:
            return Counted(await trio.open_tcp_stream(host, port), self.produces, self.hold)

        self.pool = UpstreamPool(nursery, connect, 1 << 24)
        node, topic = self.node, self.topic
        topics = Topics({topic: PARTITIONS}, {(topic, p): node for p in range(PARTITIONS)})
        self.eos = ExactlyOnce(
            self.pool, topics, self.stats, lambda _: None, lambda: [node], 1 << 24, self.journal
        )
        init = ip.InitProducerIdRequest(
            transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
        )
        waiter = await self.pool.send(node, "pipelined", 22, 4, init)
        answer = protocol.decode_response(
            await self.pool.wait(waiter, trio.current_time() + 10), 22, 4
        )[1]
        assert answer.error_code == 0
        self.eos.init_answered(answer)
        self.producer = (answer.producer_id, answer.producer_epoch)
        # Request A: client partition 0; request B: client partition 1.
        self.bodies = [
            produce_request(topic, {0: batch(*self.producer, 0, N)}),
            produce_request(topic, {1: batch(*self.producer, N, N)}),
        ]
        self.expected += [range(0, N), range(N, 2 * N)]
        self.deadline = trio.current_time() + 20

    async def warm(self) -> None:
        """One batch of the producer written to TARGET and acknowledged: its
        leader holds the producer's state, and the proxy pipelines its batches
        there (see the module's doc)."""
        body = produce_request(self.topic, {2: batch(*self.producer, 1000, W)})
        planned = await self.plan(body)
        if isinstance(self.journal, GatedJournal):
            self.journal.seal().ack()
        answer = await self.eos.settle(self.ctx, body, *planned, self.deadline)
        read = protocol.decode_response_body(0, self.ctx.api_version, answer)
        assert [p.error_code for t in read.responses for p in t.partition_responses] == [0]
        if isinstance(self.journal, GatedJournal):
            self.journal.groups.clear()
        self.produces[0] = 0
        self.expected.append(range(1000, 1000 + W))

    async def plan(self, body: Any) -> tuple[Any, Any]:
        result = await self.eos.plan(self.ctx, body, self.producer, "murmur2", self.deadline)
        assert isinstance(result, tuple)
        return result

    async def settle(self, body: Any, planned: tuple[Any, Any]) -> list[int]:
        answer = await self.eos.settle(self.ctx, body, *planned, self.deadline)
        read = protocol.decode_response_body(0, self.ctx.api_version, answer)
        return [p.error_code for t in read.responses for p in t.partition_responses]

    async def settle_all(
        self, planned: list[tuple[Any, Any]], bodies: list[Any] | None = None
    ) -> list[list[int]]:
        """Settle the requests concurrently (as the proxy answers them)."""
        bodies = self.bodies if bodies is None else bodies
        errors: list[list[int]] = [[] for _ in planned]

        async def settle(i: int) -> None:
            errors[i] = await self.settle(bodies[i], planned[i])

        async with trio.open_nursery() as nursery:
            for i in range(len(planned)):
                nursery.start_soon(settle, i)
        return errors

    async def leader_last(self, partition: int) -> int:
        """The producer's last sequence at ``partition``'s leader (DescribeProducers)."""
        async with open_admin(bootstrap_servers=self.broker.bootstrap_servers) as admin:
            states = await admin.describe_producers([(self.topic, partition)])
        (mine,) = [s for v in states.values() for s in v if s.producer_id == self.producer[0]]
        return int(mine.last_sequence)

    def run(self, steps: Callable[[trio.Nursery], Awaitable[None]], *, warm: bool = True) -> None:
        """Start (and warm up, see :meth:`warm`), run ``steps``, then check
        every record landed once."""

        async def main() -> None:
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    await self.start(nursery)
                    if warm:
                        await self.warm()
                    await steps(nursery)
                    nursery.cancel_scope.cancel()

        trio.run(main)
        self.check_written_once()

    def check_written_once(self) -> None:
        """Every record of the client batches in ``expected`` in its target
        partition once, each client batch's records in its order."""
        records = placement(self.broker.bootstrap_servers, self.topic, PARTITIONS)
        assert {r.partition for r in records} == {
            murmur2_partition(r.key, PARTITIONS) for r in records
        }
        values = [int(r.value.split(b"-")[1]) for r in sorted(records, key=lambda r: r.offset)]
        assert Counter(values) == Counter(v for span in self.expected for v in span)
        for span in self.expected:
            mine = [v for v in values if v in span]
            assert mine == sorted(mine)


def test_a_group_commit_covering_two_requests_releases_both_only_after_its_ack(
    broker: RunningBroker,
) -> None:
    journal = GatedJournal()
    rig = Rig(broker, journal)

    async def steps(nursery: trio.Nursery) -> None:
        # B is numbered and handed to the journal while A's journal
        # write is under way: one write covers both.
        planned = [await rig.plan(body) for body in rig.bodies]
        assert all(isinstance(w, Numbered) for _, w in planned)
        assert len(journal.groups) == 1
        group = journal.seal()
        assert {key[3] for key, _ in group.entries} == {0, 1}
        errors: list[list[int]] = []

        async def settle() -> None:
            errors.extend(await rig.settle_all(planned))

        nursery.start_soon(settle)
        await trio.testing.wait_all_tasks_blocked()
        assert rig.produces[0] == 0  # nothing upstream before the ack
        group.ack()
        while not errors:
            await trio.sleep(0.01)
        assert errors == [[0], [0]]
        assert rig.produces[0] >= 1

    rig.run(steps)


@pytest.mark.parametrize("why", ["failed", "cut", "fenced"])
def test_a_journal_write_that_fails_leaves_no_routed_batch_written(
    broker: RunningBroker, why: str
) -> None:
    """The journal write covering A and B fails (the cluster refused it, the
    journal's connection was cut under it, another proxy owns the producer):
    neither request's batches are written; both are answered
    REQUEST_TIMED_OUT, which the client retries with the same sequences."""
    journal = GatedJournal()
    rig = Rig(broker, journal)
    error = {
        "failed": JournalError("NOT_ENOUGH_REPLICAS"),
        "cut": JournalError("the journal's connection broke"),
        "fenced": JournalFenced("owned by another instance"),
    }[why]

    async def steps(nursery: trio.Nursery) -> None:
        planned = [await rig.plan(body) for body in rig.bodies]
        journal.seal().fail(error)
        errors = await rig.settle_all(planned)
        assert errors == [[ErrorCode.REQUEST_TIMED_OUT]] * 2
        assert rig.produces[0] == 0
        # The client's retries: journaled again, then written.
        planned = [await rig.plan(body) for body in rig.bodies]
        assert len(journal.groups) == 2
        again = journal.seal()
        assert {key[3] for key, _ in again.entries} == {0, 1}
        again.ack()
        assert await rig.settle_all(planned) == [[0], [0]]

    rig.run(steps)


def test_a_later_write_acknowledged_does_not_overtake_an_earlier_that_failed(
    broker: RunningBroker,
) -> None:
    """A and B in two journal writes; A's fails, B's is acknowledged. B's
    batch follows A's in the target partition's sequences: written without
    it, the broker would take it over the gap (KIP-360) or refuse it; it is
    held instead (Session.in_order) and both are retried, in order."""
    journal = GatedJournal()
    rig = Rig(broker, journal)

    async def steps(nursery: trio.Nursery) -> None:
        a = await rig.plan(rig.bodies[0])
        first = journal.seal()
        b = await rig.plan(rig.bodies[1])
        second = journal.seal()
        assert len(journal.groups) == 2
        second.ack()
        errors: list[list[int]] = []

        async def settle() -> None:
            errors.extend(await rig.settle_all([a, b]))

        nursery.start_soon(settle)
        await trio.testing.wait_all_tasks_blocked()
        assert rig.produces[0] == 0  # B waits for A's turn
        first.fail(JournalError("NOT_ENOUGH_REPLICAS"))
        while not errors:
            await trio.sleep(0.01)
        assert errors == [[ErrorCode.REQUEST_TIMED_OUT]] * 2
        assert rig.produces[0] == 0
        assert rig.stats.batches_held == 1
        planned = [await rig.plan(body) for body in rig.bodies]
        journal.seal().ack()
        assert await rig.settle_all(planned) == [[0], [0]]

    rig.run(steps)


def test_the_directory_journal_syncs_pipelined_requests_once(
    broker: RunningBroker, tmp_path: Path
) -> None:
    """With the directory journal, A and B numbered before either is
    written: one fdatasync covers both."""
    journal = DirectoryJournal(tmp_path)
    journal.open()
    rig = Rig(broker, journal)

    async def steps(nursery: trio.Nursery) -> None:
        synced = journal.syncs  # the warm-up's
        planned = [await rig.plan(body) for body in rig.bodies]
        assert journal.syncs == synced
        assert await rig.settle_all(planned) == [[0], [0]]
        assert journal.syncs == synced + 1

    rig.run(steps)
    journal.close()


def test_a_new_producers_batches_held_behind_its_first_leave_the_next_requests_free(
    broker: RunningBroker,
) -> None:
    """KIP-360: until TARGET's leader has acknowledged one of a new producer's
    batches, the proxy keeps one of them in flight there. A, B and C (client
    partitions 0, 1, 2), all bound for TARGET, are journaled in one write;
    A's batch is written and the leader's answer held back. B's batch is not
    written (held, as without a journal) and C's, behind it, neither: both are
    answered REQUEST_TIMED_OUT while A's answer is still held back (a held
    batch waits in no request's turn). The client's retries write them at
    the numbers the journal holds for them."""
    journal = GatedJournal()
    rig = Rig(broker, journal)

    async def steps(nursery: trio.Nursery) -> None:
        pid, epoch = rig.producer
        bodies = [*rig.bodies, produce_request(rig.topic, {2: batch(pid, epoch, 2 * N, N)})]
        rig.expected.append(range(2 * N, 3 * N))
        planned = [await rig.plan(body) for body in bodies]
        group = journal.seal()
        assert sorted(key[3] for key, _ in group.entries) == [0, 1, 2]
        gate = rig.hold[0] = trio.Event()
        group.ack()
        first: list[list[int]] = []
        answered = trio.Event()

        async def settle_a() -> None:
            first.append(await rig.settle(bodies[0], planned[0]))
            answered.set()

        nursery.start_soon(settle_a)
        later = await rig.settle_all(planned[1:], bodies[1:])
        assert later == [[ErrorCode.REQUEST_TIMED_OUT]] * 2
        assert not answered.is_set()
        assert rig.produces[0] == 1  # A's only
        assert rig.stats.batches_held == 2
        rig.hold[0] = None
        gate.set()
        await answered.wait()
        assert first == [[0]]
        # The retries: their placements were journaled, nothing to journal again.
        again = [await rig.plan(body) for body in bodies[1:]]
        assert len(journal.groups) == 1
        assert await rig.settle_all(again, bodies[1:]) == [[0], [0]]
        for partition in (1, 2):
            placed = journal.entries[(pid, epoch, rig.topic, partition, 0)]
            assert placed == Placement(N, ((TARGET, (partition + 1) * N - 1),))
        assert await rig.leader_last(TARGET) == 3 * N - 1

    rig.run(steps, warm=False)


def test_a_batch_renumbered_while_it_waits_its_turn_is_journaled_again_first(
    broker: RunningBroker,
) -> None:
    """An earlier batch refused for good (MESSAGE_TOO_LARGE: TARGET's topic
    takes 6000 bytes) gives its sequence numbers to the later batches of its
    partition. Here that happens to B's batch after B's journal write was
    acknowledged, while B waits for its turn behind A (another partition),
    whose journal write then fails: B's batch is written at its new numbers,
    and the journal holds those numbers before it is written (a restarted
    proxy reads them to tell whether B's records were written)."""
    journal = GatedJournal()
    rig = Rig(broker, journal, {"max.message.bytes": "6000"})

    async def steps(nursery: trio.Nursery) -> None:
        pid, epoch = rig.producer
        big = produce_request(rig.topic, {0: batch(pid, epoch, 0, 100)})  # ~12 KiB
        a = produce_request(rig.topic, {1: batch(pid, epoch, 200, 10, keys=OTHER_KEYS)})
        b = produce_request(rig.topic, {2: batch(pid, epoch, 300, 10, sequence=W)})
        rig.expected[:] = [range(1000, 1000 + W), range(200, 210), range(300, 310)]
        gate = rig.hold[0] = trio.Event()
        first = await rig.plan(big)
        journal.seal().ack()
        refused: list[list[int]] = []
        done = trio.Event()

        async def settle_big() -> None:
            refused.append(await rig.settle(big, first))
            done.set()

        nursery.start_soon(settle_big)
        while rig.produces[0] < 1:  # the big batch is written; its answer held back
            await trio.testing.wait_all_tasks_blocked()
        planned = [await rig.plan(a)]
        a_write = journal.seal()
        planned.append(await rig.plan(b))
        b_write = journal.seal()
        ((key, before),) = b_write.entries
        assert before == Placement(10, ((TARGET, W + 100 + 9),))  # behind the big one
        b_write.ack()
        errors: list[list[int]] = []

        async def settle() -> None:
            errors.extend(await rig.settle_all(planned, [a, b]))

        nursery.start_soon(settle)
        await trio.testing.wait_all_tasks_blocked()
        rig.hold[0] = None
        gate.set()
        await done.wait()
        assert refused == [[ErrorCode.MESSAGE_TOO_LARGE]]
        a_write.fail(JournalError("NOT_ENOUGH_REPLICAS"))
        # B's turn: its batch was renumbered; journaled again before it is written.
        while len(journal.groups) < 4:  # the big one's, A's, B's, and this
            await trio.testing.wait_all_tasks_blocked()
        again = journal.seal()
        assert again.entries == [(key, Placement(10, ((TARGET, W + 9),)))]
        assert rig.produces[0] == 1
        again.ack()
        while not errors:
            await trio.testing.wait_all_tasks_blocked()
        assert errors == [[ErrorCode.REQUEST_TIMED_OUT], [0]]
        assert await rig.leader_last(TARGET) == W + 9
        assert journal.lookup(key) == Placement(10, ((TARGET, W + 9),))
        # A's retry: journaled again (its write failed), then written.
        retry = await rig.plan(a)
        journal.seal().ack()
        assert await rig.settle(a, retry) == [0]

    rig.run(steps)
