"""The SDK clients' opt-in Prometheus endpoint (metrics.listen), scraped with
prometheus_client's own parser while records flow, on trio and asyncio."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sdk_brokers import fresh, module_broker

from trafka.brokerlite import RunningBroker
from trafka.sdk import ConfigError, NewTopic, open_admin, open_consumer, open_producer


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    yield from module_broker(tmp_path_factory, "prometheus")


def scrape(address: tuple[str, int], path: str = "/metrics") -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=10) as r:
            return int(r.status), r.read().decode()
    except urllib.error.HTTPError as exc:
        return int(exc.code), ""


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


@pytest.mark.parametrize("backend", ["trio", "asyncio"])
def test_producer_and_consumer_metrics_move(broker: RunningBroker, backend: str) -> None:
    topic = fresh("prom")
    servers = broker.bootstrap_servers

    async def main() -> tuple[dict[Any, float], dict[Any, float]]:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 2)])
        async with open_producer(
            bootstrap_servers=servers, client_id="p1", metrics_listen="127.0.0.1:0"
        ) as producer:
            for i in range(40):
                await producer.send(topic, b"v", key=b"k%d" % i)
            await producer.flush()
            address = producer.metrics_address
            status, text = await anyio.to_thread.run_sync(scrape, address)
            assert status == 200
            ready, _ = await anyio.to_thread.run_sync(scrape, address, "/readyz")
            assert ready == 200
            produced = samples(text)
        async with open_consumer(
            bootstrap_servers=servers,
            client_id="c1",
            group_id=fresh("g"),
            auto_offset_reset="earliest",
            metrics_listen="127.0.0.1:0",
        ) as consumer:
            consumer.subscribe([topic])
            got = 0
            with anyio.fail_after(30):
                while got < 25:
                    got += sum(len(r) for r in (await consumer.getmany(timeout_ms=500)).values())
            _, text = await anyio.to_thread.run_sync(scrape, consumer.metrics_address)
            consumed = samples(text)
        return produced, consumed

    produced, consumed = anyio.run(main, backend=backend)
    p = (("client_id", "p1"),)
    assert produced[("kafka_producer_producer_metrics_record_send_total", p)] == 40
    assert produced[("kafka_producer_producer_metrics_record_error_total", p)] == 0
    assert produced[("kafka_producer_producer_metrics_batch_size_avg", p)] > 0
    assert (
        produced[
            ("kafka_producer_producer_topic_metrics_record_send_total", (*p, ("topic", topic)))
        ]
        == 40
    )
    assert produced[("kafka_producer_producer_node_metrics_connection_count", p)] >= 1
    c = (("client_id", "c1"),)
    assert (
        consumed[("kafka_consumer_consumer_fetch_manager_metrics_records_consumed_total", c)] >= 25
    )
    lags = [
        v
        for (name, labels), v in consumed.items()
        if name == "kafka_consumer_consumer_fetch_manager_metrics_records_lag"
    ]
    assert lags and consumed[
        ("kafka_consumer_consumer_fetch_manager_metrics_records_lag_max", c)
    ] == max(lags)


def test_a_bad_listen_address_is_a_config_error(broker: RunningBroker) -> None:
    async def main() -> None:
        async with open_producer(bootstrap_servers=broker.bootstrap_servers, metrics_listen="nope"):
            pass

    with pytest.raises(ConfigError, match=r"metrics\.listen must be host:port"):
        anyio.run(main, backend="trio")


def test_the_admin_client_serves_its_metrics_too(broker: RunningBroker) -> None:
    async def main() -> tuple[int, str]:
        async with open_admin(
            bootstrap_servers=broker.bootstrap_servers, client_id="a1", metrics_listen="127.0.0.1:0"
        ) as admin:
            await admin.list_topics()
            return await anyio.to_thread.run_sync(scrape, admin.metrics_address)

    status, text = anyio.run(main, backend="trio")
    assert status == 200
    assert any(labels == (("client_id", "a1"),) for _, labels in samples(text))
