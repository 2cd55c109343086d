"""The group coordinator's admin requests: DescribeGroups, ListGroups,
DeleteGroups and ConsumerGroupDescribe, across the three group types (sans-IO).

Rules (Kafka's):

* DescribeGroups describes an unknown group as ``Dead`` with no error up to
  v5, and so a consumer or share group, which it cannot describe; from v6
  (KIP-1043) both are ``Dead`` with GROUP_ID_NOT_FOUND and a message saying
  which. Members' metadata and assignments only for Stable groups.
* ListGroups filters by state (v4+, case-insensitive) and type (v5+:
  ``classic``, ``consumer`` or ``share``) and lists every type.
* DeleteGroups deletes only Empty groups, with their offsets (NON_EMPTY_GROUP
  otherwise, GROUP_ID_NOT_FOUND if unknown); a share group is the share
  coordinator's to delete.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

from trafka.brokerlite.groups.rebalance import ClassicRebalance
from trafka.brokerlite.groups.state import GroupState
from trafka.codec.errors import ErrorCode
from trafka.codec.messages import k15_describe_groups as _dg
from trafka.codec.messages import k16_list_groups as _lsg
from trafka.codec.messages import k42_delete_groups as _dlg
from trafka.codec.messages import k69_consumer_group_describe as _cgd

__all__ = ["GROUP_TYPE", "GroupAdmin"]

# DescribeGroups' authorized_operations: "not requested", and what a group allows
# without an authorizer (READ=3, DELETE=6, DESCRIBE=8 as bits of AclOperation codes).
_OPS_NOT_REQUESTED = -(2**31)
_GROUP_OPERATIONS = (1 << 3) | (1 << 6) | (1 << 8)
GROUP_TYPE = "classic"


class GroupAdmin(ClassicRebalance):
    """Describing, listing and deleting groups (see the module rules)."""

    def consumer_group_describe(
        self,
        request: _cgd.ConsumerGroupDescribeRequest,
        topic_name: Callable[[uuid.UUID], str | None],
    ) -> _cgd.ConsumerGroupDescribeResponse:
        """Handle a ConsumerGroupDescribe: each group, or GROUP_ID_NOT_FOUND."""
        return _cgd.ConsumerGroupDescribeResponse(
            groups=[self.consumer.describe(g, topic_name) for g in request.group_ids]
        )

    def describe_groups(
        self, request: _dg.DescribeGroupsRequest, version: int
    ) -> _dg.DescribeGroupsResponse:
        """Handle a DescribeGroups request.

        Unknown groups (and groups of another type) are described as ``Dead``,
        with no error up to v5 and GROUP_ID_NOT_FOUND from v6, as Kafka does.
        Member metadata and assignments are included only for Stable groups.
        """
        ops = (
            _GROUP_OPERATIONS
            if version >= 3 and request.include_authorized_operations
            else _OPS_NOT_REQUESTED
        )
        described = []
        for group_id in request.groups:
            group = self._groups.get(group_id)
            if group is None and version >= 6:
                other_type = group_id in self.consumer.groups or self._is_share(group_id)
                described.append(
                    _dg.DescribeGroupsResponse.DescribedGroup(
                        error_code=ErrorCode.GROUP_ID_NOT_FOUND,
                        error_message=f"Group {group_id} is not a classic group."
                        if other_type
                        else f"Group {group_id} not found.",
                        group_id=group_id,
                        group_state=GroupState.DEAD.value,
                    )
                )
                continue
            if group is None:
                described.append(
                    _dg.DescribeGroupsResponse.DescribedGroup(
                        group_id=group_id,
                        group_state=GroupState.DEAD.value,
                        authorized_operations=ops,
                    )
                )
                continue
            stable = group.state is GroupState.STABLE and group.protocol_name is not None
            members = [
                _dg.DescribeGroupsResponse.DescribedGroupMember(
                    member_id=m.member_id,
                    group_instance_id=m.group_instance_id,
                    client_id=m.client_id,
                    client_host=m.client_host,
                    member_metadata=m.metadata(group.protocol_name or "") if stable else b"",
                    member_assignment=m.assignment if stable else b"",
                )
                for m in group.members.values()
            ]
            described.append(
                _dg.DescribeGroupsResponse.DescribedGroup(
                    group_id=group_id,
                    group_state=group.state.value,
                    protocol_type=group.protocol_type or "",
                    protocol_data=(group.protocol_name or "") if stable else "",
                    members=members,
                    authorized_operations=ops,
                )
            )
        return _dg.DescribeGroupsResponse(groups=described)

    def list_groups(self, request: _lsg.ListGroupsRequest, version: int) -> _lsg.ListGroupsResponse:
        """Handle a ListGroups request, applying the states (v4+, case-insensitive)
        and types (v5+: ``classic``, ``consumer`` or ``share``) filters."""
        states = {s.strip().lower() for s in request.states_filter} if version >= 4 else set()
        types = {t.strip().lower() for t in request.types_filter} if version >= 5 else set()
        listed = []
        if not types or GROUP_TYPE in types:
            for group_id in sorted(self._groups):
                group = self._groups[group_id]
                if states and group.state.value.lower() not in states:
                    continue
                listed.append(
                    _lsg.ListGroupsResponse.ListedGroup(
                        group_id=group_id,
                        protocol_type=group.protocol_type or "",
                        group_state=group.state.value,
                        group_type=GROUP_TYPE,
                    )
                )
        if not types or "consumer" in types:
            for group_id, cgroup in self.consumer.groups.items():
                if states and cgroup.state.lower() not in states:
                    continue
                listed.append(
                    _lsg.ListGroupsResponse.ListedGroup(
                        group_id=group_id,
                        protocol_type="consumer",
                        group_state=cgroup.state,
                        group_type="consumer",
                    )
                )
        if self.share is not None and (not types or "share" in types):
            for group_id, state in self.share.listed():
                if states and state.lower() not in states:
                    continue
                listed.append(
                    _lsg.ListGroupsResponse.ListedGroup(
                        group_id=group_id,
                        protocol_type="share",
                        group_state=state,
                        group_type="share",
                    )
                )
        listed.sort(key=lambda g: g.group_id)
        return _lsg.ListGroupsResponse(groups=listed)

    def delete_groups(
        self, request: _dlg.DeleteGroupsRequest, version: int
    ) -> _dlg.DeleteGroupsResponse:
        """Handle a DeleteGroups request: only Empty groups can be deleted, with
        their offsets (NON_EMPTY_GROUP otherwise, GROUP_ID_NOT_FOUND if unknown).
        A share group is deleted by the share coordinator, which tells its listeners."""
        results = []
        for group_id in request.groups_names:
            group = self._groups.get(group_id)
            if self.share is not None and self._is_share(group_id):
                error = self.share.delete(group_id)
            elif group_id in self.consumer.groups:
                if not self.consumer.is_empty(group_id):
                    error = ErrorCode.NON_EMPTY_GROUP
                else:
                    error = self._delete_consumer_group(group_id)
            elif group is None:
                error = ErrorCode.GROUP_ID_NOT_FOUND
            elif group.state is not GroupState.EMPTY:
                error = ErrorCode.NON_EMPTY_GROUP
            else:
                error = self._delete_group(group_id)
            results.append(
                _dlg.DeleteGroupsResponse.DeletableGroupResult(group_id=group_id, error_code=error)
            )
        return _dlg.DeleteGroupsResponse(results=results)
