"""KIP-714 client metrics from the admin client, opt-in as Java's
KafkaAdminClient (``AdminClientConfig`` defaults ``enable.metrics.push`` to
false): off by default, nothing reaches a brokerlite that subscribes to its
metrics; on, the broker keeps its ``org.apache.kafka.admin.client.`` metrics
with its client id, the connection count adds up to what it did, the last push
is the terminating one (also when an admin call's error leaves the block); the
blocking Admin forwards ``client_instance_id``."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from sdk_brokers import fresh, received_pushes, telemetry_broker

from trafka.brokerlite import RunningBroker
from trafka.brokerlite.server import broker_in_thread
from trafka.codec.errors import KafkaError
from trafka.sdk import open_admin
from trafka.sdk.admin import Admin, NewTopic
from trafka.sdk.blocking import Admin as BlockingAdmin
from trafka.sdk.config import AdminConfig, ConsumerConfig, ProducerConfig
from trafka.sdk.errors import UsageError
from trafka.sdk.statistics import AdminStatistics, ApiStatistics
from trafka.sdk.telemetry import ADMIN_PREFIX, IntervalAverages, admin_samples

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]

CONNECTIONS = ADMIN_PREFIX + "connection.creation.total"
ADMIN_METRICS = (
    CONNECTIONS,
    ADMIN_PREFIX + "connection.creation.rate",
    ADMIN_PREFIX + "node.request.latency.avg",
    ADMIN_PREFIX + "node.request.latency.max",
)


# -- configuration and names, without a broker ------------------------------------------------


def test_only_the_admin_defaults_enable_metrics_push_to_false() -> None:
    assert AdminConfig().enable_metrics_push is False
    assert AdminConfig.from_dict({"enable.metrics.push": "true"}).enable_metrics_push is True
    assert AdminConfig(enable_metrics_push=True).enable_metrics_push is True
    assert ProducerConfig().enable_metrics_push is True
    assert ConsumerConfig().enable_metrics_push is True


def test_admin_samples_are_the_common_metrics_under_the_admin_prefix() -> None:
    api = ApiStatistics(requests=2, responses=2, latency_avg_ms=3.0, latency_max_ms=5.0)
    node = SimpleNamespace(connects=2, apis={"Metadata": api})  # the fields read
    stats = SimpleNamespace(brokers={1: node})
    samples = admin_samples(IntervalAverages(), stats, {1: ({3: 5.0}, 0)}, 10.0)
    by_name = {s.name: s for s in samples}
    assert set(by_name) == set(ADMIN_METRICS)
    assert (by_name[CONNECTIONS].kind, by_name[CONNECTIONS].value) == ("sum", 2)
    latency = by_name[ADMIN_PREFIX + "node.request.latency.avg"]
    assert (latency.value, latency.attributes) == (3.0, (("node_id", "node-1"),))
    assert by_name[ADMIN_PREFIX + "node.request.latency.max"].value == 5.0


# -- against brokerlite ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def pushes_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("telemetry-admin-pushes") / "pushes.jsonl"


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory, pushes_file: Path) -> Iterator[RunningBroker]:
    yield from telemetry_broker(tmp_path_factory, "telemetry-admin", pushes_file)


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


async def subscribe_metrics(admin: Admin, client_id: str) -> None:
    """A client-metrics resource asking ``client_id`` for every admin metric every 100 ms."""
    await admin.alter_client_metrics_configs(
        client_id,
        {
            "metrics": ADMIN_PREFIX,
            "interval.ms": "100",
            "match": f"client_id={client_id}",
        },
    )


async def subscribe(bootstrap: str, client_id: str) -> None:
    async with open_admin(bootstrap_servers=bootstrap) as admin:
        await subscribe_metrics(admin, client_id)


def total(pushes: list[dict[str, Any]], name: str) -> float:
    """A sum over every push (brokerlite asks for deltas: each push carries the change)."""
    return sum(
        point["value"]
        for push in pushes
        for metric in push["metrics"]
        if metric["name"] == name
        for point in metric["points"]
    )


async def wait_for_a_push(broker: RunningBroker, instance: uuid.UUID) -> None:
    while broker.broker.telemetry.latest(instance) is None:
        await anyio.sleep(0.02)


def telemetry_apis(stats: AdminStatistics) -> set[str]:
    sent = {name for b in stats.brokers.values() for name in b.apis}
    return sent & {"GetTelemetrySubscriptions", "PushTelemetry"}


@pytest.fixture
def lone_broker(tmp_path: Path) -> Iterator[RunningBroker]:
    """A brokerlite of the test's own: it must see no client instance at all."""
    with broker_in_thread(
        port=0, host="127.0.0.1", data_dir=tmp_path, client_telemetry_enabled=True
    ) as running:
        yield running


