"""Reading the cluster: one complete reading of its znodes, watches set again.

Rules (the driver's, see ``driver/__init__.py``): a reading takes brokers, the
controller, topics, partition states, topic configs, pending deletions and a
preferred-replica election asked for, all at once, into one
:class:`~trafka.brokerlite.cluster.view.ClusterImage`; a znode that vanishes
between a listing and its read is simply left out (the watch on its parent's
children brings the next reading); every read sets its watch again.

The brokers are read last, after the partition states. A reading is not one
snapshot: a broker may register and join an ISR while it goes on. A follower
fetches, and so joins an ISR, only once it has registered; so each ISR member
a reading shows was registered when the brokers were read, unless it has gone
since. Read the other way round, a broker that has just come back could be in
an ISR and missing from the brokers, and the controller would take it out of
the ISR as dead (a new leader epoch). Kafka's controller never meets that
case: a leader adds a follower to the ISR only once its metadata, which comes
from the controller, has the follower live (``Partition.isReplicaIsrEligible``,
ZooKeeper mode).

Targeted readings: a partition state znode's watch (:meth:`ClusterReader._on_state_watch`)
only notes the znode, so that when nothing else changed the driver reads just
the noted znodes (:meth:`ClusterReader.read_states`) and patches its last image
(``ClusterImage.with_states``): after an election the new leader and its
followers learn their roles from one read of one znode instead of a complete
reading. Every other watch asks for a complete reading, which also covers the
noted znodes. Every znode read is watched; a missing one through ``exists``
(ZooKeeper leaves no watch on a read of a missing znode), so that its creation
is seen without a periodic reading. The znodes a reading asks for
independently go out together (kazoo's asynchronous calls), so that a reading
costs a few ZooKeeper round trips, not one per znode.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from typing import Any

from ..view import ClusterImage
from ..zk_layout import (
    ADMIN_DELETE_TOPICS,
    BROKER_IDS,
    BROKER_TOPICS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PREFERRED_REPLICA_ELECTION,
    REASSIGN_PARTITIONS,
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
    decode_reassignment,
    decode_topic,
    decode_topic_config,
    parse_partition_state_path,
    partition_state_path,
    topic_config_path,
    topic_path,
)

__all__ = ["ClusterReader"]

log = logging.getLogger("trafka.brokerlite.cluster")


class ClusterReader:
    """Reads the cluster (see the module rules); holds no state of its own.

    Args:
        zk: the ZooKeeper session (a ``kazoo.client.KazooClient``).
        changed: called (from any thread) when a watched znode changed: a
            complete reading is due.
        state_changed: called (from any thread) with the path of a partition
            state znode that changed: a targeted reading may do.
    """

    def __init__(
        self, zk: Any, changed: Callable[[], None], state_changed: Callable[[str], None]
    ) -> None:
        self.zk = zk
        self._changed = changed
        self._state_changed = state_changed

    def read(self) -> ClusterImage:
        """One complete reading, watches set again (kazoo's calls: run in a thread)."""
        from kazoo.exceptions import NoNodeError

        zk = self.zk
        watch = self._notify
        controller_read = zk.exists_async(CONTROLLER, watch=watch)
        epoch_read = zk.get_async(CONTROLLER_EPOCH, watch=watch)
        names_read = zk.get_children_async(BROKER_TOPICS, watch=watch)
        deleting_read = zk.get_children_async(ADMIN_DELETE_TOPICS, watch=watch)
        election_read = zk.exists_async(PREFERRED_REPLICA_ELECTION, watch=watch)
        moves_read = zk.exists_async(REASSIGN_PARTITIONS, watch=watch)
        controller = -1
        if controller_read.get() is not None:
            try:
                controller = decode_controller(zk.get(CONTROLLER)[0])
            except (NoNodeError, ZkDataError):
                controller = -1
        try:
            controller_epoch = decode_controller_epoch(epoch_read.get()[0])
        except (NoNodeError, ZkDataError):
            controller_epoch = 0
        topics: dict[str, TopicAssignment] = {}
        configs: dict[str, dict[str, str]] = {}
        names = names_read.get()
        pending = {name: zk.get_async(topic_path(name), watch=watch) for name in names}
        config_reads = {name: zk.get_async(topic_config_path(name), watch=watch) for name in names}
        for name, result in pending.items():
            try:
                topics[name] = decode_topic(name, result.get()[0])
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring topic %r: %s", name, exc)
        missing = []
        for name, result in config_reads.items():
            try:
                configs[name] = decode_topic_config(name, result.get()[0])
            except NoNodeError:
                configs[name] = {}
                missing.append(name)
            except ZkDataError:
                configs[name] = {}
        for name in missing:
            configs[name] = self._read_missing_config(name)
        state_reads = {
            (name, p): zk.exists_async(partition_state_path(name, p), watch=self._on_state_watch)
            for name, assignment in topics.items()
            for p in assignment.replicas
        }
        states: dict[tuple[str, int], PartitionState] = {}
        gets = {}
        for key, result in state_reads.items():
            if result.get() is not None:
                gets[key] = zk.get_async(partition_state_path(*key), watch=self._on_state_watch)
        for key, result in gets.items():
            try:
                data, stat = result.get()
                states[key] = decode_partition_state(key[0], key[1], data, stat.version)
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring a partition state: %s", exc)
        brokers = self._read_brokers()  # after the states: see the module rules
        deleting = frozenset(deleting_read.get())
        election = None
        if election_read.get() is not None:
            try:
                wanted, unclean = decode_election(zk.get(PREFERRED_REPLICA_ELECTION)[0])
                election = (tuple(wanted), unclean)
            except NoNodeError:
                pass
            except ZkDataError as exc:
                log.warning("ignoring an election asked for: %s", exc)
        zk_moves: dict[tuple[str, int], tuple[int, ...]] = {}
        if moves_read.get() is not None:
            try:
                zk_moves = decode_reassignment(zk.get(REASSIGN_PARTITIONS, watch=watch)[0])
            except NoNodeError:
                pass
            except ZkDataError as exc:
                log.warning("ignoring the reassignments in ZooKeeper: %s", exc)
        return ClusterImage(
            brokers,
            controller,
            controller_epoch,
            topics,
            states,
            configs,
            deleting,
            election,
            zk_moves,
        )

    def _read_missing_config(self, name: str) -> dict[str, str]:
        """A topic config znode that was missing: watched through ``exists`` (a read
        of a missing znode leaves no watch, and its creation would go unseen), and
        read when it came meanwhile."""
        from kazoo.exceptions import NoNodeError

        path = topic_config_path(name)
        while self.zk.exists(path, watch=self._notify) is not None:
            try:
                return decode_topic_config(name, self.zk.get(path, watch=self._notify)[0])
            except NoNodeError:
                continue
            except ZkDataError:
                return {}
        return {}

    def _read_brokers(self) -> dict[int, BrokerRegistration]:
        """The registered brokers, the watch on their list set again."""
        from kazoo.exceptions import NoNodeError

        zk = self.zk
        reads = {
            int(child): zk.get_async(broker_path(int(child)))
            for child in zk.get_children(BROKER_IDS, watch=self._notify)
            if child.isascii() and child.isdigit()
        }
        brokers: dict[int, BrokerRegistration] = {}
        for node, result in reads.items():
            try:
                brokers[node] = decode_broker(node, result.get()[0])
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring a broker registration: %s", exc)
        return brokers

    def read_states(self, paths: Collection[str]) -> dict[tuple[str, int], PartitionState] | None:
        """A targeted reading: the partition state znodes at ``paths``, watches set
        again; None when one of them is gone (a deletion: a complete reading must
        follow)."""
        from kazoo.exceptions import NoNodeError

        zk = self.zk
        reads = {}
        for path in paths:
            key = parse_partition_state_path(path)
            if key is None:
                return None
            reads[key] = zk.get_async(path, watch=self._on_state_watch)
        states: dict[tuple[str, int], PartitionState] = {}
        for key, result in reads.items():
            try:
                data, stat = result.get()
                states[key] = decode_partition_state(key[0], key[1], data, stat.version)
            except NoNodeError:
                return None
            except ZkDataError as exc:
                log.warning("ignoring a partition state: %s", exc)
        return states

    def _notify(self, *_: Any) -> None:
        self._changed()

    def _on_state_watch(self, event: Any) -> None:
        """A partition state znode changed (kazoo's thread): note it for a targeted
        reading (see the module rules)."""
        path = getattr(event, "path", None)
        if not isinstance(path, str):
            self._notify()
            return
        self._state_changed(path)
