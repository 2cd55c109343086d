"""confluent-kafka's ``confluent_kafka.avro.error``: the legacy registry
client's one error."""

from __future__ import annotations

__all__ = ["ClientError"]


class ClientError(Exception):
    """The legacy Schema Registry client failed (or a schema did not parse).

    Args:
        message: what went wrong; ``str()`` of the error is this text.
        http_code: the registry's HTTP status, where an answer was the cause.
    """

    def __init__(self, message: str, http_code: int | None = None) -> None:
        self.message = message
        self.http_code = http_code
        super().__init__(message)

    def __str__(self) -> str:
        return self.message

    def __repr__(self) -> str:
        return f"ClientError(error={self.message})"
