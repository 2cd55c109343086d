"""Client metrics push (KIP-714): the state machine with a fake clock, then the
producer and consumer against a scripted fake broker."""

from __future__ import annotations

import math
import random
import uuid
from types import SimpleNamespace
from typing import Any

import anyio
import pytest
from sdk_fakebroker import FakeBroker, serving

from trafka.codec import ErrorCode, UnsupportedVersionError
from trafka.codec.compression import decompress
from trafka.codec.messages import k71_get_telemetry_subscriptions as k71
from trafka.codec.messages import k72_push_telemetry as k72
from trafka.codec.otlp import CUMULATIVE, DELTA, Metric, decode_metrics
from trafka.sdk import open_consumer, open_producer
from trafka.sdk.errors import KafkaConnectionError, UsageError
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.membership import RebalanceLatency
from trafka.sdk.telemetry import (
    DEFAULT_PUSH_INTERVAL,
    ClientTelemetry,
    IntervalAverages,
    MetricSample,
    TelemetryState,
    consumer_samples,
)

pytestmark = pytest.mark.anyio

INSTANCE = uuid.UUID("12345678-1234-5678-1234-567812345678")


def subscription(**kw: Any) -> Any:
    fields: dict[str, Any] = {
        "client_instance_id": INSTANCE,
        "subscription_id": 7,
        "accepted_compression_types": [4, 3, 1, 2],
        "push_interval_ms": 10_000,
        "telemetry_max_bytes": 1 << 20,
        "delta_temporality": False,
        "requested_metrics": ["org.apache.kafka."],
    }
    fields.update(kw)
    return k71.Response(**fields)


class Clock:
    def __init__(self) -> None:
        self.ns = 1_000_000_000_000

    def __call__(self) -> int:
        return self.ns


SAMPLES = [
    MetricSample("org.apache.kafka.producer.connection.creation.total", "sum", 3),
    MetricSample("org.apache.kafka.producer.record.queue.time.avg", "gauge", 1.5),
    MetricSample(
        "org.apache.kafka.producer.node.request.latency.max", "gauge", 4.0, (("node_id", "node-0"),)
    ),
]


def machine(samples: list[MetricSample] | None = None, **kw: Any) -> ClientTelemetry:
    return ClientTelemetry(rng=random.Random(5), wall_clock=Clock(), **kw)


def subscribed(m: ClientTelemetry, now: float = 0.0, **kw: Any) -> None:
    api_key, _body = m.create_request(now, list) or (0, None)
    assert api_key == 71
    m.handle_subscriptions(now, subscription(**kw))


def push(m: ClientTelemetry, now: float, samples: list[MetricSample] = SAMPLES) -> Any:
    request = m.create_request(now, lambda: samples)
    assert request is not None and request[0] == 72
    return request[1]


def metrics_of(body: Any) -> dict[str, Metric]:
    data = decompress(body.compression_type, body.metrics)
    return {m.name: m for m in decode_metrics(data)}


# -- the state machine ---------------------------------------------------------------


def test_first_request_asks_for_a_subscription_with_the_zero_uuid_at_once() -> None:
    m = machine()
    assert m.time_to_next_update(0.0, 30.0) == 0
    api_key, body = m.create_request(0.0, list) or (0, None)
    assert (api_key, body.client_instance_id) == (71, uuid.UUID(int=0))
    assert m.state is TelemetryState.SUBSCRIPTION_IN_PROGRESS
    assert m.time_to_next_update(0.0, 30.0) == 30.0  # the request's timeout
    assert m.create_request(0.0, list) is None  # one request at a time


def test_first_push_waits_a_random_half_to_one_and_a_half_intervals() -> None:
    m = machine()
    subscribed(m, now=100.0)
    assert m.state is TelemetryState.PUSH_NEEDED
    assert m.client_instance_id == INSTANCE
    expected = round(random.Random(5).uniform(0.5, 1.5) * 10.0, 3)
    assert m.time_to_next_update(100.0, 30.0) == pytest.approx(expected)
    push(m, 100.0 + expected)
    m.handle_push(200.0, k72.Response())
    # Later pushes: one push interval after the last answer.
    assert m.time_to_next_update(200.0, 30.0) == 10.0
    assert m.pushes == 1


