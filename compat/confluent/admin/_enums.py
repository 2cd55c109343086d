"""The admin API's enums, numbered as librdkafka numbers them (and Kafka, where
the wire carries them: an ACL's resource type, pattern, operation and
permission are Kafka's numbers), and :func:`to_enum`, how confluent-kafka
takes an enum argument: a member, its number, or its name in any case."""

from __future__ import annotations

import enum
from typing import Any, TypeVar

from trafka.codec.acl import AclOperation as _Op

__all__ = [
    "AclOperation",
    "AclPermissionType",
    "AlterConfigOpType",
    "ConfigSource",
    "ResourcePatternType",
    "ResourceType",
    "ScramMechanism",
    "to_enum",
]

_E = TypeVar("_E", bound=enum.Enum)


class _ByValue(enum.Enum):
    """An enum whose members order by their number."""

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, type(self)):
            return NotImplemented
        less: bool = self.value < other.value
        return less


class ResourceType(_ByValue):
    """A kind of resource (BROKER is Kafka's CLUSTER: its name is a broker id)."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4
    TRANSACTIONAL_ID = 5


class ResourcePatternType(_ByValue):
    """How an ACL's resource name matches names."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(_ByValue):
    """What an ACL allows or denies: Kafka's operations (trafka.codec's
    numbers), those confluent-kafka 2.16 names."""

    UNKNOWN = _Op.UNKNOWN.value
    ANY = _Op.ANY.value
    ALL = _Op.ALL.value
    READ = _Op.READ.value
    WRITE = _Op.WRITE.value
    CREATE = _Op.CREATE.value
    DELETE = _Op.DELETE.value
    ALTER = _Op.ALTER.value
    DESCRIBE = _Op.DESCRIBE.value
    CLUSTER_ACTION = _Op.CLUSTER_ACTION.value
    DESCRIBE_CONFIGS = _Op.DESCRIBE_CONFIGS.value
    ALTER_CONFIGS = _Op.ALTER_CONFIGS.value
    IDEMPOTENT_WRITE = _Op.IDEMPOTENT_WRITE.value


class AclPermissionType(_ByValue):
    """Whether an ACL allows or denies."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ScramMechanism(_ByValue):
    """A SASL/SCRAM mechanism."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2


class AlterConfigOpType(enum.Enum):
    """What ``incremental_alter_configs`` does with a config entry."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


class ConfigSource(enum.Enum):
    """Where a described config's value comes from (Kafka's numbers)."""

    UNKNOWN_CONFIG = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    GROUP_CONFIG = 8


def to_enum(value: Any, kind: type[_E]) -> _E:
    """``value`` as a member of ``kind``: a member, a number (ValueError when no
    member has it) or a name in any case (ValueError when unknown); anything
    else is a TypeError."""
    if isinstance(value, str):
        try:
            return kind[value.upper()]
        except KeyError:
            raise ValueError(f'Unknown value "{value}": should be a {kind.__name__}') from None
    if isinstance(value, int):
        return kind(value)
    if not isinstance(value, kind):
        raise TypeError(f'Unknown value "{value}": should be a {kind.__name__}')
    return value
