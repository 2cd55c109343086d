"""Transaction version 2 (KIP-890 part 2) on a cluster of brokerlite nodes, as a
Kafka 4.x cluster serves it.

KIP-890 part 2 and Kafka 4.4, what these tests hold the cluster to:

* A new Kafka 4.x cluster finalizes ``transaction.version`` 2 (KIP-584 finalized
  features in ApiVersions v3+); clients use the new flow only when it is
  finalized and Produce v12+ and TxnOffsetCommit v5+ are served (Kafka's
  ``TransactionManager``). Every node of the cluster advertises what Kafka 4.4
  advertises (a differential check against the Kafka 4.4 peer).
* Produce v12+ adds its partition to the transaction: the partition's leader
  asks the coordinator (``AddPartitionsToTxnManager``, ``verify_only`` false for
  ``ADD_PARTITION``); TxnOffsetCommit v5+ has the group's coordinator do the
  same for the group's ``__consumer_offsets`` partition.
* EndTxn v5 bumps the epoch: the markers carry the bumped epoch (sent as
  WriteTxnMarkers v2, KIP-1228, saying so), the answer hands it to the
  producer; a late batch of the old epoch is INVALID_PRODUCER_EPOCH.
* A transaction fenced by a new instance, or timed out, is aborted by the
  coordinator with one epoch bump, decided by the finalized level (Kafka 4.4's
  ``TransactionCoordinator``): the old epoch's EndTxn v5 commit is then
  INVALID_TXN_STATE, its Produce INVALID_PRODUCER_EPOCH.
* ``transaction.version`` is lowered and raised with UpdateFeatures
  (``kafka-features downgrade/upgrade``, Kafka 4.4's own tool here), which
  changes the cluster's level (ZooKeeper's ``/feature``, as Kafka 3.9 kept it)
  for every node, one that was down included; a transaction of version 1 under way
  across the change completes as it began, a version 1 transaction fenced
  after the upgrade is aborted as version 2 decides it, and new producers take
  the new flow.

The coordinator of the transactional ids, the partitions' leaders and the
groups' coordinators are different nodes here (three nodes, each leading two of
the topic's six partitions). The tests share one cluster (a thread of its own
running it in a trio loop; each test's steps run in that loop), each with its
own transactional ids, groups and record labels.

Coordinator failover with version 2 clients: ``test_cluster_transactions.py``
(the SDK, which follows the finalized level) and the ``kill -9`` test in
``test_cluster_transactions_durability.py``; Kafka's Java client:
``test_interop_java.py``'s cluster run.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster_helpers import raw_request, raw_request_to, until
from test_cluster_transactions import (
    CLIENT,
    INPUT,
    NODES,
    PARTITIONS,
    SETTINGS,
    TOPIC,
    create_topics,
    group_coordinated,
    leaders,
    live,
    read_all,
    txn_coordinator,
    txn_records,
    txn_state,
    wait_settled,
)

from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.brokerlite.transactions.journal import TransactionState
from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as produce_msg
from trafka.codec.messages import k18_api_versions as api_versions
from trafka.codec.messages import k22_init_producer_id as init_msg
from trafka.codec.messages import k24_add_partitions_to_txn as add_partitions_msg
from trafka.codec.messages import k26_end_txn as end_txn_msg
from trafka.codec.messages import k28_txn_offset_commit as txn_commit_msg
from trafka.codec.messages import k57_update_features as features_msg
from trafka.codec.records import encode_batch, iter_batches
from trafka.sdk import TopicPartition, open_consumer, open_producer

pytestmark = pytest.mark.timeout(180)

TV = "transaction.version"
STEP_S = 90.0  # one test's steps in the cluster's loop
# The expiry of a timed-out transaction is what one test waits for.
# The leaders ask a coordinator busy with a producer's markers again for up to 30 s
# (Kafka's default: 100 ms), so that a test can hold the markers while it looks.
TXN_SETTINGS = {
    **SETTINGS,
    "transaction_remove_expired_transaction_cleanup_interval_ms": 1000,
    "add_partitions_to_txn_retry_backoff_max_ms": 30_000,
}


class SharedCluster:
    """Three nodes served in a thread's trio loop for the whole module; a test's
    steps run in that loop (:meth:`run`)."""

    def __init__(self, zookeeper_connect: str, data_dir: Path) -> None:
        self._zk = zookeeper_connect
        self._dir = data_dir
        self._ready = threading.Event()
        self._failure: BaseException | None = None
        self._token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self.cluster: LocalCluster | None = None
        self._thread = threading.Thread(target=self._main, name="txn-v2-cluster", daemon=True)

    @property
    def zookeeper_connect(self) -> str:
        return self._zk

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(120) or self._failure is not None:
            raise AssertionError(f"the cluster did not start: {self._failure!r}")

    def _main(self) -> None:
        try:
            trio.run(self._serve)
        except BaseException as exc:  # reported by start() or stop()
            self._failure = exc
        finally:
            self._ready.set()

    async def _serve(self) -> None:
        self._token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with serve_cluster(
            NODES, zookeeper_connect=self._zk, data_dir=self._dir, **TXN_SETTINGS
        ) as cluster:
            await cluster.wait_formed()
            await create_topics(cluster)
            self.cluster = cluster
            self._ready.set()
            await self._stop.wait()

    def run(self, steps: Callable[[LocalCluster], Awaitable[None]]) -> None:
        """Run ``steps(cluster)`` in the cluster's loop, within :data:`STEP_S`."""
        cluster = self.cluster
        assert cluster is not None and self._token is not None

        async def bounded() -> None:
            with trio.fail_after(STEP_S):
                await steps(cluster)

        trio.from_thread.run(bounded, trio_token=self._token)

    def stop(self) -> None:
        if self._token is not None and self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self._token)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the cluster did not stop"


