"""Rate-limited notices of the errors a producer retries, without I/O.

A producer retries retriable errors (NOT_ENOUGH_REPLICAS, NOT_LEADER_OR_FOLLOWER,
a lost connection...) until ``delivery.timeout.ms`` (two minutes by default). Said
only at the end, the cause comes two minutes late; said at every retry, a
partition whose ISR is too small writes a line per backoff (and per partition).
So, as librdkafka (and kcat with it) reports the error it retries as it happens:

* Each kind of error has a key: a Kafka error code's name, else the exception's
  class name. The first retry of a key is told at once (:meth:`RetryNotices.note`
  returns the line), which opens a window of ``interval`` seconds in which that
  key's further retries are only counted.
* The first retry of the key after the window is told with the count of those
  held back, and opens the next window. Nothing is told from a timer.
* The keys are few (the error codes and exception classes there are), so every
  key is remembered.
* The clock is the caller's: ``now`` in seconds, any monotonic origin.
"""

from __future__ import annotations

from trafka.codec import KafkaError

__all__ = ["RetryNotices", "error_kind"]


def error_kind(exc: BaseException) -> str:
    """The key of an error: ``"NOT_ENOUGH_REPLICAS"``, ``"KafkaConnectionError"``."""
    if isinstance(exc, KafkaError):
        if exc.code.value != exc.raw_code:  # a code this codec does not know
            return f"error {exc.raw_code}"
        return exc.code.name
    return type(exc).__name__


class RetryNotices:
    """Decides which retries are worth a line.

    Args:
        interval: seconds between two lines about one kind of error.
    """

    __slots__ = ("_keys", "interval")

    def __init__(self, interval: float = 30.0) -> None:
        self.interval = interval
        # key -> (end of its window, retries held back in it)
        self._keys: dict[str, tuple[float, int]] = {}

    def note(
        self, exc: BaseException, where: str, attempt: int, left: float, now: float
    ) -> str | None:
        """A retry after ``exc``: the line to tell now, or None (counted for later).

        Args:
            exc: the error that made the producer retry.
            where: what was retried, such as ``"topic-0"``.
            attempt: how many attempts the batch has made.
            left: seconds until ``delivery.timeout.ms`` fails it.
            now: the caller's clock.
        """
        key = error_kind(exc)
        window = self._keys.get(key)
        if window is not None and now < window[0]:
            self._keys[key] = (window[0], window[1] + 1)
            return None
        held = window[1] if window is not None else 0
        self._keys[key] = (now + self.interval, 0)
        more = ""
        if held:
            more = f" ({held} more retries after {key} since the last such line)"
        return (
            f"{where}: {exc}; retrying (attempt {attempt}; delivery.timeout.ms "
            f"fails the records in {max(left, 0.0):.0f} s){more}"
        )
