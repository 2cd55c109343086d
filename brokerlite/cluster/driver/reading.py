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

What a reading remembers: a topic's assignment and config znodes and its
partitions' state znodes are read again only when their watch fired since they
were last read (or they were never read): a znode whose watch has not fired has
not changed, since ZooKeeper fires a watch on the first change after the read
that set it. So a complete reading costs a few requests plus one per znode that
changed (a created topic's, a moved partition's), not two per partition of
every topic: the kgo suite's hundreds of topic creations, each a complete
reading on every broker, made the readings and kazoo's work for them half of a
cluster node's CPU. Kafka's controller reads the same way: on a change of the
topics' list it reads the assignments of the new topics only, and a topic's
partition changes from that topic's znode (``KafkaController``'s
``processTopicChange`` and ``processPartitionModifications``, 3.9). The
memory holds no more than the watches do:

* a watch that fires forgets its znode, from kazoo's callback thread, before
  it asks for a reading; a read whose watch fired while it was under way is
  not remembered;
* a reading first waits until kazoo's callback thread has run every watch
  that came before it (a callback of its own, queued behind them): ZooKeeper
  sends a write's notifications before its answer, so after a write of this
  session (the controller's, or its ISR changes) the reading that follows
  reads the written znode again;
* a topic gone from the topics' list is forgotten with its partitions; a lost
  session, a change of the connection's state and the driver's safety-net
  reading forget everything (:meth:`ClusterReader.forget`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection, Iterable
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

#: How long a reading waits for kazoo's callback thread to run the watches queued
#: before it; past it, the reading forgets what it remembered and reads it all.
_WATCHES_RUN_S = 5.0
#: What a remembered znode holds when it does not exist (a state not yet written).
_ABSENT = object()


class ClusterReader:
    """Reads the cluster (see the module rules); what it holds is what it
    remembers of the znodes whose watches have not fired.

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
        self._lock = threading.Lock()
        #: znode path -> (its topic, what it held) for the znodes read whose
        #: watch has not fired since
        self._known: dict[str, tuple[str, Any]] = {}
        #: znode path -> how often its watch fired; with ``_era`` (how often all
        #: was forgotten), whether a read may be remembered
        self._fired: dict[str, int] = {}
        self._era = 0

    # -- what a reading remembers (see the module rules) -------------------------------------

    def forget(self) -> None:
        """Forget every znode remembered: the next reading reads them all (any thread)."""
        with self._lock:
            self._era += 1
            self._known.clear()
            self._fired.clear()

    def _forget(self, path: str) -> None:
        with self._lock:
            self._fired[path] = self._fired.get(path, 0) + 1
            self._known.pop(path, None)

    def _ticket(self, path: str) -> tuple[int, int]:
        """Taken before ``path`` is read: :meth:`_remember` keeps the read only if
        nothing was forgotten meanwhile."""
        with self._lock:
            return self._era, self._fired.get(path, 0)

    def _remember(self, path: str, topic: str, ticket: tuple[int, int], value: Any) -> None:
        with self._lock:
            if ticket == (self._era, self._fired.get(path, 0)):
                self._known[path] = (topic, value)

    def _recall(self, path: str) -> Any:
        """What ``path`` held when last read, or None when it must be read."""
        with self._lock:
            known = self._known.get(path)
        return None if known is None else known[1]

    def _keep_topics(self, names: Iterable[str]) -> None:
        """Forget the znodes of topics no longer listed."""
        alive = set(names)
        with self._lock:
            for path in [p for p, (topic, _) in self._known.items() if topic not in alive]:
                del self._known[path]

    def _run_watches(self) -> None:
        """Wait until kazoo's callback thread has run the watches queued so far (see
        the module rules); a stand-in without kazoo's handler has none to wait for."""
        handler = getattr(self.zk, "handler", None)
        if handler is None:
            return
        from kazoo.protocol.states import Callback

        ran = threading.Event()
        handler.dispatch_callback(Callback("watch", ran.set, ()))
        if not ran.wait(_WATCHES_RUN_S):
            log.warning("kazoo's watches did not run in time: reading every znode again")
            self.forget()

    # -- readings ------------------------------------------------------------------------------

    def read(self) -> ClusterImage:
        """One complete reading, watches set again (kazoo's calls: run in a thread)."""
        from kazoo.exceptions import NoNodeError

        self._run_watches()
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
        names = names_read.get()
        self._keep_topics(names)
        topics, configs = self._read_topics(names)
        states = self._read_partition_states(topics)
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

    def _read_topics(
        self, names: list[str]
    ) -> tuple[dict[str, TopicAssignment], dict[str, dict[str, str]]]:
        """The assignments and configs of the topics ``names``: those remembered as
        they are, the others read (watched)."""
        from kazoo.exceptions import NoNodeError

        zk = self.zk
        watch = self._on_topic_watch
        topics: dict[str, TopicAssignment] = {}
        configs: dict[str, dict[str, str]] = {}
        pending = {}
        config_reads = {}
        for name in names:
            path, config_path = topic_path(name), topic_config_path(name)
            known = self._recall(path)
            if known is not None:
                topics[name] = known
            else:
                pending[name] = (self._ticket(path), zk.get_async(path, watch=watch))
            known = self._recall(config_path)
            if known is not None:
                configs[name] = dict(known)
            else:
                ticket = self._ticket(config_path)
                config_reads[name] = (ticket, zk.get_async(config_path, watch=watch))
        for name, (ticket, result) in pending.items():
            try:
                topics[name] = decode_topic(name, result.get()[0])
            except NoNodeError:
                continue
            except ZkDataError as exc:
                log.warning("ignoring topic %r: %s", name, exc)
                continue
            self._remember(topic_path(name), name, ticket, topics[name])
        missing = []
        for name, (ticket, result) in config_reads.items():
            try:
                configs[name] = decode_topic_config(name, result.get()[0])
            except NoNodeError:
                configs[name] = {}
                missing.append(name)
                continue
            except ZkDataError:
                configs[name] = {}
                continue
            self._remember(topic_config_path(name), name, ticket, dict(configs[name]))
        for name in missing:
            configs[name] = self._read_missing_config(name)
        return topics, configs

    def _read_partition_states(
        self, topics: dict[str, TopicAssignment]
    ) -> dict[tuple[str, int], PartitionState]:
        """The state znodes of the partitions of ``topics``: those remembered as they
        are, the others read (watched; a missing one through ``exists``)."""
        from kazoo.exceptions import NoNodeError

        zk = self.zk
        watch = self._on_state_watch
        states: dict[tuple[str, int], PartitionState] = {}
        reads = {}
        for name, assignment in topics.items():
            for p in assignment.replicas:
                path = partition_state_path(name, p)
                known = self._recall(path)
                if known is _ABSENT:
                    continue
                if known is not None:
                    states[(name, p)] = known
                    continue
                reads[(name, p)] = (path, self._ticket(path), zk.get_async(path, watch=watch))
        got: dict[tuple[str, int], tuple[bytes, Any]] = {}
        absent = {}
        for key, (path, _, result) in reads.items():
            try:
                got[key] = result.get()
            except NoNodeError:
                # A read of a missing znode leaves no watch: ``exists`` sets one.
                absent[key] = zk.exists_async(path, watch=watch)
        late = {}
        for key, result in absent.items():
            path, ticket, _ = reads[key]
            if result.get() is None:
                self._remember(path, key[0], ticket, _ABSENT)
            else:  # created meanwhile
                late[key] = zk.get_async(path, watch=watch)
        for key, result in late.items():
            try:
                got[key] = result.get()
            except NoNodeError:
                continue
        for key, (data, stat) in got.items():
            path, ticket, _ = reads[key]
            try:
                states[key] = decode_partition_state(key[0], key[1], data, stat.version)
            except ZkDataError as exc:
                log.warning("ignoring a partition state: %s", exc)
                continue
            self._remember(path, key[0], ticket, states[key])
        return states

    def _read_missing_config(self, name: str) -> dict[str, str]:
        """A topic config znode that was missing: watched through ``exists`` (a read
        of a missing znode leaves no watch, and its creation would go unseen), and
        read when it came meanwhile."""
        from kazoo.exceptions import NoNodeError

        path = topic_config_path(name)
        watch = self._on_topic_watch
        while self.zk.exists(path, watch=watch) is not None:
            try:
                return decode_topic_config(name, self.zk.get(path, watch=watch)[0])
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
            reads[key] = (path, self._ticket(path), zk.get_async(path, watch=self._on_state_watch))
        states: dict[tuple[str, int], PartitionState] = {}
        for key, (path, ticket, result) in reads.items():
            try:
                data, stat = result.get()
                states[key] = decode_partition_state(key[0], key[1], data, stat.version)
            except NoNodeError:
                return None
            except ZkDataError as exc:
                log.warning("ignoring a partition state: %s", exc)
                continue
            self._remember(path, key[0], ticket, states[key])
        return states

    def _notify(self, *_: Any) -> None:
        self._changed()

    def _on_topic_watch(self, event: Any) -> None:
        """A topic's assignment or config znode changed (kazoo's thread): forget it,
        then ask for a complete reading."""
        path = getattr(event, "path", None)
        if isinstance(path, str):
            self._forget(path)
        else:
            self.forget()
        self._changed()

    def _on_state_watch(self, event: Any) -> None:
        """A partition state znode changed (kazoo's thread): forget it and note it
        for a targeted reading (see the module rules)."""
        path = getattr(event, "path", None)
        if not isinstance(path, str):
            self.forget()
            self._notify()
            return
        self._forget(path)
        self._state_changed(path)
