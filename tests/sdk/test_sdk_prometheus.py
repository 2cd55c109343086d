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


def test_record_retry_counts_records_and_a_retry_is_no_error(broker: RunningBroker) -> None:
    """Java's ``record-retry-total`` counts the records of each batch sent again
    (Sender.reenqueueBatch), ``record-error-total`` the records that failed for
    good. Five records in one batch meet NOT_ENOUGH_REPLICAS (retriable:
    min.insync.replicas 2 on one broker, acks=all) until the topic allows 1:
    the retries count five records each, and no record is an error. Then a
    producer whose delivery timeout passes while it retries: its records are
    errors."""
    topic = fresh("retry")
    servers = broker.bootstrap_servers

    async def retried_then_written() -> dict[Any, float]:
        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 1, 1, {"min.insync.replicas": "2"})])
            async with open_producer(
                bootstrap_servers=servers,
                client_id="retrying",
                metrics_listen="127.0.0.1:0",
                acks="all",
                linger_ms=50,
                retry_backoff_ms=20,
            ) as producer:
                futures = [await producer.send(topic, b"v%d" % i, partition=0) for i in range(5)]
                while producer.statistics().batch_retries < 2:
                    await anyio.sleep(0.02)
                await admin.alter_topic_configs({topic: {"min.insync.replicas": "1"}})
                for future in futures:
                    await future
                _, text = await anyio.to_thread.run_sync(scrape, producer.metrics_address)
                retries = producer.statistics().batch_retries
        got = samples(text)
        got["batches retried"] = retries
        return got

    async def timed_out() -> dict[Any, float]:
        async with open_producer(
            bootstrap_servers=servers,
            client_id="giving-up",
            metrics_listen="127.0.0.1:0",
            acks="all",
            linger_ms=50,
            retry_backoff_ms=20,
            request_timeout_ms=500,
            delivery_timeout_ms=1000,
        ) as producer:
            futures = [await producer.send(topic + "-strict", b"v", partition=0) for _ in range(3)]
            for future in futures:
                with pytest.raises(Exception):  # noqa: B017 (the kind is the client's)
                    await future
            _, text = await anyio.to_thread.run_sync(scrape, producer.metrics_address)
        return samples(text)

    async def main() -> tuple[dict[Any, float], dict[Any, float]]:
        with anyio.fail_after(60):
            first = await retried_then_written()
            async with open_admin(bootstrap_servers=servers) as admin:
                await admin.create_topics(
                    [NewTopic(topic + "-strict", 1, 1, {"min.insync.replicas": "2"})]
                )
            return first, await timed_out()

    first, second = anyio.run(main, backend="trio")
    base = "kafka_producer_producer_metrics"
    retrying = (("client_id", "retrying"),)
    assert first["batches retried"] >= 2
    assert first[(f"{base}_record_retry_total", retrying)] == 5 * first["batches retried"]
    assert first[(f"{base}_record_error_total", retrying)] == 0
    assert first[(f"{base}_record_send_total", retrying)] == 5
    giving_up = (("client_id", "giving-up"),)
    assert second[(f"{base}_record_error_total", giving_up)] == 3
    assert second[(f"{base}_record_send_total", giving_up)] == 0


def test_records_lag_max_is_unknown_until_a_lag_is_known(broker: RunningBroker) -> None:
    """records-lag-max is a maximum: with no partition's lag known (assigned,
    paused, nothing fetched) it is NaN, as Java's Max of no sample, not 0 (which
    would say "caught up"); once the records are read it is the lag, 0."""
    import math

    topic = fresh("lagmax")
    servers = broker.bootstrap_servers
    name = "kafka_consumer_consumer_fetch_manager_metrics_records_lag_max"
    key = (name, (("client_id", "lagging"),))

    async def main() -> tuple[float, float]:
        from trafka.sdk import TopicPartition

        async with open_admin(bootstrap_servers=servers) as admin:
            await admin.create_topics([NewTopic(topic, 1)])
        async with open_producer(bootstrap_servers=servers) as producer:
            for i in range(10):
                await producer.send(topic, b"v%d" % i, partition=0)
        tp = TopicPartition(topic, 0)
        async with open_consumer(
            bootstrap_servers=servers,
            client_id="lagging",
            auto_offset_reset="earliest",
            metrics_listen="127.0.0.1:0",
        ) as consumer:
            consumer.assign([tp])
            consumer.pause(tp)
            _, text = await anyio.to_thread.run_sync(scrape, consumer.metrics_address)
            unknown = samples(text)[key]
            consumer.resume(tp)
            got = 0
            with anyio.fail_after(30):
                while got < 10:
                    got += sum(len(r) for r in (await consumer.getmany(timeout_ms=500)).values())
            _, text = await anyio.to_thread.run_sync(scrape, consumer.metrics_address)
            return unknown, samples(text)[key]

    unknown, caught_up = anyio.run(main, backend="trio")
    assert math.isnan(unknown)
    assert caught_up == 0
