"""confluent-kafka's ``confluent_kafka.schema_registry.error``: the registry's
errors as its clients raise them."""

from __future__ import annotations

__all__ = ["OAuthTokenError", "SchemaParseException", "SchemaRegistryError", "UnknownType"]

try:  # the Avro library's errors, re-exported as confluent-kafka does
    from fastavro.schema import SchemaParseException, UnknownType
except ImportError:  # pragma: no cover - the schemas extra is missing

    class SchemaParseException(Exception):  # type: ignore[no-redef]
        """An Avro schema that does not parse (fastavro is not installed)."""

    class UnknownType(SchemaParseException):  # type: ignore[no-redef]
        """An Avro schema naming a type it does not define."""


class SchemaRegistryError(Exception):
    """The registry refused a request.

    Args:
        http_status_code: the HTTP status.
        error_code: the registry's code (40401 subject not found, 40403
            schema not found, 42201 invalid schema...); -1 when unknown.
        error_message: the registry's message.
    """

    UNKNOWN = -1

    def __init__(self, http_status_code: int, error_code: int, error_message: str) -> None:
        super().__init__(http_status_code, error_code, error_message)
        self.http_status_code = http_status_code
        self.error_code = error_code
        self.error_message = error_message

    def __repr__(self) -> str:
        return str(self)

    def __str__(self) -> str:
        return (
            f"{self.error_message} (HTTP status code {self.http_status_code}, "
            f"SR code {self.error_code})"
        )


class OAuthTokenError(Exception):
    """No OAuth token could be had for the registry.

    Args:
        message: what failed.
        status_code: the token endpoint's HTTP status, if it answered.
        response_text: its answer.
    """

    def __init__(
        self, message: str, status_code: int | None = None, response_text: str | None = None
    ) -> None:
        self.message = message
        self.status_code = status_code
        self.response_text = response_text
        super().__init__(f"{message} (HTTP {status_code}): {response_text}")
