"""The whole path of ``make demo``: what users do with trafka, end to end, checked.

1. brokerlite, embedded (or, with ``--cluster``, three brokerlite nodes
   coordinated by a private ZooKeeper);
2. the proxy in front of it, the way services reach the cluster;
3. two services produce keyed orders through the proxy with different clients:
   trafka's SDK (Java's murmur2 partitioner) and confluent-kafka (librdkafka's
   default, CRC32, which would put most keys elsewhere). Checked: every key's
   orders are on one partition, murmur2's, whichever client sent them;
4. the ``billing`` consumer group reads the orders through the proxy and commits
   the first half of each partition, so lag remains;
5. the web console, talking to the cluster through the proxy like any Kafka
   client, shows the group's lag: the demo reads the group's page and checks
   the figure there (the same as the group left);
6. PySpark (``local[2]``) reads the topic into a DataFrame and prints orders and
   quantities per item; a short streaming query (``availableNow``) reads the
   same orders into a memory table. Checked: both count every order.

Each step says what it checked; :func:`whole_path` returns False at the first
check that fails. A step whose peer is not installed (confluent-kafka's service,
the console without ``trafka[console]``, Spark without ``trafka[spark]`` or
Java) is skipped, in one ``skipped:`` line saying why, and the checks count the
orders of the services that ran (see :mod:`trafka.tools._peers`).
"""

from __future__ import annotations

import json
import logging
import os
import re
import sys
import tempfile
import urllib.request
from collections import Counter
from collections.abc import Callable
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import trio

from trafka.brokerlite import serve_broker
from trafka.proxy import serve_proxy
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer
from trafka.sdk.partitioners import murmur2_partition
from trafka.tools._peers import java_missing, module_missing, skip

__all__ = ["whole_path"]

TOPIC = "shop-orders"
PARTITIONS = 6
GROUP = "billing"
CUSTOMERS = 40
ITEMS = ("tea", "cups", "kettle", "teapot", "strainer")
PER_SERVICE = 600

Say = Callable[[str], None]


def _order(i: int, service: str) -> tuple[bytes, bytes]:
    customer = f"customer-{(i * 7) % CUSTOMERS}"
    item = ITEMS[i % len(ITEMS)]
    value = {"service": service, "n": i, "item": item, "qty": 1 + i % 3}
    return customer.encode(), json.dumps(value).encode()


async def whole_path(say: Say, *, cluster: bool = False) -> bool:
    """Run the whole path; False when a check fails (said through ``say``)."""
    with tempfile.TemporaryDirectory(prefix="trafka-demo-") as tmp:
        async with AsyncExitStack() as stack:
            bootstrap = await _cluster(stack, Path(tmp), cluster, say)
            proxy = await stack.enter_async_context(
                serve_proxy(upstream=tuple(bootstrap.split(",")), port=0)
            )
            servers = proxy.bootstrap_servers
            say(f"proxy: {servers} in front of {bootstrap}, routing keys by murmur2")
            async with open_admin(bootstrap_servers=servers) as admin:
                await admin.create_topics([NewTopic(TOPIC, PARTITIONS, 3 if cluster else 1)])
            services = await _produce(servers, proxy, say)
            if not services:
                return False
            if not await _check_placement(bootstrap, services, say):
                return False
            lag = await _bill(servers, services, say)
            if not await _console(stack, servers, lag, say):
                return False
            return await trio.to_thread.run_sync(_spark, servers, services, Path(tmp), say)
    return False  # pragma: no cover - the context managers do not swallow errors


