"""Journal writes pipelined (proxy/journal_pipeline.py): the exactly-once
driver against one brokerlite, with a journal whose writes the test
acknowledges or fails by hand, and every Produce the driver writes upstream
counted on its pooled connection.

Two requests of one new idempotent producer, every record keyed to one
partition (so that their upstream batches are consecutive sequences of one
partition, the case KIP-98's ordering is about): the second is numbered and
handed to the journal while the first's journal write is under way; a batch
is never written upstream before the journal write that holds its placement
is acknowledged, and a failed journal write leaves nothing written (the
client hears a retriable error and retries; every record lands once, in
order).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from proxy_helpers import create, fresh, placement
from test_proxy_cut_moments import PARTITIONS, TARGET, CutOnce, client_batch, produce_request

from trafka.brokerlite import RunningBroker
from trafka.codec import protocol
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k22_init_producer_id as ip
from trafka.proxy.exactly_once import ExactlyOnce, Numbered
from trafka.proxy.filters import FilterContext
from trafka.proxy.journal import DirectoryJournal, JournalError, JournalFenced, PlacementJournal
from trafka.proxy.pool import UpstreamPool
from trafka.proxy.routing import RouteStats, Topics
from trafka.proxy.sequences import Placement, PlacementKey

N = 50  # records a client batch


class Counted(CutOnce):
    """A pooled connection that counts the Produce requests written to it
    (and cuts none)."""

    def __init__(self, inner: trio.abc.Stream, produces: list[int]) -> None:
        super().__init__(inner, [False])
        self.produces = produces

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        if bytes(data[4:6]) == b"\x00\x00":  # a Produce's api key
            self.produces[0] += 1
        await super().send_all(data)


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
        raise AssertionError("nothing changed while the writes waited: no extra record")

    def close(self) -> None:
        pass


class Rig:
    """The driver on a pool to the broker, a producer id, and its two requests."""

    def __init__(self, broker: RunningBroker, journal: PlacementJournal) -> None:
        self.broker = broker
        self.journal = journal
        self.topic = fresh("pipelined")
        create(broker.bootstrap_servers, self.topic, PARTITIONS)
        self.produces = [0]
        self.stats = RouteStats()
        self.node = broker.config.node_id
        self.ctx = FilterContext(0, 9, 1, "pipelined", None, self.node)

    async def start(self, nursery: trio.Nursery) -> None:
        host, port = self.broker.address

        async def connect(node_id: int) -> trio.abc.Stream:
            return Counted(await trio.open_tcp_stream(host, port), self.produces)

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
            produce_request(topic, {0: client_batch(*self.producer, 0, N)}),
            produce_request(topic, {1: client_batch(*self.producer, N, N)}),
        ]
        self.deadline = trio.current_time() + 20

    async def plan(self, body: Any) -> tuple[Any, Any]:
        result = await self.eos.plan(self.ctx, body, self.producer, "murmur2", self.deadline)
        assert isinstance(result, tuple)
        return result

    async def settle_all(self, planned: list[tuple[Any, Any]]) -> list[list[int]]:
        """Settle the requests concurrently (as the proxy answers them)."""
        errors: list[list[int]] = [[] for _ in planned]

        async def settle(i: int) -> None:
            answer = await self.eos.settle(self.ctx, self.bodies[i], *planned[i], self.deadline)
            read = protocol.decode_response_body(0, self.ctx.api_version, answer)
            errors[i] = [p.error_code for t in read.responses for p in t.partition_responses]

        async with trio.open_nursery() as nursery:
            for i in range(len(planned)):
                nursery.start_soon(settle, i)
        return errors

    def run(self, steps: Callable[[trio.Nursery], Awaitable[None]]) -> None:
        """Start, run ``steps``, then check every record landed once."""

        async def main() -> None:
            with trio.fail_after(30):
                async with trio.open_nursery() as nursery:
                    await self.start(nursery)
                    await steps(nursery)
                    nursery.cancel_scope.cancel()

        trio.run(main)
        self.check_written_once()

    def check_written_once(self) -> None:
        """Every record of both requests in the target partition once, each
        client batch's records in its order."""
        records = placement(self.broker.bootstrap_servers, self.topic, PARTITIONS)
        values = [r.value.split(b"-")[1] for r in sorted(records, key=lambda r: r.offset)]
        assert {r.partition for r in records} == {TARGET}
        assert Counter(values) == Counter(b"%d" % i for i in range(2 * N))
        for first in (0, N):
            mine = [int(v) for v in values if first <= int(v) < first + N]
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
        planned = [await rig.plan(body) for body in rig.bodies]
        assert journal.syncs == 0
        assert await rig.settle_all(planned) == [[0], [0]]
        assert journal.syncs == 1

    rig.run(steps)
    journal.close()
