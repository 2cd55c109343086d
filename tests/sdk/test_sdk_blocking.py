"""The blocking clients (trafka.sdk.blocking) against a real brokerlite.

* Producer: futures with every record's offset, order per partition with several
  sending threads (filling batches themselves, through the queue, or both, with
  every acknowledgement checked against the log), threads and the loop taking
  turns, a send from a callback refused, close racing sending threads (no
  record acknowledged but missing, or failed but written), a tiny queue
  (backpressure), errors through the future,
  cancelling and timing out while the loop is held, callbacks, close delivering
  what is queued, transactions as ``with`` blocks (committed and aborted, seen by
  a read_committed consumer).
* Consumer: iteration that ends with ``consumer_timeout_ms``, commits and close
  counting only the records handed out (a second member resumes right after
  them), pause giving back held-back records, a plain-function rebalance
  listener that commits from inside its callback.
* Admin, configuration errors, and threads that end with their client.

Consumers fetch with ``fetch_max_wait_ms=50`` (:data:`QUICK`): a consumer's close
waits for the fetch the broker holds at the log's end (one request at a time on
a connection, as Kafka answers), 500 ms with the default; no test here is about
that wait.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from concurrent.futures import CancelledError
from typing import Any

import anyio
import anyio.to_thread
import pytest
import trio
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, KafkaError
from trafka.sdk import (
    ClientClosedError,
    ConfigError,
    InvalidTxnStateError,
    NewTopic,
    OutcomeUnknownError,
    TopicPartition,
    UsageError,
)
from trafka.sdk.accumulator import BATCH_OVERHEAD, RECORD_OVERHEAD
from trafka.sdk.blocking import Admin, Consumer, Producer, SendFuture

pytestmark = pytest.mark.timeout(120)

#: Consumer settings: see the module's docstring.
QUICK: dict[str, Any] = {"fetch_max_wait_ms": 50}


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "blocking")


def _topic(bs: str, partitions: int = 1, prefix: str = "blk") -> str:
    name = fresh(prefix)
    with Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(name, partitions)])
    return name


def _read_all(bs: str, topic: str, **settings: object) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) of every record, read by a blocking consumer without a group.

    The tests call it once their writers are done: it reads until its position
    on each partition reaches that partition's end, as a seek to the end finds it
    at the start (the last stable offset with ``read_committed``). A
    transaction's marker there is never handed out, but the consumer's position
    passes it, so no wait for records that will not come is needed.
    """
    with Admin(bootstrap_servers=bs) as admin:
        partitions = admin.list_topics()[topic]
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    with Consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", **QUICK, **settings
    ) as consumer:
        consumer.assign(tps)
        consumer.seek_to_end(*tps)
        ends = {tp: consumer.position(tp) for tp in tps}
        consumer.seek_to_beginning(*tps)
        read = []
        deadline = time.monotonic() + 60
        while any(consumer.position(tp) < end for tp, end in ends.items()):
            assert time.monotonic() < deadline, f"{topic}: {ends} not reached in 60 s"
            for records in consumer.getmany(timeout_ms=100).values():
                read += [(r.partition, r.offset, r.value) for r in records]
        return read


def _portal_threads() -> set[int | None]:
    """The loop threads alive now (compared as sets: another test's client may
    finish closing meanwhile, on a thread of its own)."""
    return {t.ident for t in threading.enumerate() if "portal" in t.name}


class _Held:
    """Hold a producer's hand-over (its lock) on the loop until released."""

    def __init__(self, producer: Producer) -> None:
        self.release = threading.Event()
        taken = threading.Event()

        async def hold() -> None:
            async with producer._sends.hand_lock:
                taken.set()
                # Abandoned when the client closes while still held.
                await anyio.to_thread.run_sync(self.release.wait, abandon_on_cancel=True)

        producer._loop.portal.start_task_soon(hold)
        assert taken.wait(10)


# -- producer ---------------------------------------------------------------------------------------


def test_futures_carry_every_records_offset_in_order(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 3)
    with Producer(bootstrap_servers=bs) as producer:
        futures = [producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7)) for i in range(3000)]
        producer.flush()
        assert all(f.done() for f in futures)
        by_partition: dict[int, list[int]] = {}
        for f in futures:
            md = f.result(timeout=0)
            by_partition.setdefault(md.partition, []).append(md.offset)
        for offsets in by_partition.values():
            assert offsets == list(range(len(offsets)))  # sent order, no gaps
        one = producer.send_and_wait(topic, b"last", partition=0)
        assert one.offset == len(by_partition.get(0, []))
        assert producer.statistics().records_sent == 3001
    assert producer.closed


