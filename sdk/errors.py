"""Errors raised by the client (trafka.sdk).

Every error derives from :class:`~trafka.codec.errors.TrafkaError`. The split
follows the sans-IO libraries:

* :class:`ConfigError`: the caller passed a configuration that cannot work.
* :class:`UsageError`: the caller misused the API (e.g. sending on a closed producer).
* :class:`ArgumentError`: an argument refused at the call, before anything was
  done: :class:`ArgumentTypeError` (also a ``TypeError``) for a value of the
  wrong type, :class:`ArgumentValueError` (also a ``ValueError``) for one out of
  range. The message starts with the argument's name.
* :class:`ProtocolError`: the broker broke the protocol (unknown correlation id,
  undecodable response). The connection that carried it is closed.
* :class:`KafkaConnectionError`: the socket could not be opened or was lost;
  :class:`BrokerUnreachableError` is what a client tells its ``error_cb``
  (or its log) when a broker it needs goes out of reach, while it retries.
* :class:`AuthenticationError`: TLS or SASL authentication failed (wrong
  credentials, a certificate that does not verify): not retried.
* :class:`RequestTimeoutError`: no response within ``request.timeout.ms``; its
  :class:`ApiTimeoutError` when a blocking call did not complete within
  ``default.api.timeout.ms``, and its :class:`OutcomeUnknownError` when a
  producer closed with a record's request unanswered (it may be written).
* :class:`~trafka.codec.errors.KafkaError`: a Kafka error code from a broker
  (re-exported here); :class:`DeliveryTimeoutError` when a record could not be
  delivered within ``delivery.timeout.ms``.
* Transactions (:mod:`.transactions`) split errors as Kafka does:
  :class:`TransactionAbortableError` (this transaction cannot commit: abort it
  and carry on), :class:`TransactionFatalError` and its
  :class:`ProducerFencedError` (the producer can do nothing more: close it),
  :class:`InvalidTxnStateError` (the API was called in a state that does not
  allow it) and :class:`TransactionAbortedError` (a record's transaction was
  aborted before the record was sent).

Socket and codec exceptions are translated into these at the driver boundary,
so users never see an ``OSError`` or a construct internal.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode, KafkaError, TrafkaError

__all__ = [
    "ApiTimeoutError",
    "ArgumentError",
    "ArgumentTypeError",
    "ArgumentValueError",
    "AuthenticationError",
    "BrokerUnreachableError",
    "ClientClosedError",
    "ConfigError",
    "ConfigWarning",
    "DeliveryTimeoutError",
    "ErrorCode",
    "InvalidTxnStateError",
    "KafkaConnectionError",
    "KafkaError",
    "NoBrokersAvailableError",
    "OutcomeUnknownError",
    "ProducerBlockedError",
    "ProducerFencedError",
    "ProtocolError",
    "RequestTimeoutError",
    "SerializationError",
    "TrafkaError",
    "TransactionAbortableError",
    "TransactionAbortedError",
    "RecordPurgedError",
    "TransactionFatalError",
    "UsageError",
]


class ConfigError(TrafkaError, ValueError):
    """A configuration key is unknown or a value is invalid.

    Attributes:
        problems: every problem found, one line each (a configuration with
            several is refused once, naming them all).
    """

    def __init__(self, message: str, problems: list[str] | None = None) -> None:
        super().__init__(message)
        self.problems = problems if problems is not None else [message]

    @classmethod
    def of(cls, problems: list[str]) -> ConfigError:
        """One error naming every problem of ``problems`` (at least one)."""
        if len(problems) == 1:
            return cls(problems[0], problems)
        lines = "\n".join(f"  - {p}" for p in problems)
        return cls(f"{len(problems)} problems in the configuration:\n{lines}", problems)


class ConfigWarning(UserWarning):
    """A setting is taken, but it does not mean in trafka exactly what it means
    in the client that named it (the warning says how it differs)."""


class UsageError(TrafkaError, RuntimeError):
    """The API was used in a way it does not allow."""


class ArgumentError(TrafkaError):
    """An argument of a call was refused before the call did anything; the
    message names it. Raised as :class:`ArgumentTypeError` or :class:`ArgumentValueError`."""


class ArgumentTypeError(ArgumentError, TypeError):
    """An argument of the wrong type (``send(b"orders", ...)``)."""


class ArgumentValueError(ArgumentError, ValueError):
    """An argument of the right type but out of range (``seek(tp, -5)``)."""


class ClientClosedError(UsageError):
    """The producer, consumer or admin client is closed."""


class SerializationError(TrafkaError, ValueError):
    """A key or value could not be serialized or deserialized."""


class ProtocolError(TrafkaError):
    """The broker broke the protocol; the connection cannot be trusted any more."""


class KafkaConnectionError(TrafkaError, ConnectionError):
    """A connection to a broker could not be opened, or was lost."""


class BrokerUnreachableError(KafkaConnectionError):
    """A broker (or bootstrap address) the client needs cannot be reached: a
    connect failed, or the connection was lost with requests in flight. Not
    raised: handed to the
    client's ``error_cb`` (or logged at WARNING without one) once each time the
    broker goes out of reach, while the client goes on retrying, as librdkafka's
    ``error_cb`` hears of a broker going down. :attr:`Cluster.unreachable_brokers
    <trafka.sdk.transport.Cluster.unreachable_brokers>` lists the brokers out of
    reach now.

    Attributes:
        node_id: the broker's id; negative for a bootstrap address (the
            message then says "bootstrap server"), which is no broker yet.
        host, port: its address.
        cause: what failed (a :class:`KafkaConnectionError` or
            :class:`RequestTimeoutError`).
    """

    def __init__(self, node_id: int, host: str, port: int, cause: BaseException) -> None:
        what = f"broker {node_id}" if node_id >= 0 else "bootstrap server"
        super().__init__(f"{what} at {host}:{port} is unreachable: {cause}")
        self.node_id = node_id
        self.host = host
        self.port = port
        self.cause = cause


class AuthenticationError(TrafkaError):
    """A broker refused this client's credentials (SASL) or its certificate did
    not verify (TLS). Retrying cannot help, so calls raise it at once.

    ``code`` is the Kafka error code the broker answered with
    (``SASL_AUTHENTICATION_FAILED``, ``UNSUPPORTED_SASL_MECHANISM``, ...), or
    None for a TLS failure.
    """

    def __init__(self, message: str, code: int | None = None) -> None:
        super().__init__(message)
        self.code = code

    def again(self) -> AuthenticationError:
        """A fresh copy, to raise the same refusal to another caller (with its own traceback)."""
        return AuthenticationError(str(self), self.code)


class NoBrokersAvailableError(KafkaConnectionError):
    """None of the bootstrap servers (or known brokers) accepted a connection.

    Also what a client tells its ``error_cb`` (once, until a connect succeeds
    again) when every broker it knows is out of reach, as librdkafka's
    ``_ALL_BROKERS_DOWN``.
    """


class RequestTimeoutError(TrafkaError, TimeoutError):
    """A request got no response within ``request.timeout.ms``."""


class ApiTimeoutError(RequestTimeoutError):
    """A blocking call did not complete within ``default.api.timeout.ms`` (Kafka's
    TimeoutException), e.g. a consumer's position that could not be looked up."""


