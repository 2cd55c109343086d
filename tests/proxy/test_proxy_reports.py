"""Delivery reports through the routing proxy name only places where their records are (issue #51).

Every client of the proxy matrix sends batches of mixed keys through the proxy
with a partitioner that is not the proxy's, so that most of its batches are
split over several partitions. Then every partition is read back from the
broker directly (not through the proxy) and every delivery report is checked
against where its record really is:

* its offset is unknown, or the offset its record has in the partition the
  report names. Unknown is what each client's API says for no offset: -1
  (Java's convention for acks=0, kafka-python's and trafka's ``RecordMetadata``,
  kafkajs's ``baseOffset``), ``None`` (confluent-kafka's ``Message.offset()``),
  or any negative offset (librdkafka, aiokafka and sarama give record *i* of a
  batch the offset ``base + i`` whatever the base: no base makes every record
  of a batch -1 there, see docs/proxy.md);
* no (partition, offset) is named by two reports;
* no report names an offset past the partition's last record.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import Counter
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from go_peers import run_go_peer
from proxy_helpers import (
    Report,
    aiokafka_reports,
    confluent_reports,
    create,
    fresh,
    kafka_python_reports,
    misreported,
    placement,
    sdk_reports,
)

from trafka.brokerlite import RunningBroker
from trafka.proxy import ORIGIN_HEADER, RunningProxy, parse_origin_header, proxy_in_thread
from trafka.sdk.partitioners import crc32_partition, murmur2_partition

pytestmark = pytest.mark.timeout(120)

PARTITIONS = 5
N = 300
KEYS = 29
KCAT = shutil.which("kcat")


@pytest.fixture(scope="module", params=["memory", "journal"])
def proxy(
    request: pytest.FixtureRequest,
    broker: RunningBroker,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[RunningProxy]:
    journal = str(tmp_path_factory.mktemp("journal")) if request.param == "journal" else None
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, journal_dir=journal
    ) as running:
        yield running


def key_of(i: int) -> bytes:
    return b"key-%d" % (i % KEYS)


def unknown(offset: int | None) -> bool:
    return offset is None or offset < 0


def check(
    broker: RunningBroker, proxy: RunningProxy, topic: str, reports: Sequence[Report]
) -> None:
    """The rules of the module, against the records as the broker has them."""
    records = placement(broker.bootstrap_servers, topic, PARTITIONS)
    assert {r.value for r in records} >= {v for v, _, _ in reports}
    assert all(r.partition == murmur2_partition(r.key, PARTITIONS) for r in records)
    assert proxy.statistics.routing.records_moved > 0
    problem = misreported(records, reports)
    assert problem is None, problem


def topic_for(proxy: RunningProxy) -> str:
    topic = fresh("reports")
    create(proxy.bootstrap_servers, topic, PARTITIONS)
    return topic


# -- librdkafka -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        {"compression.type": "none"},
        {"compression.type": "gzip"},
        {"compression.type": "snappy"},
        {"compression.type": "lz4", "enable.idempotence": True},
        {"compression.type": "zstd", "transactional.id": "reports-tx"},
    ],
    ids=["none", "gzip", "snappy", "lz4-idempotent", "zstd-transactional"],
)
def test_confluent_kafka_reports(
    broker: RunningBroker, proxy: RunningProxy, settings: dict[str, Any]
) -> None:
    topic = topic_for(proxy)
    if "transactional.id" in settings:
        settings = {**settings, "transactional.id": fresh("reports-tx")}
    sends = [(b"ck-%d" % i, key_of(i)) for i in range(N)]
    check(broker, proxy, topic, confluent_reports(proxy, topic, sends, **settings))


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_batch_none_of_whose_records_moved_is_told_its_true_offsets(
    broker: RunningBroker, proxy: RunningProxy, idempotent: bool
) -> None:
    """Keys librdkafka puts on partition 0 where murmur2 does too, and keys it puts
    on partition 1 that murmur2 puts on 0: each request's batch for partition 0
    stays whole and leads the batch the proxy writes there, the records of
    partition 1 following it. The first are told their true offsets, the others none."""
    topic = topic_for(proxy)
    keys = [b"key-%d" % i for i in range(2000)]
    stay = [
        k for k in keys if crc32_partition(k, PARTITIONS) == murmur2_partition(k, PARTITIONS) == 0
    ]
    move = [
        k
        for k in keys
        if (crc32_partition(k, PARTITIONS), murmur2_partition(k, PARTITIONS)) == (1, 0)
    ]
    sends = [
        (b"st-%d" % i, stay[i % len(stay)] if i % 2 else move[i % len(move)]) for i in range(N)
    ]
    settings = {"linger.ms": 20, "enable.idempotence": idempotent}
    reports = confluent_reports(proxy, topic, sends, **settings)
    check(broker, proxy, topic, reports)
    told = {p: sum(1 for _, q, o in reports if q == p and not unknown(o)) for p in (0, 1)}
    assert told == {0: N // 2, 1: 0}


@pytest.mark.skipif(KCAT is None, reason="kcat is not installed")
@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_kcat_reports(broker: RunningBroker, proxy: RunningProxy, codec: str) -> None:
    """kcat prints each delivery report (partition and offset, not the message) at
    verbosity 3; librdkafka reports a partition's messages in the order they
    were produced, so the n-th report for a partition is its n-th message."""
    assert KCAT is not None
    topic = topic_for(proxy)
    values = [b"kc-%d" % i for i in range(N)]
    lines = b"".join(key_of(i) + b":" + v + b"\n" for i, v in enumerate(values))
    done = subprocess.run(
        [
            KCAT,
            "-b",
            proxy.bootstrap_servers,
            "-P",
            "-t",
            topic,
            "-K:",
            "-z",
            codec,
            "-X",
            "linger.ms=5",
            "-v",
            "-v",
        ],
        input=lines,
        capture_output=True,
        timeout=60,
        check=True,
    )
    found = re.findall(rb"delivered to partition (\d+) \(offset (-?\d+)\)", done.stderr)
    assert len(found) == N, done.stderr[-2000:]
    queues: dict[int, list[bytes]] = {}
    for i, v in enumerate(values):
        queues.setdefault(crc32_partition(key_of(i), PARTITIONS), []).append(v)
    reports: list[Report] = []
    for partition, offset in found:
        p = int(partition)
        reports.append((queues[p].pop(0), p, int(offset)))
    check(broker, proxy, topic, reports)


# -- Python clients -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [
        {"compression_type": None, "enable_idempotence": False},
        {"compression_type": "gzip", "enable_idempotence": True},
        {"compression_type": "lz4", "enable_idempotence": False},
    ],
    ids=["none", "gzip-idempotent", "lz4"],
)
def test_kafka_python_reports(
    broker: RunningBroker, proxy: RunningProxy, settings: dict[str, Any]
) -> None:
    topic = topic_for(proxy)
    sends = [(b"kp-%d" % i, key_of(i)) for i in range(N)]
    reports = kafka_python_reports(proxy.bootstrap_servers, topic, sends, **settings)
    check(broker, proxy, topic, reports)
    # kafka-python says "no offset" for a whole batch answered -1: it is told so.
    assert {o for _, _, o in reports if o < 0} == {-1}


@pytest.mark.parametrize("codec", [None, "snappy", "zstd"])
def test_aiokafka_reports(broker: RunningBroker, proxy: RunningProxy, codec: str | None) -> None:
    topic = topic_for(proxy)
    sends = [(b"ai-%d" % i, key_of(i)) for i in range(N)]
    reports = aiokafka_reports(proxy.bootstrap_servers, topic, sends, compression_type=codec)
    check(broker, proxy, topic, reports)


@pytest.mark.parametrize(
    "settings",
    [
        {"compression_type": "none", "enable_idempotence": False},
        {"compression_type": "zstd", "enable_idempotence": True},
        {"compression_type": "gzip", "transactional_id": "reports-sdk"},
    ],
    ids=["none", "zstd-idempotent", "gzip-transactional"],
)
def test_trafka_sdk_reports(
    broker: RunningBroker, proxy: RunningProxy, settings: dict[str, Any]
) -> None:
    topic = topic_for(proxy)
    if "transactional_id" in settings:
        settings = {**settings, "transactional_id": fresh("reports-sdk")}
    sends = [(b"sd-%d" % i, key_of(i)) for i in range(N)]
    reports = sdk_reports(proxy.bootstrap_servers, topic, sends, **settings)
    check(broker, proxy, topic, reports)
    # trafka's SDK says "no offset" for a whole batch answered -1: it is told so.
    assert {o for _, _, o in reports if unknown(o)} == {-1}


# -- Go and Node clients ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("version", "codec"),
    [("1.0.0", "none"), ("1.0.0", "snappy"), ("1.0.0", "gzip"), ("0.10.2.0", "lz4"), ("", "zstd")],
)
def test_sarama_reports(
    broker: RunningBroker, proxy: RunningProxy, go_peers: Any, version: str, codec: str
) -> None:
    """sarama (IBM's, from the Go module proxy) hashes keys with FNV-1a and
    reports each message's offset; at 0.10.2 it writes legacy message sets
    (magic 1), at 1.0.0 Produce v3 batches, by default (2.8) Produce v7."""
    topic = topic_for(proxy)
    args = ["-client", "sarama", "-mode", "produce", "-brokers", proxy.bootstrap_servers]
    args += ["-topic", topic, "-n", str(N), "-prefix", "sa", "-rounds", f"{codec}:all"]
    result = run_go_peer(go_peers, *args, *(["-version", version] if version else []))
    reports = [(r["value"].encode(), r["partition"], r["offset"]) for r in result["produced"]]
    assert len(reports) == N
    check(broker, proxy, topic, reports)


@pytest.mark.parametrize("mode", ["plain", "idempotent"])
def test_kafkajs_reports(
    broker: RunningBroker, proxy: RunningProxy, kafkajs: list[str], mode: str
) -> None:
    """kafkajs answers each ``send`` (100 messages, all to partition 0) with the
    partition's base offset; its n-th message is at base + n when the base is known."""
    topic = topic_for(proxy)
    done = subprocess.run(
        [*kafkajs, "produce", proxy.bootstrap_servers, topic, str(N), "js", mode, "reports"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    lines = done.stdout.split("\n")
    assert lines[-2:] == [f"ok {N}", ""]
    bases = [int(line.split()[1]) for line in lines[:-2]]
    assert len(bases) == N // 100
    reports: list[Report] = []
    for i in range(N):
        base = bases[i // 100]
        reports.append((b"js-%d" % i, 0, -1 if base < 0 else base + i % 100))
    check(broker, proxy, topic, reports)


# -- where a record went: origin headers --------------------------------------------------


@pytest.mark.parametrize("idempotent", [False, True])
def test_origin_headers_say_where_the_client_put_each_record_it_was_not_told(
    broker: RunningBroker, idempotent: bool
) -> None:
    """With ``origin_headers``, every record whose delivery report names no offset
    carries ``trafka-origin``: the partition its producer chose (the one its report
    names), its place in that batch, and for an idempotent producer its producer id
    and sequence number. Records whose report names their true offset carry none
    (their batches pass whole). Read back from the broker, the headers rebuild each
    client batch: its records, in the client's order."""
    with proxy_in_thread(
        upstream=(broker.bootstrap_servers,), port=0, origin_headers=True
    ) as proxy:
        topic = topic_for(proxy)
        # Some keys librdkafka and murmur2 both put on the same partition: their
        # batches may stay whole (true offsets, no header); the rest move.
        sends = [(b"or-%d" % i, key_of(i)) for i in range(N)]
        settings = {"compression.type": "lz4", "enable.idempotence": idempotent}
        reports = confluent_reports(proxy, topic, sends, **settings)
        check(broker, proxy, topic, reports)
    records = placement(broker.bootstrap_servers, topic, PARTITIONS)
    origin = {
        r.value: parse_origin_header(v) for r in records for k, v in r.headers if k == ORIGIN_HEADER
    }
    told = {v: (p, o) for v, p, o in reports}
    # A header exactly where the report names no offset, naming the report's partition.
    assert {v for v, (_, o) in told.items() if unknown(o)} == set(origin)
    assert origin  # most batches of mixed keys split
    for value, fields in origin.items():
        assert fields["partition"] == told[value][0]
        assert 0 <= fields["index"] < fields["count"]
    # The headers rebuild every client batch they name, in the client's order.
    producers = {(f.get("producer"), f.get("epoch")) for f in origin.values()}
    assert len(producers) == 1 and (idempotent or producers == {(None, None)})
    batches: dict[tuple[int, ...], list[tuple[int, bytes]]] = {}
    for value, f in origin.items():
        if idempotent:
            batch: tuple[int, ...] = (f["partition"], f["sequence"] - f["index"], f["count"])
        else:
            batch = (f["partition"], f["count"])
        batches.setdefault(batch, []).append((f["index"], value))
    for (partition, *_, count), members in batches.items():
        indexes = sorted(i for i, _ in members)
        sent = [int(v.split(b"-")[1]) for _, v in sorted(members)]
        assert all(crc32_partition(key_of(i), PARTITIONS) == partition for i in sent)
        if idempotent:  # one batch each: whole, in order
            assert indexes == list(range(count))
            assert sent == sorted(sent)
        else:  # batches of one size: each index as often as the others
            assert Counter(indexes) == Counter({i: len(members) // count for i in range(count)})
