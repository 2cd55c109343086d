"""Errors raised by brokerlite.

Every brokerlite error derives from :class:`BrokerError` (itself a
:class:`~trafka.codec.errors.TrafkaError`) and carries the Kafka
:class:`~trafka.codec.errors.ErrorCode` that a request handler should put in
its response as the class attribute ``code``. Handlers therefore never need a
mapping table: ``except BrokerError as e: error_code = e.code``.

Errors raised by the partition log (:mod:`trafka.brokerlite.storage.partition`) derive from
:class:`LogError`; errors about the topic registry derive from
:class:`TopicError`. Other engineers may add classes at the end of this module.
"""

from __future__ import annotations

from typing import ClassVar

from trafka.codec.errors import ErrorCode, TrafkaError

__all__ = [
    "BrokerError",
    "CorruptRecordError",
    "InvalidConfigError",
    "InvalidPartitionsError",
    "InvalidRecordError",
    "InvalidTopicError",
    "LogError",
    "LogStorageError",
    "OffsetStoreError",
    "OffsetOutOfRangeError",
    "PolicyViolationError",
    "RecordBatchTooLargeError",
    "RecordTooLargeError",
    "TopicError",
    "TopicExistsError",
    "UnknownTopicIdError",
    "UnknownTopicOrPartitionError",
]


class BrokerError(TrafkaError):
    """Root of brokerlite's errors.

    Attributes:
        code: the Kafka error code a handler reports for this error (class attribute).
    """

    code: ClassVar[ErrorCode] = ErrorCode.UNKNOWN_SERVER_ERROR

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or self.code.message or self.code.name)


# --- partition log -------------------------------------------------------------------------


class LogError(BrokerError):
    """An error raised by a partition log (append, read, recovery)."""


class CorruptRecordError(LogError):
    """A record batch failed validation: bad length, magic or CRC32C."""

    code = ErrorCode.CORRUPT_MESSAGE


class RecordTooLargeError(LogError):
    """A record batch is larger than the topic's ``max.message.bytes``."""

    code = ErrorCode.MESSAGE_TOO_LARGE


class RecordBatchTooLargeError(LogError):
    """A record batch is larger than the topic's ``segment.bytes`` and could never fit a segment."""

    code = ErrorCode.RECORD_LIST_TOO_LARGE


class InvalidRecordError(LogError):
    """A record batch is well formed but breaks a broker rule (e.g. empty, bad timestamp)."""

    code = ErrorCode.INVALID_RECORD


class OffsetOutOfRangeError(LogError):
    """A read or DeleteRecords names an offset outside ``[log_start_offset, log_end_offset]``."""

    code = ErrorCode.OFFSET_OUT_OF_RANGE


class LogStorageError(LogError):
    """The operating system refused a write or read (disk full, I/O error, closed log)."""

    code = ErrorCode.KAFKA_STORAGE_ERROR


# --- topic registry ------------------------------------------------------------------------


class TopicError(BrokerError):
    """An error raised by the topic registry (:class:`~trafka.brokerlite.storage.log_manager.LogManager`)."""


class TopicExistsError(TopicError):
    """CreateTopics named a topic that already exists."""

    code = ErrorCode.TOPIC_ALREADY_EXISTS


class InvalidTopicError(TopicError):
    """A topic name breaks Kafka's naming rules."""

    code = ErrorCode.INVALID_TOPIC_EXCEPTION


class UnknownTopicOrPartitionError(TopicError):
    """The topic or partition does not exist."""

    code = ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


class UnknownTopicIdError(TopicError):
    """No topic has this topic id."""

    code = ErrorCode.UNKNOWN_TOPIC_ID


class InvalidPartitionsError(TopicError):
    """A partition count is below 1, or CreatePartitions does not increase it."""

    code = ErrorCode.INVALID_PARTITIONS


class InvalidConfigError(TopicError):
    """A topic config is unknown, read-only or has an invalid value."""

    code = ErrorCode.INVALID_CONFIG


class PolicyViolationError(TopicError):
    """The request breaks a limit the broker is configured with (``max_partitions``)."""

    code = ErrorCode.POLICY_VIOLATION


# --- group coordinator -----------------------------------------------------------------------


class OffsetStoreError(BrokerError):
    """The group offset journal (:mod:`trafka.brokerlite.groups.offsets`) could not be read or written.

    Raised for I/O errors (disk full, permissions), for a journal written by a newer
    format, and for use after the store is closed.
    """

    code = ErrorCode.KAFKA_STORAGE_ERROR


# --- cluster mode --------------------------------------------------------------------------------


class ClusterError(BrokerError):
    """A cluster-mode error (replication, leadership, the controller)."""


class NotLeaderOrFollowerError(ClusterError):
    """This broker does not lead the partition (or, for a follower's request, is not a replica)."""

    code = ErrorCode.NOT_LEADER_OR_FOLLOWER


class FencedLeaderEpochError(ClusterError):
    """The request's leader epoch is older than the partition's."""

    code = ErrorCode.FENCED_LEADER_EPOCH


class UnknownLeaderEpochError(ClusterError):
    """The request's leader epoch is newer than this broker knows."""

    code = ErrorCode.UNKNOWN_LEADER_EPOCH


class NotEnoughReplicasError(ClusterError):
    """Fewer in-sync replicas than ``min.insync.replicas``: nothing was written."""

    code = ErrorCode.NOT_ENOUGH_REPLICAS


class InvalidReplicationFactorError(ClusterError):
    """A replication factor below 1 or above the number of live brokers."""

    code = ErrorCode.INVALID_REPLICATION_FACTOR


class InvalidReplicaAssignmentError(ClusterError):
    """An explicit replica assignment names unknown brokers, repeats one, or is uneven."""

    code = ErrorCode.INVALID_REPLICA_ASSIGNMENT


class ClusterSetupError(ClusterError):
    """The broker cannot join the cluster: another cluster's data directory, a node id
    already registered, or ZooKeeper unreachable at start."""


class ChangeNotSeenError(ClusterError):
    """A change written to ZooKeeper that the broker did not see carried out by the
    request's ``timeout_ms`` (it goes on): Kafka's DelayedCreatePartitions and
    DelayedDeleteTopics answer REQUEST_TIMED_OUT."""

    code = ErrorCode.REQUEST_TIMED_OUT


class ZooKeeperUnavailableError(ClusterError):
    """ZooKeeper cannot be reached: the cluster's metadata cannot change now."""

    code = ErrorCode.REQUEST_TIMED_OUT
