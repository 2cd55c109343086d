"""OpenTelemetry traces and metrics of the SDK's clients (``trafka.sdk.tracing``,
``trafka.sdk.otel_metrics``), against brokerlite and Apache Kafka 4, recorded by
OpenTelemetry's SDK (its in-memory span exporter and metric reader).

What the spans must be comes from OpenTelemetry's semantic conventions for
Kafka (https://opentelemetry.io/docs/specs/semconv/messaging/kafka/, status
Development, as of the conventions' repository in August 2026) and its
messaging spans (https://opentelemetry.io/docs/specs/semconv/messaging/messaging-spans/):
a producer "Send" span per record named ``send {topic}``, kind PRODUCER, whose
context is the message's creation context; a pull consumer's "Receive" span
named ``poll {topic}``, kind CLIENT, ``messaging.operation.type`` ``receive``,
linking each message's creation context (batch receiving); a "Process" span of
kind CONSUMER, ``process {topic}``. The context travels in the record's headers
as W3C Trace Context's ``traceparent``
(https://www.w3.org/TR/trace-context/#traceparent-header:
``00-<trace id, 32 hex>-<parent id, 16 hex>-<flags>``).
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from typing import Any

import anyio
import pytest
from opentelemetry import context, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from sdk_brokers import fresh, share_queue

from trafka.codec import ErrorCode, KafkaError
from trafka.compat import confluent
from trafka.sdk import NewTopic, TopicPartition, blocking, open_admin, open_consumer, open_producer
from trafka.sdk.config import ProducerConfig
from trafka.sdk.errors import ConfigError
from trafka.sdk.share_consumer import open_share_consumer
from trafka.sdk.tracing import process_span

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(180)]

SpanKind = trace.SpanKind


@pytest.fixture
def anyio_backend() -> str:
    return "trio"


@pytest.fixture
def spans() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    yield provider, exporter
    provider.shutdown()


def traceparent(span: Any) -> bytes:
    """W3C's ``traceparent`` of a span (version 00; the flags: sampled, and
    Trace Context level 2's random trace id, which OpenTelemetry's SDK sets)."""
    ctx = span.get_span_context()
    return b"00-%032x-%016x-%02x" % (ctx.trace_id, ctx.span_id, ctx.trace_flags)


async def make_topic(bs: str, topic: str, partitions: int = 1, **configs: str) -> None:
    async with open_admin(bootstrap_servers=bs) as admin:
        await admin.create_topics([NewTopic(topic, partitions, configs=configs)])
        await admin.list_offsets({TopicPartition(topic, p): "latest" for p in range(partitions)})


async def read_all(bs: str, topic: str, count: int, **settings: Any) -> list[Any]:
    records: list[Any] = []
    # 50 ms fetches: the close waits for the fetch the broker holds (#60)
    settings.setdefault("fetch_max_wait_ms", 50)
    async with open_consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", **settings
    ) as consumer:
        if "group_id" in settings:
            consumer.subscribe([topic])
        else:
            consumer.assign([TopicPartition(topic, 0)])
        while len(records) < count:
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                records.extend(batch)
    return records


async def test_send_spans_and_their_context_in_the_headers(
    brokerlite_peer: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """One ``send`` span per record, child of the caller's span, ended at the
    acknowledgement with the partition and offset the broker gave; its
    ``traceparent`` is in the record's headers, the application's headers kept."""
    provider, exporter = spans
    bs, topic = brokerlite_peer, fresh("otel-send")
    with anyio.fail_after(60):
        await make_topic(bs, topic)
        app = provider.get_tracer("app")
        async with open_producer(
            bootstrap_servers=bs, client_id="otel-p", otel_tracer_provider=provider
        ) as producer:
            with app.start_as_current_span("request") as parent:
                futures = [
                    await producer.send(topic, b"v0", key=b"k0", headers=[("h", b"x")]),
                    await producer.send(topic, b"v1", key=b"\xff\xfe"),  # not UTF-8
                    await producer.send(topic, None, key=b"gone"),  # a tombstone
                ]
            reports = [await f for f in futures]
        records = await read_all(bs, topic, 3)
    sent = [s for s in exporter.get_finished_spans() if s.name == f"send {topic}"]
    assert len(sent) == 3
    sent.sort(key=lambda s: s.attributes["messaging.kafka.offset"])
    for span, report, record in zip(sent, reports, records, strict=True):
        assert span.kind is SpanKind.PRODUCER
        assert span.parent is not None and span.parent.span_id == parent.get_span_context().span_id
        assert span.context.trace_id == parent.get_span_context().trace_id
        attrs = span.attributes
        assert attrs["messaging.system"] == "kafka"
        assert attrs["messaging.operation.name"] == "send"
        assert attrs["messaging.operation.type"] == "send"
        assert attrs["messaging.destination.name"] == topic
        assert attrs["messaging.client.id"] == "otel-p"
        assert attrs["messaging.destination.partition.id"] == str(report.partition) == "0"
        assert attrs["messaging.kafka.offset"] == report.offset == record.offset
        assert "error.type" not in attrs
        assert dict(record.headers)["traceparent"] == traceparent(span)
    assert sent[0].attributes["messaging.kafka.message.key"] == "k0"
    assert "messaging.kafka.message.key" not in sent[1].attributes
    assert sent[2].attributes["messaging.kafka.message.key"] == "gone"
    assert sent[2].attributes["messaging.kafka.message.tombstone"] is True
    assert "messaging.kafka.message.tombstone" not in sent[0].attributes
    assert records[0].headers[0] == ("h", b"x")


async def test_a_remote_parent_and_its_tracestate_cross_the_topic(
    brokerlite_peer: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """Sent under a remote parent (as a service continuing a trace it was
    called with): the send span continues its trace, ``tracestate`` goes into
    the headers beside ``traceparent`` (W3C Trace Context), and the consumer's
    link carries both back."""
    provider, exporter = spans
    bs, topic = brokerlite_peer, fresh("otel-state")
    remote = trace.SpanContext(
        trace_id=0x0AF7651916CD43DD8448EB211C80319C,
        span_id=0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=trace.TraceFlags(trace.TraceFlags.SAMPLED),
        trace_state=trace.TraceState([("vendor", "opaque-1")]),
    )
    token = context.attach(trace.set_span_in_context(trace.NonRecordingSpan(remote)))
    try:
        with anyio.fail_after(60):
            await make_topic(bs, topic)
            async with open_producer(
                bootstrap_servers=bs, otel_tracer_provider=provider
            ) as producer:
                await (await producer.send(topic, b"v"))
    finally:
        context.detach(token)
    with anyio.fail_after(60):
        (record,) = await read_all(bs, topic, 1, otel_tracer_provider=provider)
    finished = exporter.get_finished_spans()
    (send,) = [s for s in finished if s.name == f"send {topic}"]
    assert send.context.trace_id == remote.trace_id and send.parent.span_id == remote.span_id
    headers = dict(record.headers)
    assert headers["traceparent"] == traceparent(send)
    assert headers["tracestate"] == b"vendor=opaque-1"
    ((link,),) = [s.links for s in finished if s.name == f"poll {topic}"]
    assert link.context.span_id == send.context.span_id
    assert link.context.trace_state == remote.trace_state


async def test_a_failed_send_ends_its_span_with_error_type(
    brokerlite_peer: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """A record the broker refuses: the span's status is ERROR and ``error.type``
    the Kafka error's name (the conventions' examples are Kafka error names); a
    record ``send()`` refuses (headers that are not pairs) ends its span too,
    with the exception's class name."""
    provider, exporter = spans
    bs, topic = brokerlite_peer, fresh("otel-fail")
    with anyio.fail_after(60):
        await make_topic(bs, topic, **{"max.message.bytes": "200"})
        async with open_producer(bootstrap_servers=bs, otel_tracer_provider=provider) as producer:
            future = await producer.send(topic, b"x" * 1000)
            with pytest.raises(KafkaError) as raised:
                await future
            with pytest.raises(TypeError, match="headers"):  # refused by send() itself
                await producer.send(topic, b"x", headers=[42])  # type: ignore[list-item]
    assert raised.value.code is ErrorCode.MESSAGE_TOO_LARGE
    span, refused = [s for s in exporter.get_finished_spans() if s.name == f"send {topic}"]
    assert span.status.status_code is trace.StatusCode.ERROR
    assert span.attributes["error.type"] == "MESSAGE_TOO_LARGE"
    assert "messaging.kafka.offset" not in span.attributes
    assert refused.status.status_code is trace.StatusCode.ERROR
    assert refused.attributes["error.type"] == "ArgumentTypeError"


