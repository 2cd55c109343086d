"""brokerlite's group coordinator: Kafka's group protocols, sans-IO.

:class:`GroupCoordinator` takes decoded requests (the generated codec dataclasses)
and the current time, and returns response dataclasses. It owns no socket, task or
clock: the server passes ``now_ms`` into every call, calls :meth:`~GroupCoordinator.tick`
when :meth:`~GroupCoordinator.next_deadline` is reached, and sends the
``(token, response)`` pairs that calls return. It follows Kafka's classic group
coordinator (``GroupMetadataManager``/``ClassicGroup``). It is put together from
its capabilities, each a module that opens with its rules:

* :mod:`.rebalance`: the classic groups' rebalance state machine, timers and
  parked answers (the state the others share; the group's own states are
  :mod:`.state`'s);
* :mod:`.classic`: JoinGroup, SyncGroup, Heartbeat, LeaveGroup;
* :mod:`.offset_requests`: OffsetCommit, OffsetFetch, OffsetDelete,
  transactional commits, offset expiry;
* :mod:`.group_admin`: DescribeGroups, ListGroups, DeleteGroups,
  ConsumerGroupDescribe;
* :mod:`.consumer_groups` (KIP-848) and :mod:`.share_groups` (KIP-932), objects
  of their own, which this module routes to.

Rules and invariants:

* Parking. JoinGroup and SyncGroup may not be answerable yet: the request is parked
  under the caller's ``token`` and its response comes out of a later call (of any
  method that returns pairs, including :meth:`~GroupCoordinator.tick`). Every parked
  request is answered exactly once, or dropped by
  :meth:`~GroupCoordinator.connection_closed`; a pair is returned only for a token
  that was parked and not yet answered.
* Durability. After a restart (or, in a cluster, when this broker starts leading
  a group's ``__consumer_offsets`` partition) each group resumes its last
  persisted generation, as Kafka does: a Stable group's members keep working if
  they heartbeat within their session timeout (counted from the restart) and are
  removed, with a rebalance, otherwise.
* Group types. A group id names a classic group, a consumer group (KIP-848,
  :mod:`.consumer_groups`) or a share group (KIP-932, :mod:`.share_groups`), never
  two: JoinGroup on a share group id is INCONSISTENT_GROUP_PROTOCOL,
  ConsumerGroupHeartbeat and OffsetCommit on one GROUP_ID_NOT_FOUND, as in Kafka;
  ListGroups and DeleteGroups cover all three types.
* Timers. Due timers fire only in :meth:`~GroupCoordinator.tick`; request methods
  never fire them, so a member whose session expired a moment ago can still
  heartbeat if the server has not ticked yet.
"""

from __future__ import annotations

import heapq
import logging
import uuid
from collections.abc import Callable, Hashable, Iterable, Mapping
from typing import TYPE_CHECKING

from trafka.brokerlite.clock import mono_ms
from trafka.brokerlite.groups.classic import ClassicRequests
from trafka.brokerlite.groups.consumer_groups import ConsumerGroup, ConsumerGroups, TopicMeta
from trafka.brokerlite.groups.group_admin import GROUP_TYPE, GroupAdmin
from trafka.brokerlite.groups.offset_requests import OffsetRequests
from trafka.brokerlite.groups.offsets import GroupStore, OffsetStoreError
from trafka.brokerlite.groups.rebalance import HB, Released
from trafka.brokerlite.groups.state import ClassicGroup, GroupState, Member
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k68_consumer_group_heartbeat as _cgh

if TYPE_CHECKING:
    from trafka.brokerlite.groups.share_groups import ShareGroups

__all__ = ["GroupCoordinator", "GroupState", "Released"]

log = logging.getLogger(__name__)


def _always(_topic: str, _partition: int) -> bool:
    return True


def _no_topic_ids(_topic_id: uuid.UUID) -> str | None:
    return None


def _no_topics() -> dict[str, TopicMeta]:
    return {}


