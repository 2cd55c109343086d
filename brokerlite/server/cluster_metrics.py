"""The whole cluster's consumer-group lag and offline partitions, from any broker.

A broker's ``/metrics`` serves its own part of the cluster (a group's series
from its coordinator, a partition's from its leader, cluster-wide ones from
the controller), so that adding up every broker's scrape counts nothing twice.
``/metrics/cluster`` (this module) serves the whole cluster's view from any one
broker, as kafka_exporter gathers it through one client: every group's
``kafka_consumergroup_lag``, ``_lag_sum``, ``_current_offset`` and ``_members``,
and ``kafka_controller_kafkacontroller_offlinepartitionscount``.

Rules:

* Gathered at the scrape, with Kafka's requests over inter-broker connections
  (:class:`~trafka.brokerlite.cluster.inter_broker.InterBrokerConnection`) to
  every broker registered in this broker's cluster image, itself included, all
  at once: ListGroups (the groups it coordinates), OffsetFetch v8 for all of
  them (their committed offsets), DescribeGroups and ConsumerGroupDescribe
  (their members). Then, from each partition's leader, the high watermark
  (ListOffsets, latest) of every partition a group committed on.
* Bounded: each of the two rounds gives every broker :data:`ROUND_TIMEOUT_S`,
  so a scrape answers within twice that; one gathering runs at a time (a
  scrape arriving meanwhile waits for it and gathers afresh).
* Unknown is explicit, never estimated: ``trafka_cluster_broker_answered{node}``
  is 0 for a broker that did not answer everything in time (unreachable, dead,
  an error), and its groups are left out; a partition whose leader is unknown,
  offline or did not answer has its committed offset served but no lag, and
  its group's topic no ``_lag_sum``.
* The offline partitions are counted in this broker's own cluster image, which
  every broker reads from ZooKeeper: partitions whose leader is -1.
* On a single node the broker's own state is the whole cluster's: the same
  series as ``/metrics`` gives for its groups, read locally.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator
from typing import Any

import trio

from trafka.codec import ApiKey
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k02_list_offsets as lo
from trafka.codec.messages import k09_offset_fetch as of
from trafka.codec.messages import k15_describe_groups as dg
from trafka.codec.messages import k16_list_groups as lg
from trafka.codec.messages import k69_consumer_group_describe as cgd

from ..broker import Broker
from ..cluster.inter_broker import InterBrokerConnection
from ..metrics import committed, consumer_group_families, offline_partitions

__all__ = ["ROUND_TIMEOUT_S", "ClusterMetrics"]

log = logging.getLogger("trafka.brokerlite.metrics")

#: What each broker gets to answer in each of the two rounds of a gathering.
ROUND_TIMEOUT_S = 3.0
_LATEST = -1  # ListOffsets: the high watermark (read_uncommitted)

# A group's answer without it, and without the broker's answer being incomplete:
# the group moved to another coordinator, or was deleted, meanwhile.
_GONE = (ErrorCode.NOT_COORDINATOR, ErrorCode.GROUP_ID_NOT_FOUND)


class _Incomplete(Exception):
    """A broker answered with an error that leaves its part unknown (a refusal...)."""


# (group, topic, partition, committed offset, lag or None) as metrics.py builds them.
Committed = tuple[str, str, int, int, int | None]


@dataclasses.dataclass(slots=True)
class _Coordinated:
    """What one broker answered of the groups it coordinates."""

    offsets: dict[str, dict[tuple[str, int], int]] = dataclasses.field(default_factory=dict)
    members: dict[str, int] = dataclasses.field(default_factory=dict)


class ClusterMetrics:
    """``/metrics/cluster`` of one broker (see the module rules).

    Args:
        broker: the broker core (touched only from its trio thread, as here).
    """

    def __init__(self, broker: Broker) -> None:
        self._broker = broker
        self._lock = trio.Lock()

    async def exposition(self) -> bytes:
        """The Prometheus text of the cluster's view now (gathered first)."""
        from prometheus_client import CollectorRegistry, generate_latest

        async with self._lock:
            families = await self._families()
        registry = CollectorRegistry(auto_describe=False)
        registry.register(_Fixed(families))
        return generate_latest(registry)

    async def _families(self) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        broker = self._broker
        cluster = broker.cluster
        if cluster is None:
            return [*consumer_group_families(broker, list(committed(broker))), _offline(broker)]
        image = cluster.image
        nodes = sorted(image.brokers)
        conns: dict[int, InterBrokerConnection] = {}
        groups: dict[int, _Coordinated] = {}
        answered = dict.fromkeys(nodes, False)
        try:
            async with trio.open_nursery() as nursery:
                for node in nodes:
                    nursery.start_soon(self._ask_coordinator, node, conns, groups)
            wanted: dict[int, set[tuple[str, int]]] = {}
            for found in groups.values():
                for offsets in found.offsets.values():
                    for tp in offsets:
                        state = image.states.get(tp)
                        if state is not None and state.leader >= 0:
                            wanted.setdefault(state.leader, set()).add(tp)
            ends: dict[tuple[str, int], int] = {}
            failed: set[int] = set()
            async with trio.open_nursery() as nursery:
                for node, partitions in wanted.items():
                    nursery.start_soon(self._ask_leader, node, partitions, conns, ends, failed)
        finally:
            with trio.CancelScope(shield=True):
                for conn in conns.values():
                    await conn.aclose()
        for node in nodes:
            answered[node] = node in groups and node not in failed
        rows: list[Committed] = []
        for found in groups.values():
            for group, offsets in sorted(found.offsets.items()):
                for (topic, partition), offset in sorted(offsets.items()):
                    end = ends.get((topic, partition))
                    lag = None if end is None else max(end - offset, 0)
                    rows.append((group, topic, partition, offset, lag))
        members = {g: n for found in groups.values() for g, n in found.members.items()}
        up = GaugeMetricFamily(
            "trafka_cluster_broker_answered",
            "1 when the broker answered this gathering in time, else 0 (its part unknown).",
            labels=["node"],
        )
        for node, ok in answered.items():
            up.add_metric([str(node)], int(ok))
        return [*consumer_group_families(broker, rows, members), _offline(broker), up]

    async def _ask_coordinator(
        self, node: int, conns: dict[int, InterBrokerConnection], out: dict[int, _Coordinated]
    ) -> None:
        """Round one with ``node``: the groups it coordinates, their offsets and members."""
        with trio.move_on_after(ROUND_TIMEOUT_S):
            try:
                conn = await InterBrokerConnection.to_node(self._broker, node, "metrics")
                conns[node] = conn
                out[node] = await _coordinated(conn)
            except Exception as exc:  # a dead or odd broker: its part stays unknown
                log.debug("cluster metrics: broker %d did not answer: %r", node, exc)

    async def _ask_leader(
        self,
        node: int,
        partitions: set[tuple[str, int]],
        conns: dict[int, InterBrokerConnection],
        ends: dict[tuple[str, int], int],
        failed: set[int],
    ) -> None:
        """Round two with ``node``: the high watermarks of ``partitions`` it leads."""
        conn = conns.get(node)
        if conn is None:
            failed.add(node)
            return
        with trio.move_on_after(ROUND_TIMEOUT_S) as waited:
            try:
                ends.update(await _high_watermarks(conn, partitions))
                return
            except Exception as exc:
                log.debug("cluster metrics: broker %d did not answer: %r", node, exc)
        failed.add(node)
        if waited.cancelled_caught:
            log.debug("cluster metrics: broker %d did not answer in time", node)


