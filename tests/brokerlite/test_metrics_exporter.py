"""brokerlite's metrics in the names Kafka dashboards query: the broker-wide
totals beside the per-topic counters, Kafka's request-time percentiles, the
controller's and the Log beans' gauges (named as the JMX exporter's Kafka rules
name them), and kafka_exporter's topic and consumer-group series. Each figure
is checked against where the data is: the offsets the brokers answer
ListOffsets with, the offsets the group committed, the records produced."""

from __future__ import annotations

import json
import re
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import trio
from prometheus_client.parser import text_string_to_metric_families

from trafka.brokerlite.server import serve_broker
from trafka.common.histograms import Histograms
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer

pytestmark = pytest.mark.timeout(90)

DASHBOARD = Path(__file__).parents[2] / "docs" / "grafana" / "brokerlite.json"

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def samples(text: str) -> Samples:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(address: tuple[str, int], path: str = "/metrics") -> str:
    with urllib.request.urlopen(f"http://{address[0]}:{address[1]}{path}", timeout=10) as r:
        return r.read().decode()


def series(found: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: v for (n, labels), v in found.items() if n == name}


def tp_labels(topic: str, partition: int) -> tuple[tuple[str, str], ...]:
    return (("partition", str(partition)), ("topic", topic))


async def exercised_broker(tmp_path: Path, check: Any, path: str = "/metrics") -> None:
    """A broker with a metrics listener, two topics written, a group that read
    part of one and committed; ``check(scraped_text, admin)`` runs then, on the
    text of ``path``."""
    with trio.fail_after(60):
        async with serve_broker(data_dir=tmp_path, port=0, metrics_listen="127.0.0.1:0") as running:
            assert running.metrics_address is not None
            bs = running.bootstrap_servers
            async with open_admin(bootstrap_servers=bs) as admin:
                await admin.create_topics([NewTopic("orders", 3), NewTopic("audit", 1)])
                async with open_producer(bootstrap_servers=bs) as producer:
                    for i in range(30):
                        await producer.send("orders", b"o%02d" % i, partition=i % 3)
                    for i in range(7):
                        await producer.send("audit", b"a%d" % i)
                await admin.delete_records({TopicPartition("orders", 0): 4})
                async with open_consumer(
                    bootstrap_servers=bs, group_id="billing", enable_auto_commit=False
                ) as consumer:
                    consumer.assign([TopicPartition("orders", p) for p in range(3)])
                    for p in range(3):
                        consumer.seek(TopicPartition("orders", p), 0 if p else 4)
                    await consumer.commit(
                        {TopicPartition("orders", 0): 6, TopicPartition("orders", 1): 10}
                    )
                text = await trio.to_thread.run_sync(scrape, running.metrics_address, path)
                await check(text, admin)


