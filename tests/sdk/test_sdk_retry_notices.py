"""The producer's notices of the errors it retries: rate-limited per kind of error."""

from __future__ import annotations

from trafka.codec import ErrorCode, KafkaError
from trafka.sdk._retry_notices import RetryNotices, error_kind
from trafka.sdk.errors import KafkaConnectionError


def test_errors_are_keyed_by_their_kind() -> None:
    assert error_kind(KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)) == "NOT_ENOUGH_REPLICAS"
    assert error_kind(KafkaError(9999)) == "error 9999"
    assert error_kind(KafkaConnectionError("lost")) == "KafkaConnectionError"


def test_the_first_retry_of_each_kind_is_told_then_one_per_interval_with_a_count() -> None:
    notices = RetryNotices(interval=30.0)
    nope = KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS, "t-0: too few in-sync replicas")
    first = notices.note(nope, "t-0", 1, 119.6, now=0.0)
    assert first is not None
    assert "t-0" in first and "NOT_ENOUGH_REPLICAS" in first and "in 120 s" in first
    # The same kind, any partition, within the window: counted, not told.
    assert notices.note(nope, "t-1", 1, 119.0, now=1.0) is None
    assert notices.note(nope, "t-0", 2, 118.0, now=2.0) is None
    # Another kind has its own window.
    moved = KafkaError(ErrorCode.NOT_LEADER_OR_FOLLOWER)
    assert notices.note(moved, "u-3", 1, 100.0, now=3.0) is not None
    # After the window: told again, with what was held back.
    again = notices.note(nope, "t-0", 9, 80.0, now=30.0)
    assert again is not None and "2 more retries after NOT_ENOUGH_REPLICAS" in again
    assert notices.note(nope, "t-0", 10, 79.0, now=31.0) is None
    later = notices.note(nope, "t-0", 11, 10.0, now=100.0)
    assert later is not None and "1 more retries" in later
    # Nothing held back since: no count.
    last = notices.note(nope, "t-0", 12, 5.0, now=200.0)
    assert last is not None and "more retries" not in last
