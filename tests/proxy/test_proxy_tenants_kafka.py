"""Virtual clusters in front of Apache Kafka 4.4 (issue #83 item 2), the
brokerlite tests' counterpart (tests/proxy/test_proxy_tenants.py): here the
tenants are picked by the principals of their client certificates (mutual
TLS into the proxy, Kafka's ``ssl.principal.mapping.rules``, KIP-371), and
Kafka, reached in plaintext, holds each tenant's topics, groups and
transactional ids under its prefix. Kafka's own answers to one tenant naming
the other's resources are what a client meets for resources that do not
exist. Kafka's Java producer (a PEM key store, KIP-651), confluent-kafka and
trafka's SDK produce as a tenant plain, idempotent and in transactions, through
a routing proxy and a forwarding one.
"""

from __future__ import annotations

import dataclasses
import socket
import ssl
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import confluent_kafka
import confluent_kafka.admin
import pytest
import trustme
from client_matrix import (
    KEYS,
    by_partition,
    java_producer,
    java_sends,
    java_tls,
    pem_keystore,
    read_committed,
    sdk_and_confluent_sends,
)
from encryption_helpers import once_in_order
from kafka_peers import KafkaCluster
from proxy_helpers import call, create, fresh, misreported

from trafka.codec import ApiKey, ErrorCode
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.proxy.tenants import Tenants
from trafka.sdk import NewTopic, open_admin, open_consumer, open_producer
from trafka.sdk.partitioners import murmur2_partition

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.compat("proxy", "virtual clusters (tenants): names prefixed, others hidden"),
]

RULES = "RULE:^CN=([^,]*),.*$/$1/,DEFAULT"
TENANTS = {
    "tenants": [
        {"name": "acme", "prefix": "acme.", "principals": ["User:alice"]},
        {"name": "globex", "prefix": "globex.", "principals": ["User:bob"]},
    ]
}


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    ca = trustme.CA()
    folder = tmp_path_factory.mktemp("tenants-pki")
    paths = {"ca": str(folder / "ca.pem"), "proxy": str(folder / "proxy.pem")}
    ca.cert_pem.write_to_path(paths["ca"])
    ca.issue_cert("127.0.0.1", "localhost").private_key_and_cert_chain_pem.write_to_path(
        paths["proxy"]
    )
    for user in ("alice", "bob"):
        leaf = ca.issue_cert(f"{user}.clients.test", common_name=user)
        paths[user] = str(folder / f"{user}.pem")
        paths[f"{user}-key"] = str(folder / f"{user}-key.pem")
        leaf.cert_chain_pems[0].write_to_path(paths[user])
        leaf.private_key_pem.write_to_path(paths[f"{user}-key"])
    return paths


def _tenants_proxy(kafka: KafkaCluster, pki: dict[str, str], route_keys: str) -> Any:
    tenants = Tenants()
    tenants.configure(TENANTS)
    return proxy_in_thread(
        upstream=(kafka.bootstrap_servers,),
        port=0,
        ssl_certfile=pki["proxy"],
        ssl_cafile=pki["ca"],
        ssl_client_auth="required",
        ssl_principal_mapping_rules=RULES,
        filters=(tenants,),
        route_keys=route_keys,
    )


@pytest.fixture(scope="module")
def shared(kafka4: KafkaCluster, pki: dict[str, str]) -> Iterator[RunningProxy]:
    """The tenants' proxy, routing keyed records by murmur2 (the default)."""
    with _tenants_proxy(kafka4, pki, "murmur2") as px:
        yield px


@pytest.fixture(scope="module")
def forwarding(kafka4: KafkaCluster, pki: dict[str, str]) -> Iterator[RunningProxy]:
    """The tenants' proxy, forwarding records where their producers put them."""
    with _tenants_proxy(kafka4, pki, "none") as px:
        yield px


def sdk(px: RunningProxy, pki: dict[str, str], user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": px.bootstrap_servers,
        "security_protocol": "SSL",
        "ssl_cafile": pki["ca"],
        "ssl_certfile": pki[user],
        "ssl_keyfile": pki[f"{user}-key"],
    }


