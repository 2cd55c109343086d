"""brokerlite's Prometheus endpoint, scraped over HTTP and read with
prometheus_client's own text parser: the counters move as records flow, the
gauges describe the partitions, and the health endpoints answer."""

from __future__ import annotations

import urllib.error
import urllib.request
from typing import Any

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from trafka.brokerlite.server import serve_broker
from trafka.sdk import NewTopic, open_admin, open_consumer, open_producer

pytestmark = pytest.mark.timeout(60)


def get(address: tuple[str, int], path: str) -> tuple[int, str]:
    url = f"http://{address[0]}:{address[1]}{path}"
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def test_metrics_move_as_records_flow(tmp_path: Any) -> None:
    async def main() -> None:
        with trio.fail_after(45):
            async with serve_broker(
                data_dir=tmp_path, port=0, metrics_listen="127.0.0.1:0"
            ) as running:
                where = running.metrics_address
                assert where is not None
                bs = running.bootstrap_servers
                async with open_admin(bootstrap_servers=bs) as admin:
                    await admin.create_topics([NewTopic("metered", 2)])
                async with open_producer(bootstrap_servers=bs) as producer:
                    for i in range(50):
                        await producer.send("metered", b"v%03d" % i, partition=i % 2)
                status, first = await trio.to_thread.run_sync(get, where, "/metrics")
                assert status == 200
                before = samples(first)
                topic = (("topic", "metered"),)
                assert before[("kafka_server_brokertopicmetrics_messagesin_total", topic)] == 50
                assert before[("kafka_server_brokertopicmetrics_bytesin_total", topic)] > 50 * 4
                assert before[("kafka_server_replicamanager_partitioncount", ())] == 2
                assert before[("kafka_server_replicamanager_leadercount", ())] == 2
                assert before[("kafka_controller_kafkacontroller_activecontrollercount", ())] == 1
                sizes = [
                    before[("kafka_log_log_size", (("partition", str(p)), ("topic", "metered")))]
                    for p in (0, 1)
                ]
                assert all(size > 0 for size in sizes)
                produce = (("request", "Produce"),)
                assert before[("kafka_network_requestmetrics_requests_total", produce)] >= 1
                assert (
                    before[("kafka_network_requestmetrics_totaltime_seconds_count", produce)]
                    == before[("kafka_network_requestmetrics_requests_total", produce)]
                )
                async with open_consumer(
                    "metered", bootstrap_servers=bs, auto_offset_reset="earliest", group_id="m"
                ) as consumer:
                    got = 0
                    while got < 50:
                        for records in (await consumer.getmany(timeout_ms=5000)).values():
                            got += len(records)
                _, second = await trio.to_thread.run_sync(get, where, "/metrics")
                after = samples(second)
                # Every batch of both partitions went out at least once.
                out = after[("kafka_server_brokertopicmetrics_bytesout_total", topic)]
                assert out >= sum(sizes), (out, sizes)
                fetch = (("request", "Fetch"),)
                assert after[("kafka_network_requestmetrics_requests_total", fetch)] >= 1
                assert await trio.to_thread.run_sync(get, where, "/healthz") == (200, "ok\n")
                assert (await trio.to_thread.run_sync(get, where, "/readyz"))[0] == 200
                assert (await trio.to_thread.run_sync(get, where, "/nope"))[0] == 404
                # The group committed all 50 when it closed; 10 more make its lag.
                async with open_producer(bootstrap_servers=bs) as producer:
                    for i in range(10):
                        await producer.send("metered", b"w%03d" % i, partition=i % 2)
                _, third = await trio.to_thread.run_sync(get, where, "/metrics")
                lag = {
                    labels: value
                    for (name, labels), value in samples(third).items()
                    if name == "kafka_consumergroup_lag"
                }
                assert lag == {
                    (("consumergroup", "m"), ("partition", "0"), ("topic", "metered")): 5,
                    (("consumergroup", "m"), ("partition", "1"), ("topic", "metered")): 5,
                }

    trio.run(main)


def test_purgatory_size_counts_the_fetches_waiting(tmp_path: Any) -> None:
    """A consumer long-polling an empty partition is one Fetch in the purgatory
    while it waits, none once answered."""
    from trafka.sdk import TopicPartition

    async def main() -> None:
        with trio.fail_after(45):
            async with serve_broker(
                data_dir=tmp_path, port=0, metrics_listen="127.0.0.1:0"
            ) as running:
                where = running.metrics_address
                assert where is not None
                bs = running.bootstrap_servers
                async with open_admin(bootstrap_servers=bs) as admin:
                    await admin.create_topics([NewTopic("quiet", 1)])
                name = "kafka_server_delayedoperationpurgatory_purgatorysize"
                fetch = (("delayedoperation", "Fetch"),)
                _, idle = await trio.to_thread.run_sync(get, where, "/metrics")
                assert samples(idle)[(name, fetch)] == 0
                assert samples(idle)[(name, (("delayedoperation", "Produce"),))] == 0
                async with open_consumer(bootstrap_servers=bs, fetch_max_wait_ms=4000) as consumer:
                    consumer.assign([TopicPartition("quiet", 0)])
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(lambda: consumer.getmany(timeout_ms=3000))
                        waiting = 0.0
                        with trio.fail_after(10):
                            while not waiting:
                                await trio.sleep(0.1)
                                _, text = await trio.to_thread.run_sync(get, where, "/metrics")
                                waiting = samples(text)[(name, fetch)]
                        assert waiting == 1

    trio.run(main)


def test_failed_fetches_count_what_kafka_counts() -> None:
    """A partition answered with an unexpected error (a corrupt batch) is a failed
    fetch of its topic; the errors Kafka expects (out of range, not the leader)
    are not."""
    from types import SimpleNamespace

    from trafka.brokerlite.metrics import BrokerMetrics
    from trafka.codec.errors import ErrorCode

    def answer(*codes: int) -> Any:
        parts = [SimpleNamespace(error_code=c, size=0) for c in codes]
        return SimpleNamespace(topics=[SimpleNamespace(name="t", partitions=parts)])

    metrics = BrokerMetrics()
    metrics.fetch_answered(
        answer(ErrorCode.NONE, ErrorCode.OFFSET_OUT_OF_RANGE, ErrorCode.NOT_LEADER_OR_FOLLOWER)
    )
    assert metrics.failed_fetch == {}
    metrics.fetch_answered(answer(ErrorCode.CORRUPT_MESSAGE, ErrorCode.NONE))
    assert metrics.failed_fetch == {"t": 1}
    text = metrics.exposition().decode()
    assert (
        samples(text)[
            ("kafka_server_brokertopicmetrics_failedfetchrequests_total", (("topic", "t"),))
        ]
        == 1
    )
