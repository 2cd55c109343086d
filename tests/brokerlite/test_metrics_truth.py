"""brokerlite's failed-produce counter counts what Kafka's does (issue #62,
section 3), scraped over HTTP from a real broker fed real Produce requests.

``kafka_server_brokertopicmetrics_failedproducerequests_total`` is Kafka's
``FailedProduceRequestsPerSec``. Kafka's ReplicaManager (``appendToLocalLog``,
3.9 and 4.x) marks it for an append that failed unexpectedly (a producer state
refusal such as OUT_OF_ORDER_SEQUENCE_NUMBER, too few in-sync replicas, an
invalid record) and, by its own comment, not for the errors it expects of a
client (unknown topic or partition, not the leader, a batch too large, a
corrupt batch); what KafkaApis refuses before any append (authorization,
acks) never reaches it. Each case produces one partition's batch and checks the
counter of its topic grew by exactly 1, or not at all.
"""

from __future__ import annotations

import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k00_produce as pm
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k22_init_producer_id as ip
from trafka.codec.records import encode_batch

pytestmark = pytest.mark.timeout(60)

FAILED = "kafka_server_brokertopicmetrics_failedproducerequests_total"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    with broker_in_thread(
        port=0,
        host="127.0.0.1",
        data_dir=tmp_path_factory.mktemp("metrics-truth"),
        metrics_listen="127.0.0.1:0",
        auto_create_topics=False,
    ) as running:
        yield running


def failed(broker: RunningBroker, topic: str) -> float:
    assert broker.metrics_address is not None
    host, port = broker.metrics_address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == FAILED and s.labels == {"topic": topic}:
                return float(s.value)
    return 0.0


def create(client: Any, topic: str, **configs: str) -> None:
    req = ct.CreateTopicsRequest
    body = req(
        topics=[
            req.CreatableTopic(
                name=topic,
                num_partitions=1,
                replication_factor=1,
                configs=[req.CreatableTopicConfig(name=k, value=v) for k, v in configs.items()],
            )
        ],
        timeout_ms=10_000,
    )
    assert [t.error_code for t in client.request(19, 7, body).topics] == [0]


def produce(
    client: Any, topic: str, batch: bytes, *, acks: int = 1, partition: int = 0
) -> ErrorCode:
    body = pm.ProduceRequest(
        acks=acks,
        timeout_ms=5_000,
        topic_data=[
            pm.ProduceRequest.TopicProduceData(
                name=topic,
                partition_data=[
                    pm.ProduceRequest.PartitionProduceData(index=partition, records=batch)
                ],
            )
        ],
    )
    answer = client.request(0, 9, body)
    (code,) = [p.error_code for t in answer.responses for p in t.partition_responses]
    return ErrorCode(code)


def plain(size: int = 10) -> bytes:
    return encode_batch([(0, b"k", b"x" * size, ())])


def out_of_order(client: Any, topic: str) -> ErrorCode:
    """An idempotent producer's batch at sequence 0, then one at 5 (1 expected;
    a leader with no state for the producer would take any, KIP-360)."""
    init = ip.InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000)
    born = client.request(22, 4, init)

    def at(seq: int) -> bytes:
        return encode_batch(
            [(0, b"k", b"v", ())],
            producer_id=born.producer_id,
            producer_epoch=born.producer_epoch,
            base_sequence=seq,
        )

    assert produce(client, topic, at(0)) == ErrorCode.NONE
    return produce(client, topic, at(5))


@dataclass(frozen=True)
class Case:
    name: str
    configs: dict[str, str]
    send: Callable[[Any, str], ErrorCode]
    code: ErrorCode
    counts: bool


CASES = [
    # Counted: the append itself failed.
    Case(
        "out_of_order_sequence",
        {},
        out_of_order,
        ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER,
        True,
    ),
    Case(
        "not_enough_replicas",
        {"min.insync.replicas": "2"},
        lambda c, t: produce(c, t, plain(), acks=-1),
        ErrorCode.NOT_ENOUGH_REPLICAS,
        True,
    ),
    # Not counted: what Kafka expects of a client.
    Case(
        "unknown_partition",
        {},
        lambda c, t: produce(c, t, plain(), partition=7),
        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
        False,
    ),
    Case(
        "batch_too_large",
        {"max.message.bytes": "1000"},
        lambda c, t: produce(c, t, plain(5000)),
        ErrorCode.MESSAGE_TOO_LARGE,
        False,
    ),
    Case(
        "invalid_acks",
        {},
        lambda c, t: produce(c, t, plain(), acks=2),
        ErrorCode.INVALID_REQUIRED_ACKS,
        False,
    ),
    Case("written", {}, lambda c, t: produce(c, t, plain()), ErrorCode.NONE, False),
]


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_failed_produce_counts_what_kafka_counts(
    broker: RunningBroker, raw_client: Any, case: Case
) -> None:
    client = raw_client(broker.address)
    topic = f"truth-{case.name}"
    create(client, topic, **case.configs)
    before = failed(broker, topic)
    assert case.send(client, topic) == case.code
    assert failed(broker, topic) - before == (1 if case.counts else 0)


def test_the_broker_wide_total_is_the_sum_of_the_topics(broker: RunningBroker) -> None:
    """topic="" is the broker-wide series: the sum of the per-topic ones."""
    assert broker.metrics_address is not None
    host, port = broker.metrics_address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    values = {
        s.labels["topic"]: s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == FAILED
    }
    assert values.pop("") == sum(values.values())
