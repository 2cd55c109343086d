"""Where key routing puts each record (proxy/keyrouting/placement.py), the one
decision every plan builds on, against a Python reference written from its
rules: a record with a key goes to ``hash(key) % partitions``, one without stays;
a batch whose records all stay is one piece, its own bytes; otherwise a piece
per target, estimated at the batch's size times its share of the records plus
64 bytes; per target the client's own pieces first, then those moved in, in the
request's order; a batch a target of which has no known leader stays whole.

The reference decodes every record in Python (trafka.codec.records); the
product places a topic in one C call (batch_split.place_sections), or a batch at
a time (batch_split.split_batch, else decoded) where the C call declines. Over
random requests (two topics, one perhaps named twice, several batches a
partition, empty partitions, every codec, keys null, empty and long, each hash
the C pass computes), the C call's pieces hold the reference's records, and a
batch at a time places byte for byte what the C call does.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from proxy_helpers import request

from trafka.codec import _accel, batch_split
from trafka.codec.compression import Compression
from trafka.codec.legacy import decode_legacy_entry, encode_message_set
from trafka.codec.records import decode_batch, encode_batch, iter_batches
from trafka.proxy.keyrouting import placement
from trafka.proxy.keyrouting.placement import Placed, place_topic
from trafka.proxy.keyrouting.plan import place_plain
from trafka.proxy.topics import Topics
from trafka.sdk.partitioners import KEY_HASHES

C = _accel.speedups
pytestmark = pytest.mark.skipif(C is None, reason="the C accelerator is not built or is off")
SETTINGS = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
PARTITIONS = 6
HASH_NAMES = sorted(batch_split.HASH_IDS)

keys = (
    st.none()
    | st.just(b"")
    | st.binary(min_size=1, max_size=12)
    | st.integers(0, 40).map(lambda i: b"user-%d" % i)
    | st.integers(60, 300).map(lambda n: b"k" * n)
)


@st.composite
def batches(draw: Any) -> bytes:
    base = draw(st.integers(0, 2**42))
    rows = [
        (
            base + draw(st.integers(-5000, 5000)),
            draw(keys),
            draw(st.none() | st.binary(max_size=40)),
            draw(
                st.lists(st.tuples(st.sampled_from(["a", "é"]), st.binary(max_size=4)), max_size=2)
            ),
        )
        for _ in range(draw(st.integers(1, 30)))
    ]
    return encode_batch(
        rows,
        compression=draw(st.sampled_from(list(Compression))),
        timestamp_type=draw(st.sampled_from([0, 0, 1])),
    )


@st.composite
def topic_data(draw: Any, name: str, partitions: int) -> Any:
    chosen = draw(st.lists(st.integers(0, partitions - 1), min_size=1, max_size=5, unique=True))
    parts = {p: [draw(batches()) for _ in range(draw(st.integers(0, 3)))] for p in chosen}
    return request(parts, topic=name).topic_data[0]


@st.composite
def requests(draw: Any) -> Any:
    """Batches of two topics, one perhaps named twice, as librdkafka sends them."""
    data = [draw(topic_data("orders", PARTITIONS)), draw(topic_data("audit", 3))]
    if draw(st.booleans()):
        data.append(draw(topic_data("orders", PARTITIONS)))
    return dataclasses.replace(request({}), topic_data=data)


def cluster(unknown_leader: bool) -> Topics:
    topics = Topics(
        {"orders": PARTITIONS, "audit": 3},
        {("orders", p): 1 + p % 3 for p in range(PARTITIONS)} | {("audit", p): 2 for p in range(3)},
    )
    if unknown_leader:
        del topics.leaders[("orders", PARTITIONS - 1)]
    return topics


def rows(records: list[Any]) -> list[tuple[Any, ...]]:
    return [(r.timestamp, r.key, r.value, tuple(r.headers)) for r in records]


def reference(body: Any, topics: Topics, hash_name: str) -> Any:
    """Where the module's rules put the records of a plain request, decoded."""
    hash_of = KEY_HASHES[hash_name]
    targets: dict[tuple[str, int], tuple[list[Any], list[Any]]] = {}
    split, counted, held = set(), [], []

    def add(key: tuple[str, int], own: bool, piece: Any) -> None:
        targets.setdefault(key, ([], []))[0 if own else 1].append(piece)

    for t in body.topic_data:
        n = topics.partitions[t.name]
        for p in t.partition_data:
            owner = (t.name, p.index)
            for _, raw in iter_batches(p.records or b""):
                data = bytes(raw)
                records = decode_batch(data).records
                groups: dict[int, list[Any]] = {}
                for r in records:
                    target = p.index if r.key is None else hash_of(r.key, n)
                    groups.setdefault(target, []).append(r)
                if list(groups) == [p.index]:
                    counted.append((t.name, 0, len(records)))
                    add(owner, True, (owner, len(data), data, rows(records)))
                    continue
                kept = len(groups.get(p.index, []))
                counted.append((t.name, len(records) - kept, kept))
                if any(topics.leader(t.name, x) < 0 for x in groups):
                    held.append(owner)
                    add(owner, True, (owner, len(data), data, rows(records)))
                    continue
                split.add(owner)
                for target, group in groups.items():
                    size = len(data) * len(group) // len(records) + 64
                    add((t.name, target), target == p.index, (owner, size, None, rows(group)))
    return list(targets.items()), split, counted, held


