"""Delegation tokens in ZooKeeper, laid out as Kafka 3.9's ZooKeeper mode keeps them.

In cluster mode the tokens (KIP-48) live in ZooKeeper, so a token issued by one
broker logs in on every broker, and a renewal or expiry through any broker
counts on all. This module turns token information into znode bytes and back;
the cluster driver does the reading and writing.

============================================  =========================================
``/delegation_token/tokens/<tokenId>``        the token's information (below)
``/delegation_token/token_changes/``          ``token_change_N``: a token changed or
                                              went; its content is the token id
============================================  =========================================

A token znode holds ``{"version":3,"owner":"User%3Aalice","tokenRequester":
"User%3Aalice","renewers":["User%3Abob"],"issueTimestamp":..,"maxTimestamp":..,
"expiryTimestamp":..,"tokenId":".."}`` (principals sanitized, as Kafka's
``DelegationTokenManagerZk`` writes them).

Rules:

* Stateless and I/O-free.
* The HMAC is never written: every broker derives it from the token id and
  the secret all brokers share (``delegation.token.secret.key``), so what
  ZooKeeper holds does not let anyone log in.
* Decoding never trusts ZooKeeper's bytes: what Kafka would not write raises
  :class:`~trafka.brokerlite.cluster.zk_layout.ZkDataError` naming the path.
  Versions 1 and 2 (before the requester was kept) read with the owner as the
  requester, as Kafka reads them.
"""

from __future__ import annotations

import json

from trafka.brokerlite.cluster.zk_layout import ZkDataError

from .delegation_tokens import TokenInfo
from .zk_scram import desanitize, sanitize

__all__ = [
    "TOKENS",
    "TOKEN_CHANGES",
    "decode_token",
    "encode_token",
    "token_change_notification",
    "token_path",
]

TOKENS = "/delegation_token/tokens"
TOKEN_CHANGES = "/delegation_token/token_changes"
TOKEN_CHANGE_PREFIX = "token_change_"
_VERSION = 3


def token_path(token_id: str) -> str:
    """The token's znode.

    Raises:
        ValueError: an id that cannot be one znode name (ours never are).
    """
    if "/" in token_id or token_id in ("", ".", ".."):
        raise ValueError(f"token id {token_id!r} cannot be a znode name")
    return f"{TOKENS}/{token_id}"


def token_change_notification(token_id: str) -> tuple[str, bytes]:
    """The sequential znode announcing a change of the token: its path prefix
    (ZooKeeper appends the sequence number) and content."""
    return f"{TOKEN_CHANGES}/{TOKEN_CHANGE_PREFIX}", token_id.encode()


def encode_token(token: TokenInfo) -> bytes:
    doc = {
        "version": _VERSION,
        "owner": sanitize(token.owner),
        "tokenRequester": sanitize(token.requester),
        "renewers": [sanitize(r) for r in token.renewers],
        "issueTimestamp": token.issue_ms,
        "maxTimestamp": token.max_ms,
        "expiryTimestamp": token.expiry_ms,
        "tokenId": token.token_id,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def _int(doc: dict[str, object], key: str, path: str) -> int:
    value = doc.get(key)
    if type(value) is not int:
        raise ZkDataError(f"{path}: {key} must be a whole number, got {value!r}")
    return value


def _principal(value: object, path: str) -> str:
    if not isinstance(value, str) or ":" not in desanitize(value):
        raise ZkDataError(f"{path}: expected a principal 'Type:name', got {value!r}")
    return desanitize(value)


def decode_token(path: str, data: bytes) -> TokenInfo | None:
    """The token a znode holds (empty data: none).

    Raises:
        ZkDataError: not Kafka's document.
    """
    if not data:
        return None
    try:
        doc = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise ZkDataError(f"{path}: not JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise ZkDataError(f"{path}: expected a token object, got {doc!r}")
    version = doc.get("version")
    if type(version) is not int or not 1 <= version <= _VERSION:
        raise ZkDataError(f"{path}: unsupported version {version!r}")
    token_id = doc.get("tokenId")
    if not isinstance(token_id, str) or not token_id:
        raise ZkDataError(f"{path}: no tokenId")
    renewers = doc.get("renewers", [])
    if not isinstance(renewers, list):
        raise ZkDataError(f"{path}: renewers must be a list, got {renewers!r}")
    owner = _principal(doc.get("owner"), path)
    requester = owner if version < 3 else _principal(doc.get("tokenRequester"), path)
    return TokenInfo(
        token_id=token_id,
        owner=owner,
        requester=requester,
        renewers=tuple(_principal(r, path) for r in renewers),
        issue_ms=_int(doc, "issueTimestamp", path),
        expiry_ms=_int(doc, "expiryTimestamp", path),
        max_ms=_int(doc, "maxTimestamp", path),
    )
