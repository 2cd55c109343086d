"""Record batches encrypted and decrypted, I/O-free.

Rules:

* Only magic 2 batches that are not control batches (transaction markers)
  hold records to encrypt. A batch is decoded (its CRC checked), its records'
  non-null values replaced, and rebuilt with :func:`~trafka.codec.records.rebuild_batch`:
  base offset, offset deltas, timestamps, keys, headers, attributes
  (compression codec included: the records are compressed again with it,
  transactional bit), producer id, epoch and base sequence are kept, the CRC
  is new. So the broker takes an idempotent or transactional batch as the one
  the producer sent, and key routing, which reads keys, sees them unchanged.
* Encrypting (a Produce request's partition): a batch that cannot be decoded, or
  a legacy (magic 0/1) entry, refuses the partition (:class:`Refused`):
  nothing unencrypted is forwarded for a topic that must be encrypted.
* Decrypting (a Fetch answer's partition): a value that starts with the frame
  magic must decrypt; one that does not is passed as it is (written before
  encryption was on, or not through the proxy). Batches are read in order; at
  the first that cannot be decrypted the answer stops: the batches before it
  reach the client, the rest do not. If it is the first, the partition answer
  carries the error instead (see :mod:`.filter`). A batch needing a DEK not yet
  unwrapped stops the answer the same way, without an error: the client asks
  again from that offset, by when the DEK is cached. A trailing batch cut
  short (a Fetch answer may end mid-batch) is left out; legacy entries and
  batches without frames pass byte for byte (an uncompressed batch whose bytes
  hold neither magic is not even decoded).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from trafka.codec.errors import DecodeError
from trafka.codec.records import (
    Record,
    RecordBatchHeader,
    batches_of,
    decode_batch,
    encode_batch,
    rebuild_batch,
)

from .frame import KEY_MAGIC, MAGIC, FrameError, nonce, parse, parse_key
from .keys import Lease

__all__ = ["Pending", "Refused", "Unreadable", "decrypt_blob", "encrypt_blob", "records_in"]


class Refused(Exception):
    """A Produce partition that cannot be encrypted (its reason)."""


class Unreadable(Exception):
    """A fetched record that cannot be decrypted (its reason)."""


class Pending(Exception):
    """A fetched record whose DEK is being unwrapped (its frame prefix)."""


def records_in(blob: Any) -> int:
    """How many records a Produce partition's batches hold (their headers' counts).

    Raises:
        Refused: a legacy entry, or a header that does not read.
    """
    try:
        entries = batches_of(blob)
    except DecodeError as exc:
        raise Refused(f"a batch that does not read: {exc}") from None
    total = 0
    for header, _ in entries:
        if not isinstance(header, RecordBatchHeader):
            raise Refused("a legacy (magic 0 or 1) message set cannot be encrypted")
        if not header.is_control:
            total += max(header.records_count, 0)
    return total


def encrypt_blob(
    blob: Any,
    lease: Lease,
    first: int,
    max_size: int,
    seal_key: Callable[[bytes], bytes] | None = None,
) -> tuple[bytes, int]:
    """A Produce partition's batches with their values encrypted, using the
    lease's nonces from ``first`` on, and their non-null keys by ``seal_key``
    when given (a key frame, deterministic).

    Returns:
        (the new batches, how many nonces were used).

    Raises:
        Refused: a batch that does not decode (CRC, format), or more records
            than the lease holds.
    """
    dek = lease.dek
    seal, pre, salt = dek.aead.encrypt, dek.prefix, dek.salt
    count = lease.start + first
    end = lease.start + lease.count
    out = []
    for header, view in batches_of(blob):
        if not isinstance(header, RecordBatchHeader):
            raise Refused("a legacy (magic 0 or 1) message set cannot be encrypted")
        if header.is_control:
            out.append(bytes(view))
            continue
        try:
            batch = decode_batch(view, verify=True, max_size=max_size)
        except DecodeError as exc:
            raise Refused(f"a batch that does not decode: {exc}") from None
        records = []
        for r in batch.records:
            offset, ts, key, value, headers = r
            if seal_key is not None and key is not None:
                key = seal_key(key)
                r = Record(offset, ts, key, value, headers)
            if value is not None:
                if count >= end:
                    raise Refused("more records than the batch headers count")
                n = nonce(salt, count)
                count += 1
                r = Record(offset, ts, key, b"".join((pre, n, seal(n, value, pre))), headers)
            records.append(r)
        out.append(_rebuilt(batch.header, records))
    return b"".join(out), count - lease.start - first


def _rebuilt(header: RecordBatchHeader, records: list[Record]) -> bytes:
    """A producer's batch with new values: by the codec's batch encoder (its C
    path) when the offsets are the producer's 0, 1, 2..., otherwise (and under
    log-append time) as compaction rebuilds one; the header's fields kept either way."""
    base = header.base_offset
    plain = bool(
        records
        and header.last_offset_delta == len(records) - 1
        and not header.timestamp_type
        and all(r.offset == base + i for i, r in enumerate(records))
    )
    if not plain:
        return rebuild_batch(header, records)
    return encode_batch(
        [(r.timestamp, r.key, r.value, r.headers) for r in records],
        base_offset=base,
        compression=header.compression,
        producer_id=header.producer_id,
        producer_epoch=header.producer_epoch,
        base_sequence=header.base_sequence,
        is_transactional=header.is_transactional,
        partition_leader_epoch=header.partition_leader_epoch,
        base_timestamp=header.base_timestamp,
    )