@pytest.fixture(scope="module")
def shared(module_zk: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SharedCluster]:
    running = SharedCluster(module_zk, tmp_path_factory.mktemp("txn-v2-cluster"))
    running.start()
    try:
        yield running
    finally:
        running.stop()


# -- helpers ------------------------------------------------------------------------------------


def mine(records: dict[int, list[tuple[bytes, bytes]]], prefix: str) -> dict[int, list[bytes]]:
    """The values of ``records`` that start with ``prefix``, per partition."""
    return {p: [v for _, v in rs if v.startswith(prefix.encode())] for p, rs in records.items()}


def values(prefix: str, *labels: str) -> dict[int, list[bytes]]:
    """What the partitions hold of the transactions ``labels`` (``txn_records``), in order."""
    out: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for label in labels:
        for p, _, value in txn_records(f"{prefix}{label}"):
            out[p].append(value)
    return out


async def producer_batches(cluster: LocalCluster, pid: int) -> list[tuple[int, bool, int]]:
    """``(partition, is_control, producer_epoch)`` of every batch of producer ``pid``
    in the topic, read at each partition's leader, in log order per partition, once
    the nodes agree on the leaders (a node back from a stop takes its partitions
    back meanwhile: CI once found them between two leaders here)."""
    out = []
    led = await until(lambda: leaders(cluster, TOPIC, PARTITIONS), "the nodes agree on leaders")
    for p, leader in sorted(led.items()):
        plog = cluster.node(leader).broker.logs.partition(TOPIC, p)
        data = plog.read(plog.log_start_offset, 1 << 30, upper_bound=plog.high_watermark)
        for header, _ in iter_batches(data.tobytes()):
            if header.producer_id == pid:
                out.append((p, header.is_control, header.producer_epoch))
    return out


async def api_versions_of(host: str, port: int) -> Any:
    hello = api_versions.ApiVersionsRequest(
        client_software_name="trafka-tests", client_software_version="1"
    )
    return await raw_request_to(host, port, 18, 4, hello)


async def init_pid(cluster: LocalCluster, node: int, tid: str, timeout_ms: int = 60_000) -> Any:
    body = init_msg.InitProducerIdRequest(
        transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=-1, producer_epoch=-1
    )
    return await raw_request(cluster, node, 22, 4, body)


async def init_until_done(cluster: LocalCluster, node: int, tid: str, **kw: Any) -> Any:
    """InitProducerId, retried while the coordinator aborts the id's open transaction
    (CONCURRENT_TRANSACTIONS), as a producer retries it."""

    async def answered() -> Any:
        answer = await init_pid(cluster, node, tid, **kw)
        return None if answer.error_code == ErrorCode.CONCURRENT_TRANSACTIONS else answer

    answer = None
    with trio.fail_after(30):
        while (answer := await answered()) is None:
            await trio.sleep(0.05)
    assert answer.error_code == ErrorCode.NONE, answer
    return answer


async def produce_v12(
    cluster: LocalCluster,
    node: int,
    tid: str,
    pid: int,
    epoch: int,
    partition: int,
    value: bytes,
    seq: int = 0,
    version: int = 12,
    timeout_ms: int = 10_000,
) -> ErrorCode:
    """A transactional Produce v12 (acks=all) of one record, with no AddPartitionsToTxn
    before it (or of ``version``); the partition's error."""
    batch = encode_batch(
        [(int(time.time() * 1000), b"k", value, [])],
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        is_transactional=True,
    )
    P = produce_msg.ProduceRequest
    body = P(
        transactional_id=tid,
        acks=-1,
        timeout_ms=timeout_ms,
        topic_data=[
            P.TopicProduceData(
                name=TOPIC, partition_data=[P.PartitionProduceData(index=partition, records=batch)]
            )
        ],
    )
    answer = await raw_request(cluster, node, 0, version, body)
    [[result]] = [t.partition_responses for t in answer.responses]
    return ErrorCode(result.error_code)


