"""ACLs and SCRAM credentials in cluster mode live in ZooKeeper, in Kafka's layout, and
every broker enforces them.

Kafka in ZooKeeper mode keeps each resource pattern's ACLs in ``/kafka-acl/<Type>/<name>``
and announces a change with a sequential ``/kafka-acl-changes/acl_changes_N`` znode, which
every broker's authorizer watches (Kafka 3.9, ``ZkData.scala`` / ``AclAuthorizer``). So an
ACL created through one broker refuses a principal on all of them, and a broker that
starts with an empty data directory loads them all from ZooKeeper before it serves.

SCRAM credentials set through AlterUserScramCredentials go to ``/config/users/<user>``
(salted hashes: ``salt=..,stored_key=..,server_key=..,iterations=N``) with a
``/config/changes/config_change_N`` notification (``{"version":2,"entity_path":"users/<user>"}``),
as Kafka's ``AdminZkClient`` writes them, so a user created through one broker logs in on all.

The cluster speaks SASL with the authorizer on; real clients (kafka-python) create
the ACLs through node 1 and produce as ``alice`` to partitions led by each node.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster_helpers import run, until
from kafka import KafkaAdminClient, KafkaProducer
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    NewTopic,
    ResourcePattern,
    ResourceType,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.errors import KafkaError, TopicAuthorizationFailedError
from kazoo.client import KazooClient

from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster

pytestmark = pytest.mark.timeout(180)

USERS = {"admin": "admin-pw", "alice": "alice-pw", "broker": "broker-pw"}
TOPIC = "orders"
SETTINGS: dict[str, Any] = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_users": USERS,
    # The brokers log in to each other as "broker" (a cluster member of a SASL listener must).
    "inter_broker_sasl_username": "broker",
    "inter_broker_sasl_password": USERS["broker"],
    "super_users": ("User:admin", "User:broker"),
    "authorizer_class_name": "kafka.security.authorizer.AclAuthorizer",
    "group_initial_rebalance_delay_ms": 0,
}


def sasl(user: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def bootstrap(cluster: LocalCluster, node: int) -> str:
    return cluster.node(node).bootstrap_servers


def admin_on(cluster: LocalCluster, node: int) -> KafkaAdminClient:
    """A kafka-python admin whose requests all go to broker ``node`` (its connection
    manager's ``send`` takes the node to ask; the ACL calls pass none)."""
    admin = KafkaAdminClient(bootstrap_servers=bootstrap(cluster, node), **sasl("admin"))
    manager = admin._manager
    manager.send = functools.partial(manager.send, node_id=node)
    return admin


def topic_acl(op: ACLOperation, permission: ACLPermissionType) -> ACL:
    return ACL(
        principal="User:alice",
        host="*",
        operation=op,
        permission_type=permission,
        resource_pattern=ResourcePattern(ResourceType.TOPIC, TOPIC, ACLResourcePatternType.LITERAL),
    )


def alice_may_write(cluster: LocalCluster, partition: int) -> bool:
    """Whether alice's produce to ``partition`` (led by one broker) is accepted."""
    producer = KafkaProducer(
        bootstrap_servers=cluster.bootstrap_servers,
        retries=0,
        request_timeout_ms=10_000,
        **sasl("alice"),
    )
    try:
        producer.send(TOPIC, b"v", partition=partition).get(timeout=20)
        return True
    except TopicAuthorizationFailedError:
        return False
    finally:
        producer.close(timeout=5)


def leaders(cluster: LocalCluster) -> dict[int, int]:
    """Partition -> leader, as node 1 sees it."""
    image = cluster.node(1).broker.cluster.image
    return {p: s.leader for (t, p), s in image.states.items() if t == TOPIC}


@contextlib.contextmanager
def zk_client(zk: str) -> Iterator[KazooClient]:
    """A kazoo session on the test's chroot, to read the znodes as an operator would."""
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        yield client
    finally:
        client.stop()
        client.close()


def znodes(zk: str) -> tuple[dict[str, Any], list[bytes]]:
    """The topic's ACL znode and the literal change notifications, read with kazoo."""
    with zk_client(zk) as client:
        assert client.exists("/kafka-acl/Group/a") is None
        data, _ = client.get(f"/kafka-acl/Topic/{TOPIC}")
        changes = sorted(client.get_children("/kafka-acl-changes"))
        assert changes and all(c.startswith("acl_changes_") and c[12:].isdigit() for c in changes)
        notes = [client.get(f"/kafka-acl-changes/{c}")[0] for c in changes]
        return json.loads(data), notes


def prefixed_znodes(zk: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The prefixed pattern's znode and the extended change events."""
    with zk_client(zk) as client:
        data, _ = client.get("/kafka-acl-extended/prefixed/Topic/ord")
        changes = sorted(client.get_children("/kafka-acl-extended-changes"))
        assert all(c.startswith("acl_changes_") for c in changes)
        events = [json.loads(client.get(f"/kafka-acl-extended-changes/{c}")[0]) for c in changes]
        return json.loads(data), events


def test_an_acl_created_through_one_broker_is_enforced_by_every_broker(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk, **SETTINGS) as cluster:
            admin = await trio.to_thread.run_sync(admin_on, cluster, 1)
            try:
                await trio.to_thread.run_sync(admin.create_topics, [NewTopic(TOPIC, 3, 1)])
                await until(lambda: len(leaders(cluster)) == 3, "3 partitions have leaders")
                by_node = {leader: p for p, leader in leaders(cluster).items()}
                # Spread over the 3 brokers: each partition is served by another node.
                assert sorted(by_node) == [1, 2, 3]
                # Without an ACL alice is refused (allow.everyone.if.no.acl.found=false).
                assert not await trio.to_thread.run_sync(alice_may_write, cluster, by_node[3])

                allow = topic_acl(ACLOperation.WRITE, ACLPermissionType.ALLOW)
                created = await trio.to_thread.run_sync(admin.create_acls, [allow])
                assert created["failed"] == []
                for node in (1, 2, 3):
                    await poll_until(cluster, by_node[node], True, f"node {node} allows alice")

                # A name that cannot be one znode is refused, and nothing is written.
                slash = ACL(
                    principal="User:alice",
                    host="*",
                    operation=ACLOperation.READ,
                    permission_type=ACLPermissionType.ALLOW,
                    resource_pattern=ResourcePattern(
                        ResourceType.GROUP, "a/b", ACLResourcePatternType.LITERAL
                    ),
                )
                created = await trio.to_thread.run_sync(admin.create_acls, [slash])
                assert created["succeeded"] == []
                assert [e.errno for e in created["failed"]] == [42]  # INVALID_REQUEST

                deny = topic_acl(ACLOperation.WRITE, ACLPermissionType.DENY)
                created = await trio.to_thread.run_sync(admin.create_acls, [deny])
                assert created["failed"] == []
                for node in (2, 3, 1):
                    await poll_until(cluster, by_node[node], False, f"node {node} refuses alice")

                doc, notes = await trio.to_thread.run_sync(znodes, zk)
                assert doc["version"] == 1
                assert sorted(doc["acls"], key=lambda e: e["permissionType"]) == [
                    {
                        "principal": "User:alice",
                        "permissionType": "Allow",
                        "operation": "Write",
                        "host": "*",
                    },
                    {
                        "principal": "User:alice",
                        "permissionType": "Deny",
                        "operation": "Write",
                        "host": "*",
                    },
                ]
                assert notes[-2:] == [b"TOPIC:orders", b"TOPIC:orders"]

                # A broker restarted with an empty data directory enforces the deny at once.
                data_dir = Path(cluster.node(3).config.data_dir)
                await cluster.stop_node(3)
                shutil.rmtree(data_dir)
                restarted = await cluster.start_node(3)
                authorizer = restarted.broker.authorizer
                assert authorizer is not None
                assert {(a.principal, a.operation, a.permission) for a in authorizer.acls()} == {
                    ("User:alice", ACLOperation.WRITE, ACLPermissionType.ALLOW),
                    ("User:alice", ACLOperation.WRITE, ACLPermissionType.DENY),
                }
                assert not await trio.to_thread.run_sync(alice_may_write, cluster, by_node[3])

                # Removing the deny through node 2 lets alice write on every node again.
                admin2 = await trio.to_thread.run_sync(admin_on, cluster, 2)
                try:
                    deny_filter = ACLFilter(
                        principal="User:alice",
                        host="*",
                        operation=ACLOperation.ANY,
                        permission_type=ACLPermissionType.DENY,
                        resource_pattern=ResourcePattern(
                            ResourceType.TOPIC, TOPIC, ACLResourcePatternType.LITERAL
                        ),
                    )
                    [(_, removed, error)] = await trio.to_thread.run_sync(
                        admin2.delete_acls, [deny_filter]
                    )
                    assert error is None or error.errno == 0, error
                    assert [a.permission_type for a in removed] == [ACLPermissionType.DENY]
                finally:
                    await trio.to_thread.run_sync(admin2.close)
                for node in (1, 3, 2):
                    await poll_until(
                        cluster, by_node[node], True, f"node {node} allows alice again"
                    )
                doc, _ = await trio.to_thread.run_sync(znodes, zk)
                assert [e["permissionType"] for e in doc["acls"]] == ["Allow"]

                # A PREFIXED deny through node 3 goes to /kafka-acl-extended and refuses on node 1.
                prefixed = ACL(
                    principal="User:alice",
                    host="*",
                    operation=ACLOperation.ALL,
                    permission_type=ACLPermissionType.DENY,
                    resource_pattern=ResourcePattern(
                        ResourceType.TOPIC, "ord", ACLResourcePatternType.PREFIXED
                    ),
                )
                admin3 = await trio.to_thread.run_sync(admin_on, cluster, 3)
                try:
                    created = await trio.to_thread.run_sync(admin3.create_acls, [prefixed])
                    assert created["failed"] == []
                finally:
                    await trio.to_thread.run_sync(admin3.close)
                await poll_until(cluster, by_node[1], False, "node 1 applies the prefixed deny")
                extended, events = await trio.to_thread.run_sync(prefixed_znodes, zk)
                assert extended == {
                    "version": 1,
                    "acls": [
                        {
                            "principal": "User:alice",
                            "permissionType": "Deny",
                            "operation": "All",
                            "host": "*",
                        }
                    ],
                }
                assert {
                    "version": 1,
                    "resourceType": "TOPIC",
                    "name": "ord",
                    "patternType": "PREFIXED",
                } in events
            finally:
                await trio.to_thread.run_sync(admin.close)

    run(test, deadline=170)


async def poll_until(cluster: LocalCluster, partition: int, allowed: bool, what: str) -> None:
    """Ask until alice's produce to ``partition`` gets the expected answer (a deadline,
    no timing assertion: the brokers apply the change when notified)."""
    with trio.fail_after(30):
        while await trio.to_thread.run_sync(alice_may_write, cluster, partition) != allowed:
            await trio.sleep(0.1)


def logs_in(cluster: LocalCluster, node: int, user: str, password: str) -> bool:
    """Whether ``user`` completes a SCRAM-SHA-256 login on broker ``node`` (kafka-python's
    admin authenticates its bootstrap connection, to that broker alone, when it starts)."""
    try:
        client = KafkaAdminClient(
            bootstrap_servers=bootstrap(cluster, node),
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username=user,
            sasl_plain_password=password,
            request_timeout_ms=10_000,
            # A refused login is retried until this runs out (then KafkaTimeoutError).
            bootstrap_timeout_ms=3_000,
        )
    except KafkaError:
        return False
    client.close()
    return True


def user_znodes(zk: str, user: str) -> tuple[bytes, list[dict[str, Any]]]:
    with zk_client(zk) as client:
        data, _ = client.get(f"/config/users/{user}")
        changes = sorted(client.get_children("/config/changes"))
        assert all(c.startswith("config_change_") and c[14:].isdigit() for c in changes)
        notes = [json.loads(client.get(f"/config/changes/{c}")[0]) for c in changes]
        return data, notes


def test_a_scram_user_created_through_one_broker_logs_in_on_every_broker(zk: str) -> None:
    async def test() -> None:
        settings = {
            **SETTINGS,
            "sasl_enabled_mechanisms": ("PLAIN", "SCRAM-SHA-256"),
        }
        async with serve_cluster(3, zookeeper_connect=zk, **settings) as cluster:
            assert not await trio.to_thread.run_sync(logs_in, cluster, 3, "carol", "carol-pw")
            admin = await trio.to_thread.run_sync(admin_on, cluster, 2)
            try:
                upsert = UserScramCredentialUpsertion(
                    "carol", ScramMechanism.SCRAM_SHA_256, "carol-pw", iterations=4096
                )
                errors = await trio.to_thread.run_sync(admin.alter_user_scram_credentials, [upsert])
                assert errors == {"carol": None}
            finally:
                await trio.to_thread.run_sync(admin.close)
            for node in (3, 1, 2):
                with trio.fail_after(30):
                    while not await trio.to_thread.run_sync(
                        logs_in, cluster, node, "carol", "carol-pw"
                    ):
                        await trio.sleep(0.1)
            assert not await trio.to_thread.run_sync(logs_in, cluster, 3, "carol", "wrong-pw")

            data, notes = await trio.to_thread.run_sync(user_znodes, zk, "carol")
            doc = json.loads(data)
            assert doc["version"] == 1 and list(doc["config"]) == ["SCRAM-SHA-256"]
            fields = dict(part.split("=", 1) for part in doc["config"]["SCRAM-SHA-256"].split(","))
            assert sorted(fields) == ["iterations", "salt", "server_key", "stored_key"]
            assert fields["iterations"] == "4096"
            assert b"carol-pw" not in data  # salted hashes only, never the password
            assert base64.b64decode(fields["salt"]) == upsert.salt
            assert upsert.salted_password not in data
            assert base64.b64encode(upsert.salted_password) not in data
            assert {"version": 2, "entity_path": "users/carol"} in notes

            # A broker restarted with an empty data directory gets the user back.
            data_dir = Path(cluster.node(3).config.data_dir)
            await cluster.stop_node(3)
            shutil.rmtree(data_dir)
            await cluster.start_node(3)
            assert await trio.to_thread.run_sync(logs_in, cluster, 3, "carol", "carol-pw")

    run(test, deadline=170)
