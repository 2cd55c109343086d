"""Inter-broker security in cluster mode: brokers replicate over a SASL (or TLS)
listener, logged in with their own credentials, as Kafka brokers do.

Kafka's model (the "Authentication using SASL" and "Authorization and ACLs" chapters
of Kafka's security documentation, Kafka 3.9):

* ``security.inter.broker.protocol`` (or ``inter.broker.listener.name``) names the
  listener brokers talk to each other on, ``sasl.mechanism.inter.broker.protocol``
  the mechanism, and the listener's JAAS configuration
  (``listener.name.<listener>.<mechanism>.sasl.jaas.config``) the broker's own login;
* a SCRAM broker user's credentials live in ZooKeeper (``/config/users/<user>``),
  written there before the brokers start (``kafka-configs --zookeeper ... --alter
  --add-config 'SCRAM-SHA-256=[password=...]' --entity-type users``);
* the inter-broker principal needs ClusterAction on the cluster (or is one of
  ``super.users``): a follower's Fetch from a principal without it gets
  TOPIC_AUTHORIZATION_FAILED for every partition (``KafkaApis.handleFetchRequest``).

Here three brokers on SASL_PLAINTEXT-only listeners with the ACL authorizer on and
``allow.everyone.if.no.acl.found=false`` replicate an ``acks=all`` confluent-kafka
producer's records (SCRAM-SHA-256); a raw follower fetch by a principal without
ClusterAction is refused; a broker given a wrong inter-broker password stays out of
the ISR, logs why and keeps retrying with a growing backoff; sessions with a lifetime
(KIP-368) are renewed in place; a TLS cluster verifies its peers' certificates, and a
SASL_SSL one replicates.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster_helpers import run, until
from kazoo.client import KazooClient

from trafka.brokerlite.dev.local_cluster import LocalCluster, cluster_metadata, serve_cluster
from trafka.brokerlite.security.zk_scram import encode_user_config, updated_user_config
from trafka.codec.acl import AclOperation, AclResourceType
from trafka.codec.errors import ErrorCode
from trafka.codec.framing import FrameReader
from trafka.codec.messages import k01_fetch as fetch_msg
from trafka.codec.messages import k17_sasl_handshake as handshake_msg
from trafka.codec.messages import k36_sasl_authenticate as authenticate_msg
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import decode_response_frame, encode_request
from trafka.codec.sasl import ScramCredential, plain_message

pytestmark = pytest.mark.timeout(180)

USERS = {"admin": "admin-pw", "alice": "alice-pw"}
BROKER_PASSWORD = "broker-scram-pw"
TOPIC = "replicated"
JAAS_KEY = "listener.name.sasl_plaintext.scram-sha-256.sasl.jaas.config"
LOGGER = "trafka.brokerlite.cluster"


def jaas(password: str) -> str:
    return (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="broker" password="{password}";'
    )


# Kafka's names throughout, as a server.properties would give them.
SETTINGS: dict[str, Any] = {
    "security.inter.broker.protocol": "SASL_PLAINTEXT",
    "security_protocol": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256",
    "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-256",
    JAAS_KEY: jaas(BROKER_PASSWORD),
    "sasl_users": USERS,  # admin and alice; the broker user is only in ZooKeeper
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
    "super.users": "User:admin;User:broker",
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.num.partitions": 3,
    "group.initial.rebalance.delay.ms": 0,
}


@contextlib.contextmanager
def zk_client(zk: str) -> Iterator[KazooClient]:
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def store_broker_user(zk: str) -> None:
    """The broker user's SCRAM-SHA-256 credential in ZooKeeper, before any broker starts,
    as ``kafka-configs --zookeeper`` writes it (salted hashes, never the password)."""
    credential = ScramCredential.from_password("SCRAM-SHA-256", BROKER_PASSWORD)
    data = encode_user_config(updated_user_config({}, {"SCRAM-SHA-256": credential}))
    assert BROKER_PASSWORD.encode() not in data
    with zk_client(zk) as client:
        client.create("/config/users/broker", data, makepath=True)


def scram_client(cluster: LocalCluster, user: str = "admin") -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "SCRAM-SHA-256",
        "sasl.username": user,
        "sasl.password": USERS[user],
    }


def create_topic(cluster: LocalCluster, **spec: Any) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(scram_client(cluster))
    for future in admin.create_topics([NewTopic(TOPIC, **spec)]).values():
        future.result(timeout=30)


def produce_all(cluster: LocalCluster, count: int) -> list[Any]:
    """``count`` records with acks=all (idempotent); the delivery errors."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer(
        {**scram_client(cluster), "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    )
    for i in range(count):
        producer.produce(
            TOPIC, value=b"v%d" % i, key=b"k%d" % i, on_delivery=lambda e, _m: errors.append(e)
        )
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(errors) == count
    return [e for e in errors if e is not None]


def states(cluster: LocalCluster, node: int = 1) -> dict[int, Any]:
    image = cluster.node(node).broker.cluster.image
    return {p: s for (t, p), s in image.states.items() if t == TOPIC}


def log_end(cluster: LocalCluster, node: int, partition: int) -> int:
    logs = cluster.node(node).broker.logs
    try:
        return int(logs.partition(TOPIC, partition).log_end_offset)
    except Exception:  # this broker has no log for it (it never received a record)
        return 0


# -- raw requests ---------------------------------------------------------------------------


class Raw:
    """One connection logged in with PLAIN, speaking raw frames (trio)."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.reader = FrameReader()
        self.corr = 0

    @classmethod
    async def login(cls, cluster: LocalCluster, node: int, user: str) -> Raw:
        host, port = cluster.node(node).address
        raw = cls(await trio.open_tcp_stream(host, port))
        answer = await raw.request(17, 1, handshake_msg.SaslHandshakeRequest(mechanism="PLAIN"))
        assert answer.error_code == 0
        body = authenticate_msg.SaslAuthenticateRequest(auth_bytes=plain_message(user, USERS[user]))
        answer = await raw.request(36, 2, body)
        assert answer.error_code == 0, answer
        return raw

    async def request(self, key: int, version: int, body: Any) -> Any:
        self.corr += 1
        header = RequestHeader(
            request_api_key=key,
            request_api_version=version,
            correlation_id=self.corr,
            client_id="raw",
        )
        await self.stream.send_all(encode_request(header, body))
        while (frame := self.reader.next_frame()) is None:
            data = await self.stream.receive_some(1 << 16)
            if not data:
                raise ConnectionError("the broker closed the connection")
            self.reader.feed(data)
        return decode_response_frame(frame, key, version)


def fetch_body(partition: int, offset: int, epoch: int, replica_id: int) -> Any:
    return fetch_msg.FetchRequest(
        replica_id=replica_id,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            fetch_msg.FetchRequest.FetchTopic(
                topic=TOPIC,
                partitions=[
                    fetch_msg.FetchRequest.FetchPartition(
                        partition=partition,
                        current_leader_epoch=epoch,
                        fetch_offset=offset,
                        last_fetched_epoch=-1,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
    )


async def fetch_code(cluster: LocalCluster, user: str, partition: int, *, follower: bool) -> Any:
    """The partition's error code in a Fetch v12 by ``user`` to its leader, as a
    consumer or as one of its followers (``replica_id``)."""
    state = states(cluster)[partition]
    replica_id = next(n for n in state.isr if n != state.leader) if follower else -1
    offset = log_end(cluster, state.leader, partition)
    with trio.fail_after(20):
        raw = await Raw.login(cluster, state.leader, user)
        async with raw.stream:
            body = fetch_body(partition, offset, state.leader_epoch, replica_id)
            answer = await raw.request(1, 12, body)
    assert answer.error_code == 0
    [topic] = answer.responses
    [part] = topic.partitions
    return ErrorCode(part.error_code)


async def acl(
    cluster: LocalCluster, *, resource: AclResourceType, name: str, operation: AclOperation
) -> None:
    """An ALLOW ACL for User:alice, created as admin (CreateAcls v3)."""
    from trafka.codec.messages import k30_create_acls as create_acls

    creation = create_acls.CreateAclsRequest.AclCreation(
        resource_type=resource,
        resource_name=name,
        resource_pattern_type=3,  # LITERAL
        principal="User:alice",
        host="*",
        operation=operation,
        permission_type=3,  # ALLOW
    )
    with trio.fail_after(20):
        raw = await Raw.login(cluster, 1, "admin")
        async with raw.stream:
            answer = await raw.request(30, 3, create_acls.CreateAclsRequest(creations=[creation]))
    assert [r.error_code for r in answer.results] == [0]


# -- the tests ------------------------------------------------------------------------------


def test_sasl_cluster_replicates_acks_all_and_refuses_a_follower_without_cluster_action(
    zk: str,
) -> None:
    async def test() -> None:
        await trio.to_thread.run_sync(store_broker_user, zk)
        async with serve_cluster(3, zookeeper_connect=zk, **SETTINGS) as cluster:
            await trio.to_thread.run_sync(
                lambda: create_topic(cluster, num_partitions=3, replication_factor=3)
            )
            await until(
                lambda: (
                    len(states(cluster)) == 3
                    and all(len(s.isr) == 3 for s in states(cluster).values())
                ),
                "3 partitions with 3 in-sync replicas",
            )
            failed = await trio.to_thread.run_sync(produce_all, cluster, 300)
            assert failed == []
            # Every broker holds every record: the followers fetched them, logged in as
            # "broker" (the authorizer refuses ANONYMOUS: no ACL, allow.everyone false).
            ends = {p: log_end(cluster, s.leader, p) for p, s in states(cluster).items()}
            assert sum(ends.values()) == 300
            await until(
                lambda: all(
                    log_end(cluster, node, p) == end
                    for node in (1, 2, 3)
                    for p, end in ends.items()
                ),
                "every replica holds every record",
            )
            assert all(sorted(s.isr) == [1, 2, 3] for s in states(cluster).values())

            # A follower's fetch needs ClusterAction: alice's, as a follower, is refused
            # per partition; the super user's is served.
            assert await fetch_code(cluster, "alice", 0, follower=True) == (
                ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )
            assert await fetch_code(cluster, "admin", 0, follower=True) == ErrorCode.NONE
            # READ on the topic serves alice as a consumer, not as a follower.
            await acl(
                cluster, resource=AclResourceType.TOPIC, name=TOPIC, operation=AclOperation.READ
            )
            with trio.fail_after(30):
                while await fetch_code(cluster, "alice", 0, follower=False) != ErrorCode.NONE:
                    await trio.sleep(0.1)
            assert await fetch_code(cluster, "alice", 0, follower=True) == (
                ErrorCode.TOPIC_AUTHORIZATION_FAILED
            )
            # ClusterAction on the cluster makes her fetch a follower's.
            await acl(
                cluster,
                resource=AclResourceType.CLUSTER,
                name="kafka-cluster",
                operation=AclOperation.CLUSTER_ACTION,
            )
            with trio.fail_after(30):
                while await fetch_code(cluster, "alice", 0, follower=True) != ErrorCode.NONE:
                    await trio.sleep(0.1)

    run(test, deadline=170)


def test_a_broker_with_a_wrong_inter_broker_password_stays_out_of_the_isr_and_says_why(
    zk: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger=LOGGER)

    async def test() -> None:
        await trio.to_thread.run_sync(store_broker_user, zk)
        async with serve_cluster(
            3,
            zookeeper_connect=zk,
            node_overrides={3: {JAAS_KEY: jaas("not-the-password")}},
            **{**SETTINGS, "replica.lag.time.max.ms": 1500},
        ) as cluster:
            # Led by 1 and 2, which log in fine; broker 3 only follows.
            await trio.to_thread.run_sync(
                lambda: create_topic(
                    cluster, num_partitions=2, replica_assignment=[[1, 2, 3], [2, 1, 3]]
                )
            )
            await until(
                lambda: (
                    len(states(cluster)) == 2
                    and all(sorted(s.isr) == [1, 2] for s in states(cluster).values())
                ),
                "broker 3 dropped from the ISR",
                timeout=60,
            )
            failed = await trio.to_thread.run_sync(produce_all, cluster, 50)
            assert failed == []  # min.insync.replicas=2 holds without broker 3
            await until(
                lambda: len([r for r in caplog.records if "broker 3 cannot" in r.message]) >= 4,
                "broker 3 retries",
            )
            assert all(sorted(s.isr) == [1, 2] for s in states(cluster).values())
            # Nothing reached broker 3: it never fetched, as anyone.
            assert log_end(cluster, 3, 0) == log_end(cluster, 3, 1) == 0
            assert log_end(cluster, 1, 0) + log_end(cluster, 2, 1) == 50

        refusals = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        mine = [m for m in refusals if m.startswith("broker 3 cannot replicate from leader")]
        assert mine, refusals
        assert all("refused the SCRAM-SHA-256 login of 'broker'" in m for m in mine)
        assert all("invalid credentials" in m for m in mine)
        assert not [m for m in refusals if re.match(r"broker [12] cannot", m)]
        # Retried with a backoff that doubles from 0.2 s up to 5 s, never given up (a
        # fetcher started again, as when the partition's state changes, starts over).
        by_leader: dict[str, list[float]] = {}
        for m in mine:
            leader = m.split("from leader ", 1)[1].split(":", 1)[0]
            by_leader.setdefault(leader, []).append(
                float(m.rsplit("retrying in ", 1)[1].split()[0])
            )
        steps = [(a, b) for delays in by_leader.values() for a, b in itertools.pairwise(delays)]
        assert all(b in (min(2 * a, 5.0), 0.2) for a, b in steps), by_leader
        assert any(b == 2 * a for a, b in steps), by_leader

    run(test, deadline=170)


def test_inter_broker_sessions_are_renewed_before_they_end(zk: str) -> None:
    """With ``connections.max.reauth.ms`` the brokers' SASL sessions have a lifetime
    (KIP-368): a broker renews its session on the same connection before it ends, so
    the peer never closes a fetcher's connection for an expired session."""

    async def test() -> None:
        await trio.to_thread.run_sync(store_broker_user, zk)
        settings = {**SETTINGS, "connections.max.reauth.ms": 3000, "default.replication.factor": 2}
        async with serve_cluster(2, zookeeper_connect=zk, **settings) as cluster:
            await trio.to_thread.run_sync(
                lambda: create_topic(cluster, num_partitions=2, replication_factor=2)
            )
            brokers = [cluster.node(n).broker for n in (1, 2)]
            # Each leader's follower renews its session on its connection, again and again.
            await until(
                lambda: all(b.connections.sasl_reauthentications >= 2 for b in brokers),
                "the followers renew their sessions",
                timeout=60,
            )
            assert [b.connections.sasl_sessions_expired for b in brokers] == [0, 0]
            failed = await trio.to_thread.run_sync(produce_all, cluster, 50)
            assert failed == []
            assert all(sorted(s.isr) == [1, 2] for s in states(cluster).values())

    run(test, deadline=120)


def test_a_tls_cluster_verifies_its_peers_and_sasl_ssl_replicates(
    zk: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    trustme = pytest.importorskip("trustme")
    caplog.set_level(logging.ERROR, logger=LOGGER)
    ca, stranger = trustme.CA(), trustme.CA()
    files: dict[str, Path] = {}
    for name, authority in (("ca", ca), ("stranger", stranger)):
        files[name] = tmp_path / f"{name}.pem"
        authority.cert_pem.write_to_path(str(files[name]))
    leaf = ca.issue_cert("127.0.0.1")
    files["cert"], files["key"] = tmp_path / "cert.pem", tmp_path / "key.pem"
    for i, pem in enumerate(leaf.cert_chain_pems):
        pem.write_to_path(str(files["cert"]), append=i > 0)
    leaf.private_key_pem.write_to_path(str(files["key"]))
    tls = {
        "listeners": "SSL://127.0.0.1:0",
        "security.inter.broker.protocol": "SSL",
        "ssl_certfile": files["cert"],
        "ssl_keyfile": files["key"],
        "ssl_cafile": files["ca"],
        "default.replication.factor": 2,
        "offsets.topic.num.partitions": 1,
    }

    async def test() -> None:
        async with serve_cluster(
            2,
            zookeeper_connect=zk,
            # Broker 2 trusts another authority: broker 1's certificate does not verify.
            node_overrides={2: {"ssl_cafile": files["stranger"]}},
            **tls,
        ) as cluster:
            topic = {"num_partitions": 1, "replica_assignment": [[1, 2]]}
            client = ssl_client(cluster, files["ca"])
            await trio.to_thread.run_sync(lambda: create_ssl_topic(client, topic))
            await until(
                lambda: any(
                    "TLS handshake with broker 1" in r.getMessage() for r in caplog.records
                ),
                "broker 2 refuses broker 1's certificate",
            )
            assert log_end(cluster, 2, 0) == 0
        message = next(
            r.getMessage()
            for r in caplog.records
            if "TLS handshake with broker 1" in r.getMessage()
        )
        assert message.startswith("broker 2 cannot replicate from leader 1")
        assert "CERTIFICATE_VERIFY_FAILED" in message

        # With one authority, and SASL_SSL, the cluster replicates: TLS verified, then
        # the SCRAM login (the broker user in this cluster's ZooKeeper chroot).
        caplog.clear()
        await trio.to_thread.run_sync(new_chroot, zk, "/again")
        await trio.to_thread.run_sync(store_broker_user, f"{zk}/again")
        sasl_ssl = {
            **tls,
            "listeners": "SASL_SSL://127.0.0.1:0",
            "security.inter.broker.protocol": "SASL_SSL",
            "sasl_users": USERS,
            "sasl.enabled.mechanisms": "SCRAM-SHA-256",
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": jaas(BROKER_PASSWORD),
        }
        async with serve_cluster(2, zookeeper_connect=f"{zk}/again", **sasl_ssl) as cluster:
            topic = {"num_partitions": 1, "replica_assignment": [[1, 2]]}
            client = {**ssl_client(cluster, files["ca"]), **scram_client(cluster)}
            client["security.protocol"] = "SASL_SSL"
            await trio.to_thread.run_sync(lambda: create_ssl_topic(client, topic))
            await until(lambda: sorted(states(cluster)[0].isr) == [1, 2], "2 in-sync replicas")
            await trio.to_thread.run_sync(lambda: produce_ssl(client, 20))
            await until(lambda: log_end(cluster, 2, 0) == 20, "broker 2 holds the records")
            # trafka cluster's readiness check asks as a broker: TLS verified, SCRAM login.
            config = cluster.node(2).broker.config
            host, port = cluster.node(1).address
            brokers, controller = await trio.to_thread.run_sync(
                lambda: cluster_metadata(host, port, config=config)
            )
            assert brokers == {1, 2} and controller in brokers
            with pytest.raises((OSError, ValueError)):  # a plain request: not TLS
                await trio.to_thread.run_sync(lambda: cluster_metadata(host, port))
        assert not [r for r in caplog.records if "cannot replicate" in r.getMessage()]

    run(test, deadline=170)


def ssl_client(cluster: LocalCluster, ca: Path) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "SSL",
        "ssl.ca.location": str(ca),
    }


def new_chroot(zk: str, path: str) -> None:
    with zk_client(zk) as client:
        client.create(path)


def create_ssl_topic(client: dict[str, Any], spec: dict[str, Any]) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(client)
    for future in admin.create_topics([NewTopic(TOPIC, **spec)]).values():
        future.result(timeout=30)


def produce_ssl(client: dict[str, Any], count: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({**client, "acks": "all"})
    for i in range(count):
        producer.produce(TOPIC, value=b"v%d" % i, partition=0)
    assert producer.flush(60) == 0
