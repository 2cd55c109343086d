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
* Reading: every watch that fires makes one complete reading of the
  cluster's znodes (brokers, controller, topics, partition states, topic
  configs, pending deletions), with the watches set again, handed to the core
  as one :class:`~.view.ClusterImage`. Watch events that arrive during a
  reading cause one more reading after it. Every znode a reading reads is
  watched (a missing one through ``exists``), and ZooKeeper delivers each
  watch once, in order, within a session; a lost session is answered with a
  complete reading. A reading reads again only the znodes whose watches fired
  (and new ones): it remembers the others (``reading.py``). So nothing waits
  for a periodic reading: Kafka's ZooKeeper-era brokers never re-read
  ZooKeeper by themselves. A complete
  reading every 60 s when nothing else asked for one is kept only as a safety
  net (each costs a few ZooKeeper requests per partition: at 5 s, as it was,
  it was most of an idle node's CPU). When
  only partition state znodes changed (an election, an ISR change), that
  reading is a targeted one: just those znodes, patched into the last image
  where newer (``reading.py``), so that a new leader learns its role from one
  znode read, not from a complete reading.
* Controller: every broker tries to create the ephemeral ``/controller``; the
  one that does bumps ``/controller_epoch`` (a conditional write: of two
  brokers that think they won, one fails) and acts as controller until its
  session ends. It plans after every reading (:func:`~.controller.plan_leadership`),
  and after its own writes reads and plans again until nothing is left to
  write (``Controller.settle``), and writes each partition state in a ZooKeeper transaction that also checks
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

The package: this module joins, runs the tasks (reader, ticker, task runner,
replica fetchers) and stops. Its duties are objects it owns, built with the
ZooKeeper session and what each needs (the cluster view, the stores it
writes, the driver's callbacks), each keeping its own state:
``reading.py`` (:class:`ClusterReader`, one reading of the cluster: no state
of its own, the watches call back), ``controller_duties.py``
(:class:`Controller`: the office, its epoch and fenced writes),
``topic_tasks.py`` (:class:`TopicTasks`: the changes requests ask for, which
wait on this module's readings). The cluster's other metadata, kept in
ZooKeeper and followed by every broker, has its syncs (``metadata_sync.py``): the ACLs
(``acl_sync.py``), the entities' configs (``config_sync.py``: SCRAM
credentials, client quotas, dynamic broker configs and share groups'
configs) and the delegation tokens (``token_sync.py``); each is built with the
ZooKeeper session and the store(s) it writes, and purges its change
notifications after 15 minutes, as Kafka's. kazoo is reached from this
package alone.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from typing import Any

import trio

from ...broker import Broker
from ...clock import now_ms
from ...config import BrokerConfig
from ...errors import (
    ClusterSetupError,
)
from ...storage.node_meta import ClusterProducerIds
from ...transactions.marker_sender import MarkerSender
from ..replica_fetcher import ReplicaFetcher
from ..view import ClusterImage
from ..zk_layout import (
    CLUSTER_ID,
    PERSISTENT_PATHS,
    BrokerRegistration,
    broker_path,
    decode_cluster_id,
    encode_broker,
    encode_cluster_id,
    encode_partition_state,
    partition_state_path,
)
from .acl_sync import AclSync
from .config_sync import ConfigSync
from .controller_duties import Controller
from .dead_letters import DeadLetterSender
from .reading import ClusterReader
from .share_state import ShareStateSender
from .token_sync import TokenSync
from .topic_tasks import TopicTasks, reserve_producer_ids
from .txn_verify import VerificationSender

__all__ = ["ClusterDriver"]

log = logging.getLogger("trafka.brokerlite.cluster")

#: The safety net's complete reading when no watch asked for one (see the module rules).
_SAFETY_READING_S = 60.0
_TICK_S = 0.5
_HW_CHECKPOINT_S = 5.0


class ClusterDriver:
    """Runs a broker as a member of a ZooKeeper-coordinated cluster (see the module rules).

    Args:
        broker: the broker core (``broker.cluster`` set: ``config.cluster_mode``).
        config: its settings.
        kick: called after the driver changed the core's state, so that the server
            delivers what became ready (parked requests) and re-plans its timers.

    Its own state is the session's life (joined, lost, closed), the reading
    cycle (what is due, the partition states noted, the event each reading
    sets) and the replica fetchers; its duties are the objects it owns (see
    "The package" in the module docstring).
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
        self._full_due = True
        self._dirty_states: set[str] = set()
        #: set after every reading handed to the core
        self._image_event = trio.Event()
        self._session_lost = False
        self._fetchers: dict[int, trio.CancelScope] = {}
        self._nursery: trio.Nursery | None = None
        self._closed = False
        self._zk_reader = ClusterReader(self.zk, self._notify, self._note_state)
        self._controller = Controller(self.zk, config, self._zk_reader.read)
        self._producer_ids = ClusterProducerIds(self._want_producer_ids)
        broker.use_cluster_producer_ids(self._producer_ids)
        handles = (self.zk, self._run_soon, kick, self._notification_clock)
        self._acls = AclSync(*handles, authorizer=broker.authorizer)
        self._configs = ConfigSync(
            *handles,
            node_id=self.node_id,
            scram=broker.scram,
            quotas=broker.quotas,
            replication_quotas=self.view.replication_quotas,
            group_configs=broker.share_groups.configs,
            features=broker.features,
        )
        self._tokens = TokenSync(*handles, tokens=broker.tokens)
        self._tasks = TopicTasks(
            self.zk,
            self.view,
            config,
            kick,
            self._want_reading,
            self._wait_image,
            producer_ids=self._producer_ids,
            acls=self._acls,
            configs=self._configs,
            tokens=self._tokens,
        )
        self.view.on_task = self._tasks.on_task

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
        # The cluster's SCRAM credentials, tokens and ACLs before the first request
        # (see metadata_sync.py).
        for sync in self._syncs():
            await trio.to_thread.run_sync(sync.watch)
            await sync.load()

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
        for path in PERSISTENT_PATHS:
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
        self._producer_ids.add_block(*reserve_producer_ids(self.zk, self.node_id))

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
        # Watches may have been lost or fired unseen: the next reading reads every znode.
        self._zk_reader.forget()
        if state == KazooState.LOST:
            self._session_lost = True
            log.warning("ZooKeeper session lost; the broker serves on with what it knows")
        elif state == KazooState.SUSPENDED:
            log.warning("ZooKeeper connection suspended; reconnecting")
        self._notify()

    def _syncs(self) -> list[AclSync | ConfigSync | TokenSync]:
        """The metadata syncs this broker follows (the ACLs only with an authorizer)."""
        syncs: list[AclSync | ConfigSync | TokenSync] = [self._configs, self._tokens]
        if self.broker.authorizer is not None:
            syncs.append(self._acls)
        return syncs

    def _notification_clock(self) -> int:
        """The time change notifications' ages are judged against (tests replace it)."""
        return now_ms()

    def _want_producer_ids(self) -> None:
        self.view.submit("producer_ids", quiet=True)

    def _run_soon(self, fn: Callable[[], None]) -> None:
        """Run ``fn`` in the trio thread, from any thread (kazoo's watches fire in
        kazoo's thread, which must not touch trio's state)."""
        token = self._token
        if token is None or self._closed:
            return
        try:
            token.run_sync_soon(fn)
        except trio.RunFinishedError:
            pass

    def _notify(self) -> None:
        """Something changed in ZooKeeper (any thread): read the cluster again."""
        self._run_soon(self._want_reading)

    def _note_state(self, path: str) -> None:
        """A partition state znode changed (any thread): note it for a targeted
        reading (reading.py)."""

        def note() -> None:
            self._dirty_states.add(path)
            self._changed.set()

        self._run_soon(note)

    def _want_reading(self) -> None:
        """A complete reading is due (trio thread)."""
        self._full_due = True
        self._changed.set()

    async def _wait_image(self, deadline: float, done: Callable[[], bool]) -> bool:
        """Ask for a reading, then wait until the readings show ``done()`` or the
        deadline (trio's clock) passes; whether they showed it."""
        self._want_reading()
        while not done():
            event = self._image_event
            with trio.move_on_at(deadline):
                await event.wait()
            if trio.current_time() >= deadline and not done():
                return False
        return True

    # -- running ------------------------------------------------------------------------------

    async def run(self) -> None:
        """The driver's tasks; runs until cancelled."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._reader)
            nursery.start_soon(self._ticker)
            nursery.start_soon(self._tasks.run)
            for sync in self._syncs():
                nursery.start_soon(sync.follow)
            nursery.start_soon(MarkerSender(self.broker, self._kick).run)
            nursery.start_soon(VerificationSender(self.broker, self._kick).run)
            nursery.start_soon(ShareStateSender(self.broker, self._kick).run)
            outbox = self.broker.dead_letter_outbox
            if outbox is not None:
                nursery.start_soon(DeadLetterSender(self.broker, outbox, self._kick).run)
            self._want_reading()

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
        self._want_reading()
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
            with trio.move_on_after(_SAFETY_READING_S) as timer:
                await self._changed.wait()
            self._changed = trio.Event()
            if not self.zk.connected:
                self.view.zookeeper_connected = False
                self._full_due = True
                continue
            # A targeted reading when only partition states changed (reading.py).
            paths, self._dirty_states = self._dirty_states, set()
            full = self._full_due or timer.cancelled_caught or not paths or self._session_lost
            if timer.cancelled_caught or self._session_lost:
                self._zk_reader.forget()  # the safety net reads every znode (reading.py)
            self._full_due = False
            started = time.monotonic()
            try:
                if full:
                    image = await trio.to_thread.run_sync(self._read_and_act)
                else:
                    image = await trio.to_thread.run_sync(
                        self._read_states_and_act, self.view.image, paths
                    )
            except Exception as exc:
                log.warning("reading the cluster from ZooKeeper failed: %s", exc)
                await trio.sleep(0.2)
                self._want_reading()
                continue
            log.debug(
                "%s reading took %.3f s (done at monotonic %.3f)",
                "a complete" if full else f"a targeted ({len(paths)} znode(s))",
                time.monotonic() - started,
                time.monotonic(),
            )
            self.view.zookeeper_connected = True
            if image is self.view.image:
                # A targeted reading that brought nothing newer.
                event, self._image_event = self._image_event, trio.Event()
                event.set()
                continue
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
            self._controller.step_down()
            try:
                self._register()
            except NodeExistsError:
                pass
        image = self._zk_reader.read()
        if image.controller_id < 0:
            if self._controller.elect():
                # Won: the reading just made is the cluster this controller starts
                # from (its writes are fenced by the epoch and the states' versions),
                # so it acts at once instead of reading everything again.
                image = dataclasses.replace(
                    image, controller_id=self.node_id, controller_epoch=self._controller.epoch
                )
            else:
                image = self._zk_reader.read()
        elif image.controller_id != self.node_id and self._controller.acting:
            log.info("broker %d is no longer the controller", self.node_id)
            self._controller.step_down()
        if image.controller_id == self.node_id and self._controller.acting:
            image = self._control(image)
        return image

    def _control(self, image: ClusterImage) -> ClusterImage:
        """As controller, act on ``image`` until nothing is left to write
        (:meth:`Controller.settle`); the last reading."""
        image, settled = self._controller.settle(image)
        if not settled:
            self._notify()
        return image

    def _read_states_and_act(self, base: ClusterImage, paths: set[str]) -> ClusterImage:
        """A targeted reading (reading.py) patched into ``base``; as controller, act on
        it. Falls back to a complete reading when a znode is gone."""
        states = self._zk_reader.read_states(paths)
        if states is None:
            return self._read_and_act()
        image, taken = base.with_states(states)
        if taken and image.controller_id == self.node_id and self._controller.acting:
            image = self._control(image)
        return image

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
                and self._controller.acting
                and trio.current_time() >= next_rebalance
            ):
                next_rebalance = (
                    trio.current_time() + self.config.leader_imbalance_check_interval_seconds
                )
                await trio.to_thread.run_sync(self._controller.elect_preferred, None)
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

    # -- replica fetchers -------------------------------------------------------------------------

    def _sync_fetchers(self) -> None:
        nursery = self._nursery
        if nursery is None:
            return
        for leader in self.view.replicas.followed_leaders():
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
