"""Reading offset ranges over plain blocking sockets, with the SDK's I/O-free core.

A Spark task reads one partition's range from its leader, then stops; it needs
none of what the async consumer's event loop is for (many partitions at once,
groups). So the executor's
reader drives the SDK's sans-IO parts itself, in the task's own thread: no
event loop, no thread hand-off per fetch.

Rules:

* :class:`BlockingConnection`: one socket per broker (TLS-wrapped for ``SSL``
  and ``SASL_SSL``), framed by a :class:`~trafka.sdk.connection_state.ConnectionState`
  (correlation ids, ApiVersions, version choice), then SASL by the SDK's own
  :func:`~trafka.sdk.security.authenticate`, whose awaits here never suspend
  (:func:`_drive`). :meth:`BlockingConnection.call` writes a request and
  reads until its answer, within ``request.timeout.ms`` (plus the fetch's
  wait); :meth:`~BlockingConnection.send` and :meth:`~BlockingConnection.receive`
  are its two halves, for a request answered later (Kafka answers a
  connection's requests in order). Any socket, framing or timeout problem
  closes the connection and raises a
  :class:`~trafka.sdk.errors.KafkaConnectionError`.
* :class:`RangeReader`: a :class:`~trafka.sdk.metadata.MetadataCache` for
  leaders and a :class:`~trafka.sdk.fetcher.Fetcher` for positions, fetch
  requests and answers (sessions, ``read_committed``, control batches,
  out-of-range), exactly as the async consumer uses them, but decoding into
  column buffers (:meth:`~trafka.sdk.fetcher.Fetcher.take_columns`): no
  Python object per record. A range is read by seeking to its start with its
  end as the fetch bound, so no fetch asks past it. While fetched data is
  buffered, the fetch after it is sent before the data is decoded (the
  fetcher's prefetch), so the broker's answer travels while the task decodes
  and Spark takes the chunks: one fetch in flight per reader, no thread. A
  read that ends with that fetch unanswered (Spark stopped early, an error)
  waits for its answer and applies it, so a pooled connection never carries a
  stale answer. A leadership error or a failed connection refreshes the metadata (from
  any broker that answers) and the fetch goes to the new leader, after
  ``retry.backoff.ms``, until ``kafkaConsumer.pollTimeoutMs`` passes without a
  record.
* OAUTHBEARER fetches its token over HTTP asynchronously; such reads use the
  pooled async consumer instead (:func:`supported`).
* A reader is built on :func:`reader_settings`: the consumer settings with
  what only a group member uses (``group.id`` and the group's timers) left
  out, so that the readers a worker keeps serve every query that reads the
  same cluster the same way, whatever group id each query presents.
"""

from __future__ import annotations

import dataclasses
import socket
import ssl
import time
from collections.abc import Iterator
from typing import Any

from ..codec import ApiKey, KafkaError
from ..codec.columns import RecordColumns
from ..sdk.config import ConsumerConfig
from ..sdk.connection_state import ConnectionState
from ..sdk.errors import KafkaConnectionError, ProtocolError, TrafkaError
from ..sdk.fetcher import (
    EARLIEST,
    Fetcher,
    TopicPartition,
    build_list_offsets,
    parse_list_offsets,
)
from ..sdk.metadata import MetadataCache
from ..sdk.security import authenticate, client_ssl_context

__all__ = ["BlockingConnection", "RangeReader", "reader_settings", "supported"]

_FETCH = ApiKey.FETCH  # bound: an enum attribute lookup costs ~0.3 µs, once per fetch
_RECEIVE_BYTES = 1 << 20  # the most one socket read takes
# Answers of at least this many bytes (a fetch's) are received as the pieces
# the socket hands over, joined once at the end (see _answer).
_JOIN_FROM = 1 << 18


def supported(config: ConsumerConfig) -> bool:
    """Whether :class:`RangeReader` can read with ``config`` (see the module doc)."""
    return not (config.uses_sasl and config.sasl_mechanism == "OAUTHBEARER")


