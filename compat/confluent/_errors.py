"""confluent-kafka's errors: :class:`KafkaError` with librdkafka's codes (its
negative internal ones and Kafka's), :class:`KafkaException`, and what a
trafka exception is as one (:func:`error_of`).

Rules:

* The codes are librdkafka's public ``rd_kafka_resp_err_t`` values: Kafka's
  error codes under librdkafka's names (``UNKNOWN_TOPIC_OR_PART`` for Kafka's
  ``UNKNOWN_TOPIC_OR_PARTITION``) and Kafka's own, and librdkafka's internal
  ones (``_PARTITION_EOF`` = -191...).
* A trafka exception becomes the code librdkafka reports for the same event:
  a broker's error code as it is, a delivery timeout ``_MSG_TIMED_OUT``, a
  refused argument ``_INVALID_ARG``, a lost connection ``_TRANSPORT``...
"""

from __future__ import annotations

import builtins
from typing import Any

from trafka.codec import ErrorCode
from trafka.codec import KafkaError as _BrokerError
from trafka.sdk import errors as _sdk

__all__ = ["KafkaError", "KafkaException", "error_of", "internal"]

#: librdkafka's internal error codes (rd_kafka_resp_err_t, negative).
_INTERNAL = {
    "_BAD_MSG": -199,
    "_BAD_COMPRESSION": -198,
    "_DESTROY": -197,
    "_FAIL": -196,
    "_TRANSPORT": -195,
    "_CRIT_SYS_RESOURCE": -194,
    "_RESOLVE": -193,
    "_MSG_TIMED_OUT": -192,
    "_PARTITION_EOF": -191,
    "_UNKNOWN_PARTITION": -190,
    "_FS": -189,
    "_UNKNOWN_TOPIC": -188,
    "_ALL_BROKERS_DOWN": -187,
    "_INVALID_ARG": -186,
    "_TIMED_OUT": -185,
    "_QUEUE_FULL": -184,
    "_ISR_INSUFF": -183,
    "_NODE_UPDATE": -182,
    "_SSL": -181,
    "_WAIT_COORD": -180,
    "_UNKNOWN_GROUP": -179,
    "_IN_PROGRESS": -178,
    "_PREV_IN_PROGRESS": -177,
    "_EXISTING_SUBSCRIPTION": -176,
    "_ASSIGN_PARTITIONS": -175,
    "_REVOKE_PARTITIONS": -174,
    "_CONFLICT": -173,
    "_STATE": -172,
    "_UNKNOWN_PROTOCOL": -171,
    "_NOT_IMPLEMENTED": -170,
    "_AUTHENTICATION": -169,
    "_NO_OFFSET": -168,
    "_OUTDATED": -167,
    "_TIMED_OUT_QUEUE": -166,
    "_UNSUPPORTED_FEATURE": -165,
    "_WAIT_CACHE": -164,
    "_INTR": -163,
    "_KEY_SERIALIZATION": -162,
    "_VALUE_SERIALIZATION": -161,
    "_KEY_DESERIALIZATION": -160,
    "_VALUE_DESERIALIZATION": -159,
    "_PARTIAL": -158,
    "_READ_ONLY": -157,
    "_NOENT": -156,
    "_UNDERFLOW": -155,
    "_INVALID_TYPE": -154,
    "_RETRY": -153,
    "_PURGE_QUEUE": -152,
    "_PURGE_INFLIGHT": -151,
    "_FATAL": -150,
    "_INCONSISTENT": -149,
    "_GAPLESS_GUARANTEE": -148,
    "_MAX_POLL_EXCEEDED": -147,
    "_UNKNOWN_BROKER": -146,
    "_NOT_CONFIGURED": -145,
    "_FENCED": -144,
    "_APPLICATION": -143,
    "_ASSIGNMENT_LOST": -142,
    "_NOOP": -141,
    "_AUTO_OFFSET_RESET": -140,
    "_LOG_TRUNCATION": -139,
    "_INVALID_DIFFERENT_RECORD": -138,
    "_DESTROY_BROKER": -137,
    "UNKNOWN": -1,
}
#: librdkafka's names of Kafka's codes where they are not Kafka's.
_RENAMED = {
    "NO_ERROR": 0,
    "INVALID_MSG": 2,
    "UNKNOWN_TOPIC_OR_PART": 3,
    "INVALID_MSG_SIZE": 4,
    "NOT_LEADER_FOR_PARTITION": 6,
    "MSG_SIZE_TOO_LARGE": 10,
    "STALE_CTRL_EPOCH": 11,
    "TOPIC_EXCEPTION": 17,
    "REBOOTSTRAP_REQUIRED": 129,
    "STREAMS_INVALID_TOPOLOGY": 130,
    "STREAMS_INVALID_TOPOLOGY_EPOCH": 131,
    "STREAMS_TOPOLOGY_FENCED": 132,
    "SHARE_SESSION_LIMIT_REACHED": 133,
}
_NAMES = {**{e.name: e.value for e in ErrorCode if e.value > 0}, **_RENAMED, **_INTERNAL}
_NAME_OF = {code: name for name, code in _NAMES.items()}


