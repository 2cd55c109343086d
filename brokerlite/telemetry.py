"""Client metrics and observability (KIP-714): subscriptions, client instances, the receiver.

What a Kafka 4.x broker's ``ClientMetricsManager`` does, sans-IO: clients ask
GetTelemetrySubscriptions (key 71) which metrics to send and how often, and
send them with PushTelemetry (key 72); operators say what they want with
client-metrics config resources (ConfigResource type 16), set through
IncrementalAlterConfigs and listed by ListClientMetricsResources (key 74).
brokerlite's receiver is built in: it decompresses and decodes each push
(:func:`trafka.codec.otlp.decode_metrics`) and keeps the latest one of each
client instance in memory (:meth:`ClientTelemetry.pushes`), optionally also
appending it as one JSON line to a file.

Subscriptions (Kafka's ``ClientMetricsConfigs``):

* Three settings: ``metrics`` (a list of metric-name prefixes; ``*`` is every
  metric; default empty: none), ``interval.ms`` (default 300000, from 100 to
  3600000) and ``match`` (``selector=regex`` items, every one of which must
  fully match the client's attribute; default empty: every client). The
  selectors are ``client_instance_id``, ``client_id``,
  ``client_software_name``, ``client_software_version``,
  ``client_source_address`` and ``client_source_port``.
* Validation of the whole set a change leaves (as Kafka's controller does): an
  empty resource name, an unknown setting or an interval out of bounds is
  INVALID_REQUEST; a value that does not parse as its type, a null value, or a
  match item that is not ``selector=regex`` with a known selector and a regex
  that compiles is INVALID_CONFIG. A resource whose last setting is deleted is
  gone.
* Subscriptions are durable: ``trafka-client-metrics.journal`` (the CRC
  journal of :mod:`.storage.journal`), one ``set`` entry per change with the
  resource's whole new set of settings (empty: deleted). Every change is
  fsynced before it is answered.

Client instances (Kafka's ``ClientMetricsInstance``):

* A GetTelemetrySubscriptions with the zero id gets a new random id (never one
  of Kafka's reserved ids, never one already known). An instance is created
  the first time its id is seen, by either API, from the attributes of that
  request's connection; it is computed again when the subscriptions changed
  since. Its subscription: every subscription whose ``match`` it passes
  contributes its metrics (``*`` anywhere makes the set just ``*``) and its
  interval (the smallest wins; 300000 when none matches). The subscription id
  is Kafka's: CRC-32C of Java's ``Set.toString()`` of the metrics (in Java's
  HashSet order) followed by the interval, XORed with the id's Java hash.
* Rate: a GetTelemetrySubscriptions is THROTTLING_QUOTA_EXCEEDED unless one
  push interval passed since the instance's last accepted request of either
  kind, or its last push failed with UNKNOWN_SUBSCRIPTION_ID or
  UNSUPPORTED_COMPRESSION_TYPE. A push is accepted at once after an accepted
  GetTelemetrySubscriptions (clients jitter their interval), else one push
  interval after the last accepted push; a terminating push is never throttled.
* Push checks, in Kafka's order: a zero or reserved id is INVALID_REQUEST; a
  push after a terminating one is INVALID_REQUEST (the terminating flag then
  takes the value of the refused request, as Kafka's ``finally`` does); too
  early is THROTTLING_QUOTA_EXCEEDED; another subscription id is
  UNKNOWN_SUBSCRIPTION_ID; a compression type outside 0-4 is
  UNSUPPORTED_COMPRESSION_TYPE; metrics over ``telemetry_max_bytes`` are
  TELEMETRY_TOO_LARGE, compressed or once decompressed; metrics that do not
  decompress or decode are INVALID_RECORD. Empty metrics are accepted as is.
* Instances are forgotten when the connection that created them closes, when
  idle for max(60 s, 3 push intervals), and least recently used first beyond
  ``max_instances`` (Kafka's cache holds 16384). Idle instances are swept at
  most once a second, on telemetry requests.

Rules and invariants:

* Pure: ``now_ms`` comes from the caller; nothing blocks but the journal's
  fsync and the optional JSON-lines append.
* The received pushes are bounded: the latest push of at most ``kept_clients``
  instances (least recently pushed dropped first), each at most
  ``telemetry_max_bytes`` of protobuf. They may be read from another thread
  (:meth:`ClientTelemetry.pushes`, :meth:`ClientTelemetry.latest`).
"""

