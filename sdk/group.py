"""Consumer groups (classic protocol): coordinator, membership, commits.

Rules and invariants:

* Protocol decisions are pure and live at the top of this module: how each
  error code is handled (:func:`classify`), how requests are built for a
  version and how responses are read. :class:`GroupDriver` only sequences
  them with I/O.
* The coordinator is found with FindCoordinator and talked to over its own
  connection (id ``COORDINATOR_BASE - node_id``), so a long JoinGroup or a
  fetch long-poll never delays heartbeats and commits behind each other.
* Membership: join (retrying once with the member id the broker assigns,
  KIP-394), the leader runs the chosen assignor over every member's
  subscription, sync, then heartbeat every ``heartbeat.interval.ms``.
  REBALANCE_IN_PROGRESS means rejoin; UNKNOWN_MEMBER_ID / ILLEGAL_GENERATION
  mean our partitions are *lost* (``on_partitions_lost``, no commit) and we
  join afresh; FENCED_INSTANCE_ID is fatal (another process has our static
  ``group.instance.id``); NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE mean
  find the coordinator again.
* Eager assignors revoke every partition before joining; cooperative-sticky
  revokes only the partitions that the new assignment takes away, after the
  sync, and then rejoins once so that they can be handed to their new owner.
* Before a partition is revoked, auto-commit commits its consumed position,
  then the listener's ``on_partitions_revoked`` runs.
* Commits leave in call order through one queue and are retried on retriable
  errors until ``default.api.timeout.ms``; commit failures caused by a
  rebalance are :class:`CommitFailedError`.
* Closing: commit (auto-commit), revoke (listener), and LeaveGroup unless the
  member is static (its partitions stay reserved for ``session.timeout.ms``).
"""

from __future__ import annotations

import enum
import logging
from collections import deque
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any

import anyio

from trafka.codec import DecodeError, ErrorCode, KafkaError, TrafkaError, api
from trafka.codec.messages import k08_offset_commit as oc
from trafka.codec.messages import k09_offset_fetch as of
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k11_join_group as jg
from trafka.codec.messages import k12_heartbeat as hb
from trafka.codec.messages import k13_leave_group as lg
from trafka.codec.messages import k14_sync_group as sg

from .assignors import (
    MemberSubscription,
    assign,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
    is_cooperative,
)
from .config import ConsumerConfig
from .fetcher import TopicPartition
from .transport import BrokerConnection, Cluster

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = [
    "COORDINATOR_BASE",
    "Action",
    "CommitFailedError",
    "GroupDriver",
    "classify",
    "fetch_committed",
]

log = logging.getLogger("trafka.sdk.group")

COORDINATOR_BASE = 2**31 - 1


class CommitFailedError(KafkaError):
    """The commit cannot succeed: the group rebalanced and the partitions may have moved."""


class Action(enum.Enum):
    """What to do after an error code from the coordinator."""

    OK = "ok"
    RETRY = "retry"  # transient: back off and retry
    REDISCOVER = "rediscover"  # find the coordinator again, then retry
    REJOIN = "rejoin"  # the group is rebalancing
    RESET = "reset"  # our membership is gone: partitions lost, join afresh
    FATAL = "fatal"


_ACTIONS = {
    ErrorCode.NONE: Action.OK,
    ErrorCode.COORDINATOR_LOAD_IN_PROGRESS: Action.RETRY,
    ErrorCode.REQUEST_TIMED_OUT: Action.RETRY,
    ErrorCode.NOT_COORDINATOR: Action.REDISCOVER,
    ErrorCode.COORDINATOR_NOT_AVAILABLE: Action.REDISCOVER,
    ErrorCode.REBALANCE_IN_PROGRESS: Action.REJOIN,
    ErrorCode.MEMBER_ID_REQUIRED: Action.REJOIN,
    ErrorCode.UNKNOWN_MEMBER_ID: Action.RESET,
    ErrorCode.ILLEGAL_GENERATION: Action.RESET,
    ErrorCode.FENCED_INSTANCE_ID: Action.FATAL,
    ErrorCode.GROUP_AUTHORIZATION_FAILED: Action.FATAL,
    ErrorCode.INVALID_SESSION_TIMEOUT: Action.FATAL,
    ErrorCode.INCONSISTENT_GROUP_PROTOCOL: Action.FATAL,
    ErrorCode.GROUP_MAX_SIZE_REACHED: Action.FATAL,
    ErrorCode.UNSUPPORTED_VERSION: Action.FATAL,
}


