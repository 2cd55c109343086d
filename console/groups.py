"""A cluster's consumer and share groups, asked for the console's pages: a
group with its lag, the reset of its offsets, its deletion, and the lag
samples of every group.

Rules:

* DescribeGroups knows classic (and KIP-848) consumer groups; a share group
  (KIP-932) is Dead or unknown there and is asked with DescribeShareGroups,
  from a broker that has it. A group neither knows is :class:`~.reads.NotFound`.
* Kafka resets the offsets of, and deletes, only an inactive consumer group;
  the console refuses the others before asking (the broker would too), and
  a share group's offsets are not reset here.
* Every group page shown records a lag sample in the history, as the
  sampler's rounds do (:meth:`Groups.sample_lag`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import Any

from trafka.codec import ErrorCode, KafkaError
from trafka.sdk.admin import Admin, GroupListing
from trafka.sdk.fetcher import TopicPartition

from . import model
from .model import InputError, LagHistory
from .reads import ClusterReads, NotFound, gather

__all__ = ["Groups"]

log = logging.getLogger("trafka.console")


class Groups:
    """A cluster's groups, through ``admin``, with their lag kept in ``history``."""

    def __init__(
        self,
        admin: Admin,
        reads: ClusterReads,
        history: LagHistory,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.admin = admin
        self.reads = reads
        self.history = history
        self.clock = clock  # seconds since the epoch: the lag samples' times

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
            ends = await self.reads.ends(tps)
            view = model.group_view(desc, committed, ends)
        self.history.record(group_id, self.clock(), view.lags(), view.no_commit, view.unknown_lag)
        return view

    async def member_counts(self, listings: list[GroupListing]) -> dict[str, int]:
        """Members of each listed group now (the admin's describe_groups, a
        DescribeGroups to each group's coordinator, and describe_share_groups
        for share groups); groups whose description failed are left out (the
        list shows "-": unknown)."""
        counts: dict[str, int] = {}
        share = [g.group_id for g in listings if g.group_type == "share"]
        others = [g.group_id for g in listings if g.group_type != "share"]
        asks: list[tuple[list[str], Callable[[list[str]], Awaitable[Any]]]] = [
            (others, self.admin.describe_groups),
            (share, self.admin.describe_share_groups),
        ]
        for ids, describe in asks:
            if not ids:
                continue
            try:
                described = await describe(ids)
            except KafkaError as exc:
                log.info("members of %d groups unknown: %s", len(ids), exc)
                continue
            counts.update({gid: len(d.members) for gid, d in described.items()})
        return counts

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
            tps = await self.reads.partitions(form.topic, form.partition)

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
        return model.share_group_view(share, offsets, await self.reads.ends(tps))

    async def sample_lag(self, max_groups: int = 200) -> int:
        """Record every consumer group's lag once (at most ``max_groups``);
        returns how many groups were sampled."""
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