def librdkafka(px: RunningProxy, pki: dict[str, str], user: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": px.bootstrap_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": pki["ca"],
        "ssl.certificate.location": pki[user],
        "ssl.key.location": pki[f"{user}-key"],
        **more,
    }


async def _read(consumer: Any, n: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < n:
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            got += [r.value for r in records]
    return got


async def _own_namespace(
    px: RunningProxy, pki: dict[str, str], user: str, names: dict[str, str], kafka: str
) -> None:
    """Create, produce (idempotent, then in a transaction), consume and commit
    under ``names``, through the proxy as ``user``."""
    topic, group, txn = names["topic"], names["group"], names["txn"]
    async with open_admin(**sdk(px, pki, user)) as admin:
        await admin.create_topics([NewTopic(topic, 2, 1)])
    async with open_producer(**sdk(px, pki, user)) as producer:
        await producer.send_and_wait(topic, user.encode(), key=b"k")
    async with open_producer(**sdk(px, pki, user), transactional_id=txn) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        await producer.send(topic, f"{user}-txn".encode(), key=b"k")
        await producer.commit_transaction()
    async with open_consumer(
        topic, group_id=group, auto_offset_reset="earliest", isolation_level="read_committed",
        **sdk(px, pki, user),
    ) as consumer:  # fmt: skip
        assert await _read(consumer, 2) == [user.encode(), f"{user}-txn".encode()]
        await consumer.commit()
        # The group's embedded subscription and assignment: Kafka's names on
        # Kafka (its offsets kept for the topics the group subscribes to,
        # KIP-496), the tenant's through the proxy.
        prefix = "acme." if user == "alice" else "globex."
        async with open_admin(bootstrap_servers=kafka) as admin:
            described = (await admin.describe_groups([prefix + group]))[prefix + group]
            assert {tp.topic for m in described.members for tp in m.assignment} == {prefix + topic}
        async with open_admin(**sdk(px, pki, user)) as admin:
            described = (await admin.describe_groups([group]))[group]
            assert {tp.topic for m in described.members for tp in m.assignment} == {topic}
    async with open_admin(**sdk(px, pki, user)) as admin:
        listed = await admin.list_topics()
        assert topic in listed
        assert not [t for t in listed if t.startswith(("acme.", "globex.", "__"))]
        assert {tp.topic for tp in await admin.list_consumer_group_offsets(group)} == {topic}


def test_two_tenants_on_kafka(
    shared: RunningProxy, pki: dict[str, str], kafka4: KafkaCluster
) -> None:
    names = {"topic": fresh("orders"), "group": fresh("g"), "txn": fresh("tx")}

    async def main() -> None:
        with anyio.fail_after(180):
            await _own_namespace(shared, pki, "alice", names, kafka4.bootstrap_servers)
            await _own_namespace(shared, pki, "bob", names, kafka4.bootstrap_servers)
            async with open_admin(bootstrap_servers=kafka4.bootstrap_servers) as admin:
                listed = set(await admin.list_topics())
                assert {f"acme.{names['topic']}", f"globex.{names['topic']}"} <= listed
                assert names["topic"] not in listed
                groups = {g.group_id for g in await admin.list_groups()}
                assert {f"acme.{names['group']}", f"globex.{names['group']}"} <= groups

    anyio.run(main, backend="trio")


def test_confluent_kafka_tenants_on_kafka(
    shared: RunningProxy, pki: dict[str, str], kafka4: KafkaCluster
) -> None:
    topic, group = fresh("events"), fresh("cg")
    for user in ("alice", "bob"):
        admin = confluent_kafka.admin.AdminClient(librdkafka(shared, pki, user))
        for future in admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, 1)]).values():
            future.result(30)
        producer = confluent_kafka.Producer(
            librdkafka(shared, pki, user, **{"enable.idempotence": True})
        )
        producer.produce(topic, user.encode())
        assert producer.flush(60) == 0
        consumer = confluent_kafka.Consumer(
            librdkafka(shared, pki, user, **{"group.id": group, "auto.offset.reset": "earliest"})
        )
        consumer.subscribe([topic])
        try:
            message = None
            while message is None or message.error():
                message = consumer.poll(1)
            assert message.value() == user.encode() and message.topic() == topic
            consumer.commit(message, asynchronous=False)
        finally:
            consumer.close()
        listed = admin.list_topics(timeout=30).topics
        assert topic in listed and not [t for t in listed if "." in t or t.startswith("__")]
    direct = confluent_kafka.admin.AdminClient({"bootstrap.servers": kafka4.bootstrap_servers})
    assert {f"acme.{topic}", f"globex.{topic}"} <= set(direct.list_topics(timeout=30).topics)


