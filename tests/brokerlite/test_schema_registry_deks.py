"""The DEK registry's records in the ``_schemas`` topic (no I/O): the first
record of a KEK (a DEK version) holds it, another writer's is refused on every
node, a tombstone of the holder removes it, and replaying a compacted topic
(the last record of each key) gives the same keys."""

from __future__ import annotations

import json
from typing import Any

from trafka.brokerlite.registry.store import RegistryState, dumps


def kek_key(name: str, writer: int, context: str | None = None) -> bytes:
    return dumps({"keytype": "KEK", "magic": 0, "name": name, "context": context, "writer": writer})


def dek_key(version: int, writer: int) -> bytes:
    return dumps({"keytype": "DEK", "magic": 0, "kekName": "k1", "subject": "s", "version": version,
                  "algorithm": "AES256_GCM", "context": None, "writer": writer})  # fmt: skip


def kek(key_id: str) -> bytes:
    return dumps({"name": "k1", "kmsType": "local-kms", "kmsKeyId": key_id, "shared": False})


def dek(material: str, version: int) -> bytes:
    return dumps({"kekName": "k1", "subject": "s", "version": version,
                  "algorithm": "AES256_GCM", "encryptedKeyMaterial": material})  # fmt: skip


def replay(records: list[tuple[bytes, bytes | None]]) -> RegistryState:
    state = RegistryState()
    for offset, (key, value) in enumerate(records):
        state.apply(offset, key, value)
    return state


def held(state: RegistryState) -> dict[str, Any]:
    return {
        "keks": {name: v["kmsKeyId"] for (_, name), (_, v) in state.keys.keks.items()},
        "deks": {w[4]: v["encryptedKeyMaterial"] for w, (_, v) in state.keys.deks.items()},
    }


def test_the_first_writer_holds_and_the_others_are_refused() -> None:
    state = RegistryState()
    assert state.apply(0, kek_key("k1", 1), kek("a"))
    assert not state.apply(1, kek_key("k1", 2), kek("b"))  # another node's, later
    assert state.apply(2, dek_key(1, 2), dek("m1", 1))
    assert not state.apply(3, dek_key(1, 1), dek("m2", 1))
    assert state.apply(4, dek_key(2, 1), dek("m3", 2))
    assert held(state) == {"keks": {"k1": "a"}, "deks": {1: "m1", 2: "m3"}}
    assert sorted(state.keys.dek_versions(None, "k1", "s", "AES256_GCM")) == [1, 2]
    assert state.keys.kek("other-context", "k1") is None
    # a refused writer's tombstone changes nothing; the holder's removes
    assert not state.apply(5, kek_key("k1", 2), None)
    assert state.apply(6, dek_key(2, 1), None)
    assert held(state)["deks"] == {1: "m1"}


def test_a_compacted_topic_gives_the_same_keys() -> None:
    records = [
        (kek_key("k1", 1), kek("a")),
        (kek_key("k1", 2), kek("b")),
        (dek_key(1, 1), dek("m1", 1)),
        (dek_key(2, 1), dek("m2", 2)),
        (dek_key(2, 1), None),
        (kek_key("k2", 1), json.dumps({"kmsKeyId": "c"}).encode()),
    ]
    last: dict[bytes, bytes | None] = {}
    for key, value in records:
        last.pop(key, None)
        last[key] = value
    compacted = [(k, v) for k, v in last.items() if v is not None]
    assert held(replay(records)) == held(replay(compacted))
