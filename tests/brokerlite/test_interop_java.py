"""Apache Kafka's own Java client (kafka-clients 4.x) against brokerlite: the
scenarios of ``tests/interop/java/KafkaHarness.java`` (producer, consumer, the
KIP-848 consumer protocol, the KIP-932 share consumer, Admin), all run in one
JVM against one broker; each scenario checks what it read against what it
wrote and is one test here, so that a failure names its scenario and says what
differed.

The harness's expectations are Kafka's: the same scenarios pass against Apache
Kafka 4.4 (run them with ``java_harness.run(kafka4.bootstrap_servers, ...)``);
where Kafka versions answer differently (the fencing error under transaction
version 2, a deleted group described by DescribeGroups v6), the harness accepts
each release's answer and says which it saw.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import java_harness
import pytest
from kafka_peers import KAFKA_4, SKIP_ENV, missing

from trafka.brokerlite import broker_in_thread

pytestmark = [pytest.mark.kafka, pytest.mark.slow, pytest.mark.timeout(600)]

SCENARIOS = [
    "producer_sync",
    "producer_async_interceptor",
    "partitioners",
    "compression",
    "log_append_time",
    "idempotence",
    "transactions",
    "group_range",
    "group_roundrobin",
    "group_sticky",
    "group_cooperative_sticky",
    "group_pattern",
    "group_protocol_consumer",
    "group_protocol_consumer_pattern",
    "manual_commits",
    "seek_and_times",
    "share_consumer",
    "admin_topics",
    "admin_configs",
    "admin_groups",
    "admin_offsets_cluster",
    "admin_transactions",
]


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, dict[str, Any]]]:
    """Every scenario's outcome, from one JVM run against one brokerlite."""
    if os.environ.get(SKIP_ENV) == "1":
        pytest.skip(f"{SKIP_ENV}=1: Apache Kafka tests skipped")
    why = missing("kafka", KAFKA_4)
    if why is not None:
        pytest.fail(why, pytrace=False)
    data = tmp_path_factory.mktemp("java-client")
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=data, group_initial_rebalance_delay_ms=0
    ) as running:
        found, stderr = java_harness.run(running.bootstrap_servers, SCENARIOS, timeout=480)
        if not all(outcome["ok"] for outcome in found.values()):
            print(stderr[-20_000:])  # the client's WARN lines, shown with a failure
        yield found


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_java_client_scenario(outcomes: dict[str, dict[str, Any]], scenario: str) -> None:
    outcome = outcomes[scenario]
    assert outcome["ok"], f"{scenario}: {outcome.get('error')}"
