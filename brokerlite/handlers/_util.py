"""Small helpers shared by handlers."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from trafka.brokerlite.cluster.replica_manager import check_epoch
from trafka.brokerlite.cluster.replication_quotas import DYNAMIC_BROKER_CONFIGS, check_broker_config
from trafka.brokerlite.cluster.zk_layout import DEFAULT_BROKER
from trafka.brokerlite.errors import BrokerError, UnknownTopicOrPartitionError
from trafka.brokerlite.security.authorizer import CLUSTER_NAME, RESOURCE_OPERATIONS
from trafka.codec.acl import AclResourceType
from trafka.codec.errors import ErrorCode

from ._configs import BrokerConfigRefused, ResourceType, is_broker_name

if TYPE_CHECKING:
    from trafka.brokerlite.cluster.view import ClusterView, ZkTask
    from trafka.brokerlite.storage.partition import PartitionLog

    from ..outcomes import Parked
    from ._base import Partitions, RequestContext

_T = TypeVar("_T")

NULL_UUID = uuid.UUID(int=0)
NO_AUTHORIZED_OPERATIONS = -(2**31)

# What a broker without an authorizer allows on each resource (KIP-430 bit fields).
TOPIC_AUTHORIZED_OPERATIONS = sum(1 << op for op in RESOURCE_OPERATIONS[AclResourceType.TOPIC])
CLUSTER_AUTHORIZED_OPERATIONS = sum(1 << op for op in RESOURCE_OPERATIONS[AclResourceType.CLUSTER])
GROUP_AUTHORIZED_OPERATIONS = sum(1 << op for op in RESOURCE_OPERATIONS[AclResourceType.GROUP])

# The only leader epoch there is: one node, no elections.
LEADER_EPOCH = 0


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterPartition:
    """One partition as the cluster's metadata has it, for the answers that
    describe partitions (Metadata, DescribeTopicPartitions)."""

    #: NONE, or LEADER_NOT_AVAILABLE for a partition without a leader
    error_code: ErrorCode
    leader_id: int
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    #: replicas on brokers that are not registered (not alive)
    offline_replicas: list[int]


def cluster_partition(cluster: ClusterView, topic: str, partition: int) -> ClusterPartition:
    """``topic``/``partition`` as ZooKeeper last had it: its leader (-1 for none),
    leader epoch (-1 before its state is known), replicas, ISR and offline replicas."""
    image = cluster.image
    assignment = image.topics.get(topic)
    replicas = list(assignment.replicas.get(partition, ())) if assignment is not None else []
    state = image.states.get((topic, partition))
    leader = cluster.leader(topic, partition)
    return ClusterPartition(
        error_code=ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
        leader_id=leader,
        leader_epoch=state.leader_epoch if state is not None else -1,
        replicas=replicas,
        isr=list(state.isr) if state is not None else [],
        offline_replicas=[r for r in replicas if r not in image.brokers],
    )


def partition_log(where: Partitions, topic: str, partition: int) -> PartitionLog:
    """The log of ``topic``/``partition``.

    Raises:
        UnknownTopicOrPartitionError: no such topic or partition.
    """
    check_partition(where, topic, partition)
    return where.logs.partition(topic, partition)


def check_partition(where: Partitions, topic: str, partition: int) -> None:
    """That ``topic``/``partition`` exists (in a cluster its log may be elsewhere).

    Raises:
        UnknownTopicOrPartitionError: no such topic or partition.
    """
    info = where.logs.topic(topic)
    if info is None or not 0 <= partition < info.num_partitions:
        raise UnknownTopicOrPartitionError(f"unknown topic-partition {topic}-{partition}")


def kept_elsewhere(where: Partitions, topic: str, partition: int) -> bool:
    """Single node: whether ``topic``/``partition`` exists without a log here: a
    partition of an internal topic, whose data the coordinators keep in their
    journals (:mod:`trafka.brokerlite.storage.internal_topics`). Reads answer it
    as an empty partition led here at epoch 0."""
    if where.cluster is not None:
        return False
    info = where.logs.topic(topic)
    return (
        info is not None
        and 0 <= partition < info.num_partitions
        and not where.logs.hosts(topic, partition)
    )


def leader_log(
    where: Partitions, topic: str, partition: int, current_leader_epoch: int = -1
) -> PartitionLog:
    """The log of a partition this broker leads, the request's leader epoch checked.

    On the single-node broker every partition is led here at epoch 0.

    Raises:
        UnknownTopicOrPartitionError: no such topic or partition.
        NotLeaderOrFollowerError: another broker leads it (cluster mode).
        FencedLeaderEpochError, UnknownLeaderEpochError: the request's epoch
            (unless -1) is older or newer than the leader's.
    """
    cluster = where.cluster
    if cluster is None:
        plog = partition_log(where, topic, partition)
        check_epoch(current_leader_epoch, LEADER_EPOCH)
        return plog
    check_partition(where, topic, partition)  # (its log may be on other brokers only)
    return cluster.replicas.leader_log(topic, partition, current_leader_epoch)


def log_dir_path(where: Partitions) -> str:
    """brokerlite's one log directory (its ``data_dir``) as Kafka names log
    directories: an absolute path (here with symbolic links resolved)."""
    return str(where.logs.data_dir.resolve())


def code_of(exc: BaseException) -> ErrorCode:
    """The Kafka error code for a broker error (UNKNOWN_SERVER_ERROR otherwise)."""
    if isinstance(exc, BrokerError):
        return exc.code
    return ErrorCode.UNKNOWN_SERVER_ERROR


def message_of(exc: BaseException) -> str:
    return str(exc) or type(exc).__name__


def denied(
    ctx: RequestContext, operation: int, resource_type: int, names: Iterable[str]
) -> set[str]:
    """The names among ``names`` on which the request's principal may not do
    ``operation`` (Kafka's ``filterByAuthorized``, inverted): each name is asked
    once however often it is repeated. Always empty without an authorizer."""
    if ctx.authorizer is None:
        return set()
    return {n for n in set(names) if not ctx.allowed(operation, resource_type, n)}


def config_authorization_error(
    ctx: RequestContext, operation: int, resource_type: int, name: str
) -> ErrorCode:
    """Whether the principal may do ``operation`` (DESCRIBE_CONFIGS or
    ALTER_CONFIGS) on a config resource, as Kafka decides it: topic configs on
    the topic, group configs on the group, broker, broker-logger and
    client-metrics configs on the cluster. NONE when allowed or for a type
    authorization does not cover (the handler refuses those itself); else the
    error for the resource's kind."""
    if resource_type == ResourceType.TOPIC:
        if ctx.allowed(operation, AclResourceType.TOPIC, name):
            return ErrorCode.NONE
        return ErrorCode.TOPIC_AUTHORIZATION_FAILED
    if resource_type == ResourceType.GROUP:
        if ctx.allowed(operation, AclResourceType.GROUP, name):
            return ErrorCode.NONE
        return ErrorCode.GROUP_AUTHORIZATION_FAILED
    if resource_type in (
        ResourceType.BROKER,
        ResourceType.BROKER_LOGGER,
        ResourceType.CLIENT_METRICS,
    ):
        if ctx.allowed(operation, AclResourceType.CLUSTER, CLUSTER_NAME):
            return ErrorCode.NONE
        return ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    return ErrorCode.NONE


class _TasksWaiter:
    """A request parked on cluster tasks (:class:`~trafka.brokerlite.cluster.view.ZkTask`):
    answered by ``build`` once the driver has carried them all out, or at the
    deadline (each task still pending then is one that ZooKeeper did not answer)."""

    watches: frozenset[tuple[str, int]] = frozenset()

    def __init__(self, build: Callable[[], Any], deadline_ms: int) -> None:
        self._build = build
        self.deadline_ms = deadline_ms

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return False

    def complete(self, now_ms: int) -> Any:
        return self._build()


def park_on_tasks(
    ctx: RequestContext, tasks: list[ZkTask], timeout_ms: int, build: Callable[[], Any]
) -> Parked:
    """Park the request until the cluster driver has carried out ``tasks``; its answer
    is then ``build()`` (which reads each task's ``error`` and ``done``)."""
    cluster = ctx.cluster
    assert cluster is not None
    # The driver answers by the timeout; the waiter's own deadline is a backstop.
    parked = ctx.park(_TasksWaiter(build, ctx.mono_ms + max(timeout_ms, 0) + 5_000))
    cluster.submit_all(tasks, parked.ticket)
    return parked


def after_token_change(
    ctx: RequestContext, answer: _T, failed: Callable[[ErrorCode], _T]
) -> _T | Parked:
    """Cluster mode: write the delegation-token changes the request made
    (:meth:`~trafka.brokerlite.security.delegation_tokens.DelegationTokens.take_writes`)
    to ZooKeeper, and answer ``answer`` once written, ``failed(code)`` if they
    could not be (the driver then reads ZooKeeper's tokens back). Outside
    cluster mode, or without changes, ``answer`` at once."""
    writes = ctx.tokens.take_writes()
    if ctx.cluster is None or not writes:
        return answer
    from trafka.brokerlite.cluster.view import ZkTask

    task = ZkTask("tokens", {"writes": writes})

    def build() -> _T:
        code, _ = task_outcome(task)
        return failed(code) if code else answer

    return park_on_tasks(ctx, [task], 30_000, build)


def task_outcome(task: ZkTask) -> tuple[ErrorCode, str | None]:
    """A carried-out task's error code and message (REQUEST_TIMED_OUT if never done)."""
    if task.error is not None:
        return code_of(task.error), message_of(task.error)
    if not task.done:
        return ErrorCode.REQUEST_TIMED_OUT, "ZooKeeper did not answer in time"
    return ErrorCode.NONE, None


def topic_config_task(
    ctx: RequestContext,
    name: str,
    changes: Mapping[str, str | None],
    *,
    incremental: bool,
    validate_only: bool,
) -> ZkTask | None:
    """Cluster mode: check a topic config change here, and return the task that writes
    the topic's new overrides to ZooKeeper (``/config/topics/T``), whence every
    broker applies them; None for ``validate_only``.

    Raises:
        UnknownTopicOrPartitionError, InvalidConfigError: as ``LogManager.alter_configs``.
    """
    from trafka.brokerlite.cluster.view import ZkTask

    info = ctx.logs.alter_configs(name, changes, incremental=incremental, validate_only=True)
    if validate_only:
        return None
    return ZkTask("set_topic_config", {"name": name, "configs": dict(info.configs)})


ALTER_LOG_DIRS_RATE = "replica.alter.log.dirs.io.max.bytes.per.second"


def broker_config_task(
    ctx: RequestContext,
    name: str,
    changes: Mapping[str, str | None],
    *,
    replace: bool,
    validate_only: bool,
) -> ZkTask | None:
    """Cluster mode: check a change of broker ``name``'s dynamic configs (``""``:
    the cluster's default broker) and return the task that writes it to
    ZooKeeper (``/config/brokers/<id>`` or ``<default>``); None for
    ``validate_only``. ``replace``: the configs given become the entity's whole
    set (AlterConfigs); otherwise each is set, or deleted where None.

    Raises:
        BrokerConfigRefused: not in cluster mode (where only deleting the
            dynamic configs is taken, as a no-op), another broker's id (Kafka's
            ZooKeeper-mode brokers change only their own), or a config that is
            not dynamic here.
        InvalidConfigError: a value that is not a rate.
    """
    from trafka.brokerlite.cluster.view import ZkTask

    # Kafka's tools delete the log-dir move throttle with the replication ones
    # (kafka-reassign-partitions --verify); brokerlite cannot set it (moves
    # between log dirs are not throttled), so it is never set, and deleting it
    # is done, as deleting an unset config is in Kafka.
    unset = [k for k, v in changes.items() if k == ALTER_LOG_DIRS_RATE and v is None]
    if unset and not replace:
        changes = {k: v for k, v in changes.items() if k not in unset}
        if not changes:
            return None
    if ctx.cluster is None:
        if (
            is_broker_name(ctx.node_id, name)
            and changes
            and all(k in DYNAMIC_BROKER_CONFIGS and v is None for k, v in changes.items())
        ):
            # Deleting what cannot be set is done (as deleting an unset config is
            # in Kafka): kafka-reassign-partitions --verify clears the throttles
            # of every broker it knows, set or not.
            return None
        raise BrokerConfigRefused(
            "only topic, group and client-metrics configs can be altered (brokerlite's broker "
            "configs are static; its dynamic ones, the replication throttles, need cluster mode)"
        )
    if name and name != str(ctx.node_id):
        raise BrokerConfigRefused(
            f"Unexpected broker id, expected {ctx.node_id}, but received {name}"
        )
    static = sorted(k for k in changes if k not in DYNAMIC_BROKER_CONFIGS)
    if static:
        raise BrokerConfigRefused(
            f"Cannot update these configs dynamically: {', '.join(static)} (brokerlite's "
            f"dynamic broker configs are {', '.join(DYNAMIC_BROKER_CONFIGS)})"
        )
    checked = {k: None if v is None else check_broker_config(k, v) for k, v in changes.items()}
    if validate_only:
        return None
    entity = name or DEFAULT_BROKER
    return ZkTask("broker_config", {"entity": entity, "changes": checked, "replace": replace})


def alter_resource_configs(
    ctx: RequestContext,
    resource_type: int,
    name: str,
    changes: Mapping[str, str | None],
    *,
    incremental: bool,
    validate_only: bool,
) -> ZkTask | None:
    """Change a topic's, a group's or a broker's configs (AlterConfigs when not
    ``incremental``: ``changes`` become the whole set): at once on one node, or,
    for what cluster mode keeps in ZooKeeper, checked here and the task that
    writes it (:func:`broker_config_task`, :func:`group_config_task`,
    :func:`topic_config_task`; None otherwise).

    Raises:
        BrokerError: the change is refused (nothing changed).
    """
    if resource_type == ResourceType.BROKER:
        return broker_config_task(
            ctx, name, changes, replace=not incremental, validate_only=validate_only
        )
    if resource_type == ResourceType.GROUP:
        return group_config_task(
            ctx, name, changes, incremental=incremental, validate_only=validate_only
        )
    if ctx.cluster is not None:
        return topic_config_task(
            ctx, name, changes, incremental=incremental, validate_only=validate_only
        )
    ctx.logs.alter_configs(name, changes, incremental=incremental, validate_only=validate_only)
    return None


def group_config_task(
    ctx: RequestContext,
    group: str,
    changes: Mapping[str, str | None],
    *,
    incremental: bool,
    validate_only: bool,
) -> ZkTask | None:
    """A share group's config change: applied here on one node (None); in a
    cluster, checked here, and the task that writes the group's new overrides to
    ZooKeeper (``/config/groups/<group>``), whence every broker applies them
    (None for ``validate_only``).

    Raises:
        InvalidGroupResourceError, InvalidGroupConfigError, ShareGroupStoreError:
            as ``ShareGroups.alter_configs``.
    """
    from trafka.brokerlite.cluster.view import ZkTask

    if ctx.cluster is None:
        ctx.share_groups.alter_configs(
            group, changes, incremental=incremental, validate_only=validate_only
        )
        return None
    configs = ctx.share_groups.configs.proposed(group, changes, incremental=incremental)
    if validate_only:
        return None
    return ZkTask("group_configs", {"group": group, "configs": configs})


def park_results_on_tasks(
    ctx: RequestContext,
    tasks: dict[int, ZkTask],
    results: list[Any],
    build: Callable[[list[Any]], Any],
) -> Parked:
    """Park until ``tasks`` are carried out; then answer ``build(results)``, each
    result whose index has a task replaced with the task's outcome (its
    ``error_code`` and ``error_message``)."""

    def answer() -> Any:
        out = list(results)
        for index, task in tasks.items():
            code, message = task_outcome(task)
            if code:
                out[index] = dataclasses.replace(out[index], error_code=code, error_message=message)
        return build(out)

    return park_on_tasks(ctx, list(tasks.values()), 30_000, answer)
