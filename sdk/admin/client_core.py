"""The admin client's request core: what every admin call shares.

:class:`~trafka.sdk.admin.Admin` is composed of one class per capability
(:mod:`.client_topics`, :mod:`.client_configs`, :mod:`.client_groups`,
:mod:`.client_security`, :mod:`.client_cluster`, :mod:`.client_transactions`),
each a subclass of :class:`AdminCore`, which owns the connections (a
:class:`~trafka.sdk.transport.Cluster`), the retries (:class:`~trafka.sdk.calls.Calls`),
the routing every call uses (the controller, a coordinator, every broker), the
client's statistics and its metrics push (KIP-714). A capability class adds
calls only and keeps no state of its own, so the classes compose in any order;
the one that calls another capability's methods subclasses it
(:class:`~.client_transactions.TransactionCalls` lists and describes topics).
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import Any, Self, TypeVar

import anyio
import anyio.abc

from trafka.codec import ApiKey, TrafkaError

from .._validate import INT32_MAX, check_timeout
from ..calls import Calls, again_if_transient
from ..config import AdminConfig
from ..group import find_coordinator
from ..statistics import AdminStatistics
from ..telemetry import MetricsPush, admin_samples
from ..transport import BrokerConnection, Cluster

__all__ = ["AdminCore"]

_T = TypeVar("_T")


class AdminCore:
    """The state and routing every admin call shares (see the module)."""

    def __init__(self, config: AdminConfig, task_group: anyio.abc.TaskGroup) -> None:
        self.config = config
        self._tg = task_group
        self._cluster = Cluster(config, task_group)
        self._calls = Calls(
            self._cluster,
            config.retry_backoff_ms,
            config.retry_backoff_max_ms,
            config.default_api_timeout_ms,
        )
        # Java's ClientTelemetryProvider maps no admin setting to a resource
        # attribute (client.rack aside, added for any client that was given one).
        self._telemetry = MetricsPush(
            config, self._cluster, "admin", {}, self.statistics, admin_samples
        )

    @property
    def cluster(self) -> Cluster:
        return self._cluster

    def _timeout_ms(self, timeout_ms: int | None) -> int:
        """A call's bound in ms, as the int32 a request carries."""
        ms = check_timeout("timeout_ms", timeout_ms)
        if ms is None:
            return self.config.default_api_timeout_ms
        return int(min(ms, INT32_MAX))

    async def _controller(self) -> BrokerConnection:
        md = self._cluster.metadata
        if md.controller_id < 0 or md.broker(md.controller_id) is None:
            try:
                await self._cluster.refresh_metadata()
            except TrafkaError:
                pass
        if md.controller_id >= 0 and md.broker(md.controller_id) is not None:
            try:
                return await self._cluster.connection(md.controller_id)
            except TrafkaError:
                pass
        return await self._cluster.any_connection()

    async def _controller_metadata(self, topics: list[str] | None) -> Any:
        """The controller's Metadata answer on ``topics`` (``None``: every one)."""
        conn = await self._controller()
        body = self._cluster.metadata.build_request_for(
            conn.version_for(ApiKey.METADATA), topics, auto_create=False
        )
        return await conn.request(ApiKey.METADATA, body)

    async def _coordinator(self, key: str, key_type: int = 0) -> BrokerConnection:
        with again_if_transient():
            return await find_coordinator(self._cluster, key, key_type=key_type)

    async def _per_node(
        self,
        what: str,
        ask: Callable[[BrokerConnection], Awaitable[_T]],
        timeout_ms: int | None,
    ) -> list[_T]:
        """``ask`` every broker (the bootstrap server when metadata names none);
        a broker that answered is not asked again on a retry."""
        answers: dict[int | None, _T] = {}

        async def attempt(deadline: float) -> list[_T]:
            await self._cluster.refresh_metadata()
            nodes: list[int | None] = [*self._cluster.metadata.brokers] or [None]
            for node in nodes:
                if node in answers:
                    continue
                conn = await (
                    self._cluster.connection(node)
                    if node is not None
                    else self._cluster.any_connection()
                )
                answers[node] = await ask(conn)
            return [answers[node] for node in nodes]

        return await self._calls.run(what, timeout_ms, attempt)

    def statistics(self) -> AdminStatistics:
        """Per broker, the requests this admin client made so far, and its metrics
        push (see :mod:`trafka.sdk.statistics`)."""
        return AdminStatistics(
            brokers=self._cluster.broker_statistics(),
            telemetry=self._telemetry.statistics(),
        )

    async def client_instance_id(self, timeout_ms: float = 0) -> uuid.UUID | None:
        """The id the cluster gave this client for its metrics (KIP-714), as Java's
        ``Admin.clientInstanceId(Duration)``: waits up to ``timeout_ms`` for the
        first subscription when there is none yet.

        Returns:
            The client instance id, or None when no subscription arrived in time
            (or the cluster does not take client metrics).

        Raises:
            UsageError: ``enable.metrics.push`` is false (the admin's default).
            ValueError: ``timeout_ms`` is negative.
        """
        return await self._telemetry.instance_id(timeout_ms)

    async def __aenter__(self) -> Self:
        """Start the client's tasks (:func:`open_admin` does, with its task group)."""
        self._cluster.start()
        self._telemetry.start(self._tg)
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """The last telemetry push (unless a cancellation or another
        non-``Exception`` ends the block), then its tasks are cancelled and
        connections closed."""
        try:
            if exc is None or isinstance(exc, Exception):
                await self._telemetry.close()  # the terminating push (Java's initiateClose)
        finally:
            self._tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._cluster.aclose()