from __future__ import annotations

import collections
import dataclasses
import json
import logging
import re
import secrets
import threading
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.security.authorizer import host_of
from trafka.brokerlite.storage.journal import CrcJournal, JournalStore
from trafka.codec.compression import decompress
from trafka.codec.crc import crc32c
from trafka.codec.errors import DecodeError, ErrorCode
from trafka.codec.otlp import Metric, OtlpError, decode_metrics

__all__ = [
    "ACCEPTED_COMPRESSION_TYPES",
    "ALL_METRICS",
    "CLIENT_METRICS_JOURNAL",
    "CONFIG_DEFAULTS",
    "INTERVAL_MS_DEFAULT",
    "MATCH_SELECTORS",
    "MAX_INTERVAL_MS",
    "MAX_INSTANCES",
    "MIN_INTERVAL_MS",
    "ClientInfo",
    "ClientMetricsConfigError",
    "ClientMetricsRequestError",
    "ClientMetricsStoreError",
    "ClientTelemetry",
    "Subscription",
    "SubscriptionAnswer",
    "TelemetryPush",
    "parse_subscription",
    "subscription_id",
]

log = logging.getLogger("trafka.brokerlite.telemetry")

CLIENT_METRICS_JOURNAL = "trafka-client-metrics.journal"

METRICS, INTERVAL_MS, MATCH = "metrics", "interval.ms", "match"
ALL_METRICS = "*"
INTERVAL_MS_DEFAULT = 300_000
MIN_INTERVAL_MS = 100
MAX_INTERVAL_MS = 3_600_000
#: Each setting's value when a resource does not set it, as DescribeConfigs shows it.
CONFIG_DEFAULTS: dict[str, str] = {
    INTERVAL_MS: str(INTERVAL_MS_DEFAULT),
    MATCH: "",
    METRICS: "",
}
#: Kafka's ConfigDef types (DescribeConfigs' INT 3 and LIST 7).
CONFIG_TYPES: dict[str, int] = {INTERVAL_MS: 3, MATCH: 7, METRICS: 7}
MATCH_SELECTORS = (
    "client_instance_id",
    "client_id",
    "client_software_name",
    "client_software_version",
    "client_source_address",
    "client_source_port",
)
#: The compression types a push may use, in Kafka's order of preference (zstd,
#: lz4, gzip, snappy); clients pick the first they have.
ACCEPTED_COMPRESSION_TYPES = (4, 3, 1, 2)
_KNOWN_COMPRESSION_TYPES = frozenset(range(5))  # none, gzip, snappy, lz4, zstd
MAX_INSTANCES = 16_384  # Kafka's ClientMetricsManager cache
_CACHE_EXPIRY_MS = 60_000
_SWEEP_EVERY_MS = 1_000
_KEPT_CLIENTS = 100
# Kafka's Uuid.RESERVED: the zero id and the metadata topic's id (0, 1).
_RESERVED_IDS = frozenset({uuid.UUID(int=0), uuid.UUID(int=1)})
_INT_TEXT = re.compile(r"[+-]?[0-9]+")
_LIST_SEPARATOR = re.compile(r"\s*,\s*")


class ClientMetricsRequestError(BrokerError):
    """A client-metrics change Kafka refuses as INVALID_REQUEST (empty name,
    unknown setting, interval out of bounds)."""

    code = ErrorCode.INVALID_REQUEST


class ClientMetricsConfigError(BrokerError):
    """A client-metrics change Kafka refuses as INVALID_CONFIG (a value of the
    wrong type, a null value, a bad match item)."""

    code = ErrorCode.INVALID_CONFIG


class ClientMetricsStoreError(BrokerError):
    """The client-metrics journal cannot be read or written."""