def test_a_tenant_cannot_name_the_others_resources_on_kafka(
    shared: RunningProxy, pki: dict[str, str], kafka4: KafkaCluster
) -> None:
    from tenant_probes import probe_every_api

    names = {"topic": fresh("secret"), "group": fresh("sg"), "txn": fresh("stx")}

    async def bob_owns() -> uuid.UUID:
        with anyio.fail_after(120):
            await _own_namespace(shared, pki, "bob", names, kafka4.bootstrap_servers)
            async with open_admin(bootstrap_servers=kafka4.bootstrap_servers) as admin:
                broker_name = f"globex.{names['topic']}"
                return (await admin.describe_topics([broker_name]))[broker_name].topic_id

    topic_id = anyio.run(bob_owns, backend="trio")
    context = ssl.create_default_context(cafile=pki["ca"])
    context.load_cert_chain(pki["alice"], pki["alice-key"])
    host, port = shared.bootstrap_servers.rsplit(":", 1)
    with context.wrap_socket(
        socket.create_connection((host, int(port)), timeout=30),
        server_hostname=host,
    ) as sock:
        seen = probe_every_api(
            lambda key, version, body: call(sock, key, version, body),  # type: ignore[arg-type]
            names=names,
            prefixed={k: f"globex.{v}" for k, v in names.items()},
            topic_id=topic_id,
            streams=True,
        )
    assert len(seen) >= 25, sorted(seen)


def test_kip_848_consumers_by_pattern_stay_in_their_tenant(
    shared: RunningProxy, pki: dict[str, str]
) -> None:
    """trafka's SDK with the consumer group protocol (KIP-848, Kafka 4.4's
    group coordinator) subscribed by a pattern that both tenants' topics of
    that name match: each member is given, and reads, its own tenant's only."""
    stem = fresh("kip848")
    group = fresh("g848")

    async def main() -> None:
        with anyio.fail_after(120):
            for user in ("alice", "bob"):
                async with open_admin(**sdk(shared, pki, user)) as admin:
                    await admin.create_topics([NewTopic(f"{stem}-t", 1, 1)])
                async with open_producer(**sdk(shared, pki, user)) as producer:
                    await producer.send_and_wait(f"{stem}-t", user.encode())
            for user in ("alice", "bob"):
                async with open_consumer(
                    group_id=group, group_protocol="consumer", auto_offset_reset="earliest",
                    **sdk(shared, pki, user),
                ) as consumer:  # fmt: skip
                    consumer.subscribe(pattern=f"{stem}.*")
                    assert await _read(consumer, 1) == [user.encode()]
                    assert {tp.topic for tp in consumer.assignment()} == {f"{stem}-t"}

    anyio.run(main, backend="trio")


