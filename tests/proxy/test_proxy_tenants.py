"""Virtual clusters through the proxy (``trafka.proxy.tenants``, issue #83
item 2; docs/proxy.md, "Virtual clusters (tenants)").

Two tenants, picked by their SASL PLAIN principals, share one brokerlite
through one proxy: each creates, produces, consumes, commits and runs
transactions under the same names, which the broker holds under each
tenant's prefix; neither sees, nor can name, the other's topics, groups or
transactional ids (a name a tenant gives is always taken under its own
prefix, so the other's resources answer as Kafka answers resources that do
not exist: UNKNOWN_TOPIC_OR_PARTITION, GROUP_ID_NOT_FOUND, an empty listing).
"""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import confluent_kafka.admin
import pytest
from client_matrix import (
    KEYS,
    by_partition,
    java_producer,
    java_sends,
    read_committed,
    sdk_and_confluent_sends,
)
from encryption_helpers import once_in_order
from proxy_helpers import call, fresh, misreported

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.codec import ApiKey, ErrorCode, protocol
from trafka.codec.messages import k17_sasl_handshake as hs
from trafka.codec.messages import k36_sasl_authenticate as sauth
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.sasl import plain_message
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.proxy.tenants import Tenants
from trafka.sdk import (
    ConfigError,
    NewTopic,
    open_admin,
    open_consumer,
    open_producer,
    open_share_consumer,
)
from trafka.sdk.partitioners import murmur2_partition

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.compat("proxy", "virtual clusters (tenants): names prefixed, others hidden"),
]

USERS = {"admin": "admin-pw", "alice": "alice-pw", "bob": "bob-pw", "eve": "eve-pw"}
TENANTS = {
    "tenants": [
        {"name": "acme", "prefix": "acme.", "principals": ["User:alice"]},
        {"name": "globex", "prefix": "globex.", "principals": ["User:bob"]},
    ]
}


# -- the settings ------------------------------------------------------------------------------


def test_every_problem_of_the_settings_is_named() -> None:
    with pytest.raises(ConfigError) as refused:
        Tenants().configure(
            {
                "tenants": [
                    {"name": "a", "prefix": "a.", "principals": ["User:x"]},
                    {"name": "ab", "prefix": "a.b.", "principals": ["User:y"]},  # starts with a.
                    {"name": "c", "prefix": "c/", "principals": ["User:z"]},
                    {"name": "d", "prefix": "d.", "principals": ["User:x", "carol"]},
                    {"name": "e", "prefix": "e.", "principal": ["User:e"]},
                    # Kafka: topic names colliding with '.' read as '_' (acme.x, acme_x)
                    {"name": "f", "prefix": "a_", "principals": ["User:f"]},
                ],
                "tenant": [],
            }
        )
    problems = refused.value.problems
    assert any("unknown setting 'tenant'" in p for p in problems)
    assert any("tenants[1]: prefix 'a.b.'" in p and "one starts the other" in p for p in problems)
    assert any("tenants[2]: prefix 'c/'" in p for p in problems)
    assert any("tenants[3]: principal 'User:x' is already in tenant 'a'" in p for p in problems)
    assert any("tenants[3]: principal 'carol' is not type:name" in p for p in problems)
    assert any("tenants[4]: unknown setting 'principal'" in p for p in problems)
    assert any("tenants[5]: prefix 'a_' and tenant 'a''s 'a.'" in p for p in problems)


def test_check_config_names_the_tenants_problems(tmp_path: Path) -> None:
    from click.testing import CliRunner

    from trafka.proxy.cli import command

    toml = tmp_path / "proxy.toml"
    toml.write_text(
        'upstream = "127.0.0.1:9092"\n'
        "[[filter]]\n"
        'use = "trafka.proxy.tenants:Tenants"\n'
        "[[filter.settings.tenants]]\n"
        'name = "a"\nprefix = "a."\nprincipals = ["User:x"]\n'
        "[[filter.settings.tenants]]\n"
        'name = "b"\nprefix = "a.b."\nprincipals = ["User:x"]\n'
    )
    result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
    assert result.exit_code == 1, result.output
    use = "filter trafka.proxy.tenants:Tenants"
    assert f"{use}: tenants[1]: prefix 'a.b.'" in result.output
    assert f"{use}: tenants[1]: principal 'User:x' is already in tenant 'a'" in result.output