# Settings a consumer only uses as a group member: a reader (or the pooled async
# consumer, which is assigned its partitions and seeks) never joins a group,
# commits or asks for committed offsets. group.id is the one that changes per
# query (groupIdPrefix and a random suffix); the rest go too, so that they
# cannot split the pool either. Left at their defaults, as a consumer without a
# group has them.
_GROUP_ONLY = (
    "group_id",
    "group_instance_id",
    "session_timeout_ms",
    "heartbeat_interval_ms",
    "max_poll_interval_ms",
    "auto_commit_interval_ms",
    "partition_assignment_strategy",
    "group_protocol",
    "group_remote_assignor",
)
_GROUP_DEFAULTS: dict[str, Any] = {
    f.name: f.default for f in dataclasses.fields(ConsumerConfig) if f.name in _GROUP_ONLY
}


def reader_settings(config: ConsumerConfig) -> ConsumerConfig:
    """``config`` as a reader needs it, and as readers are pooled by: the
    cluster, security, client and fetch settings, without what only a group
    member uses (see the module doc). Two queries whose settings differ only in
    ``group.id`` get equal (and equally hashed) settings."""
    if all(getattr(config, name) == default for name, default in _GROUP_DEFAULTS.items()):
        return config
    return dataclasses.replace(config, **_GROUP_DEFAULTS)


def _drive(coroutine: Any) -> Any:
    """Run a coroutine whose awaits all complete at once (they do blocking I/O)."""
    try:
        coroutine.send(None)
    except StopIteration as done:
        return done.value
    coroutine.close()
    raise RuntimeError("a blocking call suspended")  # pragma: no cover


class BlockingConnection:
    """A broker connection over a blocking socket (see the module doc)."""

    def __init__(self, host: str, port: int, config: ConsumerConfig) -> None:
        self.host, self.port = host, port
        self._config = config
        self._state = ConnectionState(
            config.client_id,
            max_frame_size=config.receive_message_max_bytes,
            join_from=_JOIN_FROM,
        )
        timeout = config.socket_connection_setup_timeout_ms / 1000
        try:
            sock = socket.create_connection((host, port), timeout=timeout)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            context = client_ssl_context(config)
            if context is not None:
                sock = context.wrap_socket(sock, server_hostname=host)
        except (OSError, ssl.SSLError) as exc:
            raise KafkaConnectionError(f"cannot connect to {host}:{port}: {exc}") from None
        self._sock: socket.socket | None = sock
        # Received bytes land here, one buffer per connection used again for
        # every read (the framing copies what it keeps): a fresh 1 MiB bytes
        # object per read cost an allocation and its pages' first touch each time.
        # 1 MiB held per open connection (a worker keeps at most 32 idle); reads
        # of 256 KiB cost as much as fresh bytes did.
        self._inbox = bytearray(_RECEIVE_BYTES)
        try:
            now = time.monotonic()
            self._write(self._state.handshake(now, config.request_timeout_ms / 1000))
            self._answer(None, now + config.request_timeout_ms / 1000)
            if config.uses_sasl:
                _drive(authenticate(self, config))
        except BaseException:
            self.close()
            raise

    def version_for(self, api_key: int) -> int:
        return self._state.version_for(api_key)

    async def request(self, api_key: int, body: Any, *, version: int | None = None) -> Any:
        """For :func:`~trafka.sdk.security.authenticate`: :meth:`call`, awaitable."""
        return self.call(api_key, body, version=version)

    def call(
        self, api_key: int, body: Any, *, version: int | None = None, extra_s: float = 0.0
    ) -> Any:
        """Send one request and wait for its answer (``request.timeout.ms`` + ``extra_s``)."""
        return self.receive(*self.send(api_key, body, version=version, extra_s=extra_s))

    def send(
        self, api_key: int, body: Any, *, version: int | None = None, extra_s: float = 0.0
    ) -> tuple[int, float]:
        """Send one request without waiting: its correlation id and the deadline
        of its answer (``request.timeout.ms`` + ``extra_s`` from now), for
        :meth:`receive`. The broker answers a connection's requests in order."""
        timeout = self._config.request_timeout_ms / 1000 + extra_s
        now = time.monotonic()
        try:
            corr, frame = self._state.send_request(
                api_key, body, now=now, timeout=timeout, version=version
            )
        except TrafkaError:
            self.close()
            raise
        self._write(frame)
        return corr, now + timeout

    def receive(self, corr: int, deadline: float) -> Any:
        """The answer to the request :meth:`send` sent as ``corr``."""
        return self._answer(corr, deadline)

    def _write(self, data: bytes) -> None:
        if self._sock is None:
            raise KafkaConnectionError(f"the connection to {self.host}:{self.port} is closed")
        try:
            self._sock.sendall(data)
        except (OSError, ssl.SSLError) as exc:
            self.close()
            raise KafkaConnectionError(f"{self.host}:{self.port}: {exc}") from None

    def _answer(self, corr: int | None, deadline: float) -> Any:
        """Read until the answer to ``corr`` (None: the handshake's) arrives."""
        sock = self._sock
        while sock is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                raise KafkaConnectionError(f"{self.host}:{self.port} did not answer in time")
            # The rest of a large answer arrives as new bytes objects, which the
            # framing keeps as they are and joins once (one copy, not two: see
            # trafka.codec.framing); anything else lands in the inbox.
            wanted = self._state.wanted
            data: bytes | memoryview
            try:
                sock.settimeout(left)
                if wanted:
                    data = sock.recv(min(wanted, _RECEIVE_BYTES))
                else:
                    data = memoryview(self._inbox)[: sock.recv_into(self._inbox)]
            except (OSError, ssl.SSLError) as exc:
                self.close()
                raise KafkaConnectionError(f"{self.host}:{self.port}: {exc}") from None
            if not data:
                self.close()
                raise KafkaConnectionError(f"{self.host}:{self.port} closed the connection")
            try:
                responses = self._state.receive_data(data)
            except ProtocolError:
                self.close()
                raise
            retry = self._state.data_to_send()  # an ApiVersions retry at the broker's version
            if retry:
                self._write(retry)
            for response in responses:
                if corr is None or response.correlation_id == corr:
                    if corr is None and not self._state.ready:
                        continue
                    return response.body
            if corr is None and self._state.ready:
                return None
        raise KafkaConnectionError(f"the connection to {self.host}:{self.port} is closed")

    @property
    def closed(self) -> bool:
        return self._sock is None

    @property
    def in_flight(self) -> int:
        """Requests sent and not answered yet."""
        return self._state.in_flight_count

    def close(self) -> None:
        sock, self._sock = self._sock, None
        if sock is not None:
            try:
                sock.close()
            except OSError:
                pass


