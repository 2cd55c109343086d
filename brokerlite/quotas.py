"""Client quotas: what DescribeClientQuotas and AlterClientQuotas keep, and throttling.

Kafka's client quotas (KIP-13, KIP-55, KIP-124, KIP-219, KIP-546, KIP-599,
KIP-612), kept and enforced the way a KRaft broker does.

Entities and keys:

* An entity is a set of (entity type, name) pairs, at most one per type, types
  ``user``, ``client-id`` and ``ip``; a name of None is that type's *default*
  entity (``<default>`` in Kafka's tools). ``ip`` never combines with the others.
* User and client-id entities take ``producer_byte_rate``, ``consumer_byte_rate``
  (bytes per second), ``request_percentage`` (percent of one request thread's
  time) and ``controller_mutation_rate`` (partitions created or deleted per
  second). IP entities take ``connection_creation_rate`` only.
* Values are checked as Kafka checks them, by type only: the byte rates and the
  connection rate must be whole numbers (0 included), the others any number
  (brokerlite refuses NaN and infinities). A quota of 0 or less throttles every
  use for the whole quota window.
* Stored in ``trafka-quotas.journal`` (the CRC journal of :mod:`.storage.journal`),
  fsynced before AlterClientQuotas is answered; an entity with no keys left is
  forgotten. In cluster mode ZooKeeper holds them instead, as Kafka's dynamic
  configs (:mod:`.security.zk_quotas`), and every broker takes what it holds
  (:meth:`Quotas.use_cluster`).

Which quota applies (KIP-55), for a connection's user (its principal's name,
``ANONYMOUS`` when it has none) and the request's client id, each key on its
own: the first of these entities that sets that key::

    user=U, client-id=C        user=U, client-id=<default>        user=U
    user=<default>, client-id=C  user=<default>, client-id=<default>  user=<default>
    client-id=C                client-id=<default>

Connections share one rate when they match the same quota, as Kafka's metric
tags make them: a quota on a user alone is shared by all its client ids, one on
a client id alone by all users of that client id, and a default applies to each
user (client id, pair) on its own.

Rates and throttling, as Kafka's sampled ``Rate``:

* A rate is kept in ``quota_window_num`` samples of ``quota_window_size_ms``.
  A sample starts at the first value recorded after the previous one is
  complete; a sample with no value for all the windows together is reset. The
  rate is the samples' sum over the time since the oldest sample started,
  counted as at least ``quota_window_num - 1`` whole windows (so a new client
  may burst).
* A value is recorded, then the rate is checked: above the bound (strictly),
  the throttle time is ``(rate - bound) / bound * window`` milliseconds,
  rounded half up, where window is the time the rate was measured over. Byte
  rates are not capped; request time and connection throttles are capped at
  one window (``quota_window_size_ms``).
* Produce records the request's size; Fetch the size of its records, after the
  answer is ready (a throttled Fetch is answered empty and its bytes are taken
  back, as Kafka does), with ``max_bytes`` capped at what the quota allows in
  ``quota_window_num - 1`` windows; every request (not an acks=0 Produce) its
  handling time, as percent-seconds of one thread, against
  ``request_percentage``.
* ``controller_mutation_rate`` is a token bucket (KIP-599): it refills at the
  bound per second up to ``quota_window_num`` windows' worth, starts full, and
  each topic created or deleted, or partitions added, takes its partition
  count. Versions that know THROTTLING_QUOTA_EXCEEDED (CreateTopics v6+,
  DeleteTopics v5+, CreatePartitions v3+) get it for a topic asked while the
  bucket is below zero; older versions are served and only throttled. The
  throttle time is how long the bucket takes to refill to zero.
* ``connection_creation_rate`` counts new connections per client IP (each IP on
  its own, also under the default); a connection over the rate is not counted,
  not read, and closed after the throttle time.
"""

from __future__ import annotations

import ipaddress
import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from trafka.brokerlite.errors import BrokerError
from trafka.brokerlite.storage.journal import CrcJournal, JournalStore
from trafka.codec.errors import ErrorCode