def internal(name: str) -> int:
    """librdkafka's internal code of that name (``_PARTITION_EOF``: -191)."""
    return _INTERNAL[name]


class KafkaError:
    """An error as confluent-kafka reports it: a code, its name and a reason.

    Args:
        error: the code (an int; the class's constants, ``KafkaError._PARTITION_EOF``).
        reason: what happened, in words (default: the code's name).
        fatal / retriable / txn_requires_abort: as librdkafka flags the error.
    """

    def __init__(
        self,
        error: int,
        reason: str | None = None,
        fatal: bool = False,
        retriable: bool = False,
        txn_requires_abort: bool = False,
    ) -> None:
        self._code = int(error)
        self._reason = reason
        self._fatal = fatal
        self._retriable = retriable
        self._txn_requires_abort = txn_requires_abort

    def code(self) -> int:
        return self._code

    def name(self) -> str:
        # librdkafka's name and text of a code it does not know: ERR_12345?, Err-12345?
        return _NAME_OF.get(self._code, f"ERR_{self._code}?")

    def str(self) -> str:
        if self._reason:
            return self._reason
        return self.name() if self._code in _NAME_OF else f"Err-{self._code}?"

    def fatal(self) -> bool:
        return self._fatal

    def retriable(self) -> bool:
        return self._retriable

    def txn_requires_abort(self) -> bool:
        return self._txn_requires_abort

    def __eq__(self, other: object) -> bool:
        if isinstance(other, KafkaError):
            return self._code == other.code()
        if isinstance(other, int):
            return self._code == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._code)

    def __str__(self) -> builtins.str:  # confluent-kafka's str() is the repr
        return self.__repr__()

    def __repr__(self) -> builtins.str:
        return f'KafkaError{{code={self.name()},val={self._code},str="{self.str()}"}}'


for _name, _code in _NAMES.items():
    setattr(KafkaError, _name, _code)


class KafkaException(Exception):
    """What confluent-kafka raises: ``args[0]`` is the :class:`KafkaError`."""

    def __init__(self, error: Any = None, *args: Any, **kwargs: Any) -> None:
        if isinstance(error, int) and not isinstance(error, bool):
            error = KafkaError(error, *args, **kwargs)
            args = ()
        super().__init__(error, *args)


def _code_of(exc: BaseException) -> int:
    if isinstance(exc, _sdk.DeliveryTimeoutError):
        return _INTERNAL["_MSG_TIMED_OUT"]
    if isinstance(exc, _sdk.ApiTimeoutError):  # the client's own wait, not a broker's code
        return _INTERNAL["_TIMED_OUT"]
    if isinstance(exc, _BrokerError):
        return exc.raw_code
    checks: list[tuple[type[BaseException] | tuple[type[BaseException], ...], str]] = [
        (_sdk.RecordPurgedError, "_PURGE_QUEUE"),
        ((_sdk.ArgumentError, _sdk.ConfigError, TypeError, ValueError), "_INVALID_ARG"),
        (_sdk.ProducerBlockedError, "_QUEUE_FULL"),
        (_sdk.ClientClosedError, "_DESTROY"),
        (_sdk.AuthenticationError, "_AUTHENTICATION"),
        (_sdk.NoBrokersAvailableError, "_ALL_BROKERS_DOWN"),
        (_sdk.KafkaConnectionError, "_TRANSPORT"),
        (_sdk.UsageError, "_STATE"),
        (TimeoutError, "_TIMED_OUT"),
    ]
    for kind, name in checks:
        if isinstance(exc, kind):
            return _INTERNAL[name]
    return _INTERNAL["_FAIL"]


def error_of(exc: BaseException) -> KafkaError:
    """``exc`` (a trafka error) as the :class:`KafkaError` librdkafka reports for it."""
    if isinstance(exc, KafkaException) and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    code = _code_of(exc)
    if isinstance(exc, _sdk.DeliveryTimeoutError):  # librdkafka's words first, then why
        return KafkaError(code, f"Local: Message timed out ({exc})")
    retriable = isinstance(exc, _BrokerError) and exc.retriable
    fatal = isinstance(exc, _sdk.TransactionFatalError)
    abortable = isinstance(exc, _sdk.TransactionAbortableError)
    return KafkaError(code, str(exc) or None, fatal, bool(retriable), abortable)
