"""trafka.sdk: a Kafka client for trio and asyncio (through anyio).

Open components with async context managers that own their tasks::

    async with open_producer(bootstrap_servers="localhost:9092") as producer:
        metadata = await producer.send_and_wait("events", b"hello", key=b"k")

    async with open_consumer("events", bootstrap_servers="localhost:9092", group_id="g") as consumer:
        async for record in consumer:
            ...

    async with open_admin(bootstrap_servers="localhost:9092") as admin:
        await admin.create_topics([NewTopic("events", 3)])

Frameworks that open a client in one hook and close it in another use
``start_producer`` / ``start_consumer`` / ``start_admin`` and ``await client.stop()``
(:mod:`.hosting`); the client still belongs to a task of its own.

Share groups (KIP-932, "queues"): records are shared among the members and
acknowledged one by one::

    async with ShareConsumer(bootstrap_servers="localhost:9092", group_id="workers") as consumer:
        consumer.subscribe(["jobs"])
        async for record in consumer:
            ...

Code without an event loop uses :mod:`trafka.sdk.blocking` (``Producer``,
``Consumer``, ``ShareConsumer``, ``Admin``): the same clients on a loop in a thread of their own.
Every component has ``statistics()`` (:mod:`.statistics`).

The protocol logic underneath is I/O-free and usable on its own:
:mod:`.connection_state`, :mod:`.metadata`, :mod:`.accumulator`,
:mod:`.fetcher`, :mod:`.assignors`, :mod:`.partitioners`, :mod:`.membership`
(the consumer group state machine), :mod:`.group_protocol` (group requests
and error classification), :mod:`.transactions` (the producer's transaction
state machine), :mod:`.share_membership` and :mod:`.share_fetcher` (the share
consumer's group membership, share sessions and acknowledgements), and the
admin client's per-area requests and answers (the modules of :mod:`.admin`).
"""

from typing import TYPE_CHECKING

from trafka.common.lazy import lazy_exports

# The settings load first, whatever module of the package is imported first:
# sdk.config.client and sdk.tracing import each other's modules, which works
# only in this order (a program whose first import is trafka.sdk.tracing).
from . import config as config
from .errors import (
    ApiTimeoutError,
    ArgumentError,
    ArgumentTypeError,
    ArgumentValueError,
    AuthenticationError,
    BrokerUnreachableError,
    ClientClosedError,
    ConfigError,
    ConfigWarning,
    DeliveryTimeoutError,
    InvalidTxnStateError,
    KafkaConnectionError,
    KafkaError,
    NoBrokersAvailableError,
    OutcomeUnknownError,
    ProducerBlockedError,
    ProducerFencedError,
    ProtocolError,
    RecordPurgedError,
    RequestTimeoutError,
    SerializationError,
    TrafkaError,
    TransactionAbortableError,
    TransactionAbortedError,
    TransactionFatalError,
    UsageError,
)