def classify(code: int) -> Action:
    """How the group logic reacts to an error code from a group API."""
    try:
        ec = ErrorCode(code)
    except ValueError:
        return Action.FATAL
    action = _ACTIONS.get(ec)
    if action is not None:
        return action
    return Action.RETRY if ec.retriable else Action.FATAL


def _fit(api_key: int, version: int, cls: type, **fields: Any) -> Any:
    """Build a request, leaving out the fields ``version`` does not have."""
    schema = api(api_key).module.REQUEST_SCHEMAS[version]
    absent = {name for name, _ in schema.absent}
    return cls(**{k: v for k, v in fields.items() if k not in absent})


# -- request builders and response readers -------------------------------------------------


def find_coordinator_request(version: int, group_id: str) -> Any:
    if version >= 4:
        return fc.FindCoordinatorRequest(key_type=0, coordinator_keys=[group_id])
    return _fit(10, version, fc.FindCoordinatorRequest, key=group_id, key_type=0)


def read_find_coordinator(version: int, response: Any) -> tuple[int, int, str, int]:
    """``(error_code, node_id, host, port)``."""
    if version >= 4:
        if not response.coordinators:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, -1, "", 0
        c = response.coordinators[0]
        return c.error_code, c.node_id, c.host, c.port
    return response.error_code, response.node_id, response.host, response.port


def offset_commit_request(
    version: int,
    group_id: str,
    offsets: Mapping[TopicPartition, int],
    *,
    generation: int = -1,
    member_id: str = "",
    instance_id: str | None = None,
) -> Any:
    by_topic: dict[str, list[Any]] = {}
    for tp, off in sorted(offsets.items()):
        by_topic.setdefault(tp.topic, []).append(
            oc.OffsetCommitRequest.OffsetCommitRequestPartition(
                partition_index=tp.partition, committed_offset=off
            )
        )
    return _fit(
        8,
        version,
        oc.OffsetCommitRequest,
        group_id=group_id,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        group_instance_id=instance_id if version >= 7 else None,
        topics=[
            oc.OffsetCommitRequest.OffsetCommitRequestTopic(name=t, partitions=p)
            for t, p in by_topic.items()
        ],
    )


def read_offset_commit(response: Any) -> dict[TopicPartition, int]:
    """Error code per partition."""
    return {
        TopicPartition(t.name, p.partition_index): p.error_code
        for t in response.topics
        for p in t.partitions
    }


def offset_fetch_request(version: int, group_id: str, tps: Iterable[TopicPartition]) -> Any:
    by_topic: dict[str, list[int]] = {}
    for tp in sorted(tps):
        by_topic.setdefault(tp.topic, []).append(tp.partition)
    if version >= 8:
        return of.OffsetFetchRequest(
            groups=[
                of.OffsetFetchRequest.OffsetFetchRequestGroup(
                    group_id=group_id,
                    topics=[
                        of.OffsetFetchRequest.OffsetFetchRequestTopics(name=t, partition_indexes=p)
                        for t, p in by_topic.items()
                    ],
                )
            ]
        )
    return _fit(
        9,
        version,
        of.OffsetFetchRequest,
        group_id=group_id,
        topics=[
            of.OffsetFetchRequest.OffsetFetchRequestTopic(name=t, partition_indexes=p)
            for t, p in by_topic.items()
        ],
    )


def read_offset_fetch(version: int, response: Any) -> tuple[int, dict[TopicPartition, int]]:
    """``(group error code, {tp: committed offset or -1})``; partition errors raise."""
    if version >= 8:
        if not response.groups:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE, {}
        group = response.groups[0]
        code, topics = group.error_code, group.topics
    else:
        code, topics = response.error_code, response.topics
    out: dict[TopicPartition, int] = {}
    for t in topics:
        for p in t.partitions:
            if p.error_code and p.error_code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise KafkaError(p.error_code, f"OffsetFetch {t.name}-{p.partition_index}")
            out[TopicPartition(t.name, p.partition_index)] = p.committed_offset
    return code, out


def join_group_request(
    version: int,
    group_id: str,
    member_id: str,
    instance_id: str | None,
    *,
    session_timeout_ms: int,
    rebalance_timeout_ms: int,
    protocols: list[tuple[str, bytes]],
) -> Any:
    return _fit(
        11,
        version,
        jg.JoinGroupRequest,
        group_id=group_id,
        session_timeout_ms=session_timeout_ms,
        rebalance_timeout_ms=rebalance_timeout_ms,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer",
        protocols=[
            jg.JoinGroupRequest.JoinGroupRequestProtocol(name=n, metadata=m) for n, m in protocols
        ],
        reason="rebalance" if version >= 8 else None,
    )


def sync_group_request(
    version: int,
    group_id: str,
    generation: int,
    member_id: str,
    instance_id: str | None,
    protocol: str | None,
    assignments: Mapping[str, bytes],
) -> Any:
    return _fit(
        14,
        version,
        sg.SyncGroupRequest,
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
        protocol_type="consumer" if version >= 5 else None,
        protocol_name=protocol if version >= 5 else None,
        assignments=[
            sg.SyncGroupRequest.SyncGroupRequestAssignment(member_id=m, assignment=a)
            for m, a in assignments.items()
        ],
    )


def heartbeat_request(
    version: int, group_id: str, generation: int, member_id: str, instance_id: str | None
) -> Any:
    return _fit(
        12,
        version,
        hb.HeartbeatRequest,
        group_id=group_id,
        generation_id=generation,
        member_id=member_id,
        group_instance_id=instance_id,
    )


def leave_group_request(version: int, group_id: str, member_id: str) -> Any:
    if version >= 3:
        return lg.LeaveGroupRequest(
            group_id=group_id,
            members=[
                lg.LeaveGroupRequest.MemberIdentity(
                    member_id=member_id, reason="closing" if version >= 5 else None
                )
            ],
        )
    return lg.LeaveGroupRequest(group_id=group_id, member_id=member_id)


# -- helpers used without a member ---------------------------------------------------------


async def find_coordinator(cluster: Cluster, group_id: str) -> BrokerConnection:
    """The coordinator's dedicated connection.

    Raises:
        KafkaError: the coordinator could not be found (retriable codes included).
    """
    conn = await cluster.any_connection()
    version = conn.version_for(10)
    resp = await conn.request(10, find_coordinator_request(version, group_id))
    code, node, host, port = read_find_coordinator(version, resp)
    if code:
        raise KafkaError(code, f"FindCoordinator for group {group_id!r}")
    conn_id = COORDINATOR_BASE - node
    cluster.set_address(conn_id, host, port)
    return await cluster.connection(conn_id)


async def fetch_committed(
    cluster: Cluster, config: ConsumerConfig, tps: Iterable[TopicPartition]
) -> dict[TopicPartition, int]:
    """The group's committed offsets (partitions without one are left out).

    Raises:
        KafkaError / KafkaConnectionError: after retries within ``default.api.timeout.ms``.
    """
    assert config.group_id is not None
    tps = list(tps)
    deadline = anyio.current_time() + config.default_api_timeout_ms / 1000
    while True:
        try:
            conn = await find_coordinator(cluster, config.group_id)
            version = conn.version_for(9)
            resp = await conn.request(9, offset_fetch_request(version, config.group_id, tps))
            code, got = read_offset_fetch(version, resp)
            if code:
                raise KafkaError(code, f"OffsetFetch for group {config.group_id!r}")
            return {tp: off for tp, off in got.items() if off >= 0}
        except KafkaError as exc:
            if (
                classify(exc.code) not in (Action.RETRY, Action.REDISCOVER)
                or anyio.current_time() >= deadline
            ):
                raise
        except TrafkaError:
            if anyio.current_time() >= deadline:
                raise
        await anyio.sleep(config.retry_backoff_ms / 1000)


class CommitFuture:
    """The result of :meth:`Consumer.commit_async`: await it (or ignore it)."""

    __slots__ = ("_error", "_event", "offsets")

    def __init__(self, offsets: dict[TopicPartition, int]) -> None:
        self.offsets = offsets
        self._event = anyio.Event()
        self._error: BaseException | None = None

    def done(self) -> bool:
        return self._event.is_set()

    def exception(self) -> BaseException | None:
        return self._error

    def _set(self, error: BaseException | None) -> None:
        self._error = error
        self._event.set()

    def __await__(self) -> Any:
        return self._wait().__await__()

    async def _wait(self) -> None:
        await self._event.wait()
        if self._error is not None:
            raise self._error


