"""A scripted share-group broker for the share consumer's tests (a test double).

It extends :class:`sdk_fakebroker.FakeBroker` (Produce, Metadata, ...) with
FindCoordinator and the four share-group APIs, keeping just enough state to
behave as KIP-932 describes: members and their epochs (every member is
assigned every partition of its topics), share sessions per member with their
epochs, and per partition the state of each offset (available, acquired by a
member with a lock deadline, acknowledged, archived) with delivery counts.
Records start at offset 0 (``share.auto.offset.reset=earliest``).

Tests read ``requests`` (inherited) to check what the client sent, and may
replace any handler or set ``next_fetch_error`` / ``next_heartbeat_error`` to
inject errors.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from sdk_fakebroker import FakeBroker

from trafka.codec import ErrorCode
from trafka.codec.messages import k10_find_coordinator as fc
from trafka.codec.messages import k76_share_group_heartbeat as sgh
from trafka.codec.messages import k78_share_fetch as sf
from trafka.codec.messages import k79_share_acknowledge as sa
from trafka.codec.records import read_batch_header

AVAILABLE, ACQUIRED, ACKNOWLEDGED, ARCHIVED = "available", "acquired", "acknowledged", "archived"
MAX_DELIVERIES = 5


@dataclasses.dataclass
class OffsetState:
    state: str = AVAILABLE
    member: str | None = None
    deliveries: int = 0
    locked_until: float = 0.0


@dataclasses.dataclass
class ShareScriptedBroker(FakeBroker):
    """FakeBroker plus share groups (one node, node 0 coordinates everything)."""

    lock_ms: int = 30_000
    heartbeat_interval_ms: int = 100
    members: dict[str, int] = dataclasses.field(default_factory=dict)  # member -> epoch
    subscriptions: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    sessions: dict[str, tuple[int, set[tuple[uuid.UUID, int]]]] = dataclasses.field(
        default_factory=dict
    )  # member -> (next epoch, partitions)
    offsets: dict[tuple[str, int], dict[int, OffsetState]] = dataclasses.field(default_factory=dict)
    next_fetch_error: list[int] = dataclasses.field(default_factory=list)
    next_heartbeat_error: list[int] = dataclasses.field(default_factory=list)
    group_epoch: int = 0
    acknowledgements: list[tuple[str, int, int, int, str]] = dataclasses.field(
        default_factory=list
    )  # (topic, partition, offset, type, member)

    def handler_for(self, key: int) -> Any:
        if key in self.handlers:
            return self.handlers[key]
        own = {
            10: self.find_coordinator,
            76: self.heartbeat,
            78: self.share_fetch,
            79: self.share_ack,
        }
        return own.get(key) or super().handler_for(key)

    # -- helpers ----------------------------------------------------------------------------

    def name_of(self, topic_id: uuid.UUID) -> str | None:
        return next((n for n in self.topics if self.topic_id(n) == topic_id), None)

    def state(self, topic: str, partition: int) -> dict[int, OffsetState]:
        states = self.offsets.setdefault((topic, partition), {})
        for o in range(self.next_offset.get((topic, partition), 0)):
            states.setdefault(o, OffsetState())
        now = time.monotonic()
        for s in states.values():
            if s.state == ACQUIRED and s.locked_until <= now:
                self._make_available(s)
        return states

    def _make_available(self, s: OffsetState) -> None:
        s.member = None
        s.state = ARCHIVED if s.deliveries >= MAX_DELIVERIES else AVAILABLE

    # -- FindCoordinator ------------------------------------------------------------------

    def find_coordinator(self, header: Any, body: Any) -> Any:
        R = fc.FindCoordinatorResponse
        if header.request_api_version < 4:
            return R(node_id=self.node_id, host=self.host, port=self.port)
        return R(
            coordinators=[
                R.Coordinator(key=k, node_id=self.node_id, host=self.host, port=self.port)
                for k in body.coordinator_keys
            ],
        )

    # -- ShareGroupHeartbeat --------------------------------------------------------------

    def heartbeat(self, header: Any, body: Any) -> Any:
        R = sgh.ShareGroupHeartbeatResponse
        if self.next_heartbeat_error:
            return R(error_code=self.next_heartbeat_error.pop(0))
        member, epoch = body.member_id, body.member_epoch
        if epoch == -1:
            self.members.pop(member, None)
            self.subscriptions.pop(member, None)
            self._release_member(member)
            return R(member_id=member, member_epoch=-1)
        if epoch == 0:
            self.group_epoch += 1
            self.members[member] = self.group_epoch
        elif self.members.get(member) is None:
            return R(error_code=ErrorCode.UNKNOWN_MEMBER_ID)
        elif self.members[member] != epoch:
            return R(error_code=ErrorCode.FENCED_MEMBER_EPOCH)
        if body.subscribed_topic_names is not None:
            self.subscriptions[member] = list(body.subscribed_topic_names)
        topics = [t for t in self.subscriptions.get(member, []) if t in self.topics]
        assignment = R.Assignment(
            topic_partitions=[
                R.TopicPartitions(topic_id=self.topic_id(t), partitions=list(range(self.topics[t])))
                for t in topics
            ]
        )
        return R(
            member_id=member,
            member_epoch=self.members[member],
            heartbeat_interval_ms=self.heartbeat_interval_ms,
            assignment=assignment,
        )

    def _release_member(self, member: str) -> None:
        for states in self.offsets.values():
            for s in states.values():
                if s.state == ACQUIRED and s.member == member:
                    self._make_available(s)

    # -- acknowledgements -----------------------------------------------------------------

    def _apply_acks(self, member: str, topic_id: uuid.UUID, p: Any) -> int:
        topic = self.name_of(topic_id)
        if topic is None:
            return ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        states = self.state(topic, p.partition_index)
        for batch in p.acknowledgement_batches:
            count = batch.last_offset - batch.first_offset + 1
            types = list(batch.acknowledge_types)
            if len(types) != 1 and len(types) != count:
                return ErrorCode.INVALID_REQUEST
            for i in range(count):
                o = batch.first_offset + i
                s = states.get(o)
                if s is None or s.state != ACQUIRED or s.member != member:
                    return ErrorCode.INVALID_RECORD_STATE
        for batch in p.acknowledgement_batches:
            types = list(batch.acknowledge_types)
            for i in range(batch.last_offset - batch.first_offset + 1):
                o = batch.first_offset + i
                kind = types[0] if len(types) == 1 else types[i]
                s = states[o]
                self.acknowledgements.append((topic, p.partition_index, o, kind, member))
                if kind == 1:
                    s.state, s.member = ACKNOWLEDGED, None
                elif kind == 2:
                    self._make_available(s)
                else:  # REJECT (3) and GAP (0)
                    s.state, s.member = ARCHIVED, None
        return 0

    def _session_check(self, member: str, epoch: int) -> int:
        session = self.sessions.get(member)
        if epoch == 0:
            return 0
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch != -1 and session[0] != epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        return 0

    # -- ShareFetch -----------------------------------------------------------------------

    def share_fetch(self, header: Any, body: Any) -> Any:
        R = sf.ShareFetchResponse
        member, epoch = body.member_id, body.share_session_epoch
        if self.next_fetch_error:
            return R(error_code=self.next_fetch_error.pop(0))
        code = self._session_check(member, epoch)
        if code:
            return R(error_code=code)
        if epoch == 0:
            if any(p.acknowledgement_batches for t in body.topics for p in t.partitions):
                return R(error_code=ErrorCode.INVALID_REQUEST)
            self._release_member(member)
            self.sessions[member] = (0, set())  # the answer makes it 1
        next_epoch, parts = self.sessions[member]
        ack_codes: dict[tuple[uuid.UUID, int], int] = {}
        for t in body.topics:
            for p in t.partitions:
                parts.add((t.topic_id, p.partition_index))
                if p.acknowledgement_batches:
                    ack_codes[(t.topic_id, p.partition_index)] = self._apply_acks(
                        member, t.topic_id, p
                    )
        for t in body.forgotten_topics_data:
            for p in t.partitions:
                parts.discard((t.topic_id, p))
        self.sessions[member] = (next_epoch + 1, parts)
        budget = body.max_records or 500
        out: dict[uuid.UUID, list[Any]] = {}
        for tid, index in sorted(parts, key=lambda x: (str(x[0]), x[1])):
            topic = self.name_of(tid)
            if topic is None:
                continue
            acquired = self._acquire(member, topic, index, budget)
            budget -= sum(last - first + 1 for first, last, _ in acquired)
            code = ack_codes.pop((tid, index), None)
            if not acquired and code is None:
                continue
            blobs = [
                blob
                for blob in self.logs.get((topic, index), [])
                if any(
                    read_batch_header(blob).base_offset <= last
                    and read_batch_header(blob).last_offset >= first
                    for first, last, _ in acquired
                )
            ]
            out.setdefault(tid, []).append(
                R.PartitionData(
                    partition_index=index,
                    acknowledge_error_code=code or 0,
                    records=b"".join(blobs),  # non-nullable from v1 (Kafka 4.4 spec)
                    acquired_records=[
                        R.AcquiredRecords(first_offset=f, last_offset=last, delivery_count=n)
                        for f, last, n in acquired
                    ],
                )
            )
        for (tid, index), code in ack_codes.items():
            out.setdefault(tid, []).append(
                R.PartitionData(partition_index=index, acknowledge_error_code=code)
            )
        return R(
            acquisition_lock_timeout_ms=self.lock_ms,
            responses=[
                R.ShareFetchableTopicResponse(topic_id=t, partitions=ps) for t, ps in out.items()
            ],
        )

    def _acquire(
        self, member: str, topic: str, partition: int, budget: int
    ) -> list[tuple[int, int, int]]:
        """Acquire up to ``budget`` available offsets; ``(first, last, delivery_count)`` runs."""
        states = self.state(topic, partition)
        taken: list[tuple[int, int]] = []
        deadline = time.monotonic() + self.lock_ms / 1000
        for o in sorted(states):
            if len(taken) >= budget:
                break
            s = states[o]
            if s.state != AVAILABLE:
                continue
            s.state, s.member, s.locked_until = ACQUIRED, member, deadline
            s.deliveries += 1
            taken.append((o, s.deliveries))
        runs: list[tuple[int, int, int]] = []
        for o, n in taken:
            if runs and runs[-1][1] == o - 1 and runs[-1][2] == n:
                runs[-1] = (runs[-1][0], o, n)
            else:
                runs.append((o, o, n))
        return runs

    # -- ShareAcknowledge -----------------------------------------------------------------

    def share_ack(self, header: Any, body: Any) -> Any:
        R = sa.ShareAcknowledgeResponse
        member, epoch = body.member_id, body.share_session_epoch
        if epoch == 0:
            return R(error_code=ErrorCode.INVALID_SHARE_SESSION_EPOCH)
        code = self._session_check(member, epoch)
        if code:
            return R(error_code=code)
        out: dict[uuid.UUID, list[Any]] = {}
        for t in body.topics:
            for p in t.partitions:
                out.setdefault(t.topic_id, []).append(
                    R.PartitionData(
                        partition_index=p.partition_index,
                        error_code=self._apply_acks(member, t.topic_id, p),
                    )
                )
        if epoch == -1:
            self.sessions.pop(member, None)
            self._release_member(member)
        else:
            next_epoch, parts = self.sessions[member]
            self.sessions[member] = (next_epoch + 1, parts)
        return R(
            responses=[
                R.ShareAcknowledgeTopicResponse(topic_id=t, partitions=ps) for t, ps in out.items()
            ]
        )
