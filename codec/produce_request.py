"""Produce request bodies written on bytes, for code that sends record batches
it already holds as bytes (the proxy's key routing).

Encoding a Produce request through the codec's dataclasses costs an object
per topic and per partition and construct's walk of them; a request that
only forwards batches needs none of that. :func:`produce_request_parts`
writes the body from plain tuples; :class:`ProduceRequestData` holds them
and writes itself when :class:`~.protocol.RequestFramer` frames it (the
header first, as for a message).

Rules:

* One encoding: the body is byte for byte what
  :func:`~.protocol.encode_request_body` gives for the same message
  (tests/codec/test_produce_request.py checks it on random requests of every
  version).
* One strictness: what the fast path does not write itself (a topic named
  by id below v13 or by name at v13, a transactional id below v3, a value
  out of its field's range, a string too long...) is encoded by the codec,
  which raises its precise :class:`~.errors.EncodeError` or writes it.
* A records field of 8 KiB or more is a part of its own, the very object
  given (as :func:`~.protocol.encode_request_parts` does): never copied
  before the socket's write.
"""

from __future__ import annotations

import struct
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from . import protocol
from ._wire import uvarint_bytes
from .messages import ApiKey
from .messages import k00_produce as pm

__all__ = [
    "Partitions",
    "ProduceRequestData",
    "Topics",
    "encode_produce_request",
    "produce_request",
    "produce_request_parts",
]

_PRODUCE = ApiKey.PRODUCE
_FLEXIBLE = pm.FIRST_FLEXIBLE_VERSION
_TOPIC_IDS = 13  # KIP-516: topics named by id
_BIG_PART = 8192  # as the codec's framing: a records field this long is a part
_HEAD = struct.Struct(">hi")  # acks, timeout_ms
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_I32I32 = struct.Struct(">ii")  # a partition's index and records' size (classic)
_NULL_RECORDS = (b"\xff\xff\xff\xff", b"\x00")  # (classic, flexible)

Records = bytes | bytearray | memoryview | None
Partitions = Sequence[tuple[int, Records]]
Topics = Sequence[tuple[str | uuid.UUID, Partitions]]


class ProduceRequestData(protocol.EncodedRequest):
    """A Produce request as plain values, written on bytes when it is framed
    (:func:`produce_request_parts`), at whichever version it is sent at.

    Attributes:
        transactional_id, acks, timeout_ms: the request's fields.
        topics: (topic name or id, [(partition, records)]), in order.
    """

    __slots__ = ("acks", "timeout_ms", "topics", "transactional_id")

    def __init__(
        self, transactional_id: str | None, acks: int, timeout_ms: int, topics: Topics
    ) -> None:
        self.transactional_id = transactional_id
        self.acks = acks
        self.timeout_ms = timeout_ms
        self.topics = topics

    def parts_at(self, version: int) -> list[Any]:
        return produce_request_parts(
            version, self.transactional_id, self.acks, self.timeout_ms, self.topics
        )

    def message(self) -> Any:
        """The codec's dataclass of the same request."""
        return produce_request(self.transactional_id, self.acks, self.timeout_ms, self.topics)

    @property
    def topic_data(self) -> list[Any]:
        """The message's ``topic_data`` (dataclasses made on each call)."""
        return self.message().topic_data  # type: ignore[no-any-return]

    def __eq__(self, other: object) -> bool:
        if other.__class__ is not self.__class__:
            return NotImplemented
        mine = (self.transactional_id, self.acks, self.timeout_ms, self.topics)
        theirs = (other.transactional_id, other.acks, other.timeout_ms, other.topics)
        return mine == theirs

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        sizes = [(t, [(i, None if r is None else len(r)) for i, r in ps]) for t, ps in self.topics]
        return (
            f"ProduceRequestData({self.transactional_id!r}, acks={self.acks}, "
            f"timeout_ms={self.timeout_ms}, record sizes={sizes})"
        )


class _Refused(Exception):
    """Not a shape the writer writes: the codec decides."""


