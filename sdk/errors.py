"""Errors raised by the client (trafka.sdk).

Every error derives from :class:`~trafka.codec.errors.TrafkaError`. The split
follows the sans-IO libraries:

* :class:`ConfigError`: the caller passed a configuration that cannot work.
* :class:`UsageError`: the caller misused the API (e.g. sending on a closed producer).
* :class:`ProtocolError`: the broker broke the protocol (unknown correlation id,
  undecodable response). The connection that carried it is closed.
* :class:`KafkaConnectionError`: the socket could not be opened or was lost.
* :class:`RequestTimeoutError`: no response within ``request.timeout.ms``.
* :class:`~trafka.codec.errors.KafkaError`: a Kafka error code from a broker
  (re-exported here); :class:`DeliveryTimeoutError` when a record could not be
  delivered within ``delivery.timeout.ms``.

Socket and codec exceptions are translated into these at the driver boundary,
so users never see an ``OSError`` or a construct internal.
"""

from __future__ import annotations

from trafka.codec.errors import ErrorCode, KafkaError, TrafkaError

__all__ = [
    "ClientClosedError",
    "ConfigError",
    "DeliveryTimeoutError",
    "ErrorCode",
    "KafkaConnectionError",
    "KafkaError",
    "NoBrokersAvailableError",
    "ProducerBlockedError",
    "ProtocolError",
    "RequestTimeoutError",
    "SerializationError",
    "TrafkaError",
    "UsageError",
]


class ConfigError(TrafkaError, ValueError):
    """A configuration key is unknown or a value is invalid."""


class UsageError(TrafkaError, RuntimeError):
    """The API was used in a way it does not allow."""


class ClientClosedError(UsageError):
    """The producer, consumer or admin client is closed."""


class SerializationError(TrafkaError, ValueError):
    """A key or value could not be serialized or deserialized."""


class ProtocolError(TrafkaError):
    """The broker broke the protocol; the connection cannot be trusted any more."""


class KafkaConnectionError(TrafkaError, ConnectionError):
    """A connection to a broker could not be opened, or was lost."""


class NoBrokersAvailableError(KafkaConnectionError):
    """None of the bootstrap servers (or known brokers) accepted a connection."""


class RequestTimeoutError(TrafkaError, TimeoutError):
    """A request got no response within ``request.timeout.ms``."""


class DeliveryTimeoutError(KafkaError):
    """A record could not be delivered within ``delivery.timeout.ms``."""

    def __init__(self, message: str | None = None) -> None:
        super().__init__(ErrorCode.REQUEST_TIMED_OUT, message or "delivery.timeout.ms expired")


class ProducerBlockedError(TrafkaError, TimeoutError):
    """``send`` waited ``max.block.ms`` for buffer memory or metadata."""
