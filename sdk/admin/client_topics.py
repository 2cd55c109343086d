"""The admin client's topic and partition calls: listing, describing, creating and
deleting topics, adding partitions, leader elections, partition reassignments,
and the records of a partition (ListOffsets, DeleteRecords).

A part of :class:`~trafka.sdk.admin.Admin` (see :mod:`.client_core`): what
goes on the wire and what an answer means is in :mod:`.topics`,
:mod:`.partitions` and :mod:`.records`; here, where each request goes (the
controller, each partition's leader) and what is retried.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, overload

import anyio
import anyio.abc

from trafka.codec import ApiKey, KafkaError, TrafkaError

from .._validate import check_bool, check_offsets, check_topic_partitions, check_topics
from ..consumer_types import TopicPartition
from ..metadata import TopicInfo
from ..transport import BrokerConnection
from ._common import (
    Result,
    answer_timeout_ms,
    by_topic,
    check_offset_spec,
    check_reassignments,
    first_failure,
    settle,
)
from .client_core import AdminCore
from .partitions import (
    PartitionReassignment,
    alter_partition_reassignments_request,
    elect_leaders_request,
    election_wait,
    list_partition_reassignments_request,
    read_alter_partition_reassignments,
    read_elect_leaders,
    read_list_partition_reassignments,
)
from .partitions import election_type as election_type_code
from .partitions import reassignments as partition_reassignments
from .records import (
    delete_records_request,
    list_offsets_request,
    offset_targets,
    read_delete_records,
    read_list_offsets,
)
from .topics import (
    NewPartitions,
    NewTopic,
    check_new_topics,
    check_new_totals,
    create_partitions_request,
    create_topics_request,
    delete_topics_request,
    new_topics,
    read_create_partitions,
    read_create_topics,
    read_delete_topics,
    read_describe_topics,
    read_list_topics,
)

__all__ = ["TopicCalls"]


class TopicCalls(AdminCore):
    """The calls on topics, partitions and their records."""

    async def list_topics(
        self, *, include_internal: bool = False, timeout_ms: int | None = None
    ) -> dict[str, int]:
        """Every topic and its partition count.

        Asked of the controller (when it is known), which answers a topic change
        only once its own metadata has it: a change this client made is in the
        next answer, while another broker may learn of it a moment later.
        """
        check_bool("include_internal", include_internal)

        async def attempt(deadline: float) -> dict[str, int]:
            resp = await self._controller_metadata(None)
            return read_list_topics(resp, include_internal=include_internal)

        return await self._calls.run("list_topics", timeout_ms, attempt)

    async def describe_topics(
        self, names: Iterable[str], *, timeout_ms: int | None = None
    ) -> dict[str, TopicInfo]:
        """Partitions, leaders, replicas and in-sync replicas of topics (never creates them).

        Asked of the controller, as :meth:`list_topics` is, so a change this
        client made (a topic created, partitions added) is in the answer.

        Raises:
            KafkaError: a topic does not exist (UNKNOWN_TOPIC_OR_PARTITION) or has another error.
        """
        names = check_topics("names", names)
        names = list(names)

        async def attempt(deadline: float) -> dict[str, TopicInfo]:
            return read_describe_topics(await self._controller_metadata(names), names)

        return await self._calls.run("describe_topics", timeout_ms, attempt)

    async def _change_topics(
        self,
        what: str,
        label: str,
        names: list[str],
        timeout_ms: int | None,
        send: Callable[[BrokerConnection, list[str], float], Awaitable[Iterable[Result]]],
    ) -> None:
        """A topic operation on the controller, per name: ``send(conn, names, left)``
        sends the names still open, with ``left`` seconds of the call's bound, and
        returns ``(name, error code, message)`` per name; see :func:`~trafka.sdk.admin._common.settle` for
        what is sent again. Raises the first failure in ``names`` order."""
        pending = set(names)
        failed: dict[str, KafkaError] = {}

        async def attempt(deadline: float) -> None:
            conn = await self._controller()
            left = max(0.0, deadline - anyio.current_time())
            results = await send(conn, [n for n in names if n in pending], left)
            settle(results, pending, failed, label)

        try:
            await self._calls.run(what, timeout_ms, attempt)
        finally:
            self._cluster.metadata.request_update()
        first_failure(names, failed)

    async def create_topics(
        self,
        topics: Iterable[NewTopic | str],
        *,
        num_partitions: int = -1,
        replication_factor: int = -1,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Create topics (strings use ``num_partitions`` / ``replication_factor``).

        ``timeout_ms`` bounds the call; the controller's, a little less (:func:`~._common.answer_timeout_ms`).
        A topic is retried only on NOT_CONTROLLER or THROTTLING_QUOTA_EXCEEDED
        (nothing was done); after a lost answer, a retry can meet the topic its
        first attempt created (TOPIC_ALREADY_EXISTS), as in Kafka's AdminClient.

        Raises:
            KafkaError: e.g. TOPIC_ALREADY_EXISTS, INVALID_PARTITIONS, INVALID_CONFIG.
        """
        topics = check_new_topics(topics, num_partitions, replication_factor)
        check_bool("validate_only", validate_only)
        items = new_topics(topics, num_partitions, replication_factor)

        async def send(conn: BrokerConnection, names: list[str], left: float) -> list[Result]:
            body = create_topics_request(
                conn.version_for(ApiKey.CREATE_TOPICS),
                [items[n] for n in names],
                timeout_ms=answer_timeout_ms(left),
                validate_only=validate_only,
            )
            return read_create_topics(
                await conn.request(ApiKey.CREATE_TOPICS, body, timeout=left + 5)
            )

        await self._change_topics("create_topics", "creating topic", list(items), timeout_ms, send)

    async def delete_topics(self, names: Iterable[str], *, timeout_ms: int | None = None) -> None:
        """Delete topics (retried as :meth:`create_topics` retries).

        Raises:
            KafkaError: e.g. UNKNOWN_TOPIC_OR_PARTITION.
        """
        names = check_topics("names", names)

        async def send(conn: BrokerConnection, todo: list[str], left: float) -> list[Result]:
            body = delete_topics_request(
                conn.version_for(ApiKey.DELETE_TOPICS), todo, timeout_ms=answer_timeout_ms(left)
            )
            return read_delete_topics(
                await conn.request(ApiKey.DELETE_TOPICS, body, timeout=left + 5)
            )

        wanted = list(dict.fromkeys(names))
        try:
            await self._change_topics("delete_topics", "deleting topic", wanted, timeout_ms, send)
        finally:
            for n in wanted:
                # Gone or not, a cached entry is stale; a lookup will tell.
                self._cluster.metadata.forget_topic(n)

    async def create_partitions(
        self,
        new_totals: Mapping[str, int | NewPartitions],
        *,
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> None:
        """Grow topics to the given partition counts (retried as :meth:`create_topics`);
        a :class:`NewPartitions` also says where the new partitions go.

        Raises:
            KafkaError: e.g. INVALID_PARTITIONS (not more than now),
                INVALID_REPLICA_ASSIGNMENT.
        """
        totals = check_new_totals(new_totals)
        check_bool("validate_only", validate_only)

        async def send(conn: BrokerConnection, names: list[str], left: float) -> list[Result]:
            body = create_partitions_request(
                {n: totals[n] for n in names},
                timeout_ms=answer_timeout_ms(left),
                validate_only=validate_only,
            )
            return read_create_partitions(
                await conn.request(ApiKey.CREATE_PARTITIONS, body, timeout=left + 5)
            )

        await self._change_topics(
            "create_partitions", "creating partitions of", list(totals), timeout_ms, send
        )

    async def elect_leaders(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        election_type: str = "preferred",
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Ask the controller to elect leaders (ElectLeaders, KIP-460).

        Args:
            partitions: the partitions; None for every partition that needs one.
            election_type: ``preferred`` (the first replica, if in sync) or
                ``unclean`` (any replica, even out of sync: may lose records).

        Returns:
            Per partition, None when a leader was elected, else the partition's error:
            ELECTION_NOT_NEEDED when its leader already is the one wanted (as Java's
            AdminClient reports it), UNKNOWN_TOPIC_OR_PARTITION... With ``partitions=None``
            only the partitions the controller acted on are listed. The controller is
            asked to answer before the client stops waiting (:func:`.partitions.election_wait`).

        Raises:
            ValueError: an unknown election type.
            KafkaError: the request as a whole was refused.
        """
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        election = election_type_code(election_type)
        topics = None if partitions is None else by_topic(partitions)
        request_ms = self.config.request_timeout_ms

        async def attempt(deadline: float) -> dict[TopicPartition, KafkaError | None]:
            conn = await self._controller()
            wait, answer_ms = election_wait(request_ms, deadline - anyio.current_time())
            version = conn.version_for(ApiKey.ELECT_LEADERS)
            body = elect_leaders_request(version, election, topics, timeout_ms=answer_ms)
            return read_elect_leaders(await conn.request(ApiKey.ELECT_LEADERS, body, timeout=wait))

        return await self._calls.run("elect_leaders", timeout_ms, attempt)

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, Sequence[int] | None]
        | Mapping[tuple[str, int], Sequence[int] | None],
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, KafkaError | None]:
        """Move partitions to new replica lists, or cancel a move (None), through the
        controller (AlterPartitionReassignments, KIP-455).

        Returns:
            Per partition, None when the controller took the change, else its error
            (INVALID_REPLICA_ASSIGNMENT, NO_REASSIGNMENT_IN_PROGRESS,
            UNKNOWN_TOPIC_OR_PARTITION...). A move goes on after the answer; follow
            it with :meth:`list_partition_reassignments`.

        Raises:
            KafkaError: the request as a whole was refused.
        """
        reassignments = check_reassignments(reassignments)
        wanted = partition_reassignments(reassignments)
        body = alter_partition_reassignments_request(
            wanted, timeout_ms=self._timeout_ms(timeout_ms)
        )

        async def attempt(deadline: float) -> dict[TopicPartition, KafkaError | None]:
            conn = await self._controller()
            return read_alter_partition_reassignments(
                await conn.request(ApiKey.ALTER_PARTITION_REASSIGNMENTS, body), wanted
            )

        return await self._calls.run("alter_partition_reassignments", timeout_ms, attempt)

    async def list_partition_reassignments(
        self,
        partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]] | None = None,
        *,
        timeout_ms: int | None = None,
    ) -> dict[TopicPartition, PartitionReassignment]:
        """The partition moves under way (ListPartitionReassignments, KIP-455): all of
        them, or those of ``partitions``. Partitions not being moved are left out."""
        if partitions is not None:
            partitions = check_topic_partitions("partitions", partitions)
        body = list_partition_reassignments_request(
            partitions, timeout_ms=self._timeout_ms(timeout_ms)
        )

        async def attempt(deadline: float) -> dict[TopicPartition, PartitionReassignment]:
            conn = await self._controller()
            return read_list_partition_reassignments(
                await conn.request(ApiKey.LIST_PARTITION_REASSIGNMENTS, body)
            )

        return await self._calls.run("list_partition_reassignments", timeout_ms, attempt)

    @overload
    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        timeout_ms: int | None = None,
        partial: Literal[False] = False,
    ) -> dict[TopicPartition, tuple[int, int] | None]: ...

    @overload
    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        timeout_ms: int | None = None,
        partial: Literal[True],
    ) -> dict[TopicPartition, tuple[int, int] | TrafkaError | None]: ...

    async def list_offsets(
        self,
        specs: Mapping[TopicPartition, str | int],
        *,
        timeout_ms: int | None = None,
        partial: bool = False,
    ) -> dict[TopicPartition, Any]:
        """Offsets by ``"earliest"``, ``"latest"`` or a timestamp: ``(offset, timestamp)`` or None.

        Args:
            specs: what to look up, per partition.
            timeout_ms: the call's bound (default ``default.api.timeout.ms``).
            partial: answer what can be answered: a partition that is offline
                (no leader, its replicas offline, in metadata refreshed for the
                call) has a :class:`KafkaError` LEADER_NOT_AVAILABLE as its
                result at once, and one whose leader cannot be reached by the
                deadline the error that kept it, instead of the call waiting
                for it and failing as a whole.

        Raises:
            KafkaError: a topic or partition that does not exist, or another
                final error of a leader.
            ApiTimeoutError: without ``partial``, some partition not answered
                within the call's bound (a partition without a leader: its
                replicas' brokers are down).
        """
        specs = check_offsets("specs", specs, check_value=check_offset_spec)
        check_bool("partial", partial)
        targets = offset_targets(specs)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            request = list_offsets_request(
                conn.version_for(ApiKey.LIST_OFFSETS), {tp: targets[tp] for tp in tps}
            )
            return read_list_offsets(await conn.request(ApiKey.LIST_OFFSETS, request))

        return await self._calls.per_leader(
            "list_offsets", targets, ask, timeout_ms, partial=partial
        )

    async def delete_records(
        self, before: Mapping[TopicPartition, int], *, timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        """Delete records before the given offsets (-1: the high watermark). Returns new low watermarks."""
        before = check_offsets("before", before, minimum=-1)
        offsets = {TopicPartition(*tp): o for tp, o in before.items()}
        # What the leaders may take, of the call's own bound.
        wait_ms = self._timeout_ms(timeout_ms)

        async def ask(
            conn: BrokerConnection, tps: list[TopicPartition]
        ) -> dict[TopicPartition, Any]:
            body = delete_records_request(offsets, tps, timeout_ms=wait_ms)
            return read_delete_records(await conn.request(ApiKey.DELETE_RECORDS, body))

        return await self._calls.per_leader("delete_records", offsets, ask, timeout_ms)
