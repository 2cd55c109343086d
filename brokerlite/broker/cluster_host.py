"""The broker in a cluster: what the cluster's parts call back into the core for.

Rules: a coordinator's state batches go to this broker's partition of an
internal topic (``__consumer_offsets``, ``__transaction_state``) through the
producer states, like any write, and count as appended for the replicas; a
change of leadership answers the requests parked on the partition at once and
loads or drops the groups or transactions it coordinates; a replica moved away
keeps its log, empty. On one node, ``min.insync.replicas`` is checked against
an ISR of this broker alone.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

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
from ..storage.node_meta import (
    ClusterProducerIds,
    write_meta,
)
from .base import BrokerParts

__all__ = ["ClusterHost"]

log = logging.getLogger("trafka.brokerlite")


class ClusterHost(BrokerParts):
    """The cluster-mode glue (a mixin of :class:`Broker`)."""

    def _min_insync_replicas(self, topic: str) -> int:
        """A topic's ``min.insync.replicas``: its override, else the broker's default."""
        if self.cluster is not None:
            return self.cluster.min_insync_replicas(topic, self.config.min_insync_replicas)
        info = self.logs.topic(topic)
        text = None if info is None else info.configs.get("min.insync.replicas")
        return self.config.min_insync_replicas if text is None else int(text)

    def check_min_isr(self, topic: str, partition: int) -> ErrorCode:
        """NOT_ENOUGH_REPLICAS when an ``acks=all`` produce to a partition led here
        must be refused before the append (fewer in-sync replicas than the topic's
        ``min.insync.replicas``), NONE otherwise."""
        if self.cluster is not None:
            return self.cluster.replicas.check_min_isr(topic, partition)
        # One node: every partition's ISR is this broker alone.
        if self._min_insync_replicas(topic) > 1:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def _offsets_partition(self, group: str) -> int | None:
        cluster = self.cluster
        if cluster is None:
            return None
        assignment = cluster.image.topics.get(OFFSETS_TOPIC)
        if assignment is None:
            return None
        return coordinator_partition(group, assignment.num_partitions)

    def _share_state_partition(self, key: str) -> int | None:
        """The ``__share_group_state`` partition of a share coordinator key."""
        cluster = self.cluster
        assignment = None if cluster is None else cluster.image.topics.get(SHARE_STATE_TOPIC)
        if assignment is None:
            return None
        return coordinator_partition(key, assignment.num_partitions)

    def _led_epoch(self, topic: str, partition: int) -> int | None:
        """The leader epoch of a partition this broker leads, else None."""
        replica = None if self.cluster is None else self.cluster.replicas.replica(topic, partition)
        if replica is None or replica.leader != self.node_id:
            return None
        return replica.leader_epoch

    def _leads_here(self, topic: str, partition: int) -> bool:
        return self._led_epoch(topic, partition) is not None

    def _topic_info(self, topic: str) -> tuple[str, int] | None:
        """A topic's id (text) and partition count in the cluster, None if unknown."""
        assignment = None if self.cluster is None else self.cluster.image.topics.get(topic)
        if assignment is None:
            return None
        return str(assignment.topic_id), assignment.num_partitions

    def _partition_bounds(self, topic: str, partition: int) -> tuple[int, int, int] | None:
        """A partition's log start, log end and high watermark where it has a
        replica here, else None."""
        try:
            plog = self.logs.partition(topic, partition)
        except BrokerError:
            return None
        return int(plog.log_start_offset), int(plog.log_end_offset), int(plog.high_watermark)

    def _share_admin_done(self) -> None:
        """A share-group offsets admin job is done: wake the requests waiting."""
        self.purgatory.notify_append(*ADMIN_WATCH, 0)

    def _share_writes_settled(self) -> None:
        """Share-state writes reached their coordinators: wake the requests waiting."""
        self.purgatory.notify_append(*SETTLED_WATCH, 0)

    def _append_internal(self, topic: str, partition: int, batch: bytes) -> None:
        """Append a coordinator's state batch to an internal topic's partition here
        (its leader): ``__consumer_offsets`` or ``__transaction_state``."""
        assert self.cluster is not None
        result = self.producers.produce(
            topic,
            partition,
            batch,
            transactional_id=None,
            verify=self.verify_transactional,
            now_ms=self._now_ms,
        )
        if result.error is not ErrorCode.NONE:
            raise OffsetStoreError(result.message or result.error.name)
        self.notify_append(topic, partition, len(batch))
        self.cluster.replicas.appended(topic, partition)

    def _read_partition(self, topic: str, partition: int) -> Iterable[bytes]:
        """A partition's whole log here, in chunks (a coordinator replaying its state)."""
        plog = self.logs.partition(topic, partition)
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

    def _leadership_changed(self, topic: str, partition: int, leads: bool, now_ms: int) -> None:
        """This broker started or stopped leading a partition. Requests parked on it
        (acks=all produces, fetches) are answered now, not at their timeouts; as the
        coordinator of the groups a ``__consumer_offsets`` partition holds, load or
        drop them."""
        if not leads:
            self._wake_parked(topic, partition)
        if topic == SHARE_STATE_TOPIC and self.share_coordinator is not None:
            self._share_coordinator_moved(partition, leads)
            return
        # A share-partition leader is its data partition's leader.
        self.shares.leadership_changed(topic, partition, leads)
        if topic == TRANSACTION_STATE_TOPIC and self.cluster_txn is not None:
            self.cluster_txn.leadership_changed(partition, leads)
            return
        store = self.groups.store
        if topic != OFFSETS_TOPIC or not isinstance(store, ReplicatedOffsetStore):
            return
        if leads:
            try:
                loaded = store.load_partition(partition)
            except OffsetStoreError:
                log.exception("cannot load the groups of %s-%d", topic, partition)
                return
            self.groups.load_groups(loaded, now_ms)
            self.share_groups.load_groups(store.share_group_snapshots(loaded), now_ms)
            if loaded:
                log.info("coordinating %d group(s) of %s-%d", len(loaded), topic, partition)
        else:
            gone = store.unload_partition(partition)
            self.groups.unload_groups(gone)
            self.share_groups.unload_groups(gone)

    def _share_coordinator_moved(self, partition: int, leads: bool) -> None:
        """As the share coordinator of a ``__share_group_state`` partition, load
        or drop the share-partition states it holds."""
        coordinator = self.share_coordinator
        assert coordinator is not None
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

    def _replica_removed(self, topic: str, partition: int) -> None:
        """A reassignment moved this partition away: forget its producers here (the
        cluster view deletes its log next, :meth:`ClusterView.apply`)."""
        self.producers.forget(topic, partition)
        log.info("%s-%d: replica moved away", topic, partition)

    def _wake_parked(self, topic: str, partition: int) -> None:
        """Wake every request parked on a partition (its leadership was lost, its log
        is back online): fetches, followers' too, and acks=all produces read afresh."""
        self._wake_watchers(topic, partition, PARTITION_CHANGED_WAKES)

    def _high_watermark_moved(self, topic: str, partition: int) -> None:
        """A partition's high watermark moved: consumers' long polls and acks=all
        produces read afresh (followers' fetches wait for records)."""
        self._wake_watchers(topic, partition, HIGH_WATERMARK_WAKES)

    def _wake_watchers(self, topic: str, partition: int, wakes: int) -> None:
        self.notify_append(topic, partition, wakes)
        # Decided transactions whose decision this replicated send their markers.
        if topic == TRANSACTION_STATE_TOPIC and self.cluster_txn is not None:
            self.cluster_txn.on_ready()

    def adopt_cluster_id(self, cluster_id: str) -> None:
        """Take the id of the cluster this (new) data directory is joining."""
        write_meta(self.data_dir / "meta.properties", cluster_id, self.config.node_id)
        self.cluster_id = cluster_id

    def use_cluster_producer_ids(self, ids: ClusterProducerIds) -> None:
        """Hand out producer ids from the cluster's blocks (cluster mode)."""
        self._producer_ids = ids

    def wake(self, ticket: int) -> None:
        """Complete a parked request at the next :meth:`poll` (its waiter decides
        the answer): the cluster driver's way to say its work for it is done."""
        self.purgatory.wake(ticket)
