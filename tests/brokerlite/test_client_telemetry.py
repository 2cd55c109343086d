"""KIP-714 in brokerlite: client-metrics resources (IncrementalAlterConfigs,
AlterConfigs, DescribeConfigs, ListClientMetricsResources), GetTelemetrySubscriptions
and PushTelemetry as Kafka's ClientMetricsManager answers them, the built-in
receiver, durability across a restart; and librdkafka pushing its metrics to a
served brokerlite."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from trafka.brokerlite import telemetry as tm
from trafka.brokerlite.outcomes import Close
from trafka.brokerlite.server import broker_in_thread
from trafka.codec.compression import compress
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k32_describe_configs as dc
from trafka.codec.messages import k33_alter_configs as ac
from trafka.codec.messages import k44_incremental_alter_configs as iac
from trafka.codec.messages import k71_get_telemetry_subscriptions as gts
from trafka.codec.messages import k72_push_telemetry as pt
from trafka.codec.messages import k74_list_config_resources as lcm
from trafka.codec.otlp import DataPoint, Metric, encode_metrics

pytestmark = pytest.mark.timeout(60)

CLIENT_METRICS = 16
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
ZERO = uuid.UUID(int=0)
DEFAULT_INTERVAL = 300_000
METRICS = encode_metrics(
    [Metric("org.apache.kafka.producer.record.send.rate", "gauge", (DataPoint(1.5, 1),))],
    resource={"client_id": "app"},
)


def alter(
    core: Any, name: str, *ops: tuple[str, int, str | None], validate_only: bool = False
) -> Any:
    body = iac.IncrementalAlterConfigsRequest(
        resources=[
            iac.IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=CLIENT_METRICS,
                resource_name=name,
                configs=[
                    iac.IncrementalAlterConfigsRequest.AlterableConfig(
                        name=k, config_operation=op, value=v
                    )
                    for k, op, v in ops
                ],
            )
        ],
        validate_only=validate_only,
    )
    (result,) = core.call(44, 1, body).responses
    return result


def subscribe(core: Any, name: str, **settings: str) -> None:
    result = alter(core, name, *((k.replace("_", "."), SET, v) for k, v in settings.items()))
    assert result.error_code == ErrorCode.NONE, result


def listed(core: Any) -> list[str]:
    answer = core.call(74, 0, lcm.ListConfigResourcesRequest())
    assert answer.error_code == ErrorCode.NONE
    return [r.resource_name for r in answer.config_resources]


def describe(core: Any, name: str, version: int = 4, synonyms: bool = True) -> Any:
    body = dc.DescribeConfigsRequest(
        resources=[
            dc.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=CLIENT_METRICS, resource_name=name, configuration_keys=None
            )
        ],
        include_synonyms=synonyms,
    )
    (result,) = core.call(32, version, body).results
    return result


def get(core: Any, instance: uuid.UUID = ZERO, *, conn_id: int = 1, client_id: str = "app") -> Any:
    return core.call(
        71,
        0,
        gts.GetTelemetrySubscriptionsRequest(client_instance_id=instance),
        conn_id=conn_id,
        client_id=client_id,
    )


def push(
    core: Any,
    instance: uuid.UUID,
    subscription: int,
    metrics: bytes = METRICS,
    *,
    compression: int = 0,
    terminating: bool = False,
    conn_id: int = 1,
    client_id: str = "app",
) -> int:
    body = pt.PushTelemetryRequest(
        client_instance_id=instance,
        subscription_id=subscription,
        terminating=terminating,
        compression_type=compression,
        metrics=metrics,
    )
    answer = core.call(72, 0, body, conn_id=conn_id, client_id=client_id)
    return int(answer.error_code)


@pytest.fixture
def core(open_core: Any) -> Any:
    """A sans-IO broker serving the telemetry APIs."""
    return open_core(client_telemetry_enabled=True)


# -- the resources -----------------------------------------------------------------------------


def test_resources_are_set_described_listed_and_deleted(core: Any) -> None:
    assert listed(core) == []
    fresh = describe(core, "nothing-yet")
    assert fresh.error_code == ErrorCode.NONE
    assert [(c.name, c.value, c.config_source, c.synonyms) for c in fresh.configs] == [
        ("interval.ms", "300000", 5, []),
        ("match", "", 5, []),
        ("metrics", "", 5, []),
    ]
    subscribe(core, "producers", metrics="org.apache.kafka.producer., org.apache.kafka.consumer.")
    result = alter(
        core, "producers", ("interval.ms", SET, "1000"), ("match", SET, "client_id=app.*")
    )
    assert result.error_code == ErrorCode.NONE
    subscribe(core, "all", metrics="*")
    assert listed(core) == ["all", "producers"]
    described = {c.name: c for c in describe(core, "producers").configs}
    assert described["metrics"].value == "org.apache.kafka.producer.,org.apache.kafka.consumer."
    assert described["interval.ms"].value == "1000"
    assert described["interval.ms"].config_type == 3 and described["match"].config_type == 7
    assert all(c.config_source == 7 and not c.read_only for c in described.values())
    assert [(s.name, s.value, s.source) for s in described["match"].synonyms] == [
        ("match", "client_id=app.*", 7)
    ]
    assert describe(core, "producers", version=1, synonyms=False).configs[0].synonyms == []
    # Deleting every setting deletes the resource.
    assert (
        alter(
            core,
            "producers",
            ("metrics", DELETE, None),
            ("interval.ms", DELETE, None),
            ("match", DELETE, None),
        ).error_code
        == ErrorCode.NONE
    )
    assert listed(core) == ["all"]
    empty = describe(core, "")
    assert empty.error_code == ErrorCode.INVALID_REQUEST


def test_append_and_subtract_work_on_the_list_settings(core: Any) -> None:
    assert alter(core, "s", ("metrics", APPEND, "a.,b.")).error_code == ErrorCode.NONE
    assert alter(core, "s", ("metrics", APPEND, "b.,c.")).error_code == ErrorCode.NONE
    assert alter(core, "s", ("metrics", SUBTRACT, "a.")).error_code == ErrorCode.NONE
    assert {c.name: c.value for c in describe(core, "s").configs}["metrics"] == "b.,c."
    refused = alter(core, "s", ("interval.ms", APPEND, "1000"))
    assert refused.error_code == ErrorCode.INVALID_CONFIG
    assert "not LIST" in refused.error_message


@pytest.mark.parametrize(
    ("name", "ops", "code"),
    [
        ("", [("metrics", SET, "*")], ErrorCode.INVALID_REQUEST),
        ("s", [("metric", SET, "*")], ErrorCode.INVALID_REQUEST),
        ("s", [("interval.ms", SET, "99")], ErrorCode.INVALID_REQUEST),
        ("s", [("interval.ms", SET, "3600001")], ErrorCode.INVALID_REQUEST),
        ("s", [("interval.ms", SET, "1_000")], ErrorCode.INVALID_CONFIG),
        ("s", [("interval.ms", SET, "ten")], ErrorCode.INVALID_CONFIG),
        ("s", [("interval.ms", SET, "99999999999")], ErrorCode.INVALID_CONFIG),
        ("s", [("match", SET, "client_name=x")], ErrorCode.INVALID_CONFIG),
        ("s", [("match", SET, "client_id")], ErrorCode.INVALID_CONFIG),
        ("s", [("match", SET, "client_id=")], ErrorCode.INVALID_CONFIG),
        ("s", [("match", SET, "client_id=a=b")], ErrorCode.INVALID_CONFIG),
        ("s", [("match", SET, "client_id=[")], ErrorCode.INVALID_CONFIG),
        ("s", [("metrics", SET, None)], ErrorCode.INVALID_CONFIG),
        ("s", [("metrics", 7, "x")], ErrorCode.INVALID_REQUEST),
        ("s", [("metrics", SET, "a"), ("metrics", SET, "b")], ErrorCode.INVALID_REQUEST),
    ],
)
def test_invalid_changes_are_refused_as_kafka_refuses_them(
    core: Any, name: str, ops: list[tuple[str, int, str | None]], code: ErrorCode
) -> None:
    result = alter(core, name, *ops)
    assert result.error_code == code, result
    assert result.error_message
    assert listed(core) == []


def test_validate_only_changes_nothing(core: Any) -> None:
    assert alter(core, "s", ("metrics", SET, "*"), validate_only=True).error_code == 0
    assert listed(core) == []


def test_legacy_alter_configs_replaces_the_whole_set(core: Any) -> None:
    subscribe(core, "s", metrics="a.", interval_ms="1000")

    def replace(*pairs: tuple[str, str]) -> int:
        body = ac.AlterConfigsRequest(
            resources=[
                ac.AlterConfigsRequest.AlterConfigsResource(
                    resource_type=CLIENT_METRICS,
                    resource_name="s",
                    configs=[
                        ac.AlterConfigsRequest.AlterableConfig(name=k, value=v) for k, v in pairs
                    ],
                )
            ]
        )
        (result,) = core.call(33, 2, body).responses
        return int(result.error_code)

    assert replace(("metrics", "b.")) == ErrorCode.NONE
    assert core.broker.telemetry.configs("s") == {"metrics": "b."}
    assert replace(("interval.ms", "5")) == ErrorCode.INVALID_REQUEST
    assert replace() == ErrorCode.NONE
    assert listed(core) == []


def test_list_and_describe_need_describe_configs_on_the_cluster(open_core: Any) -> None:
    core = open_core(
        authorizer_class_name="org.apache.kafka.metadata.authorizer.StandardAuthorizer"
    )
    answer = core.call(74, 0, lcm.ListConfigResourcesRequest())
    assert answer.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert describe(core, "s").error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert (
        alter(core, "s", ("metrics", SET, "*")).error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    )


def test_resources_survive_a_restart(open_core: Any) -> None:
    core = open_core(client_telemetry_enabled=True)
    subscribe(core, "kept", metrics="org.apache.kafka.", interval_ms="1000")
    subscribe(core, "dropped", metrics="*")
    assert alter(core, "dropped", ("metrics", DELETE, None)).error_code == 0
    core.broker.close()
    again = open_core(client_telemetry_enabled=True)
    assert listed(again) == ["kept"]
    answer = get(again)
    assert (answer.requested_metrics, answer.push_interval_ms) == (["org.apache.kafka."], 1000)


# -- subscriptions ----------------------------------------------------------------------------


def test_a_new_client_gets_an_id_and_kafkas_constants(core: Any) -> None:
    answer = get(core)
    assert answer.error_code == ErrorCode.NONE
    assert answer.client_instance_id not in (ZERO, uuid.UUID(int=1))
    assert answer.requested_metrics == []
    assert answer.push_interval_ms == DEFAULT_INTERVAL
    assert answer.accepted_compression_types == [4, 3, 1, 2]
    assert answer.telemetry_max_bytes == 1_048_576
    assert answer.delta_temporality is True
    assert answer.subscription_id == tm.subscription_id(
        [], DEFAULT_INTERVAL, answer.client_instance_id
    )
    other = get(core, conn_id=2)
    assert other.client_instance_id != answer.client_instance_id


def test_the_subscription_id_is_kafkas_hash() -> None:
    # Java: "hello".hashCode() == 99162322; a HashSet of "b", "a" iterates "a", "b".
    assert tm._java_string_hash("hello") == 99162322
    assert tm._java_hash_set_order(["b", "a"]) == ["a", "b"]
    ident = uuid.UUID(int=(5 << 64) | 3)  # Uuid(5, 3).hashCode() == 5 ^ 3 == 6
    assert tm._uuid_hash(ident) == 6
    from trafka.codec.crc import crc32c

    expected = crc32c(b"[a., b.]1000") ^ 6
    expected = expected - (1 << 32) if expected >= 1 << 31 else expected
    assert tm.subscription_id(["a.", "b."], 1000, ident) == expected


def test_matching_subscriptions_combine_and_the_smallest_interval_wins(core: Any) -> None:
    subscribe(core, "one", metrics="org.apache.kafka.producer.", interval_ms="5000")
    subscribe(
        core, "two", metrics="org.apache.kafka.consumer.", interval_ms="2000", match="client_id=app"
    )
    subscribe(core, "other", metrics="x.", interval_ms="100", match="client_id=someone-else")
    answer = get(core)
    assert sorted(answer.requested_metrics) == [
        "org.apache.kafka.consumer.",
        "org.apache.kafka.producer.",
    ]
    assert answer.push_interval_ms == 2000
    subscribe(core, "all", metrics="*,y.", interval_ms="3000")
    everything = get(core, conn_id=2)
    assert everything.requested_metrics == ["*"]
    assert everything.push_interval_ms == 2000


def test_match_selectors_use_the_connection(core: Any) -> None:
    core.broker.connection_opened(1, "10.1.2.3:40000")
    software = av.ApiVersionsRequest(
        client_software_name="trafka-test", client_software_version="1.2.3"
    )
    assert core.call(18, 3, software).error_code == ErrorCode.NONE
    subscribe(
        core,
        "picky",
        metrics="m.",
        match=(
            "client_software_name=trafka-.*,client_software_version=1\\.2\\..*,"
            "client_source_address=10\\.1\\..*,client_source_port=4\\d+,client_id=ap+"
        ),
    )
    assert get(core).requested_metrics == ["m."]
    core.broker.connection_opened(2, "10.9.9.9:40000")
    assert get(core, conn_id=2).requested_metrics == []  # another address, no software
    first = get(core, conn_id=3, client_id="zzz")
    assert first.requested_metrics == []
    ident = uuid.UUID("12345678-1234-5678-1234-567812345678")
    subscribe(core, "by-id", metrics="i.", match=f"client_instance_id={ident}")
    assert get(core, ident, conn_id=4).requested_metrics == ["i."]


def test_asking_again_too_early_is_throttled(core: Any) -> None:
    subscribe(core, "s", metrics="*", interval_ms="1000")
    first = get(core)
    ident = first.client_instance_id
    again = get(core, ident)
    assert again.error_code == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    assert (again.client_instance_id, again.requested_metrics) == (ZERO, [])
    core.now += 1000
    assert get(core, ident).error_code == ErrorCode.NONE


def test_pushes_follow_kafkas_interval_rule(core: Any) -> None:
    subscribe(core, "s", metrics="*", interval_ms="1000")
    answer = get(core)
    ident, sub = answer.client_instance_id, answer.subscription_id
    assert push(core, ident, sub) == ErrorCode.NONE  # right after the subscription: accepted
    core.now += 500
    assert push(core, ident, sub) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    core.now += 500
    assert push(core, ident, sub) == ErrorCode.NONE
    core.now += 10
    assert push(core, ident, sub, terminating=True) == ErrorCode.NONE  # never throttled
    core.now += 5000
    assert push(core, ident, sub, terminating=True) == ErrorCode.INVALID_REQUEST
    assert core.broker.telemetry.latest(ident).terminating is True


def test_a_changed_subscription_set_makes_the_old_id_unknown(core: Any) -> None:
    subscribe(core, "s", metrics="a.", interval_ms="1000")
    answer = get(core)
    ident, old = answer.client_instance_id, answer.subscription_id
    subscribe(core, "s", metrics="b.")
    assert push(core, ident, old) == ErrorCode.UNKNOWN_SUBSCRIPTION_ID
    renewed = get(core, ident)  # not throttled: the last push failed this way
    assert renewed.error_code == ErrorCode.NONE
    assert renewed.subscription_id != old and renewed.requested_metrics == ["b."]
    # Kafka's rule: the refused push counted as the last push, and a subscription
    # asked for out of turn does not open the push window, so the next push waits.
    assert push(core, ident, renewed.subscription_id) == ErrorCode.THROTTLING_QUOTA_EXCEEDED
    core.now += 1000
    assert push(core, ident, renewed.subscription_id) == ErrorCode.NONE
    # A change that leaves this client's set alone keeps its id.
    subscribe(core, "unrelated", metrics="c.", match="client_id=nobody")
    core.now += 1000
    assert get(core, ident).subscription_id == renewed.subscription_id


def test_invalid_instance_ids_are_invalid_requests(core: Any) -> None:
    assert push(core, ZERO, 0) == ErrorCode.INVALID_REQUEST
    assert push(core, uuid.UUID(int=1), 0) == ErrorCode.INVALID_REQUEST
    # An id the broker does not know is adopted (a client moving between brokers).
    ident = uuid.uuid4()
    expected = tm.subscription_id([], DEFAULT_INTERVAL, ident)
    assert push(core, ident, expected) == ErrorCode.NONE


@pytest.mark.parametrize("compression", [0, 1, 2, 3, 4])
def test_every_accepted_compression_type_is_decoded(core: Any, compression: int) -> None:
    answer = get(core)
    data = compress(compression, METRICS)
    assert (
        push(core, answer.client_instance_id, answer.subscription_id, data, compression=compression)
        == 0
    )
    kept = core.broker.telemetry.latest(answer.client_instance_id)
    assert kept.compression_type == compression
    assert [m.name for m in kept.metrics] == ["org.apache.kafka.producer.record.send.rate"]
    assert kept.client_id == "app" and kept.received_ms == core.now


def test_an_unknown_compression_type_is_refused_and_asking_again_is_allowed(core: Any) -> None:
    subscribe(core, "s", metrics="*", interval_ms="1000")
    answer = get(core)
    ident = answer.client_instance_id
    assert (
        push(core, ident, answer.subscription_id, compression=5)
        == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
    )
    assert get(core, ident).error_code == ErrorCode.NONE


def test_too_large_pushes_are_refused_compressed_or_not(open_core: Any) -> None:
    core = open_core(client_telemetry_enabled=True, telemetry_max_bytes=1024)
    assert get(core).telemetry_max_bytes == 1024
    answer = get(core, conn_id=2)
    ident, sub = answer.client_instance_id, answer.subscription_id
    assert push(core, ident, sub, bytes(2000), conn_id=2) == ErrorCode.TELEMETRY_TOO_LARGE
    core.now += DEFAULT_INTERVAL
    bomb = compress(1, bytes(100_000))
    assert len(bomb) < 1024
    assert push(core, ident, sub, bomb, compression=1, conn_id=2) == ErrorCode.TELEMETRY_TOO_LARGE
    core.now += DEFAULT_INTERVAL
    liar = b"\xff\xff\xff\xff\x0f"  # raw snappy claiming 4 GiB
    assert push(core, ident, sub, liar, compression=2, conn_id=2) == ErrorCode.TELEMETRY_TOO_LARGE
    assert core.broker.telemetry.pushes() == []


@pytest.mark.parametrize(
    ("compression", "payload"),
    [
        (1, b"\x1f\x8b not really gzip"),
        (3, b"not lz4"),
        (4, b"\x28\xb5\x2f\xfd garbage"),
        (2, b"\x05\x00"),
        (0, b"\x0a\xff\xff\xff\xff\x0f lying length"),
        (0, b"\xff"),
    ],
)
def test_malformed_metrics_are_invalid_records_and_the_broker_keeps_serving(
    core: Any, compression: int, payload: bytes
) -> None:
    answer = get(core)
    code = push(
        core, answer.client_instance_id, answer.subscription_id, payload, compression=compression
    )
    assert code == ErrorCode.INVALID_RECORD
    assert core.broker.telemetry.pushes() == []
    assert core.call(18, 3, av.ApiVersionsRequest()).error_code == ErrorCode.NONE
    assert get(core, conn_id=2).error_code == ErrorCode.NONE


def test_empty_metrics_are_accepted_and_not_kept(core: Any) -> None:
    answer = get(core)
    assert push(core, answer.client_instance_id, answer.subscription_id, b"") == ErrorCode.NONE
    assert core.broker.telemetry.pushes() == []


def test_instances_are_bounded_expire_and_leave_with_their_connection(core: Any) -> None:
    telemetry = core.broker.telemetry
    telemetry.max_instances = 3
    ids = [get(core, conn_id=c).client_instance_id for c in range(1, 6)]
    assert telemetry.instance_count == 3
    # The evicted first instance comes back as a fresh one: asking is not throttled.
    assert get(core, ids[0], conn_id=1).error_code == ErrorCode.NONE
    assert telemetry.instance_count == 3
    core.broker.connection_closed(1)
    assert telemetry.instance_count == 2
    # Idle for max(60 s, 3 push intervals): forgotten.
    core.now += 3 * DEFAULT_INTERVAL
    get(core, conn_id=9)
    assert telemetry.instance_count == 1


def test_kept_pushes_are_bounded_and_visible(core: Any) -> None:
    telemetry = core.broker.telemetry
    telemetry.kept_clients = 2
    for conn in (1, 2, 3):
        answer = get(core, conn_id=conn, client_id=f"c{conn}")
        assert (
            push(
                core,
                answer.client_instance_id,
                answer.subscription_id,
                conn_id=conn,
                client_id=f"c{conn}",
            )
            == 0
        )
    assert [p.client_id for p in telemetry.pushes()] == ["c2", "c3"]


def test_pushes_can_be_appended_to_a_json_lines_file(open_core: Any, tmp_path: Path) -> None:
    out = tmp_path / "telemetry.jsonl"
    core = open_core(client_telemetry_enabled=True, client_telemetry_file=str(out))
    answer = get(core)
    assert (
        push(
            core,
            answer.client_instance_id,
            answer.subscription_id,
            compress(4, METRICS),
            compression=4,
        )
        == 0
    )
    (line,) = out.read_text().splitlines()
    record = json.loads(line)
    assert record["client_instance_id"] == str(answer.client_instance_id)
    assert record["client_id"] == "app"
    assert record["metrics"][0]["name"] == "org.apache.kafka.producer.record.send.rate"


def test_without_the_setting_the_client_apis_are_neither_advertised_nor_served(
    open_core: Any,
) -> None:
    plain = open_core(client_telemetry_enabled=False)
    keys = {k.api_key for k in plain.call(18, 3, av.ApiVersionsRequest()).api_keys}
    assert 74 in keys and not keys & {71, 72}
    outcome = plain.send(71, 0, gts.GetTelemetrySubscriptionsRequest())
    assert isinstance(outcome, Close) and "client_telemetry_enabled" in outcome.reason
    assert isinstance(plain.send(72, 0, pt.PushTelemetryRequest()), Close)
    # Resources can be configured all the same.
    subscribe(plain, "s", metrics="*")
    assert listed(plain) == ["s"]


def test_the_telemetry_apis_are_advertised(core: Any) -> None:
    keys = {
        k.api_key: (k.min_version, k.max_version)
        for k in core.call(18, 3, av.ApiVersionsRequest()).api_keys
    }
    assert keys[71] == keys[72] == (0, 0)
    assert keys[74] == (0, 1)  # ListConfigResources v1: every type (KIP-1142)


# -- librdkafka -------------------------------------------------------------------------------


def test_librdkafka_pushes_its_metrics_to_brokerlite(
    data_dir: Path, raw_client: Any, topic_name: str
) -> None:
    confluent_kafka = pytest.importorskip("confluent_kafka")
    with broker_in_thread(port=0, data_dir=data_dir, client_telemetry_enabled=True) as running:
        _librdkafka_pushes(confluent_kafka, running, raw_client, topic_name)


def _librdkafka_pushes(
    confluent_kafka: Any, running: Any, raw_client: Any, topic_name: str
) -> None:
    body = iac.IncrementalAlterConfigsRequest(
        resources=[
            iac.IncrementalAlterConfigsRequest.AlterConfigsResource(
                resource_type=CLIENT_METRICS,
                resource_name="interop",
                configs=[
                    iac.IncrementalAlterConfigsRequest.AlterableConfig(
                        name=k, config_operation=SET, value=v
                    )
                    for k, v in (
                        ("metrics", "org.apache.kafka."),
                        ("interval.ms", "1000"),  # pushes every second or so
                        ("match", "client_id=telemetry-.*"),
                    )
                ],
            )
        ]
    )
    with raw_client(running.address) as client:
        (result,) = client.request(44, 1, body).responses
    assert result.error_code == ErrorCode.NONE, result

    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": running.bootstrap_servers,
            "client.id": "telemetry-producer",
            "linger.ms": 5,
        }
    )
    seen: list[Any] = []
    try:
        deadline = time.monotonic() + 40
        while time.monotonic() < deadline and not seen:
            producer.produce(topic_name, b"value")
            producer.poll(0.2)
            # pushes() is safe to call from outside the broker's thread.
            seen = [
                p
                for p in running.broker.telemetry.pushes()
                if p.client_id == "telemetry-producer" and p.metrics
            ]
        assert seen, "librdkafka pushed no metrics in 40 s"
    finally:
        producer.flush(10)
    last = seen[-1]
    names = {m.name for m in last.metrics}
    assert all(n.startswith("org.apache.kafka.") for n in names), names
    assert any(n.startswith("org.apache.kafka.producer.") for n in names), names
    assert last.client_software_name == "confluent-kafka-python"  # its ApiVersions v3
