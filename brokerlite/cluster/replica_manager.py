"""This broker's replicas in a cluster: the partitions it leads and those it follows.
I/O-free: the driver (:mod:`.driver`) feeds it ZooKeeper's partition states and
the time, carries out the ISR writes it asks for, and runs the fetchers it
describes.

Rules (Kafka's ``Partition`` and ``ReplicaManager``, ZooKeeper era):

* Roles come from the partition state znodes only. A state naming this broker
  as leader with a leader epoch it has not led makes it leader (its log records
  the epoch's start at its log end offset); a state naming another leader, or
  none, makes it a follower of that leader, which first truncates its log to
  where it agrees with the leader (the driver asks OffsetForLeaderEpoch) and
  then fetches from its log end. A broker not among a partition's replicas
  holds no replica of it.
* The leader tracks each follower's log end offset (the offset of its latest
  fetch) and the last time the follower was caught up: when it fetched at the
  leader's log end offset of that moment, or at or past the log end offset the
  leader had at the follower's previous fetch (Kafka's ``lastCaughtUpTimeMs``).
* High watermark: the smallest log end offset among the ISR (the leader's own
  included). It only moves forward, and only on the leader; consumers never
  read at or past it; followers take the leader's (bounded by their own log
  end offset).
* Only the partition's assigned replicas count as in sync. The ISR ZooKeeper
  has may still name a replica a reassignment removed (the leader read the
  new leadership before the assignment without it, and a last fetch of the
  leaving replica made it rejoin): it holds back neither the high watermark
  nor an ``acks=all`` produce, and does not count for ``min.insync.replicas``,
  as Kafka's leader only counts the replicas it is told of. The controller
  takes it out of the ISR (:func:`~.controller.plan_leadership`).
* ISR: a follower not in the ISR joins it once its log end offset reaches the
  high watermark and the start of the leader's current epoch, if the leader's
  last reading of ZooKeeper has it registered (a broker that fetches after its
  registration expired stays out, as with Kafka's ``isReplicaIsrEligible``
  in ZooKeeper mode); a follower in it
  leaves when it has not been caught up for ``replica.lag.time.max.ms``. The
  leader asks for these changes (:attr:`ReplicaManager.isr_writes`), one at a
  time per partition, as a conditional write of the state znode; they take
  effect when the driver's next read of ZooKeeper shows them. Meanwhile the
  high watermark is computed over the ISR ZooKeeper has together with the one
  asked for (Kafka's "maximal ISR"): a follower being added holds it back, so
  no ISR member ever lacks a record below the high watermark.
* ISR shrinks and expands are counted (Kafka's IsrShrinksPerSec and
  IsrExpandsPerSec, on the leader) when a partition led here before and after a
  read of ZooKeeper shows its ISR changed, whoever wrote the change: this leader
  (a lagging follower dropped, one caught up added) or the controller (a broker
  that stopped, removed from the ISRs it was in). An ISR write asked for but
  not (yet) made counts nothing.
* ``acks=all``: a produce is acknowledged once the high watermark has passed
  its last offset. With fewer ISR members than ``min.insync.replicas`` it is
  refused before the append (NOT_ENOUGH_REPLICAS); an ISR that shrinks below
  it while the produce waits gives NOT_ENOUGH_REPLICAS_AFTER_APPEND.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Callable, Collection, Iterable, Mapping

from trafka.codec.errors import ErrorCode

from ..errors import (
    FencedLeaderEpochError,
    NotLeaderOrFollowerError,
    UnknownLeaderEpochError,
    UnknownTopicOrPartitionError,
)
from ..storage.log_manager import LogManager
from ..storage.partition import PartitionLog
from .zk_layout import NO_LEADER, PartitionState, TopicAssignment

__all__ = ["FollowerFetch", "IsrWrite", "Replica", "ReplicaManager", "Role"]

log = logging.getLogger("trafka.brokerlite.replication")


class Role(enum.Enum):
    LEADER = "leader"
    FOLLOWER = "follower"


@dataclasses.dataclass(slots=True)
class _Follower:
    log_end_offset: int = -1
    log_start_offset: int = -1
    last_caught_up_ms: int = 0
    last_fetch_ms: int = 0
    last_fetch_leader_leo: int = -1


@dataclasses.dataclass(slots=True)
class Replica:
    """One local replica of a partition.

    Attributes:
        topic, partition: which partition.
        role: leader or follower.
        leader: the leader's broker id (-1: offline).
        leader_epoch: the epoch of that leadership.
        isr: the ISR as ZooKeeper has it.
        replicas: the partition's assigned replicas.
        zk_version: the state znode's version the ISR was read at.
        needs_truncation: a follower that has not yet reconciled its log with
            this leader epoch's leader.
    """

    topic: str
    partition: int
    role: Role
    leader: int
    leader_epoch: int
    isr: tuple[int, ...]
    replicas: tuple[int, ...]
    zk_version: int
    controller_epoch: int
    needs_truncation: bool = False
    followers: dict[int, _Follower] = dataclasses.field(default_factory=dict)
    isr_write_pending: bool = False
    #: The ISR asked for while its write is pending; the high watermark counts its
    #: members too (Kafka's "maximal ISR", KIP-497), so a follower joining the ISR
    #: is never left below it.
    pending_isr: tuple[int, ...] = ()
    epoch_start_offset: int = 0
    #: Replicas a reassignment under way removes: a leader never adds them back to
    #: the ISR (in the moment between the controller's final state and the topic
    #: without them, a new leader would; Kafka's leader learns the new replica set
    #: with its leadership).
    leaving: frozenset[int] = frozenset()


@dataclasses.dataclass(frozen=True, slots=True)
class IsrWrite:
    """An ISR change the leader asks the driver to write to ZooKeeper."""

    topic: str
    partition: int
    state: PartitionState
    expected_version: int
    reason: str


@dataclasses.dataclass(frozen=True, slots=True)
class FollowerFetch:
    """A partition a follower fetches: from ``leader``, at ``leader_epoch``."""

    topic: str
    partition: int
    leader: int
    leader_epoch: int
    needs_truncation: bool


class ReplicaManager:
    """The local replicas of a cluster member (see the module docstring).

    Args:
        node_id: this broker's id.
        logs: its log manager (every topic of the cluster has its logs here).
        replica_lag_time_max_ms: Kafka's ``replica.lag.time.max.ms``.
        min_insync_replicas: a topic's ``min.insync.replicas``.
        on_high_watermark: called with (topic, partition) when a high watermark
            moves (waiting produces and consumer fetches wake).
        on_truncate: called with (topic, partition) after a follower truncated
            its log (the producer state is rebuilt).
        on_removed: called with (topic, partition) when this broker stops being a
            replica of an existing partition (a reassignment moved it away).
        on_role: called with (topic, partition, leads, now_ms) when this broker
            starts or stops leading a partition (coordinators load or drop the
            state the partition holds).
    """

    def __init__(
        self,
        node_id: int,
        logs: LogManager,
        *,
        replica_lag_time_max_ms: int,
        min_insync_replicas: Callable[[str], int],
        on_high_watermark: Callable[[str, int], None],
        on_truncate: Callable[[str, int], None],
        on_removed: Callable[[str, int], None] = lambda _t, _p: None,
        on_role: Callable[[str, int, bool, int], None] = lambda _t, _p, _l, _n: None,
    ) -> None:
        self.node_id = node_id
        self._logs = logs
        self._lag_max_ms = replica_lag_time_max_ms
        self._min_isr = min_insync_replicas
        self._on_hw = on_high_watermark
        self._on_truncate = on_truncate
        self._on_removed = on_removed
        self._on_role = on_role
        self._replicas: dict[tuple[str, int], Replica] = {}
        #: ISR changes to write (the driver takes them with :meth:`take_isr_writes`).
        self.isr_writes: list[IsrWrite] = []
        #: ISR shrinks and expands of partitions led here since start (Kafka's
        #: IsrShrinksPerSec/IsrExpandsPerSec), counted when they take effect.
        self.isr_shrinks = 0
        self.isr_expands = 0
        #: Each followed partition's lag behind its leader at the last fetch
        #: answer: the leader's high watermark minus this log's end, never below
        #: 0 (Kafka's FetcherLagMetrics ConsumerLag).
        self._fetcher_lag: dict[tuple[str, int], int] = {}
        #: The registered brokers at the last :meth:`apply` (None: not known).
        self._live: frozenset[int] | None = None

    # -- roles ------------------------------------------------------------------------------

    def replica(self, topic: str, partition: int) -> Replica | None:
        return self._replicas.get((topic, partition))

    def replicas(self) -> list[Replica]:
        return list(self._replicas.values())

    def apply(
        self,
        topics: Mapping[str, TopicAssignment],
        states: Mapping[tuple[str, int], PartitionState],
        now_ms: int,
        live: Collection[int] | None = None,
    ) -> bool:
        """Take the cluster's partition states: become leader or follower where they
        say so, forget replicas no longer assigned here. ``live``: the registered
        brokers, the only followers a leader adds to an ISR (Kafka's
        ``Partition.isReplicaIsrEligible`` in ZooKeeper mode: the broker is alive in
        the leader's metadata); None: not known, every follower may join.

        Returns:
            True when a follower's leader or epoch changed (the fetchers must
            be told).
        """
        me = self.node_id
        self._live = None if live is None else frozenset(live)
        fetchers_changed = False
        seen: set[tuple[str, int]] = set()
        for name, assignment in topics.items():
            for partition, replicas in assignment.replicas.items():
                assigned = set(replicas) | set(assignment.adding.get(partition, ()))
                if me not in assigned:
                    continue
                state = states.get((name, partition))
                if state is None:
                    continue
                key = (name, partition)
                seen.add(key)
                current = self._replicas.get(key)
                all_replicas = tuple(replicas) + tuple(
                    r for r in assignment.adding.get(partition, ()) if r not in replicas
                )
                if state.leader == me:
                    if current is not None and current.role is Role.LEADER:
                        self._count_isr_change(current.isr, state.isr)
                    if (
                        current is None
                        or current.role is not Role.LEADER
                        or current.leader_epoch != state.leader_epoch
                    ):
                        self._become_leader(key, state, all_replicas, now_ms)
                        fetchers_changed = fetchers_changed or current is not None
                    else:
                        self._update_isr(current, state, all_replicas)
                    self._replicas[key].leaving = frozenset(assignment.removing.get(partition, ()))
                elif (
                    current is None
                    or current.role is not Role.FOLLOWER
                    or current.leader != state.leader
                    or current.leader_epoch != state.leader_epoch
                ):
                    self._become_follower(key, state, all_replicas, now_ms)
                    fetchers_changed = True
                else:
                    self._update_isr(current, state, all_replicas)
        for key in [k for k in self._replicas if k not in seen]:
            gone = self._replicas.pop(key)
            if gone.role is Role.FOLLOWER:
                fetchers_changed = True
            else:
                self._on_role(key[0], key[1], False, now_ms)
            log.info("%s-%d: no longer a replica here", *key)
            self._on_removed(*key)
        return fetchers_changed

    def _count_isr_change(self, before: tuple[int, ...], after: tuple[int, ...]) -> None:
        """A partition led here before and after a state change: count its ISR
        shrink or expand (both, when members were swapped), whoever wrote it."""
        if set(before) - set(after):
            self.isr_shrinks += 1
        if set(after) - set(before):
            self.isr_expands += 1

    def _become_leader(
        self, key: tuple[str, int], state: PartitionState, replicas: tuple[int, ...], now_ms: int
    ) -> None:
        plog = self._logs.partition(*key)
        plog.assign_epoch(state.leader_epoch, plog.log_end_offset)
        plog.leader_epoch = state.leader_epoch
        if not plog.tracks_high_watermark:
            plog.set_high_watermark(plog.high_watermark)
        followers = {
            r: _Follower(last_caught_up_ms=now_ms if r in state.isr else 0)
            for r in replicas
            if r != self.node_id
        }
        self._replicas[key] = Replica(
            key[0],
            key[1],
            Role.LEADER,
            self.node_id,
            state.leader_epoch,
            state.isr,
            replicas,
            state.zk_version,
            state.controller_epoch,
            followers=followers,
            epoch_start_offset=plog.log_end_offset,
        )
        log.info(
            "%s-%d: leader at epoch %d (log end %d, high watermark %d, ISR %s)",
            key[0],
            key[1],
            state.leader_epoch,
            plog.log_end_offset,
            plog.high_watermark,
            list(state.isr),
        )
        self._maybe_advance_hw(self._replicas[key], plog)
        self._on_role(key[0], key[1], True, now_ms)

    def _become_follower(
        self,
        key: tuple[str, int],
        state: PartitionState,
        replicas: tuple[int, ...],
        now_ms: int,
    ) -> None:
        before = self._replicas.get(key)
        # A new leadership's lag is unknown until its leader answers.
        self._fetcher_lag.pop(key, None)
        plog = self._logs.partition(*key)
        if not plog.tracks_high_watermark:
            plog.set_high_watermark(plog.high_watermark)
        self._replicas[key] = Replica(
            key[0],
            key[1],
            Role.FOLLOWER,
            state.leader,
            state.leader_epoch,
            state.isr,
            replicas,
            state.zk_version,
            state.controller_epoch,
            needs_truncation=state.leader != NO_LEADER,
        )
        if before is not None and before.role is Role.LEADER:
            self._on_role(key[0], key[1], False, now_ms)
        log.info(
            "%s-%d: follower of %s at epoch %d (log end %d)",
            key[0],
            key[1],
            state.leader if state.leader != NO_LEADER else "no leader (offline)",
            state.leader_epoch,
            plog.log_end_offset,
        )

    def _update_isr(
        self, replica: Replica, state: PartitionState, replicas: tuple[int, ...]
    ) -> None:
        if state.zk_version == replica.zk_version and replicas == replica.replicas:
            return
        replica.zk_version = state.zk_version
        replica.isr_write_pending = False
        replica.pending_isr = ()
        replica.controller_epoch = state.controller_epoch
        if replica.role is Role.LEADER:
            for r in replicas:
                if r != self.node_id and r not in replica.followers:
                    replica.followers[r] = _Follower()
            for r in [r for r in replica.followers if r not in replicas]:
                del replica.followers[r]
        replica.replicas = replicas
        if replica.isr != state.isr:
            replica.isr = state.isr
            if replica.role is Role.LEADER:
                self._maybe_advance_hw(
                    replica, self._logs.partition(replica.topic, replica.partition)
                )

    def isr_write_failed(self, topic: str, partition: int) -> None:
        """The ISR write of a partition failed (its znode moved on): ask again later."""
        replica = self._replicas.get((topic, partition))
        if replica is not None:
            replica.isr_write_pending = False
            replica.pending_isr = ()

    # -- leader side ----------------------------------------------------------------------------

    def leader_log(
        self, topic: str, partition: int, current_leader_epoch: int = -1
    ) -> PartitionLog:
        """The partition's log when this broker leads it.

        Raises:
            NotLeaderOrFollowerError: it does not.
            FencedLeaderEpochError, UnknownLeaderEpochError: the caller's epoch
                (unless -1) is older or newer than this leader's.
            UnknownTopicOrPartitionError: no such partition.
        """
        replica = self._replicas.get((topic, partition))
        if replica is None or replica.role is not Role.LEADER:
            if self._logs.topic(topic) is None:
                raise UnknownTopicOrPartitionError(f"unknown topic-partition {topic}-{partition}")
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} does not lead {topic}-{partition}"
                + (f" (its leader is {replica.leader})" if replica is not None else "")
            )
        check_epoch(current_leader_epoch, replica.leader_epoch)
        return self._logs.partition(topic, partition)

    def check_min_isr(self, topic: str, partition: int) -> ErrorCode:
        """NOT_ENOUGH_REPLICAS when an ``acks=all`` produce must be refused before
        the append; NONE otherwise (call only for a partition led here)."""
        replica = self._replicas[(topic, partition)]
        needed = self._min_isr(topic)
        if _in_sync_count(replica) < needed:
            return ErrorCode.NOT_ENOUGH_REPLICAS
        return ErrorCode.NONE

    def acks_all_outcome(
        self, topic: str, partition: int, required_offset: int
    ) -> ErrorCode | None:
        """An ``acks=all`` produce waiting for ``required_offset`` (its last offset + 1):
        NONE once the high watermark passed it, an error when it cannot be any
        more (leadership lost; the ISR below ``min.insync.replicas``), None while
        it must go on waiting."""
        replica = self._replicas.get((topic, partition))
        if replica is None or replica.role is not Role.LEADER:
            return ErrorCode.NOT_LEADER_OR_FOLLOWER
        plog = self._logs.partition(topic, partition)
        if plog.high_watermark >= required_offset:
            if _in_sync_count(replica) < self._min_isr(topic):
                return ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
            return ErrorCode.NONE
        return None

    def on_follower_fetch(
        self,
        topic: str,
        partition: int,
        replica_id: int,
        fetch_offset: int,
        now_ms: int,
        *,
        current_leader_epoch: int = -1,
        log_start_offset: int = -1,
    ) -> PartitionLog:
        """A follower fetched at ``fetch_offset``: its progress counts for the ISR and
        the high watermark; its ``log_start_offset`` (Fetch v5+) for the low
        watermark.

        Returns:
            The partition's log (read it up to its log end offset).

        Raises:
            NotLeaderOrFollowerError: this broker does not lead the partition, or
                ``replica_id`` is not one of its replicas.
            FencedLeaderEpochError, UnknownLeaderEpochError: the follower's epoch
                (unless -1) is older or newer than this leader's.
        """
        replica = self._replicas.get((topic, partition))
        if replica is None or replica.role is not Role.LEADER:
            raise NotLeaderOrFollowerError(
                f"broker {self.node_id} does not lead {topic}-{partition}"
            )
        check_epoch(current_leader_epoch, replica.leader_epoch)
        follower = replica.followers.get(replica_id)
        if follower is None:
            raise NotLeaderOrFollowerError(
                f"broker {replica_id} is not a replica of {topic}-{partition}"
            )
        plog = self._logs.partition(topic, partition)
        leo = plog.log_end_offset
        if fetch_offset >= leo:
            follower.last_caught_up_ms = now_ms
        elif fetch_offset >= follower.last_fetch_leader_leo >= 0:
            follower.last_caught_up_ms = max(follower.last_caught_up_ms, follower.last_fetch_ms)
        follower.log_end_offset = fetch_offset
        follower.last_fetch_ms = now_ms
        if log_start_offset > follower.log_start_offset:
            follower.log_start_offset = log_start_offset
            self._on_hw(topic, partition)  # DeleteRecords waits on it too
        follower.last_fetch_leader_leo = leo
        if (
            replica_id not in replica.isr
            and replica_id not in replica.leaving
            and not replica.isr_write_pending
            and (self._live is None or replica_id in self._live)
            and fetch_offset >= plog.high_watermark
            and fetch_offset >= replica.epoch_start_offset
        ):
            self._ask_isr(
                replica,
                (*replica.isr, replica_id),
                f"follower {replica_id} caught up (log end {fetch_offset})",
            )
        self._maybe_advance_hw(replica, plog)
        return plog

    def in_isr(self, topic: str, partition: int, replica_id: int) -> bool:
        """Whether ``replica_id`` is in the ISR of a partition led here (the leader's
        test of "in sync" for the replication throttle, KIP-73)."""
        replica = self._replicas.get((topic, partition))
        return replica is not None and replica_id in replica.isr

    def _maybe_advance_hw(self, replica: Replica, plog: PartitionLog) -> None:
        hw = plog.log_end_offset
        counted = set(replica.isr) | set(replica.pending_isr)
        # The followers are the assigned replicas: an ISR member that is not one
        # any more (a reassignment removed it) never fetches again, and must not
        # hold the high watermark back (see the module rules).
        for r, follower in replica.followers.items():
            if r in counted:
                hw = min(hw, follower.log_end_offset)
        if hw > plog.high_watermark:
            plog.set_high_watermark(hw)
            self._on_hw(replica.topic, replica.partition)

    def low_watermark(self, topic: str, partition: int) -> int | None:
        """The lowest log start offset of the partition's in-sync replicas, as their
        fetches report it (Kafka's low watermark, which DeleteRecords answers
        with); None when this broker does not lead the partition."""
        replica = self._replicas.get((topic, partition))
        if replica is None or replica.role is not Role.LEADER:
            return None
        low = self._logs.partition(topic, partition).log_start_offset
        for r in replica.isr:
            follower = replica.followers.get(r)
            if r != self.node_id and follower is not None:
                low = min(low, follower.log_start_offset)
        return low

    def appended(self, topic: str, partition: int) -> None:
        """The leader appended records (the HW moves at once when it leads alone)."""
        replica = self._replicas.get((topic, partition))
        if replica is not None and replica.role is Role.LEADER:
            self._maybe_advance_hw(replica, self._logs.partition(topic, partition))

    def tick(self, now_ms: int) -> None:
        """Drop followers that stopped keeping up from the ISRs this broker leads."""
        for replica in self._replicas.values():
            if replica.role is not Role.LEADER or replica.isr_write_pending:
                continue
            plog = self._logs.partition(replica.topic, replica.partition)
            lagging = [
                r
                for r in replica.isr
                if r != self.node_id
                and (f := replica.followers.get(r)) is not None
                and now_ms - f.last_caught_up_ms > self._lag_max_ms
                # A follower at the log end is in sync however long ago it fetched.
                and not (f.log_end_offset >= plog.log_end_offset and f.last_fetch_ms)
            ]
            if lagging:
                self._ask_isr(
                    replica,
                    tuple(r for r in replica.isr if r not in lagging),
                    f"followers {lagging} not caught up for over {self._lag_max_ms} ms",
                )

    def _ask_isr(self, replica: Replica, isr: tuple[int, ...], reason: str) -> None:
        replica.isr_write_pending = True
        replica.pending_isr = isr
        self.isr_writes.append(
            IsrWrite(
                replica.topic,
                replica.partition,
                PartitionState(self.node_id, replica.leader_epoch, isr, replica.controller_epoch),
                replica.zk_version,
                reason,
            )
        )

    def take_isr_writes(self) -> list[IsrWrite]:
        writes, self.isr_writes = self.isr_writes, []
        return writes

    # -- follower side ----------------------------------------------------------------------------

    def follower_fetches(self, leader: int | None = None) -> list[FollowerFetch]:
        """What this broker fetches, from which leaders (from ``leader`` alone when given)."""
        return [
            FollowerFetch(r.topic, r.partition, r.leader, r.leader_epoch, r.needs_truncation)
            for r in self._replicas.values()
            if r.role is Role.FOLLOWER
            and r.leader != NO_LEADER
            and (leader is None or r.leader == leader)
        ]

    def followed_leaders(self) -> set[int]:
        """The leaders this broker fetches from (the driver runs a fetcher for each)."""
        return {
            r.leader
            for r in self._replicas.values()
            if r.role is Role.FOLLOWER and r.leader != NO_LEADER
        }

    def is_current_follower(
        self, topic: str, partition: int, leader: int, leader_epoch: int
    ) -> bool:
        r = self._replicas.get((topic, partition))
        return (
            r is not None
            and r.role is Role.FOLLOWER
            and r.leader == leader
            and r.leader_epoch == leader_epoch
        )

    def truncated(self, topic: str, partition: int, offset: int) -> None:
        """The follower reconciled its log with its leader: truncate below ``offset``
        (the end of the last epoch both logs share) and start fetching."""
        replica = self._replicas[(topic, partition)]
        plog = self._logs.partition(topic, partition)
        if offset < plog.log_end_offset:
            log.info(
                "%s-%d: truncating from log end %d to %d (leader %d, epoch %d)",
                topic,
                partition,
                plog.log_end_offset,
                offset,
                replica.leader,
                replica.leader_epoch,
            )
            plog.truncate_to(offset)
            self._on_truncate(topic, partition)
        replica.needs_truncation = False

    def follower_in_sync(self, topic: str, partition: int) -> bool:
        """Whether a followed partition had caught up with its leader's high
        watermark at the leader's last answer (Kafka's fetcher ``isReplicaInSync``:
        a lag of 0; none known yet is not in sync)."""
        return self._fetcher_lag.get((topic, partition)) == 0

    def follower_high_watermark(self, topic: str, partition: int, leader_hw: int) -> None:
        """The leader told its high watermark: a follower's is the smaller of it and
        its own log end."""
        plog = self._logs.partition(topic, partition)
        self._fetcher_lag[topic, partition] = max(leader_hw - plog.log_end_offset, 0)
        hw = min(leader_hw, plog.log_end_offset)
        if hw > plog.high_watermark:
            plog.set_high_watermark(hw)

    # -- figures --------------------------------------------------------------------------------

    def under_replicated(self) -> list[tuple[str, int]]:
        """Partitions led here whose ISR is smaller than their replica set."""
        return [
            (r.topic, r.partition)
            for r in self._replicas.values()
            if r.role is Role.LEADER and len(r.isr) < len(r.replicas)
        ]

    def led(self) -> Iterable[Replica]:
        return (r for r in self._replicas.values() if r.role is Role.LEADER)

    def fetcher_lags(self) -> dict[tuple[str, int], int]:
        """The lag of each partition this broker follows now, as of the last
        answer from its leader (a partition not yet fetched has none)."""
        return {
            key: lag
            for key, lag in self._fetcher_lag.items()
            if (r := self._replicas.get(key)) is not None and r.role is Role.FOLLOWER
        }


def _in_sync_count(replica: Replica) -> int:
    """How many of a led partition's ISR members are assigned replicas (the leader
    and its followers): what ``min.insync.replicas`` is checked against."""
    return sum(1 for r in replica.isr if r == replica.leader or r in replica.followers)


def check_epoch(requested: int, current: int) -> None:
    """Kafka's fencing of a request's ``current_leader_epoch`` (-1: no check).

    Raises:
        FencedLeaderEpochError: older than ``current``.
        UnknownLeaderEpochError: newer than ``current``.
    """
    if requested < 0 or requested == current:
        return
    if requested < current:
        raise FencedLeaderEpochError(f"leader epoch {requested} is older than {current}")
    raise UnknownLeaderEpochError(f"leader epoch {requested} is newer than {current}")
