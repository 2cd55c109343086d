"""Idempotence: sequence numbers, KIP-360 resets, and exactly-once delivery under faults.

* Accumulator (sans-IO): identities, resets, the transactional gate.
* Producer against the scripted fake broker: OUT_OF_ORDER_SEQUENCE_NUMBER and
  UNKNOWN_PRODUCER_ID renumber the partition under a new producer id.
* Producer against brokerlite behind a proxy that cuts connections right after
  the broker answered a request (the broker acted, the client never heard):
  numbered records arrive exactly once and in order; transactions commit and
  abort correctly through the same faults.
"""

from __future__ import annotations

import itertools
import random
import socket
import struct
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import anyio.abc
import pytest
from sdk_brokers import set_transaction_version
from sdk_fakebroker import FakeBroker

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec import ErrorCode, FrameReader, KafkaError
from trafka.codec.messages import k00_produce as produce
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.records import read_batch_header
from trafka.sdk.accumulator import Accumulator, ProducerBatch
from trafka.sdk.admin import NewTopic, open_admin
from trafka.sdk.consumer import TopicPartition, open_consumer
from trafka.sdk.errors import TransactionAbortedError
from trafka.sdk.producer import open_producer
from trafka.sdk.transactions import TxnState

# -- accumulator ----------------------------------------------------------------------------


def one_leader(topic: str, partition: int) -> int | None:
    return 1


def acc(**kw: Any) -> Accumulator:
    kw.setdefault("rng", random.Random(0))
    kw.setdefault("linger", 0.0)
    kw.setdefault("idempotent", True)
    return Accumulator(**kw)


def drain_all(a: Accumulator, now: float = 0.0) -> list[ProducerBatch]:
    out: list[ProducerBatch] = []
    while batch := a.drain(now, 1, one_leader):
        out += batch
    return out


def header_of(b: ProducerBatch) -> tuple[int, int, int]:
    assert b.encoded is not None
    h = read_batch_header(b.encoded)
    return h.producer_id, h.producer_epoch, h.base_sequence


