"""What a cluster member knows of its cluster, and the work it hands its driver. I/O-free.

:class:`ClusterView` lives inside the broker core (``Broker.cluster``, None on
the single-node broker). The driver (:mod:`.driver`) reads ZooKeeper and hands
each complete reading over as a :class:`ClusterImage`; handlers answer from the
latest image (Metadata, FindCoordinator, DescribeCluster) and ask the
:class:`~.replica_manager.ReplicaManager` about leadership (Produce, Fetch,
ListOffsets, OffsetForLeaderEpoch).

Rules:

* An image is a consistent reading of ZooKeeper made after the last change
  the driver was told of; images only replace each other whole. One exception
  makes failover faster: when the only change the driver was told of is to
  partition state znodes (an election, an ISR change), it reads just those and
  patches the last image (:meth:`ClusterImage.with_states`), which takes a
  state only when it is newer than the held one. Every other change (brokers,
  controller, topics, configs) and the periodic refresh bring a complete reading.
* Applying an image first makes the local logs match the cluster's topics:
  a topic new to this broker is created with the cluster's topic id, one that
  grew gets its new partitions, one gone from ZooKeeper is deleted here too.
  Every broker knows every topic and its partition count (so topic lookups stay
  local), but keeps logs only for the partitions it replicates (those it is
  being added to by a reassignment included). A replica added gets an empty log
  before the replica manager takes the partition states; the log of one a
  reassignment removed is deleted after (Kafka's StopReplica with
  ``delete=true``).
* Requests that change the cluster's metadata (CreateTopics, DeleteTopics,
  CreatePartitions, topics created by Metadata) are never applied locally:
  they become :class:`ZkTask` items for the driver, which writes them to
  ZooKeeper; the request is parked and completed when the driver reports the
  outcome (:meth:`ClusterView.finish`).
"""

from __future__ import annotations

import dataclasses
import itertools
import logging
from collections.abc import Callable, Mapping
from typing import Any

from ..errors import BrokerError
from ..storage.internal_topics import (
    INTERNAL_TOPICS,
    OFFSETS_TOPIC,
    SHARE_STATE_TOPIC,
    TRANSACTION_STATE_TOPIC,
)
from ..storage.log_manager import LogManager
from .controller import coordinator_partition
from .replica_manager import ReplicaManager
from .replication_quotas import WINDOW_NUM, WINDOW_SIZE_MS, ReplicationQuotas
from .zk_layout import NO_LEADER, BrokerRegistration, PartitionState, TopicAssignment

__all__ = [
    "INTERNAL_TOPICS",
    "OFFSETS_TOPIC",
    "SHARE_STATE_TOPIC",
    "TRANSACTION_STATE_TOPIC",
    "ClusterImage",
    "ClusterView",
    "ZkTask",
]

log = logging.getLogger("trafka.brokerlite.cluster")


@dataclasses.dataclass(frozen=True, slots=True)
class ClusterImage:
    """One reading of the cluster's metadata from ZooKeeper (what it guarantees
    while the cluster changes: ``driver/reading.py``).

    Attributes:
        brokers: the live brokers by id.
        controller_id: the controller's broker id (-1: none elected).
        controller_epoch: the controller epoch.
        topics: every topic's assignment, by name.
        states: every partition's state that has been written.
        configs: each topic's config overrides.
        deleting: topics whose deletion is under way.
        election: the leader election asked for (ElectLeaders) and not yet carried out.
        zk_moves: the reassignments asked for in ``/admin/reassign_partitions``
            (target replicas by partition; empty when the znode is absent).
    """

    brokers: Mapping[int, BrokerRegistration]
    controller_id: int
    controller_epoch: int
    topics: Mapping[str, TopicAssignment]
    states: Mapping[tuple[str, int], PartitionState]
    configs: Mapping[str, Mapping[str, str]]
    deleting: frozenset[str] = frozenset()
    #: An election asked for and not yet done: (partitions, unclean).
    election: tuple[tuple[tuple[str, int], ...], bool] | None = None
    zk_moves: Mapping[tuple[str, int], tuple[int, ...]] = dataclasses.field(default_factory=dict)

    def unclean_election(self, topic: str, default: bool) -> bool:
        """Whether ``topic`` allows an unclean election, by its override in this
        reading (``default``, the broker's setting, without one)."""
        text = self.configs.get(topic, {}).get("unclean.leader.election.enable")
        return default if text is None else text.lower() == "true"

    def with_states(
        self, updates: Mapping[tuple[str, int], PartitionState]
    ) -> tuple[ClusterImage, list[tuple[str, int]]]:
        """This image with the partition states of a targeted reading (see the
        module rules), and the partitions whose state it took.

        A state replaces the held one only when it is newer: a higher znode
        version, and neither an older controller epoch nor an older leader epoch
        (Kafka's rule for a LeaderAndIsr request: a stale controller's or a stale
        leader epoch's state is refused). A state of a partition this image does
        not know (a topic or partition created since) is left for the next
        complete reading.
        """
        states = dict(self.states)
        taken: list[tuple[str, int]] = []
        for key, state in updates.items():
            topic = self.topics.get(key[0])
            if topic is None or key[1] not in topic.replicas:
                continue
            held = states.get(key)
            if held is not None and (
                state.zk_version <= held.zk_version
                or state.controller_epoch < held.controller_epoch
                or state.leader_epoch < held.leader_epoch
            ):
                continue
            states[key] = state
            taken.append(key)
        if not taken:
            return self, []
        return dataclasses.replace(self, states=states), taken


