"""The sticky assignors' user data: Java's layouts byte for byte, and kafka-python's.

The expected bytes are written out from the schemas in Java's StickyAssignor
(``STICKY_ASSIGNOR_USER_DATA_V0``/``V1``: an ``ArrayOf`` of (``STRING`` topic,
``ArrayOf(INT32)`` partitions), then ``INT32`` generation in V1) and
CooperativeStickyAssignor (one ``INT32`` generation), with Kafka's ``Struct``
types: STRING is an int16 length then UTF-8, an array an int32 count.
"""

from __future__ import annotations

import struct

import pytest

from trafka.codec.assignor_data import (
    NO_GENERATION,
    StickyUserData,
    decode_cooperative_sticky_user_data,
    decode_sticky_user_data,
    encode_cooperative_sticky_user_data,
    encode_sticky_user_data,
)


def _string(s: str) -> bytes:
    return struct.pack(">h", len(s)) + s.encode()


def _ints(*values: int) -> bytes:
    return struct.pack(">i", len(values)) + b"".join(struct.pack(">i", v) for v in values)


# The previous assignment a-1, t-0, t-2: topics in order, each with its partitions.
V0_BODY = struct.pack(">i", 2) + _string("a") + _ints(1) + _string("t") + _ints(0, 2)


def test_sticky_v1_as_java_writes_it() -> None:
    data = encode_sticky_user_data([("t", 2), ("t", 0), ("a", 1)], 7)
    assert data == V0_BODY + struct.pack(">i", 7)
    assert decode_sticky_user_data(data) == StickyUserData((("a", 1), ("t", 0), ("t", 2)), 7)


def test_sticky_v0_has_no_generation() -> None:
    assert decode_sticky_user_data(V0_BODY) == StickyUserData(
        (("a", 1), ("t", 0), ("t", 2)), NO_GENERATION
    )


@pytest.mark.parametrize(
    "data",
    [None, b"", b"\x00\x00\x00", V0_BODY[:-3], struct.pack(">i", 5) + _string("t")],
)
def test_sticky_unreadable_is_no_history(data: bytes | None) -> None:
    """Java ignores a previous assignment it cannot parse."""
    assert decode_sticky_user_data(data) is None


def test_sticky_bytes_past_the_end_are_ignored() -> None:
    """Java's Schema.read stops at the end of the struct."""
    data = encode_sticky_user_data([("t", 0)], 3) + b"\x01\x02"
    assert decode_sticky_user_data(data) == StickyUserData((("t", 0),), 3)


def test_sticky_as_kafka_python_writes_it() -> None:
    """kafka-python 3.x puts an int16 version (1) before the same struct."""
    user_data = pytest.importorskip("kafka.coordinator.assignors.sticky.user_data")
    theirs = bytes(user_data.StickyAssignorUserData([("t", [0, 2]), ("a", [1])], 7).encode())
    assert theirs == b"\x00\x01" + struct.pack(">i", 2) + _string("t") + _ints(0, 2) + (
        _string("a") + _ints(1) + struct.pack(">i", 7)
    )
    assert decode_sticky_user_data(theirs) == StickyUserData((("t", 0), ("t", 2), ("a", 1)), 7)
    empty = bytes(user_data.StickyAssignorUserData([], 4).encode())
    assert decode_sticky_user_data(empty) == StickyUserData((), 4)


def test_cooperative_sticky_generation() -> None:
    assert encode_cooperative_sticky_user_data(12) == struct.pack(">i", 12)
    assert decode_cooperative_sticky_user_data(struct.pack(">i", 12)) == 12
    assert decode_cooperative_sticky_user_data(None) is None
    assert decode_cooperative_sticky_user_data(b"") is None  # kafka-python sends none
    assert decode_cooperative_sticky_user_data(b"\x00\x01") is None
