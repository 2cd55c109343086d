"""Transactions in brokerlite's cluster mode, in process, against real clients.

Each test serves its own three-node cluster (``serve_cluster``, in the test's trio
loop) on a chroot of the worker's shared ZooKeeper, with a topic of six
partitions and three replicas (each node leads two) and an input topic whose
offsets the transactions commit for a consumer group. A transactional id's
coordinator is the leader of its ``__transaction_state`` partition, a group's
the leader of its ``__consumer_offsets`` partition (three partitions each here);
the tests pick groups coordinated by another node than the transaction, by the
same node, and by the node that stops.

* trafka's SDK: committed and aborted transactions across every partition, two
  with the offsets of a group; while a transaction is open read_committed stops
  before it; afterwards a read_committed consumer sees exactly the committed
  records (read_uncommitted the aborted ones too), the group's committed offsets
  are the committed transaction's (held meanwhile as pending by the group's
  coordinator), every replica holds the same log, and the coordinator is the
  leader of the id's partition, the only broker that loaded the id, and the one
  every broker's FindCoordinator names.
* kafka-python and aiokafka (skipped if the installed version has no
  transactional producer): a committed and an aborted transaction, each with
  group offsets; read back with the client's own read_committed consumer.
* Coordinator failover: the coordinator's broker stops with a transaction open
  (records and group offsets sent, EndTxn not): the commit goes through its
  successor (or, if the client is told to abort, the transaction is done
  again), and exactly the committed transactions are visible, whole. Then a
  WriteTxnMarkers carrying the deposed coordinator's epoch is refused by every
  partition leader (TRANSACTION_COORDINATOR_FENCED) and writes nothing, while
  the successor's epoch passes.
* The coordinator's broker stops right after a commit returned: its successor
  completes the transaction. In one variant the old coordinator is kept from
  sending any marker (a fault made on purpose), so that nothing is visible until
  the successor writes them.
* A producer with the same id initializes at the successor while the old
  producer's transaction is open: that transaction is aborted, the old producer
  fenced; the first node, back and elected again, reloads the id and
  coordinates the next transaction.
* EndTxn and AddPartitionsToTxn sent to a broker that does not coordinate the id:
  NOT_COORDINATOR, and the open transaction is unchanged.
* KIP-890 part 1: a leader that is not the coordinator asks it before appending
  a transactional batch; a hand-built transactional Produce for a partition never
  added is refused (INVALID_TXN_STATE), writing nothing, one for a partition added
  at the coordinator passes; confluent-kafka's transactional producer commits and
  aborts through the three nodes.

Every wait has a deadline; nothing asserts how fast anything happened.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest
import trio
from cluster_helpers import AsyncioThread, raw_request, run, until

from trafka.brokerlite.cluster.controller import coordinator_partition
from trafka.brokerlite.cluster.view import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.brokerlite.transactions.journal import TransactionState
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce_msg
from trafka.codec.messages import k10_find_coordinator as find_coordinator_msg
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions_msg
from trafka.codec.messages import k26_end_txn as end_txn_msg
from trafka.codec.messages import k27_write_txn_markers as markers_msg
from trafka.codec.messages import k28_txn_offset_commit as txn_commit_msg
from trafka.codec.records import encode_batch
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.errors import ProducerFencedError, TransactionAbortableError

pytestmark = pytest.mark.timeout(120)

NODES = 3
TOPIC = "txn-out"
PARTITIONS = 6
INPUT = "txn-in"  # whose offsets the transactions commit for a group
INPUT_PARTITIONS = 3
STATE_PARTITIONS = 3
OFFSETS_PARTITIONS = 3
SETTINGS: dict[str, Any] = {
    "offsets_topic_num_partitions": OFFSETS_PARTITIONS,
    "transaction_state_log_num_partitions": STATE_PARTITIONS,
    "group_initial_rebalance_delay_ms": 0,
}
PER_TXN = 2 * PARTITIONS  # records per transaction: two per partition
WAIT_S = 30.0  # any one wait on the cluster
CLIENT = {"request_timeout_ms": 10_000}

Records = dict[int, list[tuple[bytes, bytes]]]  # partition -> [(key, value)] in log order


# -- records ------------------------------------------------------------------------------------


def txn_records(label: str) -> list[tuple[int, bytes, bytes]]:
    """A transaction's records: ``(partition, key, value)``, two per partition."""
    return [(i % PARTITIONS, b"k%d" % i, f"{label}-{i}".encode()) for i in range(PER_TXN)]


def expected(*labels: str) -> Records:
    """What the partitions hold of the transactions ``labels``, in that order."""
    out: Records = {p: [] for p in range(PARTITIONS)}
    for label in labels:
        for p, key, value in txn_records(label):
            out[p].append((key, value))
    return out


def input_offsets(base: int) -> dict[TopicPartition, int]:
    return {TopicPartition(INPUT, p): base + p for p in range(INPUT_PARTITIONS)}


# -- the cluster --------------------------------------------------------------------------------


def live(cluster: LocalCluster) -> list[int]:
    return [n for n in cluster.node_ids if cluster.running(n)]


async def create_topics(cluster: LocalCluster) -> None:
    """The output and input topics (RF 3), online with full ISRs on every node; every
    node leads some output partition."""
    async with open_admin(bootstrap_servers=cluster.bootstrap_servers, **CLIENT) as admin:
        await admin.create_topics(
            [NewTopic(TOPIC, PARTITIONS, NODES), NewTopic(INPUT, INPUT_PARTITIONS, NODES)]
        )

    await until(
        lambda: (
            leaders(cluster, TOPIC, PARTITIONS, full_isr=True)
            and leaders(cluster, INPUT, INPUT_PARTITIONS, full_isr=True)
        ),
        "the topics are online with full ISRs on every node",
    )
    led = list(leaders(cluster, TOPIC, PARTITIONS).values())
    # Kafka's placement: each node leads two partitions.
    assert sorted(led.count(n) for n in cluster.node_ids) == [2] * NODES, led


