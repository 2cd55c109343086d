"""ProduceResponse bodies read and written on bytes, for code that merges the
answers of several brokers into one (the proxy's key routing).

Decoding a whole ProduceResponse into dataclasses and encoding another costs
an object per partition, twice; a merge needs a few numbers of each partition
and copies the rest. :func:`scan_produce_response` reads those numbers and
where each partition lies; :class:`ProduceResponseWriter` writes a body of
partitions copied from scans or made from their fields.

Rules:

* One strictness: the scan accepts exactly what
  :func:`~.protocol.decode_response_body` accepts. It reads the usual shapes
  itself and refuses the rest (a null array, a non-nullable string given as
  null, a topic's tagged fields, bytes left over...); a refused body is
  decoded by the codec, which raises its precise :class:`~.errors.DecodeError`
  or returns the message the scan is then made from (:func:`produce_answer_of`).
* A partition in the usual shape (no record errors, no error message, no
  tagged fields) is read with one unpack and kept as its span of bytes. Any
  other (an error's message, KIP-467 record errors, KIP-951's
  ``current_leader``) is decoded as the codec's dataclass, through the
  codec's own schema, and written again through it.
* What the writer gives is byte for byte what
  :func:`~.protocol.encode_response_body` gives for the same message
  (tests/codec/test_produce_response.py checks both on random answers of
  every version).
"""

from __future__ import annotations

import dataclasses
import struct
from collections.abc import Iterable
from typing import Any

from . import protocol
from ._wire import uvarint_bytes
from .frame_walk import WalkRefused as _Refused
from .frame_walk import count as _count
from .frame_walk import length as _length
from .frame_walk import skip_tags as _skip_tags
from .messages import ApiKey
from .messages import k00_produce as pm

__all__ = [
    "MAX_SCANNED_VERSION",
    "PartitionAnswer",
    "ProduceAnswer",
    "as_encoded",
    "ProduceResponseWriter",
    "produce_answer_of",
    "read_produce_response",
    "scan_produce_response",
]

_PRODUCE = ApiKey.PRODUCE
_FLEXIBLE = 9  # first flexible version: compact arrays and strings, tagged fields
# The scan reads topics by name: v13 names them by id (KIP-516), which the proxy,
# its only user, does not let clients use (proxy/rewrite.py caps Produce at v11).
MAX_SCANNED_VERSION = 12
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PART_HEAD = struct.Struct(">ih")  # index, error code


def _fixed(version: int) -> struct.Struct:
    """A partition's fixed fields at ``version``: index, error code, base offset,
    then the log append time (v2+) and the log start offset (v5+)."""
    if version >= 5:
        return struct.Struct(">ihqqq")
    if version >= 2:
        return struct.Struct(">ihqq")
    return struct.Struct(">ihq")


_FIXED = {v: _fixed(v) for v in range(pm.MAX_VERSION + 1)}
# What follows the fixed fields of a partition in the usual shape: no record
# errors, no error message (v8+), no tagged fields (v9+).
_PLAIN_TAIL = {v: b"" for v in range(8)} | {8: b"\0\0\0\0\xff\xff"}
_PLAIN_TAIL |= {v: b"\x01\x00\x00" for v in range(_FLEXIBLE, pm.MAX_VERSION + 1)}


class PartitionAnswer:
    """One partition of a scanned answer.

    Attributes:
        error_code, base_offset, log_append_time_ms, log_start_offset: the
            partition's fields (-1 where its version has none).
        leader_id: the KIP-951 ``current_leader`` hint's leader (-1: none).
        message: the codec's dataclass when the partition is not in the usual
            shape (see the module's rules), else None.
    """

    __slots__ = (
        "base_offset",
        "data",
        "end",
        "error_code",
        "leader_id",
        "log_append_time_ms",
        "log_start_offset",
        "message",
        "start",
    )

    def __init__(
        self,
        error_code: int,
        base_offset: int,
        log_append_time_ms: int,
        log_start_offset: int,
        data: bytes,
        start: int,
        end: int,
        message: Any = None,
    ) -> None:
        self.error_code = error_code
        self.base_offset = base_offset
        self.log_append_time_ms = log_append_time_ms
        self.log_start_offset = log_start_offset
        self.data = data
        self.start = start
        self.end = end
        self.message = message
        self.leader_id = -1 if message is None else message.current_leader.leader_id

    @classmethod
    def of(cls, p: Any) -> PartitionAnswer:
        """The answer of a decoded partition (a ``PartitionProduceResponse``)."""
        return cls(
            p.error_code, p.base_offset, p.log_append_time_ms, p.log_start_offset, b"", 0, 0, p
        )

    @property
    def error_message(self) -> str | None:
        return None if self.message is None else self.message.error_message