def test_sequence_reset_renumbers_after_the_identity_changes() -> None:
    a = acc(batch_size=70, max_in_flight=5)
    a.producer_id, a.producer_epoch = 1, 0
    for i in range(3):
        a.append("t", 0, i, None, b"x" * 60, (), now=0.0)
    first = drain_all(a)
    assert [header_of(b) for b in first] == [(1, 0, 0), (1, 0, 1), (1, 0, 2)]
    gap = KafkaError(ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
    oldest, *younger = first
    assert not a.has_earlier(oldest)
    assert a.retry_or_fail(oldest, gap, 0.0, force=True)
    assert a.request_sequence_reset(oldest)  # the identity must change
    for b in younger:  # their gap is the oldest one's: retried behind it
        assert a.has_earlier(b)
        assert a.retry_or_fail(b, gap, 0.0, force=True)
    assert drain_all(a, 10.0) == []  # still the old identity: held back
    assert not a.ready(10.0, one_leader).nodes
    a.producer_id, a.producer_epoch = 2, 0
    again = drain_all(a, 10.0)
    assert again == first  # the same batches, in the same order, renumbered
    assert [header_of(b) for b in again] == [(2, 0, 0), (2, 0, 1), (2, 0, 2)]
    for i, b in enumerate(again):
        a.complete(b, 100 + i)
    assert a.used_memory == 0 and not a.has_pending()


def test_reset_after_the_identity_already_moved_needs_no_new_one() -> None:
    a = acc(batch_size=70)
    a.producer_id, a.producer_epoch = 1, 0
    a.append("t", 0, 0, None, b"x" * 60, (), now=0.0)
    (b,) = drain_all(a)
    a.producer_id, a.producer_epoch = 1, 1  # another partition's reset bumped the epoch
    a.retry_or_fail(b, KafkaError(ErrorCode.UNKNOWN_PRODUCER_ID), 0.0, force=True)
    assert not a.request_sequence_reset(b)
    (again,) = drain_all(a, 10.0)
    assert header_of(again) == (1, 1, 0)


def test_new_identity_waits_for_the_partitions_in_flight_batches() -> None:
    a = acc(batch_size=70, max_in_flight=5)
    a.producer_id, a.producer_epoch = 1, 0
    a.append("t", 0, 0, None, b"x" * 60, (), now=0.0)
    a.append("t", 1, 0, None, b"x" * 60, (), now=0.0)
    old0, old1 = sorted(drain_all(a), key=lambda b: b.partition)
    a.complete(old1, 0)
    a.producer_id, a.producer_epoch = 5, 0
    a.append("t", 0, 0, None, b"y" * 60, (), now=0.0)
    a.append("t", 1, 0, None, b"y" * 60, (), now=0.0)
    # Partition 1 has nothing in flight and moves on; partition 0 waits for old0,
    # so batches of two identities never race each other.
    (new1,) = drain_all(a)
    assert new1.partition == 1 and header_of(new1) == (5, 0, 0)
    a.complete(old0, 0)
    (new0,) = drain_all(a)
    assert new0.partition == 0 and header_of(new0) == (5, 0, 0)


def test_split_halves_keep_their_identity_across_a_bump() -> None:
    a = acc(batch_size=10_000)
    a.producer_id, a.producer_epoch = 1, 0
    for i in range(4):
        a.append("t", 0, i, None, b"x", (), now=0.0)
    (big,) = drain_all(a)
    a.producer_id, a.producer_epoch = 1, 1
    a.append("t", 0, 9, None, b"z", (), now=0.0)
    assert a.split(big)
    h1 = drain_all(a)
    assert [header_of(b) for b in h1] == [(1, 0, 0), (1, 0, 2)]  # both halves, old identity
    for b in h1:
        a.complete(b, 0)
    (tail,) = drain_all(a)
    assert header_of(tail) == (1, 1, 0)


def test_no_producer_id_holds_idempotent_batches_back() -> None:
    a = acc()
    a.append("t", 0, 0, None, b"x", (), now=0.0)
    assert not a.ready(1.0, one_leader).nodes and drain_all(a, 1.0) == []
    a.producer_id, a.producer_epoch = 3, 0
    assert a.ready(1.0, one_leader).nodes == {1}


def test_transactional_gate_flag_and_abort_of_undrained_batches() -> None:
    a = acc(transactional=True, batch_size=70)
    a.producer_id, a.producer_epoch = 3, 1
    allowed = {("t", 0)}
    a.send_allowed = lambda t, p, _txn: (t, p) in allowed
    failed: list[tuple[int, bool, BaseException]] = []
    a.on_failure = lambda b, e: failed.append((b.partition, b.base_sequence >= 0, e))
    h0 = a.append("t", 0, 0, None, b"x" * 60, (), now=0.0)
    a.append("t", 1, 0, None, b"x" * 60, (), now=0.0)
    a.append("t", 0, 0, None, b"y" * 60, (), now=0.0)
    (sent,) = a.drain(0.0, 1, one_leader, max_bytes=1)
    assert sent.partition == 0 and sent is h0.batch
    assert sent.encoded is not None and read_batch_header(sent.encoded).is_transactional
    retried = a.drain(0.0, 1, one_leader)
    assert [b.partition for b in retried] == [0]  # partition 1 is not in the transaction
    a.retry_or_fail(retried[0], KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER), 0.0)
    error = TransactionAbortedError("aborted")
    assert a.abort_undrained(error) == 2
    # The retried batch had sequence numbers (a gap); the never-sent one did not.
    assert sorted(failed, key=lambda f: f[0]) == [(0, True, error), (1, False, error)]
    assert a.has_pending() and sent.in_flight  # in flight: it resolves with its response
    a.complete(sent, 0)
    assert a.used_memory == 0 and not a.has_pending()


# -- producer against the scripted fake broker -------------------------------------------------


def _respond(body: Any, code: int) -> Any:
    P = produce.ProduceResponse
    return P(
        responses=[
            P.TopicProduceResponse(
                name=t.name,
                topic_id=t.topic_id,  # v13: by id (KIP-516)
                partition_responses=[
                    P.PartitionProduceResponse(index=x.index, error_code=code)
                    for x in t.partition_data
                ],
            )
            for t in body.topic_data
        ]
    )


pytestmark = pytest.mark.anyio


