"""Transactions in a brokerlite cluster survive ``kill -9`` of their coordinator's broker.

Three broker processes (:class:`ClusterProcesses`, a private ZooKeeper). A
confluent-kafka transactional producer runs transaction after transaction: each
writes ``RECORDS`` records across the six partitions of a topic (RF 3,
``min.insync.replicas=2``), adds a consumer group's offset for an input
partition (``send_offsets_to_transaction``, the consume-transform-produce step;
see below for the group),
and commits, except every third, which it aborts. Meanwhile the test kills the
broker coordinating the transactional id (the leader of its
``__transaction_state`` partition) with SIGKILL, twice, restarting it in
between. Then a read_committed consumer reads everything back:

* every transaction is visible whole or not at all;
* every transaction whose commit returned is visible, every one aborted is not
  (one whose commit failed with the coordinator's death may be either);
* a transaction's group offset is committed exactly when its records are visible.

Each transaction commits the offset of a group of its own: librdkafka (2.16)
caches a group's coordinator, and when that broker vanishes from the cluster's
metadata, ``send_offsets_to_transaction`` for the group can wait for it
indefinitely, past the call's timeout (confluentinc/librdkafka#5511 and
#5456). A new group is looked up afresh. It also makes the check sharper:
each transaction's offset is visible exactly when its records are.

After an abort in which librdkafka purged messages, the producer is replaced
(``init_transactions`` bumps its epoch). librdkafka's abort purges the queued
messages, retries included, and moves the partition's base message id past them
so that their sequence numbers go to the next transaction's first messages
(``rd_kafka_toppar_purge_queues``, ``RD_KAFKA_PURGE_F_ABORT_TXN``). A retry
queued because the leader died mid-request may have been written by the old
leader and replicated to the new one: the next transaction's batch then arrives
with the same epoch and sequence range as a batch in the log, which a broker
acknowledges as a duplicate without writing it (Kafka's ``ProducerStateEntry``
dedup: same epoch, first and last sequence). That transaction commits without
the record while librdkafka reports it delivered, with any Kafka-compatible
broker. A new epoch makes every earlier batch a non-duplicate.

The reader reads every partition up to its end once no transaction is open
(the read_committed end offset equals the high watermark), so a partition whose
leader moved cannot be taken for a partly visible transaction; a failure names
each missing record's delivery report and what the log holds at its offset.

The same runs with trafka's SDK as the producer (a blocking producer in a
thread), once: the cluster finalizes ``transaction.version`` 2 (KIP-890 part
2), which the SDK follows and librdkafka (2.16) does not. The SDK's
transactions add their partitions with Produce v12 at each leader and their
offsets with TxnOffsetCommit v5 at the group's coordinator, and every commit
and abort bumps the epoch (EndTxn v5); the killed coordinator's successor
finishes its decisions with the bumped epoch (WriteTxnMarkers v2) and a
marker it sends again to a partition that has it is written again (Kafka's
KAFKA-19999). librdkafka's run keeps transaction version 1 on that cluster,
where a fence is decided as version 2 decides it.

Every wait has a deadline; nothing asserts how fast anything happened.
"""

from __future__ import annotations

import collections
import threading
import time
from pathlib import Path
from typing import Any, NamedTuple

import pytest
import trio
from cluster_helpers import wait_for
from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Message,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.dev.local_cluster import ClusterProcesses
from trafka.brokerlite.dev.zookeeper_server import zookeeper_available
from trafka.sdk import TopicPartition as SdkTopicPartition
from trafka.sdk import blocking, open_admin
from trafka.sdk.errors import TrafkaError, TransactionAbortableError

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        not zookeeper_available(),
        reason="ZooKeeper not found (apt-get install zookeeper, or set TRAFKA_ZOOKEEPER_CLASSPATH)",
    ),
]

TOPIC = "txn-out"
INPUT = "txn-in"
GROUP = "txn-group"
TXN_ID = "txn-durable"
PARTITIONS = 6
RECORDS = 12  # per transaction, two per partition
STATE_PARTITIONS = 3
KILLS = 2