async def test_off_by_default_nothing_reaches_the_broker(lone_broker: RunningBroker) -> None:
    bs = lone_broker.bootstrap_servers
    client_id = fresh("admin-no-telemetry")
    with anyio.fail_after(30):
        # The cluster would take this admin's metrics: it subscribes itself.
        async with open_admin(bootstrap_servers=bs, client_id=client_id) as admin:
            await subscribe_metrics(admin, client_id)
            await admin.create_topics([NewTopic(fresh("admin-t"), 1)])
            await admin.list_topics()
            with pytest.raises(UsageError):
                await admin.client_instance_id(timeout_ms=0)
        stats = admin.statistics()
    assert stats.telemetry is None
    assert not telemetry_apis(stats)
    # No GetTelemetrySubscriptions reached the broker: it keeps no client instance.
    assert lone_broker.broker.telemetry.instance_count == 0
    assert lone_broker.broker.telemetry.pushes() == []


async def test_brokerlite_receives_the_admins_metrics(
    broker: RunningBroker, pushes_file: Path
) -> None:
    bs = broker.bootstrap_servers
    client_id = fresh("admin-telemetry")
    with anyio.fail_after(60):
        await subscribe(bs, client_id)
        async with open_admin(
            bootstrap_servers=bs, client_id=client_id, enable_metrics_push=True
        ) as admin:
            instance = await admin.client_instance_id(timeout_ms=10_000)
            assert instance is not None, admin.statistics().telemetry
            await admin.create_topics([NewTopic(fresh("admin-t"), 1)])
            await admin.describe_cluster()
            # one push at least while open; the terminating one comes on close
            await wait_for_a_push(broker, instance)
        stats = admin.statistics()
    telemetry = stats.telemetry
    assert telemetry is not None and telemetry.client_instance_id == instance
    assert telemetry.state == "terminated", telemetry
    assert telemetry.push_failures == 0, telemetry
    assert telemetry_apis(stats) == {"GetTelemetrySubscriptions", "PushTelemetry"}

    last = broker.broker.telemetry.latest(instance)
    assert last is not None and last.terminating
    assert last.client_id == client_id and last.client_software_name == "trafka"
    names = {m.name for m in last.metrics}
    assert set(ADMIN_METRICS) <= names, names
    assert all(n.startswith(ADMIN_PREFIX) for n in names), names
    # Java's admin maps no setting to a resource attribute (no client.rack given).
    assert all(not m.resource for m in last.metrics)

    pushes = received_pushes(pushes_file, instance)
    assert len(pushes) >= 2 and pushes[-1]["terminating"]
    assert not any(p["terminating"] for p in pushes[:-1])
    # What it did: the deltas add up to the connections the admin made.
    connects = sum(b.connects for b in stats.brokers.values())
    assert connects > 0
    assert total(pushes, CONNECTIONS) == connects


async def test_an_admin_calls_error_still_closes_with_the_terminating_push(
    broker: RunningBroker,
) -> None:
    bs = broker.bootstrap_servers
    client_id = fresh("admin-telemetry-error")
    topic = fresh("admin-t")
    instance: uuid.UUID | None = None
    with anyio.fail_after(60):
        await subscribe(bs, client_id)
        with pytest.raises(KafkaError):
            async with open_admin(
                bootstrap_servers=bs, client_id=client_id, enable_metrics_push=True
            ) as admin:
                instance = await admin.client_instance_id(timeout_ms=10_000)
                assert instance is not None
                await wait_for_a_push(broker, instance)
                await admin.create_topics([NewTopic(topic, 1)])
                await admin.create_topics([NewTopic(topic, 1)])  # TOPIC_ALREADY_EXISTS
    assert instance is not None
    last = broker.broker.telemetry.latest(instance)
    assert last is not None and last.terminating
    telemetry = admin.statistics().telemetry
    assert telemetry is not None and telemetry.state == "terminated", telemetry


def test_the_blocking_admin_forwards_client_instance_id(broker: RunningBroker) -> None:
    bs = broker.bootstrap_servers
    client_id = fresh("admin-telemetry-blocking")
    anyio.run(subscribe, bs, client_id, backend="trio")
    with BlockingAdmin(bootstrap_servers=bs, client_id=client_id) as off, pytest.raises(UsageError):
        off.client_instance_id(timeout_ms=0)
    admin = BlockingAdmin(
        bootstrap_servers=bs, client_id=client_id, enable_metrics_push=True, client_rack="r1"
    )
    try:
        instance = admin.client_instance_id(timeout_ms=10_000)
        assert isinstance(instance, uuid.UUID)
        telemetry = admin.statistics().telemetry
        assert telemetry is not None and telemetry.client_instance_id == instance
    finally:
        admin.close()
    last = broker.broker.telemetry.latest(instance)
    # The terminating push, with client.rack: the one resource attribute Java's
    # ClientTelemetryProvider gives an admin client.
    assert last is not None and last.terminating
    assert all(dict(m.resource) == {"client_rack": "r1"} for m in last.metrics)