class OutcomeUnknownError(RequestTimeoutError):
    """The producer closed (forcefully, or with its tasks cancelled) after a
    request carrying the record was written and before its answer came: the
    broker may or may not have written the record. Unlike
    :class:`ClientClosedError`, which a record fails with only when it was
    never sent, this says nothing either way (Java's producer fails such
    batches on a forced close too)."""


class DeliveryTimeoutError(KafkaError):
    """A record could not be delivered within ``delivery.timeout.ms``.

    ``code`` is REQUEST_TIMED_OUT. ``last_error`` (also ``__cause__``, and named
    in the message) is the error of the record's last failed attempt, the one that
    made the producer retry (e.g. a broker's NOT_ENOUGH_REPLICAS), or None when
    the record was never sent (no leader, a broker that could not be reached).
    """

    def __init__(self, message: str | None = None, last_error: BaseException | None = None) -> None:
        text = message or "delivery.timeout.ms expired"
        if last_error is not None:
            text = f"{text}; last error: {last_error}"
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, text)
        self.last_error = last_error
        if last_error is not None:
            self.__cause__ = last_error


class ProducerBlockedError(TrafkaError, TimeoutError):
    """A producer call waited ``max.block.ms``: ``send`` for buffer memory or
    metadata, or a transaction call for the coordinator. A transaction call that
    timed out goes on in the background; calling it again waits for the same outcome."""


class InvalidTxnStateError(UsageError):
    """A transaction method was called in a state that does not allow it
    (``begin_transaction`` twice, ``send`` outside a transaction, ...)."""


class TransactionAbortedError(TrafkaError):
    """The record's (or offsets') transaction was aborted before it was sent."""


class RecordPurgedError(TrafkaError):
    """The record was purged (``Producer.purge()``) before it was sent, so it is
    in no log (librdkafka's ``_PURGE_QUEUE``)."""


def _code_of(cause: BaseException | None, default: ErrorCode) -> int:
    return cause.raw_code if isinstance(cause, KafkaError) else default


class TransactionAbortableError(KafkaError):
    """The current transaction cannot commit; abort it, then the producer can go on.

    ``code`` is the underlying error's code (``TRANSACTION_ABORTABLE`` when the
    cause is not a Kafka error code); ``__cause__`` is the underlying error.
    """

    def __init__(self, cause: BaseException | None = None, message: str | None = None) -> None:
        text = message or f"the transaction must be aborted: {cause}"
        super().__init__(_code_of(cause, ErrorCode.TRANSACTION_ABORTABLE), text)
        self.__cause__ = cause


class TransactionFatalError(KafkaError):
    """The producer can no longer use transactions (nor send); close it.

    ``code`` is the broker's error code; ``__cause__`` the underlying error, if any.
    """

    def __init__(
        self, code: ErrorCode | int, message: str | None = None, cause: BaseException | None = None
    ) -> None:
        super().__init__(code, message)
        if cause is not None:
            self.__cause__ = cause


class ProducerFencedError(TransactionFatalError):
    """Another producer with the same ``transactional.id`` has taken over (or the
    coordinator aborted this producer's transaction on its timeout): this
    producer is a zombie and can do nothing more. Close it."""
