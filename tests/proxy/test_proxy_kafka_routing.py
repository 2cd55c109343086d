"""Key routing through the proxy in front of Apache Kafka itself (issue #60):
three Kafka 4.x nodes (KRaft), topics of replication factor 3, and once three
Kafka 3.9 brokers (ZooKeeper).

Every client the proxy's tests drive produces keyed records through the proxy
with a partitioner that is not Java's (librdkafka's CRC32, sarama and kafkajs
naming partition 0), plain, idempotent and transactional where the client can:
read back from Kafka directly (not through the proxy), every key is on the
partition Java's murmur2 gives it (``Utils.toPositive(Utils.murmur2(key)) %
partitions``, Kafka's ``BuiltInPartitioner.partitionForKey``), every record
once, each key's records in the order they were sent, and every delivery
report names the offset its record has in the partition it names, or none
(tests/proxy/test_proxy_reports.py's rules, issue #51). Aborted transactions
stay invisible under read_committed though the proxy moved their records to
partitions the client never added to them.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import anyio
import pytest
from kafka_peers import KAFKA_4, KafkaCluster, classpath
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
from test_proxy_cluster import (
    aiokafka_transactions,
    confluent_transactions,
    kafka_python_transactions,
    trafka_transactions,
)

from trafka.codec import ApiKey
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.proxy.filters import Filter, FilterContext
from trafka.sdk.partitioners import murmur2_partition

pytestmark = [
    pytest.mark.timeout(300),
    pytest.mark.compat(
        "proxy", "key routing of every client tested, reports read back from the broker"
    ),
]

PARTITIONS = 6  # test_proxy_cluster's transactions place their keys over 6
N = 200
KEYS = 29


class ProduceAnswers(Filter):
    """Counts the Produce requests the proxy's clients sent and the answers they
    received, and notes each partition answered with an error: a plain
    producer retries such a partition's batch whole, and the parts other
    leaders took are written again; and a part the proxy sent again to a new
    leader may have been kept by the old one too (docs/proxy.md, "Key routing"
    and "Leaders")."""

    api_keys = frozenset({ApiKey.PRODUCE})

    def __init__(self) -> None:
        self.asked = self.answered = self.answered_ever = self.rerouted = 0
        self.errors: list[tuple[str, int, int]] = []
        self.history: list[str] = []  # each call of retried(): what it found

    async def on_request(self, ctx: FilterContext, body: Any) -> Any:
        self.asked += body.acks != 0
        return body

    def on_response(self, ctx: FilterContext, body: Any) -> Any:
        if body is not None:
            self.answered += 1
            self.answered_ever += 1
            self.errors += [
                (t.name, p.index, p.error_code)
                for t in body.responses
                for p in t.partition_responses
                if p.error_code
            ]
        return body

    def retried(self, proxy: RunningProxy) -> bool:
        """Whether, since the last call, a client was told an error or left
        unanswered (and so may have sent a batch again), or ``proxy`` sent a
        part to a new leader."""
        moved = proxy.statistics.routing.partitions_rerouted
        told = bool(self.errors) or self.asked != self.answered or moved > self.rerouted
        self.history.append(
            f"{self.asked} asked, {self.answered} answered {self.errors[:3]}, "
            f"{moved - self.rerouted} partitions sent to a new leader"
        )
        self.rerouted = moved
        self.asked = self.answered = 0
        self.errors.clear()
        return told


ANSWERS = ProduceAnswers()


@pytest.fixture(scope="module")
def proxy(kafka4_cluster: KafkaCluster) -> Iterator[RunningProxy]:
    upstream = tuple(kafka4_cluster.bootstrap_servers.split(","))
    with proxy_in_thread(upstream=upstream, port=0, filters=(ANSWERS,)) as running:
        yield running


def key_of(i: int) -> bytes:
    return b"key-%d" % (i % KEYS)


def check(
    kafka: KafkaCluster,
    topic: str,
    reports: Sequence[Report],
    sent: Sequence[bytes],
    twice: frozenset[bytes] = frozenset(),
) -> list[Any]:
    """The module's rules for the records ``sent`` (values), read from Kafka
    directly under read_committed; every record of the topic, returned. The
    values in ``twice`` (a plain producer's, told an error) may be written
    once more."""
    # Kafka answers EndTxn once the decision is logged and writes the markers
    # after it: until they are in, the last stable offset hides a committed
    # transaction's records (seen once under load: 47 of the last one's 100).
    deadline = time.monotonic() + 60
    while True:
        records = placement(
            kafka.bootstrap_servers, topic, PARTITIONS, isolation_level="read_committed"
        )
        mine = [r for r in records if r.value in set(sent)]
        counts = Counter(r.value for r in mine)
        wrong = {v: counts[v] for v in sent if not 1 <= counts[v] <= 1 + (v in twice)}
        if not wrong or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert not wrong, unlike(kafka, topic, wrong)
    assert [r for r in records if r.partition != murmur2_partition(r.key, PARTITIONS)] == []
    for key in {r.key for r in mine}:
        order = [r.value for r in sorted(mine, key=lambda r: r.offset) if r.key == key]
        order = list(dict.fromkeys(order))  # the first of each, as sent
        assert order == [v for v in sent if v in set(order)], key
    problem = misreported(records, reports)
    assert problem is None, problem
    return records


def unlike(kafka: KafkaCluster, topic: str, wrong: dict[bytes, int]) -> str:
    """Where the records read a wrong number of times under read_committed are
    in the logs (read_uncommitted): lost, left in an open transaction, or
    written twice."""
    logged = placement(kafka.bootstrap_servers, topic, PARTITIONS)
    where: dict[bytes, list[tuple[int, int]]] = {}
    for r in logged:
        if r.value in wrong:
            where.setdefault(r.value, []).append((r.partition, r.offset))
    missing = sorted(v for v, n in wrong.items() if n == 0)
    uncommitted = [v for v in missing if v in where]
    return (
        f"{len(wrong)} records read a wrong number of times: {len(missing)} missing "
        f"({len(uncommitted)} of them in the log, read_uncommitted: first "
        f"{[(v, where[v]) for v in uncommitted[:3]]}), "
        f"{len(wrong) - len(missing)} more often than allowed: "
        f"{sorted((v, n, where.get(v)) for v, n in wrong.items() if n)[:3]}; "
        f"Produce requests of each producer through the proxy: {ANSWERS.history}"
    )


Reporter = Callable[..., list[Report]]


def _confluent(proxy: RunningProxy, topic: str, sends: Any, **settings: Any) -> list[Report]:
    return confluent_reports(proxy, topic, sends, **settings)


def _servers(reporter: Reporter) -> Reporter:
    def run(proxy: RunningProxy, topic: str, sends: Any, **settings: Any) -> list[Report]:
        return reporter(proxy.bootstrap_servers, topic, sends, **settings)

    return run


# Each client: its reporter, its settings for the plain, idempotent and
# transactional producer, and its run of test_proxy_cluster's transactions
# (six, two aborted).
CLIENTS: dict[str, tuple[Reporter, dict[str, dict[str, Any]], Callable[..., Any]]] = {
    "confluent-kafka": (
        _confluent,
        {
            "plain": {"enable.idempotence": False},
            "idempotent": {"enable.idempotence": True, "compression.type": "lz4"},
            "transactional": {"transactional.id": "", "compression.type": "zstd"},
        },
        confluent_transactions,
    ),
    "kafka-python": (
        _servers(kafka_python_reports),
        {
            "plain": {"enable_idempotence": False, "acks": 1},
            "idempotent": {"enable_idempotence": True, "compression_type": "gzip"},
            "transactional": {"transactional_id": ""},
        },
        kafka_python_transactions,
    ),
    "aiokafka": (
        _servers(aiokafka_reports),
        {
            "plain": {"enable_idempotence": False, "acks": 1},
            "idempotent": {"enable_idempotence": True, "compression_type": "snappy"},
            "transactional": {"transactional_id": ""},
        },
        aiokafka_transactions,
    ),
    "trafka": (
        _servers(sdk_reports),
        {
            "plain": {"enable_idempotence": False, "acks": 1},
            "idempotent": {"enable_idempotence": True, "compression_type": "zstd"},
            "transactional": {"transactional_id": "", "compression_type": "gzip"},
        },
        lambda servers, topic, prefix: anyio.run(
            trafka_transactions, servers, topic, prefix, backend="trio"
        ),
    ),
}


@pytest.mark.parametrize("client", list(CLIENTS))
def test_every_client_is_routed_on_kafka_plain_idempotent_and_transactional(
    kafka4_cluster: KafkaCluster, proxy: RunningProxy, client: str
) -> None:
    reporter, modes, transactions = CLIENTS[client]
    topic = fresh("kr")
    create(kafka4_cluster.bootstrap_servers, topic, PARTITIONS, 3, served=True)
    routing = proxy.statistics.routing
    moved, idempotent = routing.records_moved, routing.requests_idempotent
    reports: list[Report] = []
    sent: list[bytes] = []
    twice: set[bytes] = set()
    ANSWERS.retried(proxy)
    answered = ANSWERS.answered_ever
    for mode, settings in modes.items():
        settings = {k: fresh(f"tx-{client}") if v == "" else v for k, v in settings.items()}
        sends = [(b"%s-%d" % (mode[:1].encode(), i), key_of(i)) for i in range(N)]
        reports += reporter(proxy, topic, sends, **settings)
        sent += [v for v, _ in sends]
        if ANSWERS.retried(proxy) and mode == "plain":
            twice.update(v for v, _ in sends)
    # Six transactions of 100 records, the second of each three aborted.
    transactions(proxy.bootstrap_servers, topic, b"x")
    sent += [b"x-%d" % (t * 100 + i) for t in range(6) if t % 3 != 1 for i in range(100)]
    records = check(kafka4_cluster, topic, reports, sent, frozenset(twice))
    assert {r.value for r in records} == set(sent)  # nothing aborted is visible
    assert ANSWERS.answered_ever > answered  # the filter saw the answers
    assert routing.records_moved > moved and routing.requests_idempotent > idempotent
    assert routing.batches_untouched_idempotent == 0


def test_kafkajs_plain_and_idempotent_are_routed_on_kafka(
    kafka4_cluster: KafkaCluster, proxy: RunningProxy, kafkajs: list[str]
) -> None:
    """kafkajs sends every message to partition 0, 100 a send, and is told each
    send's base offset (its n-th message at base + n when the base is known)."""
    topic = fresh("kr-js")
    create(kafka4_cluster.bootstrap_servers, topic, PARTITIONS, 3, served=True)
    reports: list[Report] = []
    sent: list[bytes] = []
    for mode in ("plain", "idempotent"):
        prefix = f"js{mode[:1]}"
        done = subprocess.run(
            [*kafkajs, "produce", proxy.bootstrap_servers, topic, str(N), prefix, mode, "reports"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-2000:]
        lines = done.stdout.split("\n")
        assert lines[-2:] == [f"ok {N}", ""]
        bases = [int(line.split()[1]) for line in lines[:-2]]
        for i in range(N):
            base = bases[i // 100]
            reports.append((b"%s-%d" % (prefix.encode(), i), 0, -1 if base < 0 else base + i % 100))
        sent += [b"%s-%d" % (prefix.encode(), i) for i in range(N)]
    check(kafka4_cluster, topic, reports, sent)


def test_sarama_idempotent_is_routed_on_kafka(
    kafka4_cluster: KafkaCluster, proxy: RunningProxy, build_go_client: Any
) -> None:
    """sarama (Debian's 1.22), idempotent, every message to partition 0, each
    one's offset printed in order."""
    sarama = build_go_client(
        "sarama_old", "github.com/Shopify/sarama", "golang-github-shopify-sarama-dev"
    )
    topic = fresh("kr-sarama")
    create(kafka4_cluster.bootstrap_servers, topic, PARTITIONS, 3, served=True)
    flags = {
        "-mode": "produce",
        "-brokers": proxy.bootstrap_servers,
        "-topic": topic,
        "-n": str(N),
        "-prefix": "sa",
        "-version": "1.0.0",
    }
    done = subprocess.run(
        [str(sarama), *(word for pair in flags.items() for word in pair), "-idempotent"],
        capture_output=True,
        text=True,
        timeout=90,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    offsets = [int(line) for line in done.stdout.split()]
    assert len(offsets) == N
    sent = [b"sa-%d" % i for i in range(N)]
    check(kafka4_cluster, topic, [(v, 0, o) for v, o in zip(sent, offsets, strict=True)], sent)


def test_routing_on_kafka_3_9(kafka3_cluster: KafkaCluster) -> None:
    """Three Kafka 3.9 brokers (ZooKeeper) behind the proxy, RF 3: librdkafka's
    plain and idempotent producers and its transactions (six, two aborted),
    whose coordinator predates KIP-890's part 2 (a partition the proxy moves
    records to is added by the proxy's own AddPartitionsToTxn): each key on its
    murmur2 partition, every report read back, nothing aborted visible."""
    servers = kafka3_cluster.bootstrap_servers
    with proxy_in_thread(upstream=tuple(servers.split(",")), port=0, filters=(ANSWERS,)) as px:
        topic = fresh("kr-39")
        create(servers, topic, PARTITIONS, 3, served=True)
        reports: list[Report] = []
        sent: list[bytes] = []
        twice: set[bytes] = set()
        ANSWERS.retried(px)
        answered = ANSWERS.answered_ever
        for prefix, idempotent in ((b"p", False), (b"i", True)):
            sends = [(b"%s-%d" % (prefix, i), key_of(i)) for i in range(N)]
            reports += confluent_reports(px, topic, sends, **{"enable.idempotence": idempotent})
            sent += [v for v, _ in sends]
            if ANSWERS.retried(px) and not idempotent:
                twice.update(v for v, _ in sends)
        confluent_transactions(px.bootstrap_servers, topic, b"x")
        ANSWERS.retried(px)
        sent += [b"x-%d" % (t * 100 + i) for t in range(6) if t % 3 != 1 for i in range(100)]
        records = check(kafka3_cluster, topic, reports, sent, frozenset(twice))
        assert {r.value for r in records} == set(sent)  # nothing aborted is visible
        assert ANSWERS.answered_ever > answered  # the filter saw the answers
        assert px.statistics.routing.records_moved > 0


@pytest.fixture(scope="module")
def java_producer(tmp_path_factory: pytest.TempPathFactory) -> list[str]:
    """The command running tests/interop/java/ReportingProducer (Kafka's own
    producer, kafka-clients 4.x), compiled with javac once per module."""
    javac, java = shutil.which("javac"), shutil.which("java")
    if javac is None or java is None:
        pytest.fail("javac and java are needed (apt-get install default-jdk-headless)")
    out = tmp_path_factory.mktemp("java-producer")
    source = Path(__file__).parents[1] / "interop" / "java" / "ReportingProducer.java"
    jars = classpath("kafka", KAFKA_4)
    subprocess.run([javac, "-d", str(out), "-cp", jars, str(source)], check=True, timeout=120)
    return [
        java,
        "-Xmx128m",
        "-XX:TieredStopAtLevel=1",
        "-cp",
        f"{out}:{jars}",
        "ReportingProducer",
    ]


def test_kafkas_java_producer_is_routed_on_kafka(
    kafka4_cluster: KafkaCluster, proxy: RunningProxy, java_producer: list[str]
) -> None:
    """Kafka's Java producer (4.x), each record sent to its CRC32 partition,
    plain, idempotent and in transactions (committed, aborted, committed):
    routed as the others, every report read back, nothing aborted visible."""
    topic = fresh("kr-java")
    create(kafka4_cluster.bootstrap_servers, topic, PARTITIONS, 3, served=True)
    reports: list[Report] = []
    sent: list[bytes] = []
    for mode in ("plain", "idempotent", "transactional"):
        prefix = f"j{mode[:1]}"
        done = subprocess.run(
            [
                *java_producer,
                proxy.bootstrap_servers,
                topic,
                str(N),
                prefix,
                mode,
                fresh("tx-java"),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, done.stderr[-3000:]
        lines = done.stdout.split("\n")
        assert lines[-2:] == [f"ok {N}", ""]
        for line in lines[:-2]:
            value, partition, offset = line.split()
            reports.append((value.encode(), int(partition), int(offset)))
        rounds = (prefix, f"{prefix}-again") if mode == "transactional" else (prefix,)
        sent += [b"%s-%d" % (r.encode(), i) for r in rounds for i in range(N)]
    records = check(kafka4_cluster, topic, reports, sent)
    assert len(records) == len(sent)  # nothing aborted is visible
