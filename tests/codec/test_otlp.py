"""trafka.codec.otlp against OpenTelemetry's own generated protobuf classes
(opentelemetry-proto): what trafka encodes they parse, what they write trafka
decodes, and malformed bytes fail with OtlpError without reading past them."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.metrics.v1 import metrics_pb2

from trafka.codec.otlp import (
    CUMULATIVE,
    DELTA,
    DataPoint,
    Metric,
    OtlpError,
    decode_metrics,
    encode_metrics,
)

attr_values = st.one_of(
    st.text(max_size=20),
    st.booleans(),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False),
    st.binary(max_size=10),
)
attributes = st.dictionaries(st.text(min_size=1, max_size=10), attr_values, max_size=4)
values = st.one_of(st.integers(min_value=-(2**63), max_value=2**63 - 1), st.floats(allow_nan=False))
points = st.builds(
    DataPoint,
    value=values,
    time_unix_nano=st.integers(min_value=1, max_value=2**64 - 1),
    start_time_unix_nano=st.integers(min_value=0, max_value=2**64 - 1),
    attributes=attributes,
)
metrics = st.builds(
    Metric,
    name=st.text(min_size=1, max_size=30),
    kind=st.sampled_from(["gauge", "sum"]),
    points=st.lists(points, max_size=3).map(tuple),
    description=st.text(max_size=10),
    unit=st.text(max_size=5),
    temporality=st.sampled_from([DELTA, CUMULATIVE]),
    monotonic=st.booleans(),
)


def _value(any_value: common_pb2.AnyValue) -> object:
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


@settings(max_examples=60, deadline=None)
@given(ms=st.lists(metrics, max_size=4), resource=attributes, scope=st.text(max_size=10))
def test_what_trafka_encodes_the_official_classes_parse(
    ms: list[Metric], resource: dict[str, object], scope: str
) -> None:
    data = encode_metrics(ms, resource=resource, scope=scope, scope_version="1.0")
    parsed = metrics_pb2.MetricsData.FromString(data)
    [rm] = parsed.resource_metrics
    assert {kv.key: _value(kv.value) for kv in rm.resource.attributes} == resource
    [sm] = rm.scope_metrics
    assert (sm.scope.name, sm.scope.version) == (scope, "1.0")
    assert [m.name for m in sm.metrics] == [m.name for m in ms]
    for mine, theirs in zip(ms, sm.metrics, strict=True):
        assert theirs.WhichOneof("data") == mine.kind
        data_points = getattr(theirs, mine.kind).data_points
        if mine.kind == "sum":
            temporality = theirs.sum.aggregation_temporality
            assert (temporality, theirs.sum.is_monotonic) == (mine.temporality, mine.monotonic)
        for p, q in zip(mine.points, data_points, strict=True):
            got = q.as_int if isinstance(p.value, int) else q.as_double
            assert got == p.value or (math.isinf(p.value) and got == p.value)
            assert (q.time_unix_nano, q.start_time_unix_nano) == (
                p.time_unix_nano,
                p.start_time_unix_nano,
            )
            assert {kv.key: _value(kv.value) for kv in q.attributes} == p.attributes
    # And back: trafka decodes its own bytes to what it encoded.
    decoded = decode_metrics(data)
    assert [(m.name, m.kind, m.points, m.scope) for m in decoded] == [
        (m.name, m.kind, m.points, scope) for m in ms
    ]


def test_what_the_official_classes_write_trafka_decodes() -> None:
    data = metrics_pb2.MetricsData()
    rm = data.resource_metrics.add()
    kv = rm.resource.attributes.add(key="client_software_name")
    kv.value.string_value = "librdkafka"
    sm = rm.scope_metrics.add()
    sm.scope.name = "librdkafka"
    m = sm.metrics.add(name="org.apache.kafka.producer.node.request.latency.max", unit="ms")
    p = m.gauge.data_points.add(time_unix_nano=7, as_double=12.5)
    attr = p.attributes.add(key="node_id")
    attr.value.int_value = -1
    arr = p.attributes.add(key="list")
    arr.value.array_value.values.add().string_value = "x"
    kvl = p.attributes.add(key="kv")
    inner = kvl.value.kvlist_value.values.add(key="a")
    inner.value.bool_value = True
    s = sm.metrics.add(name="org.apache.kafka.producer.connection.creations")
    s.sum.aggregation_temporality = 1
    s.sum.is_monotonic = True
    s.sum.data_points.add(time_unix_nano=8, start_time_unix_nano=3, as_int=4)
    h = sm.metrics.add(name="latency.histogram")
    h.histogram.aggregation_temporality = 2
    hp = h.histogram.data_points.add(time_unix_nano=9, count=3, sum=1.5)
    hp.bucket_counts.extend([1, 2])
    hp.explicit_bounds.append(0.5)
    hp.attributes.add(key="topic").value.string_value = "t"
    q = sm.metrics.add(name="latency.summary")
    q.summary.data_points.add(time_unix_nano=10, count=2, sum=4.0).quantile_values.add(
        quantile=0.5, value=2.0
    )
    gauge, total, histogram, summary = decode_metrics(data.SerializeToString())
    assert gauge.resource == {"client_software_name": "librdkafka"}
    assert (gauge.scope, gauge.kind, gauge.unit) == ("librdkafka", "gauge", "ms")
    assert gauge.points == (
        DataPoint(12.5, 7, 0, {"node_id": -1, "list": ["x"], "kv": {"a": True}}),
    )
    assert (total.kind, total.temporality, total.monotonic) == ("sum", DELTA, True)
    assert total.points == (DataPoint(4, 8, 3),)
    assert histogram.temporality == CUMULATIVE
    assert histogram.points == (DataPoint(1.5, 9, 0, {"topic": "t"}, count=3),)
    assert summary.points == (DataPoint(4.0, 10, 0, {}, count=2),)


@pytest.mark.parametrize(
    "data",
    [
        b"\x0a\xff\xff\xff\x7f",  # ResourceMetrics claiming 268 MB, none sent
        b"\x0a\x05\x12\x03\x12\x09",  # a Metric claiming more than its ScopeMetrics holds
        b"\x0a",  # no length
        b"\x0a\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01",  # an 11-byte varint
        b"\x0b",  # wire type 3 (groups)
        b"\x00\x01",  # field number 0
        b"\x0a\x04\x12\x02\x12\x00",  # a Metric with no data
        b"\x08\x01",  # ResourceMetrics as a varint
    ],
)
def test_malformed_bytes_fail_cleanly(data: bytes) -> None:
    with pytest.raises(OtlpError):
        decode_metrics(data)


def _field(number: int, body: bytes) -> bytes:
    """A length-delimited protobuf field (the length as a varint)."""
    length, size = bytearray(), len(body)
    while True:
        length.append((size & 0x7F) | (0x80 if size > 0x7F else 0))
        size >>= 7
        if not size:
            break
    return bytes([number << 3 | 2]) + bytes(length) + body


def test_deep_nesting_is_refused() -> None:
    value = _field(1, b"x")  # AnyValue{string_value}
    for _ in range(40):  # AnyValue{array_value{values: AnyValue}} ...
        value = _field(5, _field(1, value))
    point = _field(7, _field(1, b"k") + _field(2, value)) + b"\x19" + b"\0" * 8
    metric = _field(1, b"m") + _field(5, _field(1, point))
    data = _field(1, _field(2, _field(2, metric)))
    with pytest.raises(OtlpError, match="nested"):
        decode_metrics(data)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=200))
def test_arbitrary_bytes_decode_or_fail_with_otlp_error(data: bytes) -> None:
    try:
        decode_metrics(data)
    except OtlpError:
        pass


def test_encoding_refuses_what_otlp_cannot_hold() -> None:
    with pytest.raises(ValueError, match="kind"):
        encode_metrics([Metric("h", "histogram", ())])
    with pytest.raises(ValueError, match="int or a float"):
        encode_metrics([Metric("g", "gauge", (DataPoint("x", 1),))])  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="attribute"):
        encode_metrics([Metric("g", "gauge", (DataPoint(1, 1, 0, {"k": object()}),))])
