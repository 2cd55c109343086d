"""The admin client's driver: topics, partitions, configs, groups, offsets, records,
transactions, users' SCRAM credentials, ACLs, client quotas and delegation tokens.

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

import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any, Literal, TypeVar, overload

import anyio
import anyio.abc

from trafka.codec import ErrorCode, KafkaError, TrafkaError

from .._util import owned_task_group, serve_metrics_if_asked
from .._validate import (
    INT16_MAX,
    INT32_MAX,
    INT64_MAX,
    check_bool,
    check_committed_offset,
    check_group_id,
    check_group_ids,
    check_instance,
    check_instances,
    check_int,
    check_names,
    check_offsets,
    check_str,
    check_timeout,
    check_timestamp_ms,
    check_topic,
    check_topic_partition,
    check_topic_partitions,
    check_topics,
)
from ..acls import AclBinding, AclBindingFilter
from ..calls import Calls, again_if_transient
from ..config import AdminConfig, make_config
from ..delegation_tokens import DelegationToken
from ..delegation_tokens import principal as token_principal
from ..fetcher import TopicPartition
from ..group import find_coordinator
from ..group_protocol import offset_commit_request, offset_fetch_request
from ..hosting import Hostable
from ..metadata import TopicInfo
from ..quotas import ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilterComponent
from ..statistics import AdminStatistics
from ..telemetry import (
    IntervalAverages,
    MetricSample,
    admin_samples,
    client_telemetry,
    instance_id,
)
from ..transactions import TRANSACTION_KEY
from ..transport import COORDINATOR_BASE, BrokerConnection, Cluster
from ._common import (
    Result,
    answered,
    by_topic,
    check_broker_id,
    check_config_changes,
    check_hmac,
    check_log_dir_assignments,
    check_new_totals,
    check_offset_spec,
    check_producer_id,
    check_reassignments,
    check_replica,
    first_failure,
    settle,
)
from .acls import (
    create_acls_request,
    delete_acls_request,
    describe_acls_request,
    read_create_acls,
    read_delete_acls,
    read_describe_acls,
)
from .cluster import (
    ClusterDescription,
    FeatureMetadata,
    FeatureUpdate,
    api_versions_request,
    describe_cluster_request,
    feature_updates,
    read_describe_cluster,
    read_features,
    read_update_features,
    update_features_request,
)
from .configs import (
    BROKER_RESOURCE,
    CLIENT_METRICS_RESOURCE,
    GROUP_RESOURCE,
    TOPIC_RESOURCE,
    alter_configs_request,
    describe_configs_request,
    incremental_alter_configs_request,
    list_client_metrics_resources_request,
    read_alter_configs,
    read_describe_configs,
    read_list_client_metrics_resources,
)
from .delegation_tokens import (
    create_delegation_token_request,
    describe_delegation_token_owners,
    describe_delegation_token_request,
    expire_delegation_token_request,
    read_create_delegation_token,
    read_describe_delegation_token,
    read_expiry,
    renew_delegation_token_request,
    token_renewers,
)
from .groups import (
    GroupDescription,
    GroupListing,
    consumer_group_describe_request,
    delete_groups_request,
    describe_groups_request,
    group_types,
    leave_group_request,
    leaving_members,
    list_groups_request,
    not_classic,
    offset_delete_request,
    offset_fetch_all_request,
    read_alter_group_offsets,
    read_classic_group,
    read_consumer_group_describe,
    read_delete_groups,
    read_group_offsets,
    read_leave_group,
    read_list_groups,
    read_offset_delete,
    removing_all,
)
from .log_dirs import (
    LogDirDescription,
    ReplicaLogDirInfo,
    TopicPartitionReplica,
    alter_replica_log_dirs_plan,
    alter_replica_log_dirs_request,
    check_log_dirs,
    describe_log_dirs_request,
    moving,
    read_alter_replica_log_dirs,
    read_log_dirs,
    read_replica_log_dirs,
    replica_log_dirs_plan,
)
from .partitions import (
    PartitionReassignment,
    alter_partition_reassignments_request,
    elect_leaders_request,
    list_partition_reassignments_request,
    read_alter_partition_reassignments,
    read_elect_leaders,
    read_list_partition_reassignments,
)
from .partitions import election_type as election_type_code
from .partitions import reassignments as partition_reassignments
from .quotas import (
    alter_client_quotas_request,
    client_quota_alterations,
    describe_client_quotas_request,
    read_alter_client_quotas,
    read_describe_client_quotas,
)
from .records import (
    delete_records_request,
    list_offsets_request,
    offset_targets,
    read_delete_records,
    read_list_offsets,
)
from .scram import (
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
    alter_user_scram_credentials_request,
    describe_user_scram_credentials_request,
    read_alter_user_scram_credentials,
    read_describe_user_scram_credentials,
    scram_alterations,
)
from .share_groups import (
    ShareGroupDescription,
    SharePartitionOffsetInfo,
    alter_share_group_offsets_request,
    delete_share_group_offsets_request,
    describe_share_group_offsets_request,
    read_alter_share_group_offsets,
    read_delete_share_group_offsets,
    read_describe_share_group_offsets,
    read_share_group_describe,
    share_group_describe_request,
    share_group_describe_unsupported,
    share_offsets_unsupported,
)
from .topics import (
    NewTopic,
    check_new_topics,
    create_partitions_request,
    create_topics_request,
    delete_topics_request,
    new_topics,
    read_create_partitions,
    read_create_topics,
    read_delete_topics,
    read_describe_topics,
    read_list_topics,
)
from .transactions import (
    ProducerState,
    TransactionDescription,
    TransactionListing,
    abort_transaction_request,
    check_list_transactions,
    describe_producers_request,
    describe_transactions_request,
    fence_producer_request,
    hanging,
    list_transactions_request,
    read_abort_transaction,
    read_describe_producers,
    read_describe_transactions,
    read_fence_producer,
    read_list_transactions,
    suspects,
)

__all__ = ["Admin", "open_admin"]

_T = TypeVar("_T")


def _any_str(name: str, value: Any) -> str:
    """A str, empty or not (a name the broker judges)."""
    result: str = check_str(name, value, empty=True)
    return result


class Admin(Hostable):
    """A Kafka admin client. Create it with :func:`open_admin`.

    Every call takes ``timeout_ms`` (default ``default.api.timeout.ms``): its
    deadline as a whole, as in Kafka's AdminClient. Until then a call retries,
    after ``retry.backoff.ms`` (doubling up to ``retry.backoff.max.ms``), what
    passes: a broker it cannot reach or that does not answer in
    ``request.timeout.ms``, a coordinator that moved or is loading, a
    partition leader that moved, another controller. At the deadline it raises
    :class:`~trafka.sdk.errors.ApiTimeoutError`, whose ``__cause__`` is the
    last error. Other errors are answers and are raised at once.
    """

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
        self._telemetry_averages = IntervalAverages()
        self._telemetry = client_telemetry(config, self._cluster, {}, self._telemetry_samples)

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

    async def _coordinator(self, key: str, key_type: int = 0) -> BrokerConnection:
        with again_if_transient():
            return await find_coordinator(self._cluster, key, key_type=key_type)

    # -- cluster and topics -------------------------------------------------------------------

    def statistics(self) -> AdminStatistics:
        """Per broker, the requests this admin client made so far, and its metrics
        push (see :mod:`trafka.sdk.statistics`)."""
        return AdminStatistics(
            brokers=self._cluster.broker_statistics(),
            telemetry=None if self._telemetry is None else self._telemetry.telemetry.statistics(),
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
        return await instance_id(self._telemetry, timeout_ms)

    def _telemetry_samples(self) -> list[MetricSample]:
        return admin_samples(
            self._telemetry_averages,
            self.statistics(),
            self._cluster.take_peaks(),
            anyio.current_time(),
        )

    async def __aenter__(self) -> Admin:
        """Start the client's tasks (:func:`open_admin` does, with its task group)."""
        self._cluster.start()
        if self._telemetry is not None:
            self._tg.start_soon(self._telemetry.run, name="trafka admin telemetry")
        return self

    async def __aexit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        """The last telemetry push (unless a cancellation or another
        non-``Exception`` ends the block), then its tasks are cancelled and
        connections closed."""
        try:
            if exc is None or isinstance(exc, Exception):
                await self._close_telemetry()
        finally:
            self._tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await self._cluster.aclose()

    async def _close_telemetry(self) -> None:
        """The terminating push (Java's ``initiateClose``), bounded by the request
        timeout and shielded: it runs while the block is being left."""
        if self._telemetry is not None:
            with anyio.CancelScope(shield=True):
                await self._telemetry.close(self.config.request_timeout_ms / 1000)

    async def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """The cluster id, controller and brokers."""

        async def attempt(deadline: float) -> ClusterDescription:
            conn = await self._cluster.any_connection()
            if conn.supports(60):
                resp = await conn.request(60, describe_cluster_request(conn.version_for(60)))
                return read_describe_cluster(resp)
            await self._cluster.refresh_metadata()
            md = self._cluster.metadata
            return ClusterDescription(md.cluster_id, md.controller_id, tuple(md.brokers.values()))

        return await self._calls.run("describe_cluster", timeout_ms, attempt)

    async def describe_features(self, *, timeout_ms: int | None = None) -> FeatureMetadata:
        """The supported and finalized feature levels (KIP-584), from one broker's
        ApiVersions (as Java's ``Admin.describeFeatures``)."""

        async def attempt(deadline: float) -> FeatureMetadata:
            conn = await self._cluster.any_connection()
            if conn.version_for(18) < 3:
                return FeatureMetadata({}, None, {})
            return read_features(await conn.request(18, api_versions_request()))

        return await self._calls.run("describe_features", timeout_ms, attempt)

    async def update_features(
        self,
        updates: Mapping[str, FeatureUpdate],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, KafkaError | None]:
        """Finalize feature levels (UpdateFeatures, KIP-584), through the controller,
        as Java's ``Admin.updateFeatures``.

        The version is the highest both sides speak: v0 has no upgrade type, so a
        downgrade is sent as ``AllowDowngrade`` (which a broker reads as a safe
        downgrade); v1 adds ``validate_only``; v2 answers with one error for the
        request. A KRaft controller applies a request whole or not at all.

        Args:
            updates: feature name -> :class:`FeatureUpdate`.
            validate_only: have the controller check the updates, changing nothing.

        Returns:
            Per feature, in the order given, None when it was applied (or would
            be, with ``validate_only``), else its error: only a broker that
            answers per feature (v0-v1, before KRaft) fails some and not others.

        Raises:
            ValueError: no updates, or an empty feature name.
            KafkaError: the request as a whole was refused:
                INVALID_UPDATE_VERSION (a level the cluster does not support, a
                downgrade without a downgrade type, an unknown feature; the
                message names it), INVALID_REQUEST, CLUSTER_AUTHORIZATION_FAILED
                (the principal lacks ALTER on the cluster).
            UnsupportedVersionError: the broker has no UpdateFeatures, or only
                v0 and ``validate_only`` was asked (v0 cannot carry it).
        """
        check_bool("validate_only", validate_only)
        wanted = feature_updates(updates)
        wait_ms = self._timeout_ms(timeout_ms)

        async def attempt(deadline: float) -> dict[str, KafkaError | None]:
            conn = await self._controller()
            version = conn.version_for(57)
            body = update_features_request(
                version, wanted, timeout_ms=wait_ms, validate_only=validate_only
            )
            resp = await conn.request(57, body, version=version)
            return read_update_features(version, resp, list(wanted))

        return await self._calls.run("update_features", timeout_ms, attempt)

    async def list_topics(
        self, *, include_internal: bool = False, timeout_ms: int | None = None
    ) -> dict[str, int]:
        """Every topic and its partition count.

        Asked of the controller (when it is known), which answers a topic change
        only once its own metadata has it: a change this client made is in the
        next answer, while another broker may learn of it a moment later.
        """
        check_bool("include_internal", include_internal)

        async def attempt(deadline: float) -> dict[str, int]:
            conn = await self._controller()
            v = conn.version_for(3)
            resp = await conn.request(
                3, self._cluster.metadata.build_request_for(v, None, auto_create=False)
            )
            return read_list_topics(resp, include_internal=include_internal)

        return await self._calls.run("list_topics", timeout_ms, attempt)

    async def describe_topics(
        self, names: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TopicInfo]:
        """Partitions, leaders, replicas and in-sync replicas of topics (never creates them).

        Asked of the controller, as :meth:`list_topics` is, so a change this
        client made (a topic created, partitions added) is in the answer.

        Raises:
            KafkaError: a topic does not exist (UNKNOWN_TOPIC_OR_PARTITION) or has another error.
        """
        names = check_topics("names", names)
        names = list(names)

        async def attempt(deadline: float) -> dict[str, TopicInfo]:
            conn = await self._controller()
            v = conn.version_for(3)
            resp = await conn.request(
                3, self._cluster.metadata.build_request_for(v, names, auto_create=False)
            )
            return read_describe_topics(resp, names)

        return await self._calls.run("describe_topics", timeout_ms, attempt)

    async def _change_topics(
        self,
        what: str,
        label: str,
        names: list[str],
        timeout_ms: int | None,
        send: Callable[[BrokerConnection, list[str], float], Awaitable[Iterable[Result]]],
    ) -> None:
        """A topic operation on the controller, per name: ``send(conn, names, left)``
        sends the names still open, with ``left`` seconds of the call's bound, and
        returns ``(name, error code, message)`` per name; see :func:`~trafka.sdk.admin._common.settle` for
        what is sent again. Raises the first failure in ``names`` order."""
        pending = set(names)
        failed: dict[str, KafkaError] = {}

        async def attempt(deadline: float) -> None:
            conn = await self._controller()
            left = max(0.0, deadline - anyio.current_time())
            results = await send(conn, [n for n in names if n in pending], left)
            settle(results, pending, failed, label)

        try:
            await self._calls.run(what, timeout_ms, attempt)
        finally:
            self._cluster.metadata.request_update()
        first_failure(names, failed)

    async def create_topics(
        self,
        topics: Iterable[NewTopic | str],
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Create topics (strings use ``num_partitions`` / ``replication_factor``).

        ``timeout_ms`` bounds the call and is what the controller may take.
        A topic is retried only on NOT_CONTROLLER or THROTTLING_QUOTA_EXCEEDED
        (nothing was done); after a lost answer, a retry can meet the topic its
        first attempt created (TOPIC_ALREADY_EXISTS), as in Kafka's AdminClient.

        Raises:
            KafkaError: e.g. TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_CONFIG.
        """
        topics = check_new_topics(topics, num_partitions, replication_factor)
        check_bool("validate_only", validate_only)
        items = new_topics(topics, num_partitions, replication_factor)

        async def send(conn: BrokerConnection, names: list[str], left: float) -> list[Result]:
            body = create_topics_request(
                conn.version_for(19),
                [items[n] for n in names],
                timeout_ms=int(left * 1000),
                validate_only=validate_only,
            )
            return read_create_topics(await conn.request(19, body, timeout=left + 5))

        await self._change_topics("create_topics", "creating topic", list(items), timeout_ms, send)

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics (retried as :meth:`create_topics` retries).

        Raises:
            KafkaError: e.g. UNKNOWN_TOPIC_OR_PARTITION.
        """
        names = check_topics("names", names)

        async def send(conn: BrokerConnection, todo: list[str], left: float) -> list[Result]:
            body = delete_topics_request(conn.version_for(20), todo, timeout_ms=int(left * 1000))
            return read_delete_topics(await conn.request(20, body, timeout=left + 5))

        wanted = list(dict.fromkeys(names))
        try:
            await self._change_topics("delete_topics", "deleting topic", wanted, timeout_ms, send)
        finally:
            for n in wanted:
                # Gone or not, a cached entry is stale; a lookup will tell.
                self._cluster.metadata.forget_topic(n)

    async def create_partitions(
        self,
        new_totals: Mapping[str, int],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Grow topics to the given partition counts (retried as :meth:`create_topics`).

        Raises:
            KafkaError: e.g. INVALID_PARTITIONS (not more than now).
        """
        new_totals = check_new_totals(new_totals)
        check_bool("validate_only", validate_only)
        totals = dict(new_totals)

        async def send(conn: BrokerConnection, names: list[str], left: float) -> list[Result]:
            body = create_partitions_request(
                {n: totals[n] for n in names},
                timeout_ms=int(left * 1000),
                validate_only=validate_only,
            )
            return read_create_partitions(await conn.request(37, body, timeout=left + 5))

        await self._change_topics(
            "create_partitions", "creating partitions of", list(totals), timeout_ms, send
        )

    async def elect_leaders(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        election_type: str = "preferred",
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Ask the controller to elect leaders (ElectLeaders, KIP-460).

        Args:
            partitions: the partitions; None for every partition that needs one.
            election_type: ``preferred`` (the first replica, if in sync) or
                ``unclean`` (any replica, even out of sync: may lose records).

        Returns:
            Per partition, None when a leader was elected, else the partition's
            error: ELECTION_NOT_NEEDED when its leader already is the one wanted
            (as Java's AdminClient reports it), UNKNOWN_TOPIC_OR_PARTITION...
            With ``partitions=None`` only the partitions the controller acted
            on are listed.

        Raises:
            ValueError: an unknown election type.
            KafkaError: the request as a whole was refused.
        """
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        election = election_type_code(election_type)
        topics = None if partitions is None else by_topic(partitions)
        wait_ms = self._timeout_ms(timeout_ms)

        async def attempt(deadline: float) -> dict[TopicPartition, KafkaError | None]:
            conn = await self._controller()
            body = elect_leaders_request(conn.version_for(43), election, topics, timeout_ms=wait_ms)
            return read_elect_leaders(await conn.request(43, body))

        return await self._calls.run("elect_leaders", timeout_ms, attempt)

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None]
        | Mapping[tuple[str, int], Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions to new replica lists, or cancel a move (None), through the
        controller (AlterPartitionReassignments, KIP-455).

        Returns:
            Per partition, None when the controller took the change, else its error
            (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS,
            UNKNOWN_TOPIC_OR_PARTITION...). A move goes on after the answer; follow
            it with :meth:`list_partition_reassignments`.

        Raises:
            KafkaError: the request as a whole was refused.
        """
        reassignments = check_reassignments(reassignments)
        wanted = partition_reassignments(reassignments)
        body = alter_partition_reassignments_request(
            wanted, timeout_ms=self._timeout_ms(timeout_ms)
        )

        async def attempt(deadline: float) -> dict[TopicPartition, KafkaError | None]:
            conn = await self._controller()
            return read_alter_partition_reassignments(await conn.request(45, body), wanted)

        return await self._calls.run("alter_partition_reassignments", timeout_ms, attempt)

    async def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The partition moves under way (ListPartitionReassignments, KIP-455): all of
        them, or those of ``partitions``. Partitions not being moved are left out."""
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        body = list_partition_reassignments_request(
            partitions, timeout_ms=self._timeout_ms(timeout_ms)
        )

        async def attempt(deadline: float) -> dict[TopicPartition, PartitionReassignment]:
            conn = await self._controller()
            return read_list_partition_reassignments(await conn.request(46, body))

        return await self._calls.run("list_partition_reassignments", timeout_ms, attempt)

    # -- ACLs -------------------------------------------------------------------------------

    async def describe_acls(
        self, acl_filter: AclBindingFilter | None = None, *, timeout_ms: int | None = None
    ) -> list[AclBinding]:
        """The ACLs that match ``acl_filter`` (every ACL by default; DescribeAcls).

        Raises:
            KafkaError: e.g. SECURITY_DISABLED (the cluster has no authorizer) or
                CLUSTER_AUTHORIZATION_FAILED.
        """
        check_instance("acl_filter", acl_filter, AclBindingFilter, none=True)
        f = acl_filter or AclBindingFilter()

        async def attempt(deadline: float) -> list[AclBinding]:
            conn = await self._cluster.any_connection()
            body = describe_acls_request(conn.version_for(29), f)
            return read_describe_acls(await conn.request(29, body))

        return await self._calls.run("describe_acls", timeout_ms, attempt)

    async def create_acls(
        self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None
    ) -> dict[AclBinding, KafkaError | None]:
        """Create ACLs (CreateAcls); per binding None when created, else its error."""
        bindings = check_instances("bindings", bindings, AclBinding)
        wanted = list(dict.fromkeys(bindings))
        body = create_acls_request(wanted)

        async def attempt(deadline: float) -> dict[AclBinding, KafkaError | None]:
            conn = await self._cluster.any_connection()
            return read_create_acls(wanted, await conn.request(30, body))

        return await self._calls.run("create_acls", timeout_ms, attempt)

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        """Delete the ACLs each filter matches (DeleteAcls); per filter the ACLs
        deleted, or its error."""
        filters = check_instances("filters", filters, AclBindingFilter)
        wanted = list(dict.fromkeys(filters))
        body = delete_acls_request(wanted)

        async def attempt(deadline: float) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
            conn = await self._cluster.any_connection()
            return read_delete_acls(wanted, await conn.request(31, body))

        return await self._calls.run("delete_acls", timeout_ms, attempt)

    # -- client quotas ----------------------------------------------------------------------

    async def describe_client_quotas(
        self,
        components: Iterable[ClientQuotaFilterComponent] = (),
        *,
        strict: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The client quotas of the entities the filter matches (DescribeClientQuotas, KIP-546).

        Args:
            components: conditions on entity types, all of which an entity must
                meet (see :class:`~trafka.sdk.ClientQuotaFilterComponent`); none
                matches every entity that has quotas.
            strict: only entities with no entity types besides the components'
                (with no components: nothing).

        Returns:
            Each matching entity's quota keys and values, entities in order of
            their types and names (defaults first).

        Raises:
            KafkaError: INVALID_REQUEST (a type named twice, ``ip`` with
                ``user`` or ``client-id``...), UNSUPPORTED_VERSION (an unknown
                entity type, as Kafka answers it), CLUSTER_AUTHORIZATION_FAILED
                (the principal lacks DESCRIBE_CONFIGS on the cluster).
            UnsupportedVersionError: the broker has no DescribeClientQuotas.
        """
        components = check_instances("components", components, ClientQuotaFilterComponent)
        check_bool("strict", strict)
        body = describe_client_quotas_request(list(components), strict=strict)

        async def attempt(deadline: float) -> dict[ClientQuotaEntity, dict[str, float]]:
            conn = await self._cluster.any_connection()
            return read_describe_client_quotas(await conn.request(48, body))

        return await self._calls.run("describe_client_quotas", timeout_ms, attempt)

    async def alter_client_quotas(
        self,
        alterations: Iterable[ClientQuotaAlteration],
        *,
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> None:
        """Set and remove client quotas (AlterClientQuotas, KIP-546).

        Each entity is changed on its own: one the broker refuses leaves the
        others changed. An entity whose quotas are all removed is forgotten.

        Args:
            alterations: at most one per entity (merge an entity's ops into one).
            validate_only: have the broker check the alterations, changing nothing.

        Raises:
            ValueError: an entity given twice.
            KafkaError: for the first entity that failed, in the order given:
                INVALID_REQUEST (an unknown key or one the entity does not take, a
                value of the wrong kind, an invalid entity), CLUSTER_AUTHORIZATION_FAILED
                (the principal lacks ALTER_CONFIGS on the cluster).
            UnsupportedVersionError: the broker has no AlterClientQuotas.
        """
        alterations = check_instances("alterations", alterations, ClientQuotaAlteration)
        check_bool("validate_only", validate_only)
        wanted = client_quota_alterations(alterations)
        if not wanted:
            return
        pending = set(wanted)
        failed: dict[ClientQuotaEntity, KafkaError] = {}

        async def attempt(deadline: float) -> None:
            conn = await self._cluster.any_connection()
            body = alter_client_quotas_request(
                [alt for entity, alt in wanted.items() if entity in pending],
                validate_only=validate_only,
            )
            read_alter_client_quotas(await conn.request(49, body), pending, failed)

        await self._calls.run("alter_client_quotas", timeout_ms, attempt)
        first_failure(wanted, failed)

    # -- configs ----------------------------------------------------------------------------

    async def describe_configs(
        self,
        topics: Iterable[str] = (),
        brokers: Iterable[int] = (),
        *,
        overrides_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, dict[str, str | None]]:
        """Current configs of topics (keyed by name) and brokers (keyed by ``str(node_id)``).

        Args:
            topics, brokers: the resources.
            overrides_only: leave out settings at their default (static or
                broker-wide values a topic inherits).
        """
        topics = check_topics("topics", topics)
        brokers = check_names("brokers", brokers, check_broker_id, "broker ids")
        check_bool("overrides_only", overrides_only)
        resources = [(TOPIC_RESOURCE, t) for t in topics]
        resources += [(BROKER_RESOURCE, str(b)) for b in brokers]
        return await self._describe_configs(
            "describe_configs", resources, overrides_only, timeout_ms
        )

    async def describe_group_configs(
        self,
        group_ids: Iterable[str],
        *,
        overrides_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, dict[str, str | None]]:
        """Current configs of groups (ConfigResource GROUP), keyed by group id: for
        share groups ``share.auto.offset.reset``, ``share.record.lock.duration.ms``...

        Args:
            overrides_only: leave out settings at their default (the broker's).
        """
        group_ids = check_group_ids("group_ids", group_ids)
        check_bool("overrides_only", overrides_only)
        resources = [(GROUP_RESOURCE, g) for g in group_ids]
        return await self._describe_configs(
            "describe_group_configs", resources, overrides_only, timeout_ms
        )

    async def _describe_configs(
        self,
        what: str,
        resources: list[tuple[int, str]],
        overrides_only: bool,
        timeout_ms: int | None,
    ) -> dict[str, dict[str, str | None]]:
        async def attempt(deadline: float) -> dict[str, dict[str, str | None]]:
            conn = await self._controller()
            body = describe_configs_request(conn.version_for(32), resources)
            resp = await conn.request(32, body)
            return read_describe_configs(resp, overrides_only=overrides_only)

        return await self._calls.run(what, timeout_ms, attempt)

    async def alter_topic_configs(
        self,
        changes: Mapping[str, Mapping[str, str | None]],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set (or, with ``None``, reset to default) topic configs.

        Uses IncrementalAlterConfigs when the broker has it (other settings are
        kept), else AlterConfigs (which replaces the topic's whole config).
        Both are idempotent, so a retry repeats the whole change.
        """
        changes = check_config_changes("changes", changes, check_topic)
        await self._alter_configs("alter_topic_configs", TOPIC_RESOURCE, changes, timeout_ms)

    async def alter_group_configs(
        self,
        changes: Mapping[str, Mapping[str, str | None]],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set (or, with ``None``, reset to default) group configs (ConfigResource
        GROUP), as :meth:`alter_topic_configs` does for topics. A share group starts
        reading where ``share.auto.offset.reset`` says (``latest`` by default)::

            await admin.alter_group_configs({"workers": {"share.auto.offset.reset": "earliest"}})
        """
        changes = check_config_changes("changes", changes, check_group_id)
        await self._alter_configs("alter_group_configs", GROUP_RESOURCE, changes, timeout_ms)

    async def list_client_metrics_resources(self, *, timeout_ms: int | None = None) -> list[str]:
        """The names of the client-metrics resources (KIP-714 subscriptions), sorted,
        as Java's ``listClientMetricsResources`` (ListClientMetricsResources, key 74).

        Raises:
            KafkaError: CLUSTER_AUTHORIZATION_FAILED without DESCRIBE_CONFIGS on
                the cluster; UNSUPPORTED_VERSION from a broker without the API.
        """

        async def attempt(deadline: float) -> list[str]:
            conn = await self._controller()
            if not conn.supports(74):
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    "the broker does not serve ListClientMetricsResources (Kafka 3.7+)",
                )
            resp = await conn.request(74, list_client_metrics_resources_request())
            return read_list_client_metrics_resources(resp)

        return await self._calls.run("list_client_metrics_resources", timeout_ms, attempt)

    async def describe_client_metrics_configs(
        self,
        names: Iterable[str],
        *,
        overrides_only: bool = False,
        timeout_ms: int | None = None,
    ) -> dict[str, dict[str, str | None]]:
        """The settings of client-metrics resources (ConfigResource CLIENT_METRICS),
        keyed by name: ``metrics``, ``interval.ms`` and ``match``, each the
        resource's own value or Kafka's default (any name can be described).

        Args:
            overrides_only: only the settings the resource sets.
        """
        names = check_names("names", names, _any_str)
        check_bool("overrides_only", overrides_only)
        resources = [(CLIENT_METRICS_RESOURCE, n) for n in names]
        return await self._describe_configs(
            "describe_client_metrics_configs", resources, overrides_only, timeout_ms
        )

    async def alter_client_metrics_configs(
        self,
        name: str,
        changes: Mapping[str, str | None],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set (or, with ``None``, delete) settings of one client-metrics resource, as
        :meth:`alter_group_configs` does for groups; deleting every setting deletes
        the resource. Lists are comma-separated strings::

            await admin.alter_client_metrics_configs(
                "producers", {"metrics": "org.apache.kafka.producer.", "interval.ms": "1000"}
            )

        Raises:
            KafkaError: INVALID_REQUEST (empty name, unknown setting, interval
                outside 100-3600000 ms) or INVALID_CONFIG (a bad ``match`` item or
                value), as the broker refuses it.
        """
        check_str("name", name, empty=True)  # the broker's to refuse (INVALID_REQUEST)
        changes = check_config_changes("changes", {name: changes}, _any_str)[name]
        await self._alter_configs(
            "alter_client_metrics_configs", CLIENT_METRICS_RESOURCE, {name: changes}, timeout_ms
        )

    async def _alter_configs(
        self,
        what: str,
        resource_type: int,
        changes: Mapping[str, Mapping[str, str | None]],
        timeout_ms: int | None,
    ) -> None:
        async def attempt(deadline: float) -> None:
            conn = await self._controller()
            if conn.supports(44):
                resp = await conn.request(
                    44, incremental_alter_configs_request(resource_type, changes)
                )
            else:
                resp = await conn.request(33, alter_configs_request(resource_type, changes))
            read_alter_configs(resp)

        await self._calls.run(what, timeout_ms, attempt)

    # -- offsets and records ----------------------------------------------------------------

    @overload
    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        timeout_ms: int | None = None,
        partial: Literal[False] = False,
    ) -> dict[TopicPartition, tuple[int, int] | None]: ...

    @overload
    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        timeout_ms: int | None = None,
        partial: Literal[True],
    ) -> dict[TopicPartition, tuple[int, int] | TrafkaError | None]: ...

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        timeout_ms: int | None = None,
        partial: bool = False,
    ) -> dict[TopicPartition, Any]:
        """Offsets by ``"earliest"``, ``"latest"`` or a timestamp: ``(offset, timestamp)`` or None.

        Args:
            specs: what to look up, per partition.
            timeout_ms: the call's bound (default ``default.api.timeout.ms``).
            partial: answer what can be answered: a partition that is offline
                (no leader, its replicas offline, in metadata refreshed for the
                call) has a :class:`KafkaError` LEADER_NOT_AVAILABLE as its
                result at once, and one whose leader cannot be reached by the
                deadline the error that kept it, instead of the call waiting
                for it and failing as a whole.

        Raises:
            KafkaError: a topic or partition that does not exist, or another
                final error of a leader.
            ApiTimeoutError: without ``partial``, some partition not answered
                within the call's bound (a partition without a leader: its
                replicas' brokers are down).
        """
        specs = check_offsets("specs", specs, check_value=check_offset_spec)
        check_bool("partial", partial)
        targets = offset_targets(specs)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            request = list_offsets_request(conn.version_for(2), {tp: targets[tp] for tp in tps})
            return read_list_offsets(await conn.request(2, request))

        return await self._calls.per_leader(
            "list_offsets", targets, ask, timeout_ms, partial=partial
        )

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete records before the given offsets (-1: the high watermark). Returns new low watermarks."""
        before = check_offsets("before", before, minimum=-1)
        offsets = {TopicPartition(*tp): o for tp, o in before.items()}
        # What the leaders may take, of the call's own bound.
        wait_ms = self._timeout_ms(timeout_ms)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            body = delete_records_request(offsets, tps, timeout_ms=wait_ms)
            return read_delete_records(await conn.request(21, body))

        return await self._calls.per_leader("delete_records", offsets, ask, timeout_ms)

    # -- groups -----------------------------------------------------------------------------

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

    async def _log_dirs_response(
        self, conn: BrokerConnection, by_topic: Mapping[str, Sequence[int]] | None
    ) -> Any:
        """DescribeLogDirs of ``conn``'s broker: of the partitions in ``by_topic``
        (None: all of them)."""
        resp = await conn.request(35, describe_log_dirs_request(by_topic))
        check_log_dirs(conn.version_for(35), resp)
        return resp

    async def describe_log_dirs(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> list[LogDirDescription]:
        """Every broker's log directories and the size of each partition in them
        (only ``partitions`` when given; partitions a broker does not hold are left out)."""
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        topics = None if partitions is None else by_topic(partitions)

        async def ask(conn: BrokerConnection) -> list[LogDirDescription]:
            resp = await self._log_dirs_response(conn, topics)
            return read_log_dirs(conn.node_id, conn.version_for(35), resp)

        found = await self._per_node("describe_log_dirs", ask, timeout_ms)
        return [d for dirs in found for d in dirs]

    async def _replica_broker(self, broker_id: int) -> BrokerConnection | None:
        """The connection to ``broker_id``; None when the cluster's metadata (just
        refreshed) has no such broker."""
        await self._cluster.refresh_metadata()
        if self._cluster.metadata.broker(broker_id) is None:
            return None
        return await self._cluster.connection(broker_id)

    async def alter_replica_log_dirs(
        self,
        assignments: Mapping[TopicPartitionReplica, str] | Mapping[tuple[str, int, int], str],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartitionReplica, KafkaError | None]:
        """Move replicas to other log directories of their brokers
        (AlterReplicaLogDirs, KIP-113), as Java's ``alterReplicaLogDirs``: one
        request to each replica's broker, with the replicas grouped by directory.

        Args:
            assignments: per replica ``(topic, partition, broker_id)``, the
                directory to move it to, an absolute path exactly as the broker
                names it (see :meth:`describe_log_dirs`).

        Returns:
            Per replica, None when its broker took the move (a broker copies the
            replica in the background and switches to the copy once it has
            caught up: follow it with :meth:`describe_replica_log_dirs`; a
            replica already in that directory stays), else its error:
            LOG_DIR_NOT_FOUND for a directory the broker does not have,
            UNKNOWN_TOPIC_OR_PARTITION, KAFKA_STORAGE_ERROR (the directory is
            offline), CLUSTER_AUTHORIZATION_FAILED (ALTER on the cluster is
            needed), BROKER_NOT_AVAILABLE for a broker id the cluster does not
            have (where Java's client waits for it until its timeout).

        Raises:
            UnsupportedVersionError: a broker without AlterReplicaLogDirs.
        """
        assignments = check_log_dir_assignments(assignments)
        wanted = {TopicPartitionReplica(*r): str(path) for r, path in assignments.items()}
        plan = alter_replica_log_dirs_plan(wanted)
        out: dict[TopicPartitionReplica, KafkaError | None] = {}

        async def attempt(deadline: float) -> dict[TopicPartitionReplica, KafkaError | None]:
            for broker, dirs in plan.items():
                mine = [r for r in wanted if r.broker_id == broker]
                if all(r in out for r in mine):
                    continue  # answered in an earlier attempt
                conn = await self._replica_broker(broker)
                if conn is None:
                    for r in mine:
                        out[r] = KafkaError(
                            ErrorCode.BROKER_NOT_AVAILABLE,
                            f"{moving(r, wanted[r])}: the cluster has no broker {broker}",
                        )
                    continue
                resp = await conn.request(34, alter_replica_log_dirs_request(dirs))
                out.update(read_alter_replica_log_dirs(broker, resp, wanted))
            return {r: out[r] for r in wanted}

        return await self._calls.run("alter_replica_log_dirs", timeout_ms, attempt)

    async def describe_replica_log_dirs(
        self,
        replicas: Iterable[TopicPartitionReplica] | Iterable[tuple[str, int, int]],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartitionReplica, ReplicaLogDirInfo]:
        """Where brokers keep replicas: the current directory, the one a move
        (:meth:`alter_replica_log_dirs`) copies to, their offset lags and sizes.
        Derived from DescribeLogDirs, one request to each replica's broker, as
        Java's ``describeReplicaLogDirs``.

        Returns:
            Per replica, its :class:`ReplicaLogDirInfo`; all None for a replica
            its broker does not hold (an unknown partition included) or holds
            only in an offline directory (KAFKA_STORAGE_ERROR), as Java reports it.

        Raises:
            KafkaError: a broker refused the request (CLUSTER_AUTHORIZATION_FAILED:
                DESCRIBE on the cluster is needed), or reported another error for
                one of its directories; BROKER_NOT_AVAILABLE for a broker id the
                cluster does not have.
        """
        replicas = check_names("replicas", replicas, check_replica, "replicas")
        wanted = list(dict.fromkeys(TopicPartitionReplica(*r) for r in replicas))
        plan = replica_log_dirs_plan(wanted)
        out: dict[TopicPartitionReplica, ReplicaLogDirInfo] = {}

        async def attempt(deadline: float) -> dict[TopicPartitionReplica, ReplicaLogDirInfo]:
            for broker, topics in plan.items():
                mine = [r for r in wanted if r.broker_id == broker]
                if all(r in out for r in mine):
                    continue
                conn = await self._replica_broker(broker)
                if conn is None:
                    raise KafkaError(
                        ErrorCode.BROKER_NOT_AVAILABLE,
                        f"describing replica log dirs: the cluster has no broker {broker}",
                    )
                resp = await self._log_dirs_response(conn, topics)
                out.update(read_replica_log_dirs(broker, resp, mine))
            return {r: out[r] for r in wanted}

        return await self._calls.run("describe_replica_log_dirs", timeout_ms, attempt)

    async def list_groups(
        self, *, types: Iterable[str] | None = None, timeout_ms: int | None = None
    ) -> list[GroupListing]:
        """Every group on every broker.

        Args:
            types: only groups of these types (``classic``, ``consumer``,
                ``share``...; any case); None for all. Brokers answering ListGroups
                v5 filter themselves; older ones are filtered here (their groups
                are all ``classic``).
        """
        if types is not None:
            types = check_names("types", types, check_str, "group types")
        wanted = group_types(types)

        async def ask(conn: BrokerConnection) -> list[GroupListing]:
            body = list_groups_request(conn.version_for(16), wanted)
            return read_list_groups(await conn.request(16, body), wanted)

        return [
            g for listing in await self._per_node("list_groups", ask, timeout_ms) for g in listing
        ]

    async def describe_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, GroupDescription]:
        """State and members of groups."""
        group_ids = check_group_ids("group_ids", group_ids)
        ids = list(dict.fromkeys(group_ids))
        out: dict[str, GroupDescription] = {}

        async def attempt(deadline: float) -> dict[str, GroupDescription]:
            for gid in ids:
                if gid in out:
                    continue
                conn = await self._coordinator(gid)
                resp = await conn.request(15, describe_groups_request(conn.version_for(15), gid))
                for g in resp.groups:
                    if g.group_id != gid:
                        continue
                    if not_classic(g):
                        found = await self._describe_consumer_group(conn, gid)
                        if found is not None:
                            out[gid] = found
                            continue
                    out[gid] = read_classic_group(g)
            return answered(ids, out, "describing group")

        return await self._calls.run("describe_groups", timeout_ms, attempt)

    async def _describe_consumer_group(
        self, conn: BrokerConnection, group_id: str
    ) -> GroupDescription | None:
        """ConsumerGroupDescribe ``group_id``; None when the broker lacks the API or
        the group is not a consumer group."""
        if not conn.supports(69):
            return None
        resp = await conn.request(69, consumer_group_describe_request(group_id))
        return read_consumer_group_describe(resp, group_id)

    async def describe_share_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, ShareGroupDescription]:
        """State, epochs and members of share groups (ShareGroupDescribe, KIP-932).

        Raises:
            KafkaError: for the first group that failed, in the order given:
                GROUP_ID_NOT_FOUND for a group that does not exist or is not a
                share group; UNSUPPORTED_VERSION from a broker without share groups.
        """
        group_ids = check_group_ids("group_ids", group_ids)
        ids = list(dict.fromkeys(group_ids))
        out: dict[str, ShareGroupDescription] = {}

        async def attempt(deadline: float) -> dict[str, ShareGroupDescription]:
            for gid in ids:
                if gid in out:
                    continue
                conn = await self._coordinator(gid)
                if not conn.supports(77):
                    raise share_group_describe_unsupported(gid)
                resp = await conn.request(77, share_group_describe_request(gid))
                found = read_share_group_describe(resp, gid)
                if found is not None:
                    out[gid] = found
            return answered(ids, out, "describing share group")

        return await self._calls.run("describe_share_groups", timeout_ms, attempt)

    async def delete_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Delete empty groups (their committed offsets go too)."""
        group_ids = check_group_ids("group_ids", group_ids)
        pending = list(dict.fromkeys(group_ids))

        async def attempt(deadline: float) -> None:
            while pending:
                gid = pending[0]
                conn = await self._coordinator(gid)
                read_delete_groups(await conn.request(42, delete_groups_request(gid)), gid)
                pending.pop(0)

        await self._calls.run("delete_groups", timeout_ms, attempt)

    async def remove_members_from_consumer_group(
        self,
        group_id: str,
        members: Iterable[str] | None = None,
        *,
        reason: str | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, KafkaError | None]:
        """Remove members from a group, as Java's ``removeMembersFromConsumerGroup``:
        one LeaveGroup (v3+, KIP-345) to the group's coordinator on their behalf.

        Meant for static members (``group.instance.id``) that are gone: they send
        no LeaveGroup when they close, so the group would wait a whole session
        timeout before giving their partitions to the others. A removed member
        still running finds out at its next heartbeat (UNKNOWN_MEMBER_ID) and
        joins again. Groups of the consumer protocol (KIP-848) take it too: the
        member is fenced and the group's assignment recomputed.

        Args:
            group_id: the group.
            members: the group instance ids of the members to remove (Java's
                ``MemberToRemove`` names a member by nothing else). None removes
                every member (Java's "removeAll"): the group is described first,
                and each member is named by its instance id, or by its member id
                when it has none.
            reason: why, for the broker's log (LeaveGroup v5+; Kafka 3.2);
                default :data:`DEFAULT_LEAVE_GROUP_REASON`; cut to 255 characters.

        Returns:
            Per member, by instance id (by member id for a dynamic member of a
            removeAll), None when it was removed, else its error:
            UNKNOWN_MEMBER_ID for an instance id the group does not have (for
            every member of a group that does not exist), FENCED_INSTANCE_ID.
            A removeAll of a group without members returns ``{}`` and sends
            nothing (where Java's client fails: "leaving members should not be
            empty").

        Raises:
            ValueError: ``members`` given but empty.
            KafkaError: for the group as a whole: GROUP_AUTHORIZATION_FAILED
                (READ on the group is needed), GROUP_ID_NOT_FOUND when a removeAll
                finds no such group, UNSUPPORTED_VERSION from a broker older than
                LeaveGroup v3 (Kafka 2.4). A coordinator that is loading, moved
                or not available is waited for, as Java does.
        """
        check_group_id("group_id", group_id)
        if members is not None:
            members = check_names("members", members, check_str, "group instance ids")
        check_str("reason", reason, empty=True, none=True)
        started = anyio.current_time()
        if members is not None:
            identities = leaving_members(members)
        else:
            desc = (await self.describe_groups([group_id], timeout_ms=timeout_ms))[group_id]
            identities = removing_all(desc)
            if not identities:
                return {}
            used_ms = int((anyio.current_time() - started) * 1000)
            timeout_ms = max(0, self._timeout_ms(timeout_ms) - used_ms)

        async def attempt(deadline: float) -> dict[str, KafkaError | None]:
            conn = await self._coordinator(group_id)
            body = leave_group_request(conn.version_for(13), group_id, identities, reason)
            return read_leave_group(await conn.request(13, body), group_id, identities)

        return await self._calls.run("remove_members_from_consumer_group", timeout_ms, attempt)

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (all its partitions when ``partitions`` is None)."""
        check_group_id("group_id", group_id)
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def attempt(deadline: float) -> dict[TopicPartition, int]:
            conn = await self._coordinator(group_id)
            v = conn.version_for(9)
            if wanted is None:
                body = offset_fetch_all_request(v, group_id)
            else:
                body = offset_fetch_request(v, group_id, wanted)
            return read_group_offsets(v, await conn.request(9, body), group_id)

        return await self._calls.run("list_consumer_group_offsets", timeout_ms, attempt)

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit offsets for a group that has no active members."""
        check_group_id("group_id", group_id)
        offsets = check_offsets("offsets", offsets, check_value=check_committed_offset)
        wanted = {TopicPartition(*tp): o for tp, o in offsets.items()}

        async def attempt(deadline: float) -> None:
            conn = await self._coordinator(group_id)
            body = offset_commit_request(conn.version_for(8), group_id, wanted)
            read_alter_group_offsets(await conn.request(8, body), group_id)

        await self._calls.run("alter_consumer_group_offsets", timeout_ms, attempt)

    async def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Delete a group's committed offsets of ``partitions`` (OffsetDelete, KIP-496).

        While the group has members, none may subscribe to the partitions' topics;
        an offset that was never committed is deleted just as well (nothing happens).

        Raises:
            KafkaError: GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP (the group), or
                GROUP_SUBSCRIBED_TO_TOPIC for a partition whose topic a member
                subscribes to (the others' offsets are deleted even so, as Kafka does).
        """
        check_group_id("group_id", group_id)
        partitions = check_topic_partitions("partitions", partitions)
        body = offset_delete_request(group_id, by_topic(partitions))

        async def attempt(deadline: float) -> None:
            conn = await self._coordinator(group_id)
            read_offset_delete(await conn.request(47, body), group_id)

        await self._calls.run("delete_consumer_group_offsets", timeout_ms, attempt)

    # -- share-group offsets (KIP-932) ---------------------------------------------------------

    async def _share_offsets_coordinator(self, group_id: str, api_key: int, what: str) -> Any:
        conn = await self._coordinator(group_id)
        if not conn.supports(api_key):
            raise share_offsets_unsupported(api_key, what)
        return conn

    async def list_share_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, SharePartitionOffsetInfo | None]:
        """A share group's start offsets (and lags) per partition
        (DescribeShareGroupOffsets, sent to the group's coordinator).

        Args:
            group_id: the share group.
            partitions: the partitions to report, in the order of the answer;
                None for every partition the group has share state for (by topic
                and partition).

        Returns:
            Per partition its :class:`SharePartitionOffsetInfo`, or None where the
            group has no share state (the start offset -1: never started, its
            state deleted, a topic that does not exist). As in Kafka, a group
            that does not exist or is not a share group is no error: it has no
            state anywhere.

        Raises:
            KafkaError: for the group (INVALID_GROUP_ID, UNSUPPORTED_VERSION from a
                broker before Kafka 4.1), or for the first partition the broker
                reports an error for.
        """
        check_group_id("group_id", group_id)
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        wanted = (
            None
            if partitions is None
            else list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        )
        body = describe_share_group_offsets_request(group_id, wanted)
        what = f"listing the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> dict[TopicPartition, SharePartitionOffsetInfo | None]:
            conn = await self._share_offsets_coordinator(group_id, 90, what)
            resp = await conn.request(90, body)
            return read_describe_share_group_offsets(
                conn.version_for(90), resp, group_id, wanted, what
            )

        return await self._calls.run("list_share_group_offsets", timeout_ms, attempt)

    async def alter_share_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set a share group's start offsets (AlterShareGroupOffsets). Each
        partition named starts afresh at its offset: records from it on are
        delivered again (with delivery count 1), records below it never.

        The group must have no members; a group id no group has becomes an empty
        share group, as in Kafka.

        Raises:
            KafkaError: for the group (NON_EMPTY_GROUP while it has members,
                GROUP_ID_NOT_FOUND for a group of another type, INVALID_GROUP_ID,
                UNSUPPORTED_VERSION from a broker before Kafka 4.1), or for the
                first partition, in the order given, that was not set
                (UNKNOWN_TOPIC_OR_PARTITION; from brokerlite also
                OFFSET_OUT_OF_RANGE past the log end, INVALID_REQUEST for a
                negative offset); the others are set even so.
        """
        check_group_id("group_id", group_id)
        offsets = check_offsets("offsets", offsets)
        wanted = {TopicPartition(*tp): o for tp, o in offsets.items()}
        if not wanted:
            return
        body = alter_share_group_offsets_request(group_id, wanted)
        what = f"altering the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> None:
            conn = await self._share_offsets_coordinator(group_id, 91, what)
            read_alter_share_group_offsets(await conn.request(91, body), group_id, wanted, what)

        await self._calls.run("alter_share_group_offsets", timeout_ms, attempt)

    async def delete_share_group_offsets(
        self, group_id: str, topics: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Forget a share group's state of whole topics (DeleteShareGroupOffsets):
        the next member starts their partitions by the group's
        ``share.auto.offset.reset``.

        The group must have no members.

        Raises:
            KafkaError: for the group (GROUP_ID_NOT_FOUND for none or one of
                another type, NON_EMPTY_GROUP while it has members,
                UNSUPPORTED_VERSION from a broker before Kafka 4.1), or for the
                first topic, in the order given, whose state was not deleted
                (UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist or
                that the group has no state of); the others are deleted even so.
        """
        check_group_id("group_id", group_id)
        topics = check_topics("topics", topics)
        pending = list(dict.fromkeys(topics))
        if not pending:
            return
        what = f"deleting the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> None:
            conn = await self._share_offsets_coordinator(group_id, 92, what)
            body = delete_share_group_offsets_request(group_id, pending)
            read_delete_share_group_offsets(await conn.request(92, body), pending, what)

        await self._calls.run("delete_share_group_offsets", timeout_ms, attempt)

    # -- users ------------------------------------------------------------------------------

    async def describe_user_scram_credentials(
        self, users: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> dict[str, UserScramCredentialsDescription]:
        """The SCRAM credentials of ``users`` (every user that has one when None,
        nobody for an empty list): mechanisms and iteration counts
        (DescribeUserScramCredentials, KIP-554).

        Raises:
            KafkaError: RESOURCE_NOT_FOUND for a user without SCRAM credentials
                (the first failing user, in the order given), or the broker's
                error for the whole request.
        """
        if users is not None:
            users = check_names("users", users, check_str, "user names")
        names = None if users is None else list(dict.fromkeys(users))
        if names == []:
            return {}  # (an empty list would ask the broker for every user)
        body = describe_user_scram_credentials_request(names)

        async def attempt(deadline: float) -> dict[str, UserScramCredentialsDescription]:
            conn = await self._cluster.any_connection()
            return read_describe_user_scram_credentials(await conn.request(50, body), names)

        return await self._calls.run("describe_user_scram_credentials", timeout_ms, attempt)

    async def alter_user_scram_credentials(
        self,
        alterations: Iterable[UserScramCredentialUpsertion | UserScramCredentialDeletion],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set or delete users' SCRAM credentials (AlterUserScramCredentials, KIP-554).

        An upsertion's password is salted and hashed here (PBKDF2 with the
        mechanism's hash); only the salt, the iteration count and the salted
        password are sent. A user takes effect for its next login.

        Args:
            alterations: at most one per user: as Kafka, a user named twice in
                one call (even for two mechanisms) is refused with DUPLICATE_RESOURCE.

        Raises:
            ValueError: an unknown mechanism name, or iterations below 1.
            KafkaError: for the first user that failed, in the order given (the
                other users' changes are made): UNACCEPTABLE_CREDENTIAL (empty
                name, iterations outside 4096-16384), UNSUPPORTED_SASL_MECHANISM,
                RESOURCE_NOT_FOUND (deleting a credential that does not exist),
                DUPLICATE_RESOURCE.
        """
        alterations = check_instances(
            "alterations", alterations, (UserScramCredentialUpsertion, UserScramCredentialDeletion)
        )
        plan = scram_alterations(alterations)
        pending = set(plan.users)
        failed: dict[str, KafkaError] = {}

        async def attempt(deadline: float) -> None:
            conn = await self._controller()
            resp = await conn.request(51, alter_user_scram_credentials_request(plan, pending))
            settle(
                read_alter_user_scram_credentials(resp),
                pending,
                failed,
                "altering the SCRAM credentials of user",
            )

        if plan.users:
            await self._calls.run("alter_user_scram_credentials", timeout_ms, attempt)
        first_failure(plan.users, failed)

    # -- delegation tokens (KIP-48) --------------------------------------------------------

    async def create_delegation_token(
        self,
        *,
        renewers: Iterable[str] = (),
        owner: str | None = None,
        max_lifetime_ms: int = -1,
        timeout_ms: int | None = None,
    ) -> DelegationToken:
        """A new delegation token (CreateDelegationToken; Java's
        ``Admin.createDelegationToken``): owned by this client's principal, or
        by ``owner`` (which needs CREATE_TOKENS on that user, and a broker
        speaking v3, Kafka 3.3+).

        Args:
            renewers: principals that may renew and expire it besides its owner
                (``User:bob``, or a bare user name).
            max_lifetime_ms: its maximum lifetime; the broker's
                ``delegation.token.max.lifetime.ms`` caps it, and -1 (or 0) means
                that.

        Raises:
            ValueError: a malformed principal.
            UnsupportedVersionError: ``owner`` given to a broker without v3.
            KafkaError: DELEGATION_TOKEN_AUTH_DISABLED (tokens are off),
                DELEGATION_TOKEN_REQUEST_NOT_ALLOWED (a PLAINTEXT listener, or
                this connection logged in with a token),
                DELEGATION_TOKEN_AUTHORIZATION_FAILED, INVALID_PRINCIPAL_TYPE.
        """
        renewers = check_names("renewers", renewers, check_str, "principals")
        check_str("owner", owner, none=True)
        check_int("max_lifetime_ms", max_lifetime_ms, minimum=-1, maximum=INT64_MAX)
        renewer_list = token_renewers(renewers)
        owner_pair = None if owner is None else token_principal(owner, "owner")

        async def attempt(deadline: float) -> DelegationToken:
            conn = await self._cluster.any_connection()
            body = create_delegation_token_request(
                conn.version_for(38), renewer_list, owner_pair, max_lifetime_ms=max_lifetime_ms
            )
            return read_create_delegation_token(await conn.request(38, body), renewer_list)

        return await self._calls.run("create_delegation_token", timeout_ms, attempt)

    async def renew_delegation_token(
        self, hmac: bytes, *, renew_period_ms: int = -1, timeout_ms: int | None = None
    ) -> int:
        """Renew the token whose HMAC is ``hmac`` (its owner or a renewer may):
        it now expires ``renew_period_ms`` from now (-1: the broker's
        ``delegation.token.expiry.time.ms``, which also caps it), never past its
        maximum timestamp. Returns the new expiry timestamp (ms).

        Raises:
            KafkaError: DELEGATION_TOKEN_NOT_FOUND, DELEGATION_TOKEN_EXPIRED,
                DELEGATION_TOKEN_OWNER_MISMATCH, DELEGATION_TOKEN_AUTH_DISABLED,
                DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
        """
        check_hmac(hmac)
        check_int("renew_period_ms", renew_period_ms, minimum=None, maximum=INT64_MAX)
        body = renew_delegation_token_request(hmac, renew_period_ms)

        async def attempt(deadline: float) -> int:
            conn = await self._cluster.any_connection()
            return read_expiry(await conn.request(39, body), "renewing a delegation token")

        return await self._calls.run("renew_delegation_token", timeout_ms, attempt)

    async def expire_delegation_token(
        self, hmac: bytes, *, expiry_period_ms: int = -1, timeout_ms: int | None = None
    ) -> int:
        """Expire the token whose HMAC is ``hmac`` (its owner or a renewer may):
        at once with a negative ``expiry_period_ms`` (the default; the broker
        forgets the token, and answers the period itself as the timestamp, as
        Kafka does), otherwise that long from now, never past its maximum
        timestamp. Returns the expiry timestamp the broker answered.

        Raises:
            KafkaError: as :meth:`renew_delegation_token`.
        """
        check_hmac(hmac)
        check_int("expiry_period_ms", expiry_period_ms, minimum=None, maximum=INT64_MAX)
        body = expire_delegation_token_request(hmac, expiry_period_ms)

        async def attempt(deadline: float) -> int:
            conn = await self._cluster.any_connection()
            return read_expiry(await conn.request(40, body), "expiring a delegation token")

        return await self._calls.run("expire_delegation_token", timeout_ms, attempt)

    async def describe_delegation_tokens(
        self, owners: Iterable[str] | None = None, *, timeout_ms: int | None = None
    ) -> list[DelegationToken]:
        """The tokens of ``owners`` (principals, or bare user names; None: every
        owner) that this client may see: those it owns, requested or may renew,
        and those its ACLs let it describe. By issue time, as the broker lists them.

        Raises:
            KafkaError: DELEGATION_TOKEN_AUTH_DISABLED,
                DELEGATION_TOKEN_REQUEST_NOT_ALLOWED.
        """
        if owners is not None:
            owners = check_names("owners", owners, check_str, "principals")
        owner_list = describe_delegation_token_owners(owners)
        if owner_list == []:
            return []  # (as the broker answers an empty list)
        body = describe_delegation_token_request(owner_list)

        async def attempt(deadline: float) -> list[DelegationToken]:
            conn = await self._cluster.any_connection()
            return read_describe_delegation_token(await conn.request(41, body))

        return await self._calls.run("describe_delegation_tokens", timeout_ms, attempt)

    # -- transactions -----------------------------------------------------------------------

    @overload
    async def describe_producers(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        partial: Literal[False] = False,
    ) -> dict[TopicPartition, list[ProducerState]]: ...

    @overload
    async def describe_producers(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        partial: Literal[True],
    ) -> dict[TopicPartition, list[ProducerState] | TrafkaError]: ...

    async def describe_producers(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
        partial: bool = False,
    ) -> dict[TopicPartition, Any]:
        """The producers each partition's leader keeps state for, with the first
        offset of the transaction each has open there (KIP-664).

        ``partial``: as :meth:`list_offsets`'s, an offline partition, or one
        whose leader cannot be reached, has the error as its result.
        """
        partitions = check_topic_partitions("partitions", partitions)
        check_bool("partial", partial)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            return read_describe_producers(await conn.request(61, describe_producers_request(tps)))

        wanted = [TopicPartition(*tp) for tp in partitions]
        return await self._calls.per_leader(
            "describe_producers", wanted, ask, timeout_ms, partial=partial
        )

    async def list_transactions(
        self,
        *,
        states: Iterable[str] = (),
        producer_ids: Iterable[int] = (),
        min_duration_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> list[TransactionListing]:
        """The transactional ids every coordinator knows, optionally only those in
        one of ``states``, of one of ``producer_ids``, or (Kafka 3.8+, KIP-994)
        with a transaction open for at least ``min_duration_ms``.

        Raises:
            ValueError: a state the brokers do not know (they name it).
            UnsupportedVersionError: ``min_duration_ms`` and a broker without
                ListTransactions v1.
        """
        states = check_names("states", states, check_str, "transaction states")
        producer_ids = check_names("producer_ids", producer_ids, check_producer_id, "producer ids")
        if min_duration_ms is not None:
            check_int("min_duration_ms", min_duration_ms, minimum=0, maximum=INT64_MAX)
        state_filters, pid_filters = list(states), list(producer_ids)

        async def ask(conn: BrokerConnection) -> Any:
            version = conn.version_for(66)
            request = list_transactions_request(
                version, conn.node_id, state_filters, pid_filters, min_duration_ms
            )
            return check_list_transactions(await conn.request(66, request, version=version))

        return read_list_transactions(await self._per_node("list_transactions", ask, timeout_ms))

    async def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TransactionDescription]:
        """The state of transactional ids at their coordinators.

        Raises:
            KafkaError: TRANSACTIONAL_ID_NOT_FOUND for an id no coordinator knows.
        """
        transactional_ids = check_names(
            "transactional_ids", transactional_ids, check_str, "transactional ids"
        )
        ids = list(dict.fromkeys(transactional_ids))
        out: dict[str, TransactionDescription] = {}

        async def attempt(deadline: float) -> dict[str, TransactionDescription]:
            for tid in ids:
                if tid in out:
                    continue
                conn = await self._coordinator(tid, TRANSACTION_KEY)
                resp = await conn.request(65, describe_transactions_request(tid))
                # The coordinator's own connection has an id of its own.
                found = read_describe_transactions(resp, tid, COORDINATOR_BASE - conn.node_id)
                if found is not None:
                    out[tid] = found
            return answered(ids, out, "describing transactional id")

        return await self._calls.run("describe_transactions", timeout_ms, attempt)

    async def fence_producers(
        self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Fence the producers of transactional ids, as a new producer with the same
        id would (KIP-618): the coordinator bumps each id's epoch and aborts its
        open transaction; the old producer's next call fails with
        ProducerFencedError. An id the coordinator does not know yet gets a
        producer id, so a producer that starts later is not affected.

        Raises:
            KafkaError: the coordinator refused (CONCURRENT_TRANSACTIONS is not
                an error: the abort it reports has fenced the producer already).
        """
        transactional_ids = check_names(
            "transactional_ids", transactional_ids, check_str, "transactional ids"
        )
        txn_timeout = self.config.request_timeout_ms
        pending = list(dict.fromkeys(transactional_ids))

        async def attempt(deadline: float) -> None:
            while pending:
                tid = pending[0]
                conn = await self._coordinator(tid, TRANSACTION_KEY)
                version = conn.version_for(22)
                request = fence_producer_request(version, tid, txn_timeout)
                read_fence_producer(await conn.request(22, request, version=version), tid)
                pending.pop(0)

        await self._calls.run("fence_producers", timeout_ms, attempt)

    async def find_hanging_transactions(
        self,
        topics: Iterable[str] | None = None,
        *,
        max_transaction_timeout_ms: int = 900_000,
        now_ms: int | None = None,
        timeout_ms: int | None = None,
    ) -> list[tuple[TopicPartition, ProducerState]]:
        """The open transactions of ``topics`` (default: every topic) that nothing
        will ever end, KIP-664's way: a producer's transaction open on a partition
        for longer than ``max_transaction_timeout_ms`` (Kafka's
        ``transaction.max.timeout.ms``, by the producer's last write) that no
        coordinator holds, for that producer and with that partition, in a state
        it completes by itself (:data:`LIVE_TRANSACTION_STATES`). Each one keeps
        read_committed consumers of its partition at its first offset;
        :meth:`abort_transaction` ends it. ``timeout_ms`` bounds all the calls
        this makes together.
        """
        if topics is not None:
            topics = check_topics("topics", topics)
        check_int(
            "max_transaction_timeout_ms", max_transaction_timeout_ms, minimum=0, maximum=INT32_MAX
        )
        check_timestamp_ms("now_ms", now_ms)
        check_timeout("timeout_ms", timeout_ms)
        deadline = anyio.current_time() + self._timeout_ms(timeout_ms) / 1000

        def left() -> int:
            return max(0, int((deadline - anyio.current_time()) * 1000))

        names = (
            list(topics)
            if topics is not None
            else sorted(await self.list_topics(timeout_ms=left()))
        )
        if not names:
            return []
        infos = await self.describe_topics(names, timeout_ms=left())
        tps = [TopicPartition(n, p.partition) for n in names for p in infos[n].partitions]
        states = await self.describe_producers(tps, timeout_ms=left()) if tps else {}
        now = int(time.time() * 1000) if now_ms is None else now_ms
        suspected = suspects(states, now, max_transaction_timeout_ms)
        if not suspected:
            return []
        listed = await self.list_transactions(
            producer_ids={s.producer_id for _, s in suspected}, timeout_ms=left()
        )
        ids = {t.producer_id: t.transactional_id for t in listed}
        described = (
            await self.describe_transactions(sorted(set(ids.values())), timeout_ms=left())
            if ids
            else {}
        )
        return hanging(suspected, ids, described)

    async def abort_transaction(
        self,
        partition: TopicPartition | tuple[str, int],
        producer_id: int,
        producer_epoch: int,
        coordinator_epoch: int = 0,
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Abort a hanging transaction on one partition (KIP-664): its leader writes
        an ABORT marker for the producer, so read_committed consumers get past it.

        Only for a transaction no coordinator will complete (see
        :meth:`describe_producers` and :meth:`describe_transactions`): the broker
        cannot tell, and aborting a live transaction this way loses its records
        on this partition. ``producer_epoch`` and ``coordinator_epoch`` are the
        ones :meth:`describe_producers` shows (0 when it shows none).

        Raises:
            KafkaError: INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED
                (the partition has seen newer ones), UNKNOWN_TOPIC_OR_PARTITION, ...
        """
        partition = check_topic_partition("partition", partition)
        check_producer_id("producer_id", producer_id)
        # The protocol's ranges: which values are stale is the broker's to answer.
        check_int("producer_epoch", producer_epoch, minimum=-INT16_MAX - 1, maximum=INT16_MAX)
        check_int("coordinator_epoch", coordinator_epoch, minimum=-INT32_MAX - 1)
        tp = TopicPartition(*partition)
        body = abort_transaction_request(tp, producer_id, producer_epoch, coordinator_epoch)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            return read_abort_transaction(await conn.request(27, body), tp, producer_id)

        await self._calls.per_leader("abort_transaction", [tp], ask, timeout_ms)


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
        await serve_metrics_if_asked(tg, admin, "admin", cfg.metrics_listen)
        yield admin