# -- subscriptions -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Subscription:
    """One client-metrics resource, parsed.

    Attributes:
        name: the resource name.
        metrics: the metric-name prefixes (``*``: all), without repeats.
        interval_ms: the push interval.
        match: selector -> compiled regex; empty matches every client.
    """

    name: str
    metrics: frozenset[str]
    interval_ms: int
    match: Mapping[str, re.Pattern[str]]

    def matches(self, attributes: Mapping[str, str | None]) -> bool:
        """Whether every match item fully matches the client's attribute (an
        attribute the client does not have matches nothing)."""
        for selector, pattern in self.match.items():
            value = attributes.get(selector)
            if value is None or pattern.fullmatch(value) is None:
                return False
        return True


def split_list(value: str) -> list[str]:
    """A Kafka LIST value: comma-separated, trimmed; an empty value is the empty list."""
    text = value.strip()
    return [] if not text else _LIST_SEPARATOR.split(text)


def _parse_int(name: str, value: str) -> int:
    text = value.strip()
    if not _INT_TEXT.fullmatch(text) or not -(2**31) <= int(text) < 2**31:
        raise ClientMetricsConfigError(
            f"Invalid value {value} for configuration {name}: Not a number of type INT"
        )
    return int(text)


def _parse_match(items: list[str]) -> dict[str, re.Pattern[str]]:
    out: dict[str, re.Pattern[str]] = {}
    for item in items:
        parts = item.split("=")
        while parts and parts[-1] == "":  # Java's String.split drops trailing empties
            parts.pop()
        if len(parts) != 2 or parts[0].strip() not in MATCH_SELECTORS:
            raise ClientMetricsConfigError(f"Illegal client matching pattern: {item}")
        try:
            out[parts[0].strip()] = re.compile(parts[1].strip())
        except (re.error, RecursionError, OverflowError):
            raise ClientMetricsConfigError(f"Illegal client matching pattern: {item}") from None
    return out


def parse_subscription(name: str, configs: Mapping[str, str | None]) -> Subscription | None:
    """Validate a resource's whole set of settings as Kafka does; None when empty.

    Raises:
        ClientMetricsRequestError: INVALID_REQUEST (empty name, unknown setting,
            interval out of bounds).
        ClientMetricsConfigError: INVALID_CONFIG (null value, unparsable value,
            bad match item).
    """
    if not name:
        raise ClientMetricsRequestError("Subscription name can't be empty")
    for key in configs:
        if key not in CONFIG_DEFAULTS:
            raise ClientMetricsRequestError(f"Unknown client metrics configuration: {key}")
    nulls = sorted(k for k, v in configs.items() if v is None)
    if nulls:
        raise ClientMetricsConfigError(
            f"Null value not supported for client metrics configs: {','.join(nulls)}"
        )
    if not configs:
        return None
    values = {**CONFIG_DEFAULTS, **{k: v for k, v in configs.items() if v is not None}}
    interval = _parse_int(INTERVAL_MS, values[INTERVAL_MS])
    match = _parse_match(split_list(values[MATCH]))
    if INTERVAL_MS in configs and not MIN_INTERVAL_MS <= interval <= MAX_INTERVAL_MS:
        raise ClientMetricsRequestError(
            f"Invalid value {interval} for {INTERVAL_MS}, interval must be between "
            f"{MIN_INTERVAL_MS} and {MAX_INTERVAL_MS} (1 hour)"
        )
    return Subscription(name, frozenset(split_list(values[METRICS])), interval, match)


# Java's hashing, for Kafka's subscription id (String.hashCode, HashMap's spread,
# HashSet's iteration order, Uuid.hashCode).


def _java_string_hash(text: str) -> int:
    data = text.encode("utf-16-be", "surrogatepass")
    h = 0
    for i in range(0, len(data), 2):
        h = (31 * h + (data[i] << 8 | data[i + 1])) & 0xFFFFFFFF
    return h


def _bucket(text: str, capacity: int) -> int:
    h = _java_string_hash(text)
    return (h ^ (h >> 16)) & (capacity - 1)


