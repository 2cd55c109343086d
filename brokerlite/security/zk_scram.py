"""SCRAM credentials in ZooKeeper, laid out as Kafka 3.9's ZooKeeper mode keeps them.

In cluster mode the credentials set through AlterUserScramCredentials live in
ZooKeeper, so a user created through one broker logs in on every broker. This
module turns znode bytes into credentials and back; the cluster driver does the
reading and writing.

=======================================  ===================================================
``/config/users/<user>``                 ``{"version":1,"config":{"SCRAM-SHA-256":"salt=..,
                                         stored_key=..,server_key=..,iterations=4096"}}``
``/config/changes/config_change_N``      ``{"version":2,"entity_path":"users/<user>"}``
=======================================  ===================================================

Rules:

* Stateless and I/O-free.
* A user's znode is named as Kafka names it: the user name sanitized
  (URL-encoded), so any name, ``/`` included, has one znode.
* Only salted hashes are written: the salt, StoredKey and ServerKey in base64
  and the iteration count (Kafka's ``ScramCredentialUtils`` form), never a
  password nor a salted password.
* A user's znode may hold other configs (Kafka keeps user quotas there): they
  are kept as they are when the SCRAM entries change.
* Decoding never trusts ZooKeeper's bytes: what Kafka would not write raises
  :class:`~trafka.brokerlite.cluster.zk_layout.ZkDataError` naming the path.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping
from urllib.parse import quote, unquote

from trafka.brokerlite.cluster.zk_layout import (
    CONFIG_CHANGES,
    ZkDataError,
)
from trafka.brokerlite.cluster.zk_layout import (
    config_change_notification as _entity_change,
)
from trafka.codec.sasl import SCRAM_MECHANISM_TYPES, ScramCredential

__all__ = [
    "CONFIG_CHANGES",
    "CONFIG_USERS",
    "config_change_notification",
    "decode_user_config",
    "desanitize",
    "encode_user_config",
    "sanitize",
    "scram_of",
    "updated_user_config",
    "user_config_path",
]

CONFIG_USERS = "/config/users"


def sanitize(name: str) -> str:
    """A user name as Kafka's ``Sanitizer`` writes it in a znode path: URL-encoded
    (UTF-8), with ``*`` and ``~`` encoded too and a space as ``%20``."""
    return quote(name, safe="").replace("~", "%7E")


def desanitize(name: str) -> str:
    return unquote(name)


def user_config_path(user: str) -> str:
    return f"{CONFIG_USERS}/{sanitize(user)}"


def config_change_notification(user: str) -> tuple[str, bytes]:
    """The sequential znode announcing a change of ``user``'s config: its path
    prefix (ZooKeeper appends the sequence number) and content."""
    return _entity_change(f"users/{sanitize(user)}")


def decode_user_config(path: str, data: bytes) -> dict[str, str]:
    """A user's config entries (empty or null data: none).

    Raises:
        ZkDataError: not Kafka's document.
    """
    if not data or data.strip() == b"null":
        return {}
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ZkDataError(f"{path}: not JSON: {exc}") from None
    config = doc.get("config") if isinstance(doc, dict) else None
    if not isinstance(config, dict) or not all(isinstance(v, str) for v in config.values()):
        raise ZkDataError(f"{path}: expected {{'version': 1, 'config': {{...}}}}, got {doc!r}")
    return dict(config)


def encode_user_config(config: Mapping[str, str]) -> bytes:
    return json.dumps({"version": 1, "config": dict(config)}, separators=(",", ":")).encode()


def _credential_text(credential: ScramCredential) -> str:
    def b64(data: bytes) -> str:
        return base64.b64encode(data).decode("ascii")

    return (
        f"salt={b64(credential.salt)},stored_key={b64(credential.stored_key)},"
        f"server_key={b64(credential.server_key)},iterations={credential.iterations}"
    )


def scram_of(path: str, config: Mapping[str, str]) -> dict[str, ScramCredential]:
    """The SCRAM credentials among a user's config entries, by mechanism name.

    Raises:
        ZkDataError: a SCRAM entry that is not Kafka's form.
    """
    out: dict[str, ScramCredential] = {}
    for mechanism in SCRAM_MECHANISM_TYPES:
        text = config.get(mechanism)
        if text is None:
            continue
        fields = dict(part.partition("=")[::2] for part in text.split(","))
        try:
            iterations = fields["iterations"]
            if not (iterations.isascii() and iterations.isdigit()):
                raise ValueError(f"iterations {iterations!r}")
            out[mechanism] = ScramCredential(
                mechanism=mechanism,
                salt=base64.b64decode(fields["salt"], validate=True),
                iterations=int(iterations),
                stored_key=base64.b64decode(fields["stored_key"], validate=True),
                server_key=base64.b64decode(fields["server_key"], validate=True),
            )
        except (KeyError, ValueError, binascii.Error) as exc:
            raise ZkDataError(f"{path}: malformed {mechanism} credential: {exc}") from None
    return out


def updated_user_config(
    config: Mapping[str, str], changes: Mapping[str, ScramCredential | None]
) -> dict[str, str]:
    """A user's config after SCRAM changes (mechanism -> credential, None: delete)."""
    out = dict(config)
    for mechanism, credential in changes.items():
        if credential is None:
            out.pop(mechanism, None)
        else:
            out[mechanism] = _credential_text(credential)
    return out
