"""Byte-rate quotas per tenant through the proxy (issue #83 item 2, "left:
per-tenant quotas"; docs/proxy.md, "Virtual clusters (tenants)", Quotas).

Tenants share brokerlite through one proxy, over its upstream connections,
so the broker sees one client: the proxy measures and throttles each tenant
as Kafka's broker does a client (Kafka's design docs, "Quotas"; KIP-219: the
answer says ``throttle_time_ms`` at once, the channel is muted for it).
confluent-kafka's ``throttle_cb`` (librdkafka reads ``throttle_time_ms`` off
every answer) tells what the clients were told; the proxy's Prometheus
metrics tell what it counted. No test here measures a duration: the windows
are small (2 samples of 1 s) so that the throttle times, which librdkafka
waits out, are short.
"""

from __future__ import annotations

import json
import logging
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import confluent_kafka
import pytest
from prometheus_client.parser import text_string_to_metric_families
from proxy_helpers import fresh

from trafka.brokerlite import broker_in_thread
from trafka.proxy import RunningProxy, proxy_in_thread
from trafka.proxy.tenants import Tenants
from trafka.sdk import NewTopic, TopicPartition, open_admin, open_consumer, open_producer

pytestmark = pytest.mark.timeout(120)

USERS = {"alice": "alice-pw", "bob": "bob-pw", "carol": "carol-pw", "dave": "dave-pw"}
RATE = 100  # bytes per second: a few hundred bytes in a second are over it
TENANTS = {
    "tenants": [
        {"name": "acme", "prefix": "acme.", "principals": ["User:alice"],
         "producer_byte_rate": RATE},
        {"name": "globex", "prefix": "globex.", "principals": ["User:bob"]},
        {"name": "initech", "prefix": "initech.", "principals": ["User:carol"],
         "consumer_byte_rate": RATE},
        # any handling of its requests is over a millionth of a percent of a thread
        {"name": "umbrella", "prefix": "umbrella.", "principals": ["User:dave"],
         "request_percentage": 1e-6},
    ],
    "quota_window_num": 2,
    "quota_window_size_seconds": 1,
}  # fmt: skip


@pytest.fixture(scope="module")
def proxy(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningProxy]:
    tenants = Tenants()
    tenants.configure(TENANTS)
    credentials = tmp_path_factory.mktemp("quota-proxy") / "principals.json"
    credentials.write_text(json.dumps({
        f"User:{user}": {"mechanism": "PLAIN", "username": user, "password": password}
        for user, password in USERS.items()
    }))  # fmt: skip
    with (
        broker_in_thread(
            port=0,
            host="127.0.0.1",
            data_dir=tmp_path_factory.mktemp("quotas"),
            security_protocol="SASL_PLAINTEXT",
            sasl_users=USERS,
        ) as broker,
        proxy_in_thread(
            upstream=(broker.bootstrap_servers,),
            port=0,
            filters=(tenants,),
            principal_credentials=str(credentials),
            metrics_listen="127.0.0.1:0",
        ) as px,
    ):
        yield px


def _sdk(px: RunningProxy, user: str) -> dict[str, Any]:
    return {
        "bootstrap_servers": px.bootstrap_servers,
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "PLAIN",
        "sasl_plain_username": user,
        "sasl_plain_password": USERS[user],
    }


def _librdkafka(px: RunningProxy, user: str, **more: Any) -> dict[str, Any]:
    return {
        "bootstrap.servers": px.bootstrap_servers,
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "PLAIN",
        "sasl.username": user,
        "sasl.password": USERS[user],
        **more,
    }


def _create(px: RunningProxy, user: str, topic: str) -> None:
    async def go() -> None:
        with anyio.fail_after(30):
            async with open_admin(**_sdk(px, user)) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1)])

    anyio.run(go, backend="trio")


def _produce_sdk(px: RunningProxy, user: str, topic: str, values: list[bytes]) -> None:
    async def go() -> None:
        with anyio.fail_after(30):
            async with open_producer(**_sdk(px, user)) as producer:
                for v in values:
                    await producer.send(topic, v)
                await producer.flush()

    anyio.run(go, backend="trio")