def leaders(
    cluster: LocalCluster, topic: str, count: int, *, full_isr: bool = False
) -> dict[int, int]:
    """Each partition's leader, once every live node agrees on the partitions' states
    and each leader knows it leads (with ``full_isr``: every replica in the ISR);
    empty until then."""
    out = {}
    for p in range(count):
        states = {cluster.node(n).broker.cluster.state(topic, p) for n in live(cluster)}
        if len(states) != 1:
            return {}
        [state] = states
        if state is None or not cluster.running(state.leader):
            return {}
        if full_isr and len(state.isr) != NODES:
            return {}
        replica = cluster.node(state.leader).broker.cluster.replicas.replica(topic, p)
        if replica is None or replica.leader != state.leader:
            return {}
        if replica.leader_epoch != state.leader_epoch:
            return {}
        out[p] = state.leader
    return out


def agreed_coordinator(cluster: LocalCluster, key: str, *, transactional: bool) -> int:
    """The coordinator every live node names for ``key``; -1 while they disagree."""
    seen = {
        cluster.node(n).broker.cluster.coordinator(key, transactional=transactional)
        for n in live(cluster)
    }
    return seen.pop() if len(seen) == 1 else -1


def owners(cluster: LocalCluster, tid: str) -> list[int]:
    """The live nodes that have loaded the id's ``__transaction_state`` partition."""
    return [n for n in live(cluster) if cluster.node(n).broker.cluster_txn.owns(tid)]


async def txn_coordinator(cluster: LocalCluster, tid: str, *, not_: int = -1) -> int:
    """Until every live node names one coordinator of ``tid`` (not ``not_``) and that
    node alone has loaded the id; returns it."""

    def settled() -> int | None:
        node = agreed_coordinator(cluster, tid, transactional=True)
        if node < 0 or node == not_ or owners(cluster, tid) != [node]:
            return None
        return node

    return int(await until(settled, f"one coordinator of {tid!r} (not node {not_})"))


def txn_state(cluster: LocalCluster, node: int, tid: str) -> TransactionState | None:
    record = cluster.node(node).broker.txn.record(tid)
    return None if record is None else record.state


async def group_coordinated(
    cluster: LocalCluster, prefix: str, wanted: Callable[[int], bool]
) -> tuple[str, int]:
    """A group id whose coordinator satisfies ``wanted``, and that coordinator
    (``__consumer_offsets`` is created by the first FindCoordinator for a group)."""
    async with open_admin(bootstrap_servers=cluster.bootstrap_servers, **CLIENT) as admin:
        await admin.list_consumer_group_offsets(f"{prefix}-probe")
    await until(
        lambda: leaders(cluster, OFFSETS_TOPIC, OFFSETS_PARTITIONS),
        "every node knows the leaders of __consumer_offsets",
    )
    for i in range(100):
        group = f"{prefix}-{i}"
        node = agreed_coordinator(cluster, group, transactional=False)
        if node >= 0 and wanted(node):
            return group, node
    raise AssertionError("no group id with a coordinator as wanted")


# -- reading back -------------------------------------------------------------------------------


async def wait_settled(bs: str, topic: str = TOPIC, partitions: int = PARTITIONS) -> None:
    """Until no transaction is open on any partition: every last stable offset reached
    its high watermark (the markers of every decided transaction are written)."""
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with (
        open_consumer(bootstrap_servers=bs, isolation_level="read_committed", **CLIENT) as rc,
        open_consumer(bootstrap_servers=bs, isolation_level="read_uncommitted", **CLIENT) as ru,
    ):
        with trio.move_on_after(WAIT_S):
            while True:
                stable, high = await rc.end_offsets(tps), await ru.end_offsets(tps)
                if stable == high:
                    return
                await trio.sleep(0.05)
        raise AssertionError(f"transactions still open: LSOs {stable}, high watermarks {high}")


async def read_all(bs: str, isolation: str, topic: str = TOPIC) -> Records:
    """Every record of ``topic`` from the beginning to its end (the LSO under
    read_committed), per partition in log order."""
    tps = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    out: Records = {p: [] for p in range(PARTITIONS)}
    async with open_consumer(
        bootstrap_servers=bs,
        isolation_level=isolation,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        # Closing waits for the fetch the broker holds at the log's end (one request
        # at a time on a connection, as Kafka answers): 50 ms rather than 500.
        fetch_max_wait_ms=50,
        **CLIENT,
    ) as consumer:
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = await consumer.end_offsets(tps)
        with trio.fail_after(WAIT_S):
            while not all([await consumer.position(tp) >= ends[tp] for tp in tps]):
                for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                    out[tp.partition] += [(r.key, r.value) for r in records]
    return out


async def committed_offsets(bs: str, group: str) -> dict[TopicPartition, int | None]:
    """The group's committed offsets of the input topic, as a read_committed consumer
    reads them (an offset a transaction still holds is waited out: require_stable)."""
    async with open_consumer(
        bootstrap_servers=bs,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        default_api_timeout_ms=20_000,
        **CLIENT,
    ) as consumer:
        return {
            tp: await consumer.committed(tp)
            for tp in (TopicPartition(INPUT, p) for p in range(INPUT_PARTITIONS))
        }


async def check_visible(bs: str, *committed: str) -> None:
    """Exactly the records of the ``committed`` transactions are visible to
    read_committed, each transaction whole, in commit order per partition."""
    await wait_settled(bs)
    got = await read_all(bs, "read_committed")
    want = expected(*committed)
    for p in range(PARTITIONS):
        assert got[p] == want[p], f"partition {p}: read_committed {got[p]}, expected {want[p]}"


