"""brokerlite's configuration keys and values: the names, and the parsers of values given as text.

Rules (those of ``config.py`` that need no :class:`BrokerConfig`): Kafka's
``server.properties`` names map to fields mechanically (``.`` for ``_``)
except for the few in :data:`KAFKA_NAMES`; coarser-unit variants
(:data:`UNIT_VARIANTS`) rank below the millisecond setting; the keys of a stock
``server.properties`` that mean nothing here are accepted and ignored
(:data:`IGNORED_KAFKA_KEYS`), and those brokerlite reads differently are refused
with what to use instead. The parsers never put a password in an error
message.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trafka.codec.errors import TrafkaError
from trafka.common.jaas import jaas_options, jaas_rest

__all__ = [
    "IGNORED_KAFKA_KEYS",
    "KAFKA_FIELD_NAMES",
    "KAFKA_NAMES",
    "PROTOCOL_MAP_KEY",
    "SECURITY_PROTOCOLS",
    "GROUP_RANGES",
    "UNIT_VARIANTS",
    "UNSUPPORTED_KAFKA_KEYS",
    "ConfigError",
    "JaasLogin",
    "jaas_key",
    "parse_jaas",
    "check_user",
    "first_listener",
    "kafka_name",
    "listener_name_of",
    "parse_names",
    "parse_properties",
    "parse_protocol_map",
    "parse_users",
    "read_users_file",
    "split_host_port",
]


class ConfigError(TrafkaError, ValueError):
    """A broker setting is unknown or has an invalid value."""


# Kafka server.properties names whose field name is not the mechanical conversion.
KAFKA_NAMES: dict[str, str] = {
    "listeners": "listen",
    "advertised.listeners": "advertised_listener",
    "advertised.listener": "advertised_listener",
    "log.dirs": "data_dir",
    "log.dir": "data_dir",
    "node.id": "node_id",
    "broker.id": "node_id",
    "cluster.id": "cluster_id",
    "num.partitions": "num_partitions",
    "auto.create.topics.enable": "auto_create_topics",
    "log.roll.ms": "log_segment_ms",
    "log.flush.interval.messages": "flush_interval_messages",
    "log.flush.interval.ms": "flush_interval_ms",
    # Kafka's name before 3.x, still read by it.
    "delegation.token.master.key": "delegation_token_secret_key",
    # Ours (Kafka has no such switch): which release's request versions are served.
    "trafka.protocol.version": "protocol_version",
    "protocol": "protocol_version",
}

# (name, field, factor): coarser units of a millisecond setting, lowest priority first.
UNIT_VARIANTS: tuple[tuple[str, str, int], ...] = (
    ("log.retention.hours", "log_retention_ms", 3_600_000),
    ("log.retention.minutes", "log_retention_ms", 60_000),
    ("log.roll.hours", "log_segment_ms", 3_600_000),
)

SECURITY_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")
PROTOCOL_MAP_KEY = "listener.security.protocol.map"

# Kafka keys brokerlite does not read, with what to use instead.
UNSUPPORTED_KAFKA_KEYS: dict[str, str] = {
    "ssl.keystore.location": "brokerlite reads PEM files: use ssl_certfile and ssl_keyfile",
    "ssl.keystore.password": "brokerlite reads PEM files: use ssl_certfile and ssl_keyfile",
    "ssl.keystore.type": "brokerlite reads PEM files: use ssl_certfile and ssl_keyfile",
    "ssl.truststore.location": "brokerlite reads PEM files: use ssl_cafile",
    "ssl.truststore.password": "brokerlite reads PEM files: use ssl_cafile",
    "ssl.truststore.type": "brokerlite reads PEM files: use ssl_cafile",
    "sasl.jaas.config": (
        "brokerlite takes its users from sasl_users or sasl_users_file, and a cluster "
        "member's own login from listener.name.<listener>.<mechanism>.sasl.jaas.config "
        "or inter_broker_sasl_username and inter_broker_sasl_password"
    ),
    "sasl.jaas.logins": "set through listener.name.<listener>.<mechanism>.sasl.jaas.config",
    "sasl_jaas_logins": "set through listener.name.<listener>.<mechanism>.sasl.jaas.config",
}

# Stock server.properties keys that mean nothing for one node without replication.
IGNORED_KAFKA_KEYS = frozenset(
    {
        "sasl.mechanism.controller.protocol",
        "process.roles",
        "controller.quorum.voters",
        "controller.quorum.bootstrap.servers",
        "controller.listener.names",
        "listener.security.protocol.map",
        "num.network.threads",
        "num.io.threads",
        "socket.send.buffer.bytes",
        "socket.receive.buffer.bytes",
        "num.recovery.threads.per.data.dir",
        # Kafka's cleaner's threads and buffers; brokerlite's cleaner is one task.
        "log.cleaner.threads",
        "log.cleaner.dedupe.buffer.size",
        "log.cleaner.io.buffer.size",
        "log.cleaner.io.buffer.load.factor",
        "log.cleaner.io.max.bytes.per.second",
        "transaction.state.log.replication.factor",
        "transaction.state.log.min.isr",
        "share.coordinator.state.topic.min.isr",
    }
)


# field -> Kafka name, for reporting (DescribeConfigs on the broker).
KAFKA_FIELD_NAMES: dict[str, str] = {
    "delegation_token_max_lifetime_ms": "delegation.token.max.lifetime.ms",
    "delegation_token_expiry_time_ms": "delegation.token.expiry.time.ms",
    "delegation_token_expiry_check_interval_ms": "delegation.token.expiry.check.interval.ms",
    "telemetry_max_bytes": "telemetry.max.bytes",
    "num_partitions": "num.partitions",
    "auto_create_topics": "auto.create.topics.enable",
    "log_segment_bytes": "log.segment.bytes",
    "log_segment_ms": "log.roll.ms",
    "log_retention_ms": "log.retention.ms",
    "log_retention_bytes": "log.retention.bytes",
    "log_index_interval_bytes": "log.index.interval.bytes",
    "log_message_timestamp_type": "log.message.timestamp.type",
    "message_max_bytes": "message.max.bytes",
    "flush_interval_messages": "log.flush.interval.messages",
    "flush_interval_ms": "log.flush.interval.ms",
    "log_retention_check_interval_ms": "log.retention.check.interval.ms",
    "log_cleaner_enable": "log.cleaner.enable",
    "log_cleaner_backoff_ms": "log.cleaner.backoff.ms",
    "log_cleanup_policy": "log.cleanup.policy",
    "log_cleaner_delete_retention_ms": "log.cleaner.delete.retention.ms",
    "log_cleaner_min_cleanable_ratio": "log.cleaner.min.cleanable.ratio",
    "log_cleaner_min_compaction_lag_ms": "log.cleaner.min.compaction.lag.ms",
    "log_cleaner_max_compaction_lag_ms": "log.cleaner.max.compaction.lag.ms",
    "group_initial_rebalance_delay_ms": "group.initial.rebalance.delay.ms",
    "group_min_session_timeout_ms": "group.min.session.timeout.ms",
    "group_max_session_timeout_ms": "group.max.session.timeout.ms",
    **{
        f: f.replace("_", ".")
        for f in (
            "group_consumer_session_timeout_ms",
            "group_consumer_min_session_timeout_ms",
            "group_consumer_max_session_timeout_ms",
            "group_consumer_heartbeat_interval_ms",
            "group_consumer_min_heartbeat_interval_ms",
            "group_consumer_max_heartbeat_interval_ms",
            "group_share_session_timeout_ms",
            "group_share_min_session_timeout_ms",
            "group_share_max_session_timeout_ms",
            "group_share_heartbeat_interval_ms",
            "group_share_min_heartbeat_interval_ms",
            "group_share_max_heartbeat_interval_ms",
            "group_share_max_size",
            "group_share_record_lock_duration_ms",
            "group_share_min_record_lock_duration_ms",
            "group_share_max_record_lock_duration_ms",
            "group_share_delivery_count_limit",
            "group_share_min_delivery_count_limit",
            "group_share_max_delivery_count_limit",
            "group_share_partition_max_record_locks",
            "group_share_min_partition_max_record_locks",
            "group_share_max_partition_max_record_locks",
        )
    },
    "socket_request_max_bytes": "socket.request.max.bytes",
    "queued_max_request_bytes": "queued.max.request.bytes",
    "connections_max_idle_ms": "connections.max.idle.ms",
    "request_receive_timeout_ms": "request.receive.timeout.ms",
    "transaction_max_timeout_ms": "transaction.max.timeout.ms",
    "add_partitions_to_txn_retry_backoff_ms": "add.partitions.to.txn.retry.backoff.ms",
    "add_partitions_to_txn_retry_backoff_max_ms": "add.partitions.to.txn.retry.backoff.max.ms",
    "transactional_id_expiration_ms": "transactional.id.expiration.ms",
    "transaction_remove_expired_transaction_cleanup_interval_ms": (
        "transaction.remove.expired.transaction.cleanup.interval.ms"
    ),
    "producer_id_expiration_ms": "producer.id.expiration.ms",
    "producer_id_expiration_check_interval_ms": "producer.id.expiration.check.interval.ms",
    "max_incremental_fetch_session_cache_slots": "max.incremental.fetch.session.cache.slots",
    "min_insync_replicas": "min.insync.replicas",
    "unclean_leader_election_enable": "unclean.leader.election.enable",
}

# Kafka's ConfigDef ranges of the consumer- and share-group settings (Kafka 4.1's;
# the bounds of the delivery count limit and of the record locks are Kafka 4.3's).
GROUP_RANGES: dict[str, tuple[int, int]] = {
    **{
        f"group_consumer_{m}{base}": (1, 2**31 - 1)
        for m in ("", "min_", "max_")
        for base in ("session_timeout_ms", "heartbeat_interval_ms")
    },
    "group_share_session_timeout_ms": (1, 2**31 - 1),
    "group_share_min_session_timeout_ms": (1, 2**31 - 1),
    "group_share_max_session_timeout_ms": (1, 2**31 - 1),
    "group_share_heartbeat_interval_ms": (1, 2**31 - 1),
    "group_share_min_heartbeat_interval_ms": (1, 2**31 - 1),
    "group_share_max_heartbeat_interval_ms": (1, 2**31 - 1),
    "group_share_max_size": (1, 1000),
    "group_share_record_lock_duration_ms": (1000, 3_600_000),
    "group_share_min_record_lock_duration_ms": (1000, 30_000),
    "group_share_max_record_lock_duration_ms": (30_000, 3_600_000),
    "group_share_delivery_count_limit": (2, 10),
    "group_share_min_delivery_count_limit": (2, 5),
    "group_share_max_delivery_count_limit": (5, 25),
    "group_share_partition_max_record_locks": (100, 10_000),
    "group_share_min_partition_max_record_locks": (100, 10_000),
    "group_share_max_partition_max_record_locks": (100, 10_000),
}


def kafka_name(field: str) -> str:
    return KAFKA_FIELD_NAMES.get(field, field.replace("_", "."))


def first_listener(value: Any) -> str:
    """``PLAINTEXT://host:port,SSL://...`` -> ``host:port`` (the first listener)."""
    text = str(value).split(",")[0].strip()
    if "://" in text:
        text = text.split("://", 1)[1]
    return text


