"""The broker core: Kafka requests in, responses out, without I/O (sans-IO).

:class:`Broker` owns the durable state (topics and partition logs through
:class:`~trafka.brokerlite.storage.log_manager.LogManager`, consumer groups through
:class:`~trafka.brokerlite.groups.coordinator.GroupCoordinator`, share groups through
:class:`~trafka.brokerlite.groups.share_groups.ShareGroups`, transactions through
:class:`~trafka.brokerlite.transactions.coordinator.TransactionCoordinator`, idempotent
producers' sequence state through :class:`~trafka.brokerlite.transactions.eos.ProducerStates`,
the producer-id counter and the cluster id) and dispatches each decoded request to its handler in
:mod:`trafka.brokerlite.handlers`. The trio driver (:mod:`.server`) only moves
bytes; tests drive this class directly.

Rules and invariants:

* The driver passes the time in (``now_ms``, wall-clock milliseconds); nothing
  here sleeps. The one clock read is the request-time quota's (KIP-124): how
  long handling a request took is a duration only the code around the handler
  can measure (a monotonic counter, never the wall clock).
* Storage is synchronous: appends, reads and fsyncs run on the driver's thread
  while a request is handled, so a slow disk delays every client of this
  broker (Kafka spreads them over its request handler threads). The fsyncs that
  answers wait for are the ones durability needs (see below and :mod:`.storage.partition`).
* :meth:`handle_frame` turns one request frame into exactly one
  :class:`~.handlers._base.Outcome`: a :class:`Reply`, :class:`NoResponse`
  (Produce acks=0), :class:`Parked` (the reply comes later through
  :meth:`poll`) or :class:`Close` (the peer broke the protocol: malformed frame,
  unknown API key, a version nobody can answer). It never raises for bad input.
* A connection has at most one request parked at a time, because the driver
  does not read the next request of a connection before the previous one is
  answered (Kafka's muting); replies therefore leave in request order.
* A parked request completes exactly once: when its waiter says it can (data
  arrived), when its deadline passes, when its topic changes, or when the
  coordinator answers it. :meth:`connection_closed` drops the parked requests
  of a connection without completing them.
* :meth:`poll` returns the completions due at ``now_ms`` and runs periodic
  work (retention, coordinator timers, transaction timeouts and marker retries,
  producer-id expiry); :meth:`next_deadline` tells the driver when to call it
  next. Calling :meth:`poll` early or often is harmless.
* Every write to a partition log goes through ``self.producers`` (Produce and
  transaction markers), which keeps each partition's producer state equal to
  what its log holds.
* Transaction outcomes are carried out on this broker's partitions by
  :class:`~.transactions.markers.TransactionMarkers` (``self.markers``), whose rules say
  when markers are written, acknowledged and known durable. Deferred markers
  are written before the next request is handled and by the next :meth:`poll`.
* Parked requests live in :class:`~.purgatory.Purgatory` (``self.purgatory``).
* Whatever the broker knows of a connection is in its
  :class:`~.session.ConnectionSession`, opened by :meth:`connection_opened` (or
  by the first request of a connection not seen before) and dropped whole by
  :meth:`connection_closed`; handlers see it as ``ctx.session``. The SASL rules
  (authentication before other requests, bare tokens after a v0 SaslHandshake,
  KIP-368's expiry and re-authentication) are stated in :mod:`.session`;
  :meth:`max_frame_size` is smaller until a connection has authenticated.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import time
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from trafka.codec.errors import ErrorCode
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import api
from trafka.codec.records import blob_next_offset

from .cluster.controller import coordinator_partition
from .cluster.replica_manager import ReplicaManager
from .cluster.view import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC, ClusterView
from .config import BrokerConfig
from .errors import OffsetStoreError, UnknownTopicOrPartitionError
from .features import FEATURES_JOURNAL, SHARE_VERSION, FeatureStore
from .fetch_sessions import FetchManager, FetchSessionCache
from .groups.consumer_groups import TopicMeta
from .groups.coordinator import GroupCoordinator
from .groups.offsets import GroupStore, OffsetStore
from .groups.replicated_offsets import ReplicatedOffsetStore
from .groups.share_groups import (
    SHARE_GROUPS_JOURNAL,
    ShareGroups,
    ShareGroupSettings,
    ShareGroupStore,
)
from .handlers import HANDLERS
from .handlers._base import HandlerSpec, RequestContext
from .handlers.k01_fetch import HIGH_WATERMARK_WAKES, FetchPlan
from .intake import (
    API_VERSIONS_KEY,
    Admitted,
    admit,
    advertised_versions,
    early_refusal,
    served_api_keys,
)
from .metrics import BrokerMetrics
from .outcomes import Close, NoResponse, Outcome, Parked, Reply, SaslToken
from .purgatory import Completion, ParkedRequest, Purgatory
from .quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
    QUOTAS_JOURNAL,
    Quotas,
    QuotaStore,
)
from .security.authorizer import (
    ACLS_JOURNAL,
    ANONYMOUS,
    AclStore,
    Authorizer,
    authorizer_enabled,
    host_of,
)
from .security.delegation_tokens import TOKENS_JOURNAL, DelegationTokens
from .security.sasl import UserStore
from .security.scram import SCRAM_JOURNAL, ScramCredentials
from .session import ConnectionSession, SaslPolicy
from .shares.fetcher import ShareFetcher, ShareStateStore
from .storage.log_manager import LogManager
from .storage.node_meta import (
    ClusterProducerIds,
    ProducerIdAllocator,
    load_cluster_id,
    new_cluster_id,
    write_meta,
)
from .storage.topic_configs import LogConfig
from .telemetry import CLIENT_METRICS_JOURNAL, ClientTelemetry
from .transactions.cluster_mode import ClusterTransactions, unverified
from .transactions.coordinator import TransactionCoordinator, classic_group_validator
from .transactions.eos import ProducerStates, TxnVerifier
from .transactions.journal import TxnJournal, TxnStore
from .transactions.markers import TransactionMarkers
from .transactions.replicated_journal import ReplicatedTxnJournal

__all__ = [
    "API_VERSIONS_KEY",
    "Broker",
    "Close",
    "ClusterProducerIds",
    "Completion",
    "NoResponse",
    "Outcome",
    "Parked",
    "Reply",
    "SaslToken",
    "new_cluster_id",
    "served_api_keys",
]

log = logging.getLogger("trafka.brokerlite")

_PRODUCE = 0
_FETCH = 1
# Never throttled: the SASL exchange (Kafka does not throttle authentication).
_QUOTA_EXEMPT = frozenset({17, 36})
_OFFSET_COMMIT = 8
# How long a coordinator's answer waits for its records to replicate (Kafka's
# offsets.commit.timeout.ms; its transaction-state appends wait about as long).
_REPLICATION_WAIT_MS = 5000
# Group APIs (by a single group_id) that only the group's coordinator answers in
# cluster mode: OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, LeaveGroup,
# SyncGroup, TxnOffsetCommit, OffsetDelete, ConsumerGroupHeartbeat.
_GROUP_KEYED = frozenset({8, 9, 11, 12, 13, 14, 28, 47, 68})
_TXN_OFFSET_COMMIT = 28
# Transaction APIs that only the transactional id's coordinator answers in cluster
# mode, once what they wrote is replicated: InitProducerId (with an id),
# AddPartitionsToTxn, AddOffsetsToTxn, EndTxn.
_TXN_KEYED = frozenset({22, 24, 25, 26})
_FLUSH_CHECK_MS = 1000
GROUPS_JOURNAL = "trafka-groups.journal"
SHARE_STATE_JOURNAL = "trafka-share-state.journal"
TRANSACTIONS_JOURNAL = "trafka-transactions.journal"


class Broker:
    """One brokerlite node's protocol logic and state.

    Args:
        config: the broker settings; ``config.data_dir`` is created if missing.
        now_ms: the current wall-clock time (recovery and retention use it).
        advertised: (host, port) given to clients in Metadata and
            FindCoordinator; the driver passes it once it has bound its listener.

    Raises:
        LogStorageError: the data directory is in use by another broker, or
            cannot be created or read.
        OffsetStoreError: the committed-offsets journal cannot be read.
        TxnJournalError: the transaction journal cannot be read.
        ScramStoreError: the SCRAM credential journal cannot be read.
        ShareGroupStoreError: the share-group journal cannot be read.
        FeatureStoreError: the feature-level journal cannot be read.
        ClientMetricsStoreError: the client-metrics journal cannot be read.
        ConfigError: ``config.cluster_id`` contradicts the one stored in ``data_dir``,
            or the SASL users file cannot be read.
    """

    def __init__(
        self,
        config: BrokerConfig,
        *,
        now_ms: int,
        advertised: tuple[str, int] | None = None,
    ) -> None:
        # The composition root: each step opens or wires one group of parts, in
        # the order their dependencies need; a failure closes what was opened.
        self.config = config
        #: The time of the request or poll being handled (what the driver passed in).
        self._now_ms = now_ms
        self.data_dir = Path(config.data_dir)
        self.node_id = config.node_id
        self.advertised: tuple[str, int] = advertised or config.advertised_address(
            (config.host, config.port)
        )
        # SCRAM credentials are derived here, once (users given in a file are read here too).
        self.sasl_users = UserStore.from_config(config) if config.sasl_enabled else None
        self._sasl_policy = (
            None
            if self.sasl_users is None
            else SaslPolicy(
                self.sasl_users,
                config.sasl_enabled_mechanisms,
                config.connections_max_reauth_ms,
            )
        )
        # The open connections' sessions (everything known of a connection is there).
        self._sessions: dict[int, ConnectionSession] = {}
        # The log manager locks the data directory: open it before writing anything there.
        self.logs = LogManager(
            self.data_dir,
            LogConfig(**config.as_log_config_kwargs()),
            now_ms=now_ms,
            max_partitions=config.partition_limit(),
            broker_defaults={
                "min.insync.replicas": str(config.min_insync_replicas),
                "unclean.leader.election.enable": str(
                    config.unclean_leader_election_enable
                ).lower(),
            },
        )
        with contextlib.ExitStack() as opened:
            opened.callback(self.logs.close)
            self._open_coordinators(config, now_ms, opened)
            self._open_services(config, now_ms, opened)
            opened.pop_all()
        self._wire_core(config, now_ms)
        if config.cluster_mode:
            self._wire_cluster(config)

    def _open_coordinators(
        self, config: BrokerConfig, now_ms: int, opened: contextlib.ExitStack
    ) -> None:
        """The data directory's identity, the group, share-group and transaction
        coordinators and their stores (journal files, or internal topics in a cluster)."""
        #: True when this start gave the data directory its cluster id (it was
        #: new): such a directory may join an existing cluster and take its id.
        self.fresh_data_dir = not (self.data_dir / "meta.properties").exists()
        self.cluster_id = load_cluster_id(self.data_dir, config)
        self._producer_ids: ProducerIdAllocator | ClusterProducerIds = ProducerIdAllocator(
            self.data_dir / "producer-id-block"
        )
        #: The cluster side of the transaction coordinator (cluster mode), else None.
        self.cluster_txn = ClusterTransactions(self) if config.cluster_mode else None
        store: GroupStore
        if config.cluster_mode:
            # Groups live in the replicated __consumer_offsets topic (replicated_offsets).
            store = ReplicatedOffsetStore(
                partition_for=self._offsets_partition,
                append=functools.partial(self._append_internal, OFFSETS_TOPIC),
                read=functools.partial(self._read_partition, OFFSETS_TOPIC),
                now_ms=lambda: self._now_ms,
            )
        else:
            store = OffsetStore(self.data_dir / GROUPS_JOURNAL)
        opened.callback(store.close)
        share_store = ShareGroupStore(self.data_dir / SHARE_GROUPS_JOURNAL)
        opened.callback(share_store.close)
        self.share_groups = ShareGroups(
            self._consumer_topics,
            settings=ShareGroupSettings.from_broker_config(config),
            store=share_store,
            now_ms=now_ms,
        )
        # SCRAM credentials changed through the admin API (KIP-554) win over
        # the configuration's; SCRAM logins look them up there from now on.
        self.scram = ScramCredentials.open(self.data_dir / SCRAM_JOURNAL, self.sasl_users)
        opened.callback(self.scram.close)
        self.groups = GroupCoordinator(
            store,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            partition_exists=self._partition_exists,
            topic_id_to_name=self.topic_name,
            consumer_topics=self._consumer_topics,
            consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            share_groups=self.share_groups,
            now_ms=now_ms,
        )
        # Transactional and idempotent producer ids come from the one
        # durable counter, so an id is never handed out twice.
        ctxn = self.cluster_txn
        txn_journal: TxnStore
        if ctxn is not None:
            # Transaction state lives in the replicated __transaction_state
            # (replicated_journal).
            txn_journal = ReplicatedTxnJournal(
                partition_for=ctxn.state_partition,
                append=functools.partial(self._append_internal, TRANSACTION_STATE_TOPIC),
                read=functools.partial(self._read_partition, TRANSACTION_STATE_TOPIC),
                now_ms=lambda: self._now_ms,
            )
        else:
            txn_journal = TxnJournal(self.data_dir / TRANSACTIONS_JOURNAL)
        opened.callback(txn_journal.close)
        self.txn = TransactionCoordinator(
            txn_journal,
            coordinator_epoch_for=None if ctxn is None else ctxn.coordinator_epoch,
            group_partition=None if ctxn is None else ctxn.group_partition,
            stage_group_offsets=None if ctxn is None else ctxn.stage_group_offsets,
            allocate_producer_id=self._next_producer_id,
            max_timeout_ms=config.transaction_max_timeout_ms,
            transactional_id_expiration_ms=config.transactional_id_expiration_ms,
            expiration_check_interval_ms=(
                config.transaction_remove_expired_transaction_cleanup_interval_ms
            ),
            partition_exists=self._partition_exists,
            validate_group=classic_group_validator(self.groups),
            sync_decision_for=self._fsyncs_every_record,
            log_end_offset=self._log_end_offset,
        )

    def _open_services(
        self, config: BrokerConfig, now_ms: int, opened: contextlib.ExitStack
    ) -> None:
        """The producer states, share-partitions, ACLs, quotas, delegation tokens,
        feature levels and client telemetry."""
        self.producers = ProducerStates(
            self.logs, producer_id_expiration_ms=config.producer_id_expiration_ms
        )
        self.shares = ShareFetcher(
            self.logs,
            self.producers,
            ShareStateStore(self.data_dir / SHARE_STATE_JOURNAL),
            config_for=self.share_groups.config,
            notify=self._notify_available,
        )
        opened.callback(self.shares.close)
        self.share_groups.listeners.append(self.shares)
        self.authorizer: Authorizer | None = None
        if authorizer_enabled(config.authorizer_class_name):
            self.authorizer = Authorizer(
                AclStore(self.data_dir / ACLS_JOURNAL),
                super_users=config.super_users,
                allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
            )
            opened.callback(self.authorizer.close)
        self.quotas = Quotas(
            QuotaStore(self.data_dir / QUOTAS_JOURNAL),
            window_num=config.quota_window_num,
            window_size_ms=config.quota_window_size_seconds * 1000,
        )
        opened.callback(self.quotas.close)
        self.tokens = DelegationTokens.open(
            self.data_dir / TOKENS_JOURNAL,
            secret_key=config.delegation_token_secret_key,
            max_lifetime_ms=config.delegation_token_max_lifetime_ms,
            expiry_time_ms=config.delegation_token_expiry_time_ms,
            expiry_check_interval_ms=config.delegation_token_expiry_check_interval_ms,
            now_ms=now_ms,
        )
        opened.callback(self.tokens.close)
        if self.sasl_users is not None:
            self.sasl_users.manage_tokens(self.tokens)
        self.features = FeatureStore(self.data_dir / FEATURES_JOURNAL)
        opened.callback(self.features.close)
        # KIP-714: client-metrics resources, client instances, received pushes.
        self.telemetry = ClientTelemetry(
            self.data_dir / CLIENT_METRICS_JOURNAL,
            telemetry_max_bytes=config.telemetry_max_bytes,
            telemetry_file=config.client_telemetry_file,
        )

    def _wire_core(self, config: BrokerConfig, now_ms: int) -> None:
        """The parts over the coordinators and logs: markers, fetch sessions, the
        purgatory, the timers and the metrics; on a single node, the recovery of
        the transactions the last run left undone."""
        #: Checks a transactional Produce against its transaction (KIP-890 part 1);
        #: in a cluster the coordinator is elsewhere (see cluster_txn).
        self.verify_transactional: TxnVerifier = (
            self.txn.verify_partition if self.cluster_txn is None else unverified
        )
        #: The transaction outcomes' markers and offsets written here.
        self.markers = TransactionMarkers(
            txn=self.txn,
            producers=self.producers,
            logs=self.logs,
            groups=self.groups,
            cluster_txn=self.cluster_txn,
            partition_exists=self._partition_exists,
            notify_append=self.notify_append,
            now_ms=now_ms,
        )
        if not config.cluster_mode:
            # (In a cluster, markers are acknowledged by their partitions' replicas.)
            self.markers.recover(now_ms)
        # Incremental fetch sessions (KIP-227), Kafka's FetchManager and its cache.
        self.fetch_sessions = FetchManager(
            FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        )
        #: The requests parked until they can be answered.
        self.purgatory = Purgatory(self._complete)
        self._next_retention_ms = now_ms + config.log_retention_check_interval_ms
        self._next_flush_ms = now_ms + _FLUSH_CHECK_MS
        self._next_producer_expiry_ms = now_ms + config.producer_id_expiration_check_interval_ms
        self._closed = False
        if not config.cluster_mode:
            # (In a cluster a partition's open transactions are its coordinator's.)
            self.markers.abort_hanging(now_ms)
        #: Prometheus counters and gauges (:mod:`.metrics`).
        self.metrics = BrokerMetrics()
        self.metrics.attach(self)
        #: What this broker knows of its cluster (cluster mode), else None; the
        #: cluster driver (:mod:`.cluster.driver`) keeps it up to date.
        self.cluster: ClusterView | None = None

    def _wire_cluster(self, config: BrokerConfig) -> None:
        """Cluster mode: this broker's replicas and its view of the cluster."""
        replicas = ReplicaManager(
            config.node_id,
            self.logs,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            min_insync_replicas=self._min_insync_replicas,
            on_high_watermark=self._wake_parked,
            on_truncate=self.producers.forget,
            on_removed=self._replica_removed,
            on_role=self._leadership_changed,
        )
        self.cluster = ClusterView(
            config.node_id,
            self.logs,
            replicas,
            wake=self.wake,
            on_topic_deleted=lambda topic: self.notify_topic_changed(topic, deleted=True),
        )

    def _next_producer_id(self) -> int:
        return self._producer_ids.next()

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

    # -- cluster mode: group state in __consumer_offsets ----------------------------------

    def _offsets_partition(self, group: str) -> int | None:
        cluster = self.cluster
        if cluster is None:
            return None
        assignment = cluster.image.topics.get(OFFSETS_TOPIC)
        if assignment is None:
            return None
        return coordinator_partition(group, assignment.num_partitions)

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
            if loaded:
                log.info("coordinating %d group(s) of %s-%d", len(loaded), topic, partition)
        else:
            self.groups.unload_groups(store.unload_partition(partition))

    def _replica_removed(self, topic: str, partition: int) -> None:
        """A reassignment moved this partition away: drop its records here (the
        log stays, empty, as every broker keeps one for every partition)."""
        try:
            plog = self.logs.partition(topic, partition)
        except UnknownTopicOrPartitionError:
            return  # the topic is gone altogether
        plog.truncate_fully_and_start_at(0)
        self.producers.forget(topic, partition)
        log.info("%s-%d: replica moved away; its records here are dropped", topic, partition)

    def reopen_partition(self, topic: str, partition: int, now_ms: int) -> bool:
        """Bring a partition that went offline back online, after the check
        :meth:`LogManager.reopen_partition` makes; False when it was not offline.

        Its producer state is loaded again from the new log, and requests parked
        on it look again.

        Raises:
            UnknownTopicOrPartitionError: no such partition.
            LogStorageError: the check failed; the partition stays offline.
        """
        if self.logs.partition(topic, partition).offline is None:
            return False
        self.logs.reopen_partition(topic, partition, now_ms)
        self.producers.forget(topic, partition)
        self._wake_parked(topic, partition)
        return True

    def _wake_parked(self, topic: str, partition: int) -> None:
        """Wake every request parked on a partition (its high watermark moved, or its
        leadership was lost): consumers' long polls and acks=all produces read afresh;
        decided transactions whose decision it replicated send their markers."""
        self.notify_append(topic, partition, HIGH_WATERMARK_WAKES)
        if topic == TRANSACTION_STATE_TOPIC and self.cluster_txn is not None:
            self.cluster_txn.on_ready()

    def pending_offset_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions of a group with an offset an unfinished transaction holds
        (OffsetFetch's ``require_stable``): the transaction coordinator's on one
        node, the group coordinator's in a cluster."""
        store = self.groups.store
        if isinstance(store, ReplicatedOffsetStore):
            return store.pending_partitions(group_id)
        return self.txn.pending_offset_partitions(group_id)

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

    def _log_end_offset(self, topic: str, partition: int) -> int:
        """The partition's log end offset, -1 when it no longer exists."""
        try:
            return self.logs.partition(topic, partition).log_end_offset
        except UnknownTopicOrPartitionError:
            return -1

    def _fsyncs_every_record(self, topic: str, _partition: int) -> bool:
        """True when ``topic`` fsyncs each record before answering (``flush.messages=1``)."""
        try:
            return self.logs.config(topic).flush_interval_messages == 1
        except UnknownTopicOrPartitionError:
            return False  # deleted meanwhile: no record of it to keep durable

    def _partition_exists(self, topic: str, partition: int) -> bool:
        info = self.logs.topic(topic)
        return info is not None and 0 <= partition < info.num_partitions

    def topic_name(self, topic_id: uuid.UUID) -> str | None:
        """The name of the topic with id ``topic_id``, or None."""
        info = self.logs.topic_by_id(topic_id)
        return None if info is None else info.name

    def _consumer_topics(self) -> dict[str, TopicMeta]:
        return {t.name: TopicMeta(t.name, t.topic_id, t.num_partitions) for t in self.logs.topics()}

    # -- connections ----------------------------------------------------------

    @property
    def sasl_reauthentications(self) -> int:
        """Re-authentications completed since the broker started (KIP-368)."""
        return 0 if self._sasl_policy is None else self._sasl_policy.reauthentications

    @property
    def sasl_sessions_expired(self) -> int:
        """Connections closed because their SASL session expired, since the broker started."""
        return 0 if self._sasl_policy is None else self._sasl_policy.sessions_expired

    @property
    def open_sessions(self) -> int:
        """How many connections the broker holds a session for."""
        return len(self._sessions)

    def connection_opened(
        self, conn_id: int, peer: str, *, tls_subject: str | None = None
    ) -> ConnectionSession:
        """Open the session of a new connection: its peer address (for logs,
        DescribeGroups and ACLs) and the subject of its TLS client certificate, if
        it showed one."""
        session = self._sessions[conn_id] = ConnectionSession(
            conn_id, peer, tls_subject=tls_subject, sasl_policy=self._sasl_policy
        )
        return session

    def session(self, conn_id: int) -> ConnectionSession:
        """The session of a connection; a connection not seen opened gets a new one."""
        session = self._sessions.get(conn_id)
        if session is None:
            session = self._sessions[conn_id] = ConnectionSession(
                conn_id, sasl_policy=self._sasl_policy
            )
        return session

    def principal_of(self, conn_id: int) -> str:
        """The connection's principal for ACLs (``User:alice``, ``User:ANONYMOUS``)."""
        session = self._sessions.get(conn_id)
        return ANONYMOUS if session is None else session.principal

    def peer(self, conn_id: int) -> str:
        """The peer address of a connection, ``"?"`` when unknown."""
        session = self._sessions.get(conn_id)
        return "?" if session is None else session.peer

    def client_id(self, conn_id: int) -> str | None:
        """The client id of the connection's latest request header, if any."""
        session = self._sessions.get(conn_id)
        return None if session is None else session.client_id

    def client_software(self, conn_id: int) -> tuple[str, str] | None:
        """The client software (name, version) the connection's ApiVersions v3+ named."""
        session = self._sessions.get(conn_id)
        return None if session is None else session.client_software

    def connection_closed(self, conn_id: int) -> None:
        """Drop a connection's session and its parked request, if any.

        A member whose JoinGroup was parked on it is removed from its group at
        the next :meth:`poll` (the driver should poll soon after).
        """
        session = self._sessions.pop(conn_id, None)
        self.telemetry.connection_closed(conn_id)
        self.shares.connection_closed(conn_id)
        if session is None:
            return
        token = self.purgatory.connection_closed(session)
        if token is not None:
            self.purgatory.release(self.groups.connection_closed([token]))

    # -- SASL authentication ----------------------------------------------------

    def authenticating(self, conn_id: int) -> bool:
        """True while a connection of a SASL listener has not authenticated."""
        session = self._sessions.get(conn_id)
        return self._sasl_policy is not None if session is None else session.authenticating

    def principal(self, conn_id: int) -> str | None:
        """The SASL user a connection authenticated as; None without SASL (or yet)."""
        session = self._sessions.get(conn_id)
        return None if session is None else session.sasl_user

    def max_frame_size(self, conn_id: int) -> int:
        """The largest request frame the connection may send now.

        Before SASL authentication this is ``sasl_server_max_receive_size``
        (Kafka's 512 KiB), so that an unauthenticated peer cannot make the broker
        buffer a large frame.
        """
        limit = self.config.socket_request_max_bytes
        if self.authenticating(conn_id):
            return min(limit, self.config.sasl_server_max_receive_size)
        return limit

    def early_refusal(self, conn_id: int, api_key: int) -> Close | None:
        """The :class:`Close` :meth:`handle_frame` will answer a request of ``api_key``
        with by its key alone, before SASL authentication (:func:`.intake.early_refusal`)."""
        return early_refusal(self.session(conn_id), api_key)

    # -- requests -------------------------------------------------------------

    def handle_frame(self, conn_id: int, frame: bytes | memoryview, now_ms: int) -> Outcome:
        """Decode one request frame (without its size prefix) and handle it.

        Never raises for bad input: malformed frames, unknown API keys and
        versions that cannot be answered become :class:`Close`. On a SASL
        listener, before the connection has authenticated, other requests than
        ApiVersions, SaslHandshake and SaslAuthenticate are a :class:`Close`, and
        after a v0 SaslHandshake ``frame`` is a bare SASL token, answered by a
        :class:`SaslToken` (or a :class:`Close` when authentication fails).
        """
        session = self.session(conn_id)
        admitted = admit(session, frame, now_ms, self.config)
        if not isinstance(admitted, Admitted):
            return admitted
        header, body = admitted
        if self.quotas.active and header.request_api_key not in _QUOTA_EXEMPT:
            return self._handle_within_quotas(session, header, body, now_ms, len(frame))
        return self._handle(session, header, body, now_ms)

    def handle(self, conn_id: int, header: RequestHeader, body: Any, now_ms: int) -> Outcome:
        """Handle one decoded request of a served API and version.

        Trusts its caller: no SASL authentication check (:meth:`handle_frame`
        makes it).

        Raises:
            KeyError: the API key has no handler (use :meth:`handle_frame` for
                untrusted input).
        """
        return self._handle(self.session(conn_id), header, body, now_ms)

    def _handle(
        self, session: ConnectionSession, header: RequestHeader, body: Any, now_ms: int
    ) -> Outcome:
        self._now_ms = now_ms
        spec = HANDLERS[header.request_api_key]
        if spec.feature is not None and (
            self.features.level(spec.feature) < 1
            # Share groups are not cluster-aware yet: in cluster mode they are
            # answered as by a Kafka whose share.version is not finalized.
            or (self.cluster is not None and spec.feature == SHARE_VERSION)
        ):
            # Kafka answers an API whose feature is not finalized (level 0) with
            # UNSUPPORTED_VERSION before anything else, authorization included.
            return Reply(
                header.correlation_id,
                spec.api_key,
                header.request_api_version,
                spec.refusal(body, header.request_api_version, ErrorCode.UNSUPPORTED_VERSION),
            )
        if self.markers.pending:
            # Markers of a transaction answered just before: no request may see it half done.
            self.markers.run_deferred(now_ms)
        elsewhere: list[str] = []  # groups of a batched OffsetFetch coordinated elsewhere
        if self.cluster is not None and spec.api_key in _GROUP_KEYED:
            batched = list(getattr(body, "groups", None) or ())
            groups = [g.group_id for g in batched] or [getattr(body, "group_id", "")]
            elsewhere = [g for g in groups if g and self.cluster.coordinator(g) != self.node_id]
            if elsewhere and len(elsewhere) == len(groups):
                # Kafka's answer from a broker that does not coordinate the group: the
                # client looks the coordinator up again (FindCoordinator).
                return Reply(
                    header.correlation_id,
                    spec.api_key,
                    header.request_api_version,
                    spec.refusal(body, header.request_api_version, ErrorCode.NOT_COORDINATOR),
                )
            if elsewhere:
                # OffsetFetch v8+: the groups coordinated here are answered, each of
                # the others gets NOT_COORDINATOR of its own.
                body = dataclasses.replace(
                    body, groups=[g for g in batched if g.group_id not in elsewhere]
                )
        tids: list[str] = []
        if self.cluster_txn is not None and spec.api_key in _TXN_KEYED:
            tids = _transactional_ids(spec.api_key, header.request_api_version, body)
            if not all(self.cluster_txn.owns(t) for t in tids):
                return Reply(
                    header.correlation_id,
                    spec.api_key,
                    header.request_api_version,
                    spec.refusal(body, header.request_api_version, ErrorCode.NOT_COORDINATOR),
                )
        ctx = RequestContext(self, session, header, now_ms)
        try:
            result = spec.handle(ctx, body)
        except Exception:
            log.exception(
                "internal error handling %s v%d from %s (client %r)",
                api(spec.api_key).name,
                header.request_api_version,
                session.peer,
                header.client_id,
            )
            return self._internal_error(spec, header, body)
        if isinstance(result, Reply | NoResponse | Parked | Close):
            return result
        if elsewhere and hasattr(result, "groups"):
            group_type = type(result).OffsetFetchResponseGroup
            result = dataclasses.replace(
                result,
                groups=[
                    *result.groups,
                    *(
                        group_type(group_id=g, error_code=ErrorCode.NOT_COORDINATOR)
                        for g in elsewhere
                    ),
                ],
            )
        waiter: _Replicated | None = None
        if self.cluster is not None and spec.api_key in (_OFFSET_COMMIT, _TXN_OFFSET_COMMIT):
            # Kafka's offsets.commit.required.acks=-1.
            partition = self._offsets_partition(getattr(body, "group_id", ""))
            waiter = self._replicated(
                spec, header, body, result, OFFSETS_TOPIC, partition, ErrorCode.REQUEST_TIMED_OUT
            )
        elif tids and self.cluster_txn is not None:
            partition = self.cluster_txn.state_partition(tids[0])
            waiter = self._replicated(
                spec,
                header,
                body,
                result,
                TRANSACTION_STATE_TOPIC,
                partition,
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
            )
        if waiter is not None:
            return ctx.park(waiter)
        return Reply(header.correlation_id, spec.api_key, header.request_api_version, result)

    def _replicated(
        self,
        spec: HandlerSpec,
        header: RequestHeader,
        body: Any,
        answer: Any,
        topic: str,
        partition: int | None,
        timed_out: ErrorCode,
    ) -> _Replicated | None:
        """A coordinator's answer is sent once what it wrote is on every in-sync
        replica of its partition (the group's ``__consumer_offsets`` or the
        transactional id's ``__transaction_state`` partition): a waiter when it
        is not yet. A lost leadership answers NOT_COORDINATOR, a timeout
        ``timed_out``."""
        if partition is None:
            return None
        try:
            plog = self.logs.partition(topic, partition)
        except UnknownTopicOrPartitionError:
            return None
        if plog.high_watermark >= plog.log_end_offset:
            return None
        return _Replicated(
            self,
            topic,
            partition,
            plog.log_end_offset,
            answer,
            spec.refusal(body, header.request_api_version, timed_out),
            spec.refusal(body, header.request_api_version, ErrorCode.NOT_COORDINATOR),
            self._now_ms + _REPLICATION_WAIT_MS,
        )

    # -- client quotas -------------------------------------------------------------

    def connection_throttle(self, peer: str, now_ms: int) -> int:
        """Count a new connection from ``peer`` (``host:port``) against its IP's
        ``connection_creation_rate``; 0 when within it, else how long the driver
        holds the connection, unread, before closing it (KIP-612)."""
        if not self.quotas.connections_active:
            return 0
        return self.quotas.connection_throttle(host_of(peer), now_ms)

    def _handle_within_quotas(
        self, session: ConnectionSession, header: RequestHeader, body: Any, now_ms: int, size: int
    ) -> Outcome:
        """:meth:`handle`, with the request measured against the connection's quotas
        (:mod:`.quotas`) and its answer throttled when it goes over one."""
        quotas = self.quotas
        user, client_id = session.quota_user, header.client_id or ""
        key = header.request_api_key
        if key == _FETCH:
            # Kafka's cap: no more in one answer than the quota allows in its windows.
            cap = quotas.max_fetch_bytes(user, client_id)
            if cap is not None and cap < body.max_bytes:
                body = dataclasses.replace(body, max_bytes=max(cap, 1))
        started = time.perf_counter_ns()
        outcome = self._handle(session, header, body, now_ms)
        throttle = 0
        if not isinstance(outcome, NoResponse):  # Kafka exempts acks=0 Produce
            throttle = quotas.record_request_time(
                user, client_id, time.perf_counter_ns() - started, now_ms
            )
        if key == _PRODUCE:
            throttle = max(
                throttle, quotas.record(PRODUCER_BYTE_RATE, user, client_id, size, now_ms)
            )
        if isinstance(outcome, Reply):
            return self._throttled(session, client_id, outcome, throttle, now_ms)
        if isinstance(outcome, Parked):
            entry = self.purgatory.get(outcome.ticket)
            if entry is not None:
                entry.throttle_ms = throttle
        elif isinstance(outcome, NoResponse) and throttle:
            return NoResponse(throttle_ms=throttle)
        return outcome

    def _throttled(
        self, session: ConnectionSession, client_id: str, reply: Reply, throttle: int, now_ms: int
    ) -> Reply:
        """``reply`` with the throttle time of its request (and a Fetch's bytes
        counted against ``consumer_byte_rate``); unchanged when not throttled."""
        body = reply.body
        if reply.api_key == _FETCH and isinstance(body, FetchPlan):
            user = session.quota_user
            size = body.records_size
            quotas = self.quotas
            throttle = max(
                throttle, quotas.record(CONSUMER_BYTE_RATE, user, client_id, size, now_ms)
            )
            if throttle:
                # As Kafka: the bytes are not sent, so they do not count, and the
                # client is told to come back after the throttle time.
                quotas.unrecord(CONSUMER_BYTE_RATE, user, client_id, size, now_ms)
                body = body.throttled()
        # A handler's own throttle (the controller mutation quota) counts too.
        throttle = max(throttle, getattr(body, "throttle_time_ms", 0))
        if not throttle:
            return reply
        if hasattr(body, "throttle_time_ms"):
            body = dataclasses.replace(body, throttle_time_ms=throttle)
        return Reply(
            reply.correlation_id,
            reply.api_key,
            reply.api_version,
            body,
            throttle_ms=throttle,
        )

    def _internal_error(self, spec: HandlerSpec, header: RequestHeader, body: Any) -> Outcome:
        version = header.request_api_version
        if spec.error_response is None:
            return Close("internal error", header.client_id)
        try:
            err = spec.error_response(body, version, ErrorCode.UNKNOWN_SERVER_ERROR)
        except Exception:
            log.exception("cannot build an error response")
            return Close("internal error", header.client_id)
        return Reply(header.correlation_id, spec.api_key, version, err)

    # -- parked requests ------------------------------------------------------

    def parked_by_api(self) -> dict[int, int]:
        """How many requests wait parked (Kafka's purgatories), per API key."""
        return self.purgatory.by_api()

    def notify_append(self, topic: str, partition: int, nbytes: int) -> None:
        """Data was appended to a partition: wake the parked requests that wanted it."""
        self.purgatory.notify_append(topic, partition, nbytes)

    def _notify_available(self, topic: str, partition: int) -> None:
        """Records of a share-partition became available again: wake its share fetches."""
        self.purgatory.notify_append(topic, partition, 0)

    def notify_topic_changed(self, topic: str, *, deleted: bool) -> None:
        """A topic was deleted or resized: complete the requests watching it now.

        A deleted topic's committed offsets are dropped from every group.
        """
        self.purgatory.wake_topic(topic)
        if deleted:
            self.producers.drop_topic(topic)
            self.shares.topic_deleted(topic)
            # A topic recreated under the name must never get the old one's markers.
            gone = {tp: None for tp in self.txn.unsynced_markers() if tp[0] == topic}
            if gone:
                self.txn.markers_synced(gone)
            try:
                self.groups.delete_topic_offsets(topic)
            except Exception:
                log.exception("cannot drop the committed offsets of deleted topic %r", topic)

    def has_ready(self) -> bool:
        """True when :meth:`poll` has completions to return without waiting.

        Markers waiting to be written (``markers.defer``) do not count:
        :meth:`next_deadline` asks for a poll at once instead, so that a driver
        polls after it has sent the answer that comes before them.
        """
        return self.purgatory.has_ready()

    def poll(self, now_ms: int) -> list[Completion]:
        """Completions due at ``now_ms``, and periodic work (retention, timers)."""
        self._now_ms = now_ms
        markers = self.markers
        if markers.pending:
            # First: the markers may wake parked fetches answered below.
            markers.run_deferred(now_ms)
        purgatory = self.purgatory
        done = purgatory.take_ready(now_ms)
        purgatory.release(self.groups.tick(now_ms))
        markers.complete(self.txn.tick(now_ms), now_ms)
        share_deadline = self.shares.next_deadline()
        if share_deadline is not None and share_deadline <= now_ms:
            self.shares.tick(now_ms)
        markers.check(now_ms)
        done.extend(purgatory.take_group_done())
        if now_ms >= self._next_retention_ms:
            self._next_retention_ms = now_ms + self.config.log_retention_check_interval_ms
            self._run_retention(now_ms)
        if now_ms >= self._next_producer_expiry_ms:
            self._next_producer_expiry_ms = (
                now_ms + self.config.producer_id_expiration_check_interval_ms
            )
            expired = self.producers.expire(now_ms)
            if expired:
                log.info("forgot %d idle producer(s)", expired)
        if now_ms >= self._next_flush_ms:
            self._next_flush_ms = now_ms + _FLUSH_CHECK_MS
            try:
                self.logs.maybe_flush_all(now_ms)
            except Exception:
                log.exception("periodic flush failed")
        return done

    def _complete(self, entry: ParkedRequest, now_ms: int) -> Reply:
        """A waiter's reply, throttled as its request's quotas say (the purgatory's
        ``finish``)."""
        header = entry.header
        key, version = header.request_api_key, header.request_api_version
        try:
            body = entry.waiter.complete(now_ms)
        except Exception:
            log.exception("internal error completing %s v%d", api(key).name, version)
            spec = HANDLERS[key]
            assert spec.error_response is not None
            body = spec.error_response(None, version, ErrorCode.UNKNOWN_SERVER_ERROR)
        reply = Reply(header.correlation_id, key, version, body)
        if entry.throttle_ms or (self.quotas.active and key == _FETCH):
            return self._throttled(
                entry.session, header.client_id or "", reply, entry.throttle_ms, now_ms
            )
        return reply

    def next_deadline(self) -> int | None:
        """The wall-clock time at which :meth:`poll` has work, or None."""
        candidates = [
            self._next_retention_ms,
            self._next_flush_ms,
            self._next_producer_expiry_ms,
        ]
        parked_deadline = self.purgatory.next_deadline()
        if parked_deadline is not None:
            candidates.append(parked_deadline)
        group_deadline = self.groups.next_deadline()
        if group_deadline is not None:
            candidates.append(group_deadline)
        txn_deadline = self.txn.next_deadline()
        if txn_deadline is not None:
            candidates.append(txn_deadline)
        share_deadline = self.shares.next_deadline()
        if share_deadline is not None:
            candidates.append(share_deadline)
        markers_deadline = self.markers.next_deadline()
        if markers_deadline is not None:
            candidates.append(markers_deadline)
        return min(candidates)

    # -- periodic work ----------------------------------------------------------

    def _run_retention(self, now_ms: int) -> None:
        try:
            deleted = self.logs.apply_retention(now_ms)
        except Exception:
            log.exception("retention failed")
            return
        if deleted:
            log.info("retention deleted %d segment(s)", deleted)
        # Moving log start offsets drop aborted-transaction entries below them.
        self.producers.truncate_heads()

    # -- producer ids ------------------------------------------------------------

    def allocate_producer_id(self) -> int:
        """A producer id never handed out before by this data directory."""
        return self._producer_ids.next()

    # -- versions ----------------------------------------------------------------

    def api_versions(self) -> list[tuple[int, int, int]]:
        """(api_key, min_version, max_version) of every API served, by key (the
        KIP-714 client APIs only with ``client_telemetry_enabled``)."""
        return advertised_versions(self.config)

    # -- lifecycle ---------------------------------------------------------------

    def close(self) -> None:
        """Flush and close logs and coordinator state. Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.purgatory.clear()
        try:
            try:
                self.markers.close()
            except Exception:
                log.exception("cannot complete the transactions decided last")
            try:
                # Snapshots first: they describe the logs as the clean close leaves them.
                self.producers.close()
            except Exception:
                log.exception("cannot snapshot the producer states; the next start replays")
            try:
                self.scram.close()
            except Exception:
                log.exception("cannot close the SCRAM credential journal")
            try:
                self.share_groups.close()
            except Exception:
                log.exception("cannot close the share-group journal")
            if self.authorizer is not None:
                try:
                    self.authorizer.close()
                except Exception:
                    log.exception("cannot close the ACL journal")
            try:
                self.quotas.close()
            except Exception:
                log.exception("cannot close the client quota journal")
            try:
                self.tokens.close()
            except Exception:
                log.exception("cannot close the delegation-token journal")
            try:
                self.features.close()
            except Exception:
                log.exception("cannot close the feature journal")
            try:
                self.telemetry.close()
            except Exception:
                log.exception("cannot close the client-metrics journal")
            try:
                self.shares.close()
            except Exception:
                log.exception("cannot close the share-state journal")
            try:
                self.txn.close()
            finally:
                self.groups.store.close()
        finally:
            self.logs.close()


# -- request bodies ----------------------------------------------------------------------


class _Replicated:
    """A coordinator's answer waiting for its records to reach the ISR (cluster mode)."""

    def __init__(
        self,
        broker: Broker,
        topic: str,
        partition: int,
        required: int,
        answer: Any,
        timed_out: Any,
        moved: Any,
        deadline_ms: int,
    ) -> None:
        self._broker = broker
        self._topic = topic
        self._partition = partition
        self._required = required
        self._answer = answer
        self._timed_out = timed_out
        self._moved = moved
        self.deadline_ms = deadline_ms
        self.watches = frozenset({(topic, partition)})

    def _outcome(self) -> Any | None:
        cluster = self._broker.cluster
        assert cluster is not None
        replica = cluster.replicas.replica(self._topic, self._partition)
        if replica is None or replica.leader != self._broker.node_id:
            return self._moved
        plog = self._broker.logs.partition(self._topic, self._partition)
        return self._answer if plog.high_watermark >= self._required else None

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self._outcome() is not None

    def complete(self, now_ms: int) -> Any:
        outcome = self._outcome()
        return self._timed_out if outcome is None else outcome


def _transactional_ids(api_key: int, version: int, body: Any) -> list[str]:
    """The transactional ids a transaction request (``_TXN_KEYED``) is about."""
    if api_key == 24:
        if version >= 4:
            return [t.transactional_id for t in body.transactions]
        return [body.v3_and_below_transactional_id]
    tid = body.transactional_id
    return [] if tid is None else [tid]