def test_only_a_tenant_is_served() -> None:
    """Before a login, only ApiVersions and SASL pass; after, a principal of
    no tenant is closed (a plaintext listener's clients never log in: passed
    on, their requests would name every tenant's resources)."""
    from trafka.codec.messages import k03_metadata as md
    from trafka.proxy.filters import CloseConnection, FilterContext, Session

    tenants = Tenants()
    tenants.configure(TENANTS)
    request = md.MetadataRequest(topics=None)

    def ctx(key: int, principal: str | None) -> FilterContext:
        session = Session(authenticated=principal is not None, principal=principal)
        return FilterContext(key, 12, 1, "c", ("127.0.0.1", 1), -1, session=session)

    assert tenants.on_request(ctx(ApiKey.API_VERSIONS, None), request) is request
    for principal in (None, "User:eve"):
        with pytest.raises(CloseConnection):
            tenants.on_request(ctx(ApiKey.METADATA, principal), request)
    assert tenants.on_request(ctx(ApiKey.METADATA, "User:alice"), request) == request
    # Reloaded (SIGHUP's configure): the next request follows the new tenants.
    tenants.configure({"tenants": [{"name": "e", "prefix": "e.", "principals": ["User:eve"]}]})
    assert tenants.on_request(ctx(ApiKey.METADATA, "User:eve"), request) == request
    with pytest.raises(CloseConnection):
        tenants.on_request(ctx(ApiKey.METADATA, "User:alice"), request)
    assert [(s.labels, s.value) for s in tenants.samples()] == [
        ((("tenant", "acme"), ("outcome", "served")), 1),
        ((("tenant", "e"), ("outcome", "served")), 1),
    ]
    # A version the codec does not read: refused, not passed unread.
    assert tenants.request_frames(ApiKey.METADATA, 99)
    assert not tenants.request_frames(ApiKey.API_VERSIONS, 99)


# -- through the proxy, to brokerlite ------------------------------------------------------------


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("tenants"),
        security_protocol="SASL_PLAINTEXT",
        sasl_users=USERS,
        group_initial_rebalance_delay_ms=0,
    ) as running:
        yield running


@pytest.fixture(scope="module")
def shared(
    secured: RunningBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningProxy]:
    tenants = Tenants()
    tenants.configure(TENANTS)
    credentials = tmp_path_factory.mktemp("tenants-proxy") / "principals.json"
    credentials.write_text(json.dumps({
        f"User:{user}": {"mechanism": "PLAIN", "username": user, "password": password}
        for user, password in USERS.items()
    }))  # fmt: skip
    with proxy_in_thread(
        upstream=(secured.bootstrap_servers,),
        port=0,
        filters=(tenants,),
        principal_credentials=str(credentials),
    ) as px:
        yield px


