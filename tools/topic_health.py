"""Which partitions ``trafka topics describe``'s report options list: kafka-topics'
``--under-replicated-partitions``, ``--unavailable-partitions``,
``--under-min-isr-partitions`` and ``--at-min-isr-partitions``.

Rules (those of Kafka's own ``kafka-topics.sh --describe``, TopicCommand's
partition description; pure, no I/O):

* **under-replicated**: fewer in-sync replicas than the replication factor. The
  replication factor of a partition whose replicas are being moved
  (ListPartitionReassignments, KIP-455) leaves out the replicas being added: a
  copy still on its way is not a missing one.
* **unavailable**: no leader, or a leader that is not among the brokers the
  cluster describes as alive (DescribeCluster).
* **under-min-isr**: no leader, or fewer in-sync replicas than the topic's
  ``min.insync.replicas`` (its effective value: an override, else the broker's).
* **at-min-isr**: exactly ``min.insync.replicas`` in-sync replicas; one more
  replica lost and acks=all writes are refused.
* A partition is listed when any of the asked reports matches it. With a report
  asked for, the topics' header lines (partition count, configs) are not
  printed, as kafka-topics does.
* A topic whose ``min.insync.replicas`` is not known (a broker that does not
  describe it) matches neither min-ISR report rather than a guess; the command
  says so on stderr.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["REPORTS", "PartitionState", "min_isr_of", "reports_matching"]

#: The report names, as the command's options and the JSON's ``reports`` spell them.
REPORTS = ("under-replicated", "unavailable", "under-min-isr", "at-min-isr")


@dataclass(frozen=True, slots=True)
class PartitionState:
    """What the rules read of one partition.

    Attributes:
        leader: the leader's broker id; -1 (or below) for none.
        replicas: every replica, as DescribeTopics / Metadata lists them.
        isr: the in-sync replicas.
        adding: replicas a reassignment is adding (not yet part of the factor).
    """

    leader: int
    replicas: Sequence[int]
    isr: Sequence[int]
    adding: Collection[int] = ()


def reports_matching(
    state: PartitionState,
    *,
    live_brokers: Collection[int],
    min_isr: int | None,
    asked: Iterable[str] = REPORTS,
) -> list[str]:
    """The reports among ``asked`` that list this partition, in :data:`REPORTS` order.

    Args:
        state: the partition.
        live_brokers: the broker ids the cluster describes.
        min_isr: the topic's effective ``min.insync.replicas``; None when unknown.
        asked: report names (see :data:`REPORTS`).

    Raises:
        ValueError: an unknown report name.
    """
    wanted = set(asked)
    unknown = wanted.difference(REPORTS)
    if unknown:
        raise ValueError(f"unknown report(s): {', '.join(sorted(unknown))}")
    has_leader = state.leader >= 0
    factor = len([r for r in state.replicas if r not in set(state.adding)])
    in_sync = len(state.isr)
    found = {
        "under-replicated": factor - in_sync > 0,
        "unavailable": not has_leader or state.leader not in live_brokers,
        "under-min-isr": not has_leader or (min_isr is not None and in_sync < min_isr),
        "at-min-isr": min_isr is not None and in_sync == min_isr,
    }
    return [name for name in REPORTS if name in wanted and found[name]]


def min_isr_of(configs: Mapping[str, str | None]) -> int | None:
    """A topic's ``min.insync.replicas`` from its described configs; None if absent
    or not a number."""
    value = configs.get("min.insync.replicas")
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None
