"""The work of each admin call on trafka's blocking admin client, and what
its answers are as confluent-kafka's values.

Each function takes the client (:class:`trafka.sdk.blocking.Admin`), one
resource's arguments and the call's bound in ms, and returns that
resource's result or raises (a trafka error, which the caller turns into a
``KafkaException``). They run in the drop-in's worker threads.

Rules:

* A config's source comes from two describes: the settings set on the
  resource itself (its dynamic or group configs) and the rest (defaults);
  trafka's client reports values, not Kafka's source numbers.
* ``incremental_alter_configs``' APPEND and SUBTRACT read the list value
  (comma-separated) and set the result: trafka's client sends SET and DELETE.
"""

from __future__ import annotations

import uuid
from typing import Any

from trafka.sdk import NewPartitions as SdkNewPartitions
from trafka.sdk import NewTopic as SdkNewTopic
from trafka.sdk import TopicPartition as SdkTopicPartition
from trafka.sdk import acls as sdk_acls
from trafka.sdk.admin import UserScramCredentialDeletion as SdkDeletion
from trafka.sdk.admin import UserScramCredentialUpsertion as SdkUpsertion

from .._errors import KafkaError, KafkaException, error_of, internal
from .._model import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    Node,
    TopicPartitionInfo,
    Uuid,
)
from .._types import OFFSET_INVALID, TopicPartition
from ._acl import AclBinding, AclBindingFilter
from ._config import ConfigEntry, ConfigResource
from ._enums import (
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigSource,
    ResourcePatternType,
    ResourceType,
    ScramMechanism,
)
from ._models import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    DeletedRecords,
    DescribeClusterResult,
    ListOffsetsResultInfo,
    MemberAssignment,
    MemberDescription,
    NewPartitions,
    NewTopic,
    OffsetSpec,
    ScramCredentialInfo,
    TopicDescription,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialsDescription,
    UserScramCredentialUpsertion,
    spec_number,
)

__all__ = [
    "acl_of",
    "alter_configs",
    "create_acl",
    "create_partitions",
    "create_topic",
    "delete_acls",
    "describe_acls",
    "describe_cluster",
    "describe_configs",
    "describe_group",
    "describe_topic",
    "group_state",
    "incremental_alter",
    "list_groups",
    "list_group_offsets",
    "list_offset",
    "alter_group_offsets",
    "delete_record",
    "describe_scram",
    "alter_scram",
    "elect_leaders",
    "fail",
]


def fail(name: str, reason: str) -> KafkaException:
    """confluent-kafka's error of a local cause (``_INVALID_ARG``...)."""
    return KafkaException(KafkaError(internal(name), reason))


# -- topics --------------------------------------------------------------------------------------


def create_topic(admin: Any, t: NewTopic, validate_only: bool, ms: int) -> None:
    config = {k: str(v) for k, v in (t.config or {}).items()}
    if t.replica_assignment is None:
        spec = SdkNewTopic(t.topic, t.num_partitions, t.replication_factor, config)
    else:  # (librdkafka sends no counts with an assignment)
        placed = dict(enumerate(t.replica_assignment))
        spec = SdkNewTopic(t.topic, configs=config, replica_assignments=placed)
    admin.create_topics([spec], timeout_ms=ms, validate_only=validate_only)


def create_partitions(admin: Any, p: NewPartitions, validate_only: bool, ms: int) -> None:
    more = {p.topic: SdkNewPartitions(p.new_total_count, p.replica_assignment)}
    admin.create_partitions(more, timeout_ms=ms, validate_only=validate_only)


def _node(brokers: dict[int, Any], node_id: int) -> Node:
    b = brokers.get(node_id)
    return Node(node_id, "", -1) if b is None else Node(b.node_id, b.host, b.port, b.rack)