# -- raw requests -------------------------------------------------------------------------------


async def find_txn_coordinator(cluster: LocalCluster, node: int, tid: str) -> int:
    answer = await raw_request(
        cluster,
        node,
        10,
        4,
        find_coordinator_msg.FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]),
    )
    [entry] = answer.coordinators
    assert entry.error_code == ErrorCode.NONE, entry
    return int(entry.node_id)


async def create_state_topic(cluster: LocalCluster, tid: str) -> int:
    """Create ``__transaction_state`` (a FindCoordinator for ``tid``, as a client's
    first) and wait for the id's coordinator; returns it."""
    await raw_request(
        cluster,
        live(cluster)[0],
        10,
        4,
        find_coordinator_msg.FindCoordinatorRequest(key_type=1, coordinator_keys=[tid]),
    )
    return await txn_coordinator(cluster, tid)


async def write_markers(
    cluster: LocalCluster,
    node: int,
    *,
    producer_id: int,
    producer_epoch: int,
    coordinator_epoch: int,
    partitions: Iterable[int],
) -> dict[int, ErrorCode]:
    """A COMMIT WriteTxnMarkers (v1) for ``partitions`` of the topic, sent to ``node``;
    the error of each partition."""
    body = markers_msg.WriteTxnMarkersRequest(
        markers=[
            markers_msg.WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transaction_result=True,
                topics=[
                    markers_msg.WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                        name=TOPIC, partition_indexes=sorted(partitions)
                    )
                ],
                coordinator_epoch=coordinator_epoch,
            )
        ]
    )
    answer = await raw_request(cluster, node, 27, 1, body)
    [marker] = answer.markers
    [topic] = marker.topics
    return {p.partition_index: ErrorCode(p.error_code) for p in topic.partitions}


# -- 1. trafka's SDK ----------------------------------------------------------------------------


def test_sdk_transactions_commit_and_abort_across_the_cluster(zk: str) -> None:
    tid = "sdk-txn"

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            async with open_producer(
                bootstrap_servers=bs, transactional_id=tid, linger_ms=5, **CLIENT
            ) as producer:
                await producer.init_transactions()
                coordinator = await txn_coordinator(cluster, tid)
                await check_coordinator(cluster, tid, coordinator)
                # The group's coordinator is another node: the offsets wait there
                # for the marker the transaction's coordinator sends.
                group, group_node = await group_coordinated(
                    cluster, "sdk-group", lambda n: n != coordinator
                )

                async def transaction(label: str, *, commit: bool, offsets: int = -1) -> None:
                    producer.begin_transaction()
                    for p, key, value in txn_records(label):
                        await producer.send(TOPIC, value, key=key, partition=p)
                    await producer.flush()  # in the logs, whatever the outcome
                    if label == "t1":
                        # Open: read_committed stops before it (t0's markers are
                        # written: the coordinator recorded t0 complete).
                        assert await read_all(bs, "read_committed") == expected("t0")
                    if offsets >= 0:
                        await producer.send_offsets_to_transaction(input_offsets(offsets), group)
                        store = cluster.node(group_node).broker.groups.store
                        assert store.pending_partitions(group) == {
                            (INPUT, p) for p in range(INPUT_PARTITIONS)
                        }, "the group's coordinator does not hold the offsets"
                    if commit:
                        await producer.commit_transaction()
                    else:
                        await producer.abort_transaction()

                await transaction("t0", commit=True)
                await until(
                    lambda: (
                        txn_state(cluster, coordinator, tid) is TransactionState.COMPLETE_COMMIT
                    ),
                    "the coordinator records t0 complete",
                )
                await transaction("t1", commit=False)
                await transaction("t2", commit=True, offsets=100)
                await transaction("t3", commit=False, offsets=900)
                await transaction("t4", commit=True)

            await check_visible(bs, "t0", "t2", "t4")
            # The aborted records are in the logs (read_uncommitted sees them).
            everything = await read_all(bs, "read_uncommitted")
            assert everything == expected("t0", "t1", "t2", "t3", "t4")
            assert await committed_offsets(bs, group) == input_offsets(100)
            assert not cluster.node(group_node).broker.groups.store.pending_partitions(group)
            # The coordinator completed the last transaction and is still the one.
            await until(
                lambda: txn_state(cluster, coordinator, tid) is TransactionState.COMPLETE_COMMIT,
                "the coordinator records the last transaction complete",
            )
            await check_coordinator(cluster, tid, coordinator)
            # The markers reached every replica: each holds the same log up to the
            # high watermark, and every follower knows it is all stable.
            await until(lambda: replicas_agree(cluster, TOPIC, PARTITIONS), "replicas agree")

    run(test)


async def check_coordinator(cluster: LocalCluster, tid: str, coordinator: int) -> None:
    """``coordinator`` is the leader of the id's ``__transaction_state`` partition as
    every node sees it, the only node that loaded the id (and has its state in
    memory), and the node every broker's FindCoordinator names."""
    partition = coordinator_partition(tid, STATE_PARTITIONS)
    for n in live(cluster):
        view = cluster.node(n).broker.cluster
        assert view.leader(TRANSACTION_STATE_TOPIC, partition) == coordinator, n
        assert view.coordinator(tid, transactional=True) == coordinator, n
        assert await find_txn_coordinator(cluster, n, tid) == coordinator, n
    assert owners(cluster, tid) == [coordinator]
    loaded = [n for n in live(cluster) if cluster.node(n).broker.txn.record(tid) is not None]
    assert loaded == [coordinator]