def test_push_carries_the_subscription_and_the_preferred_compression() -> None:
    m = machine(resource={"client_rack": "r1"})
    subscribed(m, accepted_compression_types=[3, 4])  # the broker's order wins
    body = push(m, 20.0)
    assert (body.client_instance_id, body.subscription_id, body.terminating) == (INSTANCE, 7, False)
    assert body.compression_type == 3
    metrics = metrics_of(body)
    total = metrics["org.apache.kafka.producer.connection.creation.total"]
    assert total.kind == "sum" and total.monotonic and total.temporality == CUMULATIVE
    assert total.points[0].value == 3 and total.resource == {"client_rack": "r1"}
    latency = metrics["org.apache.kafka.producer.node.request.latency.max"]
    assert latency.points[0].attributes == {"node_id": "node-0"}


def test_no_accepted_compression_sends_it_uncompressed() -> None:
    m = machine()
    subscribed(m, accepted_compression_types=[])
    assert push(m, 20.0).compression_type == 0


@pytest.mark.parametrize(
    ("requested", "names"),
    [
        (
            ["org.apache.kafka.producer.node"],
            {"org.apache.kafka.producer.node.request.latency.max"},
        ),
        (["*"], {s.name for s in SAMPLES}),
        ([""], {s.name for s in SAMPLES}),
        (
            ["org.apache.kafka.producer.record", "org.apache.kafka.producer.conn"],
            {
                "org.apache.kafka.producer.record.queue.time.avg",
                "org.apache.kafka.producer.connection.creation.total",
            },
        ),
    ],
)
def test_requested_metrics_are_prefixes(requested: list[str], names: set[str]) -> None:
    m = machine()
    subscribed(m, requested_metrics=requested)
    assert set(metrics_of(push(m, 20.0))) == names


def test_no_requested_metrics_means_no_push_and_asking_again_after_the_interval() -> None:
    m = machine()
    subscribed(m, requested_metrics=[])
    assert m.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert m.subscription is not None  # the instance id is known all the same
    assert m.time_to_next_update(0.0, 30.0) == 10.0
    api_key, body = m.create_request(10.0, list) or (0, None)
    assert (api_key, body.client_instance_id) == (71, INSTANCE)


def test_a_push_interval_of_zero_becomes_five_minutes() -> None:
    m = machine()
    subscribed(m, push_interval_ms=0)
    assert m.subscription is not None and m.subscription.push_interval == DEFAULT_PUSH_INTERVAL


def test_unknown_subscription_id_asks_for_the_subscription_again_at_once() -> None:
    m = machine()
    subscribed(m)
    push(m, 20.0)
    m.handle_push(20.0, k72.Response(error_code=ErrorCode.UNKNOWN_SUBSCRIPTION_ID))
    assert m.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert m.time_to_next_update(20.0, 30.0) == 0
    api_key, body = m.create_request(20.0, list) or (0, None)
    assert (api_key, body.client_instance_id) == (71, INSTANCE)
    assert (m.push_failures, m.last_error) == (1, "UNKNOWN_SUBSCRIPTION_ID")


@pytest.mark.parametrize(
    ("code", "wait"),
    [
        (ErrorCode.UNSUPPORTED_COMPRESSION_TYPE, 0.0),
        (ErrorCode.THROTTLING_QUOTA_EXCEEDED, 10.0),
        (ErrorCode.TELEMETRY_TOO_LARGE, 10.0),
        (ErrorCode.INVALID_REQUEST, math.inf),
        (ErrorCode.INVALID_RECORD, math.inf),
        (ErrorCode.UNSUPPORTED_VERSION, math.inf),
        (ErrorCode.UNKNOWN_SERVER_ERROR, math.inf),
    ],
)
def test_push_errors_as_java(code: ErrorCode, wait: float) -> None:
    m = machine()
    subscribed(m)
    push(m, 20.0)
    m.handle_push(20.0, k72.Response(error_code=code))
    assert m.time_to_next_update(20.0, 30.0) == wait
    assert m.enabled is (wait != math.inf)


