"""What a client holds of its metrics push (KIP-714): :class:`MetricsPush`, the
one object through which the producer, the consumer, the share consumer and
the admin client own their push task (:class:`~.driver.TelemetryDriver`) and
answer their calls about it.

Rules:

* With ``enable.metrics.push`` off there is no task and nothing is sent; the
  calls still answer (no statistics, :func:`~.driver.disabled_error` for the
  instance id, a close that does nothing), so a client never asks first.
* The resource attributes are the client's, those given as None left out, with
  ``client_rack`` added when the config sets one (Java's
  ``ClientTelemetryProvider`` does so for every client).
* A push measures the client as it is then: its statistics snapshot, its
  connections' latency peaks (taken: the next push's start afresh), and what
  the client's own ``measure`` adds; averages and rates cover the time since
  the last push (one :class:`~.metrics.IntervalAverages` per client).
* :meth:`MetricsPush.close` sends the terminating push (Java's
  ``initiateClose``), shielded from cancellation and bounded by
  ``request.timeout.ms``. A client calls it on a graceful close only, and last
  (once its records are out, its acknowledgements answered), so that the push
  carries the final counts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

import anyio
import anyio.abc

from .._validate import check_timeout
from .driver import TelemetryDriver, disabled_error
from .metrics import IntervalAverages, MetricSample
from .state import ClientTelemetry

if TYPE_CHECKING:
    from ..config.client import ClientConfig
    from ..statistics.brokers import TelemetryStatistics

__all__ = ["MetricsPush", "Peaks"]

#: Per broker node id, the highest latency (ms) per API key and the highest
#: throttle (ms) since the last push (:meth:`Cluster.take_peaks
#: <trafka.sdk.transport.Cluster.take_peaks>`).
Peaks = Mapping[int, tuple[Mapping[int, float], int]]

S = TypeVar("S")


class MetricsPush(Generic[S]):
    """A client's metrics push (see the module).

    Args:
        config: the client's configuration (``enable.metrics.push``,
            ``client.rack``, ``request.timeout.ms``).
        cluster: the client's :class:`~trafka.sdk.transport.Cluster`.
        client: what the client is, for its task's name (``"producer"``...).
        resource: the client's resource attributes (None: left out).
        statistics: the client's ``statistics()``, a snapshot of type ``S``.
        measure: the client's samples from ``(averages, statistics, peaks,
            now)`` (the ``*_samples`` functions of :mod:`.metrics`).

    Attributes:
        driver: the push task, None with push off.
    """

    def __init__(
        self,
        config: ClientConfig,
        cluster: Any,
        client: str,
        resource: Mapping[str, str | None],
        statistics: Callable[[], S],
        measure: Callable[[IntervalAverages, S, Peaks, float], list[MetricSample]],
    ) -> None:
        self._cluster = cluster
        self._client = client
        self._statistics = statistics
        self._measure = measure
        self._averages = IntervalAverages()
        self._timeout = config.request_timeout_ms / 1000
        self.driver: TelemetryDriver | None = None
        if config.enable_metrics_push:
            attributes = {key: value for key, value in resource.items() if value is not None}
            if config.client_rack:
                attributes["client_rack"] = config.client_rack
            machine = ClientTelemetry(resource=attributes)
            self.driver = TelemetryDriver(cluster, machine, self.samples, self._timeout)

    def start(self, task_group: anyio.abc.TaskGroup) -> None:
        """Start the push task in the client's task group (none with push off)."""
        if self.driver is not None:
            task_group.start_soon(self.driver.run, name=f"trafka {self._client} telemetry")

    @property
    def resource(self) -> dict[str, str]:
        """The resource attributes the pushes carry, to change in place (a
        consumer's group member id comes and goes); empty with push off."""
        return {} if self.driver is None else self.driver.telemetry.resource

    def statistics(self) -> TelemetryStatistics | None:
        """The push so far, for the client's ``statistics()`` (None with push off)."""
        return None if self.driver is None else self.driver.telemetry.statistics()

    async def instance_id(self, timeout_ms: float) -> uuid.UUID | None:
        """The client's ``client_instance_id(timeout_ms)``: the id of the first
        subscription, waited for up to ``timeout_ms`` (None if none came).

        Raises:
            TypeError, ValueError: ``timeout_ms`` is not a number >= 0.
            UsageError: push is off.
        """
        check_timeout("timeout_ms", timeout_ms, none=False)
        if self.driver is None:
            raise disabled_error()
        return await self.driver.client_instance_id(timeout_ms / 1000)

    async def close(self) -> None:
        """The terminating push, shielded and bounded (see the module); then the
        task ends. Nothing with push off."""
        if self.driver is not None:
            with anyio.CancelScope(shield=True):
                await self.driver.close(self._timeout)

    def samples(self) -> list[MetricSample]:
        """What a push carries now: the client's ``measure`` of its statistics, its
        peaks (taken) and the time, with this client's averages."""
        stats = self._statistics()
        peaks = self._cluster.take_peaks()
        return self._measure(self._averages, stats, peaks, anyio.current_time())