def replicas_agree(cluster: LocalCluster, topic: str, partitions: int) -> bool:
    for p in range(partitions):
        contents = set()
        for n in live(cluster):
            plog = cluster.node(n).broker.logs.partition(topic, p)
            if plog.high_watermark != plog.log_end_offset:
                return False
            data = plog.read(plog.log_start_offset, 1 << 30, upper_bound=plog.high_watermark)
            contents.add(data.tobytes())
        if len(contents) != 1:
            return False
    return True


# -- 2. kafka-python and aiokafka ---------------------------------------------------------------


def _transactions_unsupported(client: str) -> str | None:
    """Why ``client`` (as installed) cannot run transactions; None when it can."""
    if client == "kafka-python":
        import kafka
        from kafka import KafkaProducer

        ok = "transactional_id" in KafkaProducer.DEFAULT_CONFIG and all(
            hasattr(KafkaProducer, m)
            for m in ("init_transactions", "begin_transaction", "send_offsets_to_transaction")
        )
        return None if ok else f"kafka-python {kafka.__version__} has no transactional producer"
    import aiokafka
    from aiokafka import AIOKafkaProducer

    ok = "transactional_id" in inspect.signature(AIOKafkaProducer.__init__).parameters and hasattr(
        AIOKafkaProducer, "send_offsets_to_transaction"
    )
    return None if ok else f"aiokafka {aiokafka.__version__} has no transactional producer"


def kafka_python_transactions(bs: str, tid: str, group: str) -> None:
    """Transaction "c" committed (offsets 10+), "x" aborted (offsets 700+), its
    records in the logs before the abort."""
    from kafka import KafkaProducer
    from kafka import TopicPartition as KTopicPartition
    from kafka.structs import OffsetAndMetadata

    def offsets(base: int) -> dict[Any, Any]:
        return {
            KTopicPartition(tp.topic, tp.partition): OffsetAndMetadata(o, "", -1)
            for tp, o in input_offsets(base).items()
        }

    producer = KafkaProducer(
        bootstrap_servers=bs.split(","),
        transactional_id=tid,
        linger_ms=5,
        request_timeout_ms=10_000,
        max_block_ms=30_000,
    )
    try:
        producer.init_transactions()
        for label, commit, base in (("c", True, 10), ("x", False, 700)):
            producer.begin_transaction()
            futures = [
                producer.send(TOPIC, value, key=key, partition=p)
                for p, key, value in txn_records(label)
            ]
            producer.flush(30)
            for future in futures:
                future.get(timeout=1)
            producer.send_offsets_to_transaction(offsets(base), group)
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close(10)