def test_exporter_series_say_where_the_data_is(tmp_path: Path) -> None:
    async def check(text: str, admin: Any) -> None:
        found = samples(text)
        # Broker-wide totals (topic=""), beside and equal to the topics' sum.
        for name in ("messagesin", "bytesin"):
            full = f"kafka_server_brokertopicmetrics_{name}_total"
            per_topic = series(found, full)
            total = per_topic.pop((("topic", ""),))
            assert total == sum(per_topic.values()) > 0
        assert found[("kafka_server_brokertopicmetrics_messagesin_total", (("topic", ""),))] == 37
        # The bounds the broker answers ListOffsets with.
        tps = [TopicPartition("orders", p) for p in range(3)] + [TopicPartition("audit", 0)]
        earliest = await admin.list_offsets(dict.fromkeys(tps, "earliest"))
        latest = await admin.list_offsets(dict.fromkeys(tps, "latest"))
        for tp in tps:
            labels = tp_labels(tp.topic, tp.partition)
            assert found[("kafka_topic_partition_current_offset", labels)] == latest[tp][0]
            assert found[("kafka_topic_partition_oldest_offset", labels)] == earliest[tp][0]
            assert found[("kafka_log_log_logendoffset", labels)] == latest[tp][0]
            assert found[("kafka_log_log_logstartoffset", labels)] == earliest[tp][0]
            assert found[("kafka_topic_partition_in_sync_replica", labels)] == 1
            assert found[("kafka_topic_partition_under_replicated_partition", labels)] == 0
        assert earliest[TopicPartition("orders", 0)][0] == 4  # delete_records moved it
        # The controller's view (a single node is its own controller).
        assert found[("kafka_brokers", ())] == 1
        topics = await admin.list_topics(include_internal=True)
        assert series(found, "kafka_topic_partitions") == {
            (("topic", t),): n for t, n in topics.items()
        }
        assert found[("kafka_controller_kafkacontroller_globalpartitioncount", ())] == sum(
            topics.values()
        )
        assert found[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 0
        # The group's committed offsets, as the group coordinator answers them.
        committed = await admin.list_consumer_group_offsets("billing")
        current = series(found, "kafka_consumergroup_current_offset")
        assert current == {
            (("consumergroup", "billing"), *tp_labels(tp.topic, tp.partition)): m
            for tp, m in committed.items()
        }
        assert len(current) == 2
        ends = {p: latest[TopicPartition("orders", p)][0] for p in range(3)}
        assert found[
            ("kafka_consumergroup_lag_sum", (("consumergroup", "billing"), ("topic", "orders")))
        ] == (ends[0] - 6) + (ends[1] - 10)
        # Request times in ms at Kafka's percentiles, ordered as percentiles are.
        produce_ms = [
            found[
                (
                    "kafka_network_requestmetrics_totaltimems",
                    (("quantile", q), ("request", "Produce")),
                )
            ]
            for q in ("0.50", "0.75", "0.95", "0.98", "0.99", "0.999")
        ]
        assert produce_ms == sorted(produce_ms) and produce_ms[0] > 0
        # The loop's idle share, Kafka's two idle ratios (one loop does both jobs).
        for name in (
            "kafka_network_socketserver_networkprocessoravgidlepercent",
            "kafka_server_kafkarequesthandlerpool_requesthandleravgidlepercent",
        ):
            assert 0.0 <= found[(name, ())] <= 1.0
        # A single node follows nothing: its fetcher lag is 0, with no partition.
        assert found[("kafka_server_replicafetchermanager_maxlag", (("clientid", "Replica"),))] == 0
        assert series(found, "kafka_server_fetcherlagmetrics_consumerlag") == {}

    trio.run(exercised_broker, tmp_path, check)


def test_a_single_nodes_cluster_page_is_its_own_groups(tmp_path: Path) -> None:
    # /metrics/cluster of a single node: its groups (it coordinates them all)
    # and its offline partitions, read locally, and nothing else of /metrics.
    async def check(text: str, admin: Any) -> None:
        found = samples(text)
        committed = await admin.list_consumer_group_offsets("billing")
        latest = await admin.list_offsets({TopicPartition("orders", p): "latest" for p in range(3)})
        assert series(found, "kafka_consumergroup_current_offset") == {
            (("consumergroup", "billing"), *tp_labels(tp.topic, tp.partition)): m
            for tp, m in committed.items()
        }
        assert series(found, "kafka_consumergroup_lag") == {
            (("consumergroup", "billing"), *tp_labels(tp.topic, tp.partition)): latest[tp][0] - m
            for tp, m in committed.items()
        }
        assert found[("kafka_controller_kafkacontroller_offlinepartitionscount", ())] == 0
        assert {name for name, _ in found} == {
            "kafka_consumergroup_lag",
            "kafka_consumergroup_current_offset",
            "kafka_consumergroup_lag_sum",
            "kafka_consumergroup_members",
            "kafka_controller_kafkacontroller_offlinepartitionscount",
        }
        # The group's consumer has left: no members.
        assert series(found, "kafka_consumergroup_members") == {(("consumergroup", "billing"),): 0}

    trio.run(exercised_broker, tmp_path, check, "/metrics/cluster")


def test_members_of_a_live_group_are_counted(tmp_path: Path) -> None:
    async def main() -> None:
        with trio.fail_after(60):
            async with serve_broker(
                data_dir=tmp_path, port=0, metrics_listen="127.0.0.1:0",
                group_initial_rebalance_delay_ms=0,
            ) as running:  # fmt: skip
                assert running.metrics_address is not None
                bs = running.bootstrap_servers
                async with open_admin(bootstrap_servers=bs) as admin:
                    await admin.create_topics([NewTopic("jobs", 2)])
                async with (
                    open_consumer("jobs", bootstrap_servers=bs, group_id="pool") as one,
                    open_consumer("jobs", bootstrap_servers=bs, group_id="pool") as two,
                ):
                    while len(one.assignment()) + len(two.assignment()) < 2:
                        await one.getmany(timeout_ms=50)
                        await two.getmany(timeout_ms=50)
                    for path in ("/metrics", "/metrics/cluster"):
                        text = await trio.to_thread.run_sync(scrape, running.metrics_address, path)
                        found = samples(text)
                        members = ("kafka_consumergroup_members", (("consumergroup", "pool"),))
                        assert found[members] == 2
                    async with open_admin(bootstrap_servers=bs) as admin:
                        described = await admin.describe_groups(["pool"])
                    assert len(described["pool"].members) == 2

    trio.run(main)


def test_quantiles_follow_prometheus_histogram_quantile() -> None:
    # histogram_quantile's estimate: linear within the bucket the rank falls in.
    h = Histograms((0.001, 0.01, 0.1))
    assert h.quantile("k", 0.5) is None
    for seconds in (0.0005, 0.0005, 0.005, 0.05):
        h.observe("k", seconds)
    assert h.quantile("k", 0.5) == pytest.approx(0.001)  # rank 2: the top of bucket 1
    assert h.quantile("k", 0.75) == pytest.approx(0.01)  # rank 3: the top of bucket 2
    assert h.quantile("k", 0.625) == pytest.approx(0.001 + 0.009 * 0.5)
    h.observe("k", 5.0)  # above every bound: the top finite bound, as Prometheus
    assert h.quantile("k", 0.999) == pytest.approx(0.1)


# -- the Grafana dashboard ----------------------------------------------------------------------

_PROMQL_WORDS = {
    "sum", "rate", "irate", "increase", "by", "without", "max", "min", "avg", "count",
    "topk", "bottomk", "histogram_quantile", "le", "on", "ignoring", "group_left",
    "group_right", "and", "or", "unless", "offset", "clamp_min", "clamp_max", "abs",
    "delta", "deriv", "time", "vector", "scalar", "label_replace", "sort_desc",
}  # fmt: skip


def dashboard_metrics() -> set[str]:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in board["panels"] for t in panel.get("targets", ())]
    assert exprs, "the dashboard has no queries"
    names = set()
    for expr in exprs:
        bare = re.sub(r'"[^"]*"', "", re.sub(r"\{[^}]*\}", "", expr))
        bare = re.sub(r"\[[^\]]*\]", "", bare)
        for word in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", bare):
            if word not in _PROMQL_WORDS and word.startswith("kafka_"):
                names.add(word)
    return names


def test_every_dashboard_query_reads_a_series_the_broker_serves(tmp_path: Path) -> None:
    async def check(text: str, admin: Any) -> None:
        served = {name for name, _labels in samples(text)}
        used = dashboard_metrics()
        assert len(used) >= 10
        assert sorted(used - served) == []

    trio.run(exercised_broker, tmp_path, check)
