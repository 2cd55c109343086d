"""The cluster driver: ZooKeeper (through kazoo) and the replica fetchers around the
sans-IO broker core. What is decided lives in :mod:`.controller`,
:mod:`.replica_manager` and :mod:`.view`; this module only moves data.

Rules and invariants:

* Joining: the broker connects to ZooKeeper before it serves, checks that the
  cluster id in ZooKeeper is the one in its data directory (a data directory of
  another cluster is refused with :class:`ClusterSetupError`; a new cluster
  takes the data directory's id), and registers ``/brokers/ids/N`` as an
  ephemeral znode (a live broker of the same id is refused). Its session's
  end (a crash, ``kill -9``, a network split longer than the session timeout)
  removes the registration: that is how the controller learns a broker died.
* Reading: every watch that fires, and every 5 s in any case, makes one
  complete reading of the cluster's znodes (brokers, controller, topics,
  partition states, topic configs, pending deletions), with the watches set
  again, handed to the core as one :class:`~.view.ClusterImage`. Watch
  events that arrive during a reading cause one more reading after it.
* Controller: every broker tries to create the ephemeral ``/controller``; the
  one that does bumps ``/controller_epoch`` (a conditional write: of two
  brokers that think they won, one fails) and acts as controller until its
  session ends. It plans after every reading (:func:`~.controller.plan_leadership`)
  and writes each partition state in a ZooKeeper transaction that also checks
  the controller epoch znode's version: a controller that lost its office
  cannot write, and gives the office up when it sees that.
* Topic changes asked by requests (``ZkTask``) are written here; the request
  is answered when the cluster's reading shows their outcome (a created topic's
  partitions all have leaders) or its timeout passes.
* ZooKeeper unreachable: the broker keeps serving the partitions it leads with
  the last image (kazoo reconnects by itself); what needs ZooKeeper (topic
  changes, ISR changes, elections) waits or fails with a timeout. A session
  that expired meanwhile is replaced, and the broker registers again.
* Replica fetchers: one task per leader this broker follows partitions of,
  over one connection, speaking Kafka's Fetch (``replica_id`` set) and
  OffsetForLeaderEpoch. A follower first reconciles its log with the leader's
  (truncating to the end of the last epoch both share), then fetches from its
  log end, appends exactly the leader's batches, and takes the leader's high
  watermark. It only ever touches the core from the trio thread.
* Stopping closes the ZooKeeper session (the registration goes at once, so
  the controller moves leadership away without waiting for a timeout).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from trafka.codec.errors import ErrorCode

from ..broker import Broker
from ..clock import now_ms
from ..config import BrokerConfig
from ..errors import (
    BrokerError,
    ClusterSetupError,
    InvalidReplicaAssignmentError,
    InvalidReplicationFactorError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
    ZooKeeperUnavailableError,
)
from ..storage.node_meta import ClusterProducerIds
from ..storage.topics import check_topic_collision, new_topic_id, validate_topic_name
from ..transactions.marker_sender import MarkerSender
from .controller import (
    AssignmentError,
    StateWrite,
    assign_replicas,
    check_assignment,
    plan_leadership,
    plan_moves,
    plan_preferred,
    plan_reassignments,
    plan_unclean,
)
from .replica_fetcher import ReplicaFetcher
from .view import INTERNAL_TOPICS, TRANSACTION_STATE_TOPIC, ClusterImage, ZkTask
from .zk_layout import (
    ADMIN_DELETE_TOPICS,
    BROKER_IDS,
    BROKER_TOPICS,
    CLUSTER_ID,
    CONFIG_TOPICS,
    CONTROLLER,
    CONTROLLER_EPOCH,
    PREFERRED_REPLICA_ELECTION,
    PRODUCER_ID_BLOCK,
    BrokerRegistration,
    PartitionState,
    TopicAssignment,
    ZkDataError,
    broker_path,
    decode_broker,
    decode_cluster_id,
    decode_controller,
    decode_controller_epoch,
    decode_election,
    decode_partition_state,
    decode_producer_id_block,
    decode_topic,
    decode_topic_config,
    encode_broker,
    encode_cluster_id,
    encode_controller,
    encode_election,
    encode_partition_state,
    encode_producer_id_block,
    encode_topic,
    encode_topic_config,
    partition_state_path,
    topic_config_path,
    topic_path,
)

__all__ = ["ClusterDriver"]

log = logging.getLogger("trafka.brokerlite.cluster")

_REFRESH_EVERY_S = 5.0
_TICK_S = 0.5
_HW_CHECKPOINT_S = 5.0
_PRODUCER_ID_BLOCK_SIZE = 1000


class ClusterDriver:
    """Runs a broker as a member of a ZooKeeper-coordinated cluster (see the module rules).

    Args:
        broker: the broker core (``broker.cluster`` set: ``config.cluster_mode``).
        config: its settings.
        kick: called after the driver changed the core's state, so that the server
            delivers what became ready (parked requests) and re-plans its timers.
    """

    def __init__(self, broker: Broker, config: BrokerConfig, kick: Callable[[], None]) -> None:
        from kazoo.client import KazooClient

        assert broker.cluster is not None and config.zookeeper_connect is not None
        self.broker = broker
        self.view = broker.cluster
        self.config = config
        self.node_id = config.node_id
        self._kick = kick
        self._session_timeout_s = config.zookeeper_session_timeout_ms / 1000
        self.zk = KazooClient(
            hosts=config.zookeeper_connect,
            timeout=self._session_timeout_s,
            connection_retry={"max_tries": -1, "delay": 0.1, "max_delay": 1.0},
        )
        self._token: trio.lowlevel.TrioToken | None = None
        self._changed = trio.Event()
        self._image_event = trio.Event()
        self._tasks_event = trio.Event()
        self._session_lost = False
        self._controller_epoch = -1  # ours while we are the controller
        self._controller_epoch_version = -1
        self._fetchers: dict[int, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self._pid_next = 0
        self._pid_end = -1  # the producer id block handed to this broker (inclusive)
        self.view.on_task = self._on_task
        self._producer_ids = ClusterProducerIds(self._want_producer_ids)
        broker.use_cluster_producer_ids(self._producer_ids)

    # -- joining ----------------------------------------------------------------------------

    async def start(self) -> None:
        """Connect to ZooKeeper and register (before the broker serves).

        Raises:
            ClusterSetupError: ZooKeeper unreachable, another cluster's data
                directory, or the node id taken by a live broker.
        """
        self._token = trio.lowlevel.current_trio_token()
        await trio.to_thread.run_sync(self._join)
        self.zk.add_listener(self._on_state)

    def _join(self) -> None:
        from kazoo.exceptions import NodeExistsError

        timeout = (
            self.config.zookeeper_connection_timeout_ms or self.config.zookeeper_session_timeout_ms
        ) / 1000
        try:
            self.zk.start(timeout=timeout)
        except Exception as exc:
            self.zk.stop()
            self.zk.close()
            raise ClusterSetupError(
                f"cannot reach ZooKeeper at {self.config.zookeeper_connect} "
                f"within {timeout:g} s: {exc}"
            ) from None
        for path in (BROKER_IDS, BROKER_TOPICS, CONFIG_TOPICS, ADMIN_DELETE_TOPICS):
            self.zk.ensure_path(path)
        self._check_cluster_id()
        # A broker restarted within its session timeout finds its previous session's
        # registration still there: wait for that session to expire. A live broker
        # with the same id keeps its registration, and this one gives up.
        patience = time.monotonic() + self._session_timeout_s + 2.0
        waited = False
        while True:
            try:
                self._register()
                break
            except NodeExistsError:
                if time.monotonic() >= patience:
                    self.zk.stop()
                    self.zk.close()
                    raise ClusterSetupError(
                        f"broker id {self.node_id} is already registered in ZooKeeper by a "
                        f"live broker ({broker_path(self.node_id)}): give each broker its own "
                        "node.id"
                    ) from None
                if not waited:
                    waited = True
                    log.info(
                        "broker id %d is still registered (a previous run's session?): waiting "
                        "up to %g s for it to expire",
                        self.node_id,
                        self._session_timeout_s,
                    )
                time.sleep(0.2)
        self.view.zookeeper_connected = True
        self._producer_ids.add_block(*self._reserve_producer_ids())

    def _check_cluster_id(self) -> None:
        from kazoo.exceptions import NodeExistsError

        mine = self.broker.cluster_id
        try:
            self.zk.create(CLUSTER_ID, encode_cluster_id(mine), makepath=True)
            log.info("created cluster %s in ZooKeeper", mine)
            return
        except NodeExistsError:
            pass
        data, _ = self.zk.get(CLUSTER_ID)
        theirs = decode_cluster_id(data)
        if theirs != mine:
            if self._data_dir_is_new():
                self.broker.adopt_cluster_id(theirs)
                return
            self.zk.stop()
            self.zk.close()
            raise ClusterSetupError(
                f"the data directory {self.config.data_dir} belongs to cluster {mine}, but "
                f"ZooKeeper at {self.config.zookeeper_connect} holds cluster {theirs}: "
                "refusing to join (use this cluster's data directory, or a new one)"
            )

    def _data_dir_is_new(self) -> bool:
        return self.broker.fresh_data_dir and self.config.cluster_id is None

    def _register(self) -> None:
        host, port = self.broker.advertised
        registration = BrokerRegistration(
            self.node_id, host, port, self.config.security_protocol, None
        )
        self.zk.create(
            broker_path(self.node_id),
            encode_broker(registration, now_ms()),
            ephemeral=True,
            makepath=True,
        )
        log.info("broker %d registered in ZooKeeper as %s:%d", self.node_id, host, port)

    def _on_state(self, state: str) -> None:
        # kazoo's thread: only note it and wake the trio side.
        from kazoo.protocol.states import KazooState

        if self._closed:
            return
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session lost; the broker serves on with what it knows")
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended; reconnecting")
        self._notify()

    def _notify(self, *_: Any) -> None:
        """Something changed in ZooKeeper (any thread): read the cluster again."""
        token = self._token
        if token is None or self._closed:
            return
        try:
            token.run_sync_soon(self._changed.set)
        except trio.RunFinishedError:
            pass

    def _want_producer_ids(self) -> None:
        self.view.submit("producer_ids", quiet=True)

    def _on_task(self) -> None:
        self._tasks_event.set()

    # -- running ------------------------------------------------------------------------------

    async def run(self) -> None:
        """The driver's tasks; runs until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._reader)
            nursery.start_soon(self._ticker)
            nursery.start_soon(self._task_runner)
            nursery.start_soon(MarkerSender(self.broker, self._kick).run)
            self._changed.set()

    async def controlled_shutdown(self) -> None:
        """Move this broker's leadership away before it stops (Kafka's controlled
        shutdown, ``controlled.shutdown.enable``): it deregisters while it still
        serves, so the controller elects other leaders from the ISRs, and waits
        (at most ``controlled_shutdown_timeout_ms``) until no partition it leads
        has another live in-sync replica that could lead instead. Clients meet
        NOT_LEADER_OR_FOLLOWER (with the new leader, KIP-951) meanwhile, not a
        closed connection."""
        if not self.config.controlled_shutdown_enable or not self.zk.connected or self._closed:
            return
        from kazoo.exceptions import NoNodeError

        started = trio.current_time()
        try:
            await trio.to_thread.run_sync(self.zk.delete, broker_path(self.node_id))
        except NoNodeError:
            pass
        except Exception as exc:
            log.warning("controlled shutdown: cannot deregister: %s", exc)
            return
        self._changed.set()
        with trio.move_on_after(self.config.controlled_shutdown_timeout_ms / 1000):
            while self._still_leading():
                event = self._image_event
                with trio.move_on_after(0.5):
                    await event.wait()
        left = self._still_leading()
        log.info(
            "controlled shutdown of broker %d: leadership moved in %.2f s%s",
            self.node_id,
            trio.current_time() - started,
            f"; still leading {len(left)} partition(s) no other in-sync replica can take"
            if left
            else "",
        )

    def _still_leading(self) -> list[tuple[str, int]]:
        """Partitions this broker leads that another live in-sync replica could lead."""
        image = self.view.image
        me = self.node_id
        return [
            key
            for key, state in image.states.items()
            if state.leader == me and any(r != me and r in image.brokers for r in state.isr)
        ]

    def close(self) -> None:
        """Leave the cluster: end the ZooKeeper session (registration and controller
        office go at once)."""
        if self._closed:
            return
        self._closed = True
        try:
            self.zk.stop()
            self.zk.close()
        except Exception:
            log.exception("closing the ZooKeeper session failed")

    async def _reader(self) -> None:
        while True:
            with trio.move_on_after(_REFRESH_EVERY_S):
                await self._changed.wait()
            self._changed = trio.Event()
            if not self.zk.connected:
                self.view.zookeeper_connected = False
                continue
            try:
                image = await trio.to_thread.run_sync(self._read_and_act)
            except Exception as exc:
                log.warning("reading the cluster from ZooKeeper failed: %s", exc)
                await trio.sleep(0.2)
                self._changed.set()
                continue
            self.view.zookeeper_connected = True
            try:
                self.view.apply(image, now_ms())
            except Exception:
                log.exception("applying the cluster's metadata failed")
            self._sync_fetchers()
            self._kick()
            event, self._image_event = self._image_event, trio.Event()
            event.set()

    def _read_and_act(self) -> ClusterImage:
        """One reading (see the module rules); as controller, act on it and read again."""
        from kazoo.exceptions import NodeExistsError

        if self._session_lost and self.zk.connected:
            # A new session: the old one's ephemeral znodes are gone.
            self._session_lost = False
            self._controller_epoch = -1
            try:
                self._register()
            except NodeExistsError:
                pass
        image = self._read()
        if image.controller_id < 0:
            self._elect()
            image = self._read()
        elif image.controller_id != self.node_id and self._controller_epoch >= 0:
            log.info("broker %d is no longer the controller", self.node_id)
            self._controller_epoch = -1
        acting = image.controller_id == self.node_id and self._controller_epoch >= 0
        if acting and self._control(image):
            image = self._read()
        return image

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

    # -- the controller -------------------------------------------------------------------------

    def _elect(self) -> None:
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        try:
            self.zk.create(CONTROLLER, encode_controller(self.node_id, now_ms()), ephemeral=True)
        except NodeExistsError:
            return
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
        self._controller_epoch = epoch
        self._controller_epoch_version = stat.version
        log.info("broker %d is the controller (epoch %d)", self.node_id, epoch)

    def _control(self, image: ClusterImage) -> bool:
        """Plan and write what the cluster needs; True when something was written."""
        wrote = self._delete_topics(image)
        cfg = self.config
        writes = plan_leadership(
            image.topics,
            image.states,
            image.brokers.keys(),
            controller_epoch=self._controller_epoch,
            unclean=lambda t: self.view.unclean_election(t, cfg.unclean_leader_election_enable),
            skip=image.deleting,
        )
        if image.election is not None:
            writes += self._elections(image)
        busy = {(w.topic, w.partition) for w in writes}
        for write in writes:
            if self._write_state(write.topic, write.partition, write.state, write.expected_version):
                wrote = True
                log.info(
                    "controller: %s-%d leader %d epoch %d ISR %s (%s)",
                    write.topic,
                    write.partition,
                    write.state.leader,
                    write.state.leader_epoch,
                    list(write.state.isr),
                    write.reason,
                )
            if self._controller_epoch < 0:
                break
        if self._controller_epoch >= 0:
            wrote = self._complete_reassignments(image, busy) or wrote
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
            controller_epoch=self._controller_epoch,
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
        txn.check(CONTROLLER_EPOCH, self._controller_epoch_version)
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
                self._controller_epoch,
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
            controller_epoch=self._controller_epoch,
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

        self._controller_epoch = -1
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

    def _elect_preferred(self, partitions: set[tuple[str, int]] | None) -> None:
        if self._controller_epoch < 0:
            return
        image = self._read()
        for write in plan_preferred(
            image.topics,
            image.states,
            image.brokers.keys(),
            controller_epoch=self._controller_epoch,
            partitions=partitions,
        ):
            if self._write_state(write.topic, write.partition, write.state, write.expected_version):
                log.info("controller: %s-%d: %s", write.topic, write.partition, write.reason)

    # -- periodic work ---------------------------------------------------------------------------

    async def _ticker(self) -> None:
        next_rebalance = trio.current_time() + self.config.leader_imbalance_check_interval_seconds
        next_checkpoint = trio.current_time() + _HW_CHECKPOINT_S
        while True:
            await trio.sleep(_TICK_S)
            if trio.current_time() >= next_checkpoint:
                # Kafka's replica.high.watermark.checkpoint.interval.ms: a restarted
                # replica starts from about where its high watermark was.
                next_checkpoint = trio.current_time() + _HW_CHECKPOINT_S
                try:
                    self.broker.logs.checkpoint_high_watermarks()
                except Exception as exc:
                    log.warning("cannot checkpoint high watermarks: %s", exc)
            replicas = self.view.replicas
            replicas.tick(now_ms())
            writes = replicas.take_isr_writes()
            if writes and self.zk.connected:
                failed = await trio.to_thread.run_sync(self._write_isrs, writes)
                for w in failed:
                    replicas.isr_write_failed(w.topic, w.partition)
            elif writes:
                for w in writes:
                    replicas.isr_write_failed(w.topic, w.partition)
            if (
                self.config.auto_leader_rebalance_enable
                and self._controller_epoch >= 0
                and trio.current_time() >= next_rebalance
            ):
                next_rebalance = (
                    trio.current_time() + self.config.leader_imbalance_check_interval_seconds
                )
                await trio.to_thread.run_sync(self._elect_preferred, None)
            # A fetcher that ended (its leader had nothing left to serve) while
            # partitions still follow that leader starts again.
            self._sync_fetchers()

    def _write_isrs(self, writes: list[Any]) -> list[Any]:
        """A leader's ISR changes (conditional on the state's version); the failed ones."""
        from kazoo.exceptions import BadVersionError, NoNodeError

        failed = []
        for w in writes:
            try:
                self.zk.set(
                    partition_state_path(w.topic, w.partition),
                    encode_partition_state(w.state),
                    version=w.expected_version,
                )
                log.info(
                    "%s-%d: ISR now %s (%s)", w.topic, w.partition, list(w.state.isr), w.reason
                )
            except (BadVersionError, NoNodeError):
                failed.append(w)
            except Exception as exc:
                log.warning("%s-%d: ISR write failed: %s", w.topic, w.partition, exc)
                failed.append(w)
        return failed

    # -- topic changes asked by requests -----------------------------------------------------------

    async def _task_runner(self) -> None:
        while True:
            await self._tasks_event.wait()
            self._tasks_event = trio.Event()
            for task in self.view.take_tasks():
                if self._nursery is not None:
                    self._nursery.start_soon(self._carry_out, task)

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
                await self._wait_image(deadline, lambda: self._has_leaders(task.args["name"]))
            elif task.kind == "delete_topic":
                await trio.to_thread.run_sync(self._mark_deleted, task.args["name"])
                await self._wait_image(
                    deadline, lambda: task.args["name"] not in self.view.image.topics
                )
            elif task.kind == "create_partitions":
                await trio.to_thread.run_sync(self._create_partitions, task.args)
                if not task.args.get("validate_only"):
                    # The image has the topic's old partitions (with leaders) until
                    # it reads the new assignment: wait for the new count.
                    await self._wait_image(
                        deadline,
                        lambda: self._has_leaders(task.args["name"], task.args["total"]),
                    )
            elif task.kind == "set_topic_config":
                name, configs = task.args["name"], task.args["configs"]
                await trio.to_thread.run_sync(self._set_topic_config, name, configs)
                await self._wait_image(
                    deadline, lambda: dict(self.view.image.configs.get(name, {})) == configs
                )
            elif task.kind == "reassign":
                await trio.to_thread.run_sync(self._reassign, task.args)
            elif task.kind == "elect_leaders":
                await self._ask_election(task, deadline)
            elif task.kind == "producer_ids":
                block = await trio.to_thread.run_sync(self._reserve_producer_ids)
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
        self._changed.set()
        await self._wait_image(
            deadline,
            lambda: (
                self.view.image.election is None and not self._still_asked(task.args["partitions"])
            ),
        )

    def _still_asked(self, partitions: list[tuple[str, int]]) -> bool:
        """Whether the latest image may predate the controller's election: a partition
        named whose preferred replica is live and in the ISR but does not lead."""
        view = self.view
        for topic, partition in partitions:
            replicas = view.replicas_of(topic, partition)
            state = view.state(topic, partition)
            if not replicas or state is None:
                continue
            preferred = replicas[0]
            if (
                preferred in view.image.brokers
                and preferred in state.isr
                and state.leader != preferred
            ):
                return True
        return False

    async def _wait_image(self, deadline: float, done: Callable[[], bool]) -> None:
        self._changed.set()
        while not done():
            event = self._image_event
            with trio.move_on_at(deadline):
                await event.wait()
            if trio.current_time() >= deadline and not done():
                return  # answered as it stands (Kafka's CreateTopics does the same)

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
            raise TopicExistsError(f"topic {name!r} already exists")
        check_topic_collision(name, self.zk.get_children(BROKER_TOPICS))
        if args.get("validate_only"):
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
            raise TopicExistsError(f"topic {name!r} already exists")
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
        from kazoo.exceptions import BadVersionError

        name: str = args["name"]
        total: int = args["total"]
        data, stat = self.zk.get(topic_path(name))
        current = decode_topic(name, data)
        live = sorted(self.view.image.brokers)
        factor = len(current.replicas[0])
        explicit = args.get("assignments")
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

    # -- producer ids ---------------------------------------------------------------------------

    def _reserve_producer_ids(self) -> tuple[int, int]:
        """Take the next block of producer ids from ZooKeeper (unique cluster-wide)."""
        from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

        while True:
            try:
                data, stat = self.zk.get(PRODUCER_ID_BLOCK)
                _, end = decode_producer_id_block(data)
                start = end + 1
                self.zk.set(
                    PRODUCER_ID_BLOCK,
                    encode_producer_id_block(
                        self.node_id, start, start + _PRODUCER_ID_BLOCK_SIZE - 1
                    ),
                    version=stat.version,
                )
            except NoNodeError:
                start = 0
                try:
                    self.zk.create(
                        PRODUCER_ID_BLOCK,
                        encode_producer_id_block(self.node_id, 0, _PRODUCER_ID_BLOCK_SIZE - 1),
                    )
                except NodeExistsError:
                    continue
            except BadVersionError:
                continue
            return start, start + _PRODUCER_ID_BLOCK_SIZE - 1

    # -- replica fetchers -------------------------------------------------------------------------

    def _sync_fetchers(self) -> None:
        nursery = self._nursery
        if nursery is None:
            return
        for leader in {f.leader for f in self.view.replicas.follower_fetches()}:
            if leader not in self._fetchers:
                scope = trio.CancelScope()
                self._fetchers[leader] = scope
                nursery.start_soon(self._fetch_from, leader, scope)

    async def _fetch_from(self, leader: int, scope: trio.CancelScope) -> None:
        try:
            with scope:
                await ReplicaFetcher(self.broker, leader).run()
        finally:
            if self._fetchers.get(leader) is scope:
                del self._fetchers[leader]
