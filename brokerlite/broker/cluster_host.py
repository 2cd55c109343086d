"""The broker in a cluster: what the cluster's parts call back into the core for.

Rules: a coordinator's state batches go to this broker's partition of an
internal topic (``__consumer_offsets``, ``__transaction_state``,
``__share_group_state``) through the producer states, like any write, and count
as appended for the replicas; a change of leadership answers the requests
parked on the partition at once and loads or drops the groups, transactions or
share-partition states it coordinates; a replica moved away keeps its log,
empty.

:class:`ClusterHost` keeps no state of its own: it is the callbacks the cluster
side is handed (the replica manager, the replicated stores, the share
persister and offsets admin), reading and changing the parts of the broker
that :class:`HostedCore` names, rather than the broker itself.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Iterable
from typing import TYPE_CHECKING, Protocol

from trafka.codec.errors import ErrorCode
from trafka.codec.records import blob_next_offset

from ..cluster.controller import coordinator_partition
from ..cluster.view import OFFSETS_TOPIC, SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC
from ..errors import BrokerError, OffsetStoreError
from ..groups.replicated_offsets import ReplicatedOffsetStore
from ..handlers.k01_fetch import HIGH_WATERMARK_WAKES, PARTITION_CHANGED_WAKES
from ..shares.coordinator import ShareCoordinatorError
from ..shares.offsets_port import ADMIN_WATCH
from ..shares.persister import SETTLED_WATCH

if TYPE_CHECKING:
    from ..cluster.view import ClusterView
    from ..groups.coordinator import GroupCoordinator
    from ..groups.share_groups import ShareGroups
    from ..purgatory import Purgatory
    from ..shares.coordinator import ShareCoordinator
    from ..shares.fetcher import ShareFetcher
    from ..storage.log_manager import LogManager
    from ..storage.partition import PartitionLog
    from ..transactions.cluster_mode import ClusterTransactions
    from ..transactions.eos import ProducerStates, TxnVerifier

__all__ = ["ClusterHost", "HostedCore"]

log = logging.getLogger("trafka.brokerlite")


class HostedCore(Protocol):
    """The parts of the broker :class:`ClusterHost` reads and changes
    (:class:`~trafka.brokerlite.broker.Broker` is one). They are read when a
    callback runs, not when the host is built: the broker builds its host
    before the parts whose stores call it."""

    @property
    def node_id(self) -> int: ...

    @property
    def now_ms(self) -> int: ...

    @property
    def cluster(self) -> ClusterView | None: ...

    @property
    def logs(self) -> LogManager: ...

    @property
    def producers(self) -> ProducerStates: ...

    @property
    def verify_transactional(self) -> TxnVerifier: ...

    @property
    def purgatory(self) -> Purgatory: ...

    @property
    def groups(self) -> GroupCoordinator: ...

    @property
    def share_groups(self) -> ShareGroups: ...

    @property
    def shares(self) -> ShareFetcher: ...

    @property
    def share_coordinator(self) -> ShareCoordinator | None: ...

    @property
    def cluster_txn(self) -> ClusterTransactions | None: ...


class ClusterHost:
    """The cluster-mode glue (``Broker.cluster_host``; see the module rules).

    Args:
        core: the broker's parts it works on.
    """

    def __init__(self, core: HostedCore) -> None:
        self._core = core

    def offsets_partition(self, group: str) -> int | None:
        """The ``__consumer_offsets`` partition of a group, None without a cluster."""
        return self._coordinator_partition(OFFSETS_TOPIC, group)

    def share_state_partition(self, key: str) -> int | None:
        """The ``__share_group_state`` partition of a share coordinator key."""
        return self._coordinator_partition(SHARE_STATE_TOPIC, key)

    def _coordinator_partition(self, topic: str, key: str) -> int | None:
        cluster = self._core.cluster
        assignment = None if cluster is None else cluster.image.topics.get(topic)
        if assignment is None:
            return None
        return coordinator_partition(key, assignment.num_partitions)

    def led_epoch(self, topic: str, partition: int) -> int | None:
        """The leader epoch of a partition this broker leads, else None."""
        cluster = self._core.cluster
        replica = None if cluster is None else cluster.replicas.replica(topic, partition)
        if replica is None or replica.leader != self._core.node_id:
            return None
        return replica.leader_epoch

    def leads_here(self, topic: str, partition: int) -> bool:
        """True when this broker leads the partition."""
        return self.led_epoch(topic, partition) is not None

    def topic_info(self, topic: str) -> tuple[str, int] | None:
        """A topic's id (text) and partition count in the cluster, None if unknown."""
        cluster = self._core.cluster
        assignment = None if cluster is None else cluster.image.topics.get(topic)
        if assignment is None:
            return None
        return str(assignment.topic_id), assignment.num_partitions

    def partition_bounds(self, topic: str, partition: int) -> tuple[int, int, int] | None:
        """A partition's log start, log end and high watermark where it has a
        replica here, else None."""
        try:
            plog = self._core.logs.partition(topic, partition)
        except BrokerError:
            return None
        return int(plog.log_start_offset), int(plog.log_end_offset), int(plog.high_watermark)

    def share_admin_done(self) -> None:
        """A share-group offsets admin job is done: wake the requests waiting."""
        self._core.purgatory.notify_append(*ADMIN_WATCH, 0)

    def share_writes_settled(self) -> None:
        """Share-state writes reached their coordinators: wake the requests waiting."""
        self._core.purgatory.notify_append(*SETTLED_WATCH, 0)

    def offsets_store(self) -> ReplicatedOffsetStore:
        """The group coordinator's store: its groups in ``__consumer_offsets``."""
        return ReplicatedOffsetStore(
            partition_for=self.offsets_partition,
            append=functools.partial(self.append_internal, OFFSETS_TOPIC),
            read=functools.partial(self.read_partition, OFFSETS_TOPIC),
            now_ms=lambda: self._core.now_ms,
            high_watermark=lambda p: self._position(OFFSETS_TOPIC, p).high_watermark,
            log_end=lambda p: self._position(OFFSETS_TOPIC, p).log_end_offset,
        )

    def _position(self, topic: str, partition: int) -> PartitionLog:
        return self._core.logs.partition(topic, partition)

    def append_internal(self, topic: str, partition: int, batch: bytes) -> None:
        """Append a coordinator's state batch to an internal topic's partition here
        (its leader): ``__consumer_offsets``, ``__transaction_state`` or
        ``__share_group_state``."""
        core = self._core
        assert core.cluster is not None
        result = core.producers.produce(
            topic,
            partition,
            batch,
            transactional_id=None,
            verify=core.verify_transactional,
            now_ms=core.now_ms,
        )
        if result.error is not ErrorCode.NONE:
            raise OffsetStoreError(result.message or result.error.name)
        core.purgatory.notify_append(topic, partition, len(batch))
        core.cluster.replicas.appended(topic, partition)

    def read_partition(self, topic: str, partition: int) -> Iterable[bytes]:
        """A partition's whole log here, in chunks (a coordinator replaying its state)."""
        plog = self._core.logs.partition(topic, partition)
        offset, end = plog.log_start_offset, plog.log_end_offset
        while offset < end:
            read = plog.read(offset, 1 << 20)
            if not read.size:
                return
            data = read.tobytes()
            yield data
            nxt = blob_next_offset(data)
            if nxt is None or nxt <= offset:
                return
            offset = nxt

    def leadership_changed(self, topic: str, partition: int, leads: bool, now_ms: int) -> None:
        """This broker started or stopped leading a partition. Requests parked on it
        (acks=all produces, fetches) are answered now, not at their timeouts; as the
        coordinator of the groups a ``__consumer_offsets`` partition holds, load or
        drop them."""
        core = self._core
        if not leads:
            self.wake_parked(topic, partition)
        if topic == SHARE_STATE_TOPIC and core.share_coordinator is not None:
            self._share_coordinator_moved(core.share_coordinator, partition, leads)
            return
        # A share-partition leader is its data partition's leader.
        core.shares.leadership_changed(topic, partition, leads)
        if topic == TRANSACTION_STATE_TOPIC and core.cluster_txn is not None:
            core.cluster_txn.leadership_changed(partition, leads)
            return
        store = core.groups.store
        if topic != OFFSETS_TOPIC or not isinstance(store, ReplicatedOffsetStore):
            return
        if leads:
            try:
                loaded = store.load_partition(partition)
            except OffsetStoreError:
                log.exception("cannot load the groups of %s-%d", topic, partition)
                return
            core.groups.load_groups(loaded, now_ms)
            core.share_groups.load_groups(store.share_group_snapshots(loaded), now_ms)
            if loaded:
                log.info("coordinating %d group(s) of %s-%d", len(loaded), topic, partition)
        else:
            gone = store.unload_partition(partition)
            core.groups.unload_groups(gone)
            core.share_groups.unload_groups(gone)

    @staticmethod
    def _share_coordinator_moved(
        coordinator: ShareCoordinator, partition: int, leads: bool
    ) -> None:
        """As the share coordinator of a ``__share_group_state`` partition, load
        or drop the share-partition states it holds."""
        if not leads:
            coordinator.unload_partition(partition)
            return
        try:
            count = coordinator.load_partition(partition)
        except ShareCoordinatorError:
            log.exception("cannot load the share states of %s-%d", SHARE_STATE_TOPIC, partition)
            return
        if count:
            log.info(
                "coordinating %d share-partition(s) of %s-%d", count, SHARE_STATE_TOPIC, partition
            )

    def replica_removed(self, topic: str, partition: int) -> None:
        """A reassignment moved this partition away: forget its producers here (the
        cluster view deletes its log next, :meth:`ClusterView.apply`)."""
        self._core.producers.forget(topic, partition)
        log.info("%s-%d: replica moved away", topic, partition)

    def wake_parked(self, topic: str, partition: int) -> None:
        """Wake every request parked on a partition (its leadership was lost, its log
        is back online): fetches, followers' too, and acks=all produces read afresh."""
        self._wake_watchers(topic, partition, PARTITION_CHANGED_WAKES)

    def high_watermark_moved(self, topic: str, partition: int) -> None:
        """A partition's high watermark moved: consumers' long polls and acks=all
        produces read afresh (followers' fetches wait for records)."""
        self._wake_watchers(topic, partition, HIGH_WATERMARK_WAKES)

    def _wake_watchers(self, topic: str, partition: int, wakes: int) -> None:
        core = self._core
        core.purgatory.notify_append(topic, partition, wakes)
        # Decided transactions whose decision this replicated send their markers.
        if topic == TRANSACTION_STATE_TOPIC and core.cluster_txn is not None:
            core.cluster_txn.on_ready()
