"""The console's model: what the pages show, built from the admin client's answers.

Rules:

* No I/O and no clock here: every function takes what the cluster answered (the
  SDK's dataclasses and plain dicts) and ``now`` where time matters, and returns
  frozen view data that a template only lays out. The HTTP driver
  (:mod:`.app`) gathers the answers; tests build views from hand-made answers.
* What a person types is parsed here, and every refusal is an
  :class:`InputError` whose message names the field and says what is wanted;
  the driver shows it on an error page (status 400), never a traceback.
* Bytes from the cluster (keys, values, headers) are shown as a person reads
  them: ``auto`` picks JSON when the bytes parse as a JSON object or array,
  text when they are printable UTF-8, hex otherwise; ``text``, ``json`` and
  ``hex`` force one (JSON that does not parse falls back to text, text that
  is not UTF-8 to hex, and the view says which one was shown).
* Lag history is kept per group in memory, at most ``LagHistory.keep``
  samples each: the console is a window on the cluster, not a time-series
  database.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import json
import math
import re
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Literal, TypeVar

from trafka.sdk.acls import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AclResourceType,
    PatternType,
)
from trafka.sdk.admin import (
    ClusterDescription,
    GroupDescription,
    GroupListing,
    LogDirDescription,
    MemberDescription,
    ShareGroupDescription,
    ShareMemberDescription,
    SharePartitionOffsetInfo,
)
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.metadata import PartitionInfo, TopicInfo

__all__ = [
    "BrokerRow",
    "BrowseQuery",
    "DECODE_MODES",
    "GroupPartitionRow",
    "INACTIVE_STATES",
    "RESET_TARGETS",
    "ResetForm",
    "ResetRow",
    "GroupView",
    "InputError",
    "LagChart",
    "LagHistory",
    "MessageRow",
    "NewTopicForm",
    "Overview",
    "PartitionRow",
    "ConfigChange",
    "ProduceForm",
    "PurgeForm",
    "Rendered",
    "TopicRow",
    "TopicView",
    "acl_rows",
    "group_view",
    "lag_chart",
    "overview",
    "parse_acl_form",
    "merge_messages",
    "parse_browse_query",
    "plan_reads",
    "parse_new_topic_form",
    "parse_config_form",
    "parse_partition_count",
    "parse_produce_form",
    "parse_purge_form",
    "parse_refresh",
    "parse_reset_form",
    "plan_reset",
    "refuse_unless_inactive",
    "partition_sizes",
    "render_bytes",
    "share_group_view",
    "topic_rows",
    "topic_view",
]

DecodeMode = Literal["auto", "text", "json", "hex"]
DECODE_MODES: tuple[DecodeMode, ...] = ("auto", "text", "json", "hex")
#: The most messages one browser page asks for.
MAX_BROWSE = 500
#: Kafka's own limit and alphabet for topic names (``Topic.validate``).
_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")
#: Bytes shown of one key, value or header before the rest is cut (the page
#: says so); a 1 MiB value must not make a 1 MiB table cell.
SHOW_BYTES = 4096


class InputError(ValueError):
    """What a person typed cannot be used; the message says which field and why."""


# -- rendering bytes ---------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class Rendered:
    """Bytes as shown: ``kind`` is ``null``, ``text``, ``json`` or ``hex``;
    ``size`` the length of the original bytes; ``cut`` whether ``text`` shows
    only the first :data:`SHOW_BYTES` of them."""

    kind: str
    text: str
    size: int = 0
    cut: bool = False


_NULL = Rendered("null", "null")


def _printable(text: str) -> bool:
    return all(c.isprintable() or c in "\t\n\r" for c in text)


def _as_hex(data: bytes) -> Rendered:
    shown = data[:SHOW_BYTES]
    return Rendered("hex", shown.hex(" "), len(data), len(data) > SHOW_BYTES)


def render_bytes(data: bytes | None, mode: DecodeMode = "auto") -> Rendered:
    """Bytes as a person reads them (see the module rules)."""
    if data is None:
        return _NULL
    if mode == "hex":
        return _as_hex(data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return _as_hex(data)
    if mode in ("auto", "json"):
        stripped = text.lstrip()
        if mode == "json" or stripped[:1] in ("{", "["):
            try:
                parsed = json.loads(text)
            except ValueError:
                pass
            else:
                pretty = json.dumps(parsed, indent=2, ensure_ascii=False)
                return Rendered("json", pretty, len(data))
    if mode == "auto" and not _printable(text):
        return _as_hex(data)
    cut = len(data) > SHOW_BYTES
    if cut:
        text = data[:SHOW_BYTES].decode("utf-8", errors="replace")
    return Rendered("text", text, len(data), cut)


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


def _under_replicated(p: PartitionInfo) -> bool:
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
            if _under_replicated(p):
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


def _offset(
    found: Mapping[TopicPartition, tuple[int, int] | None], tp: TopicPartition
) -> int | None:
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
            start, end = _offset(starts, tp), _offset(ends, tp)
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
                sum(1 for p in info.partitions if _under_replicated(p)),
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
                _offset(starts, tp),
                _offset(ends, tp),
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


# -- groups and lag ------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class GroupPartitionRow:
    topic: str
    partition: int
    committed: int | None
    end_offset: int | None
    lag: int | None
    member_id: str | None
    client_id: str | None


@dataclasses.dataclass(frozen=True, slots=True)
class GroupView:
    group_id: str
    state: str
    group_type: str
    protocol_type: str
    protocol: str
    members: tuple[tuple[str, str | None, str, str, tuple[TopicPartition, ...]], ...]
    partitions: tuple[GroupPartitionRow, ...]

    @property
    def total_lag(self) -> int:
        return sum(r.lag or 0 for r in self.partitions)

    def lags(self) -> dict[TopicPartition, int]:
        """Lag per partition, for :class:`LagHistory` (partitions with a known lag)."""
        return {
            TopicPartition(r.topic, r.partition): r.lag
            for r in self.partitions
            if r.lag is not None
        }


def group_view(
    desc: GroupDescription,
    committed: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, tuple[int, int] | None],
) -> GroupView:
    """A consumer group: its members with their assignments, and per partition
    (committed or assigned) the committed offset, the log end and the lag,
    end minus committed (never below 0; None without a commit)."""
    owner: dict[TopicPartition, MemberDescription] = {}
    members = []
    for m in sorted(desc.members, key=lambda m: m.member_id):
        assigned = tuple(sorted(m.assignment))
        for tp in assigned:
            owner[tp] = m
        members.append((m.member_id, m.group_instance_id, m.client_id, m.client_host, assigned))
    rows = []
    for tp in sorted(set(committed) | set(owner)):
        current = committed.get(tp)
        end = _offset(ends, tp)
        holder = owner.get(tp)
        lag = None if current is None or end is None else max(end - current, 0)
        rows.append(
            GroupPartitionRow(
                tp.topic,
                tp.partition,
                current,
                end,
                lag,
                None if holder is None else holder.member_id,
                None if holder is None else holder.client_id,
            )
        )
    return GroupView(
        desc.group_id,
        desc.state,
        desc.group_type,
        desc.protocol_type,
        desc.protocol,
        tuple(members),
        tuple(rows),
    )


def share_group_view(
    desc: ShareGroupDescription,
    offsets: Mapping[TopicPartition, SharePartitionOffsetInfo | None],
    ends: Mapping[TopicPartition, tuple[int, int] | None],
) -> GroupView:
    """A share group (KIP-932): its members with their subscriptions'
    assignments (several members may share a partition), and per partition with
    share state its start offset (in ``committed``), the log end and the lag:
    the broker's count of records not yet acknowledged (KIP-1226), or end
    minus start offset from a broker that does not count them."""
    holders: dict[TopicPartition, list[ShareMemberDescription]] = {}
    members = []
    for m in sorted(desc.members, key=lambda m: m.member_id):
        assigned = tuple(sorted(m.assignment))
        for tp in assigned:
            holders.setdefault(tp, []).append(m)
        members.append((m.member_id, None, m.client_id, m.client_host, assigned))
    rows = []
    for tp in sorted(set(offsets) | set(holders)):
        info = offsets.get(tp)
        end = _offset(ends, tp)
        start = None if info is None else info.start_offset
        lag = None if info is None else info.lag
        if lag is None and start is not None and end is not None:
            lag = max(end - start, 0)
        held = holders.get(tp, [])
        rows.append(
            GroupPartitionRow(
                tp.topic,
                tp.partition,
                start,
                end,
                lag,
                ", ".join(m.member_id for m in held) or None,
                ", ".join(sorted({m.client_id for m in held})) or None,
            )
        )
    return GroupView(
        desc.group_id, desc.state, "share", "share", desc.assignor, tuple(members), tuple(rows)
    )


def group_rows(
    listings: Iterable[GroupListing], history: LagHistory
) -> list[tuple[GroupListing, int | None]]:
    """The groups table, sorted by id, each with its last sampled total lag."""
    return [(g, history.last_total(g.group_id)) for g in sorted(listings, key=lambda g: g.group_id)]


# -- resetting a group's offsets and deleting a group ---------------------------------------

#: The states in which Kafka lets a group's offsets be reset or the group be
#: deleted: no member (kafka-consumer-groups: "can only be reset if the group
#: is inactive"; DeleteGroups answers NON_EMPTY_GROUP otherwise).
INACTIVE_STATES = ("Empty", "Dead")
RESET_TARGETS = ("earliest", "latest", "timestamp", "offset")


@dataclasses.dataclass(frozen=True, slots=True)
class ResetForm:
    """A reset of a group's committed offsets, as kafka-consumer-groups
    ``--reset-offsets`` takes it: the partitions (``topic`` None: every
    partition the group has committed; ``partition`` None: all of the topic's),
    the target (``to``, with ``value`` an offset or a time in ms) and whether
    to do it (``execute``) or only show the plan (the tool's dry run)."""

    group_id: str
    topic: str | None
    partition: int | None
    to: Literal["earliest", "latest", "timestamp", "offset"]
    value: int
    execute: bool


def parse_reset_form(group_id: str, form: Mapping[str, str]) -> ResetForm:
    """The reset form: ``topic`` (empty: every committed partition),
    ``partition`` (empty: all), ``to`` (:data:`RESET_TARGETS`), ``offset`` or
    ``timestamp`` as ``to`` needs, and ``execute`` (``1``: do it)."""
    raw_topic = form.get("topic", "").strip()
    topic = _topic_name(raw_topic) if raw_topic else None
    partition = _int_field(form, "partition", "partition")
    if partition is not None and topic is None:
        raise InputError("partition: name the topic of the partition")
    to = form.get("to", "")
    if to not in RESET_TARGETS:
        raise InputError(f"to must be one of {', '.join(RESET_TARGETS)}, got {to!r}")
    value = _offset_or_time(form, to, "reset to") if to in ("offset", "timestamp") else 0
    return ResetForm(group_id, topic, partition, to, value, form.get("execute") == "1")  # type: ignore[arg-type]


def refuse_unless_inactive(group_id: str, state: str, members: int, doing: str) -> None:
    """Kafka's rule for resetting offsets and deleting a group: it must have
    no member. :class:`InputError` naming the state otherwise."""
    if state not in INACTIVE_STATES or members:
        raise InputError(
            f"{doing} only when the group {group_id!r} is inactive (no members), but its "
            f"state is {state} with {members} member{'s' if members != 1 else ''}: stop its "
            "consumers first"
        )


@dataclasses.dataclass(frozen=True, slots=True)
class ResetRow:
    topic: str
    partition: int
    current: int | None
    new: int
    note: str


def plan_reset(
    form: ResetForm,
    current: Mapping[TopicPartition, int],
    starts: Mapping[TopicPartition, int],
    ends: Mapping[TopicPartition, int],
    by_time: Mapping[TopicPartition, int | None],
) -> list[ResetRow]:
    """The new offset of each partition of ``starts`` (log start), as
    kafka-consumer-groups computes it: ``earliest`` the log start, ``latest``
    the log end; an ``offset`` outside the log is moved to its nearest end; a
    ``timestamp`` is the first offset at or after it (``by_time``), or the log
    end when no message is that recent. Each row says when it was moved."""
    rows = []
    for tp in sorted(starts):
        low, high = starts[tp], ends[tp]
        note = ""
        if form.to == "earliest":
            new = low
        elif form.to == "latest":
            new = high
        elif form.to == "offset":
            new = min(max(form.value, low), high)
            if form.value < low:
                note = f"{form.value} is below the log start: set to {low}"
            elif form.value > high:
                note = f"{form.value} is past the log end: set to {high}"
        else:
            found = by_time.get(tp)
            new = high if found is None else found
            if found is None:
                note = "no message at or after the time: set to the log end"
        rows.append(ResetRow(tp.topic, tp.partition, current.get(tp), new, note))
    return rows


@dataclasses.dataclass(frozen=True, slots=True)
class LagSample:
    at: float  # seconds since the epoch
    lags: Mapping[TopicPartition, int]

    @property
    def total(self) -> int:
        return sum(self.lags.values())


class LagHistory:
    """Lag samples per group, the newest :attr:`keep` of each, oldest first.

    Samples come from the console's periodic sampler and from every group page
    shown; two samples closer than ``min_gap`` seconds replace each other (a
    page reloaded ten times a second must not push the history out).
    """

    def __init__(self, keep: int = 360, min_gap: float = 0.5) -> None:
        if keep < 2:
            raise ValueError("keep at least two samples: a chart needs two points")
        self.keep = keep
        self.min_gap = min_gap
        self._groups: dict[str, deque[LagSample]] = {}

    def record(self, group_id: str, now: float, lags: Mapping[TopicPartition, int]) -> None:
        samples = self._groups.get(group_id)
        if samples is None:
            samples = self._groups[group_id] = deque(maxlen=self.keep)
        sample = LagSample(now, dict(lags))
        if samples and now - samples[-1].at < self.min_gap:
            samples[-1] = sample
        else:
            samples.append(sample)

    def samples(self, group_id: str) -> list[LagSample]:
        return list(self._groups.get(group_id, ()))

    def last_total(self, group_id: str) -> int | None:
        samples = self._groups.get(group_id)
        return samples[-1].total if samples else None

    def forget(self, keep_groups: Iterable[str]) -> None:
        """Drop the history of groups no longer listed."""
        keep = set(keep_groups)
        for gid in [g for g in self._groups if g not in keep]:
            del self._groups[gid]


@dataclasses.dataclass(frozen=True, slots=True)
class ChartSeries:
    label: str
    color: str
    points: str  # SVG polyline points, "x,y x,y ..."
    last: int


@dataclasses.dataclass(frozen=True, slots=True)
class LagChart:
    """An SVG line chart's geometry: the total lag and the partitions that lag
    most, over the samples' time span."""

    width: int
    height: int
    left: int
    bottom: int
    y_max: int
    y_ticks: tuple[tuple[float, str], ...]  # (y, label)
    x_labels: tuple[tuple[float, str], ...]  # (x, label)
    series: tuple[ChartSeries, ...]


_COLORS = ("#1f2937", "#2563eb", "#dc2626", "#16a34a", "#d97706", "#7c3aed", "#0891b2")


def _nice_ceiling(value: int) -> int:
    """The next 1, 2 or 5 times a power of ten at or above ``value`` (at least 1)."""
    if value <= 1:
        return 1
    power: int = 10 ** math.floor(math.log10(value))
    for step in (1, 2, 5):
        if step * power >= value:
            return step * power
    return 10 * power


def lag_chart(
    samples: Sequence[LagSample], *, width: int = 720, height: int = 220, partitions: int = 5
) -> LagChart | None:
    """The chart of ``samples`` (None with fewer than two: no line to draw). The
    total lag is the first series; the ``partitions`` partitions with the most
    lag in the last sample follow."""
    if len(samples) < 2:
        return None
    left, bottom, top, right = 56, 24, 8, 8
    plot_w, plot_h = width - left - right, height - top - bottom
    t0, t1 = samples[0].at, samples[-1].at
    span = max(t1 - t0, 1e-9)
    last = samples[-1].lags
    worst = sorted(last, key=lambda tp: (-last[tp], tp))[:partitions]
    peak = max(s.total for s in samples)
    y_max = _nice_ceiling(peak)

    def x(at: float) -> float:
        return left + (at - t0) / span * plot_w

    def y(v: int) -> float:
        return top + plot_h - v / y_max * plot_h

    def line(values: list[int]) -> str:
        return " ".join(f"{x(s.at):.1f},{y(v):.1f}" for s, v in zip(samples, values, strict=True))

    series = [ChartSeries("total", _COLORS[0], line([s.total for s in samples]), samples[-1].total)]
    for i, tp in enumerate(worst):
        values = [s.lags.get(tp, 0) for s in samples]
        series.append(
            ChartSeries(
                f"{tp.topic}-{tp.partition}",
                _COLORS[1 + i % (len(_COLORS) - 1)],
                line(values),
                values[-1],
            )
        )
    y_ticks = tuple((y(v), f"{v:,}") for v in sorted({0, y_max // 2, y_max}))
    x_labels = tuple(
        (x(at), dt.datetime.fromtimestamp(at, dt.UTC).strftime("%H:%M:%S")) for at in (t0, t1)
    )
    return LagChart(width, height, left, bottom, y_max, y_ticks, x_labels, tuple(series))


def parse_refresh(raw: str) -> int | None:
    """A page's ``refresh`` (seconds between reloads, 2 to 3600; empty: none)."""
    value = _int_field({"refresh": raw}, "refresh", "refresh", minimum=2)
    if value is not None and value > 3600:
        raise InputError(f"refresh must be at most 3600 seconds, got {value}")
    return value


# -- message browser -----------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, slots=True)
class BrowseQuery:
    """Where to read: ``start`` is ``beginning``, ``end`` (the last ``count``
    messages), ``offset`` (``value`` is one) or ``timestamp`` (``value`` in ms)."""

    topic: str
    partition: int | None  # None: every partition
    start: Literal["beginning", "end", "offset", "timestamp"]
    value: int
    count: int
    decode: DecodeMode


def _int_field(form: Mapping[str, str], name: str, label: str, *, minimum: int = 0) -> int | None:
    raw = form.get(name, "").strip()
    if not raw:
        return None
    try:
        value = int(raw)
    except ValueError:
        raise InputError(f"{label} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise InputError(f"{label} must be at least {minimum}, got {value}")
    return value


def parse_timestamp(text: str) -> int:
    """Milliseconds since the epoch from a number of ms or an ISO 8601 date-time
    (UTC when it names no zone)."""
    text = text.strip()
    if re.fullmatch(r"\d+", text):
        return int(text)
    try:
        when = dt.datetime.fromisoformat(text)
    except ValueError:
        raise InputError(
            f"timestamp must be milliseconds or an ISO date-time (2024-05-01T12:00:00), got {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=dt.UTC)
    ms = int(when.timestamp() * 1000)
    if ms < 0:
        raise InputError(f"timestamp must be after 1970, got {text!r}")
    return ms


def _offset_or_time(form: Mapping[str, str], kind: str, doing: str) -> int:
    """The form's ``offset`` (``kind`` "offset") or ``timestamp`` in ms, required."""
    if kind == "offset":
        offset = _int_field(form, "offset", "offset")
        if offset is None:
            raise InputError(f"offset: give the offset to {doing}")
        return offset
    raw = form.get("timestamp", "").strip()
    if not raw:
        raise InputError(f"timestamp: give the time to {doing}")
    return parse_timestamp(raw)


def parse_browse_query(topic: str, form: Mapping[str, str]) -> BrowseQuery:
    """The message browser's query string: ``partition`` (empty or ``all``,
    the default: every partition), ``start``
    (``beginning``, ``end``, ``offset``, ``timestamp``; default ``end``),
    ``offset``, ``timestamp``, ``count`` (1 to :data:`MAX_BROWSE`, default 20)
    and ``decode`` (:data:`DECODE_MODES`)."""
    partition = (
        None
        if form.get("partition", "").strip().lower() in ("", "all")
        else _int_field(form, "partition", "partition")
    )
    count = _int_field(form, "count", "count", minimum=1) or 20
    if count > MAX_BROWSE:
        raise InputError(f"count must be at most {MAX_BROWSE}, got {count}")
    decode = form.get("decode", "auto") or "auto"
    if decode not in DECODE_MODES:
        raise InputError(f"decode must be one of {', '.join(DECODE_MODES)}, got {decode!r}")
    start = form.get("start", "") or ("offset" if form.get("offset", "").strip() else "end")
    value = 0
    if start in ("offset", "timestamp"):
        value = _offset_or_time(form, start, "start at")
    elif start not in ("beginning", "end"):
        raise InputError(f"start must be beginning, end, offset or timestamp, got {start!r}")
    return BrowseQuery(topic, partition, start, value, count, decode)  # type: ignore[arg-type]


def plan_reads(
    q: BrowseQuery,
    lows: Mapping[int, int],
    highs: Mapping[int, int],
    by_time: Mapping[int, int | None],
) -> tuple[dict[int, int], list[str]]:
    """Where to start reading each partition (``lows``/``highs``: log start and
    high watermark per partition; ``by_time``: the first offset at or after
    ``q.value`` for a timestamp query, None past the end). Partitions with
    nothing to read from their start are left out. Returns the starts and
    notes for the person (an offset outside a log is clamped, and said so)."""
    starts: dict[int, int] = {}
    notes = []
    for p in sorted(highs):
        low, high = lows.get(p, 0), highs[p]
        if q.start == "beginning":
            start = low
        elif q.start == "end":
            start = max(high - q.count, low)
        elif q.start == "offset":
            start = min(max(q.value, low), high)
            # Said of a partition read, or the one asked for; not of every
            # empty partition of a topic browsed whole.
            if start != q.value and (start < high or len(highs) == 1):
                notes.append(
                    f"partition {p}: offset {q.value} is outside the log ({low} to {high}); "
                    f"read from {start}"
                )
        else:
            hit = by_time.get(p)
            start = high if hit is None else hit
        if start < high:
            starts[p] = start
    if q.start == "timestamp" and not starts:
        notes.append("no message at or after that time")
    return starts, notes


def merge_messages(
    rows: Iterable[MessageRow], start: str, count: int, *, partitions: int
) -> list[MessageRow]:
    """One page of messages read from ``partitions`` partitions: one partition's
    in offset order; several by time (then partition, offset). Read from the
    end, the newest ``count``, newest first (a person asking for the newest
    looks at the top); else the first ``count``, oldest first."""
    if partitions == 1:
        ordered = sorted(rows, key=lambda r: r.offset)
    else:
        ordered = sorted(rows, key=lambda r: (r.timestamp_ms, r.partition, r.offset))
    if start == "end":
        return ordered[::-1][:count]
    return ordered[:count]


@dataclasses.dataclass(frozen=True, slots=True)
class MessageRow:
    partition: int
    offset: int
    timestamp_ms: int
    timestamp: str
    key: Rendered
    value: Rendered
    headers: tuple[tuple[str, Rendered], ...]


def format_timestamp(ms: int) -> str:
    if ms < 0:
        return "-"
    return (
        dt.datetime.fromtimestamp(ms / 1000, dt.UTC)
        .isoformat(timespec="milliseconds")
        .replace("+00:00", "Z")
    )


def message_row(
    partition: int,
    offset: int,
    timestamp: int,
    key: bytes | None,
    value: bytes | None,
    headers: Iterable[tuple[str, bytes | None]],
    mode: DecodeMode,
) -> MessageRow:
    return MessageRow(
        partition,
        offset,
        timestamp,
        format_timestamp(timestamp),
        render_bytes(key, mode),
        render_bytes(value, mode),
        tuple((name, render_bytes(v, mode)) for name, v in headers),
    )


# -- forms ---------------------------------------------------------------------------------


def _topic_name(raw: str) -> str:
    name = raw.strip()
    if not name:
        raise InputError("topic: give a name")
    if name in (".", "..") or not _TOPIC_NAME.fullmatch(name):
        raise InputError(
            f"topic: {name!r} is not a valid name (letters, digits, '.', '_', '-'; "
            "at most 249 characters)"
        )
    return name


def _pairs(text: str, what: str) -> list[tuple[str, str]]:
    """``name=value`` (or ``name: value``) lines; blank lines skipped."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        sep = "=" if "=" in line else ":" if ":" in line else None
        if sep is None:
            raise InputError(f"{what}, line {n}: write name=value, got {line!r}")
        name, _, value = line.partition(sep)
        if not name.strip():
            raise InputError(f"{what}, line {n}: the name is empty")
        out.append((name.strip(), value.strip()))
    return out


@dataclasses.dataclass(frozen=True, slots=True)
class NewTopicForm:
    name: str
    partitions: int
    replication_factor: int
    configs: Mapping[str, str]


def parse_new_topic_form(form: Mapping[str, str]) -> NewTopicForm:
    """The create-topic form: name, partitions and replication factor (blank: the
    broker's default, -1) and configs as ``name=value`` lines."""
    name = _topic_name(form.get("name", ""))
    partitions = _int_field(form, "partitions", "partitions", minimum=1)
    factor = _int_field(form, "replication_factor", "replication factor", minimum=1)
    configs = dict(_pairs(form.get("configs", ""), "configs"))
    return NewTopicForm(
        name, -1 if partitions is None else partitions, -1 if factor is None else factor, configs
    )


@dataclasses.dataclass(frozen=True, slots=True)
class ProduceForm:
    topic: str
    partition: int | None
    key: bytes | None
    value: bytes
    headers: tuple[tuple[str, bytes], ...]


def parse_produce_form(topic: str, form: Mapping[str, str]) -> ProduceForm:
    """The produce form: partition (blank: the partitioner's choice), key (blank:
    null), value, headers as ``name=value`` lines. Text is sent as UTF-8."""
    partition = _int_field(form, "partition", "partition")
    key = form.get("key", "")
    headers = tuple((n, v.encode()) for n, v in _pairs(form.get("headers", ""), "headers"))
    return ProduceForm(
        _topic_name(topic),
        partition,
        key.encode() if key else None,
        form.get("value", "").encode(),
        headers,
    )


_E = TypeVar("_E", bound=enum.IntEnum)


@dataclasses.dataclass(frozen=True, slots=True)
class ConfigChange:
    """A change of a topic's configs: values to set, and names to reset to
    their default (the override removed)."""

    topic: str
    changes: dict[str, str | None]


def parse_config_form(topic: str, form: Mapping[str, str], resets: Iterable[str]) -> ConfigChange:
    """The configs form: ``set`` as ``name=value`` lines, and the names to reset
    (``resets``, the checked boxes). A name both set and reset is refused."""
    changes: dict[str, str | None] = dict(_pairs(form.get("set", ""), "set"))
    for name in resets:
        name = name.strip()
        if not name:
            continue
        if name in changes:
            raise InputError(f"{name}: set and reset at once; pick one")
        changes[name] = None
    if not changes:
        raise InputError("set: give name=value lines, or tick configs to reset")
    return ConfigChange(topic, changes)


def parse_partition_count(topic: str, form: Mapping[str, str], now: int) -> int:
    """The new partition count of the add-partitions form: more than ``now``
    (Kafka adds partitions and never removes them)."""
    count = _int_field(form, "count", "count", minimum=1)
    if count is None:
        raise InputError("count: give the new number of partitions")
    if count <= now:
        raise InputError(
            f"count: {topic!r} has {now} partition{'s' if now != 1 else ''}; give more "
            "(Kafka cannot remove partitions)"
        )
    return count


@dataclasses.dataclass(frozen=True, slots=True)
class PurgeForm:
    """Delete the records of a topic (DeleteRecords): of one partition or all,
    before an offset (None: the high watermark, everything)."""

    topic: str
    partition: int | None
    before: int | None


def parse_purge_form(topic: str, form: Mapping[str, str]) -> PurgeForm:
    """The purge form: ``confirm`` must repeat the topic's name; ``partition``
    (empty: every one) and ``before`` (empty: everything)."""
    if form.get("confirm", "").strip() != topic:
        raise InputError(f"confirm: type the topic's name ({topic}) to delete its records")
    partition = _int_field(form, "partition", "partition")
    before = _int_field(form, "before", "before")
    return PurgeForm(topic, partition, before)


def _enum_choice(raw: str, label: str, allowed: tuple[_E, ...]) -> _E:
    wanted = raw.strip().upper()
    for value in allowed:
        if value.name == wanted:
            return value
    names = ", ".join(e.name.lower() for e in allowed)
    raise InputError(f"{label} must be one of {names}, got {raw!r}")


#: What the ACL form offers (the values a binding may hold, not a filter's).
ACL_RESOURCE_TYPES = tuple(t for t in AclResourceType if t > AclResourceType.ANY)
ACL_PATTERN_TYPES = (PatternType.LITERAL, PatternType.PREFIXED)
ACL_OPERATIONS = tuple(o for o in AclOperation if o > AclOperation.ANY)
ACL_PERMISSIONS = (AclPermissionType.ALLOW, AclPermissionType.DENY)


def parse_acl_form(form: Mapping[str, str]) -> AclBinding:
    """An ACL binding from the ACL form (or a row's delete button, which sends the
    same fields). The principal must be ``Type:name`` (``User:alice``)."""
    resource_type = _enum_choice(form.get("resource_type", ""), "resource type", ACL_RESOURCE_TYPES)
    pattern = _enum_choice(form.get("pattern_type", "literal"), "pattern type", ACL_PATTERN_TYPES)
    operation = _enum_choice(form.get("operation", ""), "operation", ACL_OPERATIONS)
    permission = _enum_choice(form.get("permission", "allow"), "permission", ACL_PERMISSIONS)
    name = form.get("name", "").strip()
    if resource_type == AclResourceType.CLUSTER:
        name = name or "kafka-cluster"
    if not name:
        raise InputError("resource name: give a name (or * for every resource)")
    principal = form.get("principal", "").strip()
    kind, sep, who = principal.partition(":")
    if not sep or not kind or not who:
        raise InputError(f"principal must be Type:name, e.g. User:alice, got {principal!r}")
    host = form.get("host", "").strip() or "*"
    return AclBinding(resource_type, name, pattern, principal, host, operation, permission)


def acl_rows(bindings: Iterable[AclBinding]) -> list[AclBinding]:
    """ACLs in a stable order: by resource, then principal, operation, permission."""
    return sorted(
        bindings,
        key=lambda b: (
            int(b.resource_type),
            b.name,
            int(b.pattern_type),
            b.principal,
            b.host,
            int(b.operation),
            int(b.permission),
        ),
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
