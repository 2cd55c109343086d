"""OpenTelemetry traces of the producer and the consumer (the ``otel`` extra).

Spans follow OpenTelemetry's semantic conventions for Kafka (messaging spans,
status Development; :data:`SEMCONV_URL`):

* The producer: one ``send <topic>`` span per record (kind PRODUCER), started
  in ``send()`` as a child of the caller's current span, ended when the record
  is acknowledged (``messaging.destination.partition.id`` and
  ``messaging.kafka.offset`` then) or fails (``error.type``: the Kafka error
  code's name, such as ``UNKNOWN_TOPIC_OR_PARTITION``, else the exception's
  class name; status ERROR). Its context is injected into the record's headers
  (``traceparent``, ``tracestate``, whatever OpenTelemetry's configured text
  map propagator writes), replacing headers of those names the record had.
* The consumer (and the share consumer): one ``poll <topic>`` span (kind
  CLIENT; ``poll`` alone when the records are of several topics) each time a
  poll hands records out, with
  ``messaging.batch.message_count`` and one link per record whose headers carry
  a context (the link says the record's partition and offset). It marks the
  hand-out: a poll that waited for records does not stretch it, and a poll
  that hands nothing out makes no span.
* :func:`process_span`: the ``process <topic>`` span (kind CONSUMER) an
  application opens around its processing of one record, linked to the
  record's context.
* Attributes on every span: ``messaging.system`` ``kafka``,
  ``messaging.operation.name`` and ``.type``, ``messaging.client.id``;
  the consumer's also ``messaging.consumer.group.name`` when it has a group.
  ``messaging.kafka.message.key`` is set for a ``str`` key, or a ``bytes`` key
  that is UTF-8; other keys have no canonical string form and are left out.

Cost: nothing unless the client's ``otel.enabled`` is true or it has an
``otel.tracer.provider`` (then its records skip the producer's hot path, as
with interceptors). This module imports OpenTelemetry only when a client
with one of those settings starts, or :func:`process_span` is called.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from .config.values import ValueSpec, _bool
from .errors import ConfigError

if TYPE_CHECKING:
    from .consumer_types import ConsumerRecord
    from .producer_batches import RecordMetadata
    from .producer_types import ProducerRecord

__all__ = [
    "SEMCONV_URL",
    "ConsumerTracing",
    "ProducerTracing",
    "consumer_tracing",
    "process_span",
    "producer_tracing",
]

log = logging.getLogger("trafka.sdk.tracing")

SEMCONV_URL = "https://opentelemetry.io/docs/specs/semconv/messaging/kafka/"
_SCOPE = "trafka.sdk"


# -- the settings ------------------------------------------------------------------------------


def _installed() -> bool:
    # find_spec of the top-level name finds the package without importing it.
    try:
        return importlib.util.find_spec("opentelemetry") is not None
    except (ImportError, ValueError):
        return False


def otel_enabled(name: str, value: Any) -> bool:
    """The coercion of ``otel.enabled``: a boolean; true needs the ``otel`` extra."""
    on = _bool(name, value)
    if on and not _installed():
        raise ConfigError(f"{name}: OpenTelemetry is not installed (pip install 'trafka[otel]')")
    return on


otel_enabled.value_spec = ValueSpec("boolean", choices=("true", "false"))  # type: ignore[attr-defined]


def otel_provider(method: str) -> Any:
    """The coercion of a provider setting: None, or an object with ``method``
    (a ``TracerProvider``'s ``get_tracer``, a ``MeterProvider``'s ``get_meter``)."""

    def coerce(name: str, value: Any) -> Any:
        if value is None or callable(getattr(value, method, None)):
            return value
        raise ConfigError(
            f"{name} must be an OpenTelemetry provider (with {method}()), got {value!r}"
        )

    coerce.value_spec = ValueSpec(  # type: ignore[attr-defined]
        "OpenTelemetry provider", optional=True, note=f"an object with {method}()"
    )
    return coerce


def traced(config: Any) -> bool:
    """Whether a client with ``config`` makes spans."""
    return bool(config.otel_enabled or config.otel_tracer_provider is not None)


def _tracer(provider: Any) -> Any:
    from opentelemetry import trace

    if provider is None:
        provider = trace.get_tracer_provider()
    return provider.get_tracer(_SCOPE, _version())


def _version() -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("trafka")
    except PackageNotFoundError:
        return None


# -- headers as a carrier ------------------------------------------------------------------------


class _HeaderGetter:
    """OpenTelemetry's ``Getter`` over a record's ``(name, bytes)`` headers."""

    def get(self, carrier: Sequence[tuple[str, bytes | None]], key: str) -> list[str] | None:
        found = [v.decode("latin-1") for k, v in carrier if k == key and v is not None]
        return found or None

    def keys(self, carrier: Sequence[tuple[str, bytes | None]]) -> list[str]:
        return [k for k, _ in carrier]


# Typed Any: OpenTelemetry's Getter is generic on its carrier (and absent
# without the extra, where mypy sees Any anyway).
_GETTER: Any = _HeaderGetter()


def _with_headers(
    headers: Sequence[tuple[str, Any]] | Mapping[str, Any] | None, added: dict[str, str]
) -> list[tuple[str, Any]]:
    """``headers`` (pairs or a mapping) without those named in ``added``, then ``added``."""
    pairs = list(headers.items()) if isinstance(headers, Mapping) else list(headers or ())
    kept = [(k, v) for k, v in pairs if k not in added]
    return kept + [(k, v.encode("latin-1")) for k, v in added.items()]


def _key_attribute(key: Any) -> str | None:
    if isinstance(key, str):
        return key
    if isinstance(key, bytes):
        try:
            return key.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return None


def _error_type(error: BaseException) -> str:
    code = getattr(error, "code", None)
    name = getattr(code, "name", None)
    return name if isinstance(name, str) else type(error).__qualname__


def _record_context(record: Any) -> Any:
    """The span context a consumed record's headers carry, or None."""
    from opentelemetry import propagate, trace

    if not record.headers:
        return None
    ctx = propagate.extract(record.headers, getter=_GETTER)
    span_context = trace.get_current_span(ctx).get_span_context()
    return span_context if span_context.is_valid else None


# -- the producer --------------------------------------------------------------------------------


class ProducerTracing:
    """A producer's spans: :meth:`start` in ``send()``, :meth:`end` at the outcome."""

    __slots__ = ("_base", "_context_of", "_error", "_inject", "_kind", "_tracer")

    def __init__(self, tracer: Any, client_id: str) -> None:
        from opentelemetry import propagate, trace

        self._tracer = tracer
        self._base = {
            "messaging.system": "kafka",
            "messaging.operation.name": "send",
            "messaging.operation.type": "send",
            "messaging.client.id": client_id,
        }
        # Looked up once: start() runs per record. propagate.inject reads the
        # propagator configured at each call.
        self._inject = propagate.inject
        self._context_of = trace.set_span_in_context
        self._kind = trace.SpanKind.PRODUCER
        self._error = trace.StatusCode.ERROR

    def start(self, record: ProducerRecord) -> tuple[ProducerRecord, Any]:
        """The record's span, started, and the record with its context in its headers."""
        attributes: dict[str, Any] = {**self._base, "messaging.destination.name": record.topic}
        if record.partition is not None:
            attributes["messaging.destination.partition.id"] = str(record.partition)
        key = _key_attribute(record.key)
        if key is not None:
            attributes["messaging.kafka.message.key"] = key
        if record.value is None:
            attributes["messaging.kafka.message.tombstone"] = True
        span = self._tracer.start_span(
            f"send {record.topic}", kind=self._kind, attributes=attributes
        )
        carrier: dict[str, str] = {}
        self._inject(carrier, context=self._context_of(span))
        if carrier:
            try:
                headers = _with_headers(record.headers, carrier)
            except (TypeError, ValueError):
                return record, span  # not headers: send() refuses them, and ends the span
            record = replace(record, headers=headers)
        return record, span

    def end(self, span: Any, metadata: RecordMetadata | None, error: BaseException | None) -> None:
        """End ``span``: acknowledged at ``metadata``, or failed with ``error``
        (``metadata`` then None, or with partition -1 when none was chosen)."""
        if error is None and metadata is not None:
            span.set_attributes(
                {
                    "messaging.destination.partition.id": str(metadata.partition),
                    "messaging.kafka.offset": metadata.offset,
                }
            )
        elif error is not None:
            if metadata is not None and metadata.partition >= 0:
                span.set_attribute("messaging.destination.partition.id", str(metadata.partition))
            span.set_attribute("error.type", _error_type(error))
            span.set_status(self._error, str(error))
        span.end()


def producer_tracing(config: Any) -> ProducerTracing | None:
    """The spans of a new producer with ``config``; None without tracing."""
    if not traced(config):
        return None
    return ProducerTracing(_tracer(config.otel_tracer_provider), str(config.client_id))


