"""The producer's notices of the errors it retries: one line per kind of error and
half minute (the rate limit is trafka.common.lograte's, tested in tests/common;
that the producer logs a retried NOT_ENOUGH_REPLICAS is tested against a broker in
test_sdk_integration.py)."""

from __future__ import annotations

from trafka.codec import ErrorCode, KafkaError
from trafka.sdk.errors import KafkaConnectionError
from trafka.sdk.producer import error_kind


def test_errors_are_keyed_by_their_kind() -> None:
    assert error_kind(KafkaError(ErrorCode.NOT_ENOUGH_REPLICAS)) == "NOT_ENOUGH_REPLICAS"
    assert error_kind(KafkaError(9999)) == "error 9999"
    assert error_kind(KafkaConnectionError("lost")) == "KafkaConnectionError"
