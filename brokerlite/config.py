"""brokerlite's one configuration object.

Rules:

* Every setting has one canonical Python name (a :class:`BrokerConfig` field) and
  may also be given by its Kafka ``server.properties`` name (``log.segment.bytes``)
  or a few spelled-out aliases (``listen="host:port"``). Dotted names that differ
  from the field name only by ``.`` versus ``_`` are accepted mechanically.
* Values may be typed (``1024``, ``True``) or strings as read from a properties
  file (``"1024"``, ``"true"``); they are converted to the field's type.
* An unknown key is an error naming it and, when one is close, the known key it
  probably meant. Keys of a stock Kafka ``server.properties`` that have no
  meaning for a single-node broker (thread counts, replication factors, KRaft
  quorum settings) are accepted and ignored, so a real file can be reused.
* Kafka's unit variants follow Kafka's precedence: ``log.retention.ms`` beats
  ``log.retention.minutes`` beats ``log.retention.hours`` whatever their order.
* The listener's security protocol comes from ``security_protocol`` or from the
  scheme of ``listeners`` (``SASL_SSL://host:port``; a listener name is looked
  up in ``listener.security.protocol.map`` given alongside). Given both ways,
  they must agree.
* Security settings fail closed (:mod:`.config_security` checks them): a SASL
  protocol without users, an SSL protocol without a certificate, TLS or SASL
  material on a listener that would not use it, or a cluster member of a SASL
  listener without its own login is an error, never a silently open listener.
* Secrets (``sasl_users``, ``ssl_key_password``, ``delegation_token_secret_key``,
  ``inter_broker_sasl_password``) never appear in ``repr`` or in
  :meth:`BrokerConfig.kafka_entries`.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from trafka.brokerlite.security.authorizer import authorizer_enabled, parse_super_users

from .config_keys import (
    GROUP_RANGES,
    IGNORED_KAFKA_KEYS,
    KAFKA_FIELD_NAMES,
    KAFKA_NAMES,
    PROTOCOL_MAP_KEY,
    SECURITY_PROTOCOLS,
    UNIT_VARIANTS,
    UNSUPPORTED_KAFKA_KEYS,
    ConfigError,
    JaasLogin,
    check_user,
    first_listener,
    jaas_key,
    kafka_name,
    listener_name_of,
    parse_jaas,
    parse_properties,
    parse_protocol_map,
    read_users_file,
    split_host_port,
)
from .config_security import (
    SASL_MECHANISMS,
    SSL_CLIENT_AUTH,
    check_inter_broker,
    check_security,
    listener_names,
)

__all__ = [
    "PROTOCOL_VERSIONS",
    "SECURITY_PROTOCOLS",
    "SSL_CLIENT_AUTH",
    "BrokerConfig",
    "ConfigError",
    "IGNORED_KAFKA_KEYS",
    "check_user",
    "known_keys",
    "read_users_file",
]

log = logging.getLogger("trafka.brokerlite.config")


#: The releases whose request version ranges brokerlite can serve (``protocol_version``).
PROTOCOL_VERSIONS = ("3.9", "4.0")


@dataclasses.dataclass(frozen=True, slots=True, kw_only=True)
class BrokerConfig:
    """Settings of one brokerlite node (defaults are Kafka's where Kafka has one).

    Build with keywords (``BrokerConfig(port=0)``), from any mix of Python and
    Kafka names (:meth:`from_mapping`, :meth:`with_overrides`) or from a
    ``server.properties`` file (:meth:`from_properties`).

    Attributes:
        host: interface to listen on.
        port: TCP port; 0 picks a free one (see ``RunningBroker.address``).
        advertised_listener: ``host:port`` given to clients in Metadata; ``None``
            advertises the bound address.
        data_dir: where topics, group offsets and broker metadata live.
        node_id: this broker's id in Metadata.
        cluster_id: ``None`` generates one on first start and keeps it in ``data_dir``.
        num_partitions: partitions of an auto-created topic, and of CreateTopics
            with ``num_partitions=-1``.
        max_partitions: the most partitions the broker holds (Kafka-style name
            ``max.partitions``, KIP-578's); CreateTopics and CreatePartitions past
            it get POLICY_VIOLATION. ``None`` (default): what the process's
            open-file limit allows (:meth:`partition_limit`).
        auto_create_topics: create unknown topics on Metadata requests that allow it.
        log_segment_bytes, log_segment_ms, log_retention_ms, log_retention_bytes,
        log_index_interval_bytes, log_message_timestamp_type, message_max_bytes,
        flush_interval_messages, flush_interval_ms: topic defaults, as Kafka's
            ``log.*`` settings (``flush_*=None`` leaves flushing to the OS).
        log_retention_check_interval_ms: how often retention is applied.
        log_cleaner_enable: compact the topics whose ``cleanup.policy`` includes
            ``compact`` (Kafka's ``log.cleaner.enable``).
        log_cleaner_backoff_ms: how long the cleaner waits when no partition
            needs compacting (``log.cleaner.backoff.ms``).
        log_cleanup_policy, log_cleaner_delete_retention_ms,
        log_cleaner_min_cleanable_ratio, log_cleaner_min_compaction_lag_ms,
        log_cleaner_max_compaction_lag_ms: topic defaults for compaction, as
            Kafka's settings of those names (``log.cleanup.policy``...).
        group_initial_rebalance_delay_ms: wait for more members before the first
            rebalance of an empty group (Kafka 3000; tests use 0).
        group_min_session_timeout_ms, group_max_session_timeout_ms: accepted
            session timeouts of group members.
        group_consumer_session_timeout_ms, group_consumer_heartbeat_interval_ms:
            the session timeout and heartbeat interval of consumer groups of the
            new protocol (KIP-848), set by the broker rather than the members;
            each group may override them (``consumer.*`` group configs) within
            the ``group_consumer_min_*`` and ``group_consumer_max_*`` bounds, which
            hold the broker's own values too (Kafka's ``group.consumer.*``).
        group_share_session_timeout_ms, group_share_heartbeat_interval_ms,
        group_share_record_lock_duration_ms, group_share_delivery_count_limit,
        group_share_partition_max_record_locks: share groups' (KIP-932) defaults,
            which each group may override (``share.*`` group configs) within the
            matching ``group_share_min_*`` and ``group_share_max_*`` bounds, as
            Kafka's ``group.share.*`` settings of those names.
        group_share_max_size: the most members a share group may have.
        errors_deadletterqueue_topic_name_prefix: the prefix every share group's
            dead-letter queue topic must have (KIP-1191; Kafka 4.4's
            ``errors.deadletterqueue.topic.name.prefix``, ``dlq.``; ``""``: any).
        errors_deadletterqueue_auto_create_topics_enable: create a share group's
            missing DLQ topic when a dead letter is written (Kafka 4.4's
            ``errors.deadletterqueue.auto.create.topics.enable``, false).
        socket_request_max_bytes: largest request frame accepted.
        queued_max_request_bytes: the most bytes of requests still arriving held
            across all connections (Kafka's ``queued.max.request.bytes``): a
            request that does not arrive whole reserves its size before the rest
            is read, and a connection whose request does not fit is not read until
            others complete (:mod:`trafka.common.request_budget`). Default
            100 MiB; -1 for no bound (Kafka's default).
        connections_max_idle_ms: a connection with no request under way and
            nothing received for this long is closed (Kafka's
            ``connections.max.idle.ms``, default 10 minutes; -1 never).
        request_receive_timeout_ms: a request must arrive whole within this long
            of its first byte, time spent waiting for
            ``queued_max_request_bytes`` not counted; a connection that stops
            mid-request is closed (brokerlite's own, default 30 s; -1 never).
        transaction_max_timeout_ms: the largest ``transaction.timeout.ms`` a
            transactional producer may ask for (Kafka's
            ``transaction.max.timeout.ms``).
        add_partitions_to_txn_retry_backoff_ms: in a cluster, how long a
            Produce v12+ whose partition the transaction coordinator cannot add
            yet (CONCURRENT_TRANSACTIONS: the last transaction's markers not all
            written) waits before the leader asks again (Kafka 4.0+'s
            ``add.partitions.to.txn.retry.backoff.ms``, KAFKA-18654).
        add_partitions_to_txn_retry_backoff_max_ms: how long from the first
            question the leader goes on asking; then the Produce is answered
            NOT_ENOUGH_REPLICAS (retriable), as before (Kafka's
            ``add.partitions.to.txn.retry.backoff.max.ms``; 0: never again).
        transactional_id_expiration_ms: a transactional id without a transaction
            is forgotten after this long (``transactional.id.expiration.ms``).
        transaction_remove_expired_transaction_cleanup_interval_ms: how often
            expired transactional ids are looked for.
        producer_id_expiration_ms: an idempotent producer's sequence state on a
            partition is forgotten this long after its last write
            (``producer.id.expiration.ms``).
        producer_id_expiration_check_interval_ms: how often that is checked.
        max_incremental_fetch_session_cache_slots: the most incremental fetch
            sessions (KIP-227) kept at once; 0 creates none, so every fetch is
            a full one (``max.incremental.fetch.session.cache.slots``).
        security_protocol: the listener's: ``PLAINTEXT`` (default), ``SSL``,
            ``SASL_PLAINTEXT`` or ``SASL_SSL`` (also the scheme of ``listeners``).
        sasl_enabled_mechanisms: the SASL mechanisms offered on a SASL listener
            (``PLAIN``, ``SCRAM-SHA-256``, ``SCRAM-SHA-512``; default all three).
        sasl_users: ``(name, password)`` pairs; given as a mapping, as
            ``"name:password"`` strings, or as one comma-separated string of them.
            SCRAM credentials are derived from them when the broker starts.
        sasl_users_file: a file of more users, one ``name:password`` a line
            (``#`` starts a comment), read when the broker starts.
        sasl_oauthbearer_sub_claim_name, sasl_oauthbearer_scope_claim_name,
        sasl_oauthbearer_clock_skew_seconds, sasl_oauthbearer_expected_audience,
        sasl_oauthbearer_expected_issuer: how OAUTHBEARER tokens are checked, as
            Kafka's settings of those names (KIP-768); brokerlite accepts unsecured
            tokens (``alg: none``, Kafka's development validator) unless
            ``sasl_oauthbearer_jwks_endpoint_url`` is set.
        sasl_oauthbearer_jwks_endpoint_url: the identity provider's JWK set (an
            https, http or file URL): tokens must then be signed with one of its
            keys (KIP-768); read at start and every
            ``sasl_oauthbearer_jwks_endpoint_refresh_ms``.
        sasl_oauthbearer_required_scopes: scopes every token must carry (Kafka's
            ``unsecuredValidatorRequiredScope`` option).
        sasl_server_max_receive_size: the largest request accepted before a
            connection has authenticated (Kafka's ``sasl.server.max.receive.size``).
        ssl_certfile: the broker's certificate chain, PEM (the key may be in the
            same file).
        ssl_keyfile: the broker's private key, PEM.
        ssl_key_password: the private key's password, if it is encrypted.
        ssl_cafile: PEM certificates of the authorities whose client certificates
            are accepted (for ``ssl_client_auth``).
        ssl_client_auth: ``none`` (default), ``requested`` or ``required``: whether
            clients must present a certificate signed by ``ssl_cafile`` (Kafka's
            ``ssl.client.auth``).
        ssl_principal_mapping_rules: how a client certificate's subject becomes
            its principal's name (Kafka's ``ssl.principal.mapping.rules``,
            KIP-371): ``RULE:pattern/replacement/[LU]`` and ``DEFAULT`` rules,
            comma-separated, the first whose pattern matches the whole subject
            applying (:mod:`trafka.common.x500`); a subject no rule matches fails
            the client's connection, as on Kafka. ``DEFAULT`` (the default): the
            subject itself.
        connection_failed_authentication_delay_ms: how long a connection that
            failed to authenticate waits, after its answer, before it is closed.
        connections_max_reauth_ms: the longest a SASL session lasts before the
            client must re-authenticate on its connection (KIP-368); 0, the
            default, means no limit (OAUTHBEARER sessions still end when their
            token expires, as Kafka's do).
        authorizer_class_name: Kafka's ``authorizer.class.name``: naming Kafka's
            standard authorizer (``org.apache.kafka.metadata.authorizer.StandardAuthorizer``
            or ``kafka.security.authorizer.AclAuthorizer``) turns on ACL
            authorization (:mod:`trafka.brokerlite.security.authorizer`); unset, every
            request is allowed and the ACL APIs answer SECURITY_DISABLED.
        super_users: principals allowed everything (``User:admin``); from
            Kafka's ``super.users``, separated by ``;``.
        allow_everyone_if_no_acl_found: allow what no ACL names a resource for
            (Kafka's ``allow.everyone.if.no.acl.found``; default: deny).
        delegation_token_secret_key: the secret that signs delegation tokens
            (Kafka's ``delegation.token.secret.key``, or its older
            ``delegation.token.master.key``); unset, the default, disables them
            (:mod:`trafka.brokerlite.security.delegation_tokens`). Changing it invalidates
            every token issued before.
        delegation_token_max_lifetime_ms: the longest a token lives, renewals
            included (default 7 days).
        delegation_token_expiry_time_ms: how long a token lives before it must be
            renewed (default 24 hours).
        delegation_token_expiry_check_interval_ms: how often expired tokens are
            removed (default 1 hour).
        quota_window_num: how many samples a client quota's rate is kept in
            (Kafka's ``quota.window.num``; :mod:`trafka.brokerlite.quotas`).
        quota_window_size_seconds: the length of one sample (Kafka's
            ``quota.window.size.seconds``).
        protocol_version: whose request versions are served and advertised:
            ``"3.9"`` (the default) also serves the versions Kafka 4.0 removed
            (KIP-896: Produce v0-2 with message sets v0/v1, Fetch v0-3,
            JoinGroup v0-1...), which clients older than Kafka 4 send;
            ``"4.0"`` serves only Kafka 4.0's ranges. In a ``server.properties``
            file: ``trafka.protocol.version``.
        client_telemetry_enabled: serve and advertise GetTelemetrySubscriptions
            and PushTelemetry (KIP-714). On by default: brokerlite's receiver is
            built in, and Kafka advertises the two APIs exactly when a telemetry
            receiver is configured. Off, brokerlite acts as a Kafka broker
            without one: the APIs are left out of ApiVersions and a request for
            them closes the connection. Client-metrics resources can be
            configured either way.
        telemetry_max_bytes: the largest PushTelemetry metrics accepted, compressed
            or decompressed (Kafka's ``telemetry.max.bytes``, default 1 MiB;
            KIP-714, :mod:`trafka.brokerlite.telemetry`).
        client_telemetry_file: append each accepted PushTelemetry, decoded, as
            one JSON line to this file; unset (the default), pushes are only
            kept in memory (``broker.telemetry``).
        announce: announce the listener on the local network (zeroconf, service
            type ``_kafka._tcp``) with its cluster id, node id and security
            protocol, so that clients with ``bootstrap.servers=zeroconf`` find it.
        metrics_listen: ``host:port`` of an HTTP listener serving Prometheus
            metrics (``/metrics``) and health (``/healthz``, ``/readyz``); None
            (the default): none. Port 0 picks a free port.
        console_listen: ``host:port`` of the web console (:mod:`trafka.console`,
            the ``console`` extra) showing this broker's cluster, which it
            reaches as any client does, through the broker's own listener
            (so only a PLAINTEXT one); None (the default): none. Port 0 picks a
            free port.
        schema_registry_listen: ``host:port`` of a Schema Registry speaking
            Confluent's REST API (:mod:`.registry`, the ``schemas`` extra),
            keeping its schemas in the ``_schemas`` topic, reached through the
            broker's own (PLAINTEXT) listener; None (the default): none.
        zookeeper_connect: ``host:port[,host:port...][/chroot]`` of the ZooKeeper
            ensemble of a cluster (Kafka's ``zookeeper.connect``); None (the
            default) runs the single-node broker, without ZooKeeper.
        zookeeper_session_timeout_ms: the ZooKeeper session's timeout: how long a
            broker that stops answering stays registered (Kafka's 18 s).
        zookeeper_connection_timeout_ms: how long the broker waits for ZooKeeper
            when it starts (None: the session timeout).
        default_replication_factor: replicas of an auto-created topic and of
            CreateTopics with ``replication_factor=-1`` (cluster mode).
        min_insync_replicas: the default of the topic config ``min.insync.replicas``.
        replica_lag_time_max_ms: a follower not caught up for this long leaves the ISR.
        replica_fetch_wait_max_ms: a follower's fetch long-polls its leader this long.
        replica_fetch_max_bytes: the most bytes a follower fetches per partition at once.
        replication_quota_window_num: how many samples the replication throttles'
            rates are kept in (Kafka's ``replication.quota.window.num``;
            :mod:`trafka.brokerlite.cluster.replication_quotas`).
        replication_quota_window_size_seconds: the length of one sample (Kafka's
            ``replication.quota.window.size.seconds``).
        unclean_leader_election_enable: the default of the topic config of that
            name: may a replica outside the ISR lead when no ISR member is live.
        offsets_topic_num_partitions: partitions of ``__consumer_offsets``, which
            places each group's coordinator (cluster mode); a single node lists
            the topic with as many (its data kept in the node's journal).
        offsets_topic_replication_factor: its replication factor (at most the
            brokers live when it is created).
        transaction_state_log_num_partitions: partitions of ``__transaction_state``,
            which places each transactional id's coordinator (cluster mode; a
            single node lists the topic with as many).
        transaction_state_log_replication_factor: its replication factor (at most
            the brokers live when it is created).
        share_coordinator_state_topic_num_partitions: partitions of
            ``__share_group_state``, which places each share-partition's share
            coordinator (cluster mode, KIP-932; a single node lists the topic
            with as many).
        share_coordinator_state_topic_replication_factor: its replication factor
            (at most the brokers live when it is created).
        auto_leader_rebalance_enable: the controller moves leadership back to
            preferred replicas every ``leader_imbalance_check_interval_seconds``.
        leader_imbalance_check_interval_seconds: how often it checks.
        controlled_shutdown_enable: a stopping cluster member first hands its
            leadership over (it deregisters and waits for the controller's
            elections), so that clients are moved, not cut off.
        controlled_shutdown_timeout_ms: how long it waits for that at most.
        security_inter_broker_protocol: Kafka's ``security.inter.broker.protocol``.
            brokerlite has one listener and brokers reach each other on it, so
            this may only repeat its protocol (a contradiction is an error).
        inter_broker_listener_name: Kafka's ``inter.broker.listener.name``: the
            same, by listener name; only one of the two may be set (Kafka's rule).
        sasl_mechanism_inter_broker_protocol: the mechanism a broker logs in to
            the others with on a SASL listener: PLAIN, SCRAM-SHA-256 or
            SCRAM-SHA-512, one of ``sasl_enabled_mechanisms``. Unset: the first
            of those (Kafka's default, GSSAPI, is not served by brokerlite).
        inter_broker_sasl_username, inter_broker_sasl_password: the broker's own
            login for that mechanism; required in cluster mode on a SASL
            listener. Kafka's ``listener.name.<listener>.<mechanism>.sasl.jaas.config``
            (``...ScramLoginModule required username="broker" password="...";``)
            sets them too; a PLAIN module's ``user_<name>="<password>"`` options
            add PLAIN users, as on Kafka. A SCRAM login's credentials live in
            ZooKeeper (``/config/users/<name>``), as Kafka keeps them.
        sasl_jaas_logins: the parsed JAAS lines (set through their Kafka keys).
        ssl_endpoint_identification_algorithm: ``https`` (the default, Kafka's):
            a broker connecting to another over TLS checks that the certificate
            names the host it registered; empty: it checks the chain only.
    """

    host: str = "127.0.0.1"
    port: int = 9092
    advertised_listener: str | None = None
    data_dir: Path = Path("trafka-data")
    node_id: int = 1
    cluster_id: str | None = None
    num_partitions: int = 1
    max_partitions: int | None = None
    auto_create_topics: bool = True
    log_segment_bytes: int = 1_073_741_824
    log_segment_ms: int = 604_800_000
    log_retention_ms: int = 604_800_000
    log_retention_bytes: int = -1
    log_index_interval_bytes: int = 4096
    log_message_timestamp_type: str = "CreateTime"
    message_max_bytes: int = 1_048_588
    flush_interval_messages: int | None = None
    flush_interval_ms: int | None = None
    log_retention_check_interval_ms: int = 300_000
    log_cleaner_enable: bool = True
    log_cleaner_backoff_ms: int = 15_000
    log_cleanup_policy: str = "delete"
    log_cleaner_delete_retention_ms: int = 86_400_000
    log_cleaner_min_cleanable_ratio: float = 0.5
    log_cleaner_min_compaction_lag_ms: int = 0
    log_cleaner_max_compaction_lag_ms: int = 2**63 - 1
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_heartbeat_interval_ms: int = 5_000
    group_consumer_min_heartbeat_interval_ms: int = 5_000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_share_session_timeout_ms: int = 45_000
    group_share_min_session_timeout_ms: int = 45_000
    group_share_max_session_timeout_ms: int = 60_000
    group_share_heartbeat_interval_ms: int = 5_000
    group_share_min_heartbeat_interval_ms: int = 5_000
    group_share_max_heartbeat_interval_ms: int = 15_000
    group_share_max_size: int = 200
    group_share_record_lock_duration_ms: int = 30_000
    group_share_min_record_lock_duration_ms: int = 15_000
    group_share_max_record_lock_duration_ms: int = 60_000
    group_share_delivery_count_limit: int = 5
    group_share_min_delivery_count_limit: int = 2
    group_share_max_delivery_count_limit: int = 10
    group_share_partition_max_record_locks: int = 2000
    group_share_min_partition_max_record_locks: int = 100
    group_share_max_partition_max_record_locks: int = 4000
    errors_deadletterqueue_topic_name_prefix: str = "dlq."
    errors_deadletterqueue_auto_create_topics_enable: bool = False
    socket_request_max_bytes: int = 104_857_600
    queued_max_request_bytes: int = 104_857_600
    connections_max_idle_ms: int = 600_000
    request_receive_timeout_ms: int = 30_000
    transaction_max_timeout_ms: int = 900_000
    add_partitions_to_txn_retry_backoff_ms: int = 20
    add_partitions_to_txn_retry_backoff_max_ms: int = 100
    transactional_id_expiration_ms: int = 604_800_000
    transaction_remove_expired_transaction_cleanup_interval_ms: int = 3_600_000
    producer_id_expiration_ms: int = 86_400_000
    producer_id_expiration_check_interval_ms: int = 600_000
    max_incremental_fetch_session_cache_slots: int = 1000
    security_protocol: str = "PLAINTEXT"
    sasl_enabled_mechanisms: tuple[str, ...] = SASL_MECHANISMS
    sasl_users: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    sasl_users_file: Path | None = None
    sasl_server_max_receive_size: int = 524_288
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_scope_claim_name: str = "scope"
    sasl_oauthbearer_clock_skew_seconds: int = 30
    sasl_oauthbearer_expected_audience: tuple[str, ...] = ()
    sasl_oauthbearer_expected_issuer: str | None = None
    sasl_oauthbearer_required_scopes: tuple[str, ...] = ()
    sasl_oauthbearer_jwks_endpoint_url: str | None = None
    sasl_oauthbearer_jwks_endpoint_refresh_ms: int = 3_600_000
    ssl_certfile: Path | None = None
    ssl_keyfile: Path | None = None
    ssl_key_password: str | None = dataclasses.field(default=None, repr=False)
    ssl_cafile: Path | None = None
    ssl_client_auth: str = "none"
    ssl_principal_mapping_rules: str = "DEFAULT"
    connection_failed_authentication_delay_ms: int = 100
    connections_max_reauth_ms: int = 0
    authorizer_class_name: str | None = None
    super_users: tuple[str, ...] = ()
    allow_everyone_if_no_acl_found: bool = False
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1
    delegation_token_secret_key: str | None = dataclasses.field(default=None, repr=False)
    delegation_token_max_lifetime_ms: int = 604_800_000
    delegation_token_expiry_time_ms: int = 86_400_000
    delegation_token_expiry_check_interval_ms: int = 3_600_000
    protocol_version: str = "3.9"
    client_telemetry_enabled: bool = True
    telemetry_max_bytes: int = 1_048_576
    client_telemetry_file: Path | None = None
    announce: bool = False
    metrics_listen: str | None = None
    console_listen: str | None = None
    schema_registry_listen: str | None = None
    zookeeper_connect: str | None = None
    zookeeper_session_timeout_ms: int = 18_000
    zookeeper_connection_timeout_ms: int | None = None
    default_replication_factor: int = 1
    min_insync_replicas: int = 1
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_max_bytes: int = 1_048_576
    replication_quota_window_num: int = 11
    replication_quota_window_size_seconds: int = 1
    unclean_leader_election_enable: bool = False
    offsets_topic_num_partitions: int = 50
    offsets_topic_replication_factor: int = 3
    transaction_state_log_num_partitions: int = 50
    transaction_state_log_replication_factor: int = 3
    share_coordinator_state_topic_num_partitions: int = 50
    share_coordinator_state_topic_replication_factor: int = 3
    auto_leader_rebalance_enable: bool = True
    leader_imbalance_check_interval_seconds: int = 300
    controlled_shutdown_enable: bool = True
    controlled_shutdown_timeout_ms: int = 10_000
    security_inter_broker_protocol: str | None = None
    inter_broker_listener_name: str | None = None
    sasl_mechanism_inter_broker_protocol: str | None = None
    inter_broker_sasl_username: str | None = None
    inter_broker_sasl_password: str | None = dataclasses.field(default=None, repr=False)
    sasl_jaas_logins: tuple[JaasLogin, ...] = dataclasses.field(default=(), repr=False)
    ssl_endpoint_identification_algorithm: str = "https"

    @property
    def cluster_mode(self) -> bool:
        """True when the broker joins a ZooKeeper-coordinated cluster."""
        return self.zookeeper_connect is not None

    def partition_limit(self) -> int:
        """``max_partitions``, or when unset what the open-file limit allows: a
        partition keeps three files open per segment (about four counted per
        partition), and 1,000 descriptors are kept for connections and journals."""
        if self.max_partitions is not None:
            return self.max_partitions
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        if soft == resource.RLIM_INFINITY:
            return 1_000_000
        return max(100, (soft - 1000) // 4)

    def __post_init__(self) -> None:
        # Normalise the settings given in other shapes, then check them all.
        _check_basics(self)
        _check_limits(self)

    # -- derived ---------------------------------------------------------------

    @property
    def sasl_enabled(self) -> bool:
        """True when the listener authenticates clients with SASL."""
        return self.security_protocol in ("SASL_PLAINTEXT", "SASL_SSL")

    @property
    def tls_enabled(self) -> bool:
        """True when the listener speaks TLS."""
        return self.security_protocol in ("SSL", "SASL_SSL")

    def advertised_address(self, bound: tuple[str, int]) -> tuple[str, int]:
        """The (host, port) clients are told to connect to, given the bound address."""
        if self.advertised_listener is not None:
            return split_host_port(self.advertised_listener, "advertised_listener")
        host, port = bound
        if host in ("", "0.0.0.0", "::"):
            host = "127.0.0.1"
        return host, port

    # -- building --------------------------------------------------------------

    @classmethod
    def from_mapping(cls, settings: Mapping[str, Any]) -> BrokerConfig:
        """A config from Python and/or Kafka names (strings are converted).

        Raises:
            ConfigError: unknown key (the message names the closest known one) or
                invalid value.
        """
        return cls().with_overrides(settings)

    @classmethod
    def from_properties(cls, path: str | Path, base: BrokerConfig | None = None) -> BrokerConfig:
        """Read a Kafka-style ``server.properties`` file.

        ``#`` and ``!`` start comments; ``key=value`` or ``key: value`` per line;
        a trailing backslash continues a line. The file's settings apply on top of
        ``base`` (default: the defaults).

        Raises:
            ConfigError: unknown key or invalid value (names the file and line).
            OSError: the file cannot be read.
        """
        settings: dict[str, str] = {}
        for key, value in parse_properties(Path(path).read_text(encoding="utf-8"), str(path)):
            settings[key] = value
        return (base or cls()).with_overrides(settings)

    def with_overrides(self, overrides: Mapping[str, Any]) -> BrokerConfig:
        """A copy with ``overrides`` applied (Python or Kafka names).

        Raises:
            ConfigError: unknown key or invalid value.
        """
        changes: dict[str, Any] = {}
        scaled: list[tuple[int, str, int, Any, str]] = []
        listener: tuple[str, str] | None = None  # (listener name, the key that named it)
        protocol_map = parse_protocol_map(overrides.get(PROTOCOL_MAP_KEY))
        logins: list[JaasLogin] = []
        for key, value in overrides.items():
            if key == PROTOCOL_MAP_KEY:
                continue
            if isinstance(key, str) and jaas_key(key) is not None:
                logins.append(parse_jaas(key, value))
                continue
            for rank, (name, field, factor) in enumerate(UNIT_VARIANTS):
                if key == name:
                    scaled.append((rank, field, factor, value, key))
                    break
            else:
                resolved = _resolve_key(key)
                if resolved is None:
                    log.info("ignoring %s: it has no effect on a single-node brokerlite", key)
                    continue
                field = resolved
                if field == "listen":
                    host, port = split_host_port(first_listener(value), key)
                    changes["host"], changes["port"] = host or "0.0.0.0", port
                    listener_name = listener_name_of(value)
                    if listener_name is not None:
                        listener = (listener_name, key)
                elif field == "super_users":
                    changes[field] = value  # parsed and checked by __post_init__
                elif field in (
                    "sasl_users",
                    "sasl_enabled_mechanisms",
                    "sasl_oauthbearer_expected_audience",
                    "sasl_oauthbearer_required_scopes",
                ):
                    changes[field] = value  # normalised and checked by __post_init__
                elif field == "advertised_listener":
                    changes[field] = None if value is None else first_listener(value)
                elif field == "data_dir":
                    changes[field] = Path(str(value).split(",")[0].strip())
                else:
                    changes[field] = _convert(field, value, key)
        # An explicit millisecond value wins over its coarser-unit variants.
        for _rank, field, factor, value, key in sorted(scaled, key=lambda item: -item[0]):
            if field in changes:
                continue
            number = _convert(field, value, key)
            changes[field] = number * factor if number >= 0 else number  # -1: forever
        if listener is not None:
            listener_name, key = listener
            protocol = protocol_map.get(
                listener_name, listener_name if listener_name in SECURITY_PROTOCOLS else None
            )
            if protocol is None:
                raise ConfigError(
                    f"{key}: listener name {listener_name!r} is not a security protocol "
                    f"({', '.join(SECURITY_PROTOCOLS)}) and {PROTOCOL_MAP_KEY} does not map it"
                )
            explicit = changes.get("security_protocol")
            if explicit is not None and str(explicit).strip().upper() != protocol:
                raise ConfigError(
                    f"security_protocol {explicit!r} contradicts {key} "
                    f"({listener_name}: {protocol})"
                )
            changes["security_protocol"] = protocol
        listener_names(self, changes, None if listener is None else listener[0], logins)
        try:
            return dataclasses.replace(self, **changes)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, ConfigError):
                raise
            raise ConfigError(str(exc)) from exc

    def kafka_entries(self) -> list[tuple[str, str | None, bool]]:
        """The settings under their Kafka names: ``(name, value, is_default)``.

        This is what DescribeConfigs reports for the broker resource.
        """
        default = BrokerConfig()
        host, port = self.host, self.port
        out: list[tuple[str, str | None, bool]] = [
            (
                "listeners",
                f"{self.security_protocol}://{host}:{port}",
                (host, port, self.security_protocol)
                == (default.host, default.port, default.security_protocol),
            ),
            (
                "advertised.listeners",
                None
                if self.advertised_listener is None
                else f"{self.security_protocol}://{self.advertised_listener}",
                self.advertised_listener is None,
            ),
            ("log.dirs", str(self.data_dir), self.data_dir == default.data_dir),
            ("node.id", str(self.node_id), self.node_id == default.node_id),
            ("broker.id", str(self.node_id), self.node_id == default.node_id),
        ]
        for field, name in KAFKA_FIELD_NAMES.items():
            value = getattr(self, field)
            text = (
                None
                if value is None
                else (str(value).lower() if isinstance(value, bool) else str(value))
            )
            out.append((name, text, value == getattr(default, field)))
        return out

    def as_log_config_kwargs(self) -> dict[str, Any]:
        """The topic defaults as ``LogConfig`` keyword arguments."""
        return {
            "segment_bytes": self.log_segment_bytes,
            "segment_ms": self.log_segment_ms,
            "retention_ms": self.log_retention_ms,
            "retention_bytes": self.log_retention_bytes,
            "index_interval_bytes": self.log_index_interval_bytes,
            "flush_interval_messages": self.flush_interval_messages,
            "flush_interval_ms": self.flush_interval_ms,
            "message_max_bytes": self.message_max_bytes,
            "message_timestamp_type": self.log_message_timestamp_type,
            "cleanup_policy": self.log_cleanup_policy,
            "delete_retention_ms": self.log_cleaner_delete_retention_ms,
            "min_cleanable_dirty_ratio": self.log_cleaner_min_cleanable_ratio,
            "min_compaction_lag_ms": self.log_cleaner_min_compaction_lag_ms,
            "max_compaction_lag_ms": self.log_cleaner_max_compaction_lag_ms,
        }


def _check_basics(cfg: BrokerConfig) -> None:
    """The paths, security, listeners, counts and group settings."""
    if not isinstance(cfg.data_dir, Path):
        object.__setattr__(cfg, "data_dir", Path(cfg.data_dir))
    check_security(cfg)
    if not 0 <= cfg.port <= 65535:
        raise ConfigError(f"port: {cfg.port} is not a TCP port")
    if cfg.advertised_listener is not None:
        split_host_port(cfg.advertised_listener, "advertised_listener")
    if cfg.metrics_listen is not None:
        split_host_port(cfg.metrics_listen, "metrics_listen")
    if cfg.schema_registry_listen is not None:
        split_host_port(cfg.schema_registry_listen, "schema_registry_listen")
        if cfg.security_protocol != "PLAINTEXT":
            raise ConfigError(
                "schema_registry_listen: the registry reaches the broker as a plain client, "
                f"which a {cfg.security_protocol} listener refuses"
            )
    if cfg.console_listen is not None:
        split_host_port(cfg.console_listen, "console_listen")
        if cfg.security_protocol != "PLAINTEXT":
            raise ConfigError(
                "console_listen: the console reaches the broker as a plain client, "
                f"which a {cfg.security_protocol} listener refuses; run `trafka console` "
                "with the client's security settings (-X) instead"
            )
    if cfg.num_partitions < 1:
        raise ConfigError(f"num_partitions: must be >= 1, got {cfg.num_partitions}")
    if cfg.max_partitions is not None and cfg.max_partitions < 1:
        raise ConfigError(f"max_partitions: must be >= 1, got {cfg.max_partitions}")
    if cfg.node_id < 0:
        raise ConfigError(f"node_id: must be >= 0, got {cfg.node_id}")
    _check_cluster(cfg)
    check_inter_broker(cfg)
    _check_group_settings(cfg)


def _check_limits(cfg: BrokerConfig) -> None:
    """The sizes, intervals and policies."""
    for name in (
        "log_segment_bytes",
        "log_segment_ms",
        "log_index_interval_bytes",
        "message_max_bytes",
        "log_retention_check_interval_ms",
        "log_cleaner_backoff_ms",
        "socket_request_max_bytes",
        "transaction_max_timeout_ms",
        "add_partitions_to_txn_retry_backoff_ms",
        "transactional_id_expiration_ms",
        "transaction_remove_expired_transaction_cleanup_interval_ms",
        "producer_id_expiration_ms",
        "producer_id_expiration_check_interval_ms",
        "sasl_server_max_receive_size",
        "quota_window_num",
        "quota_window_size_seconds",
        "replication_quota_window_num",
        "replication_quota_window_size_seconds",
        "delegation_token_max_lifetime_ms",
        "delegation_token_expiry_time_ms",
        "delegation_token_expiry_check_interval_ms",
        "telemetry_max_bytes",
    ):
        if getattr(cfg, name) <= 0:
            raise ConfigError(f"{name}: must be > 0, got {getattr(cfg, name)}")
    if cfg.log_segment_bytes < 14:
        raise ConfigError("log_segment_bytes: must be at least 14 bytes")
    for name in ("log_retention_ms", "log_retention_bytes"):
        if getattr(cfg, name) < -1:
            raise ConfigError(f"{name}: must be >= -1 (-1 = unlimited)")
    if cfg.add_partitions_to_txn_retry_backoff_max_ms < 0:
        raise ConfigError("add_partitions_to_txn_retry_backoff_max_ms: must be >= 0")
    if cfg.group_initial_rebalance_delay_ms < 0:
        raise ConfigError("group_initial_rebalance_delay_ms: must be >= 0")
    if cfg.connection_failed_authentication_delay_ms < 0:
        raise ConfigError("connection_failed_authentication_delay_ms: must be >= 0")
    if cfg.max_incremental_fetch_session_cache_slots < 0:
        raise ConfigError("max_incremental_fetch_session_cache_slots: must be >= 0")
    if cfg.connections_max_reauth_ms < 0:
        raise ConfigError("connections_max_reauth_ms: must be >= 0")
    for name in (
        "queued_max_request_bytes",
        "connections_max_idle_ms",
        "request_receive_timeout_ms",
    ):
        if getattr(cfg, name) <= 0 and getattr(cfg, name) != -1:
            raise ConfigError(f"{name}: must be > 0, or -1 for no limit")
    try:
        authorizer_enabled(cfg.authorizer_class_name)
        object.__setattr__(cfg, "super_users", parse_super_users(cfg.super_users))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if cfg.protocol_version not in PROTOCOL_VERSIONS:
        raise ConfigError(
            f"protocol_version: must be one of {', '.join(PROTOCOL_VERSIONS)}, "
            f"got {cfg.protocol_version!r}"
        )
    if cfg.log_message_timestamp_type not in ("CreateTime", "LogAppendTime"):
        raise ConfigError(
            "log_message_timestamp_type: must be CreateTime or LogAppendTime, "
            f"got {cfg.log_message_timestamp_type!r}"
        )
    for name in ("flush_interval_messages", "flush_interval_ms"):
        value = getattr(cfg, name)
        if value is not None and value <= 0:
            raise ConfigError(f"{name}: must be > 0 or None")
    policies = {p.strip() for p in cfg.log_cleanup_policy.split(",")}
    if not policies <= {"delete", "compact"}:
        raise ConfigError(
            f"log_cleanup_policy: must be delete and/or compact, got {cfg.log_cleanup_policy!r}"
        )
    object.__setattr__(cfg, "log_cleanup_policy", ",".join(sorted(policies)))
    if not 0 <= cfg.log_cleaner_min_cleanable_ratio <= 1:
        raise ConfigError("log_cleaner_min_cleanable_ratio: must be in [0, 1]")
    for name in ("log_cleaner_delete_retention_ms", "log_cleaner_min_compaction_lag_ms"):
        if getattr(cfg, name) < 0:
            raise ConfigError(f"{name}: must be >= 0")
    if cfg.log_cleaner_max_compaction_lag_ms < 1:
        raise ConfigError("log_cleaner_max_compaction_lag_ms: must be > 0")


def _check_cluster(cfg: BrokerConfig) -> None:
    """The cluster settings' ranges, and ``zookeeper_connect``'s form."""
    for name in (
        "default_replication_factor",
        "min_insync_replicas",
        "offsets_topic_num_partitions",
        "offsets_topic_replication_factor",
        "transaction_state_log_num_partitions",
        "transaction_state_log_replication_factor",
        "share_coordinator_state_topic_num_partitions",
        "share_coordinator_state_topic_replication_factor",
        "zookeeper_session_timeout_ms",
        "replica_lag_time_max_ms",
        "replica_fetch_max_bytes",
        "leader_imbalance_check_interval_seconds",
    ):
        if getattr(cfg, name) < 1:
            raise ConfigError(f"{name}: must be >= 1, got {getattr(cfg, name)}")
    if cfg.replica_fetch_wait_max_ms < 0:
        raise ConfigError(
            f"replica_fetch_wait_max_ms: must be >= 0, got {cfg.replica_fetch_wait_max_ms}"
        )
    connect = cfg.zookeeper_connect
    if connect is not None:
        hosts = connect.partition("/")[0]
        if not hosts or not all(h.rpartition(":")[2].isdigit() for h in hosts.split(",")):
            raise ConfigError(
                f"zookeeper_connect: {connect!r} is not host:port[,host:port...][/chroot]"
            )


def _check_group_settings(cfg: BrokerConfig) -> None:
    """Kafka's ranges for the ``group.consumer.*`` and ``group.share.*`` settings,
    and their order (each value within its min and max, the heartbeat interval
    below the session timeout)."""
    for name, (low, high) in GROUP_RANGES.items():
        value = getattr(cfg, name)
        if not low <= value <= high:
            raise ConfigError(f"{kafka_name(name)}: must be in [{low}, {high}], got {value}")
    bases = {
        "consumer": ("session_timeout_ms", "heartbeat_interval_ms"),
        "share": (
            "session_timeout_ms",
            "heartbeat_interval_ms",
            "record_lock_duration_ms",
            "delivery_count_limit",
            "partition_max_record_locks",
        ),
    }
    for kind, names in bases.items():
        for base in names:
            low, value, high = (
                getattr(cfg, f"group_{kind}_min_{base}"),
                getattr(cfg, f"group_{kind}_{base}"),
                getattr(cfg, f"group_{kind}_max_{base}"),
            )
            if not low <= value <= high:
                raise ConfigError(
                    f"{kafka_name(f'group_{kind}_{base}')}: {value} is outside "
                    f"[{kafka_name(f'group_{kind}_min_{base}')}, "
                    f"{kafka_name(f'group_{kind}_max_{base}')}] = [{low}, {high}]"
                )
        heartbeat = getattr(cfg, f"group_{kind}_heartbeat_interval_ms")
        if heartbeat >= getattr(cfg, f"group_{kind}_session_timeout_ms"):
            raise ConfigError(
                f"group.{kind}.heartbeat.interval.ms must be below group.{kind}.session.timeout.ms"
            )


_FIELDS: dict[str, Any] = {}


def _field_types() -> dict[str, Any]:
    if not _FIELDS:
        hints = typing.get_type_hints(BrokerConfig)
        for f in dataclasses.fields(BrokerConfig):
            _FIELDS[f.name] = hints[f.name]
    return _FIELDS


def known_keys() -> list[str]:
    """Every key :meth:`BrokerConfig.with_overrides` accepts (Python and Kafka names)."""
    names = set(_field_types()) | {"listen"} | set(KAFKA_NAMES)
    names |= {name for name, _, _ in UNIT_VARIANTS}
    names |= {f.replace("_", ".") for f in _field_types()}
    return sorted(names - set(UNSUPPORTED_KAFKA_KEYS))


def _resolve_key(key: str) -> str | None:
    """The field a key sets, None for an ignored Kafka key; raises for unknown keys."""
    if not isinstance(key, str):
        raise ConfigError(f"config keys are strings, got {key!r}")
    if key in UNSUPPORTED_KAFKA_KEYS:
        raise ConfigError(f"{key} is not supported: {UNSUPPORTED_KAFKA_KEYS[key]}")
    if key in _field_types() or key == "listen":
        return key
    if key in KAFKA_NAMES:
        return KAFKA_NAMES[key]
    mechanical = key.replace(".", "_").replace("-", "_")
    if mechanical in _field_types():
        return mechanical
    if key in IGNORED_KAFKA_KEYS:
        return None
    close = difflib.get_close_matches(key, known_keys(), n=1, cutoff=0.6)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise ConfigError(f"unknown broker setting {key!r}{hint}")


def _convert(field: str, value: Any, key: str) -> Any:
    hint = _field_types()[field]
    optional = False
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        args = [a for a in typing.get_args(hint) if a is not type(None)]
        optional = len(args) < len(typing.get_args(hint))
        hint = args[0]
    if value is None or (optional and isinstance(value, str) and value.strip() == ""):
        if optional:
            return None
        raise ConfigError(f"{key}: a value is required")
    try:
        if hint is bool:
            if isinstance(value, bool):
                return value
            text = str(value).strip().lower()
            if text in ("true", "1", "yes", "on"):
                return True
            if text in ("false", "0", "no", "off"):
                return False
            raise ValueError(f"not a boolean: {value!r}")
        if hint is int:
            if isinstance(value, bool):
                raise ValueError(f"not an integer: {value!r}")
            if isinstance(value, int):
                return value
            return int(str(value).strip().replace("_", ""))
        if hint is float:
            if isinstance(value, bool):
                raise ValueError(f"not a number: {value!r}")
            return float(value)
        if hint is Path:
            return Path(value)
        return str(value).strip() if isinstance(value, str) else str(value)
    except ValueError as exc:
        raise ConfigError(f"{key}: {exc}") from None