async def end_txn_v5(
    cluster: LocalCluster, node: int, tid: str, pid: int, epoch: int, commit: bool
) -> tuple[ErrorCode, int, int]:
    body = end_txn_msg.EndTxnRequest(
        transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=commit
    )
    answer = await raw_request(cluster, node, 26, 5, body)
    return ErrorCode(answer.error_code), answer.producer_id, answer.producer_epoch


async def committed(bs: str, group: str, tp: TopicPartition) -> int | None:
    async with open_consumer(
        bootstrap_servers=bs,
        group_id=group,
        isolation_level="read_committed",
        enable_auto_commit=False,
        default_api_timeout_ms=20_000,
        **CLIENT,
    ) as consumer:
        return await consumer.committed(tp)


async def finalized_everywhere(cluster: LocalCluster) -> dict[int, tuple[int, int]]:
    """Each live node's finalized ``transaction.version`` and finalized epoch (ApiVersions v4)."""
    out = {}
    for n in live(cluster):
        answer = await api_versions_of(*cluster.node(n).address)
        levels = {f.name: f.max_version_level for f in answer.finalized_features}
        out[n] = (levels.get(TV, 0), answer.finalized_features_epoch)
    return out


async def set_transaction_version(
    cluster: LocalCluster, level: int, upgrade_type: int, node: int
) -> None:
    """UpdateFeatures sent to ``node`` alone, as ``kafka-features`` sends it to one
    broker: the cluster's level (ZooKeeper's ``/feature``) changes, and every
    node's ApiVersions soon reports ``level`` with one epoch for all."""
    R = features_msg.UpdateFeaturesRequest
    key = R.FeatureUpdateKey(feature=TV, max_version_level=level, upgrade_type=upgrade_type)
    answer = await raw_request(cluster, node, 57, 1, R(timeout_ms=5000, feature_updates=[key]))
    assert answer.error_code == ErrorCode.NONE, answer
    # The node that answered reports it at once.
    assert (await finalized_everywhere(cluster))[node][0] == level
    seen: dict[int, tuple[int, int]] = {}

    async def agreed() -> bool:
        seen.clear()
        seen.update(await finalized_everywhere(cluster))
        return len(set(seen.values())) == 1 and seen[node][0] == level

    with trio.move_on_after(30):
        while not await agreed():
            await trio.sleep(0.05)
        return
    raise AssertionError(f"the nodes do not agree on {TV} {level}: {seen}")


# -- ApiVersions: what every node advertises, against Kafka 4.4 ---------------------------------

#: The APIs whose versions decide a client's transaction flow (Kafka's
#: ``TransactionManager``: Produce above v11 and TxnOffsetCommit above v4 with
#: ``transaction.version`` 2 finalized) and those the flow sends.
FLOW_APIS = (
    ApiKey.PRODUCE,
    ApiKey.INIT_PRODUCER_ID,
    ApiKey.ADD_PARTITIONS_TO_TXN,
    ApiKey.ADD_OFFSETS_TO_TXN,
    ApiKey.END_TXN,
    ApiKey.TXN_OFFSET_COMMIT,
)


def advertised(answer: Any) -> dict[str, Any]:
    return {
        "error": answer.error_code,
        "supported": {
            f.name: (f.min_version, f.max_version)
            for f in answer.supported_features
            if f.name == TV
        },
        "finalized": {
            f.name: f.max_version_level for f in answer.finalized_features if f.name == TV
        },
        "versions": {
            ApiKey(k.api_key).name: k.max_version
            for k in answer.api_keys
            if k.api_key in set(FLOW_APIS)
        },
    }


@pytest.mark.kafka
def test_every_node_advertises_transaction_version_2_as_kafka_4_4(
    shared: SharedCluster, kafka4: Any
) -> None:
    """ApiVersions v4 of each brokerlite node against Kafka 4.4's (a new KRaft
    cluster): ``transaction.version`` supported 0-2 and finalized at 2, and the
    same highest versions of the APIs a client's transaction flow depends on."""
    host, _, port = kafka4.bootstrap_servers.split(",")[0].rpartition(":")
    found: dict[str, Any] = {}

    async def steps(cluster: LocalCluster) -> None:
        found["kafka"] = advertised(await api_versions_of(host, int(port)))
        for n in cluster.node_ids:
            found[n] = advertised(await api_versions_of(*cluster.node(n).address))

    shared.run(steps)
    kafka = found.pop("kafka")
    assert kafka["supported"] == {TV: (0, 2)} and kafka["finalized"] == {TV: 2}, kafka
    for node, seen in found.items():
        assert seen == kafka, f"node {node}: {seen}\nKafka 4.4: {kafka}"


