"""The admin client: topics, partitions, configs, groups, offsets, records, transactions,
users' SCRAM credentials, ACLs and client quotas.

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

import dataclasses
import enum
import secrets
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Hashable,
    Iterable,
    Mapping,
    Sequence,
)
from contextlib import asynccontextmanager
from typing import Any, NamedTuple, TypeVar

import anyio
import anyio.abc

from trafka.codec import ErrorCode, KafkaError, TrafkaError, UnsupportedVersionError, api
from trafka.codec.messages import k13_leave_group as lvg
from trafka.codec.messages import k15_describe_groups as dg
from trafka.codec.messages import k16_list_groups as lgr
from trafka.codec.messages import k18_api_versions as av
from trafka.codec.messages import k19_create_topics as ct
from trafka.codec.messages import k20_delete_topics as dt
from trafka.codec.messages import k21_delete_records as dr
from trafka.codec.messages import k22_init_producer_id as ipid
from trafka.codec.messages import k27_write_txn_markers as wtm
from trafka.codec.messages import k29_describe_acls as dacl
from trafka.codec.messages import k30_create_acls as cacl
from trafka.codec.messages import k31_delete_acls as delacl
from trafka.codec.messages import k32_describe_configs as dc
from trafka.codec.messages import k33_alter_configs as ac
from trafka.codec.messages import k34_alter_replica_log_dirs as arld
from trafka.codec.messages import k35_describe_log_dirs as dld
from trafka.codec.messages import k37_create_partitions as cpart
from trafka.codec.messages import k38_create_delegation_token as cdt
from trafka.codec.messages import k39_renew_delegation_token as rdt
from trafka.codec.messages import k40_expire_delegation_token as edt
from trafka.codec.messages import k41_describe_delegation_token as ddt
from trafka.codec.messages import k42_delete_groups as dgr
from trafka.codec.messages import k43_elect_leaders as el
from trafka.codec.messages import k44_incremental_alter_configs as iac
from trafka.codec.messages import k45_alter_partition_reassignments as apr
from trafka.codec.messages import k46_list_partition_reassignments as lpr
from trafka.codec.messages import k47_offset_delete as odel
from trafka.codec.messages import k48_describe_client_quotas as dcq
from trafka.codec.messages import k49_alter_client_quotas as acq
from trafka.codec.messages import k50_describe_user_scram_credentials as dusc
from trafka.codec.messages import k51_alter_user_scram_credentials as ausc
from trafka.codec.messages import k57_update_features as upf
from trafka.codec.messages import k60_describe_cluster as dcl
from trafka.codec.messages import k61_describe_producers as dp
from trafka.codec.messages import k65_describe_transactions as dtx
from trafka.codec.messages import k66_list_transactions as ltx
from trafka.codec.messages import k69_consumer_group_describe as cgd
from trafka.codec.messages import k74_list_client_metrics_resources as lcmr
from trafka.codec.messages import k77_share_group_describe as sgd
from trafka.codec.messages import k90_describe_share_group_offsets as dsgo
from trafka.codec.messages import k91_alter_share_group_offsets as asgo
from trafka.codec.messages import k92_delete_share_group_offsets as dlsgo
from trafka.codec.sasl import (
    MIN_ITERATIONS,
    SCRAM_MECHANISM_NAMES,
    SCRAM_MECHANISM_TYPES,
    salted_password,
)

from ._util import owned_task_group
from .acls import AclBinding, AclBindingFilter
from .assignors import decode_assignment
from .calls import TRANSIENT, Again, Calls, again_if_transient, check
from .config import AdminConfig, make_config
from .connection_state import SOFTWARE_NAME, SOFTWARE_VERSION
from .delegation_tokens import DelegationToken, TokenInformation
from .delegation_tokens import principal as token_principal
from .fetcher import EARLIEST, LATEST, TopicPartition, build_list_offsets, parse_list_offsets
from .group import (
    find_coordinator,
    offset_commit_request,
    offset_fetch_request,
    read_offset_commit,
    read_offset_fetch,
)
from .hosting import Hostable
from .metadata import BrokerInfo, PartitionInfo, TopicInfo
from .quotas import ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilterComponent
from .statistics import AdminStatistics
from .telemetry import (
    IntervalAverages,
    MetricSample,
    admin_samples,
    client_telemetry,
    instance_id,
)
from .transactions import TRANSACTION_KEY
from .transport import COORDINATOR_BASE, BrokerConnection, Cluster

__all__ = [
    "Admin",
    "ClusterDescription",
    "DEFAULT_LEAVE_GROUP_REASON",
    "FeatureMetadata",
    "FeatureUpdate",
    "GroupDescription",
    "GroupListing",
    "LIVE_TRANSACTION_STATES",
    "MemberDescription",
    "NewTopic",
    "PartitionReassignment",
    "ProducerState",
    "ReplicaLogDirInfo",
    "ScramCredentialInfo",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsetInfo",
    "TopicPartitionReplica",
    "TransactionDescription",
    "TransactionListing",
    "UpgradeType",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
    "open_admin",
]

TOPIC_RESOURCE = 2
BROKER_RESOURCE = 4
GROUP_RESOURCE = 32  # group configs (KIP-848 and KIP-932: share.auto.offset.reset ...)
CLIENT_METRICS_RESOURCE = 16  # KIP-714 subscriptions: metrics, interval.ms, match

#: The reason a member removed by :meth:`Admin.remove_members_from_consumer_group`
#: leaves with when none is given (Java's ``KafkaAdminClient.DEFAULT_LEAVE_GROUP_REASON``).
DEFAULT_LEAVE_GROUP_REASON = "member was removed by an admin"
#: LeaveGroup's top-level answers Java's RemoveMembersFromConsumerGroupHandler
#: waits out (a coordinator loading, moved or not there yet); others are final.
_LEAVE_GROUP_RETRIED = frozenset(
    {
        ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
        ErrorCode.COORDINATOR_NOT_AVAILABLE,
        ErrorCode.NOT_COORDINATOR,
    }
)


@dataclasses.dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create. ``-1`` partitions or replication factor: the broker's default."""

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterDescription:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerInfo, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureMetadata:
    """The feature levels (KIP-584) one broker reports in ApiVersions v3+.

    Attributes:
        finalized: feature name -> ``(min, max)`` level the cluster runs now
            (Kafka 3.3+ reports ``min`` as the ``max``'s floor, often equal to it).
        finalized_epoch: the epoch of those levels; None when the broker reports
            none (-1).
        supported: feature name -> ``(min, max)`` levels the broker can run.

    A broker older than ApiVersions v3 (Kafka 2.7) knows no features: all empty.
    """

    finalized: dict[str, tuple[int, int]]
    finalized_epoch: int | None
    supported: dict[str, tuple[int, int]]


class UpgradeType(enum.IntEnum):
    """How a feature level may move (KIP-778), as Java's ``FeatureUpdate.UpgradeType``.

    ``UPGRADE`` raises a level (or keeps it); the downgrades lower it, 0 removing
    the feature. ``SAFE_DOWNGRADE`` refuses a downgrade that would lose metadata;
    ``UNSAFE_DOWNGRADE`` allows it (for features with no metadata to lose, such
    as ``group.version``, the two are the same).
    """

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclasses.dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """A new finalized level for one feature, as Java's ``FeatureUpdate``.

    Attributes:
        max_version_level: the level to finalize; 0 removes the feature (which
            needs a downgrade type).
        upgrade_type: :class:`UpgradeType`.
    """

    max_version_level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE

    def __post_init__(self) -> None:
        if self.max_version_level < 0:
            raise ValueError(f"a feature level cannot be negative: {self.max_version_level}")
        if self.max_version_level == 0 and self.upgrade_type == UpgradeType.UPGRADE:
            raise ValueError("level 0 removes a feature: use a downgrade upgrade_type")


