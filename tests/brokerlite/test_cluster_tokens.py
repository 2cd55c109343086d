"""Delegation tokens in cluster mode live in ZooKeeper, in Kafka's layout, and every
broker logs them in; change notifications are purged as Kafka purges them.

Kafka in ZooKeeper mode keeps each token's information (never its HMAC) in
``/delegation_token/tokens/<tokenId>`` and announces a change with a sequential
``/delegation_token/token_changes/token_change_N`` holding the token id (Kafka 3.9,
``ZkData.scala`` / ``DelegationTokenManagerZk``); every broker derives the HMAC from
the secret they share (``delegation.token.secret.key``). So a token issued through one
broker logs in (SCRAM with ``tokenauth=true``, KIP-48) on every broker, and a renewal
or expiry through any broker counts on all.

Kafka's ``ZkNodeChangeNotificationListener`` deletes, after processing, the
notifications whose znode was created more than 15 minutes before
(``changeExpirationMs``); the brokers' clock is replaced here, so nothing waits.

trafka's admin client creates, renews and expires tokens; trafka's admin logs in with
them (its bootstrap connection authenticates to the one broker it is given).
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
from cluster_helpers import run, until
from kazoo.client import KazooClient

from trafka.brokerlite.cluster.driver import ClusterDriver
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.brokerlite.security.zk_notifications import CHANGE_EXPIRATION_MS
from trafka.codec.errors import ErrorCode
from trafka.sdk import DelegationToken, open_admin
from trafka.sdk.errors import AuthenticationError

pytestmark = pytest.mark.timeout(180)

USERS = {"alice": "alice-pw", "bob": "bob-pw", "broker": "broker-pw"}
SECRET = "cluster-token-secret"
SETTINGS: dict[str, Any] = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_users": USERS,
    # The brokers log in to each other as "broker" (a cluster member of a SASL listener must).
    "inter_broker_sasl_username": "broker",
    "inter_broker_sasl_password": USERS["broker"],
    "sasl_enabled_mechanisms": ("PLAIN", "SCRAM-SHA-256"),
    "delegation_token_secret_key": SECRET,
}
HOUR = 3_600_000


def as_user(user: str) -> dict[str, Any]:
    return {
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_username": user,
        "sasl_password": USERS[user],
    }


async def logs_in(cluster: LocalCluster, node: int, token: DelegationToken) -> bool:
    """Whether the token logs in on broker ``node``."""
    settings = {"security_protocol": "SASL_PLAINTEXT", **token.client_settings()}
    with trio.fail_after(30):
        async with open_admin(
            bootstrap_servers=cluster.node(node).bootstrap_servers, **settings
        ) as admin:
            try:
                await admin.list_topics()
            except AuthenticationError as exc:
                assert exc.code == ErrorCode.SASL_AUTHENTICATION_FAILED
                return False
            return True


def kept(cluster: LocalCluster, node: int, token_id: str) -> Any:
    """The token as broker ``node`` keeps it (None: it does not)."""
    return cluster.node(node).broker.tokens.tokens.get(token_id)


def token_znodes(zk: str, token_id: str) -> tuple[bytes, list[bytes]]:
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        data, _ = client.get(f"/delegation_token/tokens/{token_id}")
        changes = sorted(client.get_children("/delegation_token/token_changes"))
        assert all(c.startswith("token_change_") and c[13:].isdigit() for c in changes)
        notes = [client.get(f"/delegation_token/token_changes/{c}")[0] for c in changes]
        return data, notes
    finally:
        client.stop()
        client.close()


def test_a_token_issued_by_one_broker_logs_in_on_every_broker(zk: str) -> None:
    async def test() -> None:
        async with serve_cluster(3, zookeeper_connect=zk, **SETTINGS) as cluster:
            bootstrap1 = cluster.node(1).bootstrap_servers
            async with open_admin(bootstrap_servers=bootstrap1, **as_user("alice")) as admin:
                token = await admin.create_delegation_token(renewers=["User:bob"])
            info = token.token_info
            token_id = info.token_id
            for node in (1, 2, 3):
                await until(lambda n=node: kept(cluster, n, token_id), f"node {node} has it")
                assert await logs_in(cluster, node, token), node

            # Kafka's layout, and no HMAC (raw or base64) in ZooKeeper.
            data, notes = await trio.to_thread.run_sync(token_znodes, zk, token_id)
            assert json.loads(data) == {
                "version": 3,
                "owner": "User%3Aalice",
                "tokenRequester": "User%3Aalice",
                "renewers": ["User%3Abob"],
                "issueTimestamp": info.issue_timestamp_ms,
                "maxTimestamp": info.max_timestamp_ms,
                "expiryTimestamp": info.expiry_timestamp_ms,
                "tokenId": token_id,
            }
            assert token.hmac not in data
            assert base64.b64encode(token.hmac) not in data
            assert token_id.encode() in notes

            # A renewal by bob (a renewer) counts on every broker.
            async with open_admin(
                bootstrap_servers=cluster.node(2).bootstrap_servers, **as_user("bob")
            ) as admin:
                expiry = await admin.renew_delegation_token(token.hmac, renew_period_ms=HOUR)
            assert expiry != info.expiry_timestamp_ms
            for node in (1, 2, 3):
                await until(
                    lambda n=node: kept(cluster, n, token_id).expiry_ms == expiry,
                    f"node {node} has the renewal",
                )
            data, _ = await trio.to_thread.run_sync(token_znodes, zk, token_id)
            assert json.loads(data)["expiryTimestamp"] == expiry

            # A broker restarted with an empty data directory logs the token in.
            data_dir = Path(cluster.node(3).config.data_dir)
            await cluster.stop_node(3)
            shutil.rmtree(data_dir)
            await cluster.start_node(3)
            assert kept(cluster, 3, token_id).expiry_ms == expiry
            assert await logs_in(cluster, 3, token)

            # Expired at once through node 3: no broker logs it in any more.
            async with open_admin(
                bootstrap_servers=cluster.node(3).bootstrap_servers, **as_user("alice")
            ) as admin:
                ended = await admin.expire_delegation_token(token.hmac)
                assert ended >= token.token_info.issue_timestamp_ms  # the moment, as Kafka 3.9
            for node in (1, 2, 3):
                await until(lambda n=node: kept(cluster, n, token_id) is None, f"node {node}")
                assert not await logs_in(cluster, node, token), node

    run(test, deadline=170)


CHANGE_PATHS = {
    "/kafka-acl-changes": b"TOPIC:t",
    "/kafka-acl-extended-changes": (
        b'{"version":1,"resourceType":"TOPIC","name":"t","patternType":"PREFIXED"}'
    ),
    "/config/changes": b'{"version":2,"entity_path":"users/alice"}',
    "/delegation_token/token_changes": b"no-such-token",
}


def notify_all(zk: str) -> dict[str, int]:
    """One notification under each change path, as another broker writes it:
    path of the znode -> its ctime (ZooKeeper's)."""
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        out = {}
        for path, content in CHANGE_PATHS.items():
            prefix = (
                "acl_changes_"
                if "acl" in path
                else ("token_change_" if "token" in path else "config_change_")
            )
            made = client.create(f"{path}/{prefix}", content, sequence=True, makepath=True)
            out[made] = client.exists(made).ctime
        return out
    finally:
        client.stop()
        client.close()


def remaining(zk: str) -> set[str]:
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        return {f"{p}/{c}" for p in CHANGE_PATHS for c in client.get_children(p)}
    finally:
        client.stop()
        client.close()


def test_notifications_older_than_15_minutes_are_purged(
    zk: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = {"now": 0}
    now: Callable[[ClusterDriver], int] = lambda _self: clock["now"]  # noqa: E731
    monkeypatch.setattr(ClusterDriver, "_notification_clock", now)

    async def test() -> None:
        settings = {
            "authorizer_class_name": "kafka.security.authorizer.AclAuthorizer",
            "allow_everyone_if_no_acl_found": True,
            "delegation_token_secret_key": SECRET,
        }
        async with serve_cluster(1, zookeeper_connect=zk, **settings):
            # Processed at time 0: nothing is old, nothing goes.
            first = await trio.to_thread.run_sync(notify_all, zk)
            # 15 minutes after the newest of them (not after: Kafka's test is strict),
            # the next notifications make the broker purge what is older by then.
            clock["now"] = max(first.values()) + CHANGE_EXPIRATION_MS
            second = await trio.to_thread.run_sync(notify_all, zk)
            made = {**first, **second}
            stay = {p for p, ctime in made.items() if ctime + CHANGE_EXPIRATION_MS >= clock["now"]}
            assert set(second) <= stay and max(first, key=first.__getitem__) in stay

            async def purged() -> bool:
                return await trio.to_thread.run_sync(remaining, zk) == stay

            with trio.fail_after(30):
                while not await purged():
                    await trio.sleep(0.05)
            # Later, everything of the first round is old enough.
            clock["now"] = max(made.values()) + CHANGE_EXPIRATION_MS + 1
            third = await trio.to_thread.run_sync(notify_all, zk)
            stay = {
                p for p, c in {**made, **third}.items() if c + CHANGE_EXPIRATION_MS >= clock["now"]
            }
            assert stay >= set(third) and not stay & set(first)
            with trio.fail_after(30):
                while not await purged():
                    await trio.sleep(0.05)

    run(test, deadline=120)