def test_subscription_errors_before_any_subscription_wait_the_default_interval() -> None:
    m = machine()
    m.create_request(0.0, list)
    m.handle_subscriptions(0.0, subscription(error_code=ErrorCode.THROTTLING_QUOTA_EXCEEDED))
    assert m.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert m.time_to_next_update(0.0, 30.0) == DEFAULT_PUSH_INTERVAL


@pytest.mark.parametrize(
    ("error", "wait"),
    [
        (None, DEFAULT_PUSH_INTERVAL),
        (KafkaConnectionError("lost"), DEFAULT_PUSH_INTERVAL),
        (UnsupportedVersionError("no API 72"), math.inf),
    ],
)
def test_requests_without_an_answer(error: BaseException | None, wait: float) -> None:
    m = machine()
    subscribed(m)
    push(m, 20.0)
    m.request_failed(20.0, 72, error)
    assert m.time_to_next_update(20.0, 30.0) == wait
    if wait < math.inf:
        assert m.state is TelemetryState.SUBSCRIPTION_NEEDED


def test_delta_temporality_pushes_the_change_since_the_last_push() -> None:
    m = machine()
    subscribed(m, delta_temporality=True)
    first = metrics_of(push(m, 20.0))["org.apache.kafka.producer.connection.creation.total"]
    m.handle_push(20.0, k72.Response())
    clock = m._wall
    assert isinstance(clock, Clock)
    clock.ns += 5_000_000_000
    later = [MetricSample("org.apache.kafka.producer.connection.creation.total", "sum", 5)]
    second = metrics_of(push(m, 30.0, later))["org.apache.kafka.producer.connection.creation.total"]
    assert first.temporality == second.temporality == DELTA
    assert (first.points[0].value, second.points[0].value) == (3, 2)
    assert second.points[0].start_time_unix_nano == first.points[0].time_unix_nano


def test_cumulative_sums_start_when_the_client_started() -> None:
    m = machine()
    start = m._wall()
    subscribed(m)
    point = metrics_of(push(m, 20.0))["org.apache.kafka.producer.connection.creation.total"]
    assert point.points[0].start_time_unix_nano == start


def test_a_change_of_temporality_starts_the_deltas_afresh() -> None:
    m = machine()
    subscribed(m, delta_temporality=True)
    push(m, 20.0)
    m.handle_push(20.0, k72.Response(error_code=ErrorCode.UNKNOWN_SUBSCRIPTION_ID))
    m.create_request(20.0, list)
    m.handle_subscriptions(20.0, subscription(delta_temporality=False))
    m.create_request(20.0, list)
    m.handle_subscriptions(20.0, subscription(delta_temporality=True))
    body = push(m, 40.0)
    assert (
        metrics_of(body)["org.apache.kafka.producer.connection.creation.total"].points[0].value == 3
    )


def test_a_push_over_the_brokers_limit_is_not_sent() -> None:
    m = machine()
    subscribed(m, telemetry_max_bytes=10, accepted_compression_types=[])
    assert m.create_request(20.0, lambda: SAMPLES) is None
    assert m.state is TelemetryState.SUBSCRIPTION_NEEDED
    assert m.time_to_next_update(20.0, 30.0) == 10.0
    assert m.last_error == "TELEMETRY_TOO_LARGE"


def test_close_sends_one_terminating_push() -> None:
    m = machine()
    subscribed(m)
    assert m.initiate_close()
    assert m.time_to_next_update(0.0, 30.0) == 0
    body = push(m, 0.0)
    assert body.terminating
    assert not m.initiate_close()  # once
    m.handle_push(0.0, k72.Response())
    assert m.state is TelemetryState.TERMINATED
    assert m.time_to_next_update(0.0, 30.0) == math.inf
    assert m.create_request(0.0, list) is None


def test_close_before_any_subscription_pushes_nothing() -> None:
    m = machine()
    assert not m.initiate_close()
    m.create_request(0.0, list)
    m.handle_subscriptions(0.0, subscription(error_code=ErrorCode.UNKNOWN_SERVER_ERROR))
    assert not m.initiate_close()
    m.close()
    assert m.state is TelemetryState.TERMINATED