def decoded(placed: Placed) -> Any:
    """``placed`` as the reference writes it: each piece's records decoded."""

    def records_of(piece: Any) -> list[Any]:
        _, _, whole, found, _ = piece
        if found is None or isinstance(found, list):
            return decode_batch(whole).records if found is None else found
        built = batch_split.build_batch([found], attributes=0)
        assert built is not None
        return decode_batch(built[0]).records

    targets = [
        (key, tuple([(p[0], p[1], p[2], rows(records_of(p))) for p in pieces] for pieces in slot))
        for key, slot in placed.targets.items()
    ]
    return (
        [(k, (own, moved)) for k, (own, moved) in targets],
        placed.split,
        placed.counted,
        placed.held,
    )


def fields(placed: Placed | None) -> Any:
    assert placed is not None
    return [getattr(placed, name) for name in Placed.__slots__]


@contextmanager
def one_at_a_time() -> Iterator[None]:
    """Placed a batch at a time (the C call a topic declines)."""
    saved = batch_split.placing
    batch_split.placing = lambda *args: False  # type: ignore[assignment]
    try:
        yield
    finally:
        batch_split.placing = saved  # type: ignore[assignment]


@SETTINGS
@given(requests(), st.booleans(), st.sampled_from(HASH_NAMES))
def test_a_plain_request_is_placed_as_the_rules_say(
    body: Any, unknown_leader: bool, hash_name: str
) -> None:
    topics = cluster(unknown_leader)
    calls: list[Any] = []
    real = batch_split.place_sections

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(real(*args, **kwargs))
        return calls[-1]

    batch_split.place_sections = counting  # type: ignore[assignment]
    try:
        placed = place_plain(body, topics, hash_name, 1 << 24)
    finally:
        batch_split.place_sections = real  # type: ignore[assignment]
    assert placed is not None
    expected = reference(body, topics, hash_name)
    assert decoded(placed) == expected
    # Every topic with batches placed by one C call, but where a batch is held.
    assert len(calls) == sum(any(p.records for p in t.partition_data) for t in body.topic_data)
    assert placed.located == (not expected[3])
    assert (None in calls) == bool(expected[3])


@SETTINGS
@given(requests(), st.booleans(), st.sampled_from(HASH_NAMES))
def test_a_batch_at_a_time_places_what_one_c_call_a_topic_does(
    body: Any, unknown_leader: bool, hash_name: str
) -> None:
    """Byte for byte: the same pieces (the records' spans too), in the same
    order, the same counts, split and held batches."""
    topics = cluster(unknown_leader)
    at_once = place_plain(body, topics, hash_name, 1 << 24)
    with one_at_a_time():
        alone = place_plain(body, topics, hash_name, 1 << 24)
    assert fields(at_once) == fields(alone)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.tuples(keys, st.binary(max_size=20)), min_size=1, max_size=20), st.booleans())
def test_legacy_messages_are_placed_as_the_rules_say(messages: Any, gzip: bool) -> None:
    """Produce v0-2's message sets (here a gzip wrapper of several, or one
    message) go the Python way, by the same rules."""
    data = encode_message_set(
        [(1_700_000_000_000, k, v, ()) for k, v in messages],
        magic=1,
        compression=Compression.GZIP if gzip else Compression.NONE,
    )
    placed = Placed()
    header, raw = next(iter_batches(data))
    own = 2
    place_topic(
        placed, "orders", PARTITIONS, [(("orders", own), own, header, bytes(raw), True)],
        hash_name="murmur2", can_take=b"\1" * PARTITIONS, max_size=1 << 24,
    )  # fmt: skip
    records = decode_legacy_entry(bytes(raw))
    expected: dict[int, list[Any]] = {}
    for r in records:
        target = own if r.key is None else KEY_HASHES["murmur2"](r.key, PARTITIONS)
        expected.setdefault(target, []).append((r.key, r.value))
    got = {
        target: [(r.key, r.value) for p in own_ + moved for r in placement._records_of(p)]
        for (_, target), (own_, moved) in placed.targets.items()
    }
    assert got == expected
    assert list(got) == list(expected)  # the targets in the order first named
    assert not placed.located
