"""The group coordinator's offsets: OffsetCommit, OffsetFetch, OffsetDelete,
transactional commits and the expiry of offsets (sans-IO).

Rules and invariants (Kafka's ``GroupMetadataManager``):

* Fencing. OffsetCommit checks the member id (and instance id), then the
  generation, as Heartbeat does; a consumer group (KIP-848) checks its member
  epoch instead. A commit with generation -1 and no member id ("simple" or admin
  commit) is accepted only while the group is Empty or does not exist (it then
  creates an Empty group). A share group keeps no offsets: GROUP_ID_NOT_FOUND.
* Durability. Offsets are written to the
  :class:`~trafka.brokerlite.groups.offsets.GroupStore` before the commit is
  acknowledged; a failed write answers COORDINATOR_NOT_AVAILABLE. A commit from
  a member of a Stable or rebalancing group restarts its session timer (classic
  clients commit instead of heartbeating).
* Housekeeping. Every ``offsets_retention_check_interval_ms``, the offsets of Empty
  groups expire ``offsets_retention_ms`` after the group became Empty (standalone
  groups: after each offset's commit), and Empty groups without offsets are deleted.
* OffsetDelete refuses the topics a group's members subscribe to
  (GROUP_SUBSCRIBED_TO_TOPIC); a member whose subscription cannot be read counts
  as subscribed to every topic.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial

from trafka.brokerlite.groups.offsets import CommittedOffset, OffsetStoreError
from trafka.brokerlite.groups.rebalance import ClassicRebalance
from trafka.brokerlite.groups.state import ClassicGroup, GroupState
from trafka.codec import DecodeError, decode_versioned
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import consumer_protocol as _cp
from trafka.codec.messages import k08_offset_commit as _oc
from trafka.codec.messages import k09_offset_fetch as _of
from trafka.codec.messages import k47_offset_delete as _od

__all__ = ["OffsetRequests"]

# The coordinator's logger: its log lines keep the name they had before the split.
log = logging.getLogger("trafka.brokerlite.groups.coordinator")


class OffsetRequests(ClassicRebalance):
    """Committed offsets as the group protocols see them (see the module rules), over
    the coordinator's one state (the live groups)."""

    _partition_exists: Callable[[str, int], bool]
    _metadata_max: int
    _retention_ms: int | None

    def offset_commit(
        self, request: _oc.OffsetCommitRequest, version: int, now_ms: int
    ) -> _oc.OffsetCommitResponse:
        """Handle an OffsetCommit request; accepted offsets are durable on return.

        Returns:
            The OffsetCommitResponse with one error code per requested partition.
        """
        self._start(now_ms)
        group_id = request.group_id
        codes: list[list[ErrorCode]] = []
        known: list[tuple[int, int]] = []
        for ti, topic in enumerate(request.topics):
            row = []
            for pi, part in enumerate(topic.partitions):
                if self._partition_exists(topic.name, part.partition_index):
                    row.append(ErrorCode.NONE)
                    known.append((ti, pi))
                else:
                    row.append(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION)
            codes.append(row)
        if known:
            # v0 carries neither: it is always a standalone commit.
            error = self._validate_commit(
                group_id,
                request.generation_id_or_member_epoch if version >= 1 else -1,
                request.member_id if version >= 1 else "",
                request.group_instance_id if version >= 7 else None,
                version,
                now_ms,
            )
            if error is not ErrorCode.NONE:
                for ti, pi in known:
                    codes[ti][pi] = error
            else:
                self._commit(request, version, now_ms, known, codes)
        return _oc.OffsetCommitResponse(
            topics=[
                _oc.OffsetCommitResponse.OffsetCommitResponseTopic(
                    name=topic.name,
                    partitions=[
                        _oc.OffsetCommitResponse.OffsetCommitResponsePartition(
                            partition_index=part.partition_index, error_code=codes[ti][pi]
                        )
                        for pi, part in enumerate(topic.partitions)
                    ],
                )
                for ti, topic in enumerate(request.topics)
            ]
        )

    def offset_fetch(
        self, request: _of.OffsetFetchRequest, version: int, now_ms: int
    ) -> _of.OffsetFetchResponse:
        """Handle an OffsetFetch request: v0-7 (one group) or v8+ (several groups).

        Partitions without a committed offset report offset -1; ``topics`` null
        (v2+) asks for every partition the group has committed. ``require_stable``
        is the OffsetFetch handler's business (pending transactional offsets belong
        to the transaction coordinator).

        Returns:
            The OffsetFetchResponse in the shape of ``version``.
        """
        self._start(now_ms)
        if version >= 8:
            groups = []
            for g in request.groups:
                if version >= 9:
                    error = self.consumer.validate_fetch(g.group_id, g.member_id, g.member_epoch)
                    if error is not ErrorCode.NONE:
                        groups.append(
                            _of.OffsetFetchResponse.OffsetFetchResponseGroup(
                                group_id=g.group_id, error_code=error
                            )
                        )
                        continue
                fetched = self._fetch(g.group_id, g.topics)
                groups.append(
                    _of.OffsetFetchResponse.OffsetFetchResponseGroup(
                        group_id=g.group_id,
                        topics=[
                            _of.OffsetFetchResponse.OffsetFetchResponseTopics(
                                name=name,
                                partitions=[
                                    _of.OffsetFetchResponse.OffsetFetchResponsePartitions(
                                        partition_index=index,
                                        committed_offset=o.offset if o else -1,
                                        committed_leader_epoch=o.leader_epoch if o else -1,
                                        metadata=o.metadata if o else "",
                                    )
                                    for index, o in parts
                                ],
                            )
                            for name, parts in fetched
                        ],
                    )
                )
            return _of.OffsetFetchResponse(groups=groups)
        fetched = self._fetch(request.group_id, request.topics)
        return _of.OffsetFetchResponse(
            topics=[
                _of.OffsetFetchResponse.OffsetFetchResponseTopic(
                    name=name,
                    partitions=[
                        _of.OffsetFetchResponse.OffsetFetchResponsePartition(
                            partition_index=index,
                            committed_offset=o.offset if o else -1,
                            committed_leader_epoch=o.leader_epoch if o else -1,
                            metadata=o.metadata if o else "",
                        )
                        for index, o in parts
                    ],
                )
                for name, parts in fetched
            ]
        )

    def delete_offsets(self, request: _od.OffsetDeleteRequest) -> _od.OffsetDeleteResponse:
        """Handle an OffsetDelete: drop a group's committed offsets, as Kafka does.

        An unknown group is GROUP_ID_NOT_FOUND; a classic group with members that
        is not a consumer group, NON_EMPTY_GROUP. Otherwise each partition's
        offset is deleted (NONE, also when none was committed) unless the group's
        members subscribe to its topic: GROUP_SUBSCRIBED_TO_TOPIC. A member whose
        subscription cannot be read counts as subscribed to every topic.
        """
        group_id = request.group_id
        response = _od.OffsetDeleteResponse

        def refused(code: ErrorCode) -> _od.OffsetDeleteResponse:
            return response(error_code=code, topics=[])

        if not group_id:
            return refused(ErrorCode.INVALID_GROUP_ID)
        subscribed: Callable[[str], bool]
        if group_id in self.consumer.groups:
            subscribed = partial(self.consumer.is_subscribed, group_id)
        else:
            group = self._groups.get(group_id)
            if group is None and not self._store.has_offsets(group_id):
                return refused(ErrorCode.GROUP_ID_NOT_FOUND)
            if group is None or not group.members:
                subscribed = _nothing
            elif group.protocol_type != "consumer":
                return refused(ErrorCode.NON_EMPTY_GROUP)
            else:
                topics = _classic_subscriptions(group)
                subscribed = _everything if topics is None else topics.__contains__
        deleted: list[tuple[str, int]] = []
        topics_out = []
        for topic in request.topics:
            refuse = subscribed(topic.name)
            code = ErrorCode.GROUP_SUBSCRIBED_TO_TOPIC if refuse else ErrorCode.NONE
            if not refuse:
                deleted.extend((topic.name, p.partition_index) for p in topic.partitions)
            topics_out.append(
                response.OffsetDeleteResponseTopic(
                    name=topic.name,
                    partitions=[
                        response.OffsetDeleteResponsePartition(
                            partition_index=p.partition_index, error_code=code
                        )
                        for p in topic.partitions
                    ],
                )
            )
        if deleted:
            try:
                self._store.delete_offsets(group_id, deleted)
            except OffsetStoreError as exc:
                log.error("group %r: offset deletion not stored: %s", group_id, exc)
                return refused(ErrorCode.COORDINATOR_NOT_AVAILABLE)
            self._drop_if_dead(group_id)
        return response(error_code=ErrorCode.NONE, topics=topics_out)

    def _drop_if_dead(self, group_id: str) -> None:
        """A classic group left empty and without offsets is gone at once, as Kafka
        3.9's coordinator (``cleanupGroupMetadata`` after an OffsetDelete) makes it
        Dead: DescribeGroups then says Dead and DeleteGroups GROUP_ID_NOT_FOUND.
        (KIP-848 groups, which Kafka's new coordinator holds, go with the periodic
        cleanup, as there.)"""
        if self._store.has_offsets(group_id) or group_id in self.consumer.groups:
            return
        group = self._groups.get(group_id)
        if (
            group is not None
            and group.state is GroupState.EMPTY
            and not group.members
            and not group.pending_members
        ):
            self._delete_group(group_id)

    def delete_topic_offsets(self, topic: str) -> int:
        """Remove every group's offsets for ``topic`` (call when the topic is deleted).

        Returns:
            How many offsets were removed.

        Raises:
            OffsetStoreError: the journal write failed.
        """
        return self._store.delete_topic_offsets(topic)

    def commit_transactional_offsets(
        self,
        group_id: str,
        offsets: Mapping[tuple[str, int], CommittedOffset],
        now_ms: int,
    ) -> None:
        """Apply the offsets a committed transaction carried (TxnOffsetCommit, KIP-447).

        They were validated when the transaction took them; like Kafka, a group that
        does not exist is created (Empty), so its offsets expire like any other's.

        Raises:
            OffsetStoreError: the journal write failed; nothing was applied.
        """
        if self._is_share(group_id):
            log.warning("group %r is a share group: transactional offsets dropped", group_id)
            return
        self.adopt_offsets_group(group_id, now_ms)
        self._store.commit_offsets(group_id, offsets)

    def adopt_offsets_group(self, group_id: str, now_ms: int) -> None:
        """Make sure a group whose offsets a transaction committed exists: like
        Kafka, an unknown one is created Empty, so its offsets expire like any other's."""
        self._start(now_ms)
        if group_id not in self._groups and group_id not in self.consumer.groups:
            self._create_group(group_id, now_ms)

    # -- internals ------------------------------------------------------------------------------

    def _validate_commit(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        instance: str | None,
        version: int,
        now_ms: int,
    ) -> ErrorCode:
        if group_id in self.consumer.groups:
            return self.consumer.validate_commit(group_id, member_id, generation_id, version)
        if self._is_share(group_id):
            # Share groups keep no committed offsets; Kafka answers this.
            return ErrorCode.GROUP_ID_NOT_FOUND
        group = self._groups.get(group_id)
        if group is None:
            if generation_id < 0:
                # A consumer that assigns partitions itself (or an admin tool): Kafka
                # creates a "simple" group to hold its offsets.
                self._create_group(group_id, now_ms)
                return ErrorCode.NONE
            return ErrorCode.GROUP_ID_NOT_FOUND if version >= 9 else ErrorCode.ILLEGAL_GENERATION
        if generation_id < 0 and group.state is GroupState.EMPTY:
            return ErrorCode.NONE
        if generation_id >= 0 or member_id or instance is not None:
            error = group.validate_member(member_id, instance)
            if error is not ErrorCode.NONE:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif group.state is not GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if group.state is GroupState.COMPLETING_REBALANCE:
            # Valid member and generation but no assignment yet: let it finish syncing.
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    def _commit(
        self,
        request: _oc.OffsetCommitRequest,
        version: int,
        now_ms: int,
        known: list[tuple[int, int]],
        codes: list[list[ErrorCode]],
    ) -> None:
        group = self._groups.get(request.group_id)  # None: a consumer group
        member = group.members.get(request.member_id) if group and version >= 1 else None
        if (
            group is not None
            and member is not None
            and group.state
            in (
                GroupState.STABLE,
                GroupState.PREPARING_REBALANCE,
            )
        ):
            # Classic clients commit instead of heartbeating when they commit often.
            self._schedule_heartbeat(group, member, now_ms)
        batch: dict[tuple[str, int], CommittedOffset] = {}
        stored: list[tuple[int, int]] = []
        for ti, pi in known:
            topic = request.topics[ti]
            part = topic.partitions[pi]
            metadata = part.committed_metadata or ""
            if len(metadata) > self._metadata_max:
                codes[ti][pi] = ErrorCode.OFFSET_METADATA_TOO_LARGE
                continue
            timestamp = (
                part.commit_timestamp if version == 1 and part.commit_timestamp != -1 else now_ms
            )
            batch[(topic.name, part.partition_index)] = CommittedOffset(
                offset=part.committed_offset,
                leader_epoch=part.committed_leader_epoch,
                metadata=metadata,
                commit_timestamp_ms=timestamp,
            )
            stored.append((ti, pi))
        try:
            self._store.commit_offsets(request.group_id, batch)
        except OffsetStoreError as exc:
            log.error("group %r: offset commit not stored: %s", request.group_id, exc)
            for ti, pi in stored:
                codes[ti][pi] = ErrorCode.COORDINATOR_NOT_AVAILABLE

    def _fetch(
        self,
        group_id: str,
        topics: list[_of.OffsetFetchRequest.OffsetFetchRequestTopic]
        | list[_of.OffsetFetchRequest.OffsetFetchRequestTopics]
        | None,
    ) -> list[tuple[str, list[tuple[int, CommittedOffset | None]]]]:
        offsets = self._store.readable_offsets(group_id)
        if topics is None:
            by_topic: dict[str, list[tuple[int, CommittedOffset | None]]] = {}
            for (name, index), committed in sorted(offsets.items()):
                by_topic.setdefault(name, []).append((index, committed))
            return list(by_topic.items())
        return [
            (t.name, [(i, offsets.get((t.name, i))) for i in t.partition_indexes]) for t in topics
        ]

    def _cleanup(self, now_ms: int) -> None:
        for group_id in list(self.consumer.groups):
            if self.consumer.is_empty(group_id) and not self._store.has_offsets(group_id):
                self.consumer.delete(group_id)
        for group_id, group in list(self._groups.items()):
            if group.state is not GroupState.EMPTY:
                continue
            if self._retention_ms is not None:
                offsets = self._store.group_offsets(group_id)
                # A group that had members counts from when it became Empty; a
                # standalone group's offsets each count from their own commit.
                base = group.state_timestamp_ms if group.protocol_type is not None else None
                expired = [
                    tp
                    for tp, o in offsets.items()
                    if now_ms - (base if base is not None else o.commit_timestamp_ms)
                    >= self._retention_ms
                ]
                if expired:
                    try:
                        self._store.delete_offsets(group_id, expired)
                        log.info("group %r: %d offsets expired", group_id, len(expired))
                    except OffsetStoreError as exc:
                        log.error("group %r: offset expiry not stored: %s", group_id, exc)
            if (
                not group.members
                and not group.pending_members
                and not self._store.has_offsets(group_id)
            ):
                self._delete_group(group_id)


def _nothing(topic: str) -> bool:
    return False


def _everything(topic: str) -> bool:
    return True


def _classic_subscriptions(group: ClassicGroup) -> set[str] | None:
    """The topics a consumer group's members subscribe to (their JoinGroup
    metadata for the chosen protocol), or None when one cannot be read."""
    topics: set[str] = set()
    protocol = group.protocol_name
    for member in group.members.values():
        data = member.metadata(protocol) if protocol is not None else b""
        try:
            sub = decode_versioned(
                _cp.CONSUMERPROTOCOLSUBSCRIPTION_SCHEMAS, data, "ConsumerProtocolSubscription"
            )
        except DecodeError:  # whatever a client wrote: Kafka counts it as "everything"
            return None
        topics.update(sub.topics)
    return topics