# -- the SDK: transactions of version 2 across the nodes -----------------------------------------


def test_sdk_transactions_of_version_2_across_the_cluster(shared: SharedCluster) -> None:
    """trafka's SDK follows the finalized level (version 2): each transaction,
    committed or aborted, bumps the epoch; every partition's data batches carry
    the transaction's epoch and its marker the next one (the coordinator's
    WriteTxnMarkers v2 to the other nodes); the group's offsets, held by another
    node than the coordinator, are committed with the committed transaction."""
    tid, prefix = "sdk-tv2", "sdk-"

    async def steps(cluster: LocalCluster) -> None:
        bs = cluster.bootstrap_servers
        async with open_producer(
            bootstrap_servers=bs, transactional_id=tid, linger_ms=5, **CLIENT
        ) as producer:
            await producer.init_transactions()
            coordinator = await txn_coordinator(cluster, tid)
            group, _ = await group_coordinated(cluster, "sdk-tv2-g", lambda n: n != coordinator)
            epochs = []
            for label, commit, offset in (("t0", True, 5), ("t1", False, 9), ("t2", True, 11)):
                producer.begin_transaction()
                for p, key, value in txn_records(prefix + label):
                    await producer.send(TOPIC, value, key=key, partition=p)
                await producer.send_offsets_to_transaction(
                    {TopicPartition(INPUT, 0): offset}, group
                )
                await producer.flush()
                record = cluster.node(coordinator).broker.txn.record(tid)
                assert record is not None and record.tv2, record  # added by version 2's flow
                offsets_partition = cluster.node(coordinator).broker.cluster_txn.group_partition(
                    group
                )
                assert offsets_partition in record.partitions, record  # TxnOffsetCommit v5 added it
                epochs.append(record.producer_epoch)
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
            pid = record.producer_id
        assert epochs == [epochs[0], epochs[0] + 1, epochs[0] + 2], epochs
        await wait_settled(bs)
        assert mine(await read_all(bs, "read_committed"), prefix) == values(prefix, "t0", "t2")
        assert await committed(bs, group, TopicPartition(INPUT, 0)) == 11
        # Per partition: t0's data and marker, t1's, t2's: data at the transaction's
        # epoch, its marker one above.
        batches = await producer_batches(cluster, pid)
        for p in range(PARTITIONS):
            want = []
            for e in epochs:
                want += [(p, False, e)] * 2 + [(p, True, e + 1)]
            got = [b for b in batches if b[0] == p]
            # Two records per partition and transaction may go in one batch or two.
            assert [b for b in got if b[1]] == [b for b in want if b[1]], (p, got)
            assert {b for b in got if not b[1]} == {b for b in want if not b[1]}, (p, got)

    shared.run(steps)


# -- the wire: Produce v12, TxnOffsetCommit v5 and EndTxn v5 on three nodes --------------------