def kafka_python_read_committed(bs: str) -> Records:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTopicPartition

    consumer = KafkaConsumer(
        bootstrap_servers=bs.split(","),
        isolation_level="read_committed",
        enable_auto_commit=False,
        group_id=None,
        auto_offset_reset="earliest",
        request_timeout_ms=10_000,
    )
    out: Records = {p: [] for p in range(PARTITIONS)}
    try:
        tps = [KTopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(tps)
        deadline = time.monotonic() + WAIT_S
        while not all(consumer.position(tp) >= ends[tp] for tp in tps):
            assert time.monotonic() < deadline, f"not at the end within {WAIT_S:g} s: {out}"
            for tp, records in consumer.poll(timeout_ms=200).items():
                out[tp.partition] += [(r.key, r.value) for r in records]
        return out
    finally:
        consumer.close()


async def aiokafka_transactions(bs: str, tid: str, group: str) -> None:
    """As :func:`kafka_python_transactions`, with aiokafka."""
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition as ATopicPartition

    producer = AIOKafkaProducer(
        bootstrap_servers=bs, transactional_id=tid, linger_ms=5, request_timeout_ms=10_000
    )
    await producer.start()
    try:
        for label, commit, base in (("c", True, 10), ("x", False, 700)):
            await producer.begin_transaction()
            futures = [
                await producer.send(TOPIC, value, key=key, partition=p)
                for p, key, value in txn_records(label)
            ]
            await asyncio.gather(*futures)
            offsets = {
                ATopicPartition(tp.topic, tp.partition): o for tp, o in input_offsets(base).items()
            }
            await producer.send_offsets_to_transaction(offsets, group)
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()
    finally:
        await producer.stop()


async def aiokafka_read_committed(bs: str) -> Records:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.structs import TopicPartition as ATopicPartition

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bs,
        isolation_level="read_committed",
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=10_000,
    )
    await consumer.start()
    out: Records = {p: [] for p in range(PARTITIONS)}
    try:
        tps = [ATopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        await consumer.seek_to_beginning()
        ends = await consumer.end_offsets(tps)
        deadline = time.monotonic() + WAIT_S
        while not all([await consumer.position(tp) >= ends[tp] for tp in tps]):
            assert time.monotonic() < deadline, f"not at the end within {WAIT_S:g} s: {out}"
            for tp, records in (await consumer.getmany(timeout_ms=200)).items():
                out[tp.partition] += [(r.key, r.value) for r in records]
        return out
    finally:
        await consumer.stop()


@pytest.mark.parametrize("client", ["kafka-python", "aiokafka"])
def test_peer_clients_commit_and_abort(zk: str, client: str) -> None:
    reason = _transactions_unsupported(client)
    if reason is not None:
        pytest.skip(reason)
    tid = f"{client}-txn"

    async def in_thread(fn: Callable[..., Any], *args: Any) -> Any:
        return await trio.to_thread.run_sync(fn, *args, abandon_on_cancel=True)

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            # The group's coordinator is the transaction's: the coordinator sends the
            # offsets' marker to itself.
            coordinator = await create_state_topic(cluster, tid)
            group, _ = await group_coordinated(
                cluster, f"{client}-group", lambda n: n == coordinator
            )
            loop = AsyncioThread() if client == "aiokafka" else None
            try:
                if loop is None:
                    await in_thread(kafka_python_transactions, bs, tid, group)
                else:
                    await in_thread(loop.run, aiokafka_transactions(bs, tid, group))
                assert await txn_coordinator(cluster, tid) == coordinator
                assert txn_state(cluster, coordinator, tid) in (
                    TransactionState.PREPARE_ABORT,
                    TransactionState.COMPLETE_ABORT,
                )
                await wait_settled(bs)
                if loop is None:
                    seen = await in_thread(kafka_python_read_committed, bs)
                else:
                    seen = await in_thread(loop.run, aiokafka_read_committed(bs))
            finally:
                if loop is not None:
                    with trio.CancelScope(shield=True), trio.move_on_after(15):
                        await trio.to_thread.run_sync(loop.close)
            assert seen == expected("c"), f"{client}'s read_committed consumer read {seen}"
            # The SDK agrees, and its read_uncommitted view shows the aborted records.
            assert await read_all(bs, "read_committed") == expected("c")
            assert await read_all(bs, "read_uncommitted") == expected("c", "x")
            assert await committed_offsets(bs, group) == input_offsets(10)

    run(test)


# -- 3. coordinator failover --------------------------------------------------------------------


def test_commit_goes_through_the_next_coordinator_and_the_old_ones_markers_are_fenced(
    zk: str,
) -> None:
    tid = "failover-txn"

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            async with open_producer(
                bootstrap_servers=bs,
                transactional_id=tid,
                linger_ms=5,
                max_block_ms=30_000,
                retry_backoff_ms=50,
                **CLIENT,
            ) as producer:
                await producer.init_transactions()
                old = await txn_coordinator(cluster, tid)
                old_epoch = cluster.node(old).broker.cluster_txn.coordinator_epoch(tid)
                # The group is coordinated by the node that stops too: its pending
                # offsets must survive in __consumer_offsets.
                group, _ = await group_coordinated(cluster, "failover-group", lambda n: n == old)

                async def send(label: str) -> None:
                    for p, key, value in txn_records(label):
                        await producer.send(TOPIC, value, key=key, partition=p)
                    await producer.flush()

                producer.begin_transaction()
                await send("before")
                await producer.commit_transaction()

                # A transaction whose records and offsets are written, then its
                # coordinator's broker stops before EndTxn.
                producer.begin_transaction()
                await send("open")
                await producer.send_offsets_to_transaction(input_offsets(50), group)
                await cluster.stop_node(old)
                new = await txn_coordinator(cluster, tid, not_=old)
                assert cluster.node(new).broker.cluster_txn.coordinator_epoch(tid) > old_epoch
                # The successor loaded the open transaction from __transaction_state.
                assert txn_state(cluster, new, tid) is TransactionState.ONGOING
                committed = ["before"]
                try:
                    await producer.commit_transaction()
                    committed.append("open")
                except TransactionAbortableError:
                    # Allowed (the client was told to abort): then the transaction
                    # is done again, whole, through the new coordinator.
                    await producer.abort_transaction()
                    producer.begin_transaction()
                    await send("again")
                    await producer.send_offsets_to_transaction(input_offsets(50), group)
                    await producer.commit_transaction()
                    committed.append("again")
                # And one wholly through the new coordinator.
                producer.begin_transaction()
                await send("after")
                await producer.commit_transaction()
                committed.append("after")

            await check_visible(bs, *committed)
            assert await committed_offsets(bs, group) == input_offsets(50)
            new_epoch = cluster.node(new).broker.cluster_txn.coordinator_epoch(tid)
            record = cluster.node(new).broker.txn.record(tid)
            assert record is not None

            # The deposed coordinator's markers (its epoch) are refused by every
            # partition leader, which has seen the successor's; nothing is written.
            by_leader: dict[int, list[int]] = {}
            placed = await until(
                lambda: leaders(cluster, TOPIC, PARTITIONS), "the topic's leaders are settled"
            )
            for p, leader in placed.items():
                by_leader.setdefault(leader, []).append(p)
            ends = log_ends(cluster, placed)
            for leader, partitions in by_leader.items():
                codes = await write_markers(
                    cluster,
                    leader,
                    producer_id=record.producer_id,
                    producer_epoch=record.producer_epoch,
                    coordinator_epoch=old_epoch,
                    partitions=partitions,
                )
                assert codes == dict.fromkeys(
                    partitions, ErrorCode.TRANSACTION_COORDINATOR_FENCED
                ), (leader, codes)
            assert log_ends(cluster, placed) == ends
            # The current coordinator's epoch passes (a marker written twice is harmless).
            for leader, partitions in by_leader.items():
                codes = await write_markers(
                    cluster,
                    leader,
                    producer_id=record.producer_id,
                    producer_epoch=record.producer_epoch,
                    coordinator_epoch=new_epoch,
                    partitions=partitions,
                )
                assert codes == dict.fromkeys(partitions, ErrorCode.NONE), (leader, codes)
            assert log_ends(cluster, placed) == {p: end + 1 for p, end in ends.items()}
            await check_visible(bs, *committed)

    run(test)


def log_ends(cluster: LocalCluster, placed: dict[int, int]) -> dict[int, int]:
    """Each partition's log end offset at its leader (``placed``: partition -> leader)."""
    return {
        p: cluster.node(leader).broker.logs.partition(TOPIC, p).log_end_offset
        for p, leader in placed.items()
    }


@pytest.mark.parametrize("hold_markers", [False, True], ids=["as-it-comes", "markers-held"])
def test_a_commit_returned_is_completed_by_the_next_coordinator(
    zk: str, hold_markers: bool
) -> None:
    tid = "decided-txn"

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            async with open_producer(
                bootstrap_servers=bs, transactional_id=tid, linger_ms=5, **CLIENT
            ) as producer:
                await producer.init_transactions()
                old = await txn_coordinator(cluster, tid)
                group, _ = await group_coordinated(cluster, "decided-group", lambda n: n != old)
                if hold_markers:
                    # The old coordinator sends no marker from now on (its marker
                    # sender asks for the requests to send, and gets none).
                    txn = cluster.node(old).broker.cluster_txn
                    txn.requests = lambda now_ms: []
                producer.begin_transaction()
                for p, key, value in txn_records("decided"):
                    await producer.send(TOPIC, value, key=key, partition=p)
                await producer.send_offsets_to_transaction(input_offsets(7), group)
                await producer.commit_transaction()
                if hold_markers:
                    # Decided (and replicated) but not complete: nothing visible yet.
                    assert txn_state(cluster, old, tid) is TransactionState.PREPARE_COMMIT
                    assert await read_all(bs, "read_committed") == expected()
                await cluster.stop_node(old)
                new = await txn_coordinator(cluster, tid, not_=old)
                await check_visible(bs, "decided")
                assert await committed_offsets(bs, group) == input_offsets(7)
                await until(
                    lambda: txn_state(cluster, new, tid) is TransactionState.COMPLETE_COMMIT,
                    "the new coordinator records the transaction complete",
                )
                # The producer goes on with the new coordinator.
                producer.begin_transaction()
                for p, key, value in txn_records("next"):
                    await producer.send(TOPIC, value, key=key, partition=p)
                await producer.commit_transaction()
            await check_visible(bs, "decided", "next")

    run(test)


def test_a_successor_producer_fences_the_open_transaction_across_coordinators(zk: str) -> None:
    """The coordinator's broker stops with a transaction open; a new producer with the
    same id initializes at the successor, which aborts that transaction (records and
    offsets) and fences the old producer. Then the first node comes back and leads
    the id's partition again (preferred election): it reloads the id and
    coordinates the next transaction."""
    tid = "zombie-txn"

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            async with open_producer(
                bootstrap_servers=bs, transactional_id=tid, linger_ms=5, **CLIENT
            ) as zombie:
                await zombie.init_transactions()
                first = await txn_coordinator(cluster, tid)
                group, _ = await group_coordinated(cluster, "zombie-group", lambda n: n != first)
                zombie.begin_transaction()
                await zombie.send_offsets_to_transaction(input_offsets(1), group)
                await zombie.commit_transaction()
                zombie.begin_transaction()
                for p, key, value in txn_records("zombie"):
                    await zombie.send(TOPIC, value, key=key, partition=p)
                await zombie.flush()
                await zombie.send_offsets_to_transaction(input_offsets(60), group)
                await cluster.stop_node(first)
                second = await txn_coordinator(cluster, tid, not_=first)
                async with open_producer(
                    bootstrap_servers=bs, transactional_id=tid, linger_ms=5, **CLIENT
                ) as successor:
                    await successor.init_transactions()
                    successor.begin_transaction()
                    for p, key, value in txn_records("successor"):
                        await successor.send(TOPIC, value, key=key, partition=p)
                    await successor.commit_transaction()
                with pytest.raises(ProducerFencedError):
                    await zombie.commit_transaction()
            await check_visible(bs, "successor")
            # The aborted transaction's offsets were dropped: the first ones stay.
            assert await committed_offsets(bs, group) == input_offsets(1)

            # The first node back, and leading the id's partition again.
            await cluster.start_node(first)
            partition = coordinator_partition(tid, STATE_PARTITIONS)
            await until(
                lambda: all(
                    len(
                        cluster.node(n).broker.cluster.state(TRANSACTION_STATE_TOPIC, partition).isr
                    )
                    == NODES
                    for n in live(cluster)
                ),
                "the first node is back in the ISR of the id's partition",
            )
            async with open_admin(bootstrap_servers=cluster.bootstrap_servers, **CLIENT) as admin:
                elected = await admin.elect_leaders([(TRANSACTION_STATE_TOPIC, partition)])
            assert list(elected.values()) == [None], elected
            assert first != second
            assert await txn_coordinator(cluster, tid) == first
            assert txn_state(cluster, first, tid) is TransactionState.COMPLETE_COMMIT
            async with open_producer(
                bootstrap_servers=cluster.bootstrap_servers,
                transactional_id=tid,
                linger_ms=5,
                **CLIENT,
            ) as third:
                await third.init_transactions()
                third.begin_transaction()
                for p, key, value in txn_records("third"):
                    await third.send(TOPIC, value, key=key, partition=p)
                await third.send_offsets_to_transaction(input_offsets(30), group)
                await third.commit_transaction()
            await check_visible(cluster.bootstrap_servers, "successor", "third")
            assert await committed_offsets(cluster.bootstrap_servers, group) == input_offsets(30)

    run(test)


# -- 4. requests to the wrong broker ------------------------------------------------------------


def test_transaction_requests_to_a_broker_that_does_not_coordinate_get_not_coordinator(
    zk: str,
) -> None:
    tid = "elsewhere-txn"

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            async with open_producer(
                bootstrap_servers=bs, transactional_id=tid, linger_ms=5, **CLIENT
            ) as producer:
                await producer.init_transactions()
                coordinator = await txn_coordinator(cluster, tid)
                others = [n for n in cluster.node_ids if n != coordinator]
                # A transaction open on partition 0 only.
                producer.begin_transaction()
                await producer.send_and_wait(TOPIC, b"open", key=b"k", partition=0)
                before = cluster.node(coordinator).broker.txn.record(tid)
                assert before is not None and before.state is TransactionState.ONGOING
                assert before.partitions == ((TOPIC, 0),)
                pid, epoch = before.producer_id, before.producer_epoch

                end = end_txn_msg.EndTxnRequest(
                    transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
                )
                topics = [
                    add_partitions_msg.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                        name=TOPIC, partitions=[1, 2]
                    )
                ]
                add_v3 = add_partitions_msg.AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=tid,
                    v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch,
                    v3_and_below_topics=topics,
                )
                add_v4 = add_partitions_msg.AddPartitionsToTxnRequest(
                    transactions=[
                        add_partitions_msg.AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction(
                            transactional_id=tid,
                            producer_id=pid,
                            producer_epoch=epoch,
                            topics=topics,
                        )
                    ]
                )
                for node in others:
                    for version in (0, 3, 5):
                        answer = await raw_request(cluster, node, 26, version, end)
                        assert answer.error_code == ErrorCode.NOT_COORDINATOR, (node, answer)
                    answer = await raw_request(cluster, node, 24, 3, add_v3)
                    codes = [
                        r.partition_error_code
                        for t in answer.results_by_topic_v3_and_below
                        for r in t.results_by_partition
                    ]
                    assert codes == [ErrorCode.NOT_COORDINATOR] * 2, (node, answer)
                    answer = await raw_request(cluster, node, 24, 4, add_v4)
                    assert answer.error_code == ErrorCode.NOT_COORDINATOR, (node, answer)
                # Nothing changed at the coordinator: still open, on partition 0 only.
                assert cluster.node(coordinator).broker.txn.record(tid) == before
                # The coordinator itself does answer them (an unknown producer id
                # shows the request was examined there).
                wrong = end_txn_msg.EndTxnRequest(
                    transactional_id=tid, producer_id=pid + 1, producer_epoch=epoch, committed=True
                )
                answer = await raw_request(cluster, coordinator, 26, 3, wrong)
                assert answer.error_code == ErrorCode.INVALID_PRODUCER_ID_MAPPING, answer
                await producer.commit_transaction()
            await wait_settled(bs)
            got = await read_all(bs, "read_committed")
            assert got == {p: [(b"k", b"open")] if p == 0 else [] for p in range(PARTITIONS)}

    run(test)