async def _cluster(stack: AsyncExitStack, tmp: Path, cluster: bool, say: Say) -> str:
    if not cluster:
        broker = await stack.enter_async_context(
            serve_broker(
                data_dir=tmp / "broker",
                port=0,
                host="127.0.0.1",
                group_initial_rebalance_delay_ms=0,
            )
        )
        say(f"brokerlite: {broker.bootstrap_servers} (embedded, one node)")
        return broker.bootstrap_servers
    from trafka.brokerlite.dev.local_cluster import serve_cluster
    from trafka.brokerlite.dev.zookeeper_server import ZooKeeperServer

    zookeeper = stack.enter_context(ZooKeeperServer(tmp / "zookeeper"))
    nodes = await stack.enter_async_context(
        serve_cluster(
            3,
            zookeeper_connect=zookeeper.connect_string,
            group_initial_rebalance_delay_ms=0,
        )
    )
    say(f"brokerlite cluster: {nodes.bootstrap_servers} (3 nodes, ZooKeeper mode)")
    return str(nodes.bootstrap_servers)


async def _produce(servers: str, proxy: Any, say: Say) -> int:
    """The services produce their orders through the proxy: how many services did
    (each sends ``PER_SERVICE`` orders), 0 when one failed."""
    async with open_producer(bootstrap_servers=servers, linger_ms=20) as producer:
        futures = []
        for i in range(PER_SERVICE):
            key, value = _order(i, "checkout")
            futures.append(await producer.send(TOPIC, value, key=key))
        await producer.flush()
        for future in futures:
            await future

    def confluent() -> int:
        import confluent_kafka

        failures: list[Any] = []
        producer = confluent_kafka.Producer(
            {
                "bootstrap.servers": servers,
                "linger.ms": 20,
                "enable.idempotence": True,
                # librdkafka's own lines (its INFO ones, such as telemetry's
                # GETSUBSCRIPTIONS) go through logging, not straight to stderr:
                # the demo shows its warnings and errors only.
                "logger": logging.getLogger("trafka.demo.librdkafka"),
            }
        )
        for i in range(PER_SERVICE):
            key, value = _order(i, "mobile")
            producer.produce(
                TOPIC,
                value=value,
                key=key,
                on_delivery=lambda err, _m: failures.append(err) if err else None,
            )
        producer.flush(60)
        return len(failures)

    missing = module_missing("confluent_kafka", "pip install confluent-kafka")
    if missing is not None:
        skip(say, "the confluent-kafka service", missing)
        say(f"services: {PER_SERVICE} orders from trafka's SDK (murmur2)")
        return 1
    failed = await trio.to_thread.run_sync(confluent)
    if failed:
        say(f"FAILED: confluent-kafka could not deliver {failed} orders")
        return 0
    moved = proxy.statistics.routing.records_moved
    say(
        f"services: {PER_SERVICE} orders from trafka's SDK (murmur2) and {PER_SERVICE} from "
        f"confluent-kafka (CRC32); the proxy moved {moved} records to their key's partition"
    )
    return 2


async def _check_placement(bootstrap: str, services: int, say: Say) -> bool:
    """Read the topic straight from the cluster: every key on murmur2's partition."""
    seen: dict[bytes, set[int]] = {}
    count = 0
    async with open_consumer(bootstrap_servers=bootstrap) as consumer:
        tps = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = await consumer.end_offsets(tps)
        with trio.fail_after(30):
            for tp in tps:
                while await consumer.position(tp) < ends[tp]:
                    for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                        for r in records:
                            seen.setdefault(r.key, set()).add(r.partition)
                            count += 1
    wrong = {k: parts for k, parts in seen.items() if parts != {murmur2_partition(k, PARTITIONS)}}
    if count != services * PER_SERVICE or wrong:
        say(f"FAILED: {count} orders in the topic, keys off their partition: {sorted(wrong)[:5]}")
        return False
    say(
        f"checked: all {count} orders in the topic; each of the {len(seen)} customers' orders "
        "on one partition, murmur2's, whichever client sent them"
    )
    return True