EMPTY_IMAGE = ClusterImage({}, -1, 0, {}, {}, {})


@dataclasses.dataclass(slots=True)
class ZkTask:
    """A metadata change for the driver to write to ZooKeeper.

    Attributes:
        kind: ``create_topic``, ``delete_topic``, ``create_partitions``,
            ``elect_preferred``, ``reassign``.
        args: what the change needs (see :mod:`.driver`).
        ticket: the parked request to wake when done (None: nobody waits).
        error: set by the driver: the error to report, None on success.
        done: set by the driver once carried out (or failed).
    """

    kind: str
    args: dict[str, Any]
    ticket: int | None = None
    error: BrokerError | None = None
    done: bool = False
    #: The tasks of the same request (itself included): its ticket is woken once
    #: all of them are done.
    siblings: list[ZkTask] = dataclasses.field(default_factory=list, repr=False)
    id: int = dataclasses.field(default_factory=itertools.count(1).__next__)


class ClusterView:
    """A cluster member's view (see the module docstring).

    Args:
        node_id: this broker's id.
        logs: its log manager.
        replicas: its replica manager.
        wake: called with a parked request's ticket when its :class:`ZkTask` is done.
        replication_window_num, replication_window_size_ms: the replication
            throttles' samples (:mod:`.replication_quotas`).
    """

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        replicas: ReplicaManager,
        *,
        wake: Callable[[int], None],
        on_topic_deleted: Callable[[str], None],
        replication_window_num: int = WINDOW_NUM,
        replication_window_size_ms: int = WINDOW_SIZE_MS,
    ) -> None:
        self.node_id = node_id
        self.image = EMPTY_IMAGE
        self.replicas = replicas
        self._logs = logs
        self._wake = wake
        self._on_topic_deleted = on_topic_deleted
        self.tasks: list[ZkTask] = []
        #: Called when a task is queued (the driver wakes its task runner).
        self.on_task: Callable[[], None] = lambda: None
        #: Set by the driver while the ZooKeeper session is up.
        self.zookeeper_connected = False
        #: The replication throttles (KIP-73): the topics' throttled-replicas lists
        #: come with each image, the broker rates from the driver.
        self.replication_quotas = ReplicationQuotas(
            node_id, window_num=replication_window_num, window_size_ms=replication_window_size_ms
        )

    # -- images ----------------------------------------------------------------------------

    def apply(self, image: ClusterImage, now_ms: int) -> bool:
        """Take a new reading of the cluster (see the module rules).

        Returns:
            True when the followers' fetchers must be told of changes.
        """
        self.image = image
        logs = self._logs
        dropping: dict[str, frozenset[int]] = {}
        for name, assignment in image.topics.items():
            hosted = self._replicated_here(assignment)
            info = logs.topic(name)
            configs = dict(image.configs.get(name, {}))
            if info is not None and info.topic_id != assignment.topic_id:
                log.info("topic %r was recreated in the cluster: dropping the old one here", name)
                logs.delete_topic(name)
                self._on_topic_deleted(name)
                info = None
            if info is None:
                logs.create_topic(
                    name,
                    assignment.num_partitions,
                    configs,
                    topic_id=assignment.topic_id,
                    now_ms=now_ms,
                    hosted=hosted,
                )
                continue
            if info.num_partitions < assignment.num_partitions:
                logs.create_partitions(name, assignment.num_partitions, now_ms=now_ms)
            elif info.configs != configs:
                logs.alter_configs(name, configs, incremental=False)
            # New replicas get their logs now; logs of replicas moved away go once
            # the replica manager has let go of them (below).
            kept = frozenset(i for i, _ in logs.hosted(name))
            logs.host(name, hosted | kept, now_ms)
            if kept - hosted:
                dropping[name] = hosted
        for info in logs.topics():
            if info.name not in image.topics:
                log.info("topic %r is gone from the cluster: deleting its logs here", info.name)
                logs.delete_topic(info.name)
                self._on_topic_deleted(info.name)
        self.replication_quotas.use_topic_configs(image.configs)
        changed = self.replicas.apply(image.topics, image.states, now_ms, image.brokers)
        for name, hosted in dropping.items():
            for index in logs.host(name, hosted, now_ms):
                log.info("%s-%d: no longer a replica here; its log is deleted", name, index)
        return changed

    def _replicated_here(self, assignment: TopicAssignment) -> frozenset[int]:
        """The partitions of a topic this broker replicates (or is being added to)."""
        me = self.node_id
        return frozenset(
            p
            for p, replicas in assignment.replicas.items()
            if me in replicas or me in assignment.adding.get(p, ())
        )

    # -- questions handlers ask -----------------------------------------------------------------

    def broker(self, node_id: int) -> BrokerRegistration | None:
        return self.image.brokers.get(node_id)

    def state(self, topic: str, partition: int) -> PartitionState | None:
        return self.image.states.get((topic, partition))

    def leader(self, topic: str, partition: int) -> int:
        """The partition's leader, -1 when offline or unknown."""
        state = self.image.states.get((topic, partition))
        if state is None or state.leader not in self.image.brokers:
            return NO_LEADER
        return state.leader

    def replicas_of(self, topic: str, partition: int) -> tuple[int, ...]:
        assignment = self.image.topics.get(topic)
        if assignment is None:
            return ()
        return assignment.replicas.get(partition, ())

    def coordinator(
        self, key: str, *, transactional: bool = False, topic: str | None = None
    ) -> int:
        """The broker that coordinates a group (or transactional id): the leader of
        its ``__consumer_offsets`` (``__transaction_state``) partition; -1 while
        that partition has no leader or the topic is not created yet. ``topic``
        names another internal topic (``__share_group_state``, whose keys are
        ``group:topic-id:partition``)."""
        if topic is None:
            topic = TRANSACTION_STATE_TOPIC if transactional else OFFSETS_TOPIC
        assignment = self.image.topics.get(topic)
        if assignment is None:
            return NO_LEADER
        return self.leader(topic, coordinator_partition(key, assignment.num_partitions))

    def min_insync_replicas(self, topic: str, default: int) -> int:
        text = self.image.configs.get(topic, {}).get("min.insync.replicas")
        if text is None or not (text.isascii() and text.isdigit()):
            return default
        return int(text)

    # -- work for the driver ------------------------------------------------------------------

    def submit(self, kind: str, ticket: int | None = None, **args: Any) -> ZkTask:
        """Queue a metadata change for the driver; ``ticket`` is woken when it is done."""
        task = ZkTask(kind, args, ticket)
        self.tasks.append(task)
        self.on_task()
        return task

    def submit_all(self, tasks: list[ZkTask], ticket: int) -> None:
        """Queue the tasks of one parked request; its ticket is woken when all are done."""
        for task in tasks:
            task.ticket = ticket
            task.siblings = tasks
        self.tasks.extend(tasks)
        self.on_task()

    def take_tasks(self) -> list[ZkTask]:
        tasks, self.tasks = self.tasks, []
        return tasks

    def finish(self, task: ZkTask, error: BrokerError | None = None) -> None:
        """The driver carried out ``task`` (``error`` when it failed)."""
        task.error = error
        task.done = True
        if task.ticket is not None and all(t.done for t in task.siblings or [task]):
            self._wake(task.ticket)
