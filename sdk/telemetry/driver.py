"""The task that runs a client's KIP-714 state machine (:mod:`.state`) over its
cluster: the sticky node, the subscription and push requests, and the
terminating push at close. A client owns one through a
:class:`~.push.MetricsPush`.

Rules:

* The driver runs in a task of its own, so a push never delays the client's own
  requests; it sleeps until the machine's next deadline, or a wake-up.
* Close waits for the request out to be answered, then sends the terminating
  push, all within the caller's bound; the machine ends ``TERMINATED``.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Callable, Sequence
from typing import Any

import anyio

from trafka.codec import ApiKey, UnsupportedVersionError
from trafka.codec.errors import TrafkaError

from ..errors import UsageError
from .metrics import MetricSample
from .state import ClientTelemetry, TelemetryState

# -- the driver --------------------------------------------------------------------------

log = logging.getLogger("trafka.sdk.telemetry")


class TelemetryDriver:
    """Runs a :class:`ClientTelemetry` over a client's cluster, in its own task,
    so that it never delays the client's own requests.

    Args:
        cluster: the client's :class:`~trafka.sdk.transport.Cluster`.
        telemetry: the state machine.
        collect: measures the client's metrics (called for each push).
        request_timeout: seconds, the client's ``request.timeout.ms``.
    """

    def __init__(
        self,
        cluster: Any,
        telemetry: ClientTelemetry,
        collect: Callable[[], Sequence[MetricSample]],
        request_timeout: float,
    ) -> None:
        self.cluster = cluster
        self.telemetry = telemetry
        self._collect = collect
        self._request_timeout = request_timeout
        self._wake = anyio.Event()
        self._subscribed = anyio.Event()
        self._idle = anyio.Event()  # set when no request is out (for close)
        self._idle.set()
        self._node: Any = None  # the sticky connection
        self._finished = anyio.Event()

    async def run(self) -> None:
        """The loop; returns when telemetry is disabled or terminated."""
        machine = self.telemetry
        try:
            while True:
                now = anyio.current_time()
                delay = machine.time_to_next_update(now, self._request_timeout)
                if delay == math.inf and (
                    machine.state is TelemetryState.TERMINATED or not machine.enabled
                ):
                    return
                if delay > 0:
                    self._wake = anyio.Event()
                    with anyio.move_on_after(delay):
                        await self._wake.wait()
                    continue
                conn = await self._connection()
                if conn is None:
                    continue
                await self._exchange(conn)
        finally:
            self._subscribed.set()  # wake client_instance_id waiters: nothing more comes
            self._idle.set()
            self._finished.set()

    async def _connection(self) -> Any:
        conn = self._node
        if conn is not None and conn.alive:
            return conn
        self._node = None
        conn = self.cluster.least_loaded_connection()
        if conn is None:
            try:
                conn = await self.cluster.any_connection()
            except TrafkaError:
                await anyio.sleep(self.cluster.config.reconnect_backoff_ms / 1000)
                return None
        self._node = conn
        return conn

    async def _exchange(self, conn: Any) -> None:
        machine = self.telemetry
        now = anyio.current_time()
        # Java picks the request before the version: a node without the API
        # fails it (UnsupportedVersionException) without sending it.
        api_key: int = (
            ApiKey.GET_TELEMETRY_SUBSCRIPTIONS
            if machine.state is TelemetryState.SUBSCRIPTION_NEEDED
            else ApiKey.PUSH_TELEMETRY
        )
        if not conn.supports(api_key):
            log.debug(
                "node %d does not support API %d: client telemetry off", conn.node_id, api_key
            )
            machine.request_failed(
                now, api_key, UnsupportedVersionError(f"node {conn.node_id} lacks API {api_key}")
            )
            return
        request = machine.create_request(now, self._collect)
        if request is None:
            await anyio.lowlevel.checkpoint()
            return
        api_key, body = request
        self._idle = anyio.Event()
        try:
            response = await conn.request(api_key, body, timeout=self._request_timeout)
        except (TrafkaError, UnsupportedVersionError, OSError) as exc:
            machine.request_failed(anyio.current_time(), api_key, exc)
            if not conn.alive:
                self._node = None
        else:
            now = anyio.current_time()
            if api_key == ApiKey.GET_TELEMETRY_SUBSCRIPTIONS:
                machine.handle_subscriptions(now, response)
                if machine.subscription is not None:
                    self._subscribed.set()
            else:
                machine.handle_push(now, response)
        finally:
            self._idle.set()

    async def client_instance_id(self, timeout: float) -> uuid.UUID | None:
        """Wait up to ``timeout`` seconds for the first subscription's client instance id."""
        if timeout < 0:
            raise ValueError("the timeout cannot be negative")
        machine = self.telemetry
        if machine.client_instance_id is None and not self._finished.is_set():
            with anyio.move_on_after(timeout):
                await self._subscribed.wait()
        return machine.client_instance_id

    async def close(self, timeout: float) -> None:
        """Send the terminating push (within ``timeout`` seconds) and stop."""
        machine = self.telemetry
        with anyio.move_on_after(timeout):
            # A request is out: its answer first. Waiting on a set event is still a
            # checkpoint, in which the driver may send a push: look again after
            # each wait, so that closing never begins with a push in flight (its
            # answer would then find the machine terminating and disable it).
            while True:
                idle = self._idle
                await idle.wait()
                if self._idle.is_set():
                    break
            if not self._finished.is_set() and machine.initiate_close():
                self._wake.set()
                await self._finished.wait()
        machine.close()
        self._wake.set()


def disabled_error() -> UsageError:
    """Java's IllegalStateException for ``clientInstanceId`` with push disabled."""
    return UsageError("telemetry is not enabled: set enable.metrics.push to true")
