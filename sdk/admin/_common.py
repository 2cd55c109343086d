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

from ..calls import Again
from ..fetcher import TopicPartition

__all__ = [
    "NOT_DONE",
    "Result",
    "answered",
    "by_topic",
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
    """Partition numbers grouped by topic, in the order given."""
    out: dict[str, list[int]] = {}
    for tp in partitions:
        topic, partition = TopicPartition(*tp)
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
