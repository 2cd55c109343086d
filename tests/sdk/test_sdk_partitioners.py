"""Partitioners: Java-compatible murmur2 (checked against kafka-python), crc32, fnv1a, sticky."""

from __future__ import annotations

import random
import zlib

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kafka.partitioner.default import murmur2 as kafka_python_murmur2

from trafka.sdk.errors import ConfigError
from trafka.sdk.partitioners import (
    Partitioner,
    fnv1a_32,
    fnv1a_partition,
    murmur2,
    murmur2_partition,
    murmur2_py,
)

# From the Java client's own unit test of Utils.murmur2.
JAVA_MURMUR2 = {
    b"21": -973932308,
    b"foobar": -790332482,
    b"a-little-bit-long-string": -985981536,
    b"a-little-bit-longer-string": -1486304829,
    b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
    b"abc": 479470107,
}


@pytest.mark.parametrize("fn", [murmur2, murmur2_py], ids=["default", "python"])
@pytest.mark.parametrize(("key", "expected"), sorted(JAVA_MURMUR2.items()))
def test_murmur2_java_vectors(fn: object, key: bytes, expected: int) -> None:
    assert fn(key) == expected  # type: ignore[operator]


@given(st.binary(max_size=64))
def test_murmur2_c_and_python_agree(key: bytes) -> None:
    assert murmur2(key) == murmur2_py(key)
    assert murmur2(bytearray(key)) == murmur2_py(key)  # any bytes-like key


def test_murmur2_accelerated_when_built() -> None:
    import os

    from trafka.codec import _accel

    if _accel.speedups is None:
        pytest.skip("the C accelerator is not built or TRAFKA_NO_SPEEDUPS is set")
    assert murmur2 is _accel.speedups.murmur2
    assert os.environ.get("TRAFKA_NO_SPEEDUPS", "0") in ("", "0")
    with pytest.raises(TypeError):
        murmur2("text")  # type: ignore[arg-type]


@given(st.binary(max_size=64), st.integers(min_value=1, max_value=1000))
def test_murmur2_matches_kafka_python(key: bytes, n: int) -> None:
    # kafka-python returns the unsigned form; the partition is what must agree.
    assert murmur2(key) & 0xFFFFFFFF == kafka_python_murmur2(key) & 0xFFFFFFFF
    assert murmur2_partition(key, n) == (kafka_python_murmur2(key) & 0x7FFFFFFF) % n


def test_murmur2_partition_vectors_via_kafka_python_partitioner() -> None:
    from kafka.partitioner.default import DefaultPartitioner

    class _Cluster:
        def topics(self) -> set[str]:
            return {"t"}

        def partitions_for_topic(self, topic: str) -> set[int]:
            return set(range(7))

        def available_partitions_for_topic(self, topic: str) -> set[int]:
            return set(range(7))

    peer = DefaultPartitioner()
    ours = Partitioner("murmur2")
    for i in range(200):
        key = f"key-{i}".encode()
        assert ours.partition("t", key, 7, range(7)) == peer.partition(
            "t", key, key, None, None, _Cluster()
        )


def test_crc32_and_fnv1a_vectors() -> None:
    # Published reference values: FNV-1a("a") = 0xe40c292c, FNV-1a("foobar") = 0xbf9cf968.
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968
    # 0xbf9cf968 as int32 is negative: sarama takes abs of the remainder.
    signed = 0xBF9CF968 - 2**32
    assert fnv1a_partition(b"foobar", 10) == abs(signed) % 10 == 6
    assert fnv1a_partition(b"a", 7) == abs(0xE40C292C - 2**32) % 7
    p = Partitioner("consistent_random")
    assert p.partition("t", b"foobar", 10, []) == zlib.crc32(b"foobar") % 10 == 0x9EF61F95 % 10


def test_null_key_rules() -> None:
    assert Partitioner("consistent").partition("t", None, 5, []) == 0
    assert Partitioner("fnv1a").partition("t", None, 5, []) == fnv1a_partition(b"", 5)
    rng = random.Random(1)
    p = Partitioner("consistent_random", rng=rng)
    seen = {p.partition("t", b"", 50, range(50)) for _ in range(100)}
    assert len(seen) > 1  # empty keys are random for consistent_random
    only_available = Partitioner("murmur2_random")
    assert {only_available.partition("t", None, 8, [3]) for _ in range(20)} == {3}
    assert Partitioner("murmur2_random").partition("t", b"", 8, []) == murmur2_partition(b"", 8)


def test_librdkafkas_sticky_partitioning_linger() -> None:
    """librdkafka's CONFIGURATION.md, ``sticky.partitioning.linger.ms`` (default
    10): the delay before a new sticky partition is assigned per topic; it affects
    messages with a NULL key in all cases, and messages with a zero-length key
    under ``consistent_random``; 0 disables it. Its rdkafka_msg.c: the sticky
    partition is drawn at random and drawn again at once when it is no longer
    available; the ``random`` partitioner does not use it."""
    now = [100.0]
    parts = range(50)

    def sticky(name: str, seed: int = 3) -> Partitioner:
        return Partitioner(name, rng=random.Random(seed), sticky_linger_ms=10, clock=lambda: now[0])

    p = sticky("consistent_random")
    first = p.partition("t", None, 50, parts)
    assert {p.partition("t", None, 50, parts) for _ in range(20)} == {first}
    assert p.partition("t", b"", 50, parts) == first  # an empty key, under consistent_random
    assert p.partition("t", b"foobar", 50, parts) == zlib.crc32(b"foobar") % 50
    assert p.partition("u", None, 50, parts) is not None  # per topic: t keeps its own
    now[0] += 0.009
    assert p.partition("t", None, 50, parts) == first  # within the linger
    seen = set()
    for _ in range(20):
        now[0] += 0.010  # each linger passed: drawn again
        seen.add(p.partition("t", None, 50, parts))
    assert len(seen) > 1
    current = p.partition("t", None, 50, parts)
    others = [q for q in parts if q != current]
    assert p.partition("t", None, 50, others) in others  # no longer available: moves now
    # consistent (crc32): a NULL key is sticky too; an empty key still hashes.
    c = sticky("consistent")
    assert c.partition("t", b"", 50, parts) == zlib.crc32(b"") % 50
    nulls = {c.partition("t", None, 50, parts) for _ in range(5)}
    assert len(nulls) == 1
    # murmur2_random: an empty key hashes (only consistent_random spreads empty keys).
    assert sticky("murmur2_random").partition("t", b"", 8, []) == murmur2_partition(b"", 8)
    # 0 turns it off: a random partition per record.
    off = Partitioner("consistent_random", rng=random.Random(1), sticky_linger_ms=0)
    assert len({off.partition("t", None, 50, parts) for _ in range(50)}) > 1
    # random ignores it; Java's murmur2 keeps its sticky partition per batch (KIP-480).
    rnd = sticky("random")
    assert len({rnd.partition("t", None, 50, parts) for _ in range(50)}) > 1
    java = sticky("murmur2")
    first = java.partition("t", None, 50, parts)
    now[0] += 60
    assert java.partition("t", None, 50, parts) == first


def test_sticky_until_new_batch() -> None:
    p = Partitioner("murmur2", rng=random.Random(7))
    first = p.partition("t", None, 6, range(6))
    assert all(p.partition("t", None, 6, range(6)) == first for _ in range(50))
    p.on_new_batch("t", first, 6, range(6))
    second = p.partition("t", None, 6, range(6))
    assert second != first
    # a stale notification about a partition we already left changes nothing
    p.on_new_batch("t", first, 6, range(6))
    assert p.partition("t", None, 6, range(6)) == second
    # other topics keep their own sticky partition
    other = p.partition("u", None, 6, [2])
    assert other == 2


def test_roundrobin_over_available() -> None:
    p = Partitioner("roundrobin")
    assert [p.partition("t", b"k", 4, [1, 3]) for _ in range(4)] == [1, 3, 1, 3]
    assert [p.partition("u", None, 3, []) for _ in range(4)] == [0, 1, 2, 0]


def test_custom_callable() -> None:
    p = Partitioner(lambda key, n, avail: n - 1)
    assert p.partition("t", b"x", 4, []) == 3
    bad = Partitioner(lambda key, n, avail: n)
    with pytest.raises(ValueError, match="returned 4"):
        bad.partition("t", b"x", 4, [])


def test_unknown_name() -> None:
    with pytest.raises(ConfigError):
        Partitioner("nope")


def test_one_registry_of_partitioner_names() -> None:
    """Config, producer and proxy take their names from ``PARTITIONERS`` /
    ``KEY_HASHES``: a name is accepted everywhere or nowhere."""
    from trafka.proxy import HASHES
    from trafka.sdk.config import ConfigError, ProducerConfig
    from trafka.sdk.partitioners import KEY_HASHES, PARTITIONERS, Partitioner

    assert HASHES is KEY_HASHES
    for name, info in PARTITIONERS.items():
        assert ProducerConfig.from_dict({"partitioner": name}).partitioner == name
        if info.key_hash is not None:
            assert info.key_hash in KEY_HASHES.values()
            assert Partitioner(name).partition("t", b"key-7", 12, []) == info.key_hash(b"key-7", 12)
    with pytest.raises(ConfigError, match="partitioner"):
        ProducerConfig.from_dict({"partitioner": "java_default"})