def produce_request_parts(
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: Topics,
) -> list[Any]:
    """A ProduceRequest body at ``version``, as parts to write in order.

    Args:
        topics: (topic name, or its id at v13; [(partition, records)]), in
            the order to write them.

    Returns:
        The body's parts: small fields joined, each records field of 8 KiB
        or more a part of its own (the object given).

    Raises:
        EncodeError: the message cannot be encoded at ``version`` (the
            codec's own error).
        UnsupportedVersionError: a version the codec does not know.
    """
    try:
        return _write(version, transactional_id, acks, timeout_ms, topics)
    except (_Refused, struct.error, UnicodeEncodeError, TypeError, ValueError):
        pass
    message = produce_request(transactional_id, acks, timeout_ms, topics)
    return [protocol.encode_request_body(_PRODUCE, version, message)]


def encode_produce_request(
    version: int,
    transactional_id: str | None,
    acks: int,
    timeout_ms: int,
    topics: Topics,
) -> bytes:
    """:func:`produce_request_parts`'s body as one ``bytes``."""
    return b"".join(produce_request_parts(version, transactional_id, acks, timeout_ms, topics))


def produce_request(
    transactional_id: str | None, acks: int, timeout_ms: int, topics: Iterable[Any]
) -> Any:
    """The codec's dataclass of the same message (the reference)."""
    r = pm.ProduceRequest
    data = []
    for topic, partitions in topics:
        named = {"topic_id": topic} if isinstance(topic, uuid.UUID) else {"name": topic}
        data.append(
            r.TopicProduceData(
                **named,
                partition_data=[
                    r.PartitionProduceData(index=index, records=records)
                    for index, records in partitions
                ],
            )
        )
    return r(transactional_id=transactional_id, acks=acks, timeout_ms=timeout_ms, topic_data=data)


def _string(value: str, flexible: bool) -> bytes:
    if type(value) is not str:
        raise _Refused
    raw = value.encode()
    if len(raw) > 0x7FFF:
        raise _Refused
    return (uvarint_bytes(len(raw) + 1) if flexible else _I16.pack(len(raw))) + raw


def _write(
    version: int, transactional_id: str | None, acks: int, timeout_ms: int, topics: Topics
) -> list[Any]:
    if not pm.MIN_VERSION <= version <= pm.MAX_VERSION:
        raise _Refused
    flexible = version >= _FLEXIBLE
    by_id = version >= _TOPIC_IDS
    run: list[bytes] = []  # small fields, joined at each big part
    out: list[Any] = []
    if version >= 3:
        if transactional_id is None:
            run.append(b"\x00" if flexible else b"\xff\xff")
        else:
            run.append(_string(transactional_id, flexible))
    elif transactional_id is not None:
        raise _Refused
    if type(acks) is not int or type(timeout_ms) is not int:
        raise _Refused  # (struct takes a bool or an IntEnum; the codec decides)
    run.append(_HEAD.pack(acks, timeout_ms))
    run.append(uvarint_bytes(len(topics) + 1) if flexible else _I32.pack(len(topics)))
    null = _NULL_RECORDS[flexible]
    pack, pack2 = _I32.pack, _I32I32.pack
    tail = b"\x00" if flexible else b""  # a partition's or a topic's tagged fields
    for topic, partitions in topics:
        if by_id:
            if type(topic) is not uuid.UUID:
                raise _Refused
            run.append(topic.bytes)
        else:
            if type(topic) is not str:
                raise _Refused
            run.append(_string(topic, flexible))
        count = len(partitions)
        run.append(uvarint_bytes(count + 1) if flexible else _I32.pack(count))
        for index, records in partitions:
            kind = type(records)
            if type(index) is not int:
                raise _Refused
            if kind is bytes or kind is bytearray or (kind is memoryview and records.itemsize == 1):  # type: ignore[union-attr]
                size = len(records)  # type: ignore[arg-type]
            elif records is None:
                run.append(pack(index) + null + tail)
                continue
            else:  # (a view's length is not its size in bytes unless of bytes)
                raise _Refused
            if flexible:
                if size >= 0x80000000:
                    raise _Refused
                run.append(pack(index) + uvarint_bytes(size + 1))
            else:
                run.append(pack2(index, size))  # (a size of 2 GiB or more: struct.error)
            if size >= _BIG_PART:
                out.append(b"".join(run))
                out.append(records)
                run = [tail]
            else:
                run.append(records)  # type: ignore[arg-type]
                run.append(tail)
        run.append(tail)
    run.append(tail)
    out.append(b"".join(run))
    return out
