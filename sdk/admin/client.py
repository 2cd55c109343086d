"""The admin client's driver: topics, partitions, configs, groups, offsets, records,
transactions, users' SCRAM credentials, ACLs, client quotas and delegation tokens.

:class:`Admin` is one class composed of one class per capability, each in a
module of its own over the shared request core of :mod:`.client_core`:
:mod:`.client_topics` (topics, partitions, records), :mod:`.client_configs`,
:mod:`.client_groups` (groups and their offsets), :mod:`.client_security`
(ACLs, quotas, SCRAM credentials, delegation tokens), :mod:`.client_cluster`
(the cluster, features, log directories) and :mod:`.client_transactions`.

:class:`Admin` owns connections, retries and routing only. Each call builds
its requests with the planners of its area's module (:mod:`.topics`,
:mod:`.configs`, :mod:`.groups`...), sends them, and hands the answers to that
module's parsers, which map them to results or errors without I/O.

Rules:

* :func:`open_admin` owns its tasks and connections; errors leave as
  themselves, never as an ExceptionGroup.
* Requests go to the broker Kafka routes them to: topic, config and SCRAM
  credential changes to the controller when metadata names one (any broker
  forwards in KRaft), ACL and client quota calls to any broker (as Kafka's
  AdminClient, which picks the least loaded one),
  group operations to the group's coordinator, record and producer-state
  operations to each partition's leader, transaction operations to each
  transactional id's coordinator (ListTransactions to every broker).
* Each call raises :class:`~trafka.codec.errors.KafkaError` for the first
  item that failed, naming it; items before it may have succeeded (Kafka's
  admin operations are per item, not atomic).
* Request versions come from :mod:`.connection_state`; fields a version lacks
  are left out.
* Client metrics (KIP-714, :mod:`.telemetry`), as Java's KafkaAdminClient: off
  unless ``enable.metrics.push`` is set (Java's admin default is false). When
  on, a task pushes :func:`~.telemetry.admin_samples` with no resource
  attributes but ``client_rack`` when set (Java's ``ClientTelemetryProvider``
  maps no admin setting), and leaving :func:`open_admin` sends the terminating
  push, bounded by ``request.timeout.ms``, before the connections close, unless
  the block is left by a cancellation or an interrupt (an admin call's error
  leaves by the normal close: it says nothing about the client).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import Any

from .._util import owned_task_group
from ..client_hooks import start_client_hooks
from ..config import AdminConfig, make_config
from ..lifecycle import Hostable
from .client_cluster import ClusterCalls
from .client_configs import ConfigCalls
from .client_groups import GroupCalls
from .client_security import SecurityCalls
from .client_topics import TopicCalls
from .client_transactions import TransactionCalls

__all__ = ["Admin", "open_admin"]


class Admin(
    TransactionCalls,
    TopicCalls,
    ConfigCalls,
    GroupCalls,
    SecurityCalls,
    ClusterCalls,
    Hostable,
):
    """A Kafka admin client. Create it with :func:`open_admin`.

    Every call takes ``timeout_ms`` (default ``default.api.timeout.ms``): its
    deadline as a whole, as in Kafka's AdminClient. Until then a call retries,
    after ``retry.backoff.ms`` (doubling up to ``retry.backoff.max.ms``), what
    passes: a broker it cannot reach or that does not answer in
    ``request.timeout.ms``, a coordinator that moved or is loading, a
    partition leader that moved, another controller. At the deadline it raises
    :class:`~trafka.sdk.errors.ApiTimeoutError`, whose ``__cause__`` is the
    last error. Other errors are answers and are raised at once. It is one
    interface, as Kafka's ``Admin``: the classes it inherits add calls, no state.
    """


@asynccontextmanager
async def open_admin(
    config: AdminConfig | Mapping[str, Any] | None = None, **kwargs: Any
) -> AsyncIterator[Admin]:
    """Open an admin client.

    Args:
        config: an :class:`~trafka.sdk.config.AdminConfig` or a mapping of Kafka-style keys.
        **kwargs: settings in Python spelling; they override ``config``.

    Yields:
        The :class:`Admin`.

    Raises:
        ConfigError: invalid configuration.
    """
    cfg = make_config(AdminConfig, config, kwargs)
    async with owned_task_group() as tg, Admin(cfg, tg) as admin:
        await start_client_hooks(tg, admin, "admin", cfg)
        yield admin
