"""The cluster controller's decisions, without I/O: who leads each partition, and where
new partitions' replicas go.

One broker of a cluster is the controller: the one that created the ephemeral
``/controller`` znode (:mod:`.driver` runs the election). Each time its view
of the cluster changes it asks :func:`plan_leadership` what partition states to
write, and writes them to ZooKeeper, each guarded by the controller epoch's
znode version (a controller that lost its office can no longer write) and by the
state znode's version (an ISR change a leader made meanwhile is never
overwritten unseen). The brokers learn the outcome from the state znodes.

Rules (Kafka's ZooKeeper-era controller: ``PartitionStateMachine``,
``ReplicaStateMachine`` and ``Election``):

* A new partition (assignment written, no state yet) comes online with the
  first live replica of its assignment as leader, every live replica of it in
  the ISR, leader epoch 0. With no live replica it stays new.
* A partition whose leader is not live gets a new leader: the first replica in
  assignment order that is live and in the ISR; the ISR loses the replicas that
  are not live. If no ISR member is live, ``unclean.leader.election.enable``
  decides: on, the first live replica leads, alone in the ISR (records only the
  old ISR had are lost, which is what the setting accepts); off (the default),
  the partition goes offline (leader -1) and keeps its ISR, so that the first
  ISR member to come back leads again with everything that was acknowledged.
* A live leader whose ISR names replicas that are not live gets an ISR without
  them (Kafka's controller removes a dead broker from every ISR at once, rather
  than waiting for the leader's ``replica.lag.time.max.ms``).
* The ISR only holds replicas of the assignment: one a reassignment removed
  leaves it, as Kafka's controller forces the removed replicas out of the ISR
  when a move completes. (A leader never lets a replica the move removes rejoin
  the ISR, which it would otherwise do between the reassignment's leadership
  and the assignment without that replica.) An elected
  leader's ISR has neither dead nor removed replicas.
* Every change of leader or of the ISR made here bumps the leader epoch, as
  Kafka's controller does; ISR changes made by the leader itself (shrinking a
  lagging follower, adding one that caught up) do not.
* Preferred leaders: :func:`plan_preferred` moves leadership to the first
  replica of the assignment when it is live and in the ISR.
* Reassignments (KIP-455, as Kafka's ZooKeeper-era controller runs them): while
  a partition moves, its assignment holds the target replicas first, then the
  ones leaving, with ``adding`` and ``removing`` naming the difference; the
  controller bumps the leader epoch once when it first sees the move (as Kafka's
  does when a move starts); the new replicas fetch as followers and join the
  ISR when caught up. Once every
  target replica is in the ISR (:func:`plan_reassignments`), the controller
  writes the partition's new state (ISR cut to the target, a leader from the
  target if the old one leaves, epoch bumped) and then the assignment without
  the leaving replicas, which drop their copies.

Replica placement (:func:`assign_replicas`) is Kafka's rack-unaware
assignment: partition ``p``'s first replica is broker ``(p + start) % n`` of
the sorted broker list, and the others follow at a shift that changes every
``n`` partitions, so leaders and followers spread evenly.
"""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Callable, Collection, Mapping, Sequence

from trafka.codec.errors import ErrorCode

from .zk_layout import NO_LEADER, PartitionState, TopicAssignment

__all__ = [
    "AssignmentError",
    "ReassignmentDone",
    "StateWrite",
    "assign_replicas",
    "check_assignment",
    "plan_moves",
    "coordinator_partition",
    "reassignment_plan",
    "plan_leadership",
    "plan_preferred",
    "plan_reassignments",
    "plan_unclean",
]


class AssignmentError(ValueError):
    """Replicas cannot be placed as asked (too few brokers for the replication factor)."""


@dataclasses.dataclass(frozen=True, slots=True)
class StateWrite:
    """A partition state to write.

    Attributes:
        topic, partition: which partition.
        state: the new state.
        expected_version: the version of the znode it replaces; -1 to create it.
        reason: why, for the controller's log line.
    """

    topic: str
    partition: int
    state: PartitionState
    expected_version: int
    reason: str


