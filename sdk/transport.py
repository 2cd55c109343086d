"""anyio drivers: the pool of broker connections (:class:`Cluster`).

One connection is :class:`~trafka.sdk.connection.BrokerConnection`
(:mod:`.connection`), importable from here as before, with its
:class:`Completion` and :class:`CallbackCompletion`.

Rules:

* :class:`Cluster` owns the connections, the metadata cache and the tasks
  (readers, metadata refresher) inside the task group it is given. Failed
  connects back off exponentially per broker (``reconnect.backoff.ms`` to
  ``reconnect.backoff.max.ms``, +-20% jitter). A connect is one of those tasks,
  not its caller's: a caller that stops waiting leaves it to finish. It is
  bounded by ``socket.connection.setup.timeout.ms``, the ApiVersions handshake
  included (librdkafka's rule), so a broker that accepts connections but
  answers nothing is out of reach after it.
* Waiting callers are woken through events; no task polls.
* An :class:`~.errors.AuthenticationError` from a connect is kept by the
  :class:`Cluster` (``auth_error``) until a connect succeeds; metadata waits
  and the consumer raise it instead of waiting out their timeouts.
* A broker going out of reach is news the user must hear of even though the
  client retries by itself (librdkafka's ``error_cb``): a failed connect to a
  broker or a bootstrap address, or an opened connection lost with requests in
  flight (one the broker closed while idle is not), marks it unreachable
  (:attr:`Cluster.unreachable_brokers` lists the brokers) and is reported once,
  as a :class:`~.errors.BrokerUnreachableError`, to ``error_cb`` (or logged at
  WARNING without one); the next successful connect to it clears it. A
  bootstrap address is reported too (its ``node_id`` negative): a producer
  whose bootstrap servers are all out of reach fails no call, and its user
  would otherwise hear nothing until its records time out.
* Once no connection is up and every broker known (and every bootstrap
  address) is out of reach, that is reported once more, as a
  :class:`~.errors.NoBrokersAvailableError` ("1/1 brokers are down", as
  librdkafka's ``_ALL_BROKERS_DOWN``), and :meth:`Cluster.wait_all_down`
  returns; any successful connect ends that state, and the next time every
  broker is down it is reported again. :meth:`Cluster.recheck_all_down` has
  them tried again before that state is taken as current (a producer closing
  at the interpreter's exit gives up what it holds once every broker is down).
* Finalized features (KIP-584): :attr:`Cluster.finalized_features` is what the
  broker with the highest finalized-features epoch reported in its ApiVersions
  answer, over every connection opened so far (Java's ``ApiVersions`` keeps the
  same), so a change the controller made shows up once any connection opens
  after it.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc
import anyio.lowlevel

from trafka.codec import ApiKey, ErrorCode, KafkaError, TrafkaError, UnsupportedVersionError

from ._backoff import backoff_delay
from ._util import loop_clock
from .config import ClientConfig
from .connection import BrokerConnection, CallbackCompletion, Completion
from .errors import (
    AuthenticationError,
    BrokerUnreachableError,
    KafkaConnectionError,
    NoBrokersAvailableError,
    RequestTimeoutError,
)
from .metadata import MetadataCache
from .statistics.counters import NodeCounters

if TYPE_CHECKING:
    import ssl

    from .statistics import BrokerStatistics

__all__ = ["BrokerConnection", "CallbackCompletion", "Cluster", "Completion", "backoff_delay"]

log = logging.getLogger("trafka.sdk")

# Topic errors in metadata that no wait cures: partitions_for reports them at once.
_FINAL_TOPIC_ERRORS = frozenset(
    {ErrorCode.TOPIC_AUTHORIZATION_FAILED, ErrorCode.INVALID_TOPIC_EXCEPTION}
)


#: Connection ids of coordinators (group and transaction): ``COORDINATOR_BASE -
#: node_id``, so that coordinator traffic has its own connection, apart from the
#: node's produce and fetch requests.
COORDINATOR_BASE = 2**31 - 1


def is_coordinator_id(conn_id: int) -> bool:
    """Whether a connection id is a coordinator's (:data:`COORDINATOR_BASE` - node id)."""
    return conn_id > COORDINATOR_BASE // 2