def test_a_subscription_answered_after_close_began_is_ignored() -> None:
    m = machine()
    subscribed(m)
    push(m, 20.0)
    m.handle_push(20.0, k72.Response(error_code=ErrorCode.UNKNOWN_SUBSCRIPTION_ID))
    m.create_request(20.0, list)
    assert m.initiate_close()
    m.handle_subscriptions(20.0, subscription(subscription_id=8))
    assert m.state is TelemetryState.TERMINATING_PUSH_NEEDED
    assert m.subscription is not None and m.subscription.subscription_id == 7


def test_an_answer_in_the_wrong_state_disables_telemetry() -> None:
    m = machine()
    m.handle_push(0.0, k72.Response())  # no push was sent
    assert not m.enabled and m.time_to_next_update(0.0, 30.0) == math.inf


# -- against a scripted broker -------------------------------------------------------------


class TelemetryBroker(FakeBroker):
    """Serves GetTelemetrySubscriptions and PushTelemetry and records the pushes."""

    def __init__(self, *, push_errors: list[int] | None = None, **kw: Any) -> None:
        super().__init__(**kw)
        self.pushes: list[Any] = []
        self.subscription_requests: list[Any] = []
        self.push_errors = list(push_errors or [])
        self.subscription_id = 1
        self.handlers[71] = self.get_subscriptions
        self.handlers[72] = self.push

    def get_subscriptions(self, header: Any, body: Any) -> Any:
        self.subscription_requests.append(body)
        return subscription(
            push_interval_ms=40,
            subscription_id=self.subscription_id,
            accepted_compression_types=[4, 3, 1, 2],
            requested_metrics=["org.apache.kafka."],
        )

    def push(self, header: Any, body: Any) -> Any:
        if self.push_errors:
            self.subscription_id += 1
            return k72.Response(error_code=self.push_errors.pop(0))
        self.pushes.append(body)
        return k72.Response()

    async def wait_pushes(self, n: int) -> None:
        while len(self.pushes) < n:
            await anyio.sleep(0.01)


class OldBroker(FakeBroker):
    """A broker that does not speak KIP-714."""

    def api_versions(self, header: Any, body: Any) -> Any:
        answer = super().api_versions(header, body)
        keep = [k for k in answer.api_keys if k.api_key not in (71, 72)]
        return type(answer)(api_keys=keep)


def decoded(body: Any) -> dict[str, Metric]:
    return metrics_of(body)


async def test_the_producer_pushes_what_it_did_and_a_terminating_push_on_close() -> None:
    with anyio.fail_after(20):
        async with serving(TelemetryBroker(topics={"t": 2})) as broker:
            async with open_producer(
                bootstrap_servers=broker.bootstrap,
                client_rack="rack-a",
                transactional_id=None,
                linger_ms=0,
            ) as producer:
                assert await producer.client_instance_id(timeout_ms=5000) == INSTANCE
                for i in range(5):
                    await producer.send_and_wait("t", b"v%d" % i, partition=i % 2)
                await broker.wait_pushes(1)
                stats = producer.statistics()
            last = broker.pushes[-1]
            assert last.terminating
            assert not any(p.terminating for p in broker.pushes[:-1])
            assert {p.subscription_id for p in broker.pushes} == {1}
            metrics = decoded(last)
            prefix = "org.apache.kafka.producer."
            total = metrics[prefix + "connection.creation.total"]
            assert total.points[0].value == broker.connections
            assert total.resource == {"client_rack": "rack-a"}
            assert total.temporality == CUMULATIVE
            nodes = {
                p.attributes["node_id"] for p in metrics[prefix + "node.request.latency.avg"].points
            }
            assert "node-0" in nodes
            for name in (
                "connection.creation.rate",
                "node.request.latency.max",
                "produce.throttle.time.avg",
                "produce.throttle.time.max",
                "record.queue.time.avg",
                "record.queue.time.max",
                "request.latency.avg",
                "request.latency.max",
            ):
                assert prefix + name in metrics
            telemetry = stats.telemetry
            assert telemetry is not None and telemetry.client_instance_id == INSTANCE
            assert telemetry.subscriptions == 1 and telemetry.pushes >= 1
            assert broker.subscription_requests[0].client_instance_id == uuid.UUID(int=0)