def plan_leadership(
    topics: Mapping[str, TopicAssignment],
    states: Mapping[tuple[str, int], PartitionState],
    live: Collection[int],
    *,
    controller_epoch: int,
    unclean: Callable[[str], bool] = lambda _topic: False,
    skip: Collection[str] = (),
) -> list[StateWrite]:
    """The partition states the controller must write for the cluster to be served.

    Args:
        topics: every topic's assignment.
        states: the partition states as read (with their znode versions).
        live: the broker ids registered now.
        controller_epoch: the controller's epoch, written into every state.
        unclean: whether a topic allows unclean leader election.
        skip: topics to leave alone (being deleted).

    Returns:
        The writes, in topic and partition order.
    """
    writes: list[StateWrite] = []
    for name in sorted(topics):
        if name in skip:
            continue
        assignment = topics[name]
        for partition, replicas in sorted(assignment.replicas.items()):
            state = states.get((name, partition))
            write = _plan_partition(
                name, partition, replicas, state, live, controller_epoch, unclean
            )
            if write is not None:
                writes.append(write)
    return writes


def _plan_partition(
    topic: str,
    partition: int,
    replicas: Sequence[int],
    state: PartitionState | None,
    live: Collection[int],
    controller_epoch: int,
    unclean: Callable[[str], bool],
) -> StateWrite | None:
    live_replicas = [r for r in replicas if r in live]
    assigned = set(replicas)
    if state is None:
        if not live_replicas:
            return None
        return StateWrite(
            topic,
            partition,
            PartitionState(live_replicas[0], 0, tuple(live_replicas), controller_epoch),
            -1,
            "new partition",
        )
    if state.leader in live:
        dead = [r for r in state.isr if r not in live]
        removed = [r for r in state.isr if r in live and r not in assigned and r != state.leader]
        if not dead and not removed:
            return None
        isr = tuple(r for r in state.isr if r not in dead and r not in removed)
        why = []
        if dead:
            why.append(f"replicas {sorted(dead)} left the ISR (not live)")
        if removed:
            why.append(f"replicas {sorted(removed)} left the ISR (no longer replicas)")
        return StateWrite(
            topic,
            partition,
            PartitionState(state.leader, state.leader_epoch + 1, isr, controller_epoch),
            state.zk_version,
            "; ".join(why),
        )
    live_isr = [r for r in replicas if r in state.isr and r in live]
    if live_isr:
        leader = live_isr[0]
        isr = tuple(r for r in state.isr if r in live and r in assigned)
        reason = f"leader {state.leader} is not live; elected {leader} from the ISR"
    elif live_replicas and unclean(topic):
        leader = live_replicas[0]
        isr = (leader,)
        reason = (
            f"no ISR member of {list(state.isr)} is live; unclean election of {leader} "
            "(records only the old ISR had are lost)"
        )
    else:
        if state.leader == NO_LEADER:
            return None  # offline already; waits for an ISR member to return
        return StateWrite(
            topic,
            partition,
            PartitionState(NO_LEADER, state.leader_epoch + 1, state.isr, controller_epoch),
            state.zk_version,
            f"leader {state.leader} is not live and no ISR member of {list(state.isr)} is: offline",
        )
    return StateWrite(
        topic,
        partition,
        PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch),
        state.zk_version,
        reason,
    )


def plan_preferred(
    topics: Mapping[str, TopicAssignment],
    states: Mapping[tuple[str, int], PartitionState],
    live: Collection[int],
    *,
    controller_epoch: int,
    partitions: Collection[tuple[str, int]] | None = None,
) -> list[StateWrite]:
    """Move leadership to each partition's preferred replica (the first of its
    assignment) where that replica is live, in the ISR and not leading already.

    Args:
        partitions: the partitions to consider; None for all.
    """
    writes: list[StateWrite] = []
    for name in sorted(topics):
        for partition, replicas in sorted(topics[name].replicas.items()):
            if partitions is not None and (name, partition) not in partitions:
                continue
            state = states.get((name, partition))
            if state is None or not replicas:
                continue
            preferred = replicas[0]
            if state.leader == preferred or preferred not in live or preferred not in state.isr:
                continue
            writes.append(
                StateWrite(
                    name,
                    partition,
                    PartitionState(preferred, state.leader_epoch + 1, state.isr, controller_epoch),
                    state.zk_version,
                    f"preferred leader {preferred} takes over from {state.leader}",
                )
            )
    return writes