@pytest.mark.parametrize(
    "code", [ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID]
)
async def test_sequence_gap_gets_a_new_producer_id_and_resends(
    fake_broker: FakeBroker, code: ErrorCode
) -> None:
    ids = itertools.count(1000)
    inits: list[Any] = []

    def init(header: Any, body: Any) -> Any:
        inits.append((header.request_api_version, body))
        return ipid.InitProducerIdResponse(producer_id=next(ids), producer_epoch=0)

    refusals = {"left": 1}
    real = fake_broker.produce

    def gap_once(header: Any, body: Any) -> Any:
        if refusals["left"]:
            refusals["left"] -= 1
            return _respond(body, code)
        return real(header, body)

    fake_broker.handlers[22] = init
    fake_broker.handlers[0] = gap_once
    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, linger_ms=0, retry_backoff_ms=1
        ) as p:
            md = await p.send_and_wait("one", b"x")
            md2 = await p.send_and_wait("one", b"y")
    assert (md.offset, md2.offset) == (0, 1)
    assert [r.value for r in fake_broker.records("one", 0)] == [b"x", b"y"]
    # KIP-360: the second InitProducerId names the identity it replaces.
    assert len(inits) == 2
    version, second = inits[1]
    assert version >= 3 and (second.producer_id, second.producer_epoch) == (1000, 0)
    headers = [read_batch_header(b) for b in fake_broker.logs[("one", 0)]]
    assert [(h.producer_id, h.base_sequence) for h in headers] == [(1001, 0), (1001, 1)]