def test_markers_on_partitions_without_followers_are_answered_at_once(zk: str) -> None:
    """On a replication-factor-1 topic a marker is on the ISR as soon as it is
    written, and no later append wakes its WriteTxnMarkers: it is answered at once.
    (It used to wait its 30 s timeout, and the next transaction of the id got
    CONCURRENT_TRANSACTIONS meanwhile.)"""

    async def main() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            single = "txn-rf1"
            async with open_admin(bootstrap_servers=bs, **CLIENT) as admin:
                await admin.create_topics([NewTopic(single, PARTITIONS, 1)])
            async with open_producer(
                bootstrap_servers=bs, transactional_id="rf1", **CLIENT
            ) as producer:
                with trio.fail_after(20):  # three transactions, far under the timeout
                    for t in range(3):
                        async with producer.transaction():
                            for p in range(PARTITIONS):
                                await producer.send(single, b"%d-%d" % (t, p), partition=p)
            await wait_settled(bs, single, PARTITIONS)
            got = await read_all(bs, "read_committed", single)
            assert sorted(v for rs in got.values() for _, v in rs) == sorted(
                b"%d-%d" % (t, p) for t in range(3) for p in range(PARTITIONS)
            )

    trio.run(main)


# -- 5. KIP-890 part 1: the leader verifies with the coordinator ---------------------------------