def _capacity_for(count: int) -> int:
    capacity = 16
    while count > capacity * 3 // 4:
        capacity *= 2
    return capacity


def _java_hash_set_order(items: Iterable[str]) -> list[str]:
    """``items`` (already without repeats) in the order a Java HashSet filled with
    them in that order iterates: by bucket, then insertion order within one."""
    ordered = list(items)
    capacity = _capacity_for(len(ordered))
    return sorted(ordered, key=lambda text: _bucket(text, capacity))


def _java_int(value: int) -> int:
    value &= 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _uuid_hash(value: uuid.UUID) -> int:
    xor = (value.int >> 64) ^ (value.int & 0xFFFF_FFFF_FFFF_FFFF)
    return _java_int((xor >> 32) ^ xor)


def subscription_id(metrics: Iterable[str], interval_ms: int, client_instance_id: uuid.UUID) -> int:
    """Kafka's subscription id: CRC-32C of ``Set.toString() + interval`` XOR the id's hash.

    ``metrics`` must be in the set's iteration order (:func:`_merge` gives it).
    """
    text = "[" + ", ".join(metrics) + "]" + str(interval_ms)
    return _java_int(crc32c(text.encode("utf-8")) ^ _uuid_hash(client_instance_id))


def _merge(
    subscriptions: Iterable[Subscription], attributes: Mapping[str, str | None]
) -> tuple[list[str], int]:
    """The metrics (in Java HashSet order) and interval of the subscriptions a client matches."""
    interval = INTERVAL_MS_DEFAULT
    merged: dict[str, None] = {}
    everything = False
    # Kafka walks its ConcurrentHashMap of subscriptions (bucket order), adding each
    # one's HashSet of metrics (bucket order) to a new HashSet.
    matching = [s for s in subscriptions if s.matches(attributes)]
    for sub in _by_java_order(matching):
        everything = everything or ALL_METRICS in sub.metrics
        for metric in _java_hash_set_order(sorted(sub.metrics)):
            merged[metric] = None
        interval = min(interval, sub.interval_ms)
    if everything:
        return [ALL_METRICS], interval
    return _java_hash_set_order(merged), interval


def _by_java_order(subs: list[Subscription]) -> list[Subscription]:
    capacity = _capacity_for(len(subs))
    return sorted(subs, key=lambda s: (_bucket(s.name, capacity), s.name))


class _SubscriptionStore(JournalStore):
    """Client-metrics resources (name -> settings) in a CRC journal."""

    def __init__(self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 1 << 16) -> None:
        journal = CrcJournal(
            Path(path),
            format_name="client-metrics",
            version=1,
            fsync=fsync,
            error=ClientMetricsStoreError,
        )
        super().__init__(
            journal, compact_min_bytes=compact_min_bytes, name="client-metrics journal"
        )
        self.configs: dict[str, dict[str, str]] = {}
        self._load()

    def set(self, name: str, configs: Mapping[str, str]) -> None:
        self._write({"kind": "set", "name": name, "configs": dict(configs)})

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        if kind != "set":
            raise ClientMetricsStoreError(
                f"client-metrics journal {self.path}: unknown entry kind {kind!r} "
                "(written by a newer brokerlite?)"
            )
        name, configs = entry.get("name"), entry.get("configs")
        if (
            not isinstance(name, str)
            or not isinstance(configs, dict)
            or not all(isinstance(k, str) and isinstance(v, str) for k, v in configs.items())
        ):
            raise ClientMetricsStoreError(
                f"client-metrics journal {self.path}: malformed entry {entry!r}"
            )
        if configs:
            self.configs[name] = dict(configs)
        else:
            self.configs.pop(name, None)

    def _live_entries(self) -> list[dict[str, Any]]:
        return [
            {"kind": "set", "name": name, "configs": configs}
            for name, configs in sorted(self.configs.items())
        ]


# -- client instances ----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class ClientInfo:
    """What a request's connection says about the client (the match selectors).

    Attributes:
        client_id: the request header's client id.
        software_name, software_version: from the connection's ApiVersions v3+.
        source_address: the peer's IP address; source_port: its port.
    """

    client_id: str | None = None
    software_name: str | None = None
    software_version: str | None = None
    source_address: str | None = None
    source_port: int | None = None

    @classmethod
    def of_connection(
        cls, client_id: str | None, software: tuple[str, str] | None, peer: str
    ) -> ClientInfo:
        """From a request's client id, its connection's software (name, version)
        and peer address (``host:port``, ``[v6]:port``)."""
        host, _, port = peer.rpartition(":")
        return cls(
            client_id=client_id,
            software_name=None if software is None else software[0],
            software_version=None if software is None else software[1],
            source_address=host_of(peer) if host else None,
            source_port=int(port) if host and port.isdigit() else None,
        )

    def attributes(self, client_instance_id: uuid.UUID) -> dict[str, str | None]:
        return {
            "client_instance_id": str(client_instance_id),
            "client_id": self.client_id,
            "client_software_name": self.software_name,
            "client_software_version": self.software_version,
            "client_source_address": self.source_address,
            "client_source_port": None if self.source_port is None else str(self.source_port),
        }


@dataclasses.dataclass(slots=True)
class _Instance:
    client_instance_id: uuid.UUID
    client: ClientInfo
    subscription_id: int
    version: int  # of the subscriptions it was computed from
    metrics: list[str]
    interval_ms: int
    conn_id: int
    last_get_ms: int = 0
    last_push_ms: int = 0
    terminating: bool = False
    last_error: ErrorCode = ErrorCode.NONE
    expires_ms: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class SubscriptionAnswer:
    """A GetTelemetrySubscriptions answer (``error`` NONE or THROTTLING_QUOTA_EXCEEDED)."""

    error: ErrorCode
    message: str | None
    client_instance_id: uuid.UUID
    subscription_id: int = 0
    push_interval_ms: int = 0
    requested_metrics: tuple[str, ...] = ()


@dataclasses.dataclass(frozen=True, slots=True)
class TelemetryPush:
    """One client's latest accepted push, decoded.

    Attributes:
        client_instance_id: the client instance (KIP-714).
        client_id, client_software_name, client_software_version,
            client_source_address, client_source_port: who pushed.
        received_ms: when the broker accepted it.
        terminating: the client said it is closing.
        compression_type: as pushed (0 none, 1 gzip, 2 snappy, 3 lz4, 4 zstd).
        metrics: the decoded OTLP metrics.
    """

    client_instance_id: uuid.UUID
    client_id: str | None
    client_software_name: str | None
    client_software_version: str | None
    client_source_address: str | None
    client_source_port: int | None
    received_ms: int
    terminating: bool
    compression_type: int
    metrics: tuple[Metric, ...]

    def to_json(self) -> dict[str, Any]:
        """The push as a JSON-serialisable dict (bytes attribute values as hex)."""
        out = dataclasses.asdict(self)
        out["client_instance_id"] = str(self.client_instance_id)
        return out


class ClientTelemetry:
    """KIP-714 on one broker: client-metrics resources, client instances, received pushes.

    Args:
        path: the client-metrics journal.
        telemetry_max_bytes: the largest push accepted (Kafka's ``telemetry.max.bytes``).
        telemetry_file: append each accepted push there as one JSON line; None: no file.
        max_instances: how many client instances are kept (least recently used dropped).
        kept_clients: how many instances' latest push is kept.
        fsync: fsync each journal entry.

    Raises:
        ClientMetricsStoreError: the journal cannot be read.
    """

    def __init__(
        self,
        path: Path,
        *,
        telemetry_max_bytes: int = 1_048_576,
        telemetry_file: Path | None = None,
        max_instances: int = MAX_INSTANCES,
        kept_clients: int = _KEPT_CLIENTS,
        fsync: bool = True,
    ) -> None:
        self.telemetry_max_bytes = telemetry_max_bytes
        self.telemetry_file = telemetry_file
        self.max_instances = max_instances
        self.kept_clients = kept_clients
        self._store = _SubscriptionStore(path, fsync=fsync)
        self._subscriptions: dict[str, Subscription] = {}
        for name, configs in self._store.configs.items():
            try:
                parsed = parse_subscription(name, configs)
            except BrokerError as exc:  # written by a brokerlite with other rules
                log.warning("client-metrics resource %r ignored: %s", name, exc)
                continue
            if parsed is not None:
                self._subscriptions[name] = parsed
        self._version = 0
        self._instances: collections.OrderedDict[uuid.UUID, _Instance] = collections.OrderedDict()
        self._by_conn: dict[int, uuid.UUID] = {}
        self._next_sweep_ms = 0
        self._lock = threading.Lock()
        self._latest: collections.OrderedDict[uuid.UUID, TelemetryPush] = collections.OrderedDict()
        #: Pushes accepted, and pushes refused, since the broker started.
        self.pushes_accepted = 0
        self.pushes_refused = 0

    # -- resources ---------------------------------------------------------------------------

    def resource_names(self) -> list[str]:
        """The client-metrics resources (those with at least one setting), sorted."""
        return sorted(self._store.configs)

    def configs(self, name: str) -> dict[str, str]:
        """The settings a resource sets (empty for an unknown name)."""
        return dict(self._store.configs.get(name, {}))

    def replace(self, name: str, configs: Mapping[str, str | None], *, validate_only: bool) -> None:
        """Make ``configs`` the resource's whole set of settings (empty: delete it).

        Raises:
            ClientMetricsRequestError, ClientMetricsConfigError: refused as Kafka refuses it.
            ClientMetricsStoreError: the journal write failed; nothing changed.
        """
        parsed = parse_subscription(name, configs)
        if validate_only:
            return
        clean = {k: v for k, v in configs.items() if v is not None}
        if clean == self._store.configs.get(name, {}):
            return  # as Kafka's controller: no record, nothing changes
        self._store.set(name, clean)
        if parsed is None:
            self._subscriptions.pop(name, None)
        else:
            self._subscriptions[name] = parsed
        self._version += 1
        log.info("client-metrics resource %r now %s", name, clean or "deleted")

    # -- instances ---------------------------------------------------------------------------

    @property
    def instance_count(self) -> int:
        """How many client instances the broker keeps now."""
        return len(self._instances)

    def _new_id(self) -> uuid.UUID:
        while True:
            candidate = uuid.UUID(bytes=secrets.token_bytes(16))
            # As Kafka's Uuid.randomUuid: not reserved, and no leading '-' in base64.
            if (
                candidate not in _RESERVED_IDS
                and candidate.bytes[0] >> 2 != 62
                and candidate not in self._instances
            ):
                return candidate

    def _compute(self, instance_id: uuid.UUID, client: ClientInfo, conn_id: int) -> _Instance:
        metrics, interval = _merge(self._subscriptions.values(), client.attributes(instance_id))
        return _Instance(
            client_instance_id=instance_id,
            client=client,
            subscription_id=subscription_id(metrics, interval, instance_id),
            version=self._version,
            metrics=metrics,
            interval_ms=interval,
            conn_id=conn_id,
        )

    def _instance(
        self, instance_id: uuid.UUID, client: ClientInfo, conn_id: int, now_ms: int
    ) -> _Instance:
        self._sweep(now_ms)
        instance = self._instances.get(instance_id)
        if instance is None or instance.version < self._version:
            # Created from the first request's connection; recomputed after a
            # subscription change from the attributes it was created with.
            if instance is not None:
                client = instance.client
            instance = self._compute(instance_id, client, conn_id)
            self._instances[instance_id] = instance
            self._by_conn[conn_id] = instance_id
            while len(self._instances) > self.max_instances:
                _, evicted = self._instances.popitem(last=False)
                if self._by_conn.get(evicted.conn_id) == evicted.client_instance_id:
                    del self._by_conn[evicted.conn_id]
        self._instances.move_to_end(instance_id)
        # Kafka expires an instance on a SystemTimer (monotonic); the push interval
        # is checked against time.milliseconds() (wall), as below.
        instance.expires_ms = mono_ms(now_ms) + max(_CACHE_EXPIRY_MS, 3 * instance.interval_ms)
        return instance

    def _sweep(self, now_ms: int) -> None:
        mono = mono_ms(now_ms)
        if mono < self._next_sweep_ms:
            return
        self._next_sweep_ms = mono + _SWEEP_EVERY_MS
        for instance_id, instance in list(self._instances.items()):
            if instance.expires_ms <= mono:
                self._forget(instance_id)

    def _forget(self, instance_id: uuid.UUID) -> None:
        instance = self._instances.pop(instance_id, None)
        if instance is not None and self._by_conn.get(instance.conn_id) == instance_id:
            del self._by_conn[instance.conn_id]

    def connection_closed(self, conn_id: int) -> None:
        """Forget the instance the connection created, if any (as Kafka's disconnect listener)."""
        instance_id = self._by_conn.pop(conn_id, None)
        if instance_id is not None:
            self._instances.pop(instance_id, None)

    def get_subscriptions(
        self, client_instance_id: uuid.UUID, client: ClientInfo, conn_id: int, now_ms: int
    ) -> SubscriptionAnswer:
        """A GetTelemetrySubscriptions request, as Kafka's ClientMetricsManager answers it."""
        instance_id = client_instance_id
        if instance_id.int == 0:
            instance_id = self._new_id()
        instance = self._instance(instance_id, client, conn_id, now_ms)
        if now_ms - max(instance.last_get_ms, instance.last_push_ms) >= instance.interval_ms:
            instance.last_get_ms = now_ms
        elif instance.last_error not in (
            ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
            ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
        ):
            return SubscriptionAnswer(
                ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                f"Request from the client [{client_instance_id}] arrived before the next "
                "push interval time",
                uuid.UUID(int=0),
            )
        instance.last_error = ErrorCode.NONE
        return SubscriptionAnswer(
            ErrorCode.NONE,
            None,
            instance_id,
            instance.subscription_id,
            instance.interval_ms,
            tuple(instance.metrics),
        )

    def push(
        self,
        client_instance_id: uuid.UUID,
        subscription_id: int,
        terminating: bool,
        compression_type: int,
        metrics: bytes,
        client: ClientInfo,
        conn_id: int,
        now_ms: int,
    ) -> tuple[ErrorCode, str | None]:
        """A PushTelemetry request, as Kafka's ClientMetricsManager handles it, with
        brokerlite's receiver: returns (error, message)."""
        if client_instance_id in _RESERVED_IDS:
            self.pushes_refused += 1
            return (
                ErrorCode.INVALID_REQUEST,
                f"Invalid request from the client [{client_instance_id}], invalid client "
                "instance id",
            )
        instance = self._instance(client_instance_id, client, conn_id, now_ms)
        try:
            self._check_push(
                instance, subscription_id, terminating, compression_type, metrics, now_ms
            )
        except _Refused as exc:
            instance.last_error = exc.code
            self.pushes_refused += 1
            return exc.code, str(exc)
        finally:
            instance.terminating = terminating
        decoded: list[Metric] = []
        if metrics:
            try:
                data = decompress(compression_type, metrics, max_size=self.telemetry_max_bytes)
            except DecodeError as exc:
                code = (
                    ErrorCode.TELEMETRY_TOO_LARGE
                    if "over the limit of" in str(exc)  # the codec's size-limit message
                    else ErrorCode.INVALID_RECORD
                )
                return self._receiver_failed(instance, code, f"metrics: {exc}")
            if len(data) > self.telemetry_max_bytes:
                return self._receiver_failed(
                    instance,
                    ErrorCode.TELEMETRY_TOO_LARGE,
                    f"decompressed metrics are larger than {self.telemetry_max_bytes} bytes",
                )
            try:
                decoded = decode_metrics(data)
            except OtlpError as exc:
                return self._receiver_failed(
                    instance, ErrorCode.INVALID_RECORD, f"metrics are not OTLP MetricsData: {exc}"
                )
        instance.last_error = ErrorCode.NONE
        self.pushes_accepted += 1
        if metrics:
            self._receive(instance, terminating, compression_type, decoded, now_ms)
        return ErrorCode.NONE, None

    def _check_push(
        self,
        instance: _Instance,
        subscription_id: int,
        terminating: bool,
        compression_type: int,
        metrics: bytes,
        now_ms: int,
    ) -> None:
        ident = instance.client_instance_id
        if instance.terminating:
            raise _Refused(
                ErrorCode.INVALID_REQUEST,
                f"Client [{ident}] sent the previous request with state terminating to TRUE, "
                "can not accept any requests after that",
            )
        # Right after an accepted GetTelemetrySubscriptions a push is accepted at
        # once: clients jitter the interval (0.5 to 1.5 of it).
        accept = instance.last_get_ms > instance.last_push_ms
        if not accept:
            accept = now_ms - instance.last_push_ms >= instance.interval_ms
        if accept:
            instance.last_push_ms = now_ms
        elif not terminating:
            raise _Refused(
                ErrorCode.THROTTLING_QUOTA_EXCEEDED,
                f"Request from the client [{ident}] arrived before the next push interval time",
            )
        if subscription_id != instance.subscription_id:
            raise _Refused(
                ErrorCode.UNKNOWN_SUBSCRIPTION_ID,
                f"Unknown client subscription id for the client [{ident}]",
            )
        if compression_type not in _KNOWN_COMPRESSION_TYPES:
            raise _Refused(
                ErrorCode.UNSUPPORTED_COMPRESSION_TYPE,
                f"Unknown compression type [{compression_type}] is received in telemetry "
                f"request from [{ident}]",
            )
        if len(metrics) > self.telemetry_max_bytes:
            raise _Refused(
                ErrorCode.TELEMETRY_TOO_LARGE,
                f"Telemetry request from [{ident}] is larger than the maximum allowed size "
                f"[{self.telemetry_max_bytes}]",
            )

    def _receiver_failed(
        self, instance: _Instance, code: ErrorCode, message: str
    ) -> tuple[ErrorCode, str]:
        instance.last_error = code
        self.pushes_refused += 1
        log.warning(
            "client instance %s (client %r): push refused: %s",
            instance.client_instance_id,
            instance.client.client_id,
            message,
        )
        return code, message

    # -- the receiver --------------------------------------------------------------------------

    def _receive(
        self,
        instance: _Instance,
        terminating: bool,
        compression_type: int,
        metrics: list[Metric],
        now_ms: int,
    ) -> None:
        client = instance.client
        push = TelemetryPush(
            client_instance_id=instance.client_instance_id,
            client_id=client.client_id,
            client_software_name=client.software_name,
            client_software_version=client.software_version,
            client_source_address=client.source_address,
            client_source_port=client.source_port,
            received_ms=now_ms,
            terminating=terminating,
            compression_type=compression_type,
            metrics=tuple(metrics),
        )
        with self._lock:
            self._latest.pop(push.client_instance_id, None)
            self._latest[push.client_instance_id] = push
            while len(self._latest) > self.kept_clients:
                self._latest.popitem(last=False)
        if self.telemetry_file is not None:
            try:
                with open(self.telemetry_file, "a", encoding="utf-8") as out:
                    out.write(json.dumps(push.to_json(), default=_json_default) + "\n")
            except OSError as exc:
                log.warning(
                    "cannot append to client_telemetry_file %s: %s", self.telemetry_file, exc
                )

    def pushes(self) -> list[TelemetryPush]:
        """The latest push of each client instance kept, least recently pushed first.
        Safe to call from another thread."""
        with self._lock:
            return list(self._latest.values())

    def latest(self, client_instance_id: uuid.UUID) -> TelemetryPush | None:
        """The latest push of one client instance, if kept. Safe from another thread."""
        with self._lock:
            return self._latest.get(client_instance_id)

    def close(self) -> None:
        """Close the journal."""
        self._store.close()


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, Mapping):
        return dict(value)
    return str(value)
