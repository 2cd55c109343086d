"""The SDK's admin client against Apache Kafka itself (3.9 on ZooKeeper, 4.x on
KRaft): every call the SDK offers that a broker serves, read back through
another call; ACLs on a cluster with Kafka's authorizer; leader elections and
reassignments on three 4.x nodes; the blocking API's producer, consumer and
admin once.

What Kafka defines and these tests check (Kafka's Admin javadoc and KIPs):
CreateTopics/CreatePartitions/DeleteTopics (KIP-4, KIP-195); DescribeConfigs
and IncrementalAlterConfigs (KIP-339: other settings are kept); DeleteRecords
(KIP-107: the low watermark moves to the given offset); the group APIs
(ListGroups, DescribeGroups, OffsetFetch, OffsetCommit from the admin while the
group is empty, OffsetDelete (KIP-496), DeleteGroups); DescribeLogDirs
(KIP-113); ApiVersions' features (KIP-584: ``metadata.version`` finalized on
KRaft); client quotas (KIP-546); SCRAM credentials (KIP-554); ACLs (KIP-140:
CreateAcls, DescribeAcls and DeleteAcls with filters); ElectLeaders (KIP-460:
ELECTION_NOT_NEEDED when the preferred leader leads) and partition
reassignments (KIP-455).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import partial
from typing import Any

import anyio
import pytest
from kafka_peers import KafkaCluster
from sdk_brokers import fresh

from trafka.brokerlite.dev.local_cluster import serve_cluster
from trafka.codec import KafkaError
from trafka.sdk import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilterComponent,
    NewPartitions,
    NewTopic,
    PatternType,
    TopicPartition,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
    blocking,
    open_admin,
    open_consumer,
    open_producer,
)

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def _eventually(ask: Callable[[], Awaitable[Any]], expected: Any) -> None:
    """Ask until the answer is ``expected``: under KRaft a broker answers
    describe calls from its metadata image, which catches up with the
    controller's commit shortly after the alter call returned (within the
    caller's deadline)."""
    while (got := await ask()) != expected:
        await anyio.sleep(0.05)
    assert got == expected