def login(servers: str, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def librdkafka(px: RunningProxy, user: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": px.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
        **more,
    }


async def _read(consumer: Any, n: int) -> list[bytes]:
    got: list[bytes] = []
    while len(got) < n:
        for records in (await consumer.getmany(timeout_ms=1000)).values():
            got += [r.value for r in records]
    return got


def test_two_tenants_share_names_through_the_sdk(
    shared: RunningProxy, secured: RunningBroker
) -> None:
    px = shared
    topic, group, txn = fresh("orders"), fresh("g"), fresh("tx")

    async def tenant(user: str) -> None:
        async with open_admin(**login(px.bootstrap_servers, user)) as admin:
            await admin.create_topics([NewTopic(topic, 2, 1)])
        async with open_producer(**login(px.bootstrap_servers, user)) as producer:
            assert (await producer.send_and_wait(topic, user.encode(), key=b"k")).offset == 0
        async with open_producer(
            **login(px.bootstrap_servers, user), transactional_id=txn
        ) as producer:
            await producer.init_transactions()
            producer.begin_transaction()
            await producer.send(topic, f"{user}-txn".encode(), key=b"k")
            await producer.commit_transaction()
        async with open_consumer(
            topic,
            group_id=group,
            auto_offset_reset="earliest",
            isolation_level="read_committed",
            **login(px.bootstrap_servers, user),
        ) as consumer:
            assert await _read(consumer, 2) == [user.encode(), f"{user}-txn".encode()]
            await consumer.commit()
            # The subscription and assignment inside the group's data: the
            # broker's names on the broker, the tenant's through the proxy.
            prefix = "acme." if user == "alice" else "globex."
            for servers, who, name, shown in (
                (secured.bootstrap_servers, "admin", prefix + group, prefix + topic),
                (px.bootstrap_servers, user, group, topic),
            ):
                async with open_admin(**login(servers, who)) as admin:
                    described = (await admin.describe_groups([name]))[name]
                    assert {tp.topic for m in described.members for tp in m.assignment} == {shown}
        async with open_admin(**login(px.bootstrap_servers, user)) as admin:
            committed = await admin.list_consumer_group_offsets(group)
            assert sum(committed.values()) in (2, 3)  # two records (and the commit marker)
            assert {tp.topic for tp in committed} == {topic}
            listed = await admin.list_topics()
            assert topic in listed
            assert not [t for t in listed if t.startswith(("acme.", "globex.", "__"))]
            groups = {g.group_id for g in await admin.list_groups()}
            assert group in groups and not [g for g in groups if "." in g]

    async def main() -> None:
        with anyio.fail_after(120):
            await tenant("alice")
            await tenant("bob")
            # Straight to the broker: each tenant's resources under its prefix.
            async with open_admin(**login(secured.bootstrap_servers, "admin")) as admin:
                listed = await admin.list_topics()
                assert {f"acme.{topic}", f"globex.{topic}"} <= set(listed)
                assert topic not in listed
                groups = {g.group_id for g in await admin.list_groups()}
                assert {f"acme.{group}", f"globex.{group}"} <= groups

    anyio.run(main, backend="trio")
    counted = px.statistics.filters["tenants"]
    assert counted[("acme", "served")] > 0 and counted[("globex", "served")] > 0


def test_kafkas_java_producer_and_every_client_in_every_mode_as_a_tenant(
    shared: RunningProxy, secured: RunningBroker
) -> None:
    """Kafka's Java producer (4.4, SASL PLAIN: ``sasl.jaas.config``),
    confluent-kafka and trafka's SDK log in as alice (tenant acme) and
    produce plain, idempotent and in transactions (the Java producer's second
    aborted), each record to librdkafka's CRC32 partition, routed as
    themselves (the proxy holds their logins): a read_committed consumer as
    alice reads every committed record once, each producer's keys in order and
    on their murmur2 partitions, every report where its record is; the broker
    holds the topic under acme's prefix."""
    topic, tag, partitions, n = fresh("matrix"), fresh("mx"), 3, 30

    async def create() -> None:
        async with open_admin(**login(shared.bootstrap_servers, "alice")) as admin:
            await admin.create_topics([NewTopic(topic, partitions, 1)])

    anyio.run(create, backend="trio")
    alice = login(shared.bootstrap_servers, "alice")
    del alice["bootstrap_servers"]
    jaas = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        f'username="alice" password="{USERS["alice"]}";'
    )
    java = {
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.jaas.config": jaas,
    }
    servers = shared.bootstrap_servers
    reports, sent = java_sends(java_producer(), servers, topic, n, "java", f"{tag}-j", java)
    ck = librdkafka(shared, "alice")
    more, values = sdk_and_confluent_sends(servers, topic, tag, n, alice, ck)
    reports, sent = reports + more, sent + values
    records = read_committed(servers, topic, partitions, sent, **alice)
    once_in_order(by_partition(records, partitions), sent, keys=KEYS)
    assert misreported(records, reports) is None, misreported(records, reports)
    assert [r for r in records if r.partition != murmur2_partition(r.key, partitions)] == []
    admin = login(secured.bootstrap_servers, "admin")
    del admin["bootstrap_servers"]
    straight = read_committed(secured.bootstrap_servers, f"acme.{topic}", partitions, sent, **admin)
    assert sorted(r.value for r in straight) == sorted(sent)


def test_confluent_clients_in_their_own_namespace(
    shared: RunningProxy, secured: RunningBroker
) -> None:
    px = shared
    topic, group = fresh("events"), fresh("cg")
    for user in ("alice", "bob"):
        admin = confluent_kafka.admin.AdminClient(librdkafka(px, user))
        for future in admin.create_topics([confluent_kafka.admin.NewTopic(topic, 1, 1)]).values():
            future.result(30)
        producer = confluent_kafka.Producer(librdkafka(px, user, **{"enable.idempotence": True}))
        producer.produce(topic, user.encode())
        assert producer.flush(60) == 0
        consumer = confluent_kafka.Consumer(
            librdkafka(px, user, **{"group.id": group, "auto.offset.reset": "earliest"})
        )
        consumer.subscribe([topic])
        try:
            message = None
            while message is None or message.error():
                message = consumer.poll(1)
            assert message.value() == user.encode() and message.topic() == topic
            consumer.commit(message, asynchronous=False)
            committed = consumer.committed([confluent_kafka.TopicPartition(topic, 0)], 30)
            assert committed[0].offset == 1
        finally:
            consumer.close()
        metadata = admin.list_topics(timeout=30)
        assert topic in metadata.topics
        assert not [t for t in metadata.topics if t.startswith(("acme.", "globex.", "__"))]

    async def broker_side() -> None:
        with anyio.fail_after(60):
            async with open_admin(**login(secured.bootstrap_servers, "admin")) as admin:
                listed = await admin.list_topics()
                assert {f"acme.{topic}", f"globex.{topic}"} <= set(listed)

    anyio.run(broker_side, backend="trio")


# -- one tenant naming the other's resources: raw requests -----------------------------------


def _logged_in(px: RunningProxy, user: str) -> socket.socket:
    host, port = px.bootstrap_servers.rsplit(":", 1)
    sock = socket.create_connection((host, int(port)), timeout=30)
    call(sock, ApiKey.SASL_HANDSHAKE, 1, hs.SaslHandshakeRequest(mechanism="PLAIN"))
    answer = call(
        sock,
        ApiKey.SASL_AUTHENTICATE,
        2,
        sauth.SaslAuthenticateRequest(auth_bytes=plain_message(user, USERS[user])),
    )
    assert answer.error_code == 0
    return sock


def _closed(sock: socket.socket, key: int, version: int, body: Any) -> bool:
    header = RequestHeader(
        request_api_key=key, request_api_version=version, correlation_id=9, client_id="t"
    )
    sock.sendall(protocol.encode_request(header, body))
    try:
        return sock.recv(4) == b""
    except ConnectionResetError:
        return True


def test_unserved_apis_are_refused_and_strangers_turned_away(shared: RunningProxy) -> None:
    from trafka.codec.messages import k03_metadata as md
    from trafka.codec.messages import k18_api_versions as av
    from trafka.codec.messages import k29_describe_acls as acls
    from trafka.codec.messages import k30_create_acls as ca

    with _logged_in(shared, "alice") as sock:
        # Not offered...
        offered = {a.api_key for a in call(sock, ApiKey.API_VERSIONS, 3, av.ApiVersionsRequest(
            client_software_name="t", client_software_version="1")).api_keys}  # fmt: skip
        assert {ApiKey.METADATA, ApiKey.PRODUCE, ApiKey.FETCH, ApiKey.SASL_AUTHENTICATE} <= offered
        assert not offered & {ApiKey.DESCRIBE_ACLS, ApiKey.CREATE_ACLS}
        assert {ApiKey.SHARE_FETCH, ApiKey.SHARE_GROUP_HEARTBEAT} <= offered
        # ...and refused when asked all the same. An answer with its own error
        # code: refused as not authorized.
        answer = call(
            sock,
            ApiKey.DESCRIBE_ACLS,
            3,
            acls.DescribeAclsRequest(
                resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                principal_filter=None, host_filter=None, operation=1, permission_type=1,
            ),
        )  # fmt: skip
        assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        # One without: the connection is closed rather than the request passed unprefixed.
        request = ca.CreateAclsRequest(
            creations=[
                ca.CreateAclsRequest.AclCreation(
                    resource_type=2, resource_name="globex.", resource_pattern_type=4,
                    principal="User:alice", host="*", operation=2, permission_type=3,
                )
            ]
        )  # fmt: skip
        assert _closed(sock, ApiKey.CREATE_ACLS, 3, request)
    with _logged_in(shared, "eve") as sock:  # a principal of no tenant
        assert _closed(sock, ApiKey.METADATA, 12, md.MetadataRequest(topics=None))
    host, port = shared.bootstrap_servers.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=30) as sock:  # no login at all
        assert _closed(sock, ApiKey.METADATA, 12, md.MetadataRequest(topics=None))


def test_a_tenant_cannot_name_the_others_resources(
    shared: RunningProxy, secured: RunningBroker
) -> None:
    from tenant_probes import probe_every_api

    px = shared
    topic, group, txn = fresh("secret"), fresh("sg"), fresh("stx")

    async def bob_owns() -> tuple[uuid.UUID, dict[Any, int]]:
        with anyio.fail_after(60):
            async with open_admin(**login(px.bootstrap_servers, "bob")) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            async with open_producer(
                **login(px.bootstrap_servers, "bob"), transactional_id=txn
            ) as producer:
                await producer.init_transactions()
                producer.begin_transaction()
                await producer.send(topic, b"bob's", key=b"k")
                await producer.commit_transaction()
            async with open_consumer(
                topic, group_id=group, auto_offset_reset="earliest",
                **login(px.bootstrap_servers, "bob"),
            ) as consumer:  # fmt: skip
                await _read(consumer, 1)
                await consumer.commit()
            async with open_admin(**login(secured.bootstrap_servers, "admin")) as admin:
                described = await admin.describe_topics([f"globex.{topic}"])
            async with open_admin(**login(px.bootstrap_servers, "bob")) as admin:
                committed = await admin.list_consumer_group_offsets(group)
            return described[f"globex.{topic}"].topic_id, committed

    bob_topic_id, bobs_offsets = anyio.run(bob_owns, backend="trio")
    assert bobs_offsets
    with _logged_in(px, "alice") as sock:
        seen = probe_every_api(
            lambda key, version, body: call(sock, key, version, body),
            names={"topic": topic, "group": group, "txn": txn},
            prefixed={"topic": f"globex.{topic}", "group": f"globex.{group}",
                      "txn": f"globex.{txn}"},
            topic_id=bob_topic_id,
        )  # fmt: skip
    # Every API answered, none with bob's data: what each answered is checked
    # in the probes; here, that they all ran.
    assert len(seen) >= 25, sorted(seen)

    async def bob_still_owns() -> None:
        with anyio.fail_after(60):
            async with open_admin(**login(px.bootstrap_servers, "bob")) as admin:
                assert topic in await admin.list_topics()
                assert await admin.list_consumer_group_offsets(group) == bobs_offsets
            async with open_consumer(
                topic, group_id=fresh("again"), auto_offset_reset="earliest",
                **login(px.bootstrap_servers, "bob"),
            ) as consumer:  # fmt: skip
                assert await _read(consumer, 1) == [b"bob's"]

    anyio.run(bob_still_owns, backend="trio")


def _assigned(sock: socket.socket, group: str, **subscription: Any) -> set[uuid.UUID]:
    """The topic ids a KIP-848 member of ``group`` is given, once its
    assignment holds topics (or after a few heartbeats, when it holds none)."""
    from trafka.codec.messages import k68_consumer_group_heartbeat as cgh
    from trafka.codec.messages import k69_consumer_group_describe as cgd

    member, epoch, ids = str(uuid.uuid4()), 0, set()
    for _ in range(10):
        answer = call(
            sock,
            ApiKey.CONSUMER_GROUP_HEARTBEAT,
            1,
            cgh.ConsumerGroupHeartbeatRequest(
                group_id=group, member_id=member, member_epoch=epoch, rebalance_timeout_ms=30_000,
                topic_partitions=[] if epoch == 0 else None, **subscription,
            ),
        )  # fmt: skip
        assert answer.error_code == 0, answer
        epoch = answer.member_epoch
        if answer.assignment is not None:
            ids = {t.topic_id for t in answer.assignment.topic_partitions}
            if ids:
                break
    # ConsumerGroupDescribe shows the member as the tenant made it.
    described = call(
        sock,
        ApiKey.CONSUMER_GROUP_DESCRIBE,
        1,
        cgd.ConsumerGroupDescribeRequest(group_ids=[group]),
    )
    (shown,) = described.groups
    assert shown.group_id == group and len(shown.members) == 1
    if "subscribed_topic_regex" in subscription:
        assert shown.members[0].subscribed_topic_regex == subscription["subscribed_topic_regex"]
    names = {t.topic_name for t in shown.members[0].assignment.topic_partitions}
    assert not [n for n in names if n.startswith(("acme.", "globex."))], names
    assert not ids or (names and all(names))
    call(
        sock,
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        1,
        cgh.ConsumerGroupHeartbeatRequest(group_id=group, member_id=member, member_epoch=-1),
    )
    return ids


def test_share_groups_in_each_tenants_namespace(
    shared: RunningProxy, secured: RunningBroker
) -> None:
    """Share groups (KIP-932) as tenants: alice and bob each have a topic and a
    share group of the same names; each share consumer reads its own tenant's
    records, the broker holds each tenant's group under its prefix, and the
    admin's views (ShareGroupDescribe, share group offsets) show the tenant's
    names without the prefix."""
    px = shared
    topic, group = fresh("sq"), fresh("sgrp")

    async def as_tenant(user: str) -> tuple[list[bytes], Any, Any]:
        servers = px.bootstrap_servers
        async with open_admin(**login(servers, user)) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1)])
            await admin.alter_group_configs({group: {"share.auto.offset.reset": "earliest"}})
        async with open_producer(**login(servers, user)) as producer:
            await producer.send_and_wait(topic, f"{user}'s".encode())
        async with open_share_consumer(topic, group_id=group, **login(servers, user)) as share:
            got: list[bytes] = []
            while not got:
                got = [r.value for r in await share.poll(timeout_ms=1000)]
            await share.commit()
            async with open_admin(**login(servers, user)) as admin:
                described = (await admin.describe_share_groups([group]))[group]
                offsets = await admin.list_share_group_offsets(group)
        return got, described, offsets

    async def main() -> None:
        with anyio.fail_after(120):
            for user in ("alice", "bob"):
                got, described, offsets = await as_tenant(user)
                assert got == [f"{user}'s".encode()]
                assert described.group_id == group
                assert {tp.topic for m in described.members for tp in m.assignment} == {topic}
                assert {tp.topic for tp in offsets} == {topic}
            async with open_admin(**login(secured.bootstrap_servers, "admin")) as admin:
                held = {g.group_id for g in await admin.list_groups()}
            assert {f"acme.{group}", f"globex.{group}"} <= held and group not in held

    anyio.run(main, backend="trio")


