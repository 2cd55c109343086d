"""What the record-encryption tests share: a key file, the frames a consumer
straight to the broker finds, plaintext searched for in a broker's files, and
records produced and read back through the proxy with each client."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

import confluent_kafka
import pytest
from proxy_helpers import call, placement, sdk_reports

from trafka.proxy.encryption import add_key_version
from trafka.proxy.encryption.frame import MAGIC, parse


class Target(NamedTuple):
    """A broker a test writes encrypted records to: brokerlite or Apache Kafka 4.x."""

    bootstrap_servers: str
    #: the folders the broker writes its data in (searched for plaintext)
    folders: list[Path]
    #: whether it is Kafka (whose topics are served a moment after CreateTopics)
    kafka: bool


def target_for(request: pytest.FixtureRequest, brokerlite_servers: str, data: Path) -> Target:
    """The ``brokerlite`` or ``4`` parameter's broker: the module's brokerlite
    (its data folder ``data``) or the worker's shared Kafka 4.x node."""
    if request.param == "brokerlite":
        return Target(brokerlite_servers, [data], False)
    kafka = request.getfixturevalue("kafka4")
    return Target(kafka.bootstrap_servers, [n.folder / "logs" for n in kafka.nodes], True)


def no_plaintext(target: Target, topic: str, needle: bytes) -> None:
    """The broker's files hold the topic's data (its folder has files), and no
    file of the broker holds ``needle``."""
    assert any(p.is_file() for data in target.folders for p in data.glob(f"**/{topic}-*/*"))
    for data in target.folders:
        assert plaintext_in_files(data, needle) == []


def key_file(folder: Path, *keks: str) -> Path:
    """A key file with a first version of each KEK."""
    path = folder / "keks.toml"
    for kek in keks:
        add_key_version(path, kek)
    return path


def plaintext_in_files(root: Path, needle: bytes) -> list[Path]:
    """The files under ``root`` (a broker's log folders) whose bytes hold ``needle``."""
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def frames(records: Iterable[Any]) -> list[tuple[str, str]]:
    """Each record's frame (KEK id, KEK version); asserts every value is one."""
    out = []
    for r in records:
        assert r.value.startswith(MAGIC), r.value[:40]
        _, kek, version, _, _ = parse(r.value)
        out.append((kek, version))
    return out


def confluent_reports(
    servers: str, topic: str, sends: Sequence[tuple[bytes, bytes]], **settings: Any
) -> list[tuple[bytes, int, int]]:
    """confluent-kafka producing ``sends`` (value, key), in one transaction when
    ``settings`` name a ``transactional.id``: (value, partition, offset) each."""
    producer = confluent_kafka.Producer({"bootstrap.servers": servers, "linger.ms": 5, **settings})
    if "transactional.id" in settings:
        producer.init_transactions(30)
        producer.begin_transaction()
    reports: list[tuple[bytes, int, int]] = []

    def report(err: Any, msg: Any) -> None:
        assert err is None, err
        reports.append((msg.value(), msg.partition(), msg.offset()))

    for value, key in sends:
        producer.produce(topic, value=value, key=key, on_delivery=report)
    if "transactional.id" in settings:
        producer.commit_transaction(30)
    assert producer.flush(30) == 0
    return reports


def produce_every_way(servers: str, topic: str, tag: str) -> list[tuple[bytes, int, int]]:
    """Records ``SECRET-<tag>-...`` sent by trafka's SDK and confluent-kafka,
    each plain, idempotent and transactional; their delivery reports."""
    reports: list[tuple[bytes, int, int]] = []
    ways: list[tuple[str, Any, dict[str, Any]]] = [
        ("sdk-plain", sdk_reports, {"enable_idempotence": False, "compression_type": "lz4"}),
        ("sdk-idem", sdk_reports, {"enable_idempotence": True}),
        ("sdk-txn", sdk_reports, {"transactional_id": f"{topic}-{tag}-sdk"}),
        ("ck-plain", confluent_reports, {"enable.idempotence": False, "compression.type": "zstd"}),
        ("ck-idem", confluent_reports, {"enable.idempotence": True}),
        ("ck-txn", confluent_reports, {"transactional.id": f"{topic}-{tag}-ck"}),
    ]
    for name, send, settings in ways:
        sends = [
            (b"SECRET-%s-%s-%d" % (tag.encode(), name.encode(), i), b"k%d" % (i % 7))
            for i in range(40)
        ]
        reports += send(servers, topic, sends, **settings)
    return reports


def read_in_order(servers: str, topic: str, partitions: int) -> dict[int, list[bytes]]:
    """Every committed value of each partition, in offset order (read_committed)."""
    out: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
    for r in placement(servers, topic, partitions, isolation_level="read_committed"):
        out[r.partition].append(r.value)
    return out


def once_in_order(read: dict[int, list[bytes]], sent: Sequence[bytes], keys: int = 7) -> None:
    """Every value sent was read once, and each producer's values of each key
    (``...-<way>-<i>``, key ``<i % keys>``) in the order it sent them (the order
    Kafka keeps: per partition, and routing keeps a key's records together)."""
    got = Counter(v for vs in read.values() for v in vs)
    want = Counter(sent)
    missing, extra = sorted(want - got), sorted(got - want)
    assert not missing and not extra, f"missing {missing[:20]}, extra {extra[:20]}"
    for values in read.values():
        last: dict[tuple[bytes, int], int] = {}
        for v in values:
            way, _, i = v.rpartition(b"-")
            key = (way, int(i) % keys)
            assert last.get(key, -1) < int(i), (way, i)
            last[key] = int(i)


def fetch_once(servers: str, topic: str, offset: int) -> tuple[int, list[bytes]]:
    """One Fetch (v12, by topic name) of partition 0 from ``offset``: the
    partition's error code and the values its answer holds."""
    import socket

    from trafka.codec import ApiKey
    from trafka.codec.messages.k01_fetch import FetchRequest
    from trafka.codec.records import decode_records

    host, port = servers.split(",")[0].rsplit(":", 1)
    part = FetchRequest.FetchPartition(
        partition=0, fetch_offset=offset, partition_max_bytes=1 << 20
    )
    body = FetchRequest(
        max_wait_ms=0,
        min_bytes=0,
        max_bytes=1 << 20,
        topics=[FetchRequest.FetchTopic(topic=topic, partitions=[part])],
    )
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        answer = call(sock, ApiKey.FETCH, 12, body)
    p = answer.responses[0].partitions[0]
    return p.error_code, [r.value for r in decode_records(p.records or b"")]
