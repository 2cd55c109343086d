"""The current Go clients (franz-go, IBM/sarama, segmentio/kafka-go, from the Go
module proxy: ``tests/interop/gopeers``) writing keyed records through ``trafka
proxy`` in front of brokerlite, and reading them back as a group through it.

sarama and kafka-go hash keys with FNV-1a, franz-go with murmur2 as Java does:
behind the proxy every key is on its murmur2 partition whichever the client
chose, each record once, no delivery report names a place where its record is
not, and what the group read through the proxy is what the broker holds.
sarama's transactions go through it too, also in front of three-node Kafka 3.9
and 4.x clusters.
"""

from __future__ import annotations

import socket
import struct
from collections import Counter
from collections.abc import Iterator
from contextlib import nullcontext
from pathlib import Path

import pytest
from go_peers import IDEMPOTENT, check_transactions, fresh, run_go_peer, txn_args
from proxy_helpers import create, misreported, placement

from trafka.brokerlite import RunningBroker
from trafka.codec import ErrorCode, protocol
from trafka.codec.framing import FrameReader
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.messages.k18_api_versions import ApiVersionsRequest
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.proxy.rewrite import API_VERSIONS_MAX
from trafka.sdk.partitioners import murmur2_partition

pytestmark = pytest.mark.timeout(180)

PARTITIONS = 4
N = 150
ROUNDS = "lz4:all,gzip:1,zstd:all"


@pytest.fixture(scope="module")
def proxy(broker: RunningBroker) -> Iterator[RunningProxy]:
    with proxy_in_thread(upstream=(broker.bootstrap_servers,), port=0) as running:
        yield running


@pytest.mark.parametrize("client", ["franz-go", "sarama", "kafka-go"])
def test_go_client_keys_are_routed_and_read_back(
    go_peers: Path, broker: RunningBroker, proxy: RunningProxy, client: str
) -> None:
    topic = fresh(f"px-go-{client}")
    create(proxy.bootstrap_servers, topic, PARTITIONS)
    moved = proxy.statistics.routing.records_moved
    args = ["-client", client, "-brokers", proxy.bootstrap_servers, "-topic", topic]
    args += ["-group", fresh("px-go-group"), "-n", str(N), "-rounds", ROUNDS, "-prefix", client]
    result = run_go_peer(go_peers, *args, *(["-idempotent"] if client in IDEMPOTENT else []))

    records = placement(broker.bootstrap_servers, topic, PARTITIONS)
    written = {r["value"]: r for r in result["produced"]}
    assert len(written) == 3 * N
    assert Counter(r.value.decode() for r in records) == Counter(set(written))
    assert all(r.partition == murmur2_partition(r.key, PARTITIONS) for r in records)
    for r in records:
        w = written[r.value.decode()]
        assert (r.key.decode(), [(k, v.decode()) for k, v in r.headers]) == (
            w["key"],
            [tuple(h) for h in w["headers"]],
        )
    reports = [(v.encode(), w["partition"], w["offset"]) for v, w in written.items()]
    problem = misreported(records, reports)
    assert problem is None, problem
    if client != "franz-go":  # FNV-1a put some keys elsewhere than murmur2
        assert proxy.statistics.routing.records_moved > moved

    # The group read through the proxy: every record once, where the broker has it.
    at = {(r.partition, r.offset): r.value.decode() for r in records}
    consumed = result["consumed"]
    assert sorted(r["value"] for r in consumed) == sorted(written)
    assert all(at[(r["partition"], r["offset"])] == r["value"] for r in consumed)
    ends = Counter(r.partition for r in records)
    assert {int(p): o for p, o in result["committed"].items()} == ends