@dataclasses.dataclass(slots=True)
class _Pending:
    """A fetch sent and not yet answered."""

    conn: BlockingConnection
    corr: int
    deadline: float
    positions: dict[TopicPartition, int]


class RangeReader:
    """Reads partitions' offset ranges, one at a time (see the module doc).

    Args:
        config: the consumer settings (``auto.offset.reset`` ``none`` makes
            deleted offsets an :class:`~trafka.sdk.fetcher.OffsetOutOfRangeError`,
            ``earliest`` skips to the log's start).
    """

    def __init__(self, config: ConsumerConfig) -> None:
        self.config = config
        self.metadata = MetadataCache(
            max_age=config.metadata_max_age_ms / 1000,
            backoff=config.retry_backoff_ms / 1000,
            auto_create=False,
        )
        self.fetcher = Fetcher.for_consumer(self.metadata, config)
        # By node (None: a bootstrap address the metadata has not named), the
        # least recently used first.
        self._connections: dict[int | None, BlockingConnection] = {}
        self.opened = 0  # connections opened (for tests)
        # The fetch sent ahead, whose answer is not read yet (at most one).
        self._pending: _Pending | None = None

    # -- connections and metadata ---------------------------------------------------------

    @property
    def open_connections(self) -> int:
        """How many of its sockets are open."""
        return sum(1 for conn in self._connections.values() if not conn.closed)

    @property
    def requests_in_flight(self) -> int:
        """Requests its open sockets carry unanswered (for tests)."""
        return sum(conn.in_flight for conn in self._connections.values() if not conn.closed)

    def close_connections(self, keep: int = 0) -> None:
        """Close all but the ``keep`` most recently used connections (all by default)."""
        live = [c for c in self._connections.values() if not c.closed]
        for conn in live[: max(0, len(live) - keep)]:
            conn.close()
        self._connections = {n: c for n, c in self._connections.items() if not c.closed}

    def _used(self, node: int | None, conn: BlockingConnection) -> BlockingConnection:
        self._connections.pop(node, None)
        self._connections[node] = conn  # now the most recently used
        return conn

    def _connection(self, node: int) -> BlockingConnection:
        conn = self._connections.get(node)
        if conn is not None and not conn.closed:
            return self._used(node, conn)
        broker = self.metadata.broker(node)
        if broker is None:
            self.metadata.request_update()
            raise KafkaConnectionError(f"broker {node} is not in the metadata")
        conn = BlockingConnection(broker.host, broker.port, self.config)
        self.opened += 1
        return self._used(node, conn)

    def _any_connection(self) -> BlockingConnection:
        for node, conn in reversed(self._connections.items()):
            if not conn.closed:
                return self._used(node, conn)
        errors = []
        for node in list(self.metadata.brokers):
            try:
                return self._connection(node)
            except TrafkaError as exc:
                errors.append(exc)
        for host, port in self.config.bootstrap_addresses:
            try:
                conn = BlockingConnection(host, port, self.config)
            except TrafkaError as exc:
                errors.append(exc)
                continue
            self.opened += 1
            return self._used(None, conn)  # until the metadata names it
        raise KafkaConnectionError(f"no broker answers: {errors[-1] if errors else 'none known'}")

    def _refresh(self, topic: str) -> None:
        self.metadata.add_topics([topic])
        conn = self._any_connection()
        try:
            version = conn.version_for(ApiKey.METADATA)
            # Every topic the reader has read (a pooled reader serves many): a
            # request for this one alone leaves the others missing from the answer,
            # and the cache then asks again before every fetch.
            body = self.metadata.build_request(version)
            self.metadata.update(
                conn.call(ApiKey.METADATA, body, version=version), time.monotonic()
            )
        except TrafkaError:
            conn.close()
            raise

    def _leader(self, tp: TopicPartition) -> BlockingConnection:
        leader = self.metadata.leader_for(tp.topic, tp.partition)
        if leader is None or self.metadata.needs_update(time.monotonic()):
            self._refresh(tp.topic)
            leader = self.metadata.leader_for(tp.topic, tp.partition)
        if leader is None:
            raise KafkaConnectionError(f"{tp.topic}-{tp.partition} has no leader now")
        return self._connection(leader)

    # -- reading --------------------------------------------------------------------------

    def earliest(self, tp: TopicPartition) -> int:
        """The partition's first offset (its log start)."""
        return self._list_offset(tp, EARLIEST)

    def _list_offset(self, tp: TopicPartition, target: int) -> int:
        conn = self._leader(tp)
        version = conn.version_for(ApiKey.LIST_OFFSETS)
        body = build_list_offsets({tp: target}, version, read_committed=self.config.read_committed)
        answer = parse_list_offsets(conn.call(ApiKey.LIST_OFFSETS, body, version=version))[tp]
        if isinstance(answer, KafkaError):
            self.metadata.on_partition_error(answer.code, tp.topic, tp.partition)
            raise answer
        return max(answer[0], 0)

    def read(
        self,
        tp: TopicPartition,
        start: int,
        end: int,
        timeout_ms: int,
        chunk: int,
        *,
        headers: bool = False,
    ) -> Iterator[tuple[RecordColumns, int]]:
        """``tp``'s records from ``start`` until the position reaches ``end``:
        ``(records, position after them)`` for each chunk of at most ``chunk``
        (records at or past ``end`` that came in a fetched batch included), as
        columns (with the header columns when ``headers``).

        Raises:
            OffsetOutOfRangeError: ``start`` (or a later position) is no longer
                in the log, with ``auto.offset.reset=none``.
            KafkaConnectionError, KafkaError: nothing could be read for
                ``timeout_ms`` (the last error).
        """
        fetcher = self.fetcher
        fetcher.columns = headers
        fetcher.assign([tp])
        fetcher.seek(tp, start, until=end)
        backoff = self.config.retry_backoff_ms / 1000
        deadline = time.monotonic() + timeout_ms / 1000
        last: BaseException | None = None
        try:
            while True:
                position = fetcher.position(tp)
                if position is not None and position >= end:
                    return
                if self._pending is None and fetcher.has_data():
                    self._fetch_ahead(tp)
                records = fetcher.take_columns(chunk).get(tp) or RecordColumns()
                after = fetcher.position(tp)
                if records or (after is not None and after != position):
                    yield records, after if after is not None else start
                    deadline = time.monotonic() + timeout_ms / 1000
                    continue
                if time.monotonic() > deadline:
                    raise last or KafkaConnectionError(
                        f"no records from {tp.topic}-{tp.partition} at offset {position}"
                    )
                try:
                    self._step(tp)
                    last = None
                    if self.metadata.needs_update(time.monotonic()):
                        time.sleep(backoff)  # a leader moved: let the cluster settle
                except (KafkaConnectionError, ProtocolError) as exc:
                    last = exc
                    self.metadata.request_update()
                    time.sleep(backoff)
                except KafkaError as exc:
                    if not exc.code.retriable:
                        raise
                    last = exc
                    self.metadata.request_update()
                    time.sleep(backoff)
        finally:
            self._settle()
            fetcher.assign([])

    def _step(self, tp: TopicPartition) -> None:
        """One round trip that moves ``tp`` on: a reset lookup or a fetch (the
        answer to the one sent ahead, if any)."""
        fetcher = self.fetcher
        if self._pending is None:
            resets = fetcher.needs_reset()
            if tp in resets:
                offset = self._list_offset(tp, resets[tp])
                fetcher.apply_reset(tp, offset, resets[tp])
                return
            if not self._send_fetch(tp):
                return  # nothing to fetch: the position is at the range's end
        self._receive_fetch()

    def _fetch_ahead(self, tp: TopicPartition) -> None:
        """Send the fetch after the buffered data, if the fetcher wants one
        (it asks for no offset at or past the range's end), to be answered
        while the buffered data is decoded and handed on. A failure here is
        left for the blocking fetch (:meth:`_step`) to meet and retry."""
        if tp in self.fetcher.needs_reset():
            return
        try:
            self._send_fetch(tp)
        except (KafkaConnectionError, ProtocolError):
            self.metadata.request_update()
        except KafkaError as exc:
            if not exc.code.retriable:
                raise
            self.metadata.request_update()

    def _send_fetch(self, tp: TopicPartition) -> bool:
        """Send a fetch for ``tp`` to its leader, if it is fetchable: True if sent."""
        fetcher = self.fetcher
        conn = self._leader(tp)
        node = self.metadata.leader_for(tp.topic, tp.partition)
        assert node is not None
        fetchable = fetcher.fetchable(lambda t, p: node).get(node)
        if not fetchable:
            return False
        session = fetcher.session(node)
        version = fetcher.fetch_version(conn.version_for(_FETCH), fetchable, session)
        request, positions = fetcher.build_fetch(fetchable, version, session)
        try:
            corr, deadline = conn.send(
                _FETCH, request, version=version, extra_s=self.config.fetch_max_wait_ms / 1000
            )
        except TrafkaError:
            fetcher.fetch_failed(positions)
            raise
        self._pending = _Pending(conn, corr, deadline, positions)
        return True

    def _receive_fetch(self) -> None:
        """Wait for the answer to the fetch sent and apply it."""
        pending, self._pending = self._pending, None
        assert pending is not None
        try:
            answer = pending.conn.receive(pending.corr, pending.deadline)
            self.fetcher.handle_fetch_response(pending.positions, answer)
        except TrafkaError:
            self.fetcher.fetch_failed(pending.positions)
            raise

    def _settle(self) -> None:
        """Apply the answer to a fetch still in flight when a read ends early
        (Spark stopped reading, or an error), so that its connection carries no
        stale answer and the fetch session stays in step with the broker. The
        fetch is within the range, so the broker answers at once."""
        if self._pending is not None:
            try:
                self._receive_fetch()
            except TrafkaError:
                pass  # a failed connection is closed; the next read opens another

    def close(self) -> None:
        """Close its connections (a later read opens new ones)."""
        self.close_connections()