class Delivery(NamedTuple):
    """librdkafka's delivery report of record ``i`` of a transaction: its error name
    ("" when delivered), partition and offset (-1 when none)."""

    i: int
    error: str
    partition: int
    offset: int


class Transactions:
    """The producer thread: transaction ``n`` writes values ``t<n>-<i>`` and the
    input offset ``n + 1``; every third is aborted. Outcomes are noted per ``n``:
    "commit" (commit returned), "abort" (abort returned) or "unknown" (the
    transaction failed midway and was aborted or fenced: either outcome may have
    been decided). Delivery reports are kept per ``n``; ``renewed`` lists the
    aborted transactions after which the producer was replaced because
    librdkafka purged some of their messages (see the module's docstring)."""

    def __init__(self, bootstrap: str) -> None:
        self.bootstrap = bootstrap
        self.outcomes: dict[int, str] = {}
        self.deliveries: dict[int, list[Delivery]] = collections.defaultdict(list)
        self.renewed: list[int] = []
        self.errors: list[str] = []
        self.stop = threading.Event()
        self.dead = False
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _producer(self) -> Producer:
        producer = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": TXN_ID,
                "transaction.timeout.ms": 30000,
                "message.timeout.ms": 30000,
            },
        )
        producer.init_transactions(60)
        return producer

    def committed(self) -> int:
        if self.dead:
            raise AssertionError("; ".join(self.errors))
        return sum(1 for o in self.outcomes.values() if o == "commit")

    def _run(self) -> None:
        try:
            self._transactions()
        except BaseException as exc:
            self.errors.append(f"the producer thread died: {exc!r}")
            self.dead = True
            raise

    def _report(self, n: int, i: int) -> Any:
        """The delivery callback of record ``i`` of transaction ``n``."""

        def delivered(err: KafkaError | None, msg: Message) -> None:
            name = "" if err is None else err.name()
            offset = msg.offset()  # None for a message that was never written (purged)
            where = (msg.partition(), -1 if offset is None else offset)
            self.deliveries[n].append(Delivery(i, name, *where))

        return delivered

    def _renewed_if_purged(self, producer: Producer, n: int) -> Producer:
        """After aborting ``n``: a new producer, hence a new epoch, when librdkafka
        purged any of its messages, so that no sequence number of a purged retry,
        which the old leader may have written, is used again."""
        producer.poll(0)  # the purged messages' reports, should any be left
        if any(d.error == "_PURGE_QUEUE" for d in self.deliveries[n]):
            self.renewed.append(n)
            return self._producer()
        return producer

    def _transactions(self) -> None:
        producer = self._producer()
        n = 0
        while not self.stop.is_set():
            try:
                producer.begin_transaction()
                for i in range(RECORDS):
                    producer.produce(
                        TOPIC,
                        key=b"k%d" % i,
                        value=b"t%d-%d" % (n, i),
                        on_delivery=self._report(n, i),
                    )
                producer.send_offsets_to_transaction(
                    [TopicPartition(INPUT, 0, n + 1)], group_metadata(group_of(n)), 60
                )
                if n % 3 == 2:
                    producer.abort_transaction(60)
                    self.outcomes[n] = "abort"
                    producer = self._renewed_if_purged(producer, n)
                else:
                    producer.commit_transaction(60)
                    self.outcomes[n] = "commit"
            except KafkaException as exc:
                error = exc.args[0]
                self.errors.append(str(error))
                self.outcomes[n] = "unknown"
                if error.txn_requires_abort():
                    try:
                        producer.abort_transaction(60)
                    except KafkaException as again:
                        self.errors.append(f"abort: {again.args[0]}")
                        producer = self._producer()
                    else:
                        producer = self._renewed_if_purged(producer, n)
                else:
                    # Fatal or retriable-at-the-top: start over; init fences the old epoch.
                    producer = self._producer()
            n += 1
        producer.flush(30)


