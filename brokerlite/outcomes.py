"""What the broker core answers a request with: outcomes, and the parts of a frame.

A request handler (:mod:`.handlers`) returns a response body or one of these
outcomes; the broker core wraps a body in a :class:`Reply`, and the driver
(:mod:`.server`) sends what :meth:`Reply.encode` gives, closes on
:class:`Close`, and waits for ``Broker.poll`` on :class:`Parked`.

Rules and invariants:

* An outcome is a value: frozen, built once, sent as it is.
* A response frame is a list of parts whose total size is known before the
  first byte is sent: bytes, or file ranges of segment files (:class:`FileRange`)
  that the driver sends with ``os.sendfile``.
* A parked request is a :class:`Waiter`: woken by appends to the partitions it
  watches, or by its deadline.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, Protocol

from trafka.codec.protocol import api, encode_response

__all__ = [
    "Close",
    "FileRange",
    "NoResponse",
    "Outcome",
    "ParkAgain",
    "Parked",
    "Part",
    "PartsBody",
    "Reply",
    "SaslToken",
    "Waiter",
    "parts_size",
]

_SIZE_CORR = struct.Struct(">ii")


class FileRange(Protocol):
    """A byte range of a file (structurally :class:`trafka.brokerlite.storage.partition.FileChunk`)."""

    @property
    def path_or_fd(self) -> Any: ...

    @property
    def position(self) -> int: ...

    @property
    def length(self) -> int: ...


Part = bytes | FileRange


def parts_size(parts: list[Part]) -> int:
    """Total number of bytes of ``parts``."""
    return sum(len(p) if isinstance(p, bytes | bytearray | memoryview) else p.length for p in parts)


class PartsBody(Protocol):
    """A response body that encodes itself to parts (bytes and file ranges)."""

    def encode_parts(self, version: int) -> list[Part]:
        """The body's bytes (no header) at ``version``."""
        ...

    def to_message(self) -> Any:
        """The same body as the generated response dataclass (file ranges read)."""
        ...


def _parts_body(body: Any) -> PartsBody | None:
    # By attribute: isinstance() against a runtime-checkable Protocol costs about
    # 10 us, on every reply.
    return body if hasattr(type(body), "encode_parts") else None


@dataclasses.dataclass(frozen=True, slots=True)
class Reply:
    """A response ready to send.

    Attributes:
        correlation_id: echoed from the request.
        api_key, api_version: of the request; they choose the response schema.
        body: a generated response dataclass or a :class:`PartsBody`.
        throttle_ms: how long the connection is muted (not read) after this
            reply is sent, for a client quota (:mod:`trafka.brokerlite.quotas`);
            the body carries the same time in its ``throttle_time_ms`` where its
            version has the field (KIP-219).
    """

    correlation_id: int
    api_key: int
    api_version: int
    body: Any
    throttle_ms: int = 0

    def encode(self) -> list[Part]:
        """The whole frame, size prefix included, as parts."""
        parts_body = _parts_body(self.body)
        if parts_body is not None:
            body_parts = parts_body.encode_parts(self.api_version)
            flexible_header = api(self.api_key).response_header_version(self.api_version) >= 1
            head_len = 4 + (1 if flexible_header else 0)
            size = head_len + parts_size(body_parts)
            head = _SIZE_CORR.pack(size, self.correlation_id)
            if flexible_header:
                head += b"\x00"
            return [head, *body_parts]
        return [encode_response(self.correlation_id, self.api_key, self.api_version, self.body)]

    def message(self) -> Any:
        """The body as a generated dataclass (reads file ranges of a PartsBody)."""
        parts_body = _parts_body(self.body)
        if parts_body is not None:
            return parts_body.to_message()
        return self.body


@dataclasses.dataclass(frozen=True, slots=True)
class NoResponse:
    """The request gets no response (Produce with acks=0).

    Attributes:
        throttle_ms: how long the connection is muted for a client quota.
    """

    throttle_ms: int = 0


@dataclasses.dataclass(frozen=True, slots=True)
class Parked:
    """The response comes later, via ``Broker.poll``; ``ticket`` identifies it."""

    ticket: int


@dataclasses.dataclass(frozen=True, slots=True)
class ParkAgain:
    """What a waiter's ``complete`` returns when its request must wait on, for
    ``waiter`` (same ticket): a Produce verified with its transaction
    coordinator that now waits for acks=all."""

    waiter: Waiter


@dataclasses.dataclass(frozen=True, slots=True)
class SaslToken:
    """A SASL token sent bare: a size prefix and the token, no Kafka header.

    The answer to each token a client sends after a v0 SaslHandshake (KIP-43).
    """

    token: bytes

    def encode(self) -> list[Part]:
        """The whole frame, size prefix included."""
        return [len(self.token).to_bytes(4, "big") + self.token]


@dataclasses.dataclass(frozen=True, slots=True)
class Close:
    """Close the connection (the peer broke the protocol, or failed to authenticate).

    Attributes:
        reason: what to log, naming what the peer did.
        client_id: from the request header when it could be read.
        reply: a last answer sent before closing (a failed SASL authentication
            is told why, as Kafka does); None closes without answering.
        failed_authentication: the close ends a failed SASL authentication; the
            driver waits ``connection_failed_authentication_delay_ms`` first.
    """

    reason: str
    client_id: str | None = None
    reply: Reply | None = None
    failed_authentication: bool = False


Outcome = Reply | SaslToken | NoResponse | Parked | Close


class Waiter(Protocol):
    """A parked request inside the broker core (see ``RequestContext.park``)."""

    #: When it completes anyway: monotonic ms (``ctx.mono_ms + wait``), never wall.
    deadline_ms: int
    watches: frozenset[tuple[str, int]]

    def on_append(self, topic: str, partition: int, nbytes: int) -> bool:
        """Data arrived on a watched partition; True when the request can complete."""
        ...

    def complete(self, now_ms: int) -> Any:
        """Build the response body now (data arrived, deadline passed or topic
        gone), or a :class:`ParkAgain` to wait on under the same ticket."""
        ...
