"""Reading the cluster: one complete reading of its znodes, watches set again.

Rules (the driver's, see ``driver/__init__.py``): a reading takes brokers, the
controller, topics, partition states, topic configs, pending deletions and a
preferred-replica election asked for, all at once, into one
:class:`~trafka.brokerlite.cluster.view.ClusterImage`; a znode that vanishes
between a listing and its read is simply left out (the next reading sees the
change); every read sets its watch again.
"""

from __future__ import annotations

import logging
from typing import Any

from ..view import ClusterImage
from ..zk_layout import (
    ADMIN_DELETE_TOPICS,
    BROKER_IDS,
    BROKER_TOPICS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PREFERRED_REPLICA_ELECTION,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    ZkDataError,
    broker_path,
    decode_broker,
    decode_controller,
    decode_controller_epoch,
    decode_election,
    decode_partition_state,
    decode_topic,
    decode_topic_config,
    partition_state_path,
    topic_config_path,
    topic_path,
)
from .base import DriverParts

__all__ = ["Reading"]

log = logging.getLogger("trafka.brokerlite.cluster")


class Reading(DriverParts):
    """Reading the cluster (a mixin of :class:`ClusterDriver`)."""

    def _read(self) -> ClusterImage:
        from kazoo.exceptions import NoNodeError

        zk = self.zk
        watch = self._notify
        brokers: dict[int, BrokerRegistration] = {}
        for child in zk.get_children(BROKER_IDS, watch=watch):
            if not (child.isascii() and child.isdigit()):
                continue
            try:
                data, _ = zk.get(broker_path(int(child)))
                brokers[int(child)] = decode_broker(int(child), data)
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring a broker registration: %s", exc)
        controller = -1
        if zk.exists(CONTROLLER, watch=watch) is not None:
            try:
                controller = decode_controller(zk.get(CONTROLLER)[0])
            except (NoNodeError, ZkDataError):
                controller = -1
        try:
            controller_epoch = decode_controller_epoch(zk.get(CONTROLLER_EPOCH)[0])
        except (NoNodeError, ZkDataError):
            controller_epoch = 0
        topics: dict[str, TopicAssignment] = {}
        configs: dict[str, dict[str, str]] = {}
        names = zk.get_children(BROKER_TOPICS, watch=watch)
        pending = {name: zk.get_async(topic_path(name), watch=watch) for name in names}
        config_reads = {name: zk.get_async(topic_config_path(name), watch=watch) for name in names}
        for name, result in pending.items():
            try:
                topics[name] = decode_topic(name, result.get()[0])
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring topic %r: %s", name, exc)
        for name, result in config_reads.items():
            try:
                configs[name] = decode_topic_config(name, result.get()[0])
            except (NoNodeError, ZkDataError):
                configs[name] = {}
        state_reads = {
            (name, p): zk.exists_async(partition_state_path(name, p), watch=watch)
            for name, assignment in topics.items()
            for p in assignment.replicas
        }
        states: dict[tuple[str, int], PartitionState] = {}
        gets = {}
        for key, result in state_reads.items():
            if result.get() is not None:
                gets[key] = zk.get_async(partition_state_path(*key), watch=watch)
        for key, result in gets.items():
            try:
                data, stat = result.get()
                states[key] = decode_partition_state(key[0], key[1], data, stat.version)
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring a partition state: %s", exc)
        deleting = frozenset(zk.get_children(ADMIN_DELETE_TOPICS, watch=watch))
        election = None
        if zk.exists(PREFERRED_REPLICA_ELECTION, watch=watch) is not None:
            try:
                wanted, unclean = decode_election(zk.get(PREFERRED_REPLICA_ELECTION)[0])
                election = (tuple(wanted), unclean)
            except NoNodeError:
                pass
            except ZkDataError as exc:
                log.warning("ignoring an election asked for: %s", exc)
        return ClusterImage(
            brokers, controller, controller_epoch, topics, states, configs, deleting, election
        )

    def _notify(self, *_: Any) -> None:
        """Something changed in ZooKeeper (any thread): read the cluster again."""
        self._wake_soon("_changed")
