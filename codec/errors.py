"""The trafka error hierarchy.

Every error trafka raises derives from :class:`TrafkaError`. The codec splits
errors the way the sans-IO libraries do:

* :class:`DecodeError`: the peer sent bytes that break the protocol (truncated,
  lying lengths, bad varints, bad CRCs, bad compression). It names the message
  and the field so that a log line is enough to find the culprit.
* :class:`EncodeError`: the caller asked for something the wire format cannot
  carry (a value out of range, a field the chosen version does not have).
* :class:`UnsupportedVersionError`: an API version outside what the codec knows.
* :class:`KafkaError`: a Kafka error code reported by a peer.

Third-party exceptions (construct, struct, zlib...) never escape the codec: they
are translated at the boundary into one of these.
"""

from __future__ import annotations

from ._error_codes import ErrorCode

__all__ = [
    "CodecError",
    "DecodeError",
    "DecompressionLimitError",
    "EncodeError",
    "ErrorCode",
    "FrameTooLargeError",
    "KafkaError",
    "TrafkaError",
    "UnsupportedVersionError",
]


class TrafkaError(Exception):
    """Root of every error raised by trafka."""


class CodecError(TrafkaError, ValueError):
    """Bytes could not be turned into messages, or messages into bytes.

    Attributes:
        message_name: the message (or structure) being processed, e.g. ``ProduceRequest v9``.
        field: the dotted path of the field where processing failed, or ``None``.
        detail: what went wrong, without the location.
    """

    def __init__(self, detail: str, *, message_name: str | None = None, field: str | None = None):
        super().__init__(detail)
        self.detail = detail
        self.message_name = message_name
        self.field = field

    def __str__(self) -> str:
        where = []
        if self.message_name:
            where.append(self.message_name)
        if self.field:
            where.append(f"field {self.field}")
        return f"{', '.join(where)}: {self.detail}" if where else self.detail

    def add_field_prefix(self, part: str | None) -> None:
        """Prepend an outer field name (or ``[index]``) to :attr:`field`, in place.

        Schemas call this as an error travels out of nested structures, so the
        final error names the whole path, e.g. ``topic_data[0].partition_data[2].records``.
        """
        if not part:
            return
        if not self.field:
            self.field = part
        elif self.field.startswith("["):
            self.field = part + self.field
        else:
            self.field = f"{part}.{self.field}"


class DecodeError(CodecError):
    """The peer's bytes do not follow the protocol."""


class DecompressionLimitError(DecodeError):
    """A compressed payload would inflate beyond the limit it was read with."""


class EncodeError(CodecError):
    """A value cannot be encoded (out of range, or absent from the chosen version)."""


class FrameTooLargeError(DecodeError):
    """A frame's length prefix exceeds the configured maximum frame size."""


class UnsupportedVersionError(CodecError):
    """An API key or version that the codec does not implement."""


class KafkaError(TrafkaError):
    """A Kafka error code returned by a peer.

    Attributes:
        code: the :class:`ErrorCode`.
        retriable: whether Kafka classes this error as retriable.
    """

    def __init__(self, code: ErrorCode | int, message: str | None = None):
        self.code = ErrorCode.of(int(code))
        self.raw_code = int(code)
        text = message or self.code.message
        head = f"[{self.code.name} ({self.raw_code})]"
        # The name is said once: a message that only repeats it adds nothing.
        super().__init__(head if not text or text == self.code.name else f"{head} {text}")

    @property
    def retriable(self) -> bool:
        return self.code.retriable
