"""Key management for record encryption: where the key-encryption keys (KEKs)
live, behind one small interface, and the KMS that needs no service (a key file).

Rules:

* A KMS makes data keys (DEKs) and unwraps them. ``new_dek(kek_id)`` returns a
  fresh 32-byte DEK, the KEK version that wrapped it, and the wrapped DEK;
  ``unwrap(kek_id, kek_version, wrapped)`` returns the DEK. The proxy never
  writes a DEK in the clear anywhere; it keeps them in memory only.
* Errors are two kinds: :class:`KmsRefused`, the KMS will never unwrap this
  (an unknown KEK or version, a wrapped DEK that does not authenticate), and
  :class:`KmsUnavailable`, try again later (the service did not answer).
* ``inline``: whether ``unwrap`` is quick and local (no network), so the proxy
  may call it on its event loop; otherwise it runs on a worker thread.
* Rotation: a KEK's newest version wraps new DEKs; every older version the KMS
  still holds unwraps what it wrapped, so old records stay readable without
  being encrypted again.

:class:`KeyFileKms` keeps KEKs in a TOML file, a table per KEK whose keys are
versions (integers) and values 32 random bytes in base64::

    [keks.orders]
    1 = "q0fZ...="
    2 = "Xw8B...="

The highest version wraps new DEKs. Rotation: add a version
(:func:`add_key_version`, or ``python -m trafka.proxy.encryption.kms FILE
KEK``), then SIGHUP the proxy (or let it notice: the file is read again when
it changed, before a new DEK is made or an unknown version is asked for).
A DEK is wrapped with AES-256-GCM under the KEK: nonce (12 bytes), then the
ciphertext and tag (48 bytes), with the KEK's id and version as associated data.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import sys
import threading
import tomllib
from pathlib import Path
from typing import Any, Protocol

__all__ = [
    "DEK_SIZE",
    "KeyFileKms",
    "Kms",
    "KmsError",
    "KmsRefused",
    "KmsUnavailable",
    "add_key_version",
]

DEK_SIZE = 32


class KmsError(Exception):
    """A KMS could not make or unwrap a DEK."""


class KmsRefused(KmsError):
    """The KMS will not unwrap this DEK (unknown KEK or version, not authentic)."""


class KmsUnavailable(KmsError):
    """The KMS did not answer: try again later."""


class Kms(Protocol):
    """What record encryption needs of a KMS (see the module's rules)."""

    inline: bool

    def new_dek(self, kek_id: str) -> tuple[bytes, str, bytes]:
        """A fresh DEK: (the DEK, the KEK version that wrapped it, the wrapped DEK)."""
        ...

    def unwrap(self, kek_id: str, kek_version: str, wrapped: bytes) -> bytes:
        """The DEK ``wrapped`` holds."""
        ...

    def check(self, kek_id: str) -> str | None:
        """Why ``kek_id`` cannot wrap DEKs (None: it can), for the settings' check."""
        ...

    def key_key(self, kek_id: str, kek_version: str | None) -> tuple[str, bytes]:
        """The 64-byte AES-SIV key that encrypts record keys under a KEK version
        (None: the KEK's first, which rotation leaves in place, so a key's
        frame never changes): (the version, the key).

        Raises:
            KmsRefused: the KMS cannot derive one (it holds no KEK bytes: AWS).
        """
        ...

    def close(self) -> None:
        """Release what the KMS holds."""
        ...


def _aesgcm(key: bytes) -> Any:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    return AESGCM(key)


def read_key_file(path: Path) -> dict[str, dict[int, bytes]]:
    """The KEKs of a key file: {KEK id: {version: key}}.

    Raises:
        ValueError: the file cannot be read, or a KEK is not as the module doc says.
    """
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ValueError(f"key file {path}: {exc}") from None
    unknown = sorted(set(data) - {"keks"})
    if unknown:
        raise ValueError(f"key file {path}: unknown table {unknown[0]!r} (only [keks.<id>])")
    keks: dict[str, dict[int, bytes]] = {}
    for kek_id, versions in data.get("keks", {}).items():
        if not isinstance(versions, dict) or not versions:
            raise ValueError(f"key file {path}: keks.{kek_id} must be a table of versions")
        keks[kek_id] = {}
        for version, text in versions.items():
            if not version.isdigit() or int(version) < 1:
                raise ValueError(f"key file {path}: keks.{kek_id}: version {version!r} is not >= 1")
            try:
                key = base64.b64decode(text, validate=True) if isinstance(text, str) else b""
            except binascii.Error:
                key = b""
            if len(key) != DEK_SIZE:
                raise ValueError(
                    f"key file {path}: keks.{kek_id}.{version} is not 32 bytes in base64"
                )
            keks[kek_id][int(version)] = key
    return keks


class KeyFileKms:
    """KEKs in a TOML key file (see the module doc): no service needed.

    Args:
        path: the key file.

    Raises:
        ValueError: the file cannot be read as a key file.
    """

    inline = True

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._keks: dict[str, dict[int, bytes]] = {}
        self._reload(force=True)

    def _reload(self, force: bool = False) -> None:
        try:
            st = self.path.stat()
        except OSError as exc:
            if force:
                raise ValueError(f"key file {self.path}: {exc}") from None
            return  # keep the keys read before
        stamp = (st.st_mtime_ns, st.st_size)
        if force or stamp != self._stamp:
            keks = read_key_file(self.path)
            with self._lock:
                self._keks, self._stamp = keks, stamp

    def versions(self, kek_id: str) -> dict[int, bytes]:
        """The KEK's versions as last read (reading the file again if it changed)."""
        try:
            self._reload()
        except ValueError:
            pass  # a file being rewritten: keep what was read
        return self._keks.get(kek_id, {})

    def check(self, kek_id: str) -> str | None:
        if not self.versions(kek_id):
            return f"KEK {kek_id!r} is not in the key file {self.path}"
        return None

    def new_dek(self, kek_id: str) -> tuple[bytes, str, bytes]:
        versions = self.versions(kek_id)
        if not versions:
            raise KmsRefused(f"KEK {kek_id!r} is not in the key file {self.path}")
        version = max(versions)
        dek = os.urandom(DEK_SIZE)
        nonce = os.urandom(12)
        aad = f"{kek_id}\0{version}".encode()
        return dek, str(version), nonce + _aesgcm(versions[version]).encrypt(nonce, dek, aad)

    def unwrap(self, kek_id: str, kek_version: str, wrapped: bytes) -> bytes:
        from cryptography.exceptions import InvalidTag

        key = self.versions(kek_id).get(int(kek_version)) if kek_version.isdigit() else None
        if key is None:
            raise KmsRefused(f"KEK {kek_id!r} version {kek_version!r} is not in the key file")
        aad = f"{kek_id}\0{kek_version}".encode()
        try:
            dek: bytes = _aesgcm(key).decrypt(wrapped[:12], wrapped[12:], aad)
        except (InvalidTag, ValueError):
            raise KmsRefused(
                f"a DEK wrapped by KEK {kek_id!r} version {kek_version} does not authenticate"
            ) from None
        if len(dek) != DEK_SIZE:
            raise KmsRefused("the wrapped DEK is not 32 bytes")
        return dek

    def key_key(self, kek_id: str, kek_version: str | None) -> tuple[str, bytes]:
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.kdf.hkdf import HKDF

        versions = self.versions(kek_id)
        if kek_version is None and versions:
            kek_version = str(min(versions))
        key = versions.get(int(kek_version)) if kek_version and kek_version.isdigit() else None
        if key is None or kek_version is None:
            raise KmsRefused(f"KEK {kek_id!r} version {kek_version!r} is not in the key file")
        info = f"trafka record keys\0{kek_id}\0{kek_version}".encode()
        derived = HKDF(algorithm=hashes.SHA256(), length=64, salt=None, info=info).derive(key)
        return kek_version, derived

    def close(self) -> None:
        pass


def add_key_version(path: str | os.PathLike[str], kek_id: str) -> int:
    """Add a new version of ``kek_id`` (32 random bytes) to the key file, made if
    missing (mode 0600), and return its number: the rotation of a key-file KEK.

    Raises:
        ValueError: the file exists but is not a key file, or ``kek_id`` is not
            1-200 of ``A-Z a-z 0-9 . _ - : / @ +``.
    """
    if not re.fullmatch(r"[A-Za-z0-9._:/@+-]{1,200}", kek_id):
        raise ValueError(f"KEK id {kek_id!r}: use 1-200 of A-Z a-z 0-9 . _ - : / @ +")
    path = Path(path)
    keks = read_key_file(path) if path.exists() else {}
    version = max(keks.get(kek_id, {0: b""}), default=0) + 1
    keks.setdefault(kek_id, {})[version] = os.urandom(DEK_SIZE)
    lines = []
    for name, versions in keks.items():
        lines.append(f'[keks."{name}"]')
        lines += [f'{v} = "{base64.b64encode(k).decode()}"' for v, k in sorted(versions.items())]
        lines.append("")
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines))
    os.replace(tmp, path)
    return version


if __name__ == "__main__":  # python -m trafka.proxy.encryption.kms FILE KEK
    if len(sys.argv) != 3:
        sys.exit("usage: python -m trafka.proxy.encryption.kms KEY_FILE KEK_ID")
    print(f"{sys.argv[2]}: version {add_key_version(sys.argv[1], sys.argv[2])} added")