@pytest.mark.compat("proxy", "IBM/sarama's transactions routed, read_committed")
@pytest.mark.timeout(600)  # the first test of a process starts the Kafka cluster
@pytest.mark.parametrize("peer", ["brokerlite", "3.9", "4"])
def test_sarama_transactions_are_routed(
    go_peers: Path, request: pytest.FixtureRequest, peer: str
) -> None:
    """sarama's transactional producer (committed, aborted and committed
    transactions, each committing group offsets with AddOffsetsToTxn) through
    the proxy, in front of brokerlite and of three Kafka 3.9 brokers (whose
    coordinator predates KIP-890's part 2: the proxy adds the partitions it
    moves records to with AddPartitionsToTxn of its own) and three Kafka 4.x
    nodes, RF 3. Read through the proxy and from the brokers directly:
    read_committed the committed records once each, none of the aborted,
    every key on its murmur2 partition (sarama hashes with FNV-1a), every
    delivery report naming its record's place; the group's offsets the
    committed transactions'."""
    if peer == "brokerlite":
        servers, replicas = request.getfixturevalue("broker").bootstrap_servers, 1
        proxy: RunningProxy = request.getfixturevalue("proxy")
        running = nullcontext(proxy)
    else:
        servers = request.getfixturevalue(f"kafka{peer[0]}_cluster").bootstrap_servers
        replicas = 3
        running = proxy_in_thread(upstream=tuple(servers.split(",")), port=0)
    with running as px:
        topic = fresh("px-go-txn")
        create(servers, topic, 2, replicas, served=True)
        moved = px.statistics.routing.records_moved
        args = txn_args("sarama", px.bootstrap_servers, topic)
        result = run_go_peer(go_peers, *args, timeout=240)
        assert px.statistics.routing.records_moved > moved
    check_transactions(result, routed=True)
    assert result["committed"] == {"0": 10, "1": 30}
    everything = placement(servers, topic, 2)
    assert all(r.partition == murmur2_partition(r.key, 2) for r in everything)
    reports = [(r["value"].encode(), r["partition"], r["offset"]) for r in result["produced"]]
    problem = misreported(everything, reports)
    assert problem is None, problem
    committed = placement(servers, topic, 2, isolation_level="read_committed")
    wanted = [r["value"] for r in result["produced"] if r["txn"] == "commit"]
    assert sorted(r.value.decode() for r in committed) == sorted(wanted)


def _answer(sock: socket.socket, reader: FrameReader) -> bytes:
    while (frame := reader.next_frame()) is None:
        chunk = sock.recv(65536)
        assert chunk, "the proxy closed the connection"
        reader.feed(chunk)
    return frame


def test_an_api_versions_version_the_proxy_does_not_know_is_refused_as_kafka_does(
    proxy: RunningProxy,
) -> None:
    """franz-go 1.22 first asks ApiVersions v5 (KIP-1242), which the proxy does not
    forward (its node-id check would be against the proxy's node): the proxy answers as Kafka's broker does (KIP-511), a v0 answer with
    UNSUPPORTED_VERSION naming the versions it knows, and keeps the connection
    (it used to close it, failing to read the broker's refusal, and franz-go
    retried for a minute); on it, the client asks again at the highest named."""
    host, port = proxy.bootstrap_servers.split(":")
    known = API_VERSIONS_MAX
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.settimeout(10)
        reader = FrameReader()
        # ApiVersions v(known + 1): request header v2, a body as v3's and v4's.
        frame = struct.pack(">hhih", 18, known + 1, 7, 2) + b"go\x00" + b"\x06gopkg\x041.0\x00"
        sock.sendall(struct.pack(">i", len(frame)) + frame)
        head, answer = protocol.decode_response(_answer(sock, reader), 18, 0)
        assert head.correlation_id == 7
        assert answer.error_code == ErrorCode.UNSUPPORTED_VERSION
        assert [(a.api_key, a.min_version, a.max_version) for a in answer.api_keys] == [
            (18, 0, known)
        ]
        retry = RequestHeader(request_api_key=18, request_api_version=known, correlation_id=8)
        sock.sendall(protocol.encode_request(retry, ApiVersionsRequest()))
        head, answer = protocol.decode_response(_answer(sock, reader), 18, known)
        assert (head.correlation_id, answer.error_code) == (8, 0)
        assert len(answer.api_keys) > 10
