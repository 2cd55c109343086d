"""The controller's writes: taking the office, elections, reassignments, deletions.

The decisions are ``cluster/controller.py``'s (I/O-free); here they are
written. Rules: the office is the ephemeral ``/controller`` plus a conditional
bump of ``/controller_epoch``; every partition-state write is a ZooKeeper
transaction that also checks the controller epoch znode's version, so a
controller that lost its office cannot write, and resigns when it sees that.

:class:`Controller` is an object the driver owns: its state is the office
(the epoch while it holds it, the epoch znode's version that fences its
writes, the moves this term has started); it reads the cluster through the
reading it is given and writes through the ZooKeeper session.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from ...clock import now_ms
from ...config import BrokerConfig
from ..controller import (
    StateWrite,
    plan_leadership,
    plan_moves,
    plan_preferred,
    plan_reassignments,
    plan_unclean,
)
from ..view import ClusterImage
from ..zk_layout import (
    ADMIN_DELETE_TOPICS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PREFERRED_REPLICA_ELECTION,
    REASSIGN_PARTITIONS,
    PartitionState,
    TopicAssignment,
    ZkDataError,
    decode_controller,
    decode_controller_epoch,
    decode_topic,
    encode_controller,
    encode_partition_state,
    encode_reassignment,
    encode_topic,
    partition_state_path,
    topic_config_path,
    topic_path,
)

__all__ = ["SETTLE_ROUNDS", "Controller"]

#: At most this many plan-write-read rounds per reading (:meth:`Controller.settle`).
SETTLE_ROUNDS = 5

log = logging.getLogger("trafka.brokerlite.cluster")


class Controller:
    """The controller's office and writes (see the module rules).

    Args:
        zk: the ZooKeeper session (a ``kazoo.client.KazooClient``).
        config: the broker's settings.
        read: one complete reading of the cluster (run in a thread).
    """

    def __init__(self, zk: Any, config: BrokerConfig, read: Callable[[], ClusterImage]) -> None:
        self.zk = zk
        self.config = config
        self.node_id = config.node_id
        self._read = read
        #: Ours while we are the controller, else -1; and its znode's version.
        self.epoch = -1
        self._epoch_version = -1
        #: moves this controller has given their start's leader epoch: (topic, partition, replicas)
        self._moves_started: set[tuple[str, int, tuple[int, ...]]] = set()

    @property
    def acting(self) -> bool:
        """Whether this broker holds the office (as far as it knows)."""
        return self.epoch >= 0

    def step_down(self) -> None:
        """Stop acting: the office is gone (a new session, another controller seen)."""
        self.epoch = -1

    def elect(self) -> bool:
        """Try to take the controller's office; True when this broker took it."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        try:
            self.zk.create(CONTROLLER, encode_controller(self.node_id, now_ms()), ephemeral=True)
        except NodeExistsError:
            return False
        while True:
            try:
                data, stat = self.zk.get(CONTROLLER_EPOCH)
                epoch = decode_controller_epoch(data) + 1
                stat = self.zk.set(CONTROLLER_EPOCH, str(epoch).encode(), version=stat.version)
            except NoNodeError:
                epoch = 1
                try:
                    self.zk.create(CONTROLLER_EPOCH, b"1")
                except NodeExistsError:
                    continue
                stat = self.zk.exists(CONTROLLER_EPOCH)
            except BadVersionError:
                continue
            break
        self.epoch = epoch
        self._epoch_version = stat.version
        self._moves_started.clear()  # a new term starts every move under way again (as Kafka)
        log.info("broker %d is the controller (epoch %d)", self.node_id, epoch)
        return True

    def settle(self, image: ClusterImage) -> tuple[ClusterImage, bool]:
        """Act on ``image`` and, while that wrote something, read the cluster again
        and act on that: the last reading (or ``image``), and whether nothing was
        left to write (False after :data:`SETTLE_ROUNDS` rounds that all wrote:
        the caller asks for another reading).

        A step often makes the next one due at once (a reassignment whose target
        replicas are already in sync completes right after its leader epoch
        bump, as Kafka's controller completes it within the same event), and
        the watches of this controller's own writes may bring nothing newer than
        the reading that follows them, so nothing else would plan again."""
        for _ in range(SETTLE_ROUNDS):
            if not self.control(image):
                return image, True
            image = self._read()
            if image.controller_id != self.node_id or not self.acting:
                return image, True
        return image, False

    def control(self, image: ClusterImage) -> bool:
        """Plan and write what the cluster needs; True when something was written."""
        wrote = self._delete_topics(image)
        cfg = self.config
        writes = plan_leadership(
            image.topics,
            image.states,
            image.brokers.keys(),
            controller_epoch=self.epoch,
            # The setting as this reading has it, not as the view's last image did
            # (the view takes this image after): a topic's change to it is planned on
            # the reading its watch caused, as Kafka 3.9's controller elects on the
            # change, not on the next periodic reading (a safety net, 60 s apart).
            unclean=lambda t: image.unclean_election(t, cfg.unclean_leader_election_enable),
            skip=image.deleting,
        )
        if image.election is not None:
            writes += self._elections(image)
        busy = {(w.topic, w.partition) for w in writes}
        for write in writes:
            if self._write_state(write.topic, write.partition, write.state, write.expected_version):
                wrote = True
                log.info(
                    "controller: %s-%d leader %d epoch %d ISR %s (%s; monotonic %.3f)",
                    write.topic,
                    write.partition,
                    write.state.leader,
                    write.state.leader_epoch,
                    list(write.state.isr),
                    write.reason,
                    time.monotonic(),
                )
            if self.epoch < 0:
                break
        if self.epoch >= 0:
            wrote = self._start_moves(image, busy) or wrote
        if self.epoch >= 0 and image.zk_moves:
            wrote = self._zk_reassignments(image) or wrote
        if self.epoch >= 0:
            wrote = self._complete_reassignments(image, busy) or wrote
        return wrote

    def _start_moves(self, image: ClusterImage, busy: set[tuple[str, int]]) -> bool:
        """A new leader epoch for each reassignment under way that this controller
        has not started yet (same leader and ISR), as Kafka's controller bumps it
        when a move starts (its LeaderAndIsr is how the replicas learn the new
        set); the move's end bumps it again (:func:`plan_reassignments`)."""
        moving = {
            (name, p, assignment.replicas[p])
            for name, assignment in image.topics.items()
            for p in {*assignment.adding, *assignment.removing}
            if p in assignment.replicas
        }
        self._moves_started &= moving
        wrote = False
        for key in sorted(moving - self._moves_started):
            name, p, _ = key
            state = image.states.get((name, p))
            if state is None or (name, p) in busy:
                continue
            bumped = dataclasses.replace(
                state, leader_epoch=state.leader_epoch + 1, controller_epoch=self.epoch
            )
            if self._write_state(name, p, bumped, state.zk_version):
                self._moves_started.add(key)
                busy.add((name, p))
                wrote = True
                log.info("controller: %s-%d moving, leader epoch %d", name, p, bumped.leader_epoch)
        return wrote

    def _zk_reassignments(self, image: ClusterImage) -> bool:
        """Act on ``/admin/reassign_partitions`` as Kafka 3.9's controller does (the
        way before KIP-455): a partition named starts moving as an
        AlterPartitionReassignments would start it (its target replicas first in
        the topic's assignment, with adding/removing replicas), and leaves the
        znode once its replicas are the target, or at once when it cannot move
        (an unknown topic or partition, no replicas); the znode is deleted when
        none is left. True when something was written."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        left: dict[tuple[str, int], tuple[int, ...]] = {}
        starts: dict[str, dict[int, Sequence[int] | None]] = {}
        for (topic, partition), target in image.zk_moves.items():
            assignment = image.topics.get(topic)
            if assignment is None or partition not in assignment.replicas or not target:
                continue
            moving = partition in assignment.adding or partition in assignment.removing
            if not moving and assignment.replicas[partition] == target:
                continue  # done
            left[(topic, partition)] = target
            if not moving:
                starts.setdefault(topic, {})[partition] = target
        wrote = False
        for topic, wanted in starts.items():
            try:
                data, stat = self.zk.get(topic_path(topic))
                changed, _ = plan_moves(decode_topic(topic, data), wanted)
                self.zk.set(topic_path(topic), encode_topic(changed), version=stat.version)
                wrote = True
                log.info("controller: reassignments from ZooKeeper started: %s", wanted)
            except (BadVersionError, NoNodeError):
                continue  # changed meanwhile: the next reading plans again
        if left != dict(image.zk_moves):
            try:
                if left:
                    self.zk.set(REASSIGN_PARTITIONS, encode_reassignment(left))
                else:
                    self.zk.delete(REASSIGN_PARTITIONS)
                wrote = True
            except NoNodeError:
                pass
        return wrote

    def _complete_reassignments(self, image: ClusterImage, busy: set[tuple[str, int]]) -> bool:
        """Finish the reassignments whose target replicas are all in sync: the new
        leadership and ISR first, then the assignment without the leaving replicas."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        wrote = False
        for done in plan_reassignments(
            image.topics,
            image.states,
            image.brokers.keys(),
            controller_epoch=self.epoch,
        ):
            if (done.topic, done.partition) in busy:
                continue
            w = done.write
            if not self._write_state(w.topic, w.partition, w.state, w.expected_version):
                continue
            try:
                data, stat = self.zk.get(topic_path(done.topic))
                current = decode_topic(done.topic, data)
                replicas = dict(current.replicas)
                replicas[done.partition] = done.target
                adding = {p: r for p, r in current.adding.items() if p != done.partition}
                removing = {p: r for p, r in current.removing.items() if p != done.partition}
                self.zk.set(
                    topic_path(done.topic),
                    encode_topic(
                        TopicAssignment(done.topic, current.topic_id, replicas, adding, removing)
                    ),
                    version=stat.version,
                )
            except (BadVersionError, NoNodeError):
                continue  # changed meanwhile: the next reading plans again
            wrote = True
            log.info(
                "controller: %s-%d reassigned to %s (leader %d, epoch %d)",
                done.topic,
                done.partition,
                list(done.target),
                w.state.leader,
                w.state.leader_epoch,
            )
        return wrote

    def _write_state(
        self, topic: str, partition: int, state: PartitionState, expected_version: int
    ) -> bool:
        """Write a partition state as controller, fenced by the controller epoch."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        path = partition_state_path(topic, partition)
        if expected_version < 0:
            self.zk.ensure_path(path.rsplit("/", 1)[0])
        txn = self.zk.transaction()
        txn.check(CONTROLLER_EPOCH, self._epoch_version)
        data = encode_partition_state(state)
        if expected_version < 0:
            txn.create(path, data)
        else:
            txn.set_data(path, data, version=expected_version)
        results = txn.commit()
        if isinstance(results[0], BadVersionError | NoNodeError):
            log.warning(
                "broker %d: controller epoch %d was superseded; giving up the controller role",
                self.node_id,
                self.epoch,
            )
            self._resign()
            return False
        if isinstance(results[1], BadVersionError | NodeExistsError | NoNodeError):
            return False  # changed meanwhile: the next reading plans again
        if isinstance(results[1], Exception):
            raise results[1]
        return True

    def _elections(self, image: ClusterImage) -> list[StateWrite]:
        """The writes of the election asked for in ``/admin/preferred_replica_election``
        (which is removed: an election is carried out once, as Kafka's controller does)."""
        from kazoo.exceptions import NoNodeError

        assert image.election is not None
        wanted, unclean = image.election
        plan = plan_unclean if unclean else plan_preferred
        writes = plan(
            image.topics,
            image.states,
            image.brokers.keys(),
            controller_epoch=self.epoch,
            partitions=set(wanted),
        )
        try:
            self.zk.delete(PREFERRED_REPLICA_ELECTION)
        except NoNodeError:
            pass
        return writes

    def _resign(self) -> None:
        """Stop acting as controller and free the office (an election follows: this
        broker may win it again, with a new epoch)."""
        from kazoo.exceptions import NoNodeError

        self.epoch = -1
        try:
            data, stat = self.zk.get(CONTROLLER)
            if decode_controller(data) == self.node_id:
                self.zk.delete(CONTROLLER, version=stat.version)
        except (NoNodeError, ZkDataError):
            pass
        except Exception as exc:
            log.warning("cannot free the controller office: %s", exc)

    def _delete_topics(self, image: ClusterImage) -> bool:
        from kazoo.exceptions import NoNodeError

        wrote = False
        for name in image.deleting:
            for path in (topic_path(name), topic_config_path(name)):
                try:
                    self.zk.delete(path, recursive=True)
                except NoNodeError:
                    pass
            try:
                self.zk.delete(f"{ADMIN_DELETE_TOPICS}/{name}")
            except NoNodeError:
                pass
            log.info("controller: deleted topic %r", name)
            wrote = True
        return wrote

    def elect_preferred(self, partitions: set[tuple[str, int]] | None) -> None:
        if self.epoch < 0:
            return
        image = self._read()
        for write in plan_preferred(
            image.topics,
            image.states,
            image.brokers.keys(),
            controller_epoch=self.epoch,
            partitions=partitions,
        ):
            if self._write_state(write.topic, write.partition, write.state, write.expected_version):
                log.info("controller: %s-%d: %s", write.topic, write.partition, write.reason)
