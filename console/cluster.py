"""The console's access to the cluster: what each page needs, asked through the
SDK's admin client (and a consumer and a producer for the message pages), as
:mod:`.model`'s views.

Rules:

* Only the Kafka protocol reaches the cluster: any Kafka works, not only
  brokerlite. Calls a page needs that do not depend on each other run at once
  (:func:`gather`), and the first to fail is raised as itself.
* A topic or group that does not exist is :class:`NotFound`; what a person
  typed that the cluster cannot take (a partition the topic lacks) is
  :class:`~.model.InputError`; the cluster's own refusals are the SDK's
  errors, unchanged.
* Nothing here creates what a page only looks at: a produced message needs
  its topic to exist, and reading messages never joins a group or commits.
* A partition without a leader (its replicas' brokers down), or whose leader
  cannot be reached, does not take its page down: its offsets are looked up
  partially (:meth:`~trafka.sdk.admin.Admin.list_offsets` ``partial=True``)
  and shown unknown, the partition as offline; the message browser reads the
  other partitions and says which it could not.
* A cluster that does not answer at all is found by the checks of
  :mod:`.health` (:meth:`Console.watch_cluster`), and a page's work
  (:meth:`Console.while_reachable`) is stopped as :class:`ClusterDown` as soon
  as a check fails, or refused at once while the cluster is down.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from trafka.codec import ErrorCode, KafkaError, TrafkaError
from trafka.sdk import (
    AdminConfig,
    ClientConfig,
    ConsumerConfig,
    ProducerConfig,
    open_consumer,
    open_producer,
)
from trafka.sdk.admin import Admin
from trafka.sdk.fetcher import TopicPartition
from trafka.sdk.metadata import TopicInfo

from . import model, search, throughput
from .health import ClusterHealth
from .model import InputError, LagHistory

__all__ = ["BROWSE_SECONDS", "ClusterDown", "Console", "NotFound", "client_settings", "gather"]

log = logging.getLogger("trafka.console")

#: How long reading messages for one browser page may take.
BROWSE_SECONDS = 5.0
#: How long one page of a search may read.
SEARCH_SECONDS = 10.0


class NotFound(Exception):
    """The topic or group a page names does not exist."""


class ClusterDown(Exception):
    """The cluster does not answer the console's checks (see :mod:`.health`).

    Attributes:
        reason: what the last check saw.
        down_for: seconds since a check first found it so.
        during: the page had started its work (a change may or may not have
            been made) rather than being refused before it.
    """

    def __init__(self, reason: str, down_for: float, *, during: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.down_for = down_for
        self.during = during


async def gather(*calls: Callable[[], Awaitable[Any]]) -> list[Any]:
    """The results of ``calls``, run at once. The first to fail cancels the
    others and is raised as itself, not inside an ExceptionGroup, so that a
    page can tell a refusal from an unreachable cluster."""
    results: list[Any] = [None] * len(calls)

    async def one(i: int) -> None:
        results[i] = await calls[i]()

    try:
        async with anyio.create_task_group() as tg:
            for i in range(len(calls)):
                tg.start_soon(one, i)
    except BaseExceptionGroup as group:
        raise _first_real(group) from None
    return results


def _first_real(group: BaseExceptionGroup[Any]) -> BaseException:
    cancelled = anyio.get_cancelled_exc_class()
    for exc in group.exceptions:
        inner: BaseException = exc
        if isinstance(inner, BaseExceptionGroup):
            inner = _first_real(inner)
        if not isinstance(inner, cancelled | BaseExceptionGroup):
            return inner
    return group


def client_settings(cls: type[ClientConfig], settings: Mapping[str, Any]) -> dict[str, Any]:
    """The settings of ``settings`` that ``cls`` takes: the console's one set of
    client settings serves its admin client, consumers and producer, each
    taking its own. A key that none of them knows is kept, so that the client
    refuses it by name rather than the console dropping it."""
    kinds: tuple[type[ClientConfig], ...] = (AdminConfig, ConsumerConfig, ProducerConfig)
    fields = {k: {f.name for f in dataclasses.fields(k)} for k in kinds}
    out = {}
    for key, value in settings.items():
        name = key.strip().lower().replace(".", "_").replace("-", "_")
        if name in fields[cls] or not any(name in names for names in fields.values()):
            out[key] = value
    return out


class Console:
    """What the console's pages share: the admin client, the settings of the
    consumers and the producer it opens, the lag history and what the checks
    of the cluster found.

    Args:
        admin: an open admin client (the console does not close it).
        client_config: Kafka-style client settings (``bootstrap.servers`` and
            any security settings) for the consumers and the producer.
        history: where lag samples are kept.
        allowed_hosts: ``Host`` header values the console answers to
            (``["*"]``: any).
        health: the checks' findings and timings (the defaults of
            :class:`~.health.ClusterHealth` unless given).
        rates: where throughput samples are kept.
        clock: seconds since the epoch, for the samples (tests give their own).
        sample_interval: seconds between two samples (what the pages say).
    """

    def __init__(
        self,
        admin: Admin,
        client_config: Mapping[str, Any],
        *,
        history: LagHistory | None = None,
        allowed_hosts: list[str] | None = None,
        health: ClusterHealth | None = None,
        rates: throughput.ThroughputHistory | None = None,
        clock: Callable[[], float] = time.time,
        sample_interval: float = 10.0,
    ) -> None:
        self.admin = admin
        self.client_config = dict(client_config)
        self.history = history or LagHistory()
        self.allowed_hosts = allowed_hosts or ["*"]
        self.health = health or ClusterHealth()
        self.rates = rates or throughput.ThroughputHistory()
        self.clock = clock
        self.sample_interval = sample_interval
        self._producer: Any = None
        self._pages: set[anyio.CancelScope] = set()
        self._check_wanted = anyio.Event()

    @property
    def bootstrap(self) -> str:
        """The cluster's bootstrap addresses, as given."""
        servers = self.client_config.get("bootstrap.servers", "")
        return servers if isinstance(servers, str) else ",".join(map(str, servers))

    # -- is the cluster there ---------------------------------------------------------------

    async def while_reachable(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """``work()``'s result, unless the cluster is down: then
        :class:`ClusterDown`, at once when it was already found down, or as soon
        as a check finds it so while ``work`` waits (which asks for a check
        when none is under way)."""
        self._raise_if_down(during=False)
        self._check_wanted.set()
        scope = anyio.CancelScope()
        self._pages.add(scope)
        try:
            with scope:
                return await work()
        finally:
            self._pages.discard(scope)
        self._raise_if_down(during=True)  # only a failed check cancels the scope
        raise AssertionError("a page's work was cancelled with the cluster up")

    def _raise_if_down(self, *, during: bool) -> None:
        h = self.health
        if h.down:
            raise ClusterDown(h.reason, h.down_for(anyio.current_time()), during=during)

    async def check_cluster(self) -> None:
        """One check of :mod:`.health`: DescribeCluster answered within the
        check's timeout. A failure stops every page waiting for the cluster."""
        h = self.health
        h.check_started(anyio.current_time())
        reason = f"no answer within {h.check_timeout:g} s"
        answered = False
        with anyio.move_on_after(h.check_timeout):
            try:
                # A little less than the check's own time, so that a failure
                # says what the client saw (a refused connection...).
                await self.admin.describe_cluster(timeout_ms=math.ceil(h.check_timeout * 800))
                answered = True
            except TrafkaError as exc:
                reason = str(exc)
        now = anyio.current_time()
        if answered:
            change = h.check_answered(now)
            if change is not None and h.checks > 1:
                log.warning("the cluster at %s answers again", self.bootstrap)
            return
        change = h.check_failed(now, reason)
        for scope in list(self._pages):
            scope.cancel()
        if change is not None:
            log.warning(
                "the cluster at %s does not answer (%s); the console's pages say so until it does",
                self.bootstrap,
                reason,
            )

    async def watch_cluster(self) -> None:
        """Check the cluster every ``health.interval`` seconds, and at once when a
        page asks, until cancelled."""
        while True:
            now = anyio.current_time()
            at = self.health.next_check(now, asked=self._check_wanted.is_set())
            if at > now:
                if self._check_wanted.is_set():
                    await anyio.sleep(at - now)
                else:
                    with anyio.move_on_after(at - now):
                        await self._check_wanted.wait()
                continue
            self._check_wanted = anyio.Event()
            await self.check_cluster()

    # -- cluster reads ------------------------------------------------------------------

    async def _all_topics(self) -> dict[str, Any]:
        names = await self.admin.list_topics(include_internal=True)
        return await self.admin.describe_topics(names) if names else {}

    async def _topic_info(self, name: str) -> TopicInfo:
        """The topic's metadata (:class:`NotFound` when it does not exist)."""
        try:
            return (await self.admin.describe_topics([name]))[name]
        except KafkaError as exc:
            if exc.code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise NotFound(f"no topic named {name!r}") from None
            raise

    async def _offsets_and_sizes(
        self, tps: list[TopicPartition], log_dirs_for: list[TopicPartition] | None
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[TopicPartition, int]]:
        if not tps:
            return {}, {}, {}

        async def sizes() -> dict[TopicPartition, int]:
            try:
                dirs = await self.admin.describe_log_dirs(log_dirs_for)
            except TrafkaError as exc:  # no rights, or a broker out of reach: unknown
                log.info("no partition sizes: %s", exc)
                return {}
            return model.partition_sizes(dirs)

        starts, ends, found = await gather(
            lambda: self._offsets(tps, "earliest"), lambda: self._offsets(tps, "latest"), sizes
        )
        return starts, ends, found

    async def _offsets(
        self, tps: list[TopicPartition], spec: str | int
    ) -> dict[TopicPartition, tuple[int, int] | None]:
        """``list_offsets`` of what can be answered: a partition whose leader is
        gone or out of reach is left out (its offsets are unknown)."""
        if not tps:
            return {}
        try:
            found = await self.admin.list_offsets(dict.fromkeys(tps, spec), partial=True)
        except KafkaError as exc:
            if exc.code != ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
                raise
            # A topic deleted meanwhile (the admin client looks a partition past
            # its cached count up again before refusing it): each topic on its
            # own, and a topic refused so has its offsets unknown for now.
            by_topic: dict[str, list[TopicPartition]] = {}
            for tp in tps:
                by_topic.setdefault(tp.topic, []).append(tp)
            if len(by_topic) == 1:
                log.info("offsets of %s unknown: %s", tps[0].topic, exc)
                return {}
            each: dict[TopicPartition, tuple[int, int] | None] = {}
            for some in by_topic.values():
                each.update(await self._offsets(some, spec))
            return each
        for tp, hit in found.items():
            if isinstance(hit, TrafkaError):
                log.info("offsets of %s-%s unknown: %s", tp.topic, tp.partition, hit)
        return {tp: hit for tp, hit in found.items() if not isinstance(hit, TrafkaError)}

    async def overview(self) -> model.Overview:
        async def log_dirs() -> list[Any]:
            try:
                return await self.admin.describe_log_dirs()
            except KafkaError as exc:  # no rights to: disks stay unknown
                log.info("no log directories: %s", exc)
                return []

        cluster, topics, dirs = await gather(
            self.admin.describe_cluster, self._all_topics, log_dirs
        )
        return model.overview(cluster, topics, dirs)

    async def topics(self) -> list[model.TopicRow]:
        topics = await self._all_topics()
        tps = [TopicPartition(t, p.partition) for t, i in topics.items() for p in i.partitions]
        starts, ends, sizes = await self._offsets_and_sizes(tps, None)
        return model.topic_rows(topics, starts, ends, sizes)

    async def topic(self, name: str) -> model.TopicView:
        info = await self._topic_info(name)
        tps = [TopicPartition(name, p.partition) for p in info.partitions]

        def read_configs(overrides_only: bool) -> Callable[[], Awaitable[Any]]:
            async def read() -> dict[str, str | None]:
                try:
                    found = await self.admin.describe_configs([name], overrides_only=overrides_only)
                except KafkaError as exc:
                    log.info("no configs of %r: %s", name, exc)
                    return {}
                return found.get(name, {})

            return read

        # DescribeConfigs tells a topic's own settings from defaults; the SDK
        # answers either all or only the overrides, so both are asked.
        configs, overrides, (starts, ends, sizes) = await gather(
            read_configs(False), read_configs(True), lambda: self._offsets_and_sizes(tps, tps)
        )
        return model.topic_view(info, starts, ends, sizes, configs, overrides)

    async def group(self, group_id: str) -> model.GroupView:
        """A consumer group (classic or KIP-848) or a share group, with its lag;
        each call records a lag sample."""
        desc = None
        try:
            desc = (await self.admin.describe_groups([group_id]))[group_id]
        except KafkaError as exc:
            if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
        committed: dict[TopicPartition, int] = {}
        if desc is not None:
            committed = await self.admin.list_consumer_group_offsets(group_id)
        if desc is None or (desc.state == "Dead" and not desc.members and not committed):
            # DescribeGroups knows classic groups; a share group is Dead or
            # GROUP_ID_NOT_FOUND there, as is a group that does not exist.
            view = await self._share_group(group_id)
            if view is None:
                raise NotFound(f"no group named {group_id!r}")
        else:
            tps = sorted(set(committed) | {tp for m in desc.members for tp in m.assignment})
            ends = await self._ends(tps)
            view = model.group_view(desc, committed, ends)
        self.history.record(group_id, time.time(), view.lags())
        return view

    async def _consumer_group(self, group_id: str) -> Any:
        """The group's description, for a change only a consumer group takes
        (:class:`NotFound` when there is none, :class:`~.model.InputError`
        for a share group)."""
        try:
            desc = (await self.admin.describe_groups([group_id]))[group_id]
        except KafkaError as exc:
            if exc.code != ErrorCode.GROUP_ID_NOT_FOUND:
                raise
            desc = None
        if desc is None or desc.state == "Dead":
            if await self._share_group(group_id) is not None:
                raise InputError(f"{group_id!r} is a share group: its offsets are not reset here")
            raise NotFound(f"no group named {group_id!r}")
        return desc

    async def reset_offsets(self, form: model.ResetForm) -> list[model.ResetRow]:
        """Plan a reset of the group's offsets and, with ``form.execute``, commit
        it. Kafka's rules: only an inactive group (:func:`~.model.refuse_unless_inactive`);
        every partition's new offset inside its log (:func:`~.model.plan_reset`)."""
        desc = await self._consumer_group(form.group_id)
        model.refuse_unless_inactive(
            form.group_id, desc.state, len(desc.members), "offsets can be reset"
        )
        current = await self.admin.list_consumer_group_offsets(form.group_id)
        if form.topic is None:
            tps = sorted(current)
            if not tps:
                raise InputError("topic: the group has committed no offsets; name a topic")
        else:
            count = await self.partition_count(form.topic, form.partition)
            wanted = range(count) if form.partition is None else [form.partition]
            tps = [TopicPartition(form.topic, p) for p in wanted]

        def ask(spec: str | int) -> Callable[[], Awaitable[Any]]:
            return lambda: self.admin.list_offsets(dict.fromkeys(tps, spec))

        calls = [ask("earliest"), ask("latest")]
        if form.to == "timestamp":
            calls.append(ask(form.value))
        found = await gather(*calls)
        starts = {tp: hit[0] for tp, hit in found[0].items() if hit is not None}
        ends = {tp: hit[0] for tp, hit in found[1].items() if hit is not None}
        by_time = {}
        if form.to == "timestamp":
            by_time = {tp: None if hit is None else hit[0] for tp, hit in found[2].items()}
        plan = model.plan_reset(form, current, starts, ends, by_time)
        if form.execute:
            await self.admin.alter_consumer_group_offsets(
                form.group_id, {TopicPartition(r.topic, r.partition): r.new for r in plan}
            )
        return plan

    async def delete_group(self, group_id: str) -> None:
        """Delete a consumer group and its committed offsets; Kafka deletes only
        an inactive group (the broker refuses others with NON_EMPTY_GROUP too)."""
        desc = await self._consumer_group(group_id)
        model.refuse_unless_inactive(group_id, desc.state, len(desc.members), "a group is deleted")
        await self.admin.delete_groups([group_id])

    async def _ends(self, tps: list[TopicPartition]) -> dict[TopicPartition, Any]:
        return await self._offsets(tps, "latest")

    async def _share_group(self, group_id: str) -> model.GroupView | None:
        try:
            share = (await self.admin.describe_share_groups([group_id]))[group_id]
        except KafkaError as exc:
            if exc.code in (ErrorCode.GROUP_ID_NOT_FOUND, ErrorCode.UNSUPPORTED_VERSION):
                return None
            raise
        if share.state == "Dead":
            return None
        try:
            offsets = await self.admin.list_share_group_offsets(group_id)
        except KafkaError as exc:
            if exc.code != ErrorCode.UNSUPPORTED_VERSION:
                raise
            offsets = {}
        tps = sorted(set(offsets) | {tp for m in share.members for tp in m.assignment})
        return model.share_group_view(share, offsets, await self._ends(tps))

    async def sample_lag(self, max_groups: int = 200) -> int:
        """Record every consumer group's lag once (at most ``max_groups``);
        returns how many groups were sampled."""
        if self.health.down:
            return 0
        listings = await self.admin.list_groups()
        self.history.forget(g.group_id for g in listings)
        sampled = 0
        for g in sorted(listings, key=lambda g: g.group_id)[:max_groups]:
            try:
                await self.group(g.group_id)
            except (KafkaError, NotFound) as exc:
                log.debug("lag of group %r not sampled: %s", g.group_id, exc)
                continue
            sampled += 1
        return sampled

    async def sample_throughput(self, max_groups: int = 200) -> throughput.Snapshot | None:
        """One throughput sample (see :mod:`.throughput`): every partition's
        leader, log end offset and size, and every group's committed offsets
        (unknown when there are more than ``max_groups`` groups), kept in
        :attr:`rates`. None (nothing kept) while the cluster is down."""
        if self.health.down:
            return None

        async def sizes() -> dict[TopicPartition, int] | None:
            try:
                return model.partition_sizes(await self.admin.describe_log_dirs())
            except TrafkaError as exc:  # no rights, or a broker out of reach
                log.info("throughput: no log sizes: %s", exc)
                return None

        async def committed() -> dict[str, dict[TopicPartition, int]] | None:
            listings = await self.admin.list_groups()
            consumers = sorted(g.group_id for g in listings if g.protocol_type in ("consumer", ""))
            if len(consumers) > max_groups:
                return None
            out = {}
            for gid in consumers:
                try:
                    out[gid] = await self.admin.list_consumer_group_offsets(gid)
                except KafkaError as exc:  # gone meanwhile, or no rights: unknown
                    log.info("throughput: offsets of group %r unknown: %s", gid, exc)
                    return None
            return out

        topics, found_sizes, found_committed = await gather(self._all_topics, sizes, committed)
        leaders = {
            TopicPartition(t, p.partition): (p.leader if p.leader >= 0 else None)
            for t, info in topics.items()
            for p in info.partitions
        }
        ends = await self._offsets(list(leaders), "latest")
        snap = throughput.Snapshot(
            at=self.clock(),
            leaders=leaders,
            ends={tp: hit[0] for tp, hit in ends.items() if hit is not None},
            sizes=found_sizes,
            committed=found_committed,
        )
        self.rates.record(snap)
        return snap

    async def browse(self, q: model.BrowseQuery) -> dict[str, Any]:
        """The messages of one browser page, the partitions' offsets and notes."""
        count = await self.partition_count(q.topic, q.partition)
        wanted = range(count) if q.partition is None else [q.partition]
        tps = [TopicPartition(q.topic, p) for p in wanted]
        begins, ends, found = await self._positions(tps, q)
        lows = {tp.partition: hit[0] if hit else 0 for tp, hit in begins.items()}
        highs = {tp.partition: hit[0] if hit else 0 for tp, hit in ends.items()}
        by_time = {tp.partition: None if hit is None else hit[0] for tp, hit in found.items()}
        readable = {p: h for p, h in highs.items() if p in lows}
        starts, notes = model.plan_reads(q, lows, readable, by_time)
        unreachable = sorted(tp.partition for tp in tps if tp.partition not in readable)
        if unreachable:
            notes.append(
                f"partition(s) {', '.join(map(str, unreachable))} cannot be read now: "
                "no leader (offline), or their leader is out of reach"
            )
        rows = await self._read(q, starts, highs) if starts else []
        shown_lows: dict[int, int | None] = {tp.partition: None for tp in tps}
        shown_highs: dict[int, int | None] = dict(shown_lows)
        shown_lows.update({p: lows[p] for p in readable})
        shown_highs.update(readable)
        return {
            "query": q,
            "lows": shown_lows,
            "highs": shown_highs,
            "rows": model.merge_messages(rows, q.start, q.count, partitions=len(tps)),
            "notes": notes,
        }

    async def _positions(
        self, tps: list[TopicPartition], q: model.BrowseQuery
    ) -> tuple[dict[Any, Any], dict[Any, Any], dict[Any, Any]]:
        def ask(spec: str | int) -> Callable[[], Awaitable[Any]]:
            return lambda: self._offsets(tps, spec)

        if q.start != "timestamp":
            begins, ends = await gather(ask("earliest"), ask("latest"))
            return begins, ends, {}
        begins, ends, found = await gather(ask("earliest"), ask("latest"), ask(q.value))
        return begins, ends, found

    def _reader_settings(self) -> dict[str, Any]:
        """The settings of a consumer that reads for a page: no group, no commit."""
        settings = {
            **client_settings(ConsumerConfig, self.client_config),
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "client.id": "trafka-console",
            # Leaving open_consumer waits for the fetch in flight, which a broker
            # holds up to this long when it has nothing new: 500 ms by default,
            # on every page. The reads stop at the high watermark, so a long
            # poll buys nothing here.
            "fetch.max.wait.ms": 50,
        }
        settings.pop("group.id", None)
        return settings

    @staticmethod
    async def _read_ranges(
        consumer: Any,
        topic: str,
        ranges: Mapping[int, tuple[int, int]],
        take: Callable[[Any], None],
        cap: int | None = None,
    ) -> None:
        """Hand each record of ``[start, stop)`` of each partition of ``ranges``
        to ``take`` (at most ``cap`` of each), in offset order per partition.
        The partitions must be assigned to ``consumer``."""
        open_tps = {TopicPartition(topic, p) for p in ranges}
        got = dict.fromkeys(ranges, 0)
        for tp in open_tps:
            consumer.seek(tp, ranges[tp.partition][0])
        consumer.resume(*open_tps)
        while open_tps:
            batch = await consumer.getmany(*open_tps, timeout_ms=500)
            for tp, records in batch.items():
                stop = ranges[tp.partition][1]
                for r in records:
                    if r.offset >= stop or (cap is not None and got[tp.partition] >= cap):
                        break
                    take(r)
                    got[tp.partition] += 1
            for tp in list(open_tps):
                full = cap is not None and got[tp.partition] >= cap
                if full or await consumer.position(tp) >= ranges[tp.partition][1]:
                    open_tps.discard(tp)
                    consumer.pause(tp)

    async def _read(
        self, q: model.BrowseQuery, starts: Mapping[int, int], highs: Mapping[int, int]
    ) -> list[model.MessageRow]:
        """Up to ``q.count`` messages of each partition from its start, stopping
        at its high watermark as it was when the page was asked for."""
        rows: list[model.MessageRow] = []

        def take(r: Any) -> None:
            rows.append(
                model.message_row(
                    r.partition, r.offset, r.timestamp, r.key, r.value, r.headers, q.decode
                )
            )

        async with open_consumer(config=self._reader_settings()) as consumer:
            consumer.assign({TopicPartition(q.topic, p) for p in starts})
            ranges = {p: (start, highs[p]) for p, start in starts.items()}
            with anyio.move_on_after(BROWSE_SECONDS):
                await self._read_ranges(consumer, q.topic, ranges, take, q.count)
        return rows

    async def search(self, q: search.SearchQuery) -> dict[str, Any]:
        """The matches of a search, newest first, and how far it got (see
        :mod:`.search`): every partition read backwards from its high
        watermark (or ``q.before``) in turns, within ``q.scan_limit`` records,
        ``q.max_results`` matches and :data:`SEARCH_SECONDS`."""
        count = await self.partition_count(q.topic, q.partition)
        wanted = range(count) if q.partition is None else [q.partition]
        tps = [TopicPartition(q.topic, p) for p in wanted]
        begins, ends = await gather(
            lambda: self._offsets(tps, "earliest"), lambda: self._offsets(tps, "latest")
        )
        lows = {tp.partition: hit[0] for tp, hit in begins.items() if hit is not None}
        highs = {tp.partition: hit[0] for tp, hit in ends.items() if hit is not None}
        readable = sorted(set(lows) & set(highs))
        uppers = {p: max(lows[p], min(q.before.get(p, highs[p]), highs[p])) for p in readable}
        match = search.matcher(q)
        found: list[model.MessageRow] = []
        scanned = 0
        timed_out = False
        if readable:
            async with open_consumer(config=self._reader_settings()) as consumer:
                consumer.assign({TopicPartition(q.topic, p) for p in readable})
                with anyio.move_on_after(SEARCH_SECONDS) as budget:
                    while scanned < q.scan_limit and len(found) < q.max_results:
                        ranges = search.next_chunks(uppers, lows, q.scan_limit - scanned)
                        if not ranges:
                            break
                        turn: list[Any] = []
                        await self._read_ranges(consumer, q.topic, ranges, turn.append)
                        # A turn counts whole (one cut short by the time limit
                        # is read again by the next page), or up to the matches
                        # wanted: the older ones are left for the next page.
                        hits = [
                            r
                            for r in turn
                            if search.record_matches(q, match, r.key, r.value, r.headers)
                        ]
                        news = {p: start for p, (start, _) in ranges.items()}
                        kept, dropped = search.keep_newest(hits, q.max_results - len(found))
                        for r in dropped:
                            news[r.partition] = max(news[r.partition], r.offset + 1)
                        scanned += sum(1 for r in turn if r.offset >= news[r.partition])
                        found.extend(
                            model.message_row(
                                r.partition,
                                r.offset,
                                r.timestamp,
                                r.key,
                                r.value,
                                r.headers,
                                "auto",
                            )
                            for r in kept
                        )
                        uppers.update(news)
                timed_out = budget.cancelled_caught
        return {
            "query": q,
            "rows": search.sort_newest_first(found),
            "scanned": scanned,
            "total": sum(highs[p] - lows[p] for p in readable),
            "left": sum(uppers[p] - lows[p] for p in readable),
            "uppers": uppers,
            "lows": lows,
            "timed_out": timed_out,
            "unreachable": sorted(tp.partition for tp in tps if tp.partition not in readable),
            "before": search.format_before(uppers),
        }

    # -- cluster changes ------------------------------------------------------------------

    async def partition_count(self, topic: str, partition: int | None = None) -> int:
        """How many partitions ``topic`` has (a 404 page when it does not exist);
        :class:`~.model.InputError` when it lacks ``partition``."""
        count = len((await self._topic_info(topic)).partitions)
        if partition is not None and partition >= count:
            raise InputError(
                f"partition: {topic!r} has partitions 0 to {count - 1}, not {partition}"
            )
        return count

    async def alter_configs(self, change: model.ConfigChange) -> None:
        """Set and reset the topic's configs (IncrementalAlterConfigs: the other
        settings stay)."""
        await self._topic_info(change.topic)
        await self.admin.alter_topic_configs({change.topic: change.changes})

    async def add_partitions(self, topic: str, form: Mapping[str, str]) -> int:
        """Grow ``topic`` to the form's count (more than it has); returns it."""
        count = model.parse_partition_count(topic, form, await self.partition_count(topic))
        await self.admin.create_partitions({topic: count})
        return count

    async def purge(self, form: model.PurgeForm) -> dict[TopicPartition, int]:
        """Delete the records before ``form.before`` (the high watermark when
        None) of one partition or all (DeleteRecords); returns the new log starts."""
        count = await self.partition_count(form.topic, form.partition)
        wanted = range(count) if form.partition is None else [form.partition]
        before = -1 if form.before is None else form.before
        return await self.admin.delete_records(
            {TopicPartition(form.topic, p): before for p in wanted}
        )

    async def produce(self, form: model.ProduceForm) -> Any:
        """Write the form's message. The topic must exist: a producer's metadata
        request would have a broker that creates topics on demand create it."""
        await self.partition_count(form.topic, form.partition)
        producer = self._producer
        if producer is None:
            raise RuntimeError("the console's producer runs only inside run_producer()")
        return await producer.send_and_wait(
            form.topic, form.value, key=form.key, partition=form.partition, headers=form.headers
        )

    async def run_producer(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep a producer open for the produce form until cancelled (run by the server)."""
        settings = {
            **client_settings(ProducerConfig, self.client_config),
            "client.id": "trafka-console",
        }
        settings.pop("group.id", None)
        async with open_producer(config=settings) as producer:
            self._producer = producer
            task_status.started()
            try:
                await anyio.sleep_forever()
            finally:
                self._producer = None