@pytest.mark.parametrize("route", ["routed", "forwarded"])
def test_every_client_in_every_mode_as_a_tenant_on_kafka(
    route: str,
    request: pytest.FixtureRequest,
    pki: dict[str, str],
    kafka4: KafkaCluster,
    tmp_path: Any,
) -> None:
    """Kafka's Java producer (4.4, its key store a PEM file, KIP-651),
    confluent-kafka and trafka's SDK as tenant acme (alice's certificate),
    each plain, idempotent and in transactions (the Java producer's second
    aborted), each record sent to librdkafka's CRC32 partition: Kafka holds
    the topic and the transactional ids under acme's prefix, the names
    themselves nowhere; a read_committed consumer through the proxy reads
    every committed record once, each producer's keys in order, nothing
    aborted, every delivery report where its record is; routed, each key on
    its murmur2 partition."""
    px: RunningProxy = request.getfixturevalue("shared" if route == "routed" else "forwarding")
    topic, tag, partitions, n = fresh("matrix"), fresh("mx"), 3, 30
    create(kafka4.bootstrap_servers, f"acme.{topic}", partitions, 1, served=True)
    keystore = pem_keystore(pki["alice"], pki["alice-key"], tmp_path / "alice-keystore.pem")
    reports, sent = java_sends(
        java_producer(),
        px.bootstrap_servers,
        topic,
        n,
        "java",
        f"{tag}-java",
        java_tls(pki["ca"], keystore),
    )
    tls = {k: v for k, v in sdk(px, pki, "alice").items() if k != "bootstrap_servers"}
    more, values = sdk_and_confluent_sends(
        px.bootstrap_servers, topic, tag, n, tls, librdkafka(px, pki, "alice")
    )
    reports, sent = reports + more, sent + values
    records = read_committed(px.bootstrap_servers, topic, partitions, sent, **tls)
    once_in_order(by_partition(records, partitions), sent, keys=KEYS)
    assert misreported(records, reports) is None, misreported(records, reports)
    if route == "routed":
        assert [r for r in records if r.partition != murmur2_partition(r.key, partitions)] == []
    straight = read_committed(kafka4.bootstrap_servers, f"acme.{topic}", partitions, sent)
    assert sorted(r.value for r in straight) == sorted(sent)

    async def transactional_ids() -> set[str]:
        async with open_admin(bootstrap_servers=kafka4.bootstrap_servers) as admin:
            return {t.transactional_id for t in await admin.list_transactions()}

    ids = anyio.run(transactional_ids, backend="trio")
    mine = {f"{tag}-java", f"{tag}-sdk", f"{tag}-ck"}
    assert {f"acme.{t}" for t in mine} <= ids and not mine & ids