# -- the consumer --------------------------------------------------------------------------------


class ConsumerTracing:
    """A consumer's ``poll`` spans (:meth:`polled`: a consumer's before its
    interceptors' ``on_consume``, a share consumer's as a poll returns)."""

    __slots__ = ("_base", "_tracer")

    def __init__(self, tracer: Any, client_id: str, group_id: str | None) -> None:
        self._tracer = tracer
        self._base: dict[str, Any] = {
            "messaging.system": "kafka",
            "messaging.operation.name": "poll",
            "messaging.operation.type": "receive",
            "messaging.client.id": client_id,
        }
        if group_id:
            self._base["messaging.consumer.group.name"] = group_id

    def polled(self, records: Sequence[Any]) -> None:
        """The span of a poll that hands ``records`` out (never raises: a
        failure is logged and the records go out as they are)."""
        try:
            self._span(records)
        except Exception:
            log.warning("the poll's span could not be made", exc_info=True)

    def _span(self, records: Sequence[Any]) -> None:
        from opentelemetry import trace

        if not records:
            return
        topics = {r.topic for r in records}
        partitions = {(r.topic, r.partition) for r in records}
        links = []
        for record in records:
            span_context = _record_context(record)
            if span_context is not None:
                attributes: dict[str, Any] = {
                    "messaging.destination.partition.id": str(record.partition),
                    "messaging.kafka.offset": record.offset,
                }
                if len(topics) > 1:
                    attributes["messaging.destination.name"] = record.topic
                links.append(trace.Link(span_context, attributes))
        attributes = {**self._base, "messaging.batch.message_count": len(records)}
        name = "poll"
        if len(topics) == 1:
            (topic,) = topics
            name = f"poll {topic}"
            attributes["messaging.destination.name"] = topic
            if len(partitions) == 1:
                attributes["messaging.destination.partition.id"] = str(records[0].partition)
        span = self._tracer.start_span(
            name, kind=trace.SpanKind.CLIENT, attributes=attributes, links=links
        )
        span.end()


def consumer_tracing(config: Any) -> ConsumerTracing | None:
    """The spans of a new consumer with ``config``; None without tracing."""
    if not traced(config):
        return None
    group = getattr(config, "group_id", None)
    return ConsumerTracing(
        _tracer(config.otel_tracer_provider), str(config.client_id), group or None
    )


# -- processing ---------------------------------------------------------------------------------


@contextmanager
def process_span(
    record: ConsumerRecord[Any, Any],
    *,
    group_id: str | None = None,
    client_id: str | None = None,
    tracer_provider: Any = None,
    parent_from_record: bool = False,
) -> Iterator[Any]:
    """A ``process <topic>`` span (kind CONSUMER) around the processing of a
    consumed ``record``, linked to the context its headers carry; current
    while the block runs (spans opened inside are its children).

    Args:
        record: the consumed record.
        group_id: the consumer's group (``messaging.consumer.group.name``), when known.
        client_id: the consumer's ``client.id`` (``messaging.client.id``), when known.
        tracer_provider: the provider (default: OpenTelemetry's global one).
        parent_from_record: make the record's context the span's parent (the
            conventions allow it) rather than the current span.

    Yields:
        The span. An exception raised in the block ends it with status ERROR
        and ``error.type``, and goes on.

    Raises:
        ModuleNotFoundError: OpenTelemetry is not installed.
    """
    from opentelemetry import trace
    from opentelemetry.trace import Status, StatusCode

    attributes: dict[str, Any] = {
        "messaging.system": "kafka",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": record.topic,
        "messaging.destination.partition.id": str(record.partition),
        "messaging.kafka.offset": record.offset,
    }
    if group_id:
        attributes["messaging.consumer.group.name"] = group_id
    if client_id:
        attributes["messaging.client.id"] = client_id
    key = _key_attribute(record.key)
    if key is not None:
        attributes["messaging.kafka.message.key"] = key
    span_context = _record_context(record)
    links = [trace.Link(span_context)] if span_context is not None else []
    parent = None
    if parent_from_record and span_context is not None:
        parent = trace.set_span_in_context(trace.NonRecordingSpan(span_context))
    tracer = _tracer(tracer_provider)
    with tracer.start_as_current_span(
        f"process {record.topic}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        attributes=attributes,
        links=links,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            span.set_attribute("error.type", _error_type(exc))
            span.set_status(Status(StatusCode.ERROR, str(exc)))
            raise