def decrypt_blob(
    blob: Any,
    reader: Callable[[bytes, str, str, bytes], Any],
    max_size: int,
    key_reader: Callable[[bytes, str, str], Any] | None = None,
) -> tuple[bytes | None, Exception | None]:
    """A Fetch partition's records with their frames decrypted.

    Args:
        blob: the partition's records.
        reader: ``reader(prefix, kek_id, kek_version, wrapped)``: the DEK's
            cipher; raises :class:`Pending` or :class:`Unreadable`.

    Returns:
        (the records to give the client, None when they are ``blob`` unchanged;
        the :class:`Pending` or :class:`Unreadable` that stopped the walk, if one did).
    """
    out: list[bytes] = []
    changed = False
    try:
        entries = batches_of(blob)
    except DecodeError as exc:
        return b"", Unreadable(f"records that do not read: {exc}")
    for header, view in entries:
        if not isinstance(header, RecordBatchHeader) or header.is_control:
            out.append(bytes(view))
            continue
        if not header.compression:
            # Uncompressed, a frame's magic is in the batch's bytes: none, no frame.
            data = bytes(view)
            if MAGIC not in data and KEY_MAGIC not in data:
                out.append(data)
                continue
        try:
            batch = decode_batch(view, verify=True, max_size=max_size)
            records = _opened(batch.records, reader, key_reader)
        except DecodeError as exc:
            return b"".join(out), Unreadable(f"batch at offset {header.base_offset}: {exc}")
        except (Pending, Unreadable) as exc:
            return b"".join(out), exc
        if records is None:
            out.append(bytes(view))
        else:
            changed = True
            out.append(_rebuilt(batch.header, records))
    if not changed:
        return None, None
    return b"".join(out), None


def _opened(
    records: list[Any],
    reader: Callable[[bytes, str, str, bytes], Any],
    key_reader: Callable[[bytes, str, str], Any] | None = None,
) -> list[Any] | None:
    """The records with their frames decrypted, None if none held a frame."""
    from cryptography.exceptions import InvalidTag

    if key_reader is not None and any(
        r.key is not None and r.key[:4] == KEY_MAGIC for r in records
    ):
        records = _keys_opened(records, key_reader)
        opened: list[Any] | None = list(records)
    else:
        opened = None

    # The records of a batch were most likely encrypted with one DEK: its frame
    # prefix, once read, is recognised without parsing the next frames.
    last: bytes | None = None
    aead: Any = None
    at = 0
    for i, r in enumerate(records):
        offset, ts, key, value, headers = r
        if value is None or value[:4] != MAGIC:
            continue
        if opened is None:
            opened = list(records)
        kek_id = kek_version = "?"
        try:
            if last is None or not value.startswith(last):
                last, kek_id, kek_version, wrapped, at = parse(value)
                aead = reader(last, kek_id, kek_version, wrapped)
            plain = aead.decrypt(value[at : at + 12], value[at + 12 :], last)
        except FrameError as exc:
            raise Unreadable(f"record at offset {offset}: {exc}") from None
        except InvalidTag:
            raise Unreadable(
                f"record at offset {offset}: ciphertext does not authenticate "
                f"under the KEK it names ({_named(value)})"
            ) from None
        except Unreadable as exc:
            raise Unreadable(f"record at offset {offset}: {exc}") from None
        opened[i] = Record(offset, ts, key, plain, headers)
    return opened


def _keys_opened(records: list[Any], key_reader: Callable[[bytes, str, str], Any]) -> list[Any]:
    """The records with their key frames decrypted."""
    from cryptography.exceptions import InvalidTag

    out = []
    for r in records:
        offset, ts, key, value, headers = r
        if key is not None and key[:4] == KEY_MAGIC:
            try:
                pre, kek_id, kek_version = parse_key(key)
                key = key_reader(pre, kek_id, kek_version).decrypt(key[len(pre) :], [pre])
            except FrameError as exc:
                raise Unreadable(f"record at offset {offset}: {exc}") from None
            except InvalidTag:
                raise Unreadable(
                    f"record at offset {offset}: its key does not authenticate"
                ) from None
            except Unreadable as exc:
                raise Unreadable(f"record at offset {offset}: {exc}") from None
            r = Record(offset, ts, key, value, headers)
        out.append(r)
    return out


def _named(value: bytes) -> str:
    """The KEK a frame names, for an error message."""
    try:
        _, kek_id, kek_version, _, _ = parse(value)
    except FrameError:
        return "unreadable"
    return f"KEK {kek_id!r} version {kek_version}"
