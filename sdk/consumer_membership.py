"""A consumer's group membership under the consumer group protocol (KIP-848), without I/O.

:class:`ConsumerMembership` is driven exactly like the classic
:class:`~trafka.sdk.membership.Membership` (same inputs, same outputs, same
commit queue and coordinator lookup, which it inherits); only joining,
heartbeating, reconciling and leaving differ. ``group.protocol=consumer``
selects it.

Rules and invariants:

* One request does it all: ConsumerGroupHeartbeat. The member joins with epoch
  0 and its full state (subscribed topic names, rebalance timeout =
  ``max.poll.interval.ms``, server assignor, rack, static instance id, an empty
  owned list); later heartbeats carry only what changed since the last one
  that was answered (``None`` = unchanged), except after a failed heartbeat,
  which makes the next one full again. At most one heartbeat is in flight.
* The coordinator assigns. A response's assignment (topic ids) is the member's
  whole target; ``None`` means unchanged. Topic ids are named through the
  client's metadata (:meth:`ConsumerMembership.set_topic_ids`); an id not known
  yet asks for metadata (:class:`~trafka.sdk.membership.NeedMetadata`) and the
  partitions of named topics are reconciled meanwhile.
* Reconciling a target: partitions owned and no longer targeted are revoked
  first (a :class:`~trafka.sdk.membership.Revoke` the driver finishes: commit
  with auto-commit, listener, drop), then the new ones are assigned
  (:class:`~trafka.sdk.membership.Assign`, only the added partitions), then a
  heartbeat reports the owned set at once. A target that arrives during a
  revocation waits for it to finish.
* The member epoch plays the generation's part: commits carry it (OffsetCommit
  ``generation_id_or_member_epoch``). A commit refused with STALE_MEMBER_EPOCH
  is sent again when the member has a newer epoch, else it fails with
  :class:`~trafka.sdk.group_protocol.CommitFailedError` and a heartbeat goes at
  once.
* FENCED_MEMBER_EPOCH and UNKNOWN_MEMBER_ID: every owned partition is lost
  (:class:`~trafka.sdk.membership.Lose`, no commit) and the member joins again
  at once with epoch 0 and the same member id. Coordinator errors find the
  coordinator again; retriable ones back off; anything else (UNRELEASED_INSTANCE_ID,
  UNSUPPORTED_ASSIGNOR, GROUP_MAX_SIZE_REACHED, a classic group of that id, a
  coordinator without the API, ...) is fatal.
* Leaving sends epoch -1, or -2 for a static member (``group.instance.id``)
  that closes; a member whose application stopped polling for
  ``max.poll.interval.ms`` leaves with -1 and joins again at its next poll.
* The member id is the client's own (a random UUID, KIP-1082) from
  ConsumerGroupHeartbeat v1; v0 coordinators give one on the first join.
"""

from __future__ import annotations

import math
import random
import uuid
from collections.abc import Iterable, Mapping
from functools import partial
from typing import Any

from trafka.codec import ErrorCode, KafkaError, UnsupportedVersionError
from trafka.codec.messages import k68_consumer_group_heartbeat as cgh

from .consumer_types import TopicPartition
from .group_protocol import Action, CommitFailedError, classify
from .membership import (
    Assign,
    GroupRequest,
    Kind,
    Lose,
    Membership,
    MembershipConfig,
    NeedMetadata,
    Phase,
)

__all__ = [
    "JOIN_EPOCH",
    "LEAVE_EPOCH",
    "STATIC_LEAVE_EPOCH",
    "ConsumerMembership",
    "consumer_heartbeat_request",
]

# Epochs with a meaning of their own in ConsumerGroupHeartbeat.
JOIN_EPOCH = 0
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2

# Until the coordinator says otherwise (its group.consumer.heartbeat.interval.ms).
_FIRST_INTERVAL = 5.0


def consumer_heartbeat_request(
    *,
    group_id: str,
    member_id: str,
    epoch: int,
    instance_id: str | None = None,
    rack: str | None = None,
    rebalance_timeout_ms: int = -1,
    topics: Iterable[str] | None = None,
    assignor: str | None = None,
    owned: Iterable[tuple[uuid.UUID, Iterable[int]]] | None = None,
) -> Any:
    """A ConsumerGroupHeartbeat request (``None`` fields: unchanged since the last one)."""
    req = cgh.ConsumerGroupHeartbeatRequest
    return req(
        group_id=group_id,
        member_id=member_id,
        member_epoch=epoch,
        instance_id=instance_id,
        rack_id=rack,
        rebalance_timeout_ms=rebalance_timeout_ms,
        subscribed_topic_names=None if topics is None else list(topics),
        server_assignor=assignor,
        topic_partitions=None
        if owned is None
        else [req.TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in owned],
    )


