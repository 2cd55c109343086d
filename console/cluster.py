"""The console's access to the cluster: what each page needs, asked through the
SDK's admin client (and a consumer and a producer for the message pages), as
:mod:`.model`'s views.

:class:`Console` is what the pages of one cluster share; it answers the
topics' pages and changes itself, and hands the rest to its collaborators,
each with its own state: :class:`~.watch.ClusterWatch` (whether the cluster
answers), :class:`~.groups.Groups` (groups and their lag history),
:class:`~.messages.Messages` (reading and producing messages), over the
lookups they share (:class:`~.reads.ClusterReads`).

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
  cannot be reached, does not take its page down: its offsets are shown
  unknown, the partition as offline (see :mod:`.reads`).
* A cluster that does not answer at all is found by the checks of
  :mod:`.health` (:meth:`Console.watch_cluster`), and a page's work
  (:meth:`Console.while_reachable`) is stopped as :class:`ClusterDown` as soon
  as a check fails, or refused at once while the cluster is down.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import anyio

from trafka.codec import KafkaError, TrafkaError
from trafka.sdk.admin import Admin
from trafka.sdk.fetcher import TopicPartition

from . import model, search, throughput
from .groups import Groups
from .health import ClusterHealth
from .messages import BROWSE_SECONDS, SEARCH_SECONDS, Messages
from .model import LagHistory
from .reads import ClusterReads, NotFound, client_settings, gather
from .schemas import SchemaRegistryView
from .watch import ClusterDown, ClusterWatch

__all__ = [
    "BROWSE_SECONDS",
    "SEARCH_SECONDS",
    "ClusterDown",
    "Console",
    "NotFound",
    "client_settings",
    "gather",
]

log = logging.getLogger("trafka.console")


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
        schema_registry: the URL of the cluster's Schema Registry (None: none):
            framed records are shown decoded, and the subjects pages read it.
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
        schema_registry: str | None = None,
    ) -> None:
        self.admin = admin
        self.client_config = dict(client_config)
        self.history = history or LagHistory()
        self.allowed_hosts = allowed_hosts or ["*"]
        self.health = health or ClusterHealth()
        self.rates = rates or throughput.ThroughputHistory()
        self.clock = clock
        self.sample_interval = sample_interval
        self.reads = ClusterReads(admin)
        self.watch = ClusterWatch(admin, self.health, self.bootstrap)
        self.groups = Groups(admin, self.reads, self.history, clock)
        self.schemas = None if schema_registry is None else SchemaRegistryView(schema_registry)
        self.messages = Messages(self.reads, self.client_config, self.schemas)

    @property
    def bootstrap(self) -> str:
        """The cluster's bootstrap addresses, as given."""
        servers = self.client_config.get("bootstrap.servers", "")
        return servers if isinstance(servers, str) else ",".join(map(str, servers))

    # -- is the cluster there (see :class:`~.watch.ClusterWatch`) ---------------------------

    async def while_reachable(self, work: Callable[[], Awaitable[Any]]) -> Any:
        """``work()``'s result, unless the cluster is down: then :class:`ClusterDown`."""
        return await self.watch.while_reachable(work)

    async def check_cluster(self) -> None:
        """One check of :mod:`.health`; a failure stops every page waiting."""
        await self.watch.check_cluster()

    async def watch_cluster(self) -> None:
        """Check the cluster on a timer and when a page asks, until cancelled."""
        await self.watch.watch_cluster()

    # -- brokers and topics -----------------------------------------------------------------

    async def overview(self) -> model.Overview:
        async def log_dirs() -> list[Any]:
            try:
                return await self.admin.describe_log_dirs()
            except KafkaError as exc:  # no rights to: disks stay unknown
                log.info("no log directories: %s", exc)
                return []

        cluster, topics, dirs = await gather(
            self.admin.describe_cluster, self.reads.all_topics, log_dirs
        )
        return model.overview(cluster, topics, dirs)

    async def topics(self) -> list[model.TopicRow]:
        topics = await self.reads.all_topics()
        tps = [TopicPartition(t, p.partition) for t, i in topics.items() for p in i.partitions]
        starts, ends, sizes = await self.reads.offsets_and_sizes(tps, None)
        return model.topic_rows(topics, starts, ends, sizes)

    async def topic(self, name: str) -> model.TopicView:
        info = await self.reads.topic_info(name)
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
            read_configs(False), read_configs(True), lambda: self.reads.offsets_and_sizes(tps, tps)
        )
        return model.topic_view(info, starts, ends, sizes, configs, overrides)

    # -- groups (see :class:`~.groups.Groups`) -----------------------------------------------

    async def group(self, group_id: str) -> model.GroupView:
        """A consumer or share group with its lag; each call records a lag sample."""
        return await self.groups.group(group_id)

    async def reset_offsets(self, form: model.ResetForm) -> list[model.ResetRow]:
        """Plan a reset of the group's offsets and, with ``form.execute``, commit it."""
        return await self.groups.reset_offsets(form)

    async def delete_group(self, group_id: str) -> None:
        """Delete an inactive consumer group and its committed offsets."""
        await self.groups.delete_group(group_id)

    async def sample_lag(self, max_groups: int = 200) -> int:
        """Record every consumer group's lag once (at most ``max_groups``);
        returns how many groups were sampled (none while the cluster is down)."""
        if self.health.down:
            return 0
        return await self.groups.sample_lag(max_groups)

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

        topics, found_sizes, found_committed = await gather(self.reads.all_topics, sizes, committed)
        leaders = {
            TopicPartition(t, p.partition): (p.leader if p.leader >= 0 else None)
            for t, info in topics.items()
            for p in info.partitions
        }
        ends = await self.reads.offsets(list(leaders), "latest")
        snap = throughput.Snapshot(
            at=self.clock(),
            leaders=leaders,
            ends={tp: hit[0] for tp, hit in ends.items() if hit is not None},
            sizes=found_sizes,
            committed=found_committed,
        )
        self.rates.record(snap)
        return snap

    # -- messages (see :class:`~.messages.Messages`) -----------------------------------------

    async def browse(self, q: model.BrowseQuery) -> dict[str, Any]:
        """The messages of one browser page, the partitions' offsets and notes."""
        return await self.messages.browse(q)

    async def search(self, q: search.SearchQuery) -> dict[str, Any]:
        """The matches of one page of a search, newest first, and how far it got."""
        return await self.messages.search(q)

    async def produce(self, form: model.ProduceForm) -> Any:
        """Write the form's message (its topic must exist)."""
        return await self.messages.produce(form)

    async def run_producer(self, *, task_status: Any = anyio.TASK_STATUS_IGNORED) -> None:
        """Keep a producer open for the produce form until cancelled (run by the server)."""
        await self.messages.run_producer(task_status=task_status)

    # -- changes of topics ----------------------------------------------------------------

    async def partition_count(self, topic: str, partition: int | None = None) -> int:
        """How many partitions ``topic`` has (:class:`NotFound` when it does not
        exist); :class:`~.model.InputError` when it lacks ``partition``."""
        return await self.reads.partition_count(topic, partition)

    async def alter_configs(self, change: model.ConfigChange) -> None:
        """Set and reset the topic's configs (IncrementalAlterConfigs: the other
        settings stay)."""
        await self.reads.topic_info(change.topic)
        await self.admin.alter_topic_configs({change.topic: change.changes})

    async def add_partitions(self, topic: str, form: Mapping[str, str]) -> int:
        """Grow ``topic`` to the form's count (more than it has); returns it."""
        count = model.parse_partition_count(topic, form, await self.reads.partition_count(topic))
        await self.admin.create_partitions({topic: count})
        return count

    async def purge(self, form: model.PurgeForm) -> dict[TopicPartition, int]:
        """Delete the records before ``form.before`` (the high watermark when
        None) of one partition or all (DeleteRecords); returns the new log starts."""
        tps = await self.reads.partitions(form.topic, form.partition)
        before = -1 if form.before is None else form.before
        return await self.admin.delete_records(dict.fromkeys(tps, before))
