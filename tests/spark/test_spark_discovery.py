"""The data source with ``kafka.bootstrap.servers=zeroconf:...``: the driver finds
the broker on the local network once, and every task uses what it found."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from spark_helpers import consume_all, create, fresh, produce

from trafka.brokerlite import RunningBroker, broker_in_thread
from trafka.sdk.errors import ConfigError, NoBrokersAvailableError
from trafka.spark._kafka import pin_bootstrap

pytestmark = pytest.mark.timeout(240)

CLUSTER = f"zc-spark-{uuid.uuid4().hex[:12]}"
SPEC = f"zeroconf:cluster={CLUSTER}&timeout_ms=10000"


@pytest.fixture(scope="module")
def announced(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningBroker]:
    data: Path = tmp_path_factory.mktemp("spark-zeroconf")
    with broker_in_thread(
        port=0, data_dir=data, cluster_id=CLUSTER, announce=True, group_initial_rebalance_delay_ms=0
    ) as running:
        yield running


def test_a_read_and_a_write_find_the_broker_by_zeroconf(
    spark: Any, announced: RunningBroker
) -> None:
    source, sink = fresh("zc-in"), fresh("zc-out")
    create(announced, source, 2)
    produce(announced, source, [(b"k%d" % i, b"v%d" % i, None) for i in range(50)])
    df = (
        spark.read.format("trafka")
        .option("kafka.bootstrap.servers", SPEC)
        .option("subscribe", source)
        .load()
    )
    rows = df.select("key", "value").collect()
    assert sorted(bytes(r.value) for r in rows) == sorted(b"v%d" % i for i in range(50))
    df.select("key", "value").write.format("trafka").option("kafka.bootstrap.servers", SPEC).option(
        "topic", sink
    ).mode("append").save()
    assert sorted(r.value for r in consume_all(announced, sink, 1)) == sorted(
        b"v%d" % i for i in range(50)
    )


def test_the_driver_pins_discovered_addresses_once(announced: RunningBroker) -> None:
    pinned = pin_bootstrap({"bootstrap.servers": f"{SPEC},10.0.0.9:9092", "client.id": "x"})
    assert pinned == {
        "bootstrap.servers": f"{announced.bootstrap_servers},10.0.0.9:9092",
        "client.id": "x",
    }
    static = {"bootstrap.servers": "h:1"}
    assert pin_bootstrap(static) == static
    with pytest.raises(NoBrokersAvailableError, match="found no SSL Kafka service"):
        pin_bootstrap(
            {"bootstrap.servers": SPEC.replace("10000", "500"), "security.protocol": "ssl"}
        )
    with pytest.raises(ConfigError, match="unknown key 'clustr'"):
        pin_bootstrap({"bootstrap.servers": "zeroconf:clustr=a"})