@pytest.mark.compat("SDK", "admin: topics, configs, records, groups, quotas, SCRAM, features")
async def test_admin_calls_read_back(kafka: KafkaCluster) -> None:
    bs = kafka.bootstrap_servers
    topic, group, user = fresh("adm"), fresh("adm-g"), fresh("adm-user")
    tps = [TopicPartition(topic, p) for p in range(3)]
    with anyio.fail_after(120):
        async with open_admin(bootstrap_servers=bs) as admin:
            # Topics and their configs.
            await admin.create_topics([NewTopic(topic, 2, configs={"retention.ms": "3600000"})])
            await admin.create_topics([NewTopic(fresh("v"), 1)], validate_only=True)
            await admin.create_partitions({topic: 3})
            # As CreateTopics, CreatePartitions answers before the brokers' metadata
            # has the new partition: wait for it.
            while len((await admin.describe_topics([topic]))[topic].partitions) < 3:
                await anyio.sleep(0.05)
            await admin.list_offsets({tp: "latest" for tp in tps})
            info = (await admin.describe_topics([topic]))[topic]
            assert [p.partition for p in info.partitions] == [0, 1, 2]
            assert (await admin.list_topics())[topic] == 3
            await admin.alter_topic_configs({topic: {"segment.ms": "600000"}})
            configs = (await admin.describe_configs([topic], overrides_only=True))[topic]
            # Incremental: the earlier override is kept.
            assert configs == {"retention.ms": "3600000", "segment.ms": "600000"}
            await admin.alter_topic_configs({topic: {"retention.ms": None}})
            assert (await admin.describe_configs([topic], overrides_only=True))[topic] == {
                "segment.ms": "600000"
            }
            node = str(kafka.nodes[0].node_id)
            broker_configs = (await admin.describe_configs(brokers=[int(node)]))[node]
            assert broker_configs["num.io.threads"] == "2"

            # Records, and DeleteRecords moving the low watermark.
            async with open_producer(bootstrap_servers=bs) as producer:
                for i in range(10):
                    await producer.send(topic, b"k%d" % i, key=b"k%d" % i, partition=0)
            assert await admin.delete_records({tps[0]: 4}) == {tps[0]: 4}
            assert (await admin.list_offsets({tps[0]: "earliest"}))[tps[0]] == (4, -1)

            # Groups: a member commits and leaves; the admin reads, alters, deletes.
            # No auto commit: its timer would overwrite the commit read back below.
            async with open_consumer(
                topic,
                bootstrap_servers=bs,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            ) as consumer:
                while not consumer.assignment():
                    await consumer.getmany(timeout_ms=100)
                listing = {g.group_id: g for g in await admin.list_groups()}
                assert listing[group].protocol_type == "consumer"
                described = (await admin.describe_groups([group]))[group]
                assert described.state == "Stable"
                (member,) = described.members
                assert member.assignment == frozenset(tps)
                await consumer.commit({tps[0]: 6, tps[1]: 0})
            assert await admin.list_consumer_group_offsets(group) == {tps[0]: 6, tps[1]: 0}
            await admin.alter_consumer_group_offsets(group, {tps[0]: 5, tps[2]: 0})
            await admin.delete_consumer_group_offsets(group, [tps[1]])
            assert await admin.list_consumer_group_offsets(group) == {tps[0]: 5, tps[2]: 0}
            assert (await admin.describe_groups([group]))[group].state == "Empty"
            await admin.delete_groups([group])
            assert group not in {g.group_id for g in await admin.list_groups()}

            # Log dirs, features, the cluster.
            dirs = await admin.describe_log_dirs([tps[0]])
            assert [d.partitions[tps[0]] > 0 for d in dirs if tps[0] in d.partitions] == [True]
            features = await admin.describe_features()
            if kafka.kraft:
                assert "metadata.version" in features.finalized
            cluster = await admin.describe_cluster()
            assert [b.node_id for b in cluster.brokers] == [n.node_id for n in kafka.nodes]

            # Client quotas and SCRAM credentials.
            entity = ClientQuotaEntity(user=user)
            await admin.alter_client_quotas(
                [ClientQuotaAlteration(entity, {"producer_byte_rate": 1024.0})]
            )
            only = [ClientQuotaFilterComponent.of_entity("user", user)]
            quotas = partial(admin.describe_client_quotas, only, strict=True)
            await _eventually(quotas, {entity: {"producer_byte_rate": 1024.0}})
            await admin.alter_client_quotas(
                [ClientQuotaAlteration(entity, {"producer_byte_rate": None})]
            )
            await _eventually(quotas, {})
            await admin.alter_user_scram_credentials(
                [UserScramCredentialUpsertion(user, "pw", "SCRAM-SHA-256", iterations=4096)]
            )

            async def scram() -> list[tuple[str, int]]:
                users = await admin.describe_user_scram_credentials()
                infos = users[user].credential_infos if user in users else ()
                return [(c.mechanism, c.iterations) for c in infos]

            await _eventually(scram, [("SCRAM-SHA-256", 4096)])
            await admin.alter_user_scram_credentials(
                [UserScramCredentialDeletion(user, "SCRAM-SHA-256")]
            )
            await _eventually(scram, [])

            await admin.delete_topics([topic])
            assert topic not in await admin.list_topics()


def _move_controller(zookeeper: str, old: int) -> int:
    """The ZooKeeper-era controller moved off broker ``old``: its ``/controller``
    znode deleted (Kafka's brokers then elect one again, the old one resigning)
    until another broker holds it; returns the new controller's id."""
    import contextlib
    import json
    import threading

    from kazoo.client import KazooClient
    from kazoo.exceptions import NoNodeError

    client = KazooClient(hosts=zookeeper)
    client.start()
    try:
        for _ in range(20):
            created = threading.Event()
            with contextlib.suppress(NoNodeError):  # between two elections
                client.delete("/controller")
            if client.exists("/controller", watch=lambda _event, ev=created: ev.set()) is None:
                assert created.wait(60), "no broker became the controller"
            now = json.loads(client.get("/controller")[0])["brokerid"]
            if now != old:
                return int(now)
        raise AssertionError(f"broker {old} was elected the controller every time")
    finally:
        client.stop()


