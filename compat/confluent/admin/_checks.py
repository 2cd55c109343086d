"""The checks confluent-kafka makes of an admin call's arguments before any
request: the same exception type (TypeError, ValueError) for the same bad
argument, with its words, so that code catching them moves over unchanged.

Rules: a check raises; it never goes to the network. The options
(``request_timeout``, ``validate_only``...) are each call's own: another
keyword is a TypeError, a timeout outside 0-3600 s a ValueError, as librdkafka
takes them.
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Real
from typing import Any

from .._model import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    ConsumerGroupType,
    ElectionType,
    IsolationLevel,
)
from .._types import OFFSET_INVALID, TopicPartition
from ._acl import AclBinding, AclBindingFilter
from ._config import ConfigEntry, ConfigResource
from ._enums import AlterConfigOpType, ScramMechanism
from ._models import (
    OffsetSpec,
    ScramCredentialInfo,
    UserScramCredentialAlteration,
    UserScramCredentialDeletion,
    UserScramCredentialUpsertion,
)

__all__ = [
    "check_acls",
    "check_alter_offsets",
    "check_alter_scram",
    "check_configs",
    "check_delete_records",
    "check_describe_scram",
    "check_elect_leaders",
    "check_group_ids",
    "check_incremental",
    "check_list_offsets",
    "check_list_offsets_request",
    "check_options",
    "check_states",
    "check_topic_names",
    "option_bool",
    "option_seconds",
]


def _name(value: Any) -> str:
    return type(value).__name__


def check_options(kwargs: dict[str, Any], allowed: Iterable[str]) -> None:
    """Refuse a keyword the call does not take."""
    for key in kwargs:
        if key not in allowed:
            raise TypeError(f"'{key}' is an invalid keyword argument for this function")


def option_seconds(kwargs: dict[str, Any], name: str, default: float) -> float:
    """A timeout option in seconds (librdkafka's bound: 0-3600 s)."""
    value = kwargs.get(name, default)
    if isinstance(value, bool) or not isinstance(value, Real):
        raise TypeError(f"must be real number, not {_name(value)}")
    if not 0 <= float(value) * 1000 <= 3_600_000:
        raise ValueError(f'Invalid value type for "{name}": expecting integer in range 0..3600000')
    return float(value)


def option_bool(kwargs: dict[str, Any], name: str) -> bool:
    value = kwargs.get(name, False)
    if not isinstance(value, bool):
        raise TypeError(f"Expected {name} to be bool type, not {_name(value)}")
    return value


def check_configs(resources: Any, wrong: type[Exception]) -> list[ConfigResource]:
    """A non-empty list of ConfigResource (``wrong``: the exception for another item)."""
    found = list(resources)  # (TypeError: not iterable)
    for r in found:
        if not isinstance(r, ConfigResource):
            raise wrong(f"Expected list of {ConfigResource!r}")
    if not found:
        raise ValueError("Expected non-empty list of ConfigResource objects")
    return found


def check_incremental(resource: ConfigResource) -> None:
    """Each change of ``incremental_alter_configs``: a ConfigEntry with an
    operation, a str name and, but to delete, a str value."""
    entries = resource.incremental_configs
    if not entries:
        raise ValueError(
            "expected non-empty list of ConfigEntry to alter incrementally "
            "in incremental_configs field"
        )
    for i, entry in enumerate(entries):
        if not isinstance(entry, ConfigEntry):
            raise TypeError(f"expected ConfigEntry type in incremental_configs field, index {i}")
        if not isinstance(entry.incremental_operation, AlterConfigOpType):
            raise TypeError("Required attribute .value missing")
        if not isinstance(entry.name, str):
            raise TypeError(f"Expected .name to be str type, not {_name(entry.name)}")
        if entry.incremental_operation is not AlterConfigOpType.DELETE and not isinstance(
            entry.value, str
        ):
            raise TypeError(f"Expected .value to be str type, not {_name(entry.value)}")


def check_acls(acls: Any, kind: type[AclBinding], what: str) -> list[Any]:
    """A non-empty list of distinct ``kind`` (AclBinding or AclBindingFilter)."""
    found = list(acls)
    if len(set(found)) != len(found):
        raise ValueError(f"duplicate ACL {what} not allowed")
    for acl in found:
        if not isinstance(acl, kind) or (kind is AclBinding and isinstance(acl, AclBindingFilter)):
            raise ValueError(f"Expected list of {kind!r}")
    if not found:
        raise ValueError(f"Expected non-empty list of {kind.__name__} objects")
    return found


def check_states(kwargs: dict[str, Any]) -> tuple[set[Any] | None, set[Any] | None]:
    """``list_consumer_groups``'s ``states`` and ``types``: sets of the enums."""
    out: list[set[Any] | None] = []
    for name, kind in (("states", ConsumerGroupState), ("types", ConsumerGroupType)):
        given = kwargs.get(name)
        if given is not None:
            if not isinstance(given, set):
                raise TypeError(f"'{name}' must be a set")
            if any(not isinstance(v, kind) for v in given):
                raise TypeError(f"All elements of {name} must be of type {kind.__name__}")
        out.append(given)
    return out[0], out[1]


def check_group_ids(group_ids: Any, what: str, strict: bool) -> list[Any]:
    """A non-empty list of group ids (``strict``: every one a str)."""
    if not isinstance(group_ids, list):
        raise TypeError(f"Expected input to be list of group ids to be {what}")
    if not group_ids:
        raise ValueError(f"Expected at least one group to be {what}")
    for g in group_ids:
        if strict and not isinstance(g, str):
            raise ValueError(f"Expected list of {str!r}")
        if g is None:
            raise ValueError("Expected list of group strings, not NoneType")
    return group_ids


def check_topic_names(names: Any) -> list[str]:
    """The topics of ``describe_topics``: str names, none empty."""
    for i, name in enumerate(names):
        if not isinstance(name, str):
            raise TypeError(f"Expected list of topics strings, not {_name(name)}")
        if not name:
            raise ValueError(f"Empty topic name at index {i} isn't allowed")
    return list(names)


def _check_group_request(request: Any, what: str) -> ConsumerGroupTopicPartitions:
    if request is None:
        raise TypeError("request cannot be None")
    if not isinstance(request, list):
        raise TypeError("request must be a list")
    if len(request) != 1:
        raise ValueError(f"Currently we support {what} offsets for a single consumer group only")
    (req,) = request
    if not isinstance(req, ConsumerGroupTopicPartitions):
        raise TypeError("Expected list of 'ConsumerGroupTopicPartitions'")
    if req.group_id is None:
        raise TypeError("'group_id' cannot be None")
    if not isinstance(req.group_id, str):
        raise TypeError("'group_id' must be a string")
    if not req.group_id:
        raise ValueError("'group_id' cannot be empty")
    return req


def _check_partition(tp: Any) -> TopicPartition:
    if tp is None:
        raise ValueError("Element of 'topic_partitions' cannot be None")
    if not isinstance(tp, TopicPartition):
        raise TypeError("Element of 'topic_partitions' must be of type TopicPartition")
    if tp.topic is None:
        raise TypeError("Element of 'topic_partitions' must not have 'topic' attribute as None")
    if not tp.topic:
        raise ValueError("Element of 'topic_partitions' must not have 'topic' attribute as Empty")
    return tp


def check_list_offsets_request(request: Any) -> ConsumerGroupTopicPartitions:
    """``list_consumer_group_offsets``: one group, partitions None or a
    non-empty list of partitions without offsets."""
    req = _check_group_request(request, "listing")
    tps = req.topic_partitions
    if tps is not None:
        if not isinstance(tps, list):
            raise TypeError("'topic_partitions' must be a list or None")
        if not tps:
            raise ValueError("'topic_partitions' cannot be empty")
        for tp in map(_check_partition, tps):
            if tp.partition < 0:
                raise ValueError(
                    "Element of 'topic_partitions' must not have negative 'partition' value"
                )
            if tp.offset != OFFSET_INVALID:
                raise ValueError("Element of 'topic_partitions' must not have 'offset' value")
    return req


def check_alter_offsets(request: Any) -> ConsumerGroupTopicPartitions:
    """``alter_consumer_group_offsets``: one group and a non-empty list of
    partitions, each with an offset."""
    req = _check_group_request(request, "altering")
    tps = req.topic_partitions
    if tps is None:
        raise ValueError("'topic_partitions' cannot be null")
    if not isinstance(tps, list):
        raise TypeError("'topic_partitions' must be a list")
    if not tps:
        raise ValueError("'topic_partitions' cannot be empty")
    for tp in map(_check_partition, tps):
        if tp.partition < 0:
            raise ValueError(
                "Element of 'topic_partitions' must not have negative value for 'partition' field"
            )
        if tp.offset < 0:
            raise ValueError(
                "Element of 'topic_partitions' must not have negative value for 'offset' field"
            )
    return req


def check_describe_scram(users: Any) -> None:
    if users is None:
        return
    if not isinstance(users, list):
        raise TypeError("Expected input to be list of String")
    for user in users:
        if user is None:
            raise TypeError("'user' cannot be None")
        if not isinstance(user, str):
            raise TypeError("Each value should be a string")
        if not user:
            raise ValueError("'user' cannot be empty")


def _check_upsertion(a: UserScramCredentialUpsertion) -> None:
    if a.password is None:
        raise TypeError("'password' cannot be None")
    if not isinstance(a.password, bytes):
        raise TypeError("'password' must be bytes")
    if not a.password:
        raise ValueError("'password' cannot be empty")
    if a.salt is not None and not isinstance(a.salt, bytes):
        raise TypeError("'salt' must be bytes")
    if a.salt is not None and not a.salt:
        raise ValueError("'salt' can be None but cannot be empty")
    info = a.scram_credential_info
    if not isinstance(info, ScramCredentialInfo):
        raise TypeError("Expected credential_info to be ScramCredentialInfo Type")
    if not isinstance(info.mechanism, ScramMechanism):
        raise TypeError("Expected the mechanism to be ScramMechanism Type")
    if isinstance(info.iterations, bool) or not isinstance(info.iterations, int):
        raise TypeError("Expected the iterations to be int Type")
    if info.iterations < 1:
        raise ValueError("Iterations should be positive")


def check_alter_scram(alterations: Any) -> list[UserScramCredentialAlteration]:
    if not isinstance(alterations, list):
        raise TypeError("Expected input to be list")
    if not alterations:
        raise ValueError("Expected at least one alteration")
    for a in alterations:
        if not isinstance(a, UserScramCredentialAlteration):
            raise TypeError(
                "Expected each element of list to be subclass of UserScramCredentialAlteration"
            )
        if a.user is None:
            raise TypeError("'user' cannot be None")
        if not isinstance(a.user, str):
            raise TypeError("'user' must be a string")
        if not a.user:
            raise ValueError("'user' cannot be empty")
        if isinstance(a, UserScramCredentialUpsertion):
            _check_upsertion(a)
        elif isinstance(a, UserScramCredentialDeletion):
            if not isinstance(a.mechanism, ScramMechanism):
                raise TypeError("Expected the mechanism to be ScramMechanism Type")
        else:
            raise TypeError(
                "Expected each element of list 'alterations' to be either a "
                "UserScramCredentialUpsertion or a UserScramCredentialDeletion"
            )
    return alterations


def check_list_offsets(requests: Any, kwargs: dict[str, Any]) -> None:
    if not isinstance(requests, dict):
        raise TypeError(
            "Expected topic_partition_offsets to be dict of [TopicPartitions,OffsetSpec]"
            " for list offsets request"
        )
    for tp, spec in requests.items():
        if tp is None:
            raise TypeError("partition cannot be None")
        if not isinstance(tp, TopicPartition):
            raise TypeError("partition must be a TopicPartition")
        if tp.topic is None:
            raise TypeError("partition topic name cannot be None")
        if not isinstance(tp.topic, str):
            raise TypeError("partition topic name must be string")
        if not tp.topic:
            raise ValueError("partition topic name cannot be empty")
        if tp.partition < 0:
            raise ValueError("partition index must be non-negative")
        if spec is None:
            raise TypeError("OffsetSpec cannot be None")
        if not isinstance(spec, OffsetSpec):
            raise TypeError("Value must be a OffsetSpec")
    if "isolation_level" in kwargs and not isinstance(kwargs["isolation_level"], IsolationLevel):
        raise TypeError("isolation_level argument should be an IsolationLevel")


def check_delete_records(request: Any) -> None:
    if not isinstance(request, list):
        raise TypeError(f"Expected Request to be a list, got '{_name(request)}' ")
    for tp in request:
        if not isinstance(tp, TopicPartition):
            raise TypeError(
                f"Element of the request list must be of type 'TopicPartition' got '{_name(tp)}' "
            )
        if not isinstance(tp.topic, str):
            raise TypeError(f"argument 1 must be str, not {_name(tp.topic)}")
        if tp.partition < 0:
            raise ValueError("'partition' cannot be negative")


def check_elect_leaders(election_type: Any, partitions: Any) -> None:
    if not isinstance(election_type, ElectionType):
        raise TypeError("Expected 'election_type' to be of type 'ElectionType'")
    if partitions is None:
        return
    if not isinstance(partitions, list):
        raise TypeError(f"Expected 'partitions' to be a list, got '{_name(partitions)}'")
    for tp in partitions:
        if not isinstance(tp, TopicPartition):
            raise TypeError(
                "Element of the 'partitions' list must be of type 'TopicPartition'"
                f" got '{_name(tp)}' "
            )
        if not isinstance(tp.topic, str):
            raise TypeError(f"argument 1 must be str, not {_name(tp.topic)}")
        if tp.partition < 0:
            raise ValueError(
                "Elements of the 'partitions' list must not have negative value for 'partition' field"
            )