def test_threads_share_a_producer_and_keep_their_own_order(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    with Producer(bootstrap_servers=bs, max_queued=50) as producer:

        def sender(n: int) -> None:
            for i in range(1500):
                producer.send(topic, b"%d-%d" % (n, i))

        threads = [threading.Thread(target=sender, args=(n,)) for n in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        producer.flush()
    seen: dict[bytes, list[int]] = {}
    for _, _, value in _read_all(bs, topic):
        n, i = value.split(b"-")
        seen.setdefault(n, []).append(int(i))
    assert sorted(seen) == [b"0", b"1", b"2", b"3"]
    for numbers in seen.values():
        assert numbers == list(range(1500))


def test_sending_threads_fill_batches_themselves_and_every_ack_is_in_the_log(
    broker: RunningBroker,
) -> None:
    # Key-less and keyed records from six threads, with batches and buffer small
    # enough that batches fill, new ones open and memory runs out again and
    # again: most records go straight into their batch from the sending thread,
    # the others through the queue, and the two must never lose, double or
    # reorder a record.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 4)
    sent: dict[int, list[tuple[bytes, SendFuture]]] = {n: [] for n in range(6)}
    with Producer(
        bootstrap_servers=bs, batch_size=4096, buffer_memory=65536, linger_ms=0
    ) as producer:

        def sender(n: int) -> None:
            for i in range(3000):
                value = b"%d-%d" % (n, i)
                key = None if n % 2 else b"k%d" % (i % 13)
                sent[n].append((value, producer.send(topic, value, key)))

        threads = [threading.Thread(target=sender, args=(n,)) for n in sent]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
            assert not t.is_alive()
        producer.flush()
    log = {(p, o): v for p, o, v in _read_all(bs, topic)}
    assert len(log) == 6 * 3000
    for records in sent.values():
        last: dict[int, int] = {}
        for value, future in records:
            md = future.result(timeout=0)
            assert log[md.partition, md.offset] == value
            assert md.offset > last.get(md.partition, -1)  # this thread's order
            last[md.partition] = md.offset


def test_sending_threads_and_the_loop_take_turns(broker: RunningBroker) -> None:
    # A thread that sends without a pause never keeps the loop from running:
    # records from other threads are delivered and flush returns meanwhile.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    stop = threading.Event()
    with Producer(bootstrap_servers=bs, linger_ms=0) as producer:

        def busy() -> None:
            while not stop.is_set():
                producer.send(topic, b"x" * 100)

        thread = threading.Thread(target=busy)
        thread.start()
        try:
            for i in range(5):
                assert producer.send_and_wait(topic, b"probe-%d" % i).offset >= 0
                producer.flush()
        finally:
            stop.set()
            thread.join(30)
        assert not thread.is_alive()


def test_records_the_fast_path_cannot_take_never_wait_for_the_loops_turn(
    broker: RunningBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Records the fast path never takes (a serializer, headers, a partition)
    # queue for the loop: waiting for its turn would only cost each a thread switch.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    waits: list[threading.Event] = []
    wait_turn = Producer._wait_turn

    def counted(self: Producer, turn: threading.Event) -> None:
        waits.append(turn)
        wait_turn(self, turn)

    monkeypatch.setattr(Producer, "_wait_turn", counted)
    with Producer(bootstrap_servers=bs, value_serializer="str", linger_ms=0) as producer:
        futures = [producer.send(topic, f"text {i}") for i in range(1000)]
        producer.flush()
    with Producer(bootstrap_servers=bs, linger_ms=0) as producer:
        futures += [producer.send(topic, b"h", headers={"n": b"%d" % i}) for i in range(1000)]
        futures += [producer.send(topic, b"p", partition=i % 2) for i in range(1000)]
        producer.flush()
    assert waits == []
    assert all(f.exception(timeout=0) is None for f in futures)
    assert len(_read_all(bs, topic)) == 3000


@pytest.fixture
def drains(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Each hand-over of queued records to the loop that producers start."""
    started: list[object] = []
    start_drain = Producer._start_drain

    def counted(self: Producer, turn: threading.Event | None) -> None:
        started.append(turn)
        start_drain(self, turn)

    monkeypatch.setattr(Producer, "_start_drain", counted)
    return started


@pytest.mark.parametrize("keyed", [False, True])
def test_sending_threads_open_batches_themselves(
    broker: RunningBroker, drains: list[object], keyed: bool
) -> None:
    # Once the topic's metadata is known, a bytes record whose partition has no
    # room opens the next batch from the sending thread: no record goes through
    # the loop's queue, and order and offsets are as sent.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 3)
    with Producer(bootstrap_servers=bs, batch_size=2048, linger_ms=0) as producer:
        assert len(producer.partitions_for(topic)) == 3
        futures = [
            producer.send(topic, b"%05d" % i + b"." * 100, b"k%d" % (i % 7) if keyed else None)
            for i in range(3000)
        ]
        producer.flush()
        batches = producer.statistics().topics[topic].batches_sent
    assert drains == []
    assert batches >= 3000 * 100 // 2048  # each batch opened by this thread
    log = {(p, o): v for p, o, v in _read_all(bs, topic)}
    assert len(log) == 3000
    last: dict[int, int] = {}
    for i, future in enumerate(futures):
        md = future.result(timeout=0)
        assert log[md.partition, md.offset][:5] == b"%05d" % i
        assert md.offset == last.get(md.partition, -1) + 1  # in order, nothing between
        last[md.partition] = md.offset


def test_a_send_from_a_callback_is_refused_rather_than_a_deadlock(
    broker: RunningBroker,
) -> None:
    # Callbacks run on the producer's own thread; a send there (or any call that
    # crosses to the loop) could only wait for that thread.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    refused: list[BaseException] = []
    with Producer(bootstrap_servers=bs) as producer:
        calls = [
            lambda: producer.send(topic, b"bytes"),  # the fast path's kind of record
            lambda: producer.send(topic, "text"),  # and another
            producer.flush,
            lambda: producer.partitions_for(topic),
        ]

        def callback(_: SendFuture) -> None:
            for call in calls:
                try:
                    call()
                except UsageError as exc:
                    refused.append(exc)

        held = _Held(producer)
        future = producer.send(topic, b"first")
        future.add_done_callback(callback)
        held.release.set()
        producer.flush()
        assert future.result().offset == 0
        assert producer.partitions_for(topic) == [0]  # the client still works
    assert len(refused) == len(calls)
    assert all("own thread" in str(exc) for exc in refused)
    assert [v for _, _, v in _read_all(bs, topic)] == [b"first"]


def test_close_while_threads_send_leaves_no_record_in_doubt(broker: RunningBroker) -> None:
    # Every record a sending thread got a future for is, after close, either
    # acknowledged and in the log at its offset, or failed with ClientClosedError
    # and nowhere, or (its request written, unanswered) OutcomeUnknownError.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    sent: dict[int, list[tuple[bytes, SendFuture]]] = {n: [] for n in range(3)}
    producer = Producer(bootstrap_servers=bs, linger_ms=0)
    crashed: list[Exception] = []

    def sender(n: int) -> None:
        i = 0
        while True:
            value = b"%d-%d" % (n, i)
            try:
                future = producer.send(topic, value, None if n else b"key")
            except ClientClosedError:
                return
            except Exception as exc:  # a record perhaps in the log, with no future
                crashed.append(exc)
                return
            sent[n].append((value, future))
            i += 1

    threads = [threading.Thread(target=sender, args=(n,)) for n in sent]
    for t in threads:
        t.start()
    while min(len(records) for records in sent.values()) < 2000:
        threading.Event().wait(0.01)
    producer.close()
    for t in threads:
        t.join(30)
        assert not t.is_alive()
    assert crashed == []
    log = {(p, o): v for p, o, v in _read_all(bs, topic)}
    logged = set(log.values())  # the values are unique
    acknowledged = in_doubt = 0
    for records in sent.values():
        for value, future in records:
            assert future.done()
            error = future.exception(timeout=0)
            if error is None:
                md = future.result()
                assert log[md.partition, md.offset] == value
                acknowledged += 1
            elif isinstance(error, OutcomeUnknownError):
                # Its request was written, the answer never came: either way.
                in_doubt += value in logged
            else:
                # Told it was not sent: it must not be in the log.
                assert isinstance(error, ClientClosedError)
                assert value not in logged
    assert acknowledged + in_doubt == len(log)


def test_a_close_between_the_append_and_the_wake_keeps_the_future(broker: RunningBroker) -> None:
    # A sending thread appends the record that fills its batch, and is held up
    # before it wakes the loop's sender: a close runs to its end meanwhile (it
    # flushes that batch). The send still returns the record's future, which
    # tells the truth; it never raises with the record in the log and no future.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    per_batch = 8  # records of 100 bytes that fill a batch exactly
    batch_size = BATCH_OVERHEAD + per_batch * (RECORD_OVERHEAD + 100)
    producer = Producer(bootstrap_servers=bs, batch_size=batch_size, linger_ms=60_000)
    real = producer._token
    closed = []

    class CloseFirst:
        """The token, running the whole close before the first call it passes on."""

        def run_sync_soon(self, fn: Any, *args: Any) -> None:
            if not closed:
                closed.append(True)
                producer.close()
            real.run_sync_soon(fn, *args)

    values = [(b"%d-" % i).ljust(100, b"v") for i in range(per_batch)]
    producer.partitions_for(topic)  # the metadata: the sends below take no queue
    futures = [producer.send(topic, values[0])]  # opens the batch
    producer._token = CloseFirst()  # type: ignore[assignment]
    for value in values[1:]:
        futures.append(producer.send(topic, value))  # the last one fills it
    assert closed
    log = [v for _, _, v in _read_all(bs, topic)]
    assert log == values
    assert [f.result(timeout=0).offset for f in futures] == list(range(per_batch))


def test_errors_arrive_through_the_future(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    with Producer(bootstrap_servers=bs) as producer:
        bad = producer.send(topic, b"x", partition=5)
        good = producer.send(topic, b"y")
        error = bad.exception(timeout=10)
        assert isinstance(error, KafkaError)
        assert error.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        with pytest.raises(KafkaError):
            bad.result()
        assert good.result(timeout=10).offset == 0
    with Producer(bootstrap_servers=bs, transactional_id=fresh("tid")) as producer:
        producer.init_transactions()
        outside = producer.send(topic, b"no transaction")
        assert isinstance(outside.exception(timeout=10), InvalidTxnStateError)


def test_cancel_and_timeout_while_the_loop_is_held(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    with Producer(bootstrap_servers=bs) as producer:
        held = _Held(producer)
        kept = producer.send(topic, b"kept")
        dropped = producer.send(topic, b"dropped")
        assert not kept.done()
        assert dropped.cancel() and dropped.cancelled() and dropped.done()
        with pytest.raises(CancelledError):
            dropped.result()
        with pytest.raises(TimeoutError):
            kept.result(timeout=0.2)
        held.release.set()
        assert kept.result(timeout=10).offset == 0
        assert not kept.cancel()  # taken by the loop: too late
    assert [v for _, _, v in _read_all(bs, topic)] == [b"kept"]


def test_callbacks_run_once_done(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    called: list[SendFuture] = []
    with Producer(bootstrap_servers=bs) as producer:
        held = _Held(producer)
        queued = producer.send(topic, b"a")
        queued.add_done_callback(called.append)  # before the loop took it
        held.release.set()
        producer.flush()
        assert called == [queued]
        done = producer.send(topic, b"b")
        done.result(timeout=10)
        done.add_done_callback(called.append)  # already done: at once
        assert called == [queued, done]


def test_delivery_callbacks_as_confluent_kafka_calls_them(broker: RunningBroker) -> None:
    """``send(..., on_delivery=cb)``: ``cb(None, metadata)`` for each delivered
    record (whichever path took it), ``cb(error, None)`` for a failed one."""
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    reports: list[tuple[BaseException | None, Any]] = []

    def report(error: BaseException | None, metadata: Any) -> None:
        reports.append((error, metadata))

    with Producer(bootstrap_servers=bs) as producer:
        for i in range(300):  # bytes, keyed: most go straight into their batch
            producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7), on_delivery=report)
        producer.send(topic, b"h", on_delivery=report, headers={"h": b"1"})  # general path
        producer.send(topic, b"x", partition=9, on_delivery=report)  # no such partition
        producer.flush()
    assert len(reports) == 302
    failed = [e for e, m in reports if e is not None]
    assert len(failed) == 1 and isinstance(failed[0], KafkaError)
    assert failed[0].code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
    assert all(m is None for e, m in reports if e is not None)
    delivered = {(m.partition, m.offset) for e, m in reports if e is None}
    assert delivered == {(p, o) for p, o, _ in _read_all(bs, topic)}


def test_futures_of_records_that_went_straight_into_their_batch(broker: RunningBroker) -> None:
    # The fast path's futures (a batch open, nothing queued): not cancellable,
    # not done before the batch leaves, their callbacks run once it is delivered.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    called: list[SendFuture] = []
    with Producer(bootstrap_servers=bs, linger_ms=60_000) as producer:
        assert producer.partitions_for(topic) == [0]
        producer.send(topic, b"opens the batch")
        futures = [producer.send(topic, b"%d" % i) for i in range(5)]
        assert not len(producer._sends) and not producer._sends.draining  # none was queued
        assert not any(f.done() for f in futures)
        assert not futures[0].cancel() and not futures[0].cancelled()
        futures[1].add_done_callback(called.append)
        with pytest.raises(TimeoutError):
            futures[2].result(timeout=0.1)  # lingering
        producer.flush()
        assert called == [futures[1]]
        assert [f.result().offset for f in futures] == [1, 2, 3, 4, 5]
        assert all(f.exception() is None and f.done() for f in futures)
        assert futures[4].result().serialized_value_size == 1


def test_a_tiny_queue_blocks_senders_until_the_loop_catches_up(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    with Producer(bootstrap_servers=bs, max_queued=3) as producer:
        futures = [producer.send(topic, b"%d" % i) for i in range(500)]
        assert len(producer._sends) <= 3
        producer.flush()
        assert [f.result().offset for f in futures] == list(range(500))
    with pytest.raises(ValueError):
        Producer(bootstrap_servers=bs, max_queued=0)


def test_close_delivers_what_is_queued_then_refuses(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    before = _portal_threads()
    producer = Producer(bootstrap_servers=bs)
    assert len(_portal_threads() - before) == 1
    futures = [producer.send(topic, b"%d" % i) for i in range(2000)]
    producer.close()
    producer.close()  # idempotent
    assert all(f.exception(timeout=0) is None for f in futures)
    assert _portal_threads() <= before
    with pytest.raises(ClientClosedError):
        producer.send(topic, b"late")
    with pytest.raises(ClientClosedError):
        producer.flush()
    assert len(_read_all(bs, topic)) == 2000


def test_leaving_with_an_exception_does_not_wait_for_unsent_records(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    before = _portal_threads()
    futures = []
    held = None
    with pytest.raises(RuntimeError, match="stop"), Producer(bootstrap_servers=bs) as producer:
        held = _Held(producer)  # not released before the block ends: the records stay queued
        futures = [producer.send(topic, b"%d" % i) for i in range(5)]
        raise RuntimeError("stop")
    assert held is not None
    held.release.set()
    assert all(isinstance(f.exception(timeout=0), ClientClosedError) for f in futures)
    assert _portal_threads() <= before
    assert _read_all(bs, topic) == []


def test_transaction_blocks_commit_or_abort(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    with Producer(bootstrap_servers=bs, transactional_id=fresh("tid")) as producer:
        with producer.transaction():
            for i in range(10):
                producer.send(topic, b"committed-%d" % i)
        with pytest.raises(RuntimeError, match="boom"), producer.transaction():
            for i in range(5):
                producer.send(topic, b"aborted-%d" % i)
            producer.flush()  # written, then aborted
            raise RuntimeError("boom")
        with producer.transaction():
            producer.send(topic, b"after")
        stats = producer.statistics()
    assert stats.transactions_committed == 2 and stats.transactions_aborted == 1
    committed = [v for _, _, v in _read_all(bs, topic, isolation_level="read_committed")]
    assert committed == [b"committed-%d" % i for i in range(10)] + [b"after"]
    everything = [v for _, _, v in _read_all(bs, topic)]
    assert len([v for v in everything if v.startswith(b"aborted")]) == 5


def test_transactions_whose_partitions_join_from_the_sending_thread(
    broker: RunningBroker, drains: list[object]
) -> None:
    # Each transaction's first record of a partition opens its batch from the
    # sending thread, which adds the partition to the transaction there; the loop
    # then sends AddPartitionsToTxn, and no batch leaves before its partition joined.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 3)
    expected: list[bytes] = []
    with Producer(
        bootstrap_servers=bs, transactional_id=fresh("tid"), batch_size=1024, linger_ms=0
    ) as producer:
        assert len(producer.partitions_for(topic)) == 3
        producer.init_transactions()
        for t in range(12):
            values = [b"t%02d-%03d-" % (t, i) + b"." * 50 for i in range(60)]
            if t % 4 == 3:
                with pytest.raises(RuntimeError), producer.transaction():
                    for i, v in enumerate(values):
                        producer.send(topic, v, b"k%d" % (i % 5))
                    raise RuntimeError("abort this one")
            else:
                with producer.transaction():
                    for i, v in enumerate(values):
                        producer.send(topic, v, b"k%d" % (i % 5))
                expected += values
        stats = producer.statistics()
    assert drains == []
    assert stats.transactions_committed == 9 and stats.transactions_aborted == 3
    committed = _read_all(bs, topic, isolation_level="read_committed")
    assert sorted(v for _, _, v in committed) == sorted(expected)
    for partition in range(3):  # each partition holds its records in the order sent
        mine = [v for p, _, v in committed if p == partition]
        assert mine == [v for v in expected if v in set(mine)]


# -- consumer ---------------------------------------------------------------------------------------


def _fill(bs: str, topic: str, n: int, partition: int | None = None) -> None:
    with Producer(bootstrap_servers=bs) as producer:
        for i in range(n):
            producer.send(topic, b"%d" % i, partition=partition)


@pytest.mark.parametrize("auto_commit", [True, False])
def test_commits_count_only_the_records_handed_out(
    broker: RunningBroker, auto_commit: bool
) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    _fill(bs, topic, 200)
    group = fresh("g")
    settings = {
        "bootstrap_servers": bs,
        "group_id": group,
        "auto_offset_reset": "earliest",
        "enable_auto_commit": auto_commit,
        **QUICK,
    }
    with Consumer(topic, **settings) as consumer:
        taken = []
        for record in consumer:
            taken.append(int(record.value))
            if len(taken) == 30:
                break
        if not auto_commit:
            consumer.commit()
        # The batch behind the 30 records is held back, not consumed.
        assert consumer.consumed_offsets()[TopicPartition(topic, 0)] == 30
        assert consumer.position(TopicPartition(topic, 0)) == 30
    assert taken == list(range(30))
    with Consumer(topic, consumer_timeout_ms=1500, **settings) as second:
        rest = [int(r.value) for r in second]
    assert rest == list(range(30, 200))


def test_leaving_with_an_exception_commits_nothing_more(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    _fill(bs, topic, 50)
    group = fresh("g")
    settings = {
        "bootstrap_servers": bs,
        "group_id": group,
        "auto_offset_reset": "earliest",
        **QUICK,
    }
    with pytest.raises(KeyError), Consumer(topic, **settings) as consumer:
        for n, _ in enumerate(consumer, 1):
            if n == 10:
                consumer.commit()
            if n == 20:
                raise KeyError("processing failed")
    with Admin(bootstrap_servers=bs) as admin:
        assert admin.list_consumer_group_offsets(group) == {TopicPartition(topic, 0): 10}
        assert admin.describe_groups([group])[group].members == ()  # it left


def test_iteration_takes_every_record_once_in_order_across_many_fetches(
    broker: RunningBroker,
) -> None:
    # Small fetches: most polls find records the loop fetched already and take
    # them from this thread, each time leaving the next fetch to the loop.
    bs = broker.bootstrap_servers
    topic = _topic(bs, 3)
    with Producer(bootstrap_servers=bs, batch_size=2048, linger_ms=0) as producer:
        for i in range(6000):
            producer.send(topic, b"%d" % i, key=b"k%d" % (i % 17))
    by_partition: dict[int, list[int]] = {}
    with Consumer(
        bootstrap_servers=bs,
        auto_offset_reset="earliest",
        consumer_timeout_ms=2000,
        max_partition_fetch_bytes=4096,
        max_poll_records=50,
        **QUICK,
    ) as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(3)])
        for record in consumer:
            by_partition.setdefault(record.partition, []).append(record.offset)
        fetches = sum(
            b.apis["Fetch"].responses
            for b in consumer.statistics().brokers.values()
            if "Fetch" in b.apis
        )
    assert sum(len(offsets) for offsets in by_partition.values()) == 6000
    for offsets in by_partition.values():
        assert offsets == list(range(len(offsets)))
    assert fetches >= 10  # the data came in many fetches


def test_iteration_ends_after_consumer_timeout(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    _fill(bs, topic, 50)
    with Consumer(
        topic,
        bootstrap_servers=bs,
        group_id=fresh("g"),
        auto_offset_reset="earliest",
        consumer_timeout_ms=1000,
        **QUICK,
    ) as consumer:
        assert sorted(int(r.value) for r in consumer) == list(range(50))
        assert consumer.getone(timeout_ms=100) is None
        stats = consumer.statistics()
    assert stats.records_consumed == 50


def test_pause_gives_back_held_records_and_resume_delivers_them_once(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    _fill(bs, topic, 40, partition=0)
    _fill(bs, topic, 40, partition=1)
    tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
    with Consumer(bootstrap_servers=bs, auto_offset_reset="earliest", **QUICK) as consumer:
        consumer.assign([tp0, tp1])
        first = consumer.getone(timeout_ms=10_000)
        assert first is not None
        seen = {tp0: [], tp1: []}
        seen[TopicPartition(first.topic, first.partition)].append(first.offset)
        other = tp1 if first.partition == 0 else tp0
        consumer.pause(other)
        while len(seen[TopicPartition(first.topic, first.partition)]) < 40:
            record = consumer.getone(timeout_ms=5000)
            assert record is not None
            assert record.partition == first.partition  # nothing of the paused one
            seen[TopicPartition(record.topic, record.partition)].append(record.offset)
        assert consumer.getone(timeout_ms=300) is None
        consumer.resume(other)
        while len(seen[other]) < 40:
            record = consumer.getone(timeout_ms=5000)
            assert record is not None
            seen[TopicPartition(record.topic, record.partition)].append(record.offset)
    assert seen[tp0] == list(range(40)) and seen[tp1] == list(range(40))


def test_a_plain_function_listener_may_commit_from_its_callback(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    topic = _topic(bs, 2)
    _fill(bs, topic, 20)
    group = fresh("g")
    events: list[tuple[str, set[TopicPartition]]] = []
    holder: dict[str, Consumer] = {}

    class Listener:
        def on_partitions_assigned(self, tps: set[TopicPartition]) -> None:
            events.append(("assigned", tps))

        def on_partitions_revoked(self, tps: set[TopicPartition]) -> None:
            holder["c"].commit()  # back into the consumer, from the listener's thread
            events.append(("revoked", tps))

    with Consumer(
        topic,
        bootstrap_servers=bs,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        listener=Listener(),
        **QUICK,
    ) as consumer:
        holder["c"] = consumer
        got = 0
        while got < 20:
            got += 1 if consumer.getone(timeout_ms=5000) is not None else 0
    assert events[0] == ("assigned", {TopicPartition(topic, 0), TopicPartition(topic, 1)})
    assert events[-1][0] == "revoked"
    with Admin(bootstrap_servers=bs) as admin:
        committed = admin.list_consumer_group_offsets(group)
    assert sum(committed.values()) == 20  # the listener's commit happened


def test_consumer_without_group_refuses_topics_and_stops_its_thread(
    broker: RunningBroker,
) -> None:
    before = _portal_threads()
    with pytest.raises(UsageError):
        Consumer("t", bootstrap_servers=broker.bootstrap_servers)
    assert _portal_threads() <= before


# -- admin and configuration ------------------------------------------------------------------------


def test_admin_forwards_every_call(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    name = fresh("adm")
    with Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(name, 2, configs={"retention.ms": "60000"})])
        assert admin.list_topics()[name] == 2
        admin.create_partitions({name: 3})
        assert admin.list_topics()[name] == 3
        admin.delete_topics([name])
        assert name not in admin.list_topics()
        assert admin.statistics().brokers[1].apis["CreateTopics"].responses == 1
        with pytest.raises(AttributeError):
            admin.no_such_call  # noqa: B018
    with pytest.raises(ClientClosedError):
        admin.list_topics()


def test_a_wrong_setting_is_a_config_error_and_leaves_no_thread(broker: RunningBroker) -> None:
    before = _portal_threads()
    with pytest.raises(ConfigError, match="lingr_ms"):
        Producer(bootstrap_servers=broker.bootstrap_servers, lingr_ms=5)
    with pytest.raises(ConfigError):
        Admin(bootstrap_servers=broker.bootstrap_servers, **{"no.such.key": 1})
    assert _portal_threads() <= before


def test_a_client_dropped_in_a_cycle_is_closed_without_holding_up_the_collector(
    broker: RunningBroker,
) -> None:
    """A client dropped without close() inside a reference cycle is freed by the
    cyclic garbage collector, on whatever thread happens to run it. That thread
    must not wait for the client's loop (collecting the loop's portal joins its
    thread, which waits for the client's block to be left): the client is closed
    on a thread of its own, its loop thread ends, and the collector returns.
    (The hang was seen with the collector inside another trio loop: a console's.)"""
    import gc

    before = _portal_threads()
    admin = Admin(bootstrap_servers=broker.bootstrap_servers)
    admin.list_topics()
    loop_thread = admin._loop.thread
    cycle: list[Any] = [admin]
    cycle.append(cycle)
    del admin, cycle

    async def collect() -> None:  # as a broker's or a console's thread would
        gc.collect()

    collector = threading.Thread(target=trio.run, args=(collect,), name="collector", daemon=True)
    collector.start()
    collector.join(60)
    assert not collector.is_alive(), "the garbage collector waited for the dropped client"
    for thread in threading.enumerate():
        if thread.ident == loop_thread:
            thread.join(60)
            assert not thread.is_alive(), "the dropped client's loop did not stop"
    assert _portal_threads() <= before


_FORGETFUL_SCRIPT = """
import sys
from trafka.sdk import TopicPartition
from trafka.sdk.blocking import Admin, Consumer, Producer

bs, topic, source, group = sys.argv[1:]
admin = Admin(bootstrap_servers=bs)
admin.list_topics()
consumer = Consumer(source, bootstrap_servers=bs, group_id=group, auto_offset_reset="earliest")
taken = 0
while taken < 5:
    taken += consumer.getone(timeout_ms=1000) is not None
producer = Producer(bootstrap_servers=bs, linger_ms=50)
for i in range(200):
    producer.send(topic, b"forgotten-%d" % i)
print("the script ends without close()", flush=True)
"""


def test_a_script_that_never_closes_its_clients_ends_and_loses_nothing(
    broker: RunningBroker, tmp_path: Any
) -> None:
    """A script ends with a producer, a consumer and an admin still open: the
    interpreter exits (their loops' threads do not hold it), and each is closed as
    close() would: every record the producer held is in the log, and the consumer
    commits what it handed out (the 5 records it polled: auto commit on close)."""
    import subprocess
    import sys

    bs = broker.bootstrap_servers
    topic, source, group = _topic(bs), _topic(bs), fresh("forgetful")
    with Producer(bootstrap_servers=bs) as producer:
        for i in range(10):
            producer.send(source, b"%d" % i)
    script = tmp_path / "forgetful.py"
    script.write_text(_FORGETFUL_SCRIPT)
    done = subprocess.run(
        [sys.executable, str(script), bs, topic, source, group],
        capture_output=True,
        text=True,
        timeout=120,  # a script held open by a client's thread fails here
    )
    assert done.returncode == 0, done.stderr
    assert "ends without close()" in done.stdout
    values = sorted(v for _, _, v in _read_all(bs, topic))
    assert values == sorted(b"forgotten-%d" % i for i in range(200))
    with Admin(bootstrap_servers=bs) as admin:
        assert admin.list_consumer_group_offsets(group) == {TopicPartition(source, 0): 5}


def test_send_hands_what_its_c_call_does_not_finish_to_the_python_send(
    broker: RunningBroker,
) -> None:
    # send() of a record given nothing else is one C call where the extension is
    # built (trafka.sdk.hot_append's Front); any other call, a lock the loop holds
    # and records queued go to the Python send, its reference. Whichever took a
    # record, the future tells where it is, and the log agrees, in order.
    from trafka.sdk import hot_append

    bs = broker.bootstrap_servers
    topic = _topic(bs, 1)
    with Producer(bootstrap_servers=bs, linger_ms=5) as producer:
        producer.partitions_for(topic)
        if hot_append.accelerated is not None:
            assert type(producer.send).__name__ == "builtin_function_or_method"
        futures = [producer.send(topic, b"c-0")]  # opens the batch
        futures.append(producer.send(topic, b"c-1"))  # into it
        futures.append(producer.send(topic, value=b"kw-2"))  # by name: the Python send
        futures.append(producer.send(topic, b"h-3", headers=[("h", b"v")]))  # queued
        futures.append(producer.send(topic, b"c-4"))  # behind the queued one
        # The loop's lock held by another thread: the C call cannot take it and
        # hands the record over, which waits for the lock.
        lock = producer._loop_lock.lock
        held = threading.Event()
        release = threading.Event()

        def hold() -> None:
            with lock:
                held.set()
                release.wait(10)

        holder = threading.Thread(target=hold)
        holder.start()
        assert held.wait(10)
        sender = threading.Thread(target=lambda: futures.append(producer.send(topic, b"c-5")))
        sender.start()
        release.set()
        sender.join(10)
        holder.join(10)
        assert len(futures) == 6
        producer.flush()
    offsets = [f.result(timeout=0).offset for f in futures]
    log = {offset: value for _, offset, value in _read_all(bs, topic)}
    assert [log[o] for o in offsets] == [b"c-0", b"c-1", b"kw-2", b"h-3", b"c-4", b"c-5"]
    assert offsets == sorted(offsets)
