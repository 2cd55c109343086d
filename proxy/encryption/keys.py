"""Data keys in memory: the DEK each KEK currently encrypts with, and the DEKs
read back from frames, so the KMS is asked once per DEK, not per record.

Rules:

* Encrypting: one DEK per KEK at a time, used for at most ``max_records``
  records and ``max_age`` seconds (Kroxylicious bounds its DEKs the same way),
  then a new one is made. A request *leases* the nonces of all its records at
  once (:meth:`Deks.lease`), under a lock, so two requests encrypting at the
  same time never share a nonce; a lease that would pass the bound takes a new
  DEK instead.
* :meth:`Deks.forget` drops the encrypting DEKs (a reload, a KEK rotation):
  the next records get a DEK wrapped by the KEK's newest version.
* Decrypting: DEKs are cached by their frame prefix (KEK id, version and
  wrapped DEK, :mod:`.frame`), at most ``cache_size`` of them (the least
  recently used goes); every DEK made to encrypt is put there too. A DEK the
  KMS refused is remembered as refused for ``retry_after`` seconds, so a
  stream of bad frames does not ask the KMS once per record.
* The clock is a monotonic one given as ``now`` (seconds), never the wall clock.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from .frame import prefix as frame_prefix

__all__ = ["Dek", "Deks", "Lease"]

SALT_SIZE = 4


def _aead(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


@dataclass(slots=True)
class Dek:
    """A DEK encrypting records: its cipher, frame prefix and nonce salt."""

    kek_id: str
    aead: Any
    prefix: bytes
    salt: bytes
    made: float
    used: int = 0


@dataclass(frozen=True, slots=True)
class Lease:
    """The nonces ``start`` .. ``start + count - 1`` of ``dek``, for one request."""

    dek: Dek
    start: int
    count: int


@dataclass(slots=True)
class Deks:
    """The DEKs of one filter (see the module's rules)."""

    max_records: int = 5_000_000
    max_age: float = 3600.0
    cache_size: int = 1000
    retry_after: float = 30.0
    _current: dict[str, Dek] = field(default_factory=dict)
    _readers: OrderedDict[bytes, Any] = field(default_factory=OrderedDict)
    _refused: dict[bytes, tuple[float, str]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    made: int = 0  # DEKs made (KMS calls to wrap)
    unwrapped: int = 0  # DEKs unwrapped (KMS calls to unwrap)

    def lease(self, kek_id: str, count: int, now: float) -> Lease | None:
        """Nonces for ``count`` records under ``kek_id``'s current DEK, or None
        when it has none, or not enough left (then :meth:`install` a new one)."""
        with self._lock:
            dek = self._current.get(kek_id)
            if dek is None or now - dek.made >= self.max_age:
                return None
            if dek.used + count > self.max_records and dek.used:
                return None
            start, dek.used = dek.used, dek.used + count
            return Lease(dek, start, count)

    def install(
        self, kek_id: str, dek: bytes, kek_version: str, wrapped: bytes, now: float, count: int
    ) -> Lease:
        """Make ``dek`` (just got from the KMS) ``kek_id``'s current DEK and lease
        its first ``count`` nonces."""
        made = Dek(
            kek_id,
            _aead(dek),
            frame_prefix(kek_id, kek_version, wrapped),
            os.urandom(SALT_SIZE),
            now,
            count,
        )
        with self._lock:
            self._current[kek_id] = made
            self.made += 1
            self._remember(made.prefix, made.aead)
        return Lease(made, 0, count)

    def forget(self) -> None:
        """Drop the encrypting DEKs, and what was refused (see the rules)."""
        with self._lock:
            self._current.clear()
            self._refused.clear()

    def reader(self, prefix: bytes) -> Any:
        """The cipher of the DEK behind a frame prefix, if cached (else None)."""
        with self._lock:
            aead = self._readers.get(prefix)
            if aead is not None:
                self._readers.move_to_end(prefix)
            return aead

    def refused(self, prefix: bytes, now: float) -> str | None:
        """Why the KMS refused this frame prefix's DEK, if it did lately."""
        with self._lock:
            got = self._refused.get(prefix)
            if got is None:
                return None
            if now - got[0] >= self.retry_after:
                del self._refused[prefix]
                return None
            return got[1]

    def learn(self, prefix: bytes, dek: bytes) -> Any:
        """Cache an unwrapped DEK; returns its cipher."""
        aead = _aead(dek)
        with self._lock:
            self.unwrapped += 1
            self._remember(prefix, aead)
        return aead

    def refuse(self, prefix: bytes, why: str, now: float) -> None:
        with self._lock:
            self._refused[prefix] = (now, why)
            while len(self._refused) > self.cache_size:
                del self._refused[next(iter(self._refused))]

    def _remember(self, prefix: bytes, aead: Any) -> None:
        self._readers[prefix] = aead
        self._readers.move_to_end(prefix)
        while len(self._readers) > self.cache_size:
            self._readers.popitem(last=False)