@dataclasses.dataclass(slots=True)
class ProduceAnswer:
    """A scanned ProduceResponse.

    Attributes:
        version: the Produce version it was read at.
        partitions: per (topic, partition), in the answer's order (a partition
            named twice: its last answer, as a dict of the decoded message's).
        throttle_time_ms: 0 where the version has none.
        node_endpoints: KIP-951's (``NodeEndpoint`` dataclasses), as sent.
        unknown_tagged_fields: the body's tagged fields the codec does not know.
        errors: whether any partition has an error code.
    """

    version: int
    partitions: dict[tuple[str, int], PartitionAnswer]
    throttle_time_ms: int = 0
    node_endpoints: list[Any] = dataclasses.field(default_factory=list)
    unknown_tagged_fields: list[tuple[int, bytes]] = dataclasses.field(default_factory=list)
    errors: bool = dataclasses.field(default=False, init=False)

    def __post_init__(self) -> None:
        self.errors = any(p.error_code for p in self.partitions.values())


def scan_produce_response(data: bytes, version: int, start: int = 0) -> ProduceAnswer | None:
    """Read a ProduceResponse body at ``version`` (0 to :data:`MAX_SCANNED_VERSION`):
    ``data`` from ``start`` on (after the response header).

    Returns:
        The scan, or None when the body is not in a shape the scan reads
        (the codec then decodes it, see :func:`read_produce_response`).
    """
    if version > MAX_SCANNED_VERSION:
        return None
    try:
        return _scan(data, version, start)
    except (_Refused, IndexError, struct.error, UnicodeDecodeError):
        return None


def as_encoded(frame: bytes, version: int) -> bool:
    """Whether a ProduceResponse frame (without its size prefix) is exactly what
    the codec writes for the message it holds, and holds no KIP-951 node
    endpoints and no unknown tagged fields: in the usual shape (see the
    module's rules), every varint in its shortest form. Decoding it and
    encoding it again would give the same bytes."""
    start = 4
    if version >= _FLEXIBLE:
        if len(frame) < 5 or frame[4] != 0:
            return False
        start = 5
    answer = scan_produce_response(frame, version, start)
    return (
        answer is not None
        and not answer.node_endpoints
        and not answer.unknown_tagged_fields
        and all(p.message is None for p in answer.partitions.values())
    )


def read_produce_response(frame: bytes, version: int) -> ProduceAnswer:
    """Read a ProduceResponse frame (without its size prefix) at ``version``.

    Raises:
        DecodeError: the answer is malformed (the codec's own error).
    """
    start = 4
    if version >= _FLEXIBLE:
        start = 5 if len(frame) > 4 and frame[4] == 0 else -1  # header tags: rare
    answer = None if start < 0 else scan_produce_response(frame, version, start)
    if answer is None:
        return produce_answer_of(protocol.decode_response(frame, _PRODUCE, version)[1], version)
    return answer