async def produce_transactional(
    cluster: LocalCluster, node: int, tid: str, pid: int, epoch: int, partition: int
) -> tuple[ErrorCode, str | None]:
    """A hand-built transactional Produce (v9, acks=all) of one record to ``partition``
    of the topic, sent to ``node``; the partition's error and message."""
    batch = encode_batch(
        [(int(time.time() * 1000), b"k", b"forged", [])],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
        is_transactional=True,
    )
    body = produce_msg.ProduceRequest(
        transactional_id=tid,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[
            produce_msg.ProduceRequest.TopicProduceData(
                name=TOPIC,
                partition_data=[
                    produce_msg.ProduceRequest.PartitionProduceData(index=partition, records=batch)
                ],
            )
        ],
    )
    answer = await raw_request(cluster, node, 0, 9, body)
    [topic] = answer.responses
    [result] = topic.partition_responses
    return ErrorCode(result.error_code), result.error_message


def test_a_leader_verifies_transactional_produce_with_the_coordinator_elsewhere(zk: str) -> None:
    """KIP-890 part 1: a partition leader asks the transaction coordinator (another
    broker) with AddPartitionsToTxn v4 ``verify_only`` before appending a
    transactional batch; a partition never added to the producer's ongoing
    transaction is refused with INVALID_TXN_STATE and nothing is written, one added
    through the coordinator (unknown to the leader until it asks) is appended."""
    tid = "verified-txn"

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            led = leaders(cluster, TOPIC, PARTITIONS)
            async with open_producer(
                bootstrap_servers=bs, transactional_id=tid, linger_ms=5, **CLIENT
            ) as producer:
                await producer.init_transactions()
                coordinator = await txn_coordinator(cluster, tid)
                elsewhere = [p for p in range(1, PARTITIONS) if led[p] != coordinator]
                never_added, added = elsewhere[0], elsewhere[1]
                producer.begin_transaction()
                await producer.send_and_wait(TOPIC, b"open", key=b"k", partition=0)
                record = cluster.node(coordinator).broker.txn.record(tid)
                assert record is not None and record.partitions == ((TOPIC, 0),)
                pid, epoch = record.producer_id, record.producer_epoch

                leader = led[never_added]
                verifier = cluster.node(leader).broker.txn_verification
                asked = verifier.asked
                code, message = await produce_transactional(
                    cluster, leader, tid, pid, epoch, never_added
                )
                assert code == ErrorCode.INVALID_TXN_STATE, (code, message)
                assert verifier.asked > asked  # the coordinator was asked
                for n in cluster.node_ids:
                    log = cluster.node(n).broker.logs.partition(TOPIC, never_added)
                    assert log.log_end_offset == 0, (n, log.log_end_offset)

                # Added at the coordinator (as a client's AddPartitionsToTxn does): the
                # leader has no open transaction of the producer there, asks, appends.
                add = add_partitions_msg.AddPartitionsToTxnRequest(
                    v3_and_below_transactional_id=tid,
                    v3_and_below_producer_id=pid,
                    v3_and_below_producer_epoch=epoch,
                    v3_and_below_topics=[
                        add_partitions_msg.AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(
                            name=TOPIC, partitions=[added]
                        )
                    ],
                )
                answer = await raw_request(cluster, coordinator, 24, 3, add)
                [[result]] = [t.results_by_partition for t in answer.results_by_topic_v3_and_below]
                assert result.partition_error_code == ErrorCode.NONE, answer
                leader = led[added]
                verifier = cluster.node(leader).broker.txn_verification
                asked = verifier.asked
                code, message = await produce_transactional(cluster, leader, tid, pid, epoch, added)
                assert code == ErrorCode.NONE, (code, message)
                assert verifier.asked > asked
                await producer.commit_transaction()
            await wait_settled(bs)
            got = await read_all(bs, "read_committed")
            want = {p: [] for p in range(PARTITIONS)}
            want[0] = [(b"k", b"open")]
            want[added] = [(b"k", b"forged")]
            assert got == want

    run(test)


