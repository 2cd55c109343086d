"""Topic changes that requests ask for, written to ZooKeeper by the driver.

Rules: a request's change (CreateTopics, CreatePartitions, DeleteTopics,
AlterPartitionReassignments, ElectLeaders, topic configs) arrives as a
:class:`~trafka.brokerlite.cluster.view.ZkTask`; it is written here and
answered once a reading of the cluster shows its outcome (a created topic's
partitions all have leaders), or when its timeout passes. Writes that race a
concurrent change fail with an error the client may retry. The other tasks
(ACLs, SCRAM credentials, quotas, broker and group configs, delegation
tokens) are carried out by the metadata syncs (``metadata_sync.py``), and
producer id blocks are reserved here.

:class:`TopicTasks` is an object the driver owns: its state is the tasks'
wake-up; it writes through the ZooKeeper session and waits for the outcome
on the driver's readings.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from trafka.codec.errors import ErrorCode

from ...config import BrokerConfig
from ...errors import (
    BrokerError,
    ChangeNotSeenError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    ZooKeeperUnavailableError,
)
from ...storage.node_meta import ClusterProducerIds
from ...storage.topics import (
    check_topic_collision,
    new_topic_id,
    partitions_not_grown,
    topic_exists,
    validate_topic_name,
)
from ..controller import (
    AssignmentError,
    assign_replicas,
    check_assignment,
    plan_moves,
)
from ..view import INTERNAL_TOPICS, SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC, ClusterView, ZkTask
from ..zk_layout import (
    ADMIN_DELETE_TOPICS,
    BROKER_TOPICS,
    CONFIG_TOPICS,
    PREFERRED_REPLICA_ELECTION,
    PRODUCER_ID_BLOCK,
    REASSIGN_PARTITIONS,
    TopicAssignment,
    ZkDataError,
    config_change_notification,
    decode_producer_id_block,
    decode_reassignment,
    decode_topic,
    encode_election,
    encode_producer_id_block,
    encode_reassignment,
    encode_topic,
    encode_topic_config,
    topic_config_path,
    topic_path,
)
from .acl_sync import AclSync
from .config_sync import ConfigSync
from .metadata_sync import Kick
from .token_sync import TokenSync

__all__ = ["TopicTasks", "reserve_producer_ids"]

log = logging.getLogger("trafka.brokerlite.cluster")

# Producer ids a broker takes from ZooKeeper at a time.
_PRODUCER_ID_BLOCK_SIZE = 1000


class TopicTasks:
    """Carries out the cluster tasks requests ask for (see the module rules).

    Args:
        zk: the ZooKeeper session (a ``kazoo.client.KazooClient``).
        view: the broker's view of the cluster (its tasks, its latest image).
        config: the broker's settings.
        kick: tells the server that the core's state changed.
        want_reading: asks the driver for a complete reading (trio thread).
        wait_image: waits, at most until a deadline (trio's clock), until the
            driver's readings show ``done()``.
        producer_ids: the producer id blocks this broker hands out.
        acls, configs, tokens: the metadata syncs carrying out their tasks.
    """

    def __init__(
        self,
        zk: Any,
        view: ClusterView,
        config: BrokerConfig,
        kick: Kick,
        want_reading: Callable[[], None],
        wait_image: Callable[[float, Callable[[], bool]], Awaitable[bool]],
        *,
        producer_ids: ClusterProducerIds,
        acls: AclSync,
        configs: ConfigSync,
        tokens: TokenSync,
    ) -> None:
        self.zk = zk
        self.view = view
        self.config = config
        self.node_id = config.node_id
        self._kick = kick
        self._want_reading = want_reading
        self._wait_image = wait_image
        self._producer_ids = producer_ids
        self._acls = acls
        self._configs = configs
        self._tokens = tokens
        self._tasks_event = trio.Event()

    def on_task(self) -> None:
        """A task arrived (the view calls it, in the trio thread)."""
        self._tasks_event.set()

    async def run(self) -> None:
        """Carry out each task as it arrives, concurrently; runs until cancelled."""
        async with trio.open_nursery() as nursery:
            while True:
                await self._tasks_event.wait()
                self._tasks_event = trio.Event()
                for task in self.view.take_tasks():
                    nursery.start_soon(self._carry_out, task)

    async def _carry_out(self, task: ZkTask) -> None:
        deadline = trio.current_time() + task.args.get("timeout_ms", 30_000) / 1000
        try:
            if not self.zk.connected:
                raise ZooKeeperUnavailableError(
                    f"ZooKeeper at {self.config.zookeeper_connect} is not reachable: the "
                    "cluster's metadata cannot change until it is back"
                )
            if task.kind == "create_topic":
                try:
                    await trio.to_thread.run_sync(self._create_topic, task.args)
                except TopicExistsError:
                    if not task.args.get("if_missing"):
                        raise
                    # (An internal topic another request is creating: wait for it too.)
                if not task.args.get("validate_only"):
                    # validate_only wrote nothing: no leaders will come to wait for
                    seen = await self._wait_image(
                        deadline, lambda: self._has_leaders(task.args["name"])
                    )
                    _seen_or_timed_out(seen, "the topic's leaders")
            elif task.kind == "delete_topic":
                await trio.to_thread.run_sync(self._mark_deleted, task.args["name"])
                seen = await self._wait_image(
                    deadline, lambda: task.args["name"] not in self.view.image.topics
                )
                _seen_or_timed_out(seen, "the topic's deletion")
            elif task.kind == "create_partitions":
                await trio.to_thread.run_sync(self._create_partitions, task.args)
                if not task.args.get("validate_only"):
                    # The image has the topic's old partitions (with leaders) until
                    # it reads the new assignment: wait for the new count.
                    seen = await self._wait_image(
                        deadline,
                        lambda: self._has_leaders(task.args["name"], task.args["total"]),
                    )
                    _seen_or_timed_out(seen, "the new partitions' leaders")
            elif task.kind == "set_topic_config":
                name, configs = task.args["name"], task.args["configs"]
                await trio.to_thread.run_sync(self._set_topic_config, name, configs)
                await self._wait_image(
                    deadline, lambda: dict(self.view.image.configs.get(name, {})) == configs
                )
            elif task.kind == "reassign":
                await trio.to_thread.run_sync(self._reassign, task.args)
                # As Kafka's controller answers once its context has the moves, so
                # that a ListPartitionReassignments right after lists them.
                await self._wait_image(deadline, lambda: self._moves_seen(task.args))
            elif task.kind == "elect_leaders":
                await self._ask_election(task, deadline)
            elif task.kind == "acls":
                await self._acls.change(task.args["add"], task.args["remove"])
            elif task.kind == "scram":
                await self._configs.change_scram(task.args["sets"], task.args["deletes"])
            elif task.kind == "quotas":
                await self._configs.change_quotas(task.args["changes"])
            elif task.kind == "broker_config":
                args = task.args
                await self._configs.change_broker_config(
                    args["entity"], args["changes"], args["replace"]
                )
            elif task.kind == "group_configs":
                await self._configs.change_group_configs(task.args["group"], task.args["configs"])
            elif task.kind == "features":
                await self._configs.change_features(task.args["levels"])
            elif task.kind == "tokens":
                await self._tokens.change(task.args["writes"])
            elif task.kind == "producer_ids":
                block = await trio.to_thread.run_sync(reserve_producer_ids, self.zk, self.node_id)
                self._producer_ids.add_block(*block)
            else:
                raise BrokerError(f"unknown cluster task {task.kind!r}")
        except BrokerError as exc:
            if not task.args.get("quiet"):
                log.info("cluster task %s failed: %s", task.kind, exc)
            self.view.finish(task, exc)
        except Exception as exc:
            log.exception("cluster task %s failed", task.kind)
            self.view.finish(task, BrokerError(f"{task.kind} failed: {exc}"))
        else:
            self.view.finish(task)
        self._kick()

    async def _ask_election(self, task: ZkTask, deadline: float) -> None:
        """Write the election for the controller (once any earlier one is done), then
        wait until it has been carried out (the controller removes the znode)."""
        from kazoo.exceptions import NodeExistsError

        data = encode_election(task.args["partitions"], unclean=task.args["unclean"])
        while True:
            try:
                await trio.to_thread.run_sync(
                    lambda: self.zk.create(PREFERRED_REPLICA_ELECTION, data, makepath=True)
                )
                break
            except NodeExistsError:
                if trio.current_time() >= deadline:
                    raise BrokerError("another leader election is still under way") from None
                await trio.sleep(0.05)
        await trio.sleep(0)  # the watch's reading comes next; wait until it shows it done
        self._want_reading()
        await self._wait_image(
            deadline,
            lambda: (
                self.view.image.election is None
                and not self._still_asked(task.args["partitions"], task.args["unclean"])
            ),
        )

    def _still_asked(self, partitions: list[tuple[str, int]], unclean: bool) -> bool:
        """Whether the latest image may predate the controller's election: a partition
        named whose preferred replica is live and in the ISR but does not lead; for
        an unclean one, a partition with no live leader but a live replica."""
        view = self.view
        live = view.image.brokers
        for topic, partition in partitions:
            replicas = view.replicas_of(topic, partition)
            state = view.state(topic, partition)
            if not replicas or state is None:
                continue
            if unclean:
                if state.leader not in live and any(r in live for r in replicas):
                    return True
                continue
            preferred = replicas[0]
            if preferred in live and preferred in state.isr and state.leader != preferred:
                return True
        return False

    def _moves_seen(self, args: dict[str, Any]) -> bool:
        """Whether the image has each partition as ``_reassign`` wrote it (or moved on
        from there: the move completed meanwhile)."""
        topics = self.view.image.topics
        for (topic, partition), replicas in args.get("written", {}).items():
            assignment = topics.get(topic)
            if assignment is None:
                return False
            now = assignment.replicas.get(partition)
            target = args["moves"][(topic, partition)]
            if now != replicas and (target is None or now != tuple(target)):
                return False
        return True

    def _has_leaders(self, name: str, partitions: int = 1) -> bool:
        """Whether the image has topic ``name`` with at least ``partitions``
        partitions, each with a leader."""
        image = self.view.image
        assignment = image.topics.get(name)
        if assignment is None or assignment.num_partitions < partitions:
            return False
        return all(self.view.leader(name, p) >= 0 for p in assignment.replicas)

    def _create_topic(self, args: dict[str, Any]) -> None:
        from kazoo.exceptions import NodeExistsError

        name: str = args["name"]
        validate_topic_name(name)
        live = sorted(self.view.image.brokers) or [self.node_id]
        assignment = self._assignment(args, live)
        if self.zk.exists(topic_path(name)) is not None:
            raise TopicExistsError(topic_exists(name))
        check_topic_collision(name, self.zk.get_children(BROKER_TOPICS))
        if args.get("validate_only"):
            args["planned"] = assignment  # what the answer tells (KIP-525)
            return
        configs = {k: v for k, v in (args.get("configs") or {}).items() if v is not None}
        self.zk.ensure_path(CONFIG_TOPICS)
        txn = self.zk.transaction()
        txn.create(topic_config_path(name), encode_topic_config(configs))
        txn.create(
            topic_path(name), encode_topic(TopicAssignment(name, new_topic_id(), assignment))
        )
        results = txn.commit()
        if any(isinstance(r, NodeExistsError) for r in results):
            raise TopicExistsError(topic_exists(name))
        for r in results:
            if isinstance(r, Exception):
                raise BrokerError(f"cannot write topic {name!r} to ZooKeeper: {r}")
        log.info(
            "created topic %r: %d partition(s), replicas %s",
            name,
            len(assignment),
            {p: list(r) for p, r in assignment.items()},
        )

    def _assignment(self, args: dict[str, Any], live: list[int]) -> dict[int, tuple[int, ...]]:
        explicit: dict[int, list[int]] | None = args.get("assignments")
        if explicit:
            try:
                return check_assignment(explicit, live)
            except AssignmentError as exc:
                raise InvalidReplicaAssignmentError(str(exc)) from None
        count = args.get("num_partitions", -1)
        if count == -1:
            count = self.config.num_partitions
        factor = args.get("replication_factor", -1)
        if factor == -1:
            factor = self.config.default_replication_factor
            if args["name"] == TRANSACTION_STATE_TOPIC:
                factor = min(self.config.transaction_state_log_replication_factor, len(live))
            elif args["name"] == SHARE_STATE_TOPIC:
                factor = min(
                    self.config.share_coordinator_state_topic_replication_factor, len(live)
                )
            elif args["name"] in INTERNAL_TOPICS:
                factor = min(self.config.offsets_topic_replication_factor, len(live))
        try:
            return assign_replicas(live, count, factor)
        except AssignmentError as exc:
            raise InvalidReplicationFactorError(str(exc)) from None

    def _reassign(self, args: dict[str, Any]) -> None:
        """Start (or cancel, for a None target) partition reassignments: rewrite each
        topic's assignment with KIP-455's adding and removing replicas; the controller
        completes them. Each partition's outcome goes to ``args["outcomes"]``."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        moves: dict[tuple[str, int], list[int] | None] = args["moves"]
        outcomes: dict[tuple[str, int], tuple[ErrorCode, str | None]] = args["outcomes"]
        by_topic: dict[str, dict[int, list[int] | None]] = {}
        for (topic, partition), target in moves.items():
            by_topic.setdefault(topic, {})[partition] = target
        for topic, wanted in by_topic.items():
            for _attempt in range(10):
                try:
                    data, stat = self.zk.get(topic_path(topic))
                except NoNodeError:
                    for partition in wanted:
                        outcomes[(topic, partition)] = (
                            ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                            f"no topic named {topic!r}",
                        )
                    break
                current = decode_topic(topic, data)
                changed, results = plan_moves(current, wanted)
                outcomes.update({(topic, p): r for p, r in results.items()})
                try:
                    self.zk.set(topic_path(topic), encode_topic(changed), version=stat.version)
                    written = args.setdefault("written", {})
                    for p, (code, _) in results.items():
                        if code == ErrorCode.NONE:
                            written[(topic, p)] = changed.replicas[p]
                    break
                except BadVersionError:
                    continue  # the controller changed it meanwhile: plan again
            else:
                for partition in wanted:
                    outcomes[(topic, partition)] = (
                        ErrorCode.REQUEST_TIMED_OUT,
                        f"topic {topic!r} kept changing; try again",
                    )
        log.info("reassignments asked: %s", {f"{t}-{p}": r for (t, p), r in moves.items()})
        self._drop_zk_moves(set(moves))

    def _drop_zk_moves(self, partitions: set[tuple[str, int]]) -> None:
        """The latest reassignment wins, as in Kafka 3.9's controller: partitions
        moved through the API leave ``/admin/reassign_partitions`` (deleted when empty)."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        try:
            data, stat = self.zk.get(REASSIGN_PARTITIONS)
            asked = decode_reassignment(data)
            left = {tp: r for tp, r in asked.items() if tp not in partitions}
            if len(left) == len(asked):
                return
            if left:
                self.zk.set(REASSIGN_PARTITIONS, encode_reassignment(left), version=stat.version)
            else:
                self.zk.delete(REASSIGN_PARTITIONS, version=stat.version)
        except (NoNodeError, BadVersionError, ZkDataError):
            pass  # none, or changed meanwhile (the controller's to settle)

    def _set_topic_config(self, name: str, configs: dict[str, str]) -> None:
        """Write a topic's config overrides (every broker applies them from there)."""
        from kazoo.exceptions import NoNodeError

        if self.zk.exists(topic_path(name)) is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        data = encode_topic_config(configs)
        try:
            self.zk.set(topic_config_path(name), data)
        except NoNodeError:
            self.zk.create(topic_config_path(name), data, makepath=True)
        # As Kafka's AdminZkClient: brokers here follow the znode itself, but
        # Kafka's tooling and brokers look for the notification.
        prefix, content = config_change_notification(f"topics/{name}")
        self.zk.create(prefix, content, sequence=True, makepath=True)
        log.info("topic %r configs now %s", name, configs)

    def _mark_deleted(self, name: str) -> None:
        from kazoo.exceptions import NodeExistsError

        if self.zk.exists(topic_path(name)) is None:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}")
        try:
            self.zk.create(f"{ADMIN_DELETE_TOPICS}/{name}", b"", makepath=True)
        except NodeExistsError:
            pass

    def _create_partitions(self, args: dict[str, Any]) -> None:
        from kazoo.exceptions import BadVersionError, NoNodeError

        name: str = args["name"]
        total: int = args["total"]
        try:
            data, stat = self.zk.get(topic_path(name))
        except NoNodeError:
            raise UnknownTopicOrPartitionError(f"unknown topic {name!r}") from None
        current = decode_topic(name, data)
        if total <= current.num_partitions:
            raise InvalidPartitionsError(partitions_not_grown(current.num_partitions, total))
        live = sorted(self.view.image.brokers)
        factor = len(current.replicas[0])
        explicit = args.get("assignments")
        if explicit is not None and len(explicit) != total - current.num_partitions:
            raise InvalidReplicaAssignmentError(
                f"assignments must name the {total - current.num_partitions} new partition(s)"
            )
        if explicit:
            try:
                added = check_assignment(
                    {current.num_partitions + i: a for i, a in enumerate(explicit)}, live, factor
                )
            except AssignmentError as exc:
                raise InvalidReplicaAssignmentError(str(exc)) from None
        else:
            try:
                added = assign_replicas(
                    live,
                    total - current.num_partitions,
                    factor,
                    first_partition=current.num_partitions,
                )
            except AssignmentError as exc:
                raise InvalidReplicationFactorError(str(exc)) from None
        if args.get("validate_only"):
            return
        replicas = {**current.replicas, **added}
        try:
            self.zk.set(
                topic_path(name),
                encode_topic(TopicAssignment(name, current.topic_id, replicas)),
                version=stat.version,
            )
        except BadVersionError:
            raise BrokerError(f"topic {name!r} changed meanwhile; try again") from None