class SdkTransactions(Transactions):
    """The producer thread with trafka's blocking SDK producer (transaction
    version 2, the cluster's finalized level): the same transactions and
    outcomes. An abortable error aborts and goes on; any other error (a fence,
    a timeout) replaces the producer, whose ``init_transactions`` fences what
    the old one left. It reports no deliveries (nothing is purged: an abort's
    records fail with the transaction)."""

    def _sdk_producer(self) -> blocking.Producer:
        producer = blocking.Producer(
            bootstrap_servers=self.bootstrap,
            transactional_id=TXN_ID,
            transaction_timeout_ms=30000,
            delivery_timeout_ms=30000,
            request_timeout_ms=10000,
        )
        producer.init_transactions()
        return producer

    def _renew(self, producer: blocking.Producer) -> blocking.Producer:
        try:
            producer.close()
        except TrafkaError as exc:
            self.errors.append(f"close: {exc!r}")
        return self._sdk_producer()

    def _transactions(self) -> None:
        producer = self._sdk_producer()
        n = 0
        while not self.stop.is_set():
            try:
                producer.begin_transaction()
                for i in range(RECORDS):
                    producer.send(TOPIC, b"t%d-%d" % (n, i), key=b"k%d" % i)
                producer.send_offsets_to_transaction(
                    {SdkTopicPartition(INPUT, 0): n + 1}, group_of(n)
                )
                if n % 3 == 2:
                    producer.abort_transaction()
                    self.outcomes[n] = "abort"
                else:
                    producer.commit_transaction()
                    self.outcomes[n] = "commit"
            except TransactionAbortableError as exc:
                self.errors.append(repr(exc))
                self.outcomes[n] = "unknown"
                try:
                    producer.abort_transaction()
                except TrafkaError as again:
                    self.errors.append(f"abort: {again!r}")
                    producer = self._renew(producer)
            except TrafkaError as exc:
                self.errors.append(repr(exc))
                self.outcomes[n] = "unknown"
                producer = self._renew(producer)
            n += 1
        try:
            producer.close()
        except TrafkaError as exc:
            self.errors.append(f"close: {exc!r}")


def by_transaction(values: list[bytes]) -> dict[int, collections.Counter[int]]:
    """Values ``t<n>-<i>`` counted by transaction ``n`` and record ``i``."""
    found: dict[int, collections.Counter[int]] = collections.defaultdict(collections.Counter)
    for value in values:
        n, i = (int(x) for x in value.decode()[1:].split("-"))
        found[n][i] += 1
    return found


def group_of(n: int) -> str:
    return f"{GROUP}-{n}"


def group_metadata(group: str) -> Any:
    consumer = Consumer({"bootstrap.servers": "127.0.0.1:1", "group.id": group})
    try:
        return consumer.consumer_group_metadata()
    finally:
        consumer.close()


def committed_offset(bootstrap: str, group: str) -> int:
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return reader.committed([TopicPartition(INPUT, 0)], timeout=30)[0].offset
    finally:
        reader.close()


def transaction_epoch(bootstrap: str) -> int:
    """The transactional id's producer epoch at its coordinator (DescribeTransactions)."""

    async def describe() -> int:
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            found = await admin.describe_transactions([TXN_ID])
        return found[TXN_ID].producer_epoch

    return trio.run(describe)


def broker_logs(cluster: ClusterProcesses) -> str:
    return "\n".join(f"--- node {n} ---\n{cluster.log_tail(n, 40)}" for n in (1, 2, 3))


def coordinator_of(admin: AdminClient) -> int | None:
    """The leader of the transactional id's ``__transaction_state`` partition."""
    try:
        md = admin.list_topics("__transaction_state", timeout=5)
    except KafkaException:
        return None
    topic = md.topics.get("__transaction_state")
    if topic is None or topic.error is not None or len(topic.partitions) != STATE_PARTITIONS:
        return None
    leader = topic.partitions[coordinator_partition(TXN_ID, STATE_PARTITIONS)].leader
    return leader if leader >= 0 else None


class Read(NamedTuple):
    """A record the reader read: where, and its value."""

    partition: int
    offset: int
    value: bytes


def _consumer(bootstrap: str, isolation: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "txn-reader",
            "isolation.level": isolation,
            "enable.auto.commit": False,
        }
    )


