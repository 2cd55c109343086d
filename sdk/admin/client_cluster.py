"""The admin client's cluster calls: the cluster's description, feature levels
(KIP-584) and the brokers' log directories (DescribeLogDirs, AlterReplicaLogDirs).

A part of :class:`~trafka.sdk.admin.Admin` (see :mod:`.client_core`): what
goes on the wire and what an answer means is in :mod:`.cluster` and
:mod:`.log_dirs`; here, where each request goes and what is retried.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from trafka.codec import ApiKey, ErrorCode, KafkaError

from .._validate import check_bool, check_names, check_topic_partitions
from ..consumer_types import TopicPartition
from ..transport import BrokerConnection
from ._common import by_topic, check_log_dir_assignments, check_replica
from .client_core import AdminCore
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

__all__ = ["ClusterCalls"]


class ClusterCalls(AdminCore):
    """The calls on the cluster as a whole, its features and its log directories."""

    async def describe_cluster(self, *, timeout_ms: int | None = None) -> ClusterDescription:
        """The cluster id, controller and brokers."""

        async def attempt(deadline: float) -> ClusterDescription:
            conn = await self._cluster.any_connection()
            if conn.supports(ApiKey.DESCRIBE_CLUSTER):
                resp = await conn.request(
                    ApiKey.DESCRIBE_CLUSTER,
                    describe_cluster_request(conn.version_for(ApiKey.DESCRIBE_CLUSTER)),
                )
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
            if conn.version_for(ApiKey.API_VERSIONS) < 3:
                return FeatureMetadata({}, None, {})
            return read_features(await conn.request(ApiKey.API_VERSIONS, api_versions_request()))

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
            version = conn.version_for(ApiKey.UPDATE_FEATURES)
            body = update_features_request(
                version, wanted, timeout_ms=wait_ms, validate_only=validate_only
            )
            resp = await conn.request(ApiKey.UPDATE_FEATURES, body, version=version)
            return read_update_features(version, resp, list(wanted))

        return await self._calls.run("update_features", timeout_ms, attempt)

    async def _log_dirs_response(
        self, conn: BrokerConnection, by_topic: Mapping[str, Sequence[int]] | None
    ) -> Any:
        """DescribeLogDirs of ``conn``'s broker: of the partitions in ``by_topic``
        (None: all of them)."""
        resp = await conn.request(ApiKey.DESCRIBE_LOG_DIRS, describe_log_dirs_request(by_topic))
        check_log_dirs(conn.version_for(ApiKey.DESCRIBE_LOG_DIRS), resp)
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
            return read_log_dirs(conn.node_id, conn.version_for(ApiKey.DESCRIBE_LOG_DIRS), resp)

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
                resp = await conn.request(
                    ApiKey.ALTER_REPLICA_LOG_DIRS, alter_replica_log_dirs_request(dirs)
                )
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