# Every client and value loads when first named (PEP 562), from the module
# that defines it: ``from trafka.sdk import open_admin`` loads the admin client
# and what it uses, not the producer and the consumer (issue #48; issue #60: a
# ``trafka topics list`` process paid half a second for the consumer and the
# producer it never opened). Only the errors and the settings load with the package.
_LAZY = {
    "RecordMetadata": ".producer_batches",
    "ClientConfig": ".config.client",
    "ProducerConfig": ".config.producer",
    "Consumer": ".consumer",
    "open_consumer": ".consumer",
    "ConsumerRecord": ".consumer_types",
    "OffsetAndMetadata": ".consumer_types",
    "OffsetOutOfRangeError": ".consumer_types",
    "PartitionEOF": ".consumer_types",
    "TopicPartition": ".consumer_types",
    "CommitFailedError": ".group_protocol",
    "start_admin": ".hosting",
    "start_consumer": ".hosting",
    "start_producer": ".hosting",
    "start_share_consumer": ".hosting",
    "Partitioner": ".partitioners",
    "murmur2": ".partitioners",
    "PendingCommit": ".producer_transactions",
    "Producer": ".producer",
    "RecordFuture": ".producer",
    "open_producer": ".producer",
    "ConsumerGroupMetadata": ".transaction_state",
    "TxnState": ".transaction_state",
    "AdminConfig": ".config.admin",
    "ConsumerConfig": ".config.consumer",
    "ShareConsumerConfig": ".config.share",
    "AdminStatistics": ".statistics",
    "ApiStatistics": ".statistics",
    "BrokerStatistics": ".statistics",
    "ConsumerStatistics": ".statistics",
    "CoordinatorStatistics": ".statistics",
    "GroupStatistics": ".statistics",
    "NodeWindowStatistics": ".statistics",
    "PartitionStatistics": ".statistics",
    "ProducerPartitionStatistics": ".statistics",
    "ProducerStatistics": ".statistics",
    "ShareConsumerStatistics": ".statistics",
    "TelemetryStatistics": ".statistics",
    "ThrottleStatistics": ".statistics",
    "TopicStatistics": ".statistics",
    "AclBinding": ".acls",
    "AclBindingFilter": ".acls",
    "AclOperation": ".acls",
    "AclPermissionType": ".acls",
    "AclResourceType": ".acls",
    "PatternType": ".acls",
    "ClientQuotaAlteration": ".quotas",
    "ClientQuotaEntity": ".quotas",
    "ClientQuotaFilterComponent": ".quotas",
    "DelegationToken": ".delegation_tokens",
    "TokenInformation": ".delegation_tokens",
    "Admin": ".admin",
    "ClusterDescription": ".admin",
    "FeatureMetadata": ".admin",
    "FeatureUpdate": ".admin",
    "GroupDescription": ".admin",
    "GroupListing": ".admin",
    "LogDirDescription": ".admin",
    "NewPartitions": ".admin",
    "NewTopic": ".admin",
    "PartitionReassignment": ".admin",
    "ProducerState": ".admin",
    "ReplicaLogDirInfo": ".admin",
    "ScramCredentialInfo": ".admin",
    "ShareGroupDescription": ".admin",
    "ShareMemberDescription": ".admin",
    "SharePartitionOffsetInfo": ".admin",
    "TopicPartitionReplica": ".admin",
    "TransactionDescription": ".admin",
    "TransactionListing": ".admin",
    "UpgradeType": ".admin",
    "UserScramCredentialDeletion": ".admin",
    "UserScramCredentialsDescription": ".admin",
    "UserScramCredentialUpsertion": ".admin",
    "open_admin": ".admin",
    "AcknowledgeType": ".share_consumer",
    "ShareCommitResult": ".share_consumer",
    "ShareConsumer": ".share_consumer",
    "ShareRecord": ".share_consumer",
    "open_share_consumer": ".share_consumer",
}

if TYPE_CHECKING:
    from .acls import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AclResourceType,
        PatternType,
    )
    from .admin import (
        Admin,
        ClusterDescription,
        FeatureMetadata,
        FeatureUpdate,
        GroupDescription,
        GroupListing,
        LogDirDescription,
        NewPartitions,
        NewTopic,
        PartitionReassignment,
        ProducerState,
        ReplicaLogDirInfo,
        ScramCredentialInfo,
        ShareGroupDescription,
        ShareMemberDescription,
        SharePartitionOffsetInfo,
        TopicPartitionReplica,
        TransactionDescription,
        TransactionListing,
        UpgradeType,
        UserScramCredentialDeletion,
        UserScramCredentialsDescription,
        UserScramCredentialUpsertion,
        open_admin,
    )
    from .config.admin import AdminConfig
    from .config.client import ClientConfig
    from .config.consumer import ConsumerConfig
    from .config.producer import ProducerConfig
    from .config.share import ShareConsumerConfig
    from .consumer import Consumer, open_consumer
    from .consumer_types import (
        ConsumerRecord,
        OffsetAndMetadata,
        OffsetOutOfRangeError,
        PartitionEOF,
        TopicPartition,
    )
    from .delegation_tokens import DelegationToken, TokenInformation
    from .group_protocol import CommitFailedError
    from .hosting import start_admin, start_consumer, start_producer, start_share_consumer
    from .partitioners import Partitioner, murmur2
    from .producer import Producer, RecordFuture, open_producer
    from .producer_batches import RecordMetadata
    from .producer_transactions import PendingCommit
    from .quotas import ClientQuotaAlteration, ClientQuotaEntity, ClientQuotaFilterComponent
    from .share_consumer import (
        AcknowledgeType,
        ShareCommitResult,
        ShareConsumer,
        ShareRecord,
        open_share_consumer,
    )
    from .statistics import (
        AdminStatistics,
        ApiStatistics,
        BrokerStatistics,
        ConsumerStatistics,
        CoordinatorStatistics,
        GroupStatistics,
        NodeWindowStatistics,
        PartitionStatistics,
        ProducerPartitionStatistics,
        ProducerStatistics,
        ShareConsumerStatistics,
        TelemetryStatistics,
        ThrottleStatistics,
        TopicStatistics,
    )
    from .transaction_state import ConsumerGroupMetadata, TxnState


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


__all__ = [
    "OffsetAndMetadata",
    "start_admin",
    "start_consumer",
    "start_producer",
    "start_share_consumer",
    "AcknowledgeType",
    "ShareCommitResult",
    "ShareConsumer",
    "ShareConsumerConfig",
    "ShareConsumerStatistics",
    "ShareGroupDescription",
    "ShareMemberDescription",
    "SharePartitionOffsetInfo",
    "ShareRecord",
    "open_share_consumer",
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AclResourceType",
    "PatternType",
    "AdminStatistics",
    "LogDirDescription",
    "PartitionReassignment",
    "ApiStatistics",
    "BrokerStatistics",
    "ConsumerStatistics",
    "CoordinatorStatistics",
    "GroupStatistics",
    "NodeWindowStatistics",
    "PartitionStatistics",
    "ProducerPartitionStatistics",
    "ProducerStatistics",
    "TelemetryStatistics",
    "ThrottleStatistics",
    "TopicStatistics",
    "TxnState",
    "ConsumerGroupMetadata",
    "TransactionFatalError",
    "TransactionAbortedError",
    "RecordPurgedError",
    "TransactionAbortableError",
    "ProducerFencedError",
    "InvalidTxnStateError",
    "Admin",
    "AdminConfig",
    "ClientClosedError",
    "ClientConfig",
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "ClientQuotaFilterComponent",
    "ClusterDescription",
    "CommitFailedError",
    "ConfigError",
    "ConfigWarning",
    "Consumer",
    "ConsumerConfig",
    "ConsumerRecord",
    "DelegationToken",
    "DeliveryTimeoutError",
    "FeatureMetadata",
    "FeatureUpdate",
    "GroupDescription",
    "GroupListing",
    "KafkaConnectionError",
    "KafkaError",
    "NewPartitions",
    "NewTopic",
    "NoBrokersAvailableError",
    "OutcomeUnknownError",
    "OffsetOutOfRangeError",
    "PartitionEOF",
    "Partitioner",
    "PendingCommit",
    "Producer",
    "ProducerBlockedError",
    "ProducerState",
    "ProducerConfig",
    "ProtocolError",
    "RecordFuture",
    "RecordMetadata",
    "ReplicaLogDirInfo",
    "ApiTimeoutError",
    "ArgumentError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "AuthenticationError",
    "BrokerUnreachableError",
    "RequestTimeoutError",
    "ScramCredentialInfo",
    "SerializationError",
    "TokenInformation",
    "TopicPartition",
    "TopicPartitionReplica",
    "TrafkaError",
    "TransactionDescription",
    "TransactionListing",
    "UpgradeType",
    "UsageError",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
    "murmur2",
    "open_admin",
    "open_consumer",
    "open_producer",
]