@pytest.mark.compat("SDK", "OpenTelemetry: send spans, traceparent in headers, poll spans linked")
async def test_poll_span_links_every_record_and_process_span(
    brokerlite_peer: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """A poll that hands records out makes one ``poll`` span (kind CLIENT) with
    the batch's size, the group, and a link per record to its send span, the
    link saying the record's partition and offset; :func:`process_span` makes
    a CONSUMER span linked to the record's send span."""
    provider, exporter = spans
    bs, topic, group = brokerlite_peer, fresh("otel-poll"), fresh("otel-group")
    with anyio.fail_after(60):
        await make_topic(bs, topic)
        async with open_producer(bootstrap_servers=bs, otel_tracer_provider=provider) as producer:
            for i in range(4):
                await producer.send(topic, b"v%d" % i)
        async with open_producer(bootstrap_servers=bs) as untraced:  # W3C's header, not
            await untraced.send(topic, b"untraced", headers=[("traceparent", b"garbage")])
        records = await read_all(
            bs, topic, 5, group_id=group, client_id="otel-c", otel_tracer_provider=provider
        )
        with process_span(records[0], group_id=group, tracer_provider=provider) as span:
            pass
    finished = exporter.get_finished_spans()
    send = {
        s.attributes["messaging.kafka.offset"]: s for s in finished if s.name.startswith("send")
    }
    polls = [s for s in finished if s.name == f"poll {topic}"]
    assert polls and sum(p.attributes["messaging.batch.message_count"] for p in polls) == 5
    links = [link for p in polls for link in p.links]
    # The record whose traceparent is not W3C's has no link.
    assert sorted(link.attributes["messaging.kafka.offset"] for link in links) == [0, 1, 2, 3]
    for link in links:
        origin = send[link.attributes["messaging.kafka.offset"]].context
        assert (link.context.trace_id, link.context.span_id) == (origin.trace_id, origin.span_id)
        assert link.attributes["messaging.destination.partition.id"] == "0"
    for poll in polls:
        assert poll.kind is SpanKind.CLIENT
        assert poll.attributes["messaging.operation.name"] == "poll"
        assert poll.attributes["messaging.operation.type"] == "receive"
        assert poll.attributes["messaging.consumer.group.name"] == group
        assert poll.attributes["messaging.client.id"] == "otel-c"
        assert poll.attributes["messaging.destination.name"] == topic
    (processed,) = [s for s in finished if s.name == f"process {topic}"]
    assert processed.kind is SpanKind.CONSUMER
    assert processed.context.span_id == span.get_span_context().span_id
    assert processed.attributes["messaging.kafka.offset"] == 0
    assert processed.attributes["messaging.operation.type"] == "process"
    assert [link.context.span_id for link in processed.links] == [send[0].context.span_id]


async def test_share_consumer_poll_spans(
    brokerlite_peer: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """A share consumer's polls (KIP-932) make the same ``poll`` spans, the
    share group as ``messaging.consumer.group.name``, linked to the sends."""
    provider, exporter = spans
    bs = brokerlite_peer
    topic, group = await share_queue(bs)
    with anyio.fail_after(90):
        async with open_producer(bootstrap_servers=bs, otel_tracer_provider=provider) as producer:
            for i in range(3):
                await producer.send(topic, b"s%d" % i)
        got: list[Any] = []
        async with open_share_consumer(
            topic, bootstrap_servers=bs, group_id=group, otel_tracer_provider=provider
        ) as consumer:
            while len(got) < 3:
                got += await consumer.poll(timeout_ms=500)
    finished = exporter.get_finished_spans()
    sends = {s.context.span_id for s in finished if s.name == f"send {topic}"}
    polls = [s for s in finished if s.name == f"poll {topic}"]
    assert sum(p.attributes["messaging.batch.message_count"] for p in polls) == 3
    assert {link.context.span_id for p in polls for link in p.links} == sends
    assert {p.attributes["messaging.consumer.group.name"] for p in polls} == {group}


def test_blocking_clients_and_confluent_compat(
    brokerlite_peer: str, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """The blocking producer and consumer and ``trafka.compat.confluent`` take
    the same setting (``otel.tracer.provider`` in a confluent-kafka dict)."""
    provider, exporter = spans
    bs, topic = brokerlite_peer, fresh("otel-blocking")
    with blocking.Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    with blocking.Producer(bootstrap_servers=bs, otel_tracer_provider=provider) as producer:
        first = producer.send(topic, b"b0", key=b"k").result(timeout=30)
    compat = confluent.Producer(
        {"bootstrap.servers": bs, "otel.tracer.provider": provider, "client.id": "cf"}
    )
    compat.produce(topic, b"c0", key=b"ck")
    assert compat.flush(30) == 0
    consumer = confluent.Consumer(
        {
            "bootstrap.servers": bs,
            "group.id": fresh("otel-cf"),
            "auto.offset.reset": "earliest",
            "otel.tracer.provider": provider,
        }
    )
    consumer.subscribe([topic])
    got = []
    try:
        for _ in range(60):
            got += [m for m in consumer.consume(2, timeout=1) if m.error() is None]
            if len(got) >= 2:
                break
    finally:
        consumer.close()
    assert [m.value() for m in got] == [b"b0", b"c0"]
    finished = exporter.get_finished_spans()
    sends = [s for s in finished if s.name == f"send {topic}"]
    assert [s.attributes["messaging.kafka.offset"] for s in sends] == [first.offset, 1]
    assert sends[1].attributes["messaging.client.id"] == "cf"
    assert {dict(m.headers())["traceparent"] for m in got} == {traceparent(s) for s in sends}
    linked = {
        link.context.span_id for s in finished if s.name == f"poll {topic}" for link in s.links
    }
    assert linked == {s.context.span_id for s in sends}
    with blocking.Consumer(
        bootstrap_servers=bs, auto_offset_reset="earliest", otel_tracer_provider=provider
    ) as reader:
        reader.assign([TopicPartition(topic, 0)])
        assert reader.getone(timeout_ms=30_000) is not None
    assert any(
        s.name == f"poll {topic}" and "messaging.consumer.group.name" not in s.attributes
        for s in exporter.get_finished_spans()
    )


# Produces and consumes without the setting, lists what of OpenTelemetry is
# imported, then produces with otel.enabled and OpenTelemetry's global provider.
_SCRIPT = """
import sys, trio
from trafka.sdk import blocking, open_consumer, TopicPartition
with blocking.Producer(bootstrap_servers=BS) as producer:
    producer.send(TOPIC, b"plain").result(timeout=30)
async def read():
    async with open_consumer(bootstrap_servers=BS, auto_offset_reset="earliest") as c:
        c.assign([TopicPartition(TOPIC, 0)])
        with trio.fail_after(30):
            while not await c.getmany(timeout_ms=500):
                pass
trio.run(read)
print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))

from opentelemetry import context, trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)
with blocking.Producer({"bootstrap.servers": BS, "otel.enabled": "true"}) as producer:
    producer.send(TOPIC, b"traced").result(timeout=30)
print([s.name for s in exporter.get_finished_spans()])
"""


def test_no_opentelemetry_unless_asked_and_global_provider_when_enabled(
    brokerlite_peer: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the setting, producing and consuming import nothing of
    OpenTelemetry (a fresh interpreter); ``otel.enabled`` uses OpenTelemetry's
    global provider; and without the extra installed, ``otel.enabled`` is a
    configuration error."""
    bs, topic = brokerlite_peer, fresh("otel-quiet")
    with blocking.Admin(bootstrap_servers=bs) as admin:
        admin.create_topics([NewTopic(topic, 1)])
    head = f"BS = {bs!r}\nTOPIC = {topic!r}\n"
    out = subprocess.run(
        [sys.executable, "-c", head + textwrap.dedent(_SCRIPT)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.splitlines()
    assert out[-2:] == ["[]", f"['send {topic}']"]
    monkeypatch.setitem(sys.modules, "opentelemetry", None)  # as if not installed
    with pytest.raises(ConfigError, match=r"otel\.enabled.*trafka\[otel\]"):
        ProducerConfig(otel_enabled=True)
    with pytest.raises(confluent.KafkaException, match=r"otel\.enabled"):
        confluent.Consumer({"bootstrap.servers": bs, "group.id": "g", "otel.enabled": True})


async def test_metrics_through_a_meter_provider(brokerlite_peer: str) -> None:
    """The client's metrics as OpenTelemetry instruments: the values of its
    Prometheus series (same names and labels), read from the same statistics."""
    reader = InMemoryMetricReader()
    meters = MeterProvider(metric_readers=[reader])
    bs, topic = brokerlite_peer, fresh("otel-metrics")

    def points(name: str) -> list[Any]:
        data = reader.get_metrics_data()
        if data is None:  # no instrument reported anything
            return []
        return [
            point
            for rm in data.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
            if metric.name == name
            for point in metric.data.data_points
        ]

    with anyio.fail_after(60):
        await make_topic(bs, topic)
        async with open_producer(
            bootstrap_servers=bs, client_id="otel-m", otel_meter_provider=meters
        ) as producer:
            for i in range(7):
                await producer.send(topic, b"%d" % i)
            await producer.flush()
            stats = producer.statistics()
            (sent,) = points("kafka_producer_producer_metrics_record_send")
            assert sent.value == stats.records_sent == 7
            assert dict(sent.attributes) == {"client_id": "otel-m"}
            nodes = points("kafka_producer_producer_node_metrics_request")
            assert {p.attributes["node_id"] for p in nodes} == {
                b.node_name for b in stats.brokers.values()
            }
            (per_topic,) = [
                p
                for p in points("kafka_producer_producer_topic_metrics_record_send")
                if p.attributes["topic"] == topic
            ]
            assert per_topic.value == 7
        records = 0
        async with open_consumer(
            bootstrap_servers=bs,
            group_id=fresh("otel-mg"),
            auto_offset_reset="earliest",
            otel_meter_provider=meters,
        ) as consumer:
            consumer.subscribe([topic])
            while records < 7:
                records += sum(len(b) for b in (await consumer.getmany(timeout_ms=500)).values())
            consumed = points("kafka_consumer_consumer_fetch_manager_metrics_records_consumed")
            assert [p.value for p in consumed] == [consumer.statistics().records_consumed]
            (lag,) = points("kafka_consumer_consumer_fetch_manager_metrics_records_lag")
            assert (lag.attributes["topic"], lag.value) == (topic, 0)
            assert points("kafka_consumer_consumer_coordinator_metrics_join")[0].value >= 1
    # Closed: the instruments report nothing more.
    assert points("kafka_producer_producer_metrics_record_send") == []


@pytest.mark.kafka
@pytest.mark.compat("SDK", "OpenTelemetry: send spans, traceparent in headers, poll spans linked")
async def test_end_to_end_trace_through_kafka_4(
    kafka4: Any, spans: tuple[TracerProvider, InMemorySpanExporter]
) -> None:
    """Against Apache Kafka 4: the consumer's poll span links the producer's
    send span, and a process span made a child of the record's context is in
    the producer's trace."""
    provider, exporter = spans
    bs, topic, group = kafka4.bootstrap_servers, fresh("otel-k4"), fresh("otel-k4g")
    with anyio.fail_after(120):
        await make_topic(bs, topic)
        async with open_producer(bootstrap_servers=bs, otel_tracer_provider=provider) as producer:
            report = await (await producer.send(topic, b"hello", key=b"k"))
        (record,) = await read_all(bs, topic, 1, group_id=group, otel_tracer_provider=provider)
    with process_span(record, tracer_provider=provider, parent_from_record=True):
        pass
    finished = exporter.get_finished_spans()
    (send,) = [s for s in finished if s.name == f"send {topic}"]
    (poll,) = [s for s in finished if s.name == f"poll {topic}"]
    (processed,) = [s for s in finished if s.name == f"process {topic}"]
    assert send.attributes["messaging.kafka.offset"] == report.offset == record.offset
    assert dict(record.headers)["traceparent"] == traceparent(send)
    (link,) = poll.links
    assert link.context.trace_id == send.context.trace_id
    assert link.context.span_id == send.context.span_id
    assert processed.context.trace_id == send.context.trace_id
    assert processed.parent is not None and processed.parent.span_id == send.context.span_id
