"""OpenTelemetry metrics (OTLP ``MetricsData``) in protobuf: what KIP-714 clients push.

PushTelemetry (key 72) carries a client's metrics as the protobuf encoding of
OTLP's ``opentelemetry.proto.metrics.v1.MetricsData``. This module encodes and
decodes the part of it Kafka clients use, with a small protobuf reader and
writer of its own (no protobuf dependency). Pure: bytes in, bytes out.

Rules and invariants:

* The data model is flat: a :class:`Metric` carries its resource's attributes
  and its instrumentation scope's name, so that a decoded push is one list.
  :func:`encode_metrics` writes one ResourceMetrics with one ScopeMetrics.
* Kinds: ``gauge`` and ``sum`` with :class:`DataPoint` values (an ``int`` is
  written as ``as_int``, a ``float`` as ``as_double``), ``histogram`` and
  ``summary`` decoded to their count and sum (buckets and quantiles are read
  past). Sums carry their aggregation temporality (1 delta, 2 cumulative) and
  monotonicity.
* Attribute values: strings, booleans, integers, floats and bytes both ways;
  arrays and key-value lists are decoded to lists and dicts.
* Decoding never trusts a length: every length-delimited field is checked
  against the bytes actually left before anything is read, a varint is at most
  10 bytes, and nesting is bounded, so a hostile push costs at most its own
  size. Malformed input raises :class:`OtlpError`; unknown fields are skipped
  (protobuf's forward compatibility).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from ._wire import _b_varbits, uvarint_bytes
from .errors import DecodeError, TrafkaError

__all__ = [
    "CUMULATIVE",
    "DELTA",
    "DataPoint",
    "Metric",
    "OtlpError",
    "decode_metrics",
    "encode_metrics",
]

DELTA = 1
CUMULATIVE = 2
_KINDS = {5: "gauge", 7: "sum", 9: "histogram", 11: "summary"}
_KIND_FIELDS = {kind: number for number, kind in _KINDS.items()}
_MAX_DEPTH = 16
_DOUBLE = struct.Struct("<d")
_FIXED64 = struct.Struct("<Q")
_SFIXED64 = struct.Struct("<q")


class OtlpError(TrafkaError):
    """Bytes that are not a well-formed OTLP ``MetricsData``."""


@dataclasses.dataclass(frozen=True, slots=True)
class DataPoint:
    """One value of a metric, at ``time_unix_nano`` (over the interval from
    ``start_time_unix_nano`` for sums); ``count`` only for histograms and
    summaries (whose ``value`` is then their sum)."""

    value: int | float
    time_unix_nano: int = 0
    start_time_unix_nano: int = 0
    attributes: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    count: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class Metric:
    """A metric with its points; ``resource`` and ``scope`` say where it came from."""

    name: str
    kind: str
    points: tuple[DataPoint, ...]
    description: str = ""
    unit: str = ""
    temporality: int = 0
    monotonic: bool = False
    resource: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    scope: str = ""


# -- encoding --------------------------------------------------------------------------------


def encode_metrics(
    metrics: Iterable[Metric],
    *,
    resource: Mapping[str, Any] | None = None,
    scope: str = "",
    scope_version: str = "",
) -> bytes:
    """A ``MetricsData`` holding ``metrics`` under one resource and scope.

    Raises:
        ValueError: an unknown kind, or a value or attribute of a type OTLP has
            no field for.
    """
    scope_body = _string(1, scope) + _string(2, scope_version)
    scope_metrics = _message(1, scope_body) + b"".join(_message(2, _metric(m)) for m in metrics)
    resource_body = b"".join(_message(1, _key_value(k, v)) for k, v in (resource or {}).items())
    resource_metrics = _message(1, resource_body) + _message(2, scope_metrics)
    return _message(1, resource_metrics)


def _metric(metric: Metric) -> bytes:
    if metric.kind not in ("gauge", "sum"):
        raise ValueError(f"cannot encode metric kind {metric.kind!r} (only gauge and sum)")
    points = b"".join(_message(1, _point(p)) for p in metric.points)
    if metric.kind == "sum":
        points += _varint_field(2, metric.temporality) + _varint_field(3, int(metric.monotonic))
    body = _string(1, metric.name) + _string(2, metric.description) + _string(3, metric.unit)
    return body + _message(_KIND_FIELDS[metric.kind], points)


def _point(point: DataPoint) -> bytes:
    out = [_message(7, _key_value(k, v)) for k, v in point.attributes.items()]
    if point.start_time_unix_nano:
        out.append(_tag(2, 1) + _FIXED64.pack(point.start_time_unix_nano))
    out.append(_tag(3, 1) + _FIXED64.pack(point.time_unix_nano))
    value = point.value
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"a data point's value must be an int or a float, not {value!r}")
    if isinstance(value, int):
        out.append(_tag(6, 1) + _SFIXED64.pack(value))
    else:
        out.append(_tag(4, 1) + _DOUBLE.pack(value))
    return b"".join(out)


def _key_value(key: str, value: Any) -> bytes:
    return _string(1, key) + _message(2, _any_value(value))


def _any_value(value: Any) -> bytes:
    if isinstance(value, str):
        return _message(1, value.encode())
    if isinstance(value, bool):
        return _varint_field(2, int(value), always=True)
    if isinstance(value, int):
        return _varint_field(3, value & 0xFFFF_FFFF_FFFF_FFFF, always=True)
    if isinstance(value, float):
        return _tag(4, 1) + _DOUBLE.pack(value)
    if isinstance(value, bytes | bytearray):
        return _message(7, bytes(value))
    raise ValueError(f"cannot encode attribute value {value!r}")


def _tag(number: int, wire_type: int) -> bytes:
    return uvarint_bytes((number << 3) | wire_type)


def _varint_field(number: int, value: int, *, always: bool = False) -> bytes:
    if not value and not always:
        return b""  # proto3: a default scalar is not written
    return _tag(number, 0) + uvarint_bytes(value)


def _message(number: int, body: bytes) -> bytes:
    return _tag(number, 2) + uvarint_bytes(len(body)) + body


def _string(number: int, text: str) -> bytes:
    return _message(number, text.encode()) if text else b""


# -- decoding --------------------------------------------------------------------------------


def decode_metrics(data: bytes) -> list[Metric]:
    """Every metric of a ``MetricsData``, in order, with its resource and scope.

    Raises:
        OtlpError: the bytes are not a well-formed ``MetricsData``.
    """
    view = memoryview(bytes(data))
    out: list[Metric] = []
    for number, value in _fields(view, 0):
        if number == 1:
            out.extend(_resource_metrics(_bytes(value, "ResourceMetrics")))
    return out


def _resource_metrics(view: memoryview) -> Iterator[Metric]:
    resource: dict[str, Any] = {}
    scopes: list[memoryview] = []
    for number, value in _fields(view, 1):
        if number == 1:
            for n, v in _fields(_bytes(value, "Resource"), 2):
                if n == 1:
                    key, attr = _decode_key_value(_bytes(v, "KeyValue"), 3)
                    resource[key] = attr
        elif number == 2:
            scopes.append(_bytes(value, "ScopeMetrics"))
    for scope_view in scopes:
        scope = ""
        metrics: list[memoryview] = []
        for number, value in _fields(scope_view, 2):
            if number == 1:
                for n, v in _fields(_bytes(value, "InstrumentationScope"), 3):
                    if n == 1:
                        scope = _text(v, "scope name")
            elif number == 2:
                metrics.append(_bytes(value, "Metric"))
        for metric_view in metrics:
            yield _decode_metric(metric_view, resource, scope)


def _decode_metric(view: memoryview, resource: dict[str, Any], scope: str) -> Metric:
    name = description = unit = ""
    kind = ""
    points: list[DataPoint] = []
    temporality = 0
    monotonic = False
    for number, value in _fields(view, 3):
        if number == 1:
            name = _text(value, "metric name")
        elif number == 2:
            description = _text(value, "metric description")
        elif number == 3:
            unit = _text(value, "metric unit")
        elif number in _KINDS:
            kind = _KINDS[number]
            for n, v in _fields(_bytes(value, kind), 4):
                if n == 1:
                    points.append(_decode_point(_bytes(v, "data point"), kind))
                elif n == 2 and kind in ("sum", "histogram"):
                    temporality = _int(v, "aggregation temporality")
                elif n == 3 and kind == "sum":
                    monotonic = bool(_int(v, "is_monotonic"))
    if not kind:
        raise OtlpError(f"metric {name!r} has no data (gauge, sum, histogram or summary)")
    return Metric(
        name=name,
        kind=kind,
        points=tuple(points),
        description=description,
        unit=unit,
        temporality=temporality,
        monotonic=monotonic,
        resource=resource,
        scope=scope,
    )


def _decode_point(view: memoryview, kind: str) -> DataPoint:
    attributes: dict[str, Any] = {}
    start = time = 0
    value: int | float | None = None
    count: int | None = None
    attributes_field = 9 if kind == "histogram" else 7
    for number, raw in _fields(view, 5):
        if number == attributes_field:
            key, attr = _decode_key_value(_bytes(raw, "KeyValue"), 6)
            attributes[key] = attr
        elif number == 2:
            start = _fixed(raw, "start_time_unix_nano")
        elif number == 3:
            time = _fixed(raw, "time_unix_nano")
        elif kind in ("gauge", "sum"):
            if number == 4:
                value = _DOUBLE.unpack(_fixed_bytes(raw, "as_double"))[0]
            elif number == 6:
                value = _SFIXED64.unpack(_fixed_bytes(raw, "as_int"))[0]
        elif number == 4:  # histogram and summary: count (fixed64), then sum (double)
            count = _fixed(raw, "count")
        elif number == 5:
            value = _DOUBLE.unpack(_fixed_bytes(raw, "sum"))[0]
    return DataPoint(
        value=0 if value is None else value,
        time_unix_nano=time,
        start_time_unix_nano=start,
        attributes=attributes,
        count=count,
    )


def _decode_key_value(view: memoryview, depth: int) -> tuple[str, Any]:
    key = ""
    value: Any = None
    for number, raw in _fields(view, depth):
        if number == 1:
            key = _text(raw, "attribute key")
        elif number == 2:
            value = _decode_any(_bytes(raw, "AnyValue"), depth + 1)
    return key, value


def _decode_any(view: memoryview, depth: int) -> Any:
    value: Any = None
    for number, raw in _fields(view, depth):
        if number == 1:
            value = _text(raw, "string value")
        elif number == 2:
            value = bool(_int(raw, "bool value"))
        elif number == 3:
            unsigned = _int(raw, "int value")
            value = unsigned - (1 << 64) if unsigned >= 1 << 63 else unsigned
        elif number == 4:
            value = _DOUBLE.unpack(_fixed_bytes(raw, "double value"))[0]
        elif number == 5:
            value = [
                _decode_any(_bytes(v, "AnyValue"), depth + 1)
                for n, v in _fields(_bytes(raw, "array value"), depth + 1)
                if n == 1
            ]
        elif number == 6:
            value = dict(
                _decode_key_value(_bytes(v, "KeyValue"), depth + 1)
                for n, v in _fields(_bytes(raw, "kvlist value"), depth + 1)
                if n == 1
            )
        elif number == 7:
            value = bytes(_bytes(raw, "bytes value"))
    return value


# -- protobuf reading ------------------------------------------------------------------------

# A field as read: (wire type, value): a varint's int, or the field's bytes.
_Raw = tuple[int, int | memoryview]


def _fields(view: memoryview, depth: int) -> Iterator[tuple[int, _Raw]]:
    """``(field number, raw value)`` of each field of a message, in order."""
    if depth > _MAX_DEPTH:
        raise OtlpError("OTLP message nested too deeply")
    pos, end = 0, len(view)
    while pos < end:
        key, pos = _read_varint(view, pos)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise OtlpError("protobuf field number 0")
        if wire_type == 0:
            value, pos = _read_varint(view, pos)
            yield number, (0, value)
        elif wire_type in (1, 5):
            size = 8 if wire_type == 1 else 4
            if pos + size > end:
                raise OtlpError("truncated fixed-size protobuf field")
            yield number, (wire_type, view[pos : pos + size])
            pos += size
        elif wire_type == 2:
            length, pos = _read_varint(view, pos)
            if length > end - pos:
                raise OtlpError(
                    f"protobuf field {number} claims {length} bytes; {end - pos} are left"
                )
            yield number, (2, view[pos : pos + length])
            pos += length
        else:
            raise OtlpError(f"unsupported protobuf wire type {wire_type}")


def _read_varint(view: memoryview, pos: int) -> tuple[int, int]:
    """A protobuf varint (unsigned, at most 10 bytes) at ``pos``, as 64 bits."""
    try:
        value, pos = _b_varbits(view, pos, 10, "protobuf varint")
    except DecodeError as exc:
        raise OtlpError(str(exc)) from None
    return value & 0xFFFF_FFFF_FFFF_FFFF, pos


def _bytes(raw: _Raw, what: str) -> memoryview:
    wire_type, value = raw
    if wire_type != 2 or isinstance(value, int):
        raise OtlpError(f"{what}: expected a length-delimited field")
    return value


def _text(raw: _Raw, what: str) -> str:
    try:
        return bytes(_bytes(raw, what)).decode("utf-8")
    except UnicodeDecodeError:
        raise OtlpError(f"{what} is not UTF-8") from None


def _int(raw: _Raw, what: str) -> int:
    wire_type, value = raw
    if wire_type != 0 or not isinstance(value, int):
        raise OtlpError(f"{what}: expected a varint")
    return value


def _fixed_bytes(raw: _Raw, what: str) -> bytes:
    wire_type, value = raw
    if wire_type != 1 or isinstance(value, int):
        raise OtlpError(f"{what}: expected a 64-bit field")
    return bytes(value)


def _fixed(raw: _Raw, what: str) -> int:
    return int(_FIXED64.unpack(_fixed_bytes(raw, what))[0])
