"""Client quotas in cluster mode live in ZooKeeper, in Kafka's layout, and every broker
throttles with them.

Kafka in ZooKeeper mode keeps KIP-546's quota entities as dynamic configs
(``ZkAdminManager.alterClientQuotas`` through ``AdminZkClient.changeConfigs``):
``/config/users/<user>``, ``/config/clients/<client-id>``,
``/config/users/<user>/clients/<client-id>`` and ``/config/ips/<ip>`` (``<default>`` for
a default entity), each ``{"version":1,"config":{...}}``, announced by a sequential
``/config/changes/config_change_N`` holding ``{"version":2,"entity_path":...}`` which
every broker's ``ConfigChangeListener`` follows. A user's znode also holds its SCRAM
credentials: a quota change keeps them.

AlterClientQuotas goes to node 1 and DescribeClientQuotas to node 2 over real sockets;
a Produce to a partition node 2 leads answers a ``throttle_time_ms`` (KIP-219) for the
throttled client id and none for another (the throttle is a consequence of a bound of
1 byte a second, not of timing).
"""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path
from typing import Any

import pytest
import trio
from brokerlite_wire import produce_request
from cluster_helpers import change_notifications, run, until
from kafka import KafkaAdminClient
from kafka.admin import ScramMechanism, UserScramCredentialUpsertion
from kazoo.client import KazooClient

from trafka.brokerlite.cluster.driver.metadata_sync import rewrite_entity_config
from trafka.brokerlite.dev.local_cluster import LocalCluster, serve_cluster
from trafka.brokerlite.security.zk_quotas import quota_change_notification, updated_quota_config
from trafka.brokerlite.security.zk_scram import encode_user_config, updated_user_config
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k19_create_topics as create_topics
from trafka.codec.messages import k48_describe_client_quotas as describe
from trafka.codec.messages import k49_alter_client_quotas as alter
from trafka.codec.protocol import decode_response
from trafka.codec.sasl import ScramCredential

pytestmark = pytest.mark.timeout(120)

A = alter.AlterClientQuotasRequest
D = describe.DescribeClientQuotasRequest
TOPIC = "q"
CREDENTIAL = ScramCredential.from_password("SCRAM-SHA-256", "pw", salt=b"s" * 24, iterations=4096)


def entry(pairs: list[tuple[str, str | None]], **ops: float | None) -> Any:
    return A.EntryData(
        entity=[A.EntityData(entity_type=t, entity_name=n) for t, n in pairs],
        ops=[
            A.OpData(key=k, value=0.0 if v is None else v, remove=v is None) for k, v in ops.items()
        ],
    )


def alter_on(raw_client: Any, cluster: LocalCluster, node: int, entries: list[Any]) -> None:
    client = raw_client(cluster.node(node).address)
    answer = client.request(49, 1, A(entries=entries, validate_only=False))
    assert [e.error_code for e in answer.entries] == [ErrorCode.NONE] * len(entries)


def described_on(raw_client: Any, cluster: LocalCluster, node: int) -> dict[Any, dict[str, float]]:
    client = raw_client(cluster.node(node).address)
    any_user = D.ComponentData(entity_type="user", match_type=2, match=None)
    answer = client.request(48, 1, D(components=[any_user], strict=False))
    assert answer.error_code == ErrorCode.NONE
    return {
        tuple((e.entity_type, e.entity_name) for e in found.entity): {
            v.key: v.value for v in found.values
        }
        for found in answer.entries
    }


def produce_throttle(
    raw_client: Any, cluster: LocalCluster, node: int, partition: int, client_id: str, batch: bytes
) -> int:
    """The ``throttle_time_ms`` of one acks=1 Produce to ``partition`` on ``node``."""
    client = raw_client(cluster.node(node).address)
    client.send(
        0, 9, produce_request(TOPIC, batch, partition=partition, acks=1), client_id=client_id
    )
    _, answer = decode_response(client.read_frame(), 0, 9)
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.NONE
    client.close()  # a throttled connection is muted: not used again
    throttle: int = answer.throttle_time_ms
    return throttle


def document(client: KazooClient, path: str) -> Any:
    """A znode's JSON; None for a parent created empty on the way to a child (as
    Kafka's recursive create leaves it)."""
    data, _ = client.get(path)
    return json.loads(data) if data else None