def test_produce_v12_and_txn_offset_commit_v5_at_other_nodes_than_the_coordinator(
    shared: SharedCluster,
) -> None:
    """A transactional Produce v12 at a leader that is not the coordinator, and a
    TxnOffsetCommit v5 at a group coordinator that is not, with no
    AddPartitionsToTxn/AddOffsetsToTxn: both join the transaction (the
    coordinator's record names the partition and the group's offsets partition).
    EndTxn v5 commits with the epoch bumped; once its markers are written a retry
    with the epoch before gets the same answer; a late Produce v12 of the old epoch is INVALID_PRODUCER_EPOCH
    and writes nothing; the committed record and offset are visible."""
    tid = "wire-tv2"

    async def steps(cluster: LocalCluster) -> None:
        bs = cluster.bootstrap_servers
        coordinator = await txn_coordinator_for(cluster, tid)
        led = leaders(cluster, TOPIC, PARTITIONS)
        p = next(q for q in range(PARTITIONS) if led[q] != coordinator)
        group, at = await group_coordinated(cluster, "wire-tv2-g", lambda n: n != coordinator)
        init = await init_pid(cluster, coordinator, tid)
        assert init.error_code == ErrorCode.NONE, init
        pid, epoch = init.producer_id, init.producer_epoch
        verifier = cluster.node(led[p]).broker.txn_verification
        asked = verifier.asked
        assert await produce_v12(cluster, led[p], tid, pid, epoch, p, b"wire-1") == ErrorCode.NONE
        assert verifier.asked > asked  # the leader asked the coordinator to add it
        T = txn_commit_msg.TxnOffsetCommitRequest
        commit = T(
            transactional_id=tid,
            group_id=group,
            producer_id=pid,
            producer_epoch=epoch,
            generation_id_or_member_epoch=-1,
            member_id="",
            topics=[
                T.TxnOffsetCommitRequestTopic(
                    name=INPUT,
                    partitions=[
                        T.TxnOffsetCommitRequestPartition(partition_index=0, committed_offset=7)
                    ],
                )
            ],
        )
        answer = await raw_request(cluster, at, 28, 5, commit)
        assert [q.error_code for t in answer.topics for q in t.partitions] == [0], answer
        record = cluster.node(coordinator).broker.txn.record(tid)
        assert record is not None and record.tv2 and record.state is TransactionState.ONGOING
        offsets_partition = cluster.node(at).broker.cluster_txn.group_partition(group)
        assert set(record.partitions) == {(TOPIC, p), offsets_partition}, record

        ended = await end_txn_v5(cluster, coordinator, tid, pid, epoch, commit=True)
        assert ended == (ErrorCode.NONE, pid, epoch + 1)
        await until(
            lambda: txn_state(cluster, coordinator, tid) is TransactionState.COMPLETE_COMMIT,
            "the coordinator completes the commit",
        )
        retried = await end_txn_v5(cluster, coordinator, tid, pid, epoch, commit=True)
        assert retried == ended
        await wait_settled(bs)
        late = await produce_v12(cluster, led[p], tid, pid, epoch, p, b"wire-late", seq=1)
        assert late == ErrorCode.INVALID_PRODUCER_EPOCH
        assert mine(await read_all(bs, "read_committed"), "wire-")[p] == [b"wire-1"]
        assert mine(await read_all(bs, "read_uncommitted"), "wire-")[p] == [b"wire-1"]
        assert await producer_batches(cluster, pid) == [(p, False, epoch), (p, True, epoch + 1)]
        assert await committed(bs, group, TopicPartition(INPUT, 0)) == 7

    shared.run(steps)


def test_the_next_transaction_waits_at_its_leaders_for_the_last_one_s_markers(
    shared: SharedCluster,
) -> None:
    """KAFKA-18654 (Kafka 4.0+): right after EndTxn v5, the producer's next
    transaction sends its first Produce v12 while the coordinator is still writing
    the last one's markers, and the coordinator refuses to add the partition
    (CONCURRENT_TRANSACTIONS). The leader asks again every
    ``add.partitions.to.txn.retry.backoff.ms`` instead of refusing the Produce:
    here the markers are held until both leaders, the coordinator's own node (asked
    in memory) and another one (asked by request), have asked again; released, both
    Produces are answered NONE. With the markers held past a Produce's timeout it is
    refused NOT_ENOUGH_REPLICAS (retriable), nothing written."""
    tid = "held-markers"

    async def steps(cluster: LocalCluster) -> None:
        bs = cluster.bootstrap_servers
        coordinator = await txn_coordinator_for(cluster, tid)
        led = leaders(cluster, TOPIC, PARTITIONS)
        here = next(q for q in range(PARTITIONS) if led[q] == coordinator)
        there = next(q for q in range(PARTITIONS) if led[q] != coordinator)
        init = await init_pid(cluster, coordinator, tid)
        pid, epoch = init.producer_id, init.producer_epoch
        for p in (here, there):
            assert (
                await produce_v12(cluster, led[p], tid, pid, epoch, p, b"held-1") == ErrorCode.NONE
            )
        txn = cluster.node(coordinator).broker.cluster_txn
        txn.requests = lambda now_ms: []  # the coordinator sends no marker meanwhile
        assert await end_txn_v5(cluster, coordinator, tid, pid, epoch, commit=True) == (
            ErrorCode.NONE,
            pid,
            epoch + 1,
        )
        assert txn_state(cluster, coordinator, tid) is TransactionState.PREPARE_COMMIT
        # Past its timeout: refused, retriable.
        late = await produce_v12(
            cluster, led[there], tid, pid, epoch + 1, there, b"held-x", timeout_ms=300
        )
        assert late == ErrorCode.NOT_ENOUGH_REPLICAS
        verifier = cluster.node(led[there]).broker.txn_verification
        asked = verifier.asked
        answers: dict[int, ErrorCode] = {}

        async def produce(p: int) -> None:
            answers[p] = await produce_v12(cluster, led[p], tid, pid, epoch + 1, p, b"held-2")

        def parked(node: int) -> int:
            return cluster.node(node).broker.purgatory.by_api().get(ApiKey.PRODUCE, 0)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(produce, here)
            nursery.start_soon(produce, there)
            await until(lambda: verifier.asked >= asked + 2, "the other leader asks again")
            await until(lambda: parked(coordinator) == 1, "the coordinator's Produce waits")
            assert answers == {}
            del txn.requests  # the markers go
            txn.on_ready()
        assert answers == {here: ErrorCode.NONE, there: ErrorCode.NONE}
        assert await end_txn_v5(cluster, coordinator, tid, pid, epoch + 1, commit=True) == (
            ErrorCode.NONE,
            pid,
            epoch + 2,
        )
        await wait_settled(bs)
        got = mine(await read_all(bs, "read_committed"), "held-")
        assert {p: got[p] for p in (here, there)} == {
            here: [b"held-1", b"held-2"],
            there: [b"held-1", b"held-2"],
        }

    shared.run(steps)