def settled_ends(bootstrap: str) -> dict[int, int]:
    """Every partition's end offset once no transaction is open on any: its
    read_committed end (the last stable offset) equals its high watermark. The
    producer has stopped, so only markers still on their way can hold one back."""
    committed, uncommitted = (
        _consumer(bootstrap, "read_committed"),
        _consumer(bootstrap, "read_uncommitted"),
    )

    def probe() -> dict[int, int] | None:
        ends: dict[int, int] = {}
        try:
            for p in range(PARTITIONS):
                tp = TopicPartition(TOPIC, p)
                stable = committed.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                high = uncommitted.get_watermark_offsets(tp, timeout=10, cached=False)[1]
                if stable != high:
                    return None
                ends[p] = high
        except KafkaException:
            return None
        return ends

    try:
        return wait_for("no open transaction on any partition", probe, 90)
    finally:
        committed.close()
        uncommitted.close()


def read_committed(bootstrap: str, ends: dict[int, int]) -> tuple[list[Read], dict[int, int]]:
    """What a read_committed consumer reads of every partition up to ``ends``, and
    where it stopped (its position on each partition; it moves past markers)."""
    consumer = _consumer(bootstrap, "read_committed")
    consumer.assign([TopicPartition(TOPIC, p, OFFSET_BEGINNING) for p in ends])
    seen: list[Read] = []
    positions = dict.fromkeys(ends, -1)
    deadline = time.monotonic() + 90
    try:
        while time.monotonic() < deadline:
            message = consumer.poll(0.5)
            if message is not None and not message.error():
                seen.append(Read(message.partition(), message.offset(), message.value()))
                continue
            at = consumer.position([TopicPartition(TOPIC, p) for p in ends])
            positions = {tp.partition: tp.offset for tp in at}
            if all(positions[p] >= end for p, end in ends.items()):
                break
    finally:
        consumer.close()
    return seen, positions


def value_at(bootstrap: str, partition: int, offset: int) -> str:
    """What a read_uncommitted consumer finds at ``offset`` (for a failure's message)."""
    consumer = _consumer(bootstrap, "read_uncommitted")
    consumer.assign([TopicPartition(TOPIC, partition, offset)])
    try:
        for _ in range(20):
            message = consumer.poll(0.5)
            if message is None or message.error():
                continue
            if message.offset() == offset:
                return repr(message.value())
            return f"no data record (the next, at {message.offset()}: {message.value()!r})"
        return "nothing read"
    finally:
        consumer.close()


def partly_visible(n: int, seen: list[Read], txns: Transactions, bootstrap: str) -> str:
    """Why transaction ``n`` is partly visible, as far as the client can tell: its
    outcome, where its records were read, and each missing record's delivery
    report and what its offset holds."""
    prefix = b"t%d-" % n
    read = {
        int(r.value[len(prefix) :]): (r.partition, r.offset)
        for r in seen
        if r.value.startswith(prefix)
    }
    lines = [
        f"transaction {n} ({txns.outcomes.get(n)}) partly visible: read (partition, offset) {read}"
    ]
    reports = {d.i: d for d in txns.deliveries.get(n, [])}
    for i in sorted(set(range(RECORDS)) - set(read)):
        d = reports.get(i)
        if d is None:
            lines.append(f"  record {i}: no delivery report")
            continue
        held = value_at(bootstrap, d.partition, d.offset) if d.offset >= 0 else "-"
        lines.append(
            f"  record {i}: reported {d.error or 'delivered'} at partition {d.partition}"
            f" offset {d.offset}; read_uncommitted finds there {held}"
        )
    return "\n".join(lines)


def check_all_or_nothing(
    seen: list[Read], positions: dict[int, int], ends: dict[int, int], txns: Transactions, bs: str
) -> dict[int, collections.Counter[int]]:
    """Every transaction read is whole and read once; returns them by transaction."""
    where = f"positions {positions}, ends {ends}, producer replaced after {txns.renewed}"
    assert all(positions[p] >= end for p, end in ends.items()), f"the reader stopped short: {where}"
    by_txn = by_transaction([r.value for r in seen])
    for n, counts in sorted(by_txn.items()):
        assert set(counts) == set(range(RECORDS)), f"{partly_visible(n, seen, txns, bs)}\n{where}"
        assert all(c == 1 for c in counts.values()), f"transaction {n} duplicated: {counts}"
    return by_txn


