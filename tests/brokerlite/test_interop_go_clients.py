"""The current Go clients (franz-go, IBM/sarama, segmentio/kafka-go, from the Go
module proxy: ``tests/interop/gopeers``) against brokerlite, Kafka 3.9 and Kafka
4.x: the same run on each, what the client read checked against what it wrote.

Each client writes a round per codec and acks setting (idempotent where it can
be: franz-go and sarama), reads everything back as a group's only member, and
commits; franz-go and sarama also run committed, aborted and committed
transactions (sarama's committing group offsets in them) and read them
read_committed and read_uncommitted. One Go process per test.
"""

from __future__ import annotations

from pathlib import Path

import anyio
import pytest
from go_peers import (
    check_read_back,
    check_transactions,
    fresh,
    round_trip_args,
    run_go_peer,
    txn_args,
)
from kafka_fixtures import Peer

from trafka.sdk import NewTopic, TopicPartition, open_admin
from trafka.sdk.partitioners import murmur2_partition

pytestmark = pytest.mark.timeout(240)

PARTITIONS = 3
N = 40


def make_topic(servers: str, topic: str, partitions: int) -> None:
    async def go() -> None:
        with anyio.fail_after(60):
            async with open_admin(bootstrap_servers=servers) as admin:
                await admin.create_topics([NewTopic(topic, partitions)])
                # Kafka answers CreateTopics before its partitions serve: an
                # acks=0 round sent earlier would be lost without an answer.
                tps = [TopicPartition(topic, p) for p in range(partitions)]
                await admin.list_offsets({tp: "latest" for tp in tps})

    anyio.run(go, backend="trio")


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(
            "franz-go",
            marks=pytest.mark.compat(
                "Clients", "franz-go: every codec, acks 0/1/all, idempotent, group commits"
            ),
        ),
        pytest.param(
            "sarama",
            marks=pytest.mark.compat(
                "Clients", "IBM/sarama: every codec, acks 0/1/all, idempotent, group commits"
            ),
        ),
        pytest.param(
            "kafka-go",
            marks=pytest.mark.compat(
                "Clients", "segmentio/kafka-go: every codec, acks 0/1/all, group commits"
            ),
        ),
    ],
)
def test_go_client_writes_and_reads_back(go_peers: Path, peer: Peer, client: str) -> None:
    topic = fresh(f"go-{client}")
    make_topic(peer.bootstrap_servers, topic, PARTITIONS)
    args = round_trip_args(client, peer.bootstrap_servers, topic, fresh("go-group"), N)
    result = run_go_peer(go_peers, *args)
    assert len(result["produced"]) == 5 * N
    check_read_back(result)
    assert len({r["partition"] for r in result["consumed"]}) == PARTITIONS
    if client == "franz-go":  # its default partitioner is Java's
        assert all(
            r["partition"] == murmur2_partition(r["key"].encode(), PARTITIONS)
            for r in result["produced"]
        )


@pytest.mark.parametrize(
    "client",
    [
        pytest.param(
            "franz-go",
            marks=pytest.mark.compat("Clients", "franz-go: transactions, read_committed"),
        ),
        pytest.param(
            "sarama",
            marks=pytest.mark.compat(
                "Clients", "IBM/sarama: transactions with group offsets, read_committed"
            ),
        ),
    ],
)
def test_go_client_transactions_read_committed(go_peers: Path, peer: Peer, client: str) -> None:
    """Committed, aborted and committed transactions of 20 records (KIP-98):
    read_committed returns the committed records only, read_uncommitted all
    of them, each where its delivery report said. sarama's transactions also
    commit group offsets (AddOffsetsToTxn, TxnOffsetCommit): the group's
    offsets read stable (KIP-447's require_stable) are the committed
    transactions', never the aborted one's."""
    topic = fresh("go-txn")
    make_topic(peer.bootstrap_servers, topic, 2)
    result = run_go_peer(go_peers, *txn_args(client, peer.bootstrap_servers, topic))
    check_transactions(result)
    if client == "sarama":  # {0: 10} committed, {0: 20, 1: 20} aborted, {1: 30} committed
        assert result["committed"] == {"0": 10, "1": 30}