class GroupDriver:
    """Runs a consumer's group membership and commits (started by the consumer).

    Args:
        consumer: the owning consumer.
        listener: rebalance listener (async ``on_partitions_revoked``,
            ``on_partitions_assigned``, optional ``on_partitions_lost``), or None.
        managed: False for a consumer that only commits (assign() with a group.id).
    """

    def __init__(self, consumer: Consumer, listener: Any, *, managed: bool = True) -> None:
        self.consumer = consumer
        self.config = consumer.config
        self.cluster = consumer._cluster
        self.listener = listener
        self.managed = managed
        self.fatal: BaseException | None = None
        self.member_id = ""
        self.generation = -1
        self.protocol: str | None = None
        self.owned: set[TopicPartition] = set()
        self.needs_join = managed
        self.stable = False
        self._joined_topics: dict[str, int] = {}
        self._conn: BrokerConnection | None = None
        self._wake = anyio.Event()
        self._commits: deque[tuple[dict[TopicPartition, int], CommitFuture, Any]] = deque()
        self._commit_wake = anyio.Event()
        self._closing = False
        self._next_auto_commit = anyio.current_time() + self.config.auto_commit_interval_ms / 1000
        self.cluster.on_change.append(self._wake.set)
        self.rebalances = 0
        self._next_heartbeat = 0.0

    # -- public, used by the consumer ---------------------------------------------------------

    def subscription_changed(self) -> None:
        self.needs_join = True
        self._wake.set()

    async def commit(self, offsets: dict[TopicPartition, int]) -> None:
        await self.commit_async(offsets, None)

    def commit_async(self, offsets: dict[TopicPartition, int], callback: Any) -> CommitFuture:
        future = CommitFuture(offsets)
        if not offsets:
            future._set(None)
            if callback is not None:
                callback(offsets, None)
            return future
        self._commits.append((offsets, future, callback))
        self._commit_wake.set()
        return future

    async def close(self, *, graceful: bool) -> None:
        self._closing = True
        if graceful and self.config.auto_commit:
            try:
                await self.commit(self.consumer.consumed_offsets())
            except TrafkaError as exc:
                log.warning("final commit failed: %s", exc)
        if self.managed and self.owned:
            try:
                await self._call_listener("on_partitions_revoked", set(self.owned))
            finally:
                self.owned = set()
        if (
            self.managed
            and self.member_id
            and self.config.group_instance_id is None
            and self._conn is not None
        ):
            with anyio.move_on_after(self.config.request_timeout_ms / 1000):
                try:
                    await self._leave()
                except TrafkaError as exc:
                    log.debug("LeaveGroup failed: %s", exc)

    # -- tasks ------------------------------------------------------------------------------

    async def run(self) -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(self._commit_worker)
            if self.managed:
                await self._membership_loop()

    async def _coordinator(self) -> BrokerConnection:
        conn = self._conn
        if conn is not None and conn.alive:
            return conn
        assert self.config.group_id is not None
        self._conn = await find_coordinator(self.cluster, self.config.group_id)
        return self._conn

    def _lost_coordinator(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            self.cluster.metadata.request_update()

    async def _membership_loop(self) -> None:
        backoff = self.config.retry_backoff_ms / 1000
        while not self._closing:
            try:
                if self.needs_join:
                    await self._rebalance()
                else:
                    await self._heartbeat_round()
            except KafkaError as exc:
                action = classify(exc.code)
                if action is Action.FATAL:
                    self.fatal = exc
                    self.consumer._data_arrived()
                    return
                if action is Action.REDISCOVER:
                    self._lost_coordinator()
                if action is Action.RESET:
                    await self._lose_all()
                if action in (Action.REJOIN, Action.RESET):
                    self.needs_join = True
                    continue
                await anyio.sleep(backoff)
            except TrafkaError as exc:
                log.debug("group %s: %s", self.config.group_id, exc)
                self._lost_coordinator()
                await anyio.sleep(backoff)

    # -- rebalancing -------------------------------------------------------------------------

    def _protocols(self) -> list[str]:
        return list(self.config.partition_assignment_strategy)

    async def _rebalance(self) -> None:
        cfg = self.config
        conn = await self._coordinator()
        topics = await self._subscribed_topics()
        eager = not all(is_cooperative(p) for p in self._protocols())
        if self.protocol is not None:
            eager = not is_cooperative(self.protocol)
        if eager and self.owned:
            await self._revoke(set(self.owned))
        self.stable = False
        jv = conn.version_for(11)
        owned = sorted(self.owned)
        metadata = encode_subscription(
            topics, owned, generation=self.generation, rack=cfg.client_rack or None
        )
        request = join_group_request(
            jv,
            cfg.group_id or "",
            self.member_id,
            cfg.group_instance_id,
            session_timeout_ms=cfg.session_timeout_ms,
            rebalance_timeout_ms=cfg.max_poll_interval_ms,
            protocols=[(p, metadata) for p in self._protocols()],
        )
        timeout = (cfg.max_poll_interval_ms + cfg.request_timeout_ms) / 1000
        resp = await conn.request(11, request, timeout=timeout)
        if resp.error_code == ErrorCode.MEMBER_ID_REQUIRED:
            self.member_id = resp.member_id
            return  # join again at once with the id
        if resp.error_code == ErrorCode.UNKNOWN_MEMBER_ID:
            self.member_id = ""
        if resp.error_code:
            raise KafkaError(resp.error_code, f"JoinGroup {cfg.group_id!r}")
        self.member_id = resp.member_id
        self.generation = resp.generation_id
        self.protocol = resp.protocol_name
        assignments: dict[str, bytes] = {}
        if resp.leader == resp.member_id and not getattr(resp, "skip_assignment", False):
            assignments = await self._lead(resp)
        sync = sync_group_request(
            conn.version_for(14),
            cfg.group_id or "",
            self.generation,
            self.member_id,
            cfg.group_instance_id,
            self.protocol,
            assignments,
        )
        sresp = await conn.request(14, sync, timeout=timeout)
        if sresp.error_code:
            raise KafkaError(sresp.error_code, f"SyncGroup {cfg.group_id!r}")
        try:
            new = decode_assignment(sresp.assignment)
        except DecodeError as exc:
            raise KafkaError(
                ErrorCode.INCONSISTENT_GROUP_PROTOCOL, f"bad assignment: {exc}"
            ) from None
        self.rebalances += 1
        self._joined_topics = {t: self.cluster.metadata.partition_count(t) or 0 for t in topics}
        revoked = self.owned - new
        if revoked:
            await self._revoke(revoked)
        added = new - self.owned
        self.owned = set(new)
        self.consumer._fetcher.add(added)
        self.needs_join = bool(revoked) and not eager
        self.stable = True
        self._next_heartbeat = anyio.current_time() + cfg.heartbeat_interval_ms / 1000
        self.consumer._wake_fetcher()
        if added or eager:
            await self._call_listener("on_partitions_assigned", added if not eager else set(new))

    async def _subscribed_topics(self) -> list[str]:
        consumer = self.consumer
        if consumer._pattern is not None and not self.cluster.metadata.topics:
            try:
                await self.cluster.refresh_metadata()
            except TrafkaError as exc:
                log.debug("metadata for the pattern subscription failed: %s", exc)
        topics = sorted(consumer.subscribed_topics())
        self.cluster.metadata.add_topics(topics)
        return topics

    async def _lead(self, resp: Any) -> dict[str, bytes]:
        members: dict[str, MemberSubscription] = {}
        for m in resp.members:
            try:
                members[m.member_id] = decode_subscription(
                    m.member_id, m.metadata, m.group_instance_id
                )
            except DecodeError as exc:
                log.warning("member %s sent bad metadata: %s", m.member_id, exc)
                members[m.member_id] = MemberSubscription(m.member_id, ())
        wanted = {t for m in members.values() for t in m.topics}
        md = self.cluster.metadata
        if wanted - set(md.topics):
            md.add_topics(wanted)
            try:
                await self.cluster.refresh_metadata(wanted)
            except TrafkaError as exc:
                log.debug("metadata for the assignment failed: %s", exc)
        counts = {t: md.partition_count(t) or 0 for t in wanted}
        plan = assign(self.protocol or "range", counts, members)
        return {mid: encode_assignment(tps) for mid, tps in plan.items()}

    async def _revoke(self, tps: set[TopicPartition]) -> None:
        if self.config.auto_commit:
            offsets = {tp: off for tp, off in self.consumer.consumed_offsets().items() if tp in tps}
            if offsets:
                try:
                    await self.commit(offsets)
                except TrafkaError as exc:
                    log.warning("commit before revocation failed: %s", exc)
        try:
            await self._call_listener("on_partitions_revoked", tps)
        finally:
            self.owned -= tps
            self.consumer.on_partitions_removed(tps)

    async def _lose_all(self) -> None:
        lost, self.owned = set(self.owned), set()
        self.member_id = "" if self.config.group_instance_id is None else self.member_id
        self.generation = -1
        self.stable = False
        if lost:
            self.consumer.on_partitions_removed(lost)
            name = (
                "on_partitions_lost"
                if hasattr(self.listener, "on_partitions_lost")
                else "on_partitions_revoked"
            )
            await self._call_listener(name, lost)

    async def _call_listener(self, name: str, tps: set[TopicPartition]) -> None:
        fn = getattr(self.listener, name, None) if self.listener is not None else None
        if fn is None:
            return
        try:
            await fn(set(tps))
        except Exception:
            log.exception("rebalance listener %s failed", name)

    # -- steady state -------------------------------------------------------------------------

    def _metadata_changed(self) -> bool:
        topics = set(self.consumer.subscribed_topics())
        if topics != set(self._joined_topics):
            return True
        md = self.cluster.metadata
        return any((md.partition_count(t) or 0) != n for t, n in self._joined_topics.items())

    async def _heartbeat_round(self) -> None:
        cfg = self.config
        now = anyio.current_time()
        wake_at = self._next_heartbeat
        if cfg.auto_commit:
            wake_at = min(wake_at, self._next_auto_commit)
        if wake_at > now:
            self._wake = anyio.Event()
            with anyio.move_on_after(wake_at - now):
                await self._wake.wait()
        if self._closing:
            return
        if self._metadata_changed():
            self.needs_join = True
            return
        now = anyio.current_time()
        if cfg.auto_commit and now >= self._next_auto_commit:
            self._next_auto_commit = now + cfg.auto_commit_interval_ms / 1000
            offsets = self.consumer.auto_commit_offsets()
            if offsets:
                self.commit_async(offsets, None)
        if now >= self._next_heartbeat:
            conn = await self._coordinator()
            request = heartbeat_request(
                conn.version_for(12),
                cfg.group_id or "",
                self.generation,
                self.member_id,
                cfg.group_instance_id,
            )
            resp = await conn.request(12, request)
            self._next_heartbeat = anyio.current_time() + cfg.heartbeat_interval_ms / 1000
            if resp.error_code:
                raise KafkaError(resp.error_code, f"Heartbeat {cfg.group_id!r}")

    async def _leave(self) -> None:
        cfg = self.config
        conn = await self._coordinator()
        await conn.request(
            13, leave_group_request(conn.version_for(13), cfg.group_id or "", self.member_id)
        )
        self.member_id = ""
        self.generation = -1

    # -- commits -----------------------------------------------------------------------------

    async def _commit_worker(self) -> None:
        while True:
            while not self._commits:
                self._commit_wake = anyio.Event()
                await self._commit_wake.wait()
            offsets, future, callback = self._commits[0]
            error: BaseException | None = None
            try:
                await self._commit_with_retries(offsets)
            except TrafkaError as exc:
                error = exc
            self._commits.popleft()
            future._set(error)
            if callback is not None:
                try:
                    callback(offsets, error)
                except Exception:
                    log.exception("commit callback failed")

    async def _commit_with_retries(self, offsets: dict[TopicPartition, int]) -> None:
        cfg = self.config
        deadline = anyio.current_time() + cfg.default_api_timeout_ms / 1000
        attempt = 0
        while True:
            attempt += 1
            try:
                conn = await self._coordinator()
                v = conn.version_for(8)
                generation, member = (self.generation, self.member_id) if self.managed else (-1, "")
                request = offset_commit_request(
                    v,
                    cfg.group_id or "",
                    offsets,
                    generation=generation,
                    member_id=member,
                    instance_id=cfg.group_instance_id if self.managed else None,
                )
                resp = await conn.request(8, request)
                errors = {tp: c for tp, c in read_offset_commit(resp).items() if c}
                if not errors:
                    return
                code = next(iter(errors.values()))
                action = classify(code)
                if action in (Action.REJOIN, Action.RESET):
                    if self.managed:
                        self.needs_join = True
                        self._wake.set()
                    raise CommitFailedError(
                        code, f"commit failed, the group rebalanced ({len(errors)} partitions)"
                    )
                if action is Action.REDISCOVER:
                    self._lost_coordinator()
                elif action is Action.FATAL:
                    raise KafkaError(code, "OffsetCommit")
            except CommitFailedError:
                raise
            except KafkaError as exc:
                if classify(exc.code) not in (Action.RETRY, Action.REDISCOVER):
                    raise
            except TrafkaError:
                self._lost_coordinator()
                if anyio.current_time() >= deadline:
                    raise
            if anyio.current_time() >= deadline:
                raise KafkaError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"commit not done within default.api.timeout.ms after {attempt} attempts",
                )
            await anyio.sleep(
                min(cfg.retry_backoff_ms / 1000 * attempt, cfg.retry_backoff_max_ms / 1000)
            )
