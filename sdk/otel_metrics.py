"""A client's metrics as OpenTelemetry observable instruments (the ``otel`` extra).

With ``otel.enabled`` (OpenTelemetry's global ``MeterProvider``) or an
``otel.meter.provider``, a client registers, while it is open, one observable
instrument per metric of its Prometheus exposition
(:mod:`trafka.sdk.prometheus`), under the same names and labels (as
attributes): a Prometheus counter is an ``ObservableCounter`` named without
``_total`` (OpenTelemetry's Prometheus exporter adds it back), a gauge an
``ObservableGauge``. Meter ``trafka.sdk``.

Rules:

* No second bookkeeping: each collection reads the client's
  :meth:`statistics` once, through the same collector the ``/metrics``
  endpoint uses, and every instrument reports from that reading.
* The instruments are those a client of its kind can have, registered when it
  opens (a consumer's coordinator metrics too, reported once it has a group
  coordinator). After the client closes they report nothing.
* The callbacks run where the reader collects: a periodic reader's thread
  reads the statistics of a client whose event loop runs elsewhere, as a
  scrape reads counters while they grow; a reading that races a change of the
  client's tables is taken again.
* OpenTelemetry is imported only when a client with one of those settings opens.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

import anyio

from .prometheus import ClientCollector

__all__ = ["observe_client"]

log = logging.getLogger("trafka.sdk")

_COORDINATOR = "kafka_consumer_consumer_coordinator_metrics"


class _Reading:
    """The client's families, read once per collection and handed out per
    instrument: the first callback of a collection reads, the others take
    what that reading left for them."""

    def __init__(self, client: Any, kind: str) -> None:
        self.collector = ClientCollector(client, kind)
        self.kinds: dict[str, str] = {}  # family name -> "counter" / "gauge"
        self.left: dict[str, list[tuple[float, dict[str, str]]]] = {}
        self.open = True

    def read(self) -> dict[str, list[tuple[float, dict[str, str]]]]:
        for _ in range(3):
            try:
                families = list(self.collector.collect())
                break
            except RuntimeError:  # a table of the client changed while it was read
                continue
        else:
            return {}
        out: dict[str, list[tuple[float, dict[str, str]]]] = {name: [] for name in self.kinds}
        for family in families:
            suffix = "_total" if family.type == "counter" else ""
            out[family.name] = [
                (s.value, dict(s.labels)) for s in family.samples if s.name == family.name + suffix
            ]
        return out

    def take(self, name: str) -> list[tuple[float, dict[str, str]]]:
        if not self.open:
            return []
        if name not in self.left:
            self.left = self.read()
        return self.left.pop(name, [])


def _families(reading: _Reading, kind: str) -> list[tuple[str, str, str]]:
    """``(name, type, help)`` of every family a client of ``kind`` can have."""
    out = [(f.name, f.type, f.documentation) for f in reading.collector.collect()]
    if kind == "consumer" and not any(name.startswith(_COORDINATOR) for name, _, _ in out):
        from .statistics import CoordinatorStatistics

        for field in dataclasses.fields(CoordinatorStatistics):
            what = f"Java's consumer-coordinator-metrics {field.name.replace('_', '-')}."
            if field.name.endswith("_total"):
                out.append((f"{_COORDINATOR}_{field.name[:-6]}", "counter", what))
            else:
                out.append((f"{_COORDINATOR}_{field.name}", "gauge", what))
    return out


def observe_client(client: Any, kind: str, provider: Any) -> _Reading:
    """Register ``client``'s instruments with ``provider`` (None: the global
    one); the returned reading's ``open`` set false silences them."""
    from opentelemetry import metrics

    if provider is None:
        provider = metrics.get_meter_provider()
    meter = provider.get_meter("trafka.sdk")
    reading = _Reading(client, kind)
    for name, type_, what in _families(reading, kind):
        reading.kinds[name] = type_

        def callback(options: Any, name: str = name) -> list[Any]:
            return [metrics.Observation(v, attrs) for v, attrs in reading.take(name)]

        if type_ == "counter":
            meter.create_observable_counter(name, [callback], description=what)
        else:
            meter.create_observable_gauge(name, [callback], description=what)
    return reading


async def serve_otel_metrics(
    client: Any, kind: str, provider: Any, *, task_status: Any = anyio.TASK_STATUS_IGNORED
) -> None:
    """Keep ``client``'s instruments reporting until cancelled (the client closes)."""
    reading = observe_client(client, kind, provider)
    task_status.started()
    try:
        await anyio.sleep_forever()
    finally:
        reading.open = False
