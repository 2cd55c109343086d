"""The ciphertext frame: what an encrypted record value holds on the broker.

A record value the proxy encrypted is one frame, self-describing, so a
consumer straight to the broker sees ciphertext that is recognisably the
proxy's, and any proxy holding the KMS's access can read it back::

    offset  size  field
    0       4     magic: 00 54 4B 45 ("\\0TKE")
    4       1     frame version: 1
    5       1     n: the KEK id's length (1-255)
    6       n     KEK id (UTF-8): the key-encryption key's name in the KMS
    .       1     m: the KEK version's length (1-255)
    .       m     KEK version (UTF-8): which version of the KEK wrapped the DEK
    .       2     w: the wrapped DEK's length (big-endian, 1-65535)
    .       w     the wrapped DEK, as the KMS returned it
    .       12    nonce
    .       rest  AES-256-GCM ciphertext of the value, then its 16-byte tag

Rules and invariants:

* Everything before the nonce (the *prefix*) is the AEAD's associated data:
  the ciphertext authenticates the KEK and DEK it names, so a frame whose
  header was altered fails to decrypt, as a changed ciphertext does.
* The prefix is the same for every record encrypted with one DEK: it is made
  once per DEK (:func:`prefix`), and a reader caches DEKs by it.
* A nonce is never used twice with one DEK: it is the DEK's random 4-byte salt
  then a 64-bit count of the records encrypted with it (the proxy keeps the
  count; a DEK is never persisted, so no other process holds it).
* A null value (a tombstone) is not encrypted: it stays null, so compaction
  still deletes. An empty value is encrypted (its frame holds only the tag).
* :func:`parse` refuses what is not a whole frame of a known version with
  :class:`FrameError`; a value not starting with the magic is not a frame
  (:func:`is_frame`).

Record keys, when a topic's keys are encrypted too, are *key frames*,
deterministic (the same key gives the same frame, so compaction and
partitioning by key still work)::

    offset  size  field
    0       4     magic: 00 54 4B 4B ("\\0TKK")
    4       1     frame version: 1
    5       1     n: the KEK id's length, then n bytes: the KEK id (UTF-8)
    .       1     m: the KEK version's length, then m bytes: the KEK version
    .       rest  AES-SIV (RFC 5297, 512-bit key) of the key: its 16-byte
                  synthetic IV, then the ciphertext

The AES-SIV key is derived from that KEK version (HKDF-SHA256, so only a KMS
that holds the KEK's bytes, the key file, can encrypt keys); the bytes before
the SIV are its associated data.
"""

from __future__ import annotations

import struct

__all__ = [
    "KEY_MAGIC",
    "MAGIC",
    "NONCE_SIZE",
    "TAG_SIZE",
    "VERSION",
    "FrameError",
    "is_frame",
    "key_prefix",
    "parse_key",
    "nonce",
    "parse",
    "prefix",
]

MAGIC = b"\x00TKE"
KEY_MAGIC = b"\x00TKK"
VERSION = 1
NONCE_SIZE = 12
TAG_SIZE = 16
_U16 = struct.Struct(">H")
_NONCE_TAIL = struct.Struct(">Q")


class FrameError(ValueError):
    """A value that starts as a frame but cannot be read as one."""


def prefix(kek_id: str, kek_version: str, wrapped: bytes) -> bytes:
    """The frame's bytes before the nonce, for one DEK.

    Raises:
        ValueError: an id, version or wrapped DEK too long (or empty) for the frame.
    """
    kid, kver = kek_id.encode(), kek_version.encode()
    for what, field, most in (("KEK id", kid, 255), ("KEK version", kver, 255)):
        if not 0 < len(field) <= most:
            raise ValueError(f"{what} must be 1-{most} bytes of UTF-8, not {len(field)}")
    if not 0 < len(wrapped) <= 0xFFFF:
        raise ValueError(f"a wrapped DEK must be 1-65535 bytes, not {len(wrapped)}")
    return b"".join(
        (
            MAGIC,
            bytes((VERSION, len(kid))),
            kid,
            bytes((len(kver),)),
            kver,
            _U16.pack(len(wrapped)),
            wrapped,
        )
    )


def nonce(salt: bytes, count: int) -> bytes:
    """The nonce of a DEK's ``count``-th record (``salt``: its 4 random bytes)."""
    return salt + _NONCE_TAIL.pack(count)


def is_frame(value: bytes | None) -> bool:
    """Whether a record value is (meant to be) a frame: it starts with the magic."""
    return value is not None and value[:4] == MAGIC


def parse(value: bytes) -> tuple[bytes, str, str, bytes, int]:
    """Read a frame's header.

    Returns:
        (prefix, KEK id, KEK version, wrapped DEK, where the nonce starts).

    Raises:
        FrameError: not the magic, an unknown version, or cut short.
    """
    if value[:4] != MAGIC:
        raise FrameError("not an encrypted record (no frame magic)")
    if len(value) < 6:
        raise FrameError("frame cut short in its header")
    if value[4] != VERSION:
        raise FrameError(f"unknown frame version {value[4]} (this proxy reads {VERSION})")
    try:
        pos = 6 + value[5]
        kek_id = value[6:pos].decode()
        n = value[pos]
        kek_version = value[pos + 1 : pos + 1 + n].decode()
        pos += 1 + n
        (w,) = _U16.unpack_from(value, pos)
    except (IndexError, struct.error, UnicodeDecodeError) as exc:
        raise FrameError(f"frame header unreadable: {exc}") from None
    pos += 2
    wrapped = value[pos : pos + w]
    pos += w
    if len(wrapped) != w or not kek_id or not kek_version or w == 0:
        raise FrameError("frame header cut short or empty")
    if len(value) < pos + NONCE_SIZE + TAG_SIZE:
        raise FrameError("frame cut short before its ciphertext's tag")
    return value[:pos], kek_id, kek_version, wrapped, pos


def key_prefix(kek_id: str, kek_version: str) -> bytes:
    """A key frame's bytes before its SIV.

    Raises:
        ValueError: an id or version too long (or empty) for the frame.
    """
    kid, kver = kek_id.encode(), kek_version.encode()
    if not (0 < len(kid) <= 255 and 0 < len(kver) <= 255):
        raise ValueError("a KEK id and version must be 1-255 bytes of UTF-8")
    return b"".join((KEY_MAGIC, bytes((VERSION, len(kid))), kid, bytes((len(kver),)), kver))


def parse_key(key: bytes) -> tuple[bytes, str, str]:
    """Read a key frame's header: (prefix, KEK id, KEK version).

    Raises:
        FrameError: not the key magic, an unknown version, or cut short.
    """
    if key[:4] != KEY_MAGIC or len(key) < 6:
        raise FrameError("not an encrypted key")
    if key[4] != VERSION:
        raise FrameError(f"unknown key frame version {key[4]} (this proxy reads {VERSION})")
    try:
        pos = 6 + key[5]
        kek_id = key[6:pos].decode()
        n = key[pos]
        kek_version = key[pos + 1 : pos + 1 + n].decode()
    except (IndexError, UnicodeDecodeError) as exc:
        raise FrameError(f"key frame header unreadable: {exc}") from None
    pos += 1 + n
    if not kek_id or len(kek_version.encode()) != n or not n or len(key) < pos + 16:
        raise FrameError("key frame cut short")
    return key[:pos], kek_id, kek_version