async def test_a_moved_controller_is_found_again(kafka3_cluster: KafkaCluster) -> None:
    """An admin client holding a controller that moved since its metadata was
    read: on ZooKeeper the old one answers NOT_CONTROLLER to what only the
    controller serves (ListPartitionReassignments, KIP-455), and the client asks
    for metadata again and reaches the new one, as Java's AdminClient does,
    instead of asking the old one again until its deadline."""
    async with open_admin(bootstrap_servers=kafka3_cluster.bootstrap_servers) as admin:
        await admin.list_partition_reassignments()
        old = admin.cluster.metadata.controller_id
        assert kafka3_cluster.zookeeper is not None
        new = await anyio.to_thread.run_sync(_move_controller, kafka3_cluster.zookeeper, old)
        assert isinstance(await admin.list_partition_reassignments(timeout_ms=30_000), dict)
        assert admin.cluster.metadata.controller_id == new


@pytest.mark.compat("SDK", "admin: leader elections and partition reassignments")
async def test_elections_and_reassignments(kafka4_cluster: KafkaCluster) -> None:
    bs = kafka4_cluster.bootstrap_servers
    topic = fresh("reassign")
    tp = TopicPartition(topic, 0)
    with anyio.fail_after(120):
        async with open_admin(bootstrap_servers=bs) as admin:
            await admin.create_topics([NewTopic(topic, 1, replication_factor=2)])
            await admin.list_offsets({tp: "latest"})
            replicas = (await admin.describe_topics([topic]))[topic].partitions[0].replicas
            # The preferred leader already leads: nothing to elect (KIP-460).
            result = await admin.elect_leaders([tp])
            assert result[tp] is not None and result[tp].code.name == "ELECTION_NOT_NEEDED"
            target = [n for n in (1, 2, 3) if n not in replicas] + [replicas[0]]
            assert await admin.alter_partition_reassignments({tp: target}) == {tp: None}
            while await admin.list_partition_reassignments([tp]):
                await anyio.sleep(0.2)
            while (await admin.describe_topics([topic]))[topic].partitions[0].replicas != tuple(
                target
            ):
                await anyio.sleep(0.2)
            # The new first replica is preferred; elect it where it does not lead.
            info = (await admin.describe_topics([topic]))[topic].partitions[0]
            outcome = (await admin.elect_leaders([tp]))[tp]
            if info.leader == target[0]:
                assert outcome is not None and outcome.code.name == "ELECTION_NOT_NEEDED"
            else:
                assert outcome is None
            while (await admin.describe_topics([topic]))[topic].partitions[0].leader != target[0]:
                await anyio.sleep(0.2)


async def _placements(bs: str) -> dict[str, Any]:
    """Topics and partitions placed by hand on brokers 1-3: what each partition's
    replicas and leader became, and the codes of placements refused."""
    topic = fresh("placed")
    seen: dict[str, Any] = {}

    async def layout(count: int) -> list[tuple[tuple[int, ...], int]]:
        while True:  # (a broker learns of a new topic shortly after the controller)
            try:
                parts = (await admin.describe_topics([topic]))[topic].partitions
            except KafkaError as exc:
                assert exc.code.name == "UNKNOWN_TOPIC_OR_PARTITION", exc
                parts = ()
            if len(parts) == count and all(p.leader >= 0 for p in parts):
                return [(p.replicas, p.leader) for p in parts]
            await anyio.sleep(0.1)

    async def refused(call: Callable[[], Awaitable[Any]]) -> str:
        try:
            await call()
        except KafkaError as exc:
            return exc.code.name
        return "accepted"

    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, replica_assignments={0: [2, 3], 1: [3, 1]})])
        seen["created"] = await layout(2)
        await admin.create_partitions({topic: NewPartitions(3, [[1, 2]])})
        seen["grown"] = await layout(3)
        bad = (({0: [1, 99]}), {0: [1], 2: [2]}, {0: [1, 2], 1: [3]}, {0: [1, 1]})
        seen["refused"] = [
            await refused(
                partial(admin.create_topics, [NewTopic(fresh("bad"), replica_assignments=b)])
            )
            for b in bad
        ]
        seen["refused"].append(
            await refused(partial(admin.create_partitions, {topic: NewPartitions(4, [[1, 99]])}))
        )
    return seen