def test_confluent_transactional_producer_is_verified_across_the_cluster(zk: str) -> None:
    """librdkafka's transactional producer through three nodes, every partition
    written (four of six are led by a broker that is not the coordinator, which
    verifies each transaction's first batch with it): the committed transaction is
    read whole, the aborted one not at all."""
    confluent_kafka = pytest.importorskip("confluent_kafka")
    tid = "confluent-verified"

    def transactions(bs: str) -> None:
        producer = confluent_kafka.Producer(
            {"bootstrap.servers": bs, "transactional.id": tid, "linger.ms": 5}
        )
        producer.init_transactions(30)
        for label, commit in (("committed", True), ("aborted", False)):
            producer.begin_transaction()
            for p, key, value in txn_records(label):
                producer.produce(TOPIC, value=value, key=key, partition=p)
            producer.flush(30)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            await trio.to_thread.run_sync(transactions, bs)
            coordinator = await txn_coordinator(cluster, tid)
            others = [n for n in cluster.node_ids if n != coordinator]
            assert all(cluster.node(n).broker.txn_verification.asked > 0 for n in others)
            await wait_settled(bs)
            assert await read_all(bs, "read_committed") == expected("committed")

    run(test)


def test_a_group_coordinator_verifies_txn_offset_commit_with_the_coordinator_elsewhere(
    zk: str,
) -> None:
    """KIP-890 part 1 for offsets (Kafka's GroupCoordinator.handleTxnCommitOffsets
    since 3.6): the group's coordinator, another broker than the transaction's,
    asks the transaction coordinator whether the group's ``__consumer_offsets``
    partition is in the producer's ongoing transaction before it holds the
    offsets. A TxnOffsetCommit for a group the transaction never added
    (AddOffsetsToTxn) is refused with INVALID_TXN_STATE and holds nothing, so a
    read_committed OffsetFetch stays stable; the same group added through the
    producer is committed."""
    tid = "verified-offsets"

    async def test() -> None:
        async with serve_cluster(NODES, zookeeper_connect=zk, **SETTINGS) as cluster:
            bs = cluster.bootstrap_servers
            await create_topics(cluster)
            async with open_producer(
                bootstrap_servers=bs, transactional_id=tid, linger_ms=5, **CLIENT
            ) as producer:
                await producer.init_transactions()
                coordinator = await txn_coordinator(cluster, tid)
                group, at = await group_coordinated(cluster, "vg", lambda n: n != coordinator)
                producer.begin_transaction()
                await producer.send_and_wait(TOPIC, b"open", key=b"k", partition=0)
                record = cluster.node(coordinator).broker.txn.record(tid)
                assert record is not None
                verifier = cluster.node(at).broker.txn_verification
                asked = verifier.asked
                T = txn_commit_msg.TxnOffsetCommitRequest
                forged = T(
                    transactional_id=tid,
                    group_id=group,
                    producer_id=record.producer_id,
                    producer_epoch=record.producer_epoch,
                    topics=[
                        T.TxnOffsetCommitRequestTopic(
                            name=TOPIC,
                            partitions=[
                                T.TxnOffsetCommitRequestPartition(
                                    partition_index=0, committed_offset=7
                                )
                            ],
                        )
                    ],
                )
                answer = await raw_request(cluster, at, 28, 3, forged)
                [[part]] = [t.partitions for t in answer.topics]
                assert part.error_code == ErrorCode.INVALID_TXN_STATE, answer
                assert verifier.asked > asked  # the coordinator was asked
                await producer.send_offsets_to_transaction({TopicPartition(TOPIC, 0): 1}, group)
                await producer.commit_transaction()
            async with open_consumer(
                bootstrap_servers=bs, group_id=group, isolation_level="read_committed"
            ) as consumer:
                assert await consumer.committed(TopicPartition(TOPIC, 0)) == 1

    run(test)