async def test_a_batch_overtaken_by_acknowledged_younger_ones_fails_rather_than_follow_them(
    fake_broker: FakeBroker,
) -> None:
    """Kafka's idempotent producer writes a partition's records in the order they
    were sent. A broker with no state for a producer id takes any first sequence
    (Kafka's ProducerStateManager, KIP-360), so when a partition's first batch is
    refused with a retriable error (UNKNOWN_TOPIC_OR_PARTITION: a topic the
    broker has only just learned of) while a younger batch in flight behind it
    is taken, the first one's retry is OUT_OF_ORDER_SEQUENCE_NUMBER. Renumbered
    under a new epoch it would land after the younger records (seen on Kafka
    3.9 by tests/faults); it fails instead, as Java's producer's batch does
    (it can never be the next sequence)."""
    ids = itertools.count(3000)
    fake_broker.handlers[22] = lambda h, b: ipid.InitProducerIdResponse(
        producer_id=next(ids), producer_epoch=0
    )
    real = fake_broker.produce
    held: dict[str, Any] = {}
    last = {"pid": -1, "seq": -1}

    async def first_refused_late(header: Any, body: Any) -> Any:
        batch = read_batch_header(body.topic_data[0].partition_data[0].records)
        if not held.get("refused"):
            held["refused"] = True
            # Answer only once the younger batch is in flight behind this one.
            while held["producer"].core.acc.in_flight_count() < 2:
                await anyio.sleep(0.005)
            return _respond(body, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
        if batch.producer_id == last["pid"] and batch.base_sequence <= last["seq"]:
            return _respond(body, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        last.update(pid=batch.producer_id, seq=batch.base_sequence + batch.records_count - 1)
        return real(header, body)

    fake_broker.handlers[0] = first_refused_late
    with anyio.fail_after(20):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, linger_ms=0, retry_backoff_ms=1
        ) as p:
            held["producer"] = p
            first = await p.send("one", b"first")
            while p.core.acc.in_flight_count() < 1:
                await anyio.sleep(0.005)
            second = await p.send("one", b"second")
            with pytest.raises(KafkaError) as refused:
                await first
            assert refused.value.code == ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
            assert (await second).offset == 0
            later = await p.send_and_wait("one", b"third")
    assert later.offset == 1
    assert [r.value for r in fake_broker.records("one", 0)] == [b"second", b"third"]


async def test_non_retriable_error_then_gap_recovers(fake_broker: FakeBroker) -> None:
    """A batch that failed after getting its sequence leaves a gap; the next one
    is refused until the partition moves to a new identity."""
    ids = itertools.count(2000)
    fake_broker.handlers[22] = lambda h, b: ipid.InitProducerIdResponse(
        producer_id=next(ids), producer_epoch=0
    )
    expected_seq = {"pid": -1, "next": 0}
    real = fake_broker.produce
    calls = {"n": 0}

    def strict(header: Any, body: Any) -> Any:
        # A broker that checks sequences: the first batch is rejected as invalid.
        calls["n"] += 1
        batch = read_batch_header(body.topic_data[0].partition_data[0].records)
        if calls["n"] == 1:
            return _respond(body, ErrorCode.INVALID_RECORD)
        if batch.producer_id != expected_seq["pid"]:
            expected_seq.update(pid=batch.producer_id, next=0)
        if batch.base_sequence != expected_seq["next"]:
            return _respond(body, ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER)
        expected_seq["next"] = batch.base_sequence + batch.records_count
        return real(header, body)

    fake_broker.handlers[0] = strict
    with anyio.fail_after(10):
        async with open_producer(
            bootstrap_servers=fake_broker.bootstrap, linger_ms=0, retry_backoff_ms=1
        ) as p:
            with pytest.raises(KafkaError) as info:
                await p.send_and_wait("one", b"bad")
            assert info.value.code == ErrorCode.INVALID_RECORD
            expected_seq.update(pid=2000, next=0)  # the broker never saw sequence 0
            md = await p.send_and_wait("one", b"good")
    assert md.offset == 0
    assert [r.value for r in fake_broker.records("one", 0)] == [b"good"]
    assert read_batch_header(fake_broker.logs[("one", 0)][0]).producer_id == 2001


# -- brokerlite behind a cutting proxy ---------------------------------------------------------


class CuttingProxy:
    """Forwards every connection to the broker; closes the connection instead of
    relaying a response, for every ``every``-th response of the chosen API keys,
    at most ``max_cuts`` times. The broker has acted on a cut request."""

    def __init__(
        self, target: tuple[str, int], *, every: int, max_cuts: int, keys: set[int]
    ) -> None:
        self.target = target
        self.every = every
        self.max_cuts = max_cuts
        self.keys = keys
        self.seen = 0
        self.cuts = 0
        self.cut_keys: list[int] = []

    def _cut(self, key: int) -> bool:
        if key not in self.keys or self.cuts >= self.max_cuts:
            return False
        self.seen += 1
        if self.seen % self.every:
            return False
        self.cuts += 1
        self.cut_keys.append(key)
        return True

    async def serve(self, client: anyio.abc.SocketStream) -> None:
        try:
            upstream = await anyio.connect_tcp(*self.target)
        except OSError:
            await client.aclose()
            return
        keys: dict[int, int] = {}
        async with client, upstream, anyio.create_task_group() as tg:

            async def requests() -> None:
                reader = FrameReader()
                try:
                    while True:
                        data = await client.receive()
                        reader.feed(data)
                        for frame in reader:
                            key, _, corr = struct.unpack_from(">hhi", frame)
                            keys[corr] = key
                        await upstream.send(data)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
                tg.cancel_scope.cancel()

            async def responses() -> None:
                reader = FrameReader()
                try:
                    while True:
                        reader.feed(await upstream.receive())
                        for frame in reader:
                            (corr,) = struct.unpack_from(">i", frame)
                            if self._cut(keys.pop(corr, -1)):
                                tg.cancel_scope.cancel()
                                return
                            await client.send(struct.pack(">i", len(frame)) + frame)
                except (anyio.EndOfStream, anyio.BrokenResourceError, OSError):
                    pass
                tg.cancel_scope.cancel()

            tg.start_soon(requests)
            tg.start_soon(responses)


@pytest.fixture
def proxy_broker() -> Iterator[tuple[socket.socket, RunningBroker]]:
    """A listening socket for the proxy, and a broker that advertises it (the
    broker's thread is stopped from outside the test's event loop)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    port = sock.getsockname()[1]
    try:
        with (
            tempfile.TemporaryDirectory() as data,
            broker_in_thread(
                port=0,
                host="127.0.0.1",
                data_dir=Path(data),
                group_initial_rebalance_delay_ms=0,
                advertised_listener=f"127.0.0.1:{port}",
            ) as running,
        ):
            yield sock, running
    finally:
        sock.close()


@asynccontextmanager
async def proxied(
    setup: tuple[socket.socket, RunningBroker], every: int, max_cuts: int, keys: set[int]
) -> AsyncIterator[tuple[str, CuttingProxy]]:
    sock, running = setup
    proxy = CuttingProxy(running.address, every=every, max_cuts=max_cuts, keys=keys)
    listener = await anyio.abc.SocketListener.from_socket(sock.dup())
    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, proxy.serve)
        yield f"127.0.0.1:{sock.getsockname()[1]}", proxy
        tg.cancel_scope.cancel()


async def _values(
    bs: str, topic: str, partitions: int, n: int, **kw: Any
) -> dict[int, list[bytes]]:
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    got = 0
    async with open_consumer(bootstrap_servers=bs, auto_offset_reset="earliest", **kw) as c:
        c.assign([TopicPartition(topic, p) for p in range(partitions)])
        while got < n:
            for tp, recs in (await c.getmany(timeout_ms=500)).items():
                out[tp.partition] += [r.value for r in recs]
                got += len(recs)
        # Nothing more (duplicates would show up here).
        for tp, recs in (await c.getmany(timeout_ms=300)).items():
            out[tp.partition] += [r.value for r in recs]
    return out


@pytest.mark.timeout(120)
@pytest.mark.parametrize("idempotent", [True, False], ids=["idempotent", "plain"])
async def test_cut_responses_exactly_once_in_order(
    proxy_broker: tuple[socket.socket, RunningBroker], idempotent: bool
) -> None:
    n, partitions = 3000, 3
    async with proxied(proxy_broker, every=7, max_cuts=6, keys={0}) as (bs, proxy):
        with anyio.fail_after(90):
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("numbers", partitions)])
            async with open_producer(
                bootstrap_servers=bs,
                linger_ms=2,
                batch_size=400,
                retry_backoff_ms=5,
                enable_idempotence=idempotent,
                max_in_flight_requests_per_connection=5,
            ) as p:
                futures = [
                    await p.send("numbers", b"%d" % i, partition=i % partitions) for i in range(n)
                ]
            metas = [await f for f in futures]
            proxy.keys = set()  # no more cuts while reading back
            got = await _values(bs, "numbers", partitions, n)
    assert proxy.cuts == 6  # the faults did happen
    expected = {q: [b"%d" % i for i in range(q, n, partitions)] for q in range(partitions)}
    if idempotent:
        assert got == expected
        offsets = {q: [m.offset for m in metas if m.partition == q] for q in range(partitions)}
        assert offsets == {q: list(range(len(expected[q]))) for q in range(partitions)}
    else:
        # The control: without idempotence the retries of cut requests duplicate.
        assert sum(map(len, got.values())) > n


@pytest.mark.timeout(120)
@pytest.mark.parametrize("pipelined", [False, True], ids=["awaited", "pipelined"])
@pytest.mark.parametrize("level", [1, 2], ids=["tv1", "tv2"])
async def test_transactions_through_cut_connections(
    proxy_broker: tuple[socket.socket, RunningBroker], pipelined: bool, level: int
) -> None:
    """Every transactional API's answer may be lost; commits and aborts still hold.
    Pipelined, each transaction begins while the previous one commits
    (``commit_transaction(wait=False)``). On transaction version 1 and 2 (KIP-890
    part 2: no AddPartitionsToTxn or AddOffsetsToTxn, an epoch bump per EndTxn)."""
    keys = {0, 10, 22, 24, 25, 26, 28}
    async with proxied(proxy_broker, every=5, max_cuts=12, keys=keys) as (bs, proxy):
        with anyio.fail_after(90):
            if level < 2:
                await set_transaction_version(bs, level)
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("txn", 2), NewTopic("src", 1)])
            committed: list[bytes] = []
            commits = []
            begun_ahead = 0
            async with open_producer(
                bootstrap_servers=bs, transactional_id="cut", linger_ms=1, retry_backoff_ms=5
            ) as p:
                await p.init_transactions()
                for t in range(12):
                    p.begin_transaction()
                    begun_ahead += p.transaction_state is TxnState.COMMITTING_TRANSACTION
                    values = [b"%d-%d" % (t, i) for i in range(40)]
                    futures = [
                        await p.send("txn", v, partition=i % 2) for i, v in enumerate(values)
                    ]
                    abort = t % 3 == 2
                    if abort and pipelined:
                        # Begun ahead (unless the commit was already done): a local
                        # abort, none of its records sent.
                        ahead = p.transaction_state is TxnState.COMMITTING_TRANSACTION
                        await p.abort_transaction()
                        for f in futures if ahead else ():
                            with pytest.raises(TransactionAbortedError):
                                await f
                        continue
                    # Pipelined, queued while the previous commit runs, sent after it.
                    await p.send_offsets_to_transaction(
                        {TopicPartition("src", 0): t + 1}, "cut-group"
                    )
                    if abort:
                        await p.abort_transaction()
                    else:
                        commits.append(await p.commit_transaction(wait=not pipelined))
                        committed += values
                await commits[-1].wait()
                for c in commits:
                    c.result()
            proxy.keys = set()
            got = await _values(bs, "txn", 2, len(committed), isolation_level="read_committed")
            async with open_consumer(bootstrap_servers=bs, group_id="cut-group") as c:
                offset = await c.committed(TopicPartition("src", 0))
    # Several APIs lost answers (version 2 sends neither 24 nor 25).
    cut = set(proxy.cut_keys)
    assert proxy.cuts >= 8 and len(cut) >= (3 if level < 2 else 2), cut
    assert level < 2 or not cut & {24, 25}
    assert (begun_ahead > 0) is pipelined
    assert sorted(got[0] + got[1]) == sorted(committed)
    # In order within each partition (a value's partition: its index in its transaction % 2).
    assert got[0] == [v for v in committed if int(v.split(b"-")[1]) % 2 == 0]
    assert offset == 11  # transaction 11 (t=10) is the last committed one