async def test_the_produce_latency_of_a_push_covers_the_records_sent() -> None:
    with anyio.fail_after(20):
        async with serving(TelemetryBroker(topics={"t": 1})) as broker:
            async with open_producer(bootstrap_servers=broker.bootstrap, linger_ms=0) as producer:
                await producer.client_instance_id(timeout_ms=5000)
                await producer.send_and_wait("t", b"x")
                n = len(broker.pushes)
                await broker.wait_pushes(n + 1)
            # Over the whole run, some push saw the Produce request's latency.
            maxima = [
                decoded(p)["org.apache.kafka.producer.request.latency.max"].points[0].value
                for p in broker.pushes
            ]
            assert any(v > 0 for v in maxima)


async def test_unknown_subscription_id_subscribes_again() -> None:
    with anyio.fail_after(20):
        broker = TelemetryBroker(topics={"t": 1}, push_errors=[ErrorCode.UNKNOWN_SUBSCRIPTION_ID])
        async with serving(broker):
            async with open_producer(bootstrap_servers=broker.bootstrap):
                await broker.wait_pushes(1)
            assert len(broker.subscription_requests) >= 2
            assert broker.subscription_requests[1].client_instance_id == INSTANCE
            assert broker.pushes[0].subscription_id == 2


async def test_a_broker_without_kip_714_gets_no_telemetry_request() -> None:
    with anyio.fail_after(20):
        async with serving(OldBroker(topics={"t": 1})) as broker:
            async with open_producer(bootstrap_servers=broker.bootstrap) as producer:
                await producer.send_and_wait("t", b"x")
                assert await producer.client_instance_id(timeout_ms=100) is None
                stats = producer.statistics().telemetry
            assert not {k for k, _, _ in broker.requests} & {71, 72}
            assert stats is not None and not stats.enabled


async def test_enable_metrics_push_false_sends_nothing() -> None:
    with anyio.fail_after(20):
        async with serving(TelemetryBroker(topics={"t": 1})) as broker:
            async with open_producer(
                {"bootstrap.servers": broker.bootstrap, "enable.metrics.push": False}
            ) as producer:
                await producer.send_and_wait("t", b"x")
                with pytest.raises(UsageError):
                    await producer.client_instance_id(timeout_ms=10)
                assert producer.statistics().telemetry is None
            async with open_consumer(
                bootstrap_servers=broker.bootstrap, enable_metrics_push=False
            ) as consumer:
                consumer.assign([TopicPartition("t", 0)])
                await consumer.getmany(timeout_ms=50)
                with pytest.raises(UsageError):
                    await consumer.client_instance_id()
            assert not {k for k, _, _ in broker.requests} & {71, 72}


async def test_the_consumer_pushes_its_metrics() -> None:
    with anyio.fail_after(20):
        async with serving(TelemetryBroker(topics={"t": 3})) as broker:
            async with open_consumer(bootstrap_servers=broker.bootstrap) as consumer:
                consumer.assign([TopicPartition("t", 0), TopicPartition("t", 1)])
                assert await consumer.client_instance_id(timeout_ms=5000) == INSTANCE
                await broker.wait_pushes(1)
                await consumer.getmany(timeout_ms=100)
                stats = consumer.statistics().telemetry
            assert stats is not None and stats.pushes >= 1
            last = broker.pushes[-1]
            assert last.terminating
            metrics = decoded(last)
            prefix = "org.apache.kafka.consumer."
            assigned = metrics[prefix + "coordinator.assigned.partitions"].points[0].value
            assert assigned == 2
            assert metrics[prefix + "connection.creation.total"].points[0].value == (
                broker.connections
            )
            idle = metrics[prefix + "poll.idle.ratio.avg"].points[0].value
            assert 0.0 <= idle <= 1.0
            for name in (
                "node.request.latency.avg",
                "node.request.latency.max",
                "fetch.manager.fetch.latency.avg",
                "fetch.manager.fetch.latency.max",
                "coordinator.commit.latency.avg",
                "coordinator.commit.latency.max",
            ):
                assert prefix + name in metrics
            assert not any(name.startswith("org.apache.kafka.producer.") for name in metrics)
            # Not in a group: no rebalances to time.
            assert not any(".rebalance." in name for name in metrics)


def test_a_group_members_rebalance_latency_is_averaged_per_push() -> None:
    averages = IntervalAverages()
    latency = RebalanceLatency()
    stats = SimpleNamespace(brokers={})
    prefix = "org.apache.kafka.consumer.coordinator.rebalance.latency"

    def push(now: float) -> dict[str, float]:
        samples = consumer_samples(averages, stats, {}, 0.0, 0, now, latency)
        return {s.name: s.value for s in samples if s.name.startswith(prefix)}

    for start, took in ((0.0, 0.2), (1.0, 0.4)):
        latency.start(start)
        latency.start(start + 0.1)  # already started: the first step counts
        latency.end(start + took)
    assert push(2.0) == pytest.approx(
        {prefix + ".avg": 300.0, prefix + ".max": 400.0, prefix + ".total": 600.0}
    )
    latency.start(3.0)
    latency.end(3.1)
    first = push(4.0)
    assert first[prefix + ".avg"] == pytest.approx(100.0)  # this interval's rebalance only
    assert first[prefix + ".max"] == pytest.approx(100.0)
    assert first[prefix + ".total"] == pytest.approx(700.0)  # a sum: since the start
    assert push(5.0)[prefix + ".avg"] == 0.0  # none since the last push


# -- against brokerlite ----------------------------------------------------------------


@pytest.fixture(scope="module")
def telemetry_broker(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from sdk_brokers import module_broker

    yield from module_broker(tmp_path_factory, "telemetry", client_telemetry_enabled=True)


async def test_brokerlite_receives_the_producers_metrics(telemetry_broker: Any) -> None:
    from trafka.sdk import NewTopic, open_admin

    bootstrap = telemetry_broker.bootstrap_servers
    client_id = f"telemetry-e2e-{uuid.uuid4().hex[:8]}"
    settings: dict[str, str | None] = {
        "metrics": "org.apache.kafka.producer.",
        "interval.ms": "100",
        "match": f"client_id={client_id}",
    }
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            await admin.create_topics([NewTopic(client_id, 1)])
            await admin.alter_client_metrics_configs(client_id, settings)
        async with open_producer(bootstrap_servers=bootstrap, client_id=client_id) as producer:
            instance = await producer.client_instance_id(timeout_ms=10_000)
            assert instance is not None, producer.statistics().telemetry
            await producer.send_and_wait(client_id, b"x")
            while telemetry_broker.broker.telemetry.latest(instance) is None:
                await anyio.sleep(0.02)
        pushed = telemetry_broker.broker.telemetry.latest(instance)
        assert pushed.client_id == client_id and pushed.client_software_name == "trafka"
        assert pushed.terminating
        names = {m.name for m in pushed.metrics}
        assert "org.apache.kafka.producer.connection.creation.total" in names
        assert all(name.startswith("org.apache.kafka.producer.") for name in names)


async def test_the_periodic_subscription_line_is_debug_not_info(
    telemetry_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue #62: a subscription without metrics is asked again every interval
    (KIP-714), and each answer logged a line at INFO: a service's log filled
    with it. Each is a DEBUG line now; nothing of the push logs at INFO."""
    import logging

    from trafka.sdk import open_admin

    caplog.set_level(logging.DEBUG, logger="trafka.sdk.telemetry")
    bootstrap = telemetry_broker.bootstrap_servers
    client_id = f"telemetry-log-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(30):
        async with open_admin(bootstrap_servers=bootstrap) as admin:
            await admin.alter_client_metrics_configs(
                client_id, {"interval.ms": "100", "match": f"client_id={client_id}"}
            )
        async with open_producer(bootstrap_servers=bootstrap, client_id=client_id) as producer:

            def subscriptions() -> int:
                telemetry = producer.statistics().telemetry
                return 0 if telemetry is None else telemetry.subscriptions

            while subscriptions() < 3:
                await anyio.sleep(0.05)
    lines = [r for r in caplog.records if r.name == "trafka.sdk.telemetry"]
    registered = [r for r in lines if "registered with client instance id" in r.getMessage()]
    assert len(registered) >= 3
    assert {r.levelno for r in registered} == {logging.DEBUG}
    assert [r.getMessage() for r in lines if r.levelno >= logging.INFO] == []