__all__ = [
    "CLIENT_ID",
    "CONNECTION_CREATION_RATE",
    "CONSUMER_BYTE_RATE",
    "CONTROLLER_MUTATION_RATE",
    "IP",
    "PRODUCER_BYTE_RATE",
    "QUOTAS_JOURNAL",
    "REQUEST_PERCENTAGE",
    "USER",
    "Entity",
    "MutationQuota",
    "QuotaError",
    "QuotaStore",
    "QuotaStoreError",
    "Quotas",
    "Rate",
    "TokenBucket",
    "entity_of",
]

QUOTAS_JOURNAL = "trafka-quotas.journal"

USER = "user"
CLIENT_ID = "client-id"
IP = "ip"
ENTITY_TYPES = (USER, CLIENT_ID, IP)

PRODUCER_BYTE_RATE = "producer_byte_rate"
CONSUMER_BYTE_RATE = "consumer_byte_rate"
REQUEST_PERCENTAGE = "request_percentage"
CONTROLLER_MUTATION_RATE = "controller_mutation_rate"
CONNECTION_CREATION_RATE = "connection_creation_rate"
#: The error message of THROTTLING_QUOTA_EXCEEDED (KIP-599) in the topic APIs.
MUTATION_THROTTLED = f"the controller mutation rate quota ({CONTROLLER_MUTATION_RATE}) is exceeded"

# Keys a user/client-id entity takes; True where the value must be a whole number.
CLIENT_KEYS: dict[str, bool] = {
    PRODUCER_BYTE_RATE: True,
    CONSUMER_BYTE_RATE: True,
    REQUEST_PERCENTAGE: False,
    CONTROLLER_MUTATION_RATE: False,
}
IP_KEYS: dict[str, bool] = {CONNECTION_CREATION_RATE: True}

# An entity: its (type, name) pairs sorted by type; a None name is the default entity.
Entity = tuple[tuple[str, str | None], ...]

_NANOS_TO_PERCENT_SECONDS = 100.0 / 1e9

# DescribeClientQuotas match types.
MATCH_EXACT = 0
MATCH_DEFAULT = 1
MATCH_ANY = 2


class QuotaError(BrokerError):
    """A quota request Kafka refuses with INVALID_REQUEST; the message says why."""

    code = ErrorCode.INVALID_REQUEST


class UnknownEntityTypeError(QuotaError):
    """A DescribeClientQuotas filter names an entity type Kafka does not know;
    Kafka answers UNSUPPORTED_VERSION."""

    code = ErrorCode.UNSUPPORTED_VERSION


class QuotaStoreError(BrokerError):
    """The quota journal cannot be read or written."""


def entity_of(pairs: Iterable[tuple[str, str | None]]) -> Entity:
    """The entity of ``pairs``, validated as AlterClientQuotas validates it.

    Raises:
        QuotaError: an empty entity, an unknown or repeated entity type, an empty
            name, an ``ip`` combined with another type, or an ``ip`` that is not
            an IP address (Kafka also resolves host names; brokerlite does not).
    """
    seen: dict[str, str | None] = {}
    for etype, name in pairs:
        if etype not in ENTITY_TYPES:
            raise QuotaError(f"unknown quota entity type {etype!r}")
        if etype in seen:
            raise QuotaError(f"entity type {etype!r} appears more than once")
        if name == "":
            raise QuotaError(f"an empty {etype} name is not allowed (None names the default)")
        seen[etype] = name
    if not seen:
        raise QuotaError("a quota entity needs at least one entity type")
    if IP in seen and len(seen) > 1:
        raise QuotaError("an ip entity cannot be combined with user or client-id")
    ip = seen.get(IP)
    if ip is not None:
        try:
            ipaddress.ip_address(ip)
        except ValueError:
            raise QuotaError(f"{ip!r} is not an IP address") from None
    return tuple(sorted(seen.items()))


def _keys_of(entity: Entity) -> dict[str, bool]:
    return IP_KEYS if entity[0][0] == IP else CLIENT_KEYS


def check_value(entity: Entity, key: str, value: float) -> None:
    """Check that ``entity`` takes ``key`` and that ``value`` fits it.

    Raises:
        QuotaError: why not.
    """
    keys = _keys_of(entity)
    whole = keys.get(key)
    if whole is None:
        other = CLIENT_KEYS if keys is IP_KEYS else IP_KEYS
        if key in other:
            kind = "ip" if keys is IP_KEYS else "user and client-id"
            raise QuotaError(f"{key} is not a quota of {kind} entities")
        raise QuotaError(f"unknown quota key {key!r}")
    if not math.isfinite(value):
        raise QuotaError(f"{key} must be a finite number, not {value!r}")
    # Kafka's test: within 1e-6 of the whole number it truncates to (so also >= 0).
    if whole and abs(math.trunc(value + _WHOLE_EPSILON) - value) > _WHOLE_EPSILON:
        raise QuotaError(f"{key} must be a whole number (0 or more), not {value!r}")


class QuotaStore(JournalStore):
    """The configured quotas, kept in a CRC-checked journal (:mod:`.storage.journal`).

    Entry kind ``alter``: an entity (a list of ``[type, name]``), ``set`` (key to
    value) and ``remove`` (keys). A mutating method returns once its entry is
    fsynced.

    Raises:
        QuotaStoreError: the journal cannot be read or written, or holds a
            malformed entry.
    """

    def __init__(self, path: Path, *, fsync: bool = True, compact_min_bytes: int = 1 << 20) -> None:
        journal = CrcJournal(
            Path(path), format_name="quotas", version=1, fsync=fsync, error=QuotaStoreError
        )
        super().__init__(journal, compact_min_bytes=compact_min_bytes, name="quota journal")
        self._quotas: dict[Entity, dict[str, float]] = {}
        self._load()

    def quotas(self) -> dict[Entity, dict[str, float]]:
        """Every entity's quotas (copies), in the order they were first set."""
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def alter(self, entity: Entity, set_: Mapping[str, float], remove: Iterable[str]) -> None:
        """Set and remove keys of ``entity``'s quotas (already validated)."""
        current = self._quotas.get(entity, {})
        changes = {k: float(v) for k, v in set_.items() if current.get(k) != float(v)}
        gone = [k for k in dict.fromkeys(remove) if k in current and k not in set_]
        if changes or gone:
            self._write(
                {
                    "kind": "alter",
                    "entity": [list(p) for p in entity],
                    "set": changes,
                    "remove": gone,
                }
            )

    def _apply(self, entry: dict[str, Any]) -> None:
        kind = entry.get("kind")
        if kind != "alter":
            raise QuotaStoreError(
                f"quota journal {self.path}: unknown entry kind {kind!r} "
                "(written by a newer brokerlite?)"
            )
        try:
            pairs = [(t, n) for t, n in entry["entity"]]
            for t, n in pairs:
                if type(t) is not str or (n is not None and type(n) is not str):
                    raise ValueError(f"entity part {[t, n]!r} is not strings")
            entity = entity_of(pairs)
            changes = {str(k): float(v) for k, v in entry["set"].items()}
            gone = [str(k) for k in entry["remove"]]
        except (KeyError, TypeError, ValueError, AttributeError, QuotaError) as exc:
            raise QuotaStoreError(
                f"quota journal {self.path}: malformed {kind!r} entry: {exc!r}"
            ) from exc
        _change(self._quotas, entity, changes, gone)

    def _live_entries(self) -> list[dict[str, Any]]:
        return [
            {"kind": "alter", "entity": [list(p) for p in entity], "set": values, "remove": []}
            for entity, values in self._quotas.items()
        ]


class Rate:
    """Kafka's sampled rate (see the module rules): values per second.

    Args:
        samples: how many windows (``quota.window.num``).
        window_ms: one window's length (``quota.window.size.seconds`` in ms).
        simple: Kafka's ``SimpleRate`` (the replication quotas' rate, KIP-73):
            measured over at least one window rather than ``samples - 1``, so a
            new rate gets no burst.
    """

    __slots__ = ("_current", "_last", "_samples", "_simple", "_starts", "_values", "_window_ms")

    def __init__(self, samples: int, window_ms: int, *, simple: bool = False) -> None:
        self._samples = samples
        self._window_ms = window_ms
        self._simple = simple
        self._starts: list[int] = []  # each sample's start
        self._last: list[int] = []  # each sample's latest value's time
        self._values: list[float] = []
        self._current = 0

    def _new_sample(self, now_ms: int) -> None:
        self._starts.append(now_ms)
        self._last.append(now_ms)
        self._values.append(0.0)

    def record(self, value: float, now_ms: int) -> None:
        """Add ``value`` at ``now_ms`` (a negative value takes one back)."""
        starts = self._starts
        if not starts:
            self._new_sample(now_ms)
        elif now_ms - starts[self._current] >= self._window_ms:
            # The current sample is complete: start the next one here.
            self._current = (self._current + 1) % self._samples
            if self._current >= len(starts):
                self._new_sample(now_ms)
            else:
                starts[self._current] = self._last[self._current] = now_ms
                self._values[self._current] = 0.0
        self._values[self._current] += value
        self._last[self._current] = now_ms

    def window(self, now_ms: int) -> int:
        """The time, in ms, the rate at ``now_ms`` is measured over."""
        expire = self._samples * self._window_ms
        starts, last = self._starts, self._last
        for i, at in enumerate(last):
            if now_ms - at >= expire:
                starts[i] = last[i] = now_ms
                self._values[i] = 0.0
        elapsed = now_ms - min(starts, default=now_ms)
        if self._simple:
            return max(elapsed, self._window_ms)
        full = elapsed // self._window_ms
        if full < self._samples - 1:
            elapsed += (self._samples - 1 - full) * self._window_ms
        return max(elapsed, 1)

    def total(self) -> float:
        """The sum of the samples (after :meth:`window` has reset the old ones)."""
        return sum(self._values)

    def measure(self, now_ms: int) -> float:
        """The rate at ``now_ms``, per second."""
        window = self.window(now_ms)
        return self.total() * 1000.0 / window

    def throttle(self, bound: float, now_ms: int) -> int:
        """The throttle time at ``now_ms`` against ``bound`` (0 when within it)."""
        window = self.window(now_ms)
        observed = self.total() * 1000.0 / window
        if observed <= bound:
            return 0
        if bound <= 0:
            return self._samples * self._window_ms
        return _round_half_up(min((observed - bound) / bound * window, _MAX_THROTTLE_MS))


class TokenBucket:
    """KIP-599's controller mutation quota: tokens refill at ``rate`` per second up
    to ``burst_s`` seconds' worth, and may go below zero.

    Args:
        rate: the bound (partition mutations per second).
        burst_s: the capacity, in seconds of ``rate`` (``quota_window_num`` windows).
        now_ms: when the bucket is made (full).
    """

    __slots__ = ("_at", "burst_s", "rate", "tokens")

    def __init__(self, rate: float, burst_s: float, now_ms: int) -> None:
        self.rate = rate
        self.burst_s = burst_s
        self.tokens = rate * burst_s
        self._at = now_ms

    def refill(self, now_ms: int) -> float:
        """The tokens at ``now_ms``."""
        if now_ms > self._at:
            capacity = max(self.rate, 0.0) * self.burst_s
            self.tokens = min(capacity, self.tokens + (now_ms - self._at) / 1000 * self.rate)
            self._at = now_ms
        return self.tokens

    def take(self, permits: float, now_ms: int) -> None:
        self.refill(now_ms)
        self.tokens -= permits

    def throttle(self, now_ms: int) -> int:
        """How long until the bucket is back at zero (0 when it is not below)."""
        tokens = self.refill(now_ms)
        if tokens >= 0:
            return 0
        if self.rate <= 0:
            return int(self.burst_s * 1000)
        return _round_half_up(min(-tokens / self.rate * 1000, _MAX_THROTTLE_MS))


class MutationQuota:
    """One request's controller mutation quota (KIP-599); see the module rules.

    Args:
        bucket: the connection's token bucket (None: no quota applies).
        strict: the request's version can be answered THROTTLING_QUOTA_EXCEEDED.
        now_ms: the request's time.
    """

    __slots__ = ("_bucket", "_now", "strict")

    def __init__(self, bucket: TokenBucket | None, strict: bool, now_ms: int) -> None:
        self._bucket = bucket
        self.strict = strict
        self._now = now_ms

    def admit(self, partitions: int) -> bool:
        """Count ``partitions`` mutations; False (nothing counted) when the request
        is strict and the quota is already exceeded: the topic must be refused."""
        bucket = self._bucket
        if bucket is None:
            return True
        if self.strict and bucket.refill(self._now) < 0:
            return False
        bucket.take(partitions, self._now)
        return True

    def throttle_ms(self) -> int:
        """The request's throttle time (0 when within the quota)."""
        return 0 if self._bucket is None else self._bucket.throttle(self._now)


class Quotas:
    """The configured quotas and the rates measured against them.

    Args:
        store: where quotas are kept (None: in memory only, for tests).
        window_num: ``quota.window.num``.
        window_size_ms: ``quota.window.size.seconds`` in milliseconds.
    """

    def __init__(
        self, store: QuotaStore | None, *, window_num: int = 11, window_size_ms: int = 1000
    ) -> None:
        self._store = store
        self.window_num = window_num
        self.window_size_ms = window_size_ms
        self._quotas: dict[Entity, dict[str, float]] = store.quotas() if store is not None else {}
        #: Cluster mode: the quotas are ZooKeeper's (:meth:`use_cluster`).
        self._cluster = False
        # (key, bucket) -> its rate; a bucket is the (user, client id) pair its
        # connections share, with "" where the quota is shared by all of that type.
        self._rates: dict[tuple[str, tuple[str, str]], Rate] = {}
        self._buckets: dict[tuple[str, str], TokenBucket] = {}
        self._ip_rates: dict[str, Rate] = {}
        # (key, user, client id) -> (bucket, bound), or None when no quota applies.
        self._resolved: dict[tuple[str, str, str], tuple[tuple[str, str], float] | None] = {}
        self.active = False
        self.connections_active = False
        self._ip_bounds: dict[ipaddress.IPv4Address | ipaddress.IPv6Address | None, float] = {}
        self._refresh()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()

    def _refresh(self) -> None:
        self._resolved.clear()
        self.active = any(entity[0][0] != IP and values for entity, values in self._quotas.items())
        # An IP's connection rate by address (None: the default), so that every
        # spelling of an address (IPv6 above all) finds it.
        self._ip_bounds = {
            None if name is None else ipaddress.ip_address(name): values[CONNECTION_CREATION_RATE]
            for ((etype, name),), values in (
                (entity, values) for entity, values in self._quotas.items() if len(entity) == 1
            )
            if etype == IP and CONNECTION_CREATION_RATE in values
        }
        self.connections_active = bool(self._ip_bounds)

    # -- configuration -------------------------------------------------------------

    def quotas(self) -> dict[Entity, dict[str, float]]:
        """Every configured entity's quotas (copies)."""
        return {entity: dict(values) for entity, values in self._quotas.items()}

    def describe(
        self, components: Iterable[tuple[str, int, str | None]], *, strict: bool
    ) -> list[tuple[Entity, dict[str, float]]]:
        """The quotas of the entities a DescribeClientQuotas filter matches.

        Args:
            components: (entity type, match type, name): match type 0 matches the
                named entity of the type, 1 its default entity, 2 any entity of
                it, default included.
            strict: match only entities of exactly the filter's types; otherwise
                entities may also have other types.

        Raises:
            QuotaError: an invalid filter (an unknown entity type: UNSUPPORTED_VERSION,
                as Kafka answers it).
        """
        wanted: dict[str, tuple[int, str | None]] = {}
        for etype, match_type, name in components:
            if not etype:
                raise QuotaError("a filter component has an empty entity type")
            if etype in wanted:
                raise QuotaError(f"the filter names entity type {etype!r} more than once")
            if etype not in ENTITY_TYPES:
                raise UnknownEntityTypeError(f"unknown quota entity type {etype!r}")
            if match_type == MATCH_EXACT:
                if name is None:
                    raise QuotaError(f"an exact match of {etype!r} needs a name")
            elif match_type in (MATCH_DEFAULT, MATCH_ANY):
                if name is not None:
                    raise QuotaError(
                        f"a {'default' if match_type == MATCH_DEFAULT else 'any'} match of "
                        f"{etype!r} takes no name"
                    )
            else:
                raise QuotaError(f"unknown match type {match_type} for {etype!r}")
            wanted[etype] = (match_type, name)
        if IP in wanted and (USER in wanted or CLIENT_ID in wanted):
            raise QuotaError("an ip filter cannot be combined with user or client-id")
        found = []
        for entity, values in self._quotas.items():
            names = dict(entity)
            if strict and names.keys() != wanted.keys():
                continue
            if all(_matches(names, etype, m, n) for etype, (m, n) in wanted.items()):
                found.append((entity, dict(values)))
        return found

    def alter(
        self,
        entity: Entity,
        ops: Iterable[tuple[str, float | None]],
        *,
        validate_only: bool = False,
    ) -> None:
        """Apply ``ops`` (key and value; None removes the key) to ``entity``.

        Removing a key that is not set, or that no entity takes, does nothing, as
        in Kafka.

        Args:
            validate_only: check ``ops`` and change nothing.

        Raises:
            QuotaError: an op is invalid (nothing is changed).
            QuotaStoreError: the journal could not be written.
        """
        set_, remove = self.check_ops(entity, ops)
        if validate_only:
            return
        if self._cluster:
            raise QuotaError("in cluster mode quotas change through ZooKeeper")
        if self._store is not None:
            self._store.alter(entity, set_, remove)
        _change(self._quotas, entity, set_, remove)
        self._refresh()

    @staticmethod
    def check_ops(
        entity: Entity, ops: Iterable[tuple[str, float | None]]
    ) -> tuple[dict[str, float], list[str]]:
        """Check an AlterClientQuotas entry's ops: the keys to set and to remove.

        Raises:
            QuotaError: an op is invalid.
        """
        set_: dict[str, float] = {}
        remove: list[str] = []
        for key, value in ops:
            if key in set_ or key in remove:
                raise QuotaError(f"quota key {key!r} appears more than once")
            if value is None:
                remove.append(key)
            else:
                check_value(entity, key, value)
                set_[key] = float(value)
        return set_, remove

    def use_cluster(self, quotas: Mapping[Entity, Mapping[str, float]]) -> None:
        """Cluster mode: from now on the quotas are ``quotas`` (what ZooKeeper
        holds); the journal is not used. The measured rates are kept, so a
        change does not reset anyone's throttling."""
        self._cluster = True
        self._quotas = {entity: dict(values) for entity, values in quotas.items() if values}
        self._refresh()

    # -- throttling ------------------------------------------------------------------

    def resolve(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        """The quota on ``key`` for a connection: its shared bucket and its bound."""
        cache_key = (key, user, client_id)
        try:
            return self._resolved[cache_key]
        except KeyError:
            pass
        found = self._lookup(key, user, client_id)
        if len(self._resolved) >= 10_000:
            self._resolved.clear()
        self._resolved[cache_key] = found
        return found

    def _lookup(self, key: str, user: str, client_id: str) -> tuple[tuple[str, str], float] | None:
        quotas = self._quotas
        # (entity, bucket) in KIP-55's order of precedence.
        levels: tuple[tuple[Entity, tuple[str, str]], ...] = (
            (((CLIENT_ID, client_id), (USER, user)), (user, client_id)),
            (((CLIENT_ID, None), (USER, user)), (user, client_id)),
            (((USER, user),), (user, "")),
            (((CLIENT_ID, client_id), (USER, None)), (user, client_id)),
            (((CLIENT_ID, None), (USER, None)), (user, client_id)),
            (((USER, None),), (user, "")),
            (((CLIENT_ID, client_id),), ("", client_id)),
            (((CLIENT_ID, None),), ("", client_id)),
        )
        for entity, bucket in levels:
            values = quotas.get(entity)
            if values is not None and key in values:
                return bucket, values[key]
        return None

    def _rate(self, key: str, bucket: tuple[str, str]) -> Rate:
        rate = self._rates.get((key, bucket))
        if rate is None:
            rate = self._rates[(key, bucket)] = Rate(self.window_num, self.window_size_ms)
        return rate

    def record(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> int:
        """Record ``value`` against the connection's quota on ``key``.

        Returns:
            The throttle time in ms (0 when within the quota or without one).
        """
        found = self.resolve(key, user, client_id)
        if found is None:
            return 0
        bucket, bound = found
        rate = self._rate(key, bucket)
        rate.record(value, now_ms)
        return rate.throttle(bound, now_ms)

    def unrecord(self, key: str, user: str, client_id: str, value: float, now_ms: int) -> None:
        """Take back a value :meth:`record` counted (a throttled Fetch's bytes)."""
        found = self.resolve(key, user, client_id)
        if found is not None:
            self._rate(key, found[0]).record(-value, now_ms)

    def record_request_time(self, user: str, client_id: str, nanos: int, now_ms: int) -> int:
        """Record a request's handling time against ``request_percentage``.

        Returns:
            The throttle time in ms, at most one window.
        """
        throttle = self.record(
            REQUEST_PERCENTAGE, user, client_id, nanos * _NANOS_TO_PERCENT_SECONDS, now_ms
        )
        return min(throttle, self.window_size_ms)

    def max_fetch_bytes(self, user: str, client_id: str) -> int | None:
        """The most bytes one Fetch answer may hold under ``consumer_byte_rate``
        (what the quota allows in ``quota_window_num - 1`` windows), None without one."""
        found = self.resolve(CONSUMER_BYTE_RATE, user, client_id)
        if found is None:
            return None
        return int(max(found[1], 0) * (self.window_num - 1) * self.window_size_ms / 1000)

    def mutations(self, user: str, client_id: str, *, strict: bool, now_ms: int) -> MutationQuota:
        """The controller mutation quota of one CreateTopics, DeleteTopics or
        CreatePartitions request."""
        found = self.resolve(CONTROLLER_MUTATION_RATE, user, client_id)
        if found is None:
            return MutationQuota(None, strict, now_ms)
        bucket_key, bound = found
        bucket = self._buckets.get(bucket_key)
        burst_s = self.window_num * self.window_size_ms / 1000
        if bucket is None:
            bucket = self._buckets[bucket_key] = TokenBucket(bound, burst_s, now_ms)
        else:
            bucket.refill(now_ms)
            bucket.rate, bucket.burst_s = bound, burst_s  # the quota may have changed
        return MutationQuota(bucket, strict, now_ms)

    def connection_throttle(self, ip: str, now_ms: int) -> int:
        """Count a new connection from ``ip`` against ``connection_creation_rate``.

        Returns:
            0 when it is within the rate (counted), else how long to hold it
            before closing it, at most one window (not counted).
        """
        try:
            address = ipaddress.ip_address(ip)
        except ValueError:
            address = None
        bound = self._ip_bounds.get(address, self._ip_bounds.get(None))
        if bound is None:
            return 0
        rate = self._ip_rates.get(ip)
        if rate is None:
            if len(self._ip_rates) >= 100_000:
                self._ip_rates.clear()
            rate = self._ip_rates[ip] = Rate(self.window_num, self.window_size_ms)
        rate.record(1, now_ms)
        throttle = rate.throttle(bound, now_ms)
        if throttle:
            rate.record(-1, now_ms)
        return min(throttle, self.window_size_ms)


_MAX_THROTTLE_MS = 2**31 - 1  # the response field is an int32
_WHOLE_EPSILON = 1e-6

_MISSING = object()


def _change(
    quotas: dict[Entity, dict[str, float]],
    entity: Entity,
    set_: Mapping[str, float],
    remove: Iterable[str],
) -> None:
    """Set and remove keys of ``entity`` in ``quotas``; an entity left without
    keys is forgotten."""
    values = quotas.setdefault(entity, {})
    values.update(set_)
    for key in remove:
        values.pop(key, None)
    if not values:
        del quotas[entity]


def _round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def _matches(names: dict[str, str | None], etype: str, match_type: int, name: str | None) -> bool:
    have = names.get(etype, _MISSING)
    if have is _MISSING:
        return False
    if match_type == MATCH_EXACT:
        return have == name
    if match_type == MATCH_DEFAULT:
        return have is None
    return True