def plan_unclean(
    topics: Mapping[str, TopicAssignment],
    states: Mapping[tuple[str, int], PartitionState],
    live: Collection[int],
    *,
    controller_epoch: int,
    partitions: Collection[tuple[str, int]],
) -> list[StateWrite]:
    """An unclean election where it was asked for (ElectLeaders, type 1): a partition
    without a live leader and without a live ISR member gets its first live replica
    as leader, alone in the ISR."""
    writes: list[StateWrite] = []
    for name, partition in sorted(partitions):
        assignment = topics.get(name)
        state = states.get((name, partition))
        if assignment is None or state is None or state.leader in live:
            continue
        replicas = assignment.replicas.get(partition, ())
        if any(r in live for r in state.isr):
            continue  # a clean election will do (plan_leadership)
        candidates = [r for r in replicas if r in live]
        if not candidates:
            continue
        writes.append(
            StateWrite(
                name,
                partition,
                PartitionState(
                    candidates[0], state.leader_epoch + 1, (candidates[0],), controller_epoch
                ),
                state.zk_version,
                f"unclean election of {candidates[0]} asked for (no ISR member of "
                f"{list(state.isr)} is live)",
            )
        )
    return writes


@dataclasses.dataclass(frozen=True, slots=True)
class ReassignmentDone:
    """A partition whose reassignment can complete: its replicas become ``target``
    once ``write`` (the new leadership and ISR) is written."""

    topic: str
    partition: int
    target: tuple[int, ...]
    write: StateWrite


def reassignment_plan(
    original: Sequence[int], target: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]:
    """KIP-455's replica sets while ``original`` moves to ``target``: (the full
    replicas, the target first and then the replicas leaving; those being added;
    those being removed)."""
    full = tuple(target) + tuple(r for r in original if r not in target)
    adding = tuple(r for r in target if r not in original)
    removing = tuple(r for r in original if r not in target)
    return full, adding, removing


def plan_reassignments(
    topics: Mapping[str, TopicAssignment],
    states: Mapping[tuple[str, int], PartitionState],
    live: Collection[int],
    *,
    controller_epoch: int,
) -> list[ReassignmentDone]:
    """The reassignments under way whose target replicas are all in the ISR: each
    completes with an ISR cut down to the target and, when the leader is leaving,
    a new leader from the target (the first live one in the ISR). Until then the
    partition keeps its full replica set, the new replicas catching up as followers."""
    done: list[ReassignmentDone] = []
    for name in sorted(topics):
        assignment = topics[name]
        for partition in sorted(set(assignment.adding) | set(assignment.removing)):
            removing = assignment.removing.get(partition, ())
            target = tuple(r for r in assignment.replicas.get(partition, ()) if r not in removing)
            state = states.get((name, partition))
            if not target or state is None or state.leader not in live:
                continue
            if not all(r in state.isr for r in target):
                continue
            leader = state.leader
            if leader not in target:
                candidates = [r for r in target if r in live and r in state.isr]
                if not candidates:
                    continue
                leader = candidates[0]
            isr = tuple(r for r in state.isr if r in target)
            write = StateWrite(
                name,
                partition,
                PartitionState(leader, state.leader_epoch + 1, isr, controller_epoch),
                state.zk_version,
                f"reassignment to {list(target)} complete",
            )
            done.append(ReassignmentDone(name, partition, target, write))
    return done


def check_assignment(
    explicit: dict[int, list[int]], live: list[int], factor: int | None = None
) -> dict[int, tuple[int, ...]]:
    """Validate an explicit replica assignment (Kafka's rules: known brokers, no
    broker twice in a partition, the same replication factor everywhere).

    Raises:
        AssignmentError: it breaks one of them.
    """
    out: dict[int, tuple[int, ...]] = {}
    for partition, replicas in sorted(explicit.items()):
        if not replicas:
            raise AssignmentError(f"partition {partition} has no replicas")
        if len(set(replicas)) != len(replicas):
            raise AssignmentError(f"partition {partition} names a broker twice: {replicas}")
        unknown = [b for b in replicas if b not in live]
        if unknown:
            raise AssignmentError(
                f"partition {partition}: unknown or dead broker(s) {unknown} (live: {live})"
            )
        if factor is None:
            factor = len(replicas)
        if len(replicas) != factor:
            raise AssignmentError(
                f"partition {partition} has {len(replicas)} replicas, others {factor}"
            )
        out[partition] = tuple(replicas)
    return out


