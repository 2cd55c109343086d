"""One broker connection's protocol state, without I/O.

Rules and invariants:

* Requests are framed here (:meth:`ConnectionState.send_request` returns the
  bytes to write); the driver writes them in the order they were returned.
  Correlation ids increase by one per request, wrapping at 2**31 to 0.
* Every request that expects a response enters the in-flight queue, in send
  order. Kafka answers requests on one connection in order, so a response
  must carry the correlation id at the head of the queue: any other id
  (unknown, or out of order) is a :class:`~trafka.sdk.errors.ProtocolError`,
  and so is a response that does not decode. After a protocol error the state
  is *broken*: the connection must be closed and every in-flight request
  failed (:meth:`ConnectionState.fail_all`).
* Produce requests with ``acks=0`` get no response and never enter the queue.
* A request sent with ``raw=True`` is correlated like any other, but its
  response is returned as its frame (without the size prefix), not decoded,
  and its throttle time is not read: the caller reads (or forwards) the bytes
  itself. The proxy's upstream pool sends every request so, at versions it
  chose (``version=``: no handshake needed, the proxy's clients negotiated),
  with no deadline in the state (each caller waits to its own; a late answer
  is still the next in order, and is dropped).
* A request may name its own ``client_id`` (one driver speaking for several
  clients, as the proxy's pool does); by default it is the state's.
* Each in-flight request has a deadline (``now + timeout``, seconds on the
  driver's monotonic clock). :meth:`next_deadline` is the earliest;
  :meth:`expired` returns the requests past theirs. A timed-out request
  poisons the connection (a late response would desynchronise the queue), so
  the driver closes it, as the Java client does.
* The first exchange is ApiVersions (:meth:`handshake`). Until it completes,
  :meth:`send_request` refuses other requests. A broker that does not know our
  ApiVersions version answers UNSUPPORTED_VERSION in the v0 layout with its
  own range; we retry once at its highest version (the retry's bytes come out
  of :meth:`data_to_send`).
* Versions are chosen in one place, :func:`choose_version`: the highest version
  both the broker and :data:`CLIENT_VERSIONS` allow.
* Quota throttling (KIP-219): a response with a positive ``throttle_time_ms``
  is counted in the statistics whatever its API. When its API and version are
  ones Kafka's clients throttle themselves for (:func:`client_throttles`), the
  broker answered at once and will not read this connection's next request
  before the throttle time has passed: :attr:`ConnectionState.throttled_until`
  becomes the response's arrival plus that time (it never moves back). The
  driver holds new requests until then; requests already in flight are not
  affected. A response whose version lacks the field reads as 0.
* Session renewal (KIP-368) is timed in one place,
  :func:`reauthentication_delay`: at a point between 85% and 95% of the
  lifetime the broker answered, as Kafka's clients renew; a driver that renews
  only between requests also leaves room for the longest wait of a request sent
  just before, so that its answer arrives while the session lasts (never
  earlier than half the lifetime).

Drivers: the SDK's :class:`~trafka.sdk.connection.BrokerConnection` (async),
the Spark source's ``BlockingConnection`` (blocking sockets), brokerlite's
inter-broker ``InterBrokerConnection`` (trio) and the proxy's upstream
connections (its pool, its SASL login and its bootstrap Metadata probe; trio).
No other module frames requests,
assigns correlation ids or matches answers to requests (tests/test_connection_core.py).
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from types import EllipsisType
from typing import Any

from trafka.codec import (
    ApiKey,
    DecodeError,
    ErrorCode,
    FrameReader,
    RequestFramer,
    UnsupportedVersionError,
    api,
    decode_response,
    decode_response_frame,
    peek_correlation_id,
)
from trafka.codec.messages import k18_api_versions as api_versions

from .errors import ProtocolError, UsageError
from .statistics.counters import NodeCounters

__all__ = [
    "CLIENT_THROTTLE_VERSIONS",
    "CLIENT_VERSIONS",
    "ConnectionState",
    "InFlight",
    "Response",
    "choose_version",
    "client_throttles",
    "reauthentication_delay",
]

SOFTWARE_NAME = "trafka"
# Framers kept for client ids other than the state's own (see send_request_parts).
_MAX_FRAMERS = 64
SOFTWARE_VERSION = "0.1.0"

# The versions the client speaks, per API key. This table is the only place
# where version support is decided; it is narrower than the codec's where the
# client does not implement a newer version's semantics yet. (One exception to
# "only place": Fetch v13+ names topics by id, so the fetcher steps down to v12
# for topics whose metadata carries no id, see Fetcher.fetch_version.)
CLIENT_VERSIONS: dict[int, tuple[int, int]] = {
    # Produce: v3 is the first with record batches (magic 2); v13 names topics by id
    # (KIP-516): the producer steps down for topics without one, and a transaction
    # stays at v11 (v12+ adds partitions implicitly, transaction version 2), see
    # producer_batches.produce_version.
    ApiKey.PRODUCE: (3, 13),
    # Fetch: v4 is the first with record batches and isolation level; v18 (KIP-1166)
    # only adds a follower's high watermark, which consumers leave out.
    ApiKey.FETCH: (4, 18),
    ApiKey.LIST_OFFSETS: (1, 11),  # v11: EARLIEST_PENDING_UPLOAD, -6, KIP-1023; nothing else
    # v13: REBOOTSTRAP_REQUIRED, KIP-1102; the client does not rebootstrap
    ApiKey.METADATA: (1, 12),
    ApiKey.OFFSET_COMMIT: (2, 9),  # v10: topics by id only, KIP-848; commits name topics
    ApiKey.OFFSET_FETCH: (1, 9),  # v8+: several groups per request; we send one. v10: by id only
    ApiKey.FIND_COORDINATOR: (1, 6),  # v4+: batched keys
    ApiKey.JOIN_GROUP: (0, 9),
    ApiKey.HEARTBEAT: (0, 4),
    ApiKey.LEAVE_GROUP: (0, 5),
    ApiKey.SYNC_GROUP: (0, 5),
    # v6: GROUP_ID_NOT_FOUND for unknown groups, KIP-1043; not mapped
    ApiKey.DESCRIBE_GROUPS: (0, 5),
    ApiKey.LIST_GROUPS: (0, 5),
    ApiKey.SASL_HANDSHAKE: (1, 1),  # v0 (raw tokens after it) is not used
    ApiKey.API_VERSIONS: (0, 4),  # v5: cluster/node id checks, KIP-1242; not sent
    ApiKey.CREATE_TOPICS: (0, 7),
    ApiKey.DELETE_TOPICS: (0, 6),
    ApiKey.DELETE_RECORDS: (0, 2),
    ApiKey.INIT_PRODUCER_ID: (0, 5),  # v6: two-phase commit, KIP-939, unstable in 4.4
    ApiKey.OFFSET_FOR_LEADER_EPOCH: (0, 4),
    # Transactions: AddPartitionsToTxn v4+ is the brokers' batched form. EndTxn v5
    # and TxnOffsetCommit v5 are transaction version 2 (KIP-890 part 2), sent only
    # when the cluster finalized it; the transaction manager caps both at v4 (and
    # Produce at v11) otherwise, see transactions.TransactionManager.
    ApiKey.ADD_PARTITIONS_TO_TXN: (0, 3),
    ApiKey.ADD_OFFSETS_TO_TXN: (0, 4),
    ApiKey.END_TXN: (0, 5),
    ApiKey.WRITE_TXN_MARKERS: (0, 1),  # v2: the marker's transaction version, KIP-1228
    ApiKey.TXN_OFFSET_COMMIT: (0, 5),  # v5: transaction version 2, as EndTxn v5
    ApiKey.DESCRIBE_ACLS: (1, 3),
    ApiKey.CREATE_ACLS: (1, 3),
    ApiKey.DELETE_ACLS: (1, 3),
    ApiKey.DESCRIBE_CONFIGS: (0, 4),
    ApiKey.ALTER_CONFIGS: (0, 2),
    ApiKey.ALTER_REPLICA_LOG_DIRS: (0, 2),
    ApiKey.DESCRIBE_LOG_DIRS: (0, 4),  # v5: response fields the admin does not read yet
    ApiKey.SASL_AUTHENTICATE: (0, 2),
    ApiKey.CREATE_PARTITIONS: (0, 3),
    ApiKey.CREATE_DELEGATION_TOKEN: (0, 3),  # v3: a token for another owner
    ApiKey.RENEW_DELEGATION_TOKEN: (0, 2),
    ApiKey.EXPIRE_DELEGATION_TOKEN: (0, 2),
    ApiKey.DESCRIBE_DELEGATION_TOKEN: (0, 3),
    ApiKey.DELETE_GROUPS: (0, 2),  # v3: per-group error message; GROUP_DELETION_FAILED not mapped
    ApiKey.ELECT_LEADERS: (0, 2),
    ApiKey.INCREMENTAL_ALTER_CONFIGS: (0, 1),
    # v1: allow_replication_factor_change, not offered
    ApiKey.ALTER_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.LIST_PARTITION_REASSIGNMENTS: (0, 0),
    ApiKey.OFFSET_DELETE: (0, 0),
    ApiKey.DESCRIBE_CLIENT_QUOTAS: (0, 1),
    ApiKey.ALTER_CLIENT_QUOTAS: (0, 1),
    ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.ALTER_USER_SCRAM_CREDENTIALS: (0, 0),
    ApiKey.UPDATE_FEATURES: (0, 2),  # v1: upgrade types, validate_only; v2: one error
    ApiKey.DESCRIBE_CLUSTER: (0, 1),  # v2: include_fenced_brokers, KIP-1073, not offered
    ApiKey.DESCRIBE_PRODUCERS: (0, 0),
    ApiKey.DESCRIBE_TRANSACTIONS: (0, 0),
    ApiKey.LIST_TRANSACTIONS: (0, 1),  # v2: transactional-id pattern, KIP-1152, not offered
    ApiKey.CONSUMER_GROUP_HEARTBEAT: (0, 1),  # KIP-848; from v1 the member names itself, KIP-1082
    ApiKey.CONSUMER_GROUP_DESCRIBE: (0, 0),  # v1: member type, KIP-1099, not read
    ApiKey.GET_TELEMETRY_SUBSCRIPTIONS: (0, 0),  # KIP-714
    ApiKey.PUSH_TELEMETRY: (0, 0),
    ApiKey.LIST_CONFIG_RESOURCES: (0, 0),  # v1, KIP-1142: other types; client metrics need v0
    # Share groups (KIP-932): v1 is Kafka 4.1's first stable version (v0 was early
    # access, with other semantics). ShareFetch/ShareAcknowledge v2 (KIP-1206/1222)
    # are spoken in their default mode: batch-optimised acquisition (as v1), no
    # RENEW acknowledgements; a v2 ShareAcknowledge answer carries the lock timeout.
    ApiKey.SHARE_GROUP_HEARTBEAT: (1, 1),  # Kafka 4.4's only version
    ApiKey.SHARE_GROUP_DESCRIBE: (1, 1),  # Kafka 4.4's only version
    ApiKey.SHARE_FETCH: (1, 2),
    ApiKey.SHARE_ACKNOWLEDGE: (1, 2),
    # Share-group offsets admin (Kafka 4.1; DescribeShareGroupOffsets v1 adds the lag, 4.2).
    ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS: (0, 1),
    ApiKey.ALTER_SHARE_GROUP_OFFSETS: (0, 0),
    ApiKey.DELETE_SHARE_GROUP_OFFSETS: (0, 0),
}


# KIP-219: for the APIs older than it, the first version whose responses the
# client must act on by throttling itself (from it on, a broker over a quota
# answers at once and then stops reading the connection for the throttle time),
# as Kafka's JSON specs say ("Starting in version N, on quota violation, brokers
# send out responses before throttling") and Java's
# AbstractResponse.shouldClientThrottle overrides keep. Every other API throttles
# the client at each version whose response has a throttle_time_ms field: Java's
# default since KAFKA-20828 (before it the default was "never", so older Java
# clients ignored the throttle of OffsetForLeaderEpoch, DescribeCluster, the
# client-quota, SCRAM and group-heartbeat APIs, relying on the broker's mute).
CLIENT_THROTTLE_VERSIONS: dict[int, int] = {
    ApiKey.PRODUCE: 6,
    ApiKey.FETCH: 8,
    ApiKey.LIST_OFFSETS: 3,
    ApiKey.METADATA: 6,
    ApiKey.OFFSET_COMMIT: 4,
    ApiKey.OFFSET_FETCH: 4,
    ApiKey.FIND_COORDINATOR: 2,
    ApiKey.JOIN_GROUP: 3,
    ApiKey.HEARTBEAT: 2,
    ApiKey.LEAVE_GROUP: 2,
    ApiKey.SYNC_GROUP: 2,
    ApiKey.DESCRIBE_GROUPS: 2,
    ApiKey.LIST_GROUPS: 2,
    ApiKey.API_VERSIONS: 2,
    ApiKey.CREATE_TOPICS: 3,
    ApiKey.DELETE_TOPICS: 2,
    ApiKey.DELETE_RECORDS: 1,
    ApiKey.INIT_PRODUCER_ID: 1,
    ApiKey.ADD_PARTITIONS_TO_TXN: 1,
    ApiKey.ADD_OFFSETS_TO_TXN: 1,
    ApiKey.END_TXN: 1,
    ApiKey.TXN_OFFSET_COMMIT: 1,
    ApiKey.DESCRIBE_ACLS: 1,
    ApiKey.CREATE_ACLS: 1,
    ApiKey.DELETE_ACLS: 1,
    ApiKey.DESCRIBE_CONFIGS: 2,
    ApiKey.ALTER_CONFIGS: 1,
    ApiKey.ALTER_REPLICA_LOG_DIRS: 1,
    ApiKey.DESCRIBE_LOG_DIRS: 1,
    ApiKey.CREATE_PARTITIONS: 1,
    ApiKey.CREATE_DELEGATION_TOKEN: 1,
    ApiKey.RENEW_DELEGATION_TOKEN: 1,
    ApiKey.EXPIRE_DELEGATION_TOKEN: 1,
    ApiKey.DESCRIBE_DELEGATION_TOKEN: 1,
    ApiKey.DELETE_GROUPS: 1,
}

_throttle_field: dict[tuple[int, int], bool] = {}


def client_throttles(api_key: int, version: int) -> bool:
    """Whether a response of ``api_key`` at ``version`` with a throttle time asks
    the client to hold its next requests on the connection (KIP-219; see
    :data:`CLIENT_THROTTLE_VERSIONS`)."""
    first = CLIENT_THROTTLE_VERSIONS.get(api_key)
    if first is not None:
        return version >= first
    known = _throttle_field.get((api_key, version))
    if known is None:
        try:
            schema = api(api_key).module.RESPONSE_SCHEMAS[version]
            known = any(name == "throttle_time_ms" for name, _ in schema.fields)
        except (KeyError, UnsupportedVersionError):
            known = False
        _throttle_field[(api_key, version)] = known
    return known


# KIP-368: where in a session's lifetime it is renewed (Kafka's clients pick a
# random point in this range, so that many connections do not renew at once).
REAUTHENTICATE_SHARE = (0.85, 0.95)
# ... and never before this share, however long a request may wait at the peer.
_REAUTHENTICATE_FLOOR = 0.5


def reauthentication_delay(
    lifetime_ms: int, draw: float, *, longest_wait: float = 0.0
) -> float | None:
    """Seconds after a login began at which to renew its session (KIP-368).

    Args:
        lifetime_ms: the session lifetime the broker answered (SaslAuthenticate
            v1+); 0 or less: the session does not end.
        draw: where in :data:`REAUTHENTICATE_SHARE` to renew, 0 to 1 (a driver
            passes ``random.random()``; 0 is the earliest point).
        longest_wait: seconds the last request sent before the renewal may wait
            at the peer (a long poll), for a driver that renews between
            requests: its answer must arrive before the session ends.

    Returns:
        The delay, or None when the session does not end.
    """
    if lifetime_ms <= 0:
        return None
    low, high = REAUTHENTICATE_SHARE
    lifetime = lifetime_ms / 1000
    share = low + (high - low) * min(max(draw, 0.0), 1.0)
    return max(lifetime * share - longest_wait, lifetime * _REAUTHENTICATE_FLOOR)


def choose_version(
    api_key: int,
    broker_range: tuple[int, int] | None,
    client_range: tuple[int, int] | None = None,
) -> int:
    """The version to use for ``api_key``: the highest that both sides support.

    Args:
        api_key: the API.
        broker_range: ``(min, max)`` the broker advertised in ApiVersions, or
            ``None`` if it did not list the API.
        client_range: ``(min, max)`` the client speaks; defaults to
            :data:`CLIENT_VERSIONS`, itself capped by what the codec implements.

    Returns:
        The version.

    Raises:
        UnsupportedVersionError: the broker does not support the API, or the
            ranges do not overlap.
    """
    info = api(api_key)
    if client_range is None:
        client_range = CLIENT_VERSIONS.get(api_key, (info.min_version, info.max_version))
    lo = max(client_range[0], info.min_version)
    hi = min(client_range[1], info.max_version)
    if broker_range is None:
        raise UnsupportedVersionError(
            f"the broker does not support {info.name} (API key {api_key})"
        )
    lo = max(lo, broker_range[0])
    hi = min(hi, broker_range[1])
    if lo > hi:
        raise UnsupportedVersionError(
            f"no common version for {info.name}: broker {broker_range[0]}-{broker_range[1]}, "
            f"client {client_range[0]}-{client_range[1]}"
        )
    return hi


@dataclasses.dataclass(slots=True)
class InFlight:
    """A request waiting for its response.

    ``cookie`` is the driver's handle (e.g. the waiter to wake); it is returned
    untouched with the response.
    """

    correlation_id: int
    api_key: int
    api_version: int
    deadline: float
    cookie: Any
    sent_at: float = 0.0  # the driver's clock when the request was framed
    raw: bool = False  # its response is returned as its frame, not decoded


@dataclasses.dataclass(slots=True)
class Response:
    """A decoded response, matched to its request."""

    correlation_id: int
    api_key: int
    api_version: int
    body: Any
    cookie: Any


class ConnectionState:
    """Framing, correlation and version negotiation for one broker connection.

    Args:
        client_id: sent in every request header.
        max_frame_size: the largest response frame accepted.
        software_name, software_version: sent in ApiVersions v3+.
        stats: where requests, responses, bytes and latencies are counted (kept
            by the driver across reconnects); default a fresh one.
        join_from: responses of at least this many bytes are kept as the pieces
            they arrive in and joined once (see :mod:`trafka.codec.framing`
            and :attr:`wanted`); None: every response goes through the buffer.
    """

    def __init__(
        self,
        client_id: str | None = "trafka",
        *,
        max_frame_size: int = 100 * 1024 * 1024,
        software_name: str = SOFTWARE_NAME,
        software_version: str = SOFTWARE_VERSION,
        stats: NodeCounters | None = None,
        join_from: int | None = None,
    ) -> None:
        self._framer = RequestFramer(client_id)
        # Requests that name another client id (see the module's rules).
        self._framers: dict[str | None, RequestFramer] = {client_id: self._framer}
        self.stats = stats if stats is not None else NodeCounters()
        self._reader = FrameReader(max_frame_size, join_from=join_from)
        self._next_id = 0
        self._in_flight: deque[InFlight] = deque()
        self._outbox: list[bytes] = []
        self._broken: ProtocolError | None = None
        self._software = (software_name, software_version)
        #: ``api_key -> (min, max)`` from the broker, once the handshake is done.
        self.api_versions: dict[int, tuple[int, int]] | None = None
        #: The cluster's finalized feature levels (KIP-584) as this broker reported
        #: them in ApiVersions v3+, and their epoch (-1: none reported).
        self.finalized_features: dict[str, int] = {}
        self.finalized_features_epoch = -1
        self._handshake_sent = False
        self._handshake_retried = False
        self._versions: dict[int, int] = {}
        #: Until when (the driver's clock) the broker throttles this connection
        #: and new requests must wait (KIP-219); ``-inf`` when it never did.
        self.throttled_until = -math.inf
        #: ``(api_key, version, throttle_ms)`` of the last throttled response.
        self.last_throttle: tuple[int, int, int] = (-1, -1, 0)

    # -- state ---------------------------------------------------------------------

    @property
    def client_id(self) -> str | None:
        """Sent in every request header."""
        return self._framer.client_id

    @property
    def ready(self) -> bool:
        """Whether the ApiVersions handshake completed."""
        return self.api_versions is not None

    @property
    def broken(self) -> bool:
        return self._broken is not None

    @property
    def in_flight_count(self) -> int:
        return len(self._in_flight)

    @property
    def mid_response(self) -> bool:
        """Whether part of a response has been received (the rest is on its way)."""
        return self._reader.buffered > 0

    @property
    def wanted(self) -> int:
        """The bytes a large response being received still lacks (0: none is,
        see ``join_from``): received as a ``bytes`` of at most this many and
        passed to :meth:`receive_data`, they are kept without a copy."""
        return self._reader.wanted

    def version_for(self, api_key: int) -> int:
        """The negotiated version of ``api_key``.

        Raises:
            UsageError: the handshake has not completed.
            UnsupportedVersionError: no common version.
        """
        if self.api_versions is None:
            raise UsageError("the ApiVersions handshake has not completed")
        v = self._versions.get(api_key)
        if v is None:
            v = choose_version(api_key, self.api_versions.get(api_key))
            self._versions[api_key] = v
        return v

    def supports(self, api_key: int) -> bool:
        """Whether a common version of ``api_key`` exists (after the handshake)."""
        try:
            self.version_for(api_key)
        except UnsupportedVersionError:
            return False
        return True

    # -- sending -------------------------------------------------------------------

    def handshake(self, now: float, timeout: float, cookie: Any = None) -> bytes:
        """Start the ApiVersions exchange; returns the bytes to write first."""
        if self._handshake_sent:
            raise UsageError("handshake already started")
        self._handshake_sent = True
        return self._frame(
            ApiKey.API_VERSIONS,
            api(ApiKey.API_VERSIONS).max_version,
            self._api_versions_request(),
            now,
            timeout,
            cookie,
        )

    def _api_versions_request(self) -> Any:
        return api_versions.ApiVersionsRequest(
            client_software_name=self._software[0], client_software_version=self._software[1]
        )

    def send_request(
        self,
        api_key: int,
        body: Any,
        *,
        now: float,
        timeout: float,
        version: int | None = None,
        expect_response: bool = True,
        cookie: Any = None,
        raw: bool = False,
        client_id: str | EllipsisType | None = ...,
    ) -> tuple[int, bytes]:
        """Frame a request (as :meth:`send_request_parts`, joined)."""
        corr, parts = self.send_request_parts(
            api_key,
            body,
            now=now,
            timeout=timeout,
            version=version,
            expect_response=expect_response,
            cookie=cookie,
            raw=raw,
            client_id=client_id,
        )
        return corr, parts[0] if len(parts) == 1 else b"".join(parts)

    def send_request_parts(
        self,
        api_key: int,
        body: Any,
        *,
        now: float,
        timeout: float,
        version: int | None = None,
        expect_response: bool = True,
        cookie: Any = None,
        raw: bool = False,
        client_id: str | EllipsisType | None = ...,
    ) -> tuple[int, list[bytes]]:
        """Frame a request, as parts to write in order: a big byte field (a
        Produce's record batch) is a part of its own, never copied
        (:class:`~trafka.codec.protocol.RequestFramer`).

        Args:
            api_key: the API.
            body: the request message (of the chosen version's shape), or an
                :class:`~trafka.codec.protocol.EncodedRequest` that writes itself.
            now: the driver's clock, in seconds.
            timeout: seconds until the request times out.
            version: force a version (must be one both sides support); default
                the negotiated one.
            expect_response: ``False`` for Produce with ``acks=0``.
            cookie: returned with the response.
            raw: return the response as its frame, undecoded (see the rules).
            client_id: the header's client id, when not the state's.

        Returns:
            ``(correlation_id, frame parts)``.

        Raises:
            UsageError: before the handshake, or after a protocol error.
            UnsupportedVersionError: no common version.
            EncodeError: the body cannot be encoded at that version.
        """
        if self._broken is not None:
            raise UsageError("the connection is broken") from self._broken
        if version is None:
            version = self.version_for(api_key)
        corr = self._peek_id()
        framer = self._framer if client_id is ... else self._framer_for(client_id)
        parts = framer.parts(api_key, version, corr, body)
        self._next_id = (corr + 1) & 0x7FFFFFFF
        self.stats.sent(api_key, sum(map(len, parts)), now)
        if expect_response:
            flight = InFlight(corr, api_key, version, now + timeout, cookie, now, raw)
            self._in_flight.append(flight)
        return corr, parts

    def _framer_for(self, client_id: str | None) -> RequestFramer:
        framer = self._framers.get(client_id)
        if framer is None:
            if len(self._framers) >= _MAX_FRAMERS:  # client ids are the clients' to choose
                self._framers = {self._framer.client_id: self._framer}
            framer = self._framers[client_id] = RequestFramer(client_id)
        return framer

    def _frame(
        self, api_key: int, version: int, body: Any, now: float, timeout: float, cookie: Any
    ) -> bytes:
        return self.send_request(
            api_key, body, now=now, timeout=timeout, version=version, cookie=cookie
        )[1]

    def _peek_id(self) -> int:
        return self._next_id

    def data_to_send(self) -> bytes:
        """Bytes the state produced on its own (the ApiVersions retry); empty if none."""
        if not self._outbox:
            return b""
        data = b"".join(self._outbox)
        self._outbox.clear()
        return data

    # -- receiving -----------------------------------------------------------------

    def receive_data(
        self, data: bytes | bytearray | memoryview, now: float | None = None
    ) -> list[Response]:
        """Feed received bytes; return the responses they complete, in order.

        The ApiVersions response of the handshake is consumed here; it is
        returned too (with the negotiated table already applied) so that the
        driver can wake whoever waits for the handshake.

        Raises:
            ProtocolError: a frame too large or malformed, an unexpected
                correlation id, or an undecodable body. The state is broken,
                and every request still waiting is in :meth:`fail_all`: the
                one the bad frame answered, and any answered before it in the
                same ``data`` (whose responses are not returned).
        """
        if self._broken is not None:
            raise self._broken
        self.stats.received(len(data), now)
        try:
            frames = self._reader.take(data)
        except DecodeError as exc:
            raise self._break(f"bad response framing: {exc}{_peer_hint(data)}") from None
        out: list[Response] = []
        answered: list[InFlight] = []
        for frame in frames:
            head = self._in_flight[0] if self._in_flight else None
            try:
                response = self._on_frame(frame, now)
            except ProtocolError:
                # Put back the requests answered before the bad frame: they are
                # not returned, so fail_all() must fail them (none may wait forever).
                self._in_flight.extendleft(reversed(answered))
                raise
            if response is not None and head is not None:
                out.append(response)
                answered.append(head)
        return out

    def _on_frame(self, frame: bytes, now: float | None) -> Response | None:
        try:
            corr = peek_correlation_id(frame)
        except DecodeError as exc:
            raise self._break(str(exc)) from None
        if not self._in_flight:
            raise self._break(f"response with correlation id {corr} but no request in flight")
        head = self._in_flight[0]
        if head.correlation_id != corr:
            known = any(r.correlation_id == corr for r in self._in_flight)
            what = "out of order" if known else "unknown"
            raise self._break(f"{what} correlation id {corr} (expected {head.correlation_id})")
        if head.raw:
            self._in_flight.popleft()
            self.stats.answered(head.api_key, None if now is None else now - head.sent_at, now)
            return Response(corr, head.api_key, head.api_version, frame, head.cookie)
        # The request leaves the queue only once its response is handled: if
        # that fails, fail_all() still has it.
        if head.api_key == ApiKey.API_VERSIONS and self.api_versions is None:
            response = self._on_api_versions(frame, head, now)
            self._in_flight.popleft()
            self.stats.answered(
                ApiKey.API_VERSIONS, None if now is None else now - head.sent_at, now
            )
            return response
        try:
            body = decode_response_frame(frame, head.api_key, head.api_version)
        except (DecodeError, UnsupportedVersionError) as exc:
            raise self._break(f"undecodable response: {exc}") from None
        self._in_flight.popleft()
        self.stats.answered(head.api_key, None if now is None else now - head.sent_at, now)
        # The only cost per response when nobody is throttled: a read and a compare.
        if getattr(body, "throttle_time_ms", 0) > 0:
            self._throttled(head.api_key, head.api_version, body.throttle_time_ms, now)
        return Response(corr, head.api_key, head.api_version, body, head.cookie)

    def _throttled(self, api_key: int, version: int, throttle_ms: int, now: float | None) -> None:
        """A response said the broker throttles this client for ``throttle_ms``."""
        self.stats.throttled(throttle_ms)
        self.last_throttle = (api_key, version, throttle_ms)
        if now is not None and client_throttles(api_key, version):
            until = now + throttle_ms / 1000
            if until > self.throttled_until:
                self.throttled_until = until

    def _on_api_versions(self, frame: bytes, head: InFlight, now: float | None) -> Response | None:
        try:
            _, body = decode_response(frame, ApiKey.API_VERSIONS, head.api_version)
        except DecodeError:
            # An old broker answers an unknown ApiVersions version in the v0 layout.
            try:
                _, body = decode_response(frame, ApiKey.API_VERSIONS, 0)
            except DecodeError as exc:
                raise self._break(f"undecodable ApiVersions response: {exc}") from None
        table = {k.api_key: (k.min_version, k.max_version) for k in body.api_keys}
        if body.error_code == ErrorCode.UNSUPPORTED_VERSION and not self._handshake_retried:
            ours = table.get(ApiKey.API_VERSIONS)
            if ours is None:
                raise self._break(
                    "the broker rejected ApiVersions without saying which versions it supports"
                )
            self._handshake_retried = True
            version = min(ours[1], api(ApiKey.API_VERSIONS).max_version)
            deadline = head.deadline
            when = now if now is not None else 0.0
            body_v = (
                self._api_versions_request() if version >= 3 else api_versions.ApiVersionsRequest()
            )
            self._outbox.append(
                self._frame(
                    ApiKey.API_VERSIONS,
                    version,
                    body_v,
                    when,
                    max(deadline - when, 0.0),
                    head.cookie,
                )
            )
            return None
        if body.error_code:
            raise self._break(f"ApiVersions failed with error code {body.error_code}")
        if getattr(body, "throttle_time_ms", 0) > 0:
            self._throttled(ApiKey.API_VERSIONS, head.api_version, body.throttle_time_ms, now)
        self.api_versions = table
        self.finalized_features_epoch = getattr(body, "finalized_features_epoch", -1)
        self.finalized_features = {
            f.name: f.max_version_level for f in getattr(body, "finalized_features", ())
        }
        return Response(
            head.correlation_id, ApiKey.API_VERSIONS, head.api_version, body, head.cookie
        )

    def _break(self, why: str) -> ProtocolError:
        self._broken = ProtocolError(why)
        return self._broken

    # -- deadlines -----------------------------------------------------------------

    def next_deadline(self) -> float | None:
        """The earliest in-flight deadline, or ``None`` when nothing is in flight."""
        if not self._in_flight:
            return None
        return min(r.deadline for r in self._in_flight)

    def expired(self, now: float) -> list[InFlight]:
        """In-flight requests whose deadline has passed (they stay queued)."""
        return [r for r in self._in_flight if r.deadline <= now]

    def fail_all(self) -> list[InFlight]:
        """Remove and return every in-flight request (the connection is closing)."""
        pending = list(self._in_flight)
        self._in_flight.clear()
        self.stats.requests_failed += len(pending)
        return pending


def _peer_hint(data: bytes | bytearray | memoryview) -> str:
    """What answered, when the bytes that broke the framing say it: a TLS record
    (a TLS listener reached in plaintext may answer the ApiVersions bytes with an
    alert, as Java's does; OpenSSL's mostly just close) or text (a web server's
    port), read as a frame size."""
    head = bytes(data[:4])
    if head[:2] in (b"\x15\x03", b"\x16\x03"):
        return " (the peer answered in TLS: set security.protocol to SSL or SASL_SSL)"
    if len(head) == 4 and all(0x20 <= b < 0x7F for b in head):
        # A size that large is text; an HTTP server's answer, most often.
        return f" (the peer answered text, {head.decode()!r}...: not a Kafka broker)"
    return ""
