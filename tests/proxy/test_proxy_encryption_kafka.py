"""The proxy's record encryption in front of Apache Kafka 4.x (issue #83,
item 1), differential to the brokerlite tests: Kafka takes the re-encrypted
batches of plain, idempotent and transactional producers (trafka's SDK and
confluent-kafka) as the producers' own (its CRC, sequence and transaction
checks), routed by key or forwarded; a read_committed consumer through the
proxy reads every record once and in order; Kafka's log segments hold no
plaintext, and a consumer straight to Kafka reads only frames.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from client_matrix import KEYS, by_partition, java_producer, java_sends, read_committed
from encryption_helpers import (
    fetch_once,
    frames,
    key_file,
    once_in_order,
    plaintext_in_files,
    produce_every_way,
    read_in_order,
)
from kafka_peers import KafkaCluster
from proxy_helpers import create, fresh, misreported, placement, sdk_reports

from trafka.codec.errors import ErrorCode
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.proxy.encryption import RecordEncryption
from trafka.proxy.encryption.frame import MAGIC

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.compat("proxy", "record encryption: Kafka takes the re-encrypted batches"),
]

PARTITIONS = 3


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return key_file(tmp_path_factory.mktemp("encryption-kafka"), "orders")


@pytest.fixture(scope="module", params=["routed", "forwarded"])
def proxy(request: Any, kafka4: KafkaCluster, keys: Path) -> Iterator[RunningProxy]:
    encryption = RecordEncryption(
        {"kms": "keyfile", "key_file": str(keys), "topics": {"kenc-.*": "orders"}}
    )
    route = "murmur2" if request.param == "routed" else "none"
    with proxy_in_thread(
        upstream=(kafka4.bootstrap_servers,), port=0, filters=(encryption,), route_keys=route
    ) as running:
        yield running


def test_kafka_keeps_only_ciphertext_and_consumers_through_the_proxy_read_plaintext(
    kafka4: KafkaCluster, proxy: RunningProxy
) -> None:
    topic = fresh("kenc")
    create(kafka4.bootstrap_servers, topic, PARTITIONS, 1, served=True)
    tag = fresh("t")
    reports = produce_every_way(proxy.bootstrap_servers, topic, tag)
    once_in_order(
        read_in_order(proxy.bootstrap_servers, topic, PARTITIONS), [r[0] for r in reports]
    )
    straight = placement(
        kafka4.bootstrap_servers, topic, PARTITIONS, isolation_level="read_committed"
    )
    assert len(straight) == len(reports)
    assert {kek for kek, _ in frames(straight)} == {"orders"}
    logs = [node.folder / "logs" for node in kafka4.nodes]
    assert any(any(p.glob(f"{topic}-*/*.log")) for p in logs)
    for folder in logs:  # the topic's segments, and every other file Kafka wrote
        assert plaintext_in_files(folder, b"SECRET-" + tag.encode()) == []


def test_kafka_ciphertext_that_does_not_decrypt_is_corrupt_message(
    kafka4: KafkaCluster, proxy: RunningProxy
) -> None:
    topic = fresh("kenc-bad")
    create(kafka4.bootstrap_servers, topic, 1, 1, served=True)
    sdk_reports(proxy.bootstrap_servers, topic, [(b"good", b"k")])
    sdk_reports(kafka4.bootstrap_servers, topic, [(MAGIC + b"\x01junk", b"k")])
    assert fetch_once(proxy.bootstrap_servers, topic, 0) == (0, [b"good"])
    assert fetch_once(proxy.bootstrap_servers, topic, 1) == (ErrorCode.CORRUPT_MESSAGE, [])


def test_kafkas_java_producer_plain_idempotent_and_transactional(
    kafka4: KafkaCluster, proxy: RunningProxy
) -> None:
    """Kafka's Java producer (4.x) through the proxy, plain, idempotent and in
    transactions (committed, aborted, committed), one JVM for the three
    (tests/proxy/client_matrix.py): Kafka takes its re-encrypted batches, a
    read_committed consumer through the proxy reads every committed record
    once and in order, nothing aborted, every delivery report where its record
    is, and Kafka holds frames only, routed and not (a forwarding proxy caps
    ``transaction.version`` at 1, see test_proxy_txn_versions.py)."""
    topic = fresh("kenc-java")
    create(kafka4.bootstrap_servers, topic, PARTITIONS, 1, served=True)
    command = java_producer()
    reports, sent = java_sends(
        command, proxy.bootstrap_servers, topic, 60, "SECRET", fresh("tx-java"), {}
    )
    records = read_committed(proxy.bootstrap_servers, topic, PARTITIONS, sent)
    once_in_order(by_partition(records, PARTITIONS), sent, keys=KEYS)
    assert misreported(records, reports) is None, misreported(records, reports)
    straight = placement(
        kafka4.bootstrap_servers, topic, PARTITIONS, isolation_level="read_committed"
    )
    assert len(frames(straight)) == len(sent)
