"""The admin client's group calls: consumer and share groups (KIP-932), their
members and their committed offsets, each asked of the group's coordinator.

A part of :class:`~trafka.sdk.admin.Admin` (see :mod:`.client_core`): what
goes on the wire and what an answer means is in :mod:`.groups` and
:mod:`.share_groups`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import anyio
import anyio.abc

from trafka.codec import ApiKey, KafkaError

from .._validate import (
    check_committed_offset,
    check_group_id,
    check_group_ids,
    check_names,
    check_offsets,
    check_str,
    check_topic_partitions,
    check_topics,
)
from ..consumer_types import TopicPartition
from ..group_protocol import offset_commit_request, offset_fetch_request
from ..transport import BrokerConnection
from ._common import answered, by_topic
from .client_core import AdminCore
from .groups import (
    GroupDescription,
    GroupListing,
    consumer_group_describe_request,
    delete_groups_request,
    describe_groups_request,
    group_types,
    leave_group_request,
    leaving_members,
    list_groups_request,
    not_classic,
    offset_delete_request,
    offset_fetch_all_request,
    read_alter_group_offsets,
    read_classic_group,
    read_consumer_group_describe,
    read_delete_groups,
    read_group_offsets,
    read_leave_group,
    read_list_groups,
    read_offset_delete,
    removing_all,
)
from .share_groups import (
    ShareGroupDescription,
    SharePartitionOffsetInfo,
    alter_share_group_offsets_request,
    delete_share_group_offsets_request,
    describe_share_group_offsets_request,
    read_alter_share_group_offsets,
    read_delete_share_group_offsets,
    read_describe_share_group_offsets,
    read_share_group_describe,
    share_group_describe_request,
    share_group_describe_unsupported,
    share_offsets_unsupported,
)

__all__ = ["GroupCalls"]


class GroupCalls(AdminCore):
    """The calls on groups, their members and their offsets."""

    async def list_groups(
        self, *, types: Iterable[str] | None = None, timeout_ms: int | None = None
    ) -> list[GroupListing]:
        """Every group on every broker.

        Args:
            types: only groups of these types (``classic``, ``consumer``,
                ``share``...; any case); None for all. Brokers answering ListGroups
                v5 filter themselves; older ones are filtered here (their groups
                are all ``classic``).
        """
        if types is not None:
            types = check_names("types", types, check_str, "group types")
        wanted = group_types(types)

        async def ask(conn: BrokerConnection) -> list[GroupListing]:
            body = list_groups_request(conn.version_for(ApiKey.LIST_GROUPS), wanted)
            return read_list_groups(await conn.request(ApiKey.LIST_GROUPS, body), wanted)

        return [
            g for listing in await self._per_node("list_groups", ask, timeout_ms) for g in listing
        ]

    async def describe_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, GroupDescription]:
        """State and members of groups."""
        group_ids = check_group_ids("group_ids", group_ids)
        ids = list(dict.fromkeys(group_ids))
        out: dict[str, GroupDescription] = {}

        async def attempt(deadline: float) -> dict[str, GroupDescription]:
            for gid in ids:
                if gid in out:
                    continue
                conn = await self._coordinator(gid)
                resp = await conn.request(
                    ApiKey.DESCRIBE_GROUPS,
                    describe_groups_request(conn.version_for(ApiKey.DESCRIBE_GROUPS), gid),
                )
                for g in resp.groups:
                    if g.group_id != gid:
                        continue
                    if not_classic(g):
                        found = await self._describe_consumer_group(conn, gid)
                        if found is not None:
                            out[gid] = found
                            continue
                    out[gid] = read_classic_group(g)
            return answered(ids, out, "describing group")

        return await self._calls.run("describe_groups", timeout_ms, attempt)

    async def _describe_consumer_group(
        self, conn: BrokerConnection, group_id: str
    ) -> GroupDescription | None:
        """ConsumerGroupDescribe ``group_id``; None when the broker lacks the API or
        the group is not a consumer group."""
        if not conn.supports(ApiKey.CONSUMER_GROUP_DESCRIBE):
            return None
        resp = await conn.request(
            ApiKey.CONSUMER_GROUP_DESCRIBE, consumer_group_describe_request(group_id)
        )
        return read_consumer_group_describe(resp, group_id)

    async def describe_share_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, ShareGroupDescription]:
        """State, epochs and members of share groups (ShareGroupDescribe, KIP-932).

        Raises:
            KafkaError: for the first group that failed, in the order given:
                GROUP_ID_NOT_FOUND for a group that does not exist or is not a
                share group; UNSUPPORTED_VERSION from a broker without share groups.
        """
        group_ids = check_group_ids("group_ids", group_ids)
        ids = list(dict.fromkeys(group_ids))
        out: dict[str, ShareGroupDescription] = {}

        async def attempt(deadline: float) -> dict[str, ShareGroupDescription]:
            for gid in ids:
                if gid in out:
                    continue
                conn = await self._coordinator(gid)
                if not conn.supports(ApiKey.SHARE_GROUP_DESCRIBE):
                    raise share_group_describe_unsupported(gid)
                resp = await conn.request(
                    ApiKey.SHARE_GROUP_DESCRIBE, share_group_describe_request(gid)
                )
                found = read_share_group_describe(resp, gid)
                if found is not None:
                    out[gid] = found
            return answered(ids, out, "describing share group")

        return await self._calls.run("describe_share_groups", timeout_ms, attempt)

    async def delete_groups(
        self, group_ids: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Delete empty groups (their committed offsets go too)."""
        group_ids = check_group_ids("group_ids", group_ids)
        pending = list(dict.fromkeys(group_ids))

        async def attempt(deadline: float) -> None:
            while pending:
                gid = pending[0]
                conn = await self._coordinator(gid)
                read_delete_groups(
                    await conn.request(ApiKey.DELETE_GROUPS, delete_groups_request(gid)), gid
                )
                pending.pop(0)

        await self._calls.run("delete_groups", timeout_ms, attempt)

    async def remove_members_from_consumer_group(
        self,
        group_id: str,
        members: Iterable[str] | None = None,
        *,
        reason: str | None = None,
        timeout_ms: int | None = None,
    ) -> dict[str, KafkaError | None]:
        """Remove members from a group, as Java's ``removeMembersFromConsumerGroup``:
        one LeaveGroup (v3+, KIP-345) to the group's coordinator on their behalf.

        Meant for static members (``group.instance.id``) that are gone: they send
        no LeaveGroup when they close, so the group would wait a whole session
        timeout before giving their partitions to the others. A removed member
        still running finds out at its next heartbeat (UNKNOWN_MEMBER_ID) and
        joins again. Groups of the consumer protocol (KIP-848) take it too: the
        member is fenced and the group's assignment recomputed.

        Args:
            group_id: the group.
            members: the group instance ids of the members to remove (Java's
                ``MemberToRemove`` names a member by nothing else). None removes
                every member (Java's "removeAll"): the group is described first,
                and each member is named by its instance id, or by its member id
                when it has none.
            reason: why, for the broker's log (LeaveGroup v5+; Kafka 3.2);
                default :data:`DEFAULT_LEAVE_GROUP_REASON`; cut to 255 characters.

        Returns:
            Per member, by instance id (by member id for a dynamic member of a
            removeAll), None when it was removed, else its error:
            UNKNOWN_MEMBER_ID for an instance id the group does not have (for
            every member of a group that does not exist), FENCED_INSTANCE_ID.
            A removeAll of a group without members returns ``{}`` and sends
            nothing (where Java's client fails: "leaving members should not be
            empty").

        Raises:
            ValueError: ``members`` given but empty.
            KafkaError: for the group as a whole: GROUP_AUTHORIZATION_FAILED
                (READ on the group is needed), GROUP_ID_NOT_FOUND when a removeAll
                finds no such group, UNSUPPORTED_VERSION from a broker older than
                LeaveGroup v3 (Kafka 2.4). A coordinator that is loading, moved
                or not available is waited for, as Java does.
        """
        check_group_id("group_id", group_id)
        if members is not None:
            members = check_names("members", members, check_str, "group instance ids")
        check_str("reason", reason, empty=True, none=True)
        started = anyio.current_time()
        if members is not None:
            identities = leaving_members(members)
        else:
            desc = (await self.describe_groups([group_id], timeout_ms=timeout_ms))[group_id]
            identities = removing_all(desc)
            if not identities:
                return {}
            used_ms = int((anyio.current_time() - started) * 1000)
            timeout_ms = max(0, self._timeout_ms(timeout_ms) - used_ms)

        async def attempt(deadline: float) -> dict[str, KafkaError | None]:
            conn = await self._coordinator(group_id)
            body = leave_group_request(
                conn.version_for(ApiKey.LEAVE_GROUP), group_id, identities, reason
            )
            return read_leave_group(
                await conn.request(ApiKey.LEAVE_GROUP, body), group_id, identities
            )

        return await self._calls.run("remove_members_from_consumer_group", timeout_ms, attempt)

    async def list_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, int]:
        """Committed offsets of a group (all its partitions when ``partitions`` is None)."""
        check_group_id("group_id", group_id)
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        wanted = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def attempt(deadline: float) -> dict[TopicPartition, int]:
            conn = await self._coordinator(group_id)
            v = conn.version_for(ApiKey.OFFSET_FETCH)
            if wanted is None:
                body = offset_fetch_all_request(v, group_id)
            else:
                body = offset_fetch_request(v, group_id, wanted)
            return read_group_offsets(v, await conn.request(ApiKey.OFFSET_FETCH, body), group_id)

        return await self._calls.run("list_consumer_group_offsets", timeout_ms, attempt)

    async def alter_consumer_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Commit offsets for a group that has no active members."""
        check_group_id("group_id", group_id)
        offsets = check_offsets("offsets", offsets, check_value=check_committed_offset)
        wanted = {TopicPartition(*tp): o for tp, o in offsets.items()}

        async def attempt(deadline: float) -> None:
            conn = await self._coordinator(group_id)
            body = offset_commit_request(conn.version_for(ApiKey.OFFSET_COMMIT), group_id, wanted)
            read_alter_group_offsets(await conn.request(ApiKey.OFFSET_COMMIT, body), group_id)

        await self._calls.run("alter_consumer_group_offsets", timeout_ms, attempt)

    async def delete_consumer_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Delete a group's committed offsets of ``partitions`` (OffsetDelete, KIP-496).

        While the group has members, none may subscribe to the partitions' topics;
        an offset that was never committed is deleted just as well (nothing happens).

        Raises:
            KafkaError: GROUP_ID_NOT_FOUND or NON_EMPTY_GROUP (the group), or
                GROUP_SUBSCRIBED_TO_TOPIC for a partition whose topic a member
                subscribes to (the others' offsets are deleted even so, as Kafka does).
        """
        check_group_id("group_id", group_id)
        partitions = check_topic_partitions("partitions", partitions)
        body = offset_delete_request(group_id, by_topic(partitions))

        async def attempt(deadline: float) -> None:
            conn = await self._coordinator(group_id)
            read_offset_delete(await conn.request(ApiKey.OFFSET_DELETE, body), group_id)

        await self._calls.run("delete_consumer_group_offsets", timeout_ms, attempt)

    async def _share_offsets_coordinator(self, group_id: str, api_key: int, what: str) -> Any:
        conn = await self._coordinator(group_id)
        if not conn.supports(api_key):
            raise share_offsets_unsupported(api_key, what)
        return conn

    async def list_share_group_offsets(
        self,
        group_id: str,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, SharePartitionOffsetInfo | None]:
        """A share group's start offsets (and lags) per partition
        (DescribeShareGroupOffsets, sent to the group's coordinator).

        Args:
            group_id: the share group.
            partitions: the partitions to report, in the order of the answer;
                None for every partition the group has share state for (by topic
                and partition).

        Returns:
            Per partition its :class:`SharePartitionOffsetInfo`, or None where the
            group has no share state (the start offset -1: never started, its
            state deleted, a topic that does not exist). As in Kafka, a group
            that does not exist or is not a share group is no error: it has no
            state anywhere.

        Raises:
            KafkaError: for the group (INVALID_GROUP_ID, UNSUPPORTED_VERSION from a
                broker before Kafka 4.1), or for the first partition the broker
                reports an error for.
        """
        check_group_id("group_id", group_id)
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        wanted = (
            None
            if partitions is None
            else list(dict.fromkeys(TopicPartition(*tp) for tp in partitions))
        )
        body = describe_share_group_offsets_request(group_id, wanted)
        what = f"listing the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> dict[TopicPartition, SharePartitionOffsetInfo | None]:
            conn = await self._share_offsets_coordinator(
                group_id, ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, what
            )
            resp = await conn.request(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS, body)
            return read_describe_share_group_offsets(
                conn.version_for(ApiKey.DESCRIBE_SHARE_GROUP_OFFSETS), resp, group_id, wanted, what
            )

        return await self._calls.run("list_share_group_offsets", timeout_ms, attempt)

    async def alter_share_group_offsets(
        self,
        group_id: str,
        offsets: Mapping[TopicPartition, int] | Mapping[tuple[str, int], int],
        *,
        timeout_ms: int | None = None,
    ) -> None:
        """Set a share group's start offsets (AlterShareGroupOffsets). Each
        partition named starts afresh at its offset: records from it on are
        delivered again (with delivery count 1), records below it never.

        The group must have no members; a group id no group has becomes an empty
        share group, as in Kafka.

        Raises:
            KafkaError: for the group (NON_EMPTY_GROUP while it has members,
                GROUP_ID_NOT_FOUND for a group of another type, INVALID_GROUP_ID,
                UNSUPPORTED_VERSION from a broker before Kafka 4.1), or for the
                first partition, in the order given, that was not set
                (UNKNOWN_TOPIC_OR_PARTITION; from brokerlite also
                OFFSET_OUT_OF_RANGE past the log end, INVALID_REQUEST for a
                negative offset); the others are set even so.
        """
        check_group_id("group_id", group_id)
        offsets = check_offsets("offsets", offsets)
        wanted = {TopicPartition(*tp): o for tp, o in offsets.items()}
        if not wanted:
            return
        body = alter_share_group_offsets_request(group_id, wanted)
        what = f"altering the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> None:
            conn = await self._share_offsets_coordinator(
                group_id, ApiKey.ALTER_SHARE_GROUP_OFFSETS, what
            )
            read_alter_share_group_offsets(
                await conn.request(ApiKey.ALTER_SHARE_GROUP_OFFSETS, body), group_id, wanted, what
            )

        await self._calls.run("alter_share_group_offsets", timeout_ms, attempt)

    async def delete_share_group_offsets(
        self, group_id: str, topics: Iterable[str], *, timeout_ms: int | None = None
    ) -> None:
        """Forget a share group's state of whole topics (DeleteShareGroupOffsets):
        the next member starts their partitions by the group's
        ``share.auto.offset.reset``.

        The group must have no members.

        Raises:
            KafkaError: for the group (GROUP_ID_NOT_FOUND for none or one of
                another type, NON_EMPTY_GROUP while it has members,
                UNSUPPORTED_VERSION from a broker before Kafka 4.1), or for the
                first topic, in the order given, whose state was not deleted
                (UNKNOWN_TOPIC_OR_PARTITION for a topic that does not exist or
                that the group has no state of); the others are deleted even so.
        """
        check_group_id("group_id", group_id)
        topics = check_topics("topics", topics)
        pending = list(dict.fromkeys(topics))
        if not pending:
            return
        what = f"deleting the offsets of share group {group_id!r}"

        async def attempt(deadline: float) -> None:
            conn = await self._share_offsets_coordinator(
                group_id, ApiKey.DELETE_SHARE_GROUP_OFFSETS, what
            )
            body = delete_share_group_offsets_request(group_id, pending)
            read_delete_share_group_offsets(
                await conn.request(ApiKey.DELETE_SHARE_GROUP_OFFSETS, body), pending, what
            )

        await self._calls.run("delete_share_group_offsets", timeout_ms, attempt)