def reserve_producer_ids(zk: Any, node_id: int) -> tuple[int, int]:
    """Take the next block of producer ids from ZooKeeper (unique cluster-wide)."""
    from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

    while True:
        try:
            data, stat = zk.get(PRODUCER_ID_BLOCK)
            # Empty as a Kafka broker makes it (a persistent path): no block yet.
            start = decode_producer_id_block(data)[1] + 1 if data else 0
            zk.set(
                PRODUCER_ID_BLOCK,
                encode_producer_id_block(node_id, start, start + _PRODUCER_ID_BLOCK_SIZE - 1),
                version=stat.version,
            )
        except NoNodeError:
            start = 0
            try:
                zk.create(
                    PRODUCER_ID_BLOCK,
                    encode_producer_id_block(node_id, 0, _PRODUCER_ID_BLOCK_SIZE - 1),
                )
            except NodeExistsError:
                continue
        except BadVersionError:
            continue
        return start, start + _PRODUCER_ID_BLOCK_SIZE - 1


def _seen_or_timed_out(seen: bool, what: str) -> None:
    """A topic change written but not seen done by the request's timeout: the
    answer is REQUEST_TIMED_OUT (the change goes on), as Kafka's; with
    ``timeout_ms`` 0 always (Kafka 3.9's ZkAdminManager answers at once)."""
    if not seen:
        raise ChangeNotSeenError(f"{what} not seen by the request's timeout; the change goes on")