@pytest.mark.compat(
    "SDK",
    "admin: topics and new partitions placed by replica assignments",
    peer=("brokerlite", "Kafka 4.x"),
)
async def test_replica_assignments(kafka4_cluster: KafkaCluster) -> None:
    """Kafka's Admin ``NewTopic(name, replicasAssignments)`` and
    ``NewPartitions.increaseTo(total, newAssignments)`` (KIP-195): each partition
    on the brokers given, the first its leader; a placement naming a broker
    that does not exist, partitions not numbered from 0, replica lists of
    different lengths or a broker twice in one is refused with
    INVALID_REPLICA_ASSIGNMENT (the protocol's CreateTopics/CreatePartitions
    errors). The same on Kafka 4 (three nodes) and a brokerlite cluster."""
    with anyio.fail_after(180):
        kafka = await _placements(kafka4_cluster.bootstrap_servers)
        async with serve_cluster(3) as cluster:
            brokerlite = await _placements(cluster.bootstrap_servers)
    assert brokerlite == kafka
    assert kafka["created"] == [((2, 3), 2), ((3, 1), 3)]
    assert kafka["grown"][2] == ((1, 2), 1)
    assert kafka["refused"] == ["INVALID_REPLICA_ASSIGNMENT"] * 5


AUTHORIZERS = {
    "3.9": "kafka.security.authorizer.AclAuthorizer",
    "4": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
}


@pytest.mark.slow
@pytest.mark.compat("SDK", "admin: ACLs with Kafka's authorizer")
# Named "peer" so that docs/compatibility.md credits the right Kafka.
@pytest.mark.parametrize("peer", ["3.9", "4"])
async def test_acls_round_trip(make_kafka: Any, peer: str) -> None:
    from kafka_peers import KAFKA_3, KAFKA_4

    cluster: KafkaCluster = make_kafka(
        KAFKA_3 if peer == "3.9" else KAFKA_4,
        config={"authorizer.class.name": AUTHORIZERS[peer], "super.users": "User:ANONYMOUS"},
    )
    read = AclBinding(
        AclResourceType.TOPIC, "orders", PatternType.LITERAL, "User:alice", "*",
        AclOperation.READ, AclPermissionType.ALLOW,
    )  # fmt: skip
    deny = AclBinding(
        AclResourceType.GROUP, "bill-", PatternType.PREFIXED, "User:bob", "*",
        AclOperation.ALL, AclPermissionType.DENY,
    )  # fmt: skip
    with anyio.fail_after(60):
        async with open_admin(bootstrap_servers=cluster.bootstrap_servers) as admin:
            assert await admin.create_acls([read, deny]) == {read: None, deny: None}
            while len(await admin.describe_acls()) < 2:  # propagated to the broker's cache
                await anyio.sleep(0.1)
            assert set(await admin.describe_acls()) == {read, deny}
            topics = await admin.describe_acls(
                AclBindingFilter(resource_type=AclResourceType.TOPIC)
            )
            assert topics == [read]
            deleted = await admin.delete_acls([AclBindingFilter(principal="User:bob")])
            assert deleted == {AclBindingFilter(principal="User:bob"): [deny]}
            while len(await admin.describe_acls()) > 1:
                await anyio.sleep(0.1)
            assert await admin.describe_acls() == [read]


def test_blocking_producer_consumer_and_admin(kafka: KafkaCluster) -> None:
    """trafka.sdk.blocking: the same calls without an event loop."""
    bs, topic = kafka.bootstrap_servers, fresh("blocking")
    tp = TopicPartition(topic, 0)
    with blocking.Admin(bootstrap_servers=bs, default_api_timeout_ms=30_000) as admin:
        admin.create_topics([NewTopic(topic, 1)])
        admin.list_offsets({tp: "latest"})
    with blocking.Producer(bootstrap_servers=bs) as producer:
        sent = [producer.send(topic, b"b%d" % i, partition=0) for i in range(5)]
        producer.flush()
    assert [f.result().offset for f in sent] == list(range(5))
    with blocking.Consumer(bootstrap_servers=bs, auto_offset_reset="earliest") as consumer:
        consumer.assign([tp])
        got: list[bytes] = []
        for _ in range(50):
            for recs in consumer.getmany(timeout_ms=500).values():
                got += [r.value for r in recs]
            if len(got) == 5:
                break
    assert got == [b"b%d" % i for i in range(5)]
