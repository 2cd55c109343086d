"""Transactions through a proxy that forwards (no key routing), against
brokerlite and Apache Kafka 4.4.

The proxy caps Produce at v11 (rewrite.PRODUCE_MAX_ROUTED): Produce v12 is where
transaction version 2 (KIP-890 part 2) adds a transaction's partitions
implicitly, so a client that chose version 2 would send Produce v11 for
partitions it never added, and the broker refuses them (INVALID_TXN_STATE on
brokerlite, TRANSACTION_ABORTABLE on Kafka 4.4). Clients choose the flow by the
finalized ``transaction.version`` feature in ApiVersions (Kafka's Java client's
``TransactionManager``; the SDK's ``txn_version``), so the proxy's ApiVersions
answer caps that feature at level 1: clients then add partitions with
AddPartitionsToTxn, as against Kafka 3.x.
"""

from __future__ import annotations

import uuid

import anyio
import pytest
from kafka_fixtures import Peer

from trafka.proxy.assembly import proxy_in_thread
from trafka.sdk import NewTopic, open_admin, open_consumer, open_producer

PEERS = pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)


async def _transact(bootstrap: str, topic: str) -> list[bytes]:
    async with open_producer(bootstrap_servers=bootstrap, transactional_id=topic) as producer:
        await producer.init_transactions()
        producer.begin_transaction()
        for value in (b"a", b"b"):
            await producer.send(topic, value, partition=0)
        await producer.commit_transaction()
        producer.begin_transaction()
        await producer.send(topic, b"aborted", partition=0)
        await producer.abort_transaction()
    got: list[bytes] = []
    async with open_consumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=topic,
        isolation_level="read_committed",
        auto_offset_reset="earliest",
    ) as consumer:
        while len(got) < 2:
            batches = await consumer.getmany(timeout_ms=500)
            got += [r.value for records in batches.values() for r in records]
    return got


@PEERS
def test_an_sdk_transaction_commits_through_a_forwarding_proxy(peer: Peer) -> None:
    topic = f"txn-fwd-{uuid.uuid4().hex[:8]}"

    async def create() -> dict[str, tuple[int, int]]:
        async with open_admin(bootstrap_servers=peer.bootstrap_servers) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
            return dict((await admin.describe_features()).finalized)

    upstream = anyio.run(create, backend="trio")
    assert upstream.get("transaction.version") == (2, 2)  # (version 2 behind the proxy)
    with proxy_in_thread(upstream=(peer.bootstrap_servers,), port=0, route_keys="none") as px:

        async def through() -> tuple[dict[str, tuple[int, int]], list[bytes]]:
            async with open_admin(bootstrap_servers=px.bootstrap_servers) as admin:
                seen = dict((await admin.describe_features()).finalized)
            return seen, await _transact(px.bootstrap_servers, topic)

        seen, got = anyio.run(through, backend="trio")
    assert seen["transaction.version"] == (1, 1)
    assert got == [b"a", b"b"]