async def _coordinated(conn: InterBrokerConnection) -> _Coordinated:
    found = _Coordinated()
    listed = await conn.request(ApiKey.LIST_GROUPS, lg.ListGroupsRequest(), version=5)
    if listed.error_code:
        raise ConnectionError(f"ListGroups answered error {listed.error_code}")
    kinds = {g.group_id: g.group_type for g in listed.groups if g.group_type != "share"}
    if not kinds:
        return found
    fetched = await conn.request(
        ApiKey.OFFSET_FETCH,
        of.OffsetFetchRequest(
            groups=[
                of.OffsetFetchRequest.OffsetFetchRequestGroup(group_id=g, topics=None)
                for g in kinds
            ]
        ),
        version=8,
    )
    for group in fetched.groups:
        if group.error_code in _GONE:
            continue  # moved to another coordinator, or deleted, meanwhile
        if group.error_code:
            raise _Incomplete(f"OffsetFetch of {group.group_id!r}: error {group.error_code}")
        found.offsets[group.group_id] = {
            (topic.name, p.partition_index): p.committed_offset
            for topic in group.topics
            for p in topic.partitions
            if not p.error_code and p.committed_offset >= 0
        }
    classic = [g for g, kind in kinds.items() if kind != "consumer"]
    if classic:
        described = await conn.request(
            ApiKey.DESCRIBE_GROUPS, dg.DescribeGroupsRequest(groups=classic), version=5
        )
        for d in described.groups:
            if d.error_code not in (0, *_GONE):
                raise _Incomplete(f"DescribeGroups of {d.group_id!r}: error {d.error_code}")
            if not d.error_code and d.group_state != "Dead":
                found.members[d.group_id] = len(d.members)
    consumer = [g for g, kind in kinds.items() if kind == "consumer"]
    if consumer:
        described = await conn.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE,
            cgd.ConsumerGroupDescribeRequest(group_ids=consumer),
            version=0,
        )
        for c in described.groups:
            if c.error_code not in (0, *_GONE):
                raise _Incomplete(f"ConsumerGroupDescribe of {c.group_id!r}: error {c.error_code}")
            if not c.error_code:
                found.members[c.group_id] = len(c.members)
    return found


async def _high_watermarks(
    conn: InterBrokerConnection, partitions: set[tuple[str, int]]
) -> dict[tuple[str, int], int]:
    by_topic: dict[str, list[int]] = {}
    for topic, partition in sorted(partitions):
        by_topic.setdefault(topic, []).append(partition)
    answer = await conn.request(
        ApiKey.LIST_OFFSETS,
        lo.ListOffsetsRequest(
            replica_id=-1,
            topics=[
                lo.ListOffsetsRequest.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        lo.ListOffsetsRequest.ListOffsetsPartition(
                            partition_index=p, timestamp=_LATEST
                        )
                        for p in indexes
                    ],
                )
                for topic, indexes in by_topic.items()
            ],
        ),
        version=7,
    )
    return {
        (topic.name, p.partition_index): p.offset
        for topic in answer.topics
        for p in topic.partitions
        if not p.error_code and p.offset >= 0
    }


def _offline(broker: Broker) -> Any:
    from prometheus_client.core import GaugeMetricFamily

    return GaugeMetricFamily(
        "kafka_controller_kafkacontroller_offlinepartitionscount",
        "Partitions of the cluster without a leader (as this broker's metadata has them).",
        value=offline_partitions(broker),
    )


class _Fixed:
    """A collector of families already built."""

    def __init__(self, families: list[Any]) -> None:
        self._families = families

    def collect(self) -> Iterator[Any]:
        return iter(self._families)
