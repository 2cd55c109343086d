"""Inter-broker OAUTHBEARER: brokers replicate logged in to each other with tokens.

Kafka's model (KIP-255, and Kafka's security documentation, "Authentication using
SASL/OAUTHBEARER", Kafka 3.9): ``sasl.mechanism.inter.broker.protocol=OAUTHBEARER``
and the listener's JAAS line
``listener.name.<listener>.oauthbearer.sasl.jaas.config=
org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required
unsecuredLoginStringClaim_sub="<principal>";`` make each broker log in with an
unsecured JWS it issues itself (``alg: none``, ``iat`` now, ``exp`` after
``unsecuredLoginLifetimeSeconds``, 3600 by default); a list claim's first
character is its separator (``unsecuredLoginListClaim_scope=",a,b"``). The peers
validate it as any client's token (``sasl.oauthbearer.required.scopes`` and the
clock skew included). A refused token is a refused login: the broker stays out of
the ISR and retries with a backoff, never as anyone else. KIP-368: with
``connections.max.reauth.ms`` the session ends no later than the token, and the
broker re-authenticates on the same connection with a fresh token.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

import pytest
import trio
from cluster_helpers import run, until

from trafka.brokerlite import clock
from trafka.brokerlite.cluster.inter_broker import InterBrokerAuthError, InterBrokerConnection
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster

pytestmark = pytest.mark.timeout(180)

TOPIC = "replicated"
LOGGER = "trafka.brokerlite.cluster"
JAAS_KEY = "listener.name.sasl_plaintext.oauthbearer.sasl.jaas.config"
USERS = {"admin": "admin-pw"}


def jaas(*options: str) -> str:
    return (
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
        + " ".join(options)
        + ";"
    )


# Clients log in with PLAIN; brokers with their tokens, which must carry the scope.
SETTINGS: dict[str, Any] = {
    "security.inter.broker.protocol": "SASL_PLAINTEXT",
    "security_protocol": "SASL_PLAINTEXT",
    "sasl.enabled.mechanisms": "PLAIN,OAUTHBEARER",
    "sasl.mechanism.inter.broker.protocol": "OAUTHBEARER",
    "sasl.oauthbearer.required.scopes": "replication",
    JAAS_KEY: jaas(
        'unsecuredLoginStringClaim_sub="broker"', 'unsecuredLoginListClaim_scope=",replication"'
    ),
    "sasl_users": USERS,
    "authorizer.class.name": "kafka.security.authorizer.AclAuthorizer",
    "allow.everyone.if.no.acl.found": "false",
    "super.users": "User:admin;User:broker",
    "default.replication.factor": 3,
    "min.insync.replicas": 2,
    "offsets.topic.num.partitions": 3,
}


def admin_client(cluster: LocalCluster) -> dict[str, Any]:
    return {
        "bootstrap.servers": cluster.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanism": "PLAIN",
        "sasl.username": "admin",
        "sasl.password": USERS["admin"],
    }


def create_topic(cluster: LocalCluster, **spec: Any) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient(admin_client(cluster))
    for future in admin.create_topics([NewTopic(TOPIC, **spec)]).values():
        future.result(timeout=30)


def produce_all(cluster: LocalCluster, count: int) -> list[Any]:
    """``count`` records with acks=all (idempotent); the delivery errors."""
    from confluent_kafka import Producer

    errors: list[Any] = []
    producer = Producer(
        {**admin_client(cluster), "acks": "all", "enable.idempotence": True, "linger.ms": 5}
    )
    for i in range(count):
        producer.produce(TOPIC, value=b"v%d" % i, on_delivery=lambda e, _m: errors.append(e))
        producer.poll(0)
    assert producer.flush(60) == 0
    assert len(errors) == count
    return [e for e in errors if e is not None]


def states(cluster: LocalCluster) -> dict[int, Any]:
    image = cluster.node(1).broker.cluster.image
    return {p: s for (t, p), s in image.states.items() if t == TOPIC}


def log_end(cluster: LocalCluster, node: int, partition: int) -> int:
    try:
        return int(cluster.node(node).broker.logs.partition(TOPIC, partition).log_end_offset)
    except Exception:  # this broker has no log for it (it never received a record)
        return 0


def test_brokers_replicate_over_oauthbearer_and_renew_their_tokens(zk: str) -> None:
    async def test() -> None:
        settings = {**SETTINGS, "connections.max.reauth.ms": 3000}
        async with serve_cluster(3, zookeeper_connect=zk, **settings) as cluster:
            await trio.to_thread.run_sync(
                lambda: create_topic(cluster, num_partitions=3, replication_factor=3)
            )
            failed = await trio.to_thread.run_sync(produce_all, cluster, 60)
            assert failed == []
            # Every follower fetched as "broker" (ClusterAction: a super user here).
            await until(
                lambda: all(
                    log_end(cluster, n, p) == log_end(cluster, s.leader, p)
                    for p, s in states(cluster).items()
                    for n in (1, 2, 3)
                ),
                "every replica caught up",
            )
            assert sum(log_end(cluster, 1, p) for p in range(3)) == 60
            assert all(sorted(s.isr) == [1, 2, 3] for s in states(cluster).values())
            # KIP-368: each session ends with its 3 s; renewed in place with a fresh token.
            brokers = [cluster.node(n).broker for n in (1, 2, 3)]
            await until(
                lambda: all(b.connections.sasl_reauthentications >= 2 for b in brokers),
                "the followers renew their sessions",
                timeout=60,
            )
            assert [b.connections.sasl_sessions_expired for b in brokers] == [0, 0, 0]

            # A token issued two hours ago (an hour's lifetime) has expired: refused.
            config = cluster.node(3).broker.config
            host, port = cluster.node(1).address

            def two_hours_ago() -> int:
                return clock.now_ms() - 7_200_000

            with trio.fail_after(20):
                with pytest.raises(InterBrokerAuthError, match="the token has expired"):
                    await InterBrokerConnection.open(
                        config, host, port, "test", "broker 1", now_ms=two_hours_ago
                    )
                # The same login at the right time is accepted.
                conn = await InterBrokerConnection.open(config, host, port, "test", "broker 1")
                await conn.aclose()

    run(test, deadline=170)


def test_a_broker_whose_token_is_refused_stays_out_of_the_isr_and_says_why(
    zk: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger=LOGGER)

    async def test() -> None:
        # Broker 3's token lacks the required scope.
        wrong = {JAAS_KEY: jaas('unsecuredLoginStringClaim_sub="broker"')}
        async with serve_cluster(
            3,
            zookeeper_connect=zk,
            node_overrides={3: wrong},
            **{**SETTINGS, "replica.lag.time.max.ms": 1500},
        ) as cluster:
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
            failed = await trio.to_thread.run_sync(produce_all, cluster, 40)
            assert failed == []
            await until(
                lambda: len([r for r in caplog.records if "broker 3 cannot" in r.message]) >= 4,
                "broker 3 retries",
            )
            assert all(sorted(s.isr) == [1, 2] for s in states(cluster).values())
            # Nothing reached broker 3: it never fetched, as anyone.
            assert log_end(cluster, 3, 0) == log_end(cluster, 3, 1) == 0

        refusals = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
        mine = [m for m in refusals if m.startswith("broker 3 cannot replicate from leader")]
        assert mine, refusals
        assert all("refused the OAUTHBEARER login of 'broker'" in m for m in mine), mine
        assert all("replication" in m for m in mine), mine  # the missing scope is named
        assert not [m for m in refusals if m.startswith(("broker 1 cannot", "broker 2 cannot"))]
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