@dataclasses.dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory of a broker, as DescribeLogDirs reports it.

    Attributes:
        node_id: the broker.
        path: the directory on the broker.
        error: why the directory cannot be used (offline), or None.
        partitions: the bytes each partition takes there.
        total_bytes, usable_bytes: of the directory's file system; None when the
            broker does not say (before DescribeLogDirs v4).
    """

    node_id: int
    path: str
    error: KafkaError | None
    partitions: Mapping[TopicPartition, int]
    total_bytes: int | None = None
    usable_bytes: int | None = None


class TopicPartitionReplica(NamedTuple):
    """The replica of a partition on one broker (Java's ``TopicPartitionReplica``);
    a plain ``(topic, partition, broker_id)`` tuple is taken too."""

    topic: str
    partition: int
    broker_id: int


@dataclasses.dataclass(frozen=True, slots=True)
class ReplicaLogDirInfo:
    """Where a broker keeps a replica, as :meth:`Admin.describe_replica_log_dirs`
    reports it (Java's ``DescribeReplicaLogDirsResult.ReplicaLogDirInfo``, with the
    sizes besides).

    Attributes:
        current_log_dir: the directory the replica is in; None when the broker
            holds no replica of the partition (or only in an offline directory).
        current_offset_lag: how far its log end is behind the partition's
            high watermark (for the current replica); None with no current dir.
        future_log_dir: the directory it is being moved to (AlterReplicaLogDirs),
            None when no move is under way.
        future_offset_lag: how far the copy in ``future_log_dir`` is behind the
            current replica; None with no future dir.
        size, future_size: bytes on disk of the current replica and of the
            copy; None when there is no such replica.
    """

    current_log_dir: str | None = None
    current_offset_lag: int | None = None
    future_log_dir: str | None = None
    future_offset_lag: int | None = None
    size: int | None = None
    future_size: int | None = None


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """A partition whose replicas are being moved (ListPartitionReassignments, KIP-455).

    Attributes:
        replicas: its replicas now, the ones being added and removed included.
        adding_replicas: the brokers it is being copied to.
        removing_replicas: the brokers it will leave once they are in sync.
    """

    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupListing:
    """A group as ListGroups reports it; ``group_type`` is ``classic`` or ``consumer``
    (KIP-848), from brokers answering ListGroups v5 (``classic`` before)."""

    group_id: str
    protocol_type: str
    state: str
    group_type: str = "classic"


@dataclasses.dataclass(frozen=True, slots=True)
class MemberDescription:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    assignment: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class GroupDescription:
    """A group's state and members. For a consumer group of the new protocol
    (``group_type`` ``consumer``, KIP-848) ``protocol`` is its server assignor and
    the assignments are the members' current ones."""

    group_id: str
    state: str
    protocol_type: str
    protocol: str
    members: tuple[MemberDescription, ...]
    group_type: str = "classic"


@dataclasses.dataclass(frozen=True, slots=True)
class ShareMemberDescription:
    """A member of a share group as ShareGroupDescribe reports it.

    ``assignment`` holds the partitions the coordinator assigns it (other
    members may be assigned the same ones).
    """

    member_id: str
    client_id: str
    client_host: str
    rack_id: str | None
    member_epoch: int
    subscribed_topics: tuple[str, ...]
    assignment: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class ShareGroupDescription:
    """A share group (KIP-932): its state (``Empty``, ``Stable``, ``Dead``...),
    epochs, the coordinator's assignor and the members."""

    group_id: str
    state: str
    group_epoch: int
    assignment_epoch: int
    assignor: str
    members: tuple[ShareMemberDescription, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class SharePartitionOffsetInfo:
    """A share group's position in one partition (DescribeShareGroupOffsets, KIP-932).

    Attributes:
        start_offset: the share-partition start offset: every record below it is
            done (acknowledged or archived); records from it on may still be
            delivered.
        leader_epoch: the leader epoch the broker reports with it, None when it
            reports none (-1).
        lag: the records from the start offset up to the high watermark not yet
            acknowledged or archived (KIP-1226); None when the broker does not
            report it (DescribeShareGroupOffsets v0, before Kafka 4.2) or could
            not compute it (-1).
    """

    start_offset: int
    leader_epoch: int | None
    lag: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class ProducerState:
    """A producer that a partition's leader knows (DescribeProducers).

    ``last_sequence`` and ``last_timestamp`` (ms) are -1 when unknown;
    ``current_transaction_start_offset`` is None unless the producer has a
    transaction open on the partition, ``coordinator_epoch`` until a
    transaction marker of this producer was written there.
    """

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int | None
    current_transaction_start_offset: int | None


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionListing:
    """A transactional id that a coordinator knows (ListTransactions)."""

    transactional_id: str
    producer_id: int
    state: str


@dataclasses.dataclass(frozen=True, slots=True)
class TransactionDescription:
    """A transactional id's state at its coordinator (DescribeTransactions).

    ``state`` is Kafka's name: ``Empty``, ``Ongoing``, ``PrepareCommit``,
    ``PrepareAbort``, ``CompleteCommit``, ``CompleteAbort``, ``Dead`` or
    ``PrepareEpochFence``. ``transaction_start_time_ms`` is when the current
    (or, once complete, the last) transaction started; None if none did.
    """

    transactional_id: str
    coordinator_id: int
    state: str
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: frozenset[TopicPartition]


@dataclasses.dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """One SCRAM credential of a user: its mechanism (``SCRAM-SHA-256`` or
    ``SCRAM-SHA-512``) and iteration count (DescribeUserScramCredentials)."""

    mechanism: str
    iterations: int


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialsDescription:
    """A user's SCRAM credentials, by mechanism number (never their secrets)."""

    user: str
    credential_infos: tuple[ScramCredentialInfo, ...]


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Set ``user``'s password for one SCRAM mechanism (KIP-554).

    The client salts and hashes the password itself (a random salt unless
    ``salt`` is given, ``iterations`` rounds of PBKDF2); the broker receives
    only the salted password. Neither the password nor the salt is in ``repr``.
    """

    user: str
    password: str = dataclasses.field(repr=False)
    mechanism: str = "SCRAM-SHA-256"
    iterations: int = MIN_ITERATIONS
    salt: bytes | None = dataclasses.field(default=None, repr=False)


@dataclasses.dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    """Delete ``user``'s credential for one SCRAM mechanism (KIP-554)."""

    user: str
    mechanism: str = "SCRAM-SHA-256"


def _scram_type(mechanism: str) -> int:
    try:
        return SCRAM_MECHANISM_TYPES[mechanism.upper()]
    except KeyError:
        raise ValueError(
            f"unknown SCRAM mechanism {mechanism!r}; known: {', '.join(SCRAM_MECHANISM_TYPES)}"
        ) from None


#: The coordinator states in which a transaction still ends by itself.
LIVE_TRANSACTION_STATES = frozenset(
    {"Ongoing", "PrepareCommit", "PrepareAbort", "PrepareEpochFence"}
)


def _fit(api_key: int, version: int, cls: type, **fields: Any) -> Any:
    schema = api(api_key).module.REQUEST_SCHEMAS[version]
    absent = {name for name, _ in schema.absent}
    return cls(**{k: v for k, v in fields.items() if k not in absent})


_T = TypeVar("_T")
_K = TypeVar("_K", bound=Hashable)
#: A topic operation's answer for one name: (name, error code, error message).
_Result = tuple[str | None, int, str | None]

#: Creating, deleting and growing topics is not idempotent: as Kafka's
#: AdminClient, retry an item only when the broker surely did nothing with it.
_NOT_DONE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.THROTTLING_QUOTA_EXCEEDED})


def _settle(
    results: Iterable[_Result],
    pending: set[str],
    failed: dict[str, KafkaError],
    what: str,
) -> None:
    """Record per-name results of a topic operation: successes and final errors
    leave ``pending``; NOT_CONTROLLER or a quota keeps a name there and asks
    for another attempt. A name the broker did not answer for fails."""
    retry: KafkaError | None = None
    for name, code, message in results:
        if name is None or name not in pending:
            continue
        if code in _NOT_DONE:
            retry = retry or KafkaError(code, f"{what} {name!r}")
            continue
        pending.discard(name)
        if code:
            failed[name] = KafkaError(
                code, f"{what} {name!r}: {message}" if message else f"{what} {name!r}"
            )
    if retry is not None:
        raise Again(retry, refresh=True)
    for name in sorted(pending):
        failed[name] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what} {name!r}: no answer")
    pending.clear()


def _by_topic(
    partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
) -> dict[str, list[int]]:
    """Partition numbers grouped by topic, in the order given."""
    out: dict[str, list[int]] = {}
    for tp in partitions:
        topic, partition = TopicPartition(*tp)
        out.setdefault(topic, []).append(partition)
    return out


def _answered(keys: Iterable[_K], out: Mapping[_K, _T], what: str) -> dict[_K, _T]:
    """``out`` in the order of ``keys``; a key the broker left out fails the call."""
    for key in keys:
        if key not in out:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what} {key!r}: no answer")
    return {key: out[key] for key in keys}


def _partition_outcome(code: int, message: str | None, what: str) -> KafkaError | None:
    """None for a partition that succeeded, else its error (with the broker's message)."""
    if not code:
        return None
    return KafkaError(code, f"{what}: {message}" if message else what)


def _acl_filter(f: AclBindingFilter) -> dict[str, Any]:
    """A filter as the fields DescribeAcls and DeleteAcls share."""
    return {
        "resource_type_filter": f.resource_type,
        "resource_name_filter": f.name,
        "pattern_type_filter": f.pattern_type,
        "principal_filter": f.principal,
        "host_filter": f.host,
        "operation": f.operation,
        "permission_type": f.permission,
    }


def _first_failure(names: Iterable[str], failed: Mapping[str, KafkaError]) -> None:
    for name in names:
        if name in failed:
            raise failed[name]


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
        return self.config.default_api_timeout_ms if timeout_ms is None else timeout_ms

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
                resp = await conn.request(
                    60, _fit(60, conn.version_for(60), dcl.DescribeClusterRequest)
                )
                check(resp.error_code, "DescribeCluster", resp.error_message, again=TRANSIENT)
                brokers = tuple(
                    BrokerInfo(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers
                )
                return ClusterDescription(resp.cluster_id, resp.controller_id, brokers)
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
            resp = await conn.request(
                18,
                av.ApiVersionsRequest(
                    client_software_name=SOFTWARE_NAME, client_software_version=SOFTWARE_VERSION
                ),
            )
            check(resp.error_code, "ApiVersions", again=TRANSIENT)
            return FeatureMetadata(
                {
                    f.name: (f.min_version_level, f.max_version_level)
                    for f in resp.finalized_features or ()
                },
                None if resp.finalized_features_epoch < 0 else resp.finalized_features_epoch,
                {f.name: (f.min_version, f.max_version) for f in resp.supported_features or ()},
            )

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
        wanted = dict(updates)
        if not wanted:
            raise ValueError("no feature updates given")
        for name in wanted:
            if not name.strip():
                raise ValueError("a feature name must not be empty")
        wait_ms = self._timeout_ms(timeout_ms)
        req = upf.UpdateFeaturesRequest

        async def attempt(deadline: float) -> dict[str, KafkaError | None]:
            conn = await self._controller()
            version = conn.version_for(57)
            if validate_only and version < 1:
                raise UnsupportedVersionError(
                    "the broker's UpdateFeatures is v0, which has no validate_only"
                )
            keys = [
                req.FeatureUpdateKey(
                    feature=name,
                    max_version_level=u.max_version_level,
                    allow_downgrade=u.upgrade_type != UpgradeType.UPGRADE,
                )
                if version == 0
                else req.FeatureUpdateKey(
                    feature=name,
                    max_version_level=u.max_version_level,
                    upgrade_type=int(u.upgrade_type),
                )
                for name, u in wanted.items()
            ]
            body = _fit(
                57,
                version,
                req,
                timeout_ms=wait_ms,
                feature_updates=keys,
                validate_only=validate_only,
            )
            resp = await conn.request(57, body, version=version)
            again = TRANSIENT | {ErrorCode.NOT_CONTROLLER}
            check(resp.error_code, "UpdateFeatures", resp.error_message, again=again, refresh=True)
            if version >= 2:  # one answer for the request, which succeeded
                return dict.fromkeys(wanted)
            out = {
                r.feature: _partition_outcome(
                    r.error_code, r.error_message, f"updating feature {r.feature!r}"
                )
                for r in resp.results or ()
            }
            return _answered(list(wanted), out, "updating feature")

        return await self._calls.run("update_features", timeout_ms, attempt)

    async def list_topics(
        self, *, include_internal: bool = False, timeout_ms: int | None = None
    ) -> dict[str, int]:
        """Every topic and its partition count."""

        async def attempt(deadline: float) -> dict[str, int]:
            conn = await self._cluster.any_connection()
            v = conn.version_for(3)
            resp = await conn.request(
                3, self._cluster.metadata.build_request_for(v, None, auto_create=False)
            )
            return {
                t.name: len(t.partitions)
                for t in resp.topics
                if t.name is not None
                and not t.error_code
                and (include_internal or not t.is_internal)
            }

        return await self._calls.run("list_topics", timeout_ms, attempt)

    async def describe_topics(
        self, names: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TopicInfo]:
        """Partitions, leaders, replicas and in-sync replicas of topics (never creates them).

        Raises:
            KafkaError: a topic does not exist (UNKNOWN_TOPIC_OR_PARTITION) or has another error.
        """
        names = list(names)

        async def attempt(deadline: float) -> dict[str, TopicInfo]:
            conn = await self._cluster.any_connection()
            v = conn.version_for(3)
            resp = await conn.request(
                3, self._cluster.metadata.build_request_for(v, names, auto_create=False)
            )
            out: dict[str, TopicInfo] = {}
            for t in resp.topics:
                if t.name is None:
                    continue
                check(t.error_code, f"describing topic {t.name!r}", again=TRANSIENT)
                parts = sorted(
                    (
                        PartitionInfo(
                            t.name,
                            p.partition_index,
                            p.leader_id,
                            p.leader_epoch,
                            tuple(p.replica_nodes),
                            tuple(p.isr_nodes),
                            tuple(p.offline_replicas),
                            ErrorCode.of(p.error_code),
                        )
                        for p in t.partitions
                    ),
                    key=lambda p: p.partition,
                )
                out[t.name] = TopicInfo(t.name, t.topic_id, t.is_internal, tuple(parts))
            for name in names:
                if name not in out:
                    raise KafkaError(
                        ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"describing topic {name!r}"
                    )
            return out

        return await self._calls.run("describe_topics", timeout_ms, attempt)

    async def _change_topics(
        self,
        what: str,
        label: str,
        names: list[str],
        timeout_ms: int | None,
        send: Callable[[BrokerConnection, list[str], float], Awaitable[Iterable[_Result]]],
    ) -> None:
        """A topic operation on the controller, per name: ``send(conn, names, left)``
        sends the names still open, with ``left`` seconds of the call's bound, and
        returns ``(name, error code, message)`` per name; see :func:`_settle` for
        what is sent again. Raises the first failure in ``names`` order."""
        pending = set(names)
        failed: dict[str, KafkaError] = {}

        async def attempt(deadline: float) -> None:
            conn = await self._controller()
            left = max(0.0, deadline - anyio.current_time())
            results = await send(conn, [n for n in names if n in pending], left)
            _settle(results, pending, failed, label)

        try:
            await self._calls.run(what, timeout_ms, attempt)
        finally:
            self._cluster.metadata.request_update()
        _first_failure(names, failed)

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
        items = {
            t.name: t
            for t in (
                t if isinstance(t, NewTopic) else NewTopic(t, num_partitions, replication_factor)
                for t in topics
            )
        }

        async def send(conn: BrokerConnection, names: list[str], left: float) -> list[_Result]:
            C = ct.CreateTopicsRequest
            body = _fit(
                19,
                conn.version_for(19),
                C,
                topics=[
                    C.CreatableTopic(
                        name=n,
                        num_partitions=items[n].num_partitions,
                        replication_factor=items[n].replication_factor,
                        configs=[
                            C.CreatableTopicConfig(name=k, value=v)
                            for k, v in items[n].configs.items()
                        ],
                    )
                    for n in names
                ],
                timeout_ms=int(left * 1000),
                validate_only=validate_only,
            )
            resp = await conn.request(19, body, timeout=left + 5)
            return [(r.name, r.error_code, r.error_message) for r in resp.topics]

        await self._change_topics("create_topics", "creating topic", list(items), timeout_ms, send)

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics (retried as :meth:`create_topics` retries).

        Raises:
            KafkaError: e.g. UNKNOWN_TOPIC_OR_PARTITION.
        """

        async def send(conn: BrokerConnection, todo: list[str], left: float) -> list[_Result]:
            v = conn.version_for(20)
            if v >= 6:
                body = dt.DeleteTopicsRequest(
                    topics=[dt.DeleteTopicsRequest.DeleteTopicState(name=n) for n in todo],
                    timeout_ms=int(left * 1000),
                )
            else:
                body = _fit(
                    20, v, dt.DeleteTopicsRequest, topic_names=todo, timeout_ms=int(left * 1000)
                )
            resp = await conn.request(20, body, timeout=left + 5)
            return [(r.name, r.error_code, r.error_message) for r in resp.responses]

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
        totals = dict(new_totals)

        async def send(conn: BrokerConnection, names: list[str], left: float) -> list[_Result]:
            C = cpart.CreatePartitionsRequest
            body = C(
                topics=[
                    C.CreatePartitionsTopic(name=n, count=totals[n], assignments=None)
                    for n in names
                ],
                timeout_ms=int(left * 1000),
                validate_only=validate_only,
            )
            resp = await conn.request(37, body, timeout=left + 5)
            return [(r.name, r.error_code, r.error_message) for r in resp.results]

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
        types = {"preferred": 0, "unclean": 1}
        if election_type not in types:
            raise ValueError(f"election_type must be preferred or unclean, got {election_type!r}")
        by_topic = None if partitions is None else _by_topic(partitions)
        wait_ms = self._timeout_ms(timeout_ms)
        req = el.ElectLeadersRequest

        async def attempt(deadline: float) -> dict[TopicPartition, KafkaError | None]:
            conn = await self._controller()
            version = conn.version_for(43)
            if version == 0 and election_type != "preferred":
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    "this broker elects preferred leaders only (ElectLeaders v0)",
                )
            topics = (
                None
                if by_topic is None
                else [req.TopicPartitions(topic=t, partitions=ps) for t, ps in by_topic.items()]
            )
            body = _fit(
                43,
                version,
                req,
                election_type=types[election_type],
                topic_partitions=topics,
                timeout_ms=wait_ms,
            )
            resp = await conn.request(43, body)
            check(resp.error_code, "ElectLeaders", again=TRANSIENT)
            return {
                TopicPartition(r.topic, p.partition_id): _partition_outcome(
                    p.error_code,
                    p.error_message,
                    f"electing a leader of {r.topic}-{p.partition_id}",
                )
                for r in resp.replica_election_results
                for p in r.partition_result
            }

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
        wanted = {
            TopicPartition(*tp): (None if r is None else [int(b) for b in r])
            for tp, r in reassignments.items()
        }
        by_topic: dict[str, list[Any]] = {}
        req = apr.AlterPartitionReassignmentsRequest
        for tp, replicas in wanted.items():
            by_topic.setdefault(tp.topic, []).append(
                req.ReassignablePartition(partition_index=tp.partition, replicas=replicas)
            )
        wait_ms = self._timeout_ms(timeout_ms)

        async def attempt(deadline: float) -> dict[TopicPartition, KafkaError | None]:
            conn = await self._controller()
            body = req(
                timeout_ms=wait_ms,
                topics=[req.ReassignableTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
            )
            resp = await conn.request(45, body)
            check(
                resp.error_code, "AlterPartitionReassignments", resp.error_message, again=TRANSIENT
            )
            out = {
                TopicPartition(t.name, p.partition_index): _partition_outcome(
                    p.error_code, p.error_message, f"reassigning {t.name}-{p.partition_index}"
                )
                for t in resp.responses
                for p in t.partitions
            }
            return _answered(list(wanted), out, "reassigning partition")

        return await self._calls.run("alter_partition_reassignments", timeout_ms, attempt)

    async def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The partition moves under way (ListPartitionReassignments, KIP-455): all of
        them, or those of ``partitions``. Partitions not being moved are left out."""
        req = lpr.ListPartitionReassignmentsRequest
        topics = None
        if partitions is not None:
            topics = [
                req.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
                for t, ps in _by_topic(partitions).items()
            ]
        wait_ms = self._timeout_ms(timeout_ms)

        async def attempt(deadline: float) -> dict[TopicPartition, PartitionReassignment]:
            conn = await self._controller()
            resp = await conn.request(46, req(timeout_ms=wait_ms, topics=topics))
            check(
                resp.error_code, "ListPartitionReassignments", resp.error_message, again=TRANSIENT
            )
            return {
                TopicPartition(t.name, p.partition_index): PartitionReassignment(
                    tuple(p.replicas), tuple(p.adding_replicas), tuple(p.removing_replicas)
                )
                for t in resp.topics
                for p in t.partitions
            }

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
        f = acl_filter or AclBindingFilter()

        async def attempt(deadline: float) -> list[AclBinding]:
            conn = await self._cluster.any_connection()
            body = _fit(29, conn.version_for(29), dacl.DescribeAclsRequest, **_acl_filter(f))
            resp = await conn.request(29, body)
            check(resp.error_code, "describing ACLs", resp.error_message, again=TRANSIENT)
            return [
                AclBinding(
                    r.resource_type,
                    r.resource_name,
                    r.pattern_type,
                    a.principal,
                    a.host,
                    a.operation,
                    a.permission_type,
                )
                for r in resp.resources
                for a in r.acls
            ]

        return await self._calls.run("describe_acls", timeout_ms, attempt)

    async def create_acls(
        self, bindings: Iterable[AclBinding], *, timeout_ms: int | None = None
    ) -> dict[AclBinding, KafkaError | None]:
        """Create ACLs (CreateAcls); per binding None when created, else its error."""
        wanted = list(dict.fromkeys(bindings))
        req = cacl.CreateAclsRequest

        async def attempt(deadline: float) -> dict[AclBinding, KafkaError | None]:
            conn = await self._cluster.any_connection()
            body = req(
                creations=[
                    req.AclCreation(
                        resource_type=b.resource_type,
                        resource_name=b.name,
                        resource_pattern_type=b.pattern_type,
                        principal=b.principal,
                        host=b.host,
                        operation=b.operation,
                        permission_type=b.permission,
                    )
                    for b in wanted
                ]
            )
            resp = await conn.request(30, body)
            if len(resp.results) != len(wanted):
                raise KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"creating ACLs: {len(resp.results)} answers to {len(wanted)} creations",
                )
            return {
                b: _partition_outcome(r.error_code, r.error_message, f"creating ACL {b}")
                for b, r in zip(wanted, resp.results, strict=True)
            }

        return await self._calls.run("create_acls", timeout_ms, attempt)

    async def delete_acls(
        self, filters: Iterable[AclBindingFilter], *, timeout_ms: int | None = None
    ) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
        """Delete the ACLs each filter matches (DeleteAcls); per filter the ACLs
        deleted, or its error."""
        wanted = list(dict.fromkeys(filters))
        req = delacl.DeleteAclsRequest

        async def attempt(deadline: float) -> dict[AclBindingFilter, list[AclBinding] | KafkaError]:
            conn = await self._cluster.any_connection()
            body = req(filters=[req.DeleteAclsFilter(**_acl_filter(f)) for f in wanted])
            resp = await conn.request(31, body)
            if len(resp.filter_results) != len(wanted):
                raise KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"deleting ACLs: {len(resp.filter_results)} answers to {len(wanted)} filters",
                )
            out: dict[AclBindingFilter, list[AclBinding] | KafkaError] = {}
            for f, r in zip(wanted, resp.filter_results, strict=True):
                error = _partition_outcome(r.error_code, r.error_message, f"deleting ACLs {f}")
                out[f] = (
                    error
                    if error is not None
                    else [
                        AclBinding(
                            m.resource_type,
                            m.resource_name,
                            m.pattern_type,
                            m.principal,
                            m.host,
                            m.operation,
                            m.permission_type,
                        )
                        for m in r.matching_acls
                        if not m.error_code
                    ]
                )
            return out

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
        wanted = list(components)
        req = dcq.DescribeClientQuotasRequest

        async def attempt(deadline: float) -> dict[ClientQuotaEntity, dict[str, float]]:
            conn = await self._cluster.any_connection()
            body = req(
                components=[
                    req.ComponentData(
                        entity_type=c.entity_type, match_type=c.match_type, match=c.match
                    )
                    for c in wanted
                ],
                strict=strict,
            )
            resp = await conn.request(48, body)
            check(resp.error_code, "describing client quotas", resp.error_message, again=TRANSIENT)
            found = {
                ClientQuotaEntity((e.entity_type, e.entity_name) for e in entry.entity): {
                    v.key: v.value for v in entry.values
                }
                for entry in resp.entries or ()
            }
            return {
                e: dict(sorted(found[e].items()))
                for e in sorted(found, key=ClientQuotaEntity.sort_key)
            }

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
        wanted: dict[ClientQuotaEntity, ClientQuotaAlteration] = {}
        for alt in alterations:
            if alt.entity in wanted:
                raise ValueError(f"client quota entity {alt.entity} given twice")
            wanted[alt.entity] = alt
        if not wanted:
            return
        req = acq.AlterClientQuotasRequest
        pending = set(wanted)
        failed: dict[ClientQuotaEntity, KafkaError] = {}
        what = "altering the client quotas of"

        async def attempt(deadline: float) -> None:
            conn = await self._cluster.any_connection()
            body = req(
                entries=[
                    req.EntryData(
                        entity=[
                            req.EntityData(entity_type=t, entity_name=n) for t, n in entity.entries
                        ],
                        ops=[
                            req.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                            for k, v in alt.ops.items()
                        ],
                    )
                    for entity, alt in wanted.items()
                    if entity in pending
                ],
                validate_only=validate_only,
            )
            resp = await conn.request(49, body)
            retry: KafkaError | None = None
            for entry in resp.entries:
                entity = ClientQuotaEntity((e.entity_type, e.entity_name) for e in entry.entity)
                if entity not in pending:
                    continue
                error = _partition_outcome(
                    entry.error_code, entry.error_message, f"{what} {entity}"
                )
                if error is not None and error.code in TRANSIENT:
                    retry = retry or error
                    continue
                pending.discard(entity)
                if error is not None:
                    failed[entity] = error
            if retry is not None:
                raise Again(retry)
            for entity in pending:
                failed[entity] = KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR, f"{what} {entity}: no answer"
                )
            pending.clear()

        await self._calls.run("alter_client_quotas", timeout_ms, attempt)
        for entity in wanted:
            if entity in failed:
                raise failed[entity]

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
        entries = [
            dc.DescribeConfigsRequest.DescribeConfigsResource(
                resource_type=kind, resource_name=name, configuration_keys=None
            )
            for kind, name in resources
        ]

        async def attempt(deadline: float) -> dict[str, dict[str, str | None]]:
            conn = await self._controller()
            resp = await conn.request(
                32, _fit(32, conn.version_for(32), dc.DescribeConfigsRequest, resources=entries)
            )
            out: dict[str, dict[str, str | None]] = {}
            for r in resp.results:
                check(
                    r.error_code,
                    f"describing configs of {r.resource_name!r}",
                    r.error_message,
                    again=TRANSIENT,
                )
                out[r.resource_name] = {
                    c.name: c.value
                    for c in r.configs
                    if not overrides_only or _is_override(c, r.resource_type)
                }
            return out

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
            resp = await conn.request(74, lcmr.ListClientMetricsResourcesRequest())
            check(resp.error_code, "listing client-metrics resources", None, again=TRANSIENT)
            return sorted(r.name for r in resp.client_metrics_resources)

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
                body = iac.IncrementalAlterConfigsRequest(
                    resources=[
                        iac.IncrementalAlterConfigsRequest.AlterConfigsResource(
                            resource_type=resource_type,
                            resource_name=name,
                            configs=[
                                iac.IncrementalAlterConfigsRequest.AlterableConfig(
                                    name=k, config_operation=0 if v is not None else 1, value=v
                                )
                                for k, v in cfgs.items()
                            ],
                        )
                        for name, cfgs in changes.items()
                    ]
                )
                resp = await conn.request(44, body)
            else:
                legacy = ac.AlterConfigsRequest(
                    resources=[
                        ac.AlterConfigsRequest.AlterConfigsResource(
                            resource_type=resource_type,
                            resource_name=name,
                            configs=[
                                ac.AlterConfigsRequest.AlterableConfig(name=k, value=v)
                                for k, v in cfgs.items()
                                if v is not None
                            ],
                        )
                        for name, cfgs in changes.items()
                    ]
                )
                resp = await conn.request(33, legacy)
            for r in resp.responses:
                check(
                    r.error_code,
                    f"altering configs of {r.resource_name!r}",
                    r.error_message,
                    again=TRANSIENT,
                )

        await self._calls.run(what, timeout_ms, attempt)

    # -- offsets and records ----------------------------------------------------------------

    async def list_offsets(
        self, specs: Mapping[TopicPartition, str | int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """Offsets by ``"earliest"``, ``"latest"`` or a timestamp: ``(offset, timestamp)`` or None."""
        targets: dict[TopicPartition, int] = {}
        for tp, spec in specs.items():
            if spec == "earliest":
                targets[TopicPartition(*tp)] = EARLIEST
            elif spec == "latest":
                targets[TopicPartition(*tp)] = LATEST
            elif isinstance(spec, int) and spec >= 0:
                targets[TopicPartition(*tp)] = spec
            else:
                raise ValueError(
                    f"offset spec must be 'earliest', 'latest' or a timestamp >= 0, got {spec!r}"
                )

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            request = build_list_offsets({tp: targets[tp] for tp in tps}, conn.version_for(2))
            answers = parse_list_offsets(await conn.request(2, request))
            return {
                tp: res if isinstance(res, KafkaError) or res[0] >= 0 else None
                for tp, res in answers.items()
            }

        return await self._calls.per_leader("list_offsets", targets, ask, timeout_ms)

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete records before the given offsets (-1: the high watermark). Returns new low watermarks."""
        offsets = {TopicPartition(*tp): o for tp, o in before.items()}
        # What the leaders may take, of the call's own bound.
        wait_ms = self._timeout_ms(timeout_ms)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            by_topic: dict[str, list[Any]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(
                    dr.DeleteRecordsRequest.DeleteRecordsPartition(
                        partition_index=tp.partition, offset=offsets[tp]
                    )
                )
            body = dr.DeleteRecordsRequest(
                topics=[
                    dr.DeleteRecordsRequest.DeleteRecordsTopic(name=t, partitions=p)
                    for t, p in by_topic.items()
                ],
                timeout_ms=wait_ms,
            )
            resp = await conn.request(21, body)
            return {
                TopicPartition(t.name, p.partition_index): (
                    KafkaError(p.error_code, f"deleting records of {t.name}-{p.partition_index}")
                    if p.error_code
                    else p.low_watermark
                )
                for t in resp.topics
                for p in t.partitions
            }

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
        req = dld.DescribeLogDirsRequest
        topics = (
            None
            if by_topic is None
            else [
                req.DescribableLogDirTopic(topic=t, partitions=list(ps))
                for t, ps in by_topic.items()
            ]
        )
        resp = await conn.request(35, req(topics=topics))
        if conn.version_for(35) >= 3:
            check(resp.error_code, "DescribeLogDirs", again=TRANSIENT)
        return resp

    async def describe_log_dirs(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> list[LogDirDescription]:
        """Every broker's log directories and the size of each partition in them
        (only ``partitions`` when given; partitions a broker does not hold are left out)."""
        by_topic = None if partitions is None else _by_topic(partitions)

        async def ask(conn: BrokerConnection) -> list[LogDirDescription]:
            v = conn.version_for(35)
            resp = await self._log_dirs_response(conn, by_topic)
            return [
                LogDirDescription(
                    node_id=conn.node_id,
                    path=r.log_dir,
                    error=KafkaError(r.error_code, f"log directory {r.log_dir}")
                    if r.error_code
                    else None,
                    partitions={
                        TopicPartition(t.name, p.partition_index): p.partition_size
                        for t in r.topics
                        for p in t.partitions
                    },
                    total_bytes=r.total_bytes if v >= 4 and r.total_bytes >= 0 else None,
                    usable_bytes=r.usable_bytes if v >= 4 and r.usable_bytes >= 0 else None,
                )
                for r in resp.results
            ]

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
        wanted = {TopicPartitionReplica(*r): str(path) for r, path in assignments.items()}
        plan: dict[int, dict[str, dict[str, list[int]]]] = {}
        for r, path in wanted.items():
            topics = plan.setdefault(r.broker_id, {}).setdefault(path, {})
            topics.setdefault(r.topic, []).append(r.partition)
        out: dict[TopicPartitionReplica, KafkaError | None] = {}
        req = arld.AlterReplicaLogDirsRequest

        def what(r: TopicPartitionReplica) -> str:
            return f"moving {r.topic}-{r.partition} on broker {r.broker_id} to {wanted[r]!r}"

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
                            f"{what(r)}: the cluster has no broker {broker}",
                        )
                    continue
                body = req(
                    dirs=[
                        req.AlterReplicaLogDir(
                            path=path,
                            topics=[
                                req.AlterReplicaLogDirTopic(name=t, partitions=ps)
                                for t, ps in topics.items()
                            ],
                        )
                        for path, topics in dirs.items()
                    ]
                )
                resp = await conn.request(34, body)
                got: dict[TopicPartitionReplica, KafkaError | None] = {}
                for t in resp.results:
                    for p in t.partitions:
                        r = TopicPartitionReplica(t.topic_name, p.partition_index, broker)
                        if r in wanted:
                            got[r] = _partition_outcome(p.error_code, None, what(r))
                for r in mine:
                    out[r] = (
                        got[r]
                        if r in got
                        else KafkaError(
                            ErrorCode.UNKNOWN_SERVER_ERROR, f"{what(r)}: the broker did not answer"
                        )
                    )
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
        wanted = list(dict.fromkeys(TopicPartitionReplica(*r) for r in replicas))
        plan: dict[int, dict[str, list[int]]] = {}
        for r in wanted:
            plan.setdefault(r.broker_id, {}).setdefault(r.topic, []).append(r.partition)
        out: dict[TopicPartitionReplica, ReplicaLogDirInfo] = {}

        async def attempt(deadline: float) -> dict[TopicPartitionReplica, ReplicaLogDirInfo]:
            for broker, by_topic in plan.items():
                mine = [r for r in wanted if r.broker_id == broker]
                if all(r in out for r in mine):
                    continue
                conn = await self._replica_broker(broker)
                if conn is None:
                    raise KafkaError(
                        ErrorCode.BROKER_NOT_AVAILABLE,
                        f"describing replica log dirs: the cluster has no broker {broker}",
                    )
                resp = await self._log_dirs_response(conn, by_topic)
                found: dict[TopicPartition, dict[str, Any]] = {}
                for d in resp.results:
                    if d.error_code == ErrorCode.KAFKA_STORAGE_ERROR:
                        continue  # an offline directory lists no replicas
                    check(d.error_code, f"log directory {d.log_dir} of broker {broker}")
                    for t in d.topics:
                        for p in t.partitions:
                            fields = found.setdefault(TopicPartition(t.name, p.partition_index), {})
                            if p.is_future_key:
                                fields.update(
                                    future_log_dir=d.log_dir,
                                    future_offset_lag=p.offset_lag,
                                    future_size=p.partition_size,
                                )
                            else:
                                fields.update(
                                    current_log_dir=d.log_dir,
                                    current_offset_lag=p.offset_lag,
                                    size=p.partition_size,
                                )
                for r in mine:
                    out[r] = ReplicaLogDirInfo(
                        **found.get(TopicPartition(r.topic, r.partition), {})
                    )
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
        wanted = None if types is None else sorted({t.strip().lower() for t in types})

        async def ask(conn: BrokerConnection) -> list[GroupListing]:
            version = conn.version_for(16)
            body = _fit(16, version, lgr.ListGroupsRequest, types_filter=wanted or [])
            resp = await conn.request(16, body)
            check(resp.error_code, "ListGroups", again=TRANSIENT)
            found = [
                GroupListing(g.group_id, g.protocol_type, g.group_state, g.group_type or "classic")
                for g in resp.groups
            ]
            if wanted is not None:
                found = [g for g in found if g.group_type.lower() in wanted]
            return found

        return [
            g for listing in await self._per_node("list_groups", ask, timeout_ms) for g in listing
        ]

    async def describe_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, GroupDescription]:
        """State and members of groups."""
        ids = list(dict.fromkeys(group_ids))
        out: dict[str, GroupDescription] = {}

        async def attempt(deadline: float) -> dict[str, GroupDescription]:
            for gid in ids:
                if gid in out:
                    continue
                conn = await self._coordinator(gid)
                resp = await conn.request(
                    15, _fit(15, conn.version_for(15), dg.DescribeGroupsRequest, groups=[gid])
                )
                for g in resp.groups:
                    if g.group_id != gid:
                        continue
                    if g.error_code == ErrorCode.GROUP_ID_NOT_FOUND or g.group_state == "Dead":
                        # Not a classic group: perhaps a consumer group (KIP-848).
                        found = await self._describe_consumer_group(conn, gid)
                        if found is not None:
                            out[gid] = found
                            continue
                    check(g.error_code, f"describing group {gid!r}", again=TRANSIENT)
                    out[gid] = _group_description(g)
            return _answered(ids, out, "describing group")

        return await self._calls.run("describe_groups", timeout_ms, attempt)

    async def _describe_consumer_group(
        self, conn: BrokerConnection, group_id: str
    ) -> GroupDescription | None:
        """ConsumerGroupDescribe ``group_id``; None when the broker lacks the API or
        the group is not a consumer group."""
        if not conn.supports(69):
            return None
        resp = await conn.request(69, cgd.ConsumerGroupDescribeRequest(group_ids=[group_id]))
        for g in resp.groups:
            if g.group_id != group_id or g.error_code == ErrorCode.GROUP_ID_NOT_FOUND:
                continue
            check(g.error_code, f"describing group {group_id!r}", again=TRANSIENT)
            members = tuple(
                MemberDescription(
                    m.member_id,
                    m.instance_id,
                    m.client_id,
                    m.client_host,
                    frozenset(
                        TopicPartition(t.topic_name, p)
                        for t in m.assignment.topic_partitions
                        for p in t.partitions
                    ),
                )
                for m in g.members
            )
            return GroupDescription(
                group_id, g.group_state, "consumer", g.assignor_name, members, "consumer"
            )
        return None

    async def describe_share_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, ShareGroupDescription]:
        """State, epochs and members of share groups (ShareGroupDescribe, KIP-932).

        Raises:
            KafkaError: for the first group that failed, in the order given:
                GROUP_ID_NOT_FOUND for a group that does not exist or is not a
                share group; UNSUPPORTED_VERSION from a broker without share groups.
        """
        ids = list(dict.fromkeys(group_ids))
        out: dict[str, ShareGroupDescription] = {}

        async def attempt(deadline: float) -> dict[str, ShareGroupDescription]:
            for gid in ids:
                if gid in out:
                    continue
                conn = await self._coordinator(gid)
                if not conn.supports(77):
                    raise KafkaError(
                        ErrorCode.UNSUPPORTED_VERSION,
                        f"describing share group {gid!r}: the broker does not serve "
                        "ShareGroupDescribe v1 (share groups need Kafka 4.1 or later)",
                    )
                resp = await conn.request(77, sgd.ShareGroupDescribeRequest(group_ids=[gid]))
                for g in resp.groups:
                    if g.group_id != gid:
                        continue
                    check(
                        g.error_code,
                        f"describing share group {gid!r}",
                        g.error_message,
                        again=TRANSIENT,
                    )
                    out[gid] = _share_group_description(g)
            return _answered(ids, out, "describing share group")

        return await self._calls.run("describe_share_groups", timeout_ms, attempt)

    async def delete_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Delete empty groups (their committed offsets go too)."""
        pending = list(dict.fromkeys(group_ids))

        async def attempt(deadline: float) -> None:
            while pending:
                gid = pending[0]
                conn = await self._coordinator(gid)
                resp = await conn.request(42, dgr.DeleteGroupsRequest(groups_names=[gid]))
                for r in resp.results:
                    if r.group_id == gid:
                        check(r.error_code, f"deleting group {gid!r}", again=TRANSIENT)
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
        if isinstance(members, str):
            raise TypeError("members is an iterable of group instance ids, not one string")
        why = (reason or DEFAULT_LEAVE_GROUP_REASON)[:255]
        started = anyio.current_time()
        identities: list[tuple[str, str | None]]
        if members is not None:
            identities = [("", iid) for iid in dict.fromkeys(members)]
            if not identities:
                raise ValueError("members is empty: give group instance ids, or None for all")
        else:
            desc = (await self.describe_groups([group_id], timeout_ms=timeout_ms))[group_id]
            if desc.state == "Dead":
                raise KafkaError(
                    ErrorCode.GROUP_ID_NOT_FOUND,
                    f"removing the members of group {group_id!r}: there is no such group",
                )
            identities = [
                ("", m.group_instance_id)
                if m.group_instance_id is not None
                else (m.member_id, None)
                for m in desc.members
            ]
            if not identities:
                return {}
            used_ms = int((anyio.current_time() - started) * 1000)
            timeout_ms = max(0, self._timeout_ms(timeout_ms) - used_ms)
        req = lvg.LeaveGroupRequest

        async def attempt(deadline: float) -> dict[str, KafkaError | None]:
            conn = await self._coordinator(group_id)
            if conn.version_for(13) < 3:
                raise KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"removing members from group {group_id!r}: the broker does not serve "
                    "LeaveGroup v3 (Kafka 2.4 or later)",
                )
            body = req(
                group_id=group_id,
                members=[
                    req.MemberIdentity(member_id=mid, group_instance_id=iid, reason=why)
                    for mid, iid in identities
                ],
            )
            resp = await conn.request(13, body)
            check(
                resp.error_code,
                f"removing members from group {group_id!r}",
                again=_LEAVE_GROUP_RETRIED,
            )
            answers = {(m.member_id, m.group_instance_id): m.error_code for m in resp.members}
            out: dict[str, KafkaError | None] = {}
            for mid, iid in identities:
                key = iid if iid is not None else mid
                what = f"removing member {key!r} from group {group_id!r}"
                code = answers.get((mid, iid))
                out[key] = (
                    KafkaError(
                        ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: the coordinator did not answer"
                    )
                    if code is None
                    else _partition_outcome(code, None, what)
                )
            return out

        return await self._calls.run("remove_members_from_consumer_group", timeout_ms, attempt)

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (all its partitions when ``partitions`` is None)."""
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def attempt(deadline: float) -> dict[TopicPartition, int]:
            conn = await self._coordinator(group_id)
            v = conn.version_for(9)
            if wanted is None:
                if v < 2:
                    raise KafkaError(
                        ErrorCode.UNSUPPORTED_VERSION, "listing all offsets needs OffsetFetch v2+"
                    )
                body = _all_topics(offset_fetch_request(v, group_id, []), v)
            else:
                body = offset_fetch_request(v, group_id, wanted)
            resp = await conn.request(9, body)
            with again_if_transient():
                code, got = read_offset_fetch(v, resp)
            check(code, f"fetching offsets of group {group_id!r}", again=TRANSIENT)
            return {tp: off for tp, off in got.items() if off >= 0}

        return await self._calls.run("list_consumer_group_offsets", timeout_ms, attempt)

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit offsets for a group that has no active members."""
        wanted = {TopicPartition(*tp): o for tp, o in offsets.items()}

        async def attempt(deadline: float) -> None:
            conn = await self._coordinator(group_id)
            body = offset_commit_request(conn.version_for(8), group_id, wanted)
            resp = await conn.request(8, body)
            for tp, code in read_offset_commit(resp).items():
                check(
                    code,
                    f"committing {tp.topic}-{tp.partition} for group {group_id!r}",
                    again=TRANSIENT,
                )

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
        by_topic = _by_topic(partitions)
        req = odel.OffsetDeleteRequest

        async def attempt(deadline: float) -> None:
            conn = await self._coordinator(group_id)
            body = req(
                group_id=group_id,
                topics=[
                    req.OffsetDeleteRequestTopic(
                        name=t,
                        partitions=[
                            req.OffsetDeleteRequestPartition(partition_index=p) for p in ps
                        ],
                    )
                    for t, ps in by_topic.items()
                ],
            )
            resp = await conn.request(47, body)
            check(resp.error_code, f"deleting offsets of group {group_id!r}", again=TRANSIENT)
            for t in resp.topics:
                for p in t.partitions:
                    check(
                        p.error_code,
                        f"deleting the offset of {t.name}-{p.partition_index} "
                        f"for group {group_id!r}",
                        again=TRANSIENT,
                    )

        await self._calls.run("delete_consumer_group_offsets", timeout_ms, attempt)

    # -- share-group offsets (KIP-932) ---------------------------------------------------------

    async def _share_offsets_coordinator(self, group_id: str, api_key: int, what: str) -> Any:
        conn = await self._coordinator(group_id)
        if not conn.supports(api_key):
            raise KafkaError(
                ErrorCode.UNSUPPORTED_VERSION,
                f"{what}: the broker does not serve {api(api_key).name} "
                "(share-group offsets need Kafka 4.1 or later)",
            )
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
        wanted = (
            None
            if partitions is None
            else list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        )
        req = dsgo.DescribeShareGroupOffsetsRequest
        what = f"listing the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> dict[TopicPartition, SharePartitionOffsetInfo | None]:
            conn = await self._share_offsets_coordinator(group_id, 90, what)
            with_lag = conn.version_for(90) >= 1
            topics = (
                None
                if wanted is None
                else [
                    req.DescribeShareGroupOffsetsRequestTopic(topic_name=t, partitions=ps)
                    for t, ps in _by_topic(wanted).items()
                ]
            )
            body = req(
                groups=[req.DescribeShareGroupOffsetsRequestGroup(group_id=group_id, topics=topics)]
            )
            resp = await conn.request(90, body)
            out: dict[TopicPartition, SharePartitionOffsetInfo | None] = {}
            answered = False
            for g in resp.groups:
                if g.group_id != group_id:
                    continue
                answered = True
                check(g.error_code, what, g.error_message, again=TRANSIENT)
                for t in g.topics:
                    for p in t.partitions:
                        tp = TopicPartition(t.topic_name, p.partition_index)
                        check(
                            p.error_code,
                            f"{what}: {tp.topic}-{tp.partition}",
                            p.error_message,
                            again=TRANSIENT,
                        )
                        out[tp] = (
                            None
                            if p.start_offset < 0
                            else SharePartitionOffsetInfo(
                                p.start_offset,
                                p.leader_epoch if p.leader_epoch >= 0 else None,
                                p.lag if with_lag and p.lag >= 0 else None,
                            )
                        )
            if not answered:
                raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what}: no answer")
            if wanted is None:
                return dict(sorted(out.items()))
            return _answered(wanted, out, f"{what}: partition")

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
        wanted = {TopicPartition(*tp): o for tp, o in offsets.items()}
        if not wanted:
            return
        req = asgo.AlterShareGroupOffsetsRequest
        what = f"altering the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> None:
            conn = await self._share_offsets_coordinator(group_id, 91, what)
            body = req(
                group_id=group_id,
                topics=[
                    req.AlterShareGroupOffsetsRequestTopic(
                        topic_name=t,
                        partitions=[
                            req.AlterShareGroupOffsetsRequestPartition(
                                partition_index=p, start_offset=wanted[TopicPartition(t, p)]
                            )
                            for p in ps
                        ],
                    )
                    for t, ps in _by_topic(wanted).items()
                ],
            )
            resp = await conn.request(91, body)
            check(resp.error_code, what, resp.error_message, again=TRANSIENT)
            got = {
                TopicPartition(t.topic_name, p.partition_index): (p.error_code, p.error_message)
                for t in resp.responses
                for p in t.partitions
            }
            for tp in wanted:
                code, message = got.get(tp, (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer"))
                check(
                    code,
                    f"setting the start offset of {tp.topic}-{tp.partition} "
                    f"for share group {group_id!r}",
                    message,
                    again=TRANSIENT,
                )

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
        pending = list(dict.fromkeys(topics))
        if not pending:
            return
        req = dlsgo.DeleteShareGroupOffsetsRequest
        what = f"deleting the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> None:
            conn = await self._share_offsets_coordinator(group_id, 92, what)
            body = req(
                group_id=group_id,
                topics=[req.DeleteShareGroupOffsetsRequestTopic(topic_name=t) for t in pending],
            )
            resp = await conn.request(92, body)
            check(resp.error_code, what, resp.error_message, again=TRANSIENT)
            got = {t.topic_name: (t.error_code, t.error_message) for t in resp.responses}
            retry: Again | None = None
            for name in list(pending):
                code, message = got.get(name, (ErrorCode.UNKNOWN_SERVER_ERROR, "no answer"))
                try:
                    check(code, f"{what}: topic {name!r}", message, again=TRANSIENT)
                except Again as again:
                    # Deleted topics are not sent again: a second delete would
                    # find no state and fail.
                    retry = retry or again
                    continue
                pending.remove(name)
            if retry is not None:
                raise retry

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
        names = None if users is None else list(dict.fromkeys(users))
        if names == []:
            return {}  # (an empty list would ask the broker for every user)
        req = dusc.DescribeUserScramCredentialsRequest

        async def attempt(deadline: float) -> dict[str, UserScramCredentialsDescription]:
            conn = await self._cluster.any_connection()
            body = req(users=None if names is None else [req.UserName(name=n) for n in names])
            resp = await conn.request(50, body)
            check(
                resp.error_code,
                "describing SCRAM credentials",
                resp.error_message,
                again=TRANSIENT,
            )
            out: dict[str, UserScramCredentialsDescription] = {}
            failed: dict[str, KafkaError] = {}
            for r in resp.results:
                if r.error_code:
                    what = f"describing the SCRAM credentials of user {r.user!r}"
                    failed[r.user] = KafkaError(
                        r.error_code, f"{what}: {r.error_message}" if r.error_message else what
                    )
                    continue
                infos = tuple(
                    ScramCredentialInfo(
                        SCRAM_MECHANISM_NAMES.get(c.mechanism, f"UNKNOWN-{c.mechanism}"),
                        c.iterations,
                    )
                    for c in r.credential_infos
                )
                out[r.user] = UserScramCredentialsDescription(r.user, infos)
            if names is None:
                _first_failure(sorted(failed), failed)
                return dict(sorted(out.items()))
            _first_failure(names, failed)
            return _answered(names, out, "describing the SCRAM credentials of user")

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
        req = ausc.AlterUserScramCredentialsRequest
        deletions: list[Any] = []
        upsertions: list[Any] = []
        names: dict[str, None] = {}  # in the order given
        for alt in alterations:
            mechanism = _scram_type(alt.mechanism)
            names.setdefault(alt.user)
            if isinstance(alt, UserScramCredentialDeletion):
                deletions.append(req.ScramCredentialDeletion(name=alt.user, mechanism=mechanism))
                continue
            if alt.iterations < 1:
                raise ValueError(f"SCRAM iterations must be positive, not {alt.iterations}")
            salt = secrets.token_bytes(32) if alt.salt is None else alt.salt
            upsertions.append(
                req.ScramCredentialUpsertion(
                    name=alt.user,
                    mechanism=mechanism,
                    iterations=alt.iterations,
                    salt=salt,
                    salted_password=salted_password(
                        alt.mechanism.upper(), alt.password, salt, alt.iterations
                    ),
                )
            )
        pending = set(names)
        failed: dict[str, KafkaError] = {}

        async def attempt(deadline: float) -> None:
            conn = await self._controller()
            body = req(
                deletions=[d for d in deletions if d.name in pending],
                upsertions=[u for u in upsertions if u.name in pending],
            )
            resp = await conn.request(51, body)
            _settle(
                ((r.user, r.error_code, r.error_message) for r in resp.results),
                pending,
                failed,
                "altering the SCRAM credentials of user",
            )

        if names:
            await self._calls.run("alter_user_scram_credentials", timeout_ms, attempt)
        _first_failure(names, failed)

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
        req = cdt.CreateDelegationTokenRequest
        renewer_list = [
            req.CreatableRenewers(principal_type=kind, principal_name=name)
            for kind, name in map(token_principal, renewers)
        ]
        owner_pair = None if owner is None else token_principal(owner)

        async def attempt(deadline: float) -> DelegationToken:
            conn = await self._cluster.any_connection()
            version = conn.version_for(38)
            if owner_pair is not None and version < 3:
                raise UnsupportedVersionError(
                    f"creating a token for another owner needs CreateDelegationToken v3; "
                    f"the broker speaks up to v{version}"
                )
            body = _fit(
                38,
                version,
                req,
                owner_principal_type=None if owner_pair is None else owner_pair[0],
                owner_principal_name=None if owner_pair is None else owner_pair[1],
                renewers=renewer_list,
                max_lifetime_ms=max_lifetime_ms,
            )
            resp = await conn.request(38, body)
            check(resp.error_code, "creating a delegation token", again=TRANSIENT)
            owner_name = f"{resp.principal_type}:{resp.principal_name}"
            requester = (
                f"{resp.token_requester_principal_type}:{resp.token_requester_principal_name}"
                if resp.token_requester_principal_name
                else owner_name
            )
            info = TokenInformation(
                token_id=resp.token_id,
                owner=owner_name,
                token_requester=requester,
                renewers=tuple(f"{r.principal_type}:{r.principal_name}" for r in renewer_list),
                issue_timestamp_ms=resp.issue_timestamp_ms,
                expiry_timestamp_ms=resp.expiry_timestamp_ms,
                max_timestamp_ms=resp.max_timestamp_ms,
            )
            return DelegationToken(info, bytes(resp.hmac))

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
        body = rdt.RenewDelegationTokenRequest(hmac=bytes(hmac), renew_period_ms=renew_period_ms)

        async def attempt(deadline: float) -> int:
            conn = await self._cluster.any_connection()
            resp = await conn.request(39, body)
            check(resp.error_code, "renewing a delegation token", again=TRANSIENT)
            return int(resp.expiry_timestamp_ms)

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
        body = edt.ExpireDelegationTokenRequest(
            hmac=bytes(hmac), expiry_time_period_ms=expiry_period_ms
        )

        async def attempt(deadline: float) -> int:
            conn = await self._cluster.any_connection()
            resp = await conn.request(40, body)
            check(resp.error_code, "expiring a delegation token", again=TRANSIENT)
            return int(resp.expiry_timestamp_ms)

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
        req = ddt.DescribeDelegationTokenRequest
        owner_list = (
            None
            if owners is None
            else [
                req.DescribeDelegationTokenOwner(principal_type=kind, principal_name=name)
                for kind, name in map(token_principal, owners)
            ]
        )
        if owner_list == []:
            return []  # (as the broker answers an empty list)

        async def attempt(deadline: float) -> list[DelegationToken]:
            conn = await self._cluster.any_connection()
            resp = await conn.request(41, req(owners=owner_list))
            check(resp.error_code, "describing delegation tokens", again=TRANSIENT)
            out = []
            for t in resp.tokens:
                owner_name = f"{t.principal_type}:{t.principal_name}"
                info = TokenInformation(
                    token_id=t.token_id,
                    owner=owner_name,
                    token_requester=(
                        f"{t.token_requester_principal_type}:{t.token_requester_principal_name}"
                        if t.token_requester_principal_name
                        else owner_name
                    ),
                    renewers=tuple(f"{r.principal_type}:{r.principal_name}" for r in t.renewers),
                    issue_timestamp_ms=t.issue_timestamp,
                    expiry_timestamp_ms=t.expiry_timestamp,
                    max_timestamp_ms=t.max_timestamp,
                )
                out.append(DelegationToken(info, bytes(t.hmac)))
            return out

        return await self._calls.run("describe_delegation_tokens", timeout_ms, attempt)

    # -- transactions -----------------------------------------------------------------------

    async def describe_producers(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, list[ProducerState]]:
        """The producers each partition's leader keeps state for, with the first
        offset of the transaction each has open there (KIP-664)."""

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            by_topic = _by_topic(tps)
            request = dp.DescribeProducersRequest(
                topics=[
                    dp.DescribeProducersRequest.TopicRequest(name=t, partition_indexes=p)
                    for t, p in by_topic.items()
                ]
            )
            resp = await conn.request(61, request)
            out: dict[TopicPartition, Any] = {}
            for t in resp.topics:
                for p in t.partitions:
                    tp = TopicPartition(t.name, p.partition_index)
                    if p.error_code:
                        what = f"describing the producers of {t.name}-{p.partition_index}"
                        message = f"{what}: {p.error_message}" if p.error_message else what
                        out[tp] = KafkaError(p.error_code, message)
                        continue
                    out[tp] = [
                        ProducerState(
                            e.producer_id,
                            e.producer_epoch,
                            e.last_sequence,
                            e.last_timestamp,
                            None if e.coordinator_epoch < 0 else e.coordinator_epoch,
                            None if e.current_txn_start_offset < 0 else e.current_txn_start_offset,
                        )
                        for e in p.active_producers
                    ]
            return out

        wanted = [TopicPartition(*tp) for tp in partitions]
        return await self._calls.per_leader("describe_producers", wanted, ask, timeout_ms)

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
        state_filters, pid_filters = list(states), list(producer_ids)

        async def ask(conn: BrokerConnection) -> Any:
            version = conn.version_for(66)
            if min_duration_ms is not None and version < 1:
                raise UnsupportedVersionError(
                    f"node {conn.node_id} has no ListTransactions v1: it cannot filter by duration"
                )
            request = _fit(
                66,
                version,
                ltx.ListTransactionsRequest,
                state_filters=state_filters,
                producer_id_filters=pid_filters,
                duration_filter=-1 if min_duration_ms is None else min_duration_ms,
            )
            resp = await conn.request(66, request, version=version)
            check(resp.error_code, "ListTransactions", again=TRANSIENT)
            return resp

        found: dict[str, TransactionListing] = {}
        unknown: set[str] = set()
        for resp in await self._per_node("list_transactions", ask, timeout_ms):
            unknown.update(resp.unknown_state_filters)
            for t in resp.transaction_states:
                found[t.transactional_id] = TransactionListing(
                    t.transactional_id, t.producer_id, t.transaction_state
                )
        if unknown:
            raise ValueError(f"unknown transaction state(s): {', '.join(sorted(unknown))}")
        return [found[tid] for tid in sorted(found)]

    async def describe_transactions(
        self, transactional_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TransactionDescription]:
        """The state of transactional ids at their coordinators.

        Raises:
            KafkaError: TRANSACTIONAL_ID_NOT_FOUND for an id no coordinator knows.
        """
        ids = list(dict.fromkeys(transactional_ids))
        out: dict[str, TransactionDescription] = {}

        async def attempt(deadline: float) -> dict[str, TransactionDescription]:
            for tid in ids:
                if tid in out:
                    continue
                conn = await self._coordinator(tid, TRANSACTION_KEY)
                resp = await conn.request(
                    65, dtx.DescribeTransactionsRequest(transactional_ids=[tid])
                )
                for t in resp.transaction_states:
                    if t.transactional_id != tid:
                        continue
                    check(t.error_code, f"describing transactional id {tid!r}", again=TRANSIENT)
                    out[tid] = TransactionDescription(
                        tid,
                        COORDINATOR_BASE - conn.node_id,  # the coordinator's own connection
                        t.transaction_state,
                        t.producer_id,
                        t.producer_epoch,
                        t.transaction_timeout_ms,
                        None if t.transaction_start_time_ms < 0 else t.transaction_start_time_ms,
                        frozenset(
                            TopicPartition(topic.topic, p)
                            for topic in t.topics
                            for p in topic.partitions
                        ),
                    )
            return _answered(ids, out, "describing transactional id")

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
        txn_timeout = self.config.request_timeout_ms
        pending = list(dict.fromkeys(transactional_ids))

        async def attempt(deadline: float) -> None:
            while pending:
                tid = pending[0]
                conn = await self._coordinator(tid, TRANSACTION_KEY)
                version = conn.version_for(22)
                request = _fit(
                    22,
                    version,
                    ipid.InitProducerIdRequest,
                    transactional_id=tid,
                    transaction_timeout_ms=txn_timeout,
                    producer_id=-1,
                    producer_epoch=-1,
                )
                resp = await conn.request(22, request, version=version)
                if resp.error_code != ErrorCode.CONCURRENT_TRANSACTIONS:
                    check(resp.error_code, f"fencing transactional id {tid!r}", again=TRANSIENT)
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
        suspects = [
            (tp, s)
            for tp in sorted(states)
            for s in states[tp]
            if s.current_transaction_start_offset is not None
            and now - s.last_timestamp >= max_transaction_timeout_ms
        ]
        if not suspects:
            return []
        listed = await self.list_transactions(
            producer_ids={s.producer_id for _, s in suspects}, timeout_ms=left()
        )
        ids = {t.producer_id: t.transactional_id for t in listed}
        described = (
            await self.describe_transactions(sorted(set(ids.values())), timeout_ms=left())
            if ids
            else {}
        )
        hanging = []
        for tp, s in suspects:
            desc = described.get(ids.get(s.producer_id, ""))
            if (
                desc is not None
                and desc.producer_id == s.producer_id
                and desc.state in LIVE_TRANSACTION_STATES
                and tp in desc.topic_partitions
            ):
                continue  # its coordinator will end it (or time it out)
            hanging.append((tp, s))
        return hanging

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
        tp = TopicPartition(*partition)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            marker = wtm.WriteTxnMarkersRequest.WritableTxnMarker(
                producer_id=producer_id,
                producer_epoch=producer_epoch,
                transaction_result=False,
                topics=[
                    wtm.WriteTxnMarkersRequest.WritableTxnMarkerTopic(
                        name=tp.topic, partition_indexes=[tp.partition]
                    )
                ],
                coordinator_epoch=coordinator_epoch,
            )
            resp = await conn.request(27, wtm.WriteTxnMarkersRequest(markers=[marker]))
            what = (
                f"aborting the transaction of producer {producer_id} on {tp.topic}-{tp.partition}"
            )
            return {
                TopicPartition(t.name, p.partition_index): (
                    KafkaError(p.error_code, what) if p.error_code else None
                )
                for m in resp.markers
                for t in m.topics
                for p in t.partitions
            }

        await self._calls.per_leader("abort_transaction", [tp], ask, timeout_ms)


def _group_description(g: Any) -> GroupDescription:
    members = []
    for m in g.members:
        try:
            assigned = (
                frozenset(decode_assignment(m.member_assignment))
                if g.protocol_type == "consumer"
                else frozenset()
            )
        except TrafkaError:
            assigned = frozenset()
        members.append(
            MemberDescription(
                m.member_id, m.group_instance_id, m.client_id, m.client_host, assigned
            )
        )
    return GroupDescription(
        g.group_id, g.group_state, g.protocol_type, g.protocol_data, tuple(members)
    )


def _share_group_description(g: Any) -> ShareGroupDescription:
    members = tuple(
        ShareMemberDescription(
            m.member_id,
            m.client_id,
            m.client_host,
            m.rack_id,
            m.member_epoch,
            tuple(m.subscribed_topic_names),
            frozenset(
                TopicPartition(t.topic_name, p)
                for t in m.assignment.topic_partitions
                for p in t.partitions
            ),
        )
        for m in g.members
    )
    return ShareGroupDescription(
        g.group_id, g.group_state, g.group_epoch, g.assignment_epoch, g.assignor_name, members
    )


# DescribeConfigs config_source values that mean "set on this very resource".
_DYNAMIC_TOPIC_CONFIG = 1
_DYNAMIC_BROKER_CONFIG = 2
_GROUP_CONFIG = 8
_OVERRIDE_SOURCE = {
    TOPIC_RESOURCE: _DYNAMIC_TOPIC_CONFIG,
    BROKER_RESOURCE: _DYNAMIC_BROKER_CONFIG,
    GROUP_RESOURCE: _GROUP_CONFIG,
    CLIENT_METRICS_RESOURCE: 7,  # CLIENT_METRICS_CONFIG
}


def _is_override(entry: Any, resource_type: int) -> bool:
    if entry.config_source < 0:  # v0 has no source, only is_default
        return not entry.is_default
    return bool(entry.config_source == _OVERRIDE_SOURCE.get(resource_type))


def _all_topics(body: Any, version: int) -> Any:
    """An OffsetFetch request for every partition of the group (topics = null)."""
    if version >= 8:
        group = dataclasses.replace(body.groups[0], topics=None)
        return dataclasses.replace(body, groups=[group])
    return dataclasses.replace(body, topics=None)


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
    async with owned_task_group() as tg:
        admin = Admin(cfg, tg)
        admin._cluster.start()
        if cfg.metrics_listen is not None:
            from .prometheus import serve_client_metrics

            await tg.start(serve_client_metrics, admin, "admin", cfg.metrics_listen)
        if admin._telemetry is not None:
            tg.start_soon(admin._telemetry.run, name="trafka admin telemetry")
        try:
            yield admin
        except Exception:
            await admin._close_telemetry()
            raise
        else:
            await admin._close_telemetry()
        finally:
            tg.cancel_scope.cancel()
            with anyio.CancelScope(shield=True):
                await admin._cluster.aclose()