def listener_name_of(value: Any) -> str | None:
    """``SASL_SSL://host:port,...`` -> ``SASL_SSL`` (the first listener's name), else None."""
    text = str(value).split(",")[0].strip()
    if "://" not in text:
        return None
    return text.split("://", 1)[0].strip().upper()


def parse_protocol_map(value: Any) -> dict[str, str]:
    """Kafka's ``listener.security.protocol.map`` (``NAME:PROTOCOL,...``) as a dict."""
    if value is None:
        return {}
    out: dict[str, str] = {}
    for item in str(value).split(","):
        if not item.strip():
            continue
        name, sep, protocol = item.partition(":")
        protocol = protocol.strip().upper()
        if not sep or protocol not in SECURITY_PROTOCOLS:
            raise ConfigError(f"{PROTOCOL_MAP_KEY}: expected NAME:PROTOCOL pairs, got {item!r}")
        out[name.strip().upper()] = protocol
    return out


def parse_names(value: Any, key: str) -> tuple[str, ...]:
    """A comma-separated string or an iterable of strings, as a tuple of names."""
    if isinstance(value, str):
        items: list[Any] = value.split(",")
    else:
        try:
            items = list(value)
        except TypeError:
            raise ConfigError(f"{key}: expected a list of names, got {value!r}") from None
    names = [str(item).strip() for item in items]
    return tuple(name for name in names if name)


def parse_users(value: Any, key: str) -> tuple[tuple[str, str], ...]:
    """SASL users as ``(name, password)`` pairs.

    Accepts a mapping of name to password, an iterable of ``"name:password"``
    strings or of pairs, or one string of comma-separated ``name:password``
    entries (as in a properties file; such passwords cannot hold a comma). The
    name ends at the first ``:``. Never puts a password in an error message.
    """
    if value is None:
        return ()
    if isinstance(value, Mapping):
        entries: list[Any] = list(value.items())
    elif isinstance(value, str):
        entries = [item for item in value.split(",") if item.strip()]
    else:
        try:
            entries = list(value)
        except TypeError:
            raise ConfigError(f"{key}: expected name:password entries") from None
    users: list[tuple[str, str]] = []
    seen: set[str] = set()
    for number, entry in enumerate(entries, 1):
        if isinstance(entry, str):
            name, sep, password = entry.strip().partition(":")
            if not sep:
                raise ConfigError(f"{key}: entry {number} is not name:password")
        elif isinstance(entry, tuple | list) and len(entry) == 2:
            name, password = entry
        else:
            raise ConfigError(f"{key}: entry {number} is not name:password")
        users.append(check_user(str(name), str(password), f"{key}: entry {number}", seen))
    return tuple(users)


def check_user(name: str, password: str, where: str, seen: set[str]) -> tuple[str, str]:
    """One SASL user, checked (``seen`` collects the names, to refuse duplicates)."""
    name = name.strip()
    if not name or "\0" in name or "\0" in password:
        raise ConfigError(f"{where}: a user needs a name, and neither may hold NUL")
    if not password:
        raise ConfigError(f"{where}: user {name!r} has an empty password")
    if name in seen:
        raise ConfigError(f"{where}: user {name!r} is given twice")
    seen.add(name)
    return name, password


def read_users_file(path: Path) -> list[tuple[str, str]]:
    """The ``name:password`` lines of a users file (``#`` comments, blank lines skipped).

    Raises:
        ConfigError: the file cannot be read, or a line is not ``name:password``.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"sasl_users_file: cannot read {path}: {exc}") from None
    users: list[tuple[str, str]] = []
    seen: set[str] = set()
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        name, sep, password = stripped.partition(":")
        if not sep:
            raise ConfigError(f"{path}:{number}: expected name:password")
        users.append(check_user(name, password, f"{path}:{number}", seen))
    return users


def split_host_port(text: str, key: str) -> tuple[str, int]:
    text = first_listener(text)
    host, sep, port_text = text.rpartition(":")
    if not sep:
        raise ConfigError(f"{key}: expected HOST:PORT, got {text!r}")
    host = host.strip("[]")
    try:
        port = int(port_text)
    except ValueError:
        raise ConfigError(f"{key}: bad port in {text!r}") from None
    if not 0 <= port <= 65535:
        raise ConfigError(f"{key}: bad port in {text!r}")
    return host, port


def parse_properties(text: str, source: str) -> Iterable[tuple[str, str]]:
    pending = ""
    start_line = 0
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip() if not pending else raw.lstrip()
        if not pending:
            start_line = number
            if not line or line[0] in "#!":
                continue
        if line.endswith("\\") and not line.endswith("\\\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        sep_at = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if sep_at < 0:
            key, value = line.strip(), ""
        else:
            key, value = line[:sep_at].strip(), line[sep_at + 1 :].strip()
        if not key:
            raise ConfigError(f"{source}:{start_line}: no key in {raw!r}")
        yield key, value
    if pending:
        raise ConfigError(f"{source}: file ends inside a continued line")


# Kafka's per-listener JAAS key: listener.name.<listener>.<mechanism>.sasl.jaas.config.
_JAAS_KEY = re.compile(r"listener\.name\.([^.]+)\.([^.]+)\.sasl\.jaas\.config")
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "OAUTHBEARER": "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule",
}
# Kafka's unsecured OAUTHBEARER login (OAuthBearerUnsecuredLoginCallbackHandler's options).
_UNSECURED = "unsecuredLogin"
_UNSECURED_CLAIMS = ("StringClaim_", "NumberClaim_", "ListClaim_")
_RESERVED_CLAIMS = ("iat", "exp")


@dataclasses.dataclass(frozen=True, slots=True)
class JaasLogin:
    """What one ``listener.name.<l>.<mechanism>.sasl.jaas.config`` says: the broker's
    own login (``username``/``password``) and, for PLAIN, the users it accepts
    (``user_<name>="<password>"``). For OAUTHBEARER, Kafka's unsecured login module
    options: ``username`` is the principal (``unsecuredLoginStringClaim_<principal
    claim>``), ``claims`` the token's claims besides ``iat`` and ``exp``,
    ``principal_claim`` their principal's name and ``lifetime_ms`` the token's."""

    listener: str
    mechanism: str
    username: str | None
    password: str | None = dataclasses.field(repr=False)
    users: tuple[tuple[str, str], ...] = dataclasses.field(default=(), repr=False)
    claims: tuple[tuple[str, Any], ...] = dataclasses.field(default=(), repr=False)
    principal_claim: str = "sub"
    lifetime_ms: int = 3_600_000


def jaas_key(key: str) -> tuple[str, str] | None:
    """``(LISTENER, MECHANISM)`` of Kafka's per-listener JAAS key, else None."""
    match = _JAAS_KEY.fullmatch(key)
    if match is None:
        return None
    return match.group(1).upper(), match.group(2).upper()


def parse_jaas(key: str, value: Any) -> JaasLogin:
    """Kafka's JAAS line, ``<LoginModule> required username="u" password="p";``.

    Only the login modules of the mechanisms brokerlite speaks are accepted, with
    the module that mechanism needs. Never puts a password in an error message.

    Raises:
        ConfigError: not a JAAS line, another login module, or an option not quoted.
    """
    named = jaas_key(key)
    assert named is not None
    listener, mechanism = named
    text = str(value).strip()
    module, _, rest = text.partition(" ")
    expected = _LOGIN_MODULES.get(mechanism)
    if expected is None:
        raise ConfigError(
            f"{key}: brokerlite logs in to other brokers with "
            f"{', '.join(_LOGIN_MODULES)} only, not {mechanism}"
        )
    if module != expected:
        raise ConfigError(f"{key}: {mechanism} needs the login module {expected}")
    flag, _, options_text = rest.strip().partition(" ")
    if flag != "required":
        raise ConfigError(f"{key}: the login module must be 'required'")
    leftover = jaas_rest(options_text).strip()
    if not leftover.endswith(";"):
        raise ConfigError(f"{key}: a JAAS configuration ends with ';'")
    if leftover[:-1].strip():
        raise ConfigError(f"{key}: expected name=\"value\" options after 'required'")
    options = jaas_options(options_text)
    users = tuple(
        (name[5:], password)
        for name, password in options.items()
        if name.startswith("user_") and len(name) > 5
    )
    if users and mechanism != "PLAIN":
        raise ConfigError(f"{key}: user_<name> options are PLAIN's; SCRAM users live in ZooKeeper")
    if mechanism == "OAUTHBEARER":
        return _unsecured_login(key, listener, options)
    return JaasLogin(listener, mechanism, options.get("username"), options.get("password"), users)


def _unsecured_login(key: str, listener: str, options: dict[str, str]) -> JaasLogin:
    """Kafka's unsecured OAUTHBEARER login options: the token a broker makes for itself
    (``unsecuredLoginStringClaim_sub="broker"``; a list claim's first character is its
    separator, as in Kafka: ``unsecuredLoginListClaim_scope=",a,b"``)."""
    claims: dict[str, Any] = {}
    principal_claim, lifetime_s = "sub", "3600"
    for name, value in options.items():
        if not name.startswith(_UNSECURED):
            raise ConfigError(
                f"{key}: brokerlite's OAUTHBEARER login is Kafka's unsecured one "
                f"(unsecuredLogin... options), not {name!r}"
            )
        option = name[len(_UNSECURED) :]
        kind = next((k for k in _UNSECURED_CLAIMS if option.startswith(k)), None)
        if option == "PrincipalClaimName":
            principal_claim = value.strip()
        elif option == "LifetimeSeconds":
            lifetime_s = value
        elif kind is None or not option[len(kind) :]:
            raise ConfigError(f"{key}: {name} is not one of Kafka's unsecured login options")
        elif option[len(kind) :] in _RESERVED_CLAIMS:
            raise ConfigError(f"{key}: {name}: iat and exp are set from the token's lifetime")
        elif kind == "StringClaim_":
            claims[option[len(kind) :]] = value
        elif kind == "ListClaim_":
            claims[option[len(kind) :]] = (
                [v for v in value[1:].split(value[:1]) if v] if value else []
            )
        else:
            try:
                claims[option[len(kind) :]] = float(value) if "." in value else int(value)
            except ValueError:
                raise ConfigError(f"{key}: {name} is not a number") from None
    try:
        lifetime_ms = round(float(lifetime_s) * 1000)
    except ValueError:
        raise ConfigError(f"{key}: unsecuredLoginLifetimeSeconds is not a number") from None
    if lifetime_ms <= 0:
        raise ConfigError(f"{key}: unsecuredLoginLifetimeSeconds must be positive")
    principal = claims.get(principal_claim)
    if not isinstance(principal, str) or not principal.strip():
        raise ConfigError(
            f"{key}: the token's principal is unsecuredLoginStringClaim_{principal_claim}, "
            "which must be set"
        )
    return JaasLogin(
        listener,
        "OAUTHBEARER",
        principal,
        None,
        claims=tuple(claims.items()),
        principal_claim=principal_claim,
        lifetime_ms=lifetime_ms,
    )