async def txn_coordinator_for(cluster: LocalCluster, tid: str) -> int:
    """The coordinator of ``tid`` (``__transaction_state`` exists: made by an earlier
    FindCoordinator), as every node agrees."""
    from test_cluster_transactions import create_state_topic

    return await create_state_topic(cluster, tid)


# -- fencing and timeouts ---------------------------------------------------------------------


@pytest.mark.parametrize("how", ["fenced", "timed-out"])
def test_an_open_transaction_fenced_or_timed_out_is_aborted_as_version_2_decides(
    shared: SharedCluster, how: str
) -> None:
    """A transaction begun with Produce v12 on two leaders other than the
    coordinator is aborted by the coordinator (a new instance's InitProducerId,
    or its timeout) with one epoch bump, as Kafka 4.4 decides it at level 2: its
    markers (WriteTxnMarkers v2 to the leaders) carry the bumped epoch, nothing
    of it is visible, the old producer's Produce is INVALID_PRODUCER_EPOCH and
    its EndTxn v5 commit refused (the abort stands)."""
    tid = f"{how}-tv2"

    async def steps(cluster: LocalCluster) -> None:
        bs = cluster.bootstrap_servers
        coordinator = await txn_coordinator_for(cluster, tid)
        led = leaders(cluster, TOPIC, PARTITIONS)
        parts = [q for q in range(PARTITIONS) if led[q] != coordinator][:2]
        init = await init_pid(
            cluster, coordinator, tid, timeout_ms=1000 if how == "timed-out" else 60_000
        )
        pid, epoch = init.producer_id, init.producer_epoch
        for p in parts:
            code = await produce_v12(cluster, led[p], tid, pid, epoch, p, f"{how}-x".encode())
            assert code == ErrorCode.NONE, (p, code)
        if how == "fenced":
            # Answered once the abort's markers are written (CONCURRENT_TRANSACTIONS
            # until then); it bumps the epoch once more, for the new instance.
            await init_until_done(cluster, coordinator, tid)
        else:
            await until(
                lambda: txn_state(cluster, coordinator, tid) is TransactionState.COMPLETE_ABORT,
                "the coordinator completes the abort",
            )
        await wait_settled(bs)
        assert not any(mine(await read_all(bs, "read_committed"), f"{how}-").values())
        for p in parts:
            assert [b for b in await producer_batches(cluster, pid) if b[0] == p] == [
                (p, False, epoch),
                (p, True, epoch + 1),
            ]
            late = await produce_v12(cluster, led[p], tid, pid, epoch, p, b"late", seq=1)
            assert late == ErrorCode.INVALID_PRODUCER_EPOCH, (p, late)
        code, _, _ = await end_txn_v5(cluster, coordinator, tid, pid, epoch, commit=True)
        # Timed out: the old epoch's commit meets the abort (a retry of another
        # outcome). Fenced: the new instance's epoch is two above, the old one
        # PRODUCER_FENCED (Kafka 4.4's answers, test_differential_kafka4.py).
        want = ErrorCode.PRODUCER_FENCED if how == "fenced" else ErrorCode.INVALID_TXN_STATE
        assert code == want, code

    shared.run(steps)


# -- lowering and raising transaction.version -------------------------------------------------


def test_version_1_transactions_in_flight_across_an_upgrade_to_version_2(
    shared: SharedCluster,
) -> None:
    """``transaction.version`` lowered to 1 (UpdateFeatures' safe downgrade, as
    ``kafka-features downgrade``, sent to one node: the cluster's level, which
    every node then reports): a new SDK producer uses version
    1 (AddPartitionsToTxn, AddOffsetsToTxn, one epoch), and so does a producer
    of version 1 on the wire (AddPartitionsToTxn v3, Produce v11). Both
    transactions are open when the level is raised to 2 again: the SDK's
    commits as it began (markers at its own epoch, its offsets committed); the
    other producer is replaced (InitProducerId, a fence), and that abort is
    decided as version 2 decides it (markers one epoch above, sent as
    WriteTxnMarkers v2). A producer made after the upgrade uses version 2.
    ZooKeeper's ``/feature`` holds the levels as Kafka 3.9's controller writes
    it."""
    prefix = "up-"

    async def steps(cluster: LocalCluster) -> None:
        bs = cluster.bootstrap_servers
        first, second = cluster.node_ids[:2]
        await set_transaction_version(cluster, 1, 2, first)
        feature = json.loads(await trio.to_thread.run_sync(read_znode, shared.zookeeper_connect))
        assert feature["version"] == 2 and feature["status"] == 1, feature
        assert feature["features"][TV] == {"max_version_level": 1}, feature
        try:
            await upgrade_steps(cluster, bs, prefix, second)
        finally:
            await set_transaction_version(cluster, 2, 1, second)

    shared.run(steps)