def _scan(data: bytes, version: int, start: int) -> ProduceAnswer:
    flexible = version >= _FLEXIBLE
    fixed = _FIXED[version]
    unpack = fixed.unpack_from
    size = fixed.size
    plain = _PLAIN_TAIL[version]
    plain_size = len(plain)
    parts: dict[tuple[str, int], PartitionAnswer] = {}
    topics, pos = _count(data, start, flexible)
    for _ in range(topics):
        name, pos = _name(data, pos, flexible)
        count, pos = _count(data, pos, flexible)
        for _ in range(count):
            start = pos
            fields = unpack(data, pos)
            pos += size
            if data[pos : pos + plain_size] == plain:
                pos += plain_size
                if pos > len(data):
                    raise _Refused
                if size == 30:  # v5+
                    index, error, base, append, first = fields
                elif size == 22:
                    index, error, base, append = fields
                    first = -1
                else:
                    index, error, base = fields
                    append = first = -1
                parts[(name, index)] = PartitionAnswer(error, base, append, first, data, start, pos)
            else:  # an error's message, record errors, tagged fields: the codec reads it
                pos = _skip_rest(data, pos, flexible)
                p = _decode_partition(data[start:pos], version)
                parts[(name, p.index)] = PartitionAnswer.of(p)
        if flexible:
            if data[pos] != 0:
                raise _Refused  # a topic's tagged fields (no merge keeps them)
            pos += 1
    throttle = 0
    if version >= 1:
        (throttle,) = _I32.unpack_from(data, pos)
        pos += 4
    answer = ProduceAnswer(version, parts, throttle)
    if flexible:
        if data[pos] != 0:  # KIP-951's node endpoints, tags the codec does not know
            end = _skip_tags(data, pos)
            try:
                tail = protocol.decode_response_body(
                    _PRODUCE, version, b"\x01\0\0\0\0" + data[pos:end]
                )
            except Exception:
                raise _Refused from None
            answer.node_endpoints = tail.node_endpoints
            answer.unknown_tagged_fields = tail.unknown_tagged_fields
            pos = end
        else:
            pos += 1
    if pos != len(data):
        raise _Refused
    return answer


def _name(data: bytes, pos: int, flexible: bool) -> tuple[str, int]:
    n, pos = _length(data, pos, flexible)
    if n < 0 or pos + n > len(data):
        raise _Refused
    return data[pos : pos + n].decode(), pos + n


def _skip_string(data: bytes, pos: int, flexible: bool) -> int:
    n, pos = _length(data, pos, flexible)
    return pos + max(n, 0)


def _skip_rest(data: bytes, pos: int, flexible: bool) -> int:
    """Past a v8+ partition's record errors, error message and tagged fields."""
    count, pos = _count(data, pos, flexible)
    for _ in range(count):
        pos = _skip_string(data, pos + 4, flexible)
        if flexible:
            pos = _skip_tags(data, pos)
    pos = _skip_string(data, pos, flexible)
    if flexible:
        pos = _skip_tags(data, pos)
    if pos > len(data):
        raise _Refused
    return pos


# One partition in a body of its own: one topic named "" holding it, throttle 0.
def _wrapping(version: int) -> tuple[bytes, bytes]:
    if version >= _FLEXIBLE:
        return b"\x02\x01\x02", b"\x00\0\0\0\0\x00"
    return b"\0\0\0\x01\0\0\0\0\0\x01", b"\0\0\0\0" if version >= 1 else b""


_WRAPPING = {v: _wrapping(v) for v in range(pm.MAX_VERSION + 1)}


def _decode_partition(data: bytes, version: int) -> Any:
    head, tail = _WRAPPING[version]
    try:
        body = protocol.decode_response_body(_PRODUCE, version, head + data + tail)
    except Exception:
        raise _Refused from None  # the whole answer's decoding says what is wrong
    return body.responses[0].partition_responses[0]


def _encode_partition(p: Any, version: int) -> bytes:
    r = pm.ProduceResponse
    head, tail = _WRAPPING[version]
    body = r(responses=[r.TopicProduceResponse(name="", partition_responses=[p])])
    data = protocol.encode_response_body(_PRODUCE, version, body)
    return data[len(head) : len(data) - len(tail)]


def produce_answer_of(message: Any, version: int) -> ProduceAnswer:
    """The scan of a decoded ProduceResponse (the codec's dataclass)."""
    parts = {
        (t.name, p.index): PartitionAnswer.of(p)
        for t in message.responses
        for p in t.partition_responses
    }
    return ProduceAnswer(
        version,
        parts,
        message.throttle_time_ms,
        list(message.node_endpoints),
        list(message.unknown_tagged_fields),
    )


