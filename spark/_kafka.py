"""The Kafka side of the data source: planning offsets, reading ranges, writing rows.

No pyspark here; Spark calls it from synchronous code. How each part runs:

* Reading a range (executors): :mod:`._wire`'s blocking reader, kept between
  tasks in :data:`READERS` (the pooled async consumer, :data:`POOL`, for
  OAUTHBEARER). Records go to Spark chunk by chunk, as they arrive, each a
  :class:`~trafka.codec.columns.RecordColumns` (Arrow's layout, decoded in C
  without a Python object per record).
* Planning (driver): trafka's admin client and consumer on the process's
  shared daemon loop thread, kept open between a stream's triggers, and
  between batch reads in the pool :data:`PLANNERS` (:class:`Planner`).
* Writing a task's rows: the async producer on a private loop (``anyio.run``).

Offsets cross as ``{topic: {partition: offset}}`` (partition a string key in JSON,
as Spark's connector), so that Spark can checkpoint them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import logging
import math
import re
import time
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import anyio

from ..codec.columns import ColumnBuffers, RecordColumns
from ..sdk.config import AdminConfig, ClientConfig, ConsumerConfig
from ..sdk.errors import (
    AuthenticationError,
    ConfigError,
    ErrorCode,
    KafkaConnectionError,
    KafkaError,
    TrafkaError,
)
from ..sdk.fetcher import ConsumerRecord, OffsetOutOfRangeError, TopicPartition
from ._pools import POOL, PRODUCERS, READERS, ClientPool, Loop, open_consumer, shared_loop
from ._watch import wait_for_records
from ._wire import reader_settings
from ._wire import supported as _wire_supported
from .options import EARLIEST, LATEST, OffsetSpec, ReadOptions, WriteOptions

if TYPE_CHECKING:
    from ..sdk.admin import Admin
    from ..sdk.consumer import Consumer
    from ..sdk.producer import Producer, RecordFuture

__all__ = [
    "pin_bootstrap",
    "COLUMNS",
    "POOL",
    "READERS",
    "PRODUCERS",
    "PLANNERS",
    "Planner",
    "DataLossError",
    "OffsetRange",
    "Offsets",
    "latest_offsets",
    "nothing_new",
    "backlog",
    "batch_offsets",
    "limit_offsets",
    "offsets_behind_latest",
    "merge_ranges",
    "plan_ranges",
    "read_range",
    "reader_config",
    "starting_offsets",
    "write_columns",
]

Offsets = dict[str, dict[str, int]]
"""``{topic: {partition (as str): offset}}``: JSON-ready, as Spark checkpoints it."""

_log = logging.getLogger(__name__)

# Records per chunk handed to Spark (one Arrow batch each). A chunk never holds
# more than one fetch's bytes, so this mostly decides how a fetch of small
# records is cut: Spark's cost per row was the same for batches of 2,000 to
# 50,000 rows, a task's own cost per chunk is not (1,000,000 records of 100
# bytes: 0.29-0.31 CPU seconds for the reader in chunks of 50,000, 0.38-0.41 in
# chunks of 5,000).
_CHUNK = 50_000

# A reader's max.partition.fetch.bytes unless the read sets it: a task reads
# one partition at a time, so one fetch may carry much more than the Java
# consumer's 1 MiB default (which spreads a fetch over many partitions). Fewer,
# larger fetches cost the broker and the task less per record: 1,000,000
# records of 100 bytes took the broker about 0.14 CPU seconds to serve in 1 MiB
# fetches, 0.05 in 8 MiB ones. It bounds what a range's last fetch brings past
# the range's end (dropped) too.
_READER_PARTITION_FETCH_BYTES = 8 << 20


class DataLossError(TrafkaError):
    """Records a read planned to return are gone (``failOnDataLoss=true``)."""


class PlanningError(TrafkaError):
    """What the options ask for cannot be planned (a topic, a partition or a
    timestamp's record that is not there): not retried."""


@dataclass(frozen=True, slots=True)
class OffsetRange:
    """Offsets ``[start, end)`` of one partition: the work of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int


def _admin_config(consumer: ConsumerConfig) -> AdminConfig:
    """The read's settings for its admin client: the shared ones, and
    ``default.api.timeout.ms`` (Spark hands its admin client every ``kafka.*``
    setting: a broker that is down fails a query's lookups within it)."""
    shared = {f.name: getattr(consumer, f.name) for f in dataclasses.fields(ClientConfig)}
    return AdminConfig(**shared, default_api_timeout_ms=consumer.default_api_timeout_ms)


def _open_admin(consumer: ConsumerConfig) -> contextlib.AbstractAsyncContextManager[Admin]:
    """The planning's admin client. Imported here, on first use: only the
    driver plans, and the executors' workers that read and write (which import
    this module too) would otherwise each load the whole admin client."""
    from ..sdk.admin import open_admin

    return open_admin(_admin_config(consumer))


def _to_offsets(values: Mapping[TopicPartition, int]) -> Offsets:
    out: Offsets = {}
    for tp in sorted(values):
        out.setdefault(tp.topic, {})[str(tp.partition)] = values[tp]
    return out


def _from_offsets(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartition, int]:
    return {
        TopicPartition(topic, int(p)): int(o)
        for topic, parts in offsets.items()
        for p, o in parts.items()
    }


async def _partition_counts(opts: ReadOptions, admin: Admin) -> dict[str, int]:
    """Each readable topic's partition count, one Metadata request: of the named
    topics only (the cost does not grow with the cluster), every topic for a pattern."""
    if opts.pattern is not None:
        return await admin.list_topics()
    names = sorted({t for t, _ in opts.assigned} if opts.assigned else set(opts.topics))
    try:
        described = await admin.describe_topics(names)
    except KafkaError as exc:
        if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            raise
        return await admin.list_topics(include_internal=True)
    return {name: len(info.partitions) for name, info in described.items()}


async def _partitions(opts: ReadOptions, admin: Admin) -> list[TopicPartition]:
    counts = await _partition_counts(opts, admin)
    if opts.assigned:
        wanted = [TopicPartition(t, p) for t, p in opts.assigned]
        missing = [tp for tp in wanted if tp.partition >= counts.get(tp.topic, 0)]
        if missing:
            names = ", ".join(f"{tp.topic}-{tp.partition}" for tp in missing)
            raise PlanningError(f"assigned partitions do not exist: {names}")
        return wanted
    if opts.pattern is not None:
        regex = re.compile(opts.pattern)
        topics = sorted(t for t in counts if regex.fullmatch(t))
    else:
        unknown = [t for t in opts.topics if t not in counts]
        if unknown:
            raise PlanningError(f"topics do not exist: {', '.join(unknown)}")
        topics = list(opts.topics)
    return [TopicPartition(t, p) for t in topics for p in range(counts[t])]


def _split(
    spec: OffsetSpec, tps: Sequence[TopicPartition]
) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
    """A spec's partitions: ``(by timestamp, by offset or EARLIEST/LATEST)``."""
    by_time: dict[TopicPartition, int] = {}
    wanted: dict[TopicPartition, int] = {}
    for tp in tps:
        key = (tp.topic, tp.partition)
        ts = spec.timestamp if spec.timestamp is not None else spec.timestamps.get(key)
        if ts is not None:
            by_time[tp] = ts
        else:
            wanted[tp] = spec.per_partition.get(key, spec.default)
    return by_time, wanted


async def _resolve(
    consumer: Consumer, spec: OffsetSpec, tps: Sequence[TopicPartition]
) -> dict[TopicPartition, int]:
    """Turn a spec into offsets (see :class:`OffsetSpec` for the precedence)."""
    by_time, wanted = _split(spec, tps)
    out = {tp: o for tp, o in wanted.items() if o >= 0}
    # The partitions that end where their log ends: asked for in one request, and
    # only when there are any (a batch read's start from earliest needs none).
    at_end = [tp for tp, o in wanted.items() if o == LATEST]
    if by_time:
        found = await consumer.offsets_for_times(by_time)
        for tp in by_time:
            hit = found.get(tp)
            if hit is None and not spec.no_match_latest:
                raise PlanningError(
                    f"no record of {tp.topic}-{tp.partition} has a timestamp at or after "
                    f"{by_time[tp]}; set startingOffsetsByTimestampStrategy=latest to start such "
                    "partitions at their end"
                )
            if hit is not None:
                out[tp] = hit[0]
            else:
                at_end.append(tp)
    earliest = [tp for tp, o in wanted.items() if o == EARLIEST]
    if earliest:
        out.update(await consumer.beginning_offsets(earliest))
    if at_end:
        ends = await consumer.end_offsets(at_end)
        out.update((tp, ends[tp]) for tp in at_end)
    return out


def _run(fn: Any, *args: Any) -> Any:
    return anyio.run(partial(fn, *args), backend="trio")


@contextlib.asynccontextmanager
async def _planning_clients(config: ConsumerConfig) -> AsyncIterator[tuple[Admin, Consumer]]:
    async with (
        _open_admin(config) as admin,
        open_consumer(config) as consumer,
    ):
        yield admin, consumer


PLANNERS = ClientPool(_planning_clients, capacity=4, close_at_exit=True)
"""The driver's planning clients (an admin client and a consumer) kept between
batch reads in one process, keyed by :func:`~._wire.reader_settings` (the
cluster, security and client settings, not the query's group id), as Spark's
connector keeps its admin client: a query then asks its questions over open
connections. They hold no answer between queries: each query asks for its
partitions and offsets again (see :class:`Planner`)."""


class Planner:
    """The driver's admin client and consumer for planning offsets.

    ``keep=False`` (a batch read: planned once) leases them from
    :data:`PLANNERS` for each call and gives them back (closed instead after a
    failure other than a :class:`PlanningError`: their state is unknown), so
    the queries of a session reuse their connections; every call asks the
    brokers for the read's partitions (Metadata) and offsets again, so a topic
    created, grown or deleted before a query is seen by it. ``keep=True`` (a
    stream: asked at every trigger) opens them at the first call on the
    process's shared loop and keeps them, with their connections, until
    :meth:`close`; an idle stream then asks its brokers over the same
    connections at every trigger instead of opening new ones.

    Every call lists the read's partitions (one Metadata request), as Spark's
    connector does per trigger: new partitions and matching topics are in the
    next trigger. Under ``partitionDiscovery=metadataMaxAge`` a kept planner
    keeps them for ``metadata.max.age.ms`` and until a failed lookup
    (:meth:`forget_partitions`), saving that request (docs/spark.md).

    Args:
        clock: monotonic seconds, of any origin (for the partitions' age).
    """

    def __init__(
        self,
        opts: ReadOptions,
        *,
        keep: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.opts = opts
        self.keep = keep
        self.clock = clock
        self._clients: tuple[Admin, Consumer] | None = None
        self._exits: list[Any] = []
        self._loop: Loop | None = None
        # The client whose connections only carry the waits (see :mod:`._watch`):
        # (the client, its exit, its loop).
        self._watcher: tuple[Consumer, Any, Loop] | None = None
        # The read's partitions and when asked (partitionDiscovery=metadataMaxAge).
        self._known: tuple[float, list[TopicPartition]] | None = None
        self.metadata_requests = 0  # partition lists asked for (for tests)

    async def partitions(self, admin: Admin) -> list[TopicPartition]:
        """The read's partitions: asked now, or kept (see the class doc)."""
        now = self.clock()
        if self._known is not None:
            max_age = self.opts.consumer_config().metadata_max_age_ms / 1000
            if now - self._known[0] < max_age:
                return list(self._known[1])
        self.metadata_requests += 1
        tps = await _partitions(self.opts, admin)
        if self.keep and not self.opts.partitions_every_trigger:
            self._known = (now, tps)
        return list(tps)

    def forget_partitions(self) -> bool:
        """Drop the kept partitions (the next :meth:`partitions` asks); were there any?"""
        known, self._known = self._known, None
        return known is not None

    def call(self, fn: Any) -> Any:
        """``await fn(admin, consumer)``, tried again as ``fetchOffset.numRetries`` says."""
        if not self.keep:
            return _retried(self.opts, partial(self._call_pooled, fn))
        return _retried(self.opts, partial(self._call_kept, fn))

    def _call_pooled(self, fn: Any) -> Any:
        with PLANNERS.lease(reader_settings(self.opts.consumer_config())) as entry:
            try:
                return entry.loop.call(fn, *entry.client)
            except PlanningError as exc:
                refused = exc  # the options' fault, not the clients': they go back
        raise refused

    def _call_kept(self, fn: Any) -> Any:
        try:
            return self._kept(fn)
        except TrafkaError:
            self.close()  # a client in an unknown state is not kept
            self.forget_partitions()
            raise

    def _kept(self, fn: Any) -> Any:
        loop = shared_loop()
        if self._clients is None or self._loop is not loop:
            self.close()
            config = self.opts.consumer_config()
            # Each client's block runs in a task of its own on the loop (trio's
            # task groups must be left by the task that entered them).
            try:
                admin, exit_admin = loop.enter(_open_admin(config))
                self._exits = [exit_admin]
                consumer, exit_consumer = loop.enter(open_consumer(config))
                self._exits.insert(0, exit_consumer)
            except BaseException:
                self.close()
                raise
            self._clients = (admin, consumer)
            self._loop = loop
        return loop.call(fn, *self._clients)

    def wait(self, at: Offsets) -> bool:
        """Wait up to ``latestOffsetWaitMs`` for a record past ``at`` (a kept
        planner only; see :mod:`._watch`): whether to ask for the latest
        offsets again (False: every leader said nothing came). A failure ends
        the wait: the lookup that follows meets it."""
        wait_ms = self.opts.latest_offset_wait_ms
        if not self.keep or wait_ms <= 0 or not at:
            return False
        loop = shared_loop()
        try:
            if self._watcher is None or self._watcher[2] is not loop:
                self._close_watcher()
                config = self.opts.consumer_config()
                self._watcher = (*loop.enter(open_consumer(config)), loop)
            watcher = self._watcher[0]
            news: bool = loop.call(
                wait_for_records, watcher, _from_offsets(at), wait_ms, watcher.config.read_committed
            )
            return news
        except TrafkaError as exc:
            _log.debug("waiting for records failed: %s", exc)
            self._close_watcher()
            return True

    def _close_watcher(self) -> None:
        watcher, self._watcher = self._watcher, None
        if watcher is not None:
            with contextlib.suppress(Exception):
                watcher[1](None, None, None)

    def close(self) -> None:
        """Close the kept clients (their connections)."""
        self._close_watcher()
        exits, self._exits, self._clients = self._exits, [], None
        for exit_ in exits:
            with contextlib.suppress(Exception):
                exit_(None, None, None)


def _retried(opts: ReadOptions, attempt: Any) -> Any:
    """``attempt()``, tried again ``fetchOffset.numRetries`` times
    ``fetchOffset.retryIntervalMs`` apart when it fails with what may pass (a
    broker down, a timeout), as Spark fetches offsets."""
    for tries in itertools.count():
        try:
            return attempt()
        except (ConfigError, PlanningError, DataLossError, AuthenticationError):
            raise
        except TrafkaError:
            if tries >= opts.fetch_offset_retries:
                raise
            time.sleep(opts.fetch_offset_retry_interval_ms / 1000)
    raise AssertionError("unreachable")  # pragma: no cover


def starting_offsets(opts: ReadOptions, planner: Planner | None = None) -> Offsets:
    """The offsets a read starts at (batch, or a new stream)."""

    planner = planner or Planner(opts)

    async def go(admin: Admin, consumer: Consumer) -> Offsets:
        tps = await planner.partitions(admin)
        return _to_offsets(await _resolve(consumer, opts.starting, tps))

    result: Offsets = planner.call(go)
    return result


def batch_offsets(opts: ReadOptions) -> tuple[Offsets, Offsets]:
    """The offsets a batch read starts and ends at, asked over one set of connections."""

    async def go(admin: Admin, consumer: Consumer) -> tuple[Offsets, Offsets]:
        tps = await _partitions(opts, admin)
        by_start_time, start = _split(opts.starting, tps)
        by_end_time, end = _split(opts.ending, tps)
        if by_start_time or by_end_time:
            first = _to_offsets(await _resolve(consumer, opts.starting, tps))
            return first, _to_offsets(await _resolve(consumer, opts.ending, tps))
        # The starts' and the ends' lookups in one round trip per leader, the
        # starts' answered first (as they would be one after the other).
        lookups = (start, end)
        earliest = [tp for offsets in lookups for tp, o in offsets.items() if o == EARLIEST]
        latest = [tp for offsets in lookups for tp, o in offsets.items() if o == LATEST]
        firsts, ends = (
            await consumer.offset_bounds(earliest, latest) if earliest or latest else ({}, {})
        )
        found = {EARLIEST: firsts, LATEST: ends}
        start, end = (
            {tp: found[o][tp] if o in found else o for tp, o in offsets.items()}
            for offsets in lookups
        )
        return _to_offsets(start), _to_offsets(end)

    result: tuple[Offsets, Offsets] = Planner(opts).call(go)
    return result


def latest_offsets(
    opts: ReadOptions, since: Offsets | None = None, planner: Planner | None = None
) -> Offsets:
    """The offsets a batch read ends at (``endingOffsets``), or the stream's newest.

    For a stream (``since`` given), partitions that appeared after ``since``
    start at their earliest offset, so nothing written to them is skipped.
    """

    planner = planner or Planner(opts)

    async def go(admin: Admin, consumer: Consumer) -> Offsets:
        tps = await planner.partitions(admin)
        if since is None:
            return _to_offsets(await _resolve(consumer, opts.ending, tps))
        try:
            ends = await consumer.end_offsets(tps) if tps else {}
        except TrafkaError:
            if not planner.forget_partitions():
                raise
            # The kept partitions may be stale (a topic deleted, or recreated
            # with fewer partitions): asked again, once, before failing.
            tps = await planner.partitions(admin)
            ends = await consumer.end_offsets(tps) if tps else {}
        return _to_offsets(ends)

    result: Offsets = planner.call(go)
    return result


def new_partitions(
    opts: ReadOptions, since: Offsets, latest: Offsets, planner: Planner | None = None
) -> Offsets:
    """``since`` plus the earliest offsets of partitions it does not know yet."""
    known = _from_offsets(since)
    fresh = [tp for tp in _from_offsets(latest) if tp not in known]
    if not fresh:
        return since

    async def go(admin: Admin, consumer: Consumer) -> dict[TopicPartition, int]:
        return await consumer.beginning_offsets(fresh)

    merged = dict(known)
    merged.update((planner or Planner(opts)).call(go))
    return _to_offsets(merged)


def nothing_new(start: Offsets, latest: Offsets) -> bool:
    """Whether ``latest`` has no partition past its offset in ``start``, and
    none that ``start`` does not know."""
    begin = _from_offsets(start)
    return all(tp in begin and o <= begin[tp] for tp, o in _from_offsets(latest).items())


def backlog(start: Offsets, latest: Offsets) -> int:
    """How many offsets lie between ``start`` and ``latest``, in all."""
    begin = _from_offsets(start)
    return sum(max(0, o - begin.get(tp, o)) for tp, o in _from_offsets(latest).items())


def offsets_behind_latest(progress: Mapping[str, Any]) -> dict[str, str]:
    """The metrics Spark's Kafka source adds to a stream's progress, from the
    progress of a ``trafka`` stream: how far each partition's latest offset is
    past what the micro-batch read (``avgOffsetsBehindLatest``,
    ``maxOffsetsBehindLatest``, ``minOffsetsBehindLatest``, as strings).

    Args:
        progress: ``query.lastProgress`` (its first source), or one entry of its
            ``sources``.

    Returns:
        The three metrics, or an empty dict before the source reported offsets.
    """
    source = progress["sources"][0] if "sources" in progress else progress
    end, latest = source.get("endOffset"), source.get("latestOffset")
    if isinstance(end, str):
        end = json.loads(end)
    if isinstance(latest, str):
        latest = json.loads(latest)
    if not end or not latest:
        return {}
    consumed = _from_offsets(end)
    behind = [max(0, o - consumed[tp]) for tp, o in _from_offsets(latest).items() if tp in consumed]
    if not behind:
        return {}
    return {
        "avgOffsetsBehindLatest": str(sum(behind) / len(behind)),
        "maxOffsetsBehindLatest": str(max(behind)),
        "minOffsetsBehindLatest": str(min(behind)),
    }


def limit_offsets(start: Offsets, latest: Offsets, limit: int) -> Offsets:
    """At most ``limit`` offsets past ``start`` in all.

    Every partition with a backlog first gets one offset (while the limit lasts,
    the largest backlogs first), so none waits behind busier ones; the rest of
    the limit is shared in proportion to what each has left, the remainder
    going to the largest fractions.
    """
    begin = _from_offsets(start)
    end = _from_offsets(latest)
    lag = {tp: max(0, o - begin.get(tp, o)) for tp, o in end.items()}
    total = sum(lag.values())
    if total <= limit:
        return _to_offsets(end)
    lagging = sorted((tp for tp in lag if lag[tp]), key=lambda t: (-lag[t], t))
    share = dict.fromkeys(lag, 0)
    for tp in lagging[:limit]:
        share[tp] = 1
    left = limit - sum(share.values())
    rest = {tp: lag[tp] - share[tp] for tp in lag}
    pool = sum(rest.values())
    if left > 0 and pool > 0:
        extra = {tp: rest[tp] * left // pool for tp in lag}
        for tp in lag:
            share[tp] += extra[tp]
        left -= sum(extra.values())
        for tp in sorted(lag, key=lambda t: (-(rest[t] * (limit - len(lagging)) % pool), t)):
            if left <= 0:
                break
            if share[tp] < lag[tp]:
                share[tp] += 1
                left -= 1
    return _to_offsets({tp: begin[tp] + share[tp] if lag[tp] else end[tp] for tp in end})


def plan_ranges(
    start: Offsets,
    end: Offsets,
    *,
    min_partitions: int | None,
    fail_on_data_loss: bool,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Split ``[start, end)`` into tasks, as Spark's connector does: one per
    partition with records; with ``max_records_per_partition``, as many pieces of
    a partition as keep each within it; then, when that is still fewer tasks than
    ``min_partitions``, pieces in proportion to each partition's share of the
    records (a partition keeps the larger of its two counts). Pieces of a
    partition are as even as can be, and contiguous.

    Raises:
        DataLossError: a partition's end is before its start (the topic was deleted
            and created again, or its records truncated), with ``fail_on_data_loss``.
    """
    begin = _from_offsets(start)
    ranges = []
    for tp, stop in sorted(_from_offsets(end).items()):
        first = begin.get(tp)
        if first is None:
            continue
        if stop < first:
            if fail_on_data_loss:
                raise DataLossError(
                    f"{tp.topic}-{tp.partition} ends at offset {stop}, before {first} where the "
                    "read starts (the topic was recreated or truncated); set failOnDataLoss=false "
                    "to go on"
                )
            continue
        if stop > first:
            ranges.append(OffsetRange(tp.topic, tp.partition, first, stop))
    pieces = [
        math.ceil((r.end - r.start) / max_records_per_partition) if max_records_per_partition else 1
        for r in ranges
    ]
    if min_partitions is not None and sum(pieces) < min_partitions:
        total = sum(r.end - r.start for r in ranges)
        pieces = [
            max(n, min(r.end - r.start, round(min_partitions * (r.end - r.start) / total)))
            for r, n in zip(ranges, pieces, strict=True)
        ]
    out = []
    for r, n in zip(ranges, pieces, strict=True):
        step, extra = divmod(r.end - r.start, n)
        at = r.start
        for i in range(n):
            size = step + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, at, at + size))
            at += size
    return out


def merge_ranges(
    ranges: Sequence[OffsetRange],
    tasks: int | None,
    *,
    max_records_per_partition: int | None = None,
) -> list[tuple[OffsetRange, ...]]:
    """Group the ranges :func:`plan_ranges` made into about ``tasks`` Spark
    tasks, so that a read of many small ranges pays Spark's fixed cost per task
    once per core rather than once per partition.

    Rules:

    * With ``tasks`` None, or no more ranges than ``tasks``, every range is a
      task of its own (Spark's connector's plan).
    * Otherwise the ranges, largest first, each go to the task with the fewest
      offsets so far (the first such task on a tie): about ``tasks`` tasks of
      about equal size; a range larger than a fair share is a task of its own.
    * No task gets more than ``max_records_per_partition`` offsets because of a
      merge: a range that fits in no task starts another one.
    * A range is never cut or widened: a task reads exactly its ranges' offsets
      and checks each for lost records. Within a task the ranges are in
      (topic, partition, offset) order, and the pieces of a partition that end
      where the next starts are joined into one range.
    * The tasks are ordered by their first range.
    """
    if tasks is None or len(ranges) <= tasks:
        return [(r,) for r in ranges]
    loads: list[int] = []
    groups: list[list[OffsetRange]] = []
    for r in sorted(ranges, key=lambda r: (r.start - r.end, r.topic, r.partition, r.start)):
        size = r.end - r.start
        least = min(range(len(loads)), key=loads.__getitem__, default=None)
        if (
            least is None
            or len(loads) < tasks
            or (
                max_records_per_partition is not None
                and loads[least] + size > max_records_per_partition
            )
        ):
            loads.append(size)
            groups.append([r])
        else:
            loads[least] += size
            groups[least].append(r)
    out = []
    for group in groups:
        joined: list[OffsetRange] = []
        for r in sorted(group, key=lambda r: (r.topic, r.partition, r.start)):
            last = joined[-1] if joined else None
            if last is not None and (last.topic, last.partition, last.end) == (
                r.topic,
                r.partition,
                r.start,
            ):
                joined[-1] = OffsetRange(r.topic, r.partition, last.start, r.end)
            else:
                joined.append(r)
        out.append(tuple(joined))
    return sorted(out, key=lambda task: (task[0].topic, task[0].partition, task[0].start))


COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "timestampType")
"""The columns of a read, in order (``headers`` follows with ``includeHeaders``)."""


def _packed(records: Sequence[ConsumerRecord], headers: bool) -> RecordColumns:
    """The async consumer's records (OAUTHBEARER reads) as columns."""
    buffers = ColumnBuffers.pack(
        [r[2:7] for r in records], [r.timestamp_type for r in records], headers
    )
    return RecordColumns.whole(buffers)


def reader_config(opts: ReadOptions) -> ConsumerConfig:
    """The settings a task's reader reads with (the same for every range of a
    read, so a task makes them once): without the query's group id, so that the
    pools serve every query alike; offsets that are gone always stop the reader
    (``failOnDataLoss`` decides in :func:`read_range` where the read goes on);
    chunks of ``_CHUNK`` records; ``max.partition.fetch.bytes`` as the read
    sets it, else ``_READER_PARTITION_FETCH_BYTES`` (within ``fetch.max.bytes``)."""
    config = opts.consumer_config()
    fetch_bytes = config.max_partition_fetch_bytes
    if not any(key.replace("_", ".") == "max.partition.fetch.bytes" for key in opts.client):
        fetch_bytes = min(_READER_PARTITION_FETCH_BYTES, config.fetch_max_bytes)
    return reader_settings(
        dataclasses.replace(
            config,
            max_poll_records=_CHUNK,
            auto_offset_reset="none",
            max_partition_fetch_bytes=fetch_bytes,
        )
    )


def read_range(
    opts: ReadOptions, task: OffsetRange, config: ConsumerConfig | None = None
) -> Iterator[RecordColumns]:
    """The records of one offset range, in offset order, as chunks of columns
    (with the header columns under ``includeHeaders``), one chunk per fetch.
    The reader comes from :data:`READERS` (or, for OAUTHBEARER, the async
    consumer from :data:`POOL`), keyed without the query's group id, and
    fetches nothing past the range's end, so the task ends as soon as its last
    record is read. ``config``: :func:`reader_config` of ``opts`` (made here
    when not given).

    Raises:
        DataLossError: records of the range were deleted (``failOnDataLoss=true``).
        TrafkaError: the partition yields nothing for ``pollTimeoutMs``.
    """
    tp = TopicPartition(task.topic, task.partition)
    config = config or reader_config(opts)
    chunks = _read_wire if _wire_supported(config) else _read_pooled
    position = task.start
    while position < task.end:
        try:
            for records, after in chunks(
                config, tp, dataclasses.replace(task, start=position), opts
            ):
                if records and records.last_offset >= task.end:
                    records = records.below(task.end)
                if records:
                    yield records
                position = after
            return
        except _Lost as lost:
            what = _lost(task, position, lost.earliest)
            if opts.fail_on_data_loss or lost.earliest is None:
                raise DataLossError(what) from None
            _log.warning("%s", what)
            if lost.earliest <= position:
                # Past the end of the log the leader holds now: nothing more of the
                # range can be read (Spark's Kafka source skips to its end too).
                return
            position = lost.earliest  # the records from the log's start on
        except (KafkaConnectionError, _Stalled) as exc:
            raise TrafkaError(
                f"no records from {task.topic}-{task.partition} at offset {position} within "
                f"kafkaConsumer.pollTimeoutMs ({opts.poll_timeout_ms} ms); the read planned "
                f"offsets up to {task.end}: {exc}"
            ) from exc


class _Stalled(TrafkaError):
    """Nothing came for ``pollTimeoutMs``."""


class _Lost(Exception):
    def __init__(self, earliest: int | None) -> None:
        self.earliest = earliest


def _read_wire(
    config: ConsumerConfig, tp: TopicPartition, task: OffsetRange, opts: ReadOptions
) -> Iterator[tuple[RecordColumns, int]]:
    with READERS.lease(config) as reader:
        try:
            yield from reader.read(
                tp,
                task.start,
                task.end,
                opts.poll_timeout_ms,
                _CHUNK,
                headers=opts.include_headers,
            )
        except OffsetOutOfRangeError:
            try:
                earliest: int | None = reader.earliest(tp)
            except TrafkaError:
                earliest = None
            raise _Lost(earliest) from None


def _read_pooled(
    config: ConsumerConfig, tp: TopicPartition, task: OffsetRange, opts: ReadOptions
) -> Iterator[tuple[RecordColumns, int]]:
    timeout_ms = opts.poll_timeout_ms
    with POOL.lease(config) as entry:
        loop, consumer = entry.loop, entry.client
        loop.call(_assign_at, consumer, tp, task.start, task.end)
        position = task.start
        while position < task.end:
            try:
                records, now = loop.call(_next_chunk, consumer, tp, timeout_ms)
            except OffsetOutOfRangeError:
                raise _Lost(loop.call(_earliest, consumer, tp)) from None
            if not records and now == position:
                raise _Stalled("nothing was fetched")
            yield _packed(records, opts.include_headers), now
            position = now


async def _next_chunk(
    consumer: Consumer, tp: TopicPartition, timeout_ms: int
) -> tuple[list[ConsumerRecord], int]:
    """The next records of ``tp`` (waiting up to ``timeout_ms``) and the position after them."""
    batch = await consumer.getmany(tp, timeout_ms=timeout_ms)
    return batch.get(tp, []), await consumer.position(tp)


async def _earliest(consumer: Consumer, tp: TopicPartition) -> int | None:
    try:
        return (await consumer.beginning_offsets([tp]))[tp]
    except TrafkaError:
        return None


def _lost(task: OffsetRange, position: int, earliest: int | None) -> str:
    """What a task lost: from its position to the log's start, or, when the log
    starts at or before the position, everything from the position on (the log
    its leader holds now ends before it)."""
    name = f"{task.topic}-{task.partition}"
    span = f"offsets {position}-{task.end - 1}" if task.end - 1 > position else f"offset {position}"
    if earliest is None:
        what = f"offset {position} of {name} is no longer in the log (its start is unknown)"
        why = "deleted or truncated"
    elif earliest <= position:
        what = f"{span} of {name} are past the end of the log its leader holds now"
        why = "truncated by a leader change (an unclean leader election) or the topic recreated"
    else:
        last = min(earliest, task.end) - 1
        span = f"offset {position}" if last <= position else f"offsets {position}-{last}"
        what = f"{span} of {name} are no longer in the log (it now starts at {earliest})"
        why = "deleted by retention or DeleteRecords"
    if what.startswith("offset "):
        what = what.replace(" are ", " is ", 1)
    return (
        f"{what}: {why} before this read of offsets {task.start}-{task.end - 1}; "
        f"set failOnDataLoss=false to skip them"
    )


def _assign_at(consumer: Consumer, tp: TopicPartition, offset: int, end: int) -> None:
    consumer.assign([tp])
    consumer.seek(tp, offset, until=end)


def _bytes(value: Any, what: str) -> bytes | None:
    if value is None or isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode()
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise TypeError(f"the {what} column must be string or binary, not {type(value).__name__}")


def write_columns(opts: WriteOptions, chunks: Iterable[Mapping[str, list[Any]]]) -> int:
    """Produce every row of the chunks (columns ``value``, and optionally ``key``,
    ``topic``, ``partition``, ``headers``) and wait until all are acknowledged.
    The ``topic`` option, when given, is every row's topic (Spark's rule);
    otherwise each row's ``topic`` column.

    Returns:
        The number of records written.

    Raises:
        TrafkaError: a row has no topic, or a record could not be delivered.
        TypeError: a value of an unsupported type.
    """

    config = opts.producer_config()
    count = 0
    pending: list[RecordFuture] = []
    # The producer is kept between tasks on the shared loop; Spark's rows are
    # taken here, in the task's thread, and handed over a chunk at a time.
    with PRODUCERS.lease(config) as entry:
        for chunk in chunks:
            count += entry.loop.call(_send_chunk, entry.client, opts.topic, chunk, pending)
        entry.loop.call(_finish, entry.client, pending)
    return count


async def _send_chunk(
    producer: Producer,
    default_topic: str | None,
    chunk: Mapping[str, list[Any]],
    pending: list[RecordFuture],
) -> int:
    values = chunk["value"]
    n = len(values)
    keys = chunk.get("key") or [None] * n
    topics = chunk.get("topic") or [None] * n
    partitions = chunk.get("partition") or [None] * n
    all_headers = chunk.get("headers") or [None] * n
    for i in range(n):
        # As in Spark, the topic option overrides the column.
        topic = default_topic or topics[i]
        if topic is None:
            raise TrafkaError(
                "a row has no topic: give the DataFrame a 'topic' column or the 'topic' option"
            )
        headers = all_headers[i]
        pending.append(
            await producer.send(
                topic,
                _bytes(values[i], "value"),
                key=_bytes(keys[i], "key"),
                partition=partitions[i],
                headers=[(h["key"], _bytes(h["value"], "header value")) for h in headers]
                if headers
                else None,
            )
        )
    if len(pending) >= 10_000:
        await _settle(pending)
    return n


async def _finish(producer: Producer, pending: list[RecordFuture]) -> None:
    await producer.flush()
    await _settle(pending)


async def _settle(pending: list[RecordFuture]) -> None:
    """Wait for the records sent so far; the first failure is raised."""
    for future in pending:
        await future
    pending.clear()


def pin_bootstrap(client: Mapping[str, str]) -> dict[str, str]:
    """``client`` with its zeroconf ``bootstrap.servers`` entries replaced by the
    addresses found now, so that the driver looks once and every executor task
    talks to the same brokers (instead of each browsing the network).

    Raises:
        NoBrokersAvailableError: a spec found no broker.
        ConfigError: a malformed spec.
    """
    from ..discovery import DiscoveryError, discover_blocking, is_spec, parse_spec
    from ..sdk.errors import ConfigError, NoBrokersAvailableError

    servers = [s.strip() for s in client.get("bootstrap.servers", "").split(",") if s.strip()]
    if not any(is_spec(s) for s in servers):
        return dict(client)
    protocol = client.get("security.protocol", client.get("security_protocol", "PLAINTEXT"))
    pinned: list[str] = []
    for server in servers:
        if not is_spec(server):
            pinned.append(server)
            continue
        try:
            spec = parse_spec(server)
            found = discover_blocking(spec, first=True, security_protocols=protocol)
        except ValueError as exc:
            raise ConfigError(f"option 'kafka.bootstrap.servers': {exc}") from None
        except DiscoveryError as exc:
            raise NoBrokersAvailableError(f"zeroconf: {exc}") from None
        if not found:
            raise NoBrokersAvailableError(
                f"zeroconf found no {protocol.upper()} Kafka service ({spec.describe()}) "
                f"within {spec.timeout_ms} ms"
            )
        pinned.append(found[0].bootstrap_servers)
    return {**client, "bootstrap.servers": ",".join(pinned)}
