"""Open-loop produce latency, shared by bench/proxy.py and bench/clients.py.

A confluent-kafka producer (linger.ms 0, no compression) is given one keyed
record every 1/rate seconds for a while, on schedule whatever the answers do (a
closed loop would wait for them and hide the queueing), and each record's
latency runs from its scheduled time to its delivery report. Below saturation
this is what a client sees; past it the latencies grow with the backlog.
"""

from __future__ import annotations

import gc
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer


@dataclass
class OpenLoop:
    """Each answered record's latency (seconds), and how many were sent and failed."""

    times: list[float]
    sent: int
    failed: list[Any] = field(default_factory=list)

    def quantile(self, q: float) -> float:
        ordered = sorted(self.times) or [float("nan")]
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    def note(self, rate: float, seconds: float) -> str:
        text = f"{rate:,.0f} records/s for {seconds:g} s"
        unanswered = self.sent - len(self.times) - len(self.failed)
        if self.failed or unanswered:
            text += f"; {len(self.failed)} failed, {unanswered} unanswered"
        return text


def open_loop(
    servers: str,
    topic: str,
    *,
    rate: float,
    seconds: float,
    size: int,
    keys: int,
    acks: int | str = 1,
) -> OpenLoop:
    """``rate * seconds`` records of ``size`` bytes (keys ``key-<i mod keys>``) to
    ``topic``, one every 1/rate s on schedule; see the module's docstring."""
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "acks": acks,
            "enable.idempotence": False,
            "linger.ms": 0,
            "log_level": 3,
        }
    )
    # Connected and with metadata before the clock starts.
    producer.produce(topic, b"warm-up", b"key-0")
    producer.flush(30)
    result = OpenLoop([], max(1, int(rate * seconds)))
    interval = 1.0 / rate
    start = time.perf_counter() + 0.1
    for i in range(result.sent):
        due = start + i * interval
        while (now := time.perf_counter()) < due:
            producer.poll(min(due - now, 0.001))

        def done(error: Any, _message: Any, due: float = due) -> None:
            if error is not None:
                result.failed.append(error)
            else:
                result.times.append(time.perf_counter() - due)

        producer.produce(topic, b"x" * size, b"key-%d" % (i % max(1, keys)), on_delivery=done)
        producer.poll(0)
    producer.flush(60)
    del producer
    gc.collect()
    return result