def test_consumer_group_subscriptions_stay_in_the_tenant(shared: RunningProxy) -> None:
    """KIP-848: a regex subscription is matched by the broker against the
    broker's names, so the proxy anchors it behind the tenant's prefix; a
    subscription naming the other tenant's topic is given nothing."""
    from trafka.codec.messages import k03_metadata as md

    px = shared
    mine, theirs = fresh("mine"), fresh("theirs")

    async def topics() -> None:
        with anyio.fail_after(60):
            async with open_admin(**login(px.bootstrap_servers, "alice")) as admin:
                await admin.create_topics([NewTopic(mine, 1, 1)])
            async with open_admin(**login(px.bootstrap_servers, "bob")) as admin:
                await admin.create_topics([NewTopic(theirs, 1, 1)])

    anyio.run(topics, backend="trio")
    with _logged_in(px, "alice") as sock:
        own = {
            t.topic_id
            for t in call(sock, ApiKey.METADATA, 12, md.MetadataRequest(topics=None)).topics
        }
        assigned = _assigned(sock, fresh("rg"), subscribed_topic_regex=".*")
        assert assigned and assigned <= own
        assigned = _assigned(sock, fresh("rg"), subscribed_topic_regex=f"{mine[:-1]}.*")
        assert len(assigned) == 1
        (name,) = [t.name for t in call(sock, ApiKey.METADATA, 12, md.MetadataRequest(
            topics=[md.MetadataRequest.MetadataRequestTopic(topic_id=next(iter(assigned)))]
        )).topics]  # fmt: skip
        assert name == mine
        assert not _assigned(sock, fresh("ng"), subscribed_topic_names=[theirs, f"globex.{theirs}"])


def _docs_example() -> str:
    """The TOML example of docs/proxy.md's "Virtual clusters (tenants)"."""
    text = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    section = text.split("## Virtual clusters (tenants)", 1)[1]
    return section.split("```toml\n", 1)[1].split("```", 1)[0]


def test_the_docs_example_runs(secured: RunningBroker, tmp_path: Path) -> None:
    """docs/proxy.md's example, as a file: checked, then served (its upstream,
    listener and credentials pointed at this test's) to a tenant's client."""
    from click.testing import CliRunner

    from trafka.proxy.cli import command
    from trafka.proxy.reload import load
    from trafka.proxy.settings import Sources

    credentials = tmp_path / "principals.json"
    credentials.write_text(json.dumps({
        f"User:{user}": {"mechanism": "PLAIN", "username": user, "password": password}
        for user, password in USERS.items()
    }))  # fmt: skip
    toml = tmp_path / "proxy.toml"
    toml.write_text(
        _docs_example()
        .replace("kafka-1.internal:9092", secured.bootstrap_servers)
        .replace("0.0.0.0:19092", "127.0.0.1:0")
        .replace("proxy.internal", "127.0.0.1")
        .replace("/etc/trafka/principals.json", str(credentials))
    )
    result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
    assert result.exit_code == 0, result.output
    loaded = load(Sources(path=str(toml)))
    assert [type(f).__name__ for f in loaded.config.filters] == ["Tenants"]
    topic = fresh("docs")

    async def main(px: RunningProxy) -> None:
        with anyio.fail_after(60):
            async with open_admin(**login(px.bootstrap_servers, "alice")) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            async with open_producer(**login(px.bootstrap_servers, "alice")) as producer:
                await producer.send_and_wait(topic, b"v")
            async with open_admin(**login(secured.bootstrap_servers, "admin")) as admin:
                assert f"acme.{topic}" in await admin.list_topics()

    with proxy_in_thread(loaded.config) as px:
        anyio.run(main, px, backend="trio")
