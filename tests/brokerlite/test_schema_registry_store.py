"""The registry's state from its ``_schemas`` records (no I/O): the rules of
:mod:`trafka.brokerlite.registry.store` that make every node agree, and a
compacted topic give the same registry as the whole one.

Compaction keeps the last record of each key, in offset order, and drops
tombstones after a while (Kafka's docs, "Log Compaction",
https://kafka.apache.org/documentation/#compaction): replaying what it leaves
must give the same subjects, versions and ids, and the next id must not go
back.
"""

from __future__ import annotations

import json

from trafka.brokerlite.registry.store import (
    IDS_KEY,
    RegistryState,
    config_key,
    dumps,
    schema_key,
)


def value(subject: str, version: int, schema_id: int, text: str, deleted: bool = False) -> bytes:
    return dumps({"subject": subject, "version": version, "id": schema_id, "schemaType": "AVRO",
                  "schema": text, "references": [], "deleted": deleted})  # fmt: skip


X, Y = json.dumps("string"), json.dumps("long")
RECORDS: list[tuple[bytes, bytes | None, bool]] = [
    (schema_key("s", 1, 1), value("s", 1, 1, X), True),
    # Node 2 raced for the same version: refused, whatever its content.
    (schema_key("s", 1, 2), value("s", 1, 1, Y), False),
    # Node 2 raced for the same id with another schema: refused.
    (schema_key("t", 1, 2), value("t", 1, 1, Y), False),
    # Node 2 tombstones its refused keys; the holder stays.
    (schema_key("s", 1, 2), None, False),
    (schema_key("t", 1, 2), None, False),
    # ... and wins the next id.
    (schema_key("t", 1, 2), value("t", 1, 2, Y), True),
    (schema_key("s", 2, 1), value("s", 2, 2, Y), True),
    (config_key("s"), dumps({"compatibilityLevel": "FULL"}), True),
    # s version 1 soft-deleted, then hard-deleted (the IDS record first).
    (schema_key("s", 1, 1), value("s", 1, 1, X, deleted=True), True),
    (IDS_KEY, dumps({"max_id": 2}), True),
    (schema_key("s", 1, 1), None, True),
]


def summary(state: RegistryState) -> tuple[object, ...]:
    return (
        {s: {n: (v.id, v.deleted) for n, v in vs.items()} for s, vs in state.subjects.items()},
        {i: (s.schema_type, s.text) for i, s in state.schemas.items()},
        dict(state.configs),
        state.max_id,
    )


def replay(records: list[tuple[bytes, bytes | None]]) -> RegistryState:
    state = RegistryState()
    for offset, (key, val) in enumerate(records):
        state.apply(offset, key, val)
    return state


def compacted(
    records: list[tuple[bytes, bytes | None]], *, drop_tombstones: bool
) -> list[tuple[bytes, bytes | None]]:
    last = {key: offset for offset, (key, _) in enumerate(records)}
    kept = [r for offset, r in enumerate(records) if last[r[0]] == offset]
    return [r for r in kept if not (drop_tombstones and r[1] is None)]


def test_refused_records_change_nothing_and_applied_ones_do() -> None:
    state = RegistryState()
    for offset, (key, val, applied) in enumerate(RECORDS):
        assert state.apply(offset, key, val) is applied, (offset, key)
    assert summary(state) == (
        {"t": {1: (2, False)}, "s": {2: (2, False)}},
        {2: ("AVRO", Y)},
        {"s": "FULL"},
        2,
    )


def test_a_compacted_topic_gives_the_same_registry() -> None:
    whole = [(k, v) for k, v, _ in RECORDS]
    expected = summary(replay(whole))
    for drop in (False, True):
        again = replay(compacted(whole, drop_tombstones=drop))
        assert summary(again) == expected
        # Schema 1 is gone with its record; its id is still never given again.
        assert again.max_id == 2 and 1 not in again.schemas


def test_records_it_does_not_understand_are_skipped() -> None:
    state = RegistryState()
    assert state.apply(0, b"not json", b"{}") is False
    assert state.apply(1, dumps({"keytype": "NOOP"}), None) is False
    assert state.apply(2, None, b"x") is False
    assert summary(state) == ({}, {}, {}, 0)