def read_znodes(zk: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Every entity znode's document by path, and the change notifications, via kazoo."""
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        docs: dict[str, Any] = {}
        for kind in ("users", "clients", "ips"):
            if not client.exists(f"/config/{kind}"):
                continue
            for name in client.get_children(f"/config/{kind}"):
                path = f"/config/{kind}/{name}"
                docs[path] = document(client, path)
                if kind == "users" and client.exists(f"{path}/clients"):
                    for c in client.get_children(f"{path}/clients"):
                        docs[f"{path}/clients/{c}"] = document(client, f"{path}/clients/{c}")
        return docs, change_notifications(client)
    finally:
        client.stop()
        client.close()


def put_scram_entry(zk: str) -> None:
    """A SCRAM credential in ``/config/users/alice``, as AlterUserScramCredentials writes it."""
    client = KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    try:
        config = updated_user_config({}, {"SCRAM-SHA-256": CREDENTIAL})
        client.create("/config/users/alice", encode_user_config(config), makepath=True)
    finally:
        client.stop()
        client.close()


def test_a_quota_set_through_one_broker_throttles_on_every_broker(
    zk: str, raw_client: Any, make_batch: Any
) -> None:
    async def test() -> None:
        async with serve_cluster(2, zookeeper_connect=zk) as cluster:
            admin = await trio.to_thread.run_sync(raw_client, cluster.node(1).address)
            topic = create_topics.CreateTopicsRequest.CreatableTopic(
                name=TOPIC, num_partitions=2, replication_factor=1
            )
            created = await trio.to_thread.run_sync(
                admin.request, 19, 7, create_topics.CreateTopicsRequest(topics=[topic])
            )
            assert created.topics[0].error_code == ErrorCode.NONE

            def leaders(node: int) -> dict[int, int]:
                """Leader -> partition, as ``node`` sees it."""
                image = cluster.node(node).broker.cluster.image
                return {s.leader: p for (t, p), s in image.states.items() if t == TOPIC}

            # Node 2 serves the partition once its own view says it leads it.
            await until(
                lambda: sorted(leaders(1)) == [1, 2] and leaders(2) == leaders(1),
                "a partition led by each node, as both see it",
            )
            on_node2 = leaders(2)[2]
            batch = make_batch([b"x" * 2000])
            assert (
                await trio.to_thread.run_sync(
                    produce_throttle, raw_client, cluster, 2, on_node2, "slow", batch
                )
                == 0
            )

            await trio.to_thread.run_sync(put_scram_entry, zk)
            entries = [
                entry([("client-id", "slow")], producer_byte_rate=1.0),
                entry([("user", "alice")], consumer_byte_rate=2048.0, request_percentage=12.5),
                entry([("user", None), ("client-id", "c/1")], producer_byte_rate=4096.0),
                entry([("ip", None)], connection_creation_rate=1000.0),
            ]
            await trio.to_thread.run_sync(alter_on, raw_client, cluster, 1, entries)
            wanted = {
                (("client-id", "slow"),): {"producer_byte_rate": 1.0},
                (("user", "alice"),): {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
                (("client-id", "c/1"), ("user", None)): {"producer_byte_rate": 4096.0},
                (("ip", None),): {"connection_creation_rate": 1000.0},
            }
            await until(lambda: cluster.node(2).broker.quotas.quotas() == wanted, "node 2's quotas")

            # Node 2 throttles the client id the quota names, and only it.
            throttle = await trio.to_thread.run_sync(
                produce_throttle, raw_client, cluster, 2, on_node2, "slow", batch
            )
            assert throttle > 0
            assert (
                await trio.to_thread.run_sync(
                    produce_throttle, raw_client, cluster, 2, on_node2, "fast", batch
                )
                == 0
            )
            described = await trio.to_thread.run_sync(described_on, raw_client, cluster, 2)
            assert described == {
                (("user", "alice"),): {"consumer_byte_rate": 2048.0, "request_percentage": 12.5},
                (("client-id", "c/1"), ("user", None)): {"producer_byte_rate": 4096.0},
            }

            # Kafka's layout; alice's SCRAM credential is still in her znode.
            docs, notes = await trio.to_thread.run_sync(read_znodes, zk)
            alice = docs.pop("/config/users/alice")
            assert alice["version"] == 1
            assert alice["config"].pop("SCRAM-SHA-256").startswith("salt=")
            assert alice["config"] == {"consumer_byte_rate": "2048", "request_percentage": "12.5"}
            assert docs == {
                "/config/clients/slow": {"version": 1, "config": {"producer_byte_rate": "1"}},
                "/config/users/<default>": None,
                "/config/users/<default>/clients/c%2F1": {
                    "version": 1,
                    "config": {"producer_byte_rate": "4096"},
                },
                "/config/ips/<default>": {
                    "version": 1,
                    "config": {"connection_creation_rate": "1000"},
                },
            }
            for path in (
                "clients/slow",
                "users/alice",
                "users/<default>/clients/c%2F1",
                "ips/<default>",
            ):
                assert {"version": 2, "entity_path": path} in notes

            # Removed through node 2: node 1 stops throttling "slow".
            await trio.to_thread.run_sync(
                alter_on,
                raw_client,
                cluster,
                2,
                [entry([("client-id", "slow")], producer_byte_rate=None)],
            )
            del wanted[(("client-id", "slow"),)]
            await until(lambda: cluster.node(1).broker.quotas.quotas() == wanted, "node 1's")
            docs, _ = await trio.to_thread.run_sync(read_znodes, zk)
            assert docs["/config/clients/slow"] == {"version": 1, "config": {}}
            assert "SCRAM-SHA-256" in docs["/config/users/alice"]["config"]

            # A broker restarted with an empty data directory gets the quotas back.
            data_dir = Path(cluster.node(2).config.data_dir)
            await cluster.stop_node(2)
            shutil.rmtree(data_dir)
            restarted = await cluster.start_node(2)
            assert restarted.broker.quotas.quotas() == wanted

    run(test, deadline=110)


def scram_admin_on(cluster: LocalCluster, node: int) -> Any:
    """A kafka-python admin whose requests all go to broker ``node``."""
    admin = KafkaAdminClient(bootstrap_servers=cluster.node(node).bootstrap_servers)
    manager = admin._manager
    manager.send = functools.partial(manager.send, node_id=node)
    return admin


def test_quota_and_scram_writes_to_one_user_keep_each_other(zk: str, raw_client: Any) -> None:
    """``/config/users/alice`` written at once through two brokers, quotas through node 1
    and SCRAM credentials (kafka-python's admin) through node 2: each write is
    conditional on the version it read, so neither loses the other's entries."""
    rounds = 4

    async def test() -> None:
        async with serve_cluster(2, zookeeper_connect=zk) as cluster:

            def quotas() -> None:
                for i in range(rounds):
                    alter_on(
                        raw_client,
                        cluster,
                        1,
                        [entry([("user", "alice")], producer_byte_rate=1000.0 + i)],
                    )

            def credentials() -> None:
                admin = scram_admin_on(cluster, 2)
                try:
                    for i in range(rounds):
                        upsert = UserScramCredentialUpsertion(
                            "alice", ScramMechanism.SCRAM_SHA_256, "pw", iterations=4096 + i
                        )
                        assert admin.alter_user_scram_credentials([upsert]) == {"alice": None}
                finally:
                    admin.close()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(trio.to_thread.run_sync, quotas)
                nursery.start_soon(trio.to_thread.run_sync, credentials)

            docs, _ = await trio.to_thread.run_sync(read_znodes, zk)
            config = docs["/config/users/alice"]["config"]
            assert config["producer_byte_rate"] == str(1000 + rounds - 1)
            assert config["SCRAM-SHA-256"].endswith(f"iterations={4096 + rounds - 1}")
            for node in (1, 2):
                broker = cluster.node(node).broker
                await until(
                    lambda b=broker: (
                        b.quotas.quotas().get((("user", "alice"),))
                        == {"producer_byte_rate": 1000.0 + rounds - 1}
                    ),
                    f"node {node}'s quota",
                )
                await until(
                    lambda b=broker: (
                        (c := b.scram.lookup("SCRAM-SHA-256", "alice")) is not None
                        and c.iterations == 4096 + rounds - 1
                    ),
                    f"node {node}'s credential",
                )

    run(test, deadline=110)


class Interleaving:
    """A kazoo session whose first read of ``path`` is followed at once by another
    broker's write of it (a second session adds a SCRAM credential), as when two
    brokers change one user's config at the same time."""

    def __init__(self, client: KazooClient, other: KazooClient, path: str) -> None:
        self._client = client
        self._other = other
        self._path = path
        self.interfered = False

    def get(self, path: str) -> Any:
        answer = self._client.get(path)
        if path == self._path and not self.interfered:
            self.interfered = True
            data, _ = self._other.get(path)
            config = json.loads(data)["config"]
            config = updated_user_config(config, {"SCRAM-SHA-256": CREDENTIAL})
            self._other.set(path, encode_user_config(config))
        return answer

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)


def test_a_quota_write_racing_a_scram_write_reads_again(zk: str) -> None:
    """The write is conditional on the znode version it read (Kafka's
    ``AdminZkClient`` writes with the version it read too): the other broker's write
    in between makes it read again, so the credential written meanwhile stays."""
    path = "/config/users/alice"
    client, other = KazooClient(hosts=zk, timeout=10.0), KazooClient(hosts=zk, timeout=10.0)
    client.start(timeout=10.0)
    other.start(timeout=10.0)
    try:
        client.create(path, encode_user_config({"consumer_byte_rate": "5"}), makepath=True)
        zk_session = Interleaving(client, other, path)
        entity = (("user", "alice"),)
        rewrite_entity_config(
            zk_session,
            path,
            functools.partial(
                updated_quota_config, entity, set_={"producer_byte_rate": 7.0}, remove=[]
            ),
            quota_change_notification(entity),
        )
        assert zk_session.interfered
        config = json.loads(client.get(path)[0])["config"]
        assert config["producer_byte_rate"] == "7" and config["consumer_byte_rate"] == "5"
        assert config["SCRAM-SHA-256"].startswith("salt=")
        notes = client.get_children("/config/changes")
        assert [json.loads(client.get(f"/config/changes/{n}")[0]) for n in notes] == [
            {"version": 2, "entity_path": "users/alice"}
        ]
    finally:
        for session in (client, other):
            session.stop()
            session.close()
