"""Open-loop produce latency, shared by bench/proxy.py and bench/clients.py.

A confluent-kafka producer (linger.ms 0, no compression) is given one keyed
record every 1/rate seconds for a while, on schedule whatever the answers do (a
closed loop would wait for them and hide the queueing), and each record's
latency runs from its scheduled time to its delivery report. Below saturation
this is what a client sees; past it the latencies grow with the backlog.

Before the timed window: one record to every partition (each leader's
connection made, each partition's log written once), then a warm-up at the
rate on the same schedule, not counted, so the window starts in the steady
state rather than with connections and first appends. The sender itself can
fall behind its schedule (a loaded machine): each record's lateness at its
``produce()`` is kept; the note gives it when some records left late, and says
the sender fell behind when the typical one did, for then the latencies
measure its backlog as much as the path. Past the path's saturation (answers
came slower than the rate: with linger.ms 0 a loaded broker serving a request
per record gets there) the note says so too: the latencies then grow with the
window, and are no figure of the path below it.

The sender sleeps until each record is due, and a second thread serves the
delivery reports, blocked in ``poll()`` until one arrives. confluent-kafka passes
``poll()`` its timeout in whole milliseconds, rounded down: waiting for a record
due in under 1 ms with ``poll()`` returned at once, so a loop that did so spun
a core between records (at 2,000 records/s, all the time). On two cores that
core was taken from the client's own threads, the broker and the proxy, and the
more processes a path has, the more its latency showed it (issue #66).
"""

from __future__ import annotations

import gc
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import Producer

#: Lateness at ``produce()`` worth telling (seconds): far above a timer's jitter.
LATE_S = 0.010
#: A smoke run's open loop (it checks that the code runs, it measures nothing): this
#: many records counted after :data:`SMOKE_WARMUP_RECORDS`, at the line's rate,
#: rather than a fixed time (at 2,000 records/s, 0.35 s were 700 requests a path).
SMOKE_RECORDS = 50
SMOKE_WARMUP_RECORDS = 10


def smoke_window(rate: float) -> tuple[float, float]:
    """A smoke run's window and warm-up at ``rate``, in seconds: :data:`SMOKE_RECORDS`
    and :data:`SMOKE_WARMUP_RECORDS` records long."""
    return SMOKE_RECORDS / rate, SMOKE_WARMUP_RECORDS / rate


@dataclass
class OpenLoop:
    """Each answered record's latency (seconds), and how many were sent and failed;
    how late the sender handed each record over (seconds after its scheduled time)."""

    times: list[float]
    sent: int
    failed: list[Any] = field(default_factory=list)
    late: list[float] = field(default_factory=list)
    #: Seconds from the first counted answer to the last.
    span: float = 0.0

    def quantile(self, q: float, values: list[float] | None = None) -> float:
        ordered = sorted(self.times if values is None else values) or [float("nan")]
        return ordered[min(len(ordered) - 1, int(q * len(ordered)))]

    @property
    def behind(self) -> bool:
        """Whether the sender fell behind its schedule: the typical record (the
        median) left :data:`LATE_S` or more late, so the rate was not kept."""
        return self.quantile(0.5, self.late) >= LATE_S

    def note(self, rate: float, seconds: float) -> str:
        text = f"{rate:,.0f} records/s for {seconds:g} s"
        unanswered = self.sent - len(self.times) - len(self.failed)
        if self.failed or unanswered:
            text += f"; {len(self.failed)} failed, {unanswered} unanswered"
        answered = (len(self.times) - 1) / self.span if self.span > 0 else rate
        if answered < 0.9 * rate:
            text += (
                f"; past saturation: answered {answered:,.0f} records/s,"
                " the latencies are a growing queue's"
            )
        if self.late and self.quantile(0.99, self.late) >= LATE_S:
            late = (
                f"late at produce() p50 {self.quantile(0.5, self.late) * 1e3:.1f} ms,"
                f" p99 {self.quantile(0.99, self.late) * 1e3:.1f} ms"
            )
            if self.behind:
                text += (
                    f"; sender fell behind its schedule ({late}): its backlog is in the latencies"
                )
            else:
                text += f"; sender on schedule ({late})"
        return text


def _serve_reports(producer: Producer, stop: threading.Event) -> None:
    """Serve delivery reports until ``stop``: poll() blocks until one arrives (or
    0.1 s), so each is timed as it comes."""
    while not stop.is_set():
        producer.poll(0.1)


def open_loop(
    servers: str,
    topic: str,
    *,
    rate: float,
    seconds: float,
    size: int,
    keys: int,
    acks: int | str = 1,
    warmup: float = 0.5,
) -> OpenLoop:
    """``rate * seconds`` records of ``size`` bytes (keys ``key-<i mod keys>``) to
    ``topic``, one every 1/rate s on schedule, after ``warmup`` seconds of the same
    not counted; see the module's docstring."""
    producer = Producer(
        {
            "bootstrap.servers": servers,
            "acks": acks,
            "enable.idempotence": False,
            "linger.ms": 0,
            "log_level": 3,
        }
    )
    # Connected to every partition's leader, with metadata, before the clock starts.
    partitions = producer.list_topics(topic, timeout=30).topics[topic].partitions
    for partition in partitions:
        producer.produce(topic, b"warm-up", b"key-0", partition=partition)
    producer.flush(30)
    # Rounded: a window given as records / rate is that many records.
    result = OpenLoop([], max(1, round(rate * seconds)))
    interval = 1.0 / rate
    skipped = round(rate * warmup)
    value = b"x" * size
    start = time.perf_counter() + 0.1
    answers: list[float] = []  # the first and the last counted answer's time
    # The reports are served by a thread blocked in poll(), woken as each arrives;
    # this one sleeps until each record is due (see the module's docstring).
    stop = threading.Event()
    # A daemon: a send that raises does not leave the process waiting for it.
    reporting = threading.Thread(target=_serve_reports, args=(producer, stop), daemon=True)
    reporting.start()
    for i in range(skipped + result.sent):
        due = start + i * interval
        if (wait := due - time.perf_counter()) > 0:
            time.sleep(wait)
        now = time.perf_counter()
        counted = i >= skipped
        if counted:
            result.late.append(now - due)

        def done(error: Any, _message: Any, due: float = due, counted: bool = counted) -> None:
            if not counted:
                return
            if error is not None:
                result.failed.append(error)
            else:
                now = time.perf_counter()
                answers[min(len(answers), 1) :] = [now]  # [first, last]
                result.times.append(now - due)

        producer.produce(topic, value, b"key-%d" % (i % max(1, keys)), on_delivery=done)
    producer.flush(60)
    stop.set()
    reporting.join()
    result.span = answers[-1] - answers[0] if answers else 0.0
    del producer
    gc.collect()
    return result