async def _bill(servers: str, services: int, say: Say) -> int:
    """The billing group reads every order and commits the first half of each
    partition (the rest is still to bill): returns the lag it leaves."""
    seen: Counter[int] = Counter()
    async with open_consumer(
        TOPIC,
        bootstrap_servers=servers,
        group_id=GROUP,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
    ) as consumer:
        with trio.fail_after(60):
            while sum(seen.values()) < services * PER_SERVICE:
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    seen[tp.partition] += len(records)
            billed = {TopicPartition(TOPIC, p): n // 2 for p, n in seen.items()}
            await consumer.commit(billed)
    lag = sum(seen.values()) - sum(billed.values())
    say(
        f"billing: the {GROUP!r} group read all {sum(seen.values())} orders through the proxy "
        f"and committed the first half of each partition ({sum(billed.values())}): lag {lag}"
    )
    return lag


async def _console(stack: AsyncExitStack, servers: str, expected: int, say: Say) -> bool:
    from trafka.console.server import ConsoleSettings, missing_dependencies, serve_console

    reason = missing_dependencies()
    if reason is not None:
        skip(say, "the console", reason)
        return True
    nursery = await stack.enter_async_context(trio.open_nursery())
    stack.callback(nursery.cancel_scope.cancel)
    host, port = await nursery.start(
        serve_console,
        ConsoleSettings({"bootstrap.servers": servers}, listen="127.0.0.1:0", sample_interval=1),
    )
    url = f"http://{host}:{port}/groups/{GROUP}"

    def lag_on_page() -> int | None:
        with urllib.request.urlopen(url, timeout=15) as page:
            html = page.read().decode()
        found = re.search(r'id="total-lag">([0-9][0-9,]*)<', html)
        return int(found.group(1).replace(",", "")) if found else None

    lag = await trio.to_thread.run_sync(lag_on_page)
    if lag != expected:
        say(f"FAILED: the console's page of {GROUP!r} shows a lag of {lag}")
        return False
    say(f"console: {url} shows the {GROUP!r} group's lag, {lag} orders")
    return True


def _spark(servers: str, services: int, tmp: Path, say: Say) -> bool:
    missing = module_missing("pyspark", "pip install 'trafka[spark]'") or java_missing()
    if missing is not None:
        skip(say, "Spark", missing)
        return True
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from trafka.spark import register

    spark = (
        SparkSession.builder.master("local[2]")
        .appName("trafka-demo")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.host", "127.0.0.1")
        .getOrCreate()
    )
    try:
        spark.sparkContext.setLogLevel("ERROR")
        register(spark)
        orders = (
            spark.read.format("trafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", TOPIC)
            .load()
            .selectExpr(
                "cast(key as string) as customer",
                "get_json_object(cast(value as string), '$.item') as item",
                "cast(get_json_object(cast(value as string), '$.qty') as int) as qty",
            )
        )
        per_item = orders.groupBy("item").agg({"*": "count", "qty": "sum"}).orderBy("item")
        rows = per_item.collect()
        say("spark (batch): orders and quantities per item")
        for row in rows:
            say(f"  {row['item']:<9} {row['count(1)']:>5} orders  {row['sum(qty)']:>5} items")
        expected = Counter(ITEMS[i % len(ITEMS)] for i in range(PER_SERVICE))
        got = {row["item"]: row["count(1)"] for row in rows}
        if got != {item: services * n for item, n in expected.items()}:
            say(f"FAILED: spark counted {got}")
            return False
        stream = (
            spark.readStream.format("trafka")
            .option("kafka.bootstrap.servers", servers)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .load()
            .selectExpr("cast(key as string) as customer")
            .writeStream.format("memory")
            .queryName("demo_orders")
            .option("checkpointLocation", str(tmp / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )
        stream.awaitTermination(120)
        if stream.exception() is not None:
            say(f"FAILED: the streaming query failed: {stream.exception()}")
            return False
        streamed = spark.sql("select count(*) as n, count(distinct customer) as c from demo_orders")
        row = streamed.collect()[0]
        if row["n"] != services * PER_SERVICE:
            say(f"FAILED: the streaming query read {row['n']} orders")
            return False
        say(f"spark (stream, availableNow): {row['n']} orders of {row['c']} customers")
        return True
    finally:
        spark.stop()