def test_quotas_per_tenant_on_kafka(kafka4: KafkaCluster, pki: dict[str, str]) -> None:
    """Quotas per tenant in front of Apache Kafka 4.4 (docs/proxy.md, "Quotas
    per tenant"; Kafka's design docs, "Quotas"; KIP-219): acme (100 B/s each
    way) is told throttle_time_ms > 0 on its Produce and Fetch answers
    (confluent-kafka's throttle_cb) and every record arrives, and is read,
    once and in order; globex, no quota, is never told to wait (Kafka itself
    throttles no one here: the answers' throttle times are the proxy's)."""
    tenants = Tenants()
    tenants.configure(
        {
            "tenants": [
                {**TENANTS["tenants"][0], "producer_byte_rate": 100, "consumer_byte_rate": 100},
                TENANTS["tenants"][1],
            ],
            "quota_window_num": 2,
            "quota_window_size_seconds": 1,
        }
    )
    topic = fresh("quota")
    values = [f"{i:03}-{'q' * 40}".encode() for i in range(12)]
    told: dict[str, list[float]] = {}
    with proxy_in_thread(
        upstream=(kafka4.bootstrap_servers,),
        port=0,
        ssl_certfile=pki["proxy"],
        ssl_cafile=pki["ca"],
        ssl_client_auth="required",
        ssl_principal_mapping_rules=RULES,
        filters=(tenants,),
        route_keys="none",
    ) as px:
        for user in ("alice", "bob"):

            async def make(user: str = user) -> None:
                with anyio.fail_after(60):
                    async with open_admin(**sdk(px, pki, user)) as admin:
                        await admin.create_topics([NewTopic(topic, 1, 1)])

            anyio.run(make, backend="trio")
            events: list[Any] = []
            producer = confluent_kafka.Producer(
                librdkafka(px, pki, user, **{"linger.ms": 5, "throttle_cb": events.append})
            )
            for v in values:
                producer.produce(topic, v)
            assert producer.flush(60) == 0
            for _ in range(150 if user == "alice" else 0):  # 30 s at most
                if [e for e in events if e.throttle_time > 0]:
                    break
                producer.poll(0.2)
            consumer = confluent_kafka.Consumer(
                librdkafka(px, pki, user, **{"group.id": fresh("g"), "throttle_cb": events.append,
                                             "enable.auto.commit": False})
            )  # fmt: skip
            try:
                consumer.assign(
                    [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
                )
                got: list[bytes] = []
                while len(got) < len(values):
                    message = consumer.poll(1)
                    if message is not None and not message.error():
                        got.append(message.value())
                assert got == values
                for _ in range(150 if user == "alice" else 0):  # 30 s at most
                    if len([e for e in events if e.throttle_time > 0]) >= 2:
                        break
                    assert consumer.poll(0.2) is None
            finally:
                consumer.close()
            producer.poll(0)
            told[user] = [e.throttle_time for e in events if e.throttle_time > 0]
        counted = tenants.quotas.throttled_ms
    assert len(told["alice"]) >= 2 and told["bob"] == []
    assert counted[("acme", "produce")] > 0 and counted[("acme", "fetch")] > 0
    assert not [k for k in counted if k[0] == "globex"]


def _tls_socket(pki: dict[str, str], user: str, host: str, port: int) -> ssl.SSLSocket:
    context = ssl.create_default_context(cafile=pki["ca"])
    context.load_cert_chain(pki[user], pki[f"{user}-key"])
    return context.wrap_socket(
        socket.create_connection((host, port), timeout=30), server_hostname=host
    )


def _at_coordinator(px: RunningProxy, pki: dict[str, str], user: str, group: str) -> Any:
    """A connection, as ``user``, to the proxy's port of ``group``'s coordinator."""
    from trafka.codec.messages import k10_find_coordinator as fc

    host, port = px.bootstrap_servers.rsplit(":", 1)
    with _tls_socket(pki, user, host, int(port)) as sock:
        found = call(sock, ApiKey.FIND_COORDINATOR, 4,
                     fc.FindCoordinatorRequest(key_type=0, coordinator_keys=[group]))  # fmt: skip
    (coordinator,) = found.coordinators
    assert coordinator.error_code == 0 and coordinator.key == group, coordinator
    return _tls_socket(pki, user, coordinator.host, coordinator.port)


def test_streams_groups_in_each_tenants_namespace_on_kafka(
    shared: RunningProxy, pki: dict[str, str], kafka4: KafkaCluster
) -> None:
    """A streams group (KIP-1071) joined through the proxy with a topology:
    Kafka 4.4 holds the group and its topology's topics under the tenant's
    prefix; StreamsGroupDescribe through the proxy shows the tenant's names;
    the other tenant naming the group (as it is named, or as Kafka holds it)
    finds none; ListGroups shows it to its tenant only; DeleteGroups deletes it."""
    from trafka.codec.messages import k08_offset_commit as oc_m
    from trafka.codec.messages import k09_offset_fetch as of_m
    from trafka.codec.messages import k15_describe_groups as dgs_m
    from trafka.codec.messages import k16_list_groups as lg
    from trafka.codec.messages import k42_delete_groups as dg
    from trafka.codec.messages import k88_streams_group_heartbeat as sgh
    from trafka.codec.messages import k89_streams_group_describe as sgd

    topic, group = fresh("streams-in"), fresh("app")
    changelog = f"{group}-store-changelog"
    h = sgh.StreamsGroupHeartbeatRequest

    async def make_topic() -> None:
        with anyio.fail_after(60):
            async with open_admin(**sdk(shared, pki, "alice")) as admin:
                await admin.create_topics([NewTopic(topic, 2, 1)])
                # The SDK waits out a coordinator not yet available (a fresh cluster).
                await admin.describe_groups([group])

    anyio.run(make_topic, backend="trio")
    member = str(uuid.uuid4())
    topology = h.Topology(epoch=0, subtopologies=[h.Subtopology(
        subtopology_id="0", source_topics=[topic],
        state_changelog_topics=[h.TopicInfo(name=changelog)],  # partitions: undefined (0)
    )])  # fmt: skip
    join = h(
        group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30_000,
        process_id=str(uuid.uuid4()), topology=topology, active_tasks=[], standby_tasks=[],
        warmup_tasks=[],
    )  # fmt: skip
    describe = sgd.StreamsGroupDescribeRequest(group_ids=[group])
    with _at_coordinator(shared, pki, "alice", group) as sock:
        joined = call(sock, ApiKey.STREAMS_GROUP_HEARTBEAT, 1, join)
        assert joined.error_code == 0, joined
        assert joined.member_epoch >= 1
        (shown,) = call(sock, ApiKey.STREAMS_GROUP_DESCRIBE, 1, describe).groups
        assert shown.error_code == 0 and shown.group_id == group, shown
        (sub,) = shown.topology.subtopologies
        assert sub.source_topics == [topic]
        assert [t.name for t in sub.state_changelog_topics] == [changelog]
        assert [m.member_id for m in shown.members] == [member]
        listed = call(sock, ApiKey.LIST_GROUPS, 5, lg.ListGroupsRequest(types_filter=["streams"]))
        assert group in {g.group_id for g in listed.groups}
        # A streams member commits as a KIP-848 one does (its member epoch),
        # and its group's offsets are fetched by the tenant's names.
        oc = oc_m.OffsetCommitRequest
        committed = call(sock, ApiKey.OFFSET_COMMIT, 9, oc(
            group_id=group, generation_id_or_member_epoch=joined.member_epoch, member_id=member,
            topics=[oc.OffsetCommitRequestTopic(name=topic, partitions=[
                oc.OffsetCommitRequestPartition(partition_index=0, committed_offset=0)])],
        ))  # fmt: skip
        assert [(t.name, [p.error_code for p in t.partitions]) for t in committed.topics] == [
            (topic, [0])
        ], committed
        of = of_m.OffsetFetchRequest
        fetched = call(sock, ApiKey.OFFSET_FETCH, 9,
                       of(groups=[of.OffsetFetchRequestGroup(group_id=group, topics=None)]))  # fmt: skip
        (offsets,) = fetched.groups
        assert offsets.group_id == group and offsets.error_code == 0, offsets
        assert [(t.name, [p.committed_offset for p in t.partitions]) for t in offsets.topics] == [
            (topic, [0])
        ]
        # DescribeGroups (the classic API) of it: answered by its own name.
        dgs = call(sock, ApiKey.DESCRIBE_GROUPS, 5, dgs_m.DescribeGroupsRequest(groups=[group]))
        assert [g.group_id for g in dgs.groups] == [group], dgs
        assert "acme." not in repr(dgs), dgs
        assert not [g for g in listed.groups if g.group_id.startswith(("acme.", "globex."))]
    # Kafka holds it under alice's prefix, with her topology's names.
    host, port = kafka4.bootstrap_servers.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as direct:
        asked = sgd.StreamsGroupDescribeRequest(group_ids=[f"acme.{group}"])
        (held,) = call(direct, ApiKey.STREAMS_GROUP_DESCRIBE, 1, asked).groups
        assert held.error_code == 0, held
        (sub,) = held.topology.subtopologies
        assert sub.source_topics == [f"acme.{topic}"]
        assert [t.name for t in sub.state_changelog_topics] == [f"acme.{changelog}"]
    # Bob names it as alice does, and as Kafka holds it: no such group.
    with _at_coordinator(shared, pki, "bob", group) as sock:
        for name in (group, f"acme.{group}"):
            asked = sgd.StreamsGroupDescribeRequest(group_ids=[name])
            (other,) = call(sock, ApiKey.STREAMS_GROUP_DESCRIBE, 1, asked).groups
            assert other.error_code == ErrorCode.GROUP_ID_NOT_FOUND, other
            assert other.topology is None and not other.members
        listed = call(sock, ApiKey.LIST_GROUPS, 5, lg.ListGroupsRequest(types_filter=["streams"]))
        assert group not in {g.group_id for g in listed.groups}
        # Bob's own group of that name, with the same topology: his, apart.
        # He has no topic of that name: Kafka's status names it missing
        # (MISSING_SOURCE_TOPICS), without his prefix; no tasks.
        bobs = dataclasses.replace(join, member_id=str(uuid.uuid4()))
        joined = call(sock, ApiKey.STREAMS_GROUP_HEARTBEAT, 1, bobs)
        assert joined.error_code == 0 and not joined.active_tasks, joined
        details = [s.status_detail for s in joined.status]
        assert any(topic in d for d in details), details
        assert not [d for d in details if "acme." in d or "globex." in d], details
        (his,) = call(sock, ApiKey.STREAMS_GROUP_DESCRIBE, 1, describe).groups
        assert [m.member_id for m in his.members] == [bobs.member_id], his
        call(sock, ApiKey.STREAMS_GROUP_HEARTBEAT, 1,
             h(group_id=group, member_id=bobs.member_id, member_epoch=-1))  # fmt: skip
    with _at_coordinator(shared, pki, "alice", group) as sock:
        left = call(sock, ApiKey.STREAMS_GROUP_HEARTBEAT, 1,
                    h(group_id=group, member_id=member, member_epoch=-1))  # fmt: skip
        assert left.error_code == 0, left
        deleted = call(sock, ApiKey.DELETE_GROUPS, 2, dg.DeleteGroupsRequest(groups_names=[group]))
        assert [(r.group_id, r.error_code) for r in deleted.results] == [(group, 0)]
        (gone,) = call(sock, ApiKey.STREAMS_GROUP_DESCRIBE, 1, describe).groups
        assert gone.error_code == ErrorCode.GROUP_ID_NOT_FOUND, gone


def test_streams_topology_descriptions_on_kafka(shared: RunningProxy, pki: dict[str, str]) -> None:
    """KIP-1331: a streams member's topology description
    (StreamsGroupTopologyDescriptionUpdate, its topics rewritten as
    tests/proxy/test_proxy_tenants_streams.py checks) is served to a tenant,
    not refused: it reaches Kafka 4.4, which without a topology description
    plugin configured answers it UNSUPPORTED_VERSION, its message its own;
    StreamsGroupDescribe v1 asking for the description shows none then."""
    from trafka.codec.messages import k88_streams_group_heartbeat as sgh
    from trafka.codec.messages import k89_streams_group_describe as sgd
    from trafka.codec.messages import k93_streams_group_topology_description_update as sgu

    topic, out, group = fresh("streams-src"), fresh("streams-out"), fresh("app")

    async def make_topic() -> None:
        with anyio.fail_after(60):
            async with open_admin(**sdk(shared, pki, "alice")) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1), NewTopic(out, 1, 1)])
                await admin.describe_groups([group])

    anyio.run(make_topic, backend="trio")
    h, u = sgh.StreamsGroupHeartbeatRequest, sgu.StreamsGroupTopologyDescriptionUpdateRequest
    member = str(uuid.uuid4())
    topology = h.Topology(epoch=0, subtopologies=[h.Subtopology(subtopology_id="0",
                                                                source_topics=[topic])])  # fmt: skip
    described = u.TopologyDescription(subtopologies=[u.TopologyDescriptionSubtopology(
        subtopology_id="0", nodes=[
            u.TopologyDescriptionNode(name="KSTREAM-SOURCE-0000000000", node_type=1,
                                      source_topics=[topic], successors=["KSTREAM-SINK-0000000001"]),
            u.TopologyDescriptionNode(name="KSTREAM-SINK-0000000001", node_type=3, sink_topic=out),
        ])])  # fmt: skip
    asked = sgd.StreamsGroupDescribeRequest(group_ids=[group], include_topology_description=True)
    with _at_coordinator(shared, pki, "alice", group) as sock:
        joined = call(sock, ApiKey.STREAMS_GROUP_HEARTBEAT, 1, h(
            group_id=group, member_id=member, member_epoch=0, rebalance_timeout_ms=30_000,
            process_id=str(uuid.uuid4()), topology=topology, active_tasks=[], standby_tasks=[],
            warmup_tasks=[]))  # fmt: skip
        assert joined.error_code == 0, joined
        updated = call(sock, ApiKey.STREAMS_GROUP_TOPOLOGY_DESCRIPTION_UPDATE, 0, u(
            group_id=group, member_id=member, topology_epoch=0,
            topology_description=described))  # fmt: skip
        assert updated.error_code == ErrorCode.UNSUPPORTED_VERSION, updated
        assert "topology description plugin" in (updated.error_message or ""), updated
        (shown,) = call(sock, ApiKey.STREAMS_GROUP_DESCRIBE, 1, asked).groups
        assert shown.error_code == 0 and shown.group_id == group, shown
        assert shown.topology_description is None and shown.topology_description_status != 3
        call(sock, ApiKey.STREAMS_GROUP_HEARTBEAT, 1,
             h(group_id=group, member_id=member, member_epoch=-1))  # fmt: skip