class ProduceResponseWriter:
    """Writes a ProduceResponse body at ``version``, topic by topic.

    Example::

        w = ProduceResponseWriter(9)
        w.topic("orders", 2)
        w.copy(scanned, 0, 0)  # partition 0: a broker's answer
        w.add(1, 0, -1)  # partition 1: made here
        body = w.finish(0, [], [])
    """

    __slots__ = ("_fixed", "_flexible", "_out", "_plain", "_topics", "version")

    def __init__(self, version: int, topics: int) -> None:
        self.version = version
        self._flexible = version >= _FLEXIBLE
        self._fixed = _FIXED[version]
        self._plain = _PLAIN_TAIL[version]
        self._out: list[bytes] = [self._count(topics)]
        self._topics = 0  # started

    def _count(self, n: int) -> bytes:
        return uvarint_bytes(n + 1) if self._flexible else _I32.pack(n)

    def topic(self, name: str, partitions: int) -> None:
        """Start a topic of ``partitions`` partitions (those written next)."""
        out = self._out
        if self._flexible and self._topics:
            out.append(b"\x00")  # the previous topic's tagged fields (none)
        self._topics += 1
        raw = name.encode()
        out.append(uvarint_bytes(len(raw) + 1) if self._flexible else _I16.pack(len(raw)))
        out.append(raw)
        out.append(self._count(partitions))

    def copy(self, part: PartitionAnswer, index: int, error_code: int, below: int = -1) -> None:
        """A partition copied from a scan, with its index and error code
        replaced and, when ``below`` >= 0, only the record errors of the
        records before that index."""
        p = part.message
        if p is None:
            self._out.append(_PART_HEAD.pack(index, error_code))
            self._out.append(part.data[part.start + 6 : part.end])
            return
        errors = p.record_errors
        if below >= 0 and errors:
            errors = [e for e in errors if e.batch_index < below]
        p = dataclasses.replace(p, index=index, error_code=error_code, record_errors=errors)
        self._out.append(_encode_partition(p, self.version))

    def add(
        self,
        index: int,
        error_code: int,
        base_offset: int,
        log_append_time_ms: int = -1,
        log_start_offset: int = -1,
        error_message: str | None = None,
    ) -> None:
        """A partition made from these fields (no record errors, no leader hint)."""
        fixed = self._fixed
        if fixed.size == 30:
            head = fixed.pack(index, error_code, base_offset, log_append_time_ms, log_start_offset)
        elif fixed.size == 22:
            head = fixed.pack(index, error_code, base_offset, log_append_time_ms)
        else:
            head = fixed.pack(index, error_code, base_offset)
        self._out.append(head)
        if error_message is None or self.version < 8:
            self._out.append(self._plain)
            return
        raw = error_message.encode()
        if self._flexible:
            self._out.append(b"\x01" + uvarint_bytes(len(raw) + 1) + raw + b"\x00")
        else:
            self._out.append(b"\0\0\0\0" + _I16.pack(len(raw)) + raw)

    def finish(
        self,
        throttle_time_ms: int,
        node_endpoints: Iterable[Any] = (),
        unknown_tagged_fields: Iterable[tuple[int, bytes]] = (),
    ) -> bytes:
        """The body, with these top-level fields (where its version has them)."""
        out = self._out
        if self._flexible and self._topics:
            out.append(b"\x00")
        if self.version >= 1:
            out.append(_I32.pack(throttle_time_ms))
        if self._flexible:
            endpoints, unknown = list(node_endpoints), list(unknown_tagged_fields)
            if endpoints or unknown:
                tail = pm.ProduceResponse(node_endpoints=endpoints, unknown_tagged_fields=unknown)
                out.append(protocol.encode_response_body(_PRODUCE, self.version, tail)[5:])
            else:
                out.append(b"\x00")
        return b"".join(out)
