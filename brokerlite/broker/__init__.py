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

* The driver passes the time in (``now_ms``, wall-clock milliseconds carrying
  the monotonic reading of the same instant: :class:`~trafka.brokerlite.clock.Now`);
  nothing here sleeps. Dates (timestamps, retention, transaction timeouts) are on
  the wall clock, waits (parked requests, group sessions, acquisition locks, SASL
  sessions, the periodic work's schedule) on the monotonic one, as in Kafka
  (:mod:`trafka.brokerlite.clock`, docs/brokerlite.md "Clocks"). The one clock read is the request-time quota's (KIP-124): how
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
  ``connections.max_frame_size`` is smaller until a connection has authenticated.

The package: this module is the composition root (:class:`Broker`'s
``__init__`` builds the parts in order, and ``close`` closes them), and keeps
the operations of the broker as a whole that the drivers and handlers call.
Its capabilities are objects it holds, each with its own module and interface:
``dispatch.py`` (:class:`~.dispatch.Dispatcher`: answering a request, quotas,
replication waits), ``connections.py`` (:class:`~.connections.Sessions`: the
connections' sessions, SASL), ``polling.py`` (:class:`~.polling.PeriodicWork`:
parked requests' completions, periodic work) and ``cluster_host.py``
(:class:`~.cluster_host.ClusterHost`: the callbacks the cluster side is handed).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import uuid
from pathlib import Path
from typing import Any, Protocol

from trafka.codec.errors import ErrorCode
from trafka.codec.messages.headers import RequestHeader

from ..cluster.replica_manager import ReplicaManager
from ..cluster.view import SHARE_STATE_TOPIC, TRANSACTION_STATE_TOPIC, ClusterView
from ..config import BrokerConfig
from ..errors import UnknownTopicOrPartitionError
from ..features import (
    FEATURES_JOURNAL,
    SUPPORTED,
    TRANSACTION_VERSION,
    FeatureStore,
)
from ..fetch_sessions import FetchManager, FetchSessionCache
from ..groups.consumer_groups import TopicMeta
from ..groups.coordinator import GroupCoordinator
from ..groups.group_configs import ConsumerGroupSettings
from ..groups.offsets import GroupStore, OffsetStore
from ..groups.replicated_offsets import ReplicatedOffsetStore, ReplicatedShareGroups
from ..groups.share_groups import (
    SHARE_GROUPS_JOURNAL,
    ShareGroups,
    ShareGroupSettings,
    ShareGroupsPort,
    ShareGroupStore,
)
from ..intake import (
    API_VERSIONS_KEY,
    advertised_versions,
    served_api_keys,
)
from ..metrics import BrokerMetrics
from ..outcomes import Close, NoResponse, Outcome, Parked, Reply, SaslToken
from ..purgatory import Completion, Purgatory
from ..quotas import (
    QUOTAS_JOURNAL,
    Quotas,
    QuotaStore,
)
from ..security.authorizer import ACLS_JOURNAL, AclStore, Authorizer, authorizer_enabled
from ..security.delegation_tokens import TOKENS_JOURNAL, DelegationTokens
from ..security.sasl import UserStore
from ..security.scram import SCRAM_JOURNAL, ScramCredentials
from ..session import ConnectionSession
from ..shares.coordinator import ShareCoordinator
from ..shares.fetcher import ShareFetcher, ShareStateStore
from ..shares.offsets_port import ClusterShareOffsets, LocalShareOffsets, ShareOffsetsPort
from ..shares.persister import RemotePersister
from ..storage.internal_topics import ShareStateLister
from ..storage.log_manager import LogManager
from ..storage.node_meta import (
    ClusterProducerIds,
    ProducerIdAllocator,
    load_cluster_id,
    new_cluster_id,
    write_meta,
)
from ..storage.topic_configs import LogConfig
from ..telemetry import CLIENT_METRICS_JOURNAL, ClientTelemetry
from ..transactions.cluster_mode import ClusterTransactions
from ..transactions.coordinator import TransactionCoordinator, classic_group_validator
from ..transactions.eos import ProducerStates, TxnVerifier
from ..transactions.journal import TxnJournal, TxnStore
from ..transactions.markers import TransactionMarkers
from ..transactions.replicated_journal import ReplicatedTxnJournal
from ..transactions.verification import TxnVerification
from .cluster_host import ClusterHost
from .connections import Sessions
from .dead_letter_port import cluster_dead_letters, local_dead_letters
from .dispatch import Dispatcher
from .polling import PeriodicWork

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
GROUPS_JOURNAL = "trafka-groups.journal"
SHARE_STATE_JOURNAL = "trafka-share-state.journal"
TRANSACTIONS_JOURNAL = "trafka-transactions.journal"


class _Closes(Protocol):
    """A part :meth:`Broker.close` closes."""

    def close(self) -> None: ...


class Broker:
    """One brokerlite node's protocol logic and state.

    It builds its parts and holds them; the capabilities over them are objects
    of their own (``connections``, ``dispatch``, ``periodic``, ``cluster_host``;
    see the module's docstring), and its methods are the calls of the drivers
    and of the handlers (:class:`~.handlers._base.BrokerPort`).

    Args:
        config: the broker settings; ``config.data_dir`` is created if missing.
        now_ms: the current time (:class:`~trafka.brokerlite.clock.Now`).
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

    # (Declared: the share-partitions' dead letters read them, made after them.)
    features: FeatureStore
    metrics: BrokerMetrics

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
        self.now_ms = now_ms
        self.data_dir = Path(config.data_dir)
        self.node_id = config.node_id
        self.advertised = advertised or config.advertised_address((config.host, config.port))
        # SCRAM credentials are derived here, once (users given in a file are read here too).
        self.sasl_users = UserStore.from_config(config) if config.sasl_enabled else None
        #: The open connections' sessions (everything known of a connection is there).
        self.connections = Sessions(config, self.sasl_users)
        #: The callbacks the cluster side is handed (cluster mode); it reads the
        #: parts built below when they call.
        self.cluster_host = ClusterHost(self)
        #: What this broker knows of its cluster (cluster mode), else None; the
        #: cluster driver (:mod:`.cluster.driver`) keeps it up to date.
        self.cluster: ClusterView | None = None
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
        host = self.cluster_host
        store: GroupStore
        if config.cluster_mode:
            # Groups live in the replicated __consumer_offsets topic (replicated_offsets).
            store = host.offsets_store()
        else:
            store = OffsetStore(self.data_dir / GROUPS_JOURNAL)
        opened.callback(store.close)
        #: The share coordinator of ``__share_group_state`` (cluster mode), else None.
        self.share_coordinator = (
            ShareCoordinator(
                partition_for=host.share_state_partition,
                append=functools.partial(host.append_internal, SHARE_STATE_TOPIC),
                read=functools.partial(host.read_partition, SHARE_STATE_TOPIC),
                now_ms=lambda: self.now_ms,
            )
            if config.cluster_mode
            else None
        )
        share_store: ShareGroupsPort
        if isinstance(store, ReplicatedOffsetStore):
            # Share groups live in __consumer_offsets too, their configs in ZooKeeper.
            share_store = ReplicatedShareGroups(store)
        else:
            share_store = ShareGroupStore(self.data_dir / SHARE_GROUPS_JOURNAL)
        opened.callback(share_store.close)
        self.share_groups = ShareGroups(
            self._consumer_topics,
            settings=ShareGroupSettings.from_broker_config(config),
            store=share_store,
            now_ms=now_ms,
            consumer_settings=ConsumerGroupSettings.from_broker_config(config),
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
                append=functools.partial(host.append_internal, TRANSACTION_STATE_TOPIC),
                read=functools.partial(host.read_partition, TRANSACTION_STATE_TOPIC),
                now_ms=lambda: self.now_ms,
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
            transaction_version=self._transaction_version,
        )

    def _transaction_version(self) -> int:
        """The finalized ``transaction.version`` (read when a transaction is
        fenced; the feature levels open after the coordinators)."""
        features: FeatureStore = self.features
        return features.level(TRANSACTION_VERSION)

    def _open_services(
        self, config: BrokerConfig, now_ms: int, opened: contextlib.ExitStack
    ) -> None:
        """The producer states, share-partitions, ACLs, quotas, delegation tokens,
        feature levels and client telemetry."""
        self.producers = ProducerStates(
            self.logs, producer_id_expiration_ms=config.producer_id_expiration_ms
        )
        #: Cluster mode: where share-partitions' state goes (the share coordinators).
        self.share_persister: RemotePersister | None = None
        host = self.cluster_host
        if config.cluster_mode:
            self.share_persister = RemotePersister(host.led_epoch)
            self.share_persister.on_settled = host.share_writes_settled
        letters = (
            cluster_dead_letters(
                self.logs,
                config,
                features=lambda: self.features,
                cluster=lambda: self.cluster,
                now_ms=lambda: self.now_ms,
            )
            if config.cluster_mode
            else local_dead_letters(
                self.logs,
                config,
                features=lambda: self.features,
                metrics=lambda: self.metrics,
                notify_append=self.notify_append,
                now_ms=lambda: self.now_ms,
            )
        )
        #: Cluster mode: the dead letters on their way to other brokers (the
        #: driver sends them), else None.
        self.dead_letter_outbox = letters.outbox
        self.shares = ShareFetcher(
            self.logs,
            self.producers,
            self.share_persister or ShareStateStore(self.data_dir / SHARE_STATE_JOURNAL),
            config_for=self.share_groups.config,
            notify=self._notify_available,
            leads=host.leads_here if config.cluster_mode else None,
            dead_letters=letters,
        )
        opened.callback(self.shares.close)
        self.share_groups.listeners.append(self.shares)
        if not config.cluster_mode:  # (a cluster's share coordinators create it)
            self.share_groups.listeners.append(
                ShareStateLister(self.logs, config.share_coordinator_state_topic_num_partitions)
            )
        #: Where the share-group offsets admin reads and changes share state.
        self.share_offsets: ShareOffsetsPort = LocalShareOffsets(self.shares, self.logs)
        if config.cluster_mode:
            cluster_offsets = ClusterShareOffsets(
                host.topic_info, host.partition_bounds, self.share_groups.initialized
            )
            cluster_offsets.on_done = host.share_admin_done
            self.share_offsets = cluster_offsets
        self.authorizer: Authorizer | None = None
        if authorizer_enabled(config.authorizer_class_name):
            # Cluster mode: ZooKeeper holds the ACLs (the driver loads and follows them).
            self.authorizer = Authorizer(
                None if config.cluster_mode else AclStore(self.data_dir / ACLS_JOURNAL),
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
        self.features = FeatureStore(
            self.data_dir / FEATURES_JOURNAL,
            supported=SUPPORTED,
        )
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
        #: (cluster mode: replaced by ``txn_verification``'s, in _wire_cluster).
        self.verify_transactional: TxnVerifier = self.txn.verify_partition
        #: Cluster mode: the verification of transactional Produce with the
        #: coordinator, which may be another broker (KIP-890 part 1), else None.
        self.txn_verification: TxnVerification | None = None
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
        #: Answering requests: frame -> handler -> outcome.
        self.dispatch = Dispatcher(self, self.connections, self.cluster_host.offsets_partition)
        #: The requests parked until they can be answered.
        self.purgatory = Purgatory(self.dispatch.complete)
        #: The completions due and the periodic work.
        self.periodic = PeriodicWork(
            config,
            logs=self.logs,
            producers=self.producers,
            purgatory=self.purgatory,
            groups=self.groups,
            shares=self.shares,
            txn=self.txn,
            markers=self.markers,
            now_ms=now_ms,
        )
        self._closed = False
        if not config.cluster_mode:
            # (In a cluster a partition's open transactions are its coordinator's.)
            self.markers.abort_hanging(now_ms)
        #: Prometheus counters and gauges (:mod:`.metrics`).
        self.metrics = BrokerMetrics()
        self.metrics.attach(self)

    def _wire_cluster(self, config: BrokerConfig) -> None:
        """Cluster mode: this broker's replicas and its view of the cluster."""
        replicas = ReplicaManager(
            config.node_id,
            self.logs,
            replica_lag_time_max_ms=config.replica_lag_time_max_ms,
            min_insync_replicas=self._min_insync_replicas,
            on_high_watermark=self.cluster_host.high_watermark_moved,
            on_truncate=self.producers.forget,
            on_removed=self.cluster_host.replica_removed,
            on_role=self.cluster_host.leadership_changed,
        )
        self.cluster = ClusterView(
            config.node_id,
            self.logs,
            replicas,
            wake=self.purgatory.wake,
            on_topic_deleted=lambda topic: self.notify_topic_changed(topic, deleted=True),
            replication_window_num=config.replication_quota_window_num,
            replication_window_size_ms=config.replication_quota_window_size_seconds * 1000,
        )
        assert self.cluster_txn is not None
        self.txn_verification = TxnVerification(
            node_id=config.node_id,
            cluster=self.cluster,
            producers=self.producers,
            txn=self.txn,
            owns=self.cluster_txn.owns,
        )
        self.verify_transactional = self.txn_verification.verifier({})

    def _next_producer_id(self) -> int:
        return self._producer_ids.next()

    # -- the driver's calls ------------------------------------------------------

    def handle_frame(self, conn_id: int, frame: bytes | memoryview, now_ms: int) -> Outcome:
        """Decode one request frame (without its size prefix) and handle it.

        Never raises for bad input: malformed frames, unknown API keys and
        versions that cannot be answered become :class:`Close`. On a SASL
        listener, before the connection has authenticated, other requests than
        ApiVersions, SaslHandshake and SaslAuthenticate are a :class:`Close`, and
        after a v0 SaslHandshake ``frame`` is a bare SASL token, answered by a
        :class:`SaslToken` (or a :class:`Close` when authentication fails).
        """
        self.now_ms = now_ms
        return self.dispatch.handle_frame(conn_id, frame, now_ms)

    def handle(self, conn_id: int, header: RequestHeader, body: Any, now_ms: int) -> Outcome:
        """Handle one decoded request of a served API and version.

        Trusts its caller: no SASL authentication check (:meth:`handle_frame`
        makes it).

        Raises:
            KeyError: the API key has no handler (use :meth:`handle_frame` for
                untrusted input).
        """
        self.now_ms = now_ms
        return self.dispatch.handle(conn_id, header, body, now_ms)

    def poll(self, now_ms: int) -> list[Completion]:
        """Completions due at ``now_ms``, and periodic work (retention, timers)."""
        self.now_ms = now_ms
        return self.periodic.poll(now_ms)

    def next_deadline(self) -> int | None:
        """The monotonic time (ms) at which :meth:`poll` has work, or None."""
        return self.periodic.next_deadline(self.now_ms)

    def has_ready(self) -> bool:
        """True when :meth:`poll` has completions to return without waiting.

        Markers waiting to be written (``markers.defer``) do not count:
        :meth:`next_deadline` asks for a poll at once instead, so that a driver
        polls after it has sent the answer that comes before them.
        """
        return self.purgatory.has_ready()

    def connection_opened(
        self, conn_id: int, peer: str, *, tls_subject: str | None = None
    ) -> ConnectionSession:
        """Open the session of a new connection (:meth:`.Sessions.opened`)."""
        return self.connections.opened(conn_id, peer, tls_subject=tls_subject)

    def connection_closed(self, conn_id: int) -> None:
        """Drop a connection's session and its parked request, if any.

        A member whose JoinGroup was parked on it is removed from its group at
        the next :meth:`poll` (the driver should poll soon after).
        """
        session = self.connections.closed(conn_id)
        self.telemetry.connection_closed(conn_id)
        self.shares.connection_closed(conn_id)
        if session is None:
            return
        token = self.purgatory.connection_closed(session)
        if token is not None:
            self.purgatory.release(self.groups.connection_closed([token]))

    def connection_throttle(self, peer: str, now_ms: int) -> int:
        """Count a new connection from ``peer`` (``host:port``) against its IP's
        ``connection_creation_rate``; 0 when within it, else how long the driver
        holds the connection, unread, before closing it (KIP-612)."""
        return self.dispatch.connection_throttle(peer, now_ms)

    # -- the cluster driver's calls ------------------------------------------------

    def adopt_cluster_id(self, cluster_id: str) -> None:
        """Take the id of the cluster this (new) data directory is joining."""
        write_meta(self.data_dir / "meta.properties", cluster_id, self.config.node_id)
        self.cluster_id = cluster_id

    def use_cluster_producer_ids(self, ids: ClusterProducerIds) -> None:
        """Hand out producer ids from the cluster's blocks (cluster mode)."""
        self._producer_ids = ids

    # -- the broker as a whole (BrokerPort) -----------------------------------------

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
        self.cluster_host.wake_parked(topic, partition)
        return True

    def pending_offset_partitions(self, group_id: str) -> set[tuple[str, int]]:
        """The partitions of a group with an offset an unfinished transaction holds
        (OffsetFetch's ``require_stable``): the transaction coordinator's on one
        node, the group coordinator's in a cluster."""
        store = self.groups.store
        if isinstance(store, ReplicatedOffsetStore):
            return store.pending_partitions(group_id)
        return self.txn.pending_offset_partitions(group_id)

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
        # Snapshots after the markers and before the logs: they describe the
        # logs as the clean close leaves them.
        closing: list[tuple[_Closes | None, str]] = [
            (self.markers, "cannot complete the transactions decided last"),
            (self.producers, "cannot snapshot the producer states; the next start replays"),
            (self.scram, "cannot close the SCRAM credential journal"),
            (self.share_groups, "cannot close the share-group journal"),
            (self.authorizer, "cannot close the ACL journal"),
            (self.quotas, "cannot close the client quota journal"),
            (self.tokens, "cannot close the delegation-token journal"),
            (self.features, "cannot close the feature journal"),
            (self.telemetry, "cannot close the client-metrics journal"),
            (self.shares, "cannot close the share-state journal"),
        ]
        try:
            for part, failed in closing:
                if part is not None:
                    try:
                        part.close()
                    except Exception:
                        log.exception(failed)
            try:
                self.txn.close()
            finally:
                self.groups.store.close()
        finally:
            self.logs.close()