def describe_topic(admin: Any, name: str, ms: int) -> TopicDescription:
    info = admin.describe_topics([name], timeout_ms=ms)[name]
    brokers = {b.node_id: b for b in admin.describe_cluster(timeout_ms=ms).brokers}
    parts = [
        TopicPartitionInfo(
            p.partition,
            _node(brokers, p.leader),
            [_node(brokers, r) for r in p.replicas],
            [_node(brokers, r) for r in p.isr],
        )
        for p in info.partitions
    ]
    tid: uuid.UUID = info.topic_id
    bits = tid.int
    topic_id = Uuid(_signed(bits >> 64), _signed(bits & (2**64 - 1)))
    return TopicDescription(info.name, topic_id, info.is_internal, parts)


def _signed(n: int) -> int:
    return n - 2**64 if n >= 2**63 else n


def describe_cluster(admin: Any, ms: int) -> DescribeClusterResult:
    d = admin.describe_cluster(timeout_ms=ms)
    brokers = {b.node_id: b for b in d.brokers}
    nodes = [_node(brokers, n) for n in sorted(brokers)]
    controller = _node(brokers, d.controller_id)
    return DescribeClusterResult(controller, nodes, d.cluster_id)


# -- configs -------------------------------------------------------------------------------------

_OWN_SOURCE = {
    ResourceType.TOPIC: ConfigSource.DYNAMIC_TOPIC_CONFIG,
    ResourceType.BROKER: ConfigSource.DYNAMIC_BROKER_CONFIG,
    ResourceType.GROUP: ConfigSource.GROUP_CONFIG,
}


def _describe(admin: Any, r: ConfigResource, overrides_only: bool, ms: int) -> dict[str, Any]:
    if r.restype is ResourceType.TOPIC:
        found = admin.describe_configs([r.name], overrides_only=overrides_only, timeout_ms=ms)
    elif r.restype is ResourceType.BROKER:
        found = admin.describe_configs(
            brokers=[int(r.name)], overrides_only=overrides_only, timeout_ms=ms
        )
    elif r.restype is ResourceType.GROUP:
        found = admin.describe_group_configs([r.name], overrides_only=overrides_only, timeout_ms=ms)
    else:
        raise fail("_INVALID_ARG", f"Unsupported resource type {r.restype.name}")
    values: dict[str, Any] = found.get(r.name, found.get(str(r.name), {}))
    return values


def describe_configs(admin: Any, r: ConfigResource, ms: int) -> dict[str, ConfigEntry]:
    own = _describe(admin, r, True, ms)
    every = _describe(admin, r, False, ms)
    out: dict[str, ConfigEntry] = {}
    for name, value in every.items():
        if name in own:
            out[name] = ConfigEntry(name, value, _OWN_SOURCE[r.restype])
        else:
            out[name] = ConfigEntry(name, value, ConfigSource.DEFAULT_CONFIG, is_default=True)
    return out


def _alter(admin: Any, r: ConfigResource, changes: dict[str, str | None], ms: int) -> None:
    if r.restype is ResourceType.TOPIC:
        admin.alter_topic_configs({r.name: changes}, timeout_ms=ms)
    elif r.restype is ResourceType.BROKER:
        admin.alter_broker_configs({int(r.name) if r.name else None: changes}, timeout_ms=ms)
    elif r.restype is ResourceType.GROUP:
        admin.alter_group_configs({r.name: changes}, timeout_ms=ms)
    else:
        raise fail("_INVALID_ARG", f"Unsupported resource type {r.restype.name}")


def alter_configs(admin: Any, r: ConfigResource, ms: int) -> None:
    _alter(admin, r, {k: str(v) for k, v in r.set_config_dict.items()}, ms)


def incremental_alter(admin: Any, r: ConfigResource, ms: int) -> None:
    changes: dict[str, str | None] = {}
    current: dict[str, Any] | None = None
    for e in r.incremental_configs:
        op = e.incremental_operation
        if op is AlterConfigOpType.SET:
            changes[e.name] = e.value
        elif op is AlterConfigOpType.DELETE:
            changes[e.name] = None
        else:
            if current is None:
                current = _describe(admin, r, False, ms)
            items = [i for i in (current.get(e.name) or "").split(",") if i]
            given = [i for i in (e.value or "").split(",") if i]
            if op is AlterConfigOpType.APPEND:
                items += [i for i in given if i not in items]
            else:
                items = [i for i in items if i not in given]
            changes[e.name] = ",".join(items)
    _alter(admin, r, changes, ms)