def _read_sdk(px: RunningProxy, user: str, topic: str, n: int) -> list[bytes]:
    async def go() -> list[bytes]:
        tp = TopicPartition(topic, 0)
        got: list[bytes] = []
        with anyio.fail_after(30):
            async with open_consumer(**_sdk(px, user), fetch_max_wait_ms=50) as consumer:
                consumer.assign([tp])
                consumer.seek_to_beginning(tp)
                end = (await consumer.end_offsets([tp]))[tp]
                while await consumer.position(tp) < end:
                    for records in (await consumer.getmany(tp, timeout_ms=500)).values():
                        got += [r.value for r in records]
        return got

    result: list[bytes] = anyio.run(go, backend="trio")
    return result


def _metrics(px: RunningProxy) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    assert px.metrics_address is not None
    host, port = px.metrics_address
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def _throttled(name: str, tenant: str, quota: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    return (name, (("quota", quota), ("tenant", tenant)))


def _produce_librdkafka(px: RunningProxy, user: str, topic: str, values: list[bytes]) -> list[Any]:
    """Produce ``values`` with confluent-kafka as ``user``: librdkafka's
    throttle events, once every record is delivered and the answer that
    carried a throttle (if any) was read."""
    events: list[Any] = []
    errors: list[Any] = []
    producer = confluent_kafka.Producer(
        _librdkafka(px, user, **{"linger.ms": 5, "throttle_cb": events.append})
    )
    for v in values:
        producer.produce(topic, v, on_delivery=lambda err, _: err and errors.append(err))
    assert producer.flush(30) == 0 and errors == []
    producer.poll(0)
    return events


def test_a_tenant_over_its_producer_byte_rate_is_told_to_wait_and_loses_nothing(
    proxy: RunningProxy,
) -> None:
    """acme (producer_byte_rate 100 B/s) produces a few hundred bytes at once:
    its Produce answers say throttle_time_ms > 0 (librdkafka's throttle_cb,
    then trafka's SDK's on a connection of its own: the rate is the tenant's),
    every record arrives once; globex, with no quota, is never told to wait
    (its bytes are counted all the same)."""
    topic = fresh("quota")
    values = [f"acme-{i:03}-{'x' * 30}".encode() for i in range(12)]
    for user in ("alice", "bob"):
        _create(proxy, user, topic)
    events = _produce_librdkafka(proxy, "alice", topic, values)
    throttles = [e.throttle_time for e in events if e.throttle_time > 0]
    assert throttles, events
    # trafka's SDK, on a connection of its own: the tenant's rate is shared.
    sdk_events: list[Any] = []

    async def sdk_send() -> None:
        with anyio.fail_after(30):
            async with open_producer(**_sdk(proxy, "alice"), throttle_cb=sdk_events.append) as p:
                await p.send_and_wait(topic, b"acme-sdk-" + b"z" * 200)

    anyio.run(sdk_send, backend="trio")
    assert [e for e in sdk_events if e.throttle_time > 0], sdk_events
    values.append(b"acme-sdk-" + b"z" * 200)
    assert _read_sdk(proxy, "alice", topic, len(values)) == values
    free = _produce_librdkafka(proxy, "bob", topic, [b"globex"] * 12)
    assert [e for e in free if e.throttle_time > 0] == []
    assert _read_sdk(proxy, "bob", topic, 12) == [b"globex"] * 12
    seen = _metrics(proxy)
    told = seen[_throttled("trafka_proxy_tenant_throttle_seconds_total", "acme", "produce")]
    # The proxy's count is the throttle it gave, at least what librdkafka reported.
    assert told >= max(throttles) > 0
    assert _throttled("trafka_proxy_tenant_throttle_seconds_total", "globex", "produce") not in seen
    counted = seen[_throttled("trafka_proxy_tenant_quota_bytes_total", "globex", "produce")]
    assert counted > 12 * len(b"globex")
    stats = proxy.statistics.filters["tenant_quotas"]
    assert stats["bytes"][("acme", "produce")] > sum(map(len, values))


def test_a_tenant_over_its_consumer_byte_rate_is_told_to_wait_and_reads_everything(
    proxy: RunningProxy,
) -> None:
    """initech (consumer_byte_rate 100 B/s) reads a few hundred bytes with
    confluent-kafka: a Fetch answer says throttle_time_ms > 0, every record
    is read once and in order; globex's consumer, no quota, is never told to
    wait."""
    topic = fresh("fquota")
    values = [f"initech-{i:03}-{'y' * 30}".encode() for i in range(12)]
    for user in ("carol", "bob"):
        _create(proxy, user, topic)
        _produce_sdk(proxy, user, topic, values)
    told: dict[str, list[float]] = {}
    for user in ("carol", "bob"):
        events: list[Any] = []
        consumer = confluent_kafka.Consumer(
            _librdkafka(
                proxy,
                user,
                **{
                    "group.id": fresh("g"),
                    "enable.auto.commit": False,
                    "fetch.wait.max.ms": 50,
                    "throttle_cb": events.append,
                },
            )
        )
        try:
            consumer.assign(
                [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
            )
            got: list[bytes] = []
            while len(got) < len(values):
                message = consumer.poll(1)
                if message is not None and not message.error():
                    got.append(message.value())
            assert got == values
            if user == "carol":
                # The throttle rides on the answer that brought the records,
                # or the next: read until librdkafka has told of one.
                for _ in range(150):  # 30 s at most
                    if [e for e in events if e.throttle_time > 0]:
                        break
                    assert consumer.poll(0.2) is None
        finally:
            consumer.close()
        told[user] = [e.throttle_time for e in events if e.throttle_time > 0]
    assert told["carol"] and told["bob"] == []
    seen = _metrics(proxy)
    assert seen[_throttled("trafka_proxy_tenant_throttle_seconds_total", "initech", "fetch")] > 0
    assert _throttled("trafka_proxy_tenant_throttle_seconds_total", "globex", "fetch") not in seen
    assert seen[_throttled("trafka_proxy_tenant_quota_bytes_total", "globex", "fetch")] > 0
    assert seen[_throttled("trafka_proxy_tenant_quota_bytes_total", "initech", "fetch")] > sum(
        map(len, values)
    )


def test_the_docs_example_is_a_valid_configuration(tmp_path: Path) -> None:
    """docs/proxy.md's "Quotas per tenant" example, as written (its
    credentials file made here), passes --check-config and means what its
    comments say; a rate that is not a positive number is named."""
    from click.testing import CliRunner

    from trafka.proxy.cli import command
    from trafka.proxy.quota_rate import Windows
    from trafka.proxy.reload import Reloader, load
    from trafka.proxy.settings import Sources

    docs = (Path(__file__).parents[2] / "docs" / "proxy.md").read_text()
    section = docs.split("### Quotas per tenant", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    credentials = tmp_path / "principals.json"
    credentials.write_text(json.dumps({
        f"User:{user}": {"mechanism": "PLAIN", "username": user, "password": password}
        for user, password in USERS.items()
    }))  # fmt: skip
    toml = tmp_path / "proxy.toml"
    toml.write_text(example.replace("/etc/trafka/principals.json", str(credentials)))
    result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
    assert result.exit_code == 0, result.output
    tenants = load(Sources({}, {}, str(toml))).config.filters[0]
    assert isinstance(tenants, Tenants)
    assert tenants.quotas.windows == Windows(11, 1000)
    acme, globex = tenants.by_principal["User:alice"], tenants.by_principal["User:bob"]
    assert (acme.producer_byte_rate, acme.consumer_byte_rate) == (1048576, 5242880)
    assert acme.request_percentage == 25
    assert (globex.producer_byte_rate, globex.consumer_byte_rate) == (None, None)
    assert globex.request_percentage is None
    # SIGHUP (in process): the running filter takes the new rate, its measure kept.
    tenants.quotas.count("acme", "produce", 5000, acme.producer_byte_rate)
    measured = tenants.quotas.rates[("acme", "produce")]
    sources = Sources(path=str(toml))
    reloader = Reloader(sources, load(sources).values, (tenants,), None)
    original = toml.read_text()
    toml.write_text(original.replace("1048576", "2097152"))
    root = logging.getLogger()
    level = root.level
    try:
        assert reloader.reload()
        assert tenants.by_principal["User:alice"].producer_byte_rate == 2097152
        assert tenants.quotas.rates[("acme", "produce")] is measured
        # Refused whole (--check-config names it), the old rate kept.
        toml.write_text(original.replace("1048576", "-1"))
        result = CliRunner().invoke(command, ["--config", str(toml), "--check-config"])
        assert result.exit_code == 1
        assert "tenants[0]: producer_byte_rate -1 must be a positive number" in result.output
        assert not reloader.reload()
        assert tenants.by_principal["User:alice"].producer_byte_rate == 2097152
    finally:
        root.setLevel(level)  # the reload sets the process's log level


def test_a_tenant_over_its_request_percentage_is_told_to_wait_and_its_client_waits(
    proxy: RunningProxy,
) -> None:
    """umbrella (request_percentage 1e-6: any handling of its requests is over
    it; Kafka's request quota, KIP-124) is told throttle_time_ms 1000 on its
    answers: the cap, one sample (quota_window_size_seconds = 1), as Kafka's
    ClientRequestQuotaManager caps a request quota's throttle. trafka's SDK
    and librdkafka report it (throttle_cb); trafka's SDK honours it (KIP-219:
    its statistics count the requests it held back until the time had
    passed); every record is delivered once; globex, with no quota, is never
    told to wait; the proxy's metrics say what it counted and gave. (That the
    proxy holds a request sent early on a muted connection is checked on a
    virtual clock, test_proxy_quota_rate.py.)"""
    topic = fresh("rquota")
    sdk_events: list[Any] = []
    reports: list[tuple[int, int]] = []
    held: list[int] = []

    async def sdk_send() -> None:
        with anyio.fail_after(60):
            async with open_admin(**_sdk(proxy, "dave")) as admin:
                await admin.create_topics([NewTopic(topic, 1, 1)])
            async with open_producer(**_sdk(proxy, "dave"), throttle_cb=sdk_events.append) as p:
                # Each answer throttles: the next request waits in the client
                # (sent until its statistics say one did, 10 at most).
                for i in range(10):
                    sent = await p.send_and_wait(topic, b"umbrella-%d" % i)
                    reports.append((sent.partition, sent.offset))
                    held[:] = [b.throttle.requests_held for b in p.statistics().brokers.values()]
                    if sum(held):
                        break

    anyio.run(sdk_send, backend="trio")
    assert sdk_events and {e.throttle_time for e in sdk_events} == {1.0}, sdk_events
    assert sum(held) >= 1
    assert reports == [(0, i) for i in range(len(reports))]
    events = _produce_librdkafka(proxy, "dave", topic, [b"umbrella-ck"])
    assert events and {e.throttle_time for e in events if e.throttle_time} == {1.0}, events
    _create(proxy, "bob", topic)
    free = _produce_librdkafka(proxy, "bob", topic, [b"globex"] * 3)
    assert [e for e in free if e.throttle_time > 0] == []
    seen = _metrics(proxy)
    told = seen[_throttled("trafka_proxy_tenant_throttle_seconds_total", "umbrella", "request")]
    assert told >= len(sdk_events) + 1
    assert proxy.statistics.filters["tenant_quotas"]["handled_ns"]["umbrella"] > 0
    for tenant in ("umbrella", "globex"):
        assert seen[("trafka_proxy_tenant_request_time_seconds_total", (("tenant", tenant),))] > 0
    assert _throttled("trafka_proxy_tenant_throttle_seconds_total", "globex", "request") not in seen