class Cluster:
    """Connections, metadata and their background tasks for one client.

    Args:
        config: the client's connection settings.
        task_group: where reader and refresher tasks run; the owner cancels it.
    """

    def __init__(self, config: ClientConfig, task_group: anyio.abc.TaskGroup) -> None:
        self._now = loop_clock()  # anyio.current_time, without its backend lookup
        self.config = config
        self._tg = task_group
        self.metadata = MetadataCache(
            max_age=config.metadata_max_age_ms / 1000,
            backoff=config.retry_backoff_ms / 1000,
            # Only consumers have the setting. Producers' metadata requests may create
            # topics (as Java's do); an admin's never do (as Kafka's AdminClient's).
            auto_create=getattr(
                config, "allow_auto_create_topics", config.auto_create_topics_default
            ),
        )
        self._conns: dict[int, BrokerConnection] = {}
        self._stats: dict[int, NodeCounters] = {}  # per connection id, across reconnects
        self._addresses: dict[int, tuple[str, int]] = {}
        self._connecting: dict[int, anyio.Event] = {}
        self._failures: dict[int, int] = {}
        self._retry_at: dict[int, float] = {}
        self._last_error: dict[int, BaseException] = {}
        self._metadata_event = anyio.Event()
        self._refresh_nudge = anyio.Event()
        self._refresh_lock = anyio.Lock()
        self._static_bootstrap = config.bootstrap_addresses
        self._bootstrap = list(self._static_bootstrap)
        self._specs = config.discovery_specs
        self._discoveries = 0  # completed zeroconf lookups
        self._discover_lock = anyio.Lock()
        self._rng = random.Random()
        self._closed = False
        self._tls: ssl.SSLContext | None = None
        if config.uses_tls:  # TLS and SASL (security.py) load only for the clients using them
            from .security import client_ssl_context

            self._tls = client_ssl_context(config)
        #: The last connect's AuthenticationError, until a connect succeeds.
        self.auth_error: AuthenticationError | None = None
        self.on_change: list[Any] = []  # callables run when connections or metadata change
        #: Why the background metadata refresh last failed (None after a success).
        self.refresh_error: TrafkaError | None = None
        # Brokers (node ids) and bootstrap slots (negative ids) out of reach, with
        # why, until a connect to them succeeds.
        self._unreachable: dict[int, BrokerUnreachableError] = {}
        # Every broker down: set, and reported once until a connect succeeds.
        self._all_down = anyio.Event()
        self._all_down_told = False
        #: ``(epoch, {feature: level})``: the newest finalized levels any broker reported.
        self.finalized_features: tuple[int, dict[str, int]] = (-1, {})

    @property
    def uses_tls(self) -> bool:
        """Whether the connections are TLS (their ``fileno`` is then -1)."""
        return self._tls is not None

    # -- connections --------------------------------------------------------------------

    def set_address(self, node_id: int, host: str, port: int) -> None:
        """Register the address of a connection id that metadata does not know (coordinators)."""
        self._addresses[node_id] = (host, port)

    def _address(self, node_id: int) -> tuple[str, int]:
        if node_id in self._addresses:
            return self._addresses[node_id]
        if node_id < 0:
            if not self._bootstrap:
                raise KafkaConnectionError("no bootstrap address yet (zeroconf has found none)")
            return self._bootstrap[(-node_id - 1) % len(self._bootstrap)]
        broker = self.metadata.broker(node_id)
        if broker is None:
            raise KafkaConnectionError(f"node {node_id} is not in the cluster metadata")
        return broker.host, broker.port

    def broker_statistics(self) -> dict[int, BrokerStatistics]:
        """Per broker node id, the totals of its connections (see :mod:`.statistics`)."""
        from .statistics import broker_statistics  # loaded when first asked for

        by_node: dict[int, list[int]] = {}
        for conn_id in self._stats:
            node = COORDINATOR_BASE - conn_id if is_coordinator_id(conn_id) else conn_id
            by_node.setdefault(node, []).append(conn_id)
        out: dict[int, BrokerStatistics] = {}
        now = self._now()
        for node, ids in sorted(by_node.items()):
            live = [c for i in ids if (c := self.ready_connection(i)) is not None]
            out[node] = broker_statistics(
                node,
                (self._stats[i] for i in ids),
                connected=bool(live),
                in_flight=sum(c.in_flight for c in live),
                throttle_remaining=max((c.throttled_until - now for c in live), default=0.0),
                now=now,
            )
        return out

    @property
    def unreachable_brokers(self) -> dict[int, BrokerUnreachableError]:
        """The brokers (node ids) out of reach, each with why: a connect to it
        failed, or its connection was lost with requests in flight, and no
        connect succeeded since. Coordinator connections count for their broker;
        bootstrap addresses, which stand for no broker yet, do not."""
        return {node: why for node, why in self._unreachable.items() if node >= 0}

    @property
    def all_brokers_down(self) -> bool:
        """Whether no connection is up and every broker known and every bootstrap
        address is out of reach (reported to ``error_cb`` as
        :class:`~.errors.NoBrokersAvailableError`), until a connect succeeds."""
        return self._all_down.is_set()

    async def wait_all_down(self) -> None:
        """Return once every broker is out of reach (:attr:`all_brokers_down`)."""
        await self._all_down.wait()

    def recheck_all_down(self) -> None:
        """Every broker was out of reach when last tried: have them tried again
        (a metadata refresh), :attr:`all_brokers_down` false until a connect
        fails again (one may have come back since; that is not reported again)."""
        if self._all_down.is_set():
            self._all_down = anyio.Event()
            self.metadata.request_update()
            self.nudge()

    def _broker_of(self, conn_id: int) -> int:
        return COORDINATOR_BASE - conn_id if is_coordinator_id(conn_id) else conn_id

    def _out_of_reach(self, conn_id: int, host: str, port: int, cause: BaseException) -> None:
        """A connection to ``conn_id`` failed: tell the user the first time its
        broker (or bootstrap address) goes out of reach (``error_cb``, else a
        WARNING), not at every retry; and the first time every one is."""
        if self._closed:
            return
        node = self._broker_of(conn_id)
        if node not in self._unreachable:
            error = BrokerUnreachableError(node, host, port, cause)
            self._unreachable[node] = error
            self._tell(error)
        if self._all_down.is_set() or any(conn.alive for conn in self._conns.values()):
            return
        known = {*self.metadata.brokers, *range(-len(self._bootstrap), 0)}
        if known <= self._unreachable.keys():
            self._all_down.set()
            if not self._all_down_told:
                self._all_down_told = True
                self._tell(NoBrokersAvailableError(f"{len(known)}/{len(known)} brokers are down"))

    def _tell(self, error: BaseException) -> None:
        """``error_cb(error)``, or a WARNING without one."""
        report = self.config.error_cb
        if report is None:
            log.warning("%s (retrying)", error)
            return
        try:
            report(error)
        except Exception:
            log.exception("error_cb raised")

    def _reached(self, conn_id: int, host: str, port: int) -> None:
        self._all_down_told = False
        if self._all_down.is_set():
            self._all_down = anyio.Event()
        node = self._broker_of(conn_id)
        if self._unreachable.pop(node, None) is not None:
            what = f"broker {node}" if node >= 0 else "bootstrap server"
            log.info("%s at %s:%s is reachable again", what, host, port)

    def _connection_lost(self, conn: BrokerConnection, error: BaseException) -> None:
        self._out_of_reach(conn.node_id, conn.host, conn.port, error)

    def ready_connection(self, node_id: int) -> BrokerConnection | None:
        """The live connection to ``node_id``, or None (without connecting)."""
        conn = self._conns.get(node_id)
        return conn if conn is not None and conn.alive else None

    def least_loaded_connection(self) -> BrokerConnection | None:
        """The live connection with the fewest requests in flight, or None (no connecting).

        What the client metrics push (KIP-714) picks its broker with, as Java's
        ``leastLoadedNode`` among the ready connections.
        """
        best: BrokerConnection | None = None
        for conn in self._conns.values():
            if conn.alive and (best is None or conn.in_flight < best.in_flight):
                best = conn
                if not conn.in_flight:
                    break
        return best

    def take_peaks(self) -> dict[int, tuple[dict[int, float], int]]:
        """Per broker node id, the highest request latency per API key (ms) and
        throttle (ms) since the last call (see :meth:`NodeCounters.take_peaks`)."""
        out: dict[int, tuple[dict[int, float], int]] = {}
        for conn_id, stats in self._stats.items():
            node = COORDINATOR_BASE - conn_id if is_coordinator_id(conn_id) else conn_id
            latencies, throttle = stats.take_peaks()
            apis, most = out.get(node, ({}, 0))
            for key, latency in latencies.items():
                apis[key] = max(apis.get(key, 0.0), latency * 1000)
            out[node] = (apis, max(most, throttle))
        return out

    def connect_soon(self, node_id: int) -> None:
        """Start connecting to ``node_id`` in the background (if not already)."""
        if self._closed or self.ready_connection(node_id) or node_id in self._connecting:
            return
        self._connecting[node_id] = anyio.Event()
        self._tg.start_soon(self._connect_task, node_id)

    def connect_delay(self, node_id: int) -> float:
        """Seconds until a connect to ``node_id`` may be tried (0: now)."""
        at = self._retry_at.get(node_id)  # None: no failure to back off from
        return 0.0 if at is None else max(0.0, at - self._now())

    async def _connect_task(self, node_id: int) -> None:
        try:
            await self._connect(node_id)
        except (TrafkaError, OSError):
            pass  # recorded in _last_error; callers see it through connection()

    async def _connect(self, node_id: int) -> BrokerConnection:
        event = self._connecting.setdefault(node_id, anyio.Event())
        try:
            delay = self.connect_delay(node_id)
            if delay > 0:
                await anyio.sleep(delay)
            host, port = self._address(node_id)
            stats = self._stats.get(node_id)
            if stats is None:
                stats = self._stats[node_id] = NodeCounters()
            conn = BrokerConnection(
                node_id,
                host,
                port,
                self.config,
                tls=self._tls,
                stats=stats,
                on_lost=self._connection_lost,
            )
            try:
                await conn.open(self._tg)
            except (TrafkaError, UnsupportedVersionError) as exc:
                stats.connect_failures += 1
                await conn.aclose()
                n = self._failures.get(node_id, 0) + 1
                self._failures[node_id] = n
                cfg = self.config
                self._retry_at[node_id] = self._now() + backoff_delay(
                    cfg.reconnect_backoff_ms / 1000,
                    cfg.reconnect_backoff_max_ms / 1000,
                    n,
                    self._rng,
                )
                self._last_error[node_id] = exc
                if isinstance(exc, AuthenticationError):
                    self.auth_error = exc
                    log.error("%s", exc)
                elif isinstance(exc, (KafkaConnectionError, RequestTimeoutError)):
                    self._out_of_reach(node_id, host, port, exc)
                if node_id >= 0:
                    # The broker may have moved: ask for metadata now, not at max age.
                    self.metadata.request_update()
                    self.nudge()
                raise
            except BaseException:
                # The caller was cancelled (its deadline) mid-handshake: the
                # reader and writer already run; close the connection with them.
                with anyio.CancelScope(shield=True):
                    await conn.aclose()
                raise
            if self._closed:
                # Opened while the client closed: its close did not see it.
                with anyio.CancelScope(shield=True):
                    await conn.aclose()
                raise KafkaConnectionError(f"node {node_id}: the client closed while connecting")
            self._failures.pop(node_id, None)
            self._retry_at.pop(node_id, None)
            self._last_error.pop(node_id, None)
            self.auth_error = None
            self._reached(node_id, host, port)
            features = conn.finalized_features
            if features[0] > self.finalized_features[0]:
                self.finalized_features = features
            self._conns[node_id] = conn
            return conn
        finally:
            self._connecting.pop(node_id, None)
            event.set()
            self._changed()

    async def connection(self, node_id: int) -> BrokerConnection:
        """A live connection to ``node_id``, connecting (after any backoff) if needed.

        Raises:
            KafkaConnectionError: the connect failed.
            AuthenticationError: the broker refused this client's credentials.
        """
        conn = self.ready_connection(node_id)
        if conn is not None:
            return conn
        # The connect is the cluster's task, not the caller's: a caller that stops
        # waiting (its deadline) leaves it to finish, so that a broker that does not
        # answer is still found out, and reported, at the setup timeout.
        started = node_id not in self._connecting
        if started:
            self._address(node_id)  # a node metadata does not know is said now
            self.connect_soon(node_id)
        pending = self._connecting.get(node_id)
        if pending is not None:
            await pending.wait()
        conn = self.ready_connection(node_id)
        if conn is not None:
            return conn
        last = self._last_error.get(node_id)
        if isinstance(last, AuthenticationError):
            raise last.again()
        if started and last is not None:
            raise last.with_traceback(None)  # what this caller's connect met
        why = "" if last is None else f": {last}"
        raise KafkaConnectionError(f"cannot connect to node {node_id}{why}") from last

    async def coordinator_connection(
        self, coordinator: tuple[int, str, int] | None
    ) -> BrokerConnection:
        """A live connection to a coordinator ``(node_id, host, port)`` (its own, see
        :data:`COORDINATOR_BASE`), or to any broker when ``coordinator`` is None.

        Raises:
            KafkaConnectionError / NoBrokersAvailableError: the connect failed.
        """
        if coordinator is None:
            return await self.any_connection()
        node, host, port = coordinator
        conn_id = COORDINATOR_BASE - node
        self.set_address(conn_id, host, port)
        return await self.connection(conn_id)

    def ready_coordinator_connection(self, node_id: int) -> BrokerConnection | None:
        """The coordinator connection to ``node_id`` if it is up, without waiting."""
        return self.ready_connection(COORDINATOR_BASE - node_id)

    async def any_connection(self) -> BrokerConnection:
        """A live connection to some broker: a connected one, else the first that accepts.

        Raises:
            NoBrokersAvailableError: no known broker or bootstrap server accepted.
            AuthenticationError: none accepted, and one refused this client's
                credentials.
        """
        for conn in list(self._conns.values()):
            if conn.alive:
                return conn
        if not self._specs:
            return await self._connect_any()
        seen = self._discoveries
        if seen == 0:
            await self._discover(seen)
        try:
            return await self._connect_any()
        except NoBrokersAvailableError:
            if seen == 0:
                raise
        # Every address failed: the brokers may have moved; look again, once.
        await self._discover(seen)
        return await self._connect_any()

    async def _discover(self, seen: int) -> None:
        """Replace the discovered bootstrap addresses with what zeroconf finds now
        (unless another task did so since it saw ``seen`` lookups)."""
        from trafka.discovery import DiscoveryError, discover

        async with self._discover_lock:
            if self._discoveries != seen:
                return
            found: list[tuple[str, int]] = []
            for spec in self._specs:
                try:
                    services = await discover(
                        spec, first=True, security_protocols=self.config.security_protocol
                    )
                except DiscoveryError as exc:
                    raise NoBrokersAvailableError(f"zeroconf: {exc}") from None
                if not services and not self._static_bootstrap:
                    raise NoBrokersAvailableError(
                        f"zeroconf found no {self.config.security_protocol.upper()} Kafka "
                        f"service ({spec.describe()}) within {spec.timeout_ms} ms"
                    )
                for service in services:
                    found.extend(service.endpoints)
            log.debug("zeroconf bootstrap: %s", found)
            self._bootstrap = [*self._static_bootstrap, *found]
            for node_id in [n for n in self._failures if n < 0]:
                # Bootstrap slots now stand for other addresses: forget their failures.
                self._failures.pop(node_id, None)
                self._retry_at.pop(node_id, None)
                self._last_error.pop(node_id, None)
            for node_id in [n for n in self._unreachable if n < 0]:
                del self._unreachable[node_id]
            self._discoveries += 1

    async def _connect_any(self) -> BrokerConnection:
        candidates = list(self.metadata.brokers)
        self._rng.shuffle(candidates)
        boot = [-(i + 1) for i in range(len(self._bootstrap))]
        self._rng.shuffle(boot)
        # Known brokers first (their addresses are current), bootstrap servers after.
        order = sorted(candidates + boot, key=self.connect_delay)
        errors = []
        refused: AuthenticationError | None = None
        for node_id in order:
            try:
                return await self.connection(node_id)
            except AuthenticationError as exc:
                refused = refused or exc
                errors.append(f"{node_id}: {exc}")
            except TrafkaError as exc:
                errors.append(f"{node_id}: {exc}")
        if refused is not None:
            raise refused
        raise NoBrokersAvailableError(
            f"no broker available (bootstrap {', '.join(self.config.bootstrap_servers)}): "
            + "; ".join(errors[-3:])
        )

    async def request_any(self, api_key: int, body: Any, **kw: Any) -> tuple[BrokerConnection, Any]:
        conn = await self.any_connection()
        return conn, await conn.request(api_key, body, **kw)

    # -- metadata -----------------------------------------------------------------------

    def _changed(self) -> None:
        for fn in self.on_change:
            fn()

    def start(self) -> None:
        """Start the metadata refresher task."""
        self._tg.start_soon(self._refresher, name="trafka metadata refresher")

    def nudge(self) -> None:
        """Wake the refresher (a refresh was requested)."""
        self._refresh_nudge.set()

    async def _refresher(self) -> None:
        md = self.metadata
        while True:
            now = self._now()
            if md.wanted_topics or md.want_all or not md.brokers:
                at = md.next_update_at(now)
            else:
                at = math.inf
            if at > now:
                self._refresh_nudge = anyio.Event()
                with anyio.move_on_after(min(at - now, 3600.0)):
                    await self._refresh_nudge.wait()
                continue
            try:
                await self.refresh_metadata()
            except TrafkaError as exc:
                log.debug("metadata refresh failed: %s", exc)
                self.refresh_error = exc
                await anyio.sleep(self.metadata.backoff)
            else:
                self.refresh_error = None

    async def refresh_metadata(self, topics: Iterable[str] | None = None) -> None:
        """Fetch metadata for the tracked topics (plus ``topics``) and apply it.

        Concurrent callers share one request.

        Raises:
            NoBrokersAvailableError / KafkaConnectionError / RequestTimeoutError.
        """
        md = self.metadata
        if topics is not None:
            md.add_topics(topics)
        version = md.version
        async with self._refresh_lock:
            if md.version != version and not md.needs_update(self._now()):
                return  # someone else refreshed while we waited
            now = self._now()
            md.attempt_started(now)
            try:
                conn = await self.any_connection()
                v = conn.version_for(ApiKey.METADATA)
                body = await conn.request(ApiKey.METADATA, md.build_request(v))
            except TrafkaError as exc:
                md.failed(self._now())
                if isinstance(exc, AuthenticationError):
                    # Wake the metadata waiters: they raise it (see partitions_for).
                    event, self._metadata_event = self._metadata_event, anyio.Event()
                    event.set()
                raise
            md.update(body, self._now())
            event, self._metadata_event = self._metadata_event, anyio.Event()
            event.set()
            self._changed()

    async def wait_metadata_change(self, timeout: float | None = None) -> bool:
        """Wait for the next applied metadata response. Returns False on timeout."""
        event = self._metadata_event
        self.nudge()
        with anyio.move_on_after(math.inf if timeout is None else timeout):
            await event.wait()
            return True
        return False

    async def partitions_for(self, topic: str, timeout: float) -> int:
        """The partition count of ``topic``, waiting for metadata up to ``timeout`` seconds.

        Raises:
            KafkaError: the topic does not exist (UNKNOWN_TOPIC_OR_PARTITION) or
                another topic error persists past the timeout; at once, from a
                metadata response asked for by this call, when the client may
                not see the topic (TOPIC_AUTHORIZATION_FAILED) or its name is
                invalid (INVALID_TOPIC_EXCEPTION).
            AuthenticationError: the brokers refuse this client's credentials.
        """
        md = self.metadata
        n = md.partition_count(topic)
        if n is not None:
            return n
        if not md.add_topics([topic]) and topic in md.topic_errors:
            md.request_update()  # a known error: ask again now, not at the next max age
        self.nudge()
        deadline = self._now() + timeout
        refreshed = False  # an error cached before this call may be stale
        while True:
            n = md.partition_count(topic)
            if n is not None:
                return n
            code = md.topic_errors.get(topic)
            if refreshed and code in _FINAL_TOPIC_ERRORS:
                # Waiting cannot help (Java's producer and consumer fail at once too).
                raise KafkaError(code, f"topic {topic!r}: {code.name} (from the broker's metadata)")
            refused = self.auth_error
            if refused is not None:
                raise refused.again()
            left = deadline - self._now()
            if left <= 0:
                code = md.topic_errors.get(topic, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
                why = self.refresh_error
                raise KafkaError(
                    code,
                    f"topic {topic!r} not present in metadata after {timeout:g} s"
                    + ("" if why is None else f" (the last metadata refresh failed: {why})"),
                )
            refreshed = await self.wait_metadata_change(left) or refreshed

    # -- shutdown -----------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close every connection."""
        self._closed = True
        while self._conns:  # (none is added once closed; see _connect)
            conns = list(self._conns.values())
            self._conns.clear()
            for conn in conns:
                await conn.aclose()