# -- ACLs ----------------------------------------------------------------------------------------


def _sdk_acl(b: AclBinding) -> Any:
    kind: Any = (
        sdk_acls.AclBindingFilter if isinstance(b, AclBindingFilter) else sdk_acls.AclBinding
    )
    return kind(
        b.restype.value,
        b.name,
        b.resource_pattern_type.value,
        b.principal,
        b.host,
        b.operation.value,
        b.permission_type.value,
    )


def acl_of(b: Any) -> AclBinding:
    """trafka's binding as confluent-kafka's."""
    return AclBinding(
        ResourceType(int(b.resource_type)),
        b.name,
        ResourcePatternType(int(b.pattern_type)),
        b.principal,
        b.host,
        AclOperation(int(b.operation)),
        AclPermissionType(int(b.permission)),
    )


def create_acl(admin: Any, b: AclBinding, ms: int) -> None:
    wanted = _sdk_acl(b)
    err = admin.create_acls([wanted], timeout_ms=ms).get(wanted)
    if err is not None:
        raise err


def describe_acls(admin: Any, f: AclBindingFilter, ms: int) -> list[AclBinding]:
    return [acl_of(b) for b in admin.describe_acls(_sdk_acl(f), timeout_ms=ms)]


def delete_acls(admin: Any, f: AclBindingFilter, ms: int) -> list[AclBinding]:
    wanted = _sdk_acl(f)
    found = admin.delete_acls([wanted], timeout_ms=ms)[wanted]
    if isinstance(found, BaseException):
        raise found
    return [acl_of(b) for b in found]


# -- groups --------------------------------------------------------------------------------------

_STATES = {
    "preparingrebalance": ConsumerGroupState.PREPARING_REBALANCING,
    "completingrebalance": ConsumerGroupState.COMPLETING_REBALANCING,
    "stable": ConsumerGroupState.STABLE,
    "dead": ConsumerGroupState.DEAD,
    "empty": ConsumerGroupState.EMPTY,
    "assigning": ConsumerGroupState.PREPARING_REBALANCING,
    "reconciling": ConsumerGroupState.COMPLETING_REBALANCING,
}
_TYPES = {"consumer": 1, "classic": 2}


def group_state(state: str) -> ConsumerGroupState:
    return _STATES.get(state.lower(), ConsumerGroupState.UNKNOWN)


def list_groups(admin: Any, states: Any, types: Any, ms: int) -> list[ConsumerGroupListing]:
    wanted = None if not types else [t.name.lower() for t in types]
    out = []
    for g in admin.list_groups(types=wanted, timeout_ms=ms):
        if g.group_type not in ("classic", "consumer"):
            continue  # (share and streams groups are not consumer groups)
        state = group_state(g.state)
        if states and state not in states:
            continue
        out.append(
            ConsumerGroupListing(
                g.group_id, g.protocol_type == "", state, _TYPES.get(g.group_type, 0)
            )
        )
    return out


def describe_group(admin: Any, group_id: str, ms: int) -> ConsumerGroupDescription:
    d = admin.describe_groups([group_id], timeout_ms=ms)[group_id]
    members = [
        MemberDescription(
            m.member_id,
            m.client_id,
            m.client_host,
            MemberAssignment(sorted(TopicPartition(t, p) for t, p in m.assignment)),
            m.group_instance_id,
        )
        for m in d.members
    ]
    return ConsumerGroupDescription(
        d.group_id,
        d.protocol_type == "" and not d.members,
        members,
        d.protocol,
        group_state(d.state),
        Node(-1, "", -1),
        type=_TYPES.get(d.group_type, 0),
    )


def list_group_offsets(
    admin: Any, req: ConsumerGroupTopicPartitions, ms: int
) -> ConsumerGroupTopicPartitions:
    asked = req.topic_partitions
    wanted = None if asked is None else [SdkTopicPartition(tp.topic, tp.partition) for tp in asked]
    found = admin.list_consumer_group_offsets(req.group_id, wanted, timeout_ms=ms)
    keys = wanted if wanted is not None else sorted(found)
    tps = []
    for k in keys:
        offset = found.get(k)
        tps.append(
            TopicPartition(k.topic, k.partition, OFFSET_INVALID if offset in (None, -1) else offset)
        )
    return ConsumerGroupTopicPartitions(req.group_id, tps)


def alter_group_offsets(
    admin: Any, req: ConsumerGroupTopicPartitions, ms: int
) -> ConsumerGroupTopicPartitions:
    tps = list(req.topic_partitions or [])
    offsets = {SdkTopicPartition(tp.topic, tp.partition): tp.offset for tp in tps}
    admin.alter_consumer_group_offsets(req.group_id, offsets, timeout_ms=ms)
    return ConsumerGroupTopicPartitions(
        req.group_id, [TopicPartition(tp.topic, tp.partition, tp.offset) for tp in tps]
    )


# -- SCRAM, offsets, records, elections ----------------------------------------------------------


def describe_scram(admin: Any, users: list[str] | None, ms: int) -> dict[str, Any]:
    found = admin.describe_user_scram_credentials(users, timeout_ms=ms)
    return {
        user: UserScramCredentialsDescription(
            user,
            [
                ScramCredentialInfo(ScramMechanism[i.mechanism.replace("-", "_")], i.iterations)
                for i in d.credential_infos
            ],
        )
        for user, d in found.items()
    }


def alter_scram(admin: Any, alterations: list[UserScramCredentialAlteration], ms: int) -> None:
    out: list[Any] = []
    for a in alterations:
        if isinstance(a, UserScramCredentialUpsertion):
            info = a.scram_credential_info
            out.append(
                SdkUpsertion(
                    a.user,
                    a.password.decode("utf-8", "surrogateescape"),
                    info.mechanism.name.replace("_", "-"),
                    info.iterations,
                    a.salt,
                )
            )
        elif isinstance(a, UserScramCredentialDeletion):
            out.append(SdkDeletion(a.user, a.mechanism.name.replace("_", "-")))
    admin.alter_user_scram_credentials(out, timeout_ms=ms)


_SPEC_NAMES = {-1: "latest", -2: "earliest"}


def list_offset(admin: Any, tp: TopicPartition, spec: OffsetSpec, ms: int) -> ListOffsetsResultInfo:
    number = spec_number(spec)
    if number == -3:
        raise fail("_UNSUPPORTED_FEATURE", "OffsetSpec.max_timestamp() is not supported")
    key = SdkTopicPartition(tp.topic, tp.partition)
    found = admin.list_offsets({key: _SPEC_NAMES.get(number, number)}, timeout_ms=ms)[key]
    if found is None:  # (no record at or after the timestamp)
        return ListOffsetsResultInfo(-1, -1, -1)
    offset, timestamp = found
    return ListOffsetsResultInfo(offset, timestamp, -1)


def delete_record(admin: Any, tp: TopicPartition, ms: int) -> DeletedRecords:
    key = SdkTopicPartition(tp.topic, tp.partition)
    low = admin.delete_records({key: tp.offset}, timeout_ms=ms)[key]
    return DeletedRecords(low)


def elect_leaders(admin: Any, kind: Any, partitions: Any, ms: int) -> dict[Any, Any]:
    asked = (
        None
        if partitions is None
        else [SdkTopicPartition(p.topic, p.partition) for p in partitions]
    )
    found = admin.elect_leaders(asked, election_type=kind.name.lower(), timeout_ms=ms)
    return {
        TopicPartition(tp.topic, tp.partition): None if err is None else error_of(err)
        for tp, err in found.items()
    }
