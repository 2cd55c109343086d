"""Hypothesis strategies and deterministic samples built from the codec's own schemas.

The strategies walk the construct objects of :mod:`trafka.codec.primitives`
(``Schema``, ``Array``, ``NullableStruct`` and the ``Primitive`` instances), so
they follow whatever the generated modules declare for one version: a field that
a version lacks keeps its dataclass default, a nullable field sometimes gets
``None``, a flexible struct gets random values for its known tagged fields and a
few unknown tags.

They are shared by the round-trip, header, fuzz and kafka-python cross-check
tests; the conformance test does not use them (it reads the JSON specs itself).
"""

from __future__ import annotations

import contextlib
import dataclasses
import tracemalloc
import uuid
from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st

from trafka.codec import primitives as p
from trafka.codec.errors import CodecError
from trafka.codec.protocol import all_apis

NULL_UUID = uuid.UUID(int=0)

# Kafka's classic strings carry an int16 length; keep generated text short so
# that nested arrays stay small, but long enough to cross the 1-byte varint
# boundary of compact lengths now and then. A long value is a short drawn one
# repeated to a drawn length: its length and characters are what an encoder can
# get wrong, and hypothesis draws it in a few choices instead of one per
# character (in a profile of test_roundtrip_generated, drawing strings and bytes
# took a quarter of its time, mostly the long ones).


def _stretched(short: st.SearchStrategy[Any], lo: int, hi: int) -> st.SearchStrategy[Any]:
    """``short`` values (never empty) repeated and cut to a length in ``[lo, hi]``."""
    return st.builds(lambda unit, n: (unit * hi)[:n], short, st.integers(lo, hi))


_TEXT = st.text(max_size=12) | _stretched(st.text(min_size=1, max_size=12), 120, 140)
_BLOB = st.binary(max_size=12) | _stretched(st.binary(min_size=1, max_size=12), 127, 131)
_MAX_ITEMS = 3

_INT_RANGES: dict[str, tuple[int, int]] = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
    "uint16": (0, 2**16 - 1),
    "uint32": (0, 2**32 - 1),
    "uvarint": (0, 2**32 - 1),
    "varint": (-(2**31), 2**31 - 1),
    "varlong": (-(2**63), 2**63 - 1),
}
_NULLABLE_TEXT = {"nullable string", "compact nullable string"}
_TEXT_TYPES = {"string", "compact string"} | _NULLABLE_TEXT
_NULLABLE_BLOB = {"nullable bytes", "compact nullable bytes", "records", "compact records"}
_BLOB_TYPES = {"bytes", "compact bytes"} | _NULLABLE_BLOB


def int_range(kafka_type: str) -> tuple[int, int]:
    """The (min, max) of an integer primitive, by its ``kafka_type`` name."""
    return _INT_RANGES[kafka_type]


def _int_strategy(lo: int, hi: int) -> st.SearchStrategy[int]:
    # Bias towards the boundaries: they are where sign and width bugs hide.
    edges = sorted({lo, lo + 1, -1 if lo < 0 else lo, 0 if lo <= 0 else lo, hi - 1, hi})
    return st.sampled_from(edges) | st.integers(lo, hi)


def primitive_strategy(con: p.Primitive) -> st.SearchStrategy[Any]:
    """Values a primitive can encode."""
    kind = con.kafka_type
    if kind in _INT_RANGES:
        return _int_strategy(*_INT_RANGES[kind])
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "uuid":
        return st.just(NULL_UUID) | st.uuids()
    if kind in _TEXT_TYPES:
        return (st.none() | _TEXT) if kind in _NULLABLE_TEXT else _TEXT
    if kind in _BLOB_TYPES:
        return (st.none() | _BLOB) if kind in _NULLABLE_BLOB else _BLOB
    raise AssertionError(f"no strategy for primitive {kind!r}")


def unknown_tags_strategy(known: set[int]) -> st.SearchStrategy[list[tuple[int, bytes]]]:
    """Sorted, distinct unknown tagged fields (the order a decoder returns them in)."""
    tag = (st.integers(0, 40) | st.integers(0, 2**32 - 1)).filter(lambda t: t not in known)
    return st.lists(st.tuples(tag, _BLOB), max_size=3, unique_by=lambda item: item[0]).map(sorted)


class _Builder:
    """Turns constructs into strategies, caching one strategy per construct."""

    def __init__(self, *, unknown_tags: bool) -> None:
        self.unknown_tags = unknown_tags
        self.cache: dict[int, st.SearchStrategy[Any]] = {}

    def __call__(self, con: Any) -> st.SearchStrategy[Any]:
        found = self.cache.get(id(con))
        if found is None:
            found = self.cache[id(con)] = self._make(con)
        return found

    def _make(self, con: Any) -> st.SearchStrategy[Any]:
        if isinstance(con, p.Schema):
            return self._schema(con)
        if isinstance(con, p.Array):
            items = st.lists(self(con.subcon), max_size=_MAX_ITEMS)
            return (st.none() | items) if con.nullable else items
        if isinstance(con, p.NullableStruct):
            return st.none() | self(con.subcon)
        if isinstance(con, p.Primitive):
            return primitive_strategy(con)
        raise AssertionError(f"no strategy for {con!r}")

    def _schema(self, schema: p.Schema) -> st.SearchStrategy[Any]:
        kwargs: dict[str, st.SearchStrategy[Any]] = {name: self(sc) for name, sc in schema.fields}
        for tf in schema.tagged:
            # The default is written as "absent": make sure both cases occur.
            kwargs[tf.name] = st.just(tf.default) | self(tf.subcon)
        if schema.flexible:
            if self.unknown_tags:
                kwargs["unknown_tagged_fields"] = unknown_tags_strategy(
                    {tf.tag for tf in schema.tagged}
                )
            else:
                kwargs["unknown_tagged_fields"] = st.just([])
        return st.builds(schema.cls, **kwargs)


#: (id of a schema, unknown_tags) -> (that schema, kept alive so that its id stays
#: its own; its strategy). Tests draw from ``message_strategy(schema)`` once per
#: example: a new tree of strategies each time had hypothesis work out every new
#: strategy's properties before its first draw (a fifth of the same profile).
_MADE: dict[tuple[int, bool], tuple[p.Schema, st.SearchStrategy[Any]]] = {}


def message_strategy(schema: p.Schema, *, unknown_tags: bool = True) -> st.SearchStrategy[Any]:
    """A strategy for messages that ``schema`` (one version of one message) can encode.

    Args:
        schema: a generated top-level or nested :class:`~trafka.codec.primitives.Schema`.
        unknown_tags: whether flexible structs get unknown tagged fields.

    Returns:
        A strategy of instances of ``schema.cls`` (the same object for the same
        arguments). Fields the version lacks keep their defaults, so ``encode``
        then ``decode`` must give back an equal value.
    """
    key = (id(schema), unknown_tags)
    made = _MADE.get(key)
    if made is None:
        made = _MADE[key] = (schema, _Builder(unknown_tags=unknown_tags)(schema))
    return made[1]


# -- deterministic samples ----------------------------------------------------------


class _Sampler:
    """Builds one value per construct in which every field differs from its default.

    ``salt`` varies the values between calls so that two samples differ. Arrays
    get two elements, nullable fields a value (not ``None``), tagged fields a
    value that differs from their default (so they are actually written).
    """

    def __init__(self, salt: int) -> None:
        self.salt = salt
        self.counter = 0

    def _next(self) -> int:
        self.counter += 1
        return self.counter * 7 + self.salt * 131

    def value(self, con: Any) -> Any:
        if isinstance(con, p.Schema):
            return self.schema(con)
        if isinstance(con, p.Array):
            return [self.value(con.subcon) for _ in range(2)]
        if isinstance(con, p.NullableStruct):
            return self.value(con.subcon)
        return self.primitive(con)

    def primitive(self, con: p.Primitive) -> Any:
        kind = con.kafka_type
        n = self._next()
        if kind in _INT_RANGES:
            lo, hi = _INT_RANGES[kind]
            # Large magnitudes exercise every byte of the wider types.
            span = hi - lo + 1
            return lo + (n * 2654435761 + span // 3) % span
        if kind == "bool":
            return True
        if kind == "float64":
            return n + 0.25
        if kind == "uuid":
            return uuid.UUID(int=(n * 0x9E3779B97F4A7C15) % 2**128 or 1)
        if kind in _TEXT_TYPES:
            return f"s{n}-\u00e9\u6f22"
        if kind in _BLOB_TYPES:
            return bytes(range(n % 200, n % 200 + 5))
        raise AssertionError(f"no sample for primitive {kind!r}")

    def schema(self, schema: p.Schema) -> Any:
        kwargs: dict[str, Any] = {name: self.value(sc) for name, sc in schema.fields}
        for tf in schema.tagged:
            value = self.value(tf.subcon)
            while value == tf.default:
                value = self.value(tf.subcon)
            kwargs[tf.name] = value
        return schema.cls(**kwargs)


def sample_message(schema: p.Schema, salt: int = 0) -> Any:
    """A deterministic message of ``schema`` with a non-default value in every field.

    Args:
        schema: one version of one message (a generated ``Schema``).
        salt: varies the values; samples with different salts differ.

    Returns:
        An instance of ``schema.cls`` without unknown tagged fields.
    """
    return _Sampler(salt).schema(schema)


# -- the API table, as pytest parameters ---------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    """One message of one API at one version."""

    key: int
    name: str
    version: int
    response: bool

    @property
    def id(self) -> str:
        kind = "resp" if self.response else "req"
        return f"{self.name}-v{self.version}-{kind}"

    @property
    def schema(self) -> p.Schema:
        from trafka.codec.protocol import api

        module = api(self.key).module
        schemas = module.RESPONSE_SCHEMAS if self.response else module.REQUEST_SCHEMAS
        return schemas[self.version]  # type: ignore[no-any-return]


def all_cases() -> list[Case]:
    """Every (API, version, request/response) the codec implements."""
    return [
        Case(info.key, info.name, v, response)
        for info in all_apis()
        for v in range(info.min_version, info.max_version + 1)
        for response in (False, True)
    ]


def peak_allocation(fn: Callable[[], object]) -> int:
    """The most memory ``fn`` held at once (tracemalloc), whether it raised a codec error or not.

    What "refused cheaply" means in these tests: a bound on what a hostile
    input makes us allocate, which the machine's load cannot change (a wall
    clock bound would).
    """
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        with contextlib.suppress(CodecError):
            fn()
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak
