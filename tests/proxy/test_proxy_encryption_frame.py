"""The record-encryption frame and data keys, without sockets: a frame reads
back what was written; any bytes after the magic either read as a frame or
are refused as FrameError (never another exception); a record batch keeps
everything but its values (offsets, timestamps, keys, headers, producer id,
epoch, sequence, compression, transactional bit); a DEK encrypts at most its
bound of records, and no two records share a nonce.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from trafka.codec.records import decode_batch, encode_batch
from trafka.proxy.encryption import KeyFileKms, KmsRefused, add_key_version
from trafka.proxy.encryption.frame import KEY_MAGIC, MAGIC, FrameError, parse, parse_key, prefix
from trafka.proxy.encryption.keys import Deks
from trafka.proxy.encryption.records import decrypt_blob, encrypt_blob, records_in


def test_a_frame_header_reads_back() -> None:
    pre = prefix("orders", "7", b"w" * 60)
    got = parse(pre + b"n" * 12 + b"t" * 16)
    assert got == (pre, "orders", "7", b"w" * 60, len(pre))


@given(st.binary(max_size=200))
def test_any_bytes_after_the_magic_read_or_are_refused_as_frame_errors(tail: bytes) -> None:
    try:
        parse(MAGIC + tail)
    except FrameError:
        pass


@given(st.binary(max_size=100))
def test_any_bytes_after_the_key_magic_read_or_are_refused_as_frame_errors(tail: bytes) -> None:
    try:
        parse_key(KEY_MAGIC + tail)
    except FrameError:
        pass


def test_a_key_frame_is_the_same_for_the_same_key_and_survives_rotation(tmp_path: Path) -> None:
    kms = _kms(tmp_path)
    version, key = kms.key_key("orders", None)
    add_key_version(tmp_path / "k.toml", "orders")
    assert kms.key_key("orders", None) == (version, key)  # the first version, still
    assert kms.key_key("orders", "2")[1] != key


def _kms(tmp_path: Path) -> KeyFileKms:
    add_key_version(tmp_path / "k.toml", "orders")
    return KeyFileKms(tmp_path / "k.toml")


@pytest.mark.parametrize("compression", [0, 1, 3, 4])  # none, gzip, lz4, zstd
def test_a_batch_keeps_all_but_its_values(tmp_path: Path, compression: int) -> None:
    kms = _kms(tmp_path)
    records = [
        (1000 + i, b"k%d" % i, b"v%d" % i if i != 2 else None, [("h", b"%d" % i)]) for i in range(5)
    ]
    batch = encode_batch(
        records,
        compression=compression,
        producer_id=42,
        producer_epoch=3,
        base_sequence=17,
        is_transactional=True,
    )
    deks = Deks()
    dek, version, wrapped = kms.new_dek("orders")
    lease = deks.install("orders", dek, version, wrapped, 0.0, records_in(batch))
    sealed, used = encrypt_blob(batch, lease, 0, 1 << 20)
    assert used == 4  # the null value (a tombstone) stays null
    before, after = decode_batch(batch), decode_batch(sealed)
    keep = ("attributes", "producer_id", "producer_epoch", "base_sequence", "last_offset_delta")
    assert [getattr(after.header, f) for f in keep] == [getattr(before.header, f) for f in keep]
    assert [(r.offset, r.timestamp, r.key, r.headers) for r in after.records] == [
        (r.offset, r.timestamp, r.key, r.headers) for r in before.records
    ]
    assert after.records[2].value is None
    assert all(r.value.startswith(MAGIC) for r in after.records if r.value is not None)
    opened, stop = decrypt_blob(sealed, lambda pre, *_: deks.reader(pre), 1 << 20)
    assert stop is None and opened is not None
    assert decode_batch(opened).records == before.records


def test_a_dek_encrypts_its_bound_of_records_then_a_new_one_is_needed(tmp_path: Path) -> None:
    kms = _kms(tmp_path)
    deks = Deks(max_records=10, max_age=60)
    dek, version, wrapped = kms.new_dek("orders")
    first = deks.install("orders", dek, version, wrapped, 0.0, 4)
    second = deks.lease("orders", 6, 1.0)
    assert second is not None and (second.start, second.count) == (4, 6)
    assert deks.lease("orders", 1, 1.0) is None  # the bound reached
    assert first.dek is second.dek
    assert deks.lease("orders", 0, 61.0) is None  # too old


def test_the_key_file_refuses_unknown_keks_versions_and_foreign_wrapped_deks(
    tmp_path: Path,
) -> None:
    kms = _kms(tmp_path)
    dek, version, wrapped = kms.new_dek("orders")
    assert kms.unwrap("orders", version, wrapped) == dek
    for kek, ver, blob in (
        ("nope", version, wrapped),
        ("orders", "9", wrapped),
        ("orders", version, b"x" * 60),
    ):
        with pytest.raises(KmsRefused):
            kms.unwrap(kek, ver, blob)
    new = add_key_version(tmp_path / "k.toml", "orders")
    assert kms.new_dek("orders")[1] == str(new)  # the file read again: the new version wraps
    assert kms.unwrap("orders", version, wrapped) == dek  # the old still unwraps


def test_a_produce_naming_its_topic_by_id_is_held_back_until_the_id_is_known(
    tmp_path: Path,
) -> None:
    """Produce v13 names topics by id (KIP-516). The proxy forwards Produce
    v11 at most today (proxy/rewrite.py), but a client may send v13 anyway, or
    a later proxy let it: a topic id no Metadata answer through the proxy
    named yet is refused UNKNOWN_TOPIC_ID (retriable: the client refreshes its
    metadata through the proxy and sends again), never forwarded in the clear."""
    import uuid

    import trio

    from trafka.codec import ApiKey, ErrorCode
    from trafka.codec.messages.k00_produce import ProduceRequest
    from trafka.codec.messages.k03_metadata import MetadataResponse
    from trafka.proxy import FilterContext, Respond
    from trafka.proxy.encryption import RecordEncryption

    add_key_version(tmp_path / "k.toml", "orders")
    enc = RecordEncryption(
        {"kms": "keyfile", "key_file": str(tmp_path / "k.toml"), "topics": {"orders": "orders"}}
    )
    tid = uuid.uuid4()
    part = ProduceRequest.PartitionProduceData(
        index=0, records=encode_batch([(1, b"k", b"SECRET", [])])
    )
    request = ProduceRequest(
        acks=-1,
        timeout_ms=1000,
        topic_data=[ProduceRequest.TopicProduceData(topic_id=tid, partition_data=[part])],
    )

    def ctx(key: int) -> FilterContext:
        return FilterContext(
            api_key=key,
            api_version=13 if key == ApiKey.PRODUCE else 12,
            correlation_id=1,
            client_id=None,
            client_address=None,
            node_id=0,
        )

    held = trio.run(enc.on_request, ctx(ApiKey.PRODUCE), request)
    assert isinstance(held, Respond)
    (topic,) = held.body.responses
    assert topic.topic_id == tid
    assert [p.error_code for p in topic.partition_responses] == [ErrorCode.UNKNOWN_TOPIC_ID]

    named = MetadataResponse.MetadataResponseTopic(name="orders", topic_id=tid, partitions=[])
    enc.on_response(ctx(ApiKey.METADATA), MetadataResponse(topics=[named]))
    sent = trio.run(enc.on_request, ctx(ApiKey.PRODUCE), request)
    (record,) = decode_batch(sent.topic_data[0].partition_data[0].records).records
    assert record.value.startswith(MAGIC) and b"SECRET" not in record.value
