"""Answering a request: admission, routing to its handler, quotas, replication waits.

Rules (the broker core's, see ``broker/__init__.py``): one frame in, exactly one
outcome out, never an exception for bad input; an API whose feature is not
finalized is refused before anything else; deferred transaction markers are
written before the next request is handled; in a cluster, a group or
transaction request for a coordinator elsewhere is answered NOT_COORDINATOR,
and a coordinator's answer waits until what it wrote is replicated, whether
the handler gave it at once or after a wait of its own (a TxnOffsetCommit
verified with its transaction coordinator, KIP-890). A request
over its client quotas is answered with its throttle time (KIP-219), a Fetch
capped to what the quota allows; a parked request's answer too, when it completes.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import time
from collections.abc import Callable
from typing import Any

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages.headers import RequestHeader
from trafka.codec.protocol import api

from ..clock import mono_ms
from ..cluster.view import OFFSETS_TOPIC, TRANSACTION_STATE_TOPIC
from ..errors import UnknownTopicOrPartitionError
from ..handlers import HANDLERS
from ..handlers._base import BrokerPort, HandlerSpec, RequestContext
from ..handlers.k01_fetch import FetchPlan
from ..intake import (
    Admitted,
    admit,
)
from ..outcomes import Close, NoResponse, Outcome, ParkAgain, Parked, Reply, Waiter
from ..purgatory import ParkedRequest
from ..quotas import (
    CONSUMER_BYTE_RATE,
    PRODUCER_BYTE_RATE,
)
from ..security.authorizer import (
    host_of,
)
from ..session import ConnectionSession
from .connections import Sessions

__all__ = ["Dispatcher"]

log = logging.getLogger("trafka.brokerlite")

_PRODUCE = ApiKey.PRODUCE
FETCH_KEY = ApiKey.FETCH
# Never throttled: the SASL exchange (Kafka does not throttle authentication).
_QUOTA_EXEMPT = frozenset({ApiKey.SASL_HANDSHAKE, ApiKey.SASL_AUTHENTICATE})
# How long a coordinator's answer waits for its records to replicate (Kafka's
# offsets.commit.timeout.ms; its transaction-state appends wait about as long).
_REPLICATION_WAIT_MS = 5000
# Group APIs (by a single group_id) that only the group's coordinator answers in
# cluster mode: OffsetCommit, OffsetFetch, JoinGroup, Heartbeat, LeaveGroup,
# SyncGroup, TxnOffsetCommit, OffsetDelete, ConsumerGroupHeartbeat,
# ShareGroupHeartbeat, DescribeShareGroupOffsets, AlterShareGroupOffsets,
# DeleteShareGroupOffsets.
_GROUP_KEYED = frozenset(
    {
        ApiKey.OFFSET_COMMIT,
        ApiKey.OFFSET_FETCH,
        ApiKey.JOIN_GROUP,
        ApiKey.HEARTBEAT,
        ApiKey.LEAVE_GROUP,
        ApiKey.SYNC_GROUP,
        ApiKey.TXN_OFFSET_COMMIT,
        ApiKey.OFFSET_DELETE,
        ApiKey.CONSUMER_GROUP_HEARTBEAT,
        ApiKey.SHARE_GROUP_HEARTBEAT,
        ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS,
        ApiKey.ALTER_SHARE_GROUP_OFFSETS,
        ApiKey.DELETE_SHARE_GROUP_OFFSETS,
    }
)
# The batched ones (OffsetFetch v8+, DescribeShareGroupOffsets): the class of a
# group's answer, for the groups coordinated elsewhere.
_GROUP_ANSWER = {9: "OffsetFetchResponseGroup", 90: "DescribeShareGroupOffsetsResponseGroup"}
# Answered once what they wrote to __consumer_offsets is replicated (cluster mode):
# OffsetCommit, TxnOffsetCommit, ShareGroupHeartbeat.
_OFFSETS_WRITES = frozenset(
    {ApiKey.OFFSET_COMMIT, ApiKey.TXN_OFFSET_COMMIT, ApiKey.SHARE_GROUP_HEARTBEAT}
)
# Transaction APIs that only the transactional id's coordinator answers in cluster
# mode, once what they wrote is replicated: InitProducerId (with an id),
# AddPartitionsToTxn, AddOffsetsToTxn, EndTxn.
_TXN_KEYED = frozenset(
    {
        ApiKey.INIT_PRODUCER_ID,
        ApiKey.ADD_PARTITIONS_TO_TXN,
        ApiKey.ADD_OFFSETS_TO_TXN,
        ApiKey.END_TXN,
    }
)


class Dispatcher:
    """Answering requests (``Broker.dispatch``): it keeps no state of its own.

    Args:
        core: the broker as its handlers see it (each request's context is
            made on it), whose parts it reads when a request comes.
        sessions: the connections' sessions.
        offsets_partition: the ``__consumer_offsets`` partition of a group
            (cluster mode).
    """

    def __init__(
        self,
        core: BrokerPort,
        sessions: Sessions,
        offsets_partition: Callable[[str], int | None],
    ) -> None:
        self._core = core
        self._sessions = sessions
        self._offsets_partition = offsets_partition

    def handle_frame(self, conn_id: int, frame: bytes | memoryview, now_ms: int) -> Outcome:
        """Decode one request frame and handle it (``Broker.handle_frame``): never
        raises for bad input, which becomes a :class:`Close`."""
        session = self._sessions.session(conn_id)
        admitted = admit(session, frame, now_ms, self._core.config)
        if not isinstance(admitted, Admitted):
            return admitted
        header, body = admitted
        if self._core.quotas.active and header.request_api_key not in _QUOTA_EXEMPT:
            return self._handle_within_quotas(session, header, body, now_ms, len(frame))
        return self._handle(session, header, body, now_ms)

    def handle(self, conn_id: int, header: RequestHeader, body: Any, now_ms: int) -> Outcome:
        """Handle one decoded request, trusting its caller (``Broker.handle``).

        Raises:
            KeyError: the API key has no handler.
        """
        return self._handle(self._sessions.session(conn_id), header, body, now_ms)

    def _handle(
        self, session: ConnectionSession, header: RequestHeader, body: Any, now_ms: int
    ) -> Outcome:
        core = self._core
        spec = HANDLERS[header.request_api_key]
        if spec.feature is not None and core.features.level(spec.feature) < 1:
            # Kafka answers an API whose feature is not finalized (level 0) with
            # UNSUPPORTED_VERSION before anything else, authorization included.
            return Reply(
                header.correlation_id,
                spec.api_key,
                header.request_api_version,
                spec.refusal(body, header.request_api_version, ErrorCode.UNSUPPORTED_VERSION),
            )
        if core.markers.pending:
            # Markers of a transaction answered just before: no request may see it half done.
            core.markers.run_deferred(now_ms)
        elsewhere: list[str] = []  # groups of a batched OffsetFetch coordinated elsewhere
        cluster, cluster_txn = core.cluster, core.cluster_txn
        if cluster is not None and spec.api_key in _GROUP_KEYED:
            batched = list(getattr(body, "groups", None) or ())
            groups = [g.group_id for g in batched] or [getattr(body, "group_id", "")]
            elsewhere = [g for g in groups if g and cluster.coordinator(g) != core.node_id]
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
                # OffsetFetch v8+, DescribeShareGroupOffsets: the groups coordinated
                # here are answered, each of the others gets NOT_COORDINATOR of its own.
                body = dataclasses.replace(
                    body, groups=[g for g in batched if g.group_id not in elsewhere]
                )
        tids: list[str] = []
        if cluster_txn is not None and spec.api_key in _TXN_KEYED:
            tids = _transactional_ids(spec.api_key, header.request_api_version, body)
            if not all(cluster_txn.owns(t) for t in tids):
                return Reply(
                    header.correlation_id,
                    spec.api_key,
                    header.request_api_version,
                    spec.refusal(body, header.request_api_version, ErrorCode.NOT_COORDINATOR),
                )
        ctx = RequestContext(core, session, header, now_ms)
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
        replication = self._replication_wait(spec, ctx.version, body, tids)
        if isinstance(result, Parked):
            entry = core.purgatory.get(result.ticket)
            if entry is not None and elsewhere:
                # (a DescribeShareGroupOffsets waiting for its share coordinators)
                entry.waiter = _ElsewhereToo(entry.waiter, spec.api_key, elsewhere)
            if entry is not None and replication is not None:
                # A coordinator's answer that comes after a wait (a TxnOffsetCommit
                # verified with its transaction coordinator, KIP-890) waits for what
                # it wrote as one given at once does.
                entry.waiter = _ThenReplicated(entry.waiter, replication)
        if isinstance(result, Reply | NoResponse | Parked | Close):
            return result
        if elsewhere:
            result = _with_elsewhere(result, spec.api_key, elsewhere)
        waiter = None if replication is None else replication(result, ctx.mono_ms)
        if waiter is not None:
            return ctx.park(waiter)
        return Reply(header.correlation_id, spec.api_key, header.request_api_version, result)

    def _replication_wait(
        self, spec: HandlerSpec, version: int, body: Any, tids: list[str]
    ) -> Callable[[Any, int], _Replicated | None] | None:
        """How a coordinator's answer to this request waits for what it wrote (see
        :meth:`_replicated`), None for a request that writes nothing there:
        OffsetCommit, TxnOffsetCommit and ShareGroupHeartbeat write the group's
        ``__consumer_offsets`` partition (Kafka's
        ``offsets.commit.required.acks=-1``), the transaction APIs the id's
        ``__transaction_state`` partition."""
        cluster, cluster_txn = self._core.cluster, self._core.cluster_txn
        if cluster is not None and spec.api_key in _OFFSETS_WRITES:
            partition = self._offsets_partition(getattr(body, "group_id", ""))
            where, timed_out = (OFFSETS_TOPIC, partition), ErrorCode.REQUEST_TIMED_OUT
        elif tids and cluster_txn is not None:
            partition = cluster_txn.state_partition(tids[0])
            where, timed_out = (
                (TRANSACTION_STATE_TOPIC, partition),
                ErrorCode.COORDINATOR_NOT_AVAILABLE,
            )
        else:
            return None
        return functools.partial(self._replicated, spec, version, body, where, timed_out)

    def _replicated(
        self,
        spec: HandlerSpec,
        version: int,
        body: Any,
        where: tuple[str, int | None],
        timed_out: ErrorCode,
        answer: Any,
        mono_now: int,
    ) -> _Replicated | None:
        """A coordinator's answer is sent once what it wrote is on every in-sync
        replica of its partition (the group's ``__consumer_offsets`` or the
        transactional id's ``__transaction_state`` partition): a waiter when it
        is not yet (``mono_now``: the monotonic time of the answer). A lost
        leadership answers NOT_COORDINATOR, a timeout ``timed_out``."""
        topic, partition = where
        if partition is None:
            return None
        try:
            plog = self._core.logs.partition(topic, partition)
        except UnknownTopicOrPartitionError:
            return None
        if plog.high_watermark >= plog.log_end_offset:
            return None
        return _Replicated(
            self._core,
            topic,
            partition,
            plog.log_end_offset,
            answer,
            spec.refusal(body, version, timed_out),
            spec.refusal(body, version, ErrorCode.NOT_COORDINATOR),
            mono_now + _REPLICATION_WAIT_MS,
        )

    # -- client quotas -------------------------------------------------------------

    def connection_throttle(self, peer: str, now_ms: int) -> int:
        """Count a new connection from ``peer`` (``host:port``) against its IP's
        ``connection_creation_rate``; 0 when within it, else how long the driver
        holds the connection, unread, before closing it (KIP-612)."""
        quotas = self._core.quotas
        if not quotas.connections_active:
            return 0
        return quotas.connection_throttle(host_of(peer), now_ms)

    def _handle_within_quotas(
        self, session: ConnectionSession, header: RequestHeader, body: Any, now_ms: int, size: int
    ) -> Outcome:
        """:meth:`handle`, with the request measured against the connection's quotas
        (:mod:`.quotas`) and its answer throttled when it goes over one."""
        quotas = self._core.quotas
        user, client_id = session.quota_user, header.client_id or ""
        key = header.request_api_key
        if key == FETCH_KEY:
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
            entry = self._core.purgatory.get(outcome.ticket)
            if entry is not None:
                entry.throttle_ms = throttle
        elif isinstance(outcome, NoResponse) and throttle:
            return NoResponse(throttle_ms=throttle)
        return outcome

    def complete(self, entry: ParkedRequest, now_ms: int) -> Reply | ParkAgain:
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
        if isinstance(body, ParkAgain):
            return body
        reply = Reply(header.correlation_id, key, version, body)
        if entry.throttle_ms or (self._core.quotas.active and key == FETCH_KEY):
            return self._throttled(
                entry.session, header.client_id or "", reply, entry.throttle_ms, now_ms
            )
        return reply

    def _throttled(
        self, session: ConnectionSession, client_id: str, reply: Reply, throttle: int, now_ms: int
    ) -> Reply:
        """``reply`` with the throttle time of its request (and a Fetch's bytes
        counted against ``consumer_byte_rate``); unchanged when not throttled."""
        body = reply.body
        if reply.api_key == FETCH_KEY and isinstance(body, FetchPlan):
            user = session.quota_user
            size = body.records_size
            quotas = self._core.quotas
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


class _Replicated:
    """A coordinator's answer waiting for its records to reach the ISR (cluster mode)."""

    def __init__(
        self,
        broker: BrokerPort,
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
    if api_key == ApiKey.ADD_PARTITIONS_TO_TXN:
        if version >= 4:
            return [t.transactional_id for t in body.transactions]
        return [body.v3_and_below_transactional_id]
    tid = body.transactional_id
    return [] if tid is None else [tid]


def _with_elsewhere(result: Any, api_key: int, elsewhere: list[str]) -> Any:
    """A batched group answer with NOT_COORDINATOR for the groups coordinated elsewhere."""
    if not hasattr(result, "groups"):
        return result
    group_type = getattr(type(result), _GROUP_ANSWER[api_key])
    extra = [group_type(group_id=g, error_code=ErrorCode.NOT_COORDINATOR) for g in elsewhere]
    return dataclasses.replace(result, groups=[*result.groups, *extra])


class _ThenReplicated:
    """A parked coordinator request's waiter whose answer, once it has one, waits
    until what it wrote is replicated (``replication``: the Dispatcher's
    ``_replicated`` for the request), as an answer given at once does."""

    def __init__(
        self, waiter: Waiter, replication: Callable[[Any, int], _Replicated | None]
    ) -> None:
        self._waiter = waiter
        self._replication = replication
        self.deadline_ms = waiter.deadline_ms
        self.watches = waiter.watches

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self._waiter.on_append(topic, partition, nbytes)

    def complete(self, now_ms: int) -> Any:
        answer = self._waiter.complete(now_ms)
        if isinstance(answer, ParkAgain):
            return ParkAgain(_ThenReplicated(answer.waiter, self._replication))
        waiter = self._replication(answer, mono_ms(now_ms))
        return answer if waiter is None else ParkAgain(waiter)


class _ElsewhereToo:
    """A parked batched group request's waiter, whose answer gets the groups
    coordinated elsewhere too."""

    def __init__(self, waiter: Waiter, api_key: int, elsewhere: list[str]) -> None:
        self._waiter = waiter
        self._api_key = api_key
        self._elsewhere = elsewhere
        self.deadline_ms = waiter.deadline_ms
        self.watches = waiter.watches

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        return self._waiter.on_append(topic, partition, nbytes)

    def complete(self, now_ms: int) -> Any:
        return _with_elsewhere(self._waiter.complete(now_ms), self._api_key, self._elsewhere)