def _hb_body(version: int, *, own_id: str, member_id: str, **kw: Any) -> Any:
    # KIP-1082: from v1 the member names itself; a v0 coordinator names a joining member.
    if not member_id and version >= 1:
        member_id = own_id
    return consumer_heartbeat_request(member_id=member_id, **kw)


class ConsumerMembership(Membership):
    """The consumer group protocol's membership state machine (see the module docstring):
    one state with the classic :class:`~trafka.sdk.membership.Membership` it specialises.

    Args:
        config: as for :class:`~trafka.sdk.membership.Membership`; ``assignors``
            is unused, ``session_timeout`` only bounds how long the member waits
            without an answered heartbeat before it looks for the coordinator again.
        now: the driver's clock (seconds).
        rng: for backoff jitter.
        remote_assignor: the server assignor to ask for (``group.remote.assignor``),
            or None for the coordinator's default.
    """

    def __init__(
        self,
        config: MembershipConfig,
        now: float,
        rng: random.Random | None = None,
        *,
        remote_assignor: str | None = None,
    ) -> None:
        super().__init__(config, now, rng)
        self.remote_assignor = remote_assignor
        self.own_id = str(uuid.uuid4())
        self.heartbeat_interval = _FIRST_INTERVAL
        self._names: dict[uuid.UUID, str] = {}
        self._ids: dict[str, uuid.UUID] = {}
        # The last target received, by topic id, until every id has a name.
        self._target_ids: dict[uuid.UUID, frozenset[int]] | None = None
        self._asked_metadata = False
        self._ask_again_at = -math.inf  # no backoff (any clock reading is after it)
        self._reconciling = False  # a revocation of this reconciliation was counted
        # What the coordinator last heard (None: send it in full next time).
        self._sent_topics: tuple[str, ...] | None = None
        self._sent_owned: frozenset[TopicPartition] | None = None
        self._full = True
        # (topics, owned) carried by the heartbeat in flight, recorded once it is answered.
        self._pending_report: tuple[tuple[str, ...] | None, frozenset[TopicPartition] | None] = (
            None,
            None,
        )

    # -- inputs ---------------------------------------------------------------------------

    def set_topic_ids(self, ids: Mapping[str, uuid.UUID]) -> None:
        """Topic ids known to the client's metadata, by name."""
        self._ids = dict(ids)
        self._names = {i: name for name, i in ids.items()}

    def set_subscription(self, topics: Iterable[str], partition_counts: Mapping[str, int]) -> None:
        super().set_subscription(topics, partition_counts)
        if self.phase is Phase.STABLE and self._topics != self._sent_topics:
            self._next_heartbeat = -math.inf  # tell the coordinator now

    def request_rejoin(self) -> None:
        if self.config.managed and self.phase is Phase.STABLE:
            self._next_heartbeat = -math.inf

    def assignment_metadata(self, partition_counts: Mapping[str, int], now: float) -> None:
        # The metadata asked for after an unknown topic id has been fetched: look
        # again now, and ask again (if still needed) only after a backoff.
        self._asked_metadata = False
        self._ask_again_at = now + self.config.retry_backoff_max

    def revoke_done(self, now: float) -> None:
        super().revoke_done(now)
        if self._target_ids is not None:
            self._reconcile(now)
        self._next_heartbeat = min(self._next_heartbeat, now)  # report what is owned now

    def leave(self, now: float, reason: str = "closing") -> GroupRequest | None:
        return self._leave(now, poll_timeout=False)

    # -- what to do now -------------------------------------------------------------------

    def outputs(self, now: float) -> list[Any]:
        if self._target_ids is not None and self.phase is Phase.STABLE and self._revoking is None:
            self._reconcile(now)
        return super().outputs(now)

    def on_response(self, request: GroupRequest, version: int, body: Any, now: float) -> None:
        if request.kind is Kind.CONSUMER_HEARTBEAT:
            self._measure(request, body.error_code, now)
            self._on_consumer_heartbeat(request, body, now)
        else:
            super().on_response(request, version, body, now)

    def on_failure(self, request: GroupRequest, error: BaseException, now: float) -> None:
        if request.kind is not Kind.CONSUMER_HEARTBEAT:
            super().on_failure(request, error, now)
            return
        self._measure(request, None, now)
        if request.generation < 0:
            return  # a leave: gone either way
        self._hb_in_flight = False
        self._full = True
        if isinstance(error, UnsupportedVersionError):
            self._fail(
                KafkaError(
                    ErrorCode.UNSUPPORTED_VERSION,
                    f"the coordinator of group {self.config.group_id!r} does not serve "
                    "ConsumerGroupHeartbeat: it does not support group.protocol=consumer "
                    "(KIP-848); use group.protocol=classic",
                )
            )
            return
        self._lost_coordinator(request.coordinator, now)
        if self.phase is Phase.JOINING:
            self._join_failed(now)
        else:
            self._next_heartbeat = now + self.config.retry_backoff

    # -- joining and heartbeats -----------------------------------------------------------

    def _maybe_join(self, now: float) -> None:
        if self.phase is not Phase.PREPARING or not self._can_join() or now < self._join_at:
            return
        if self._hb_in_flight:
            return
        self.phase = Phase.JOINING
        self._full = True
        self._send_heartbeat(JOIN_EPOCH)

    def _maybe_heartbeat(self, now: float) -> None:
        if (
            self.phase is not Phase.STABLE
            or self._hb_in_flight
            or self.coordinator is None
            or now < self._next_heartbeat
        ):
            return
        self._send_heartbeat(self.generation)

    def _send_heartbeat(self, epoch: int) -> None:
        cfg = self.config
        full = self._full or epoch == JOIN_EPOCH
        topics = self._topics if full or self._topics != self._sent_topics else None
        owned: frozenset[TopicPartition] | None = None
        if epoch == JOIN_EPOCH:
            owned = frozenset()
        elif full or self.owned != self._sent_owned:
            owned = self.owned
        by_topic: dict[uuid.UUID, set[int]] | None = None
        if owned is not None:
            by_topic = {}
            for tp in owned:
                tid = self._ids.get(tp.topic)
                if tid is not None:
                    by_topic.setdefault(tid, set()).add(tp.partition)
        self._hb_in_flight = True
        self._pending_report = (topics, owned)
        self._events.append(
            self._heartbeat_request(
                epoch,
                rack=cfg.rack if full else None,
                rebalance_timeout_ms=int(cfg.max_poll_interval * 1000) if full else -1,
                topics=topics,
                assignor=self.remote_assignor if full else None,
                owned=None if by_topic is None else sorted(by_topic.items()),
            )
        )

    def _heartbeat_request(self, epoch: int, **fields: Any) -> GroupRequest:
        cfg = self.config
        assert self.coordinator is not None
        return GroupRequest(
            Kind.CONSUMER_HEARTBEAT,
            partial(
                _hb_body,
                group_id=cfg.group_id,
                own_id=self.own_id,
                member_id=self.member_id,
                epoch=epoch,
                instance_id=cfg.instance_id,
                **fields,
            ),
            self.coordinator,
            cfg.request_timeout,
            epoch,
        )

    def _on_consumer_heartbeat(self, request: GroupRequest, body: Any, now: float) -> None:
        if request.generation < 0:
            return  # the answer to a leave
        self._hb_in_flight = False
        if self.phase not in (Phase.JOINING, Phase.STABLE) or request.generation != (
            JOIN_EPOCH if self.phase is Phase.JOINING else self.generation
        ):
            return  # overtaken (the member left or was fenced meanwhile)
        code = body.error_code
        if code:
            self._full = True
            self._on_heartbeat_error(code, body.error_message, request, now)
            return
        topics, owned = self._pending_report
        if topics is not None:
            self._sent_topics = topics
        if owned is not None:
            self._sent_owned = owned
        self._full = False
        if body.member_id:
            self.member_id = body.member_id
        if self.phase is Phase.JOINING:
            self.phase = Phase.STABLE
            self._join_failures = 0
        self.generation = body.member_epoch
        if body.heartbeat_interval_ms > 0:
            self.heartbeat_interval = body.heartbeat_interval_ms / 1000
        self._last_heartbeat_ok = now
        self._next_heartbeat = now + self.heartbeat_interval
        if body.assignment is not None:
            self._target_ids = {
                t.topic_id: frozenset(t.partitions) for t in body.assignment.topic_partitions
            }
            self._asked_metadata = False
            if self._revoking is None:
                self._reconcile(now)
        if self._topics != self._sent_topics or (
            self._revoking is None and self.owned != self._sent_owned
        ):
            self._next_heartbeat = now

    def _on_heartbeat_error(
        self, code: int, message: str | None, request: GroupRequest, now: float
    ) -> None:
        cfg = self.config
        what = f"ConsumerGroupHeartbeat {cfg.group_id!r}" + (f": {message}" if message else "")
        if code in (ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID):
            self._fence(now)
            return
        # classify makes the rest of the refusals fatal, a classic group of that id
        # (GROUP_ID_NOT_FOUND) among them.
        action = classify(code)
        if action is Action.FATAL or action is Action.RESET:
            self._fail(KafkaError(code, what))
        elif action is Action.REDISCOVER:
            self._lost_coordinator(request.coordinator, now)
            if self.phase is Phase.JOINING:
                self._join_failed(now)
            else:
                self._next_heartbeat = now
        elif self.phase is Phase.JOINING:
            self._join_failed(now)
        else:
            self._next_heartbeat = now + cfg.retry_backoff

    def _fence(self, now: float) -> None:
        """The coordinator no longer counts us in: lose everything, join again at once."""
        self._reset()
        self._join_at = now

    def _reset(self) -> None:
        # As the classic machine's, but the member id stays (it rejoins as itself).
        lost = self.owned
        self.owned = frozenset()
        self._revoking = None
        self._after_revoke = []
        self._target_ids = None
        if lost:
            self._events.append(Lose(lost))
        self.generation = -1
        self._sent_owned = None
        self._prepare()

    def _leave(self, now: float, *, poll_timeout: bool) -> GroupRequest | None:
        cfg = self.config
        request = None
        if cfg.managed and self.generation > 0 and self.coordinator is not None:
            static = cfg.instance_id is not None and not poll_timeout
            epoch = STATIC_LEAVE_EPOCH if static else LEAVE_EPOCH
            request = self._heartbeat_request(epoch)
        self.phase = Phase.CLOSED
        self.owned = frozenset()
        self.generation = -1
        self._target_ids = None
        self._sent_owned = None
        self._hb_in_flight = False
        return request

    def _poll_timeout(self, now: float) -> None:
        lost = self.owned
        request = self._leave(now, poll_timeout=True)
        if request is not None:
            self._events.append(request)
        if lost:
            self._events.append(Lose(lost))
        self.polls.awaiting_poll = True
        self._prepare()

    # -- reconciliation -------------------------------------------------------------------

    def _reconcile(self, now: float) -> None:
        target_ids = self._target_ids
        assert target_ids is not None and self._revoking is None
        target: set[TopicPartition] = set()
        unnamed = False
        for tid, partitions in target_ids.items():
            name = self._names.get(tid)
            if name is None:
                unnamed = True
                continue
            target.update(TopicPartition(name, p) for p in partitions)
        if unnamed and not self._asked_metadata and now >= self._ask_again_at:
            self._asked_metadata = True
            self._events.append(NeedMetadata(frozenset(self._topics)))
        new = frozenset(target)
        revoked = self.owned - new
        added = new - self.owned
        if revoked or added:
            # Java's rebalance latency for KIP-848: from a reconciliation's start
            # to its assignment (here once revoke_done has reconciled again).
            self.rebalance_latency.start(now)
        if revoked:
            # Revoke first; the target stays pending, and revoke_done reconciles
            # again (with whatever the target is by then) to assign the rest. The
            # owned set, and so what heartbeats report, never holds a partition
            # before it is assigned.
            self.rebalances += 1
            self._reconciling = True
            self._start_revoke(revoked)
            return
        if not unnamed:
            self._target_ids = None
        if added:
            if not self._reconciling:
                self.rebalances += 1
            self.owned = new
            self._events.append(Assign(added))
        if not unnamed:
            self.rebalance_latency.end(now)
        self._reconciling = False

    # -- commits --------------------------------------------------------------------------

    def _on_commit(self, request: GroupRequest, body: Any, now: float) -> None:
        commit = request.commit
        assert commit is not None
        codes = {c for c in _commit_codes(body) if c}
        if codes == {ErrorCode.STALE_MEMBER_EPOCH}:
            if (
                self.phase is Phase.STABLE
                and self.generation > 0
                and (request.generation != self.generation)
            ):
                # Sent with an epoch a heartbeat has replaced since: again, with the new one.
                self.commits.again(commit, now)
                return
            self.commits.finish(
                commit,
                CommitFailedError(
                    ErrorCode.STALE_MEMBER_EPOCH,
                    f"commit refused: member epoch {request.generation} is stale",
                ),
            )
            self._next_heartbeat = now
            return
        super()._on_commit(request, body, now)


def _commit_codes(body: Any) -> Iterable[int]:
    for t in body.topics:
        for p in t.partitions:
            yield p.error_code