class GroupCoordinator(ClassicRequests, OffsetRequests, GroupAdmin):
    """Kafka's classic group coordinator and offset manager, without I/O. Its parts
    (rebalance, requests, offsets, admin calls) share one state within a call: the
    live groups, their timer heap and parked answers.

    Args:
        store: where offsets and group metadata are persisted; groups found in it
            are resumed (see the module docstring).
        initial_rebalance_delay_ms: Kafka's ``group.initial.rebalance.delay.ms``.
        min_session_timeout_ms, max_session_timeout_ms: Kafka's
            ``group.min.session.timeout.ms`` / ``group.max.session.timeout.ms``.
        partition_exists: ``(topic, partition) -> bool``; OffsetCommit answers
            UNKNOWN_TOPIC_OR_PARTITION for partitions where it is False.
        topic_id_to_name: resolves topic ids, for OffsetCommit/OffsetFetch versions
            that carry them (none of the versions the codec knows do yet).
        new_member_join_timeout_ms: how long a new member's first JoinGroup may stay
            parked (Kafka's ``group.classic.new.member.join.timeout.ms``).
        offset_metadata_max_bytes: Kafka's ``offset.metadata.max.bytes``.
        offsets_retention_ms: Kafka's ``offsets.retention.minutes`` in ms; None
            keeps offsets forever.
        offsets_retention_check_interval_ms: Kafka's
            ``offsets.retention.check.interval.ms``.
        consumer_topics: ``() -> {name: TopicMeta}``, the topics consumer groups
            (KIP-848) are assigned from.
        share_groups: the broker's share groups (KIP-932), if it has any: their ids
            are refused by the other protocols, listed, deleted and ticked here;
            their group configs time the consumer groups too (``consumer.*``).
        now_ms: the current time, if known at construction; otherwise the first
            call that passes a time starts the clocks of resumed members (and
            :meth:`next_deadline` returns 0 until then).
    """

    def __init__(
        self,
        store: GroupStore,
        *,
        initial_rebalance_delay_ms: int = 3000,
        min_session_timeout_ms: int = 6000,
        max_session_timeout_ms: int = 1_800_000,
        partition_exists: Callable[[str, int], bool] = _always,
        topic_id_to_name: Callable[[uuid.UUID], str | None] = _no_topic_ids,
        new_member_join_timeout_ms: int = 300_000,
        offset_metadata_max_bytes: int = 4096,
        offsets_retention_ms: int | None = 7 * 24 * 3600 * 1000,
        offsets_retention_check_interval_ms: int = 600_000,
        consumer_topics: Callable[[], Mapping[str, TopicMeta]] = _no_topics,
        share_groups: ShareGroups | None = None,
        now_ms: int | None = None,
    ) -> None:
        if initial_rebalance_delay_ms < 0:
            raise ValueError("initial_rebalance_delay_ms must be >= 0")
        if not 0 < min_session_timeout_ms <= max_session_timeout_ms:
            raise ValueError("need 0 < min_session_timeout_ms <= max_session_timeout_ms")
        self._store = store
        self._initial_delay_ms = initial_rebalance_delay_ms
        self._min_session_ms = min_session_timeout_ms
        self._max_session_ms = max_session_timeout_ms
        self._partition_exists = partition_exists
        self._topic_id_to_name = topic_id_to_name
        self._new_member_join_timeout_ms = new_member_join_timeout_ms
        self._metadata_max = offset_metadata_max_bytes
        self._retention_ms = offsets_retention_ms
        self._retention_check_ms = offsets_retention_check_interval_ms
        self._groups: dict[str, ClassicGroup] = {}
        #: The groups of the new consumer protocol (KIP-848); a group id is either
        #: a classic group here or a consumer group there, never both.
        self.consumer = ConsumerGroups(
            consumer_topics,
            persist=self._store.store_consumer_group,
            timings=None if share_groups is None else share_groups.configs.consumer_timings,
        )
        #: The share groups (KIP-932): a group id is one type of group only.
        self.share = share_groups
        if share_groups is not None:
            share_groups.other_group_type = self._group_type
        self._heap: list[tuple[int, int, str, tuple[str, ...]]] = []
        self._seq = 0
        self._out: Released = []
        self._started = False
        self._next_cleanup_ms: int | None = None
        self._load()
        if now_ms is not None:
            self._start(now_ms)

    # -- introspection --------------------------------------------------------------------------

    @property
    def store(self) -> GroupStore:
        """The offset store the coordinator writes to."""
        return self._store

    def group(self, group_id: str) -> ClassicGroup | None:
        """The live group ``group_id`` (read-only use: diagnostics and tests)."""
        return self._groups.get(group_id)

    def group_ids(self) -> list[str]:
        """Ids of the live classic groups, sorted."""
        return sorted(self._groups)

    def consumer_group(self, group_id: str) -> ConsumerGroup | None:
        """The consumer group (KIP-848) ``group_id`` (read-only use)."""
        return self.consumer.groups.get(group_id)

    def _group_type(self, group_id: str) -> str | None:
        """``classic`` or ``consumer`` when ``group_id`` is such a group, else None."""
        if group_id in self._groups:
            return GROUP_TYPE
        if group_id in self.consumer.groups:
            return "consumer"
        return None

    # -- requests -------------------------------------------------------------------------------

    def consumer_group_heartbeat(
        self,
        request: _cgh.ConsumerGroupHeartbeatRequest,
        version: int,
        now_ms: int,
        *,
        client_id: str = "",
        client_host: str = "",
    ) -> _cgh.ConsumerGroupHeartbeatResponse:
        """Handle a ConsumerGroupHeartbeat (KIP-848; see :mod:`.consumer_groups`).

        A classic group of the same id with members refuses it (GROUP_ID_NOT_FOUND,
        as Kafka without online migration); an empty one (offsets only) becomes a
        consumer group. A share group of the same id refuses it too.
        """
        self._start(now_ms)
        if self._is_share(request.group_id):
            return _cgh.ConsumerGroupHeartbeatResponse(
                error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                error_message=f"group {request.group_id} is not a consumer group "
                "(it is a share group)",
            )
        classic = self._groups.get(request.group_id)
        if classic is not None:
            if classic.state is not GroupState.EMPTY or classic.pending_members:
                return _cgh.ConsumerGroupHeartbeatResponse(
                    error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                    error_message=f"group {request.group_id} is a classic group",
                )
            del self._groups[request.group_id]
        return self.consumer.heartbeat(
            request, version, now_ms, client_id=client_id, client_host=client_host
        )

    # -- time and connections -------------------------------------------------------------------

    def tick(self, now_ms: int) -> Released:
        """Fire every timer due at ``now_ms``: session and join timeouts, rebalance
        and sync timeouts, the initial rebalance delay, offset expiry.

        Returns:
            The parked responses these timers released.
        """
        self._start(now_ms)
        mono = mono_ms(now_ms)
        while self._heap and self._heap[0][0] <= mono:
            deadline, _, group_id, key = heapq.heappop(self._heap)
            group = self._groups.get(group_id)
            if group is None or group.timers.get(key) != deadline:
                continue
            del group.timers[key]
            self._fire(group, key, deadline, now_ms)
        self.consumer.tick(now_ms)
        if self.share is not None:
            self.share.tick(now_ms)
        if self._next_cleanup_ms is not None and mono >= self._next_cleanup_ms:
            self._cleanup(now_ms)  # what expires is decided on the wall clock
            self._next_cleanup_ms = mono + self._retention_check_ms
        return self._drain()

    def next_deadline(self) -> int | None:
        """When :meth:`tick` must next be called (monotonic ms), or None if no timer is set.

        Returns 0 before the coordinator has been given a time (resumed members'
        session timers are not started yet).
        """
        if not self._started:
            return 0
        while self._heap:
            deadline, _, group_id, key = self._heap[0]
            group = self._groups.get(group_id)
            if group is not None and group.timers.get(key) == deadline:
                break
            heapq.heappop(self._heap)
        share_deadline = self.share.next_deadline() if self.share is not None else None
        head = self._heap[0][0] if self._heap else None
        timers = (self._next_cleanup_ms, self.consumer.next_deadline(), share_deadline, head)
        return min((d for d in timers if d is not None), default=None)

    def connection_closed(
        self, tokens: Iterable[Hashable], *, now_ms: int | None = None
    ) -> Released:
        """Drop the parked requests of a closed connection.

        A dynamic member whose JoinGroup was parked on the connection is treated as
        gone: it is removed at the next :meth:`tick` (at once when ``now_ms`` is
        given) unless it rejoins first, so the rebalance need not wait for its
        timeout. A static member stays until its timeouts, as static members
        survive restarts by design.

        Args:
            tokens: the tokens of the connection's requests (unknown ones are ignored).
            now_ms: the current time; when given, due timers fire now and their
                released responses are returned.

        Returns:
            Released parked responses (only when ``now_ms`` is given).
        """
        closed = set(tokens)
        if closed:
            for group in self._groups.values():
                for member in group.members.values():
                    if member.join_waiter is not None and member.join_waiter.token in closed:
                        group.set_join_waiter(member, None)
                        if not member.is_static:
                            # Expire it through its heartbeat timer (the removal needs a
                            # current time, which only tick() is guaranteed to have). A
                            # rejoin before then parks a JoinGroup again, which keeps it.
                            member.is_new = False
                            self._schedule(group, (HB, member.member_id), 0)
                    if member.sync_waiter is not None and member.sync_waiter.token in closed:
                        member.sync_waiter = None
        if now_ms is not None:
            return self.tick(now_ms)
        return self._drain()

    # -- persistence ----------------------------------------------------------------------------

    def load_groups(self, group_ids: set[str], now_ms: int) -> None:
        """Load groups from the store (their ``__consumer_offsets`` partition is led
        here now) over any in memory; sessions run from now (Kafka's onGroupLoaded)."""
        self.unload_groups(group_ids)
        self._load(group_ids)
        for group_id in group_ids:
            if (classic := self._groups.get(group_id)) is not None:
                for member in classic.members.values():
                    self._schedule_heartbeat(classic, member, now_ms)
            if (group := self.consumer.groups.get(group_id)) is not None:
                for m in group.members.values():
                    m.session_deadline_ms = mono_ms(now_ms) + self.consumer.session_timeout_ms

    def unload_groups(self, group_ids: set[str]) -> None:
        """Forget groups whose offsets partition moved away (members: NOT_COORDINATOR)."""
        for group_id in group_ids:
            self._groups.pop(group_id, None)
            self.consumer.groups.pop(group_id, None)

    def _load(self, only: set[str] | None = None) -> None:
        for group_id, record in self._store.groups().items():
            if only is not None and group_id not in only:
                continue
            group = ClassicGroup(group_id, record.state_timestamp_ms)
            group.generation_id = record.generation_id
            for mr in record.members:
                group.add(
                    Member(
                        mr.member_id,
                        mr.group_instance_id,
                        mr.client_id,
                        mr.client_host,
                        mr.rebalance_timeout_ms,
                        mr.session_timeout_ms,
                        mr.protocol_type,
                        list(mr.protocols),
                        mr.assignment,
                    ),
                    None,
                )
            group.protocol_type = record.protocol_type
            if group.members:
                if record.leader_id in group.members:
                    group.leader_id = record.leader_id
                group.protocol_name = record.protocol_name or group.select_protocol()
                group.state = GroupState.STABLE
                group.previous_state = GroupState.COMPLETING_REBALANCE
            else:
                group.protocol_name = None
            self._groups[group_id] = group
        snapshots = self._store.consumer_groups()
        if only is not None:
            snapshots = {g: s for g, s in snapshots.items() if g in only}
        try:
            self.consumer.load(snapshots)
        except ValueError as exc:
            raise OffsetStoreError(f"{self._store.path}: {exc}") from exc
        for group_id in self._store.offset_groups():
            if only is not None and group_id not in only:
                continue
            if (
                group_id not in self._groups
                and group_id not in self.consumer.groups
                and not self._is_share(group_id)
            ):
                self._groups[group_id] = ClassicGroup(group_id, None)