def plan_moves(
    current: TopicAssignment, wanted: Mapping[int, Sequence[int] | None]
) -> tuple[TopicAssignment, dict[int, tuple[ErrorCode, str | None]]]:
    """A topic's assignment with reassignments started (a target) or cancelled (None),
    KIP-455's way (see the module rules), and each partition's outcome:
    UNKNOWN_TOPIC_OR_PARTITION, NO_REASSIGNMENT_IN_PROGRESS for a cancel when
    nothing moves, else NONE. A cancel restores the replicas the move started from."""
    replicas = dict(current.replicas)
    adding = dict(current.adding)
    removing = dict(current.removing)
    outcomes: dict[int, tuple[ErrorCode, str | None]] = {}
    for partition, target in wanted.items():
        if partition not in replicas:
            outcomes[partition] = (
                ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                f"no partition {current.name}-{partition}",
            )
            continue
        joining = adding.get(partition, ())
        original = tuple(r for r in replicas[partition] if r not in joining)
        if target is None:
            if partition not in adding and partition not in removing:
                code = ErrorCode.NO_REASSIGNMENT_IN_PROGRESS
                outcomes[partition] = (code, code.message)
                continue
            replicas[partition] = original
            adding.pop(partition, None)
            removing.pop(partition, None)
        else:
            full, add, remove = reassignment_plan(original, target)
            replicas[partition] = full
            if add or remove:
                adding[partition], removing[partition] = add, remove
            else:
                adding.pop(partition, None)
                removing.pop(partition, None)
        outcomes[partition] = (ErrorCode.NONE, None)
    return TopicAssignment(current.name, current.topic_id, replicas, adding, removing), outcomes


def assign_replicas(
    brokers: Collection[int],
    num_partitions: int,
    replication_factor: int,
    *,
    first_partition: int = 0,
    start_index: int | None = None,
    shift: int | None = None,
    rng: random.Random | None = None,
) -> dict[int, tuple[int, ...]]:
    """Kafka's rack-unaware replica placement (see the module docstring).

    Args:
        brokers: the brokers to place on (the live ones).
        num_partitions: how many partitions to place.
        replication_factor: replicas per partition.
        first_partition: the first partition's id (CreatePartitions adds at the end).
        start_index, shift: fixed instead of random (tests, and for repeatable plans).
        rng: where the random start comes from.

    Returns:
        Each partition's replicas, the preferred leader first.

    Raises:
        AssignmentError: fewer brokers than ``replication_factor``, or a factor below 1.
    """
    ids = sorted(brokers)
    n = len(ids)
    if replication_factor < 1:
        raise AssignmentError(
            f"the replication factor must be at least 1, got {replication_factor}"
        )
    if replication_factor > n:
        raise AssignmentError(
            f"replication factor {replication_factor} is larger than the {n} available "
            f"broker(s) {ids}"
        )
    rand = rng or random.Random()
    start = start_index if start_index is not None else rand.randrange(n)
    next_shift = shift if shift is not None else rand.randrange(n)
    out: dict[int, tuple[int, ...]] = {}
    for partition in range(first_partition, first_partition + num_partitions):
        if partition > 0 and partition % n == 0:
            next_shift += 1
        first = (partition + start) % n
        chosen = [ids[first]]
        for j in range(replication_factor - 1):
            step = 1 + (next_shift + j) % (n - 1)
            chosen.append(ids[(first + step) % n])
        out[partition] = tuple(chosen)
    return out


def _java_string_hash(text: str) -> int:
    """Java's ``String.hashCode`` (UTF-16 code units), as a signed 32-bit int."""
    h = 0
    data = text.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, num_partitions: int) -> int:
    """The partition of ``__consumer_offsets`` (or ``__transaction_state``) that holds a
    group's (or transactional id's) state: Kafka's ``Utils.abs(hashCode) % partitions``,
    where ``Utils.abs`` is the absolute value, except 0 for the smallest int."""
    h = _java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions
