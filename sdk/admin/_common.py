"""What the admin areas' planners and parsers share: fitting a request to a
version, grouping partitions by topic, and turning per-item answers into
results or errors. No I/O.

Rules:

* An item the broker did not answer for fails with UNKNOWN_SERVER_ERROR
  ("no answer"); nothing is assumed done.
* Creating, deleting and growing topics (and altering SCRAM credentials) are
  not idempotent: :func:`settle` asks for another attempt only on answers that
  say the broker surely did nothing (NOT_CONTROLLER, THROTTLING_QUOTA_EXCEEDED),
  as Kafka's AdminClient does.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any, TypeVar

from trafka.codec import ErrorCode, KafkaError, api

from .._validate import (
    INT16_MAX,
    INT32_MAX,
    check_int,
    check_names,
    check_offset,
    check_str,
    check_topic_partition,
    check_topic_partitions,
    describe,
)
from ..calls import Again
from ..consumer_types import TopicPartition
from ..errors import ArgumentTypeError, ArgumentValueError

__all__ = [
    "NOT_DONE",
    "Result",
    "answered",
    "by_topic",
    "check_broker_id",
    "check_config_changes",
    "check_hmac",
    "check_log_dir_assignments",
    "check_new_topic_counts",
    "check_offset_spec",
    "check_producer_id",
    "check_reassignments",
    "check_replica",
    "first_failure",
    "fit",
    "partition_outcome",
    "settle",
]

_T = TypeVar("_T")
_K = TypeVar("_K", bound=Hashable)

#: A per-name answer of a topic-like operation: (name, error code, error message).
Result = tuple[str | None, int, str | None]

#: The answers after which the broker surely did nothing with an item.
NOT_DONE = frozenset({ErrorCode.NOT_CONTROLLER, ErrorCode.THROTTLING_QUOTA_EXCEEDED})


#: How much sooner than the client stops waiting a request that the broker may
#: hold until its ``timeout_ms`` asks to be answered (at most half the wait):
#: :func:`answer_timeout_ms`.
ANSWER_MARGIN_S = 5.0


def answer_timeout_ms(wait_s: float) -> int:
    """The ``timeout_ms`` to send in a request the broker answers at the latest
    at that timeout (CreateTopics, DeleteTopics, CreatePartitions, ElectLeaders)
    when the client waits ``wait_s`` for the answer: :data:`ANSWER_MARGIN_S`
    less, or half the wait when that is shorter. The broker's answer at its
    timeout (REQUEST_TIMED_OUT for what it did not see done, and the outcome of
    the rest) then arrives before the client gives up on it. Java's AdminClient
    sends the whole time left and waits as long, so it can lose that answer."""
    wait_s = max(0.0, wait_s)
    return int((wait_s - min(ANSWER_MARGIN_S, wait_s / 2)) * 1000)


def fit(api_key: int, version: int, cls: type, **fields: Any) -> Any:
    """``cls(**fields)`` without the fields that ``version`` of the request lacks."""
    schema = api(api_key).module.REQUEST_SCHEMAS[version]
    absent = {name for name, _ in schema.absent}
    return cls(**{k: v for k, v in fields.items() if k not in absent})


def settle(
    results: Iterable[Result],
    pending: set[str],
    failed: dict[str, KafkaError],
    what: str,
) -> None:
    """Record per-name results of a topic operation: successes and final errors
    leave ``pending``; NOT_CONTROLLER or a quota keeps a name there and asks
    for another attempt. A name the broker did not answer for fails."""
    retry: KafkaError | None = None
    for name, code, message in results:
        if name is None or name not in pending:
            continue
        if code in NOT_DONE:
            retry = retry or KafkaError(code, f"{what} {name!r}")
            continue
        pending.discard(name)
        error = partition_outcome(code, message, f"{what} {name!r}")
        if error is not None:
            failed[name] = error
    if retry is not None:
        raise Again(retry, refresh=True)
    for name in sorted(pending):
        failed[name] = KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what} {name!r}: no answer")
    pending.clear()


def by_topic(
    partitions: Iterable[TopicPartition] | Iterable[tuple[str, int]],
) -> dict[str, list[int]]:
    """Partition numbers grouped by topic, in the order given.

    Raises:
        TypeError, ValueError: ``partitions`` is not an iterable of partitions.
    """
    out: dict[str, list[int]] = {}
    for topic, partition in check_topic_partitions("partitions", partitions):
        out.setdefault(topic, []).append(partition)
    return out


def answered(keys: Iterable[_K], out: Mapping[_K, _T], what: str) -> dict[_K, _T]:
    """``out`` in the order of ``keys``; a key the broker left out fails the call."""
    for key in keys:
        if key not in out:
            raise KafkaError(ErrorCode.UNKNOWN_SERVER_ERROR, f"{what} {key!r}: no answer")
    return {key: out[key] for key in keys}


def partition_outcome(code: int, message: str | None, what: str) -> KafkaError | None:
    """None for an item that succeeded, else its error (with the broker's message)."""
    if not code:
        return None
    return KafkaError(code, f"{what}: {message}" if message else what)


def first_failure(keys: Iterable[_K], failed: Mapping[_K, KafkaError]) -> None:
    """Raise the error of the first of ``keys`` that failed, if any."""
    for key in keys:
        if key in failed:
            raise failed[key]


# -- argument checks of the admin calls (see trafka.sdk._validate's rules) --------------------


def check_broker_id(name: str, value: Any) -> int:
    return check_int(name, value, minimum=0, maximum=INT32_MAX)


def check_producer_id(name: str, value: Any) -> int:
    """A producer id: any int64 (which ids exist is the broker's to answer)."""
    return check_int(name, value, minimum=-(2**63), maximum=2**63 - 1)


def check_hmac(value: Any) -> bytes:
    if not isinstance(value, bytes | bytearray | memoryview):
        raise ArgumentTypeError(f"hmac must be bytes (a token's HMAC), got {describe(value)}")
    if not len(value):
        raise ArgumentValueError("hmac must not be empty")
    return bytes(value)


def check_config_changes(
    name: str, changes: Any, check_resource: Any
) -> dict[Any, dict[str, str | None]]:
    """``{resource: {key: value or None}}``: resource names checked by
    ``check_resource``, keys non-empty strings, values strings or None."""
    if not isinstance(changes, Mapping):
        raise ArgumentTypeError(
            f"{name} must be a mapping of names to settings, got {describe(changes)}"
        )
    out: dict[Any, dict[str, str | None]] = {}
    for resource, settings in changes.items():
        check_resource(f"{name} key {resource!r}", resource)
        where = f"{name}[{resource!r}]"
        if not isinstance(settings, Mapping):
            raise ArgumentTypeError(
                f"{where} must be a mapping of settings, got {describe(settings)}"
            )
        for key, value in settings.items():
            check_str(f"{where} key {key!r}", key)
            check_str(f"{where}[{key!r}]", value, empty=True, none=True)
        out[resource] = dict(settings)
    return out


def check_reassignments(value: Any) -> dict[TopicPartition, list[int] | None]:
    """``alter_partition_reassignments``' ``{partition: broker ids or None}``."""
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(
            f"reassignments must be a mapping of partition to broker ids, got {describe(value)}"
        )
    out: dict[TopicPartition, list[int] | None] = {}
    for key, replicas in value.items():
        tp = check_topic_partition(f"reassignments key {key!r}", key)
        where = f"reassignments[{tp!r}]"
        out[tp] = (
            None
            if replicas is None
            else check_names(where, replicas, check_broker_id, "broker ids")
        )
    return out


def check_offset_spec(name: str, value: Any) -> str | int:
    """A ListOffsets spec: ``"earliest"``, ``"latest"`` or a timestamp >= 0."""
    if value in ("earliest", "latest") and isinstance(value, str):
        return str(value)
    if isinstance(value, str):
        raise ArgumentValueError(
            f"{name} must be 'earliest', 'latest' or a timestamp >= 0, got {value!r}"
        )
    return check_offset(name, value)


def check_replica(name: str, value: Any) -> tuple[str, int, int]:
    """A ``TopicPartitionReplica`` or ``(topic, partition, broker_id)``."""
    if not isinstance(value, tuple | list) or len(value) != 3:
        raise ArgumentTypeError(
            f"{name} must be a TopicPartitionReplica (topic, partition, broker_id), "
            f"got {describe(value)}"
        )
    topic, partition, broker = value
    check_topic_partition(name, (topic, partition))
    check_broker_id(f"{name}.broker_id", broker)
    return topic, partition, broker


def check_log_dir_assignments(value: Any) -> dict[Any, str]:
    """``alter_replica_log_dirs``' ``{replica: absolute directory}``."""
    if not isinstance(value, Mapping):
        raise ArgumentTypeError(
            f"assignments must be a mapping of replica to directory, got {describe(value)}"
        )
    out: dict[Any, str] = {}
    for replica, path in value.items():
        check_replica(f"assignments key {replica!r}", replica)
        out[replica] = check_str(f"assignments[{replica!r}]", path)
    return out


def check_new_topic_counts(num_partitions: Any, replication_factor: Any) -> None:
    """A new topic's counts: -1 (the broker's default) or at least 1."""
    if check_int("num_partitions", num_partitions, minimum=-1, maximum=INT32_MAX) == 0:
        raise ArgumentValueError("num_partitions must be -1 (the broker's default) or >= 1, got 0")
    if check_int("replication_factor", replication_factor, minimum=-1, maximum=INT16_MAX) == 0:
        raise ArgumentValueError(
            "replication_factor must be -1 (the broker's default) or >= 1, got 0"
        )
