"""Brokers and topics as the pages show them: the cluster's overview, the
topics table and one topic's partitions and configs, from the admin client's
answers.

Rules:

* An offset, size or count that the cluster did not answer is None (shown
  ``-``), never 0: a partition whose leader is out of reach has unknown
  offsets, not an empty log.
* A partition's size is its largest replica's (replicas in sync hold the same
  records); a topic's is the sum of its partitions'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping

from trafka.sdk.admin import ClusterDescription, LogDirDescription
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.metadata import PartitionInfo, TopicInfo

# -- overview and brokers ------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class BrokerRow:
    node_id: int
    host: str
    port: int
    rack: str | None
    is_controller: bool
    leaders: int
    replicas: int
    #: bytes of the partitions in its log directories; None when it did not say
    data_bytes: int | None = None
    #: free and total bytes of its log directories' file systems (DescribeLogDirs v4+)
    usable_bytes: int | None = None
    total_bytes: int | None = None
    #: log directories it reports offline
    offline_dirs: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Overview:
    cluster_id: str | None
    controller_id: int
    brokers: tuple[BrokerRow, ...]
    topics: int
    partitions: int
    under_replicated: int
    offline: int


def under_replicated(p: PartitionInfo) -> bool:
    """Whether a replica of ``p`` is out of sync."""
    return len(p.isr) < len(p.replicas)


def overview(
    cluster: ClusterDescription,
    topics: Mapping[str, TopicInfo],
    log_dirs: Iterable[LogDirDescription] = (),
) -> Overview:
    """The cluster at a glance: brokers (with the partitions each leads and holds
    and, from ``log_dirs``, their data and disk space) and the partition counts
    that need a person's attention."""
    disks: dict[int, list[LogDirDescription]] = {}
    for d in log_dirs:
        disks.setdefault(d.node_id, []).append(d)
    leaders: dict[int, int] = {}
    replicas: dict[int, int] = {}
    partitions = under = offline = 0
    for info in topics.values():
        for p in info.partitions:
            partitions += 1
            if p.leader >= 0:
                leaders[p.leader] = leaders.get(p.leader, 0) + 1
            else:
                offline += 1
            for r in p.replicas:
                replicas[r] = replicas.get(r, 0) + 1
            if under_replicated(p):
                under += 1
    rows = []
    for b in sorted(cluster.brokers, key=lambda b: b.node_id):
        dirs = disks.get(b.node_id, [])
        online = [d for d in dirs if d.error is None]
        rows.append(
            BrokerRow(
                b.node_id,
                b.host,
                b.port,
                b.rack,
                b.node_id == cluster.controller_id,
                leaders.get(b.node_id, 0),
                replicas.get(b.node_id, 0),
                sum(sum(d.partitions.values()) for d in online) if online else None,
                _sum_known([d.usable_bytes for d in online]),
                _sum_known([d.total_bytes for d in online]),
                len(dirs) - len(online),
            )
        )
    return Overview(
        cluster.cluster_id,
        cluster.controller_id,
        tuple(rows),
        len(topics),
        partitions,
        under,
        offline,
    )


def _sum_known(values: list[int | None]) -> int | None:
    """The sum, or None when any is unknown (or there are none)."""
    if not values or any(v is None for v in values):
        return None
    return sum(v for v in values if v is not None)


# -- topics --------------------------------------------------------------------------------


def partition_sizes(log_dirs: Iterable[LogDirDescription]) -> dict[TopicPartition, int]:
    """Bytes per partition: the largest replica's, from DescribeLogDirs (replicas in
    sync hold the same records; a broker that holds none reports nothing or 0)."""
    out: dict[TopicPartition, int] = {}
    for d in log_dirs:
        if d.error is not None:
            continue
        for tp, size in d.partitions.items():
            if size > out.get(tp, -1):
                out[tp] = size
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class TopicRow:
    name: str
    internal: bool
    partitions: int
    replication_factor: int
    messages: int | None
    size: int | None
    under_replicated: int


def offset_of(
    found: Mapping[TopicPartition, tuple[int, int] | None], tp: TopicPartition
) -> int | None:
    """The offset found for ``tp`` (None when it was not answered)."""
    hit = found.get(tp)
    return None if hit is None else hit[0]


def topic_rows(
    topics: Mapping[str, TopicInfo],
    starts: Mapping[TopicPartition, tuple[int, int] | None],
    ends: Mapping[TopicPartition, tuple[int, int] | None],
    sizes: Mapping[TopicPartition, int],
) -> list[TopicRow]:
    """The topics table, sorted by name. ``messages`` is the sum of high watermark
    minus log start (records deleted by compaction still count), None when some
    partition's offsets are unknown; ``size`` None when no broker reported one."""
    rows = []
    for name in sorted(topics):
        info = topics[name]
        messages: int | None = 0
        size: int | None = None
        for p in info.partitions:
            tp = TopicPartition(name, p.partition)
            start, end = offset_of(starts, tp), offset_of(ends, tp)
            if messages is not None and start is not None and end is not None:
                messages += max(end - start, 0)
            else:
                messages = None
            if tp in sizes:
                size = (size or 0) + sizes[tp]
        rows.append(
            TopicRow(
                name,
                info.is_internal,
                len(info.partitions),
                max((len(p.replicas) for p in info.partitions), default=0),
                messages,
                size,
                sum(1 for p in info.partitions if under_replicated(p)),
            )
        )
    return rows


@dataclasses.dataclass(frozen=True, slots=True)
class PartitionRow:
    partition: int
    leader: int
    leader_epoch: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    offline_replicas: tuple[int, ...]
    start_offset: int | None
    end_offset: int | None
    size: int | None

    @property
    def messages(self) -> int | None:
        if self.start_offset is None or self.end_offset is None:
            return None
        return max(self.end_offset - self.start_offset, 0)

    @property
    def under_replicated(self) -> bool:
        return len(self.isr) < len(self.replicas)


@dataclasses.dataclass(frozen=True, slots=True)
class TopicView:
    name: str
    topic_id: str
    internal: bool
    partitions: tuple[PartitionRow, ...]
    #: ``(name, value, override)``: ``override`` when the topic sets it itself,
    #: else the value comes from a default (the broker's or Kafka's).
    configs: tuple[tuple[str, str | None, bool], ...]

    @property
    def messages(self) -> int:
        return sum(p.messages or 0 for p in self.partitions)

    @property
    def size(self) -> int:
        return sum(p.size or 0 for p in self.partitions)


def topic_view(
    info: TopicInfo,
    starts: Mapping[TopicPartition, tuple[int, int] | None],
    ends: Mapping[TopicPartition, tuple[int, int] | None],
    sizes: Mapping[TopicPartition, int],
    configs: Mapping[str, str | None],
    overrides: Iterable[str] = (),
) -> TopicView:
    """One topic: a row per partition (leader, replicas, ISR, offsets, size) and
    its configs sorted by name, each marked when the topic overrides it."""
    own = set(overrides)
    rows = []
    for p in info.partitions:
        tp = TopicPartition(info.name, p.partition)
        rows.append(
            PartitionRow(
                p.partition,
                p.leader,
                p.leader_epoch,
                p.replicas,
                p.isr,
                p.offline_replicas,
                offset_of(starts, tp),
                offset_of(ends, tp),
                sizes.get(tp),
            )
        )
    return TopicView(
        info.name,
        str(info.topic_id),
        info.is_internal,
        tuple(rows),
        tuple((k, v, k in own) for k, v in sorted(configs.items())),
    )


def human_bytes(n: int | None) -> str:
    """``1.5 MiB``; ``-`` for unknown."""
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} B" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover
