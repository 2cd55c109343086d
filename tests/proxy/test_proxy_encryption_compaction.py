"""Compaction of a topic whose keys the proxy encrypts deterministically
(issue #83 item 1; Kroxylicious #799 asks for it): the broker's own log
cleaner, brokerlite's and Apache Kafka 4.4's, keeps the latest record of each
key frame, so a consumer through the proxy reads the latest value of each
plaintext key, as it would from a compacted topic of plaintext keys.

Kafka's documentation ("Log Compaction", design section): compaction retains
"at least the last known value for each message key", cleaning only segments
other than the active one, once the dirty part of the log reaches
``min.cleanable.dirty.ratio``; ``segment.ms`` rolls a segment at the first
append after it is that old.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from encryption_helpers import key_file
from kafka_fixtures import Peer
from proxy_helpers import create, fresh, placement, sdk_reports

from trafka.proxy import proxy_in_thread
from trafka.proxy.encryption import RecordEncryption
from trafka.proxy.encryption.frame import KEY_MAGIC

pytestmark = pytest.mark.timeout(240)

KEYS = 5
COMPACTED = {
    "cleanup.policy": "compact",
    "segment.ms": "1",  # every append after the first rolls a segment
    "min.cleanable.dirty.ratio": "0.01",
}


@pytest.mark.parametrize("peer", ["brokerlite", "4"], indirect=True)
def test_the_brokers_cleaner_keeps_the_latest_record_of_each_encrypted_key(
    peer: Peer, tmp_path: Path
) -> None:
    """Three rounds through the encrypting proxy, each its own segment: every
    key with an old value, every key with a new value, then a last record (its
    segment the active one, which no cleaner touches). Straight from the
    broker the keys are frames; once the broker's cleaner ran (its backoff:
    15 s by default, brokerlite's and Kafka's), one record of each frame is
    left, and through the proxy every plaintext key reads its new value."""
    topic = fresh("enc-compact")
    create(peer.bootstrap_servers, topic, 1, configs=COMPACTED, served=True)
    encryption = RecordEncryption(
        {
            "kms": "keyfile",
            "key_file": str(key_file(tmp_path, "orders")),
            "topics": {"enc-compact-.*": "orders"},
            "encrypt_keys": ["enc-compact-.*"],
        }
    )
    old = [(b"old-%d" % k, b"KEY-%d" % k) for k in range(KEYS)]
    new = [(b"new-%d" % k, b"KEY-%d" % k) for k in range(KEYS)]
    with proxy_in_thread(upstream=(peer.bootstrap_servers,), port=0, filters=(encryption,)) as px:
        for sends in (old, new, [(b"last", b"KEY-last")]):
            sdk_reports(px.bootstrap_servers, topic, sends)
        deadline = time.monotonic() + 150
        while len(straight := placement(peer.bootstrap_servers, topic, 1)) > KEYS + 1:
            assert time.monotonic() < deadline, _frames_seen(straight)
            time.sleep(1)
        assert all(r.key.startswith(KEY_MAGIC) for r in straight)
        assert len({r.key for r in straight}) == KEYS + 1
        read = placement(px.bootstrap_servers, topic, 1)
    assert sorted((r.key, r.value) for r in read) == sorted([(k, v) for v, k in new] + [
        (b"KEY-last", b"last")
    ])  # fmt: skip


def _frames_seen(records: list[Any]) -> str:
    counts: dict[bytes, int] = {}
    for r in records:
        counts[r.key] = counts.get(r.key, 0) + 1
    return f"not compacted yet: {len(records)} records, per key frame {sorted(counts.values())}"