def read_znode(connect: str, path: str = "/feature") -> bytes:
    from kazoo.client import KazooClient

    zk = KazooClient(hosts=connect)
    zk.start(timeout=15)
    try:
        data, _ = zk.get(path)
        return bytes(data)
    finally:
        zk.stop()
        zk.close()


async def begin_version_1(cluster: LocalCluster, tid: str, value: bytes) -> tuple[int, int, int]:
    """A transaction of version 1 on the wire: InitProducerId, AddPartitionsToTxn
    v3 of two partitions led by other nodes than the coordinator, a Produce v11
    to each; returns the coordinator, producer id and epoch."""
    coordinator = await txn_coordinator_for(cluster, tid)
    init = await init_pid(cluster, coordinator, tid)
    pid, epoch = init.producer_id, init.producer_epoch
    led = leaders(cluster, TOPIC, PARTITIONS)
    parts = [q for q in range(PARTITIONS) if led[q] != coordinator][:2]
    A = add_partitions_msg.AddPartitionsToTxnRequest
    add = A(
        v3_and_below_transactional_id=tid,
        v3_and_below_producer_id=pid,
        v3_and_below_producer_epoch=epoch,
        v3_and_below_topics=[A.AddPartitionsToTxnTopic(name=TOPIC, partitions=parts)],
    )
    answer = await raw_request(cluster, coordinator, 24, 3, add)
    codes = [
        r.partition_error_code
        for t in answer.results_by_topic_v3_and_below
        for r in t.results_by_partition
    ]
    assert codes == [0, 0], answer
    for p in parts:
        code = await produce_v12(cluster, led[p], tid, pid, epoch, p, value, version=11)
        assert code == ErrorCode.NONE, (p, code)
    return coordinator, pid, epoch


async def upgrade_steps(cluster: LocalCluster, bs: str, prefix: str, node: int) -> None:
    group, _ = await group_coordinated(cluster, "up-g", lambda n: True)
    async with open_producer(
        bootstrap_servers=bs, transactional_id="up-commit", linger_ms=5, **CLIENT
    ) as kept:
        await kept.init_transactions()
        kept.begin_transaction()
        for p, key, value in txn_records(prefix + "c"):
            await kept.send(TOPIC, value, key=key, partition=p)
        await kept.send_offsets_to_transaction({TopicPartition(INPUT, 1): 3}, group)
        await kept.flush()
        coordinator = await txn_coordinator(cluster, "up-commit")
        record = cluster.node(coordinator).broker.txn.record("up-commit")
        assert record is not None and not record.tv2, record  # version 1's flow
        kept_pid, kept_epoch = record.producer_id, record.producer_epoch
        fenced_at, pid, epoch = await begin_version_1(cluster, "up-fenced", b"up-fenced")
        record = cluster.node(fenced_at).broker.txn.record("up-fenced")
        assert record is not None and not record.tv2, record

        await set_transaction_version(cluster, 2, 1, node)
        await kept.commit_transaction()
        # Answered once the fenced transaction's abort is written.
        await init_until_done(cluster, fenced_at, "up-fenced")
    await wait_settled(bs)
    assert mine(await read_all(bs, "read_committed"), prefix) == values(prefix, "c")
    assert await committed(bs, group, TopicPartition(INPUT, 1)) == 3
    assert {b[2] for b in await producer_batches(cluster, kept_pid)} == {kept_epoch}
    fenced_batches = await producer_batches(cluster, pid)
    assert {b[2] for b in fenced_batches if not b[1]} == {epoch}, fenced_batches
    assert {b[2] for b in fenced_batches if b[1]} == {epoch + 1}, fenced_batches

    # Made after the upgrade: version 2's flow (an epoch bump per transaction).
    async with open_producer(
        bootstrap_servers=bs, transactional_id="up-new", linger_ms=5, **CLIENT
    ) as fresh:
        await fresh.init_transactions()
        coordinator = await txn_coordinator(cluster, "up-new")
        record = cluster.node(coordinator).broker.txn.record("up-new")
        assert record is not None
        before = record.producer_epoch
        fresh.begin_transaction()
        await fresh.send(TOPIC, b"up-new", key=b"k", partition=0)
        await fresh.commit_transaction()
        after = cluster.node(coordinator).broker.txn.record("up-new")
        assert after is not None and after.tv2 and after.producer_epoch == before + 1, after


def test_a_node_down_across_a_change_takes_the_cluster_s_level_and_version_1_survives(
    shared: SharedCluster,
) -> None:
    """A transaction of version 1 is open (level 1) when its coordinator's node
    stops; the level is raised to 2 meanwhile, through another node. The node
    comes back and reports the cluster's level and epoch, read from ``/feature``
    as it joins; the transaction, coordinated by the successor, commits with
    EndTxn v4 as it began, and is read whole."""
    tid, value = "down-v1", b"down-v1"

    async def steps(cluster: LocalCluster) -> None:
        bs = cluster.bootstrap_servers
        first = cluster.node_ids[0]
        await set_transaction_version(cluster, 1, 2, first)
        try:
            coordinator, pid, epoch = await begin_version_1(cluster, tid, value)
            await cluster.stop_node(coordinator)
            successor = await txn_coordinator(cluster, tid, not_=coordinator)
            await set_transaction_version(cluster, 2, 1, successor)
            await cluster.start_node(coordinator)
            levels = await finalized_everywhere(cluster)
            assert len(levels) == NODES and len(set(levels.values())) == 1, levels
            assert levels[coordinator][0] == 2, levels
            body = end_txn_msg.EndTxnRequest(
                transactional_id=tid, producer_id=pid, producer_epoch=epoch, committed=True
            )
            at = await txn_coordinator(cluster, tid)
            answer = await raw_request(cluster, at, 26, 4, body)
            assert answer.error_code == ErrorCode.NONE, answer
            await wait_settled(bs)
            await until(lambda: leaders(cluster, TOPIC, PARTITIONS), "the nodes agree on leaders")
            got = mine(await read_all(bs, "read_committed"), "down-")
            assert sorted(v for vs in got.values() for v in vs) == [value, value]
            assert {b[2] for b in await producer_batches(cluster, pid)} == {epoch}  # version 1
        finally:
            await set_transaction_version(cluster, 2, 1, first)

    shared.run(steps)


FEATURES_TOOL = "org.apache.kafka.tools.FeatureCommand"


def _tv_line(outcome: dict[str, Any]) -> str:
    assert outcome["exit"] == 0, outcome
    [line] = [x for x in outcome["out"].splitlines() if f"Feature: {TV}" in x]
    return " ".join(line.split())


@pytest.mark.kafka
def test_kafka_features_changes_the_cluster_s_transaction_version(shared: SharedCluster) -> None:
    """Kafka 4.4's ``kafka-features`` (its ``FeatureCommand``) with one node as its
    bootstrap: ``describe`` shows ``transaction.version`` supported 0-2 and
    finalized at 2; ``downgrade --feature transaction.version=1`` lowers the
    cluster's level, which every node then reports; ``upgrade`` raises it back."""
    from java_harness import ScriptSession
    from kafka_scripts import require_kafka

    require_kafka()
    cluster = shared.cluster
    assert cluster is not None
    host, port = cluster.node(cluster.node_ids[-1]).address
    bs = ["--bootstrap-server", f"{host}:{port}"]

    def agree_on(level: int) -> Callable[[LocalCluster], Awaitable[None]]:
        async def steps(cluster: LocalCluster) -> None:
            with trio.fail_after(30):
                while True:
                    seen = await finalized_everywhere(cluster)
                    if {v[0] for v in seen.values()} == {level} and len(set(seen.values())) == 1:
                        return
                    await trio.sleep(0.05)

        return steps

    with ScriptSession() as session:
        describe, down = session.run(
            [
                (FEATURES_TOOL, [*bs, "describe"], None),
                (FEATURES_TOOL, [*bs, "downgrade", "--feature", f"{TV}=1"], None),
            ],
            timeout=120,
        )
        assert "SupportedMinVersion: 0 SupportedMaxVersion: 2 FinalizedVersionLevel: 2" in (
            _tv_line(describe)
        )
        assert down["exit"] == 0, down
        shared.run(agree_on(1))
        [up] = session.run(
            [(FEATURES_TOOL, [*bs, "upgrade", "--feature", f"{TV}=2"], None)], timeout=120
        )
        assert up["exit"] == 0, up
        # Every node follows /feature a moment apart (as a KRaft broker follows the
        # metadata log): describe once they all have it.
        shared.run(agree_on(2))
        [again] = session.run([(FEATURES_TOOL, [*bs, "describe"], None)], timeout=120)
        assert "FinalizedVersionLevel: 2" in _tv_line(again)