@pytest.mark.parametrize(
    ("client", "kills"),
    [("confluent-kafka", KILLS), ("trafka-sdk", 1)],
    ids=["confluent-kafka-tv1", "trafka-sdk-tv2"],
)
def test_transactions_are_all_or_nothing_across_kill_9_of_their_coordinator(
    tmp_path: Path, zk: str, client: str, kills: int
) -> None:
    cluster = ClusterProcesses(
        tmp_path,
        3,
        settings={
            "offsets.topic.num.partitions": 3,
            "transaction.state.log.num.partitions": STATE_PARTITIONS,
            # Neither is what is tested: the reader's group forms at once, and a
            # killed coordinator's session expires after 4 s rather than 6 s (not
            # lower: a loaded machine's live brokers could lose theirs).
            "group.initial.rebalance.delay.ms": 0,
            "zookeeper.session.timeout.ms": 4000,
        },
        # The worker's shared ZooKeeper (a chroot of its own): the brokers are killed, not it.
        zookeeper_connect=zk,
    )
    cluster.start()
    txns: Transactions | None = None
    try:
        bs = cluster.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        futures = admin.create_topics(
            [
                NewTopic(TOPIC, PARTITIONS, 3, config={"min.insync.replicas": "2"}),
                NewTopic(INPUT, 1, 3),
            ]
        )
        for future in futures.values():
            future.result(30)
        txns = Transactions(bs) if client == "confluent-kafka" else SdkTransactions(bs)
        txns.thread.start()
        for kill in range(kills):
            target = txns.committed() + 3
            wait_for(
                f"{target} committed transactions",
                lambda t=target: txns.committed() >= t or None,
                90,
            )
            victim = wait_for("the coordinator", lambda: coordinator_of(admin), 30)
            cluster.kill(victim)
            wait_for(
                "the coordinator to move",
                lambda v=victim: ((c := coordinator_of(admin)) is not None and c != v) or None,
                60,
            )
            cluster.start_node(victim)
            after = txns.committed() + 3
            try:
                wait_for(
                    f"{after} transactions committed after kill {kill + 1} (node {victim})",
                    lambda a=after: txns.committed() >= a or None,
                    120,
                )
            except AssertionError as exc:
                raise AssertionError(f"{exc}\n{txns.errors[-5:]}\n{broker_logs(cluster)}") from None
        txns.stop.set()
        txns.thread.join(120)
        assert not txns.thread.is_alive(), "the producer did not stop"
        outcomes = dict(txns.outcomes)
        committed = {n for n, o in outcomes.items() if o == "commit"}
        aborted = {n for n, o in outcomes.items() if o == "abort"}
        assert len(committed) >= 3 * (kills + 1), outcomes

        # Read every partition to its end once no transaction is open: a
        # transaction of unknown outcome may have committed too, and a partition
        # whose leader moved can lag the others by seconds.
        ends = settled_ends(bs)
        seen, positions = read_committed(bs, ends)
        by_txn = check_all_or_nothing(seen, positions, ends, txns, bs)
        logs = broker_logs(cluster)
        missing = committed - set(by_txn)
        assert not missing, f"committed transactions not visible: {sorted(missing)}\n{logs}"
        visible_aborted = aborted & set(by_txn)
        assert not visible_aborted, f"aborted transactions visible: {sorted(visible_aborted)}"
        if client == "trafka-sdk":
            # Transaction version 2: every commit and abort that returned bumped
            # the epoch (librdkafka's stays at one epoch per producer).
            epoch = transaction_epoch(bs)
            assert epoch >= len(committed) + len(aborted), (epoch, outcomes)

        # A transaction's group offset is committed with its records, or not at all.
        for n in sorted(outcomes):
            offset = committed_offset(bs, group_of(n))
            if n in by_txn:
                assert offset == n + 1, (n, offset, outcomes[n])
            else:
                assert offset < 0, (n, offset, outcomes[n])
    finally:
        if txns is not None:
            txns.stop.set()
        cluster.stop()
