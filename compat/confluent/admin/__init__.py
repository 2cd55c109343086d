"""confluent-kafka's admin API (``confluent_kafka.admin``) over trafka's
blocking admin client: :class:`AdminClient`, whose calls return futures, and
the values they take and return (``NewTopic``, ``ConfigResource``,
``AclBinding``, ``OffsetSpec``, the descriptions...), with confluent-kafka's
names, constructors and checks.

The package mirrors confluent-kafka's public names, not its layout:
:mod:`._client` is the client, :mod:`._checks` the argument checks it makes
before any request, :mod:`._work` each call's work on trafka's client, the
other modules the values.
"""

from __future__ import annotations

from .._errors import KafkaError, KafkaException
from .._model import ConsumerGroupState as _ConsumerGroupState
from .._model import ConsumerGroupTopicPartitions as _ConsumerGroupTopicPartitions
from .._model import ConsumerGroupType as _ConsumerGroupType
from .._model import ElectionType as _ElectionType
from .._model import IsolationLevel as _IsolationLevel
from .._model import TopicCollection as _TopicCollection
from .._types import OFFSET_INVALID
from .._types import TopicPartition as _TopicPartition
from ._acl import AclBinding, AclBindingFilter
from ._client import AdminClient
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
from ._metadata import (
    BrokerMetadata,
    ClusterMetadata,
    GroupMember,
    GroupMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from ._models import (
    ConsumerGroupDescription,
    ConsumerGroupListing,
    DeletedRecords,
    DescribeClusterResult,
    ListConsumerGroupsResult,
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
)

# librdkafka's numbers under confluent-kafka's module-level names.
RESOURCE_UNKNOWN = ResourceType.UNKNOWN.value
RESOURCE_ANY = ResourceType.ANY.value
RESOURCE_TOPIC = ResourceType.TOPIC.value
RESOURCE_GROUP = ResourceType.GROUP.value
RESOURCE_BROKER = ResourceType.BROKER.value
RESOURCE_TRANSACTIONAL_ID = ResourceType.TRANSACTIONAL_ID.value
CONFIG_SOURCE_UNKNOWN_CONFIG = ConfigSource.UNKNOWN_CONFIG.value
CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG = ConfigSource.DYNAMIC_TOPIC_CONFIG.value
CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG = ConfigSource.DYNAMIC_BROKER_CONFIG.value
CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG = ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value
CONFIG_SOURCE_STATIC_BROKER_CONFIG = ConfigSource.STATIC_BROKER_CONFIG.value
CONFIG_SOURCE_DEFAULT_CONFIG = ConfigSource.DEFAULT_CONFIG.value
CONFIG_SOURCE_GROUP_CONFIG = ConfigSource.GROUP_CONFIG.value

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AdminClient",
    "AlterConfigOpType",
    "BrokerMetadata",
    "CONFIG_SOURCE_DEFAULT_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_BROKER_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_DEFAULT_BROKER_CONFIG",
    "CONFIG_SOURCE_DYNAMIC_TOPIC_CONFIG",
    "CONFIG_SOURCE_GROUP_CONFIG",
    "CONFIG_SOURCE_STATIC_BROKER_CONFIG",
    "CONFIG_SOURCE_UNKNOWN_CONFIG",
    "ClusterMetadata",
    "ConfigEntry",
    "ConfigResource",
    "ConfigSource",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "DeletedRecords",
    "DescribeClusterResult",
    "GroupMember",
    "GroupMetadata",
    "KafkaError",
    "KafkaException",
    "ListConsumerGroupsResult",
    "ListOffsetsResultInfo",
    "MemberAssignment",
    "MemberDescription",
    "NewPartitions",
    "NewTopic",
    "OFFSET_INVALID",
    "OffsetSpec",
    "PartitionMetadata",
    "RESOURCE_ANY",
    "RESOURCE_BROKER",
    "RESOURCE_GROUP",
    "RESOURCE_TOPIC",
    "RESOURCE_TRANSACTIONAL_ID",
    "RESOURCE_UNKNOWN",
    "ResourcePatternType",
    "ResourceType",
    "ScramCredentialInfo",
    "ScramMechanism",
    "TopicDescription",
    "TopicMetadata",
    "UserScramCredentialAlteration",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
]

# confluent-kafka's module also holds these under private names (its tests import
# ``_ElectionType``); they are the drop-in's top-level types.
_private_aliases = (
    _ConsumerGroupState,
    _ConsumerGroupTopicPartitions,
    _ConsumerGroupType,
    _ElectionType,
    _IsolationLevel,
    _TopicCollection,
    _TopicPartition,
)
